//! The reliable-connected queue pair: requester and responder of one RC connection, with RoCE's
//! and IRN's loss recovery (SPEC T1, T3–T7, T9 hooks).
//!
//! See [`QueuePair`] for the driver contract.

use std::collections::VecDeque;
use std::sync::Arc;

use irn_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CreditCode, Ecn, IbRepr, IrnEthRepr,
    NakCode, Opcode, Psn, RethRepr, RnrTimer, Syndrome, Transport, DEFAULT_PKEY, TVER_IRN,
    TVER_STANDARD,
};

use crate::cc::{Controller, ControllerFactory, NoCcFactory};
use crate::config::{RecoveryConfig, Retransmission, RtoPolicy};
use crate::memory::{Access, AtomicOp, Key, MemError, Memory};
use crate::state::{
    check_transition, ib_timeout, post_recv_rule, post_send_rule, AttrMask, ModifyError, PostRule,
    QpState,
};
use crate::time::{Dur, Time};
use crate::window::{Arrival, RecvWindow, SendWindow};
use crate::wr::{Completion, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};

/// The longest message RC carries (IBTA: 2^31 bytes).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// Standard RoCE: the requester asks for an ACK at least every this many packets of a long
/// message (Linux rxe asks every 128; a smaller value keeps the sender's state short).
const STANDARD_ACK_EVERY: u32 = 64;

/// Creation-time configuration of a queue pair (what `ibv_create_qp` and the NIC's firmware
/// settings fix; connection attributes come later through [`QueuePair::modify`]).
#[derive(Debug, Clone)]
pub struct QpConfig {
    /// This queue pair's number (24 bits).
    pub qpn: u32,
    /// Loss recovery: RoCE, IRN, or a factor-analysis variant.
    pub recovery: RecoveryConfig,
    /// Makes this queue pair's congestion controller.
    pub cc: Arc<dyn ControllerFactory>,
    /// Line rate of the port, for the congestion controller.
    pub line_rate_bps: u64,
    /// DCQCN's notification point: answer CE-marked packets with at most one CNP per this
    /// interval (50 µs, the DCQCN paper's N). `None`: send no CNPs (a NIC whose senders react
    /// to ECN echoes in ACKs, as DCTCP's do, or to no marks at all).
    pub cnp_interval: Option<Dur>,
    /// Overrides the verbs `retry_cnt` (0–7) with a larger limit, for simulations and tests
    /// that must never give up.
    pub retry_limit: Option<u32>,
    /// Out-of-order window of an IRN receiver when BDP-FC is off (with BDP-FC the bitmaps are
    /// sized by the BDP cap, IRN §5.3).
    pub ooo_window: u32,
    /// Send queue depth (`max_send_wr`).
    pub max_send_wr: usize,
    /// Receive queue depth (`max_recv_wr`).
    pub max_recv_wr: usize,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            qpn: 0x11,
            recovery: RecoveryConfig::irn(),
            cc: Arc::new(NoCcFactory),
            line_rate_bps: 40_000_000_000,
            cnp_interval: Some(Dur::from_micros(50)),
            retry_limit: None,
            ooo_window: 4096,
            max_send_wr: 1 << 16,
            max_recv_wr: 1 << 16,
        }
    }
}

/// Connection attributes set by [`QueuePair::modify`] (verbs `struct ibv_qp_attr`, the fields an
/// RC queue pair uses). Which of them a transition reads is its [`AttrMask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Remote access this queue pair allows as responder (`REMOTE_WRITE`, `REMOTE_READ`,
    /// `REMOTE_ATOMIC`).
    pub access: Access,
    /// Partition key carried in every BTH and checked on receipt.
    pub pkey: u16,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    pub path_mtu: u32,
    /// The peer's queue pair number.
    pub dest_qpn: u32,
    /// First PSN expected from the peer.
    pub rq_psn: Psn,
    /// Reads and atomics accepted as responder at once.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder asks requesters to wait (IBTA Table 45).
    pub min_rnr_timer: u8,
    /// First PSN this requester sends.
    pub sq_psn: Psn,
    /// Local ACK timeout code (4.096 µs × 2^t; 0 = infinite), used with
    /// [`RtoPolicy::FromAttr`].
    pub timeout: u8,
    /// Retries after a timeout or sequence NAK before `RetryExcErr` (0–7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK before `RnrRetryExcErr` (0–6; 7 = forever).
    pub rnr_retry: u8,
    /// Reads and atomics this requester keeps outstanding at once.
    pub max_rd_atomic: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            access: Access::REMOTE_WRITE
                .with(Access::REMOTE_READ)
                .with(Access::REMOTE_ATOMIC),
            pkey: DEFAULT_PKEY,
            path_mtu: 1024,
            dest_qpn: 0,
            rq_psn: Psn::new(0),
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
            sq_psn: Psn::new(0),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        }
    }
}

/// Why a work request was not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The queue pair's state does not take this kind of work request.
    #[error("work request refused in state {0}")]
    InvalidState(QpState),
    /// The queue is full.
    #[error("work queue full")]
    QueueFull,
    /// The work request itself is invalid.
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
}

/// Per-queue-pair counters (what `ibv_query_qp`'s hardware counters and rxe's `hw_counters`
/// report, plus IRN's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent (all kinds).
    pub tx_packets: u64,
    /// Payload bytes sent.
    pub tx_bytes: u64,
    /// Request or response packets sent again.
    pub retransmitted: u64,
    /// Packets received and accepted for processing.
    pub rx_packets: u64,
    /// ACKs sent (plain and read ACKs).
    pub acks_sent: u64,
    /// NACKs / sequence-error NAKs sent.
    pub nacks_sent: u64,
    /// NACKs / sequence-error NAKs received.
    pub nacks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Error NAKs (invalid request, remote access, remote operational) sent.
    pub error_naks_sent: u64,
    /// Retransmission timeouts (requester and read responder).
    pub timeouts: u64,
    /// Duplicate packets received.
    pub duplicates: u64,
    /// Packets that arrived ahead of the expected PSN.
    pub out_of_order: u64,
    /// CNPs sent (as notification point).
    pub cnps_sent: u64,
    /// CNPs received (as reaction point).
    pub cnps_received: u64,
    /// Packets that arrived with ECN CE.
    pub ecn_marked: u64,
    /// Packets dropped for a wrong QPN, P_Key, TVer, opcode or length.
    pub dropped_invalid: u64,
    /// Packets dropped because the queue pair's state does not receive them.
    pub dropped_state: u64,
    /// Responses or ACKs that matched nothing outstanding.
    pub unexpected: u64,
}

impl core::ops::AddAssign for Counters {
    /// Field-wise sum (totals over many queue pairs).
    fn add_assign(&mut self, o: Counters) {
        let Counters {
            tx_packets,
            tx_bytes,
            retransmitted,
            rx_packets,
            acks_sent,
            nacks_sent,
            nacks_received,
            rnr_naks_sent,
            rnr_naks_received,
            error_naks_sent,
            timeouts,
            duplicates,
            out_of_order,
            cnps_sent,
            cnps_received,
            ecn_marked,
            dropped_invalid,
            dropped_state,
            unexpected,
        } = o;
        self.tx_packets += tx_packets;
        self.tx_bytes += tx_bytes;
        self.retransmitted += retransmitted;
        self.rx_packets += rx_packets;
        self.acks_sent += acks_sent;
        self.nacks_sent += nacks_sent;
        self.nacks_received += nacks_received;
        self.rnr_naks_sent += rnr_naks_sent;
        self.rnr_naks_received += rnr_naks_received;
        self.error_naks_sent += error_naks_sent;
        self.timeouts += timeouts;
        self.duplicates += duplicates;
        self.out_of_order += out_of_order;
        self.cnps_sent += cnps_sent;
        self.cnps_received += cnps_received;
        self.ecn_marked += ecn_marked;
        self.dropped_invalid += dropped_invalid;
        self.dropped_state += dropped_state;
        self.unexpected += unexpected;
    }
}

/// A packet the queue pair wants sent. Its payload, when the memory holds bytes, is in the
/// buffer given to [`QueuePair::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// BTH onward, as a structured description (the simulator forwards it as is; the UDP
    /// runtime serializes it with `irn_wire`).
    pub ib: IbRepr,
    /// The ECN field the IP header should carry: ECT(0) on data, not-ECT on control packets.
    pub ecn: Ecn,
}

// ---------------------------------------------------------------------------------------------
// Internal state

#[derive(Debug, Clone)]
struct SendWqe {
    wr: SendWr,
    len: u64,
    started: bool,
    /// First sPSN.
    first_psn: Psn,
    /// sPSNs it occupies.
    npsn: u32,
    /// Packets of data: request packets of a Send/Write, response packets of a Read/atomic.
    npkts: u32,
    recv_sn: Option<u32>,
    read_sn: Option<u32>,
    /// IRN: first rPSN of its responses.
    rpsn: Psn,
    /// Response packets received in order.
    resp_rcvd: u32,
    /// Every sPSN is acknowledged.
    acked: bool,
    error: Option<WcStatus>,
}

impl SendWqe {
    fn needs_response(&self) -> bool {
        self.wr.op.is_read_or_atomic()
    }

    fn done(&self) -> bool {
        self.acked && (!self.needs_response() || self.resp_rcvd >= self.npkts)
    }

    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }

    fn contains(&self, psn: Psn) -> bool {
        let d = self.first_psn.distance(psn);
        self.started && d >= 0 && (d as u32) < self.npsn
    }
}

#[derive(Debug, Clone)]
struct RecvWqe {
    wr: RecvWr,
    sn: u32,
    len: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecvDone {
    sn: u32,
    byte_len: u64,
    imm: Option<u32>,
    inv: Option<u32>,
    write_imm: bool,
}

/// What a responder does once every PSN before a packet has arrived (IRN §5.3.3's 2-bitmap:
/// the "last packet" bit and the information it carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqAction {
    /// The last packet of a Send or Write: MSN + 1, and maybe a receive completion.
    MsgEnd { recv: Option<RecvDone> },
    /// Execute a Read (IRN §5.3.2: not before everything ahead of it arrived).
    Read {
        va: u64,
        rkey: u32,
        len: u64,
        npsn: u32,
    },
    /// Execute an atomic.
    Atomic { va: u64, rkey: u32, op: AtomicOp },
    /// A request that must fail: NAK it and enter the error state.
    Fatal {
        nak: NakCode,
        recv: Option<(u32, WcStatus)>,
    },
}

/// Standard RoCE: the message in progress at the responder (in-order only).
#[derive(Debug, Clone, Copy)]
struct Inbound {
    first_psn: Psn,
    write: Option<RethRepr>,
    recv_sn: Option<u32>,
}

/// Standard RoCE: a saved Read or atomic, to answer duplicates without executing twice.
#[derive(Debug, Clone, Copy)]
struct SavedRd {
    psn: Psn,
    npsn: u32,
    msn: u32,
    kind: SavedKind,
}

#[derive(Debug, Clone, Copy)]
enum SavedKind {
    Read { va: u64, rkey: u32, len: u64 },
    Atomic { orig: u64 },
}

/// Standard RoCE: responder output, in PSN order.
#[derive(Debug, Clone, Copy)]
enum RespJob {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
        becn: bool,
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: u32,
        len: u64,
        done: u64,
        msn: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
}

/// IRN: a response in the rPSN space (responder side).
#[derive(Debug, Clone, Copy)]
struct RspEntry {
    /// The request's sPSN (error NAKs name it).
    req_psn: Psn,
    rpsn: Psn,
    npkts: u32,
    kind: SavedKind,
    msn: u32,
}

/// Where a Read response packet's payload comes from, and the PSN a fault is NAKed at.
#[derive(Debug, Clone, Copy)]
struct ReadSource {
    rkey: u32,
    va: u64,
    len: u64,
    nak_psn: Psn,
}

/// High-priority control packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctrl {
    /// IRN ACK / NACK / error NAK in the sPSN space (responder to requester).
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
        sack: Option<Psn>,
        becn: bool,
    },
    /// IRN read (N)ACK in the rPSN space (requester to responder).
    ReadAck {
        psn: Psn,
        syndrome: Syndrome,
        sack: Option<Psn>,
    },
    /// Congestion notification (notification point, RoCEv2 annex A17.9).
    Cnp,
}

