//! librdmacm (`librdmacm.so.1`): reliable connections by IP address and port, over irn's
//! connection manager ([`irn_verbs::cm`]: IBTA CM messages to QP1, with rdma_cm's service IDs
//! and addressing header, what Linux's rdma_cm speaks — so an `rping` here connects to an
//! `rping` over rxe).
//!
//! # Events
//!
//! An event channel is a pipe and a queue: each event is queued, then one byte written, so
//! `rdma_get_cm_event` blocks on the pipe as librdmacm's blocks on its device file, and a
//! program may `poll(2)` the channel's `fd`. What librdmacm does in the kernel's CM, threads
//! do here:
//!
//! - `rdma_resolve_addr` and `rdma_resolve_route` answer at once (`ADDR_RESOLVED`,
//!   `ROUTE_RESOLVED`): a GID is an IP address, and the route is the kernel's.
//! - `rdma_connect` and `rdma_accept` move the queue pair through RTR and RTS and exchange
//!   REQ / REP / RTU on a thread of the ID's, which queues `ESTABLISHED` (or `REJECTED`,
//!   with the queue pair moved to the error state, `UNREACHABLE`, `CONNECT_ERROR`);
//!   `rdma_accept` returns once the queue pair is in RTS, as librdmacm's, so a server may post
//!   at once. Event parameters are librdmacm's: a request's responder resources are the
//!   requester's initiator depth and the other way round, private data is the whole area
//!   the message carries (56 bytes of a REQ, 196 of a REP). Retry counts come from
//!   `rdma_connect`'s parameters; `rdma_accept`'s are ignored, as `rdma_accept(3)` says.
//! - `rdma_listen` starts a thread per device listened on, which queues a `CONNECT_REQUEST`
//!   with a new ID for each request.
//! - An established connection is watched by a thread of its ID, which queues `DISCONNECTED`
//!   when the peer's DREQ comes (the CM answers it with a DREP) and leaves the queue pair to
//!   the program; `rdma_disconnect` moves the queue pair to the error state (flushing its work
//!   requests, as librdmacm does), sends the DREQ and queues `DISCONNECTED` once answered.
//!
//! Destroying an ID first waits for its threads, each of which ends within the CM's retry
//! timeouts, then takes its queued events out of the channel and waits for those the program
//! holds to be acknowledged, so that no event names a freed ID. `rdma_destroy_qp` waits for
//! the threads that connect, accept or disconnect, which use the queue pair; a program that
//! destroys an ID's queue pair with `ibv_destroy_qp` while connecting is outside the
//! contract, as with librdmacm.
//!
//! # Not offered
//!
//! The UDP and IB port spaces (UD over the CM, SIDR), multicast, SRQs, ID migration, the
//! synchronous mode of a NULL channel and its helpers (`rdma_create_id` without a channel,
//! `rdma_create_ep`, `rdma_get_request`), `rdma_get_devices`, and `rdma_init_qp_attr` for
//! queue pairs the program moves itself: refused with `EOPNOTSUPP`. Of rsockets only `rpoll`
//! is exported (perftest links it), refusing with `ENOSYS`.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use irn_verbs::cm::{self, CmConfig, CmConnection, CmError, CmListener, CmRequest};
use irn_verbs::{Access, QpAttr};

use crate::abi::*;
use crate::device::{config, registry, Context};
use crate::errno;

/// A channel: the C structure, the pipe, the queue.
#[repr(C)]
struct Channel {
    c: rdma_event_channel,
    read: OwnedFd,
    write: OwnedFd,
    queue: Mutex<VecDeque<usize>>,
}

/// An event: the C structure, and the private data it points at (valid until acknowledged).
#[repr(C)]
struct Event {
    c: rdma_cm_event,
    private: Vec<u8>,
}

/// A pointer handed to a thread: the object outlives the thread (destroying it joins the
/// thread first).
#[derive(Clone, Copy)]
struct Ptr(usize);

/// What an ID is doing.
#[derive(Default)]
struct IdState {
    /// The device it is bound to (registry index), once known.
    device: Option<usize>,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    /// Listening: one listener per device.
    listeners: Vec<Arc<CmListener>>,
    /// A request this (child) ID stands for, with the listener it came through.
    request: Option<(Arc<CmListener>, CmRequest)>,
    /// The established connection; taken by `rdma_disconnect` or when the peer ends it.
    conn: Option<CmConnection>,
    /// The local ACK timeout `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)` gave.
    ack_timeout: Option<u8>,
}

/// An ID. The C structure is the program's to read (and to set `context` in), written here
/// through the cell: by the program's own calls on the ID, and — for `qp` — with the state
/// locked, which is how the ID's threads read it.
#[repr(C)]
struct Id {
    c: UnsafeCell<rdma_cm_id>,
    state: Mutex<IdState>,
    /// Set when the ID is destroyed: its threads stop.
    stop: Arc<AtomicBool>,
    /// Threads that connect, accept or disconnect: they use the queue pair.
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Threads that listen or watch a connection: they stop with the ID.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// `rdma_create_qp` made the CQs (the program gave none): they go with the queue pair.
    own_cqs: AtomicBool,
    /// Events about it handed to the program and not yet acknowledged: destroying it waits
    /// for them (`rdma_destroy_id(3)`), so no event the program holds names a freed ID.
    taken: Mutex<u32>,
    acked: std::sync::Condvar,
}

impl Id {
    /// # Safety
    /// `id` is an ID this library created and has not destroyed.
    unsafe fn from_c<'a>(id: *mut rdma_cm_id) -> &'a Id {
        // SAFETY: `c` is the first field of the repr(C) Id.
        unsafe { &*(id as *const Id) }
    }

    /// The C structure.
    fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    fn qp(&self) -> *mut ibv_qp {
        // SAFETY: reading a field of the live C structure (see the type's comment).
        unsafe { (*self.c()).qp }
    }

