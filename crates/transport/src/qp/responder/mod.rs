//! The responder role: requests from the peer (IBTA §9.7.4, rxe's `rxe_resp.c`; IRN §5.3).
//!
//! Shared by both wire variants: the request checks (opcode, length, keys, rights), placement
//! of data at its final address, the receive window with one deferred action per PSN (IRN's
//! 2-bitmap: MSN update, receive completion, Read/atomic execution), the MSN and the receive
//! queue. What differs between standard RoCE and IRN lives in the two variants of
//! [`ResponderWire`]:
//!
//! * [`StandardResponder`] (`standard`): in order only; the position of a packet in its
//!   message comes from the message in progress; ACKs and NAKs travel in order with Read
//!   responses; duplicates of Reads and atomics are answered from saved state;
//! * [`IrnResponder`] (`irn`): out-of-order placement from IRNETH's receive WQE number and
//!   PSN offset; per-packet ACKs and NACKs with the SACK PSN on the control queue; responses
//!   in their own rPSN space with their own window and timeouts (IRN §5.4).
//!
//! Seed 002's two designs (SPEC T8) are variations of the standard responder:
//!
//! * with a reorder buffer (`reorder`, T8(a)): out-of-order packets are parked whole and
//!   processed in PSN order once the hole before them fills; the hole is NAKed by the
//!   [`HoleRule`](crate::HoleRule) rather than at once;
//! * extended IB (`StandardResponder::ext`, T8(c–d)): any Send or Write packet is placed on
//!   arrival from its extension headers (IRN's placement), Reads and atomics still run in PSN
//!   order from the receive window's deferred actions, and Read responses share the request
//!   PSN space as standard ones do; a hole that meets the rule is NAKed with a bitmap of every
//!   PSN missing.

use crate::payload::TxPayload;
use std::collections::VecDeque;

use irn_wire::{
    AethRepr, CreditCode, Ecn, IbRepr, LocalBuffer, NakCode, Opcode, Psn, RethRepr, RnrTimer,
    Syndrome,
};

use super::sg::place_local;
use super::{packets, Ctrl, QueuePair, Transmit, MAX_MESSAGE};
use crate::config::{RecoveryConfig, Wire};
use crate::memory::{Access, AtomicOp, Key, MemError, Memory};
use crate::state::QpState;
use crate::time::Time;
use crate::window::{Arrival, RecvWindow, SendWindow};
use crate::wr::{Completion, RecvWr, WcOpcode, WcStatus};

mod irn;
mod reorder;
mod standard;

pub(crate) use irn::IrnResponder;
use reorder::{Park, ReorderBuffer};
use standard::RespJob;
pub(crate) use standard::{QueuedAck, StandardResponder};

/// A posted receive WQE.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    pub(crate) wr: RecvWr,
    /// Its receive sequence number (IRN's `recv_WQE_SN`, §5.3.2).
    pub(crate) sn: u32,
    pub(crate) len: u64,
}

/// A message that completes a receive WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvDone {
    sn: u32,
    byte_len: u64,
    imm: Option<u32>,
    inv: Option<u32>,
    write_imm: bool,
}

/// What a responder does once every PSN before a packet has arrived (IRN §5.3.3's 2-bitmap:
/// the "last packet" bit and the information it carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqAction {
    /// The last packet of a Send or Write: MSN + 1, and maybe a receive completion.
    MsgEnd { recv: Option<RecvDone> },
    /// Execute a Read (IRN §5.3.2: not before everything ahead of it arrived).
    Read {
        va: u64,
        rkey: u32,
        len: u64,
        npsn: u32,
        /// Extended IB: the requester's buffer, echoed by the responses (T8(c)).
        local: Option<LocalBuffer>,
    },
    /// Execute an atomic.
    Atomic { va: u64, rkey: u32, op: AtomicOp },
    /// A request that must fail: NAK it and enter the error state.
    Fatal {
        nak: NakCode,
        recv: Option<(u32, WcStatus)>,
    },
}

/// An executed Read or atomic: what answering it (again) takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SavedKind {
    Read {
        va: u64,
        rkey: u32,
        len: u64,
        local: Option<LocalBuffer>,
    },
    Atomic {
        orig: u64,
    },
}

