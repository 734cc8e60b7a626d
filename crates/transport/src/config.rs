//! Loss-recovery configuration of a queue pair: the knobs that distinguish RoCE from IRN and the
//! variants of IRN's factor analysis (SPEC T3–T6, E5), with the paper's numbers as defaults.
//!
//! The knobs are orthogonal, so every variant the paper evaluates is one combination:
//!
//! | preset | retransmission | BDP-FC | timeouts | wire |
//! |---|---|---|---|---|
//! | [`RecoveryConfig::roce_go_back_0`] (early RoCE, T3) | go-back-0 | off | fixed RTO_high | standard |
//! | [`RecoveryConfig::roce`] (T4) | go-back-N | off | fixed RTO_high | standard |
//! | [`RecoveryConfig::roce_pfc`] (T4 over PFC) | go-back-N | off | disabled | standard |
//! | [`RecoveryConfig::irn`] (T5, T6) | selective repeat with SACK | on | RTO_low / RTO_high | IRN |
//! | [`RecoveryConfig::irn_go_back_n`] (E5) | go-back-N | on | RTO_low / RTO_high | IRN |
//! | [`RecoveryConfig::irn_without_bdp_fc`] (E5) | selective repeat with SACK | off | RTO_low / RTO_high | IRN |
//! | [`RecoveryConfig::irn_without_sack`] (E5) | selective repeat, no SACK bitmap | on | RTO_low / RTO_high | IRN |
//! | [`RecoveryConfig::reorder_buffer`] (T8(a–b)) | go-back-N; the responder parks out-of-order packets; Read holes re-requested | off | fixed RTO_high | standard |
//! | [`RecoveryConfig::ext_ib`] (T8(b–d)) | precise: a bitmap NAK names every lost PSN; go-back-N on timeout | off | fixed RTO_high | extended IB |
//!
//! The two designs of seed 002 (SPEC T8) share one loss-detection rule, [`HoleRule`]: a hole
//! in a PSN sequence is declared lost when it stays open `delay`, or once `threshold` later
//! packets have arrived behind it ("当空洞较长时间未填补或后续bit位连续多个置位后"). The
//! reorder buffer's responder and the extended-IB responder NAK by it; both requesters re-issue
//! smaller Reads for the missing response chunks by it.

use crate::time::Dur;

/// How lost packets are retransmitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retransmission {
    /// Restart the whole message from its first packet (early RoCE; livelocks under loss, T3).
    GoBack0,
    /// Resend everything from the NAKed / timed-out PSN (RoCE and InfiniBand today, T4).
    GoBackN,
    /// IRN's selective repeat (T5): the sender keeps a bitmap of selectively acked packets,
    /// retransmits the cumulative-ACK PSN first and a later packet only if a higher PSN was
    /// selectively acked; recovery ends when the cumulative ACK passes the recovery sequence.
    SelectiveRepeat,
    /// Selective retransmit without the SACK bitmap (E5): on a NACK the sender retransmits only
    /// the cumulatively-acked-next PSN, remembering no selective acks.
    SelectiveRepeatNoSack,
    /// Extended-IB precise retransmission (seed 002, SPEC T8(d)): a NAK carries a bitmap of
    /// the lost PSNs and the sender resends exactly those; a timeout resends everything from
    /// the oldest unacknowledged PSN (go-back-N).
    Precise,
}

/// What each scheme asks of the queue pair around its send window. Every question is an
/// exhaustive match here, so a new scheme answers each in this one place.
impl Retransmission {
    /// The receiver keeps what arrives beyond a hole and the sender resends only what was
    /// lost (IRN's selective repeat, with or without SACK, and extended IB's precise
    /// retransmission): the receiver needs an out-of-order window (or the BDP cap bounding
    /// one). The others go back to the first hole and resend everything after it.
    #[inline]
    pub fn is_selective(self) -> bool {
        match self {
            Retransmission::SelectiveRepeat
            | Retransmission::SelectiveRepeatNoSack
            | Retransmission::Precise => true,
            Retransmission::GoBackN | Retransmission::GoBack0 => false,
        }
    }

    /// A lost packet restarts its whole message (go-back-0, T3): the responder discards the
    /// partial message and NAKs its first PSN, and the requester asks for ACKs on message
    /// boundaries only, so that its acknowledged point is always one.
    #[inline]
    pub fn restarts_messages(self) -> bool {
        match self {
            Retransmission::GoBack0 => true,
            Retransmission::GoBackN
            | Retransmission::SelectiveRepeat
            | Retransmission::SelectiveRepeatNoSack
            | Retransmission::Precise => false,
        }
    }

    /// Over a standard responder, which ACKs only when asked, the requester asks as often as
    /// its congestion controller needs feedback (go-back-N and extended IB's precise
    /// retransmission; go-back-0 keeps its ACKs on message boundaries; IRN's responder ACKs
    /// every packet anyway).
    #[inline]
    pub fn asks_for_feedback(self) -> bool {
        match self {
            Retransmission::GoBackN | Retransmission::Precise => true,
            Retransmission::GoBack0
            | Retransmission::SelectiveRepeat
            | Retransmission::SelectiveRepeatNoSack => false,
        }
    }
}

/// When the retransmission timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtoPolicy {
    /// No timeouts (RoCE over a lossless PFC fabric, as in the IRN evaluation).
    Disabled,
    /// One fixed timeout (RoCE without PFC: RTO_high).
    Fixed(Dur),
    /// IRN's two timeouts (T5): `low` when at most `n` packets are in flight, `high` otherwise.
    Irn {
        /// RTO_low (100 µs in the paper's default scenario).
        low: Dur,
        /// RTO_high (320 µs: longest-path propagation plus a full switch buffer of queueing).
        high: Dur,
        /// N (3 in the paper).
        n: u32,
    },
    /// The verbs `timeout` attribute of the queue pair: 4.096 µs × 2^timeout, 0 = never
    /// (IBTA §9.7.6.1.3). What a standard RoCE NIC (and Linux rxe) does; the UDP runtime uses it
    /// to behave like rxe towards rxe.
    FromAttr,
    /// TCP's retransmission timer (RFC 6298): `SRTT + 4·RTTVAR` from the round-trip samples
    /// of never-retransmitted packets (Karn), `initial` before the first sample, within
    /// `[min, max]`, doubled at each expiry (§5.5) and back to the estimate only with a valid
    /// sample — an ACK of a packet never resent (§5, Karn) — RTTVAR decaying with its gain
    /// divided by the ACKs a round trip brings (RFC 7323 Appendix G). The send window keeps the
    /// estimator; this policy only bounds it. Used by the TCP model of SPEC E10 ([`RecoveryConfig::tcp`]).
    Adaptive {
        /// The floor (RFC 6298 §2.4 says 1 s for the Internet; datacenter stacks use
        /// hundreds of microseconds to milliseconds).
        min: Dur,
        /// The ceiling of the backed-off timer.
        max: Dur,
        /// The timeout before the first sample (RFC 6298 §2.1).
        initial: Dur,
    },
}

