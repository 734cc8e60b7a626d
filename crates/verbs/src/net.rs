//! The device's sockets: how packets leave and how they arrive.
//!
//! # Sending
//!
//! Always through unconnected UDP sockets on the device's address with `IP_MTU_DISCOVER =
//! IP_PMTUDISC_DO`: the device's own (its port), and send-only ones on the source ports of its
//! connected queue pairs ([`roce_source_port`], [`open_source_socket`]). Linux then sends
//! every datagram with DF set and IPv4 ID 0 (`ip_select_ident_segs` with no connected peer), so the ICRC computed over the
//! IP pseudo-header (IBA Annex A17.3.3) is the one a standard receiver (Linux rxe, a RoCE NIC)
//! recomputes. See `../shared/interop/README.md` for how this was established against rxe.
//!
//! # Receiving: two paths ([`ReceivePath`])
//!
//! - **UDP** (unprivileged): the UDP socket itself. The kernel hands over the UDP payload and
//!   the sender's address; the IP and UDP headers are rebuilt in front of the payload (so the
//!   rest of the device, and the capture, always see whole IP packets). For IPv6 every field
//!   the ICRC covers unmasked (version, payload length, next header, addresses) is known, so
//!   the ICRC is verified; for IPv4 it is not: the sender's IP identification is covered by
//!   the ICRC and a UDP socket hides it.
//! - **Raw** (privileged, IPv4): a raw `IPPROTO_UDP` socket bound to the device's address
//!   receives every datagram with its real IP header, so every ICRC is verified and the
//!   capture holds the bytes that were on the wire. A classic-BPF filter on the raw socket
//!   keeps only unfragmented datagrams to the device's port, and a drop-everything filter on
//!   the UDP socket keeps the kernel from queueing a second copy there. Needs `CAP_NET_RAW`;
//!   the receive buffer is then sized with `SO_RCVBUFFORCE`, past `net.core.rmem_max`. A UDP
//!   GSO message from a peer on the same host arrives whole under one IP header, without its
//!   segment size; the device finds the cut (`Core::receive_coalesced`).
//!
//! Both paths receive in batches with `recvmmsg(2)`.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, UdpSocket};

use irn_wire::ipv4::{Ipv4Packet, PROTO_UDP};
use irn_wire::ipv6::Ipv6Packet;
use irn_wire::udp::{UdpPacket, HEADER_LEN as UDP_LEN};
use irn_wire::{Ecn, IpRepr, Ipv4Repr, Ipv6Repr, UdpChecksum, UdpRepr, ICRC_LEN};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};

/// How a device receives packets: through the UDP socket, or a raw socket that sees every
/// packet whole (docs/VERBS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReceivePath {
    /// Raw when the process may open a raw socket and the address is IPv4; UDP otherwise.
    #[default]
    Auto,
    /// The UDP socket (unprivileged). Received ICRCs are verified for IPv6 only.
    Udp,
    /// A raw IPv4 socket (needs `CAP_NET_RAW`): real headers, every ICRC verified.
    Raw,
}

impl ReceivePath {
    /// The name the tools use for it.
    pub fn name(self) -> &'static str {
        match self {
            ReceivePath::Auto => "auto",
            ReceivePath::Udp => "udp",
            ReceivePath::Raw => "raw",
        }
    }
}

impl std::str::FromStr for ReceivePath {
    type Err = String;
    fn from_str(s: &str) -> Result<ReceivePath, String> {
        match s {
            "auto" => Ok(ReceivePath::Auto),
            "udp" => Ok(ReceivePath::Udp),
            "raw" => Ok(ReceivePath::Raw),
            _ => Err(format!("receive path must be auto, udp or raw, not {s:?}")),
        }
    }
}

