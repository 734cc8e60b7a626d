//! Out-of-band connection set-up over TCP: what two peers tell each other before their queue
//! pairs can talk.
//!
//! * [`PingpongDest`]: `ibv_rc_pingpong`'s message (rdma-core `libibverbs/examples/rc_pingpong.c`,
//!   `pp_client_exch_dest` / `pp_server_exch_dest`): `"%04x:%06x:%06x:%s"` — LID, QPN, PSN and
//!   the GID as 32 hex digits — plus a NUL, 52 bytes; the client writes first, the server
//!   answers after moving its queue pair to RTS, the client closes with `"done\0"`.
//! * [`PerfKey`]: perftest's per-queue-pair key message (`perftest_communication.c`,
//!   `KEY_PRINT_FMT_GID`): `"%04x:%04x:%06x:%06x:%08x:%016llx:"` — LID, outstanding reads, QPN,
//!   PSN, rkey, virtual address — then the 16 GID bytes as `"%02x:"` each and `"%08x:"` for the
//!   SRQ number, NUL-terminated, 108 bytes.
//! * perftest's other messages (perftest 4.5, version string "6.06"): [`PerftestVersion`]
//!   (16 bytes), the system data (two big-endian `u32`s: cycle buffer and cache line), the
//!   path MTU ([`mtu_to_wire`], the IB enum as decimal text), and [`BwReport`] (what a
//!   bandwidth client tells the server at the end). Every step is lock-step ([`swap`]): the
//!   client writes then reads, the server reads then writes.
//! * [`PerfParams`]: what irn perf adds when both ends are irn — they learn it from a marker
//!   after the NUL of the version string, which perftest does not read — carrying what perftest
//!   agrees on only through its command-line flags (operation, size, iterations, queue pairs)
//!   and what irn adds (the mode, IRN or RoCE, which both ends must agree on, and the UDP port).
//!
//! Every parser takes untrusted bytes and returns an error naming what is wrong; none panics.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::{Gid, QpMode};

/// What went wrong in an exchange.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The TCP connection failed or closed early.
    // Its cause is in the message, not also a `source` (which an error chain would print a
    // second time).
    #[error("out-of-band exchange: {0}")]
    Io(std::io::Error),
    /// The peer closed the connection before its message was whole: it stopped (its own
    /// output says why — a refused option, a failed work request), or was stopped.
    #[error(
        "out-of-band exchange: the peer closed the connection (it stopped: its own output \
         says why)"
    )]
    Closed,
    /// The peer's message is not in the expected format.
    #[error("out-of-band exchange: bad {what} message {text:?}")]
    Format {
        /// Which message.
        what: &'static str,
        /// What arrived (printable part).
        text: String,
    },
}

impl From<std::io::Error> for ExchangeError {
    fn from(e: std::io::Error) -> ExchangeError {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe => ExchangeError::Closed,
            _ => ExchangeError::Io(e),
        }
    }
}

fn bad(what: &'static str, bytes: &[u8]) -> ExchangeError {
    ExchangeError::Format {
        what,
        text: String::from_utf8_lossy(bytes)
            .trim_end_matches('\0')
            .chars()
            .take(120)
            .collect(),
    }
}

/// The text of a NUL-terminated fixed-size message.
fn text<'a>(what: &'static str, bytes: &'a [u8]) -> Result<&'a str, ExchangeError> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    std::str::from_utf8(&bytes[..end]).map_err(|_| bad(what, bytes))
}

fn hex<T: TryFrom<u64>>(
    what: &'static str,
    all: &[u8],
    s: &str,
    digits: usize,
) -> Result<T, ExchangeError> {
    if s.len() != digits {
        return Err(bad(what, all));
    }
    u64::from_str_radix(s, 16)
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| bad(what, all))
}

/// `ibv_rc_pingpong`'s destination message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingpongDest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Queue pair number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID.
    pub gid: Gid,
}

impl PingpongDest {
    /// Size on the wire: `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
    pub const LEN: usize = 52;

