//! `irn perf write|read|send|atomic [HOST]`: perftest's bandwidth and latency tests on
//! irn-verbs. Without a host: the server (passive side); with one: the client, which measures
//! and prints perftest's columns.
//!
//! Exchange (TCP, default port 18515): the client sends a [`PerfParams`] line (operation,
//! size, iterations, queue pairs, mode, UDP port); the server answers with the same line
//! carrying its UDP port; then each side sends one perftest key message per queue pair (the
//! client first), and both connect. At the end the client sends `DONE <check>` and the server
//! answers `OK` or `MISMATCH …` after checking what landed in its memory.
//!
//! * bandwidth: up to `tx_depth` operations outstanding per queue pair (Reads and atomics: at
//!   most 16, the queue pair's `max_rd_atomic`), BW peak = the best window of 1/16 of the run
//!   (at least 1 ms), BW
//!   average = all bytes over the whole time, MB = 2^20 bytes as perftest counts;
//! * latency (`--latency`): one operation at a time, each timed from post to completion (a
//!   round trip: request and ACK or response).
//! * `--verify`: messages carry per-iteration patterns; Sends are checked by the server as they
//!   arrive, Reads by the client, Writes and atomics by the server at the end.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use irn_verbs::exchange::{self, PerfKey, PerfOp, PerfParams};
use irn_verbs::{
    Access, Cq, Device, Mr, Qp, QpAttr, QpInit, QpMode, RecvWr, Remote, RemoteQp, SendOp, SendWr,
    WcStatus, ROCE_PORT,
};

use crate::pingpong_cmd::{device_config, local_ip, oob_connect, wc_status_number, LinkArgs};

const TIMEOUT: Duration = Duration::from_secs(60);
/// Memory per queue pair for the rotating message slots.
const SLOT_BYTES: u64 = 64 << 20;

/// `irn perf` flags.
#[derive(clap::Args, Debug)]
pub struct PerfArgs {
    /// write, read, send or atomic.
    op: PerfOp,
    /// The server to connect to; without it, be the server.
    host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size in bytes (atomics: always 8).
    #[arg(short = 's', long, default_value_t = 65536)]
    size: u64,
    /// Iterations per queue pair.
    #[arg(short = 'n', long, default_value_t = 5000)]
    iters: u64,
    /// Queue pairs.
    #[arg(short = 'q', long, default_value_t = 1)]
    qps: u32,
    /// Loss recovery: `roce` or `irn` (the client's choice; the server follows).
    #[arg(long, default_value = "irn")]
    mode: QpMode,
    /// Latency test (one operation outstanding) instead of bandwidth.
    #[arg(long)]
    latency: bool,
    /// Check the data.
    #[arg(long)]
    verify: bool,
    /// Operations outstanding per queue pair in a bandwidth test.
    #[arg(short = 't', long, default_value_t = 128)]
    tx_depth: u32,
    /// Device flags; in `irn perf` the UDP port is told to the peer, and 4791 taken falls back
    /// to any free port.
    #[command(flatten)]
    link: LinkArgs,
}

/// Bytes of message `i` of queue pair `q`.
fn pattern(q: u32, i: u64, out: &mut [u8]) {
    let mut x = (u64::from(q) << 40 ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

struct Side {
    dev: Device,
    _pd: irn_verbs::Pd,
    cq: Cq,
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    slots: u64,
}

fn setup(p: &PerfParams, tcp: &std::net::TcpStream, args: &PerfArgs) -> anyhow::Result<Side> {
    let ip = local_ip(tcp)?;
    let open =
        |port| Device::open(device_config(ip, port, &args.link)?).map_err(anyhow::Error::from);
    let dev = match open(args.link.udp_port) {
        Ok(d) => d,
        // Both ends on one address: the peer has 4791; the exchange carries ours.
        Err(e) if args.link.udp_port == ROCE_PORT && is_addr_in_use(&e) => open(0)?,
        Err(e) => return Err(e).context(format!("opening a device on {ip}")),
    };
    let pd = dev.alloc_pd();
    let depth = (p.qps as usize) * (args.tx_depth as usize + 256) + 16;
    let cq = dev.create_cq(depth)?;
    let slots = (SLOT_BYTES / p.size.max(8)).clamp(1, 256);
    let mut qps = Vec::new();
    let mut mrs = Vec::new();
    for _ in 0..p.qps {
        qps.push(pd.create_qp(
            &cq,
            &cq,
            QpInit {
                mode: p.mode,
                max_send_wr: args.tx_depth.max(1) as usize,
                max_recv_wr: 512,
                ..QpInit::default()
            },
        )?);
        mrs.push(pd.reg_mr((slots * p.size.max(8)) as usize, Access::ALL)?);
    }
    Ok(Side {
        dev,
        _pd: pd,
        cq,
        qps,
        mrs,
        slots,
    })
}

fn is_addr_in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::AddrInUse)
            || c.downcast_ref::<irn_verbs::Error>().is_some_and(
                |v| matches!(v, irn_verbs::Error::Io(io) if io.kind() == ErrorKind::AddrInUse),
            )
    })
}