/// One side of an RDMA reliable connection: requester and responder.
///
/// # Driver contract (after quinn-proto's `Connection`)
///
/// The queue pair never reads a clock, opens a socket or spawns a thread. Its driver (the
/// simulator's NIC or the UDP runtime):
///
/// 1. creates it with [`QueuePair::new`] and brings it up with [`QueuePair::modify`]
///    (RESET → INIT → RTR → RTS), passing the peer's QPN and PSNs exchanged out of band;
/// 2. feeds it work with [`post_send`](QueuePair::post_send) and
///    [`post_recv`](QueuePair::post_recv), packets with
///    [`handle_packet`](QueuePair::handle_packet) and expired deadlines with
///    [`handle_timeout`](QueuePair::handle_timeout);
/// 3. after each of those calls, drains the outputs:
///    * [`poll_transmit`](QueuePair::poll_transmit) until it returns `None` (or the link is
///      busy: calling it later is fine — packets are built when polled, so a NIC that polls
///      only when its port is free gets exactly the scheduling it wants);
///    * [`poll_completion`](QueuePair::poll_completion) until `None`;
///    * [`poll_timeout`](QueuePair::poll_timeout): the next deadline at which to call
///      `handle_timeout` (replacing any earlier one).
///
/// Application memory is passed into the calls that touch it, so one memory (a protection
/// domain's regions) serves many queue pairs. Every call takes `now`; time never goes
/// backwards.
#[derive(Debug)]
pub struct QueuePair {
    cfg: QpConfig,
    state: QpState,
    attr: QpAttr,
    rto: RtoPolicy,
    cc: Box<dyn Controller>,
    counters: Counters,
    completions: VecDeque<Completion>,

    // Requester.
    sq: VecDeque<SendWqe>,
    /// Index in `sq` of the WQE being sent (new packets), or `sq.len()`.
    tx_idx: usize,
    /// Next packet of that WQE.
    tx_off: u32,
    swin: SendWindow,
    next_recv_sn: u32,
    next_read_sn: u32,
    next_rpsn: Psn,
    /// IRN: the rPSN space of responses (requester receives).
    rrecv: RecvWindow<()>,
    /// Standard RoCE: a go-back for a read response gap is pending (sent once per gap).
    read_gap: Option<Psn>,
    rnr_until: Option<Time>,
    rnr_psn: Psn,
    rnr_retries: u32,
    pacing_until: Time,
    /// Request payload bytes sent since a standard request last asked for an ACK.
    unasked_bytes: u64,

    // Responder.
    rq: VecDeque<RecvWqe>,
    rq_next_sn: u32,
    /// Standard RoCE: next receive WQE a new message claims.
    rq_claim_sn: u32,
    rwin: RecvWindow<ReqAction>,
    msn: u32,
    inbound: Option<Inbound>,
    saved: VecDeque<SavedRd>,
    resp: VecDeque<RespJob>,
    ctrl: VecDeque<Ctrl>,
    rsp_win: SendWindow,
    rsp_q: VecDeque<RspEntry>,
    rsp_tx_idx: usize,
    rsp_tx_off: u32,
    last_cnp: Option<Time>,
}

/// Packets of a message of `len` bytes at path MTU `mtu` (a zero-length message is one packet).
fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

fn path_mtu_valid(mtu: u32) -> bool {
    matches!(mtu, 256 | 512 | 1024 | 2048 | 4096)
}

impl QueuePair {
    /// A queue pair in the RESET state.
    pub fn new(now: Time, cfg: QpConfig) -> QueuePair {
        let cc = cfg.cc.build(now, cfg.line_rate_bps, u64::from(cfg.qpn));
        let mode = cfg.recovery.retransmission;
        QueuePair {
            state: QpState::Reset,
            attr: QpAttr::default(),
            rto: cfg.recovery.rto,
            cc,
            counters: Counters::default(),
            completions: VecDeque::new(),
            sq: VecDeque::new(),
            tx_idx: 0,
            tx_off: 0,
            swin: SendWindow::new(mode, Psn::new(0)),
            next_recv_sn: 0,
            next_read_sn: 0,
            next_rpsn: Psn::new(0),
            rrecv: RecvWindow::new(Psn::new(0), false, 1),
            read_gap: None,
            rnr_until: None,
            rnr_psn: Psn::new(0),
            rnr_retries: 0,
            pacing_until: Time::ZERO,
            unasked_bytes: 0,
            rq: VecDeque::new(),
            rq_next_sn: 0,
            rq_claim_sn: 0,
            rwin: RecvWindow::new(Psn::new(0), false, 1),
            msn: 0,
            inbound: None,
            saved: VecDeque::new(),
            resp: VecDeque::new(),
            ctrl: VecDeque::new(),
            rsp_win: SendWindow::new(mode, Psn::new(0)),
            rsp_q: VecDeque::new(),
            rsp_tx_idx: 0,
            rsp_tx_off: 0,
            last_cnp: None,
            cfg,
        }
    }

    /// This queue pair's number.
    pub fn qpn(&self) -> u32 {
        self.cfg.qpn
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Current attributes.
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }

    /// The configuration it was created with.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    /// Counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The congestion controller (for reports).
    pub fn controller(&self) -> &dyn Controller {
        self.cc.as_ref()
    }

    /// Request PSNs sent and not yet acknowledged (what BDP-FC bounds).
    pub fn in_flight(&self) -> u32 {
        self.swin.in_flight()
    }

    /// Response PSNs the IRN read responder has in flight (bounded by BDP-FC too).
    pub fn responses_in_flight(&self) -> u32 {
        self.rsp_win.in_flight()
    }

    /// Send work requests posted and not yet completed.
    pub fn outstanding_sends(&self) -> usize {
        self.sq.len()
    }

    /// Receive work requests posted and not yet completed.
    pub fn outstanding_recvs(&self) -> usize {
        self.rq.len()
    }

    fn irn_wire(&self) -> bool {
        self.cfg.recovery.irn_wire
    }

    fn mode(&self) -> Retransmission {
        self.cfg.recovery.retransmission
    }

    fn selective(&self) -> bool {
        matches!(
            self.mode(),
            Retransmission::SelectiveRepeat | Retransmission::SelectiveRepeatNoSack
        )
    }

    fn mtu(&self) -> u32 {
        self.attr.path_mtu
    }

    fn tver(&self) -> u8 {
        if self.irn_wire() {
            TVER_IRN
        } else {
            TVER_STANDARD
        }
    }

    fn retry_limit(&self) -> u32 {
        self.cfg
            .retry_limit
            .unwrap_or(u32::from(self.attr.retry_cnt))
    }

    /// How often a retry is counted while no progress is made: `None` when every timeout is
    /// one (the timer is the verbs local ACK timeout, [`RtoPolicy::FromAttr`]); otherwise the
    /// local ACK timeout of the `timeout` attribute, so that a queue pair whose RTO is shorter
    /// (IRN's) still gives up after `retry_cnt + 1` local ACK timeouts without progress — what
    /// the verbs attributes promise (IBTA §9.7.6.1.3) — rather than after `retry_cnt + 1` of
    /// its own much shorter timeouts, which a busy host's scheduling delays alone can add up
    /// to. A `timeout` of 0 (infinite) never counts.
    fn retry_every(&self) -> Option<Dur> {
        if self.cfg.recovery.rto == RtoPolicy::FromAttr {
            return None;
        }
        Some(ib_timeout(self.attr.timeout).unwrap_or(Dur::MAX))
    }

    fn ooo_capacity(&self) -> u32 {
        self.cfg.recovery.bdp_cap.unwrap_or(self.cfg.ooo_window)
    }

    // -----------------------------------------------------------------------------------------
    // Verbs

    /// Moves the queue pair to `to`, applying the attributes named by `mask` (IBTA §10.3.1;
    /// `ibv_modify_qp`). An edge not in the state diagram, a missing or unexpected attribute, or
    /// a value out of range is an error and changes nothing.
    pub fn modify(
        &mut self,
        now: Time,
        to: QpState,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<(), ModifyError> {
        check_transition(self.state, to, mask)?;
        if mask.contains(AttrMask::PATH_MTU) && !path_mtu_valid(attr.path_mtu) {
            return Err(ModifyError::InvalidValue("path_mtu"));
        }
        if mask.contains(AttrMask::DEST_QPN) && attr.dest_qpn > Psn::MASK {
            return Err(ModifyError::InvalidValue("dest_qpn"));
        }
        if mask.contains(AttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
            return Err(ModifyError::InvalidValue("retry_cnt"));
        }
        if mask.contains(AttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
            return Err(ModifyError::InvalidValue("rnr_retry"));
        }
        if mask.contains(AttrMask::TIMEOUT) && attr.timeout > 31 {
            return Err(ModifyError::InvalidValue("timeout"));
        }
        if self.state == QpState::Sqd
            && mask.contains(AttrMask::SQ_PSN)
            && (self.swin.in_flight() > 0 || self.sq.iter().any(|w| w.started))
        {
            return Err(ModifyError::InvalidValue("sq_psn (send queue not drained)"));
        }
        if mask.contains(AttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return Err(ModifyError::InvalidValue("min_rnr_timer"));
        }
        if to == QpState::Reset {
            let cfg = self.cfg.clone();
            *self = QueuePair::new(now, cfg);
            return Ok(());
        }
        if to == QpState::Err {
            self.enter_error();
            return Ok(());
        }
        macro_rules! take {
            ($flag:ident, $field:ident) => {
                if mask.contains(AttrMask::$flag) {
                    self.attr.$field = attr.$field;
                }
            };
        }
        take!(ACCESS_FLAGS, access);
        take!(PKEY, pkey);
        take!(PATH_MTU, path_mtu);
        take!(DEST_QPN, dest_qpn);
        take!(RQ_PSN, rq_psn);
        take!(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
        take!(MIN_RNR_TIMER, min_rnr_timer);
        take!(SQ_PSN, sq_psn);
        take!(TIMEOUT, timeout);
        take!(RETRY_CNT, retry_cnt);
        take!(RNR_RETRY, rnr_retry);
        take!(MAX_QP_RD_ATOMIC, max_rd_atomic);
        if mask.contains(AttrMask::TIMEOUT) && self.cfg.recovery.rto == RtoPolicy::FromAttr {
            self.rto = ib_timeout(self.attr.timeout).map_or(RtoPolicy::Disabled, RtoPolicy::Fixed);
        }
        let mode = self.mode();
        if self.state == QpState::Init && to == QpState::Rtr {
            let ooo = self.selective();
            self.rwin = RecvWindow::new(self.attr.rq_psn, ooo, self.ooo_capacity());
            // IRN §5.4: the rPSN space of this responder's answers starts where the peer's
            // requests start, which both sides know.
            self.rsp_win = SendWindow::new(mode, self.attr.rq_psn);
        }
        if self.state == QpState::Sqd && mask.contains(AttrMask::SQ_PSN) {
            // A drained send queue restarts its sPSNs; the rPSN space of responses continues.
            self.swin = SendWindow::new(mode, self.attr.sq_psn);
        }
        if self.state == QpState::Rtr && to == QpState::Rts {
            self.swin = SendWindow::new(mode, self.attr.sq_psn);
            self.next_rpsn = self.attr.sq_psn;
            self.rrecv = RecvWindow::new(
                self.attr.sq_psn,
                self.selective() && self.irn_wire(),
                self.ooo_capacity(),
            );
        }
        self.state = to;
        Ok(())
    }

    /// Applies the state's posting rule to a work request: an error when refused, `false` when
    /// it was flushed at once (completed with `WrFlushErr`), `true` when it is to be queued.
    fn admit(&mut self, rule: PostRule, wr_id: u64, opcode: WcOpcode) -> Result<bool, PostError> {
        match rule {
            PostRule::Reject => Err(PostError::InvalidState(self.state)),
            PostRule::Flush => {
                self.completions.push_back(Completion::bare(
                    wr_id,
                    opcode,
                    WcStatus::WrFlushErr,
                    self.cfg.qpn,
                ));
                Ok(false)
            }
            PostRule::Accept => Ok(true),
        }
    }

    /// Posts a send work request (`ibv_post_send`). In the error state it completes at once with
    /// `WrFlushErr`.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        if !self.admit(post_send_rule(self.state), wr.wr_id, wr.op.wc_opcode())? {
            return Ok(());
        }
        if self.sq.len() >= self.cfg.max_send_wr {
            return Err(PostError::QueueFull);
        }
        let len = wr.len();
        if wr.op.is_atomic() && (wr.sg_list.len() != 1 || len != 8) {
            return Err(PostError::InvalidWr(
                "an atomic needs one 8-byte scatter/gather entry",
            ));
        }
        self.sq.push_back(SendWqe {
            wr,
            len,
            started: false,
            first_psn: Psn::new(0),
            npsn: 0,
            npkts: 0,
            recv_sn: None,
            read_sn: None,
            rpsn: Psn::new(0),
            resp_rcvd: 0,
            acked: false,
            error: None,
        });
        Ok(())
    }

