//! The completer role: the requester's receive side (IBTA §9.7.5–9.7.6; rxe's `rxe_comp.c`).
//!
//! It takes ACKs, NAKs and RNR NAKs in the sPSN space (IRN's carry a SACK PSN, §3.1), Read
//! responses and atomic ACKs (IRN's in their own rPSN space, answered with read (N)ACKs,
//! §5.4), feeds the congestion controller its ACK, RTT and ECN-echo signals, retires send WQEs
//! with exactly one completion each in posting order, and recovers after the requester's
//! retransmission timeout: go-back-0 from the message's first packet (T3), go-back-N (T4) or
//! IRN's selective repeat (T5).

use irn_wire::{CreditCode, IbRepr, NakCode, Opcode, Psn, Syndrome};

use super::sg::scatter;
use super::{says_no_more, Ctrl, QueuePair};
use crate::config::Retransmission;
use crate::memory::{Key, Memory};
use crate::state::QpState;
use crate::time::{Dur, Time};
use crate::window::{Arrival, RecvWindow};
use crate::wr::{Completion, WcStatus};

/// The completer's state.
#[derive(Debug)]
pub(crate) struct Completer {
    /// IRN: the rPSN receive window of Read and atomic responses.
    pub(crate) rrecv: RecvWindow<()>,
    /// Standard RoCE: a go-back for a Read response gap is pending (sent once per gap).
    pub(crate) read_gap: Option<Psn>,
    /// An RNR NAK holds the requester until this time...
    pub(crate) rnr_until: Option<Time>,
    /// ...then it resends from this PSN.
    pub(crate) rnr_psn: Psn,
    /// RNR NAKs in a row without progress (against `rnr_retry`).
    pub(crate) rnr_retries: u32,
    /// T8(b): since when the Read hole at the in-order point has been open.
    pub(crate) hole_since: Option<Time>,
    /// T8(b): the current hole's chunks were re-requested (until the in-order point moves).
    pub(crate) hole_asked: bool,
    /// T8(b): responses received beyond the in-order point.
    pub(crate) ahead: u32,
    /// T8(b): the responder acknowledged request PSNs up to here, beyond a Read still missing
    /// responses.
    pub(crate) peer_done: Option<Psn>,
}

impl Completer {
    pub(crate) fn new() -> Completer {
        Completer {
            rrecv: RecvWindow::new(Psn::new(0), false, 1),
            read_gap: None,
            rnr_until: None,
            rnr_psn: Psn::new(0),
            rnr_retries: 0,
            hole_since: None,
            hole_asked: false,
            ahead: 0,
            peer_done: None,
        }
    }
}

