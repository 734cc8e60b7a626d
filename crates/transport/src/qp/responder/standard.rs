//! The standard RoCE responder (IBTA §9.7.4–9.7.5; what Linux rxe's `rxe_resp.c` does): it
//! accepts packets in PSN order only, so the position of a packet in its message comes from
//! the message in progress ([`Inbound`]); its ACKs and NAKs travel in order with Read
//! responses; a duplicate Read or atomic is answered again from saved state, never executed
//! twice (§9.7.5.1.1).

use crate::payload::TxPayload;
use std::collections::VecDeque;

use irn_wire::{
    AethRepr, AtomicAckEthRepr, CreditCode, Ecn, IbRepr, LocalBuffer, LossBitmap, Opcode, Psn,
    RethRepr, Syndrome,
};

use super::{ReadSource, ResponderWire, Saved, SavedKind};
use crate::memory::Memory;
use crate::qp::{packets, QueuePair, Transmit};

/// The message in progress at the responder.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inbound {
    first_psn: Psn,
    /// A Write's RETH (from its first packet); `None` for a Send.
    write: Option<RethRepr>,
    /// The receive WQE a Send consumes.
    recv_sn: Option<u32>,
}

/// Responder output, in PSN order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RespJob {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
        becn: bool,
        /// Extended IB: the loss bitmap of a NAK and the highest PSN it reaches (T8(d)).
        lost: Option<(LossBitmap, Psn)>,
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: u32,
        len: u64,
        done: u64,
        msn: u32,
        /// PSN offset of `psn` within the Read it answers (a duplicate may ask for a part).
        off: u32,
        /// Extended IB: the requester's buffer, echoed (T8(c)).
        local: Option<LocalBuffer>,
        /// Answers a duplicate: its bytes are sent again.
        replay: bool,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
}

/// A standard ACK or NAK taken from the responder's queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueuedAck {
    pub(crate) psn: Psn,
    pub(crate) syndrome: Syndrome,
    pub(crate) msn: u32,
    pub(crate) becn: bool,
    pub(crate) lost: Option<(LossBitmap, Psn)>,
}

impl RespJob {
    pub(crate) fn is_ack(&self) -> bool {
        matches!(self, RespJob::Ack { .. })
    }

    pub(crate) fn into_ack(self) -> Option<QueuedAck> {
        match self {
            RespJob::Ack {
                psn,
                syndrome,
                msn,
                becn,
                lost,
            } => Some(QueuedAck {
                psn,
                syndrome,
                msn,
                becn,
                lost,
            }),
            _ => None,
        }
    }
}

/// The standard responder's own state.
#[derive(Debug, Default)]
pub(crate) struct StandardResponder {
    /// Next receive WQE a new message claims.
    pub(crate) rq_claim_sn: u32,
    /// The message in progress.
    inbound: Option<Inbound>,
    /// Executed Reads and atomics, newest last, to answer duplicates without executing
    /// twice.
    saved: VecDeque<Saved>,
    /// ACKs, NAKs and responses to send, in PSN order.
    pub(crate) jobs: VecDeque<RespJob>,
}

impl StandardResponder {
    /// The opcode sequence check (IBTA §9.7.4.1.4): a message in progress continues with
    /// MIDDLE/LAST of its kind, and nothing else continues one.
    pub(super) fn in_sequence(&self, op: Opcode) -> bool {
        match &self.inbound {
            Some(inb) => {
                !op.is_first()
                    && ((op.is_send() && inb.write.is_none())
                        || (op.is_write() && inb.write.is_some()))
            }
            None => op.is_first(),
        }
    }

    /// The receive WQE and packet offset of a Send packet at `psn`.
    pub(super) fn send_position(&self, psn: Psn) -> (u32, u32) {
        match &self.inbound {
            Some(inb) => (
                inb.recv_sn.unwrap_or(self.rq_claim_sn),
                inb.first_psn.distance(psn).max(0) as u32,
            ),
            None => (self.rq_claim_sn, 0),
        }
    }

    /// The RETH and packet offset of a Write packet: from the packet itself when it is the
    /// first, else from the message in progress.
    pub(super) fn write_position(&self, ib: &IbRepr) -> Option<(RethRepr, u32)> {
        if ib.bth.opcode.is_first() {
            ib.reth.map(|r| (r, 0))
        } else {
            self.inbound
                .and_then(|i| i.write.map(|w| (w, i.first_psn)))
                .map(|(r, fp)| (r, fp.distance(ib.bth.psn).max(0) as u32))
        }
    }

    fn continue_message(
        &mut self,
        psn: Psn,
        op: Opcode,
        write: Option<RethRepr>,
        recv_sn: Option<u32>,
    ) {
        let first_psn = if op.is_first() {
            psn
        } else {
            self.inbound.map_or(psn, |i| i.first_psn)
        };
        self.inbound = (!op.is_last()).then_some(Inbound {
            first_psn,
            write,
            recv_sn,
        });
    }

