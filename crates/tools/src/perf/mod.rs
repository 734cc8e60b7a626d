//! `irn perf write|read|send|atomic [HOST]`: perftest's bandwidth and latency tests on
//! irn-verbs. Without a host: the server (passive side); with one: the client, which measures
//! and prints perftest's columns.
//!
//! Exchange ([`crate::perf::oob`]; TCP, default port 18515): perftest's own (perftest 4.5,
//! "6.06"), so either end may be `ib_write_bw` / `ib_read_bw` / `ib_send_bw` /
//! `ib_atomic_bw` (`-x` the IPv4 GID's index): versions, system data, path MTU, then perftest's key-message hand-shakes around the
//! connection and the test, the client's bandwidth report, and `done`. When both ends are irn
//! (a marker after the version string's NUL tells them), they also swap [`PerfParams`] after
//! the MTU — the server adopts the client's size, iterations, queue pairs and mode (the
//! operation must be its own), and each learns the other's UDP port — and a verdict before
//! closing: the client's expected checksum of the server's memory, the server's `OK` or
//! `MISMATCH`. With a perftest peer each end uses its own flags (give both the same `-s`,
//! `-n`, `-q`, as perftest requires), the mode is RoCE and the UDP port 4791.
//!
//! * bandwidth: up to `tx_depth` operations outstanding per queue pair (Reads and atomics: at
//!   most 16, the queue pair's `max_rd_atomic`), every `--cq-mod`-th of them signaled (and the
//!   last), each completion retiring the unsignaled ones before it, as perftest's `-Q`;
//!   BW peak = the best window of 1/16 of the run
//!   (at least 1 ms), BW
//!   average = all bytes over the whole time, MB = 2^20 bytes as perftest counts;
//! * latency (`--latency`, one queue pair): perftest's latency tools — a ping-pong of Writes
//!   or Sends between both ends, or the client's Reads / atomics one at a time — with their
//!   hand-shakes and columns (module [`crate::perf::lat`]); pairs with `ib_write_lat`,
//!   `ib_read_lat`, `ib_send_lat` and `ib_atomic_lat` in either role;
//! * `--verify`: messages carry per-iteration patterns; Sends are checked by the server as they
//!   arrive, Reads by the client, Writes and atomics by the server at the end.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::error::{Context, Result};
use crate::{bail, usage};
use irn_verbs::cm::CmConfig;
use irn_verbs::exchange::{self, BwReport, PerfKey, PerfOp, PerfParams};
use irn_verbs::{Access, CcKind, Cq, Device, Mr, Qp, QpAttr, QpInit, QpMode, RemoteQp, ROCE_PORT};

mod bw;
mod engines;
pub mod lat;
pub mod oob;

use crate::cm::{self, CmChannel};
use crate::linger;
use crate::link::{device_config, local_ip, oob_connect, LinkArgs};
use bw::{print_bw, region_crc, Receiver, Runner};
use lat::{LatEnd, LatReport, LINE};
use oob::{Chan, Oob, CYCLE_BUFFER, TEST_TIMEOUT, TIMEOUT};

/// Reads and atomics this end accepts at once as responder (advertised as `out_reads`).
const OUT_READS: u16 = 16;
/// Memory per queue pair for the rotating message slots.
const SLOT_BYTES: u64 = 64 << 20;
/// Memory for the message slots of all queue pairs together: with thousands of queue pairs
/// each gets fewer slots (and so fewer operations outstanding), not 64 MiB each — a Read
/// test fills every slot with its pattern.
const ALL_SLOT_BYTES: u64 = 2 << 30;