impl RtoPolicy {
    /// The timeout for `in_flight` packets; `None` when timeouts are disabled.
    pub const fn timeout(&self, in_flight: u32) -> Option<Dur> {
        match *self {
            RtoPolicy::Disabled => None,
            RtoPolicy::Fixed(d) => Some(d),
            RtoPolicy::Irn { low, high, n } => Some(if in_flight <= n { low } else { high }),
            // Resolved by the queue pair into `Fixed` or `Disabled` when the attribute is set.
            RtoPolicy::FromAttr => None,
            // The send window's estimator refines it (`SendWindow::deadline`); a space
            // without samples uses the initial value.
            RtoPolicy::Adaptive { initial, .. } => Some(initial),
        }
    }
}

/// Unanswered expiries of a fixed retransmission timer before it backs off
/// ([`RecoveryConfig::rto_backoff_after`]): Linux's `tcp_retries1`.
pub const RTO_BACKOFF_AFTER: u32 = 3;

/// RTO_low of the IRN paper's default scenario (§4.1).
pub const IRN_RTO_LOW: Dur = Dur::from_micros(100);
/// RTO_high of the IRN paper's default scenario (§4.1).
pub const IRN_RTO_HIGH: Dur = Dur::from_micros(320);
/// N of the IRN paper (§3.1).
pub const IRN_RTO_N: u32 = 3;
/// The BDP cap of the paper's default scenario: 40 Gb/s, 2 µs links, 6-hop longest path, 1 KB
/// MTU (§3.2: "≈110 packets").
pub const IRN_DEFAULT_BDP_CAP: u32 = 110;

/// When a receiver declares a hole in a PSN sequence lost (seed 002's early NAK, SPEC T8(a–b)):
/// when the hole has stayed open `delay`, or once `threshold` packets beyond it have arrived,
/// whichever comes first. Used by the reorder buffer's responder (a sequence-error NAK), the
/// extended-IB responder (a NAK with the loss bitmap) and both designs' requesters (smaller
/// Read requests for the missing response chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HoleRule {
    /// How long a hole may stay open before it counts as a loss.
    pub delay: Dur,
    /// How many later packets may arrive behind a hole before it counts as a loss.
    pub threshold: u32,
}

impl HoleRule {
    /// The default: 16 later packets (well above the reordering of a single path, below the
    /// 110-packet BDP of the default scenario) or 20 µs (under a round trip of the default
    /// fat-tree, a sixteenth of RTO_high).
    pub const DEFAULT: HoleRule = HoleRule {
        delay: Dur::from_micros(20),
        threshold: 16,
    };
}

/// Packets a reorder buffer holds by default (T8(a)): about the BDP cap of the default
/// scenario, so a window's worth of out-of-order packets fits.
pub const DEFAULT_REORDER_BUFFER: u32 = 128;

/// What turns selective repeat into the TCP model of SPEC E10 (iWARP's transport: a full TCP
/// stack on the NIC, seed 000 §2.3, §4.6), beyond what [`RecoveryConfig::tcp`] sets in the
/// shared knobs (no BDP cap, RFC 6298's timer, `dup_threshold` = DupThresh = 3):
///
/// * **loss detection** by RFC 6675's `IsLost`: a segment is lost once `dup_threshold`
///   segments above it have been selectively acknowledged (IRN §3.1: once *one* higher PSN
///   has), and a partial ACK during recovery marks the next hole lost (NewReno, RFC 6582);
/// * **the congestion window** counts RFC 6675's `pipe` — segments sent and neither
///   cumulatively nor selectively acknowledged — rather than everything past the cumulative
///   ACK, so SACKed segments let new ones out during recovery;
/// * **one congestion signal per loss event**, at the fast retransmit (RFC 5681 §3.2), not at
///   each duplicate ACK; slow start and AIMD come from the window controller
///   ([`WindowConfig::init_ssthresh`](crate::WindowConfig::init_ssthresh));
/// * optional **delayed ACKs** (RFC 1122 §4.2.3.2, RFC 5681 §4.2).
///
/// Sequence numbers stay PSNs, one per segment: iWARP's MPA aligns each FPDU with a TCP
/// segment (RFC 5044), so with full-sized segments that are never re-packetized a byte offset
/// and a segment number name the same boundary, and counting either gives the same rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpModel {
    /// Delayed ACKs: the receiver acknowledges every second in-order segment, or once the
    /// oldest unacknowledged one has waited this long; out-of-order segments and hole fills
    /// are acknowledged at once (RFC 5681 §4.2). A message's last segment waits like any
    /// other (no quick-ACK mode). `None`: every segment is acknowledged (what IRN does).
    pub delayed_ack: Option<Dur>,
}

/// What a queue pair's packets carry beyond the base transport header: the wire format both
/// ends must speak, named by BTH's TVer ([`Wire::tver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    /// Standard RoCEv2 (TVer 0), what Linux rxe and RoCE NICs speak.
    Standard,
    /// The extended-IB headers (TVer 2, SPEC T8(c–d)): SSN, PSN offset and receive WQE number
    /// on Sends, the RETH and PSN offset on every Write packet, the local buffer in Read
    /// requests echoed by their responses, a loss bitmap in NAKs.
    ExtIb,
    /// IRN's extensions (TVer 1): IRNETH, per-packet ACKs, read (N)ACKs, split sPSN/rPSN.
    Irn,
}

impl Wire {
    /// The BTH transport version that names it on the wire.
    pub const fn tver(self) -> u8 {
        match self {
            Wire::Standard => irn_wire::TVER_STANDARD,
            Wire::ExtIb => irn_wire::TVER_EXT_IB,
            Wire::Irn => irn_wire::TVER_IRN,
        }
    }
}