    /// A Send packet was placed into receive WQE `sn`: a first packet claims it.
    pub(super) fn placed_send(&mut self, psn: Psn, op: Opcode, sn: u32) {
        if op.is_first() {
            self.rq_claim_sn = sn.wrapping_add(1);
        }
        self.continue_message(psn, op, None, Some(sn));
    }

    /// A Write packet was placed.
    pub(super) fn placed_write(&mut self, psn: Psn, op: Opcode, reth: RethRepr) {
        self.continue_message(psn, op, Some(reth), None);
    }

    /// Go-back-0 (T3): the partial message is discarded; returns its first PSN, where the
    /// requester must start again, and gives its receive WQE back.
    pub(super) fn discard_message(&mut self) -> Option<Psn> {
        let inb = self.inbound.take()?;
        if let Some(sn) = inb.recv_sn {
            self.rq_claim_sn = sn;
        }
        Some(inb.first_psn)
    }

    /// Responses still owed.
    /// Replays of a part of a Read (T8(b)'s re-requests) are not counted: they answer a Read
    /// already counted, however many parts a requester asks for.
    pub(super) fn pending_reads(&self) -> usize {
        self.jobs
            .iter()
            .filter(|j| match j {
                RespJob::Ack { .. } => false,
                RespJob::Read { off, .. } => *off == 0,
                RespJob::Atomic { .. } => true,
            })
            .count()
    }

    /// Saves an executed Read or atomic (keeping the newest `keep`) and queues its responses.
    pub(super) fn respond(&mut self, s: Saved, keep: usize) {
        while self.saved.len() >= keep {
            self.saved.pop_front();
        }
        self.saved.push_back(s);
        self.jobs.push_back(match s.kind {
            SavedKind::Read {
                va,
                rkey,
                len,
                local,
            } => RespJob::Read {
                psn: s.psn,
                va,
                rkey,
                len,
                done: 0,
                msn: s.msn,
                off: 0,
                local,
                replay: false,
            },
            SavedKind::Atomic { orig } => RespJob::Atomic {
                psn: s.psn,
                orig,
                msn: s.msn,
            },
        });
    }

    /// Queues an ACK, NAK or RNR NAK in order with the responses.
    pub(super) fn push_ack(&mut self, psn: Psn, syndrome: Syndrome, msn: u32, becn: bool) {
        self.jobs.push_back(RespJob::Ack {
            psn,
            syndrome,
            msn,
            becn,
            lost: None,
        });
    }

    /// Queues an extended-IB sequence-error NAK at `epsn` with the bitmap of the missing PSNs
    /// and the highest PSN it reaches (T8(d)).
    pub(super) fn push_loss_nak(&mut self, epsn: Psn, msn: u32, lost: Option<(LossBitmap, Psn)>) {
        self.jobs.push_back(RespJob::Ack {
            psn: epsn,
            syndrome: Syndrome::Nak(irn_wire::NakCode::PsnSequenceError),
            msn,
            becn: false,
            lost,
        });
    }
}

impl QueuePair {
    fn standard_mut(&mut self) -> Option<&mut StandardResponder> {
        match &mut self.rsp.wire {
            ResponderWire::Standard(s) | ResponderWire::ExtIb(s) => Some(s),
            ResponderWire::Irn(_) => None,
        }
    }

