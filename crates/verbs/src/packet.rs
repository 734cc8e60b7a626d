//! Raw Ethernet through an `AF_PACKET` socket (packet(7)): the link `irn drp` runs the Dynamic
//! RDMA Protocol on (EtherType 0x01FF, seed 003 §2.1), where no IP or UDP header exists. Needs
//! `CAP_NET_RAW` (root, or a network namespace of one's own).
//!
//! An EtherType below 0x0600 is an IEEE 802.3 *length* to Linux (and to every switch): the
//! kernel files a frame of type 0x01FF under `ETH_P_802_2`, so a socket bound to protocol
//! 0x01FF would never see one. The socket is therefore bound to the interface for every
//! protocol (`ETH_P_ALL`) with a classic-BPF filter that keeps frames whose type/length field is
//! the EtherType asked for and this interface's MAC as destination (a packet socket also sees
//! the host's own outgoing frames); [`PacketSocket::recv`] checks the destination again.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use irn_wire::ethernet::MacAddr;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::{AddressFamily, Protocol, RecvFlags, SendFlags, SocketType};

/// A raw Ethernet socket bound to one interface and one EtherType.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    /// Frames come with the VLAN tag the kernel took off them, put back ([`PacketSocket::try_recv`]).
    auxdata: bool,
    mac: MacAddr,
    ifindex: i32,
    mtu: usize,
    iface: String,
}

fn read_sys(iface: &str, what: &str) -> io::Result<String> {
    let path = format!("/sys/class/net/{iface}/{what}");
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
}

/// An interface's speed from `/sys/class/net/IFACE/speed` (Mb/s there), in bits per second:
/// the rate its PHY counts pause quanta at (512 bit times each, IEEE 802.3 Annex 31B). `None`
/// when it reports none (a link down, a virtual interface without a speed).
pub fn link_speed(iface: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{iface}/speed")).ok()?;
    let mbps: i64 = text.trim().parse().ok()?;
    (mbps > 0).then(|| mbps as u64 * 1_000_000)
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut out = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(MacAddr(out))
}

/// An interface's index, MTU and MAC address, from sysfs.
fn interface(iface: &str) -> io::Result<(i32, usize, MacAddr)> {
    let ifindex: i32 = read_sys(iface, "ifindex")?
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad ifindex"))?;
    let mtu: usize = read_sys(iface, "mtu")?
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad MTU"))?;
    let mac = parse_mac(&read_sys(iface, "address")?).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{iface}: bad MAC address"),
        )
    })?;
    Ok((ifindex, mtu, mac))
}

/// `iface`'s index in the network namespace of socket `fd` (an ioctl): /sys shows the
/// namespace it was mounted in, which a thread that entered another one does not see.
fn ns_ifindex(fd: &OwnedFd, iface: &str) -> io::Result<i32> {
    i32::try_from(rustix::net::netdevice::name_to_index(fd, iface)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad ifindex"))
}

/// A packet socket for every protocol (`ETH_P_ALL`).
fn socket_all() -> io::Result<OwnedFd> {
    let proto = Protocol::from_raw(
        rustix::net::RawProtocol::new(u32::from(ETH_P_ALL.to_be()))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "protocol 0"))?,
    );
    Ok(rustix::net::socket_with(
        AddressFamily::PACKET,
        SocketType::RAW,
        rustix::net::SocketFlags::CLOEXEC,
        Some(proto),
    )?)
}

/// A packet socket of protocol 0: it takes no frame until `bind` names the interface and the
/// protocol, so none from another interface is queued in between.
fn socket_unbound() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::PACKET,
        SocketType::RAW,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}

