//! Classifying whole frames: what a capture or a raw socket hands over.

use crate::drp::{Drp, DrpRepr};
use crate::error::Result;
use crate::ethernet::{EtherType, EthernetFrame, EthernetRepr};
use crate::ipv4::{Ipv4Packet, PROTO_UDP};
use crate::ipv6::Ipv6Packet;
use crate::mac_control::{MacControl, MacControlRepr};
use crate::roce::{RocePacket, RoceRepr};
use crate::udp::{UdpPacket, ROCEV2_PORT};

/// Why a frame is not one this codec decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Other {
    /// An EtherType that is neither IP, MAC control nor DRP (ARP, LLDP, ...).
    EtherType(EtherType),
    /// IP, but not UDP (TCP, ICMP, ...).
    IpProtocol(u8),
    /// An IP version nibble other than 4 and 6 behind an IP EtherType.
    IpVersion(u8),
    /// UDP, but not to port 4791 (nor another port given as RoCEv2).
    UdpPort(u16),
}

/// A decoded frame.
///
/// The RoCEv2 variant is much larger than the others (it holds every extension header by
/// value); boxing it would cost an allocation per packet on the decode path, so it is not.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A RoCEv2 packet (UDP destination port 4791, or another port given as RoCEv2).
    RoceV2 {
        /// The Ethernet header; `None` for captures that start at IP.
        eth: Option<EthernetRepr>,
        /// The packet.
        packet: RocePacket<'a>,
    },
    /// A PAUSE or PFC frame.
    MacControl {
        /// The Ethernet header.
        eth: EthernetRepr,
        /// What it says.
        control: MacControlRepr,
    },
    /// A Dynamic RDMA Protocol frame.
    Drp {
        /// The Ethernet header.
        eth: EthernetRepr,
        /// The DRP header.
        drp: DrpRepr,
        /// Its payload (data frames).
        payload: &'a [u8],
    },
    /// Anything else: counted and skipped by a decoder.
    Other {
        /// The Ethernet header, when there is one.
        eth: Option<EthernetRepr>,
        /// What it is.
        what: Other,
    },
}

impl<'a> Frame<'a> {
    /// Decodes an Ethernet II frame (without FCS).
    ///
    /// Errors only for frames that claim to be one of the decoded kinds and are not well-formed;
    /// a frame of another kind is [`Frame::Other`], never an error.
    pub fn parse_ethernet(bytes: &'a [u8]) -> Result<Frame<'a>> {
        Self::parse_ethernet_on_ports(bytes, &[ROCEV2_PORT])
    }

    /// [`Frame::parse_ethernet`], taking UDP datagrams to any of `ports` as RoCEv2
    /// ([`RoceRepr::parse_on_ports`]).
    pub fn parse_ethernet_on_ports(bytes: &'a [u8], ports: &[u16]) -> Result<Frame<'a>> {
        let f = EthernetFrame::new_checked(bytes)?;
        let eth = EthernetRepr::parse(&f)?;
        let payload = &bytes[f.header_len()..];
        match eth.ethertype {
            EtherType::Ipv4 | EtherType::Ipv6 => Self::from_ip(Some(eth), payload, ports),
            EtherType::MacControl => {
                let control = MacControlRepr::parse(&MacControl::new_checked(payload)?)?;
                Ok(Frame::MacControl { eth, control })
            }
            EtherType::Drp => {
                let v = Drp::new_checked(payload)?;
                let drp = DrpRepr::parse(&v)?;
                Ok(Frame::Drp {
                    eth,
                    drp,
                    payload: &payload[v.payload_range()],
                })
            }
            other => Ok(Frame::Other {
                eth: Some(eth),
                what: Other::EtherType(other),
            }),
        }
    }

    /// Decodes a packet that starts at the IP header (raw-IP captures, IP sockets).
    pub fn parse_ip(bytes: &'a [u8]) -> Result<Frame<'a>> {
        Self::from_ip(None, bytes, &[ROCEV2_PORT])
    }

    /// [`Frame::parse_ip`], taking UDP datagrams to any of `ports` as RoCEv2.
    pub fn parse_ip_on_ports(bytes: &'a [u8], ports: &[u16]) -> Result<Frame<'a>> {
        Self::from_ip(None, bytes, ports)
    }

    fn from_ip(eth: Option<EthernetRepr>, bytes: &'a [u8], ports: &[u16]) -> Result<Frame<'a>> {
        if let Some(what) = not_rocev2(bytes, ports) {
            return Ok(Frame::Other { eth, what });
        }
        Ok(Frame::RoceV2 {
            eth,
            packet: RoceRepr::parse_on_ports(bytes, ports)?,
        })
    }
}

/// Whether an IP packet is plainly not RoCEv2 (not UDP to one of `ports`), looking only at
/// what locates the UDP destination port. A packet too short to tell is treated as RoCEv2, so
/// that parsing reports the damage.
fn not_rocev2(bytes: &[u8], ports: &[u16]) -> Option<Other> {
    let (proto, datagram) = match bytes.first().map(|b| b >> 4) {
        Some(4) => {
            let p = Ipv4Packet::new_unchecked(bytes);
            if bytes.len() < crate::ipv4::HEADER_LEN
                || p.header_len() < crate::ipv4::HEADER_LEN
                || p.header_len() > bytes.len()
            {
                return None;
            }
            (p.protocol(), &bytes[p.header_len()..])
        }
        Some(6) => {
            let p = Ipv6Packet::new_unchecked(bytes);
            if bytes.len() < crate::ipv6::HEADER_LEN {
                return None;
            }
            (p.next_header(), &bytes[crate::ipv6::HEADER_LEN..])
        }
        Some(v) => return Some(Other::IpVersion(v)),
        None => return None,
    };
    if proto != PROTO_UDP {
        return Some(Other::IpProtocol(proto));
    }
    if datagram.len() < 4 {
        return None;
    }
    let port = UdpPacket::new_unchecked(datagram).dst_port();
    (!ports.contains(&port)).then_some(Other::UdpPort(port))
}
