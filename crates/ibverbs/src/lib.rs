//! # irn-ibverbs: libibverbs for programs that have no RDMA NIC
//!
//! A drop-in `libibverbs.so.1`: a program built against rdma-core — `ibv_rc_pingpong`,
//! perftest's `ib_write_bw`, an application — runs unmodified over irn's UDP runtime
//! ([`irn_verbs`]), with IRN's loss recovery or standard RoCE's, on any Linux host, as an
//! ordinary user: no kernel module, no device file, no root. `irn exec -- PROGRAM` puts it on
//! the loader's path.
//!
//! ## The contract
//!
//! - **The ABI is rdma-core's** ([`abi`]): the structures a program reads and writes, the
//!   operations table `verbs.h` calls through for `ibv_post_send`, `ibv_post_recv`,
//!   `ibv_poll_cq` and `ibv_req_notify_cq`, and the symbol versions of rdma-core's
//!   `libibverbs.map` ([`exports`]), so that the loader binds a program built against
//!   rdma-core to this library.
//! - **Devices** ([`config`]): `irn0`, `irn1`, … one per configured address or interface
//!   (`IRN_IBV_DEVICES`; by default each up interface with an IPv4 address), each with one
//!   port whose GID table holds that address as a RoCEv2 GID (IPv4-mapped, or the IPv6
//!   address). Peers are reached
//!   at the address of their GID, on the UDP port `IRN_IBV_PORT` (4791).
//! - **Recovery mode**: `IRN_IBV_MODE=roce` (the default: interoperates with any RoCE peer,
//!   Linux rxe included) or `irn` (both ends must be irn).
//! - **Memory** is the program's own: `ibv_reg_mr` registers its pages where they lie and
//!   the runtime places received bytes into them and sends from them; regions are named by
//!   the program's addresses, as with a NIC.
//! - **What is refused** fails as a provider without the feature fails: `NULL` or an error
//!   number, `errno` set to `EOPNOTSUPP` (shared receive queues, memory windows, XRC, UC,
//!   the extended verbs `ibv_create_qp_ex`/`ibv_create_cq_ex`, the mlx5 and EFA direct verbs).
//!   `docs/VERBS.md` lists every verb.
//!
//! Every `unsafe` block here states why it is sound; the workspace's other crates forbid
//! `unsafe` but for the runtime's socket and memory modules.

pub mod abi;
pub mod config;
mod device;
mod errno;
pub mod exports;
mod objects;
mod qp;
mod rdmacm;
mod stubs;