    fn verbs(&self) -> *mut ibv_context {
        // SAFETY: as above; set before the ID's threads start.
        unsafe { (*self.c()).verbs }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IdState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a thread of the ID's; `EAGAIN` when the system has none to give.
    fn spawn_in(
        list: &Mutex<Vec<JoinHandle<()>>>,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<(), i32> {
        let h = std::thread::Builder::new()
            .name("irn-rdma-cm".into())
            .spawn(f)
            .map_err(|_| libc::EAGAIN)?;
        list.lock().unwrap_or_else(|p| p.into_inner()).push(h);
        Ok(())
    }

    fn spawn(&self, f: impl FnOnce() + Send + 'static) -> Result<(), i32> {
        Id::spawn_in(&self.threads, f)
    }

    fn spawn_worker(&self, f: impl FnOnce() + Send + 'static) -> Result<(), i32> {
        Id::spawn_in(&self.workers, f)
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, u32> {
        self.taken.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn join_in(list: &Mutex<Vec<JoinHandle<()>>>) {
        let hs: Vec<JoinHandle<()>> =
            std::mem::take(&mut *list.lock().unwrap_or_else(|p| p.into_inner()));
        for h in hs {
            let _ = h.join();
        }
    }

    fn join_workers(&self) {
        Id::join_in(&self.workers);
    }

    fn join(&self) {
        // A worker may start a watcher: workers first.
        Id::join_in(&self.workers);
        Id::join_in(&self.threads);
    }
}

/// How long `rdma_connect` keeps trying a port nobody listens on before `REJECTED`.
const REFUSED_RETRY: Duration = Duration::from_secs(3);

fn cm_config() -> CmConfig {
    CmConfig {
        peer_port: config().port,
        ..CmConfig::default()
    }
}

/// Queues an event for `id` on its channel.
fn post(
    id: *mut rdma_cm_id,
    listen_id: *mut rdma_cm_id,
    event: u32,
    status: c_int,
    private: Vec<u8>,
    conn: rdma_conn_param,
) {
    // SAFETY: a live ID (its threads end before it is destroyed); its channel is set when
    // it is created.
    let ch = unsafe { (*Id::from_c(id).c()).channel };
    let mut ev = Box::new(Event {
        c: rdma_cm_event {
            id,
            listen_id,
            event,
            status,
            param: rdma_cm_param { conn },
        },
        private,
    });
    if !ev.private.is_empty() {
        // The boxed event keeps the bytes where they are until it is acknowledged.
        ev.c.param.conn.private_data = ev.private.as_ptr() as *const c_void;
        ev.c.param.conn.private_data_len = ev.private.len().min(255) as u8;
    }
    // SAFETY: the ID's channel, which outlives its IDs (rdma_destroy_event_channel(3)).
    let ch = unsafe { &*(ch as *const Channel) };
    let mut q = ch.queue.lock().unwrap_or_else(|p| p.into_inner());
    q.push_back(Box::into_raw(ev) as usize);
    if q.len() == 1 {
        ch.signal(true);
    }
}

fn no_param() -> rdma_conn_param {
    rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        srq: 0,
        qp_num: 0,
    }
}

/// The shared context of device `index`, opened at first use (librdmacm keeps one per
/// device for the process's life).
fn context_of(index: usize) -> *mut ibv_context {
    static CONTEXTS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    let mut v = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, c)) = v.iter().find(|(i, _)| *i == index) {
        return c as *mut ibv_context;
    }
    let entry = registry().devices[index];
    // SAFETY: a device of the registry's list.
    let ctx = unsafe {
        crate::device::irn_ibv_open_device(&entry.c as *const ibv_device as *mut ibv_device)
    };
    if !ctx.is_null() {
        v.push((index, ctx as usize));
    }
    ctx
}

/// The device bound to `ip`, if any.
fn device_with(ip: IpAddr) -> Option<usize> {
    registry().devices.iter().position(|d| d.spec.addr == ip)
}

fn sockaddr_of(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a socket address of the family it names, from the program.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                Some(SocketAddr::new(
                    IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()),
                    u16::from_be(s.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                Some(SocketAddr::new(
                    IpAddr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                ))
            }
            _ => None,
        }
    }
}

