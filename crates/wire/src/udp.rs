//! UDP headers (RFC 768). RoCEv2 runs on destination port 4791; the source port is chosen per QP
//! so that ECMP keeps a QP on one path (SPEC T2).
//!
//! Linux rxe and most RoCE NICs send a zero checksum (the ICRC protects the packet). A zero
//! checksum is accepted over IPv4 and, as the RoCEv2 annex allows, over IPv6. A non-zero checksum
//! is verified, and a wrong one is *recorded*, not rejected: packets captured on the sending host
//! carry a partial sum that checksum offload completes later (Wireshark's "maybe caused by UDP
//! checksum offload"), and for RoCEv2 the ICRC, not the UDP checksum, is what a receiver checks.
//! Kernel UDP sockets have already dropped truly corrupt datagrams before a runtime sees them.

use std::net::IpAddr;

use crate::bytes::{ones_finish, ones_sum, put_u16, u16_at};
use crate::error::{need, room, Error, Layer, Result};
use crate::ipv4::PROTO_UDP;

/// UDP destination port of RoCEv2 (IANA "roce").
pub const ROCEV2_PORT: u16 = 4791;

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A read/write view of a UDP datagram.
///
/// After [`UdpPacket::new_checked`] (length field between 8 and the buffer length) no accessor
/// panics; [`UdpPacket::payload`] stops at the length field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps a buffer after [`UdpPacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the header and the length field against the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::Udp, b, HEADER_LEN)?;
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed {
                layer: Layer::Udp,
                what: "length field below 8",
            });
        }
        need(Layer::Udp, b, len)
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }

    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() as usize == HEADER_LEN
    }

    /// Checksum as carried (0 = none).
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }

    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// Where the payload lies in the buffer: from byte 8 to the length field.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        HEADER_LEN..usize::from(self.len())
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// Whether a non-zero checksum matches; a zero checksum counts as right.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        self.checksum() == 0
            || ones_finish(pseudo_sum(
                src,
                dst,
                self.len(),
                &self.buffer.as_ref()[..usize::from(self.len())],
            )) == 0
    }
}

fn pseudo_sum(src: IpAddr, dst: IpAddr, udp_len: u16, datagram: &[u8]) -> u32 {
    let mut acc = 0;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = ones_sum(acc, &s.octets());
            acc = ones_sum(acc, &d.octets());
        }
        (s, d) => {
            acc = ones_sum(acc, &to_v6(s));
            acc = ones_sum(acc, &to_v6(d));
        }
    }
    acc += u32::from(PROTO_UDP) + u32::from(udp_len);
    ones_sum(acc, datagram)
}

fn to_v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// What a datagram's checksum field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UdpChecksum {
    /// Zero: no checksum, as Linux rxe sends RoCEv2.
    #[default]
    None,
    /// The right checksum over the pseudo-header and the datagram (computed on emission).
    Computed,
    /// A non-zero value that does not match (typically a checksum-offload partial sum seen in a
    /// capture on the sending host). Emitted verbatim.
    Mismatch(u16),
}

/// The high-level representation of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Whether a checksum is carried.
    pub checksum: UdpChecksum,
}

impl UdpRepr {
    /// Parses a view, verifying a non-zero checksum against the IP addresses; a wrong one is
    /// recorded as [`UdpChecksum::Mismatch`] (see the module documentation).
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>, src: IpAddr, dst: IpAddr) -> Result<Self> {
        packet.check_len()?;
        let checksum = match packet.checksum() {
            0 => UdpChecksum::None,
            _ if packet.verify_checksum(src, dst) => UdpChecksum::Computed,
            carried => UdpChecksum::Mismatch(carried),
        };
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            checksum,
        })
    }

    /// Header length: always 8.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header at the start of `datagram`, whose first `8 + payload_len` bytes are the
    /// whole datagram (the payload must already be in place when a checksum is computed).
    pub fn emit(
        &self,
        datagram: &mut [u8],
        payload_len: usize,
        src: IpAddr,
        dst: IpAddr,
    ) -> Result<usize> {
        let len = datagram_len(payload_len)?;
        room(datagram.len(), usize::from(len))?;
        match self.checksum {
            UdpChecksum::None => self.put(datagram, len, 0),
            UdpChecksum::Computed => {
                self.put(datagram, len, 0);
                let sum = ones_finish(pseudo_sum(src, dst, len, &datagram[..usize::from(len)]));
                // A computed zero is sent as all ones (RFC 768): zero means "no checksum".
                put_u16(datagram, 6, if sum == 0 { 0xffff } else { sum });
            }
            UdpChecksum::Mismatch(v) => self.put(datagram, len, v),
        }
        Ok(HEADER_LEN)
    }

    /// Writes the header alone at the start of `header`, for a datagram of `8 + payload_len`
    /// bytes whose payload lies elsewhere (a gathered send). A computed checksum needs the
    /// payload: refused.
    pub fn emit_header(&self, header: &mut [u8], payload_len: usize) -> Result<usize> {
        let len = datagram_len(payload_len)?;
        room(header.len(), HEADER_LEN)?;
        let checksum = match self.checksum {
            UdpChecksum::None => 0,
            UdpChecksum::Mismatch(v) => v,
            UdpChecksum::Computed => {
                return Err(Error::Invalid {
                    layer: Layer::Udp,
                    what: "a computed UDP checksum needs the payload in place",
                })
            }
        };
        self.put(header, len, checksum);
        Ok(HEADER_LEN)
    }

    /// The four fields, into a buffer already checked to hold them.
    fn put(&self, header: &mut [u8], len: u16, checksum: u16) {
        put_u16(header, 0, self.src_port);
        put_u16(header, 2, self.dst_port);
        put_u16(header, 4, len);
        put_u16(header, 6, checksum);
    }
}

/// The UDP length field of a datagram carrying `payload_len` bytes.
fn datagram_len(payload_len: usize) -> Result<u16> {
    u16::try_from(HEADER_LEN + payload_len).map_err(|_| Error::Invalid {
        layer: Layer::Udp,
        what: "datagram longer than 65535 bytes",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn computed_checksum_verifies_and_detects_corruption() {
        let src = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let dst = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let repr = UdpRepr {
            src_port: 49152,
            dst_port: ROCEV2_PORT,
            checksum: UdpChecksum::Computed,
        };
        let mut d = [0u8; 8 + 5];
        d[8..].copy_from_slice(b"hello");
        repr.emit(&mut d, 5, src, dst).expect("fits");
        let p = UdpPacket::new_checked(&d[..]).expect("valid");
        assert_ne!(p.checksum(), 0);
        assert_eq!(UdpRepr::parse(&p, src, dst), Ok(repr));
        d[9] ^= 0x10;
        let carried = u16::from_be_bytes([d[6], d[7]]);
        let p = UdpPacket::new_checked(&d[..]).expect("valid");
        let r = UdpRepr::parse(&p, src, dst).expect("recorded, not rejected");
        assert_eq!(r.checksum, UdpChecksum::Mismatch(carried));
        // A mismatching checksum re-emits verbatim.
        let mut again = d;
        r.emit(&mut again, 5, src, dst).expect("fits");
        assert_eq!(again, d);
    }
}
