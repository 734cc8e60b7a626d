//! # Dynamic RDMA (SPEC T10; seed 003, Li et al., "Hardware Accelerated Dynamic RDMA Method for
//! Gigabit Ethernet", 2018)
//!
//! A sans-IO DRP endpoint: one NIC's transfer engine towards one peer, in both roles. Like the
//! queue pair it reads no clock and owns no socket: the driver passes `now` into
//! [`DrpEndpoint::handle_frame`], [`DrpEndpoint::handle_timeout`] and the verbs, and takes frames
//! ([`DrpEndpoint::poll_transmit`]), events for the upper layer ([`DrpEndpoint::poll_event`]) and
//! the next deadline ([`DrpEndpoint::poll_timeout`]) out. The host memory the transfers read and
//! write is the endpoint's own byte array ([`DrpEndpoint::memory`]); addresses are offsets in it.
//!
//! ## The protocol (seed 003 §1.1–§1.3)
//!
//! *Traditional* ([`DrpMode::Traditional`], "direct" transfer): the initiator sends a set-up
//! request (TID, TYPE, MODE, SBA, DBA, LEN); the responder's upper layer registers the memory and
//! answers with a *valid* reply, or an *invalid* one if registration failed; the initiator re-sends
//! the request each time its retransmit timer expires until a valid reply comes, and only then
//! transfers. When every frame is acknowledged it releases the connection (release request and
//! reply) and signals its upper layer.
//!
//! *Dynamic* ([`DrpMode::Dynamic`]) keeps that, and adds *indirect* transfer (§1.2) with the
//! dynamic choice of §1.3, exactly as the seed's pseudo-code: a valid reply → direct; an invalid
//! reply → indirect at once; no reply → re-send the request, and when the retransmit timer expires
//! the second time ([`DrpConfig::indirect_after`]) without a valid reply → indirect. Indirect
//! means the initiator gives its upper layer a *simulated* reply ([`DrpEvent::Connected`] with
//! `simulated: true`) and starts sending data, while it goes on re-sending the request; a valid
//! reply arriving later updates the status block and is not passed up ("abort REQ_ACK"). The
//! responder places data of a transfer whose registration is done directly in memory (the case of
//! a lost *valid* reply), and otherwise parks it in its **indirect buffer** until its upper layer
//! registers the region, then copies it there.
//!
//! *Reads* are the mirror image (§1.2, last paragraph): the responder is the data source and
//! chooses the mode. It sends data once the initiator confirms the valid reply (an acknowledgement
//! of frame 0, the three-way handshake of a read), or — dynamic — when its reply timer expires the
//! second time unconfirmed, i.e. when the valid reply was probably lost. The initiator's memory is
//! registered before it asks, so a read never needs an indirect buffer; data of the transfer
//! (inside its window and region) arriving before the reply tells the initiator the connection is
//! up.
//!
//! Reliability is the seed's "TCP-like" window of 8 frames with fast retransmission; the data
//! timer backs off exponentially on consecutive expiries, as TCP's does (the `window` module's
//! docs give the rules). Release is retried on the set-up timer; a
//! responder remembers the last [`DrpConfig::remembered_releases`] released TIDs so that a
//! duplicate release request (its reply was lost) is answered again.
//!
//! ## Decisions the seed leaves open
//!
//! * **A full indirect buffer stops accepting**: a data frame that does not fit is dropped
//!   unacknowledged (counted as `indirect_full`), so the sender's window stalls and its
//!   retransmit timer offers the frame again after the buffer drained. Falling back to waiting
//!   would need a new message; stopping needs none, and the sender's behaviour is the one it has
//!   for loss anyway. A traditional NIC has no indirect buffer (capacity 0).
//! * **Data frames carry their own addresses**: SBA and DBA of a data frame are the addresses of
//!   *that frame's* bytes at the initiator and the responder (the seed, §1.1, in our translation:
//!   the responder "determines the data's address in the region from the header's DBA, LEN, SN"),
//!   so a responder that never saw the
//!   request can still buffer the data and place it once the region is known. It places nothing
//!   outside the registered region (counted `out_of_region`).
//! * **Timers**: one retransmit timer for set-up and release frames ([`DrpConfig::setup_timeout`])
//!   and one for data ([`DrpConfig::data_timeout`]); a transfer fails with
//!   [`DrpStatus::RetryExceeded`] after [`DrpConfig::max_retries`] consecutive expiries of either.
//! * **Bad input is counted and dropped, never a panic** ([`DrpCounters`]): truncated frames, data
//!   for an unknown TID in direct mode, replies for finished transfers, duplicate releases of
//!   forgotten TIDs, ACKs for frames never sent, regions that wrap the address space or lie
//!   beyond memory (registration fails). Parked data that falls outside the region when drained
//!   makes the transfer fail (its release is refused) rather than complete with bytes missing.
//! * **A silent initiator is forgotten**: a responder drops a transfer (and frees its parked
//!   bytes) when its initiator has been unheard for longer than a live one can be before giving
//!   up itself (all its retries lost, timers backed off to the limit); indirect data for an unknown TID opens an entry only if the buffer can take it.
//!
//! Frame layout: [`irn_wire::drp`] and docs/WIRE.md. An acknowledgement of data is a frame with
//! none of the set-up, data or release bits: it carries ACKN and the TYPE bit of its transfer.
//! The TYPE bit with the frame kind says which side of a transfer sent it, so the two ends may
//! initiate transfers towards each other with the same TIDs.