fn storage_of(a: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: a sockaddr_storage holds a sockaddr_in.
            let s = unsafe { &mut *(&mut st as *mut _ as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            // SAFETY: a sockaddr_storage holds a sockaddr_in6.
            let s = unsafe { &mut *(&mut st as *mut _ as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
        }
    }
    st
}

/// Writes the ID's route (addresses and GIDs) for the program to read.
fn set_route(id: &mut rdma_cm_id, src: Option<SocketAddr>, dst: Option<SocketAddr>) {
    if let Some(s) = src {
        id.route.addr.src_storage = storage_of(s);
        id.route.addr.ibaddr.sgid.raw = irn_verbs::Gid::from(s.ip()).0;
    }
    if let Some(d) = dst {
        id.route.addr.dst_storage = storage_of(d);
        id.route.addr.ibaddr.dgid.raw = irn_verbs::Gid::from(d.ip()).0;
    }
    id.route.addr.ibaddr.pkey = 0xffffu16.to_be();
}

impl Channel {
    /// Keeps the pipe level-triggered, with the queue locked by the caller: one byte in it
    /// while events are queued (`ready`), none once the queue is empty, so the channel's `fd`
    /// polls readable exactly when `rdma_get_cm_event` has an event to give.
    fn signal(&self, ready: bool) {
        let mut b = [1u8];
        // SAFETY: one byte from or into a local array, on the channel's own pipe; the
        // invariant above says a byte is there to read when the queue empties.
        let _ = unsafe {
            if ready {
                libc::write(self.write.as_raw_fd(), b.as_ptr() as *const c_void, 1)
            } else {
                libc::read(self.read.as_raw_fd(), b.as_mut_ptr() as *mut c_void, 1)
            }
        };
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_create_event_channel() -> *mut rdma_event_channel {
    let (read, write) = match crate::device::new_pipe() {
        Ok(p) => p,
        Err(e) => return errno::null(e.raw_os_error().unwrap_or(errno::ENOMEM)),
    };
    let ch = Box::new(Channel {
        c: rdma_event_channel {
            fd: read.as_raw_fd(),
        },
        read,
        write,
        queue: Mutex::new(VecDeque::new()),
    });
    Box::into_raw(ch) as *mut rdma_event_channel
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    if ch.is_null() {
        return;
    }
    // SAFETY: a channel rdma_create_event_channel returned; its IDs are gone but for those of
    // connection requests still queued, which the program never saw.
    let c = unsafe { &*(ch as *const Channel) };
    let pending: Vec<usize> = c
        .queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .collect();
    for e in pending {
        // SAFETY: taken out of the queue, so owned here.
        let ev = unsafe { Box::from_raw(e as *mut Event) };
        if ev.c.event == cm_event::CONNECT_REQUEST {
            // SAFETY: the request's new ID, live and unknown to the program; the channel is
            // still here for it.
            unsafe { irn_rdma_destroy_id(ev.c.id) };
        }
    }
    // SAFETY: destroyed once, nothing queued on it any more.
    drop(unsafe { Box::from_raw(ch as *mut Channel) });
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    if ch.is_null() || out.is_null() {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: a live channel.
    let c = unsafe { &*(ch as *const Channel) };
    let fd = c.c.fd;
    loop {
        {
            let mut queue = c.queue.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(ev) = queue.pop_front() {
                if queue.is_empty() {
                    c.signal(false);
                }
                // Counted against its IDs before the queue is let go: destroying an ID
                // purges the queue under this lock, then waits for what was counted.
                // SAFETY: a queued event, whose IDs are live (destroying one purges its
                // events).
                unsafe { charge(ev as *mut Event, 1) };
                drop(queue);
                // SAFETY: the caller's out pointer.
                unsafe { out.write(ev as *mut rdma_cm_event) };
                return 0;
            }
        }
        // Nothing queued: a non-blocking channel says so (EAGAIN, as librdmacm's), a
        // blocking one waits for the pipe to become readable.
        // SAFETY: reading the descriptor's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0 {
            errno::set(libc::EAGAIN);
            return -1;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of our own.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return -1;
        }
        if pfd.revents & (libc::POLLHUP | libc::POLLNVAL | libc::POLLERR) != 0 {
            // The channel was destroyed under a thread waiting on it (rping's CM thread at
            // exit): it waits on, as it would on rdma_cm's device file, without touching the
            // channel again.
            loop {
                std::thread::park();
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_ack_cm_event(ev: *mut rdma_cm_event) -> c_int {
    if ev.is_null() {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: an event rdma_get_cm_event returned, acknowledged once; its IDs wait for it.
    unsafe { charge(ev as *mut Event, -1) };
    // SAFETY: as above.
    drop(unsafe { Box::from_raw(ev as *mut Event) });
    0
}

/// Counts an event for (`+1`) or against (`-1`) the IDs it names.
///
/// # Safety
/// `ev` is an event of this library's whose IDs are live.
unsafe fn charge(ev: *mut Event, by: i32) {
    // SAFETY: the caller's contract.
    let (id, listen, kind) = unsafe { ((*ev).c.id, (*ev).c.listen_id, (*ev).c.event) };
    // A connection request counts against its listener only, as librdmacm's does: a program
    // may reject and destroy the request's new ID before acknowledging the event.
    let id = if kind == cm_event::CONNECT_REQUEST {
        std::ptr::null_mut()
    } else {
        id
    };
    for i in [id, listen] {
        if i.is_null() {
            continue;
        }
        // SAFETY: a live ID (the caller's contract).
        let i = unsafe { Id::from_c(i) };
        let mut n = i.taken();
        *n = n.saturating_add_signed(by);
        i.acked.notify_all();
    }
}

/// Takes out of `ch`'s queue the events that name `id`; frees them, and destroys the new ID
/// of a connection request that `id` was listening for (the program never saw it).
///
/// # Safety
/// `ch` is the live channel of the live ID `id`.
unsafe fn purge(ch: *mut rdma_event_channel, id: *mut rdma_cm_id) {
    // SAFETY: the caller's contract.
    let c = unsafe { &*(ch as *const Channel) };
    let gone: Vec<usize> = {
        let mut q = c.queue.lock().unwrap_or_else(|p| p.into_inner());
        let had = !q.is_empty();
        let (gone, keep): (Vec<usize>, Vec<usize>) = q.drain(..).partition(|&e| {
            // SAFETY: queued events are live boxes of this library's.
            let ev = unsafe { &(*(e as *const Event)).c };
            ev.id == id || ev.listen_id == id
        });
        q.extend(keep);
        if had && q.is_empty() {
            c.signal(false);
        }
        gone
    };
    for e in gone {
        // SAFETY: taken out of the queue above, so owned here.
        let ev = unsafe { Box::from_raw(e as *mut Event) };
        if ev.c.event == cm_event::CONNECT_REQUEST && ev.c.listen_id == id {
            // SAFETY: the request's new ID, live and unknown to the program.
            unsafe { irn_rdma_destroy_id(ev.c.id) };
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_create_id(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    if out.is_null() {
        errno::set(errno::EINVAL);
        return -1;
    }
    if ps != RDMA_PS_TCP {
        errno::set(errno::EOPNOTSUPP);
        return -1;
    }
    if registry().config.is_err() {
        errno::set(libc::ENODEV);
        return -1;
    }
    if ch.is_null() {
        // librdmacm's synchronous mode (each call waits for its own event) is not offered.
        errno::set(errno::EOPNOTSUPP);
        return -1;
    }
    let id = new_id(ch, context, std::ptr::null_mut());
    // SAFETY: the caller's out pointer.
    unsafe { out.write(id) };
    0
}

/// The IDs that exist: a pointer the program passes is checked against them, so that an ID
/// used after `rdma_destroy_id` — perftest 4.5's `-R` client does, retrying after a refused
/// connection — is refused with `EINVAL` rather than followed.
static LIVE: Mutex<std::collections::BTreeSet<usize>> =
    Mutex::new(std::collections::BTreeSet::new());

fn live(id: *mut rdma_cm_id) -> bool {
    !id.is_null()
        && LIVE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(id as usize))
}

fn new_id(
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    verbs: *mut ibv_context,
) -> *mut rdma_cm_id {
    // SAFETY: an all-zero route is its empty state (no addresses, no paths).
    let route: rdma_route = unsafe { std::mem::zeroed() };
    let id = Box::new(Id {
        c: UnsafeCell::new(rdma_cm_id {
            verbs,
            channel: ch,
            context,
            qp: std::ptr::null_mut(),
            route,
            ps: RDMA_PS_TCP,
            port_num: if verbs.is_null() { 0 } else { 1 },
            event: std::ptr::null_mut(),
            send_cq_channel: std::ptr::null_mut(),
            send_cq: std::ptr::null_mut(),
            recv_cq_channel: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            srq: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            qp_type: IBV_QPT_RC,
        }),
        state: Mutex::new(IdState::default()),
        stop: Arc::new(AtomicBool::new(false)),
        workers: Mutex::new(Vec::new()),
        threads: Mutex::new(Vec::new()),
        own_cqs: AtomicBool::new(false),
        taken: Mutex::new(0),
        acked: std::sync::Condvar::new(),
    });
    let id = Box::into_raw(id) as *mut rdma_cm_id;
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id as usize);
    id
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    if !live(id) {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: a live ID.
    let i = unsafe { Id::from_c(id) };
    i.stop.store(true, Ordering::Release);
    i.join();
    // Its threads have stopped: no event about it comes any more. Those queued go (with a
    // request's new ID); those the program holds are waited for.
    // SAFETY: its channel, set when it was created and alive while it is.
    unsafe { purge((*i.c()).channel, id) };
    let mut n = i.taken();
    while *n > 0 {
        n = i.acked.wait(n).unwrap_or_else(|p| p.into_inner());
    }
    drop(n);
    {
        let mut st = i.lock();
        // A request never accepted nor rejected is rejected, as Linux's CM does for a new ID
        // destroyed: the requester hears REJECTED at once instead of retrying its REQ.
        if let (Some((l, r)), None) = (st.request.take(), st.conn.as_ref()) {
            let _ = l.reject(&r);
        }
        // An established connection ends with a DREQ (CmConnection's drop), as Linux's CM
        // sends one for a connected ID destroyed.
        st.conn = None;
        st.listeners.clear();
        st.request = None;
    }
    // The queue pair is the program's to destroy (rdma_destroy_qp or ibv_destroy_qp), as
    // with librdmacm; the CQs rdma_create_qp made for it go with the ID.
    // SAFETY: its threads have ended; the CQs are the ID's own.
    unsafe { destroy_own_cqs(i) };
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(id as usize));
    // SAFETY: destroyed once (no longer live); its threads have ended.
    drop(unsafe { Box::from_raw(id as *mut Id) });
    0
}

fn fail(e: i32) -> c_int {
    errno::set(e);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    let Some(mut a) = sockaddr_of(addr) else {
        return fail(libc::EAFNOSUPPORT);
    };
    let device = if a.ip().is_unspecified() {
        None
    } else {
        match device_with(a.ip()) {
            Some(d) => Some(d),
            None => return fail(libc::EADDRNOTAVAIL),
        }
    };
    if a.port() == 0 {
        // An ephemeral port, as the kernel would choose one.
        a.set_port(32768 + (irn_verbs::random_psn() % 28000) as u16);
    }
    // SAFETY: a live ID; binding is the program's call, before any thread of the ID's.
    let i = unsafe { Id::from_c(id) };
    // SAFETY: as above: the program's own structure, written by its call.
    let c = unsafe { &mut *i.c() };
    if let Some(d) = device {
        c.verbs = context_of(d);
        c.port_num = 1;
    }
    set_route(c, Some(a), None);
    let mut st = i.lock();
    st.device = device;
    st.src = Some(a);
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    let Some(dst) = sockaddr_of(dst) else {
        return fail(libc::EAFNOSUPPORT);
    };
    // SAFETY: a live ID.
    let i = unsafe { Id::from_c(id) };
    let bound = i.lock().src;
    let src = sockaddr_of(src).or(bound);
    let devices = &registry().devices;
    let device = match src.map(|s| s.ip()).filter(|ip| !ip.is_unspecified()) {
        Some(ip) => device_with(ip),
        None => device_with(dst.ip()).or_else(|| {
            devices
                .iter()
                .position(|d| d.spec.addr.is_ipv4() == dst.is_ipv4())
        }),
    };
    let Some(device) = device else {
        post(
            id,
            std::ptr::null_mut(),
            cm_event::ADDR_ERROR,
            -libc::EADDRNOTAVAIL,
            Vec::new(),
            no_param(),
        );
        return 0;
    };
    let src = SocketAddr::new(devices[device].spec.addr, src.map_or(0, |s| s.port()));
    // SAFETY: the program's own structure, written by its call (before the ID connects).
    let c = unsafe { &mut *i.c() };
    c.verbs = context_of(device);
    c.port_num = 1;
    set_route(c, Some(src), Some(dst));
    {
        let mut st = i.lock();
        st.device = Some(device);
        st.src = Some(src);
        st.dst = Some(dst);
    }
    post(
        id,
        std::ptr::null_mut(),
        cm_event::ADDR_RESOLVED,
        0,
        Vec::new(),
        no_param(),
    );
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    // SAFETY: a live ID.
    let resolved = unsafe { Id::from_c(id) }.lock().dst.is_some();
    if !resolved {
        return fail(errno::EINVAL);
    }
    post(
        id,
        std::ptr::null_mut(),
        cm_event::ROUTE_RESOLVED,
        0,
        Vec::new(),
        no_param(),
    );
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    if !live(id) || attr.is_null() {
        return fail(errno::EINVAL);
    }
    // SAFETY: a live ID, configured by the program's call.
    let i = unsafe { Id::from_c(id) };
    if i.verbs().is_null() {
        return fail(errno::EINVAL);
    }
    let Some(device) = i.lock().device else {
        return fail(errno::EINVAL);
    };
    // SAFETY: the caller's attributes; the objects made here are the ID's; its C structure
    // is written by this call of the program's (`qp` with the state locked).
    unsafe {
        let c = i.c();
        let pd = if pd.is_null() {
            (*c).pd = default_pd(device, (*c).verbs);
            (*c).pd
        } else {
            pd
        };
        if pd.is_null() {
            return -1;
        }
        let a = &mut *attr;
        // As librdmacm's ucma_create_cqs: a CQ each for sends and receives the program did not
        // give, each with a completion channel of its own (`id->send_cq_channel`,
        // `id->recv_cq_channel`, what rdma_verbs.h's rdma_get_send_comp and
        // rdma_get_recv_comp wait on), the ID as their context.
        for (want, depth, cq_out, ch_out) in [
            (
                a.send_cq.is_null(),
                a.cap.max_send_wr,
                &raw mut (*c).send_cq,
                &raw mut (*c).send_cq_channel,
            ),
            (
                a.recv_cq.is_null(),
                a.cap.max_recv_wr,
                &raw mut (*c).recv_cq,
                &raw mut (*c).recv_cq_channel,
            ),
        ] {
            if !want {
                continue;
            }
            let ch = crate::objects::irn_ibv_create_comp_channel((*c).verbs);
            if ch.is_null() {
                return -1;
            }
            let cq = crate::objects::irn_ibv_create_cq(
                (*c).verbs,
                depth.max(1) as c_int,
                id as *mut c_void,
                ch,
                0,
            );
            if cq.is_null() {
                crate::objects::irn_ibv_destroy_comp_channel(ch);
                return -1;
            }
            *cq_out = cq;
            *ch_out = ch;
            i.own_cqs.store(true, Ordering::Release);
        }
        if a.send_cq.is_null() {
            a.send_cq = (*c).send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = (*c).recv_cq;
        }
        let qp = crate::qp::irn_ibv_create_qp(pd, attr);
        if qp.is_null() {
            return -1;
        }
        // INIT, as librdmacm leaves a queue pair it creates: receives may be posted before
        // the connection is made.
        let mut init = ibv_qp_attr {
            qp_state: 1,
            qp_access_flags: 0x2 | 0x4 | 0x8,
            port_num: 1,
            ..ibv_qp_attr::default()
        };
        let m = mask::STATE | mask::ACCESS_FLAGS | mask::PKEY_INDEX | mask::PORT;
        let r = crate::qp::irn_ibv_modify_qp(qp, &mut init, m as c_int);
        if r != 0 {
            crate::qp::irn_ibv_destroy_qp(qp);
            return fail(r);
        }
        let _st = i.lock();
        (*c).qp = qp;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_create_qp_ex(_id: *mut rdma_cm_id, _attr: *mut c_void) -> c_int {
    fail(errno::EOPNOTSUPP)
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_qp(id: *mut rdma_cm_id) {
    if !live(id) {
        return;
    }
    // SAFETY: a live ID.
    let i = unsafe { Id::from_c(id) };
    // Its connecting threads use the queue pair without the lock: they finish first.
    i.join_workers();
    let qp = {
        let _st = i.lock();
        // SAFETY: the `qp` field, written with the state locked.
        unsafe { std::ptr::replace(&raw mut (*i.c()).qp, std::ptr::null_mut()) }
    };
    if !qp.is_null() {
        // SAFETY: the queue pair rdma_create_qp made.
        unsafe { crate::qp::irn_ibv_destroy_qp(qp) };
    }
    // SAFETY: the ID's own CQs, their queue pair gone.
    unsafe { destroy_own_cqs(i) };
}

/// Destroys the CQs `rdma_create_qp` made for the ID, if it made any.
///
/// # Safety
/// No queue pair of the ID's uses them any more.
unsafe fn destroy_own_cqs(i: &Id) {
    if !i.own_cqs.swap(false, Ordering::AcqRel) {
        return;
    }
    // SAFETY: the caller's contract; the fields are written by the program's calls. A CQ the
    // program gave is not the ID's: only those with the ID's own channels are destroyed.
    unsafe {
        let c = i.c();
        for (cq, ch) in [
            (&raw mut (*c).send_cq, &raw mut (*c).send_cq_channel),
            (&raw mut (*c).recv_cq, &raw mut (*c).recv_cq_channel),
        ] {
            if (*ch).is_null() {
                continue;
            }
            crate::objects::irn_ibv_destroy_cq(*cq);
            crate::objects::irn_ibv_destroy_comp_channel(*ch);
            *cq = std::ptr::null_mut();
            *ch = std::ptr::null_mut();
        }
    }
}

/// The protection domain of device `index` that `rdma_create_qp` uses when the program gives
/// none (librdmacm keeps one per device for the process's life).
fn default_pd(index: usize, ctx: *mut ibv_context) -> *mut ibv_pd {
    static PDS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    let mut v = PDS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, pd)) = v.iter().find(|(i, _)| *i == index) {
        return pd as *mut ibv_pd;
    }
    // SAFETY: the device's open context.
    let pd = unsafe { crate::objects::irn_ibv_alloc_pd(ctx) };
    if !pd.is_null() {
        v.push((index, pd as usize));
    }
    pd
}

/// The local ACK timeout code Linux's rdma_cm gives a RoCE queue pair: its path's packet
/// lifetime (`CMA_IBOE_PACKET_LIFETIME`, 16) plus one (`cm_init_av_by_path`), 4.096 µs × 2^17
/// ≈ 0.54 s per try — not irn-verbs' default 14 (67 ms), which a peer slowed for half a second
/// (an emulated guest on a loaded host) exhausts in seven tries.
const CM_ACK_TIMEOUT: u8 = 17;

/// The queue pair attributes a connection asks for: the device's MTU, all remote rights,
/// rdma_cm's ACK timeout (or the one `rdma_set_option` set), and what the program's
/// parameters say. Retry counts are taken from `rdma_connect`'s parameters only (`active`):
/// `rdma_accept(3)` ignores them, the passive side keeps irn's (7 and 7).
fn conn_attr(
    device: usize,
    p: Option<&rdma_conn_param>,
    active: bool,
    ack_timeout: Option<u8>,
) -> QpAttr {
    let mut a = QpAttr {
        access: Access::REMOTE_WRITE
            .with(Access::REMOTE_READ)
            .with(Access::REMOTE_ATOMIC),
        path_mtu: registry().devices[device].mtu,
        timeout: ack_timeout.unwrap_or(CM_ACK_TIMEOUT),
        ..QpAttr::default()
    };
    if let Some(p) = p {
        if p.responder_resources > 0 {
            a.max_dest_rd_atomic = p.responder_resources.min(16);
        }
        if p.initiator_depth > 0 {
            a.max_rd_atomic = p.initiator_depth.min(16);
        }
        if active {
            a.retry_cnt = p.retry_count.min(7);
            a.rnr_retry = p.rnr_retry_count.min(7);
        }
    }
    a
}

/// Private data as librdmacm reports it: the whole area the message carries (56 bytes of a
/// REQ after rdma_cm's header, 196 of a REP), zeros after what the peer gave.
fn padded(mut data: Vec<u8>, area: usize) -> Vec<u8> {
    data.resize(data.len().max(area), 0);
    data
}

/// What `rdma_connect` or `rdma_accept` offers: the ID must have a queue pair
/// `rdma_create_qp` made (one the program made itself, named by `qp_num`, is not connected
/// here), and its private data must fit the message's `max` bytes.
fn offer(i: &Id, p: Option<&rdma_conn_param>, max: usize) -> Result<Vec<u8>, i32> {
    if i.qp().is_null() {
        return Err(errno::EOPNOTSUPP);
    }
    let private = private_of(p);
    if private.len() > max {
        return Err(errno::EINVAL);
    }
    Ok(private)
}

fn private_of(p: Option<&rdma_conn_param>) -> Vec<u8> {
    match p {
        Some(p) if !p.private_data.is_null() && p.private_data_len > 0 => {
            // SAFETY: the program's private data of the length it gives.
            unsafe {
                std::slice::from_raw_parts(p.private_data as *const u8, p.private_data_len as usize)
            }
            .to_vec()
        }
        _ => Vec::new(),
    }
}

/// What an established connection's event carries.
fn established_param(attr: &QpAttr, remote_qpn: u32) -> rdma_conn_param {
    rdma_conn_param {
        responder_resources: attr.max_dest_rd_atomic,
        initiator_depth: attr.max_rd_atomic,
        retry_count: attr.retry_cnt,
        rnr_retry_count: attr.rnr_retry,
        qp_num: remote_qpn,
        ..no_param()
    }
}

/// After `conn` is made: the queue pair's C state follows, the connection is kept, a thread
/// watches it, and `ESTABLISHED` is queued.
fn established(idp: Ptr, conn: CmConnection, attr: &QpAttr, area: usize) {
    let id = idp.0 as *mut rdma_cm_id;
    // SAFETY: a live ID (this runs on one of its threads).
    let i = unsafe { Id::from_c(id) };
    let param = established_param(attr, conn.remote_qpn());
    // The active side reports the REP's private data; the passive side's event carries none.
    let private = if area > 0 {
        padded(conn.private_data().to_vec(), area)
    } else {
        Vec::new()
    };
    {
        let st = &mut *i.lock();
        st.conn = Some(conn);
        // The request is answered: its listener is no longer held for it (a listening ID
        // destroyed now frees its port).
        st.request = None;
        if !i.qp().is_null() {
            // SAFETY: the ID's queue pair, which cannot go while the state is locked.
            unsafe { crate::qp::refresh_state(i.qp()) };
        }
    }
    post(
        id,
        std::ptr::null_mut(),
        cm_event::ESTABLISHED,
        0,
        private,
        param,
    );
    let stop = i.stop.clone();
    // Without a watcher the peer's DREQ is still answered (by the device's CM agent); only
    // the DISCONNECTED event would not come.
    let _ = i.spawn(move || watch(idp, stop));
}

/// Watches an established connection until the peer ends it (`DISCONNECTED`), the program
/// disconnects (the connection is taken), or the ID goes.
fn watch(idp: Ptr, stop: Arc<AtomicBool>) {
    let id = idp.0 as *mut rdma_cm_id;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(5));
        // SAFETY: a live ID (destroying it joins this thread).
        let i = unsafe { Id::from_c(id) };
        let mut st = i.lock();
        let Some(conn) = st.conn.as_mut() else { return };
        if let Ok(true) = conn.poll_disconnect() {
            // The queue pair is left as it is: the program moves it (rdma_disconnect), as
            // with librdmacm, and may have destroyed it already.
            st.conn = None;
            drop(st);
            post(
                id,
                std::ptr::null_mut(),
                cm_event::DISCONNECTED,
                0,
                Vec::new(),
                no_param(),
            );
            return;
        }
    }
}

/// Moves the ID's queue pair to the error state (with the ID's state locked by the caller).
fn qp_to_error(i: &Id) {
    if i.qp().is_null() {
        return;
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..ibv_qp_attr::default()
    };
    // SAFETY: the ID's queue pair, which cannot go while its state is locked.
    unsafe { crate::qp::irn_ibv_modify_qp(i.qp(), &mut a, mask::STATE as c_int) };
}

/// The event and status a failed connection attempt ends in.
fn failure(e: &CmError) -> (u32, c_int) {
    match e {
        CmError::Rejected(reason) => (cm_event::REJECTED, c_int::from(*reason)),
        CmError::Timeout { .. } | CmError::Idle(_) => (cm_event::UNREACHABLE, -libc::ETIMEDOUT),
        CmError::Verbs(v) => (cm_event::CONNECT_ERROR, -errno::of(v)),
        _ => (cm_event::CONNECT_ERROR, -errno::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_connect(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    // SAFETY: a live ID; the caller's parameters (or NULL).
    let (i, p) = unsafe { (Id::from_c(id), param.as_ref()) };
    let (device, dst) = {
        let st = i.lock();
        match (st.device, st.dst) {
            (Some(d), Some(t)) => (d, t),
            _ => return fail(errno::EINVAL),
        }
    };
    let private = match offer(i, p, 56) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let attr = conn_attr(device, p, true, i.lock().ack_timeout);
    // SAFETY: the device's open context.
    let dev = unsafe { Context::from_c(i.verbs()) }.dev.clone();
    // SAFETY: the ID's queue pair, alive while the program's call runs.
    if unsafe { crate::qp::rc_of(i.qp()) }.is_none() {
        // A UD queue pair takes no connection (the UDP port space is not offered).
        return fail(errno::EINVAL);
    }
    let (idp, qpp) = (Ptr(id as usize), Ptr(i.qp() as usize));
    let spawned = i.spawn_worker(move || {
        // SAFETY: the ID's queue pair; destroying it (or the ID) waits for this thread.
        let Some(qp) = (unsafe { crate::qp::rc_of(qpp.0 as *mut ibv_qp) }) else {
            return;
        };
        // A REQ refused because nobody listens on the port yet (REJ reason 8) is sent again
        // for a while before the refusal is reported: addresses and routes resolve here at
        // once, so a client reaches its server sooner than through a kernel's ARP and path
        // queries — before perftest's -R server has made the data connections' listener
        // (perftest's own retry then reuses destroyed IDs).
        let until = std::time::Instant::now() + REFUSED_RETRY;
        let got = loop {
            match cm::connect(&dev, qp, &attr, dst, &private, cm_config()) {
                Err(CmError::Rejected(8)) if std::time::Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => break other,
            }
        };
        match got {
            Ok(conn) => established(idp, conn, &attr, 196),
            Err(e) => refused(idp, &e),
        }
    });
    match spawned {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// A connection attempt that failed: the queue pair goes to the error state, as librdmacm
/// moves it on a rejection, and the event says why.
fn refused(idp: Ptr, e: &CmError) {
    let id = idp.0 as *mut rdma_cm_id;
    // SAFETY: a live ID (this runs on one of its threads).
    let i = unsafe { Id::from_c(id) };
    {
        let _st = i.lock();
        qp_to_error(i);
    }
    let (event, status) = failure(e);
    post(
        id,
        std::ptr::null_mut(),
        event,
        status,
        Vec::new(),
        no_param(),
    );
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    // SAFETY: a live ID.
    let i = unsafe { Id::from_c(id) };
    let (device, port) = {
        let st = i.lock();
        match st.src {
            Some(s) => (st.device, s.port()),
            None => return fail(errno::EINVAL),
        }
    };
    let devices: Vec<usize> = match device {
        Some(d) => vec![d],
        None => (0..registry().devices.len()).collect(),
    };
    let mut listeners = Vec::new();
    for d in devices {
        let ctx = context_of(d);
        if ctx.is_null() {
            return -1;
        }
        // SAFETY: the device's open context.
        let dev = unsafe { Context::from_c(ctx) }.dev.clone();
        match CmListener::bind(&dev, port, cm_config()) {
            Ok(l) => listeners.push((d, Arc::new(l))),
            Err(CmError::PortInUse(_)) => return fail(libc::EADDRINUSE),
            Err(CmError::Verbs(e)) => return fail(errno::of(&e)),
            Err(_) => return fail(errno::EINVAL),
        }
    }
    i.lock().listeners = listeners.iter().map(|(_, l)| l.clone()).collect();
    for (d, l) in listeners {
        let stop = i.stop.clone();
        let idp = Ptr(id as usize);
        if let Err(e) = i.spawn(move || accept_requests(idp, d, l, stop)) {
            return fail(e);
        }
    }
    0
}

/// A listening ID's thread for one device: each request becomes a new ID and a
/// `CONNECT_REQUEST` event.
fn accept_requests(idp: Ptr, device: usize, l: Arc<CmListener>, stop: Arc<AtomicBool>) {
    let parent = idp.0 as *mut rdma_cm_id;
    while !stop.load(Ordering::Acquire) {
        let req = match l.get_request(Duration::from_millis(20)) {
            Ok(r) => r,
            Err(CmError::Idle(_)) => continue,
            Err(_) => return,
        };
        // SAFETY: the listening ID, alive while this thread runs.
        let p = unsafe { Id::from_c(parent) };
        // SAFETY: the parent's channel and context, set before it listened.
        let (channel, context) = unsafe { ((*p.c()).channel, (*p.c()).context) };
        let child = new_id(channel, context, context_of(device));
        // SAFETY: the new ID, not yet known to the program.
        let c = unsafe { Id::from_c(child) };
        let src = p
            .lock()
            .src
            .map(|s| SocketAddr::new(registry().devices[device].spec.addr, s.port()));
        let dst = SocketAddr::new(req.peer, req.cma.as_ref().map_or(0, |h| h.src_port));
        // SAFETY: as above.
        set_route(unsafe { &mut *c.c() }, src, Some(dst));
        // As librdmacm reports them: from this side, the requester's initiator depth is the
        // reads it may ask of us (our responder resources), and the other way round.
        let param = rdma_conn_param {
            responder_resources: req.initiator_depth(),
            initiator_depth: req.responder_resources(),
            retry_count: req.retry_count(),
            rnr_retry_count: req.rnr_retry_count(),
            qp_num: req.qpn(),
            ..no_param()
        };
        let private = padded(req.private_data.clone(), 56);
        {
            let mut st = c.lock();
            st.device = Some(device);
            st.src = src;
            st.dst = Some(dst);
            st.request = Some((l.clone(), req));
        }
        post(child, parent, cm_event::CONNECT_REQUEST, 0, private, param);
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_accept(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    // SAFETY: a live ID; the caller's parameters (or NULL).
    let (i, p) = unsafe { (Id::from_c(id), param.as_ref()) };
    let (device, listener, request) = {
        let st = i.lock();
        match (&st.request, st.device) {
            (Some((l, r)), Some(d)) => (d, l.clone(), r.clone()),
            _ => return fail(errno::EINVAL),
        }
    };
    let private = match offer(i, p, 196) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let attr = conn_attr(device, p, false, i.lock().ack_timeout);
    // SAFETY: the ID's queue pair, alive while the program's call runs.
    let Some(rc) = (unsafe { crate::qp::rc_of(i.qp()) }) else {
        return fail(errno::EINVAL);
    };
    let (idp, qpp) = (Ptr(id as usize), Ptr(i.qp() as usize));
    let done = Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    let spawned = i.spawn_worker(move || {
        // SAFETY: the ID's queue pair; destroying it (or the ID) waits for this thread.
        let Some(qp) = (unsafe { crate::qp::rc_of(qpp.0 as *mut ibv_qp) }) else {
            return;
        };
        let got = listener.accept(&request, qp, &attr, &private);
        finished.store(true, Ordering::Release);
        match got {
            Ok(conn) => established(idp, conn, &attr, 0),
            Err(e) => refused(idp, &e),
        }
    });
    if let Err(e) = spawned {
        return fail(e);
    }
    // librdmacm moves the queue pair to RTR and RTS before rdma_accept returns (a server may
    // post at once); the thread does that first, then sends the REP and waits for the RTU.
    let until = std::time::Instant::now() + Duration::from_secs(2);
    while rc.state() != irn_verbs::QpState::Rts
        && !done.load(Ordering::Acquire)
        && std::time::Instant::now() < until
    {
        std::thread::sleep(Duration::from_micros(50));
    }
    let _st = i.lock();
    // SAFETY: the ID's queue pair, alive while the program's call runs; written with the
    // state locked, as the ID's threads write it.
    unsafe { crate::qp::refresh_state(i.qp()) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_reject(
    id: *mut rdma_cm_id,
    _private: *const c_void,
    _len: u8,
) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    // SAFETY: a live ID.
    let i = unsafe { Id::from_c(id) };
    let Some((l, r)) = i.lock().request.take() else {
        return fail(errno::EINVAL);
    };
    match l.reject(&r) {
        Ok(()) => 0,
        Err(_) => fail(libc::EIO),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    // SAFETY: a live ID.
    let i = unsafe { Id::from_c(id) };
    let conn = {
        let mut st = i.lock();
        let c = st.conn.take();
        qp_to_error(i);
        c
    };
    // Already ended (the peer's DREQ came first): nothing to send.
    let Some(conn) = conn else { return 0 };
    let idp = Ptr(id as usize);
    let spawned = i.spawn_worker(move || {
        let _ = conn.disconnect();
        post(
            idp.0 as *mut rdma_cm_id,
            std::ptr::null_mut(),
            cm_event::DISCONNECTED,
            0,
            Vec::new(),
            no_param(),
        );
    });
    match spawned {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    if !live(id) {
        return fail(errno::EINVAL);
    }
    // RDMA_OPTION_ID_ACK_TIMEOUT (a u8): the queue pairs' local ACK timeout from then on.
    if level == 0 && name == 3 {
        if val.is_null() || len != 1 {
            return fail(errno::EINVAL);
        }
        // SAFETY: the caller's one byte; a live ID.
        let t = unsafe { *(val as *const u8) };
        if t > 31 {
            return fail(errno::EINVAL);
        }
        // SAFETY: as above.
        unsafe { Id::from_c(id) }.lock().ack_timeout = Some(t);
        return 0;
    }
    // RDMA_OPTION_ID: TOS, REUSEADDR, AFONLY — accepted; the runtime's sockets are its own.
    if level == 0 && (0..=2).contains(&name) {
        return 0;
    }
    fail(libc::ENOSYS)
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_event_str(e: u32) -> *const c_char {
    static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        RDMA_CM_EVENT_NAMES
            .iter()
            .map(|s| std::ffi::CString::new(*s).expect("no NUL"))
            .collect()
    });
    names
        .get(e as usize)
        .map_or(c"UNKNOWN EVENT".as_ptr(), |n| n.as_ptr())
}

/// `rdma_getaddrinfo(3)` for the TCP port space: the system resolver's answer as the
/// source (`RAI_PASSIVE`) or destination address.
#[no_mangle]
pub unsafe extern "C" fn irn_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    if res.is_null() || (node.is_null() && service.is_null()) {
        return fail(errno::EINVAL);
    }
    // SAFETY: the caller's hints, or NULL.
    let h = unsafe { hints.as_ref() };
    let flags = h.map_or(0, |h| h.ai_flags);
    if h.is_some_and(|h| h.ai_port_space != 0 && h.ai_port_space as u32 != RDMA_PS_TCP) {
        return fail(errno::EOPNOTSUPP);
    }
    // SAFETY: an all-zero addrinfo is an empty hint.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    ai.ai_family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
    ai.ai_socktype = libc::SOCK_STREAM;
    ai.ai_flags = if flags & RAI_PASSIVE != 0 {
        libc::AI_PASSIVE
    } else {
        0
    } | if flags & RAI_NUMERICHOST != 0 {
        libc::AI_NUMERICHOST
    } else {
        0
    };
    let mut out: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings (or NULL) from the caller; `out` receives a list freed
    // below.
    let r = unsafe { libc::getaddrinfo(node, service, &ai, &mut out) };
    if r != 0 || out.is_null() {
        return fail(libc::ENOENT);
    }
    // SAFETY: the first entry of the list getaddrinfo returned.
    let first = unsafe { &*out };
    let addr = sockaddr_of(first.ai_addr);
    // SAFETY: the list, freed once.
    unsafe { libc::freeaddrinfo(out) };
    let Some(addr) = addr else {
        return fail(libc::EAFNOSUPPORT);
    };
    // An active side's source the hints name (perftest's --source_ip).
    let hint_src = h
        .filter(|_| flags & RAI_PASSIVE == 0)
        .and_then(|h| sockaddr_of(h.ai_src_addr));
    let st = Box::new(storage_of(addr));
    let len = if addr.is_ipv4() {
        size_of::<libc::sockaddr_in>()
    } else {
        size_of::<libc::sockaddr_in6>()
    } as libc::socklen_t;
    let sa = Box::into_raw(st) as *mut libc::sockaddr;
    let passive = flags & RAI_PASSIVE != 0;
    let (src_sa, src_len) = match hint_src {
        Some(src) => {
            let l = if src.is_ipv4() {
                size_of::<libc::sockaddr_in>()
            } else {
                size_of::<libc::sockaddr_in6>()
            } as libc::socklen_t;
            (
                Box::into_raw(Box::new(storage_of(src))) as *mut libc::sockaddr,
                l,
            )
        }
        None => (std::ptr::null_mut(), 0),
    };
    let info = Box::new(rdma_addrinfo {
        ai_flags: flags,
        ai_family: if addr.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        },
        ai_qp_type: IBV_QPT_RC as c_int,
        ai_port_space: RDMA_PS_TCP as c_int,
        ai_src_len: if passive { len } else { src_len },
        ai_dst_len: if passive { 0 } else { len },
        ai_src_addr: if passive { sa } else { src_sa },
        ai_dst_addr: if passive { std::ptr::null_mut() } else { sa },
        ai_src_canonname: std::ptr::null_mut(),
        ai_dst_canonname: std::ptr::null_mut(),
        ai_route_len: 0,
        ai_route: std::ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: std::ptr::null_mut(),
        ai_next: std::ptr::null_mut(),
    });
    // SAFETY: the caller's out pointer.
    unsafe { res.write(Box::into_raw(info)) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut cur = res;
    while !cur.is_null() {
        // SAFETY: a list rdma_getaddrinfo made, freed once: its entries and addresses are
        // boxes of this library's.
        let ai = unsafe { Box::from_raw(cur) };
        for sa in [ai.ai_src_addr, ai.ai_dst_addr] {
            if !sa.is_null() {
                // SAFETY: a boxed sockaddr_storage made above.
                drop(unsafe { Box::from_raw(sa as *mut libc::sockaddr_storage) });
            }
        }
        cur = ai.ai_next;
    }
}

/// The port of a socket address stored in an ID's route, network order (as librdmacm
/// returns it).
fn port_of(st: &libc::sockaddr_storage) -> u16 {
    sockaddr_of(st as *const libc::sockaddr_storage as *const libc::sockaddr)
        .map_or(0, |a| a.port().to_be())
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    if !live(id) {
        return 0;
    }
    // SAFETY: a live ID's route, written by the program's calls.
    port_of(unsafe { &(*Id::from_c(id).c()).route.addr.src_storage })
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    if !live(id) {
        return 0;
    }
    // SAFETY: as above.
    port_of(unsafe { &(*Id::from_c(id).c()).route.addr.dst_storage })
}

// The rest of librdmacm's API that irn does not offer: the synchronous helpers built on a
// NULL channel, device enumeration, multicast, SRQs, ID migration. Each refuses.
macro_rules! refuse {
    ($($name:ident($($arg:ident),*)),* $(,)?) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: *mut c_void),*) -> c_int {
            $(let _ = $arg;)*
            fail(errno::EOPNOTSUPP)
        }
    )*};
}

refuse! {
    irn_rdma_create_ep(id, res, pd, attr),
    irn_rdma_get_request(listen, id),
    irn_rdma_migrate_id(id, channel),
    irn_rdma_notify(id, event),
    irn_rdma_join_multicast(id, addr, context),
    irn_rdma_leave_multicast(id, addr),
    irn_rdma_create_srq(id, pd, attr),
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_ep(_id: *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_srq(_id: *mut c_void) {}

/// No device list: programs open devices through libibverbs (`rdma_get_devices` returns NULL,
/// as it does when no device is present).
#[no_mangle]
pub unsafe extern "C" fn irn_rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    if !num.is_null() {
        // SAFETY: the caller's out pointer.
        unsafe { num.write(0) };
    }
    errno::null(errno::EOPNOTSUPP)
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_free_devices(_list: *mut *mut ibv_context) {}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_init_qp_attr(
    _id: *mut rdma_cm_id,
    _attr: *mut ibv_qp_attr,
    _mask: *mut c_int,
) -> c_int {
    fail(errno::EOPNOTSUPP)
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_establish(_id: *mut rdma_cm_id) -> c_int {
    fail(errno::EOPNOTSUPP)
}

/// rsockets are not offered.
#[no_mangle]
pub unsafe extern "C" fn irn_rpoll(_fds: *mut c_void, _n: c_int, _timeout: c_int) -> c_int {
    fail(libc::ENOSYS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip() {
        for a in ["127.0.0.2:7174", "[fd00::1]:20079"] {
            let a: SocketAddr = a.parse().expect("addr");
            let st = storage_of(a);
            assert_eq!(
                sockaddr_of(&st as *const _ as *const libc::sockaddr),
                Some(a)
            );
        }
        assert_eq!(sockaddr_of(std::ptr::null()), None);
    }

    /// The channel's descriptor polls readable exactly while events wait, also after an ID's
    /// events are dropped with it; events come in order, and an event held by the program
    /// is counted against its ID until acknowledged.
    #[test]
    fn the_channel_is_readable_exactly_while_events_wait() {
        use std::ptr::null_mut as null;
        // SAFETY: the library's own calls, on objects this test makes and destroys.
        unsafe {
            let ch = irn_rdma_create_event_channel();
            assert!(!ch.is_null());
            let fd = (*ch).fd;
            let readable = || {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                libc::poll(&mut p, 1, 0) == 1
            };
            let mut id: *mut rdma_cm_id = null();
            assert_eq!(irn_rdma_create_id(ch, &mut id, null(), RDMA_PS_TCP), 0);
            assert!(!readable());
            post(
                id,
                null(),
                cm_event::ADDR_RESOLVED,
                0,
                Vec::new(),
                no_param(),
            );
            post(
                id,
                null(),
                cm_event::ROUTE_RESOLVED,
                0,
                Vec::new(),
                no_param(),
            );
            assert!(readable());
            let mut ev: *mut rdma_cm_event = null();
            assert_eq!(irn_rdma_get_cm_event(ch, &mut ev), 0);
            assert_eq!((*ev).event, cm_event::ADDR_RESOLVED);
            assert!(readable(), "one more waits");
            assert_eq!(*Id::from_c(id).taken(), 1, "held by the program");
            assert_eq!(irn_rdma_ack_cm_event(ev), 0);
            assert_eq!(*Id::from_c(id).taken(), 0);
            assert_eq!(irn_rdma_get_cm_event(ch, &mut ev), 0);
            assert_eq!((*ev).event, cm_event::ROUTE_RESOLVED);
            assert!(!readable(), "none left");
            assert_eq!(irn_rdma_ack_cm_event(ev), 0);
            // Destroying the ID drops what is queued for it, and the channel goes quiet.
            post(
                id,
                null(),
                cm_event::ADDR_RESOLVED,
                0,
                Vec::new(),
                no_param(),
            );
            assert!(readable());
            assert_eq!(irn_rdma_destroy_id(id), 0);
            assert!(!readable());
            assert!(!live(id));
            // A non-blocking channel with nothing queued says so.
            libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
            assert_eq!(irn_rdma_get_cm_event(ch, &mut ev), -1);
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EAGAIN)
            );
            irn_rdma_destroy_event_channel(ch);
        }
    }

    #[test]
    fn failures_become_librdmacms_events() {
        assert_eq!(failure(&CmError::Rejected(28)), (cm_event::REJECTED, 28));
        assert_eq!(
            failure(&CmError::Timeout {
                what: "REQ",
                tries: 9
            }),
            (cm_event::UNREACHABLE, -libc::ETIMEDOUT)
        );
        // SAFETY: name lookups, returning static strings.
        let name = |e| unsafe { std::ffi::CStr::from_ptr(irn_rdma_event_str(e)) };
        assert_eq!(
            name(cm_event::ESTABLISHED).to_str(),
            Ok("RDMA_CM_EVENT_ESTABLISHED")
        );
        assert_eq!(name(99).to_str(), Ok("UNKNOWN EVENT"));
    }
}