impl std::fmt::Display for ReceivePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The largest InfiniBand path MTU a route to `peer` carries, derived as Linux rxe derives its
/// port's active MTU from its netdev's (`rxe.h`, `eth_mtu_int_to_enum`: 80 bytes of headers
/// off, then rounded down to 256, 512, 1024, 2048 or 4096): 1024 over 1500-byte Ethernet,
/// 4096 over loopback or jumbo frames. The route's MTU is the kernel's (`IP_MTU` of a UDP
/// socket connected to `peer`; nothing is sent); 1024 when it cannot be read.
pub fn active_mtu(peer: IpAddr) -> u32 {
    use rustix::net::sockopt;
    let route = (|| {
        let any: SocketAddr = match peer {
            IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let s = UdpSocket::bind(any)?;
        s.connect((peer, crate::ROCE_PORT))?;
        Ok::<u32, io::Error>(match peer {
            IpAddr::V4(_) => sockopt::ip_mtu(&s)?,
            IpAddr::V6(_) => sockopt::ipv6_mtu(&s)?,
        })
    })();
    match route {
        Ok(m) => ib_mtu_fitting(m.saturating_sub(80)),
        Err(_) => 1024,
    }
}

/// The largest InfiniBand MTU (256 · 2^k, at most 4096) no larger than `bytes` (256 at least).
fn ib_mtu_fitting(bytes: u32) -> u32 {
    [4096, 2048, 1024, 512]
        .into_iter()
        .find(|&m| m <= bytes)
        .unwrap_or(256)
}

/// Room in front of a received UDP payload for the IP (IPv6: 40 bytes) and UDP headers.
const HEADROOM: usize = 48;

/// The sockets of a device.
#[derive(Debug)]
pub(crate) struct Sockets {
    /// Sends everything; receives on the UDP path.
    pub(crate) udp: UdpSocket,
    /// Receives on the raw path.
    raw: Option<OwnedFd>,
    local: SocketAddr,
}

/// The UDP source port Linux gives a RoCEv2 connection between local QP `lqpn` and remote QP
/// `rqpn` whose address vector has no flow label: `rdma_get_udp_sport(0, lqpn, rqpn)`
/// (include/rdma/ib_verbs.h), which rxe applies as a queue pair moves to RTR, as irdma, mana
/// and ionic do. `rdma_calc_flow_label` folds the product of the two QPNs into a 20-bit flow
/// label and `rdma_flow_label_to_udp_sport` folds that into 14 bits of the dynamic range
/// (0xC000–0xFFFF): RoCEv2's flow entropy, which ECMP and RSS hash (RoCEv2 annex A17.3.1 leaves
/// the source port to the sender for this). Symmetric: both ends of a connection send from the
/// same port. Checked against rxe's captures (`shared/interop/captures`: QPNs 17 and 17 →
/// 49441, 25 and 0xBD3A70 → 62973).
pub fn roce_source_port(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let label = (v & 0xF_FFFF) as u32;
    let low = (label & 0x3FFF) ^ ((label & 0xF_C000) >> 14);
    0xC000 | low as u16
}

/// A send-only UDP socket on `ip:port`, for the queue pairs whose source port that is: it
/// shares the port with other devices' sockets (`SO_REUSEPORT`), drops whatever is sent to
/// it (a classic-BPF filter: peers send to the device's port), and sends as the device's
/// socket does (IPv4 without a UDP checksum, path MTU discovery on, `buffer` bytes).
pub(crate) fn open_source_socket(ip: IpAddr, port: u16, buffer: usize) -> io::Result<UdpSocket> {
    // Not while a group of devices binds its members ([`BINDING`]).
    let udp = {
        let _binding = binding();
        bind_shared(SocketAddr::new(ip, port), Some(&DROP_ALL))?
    };
    prepare_sender(&udp, buffer)?;
    Ok(udp)
}

/// What every sending socket of a device is: non-blocking, with path MTU discovery on (DF set,
/// IPv4 identification 0: see the module doc), IPv4 without a UDP checksum as rxe sends (what
/// goes on the wire is then exactly what the device built and captured; IPv6 requires the
/// checksum), and a send buffer of `buffer` bytes (0: the system's default).
fn prepare_sender(udp: &UdpSocket, buffer: usize) -> io::Result<()> {
    use rustix::net::sockopt;
    udp.set_nonblocking(true)?;
    if udp.local_addr()?.is_ipv4() {
        sockopt::set_ip_mtu_discover(udp, sockopt::Ipv4PathMtuDiscovery::DO)?;
        let _ = sys::set_no_check(udp.as_fd(), true);
    } else {
        sockopt::set_ipv6_mtu_discover(udp, sockopt::Ipv6PathMtuDiscovery::DO)?;
    }
    if buffer > 0 {
        let _ = sockopt::set_socket_send_buffer_size(udp, buffer);
    }
    Ok(())
}

/// Gives `fd` a receive buffer of `bytes`: forced past `net.core.rmem_max` if the process may
/// (`CAP_NET_ADMIN`), otherwise as much as the kernel allows. Best effort.
pub(crate) fn set_receive_buffer(fd: BorrowedFd<'_>, bytes: usize) {
    if sys::set_rcvbuf_force(fd, bytes).is_err() {
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(fd, bytes);
    }
}

impl Sockets {
    /// Binds the UDP socket to `addr:port` (and, for the raw path, the raw socket to `addr`),
    /// with receive and send buffers of `buffer` bytes (0: the system's default). For member
    /// `i` of a group of `n` (`share`, `device/group.rs`) the UDP socket joins the port's
    /// reuse-port group — member 0's attaches the program that steers datagrams by their
    /// destination queue pair ([`steering_program`]) — and the raw socket keeps only member
    /// `i`'s packets.
    pub(crate) fn open(
        addr: IpAddr,
        port: u16,
        path: ReceivePath,
        buffer: usize,
        share: Option<(u32, u32)>,
    ) -> io::Result<Sockets> {
        use rustix::net::sockopt;
        let udp = match share {
            None => UdpSocket::bind(SocketAddr::new(addr, port))?,
            Some((index, members)) => {
                // The port was reserved for the group ([`reserve_shared_port`]).
                let udp = bind_shared(SocketAddr::new(addr, port), None)?;
                if index == 0 {
                    sys::attach_reuseport_filter(udp.as_fd(), &steering_program(members))?;
                }
                udp
            }
        };
        prepare_sender(&udp, buffer)?;
        if addr.is_ipv6() {
            // Linux rxe (and RoCE NICs) send IPv6 UDP with checksum 0, which RFC 8200 §8.1
            // forbids unless the receiving socket opts in (RFC 6935/6936, as UDP tunnels do);
            // without this the kernel drops every such datagram and counts it in
            // Udp6InCsumErrors. The ICRC covers everything the checksum would. This side
            // still sends checksummed datagrams, which every receiver accepts.
            sys::set_no_check6_rx(udp.as_fd())?;
        }
        let local = udp.local_addr()?;
        let raw = match (path, local) {
            (ReceivePath::Udp, _) => None,
            (ReceivePath::Raw, SocketAddr::V6(_)) => return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the raw receive path is IPv4 only (an IPv6 device verifies ICRCs on the UDP path)",
            )),
            (ReceivePath::Auto, SocketAddr::V6(_)) => None,
            (ReceivePath::Raw, SocketAddr::V4(v4)) => Some(open_raw(v4, share)?),
            (ReceivePath::Auto, SocketAddr::V4(v4)) => match open_raw(v4, share) {
                Ok(fd) => Some(fd),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => None,
                Err(e) => return Err(e),
            },
        };
        if buffer > 0 {
            let rx: BorrowedFd<'_> = match &raw {
                Some(fd) => fd.as_fd(),
                None => udp.as_fd(),
            };
            set_receive_buffer(rx, buffer);
        }
        if raw.is_none() {
            // Coalesced datagrams (a GSO peer's batches arrive whole on loopback and veths;
            // a NIC's GRO merges a flow's datagrams) and the ECN bits of each: best effort,
            // a kernel without them delivers datagrams one by one and no traffic class.
            let _ = sys::set_gro(udp.as_fd());
            let _ = match local {
                SocketAddr::V4(_) => sockopt::set_ip_recvtos(&udp, true),
                SocketAddr::V6(_) => sockopt::set_ipv6_recvtclass(&udp, true),
            };
        }
        if let Some(fd) = &raw {
            // The raw socket gets every datagram now: none may pile up on the UDP socket.
            sys::attach_filter(udp.as_fd(), &DROP_ALL)?;
            // A same-host GSO peer's message reaches the UDP socket whole too; without UDP_GRO
            // the kernel cuts it into datagrams for the filter to drop one by one, in the
            // sender's system call (13 % of a loopback sender's cycles). Only on a loopback
            // address: elsewhere UDP_GRO would also let a NIC's GRO merge this port's
            // datagrams before the raw socket sees them (under identifications all equal, or
            // from packets that were not full), which the raw path does not cut.
            if local.ip().is_loopback() {
                let _ = sys::set_gro(udp.as_fd());
            }
            // Datagrams queued before the raw socket's filter was attached are not filtered.
            let mut scratch = [0u8; 64];
            while rustix::net::recv(fd, &mut scratch, rustix::net::RecvFlags::DONTWAIT).is_ok() {}
        }
        Ok(Sockets { udp, raw, local })
    }

    /// The path in use ([`ReceivePath::Udp`] or [`ReceivePath::Raw`]).
    pub(crate) fn path(&self) -> ReceivePath {
        if self.raw.is_some() {
            ReceivePath::Raw
        } else {
            ReceivePath::Udp
        }
    }

    /// Whether received packets carry everything their ICRC covers.
    pub(crate) fn verifies_icrc(&self) -> bool {
        self.raw.is_some() || self.local.is_ipv6()
    }

    /// The bound address and port.
    pub(crate) fn local(&self) -> SocketAddr {
        self.local
    }

    /// The descriptor to poll for received packets.
    /// Asks for a receive buffer of `bytes` (forced past `net.core.rmem_max` if the process
    /// may; otherwise as much as the kernel allows).
    pub(crate) fn grow_receive_buffer(&self, bytes: usize) {
        set_receive_buffer(self.rx_fd(), bytes);
    }

    pub(crate) fn rx_fd(&self) -> BorrowedFd<'_> {
        match &self.raw {
            Some(fd) => fd.as_fd(),
            None => self.udp.as_fd(),
        }
    }
}

