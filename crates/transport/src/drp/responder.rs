//! The responder's half of a DRP endpoint (seed 003 §1.2–§1.3, the responder's pseudo-code):
//! set-up requests and the upper layer's registration, valid and invalid replies, placing write
//! data directly or parking it in the indirect buffer and draining it, a read's data sender,
//! release, and forgetting an initiator that fell silent.

use irn_wire::drp::{
    DrpRepr, CTRL_CONN_ACK, CTRL_INDIRECT, CTRL_REL_ACK, STATUS_OK, STATUS_REG_FAILED,
};

use super::window::{AckOutcome, Arrival, FrameReceiver, FrameSender, MAX_BACKOFF};
use super::{
    type_bit, DrpCompletion, DrpEndpoint, DrpEvent, DrpMode, DrpOp, DrpRole, DrpStatus,
    TransferMode,
};
use crate::time::{Dur, Time};

/// Where the responder is with its upper layer's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Registration {
    None,
    Pending,
    Failed,
    Done,
}

/// The responder's side of one transfer.
#[derive(Debug)]
pub(super) struct Incoming {
    pub(super) op: DrpOp,
    /// The request has been seen (SBA, DBA, LEN below are known).
    pub(super) known: bool,
    pub(super) sba: u64,
    pub(super) dba: u64,
    pub(super) len: u64,
    pub(super) started: Time,
    pub(super) reg: Registration,
    pub(super) registrations: u32,
    /// Write: frames received.
    pub(super) receiver: FrameReceiver,
    /// Write: frames parked before registration, as (responder address, bytes).
    pub(super) parked: Vec<(u64, Vec<u8>)>,
    pub(super) parked_bytes: usize,
    pub(super) indirect: bool,
    /// Read: the data sender, once sending.
    pub(super) sender: Option<FrameSender>,
    /// Read: reply retransmit timer while unconfirmed.
    pub(super) deadline: Option<Time>,
    pub(super) expiries: u32,
    /// When the peer last sent a frame of this transfer.
    pub(super) last_heard: Time,
    /// Parked data fell outside the region when drained: the transfer cannot succeed.
    pub(super) damaged: bool,
}

impl Incoming {
    pub(super) fn new(op: DrpOp, now: Time) -> Incoming {
        Incoming {
            op,
            known: false,
            sba: 0,
            dba: 0,
            len: 0,
            started: now,
            reg: Registration::None,
            registrations: 0,
            receiver: FrameReceiver::default(),
            parked: Vec::new(),
            parked_bytes: 0,
            indirect: false,
            sender: None,
            deadline: None,
            expiries: 0,
            last_heard: now,
            damaged: false,
        }
    }
}

impl DrpEndpoint {
    /// How long a responder keeps a transfer whose initiator has fallen silent: longer than a
    /// live initiator can go unheard before it gives up itself — every one of its
    /// `max_retries` retransmissions lost, each after a timer backed off to the limit — so that
    /// only an initiator that has failed or died is forgotten. (Bounding it by one timer period
    /// forgot live initiators whose frames were lost a few times in a row.)
    pub(super) fn idle_timeout(&self) -> Dur {
        let longest = self.config.setup_timeout.max(self.config.data_timeout);
        let periods = (u64::from(self.config.max_retries) + 2) * u64::from(MAX_BACKOFF);
        Dur::from_picos(longest.as_picos().saturating_mul(periods))
    }

    /// The upper layer's answer to [`DrpEvent::Register`]: whether registration succeeded. The
    /// responder answers the initiator with a valid or an invalid reply, and on success drains the
    /// transfer's indirect buffer into the region.
    pub fn registration_done(&mut self, now: Time, tid: u32, ok: bool) {
        let Some(s) = self.incoming.get_mut(&tid) else {
            self.counters.stray_registrations += 1;
            return;
        };
        if s.reg != Registration::Pending {
            self.counters.stray_registrations += 1;
            return;
        }
        // The NIC cannot map a region beyond the memory it has, whatever the upper layer says.
        let fits = s
            .dba
            .checked_add(s.len)
            .is_some_and(|e| e <= self.memory.len() as u64);
        if ok && !fits {
            self.counters.bad_regions += 1;
        }
        if !(ok && fits) {
            s.reg = Registration::Failed;
            let reply = Self::reply(tid, s, STATUS_REG_FAILED);
            self.control.push_back(reply);
            return;
        }
        s.reg = Registration::Done;
        // Drain the indirect buffer (seed 003 §1.2 step 3: "memory[DBA:DBA+LEN-1] <= indirect
        // buffer"), placing nothing outside the region.
        let parked = std::mem::take(&mut s.parked);
        self.parked_total -= s.parked_bytes;
        s.parked_bytes = 0;
        let (lo, hi) = (s.dba, s.dba.saturating_add(s.len));
        for (addr, bytes) in parked {
            let end = addr.saturating_add(bytes.len() as u64);
            if addr >= lo && end <= hi && end <= self.memory.len() as u64 {
                self.memory[addr as usize..end as usize].copy_from_slice(&bytes);
                self.counters.indirect_drained += bytes.len() as u64;
            } else {
                self.counters.out_of_region += bytes.len() as u64;
                s.damaged = true;
            }
        }
        let reply = Self::reply(tid, s, STATUS_OK);
        if s.op == DrpOp::Read && s.sender.is_none() {
            s.deadline = Some(now + self.config.setup_timeout);
            s.expiries = 0;
        }
        self.control.push_back(reply);
    }