/// How a queue pair recovers from loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecoveryConfig {
    /// Retransmission scheme.
    pub retransmission: Retransmission,
    /// BDP-FC (T6): at most this many packets beyond the last acked one; `None` = off.
    pub bdp_cap: Option<u32>,
    /// Timeouts.
    pub rto: RtoPolicy,
    /// A fixed retransmission timer ([`RtoPolicy::Fixed`], [`RtoPolicy::Irn`]) that has
    /// expired this many times with no answer from the peer doubles at each further expiry
    /// (RFC 6298 §5.5), up to the queue pair's local ACK timeout (the `timeout` attribute,
    /// IBTA §9.7.6.1.3; 60 s, RFC 6298 §2.5's least ceiling, when that is 0 = infinite), and
    /// is back at its value from the peer's first answer — an ACK, a NACK or an RNR NAK.
    /// `None`: it never backs off (IRN §3.1 as published). A peer that answers is alive;
    /// one silent through several expiries of a timer sized for the worst round trip of a
    /// working fabric (RTO_high) has died or stalled, and the grace before the back-off is
    /// what Linux's `tcp_retries1` (3) is to TCP: the retransmissions after which the path is
    /// presumed broken. Without a back-off, a queue pair whose peer died resends every
    /// RTO_low / RTO_high until its retry budget (`retry_cnt` local ACK timeouts) is spent:
    /// in the 1 s storm experiment's IRN run, 110 M retransmissions, and the fabric dropped
    /// 42 % of what it carried (experiments/e11). Backing off from the first expiry instead
    /// slowed loss recovery in a congested fabric (IRN with 60 KB switch buffers: +26 %
    /// mean slowdown); after 3, E1–E8's results are statistically the same over 6 seeds
    /// (`scripts/sim-stats`: per-flow FCTs, two-sample KS p ≥ 0.25 for every run).
    /// [`RTO_BACKOFF_AFTER`] in IRN's presets; `None` in RoCE's and seed 002's, whose fixed
    /// RTO_high is the IRN paper's baseline: a go-back-N receiver NAKs a sequence error
    /// once and then stays silent until the expected PSN arrives (Linux rxe's `check_psn`), so a
    /// congested RoCE flow goes unanswered through several expiries while its peer is well,
    /// and backing off made a different baseline (E1's RoCE: −66 % timeouts, −12 % mean
    /// slowdown). [`RtoPolicy::FromAttr`] is the local ACK timeout already, and
    /// [`RtoPolicy::Adaptive`] backs off by its own estimator.
    pub rto_backoff_after: Option<u32>,
    /// The wire format: standard RoCEv2 (what Linux rxe understands), extended IB or IRN's.
    pub wire: Wire,
    /// The responder's reorder buffer, in packets (T8(a)): out-of-order request packets are
    /// parked whole in host memory and drained in PSN order. `None`: none (standard RoCE
    /// discards them).
    pub reorder_buffer: Option<u32>,
    /// The loss-detection rule of seed 002's designs (T8(a–b)): `Some` makes the requester
    /// place out-of-order Read responses and re-request only the missing chunks, and the
    /// reorder-buffer or extended-IB responder NAK by it. `None`: standard behaviour.
    pub hole_rule: Option<HoleRule>,
    /// Selective repeat's reordering tolerance (an IRN option beyond the paper, for packet
    /// spraying): a PSN counts as lost once a PSN at least this many beyond it has been
    /// selectively acknowledged, and a NACK alone does not resend the cumulative-ACK PSN.
    /// 1 (every preset) is IRN §3.1: any higher SACKed PSN. The rule is TCP's DupThresh
    /// (RFC 6675 §5) in PSNs; RACK (RFC 8985) would use time instead.
    pub dup_threshold: u32,
    /// Selective repeat resends a retransmission that was itself lost as soon as a packet sent
    /// after it is selectively acknowledged, rather than at the next timeout (an IRN option
    /// beyond the paper, off in every preset). IRN §3.1 recovers a lost retransmission only
    /// by the timer; with RTO_low / RTO_high of 100 / 320 µs that costs little, but a software
    /// end's timer is milliseconds (a scheduler's wake-ups are in its round trip), and at 1 %
    /// loss on both ends of a loopback stream the ~2 % of retransmissions lost again were
    /// nearly all of its timeouts and a quarter of its goodput. The rule is the
    /// ordering half of RACK (RFC 8985 §6.2: a packet is lost once one sent after it is
    /// delivered), counted in transmissions so the simulator's simultaneous sends stay
    /// ordered; with `dup_threshold` above 1, a packet sent at least that many transmissions
    /// later must be acknowledged first (reordering tolerance).
    pub resend_lost_retransmissions: bool,
    /// On a retransmission timeout, selective repeat resends every outstanding PSN not
    /// selectively acknowledged, in order, as TCP deems them all lost after an RTO (RFC 5681
    /// §3.1, RFC 6675 §5.1) — rather than the cumulative-ACK PSN alone and the holes below
    /// the highest SACK (IRN §3.1; an option beyond the paper, off in every preset). Without
    /// SACKs above them (a window's tail lost whole, or packets a receiver refused without a
    /// SACK for want of a receive WQE), IRN resends one PSN per timeout, each timer doubled
    /// while no ACK gives a valid sample: on loopback at 5 % loss a queue pair crawled one
    /// packet per 200 ms. The sweep waits for the first ACK after the timeout
    /// (F-RTO, RFC 5682 §3): the cumulative-ACK PSN is resent first, and the rest only if
    /// that ACK answers the retransmission without acknowledging any original transmission
    /// not SACKed before; if it does, the timeout was spurious (late ACKs, not lost packets)
    /// and nothing else is resent for it, but for the highest PSN sent when the sender (a
    /// requester, or an IRN Read responder in its rPSN space) has nothing new to send (a tail
    /// loss probe, RFC 8985 §7.3: a lost tail whose NACK was lost too is then NACKed at
    /// once). A first ACK that does neither — it answers the retransmission sooner than half
    /// the smallest round trip seen, as a delayed original's answer would — keeps the sweep
    /// held; a SACK of a PSN sent after the timeout (new data, or, unless new data went out
    /// since the timeout, a probe of the highest PSN) then starts it, as RFC 5682 §2 step
    /// 3a's duplicate ACK shows the loss real, and an ACK of originals still judges the
    /// timeout spurious. On loopback a spurious timeout used to resend the whole window
    /// (about 120 packets); through 1 % loss each way a queue pair resent 2 050–2 190 packets
    /// for 1 600 lost, and now resends 1 620–1 640.
    pub timeout_resends_unsacked: bool,
    /// IRN's responder puts its loss bitmap in every NACK (an option beyond the paper, off in
    /// every preset): the extended-IB field of SPEC T8(d), bit `i` set when PSN `epsn + i` is
    /// missing, up to the highest PSN that arrived, which becomes the NACK's SACK PSN. Every
    /// NACK then says all that the earlier ones did, so (1) a lost NACK no longer makes the
    /// sender resend the packet it would have SACKed, and (2) NACKs waiting in the control
    /// queue collapse into the newest, as plain ACKs do. IRN §3.1 NACKs every packet behind a
    /// hole with that one packet's PSN; on loopback at 1 % loss each way that was 63 000 NACKs
    /// for 96 000 data packets and a spurious resend per NACK lost. The requester's
    /// read NACKs for Read responses (IRN §5.4) do the same. Every IRN sender reads the bitmap
    /// when a NACK carries one.
    pub nack_bitmap: bool,
    /// BDP-FC counts against the cap only the PSNs in flight and not selectively
    /// acknowledged (TCP's `pipe`, RFC 6675 §2), and lets `next − una` reach this many caps;
    /// the receiver's out-of-order window grows to match (both ends must agree). An option
    /// beyond the paper, `None` in every preset: IRN §3.2 and SPEC T6 count `next − una`, so
    /// a hole stops new data for the round trip its retransmission takes — by design ("it
    /// prevents a flow that is recovering from a packet loss from sending additional new
    /// packets"). In a network that is the congestion a loss signals; on a host's loopback,
    /// where loss is not congestion and the round trip is the queue the window itself builds,
    /// it was what held IRN at 0.74 of its lossless goodput through 1 % loss each way
    /// (docs/BENCHMARKS.md; with a span of 4, 0.99). Needs IRN's selective repeat with SACKs and
    /// a cap.
    pub bdp_fc_span: Option<u32>,
    /// With a hole rule: re-request every run of missing Read chunks at once (seed 002's
    /// example), or — `false` — only the first run, each time the in-order point stops at a
    /// hole. The latter never asks a responder for a part that starts before one asked for
    /// earlier, which Linux rxe requires: its `duplicate_request` moves a Read's saved start to
    /// each duplicate's address and drops any later duplicate below it.
    pub reread_all: bool,
    /// The TCP model's rules (SPEC E10), over selective repeat and IRN's wire; `None` for
    /// every RDMA design.
    pub tcp: Option<TcpModel>,
    /// Standard and extended-IB wires: the requester sets AckReq (IBTA §9.2: the responder
    /// must acknowledge that packet) on the last packet of each message and at least every
    /// this many packets of a longer one; the responder coalesces the rest (§9.7.5.1.1).
    /// [`STANDARD_ACK_EVERY`] in every preset (Linux rxe asks every 128; a smaller value keeps
    /// the sender's state short). 1 asks on every packet, as the ns-3 RDMA simulators' NICs
    /// acknowledge (HPCC's and ConWeave's `L2_ACK_INTERVAL 1`). IRN's wire acknowledges every
    /// packet regardless (SPEC T7).
    pub ack_every: u32,
    /// Standard responder: NAK a sequence error again once this long has passed since its last
    /// NAK, while out-of-order packets keep arriving. `None` in every preset: one NAK per error,
    /// as IBTA §9.7.5.1.3 has it and Linux rxe does (a lost retransmission then waits for the
    /// requester's timer). The ns-3 RDMA simulators' receivers NAK every out-of-order packet,
    /// at most one per 4 µs (HPCC's and ConWeave's `NACKGenerationInterval`): what makes their
    /// lossy go-back-N recover sooner (experiments/crossval).
    pub renak_after: Option<Dur>,
}

