//! The reliable-connected queue pair: requester, completer and responder of one RC connection,
//! with RoCE's and IRN's loss recovery (SPEC T1, T3–T7, T9 hooks).
//!
//! See [`QueuePair`] for the driver contract. The queue pair is split by role, after Linux
//! rxe's `rxe_req.c` / `rxe_comp.c` / `rxe_resp.c`; each role keeps its state in its own struct
//! and its code in its own module:
//!
//! | module | role | state |
//! |---|---|---|
//! | this one | the public contract: verbs, the driver's calls, the QP state, the control queue, packet headers | [`QueuePair`] |
//! | `requester` | builds request packets from send WQEs: PSN assignment, fences, Read credit, BDP-FC, the congestion window, pacing, AckReq | `Requester` |
//! | `completer` | the requester's receive side: ACKs, NAKs and RNR NAKs, Read responses and atomic ACKs, send completions, the requester's timeouts | `Completer` |
//! | `responder` | requests: checks, placement at the final address, the receive bitmap's deferred actions (IRN's 2-bitmap), MSN, receive completions, ACK/NAK generation | `Responder` |
//! | `responder::standard` | the standard (rxe) responder: in-order only, opcode sequence, saved Read/atomic state for duplicates, ACKs in order with Read responses | `StandardResponder` |
//! | `responder::irn` | IRN's responder: per-packet ACK/NACK with SACK, the rPSN space of responses with its own window and timeouts, read (N)ACKs | `IrnResponder` |
//! | `timers` | every deadline in one table; [`QueuePair::poll_timeout`] is its earliest | `TimerTable` |
//! | `sg` | scatter/gather lists against a [`Memory`] | — |
//!
//! The standard and the IRN responder are the two variants of one `ResponderWire`, chosen
//! from [`RecoveryConfig::irn_wire`](crate::RecoveryConfig) when the queue pair is created.

use crate::payload::TxPayload;
use std::collections::VecDeque;
use std::sync::Arc;

use irn_wire::{
    AethRepr, BthRepr, Ecn, IbRepr, LossBitmap, Opcode, Psn, Syndrome, Transport,
    ROCEV2_IPV4_ENCAP_LEN, TVER_STANDARD,
};

use crate::cc::{Controller, ControllerFactory};
use crate::config::{Retransmission, RtoPolicy, Wire};
use crate::memory::Memory;
use crate::state::{
    check_transition, ib_timeout, post_recv_rule, post_send_rule, AttrMask, ModifyError, PostRule,
    QpState,
};
use crate::time::{Dur, Time};
use crate::window::{RecvWindow, SendWindow};
use crate::wr::{Completion, RecvWr, SendWr, WcOpcode, WcStatus};
use first_inline::FirstInline;

mod completer;
mod first_inline;
mod requester;
mod reread;
mod responder;
mod sg;

pub(crate) use sg::{gather, scatter};
mod timers;
mod types;
mod wire;

use completer::Completer;
use requester::{Requester, SendWqe};
use responder::{RecvWqe, Responder};

pub use types::{Counters, PostError, QpAttr, QpConfig, QpConfigError, Transmit, MAX_MESSAGE};

/// High-priority control packets, sent before any data (the queue is the queue pair's, fed by
/// the IRN responder, the completer's read (N)ACKs and the notification point).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctrl {
    /// IRN ACK / NACK / error NAK in the sPSN space (responder to requester).
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
        sack: Option<Psn>,
        /// The responder's loss bitmap, on a NACK with [`RecoveryConfig::nack_bitmap`].
        ///
        /// [`RecoveryConfig::nack_bitmap`]: crate::RecoveryConfig::nack_bitmap
        lost: Option<LossBitmap>,
        becn: bool,
    },
    /// IRN read (N)ACK in the rPSN space (requester to responder).
    ReadAck {
        psn: Psn,
        syndrome: Syndrome,
        sack: Option<Psn>,
        /// The requester's loss bitmap of the rPSN space, as on [`Ctrl::Ack`].
        lost: Option<LossBitmap>,
    },
    /// Congestion notification (notification point, RoCEv2 annex A17.9).
    Cnp,
}

