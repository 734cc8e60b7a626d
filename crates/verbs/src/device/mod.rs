//! The device: one UDP socket, the queue pairs, memory and completion queues behind it, and the
//! engine thread that receives packets and runs timers.
//!
//! # Concurrency
//!
//! Everything mutable lives in one [`Core`] behind a mutex. Application threads lock it to post
//! work and then transmit what the queue pair has to send *on their own thread* (no hand-off,
//! so a post costs no context switch); the engine thread blocks in `poll(2)` on the socket with
//! the earliest queue-pair deadline as timeout, then locks the core to hand it a burst of
//! received packets, fire expired timers and transmit the answers. Completions go to their CQ,
//! whose own condition variable wakes the threads blocked in [`Cq::wait`] on it — only when one
//! sleeps there, so a completion costs no system call otherwise.
//!
//! # Wire
//!
//! Packets leave through an unconnected UDP socket whose IPv4 ID is predictable, so their ICRC
//! is right; they arrive through that socket (unprivileged) or a raw socket (privileged, every
//! ICRC verified). The `net` module has the details ([`ReceivePath`]). Either way the engine
//! handles whole IP packets: on the UDP path their headers are rebuilt in front of the payload.
//! Sent payloads stay where they lie in registered memory until the kernel copies them
//! (`lent`): a transmit batch holds headers and trailers, and I/O vectors point at the rest.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use irn_transport::{
    Access, AttrMask, ByteMemory, CcKind, Completion, Counters, Dur, MemError, ModifyError,
    PostError, QpAttr, QpConfig, QpState, QueuePair, RecoveryConfig, RecvWr, SendWr, Sge, Time,
    Transmit, WcOpcode,
};
use irn_wire::{Ecn, IbRepr, IpRepr, RoceRepr};

use irn_wire::udp::HEADER_LEN as UDP_LEN;

use crate::capture::Capture;

mod app_memory;
mod engine;
mod lent;
mod objects;
mod pause;
mod tx;
mod ud;

pub use ud::{Ah, UdInit, UdQp, UdSend};

use crate::impair::{Impairer, Impairment};
use crate::net::{self, ReceivePath, Reject, RxBatch, Sockets};
use crate::Gid;
use engine::engine;

/// The UDP port of RoCEv2 (IANA).
pub const ROCE_PORT: u16 = irn_wire::ROCEV2_PORT;

/// In-flight bound of a RoCE-mode queue pair, as Linux rxe's.
const ROCE_MAX_UNACKED_PSNS: u32 = 128;

/// Largest IP packet handled: a 4096-byte MTU packet with every header.
const MAX_DATAGRAM: usize = 4096 + 128;
/// Packets received per lock of the core.
const RX_BURST: usize = 64;
/// The packets after which the engine stops reading bursts in one wake-up (it stops earlier
/// when the socket is empty) to run its timers and the turns of queue pairs with more to
/// send: one burst of coalesced datagrams, or many of single packets (ACKs).
const RX_PACKETS: usize = 4096;
/// Packets one queue pair sends per turn. Bounding the turn keeps the lock short, so ACKs and
/// NAKs are processed while a deep send queue drains (without it, a go-back-N sender with
/// thousands of packets posted would send them all before hearing that the first was lost,
/// and its retransmission timer would expire behind its own burst), and shares the link
/// fairly among queue pairs.
const TX_BURST: usize = 32;
/// Packets a transmit batch holds before it is sent: a turn's, or (while a received burst is
/// processed) those of every queue pair the burst gave a turn.
const TX_SLOTS: usize = 64;
/// Bytes of one packet slot of a transmit batch.
const SLOT: usize = MAX_DATAGRAM + 64;
/// The engine thread wakes at least this often (to notice a closed device).
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// How a device is opened.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Local address to bind (IPv4 or IPv6). Peers name this device by its GID, derived from it.
    pub addr: IpAddr,
    /// UDP port to bind and to send from; 4791 for interoperability, 0 for any free port
    /// (tests running side by side).
    pub port: u16,
    /// Impairment of packets this device sends.
    pub tx_impairment: Impairment,
    /// Impairment of packets this device receives.
    pub rx_impairment: Impairment,
    /// Seed of the impairment draws (the keys are always from the OS's random source).
    pub seed: u64,
    /// Capture every packet sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Socket buffer sizes in bytes (0 = the system default).
    pub socket_buffer: usize,
    /// How packets are received: through the UDP socket, or a raw socket that sees (and so
    /// verifies the ICRC of) every packet whole. [`ReceivePath::Auto`] takes the raw path
    /// when the process may.
    pub receive: ReceivePath,
    /// The most bytes all this device's queue pairs may have in flight together (sent, not
    /// yet acknowledged), more than 0. New request packets are held once it is spent, so a
    /// turn overshoots it by at most the packet that spends it; what is never held can take
    /// the total further — IRN Read responses, and a RoCE Read request, whose PSNs (its
    /// response packets) all count at once. See [`DEFAULT_IN_FLIGHT_BUDGET`].
    pub in_flight_budget: usize,
    /// Busy polling: a thread polling one of the device's completion queues
    /// ([`Cq::poll`], [`Cq::wait`]) receives and processes the device's packets itself, and
    /// runs its timers, instead of waiting for the engine thread to be woken — `Cq::wait`
    /// spins rather than sleeps. What perftest and DPDK users expect of a latency test: no
    /// wake-up between a packet's arrival and its completion, at the price of a core per
    /// polling thread. While a thread has polled within the last millisecond the engine
    /// leaves the whole device to it — the socket, the timers, the queue pairs' turns and the
    /// posts' batches, for which posts then ring no doorbell — and looks again every
    /// millisecond; otherwise it works as without busy polling. Threads that wait all the time
    /// for rare events should not poll (the connection manager's agent sleeps).
    pub busy_poll: bool,
    /// Honour the 802.1Qbb PFC and 802.3x PAUSE frames that arrive on this interface (the
    /// one the device's address is on; a packet socket: needs `CAP_NET_RAW`): a queue pair of
    /// a paused priority — its DSCP ÷ 8 — sends nothing until the pause runs out
    /// (`device/pause.rs`). Default none: pauses are ignored, as by any host stack.
    pub pause_iface: Option<String>,
    /// The link rate pause quanta are counted at (512 bit times each), bits per second.
    /// Default 0: the interface's own speed (`/sys/class/net/IFACE/speed`), or 1 Gb/s when it
    /// reports none (a veth).
    pub pause_link_bps: u64,
    /// The NIC-side PFC watchdog (seed 001 §4.3): a priority paused without a break for this
    /// long stops the device honouring pauses, for good. Default none.
    pub pause_watchdog: Option<Duration>,
}