/// Standard RoCE: the requester asks for an ACK at least every this many packets of a long
/// message ([`RecoveryConfig::ack_every`]'s preset).
pub const STANDARD_ACK_EVERY: u32 = 64;

/// Why a recovery configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Selective repeat needs IRN's wire extensions (out-of-order placement, SACKs).
    #[error("selective repeat needs the IRN wire format")]
    SelectiveRepeatNeedsIrnWire,
    /// A BDP cap of zero would never send.
    #[error("BDP cap must be at least 1 packet")]
    ZeroBdpCap,
    /// The IRN bitmaps are sized by the BDP cap, which is bounded by the PSN window (2^23).
    #[error("BDP cap above 2^23 packets")]
    HugeBdpCap,
    /// A zero timeout would fire at once.
    #[error("retransmission timeouts must be positive")]
    ZeroTimeout,
    /// Precise retransmission and the extended-IB headers go together (one needs the other's
    /// loss bitmap), and exclude IRN's wire.
    #[error("precise retransmission needs the extended-IB wire, and the extended-IB wire precise retransmission (not IRN's)")]
    PreciseNeedsExtIb,
    /// A reorder buffer sits behind a standard RoCE responder, with a hole rule to NAK by.
    #[error("a reorder buffer needs the standard wire, go-back-N and a hole rule")]
    ReorderBufferNeedsStandard,
    /// A zero-packet reorder buffer or hole threshold means nothing.
    #[error("reorder buffer and hole threshold must be at least 1 packet")]
    ZeroReorder,
    /// A duplicate threshold is selective repeat's (and at least 1).
    #[error("dup_threshold must be 1, or above 1 with IRN's selective repeat")]
    DupThreshold,
    /// Resending lost retransmissions, every unSACKed PSN on a timeout, or NACKs carrying a
    /// loss bitmap, need IRN's selective repeat with SACKs (the TCP model keeps RFC 6675's
    /// rules).
    #[error("resend_lost_retransmissions, timeout_resends_unsacked, nack_bitmap and bdp_fc_span need IRN's selective repeat with SACKs, outside the TCP model")]
    LostRetransmissionsNeedSack,
    /// A span of BDP-FC counting only unSACKed PSNs is at least one cap, and needs a cap.
    #[error(
        "bdp_fc_span must be at least 1, needs a BDP cap, and span × cap may not exceed 2^23 PSNs"
    )]
    BdpFcSpan,
    /// The TCP model runs over selective repeat and IRN's wire (SACKs, out-of-order
    /// placement).
    #[error("the TCP model needs selective repeat over the IRN wire format")]
    TcpNeedsSelectiveRepeat,
    /// An adaptive timer's floor above its ceiling, or its initial value outside them.
    #[error("adaptive RTO needs min <= initial <= max")]
    RtoBounds,
    /// Asking for an ACK every 0 packets means nothing.
    #[error("ack_every must be at least 1 packet")]
    ZeroAckEvery,
    /// Re-NAKing a sequence error is the standard go-back-N responder's, without a hole rule
    /// (whose early NAKs have their own timing).
    #[error(
        "renak_after needs the standard wire and go-back-N, without a reorder buffer or hole rule"
    )]
    RenakNeedsGoBackN,
}