/// A Read or atomic the responder executed, handed to its wire variant to answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Saved {
    /// The request's (first) sPSN.
    pub(crate) psn: Psn,
    /// sPSNs the request occupies (a standard Read: one per response packet).
    pub(crate) npsn: u32,
    /// Response packets.
    pub(crate) npkts: u32,
    pub(crate) msn: u32,
    pub(crate) kind: SavedKind,
}

/// Where a Read response packet's payload comes from, and the PSN a fault is NAKed at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadSource {
    pub(crate) rkey: u32,
    pub(crate) va: u64,
    pub(crate) len: u64,
    pub(crate) nak_psn: Psn,
}

/// Why a request packet was not placed.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// No receive WQE: RNR NAK (IBTA §9.7.5.2.8).
    Rnr,
    /// A fatal error with its NAK code and maybe a failed receive WQE.
    Fatal(NakCode, Option<(u32, WcStatus)>),
}

/// The responder's state.
#[derive(Debug)]
pub(crate) struct Responder {
    /// Posted receive WQEs, oldest first.
    pub(crate) rq: VecDeque<RecvWqe>,
    /// Sequence number of the next receive WQE posted.
    pub(crate) rq_next_sn: u32,
    /// The sPSN receive window: one deferred action per PSN.
    pub(crate) rwin: RecvWindow<ReqAction>,
    /// Message sequence number: messages completed (24 bits).
    pub(crate) msn: u32,
    /// What the wire format decides.
    pub(crate) wire: ResponderWire,
    /// The reorder buffer (T8(a)), if the queue pair has one.
    pub(crate) reorder: Option<ReorderBuffer>,
    /// Extended IB: since when the current hole (packets held beyond the expected PSN) has
    /// been open.
    hole_since: Option<Time>,
    /// The TCP model's delayed ACK: when the oldest in-order segment not yet acknowledged
    /// arrived, and whether any such segment was CE-marked.
    pub(crate) delack: Option<(Time, bool)>,
    /// When the last sequence-error NAK was queued ([`RecoveryConfig::renak_after`]).
    last_seq_nak: Option<Time>,
}

impl Responder {
    pub(crate) fn new(recovery: &RecoveryConfig) -> Responder {
        Responder {
            rq: VecDeque::new(),
            rq_next_sn: 0,
            rwin: RecvWindow::new(Psn::new(0), false, 1),
            msn: 0,
            wire: match recovery.wire {
                Wire::Irn => {
                    ResponderWire::Irn(IrnResponder::new(recovery.retransmission, Psn::new(0)))
                }
                Wire::Standard => ResponderWire::Standard(StandardResponder::default()),
                Wire::ExtIb => ResponderWire::ExtIb(StandardResponder::default()),
            },
            reorder: recovery.reorder_buffer.map(ReorderBuffer::new),
            hole_since: None,
            delack: None,
            last_seq_nak: None,
        }
    }
}

/// The responders of the three wire formats: standard RoCE (what rxe and RoCE NICs run),
/// extended IB (the standard responder's answers and saved state, with packets placed from
/// their own headers in any order) and IRN's.
// A queue pair holds one responder for its whole life, chosen when it is created, inside a
// `QueuePair` that is larger still: boxing IRN's (its rPSN send window) would save nothing
// and add an indirection to every packet.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum ResponderWire {
    /// Standard RoCEv2 (IBTA): packets placed in order, one message at a time.
    Standard(StandardResponder),
    /// Extended IB (T8(c–d)): the standard responder, placing every packet from its own
    /// headers as IRN's does, so its message-in-progress state is not used.
    ExtIb(StandardResponder),
    /// IRN's extensions (IRN §5.3–5.4).
    Irn(IrnResponder),
}

impl ResponderWire {
    /// Whether `op` may come next: the standard responder checks the opcode sequence
    /// (IBTA §9.7.4.1.4); IRN's takes packets in any order.
    fn in_sequence(&self, op: Opcode) -> bool {
        match self {
            ResponderWire::Standard(s) => s.in_sequence(op),
            _ => true,
        }
    }

    /// Whether packets are placed from their own headers, in any order (IRN, extended IB).
    fn places_any(&self) -> bool {
        match self {
            ResponderWire::Standard(_) => false,
            ResponderWire::ExtIb(_) | ResponderWire::Irn(_) => true,
        }
    }