fn keys(side: &Side, psns: &[u32]) -> Vec<PerfKey> {
    side.qps
        .iter()
        .zip(&side.mrs)
        .zip(psns)
        .map(|((qp, mr), &psn)| PerfKey {
            lid: 0,
            out_reads: 16,
            qpn: qp.qpn(),
            psn,
            rkey: mr.rkey(),
            vaddr: mr.addr(),
            gid: side.dev.gid(),
            srqn: 0,
        })
        .collect()
}

fn exchange_keys(
    tcp: &mut std::net::TcpStream,
    mine: &[PerfKey],
    client: bool,
) -> anyhow::Result<Vec<PerfKey>> {
    let send = |tcp: &mut std::net::TcpStream| -> anyhow::Result<()> {
        for k in mine {
            exchange::write_all(tcp, &k.to_wire())?;
        }
        Ok(())
    };
    if client {
        send(tcp)?;
    }
    let mut theirs = Vec::new();
    for _ in 0..mine.len() {
        theirs.push(PerfKey::parse(&exchange::read_exact(
            tcp,
            PerfKey::LEN,
            TIMEOUT,
        )?)?);
    }
    if !client {
        send(tcp)?;
    }
    Ok(theirs)
}

fn connect(side: &Side, theirs: &[PerfKey], psns: &[u32], udp_port: u16) -> anyhow::Result<()> {
    let attr = QpAttr {
        // ≈ 4 ms local ACK timeout (perftest's default, 14, is 67 ms: tuned for fabrics that
        // do not lose packets).
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    };
    for ((qp, k), &psn) in side.qps.iter().zip(theirs).zip(psns) {
        qp.connect(
            &attr,
            &RemoteQp {
                gid: k.gid,
                port: udp_port,
                qpn: k.qpn,
                psn: k.psn,
            },
            psn,
        )?;
    }
    Ok(())
}

pub fn run(args: PerfArgs) -> anyhow::Result<bool> {
    if !(0.0..=1.0).contains(&args.link.loss) {
        bail!("--loss is a probability in 0–1, not {}", args.link.loss);
    }
    if args.qps == 0 || args.qps > 1024 || args.iters == 0 || args.tx_depth == 0 {
        bail!("--qps (1–1024), --iters and --tx-depth must be positive");
    }
    if args.host.is_some() {
        client(args)
    } else {
        server(args)
    }
}

fn server(args: PerfArgs) -> anyhow::Result<bool> {
    let mut tcp = oob_connect(None, args.port)?;
    let mut p = PerfParams::parse(&exchange::read_line(&mut tcp, TIMEOUT)?)?;
    let client_udp = p.udp_port;
    let side = setup(&p, &tcp, &args)?;
    p.udp_port = side.dev.local_addr().port();
    exchange::write_all(&mut tcp, p.to_line().as_bytes())?;
    let psns: Vec<u32> = side.qps.iter().map(|_| irn_verbs::random_psn()).collect();
    // Read targets hold known patterns.
    if p.op == PerfOp::Read {
        let mut buf = vec![0u8; p.size as usize];
        for (q, mr) in side.mrs.iter().enumerate() {
            for j in 0..side.slots {
                pattern(q as u32, j, &mut buf);
                mr.write(j * p.size, &buf)?;
            }
        }
    }
    let theirs = exchange_keys(&mut tcp, &keys(&side, &psns), false)?;
    connect(&side, &theirs, &psns, client_udp)?;
    println!(
        "irn perf server: {} {} B × {} on {} QP(s), mode {}, from {}",
        p.op.name(),
        p.size,
        p.iters,
        p.qps,
        p.mode.name(),
        tcp.peer_addr()?
    );
    let mut ok = true;
    if p.op == PerfOp::Send {
        ok &= receive_sends(&side, &p)?;
    }
    // The client's verdict line, then ours.
    let line = exchange::read_line(&mut tcp, Duration::from_secs(3600))?;
    let expect: Option<u32> = line
        .strip_prefix("DONE ")
        .and_then(|v| v.strip_prefix("crc="))
        .and_then(|v| u32::from_str_radix(v, 16).ok());
    if p.verify && matches!(p.op, PerfOp::Write | PerfOp::Atomic) {
        let got = region_crc(&side);
        if expect != Some(got) {
            ok = false;
            println!("verify: MISMATCH (memory crc {got:08x}, expected {line})");
        } else {
            println!("verify: ok");
        }
    }
    exchange::write_all(&mut tcp, if ok { b"OK\n" } else { b"MISMATCH\n" })?;
    if args.link.counters {
        print_counters(&side);
    }
    Ok(ok)
}