/// `irn perf` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfArgs {
    /// write, read, send or atomic: the same at both ends (an irn server takes the rest of
    /// the test — size, count, queue pairs, mode, congestion control, --latency, --verify —
    /// from its client).
    op: PerfOp,
    /// The server to connect to; without it, be the server.
    host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size in bytes. Default perftest's for the test: 65 536 for a bandwidth test, 2
    /// for a latency test (atomics: always 8). A perftest peer agrees on nothing, so both ends
    /// must give the same.
    #[arg(short = 's', long)]
    size: Option<u64>,
    /// Iterations per queue pair. Default perftest's for the test: 5 000 for a Write bandwidth
    /// test, 1 000 for every other (a perftest Send server counts exactly its own).
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Queue pairs.
    #[arg(short = 'q', long, default_value_t = 1)]
    qps: u32,
    /// Engines per end, an engine per core: the device is a group of this many sharing its
    /// address and UDP port (`Device::open_group`), the queue pairs spread over them as
    /// evenly as they go, each member driven by its own thread over its own exchange, and
    /// the client prints the aggregate from a common start. Both ends take the same; a
    /// bandwidth test between irn ends, without `-R`.
    #[arg(long, default_value_t = 1)]
    engines: usize,
    /// Loss recovery: `roce` or `irn`, one of IRN's factor-analysis variants (`irn-go-back-n`,
    /// `irn-no-bdp-fc`, `irn-no-sack`), early RoCE's `roce-go-back-0`, or seed 002's
    /// `reorder-buffer` and `ext-ib` (the client's choice; the server follows). Default: irn
    /// with an irn peer, roce with perftest (which speaks standard RoCE only: roce,
    /// roce-go-back-0 or reorder-buffer).
    #[arg(long)]
    mode: Option<QpMode>,
    /// Path MTU offered (256–4096); perftest's exchange settles on the smaller of both ends'.
    /// Default: the largest the route to the peer carries, as rxe's active MTU (1024 over
    /// 1500-byte Ethernet, 4096 over loopback or jumbo frames).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Latency test (one operation outstanding) instead of bandwidth.
    #[arg(long)]
    latency: bool,
    /// Check the data.
    #[arg(long)]
    verify: bool,
    /// Operations outstanding per queue pair in a bandwidth test (a latency test has one, as
    /// perftest's).
    #[arg(short = 't', long, default_value_t = 128)]
    tx_depth: u32,
    /// Work requests per post call in a bandwidth test (perftest's `-l`): up to this many
    /// go to the queue pair in one `post_send_list`, as `ibv_post_send` takes a chained list.
    #[arg(
        short = 'l',
        long = "post-list",
        alias = "post_list",
        default_value_t = 1
    )]
    post_list: u32,
    /// Completion moderation of a bandwidth test (perftest's `-Q`, default 100 as
    /// perftest's): only every N-th work request of a queue pair is signaled, and the last;
    /// one completion then retires the N before it (a queue pair completes its send queue in
    /// order, IBTA §10.8.6), so the test reaps a completion and its thread wakes once per N
    /// messages, not per message. At most half the requests a queue pair keeps outstanding
    /// (`--tx-depth`, fewer for Reads and atomics or with fewer message slots than that; it is
    /// lowered to it — perftest lowers it to the whole depth, which lets the pipeline run dry
    /// while the completion is reaped); 1 signals every work request.
    #[arg(short = 'Q', long = "cq-mod", alias = "cq_mod", default_value_t = 100)]
    cq_mod: u32,
    /// Connect the queue pairs through the RDMA CM, and run the exchange over a CM connection
    /// too, as perftest's `-R` does (pairs with `ib_*_bw -R` / `ib_*_lat -R`). The server
    /// binds the address `--gid` gives; the CM and the queue pairs use UDP port `--udp-port`
    /// at both ends (4791 with perftest).
    #[arg(short = 'R', long = "rdma-cm", alias = "rdma_cm")]
    rdma_cm: bool,
    /// UDP GSO: up to 64 packets to the peer in one system call, cut into datagrams by the
    /// kernel. `auto`: when the peer says it takes them (an irn peer, on either receive path);
    /// `on`: always — for a peer whose link cuts them before it (another host's NIC); `off`:
    /// one packet per datagram.
    #[arg(long, value_enum, default_value_t = Gso::Auto)]
    gso: Gso,
    /// Congestion control of the test queue pairs: none, dcqcn, timely, dctcp or aimd (the
    /// client's choice; the server follows). The same controllers the simulator runs; data
    /// leaves ECN-capable, and CE marks on the way (a switch's, or `--ce-mark`) are answered.
    #[arg(long, default_value_t = CcKind::None)]
    cc: CcKind,
    /// Traffic class of this end's test queue pairs (perftest's `--tclass`, the GRH traffic
    /// class): its top six bits are the DSCP every packet carries, which switches classify
    /// by (`irn switch --pfc`: priority = DSCP ÷ 8; 104 is DSCP 26, priority 3). Default 0.
    #[arg(long, default_value_t = 0)]
    tclass: u8,
    /// Device flags; in `irn perf` the UDP port is told to the peer, and 4791 taken falls back
    /// to any free port (not with `-R`).
    #[command(flatten)]
    link: LinkArgs,
}

/// `--gso`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Gso {
    Auto,
    On,
    Off,
}