/// What all of a device's queue pairs may have in flight together by default: 4 MiB.
///
/// A NIC's queue pairs share its line rate, so however many there are, they put at most that
/// rate into the network; the BDP cap of IRN (§3.2) and RoCE's unacknowledged-PSN limit bound
/// each queue pair alone. A software device has no line rate: its engine hands the kernel
/// whatever its queue pairs' windows allow, so 256 queue pairs at loopback's MTU 4096 had
/// 256 × 128 × 4 KB = 128 MB in flight — queued in the receiver's socket, which a software
/// receiver drains at about 2 GB/s: 60 ms and more, as long as timeout 14 (67 ms). Every RoCE
/// queue pair timed out, resent its window by go-back-N into the same queue, and one of them
/// ended in `IBV_WC_RETRY_EXC_ERR`; IRN queue pairs resent 20 % of what they sent
/// (docs/BENCHMARKS.md). The budget is the device's stand-in for a line rate: new packets
/// wait in the sender (where no timer runs for them) once it is spent, and go in turn — a
/// FIFO of the waiting queue pairs, one transmit turn each — as acknowledgements free it.
/// Retransmissions, responses and acknowledgements are never held
/// ([`QueuePair::hold_new_requests`](irn_transport::QueuePair::hold_new_requests)).
///
/// 4 MiB is 8 IRN caps at MTU 4096 (one queue pair never meets it), 4 ms of a software
/// receiver's work at 1 GB/s and 40 ms of a debug build's: the queue it can build in front of
/// a receiver stays shorter than timeout 14 (67 ms). With 16 MiB, a debug build's RoCE queue
/// pairs at 256 connections still went back N until one gave up in a loaded test run; in
/// release builds 4 and 16 MiB moved the same (docs/BENCHMARKS.md).
pub const DEFAULT_IN_FLIGHT_BUDGET: usize = 4 << 20;

impl DeviceConfig {
    /// Defaults on `addr`: port 4791, no impairment, no capture, 4 MB socket buffers, the
    /// raw receive path if permitted.
    pub fn new(addr: IpAddr) -> DeviceConfig {
        DeviceConfig {
            addr,
            port: ROCE_PORT,
            tx_impairment: Impairment::default(),
            rx_impairment: Impairment::default(),
            seed: 1,
            pcap: None,
            socket_buffer: 4 << 20,
            receive: ReceivePath::Auto,
            in_flight_budget: DEFAULT_IN_FLIGHT_BUDGET,
            busy_poll: false,
            pause_iface: None,
            pause_link_bps: 0,
            pause_watchdog: None,
        }
    }
}

/// Loss recovery of a queue pair; both ends must use the same (agreed out of band): any of
/// irn-transport's [`RecoveryMode`](irn_transport::RecoveryMode)s, by the same names as the
/// simulator's (`roce`, `irn`, and the factor-analysis variants).
pub use irn_transport::RecoveryMode as QpMode;

/// The recovery configuration of `mode` for a runtime on real hosts. The RoCE modes (and seed
/// 002's `reorder-buffer` and `ext-ib`) time out as the `timeout` attribute says (rxe does the
/// same). The IRN modes replace the paper's fixed RTO_low / RTO_high (100 / 320 µs, a NIC's
/// timers in a datacenter whose round trip is known) by RFC 6298's adaptive timer: SRTT +
/// 4·RTTVAR, at least 500 µs (a user-space engine is woken by the kernel's scheduler, tens of
/// microseconds late), 10 ms before the first sample (2 ms timed out a debug build's first
/// ACKs, which cut AIMD's window for the rest of a transfer), doubled per expiry up to 200 ms.
/// A fixed 0.5 / 2 ms fired before the late ACKs of a busy receiver: 64 queue pairs on loopback resent
/// 96 % of what they sent and moved 19 MB/s; with the adaptive timer, 107 MB/s
/// (docs/BENCHMARKS.md). IRN's BDP-FC cap (where the mode has one) is the bandwidth-delay
/// product of `line_rate_bps` over a 400 µs software round trip in packets of `mtu` bytes
/// (IRN §3.2); a queue pair is sized for its path MTU when it connects
/// ([`QueuePair::size_for_path`](irn_transport::QueuePair::size_for_path)). Selective repeat
/// resends a lost retransmission once a later packet is acknowledged
/// ([`RecoveryConfig::resend_lost_retransmissions`]) rather than at a timer that is
/// milliseconds here, a timeout resends every PSN not selectively acknowledged unless the
/// first ACK after it proves it spurious ([`RecoveryConfig::timeout_resends_unsacked`]; after
/// an answer too soon to tell, a SACK of new data or of a probe of the tail decides), and
/// NACKs carry the loss bitmap
/// ([`RecoveryConfig::nack_bitmap`]).
pub fn runtime_recovery(mode: QpMode, line_rate_bps: u64, mtu: u32) -> RecoveryConfig {
    let preset = mode.preset();
    let cap = preset
        .bdp_cap
        .map(|_| irn_transport::bdp_cap_packets(line_rate_bps, RUNTIME_RTT, mtu));
    if mode.is_irn() {
        RecoveryConfig {
            rto: irn_transport::RtoPolicy::Adaptive {
                min: Dur::from_micros(500),
                max: Dur::from_micros(200_000),
                initial: Dur::from_micros(10_000),
            },
            bdp_cap: cap,
            // Selective repeat resends a lost retransmission once a later packet is
            // acknowledged instead of waiting for a timer that is milliseconds here: at 1 %
            // loss on both ends, the retransmissions lost again were nearly all of a loopback
            // stream's timeouts.
            resend_lost_retransmissions: preset.retransmission
                == irn_transport::Retransmission::SelectiveRepeat,
            // And a timeout resends every PSN not SACKed, as TCP after an RTO, rather than
            // one PSN per doubled timer when nothing above the holes was SACKed — once the
            // first ACK after it shows the loss was real (F-RTO): a receiver descheduled for
            // a millisecond is not a lost window.
            timeout_resends_unsacked: preset.retransmission
                == irn_transport::Retransmission::SelectiveRepeat,
            // And NACKs carry the receiver's loss bitmap, so they collapse per received burst
            // as ACKs do and a lost NACK costs no spurious resend: through 1 % loss each way
            // nearly every packet behind a hole drew its own NACK.
            nack_bitmap: preset.retransmission == irn_transport::Retransmission::SelectiveRepeat,
            // And BDP-FC counts the PSNs not SACKed, within up to four caps of the cumulative
            // ACK ([`bdp_fc_span`]): a hole no longer stops new data for the round trip its
            // repair takes, which on a host (loss is not congestion there, and the round trip
            // is the window's own queue) held one queue pair at 0.74 of its lossless goodput
            // through 1 % loss each way; with the span, 0.99 (docs/BENCHMARKS.md).
            // Both ends must agree: the receiver takes out-of-order packets that far ahead.
            bdp_fc_span: cap
                .filter(|_| preset.retransmission == irn_transport::Retransmission::SelectiveRepeat)
                .map(bdp_fc_span)
                .filter(|&k| k > 1),
            ..preset
        }
    } else {
        RecoveryConfig {
            rto: irn_transport::RtoPolicy::FromAttr,
            // Linux rxe never has more than RXE_MAX_UNACKED_PSNS = 128 PSNs unacknowledged
            // (`rxe_param.h`, checked in `rxe_req.c`); a software receiver behind a socket
            // buffer needs the same bound, or go-back-N drowns in its own retransmissions.
            bdp_cap: Some(ROCE_MAX_UNACKED_PSNS),
            // Seed 002's hole rule waits 200 µs rather than 20: a software receiver is woken
            // tens of microseconds late, and the packets behind a hole arrive in bursts.
            hole_rule: preset.hole_rule.map(|h| irn_transport::HoleRule {
                delay: Dur::from_micros(200),
                ..h
            }),
            // The reorder buffer speaks standard RoCE, so its peer may be Linux rxe, which
            // answers re-requested Read parts only in ascending order (`reread_all`).
            reread_all: mode != QpMode::ReorderBuffer,
            ..preset
        }
    }
}

