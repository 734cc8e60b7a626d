//! The initiator's half of a DRP endpoint (seed 003 §1.3, the initiator's pseudo-code): posting
//! a transfer, the set-up request and its retries, the direct/indirect choice and the simulated
//! reply, a write's data sender or a read's receiver, release, completion, and their timers.

use irn_wire::drp::{DrpRepr, CTRL_CONN_REQ, CTRL_REL_REQ, STATUS_OK};

use super::window::{backed_off, AckOutcome, Arrival, FrameReceiver, FrameSender};
use super::{
    frames_of, mode_bit, type_bit, DrpCompletion, DrpEndpoint, DrpEvent, DrpMode, DrpOp,
    DrpPostError, DrpRole, DrpStatus, TransferMode,
};
use crate::time::Time;

/// The initiator's side of one transfer.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub(super) op: DrpOp,
    pub(super) sba: u64,
    pub(super) dba: u64,
    pub(super) len: u64,
    pub(super) started: Time,
    /// A valid reply (or, for a read, data) has arrived.
    pub(super) connected: bool,
    /// Data transfer started: in which mode.
    pub(super) mode: Option<TransferMode>,
    pub(super) setup_attempts: u32,
    /// Set-up or release retransmit timer.
    pub(super) deadline: Option<Time>,
    pub(super) expiries: u32,
    /// Write: the data sender.
    pub(super) sender: Option<FrameSender>,
    /// Read: the data receiver.
    pub(super) receiver: FrameReceiver,
    /// Read: frames in the transfer, known once the frame ending the region arrives (the
    /// responder frames the data with its own payload size).
    pub(super) read_frames: Option<u32>,
    pub(super) releasing: bool,
}

impl DrpEndpoint {
    fn check_local(&self, addr: u64, len: u64) -> Result<(), DrpPostError> {
        if len > u64::from(u32::MAX) {
            return Err(DrpPostError::TooLong(len));
        }
        match addr.checked_add(len) {
            Some(end) if end <= self.memory.len() as u64 => Ok(()),
            _ => Err(DrpPostError::OutOfMemory {
                addr,
                len,
                memory: self.memory.len(),
            }),
        }
    }