fn region_crc(side: &Side) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for mr in &side.mrs {
        let _ = mr.with_bytes(|b| h.update(b));
    }
    h.finalize()
}

/// The server of a Send test: keeps receives posted, checks patterns in order when asked.
fn receive_sends(side: &Side, p: &PerfParams) -> anyhow::Result<bool> {
    let depth = 256u64.min(side.slots);
    let post = |q: usize, i: u64| {
        let mr = &side.mrs[q];
        side.qps[q].post_recv(RecvWr {
            wr_id: (q as u64) << 40 | i,
            sg_list: vec![mr.sge((i % side.slots) * p.size, p.size as u32)],
        })
    };
    for q in 0..side.qps.len() {
        for i in 0..depth.min(p.iters) {
            post(q, i)?;
        }
    }
    let mut got = vec![0u64; side.qps.len()];
    let mut buf = vec![0u8; p.size as usize];
    let mut want = vec![0u8; p.size as usize];
    let mut ok = true;
    let total = p.iters * side.qps.len() as u64;
    let mut done = 0;
    while done < total {
        let Some(wc) = side.cq.wait(Duration::from_secs(30))? else {
            bail!("no Send for 30 s after {done} of {total}");
        };
        if wc.status != WcStatus::Success {
            bail!(
                "receive failed: {} ({})",
                wc.status,
                wc_status_number(wc.status)
            );
        }
        let (q, i) = ((wc.wr_id >> 40) as usize, wc.wr_id & ((1 << 40) - 1));
        if q >= got.len() || i != got[q] {
            bail!("receive {i} on QP {q} completed out of order");
        }
        if p.verify {
            side.mrs[q].read((i % side.slots) * p.size, &mut buf)?;
            pattern(q as u32, i, &mut want);
            if buf != want {
                ok = false;
                println!("verify: message {i} of QP {q} differs");
            }
        }
        got[q] += 1;
        done += 1;
        if i + depth < p.iters {
            post(q, i + depth)?;
        }
    }
    if p.verify && ok {
        println!("verify: ok ({total} messages)");
    }
    Ok(ok)
}

fn print_counters(side: &Side) {
    for (i, qp) in side.qps.iter().enumerate() {
        println!("qp {i} (0x{:06x}) counters: {:?}", qp.qpn(), qp.counters());
    }
    println!("device counters: {:?}", side.dev.counters());
    println!("receive path: {}", side.dev.receive_path());
}