/// Whether the runtime runs queue pairs of `mode` ([`Pd::create_qp`] refuses the others):
/// every recovery mode but `tcp`, which is the simulator's model of iWARP's TCP.
pub fn check_runtime_mode(mode: QpMode) -> Result<()> {
    if mode == QpMode::Tcp {
        return Err(Error::Config(
            "mode `tcp` is the simulator's model of iWARP's TCP (SPEC E10), not a transport of \
             the runtime",
        ));
    }
    Ok(())
}

/// Whether congestion control `cc` can run over loss recovery `mode` in the runtime: a window
/// (DCTCP, AIMD) only where the mode [takes one](QpMode::takes_a_window) — over
/// `roce-go-back-0`, `irn perf --mode roce-go-back-0 --cc aimd` through 1 % loss completed
/// nothing in 30 s, one 67 ms timeout per two packets.
pub fn check_runtime_cc(mode: QpMode, cc: CcKind) -> Result<()> {
    if !mode.takes_a_window() && cc.window_algorithm().is_some() {
        return Err(Error::Config(
            "a window controller (dctcp, aimd) cannot run over roce-go-back-0: its responder \
             ACKs only at message ends, so a window smaller than a message would wait for a \
             timeout each time; use none, dcqcn or timely with it, or another mode",
        ));
    }
    Ok(())
}

/// The controller factory and the receiver's CNP interval of a queue pair running `cc`
/// (`QpInit::cc`: the controllers of `irn-transport`, the same the simulator runs, SPEC N5, on
/// real packets), with an in-flight cap of `cap` packets of `mtu` bytes (what a window starts
/// at: IRN's flows start at line rate; the rate controllers start at the queue pair's line
/// rate). Data always leaves ECN-capable (ECT(0)); a CE mark a switch (or `Impairment::ce`)
/// puts on it reaches the receiver through the kernel (the raw path's IP header, or
/// `IP_RECVTOS` / `IPV6_RECVTCLASS` on the UDP path), and the receiver answers as the
/// controller expects: under DCQCN it is the notification point, answering CE marks with at
/// most one CNP per software round trip (400 µs: the runtime's profile).
pub(crate) fn cc_factory(
    cc: CcKind,
    cap: Option<u32>,
    mtu: u64,
    line_rate_bps: u64,
) -> (Arc<dyn irn_transport::ControllerFactory>, Option<Dur>) {
    use irn_transport::{
        DcqcnFactory, NoCcFactory, TimelyFactory, WindowAlgorithm, WindowConfig, WindowFactory,
    };
    let window = |algorithm: WindowAlgorithm| {
        let init = u64::from(cap.unwrap_or(128)) * mtu;
        Arc::new(WindowFactory(WindowConfig {
            algorithm,
            mss: mtu,
            init_window: init,
            max_window: Some(init),
            // A software round trip (RUNTIME_RTT), not a datacenter's.
            initial_rtt: RUNTIME_RTT,
            ..WindowConfig::default()
        })) as Arc<dyn irn_transport::ControllerFactory>
    };
    match cc {
        CcKind::None => (Arc::new(NoCcFactory), None),
        CcKind::Dcqcn => (
            Arc::new(DcqcnFactory {
                config: runtime_dcqcn(line_rate_bps),
                seed: random_u64(),
            }),
            Some(RUNTIME_RTT),
        ),
        CcKind::Timely => (Arc::new(TimelyFactory(runtime_timely(line_rate_bps))), None),
        CcKind::Dctcp => (window(WindowAlgorithm::Dctcp), None),
        CcKind::Aimd => (window(WindowAlgorithm::Aimd), None),
    }
}

/// DCQCN for a software runtime. The paper's parameters (Zhu et al., SIGCOMM 2015 §5; the
/// simulator's [`DcqcnConfig::default`](irn_transport::DcqcnConfig)) are a NIC's in a
/// datacenter whose round trip is microseconds: a CNP at most every 50 µs, α and the rate
/// raised every 55 µs. Behind a user-space engine the round trip is [`RUNTIME_RTT`], so a
/// sender would raise its rate eight times before any CNP could answer: through a 300 Mb/s
/// port (`irn switch`, two IRN senders, tests/switch_netns.rs) the NIC's timers left 8 400–
/// 25 700 drops per run against 56 000–98 000 without congestion control; this profile, 800–850
/// (docs/BENCHMARKS.md).
/// Here the notification point sends at most one CNP per round trip, the α and increase
/// timers keep the paper's 55 : 50 ratio to it, and the increase steps and the floor keep the
/// paper's proportion to the line rate (40 Mb/s, 400 Mb/s and 100 Mb/s of 40 Gb/s).
fn runtime_dcqcn(line_rate_bps: u64) -> irn_transport::DcqcnConfig {
    let period = Dur::from_nanos(RUNTIME_RTT.as_nanos() * 55 / 50);
    irn_transport::DcqcnConfig {
        alpha_period: period,
        increase_period: period,
        ai_bps: (line_rate_bps / 1000).max(1),
        hai_bps: (line_rate_bps / 100).max(1),
        min_rate_bps: (line_rate_bps / 400).max(1),
        ..irn_transport::DcqcnConfig::default()
    }
}

