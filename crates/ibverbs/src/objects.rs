//! Protection domains, memory regions, completion queues and channels, address handles —
//! and the verbs irn refuses (shared receive queues, multicast, memory re-registration).
//!
//! Each object is a Rust structure whose first field is the C structure the program sees, so
//! the pointer a program holds is the pointer to the object (`#[repr(C)]`), and destroying it
//! is dropping that box.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use irn_verbs::{Access, Wc, WcOpcode};

use crate::abi::*;
use crate::device::{config, Context};
use crate::errno;

static HANDLES: AtomicU32 = AtomicU32::new(1);

/// A fresh `handle` for a C object (programs print them; nothing else reads them).
pub(crate) fn handle() -> u32 {
    HANDLES.fetch_add(1, Ordering::Relaxed)
}

/// A protection domain.
#[repr(C)]
pub(crate) struct Pd {
    pub c: ibv_pd,
    pub pd: irn_verbs::Pd,
    /// Regions, queue pairs and address handles in it: it cannot be freed before them
    /// (`EBUSY`, as the kernel refuses).
    pub users: AtomicU32,
}

impl Pd {
    /// # Safety
    /// `pd` is a protection domain this library allocated and has not freed.
    pub unsafe fn from_c<'a>(pd: *mut ibv_pd) -> &'a Pd {
        // SAFETY: `c` is the first field of the repr(C) Pd.
        unsafe { &*(pd as *const Pd) }
    }

