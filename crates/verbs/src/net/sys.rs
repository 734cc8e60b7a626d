//! The system calls rustix does not wrap: socket filters, forced buffer sizes, `sendmmsg` and
//! `recvmmsg` with their control messages (module [`crate::net`]).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

use super::Insn;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `setsockopt(SOL_SOCKET, opt)` with a plain-data value.
fn set_option<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is plain data of its own size, borrowed for the call; the kernel
    // copies it and keeps no pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            std::ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    check(rc).map(drop)
}

/// `setsockopt(SO_ATTACH_FILTER)` with a classic-BPF program.
pub(super) fn attach_filter(fd: BorrowedFd<'_>, prog: &[Insn]) -> io::Result<()> {
    set_program(fd, libc::SO_ATTACH_FILTER, prog)
}

/// Gives socket option `opt` (a classic-BPF program's) the program `prog`.
fn set_program(fd: BorrowedFd<'_>, opt: libc::c_int, prog: &[Insn]) -> io::Result<()> {
    let mut filter: Vec<libc::sock_filter> = prog
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let fprog = libc::sock_fprog {
        len: u16::try_from(filter.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        // Alive until the call returns: the kernel copies the program.
        filter: filter.as_mut_ptr(),
    };
    set_option(fd, libc::SOL_SOCKET, opt, &fprog)
}

/// `SO_ATTACH_REUSEPORT_CBPF`, which the libc crate does not name for Linux: 51 in
/// include/uapi/asm-generic/socket.h, which x86, arm, riscv and MIPS use (SPARC and PA-RISC
/// number it otherwise; irn does not build for them).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// `setsockopt(SO_ATTACH_REUSEPORT_CBPF)`: the classic-BPF program that picks, for each
/// datagram, the socket of `fd`'s reuse-port group that receives it (by its index in the
/// group; an index past the group's size falls back to the kernel's hash).
pub(super) fn attach_reuseport_filter(fd: BorrowedFd<'_>, prog: &[Insn]) -> io::Result<()> {
    set_program(fd, SO_ATTACH_REUSEPORT_CBPF, prog)
}

/// `setsockopt(SO_RCVBUFFORCE)`: a receive buffer past `net.core.rmem_max` (needs
/// `CAP_NET_ADMIN`).
pub(crate) fn set_rcvbuf_force(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &v)
}

/// `bind` of an `AF_PACKET` socket to interface `ifindex` for EtherType `ethertype`
/// (packet(7)); rustix has no `sockaddr_ll`.
pub(crate) fn bind_packet(fd: BorrowedFd<'_>, ifindex: i32, ethertype: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value to fill in.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = ethertype.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is a complete sockaddr_ll of the size passed, borrowed for the call.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::from_ref(&sll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    check(rc).map(drop)
}

/// Makes an `AF_PACKET` socket a switch port's (packet(7)): the interface receives every
/// frame whatever its destination (`PACKET_MR_PROMISC`), and the socket does not see the
/// frames the host itself sends (`PACKET_IGNORE_OUTGOING`, Linux 4.20), which on a switch
/// are the frames it forwarded.
pub(crate) fn packet_port(fd: BorrowedFd<'_>, ifindex: i32) -> io::Result<()> {
    // SAFETY: packet_mreq is plain data; all-zero is a valid value to fill in.
    let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mreq.mr_ifindex = ifindex;
    mreq.mr_type = libc::PACKET_MR_PROMISC as libc::c_ushort;
    set_option(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)?;
    set_option(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_IGNORE_OUTGOING,
        &(1 as libc::c_int),
    )
}

/// `getsockopt(PACKET_STATISTICS)`: frames the socket received and frames the kernel
/// dropped because its receive buffer was full, since the last call (reading resets them).
pub(crate) fn packet_stats(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: tpacket_stats is plain data; all-zero is a valid value.
    let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `st` and `len` are valid for writes of their sizes for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            std::ptr::from_mut(&mut st).cast(),
            &mut len,
        )
    };
    check(rc)?;
    Ok((u64::from(st.tp_packets), u64::from(st.tp_drops)))
}

/// `setsockopt(SO_NO_CHECK)`: send IPv4 UDP datagrams with checksum 0.
pub(crate) fn set_no_check(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_option(
        fd,
        libc::SOL_SOCKET,
        libc::SO_NO_CHECK,
        &libc::c_int::from(on),
    )
}