    /// The receive WQE a Send packet belongs to and its packet offset in the message.
    fn send_position(&self, ib: &IbRepr) -> Option<(u32, u32)> {
        match self {
            ResponderWire::Standard(s) => Some(s.send_position(ib.bth.psn)),
            _ => IrnResponder::send_position(ib),
        }
    }

    /// The RETH of the Write a packet belongs to and its packet offset in the message.
    fn write_position(&self, ib: &IbRepr) -> Option<(RethRepr, u32)> {
        match self {
            ResponderWire::Standard(s) => s.write_position(ib),
            _ => IrnResponder::write_position(ib),
        }
    }

    /// The receive WQE the last packet of a Write with immediate consumes.
    fn write_imm_recv(&self, ib: &IbRepr) -> Option<u32> {
        match self {
            ResponderWire::Standard(s) => Some(s.rq_claim_sn),
            _ => ib.irn.as_ref().and_then(|i| i.wqe_sn),
        }
    }

    /// A receive WQE was claimed by a Write with immediate.
    fn claimed_recv(&mut self, sn: u32) {
        if let ResponderWire::Standard(s) = self {
            s.rq_claim_sn = sn.wrapping_add(1);
        }
    }

    /// A Send packet was placed.
    fn placed_send(&mut self, psn: Psn, op: Opcode, sn: u32) {
        if let ResponderWire::Standard(s) = self {
            s.placed_send(psn, op, sn);
        }
    }

    /// A Write packet was placed.
    fn placed_write(&mut self, psn: Psn, op: Opcode, reth: RethRepr) {
        if let ResponderWire::Standard(s) = self {
            s.placed_write(psn, op, reth);
        }
    }

    /// The most response packets one Read may ask for: a standard Read takes as many PSNs,
    /// which must stay within the PSN window (IBTA §9.7.1); IRN's responses have their own
    /// space.
    fn max_read_packets(&self) -> u32 {
        match self {
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => Psn::HALF / 2 - 1,
            ResponderWire::Irn(_) => u32::MAX,
        }
    }

    /// Reads and atomics the responder still owes or keeps for retransmission.
    fn pending_reads(&self) -> usize {
        match self {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s) => s.pending_reads(),
            ResponderWire::Irn(r) => r.q.len(),
        }
    }

    /// Queues the answer of an executed Read or atomic (`keep`: how many the standard
    /// responder saves for duplicates).
    fn respond(&mut self, saved: Saved, keep: usize) {
        match self {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s) => s.respond(saved, keep),
            ResponderWire::Irn(r) => r.respond(saved),
        }
    }

    /// Whether a Read response, atomic response or queued ACK waits to be sent.
    pub(crate) fn has_data(&self) -> bool {
        match self {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s) => !s.jobs.is_empty(),
            ResponderWire::Irn(r) => r.tx_idx < r.q.len() || r.win.in_recovery(),
        }
    }

    /// The queue pair entered the error state: only ACKs and NAKs already decided still go
    /// out; no response does.
    pub(crate) fn on_error(&mut self) {
        match self {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s) => s.jobs.retain(|j| j.is_ack()),
            ResponderWire::Irn(r) => r.q.clear(),
        }
    }

    /// Whether an ACK or NAK heads the standard responder's queue (sent before any data,
    /// unpaced). IRN's go on the control queue instead.
    pub(crate) fn ack_first(&self) -> bool {
        match self {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s) => {
                s.jobs.front().is_some_and(RespJob::is_ack)
            }
            ResponderWire::Irn(_) => false,
        }
    }

    /// Takes the ACK or NAK heading the standard responder's queue.
    pub(crate) fn pop_queued_ack(&mut self) -> Option<QueuedAck> {
        match self {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s)
                if s.jobs.front().is_some_and(RespJob::is_ack) =>
            {
                s.jobs.pop_front().and_then(RespJob::into_ack)
            }
            _ => None,
        }
    }

    /// In the error state: the next ACK or NAK decided before the error, dropping any
    /// response queued ahead of it.
    pub(crate) fn pop_decided_ack(&mut self) -> Option<QueuedAck> {
        let (ResponderWire::Standard(s) | ResponderWire::ExtIb(s)) = self else {
            return None;
        };
        while let Some(j) = s.jobs.pop_front() {
            if let Some(a) = j.into_ack() {
                return Some(a);
            }
        }
        None
    }

    /// Whether the standard responder's queue holds anything (ACKs, NAKs or responses).
    pub(crate) fn has_queued(&self) -> bool {
        match self {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s) => !s.jobs.is_empty(),
            ResponderWire::Irn(_) => false,
        }
    }

    /// Whether IRN's Read responder has a packet to send: a retransmission, or a new one its
    /// window admits (T7; in RTR as well).
    pub(crate) fn may_send_responses(&self, bdp_cap: Option<u32>) -> bool {
        match self {
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => false,
            ResponderWire::Irn(r) => r.win.in_recovery() || r.may_send_new(bdp_cap),
        }
    }

    /// The response window of IRN's Read responder (`None` for the standard responder).
    pub(crate) fn response_window(&self) -> Option<&SendWindow> {
        match self {
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => None,
            ResponderWire::Irn(r) => Some(&r.win),
        }
    }

    pub(crate) fn response_window_mut(&mut self) -> Option<&mut SendWindow> {
        match self {
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => None,
            ResponderWire::Irn(r) => Some(&mut r.win),
        }
    }
}

