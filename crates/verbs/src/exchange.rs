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
//! * [`PerfParams`]: irn perf's own line before the keys, carrying what perftest agrees on
//!   through its command-line flags (operation, size, iterations, queue pairs) and what irn adds
//!   (the mode, IRN or RoCE, which both ends must agree on, and the UDP port).
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
    #[error("out-of-band exchange: {0}")]
    Io(#[from] std::io::Error),
    /// The peer's message is not in the expected format.
    #[error("out-of-band exchange: bad {what} message {text:?}")]
    Format {
        /// Which message.
        what: &'static str,
        /// What arrived (printable part).
        text: String,
    },
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
}

impl PerfParams {
    /// The line on the wire (newline-terminated).
    pub fn to_line(&self) -> String {
        format!(
            "IRNPERF1 op={} size={} iters={} qps={} mode={} latency={} verify={} udp_port={}\n",
            self.op.name(),
            self.size,
            self.iters,
            self.qps,
            self.mode.name(),
            u8::from(self.latency),
            u8::from(self.verify),
            self.udp_port
        )
    }

    /// Parses the line.
    pub fn parse(line: &str) -> Result<PerfParams, ExchangeError> {
        const W: &str = "irn perf parameters";
        let b = || bad(W, line.as_bytes());
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
                _ => return Err(b()),
            }
            seen += 1;
        }
        if seen != 8 || p.qps == 0 || p.qps > 1024 {
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
        };
        assert_eq!(PerfParams::parse(&p.to_line()).expect("parses"), p);
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

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = PingpongDest::parse(&bytes);
            let _ = PerfKey::parse(&bytes);
            let _ = PerfParams::parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
