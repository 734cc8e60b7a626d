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
//!   bytes) when its initiator has sent nothing for twice the longest a live one can stay
//!   silent; indirect data for an unknown TID opens an entry only if the buffer can take it.
//!
//! Frame layout: [`irn_wire::drp`] and docs/WIRE.md. An acknowledgement of data is a frame with
//! none of the set-up, data or release bits: it carries ACKN and the TYPE bit of its transfer.
//! The TYPE bit with the frame kind says which side of a transfer sent it, so the two ends may
//! initiate transfers towards each other with the same TIDs.

mod window;

use std::collections::{BTreeMap, VecDeque};

use irn_wire::drp::{
    Drp, DrpRepr, CTRL_CONN_ACK, CTRL_CONN_REQ, CTRL_DATA, CTRL_INDIRECT, CTRL_REL_ACK,
    CTRL_REL_REQ, CTRL_WRITE, HEADER_LEN, STATUS_OK, STATUS_REG_FAILED,
};

use crate::time::{Dur, Time};
use window::{AckOutcome, Arrival, FrameReceiver, FrameSender};
pub use window::{MAX_BACKOFF, MAX_WINDOW};

/// Traditional or dynamic RDMA (seed 003 §1.1 and §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrpMode {
    /// Always wait for a valid set-up reply before transferring.
    Traditional,
    /// Choose direct or indirect transfer per transfer, as the seed's pseudo-code says.
    Dynamic,
}

impl DrpMode {
    /// The name the configuration and the command line use.
    pub fn name(self) -> &'static str {
        match self {
            DrpMode::Traditional => "traditional",
            DrpMode::Dynamic => "dynamic",
        }
    }
}

impl std::str::FromStr for DrpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "traditional" => Ok(DrpMode::Traditional),
            "dynamic" => Ok(DrpMode::Dynamic),
            _ => Err(format!(
                "unknown DRP mode `{s}` (expected `traditional` or `dynamic`)"
            )),
        }
    }
}

/// An endpoint's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct DrpConfig {
    /// Traditional or dynamic.
    pub mode: DrpMode,
    /// Frames in flight per transfer (the seed: 8).
    pub window: u32,
    /// Payload bytes of a full data frame (the seed: 1 024).
    pub payload: u32,
    /// Retransmit timer of set-up and release frames (and of a read responder's reply).
    pub setup_timeout: Dur,
    /// Retransmit timer of data frames.
    pub data_timeout: Dur,
    /// Set-up timer expiries without a valid reply after which a dynamic endpoint goes indirect
    /// (the seed: the second expiry).
    pub indirect_after: u32,
    /// Consecutive expiries of one timer after which a transfer fails.
    pub max_retries: u32,
    /// Duplicate ACKs that trigger fast retransmission.
    pub dup_ack_threshold: u32,
    /// Bytes of indirect buffer (a responder's, for writes whose registration is not done).
    pub indirect_buffer: usize,
    /// Released TIDs a responder remembers, to answer duplicate release requests.
    pub remembered_releases: usize,
}

impl DrpConfig {
    /// The seed's parameters for `mode`: window 8, 1 KB frames, fast retransmit on the third
    /// duplicate ACK, indirect on the second expiry; timers of 1 ms; an indirect buffer of 256 KB
    /// (two 128 KB transfers) for a dynamic endpoint and none for a traditional one.
    pub fn seed(mode: DrpMode) -> Self {
        DrpConfig {
            mode,
            window: 8,
            payload: 1024,
            setup_timeout: Dur::from_millis(1),
            data_timeout: Dur::from_millis(1),
            indirect_after: 2,
            max_retries: 32,
            dup_ack_threshold: 3,
            indirect_buffer: match mode {
                DrpMode::Traditional => 0,
                DrpMode::Dynamic => 256 * 1024,
            },
            remembered_releases: 64,
        }
    }

    /// Refuses parameters that cannot mean anything, naming the field.
    pub fn validate(&self) -> Result<(), DrpConfigError> {
        let bad = |field: &'static str, why: &'static str| Err(DrpConfigError { field, why });
        if self.window == 0 || self.window > MAX_WINDOW {
            return bad("window", "must be 1 to 64 frames");
        }
        if self.payload == 0 {
            return bad("payload", "must be at least 1 byte");
        }
        if self.setup_timeout == Dur::ZERO {
            return bad("setup_timeout", "must be positive");
        }
        if self.data_timeout == Dur::ZERO {
            return bad("data_timeout", "must be positive");
        }
        if self.indirect_after == 0 {
            return bad("indirect_after", "must be at least 1 expiry");
        }
        if self.max_retries == 0 {
            return bad("max_retries", "must be at least 1");
        }
        if self.dup_ack_threshold == 0 {
            return bad("dup_ack_threshold", "must be at least 1");
        }
        if self.remembered_releases == 0 {
            return bad(
                "remembered_releases",
                "must be at least 1 (a lost release reply could never be answered)",
            );
        }
        Ok(())
    }
}