impl QueuePair {
    /// A request packet (Send, Write, Read, atomic) from the peer's requester; with a reorder
    /// buffer (T8(a)), then every parked packet the expected PSN reaches, in PSN order.
    pub(super) fn handle_request<M: Memory>(
        &mut self,
        now: Time,
        ib: &IbRepr,
        payload: &[u8],
        ce: bool,
        mem: &mut M,
    ) {
        self.handle_request_one(now, ib, payload, ce, mem);
        while self.state != QpState::Err {
            let e = self.rsp.rwin.epsn();
            let Some(p) = self.rsp.reorder.as_mut().and_then(|r| r.take(e)) else {
                break;
            };
            self.handle_request_one(now, &p.ib, &p.payload, p.ce, mem);
        }
        self.check_hole(now);
    }

    fn handle_request_one<M: Memory>(
        &mut self,
        now: Time,
        ib: &IbRepr,
        payload: &[u8],
        ce: bool,
        mem: &mut M,
    ) {
        let psn = ib.bth.psn;
        match self.rsp.rwin.classify(psn) {
            Arrival::Duplicate => {
                self.counters.duplicates += 1;
                match self.rsp.wire {
                    // Responses travel in their own space with their own timer; re-ACK.
                    ResponderWire::Irn(_) => {
                        self.queue_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn), ce)
                    }
                    ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => {
                        self.duplicate_standard(ib)
                    }
                }
            }
            Arrival::OutOfOrder => {
                if let Some(rb) = self.rsp.reorder.as_mut() {
                    match rb.park(self.rsp.rwin.epsn(), ib, payload, ce, now) {
                        Park::Parked { bytes } => {
                            self.counters.out_of_order += 1;
                            self.counters.reorder_parked += 1;
                            self.counters.reorder_bytes += bytes;
                            self.counters.reorder_peak_bytes =
                                self.counters.reorder_peak_bytes.max(rb.bytes());
                            return;
                        }
                        Park::Duplicate => {
                            self.counters.duplicates += 1;
                            return;
                        }
                        // Beyond the buffer: discarded and NAKed like standard RoCE.
                        Park::Full => {}
                    }
                }
                self.counters.out_of_order += 1;
                if self.mode().restarts_messages() {
                    // Go-back-0 (T3): the partial message is discarded; the requester must
                    // start it again from its first packet.
                    if let ResponderWire::Standard(s) | ResponderWire::ExtIb(s) = &mut self.rsp.wire
                    {
                        if let Some(first_psn) = s.discard_message() {
                            self.rsp.rwin.set_epsn(first_psn);
                        }
                    }
                }
                // One NAK per sequence error (IBTA §9.7.5.1.3, Linux rxe), or again every
                // `renak_after` while out-of-order packets keep coming.
                let again = match (self.cfg.recovery.renak_after, self.rsp.last_seq_nak) {
                    (Some(d), Some(t)) => now.since(t) >= d,
                    _ => false,
                };
                if !self.rsp.rwin.nak_sent || again {
                    self.rsp.rwin.nak_sent = true;
                    self.rsp.last_seq_nak = Some(now);
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
                        self.queue_nak_seq(ce);
                        return;
                    }
                    Err(Refused::Rnr) => {
                        self.counters.rnr_naks_sent += 1;
                        let timer = RnrTimer(self.attr.min_rnr_timer);
                        match self.rsp.wire {
                            ResponderWire::Irn(_) => self.ctrl.push_back(Ctrl::Ack {
                                psn,
                                syndrome: Syndrome::RnrNak(timer),
                                msn: self.rsp.msn,
                                sack: None,
                                lost: None,
                                becn: ce,
                            }),
                            ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => {
                                self.push_resp_ack(psn, Syndrome::RnrNak(timer), ce)
                            }
                        }
                        return;
                    }
                    Err(Refused::Fatal(nak, recv)) => Some(ReqAction::Fatal { nak, recv }),
                };
                let standard = matches!(
                    self.rsp.wire,
                    ResponderWire::Standard(_) | ResponderWire::ExtIb(_)
                );
                let mut covers = 1;
                if let Some(a @ ReqAction::Read { npsn, .. }) = action {
                    if standard && npsn > 1 {
                        if !self.rsp.wire.places_any() {
                            // A standard Read takes ⌈len / MTU⌉ PSNs (validated to fit the PSN
                            // window): run it and step the expected PSN over them in one go.
                            self.run_action(psn, a, mem);
                            self.rsp.rwin.set_epsn(psn.add(npsn));
                            self.rsp.rwin.nak_sent = false;
                            return;
                        }
                        // Extended IB: it occupies them in the receive window, and runs once
                        // everything before it has arrived.
                        covers = npsn;
                    }
                }
                let before = self.rsp.rwin.epsn();
                let mut ready = self.rsp.rwin.arrive(psn, covers, action);
                while let Some((p, action)) = ready {
                    if let Some(a) = action {
                        self.run_action(p, a, mem);
                        if self.state == QpState::Err {
                            return;
                        }
                    }
                    ready = self.rsp.rwin.pop_ready();
                }
                if self.rsp.rwin.epsn() != before {
                    // The hole, if any, moved: it is open from now.
                    self.rsp.hole_since = (self.rsp.rwin.held() > 0).then_some(now);
                } else if ahead && self.rsp.hole_since.is_none() {
                    self.rsp.hole_since = Some(now);
                }
                match self.rsp.wire {
                    ResponderWire::Irn(_) if ahead => self.queue_nack(psn, ce),
                    // With NACK bitmaps, anything that leaves a hole open says so, with the
                    // bitmap: the newest NACK then stands for all before it.
                    ResponderWire::Irn(_)
                        if self.cfg.recovery.nack_bitmap && self.rsp.rwin.held() > 0 =>
                    {
                        self.queue_nack(psn, ce)
                    }
                    ResponderWire::Irn(_) => {
                        // The TCP model's delayed ACK (RFC 5681 §4.2): every second in-order
                        // segment, or at the timer; a segment that fills a hole, or arrives
                        // while later ones are held, is acknowledged at once.
                        let in_order =
                            self.rsp.rwin.epsn() == before.add(covers) && self.rsp.rwin.held() == 0;
                        let delay = self.cfg.recovery.tcp.and_then(|t| t.delayed_ack);
                        match self.rsp.delack {
                            None if delay.is_some() && in_order => {
                                self.rsp.delack = Some((now, ce));
                            }
                            Some((_, marked)) => self.queue_ack(
                                Syndrome::Ack(CreditCode::INVALID),
                                Some(psn),
                                ce || marked,
                            ),
                            None => {
                                self.queue_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn), ce)
                            }
                        }
                    }
                    ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => {
                        if ib.bth.ack_req && !ib.bth.opcode.is_read_or_atomic_request() {
                            // The ACK echoes this packet's mark (BECN): a controller that reads
                            // echoes asks for an ACK on every packet
                            // (Controller::ack_interval_bytes).
                            let e = self.rsp.rwin.epsn().sub(1);
                            self.push_resp_ack(e, Syndrome::Ack(CreditCode::INVALID), ce);
                        }
                    }
                }
            }
        }
    }

    /// The TCP model's delayed-ACK deadline, if an in-order segment waits for its ACK.
    pub(super) fn delayed_ack_deadline(&self) -> Option<Time> {
        let delay = self.cfg.recovery.tcp?.delayed_ack?;
        self.rsp.delack.map(|(at, _)| at + delay)
    }

    /// The delayed-ACK timer expired: acknowledge what arrived.
    pub(super) fn delayed_ack_timeout(&mut self) {
        if let Some((_, marked)) = self.rsp.delack {
            let e = self.rsp.rwin.epsn().sub(1);
            self.queue_ack(Syndrome::Ack(CreditCode::INVALID), Some(e), marked);
        }
    }

    /// Since when the hole at the expected PSN has been open, for the [`HoleRule`]: the oldest
    /// parked packet's arrival (reorder buffer) or the hole's start (extended IB). `None` when
    /// there is no hole, or it was NAKed already.
    ///
    /// [`HoleRule`]: crate::HoleRule
    fn hole_open_since(&self) -> Option<(Time, u32)> {
        if self.rsp.rwin.nak_sent || self.state == QpState::Err {
            return None;
        }
        if let Some(rb) = &self.rsp.reorder {
            return rb.oldest().map(|t| (t, rb.len()));
        }
        if self.rsp.wire.places_any() && self.rsp.rwin.held() > 0 {
            return self.rsp.hole_since.map(|t| (t, self.rsp.rwin.held()));
        }
        None
    }

    /// When the open hole meets the rule's delay (the responder's hole timer, T8(a), T8(d)).
    pub(super) fn responder_hole_deadline(&self) -> Option<Time> {
        let rule = self.cfg.recovery.hole_rule?;
        if !matches!(
            self.rsp.wire,
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_)
        ) {
            return None;
        }
        self.hole_open_since().map(|(t, _)| t + rule.delay)
    }

    /// Applies the [`HoleRule`](crate::HoleRule) to the hole at the expected PSN: once it has
    /// been open the rule's delay or has its threshold of packets behind it, NAK it — a
    /// sequence-error NAK (reorder buffer: the standard requester goes back N), or one with the
    /// bitmap of every missing PSN (extended IB: the requester resends exactly those).
    pub(super) fn check_hole(&mut self, now: Time) {
        let Some(rule) = self.cfg.recovery.hole_rule else {
            return;
        };
        if !matches!(
            self.rsp.wire,
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_)
        ) {
            return;
        }
        let Some((since, behind)) = self.hole_open_since() else {
            return;
        };
        if behind < rule.threshold && now.since(since) < rule.delay {
            return;
        }
        self.rsp.rwin.nak_sent = true;
        self.counters.early_naks_sent += 1;
        if self.rsp.wire.places_any() {
            self.counters.nacks_sent += 1;
            let e = self.rsp.rwin.epsn();
            let lost = self.rsp.rwin.loss_bitmap();
            let msn = self.rsp.msn;
            if let ResponderWire::Standard(s) | ResponderWire::ExtIb(s) = &mut self.rsp.wire {
                s.push_loss_nak(e, msn, lost);
            }
        } else {
            self.queue_nak_seq(false);
        }
    }

    /// A sequence-error NAK for a discarded packet: the expected PSN, no SACK (the packet
    /// did not stay).
    fn queue_nak_seq(&mut self, ce: bool) {
        self.counters.nacks_sent += 1;
        let e = self.rsp.rwin.epsn();
        match self.rsp.wire {
            ResponderWire::Irn(_) => self.ctrl.push_back(Ctrl::Ack {
                psn: e,
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: self.rsp.msn,
                sack: None,
                lost: None,
                becn: ce,
            }),
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => {
                self.push_resp_ack(e, Syndrome::Nak(NakCode::PsnSequenceError), ce)
            }
        }
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
        let psn = ib.bth.psn;
        let plen = ib.payload_len as u64;
        let (first, last) = (op.is_first(), op.is_last());
        if plen > u64::from(mtu) || (!last && plen != u64::from(mtu)) {
            return Err(Refused::Fatal(NakCode::InvalidRequest, None));
        }
        let (is_send, is_write) = (op.is_send(), op.is_write());
        if !self.rsp.wire.in_sequence(op) {
            return Err(Refused::Fatal(NakCode::InvalidRequest, None));
        }
        if is_send {
            let Some((sn, off)) = self.rsp.wire.send_position(ib) else {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
            };
            if first != (off == 0) {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
            }
            let Some(rwqe) = self.recv_wqe(sn) else {
                return Err(Refused::Rnr);
            };
            let (sg, cap) = (&rwqe.wr.sg_list, rwqe.len);
            let at = u64::from(off) * u64::from(mtu);
            if at + plen > cap {
                return Err(Refused::Fatal(
                    NakCode::InvalidRequest,
                    Some((sn, WcStatus::LocLenErr)),
                ));
            }
            if place_local(mem, sg, at, plen, payload).is_err() {
                return Err(Refused::Fatal(
                    NakCode::RemoteOperationalError,
                    Some((sn, WcStatus::LocProtErr)),
                ));
            }
            self.rsp.wire.placed_send(psn, op, sn);
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
            let Some((reth, off)) = self.rsp.wire.write_position(ib) else {
                return Err(Refused::Fatal(NakCode::InvalidRequest, None));
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
            let mut recv = None;
            if last && op.has_immediate() {
                let Some(sn) = self.rsp.wire.write_imm_recv(ib) else {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                };
                if self.recv_wqe(sn).is_none() {
                    return Err(Refused::Rnr);
                }
                self.rsp.wire.claimed_recv(sn);
                recv = Some(RecvDone {
                    sn,
                    byte_len: total,
                    imm: ib.imm,
                    inv: None,
                    write_imm: true,
                });
            }
            self.rsp.wire.placed_write(psn, op, reth);
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
                if len > MAX_MESSAGE || packets(len, mtu) > self.rsp.wire.max_read_packets() {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                if mem
                    .check(Key::Remote(reth.rkey), reth.va, len, Access::REMOTE_READ)
                    .is_err()
                {
                    return Err(Refused::Fatal(NakCode::RemoteAccessError, None));
                }
                if self.rsp.wire.pending_reads() >= self.read_capacity() {
                    return Err(Refused::Fatal(NakCode::InvalidRequest, None));
                }
                Ok(Some(ReqAction::Read {
                    va: reth.va,
                    rkey: reth.rkey,
                    len,
                    npsn: packets(len, mtu),
                    local: ib.irn.as_ref().and_then(|i| i.local),
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
                if self.rsp.wire.pending_reads() >= self.read_capacity() {
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

    /// How many Reads and atomics the responder holds at once: `max_dest_rd_atomic`, with
    /// room for the requester counting a Read done before its last read ACK reaches us.
    fn read_capacity(&self) -> usize {
        usize::from(self.attr.max_dest_rd_atomic.max(1)) * 2 + 16
    }

    /// How many executed Reads and atomics the standard responder keeps to answer duplicates.
    fn saved_capacity(&self) -> usize {
        usize::from(self.attr.max_dest_rd_atomic.max(1)).max(16)
    }

    fn recv_wqe(&self, sn: u32) -> Option<&RecvWqe> {
        let head = self.rsp.rq.front()?.sn;
        let i = sn.wrapping_sub(head) as usize;
        self.rsp.rq.get(i).filter(|r| r.sn == sn)
    }

    /// Runs a request's deferred action once every PSN before it has arrived (IRN §5.3.3's
    /// 2-bitmap; in order for the standard responder).
    fn run_action<M: Memory>(&mut self, psn: Psn, action: ReqAction, mem: &mut M) {
        match action {
            ReqAction::MsgEnd { recv } => {
                self.rsp.msn = (self.rsp.msn + 1) & Psn::MASK;
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
                local,
            } => {
                self.rsp.msn = (self.rsp.msn + 1) & Psn::MASK;
                let msn = self.rsp.msn;
                let npkts = packets(len, self.mtu());
                let saved = Saved {
                    psn,
                    npsn,
                    npkts,
                    msn,
                    kind: SavedKind::Read {
                        va,
                        rkey,
                        len,
                        local,
                    },
                };
                let keep = self.saved_capacity();
                self.rsp.wire.respond(saved, keep);
            }
            ReqAction::Atomic { va, rkey, op } => {
                let orig = match mem.atomic(rkey, va, op) {
                    Ok(v) => v,
                    Err(MemError::Misaligned) => {
                        return self.responder_fatal(psn, NakCode::InvalidRequest, None)
                    }
                    Err(_) => return self.responder_fatal(psn, NakCode::RemoteAccessError, None),
                };
                self.rsp.msn = (self.rsp.msn + 1) & Psn::MASK;
                let msn = self.rsp.msn;
                let saved = Saved {
                    psn,
                    npsn: 1,
                    npkts: 1,
                    msn,
                    kind: SavedKind::Atomic { orig },
                };
                let keep = self.saved_capacity();
                self.rsp.wire.respond(saved, keep);
            }
            ReqAction::Fatal { nak, recv } => self.responder_fatal(psn, nak, recv),
        }
    }

    /// A request the responder cannot execute: NAK it (IBTA §9.7.5.2) and enter the error state
    /// (class C/D errors end an RC connection).
    fn responder_fatal(&mut self, psn: Psn, nak: NakCode, recv: Option<(u32, WcStatus)>) {
        self.counters.error_naks_sent += 1;
        if let Some((sn, status)) = recv {
            if self.recv_wqe(sn).is_some() {
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
        match self.rsp.wire {
            ResponderWire::Irn(_) => self.ctrl.push_back(Ctrl::Ack {
                psn,
                syndrome: Syndrome::Nak(nak),
                msn: self.rsp.msn,
                sack: None,
                lost: None,
                becn: false,
            }),
            ResponderWire::Standard(ref mut s) | ResponderWire::ExtIb(ref mut s) => {
                s.push_ack(psn, Syndrome::Nak(nak), self.rsp.msn, false)
            }
        }
        self.enter_error();
    }

    /// Completes the receive WQE `sn`, which is at the head of the receive queue: messages
    /// complete in PSN order and consume receive WQEs in posting order.
    fn complete_recv(&mut self, r: RecvDone, status: WcStatus) {
        let Some(front) = self.rsp.rq.front() else {
            return;
        };
        if front.sn != r.sn {
            // Cannot happen with a well-behaved peer; a hostile one gets nothing.
            self.counters.unexpected += 1;
            return;
        }
        let Some(w) = self.rsp.rq.pop_front() else {
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
            src_qp: None,
        });
    }

    /// The responder's next data packet, built in `out` (`true` if there is one): a standard
    /// response in order, or IRN's rPSN stream.
    pub(super) fn next_response<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        now: Time,
        mem: &'m M,
        payload: &mut P,
        out: &mut Transmit,
    ) -> bool {
        let t = match self.rsp.wire {
            ResponderWire::Irn(_) => self.next_response_irn(now, mem, payload),
            ResponderWire::Standard(_) | ResponderWire::ExtIb(_) => {
                self.next_response_standard(mem, payload)
            }
        };
        if let Some(t) = t {
            *out = t;
            true
        } else {
            false
        }
    }

    /// Completes a Read response packet: the AETH on its first and last packets, `src.len`
    /// payload bytes read from the responder's memory. If the region went away under the Read,
    /// queues a remote-access NAK at `src.nak_psn` instead (`poll_transmit` sends it) and
    /// returns `None`.
    fn finish_read_response<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        mut ib: IbRepr,
        with_aeth: bool,
        msn: u32,
        src: ReadSource,
        mem: &'m M,
        payload: &mut P,
    ) -> Option<Transmit> {
        if with_aeth {
            ib.aeth = Some(AethRepr {
                syndrome: Syndrome::Ack(CreditCode::INVALID),
                msn,
            });
        }
        ib.payload_len = src.len as usize;
        if M::HOLDS_BYTES && src.len > 0 {
            match mem.lend(Key::Remote(src.rkey), src.va, src.len) {
                Ok(Some(b)) => payload.gather(b),
                // A buffer released under a registered region reads as zeros.
                Ok(None) => payload.fill(src.len as usize).fill(0),
                Err(_) => {
                    payload.clear();
                    self.responder_fatal(src.nak_psn, NakCode::RemoteAccessError, None);
                    return None;
                }
            }
        }
        Some(Transmit { ib, ecn: Ecn::Ect0 })
    }
}
