//! IRN's responder (IRN §5.3–5.4): packets are placed out of order from IRNETH's receive WQE
//! number and PSN offset (§5.3.1–5.3.2); every packet is answered at once on the control queue
//! with an ACK or NACK carrying the cumulative ACK and the triggering PSN as SACK (§3.1);
//! Read and atomic responses travel in their own rPSN space, sent from a window of their own
//! with BDP-FC, selective repeat and timeouts, and acknowledged by the requester's read (N)ACKs
//! (§5.4).

use crate::payload::TxPayload;
use std::collections::VecDeque;

use irn_wire::{
    AethRepr, AtomicAckEthRepr, CreditCode, Ecn, IbRepr, IrnEthRepr, NakCode, Opcode, Psn,
    RethRepr, Syndrome,
};

use super::{ReadSource, ResponderWire, Saved, SavedKind};
use crate::config::Retransmission;
use crate::memory::Memory;
use crate::qp::{says_no_more, Ctrl, QueuePair, Transmit};
use crate::time::Time;
use crate::window::SendWindow;

/// A response in the rPSN space.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RspEntry {
    /// The request's sPSN (error NAKs name it).
    req_psn: Psn,
    /// Its first rPSN.
    rpsn: Psn,
    npkts: u32,
    kind: SavedKind,
    msn: u32,
}

/// IRN's responder state: the Read/atomic responses and the window they are sent from.
#[derive(Debug)]
pub(crate) struct IrnResponder {
    /// The rPSN send window (IRN §5.4): BDP-FC, selective repeat, its own timeouts.
    pub(crate) win: SendWindow,
    /// Responses not yet entirely acknowledged, in rPSN order.
    pub(crate) q: VecDeque<RspEntry>,
    /// Index in `q` of the response being sent (new packets), or `q.len()`.
    pub(crate) tx_idx: usize,
    /// Next packet of that response.
    tx_off: u32,
}

impl IrnResponder {
    pub(super) fn new(mode: Retransmission, start: Psn) -> IrnResponder {
        IrnResponder {
            win: SendWindow::new(mode, start),
            q: VecDeque::new(),
            tx_idx: 0,
            tx_off: 0,
        }
    }

    /// The receive WQE and packet offset of a Send packet, from its IRNETH (§5.3.2).
    pub(super) fn send_position(ib: &IbRepr) -> Option<(u32, u32)> {
        let i = ib.irn.unwrap_or_default();
        match (i.wqe_sn, i.psn_offset) {
            (Some(sn), Some(off)) => Some((sn, off)),
            _ => None,
        }
    }

    /// The RETH (on every Write packet, §5.3.1) and packet offset of a Write packet.
    pub(super) fn write_position(ib: &IbRepr) -> Option<(RethRepr, u32)> {
        match (ib.reth, ib.irn.as_ref().and_then(|i| i.psn_offset)) {
            (Some(r), Some(off)) => Some((r, off)),
            _ => None,
        }
    }

    /// Queues the responses of an executed Read or atomic at the next free rPSN.
    pub(super) fn respond(&mut self, s: Saved) {
        let rpsn = match self.q.back() {
            Some(e) => e.rpsn.add(e.npkts),
            None => self.win.next(),
        };
        self.q.push_back(RspEntry {
            req_psn: s.psn,
            rpsn,
            npkts: s.npkts,
            kind: s.kind,
            msn: s.msn,
        });
    }

    /// Whether a new response packet waits and the window admits it.
    pub(crate) fn may_send_new(&self, bdp_cap: Option<u32>) -> bool {
        self.tx_idx < self.q.len() && self.win.may_send_new(bdp_cap)
    }

    /// Forgets the responses entirely acknowledged.
    fn forget_acknowledged(&mut self) {
        let una = self.win.una();
        while let Some(e) = self.q.front() {
            if self.tx_idx == 0 {
                break;
            }
            if e.rpsn.add(e.npkts).distance(una) >= 0 {
                self.q.pop_front();
                self.tx_idx -= 1;
            } else {
                break;
            }
        }
    }
}

impl QueuePair {
    /// An IRN ACK: cumulative (last in-order PSN) with the PSN that triggered it.
    pub(super) fn queue_ack(&mut self, syndrome: Syndrome, sack: Option<Psn>, becn: bool) {
        self.counters.acks_sent += 1;
        // Whatever this acknowledges covers a delayed ACK's segments too.
        self.rsp.delack = None;
        let psn = self.rsp.rwin.epsn().sub(1);
        // Consecutive plain ACKs coalesce: the newest says everything the older ones did. With
        // NACK bitmaps, so does a plain ACK after a NACK once nothing is held beyond the
        // cumulative ACK.
        let supersedes_nacks = self.cfg.recovery.nack_bitmap && self.rsp.rwin.held() == 0;
        self.drop_superseded_ack(becn, supersedes_nacks);
        self.ctrl.push_back(Ctrl::Ack {
            psn,
            syndrome,
            msn: self.rsp.msn,
            sack,
            lost: None,
            becn,
        });
    }

