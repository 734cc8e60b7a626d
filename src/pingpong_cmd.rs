//! `irn pingpong [HOST]`: `ibv_rc_pingpong` on irn-verbs — the same flags, the same
//! out-of-band exchange on TCP 18515, the same message pattern and the same output lines, so
//! either side can be rdma-core's tool.
//!
//! The pattern (rdma-core `libibverbs/examples/rc_pingpong.c`): both sides post `rx_depth`
//! receives of `size` bytes; the client sends first; a side posts its next Send once its
//! previous Send completed *and* a message from the peer arrived; each side stops after
//! `iters` Sends and `iters` receives.
//!
//! With `--ud`, `ibv_ud_pingpong` (`ud_pingpong.c`): the same exchange and pattern over an
//! unreliable-datagram queue pair with Q_Key 0x11111111 and an address handle for the peer;
//! each buffer has the 40-byte GRH area in front (receives of `size + 40`, Sends from byte
//! 40), and `size` is at most the MTU.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use irn_verbs::exchange::{self, PingpongDest};
use irn_verbs::{
    Access, Ah, Cq, Device, DeviceConfig, Gid, Impairment, Mr, Pd, Qp, QpAttr, QpInit, QpMode,
    ReceivePath, RecvWr, RemoteQp, SendOp, SendWr, UdInit, UdQp, UdSend, WcStatus, GRH_LEN,
    ROCE_PORT,
};

use crate::linger;

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// `irn pingpong` flags (`ibv_rc_pingpong`'s, plus irn's).
#[derive(clap::Args, Debug)]
pub struct PingpongArgs {
    /// The server to connect to; without it, be the server.
    host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    size: u32,
    /// Iterations (messages each way).
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u64,
    /// GID index (accepted for compatibility: the GID is the address of the TCP connection,
    /// or `--gid`).
    #[arg(short = 'g', long = "gid-idx")]
    gid_idx: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: u32,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// An unreliable-datagram queue pair, as `ibv_ud_pingpong` (messages up to the MTU, Q_Key
    /// 0x11111111; a lost datagram stops the ping-pong).
    #[arg(long)]
    ud: bool,
    /// Loss recovery: `roce` (what rxe speaks), `irn` (both ends must be irn), or another of
    /// the recovery modes (`roce-go-back-0`, `irn-go-back-n`, `irn-no-bdp-fc`, `irn-no-sack`,
    /// `reorder-buffer` — rxe speaks it too — and `ext-ib`).
    #[arg(long, default_value = "roce")]
    mode: QpMode,
    #[command(flatten)]
    link: LinkArgs,
}

