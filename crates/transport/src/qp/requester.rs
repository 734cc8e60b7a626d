//! The requester role: builds request packets from send WQEs (IBTA §9.7.3; rxe's
//! `rxe_req.c`).
//!
//! It assigns each WQE its PSNs, `recv_WQE_SN` / `read_WQE_SN` and, under IRN, its rPSNs
//! (IRN §5.3.2, §5.4); holds a WQE back behind a fence or when the Read credit
//! (`max_rd_atomic`) is used up; stops new packets at the BDP cap (BDP-FC, IRN §3.2) and at the
//! congestion window; paces data at the congestion controller's rate; sets AckReq where the
//! responder must answer; and resends what loss recovery asks for first.

use crate::payload::TxPayload;
use std::collections::VecDeque;

use irn_wire::{AtomicEthRepr, Ecn, IbRepr, Opcode, Psn, RethRepr};

use super::sg::gather;
use super::{packets, QueuePair, Transmit, MAX_MESSAGE};
use crate::config::Retransmission;
use crate::memory::{Access, Key, Memory};
use crate::state::QpState;
use crate::time::{Dur, Time};
use crate::window::SendWindow;
use crate::wr::{SendOp, SendWr, WcStatus};

/// T8(b): a response packet not received.
pub(crate) const RESP_MISSING: u8 = 0;
/// T8(b): a response packet received (out of order).
pub(crate) const RESP_GOT: u8 = 1;
/// T8(b): a response packet re-requested with a smaller Read.
pub(crate) const RESP_ASKED: u8 = 2;

/// A posted send WQE and its progress.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    pub(crate) wr: SendWr,
    pub(crate) len: u64,
    pub(crate) started: bool,
    /// First sPSN.
    pub(crate) first_psn: Psn,
    /// sPSNs it occupies.
    pub(crate) npsn: u32,
    /// Packets of data: request packets of a Send/Write, response packets of a Read/atomic.
    pub(crate) npkts: u32,
    pub(crate) recv_sn: Option<u32>,
    pub(crate) read_sn: Option<u32>,
    /// IRN: first rPSN of its responses.
    pub(crate) rpsn: Psn,
    /// Response packets received in order.
    pub(crate) resp_rcvd: u32,
    /// Send sequence number (message number, 24 bits; carried by extended-IB Sends, T8(c)).
    pub(crate) ssn: u32,
    /// T8(b): the state of each response packet beyond `resp_rcvd` once one arrived out of
    /// order ([`RESP_MISSING`], [`RESP_GOT`] or [`RESP_ASKED`]); empty until then.
    pub(crate) got: VecDeque<u8>,
    /// Every sPSN is acknowledged.
    pub(crate) acked: bool,
    pub(crate) error: Option<WcStatus>,
}

impl SendWqe {
    pub(crate) fn needs_response(&self) -> bool {
        self.wr.op.is_read_or_atomic()
    }

    pub(crate) fn done(&self) -> bool {
        self.acked && (!self.needs_response() || self.resp_rcvd >= self.npkts)
    }

    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }

    pub(crate) fn contains(&self, psn: Psn) -> bool {
        let d = self.first_psn.distance(psn);
        self.started && d >= 0 && (d as u32) < self.npsn
    }
}

/// The requester's state.
#[derive(Debug)]
pub(crate) struct Requester {
    /// Posted send WQEs not yet completed, oldest first (the completer retires them).
    pub(crate) sq: VecDeque<SendWqe>,
    /// Index in `sq` of the WQE being sent (new packets), or `sq.len()`.
    pub(crate) tx_idx: usize,
    /// Next packet of that WQE.
    pub(crate) tx_off: u32,
    /// The sPSN send window: in flight, SACKs, recovery, the retransmission timer.
    pub(crate) swin: SendWindow,
    /// `recv_WQE_SN` of the next Send (IRN §5.3.2).
    pub(crate) next_recv_sn: u32,
    /// `read_WQE_SN` of the next Read or atomic.
    pub(crate) next_read_sn: u32,
    /// IRN: the first rPSN of the next Read's or atomic's responses (§5.4).
    pub(crate) next_rpsn: Psn,
    /// Pacing: no data packet of this queue pair leaves before this time (requests and
    /// responses alike); `Time::ZERO` when not pacing.
    pub(crate) pacing_until: Time,
    /// Request payload bytes sent since a standard request last asked for an ACK.
    pub(crate) unasked_bytes: u64,
    /// SSN of the next message.
    pub(crate) next_ssn: u32,
    /// T8(b): smaller Read requests to send for missing response chunks — (first PSN,
    /// packets) — ahead of everything else but control packets.
    pub(crate) rereads: VecDeque<(Psn, u32)>,
}