/// `setsockopt(SOL_UDP, UDP_GRO)`: the kernel hands over datagrams of one flow that arrive
/// together (a peer's GSO message, or what the NIC's GRO merged) as one, with their
/// segment size in a control message (linux/udp.h; not exported by the libc crate).
pub(super) fn set_gro(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_option(fd, libc::SOL_UDP, UDP_GRO, &(1 as libc::c_int))
}

/// `SOL_UDP` options and control messages (linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// A socket address as the kernel takes it.
fn raw_addr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every sockaddr.
            unsafe {
                std::ptr::from_mut(&mut st)
                    .cast::<libc::sockaddr_in>()
                    .write(sin)
            };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above.
            unsafe {
                std::ptr::from_mut(&mut st)
                    .cast::<libc::sockaddr_in6>()
                    .write(sin6)
            };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (st, len as libc::socklen_t)
}

/// Room for the control messages of one message, aligned as `cmsghdr` needs.
type Control = [u64; 8];

/// `sendmmsg(MSG_DONTWAIT)` of `msgs`, packet `i` gathered from `parts[packets[i]]`; a GSO
/// message with its `UDP_SEGMENT` control message. Returns how many messages the kernel took.
pub(super) fn sendmmsg(
    fd: BorrowedFd<'_>,
    msgs: &[super::TxMsg],
    packets: &[std::ops::Range<usize>],
    parts: &[super::IoPart],
) -> io::Result<usize> {
    let msgs = &msgs[..msgs.len().min(1024)];
    let mut names: Vec<(libc::sockaddr_storage, libc::socklen_t)> =
        msgs.iter().map(|m| raw_addr(&m.dest)).collect();
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(parts.len());
    let mut ctrls: Vec<Control> = vec![[0; 8]; msgs.len()];
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(msgs.len());
    // A message's packets, and so its parts, are consecutive: its I/O vector is one run.
    let runs = |m: &super::TxMsg| &packets[m.first..m.first + m.count];
    for m in msgs {
        for p in runs(m) {
            iovs.extend(parts[p.clone()].iter().map(|part| libc::iovec {
                iov_base: part.ptr.cast_mut().cast(),
                iov_len: part.len,
            }));
        }
    }
    let mut iov_at = 0;
    for (i, m) in msgs.iter().enumerate() {
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_name = std::ptr::from_mut(&mut names[i].0).cast();
        h.msg_hdr.msg_namelen = names[i].1;
        h.msg_hdr.msg_iov = iovs.as_mut_ptr().wrapping_add(iov_at);
        let n: usize = runs(m).iter().map(ExactSizeIterator::len).sum();
        h.msg_hdr.msg_iovlen = n as _;
        iov_at += n;
        let segment = (m.count > 1).then_some(m.seg_len);
        let tos = (m.tos != 0).then_some(libc::c_int::from(m.tos));
        if segment.is_some() || tos.is_some() {
            let ctrl = &mut ctrls[i];
            h.msg_hdr.msg_control = ctrl.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is arithmetic on its argument.
            h.msg_hdr.msg_controllen = unsafe {
                segment.map_or(0, |_| libc::CMSG_SPACE(2)) + tos.map_or(0, |_| libc::CMSG_SPACE(4))
            } as _;
            let (level, kind) = match m.dest {
                SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_TOS),
                SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
            };
            // SAFETY: the control buffer is 64 bytes, aligned for cmsghdr, and
            // msg_controllen (at most 24 + 24) covers exactly the messages written: a
            // header and a u16 (UDP_SEGMENT), a header and an int (the traffic class).
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                if let Some(seg) = segment {
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                    libc::CMSG_DATA(c).cast::<u16>().write_unaligned(seg);
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
                if let Some(tos) = tos {
                    (*c).cmsg_level = level;
                    (*c).cmsg_type = kind;
                    (*c).cmsg_len = libc::CMSG_LEN(4) as _;
                    libc::CMSG_DATA(c)
                        .cast::<libc::c_int>()
                        .write_unaligned(tos);
                }
            }
        }
        hdrs.push(h);
    }
    loop {
        // SAFETY: every header points into `names`, `iovs` and `ctrls`, which live and stay
        // where they are until the call returns; the iovecs point at the packets' parts,
        // which the kernel only reads (and an unreadable one fails the call with EFAULT).
        let rc = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        match check(rc) {
            Ok(n) => return Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// `setsockopt(SOL_PACKET, PACKET_AUXDATA)`: every frame received on the packet socket comes
/// with a `tpacket_auxdata` control message, which holds the 802.1Q tag the kernel took off
/// the frame before the socket saw it ([`recv_frame`]).
pub(crate) fn packet_auxdata(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_option(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_AUXDATA,
        &(1 as libc::c_int),
    )
}

/// A frame [`recv_frame`] took: its length, and the TPID and TCI of the VLAN tag the kernel
/// took off it, if it had one.
pub(crate) type RecvFrame = (usize, Option<(u16, u16)>);

/// `recvmsg(MSG_DONTWAIT)` of one frame into `buf` on a packet socket with
/// [`packet_auxdata`]: its length (at most `buf`'s), and the TPID and TCI of the VLAN tag the
/// kernel took off it, if it had one; `None` if no frame waits.
pub(crate) fn recv_frame(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<RecvFrame>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Aligned for cmsghdr, room for one auxdata message and more.
    let mut ctrl = [0u64; 16];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = ctrl.as_mut_ptr().cast();
    h.msg_controllen = size_of_val(&ctrl) as _;
    let n = loop {
        // SAFETY: the header points at `iov` (over `buf`) and `ctrl`, alive and unmoved
        // until the call returns, of the lengths given.
        let rc = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut h, libc::MSG_DONTWAIT) };
        if rc >= 0 {
            break rc as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(e),
        }
    };
    let mut tag = None;
    // SAFETY: the kernel filled `ctrl` up to msg_controllen; the CMSG macros walk only
    // within it, and an auxdata message's data is a whole tpacket_auxdata (read unaligned).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET
                && (*c).cmsg_type == libc::PACKET_AUXDATA
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(size_of::<libc::tpacket_auxdata>() as u32) as usize
            {
                let aux = libc::CMSG_DATA(c)
                    .cast::<libc::tpacket_auxdata>()
                    .read_unaligned();
                if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                    let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                        aux.tp_vlan_tpid
                    } else {
                        0x8100
                    };
                    tag = Some((tpid, aux.tp_vlan_tci));
                }
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
    }
    Ok(Some((n.min(buf.len()), tag)))
}

