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
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use irn_wire::ethernet::MacAddr;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::{AddressFamily, Protocol, RecvFlags, SendFlags, SocketType};

/// A raw Ethernet socket bound to one interface and one EtherType.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
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

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut out = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(MacAddr(out))
}

impl PacketSocket {
    /// Opens a socket on `iface` for frames of `ethertype`.
    pub fn open(iface: &str, ethertype: u16) -> io::Result<PacketSocket> {
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
        // ETH_P_ALL, in network byte order as packet(7) wants the protocol.
        const ETH_P_ALL: u16 = 0x0003;
        let proto = Protocol::from_raw(
            rustix::net::RawProtocol::new(u32::from(ETH_P_ALL.to_be()))
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "protocol 0"))?,
        );
        let fd = rustix::net::socket(AddressFamily::PACKET, SocketType::RAW, Some(proto))?;
        // Filter first, then bind: no frame of another type is queued in between.
        crate::net::setup_packet_socket(fd.as_fd(), mac.0, ethertype, 4 << 20)?;
        crate::net::sys::bind_packet(fd.as_fd(), ifindex, ETH_P_ALL)?;
        // Frames of other types that arrived between socket() and the filter: drain them.
        let mut scratch = [0u8; 64];
        while rustix::net::recv(&fd, &mut scratch[..], RecvFlags::DONTWAIT).is_ok() {}
        Ok(PacketSocket {
            fd,
            mac,
            ifindex,
            mtu,
            iface: iface.to_string(),
        })
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