impl RecoveryConfig {
    /// Early RoCE: go-back-0, fixed timeout.
    pub const fn roce_go_back_0() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::GoBack0,
            bdp_cap: None,
            rto: RtoPolicy::Fixed(IRN_RTO_HIGH),
            rto_backoff_after: None,
            wire: Wire::Standard,
            reorder_buffer: None,
            hole_rule: None,
            dup_threshold: 1,
            resend_lost_retransmissions: false,
            timeout_resends_unsacked: false,
            nack_bitmap: false,
            bdp_fc_span: None,
            reread_all: true,
            tcp: None,
            ack_every: STANDARD_ACK_EVERY,
            renak_after: None,
        }
    }

    /// RoCE without PFC: go-back-N with one fixed timeout, RTO_high.
    pub const fn roce() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::GoBackN,
            bdp_cap: None,
            rto: RtoPolicy::Fixed(IRN_RTO_HIGH),
            rto_backoff_after: None,
            wire: Wire::Standard,
            reorder_buffer: None,
            hole_rule: None,
            dup_threshold: 1,
            resend_lost_retransmissions: false,
            timeout_resends_unsacked: false,
            nack_bitmap: false,
            bdp_fc_span: None,
            reread_all: true,
            tcp: None,
            ack_every: STANDARD_ACK_EVERY,
            renak_after: None,
        }
    }

    /// RoCE over PFC: go-back-N with timeouts disabled.
    pub const fn roce_pfc() -> Self {
        RecoveryConfig {
            rto: RtoPolicy::Disabled,
            ..Self::roce()
        }
    }

    /// IRN: selective repeat with SACK, BDP-FC, two timeouts.
    pub const fn irn() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::SelectiveRepeat,
            bdp_cap: Some(IRN_DEFAULT_BDP_CAP),
            rto: RtoPolicy::Irn {
                low: IRN_RTO_LOW,
                high: IRN_RTO_HIGH,
                n: IRN_RTO_N,
            },
            rto_backoff_after: Some(RTO_BACKOFF_AFTER),
            wire: Wire::Irn,
            reorder_buffer: None,
            hole_rule: None,
            dup_threshold: 1,
            resend_lost_retransmissions: false,
            timeout_resends_unsacked: false,
            nack_bitmap: false,
            bdp_fc_span: None,
            reread_all: true,
            tcp: None,
            ack_every: STANDARD_ACK_EVERY,
            renak_after: None,
        }
    }

    /// IRN with go-back-N retransmission (E5).
    pub const fn irn_go_back_n() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::GoBackN,
            ..Self::irn()
        }
    }

    /// IRN without BDP-FC (E5).
    pub const fn irn_without_bdp_fc() -> Self {
        RecoveryConfig {
            bdp_cap: None,
            ..Self::irn()
        }
    }

    /// IRN's selective retransmit without the SACK bitmap (E5).
    pub const fn irn_without_sack() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::SelectiveRepeatNoSack,
            ..Self::irn()
        }
    }

    /// Seed 002's first design (T8(a–b)): a standard go-back-N requester that any RoCE NIC
    /// (and Linux rxe) is, a responder with a reorder buffer of
    /// [`DEFAULT_REORDER_BUFFER`] packets that NAKs by [`HoleRule::DEFAULT`], and Read
    /// responses placed out of order with only the missing chunks re-requested.
    pub const fn reorder_buffer() -> Self {
        RecoveryConfig {
            reorder_buffer: Some(DEFAULT_REORDER_BUFFER),
            hole_rule: Some(HoleRule::DEFAULT),
            ..Self::roce()
        }
    }

    /// Seed 002's second design (T8(b–d)): extended-IB headers that let the responder place
    /// any packet on arrival, a NAK with a bitmap of the lost PSNs that the requester resends
    /// exactly, go-back-N on timeout, Read holes re-requested; no BDP-FC, one fixed timeout.
    pub const fn ext_ib() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::Precise,
            wire: Wire::ExtIb,
            hole_rule: Some(HoleRule::DEFAULT),
            ..Self::roce()
        }
    }

    /// The TCP model of iWARP's transport (SPEC E10; [`TcpModel`]): selective repeat with
    /// RFC 6675's DupThresh of 3 over IRN's packets, no BDP cap (a TCP sender is bounded by
    /// its congestion and receive windows), RFC 6298's adaptive timer with a floor of
    /// RTO_high (320 µs, the IRN evaluation's choice for a fixed timer; the paper does not say
    /// how it set its TCP's), starting at the floor. Congestion control (slow start, AIMD) is
    /// the window controller the driver pairs with it.
    pub const fn tcp() -> Self {
        RecoveryConfig {
            bdp_cap: None,
            rto: RtoPolicy::Adaptive {
                min: IRN_RTO_HIGH,
                max: Dur::from_micros(100_000),
                initial: IRN_RTO_HIGH,
            },
            dup_threshold: 3,
            tcp: Some(TcpModel { delayed_ack: None }),
            ..Self::irn()
        }
    }

    /// Checks the combination.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.ack_every == 0 {
            return Err(ConfigError::ZeroAckEvery);
        }
        if self.renak_after == Some(Dur::ZERO) {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.renak_after.is_some()
            && (self.wire != Wire::Standard
                || self.retransmission != Retransmission::GoBackN
                || self.hole_rule.is_some()
                || self.reorder_buffer.is_some())
        {
            return Err(ConfigError::RenakNeedsGoBackN);
        }
        if self.tcp.is_some()
            && (self.retransmission != Retransmission::SelectiveRepeat || self.wire != Wire::Irn)
        {
            return Err(ConfigError::TcpNeedsSelectiveRepeat);
        }
        if let RtoPolicy::Adaptive { min, max, initial } = self.rto {
            if min > max || initial < min || initial > max {
                return Err(ConfigError::RtoBounds);
            }
        }
        if self.tcp.is_some_and(|t| t.delayed_ack == Some(Dur::ZERO)) {
            return Err(ConfigError::ZeroTimeout);
        }
        if (self.retransmission == Retransmission::Precise) != (self.wire == Wire::ExtIb) {
            return Err(ConfigError::PreciseNeedsExtIb);
        }
        if self.reorder_buffer.is_some()
            && (self.wire != Wire::Standard
                || self.retransmission != Retransmission::GoBackN
                || self.hole_rule.is_none())
        {
            return Err(ConfigError::ReorderBufferNeedsStandard);
        }
        if self.reorder_buffer == Some(0) || self.hole_rule.is_some_and(|h| h.threshold == 0) {
            return Err(ConfigError::ZeroReorder);
        }
        if self.hole_rule.is_some_and(|h| h.delay == Dur::ZERO) {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.dup_threshold == 0
            || (self.dup_threshold > 1 && self.retransmission != Retransmission::SelectiveRepeat)
        {
            return Err(ConfigError::DupThreshold);
        }
        if (self.resend_lost_retransmissions
            || self.timeout_resends_unsacked
            || self.nack_bitmap
            || self.bdp_fc_span.is_some())
            && (self.retransmission != Retransmission::SelectiveRepeat || self.tcp.is_some())
        {
            return Err(ConfigError::LostRetransmissionsNeedSack);
        }
        if let Some(k) = self.bdp_fc_span {
            // `next − una` must stay within half the PSN space, as the cap alone must.
            if k == 0 || self.bdp_fc_reach().is_none_or(|r| r > 1 << 23) {
                return Err(ConfigError::BdpFcSpan);
            }
        }
        if matches!(
            self.retransmission,
            Retransmission::SelectiveRepeat | Retransmission::SelectiveRepeatNoSack
        ) && self.wire != Wire::Irn
        {
            return Err(ConfigError::SelectiveRepeatNeedsIrnWire);
        }
        match self.bdp_cap {
            Some(0) => return Err(ConfigError::ZeroBdpCap),
            Some(c) if c > 1 << 23 => return Err(ConfigError::HugeBdpCap),
            _ => {}
        }
        let zero = match self.rto {
            RtoPolicy::Disabled | RtoPolicy::FromAttr => false,
            RtoPolicy::Fixed(d) => d == Dur::ZERO,
            RtoPolicy::Irn { low, high, .. } => low == Dur::ZERO || high == Dur::ZERO,
            RtoPolicy::Adaptive { min, .. } => min == Dur::ZERO,
        };
        if zero {
            return Err(ConfigError::ZeroTimeout);
        }
        Ok(())
    }
}