fn client(args: PerfArgs) -> anyhow::Result<bool> {
    let mut tcp = oob_connect(args.host.as_deref(), args.port)?;
    let size = if args.op_is_atomic() { 8 } else { args.size };
    if size == 0 || size > u64::from(u32::MAX) {
        bail!("--size must be 1 B to 4 GiB");
    }
    let mut p = PerfParams {
        op: args.op,
        size,
        iters: args.iters,
        qps: args.qps,
        mode: args.mode,
        latency: args.latency,
        verify: args.verify,
        udp_port: 0,
    };
    let side = setup(&p, &tcp, &args)?;
    p.udp_port = side.dev.local_addr().port();
    exchange::write_all(&mut tcp, p.to_line().as_bytes())?;
    let reply = PerfParams::parse(&exchange::read_line(&mut tcp, TIMEOUT)?)?;
    let psns: Vec<u32> = side.qps.iter().map(|_| irn_verbs::random_psn()).collect();
    let theirs = exchange_keys(&mut tcp, &keys(&side, &psns), true)?;
    connect(&side, &theirs, &psns, reply.udp_port)?;

    let run = Runner {
        side: &side,
        p: &p,
        theirs: &theirs,
        depth: if args.op_is_read_like() {
            args.tx_depth.min(16)
        } else {
            args.tx_depth
        },
    };
    let measured = if p.latency {
        run.latency()
    } else {
        run.bandwidth()
    };
    let mut ok = match measured {
        Ok(ok) => ok,
        Err(e) => {
            if args.link.counters {
                print_counters(&side);
            }
            return Err(e);
        }
    };
    let crc = if p.verify {
        run.expected_remote_crc()
    } else {
        0
    };
    exchange::write_all(&mut tcp, format!("DONE crc={crc:08x}\n").as_bytes())?;
    let verdict = exchange::read_line(&mut tcp, TIMEOUT)?;
    if verdict != "OK" {
        println!("server: {verdict}");
        ok = false;
    }
    if p.verify {
        println!("verify: {}", if ok { "ok" } else { "FAILED" });
    }
    if args.link.counters {
        print_counters(&side);
    }
    Ok(ok)
}

impl PerfArgs {
    fn op_is_atomic(&self) -> bool {
        self.op == PerfOp::Atomic
    }
    fn op_is_read_like(&self) -> bool {
        matches!(self.op, PerfOp::Read | PerfOp::Atomic)
    }
}

struct Runner<'a> {
    side: &'a Side,
    p: &'a PerfParams,
    theirs: &'a [PerfKey],
    depth: u32,
}

const LINE: &str =
    "---------------------------------------------------------------------------------------";

