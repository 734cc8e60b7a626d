//! The C structures programs share with libibverbs, laid out as rdma-core's `verbs.h`
//! (rdma-core 44, the ABI Debian 12's binaries are built against) lays them out.
//!
//! A program compiled against `verbs.h` reads and writes these structures itself, and reaches
//! the fast path — `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`,
//! which `verbs.h` defines inline — through [`ibv_context_ops`] in its context. So every
//! offset here is part of the contract; `tests/layout.rs` compiles a C program against the
//! system's `verbs.h` and compares each field's offset and each structure's size with these.
//!
//! Names are the C ones (hence the lint allowance), enumerations are `u32` fields with the
//! values as constants, and the `pthread` members programs never touch are libc's types.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t};

/// `union ibv_gid`: 16 bytes, 8-aligned (its `global` view is two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    /// The GID's bytes, network order.
    pub raw: [u8; 16],
}

/// `struct ibv_gid_entry` (`ibv_query_gid_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_device_attr` (`ibv_query_device`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: u32,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`, up to `flags`: what the exported `ibv_query_port` may write. Its
/// argument is `struct _compat_ibv_port_attr`, the layout before `port_cap_flags2`; a program's
/// `ibv_query_port` (an inline in `verbs.h`) clears the whole structure before calling it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network order) or `invalidated_rkey`, as `wc_flags` says.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_grh`: the 40 bytes at the head of a UD receive buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of a send work request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of a send work request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of a send work request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of a send work request.
#[repr(C)]
#[derive(Clone, Copy)]
pub union wr_union {
    pub rdma: wr_rdma,
    pub atomic: wr_atomic,
    pub ud: wr_ud,
}

/// `struct ibv_send_wr`. The memory-window and TSO members that follow `qp_type` are
/// reserved bytes here: irn refuses the operations that use them.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: c_uint,
    /// `imm_data` (network order) or `invalidate_rkey`, as the opcode says.
    pub imm_data: u32,
    pub wr: wr_union,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    pub bind_mw_or_tso: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    /// `_ops`: two obsolete pointers, never called.
    pub _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `poll_cq` in [`ibv_context_ops`].
pub type PollCq = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `req_notify_cq` in [`ibv_context_ops`].
pub type ReqNotifyCq = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `post_send` in [`ibv_context_ops`].
pub type PostSend =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `post_recv` in [`ibv_context_ops`].
pub type PostRecv =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `post_srq_recv` in [`ibv_context_ops`].
pub type PostSrqRecv =
    unsafe extern "C" fn(*mut c_void, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: 32 pointers, of which programs call the five that `verbs.h`
/// inlines (and the memory-window ones, which irn leaves empty).
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: *mut c_void,
    pub _compat_query_port: *mut c_void,
    pub _compat_alloc_pd: *mut c_void,
    pub _compat_dealloc_pd: *mut c_void,
    pub _compat_reg_mr: *mut c_void,
    pub _compat_rereg_mr: *mut c_void,
    pub _compat_dereg_mr: *mut c_void,
    pub alloc_mw: *mut c_void,
    pub bind_mw: *mut c_void,
    pub dealloc_mw: *mut c_void,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCq>,
    pub req_notify_cq: Option<ReqNotifyCq>,
    pub _compat_cq_event: *mut c_void,
    pub _compat_resize_cq: *mut c_void,
    pub _compat_destroy_cq: *mut c_void,
    pub _compat_create_srq: *mut c_void,
    pub _compat_modify_srq: *mut c_void,
    pub _compat_query_srq: *mut c_void,
    pub _compat_destroy_srq: *mut c_void,
    pub post_srq_recv: Option<PostSrqRecv>,
    pub _compat_create_qp: *mut c_void,
    pub _compat_query_qp: *mut c_void,
    pub _compat_modify_qp: *mut c_void,
    pub _compat_destroy_qp: *mut c_void,
    pub post_send: Option<PostSend>,
    pub post_recv: Option<PostRecv>,
    pub _compat_create_ah: *mut c_void,
    pub _compat_destroy_ah: *mut c_void,
    pub _compat_attach_mcast: *mut c_void,
    pub _compat_detach_mcast: *mut c_void,
    pub _compat_async_event: *mut c_void,
}