mod initiator;
mod responder;
mod types;
mod window;

use std::collections::{BTreeMap, VecDeque};

use irn_wire::drp::{
    Drp, DrpRepr, CTRL_CONN_ACK, CTRL_CONN_REQ, CTRL_DATA, CTRL_INDIRECT, CTRL_REL_ACK,
    CTRL_REL_REQ, CTRL_WRITE, HEADER_LEN,
};

use crate::time::Time;
use initiator::Outgoing;
use responder::Incoming;
pub use types::{
    DrpCompletion, DrpConfig, DrpConfigError, DrpCounters, DrpEvent, DrpMode, DrpOp, DrpPostError,
    DrpRole, DrpStatus, TransferMode,
};
use window::FrameSender;
pub use window::{MAX_BACKOFF, MAX_WINDOW};

/// One DRP endpoint (see the module docs for the contract and the protocol).
#[derive(Debug)]
pub struct DrpEndpoint {
    config: DrpConfig,
    memory: Vec<u8>,
    next_tid: u32,
    outgoing: BTreeMap<u32, Outgoing>,
    incoming: BTreeMap<u32, Incoming>,
    released: VecDeque<u32>,
    parked_total: usize,
    control: VecDeque<DrpRepr>,
    events: VecDeque<DrpEvent>,
    /// Round-robin cursor over transfers with data to send: (is incoming, TID) served last.
    cursor: (bool, u32),
    counters: DrpCounters,
}

fn frames_of(len: u64, payload: u32) -> u32 {
    u32::try_from(len.div_ceil(u64::from(payload))).unwrap_or(u32::MAX)
}

fn type_bit(op: DrpOp) -> u8 {
    match op {
        DrpOp::Write => CTRL_WRITE,
        DrpOp::Read => 0,
    }
}

fn mode_bit(mode: TransferMode) -> u8 {
    match mode {
        TransferMode::Direct => 0,
        TransferMode::Indirect => CTRL_INDIRECT,
    }
}