impl Runner<'_> {
    fn slot_off(&self, i: u64) -> u64 {
        (i % self.side.slots) * self.p.size
    }

    /// Posts iteration `i` on queue pair `q`.
    fn post(&self, q: usize, i: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        let p = self.p;
        let mr = &self.side.mrs[q];
        let off = self.slot_off(i);
        let k = &self.theirs[q];
        let remote = Remote {
            addr: k.vaddr + off,
            rkey: k.rkey,
        };
        if p.verify && matches!(p.op, PerfOp::Write | PerfOp::Send) {
            pattern(q as u32, i, buf);
            mr.write(off, buf)?;
        }
        let op = match p.op {
            PerfOp::Write => SendOp::Write(remote),
            PerfOp::Read => SendOp::Read(remote),
            PerfOp::Send => SendOp::Send,
            PerfOp::Atomic => SendOp::FetchAdd {
                remote: Remote {
                    addr: k.vaddr,
                    rkey: k.rkey,
                },
                add: 1,
            },
        };
        self.side.qps[q].post_send(SendWr {
            wr_id: (q as u64) << 40 | i,
            op,
            sg_list: vec![mr.sge(off, p.size as u32)],
            signaled: true,
            fence: false,
            solicited: false,
        })?;
        Ok(())
    }

    /// Handles one completion; checks Read data when verifying.
    fn complete(&self, wc: irn_verbs::Wc, buf: &mut [u8], want: &mut [u8]) -> anyhow::Result<bool> {
        let (q, i) = ((wc.wr_id >> 40) as usize, wc.wr_id & ((1 << 40) - 1));
        if wc.status != WcStatus::Success {
            bail!(
                "work request {i} on QP {q} (0x{:06x}) failed: {} ({})",
                wc.qp_num,
                wc.status,
                wc_status_number(wc.status)
            );
        }
        if self.p.verify && self.p.op == PerfOp::Read {
            self.side.mrs[q].read(self.slot_off(i), buf)?;
            pattern(q as u32, i % self.side.slots, want);
            if buf != want {
                println!("verify: Read {i} of QP {q} differs");
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Returns whether every checked Read matched.
    fn bandwidth(&self) -> anyhow::Result<bool> {
        let p = self.p;
        let nq = self.side.qps.len();
        let total = p.iters * nq as u64;
        let mut posted = vec![0u64; nq];
        let mut done = vec![0u64; nq];
        let mut buf = vec![0u8; p.size as usize];
        let mut want = vec![0u8; p.size as usize];
        let mut stamps = Vec::with_capacity(total as usize);
        let mut ok = true;
        let depth = u64::from(self.depth).min(self.side.slots);
        let start = Instant::now();
        let mut completed = 0u64;
        while completed < total {
            for q in 0..nq {
                while posted[q] < p.iters && posted[q] - done[q] < depth {
                    self.post(q, posted[q], &mut buf)?;
                    posted[q] += 1;
                }
            }
            let Some(first) = self.side.cq.wait(Duration::from_secs(30))? else {
                bail!("no completion for 30 s after {completed} of {total}");
            };
            let more = self.side.cq.poll(256)?;
            for wc in std::iter::once(first).chain(more) {
                ok &= self.complete(wc, &mut buf, &mut want)?;
                done[(wc.wr_id >> 40) as usize] += 1;
                completed += 1;
                stamps.push(start.elapsed());
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let bytes = (total * p.size) as f64;
        let mb = 1024.0 * 1024.0;
        let avg = bytes / secs / mb;
        // Peak: the best window of a sixteenth of the run (at least 1 ms, so that a burst of
        // completions freed by one coalesced ACK does not count as an instant transfer).
        let window = (secs / 16.0).max(1e-3);
        let mut peak = avg;
        let mut j = 0;
        for (i, s) in stamps.iter().enumerate() {
            let end = s.as_secs_f64() + window;
            while j < stamps.len() && stamps[j].as_secs_f64() < end {
                j += 1;
            }
            if end <= secs {
                peak = peak.max(((j - i) as u64 * p.size) as f64 / window / mb);
            }
        }
        println!("{LINE}");
        println!(
            " {:<10} {:<15} {:<18} {:<20} {:<15}",
            "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]"
        );
        println!(
            " {:<10} {:<15} {:<18.2} {:<20.2} {:<15.6}",
            p.size,
            p.iters,
            peak,
            avg,
            total as f64 / secs / 1e6
        );
        println!("{LINE}");
        Ok(ok)
    }

    /// Returns whether every checked Read matched.
    fn latency(&self) -> anyhow::Result<bool> {
        let p = self.p;
        let mut buf = vec![0u8; p.size as usize];
        let mut want = vec![0u8; p.size as usize];
        let mut lat = Vec::with_capacity(p.iters as usize);
        let mut ok = true;
        for i in 0..p.iters {
            for q in 0..self.side.qps.len() {
                let t = Instant::now();
                self.post(q, i, &mut buf)?;
                let Some(wc) = self.side.cq.wait(Duration::from_secs(30))? else {
                    bail!("no completion for 30 s at iteration {i}");
                };
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                ok &= self.complete(wc, &mut buf, &mut want)?;
            }
        }
        lat.sort_by(f64::total_cmp);
        let n = lat.len();
        let at = |f: f64| lat[((n as f64 * f) as usize).min(n - 1)];
        let avg = lat.iter().sum::<f64>() / n as f64;
        let var = lat.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / n as f64;
        println!("{LINE}");
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
        );
        println!(
            " {:<6} {:<10} {:>14.2} {:>14.2} {:>16.2} {:>14.2} {:>16.2} {:>22.2} {:>24.2}",
            p.size,
            p.iters,
            lat[0],
            lat[n - 1],
            at(0.5),
            avg,
            var.sqrt(),
            at(0.99),
            at(0.999)
        );
        println!("{LINE}");
        Ok(ok)
    }

    /// What the server's regions must hold after a verified Write or atomic run.
    fn expected_remote_crc(&self) -> u32 {
        let p = self.p;
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0u8; p.size as usize];
        for q in 0..self.side.qps.len() {
            match p.op {
                PerfOp::Write => {
                    for j in 0..self.side.slots {
                        // The last iteration that wrote slot j, if any.
                        if j < p.iters {
                            let last = j + (p.iters - 1 - j) / self.side.slots * self.side.slots;
                            pattern(q as u32, last, &mut buf);
                        } else {
                            buf.fill(0);
                        }
                        h.update(&buf);
                    }
                }
                _ => {
                    // One counter per queue pair, at the start of its region.
                    let mut region = vec![0u8; (self.side.slots * p.size) as usize];
                    region[..8].copy_from_slice(&p.iters.to_ne_bytes());
                    h.update(&region);
                }
            }
        }
        h.finalize()
    }
}