/// A configuration field that cannot mean anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DRP configuration: `{field}` {why}")]
pub struct DrpConfigError {
    /// The field.
    pub field: &'static str,
    /// Why.
    pub why: &'static str,
}

/// Why a transfer could not be posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrpPostError {
    /// The local region lies outside the endpoint's memory.
    #[error("local region {addr:#x}+{len} lies outside the {memory}-byte memory")]
    OutOfMemory {
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
        /// Memory size.
        memory: usize,
    },
    /// LEN does not fit the frame's 32-bit field.
    #[error("transfer of {0} bytes exceeds DRP's 32-bit LEN")]
    TooLong(u64),
    /// The remote region wraps the 64-bit address space.
    #[error("remote region {addr:#x}+{len} wraps the address space")]
    RemoteWraps {
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
    },
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrpOp {
    /// Initiator memory → responder memory.
    Write,
    /// Responder memory → initiator memory.
    Read,
}

/// Direct or indirect transfer (MODE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransferMode {
    /// After a valid reply.
    Direct,
    /// Before one (dynamic RDMA).
    Indirect,
}

/// Which end of a transfer an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrpRole {
    /// This endpoint asked for the transfer.
    Initiator,
    /// The peer asked.
    Responder,
}

/// How a transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrpStatus {
    /// Every byte is at its destination and the connection is released.
    Success,
    /// A retransmit timer expired [`DrpConfig::max_retries`] times in a row (the verbs
    /// `IBV_WC_RETRY_EXC_ERR`).
    RetryExceeded,
}

/// A transfer's end, for the upper layer of either side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrpCompletion {
    /// Transfer ID (the initiator's).
    pub tid: u32,
    /// This endpoint's role.
    pub role: DrpRole,
    /// Read or write.
    pub op: DrpOp,
    /// Outcome.
    pub status: DrpStatus,
    /// Initiator base address.
    pub sba: u64,
    /// Responder base address.
    pub dba: u64,
    /// Bytes.
    pub len: u64,
    /// How the data moved.
    pub mode: TransferMode,
    /// When the transfer was posted (initiator) or first heard of (responder).
    pub started: Time,
    /// When it ended.
    pub finished: Time,
    /// Set-up requests sent (initiator), or registrations asked for (responder).
    pub setup_attempts: u32,
    /// Data frames sent again.
    pub retransmitted: u64,
}

/// What the endpoint tells its upper layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrpEvent {
    /// Responder: register `[addr, addr + len)` for transfer `tid` and answer with
    /// [`DrpEndpoint::registration_done`].
    Register {
        /// Transfer.
        tid: u32,
        /// Region start.
        addr: u64,
        /// Region length.
        len: u64,
        /// Read or write.
        op: DrpOp,
    },
    /// Initiator: the set-up reply, real or — indirect transfer — simulated by the NIC.
    Connected {
        /// Transfer.
        tid: u32,
        /// Whether the NIC made it up.
        simulated: bool,
    },
    /// A transfer ended.
    Complete(DrpCompletion),
}

/// Counters; bad input lands here, never in a panic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrpCounters {
    /// Frames taken in.
    pub frames_rx: u64,
    /// Frames sent.
    pub frames_tx: u64,
    /// Data frames sent (first time and again).
    pub data_tx: u64,
    /// Set-up requests sent.
    pub requests_tx: u64,
    /// Truncated or malformed frames.
    pub malformed: u64,
    /// Frames with an impossible combination of control bits.
    pub bad_control: u64,
    /// Data or ACKs for a TID this end does not know (and cannot buffer).
    pub unknown_tid: u64,
    /// Replies to a transfer that is over or that already has a valid one.
    pub stale_replies: u64,
    /// Invalid (registration failed) replies received.
    pub invalid_replies: u64,
    /// Requests while a registration was pending.
    pub duplicate_requests: u64,
    /// Release requests answered from memory of a finished transfer.
    pub duplicate_releases: u64,
    /// Release requests that could not be answered (unknown TID, data missing).
    pub refused_releases: u64,
    /// Data frames received again.
    pub duplicate_data: u64,
    /// Data frames beyond the receive window.
    pub out_of_window: u64,
    /// Data bytes that would have landed outside the registered region.
    pub out_of_region: u64,
    /// Data frames parked in the indirect buffer.
    pub indirect_frames: u64,
    /// Data frames dropped because the indirect buffer was full.
    pub indirect_full: u64,
    /// Bytes copied from the indirect buffer to memory.
    pub indirect_drained: u64,
    /// Simulated replies given to the upper layer.
    pub simulated_replies: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Fast retransmissions.
    pub fast_retransmits: u64,
    /// ACKs acknowledging frames never sent.
    pub invalid_acks: u64,
    /// Registration answers for no pending registration.
    pub stray_registrations: u64,
    /// Requests for regions that wrap the address space, and registrations of regions beyond
    /// memory (answered as failed).
    pub bad_regions: u64,
    /// Responder transfers forgotten after the peer fell silent (their parked bytes freed).
    pub abandoned: u64,
}