/// This process's binds of reuse-port sockets: a group's members (while [`PortLock`] holds
/// it) and the send-only source-port sockets ([`open_source_socket`]), which would otherwise
/// join a group being built on their port and take a member's place in it.
static BINDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn binding() -> std::sync::MutexGuard<'static, ()> {
    BINDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Holds a port for a group of devices until its members have bound it: this process's
/// reuse-port binds ([`BINDING`]), and a lock every irn program's group takes before it binds
/// — an abstract Unix socket named for the user, the address and the port, which the network
/// namespace scopes as it scopes the port, and which ends with the process.
pub(crate) struct PortLock {
    _lock: std::os::unix::net::UnixDatagram,
    _binding: std::sync::MutexGuard<'static, ()>,
}

/// How long [`reserve_shared_port`] waits for another program's group to bind its port.
const PORT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The port a group of devices binds on `addr` (`port`, or a free one for 0), free — a
/// socket bound to it without `SO_REUSEPORT` was refused nowhere — and locked against other
/// irn programs' groups ([`PortLock`]) until the caller has bound every member: a reuse-port
/// bind would otherwise join whatever group of the same user holds the port, or one that
/// another program forms between the check and the bind (a reuse-port group is one user's).
/// `AddrInUse` for a given port that is taken; for 0, tries other free ports; `TimedOut` if
/// another program held the lock for [`PORT_LOCK_WAIT`].
pub(crate) fn reserve_shared_port(addr: IpAddr, port: u16) -> io::Result<(u16, PortLock)> {
    use std::os::linux::net::SocketAddrExt;
    let binding = binding();
    let uid = rustix::process::getuid().as_raw();
    let mut last = None;
    for _ in 0..16 {
        let p = match port {
            0 => UdpSocket::bind(SocketAddr::new(addr, 0))?
                .local_addr()?
                .port(),
            p => p,
        };
        let name = format!("irn-port-{uid}-{addr}-{p}");
        let at = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let deadline = std::time::Instant::now() + PORT_LOCK_WAIT;
        let lock = loop {
            match std::os::unix::net::UnixDatagram::bind_addr(&at) {
                Ok(l) => break l,
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    if std::time::Instant::now() >= deadline {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("another program holds port {p}'s group lock ({name})"),
                        ));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(e) => return Err(e),
            }
        };
        // Under the lock, the port must still be free.
        match UdpSocket::bind(SocketAddr::new(addr, p)) {
            Ok(_) => {
                return Ok((
                    p,
                    PortLock {
                        _lock: lock,
                        _binding: binding,
                    },
                ))
            }
            Err(e) if port == 0 && e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)))
}

/// Makes a closed group member's UDP socket, which stays in its group (`device/group.rs`),
/// drop whatever reaches it, empties it, and shrinks its buffer. Best effort.
pub(crate) fn retire(udp: &UdpSocket) {
    let _ = sys::attach_filter(udp.as_fd(), &DROP_ALL);
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(udp, 4096);
    let mut scratch = [0u8; 64];
    while rustix::net::recv(udp, &mut scratch, rustix::net::RecvFlags::DONTWAIT).is_ok() {}
}

/// A UDP socket bound to `at` in the port's reuse-port group (`SO_REUSEPORT`), as a member of
/// a group of devices and a send-only source-port socket bind it; with `filter`, that
/// classic-BPF program is attached before the bind, so no datagram reaches it unfiltered.
fn bind_shared(at: SocketAddr, filter: Option<&[Insn]>) -> io::Result<UdpSocket> {
    use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};
    let family = if at.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(family, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseport(&fd, true)?;
    if let Some(prog) = filter {
        sys::attach_filter(fd.as_fd(), prog)?;
    }
    match at {
        SocketAddr::V4(a) => rustix::net::bind(&fd, &a)?,
        SocketAddr::V6(a) => rustix::net::bind(&fd, &a)?,
    }
    Ok(UdpSocket::from(fd))
}