/// The flags both tools share: the device's UDP port, impairment, capture and counters.
#[derive(clap::Args, Debug)]
pub(crate) struct LinkArgs {
    /// Drop this fraction (0–1) of the packets this side sends and receives (seeded).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// Which of this side's directions `--loss` drops in: `both`, `send` or `receive`.
    /// `send` alone keeps what the peer says last: a peer such as `ibv_rc_pingpong` that
    /// exits as soon as its own work is done cannot answer a resend, so loss of its final
    /// ACK on the way in fails the run however long this side waits.
    #[arg(long, value_enum, default_value_t = LossOn::Both)]
    pub(crate) loss_on: LossOn,
    /// Hold back this fraction (0–1) of the packets this side receives and deliver each after
    /// the next one (seeded): reordering, as packet spraying makes it.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) reorder: f64,
    /// Mark this fraction (0–1) of the ECN-capable packets this side sends Congestion
    /// Experienced (seeded), as a congested switch would: the marks reach the peer through
    /// the kernel, and its congestion notification answers them (with `irn perf --cc`, whose
    /// queue pairs run a controller; the other tools' run none).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) ce_mark: f64,
    /// Hold every packet this side receives this long, µs (a slow link or host).
    #[arg(long, default_value_t = 0)]
    pub(crate) delay_us: u64,
    /// Seed of the impairment.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Capture every packet sent and received to this pcap file.
    #[arg(long)]
    pub(crate) pcap: Option<std::path::PathBuf>,
    /// UDP port (standard peers use 4791; `irn perf` tells its peer, `irn pingpong` cannot).
    #[arg(long, default_value_t = ROCE_PORT)]
    pub(crate) udp_port: u16,
    /// Print the queue pairs' and the device's counters at the end.
    #[arg(long)]
    pub(crate) counters: bool,
    /// This end's GID, as an address of this host (IPv4 or IPv6). Default: the local address
    /// of the connection to the peer (the out-of-band TCP connection's; rping's `-a`/`-I`).
    /// Give an IPv6 address to use an IPv6 GID while the exchange runs over IPv4 (rdma-core's
    /// and perftest's tools listen on IPv4 only); the peer must then use its IPv6 GID too
    /// (`-g` / `-x` of that index).
    #[arg(long)]
    pub(crate) gid: Option<IpAddr>,
    /// Receive path: `raw` (needs CAP_NET_RAW; IPv4; sees whole packets, so every ICRC is
    /// verified and the capture holds the real bytes), `udp` (unprivileged; IPv4 ICRCs not
    /// verifiable), or `auto` (raw when permitted).
    #[arg(long, default_value_t = ReceivePath::Auto)]
    pub(crate) rx: ReceivePath,
    /// Busy polling: the thread that polls for completions receives and processes this
    /// side's packets itself, spinning, instead of waking the engine thread (lower latency,
    /// a core kept busy).
    #[arg(long)]
    pub(crate) busy_poll: bool,
    /// Honour the 802.1Qbb PFC and 802.3x PAUSE frames that arrive on this interface (a
    /// packet socket: needs CAP_NET_RAW): queue pairs of a paused priority (their DSCP ÷ 8,
    /// `--tclass`) send nothing until the pause runs out or a resume comes.
    #[arg(long, value_name = "IFACE")]
    pub(crate) pause_iface: Option<String>,
    /// The link rate pause quanta are counted at (512 bit times each), e.g. `1g`; default
    /// the interface's speed, or 1 Gb/s when it reports none (a veth).
    #[arg(long, value_parser = irn_switch::parse_rate)]
    pub(crate) pause_rate: Option<u64>,
    /// NIC-side PFC watchdog: a priority paused without a break this long, ms, stops this
    /// side honouring pauses, for good.
    #[arg(long, value_name = "MS")]
    pub(crate) pause_watchdog_ms: Option<f64>,
}

/// The number `ibv_wc_status` gives a status (rdma-core `verbs.h`), as rc_pingpong prints it.
pub(crate) fn wc_status_number(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocLenErr => 1,
        WcStatus::LocQpOpErr => 2,
        WcStatus::LocProtErr => 4,
        WcStatus::WrFlushErr => 5,
        WcStatus::BadRespErr => 7,
        WcStatus::RemInvReqErr => 9,
        WcStatus::RemAccessErr => 10,
        WcStatus::RemOpErr => 11,
        WcStatus::RetryExcErr => 12,
        WcStatus::RnrRetryExcErr => 13,
    }
}