/// The initiator's side of one transfer.
#[derive(Debug)]
struct Outgoing {
    op: DrpOp,
    sba: u64,
    dba: u64,
    len: u64,
    started: Time,
    /// A valid reply (or, for a read, data) has arrived.
    connected: bool,
    /// Data transfer started: in which mode.
    mode: Option<TransferMode>,
    setup_attempts: u32,
    /// Set-up or release retransmit timer.
    deadline: Option<Time>,
    expiries: u32,
    /// Write: the data sender.
    sender: Option<FrameSender>,
    /// Read: the data receiver.
    receiver: FrameReceiver,
    /// Read: frames in the transfer, known once the frame ending the region arrives (the
    /// responder frames the data with its own payload size).
    read_frames: Option<u32>,
    releasing: bool,
}

/// Where the responder is with its upper layer's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registration {
    None,
    Pending,
    Failed,
    Done,
}

/// The responder's side of one transfer.
#[derive(Debug)]
struct Incoming {
    op: DrpOp,
    /// The request has been seen (SBA, DBA, LEN below are known).
    known: bool,
    sba: u64,
    dba: u64,
    len: u64,
    started: Time,
    reg: Registration,
    registrations: u32,
    /// Write: frames received.
    receiver: FrameReceiver,
    /// Write: frames parked before registration, as (responder address, bytes).
    parked: Vec<(u64, Vec<u8>)>,
    parked_bytes: usize,
    indirect: bool,
    /// Read: the data sender, once sending.
    sender: Option<FrameSender>,
    /// Read: reply retransmit timer while unconfirmed.
    deadline: Option<Time>,
    expiries: u32,
    /// When the peer last sent a frame of this transfer.
    last_heard: Time,
    /// Parked data fell outside the region when drained: the transfer cannot succeed.
    damaged: bool,
}

impl Incoming {
    fn new(op: DrpOp, now: Time) -> Incoming {
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

    /// How long a responder keeps a transfer whose initiator has fallen silent: twice the longest
    /// a live initiator can stay silent (its timers backed off to the limit).
    fn idle_timeout(&self) -> Dur {
        let longest = self.config.setup_timeout.max(self.config.data_timeout);
        Dur::from_picos(
            longest
                .as_picos()
                .saturating_mul(2 * u64::from(MAX_BACKOFF)),
        )
    }

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

    // ---------------------------------------------------------------- responder

    fn on_request(&mut self, now: Time, r: &DrpRepr, op: DrpOp) {
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

    fn ack_frame(tid: u32, op: DrpOp, ackn: u32) -> DrpRepr {
        DrpRepr {
            control: type_bit(op),
            tid,
            ackn,
            ..DrpRepr::default()
        }
    }

    fn on_write_data(&mut self, now: Time, r: &DrpRepr, payload: &[u8]) {
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

    fn on_read_ack(&mut self, now: Time, r: &DrpRepr) {
        let rto = self.config.data_timeout;
        let (window, dup) = (self.config.window, self.config.dup_ack_threshold);
        let payload = self.config.payload;
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
                s.sender = Some(FrameSender::new(frames_of(s.len, payload), window, dup));
            }
            Some(snd) => match snd.on_ack(now, rto, r.ackn) {
                AckOutcome::FastRetransmit => self.counters.fast_retransmits += 1,
                AckOutcome::Invalid => self.counters.invalid_acks += 1,
                _ => {}
            },
        }
    }

    fn on_release(&mut self, now: Time, r: &DrpRepr, op: DrpOp) {
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

    // ---------------------------------------------------------------- initiator

    fn start_sending(&mut self, now: Time, tid: u32, mode: TransferMode, simulated: bool) {
        let (window, dup, payload) = (
            self.config.window,
            self.config.dup_ack_threshold,
            self.config.payload,
        );
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
            o.sender = Some(FrameSender::new(frames_of(o.len, payload), window, dup));
        }
        self.maybe_release(now, tid);
    }

    fn on_reply(&mut self, now: Time, r: &DrpRepr) {
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

    fn on_write_ack(&mut self, now: Time, r: &DrpRepr) {
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

    fn on_read_data(&mut self, now: Time, r: &DrpRepr, payload: &[u8]) {
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

    fn on_release_reply(&mut self, now: Time, r: &DrpRepr) {
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
                    let factor = 1u64 << o.expiries.min(MAX_BACKOFF.trailing_zeros());
                    o.deadline = Some(
                        now + Dur::from_picos(cfg.data_timeout.as_picos().saturating_mul(factor)),
                    );
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
                    s.sender = Some(FrameSender::new(
                        frames_of(s.len, cfg.payload),
                        cfg.window,
                        cfg.dup_ack_threshold,
                    ));
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