    /// Posts a receive work request (`ibv_post_recv`). In the error state it completes at once
    /// with `WrFlushErr`.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if !self.admit(post_recv_rule(self.state), wr.wr_id, WcOpcode::Recv)? {
            return Ok(());
        }
        if self.rq.len() >= self.cfg.max_recv_wr {
            return Err(PostError::QueueFull);
        }
        let len = wr.len();
        let sn = self.rq_next_sn;
        self.rq_next_sn = self.rq_next_sn.wrapping_add(1);
        self.rq.push_back(RecvWqe { wr, sn, len });
        Ok(())
    }

    /// The next completion, in the order the queue pair produced them: send completions in
    /// posting order, receive completions in posting order.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    // -----------------------------------------------------------------------------------------
    // Errors

    /// Enters the error state: every outstanding work request completes with `WrFlushErr`
    /// (IBTA §10.3.1: "all outstanding and new WRs are completed in error").
    fn enter_error(&mut self) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        let qpn = self.cfg.qpn;
        for w in self.sq.drain(..) {
            self.completions.push_back(Completion::bare(
                w.wr.wr_id,
                w.wr.op.wc_opcode(),
                w.error.unwrap_or(WcStatus::WrFlushErr),
                qpn,
            ));
        }
        for r in self.rq.drain(..) {
            self.completions.push_back(Completion::bare(
                r.wr.wr_id,
                WcOpcode::Recv,
                WcStatus::WrFlushErr,
                qpn,
            ));
        }
        self.tx_idx = 0;
        self.tx_off = 0;
        // Only NAKs and ACKs already decided still go out.
        self.resp.retain(|j| matches!(j, RespJob::Ack { .. }));
        self.ctrl.retain(|c| !matches!(c, Ctrl::Cnp));
        self.rsp_q.clear();
        self.rnr_until = None;
    }

    /// Completes the send WQEs at the head of the queue that are done, in order; an errored
    /// one completes with its status and takes the queue pair to the error state.
    fn complete_sends(&mut self) {
        while let Some(w) = self.sq.front() {
            if let Some(status) = w.error {
                let w = &self.sq[0];
                self.completions.push_back(Completion::bare(
                    w.wr.wr_id,
                    w.wr.op.wc_opcode(),
                    status,
                    self.cfg.qpn,
                ));
                self.sq.pop_front();
                self.tx_idx = self.tx_idx.saturating_sub(1);
                self.enter_error();
                return;
            }
            if !w.started || !w.done() {
                return;
            }
            let Some(w) = self.sq.pop_front() else {
                return;
            };
            self.tx_idx = self.tx_idx.saturating_sub(1);
            if w.wr.signaled {
                self.completions.push_back(Completion {
                    wr_id: w.wr.wr_id,
                    status: WcStatus::Success,
                    opcode: w.wr.op.wc_opcode(),
                    byte_len: u32::try_from(w.len).unwrap_or(u32::MAX),
                    imm: None,
                    invalidated_rkey: None,
                    qp_num: self.cfg.qpn,
                });
            }
        }
    }

    /// Fails the send WQE holding `psn` (or the oldest) with `status`.
    fn fail_send(&mut self, psn: Option<Psn>, status: WcStatus) {
        let idx = psn
            .and_then(|p| self.sq.iter().position(|w| w.contains(p)))
            .unwrap_or(0);
        // Everything before it succeeded (the NAK acknowledges it).
        for w in self.sq.iter_mut().take(idx) {
            if w.started && !w.needs_response() {
                w.acked = true;
            }
        }
        if let Some(w) = self.sq.get_mut(idx) {
            w.error = Some(status);
        }
        self.complete_sends();
        if self.state != QpState::Err {
            // Earlier Reads still wait for responses: the error cannot be reported out of
            // order, so the queue pair errs now; the failed WQE keeps its status and those
            // before it are flushed (what a NIC does on a fatal NAK).
            self.enter_error();
        }
    }

    // -----------------------------------------------------------------------------------------
    // Timers

    /// The next deadline at which [`handle_timeout`](QueuePair::handle_timeout) must be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        let mut t: Option<Time> = None;
        let mut fold = |d: Option<Time>| {
            if let Some(d) = d {
                t = Some(t.map_or(d, |t| t.min(d)));
            }
        };
        if matches!(self.state, QpState::Rts | QpState::Sqd) {
            if let Some(until) = self.rnr_until {
                fold(Some(until));
            } else {
                fold(self.swin.deadline(&self.rto));
            }
        }
        if matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            fold(self.rsp_win.deadline(&self.rto));
            if self.pacing_until > Time::ZERO && self.has_data_to_send() {
                fold(Some(self.pacing_until));
            }
        }
        fold(self.cc.next_timer());
        t
    }

    fn has_data_to_send(&self) -> bool {
        !self.resp.is_empty()
            || self.rsp_tx_idx < self.rsp_q.len()
            || self.tx_idx < self.sq.len()
            || self.swin.in_recovery()
            || self.rsp_win.in_recovery()
    }

    /// Runs every timer that expired by `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.pacing_until <= now {
            self.pacing_until = Time::ZERO;
        }
        if self.cc.next_timer().is_some_and(|t| t <= now) {
            self.cc.on_timer(now);
        }
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return;
        }
        if let Some(until) = self.rnr_until {
            if until <= now {
                // The RNR wait is over: resend from the refused PSN.
                self.rnr_until = None;
                self.swin.go_back(self.rnr_psn);
                self.swin.restart_timer(now);
                self.swin.peer_alive(now);
            }
        } else if matches!(self.state, QpState::Rts | QpState::Sqd)
            && self.swin.deadline(&self.rto).is_some_and(|d| d <= now)
        {
            self.counters.timeouts += 1;
            self.cc.on_timeout(now);
            let retries = self.swin.on_timeout(now, self.retry_every());
            if retries > self.retry_limit() {
                // The oldest work request is the one that went unanswered (IBTA §9.7.6.1.3:
                // the requester reports the retry error on the WQE it was retrying); the rest
                // flush after it, in order. Naming the WQE of `una` instead would report a later
                // request's error after the flushes of earlier Reads still awaiting responses.
                self.fail_send(None, WcStatus::RetryExcErr);
                return;
            }
            self.recover_requests_after_timeout();
        }
        if self.rsp_win.deadline(&self.rto).is_some_and(|d| d <= now) {
            self.counters.timeouts += 1;
            let retries = self.rsp_win.on_timeout(now, self.retry_every());
            if retries > self.retry_limit() {
                // The requester stopped acknowledging responses: give the connection up.
                self.enter_error();
                return;
            }
            match self.mode() {
                Retransmission::GoBackN | Retransmission::GoBack0 => {
                    let una = self.rsp_win.una();
                    self.rsp_win.go_back(una);
                }
                _ => self.rsp_win.enter_recovery(true),
            }
        }
    }

    fn recover_requests_after_timeout(&mut self) {
        let una = self.swin.una();
        match self.mode() {
            Retransmission::GoBackN => self.swin.go_back(una),
            Retransmission::GoBack0 => {
                let start = self.message_start(una);
                self.swin.go_back(start);
            }
            Retransmission::SelectiveRepeat | Retransmission::SelectiveRepeatNoSack => {
                self.swin.enter_recovery(true)
            }
        }
        self.read_gap = None;
    }

    /// The first PSN of the message holding `psn` (go-back-0 restarts there, T3).
    fn message_start(&self, psn: Psn) -> Psn {
        self.sq
            .iter()
            .find(|w| w.contains(psn))
            .map_or(psn, |w| w.first_psn)
    }

    // -----------------------------------------------------------------------------------------
    // Receiving

    /// Handles one arriving packet: `ib` its headers, `payload` its payload bytes (empty when
    /// the driver carries no bytes, as the simulator at scale does — then `mem` must not hold
    /// bytes either), `ecn` the IP ECN field it arrived with.
    ///
    /// Anything invalid is counted and dropped or answered as the IBTA prescribes; nothing here
    /// panics on any input.
    pub fn handle_packet<M: Memory>(
        &mut self,
        now: Time,
        ib: &IbRepr,
        payload: &[u8],
        ecn: Ecn,
        mem: &mut M,
    ) {
        let bth = &ib.bth;
        if bth.dest_qpn != self.cfg.qpn {
            self.counters.dropped_invalid += 1;
            return;
        }
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            self.counters.dropped_state += 1;
            return;
        }
        if bth.opcode == Opcode::CNP {
            self.counters.cnps_received += 1;
            self.counters.rx_packets += 1;
            self.cc.on_cnp(now);
            return;
        }
        let payload_ok = if M::HOLDS_BYTES {
            payload.len() == ib.payload_len
        } else {
            payload.is_empty() || payload.len() == ib.payload_len
        };
        if bth.opcode.transport() != Transport::Rc
            || bth.tver != self.tver()
            || bth.pkey != self.attr.pkey
            || !payload_ok
            || ib.check().is_err()
        {
            self.counters.dropped_invalid += 1;
            return;
        }
        self.counters.rx_packets += 1;
        let ce = ecn == Ecn::Ce;
        if ce {
            self.counters.ecn_marked += 1;
        }
        let op = bth.opcode;
        if op.is_request() {
            if ce {
                self.notify_congestion(now);
            }
            self.handle_request(now, ib, payload, ce, mem);
        } else {
            match op {
                Opcode::RC_ACKNOWLEDGE => self.handle_ack(now, ib),
                Opcode::RC_IRN_READ_ACK => self.handle_read_ack(now, ib),
                _ => {
                    if ce {
                        self.notify_congestion(now);
                    }
                    self.handle_response(now, ib, payload, mem)
                }
            }
        }
        self.complete_sends();
    }

    /// Notification point: a CE-marked packet arrived; send a CNP unless one went out within the
    /// CNP interval (DCQCN, SPEC T9).
    fn notify_congestion(&mut self, now: Time) {
        let Some(interval) = self.cfg.cnp_interval else {
            return;
        };
        if self.last_cnp.is_some_and(|t| now.since(t) < interval) {
            return;
        }
        self.last_cnp = Some(now);
        self.ctrl.push_back(Ctrl::Cnp);
    }

    // ---- requester: ACKs and responses ------------------------------------------------------

    fn handle_ack(&mut self, now: Time, ib: &IbRepr) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.counters.dropped_state += 1;
            return;
        }
        let Some(aeth) = ib.aeth else {
            self.counters.dropped_invalid += 1;
            return;
        };
        let psn = ib.bth.psn;
        let sack = ib.irn.and_then(|i| i.sack_psn);
        let echo = ib.bth.becn;
        let irn = self.irn_wire();
        if irn
            && matches!(
                aeth.syndrome,
                Syndrome::Ack(_) | Syndrome::Nak(NakCode::PsnSequenceError)
            )
        {
            // ECN echo accounting (SPEC T9): an IRN ACK or NACK answers exactly one arrived
            // packet, marked or not — NACKs too, or a controller would see no marks while a
            // hole is open, which is when they matter.
            let unit = u64::from(self.mtu());
            self.cc.on_ecn_echo(now, if echo { unit } else { 0 }, unit);
        }
        match aeth.syndrome {
            Syndrome::Ack(_) => {
                let bytes = self.ack_requests(now, psn.add(1));
                if !irn {
                    self.echo_standard(now, echo, bytes);
                }
                if let Some(s) = sack {
                    self.swin.sack(now, s);
                }
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.counters.nacks_received += 1;
                if !irn {
                    self.echo_standard(now, echo, 0);
                }
                match self.mode() {
                    Retransmission::GoBack0 | Retransmission::GoBackN
                        if self.swin.una().distance(psn) < 0 =>
                    {
                        // Before the oldest unacknowledged PSN. Go-back-0's responder
                        // discarded the partial message holding `una` and asks for it from its
                        // first packet; anything else is a stale or duplicated NAK.
                        let una = self.swin.una();
                        let restart = self.mode() == Retransmission::GoBack0
                            && self
                                .sq
                                .iter()
                                .any(|w| w.contains(una) && w.first_psn == psn);
                        if restart {
                            self.cc.on_loss(now);
                            self.swin.rewind(psn);
                            self.swin.restart_timer(now);
                        } else {
                            self.counters.unexpected += 1;
                        }
                    }
                    Retransmission::GoBack0 | Retransmission::GoBackN => {
                        self.cc.on_loss(now);
                        self.ack_requests(now, psn);
                        self.swin.go_back(psn);
                    }
                    Retransmission::SelectiveRepeat | Retransmission::SelectiveRepeatNoSack => {
                        self.cc.on_loss(now);
                        self.ack_requests(now, psn);
                        if let Some(s) = sack {
                            self.swin.sack(now, s);
                        }
                        self.swin.enter_recovery(false);
                    }
                }
            }
            Syndrome::RnrNak(timer) => {
                self.counters.rnr_naks_received += 1;
                if !self.swin.outstanding(psn) {
                    self.counters.unexpected += 1;
                    return;
                }
                self.ack_requests(now, psn);
                self.rnr_retries += 1;
                // rnr_retry 7 means "retry forever" (IBTA §9.7.5.2.8).
                if self.attr.rnr_retry < 7 && self.rnr_retries > u32::from(self.attr.rnr_retry) {
                    self.fail_send(Some(psn), WcStatus::RnrRetryExcErr);
                    return;
                }
                self.rnr_psn = psn;
                self.rnr_until = Some(now + Dur::from_micros(u64::from(timer.micros())));
                self.swin.peer_alive(now);
            }
            Syndrome::Nak(code) => {
                self.counters.nacks_received += 1;
                let status = match code {
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    _ => WcStatus::RemInvReqErr,
                };
                if self.swin.outstanding(psn) {
                    self.ack_requests(now, psn);
                } else if !self
                    .sq
                    .iter()
                    .any(|w| w.contains(psn) && w.needs_response() && !w.done())
                {
                    // Neither outstanding nor a Read still waiting for its responses (an IRN
                    // responder fails a Read it already acknowledged this way).
                    self.counters.unexpected += 1;
                    return;
                }
                self.fail_send(Some(psn), status);
            }
            Syndrome::Reserved(_) => self.counters.dropped_invalid += 1,
        }
    }

    /// ECN echo accounting of a standard ACK or NAK (SPEC T9): an ACK stands for the `bytes`
    /// it newly acknowledged, and its echo for the one marked packet that triggered it (a
    /// controller that reads echoes has every packet ACKed); an echo on a NAK or on an ACK
    /// that acknowledges nothing new, for one marked packet.
    fn echo_standard(&mut self, now: Time, echo: bool, bytes: u64) {
        let unit = u64::from(self.mtu());
        if bytes > 0 {
            self.cc
                .on_ecn_echo(now, if echo { bytes.min(unit) } else { 0 }, bytes);
        } else if echo {
            self.cc.on_ecn_echo(now, unit, unit);
        }
    }

    /// Cumulative acknowledgement of every request PSN before `cum`; returns the bytes newly
    /// acknowledged.
    fn ack_requests(&mut self, now: Time, mut cum: Psn) -> u64 {
        if !self.irn_wire() {
            // Standard RoCE: an ACK beyond a Read whose responses are missing implies they were
            // lost (IBTA §9.7.5.1.2, implied NAK): resend the Read from the missing response.
            if let Some(w) = self
                .sq
                .iter()
                .find(|w| w.started && w.needs_response() && w.resp_rcvd < w.npkts)
            {
                let expected = w.first_psn.add(w.resp_rcvd);
                if expected.distance(cum) > 0 {
                    cum = expected;
                    if self.read_gap != Some(expected) && self.swin.outstanding(expected) {
                        self.read_gap = Some(expected);
                        self.swin.ack(now, expected);
                        self.swin.go_back(expected);
                    }
                }
            }
        }
        let acked = self.swin.ack(now, cum);
        let bytes = u64::from(acked.psns) * u64::from(self.mtu());
        if acked.psns > 0 {
            self.rnr_retries = 0;
            self.cc.on_ack(now, bytes, acked.rtt);
        }
        let una = self.swin.una();
        for w in self.sq.iter_mut() {
            if !w.started {
                break;
            }
            if w.last_psn().distance(una) > 0 {
                w.acked = true;
            } else {
                break;
            }
        }
        bytes
    }

    /// A Read response or atomic acknowledgement.
    fn handle_response<M: Memory>(&mut self, now: Time, ib: &IbRepr, payload: &[u8], mem: &mut M) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.counters.dropped_state += 1;
            return;
        }
        let op = ib.bth.opcode;
        let is_atomic_ack = op == Opcode::RC_ATOMIC_ACKNOWLEDGE;
        let is_read_resp = matches!(
            op,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST
                | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                | Opcode::RC_RDMA_READ_RESPONSE_LAST
                | Opcode::RC_RDMA_READ_RESPONSE_ONLY
        );
        if !is_atomic_ack && !is_read_resp {
            self.counters.dropped_invalid += 1;
            return;
        }
        if self.irn_wire() {
            self.handle_response_irn(now, ib, payload, mem, is_atomic_ack);
        } else {
            self.handle_response_standard(now, ib, payload, mem, is_atomic_ack);
        }
    }

    fn handle_response_standard<M: Memory>(
        &mut self,
        now: Time,
        ib: &IbRepr,
        payload: &[u8],
        mem: &mut M,
        is_atomic_ack: bool,
    ) {
        let psn = ib.bth.psn;
        let Some(idx) = self
            .sq
            .iter()
            .position(|w| w.started && w.needs_response() && w.resp_rcvd < w.npkts)
        else {
            self.counters.unexpected += 1;
            return;
        };
        let expected = self.sq[idx].first_psn.add(self.sq[idx].resp_rcvd);
        let d = expected.distance(psn);
        if d < 0 {
            self.counters.duplicates += 1;
            return;
        }
        if d > 0 {
            self.counters.out_of_order += 1;
            if self.sq[idx].contains(psn) && self.read_gap != Some(expected) {
                // A response is missing: ask again from it (go-back-N on the Read).
                self.read_gap = Some(expected);
                self.swin.ack(now, expected);
                self.swin.go_back(expected);
            }
            return;
        }
        if let Err(status) = self.accept_response(idx, ib, payload, mem, is_atomic_ack) {
            self.fail_send(Some(psn), status);
            return;
        }
        self.sq[idx].resp_rcvd += 1;
        self.read_gap = None;
        // A response acknowledges every request PSN up to its own.
        self.ack_requests(now, psn.add(1));
    }

    /// Places one in-order (standard) or in-window (IRN) response for WQE `idx`; returns the
    /// completion status if the response is unacceptable.
    fn accept_response<M: Memory>(
        &mut self,
        idx: usize,
        ib: &IbRepr,
        payload: &[u8],
        mem: &mut M,
        is_atomic_ack: bool,
    ) -> Result<(), WcStatus> {
        let mtu = self.mtu();
        let psn = ib.bth.psn;
        let w = &self.sq[idx];
        let k = if self.irn_wire() {
            w.rpsn.distance(psn).max(0) as u32
        } else {
            w.first_psn.distance(psn).max(0) as u32
        };
        if w.wr.op.is_atomic() != is_atomic_ack {
            return Err(WcStatus::BadRespErr);
        }
        if is_atomic_ack {
            let orig = ib.atomic_ack_eth.map_or(0, |a| a.orig);
            let sge = w.wr.sg_list[0];
            if M::HOLDS_BYTES {
                mem.write(Key::Local(sge.lkey), sge.addr, &orig.to_ne_bytes())
                    .map_err(|_| WcStatus::LocProtErr)?;
            }
            return Ok(());
        }
        let last = k + 1 == w.npkts;
        let op = ib.bth.opcode;
        let op_last = matches!(
            op,
            Opcode::RC_RDMA_READ_RESPONSE_LAST | Opcode::RC_RDMA_READ_RESPONSE_ONLY
        );
        let off = u64::from(k) * u64::from(mtu);
        let want = if last {
            w.len - off.min(w.len)
        } else {
            u64::from(mtu)
        };
        if op_last != last || ib.payload_len as u64 != want {
            return Err(WcStatus::BadRespErr);
        }
        if M::HOLDS_BYTES {
            let sg = w.wr.sg_list.clone();
            scatter(mem, &sg, off, payload).map_err(|_| WcStatus::LocProtErr)?;
        }
        Ok(())
    }

    fn handle_response_irn<M: Memory>(
        &mut self,
        now: Time,
        ib: &IbRepr,
        payload: &[u8],
        mem: &mut M,
        is_atomic_ack: bool,
    ) {
        let psn = ib.bth.psn;
        match self.rrecv.classify(psn) {
            Arrival::Duplicate => {
                self.counters.duplicates += 1;
                self.queue_read_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn));
            }
            Arrival::OutOfOrder => {
                self.counters.out_of_order += 1;
                if !self.rrecv.nak_sent {
                    self.rrecv.nak_sent = true;
                    // Discarded: no SACK for it.
                    self.queue_read_ack(Syndrome::Nak(NakCode::PsnSequenceError), None);
                }
            }
            a @ (Arrival::Expected | Arrival::Ahead(_)) => {
                let Some(idx) = self.sq.iter().position(|w| {
                    let d = w.rpsn.distance(psn);
                    w.started && w.needs_response() && d >= 0 && (d as u32) < w.npkts
                }) else {
                    self.counters.unexpected += 1;
                    return;
                };
                if let Err(status) = self.accept_response(idx, ib, payload, mem, is_atomic_ack) {
                    self.fail_send(self.sq.get(idx).map(|w| w.first_psn), status);
                    return;
                }
                self.rrecv.accept(psn, 1, None);
                let mut advanced = 0;
                while self.rrecv.pop_ready().is_some() {
                    advanced += 1;
                }
                if advanced > 0 {
                    self.credit_responses();
                    // Responses moving in order are progress of the requester's outstanding
                    // Reads: the local ACK timeout measures time without a response, so it
                    // restarts and the retry count resets, as an ACK would (IBTA §9.7.6.1.3).
                    // Without this, a long Read whose responses recover slowly through IRN's
                    // read NACKs exhausts `retry_cnt` while data is still arriving.
                    self.swin.progress(now);
                }
                if matches!(a, Arrival::Ahead(_)) {
                    self.counters.out_of_order += 1;
                    self.queue_read_ack(Syndrome::Nak(NakCode::PsnSequenceError), Some(psn));
                } else {
                    self.queue_read_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn));
                }
            }
        }
    }

    /// IRN: counts in-order responses against their WQEs after the rPSN cumulative point moved.
    fn credit_responses(&mut self) {
        let e = self.rrecv.epsn();
        for w in self.sq.iter_mut() {
            if !w.started || !w.needs_response() {
                continue;
            }
            let d = w.rpsn.distance(e);
            if d <= 0 {
                break;
            }
            w.resp_rcvd = (d as u32).min(w.npkts);
        }
    }

    fn queue_read_ack(&mut self, syndrome: Syndrome, sack: Option<Psn>) {
        let (psn, is_nak) = match syndrome {
            Syndrome::Nak(_) => (self.rrecv.epsn(), true),
            _ => (self.rrecv.epsn().sub(1), false),
        };
        if is_nak {
            self.counters.nacks_sent += 1;
        } else {
            self.counters.acks_sent += 1;
        }
        self.ctrl.push_back(Ctrl::ReadAck {
            psn,
            syndrome,
            sack,
        });
    }

    // ---- responder: read (N)ACKs in the rPSN space ------------------------------------------

    fn handle_read_ack(&mut self, now: Time, ib: &IbRepr) {
        let Some(aeth) = ib.aeth else {
            self.counters.dropped_invalid += 1;
            return;
        };
        let psn = ib.bth.psn;
        let sack = ib.irn.and_then(|i| i.sack_psn);
        match aeth.syndrome {
            Syndrome::Ack(_) => {
                self.rsp_win.ack(now, psn.add(1));
                if let Some(s) = sack {
                    self.rsp_win.sack(now, s);
                }
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.counters.nacks_received += 1;
                self.rsp_win.ack(now, psn);
                match self.mode() {
                    Retransmission::GoBackN | Retransmission::GoBack0 => self.rsp_win.go_back(psn),
                    _ => {
                        if let Some(s) = sack {
                            self.rsp_win.sack(now, s);
                        }
                        self.rsp_win.enter_recovery(false);
                    }
                }
            }
            _ => {
                self.counters.dropped_invalid += 1;
                return;
            }
        }
        // Responses entirely acknowledged are forgotten.
        let una = self.rsp_win.una();
        while let Some(e) = self.rsp_q.front() {
            if self.rsp_tx_idx == 0 {
                break;
            }
            if e.rpsn.add(e.npkts).distance(una) >= 0 {
                self.rsp_q.pop_front();
                self.rsp_tx_idx -= 1;
            } else {
                break;
            }
        }
    }

    // ---- responder: requests ----------------------------------------------------------------

    fn handle_request<M: Memory>(
        &mut self,
        now: Time,
        ib: &IbRepr,
        payload: &[u8],
        ce: bool,
        mem: &mut M,
    ) {
        let psn = ib.bth.psn;
        let irn = self.irn_wire();
        match self.rwin.classify(psn) {
            Arrival::Duplicate => {
                self.counters.duplicates += 1;
                if irn {
                    // Responses travel in their own space with their own timer; re-ACK.
                    self.queue_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn), ce);
                } else {
                    self.duplicate_standard(ib);
                }
            }
            Arrival::OutOfOrder => {
                self.counters.out_of_order += 1;
                if self.mode() == Retransmission::GoBack0 {
                    // Go-back-0 (T3): the partial message is discarded; the requester must
                    // start it again from its first packet.
                    if let Some(inb) = self.inbound.take() {
                        self.rwin.set_epsn(inb.first_psn);
                        if let Some(sn) = inb.recv_sn {
                            self.rq_claim_sn = sn;
                        }
                    }
                }
                if !self.rwin.nak_sent {
                    self.rwin.nak_sent = true;
                    self.queue_nak_seq(ce);
                }
            }
            a @ (Arrival::Expected | Arrival::Ahead(_)) => {
                let ahead = matches!(a, Arrival::Ahead(_));
                if ahead {
                    self.counters.out_of_order += 1;
                }
                let action = match self.place_request(ib, payload, mem) {
                    Ok(a) => a,
                    Err(Refused::Rnr) if ahead => {
                        // An RNR NAK names a PSN and acknowledges everything before it, which
                        // has not all arrived: refuse the packet without a SACK instead, and
                        // let it be resent (a NACK for the expected PSN).
                        self.counters.nacks_sent += 1;
                        let e = self.rwin.epsn();
                        self.ctrl.push_back(Ctrl::Ack {
                            psn: e,
                            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                            msn: self.msn,
                            sack: None,
                            becn: ce,
                        });
                        return;
                    }
                    Err(Refused::Rnr) => {
                        self.counters.rnr_naks_sent += 1;
                        let timer = RnrTimer(self.attr.min_rnr_timer);
                        if irn {
                            self.ctrl.push_back(Ctrl::Ack {
                                psn,
                                syndrome: Syndrome::RnrNak(timer),
                                msn: self.msn,
                                sack: None,
                                becn: ce,
                            });
                        } else {
                            self.push_resp_ack(psn, Syndrome::RnrNak(timer), ce);
                        }
                        return;
                    }
                    Err(Refused::Fatal(nak, recv)) => Some(ReqAction::Fatal { nak, recv }),
                };
                if let Some(ReqAction::Read { npsn, .. }) = action {
                    if !irn && npsn > 1 {
                        // A standard Read takes ⌈len / MTU⌉ PSNs (validated to fit the PSN
                        // window): run it and step the expected PSN over them in one go.
                        if let Some(a) = action {
                            self.run_action(now, psn, a, mem);
                        }
                        self.rwin.set_epsn(psn.add(npsn));
                        self.rwin.nak_sent = false;
                        return;
                    }
                }
                self.rwin.accept(psn, 1, action);
                while let Some((p, action)) = self.rwin.pop_ready() {
                    if let Some(a) = action {
                        self.run_action(now, p, a, mem);
                        if self.state == QpState::Err {
                            return;
                        }
                    }
                }
                if irn {
                    if ahead {
                        self.counters.nacks_sent += 1;
                        let e = self.rwin.epsn();
                        self.ctrl.push_back(Ctrl::Ack {
                            psn: e,
                            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                            msn: self.msn,
                            sack: Some(psn),
                            becn: ce,
                        });
                    } else {
                        self.queue_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn), ce);
                    }
                } else if ib.bth.ack_req && !is_read_or_atomic_request(ib.bth.opcode) {
                    // The ACK echoes this packet's mark (BECN): a controller that reads echoes
                    // asks for an ACK on every packet (Controller::ack_interval_bytes).
                    let e = self.rwin.epsn().sub(1);
                    self.push_resp_ack(e, Syndrome::Ack(CreditCode::INVALID), ce);
                }
            }
        }
    }

    /// Standard RoCE duplicate handling (IBTA §9.7.5.1.1): re-ACK a Send or Write, answer a
    /// Read or atomic again from the saved state, never executing it twice.
    fn duplicate_standard(&mut self, ib: &IbRepr) {
        let psn = ib.bth.psn;
        let op = ib.bth.opcode;
        if op == Opcode::RC_RDMA_READ_REQUEST {
            let found = self.saved.iter().rev().find(|s| {
                let d = s.psn.distance(psn);
                matches!(s.kind, SavedKind::Read { .. }) && d >= 0 && (d as u32) < s.npsn
            });
            if let Some(&SavedRd {
                psn: first,
                msn,
                kind: SavedKind::Read { va, rkey, len },
                ..
            }) = found
            {
                let k = u64::from(first.distance(psn) as u32) * u64::from(self.mtu());
                // One replay per Read (as rxe restarts its read resource): a newer duplicate
                // supersedes responses of the same Read still queued.
                let npsn = packets(len, self.mtu());
                self.resp.retain(|j| match j {
                    RespJob::Read { psn: jp, .. } => {
                        let d = first.distance(*jp);
                        !(d >= 0 && (d as u32) < npsn)
                    }
                    _ => true,
                });
                self.resp.push_back(RespJob::Read {
                    psn,
                    va: va + k,
                    rkey,
                    len: len - k.min(len),
                    done: 0,
                    msn,
                });
            } else {
                self.counters.unexpected += 1;
            }
            return;
        }
        if matches!(op, Opcode::RC_COMPARE_SWAP | Opcode::RC_FETCH_ADD) {
            let found = self
                .saved
                .iter()
                .rev()
                .find(|s| s.psn == psn && matches!(s.kind, SavedKind::Atomic { .. }));
            if let Some(&SavedRd {
                msn,
                kind: SavedKind::Atomic { orig },
                ..
            }) = found
            {
                self.resp.push_back(RespJob::Atomic { psn, orig, msn });
            } else {
                self.counters.unexpected += 1;
            }
            return;
        }
        let e = self.rwin.epsn().sub(1);
        self.push_resp_ack(e, Syndrome::Ack(CreditCode::INVALID), false);
    }

    /// A sequence-error NAK for a discarded packet: the expected PSN, no SACK (the packet
    /// did not stay).
    fn queue_nak_seq(&mut self, ce: bool) {
        self.counters.nacks_sent += 1;
        let e = self.rwin.epsn();
        if self.irn_wire() {
            self.ctrl.push_back(Ctrl::Ack {
                psn: e,
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: self.msn,
                sack: None,
                becn: ce,
            });
        } else {
            self.push_resp_ack(e, Syndrome::Nak(NakCode::PsnSequenceError), ce);
        }
    }

    /// An IRN ACK: cumulative (last in-order PSN) with the PSN that triggered it.
    fn queue_ack(&mut self, syndrome: Syndrome, sack: Option<Psn>, becn: bool) {
        self.counters.acks_sent += 1;
        let psn = self.rwin.epsn().sub(1);
        // Consecutive plain ACKs coalesce: the newest says everything the older ones did.
        if let Some(Ctrl::Ack {
            syndrome: Syndrome::Ack(_),
            becn: b,
            ..
        }) = self.ctrl.back()
        {
            if !*b && !becn {
                self.ctrl.pop_back();
            }
        }
        self.ctrl.push_back(Ctrl::Ack {
            psn,
            syndrome,
            msn: self.msn,
            sack,
            becn,
        });
    }

    /// A standard ACK or NAK, in order with the Read responses. A plain ACK still queued is
    /// replaced by a newer one (which says everything it did), unless it carries an ECN echo
    /// (each echo stands for one marked packet).
    fn push_resp_ack(&mut self, psn: Psn, syndrome: Syndrome, becn: bool) {
        if syndrome.is_ack() {
            self.counters.acks_sent += 1;
            if let Some(RespJob::Ack {
                syndrome: Syndrome::Ack(_),
                becn: false,
                ..
            }) = self.resp.back()
            {
                self.resp.pop_back();
            }
        }
        self.resp.push_back(RespJob::Ack {
            psn,
            syndrome,
            msn: self.msn,
            becn,
        });
    }

    /// Checks one request packet and places its data (directly at its final address, IRN
    /// §5.3); returns what must happen once every earlier PSN has arrived.
    fn place_request<M: Memory>(
        &mut self,
        ib: &IbRepr,
        payload: &[u8],
        mem: &mut M,
    ) -> Result<Option<ReqAction>, Refused> {
        let op = ib.bth.opcode;
        let mtu = self.mtu();
        let irn = self.irn_wire();
        let psn = ib.bth.psn;
        let plen = ib.payload_len as u64;
        let (first, last) = (op.is_first(), op.is_last());
        if plen > u64::from(mtu) || (!last && plen != u64::from(mtu)) {
            return Err(Refused::Fatal(NakCode::InvalidRequest, None));
        }
        let kind = op.operation();
        let is_send = matches!(kind, 0x00..=0x05 | 0x16 | 0x17);
        let is_write = matches!(kind, 0x06..=0x0b);
        // Standard RoCE checks the opcode sequence (IBTA §9.7.4.1.4): a message in progress
        // continues with MIDDLE/LAST of its kind, and nothing else continues one.
        if !irn {
            let ok = match &self.inbound {
                Some(inb) => {
                    !first
                        && ((is_send && inb.write.is_none()) || (is_write && inb.write.is_some()))
                }
                None => first,
            };
            if !ok {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
            }
        }
        if is_send {
            let (sn, off) = if irn {
                let i = ib.irn.unwrap_or_default();
                match (i.wqe_sn, i.psn_offset) {
                    (Some(sn), Some(off)) => (sn, off),
                    _ => return Err(Refused::Fatal(NakCode::InvalidRequest, None)),
                }
            } else {
                match &self.inbound {
                    Some(inb) => (
                        inb.recv_sn.unwrap_or(self.rq_claim_sn),
                        inb.first_psn.distance(psn).max(0) as u32,
                    ),
                    None => (self.rq_claim_sn, 0),
                }
            };
            if first != (off == 0) {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
            }
            let Some(rwqe) = self.recv_wqe(sn) else {
                return Err(Refused::Rnr);
            };
            let sg = rwqe.wr.sg_list.clone();
            let cap = rwqe.len;
            let at = u64::from(off) * u64::from(mtu);
            if at + plen > cap {
                return Err(Refused::Fatal(
                    NakCode::InvalidRequest,
                    Some((sn, WcStatus::LocLenErr)),
                ));
            }
            if let Err(e) = place_local(mem, &sg, at, plen, payload) {
                let _ = e;
                return Err(Refused::Fatal(
                    NakCode::RemoteOperationalError,
                    Some((sn, WcStatus::LocProtErr)),
                ));
            }
            if !irn {
                if first {
                    self.rq_claim_sn = sn.wrapping_add(1);
                }
                self.inbound = (!last).then_some(Inbound {
                    first_psn: if first {
                        psn
                    } else {
                        self.inbound.map_or(psn, |i| i.first_psn)
                    },
                    write: None,
                    recv_sn: Some(sn),
                });
            }
            if last {
                // Send with Invalidate (IBTA §9.4.1.2): the key is revoked when the message
                // completes, in PSN order (an earlier Write may still need it).
                let inv = ib.ieth;
                return Ok(Some(ReqAction::MsgEnd {
                    recv: Some(RecvDone {
                        sn,
                        byte_len: at + plen,
                        imm: ib.imm,
                        inv,
                        write_imm: false,
                    }),
                }));
            }
            return Ok(None);
        }
        if is_write {
            if !self.attr.access.allows(Access::REMOTE_WRITE) {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
            }
            let (reth, off) = if irn {
                match (ib.reth, ib.irn.and_then(|i| i.psn_offset)) {
                    (Some(r), Some(off)) => (r, off),
                    _ => return Err(Refused::Fatal(NakCode::InvalidRequest, None)),
                }
            } else if first {
                match ib.reth {
                    Some(r) => (r, 0),
                    None => return Err(Refused::Fatal(NakCode::InvalidRequest, None)),
                }
            } else {
                match self.inbound.and_then(|i| i.write.map(|w| (w, i.first_psn))) {
                    Some((r, fp)) => (r, fp.distance(psn).max(0) as u32),
                    None => return Err(Refused::Fatal(NakCode::InvalidRequest, None)),
                }
            };
            if first != (off == 0) {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
            }
            let total = u64::from(reth.dma_len);
            let at = u64::from(off) * u64::from(mtu);
            if at + plen > total || (last && at + plen != total) {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
            }
            if mem
                .check(Key::Remote(reth.rkey), reth.va, total, Access::REMOTE_WRITE)
                .is_err()
            {
                return Err(Refused::Fatal(NakCode::RemoteAccessError, None));
            }
            if M::HOLDS_BYTES && plen > 0 {
                if let Err(_e) = mem.write(Key::Remote(reth.rkey), reth.va + at, payload) {
                    return Err(Refused::Fatal(NakCode::RemoteAccessError, None));
                }
            }
            let with_imm = matches!(kind, 0x09 | 0x0b);
            let mut recv = None;
            if last && with_imm {
                let sn = if irn {
                    match ib.irn.and_then(|i| i.wqe_sn) {
                        Some(sn) => sn,
                        None => return Err(Refused::Fatal(NakCode::InvalidRequest, None)),
                    }
                } else {
                    self.rq_claim_sn
                };
                if self.recv_wqe(sn).is_none() {
                    return Err(Refused::Rnr);
                }
                if !irn {
                    self.rq_claim_sn = sn.wrapping_add(1);
                }
                recv = Some(RecvDone {
                    sn,
                    byte_len: total,
                    imm: ib.imm,
                    inv: None,
                    write_imm: true,
                });
            }
            if !irn {
                self.inbound = (!last).then_some(Inbound {
                    first_psn: if first {
                        psn
                    } else {
                        self.inbound.map_or(psn, |i| i.first_psn)
                    },
                    write: Some(reth),
                    recv_sn: None,
                });
            }
            return Ok(last.then_some(ReqAction::MsgEnd { recv }));
        }
        match op {
            Opcode::RC_RDMA_READ_REQUEST => {
                let Some(reth) = ib.reth else {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                };
                if !self.attr.access.allows(Access::REMOTE_READ) {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                let len = u64::from(reth.dma_len);
                // Standard RoCE: its responses use as many PSNs, which must stay within the
                // PSN window (IBTA §9.7.1).
                if len > MAX_MESSAGE || (!irn && packets(len, mtu) >= Psn::HALF / 2) {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                if mem
                    .check(Key::Remote(reth.rkey), reth.va, len, Access::REMOTE_READ)
                    .is_err()
                {
                    return Err(Refused::Fatal(NakCode::RemoteAccessError, None));
                }
                if self.pending_reads() >= self.read_capacity() {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                Ok(Some(ReqAction::Read {
                    va: reth.va,
                    rkey: reth.rkey,
                    len,
                    npsn: packets(len, mtu),
                }))
            }
            Opcode::RC_COMPARE_SWAP | Opcode::RC_FETCH_ADD => {
                let Some(a) = ib.atomic_eth else {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                };
                if !self.attr.access.allows(Access::REMOTE_ATOMIC) {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                // A misaligned atomic is an invalid request (IBTA §9.4.5, C9-...; rxe agrees).
                if a.va % 8 != 0 {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                if mem
                    .check(Key::Remote(a.rkey), a.va, 8, Access::REMOTE_ATOMIC)
                    .is_err()
                {
                    return Err(Refused::Fatal(NakCode::RemoteAccessError, None));
                }
                if self.pending_reads() >= self.read_capacity() {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                let op = if op == Opcode::RC_COMPARE_SWAP {
                    AtomicOp::CompareSwap {
                        compare: a.compare,
                        swap: a.swap_add,
                    }
                } else {
                    AtomicOp::FetchAdd { add: a.swap_add }
                };
                Ok(Some(ReqAction::Atomic {
                    va: a.va,
                    rkey: a.rkey,
                    op,
                }))
            }
            _ => Err(Refused::Fatal(NakCode::InvalidRequest, None)),
        }
    }

    /// Responses the responder still owes or keeps for retransmission.
    fn pending_reads(&self) -> usize {
        if self.irn_wire() {
            self.rsp_q.len()
        } else {
            self.resp
                .iter()
                .filter(|j| !matches!(j, RespJob::Ack { .. }))
                .count()
        }
    }

    /// How many Reads and atomics the responder holds at once: `max_dest_rd_atomic`, with
    /// room for the requester counting a Read done before its last read ACK reaches us.
    fn read_capacity(&self) -> usize {
        usize::from(self.attr.max_dest_rd_atomic.max(1)) * 2 + 16
    }

    fn recv_wqe(&self, sn: u32) -> Option<&RecvWqe> {
        let head = self.rq.front()?.sn;
        let i = sn.wrapping_sub(head) as usize;
        self.rq.get(i).filter(|r| r.sn == sn)
    }

    fn run_action<M: Memory>(&mut self, now: Time, psn: Psn, action: ReqAction, mem: &mut M) {
        let _ = now;
        match action {
            ReqAction::MsgEnd { recv } => {
                self.msn = (self.msn + 1) & Psn::MASK;
                if let Some(r) = recv {
                    if let Some(rkey) = r.inv {
                        let _ = mem.invalidate(rkey);
                    }
                    self.complete_recv(r, WcStatus::Success);
                }
            }
            ReqAction::Read {
                va,
                rkey,
                len,
                npsn,
            } => {
                self.msn = (self.msn + 1) & Psn::MASK;
                let msn = self.msn;
                if self.irn_wire() {
                    let rpsn = self.rsp_win_next_assign();
                    self.rsp_q.push_back(RspEntry {
                        req_psn: psn,
                        rpsn,
                        npkts: packets(len, self.mtu()),
                        kind: SavedKind::Read { va, rkey, len },
                        msn,
                    });
                } else {
                    self.save(SavedRd {
                        psn,
                        npsn,
                        msn,
                        kind: SavedKind::Read { va, rkey, len },
                    });
                    self.resp.push_back(RespJob::Read {
                        psn,
                        va,
                        rkey,
                        len,
                        done: 0,
                        msn,
                    });
                }
            }
            ReqAction::Atomic { va, rkey, op } => {
                let orig = match mem.atomic(rkey, va, op) {
                    Ok(v) => v,
                    Err(MemError::Misaligned) => {
                        return self.responder_fatal(psn, NakCode::InvalidRequest, None)
                    }
                    Err(_) => return self.responder_fatal(psn, NakCode::RemoteAccessError, None),
                };
                self.msn = (self.msn + 1) & Psn::MASK;
                let msn = self.msn;
                if self.irn_wire() {
                    let rpsn = self.rsp_win_next_assign();
                    self.rsp_q.push_back(RspEntry {
                        req_psn: psn,
                        rpsn,
                        npkts: 1,
                        kind: SavedKind::Atomic { orig },
                        msn,
                    });
                } else {
                    self.save(SavedRd {
                        psn,
                        npsn: 1,
                        msn,
                        kind: SavedKind::Atomic { orig },
                    });
                    self.resp.push_back(RespJob::Atomic { psn, orig, msn });
                }
            }
            ReqAction::Fatal { nak, recv } => self.responder_fatal(psn, nak, recv),
        }
    }

    /// The rPSN the next response entry starts at.
    fn rsp_win_next_assign(&self) -> Psn {
        match self.rsp_q.back() {
            Some(e) => e.rpsn.add(e.npkts),
            None => self.rsp_win.next(),
        }
    }

    fn save(&mut self, s: SavedRd) {
        let cap = usize::from(self.attr.max_dest_rd_atomic.max(1)).max(16);
        while self.saved.len() >= cap {
            self.saved.pop_front();
        }
        self.saved.push_back(s);
    }

    /// A request the responder cannot execute: NAK it (IBTA §9.7.5.2) and enter the error state
    /// (class C/D errors end an RC connection).
    fn responder_fatal(&mut self, psn: Psn, nak: NakCode, recv: Option<(u32, WcStatus)>) {
        self.counters.error_naks_sent += 1;
        if let Some((sn, status)) = recv {
            if let Some(r) = self.recv_wqe(sn).map(|r| (r.sn, r.wr.wr_id)) {
                let _ = r;
                self.complete_recv(
                    RecvDone {
                        sn,
                        byte_len: 0,
                        imm: None,
                        inv: None,
                        write_imm: false,
                    },
                    status,
                );
            }
        }
        if self.irn_wire() {
            self.ctrl.push_back(Ctrl::Ack {
                psn,
                syndrome: Syndrome::Nak(nak),
                msn: self.msn,
                sack: None,
                becn: false,
            });
        } else {
            self.resp.push_back(RespJob::Ack {
                psn,
                syndrome: Syndrome::Nak(nak),
                msn: self.msn,
                becn: false,
            });
        }
        self.enter_error();
    }

    /// Completes the receive WQE `sn`, which is at the head of the receive queue: messages
    /// complete in PSN order and consume receive WQEs in posting order.
    fn complete_recv(&mut self, r: RecvDone, status: WcStatus) {
        let Some(front) = self.rq.front() else {
            return;
        };
        if front.sn != r.sn {
            // Cannot happen with a well-behaved peer; a hostile one gets nothing.
            self.counters.unexpected += 1;
            return;
        }
        let Some(w) = self.rq.pop_front() else {
            return;
        };
        self.completions.push_back(Completion {
            wr_id: w.wr.wr_id,
            status,
            opcode: if r.write_imm {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            },
            byte_len: u32::try_from(r.byte_len).unwrap_or(u32::MAX),
            imm: r.imm,
            invalidated_rkey: r.inv,
            qp_num: self.cfg.qpn,
        });
    }

    // -----------------------------------------------------------------------------------------
    // Sending

    /// The next packet to send, or `None`. When the memory holds bytes, the payload is written
    /// into `payload` (cleared first); otherwise `payload` stays empty and only
    /// `ib.payload_len` says how long the payload is.
    ///
    /// Order: control packets (ACKs, NACKs, read ACKs, CNPs), then responses, then requests;
    /// data packets only when the congestion controller's pacing allows.
    pub fn poll_transmit<M: Memory>(
        &mut self,
        now: Time,
        mem: &M,
        payload: &mut Vec<u8>,
    ) -> Option<Transmit> {
        payload.clear();
        if self.pacing_until <= now {
            self.pacing_until = Time::ZERO;
        }
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return None;
        }
        if let Some(c) = self.ctrl.pop_front() {
            let t = self.build_ctrl(c, payload, M::HOLDS_BYTES);
            self.count_tx(&t);
            return Some(t);
        }
        if self.state == QpState::Err {
            // Only the ACK/NAKs decided before the error go out.
            while let Some(j) = self.resp.pop_front() {
                if let RespJob::Ack {
                    psn,
                    syndrome,
                    msn,
                    becn,
                } = j
                {
                    let t = self.build_ack(Opcode::RC_ACKNOWLEDGE, psn, syndrome, msn, None, becn);
                    self.count_tx(&t);
                    return Some(t);
                }
            }
            return None;
        }
        if self.pacing_until > now {
            // Acknowledgements are not paced; data waits.
            if let Some(RespJob::Ack { .. }) = self.resp.front() {
            } else {
                return None;
            }
        }
        let Some(t) = self
            .next_response(now, mem, payload)
            .or_else(|| self.next_request(now, mem, payload))
        else {
            // A fault found while building a packet queued a NAK and ended the connection:
            // send that NAK now.
            return if self.state == QpState::Err {
                self.poll_transmit(now, mem, payload)
            } else {
                None
            };
        };
        self.count_tx(&t);
        if t.ib.payload_len > 0 || t.ib.bth.opcode.is_request() {
            let bytes = (t.ib.buffer_len() + 4 + 8 + 20) as u64;
            self.cc.on_send(now, bytes);
            if let Some(rate) = self.cc.rate_bps() {
                let start = self.pacing_until.max(now);
                self.pacing_until = start + Dur::transmission(bytes, rate);
            }
        }
        Some(t)
    }

    /// Like [`poll_transmit`](QueuePair::poll_transmit) but returns only control packets:
    /// ACKs, NAKs, read (N)ACKs and CNPs, never data. A driver whose data priority is paused
    /// (PFC) while control packets travel at another priority calls this instead, so that
    /// acknowledgements are not held behind paused data. No congestion-control hook runs: control
    /// packets are neither paced nor counted as data.
    pub fn poll_control<M: Memory>(&mut self, _mem: &M, payload: &mut Vec<u8>) -> Option<Transmit> {
        payload.clear();
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return None;
        }
        let t = if let Some(c) = self.ctrl.pop_front() {
            self.build_ctrl(c, payload, M::HOLDS_BYTES)
        } else if let Some(&RespJob::Ack {
            psn,
            syndrome,
            msn,
            becn,
        }) = self.resp.front()
        {
            self.resp.pop_front();
            self.build_ack(Opcode::RC_ACKNOWLEDGE, psn, syndrome, msn, None, becn)
        } else {
            return None;
        };
        self.count_tx(&t);
        Some(t)
    }

    /// Whether a control packet (see [`poll_control`](QueuePair::poll_control)) is waiting.
    pub fn has_control(&self) -> bool {
        !self.ctrl.is_empty() || matches!(self.resp.front(), Some(RespJob::Ack { .. }))
    }

    /// Whether [`poll_transmit`](QueuePair::poll_transmit) may have a packet for the driver,
    /// now or once pacing allows. `false` only when it certainly has none until the queue
    /// pair is next handed an input — a packet, a timeout, a work request or a `modify`: no
    /// control packet or response waits, and no request either, or only new packets that
    /// the BDP cap or the congestion window holds back (an acknowledgement, an input, opens
    /// those). A NIC that keeps a list of the queue pairs with something to send leaves the
    /// others out of it, and does not wake up for them when its link frees. `true` is not a
    /// promise: a fence, Read credit or pacing can still hold the next packet back.
    pub fn may_transmit(&self) -> bool {
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return false;
        }
        if !self.ctrl.is_empty() || !self.resp.is_empty() {
            return true;
        }
        if self.state == QpState::Err {
            return false;
        }
        // IRN's Read responder sends from its own window (T7), in RTR as well.
        if self.irn_wire() && (self.rsp_win.in_recovery() || self.rsp_may_send_new()) {
            return true;
        }
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.rnr_until.is_some() {
            return false;
        }
        if self.swin.in_recovery() {
            return true;
        }
        if self.state == QpState::Sqd && self.tx_off == 0 {
            return false;
        }
        self.tx_idx < self.sq.len()
            && self.swin.may_send_new(self.cfg.recovery.bdp_cap)
            && self.cc_window_open()
    }

    /// Whether the congestion controller's window (if it has one) admits another packet.
    fn cc_window_open(&self) -> bool {
        self.cc
            .window()
            .is_none_or(|win| u64::from(self.swin.in_flight()) * u64::from(self.mtu()) < win)
    }

    /// Whether IRN's Read responder has a new response packet its window admits.
    fn rsp_may_send_new(&self) -> bool {
        self.rsp_tx_idx < self.rsp_q.len() && self.rsp_win.may_send_new(self.cfg.recovery.bdp_cap)
    }

    fn count_tx(&mut self, t: &Transmit) {
        if t.ib.bth.opcode == Opcode::CNP {
            self.counters.cnps_sent += 1;
        }
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += t.ib.payload_len as u64;
    }

    fn bth(&self, opcode: Opcode, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            tver: self.tver(),
            pkey: self.attr.pkey,
            fecn: false,
            becn: false,
            dest_qpn: self.attr.dest_qpn,
            ack_req: false,
            psn,
        }
    }

    fn build_ack(
        &self,
        opcode: Opcode,
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
        sack: Option<Psn>,
        becn: bool,
    ) -> Transmit {
        let mut bth = self.bth(opcode, psn);
        bth.becn = becn;
        let mut ib = IbRepr::new(bth);
        ib.aeth = Some(AethRepr { syndrome, msn });
        if self.irn_wire() {
            ib.irn = Some(IrnEthRepr {
                sack_psn: sack,
                ..IrnEthRepr::default()
            });
        }
        Transmit {
            ib,
            ecn: Ecn::NotEct,
        }
    }

    fn build_ctrl(&self, c: Ctrl, payload: &mut Vec<u8>, bytes: bool) -> Transmit {
        match c {
            Ctrl::Ack {
                psn,
                syndrome,
                msn,
                sack,
                becn,
            } => self.build_ack(Opcode::RC_ACKNOWLEDGE, psn, syndrome, msn, sack, becn),
            Ctrl::ReadAck {
                psn,
                syndrome,
                sack,
            } => self.build_ack(Opcode::RC_IRN_READ_ACK, psn, syndrome, 0, sack, false),
            Ctrl::Cnp => {
                let mut bth = self.bth(Opcode::CNP, Psn::new(0));
                bth.tver = TVER_STANDARD;
                bth.becn = true;
                let mut ib = IbRepr::new(bth);
                ib.payload_len = 16;
                if bytes {
                    payload.resize(16, 0);
                }
                Transmit {
                    ib,
                    ecn: Ecn::NotEct,
                }
            }
        }
    }

    /// The responder's next data packet: standard ordered responses, or IRN's rPSN stream.
    fn next_response<M: Memory>(
        &mut self,
        now: Time,
        mem: &M,
        payload: &mut Vec<u8>,
    ) -> Option<Transmit> {
        if self.irn_wire() {
            return self.next_response_irn(now, mem, payload);
        }
        let mtu = u64::from(self.mtu());
        let job = self.resp.front_mut()?;
        match *job {
            RespJob::Ack {
                psn,
                syndrome,
                msn,
                becn,
            } => {
                self.resp.pop_front();
                Some(self.build_ack(Opcode::RC_ACKNOWLEDGE, psn, syndrome, msn, None, becn))
            }
            RespJob::Atomic { psn, orig, msn } => {
                self.resp.pop_front();
                let mut ib = IbRepr::new(self.bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn));
                ib.aeth = Some(AethRepr {
                    syndrome: Syndrome::Ack(CreditCode::INVALID),
                    msn,
                });
                ib.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
                Some(Transmit { ib, ecn: Ecn::Ect0 })
            }
            RespJob::Read {
                psn,
                va,
                rkey,
                len,
                done,
                msn,
            } => {
                let k = (done / mtu) as u32;
                let chunk = (len - done).min(mtu);
                let first = done == 0;
                let last = done + chunk >= len;
                let opcode = read_response_opcode(first, last);
                let this_psn = psn.add(k);
                if last {
                    self.resp.pop_front();
                } else if let RespJob::Read { done: d, .. } = job {
                    *d += chunk;
                }
                let ib = IbRepr::new(self.bth(opcode, this_psn));
                let src = ReadSource {
                    rkey,
                    va: va + done,
                    len: chunk,
                    nak_psn: this_psn,
                };
                self.finish_read_response(ib, first || last, msn, src, mem, payload)
            }
        }
    }

    /// Completes a Read response packet: the AETH on its first and last packets, `src.len`
    /// payload bytes read from the responder's memory. If the region went away under the Read,
    /// queues a remote-access NAK at `src.nak_psn` instead (`poll_transmit` sends it) and
    /// returns `None`.
    fn finish_read_response<M: Memory>(
        &mut self,
        mut ib: IbRepr,
        with_aeth: bool,
        msn: u32,
        src: ReadSource,
        mem: &M,
        payload: &mut Vec<u8>,
    ) -> Option<Transmit> {
        if with_aeth {
            ib.aeth = Some(AethRepr {
                syndrome: Syndrome::Ack(CreditCode::INVALID),
                msn,
            });
        }
        ib.payload_len = src.len as usize;
        if M::HOLDS_BYTES && src.len > 0 {
            payload.resize(src.len as usize, 0);
            if mem.read(Key::Remote(src.rkey), src.va, payload).is_err() {
                payload.clear();
                self.responder_fatal(src.nak_psn, NakCode::RemoteAccessError, None);
                return None;
            }
        }
        Some(Transmit { ib, ecn: Ecn::Ect0 })
    }

    fn next_response_irn<M: Memory>(
        &mut self,
        now: Time,
        mem: &M,
        payload: &mut Vec<u8>,
    ) -> Option<Transmit> {
        if let Some(rpsn) = self.rsp_win.next_retransmit() {
            let t = self.build_rsp_irn(rpsn, mem, payload)?;
            self.rsp_win.on_retransmitted(now, rpsn, 1);
            self.counters.retransmitted += 1;
            return Some(t);
        }
        if !self.rsp_may_send_new() {
            return None;
        }
        let e = self.rsp_q[self.rsp_tx_idx];
        let rpsn = e.rpsn.add(self.rsp_tx_off);
        let t = self.build_rsp_irn(rpsn, mem, payload)?;
        self.rsp_win.on_sent_new(now, 1);
        self.rsp_tx_off += 1;
        if self.rsp_tx_off >= e.npkts {
            self.rsp_tx_idx += 1;
            self.rsp_tx_off = 0;
        }
        Some(t)
    }

    fn build_rsp_irn<M: Memory>(
        &mut self,
        rpsn: Psn,
        mem: &M,
        payload: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let e = *self.rsp_q.iter().find(|e| {
            let d = e.rpsn.distance(rpsn);
            d >= 0 && (d as u32) < e.npkts
        })?;
        let k = e.rpsn.distance(rpsn) as u32;
        match e.kind {
            SavedKind::Atomic { orig } => {
                let mut ib = IbRepr::new(self.bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, rpsn));
                ib.irn = Some(IrnEthRepr::default());
                ib.aeth = Some(AethRepr {
                    syndrome: Syndrome::Ack(CreditCode::INVALID),
                    msn: e.msn,
                });
                ib.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
                Some(Transmit { ib, ecn: Ecn::Ect0 })
            }
            SavedKind::Read { va, rkey, len } => {
                let mtu = u64::from(self.mtu());
                let done = u64::from(k) * mtu;
                let chunk = (len - done.min(len)).min(mtu);
                let first = k == 0;
                let last = k + 1 == e.npkts;
                let opcode = read_response_opcode(first, last);
                let mut ib = IbRepr::new(self.bth(opcode, rpsn));
                ib.irn = Some(IrnEthRepr::default());
                let src = ReadSource {
                    rkey,
                    va: va + done,
                    len: chunk,
                    nak_psn: e.req_psn,
                };
                self.finish_read_response(ib, first || last, e.msn, src, mem, payload)
            }
        }
    }

    /// The requester's next packet: a retransmission if loss recovery has one, else a new
    /// packet if BDP-FC, the congestion window, fences and the Read credit allow.
    fn next_request<M: Memory>(
        &mut self,
        now: Time,
        mem: &M,
        payload: &mut Vec<u8>,
    ) -> Option<Transmit> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.rnr_until.is_some() {
            return None;
        }
        while let Some(psn) = self.swin.next_retransmit() {
            let Some(idx) = self.sq.iter().position(|w| w.contains(psn)) else {
                // Nothing holds it any more (completed meanwhile): skip it.
                self.swin.on_retransmitted(now, psn, 1);
                continue;
            };
            let (mut t, covers) = self.build_request(idx, psn, mem, payload);
            self.swin.on_retransmitted(now, psn, covers);
            self.counters.retransmitted += 1;
            self.ask_for_feedback(&mut t);
            return Some(t);
        }
        if self.state == QpState::Sqd && self.tx_off == 0 {
            return None;
        }
        if !self.swin.may_send_new(self.cfg.recovery.bdp_cap) {
            return None;
        }
        if !self.cc_window_open() {
            return None;
        }
        let idx = self.tx_idx;
        if idx >= self.sq.len() {
            return None;
        }
        if !self.sq[idx].started && !self.start_wqe(idx, mem) {
            return None;
        }
        if self.state == QpState::Err {
            return None;
        }
        let w = &self.sq[idx];
        let psn = w.first_psn.add(self.tx_off);
        let (mut t, covers) = self.build_request(idx, psn, mem, payload);
        self.swin.on_sent_new(now, covers);
        self.ask_for_feedback(&mut t);
        self.tx_off += covers;
        if self.tx_off >= self.sq[idx].npsn {
            self.tx_idx += 1;
            self.tx_off = 0;
        }
        Some(t)
    }

    /// A standard go-back-N responder ACKs only when asked: ask as often as the congestion
    /// controller needs feedback ([`Controller::ack_interval_bytes`]), on new packets and
    /// retransmissions alike (after a NAK the resent range must bring ACKs too, or a window
    /// cut by the loss stays shut). Go-back-0 keeps its ACKs on message boundaries (E11's
    /// livelock depends on it); a window controller over it is the driver's to refuse.
    fn ask_for_feedback(&mut self, t: &mut Transmit) {
        if self.mode() != Retransmission::GoBackN || self.irn_wire() {
            return;
        }
        self.unasked_bytes += t.ib.payload_len as u64;
        if let Some(every) = self.cc.ack_interval_bytes() {
            if self.unasked_bytes >= every {
                t.ib.bth.ack_req = true;
            }
        }
        if t.ib.bth.ack_req {
            self.unasked_bytes = 0;
        }
    }

    /// Starts WQE `idx`: checks its local buffers, fences and Read credit, and assigns its
    /// PSNs and sequence numbers. `false` if it cannot start yet (or failed).
    fn start_wqe<M: Memory>(&mut self, idx: usize, mem: &M) -> bool {
        let mtu = self.mtu();
        let irn = self.irn_wire();
        let (fence, rd_atomic) = {
            let w = &self.sq[idx];
            (w.wr.fence, w.wr.op.is_read_or_atomic())
        };
        let reads_pending = self
            .sq
            .iter()
            .take(idx)
            .filter(|w| w.needs_response() && !w.done())
            .count();
        if fence && reads_pending > 0 {
            return false;
        }
        if rd_atomic && reads_pending >= usize::from(self.attr.max_rd_atomic.max(1)) {
            return false;
        }
        let w = &self.sq[idx];
        let need = match w.wr.op {
            SendOp::Read(_) => Access::LOCAL_WRITE,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => Access::LOCAL_WRITE,
            _ => Access::LOCAL_READ,
        };
        let bad_sge = w.wr.sg_list.iter().any(|s| {
            mem.check(Key::Local(s.lkey), s.addr, u64::from(s.len), need)
                .is_err()
        });
        let too_many_psns =
            !irn && matches!(w.wr.op, SendOp::Read(_)) && packets(w.len, mtu) >= Psn::HALF / 2;
        let status = if w.len > MAX_MESSAGE || too_many_psns {
            Some(WcStatus::LocLenErr)
        } else if bad_sge {
            Some(WcStatus::LocProtErr)
        } else {
            None
        };
        if let Some(status) = status {
            self.sq[idx].error = Some(status);
            self.sq[idx].started = true;
            self.complete_sends();
            if self.state != QpState::Err {
                // Earlier work is still in flight: fail the QP behind it.
                self.enter_error();
            }
            return false;
        }
        let first_psn = self.swin.next();
        let w = &mut self.sq[idx];
        let npkts = match w.wr.op {
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
            _ => packets(w.len, mtu),
        };
        w.npkts = npkts;
        w.npsn = match w.wr.op {
            SendOp::Read(_) if !irn => npkts,
            SendOp::Read(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
            _ => npkts,
        };
        w.first_psn = first_psn;
        w.started = true;
        if w.wr.op.consumes_recv() {
            w.recv_sn = Some(self.next_recv_sn);
            self.next_recv_sn = self.next_recv_sn.wrapping_add(1);
        }
        if w.wr.op.is_read_or_atomic() {
            w.read_sn = Some(self.next_read_sn);
            self.next_read_sn = self.next_read_sn.wrapping_add(1);
            if irn {
                w.rpsn = self.next_rpsn;
                self.next_rpsn = self.next_rpsn.add(npkts);
            }
        }
        true
    }

    /// The request packet of WQE `idx` at `psn`, and how many PSNs it covers.
    fn build_request<M: Memory>(
        &mut self,
        idx: usize,
        psn: Psn,
        mem: &M,
        payload: &mut Vec<u8>,
    ) -> (Transmit, u32) {
        let mtu = self.mtu();
        let irn = self.irn_wire();
        let mode = self.mode();
        let bth0 = self.bth(Opcode::RC_SEND_ONLY, psn);
        let w = &self.sq[idx];
        let k = w.first_psn.distance(psn).max(0) as u32;
        let n = w.npkts;
        let (first, last) = (k == 0, k + 1 >= w.npsn);
        let mut bth = bth0;
        let mut ib;
        let mut covers = 1;
        let off = u64::from(k) * u64::from(mtu);
        let chunk = w.len.saturating_sub(off).min(u64::from(mtu));
        let pick = |only, fst, mid, lst| match (first, last) {
            (true, true) => only,
            (true, false) => fst,
            (false, false) => mid,
            (false, true) => lst,
        };
        let mut data = false;
        match w.wr.op {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => {
                bth.opcode = match w.wr.op {
                    SendOp::SendWithImm(_) => pick(
                        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                        Opcode::RC_SEND_FIRST,
                        Opcode::RC_SEND_MIDDLE,
                        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                    ),
                    SendOp::SendWithInv(_) => pick(
                        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                        Opcode::RC_SEND_FIRST,
                        Opcode::RC_SEND_MIDDLE,
                        Opcode::RC_SEND_LAST_WITH_INVALIDATE,
                    ),
                    _ => pick(
                        Opcode::RC_SEND_ONLY,
                        Opcode::RC_SEND_FIRST,
                        Opcode::RC_SEND_MIDDLE,
                        Opcode::RC_SEND_LAST,
                    ),
                };
                ib = IbRepr::new(bth);
                if last {
                    match w.wr.op {
                        SendOp::SendWithImm(imm) => ib.imm = Some(imm),
                        SendOp::SendWithInv(rkey) => ib.ieth = Some(rkey),
                        _ => {}
                    }
                }
                if irn {
                    ib.irn = Some(IrnEthRepr {
                        wqe_sn: w.recv_sn,
                        psn_offset: Some(k),
                        ..IrnEthRepr::default()
                    });
                }
                data = true;
            }
            SendOp::Write(remote) | SendOp::WriteWithImm(remote, _) => {
                let imm = match w.wr.op {
                    SendOp::WriteWithImm(_, imm) => Some(imm),
                    _ => None,
                };
                bth.opcode = if imm.is_some() {
                    pick(
                        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                        Opcode::RC_RDMA_WRITE_FIRST,
                        Opcode::RC_RDMA_WRITE_MIDDLE,
                        Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    )
                } else {
                    pick(
                        Opcode::RC_RDMA_WRITE_ONLY,
                        Opcode::RC_RDMA_WRITE_FIRST,
                        Opcode::RC_RDMA_WRITE_MIDDLE,
                        Opcode::RC_RDMA_WRITE_LAST,
                    )
                };
                ib = IbRepr::new(bth);
                let reth = RethRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    dma_len: w.len as u32,
                };
                // IRN §5.3.1: the RETH rides on every Write packet.
                if first || irn {
                    ib.reth = Some(reth);
                }
                if last {
                    ib.imm = imm;
                }
                if irn {
                    ib.irn = Some(IrnEthRepr {
                        wqe_sn: if last && imm.is_some() {
                            w.recv_sn
                        } else {
                            None
                        },
                        psn_offset: Some(k),
                        ..IrnEthRepr::default()
                    });
                }
                data = true;
            }
            SendOp::Read(remote) => {
                bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
                ib = IbRepr::new(bth);
                // Standard RoCE resends a Read from a missing response as a Read of the rest.
                let (va, len) = if irn {
                    (remote.addr, w.len)
                } else {
                    (remote.addr + off, w.len - off.min(w.len))
                };
                ib.reth = Some(RethRepr {
                    va,
                    rkey: remote.rkey,
                    dma_len: len as u32,
                });
                if irn {
                    ib.irn = Some(IrnEthRepr {
                        wqe_sn: w.read_sn,
                        ..IrnEthRepr::default()
                    });
                } else {
                    covers = n - k.min(n);
                }
            }
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
            } => {
                bth.opcode = Opcode::RC_COMPARE_SWAP;
                ib = IbRepr::new(bth);
                ib.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    swap_add: swap,
                    compare,
                });
                if irn {
                    ib.irn = Some(IrnEthRepr {
                        wqe_sn: w.read_sn,
                        ..IrnEthRepr::default()
                    });
                }
            }
            SendOp::FetchAdd { remote, add } => {
                bth.opcode = Opcode::RC_FETCH_ADD;
                ib = IbRepr::new(bth);
                ib.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    swap_add: add,
                    compare: 0,
                });
                if irn {
                    ib.irn = Some(IrnEthRepr {
                        wqe_sn: w.read_sn,
                        ..IrnEthRepr::default()
                    });
                }
            }
        }
        let last_of_msg = last || !data;
        ib.bth.ack_req = irn
            || last_of_msg
            || (mode != Retransmission::GoBack0
                && k % STANDARD_ACK_EVERY == STANDARD_ACK_EVERY - 1);
        ib.bth.solicited = last_of_msg && w.wr.solicited && data;
        if data {
            ib.payload_len = chunk as usize;
            if M::HOLDS_BYTES && chunk > 0 {
                payload.resize(chunk as usize, 0);
                let sg = &w.wr.sg_list;
                // Local buffers were checked when the WQE started; a failure now (a region
                // deregistered meanwhile) sends zeros rather than nothing.
                let _ = gather(mem, sg, off, payload);
            }
        }
        (Transmit { ib, ecn: Ecn::Ect0 }, covers.max(1))
    }
}