    fn reply(tid: u32, s: &Incoming, status: u8) -> DrpRepr {
        DrpRepr {
            control: CTRL_CONN_ACK | type_bit(s.op),
            status,
            tid,
            sn: 0,
            ackn: 0,
            sba: s.sba,
            dba: s.dba,
            len: u32::try_from(s.len).unwrap_or(u32::MAX),
        }
    }

    pub(super) fn on_request(&mut self, now: Time, r: &DrpRepr, op: DrpOp) {
        if self.released.contains(&r.tid) {
            // The transfer is over; its request is a late duplicate.
            self.counters.duplicate_requests += 1;
            return;
        }
        let len = u64::from(r.len);
        if r.sba.checked_add(len).is_none() || r.dba.checked_add(len).is_none() {
            // A region that wraps the address space: no registration could mean anything.
            self.counters.bad_regions += 1;
            return;
        }
        let s = self
            .incoming
            .entry(r.tid)
            .or_insert_with(|| Incoming::new(op, now));
        s.last_heard = now;
        if s.op != op {
            self.counters.bad_control += 1;
            return;
        }
        if !s.known {
            s.known = true;
            s.sba = r.sba;
            s.dba = r.dba;
            s.len = u64::from(r.len);
        }
        match s.reg {
            Registration::None | Registration::Failed => {
                s.reg = Registration::Pending;
                s.registrations += 1;
                self.events.push_back(DrpEvent::Register {
                    tid: r.tid,
                    addr: s.dba,
                    len: s.len,
                    op,
                });
            }
            Registration::Pending => self.counters.duplicate_requests += 1,
            Registration::Done => {
                // Our valid reply was lost: say it again.
                let reply = Self::reply(r.tid, s, STATUS_OK);
                self.control.push_back(reply);
            }
        }
    }

    pub(super) fn on_write_data(&mut self, now: Time, r: &DrpRepr, payload: &[u8]) {
        let indirect_frame = r.control & CTRL_INDIRECT != 0;
        if !self.incoming.contains_key(&r.tid) {
            if !indirect_frame || self.released.contains(&r.tid) {
                self.counters.unknown_tid += 1;
                return;
            }
            // Indirect data before the request (seed 003 §1.2: "the responder finds no connection
            // in its status block and can only put the data in the indirect buffer").
            // Only a frame the buffer can take opens an entry, so forged frames cannot grow
            // the table beyond what the buffer holds.
            if payload.is_empty() || self.parked_total + payload.len() > self.config.indirect_buffer
            {
                self.counters.indirect_full += u64::from(!payload.is_empty());
                self.counters.unknown_tid += u64::from(payload.is_empty());
                return;
            }
            self.incoming
                .insert(r.tid, Incoming::new(DrpOp::Write, now));
        }
        let capacity = self.config.indirect_buffer;
        let s = self.incoming.get_mut(&r.tid).expect("present");
        if s.op != DrpOp::Write {
            self.counters.bad_control += 1;
            return;
        }
        s.indirect |= indirect_frame;
        s.last_heard = now;
        match s.receiver.classify(r.sn) {
            Arrival::OutOfWindow => {
                self.counters.out_of_window += 1;
                return;
            }
            Arrival::Duplicate => self.counters.duplicate_data += 1,
            Arrival::New => {
                let len = payload.len() as u64;
                let end = r.dba.saturating_add(len);
                if s.reg == Registration::Done {
                    if r.dba < s.dba
                        || end > s.dba.saturating_add(s.len)
                        || end > self.memory.len() as u64
                    {
                        self.counters.out_of_region += len;
                        return;
                    }
                    self.memory[r.dba as usize..end as usize].copy_from_slice(payload);
                } else {
                    if self.parked_total + payload.len() > capacity {
                        self.counters.indirect_full += 1;
                        return;
                    }
                    self.parked_total += payload.len();
                    s.parked_bytes += payload.len();
                    s.parked.push((r.dba, payload.to_vec()));
                    self.counters.indirect_frames += 1;
                }
                s.receiver.record(r.sn);
            }
        }
        let ack = Self::ack_frame(r.tid, DrpOp::Write, s.receiver.expected);
        self.control.push_back(ack);
    }

