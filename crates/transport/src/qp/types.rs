//! The queue pair's public data types: creation-time configuration ([`QpConfig`], validated
//! into a typed [`QpConfigError`]), connection attributes ([`QpAttr`]), counters and the packet
//! handed to the driver ([`Transmit`]).

use std::sync::Arc;

use irn_wire::{Ecn, IbRepr, Psn, DEFAULT_PKEY};

use crate::cc::{ControllerFactory, NoCcFactory};
use crate::config::{ConfigError, RecoveryConfig};
use crate::memory::Access;
use crate::state::QpState;
use crate::time::Dur;

/// The longest message RC carries (IBTA: 2^31 bytes).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// Creation-time configuration of a queue pair (what `ibv_create_qp` and the NIC's firmware
/// settings fix; connection attributes come later through [`QueuePair::modify`](super::QueuePair::modify)).
#[derive(Debug, Clone)]
pub struct QpConfig {
    /// This queue pair's number (24 bits).
    pub qpn: u32,
    /// Loss recovery: RoCE, IRN, or a factor-analysis variant.
    pub recovery: RecoveryConfig,
    /// Makes this queue pair's congestion controller.
    pub cc: Arc<dyn ControllerFactory>,
    /// Line rate of the port, for the congestion controller.
    pub line_rate_bps: u64,
    /// DCQCN's notification point: answer CE-marked packets with at most one CNP per this
    /// interval (50 µs, the DCQCN paper's N). `None`: send no CNPs (a NIC whose senders react
    /// to ECN echoes in ACKs, as DCTCP's do, or to no marks at all).
    pub cnp_interval: Option<Dur>,
    /// Overrides the verbs `retry_cnt` (0–7) with a larger limit, for simulations and tests
    /// that must never give up.
    pub retry_limit: Option<u32>,
    /// Out-of-order window of an IRN receiver when BDP-FC is off (with BDP-FC the bitmaps are
    /// sized by the BDP cap, IRN §5.3).
    pub ooo_window: u32,
    /// Send queue depth (`max_send_wr`).
    pub max_send_wr: usize,
    /// Receive queue depth (`max_recv_wr`).
    pub max_recv_wr: usize,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            qpn: 0x11,
            recovery: RecoveryConfig::irn(),
            cc: Arc::new(NoCcFactory),
            line_rate_bps: 40_000_000_000,
            cnp_interval: Some(Dur::from_micros(50)),
            retry_limit: None,
            ooo_window: 4096,
            max_send_wr: 1 << 16,
            max_recv_wr: 1 << 16,
        }
    }
}

/// Why a queue pair could not be created with a configuration ([`QpConfig::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QpConfigError {
    /// The loss-recovery knobs do not combine ([`RecoveryConfig::validate`]).
    // Its cause is in the message, not also a `source` (which an error chain would print a
    // second time).
    #[error("recovery: {0}")]
    Recovery(ConfigError),
    /// A QPN is 24 bits (IBTA §9.2: BTH DestQP).
    #[error("qpn {0:#x} does not fit in 24 bits")]
    QpnTooLarge(u32),
    /// A congestion controller paces against the line rate, which must be positive.
    #[error("line_rate_bps must be positive")]
    ZeroLineRate,
    /// A selective-repeat receiver without BDP-FC needs an out-of-order window to hold
    /// anything.
    #[error("ooo_window must be at least 1 packet when selective repeat runs without BDP-FC")]
    ZeroOooWindow,
    /// [`QueuePair::size_for_path`](super::QueuePair::size_for_path) comes before the queue
    /// pair connects: in RESET or INIT, before any packet.
    #[error("the path's limits are set in RESET or INIT, not in {0:?}")]
    Connected(QpState),
}

impl From<ConfigError> for QpConfigError {
    fn from(e: ConfigError) -> QpConfigError {
        QpConfigError::Recovery(e)
    }
}

impl QpConfig {
    /// Checks that the configuration can mean something: the recovery combination is valid,
    /// the QPN fits its 24 bits, the line rate is positive, a selective-repeat receiver without
    /// a BDP cap has an out-of-order window. [`QueuePair::new`](super::QueuePair::new) calls it.
    pub fn validate(&self) -> Result<(), QpConfigError> {
        self.recovery.validate()?;
        if self.qpn > Psn::MASK {
            return Err(QpConfigError::QpnTooLarge(self.qpn));
        }
        if self.line_rate_bps == 0 {
            return Err(QpConfigError::ZeroLineRate);
        }
        if self.recovery.retransmission.is_selective()
            && self.recovery.bdp_cap.is_none()
            && self.ooo_window == 0
        {
            return Err(QpConfigError::ZeroOooWindow);
        }
        Ok(())
    }
}