impl QueuePair {
    pub(super) fn handle_ack(&mut self, now: Time, ib: &IbRepr) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.counters.dropped_state += 1;
            return;
        }
        let Some(aeth) = ib.aeth else {
            self.counters.dropped_invalid += 1;
            return;
        };
        let psn = ib.bth.psn;
        let sack = ib.irn.as_ref().and_then(|i| i.sack_psn);
        let echo = ib.bth.becn;
        let per_packet = self.wire().acks_every_packet();
        if per_packet
            && matches!(
                aeth.syndrome,
                Syndrome::Ack(_) | Syndrome::Nak(NakCode::PsnSequenceError)
            )
        {
            // ECN echo accounting (SPEC T9): an IRN ACK or NACK answers one arrived packet,
            // marked or not — NACKs too, or a controller would see no marks while a hole is
            // open, which is when they matter. (Unmarked ones waiting together in the
            // responder collapse into the newest, and marked ones never do, so a controller
            // counting echoes against (N)ACKs sees a somewhat larger marked fraction.)
            let unit = u64::from(self.mtu());
            self.cc.on_ecn_echo(now, if echo { unit } else { 0 }, unit);
        }
        match aeth.syndrome {
            Syndrome::Ack(_) => {
                let bytes = self.ack_requests(now, psn.add(1));
                if !per_packet {
                    self.echo_standard(now, echo, bytes);
                }
                if let Some(s) = sack {
                    self.req.swin.sack(now, s);
                }
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.counters.nacks_received += 1;
                if !per_packet {
                    self.echo_standard(now, echo, 0);
                }
                match self.mode() {
                    Retransmission::GoBack0 | Retransmission::GoBackN
                        if self.req.swin.una().distance(psn) < 0 =>
                    {
                        // Before the oldest unacknowledged PSN. Go-back-0's responder
                        // discarded the partial message holding `una` and asks for it from its
                        // first packet; anything else is a stale or duplicated NAK.
                        let una = self.req.swin.una();
                        let restart = self.mode() == Retransmission::GoBack0
                            && self
                                .req
                                .sq
                                .iter()
                                .any(|w| w.contains(una) && w.first_psn == psn);
                        if restart {
                            self.cc.on_loss(now);
                            self.req.swin.rewind(psn);
                            self.req.swin.restart_timer(now);
                        } else {
                            self.counters.unexpected += 1;
                        }
                    }
                    Retransmission::GoBack0 | Retransmission::GoBackN => {
                        self.cc.on_loss(now);
                        self.ack_requests(now, psn);
                        self.req.swin.go_back(psn);
                    }
                    Retransmission::SelectiveRepeat | Retransmission::SelectiveRepeatNoSack => {
                        // IRN's NACK is its loss signal; the TCP model's is the fast
                        // retransmit that DupThresh SACKs trigger later (`next_request`).
                        if !self.tcp() {
                            self.cc.on_loss(now);
                        }
                        self.ack_requests(now, psn);
                        let lost = ib.irn.as_ref().and_then(|i| i.loss_bitmap);
                        if !self.req.swin.sack_nack(now, psn, sack, lost.as_ref()) {
                            self.counters.dropped_invalid += 1;
                        }
                        self.req.swin.enter_recovery(false);
                    }
                    Retransmission::Precise => {
                        self.cc.on_loss(now);
                        self.ack_requests(now, psn);
                        self.precise_nak(now, psn, ib);
                    }
                }
            }
            Syndrome::RnrNak(timer) => {
                self.counters.rnr_naks_received += 1;
                if !self.req.swin.outstanding(psn) {
                    self.counters.unexpected += 1;
                    return;
                }
                self.ack_requests(now, psn);
                self.cmp.rnr_retries += 1;
                // rnr_retry 7 means "retry forever" (IBTA §9.7.5.2.8).
                if self.attr.rnr_retry < 7 && self.cmp.rnr_retries > u32::from(self.attr.rnr_retry)
                {
                    self.fail_send(Some(psn), WcStatus::RnrRetryExcErr);
                    return;
                }
                self.cmp.rnr_psn = psn;
                self.cmp.rnr_until = Some(now + Dur::from_micros(u64::from(timer.micros())));
                self.req.swin.peer_alive(now);
            }
            Syndrome::Nak(code) => {
                self.counters.nacks_received += 1;
                let status = match code {
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    _ => WcStatus::RemInvReqErr,
                };
                if self.req.swin.outstanding(psn) {
                    self.ack_requests(now, psn);
                } else if !self
                    .req
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

    /// Extended IB's NAK (T8(d)): every PSN from `epsn` to the highest the bitmap reaches that
    /// it does not mark lost has arrived; the marked ones are resent, exactly those. A NAK
    /// without a bitmap (nothing arrived beyond the hole) resends from `epsn`.
    fn precise_nak(&mut self, now: Time, epsn: Psn, ib: &IbRepr) {
        let irn = ib.irn.unwrap_or_default();
        let (Some(lost), Some(highest)) = (irn.loss_bitmap, irn.sack_psn) else {
            self.req.swin.go_back(epsn);
            return;
        };
        let span = epsn.distance(highest);
        // The highest PSN itself (offset `span`) arrived and may lie just past the last word.
        if span <= 0 || span as usize > lost.capacity() {
            self.counters.dropped_invalid += 1;
            return;
        }
        for i in 0..=span as usize {
            if !lost.is_set(i) {
                self.req.swin.sack(now, epsn.add(i as u32));
            }
        }
        self.req.swin.enter_recovery(false);
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
    pub(super) fn ack_requests(&mut self, now: Time, mut cum: Psn) -> u64 {
        if !self.wire().splits_response_psns() {
            // Standard RoCE: an ACK beyond a Read whose responses are missing implies they were
            // lost (IBTA §9.7.5.1.2, implied NAK): resend the Read from the missing response.
            if let Some(w) = self
                .req
                .sq
                .iter()
                .find(|w| w.started && w.needs_response() && w.resp_rcvd < w.npkts)
            {
                let expected = w.first_psn.add(w.resp_rcvd);
                if expected.distance(cum) > 0 && self.rereads() {
                    // T8(b): the responder is past the Read; its missing responses are
                    // re-requested by the hole rule.
                    let done = cum;
                    cum = expected;
                    self.note_peer_done(now, done);
                } else if expected.distance(cum) > 0 {
                    cum = expected;
                    if self.cmp.read_gap != Some(expected) && self.req.swin.outstanding(expected) {
                        self.cmp.read_gap = Some(expected);
                        self.req.swin.ack(now, expected);
                        self.req.swin.go_back(expected);
                    }
                }
            }
        }
        let acked = self.req.swin.ack(now, cum);
        if acked.spurious_timeout && self.req.tx_idx >= self.req.sq.len() {
            // Nothing new will draw the next answer: probe the tail.
            self.req.swin.probe_tail();
        }
        let bytes = u64::from(acked.psns) * u64::from(self.mtu());
        if acked.psns > 0 {
            self.cmp.rnr_retries = 0;
            self.cc.on_ack(now, bytes, acked.rtt);
        }
        if acked.undecided_timeout {
            // Unless new data went out since the timeout, probe the tail for the deciding
            // answer.
            self.req.swin.probe_held_timeout();
        }
        let una = self.req.swin.una();
        for w in self.req.sq.iter_mut() {
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
    pub(super) fn handle_response<M: Memory>(
        &mut self,
        now: Time,
        ib: &IbRepr,
        payload: &[u8],
        mem: &mut M,
    ) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.counters.dropped_state += 1;
            return;
        }
        let op = ib.bth.opcode;
        let is_atomic_ack = op == Opcode::RC_ATOMIC_ACKNOWLEDGE;
        let is_read_resp = op.is_read_response();
        if !is_atomic_ack && !is_read_resp {
            self.counters.dropped_invalid += 1;
            return;
        }
        if self.wire().splits_response_psns() {
            self.handle_response_irn(now, ib, payload, mem, is_atomic_ack);
        } else if self.rereads() {
            self.handle_response_holes(now, ib, payload, mem, is_atomic_ack);
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
            .req
            .sq
            .iter()
            .position(|w| w.started && w.needs_response() && w.resp_rcvd < w.npkts)
        else {
            self.counters.unexpected += 1;
            return;
        };
        let expected = self.req.sq[idx].first_psn.add(self.req.sq[idx].resp_rcvd);
        let d = expected.distance(psn);
        if d < 0 {
            self.counters.duplicates += 1;
            return;
        }
        if d > 0 {
            self.counters.out_of_order += 1;
            if self.req.sq[idx].contains(psn) && self.cmp.read_gap != Some(expected) {
                // A response is missing: ask again from it (go-back-N on the Read).
                self.cmp.read_gap = Some(expected);
                self.req.swin.ack(now, expected);
                self.req.swin.go_back(expected);
            }
            return;
        }
        if let Err(status) = self.accept_response(idx, ib, payload, mem, is_atomic_ack) {
            self.fail_send(Some(psn), status);
            return;
        }
        self.req.sq[idx].resp_rcvd += 1;
        self.cmp.read_gap = None;
        // A response acknowledges every request PSN up to its own.
        self.ack_requests(now, psn.add(1));
    }

    /// Places one in-order (standard) or in-window (IRN) response for WQE `idx`; returns the
    /// completion status if the response is unacceptable.
    pub(super) fn accept_response<M: Memory>(
        &mut self,
        idx: usize,
        ib: &IbRepr,
        payload: &[u8],
        mem: &mut M,
        is_atomic_ack: bool,
    ) -> Result<(), WcStatus> {
        let mtu = self.mtu();
        let psn = ib.bth.psn;
        let w = &self.req.sq[idx];
        let k = if self.wire().splits_response_psns() {
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
        // A part asked for again (T8(b)) ends with its own LAST or ONLY packet.
        if (op_last != last && !(op_last && self.part_may_end())) || ib.payload_len as u64 != want {
            return Err(WcStatus::BadRespErr);
        }
        if M::HOLDS_BYTES {
            scatter(mem, &w.wr.sg_list, off, payload).map_err(|_| WcStatus::LocProtErr)?;
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
        match self.cmp.rrecv.classify(psn) {
            Arrival::Duplicate => {
                self.counters.duplicates += 1;
                self.queue_read_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn));
            }
            Arrival::OutOfOrder => {
                self.counters.out_of_order += 1;
                if !self.cmp.rrecv.nak_sent {
                    self.cmp.rrecv.nak_sent = true;
                    // Discarded: no SACK for it.
                    self.queue_read_ack(Syndrome::Nak(NakCode::PsnSequenceError), None);
                }
            }
            a @ (Arrival::Expected | Arrival::Ahead(_)) => {
                let Some(idx) = self.req.sq.iter().position(|w| {
                    let d = w.rpsn.distance(psn);
                    w.started && w.needs_response() && d >= 0 && (d as u32) < w.npkts
                }) else {
                    self.counters.unexpected += 1;
                    return;
                };
                if let Err(status) = self.accept_response(idx, ib, payload, mem, is_atomic_ack) {
                    self.fail_send(self.req.sq.get(idx).map(|w| w.first_psn), status);
                    return;
                }
                // The rPSN space has no actions to run: what is ready only advances it.
                let advanced = self.cmp.rrecv.arrive(psn, 1, None).is_some();
                while self.cmp.rrecv.pop_ready().is_some() {}
                if advanced {
                    self.credit_responses();
                    // Responses moving in order are progress of the requester's outstanding
                    // Reads: the local ACK timeout measures time without a response, so it
                    // restarts and the retry count resets, as an ACK would (IBTA §9.7.6.1.3).
                    // Without this, a long Read whose responses recover slowly through IRN's
                    // read NACKs exhausts `retry_cnt` while data is still arriving.
                    self.req.swin.progress(now);
                }
                if matches!(a, Arrival::Ahead(_)) {
                    self.counters.out_of_order += 1;
                    self.queue_read_ack(Syndrome::Nak(NakCode::PsnSequenceError), Some(psn));
                } else if self.cfg.recovery.nack_bitmap && self.cmp.rrecv.held() > 0 {
                    // With NACK bitmaps, an arrival that leaves a hole open says so.
                    self.queue_read_ack(Syndrome::Nak(NakCode::PsnSequenceError), Some(psn));
                } else {
                    self.queue_read_ack(Syndrome::Ack(CreditCode::INVALID), Some(psn));
                }
            }
        }
    }

    /// IRN: counts in-order responses against their WQEs after the rPSN cumulative point moved.
    fn credit_responses(&mut self) {
        let e = self.cmp.rrecv.epsn();
        for w in self.req.sq.iter_mut() {
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

    /// A read (N)ACK in the rPSN space (IRN §5.4). With [`nack_bitmap`], as the responder's
    /// NACKs ([`QueuePair::queue_nack`]): a NACK carries the loss bitmap up to the highest
    /// response that arrived (within 512 of the hole), and replaces the read (N)ACK waiting
    /// before it, as a plain read ACK does once nothing is held.
    ///
    /// [`nack_bitmap`]: crate::RecoveryConfig::nack_bitmap
    fn queue_read_ack(&mut self, syndrome: Syndrome, sack: Option<Psn>) {
        let (psn, is_nak) = match syndrome {
            Syndrome::Nak(_) => (self.cmp.rrecv.epsn(), true),
            _ => (self.cmp.rrecv.epsn().sub(1), false),
        };
        if is_nak {
            self.counters.nacks_sent += 1;
        } else {
            self.counters.acks_sent += 1;
        }
        let bitmaps = self.cfg.recovery.nack_bitmap;
        let bitmap = match sack {
            Some(s) if bitmaps && is_nak => self.cmp.rrecv.nack_bitmap(s),
            _ => None,
        };
        let (sack, lost) = match bitmap {
            Some((b, highest)) => (Some(highest), Some(b)),
            None => (sack, None),
        };
        if bitmaps && (lost.is_some() || self.cmp.rrecv.held() == 0) {
            if let Some(Ctrl::ReadAck { syndrome, lost, .. }) = self.ctrl.back() {
                if says_no_more(syndrome, lost, true) {
                    self.counters.unsend_ack(*syndrome);
                    self.ctrl.pop_back();
                }
            }
        }
        self.ctrl.push_back(Ctrl::ReadAck {
            psn,
            syndrome,
            sack,
            lost,
        });
    }

    /// Completes the send WQEs at the head of the queue that are done, in order; an errored
    /// one completes with its status and takes the queue pair to the error state.
    pub(super) fn complete_sends(&mut self) {
        while let Some(w) = self.req.sq.front() {
            if let Some(status) = w.error {
                let w = &self.req.sq[0];
                self.completions.push_back(Completion::bare(
                    w.wr.wr_id,
                    w.wr.op.wc_opcode(),
                    status,
                    self.cfg.qpn,
                ));
                self.req.sq.pop_front();
                self.req.tx_idx = self.req.tx_idx.saturating_sub(1);
                self.enter_error();
                return;
            }
            if !w.started || !w.done() {
                return;
            }
            let Some(w) = self.req.sq.pop_front() else {
                return;
            };
            self.req.tx_idx = self.req.tx_idx.saturating_sub(1);
            if w.wr.signaled {
                self.completions.push_back(Completion {
                    wr_id: w.wr.wr_id,
                    status: WcStatus::Success,
                    opcode: w.wr.op.wc_opcode(),
                    byte_len: u32::try_from(w.len).unwrap_or(u32::MAX),
                    imm: None,
                    invalidated_rkey: None,
                    qp_num: self.cfg.qpn,
                    src_qp: None,
                });
            }
        }
    }

    /// Fails the send WQE holding `psn` (or the oldest) with `status`.
    pub(super) fn fail_send(&mut self, psn: Option<Psn>, status: WcStatus) {
        let idx = psn
            .and_then(|p| self.req.sq.iter().position(|w| w.contains(p)))
            .unwrap_or(0);
        // Everything before it succeeded (the NAK acknowledges it).
        for w in self.req.sq.iter_mut().take(idx) {
            if w.started && !w.needs_response() {
                w.acked = true;
            }
        }
        if let Some(w) = self.req.sq.get_mut(idx) {
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

    /// The requester's retransmission timer fired: count a retry, tell the controller, and
    /// recover — or give up after too many retries. `false` if the queue pair failed.
    pub(super) fn request_timeout(&mut self, now: Time) -> bool {
        self.counters.timeouts += 1;
        self.cc.on_timeout(now);
        let retries = self.req.swin.on_timeout(now, self.retry_every());
        if retries > self.retry_limit() {
            // The oldest work request is the one that went unanswered (IBTA §9.7.6.1.3: the
            // requester reports the retry error on the WQE it was retrying); the rest flush
            // after it, in order. Naming the WQE of `una` instead would report a later
            // request's error after the flushes of earlier Reads still awaiting responses.
            self.fail_send(None, WcStatus::RetryExcErr);
            return false;
        }
        self.recover_requests_after_timeout();
        true
    }

    pub(super) fn recover_requests_after_timeout(&mut self) {
        let sq = &self.req.sq;
        let message_start = |psn: Psn| {
            sq.iter()
                .find(|w| w.contains(psn))
                .map_or(psn, |w| w.first_psn)
        };
        self.req.swin.recover_after_timeout(message_start);
        self.cmp.read_gap = None;
        if self.rereads() {
            self.reset_rereads();
        }
    }
}