    /// The 52 bytes.
    pub fn to_wire(&self) -> [u8; Self::LEN] {
        let s = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.gid
        );
        let mut out = [0u8; Self::LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses the 52 bytes.
    pub fn parse(bytes: &[u8]) -> Result<PingpongDest, ExchangeError> {
        const W: &str = "rc_pingpong destination";
        let t = text(W, bytes)?;
        let f: Vec<&str> = t.split(':').collect();
        let [lid, qpn, psn, gid] = f[..] else {
            return Err(bad(W, bytes));
        };
        Ok(PingpongDest {
            lid: hex(W, bytes, lid, 4)?,
            qpn: hex(W, bytes, qpn, 6)?,
            psn: hex(W, bytes, psn, 6)?,
            gid: gid.parse().map_err(|_| bad(W, bytes))?,
        })
    }

    /// How `ibv_rc_pingpong` prints it: `LID 0x0000, QPN 0x…, PSN 0x…, GID ::ffff:a.b.c.d`.
    pub fn describe(&self) -> String {
        let ip = std::net::Ipv6Addr::from(self.gid.0);
        format!(
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {ip}",
            self.lid, self.qpn, self.psn
        )
    }
}

/// perftest's key message for one queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfKey {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Reads and atomics outstanding at once.
    pub out_reads: u16,
    /// Queue pair number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// rkey of the buffer.
    pub rkey: u32,
    /// Virtual address of the buffer.
    pub vaddr: u64,
    /// GID.
    pub gid: Gid,
    /// SRQ number (0: none).
    pub srqn: u32,
}

impl PerfKey {
    /// Size on the wire.
    pub const LEN: usize = 108;

