//! Read responses out of order at the requester (seed 002, SPEC T8(b)).
//!
//! A standard RoCE requester takes Read responses in PSN order only: a gap makes it re-issue
//! the Read from the first missing response to the end, resending every later chunk that
//! already arrived. With a [`HoleRule`](crate::HoleRule) configured (the reorder-buffer and
//! extended-IB modes), the requester instead
//!
//! 1. places every response on arrival — its position in the Read is `PSN − first PSN`, which
//!    the requester knows from its own WQE (extended IB also echoes it with the requester's
//!    buffer, and a response whose echo disagrees is dropped) — and marks it in a per-Read
//!    bitmap (`SendWqe::got`), moving the in-order point over whatever is already there;
//! 2. declares the hole at the in-order point lost once the rule says so — open for its
//!    delay, or with its threshold of responses behind it — and then
//! 3. re-issues a *smaller* Read for each run of missing chunks only, up to the highest
//!    response received (or to the end of a Read the responder is known to have finished: an
//!    ACK or response beyond it). Seed 002's example: a 7-MTU Read that lost its responses 0,
//!    4 and 6 re-reads those three single chunks.
//!
//! A re-requested chunk is asked for once per hole; if it is lost again, the retransmission
//! timeout resends the Read from the in-order point, as a standard requester would. With
//! [`RecoveryConfig::reread_all`](crate::RecoveryConfig::reread_all) off, only the first run of
//! missing chunks of the oldest incomplete Read is asked for each time the in-order point stops
//! at a hole, so every request for a part starts at the in-order point, which only moves
//! forward, and no later Read is asked for a part (a timeout resends it from its first PSN) —
//! what Linux rxe's responder needs. The
//! re-requests are ordinary duplicate Read requests for a part of the original (IBTA
//! §9.7.5.1.1): the standard responder, and Linux rxe, answer them from their saved Read
//! state.

use std::collections::VecDeque;

use irn_wire::{IbRepr, Psn};

use super::requester::{RESP_ASKED, RESP_GOT, RESP_MISSING};
use super::QueuePair;
use crate::memory::Memory;
use crate::state::QpState;
use crate::time::Time;

impl QueuePair {
    /// Whether this queue pair places Read responses out of order and re-requests holes.
    pub(super) fn rereads(&self) -> bool {
        self.cfg.recovery.hole_rule.is_some() && !self.wire().splits_response_psns()
    }

    /// The oldest Read or atomic still waiting for responses.
    fn first_incomplete(&self) -> Option<usize> {
        self.req
            .sq
            .iter()
            .position(|w| w.started && w.needs_response() && w.resp_rcvd < w.npkts)
    }

    /// The PSN of the first missing response (the in-order point), if a Read waits.
    pub(super) fn expected_response(&self) -> Option<Psn> {
        let w = &self.req.sq[self.first_incomplete()?];
        Some(w.first_psn.add(w.resp_rcvd))
    }

    /// A Read response or atomic acknowledgement, placed wherever it falls (T8(b)).
    pub(super) fn handle_response_holes<M: Memory>(
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
            .position(|w| w.needs_response() && w.contains(psn))
        else {
            self.counters.unexpected += 1;
            return;
        };
        let w = &self.req.sq[idx];
        let k = w.first_psn.distance(psn) as u32;
        let rel = k.wrapping_sub(w.resp_rcvd) as usize;
        if k < w.resp_rcvd || w.got.get(rel) == Some(&RESP_GOT) {
            self.counters.duplicates += 1;
            return;
        }
        if self.wire().responses_echo_offset()
            && !is_atomic_ack
            && ib.irn.as_ref().and_then(|i| i.psn_offset) != Some(k)
        {
            // The echoed offset must name this packet's place in the Read (T8(c)).
            self.counters.dropped_invalid += 1;
            return;
        }
        let before = self.expected_response();
        let in_order = self.first_incomplete() == Some(idx) && rel == 0;
        if let Err(status) = self.accept_response(idx, ib, payload, mem, is_atomic_ack) {
            self.fail_send(Some(psn), status);
            return;
        }
        let w = &mut self.req.sq[idx];
        if rel == 0 {
            w.resp_rcvd += 1;
            w.got.pop_front();
            // Move over what already arrived out of order.
            while w.got.front() == Some(&RESP_GOT) {
                w.got.pop_front();
                w.resp_rcvd += 1;
                self.cmp.ahead = self.cmp.ahead.saturating_sub(1);
            }
            if w.resp_rcvd >= w.npkts {
                w.got = VecDeque::new();
            }
        } else {
            let span = (w.npkts - w.resp_rcvd) as usize;
            if w.got.len() < span {
                w.got.resize(span, RESP_MISSING);
            }
            w.got[rel] = RESP_GOT;
            self.cmp.ahead += 1;
        }
        if in_order {
            self.cmp.read_gap = None;
        } else {
            self.counters.out_of_order += 1;
        }
        // A response tells that the responder took every request up to its PSN.
        let done = self.cmp.peer_done.filter(|d| d.distance(psn.add(1)) < 0);
        self.ack_requests(now, done.unwrap_or(psn.add(1)));
        if self.expected_response().is_none() {
            // No Read waits: what the responder acknowledged says nothing about the next
            // ones (and a stale PSN would look ahead again once the 24-bit space wraps).
            self.cmp.peer_done = None;
        }
        if self.expected_response() != before {
            // The in-order point moved: any hole left starts now.
            self.cmp.hole_since = self.read_hole().then_some(now);
            self.cmp.hole_asked = false;
        } else if !in_order && self.cmp.hole_since.is_none() && !self.cmp.hole_asked {
            self.cmp.hole_since = Some(now);
        }
        self.check_read_hole(now);
    }