/// TIMELY for a software runtime. The paper's thresholds (Mittal et al., SIGCOMM 2015 §5:
/// T_low 50 µs, T_high 500 µs, a 20 µs minimum RTT, δ 10 Mb/s at 10 Gb/s) sit below a
/// user-space round trip, which alone is above T_high under load: the rate only ever fell,
/// and one queue pair on loopback moved 17 MB/s. Here the thresholds keep the paper's
/// proportions to [`RUNTIME_RTT`] (T_low = the round trip, T_high ten times it, the minimum
/// RTT two fifths of it) and δ and the floor keep theirs to the line rate (1/1000, 1/100).
fn runtime_timely(line_rate_bps: u64) -> irn_transport::TimelyConfig {
    let rtt = RUNTIME_RTT.as_nanos();
    irn_transport::TimelyConfig {
        t_low: RUNTIME_RTT,
        t_high: Dur::from_nanos(rtt * 10),
        min_rtt: Dur::from_nanos(rtt * 2 / 5),
        delta_bps: (line_rate_bps / 1000).max(1),
        min_rate_bps: (line_rate_bps / 100).max(1),
        ..irn_transport::TimelyConfig::default()
    }
}

/// The round trip the runtime's BDP cap and window controllers assume: a user-space engine on
/// each end, woken by the kernel, with socket buffers and batched wake-ups in between. Under
/// load it is hundreds of microseconds, not a NIC's few: one IRN queue pair writing 64 KiB
/// messages over loopback (MTU 4096, `irn perf`, 2 cores) moved 0.77 GB/s with the cap a
/// 100 µs round trip gives (125 KB in flight at 10 Gb/s), 1.05 GB/s at 200 µs, 2.5 GB/s at
/// 400 µs and no more at 800 µs; at MTU 1024, 0.70 GB/s at 100 µs and 1.1–1.2 GB/s at 400 or
/// 800 µs (docs/BENCHMARKS.md).
const RUNTIME_RTT: Dur = Dur::from_micros(400);

/// How many BDP caps `next − una` may span in the runtime's IRN, BDP-FC counting only the PSNs
/// not SACKed ([`RecoveryConfig::bdp_fc_span`]): up to 4, and no further than a NACK's loss
/// bitmap reaches (512 PSNs), past which NACKs go back to one per packet, each SACKing only
/// itself — 4 × 123 packets at MTU 4096 and 10 Gb/s; 1 (no span, the paper's cap) at MTU 1024,
/// whose cap is 489.
fn bdp_fc_span(cap: u32) -> u32 {
    let reach = (32 * irn_wire::MAX_BITMAP_WORDS) as u32;
    (reach / cap.max(1)).clamp(1, 4)
}

/// A list post stopped at a refused work request ([`Qp::post_send_list`],
/// [`Qp::post_recv_list`]): the `bad_wr` of `ibv_post_send` / `ibv_post_recv`.
#[derive(Debug, thiserror::Error)]
#[error("work request {posted} of the list refused: {error}")]
pub struct PostListError {
    /// Work requests posted before it (they will complete).
    pub posted: usize,
    /// Why it was refused (in the message, so not also a `source`).
    pub error: Error,
}

/// Everything the verbs calls can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket or file operation failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The work request is not accepted in the queue pair's state (`EINVAL` from
    /// `ibv_post_send` in RESET/INIT, for instance).
    #[error("work request refused in queue-pair state {0}")]
    InvalidState(QpState),
    /// The send or receive queue is full (`ENOMEM`).
    #[error("work queue full")]
    QueueFull,
    /// The work request is malformed (e.g. an atomic whose buffer is not 8 bytes).
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    /// The completion queue could receive more completions than it holds (`ENOMEM`: verbs
    /// would overrun it; irn refuses the post instead).
    #[error("completion queue {0} full: poll it before posting more")]
    CqFull(u32),
    /// A completion arrived at a full completion queue; completions were lost
    /// (`IBV_EVENT_CQ_ERR`).
    #[error("completion queue {0} overran")]
    CqOverrun(u32),
    /// `modify` refused the transition or an attribute.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// A UD queue pair's `modify` refused the transition.
    #[error("{0}")]
    UdModify(irn_transport::UdModifyError),
    /// `create_qp` refused the queue pair's configuration (`EINVAL` from `ibv_create_qp`).
    // Its cause is in the message, not also a `source` (which an error chain would print a
    // second time).
    #[error("queue pair configuration: {0}")]
    QpConfig(irn_transport::QpConfigError),
    /// RTR needs the peer's address.
    #[error("moving to RTR needs the remote address (GID and port)")]
    NoRemote,
    /// INIT → RTR asked for a path MTU the route to the peer cannot carry (`EINVAL`): every
    /// full-size packet would be refused by the kernel (`EMSGSIZE`) and the queue pair would
    /// end in `RETRY_EXC_ERR` half a second later.
    #[error(
        "path MTU {asked} does not fit the route to {peer}, which carries IB MTU {route} at most \
         (its link MTU less 80 bytes of headers, as rxe derives its active MTU)"
    )]
    PathMtu {
        /// The `path_mtu` asked for.
        asked: u32,
        /// The peer.
        peer: IpAddr,
        /// The largest IB MTU the route carries ([`crate::active_mtu`]).
        route: u32,
    },
    /// Memory registration failed.
    #[error(transparent)]
    Memory(#[from] MemError),
    /// A memory-region access outside the region.
    #[error("access of {len} bytes at offset {offset} outside a {size}-byte region")]
    OutOfRange {
        /// Offset asked.
        offset: u64,
        /// Length asked.
        len: u64,
        /// Region size.
        size: u64,
    },
    /// The object no longer exists (destroyed, or its device closed).
    #[error("the object was destroyed")]
    Gone,
    /// The remote address's family differs from the device's.
    #[error("remote {0} is not reachable from a device bound to {1}")]
    AddressFamily(IpAddr, IpAddr),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

impl From<irn_transport::QpConfigError> for Error {
    fn from(e: irn_transport::QpConfigError) -> Error {
        Error::QpConfig(e)
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        match e {
            PostError::InvalidState(s) => Error::InvalidState(s),
            PostError::QueueFull => Error::QueueFull,
            PostError::InvalidWr(w) => Error::InvalidWr(w),
        }
    }
}

/// Result of the verbs calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A completion (verbs `struct ibv_wc`).
pub type Wc = Completion;

/// Device-wide counters (the driver's, next to each queue pair's own [`Counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Datagrams sent.
    pub tx_packets: u64,
    /// Bytes sent (UDP payloads).
    pub tx_bytes: u64,
    /// Datagrams received.
    pub rx_packets: u64,
    /// Bytes received (UDP payloads).
    pub rx_bytes: u64,
    /// Received datagrams that do not parse as an InfiniBand packet (dropped).
    pub rx_malformed: u64,
    /// Received packets whose ICRC is wrong (dropped, as rxe drops them). Counted only where
    /// received ICRCs can be verified: on the raw path, and for IPv6.
    pub rx_icrc_errors: u64,
    /// Received packets for a queue pair this device does not have (dropped, as rxe does).
    pub rx_unknown_qp: u64,
    /// Received packets whose source is not the queue pair's peer: another address (dropped, as
    /// rxe does), or another UDP port — in the IRN modes, whose peer is always an irn device
    /// sending from the port it was told, any other; in the RoCE modes, any other than the one
    /// the peer's first packet came from.
    pub rx_wrong_source: u64,
    /// Sends the kernel refused (buffer full, unreachable): the packet is lost.
    pub tx_errors: u64,
    /// Packets dropped by the send impairment.
    pub tx_impaired_drops: u64,
    /// Packets dropped by the receive impairment.
    pub rx_impaired_drops: u64,
    /// Packets duplicated, reordered or delayed by either impairment.
    pub impaired_other: u64,
    /// Packets written to the capture.
    pub captured: u64,
    /// UDP GSO messages sent: each carried two or more packets in one system call, cut into
    /// datagrams by the kernel (their packets are in `tx_packets`). Only towards peers that
    /// take them ([`Qp::set_peer_gso`]).
    pub tx_gso_messages: u64,
    /// PFC and PAUSE frames received on [`DeviceConfig::pause_iface`].
    pub pause_frames_received: u64,
    /// Transmit turns a pause held back.
    pub pause_held_turns: u64,
    /// The NIC-side PFC watchdog fired: pauses are no longer honoured (0 or 1).
    pub pause_watchdog_fired: u64,
    /// Packets built with their payload left where it lies in registered memory, the kernel
    /// gathering it from there (no copy behind the headers; a payload whose first piece is
    /// under 512 bytes, or in more than four pieces, is copied).
    pub tx_lent: u64,
    /// System calls that sent packets (`sendmmsg`, each one datagram or GSO message or
    /// more): `tx_packets` over this is the packets a call moved, which the doorbell for
    /// posts and UDP GSO raise ([`Qp::post_send`]).
    pub tx_calls: u64,
    /// Coalesced datagrams received (a GSO peer's messages, or what GRO merged), each split
    /// back into the packets counted in `rx_packets`.
    pub rx_coalesced: u64,
    /// Datagrams longer than one packet that the raw receive path could not cut into their
    /// packets (counted in `rx_malformed` too): no length gave a first packet with a valid
    /// ICRC and, where the others start, BTHs for this device's queue pairs — or the search's
    /// budget ran out (`Core::receive_coalesced`). Only a peer on this host sends coalesced
    /// datagrams whole (loopback, veths); a corrupted or forged one, or one from a peer that
    /// numbers its segments' identifications otherwise, lands here.
    pub rx_oversized: u64,
    /// Connections (INIT → RTR) that send from the device's port instead of a port of their
    /// own: theirs could not be bound, or the device had [`MAX_SOURCE_PORTS`] open already.
    pub tx_port_fallbacks: u64,
    /// Transmit turns in which a queue pair had new packets ready that waited for the
    /// device's in-flight budget ([`DeviceConfig::in_flight_budget`]).
    pub tx_budget_holds: u64,
    /// The most bytes the device's queue pairs had in flight together.
    pub peak_in_flight_bytes: u64,
}