    /// The 108 bytes.
    pub fn to_wire(&self) -> [u8; Self::LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.0 {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; Self::LEN];
        let n = s.len().min(Self::LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parses the 108 bytes.
    pub fn parse(bytes: &[u8]) -> Result<PerfKey, ExchangeError> {
        const W: &str = "perftest key";
        let t = text(W, bytes)?;
        let f: Vec<&str> = t.split(':').collect();
        // 6 fields, 16 GID bytes, the SRQ number, and the empty string after the last ':'.
        if f.len() != 24 || !f[23].is_empty() {
            return Err(bad(W, bytes));
        }
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = hex(W, bytes, f[6 + i], 2)?;
        }
        Ok(PerfKey {
            lid: hex(W, bytes, f[0], 4)?,
            out_reads: hex(W, bytes, f[1], 4)?,
            qpn: hex(W, bytes, f[2], 6)?,
            psn: hex(W, bytes, f[3], 6)?,
            rkey: hex(W, bytes, f[4], 8)?,
            vaddr: hex(W, bytes, f[5], 16)?,
            gid: Gid(gid),
            srqn: hex(W, bytes, f[22], 8)?,
        })
    }

    /// Size of the binary form perftest sends over an RDMA CM connection (`-R`, `-z`).
    pub const BINARY_LEN: usize = 56;

    /// The binary form: perftest's `struct pingpong_dest` as `rdma_write_keys` sends it with
    /// `HAVE_ENDIAN` — `lid`, `out_reads`, `qpn`, `psn`, `rkey` (4 bytes each, big-endian),
    /// 4 bytes of padding, `vaddr` (8), the GID (16), `srqn` and `gid_index` (4 each).
    pub fn to_binary(&self, gid_index: u32) -> [u8; Self::BINARY_LEN] {
        let mut out = [0u8; Self::BINARY_LEN];
        out[0..4].copy_from_slice(&u32::from(self.lid).to_be_bytes());
        out[4..8].copy_from_slice(&u32::from(self.out_reads).to_be_bytes());
        out[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        out[12..16].copy_from_slice(&self.psn.to_be_bytes());
        out[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        out[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        out[32..48].copy_from_slice(&self.gid.0);
        out[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        out[52..56].copy_from_slice(&gid_index.to_be_bytes());
        out
    }

    /// Parses the binary form (`rdma_read_keys`, which ignores `srqn` and `gid_index`: so
    /// does this). Values beyond the fields' ranges are an error.
    pub fn parse_binary(bytes: &[u8]) -> Result<PerfKey, ExchangeError> {
        const W: &str = "perftest key (binary)";
        if bytes.len() < Self::BINARY_LEN {
            return Err(ExchangeError::Format {
                what: W,
                text: format!("{} bytes, not {}", bytes.len(), Self::BINARY_LEN),
            });
        }
        let u32_at = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let (lid, out_reads) = (u32_at(0), u32_at(4));
        let (qpn, psn) = (u32_at(8), u32_at(12));
        if lid > 0xffff || out_reads > 0xffff || qpn > 0xff_ffff || psn > 0xff_ffff {
            return Err(ExchangeError::Format {
                what: W,
                text: format!("lid {lid}, out_reads {out_reads}, qpn {qpn:#x}, psn {psn:#x}"),
            });
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&bytes[32..48]);
        Ok(PerfKey {
            lid: lid as u16,
            out_reads: out_reads as u16,
            qpn,
            psn,
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(bytes[24..32].try_into().expect("8 bytes")),
            gid: Gid(gid),
            srqn: 0,
        })
    }
}

/// perftest's version message (`exchange_versions`): the version as a NUL-terminated string in
/// 16 bytes. perftest reads it as a C string, so irn puts a marker after the NUL to recognise
/// another irn; a peer whose version text is below 5.70 speaks an older exchange (perftest
/// itself refuses it: `check_version_compatibility`).
#[derive(Debug, Clone, PartialEq)]
pub struct PerftestVersion {
    /// The version text ("6.06").
    pub text: String,
    /// The peer is irn.
    pub irn: bool,
}

impl PerftestVersion {
    /// Bytes on the wire.
    pub const LEN: usize = 16;
    /// The version irn speaks: perftest 4.5's.
    pub const OURS: &'static str = "6.06";
    const MARK: &'static [u8] = b"irn1";

    /// irn's message: "6.06", NUL, the irn marker.
    pub fn ours() -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(Self::OURS.as_bytes());
        b[5..5 + Self::MARK.len()].copy_from_slice(Self::MARK);
        b
    }

    /// Parses a peer's message; an error if it is not a version perftest 6.06 interoperates
    /// with (5.70 or later).
    pub fn parse(bytes: &[u8]) -> Result<PerftestVersion, ExchangeError> {
        const W: &str = "perftest version";
        if bytes.len() != Self::LEN {
            return Err(bad(W, bytes));
        }
        let t = text(W, bytes)?;
        let v: f64 = t.parse().map_err(|_| bad(W, bytes))?;
        if !(5.70..100.0).contains(&v) {
            return Err(bad(W, bytes));
        }
        // A version text filling all 16 bytes leaves no NUL and nothing after it.
        let rest = bytes.get(t.len() + 1..).unwrap_or_default();
        Ok(PerftestVersion {
            text: t.to_string(),
            irn: rest.starts_with(Self::MARK),
        })
    }
}

/// perftest's path-MTU message (`check_mtu`): the IB MTU enum (1 = 256 … 5 = 4096) as one
/// decimal digit and a NUL.
pub fn mtu_to_wire(mtu: u32) -> [u8; 2] {
    let e = match mtu {
        256 => b'1',
        512 => b'2',
        2048 => b'4',
        4096 => b'5',
        _ => b'3',
    };
    [e, 0]
}

/// Parses a path-MTU message into bytes.
pub fn mtu_from_wire(bytes: &[u8]) -> Result<u32, ExchangeError> {
    match bytes {
        [b'1', 0] => Ok(256),
        [b'2', 0] => Ok(512),
        [b'3', 0] => Ok(1024),
        [b'4', 0] => Ok(2048),
        [b'5', 0] => Ok(4096),
        _ => Err(bad("perftest MTU", bytes)),
    }
}

/// The bandwidth report a perftest client sends its server at the end (`xchg_bw_reports`):
/// size and iterations as big-endian `u64`s, then peak and average bandwidth and message rate
/// as big-endian IEEE doubles (perftest's own units: MB/s unless `--report_gbits`, Mpps).
/// A perftest server sends its own, uninitialised, back: only the client's is meaningful.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// BW peak.
    pub bw_peak: f64,
    /// BW average.
    pub bw_avg: f64,
    /// Message rate.
    pub msg_rate: f64,
}

impl BwReport {
    /// Bytes on the wire.
    pub const LEN: usize = 40;

    /// The message.
    pub fn to_wire(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..8].copy_from_slice(&self.size.to_be_bytes());
        b[8..16].copy_from_slice(&self.iters.to_be_bytes());
        b[16..24].copy_from_slice(&self.bw_peak.to_be_bytes());
        b[24..32].copy_from_slice(&self.bw_avg.to_be_bytes());
        b[32..40].copy_from_slice(&self.msg_rate.to_be_bytes());
        b
    }

    /// Parses one (any 40 bytes are a report; the values may be nonsense).
    pub fn parse(bytes: &[u8]) -> Result<BwReport, ExchangeError> {
        let Ok(b) = <&[u8; Self::LEN]>::try_from(bytes) else {
            return Err(bad("perftest report", bytes));
        };
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            w
        };
        Ok(BwReport {
            size: u64::from_be_bytes(word(0)),
            iters: u64::from_be_bytes(word(1)),
            bw_peak: f64::from_be_bytes(word(2)),
            bw_avg: f64::from_be_bytes(word(3)),
            msg_rate: f64::from_be_bytes(word(4)),
        })
    }
}

/// One lock-step step of perftest's exchange (`ctx_xchg_data_ethernet`): the client writes
/// `mine` and then reads `n` bytes; the server reads `n` bytes and then writes `mine`. The
/// read waits at most `timeout`.
pub fn swap(
    s: &mut TcpStream,
    client: bool,
    mine: &[u8],
    n: usize,
    timeout: Duration,
) -> Result<Vec<u8>, ExchangeError> {
    if client {
        write_all(s, mine)?;
        read_exact(s, n, timeout)
    } else {
        let theirs = read_exact(s, n, timeout)?;
        write_all(s, mine)?;
        Ok(theirs)
    }
}

/// A text message in a fixed-size NUL-padded field (irn's additions to perftest's exchange).
pub fn padded<const N: usize>(text: &str) -> [u8; N] {
    let mut b = [0u8; N];
    let t = text.as_bytes();
    let n = t.len().min(N - 1);
    b[..n].copy_from_slice(&t[..n]);
    b
}

/// The text of a NUL-padded field.
pub fn unpadded(bytes: &[u8]) -> Result<&str, ExchangeError> {
    text("irn message", bytes)
}

/// The operation an `irn perf` run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfOp {
    /// RDMA Write.
    Write,
    /// RDMA Read.
    Read,
    /// Send / Receive.
    Send,
    /// Fetch-and-add.
    Atomic,
}

