//! Connections: the queue pair `rdma_create_qp` makes, and connecting, listening, accepting,
//! rejecting and disconnecting over irn's CM on threads of the ID.

use super::*;

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
pub(super) unsafe fn destroy_own_cqs(i: &Id) {
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
pub(super) fn default_pd(index: usize, ctx: *mut ibv_context) -> *mut ibv_pd {
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
pub(super) const CM_ACK_TIMEOUT: u8 = 17;

/// The queue pair attributes a connection asks for: the device's MTU, all remote rights,
/// rdma_cm's ACK timeout (or the one `rdma_set_option` set), and what the program's
/// parameters say. Retry counts are taken from `rdma_connect`'s parameters only (`active`):
/// `rdma_accept(3)` ignores them, the passive side keeps irn's (7 and 7).
pub(super) fn conn_attr(
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
pub(super) fn padded(mut data: Vec<u8>, area: usize) -> Vec<u8> {
    data.resize(data.len().max(area), 0);
    data
}

/// What `rdma_connect` or `rdma_accept` offers: the ID must have a queue pair
/// `rdma_create_qp` made (one the program made itself, named by `qp_num`, is not connected
/// here), and its private data must fit the message's `max` bytes.
pub(super) fn offer(i: &Id, p: Option<&rdma_conn_param>, max: usize) -> Result<Vec<u8>, i32> {
    if i.qp().is_null() {
        return Err(errno::EOPNOTSUPP);
    }
    let private = private_of(p);
    if private.len() > max {
        return Err(errno::EINVAL);
    }
    Ok(private)
}

pub(super) fn private_of(p: Option<&rdma_conn_param>) -> Vec<u8> {
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
pub(super) fn established_param(attr: &QpAttr, remote_qpn: u32) -> rdma_conn_param {
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
pub(super) fn established(idp: Ptr, conn: CmConnection, attr: &QpAttr, area: usize) {
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
pub(super) fn watch(idp: Ptr, stop: Arc<AtomicBool>) {
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
            post_bare(id, cm_event::DISCONNECTED, 0);
            return;
        }
    }
}

/// Moves the ID's queue pair to the error state (with the ID's state locked by the caller).
pub(super) fn qp_to_error(i: &Id) {
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
pub(super) fn failure(e: &CmError) -> (u32, c_int) {
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
pub(super) fn refused(idp: Ptr, e: &CmError) {
    let id = idp.0 as *mut rdma_cm_id;
    // SAFETY: a live ID (this runs on one of its threads).
    let i = unsafe { Id::from_c(id) };
    {
        let _st = i.lock();
        qp_to_error(i);
    }
    let (event, status) = failure(e);
    post_bare(id, event, status);
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
pub(super) fn accept_requests(idp: Ptr, device: usize, l: Arc<CmListener>, stop: Arc<AtomicBool>) {
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
        post_bare(idp.0 as *mut rdma_cm_id, cm_event::DISCONNECTED, 0);
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