/// Per-queue-pair NIC state a recovery configuration adds to a standard RoCE queue pair
/// (SPEC E13), in bits, from the structures this implementation keeps
/// ([`RecoveryConfig::nic_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicState {
    /// Bitmaps: receive windows (IRN's 2-bitmap, extended IB's arrival and deferred-action
    /// bits), the sender's SACK bitmap, the reorder buffer's bitmap, Read-response maps.
    pub bitmap_bits: u64,
    /// Reorder-buffer descriptors: one 64-bit host address per slot.
    pub descriptor_bits: u64,
    /// Extra registers: PSN pointers of recovery and of IRN's rPSN space (24 bits each), the
    /// hole rule's timestamp (32 bits).
    pub register_bits: u64,
}

impl NicState {
    /// Everything, in bits.
    pub fn total_bits(&self) -> u64 {
        self.bitmap_bits + self.descriptor_bits + self.register_bits
    }
}

impl RecoveryConfig {
    /// How far `next − una` may reach under BDP-FC, in PSNs: the cap, times `bdp_fc_span`
    /// with a span; `None` without a cap.
    pub fn bdp_fc_reach(&self) -> Option<u64> {
        self.bdp_cap
            .map(|c| u64::from(c) * u64::from(self.bdp_fc_span.unwrap_or(1)))
    }

    /// The window that sizes this design's per-QP state on a path of `bdp` packets: the
    /// path's BDP — except for IRN's selective repeat without BDP-FC, whose bitmaps must span
    /// every PSN that may be outstanding, the receiver's out-of-order window (`ooo_window`,
    /// [`QpConfig::ooo_window`](crate::QpConfig::ooo_window)), since no cap bounds them.
    pub fn state_window(&self, bdp: u32, ooo_window: u32) -> u32 {
        if self.wire == Wire::Irn && self.bdp_fc_reach().is_none() {
            ooo_window
        } else {
            bdp
        }
    }

    /// The per-QP state this configuration adds to standard RoCE (SPEC E13). `window` sizes
    /// what a design bounds by the path rather than by a setting: IRN's bitmaps span its BDP
    /// cap (`bdp_fc_span` caps with a span), or `window` without one ([`RecoveryConfig::state_window`]: the out-of-order window), extended IB's
    /// receive window and both seed-002 designs' Read-response maps span `window` packets (a
    /// hardware NIC would size them by the BDP, as IRN does; this implementation grows them
    /// on demand).
    pub fn nic_state(&self, window: u32) -> NicState {
        const PSN: u64 = 24;
        const STAMP: u64 = 32;
        let w = u64::from(window);
        let sack = |r: Retransmission| match r {
            Retransmission::SelectiveRepeat | Retransmission::Precise => 1,
            _ => 0,
        };
        if self.wire == Wire::Irn {
            // Every bitmap spans what may be outstanding: the BDP cap, or with
            // `bdp_fc_span` that many caps of unSACKed PSNs beyond the cumulative ACK (the
            // sender's SACK map and the receivers' out-of-order windows grow with it).
            let cap = self.bdp_fc_reach().unwrap_or(u64::from(window));
            // sPSN responder 2-bitmap (IRN §5.3.3), sender SACK bitmap, and the rPSN space:
            // the requester's receive bitmap and the Read responder's SACK bitmap (§5.4).
            let per = 2 + sack(self.retransmission) + 1 + sack(self.retransmission);
            // The TCP model adds RFC 6298's estimator (SRTT, RTTVAR), the SACK scoreboard's
            // count and highest SACKed segment, and a delayed-ACK timestamp when it has one.
            let tcp = self.tcp.map_or(0, |t| {
                2 * STAMP + 2 * PSN + if t.delayed_ack.is_some() { STAMP } else { 0 }
            });
            return NicState {
                bitmap_bits: per * cap,
                descriptor_bits: 0,
                // Recovery sequence and cursor in each space, rPSN next / expected / oldest.
                register_bits: 7 * PSN + tcp,
            };
        }
        let mut st = NicState::default();
        if let Some(rb) = self.reorder_buffer {
            st.bitmap_bits += u64::from(rb);
            st.descriptor_bits += 64 * u64::from(rb);
        }
        if self.wire == Wire::ExtIb {
            // Arrival and deferred-action bits of the receive window; the sender's SACK map;
            // recovery sequence, cursor, highest SACK.
            st.bitmap_bits += 2 * w + w;
            st.register_bits += 3 * PSN;
        }
        if self.hole_rule.is_some() {
            // Read responses: missing / received / re-requested (2 bits each); the hole's
            // start, the responder's acknowledged point and the in-order point.
            st.bitmap_bits += 2 * w;
            st.register_bits += STAMP + 2 * PSN;
        }
        st
    }
}

/// The loss-recovery schemes by the names of IRN's evaluation (§4): the one list the
/// simulator's `transport.recovery` and the UDP runtime's `--mode` choose from. Each names a
/// [`RecoveryConfig`] preset ([`RecoveryMode::preset`]) that a driver may then adapt (its
/// timeouts, its BDP cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecoveryMode {
    /// IRN: selective repeat with SACK, BDP-FC, RTO_low/RTO_high (T5, T6).
    Irn,
    /// IRN with go-back-N (E5).
    IrnGoBackN,
    /// IRN without BDP-FC (E5).
    IrnNoBdpFc,
    /// IRN's selective retransmit without a SACK bitmap (E5).
    IrnNoSack,
    /// RoCE: go-back-N, standard headers (T4).
    Roce,
    /// Early RoCE: go-back-0 (T3).
    RoceGoBack0,
    /// RoCE with a responder reorder buffer and Read re-requests of missing chunks (T8(a–b)).
    ReorderBuffer,
    /// Extended-IB selective retransmission: placement of any packet on arrival, bitmap NAKs
    /// (T8(b–d)).
    ExtIb,
    /// The TCP model of iWARP's transport (SPEC E10): a comparison in the simulator, not a
    /// transport of the UDP runtime.
    Tcp,
}