impl PerfOp {
    /// `write`, `read`, `send`, `atomic`.
    pub fn name(self) -> &'static str {
        match self {
            PerfOp::Write => "write",
            PerfOp::Read => "read",
            PerfOp::Send => "send",
            PerfOp::Atomic => "atomic",
        }
    }
}

impl std::str::FromStr for PerfOp {
    type Err = String;
    fn from_str(s: &str) -> Result<PerfOp, String> {
        match s {
            "write" => Ok(PerfOp::Write),
            "read" => Ok(PerfOp::Read),
            "send" => Ok(PerfOp::Send),
            "atomic" => Ok(PerfOp::Atomic),
            _ => Err(format!(
                "operation is write, read, send or atomic, not {s:?}"
            )),
        }
    }
}

/// The most queue pairs an `irn perf` test connects: 10 000 and some room.
pub const MAX_PERF_QPS: u32 = 16_384;

/// The parameters an `irn perf` client proposes and the server adopts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfParams {
    /// Operation.
    pub op: PerfOp,
    /// Message size in bytes.
    pub size: u64,
    /// Iterations per queue pair.
    pub iters: u64,
    /// Queue pairs.
    pub qps: u32,
    /// Loss recovery both ends use.
    pub mode: QpMode,
    /// Latency test (one operation outstanding) instead of bandwidth.
    pub latency: bool,
    /// Data checked.
    pub verify: bool,
    /// The sender's UDP port.
    pub udp_port: u16,
    /// The sender's device takes coalesced datagrams (`Device::accepts_gso`): the receiver of
    /// this line may send it UDP GSO batches. Optional on the wire (absent: no).
    pub gso: bool,
    /// Congestion control both ends' queue pairs run (the client's choice). Optional on the
    /// wire (absent: none).
    pub cc: crate::CcKind,
}