/// Where the test queue pairs send (the peer's UDP port) and whether in GSO batches.
#[derive(Debug, Clone, Copy)]
struct PeerLink {
    udp_port: u16,
    gso: bool,
}

impl PeerLink {
    /// perftest's peer: port 4791, one packet per datagram.
    const PERFTEST: PeerLink = PeerLink {
        udp_port: ROCE_PORT,
        gso: false,
    };
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
    /// Send completions.
    cq: Cq,
    /// Receive completions.
    rcq: Cq,
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    slots: u64,
}

/// Opens the device on `ip`. Both ends on one address: the peer has 4791; with an irn peer
/// (`fallback`), whom the exchange tells our port, take any free one (perftest sends to 4791).
fn open_device(ip: IpAddr, fallback: bool, args: &PerfArgs) -> Result<Device> {
    let mut one = open_devices(ip, fallback, args, 1)?;
    Ok(one.pop().expect("a group of one"))
}

/// [`open_device`] for a group of `engines` (`--engines`; one: a device alone).
fn open_devices(
    ip: IpAddr,
    fallback: bool,
    args: &PerfArgs,
    engines: usize,
) -> Result<Vec<Device>> {
    let open = |port| {
        Device::open_group(device_config(ip, port, &args.link)?, engines)
            .map_err(crate::Error::from)
    };
    match open(args.link.udp_port) {
        Ok(d) => Ok(d),
        Err(e) if fallback && args.link.udp_port == ROCE_PORT && is_addr_in_use(&e) => open(0),
        Err(e) if engines == 1 => Err(e).context(format!("opening a device on {ip}")),
        Err(e) => Err(e).context(format!("opening a group of {engines} engines on {ip}")),
    }
}

fn setup(p: &PerfParams, dev: Device, args: &PerfArgs) -> Result<Side> {
    let pd = dev.alloc_pd();
    let depth = (p.qps as usize) * (args.tx_depth as usize + 256) + 16;
    let cq = dev.create_cq(depth)?;
    // Room for every receive a queue pair may have posted (`max_recv_wr`).
    let rcq = dev.create_cq(p.qps as usize * 512 + 16)?;
    let per_qp = SLOT_BYTES.min(ALL_SLOT_BYTES / u64::from(p.qps.max(1)));
    let slots = (per_qp / p.size.max(8)).clamp(1, 256);
    let mut qps = Vec::new();
    let mut mrs = Vec::new();
    for _ in 0..p.qps {
        qps.push(pd.create_qp(
            &cq,
            &rcq,
            QpInit {
                mode: p.mode,
                max_send_wr: args.tx_depth.max(1) as usize,
                max_recv_wr: 512,
                cc: p.cc,
                ..QpInit::default()
            },
        )?);
        if let Some(qp) = qps.last() {
            qp.set_traffic_class(args.tclass)?;
        }
        mrs.push(pd.reg_mr(region_len(p, slots) as usize, Access::ALL)?);
    }
    Ok(Side {
        dev,
        _pd: pd,
        cq,
        rcq,
        qps,
        mrs,
        slots,
    })
}

/// Bytes of each queue pair's region: its message slots, and at least two of perftest's cycle
/// buffers (a perftest client targets offsets up to one cycle buffer past the advertised
/// address, atomics included).
fn region_len(p: &PerfParams, slots: u64) -> u64 {
    let len = (slots * p.size.max(8)).max(2 * CYCLE_BUFFER);
    if p.latency {
        len.max(lat::region_len(p.size))
    } else {
        len
    }
}

fn is_addr_in_use(e: &crate::Error) -> bool {
    match e.root() {
        crate::Error::Io(io) | crate::Error::Verbs(irn_verbs::Error::Io(io)) => {
            io.kind() == ErrorKind::AddrInUse
        }
        _ => false,
    }
}

fn keys(side: &Side, psns: &[u32]) -> Vec<PerfKey> {
    side.qps
        .iter()
        .zip(&side.mrs)
        .zip(psns)
        .map(|((qp, mr), &psn)| PerfKey {
            lid: 0,
            out_reads: OUT_READS,
            qpn: qp.qpn(),
            psn,
            rkey: mr.rkey(),
            vaddr: mr.addr(),
            gid: side.dev.gid(),
            srqn: 0,
        })
        .collect()
}