struct QpEntry {
    qp: QueuePair,
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    remote: Option<SocketAddr>,
    /// The deadline of this queue pair's entry in [`Core::timer_heap`] that is current (the
    /// heap may hold older ones, skipped when they come up).
    armed: Option<Time>,
    /// RoCE modes: the UDP source port the peer's first packet came from, which its later
    /// ones must come from too (a RoCE peer picks one per connection: rxe and irn
    /// `rdma_get_udp_sport`'s, see [`net::roce_source_port`]). `None` until then, and after each
    /// (re)connection.
    peer_sport: Option<u16>,
    /// The peer takes coalesced datagrams ([`Qp::set_peer_gso`]).
    gso: bool,
    /// The DSCP its packets carry ([`Qp::set_traffic_class`]).
    dscp: u8,
    /// The UDP source port its packets leave from ([`Core::source_port`]), set as it
    /// connects.
    sport: u16,
    /// The source port an irn peer's queue pair sends from when it has its own (the same
    /// [`net::roce_source_port`]: the choice is symmetric), set as it connects.
    peer_port: u16,
    /// What it was created with: INIT → RTR sizes its BDP cap and congestion window for the
    /// path MTU from these.
    init: QpInit,
    /// The bytes it has in flight, as counted in [`Core::in_flight_bytes`].
    charged: u64,
    /// It is in [`Core::budget_queue`].
    waiting: bool,
    /// It is in [`Core::turns_due`].
    turn_due: bool,
}

impl QpEntry {
    /// Sizes the BDP-FC cap and the congestion controller for packets of `mtu` bytes (the
    /// path MTU INIT → RTR sets). The queue pair is created sized for 1024-byte packets.
    fn size_for_path(&mut self, now: Time, mtu: u32) -> Result<()> {
        let (recovery, cc, _) = self.init.for_path(mtu);
        self.qp
            .size_for_path(now, recovery.bdp_cap, recovery.bdp_fc_span, cc)?;
        Ok(())
    }
}

struct CqState {
    entries: VecDeque<Wc>,
    depth: usize,
    /// Completions that may still arrive: posted receive WRs and signaled send WRs not yet
    /// completed, bounding what could land in `entries`.
    reserved: usize,
    overrun: bool,
    /// Wakes the threads asleep in [`Cq::wait`] on this CQ (they wait on it with the core's
    /// lock). One per CQ, so that a completion wakes only the threads waiting for that CQ — a
    /// device-wide one woke the connection manager's agent for every completion of every CQ.
    ready: Arc<Condvar>,
    /// Threads asleep on `ready`: with none, a completion needs no wake-up (a notify is a
    /// system call even when nobody waits).
    sleepers: usize,
    /// `ready` was notified since the last thread went to sleep on it: the other completions
    /// of a burst need no system call each (the woken thread takes them all once it has the
    /// lock).
    notified: bool,
}

struct PdState {
    mem: ByteMemory,
    /// The handle was dropped; the memory goes when its last queue pair does.
    closed: bool,
}

