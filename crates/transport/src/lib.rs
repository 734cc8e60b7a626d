//! # irn-transport: the queue-pair core of irn (in progress)
//!
//! One deterministic, *sans-IO* implementation of an RDMA reliable-connected queue pair
//! (SPEC T1, T3–T7), to be run unchanged by the simulator and by the UDP runtime: no sockets,
//! threads, clock reads or unseeded randomness inside. Time is the project's own integer
//! [`Time`], passed into every call.
//!
//! This crate is being built in steps. Present today — the parts every later step stands on:
//!
//! * [`time`]: picosecond [`Time`] and [`Dur`];
//! * [`state`]: the QP state diagram as a declarative transition table, and which verbs each
//!   state accepts;
//! * [`memory`]: application memory behind the [`Memory`] trait (regions, keys, rights, bounds),
//!   with a byte-holding and a check-only implementation;
//! * [`wr`]: work requests and completions with the verbs statuses;
//! * [`cc`]: the congestion-control trait and factory, with `none`;
//! * [`config`]: loss-recovery configuration — retransmission scheme, BDP-FC, timeouts, wire
//!   format — with the paper's defaults and a preset for RoCE, IRN and each factor-analysis
//!   variant.
//!
//! The queue pair itself (requester, responder, go-back-0/go-back-N/IRN loss recovery, BDP-FC,
//! timers) follows, with its contract in the shape of quinn-proto's `Connection`:
//! `handle_packet` / `handle_timeout` / verbs in, `poll_transmit` / `poll_timeout` /
//! `poll_completion` out, packets as [`irn_wire::IbRepr`] descriptions.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cc;
pub mod config;
pub mod memory;
pub mod pair;
pub mod qp;
pub mod state;
pub mod time;
mod window;
pub mod wr;

pub use cc::{Controller, ControllerFactory, NoCc, NoCcFactory};
pub use config::{RecoveryConfig, Retransmission, RtoPolicy};
pub use memory::{Access, AtomicOp, ByteMemory, CheckedMemory, Key, MemError, Memory, MrKeys};
pub use qp::{Counters, PostError, QpAttr, QpConfig, QueuePair, Transmit, MAX_MESSAGE};
pub use state::{AttrMask, ModifyError, PostRule, QpState};
pub use time::{Dur, Time};
pub use wr::{Completion, RecvWr, Remote, SendOp, SendWr, Sge, WcOpcode, WcStatus};