/// The test queue pairs' attributes; `out_reads` is what the peer's responder accepts.
fn test_attr(mtu: u32, out_reads: u16) -> QpAttr {
    QpAttr {
        path_mtu: mtu,
        // Local ACK timeout: perftest's 14 (67 ms), with any peer. Towards perftest, rxe in a
        // slow VM may take that long to get through a window of go-back-N retransmissions;
        // between irn ends on a loaded host, 64 RoCE-mode queue pairs through 1 %
        // loss gave up with 4.2 or 16.8 ms (timeout 10 or 12) and finish with 67 ms. A silent
        // peer is declared dead after retry_cnt + 1 = 8 of them, ≈ 0.54 s; IRN mode resends on
        // its own adaptive timer meanwhile, and counts a retry only per expiry it saw. The
        // price: a RoCE-mode queue pair waits 67 ms for a lost tail (one QP through 1 % loss:
        // 49 MB/s against 159 with 4.2 ms).
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        // perftest: the requester keeps at most what the responder advertised.
        max_rd_atomic: out_reads.clamp(1, OUT_READS) as u8,
        max_dest_rd_atomic: OUT_READS as u8,
        ..QpAttr::default()
    }
}

/// Connects the test queue pairs to the peer's keys (not with `-R`: the CM connected them).
fn connect(
    side: &Side,
    theirs: &[PerfKey],
    psns: &[u32],
    (link, by_cm): (PeerLink, bool),
    mtu: u32,
) -> Result<()> {
    for qp in &side.qps {
        qp.set_peer_gso(link.gso)?;
    }
    if by_cm {
        return Ok(());
    }
    for ((qp, k), &psn) in side.qps.iter().zip(theirs).zip(psns) {
        let attr = test_attr(mtu, k.out_reads);
        qp.connect(
            &attr,
            &RemoteQp {
                gid: k.gid,
                port: link.udp_port,
                qpn: k.qpn,
                psn: k.psn,
            },
            psn,
        )?;
    }
    Ok(())
}

/// The parameters of this end when the peer is perftest (which agrees on nothing: its flags
/// must match ours) — RoCE on port 4791.
fn own_params(args: &PerfArgs) -> Result<PerfParams> {
    if let Some(m) = args.mode.filter(|m| !m.standard_wire()) {
        usage!(
            "the peer is perftest, which speaks standard RoCE only: use --mode roce, \
             roce-go-back-0 or reorder-buffer, not {m}"
        );
    }
    if args.verify {
        usage!("--verify needs an irn peer (perftest does not check data)");
    }
    Ok(PerfParams {
        op: args.op,
        size: args.msg_size()?,
        iters: args.iters(),
        qps: args.qps,
        mode: args.mode.unwrap_or(QpMode::Roce),
        latency: args.latency,
        verify: false,
        udp_port: ROCE_PORT,
        gso: false,
        cc: args.cc,
    })
}

pub fn run(args: PerfArgs) -> Result<bool> {
    args.link.check()?;
    if args.qps == 0
        || args.qps > irn_verbs::exchange::MAX_PERF_QPS
        || args.iters() == 0
        || args.tx_depth == 0
        || args.cq_mod == 0
    {
        usage!(
            "--qps (1–{}), --iters, --tx-depth and --cq-mod must be positive",
            irn_verbs::exchange::MAX_PERF_QPS
        );
    }
    if let Some(m) = args
        .mtu
        .filter(|m| ![256, 512, 1024, 2048, 4096].contains(m))
    {
        usage!("-m: the MTU is 256, 512, 1024, 2048 or 4096, not {m}");
    }
    if args.rdma_cm && args.link.udp_port == 0 {
        usage!("-R: the CM reaches the peer's device at our own UDP port: give --udp-port a port, not 0");
    }
    // Everything this end's own flags decide is checked before it listens or connects, so a
    // refused flag is not first seen by the peer as a closed exchange.
    args.msg_size()?;
    if args.post_list == 0 || args.post_list > args.tx_depth {
        usage!(
            "-l (--post-list): 1 to --tx-depth ({}) work requests per post, not {}",
            args.tx_depth,
            args.post_list
        );
    }
    if let Some(m) = args.mode {
        crate::link::check_runtime_mode(m)?;
        irn_verbs::check_runtime_cc(m, args.cc)
            .with_context(|| format!("--cc {} with --mode {}", args.cc.name(), m.name()))?;
    }
    if args.latency && args.host.is_some() {
        lat::check_params(&args.client_params()?)?;
    }
    if args.engines != 1 {
        return engines::run(&args);
    }
    if args.host.is_some() {
        client(args)
    } else {
        server(args)
    }
}