/// The device's state, behind one mutex.
pub(crate) struct Core {
    local: SocketAddr,
    pds: BTreeMap<u32, PdState>,
    cqs: BTreeMap<u32, CqState>,
    qps: BTreeMap<u32, QpEntry>,
    /// Unreliable-datagram queue pairs (one QPN space with `qps`).
    uds: BTreeMap<u32, ud::UdEntry>,
    /// Address handles: where UD datagrams go.
    ahs: BTreeMap<u32, SocketAddr>,
    next_id: u32,
    /// Both directions' impairment, its random stream and the packets it holds back.
    impairer: Impairer,
    /// Queue pairs whose last turn ended with packets left to send.
    tx_pending: std::collections::BTreeSet<u32>,
    /// [`DeviceConfig::in_flight_budget`].
    in_flight_budget: u64,
    /// What the queue pairs have in flight together: the sum of their `charged`.
    in_flight_bytes: u64,
    /// Queue pairs with new packets held back by the budget, in the order they were held: the
    /// engine gives them turns from the front as acknowledgements free the budget, and until
    /// the queue is empty no other queue pair starts new packets (so the ones whose
    /// acknowledgements come back do not take the budget again and again).
    budget_queue: VecDeque<u32>,
    /// Every queue pair's next deadline, earliest first: the engine fires the due ones and
    /// sleeps until the next without looking at the others (10 000 queue pairs with a little
    /// traffic each cost a scan of all of them per wake-up before).
    timer_heap: std::collections::BinaryHeap<std::cmp::Reverse<(Time, u32)>>,
    counters: DeviceCounters,
    capture: Option<Capture>,
    /// Received packets carry all their ICRC covers (see [`ReceivePath`]).
    verify_icrc: bool,
    /// Packets built in place, waiting to be sent, in batches (`tx.rs`).
    tx: tx::TxState,
    /// Queue pairs that received packets in the burst being processed, whose transmit turns
    /// come when it is done ([`Core::take_turns`]).
    turns_due: Vec<u32>,
    /// Where a coalesced datagram's segment is rebuilt into a whole IP packet when its
    /// headers are needed ([`Core::receive_segment`]).
    rx_scratch: Vec<u8>,
    /// Posts left packets in the transmit batch and the engine was woken to send them
    /// ([`Core::ring_doorbell`]); cleared when the batch leaves.
    doorbell: bool,
    /// The queue pair whose turn it is may have its packets coalesced (its peer said it takes
    /// GSO batches: [`Qp::set_peer_gso`]).
    gso_turn: bool,
    /// Send-only sockets bound to the UDP source ports of this device's queue pairs
    /// ([`net::roce_source_port`]), opened as queue pairs connect and closed when the last
    /// one using a port is gone, at most [`MAX_SOURCE_PORTS`] at once.
    src_socks: BTreeMap<u16, Arc<SourceSocket>>,
    /// The send buffer each of them gets.
    socket_buffer: usize,
    /// The receive buffer asked for so far, and what the connected queue pairs' peers may have
    /// in flight: the configured size plus each connection's BDP cap in bytes
    /// ([`Shared::fit_receive_buffer`]).
    rx_buffer: usize,
    rx_wanted: usize,
    /// The headers the last verified segment arrived under, kept for the next one
    /// ([`Core::receive_segment`]).
    seg_headers: Option<net::SegmentHeaders>,
    /// The payload of the packet being built, reused.
    payload: lent::Gathered,
    /// Link-level pauses honoured ([`DeviceConfig::pause_iface`]).
    pause: Option<Box<pause::PauseIn>>,
}

/// A send-only socket on one queue-pair source port (shared with the transmit batches sealed
/// for it, which may leave after it is closed here).
pub(crate) struct SourceSocket {
    sock: UdpSocket,
    /// It currently sends IPv4 datagrams without a checksum (`SO_NO_CHECK`): read and switched
    /// only by the thread sending a batch, one at a time (`tx.rs`).
    no_check: AtomicBool,
}

/// The most source-port sockets a device has open at once (file descriptors): a queue pair
/// whose port would need one more sends from the device's port, as does one whose port
/// cannot be bound (`DeviceCounters::tx_port_fallbacks` counts both).
pub const MAX_SOURCE_PORTS: usize = 256;

impl Core {
    /// The UDP source port queue pair `qpn` sends from once connected to `dest_qpn`: Linux's
    /// choice for that connection ([`net::roce_source_port`]) — so that ECMP spreads a
    /// device's queue pairs over paths — with its socket opened now if need be, or the
    /// device's port if that cannot be.
    fn source_port(&mut self, qpn: u32, dest_qpn: u32) -> u16 {
        let port = net::roce_source_port(qpn, dest_qpn);
        if port == self.local.port() || self.src_socks.contains_key(&port) {
            return port;
        }
        if self.src_socks.len() >= MAX_SOURCE_PORTS {
            self.counters.tx_port_fallbacks += 1;
            return self.local.port();
        }
        match net::open_source_socket(self.local.ip(), port, self.socket_buffer) {
            Ok(sock) => {
                let no_check = AtomicBool::new(self.local.is_ipv4());
                self.src_socks
                    .insert(port, Arc::new(SourceSocket { sock, no_check }));
                port
            }
            Err(_) => {
                self.counters.tx_port_fallbacks += 1;
                self.local.port()
            }
        }
    }

    /// Closes the socket of source port `port` if no queue pair sends from it any more.
    fn release_port(&mut self, port: u16) {
        if port != self.local.port() && !self.qps.values().any(|e| e.sport == port) {
            self.src_socks.remove(&port);
        }
    }

    /// The socket that sends packets built with source port `port` (their ICRC covers it):
    /// the device's own (`main`) for its port, that port's otherwise — `None` once the last
    /// queue pair using the port is gone.
    fn sender<'a>(
        src_socks: &'a BTreeMap<u16, Arc<SourceSocket>>,
        main: &'a UdpSocket,
        local: SocketAddr,
        port: u16,
    ) -> Option<&'a UdpSocket> {
        if port == local.port() {
            Some(main)
        } else {
            src_socks.get(&port).map(|s| &s.sock)
        }
    }
}

