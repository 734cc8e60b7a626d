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
//! # Layout
//!
//! This module holds the IDs and their threads' bookkeeping, creating and destroying them;
//! `events` the channels and the event accounting; `addr` addresses, binding, resolution and
//! `rdma_getaddrinfo`; `conn` queue pairs and the connection's life (connect, listen, accept,
//! reject, disconnect); `unoffered` the calls irn refuses.
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

mod addr;
mod conn;
mod events;
mod unoffered;

use addr::*;
use conn::*;
use events::*;

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
            post_bare(id, cm_event::ADDR_RESOLVED, 0);
            post_bare(id, cm_event::ROUTE_RESOLVED, 0);
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
            post_bare(id, cm_event::ADDR_RESOLVED, 0);
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