/// Why a request packet was not placed.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// No receive WQE: RNR NAK (IBTA §9.7.5.2.8).
    Rnr,
    /// A fatal error with its NAK code and maybe a failed receive WQE.
    Fatal(NakCode, Option<(u32, WcStatus)>),
}

/// The opcode of a Read response packet.
fn read_response_opcode(first: bool, last: bool) -> Opcode {
    match (first, last) {
        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
    }
}

/// Read and atomic requests: answered by responses, not ACKs.
fn is_read_or_atomic_request(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::RC_RDMA_READ_REQUEST | Opcode::RC_COMPARE_SWAP | Opcode::RC_FETCH_ADD
    )
}

/// Walks a scatter/gather list from byte `off` for `len` bytes, calling `f(sge, addr, at, n)`
/// for each piece (`at` = offset into the data).
fn walk_sg(
    sg: &[Sge],
    off: u64,
    len: u64,
    mut f: impl FnMut(&Sge, u64, usize, usize) -> Result<(), MemError>,
) -> Result<(), MemError> {
    let mut skip = off;
    let mut left = len;
    let mut at = 0usize;
    for s in sg {
        if left == 0 {
            break;
        }
        let slen = u64::from(s.len);
        if skip >= slen {
            skip -= slen;
            continue;
        }
        let n = (slen - skip).min(left);
        f(s, s.addr + skip, at, n as usize)?;
        skip = 0;
        left -= n;
        at += n as usize;
    }
    if left > 0 {
        return Err(MemError::OutOfBounds);
    }
    Ok(())
}