impl PerfParams {
    /// Bytes of the NUL-padded field the line travels in.
    pub const WIRE_LEN: usize = 128;

    /// The line on the wire (newline-terminated).
    pub fn to_line(&self) -> String {
        format!(
            "IRNPERF1 op={} size={} iters={} qps={} mode={} latency={} verify={} udp_port={} gso={} cc={}\n",
            self.op.name(),
            self.size,
            self.iters,
            self.qps,
            self.mode.name(),
            u8::from(self.latency),
            u8::from(self.verify),
            self.udp_port,
            u8::from(self.gso),
            self.cc
        )
    }

    /// Parses the line.
    pub fn parse(line: &str) -> Result<PerfParams, ExchangeError> {
        const W: &str = "irn perf parameters";
        let b = || bad(W, line.as_bytes());
        // A line ends with its newline: one cut by the fixed-size field it travels in has lost
        // it, and is refused rather than read with a truncated last value.
        let Some(line) = line.strip_suffix('\n') else {
            return Err(b());
        };
        let mut it = line.trim_end().split(' ');
        if it.next() != Some("IRNPERF1") {
            return Err(b());
        }
        let mut p = PerfParams {
            op: PerfOp::Write,
            size: 0,
            iters: 0,
            qps: 0,
            mode: QpMode::Roce,
            latency: false,
            verify: false,
            udp_port: 0,
            gso: false,
            cc: crate::CcKind::None,
        };
        let mut seen = 0u32;
        for kv in it {
            let (k, v) = kv.split_once('=').ok_or_else(b)?;
            let flag = |v: &str| match v {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(b()),
            };
            match k {
                "op" => p.op = v.parse().map_err(|_| b())?,
                "size" => p.size = v.parse().map_err(|_| b())?,
                "iters" => p.iters = v.parse().map_err(|_| b())?,
                "qps" => p.qps = v.parse().map_err(|_| b())?,
                "mode" => p.mode = v.parse().map_err(|_| b())?,
                "latency" => p.latency = flag(v)?,
                "verify" => p.verify = flag(v)?,
                "udp_port" => p.udp_port = v.parse().map_err(|_| b())?,
                // Optional (older irn ends do not send it), so not counted.
                "gso" => {
                    p.gso = flag(v)?;
                    continue;
                }
                "cc" => {
                    p.cc = v.parse().map_err(|_| b())?;
                    continue;
                }
                _ => return Err(b()),
            }
            seen += 1;
        }
        if seen != 8 || p.qps == 0 || p.qps > MAX_PERF_QPS {
            return Err(b());
        }
        Ok(p)
    }
}