impl DrpEndpoint {
    /// An endpoint with `memory` zeroed bytes of host memory.
    pub fn new(config: DrpConfig, memory: usize) -> Result<Self, DrpConfigError> {
        config.validate()?;
        Ok(DrpEndpoint {
            config,
            memory: vec![0; memory],
            next_tid: 1,
            outgoing: BTreeMap::new(),
            incoming: BTreeMap::new(),
            released: VecDeque::new(),
            parked_total: 0,
            control: VecDeque::new(),
            events: VecDeque::new(),
            cursor: (false, 0),
            counters: DrpCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DrpConfig {
        &self.config
    }
    /// Host memory.
    pub fn memory(&self) -> &[u8] {
        &self.memory
    }
    /// Host memory, for the upper layer to fill.
    pub fn memory_mut(&mut self) -> &mut [u8] {
        &mut self.memory
    }
    /// Counters.
    pub fn counters(&self) -> &DrpCounters {
        &self.counters
    }
    /// Bytes in the indirect buffer now.
    pub fn indirect_bytes(&self) -> usize {
        self.parked_total
    }
    /// Transfers in progress (both roles).
    pub fn active(&self) -> usize {
        self.outgoing.len() + self.incoming.len()
    }

    /// Sets the TID of the next transfer posted (0 is skipped). A driver whose endpoint may meet
    /// a responder that outlives it starts from a random TID, as TCP picks its initial sequence
    /// number, so that a new run's transfers are not mistaken for an old run's duplicates.
    pub fn set_next_tid(&mut self, tid: u32) {
        self.next_tid = tid.max(1);
    }

    /// Takes in one DRP frame: the bytes after the Ethernet header's EtherType.
    pub fn handle_frame(&mut self, now: Time, frame: &[u8]) {
        self.counters.frames_rx += 1;
        let view = match Drp::new_checked(frame) {
            Ok(v) => v,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        let repr = match DrpRepr::parse(&view) {
            Ok(r) => r,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        let op = if repr.control & CTRL_WRITE != 0 {
            DrpOp::Write
        } else {
            DrpOp::Read
        };
        let kind = repr.control
            & (CTRL_CONN_REQ | CTRL_CONN_ACK | CTRL_DATA | CTRL_REL_REQ | CTRL_REL_ACK);
        match (kind, op) {
            (CTRL_CONN_REQ, _) => self.on_request(now, &repr, op),
            (CTRL_CONN_ACK, _) => self.on_reply(now, &repr),
            (CTRL_DATA, DrpOp::Write) => self.on_write_data(now, &repr, view.payload()),
            (CTRL_DATA, DrpOp::Read) => self.on_read_data(now, &repr, view.payload()),
            (0, DrpOp::Write) => self.on_write_ack(now, &repr),
            (0, DrpOp::Read) => self.on_read_ack(now, &repr),
            (CTRL_REL_REQ, _) => self.on_release(now, &repr, op),
            (CTRL_REL_ACK, _) => self.on_release_reply(now, &repr),
            _ => self.counters.bad_control += 1,
        }
    }

    fn ack_frame(tid: u32, op: DrpOp, ackn: u32) -> DrpRepr {
        DrpRepr {
            control: type_bit(op),
            tid,
            ackn,
            ..DrpRepr::default()
        }
    }

    // ---------------------------------------------------------------- timers

    /// The earliest deadline, if any timer runs.
    pub fn poll_timeout(&self) -> Option<Time> {
        let out = self.outgoing.values().flat_map(|o| {
            [o.deadline, o.sender.as_ref().and_then(|s| s.deadline)]
                .into_iter()
                .flatten()
        });
        let idle = self.idle_timeout();
        let inc = self.incoming.values().flat_map(move |s| {
            [
                s.deadline,
                s.sender.as_ref().and_then(|x| x.deadline),
                Some(s.last_heard + idle),
            ]
            .into_iter()
            .flatten()
        });
        out.chain(inc).min()
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.initiator_timeouts(now);
        self.responder_timeouts(now);
    }

    // ---------------------------------------------------------------- output

    /// The next event for the upper layer.
    pub fn poll_event(&mut self) -> Option<DrpEvent> {
        self.events.pop_front()
    }

    /// Whether [`DrpEndpoint::poll_transmit`] has a frame now.
    pub fn may_transmit(&self) -> bool {
        !self.control.is_empty()
            || self
                .outgoing
                .values()
                .any(|o| !o.releasing && o.sender.as_ref().is_some_and(FrameSender::ready))
            || self
                .incoming
                .values()
                .any(|s| s.sender.as_ref().is_some_and(FrameSender::ready))
    }

    /// Writes the next frame (DRP header and payload, without the Ethernet header) into `out`,
    /// replacing its contents; `false` if there is nothing to send. Control frames (replies,
    /// ACKs, set-up and release) go before data; transfers with data take turns.
    pub fn poll_transmit(&mut self, now: Time, out: &mut Vec<u8>) -> bool {
        out.clear();
        if let Some(repr) = self.control.pop_front() {
            out.resize(HEADER_LEN, 0);
            repr.emit(out).expect("header fits");
            self.counters.frames_tx += 1;
            return true;
        }
        let Some((incoming, tid, sn)) = self.next_data(now) else {
            return false;
        };
        let payload = u64::from(self.config.payload);
        let (op, mode, sba, dba, len) = if incoming {
            let s = &self.incoming[&tid];
            let mode = if s.indirect {
                TransferMode::Indirect
            } else {
                TransferMode::Direct
            };
            (s.op, mode, s.sba, s.dba, s.len)
        } else {
            let o = &self.outgoing[&tid];
            (
                o.op,
                o.mode.unwrap_or(TransferMode::Direct),
                o.sba,
                o.dba,
                o.len,
            )
        };
        let off = u64::from(sn) * payload;
        let chunk = payload.min(len.saturating_sub(off));
        // Regions were checked not to wrap (post, request); wrapping arithmetic keeps a forged
        // one from panicking here all the same.
        let src = if incoming { dba } else { sba }.wrapping_add(off);
        let repr = DrpRepr {
            control: CTRL_DATA | type_bit(op) | mode_bit(mode),
            status: 0,
            tid,
            sn,
            ackn: 0,
            sba: sba.wrapping_add(off),
            dba: dba.wrapping_add(off),
            len: chunk as u32,
        };
        out.resize(HEADER_LEN + chunk as usize, 0);
        repr.emit(out).expect("header fits");
        // The local region was checked at post (initiator) or registration (responder); a
        // responder region beyond memory sends zeros rather than panic.
        let end = src.saturating_add(chunk).min(self.memory.len() as u64);
        if src < end {
            out[HEADER_LEN..HEADER_LEN + (end - src) as usize]
                .copy_from_slice(&self.memory[src as usize..end as usize]);
        }
        self.counters.frames_tx += 1;
        self.counters.data_tx += 1;
        true
    }

    /// The next data frame to send: (is incoming, TID, SN), round-robin after the cursor.
    fn next_data(&mut self, now: Time) -> Option<(bool, u32, u32)> {
        let rto = self.config.data_timeout;
        // Keys in order: outgoing (false, tid) before incoming (true, tid), each map sorted.
        let ready = self
            .outgoing
            .iter()
            .filter(|(_, o)| !o.releasing && o.sender.as_ref().is_some_and(FrameSender::ready))
            .map(|(&t, _)| (false, t))
            .chain(
                self.incoming
                    .iter()
                    .filter(|(_, s)| s.sender.as_ref().is_some_and(FrameSender::ready))
                    .map(|(&t, _)| (true, t)),
            );
        let mut first = None;
        let mut pick = None;
        for k in ready {
            first.get_or_insert(k);
            if k > self.cursor {
                pick = Some(k);
                break;
            }
        }
        let pick = pick.or(first)?;
        self.cursor = pick;
        let sender = if pick.0 {
            self.incoming.get_mut(&pick.1)?.sender.as_mut()?
        } else {
            self.outgoing.get_mut(&pick.1)?.sender.as_mut()?
        };
        let sn = sender.take(now, rto)?;
        Some((pick.0, pick.1, sn))
    }
}
