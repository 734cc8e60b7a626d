//! Whole RoCEv2 packets: IP (v4 or v6) / UDP (port 4791) / InfiniBand packet / ICRC
//! (SPEC T2; RoCEv2 annex A17).

use std::net::IpAddr;

use crate::error::{need, room, Error, Layer, Result};
use crate::ethernet::{EtherType, EthernetRepr};
use crate::ib::IbRepr;
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{Ecn, Ipv4Packet, Ipv4Repr, PROTO_UDP};
use crate::ipv6::{Ipv6Packet, Ipv6Repr};
use crate::udp::{UdpPacket, UdpRepr, HEADER_LEN as UDP_LEN, ROCEV2_PORT};

/// An IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.src.into(),
            IpRepr::V6(r) => r.src.into(),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.dst.into(),
            IpRepr::V6(r) => r.dst.into(),
        }
    }

    /// DSCP.
    pub fn dscp(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.dscp,
            IpRepr::V6(r) => r.dscp,
        }
    }

    /// ECN bits.
    pub fn ecn(&self) -> Ecn {
        match self {
            IpRepr::V4(r) => r.ecn,
            IpRepr::V6(r) => r.ecn,
        }
    }

    /// Sets the ECN bits (a switch marking CE does this).
    pub fn set_ecn(&mut self, ecn: Ecn) {
        match self {
            IpRepr::V4(r) => r.ecn = ecn,
            IpRepr::V6(r) => r.ecn = ecn,
        }
    }

    /// Header length.
    #[inline]
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.buffer_len(),
            IpRepr::V6(r) => r.buffer_len(),
        }
    }

    /// Payload length.
    pub fn payload_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: usize) {
        match self {
            IpRepr::V4(r) => r.payload_len = len,
            IpRepr::V6(r) => r.payload_len = len,
        }
    }

    /// The EtherType that carries it.
    pub fn ethertype(&self) -> EtherType {
        match self {
            IpRepr::V4(_) => EtherType::Ipv4,
            IpRepr::V6(_) => EtherType::Ipv6,
        }
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        match self {
            IpRepr::V4(r) => r.emit(buf),
            IpRepr::V6(r) => r.emit(buf),
        }
    }
}

/// A RoCEv2 packet from the IP header to the ICRC, payload aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceRepr {
    /// IP header. Its protocol must be UDP; its payload length is derived on emission.
    pub ip: IpRepr,
    /// UDP header (destination port 4791).
    pub udp: UdpRepr,
    /// The InfiniBand packet.
    pub ib: IbRepr,
}

/// A parsed RoCEv2 packet: its representation, its payload, and its ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// Headers.
    pub repr: RoceRepr,
    /// Payload bytes (without pad).
    pub payload: &'a [u8],
    /// Carried and computed ICRC. A bad ICRC is not a parse error: the packet is still decoded,
    /// and a receiver drops it.
    pub icrc: icrc::IcrcCheck,
}

impl RoceRepr {
    /// A RoCEv2-over-IPv4 packet as Linux sends it from an unconnected UDP socket with
    /// `IP_MTU_DISCOVER = IP_PMTUDISC_DO`: IP ID 0 (which makes the ICRC predictable), DF set,
    /// TTL 64, DSCP 0, ECN-capable (ECT(0)), destination port 4791, no UDP checksum (as rxe).
    /// Adjust the fields afterwards for anything else.
    pub fn ipv4(
        src: std::net::Ipv4Addr,
        dst: std::net::Ipv4Addr,
        src_port: u16,
        ib: IbRepr,
    ) -> RoceRepr {
        let mut r = RoceRepr {
            ip: IpRepr::V4(Ipv4Repr {
                src,
                dst,
                protocol: PROTO_UDP,
                dscp: 0,
                ecn: Ecn::Ect0,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port,
                dst_port: ROCEV2_PORT,
                checksum: crate::udp::UdpChecksum::None,
            },
            ib,
        };
        r.ip.set_payload_len(r.ip_payload_len());
        r
    }

    /// Length of the IP payload this packet has: UDP header, IB packet, ICRC.
    #[inline]
    pub fn ip_payload_len(&self) -> usize {
        self.ip_payload_len_with(self.ib.header_len())
    }

    /// [`RoceRepr::ip_payload_len`] from the InfiniBand headers' length, which a sender
    /// computes once ([`RoceRepr::emit`], [`RoceRepr::emit_gather`]).
    #[inline]
    fn ip_payload_len_with(&self, ib_header_len: usize) -> usize {
        UDP_LEN + self.ib.buffer_len_with(ib_header_len) + ICRC_LEN
    }

    /// Length of the whole IP packet.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        self.ip.header_len() + self.ip_payload_len()
    }

