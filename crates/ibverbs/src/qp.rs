//! Queue pairs: creation, the state machine's attributes (`ibv_modify_qp`, `ibv_query_qp`),
//! and the fast path `verbs.h` reaches through the context's operations table
//! (`ibv_post_send`, `ibv_post_recv`).
//!
//! RC queue pairs run irn's reliable transport in the configured recovery mode; UD queue
//! pairs carry datagrams of up to the path MTU, their receive buffers starting with the
//! 40-byte GRH area as on any RoCE device. A program's `ibv_send_wr` list is translated
//! into the runtime's work requests and posted under one acquisition of the device; the first
//! one refused is returned through `bad_wr`, those before it are posted (`ibv_post_send(3)`).
//!
//! **Inline data** (`IBV_SEND_INLINE`): the program may reuse its buffer as soon as the post
//! returns, so the bytes are copied at once into a ring of `max_send_wr + 1` slots of
//! `max_inline_data` bytes registered for the queue pair, and the work request sends from its
//! slot. A slot is written again only `max_send_wr + 1` successful posts later, when at most
//! `max_send_wr` requests are outstanding, so its previous request has completed.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use irn_verbs::{
    Access, AttrMask, QpAttr, QpInit, QpState, RecvWr, Remote, SendOp, SendWr, SgList, Sge, UdAttr,
    UdInit, UdSend,
};

use crate::abi::*;
use crate::device::{config, mtu_enum, Context};
use crate::errno;
use crate::objects::{Ah, Cq, Pd};

/// Most scatter/gather entries a work request may carry (`max_sge` in `ibv_query_device`).
pub(crate) const MAX_SGE: u32 = 32;
/// Most inline bytes a send work request may carry.
pub(crate) const MAX_INLINE: u32 = 1024;
/// Deepest work queue (`max_qp_wr` in `ibv_query_device`).
pub(crate) const MAX_QP_WR: u32 = 1 << 15;

enum Kind {
    Rc(irn_verbs::Qp),
    Ud(irn_verbs::UdQp),
}

/// The ring inline data is copied into.
struct Inline {
    mr: irn_verbs::Mr,
    slot_len: usize,
    slots: usize,
    next: usize,
}

/// A queue pair. The C structure is the program's; the shim writes its `state` through the
/// cell (in the program's own calls, and once the connection manager has connected it) and
/// keeps what it reads of it in fields of its own.
#[repr(C)]
pub(crate) struct Qp {
    c: UnsafeCell<ibv_qp>,
    kind: Kind,
    qp_num: u32,
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    qp_type: u32,
    sq_sig_all: bool,
    cap: ibv_qp_cap,
    /// The attributes as last set, for `ibv_query_qp` (the state is read from the runtime).
    attr: Mutex<ibv_qp_attr>,
    inline: Option<Mutex<Inline>>,
}

// SAFETY: the raw pointers are the program's objects, which the shim only passes back or
// reads through their own `from_c`; the C structure is written through the cell.
unsafe impl Sync for Qp {}

impl Qp {
    /// Makes the program's `qp->state` the runtime's.
    fn publish_state(&self) {
        // SAFETY: the C structure's `state`, written through its cell; the program reads it
        // (rdma-core keeps it current in the same calls).
        unsafe { (*self.c.get()).state = state_num(self.state()) };
    }

    /// # Safety
    /// `qp` is a queue pair this library created and has not destroyed.
    unsafe fn from_c<'a>(qp: *mut ibv_qp) -> &'a Qp {
        // SAFETY: `c` is the first field of the repr(C) Qp.
        unsafe { &*(qp as *const Qp) }
    }

    fn state(&self) -> QpState {
        match &self.kind {
            Kind::Rc(q) => q.state(),
            Kind::Ud(q) => q.state(),
        }
    }
}