    /// An IRN NACK for the expected PSN (IRN §3.1), triggered by the arrival of `psn` while a
    /// hole is open. Its SACK is `psn`, or with [`nack_bitmap`] the highest PSN that arrived,
    /// with the loss bitmap up to it: that NACK replaces the (N)ACK waiting before it. A
    /// bitmap reaches 512 PSNs past the hole ([`MAX_BITMAP_WORDS`](irn_wire::MAX_BITMAP_WORDS) words); a trigger beyond
    /// that (an out-of-order window wider than 512: IRN without BDP-FC, or a BDP cap above 512
    /// packets) gets the paper's NACK, which SACKs it alone and replaces nothing.
    ///
    /// [`nack_bitmap`]: crate::RecoveryConfig::nack_bitmap
    pub(super) fn queue_nack(&mut self, psn: Psn, becn: bool) {
        self.rsp.delack = None;
        self.counters.nacks_sent += 1;
        let bitmap = if self.cfg.recovery.nack_bitmap {
            self.rsp.rwin.nack_bitmap(psn)
        } else {
            None
        };
        let (sack, lost) = match bitmap {
            Some((b, highest)) => {
                self.drop_superseded_ack(becn, true);
                (highest, Some(b))
            }
            None => (psn, None),
        };
        self.ctrl.push_back(Ctrl::Ack {
            psn: self.rsp.rwin.epsn(),
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
            msn: self.rsp.msn,
            sack: Some(sack),
            lost,
            becn,
        });
    }

    /// Drops the (N)ACK at the back of the control queue when the one about to be queued says
    /// all it did: a plain ACK always (cumulative ACKs only grow, and its SACK lies below its
    /// cumulative PSN), a NACK with a loss bitmap when `nacks` (the newer one carries the whole
    /// receive state). ACKs echoing a mark stay, one per marked packet.
    fn drop_superseded_ack(&mut self, becn: bool, nacks: bool) {
        if becn {
            return;
        }
        if let Some(Ctrl::Ack {
            syndrome,
            lost,
            becn: false,
            ..
        }) = self.ctrl.back()
        {
            if says_no_more(syndrome, lost, nacks) {
                self.counters.unsend_ack(*syndrome);
                self.ctrl.pop_back();
            }
        }
    }

    /// A read (N)ACK from the requester, in the rPSN space (§5.4). The standard responder
    /// has no rPSN space: such a packet is invalid there.
    pub(in crate::qp) fn handle_read_ack(&mut self, now: Time, ib: &IbRepr) {
        let mode = self.mode();
        let ResponderWire::Irn(r) = &mut self.rsp.wire else {
            self.counters.dropped_invalid += 1;
            return;
        };
        let Some(aeth) = ib.aeth else {
            self.counters.dropped_invalid += 1;
            return;
        };
        let psn = ib.bth.psn;
        let sack = ib.irn.as_ref().and_then(|i| i.sack_psn);
        // A timeout judged spurious with no response left to start, or an answer that could
        // not judge it: probe the tail, as the requester does
        // ([`SendWindow::probe_tail`](crate::window::SendWindow::probe_tail),
        // [`SendWindow::probe_held_timeout`](crate::window::SendWindow::probe_held_timeout)).
        let ack = |r: &mut IrnResponder, cum: Psn| {
            let acked = r.win.ack(now, cum);
            if acked.spurious_timeout && r.tx_idx >= r.q.len() {
                r.win.probe_tail();
            }
            if acked.undecided_timeout {
                r.win.probe_held_timeout();
            }
        };
        match aeth.syndrome {
            Syndrome::Ack(_) => {
                ack(r, psn.add(1));
                if let Some(s) = sack {
                    r.win.sack(now, s);
                }
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.counters.nacks_received += 1;
                ack(r, psn);
                if mode.is_selective() {
                    let lost = ib.irn.as_ref().and_then(|i| i.loss_bitmap);
                    if !r.win.sack_nack(now, psn, sack, lost.as_ref()) {
                        self.counters.dropped_invalid += 1;
                    }
                    r.win.enter_recovery(false);
                } else {
                    r.win.go_back(psn);
                }
            }
            _ => {
                self.counters.dropped_invalid += 1;
                return;
            }
        }
        r.forget_acknowledged();
    }

    /// The next response packet in the rPSN space: a retransmission first, then a new one if
    /// the window admits it.
    pub(super) fn next_response_irn<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        now: Time,
        mem: &'m M,
        payload: &mut P,
    ) -> Option<Transmit> {
        let bdp_cap = self.cfg.recovery.bdp_cap;
        let ResponderWire::Irn(r) = &mut self.rsp.wire else {
            return None;
        };
        if let Some(rpsn) = r.win.next_retransmit() {
            let t = self.build_rsp_irn(rpsn, mem, payload)?;
            if let ResponderWire::Irn(r) = &mut self.rsp.wire {
                r.win.on_retransmitted(now, rpsn, 1);
            }
            self.counters.retransmitted += 1;
            self.counters.retransmitted_bytes += t.ib.payload_len as u64;
            return Some(t);
        }
        if !r.may_send_new(bdp_cap) {
            return None;
        }
        let e = r.q[r.tx_idx];
        let rpsn = e.rpsn.add(r.tx_off);
        let t = self.build_rsp_irn(rpsn, mem, payload)?;
        if let ResponderWire::Irn(r) = &mut self.rsp.wire {
            r.win.on_sent_new(now, 1);
            r.tx_off += 1;
            if r.tx_off >= e.npkts {
                r.tx_idx += 1;
                r.tx_off = 0;
            }
        }
        Some(t)
    }

    /// The response packet at `rpsn`.
    fn build_rsp_irn<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        rpsn: Psn,
        mem: &'m M,
        payload: &mut P,
    ) -> Option<Transmit> {
        let ResponderWire::Irn(r) = &self.rsp.wire else {
            return None;
        };
        let e = *r.q.iter().find(|e| {
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
            SavedKind::Read { va, rkey, len, .. } => {
                let mtu = u64::from(self.mtu());
                let done = u64::from(k) * mtu;
                let chunk = (len - done.min(len)).min(mtu);
                let first = k == 0;
                let last = k + 1 == e.npkts;
                let mut ib = IbRepr::new(self.bth(Opcode::read_response(first, last), rpsn));
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
}
