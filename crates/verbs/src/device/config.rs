//! How a device is opened ([`DeviceConfig`]) and the transport profile the runtime gives its
//! queue pairs: the recovery settings of each mode stretched to a software round trip
//! ([`runtime_recovery`]), the modes and controllers it runs ([`check_runtime_mode`],
//! [`check_runtime_cc`]), and the congestion controllers' parameters for a software path.

use super::*;

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
    /// posts' batches, for which posts then ring no doorbell — and a watcher thread of the
    /// device's, under `SCHED_IDLE` so that its wake-ups never preempt a poller, looks every
    /// millisecond whether the poller has stopped; otherwise it works as without busy
    /// polling. Threads that wait all the time for rare events should not poll (the
    /// connection manager's agent sleeps).
    pub busy_poll: bool,
    /// A thread waiting on a completion queue drives the device: [`Cq::wait`] (and
    /// [`Cq::wait_ready`]) receives and processes the device's packets, runs its timers and
    /// sends its batches on the calling thread, as under [`DeviceConfig::busy_poll`], but
    /// sleeps in `poll(2)` on the device's socket between rounds instead of spinning — the
    /// sleeping counterpart of busy polling, and what a blocking socket program does; a
    /// [`Cq::poll`] runs one round, without sleeping. A packet's arrival wakes the waiting
    /// thread itself, not the engine and then the waiter. While a thread waits, or has polled
    /// or waited within the last millisecond, the engine leaves the device to it, as to a busy
    /// poller, and the watcher hands it back after that millisecond — at its next look, about
    /// a millisecond later, or, where every core is busy with other work, at the engine's own
    /// look every 20 ms (`device/drive.rs`). Several threads may wait at once; each is woken by
    /// the device's packets. Ignored with `busy_poll`.
    pub wait_drives: bool,
    /// Honour the 802.1Qbb PFC and 802.3x PAUSE frames that arrive on this interface (the
    /// one the device's address is on; a packet socket: needs `CAP_NET_RAW`): a queue pair of
    /// a paused priority — its DSCP ÷ 8 — sends nothing until the pause runs out
    /// (`device/pause.rs`). Default none: pauses are ignored, as by any host stack.
    pub pause_iface: Option<String>,
    /// The link rate pause quanta are counted at (512 bit times each), bits per second.
    /// Default 0: the line's rate if [`DeviceConfig::line_rate_bps`] gives one, else the
    /// interface's own speed (`/sys/class/net/IFACE/speed`: a veth reports 10 Gb/s), or
    /// 1 Gb/s when it reports none.
    pub pause_link_bps: u64,
    /// The rate the device's frames leave at, bits per second, as a NIC's port serializes
    /// them (`device/line.rs`): `Some(0)` unpaced, as any host stack sends; `None` (the
    /// default) the link's rate — the one pause quanta count at — when the device honours
    /// pauses ([`DeviceConfig::pause_iface`]), whose headroom arithmetic assumes a sender at
    /// its line rate, and unpaced otherwise.
    pub line_rate_bps: Option<u64>,
    /// The NIC-side PFC watchdog (seed 001 §4.3): a priority paused without a break for this
    /// long stops the device honouring pauses, for good. Default none.
    pub pause_watchdog: Option<Duration>,
    /// Send every frame with an 802.1Q tag whose PCP is its queue pair's priority (DSCP ÷
    /// 8), through a packet socket on this interface (`CAP_NET_RAW`; IPv4): what a switch
    /// doing VLAN-based PFC reads (`device/tagged.rs`). Default none: frames leave
    /// untagged, the kernel writing their Ethernet header.
    pub vlan: Option<Vlan>,
}

/// Where and in which VLAN a device tags its frames ([`DeviceConfig::vlan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vlan {
    /// The interface the device's address is on.
    pub iface: String,
    /// The VLAN identifier, 0 to 4095; 0 (the default) sends priority tags, which carry the
    /// PCP without VLAN membership and reach hosts that have no VLAN interface.
    pub vid: u16,
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
            wait_drives: false,
            pause_iface: None,
            pause_link_bps: 0,
            line_rate_bps: None,
            pause_watchdog: None,
            vlan: None,
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