/// The runtime's RC queue pair behind a program's, for the connection manager.
///
/// # Safety
/// `qp` is a queue pair this library created and has not destroyed; it stays alive while the
/// reference is used.
pub(crate) unsafe fn rc_of<'a>(qp: *mut ibv_qp) -> Option<&'a irn_verbs::Qp> {
    // SAFETY: the caller's contract.
    match &unsafe { Qp::from_c(qp) }.kind {
        Kind::Rc(q) => Some(q),
        Kind::Ud(_) => None,
    }
}

/// Makes the program's `qp->state` the runtime's (after the connection manager moved it).
///
/// # Safety
/// As [`rc_of`].
pub(crate) unsafe fn refresh_state(qp: *mut ibv_qp) {
    // SAFETY: the caller's contract.
    unsafe { Qp::from_c(qp) }.publish_state();
}

fn state_of(s: u32) -> Option<QpState> {
    Some(match s {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

fn state_num(s: QpState) -> u32 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

/// `IBV_MTU_*` → bytes.
fn mtu_bytes(e: u32) -> Option<u32> {
    match e {
        1..=5 => Some(128 << e),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    if pd.is_null() || init.is_null() {
        return errno::null(errno::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let init = unsafe { &mut *init };
    // SAFETY: an allocated PD, in an open context.
    let (p, ctx) = unsafe {
        let p = Pd::from_c(pd);
        (p, p.context())
    };
    if init.send_cq.is_null() || init.recv_cq.is_null() {
        return errno::null(errno::EINVAL);
    }
    if !init.srq.is_null() {
        return errno::null(errno::EOPNOTSUPP);
    }
    let cap = &mut init.cap;
    // What ibv_query_device reports: more is refused, as a provider refuses it.
    if cap.max_send_sge > MAX_SGE
        || cap.max_recv_sge > MAX_SGE
        || cap.max_inline_data > MAX_INLINE
        || cap.max_send_wr > MAX_QP_WR
        || cap.max_recv_wr > MAX_QP_WR
    {
        return errno::null(errno::EINVAL);
    }
    // SAFETY: CQs ibv_create_cq returned.
    let (scq, rcq) = unsafe { (Cq::from_c(init.send_cq), Cq::from_c(init.recv_cq)) };
    let send_wr = cap.max_send_wr.max(1) as usize;
    let recv_wr = cap.max_recv_wr.max(1) as usize;
    let kind = match init.qp_type {
        IBV_QPT_RC => {
            let qi = QpInit {
                mode: config().mode,
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
                line_rate_bps: ctx.entry.speed_bps,
                ..QpInit::default()
            };
            p.pd.create_qp(&scq.cq, &rcq.cq, qi).map(Kind::Rc)
        }
        IBV_QPT_UD => {
            let ui = UdInit {
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
            };
            p.pd.create_ud_qp(&scq.cq, &rcq.cq, ui).map(Kind::Ud)
        }
        _ => return errno::null(errno::EOPNOTSUPP),
    };
    let kind = match kind {
        Ok(k) => k,
        Err(e) => return errno::null(errno::of(&e)),
    };
    // In IRN mode the peer is an irn device, and every irn device takes coalesced datagrams
    // (`Device::accepts_gso`): packets leave up to 64 to a system call. A RoCE-mode peer may
    // be Linux rxe or a NIC, which need one packet per datagram.
    if let Kind::Rc(rc) = &kind {
        if config().mode == irn_verbs::QpMode::Irn {
            if let Err(e) = rc.set_peer_gso(true) {
                return errno::null(errno::of(&e));
            }
        }
    }
    let inline = if cap.max_inline_data > 0 {
        let slot_len = cap.max_inline_data as usize;
        let slots = send_wr + 1;
        match p.pd.reg_mr(slot_len * slots, Access::LOCAL_WRITE) {
            Ok(mr) => Some(Mutex::new(Inline {
                mr,
                slot_len,
                slots,
                next: 0,
            })),
            Err(e) => return errno::null(errno::of(&e)),
        }
    } else {
        None
    };
    let qp_num = match &kind {
        Kind::Rc(q) => q.qpn(),
        Kind::Ud(q) => q.qpn(),
    };
    let attr = ibv_qp_attr {
        path_mtu: mtu_enum(1024),
        cap: *cap,
        ..ibv_qp_attr::default()
    };
    let b = Box::new(Qp {
        c: UnsafeCell::new(ibv_qp {
            context: p.c.context,
            qp_context: init.qp_context,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: std::ptr::null_mut(),
            handle: crate::objects::handle(),
            qp_num,
            state: 0,
            qp_type: init.qp_type,
            // SAFETY: all-zero pthread objects are their static initialisers (glibc).
            mutex: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            cond: unsafe { std::mem::zeroed() },
            events_completed: 0,
        }),
        kind,
        qp_num,
        context: p.c.context,
        pd,
        qp_context: init.qp_context,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        qp_type: init.qp_type,
        sq_sig_all: init.sq_sig_all != 0,
        cap: *cap,
        attr: Mutex::new(attr),
        inline,
    });
    p.users.fetch_add(1, Ordering::AcqRel);
    scq.users.fetch_add(1, Ordering::AcqRel);
    rcq.users.fetch_add(1, Ordering::AcqRel);
    Box::into_raw(b) as *mut ibv_qp
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    if qp.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a queue pair ibv_create_qp returned, destroyed once.
    let q = unsafe { Box::from_raw(qp as *mut Qp) };
    let (pd, scq, rcq) = (q.pd, q.send_cq, q.recv_cq);
    drop(q);
    // SAFETY: its PD and CQs, which cannot go while it uses them.
    unsafe {
        Pd::leave(pd);
        Cq::from_c(scq).users.fetch_sub(1, Ordering::AcqRel);
        Cq::from_c(rcq).users.fetch_sub(1, Ordering::AcqRel);
    }
    0
}

/// The runtime's attributes and mask for an `ibv_modify_qp` on an RC queue pair, and the
/// peer's address when the call carries one (`IBV_QP_AV`).
fn rc_attr(
    a: &ibv_qp_attr,
    m: u32,
    port: u16,
) -> Result<(QpAttr, AttrMask, Option<SocketAddr>), i32> {
    // Alternate paths (automatic path migration) have no meaning over IP.
    if m & (mask::ALT_PATH | mask::PATH_MIG_STATE) != 0 {
        return Err(errno::EOPNOTSUPP);
    }
    let mut attr = QpAttr::default();
    let mut out = AttrMask::NONE;
    let mut set = |bit: u32, irn: AttrMask| {
        if m & bit != 0 {
            out = out.with(irn);
        }
    };
    set(mask::ACCESS_FLAGS, AttrMask::ACCESS_FLAGS);
    set(mask::PKEY_INDEX, AttrMask::PKEY);
    set(mask::PATH_MTU, AttrMask::PATH_MTU);
    set(mask::DEST_QPN, AttrMask::DEST_QPN);
    set(mask::RQ_PSN, AttrMask::RQ_PSN);
    set(mask::MAX_DEST_RD_ATOMIC, AttrMask::MAX_DEST_RD_ATOMIC);
    set(mask::MIN_RNR_TIMER, AttrMask::MIN_RNR_TIMER);
    set(mask::SQ_PSN, AttrMask::SQ_PSN);
    set(mask::TIMEOUT, AttrMask::TIMEOUT);
    set(mask::RETRY_CNT, AttrMask::RETRY_CNT);
    set(mask::RNR_RETRY, AttrMask::RNR_RETRY);
    set(mask::MAX_QP_RD_ATOMIC, AttrMask::MAX_QP_RD_ATOMIC);
    if m & mask::ACCESS_FLAGS != 0 {
        // The responder's remote rights (local write is a region's matter).
        let mut acc = Access::LOCAL_READ;
        for (bit, right) in [
            (0x2, Access::REMOTE_WRITE),
            (0x4, Access::REMOTE_READ),
            (0x8, Access::REMOTE_ATOMIC),
        ] {
            if a.qp_access_flags & bit != 0 {
                acc = acc.with(right);
            }
        }
        attr.access = acc;
    }
    if m & mask::PKEY_INDEX != 0 && a.pkey_index != 0 {
        return Err(errno::EINVAL);
    }
    if m & mask::PATH_MTU != 0 {
        attr.path_mtu = mtu_bytes(a.path_mtu).ok_or(errno::EINVAL)?;
    }
    attr.dest_qpn = a.dest_qp_num;
    attr.rq_psn = irn_verbs::Psn::new(a.rq_psn & 0xff_ffff);
    attr.sq_psn = irn_verbs::Psn::new(a.sq_psn & 0xff_ffff);
    attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    attr.max_rd_atomic = a.max_rd_atomic;
    attr.min_rnr_timer = a.min_rnr_timer;
    attr.timeout = a.timeout;
    attr.retry_cnt = a.retry_cnt;
    attr.rnr_retry = a.rnr_retry;
    let remote = if m & mask::AV != 0 {
        // RoCE routes by GID: an address vector without one names no peer.
        if a.ah_attr.is_global == 0 {
            return Err(errno::EINVAL);
        }
        let ip = irn_verbs::Gid(a.ah_attr.grh.dgid.raw).ip();
        Some(SocketAddr::new(ip, port))
    } else {
        None
    };
    Ok((attr, out, remote))
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    m: c_int,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a live queue pair; the caller's attributes.
    let (q, a) = unsafe { (Qp::from_c(qp), &*attr) };
    let m = m as u32;
    let to = if m & mask::STATE != 0 {
        match state_of(a.qp_state) {
            Some(s) => s,
            None => return errno::EINVAL,
        }
    } else {
        q.state()
    };
    let r = match &q.kind {
        Kind::Rc(rc) => {
            let (ia, im, remote) = match rc_attr(a, m, config().port) {
                Ok(x) => x,
                Err(e) => return e,
            };
            let r = rc.modify(to, &ia, im, remote);
            if r.is_ok() && m & mask::AV != 0 && a.ah_attr.grh.traffic_class != 0 {
                rc.set_traffic_class(a.ah_attr.grh.traffic_class)
            } else {
                r
            }
        }
        Kind::Ud(ud) => {
            let cached = q.attr.lock().unwrap_or_else(|p| p.into_inner());
            let ctx_mtu = {
                // SAFETY: the queue pair's context is open.
                let ctx = unsafe { Context::from_c(q.context) };
                ctx.entry.mtu
            };
            let qkey = if m & mask::QKEY != 0 {
                a.qkey
            } else {
                cached.qkey
            };
            let sq_psn = if m & mask::SQ_PSN != 0 {
                a.sq_psn
            } else {
                cached.sq_psn
            };
            drop(cached);
            ud.modify(
                to,
                &UdAttr {
                    pkey: irn_verbs::DEFAULT_PKEY,
                    qkey,
                    pmtu: ctx_mtu,
                    sq_psn: sq_psn & 0xff_ffff,
                },
            )
        }
    };
    if let Err(e) = r {
        if std::env::var_os("IRN_IBV_DEBUG").is_some() {
            eprintln!(
                "irn libibverbs: ibv_modify_qp(QP {}, mask {m:#x}): {e}",
                q.qp_num
            );
        }
        return errno::of(&e);
    }
    // Remember what was set, for ibv_query_qp.
    remember(&mut q.attr.lock().unwrap_or_else(|p| p.into_inner()), a, m);
    q.publish_state();
    0
}

/// Copies into `c` the attributes of `a` that mask `m` names.
fn remember(c: &mut ibv_qp_attr, a: &ibv_qp_attr, m: u32) {
    let has = |bit| m & bit != 0;
    if has(mask::ACCESS_FLAGS) {
        c.qp_access_flags = a.qp_access_flags;
    }
    if has(mask::QKEY) {
        c.qkey = a.qkey;
    }
    if has(mask::AV) {
        c.ah_attr = a.ah_attr;
    }
    if has(mask::PATH_MTU) {
        c.path_mtu = a.path_mtu;
    }
    if has(mask::TIMEOUT) {
        c.timeout = a.timeout;
    }
    if has(mask::RETRY_CNT) {
        c.retry_cnt = a.retry_cnt;
    }
    if has(mask::RNR_RETRY) {
        c.rnr_retry = a.rnr_retry;
    }
    if has(mask::RQ_PSN) {
        c.rq_psn = a.rq_psn;
    }
    if has(mask::SQ_PSN) {
        c.sq_psn = a.sq_psn;
    }
    if has(mask::MAX_QP_RD_ATOMIC) {
        c.max_rd_atomic = a.max_rd_atomic;
    }
    if has(mask::MAX_DEST_RD_ATOMIC) {
        c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(mask::MIN_RNR_TIMER) {
        c.min_rnr_timer = a.min_rnr_timer;
    }
    if has(mask::DEST_QPN) {
        c.dest_qp_num = a.dest_qp_num;
    }
    if has(mask::PORT) {
        c.port_num = a.port_num;
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a live queue pair.
    let q = unsafe { Qp::from_c(qp) };
    let mut a = *q.attr.lock().unwrap_or_else(|p| p.into_inner());
    a.qp_state = state_num(q.state());
    a.cur_qp_state = a.qp_state;
    a.cap = q.cap;
    // An RC queue pair's attributes as the runtime holds them: what ibv_modify_qp set, or
    // what the connection manager chose for one it connected.
    if let Kind::Rc(rc) = &q.kind {
        if let Ok(r) = rc.attr() {
            a.path_mtu = mtu_enum(r.path_mtu);
            a.dest_qp_num = r.dest_qpn;
            a.rq_psn = r.rq_psn.value();
            a.sq_psn = r.sq_psn.value();
            a.max_dest_rd_atomic = r.max_dest_rd_atomic;
            a.max_rd_atomic = r.max_rd_atomic;
            a.min_rnr_timer = r.min_rnr_timer;
            a.timeout = r.timeout;
            a.retry_cnt = r.retry_cnt;
            a.rnr_retry = r.rnr_retry;
            let mut flags = 0;
            for (right, bit) in [
                (Access::REMOTE_WRITE, 0x2),
                (Access::REMOTE_READ, 0x4),
                (Access::REMOTE_ATOMIC, 0x8),
            ] {
                if r.access.allows(right) {
                    flags |= bit;
                }
            }
            a.qp_access_flags = flags;
        }
    }
    // SAFETY: the caller's buffers.
    unsafe {
        attr.write(a);
        if !init.is_null() {
            init.write(ibv_qp_init_attr {
                qp_context: q.qp_context,
                send_cq: q.send_cq,
                recv_cq: q.recv_cq,
                srq: std::ptr::null_mut(),
                cap: q.cap,
                qp_type: q.qp_type,
                sq_sig_all: c_int::from(q.sq_sig_all),
            });
        }
    }
    0
}

/// The extended queue pair (the `ibv_wr_*` send API) is not offered: programs use
/// `ibv_post_send`, as they do on any provider without it.
#[no_mangle]
pub unsafe extern "C" fn irn_ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    errno::null(errno::EOPNOTSUPP)
}

/// Enhanced connection establishment: nothing to negotiate.
#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    errno::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    errno::EOPNOTSUPP
}

/// The scatter/gather list of a work request.
///
/// # Safety
/// `list` holds `n` entries when `n > 0`.
unsafe fn sges(list: *const ibv_sge, n: c_int, max: u32) -> Result<SgList, i32> {
    if n < 0 || n as u32 > max || (n > 0 && list.is_null()) {
        return Err(errno::EINVAL);
    }
    // One entry, as most posts carry, stays inline: the list allocates nothing.
    let mut v = SgList::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: the caller's contract.
        let s = unsafe { *list.add(i) };
        v.push(Sge {
            addr: s.addr,
            len: s.length,
            lkey: s.lkey,
        });
    }
    Ok(v)
}

/// Copies the bytes `sg` names — the program's memory, which `IBV_SEND_INLINE` lets it
/// reuse once the post returns — into the queue pair's next inline slot, and names the slot
/// instead. The slot is taken for good by [`Inline::commit`] once the post succeeds.
///
/// # Safety
/// Each entry names `len` readable bytes of the program's at `addr` (inline data need not be
/// registered: `ibv_post_send(3)`).
unsafe fn inline_copy(ring: &mut Inline, sg: &[Sge]) -> Result<Sge, i32> {
    let total: usize = sg.iter().map(|s| s.len as usize).sum();
    if total > ring.slot_len {
        return Err(errno::EINVAL);
    }
    // Each piece straight into its place in the slot (one piece, as a post of one entry has,
    // is one copy and no allocation); a slot a failed post half filled is not committed.
    let off = (ring.next * ring.slot_len) as u64;
    let mut at = off;
    for s in sg {
        if s.len > 0 {
            // SAFETY: the caller's contract.
            let piece = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.len as usize) };
            ring.mr.write(at, piece).map_err(|e| errno::of(&e))?;
            at += u64::from(s.len);
        }
    }
    Ok(ring.mr.sge(off, total as u32))
}

impl Inline {
    fn commit(&mut self) {
        self.next = (self.next + 1) % self.slots;
    }
}

/// One `ibv_send_wr` as the runtime's RC work request.
///
/// # Safety
/// `w` is the program's work request, its lists valid.
unsafe fn rc_wr(q: &Qp, w: &ibv_send_wr, sg: SgList) -> Result<SendWr, i32> {
    // SAFETY: the union's `rdma` member, which the opcodes that use it name (verbs.h).
    let rdma = || unsafe { w.wr.rdma };
    // SAFETY: the `atomic` member, likewise.
    let atomic = || unsafe { w.wr.atomic };
    let remote = || Remote {
        addr: rdma().remote_addr,
        rkey: rdma().rkey,
    };
    let op = match w.opcode {
        wr_opcode::RDMA_WRITE => SendOp::Write(remote()),
        wr_opcode::RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm(remote(), u32::from_be(w.imm_data)),
        wr_opcode::SEND => SendOp::Send,
        wr_opcode::SEND_WITH_IMM => SendOp::SendWithImm(u32::from_be(w.imm_data)),
        wr_opcode::SEND_WITH_INV => SendOp::SendWithInv(w.imm_data),
        wr_opcode::RDMA_READ => SendOp::Read(remote()),
        wr_opcode::ATOMIC_CMP_AND_SWP => {
            let a = atomic();
            SendOp::CompareSwap {
                remote: Remote {
                    addr: a.remote_addr,
                    rkey: a.rkey,
                },
                compare: a.compare_add,
                swap: a.swap,
            }
        }
        wr_opcode::ATOMIC_FETCH_AND_ADD => {
            let a = atomic();
            SendOp::FetchAdd {
                remote: Remote {
                    addr: a.remote_addr,
                    rkey: a.rkey,
                },
                add: a.compare_add,
            }
        }
        // Local invalidation, memory-window binds, TSO, atomic writes: not offered.
        _ => return Err(errno::EINVAL),
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        sg_list: sg,
        signaled: q.sq_sig_all || w.send_flags & send_flags::SIGNALED != 0,
        fence: w.send_flags & send_flags::FENCE != 0,
        solicited: w.send_flags & send_flags::SOLICITED != 0,
    })
}

/// `ops.post_send`, what `ibv_post_send` calls.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    if qp.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a live queue pair.
    let q = unsafe { Qp::from_c(qp) };
    let fail = |at: *mut ibv_send_wr, e: i32| {
        if !bad.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { bad.write(at) };
        }
        e
    };
    // Work requests translated and not yet posted, with their C pointers.
    let mut batch: Vec<(SendWr, *mut ibv_send_wr)> = Vec::new();
    let flush =
        |batch: &mut Vec<(SendWr, *mut ibv_send_wr)>| -> Result<(), (*mut ibv_send_wr, i32)> {
            let Kind::Rc(rc) = &q.kind else { return Ok(()) };
            if batch.is_empty() {
                return Ok(());
            }
            let ptrs: Vec<*mut ibv_send_wr> = batch.iter().map(|(_, p)| *p).collect();
            let r = rc.post_send_list(batch.drain(..).map(|(w, _)| w));
            r.map(|_| ())
                .map_err(|e| (ptrs[e.posted], errno::of(&e.error)))
        };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the program's list of work requests, valid until the post returns.
        let w = unsafe { &*cur };
        // SAFETY: its scatter/gather list has num_sge entries.
        let sg = match unsafe { sges(w.sg_list, w.num_sge, q.cap.max_send_sge.max(1)) } {
            Ok(s) => s,
            Err(e) => {
                return match flush(&mut batch) {
                    Ok(()) => fail(cur, e),
                    Err((at, e)) => fail(at, e),
                }
            }
        };
        let inline = w.send_flags & send_flags::INLINE != 0;
        if inline && q.inline.is_none() {
            // No room was asked for (max_inline_data 0): refused, as a provider refuses
            // inline data larger than the queue pair takes.
            return match flush(&mut batch) {
                Ok(()) => fail(cur, errno::EINVAL),
                Err((at, e)) => fail(at, e),
            };
        }
        if inline {
            // Everything before it goes first: its slot must be taken only if it posts.
            if let Err((at, e)) = flush(&mut batch) {
                return fail(at, e);
            }
        }
        let mut ring = if inline {
            q.inline
                .as_ref()
                .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        };
        let sg = match ring.as_deref_mut() {
            // SAFETY: inline data names the program's readable bytes.
            Some(r) => match unsafe { inline_copy(r, &sg) } {
                Ok(s) => irn_verbs::sgl![s],
                Err(e) => return fail(cur, e),
            },
            None => sg,
        };
        let r = match &q.kind {
            Kind::Rc(_) => {
                // SAFETY: the program's work request.
                match unsafe { rc_wr(q, w, sg) } {
                    Ok(s) if ring.is_some() => {
                        let Kind::Rc(rc) = &q.kind else {
                            unreachable!()
                        };
                        rc.post_send(s).map_err(|e| errno::of(&e))
                    }
                    Ok(s) => {
                        batch.push((s, cur));
                        Ok(())
                    }
                    Err(e) => {
                        if let Err((at, e)) = flush(&mut batch) {
                            return fail(at, e);
                        }
                        Err(e)
                    }
                }
            }
            // SAFETY: the program's work request.
            Kind::Ud(ud) => unsafe { ud_send(q, ud, w, sg) },
        };
        match r {
            Ok(()) => {
                if let Some(r) = ring.as_deref_mut() {
                    r.commit();
                }
            }
            Err(e) => return fail(cur, e),
        }
        cur = w.next;
    }
    match flush(&mut batch) {
        Ok(()) => 0,
        Err((at, e)) => fail(at, e),
    }
}

