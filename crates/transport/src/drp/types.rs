//! The DRP endpoint's public types: its configuration, the operations, modes and roles, the
//! events and completions it gives the upper layer, its errors and counters.

use super::window::MAX_WINDOW;
use crate::time::{Dur, Time};

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
    /// [`DrpEndpoint::registration_done`](super::DrpEndpoint::registration_done).
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