impl RecoveryMode {
    /// Every mode, IRN's first.
    pub const ALL: [RecoveryMode; 9] = [
        RecoveryMode::Irn,
        RecoveryMode::IrnGoBackN,
        RecoveryMode::IrnNoBdpFc,
        RecoveryMode::IrnNoSack,
        RecoveryMode::Roce,
        RecoveryMode::RoceGoBack0,
        RecoveryMode::ReorderBuffer,
        RecoveryMode::ExtIb,
        RecoveryMode::Tcp,
    ];

    /// The name in configurations, on command lines and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            RecoveryMode::Irn => "irn",
            RecoveryMode::IrnGoBackN => "irn-go-back-n",
            RecoveryMode::IrnNoBdpFc => "irn-no-bdp-fc",
            RecoveryMode::IrnNoSack => "irn-no-sack",
            RecoveryMode::Roce => "roce",
            RecoveryMode::RoceGoBack0 => "roce-go-back-0",
            RecoveryMode::ReorderBuffer => "reorder-buffer",
            RecoveryMode::ExtIb => "ext-ib",
            RecoveryMode::Tcp => "tcp",
        }
    }

    /// Whether this is one of IRN's variants (IRN's wire format; the TCP model rides it too).
    pub const fn is_irn(self) -> bool {
        !matches!(
            self,
            RecoveryMode::Roce
                | RecoveryMode::RoceGoBack0
                | RecoveryMode::ReorderBuffer
                | RecoveryMode::ExtIb
        )
    }

    /// Whether the mode speaks standard RoCEv2 (what Linux rxe and RoCE NICs understand): RoCE,
    /// early RoCE and the reorder buffer, whose requester is plain RoCE and whose responder
    /// takes plain RoCE (SPEC T8(a)).
    pub const fn standard_wire(self) -> bool {
        matches!(
            self,
            RecoveryMode::Roce | RecoveryMode::RoceGoBack0 | RecoveryMode::ReorderBuffer
        )
    }

    /// Whether a window controller (DCTCP, AIMD) can run over this mode. Not over early RoCE's
    /// go-back-0, whose requester asks for ACKs only at message ends (its responder discards a
    /// partial message, so an ACK inside one would promise what it may throw away; E11's
    /// livelock depends on it): a window smaller than a message would send its few packets and
    /// wait out a timeout each time. The simulator and the runtime both refuse the pair.
    pub const fn takes_a_window(self) -> bool {
        !matches!(self, RecoveryMode::RoceGoBack0)
    }

    /// The paper's configuration of this mode.
    pub const fn preset(self) -> RecoveryConfig {
        match self {
            RecoveryMode::Irn => RecoveryConfig::irn(),
            RecoveryMode::IrnGoBackN => RecoveryConfig::irn_go_back_n(),
            RecoveryMode::IrnNoBdpFc => RecoveryConfig::irn_without_bdp_fc(),
            RecoveryMode::IrnNoSack => RecoveryConfig::irn_without_sack(),
            RecoveryMode::Roce => RecoveryConfig::roce(),
            RecoveryMode::RoceGoBack0 => RecoveryConfig::roce_go_back_0(),
            RecoveryMode::ReorderBuffer => RecoveryConfig::reorder_buffer(),
            RecoveryMode::ExtIb => RecoveryConfig::ext_ib(),
            RecoveryMode::Tcp => RecoveryConfig::tcp(),
        }
    }
}

impl core::fmt::Display for RecoveryMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for RecoveryMode {
    type Err = String;

    fn from_str(s: &str) -> Result<RecoveryMode, String> {
        RecoveryMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = RecoveryMode::ALL.iter().map(|m| m.name()).collect();
                format!("recovery mode is one of {}, not {s:?}", names.join(", "))
            })
    }
}