/// The CM's settings for `-R`: the peer's QP1 on our own UDP port.
fn cm_config(args: &PerfArgs) -> CmConfig {
    CmConfig {
        peer_port: args.link.udp_port,
        ..CmConfig::default()
    }
}

/// The server's device and exchange: over TCP, the device opens once the connection says
/// which address the client reaches; with `-R` it opens first, on `--gid`, and carries the
/// exchange's connection.
fn server_open(args: &PerfArgs) -> Result<(Oob, u32, Option<Device>)> {
    if !args.rdma_cm {
        let tcp = oob_connect(None, args.port)?;
        let (oob, mtu) = Oob::open(Chan::Tcp(tcp), false, args.mtu)?;
        return Ok((oob, mtu, None));
    }
    let Some(ip) = args.link.gid else {
        usage!("-R: the server binds one address; give it with --gid ADDR");
    };
    let dev = open_device(ip, false, args)?;
    let ch = CmChannel::accept(&dev, args.port, cm_config(args), TEST_TIMEOUT)?;
    let (oob, mtu) = Oob::open(Chan::Cm(Box::new(ch)), false, args.mtu)?;
    Ok((oob, mtu, Some(dev)))
}

/// The device for the test queue pairs: the one `-R` opened already, or one on the address
/// the TCP exchange runs from.
fn test_device(oob: &Oob, dev: Option<Device>, args: &PerfArgs) -> Result<Device> {
    match (dev, &oob.chan) {
        (Some(d), _) => Ok(d),
        (None, Chan::Tcp(t)) => open_device(local_ip(t, &args.link)?, oob.peer_irn, args),
        (None, Chan::Cm(_)) => unreachable!("-R opens its device first"),
    }
}

fn server(args: PerfArgs) -> Result<bool> {
    let (oob, mtu, dev) = server_open(&args)?;
    let dev = test_device(&oob, dev, &args)?;
    serve(&args, oob, mtu, dev)
}

/// The server's test over exchange `oob` on device `dev`.
fn serve(args: &PerfArgs, mut oob: Oob, mtu: u32, dev: Device) -> Result<bool> {
    let (p, side, client) = if oob.peer_irn {
        // The client proposes; we adopt its parameters and answer with our UDP port.
        let theirs = oob.recv_msg(PerfParams::WIRE_LEN, TIMEOUT)?;
        let mut p = PerfParams::parse(exchange::unpadded(&theirs)?)?;
        // The client's size, count, mode and the rest are the test's; its operation must be
        // the one this server was started for (perftest's ends, too, run one test).
        if p.op != args.op {
            bail!(
                "the client asked for a {} test; this server runs {}: start both ends with \
                 the same operation",
                p.op.name(),
                args.op.name()
            );
        }
        if p.latency {
            lat::check_params(&p)?;
        }
        let client = args.peer_link(p.udp_port, p.gso);
        let side = setup(&p, dev, args)?;
        p.udp_port = side.dev.local_addr().port();
        p.gso = side.dev.accepts_gso();
        let reply: [u8; PerfParams::WIRE_LEN] = exchange::padded(&p.to_line());
        oob.send_msg(&reply)?;
        (p, side, client)
    } else {
        let p = own_params(args)?;
        let side = setup(&p, dev, args)?;
        (p, side, PeerLink::PERFTEST)
    };
    let r = server_test(oob, mtu, &p, &side, client);
    // The counters help most when the run failed.
    if args.link.counters {
        print_counters(&side);
    }
    warn_oversized(&side);
    r
}

fn server_test(
    mut oob: Oob,
    mtu: u32,
    p: &PerfParams,
    side: &Side,
    client: PeerLink,
) -> Result<bool> {
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
    let recvs = Receiver::new(side, p);
    let (mine, theirs) = exchange_keys(&mut oob, side, p, mtu, &psns, client, || {
        recvs.post_initial()
    })?;
    println!(
        "irn perf server: {} {} B × {} on {} QP(s), mode {}, MTU {mtu}, from {} ({}){}{}",
        p.op.name(),
        p.size,
        p.iters,
        p.qps,
        p.mode.name(),
        oob.peer,
        if oob.peer_irn { "irn" } else { "perftest" },
        if p.latency { ", latency" } else { "" },
        if oob.cm() {
            ", connected through the RDMA CM"
        } else {
            ""
        },
    );
    if p.latency {
        return latency_test(oob, side, p, &theirs[0], &mine[0]);
    }
    let mut ok = true;
    if p.op == PerfOp::Send {
        ok &= recvs.run(&mut || oob.peer_closed())?;
    } else {
        let report = oob.after_test(&mine[0], &BwReport::default())?;
        println!("the client measured:");
        print_bw(&report);
    }
    if oob.peer_irn {
        // The client's expected checksum of our memory; our verdict.
        let line = oob.recv_msg(64, TEST_TIMEOUT)?;
        let line = exchange::unpadded(&line)?.to_string();
        let expect: Option<u32> = line
            .strip_prefix("DONE ")
            .and_then(|v| v.strip_prefix("crc="))
            .and_then(|v| u32::from_str_radix(v, 16).ok());
        if p.verify && matches!(p.op, PerfOp::Write | PerfOp::Atomic) {
            let got = region_crc(side);
            if expect != Some(got) {
                ok = false;
                println!("verify: MISMATCH (memory crc {got:08x}, expected {line})");
            } else {
                println!("verify: ok");
            }
        }
        let verdict: [u8; 64] = exchange::padded(if ok { "OK" } else { "MISMATCH" });
        oob.send_msg(&verdict)?;
    }
    oob.close(&mine[0], TIMEOUT)?;
    Ok(ok)
}

