//! Frames with an 802.1Q tag ([`DeviceConfig::vlan`](super::DeviceConfig::vlan)): the device
//! writes each packet's Ethernet header itself, with the tag's PCP set to the queue pair's
//! priority — its DSCP ÷ 8, the priority the DSCP maps to — as a RoCE NIC does for VLAN-based
//! PFC (seed 001 §3; the PCP is IEEE 802.1Q's priority code point, §6.9.3).
//!
//! The UDP socket cannot do this: the kernel writes the Ethernet header, and only a VLAN
//! interface (`CONFIG_VLAN_8021Q`) or tc's `vlan` action would put a tag in it — this
//! machine's kernel has neither. So a tagged device sends through a
//! packet socket on the interface named ([`TaggedTx`]): header, then the IP packet it built
//! in its transmit batch (`device/tx.rs`), gathered by the kernel in one `sendmsg`. The IP
//! packet is the one the UDP socket would have sent — the same IP and UDP headers, IPv4
//! identification and all, so its ICRC is unchanged — but it bypasses the host's IP stack, so
//! its destination MAC must be known: the peer's entry in the kernel's neighbour table
//! (`/proc/net/arp`, which the out-of-band exchange with the peer fills as any TCP
//! connection does). A packet to a peer with no complete entry leaves untagged through the
//! UDP socket, whose kernel resolves the address, and is counted (`tx_tag_unresolved`);
//! the table is read again at most every [`REREAD`], and a known address is read again
//! once it is older than [`REFRESH`] (a peer whose MAC changed). Only peers on the
//! interface's own subnet are found: the entry looked up is the peer's own, not a
//! gateway's, so a peer behind a router gets its packets untagged (and counted).
//!
//! The default VLAN is 0: a *priority tag* (IEEE 802.1Q §9.6), which carries the PCP and no
//! VLAN membership, and which a host without VLAN interfaces accepts — Linux takes the tag
//! off and delivers the packet. A tag of another VLAN reaches only hosts with an interface
//! on that VLAN. IPv4 only, like the raw receive path.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use irn_wire::ethernet::{EtherType, EthernetRepr, MacAddr, VlanTag};

use crate::net::IoPart;
use crate::packet::{parse_mac, PacketSocket};

/// How often a device whose peer has no neighbour entry reads the table again, at most.
pub(crate) const REREAD: Duration = Duration::from_millis(10);

/// How long a peer's MAC address is used before the table is read for it again.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// Length of a tagged Ethernet header: addresses, tag, EtherType.
pub(crate) const TAGGED_HEADER_LEN: usize = 18;

/// What became of a packet offered to [`TaggedTx::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tagged {
    /// Sent with its tag.
    Sent,
    /// The peer's MAC address is not known: the caller sends it untagged.
    Unresolved,
    /// The kernel refused it: lost.
    Failed,
}

/// A device's tagged transmission: the interface's packet socket, the VLAN, and what it knows
/// of its peers' MAC addresses.
#[derive(Debug)]
pub(crate) struct TaggedTx {
    sock: PacketSocket,
    vid: u16,
    neighbours: Mutex<Neighbours>,
}

impl TaggedTx {
    /// Tagged transmission out of `iface` in VLAN `vid` (0: priority tags).
    pub(crate) fn open(iface: &str, vid: u16) -> io::Result<TaggedTx> {
        if vid > 0x0fff {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("VLAN {vid}: a VLAN identifier is 0 to 4095"),
            ));
        }
        let sock = PacketSocket::open_sender(iface)
            .map_err(|e| io::Error::new(e.kind(), format!("vlan on {iface}: {e}")))?;
        Ok(TaggedTx {
            sock,
            vid,
            neighbours: Mutex::new(Neighbours::new(iface)),
        })
    }

    /// Sends the IP packet gathered from `packet` to `dest` behind a tagged Ethernet header
    /// whose PCP is the priority of the packet's traffic-class byte `tos` (DSCP ÷ 8).
    pub(crate) fn send(&self, dest: IpAddr, tos: u8, packet: &[IoPart]) -> Tagged {
        let IpAddr::V4(ip) = dest else {
            return Tagged::Unresolved;
        };
        let dst = {
            let mut n = self.neighbours.lock().unwrap_or_else(|p| p.into_inner());
            n.lookup(ip, Instant::now(), read_arp)
        };
        let Some(dst) = dst else {
            return Tagged::Unresolved;
        };
        let header = header(self.sock.mac(), dst, self.vid, tos);
        match self.sock.send_gather(&header, packet) {
            Ok(()) => Tagged::Sent,
            Err(_) => Tagged::Failed,
        }
    }
}

/// The tagged Ethernet header of an IPv4 packet with traffic-class byte `tos` from `src` to
/// `dst` in VLAN `vid`: PCP = DSCP ÷ 8, drop eligibility 0.
pub(crate) fn header(src: MacAddr, dst: MacAddr, vid: u16, tos: u8) -> [u8; TAGGED_HEADER_LEN] {
    let mut h = [0u8; TAGGED_HEADER_LEN];
    let repr = EthernetRepr {
        src,
        dst,
        vlan: Some(VlanTag {
            pcp: tos >> 5,
            dei: false,
            vid: vid & 0x0fff,
        }),
        ethertype: EtherType::Ipv4,
    };
    // 18 bytes, a PCP of 3 bits and a VID of 12: the emission cannot fail.
    let _ = repr.emit(&mut h);
    h
}