    /// Parses a RoCEv2 packet from its IP header on. Bytes past the IP length (Ethernet padding)
    /// are ignored.
    pub fn parse(packet: &[u8]) -> Result<RocePacket<'_>> {
        Self::parse_on_ports(packet, &[ROCEV2_PORT])
    }

    /// [`RoceRepr::parse`] for a packet whose UDP destination port is any of `ports` — the
    /// IANA port 4791 (RoCEv2 annex A17.2) and those an operator says carry RoCEv2 too, as a
    /// protocol analyser's "decode as" does (an irn device that fell back to another port on
    /// a shared address, `irn decode --udp-port`). The port is not in the ICRC's masked
    /// fields: the ICRC checks the same either way.
    pub fn parse_on_ports<'a>(packet: &'a [u8], ports: &[u16]) -> Result<RocePacket<'a>> {
        let (ip, ip_header, datagram) = match packet.first().map(|b| b >> 4) {
            Some(4) => {
                let v = Ipv4Packet::new_checked(packet)?;
                let r = Ipv4Repr::parse(&v)?;
                if r.protocol != PROTO_UDP {
                    return Err(Error::Malformed {
                        layer: Layer::Ipv4,
                        what: "protocol is not UDP",
                    });
                }
                (
                    IpRepr::V4(r),
                    &packet[..v.header_len()],
                    &packet[v.payload_range()],
                )
            }
            Some(6) => {
                let v = Ipv6Packet::new_checked(packet)?;
                let r = Ipv6Repr::parse(&v)?;
                if r.next_header != PROTO_UDP {
                    return Err(Error::Malformed {
                        layer: Layer::Ipv6,
                        what: "next header is not UDP",
                    });
                }
                (
                    IpRepr::V6(r),
                    &packet[..r.buffer_len()],
                    &packet[v.payload_range()],
                )
            }
            Some(_) => {
                return Err(Error::Malformed {
                    layer: Layer::Ipv4,
                    what: "IP version is neither 4 nor 6",
                })
            }
            None => {
                return Err(Error::Truncated {
                    layer: Layer::Ipv4,
                    need: 1,
                    have: 0,
                })
            }
        };
        let u = UdpPacket::new_checked(datagram)?;
        // Bytes inside the IP packet but past the UDP datagram have no place in a RoCEv2 packet
        // (Ethernet padding lies outside the IP length): the lengths must agree.
        if usize::from(u.len()) != datagram.len() {
            return Err(Error::Malformed {
                layer: Layer::Udp,
                what: "UDP length differs from the IP payload length",
            });
        }
        let udp = UdpRepr::parse(&u, ip.src(), ip.dst())?;
        if !ports.contains(&udp.dst_port) {
            return Err(Error::Malformed {
                layer: Layer::Udp,
                what: if ports == [ROCEV2_PORT] {
                    "destination port is not 4791"
                } else {
                    "destination port is not 4791 nor another port given as RoCEv2"
                },
            });
        }
        let ib_bytes = &datagram[u.payload_range()];
        need(Layer::Bth, ib_bytes, crate::bth::BTH_LEN)?;
        need(Layer::Icrc, ib_bytes, crate::bth::BTH_LEN + ICRC_LEN)?;
        let (body, tail) = ib_bytes.split_at(ib_bytes.len() - ICRC_LEN);
        let carried = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let computed = icrc::compute(ip_header, &datagram[..UDP_LEN], body)?;
        let (ib, payload) = IbRepr::parse(body)?;
        Ok(RocePacket {
            repr: RoceRepr { ip, udp, ib },
            payload,
            icrc: icrc::IcrcCheck { carried, computed },
        })
    }

    /// Writes the IP packet — headers, `payload`, pad and ICRC — at the start of `buf`, deriving
    /// the IP and UDP lengths. Returns [`RoceRepr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        // The InfiniBand headers' length once: every other length follows from it.
        let ib_header_len = self.ib.header_len();
        let ip_payload_len = self.ip_payload_len_with(ib_header_len);
        let total = self.ip.header_len() + ip_payload_len;
        room(buf.len(), total)?;
        let mut ip = self.ip;
        ip.set_payload_len(ip_payload_len);
        let ip_len = ip.emit(buf)?;
        let ib_at = ip_len + UDP_LEN;
        let ib_len = self
            .ib
            .emit_of_header_len(&mut buf[ib_at..], payload, ib_header_len)?;
        let datagram_len = UDP_LEN + ib_len + ICRC_LEN;
        self.udp.emit(
            &mut buf[ip_len..ip_len + datagram_len],
            ib_len + ICRC_LEN,
            ip.src(),
            ip.dst(),
        )?;
        let (head, icrc_out) = buf[..total].split_at_mut(total - ICRC_LEN);
        let crc = icrc::compute(&head[..ip_len], &head[ip_len..ib_at], &head[ib_at..])?;
        icrc_out.copy_from_slice(&crc.to_le_bytes());
        // A UDP checksum, if any, covers the ICRC: write the ICRC first, then the checksum.
        if self.udp.checksum == crate::udp::UdpChecksum::Computed {
            self.udp.emit(
                &mut buf[ip_len..ip_len + datagram_len],
                ib_len + ICRC_LEN,
                ip.src(),
                ip.dst(),
            )?;
        }
        Ok(total)
    }

    /// Writes the packet around a payload that stays where it lies — in pieces, typically an
    /// application's registered memory, which a sender hands the kernel as an I/O vector
    /// instead of copying it behind the headers. `buf` receives the IP, UDP and InfiniBand
    /// headers at its start and, right after them, the trailer: the pad (BTH PadCnt zero
    /// bytes) and the ICRC, which covers the pieces. Returns (headers length, trailer length):
    /// on the wire the packet is `buf[..h]`, then every piece in order, then `buf[h..h + t]`,
    /// the same bytes [`emit`](Self::emit) writes contiguously.
    ///
    /// The pieces' lengths must add up to `ib.payload_len`. A computed UDP checksum needs the
    /// payload in place: such a packet is refused here (RoCEv2 senders send none; on the UDP
    /// path the kernel computes one where it must).
    pub fn emit_gather(&self, buf: &mut [u8], payload: &[&[u8]]) -> Result<(usize, usize)> {
        let len: usize = payload.iter().map(|p| p.len()).sum();
        if len != self.ib.payload_len {
            return Err(Error::Invalid {
                layer: Layer::Payload,
                what: "payload pieces' length differs from payload_len",
            });
        }
        // The InfiniBand headers' length once: the IP and UDP lengths and where the trailer
        // goes all follow from it.
        let ib_header_len = self.ib.header_len();
        let pad = self.ib.pad_len();
        let ib_len = self.ib.buffer_len_with(ib_header_len);
        let mut ip = self.ip;
        ip.set_payload_len(self.ip_payload_len_with(ib_header_len));
        let ib_at = ip.header_len() + UDP_LEN;
        let head = ib_at + ib_header_len;
        room(buf.len(), head + pad + ICRC_LEN)?;
        let ip_len = ip.emit(buf)?;
        self.ib
            .emit_header_of_len(&mut buf[ib_at..], ib_header_len)?;
        self.udp
            .emit_header(&mut buf[ip_len..ib_at], ib_len + ICRC_LEN)?;
        let (headers, trailer) = buf.split_at_mut(head);
        trailer[..pad].fill(0);
        let crc = icrc::compute_gather(
            &headers[..ip_len],
            &headers[ip_len..ib_at],
            &headers[ib_at..],
            payload.iter().copied().chain([&trailer[..pad]]),
        )?;
        trailer[pad..pad + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
        Ok((head, pad + ICRC_LEN))
    }

    /// Writes an Ethernet frame holding this packet; `eth.ethertype` is set from the IP version.
    /// Returns the frame length (no FCS).
    pub fn emit_frame(&self, eth: &EthernetRepr, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let eth = EthernetRepr {
            ethertype: self.ip.ethertype(),
            ..*eth
        };
        let l2 = eth.buffer_len();
        room(buf.len(), l2 + self.buffer_len())?;
        eth.emit(buf)?;
        Ok(l2 + self.emit(&mut buf[l2..], payload)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzzer (`fuzz/fuzz_targets/decode_frame.rs`): an IPv4 total length 16 bytes
    /// past the end of the UDP datagram. Accepting it made the parsed packet impossible to
    /// re-emit as it was; it is malformed.
    #[test]
    fn udp_shorter_than_ip_payload_is_malformed() {
        let frame: [u8; 94] = [
            0x52, 0x54, 0x00, 0x99, 0x00, 0x11, 0x52, 0x54, 0x00, 0x99, 0x00, 0x12, 0x08, 0x00,
            0x45, 0x00, 0x00, 0x48, 0x77, 0x8a, 0x40, 0x00, 0x40, 0x11, 0xae, 0x3e, 0x0a, 0x63,
            0x00, 0x0c, 0x0a, 0x63, 0x00, 0x0b, 0xc2, 0x11, 0x12, 0xb7, 0x00, 0x24, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x14, 0x40, 0x00, 0x40, 0x11, 0x1c,
            0xea, 0x0a, 0x63, 0x00, 0x0b, 0x0a, 0x63, 0x00, 0x55, 0xb9, 0xb8, 0xfc, 0x44, 0x40,
            0x00, 0x00, 0x08, 0xdc, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xb8, 0xad, 0x0b, 0xe4,
        ];
        assert_eq!(
            RoceRepr::parse(&frame[14..]).map(|p| p.repr),
            Err(Error::Malformed {
                layer: Layer::Udp,
                what: "UDP length differs from the IP payload length",
            })
        );
    }
}