/// ETH_P_ALL, in host order (packet(7) wants it in network order).
const ETH_P_ALL: u16 = 0x0003;

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl PacketSocket {
    /// A socket whose frames come as the kernel hands them over (no tag put back).
    fn plain(fd: OwnedFd, mac: MacAddr, ifindex: i32, mtu: usize, iface: &str) -> PacketSocket {
        PacketSocket {
            fd,
            auxdata: false,
            mac,
            ifindex,
            mtu,
            iface: iface.to_string(),
        }
    }

    /// Opens `iface` as a port of a switch (`irn switch`): every frame the interface receives,
    /// of any type and to any destination (the interface is made promiscuous), and none of
    /// the frames this host sends on it. Frames are read as the kernel hands them over: a
    /// sender on the same machine whose link offloads checksums or segmentation
    /// (`ethtool -K dev tx off` turns both off) hands over partial checksums or 64 KB
    /// super-frames, which a switch cannot forward as they are.
    pub fn open_port(iface: &str) -> io::Result<PacketSocket> {
        let (ifindex, mtu, mac) = interface(iface)?;
        let fd = socket_unbound()?;
        crate::net::sys::packet_port(fd.as_fd(), ifindex)?;
        crate::net::sys::packet_auxdata(fd.as_fd())?;
        // 8 MB to absorb bursts while the switch paces.
        crate::net::set_receive_buffer(fd.as_fd(), 8 << 20);
        crate::net::sys::bind_packet(fd.as_fd(), ifindex, ETH_P_ALL)?;
        Ok(PacketSocket {
            fd,
            auxdata: true,
            mac,
            ifindex,
            mtu,
            iface: iface.to_string(),
        })
    }

    /// Opens `iface` for the MAC control frames (802.1Qbb PFC, 802.3x PAUSE: EtherType
    /// 0x8808) that arrive on it, whatever their destination (01:80:C2:00:00:01, a link-local
    /// group no stack joins): what a NIC's flow control reads.
    pub fn open_mac_control(iface: &str) -> io::Result<PacketSocket> {
        let fd = socket_unbound()?;
        let ifindex = ns_ifindex(&fd, iface)?;
        let (mtu, mac) = interface(iface)
            .ok()
            .filter(|&(i, ..)| i == ifindex)
            .map_or((1500, MacAddr([0; 6])), |(_, mtu, mac)| (mtu, mac));
        crate::net::sys::bind_packet(
            fd.as_fd(),
            ifindex,
            u16::from(irn_wire::ethernet::EtherType::MacControl),
        )?;
        Ok(PacketSocket::plain(fd, mac, ifindex, mtu, iface))
    }

    /// Opens `iface` to send whole frames on, receiving none (bound to protocol 0): how a
    /// device puts its own Ethernet header, an 802.1Q tag in it, in front of its packets.
    pub fn open_sender(iface: &str) -> io::Result<PacketSocket> {
        let fd = socket_unbound()?;
        let ifindex = ns_ifindex(&fd, iface)?;
        let (mtu, mac) = match interface(iface) {
            Ok((i, mtu, mac)) if i == ifindex => (mtu, mac),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{iface}: its MAC address is not readable in /sys here"),
                ))
            }
        };
        crate::net::sys::bind_packet(fd.as_fd(), ifindex, 0)?;
        Ok(PacketSocket::plain(fd, mac, ifindex, mtu, iface))
    }

    /// Sends one frame: its Ethernet header `head`, then what it gathers from `parts` (FCS
    /// not included).
    pub(crate) fn send_gather(&self, head: &[u8], parts: &[crate::net::IoPart]) -> io::Result<()> {
        let want = head.len() + parts.iter().map(|p| p.len).sum::<usize>();
        let n = crate::net::sys::send_gather(self.fd.as_fd(), head, parts)?;
        if n != want {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
        }
        Ok(())
    }

    /// Takes one frame if one is waiting, whatever its destination; never blocks. On a
    /// switch's port ([`PacketSocket::open_port`]) a frame that arrived with an 802.1Q tag
    /// has it back: Linux takes the tag off a frame before any packet socket sees it, and
    /// hands it over beside the frame (`PACKET_AUXDATA`), as libpcap reads it — a switch that
    /// forwarded the frame without it would strip every tag.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if self.auxdata {
            return match crate::net::sys::recv_frame(self.fd.as_fd(), buf)? {
                None => Ok(None),
                Some((n, None)) => Ok(Some(n)),
                Some((n, Some((tpid, tci)))) => Ok(Some(reinsert_tag(buf, n, tpid, tci))),
            };
        }
        match rustix::net::recv(&self.fd, &mut *buf, RecvFlags::DONTWAIT) {
            Ok((n, _)) => Ok(Some(n.min(buf.len()))),
            Err(rustix::io::Errno::AGAIN) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Frames the kernel dropped since the last call because this socket's receive buffer
    /// was full (`PACKET_STATISTICS`).
    pub fn kernel_drops(&self) -> io::Result<u64> {
        Ok(crate::net::sys::packet_stats(self.fd.as_fd())?.1)
    }

    /// Opens a socket on `iface` for frames of `ethertype`.
    pub fn open(iface: &str, ethertype: u16) -> io::Result<PacketSocket> {
        let (ifindex, mtu, mac) = interface(iface)?;
        let fd = socket_all()?;
        // Filter first, then bind: no frame of another type is queued in between.
        crate::net::setup_packet_socket(fd.as_fd(), mac.0, ethertype, 4 << 20)?;
        crate::net::sys::bind_packet(fd.as_fd(), ifindex, ETH_P_ALL)?;
        // Frames of other types that arrived between socket() and the filter: drain them.
        let mut scratch = [0u8; 64];
        while rustix::net::recv(&fd, &mut scratch[..], RecvFlags::DONTWAIT).is_ok() {}
        Ok(PacketSocket::plain(fd, mac, ifindex, mtu, iface))
    }

    /// This interface's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The interface's name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface's MTU: the largest payload after the Ethernet header.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The interface's index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Sends one whole Ethernet frame (header included, FCS not).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let n = rustix::net::send(&self.fd, frame, SendFlags::empty())?;
        if n != frame.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
        }
        Ok(())
    }

    /// Waits up to `timeout` for a frame addressed to this interface; returns its length in
    /// `buf`, or `None` on timeout.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        let ts = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        loop {
            let (n, _) = match rustix::net::recv(&self.fd, &mut *buf, RecvFlags::DONTWAIT) {
                Ok(r) => r,
                Err(rustix::io::Errno::AGAIN) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let n = n.min(buf.len());
            if n >= 14 && buf[..6] == self.mac.0 {
                return Ok(Some(n));
            }
            // Not ours (our own outgoing frame, a broadcast): look at the next one.
        }
    }
}