/// The peers' MAC addresses the device has read from the neighbour table.
#[derive(Debug)]
struct Neighbours {
    iface: String,
    /// Each peer's address, and when the table gave it.
    macs: BTreeMap<Ipv4Addr, (MacAddr, Instant)>,
    read_at: Option<Instant>,
}

impl Neighbours {
    fn new(iface: &str) -> Neighbours {
        Neighbours {
            iface: iface.to_string(),
            macs: BTreeMap::new(),
            read_at: None,
        }
    }

    /// `ip`'s MAC address: known for less than [`REFRESH`], or found in the table `read`
    /// returns (read at most every [`REREAD`]); an address the table no longer has is kept.
    fn lookup(&mut self, ip: Ipv4Addr, now: Instant, read: fn() -> String) -> Option<MacAddr> {
        let known = self.macs.get(&ip).copied();
        if let Some((m, at)) = known {
            if now.saturating_duration_since(at) < REFRESH {
                return Some(m);
            }
        }
        if self
            .read_at
            .is_some_and(|t| now.saturating_duration_since(t) < REREAD)
        {
            return known.map(|(m, _)| m);
        }
        self.read_at = Some(now);
        for (a, m) in parse_arp(&read(), &self.iface) {
            self.macs.insert(a, (m, now));
        }
        self.macs.get(&ip).map(|&(m, _)| m)
    }
}

/// The kernel's IPv4 neighbour table of this network namespace.
fn read_arp() -> String {
    std::fs::read_to_string("/proc/net/arp").unwrap_or_default()
}

/// The complete entries (flag `ATF_COM`) on `iface` of an IPv4 neighbour table as
/// `/proc/net/arp` shows it: `IP address, HW type, Flags, HW address, Mask, Device`.
fn parse_arp(text: &str, iface: &str) -> Vec<(Ipv4Addr, MacAddr)> {
    const ATF_COM: u32 = 0x2;
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [ip, _, flags, mac, _, dev] = f[..] else {
                return None;
            };
            let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).ok()?;
            let mac = parse_mac(mac).filter(|m| m.0 != [0; 6])?;
            (dev == iface && flags & ATF_COM != 0).then_some((ip.parse().ok()?, mac))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
IP address       HW type     Flags       HW address            Mask     Device
10.1.0.3         0x1         0x2         0a:0b:0c:0d:0e:03     *        e0
10.1.0.4         0x1         0x0         00:00:00:00:00:00     *        e0
10.2.0.9         0x1         0x2         0a:0b:0c:0d:0e:09     *        eth1
10.1.0.5         0x1         0x6         0a:0b:0c:0d:0e:05     *        e0
";

    #[test]
    fn the_table_gives_complete_entries_on_the_interface_only() {
        let got = parse_arp(TABLE, "e0");
        assert_eq!(
            got,
            [
                (Ipv4Addr::new(10, 1, 0, 3), MacAddr([10, 11, 12, 13, 14, 3])),
                (Ipv4Addr::new(10, 1, 0, 5), MacAddr([10, 11, 12, 13, 14, 5])),
            ]
        );
        assert!(parse_arp("garbage\nmore garbage here", "e0").is_empty());
        assert!(parse_arp("", "e0").is_empty());
    }

    #[test]
    fn a_missing_neighbour_is_looked_up_again_no_more_often_than_reread() {
        let mut n = Neighbours::new("e0");
        let t = Instant::now();
        let peer = Ipv4Addr::new(10, 1, 0, 3);
        // An empty table: not found, and not read again within REREAD.
        assert_eq!(n.lookup(peer, t, String::new), None);
        assert_eq!(n.lookup(peer, t + REREAD / 2, || TABLE.into()), None);
        // Later, it is found, and kept.
        let mac = Some(MacAddr([10, 11, 12, 13, 14, 3]));
        assert_eq!(n.lookup(peer, t + REREAD, || TABLE.into()), mac);
        assert_eq!(n.lookup(peer, t + REREAD, String::new), mac);
        // Past REFRESH the table is read again: a new MAC replaces the old one, and a table
        // that lost the entry leaves the last one known.
        let moved = || TABLE.replace("0a:0b:0c:0d:0e:03", "0a:0b:0c:0d:0e:33");
        let later = t + REREAD + REFRESH;
        assert_eq!(
            n.lookup(peer, later, moved),
            Some(MacAddr([10, 11, 12, 13, 14, 0x33]))
        );
        let much_later = later + REFRESH + REREAD;
        assert_eq!(
            n.lookup(peer, much_later, String::new),
            Some(MacAddr([10, 11, 12, 13, 14, 0x33]))
        );
    }

    #[test]
    fn the_header_carries_the_dscps_priority_as_pcp() {
        let (src, dst) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        // DSCP 26 (priority 3), ECT(0): TOS 0x6a.
        let h = header(src, dst, 0, (26 << 2) | 1);
        let f = irn_wire::EthernetFrame::new_checked(&h[..]).expect("a whole header");
        let repr = EthernetRepr::parse(&f).expect("parses");
        assert_eq!((repr.src, repr.dst), (src, dst));
        assert_eq!(repr.ethertype, EtherType::Ipv4);
        let tag = repr.vlan.expect("tagged");
        assert_eq!((tag.pcp, tag.vid, tag.dei), (3, 0, false));
        let tag = EthernetRepr::parse(
            &irn_wire::EthernetFrame::new_checked(&header(src, dst, 100, 7 << 5)[..]).expect(""),
        )
        .expect("parses")
        .vlan
        .expect("tagged");
        assert_eq!((tag.pcp, tag.vid), (7, 100));
    }
}