/// Opens the raw IPv4 socket of the raw path, bound to `local`'s address and filtered to its
/// port (and, for member `i` of `n`, to member `i`'s queue pairs).
fn open_raw(local: SocketAddrV4, share: Option<(u32, u32)>) -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::RAW,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        Some(rustix::net::ipproto::UDP),
    )?;
    rustix::net::bind(&fd, &SocketAddrV4::new(*local.ip(), 0))?;
    sys::attach_filter(fd.as_fd(), &port_filter(local.port(), share))?;
    Ok(fd)
}

/// A classic-BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

// Classic-BPF opcodes (linux/filter.h), named for what they do here.
const LD_W_ABS: u16 = 0x20; // A = 32-bit word at k
const LD_H_ABS: u16 = 0x28; // A = 16-bit word at k
const LD_H_IND: u16 = 0x48; // A = 16-bit word at X + k
const LDX_B_MSH: u16 = 0xb1; // X = 4 * (byte at k & 0xf): the IPv4 header length
const JSET_K: u16 = 0x45; // if A & k
const JEQ_K: u16 = 0x15; // if A == k
const RET_K: u16 = 0x06; // accept k bytes (0: drop)
const RET_A: u16 = 0x16; // return A
const LD_W_IND: u16 = 0x40; // A = 32-bit word at X + k
const AND_K: u16 = 0x54; // A &= k
const MOD_K: u16 = 0x94; // A %= k
const JGT_K: u16 = 0x25; // if A > k
const JGE_K: u16 = 0x35; // if A >= k
const LD_W_LEN: u16 = 0x80; // A = the packet's length
const SUB_X: u16 = 0x1c; // A -= X

/// Drops every packet.
const DROP_ALL: [Insn; 1] = [insn(RET_K, 0, 0, 0)];

/// Over an Ethernet frame (an `AF_PACKET` socket's filter sees it from the MAC header on):
/// accepts frames to `mac` whose EtherType/length field is `ethertype`, drops everything else —
/// other protocols, and the host's own outgoing frames, which a packet socket also sees.
fn ethertype_filter(mac: [u8; 6], ethertype: u16) -> [Insn; 8] {
    let hi = u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]]);
    let lo = u32::from(u16::from_be_bytes([mac[4], mac[5]]));
    [
        insn(LD_H_ABS, 0, 0, 12),
        insn(JEQ_K, 0, 5, u32::from(ethertype)),
        insn(LD_W_ABS, 0, 0, 0),
        insn(JEQ_K, 0, 3, hi),
        insn(LD_H_ABS, 0, 0, 4),
        insn(JEQ_K, 0, 1, lo),
        insn(RET_K, 0, 0, 0xffff_ffff),
        insn(RET_K, 0, 0, 0),
    ]
}

/// Keeps only frames to `mac` of `ethertype` on a packet socket bound to every protocol, and
/// gives the socket a receive buffer of `rcvbuf` bytes if the process may (`CAP_NET_ADMIN`).
pub(crate) fn setup_packet_socket(
    fd: std::os::fd::BorrowedFd<'_>,
    mac: [u8; 6],
    ethertype: u16,
    rcvbuf: usize,
) -> std::io::Result<()> {
    let _ = sys::set_rcvbuf_force(fd, rcvbuf);
    sys::attach_filter(fd, &ethertype_filter(mac, ethertype))
}

/// A reuse-port group's steering (`SO_ATTACH_REUSEPORT_CBPF`; the kernel runs it over the UDP
/// payload, the BTH): the index of the member that owns the datagram's destination queue
/// pair among `members` — its number modulo `members`, member 0 for QPNs 0 and 1
/// (`device/group.rs`). A datagram too short for a BTH goes to member 0, which counts it.
pub(crate) fn steering_program(members: u32) -> [Insn; 6] {
    [
        insn(LD_W_ABS, 0, 0, 4),        // BTH bytes 4–7: reserved, destination QP
        insn(AND_K, 0, 0, 0x00ff_ffff), // the destination QP
        insn(JGT_K, 1, 0, 1),           // 0 and 1: member 0's
        insn(RET_K, 0, 0, 0),
        insn(MOD_K, 0, 0, members.max(1)),
        insn(RET_A, 0, 0, 0),
    ]
}

/// Over an IPv4 packet (a raw socket's filter sees it from the IP header on): accepts whole,
/// unfragmented datagrams to UDP port `port` — for member `i` of a group of `n` (`share`),
/// only those whose destination queue pair member `i` owns, as [`steering_program`] picks —
/// and drops everything else.
fn port_filter(port: u16, share: Option<(u32, u32)>) -> Vec<Insn> {
    const ACCEPT: u32 = 0x0004_0000; // whole
    match share {
        None | Some((_, 0 | 1)) => vec![
            insn(LD_H_ABS, 0, 0, 6),        // flags and fragment offset
            insn(JSET_K, 4, 0, 0x3fff),     // MF or an offset: a fragment, drop
            insn(LDX_B_MSH, 0, 0, 0),       // X = IP header length
            insn(LD_H_IND, 0, 0, 2),        // UDP destination port
            insn(JEQ_K, 0, 1, port.into()), // ours?
            insn(RET_K, 0, 0, ACCEPT),
            insn(RET_K, 0, 0, 0), // drop
        ],
        Some((index, members)) => vec![
            insn(LD_H_ABS, 0, 0, 6),
            insn(JSET_K, 13, 0, 0x3fff), // a fragment: drop
            insn(LDX_B_MSH, 0, 0, 0),
            insn(LD_H_IND, 0, 0, 2),
            insn(JEQ_K, 0, 10, port.into()), // not ours: drop
            insn(LD_W_LEN, 0, 0, 0),
            insn(SUB_X, 0, 0, 0),
            insn(JGE_K, 0, 6, 8 + 8), // too short for a BTH's QP: member 0's, which counts it
            insn(LD_W_IND, 0, 0, 8 + 4), // the BTH's bytes 4–7, after the UDP header
            insn(AND_K, 0, 0, 0x00ff_ffff), // the destination QP
            insn(JGT_K, 0, 3, 1),     // 0 and 1: member 0's
            insn(MOD_K, 0, 0, members),
            insn(JEQ_K, 0, 2, index), // another member's: drop
            insn(RET_K, 0, 0, ACCEPT),
            insn(RET_K, 0, 0, if index == 0 { ACCEPT } else { 0 }),
            insn(RET_K, 0, 0, 0), // drop
        ],
    }
}