    /// Whether responses are missing behind ones that arrived, or behind the point the
    /// responder acknowledged.
    fn read_hole(&self) -> bool {
        let Some(e) = self.expected_response() else {
            return false;
        };
        self.cmp.ahead > 0 || self.cmp.peer_done.is_some_and(|d| e.distance(d) > 0)
    }

    /// Standard RoCE acknowledged request PSNs up to `cum`, beyond a Read whose responses
    /// are missing from `expected` (IBTA §9.7.5.1.2's implied NAK): the hole is timed by the
    /// rule rather than answered at once, since under reordering the responses may still come.
    pub(super) fn note_peer_done(&mut self, now: Time, cum: Psn) {
        if self.cmp.peer_done.is_none_or(|d| d.distance(cum) > 0) {
            self.cmp.peer_done = Some(cum);
        }
        if self.cmp.hole_since.is_none() && !self.cmp.hole_asked {
            self.cmp.hole_since = Some(now);
        }
    }

    /// When the open Read hole meets the rule's delay.
    pub(super) fn read_hole_deadline(&self) -> Option<Time> {
        let rule = self.cfg.recovery.hole_rule?;
        if !self.rereads() || self.cmp.hole_asked {
            return None;
        }
        Some(self.cmp.hole_since? + rule.delay)
    }

    /// Applies the [`HoleRule`](crate::HoleRule) to the Read hole: once it has been open the
    /// rule's delay, or has its threshold of responses behind it, queue smaller Reads for the
    /// missing chunks.
    pub(super) fn check_read_hole(&mut self, now: Time) {
        let Some(rule) = self.cfg.recovery.hole_rule else {
            return;
        };
        if !self.rereads() || self.cmp.hole_asked || self.state == QpState::Err {
            return;
        }
        let Some(since) = self.cmp.hole_since else {
            return;
        };
        if !self.read_hole() {
            self.cmp.hole_since = None;
            return;
        }
        if self.cmp.ahead < rule.threshold && now.since(since) < rule.delay {
            return;
        }
        self.cmp.hole_asked = true;
        self.cmp.hole_since = None;
        self.rerequest_holes();
    }

    /// Queues a smaller Read for every run of missing response chunks the requester knows
    /// are lost: up to the highest response received of each Read, or to its end when the
    /// responder went past it.
    fn rerequest_holes(&mut self) {
        let peer_done = self.cmp.peer_done;
        let all = self.cfg.recovery.reread_all;
        let mut asks = Vec::new();
        let mut first = true;
        for w in self.req.sq.iter_mut() {
            if !w.started || !w.needs_response() || w.resp_rcvd >= w.npkts {
                continue;
            }
            // One part at a time asks only of the oldest incomplete Read: a timeout resends
            // later Reads from their first PSN, which rxe refuses once a part moved it on.
            if !all && !std::mem::replace(&mut first, false) {
                break;
            }
            let span = (w.npkts - w.resp_rcvd) as usize;
            let finished = peer_done.is_some_and(|d| w.last_psn().distance(d) > 0);
            let limit = if finished {
                span
            } else {
                match w.got.iter().rposition(|&g| g == RESP_GOT) {
                    Some(h) => h,
                    None => continue,
                }
            };
            if w.got.len() < span {
                w.got.resize(span, RESP_MISSING);
            }
            let mut i = 0;
            while i < limit {
                if w.got[i] != RESP_MISSING {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < limit && w.got[i] == RESP_MISSING {
                    w.got[i] = RESP_ASKED;
                    i += 1;
                }
                let first = w.first_psn.add(w.resp_rcvd + start as u32);
                asks.push((first, (i - start) as u32));
                if !all {
                    break;
                }
            }
        }
        self.req.rereads.extend(asks);
    }

    /// The retransmission timer fired: the Read resent from the in-order point covers every
    /// chunk re-requested before, which may be asked for again in the next hole.
    pub(super) fn reset_rereads(&mut self) {
        self.req.rereads.clear();
        for w in self.req.sq.iter_mut() {
            for g in w.got.iter_mut() {
                if *g == RESP_ASKED {
                    *g = RESP_MISSING;
                }
            }
        }
        self.cmp.hole_since = None;
        self.cmp.hole_asked = false;
    }

    /// Whether a response's opcode may end a message short of the Read's last packet: the
    /// last packet of a part asked for again (T8(b)).
    pub(super) fn part_may_end(&self) -> bool {
        self.rereads()
    }
}