    /// One of its regions, queue pairs or address handles goes.
    ///
    /// # Safety
    /// As [`Pd::from_c`].
    pub unsafe fn leave(pd: *mut ibv_pd) {
        // SAFETY: the caller's contract.
        unsafe { Pd::from_c(pd) }
            .users
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// # Safety
    /// As [`Pd::from_c`], and the PD's context is open.
    pub unsafe fn context<'a>(&self) -> &'a Context {
        // SAFETY: the caller's contract.
        unsafe { Context::from_c(self.c.context) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    if ctx.is_null() {
        return errno::null(errno::EINVAL);
    }
    // SAFETY: an open context.
    let dev = &unsafe { Context::from_c(ctx) }.dev;
    let pd = Box::new(Pd {
        c: ibv_pd {
            context: ctx,
            handle: handle(),
        },
        pd: dev.alloc_pd(),
        users: AtomicU32::new(0),
    });
    Box::into_raw(pd) as *mut ibv_pd
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    if pd.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a PD ibv_alloc_pd returned.
    if unsafe { Pd::from_c(pd) }.users.load(Ordering::Acquire) != 0 {
        return libc::EBUSY;
    }
    // SAFETY: as above, freed once, and nothing of the program's is in it any more.
    drop(unsafe { Box::from_raw(pd as *mut Pd) });
    0
}

/// A memory region over the program's memory.
#[repr(C)]
pub(crate) struct Mr {
    pub c: ibv_mr,
    pub mr: irn_verbs::Mr,
}

/// `IBV_ACCESS_*` → irn's rights. `IBV_ACCESS_MW_BIND` (no memory windows here) is refused;
/// `ON_DEMAND`, `HUGETLB` and the optional flags (relaxed ordering) change nothing for memory
/// the runtime never pins.
pub(crate) fn access(flags: c_int) -> Result<Access, i32> {
    const KNOWN: c_int = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x3ff0_0000;
    if flags & 0x10 != 0 || flags & !KNOWN != 0 {
        return Err(errno::EOPNOTSUPP);
    }
    let mut a = Access::LOCAL_READ;
    for (bit, right) in [
        (0x1, Access::LOCAL_WRITE),
        (0x2, Access::REMOTE_WRITE),
        (0x4, Access::REMOTE_READ),
        (0x8, Access::REMOTE_ATOMIC),
    ] {
        if flags & bit != 0 {
            a = a.with(right);
        }
    }
    // IBTA Vol. 1 §10.6.3.1 (C10-23): remote write or atomic rights need local write.
    if !a.is_valid() {
        return Err(errno::EINVAL);
    }
    Ok(a)
}

unsafe fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    flags: c_int,
) -> *mut ibv_mr {
    if pd.is_null() || (addr.is_null() && length != 0) {
        return errno::null(errno::EINVAL);
    }
    let access = match access(flags) {
        Ok(a) => a,
        Err(e) => return errno::null(e),
    };
    // IBV_ACCESS_ZERO_BASED: the region is named from 0.
    let iova = if flags & 0x20 != 0 { 0 } else { iova };
    // SAFETY: an allocated PD.
    let p = unsafe { Pd::from_c(pd) };
    // SAFETY: ibv_reg_mr(3)'s contract is reg_mr_raw's: the program keeps the `length` bytes
    // at `addr` allocated until ibv_dereg_mr, and leaves the bytes a work request or a peer
    // may access alone while it may; the engine touches only those bytes (AppBuffer's
    // ranges), so the program's use of the rest of the region meanwhile is no race.
    let mr = match unsafe { p.pd.reg_mr_raw_iova(addr as *mut u8, length, access, iova) } {
        Ok(m) => m,
        Err(e) => return errno::null(errno::of(&e)),
    };
    p.users.fetch_add(1, Ordering::AcqRel);
    let b = Box::new(Mr {
        c: ibv_mr {
            context: p.c.context,
            pd,
            addr,
            length,
            handle: handle(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        },
        mr,
    });
    Box::into_raw(b) as *mut ibv_mr
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's arguments, as ibv_reg_mr(3) requires them.
    unsafe { reg_mr(pd, addr, length, addr as u64, access) }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: as ibv_reg_mr.
    unsafe { reg_mr(pd, addr, length, iova, access) }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: std::ffi::c_uint,
) -> *mut ibv_mr {
    // SAFETY: as ibv_reg_mr.
    unsafe { reg_mr(pd, addr, length, iova, access as c_int) }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    errno::null(errno::EOPNOTSUPP)
}

/// `IBV_REREG_MR_ERR_INPUT`: the old region stays valid.
#[no_mangle]
pub unsafe extern "C" fn irn_ibv_rereg_mr(
    _mr: *mut ibv_mr,
    _flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    errno::set(errno::EOPNOTSUPP);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a region ibv_reg_mr returned, deregistered once. Dropping it waits for packets
    // that carry its bytes to leave; the runtime touches its memory no more after.
    let m = unsafe { Box::from_raw(mr as *mut Mr) };
    // SAFETY: its PD, which cannot be freed while the region is in it.
    unsafe { Pd::leave(m.c.pd) };
    drop(m);
    0
}

/// A completion channel: `c.fd` is the read end of a pipe; an armed CQ's next completion
/// writes the CQ's serial number into it, which `ibv_get_cq_event` looks up among the CQs
/// still using the channel — an event left in the pipe by a CQ destroyed since is passed
/// over, as the kernel drops a destroyed CQ's pending events.
#[repr(C)]
pub(crate) struct Channel {
    pub c: ibv_comp_channel,
    read: OwnedFd,
    write: Arc<OwnedFd>,
    /// The CQs using it, by serial number: it cannot be destroyed before them (`EBUSY`).
    cqs: Mutex<BTreeMap<u64, usize>>,
}

impl Channel {
    fn cqs(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        self.cqs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_create_comp_channel(
    ctx: *mut ibv_context,
) -> *mut ibv_comp_channel {
    if ctx.is_null() {
        return errno::null(errno::EINVAL);
    }
    let (read, write) = match crate::device::new_pipe() {
        Ok(p) => p,
        Err(e) => return errno::null(e.raw_os_error().unwrap_or(errno::ENOMEM)),
    };
    // The engine writes events with the device locked: never block it on a full pipe (a
    // program that does not read events loses none it needs — each arming yields one).
    // SAFETY: fcntl on a descriptor owned here.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let ch = Box::new(Channel {
        c: ibv_comp_channel {
            context: ctx,
            fd: read.as_raw_fd(),
            refcnt: 0,
        },
        read,
        write: Arc::new(write),
        cqs: Mutex::new(BTreeMap::new()),
    });
    Box::into_raw(ch) as *mut ibv_comp_channel
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if ch.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a channel ibv_create_comp_channel returned.
    let c = unsafe { &*(ch as *const Channel) };
    if !c.cqs().is_empty() {
        return libc::EBUSY;
    }
    // SAFETY: as above, destroyed once, and no CQ refers to it.
    drop(unsafe { Box::from_raw(ch as *mut Channel) });
    0
}

/// A completion queue. The C structure is the program's; the shim writes it (its event
/// counter) through the cell and keeps what it reads of it in fields of its own.
#[repr(C)]
pub(crate) struct Cq {
    c: UnsafeCell<ibv_cq>,
    pub cq: irn_verbs::Cq,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
    /// Its name in its channel's pipe.
    serial: u64,
    /// Queue pairs using it: it cannot be destroyed before them (`EBUSY`).
    pub users: AtomicU32,
    /// Completions taken from the runtime, converted into the program's array.
    scratch: Mutex<Vec<Wc>>,
    /// Polls that found it empty.
    empty_polls: AtomicU32,
    /// Events handed out by `ibv_get_cq_event` and acknowledged by `ibv_ack_cq_events`:
    /// `ibv_destroy_cq` waits for the two to meet.
    events: Mutex<(u64, u64)>,
    acked: Condvar,
}

// SAFETY: the raw pointers are the program's objects (its channel, its context), which the
// shim only passes back; the C structure is written under the events lock.
unsafe impl Sync for Cq {}

impl Cq {
    /// # Safety
    /// `cq` is a CQ this library created and has not destroyed.
    pub unsafe fn from_c<'a>(cq: *mut ibv_cq) -> &'a Cq {
        // SAFETY: `c` is the first field of the repr(C) Cq.
        unsafe { &*(cq as *const Cq) }
    }

    /// Its channel, if it has one.
    fn channel(&self) -> Option<&Channel> {
        // SAFETY: a channel outlives its CQs (destroying it before them is refused).
        (!self.channel.is_null()).then(|| unsafe { &*(self.channel as *const Channel) })
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    if ctx.is_null() || !(1..=1 << 20).contains(&cqe) {
        return errno::null(errno::EINVAL);
    }
    // SAFETY: an open context.
    let dev = &unsafe { Context::from_c(ctx) }.dev;
    let cq = match dev.create_cq(cqe as usize) {
        Ok(c) => c,
        Err(e) => return errno::null(errno::of(&e)),
    };
    let serial = CQ_SERIALS.fetch_add(1, Ordering::Relaxed);
    let b = Box::new(Cq {
        c: UnsafeCell::new(ibv_cq {
            context: ctx,
            channel,
            cq_context,
            handle: handle(),
            cqe,
            // SAFETY: all-zero pthread objects are their static initialisers (glibc).
            mutex: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            cond: unsafe { std::mem::zeroed() },
            comp_events_completed: 0,
            async_events_completed: 0,
        }),
        cq,
        channel,
        cq_context,
        serial,
        users: AtomicU32::new(0),
        scratch: Mutex::new(Vec::with_capacity(64)),
        empty_polls: AtomicU32::new(0),
        events: Mutex::new((0, 0)),
        acked: Condvar::new(),
    });
    let cq = Box::into_raw(b) as *mut ibv_cq;
    if !channel.is_null() {
        // SAFETY: a channel ibv_create_comp_channel returned.
        let ch = unsafe { &*(channel as *const Channel) };
        ch.cqs().insert(serial, cq as usize);
    }
    cq
}

static CQ_SERIALS: AtomicU64 = AtomicU64::new(1);

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    errno::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    if cq.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a CQ ibv_create_cq returned.
    let c = unsafe { Cq::from_c(cq) };
    if c.users.load(Ordering::Acquire) != 0 {
        return libc::EBUSY;
    }
    // Out of its channel first: an event of its still in the pipe is passed over from now
    // on, and one already taken has been counted (under the same lock).
    if let Some(ch) = c.channel() {
        ch.cqs().remove(&c.serial);
    }
    // ibv_destroy_cq(3): every event taken must have been acknowledged.
    let mut ev = c.events.lock().unwrap_or_else(|p| p.into_inner());
    while ev.0 != ev.1 {
        ev = c.acked.wait(ev).unwrap_or_else(|p| p.into_inner());
    }
    drop(ev);
    // SAFETY: destroyed once; no queue pair and no channel refers to it any more.
    drop(unsafe { Box::from_raw(cq as *mut Cq) });
    0
}

/// Empty polls in a row answered at once; after them, each empty poll waits up to
/// `IRN_IBV_POLL_WAIT_US` (100 µs) for a completion. A program spinning on `ibv_poll_cq`
/// then leaves the cores to the engine (both ends of a 2-core host spinning had held
/// perftest's Writes to 0.6 of what the engine moves when the consumer sleeps,
/// docs/BENCHMARKS.md).
const EMPTY_SPINS: u32 = 256;

/// `ops.poll_cq`, what `ibv_poll_cq` calls.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    if cq.is_null() || n < 0 || (n > 0 && wc.is_null()) {
        return -errno::EINVAL;
    }
    // SAFETY: a live CQ.
    let c = unsafe { Cq::from_c(cq) };
    // An empty CQ is answered without the device's lock, as a NIC's CQ is memory the program
    // reads: programs spin here (perftest), and the engine producing the completions needs
    // the lock — and the CPU, which a NIC's own engine would not: after EMPTY_SPINS empty
    // polls in a row, each waits up to the configured time for a completion before answering.
    if c.cq.queued() == 0 && !c.cq.busy_polls() {
        if c.empty_polls.fetch_add(1, Ordering::Relaxed) < EMPTY_SPINS {
            return 0;
        }
        let wait = config().poll_wait;
        if wait.is_zero() {
            return 0;
        }
        match c.cq.wait_ready(wait) {
            Ok(true) => {}
            Ok(false) => return 0,
            Err(e) => return -errno::of(&e),
        }
    }
    c.empty_polls.store(0, Ordering::Relaxed);
    let mut scratch = c.scratch.lock().unwrap_or_else(|p| p.into_inner());
    scratch.clear();
    match c.cq.poll_into(n as usize, &mut scratch) {
        Ok(_) => {}
        Err(e) => return -errno::of(&e),
    }
    for (i, w) in scratch.iter().enumerate() {
        // SAFETY: the program's array holds `n` entries; i < n.
        unsafe { wc.add(i).write(to_c(w)) };
    }
    scratch.len() as c_int
}

/// A runtime completion as `struct ibv_wc`.
pub(crate) fn to_c(w: &Wc) -> ibv_wc {
    let status = w.status.ibv_number();
    let opcode = match w.opcode {
        WcOpcode::Send => wc_opcode::SEND,
        WcOpcode::RdmaWrite => wc_opcode::RDMA_WRITE,
        WcOpcode::RdmaRead => wc_opcode::RDMA_READ,
        WcOpcode::CompSwap => wc_opcode::COMP_SWAP,
        WcOpcode::FetchAdd => wc_opcode::FETCH_ADD,
        WcOpcode::Recv => wc_opcode::RECV,
        WcOpcode::RecvRdmaWithImm => wc_opcode::RECV_RDMA_WITH_IMM,
    };
    let mut flags = 0;
    let mut imm_data = 0;
    if let Some(imm) = w.imm {
        flags |= wc_flags::WITH_IMM;
        // Network order in memory: the bytes as they came in the ImmDt.
        imm_data = imm.to_be();
    } else if let Some(rkey) = w.invalidated_rkey {
        flags |= wc_flags::WITH_INV;
        imm_data = rkey;
    }
    if w.src_qp.is_some() {
        flags |= wc_flags::GRH;
    }
    ibv_wc {
        wr_id: w.wr_id,
        status,
        opcode,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data,
        qp_num: w.qp_num,
        src_qp: w.src_qp.unwrap_or(0),
        wc_flags: flags,
        ..ibv_wc::default()
    }
}

/// `ops.req_notify_cq`, what `ibv_req_notify_cq` calls.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    if cq.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a live CQ.
    let c = unsafe { Cq::from_c(cq) };
    let Some(ch) = c.channel() else {
        // Events go nowhere without a channel; arming is harmless.
        return 0;
    };
    // The program's polls start counting again: the one it makes after arming answers at once
    // rather than waiting (`poll_cq`).
    c.empty_polls.store(0, Ordering::Relaxed);
    let write = ch.write.clone();
    let serial = c.serial;
    let armed = c.cq.req_notify(Arc::new(move || {
        let bytes = serial.to_ne_bytes();
        // SAFETY: writing 8 bytes from a local array to the channel's pipe (non-blocking: a
        // full pipe already holds events the program has not read).
        let _ = unsafe {
            libc::write(
                write.as_raw_fd(),
                bytes.as_ptr() as *const c_void,
                bytes.len(),
            )
        };
    }));
    match armed {
        Ok(()) => 0,
        Err(e) => errno::of(&e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    context_out: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq_out.is_null() || context_out.is_null() {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: a live channel.
    let chan = unsafe { &*(ch as *const Channel) };
    loop {
        let mut bytes = [0u8; 8];
        // SAFETY: reading into a local array (the pipe's writes are whole serial numbers);
        // blocking unless the program made the descriptor non-blocking.
        let n = unsafe { libc::read(chan.c.fd, bytes.as_mut_ptr() as *mut c_void, 8) };
        if n != 8 {
            return -1;
        }
        let cqs = chan.cqs();
        // A serial no CQ has any more: its CQ was destroyed with the event unread.
        let Some(&addr) = cqs.get(&u64::from_ne_bytes(bytes)) else {
            continue;
        };
        // SAFETY: a CQ of this channel, which destroying it removes first (under this lock),
        // and which then waits for this event, counted here, to be acknowledged.
        let c = unsafe { Cq::from_c(addr as *mut ibv_cq) };
        c.events.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        drop(cqs);
        // SAFETY: the caller's out pointers.
        unsafe {
            cq_out.write(addr as *mut ibv_cq);
            context_out.write(c.cq_context);
        }
        return 0;
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_ack_cq_events(cq: *mut ibv_cq, n: std::ffi::c_uint) {
    if cq.is_null() {
        return;
    }
    // SAFETY: a live CQ.
    let c = unsafe { Cq::from_c(cq) };
    let mut ev = c.events.lock().unwrap_or_else(|p| p.into_inner());
    ev.1 += u64::from(n);
    // SAFETY: the C structure's counter, written through its cell under the events lock.
    unsafe { (*c.c.get()).comp_events_completed = ev.1 as u32 };
    c.acked.notify_all();
}

/// An address handle.
#[repr(C)]
pub(crate) struct Ah {
    pub c: ibv_ah,
    pub ah: irn_verbs::Ah,
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    if pd.is_null() || attr.is_null() {
        return errno::null(errno::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let attr = unsafe { &*attr };
    // RoCE addresses by GID: an attribute without one names no peer.
    if attr.is_global == 0 {
        return errno::null(errno::EINVAL);
    }
    // SAFETY: an allocated PD.
    let p = unsafe { Pd::from_c(pd) };
    let gid = irn_verbs::Gid(attr.grh.dgid.raw);
    match p.pd.create_ah(gid, config().port) {
        Ok(ah) => {
            p.users.fetch_add(1, Ordering::AcqRel);
            Box::into_raw(Box::new(Ah {
                c: ibv_ah {
                    context: p.c.context,
                    pd,
                    handle: handle(),
                },
                ah,
            }))
            .cast::<ibv_ah>()
        }
        Err(e) => errno::null(errno::of(&e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    if ah.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: an AH ibv_create_ah returned, destroyed once.
    let a = unsafe { Box::from_raw(ah as *mut Ah) };
    // SAFETY: its PD, which cannot be freed while the handle is in it.
    unsafe { Pd::leave(a.c.pd) };
    drop(a);
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_init_ah_from_wc(
    _ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    if wc.is_null() || attr.is_null() {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: the caller's completion.
    let wc = unsafe { &*wc };
    let mut a = ibv_ah_attr {
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        port_num: port,
        ..ibv_ah_attr::default()
    };
    if wc.wc_flags & wc_flags::GRH != 0 {
        if grh.is_null() {
            errno::set(errno::EINVAL);
            return -1;
        }
        // SAFETY: the 40 bytes at the head of the receive buffer.
        let raw: [u8; 40] = unsafe { std::ptr::read_unaligned(grh as *const [u8; 40]) };
        match grh_route(&raw) {
            Some(route) => {
                a.grh = route;
                a.is_global = 1;
            }
            None => {
                errno::set(errno::EINVAL);
                return -1;
            }
        }
    }
    // SAFETY: the caller's attributes buffer.
    unsafe { attr.write(a) };
    0
}

/// The route back to a UD datagram's sender, from the 40-byte GRH area of its receive buffer:
/// on RoCEv2 the IPv6 header, or 20 zero bytes then the IPv4 header (IBTA annex A17.4.5.1;
/// rxe fills it the same way). The sender's address as a GID, its hop limit (TTL) and traffic
/// class (TOS).
pub(crate) fn grh_route(raw: &[u8; 40]) -> Option<ibv_global_route> {
    let s = irn_transport::ud::grh_source(raw)?;
    Some(ibv_global_route {
        dgid: ibv_gid {
            raw: irn_verbs::Gid::from(s.addr).0,
        },
        flow_label: s.flow_label,
        sgid_index: 0,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
    })
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    let mut attr = ibv_ah_attr::default();
    if pd.is_null() {
        return errno::null(errno::EINVAL);
    }
    // SAFETY: an allocated PD, and the caller's completion and GRH.
    if unsafe { irn_ibv_init_ah_from_wc((*pd).context, port, wc, grh, &mut attr) } != 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: as above.
    unsafe { irn_ibv_create_ah(pd, &mut attr) }
}

/// An Ethernet address for a GID: there is none to give (irn's peers are IP endpoints).
#[no_mangle]
pub unsafe extern "C" fn irn_ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    errno::EOPNOTSUPP
}

// Shared receive queues, multicast: not offered (`max_srq` and `max_mcast_grp` are 0).

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_create_srq(
    _pd: *mut ibv_pd,
    _attr: *mut ibv_srq_init_attr,
) -> *mut c_void {
    errno::null(errno::EOPNOTSUPP)
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_modify_srq(
    _srq: *mut c_void,
    _attr: *mut ibv_srq_attr,
    _mask: c_int,
) -> c_int {
    errno::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_srq(_srq: *mut c_void, _attr: *mut ibv_srq_attr) -> c_int {
    errno::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_destroy_srq(_srq: *mut c_void) -> c_int {
    errno::EOPNOTSUPP
}

/// `ops.post_srq_recv`: no SRQ exists to post to.
pub(crate) unsafe extern "C" fn post_srq_recv(
    _srq: *mut c_void,
    _wr: *mut ibv_recv_wr,
    _bad: *mut *mut ibv_recv_wr,
) -> c_int {
    errno::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_attach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    errno::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_detach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    errno::EOPNOTSUPP
}

// Names and rates.

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_wc_status_str(status: u32) -> *const std::ffi::c_char {
    static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        WC_STATUS_STR
            .iter()
            .map(|s| std::ffi::CString::new(*s).expect("no NUL"))
            .collect()
    });
    match names.get(status as usize) {
        Some(n) => n.as_ptr(),
        None => c"unknown".as_ptr(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_node_type_str(t: c_int) -> *const std::ffi::c_char {
    match t {
        1 => c"InfiniBand channel adapter".as_ptr(),
        2 => c"InfiniBand switch".as_ptr(),
        3 => c"InfiniBand router".as_ptr(),
        4 => c"iWARP NIC".as_ptr(),
        5 => c"usNIC".as_ptr(),
        6 => c"usNIC UDP".as_ptr(),
        _ => c"unknown".as_ptr(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_port_state_str(s: u32) -> *const std::ffi::c_char {
    match s {
        0 => c"PORT_NOP".as_ptr(),
        1 => c"PORT_DOWN".as_ptr(),
        2 => c"PORT_INIT".as_ptr(),
        3 => c"PORT_ARMED".as_ptr(),
        4 => c"PORT_ACTIVE".as_ptr(),
        5 => c"PORT_ACTIVE_DEFER".as_ptr(),
        _ => c"invalid state".as_ptr(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_event_type_str(e: u32) -> *const std::ffi::c_char {
    const NAMES: [&std::ffi::CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal error",
    ];
    NAMES
        .get(e as usize)
        .map_or(c"unknown".as_ptr(), |n| n.as_ptr())
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s), in the enumeration's order from 2.
const RATES: [(u32, i32, i32); 23] = [
    (2, 1, 2500),
    (3, 4, 10000),
    (4, 12, 30000),
    (5, 2, 5000),
    (6, 8, 20000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 0, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_rate_to_mult(rate: u32) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate)
        .map_or(-1, |r| if r.1 == 0 { -1 } else { r.1 })
}

#[no_mangle]
pub unsafe extern "C" fn irn_mult_to_ibv_rate(mult: c_int) -> u32 {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult != 0)
        .map_or(0, |r| r.0)
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_rate_to_mbps(rate: u32) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[no_mangle]
pub unsafe extern "C" fn irn_mbps_to_ibv_rate(mbps: c_int) -> u32 {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use irn_verbs::WcStatus;

    #[test]
    fn access_flags_follow_ibta() {
        assert_eq!(access(0x1 | 0x2 | 0x4 | 0x8), Ok(Access::ALL));
        assert_eq!(access(0), Ok(Access::LOCAL_READ));
        // Remote write without local write: IBTA C10-23.
        assert_eq!(access(0x2), Err(errno::EINVAL));
        assert_eq!(access(0x8), Err(errno::EINVAL));
        assert_eq!(access(0x10), Err(errno::EOPNOTSUPP), "MW_BIND: no windows");
        assert_eq!(
            access(1 << 12),
            Err(errno::EOPNOTSUPP),
            "a bit verbs.h does not define"
        );
        // Relaxed ordering (an optional flag) and on-demand paging change nothing here.
        assert_eq!(access(0x1 | 0x40 | (1 << 20)), Ok(Access::LOCAL_WRITE));
    }

    #[test]
    fn a_ud_senders_route_comes_from_its_grh_area() {
        let mut v4 = [0u8; 40];
        v4[20] = 0x45;
        v4[21] = 0x68; // TOS
        v4[28] = 63; // TTL
        v4[32..36].copy_from_slice(&[10, 1, 2, 3]);
        let r = grh_route(&v4).expect("IPv4");
        assert_eq!(
            r.dgid.raw,
            irn_verbs::Gid::from(std::net::IpAddr::from([10, 1, 2, 3])).0
        );
        assert_eq!((r.hop_limit, r.traffic_class), (63, 0x68));
        let mut v6 = [0u8; 40];
        v6[0] = 0x6b; // version 6, traffic class 0xb_
        v6[1] = 0x81; // traffic class _8, flow label 0x1....
        v6[2] = 0x23;
        v6[3] = 0x45;
        v6[7] = 9;
        v6[8..24].copy_from_slice(&[0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11]);
        let r = grh_route(&v6).expect("IPv6");
        assert_eq!(r.dgid.raw[..2], [0xfd, 0x99]);
        assert_eq!(
            (r.hop_limit, r.traffic_class, r.flow_label),
            (9, 0xb8, 0x12345)
        );
        assert!(grh_route(&[0u8; 40]).is_none(), "neither header");
    }

    #[test]
    fn completions_carry_verbs_numbers() {
        let w = Wc {
            wr_id: 7,
            status: WcStatus::RetryExcErr,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 64,
            imm: Some(0x0102_0304),
            invalidated_rkey: None,
            qp_num: 17,
            src_qp: None,
        };
        let c = to_c(&w);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len, c.qp_num),
            (7, 12, 129, 64, 17)
        );
        assert_eq!(c.wc_flags, wc_flags::WITH_IMM);
        assert_eq!(
            c.imm_data.to_ne_bytes(),
            [1, 2, 3, 4],
            "network order in memory"
        );
        let ud = to_c(&Wc {
            src_qp: Some(9),
            imm: None,
            ..w
        });
        assert_eq!((ud.wc_flags, ud.src_qp), (wc_flags::GRH, 9));
    }
}