impl Requester {
    pub(crate) fn new(mode: Retransmission) -> Requester {
        Requester {
            sq: VecDeque::new(),
            tx_idx: 0,
            tx_off: 0,
            swin: SendWindow::new(mode, Psn::new(0)),
            next_recv_sn: 0,
            next_read_sn: 0,
            next_rpsn: Psn::new(0),
            pacing_until: Time::ZERO,
            unasked_bytes: 0,
            next_ssn: 0,
            rereads: VecDeque::new(),
        }
    }

    /// Whether a new request or a retransmission waits.
    pub(crate) fn has_data(&self) -> bool {
        self.tx_idx < self.sq.len() || self.swin.in_recovery() || !self.rereads.is_empty()
    }
}

impl QueuePair {
    /// Whether the congestion controller's window (if it has one) admits another packet.
    /// The TCP model counts RFC 6675's `pipe` against it (SACKed packets have left the
    /// network); IRN's controllers count everything past the cumulative ACK.
    pub(super) fn cc_window_open(&self) -> bool {
        let out = if self.tcp() {
            self.req.swin.pipe()
        } else {
            self.req.swin.in_flight()
        };
        self.cc
            .window()
            .is_none_or(|win| u64::from(out) * u64::from(self.mtu()) < win)
    }

    /// Whether a retransmission may leave now: always, but under the TCP model, which resends
    /// only into room in the congestion window — the fast retransmit excepted (RFC 6675 §5).
    pub(super) fn retransmit_allowed(&self) -> bool {
        !self.tcp() || self.cc_window_open() || self.req.swin.fast_retransmit_due()
    }

    /// Paces data: after a data packet of `bytes` on the wire, the next may leave only when
    /// it would have at the controller's rate.
    pub(super) fn pace(&mut self, now: Time, bytes: u64) {
        self.cc.on_send(now, bytes);
        if let Some(rate) = self.cc.rate_bps() {
            let start = self.req.pacing_until.max(now);
            self.req.pacing_until = start + Dur::transmission(bytes, rate);
        }
    }