/// Connection attributes set by [`QueuePair::modify`](super::QueuePair::modify) (verbs `struct ibv_qp_attr`, the fields an
/// RC queue pair uses). Which of them a transition reads is its [`AttrMask`](crate::AttrMask).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Remote access this queue pair allows as responder (`REMOTE_WRITE`, `REMOTE_READ`,
    /// `REMOTE_ATOMIC`).
    pub access: Access,
    /// Partition key carried in every BTH and checked on receipt.
    pub pkey: u16,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    pub path_mtu: u32,
    /// The peer's queue pair number.
    pub dest_qpn: u32,
    /// First PSN expected from the peer.
    pub rq_psn: Psn,
    /// Reads and atomics accepted as responder at once.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder asks requesters to wait (IBTA Table 45).
    pub min_rnr_timer: u8,
    /// First PSN this requester sends.
    pub sq_psn: Psn,
    /// Local ACK timeout code (4.096 µs × 2^t; 0 = infinite), used with
    /// [`RtoPolicy::FromAttr`](crate::RtoPolicy::FromAttr).
    pub timeout: u8,
    /// Retries after a timeout or sequence NAK before `RetryExcErr` (0–7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK before `RnrRetryExcErr` (0–6; 7 = forever).
    pub rnr_retry: u8,
    /// Reads and atomics this requester keeps outstanding at once.
    pub max_rd_atomic: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            access: Access::REMOTE_WRITE
                .with(Access::REMOTE_READ)
                .with(Access::REMOTE_ATOMIC),
            pkey: DEFAULT_PKEY,
            path_mtu: 1024,
            dest_qpn: 0,
            rq_psn: Psn::new(0),
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
            sq_psn: Psn::new(0),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        }
    }
}

/// Why a work request was not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The queue pair's state does not take this kind of work request.
    #[error("work request refused in state {0}")]
    InvalidState(QpState),
    /// The queue is full.
    #[error("work queue full")]
    QueueFull,
    /// The work request itself is invalid.
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
}

/// Per-queue-pair counters (what `ibv_query_qp`'s hardware counters and rxe's `hw_counters`
/// report, plus IRN's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent (all kinds).
    pub tx_packets: u64,
    /// Data bytes sent: payloads, and 8 for each atomic request or atomic response (its
    /// operand or original value, carried in the AtomicETH / AtomicAckETH).
    pub tx_bytes: u64,
    /// Request or response packets sent again.
    pub retransmitted: u64,
    /// Payload bytes sent again: retransmitted requests and responses, and Read responses a
    /// standard responder sends again for a duplicate Read.
    pub retransmitted_bytes: u64,
    /// Packets received and accepted for processing.
    pub rx_packets: u64,
    /// ACKs sent (plain and read ACKs): packets. Consecutive plain ACKs generated while
    /// the older is still queued leave as one packet, the newest (a runtime that answers a
    /// received burst at once), and count once.
    pub acks_sent: u64,
    /// NACKs / sequence-error NAKs sent: packets (with `RecoveryConfig::nack_bitmap`, NACKs
    /// generated while the older is still queued leave as one, the newest, and count once;
    /// a queued one that a plain ACK replaces, once the hole has closed, does not count).
    pub nacks_sent: u64,
    /// NACKs / sequence-error NAKs received.
    pub nacks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Error NAKs (invalid request, remote access, remote operational) sent.
    pub error_naks_sent: u64,
    /// Retransmission timeouts (requester and read responder).
    pub timeouts: u64,
    /// Duplicate packets received.
    pub duplicates: u64,
    /// Packets that arrived ahead of the expected PSN.
    pub out_of_order: u64,
    /// CNPs sent (as notification point).
    pub cnps_sent: u64,
    /// CNPs received (as reaction point).
    pub cnps_received: u64,
    /// Packets that arrived with ECN CE.
    pub ecn_marked: u64,
    /// Packets dropped for a wrong QPN, P_Key, TVer, opcode or length.
    pub dropped_invalid: u64,
    /// Packets dropped because the queue pair's state does not receive them.
    pub dropped_state: u64,
    /// Responses or ACKs that matched nothing outstanding.
    pub unexpected: u64,
    /// NAKs sent because a hole met the [`HoleRule`](crate::HoleRule) (T8(a), T8(d)); also
    /// counted in `nacks_sent`.
    pub early_naks_sent: u64,
    /// Request packets parked in the reorder buffer (T8(a)).
    pub reorder_parked: u64,
    /// Bytes (headers and payload) parked in the reorder buffer: each crosses PCIe twice
    /// more than a packet placed directly — written to host memory, read back to be
    /// processed (seed 002).
    pub reorder_bytes: u64,
    /// Most bytes the reorder buffer held at once (a maximum, also when summed).
    pub reorder_peak_bytes: u64,
    /// Smaller Read requests sent for missing response chunks (T8(b)).
    pub read_rerequests: u64,
    /// Most request PSNs in flight at once, counted as a new one left (what BDP-FC bounds,
    /// IRN §3.2; a maximum, also when summed).
    pub peak_in_flight: u64,
}