pub(crate) struct Shared {
    pub(crate) core: Mutex<Core>,
    socks: Sockets,
    /// An eventfd the engine polls with the socket: application threads write it when a
    /// queue pair has more to send than its turn allowed.
    wake: rustix::fd::OwnedFd,
    epoch: Instant,
    closed: AtomicBool,
    /// The device's connection manager (QP1 and its connections), while someone uses it: every
    /// listener and connection of the device shares it (`crate::cm`).
    pub(crate) cm: Mutex<std::sync::Weak<crate::cm::AgentCell>>,
    /// The receive buffers, held by whoever receives: the engine thread, or (busy polling) a
    /// thread polling a completion queue.
    rx: Mutex<RxBatch>,
    /// [`DeviceConfig::busy_poll`].
    busy_poll: bool,
    /// When a thread last busy-polled, nanoseconds after `epoch`.
    last_poll: AtomicU64,
    /// The packet socket pause frames arrive on ([`DeviceConfig::pause_iface`]).
    pause_sock: Option<crate::packet::PacketSocket>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("socks", &self.socks)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock is a bug in irn; the state is still the best there
        // is, so keep going rather than poison every later call.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Time {
        Time::from_picos(self.epoch.elapsed().as_nanos() as u64 * 1000)
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Busy polling ([`DeviceConfig::busy_poll`]): receives and processes what waits, fires
    /// due timers and gives the queue pairs their turns, on the calling thread — unless
    /// another thread is receiving for the device right now.
    pub(crate) fn progress(&self) {
        self.last_poll
            .store(self.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let mut batch = match self.rx.try_lock() {
            Ok(b) => b,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        engine::run_once(self, &mut batch);
    }

    /// A thread busy-polled within the last millisecond.
    pub(super) fn polled_recently(&self) -> bool {
        self.polled_before(self.now())
    }

    /// A thread busy-polled within the millisecond before `now` (the device's clock, read
    /// once by a caller that has it).
    pub(super) fn polled_before(&self, now: Time) -> bool {
        let last = self.last_poll.load(Ordering::Relaxed);
        last > 0 && (now.as_picos() / 1000).saturating_sub(last) < 1_000_000
    }

    fn wake_engine(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    /// Grows the receive buffer to what the connected queue pairs' peers may have in flight
    /// at once ([`Core::rx_wanted`]: the sum of their BDP caps in bytes, which an irn peer
    /// sizes as this side does), at most [`MAX_RECEIVE_BUFFER`]. A NIC's buffer absorbs the
    /// bursts of a port's flows; a software receiver's is its socket's. With 4 MB, 64 IRN
    /// queue pairs on loopback (123 packets of 4 KB each in flight: 32 MB) overflowed it
    /// until one of them went half a second without progress and ended in `RETRY_EXC_ERR`;
    /// with 32 MB they moved 1.4 GB/s (docs/BENCHMARKS.md). Best effort: without
    /// `CAP_NET_ADMIN` the kernel caps it at `net.core.rmem_max`.
    fn fit_receive_buffer(&self) {
        let mut core = self.lock();
        let want = core.rx_wanted.min(MAX_RECEIVE_BUFFER);
        if want > core.rx_buffer {
            self.socks.grow_receive_buffer(want);
            core.rx_buffer = want;
        }
    }
}

/// The largest receive buffer a device asks for (bytes).
pub const MAX_RECEIVE_BUFFER: usize = 256 << 20;

/// An open device: a UDP socket with its engine thread (`ibv_open_device` + `ibv_alloc_pd`'s
/// context). Closing it (dropping) stops the engine; queue pairs left open stop moving.
pub struct Device {
    shared: Arc<Shared>,
    engine: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("local", &self.local_addr())
            .finish()
    }
}

fn random_u64() -> u64 {
    // The OS's random source: keys a peer cannot guess. Should it fail, the clock is better
    // than a constant.
    getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64)
    })
}

/// A random 24-bit packet sequence number, as verbs programs pick their first PSN.
pub fn random_psn() -> u32 {
    (random_u64() as u32) & 0x00ff_ffff
}