/// One received packet in a [`RxBatch`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rx {
    /// Index of the buffer it is in.
    pub(crate) buf: usize,
    /// Where the IP packet (or, for a segment, its UDP payload) starts in it.
    pub(crate) start: usize,
    /// Its length.
    pub(crate) len: usize,
    /// A segment of a coalesced datagram, left in place: its bytes are a UDP payload (BTH to
    /// ICRC) without IP and UDP headers, from this sender with this ECN field. Rebuilding
    /// headers in front of every segment meant copying every byte a GSO peer sent once more
    /// (a fifth of the receiver's cycles); they are built only where a packet's
    /// headers are needed ([`with_headers`]). With its index in the datagram: a GSO sender's
    /// kernel numbered the IPv4 identifications of its segments 0, 1, 2, … ([`TxMsg`]), and an
    /// irn sender's ICRCs cover them.
    pub(crate) segment: Option<(SocketAddr, Ecn, u16)>,
    /// It did not fit the buffer (not a RoCEv2 packet this device could have sent) or, on the
    /// UDP path, came without a usable source address: counted as malformed, never parsed.
    pub(crate) malformed: bool,
}

/// Receive buffers reused burst after burst, and what the last burst put in them.
pub(crate) struct RxBatch {
    bufs: Vec<Vec<u8>>,
    pub(crate) got: Vec<Rx>,
    /// Coalesced datagrams in the last burst.
    pub(crate) coalesced: u64,
    /// Datagrams the last burst read (as many as it has buffers: more may be waiting).
    pub(crate) datagrams: usize,
    sys: sys::MmsgState,
}

impl RxBatch {
    /// `n` buffers of `size` bytes (the largest IP packet to accept, or coalesced datagram:
    /// up to 64 KiB on the UDP path).
    pub(crate) fn new(n: usize, size: usize) -> RxBatch {
        RxBatch {
            bufs: (0..n).map(|_| vec![0u8; HEADROOM + size]).collect(),
            got: Vec::with_capacity(n),
            coalesced: 0,
            datagrams: 0,
            sys: sys::MmsgState::new(n),
        }
    }

    /// Whether the last burst filled every buffer (so the socket may hold more).
    pub(crate) fn full(&self) -> bool {
        self.datagrams == self.bufs.len()
    }

    /// The bytes of a received packet: an IP packet, or a segment's UDP payload
    /// ([`Rx::segment`]).
    pub(crate) fn packet(&self, rx: &Rx) -> &[u8] {
        &self.bufs[rx.buf][rx.start..rx.start + rx.len]
    }

    /// Receives what is waiting, up to one buffer each, without blocking. On the UDP path the
    /// IP and UDP headers are rebuilt in front of each single datagram's payload, and a
    /// coalesced datagram is cut back into the packets it was made of (each segment but the
    /// last is exactly the segment size the kernel reports), left where they are, without
    /// headers ([`Rx::segment`]).
    pub(crate) fn recv(&mut self, socks: &Sockets) {
        self.got.clear();
        self.coalesced = 0;
        let raw = socks.raw.is_some();
        let skip = if raw { 0 } else { HEADROOM };
        let n = sys::recvmmsg(socks.rx_fd(), &mut self.bufs, skip, !raw, &mut self.sys);
        self.datagrams = n;
        let bad = |buf| Rx {
            buf,
            start: 0,
            len: 0,
            malformed: true,
            segment: None,
        };
        for i in 0..n {
            let (len, truncated) = self.sys.result(i);
            if raw {
                self.got.push(match truncated {
                    false => Rx {
                        buf: i,
                        start: 0,
                        len,
                        malformed: false,
                        segment: None,
                    },
                    true => bad(i),
                });
                continue;
            }
            let (seg, tos) = self.sys.meta(i);
            // The rebuilt header carries the ECN field the kernel reported.
            let ecn = tos.map_or(Ecn::NotEct, Ecn::from_bits);
            let from = self.sys.source(i);
            let (Some(from), false) = (from, truncated) else {
                self.got.push(bad(i));
                continue;
            };
            let seg = usize::from(seg);
            if seg == 0 || seg >= len {
                // Rebuild the IP and UDP headers in front of the payload.
                self.got.push(
                    match prepend_headers(&mut self.bufs[i], from, socks.local, len, ecn, 0) {
                        Some(start) => Rx {
                            buf: i,
                            start,
                            len: HEADROOM - start + len,
                            malformed: false,
                            segment: None,
                        },
                        None => bad(i),
                    },
                );
                continue;
            }
            // A coalesced datagram: its segments stay where they are.
            self.coalesced += 1;
            let mut at = HEADROOM;
            let mut k = 0u16;
            while at < HEADROOM + len {
                let n = seg.min(HEADROOM + len - at);
                self.got.push(Rx {
                    buf: i,
                    start: at,
                    len: n,
                    malformed: false,
                    segment: Some((from, ecn, k)),
                });
                at += n;
                k = k.wrapping_add(1);
            }
        }
    }
}

/// The IP packet a segment ([`Rx::segment`]) was cut from, rebuilt into `scratch`: its UDP
/// payload `payload` from `from` to `local` behind the headers the kernel took off.
pub(crate) fn with_headers<'a>(
    scratch: &'a mut Vec<u8>,
    from: SocketAddr,
    local: SocketAddr,
    ecn: Ecn,
    ident: u16,
    payload: &[u8],
) -> Option<&'a [u8]> {
    scratch.clear();
    scratch.resize(HEADROOM, 0);
    scratch.extend_from_slice(payload);
    let start = prepend_headers(scratch, from, local, payload.len(), ecn, ident)?;
    Some(&scratch[start..])
}