impl Counters {
    /// An (N)ACK with `syndrome`, counted when queued, was replaced by a newer one before it
    /// left: the counters count packets sent.
    pub(crate) fn unsend_ack(&mut self, syndrome: irn_wire::Syndrome) {
        if syndrome.is_ack() {
            self.acks_sent -= 1;
        } else {
            self.nacks_sent -= 1;
        }
    }
}

impl core::ops::AddAssign for Counters {
    /// Field-wise sum (totals over many queue pairs).
    fn add_assign(&mut self, o: Counters) {
        let Counters {
            tx_packets,
            tx_bytes,
            retransmitted,
            retransmitted_bytes,
            rx_packets,
            acks_sent,
            nacks_sent,
            nacks_received,
            rnr_naks_sent,
            rnr_naks_received,
            error_naks_sent,
            timeouts,
            duplicates,
            out_of_order,
            cnps_sent,
            cnps_received,
            ecn_marked,
            dropped_invalid,
            dropped_state,
            unexpected,
            early_naks_sent,
            reorder_parked,
            reorder_bytes,
            reorder_peak_bytes,
            read_rerequests,
            peak_in_flight,
        } = o;
        self.tx_packets += tx_packets;
        self.tx_bytes += tx_bytes;
        self.retransmitted += retransmitted;
        self.retransmitted_bytes += retransmitted_bytes;
        self.rx_packets += rx_packets;
        self.acks_sent += acks_sent;
        self.nacks_sent += nacks_sent;
        self.nacks_received += nacks_received;
        self.rnr_naks_sent += rnr_naks_sent;
        self.rnr_naks_received += rnr_naks_received;
        self.error_naks_sent += error_naks_sent;
        self.timeouts += timeouts;
        self.duplicates += duplicates;
        self.out_of_order += out_of_order;
        self.cnps_sent += cnps_sent;
        self.cnps_received += cnps_received;
        self.ecn_marked += ecn_marked;
        self.dropped_invalid += dropped_invalid;
        self.dropped_state += dropped_state;
        self.unexpected += unexpected;
        self.early_naks_sent += early_naks_sent;
        self.reorder_parked += reorder_parked;
        self.reorder_bytes += reorder_bytes;
        self.reorder_peak_bytes = self.reorder_peak_bytes.max(reorder_peak_bytes);
        self.read_rerequests += read_rerequests;
        self.peak_in_flight = self.peak_in_flight.max(peak_in_flight);
    }
}

/// A packet the queue pair wants sent. Its payload, when the memory holds bytes, is in the
/// buffer given to [`QueuePair::poll_transmit`](super::QueuePair::poll_transmit) or
/// [`QueuePair::poll_transmit_into`](super::QueuePair::poll_transmit_into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// BTH onward, as a structured description (the simulator forwards it as is; the UDP
    /// runtime serializes it with `irn_wire`).
    pub ib: IbRepr,
    /// The ECN field the IP header should carry: ECT(0) on data, not-ECT on control packets.
    pub ecn: Ecn,
}

impl Transmit {
    /// A place for [`QueuePair::poll_transmit_into`](super::QueuePair::poll_transmit_into)
    /// to build packets in, kept by a driver from one call to the next: what it holds means
    /// nothing until a call returns `true` (an empty RC Send-only to no one).
    pub const SLOT: Transmit = Transmit {
        ib: IbRepr::SLOT,
        ecn: Ecn::NotEct,
    };
}