/// Posts one UD Send.
///
/// # Safety
/// `w` is the program's work request; its `wr.ud.ah` an address handle of this library's.
unsafe fn ud_send(q: &Qp, ud: &irn_verbs::UdQp, w: &ibv_send_wr, sg: SgList) -> Result<(), i32> {
    let imm = match w.opcode {
        wr_opcode::SEND => None,
        wr_opcode::SEND_WITH_IMM => Some(u32::from_be(w.imm_data)),
        _ => return Err(errno::EINVAL),
    };
    // SAFETY: the union member UD work requests use.
    let u = unsafe { w.wr.ud };
    if u.ah.is_null() {
        return Err(errno::EINVAL);
    }
    // SAFETY: an AH ibv_create_ah returned.
    let ah = unsafe { &*(u.ah as *const Ah) };
    ud.post_send(UdSend {
        wr_id: w.wr_id,
        ah: &ah.ah,
        remote_qpn: u.remote_qpn,
        remote_qkey: u.remote_qkey,
        sg_list: sg,
        imm,
        signaled: q.sq_sig_all || w.send_flags & send_flags::SIGNALED != 0,
    })
    .map_err(|e| errno::of(&e))
}

/// `ops.post_recv`, what `ibv_post_recv` calls.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if qp.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a live queue pair.
    let q = unsafe { Qp::from_c(qp) };
    let fail = |at: *mut ibv_recv_wr, e: i32| {
        if !bad.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { bad.write(at) };
        }
        e
    };
    let mut wrs = Vec::new();
    let mut ptrs = Vec::new();
    let mut cur = wr;
    let mut refused = None;
    while !cur.is_null() {
        // SAFETY: the program's list, valid until the post returns.
        let w = unsafe { &*cur };
        // SAFETY: its scatter list has num_sge entries.
        match unsafe { sges(w.sg_list, w.num_sge, q.cap.max_recv_sge.max(1)) } {
            Ok(sg) => {
                wrs.push(RecvWr {
                    wr_id: w.wr_id,
                    sg_list: sg,
                });
                ptrs.push(cur);
            }
            Err(e) => {
                refused = Some((cur, e));
                break;
            }
        }
        cur = w.next;
    }
    let r = match &q.kind {
        Kind::Rc(rc) => rc
            .post_recv_list(wrs)
            .map(|_| ())
            .map_err(|e| (ptrs[e.posted], errno::of(&e.error))),
        Kind::Ud(ud) => wrs
            .into_iter()
            .zip(&ptrs)
            .try_for_each(|(w, &p)| ud.post_recv(w).map_err(|e| (p, errno::of(&e)))),
    };
    match (r, refused) {
        (Err((at, e)), _) | (Ok(()), Some((at, e))) => fail(at, e),
        (Ok(()), None) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtus_and_states_convert_both_ways() {
        assert_eq!(
            (1..=5).map(mtu_bytes).collect::<Vec<_>>(),
            [256, 512, 1024, 2048, 4096].map(Some)
        );
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
        for n in 0..=6 {
            assert_eq!(state_of(n).map(state_num), Some(n));
        }
        assert_eq!(state_of(7), None);
    }

    #[test]
    fn modify_attributes_follow_the_mask() {
        let mut a = ibv_qp_attr {
            qp_state: 2,
            path_mtu: 5,
            dest_qp_num: 0x11,
            rq_psn: 0x0100_0007,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ..ibv_qp_attr::default()
        };
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid.raw = irn_verbs::Gid::from(std::net::IpAddr::from([127, 0, 0, 2])).0;
        let m = mask::STATE
            | mask::AV
            | mask::PATH_MTU
            | mask::DEST_QPN
            | mask::RQ_PSN
            | mask::MAX_DEST_RD_ATOMIC
            | mask::MIN_RNR_TIMER;
        let (attr, irn_mask, remote) = rc_attr(&a, m, 4791).expect("valid");
        assert_eq!(attr.path_mtu, 4096);
        assert_eq!(attr.dest_qpn, 0x11);
        assert_eq!(attr.rq_psn, irn_verbs::Psn::new(7), "PSNs are 24 bits");
        assert_eq!(remote, Some("127.0.0.2:4791".parse().expect("addr")));
        assert!(irn_mask.contains(AttrMask::PATH_MTU));
        assert!(irn_mask.contains(AttrMask::DEST_QPN));
        assert!(!irn_mask.contains(AttrMask::SQ_PSN));
        // An address vector without a GID names no peer on RoCE.
        a.ah_attr.is_global = 0;
        assert_eq!(rc_attr(&a, m, 4791).err(), Some(errno::EINVAL));
        assert_eq!(
            rc_attr(&a, mask::ALT_PATH, 4791).err(),
            Some(errno::EOPNOTSUPP)
        );
        a.path_mtu = 9;
        assert_eq!(rc_attr(&a, mask::PATH_MTU, 4791).err(), Some(errno::EINVAL));
    }
}