/// Writes, in the headroom of `buf` (whose UDP payload of `len` bytes starts at `HEADROOM`),
/// the IP and UDP headers of a datagram from `from` to `local`; returns where they start.
fn prepend_headers(
    buf: &mut [u8],
    from: SocketAddr,
    local: SocketAddr,
    len: usize,
    ecn: Ecn,
    ident: u16,
) -> Option<usize> {
    let (mut ip, udp) = headers(from, local, 0, ecn)?;
    if let IpRepr::V4(v4) = &mut ip {
        v4.ident = ident;
    }
    ip.set_payload_len(UDP_LEN + len);
    let start = HEADROOM.checked_sub(ip.header_len() + UDP_LEN)?;
    let packet = buf.get_mut(start..HEADROOM + len)?;
    let n = ip.emit(packet).ok()?;
    udp.emit(&mut packet[n..], len, ip.src(), ip.dst()).ok()?;
    Some(start)
}

/// The IP header's traffic-class byte (IPv4 TOS, IPv6 traffic class) of `dscp` and `ecn`.
pub(crate) fn tos(dscp: u8, ecn: Ecn) -> u8 {
    ((dscp & 0x3f) << 2) | ecn.bits()
}

/// The IP and UDP headers of a datagram from `src` to `dst` as Linux sends it from an
/// unconnected UDP socket with `IP_PMTUDISC_DO`: IPv4 ID 0 and DF (hence a predictable ICRC),
/// TTL / hop limit 64, DSCP `dscp` and ECN field `ecn` (the ICRC masks both), no UDP
/// checksum. Lengths are set on emission.
pub(crate) fn headers(
    src: SocketAddr,
    dst: SocketAddr,
    dscp: u8,
    ecn: Ecn,
) -> Option<(IpRepr, UdpRepr)> {
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4(Ipv4Repr {
            src,
            dst,
            protocol: PROTO_UDP,
            dscp,
            ecn,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            payload_len: 0,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6(Ipv6Repr {
            src,
            dst,
            next_header: PROTO_UDP,
            dscp,
            ecn,
            flow_label: 0,
            hop_limit: 64,
            payload_len: 0,
        }),
        _ => return None,
    };
    let udp = UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        checksum: UdpChecksum::None,
    };
    Some((ip, udp))
}

/// The IP and UDP headers segments of coalesced datagrams from one sender arrived under,
/// kept to verify their ICRCs in place ([`Rx::segment`]): built once, then only the lengths
/// and the IPv4 identification change from one segment to the next (the IPv4 header
/// checksum is left as built: the ICRC masks it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentHeaders {
    from: SocketAddr,
    ecn: Ecn,
    buf: [u8; HEADROOM],
    ip_len: usize,
}

impl SegmentHeaders {
    /// The headers of a datagram from `from` to `local` with ECN field `ecn`.
    pub(crate) fn new(from: SocketAddr, local: SocketAddr, ecn: Ecn) -> Option<SegmentHeaders> {
        let (mut ip, udp) = headers(from, local, 0, ecn)?;
        ip.set_payload_len(UDP_LEN);
        let mut buf = [0u8; HEADROOM];
        let ip_len = ip.emit(&mut buf).ok()?;
        udp.emit_header(&mut buf[ip_len..], 0).ok()?;
        Some(SegmentHeaders {
            from,
            ecn,
            buf,
            ip_len,
        })
    }

    /// Whether these are the headers of segments from `from` with ECN field `ecn`.
    pub(crate) fn matches(&self, from: SocketAddr, ecn: Ecn) -> bool {
        self.from == from && self.ecn == ecn
    }

    /// Verifies the ICRC of `datagram` (BTH to ICRC), a segment under these headers with
    /// IPv4 identification `ident`.
    pub(crate) fn verify(&mut self, ident: u16, datagram: &[u8]) -> Result<(), Reject> {
        let body = datagram
            .len()
            .checked_sub(ICRC_LEN)
            .ok_or(Reject::Malformed)?;
        let udp_len = u16::try_from(UDP_LEN + datagram.len()).map_err(|_| Reject::Malformed)?;
        let n = self.ip_len;
        if self.from.is_ipv4() {
            let total = udp_len.checked_add(n as u16).ok_or(Reject::Malformed)?;
            self.buf[2..4].copy_from_slice(&total.to_be_bytes());
            self.buf[4..6].copy_from_slice(&ident.to_be_bytes());
        } else {
            self.buf[4..6].copy_from_slice(&udp_len.to_be_bytes());
        }
        self.buf[n + 4..n + 6].copy_from_slice(&udp_len.to_be_bytes());
        let computed =
            irn_wire::icrc::compute(&self.buf[..n], &self.buf[n..n + UDP_LEN], &datagram[..body])
                .map_err(|_| Reject::Malformed)?;
        let carried =
            u32::from_le_bytes(datagram[body..].try_into().map_err(|_| Reject::Malformed)?);
        if computed == carried {
            Ok(())
        } else {
            Err(Reject::Icrc)
        }
    }
}

/// Most packets one UDP GSO message carries. Linux accepts 64 (`UDP_MAX_SEGMENTS` before
/// 6.9, 128 since); the smaller is the portable bound.
pub(crate) const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes of UDP payload one GSO message carries: it is one IP datagram until the kernel
/// (or the NIC) cuts it, so it must fit the 16-bit IP and UDP length fields.
pub(crate) const GSO_MAX_BYTES: usize = 65_000;

/// Bytes a send gathers, as the kernel reads them: an address and a length. Made from a
/// slice ([`IoPart::of`]) or from registered memory lent to a transmit batch
/// (`device::lent`), which its owner keeps readable until the send returns. Only the kernel
/// reads through it (an address that is not readable fails the send with `EFAULT`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct IoPart {
    pub(crate) ptr: *const u8,
    pub(crate) len: usize,
}