    pub(super) fn on_read_ack(&mut self, now: Time, r: &DrpRepr) {
        let rto = self.config.data_timeout;
        let Some(s) = self.incoming.get_mut(&r.tid) else {
            self.counters.unknown_tid += 1;
            return;
        };
        if s.op != DrpOp::Read || s.reg != Registration::Done {
            self.counters.unknown_tid += 1;
            return;
        }
        s.last_heard = now;
        match &mut s.sender {
            None => {
                // The initiator confirms our valid reply: start sending (direct read).
                s.deadline = None;
                s.sender = Some(FrameSender::for_transfer(&self.config, s.len));
            }
            Some(snd) => match snd.on_ack(now, rto, r.ackn) {
                AckOutcome::FastRetransmit => self.counters.fast_retransmits += 1,
                AckOutcome::Invalid => self.counters.invalid_acks += 1,
                _ => {}
            },
        }
    }

    pub(super) fn on_release(&mut self, now: Time, r: &DrpRepr, op: DrpOp) {
        let rel_ack = DrpRepr {
            control: CTRL_REL_ACK | type_bit(op),
            tid: r.tid,
            sn: r.sn,
            len: r.len,
            ..DrpRepr::default()
        };
        if self.released.contains(&r.tid) {
            self.counters.duplicate_releases += 1;
            self.control.push_back(rel_ack);
            return;
        }
        let Some(s) = self.incoming.get(&r.tid) else {
            self.counters.refused_releases += 1;
            return;
        };
        // Release only a transfer whose data is all where it belongs.
        let complete = s.op == op
            && !s.damaged
            && s.reg == Registration::Done
            && s.parked.is_empty()
            && match op {
                DrpOp::Write => s.receiver.expected == r.sn,
                // The initiator releases a read only once it holds every frame.
                DrpOp::Read => s.sender.is_some(),
            };
        if !complete {
            self.counters.refused_releases += 1;
            return;
        }
        let s = self.incoming.remove(&r.tid).expect("present");
        self.released.push_back(r.tid);
        while self.released.len() > self.config.remembered_releases {
            self.released.pop_front();
        }
        self.control.push_back(rel_ack);
        self.events.push_back(DrpEvent::Complete(DrpCompletion {
            tid: r.tid,
            role: DrpRole::Responder,
            op,
            status: DrpStatus::Success,
            sba: s.sba,
            dba: s.dba,
            len: s.len,
            mode: if s.indirect {
                TransferMode::Indirect
            } else {
                TransferMode::Direct
            },
            started: s.started,
            finished: now,
            setup_attempts: s.registrations,
            retransmitted: s.sender.as_ref().map_or(0, |x| x.retransmitted),
        }));
    }

    /// The responder's timers: forgetting a silent initiator, a read's unconfirmed reply, the
    /// read data sender's retransmission.
    pub(super) fn responder_timeouts(&mut self, now: Time) {
        let cfg = self.config.clone();
        let idle = self.idle_timeout();
        let tids: Vec<u32> = self.incoming.keys().copied().collect();
        for tid in tids {
            let s = self.incoming.get_mut(&tid).expect("present");
            if s.last_heard + idle <= now {
                // The initiator is gone (it failed or died): free what the transfer holds.
                self.parked_total -= s.parked_bytes;
                self.incoming.remove(&tid);
                self.counters.abandoned += 1;
                continue;
            }
            if s.deadline.is_some_and(|d| d <= now) {
                // A read responder's valid reply is unconfirmed.
                self.counters.timeouts += 1;
                s.expiries += 1;
                if s.expiries > cfg.max_retries {
                    // The initiator is gone; forget the transfer (its upper layer registered
                    // the region and gets no completion: the read was never served).
                    self.incoming.remove(&tid);
                    continue;
                }
                if cfg.mode == DrpMode::Dynamic && s.expiries >= cfg.indirect_after {
                    s.deadline = None;
                    s.indirect = true;
                    s.sender = Some(FrameSender::for_transfer(&cfg, s.len));
                } else {
                    s.deadline = Some(now + cfg.setup_timeout);
                    let reply = Self::reply(tid, s, STATUS_OK);
                    self.control.push_back(reply);
                }
            }
            let Some(x) = s
                .sender
                .as_mut()
                .filter(|x| x.deadline.is_some_and(|d| d <= now))
            else {
                continue;
            };
            self.counters.timeouts += 1;
            x.on_timeout(now, cfg.data_timeout);
            if x.expiries > cfg.max_retries {
                self.incoming.remove(&tid);
            }
        }
    }
}
