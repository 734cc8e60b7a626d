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

use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::error::{Context, Result};
use crate::{bail, usage};
use irn_verbs::exchange::{self, PingpongDest};
use irn_verbs::{
    Access, Ah, Cq, Device, Gid, Mr, Pd, Qp, QpAttr, QpInit, QpMode, RecvWr, RemoteQp, SendOp,
    SendWr, UdInit, UdQp, UdSend, WcStatus, GRH_LEN,
};

use crate::linger;
use crate::link::{check_runtime_mode, device_config, local_ip, oob_connect, LinkArgs};

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
                sg_list: irn_verbs::sgl![buf.sge(0, size)],
            }),
            Endpoint::Ud { qp, .. } => qp.post_recv(RecvWr {
                wr_id: RECV_WRID,
                sg_list: irn_verbs::sgl![buf.sge(0, size + GRH_LEN as u32)],
            }),
        }
    }

    /// Ready to send to `peer` (RC: INIT → RTR → RTS towards it; UD: RTR → RTS and an
    /// address handle for it).
    fn connect(&mut self, pd: &Pd, peer: &RemoteQp, psn: u32, mtu: u32) -> Result<()> {
        match self {
            Endpoint::Rc { qp, attr } => qp.connect(attr, peer, psn)?,
            Endpoint::Ud { qp, to } => {
                qp.ready(mtu, psn)?;
                *to = Some((pd.create_ah(peer.gid, peer.port)?, peer.qpn));
            }
        }
        Ok(())
    }

    fn send(&self, buf: &Mr, size: u32) -> Result<()> {
        match self {
            Endpoint::Rc { qp, .. } => qp.post_send(SendWr {
                wr_id: SEND_WRID,
                op: SendOp::Send,
                sg_list: irn_verbs::sgl![buf.sge(0, size)],
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
                    sg_list: irn_verbs::sgl![buf.sge(GRH_LEN as u64, size)],
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

pub fn run(args: PingpongArgs) -> Result<bool> {
    check_runtime_mode(args.mode)?;
    args.link.check()?;
    if ![256, 512, 1024, 2048, 4096].contains(&args.mtu) {
        usage!(
            "-m: the MTU is 256, 512, 1024, 2048 or 4096, not {}",
            args.mtu
        );
    }
    if args.rx_depth == 0 || args.iters == 0 {
        usage!("-r and -n must be at least 1");
    }
    if args.ud && args.size > args.mtu {
        usage!(
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
) -> Result<bool> {
    // As the rdma-core tools: INIT, then the receives, then the exchange.
    let post_recvs = |ep: &Endpoint, n: u32| -> Result<u32> {
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
                wc.status.ibv_number(),
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