/// Whether a newer (N)ACK of the same space says all that an unmarked one waiting in the
/// control queue, of `syndrome` with loss bitmap `lost`, did: a plain ACK's does (cumulative
/// ACKs only grow, and its SACK lies below its cumulative PSN), a NACK's with a bitmap when
/// `nacks` (the newer one carries the whole receive state), nothing else's (RNR and error
/// NAKs, NACKs without a bitmap).
fn says_no_more(syndrome: &Syndrome, lost: &Option<LossBitmap>, nacks: bool) -> bool {
    match syndrome {
        Syndrome::Ack(_) => true,
        Syndrome::Nak(irn_wire::NakCode::PsnSequenceError) => nacks && lost.is_some(),
        _ => false,
    }
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
///      only when its port is free gets exactly the scheduling it wants), or
///      [`poll_transmit_into`](QueuePair::poll_transmit_into) until it returns `false`, which
///      builds each packet in a slot the driver keeps;
///    * [`poll_completion`](QueuePair::poll_completion) until `None`;
///    * [`poll_timeout`](QueuePair::poll_timeout): the next deadline at which to call
///      `handle_timeout` (replacing any earlier one). A poll that returns a control packet
///      (an ACK or NAK, a read ACK or a CNP:
///      [`Opcode::is_control`](irn_wire::Opcode::is_control)), or no packet, moves no
///      deadline earlier and arms none: a driver that read the deadline after the last
///      input and after the last data packet need not read it again after those.
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
    /// Control packets waiting to go out ahead of data (usually one: inline).
    ctrl: FirstInline<Ctrl>,
    /// Notification point: when the last CNP went out.
    last_cnp: Option<Time>,
    /// Sending requests.
    req: Requester,
    /// Receiving what answers them.
    cmp: Completer,
    /// Answering the peer's requests.
    rsp: Responder,
    /// The driver holds new request packets back
    /// ([`hold_new_requests`](QueuePair::hold_new_requests)).
    hold_new: bool,
}

/// Packets of a message of `len` bytes at path MTU `mtu` (a zero-length message is one packet).
fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

/// Whether `mtu` is one of InfiniBand's MTUs (256, 512, 1024, 2048 or 4096 bytes: verbs'
/// `enum ibv_mtu`), the values `path_mtu` may take.
pub fn path_mtu_valid(mtu: u32) -> bool {
    matches!(mtu, 256 | 512 | 1024 | 2048 | 4096)
}

impl QueuePair {
    /// A queue pair in the RESET state, or why `cfg` cannot make one
    /// ([`QpConfig::validate`]).
    pub fn new(now: Time, cfg: QpConfig) -> Result<QueuePair, QpConfigError> {
        cfg.validate()?;
        Ok(QueuePair::reset(now, cfg))
    }

    /// A queue pair in the RESET state from a configuration already validated.
    fn reset(now: Time, cfg: QpConfig) -> QueuePair {
        let cc = cfg.cc.build(now, cfg.line_rate_bps, u64::from(cfg.qpn));
        let mode = cfg.recovery.retransmission;
        QueuePair {
            state: QpState::Reset,
            attr: QpAttr::default(),
            rto: cfg.recovery.rto,
            cc,
            counters: Counters::default(),
            completions: VecDeque::new(),
            ctrl: FirstInline::default(),
            last_cnp: None,
            req: Requester::new(mode),
            cmp: Completer::new(),
            rsp: Responder::new(&cfg.recovery),
            hold_new: false,
            cfg,
        }
    }