/// The BDP cap (T6) for a path: its bandwidth-delay product divided by the MTU, rounded up.
/// `rtt` is the base round-trip time of the longest path.
pub fn bdp_cap_packets(bits_per_second: u64, rtt: Dur, mtu: u32) -> u32 {
    let bdp_bits = u128::from(bits_per_second) * u128::from(rtt.as_picos()) / 1_000_000_000_000;
    let bdp_bytes = bdp_bits.div_ceil(8);
    let packets = bdp_bytes.div_ceil(u128::from(mtu.max(1)));
    u32::try_from(packets.max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_distinct() {
        let all = [
            RecoveryConfig::roce_go_back_0(),
            RecoveryConfig::roce(),
            RecoveryConfig::roce_pfc(),
            RecoveryConfig::irn(),
            RecoveryConfig::irn_go_back_n(),
            RecoveryConfig::irn_without_bdp_fc(),
            RecoveryConfig::irn_without_sack(),
            RecoveryConfig::reorder_buffer(),
            RecoveryConfig::ext_ib(),
            RecoveryConfig::tcp(),
        ];
        for (i, a) in all.iter().enumerate() {
            assert_eq!(a.validate(), Ok(()), "{a:?}");
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn invalid_combinations_are_refused() {
        let mut c = RecoveryConfig::roce();
        c.retransmission = Retransmission::SelectiveRepeat;
        assert_eq!(c.validate(), Err(ConfigError::SelectiveRepeatNeedsIrnWire));
        let mut c = RecoveryConfig::irn();
        c.bdp_cap = Some(0);
        assert_eq!(c.validate(), Err(ConfigError::ZeroBdpCap));
        c.bdp_cap = Some(1 << 24);
        assert_eq!(c.validate(), Err(ConfigError::HugeBdpCap));
        let c = RecoveryConfig {
            rto: RtoPolicy::Fixed(Dur::ZERO),
            ..RecoveryConfig::roce()
        };
        assert_eq!(c.validate(), Err(ConfigError::ZeroTimeout));
        let c = RecoveryConfig {
            wire: Wire::Standard,
            ..RecoveryConfig::ext_ib()
        };
        assert_eq!(c.validate(), Err(ConfigError::PreciseNeedsExtIb));
        let c = RecoveryConfig {
            wire: Wire::Irn,
            ..RecoveryConfig::ext_ib()
        };
        assert_eq!(c.validate(), Err(ConfigError::PreciseNeedsExtIb));
        let c = RecoveryConfig {
            hole_rule: None,
            ..RecoveryConfig::reorder_buffer()
        };
        assert_eq!(c.validate(), Err(ConfigError::ReorderBufferNeedsStandard));
        let c = RecoveryConfig {
            reorder_buffer: Some(0),
            ..RecoveryConfig::reorder_buffer()
        };
        assert_eq!(c.validate(), Err(ConfigError::ZeroReorder));
        let c = RecoveryConfig {
            tcp: Some(TcpModel::default()),
            ..RecoveryConfig::irn_go_back_n()
        };
        assert_eq!(c.validate(), Err(ConfigError::TcpNeedsSelectiveRepeat));
        for base in [
            RecoveryConfig::roce(),
            RecoveryConfig::irn_without_sack(),
            RecoveryConfig::ext_ib(),
            RecoveryConfig::tcp(),
        ] {
            for (lost, sweep, bitmap) in [
                (true, false, false),
                (false, true, false),
                (false, false, true),
            ] {
                let c = RecoveryConfig {
                    resend_lost_retransmissions: lost,
                    timeout_resends_unsacked: sweep,
                    nack_bitmap: bitmap,
                    ..base
                };
                assert_eq!(
                    c.validate(),
                    Err(ConfigError::LostRetransmissionsNeedSack),
                    "{base:?}"
                );
            }
        }
        for base in [RecoveryConfig::irn(), RecoveryConfig::irn_without_bdp_fc()] {
            let c = RecoveryConfig {
                resend_lost_retransmissions: true,
                timeout_resends_unsacked: true,
                nack_bitmap: true,
                ..base
            };
            assert_eq!(c.validate(), Ok(()));
        }
        for base in [RecoveryConfig::roce(), RecoveryConfig::tcp()] {
            let c = RecoveryConfig {
                bdp_fc_span: Some(4),
                ..base
            };
            assert_eq!(
                c.validate(),
                Err(ConfigError::LostRetransmissionsNeedSack),
                "{base:?}"
            );
        }
        for (base, span) in [
            (RecoveryConfig::irn(), Some(0)),
            (RecoveryConfig::irn_without_bdp_fc(), Some(4)),
            (
                RecoveryConfig {
                    bdp_cap: Some(1 << 22),
                    ..RecoveryConfig::irn()
                },
                Some(4),
            ),
        ] {
            let c = RecoveryConfig {
                bdp_fc_span: span,
                ..base
            };
            assert_eq!(c.validate(), Err(ConfigError::BdpFcSpan));
        }
        let c = RecoveryConfig {
            bdp_fc_span: Some(4),
            ..RecoveryConfig::irn()
        };
        assert_eq!(c.validate(), Ok(()));
        let c = RecoveryConfig {
            rto: RtoPolicy::Adaptive {
                min: Dur::from_micros(500),
                max: Dur::from_micros(100),
                initial: Dur::from_micros(500),
            },
            ..RecoveryConfig::tcp()
        };
        assert_eq!(c.validate(), Err(ConfigError::RtoBounds));
        let c = RecoveryConfig {
            tcp: Some(TcpModel {
                delayed_ack: Some(Dur::ZERO),
            }),
            ..RecoveryConfig::tcp()
        };
        assert_eq!(c.validate(), Err(ConfigError::ZeroTimeout));
    }

    #[test]
    fn every_mode_parses_by_its_name_and_names_a_valid_preset() {
        for m in RecoveryMode::ALL {
            assert_eq!(m.name().parse::<RecoveryMode>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
            assert_eq!(m.preset().validate(), Ok(()));
            assert_eq!(m.is_irn(), m.preset().wire == Wire::Irn, "{m}");
            assert_eq!(m.standard_wire(), m.preset().wire == Wire::Standard, "{m}");
        }
        let e = "go-back-7".parse::<RecoveryMode>().expect_err("not a mode");
        assert!(e.contains("irn-no-sack") && e.contains("go-back-7"), "{e}");
    }

    #[test]
    fn nic_state_is_zero_for_roce_and_grows_with_each_design() {
        assert_eq!(RecoveryConfig::roce().nic_state(110).total_bits(), 0);
        let irn = RecoveryConfig::irn().nic_state(999);
        assert_eq!(irn.bitmap_bits, 5 * 110, "five bitmaps of the BDP cap");
        let rb = RecoveryConfig::reorder_buffer().nic_state(110);
        assert_eq!(rb.descriptor_bits, 64 * 128);
        assert!(rb.total_bits() > irn.total_bits(), "descriptors dominate");
        let spanned = RecoveryConfig {
            bdp_fc_span: Some(4),
            ..RecoveryConfig::irn()
        }
        .nic_state(999);
        assert_eq!(
            spanned.bitmap_bits,
            4 * irn.bitmap_bits,
            "bitmaps span 4 caps"
        );
        assert_eq!(spanned.register_bits, irn.register_bits);
        let ext = RecoveryConfig::ext_ib().nic_state(110);
        assert_eq!(ext.bitmap_bits, 5 * 110);
        assert_eq!(ext.descriptor_bits, 0);
        // Without BDP-FC nothing bounds IRN's outstanding PSNs but the out-of-order window:
        // its bitmaps span that, not the path's BDP.
        let no_cap = RecoveryConfig::irn_without_bdp_fc();
        let w = no_cap.state_window(110, 4096);
        assert_eq!(w, 4096);
        assert_eq!(no_cap.nic_state(w).bitmap_bits, 5 * 4096);
        assert_eq!(RecoveryConfig::irn().state_window(110, 4096), 110);
        assert_eq!(RecoveryConfig::ext_ib().state_window(110, 4096), 110);
    }

    #[test]
    fn irn_rto_switches_at_n() {
        let rto = RecoveryConfig::irn().rto;
        assert_eq!(rto.timeout(0), Some(IRN_RTO_LOW));
        assert_eq!(rto.timeout(3), Some(IRN_RTO_LOW));
        assert_eq!(rto.timeout(4), Some(IRN_RTO_HIGH));
        assert_eq!(RecoveryConfig::roce_pfc().rto.timeout(100), None);
    }

    #[test]
    fn bdp_cap_of_the_default_scenario_is_about_110() {
        // 40 Gb/s, 6 hops of 2 us each way = 24 us RTT (propagation only): 120 KB = 118 x 1 KB.
        // The paper quotes "120 KB" and "≈110 packets" (§3.2, §4.1); the 110 default counts
        // 1 KB as 1024 B payload plus headers, as the paper's packets do.
        let cap = bdp_cap_packets(40_000_000_000, Dur::from_micros(24), 1024);
        assert_eq!(cap, 118);
        assert!((100..=120).contains(&IRN_DEFAULT_BDP_CAP));
        assert_eq!(bdp_cap_packets(40_000_000_000, Dur::ZERO, 1024), 1);
    }
}