impl Device {
    /// Opens a device: binds the UDP socket, starts the engine thread.
    pub fn open(cfg: DeviceConfig) -> Result<Device> {
        if !cfg.tx_impairment.is_valid() || !cfg.rx_impairment.is_valid() {
            return Err(Error::Config("impairment probabilities must be in 0–1"));
        }
        if cfg.in_flight_budget == 0 {
            return Err(Error::Config("in_flight_budget must be more than 0 bytes"));
        }
        let socks = Sockets::open(cfg.addr, cfg.port, cfg.receive, cfg.socket_buffer)?;
        // Receive buffers reused burst after burst: no allocation per datagram. Each holds a
        // coalesced datagram of up to 64 packets on either path, split by the kernel's segment
        // size (UDP path) or where the engine finds the cut (raw path).
        let rx = RxBatch::new(RX_BURST, 1 << 16);
        let local = socks.local();
        let capture = cfg.pcap.as_deref().map(Capture::create).transpose()?;
        let pause_sock = cfg
            .pause_iface
            .as_deref()
            .map(crate::packet::PacketSocket::open_mac_control)
            .transpose()?;
        let core = Core {
            local,
            pds: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            uds: BTreeMap::new(),
            ahs: BTreeMap::new(),
            next_id: 1,
            impairer: Impairer::new(cfg.tx_impairment, cfg.rx_impairment, cfg.seed),
            tx_pending: std::collections::BTreeSet::new(),
            in_flight_budget: cfg.in_flight_budget as u64,
            in_flight_bytes: 0,
            budget_queue: VecDeque::new(),
            timer_heap: std::collections::BinaryHeap::new(),
            counters: DeviceCounters::default(),
            capture,
            verify_icrc: socks.verifies_icrc(),
            tx: tx::TxState::new(local.is_ipv4()),
            doorbell: false,
            rx_scratch: Vec::new(),
            turns_due: Vec::new(),
            gso_turn: false,
            seg_headers: None,
            src_socks: BTreeMap::new(),
            socket_buffer: cfg.socket_buffer,
            rx_buffer: cfg.socket_buffer,
            rx_wanted: cfg.socket_buffer,
            payload: lent::Gathered::with_capacity(MAX_DATAGRAM),
            pause: pause_sock.as_ref().map(|s| {
                let rate = match cfg.pause_link_bps {
                    0 => link_speed(s.iface()).unwrap_or(1_000_000_000),
                    r => r,
                };
                Box::new(pause::PauseIn::new(
                    rate,
                    cfg.pause_watchdog
                        .map(|d| Dur::from_nanos(d.as_nanos() as u64)),
                ))
            }),
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            socks,
            wake: rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
            )
            .map_err(io::Error::from)?,
            epoch: Instant::now(),
            closed: AtomicBool::new(false),
            cm: Mutex::new(std::sync::Weak::new()),
            rx: Mutex::new(rx),
            busy_poll: cfg.busy_poll,
            last_poll: AtomicU64::new(0),
            pause_sock,
        });
        let s = shared.clone();
        let engine = std::thread::Builder::new()
            .name(format!("irn-engine {local}"))
            .spawn(move || engine(&s))?;
        Ok(Device {
            shared,
            engine: Some(engine),
        })
    }

    /// The slot of the device's connection manager.
    pub(crate) fn cm_slot(&self) -> &Mutex<std::sync::Weak<crate::cm::AgentCell>> {
        &self.shared.cm
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.lock().local
    }

    /// Whether this device takes coalesced datagrams: a peer's UDP GSO messages, which stay
    /// whole on loopback and veths. It does on either path: the UDP path learns each one's
    /// segment size from the kernel (`UDP_GRO`), the raw path finds where the sender's kernel
    /// would have cut it (`Core::receive_coalesced`). What a peer passes to
    /// [`Qp::set_peer_gso`] (`false` from an older irn device or Linux rxe).
    pub fn accepts_gso(&self) -> bool {
        true
    }

    /// The receive path in use ([`ReceivePath::Udp`] or [`ReceivePath::Raw`]).
    pub fn receive_path(&self) -> ReceivePath {
        self.shared.socks.path()
    }

    /// This device's GID (IPv4-mapped for an IPv4 device), what peers put in their RTR.
    pub fn gid(&self) -> Gid {
        Gid::from(self.local_addr().ip())
    }

    /// Device-wide counters.
    pub fn counters(&self) -> DeviceCounters {
        let core = self.shared.lock();
        let mut c = core.counters;
        c.captured = core.capture.as_ref().map_or(0, |cap| cap.written);
        if let Some(p) = &core.pause {
            c.pause_frames_received = p.frames;
            c.pause_held_turns = p.held_turns;
            c.pause_watchdog_fired = p.watchdog_fired;
        }
        c
    }

    /// The UDP source ports this device's connected queue pairs send from besides its own
    /// (each a send-only socket: opened as a queue pair connects, closed when the last queue
    /// pair using it is destroyed or reconnected elsewhere), in ascending order.
    pub fn source_ports(&self) -> Vec<u16> {
        self.shared.lock().src_socks.keys().copied().collect()
    }

    /// Allocates a protection domain (`ibv_alloc_pd`): a memory space whose regions the queue
    /// pairs of the domain may access.
    pub fn alloc_pd(&self) -> Pd {
        let mut core = self.shared.lock();
        let id = core.fresh_id();
        core.pds.insert(
            id,
            PdState {
                mem: ByteMemory::new(random_u64()),
                closed: false,
            },
        );
        Pd {
            shared: self.shared.clone(),
            id,
        }
    }

    /// Creates a completion queue of `depth` entries (`ibv_create_cq`).
    pub fn create_cq(&self, depth: usize) -> Result<Cq> {
        if depth == 0 {
            return Err(Error::Config("completion queue depth must be at least 1"));
        }
        let mut core = self.shared.lock();
        let id = core.fresh_id();
        core.cqs.insert(
            id,
            CqState {
                entries: VecDeque::with_capacity(depth.min(1 << 16)),
                depth,
                reserved: 0,
                overrun: false,
                ready: Arc::new(Condvar::new()),
                sleepers: 0,
                notified: false,
            },
        );
        Ok(Cq {
            shared: self.shared.clone(),
            id,
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
        let mut core = self.shared.lock();
        // Posts' packets still waiting for the doorbell leave before the queue pairs close.
        core.flush_tx(&self.shared.socks.udp);
        core.capture = None;
        for e in core.qps.values_mut() {
            let now = self.shared.now();
            let _ =
                e.qp.modify(now, QpState::Err, &QpAttr::default(), AttrMask::NONE);
        }
        let closing = irn_transport::UdAttr {
            pkey: irn_wire::DEFAULT_PKEY,
            qkey: 0,
            pmtu: 1024,
            sq_psn: 0,
        };
        for e in core.uds.values_mut() {
            let _ = e.qp.modify(QpState::Err, &closing);
        }
        let ud: Vec<u32> = core.uds.keys().copied().collect();
        for q in ud {
            core.drain_ud(q);
        }
        // Whoever sleeps in `Cq::wait` looks again, and sees the device closed.
        for cq in core.cqs.values() {
            if cq.sleepers > 0 {
                cq.ready.notify_all();
            }
        }
    }
}

/// A protection domain (`struct ibv_pd`).
#[derive(Debug)]
pub struct Pd {
    shared: Arc<Shared>,
    id: u32,
}

/// A memory region (`struct ibv_mr`): `len` bytes owned by the device, read and written
/// through [`Mr::read`] and [`Mr::write`], named in work requests by [`Mr::sge`] and by peers
/// through [`Mr::addr`] and [`Mr::rkey`].
#[derive(Debug)]
pub struct Mr {
    shared: Arc<Shared>,
    pd: u32,
    addr: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

/// A completion queue (`struct ibv_cq`).
#[derive(Debug)]
pub struct Cq {
    shared: Arc<Shared>,
    id: u32,
}

/// Creation parameters of a queue pair (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInit {
    /// Loss recovery.
    pub mode: QpMode,
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
    /// Link rate the congestion controller and BDP-FC assume, bits per second.
    pub line_rate_bps: u64,
    /// Congestion control.
    pub cc: CcKind,
}

impl QpInit {
    /// Its loss recovery and congestion control on a path of `mtu`-byte packets
    /// ([`runtime_recovery`], [`cc_factory`]), and the receiver's CNP interval.
    fn for_path(
        &self,
        mtu: u32,
    ) -> (
        RecoveryConfig,
        Arc<dyn irn_transport::ControllerFactory>,
        Option<Dur>,
    ) {
        let recovery = runtime_recovery(self.mode, self.line_rate_bps, mtu);
        let (cc, cnp_interval) = cc_factory(
            self.cc,
            recovery.bdp_cap,
            u64::from(mtu),
            self.line_rate_bps,
        );
        (recovery, cc, cnp_interval)
    }
}

impl Default for QpInit {
    fn default() -> Self {
        QpInit {
            mode: QpMode::Roce,
            max_send_wr: 1024,
            max_recv_wr: 1024,
            line_rate_bps: 10_000_000_000,
            cc: CcKind::None,
        }
    }
}

/// A reliable-connected queue pair (`struct ibv_qp`, `IBV_QPT_RC`). Dropping it destroys it.
#[derive(Debug)]
pub struct Qp {
    shared: Arc<Shared>,
    qpn: u32,
}

/// The peer of a queue pair, as exchanged out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    /// Its GID (its IP address).
    pub gid: Gid,
    /// Its UDP port (4791 for a standard peer).
    pub port: u16,
    /// Its queue pair number.
    pub qpn: u32,
    /// The first PSN it sends.
    pub psn: u32,
}

/// An interface's speed from `/sys/class/net/IFACE/speed` (Mb/s there), in bits per second;
/// `None` when it reports none (a veth, a link down).
fn link_speed(iface: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{iface}/speed")).ok()?;
    let mbps: i64 = text.trim().parse().ok()?;
    (mbps > 0).then(|| mbps as u64 * 1_000_000)
}