/// `struct ibv_context`. `abi_compat` is never `__VERBS_ABI_IS_EXTENDED`: `verbs.h`'s inline
/// extended verbs then find no `struct verbs_context` before it and fall back to the exported
/// functions (`ibv_query_port`) or fail with `EOPNOTSUPP` (`ibv_create_qp_ex`,
/// `ibv_create_cq_ex`), as with a provider that offers no extended verbs.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `struct ibv_async_event`.
#[repr(C)]
pub struct ibv_async_event {
    /// The union of the affected object's pointer and a port number.
    pub element: *mut c_void,
    pub event_type: u32,
}

// Enumerations, as verbs.h numbers them.

/// `IBV_NODE_CA`.
pub const IBV_NODE_CA: c_int = 1;
/// `IBV_TRANSPORT_IB` (RoCE devices report the IB transport).
pub const IBV_TRANSPORT_IB: c_int = 0;
/// `IBV_PORT_ACTIVE`.
pub const IBV_PORT_ACTIVE: u32 = 4;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_PORT_CM_SUP`.
pub const IBV_PORT_CM_SUP: u32 = 1 << 16;
/// `IBV_PORT_IP_BASED_GIDS`.
pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;
/// `IBV_DEVICE_RC_RNR_NAK_GEN`.
pub const IBV_DEVICE_RC_RNR_NAK_GEN: c_uint = 1 << 12;
/// `IBV_ATOMIC_HCA`: atomics are atomic with respect to this device's other accesses.
pub const IBV_ATOMIC_HCA: u32 = 1;
/// `IBV_GID_TYPE_ROCE_V2` (`ibv_query_gid_ex`).
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
/// `IBV_GID_TYPE_SYSFS_ROCE_V2` (`ibv_query_gid_type`, rdma-core's `driver.h`).
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;
/// `IBV_FORK_UNNEEDED` (`ibv_is_fork_initialized`): registering memory pins nothing here.
pub const IBV_FORK_UNNEEDED: c_int = 2;

/// `enum ibv_qp_type`.
pub const IBV_QPT_RC: u32 = 2;
/// `enum ibv_qp_type`.
pub const IBV_QPT_UC: u32 = 3;
/// `enum ibv_qp_type`.
pub const IBV_QPT_UD: u32 = 4;

/// `enum ibv_qp_state`: `IBV_QPS_RESET` … `IBV_QPS_ERR` are 0 … 6.
pub const IBV_QPS_ERR: u32 = 6;

/// `enum ibv_qp_attr_mask`.
pub mod mask {
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
    pub const RATE_LIMIT: u32 = 1 << 25;
}

/// `enum ibv_wr_opcode`.
pub mod wr_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    pub const SEND_WITH_INV: u32 = 9;
}

/// `enum ibv_send_flags`.
pub mod send_flags {
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// `enum ibv_wc_opcode`.
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const RECV: u32 = 128;
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
}

/// `enum ibv_wc_flags`.
pub mod wc_flags {
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const WITH_INV: u32 = 1 << 3;
}

/// `enum ibv_wc_status`, in order.
pub const WC_STATUS_STR: [&str; 24] = [
    "success",
    "local length error",
    "local QP operation error",
    "local EE context operation error",
    "local protection error",
    "work request flushed error",
    "memory window bind error",
    "bad response error",
    "local access error",
    "remote invalid request error",
    "remote access error",
    "remote operation error",
    "transport retry counter exceeded",
    "RNR retry counter exceeded",
    "local RDD violation error",
    "remote invalid RD request",
    "operation aborted",
    "invalid EE context number",
    "invalid EE context state",
    "fatal error",
    "response timeout error",
    "general error",
    "TM error",
    "TM software rendezvous",
];

// librdmacm (`rdma/rdma_cma.h`).

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

/// `struct rdma_addr`: the source and destination socket addresses (each a
/// `sockaddr_storage` union), then the GIDs.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src_storage: libc::sockaddr_storage,
    pub dst_storage: libc::sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: u32,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub pd: *mut ibv_pd,
    pub qp_type: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of an event.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: u32,
    pub status: c_int,
    pub param: rdma_cm_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `RDMA_PS_TCP`: reliable connections, addressed by a TCP-like port.
pub const RDMA_PS_TCP: u32 = 0x0106;
/// `RAI_PASSIVE`: an address to listen on.
pub const RAI_PASSIVE: c_int = 1;
/// `RAI_NUMERICHOST`.
pub const RAI_NUMERICHOST: c_int = 2;

/// `enum rdma_cm_event_type`, in order.
pub const RDMA_CM_EVENT_NAMES: [&str; 16] = [
    "RDMA_CM_EVENT_ADDR_RESOLVED",
    "RDMA_CM_EVENT_ADDR_ERROR",
    "RDMA_CM_EVENT_ROUTE_RESOLVED",
    "RDMA_CM_EVENT_ROUTE_ERROR",
    "RDMA_CM_EVENT_CONNECT_REQUEST",
    "RDMA_CM_EVENT_CONNECT_RESPONSE",
    "RDMA_CM_EVENT_CONNECT_ERROR",
    "RDMA_CM_EVENT_UNREACHABLE",
    "RDMA_CM_EVENT_REJECTED",
    "RDMA_CM_EVENT_ESTABLISHED",
    "RDMA_CM_EVENT_DISCONNECTED",
    "RDMA_CM_EVENT_DEVICE_REMOVAL",
    "RDMA_CM_EVENT_MULTICAST_JOIN",
    "RDMA_CM_EVENT_MULTICAST_ERROR",
    "RDMA_CM_EVENT_ADDR_CHANGE",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

/// `enum rdma_cm_event_type` values irn sends.
pub mod cm_event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
}

#[cfg(test)]
mod layout {
    //! Every offset and size above against the system's `verbs.h`, compiled by the C
    //! compiler (`cc`; `verbs.h` from Debian's libibverbs-dev, which
    //! `scripts/install-test-deps` installs).

    use super::*;
    use std::fmt::Write as _;
    use std::mem::{offset_of, size_of};

    /// (C expression, Rust value) pairs: `offsetof(struct S, f)` and `sizeof(struct S)`.
    macro_rules! layout {
        ($($ty:ident { $($field:ident),* $(,)? })*) => {{
            let mut v: Vec<(String, usize)> = Vec::new();
            $(
                v.push((format!("sizeof({})", c_name(stringify!($ty))), size_of::<$ty>()));
                $(
                    v.push((
                        format!("offsetof({}, {})", c_name(stringify!($ty)), c_field(stringify!($field))),
                        offset_of!($ty, $field),
                    ));
                )*
            )*
            v
        }};
    }

    fn c_name(rust: &str) -> String {
        match rust {
            "ibv_gid" => "union ibv_gid".into(),
            "rdma_cm_param" => "union rdma_cm_param".into(),
            t => format!("struct {t}"),
        }
    }

    /// The C member a Rust field stands for (the unions are named members here).
    fn c_field(rust: &str) -> &str {
        match rust {
            "remote_srqn" => "qp_type.xrc.remote_srqn",
            "ibaddr" => "addr.ibaddr",
            "bind_mw_or_tso" => "bind_mw",
            "element" => "element.cq",
            f => f,
        }
    }

    #[test]
    fn structures_match_verbs_h() {
        let pairs = layout! {
            ibv_gid { raw }
            ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
            ibv_device_attr { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap,
                vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge,
                max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
                max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee,
                max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp,
                max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr,
                max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt }
            ibv_wc { wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp,
                wc_flags, pkey_index, slid, sl, dlid_path_bits }
            ibv_pd { context, handle }
            ibv_mr { context, pd, addr, length, handle, lkey, rkey }
            ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
            ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
            ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
            ibv_srq_attr { max_wr, max_sge, srq_limit }
            ibv_srq_init_attr { srq_context, attr }
            ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
            ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
            ibv_qp_attr { qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn,
                sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
                alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
                max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
                alt_port_num, alt_timeout, rate_limit }
            ibv_sge { addr, length, lkey }
            ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr,
                remote_srqn, bind_mw_or_tso }
            ibv_recv_wr { wr_id, next, sg_list, num_sge }
            ibv_comp_channel { context, fd, refcnt }
            ibv_cq { context, channel, cq_context, handle, cqe, mutex, cond,
                comp_events_completed, async_events_completed }
            ibv_qp { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state,
                qp_type, mutex, cond, events_completed }
            ibv_ah { context, pd, handle }
            ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
            ibv_context_ops { _compat_query_device, alloc_mw, bind_mw, dealloc_mw, poll_cq,
                req_notify_cq, post_srq_recv, post_send, post_recv, _compat_async_event }
            ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
            ibv_async_event { element, event_type }
            rdma_event_channel { fd }
            rdma_ib_addr { sgid, dgid, pkey }
            rdma_addr { src_storage, dst_storage, ibaddr }
            rdma_route { addr, path_rec, num_paths }
            rdma_cm_id { verbs, channel, context, qp, route, ps, port_num, event,
                send_cq_channel, send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type }
            rdma_conn_param { private_data, private_data_len, responder_resources,
                initiator_depth, flow_control, retry_count, rnr_retry_count, srq, qp_num }
            rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
            rdma_cm_event { id, listen_id, event, status, param }
            rdma_addrinfo { ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len,
                ai_dst_len, ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname,
                ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next }
        };
        let mut extra = vec![
            (
                "offsetof(struct ibv_send_wr, wr.rdma.rkey)".to_string(),
                offset_of!(ibv_send_wr, wr) + offset_of!(wr_rdma, rkey),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.atomic.compare_add)".to_string(),
                offset_of!(ibv_send_wr, wr) + offset_of!(wr_atomic, compare_add),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.atomic.swap)".to_string(),
                offset_of!(ibv_send_wr, wr) + offset_of!(wr_atomic, swap),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.atomic.rkey)".to_string(),
                offset_of!(ibv_send_wr, wr) + offset_of!(wr_atomic, rkey),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.ud.remote_qpn)".to_string(),
                offset_of!(ibv_send_wr, wr) + offset_of!(wr_ud, remote_qpn),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.ud.remote_qkey)".to_string(),
                offset_of!(ibv_send_wr, wr) + offset_of!(wr_ud, remote_qkey),
            ),
            (
                "sizeof(struct _compat_port_attr_end)".to_string(),
                size_of::<ibv_port_attr>(),
            ),
        ];
        for (name, rust) in [
            ("state", offset_of!(ibv_port_attr, state)),
            ("active_mtu", offset_of!(ibv_port_attr, active_mtu)),
            ("gid_tbl_len", offset_of!(ibv_port_attr, gid_tbl_len)),
            ("max_msg_sz", offset_of!(ibv_port_attr, max_msg_sz)),
            ("pkey_tbl_len", offset_of!(ibv_port_attr, pkey_tbl_len)),
            ("lmc", offset_of!(ibv_port_attr, lmc)),
            ("active_width", offset_of!(ibv_port_attr, active_width)),
            ("active_speed", offset_of!(ibv_port_attr, active_speed)),
            ("phys_state", offset_of!(ibv_port_attr, phys_state)),
            ("link_layer", offset_of!(ibv_port_attr, link_layer)),
            ("flags", offset_of!(ibv_port_attr, flags)),
        ] {
            extra.push((format!("offsetof(struct ibv_port_attr, {name})"), rust));
        }
        // The numbers programs compare with: each constant against verbs.h's and
        // rdma_cma.h's own.
        let values: [(&str, u64); 52] = [
            ("IBV_NODE_CA", IBV_NODE_CA as u64),
            ("IBV_TRANSPORT_IB", IBV_TRANSPORT_IB as u64),
            ("IBV_PORT_ACTIVE", IBV_PORT_ACTIVE.into()),
            ("IBV_LINK_LAYER_ETHERNET", IBV_LINK_LAYER_ETHERNET.into()),
            ("IBV_PORT_CM_SUP", IBV_PORT_CM_SUP.into()),
            ("IBV_PORT_IP_BASED_GIDS", IBV_PORT_IP_BASED_GIDS.into()),
            (
                "IBV_DEVICE_RC_RNR_NAK_GEN",
                IBV_DEVICE_RC_RNR_NAK_GEN.into(),
            ),
            ("IBV_ATOMIC_HCA", IBV_ATOMIC_HCA.into()),
            ("IBV_GID_TYPE_ROCE_V2", IBV_GID_TYPE_ROCE_V2.into()),
            ("IBV_FORK_UNNEEDED", IBV_FORK_UNNEEDED as u64),
            ("IBV_QPT_RC", IBV_QPT_RC.into()),
            ("IBV_QPT_UC", IBV_QPT_UC.into()),
            ("IBV_QPT_UD", IBV_QPT_UD.into()),
            ("IBV_QPS_ERR", IBV_QPS_ERR.into()),
            ("IBV_QP_STATE", mask::STATE.into()),
            ("IBV_QP_CUR_STATE", mask::CUR_STATE.into()),
            ("IBV_QP_ACCESS_FLAGS", mask::ACCESS_FLAGS.into()),
            ("IBV_QP_PKEY_INDEX", mask::PKEY_INDEX.into()),
            ("IBV_QP_PORT", mask::PORT.into()),
            ("IBV_QP_QKEY", mask::QKEY.into()),
            ("IBV_QP_AV", mask::AV.into()),
            ("IBV_QP_PATH_MTU", mask::PATH_MTU.into()),
            ("IBV_QP_TIMEOUT", mask::TIMEOUT.into()),
            ("IBV_QP_RETRY_CNT", mask::RETRY_CNT.into()),
            ("IBV_QP_RNR_RETRY", mask::RNR_RETRY.into()),
            ("IBV_QP_RQ_PSN", mask::RQ_PSN.into()),
            ("IBV_QP_MAX_QP_RD_ATOMIC", mask::MAX_QP_RD_ATOMIC.into()),
            ("IBV_QP_ALT_PATH", mask::ALT_PATH.into()),
            ("IBV_QP_MIN_RNR_TIMER", mask::MIN_RNR_TIMER.into()),
            ("IBV_QP_SQ_PSN", mask::SQ_PSN.into()),
            ("IBV_QP_MAX_DEST_RD_ATOMIC", mask::MAX_DEST_RD_ATOMIC.into()),
            ("IBV_QP_PATH_MIG_STATE", mask::PATH_MIG_STATE.into()),
            ("IBV_QP_CAP", mask::CAP.into()),
            ("IBV_QP_DEST_QPN", mask::DEST_QPN.into()),
            (
                "IBV_WR_RDMA_WRITE_WITH_IMM",
                wr_opcode::RDMA_WRITE_WITH_IMM.into(),
            ),
            ("IBV_WR_SEND_WITH_IMM", wr_opcode::SEND_WITH_IMM.into()),
            ("IBV_WR_RDMA_READ", wr_opcode::RDMA_READ.into()),
            (
                "IBV_WR_ATOMIC_FETCH_AND_ADD",
                wr_opcode::ATOMIC_FETCH_AND_ADD.into(),
            ),
            ("IBV_WR_SEND_WITH_INV", wr_opcode::SEND_WITH_INV.into()),
            ("IBV_SEND_SIGNALED", send_flags::SIGNALED.into()),
            ("IBV_SEND_SOLICITED", send_flags::SOLICITED.into()),
            ("IBV_SEND_INLINE", send_flags::INLINE.into()),
            ("IBV_WC_FETCH_ADD", wc_opcode::FETCH_ADD.into()),
            ("IBV_WC_RECV", wc_opcode::RECV.into()),
            (
                "IBV_WC_RECV_RDMA_WITH_IMM",
                wc_opcode::RECV_RDMA_WITH_IMM.into(),
            ),
            ("IBV_WC_GRH", wc_flags::GRH.into()),
            ("IBV_WC_WITH_IMM", wc_flags::WITH_IMM.into()),
            ("IBV_WC_WITH_INV", wc_flags::WITH_INV.into()),
            ("RDMA_PS_TCP", RDMA_PS_TCP.into()),
            ("RAI_PASSIVE", RAI_PASSIVE as u64),
            ("RDMA_CM_EVENT_ESTABLISHED", cm_event::ESTABLISHED.into()),
            ("RDMA_CM_EVENT_DISCONNECTED", cm_event::DISCONNECTED.into()),
        ];
        let named = values
            .iter()
            .map(|(name, v)| (format!("(size_t){name}"), *v as usize));
        let all: Vec<(String, usize)> = pairs.into_iter().chain(extra).chain(named).collect();

        let mut c = String::from(
            "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n\
             /* ibv_port_attr up to and including flags: what the exported ibv_query_port writes. */\n\
             struct _compat_port_attr_end { char b[offsetof(struct ibv_port_attr, flags) + 1]; \
             } __attribute__((aligned(4)));\nint main(void) {\n",
        );
        for (expr, _) in &all {
            writeln!(c, "    printf(\"%zu\\n\", (size_t){expr});").expect("a String");
        }
        c.push_str("    return 0;\n}\n");
        let dir = std::env::temp_dir().join(format!("irn-ibverbs-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
        std::fs::write(&src, c).expect("write the C program");
        let cc = std::process::Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("cc runs (the C compiler is part of the toolchain)");
        assert!(
            cc.status.success(),
            "compiling against verbs.h failed (is libibverbs-dev installed? scripts/install-test-deps): {}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = std::process::Command::new(&exe)
            .output()
            .expect("the layout program runs");
        let got: Vec<usize> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.parse().expect("a number"))
            .collect();
        assert_eq!(got.len(), all.len());
        let wrong: Vec<String> = all
            .iter()
            .zip(&got)
            .filter(|((_, rust), c)| rust != *c)
            .map(|((expr, rust), c)| format!("{expr}: C {c}, Rust {rust}"))
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            wrong.is_empty(),
            "layouts differ from verbs.h:\n{}",
            wrong.join("\n")
        );
    }
}
