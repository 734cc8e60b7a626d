//! # irn-transport: the queue-pair core of irn
//!
//! One deterministic, *sans-IO* implementation of an RDMA reliable-connected queue pair
//! (SPEC T1, T3–T7, and T9's congestion control), run unchanged by the simulator and by
//! the UDP runtime: no sockets, threads, clock reads or unseeded randomness inside. Time is the
//! project's own integer [`Time`] (picoseconds), passed into every call.
//!
//! [`QueuePair`] is the whole contract; its documentation says in which order a driver calls
//! it. In short: verbs ([`QueuePair::modify`], [`QueuePair::post_send`],
//! [`QueuePair::post_recv`]) and [`QueuePair::handle_packet`] / [`QueuePair::handle_timeout`]
//! in; [`QueuePair::poll_transmit`], [`QueuePair::poll_completion`] and
//! [`QueuePair::poll_timeout`] out. Packets are [`irn_wire::IbRepr`] descriptions plus payload
//! bytes when the memory holds any, so the simulator forwards them without serializing and the
//! UDP runtime serializes them with `irn-wire`.
//!
//! ## Loss recovery, selectable per queue pair ([`RecoveryConfig`])
//!
//! * **go-back-0** (T3): the responder discards a partial message on a sequence error and the
//!   requester restarts it from its first packet — the livelock of E11;
//! * **go-back-N** (T4): the responder discards out-of-order packets and NAKs once per gap
//!   with its expected PSN, as Linux rxe does; the requester resends everything from there;
//! * **IRN selective repeat** (T5): per-packet ACKs and NACKs carrying the cumulative ACK and
//!   the triggering PSN, a SACK bitmap at the sender, recovery that retransmits the cumulative
//!   ACK PSN first and a later PSN only below a selectively acked one, ending when the
//!   cumulative ACK passes the recovery sequence; RTO_low / RTO_high by packets in flight;
//! * **BDP-FC** (T6), and the factor-analysis variants of E5 (IRN with go-back-N, without
//!   BDP-FC, without the SACK bitmap).
//!
//! IRN's out-of-order machinery (T7): data placed directly at its final address, a receive
//! bitmap sized by the BDP cap holding one deferred action per PSN (the 2-bitmap: MSN update,
//! premature CQE, Read/atomic execution), `recv_WQE_SN` / `read_WQE_SN` matching, split sPSN /
//! rPSN spaces with read (N)ACKs and a Read responder that runs its own timeouts. Duplicate Reads
//! and atomics are answered from saved state, never executed twice.
//!
//! ## Modules
//!
//! * [`qp`]: the queue pair, one module per role (requester, completer, responder with its
//!   standard and IRN variants, timers);
//! * `pair` (feature `test-support`): two queue pairs through seeded lossy links, for tests,
//!   fuzzing, benchmarks and examples — never part of a production build;
//! * [`rng`]: the workspace's seeded random-number generator;
//! * `window` (internal): the sender and receiver engines of one PSN space;
//! * [`state`]: the QP state diagram as a declarative transition table;
//! * [`memory`]: application memory behind the [`Memory`] trait (regions, keys, rights, bounds),
//!   with a byte-holding and a check-only implementation;
//! * [`wr`]: work requests and completions with the verbs statuses;
//! * [`cc`]: the congestion-control trait and factory, with `none`, DCQCN, TIMELY, AIMD and
//!   DCTCP;
//! * [`config`]: loss-recovery configuration with the paper's defaults and presets;
//! * [`ud`]: unreliable-datagram queue pairs (`UD_SEND_ONLY` with a DETH, the GRH area of a
//!   receive), the same sans-IO contract without timers;
//! * [`drp`]: the Dynamic RDMA endpoint of seed 003 (SPEC T10), the same sans-IO contract for a
//!   connection-per-transfer protocol on raw Ethernet.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cc;
pub mod config;
pub mod drp;
pub mod memory;
#[cfg(feature = "test-support")]
pub mod pair;
pub mod payload;
pub mod qp;
mod recv_window;
pub mod rng;
mod rtt;
mod scoreboard;
pub mod state;
pub mod time;
pub mod ud;
mod window;
pub mod wr;

pub use cc::{
    BackoffOnLossFactory, CcKind, Controller, ControllerFactory, DcqcnConfig, DcqcnFactory,
    DcqcnModel, NoCc, NoCcFactory, TimelyConfig, TimelyFactory, WindowAlgorithm, WindowConfig,
    WindowFactory,
};
pub use config::{bdp_cap_packets, RTO_BACKOFF_AFTER, STANDARD_ACK_EVERY};
pub use config::{
    ConfigError, HoleRule, NicState, RecoveryConfig, RecoveryMode, Retransmission, RtoPolicy,
    TcpModel, Wire, DEFAULT_REORDER_BUFFER,
};
pub use memory::{
    Access, AppBuffer, AtomicOp, ByteMemory, CheckedMemory, Key, MemError, Memory, MrKeys,
};
pub use payload::TxPayload;
pub use qp::{
    connect_qp, path_mtu_valid, Counters, PostError, QpAttr, QpConfig, QpConfigError, QueuePair,
    Transmit, MAX_MESSAGE,
};
pub use state::{AttrMask, ModifyError, PostRule, QpState};
pub use time::{Dur, Time};
pub use ud::{
    UdAttr, UdCounters, UdDest, UdModifyError, UdQueuePair, UdSendWr, UdTransmit, GRH_LEN,
};
pub use wr::{Completion, RecvWr, Remote, SendOp, SendWr, SgList, Sge, WcOpcode, WcStatus};