impl IoPart {
    pub(crate) fn of(bytes: &[u8]) -> IoPart {
        IoPart {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }
}

/// One message of a send batch: `count` consecutive packets (UDP payloads) of the batch, all
/// to `dest`. One packet is one datagram; more go as one UDP GSO message (`UDP_SEGMENT`,
/// Linux 4.18): the kernel cuts it every `seg_len` bytes into datagrams with the same headers
/// — only the last may be shorter — and on the way out numbers their IPv4 identifications
/// 0, 1, 2, … (checked with software segmentation on a veth), which is what the packets'
/// ICRCs were computed over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxMsg {
    pub(crate) dest: SocketAddr,
    /// The UDP source port its packets were built with (the ICRC covers it): the socket
    /// bound to it sends them.
    pub(crate) sport: u16,
    /// Index of the first packet in the batch.
    pub(crate) first: usize,
    pub(crate) count: usize,
    /// Length of each packet but the last (which may be shorter).
    pub(crate) seg_len: u16,
    /// The traffic-class byte of every packet, DSCP and ECN field (`IP_TOS` / `IPV6_TCLASS`
    /// control message, [`tos`]).
    pub(crate) tos: u8,
    /// Its queue pair's peer takes GSO messages, so it may take more packets; sent with a UDP
    /// checksum, which GSO needs (the caller has the socket's `SO_NO_CHECK` cleared).
    pub(crate) coalesce: bool,
    /// The destination queue pair of its packets: a message carries one queue pair's, since
    /// a receiver that steers by queue pair (a group of engines, `device/group.rs`) steers
    /// a coalesced message by its first packet.
    pub(crate) dest_qpn: u32,
}

/// What [`send_batch`] did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sent {
    /// Packets (datagrams on the wire) sent, and their bytes.
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
    /// Packets the kernel refused: lost.
    pub(crate) errors: u64,
    /// GSO messages among those sent.
    pub(crate) gso: u64,
    /// `sendmmsg` calls that sent something.
    pub(crate) calls: u64,
    /// Packets sent with an 802.1Q tag, through a packet socket (`device/tagged.rs`).
    pub(crate) tagged: u64,
    /// Packets a tagging device sent untagged: no MAC address known for their peer.
    pub(crate) unresolved: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Sent) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.gso += o.gso;
        self.calls += o.calls;
        self.tagged += o.tagged;
        self.unresolved += o.unresolved;
    }
}

/// Sends `msgs` in order with `sendmmsg(2)`; waits for room when the socket buffer is full
/// (as a NIC's doorbell waits for a free descriptor). Packet `i` of the batch (a UDP payload)
/// is `parts[packets[i]]`, gathered by the kernel in order.
pub(crate) fn send_batch(
    sock: &UdpSocket,
    msgs: &[TxMsg],
    packets: &[std::ops::Range<usize>],
    parts: &[IoPart],
) -> Sent {
    let mut r = Sent::default();
    let mut at = 0;
    let count = |m: &TxMsg| {
        let b: usize = packets[m.first..m.first + m.count]
            .iter()
            .flat_map(|p| &parts[p.clone()])
            .map(|p| p.len)
            .sum();
        (m.count as u64, b as u64)
    };
    while at < msgs.len() {
        match sys::sendmmsg(sock.as_fd(), &msgs[at..], packets, parts) {
            Ok(n) if n > 0 => {
                r.calls += 1;
                for m in &msgs[at..at + n] {
                    let (d, b) = count(m);
                    r.packets += d;
                    r.bytes += b;
                    r.gso += u64::from(m.count > 1);
                }
                at += n;
            }
            Ok(_) => wait_writable(sock),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_writable(sock),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // The first message of the call failed (unreachable, too big): it is lost.
                r.errors += count(&msgs[at]).0;
                at += 1;
            }
        }
    }
    r
}

/// Waits (at most 10 ms) for room in the socket's send buffer.
pub(crate) fn wait_writable(sock: &UdpSocket) {
    let fd = rustix::event::PollFd::new(sock, rustix::event::PollFlags::OUT);
    let ts = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 10_000_000,
    };
    let _ = rustix::event::poll(&mut [fd], Some(&ts));
}

/// Why a received packet was dropped before reaching a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reject {
    /// Not a well-formed IP/UDP/InfiniBand packet.
    Malformed,
    /// The ICRC does not match (rxe drops these silently; irn counts them).
    Icrc,
}

/// A received RoCEv2 packet, split.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received<'a> {
    /// The sender's address and port.
    pub(crate) from: SocketAddr,
    /// The InfiniBand packet from its BTH to its ICRC (excluded).
    pub(crate) ib: &'a [u8],
    /// The UDP payload (BTH to ICRC included): on the raw path, possibly a same-host peer's
    /// whole GSO message (`Core::receive_coalesced`).
    pub(crate) datagram: &'a [u8],
    /// The IP header's ECN field.
    pub(crate) ecn: Ecn,
    /// The IPv4 identification (0 for IPv6, which has none): a GSO message's first
    /// segment's, the kernel numbering the others from it ([`TxMsg`]).
    pub(crate) ident: u16,
}

/// Splits a received IP packet; with `verify`, checks its ICRC.
///
/// The UDP checksum is not checked: on the UDP path the kernel did, and on the raw path a
/// packet sent from this host carries an unfinished one (checksum offload); the ICRC covers
/// all the checksum would.
pub(crate) fn split(packet: &[u8], verify: bool) -> Result<Received<'_>, Reject> {
    let (src, ecn, ident, datagram) = match packet.first().map(|b| b >> 4) {
        Some(4) => {
            let p = Ipv4Packet::new_checked(packet).map_err(|_| Reject::Malformed)?;
            if p.protocol() != PROTO_UDP || p.more_frags() || p.frag_offset() != 0 {
                return Err(Reject::Malformed);
            }
            let r = p.payload_range();
            (IpAddr::V4(p.src()), p.ecn(), p.ident(), &packet[r])
        }
        Some(6) => {
            let p = Ipv6Packet::new_checked(packet).map_err(|_| Reject::Malformed)?;
            if p.next_header() != PROTO_UDP {
                return Err(Reject::Malformed);
            }
            let r = p.payload_range();
            (IpAddr::V6(p.src()), p.ecn(), 0, &packet[r])
        }
        _ => return Err(Reject::Malformed),
    };
    let u = UdpPacket::new_checked(datagram).map_err(|_| Reject::Malformed)?;
    if usize::from(u.len()) != datagram.len() {
        return Err(Reject::Malformed);
    }
    let payload = &datagram[u.payload_range()];
    let Some(body_len) = payload.len().checked_sub(ICRC_LEN) else {
        return Err(Reject::Malformed);
    };
    if verify {
        match irn_wire::icrc::check_ip_packet(packet) {
            Ok(c) if c.ok() => {}
            Ok(_) => return Err(Reject::Icrc),
            Err(_) => return Err(Reject::Malformed),
        }
    }
    Ok(Received {
        from: SocketAddr::new(src, u.src_port()),
        ib: &payload[..body_len],
        datagram: payload,
        ecn,
        ident,
    })
}