/// A latency test from the hand-shakes on, either end: runs it, prints perftest's report
/// (the server of a Read or atomic test, which measures nothing, prints perftest's line), and
/// closes as the peer expects: irn ends swap verdicts and close; `ib_write_lat` just
/// disconnects; the other perftest tools close with a hand-shake and `done`.
fn latency_test(
    mut oob: Oob,
    side: &Side,
    p: &PerfParams,
    theirs: &PerfKey,
    mine: &PerfKey,
) -> Result<bool> {
    let end = LatEnd {
        qp: &side.qps[0],
        mr: &side.mrs[0],
        send_cq: &side.cq,
        recv_cq: &side.rcq,
        peer: theirs,
        p,
        client: oob.client,
        verify: p.verify,
        pattern,
    };
    let r = end.run()?;
    let rtt_factor = if matches!(p.op, PerfOp::Write | PerfOp::Send) {
        2.0
    } else {
        1.0
    };
    match LatReport::from_posts(&r.posted, rtt_factor) {
        Some(rep) => lat::print_report(p.size, p.iters, &rep),
        None => println!("{LINE}"),
    }
    let mut ok = r.ok;
    if oob.peer_irn {
        // Each end checked what it received (or read); the verdicts cross.
        let verdict: [u8; 64] = exchange::padded(if ok { "OK" } else { "MISMATCH" });
        let peer = oob.swap(&verdict, 64, TEST_TIMEOUT)?;
        let peer = exchange::unpadded(&peer)?;
        if peer != "OK" {
            println!("peer: {peer}");
            ok = false;
        }
        oob.close(mine, TIMEOUT)?;
    } else if p.op != PerfOp::Write {
        // The server of ib_read_lat waits here for the whole test.
        oob.close(mine, TEST_TIMEOUT)?;
    } else {
        // ib_write_lat's only goodbye is closing the socket, so nothing tells this end that
        // the ACK of the peer's last Write arrived; if it was lost, the peer resends it, and
        // waits forever (rxe) unless this end is still there to acknowledge it.
        let qp = &side.qps[0];
        linger::linger(|| qp.counters().rx_packets, linger::QUIET, linger::MAX);
        oob.end()?;
    }
    if p.verify {
        println!("verify: {}", if ok { "ok" } else { "FAILED" });
    }
    Ok(ok)
}

/// Says why a same-host peer's packets were dropped whole, when they were: it sent UDP GSO
/// messages this raw-path device could not cut (`DeviceCounters::rx_oversized`).
fn warn_oversized(side: &Side) {
    let n = side.dev.counters().rx_oversized;
    if n > 0 {
        eprintln!(
            "irn perf: {n} datagrams arrived coalesced and could not be cut into their packets \
             (no cut fit): a peer on this host sends UDP GSO messages this device's raw receive \
             path cannot split; run this end with --rx udp"
        );
    }
}

fn print_counters(side: &Side) {
    for (i, qp) in side.qps.iter().enumerate() {
        println!("qp {i} (0x{:06x}) counters: {:?}", qp.qpn(), qp.counters());
    }
    println!("device counters: {:?}", side.dev.counters());
    println!("receive path: {}", side.dev.receive_path());
}