    /// Duplicate handling (IBTA §9.7.5.1.1): re-ACK a Send or Write, answer a Read or atomic
    /// again from the saved state, never executing it twice.
    pub(super) fn duplicate_standard(&mut self, ib: &IbRepr) {
        let psn = ib.bth.psn;
        let op = ib.bth.opcode;
        let mtu = self.mtu();
        let (ResponderWire::Standard(s) | ResponderWire::ExtIb(s)) = &mut self.rsp.wire else {
            return;
        };
        if op == Opcode::RC_RDMA_READ_REQUEST {
            let found = s.saved.iter().rev().find(|s| {
                let d = s.psn.distance(psn);
                matches!(s.kind, SavedKind::Read { .. }) && d >= 0 && (d as u32) < s.npsn
            });
            if let Some(&Saved {
                psn: first,
                msn,
                kind:
                    SavedKind::Read {
                        va,
                        rkey,
                        len,
                        local,
                    },
                ..
            }) = found
            {
                let off = first.distance(psn) as u32;
                let k = u64::from(off) * u64::from(mtu);
                // The duplicate asks for the Read from its PSN on — all the rest, or a part
                // (a requester re-requesting only missing chunks, T8(b)): its RETH names which,
                // and must lie within the original at the offset its PSN says (IBTA
                // §9.7.5.1.1; rxe's `duplicate_request` checks the same subset).
                let (dva, dlen) = match ib.reth {
                    Some(r) if r.rkey == rkey => (r.va, u64::from(r.dma_len)),
                    _ => (va + k, len - k.min(len)),
                };
                if dva != va + k || k + dlen > len || (dlen == 0 && len > 0) {
                    self.counters.unexpected += 1;
                    return;
                }
                let parts = packets(dlen, mtu);
                if !(k + dlen == len || dlen % u64::from(mtu) == 0) {
                    self.counters.unexpected += 1;
                    return;
                }
                // One replay per Read (as rxe restarts its read resource): a newer duplicate
                // of the rest supersedes every queued response of the same Read; one for a
                // part, those it covers.
                let (from, span) = if k + dlen == len {
                    (first, packets(len, mtu))
                } else {
                    (psn, parts)
                };
                s.jobs.retain(|j| match j {
                    RespJob::Read { psn: jp, .. } => {
                        let d = from.distance(*jp);
                        !(d >= 0 && (d as u32) < span)
                    }
                    _ => true,
                });
                s.jobs.push_back(RespJob::Read {
                    psn,
                    va: dva,
                    rkey,
                    len: dlen,
                    done: 0,
                    msn,
                    off,
                    local,
                    replay: true,
                });
            } else {
                self.counters.unexpected += 1;
            }
            return;
        }
        if op.is_read_or_atomic_request() {
            let found = s
                .saved
                .iter()
                .rev()
                .find(|s| s.psn == psn && matches!(s.kind, SavedKind::Atomic { .. }));
            if let Some(&Saved {
                msn,
                kind: SavedKind::Atomic { orig },
                ..
            }) = found
            {
                s.jobs.push_back(RespJob::Atomic { psn, orig, msn });
            } else {
                self.counters.unexpected += 1;
            }
            return;
        }
        let e = self.rsp.rwin.epsn().sub(1);
        self.push_resp_ack(e, Syndrome::Ack(CreditCode::INVALID), false);
    }

    /// A standard ACK or NAK, in order with the Read responses. A plain ACK still queued is
    /// replaced by a newer one (which says everything it did), unless it carries an ECN echo
    /// (each echo stands for one marked packet).
    pub(super) fn push_resp_ack(&mut self, psn: Psn, syndrome: Syndrome, becn: bool) {
        let msn = self.rsp.msn;
        let Some(s) = self.standard_mut() else {
            return;
        };
        // The counter counts packets: an ACK that replaces a queued one adds none.
        let mut replaced = false;
        if syndrome.is_ack() {
            if let Some(RespJob::Ack {
                syndrome: Syndrome::Ack(_),
                becn: false,
                ..
            }) = s.jobs.back()
            {
                s.jobs.pop_back();
                replaced = true;
            }
        }
        s.push_ack(psn, syndrome, msn, becn);
        if syndrome.is_ack() && !replaced {
            self.counters.acks_sent += 1;
        }
    }

    /// The standard responder's next packet: the job at the head of its queue (one packet of
    /// a Read response at a time).
    pub(super) fn next_response_standard<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        mem: &'m M,
        payload: &mut P,
    ) -> Option<Transmit> {
        let mtu = u64::from(self.mtu());
        let (ResponderWire::Standard(s) | ResponderWire::ExtIb(s)) = &mut self.rsp.wire else {
            return None;
        };
        let job = s.jobs.front_mut()?;
        match *job {
            RespJob::Ack { .. } => {
                let a = s.jobs.pop_front().and_then(RespJob::into_ack)?;
                Some(self.build_queued_ack(a))
            }
            RespJob::Atomic { psn, orig, msn } => {
                s.jobs.pop_front();
                let mut ib = IbRepr::new(self.bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn));
                ib.aeth = Some(AethRepr {
                    syndrome: Syndrome::Ack(CreditCode::INVALID),
                    msn,
                });
                ib.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
                ib.irn = self.wire().atomic_ack_header();
                Some(Transmit { ib, ecn: Ecn::Ect0 })
            }
            RespJob::Read {
                psn,
                va,
                rkey,
                len,
                done,
                msn,
                off,
                local,
                replay,
            } => {
                if replay {
                    self.counters.retransmitted_bytes += (len - done).min(mtu);
                }
                let k = (done / mtu) as u32;
                let chunk = (len - done).min(mtu);
                let first = done == 0;
                let last = done + chunk >= len;
                let this_psn = psn.add(k);
                if last {
                    s.jobs.pop_front();
                } else if let RespJob::Read { done: d, .. } = job {
                    *d += chunk;
                }
                let mut ib = IbRepr::new(self.bth(Opcode::read_response(first, last), this_psn));
                ib.irn = self.wire().read_response_header(off + k, local);
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
}