#[allow(unsafe_code)]
pub(crate) mod sys;

#[cfg(test)]
mod tests {
    use super::*;
    use irn_wire::{IbRepr, RoceRepr};

    /// A Send Only packet with IPv4 identification `ident` from 10.0.0.1:49152 to
    /// 10.0.0.2:4791, as irn-wire emits it.
    fn packet_with_ident(ident: u16) -> Vec<u8> {
        let ib_bytes = [
            0x04, 0, 0xff, 0xff, 0, 0, 0, 0x12, 0x80, 0, 0, 7, 1, 2, 3, 4,
        ];
        let (ib, payload) = IbRepr::parse(&ib_bytes).expect("a Send Only");
        let mut repr = RoceRepr::ipv4(
            "10.0.0.1".parse().expect("addr"),
            "10.0.0.2".parse().expect("addr"),
            49152,
            ib,
        );
        if let IpRepr::V4(v4) = &mut repr.ip {
            v4.ident = ident;
            v4.ecn = Ecn::NotEct; // what a UDP socket sends by default
        }
        let mut buf = vec![0; repr.buffer_len()];
        let n = repr.emit(&mut buf, payload).expect("emit");
        buf.truncate(n);
        buf
    }

    fn packet() -> Vec<u8> {
        packet_with_ident(0)
    }

    #[test]
    fn active_mtu_follows_the_route_as_rxe_does() {
        // rxe's rule on the MTUs a netdev usually has.
        assert_eq!(ib_mtu_fitting(1500 - 80), 1024);
        assert_eq!(ib_mtu_fitting(9000 - 80), 4096);
        assert_eq!(ib_mtu_fitting(65536 - 80), 4096);
        assert_eq!(ib_mtu_fitting(2048), 2048);
        assert_eq!(ib_mtu_fitting(100), 256);
        // Loopback's 64 KiB route takes the largest.
        assert_eq!(active_mtu("127.0.0.1".parse().expect("addr")), 4096);
    }

    #[test]
    fn source_ports_are_linuxs() {
        // From rxe's own packets (shared/interop/captures): rc_pingpong (QPNs 17 ↔ 17),
        // write_bw (21 ↔ 21), read_bw (22 ↔ 22), and rxe's QP 25 answering an irn QP 0xBD3A70
        // (hostpeer_rc_pingpong).
        assert_eq!(roce_source_port(17, 17), 49441);
        assert_eq!(roce_source_port(21, 21), 49593);
        assert_eq!(roce_source_port(22, 22), 49636);
        assert_eq!(roce_source_port(25, 0xBD_3A70), 62973);
        // Symmetric, in the dynamic range, and spread over it.
        assert_eq!(
            roce_source_port(0xBD_3A70, 25),
            roce_source_port(25, 0xBD_3A70)
        );
        let ports: std::collections::BTreeSet<u16> = (1..=1000u32)
            .map(|q| roce_source_port(q.wrapping_mul(0x9E37_79B9) & 0xFF_FFFF, 0x12_3457))
            .collect();
        assert!(ports.iter().all(|&p| p >= 0xC000));
        assert!(ports.len() > 900, "{}", ports.len());
    }

    #[test]
    fn split_checks_the_icrc_only_when_asked() {
        let mut p = packet();
        let rx = split(&p, true).expect("a correct packet");
        assert_eq!(rx.from, "10.0.0.1:49152".parse().expect("addr"));
        assert_eq!(rx.datagram.len(), p.len() - 28);
        let last = p.len() - 1;
        p[last] ^= 1;
        assert_eq!(split(&p, true).map(|r| r.from), Err(Reject::Icrc));
        assert!(split(&p, false).is_ok());
        // A changed IP identification breaks it too (the ICRC covers it, unmasked).
        let mut q = packet_with_ident(1);
        let n = q.len();
        q[n - 4..].copy_from_slice(&packet()[n - 4..]);
        assert_eq!(split(&q, true).map(|r| r.from), Err(Reject::Icrc));
    }

    #[test]
    fn split_rejects_fragments_and_short_packets() {
        let mut p = packet();
        p[6] |= 0x20; // more fragments
        assert_eq!(split(&p, false).map(|r| r.from), Err(Reject::Malformed));
        let p = packet();
        for n in [0, 10, 20, 28, 30] {
            assert_eq!(
                split(&p[..n], false).map(|r| r.from),
                Err(Reject::Malformed),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn rebuilt_headers_are_what_linux_sent() {
        // On the UDP path the payload arrives alone; the rebuilt packet is the original.
        let p = packet();
        let mut buf = vec![0u8; HEADROOM + 256];
        let payload = &p[28..];
        buf[HEADROOM..HEADROOM + payload.len()].copy_from_slice(payload);
        let start = prepend_headers(
            &mut buf,
            "10.0.0.1:49152".parse().expect("addr"),
            "10.0.0.2:4791".parse().expect("addr"),
            payload.len(),
            Ecn::NotEct,
            0,
        )
        .expect("room");
        assert_eq!(&buf[start..HEADROOM + payload.len()], &p[..]);
    }
}