/// The client's exchange (TCP, or with `-R` a CM connection from a device opened on the
/// address the route to the server leaves from, or `--gid`).
fn client_open(args: &PerfArgs, host: &str) -> Result<(Oob, u32, Option<Device>)> {
    if !args.rdma_cm {
        let tcp = oob_connect(Some(host), args.port)?;
        let (oob, mtu) = Oob::open(Chan::Tcp(tcp), true, args.mtu)?;
        return Ok((oob, mtu, None));
    }
    let server: SocketAddr = (crate::link::unbracket(host), args.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let ip = cm::route_source(server.ip(), args.link.gid, args.link.udp_port)?;
    // Both ends use the same UDP port (`--udp-port`), so a client whose device would take
    // the server's own address would talk to itself (its CM agent refusing it).
    if ip == server.ip() {
        bail!(
            "-R: the route to {} leaves from that address itself, where this client's device \
             would take the server's UDP port {}: give the server another address (on one \
             host, e.g. 127.0.0.2) or the client another --gid",
            server.ip(),
            args.link.udp_port
        );
    }
    let dev = open_device(ip, false, args)?;
    let ch = CmChannel::connect(&dev, server, cm_config(args))?;
    let (oob, mtu) = Oob::open(Chan::Cm(Box::new(ch)), true, args.mtu)?;
    Ok((oob, mtu, Some(dev)))
}

fn client(args: PerfArgs) -> Result<bool> {
    let host = args.host.clone().expect("a client has a host");
    let (oob, mtu, dev) = client_open(&args, &host)?;
    let dev = test_device(&oob, dev, &args)?;
    Ok(run_client(&args, oob, mtu, dev, None)?.0)
}

/// The client's test over exchange `oob` on device `dev`, its bandwidth loop starting once
/// `start` lets it (the members of a group start together): whether it passed, and its
/// bandwidth report (none for a latency test).
fn run_client(
    args: &PerfArgs,
    mut oob: Oob,
    mtu: u32,
    dev: Device,
    start: Option<(&engines::Gate, usize)>,
) -> Result<(bool, Option<BwReport>)> {
    let (p, side, server) = if oob.peer_irn {
        // `run` checked them (a latency test's too) before connecting.
        let mut p = args.client_params()?;
        let side = setup(&p, dev, args)?;
        p.udp_port = side.dev.local_addr().port();
        p.gso = side.dev.accepts_gso();
        let line: [u8; PerfParams::WIRE_LEN] = exchange::padded(&p.to_line());
        let reply = oob.swap(&line, PerfParams::WIRE_LEN, TIMEOUT)?;
        let reply = PerfParams::parse(exchange::unpadded(&reply)?)?;
        (p, side, args.peer_link(reply.udp_port, reply.gso))
    } else {
        let p = own_params(args)?;
        let side = setup(&p, dev, args)?;
        (p, side, PeerLink::PERFTEST)
    };
    let r = client_test(args, oob, mtu, &p, &side, server, start);
    // The counters help most when the run failed.
    if args.link.counters {
        print_counters(&side);
    }
    warn_oversized(&side);
    r
}

/// Exchanges this end's keys for the peer's in perftest's order — over the CM first when the
/// test connects through it, then the keys, the queue pairs connected to the peer's, and the
/// receives the test starts with posted (a latency test's, or `post_recvs`) — and returns
/// both ends' keys.
fn exchange_keys(
    oob: &mut Oob,
    side: &Side,
    p: &PerfParams,
    mtu: u32,
    psns: &[u32],
    peer: PeerLink,
    post_recvs: impl FnOnce() -> Result<()>,
) -> Result<(Vec<PerfKey>, Vec<PerfKey>)> {
    let mine = keys(side, psns);
    let by_cm = oob.cm();
    oob.cm_connect(&side.dev, &side.qps, &test_attr(mtu, OUT_READS), &mine[0])?;
    let theirs = oob.before_test(
        &mine,
        p.op,
        p.latency,
        |theirs| connect(side, theirs, psns, (peer, by_cm), mtu),
        || {
            if p.latency {
                lat::post_initial_recvs(&side.qps[0], &side.mrs[0], p).map(drop)
            } else {
                post_recvs()
            }
        },
    )?;
    Ok((mine, theirs))
}

fn client_test(
    args: &PerfArgs,
    mut oob: Oob,
    mtu: u32,
    p: &PerfParams,
    side: &Side,
    server: PeerLink,
    start: Option<(&engines::Gate, usize)>,
) -> Result<(bool, Option<BwReport>)> {
    let psns: Vec<u32> = side.qps.iter().map(|_| irn_verbs::random_psn()).collect();
    let (mine, theirs) = exchange_keys(&mut oob, side, p, mtu, &psns, server, || Ok(()))?;
    if p.latency {
        return Ok((latency_test(oob, side, p, &theirs[0], &mine[0])?, None));
    }
    let run = Runner {
        side,
        p,
        theirs: &theirs,
        // A perftest server's buffer is sized by its own -s: stay at its first message.
        remote_slots: if oob.peer_irn { side.slots } else { 1 },
        depth: if args.op_is_read_like() {
            args.tx_depth
                .min(u32::from(theirs[0].out_reads.clamp(1, OUT_READS)))
        } else {
            args.tx_depth
        },
        post_list: args.post_list.max(1) as usize,
        cq_mod: 0,
        start,
    };
    // At most half the requests a queue pair keeps outstanding — its depth, or fewer with
    // fewer message slots (large messages, thousands of queue pairs) — so that one is always
    // signaled, and the other half stays in flight while the completion that retires the
    // first is reaped and the requests behind it are posted.
    let outstanding = u64::from(run.depth).min(side.slots);
    let run = Runner {
        cq_mod: u64::from(args.cq_mod).clamp(1, (outstanding / 2).max(1)),
        ..run
    };
    let (mut ok, report) = run.bandwidth()?;
    if p.op != PerfOp::Send {
        oob.after_test(&mine[0], &report)?;
    }
    if oob.peer_irn {
        let crc = if p.verify {
            run.expected_remote_crc()
        } else {
            0
        };
        let line: [u8; 64] = exchange::padded(&format!("DONE crc={crc:08x}"));
        let verdict = oob.swap(&line, 64, TIMEOUT)?;
        let verdict = exchange::unpadded(&verdict)?;
        if verdict != "OK" {
            println!("server: {verdict}");
            ok = false;
        }
    }
    oob.close(&mine[0], TIMEOUT)?;
    if p.verify {
        println!("verify: {}", if ok { "ok" } else { "FAILED" });
    }
    Ok((ok, Some(report)))
}

impl PerfArgs {
    /// How the test queue pairs reach a peer that sends from `udp_port` and says whether it
    /// takes UDP GSO batches (`peer_takes`).
    fn peer_link(&self, udp_port: u16, peer_takes: bool) -> PeerLink {
        let gso = match self.gso {
            Gso::On => {
                if !peer_takes {
                    eprintln!(
                        "irn perf: --gso on, but the peer does not say it takes GSO messages: \
                         its link must cut them (another host's NIC does; loopback and veths \
                         do not)"
                    );
                }
                true
            }
            Gso::Off => false,
            Gso::Auto => peer_takes,
        };
        PeerLink { udp_port, gso }
    }

    fn op_is_atomic(&self) -> bool {
        self.op == PerfOp::Atomic
    }

    /// What an irn client proposes to its server: its flags, with mode IRN by default; the
    /// UDP port and GSO are filled in once its device is open.
    fn client_params(&self) -> Result<PerfParams> {
        Ok(PerfParams {
            op: self.op,
            size: self.msg_size()?,
            iters: self.iters(),
            qps: self.qps,
            mode: self.mode.unwrap_or(QpMode::Irn),
            latency: self.latency,
            verify: self.verify,
            udp_port: 0,
            gso: false,
            cc: self.cc,
        })
    }

    /// The message size: 8 for atomics, else `--size` or perftest's default for the test
    /// (`DEF_SIZE_LAT`, `DEF_SIZE_BW` in perftest's `perftest_parameters.h`).
    fn msg_size(&self) -> Result<u64> {
        let default = if self.latency { 2 } else { 65536 };
        let size = if self.op_is_atomic() {
            8
        } else {
            self.size.unwrap_or(default)
        };
        // The largest message a queue pair carries, as rxe's (`RXE_MAX_MSG_SZ`, 2 GiB).
        if size == 0 || size > irn_transport::MAX_MESSAGE {
            usage!(
                "--size must be 1 B to {} B (2 GiB, the largest message a queue pair carries)",
                irn_transport::MAX_MESSAGE
            );
        }
        Ok(size)
    }
    /// `--iters`, or perftest's default for the test (`DEF_ITERS_WB` for a Write bandwidth
    /// test, `DEF_ITERS` for every other).
    fn iters(&self) -> u64 {
        let write_bw = self.op == PerfOp::Write && !self.latency;
        self.iters.unwrap_or(if write_bw { 5000 } else { 1000 })
    }

    fn op_is_read_like(&self) -> bool {
        matches!(self.op, PerfOp::Read | PerfOp::Atomic)
    }
}
