//! # irn-verbs: irn over UDP, behind a verbs-like API
//!
//! The runtime that lets hosts without RDMA NICs use irn over ordinary Ethernet/IP: it drives
//! [`irn_transport`] queue pairs — the same sans-IO core the simulator runs — over UDP port
//! 4791 with real RoCEv2 packets built by [`irn_wire`], so a capture decodes in Wireshark and a
//! RoCE-mode queue pair can talk to Linux Soft-RoCE (rxe).
//!
//! ## The verbs, in Rust
//!
//! | libibverbs | irn-verbs |
//! |---|---|
//! | `ibv_open_device` | [`Device::open`] (a local address; port 4791 by default) |
//! | `ibv_alloc_pd` | [`Device::alloc_pd`] |
//! | `ibv_reg_mr` | [`Pd::reg_mr`]: the device owns the bytes; [`Mr::write`] / [`Mr::read`] |
//! | `ibv_create_cq` | [`Device::create_cq`]; [`Cq::poll`], [`Cq::wait`] (blocking, timeout) |
//! | `ibv_create_qp` | [`Pd::create_qp`] with a [`QpMode`]: RoCE-compatible or IRN |
//! | `ibv_modify_qp` | [`Qp::modify`] (or [`Qp::connect`]: INIT, RTR, RTS at once) |
//! | `ibv_post_send` / `ibv_post_recv` | [`Qp::post_send`] / [`Qp::post_recv`] |
//! | `ibv_destroy_*` | dropping the handle |
//!
//! Handles are `Send + Sync`. An engine thread per device receives packets and runs the
//! queue pairs' timers; posting transmits on the caller's thread. A peer that disappears
//! completes the outstanding work requests with `IBV_WC_RETRY_EXC_ERR` once the retries are
//! spent (never a hang); a bad rkey completes with `IBV_WC_REM_ACCESS_ERR` and writes nothing;
//! a post that could overrun a completion queue, a post in the wrong state and a full work
//! queue are typed [`Error`]s. Malformed packets are counted ([`DeviceCounters`]) and dropped.
//!
//! ## Modes and what is verified
//!
//! Unprivileged (the only mode so far): an unconnected UDP socket with `IP_PMTUDISC_DO`, so
//! Linux sends IPv4 ID 0 and the ICRC irn computes is the one a standard receiver checks. The
//! ICRC of *received* packets cannot be verified, because a UDP socket hides the sender's IP
//! header; `docs/VERBS.md` says more.
//!
//! ## Testing aids
//!
//! [`Impairment`] drops, duplicates, reorders and delays packets on either path with a seeded
//! generator; [`DeviceConfig::pcap`] captures everything sent and received.
//!
//! ## Example
//!
//! ```
//! use irn_verbs::{Access, Device, DeviceConfig, QpAttr, QpInit, QpMode, RemoteQp, SendOp, SendWr, Remote};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), irn_verbs::Error> {
//! // Two devices on loopback (port 0: any free port).
//! let open = || {
//!     let mut cfg = DeviceConfig::new("127.0.0.1".parse().unwrap());
//!     cfg.port = 0;
//!     Device::open(cfg)
//! };
//! let (a, b) = (open()?, open()?);
//! let (pd_a, pd_b) = (a.alloc_pd(), b.alloc_pd());
//! let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
//! let init = QpInit { mode: QpMode::Irn, ..QpInit::default() };
//! let qa = pd_a.create_qp(&cq_a, &cq_a, init)?;
//! let qb = pd_b.create_qp(&cq_b, &cq_b, init)?;
//! // What an out-of-band exchange carries: GID, port, QPN, first PSN.
//! let ra = RemoteQp { gid: a.gid(), port: a.local_addr().port(), qpn: qa.qpn(), psn: 100 };
//! let rb = RemoteQp { gid: b.gid(), port: b.local_addr().port(), qpn: qb.qpn(), psn: 200 };
//! qa.connect(&QpAttr::default(), &rb, 100)?;
//! qb.connect(&QpAttr::default(), &ra, 200)?;
//!
//! // RDMA Write "hello" from a's region into b's.
//! let src = pd_a.reg_mr(5, Access::LOCAL_WRITE)?;
//! let dst = pd_b.reg_mr(5, Access::LOCAL_WRITE.with(Access::REMOTE_WRITE))?;
//! src.write(0, b"hello")?;
//! qa.post_send(SendWr {
//!     wr_id: 1,
//!     op: SendOp::Write(Remote { addr: dst.addr(), rkey: dst.rkey() }),
//!     sg_list: irn_verbs::sgl![src.sge(0, 5)],
//!     signaled: true,
//!     fence: false,
//!     solicited: false,
//! })?;
//! let wc = cq_a.wait(Duration::from_secs(5))?.expect("a completion");
//! assert_eq!((wc.wr_id, wc.status), (1, irn_verbs::WcStatus::Success));
//! let mut got = [0u8; 5];
//! dst.read(0, &mut got)?;
//! assert_eq!(&got, b"hello");
//! # Ok(())
//! # }
//! ```

// `unsafe` is allowed in five modules only: `net::sys`, `device::app_memory`, `device::lent`,
// `device::sched` (the watcher thread's scheduling policy) and, for `Pd::reg_mr_raw` and
// `Pd::reg_mr_raw_iova`, `device::objects`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod capture;
pub mod cm;
mod device;
pub mod drp;
pub mod exchange;
mod gid;
mod impair;
mod net;
pub mod packet;

pub use device::{
    check_runtime_cc, check_runtime_mode, random_psn, runtime_recovery, Ah, Cq, CqNotify, Device,
    DeviceConfig, DeviceCounters, Error, Mr, Pd, PostListError, Qp, QpInit, QpMode, RemoteQp,
    Result, UdInit, UdQp, UdSend, Vlan, Wc, DEFAULT_IN_FLIGHT_BUDGET, MAX_ENGINES,
    MAX_SOURCE_PORTS, ROCE_PORT,
};
pub use gid::{Gid, GidParseError};
pub use impair::Impairment;
pub use irn_transport::{
    sgl, Access, AttrMask, CcKind, Counters, QpAttr, QpState, RecvWr, Remote, SendOp, SendWr,
    SgList, Sge, UdAttr, UdCounters, WcOpcode, WcStatus, GRH_LEN,
};
pub use irn_wire::{Psn, DEFAULT_PKEY};
pub use net::{active_mtu, roce_source_port, ReceivePath};