    /// Sizes what depends on the path before the queue pair's first packet: the BDP-FC cap
    /// (IRN §3.2 counts it in packets of the path MTU, ⌈BDP / MTU⌉) and the congestion
    /// controller (a window controller counts bytes in segments of the MTU). A simulator knows
    /// its MTU when it makes the queue pair; a verbs consumer learns it only at INIT → RTR
    /// (`path_mtu`), after the queue pair exists and receives are posted, so this replaces the
    /// two in place, with the span BDP-FC may reach over unSACKed PSNs
    /// ([`RecoveryConfig::bdp_fc_span`](crate::RecoveryConfig::bdp_fc_span), which a runtime
    /// bounds by the cap). Allowed in RESET
    /// and INIT only; the new configuration is validated as [`QueuePair::new`] validates one,
    /// and on error nothing changes.
    pub fn size_for_path(
        &mut self,
        now: Time,
        bdp_cap: Option<u32>,
        bdp_fc_span: Option<u32>,
        cc: Arc<dyn ControllerFactory>,
    ) -> Result<(), QpConfigError> {
        if !matches!(self.state, QpState::Reset | QpState::Init) {
            return Err(QpConfigError::Connected(self.state));
        }
        let mut cfg = self.cfg.clone();
        cfg.recovery.bdp_cap = bdp_cap;
        cfg.recovery.bdp_fc_span = bdp_fc_span;
        cfg.cc = cc;
        cfg.validate()?;
        self.cc = cfg.cc.build(now, cfg.line_rate_bps, u64::from(cfg.qpn));
        self.cfg = cfg;
        Ok(())
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

    /// Holds new request packets back (`true`) or lets them go (`false`, the default), for a
    /// driver with a budget of its own over all its queue pairs — the UDP runtime's device
    /// bounds what all its queue pairs have in flight together, as a NIC's line rate does.
    /// Only packets with PSNs not sent before are held: retransmissions, responses and
    /// acknowledgements still leave, so a held queue pair still recovers its losses and still
    /// answers its peer (a budget spent at both ends cannot deadlock). Nothing else changes:
    /// the queue pair's timers keep running for what it has in flight.
    pub fn hold_new_requests(&mut self, hold: bool) {
        self.hold_new = hold;
    }

    /// Whether a new request packet is ready to leave but for
    /// [`hold_new_requests`](QueuePair::hold_new_requests): one is posted and not yet sent,
    /// and the BDP cap and the congestion window admit it. A driver holding queue pairs back
    /// lists those for which this is `true`, to let them go in turn when its budget allows.
    /// Like [`may_transmit`](QueuePair::may_transmit), `true` is not a promise (a fence, Read
    /// credit or pacing can still hold the packet).
    pub fn new_request_ready(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
            && self.cmp.rnr_until.is_none()
            && !(self.state == QpState::Sqd && self.req.tx_off == 0)
            && self.req.tx_idx < self.req.sq.len()
            && self.req.swin.may_send_new(self.cfg.recovery.bdp_cap)
            && self.cc_window_open()
    }

    /// Whether the requester waits out an RNR NAK (IBTA §9.7.5.2.8): what it had in flight
    /// was refused, and nothing is sent until the wait ends.
    pub fn rnr_waiting(&self) -> bool {
        self.cmp.rnr_until.is_some()
    }

    /// Request PSNs sent and not yet acknowledged (what BDP-FC bounds).
    pub fn in_flight(&self) -> u32 {
        self.req.swin.in_flight()
    }

    /// Response PSNs the IRN read responder has in flight (bounded by BDP-FC too).
    pub fn responses_in_flight(&self) -> u32 {
        self.rsp
            .wire
            .response_window()
            .map_or(0, SendWindow::in_flight)
    }

    /// Send work requests posted and not yet completed.
    pub fn outstanding_sends(&self) -> usize {
        self.req.sq.len()
    }

    /// Receive work requests posted and not yet completed.
    pub fn outstanding_recvs(&self) -> usize {
        self.rsp.rq.len()
    }
    /// The wire format both ends speak (what it changes here: `qp/wire.rs`).
    fn wire(&self) -> Wire {
        self.cfg.recovery.wire
    }

    fn mode(&self) -> Retransmission {
        self.cfg.recovery.retransmission
    }

    fn selective(&self) -> bool {
        self.mode().is_selective()
    }

    fn mtu(&self) -> u32 {
        self.attr.path_mtu
    }

    fn tver(&self) -> u8 {
        self.cfg.recovery.wire.tver()
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

    /// When and how far a fixed timer backs off, `None` when it does not
    /// ([`RecoveryConfig::rto_backoff_after`](crate::RecoveryConfig::rto_backoff_after)): after
    /// that many unanswered expiries, up to the local ACK timeout, or RFC 6298 §2.5's least
    /// ceiling of 60 s when the `timeout` attribute is 0 (infinite).
    pub(super) fn backoff(&self) -> Option<(u32, Dur)> {
        /// RFC 6298 §2.5: a maximum "MAY be placed on RTO provided it is at least 60 seconds".
        const LEAST_CEILING: Dur = Dur::from_millis(60_000);
        let after = self.cfg.recovery.rto_backoff_after?;
        self.retry_every().map(|t| (after, t.min(LEAST_CEILING)))
    }

    /// A send window starting at `start`, with this configuration's loss rule.
    fn new_send_window(&self, start: Psn) -> SendWindow {
        let w = SendWindow::new(self.mode(), start)
            .dup_threshold(self.cfg.recovery.dup_threshold)
            .resend_lost_retransmissions(self.cfg.recovery.resend_lost_retransmissions)
            .timeout_resends_unsacked(self.cfg.recovery.timeout_resends_unsacked)
            .bdp_fc_span(self.cfg.recovery.bdp_fc_span);
        if self.cfg.recovery.tcp.is_some() {
            w.tcp_scoreboard()
        } else {
            w
        }
    }

    /// Whether this queue pair runs the TCP model (SPEC E10).
    pub(super) fn tcp(&self) -> bool {
        self.cfg.recovery.tcp.is_some()
    }

    /// How far ahead of the expected PSN out-of-order packets are taken: the sender's
    /// `next − una` bound (the BDP cap, or with a span that many caps).
    fn ooo_capacity(&self) -> u32 {
        self.cfg
            .recovery
            .bdp_fc_reach()
            .map_or(self.cfg.ooo_window, |r| {
                u32::try_from(r).unwrap_or(u32::MAX)
            })
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
            && (self.req.swin.in_flight() > 0 || self.req.sq.iter().any(|w| w.started))
        {
            return Err(ModifyError::InvalidValue("sq_psn (send queue not drained)"));
        }
        if mask.contains(AttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return Err(ModifyError::InvalidValue("min_rnr_timer"));
        }
        if to == QpState::Reset {
            let cfg = self.cfg.clone();
            *self = QueuePair::reset(now, cfg);
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
        if self.state == QpState::Init && to == QpState::Rtr {
            let ooo = self.selective();
            self.rsp.rwin = RecvWindow::new(self.attr.rq_psn, ooo, self.ooo_capacity());
            // IRN §5.4: the rPSN space of this responder's answers starts where the peer's
            // requests start, which both sides know.
            let fresh = self.new_send_window(self.attr.rq_psn);
            if let Some(win) = self.rsp.wire.response_window_mut() {
                *win = fresh;
            }
        }
        if self.state == QpState::Sqd && mask.contains(AttrMask::SQ_PSN) {
            // A drained send queue restarts its sPSNs; the rPSN space of responses continues.
            self.req.swin = self.new_send_window(self.attr.sq_psn);
        }
        if self.state == QpState::Rtr && to == QpState::Rts {
            self.req.swin = self.new_send_window(self.attr.sq_psn);
            self.req.next_rpsn = self.attr.sq_psn;
            self.cmp.rrecv = RecvWindow::new(
                self.attr.sq_psn,
                self.selective() && self.wire().splits_response_psns(),
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
        if self.req.sq.len() >= self.cfg.max_send_wr {
            return Err(PostError::QueueFull);
        }
        let len = wr.len();
        if wr.op.is_atomic() && (wr.sg_list.len() != 1 || len != 8) {
            return Err(PostError::InvalidWr(
                "an atomic needs one 8-byte scatter/gather entry",
            ));
        }
        self.req.sq.push_back(SendWqe {
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
            ssn: 0,
            got: VecDeque::new(),
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
        if self.rsp.rq.len() >= self.cfg.max_recv_wr {
            return Err(PostError::QueueFull);
        }
        let len = wr.len();
        let sn = self.rsp.rq_next_sn;
        self.rsp.rq_next_sn = self.rsp.rq_next_sn.wrapping_add(1);
        self.rsp.rq.push_back(RecvWqe { wr, sn, len });
        Ok(())
    }

    /// The next completion, in the order the queue pair produced them: send completions in
    /// posting order, receive completions in posting order.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Enters the error state: every outstanding work request completes with `WrFlushErr`
    /// (IBTA §10.3.1: "all outstanding and new WRs are completed in error").
    fn enter_error(&mut self) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        let qpn = self.cfg.qpn;
        for w in self.req.sq.drain(..) {
            self.completions.push_back(Completion::bare(
                w.wr.wr_id,
                w.wr.op.wc_opcode(),
                w.error.unwrap_or(WcStatus::WrFlushErr),
                qpn,
            ));
        }
        for r in self.rsp.rq.drain(..) {
            self.completions.push_back(Completion::bare(
                r.wr.wr_id,
                WcOpcode::Recv,
                WcStatus::WrFlushErr,
                qpn,
            ));
        }
        self.req.tx_idx = 0;
        self.req.tx_off = 0;
        // Only NAKs and ACKs already decided still go out.
        self.rsp.wire.on_error();
        if let Some(rb) = self.rsp.reorder.as_mut() {
            rb.clear();
        }
        self.ctrl.retain(|c| !matches!(c, Ctrl::Cnp));
        self.cmp.rnr_until = None;
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

    // -----------------------------------------------------------------------------------------
    // Sending

    /// The next packet to send, or `None`. When the memory holds bytes, `payload` is emptied
    /// and given the packet's payload — bytes of registered memory lent where they lie
    /// ([`TxPayload::gather`]: a `Vec` copies them, the UDP runtime sends them from there), or
    /// bytes the queue pair writes itself; otherwise `payload` is left empty and only
    /// `ib.payload_len` says how long the payload is.
    ///
    /// Order: control packets (ACKs, NACKs, read ACKs, CNPs), then responses, then requests;
    /// data packets only when the congestion controller's pacing allows.
    pub fn poll_transmit<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        now: Time,
        mem: &'m M,
        payload: &mut P,
    ) -> Option<Transmit> {
        let mut t = Transmit::SLOT;
        self.poll_transmit_into(now, mem, payload, &mut t)
            .then_some(t)
    }

    /// [`poll_transmit`](QueuePair::poll_transmit), the packet built in `out` (a driver's
    /// [`Transmit::SLOT`], kept from call to call): `true` if there is one. A packet's headers
    /// are a few hundred bytes: a request is built in `out` itself, not copied from builder to
    /// caller on its way out; a response or a control packet, built by its own builder, is
    /// copied into it once.
    pub fn poll_transmit_into<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        now: Time,
        mem: &'m M,
        payload: &mut P,
        out: &mut Transmit,
    ) -> bool {
        payload.clear();
        self.next_transmit(now, mem, payload, out)
    }

    /// [`poll_transmit_into`](QueuePair::poll_transmit_into)'s packet, built into an empty
    /// `payload`.
    fn next_transmit<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        now: Time,
        mem: &'m M,
        payload: &mut P,
        out: &mut Transmit,
    ) -> bool {
        if self.req.pacing_until <= now {
            self.req.pacing_until = Time::ZERO;
        }
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return false;
        }
        if let Some(c) = self.ctrl.pop_front() {
            *out = self.build_ctrl(c, payload, M::HOLDS_BYTES);
            self.count_tx(out);
            return true;
        }
        if self.state == QpState::Err {
            // Only the ACK/NAKs decided before the error go out.
            let Some(a) = self.rsp.wire.pop_decided_ack() else {
                return false;
            };
            *out = self.build_queued_ack(a);
            self.count_tx(out);
            return true;
        }
        if self.req.pacing_until > now {
            // Acknowledgements are not paced; data waits.
            if !self.rsp.wire.ack_first() {
                return false;
            }
        }
        if !(self.next_response(now, mem, payload, out)
            || self.next_request(now, mem, payload, out))
        {
            // A fault found while building a packet queued a NAK and ended the connection:
            // send that NAK now.
            return self.state == QpState::Err && self.poll_transmit_into(now, mem, payload, out);
        }
        self.count_tx(out);
        if out.ib.payload_len > 0 || out.ib.bth.opcode.is_request() {
            // The controller counts what the packet puts on the IP network.
            self.pace(now, (out.ib.buffer_len() + ROCEV2_IPV4_ENCAP_LEN) as u64);
        }
        true
    }

    /// Like [`poll_transmit`](QueuePair::poll_transmit) but returns only control packets:
    /// ACKs, NAKs, read (N)ACKs and CNPs, never data. A driver whose data priority is paused
    /// (PFC) while control packets travel at another priority calls this instead, so that
    /// acknowledgements are not held behind paused data. No congestion-control hook runs: control
    /// packets are neither paced nor counted as data.
    pub fn poll_control<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        mem: &'m M,
        payload: &mut P,
    ) -> Option<Transmit> {
        let mut t = Transmit::SLOT;
        self.poll_control_into(mem, payload, &mut t).then_some(t)
    }

    /// [`poll_control`](QueuePair::poll_control), the packet built in `out`, as
    /// [`poll_transmit_into`](QueuePair::poll_transmit_into) builds it: `true` if there is
    /// one.
    pub fn poll_control_into<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        _mem: &'m M,
        payload: &mut P,
        out: &mut Transmit,
    ) -> bool {
        payload.clear();
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return false;
        }
        *out = if let Some(c) = self.ctrl.pop_front() {
            self.build_ctrl(c, payload, M::HOLDS_BYTES)
        } else if let Some(a) = self.rsp.wire.pop_queued_ack() {
            self.build_queued_ack(a)
        } else {
            return false;
        };
        self.count_tx(out);
        true
    }

