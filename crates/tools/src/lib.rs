//! irn's tools: what `irn perf`, `irn pingpong`, `irn rping`, `irn pingmesh` and `irn decode`
//! do, as a library the binary calls with its parsed flags.
//!
//! * [`perf`]: perftest (`ib_write_bw`, `ib_read_lat`, … 4.5) over irn-verbs, interoperating
//!   with perftest itself over its out-of-band exchange or the RDMA CM;
//! * [`pingpong`]: rdma-core's `ibv_rc_pingpong` and `ibv_ud_pingpong`;
//! * [`rping`]: rdma-core's `rping`, connected through the RDMA CM ([`cm`]);
//! * [`pingmesh`]: RDMA Pingmesh (seed 001 §5.3), an agent per host and the summary that
//!   points at the hosts at fault;
//! * [`decode`]: a capture's RoCEv2, PFC, PAUSE and DRP frames, every ICRC checked.
//! * [`exec`]: an unmodified RDMA program over irn, through irn's libibverbs.
//! * [`drp`]: Dynamic RDMA (seed 003) between two hosts over raw Ethernet, a responder and an
//!   initiator that times each transfer and reads every write back.
//!
//! Each tool's flags are a `clap::Args` struct and its entry point a `run` returning whether
//! every operation succeeded; what stops a run early is an [`Error`]. The flags that reach the
//! peer and shape the device are shared ([`link`]).

pub mod cm;
pub mod decode;
pub mod drp;
pub mod error;
pub mod exec;
mod linger;
pub mod link;
pub mod perf;
pub mod pingmesh;
pub mod pingpong;
pub mod rping;

pub use error::{Context, Error, Result};