    pub(super) fn next_request<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        now: Time,
        mem: &'m M,
        payload: &mut P,
        out: &mut Transmit,
    ) -> bool {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.cmp.rnr_until.is_some() {
            return false;
        }
        if self.next_reread(mem, payload, out) {
            return true;
        }
        let allowed = self.retransmit_allowed();
        while let Some(psn) = self.req.swin.next_retransmit().filter(|_| allowed) {
            let Some(idx) = self.req.sq.iter().position(|w| w.contains(psn)) else {
                // Nothing holds it any more (completed meanwhile): skip it.
                self.req.swin.on_retransmitted(now, psn, 1);
                continue;
            };
            if self.req.swin.take_fast_retransmit() {
                // The TCP model's loss event: one window cut per fast retransmit.
                self.cc.on_loss(now);
            }
            let covers = self.build_request(idx, psn, mem, payload, out);
            self.req.swin.on_retransmitted(now, psn, covers);
            self.counters.retransmitted += 1;
            self.counters.retransmitted_bytes += out.ib.payload_len as u64;
            self.ask_for_feedback(out);
            return true;
        }
        if self.state == QpState::Sqd && self.req.tx_off == 0 {
            return false;
        }
        if self.hold_new || !self.req.swin.may_send_new(self.cfg.recovery.bdp_cap) {
            return false;
        }
        if !self.cc_window_open() {
            return false;
        }
        let idx = self.req.tx_idx;
        if idx >= self.req.sq.len() {
            return false;
        }
        if !self.req.sq[idx].started && !self.start_wqe(idx, mem) {
            return false;
        }
        if self.state == QpState::Err {
            return false;
        }
        let w = &self.req.sq[idx];
        let psn = w.first_psn.add(self.req.tx_off);
        let covers = self.build_request(idx, psn, mem, payload, out);
        self.req.swin.on_sent_new(now, covers);
        let in_flight = u64::from(self.req.swin.in_flight());
        self.counters.peak_in_flight = self.counters.peak_in_flight.max(in_flight);
        self.ask_for_feedback(out);
        self.req.tx_off += covers;
        if self.req.tx_off >= self.req.sq[idx].npsn {
            self.req.tx_idx += 1;
            self.req.tx_off = 0;
        }
        true
    }

    /// A standard go-back-N responder ACKs only when asked: ask as often as the congestion
    /// controller needs feedback ([`Controller::ack_interval_bytes`](crate::cc::Controller::ack_interval_bytes)), on new packets and
    /// retransmissions alike (after a NAK the resent range must bring ACKs too, or a window
    /// cut by the loss stays shut). Go-back-0 keeps its ACKs on message boundaries (E11's
    /// livelock depends on it); a window controller over it is the driver's to refuse.
    fn ask_for_feedback(&mut self, t: &mut Transmit) {
        if !self.mode().asks_for_feedback() || self.wire().acks_every_packet() {
            return;
        }
        self.req.unasked_bytes += t.ib.payload_len as u64;
        if let Some(every) = self.cc.ack_interval_bytes() {
            if self.req.unasked_bytes >= every {
                t.ib.bth.ack_req = true;
            }
        }
        if t.ib.bth.ack_req {
            self.req.unasked_bytes = 0;
        }
    }

    /// Starts WQE `idx`: checks its local buffers, fences and Read credit, and assigns its
    /// PSNs and sequence numbers. `false` if it cannot start yet (or failed).
    fn start_wqe<M: Memory>(&mut self, idx: usize, mem: &M) -> bool {
        let mtu = self.mtu();
        let split = self.wire().splits_response_psns();
        let (fence, rd_atomic) = {
            let w = &self.req.sq[idx];
            (w.wr.fence, w.wr.op.is_read_or_atomic())
        };
        // Reads and atomics ahead of this request still waiting for their responses — counted
        // only for a request they can hold back (a fenced one: any; a Read or atomic: up to
        // `max_rd_atomic`), and no further than that decides: a scan of the whole send queue
        // for every Send or Write was a tenth of a 64-byte Send stream's cycles.
        let limit = match (fence, rd_atomic) {
            (true, _) => 1,
            (false, true) => usize::from(self.attr.max_rd_atomic.max(1)),
            (false, false) => 0,
        };
        if limit > 0 {
            let reads_pending = self
                .req
                .sq
                .iter()
                .take(idx)
                .filter(|w| w.needs_response() && !w.done())
                .take(limit)
                .count();
            if reads_pending >= limit {
                return false;
            }
        }
        let w = &self.req.sq[idx];
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
            !split && matches!(w.wr.op, SendOp::Read(_)) && packets(w.len, mtu) >= Psn::HALF / 2;
        let status = if w.len > MAX_MESSAGE || too_many_psns {
            Some(WcStatus::LocLenErr)
        } else if bad_sge {
            Some(WcStatus::LocProtErr)
        } else {
            None
        };
        if let Some(status) = status {
            self.req.sq[idx].error = Some(status);
            self.req.sq[idx].started = true;
            self.complete_sends();
            if self.state != QpState::Err {
                // Earlier work is still in flight: fail the QP behind it.
                self.enter_error();
            }
            return false;
        }
        let first_psn = self.req.swin.next();
        let w = &mut self.req.sq[idx];
        let npkts = match w.wr.op {
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
            _ => packets(w.len, mtu),
        };
        w.npkts = npkts;
        w.npsn = match w.wr.op {
            SendOp::Read(_) if !split => npkts,
            SendOp::Read(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
            _ => npkts,
        };
        w.first_psn = first_psn;
        w.started = true;
        w.ssn = self.req.next_ssn;
        self.req.next_ssn = (self.req.next_ssn + 1) & Psn::MASK;
        if w.wr.op.consumes_recv() {
            w.recv_sn = Some(self.req.next_recv_sn);
            self.req.next_recv_sn = self.req.next_recv_sn.wrapping_add(1);
        }
        if w.wr.op.is_read_or_atomic() {
            w.read_sn = Some(self.req.next_read_sn);
            self.req.next_read_sn = self.req.next_read_sn.wrapping_add(1);
            if split {
                w.rpsn = self.req.next_rpsn;
                self.req.next_rpsn = self.req.next_rpsn.add(npkts);
            }
        }
        true
    }

    /// T8(b): the next smaller Read request for missing response chunks, if one waits: the
    /// Read's request rebuilt at the first missing PSN, its length cut to the chunks asked
    /// for. The standard responder answers it as a duplicate Read of that part (IBTA
    /// §9.7.5.1.1).
    fn next_reread<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        mem: &'m M,
        payload: &mut P,
        out: &mut Transmit,
    ) -> bool {
        let mtu = u64::from(self.mtu());
        while let Some((psn, n)) = self.req.rereads.pop_front() {
            let Some(idx) = self
                .req
                .sq
                .iter()
                .position(|w| w.contains(psn) && w.needs_response() && !w.done())
            else {
                continue;
            };
            self.build_request(idx, psn, mem, payload, out);
            if let Some(r) = out.ib.reth.as_mut() {
                r.dma_len = u64::from(r.dma_len).min(u64::from(n) * mtu) as u32;
            }
            self.counters.retransmitted += 1;
            self.counters.read_rerequests += 1;
            return true;
        }
        false
    }

    /// Builds the request packet of WQE `idx` at `psn` in `out`; returns how many PSNs it
    /// covers.
    fn build_request<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        idx: usize,
        psn: Psn,
        mem: &'m M,
        payload: &mut P,
        out: &mut Transmit,
    ) -> u32 {
        let mtu = self.mtu();
        let wire = self.wire();
        let mode = self.mode();
        // Every field reset first, whatever the slot held: each arm below only adds.
        *out = Transmit {
            ib: IbRepr::new(self.bth(Opcode::RC_SEND_ONLY, psn)),
            ecn: Ecn::Ect0,
        };
        let ib = &mut out.ib;
        let w = &self.req.sq[idx];
        let k = w.first_psn.distance(psn).max(0) as u32;
        let n = w.npkts;
        let (first, last) = (k == 0, k + 1 >= w.npsn);
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
                ib.bth.opcode = match w.wr.op {
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
                if last {
                    match w.wr.op {
                        SendOp::SendWithImm(imm) => ib.imm = Some(imm),
                        SendOp::SendWithInv(rkey) => ib.ieth = Some(rkey),
                        _ => {}
                    }
                }
                ib.irn = wire.send_header(w, k);
                data = true;
            }
            SendOp::Write(remote) | SendOp::WriteWithImm(remote, _) => {
                let imm = match w.wr.op {
                    SendOp::WriteWithImm(_, imm) => Some(imm),
                    _ => None,
                };
                ib.bth.opcode = if imm.is_some() {
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
                let reth = RethRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    dma_len: w.len as u32,
                };
                if first || wire.places_every_packet() {
                    ib.reth = Some(reth);
                }
                if last {
                    ib.imm = imm;
                }
                ib.irn = wire.write_header(w, k, last, imm.is_some());
                data = true;
            }
            SendOp::Read(remote) => {
                ib.bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
                // Standard RoCE resends a Read from a missing response as a Read of the rest.
                let (va, len) = if wire.splits_response_psns() {
                    (remote.addr, w.len)
                } else {
                    (remote.addr + off, w.len - off.min(w.len))
                };
                ib.reth = Some(RethRepr {
                    va,
                    rkey: remote.rkey,
                    dma_len: len as u32,
                });
                ib.irn = wire.read_header(w, k, off);
                if !wire.splits_response_psns() {
                    covers = n - k.min(n);
                }
            }
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
            } => {
                ib.bth.opcode = Opcode::RC_COMPARE_SWAP;
                ib.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    swap_add: swap,
                    compare,
                });
                ib.irn = wire.atomic_header(w);
            }
            SendOp::FetchAdd { remote, add } => {
                ib.bth.opcode = Opcode::RC_FETCH_ADD;
                ib.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    swap_add: add,
                    compare: 0,
                });
                ib.irn = wire.atomic_header(w);
            }
        }
        let last_of_msg = last || !data;
        let every = self.cfg.recovery.ack_every;
        ib.bth.ack_req = wire.acks_every_packet()
            || last_of_msg
            || (!mode.restarts_messages() && k % every == every - 1);
        ib.bth.solicited = last_of_msg && w.wr.solicited && data;
        if data {
            ib.payload_len = chunk as usize;
            if M::HOLDS_BYTES && chunk > 0 {
                let sg = &w.wr.sg_list;
                // Local buffers were checked when the WQE started; a failure now (a region
                // deregistered meanwhile) sends zeros rather than nothing — never what the
                // buffer held from an earlier packet.
                if gather(mem, sg, off, chunk, payload).is_err() {
                    payload.clear();
                    payload.fill(chunk as usize).fill(0);
                }
            }
        }
        covers.max(1)
    }
}