    fn post(
        &mut self,
        now: Time,
        op: DrpOp,
        local: u64,
        remote: u64,
        len: u64,
    ) -> Result<u32, DrpPostError> {
        self.check_local(local, len)?;
        if remote.checked_add(len).is_none() {
            return Err(DrpPostError::RemoteWraps { addr: remote, len });
        }
        let tid = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1).max(1);
        let o = Outgoing {
            op,
            sba: local,
            dba: remote,
            len,
            started: now,
            connected: false,
            mode: None,
            setup_attempts: 0,
            deadline: None,
            expiries: 0,
            sender: None,
            receiver: FrameReceiver::default(),
            read_frames: (len == 0).then_some(0),
            releasing: false,
        };
        self.outgoing.insert(tid, o);
        self.send_request(now, tid);
        Ok(tid)
    }

    /// Writes `len` bytes of local memory at `local` to the peer's memory at `remote`; returns
    /// the transfer's TID.
    pub fn post_write(
        &mut self,
        now: Time,
        local: u64,
        remote: u64,
        len: u64,
    ) -> Result<u32, DrpPostError> {
        self.post(now, DrpOp::Write, local, remote, len)
    }

    /// Reads `len` bytes of the peer's memory at `remote` into local memory at `local`.
    pub fn post_read(
        &mut self,
        now: Time,
        local: u64,
        remote: u64,
        len: u64,
    ) -> Result<u32, DrpPostError> {
        self.post(now, DrpOp::Read, local, remote, len)
    }

    fn send_request(&mut self, now: Time, tid: u32) {
        let setup_timeout = self.config.setup_timeout;
        let Some(o) = self.outgoing.get_mut(&tid) else {
            return;
        };
        o.setup_attempts += 1;
        o.deadline = Some(now + setup_timeout);
        let mode = o.mode.unwrap_or(TransferMode::Direct);
        let repr = DrpRepr {
            control: CTRL_CONN_REQ | type_bit(o.op) | mode_bit(mode),
            status: 0,
            tid,
            sn: 0,
            ackn: 0,
            sba: o.sba,
            dba: o.dba,
            len: u32::try_from(o.len).unwrap_or(u32::MAX),
        };
        self.counters.requests_tx += 1;
        self.control.push_back(repr);
    }

    fn start_sending(&mut self, now: Time, tid: u32, mode: TransferMode, simulated: bool) {
        let Some(o) = self.outgoing.get_mut(&tid) else {
            return;
        };
        if o.mode.is_some() {
            return;
        }
        o.mode = Some(mode);
        if simulated {
            self.counters.simulated_replies += 1;
        }
        self.events
            .push_back(DrpEvent::Connected { tid, simulated });
        if o.op == DrpOp::Write {
            o.sender = Some(FrameSender::for_transfer(&self.config, o.len));
        }
        self.maybe_release(now, tid);
    }

    pub(super) fn on_reply(&mut self, now: Time, r: &DrpRepr) {
        let dynamic = self.config.mode == DrpMode::Dynamic;
        let Some(o) = self.outgoing.get_mut(&r.tid) else {
            self.counters.stale_replies += 1;
            return;
        };
        if o.releasing || (o.connected && o.op == DrpOp::Write) {
            self.counters.stale_replies += 1;
            return;
        }
        if o.connected {
            // A read responder repeats its reply until it hears our confirmation: repeat it.
            self.counters.stale_replies += 1;
            let ack = Self::ack_frame(r.tid, DrpOp::Read, o.receiver.expected);
            self.control.push_back(ack);
            return;
        }
        if r.status == STATUS_OK {
            o.connected = true;
            // A read's initiator watches for data (re-confirming if none comes); a write's
            // sender has its own timer.
            o.deadline = (o.op == DrpOp::Read).then(|| now + self.config.data_timeout);
            o.expiries = 0;
            if o.op == DrpOp::Read {
                // Confirm the reply (the responder sends once it hears this), before any release
                // request, which the responder refuses until it has started.
                let ack = Self::ack_frame(r.tid, DrpOp::Read, o.receiver.expected);
                self.control.push_back(ack);
            }
            if o.mode.is_some() {
                // Indirect already: "update status block and abort REQ_ACK".
                self.maybe_release(now, r.tid);
            } else {
                self.start_sending(now, r.tid, TransferMode::Direct, false);
            }
        } else {
            self.counters.invalid_replies += 1;
            // "Reset the timeout timer and wait to re-request."
            o.deadline = Some(now + self.config.setup_timeout);
            if dynamic && o.op == DrpOp::Write && o.mode.is_none() {
                self.start_sending(now, r.tid, TransferMode::Indirect, true);
            }
        }
    }

    pub(super) fn on_write_ack(&mut self, now: Time, r: &DrpRepr) {
        let rto = self.config.data_timeout;
        let Some(snd) = self
            .outgoing
            .get_mut(&r.tid)
            .filter(|o| o.op == DrpOp::Write)
            .and_then(|o| o.sender.as_mut())
        else {
            self.counters.unknown_tid += 1;
            return;
        };
        match snd.on_ack(now, rto, r.ackn) {
            AckOutcome::Progress => self.maybe_release(now, r.tid),
            AckOutcome::FastRetransmit => self.counters.fast_retransmits += 1,
            AckOutcome::Invalid => self.counters.invalid_acks += 1,
            AckOutcome::Duplicate => {}
        }
    }

    pub(super) fn on_read_data(&mut self, now: Time, r: &DrpRepr, payload: &[u8]) {
        let Some(o) = self
            .outgoing
            .get_mut(&r.tid)
            .filter(|o| o.op == DrpOp::Read)
        else {
            self.counters.unknown_tid += 1;
            return;
        };
        let arrival = o.receiver.classify(r.sn);
        let len = payload.len() as u64;
        let end = r.sba.saturating_add(len);
        if arrival == Arrival::OutOfWindow {
            self.counters.out_of_window += 1;
            return;
        }
        if arrival == Arrival::New && (r.sba < o.sba || end > o.sba + o.len) {
            self.counters.out_of_region += len;
            return;
        }
        if !o.connected {
            // Data before the reply: the responder registered and went indirect (its valid reply
            // was lost). Data that fits the transfer is the proof of connection.
            o.connected = true;
            o.expiries = 0;
            self.start_sending(now, r.tid, TransferMode::Indirect, false);
        }
        let o = self.outgoing.get_mut(&r.tid).expect("present");
        match arrival {
            Arrival::OutOfWindow => unreachable!("returned above"),
            Arrival::Duplicate => self.counters.duplicate_data += 1,
            Arrival::New => {
                self.memory[r.sba as usize..end as usize].copy_from_slice(payload);
                o.receiver.record(r.sn);
                if end == o.sba + o.len {
                    o.read_frames = Some(r.sn + 1);
                }
                o.deadline = Some(now + self.config.data_timeout);
                o.expiries = 0;
            }
        }
        let ack = Self::ack_frame(r.tid, DrpOp::Read, o.receiver.expected);
        self.control.push_back(ack);
        self.maybe_release(now, r.tid);
    }

    /// Sends the release request once the connection is up and the data is all through.
    fn maybe_release(&mut self, now: Time, tid: u32) {
        let Some(o) = self.outgoing.get_mut(&tid) else {
            return;
        };
        if o.releasing || !o.connected || o.mode.is_none() {
            return;
        }
        let data_done = match o.op {
            DrpOp::Write => o.sender.as_ref().is_some_and(FrameSender::done),
            DrpOp::Read => o.read_frames == Some(o.receiver.expected),
        };
        if !data_done {
            return;
        }
        o.releasing = true;
        o.expiries = 0;
        if let Some(s) = o.sender.as_mut() {
            s.deadline = None;
        }
        self.send_release(now, tid);
    }

    fn send_release(&mut self, now: Time, tid: u32) {
        let (setup_timeout, payload) = (self.config.setup_timeout, self.config.payload);
        let Some(o) = self.outgoing.get_mut(&tid) else {
            return;
        };
        o.deadline = Some(now + setup_timeout);
        let frames = match o.op {
            DrpOp::Write => frames_of(o.len, payload),
            DrpOp::Read => o.read_frames.unwrap_or(0),
        };
        self.control.push_back(DrpRepr {
            control: CTRL_REL_REQ | type_bit(o.op),
            tid,
            sn: frames,
            len: u32::try_from(o.len).unwrap_or(u32::MAX),
            ..DrpRepr::default()
        });
    }

    pub(super) fn on_release_reply(&mut self, now: Time, r: &DrpRepr) {
        match self.outgoing.get(&r.tid) {
            Some(o) if o.releasing => {}
            _ => {
                self.counters.stale_replies += 1;
                return;
            }
        }
        self.finish(now, r.tid, DrpStatus::Success);
    }

    fn finish(&mut self, now: Time, tid: u32, status: DrpStatus) {
        let Some(o) = self.outgoing.remove(&tid) else {
            return;
        };
        self.events.push_back(DrpEvent::Complete(DrpCompletion {
            tid,
            role: DrpRole::Initiator,
            op: o.op,
            status,
            sba: o.sba,
            dba: o.dba,
            len: o.len,
            mode: o.mode.unwrap_or(TransferMode::Direct),
            started: o.started,
            finished: now,
            setup_attempts: o.setup_attempts,
            retransmitted: o.sender.as_ref().map_or(0, |s| s.retransmitted),
        }));
    }

    /// The initiator's timers: set-up and release retransmission, a read's watch for data, the
    /// data sender's retransmission.
    pub(super) fn initiator_timeouts(&mut self, now: Time) {
        let cfg = self.config.clone();
        let tids: Vec<u32> = self.outgoing.keys().copied().collect();
        for tid in tids {
            let Some(o) = self.outgoing.get_mut(&tid) else {
                continue;
            };
            if o.deadline.is_some_and(|d| d <= now) {
                self.counters.timeouts += 1;
                o.expiries += 1;
                if o.expiries > cfg.max_retries {
                    self.finish(now, tid, DrpStatus::RetryExceeded);
                    continue;
                }
                if o.releasing {
                    self.send_release(now, tid);
                } else if o.connected {
                    // A read waiting for data: confirm again what we have, backing off as the
                    // responder's data timer does.
                    o.deadline = Some(now + backed_off(cfg.data_timeout, o.expiries));
                    let ack = Self::ack_frame(tid, DrpOp::Read, o.receiver.expected);
                    self.control.push_back(ack);
                } else {
                    let go_indirect = cfg.mode == DrpMode::Dynamic
                        && o.op == DrpOp::Write
                        && o.mode.is_none()
                        && o.expiries >= cfg.indirect_after;
                    // Set-up goes on in parallel with an indirect transfer.
                    self.send_request(now, tid);
                    if go_indirect {
                        self.start_sending(now, tid, TransferMode::Indirect, true);
                    }
                }
            }
            let Some(s) = self
                .outgoing
                .get_mut(&tid)
                .and_then(|o| o.sender.as_mut())
                .filter(|s| s.deadline.is_some_and(|d| d <= now))
            else {
                continue;
            };
            self.counters.timeouts += 1;
            s.on_timeout(now, cfg.data_timeout);
            if s.expiries > cfg.max_retries {
                self.finish(now, tid, DrpStatus::RetryExceeded);
            }
        }
    }
}