/// `host` without the brackets an IPv6 literal may be written in (`[::1]` is `::1`).
pub(crate) fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Connects (client) or accepts one connection (server) for the exchange.
pub(crate) fn oob_connect(host: Option<&str>, port: u16) -> anyhow::Result<TcpStream> {
    match host {
        Some(h) => {
            // An IPv6 literal may come bracketed, as in a URL (`[::1]`).
            let h = unbracket(h);
            let addrs: Vec<SocketAddr> = (h, port)
                .to_socket_addrs()
                .with_context(|| format!("resolving {h}"))?
                .collect();
            let mut last = None;
            for a in addrs {
                match TcpStream::connect_timeout(&a, Duration::from_secs(10)) {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            match last {
                Some(e) => Err(e).with_context(|| format!("connecting to {h}:{port}")),
                None => bail!("{h} has no address"),
            }
        }
        None => {
            let l = TcpListener::bind(("::", port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
                .with_context(|| format!("listening on TCP port {port}"))?;
            let (s, _) = l.accept().context("accepting the out-of-band connection")?;
            Ok(s)
        }
    }
}

/// The address the device binds and advertises as its GID: `--gid`, or the local address
/// the exchange runs from — so that the peer's packets and its GID agree (rxe checks that a
/// packet's source is the GID it was told).
pub(crate) fn local_ip(s: &TcpStream, link: &LinkArgs) -> anyhow::Result<IpAddr> {
    if let Some(gid) = link.gid {
        return Ok(match gid {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(gid, IpAddr::V4),
            v4 => v4,
        });
    }
    let ip = s.local_addr()?.ip();
    Ok(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

impl LinkArgs {
    /// Checks what the flags alone decide — the impairments' probabilities, the capture file,
    /// `--gid` an address of this host — so that a tool refuses a bad flag before it listens
    /// or connects, rather than once a peer came (which then sees only a closed exchange).
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        self.check_probabilities()?;
        if let Some(path) = &self.pcap {
            // Not created here (a run refused for another reason leaves no empty file): a
            // directory, or a missing parent directory, is what can be seen without it.
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if path.is_dir() {
                bail!("--pcap: capture file {}: is a directory", path.display());
            }
            if !dir.is_dir() {
                bail!(
                    "--pcap: capture file {}: no directory {}",
                    path.display(),
                    dir.display()
                );
            }
        }
        if let Some(ip) = self.gid {
            std::net::UdpSocket::bind((ip, 0))
                .with_context(|| format!("--gid {ip}: not an address of this host"))?;
        }
        Ok(())
    }

    fn check_probabilities(&self) -> anyhow::Result<()> {
        if !(0.0..=1.0).contains(&self.loss) {
            bail!("--loss is a probability in 0–1, not {}", self.loss);
        }
        if !(0.0..=1.0).contains(&self.reorder) {
            bail!("--reorder is a probability in 0–1, not {}", self.reorder);
        }
        if !(0.0..=1.0).contains(&self.ce_mark) {
            bail!("--ce-mark is a probability in 0–1, not {}", self.ce_mark);
        }
        Ok(())
    }
}

/// The device configuration of `link` on `ip`, at UDP port `port`.
pub(crate) fn device_config(
    ip: IpAddr,
    port: u16,
    link: &LinkArgs,
) -> anyhow::Result<DeviceConfig> {
    link.check_probabilities()?;
    let mut cfg = DeviceConfig::new(ip);
    cfg.port = port;
    cfg.seed = link.seed;
    let (tx_loss, rx_loss) = match link.loss_on {
        LossOn::Both => (link.loss, link.loss),
        LossOn::Send => (link.loss, 0.0),
        LossOn::Receive => (0.0, link.loss),
    };
    cfg.tx_impairment = Impairment {
        ce: link.ce_mark,
        ..Impairment::loss(tx_loss)
    };
    cfg.rx_impairment = Impairment {
        reorder: link.reorder,
        delay: if link.delay_us > 0 { 1.0 } else { 0.0 },
        delay_us: link.delay_us,
        ..Impairment::loss(rx_loss)
    };
    cfg.pcap = link.pcap.clone();
    cfg.receive = link.rx;
    cfg.busy_poll = link.busy_poll;
    cfg.pause_iface = link.pause_iface.clone();
    cfg.pause_link_bps = link.pause_rate.unwrap_or(0);
    if let Some(ms) = link.pause_watchdog_ms {
        if !(ms.is_finite() && ms > 0.0) {
            bail!("--pause-watchdog-ms: a positive number of milliseconds, not {ms}");
        }
        cfg.pause_watchdog = Some(std::time::Duration::from_secs_f64(ms / 1e3));
    }
    Ok(cfg)
}

/// The directions `--loss` applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LossOn {
    /// Packets sent and packets received.
    Both,
    /// Packets sent only.
    Send,
    /// Packets received only.
    Receive,
}

/// `ibv_ud_pingpong`'s Q_Key.
const UD_QKEY: u32 = 0x1111_1111;

/// The queue pair of a ping-pong: RC (`ibv_rc_pingpong`) or UD (`ibv_ud_pingpong`, whose
/// buffers have the 40-byte GRH area in front: receives take `size + 40` bytes, Sends go from
/// byte 40).
enum Endpoint {
    Rc { qp: Qp, attr: QpAttr },
    Ud { qp: UdQp, to: Option<(Ah, u32)> },
}

impl Endpoint {
    /// Why a failure may have happened that the status alone does not say: packets from the
    /// peer dropped as invalid, which is what an RC peer in the other `--mode` sends (IRN's
    /// and RoCE's headers differ, and ibv_rc_pingpong's exchange cannot carry the mode).
    fn failure_hint(&self) -> String {
        let invalid = match self {
            Endpoint::Rc { qp, .. } => qp.counters().dropped_invalid,
            Endpoint::Ud { .. } => 0,
        };
        if invalid == 0 {
            return String::new();
        }
        format!(
            " — {invalid} packets from the peer were dropped as invalid: is it in another --mode?"
        )
    }

    fn qpn(&self) -> u32 {
        match self {
            Endpoint::Rc { qp, .. } => qp.qpn(),
            Endpoint::Ud { qp, .. } => qp.qpn(),
        }
    }

    fn post_recv(&self, buf: &Mr, size: u32) -> irn_verbs::Result<()> {
        match self {
            Endpoint::Rc { qp, .. } => qp.post_recv(RecvWr {
                wr_id: RECV_WRID,
                sg_list: vec![buf.sge(0, size)],
            }),
            Endpoint::Ud { qp, .. } => qp.post_recv(RecvWr {
                wr_id: RECV_WRID,
                sg_list: vec![buf.sge(0, size + GRH_LEN as u32)],
            }),
        }
    }

    /// Ready to send to `peer` (RC: INIT → RTR → RTS towards it; UD: RTR → RTS and an
    /// address handle for it).
    fn connect(&mut self, pd: &Pd, peer: &RemoteQp, psn: u32, mtu: u32) -> anyhow::Result<()> {
        match self {
            Endpoint::Rc { qp, attr } => qp.connect(attr, peer, psn)?,
            Endpoint::Ud { qp, to } => {
                qp.ready(mtu, psn)?;
                *to = Some((pd.create_ah(peer.gid, peer.port)?, peer.qpn));
            }
        }
        Ok(())
    }

    fn send(&self, buf: &Mr, size: u32) -> anyhow::Result<()> {
        match self {
            Endpoint::Rc { qp, .. } => qp.post_send(SendWr {
                wr_id: SEND_WRID,
                op: SendOp::Send,
                sg_list: vec![buf.sge(0, size)],
                signaled: true,
                fence: false,
                solicited: false,
            })?,
            Endpoint::Ud { qp, to } => {
                let Some((ah, qpn)) = to else {
                    bail!("a UD Send before the exchange");
                };
                qp.post_send(UdSend {
                    wr_id: SEND_WRID,
                    ah,
                    remote_qpn: *qpn,
                    remote_qkey: UD_QKEY,
                    sg_list: vec![buf.sge(GRH_LEN as u64, size)],
                    imm: None,
                    signaled: true,
                })?;
            }
        }
        Ok(())
    }

    fn print_counters(&self, dev: &Device) {
        match self {
            Endpoint::Rc { qp, .. } => println!("qp counters: {:?}", qp.counters()),
            Endpoint::Ud { qp, .. } => println!("qp counters: {:?}", qp.counters()),
        }
        println!("device counters: {:?}", dev.counters());
        println!("receive path: {}", dev.receive_path());
    }
}

/// `--mode`, refused before anything opens when the runtime has no such transport (the
/// library's rule, [`irn_verbs::check_runtime_mode`]), the flag named.
pub(crate) fn check_runtime_mode(mode: QpMode) -> anyhow::Result<()> {
    irn_verbs::check_runtime_mode(mode).with_context(|| format!("--mode {}", mode.name()))
}

pub fn run(args: PingpongArgs) -> anyhow::Result<bool> {
    check_runtime_mode(args.mode)?;
    args.link.check()?;
    if ![256, 512, 1024, 2048, 4096].contains(&args.mtu) {
        bail!(
            "-m: the MTU is 256, 512, 1024, 2048 or 4096, not {}",
            args.mtu
        );
    }
    if args.rx_depth == 0 || args.iters == 0 {
        bail!("-r and -n must be at least 1");
    }
    if args.ud && args.size > args.mtu {
        bail!(
            "Requested size larger than port MTU ({}): a UD message is one packet",
            args.mtu
        );
    }
    let _ = args.gid_idx;
    let mut tcp = oob_connect(args.host.as_deref(), args.port)?;
    let ip = local_ip(&tcp, &args.link)?;
    let port = args.link.udp_port;
    let dev = Device::open(device_config(ip, port, &args.link)?)
        .with_context(|| format!("opening a device on {ip} port {port}"))?;
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(args.rx_depth as usize + 1)?;
    let mut ep = if args.ud {
        let qp = pd.create_ud_qp(
            &cq,
            &cq,
            UdInit {
                max_send_wr: 1,
                max_recv_wr: args.rx_depth as usize,
            },
        )?;
        qp.init(UD_QKEY)?;
        Endpoint::Ud { qp, to: None }
    } else {
        let qp = pd.create_qp(
            &cq,
            &cq,
            QpInit {
                mode: args.mode,
                max_send_wr: 1,
                max_recv_wr: args.rx_depth as usize,
                ..QpInit::default()
            },
        )?;
        let attr = QpAttr {
            path_mtu: args.mtu,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            access: Access::LOCAL_WRITE,
            ..QpAttr::default()
        };
        qp.init(&attr)?;
        Endpoint::Rc { qp, attr }
    };
    let grh = if args.ud { GRH_LEN } else { 0 };
    let buf = pd.reg_mr(args.size as usize + grh, Access::LOCAL_WRITE)?;
    let r = pingpong(&args, &mut tcp, ip, &pd, &cq, &mut ep, &buf);
    if let (Endpoint::Rc { qp, .. }, Ok(true)) = (&ep, &r) {
        // The last message this side received was acknowledged as it completed, but that
        // ACK may be lost on the way (seen in the interop suite under 5 % loss, where the
        // peer's ibv_rc_pingpong waited out its timeout): stay up to answer the resend.
        linger::linger(|| qp.counters().rx_packets, linger::QUIET, linger::MAX);
    }
    // The counters help most when the run failed.
    if args.link.counters {
        ep.print_counters(&dev);
    }
    r
}

fn pingpong(
    args: &PingpongArgs,
    tcp: &mut TcpStream,
    ip: IpAddr,
    pd: &Pd,
    cq: &Cq,
    ep: &mut Endpoint,
    buf: &Mr,
) -> anyhow::Result<bool> {
    // As the rdma-core tools: INIT, then the receives, then the exchange.
    let post_recvs = |ep: &Endpoint, n: u32| -> anyhow::Result<u32> {
        for _ in 0..n {
            ep.post_recv(buf, args.size)?;
        }
        Ok(n)
    };
    let mut routs = post_recvs(ep, args.rx_depth)?;

    let me = PingpongDest {
        lid: 0,
        qpn: ep.qpn(),
        psn: irn_verbs::random_psn(),
        gid: Gid::from(ip),
    };
    println!("  local address:  {}", me.describe());
    let client = args.host.is_some();
    if client {
        exchange::write_all(tcp, &me.to_wire())?;
    }
    let peer = PingpongDest::parse(&exchange::read_exact(
        tcp,
        PingpongDest::LEN,
        EXCHANGE_TIMEOUT,
    )?)?;
    if peer.gid.ip().is_ipv4() != ip.is_ipv4() {
        bail!(
            "the peer's GID {} and ours {ip} are not of one address family: give --gid an \
             address of this host in the peer's family (or the peer the GID index of ours)",
            peer.gid.ip()
        );
    }
    // Either way the queue pair is ready before the next message: the server's answer, or the
    // client's `done`.
    let remote = RemoteQp {
        gid: peer.gid,
        port: args.link.udp_port,
        qpn: peer.qpn,
        psn: peer.psn,
    };
    ep.connect(pd, &remote, me.psn, args.mtu)?;
    if client {
        exchange::write_all(tcp, b"done\0")?;
    } else {
        exchange::write_all(tcp, &me.to_wire())?;
        let _ = exchange::read_exact(tcp, 5, EXCHANGE_TIMEOUT)?;
    }
    println!("  remote address: {}", peer.describe());

    let start = Instant::now();
    let mut pending = RECV_WRID;
    if client {
        ep.send(buf, args.size)?;
        pending |= SEND_WRID;
    }
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    // Generous: rxe's retries at timeout 14 take 7 × 67 ms; an idle peer is a failure. (A
    // lost UD datagram is never resent: the ping-pong stops, as ibv_ud_pingpong's does.)
    let idle = Duration::from_secs(30);
    while rcnt < args.iters || scnt < args.iters {
        let Some(wc) = cq.wait(idle)? else {
            bail!(
                "no completion for {idle:?} (after {scnt} sends, {rcnt} receives){}",
                ep.failure_hint()
            );
        };
        if wc.status != WcStatus::Success {
            bail!(
                "Failed status {} ({}) for wr_id {}{}",
                wc.status,
                wc_status_number(wc.status),
                wc.wr_id,
                ep.failure_hint()
            );
        }
        match wc.wr_id {
            SEND_WRID => scnt += 1,
            RECV_WRID => {
                routs -= 1;
                if routs <= 1 {
                    routs += post_recvs(ep, args.rx_depth - routs)?;
                }
                rcnt += 1;
            }
            other => bail!("Completion for unknown wr_id {other}"),
        }
        pending &= !wc.wr_id;
        if scnt < args.iters && pending == 0 {
            ep.send(buf, args.size)?;
            pending = RECV_WRID | SEND_WRID;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let usec = secs * 1e6;
    let bytes = u64::from(args.size) * args.iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        args.iters,
        usec / args.iters as f64
    );
    Ok(true)
}