/// Puts the VLAN tag (`tpid`, `tci`) back into the frame of `n` bytes in `buf`, after its
/// addresses; returns its length, which loses its last bytes if `buf` has no room for them.
fn reinsert_tag(buf: &mut [u8], n: usize, tpid: u16, tci: u16) -> usize {
    if n < 12 || buf.len() < 16 {
        return n;
    }
    let len = (n + 4).min(buf.len());
    buf.copy_within(12..len - 4, 16);
    buf[12..14].copy_from_slice(&tpid.to_be_bytes());
    buf[14..16].copy_from_slice(&tci.to_be_bytes());
    len
}

/// Waits up to `timeout` for any of `socks` to have a frame; which of them have one (all
/// `false` on timeout or an interrupted wait).
pub fn wait_any(socks: &[PacketSocket], timeout: Duration) -> io::Result<Vec<bool>> {
    let ts = Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    let mut fds: Vec<PollFd<'_>> = socks
        .iter()
        .map(|s| PollFd::new(&s.fd, PollFlags::IN))
        .collect();
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(fds.iter().map(|f| !f.revents().is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_goes_back_after_the_addresses() {
        let frame: Vec<u8> = (0..30).collect();
        let mut buf = frame.clone();
        buf.resize(64, 0xee);
        let n = reinsert_tag(&mut buf, 30, 0x8100, (3 << 13) | 7);
        assert_eq!(n, 34);
        assert_eq!(&buf[..12], &frame[..12]);
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0x60, 0x07]);
        assert_eq!(&buf[16..34], &frame[12..]);
        // No room: the frame keeps its head, tag included, and loses its tail.
        let mut tight = frame.clone();
        assert_eq!(reinsert_tag(&mut tight, 30, 0x88a8, 0), 30);
        assert_eq!(&tight[12..16], &[0x88, 0xa8, 0, 0]);
        assert_eq!(&tight[16..], &frame[12..26]);
        // A runt is left as it is, and so is a frame in a buffer too small for the tag.
        let mut runt = [1u8; 8];
        assert_eq!(reinsert_tag(&mut runt, 8, 0x8100, 0), 8);
        assert_eq!(runt, [1; 8]);
        let mut small = [2u8; 14];
        assert_eq!(reinsert_tag(&mut small, 14, 0x8100, 0), 14);
        assert_eq!(small, [2; 14]);
    }

    #[test]
    fn macs_parse_with_colons_or_dashes_and_nothing_else() {
        assert_eq!(
            parse_mac("0a:1b:2c:3d:4e:5f"),
            Some(MacAddr([0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]))
        );
        assert_eq!(parse_mac("0a-1b-2c-3d-4e-5f").map(|m| m.0[5]), Some(0x5f));
        assert_eq!(parse_mac("0a:1b:2c:3d:4e"), None);
        assert_eq!(parse_mac("0a:1b:2c:3d:4e:5f:60"), None);
        assert_eq!(parse_mac("zz:1b:2c:3d:4e:5f"), None);
    }
}