/// Reads `out.len()` bytes of a gather list from byte `off`.
fn gather<M: Memory>(mem: &M, sg: &[Sge], off: u64, out: &mut [u8]) -> Result<(), MemError> {
    let len = out.len() as u64;
    walk_sg(sg, off, len, |s, addr, at, n| {
        mem.read(Key::Local(s.lkey), addr, &mut out[at..at + n])
    })
}

/// Writes `data` into a scatter list from byte `off` (checking every piece before writing any).
fn scatter<M: Memory>(mem: &mut M, sg: &[Sge], off: u64, data: &[u8]) -> Result<(), MemError> {
    let len = data.len() as u64;
    walk_sg(sg, off, len, |s, addr, _, n| {
        mem.check(Key::Local(s.lkey), addr, n as u64, Access::LOCAL_WRITE)
    })?;
    walk_sg(sg, off, len, |s, addr, at, n| {
        mem.write(Key::Local(s.lkey), addr, &data[at..at + n])
    })
}

/// Places `len` bytes of an incoming Send at byte `off` of a receive WQE: writes them when the
/// memory holds bytes, else only checks.
fn place_local<M: Memory>(
    mem: &mut M,
    sg: &[Sge],
    off: u64,
    len: u64,
    payload: &[u8],
) -> Result<(), MemError> {
    if M::HOLDS_BYTES && !payload.is_empty() {
        scatter(mem, sg, off, payload)
    } else {
        walk_sg(sg, off, len, |s, addr, _, n| {
            mem.check(Key::Local(s.lkey), addr, n as u64, Access::LOCAL_WRITE)
        })
    }
}