/// Reads exactly `n` bytes, waiting at most `timeout` for each read.
pub fn read_exact(
    s: &mut TcpStream,
    n: usize,
    timeout: Duration,
) -> Result<Vec<u8>, ExchangeError> {
    s.set_read_timeout(Some(timeout))?;
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

/// Reads one newline-terminated line (at most 4 KB).
pub fn read_line(s: &mut TcpStream, timeout: Duration) -> Result<String, ExchangeError> {
    s.set_read_timeout(Some(timeout))?;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while line.len() < 4096 {
        s.read_exact(&mut b)?;
        if b[0] == b'\n' {
            return String::from_utf8(line).map_err(|e| bad("line", e.as_bytes()));
        }
        line.push(b[0]);
    }
    Err(bad("line", &line))
}

/// Writes all of `bytes`.
pub fn write_all(s: &mut TcpStream, bytes: &[u8]) -> Result<(), ExchangeError> {
    s.write_all(bytes)?;
    s.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pingpong_message_matches_the_capture() {
        // From the interop README: `0000:b8e241:00d76f:00000000000000000000ffff0a630001\0`.
        let wire = b"0000:b8e241:00d76f:00000000000000000000ffff0a630001\0";
        assert_eq!(wire.len(), PingpongDest::LEN);
        let d = PingpongDest::parse(wire).expect("parses");
        assert_eq!((d.lid, d.qpn, d.psn), (0, 0xb8e241, 0x00d76f));
        assert_eq!(d.gid, Gid::from(std::net::Ipv4Addr::new(10, 99, 0, 1)));
        assert_eq!(&d.to_wire(), wire);
        assert_eq!(
            d.describe(),
            "LID 0x0000, QPN 0xb8e241, PSN 0x00d76f, GID ::ffff:10.99.0.1"
        );
        assert!(PingpongDest::parse(b"0000:b8e241:00d76f\0").is_err());
        assert!(
            PingpongDest::parse(b"zzzz:b8e241:00d76f:00000000000000000000ffff0a630001\0").is_err()
        );
    }

    #[test]
    fn perftest_messages_match_the_capture() {
        // captures/exchange-perftest-write_bw.txt (ib_write_bw 4.5 between two rxe guests).
        let v = b"6.06\0\0\0\0\0\0\0\0\0\0\0\0";
        let p = PerftestVersion::parse(v).expect("perftest's version");
        assert_eq!((p.text.as_str(), p.irn), ("6.06", false));
        let ours = PerftestVersion::ours();
        assert_eq!(&ours[..5], b"6.06\0", "perftest reads a C string");
        assert!(PerftestVersion::parse(&ours).expect("ours").irn);
        assert!(PerftestVersion::parse(b"5.60\0\0\0\0\0\0\0\0\0\0\0\0").is_err());
        assert!(PerftestVersion::parse(b"six\0\0\0\0\0\0\0\0\0\0\0\0\0").is_err());
        // Sixteen bytes of version, no NUL: parsed, not a panic.
        let full = PerftestVersion::parse(b"5.70000000000000").expect("a version");
        assert!(!full.irn);
        assert_eq!(mtu_to_wire(1024), *b"3\0");
        assert_eq!(mtu_from_wire(b"3\0").expect("mtu"), 1024);
        assert!(mtu_from_wire(b"9\0").is_err());
        // #126..#134, the client's report: size 4096, 20 iterations, then three doubles.
        let words: [u64; 5] = [
            0x1000,
            0x14,
            0x3f9f_05be_42ed_dab9,
            0x3f98_d877_b546_dfd9,
            0x3f48_4364_e707_369a,
        ];
        let mut wire = Vec::new();
        for w in words {
            wire.extend_from_slice(&w.to_be_bytes());
        }
        let r = BwReport::parse(&wire).expect("report");
        assert_eq!((r.size, r.iters), (4096, 20));
        assert!((r.bw_peak - 0.0303).abs() < 1e-4, "{}", r.bw_peak);
        assert!((r.bw_avg - 0.0243).abs() < 1e-4, "{}", r.bw_avg);
        assert_eq!(r.to_wire().to_vec(), wire);
        assert!(BwReport::parse(&wire[..39]).is_err());
    }

    #[test]
    fn padded_fields_round_trip() {
        let line = PerfParams {
            op: PerfOp::Read,
            size: 4096,
            iters: 7,
            qps: 2,
            mode: QpMode::Irn,
            latency: false,
            verify: true,
            udp_port: 4791,
            gso: false,
            cc: crate::CcKind::None,
        }
        .to_line();
        let f: [u8; PerfParams::WIRE_LEN] = padded(&line);
        assert_eq!(unpadded(&f).expect("text"), line);
        let long: [u8; 8] = padded("0123456789");
        assert_eq!(unpadded(&long).expect("text"), "0123456");
    }

    #[test]
    fn perf_key_is_108_bytes_and_round_trips() {
        let k = PerfKey {
            lid: 0,
            out_reads: 16,
            qpn: 0x123456,
            psn: 0xabcdef,
            rkey: 0xdead_beef,
            vaddr: 0x5555_0000_1000,
            gid: Gid::from(std::net::Ipv4Addr::new(10, 99, 0, 11)),
            srqn: 0,
        };
        let w = k.to_wire();
        assert_eq!(w[PerfKey::LEN - 1], 0);
        let s = text("k", &w).expect("text");
        assert_eq!(s.len(), 107);
        assert!(s.starts_with("0000:0010:123456:abcdef:deadbeef:0000555500001000:00:00:"));
        assert_eq!(PerfKey::parse(&w).expect("parses"), k);
    }

    #[test]
    fn perf_params_round_trip_and_reject_junk() {
        let p = PerfParams {
            op: PerfOp::Atomic,
            size: 8,
            iters: 1000,
            qps: 2,
            mode: QpMode::Irn,
            latency: true,
            verify: false,
            udp_port: 4791,
            gso: true,
            cc: crate::CcKind::Dcqcn,
        };
        assert_eq!(PerfParams::parse(&p.to_line()).expect("parses"), p);
        // An older irn end's line, without the optional key: no GSO.
        let old = p.to_line().replace(" gso=1 cc=dcqcn", "");
        assert_eq!(
            PerfParams::parse(&old).expect("parses"),
            PerfParams {
                gso: false,
                cc: crate::CcKind::None,
                ..p
            }
        );
        assert!(PerfParams::parse(&p.to_line().replace("cc=dcqcn", "cc=bbr")).is_err());
        assert!(PerfParams::parse(&p.to_line().replace("gso=1", "gso=2")).is_err());
        // Cut inside its last value (a field too short for it): refused, not misread.
        let line = p.to_line();
        assert!(PerfParams::parse(&line[..line.len() - 2]).is_err());
        for junk in [
            "",
            "IRNPERF1",
            "IRNPERF1 op=fly",
            "IRNPERF2 op=write",
            "IRNPERF1 x=1",
        ] {
            assert!(PerfParams::parse(junk).is_err(), "{junk}");
        }
    }

    #[test]
    fn binary_key_is_pingpong_dest_in_network_order() {
        let k = PerfKey {
            lid: 0,
            out_reads: 128,
            qpn: 0x00_0011,
            psn: 0x00ab_cdef,
            rkey: 0x1234_5678,
            vaddr: 0x5555_0000_1000,
            gid: Gid::from(std::net::Ipv4Addr::new(10, 99, 0, 2)),
            srqn: 0,
        };
        let b = k.to_binary(1);
        // Field by field as perftest's struct lays them out (x86-64: vaddr 8-aligned).
        assert_eq!(&b[4..8], &[0, 0, 0, 128]);
        assert_eq!(&b[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(&b[12..16], &[0, 0xab, 0xcd, 0xef]);
        assert_eq!(&b[16..20], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(&b[24..32], &[0, 0, 0x55, 0x55, 0, 0, 0x10, 0]);
        assert_eq!(&b[32..48], &k.gid.0);
        assert_eq!(&b[52..56], &[0, 0, 0, 1]);
        assert_eq!(PerfKey::parse_binary(&b).expect("parses"), k);
        let mut bad = b;
        bad[8] = 1; // a QPN over 24 bits
        assert!(PerfKey::parse_binary(&bad).is_err());
        assert!(PerfKey::parse_binary(&b[..55]).is_err());
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = PingpongDest::parse(&bytes);
            let _ = PerfKey::parse(&bytes);
            let _ = PerfKey::parse_binary(&bytes);
            let _ = PerfParams::parse(&String::from_utf8_lossy(&bytes));
            let _ = PerftestVersion::parse(&bytes);
            let _ = mtu_from_wire(&bytes);
            let _ = BwReport::parse(&bytes);
            let _ = unpadded(&bytes);
        }
    }
}
