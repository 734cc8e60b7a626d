//! Addresses and routes: socket addresses in and out of the C structures, binding and
//! resolving (at once: a GID is an IP address), `rdma_getaddrinfo`.

use super::*;

pub(super) fn sockaddr_of(sa: *const libc::sockaddr) -> Option<SocketAddr> {
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

pub(super) fn storage_of(a: SocketAddr) -> libc::sockaddr_storage {
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
pub(super) fn set_route(id: &mut rdma_cm_id, src: Option<SocketAddr>, dst: Option<SocketAddr>) {
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
        post_bare(id, cm_event::ADDR_ERROR, -libc::EADDRNOTAVAIL);
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
    post_bare(id, cm_event::ADDR_RESOLVED, 0);
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
    post_bare(id, cm_event::ROUTE_RESOLVED, 0);
    0
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
pub(super) fn port_of(st: &libc::sockaddr_storage) -> u16 {
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