/// `sendmsg` of one frame gathered from `head` then `parts`, in order, on a packet socket
/// bound to its interface (no address: the bound one). Returns the bytes the kernel took.
pub(crate) fn send_gather(
    fd: BorrowedFd<'_>,
    head: &[u8],
    parts: &[super::IoPart],
) -> io::Result<usize> {
    let mut iovs: Vec<libc::iovec> = std::iter::once(super::IoPart::of(head))
        .chain(parts.iter().copied())
        .map(|part| libc::iovec {
            iov_base: part.ptr.cast_mut().cast(),
            iov_len: part.len,
        })
        .collect();
    // SAFETY: msghdr is plain data; all-zero is a valid empty header (no name, no control).
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = iovs.as_mut_ptr();
    h.msg_iovlen = iovs.len() as _;
    loop {
        // SAFETY: the header points into `iovs`, alive until the call returns; the iovecs
        // point at the frame's parts, which the kernel only reads (an unreadable one fails
        // the call with EFAULT).
        let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &h, 0) };
        match rc {
            n if n >= 0 => return Ok(n as usize),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// `setsockopt(SOL_UDP, UDP_NO_CHECK6_RX)`: accept IPv6 UDP datagrams with checksum 0
/// (linux/udp.h; the libc crate does not export the constant for Linux).
pub(super) fn set_no_check6_rx(fd: BorrowedFd<'_>) -> io::Result<()> {
    const UDP_NO_CHECK6_RX: libc::c_int = 102;
    set_option(fd, libc::SOL_UDP, UDP_NO_CHECK6_RX, &(1 as libc::c_int))
}

/// What `recvmmsg` fills in, kept between bursts.
pub(super) struct MmsgState {
    names: Vec<libc::sockaddr_storage>,
    lens: Vec<(usize, bool)>,
    ctrls: Vec<Control>,
    /// Per message: the segment size of a coalesced (GRO) datagram, 0 for a plain one,
    /// and the IP header's traffic class (TOS) when the socket reports it.
    meta: Vec<(u16, Option<u8>)>,
    name_lens: Vec<libc::socklen_t>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` are scratch: `recvmmsg` and `sendmmsg`
// rebuild them from the buffers they are handed before every call, and nothing reads
// them between calls, so the state may move to another thread (a busy-polling
// application thread receives with the engine's batch).
unsafe impl Send for MmsgState {}

impl MmsgState {
    pub(super) fn new(n: usize) -> MmsgState {
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid (AF_UNSPEC) value.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        MmsgState {
            names: vec![zero; n],
            lens: vec![(0, false); n],
            ctrls: vec![[0; 8]; n],
            meta: vec![(0, None); n],
            name_lens: vec![0; n],
            iovs: Vec::with_capacity(n),
            hdrs: Vec::with_capacity(n),
        }
    }

    /// Length and truncation of message `i` of the last burst.
    pub(super) fn result(&self, i: usize) -> (usize, bool) {
        self.lens[i]
    }

    /// Segment size (0: not coalesced) and traffic class of message `i` of the last burst.
    pub(super) fn meta(&self, i: usize) -> (u16, Option<u8>) {
        self.meta[i]
    }

    /// Source address of message `i` of the last burst.
    pub(super) fn source(&self, i: usize) -> Option<SocketAddr> {
        let s = &self.names[i];
        match i32::from(s.ss_family) {
            libc::AF_INET if self.name_lens[i] as usize >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: the kernel wrote a sockaddr_in here (family and length say so);
                // sockaddr_storage is aligned for every sockaddr type.
                let a = unsafe { &*std::ptr::from_ref(s).cast::<libc::sockaddr_in>() };
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if self.name_lens[i] as usize >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: as above, for a sockaddr_in6.
                let a = unsafe { &*std::ptr::from_ref(s).cast::<libc::sockaddr_in6>() };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// `recvmmsg(MSG_DONTWAIT)` into `bufs` (each from byte `skip` on), with the sources when
/// `names`; returns how many messages arrived (0 on any error: nothing waiting).
pub(super) fn recvmmsg(
    fd: BorrowedFd<'_>,
    bufs: &mut [Vec<u8>],
    skip: usize,
    names: bool,
    st: &mut MmsgState,
) -> usize {
    let n = bufs.len().min(st.names.len());
    st.iovs.clear();
    st.iovs.extend(bufs[..n].iter_mut().map(|b| {
        let room = b.get_mut(skip..).unwrap_or_default();
        libc::iovec {
            iov_base: room.as_mut_ptr().cast(),
            iov_len: room.len(),
        }
    }));
    st.hdrs.clear();
    for i in 0..n {
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        // Pointers from one borrow of each vector, offset without dereferencing.
        h.msg_hdr.msg_iov = st.iovs.as_mut_ptr().wrapping_add(i);
        h.msg_hdr.msg_iovlen = 1;
        if names {
            h.msg_hdr.msg_name = st.names.as_mut_ptr().wrapping_add(i).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_control = st.ctrls.as_mut_ptr().wrapping_add(i).cast();
            h.msg_hdr.msg_controllen = size_of::<Control>() as _;
        }
        st.hdrs.push(h);
    }
    let got = loop {
        // SAFETY: every header points at an iovec of `st` over a live, exclusively borrowed
        // buffer and (with `names`) at a sockaddr_storage of `st`; none moves or is
        // freed before the call returns (the vectors are not touched until then).
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                st.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        match check(rc) {
            Ok(k) => break k as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break 0,
        }
    };
    for (i, h) in st.hdrs.iter().take(got).enumerate() {
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        st.lens[i] = ((h.msg_len as usize).min(st.iovs[i].iov_len), truncated);
        st.name_lens[i] = h.msg_hdr.msg_namelen;
        let mut meta = (0u16, None);
        if names {
            // SAFETY: the kernel wrote msg_controllen bytes of control messages into this
            // message's control buffer; the CMSG_* walk stays inside them, and each
            // message's data is read within its cmsg_len.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    match ((*c).cmsg_level, (*c).cmsg_type) {
                        (libc::SOL_UDP, UDP_GRO) if len >= 4 => {
                            let g = data.cast::<libc::c_int>().read_unaligned();
                            meta.0 = u16::try_from(g).unwrap_or(0);
                        }
                        (libc::IPPROTO_IP, libc::IP_TOS) if len >= 1 => {
                            meta.1 = Some(data.read());
                        }
                        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if len >= 4 => {
                            let t = data.cast::<libc::c_int>().read_unaligned();
                            meta.1 = Some(t as u8);
                        }
                        _ => {}
                    }
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
            }
        }
        st.meta[i] = meta;
    }
    got
}