    /// Whether a control packet (see [`poll_control`](QueuePair::poll_control)) is waiting.
    pub fn has_control(&self) -> bool {
        !self.ctrl.is_empty() || self.rsp.wire.ack_first()
    }

    /// Whether [`poll_control`](QueuePair::poll_control) would return a packet now: a control
    /// packet waits and the queue pair is past INIT. Changes only when the queue pair is
    /// handed an input or polled, so a driver may keep it beside the queue pair between those
    /// calls instead of asking each of thousands of queue pairs every time its link frees.
    pub fn control_ready(&self) -> bool {
        !matches!(self.state, QpState::Reset | QpState::Init) && self.has_control()
    }

    /// Whether [`poll_transmit`](QueuePair::poll_transmit) may have a packet for the driver,
    /// now or once pacing allows. `false` only when it certainly has none until the queue
    /// pair is next handed an input — a packet, a timeout, a work request or a `modify`: no
    /// control packet or response waits, and no request either, or only new packets that
    /// the BDP cap, the congestion window or the driver's
    /// [`hold_new_requests`](QueuePair::hold_new_requests) holds back (an acknowledgement, an
    /// input, opens the first two; the driver lifts its hold). A NIC that keeps a list of the queue pairs with something to send leaves the
    /// others out of it, and does not wake up for them when its link frees. `true` is not a
    /// promise: a fence, Read credit or pacing can still hold the next packet back.
    pub fn may_transmit(&self) -> bool {
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return false;
        }
        if !self.ctrl.is_empty() || self.rsp.wire.has_queued() {
            return true;
        }
        if self.state == QpState::Err {
            return false;
        }
        // IRN's Read responder sends from its own window (T7), in RTR as well.
        if self.rsp.wire.may_send_responses(self.cfg.recovery.bdp_cap) {
            return true;
        }
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.cmp.rnr_until.is_some() {
            return false;
        }
        if (self.req.swin.in_recovery() && self.retransmit_allowed())
            || !self.req.rereads.is_empty()
        {
            return true;
        }
        !self.hold_new && self.new_request_ready()
    }

    fn count_tx(&mut self, t: &Transmit) {
        if t.ib.bth.opcode == Opcode::CNP {
            self.counters.cnps_sent += 1;
        }
        self.counters.tx_packets += 1;
        // Data moved: the payload, and the 8 bytes an atomic carries in its headers (the
        // operand of a request, the original value of a response, IBTA §9.4.5).
        let atomic = match (&t.ib.atomic_eth, &t.ib.atomic_ack_eth) {
            (None, None) => 0,
            _ => 8,
        };
        self.counters.tx_bytes += (t.ib.payload_len + atomic) as u64;
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

    /// An ACK or NAK (`opcode`: RC's, or IRN's read (N)ACK) of `psn` saying `aeth`, with the
    /// SACK and loss bitmap of `feedback` where the wire carries IRN's header.
    fn build_ack(
        &self,
        opcode: Opcode,
        psn: Psn,
        aeth: AethRepr,
        (sack, lost): (Option<Psn>, Option<LossBitmap>),
        becn: bool,
    ) -> Transmit {
        let mut bth = self.bth(opcode, psn);
        bth.becn = becn;
        let mut ib = IbRepr::new(bth);
        ib.aeth = Some(aeth);
        ib.irn = self.wire().ack_header(sack, lost);
        Transmit {
            ib,
            ecn: Ecn::NotEct,
        }
    }

    /// The RC ACK or NAK a standard responder decided.
    fn build_queued_ack(&self, a: responder::QueuedAck) -> Transmit {
        let aeth = AethRepr {
            syndrome: a.syndrome,
            msn: a.msn,
        };
        let feedback = (a.lost.map(|(_, h)| h), a.lost.map(|(b, _)| b));
        self.build_ack(Opcode::RC_ACKNOWLEDGE, a.psn, aeth, feedback, a.becn)
    }

    fn build_ctrl<'m>(&self, c: Ctrl, payload: &mut impl TxPayload<'m>, bytes: bool) -> Transmit {
        match c {
            Ctrl::Ack {
                psn,
                syndrome,
                msn,
                sack,
                lost,
                becn,
            } => {
                let aeth = AethRepr { syndrome, msn };
                self.build_ack(Opcode::RC_ACKNOWLEDGE, psn, aeth, (sack, lost), becn)
            }
            Ctrl::ReadAck {
                psn,
                syndrome,
                sack,
                lost,
            } => {
                let aeth = AethRepr { syndrome, msn: 0 };
                self.build_ack(Opcode::RC_IRN_READ_ACK, psn, aeth, (sack, lost), false)
            }
            Ctrl::Cnp => {
                let mut bth = self.bth(Opcode::CNP, Psn::new(0));
                bth.tver = TVER_STANDARD;
                bth.becn = true;
                let mut ib = IbRepr::new(bth);
                ib.payload_len = 16;
                if bytes {
                    // Reserved: zeros, whatever the buffer held.
                    payload.clear();
                    payload.fill(16).fill(0);
                }
                Transmit {
                    ib,
                    ecn: Ecn::NotEct,
                }
            }
        }
    }
}

/// Brings a queue pair from RESET to RTS towards `dest_qpn` (INIT, RTR, RTS with the
/// attributes each transition needs, as `ibv_modify_qp` callers do), with `attr`'s other
/// settings.
pub fn connect_qp(
    qp: &mut QueuePair,
    now: Time,
    attr: &QpAttr,
    dest_qpn: u32,
    sq_psn: Psn,
    rq_psn: Psn,
) -> Result<(), ModifyError> {
    let attr = QpAttr {
        dest_qpn,
        sq_psn,
        rq_psn,
        ..*attr
    };
    let steps = [
        (QpState::Init, AttrMask::ACCESS_FLAGS.with(AttrMask::PKEY)),
        (
            QpState::Rtr,
            AttrMask::PATH_MTU
                .with(AttrMask::DEST_QPN)
                .with(AttrMask::RQ_PSN)
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER),
        ),
        (
            QpState::Rts,
            AttrMask::SQ_PSN
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC),
        ),
    ];
    for (to, mask) in steps {
        qp.modify(now, to, &attr, mask)?;
    }
    Ok(())
}
