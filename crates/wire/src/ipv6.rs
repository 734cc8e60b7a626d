//! IPv6 headers (RFC 8200), as RoCEv2 uses them: a fixed 40-byte header directly followed by
//! UDP. Extension headers are not followed (no RoCEv2 implementation sends them); a packet whose
//! next header is not UDP is simply not RoCEv2.

use std::net::Ipv6Addr;

use crate::bytes::{put_u16, put_u32, u16_at, u32_at};
use crate::error::{need, room, Error, Layer, Result};
use crate::ipv4::Ecn;

mod field {
    pub const VTF: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: core::ops::Range<usize> = 8..24;
    pub const DST: core::ops::Range<usize> = 24..40;
    pub const HEADER_LEN: usize = 40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::HEADER_LEN;

/// A read/write view of an IPv6 packet.
///
/// After [`Ipv6Packet::new_checked`] (version 6, header and payload length within the buffer)
/// no accessor panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer after [`Ipv6Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the version and that header and payload fit in the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::Ipv6, b, field::HEADER_LEN)?;
        if self.version() != 6 {
            return Err(Error::Malformed {
                layer: Layer::Ipv6,
                what: "version is not 6",
            });
        }
        need(
            Layer::Ipv6,
            b,
            field::HEADER_LEN + usize::from(self.payload_len()),
        )
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn vtf(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::VTF)
    }

    /// IP version (6 for a valid packet).
    pub fn version(&self) -> u8 {
        (self.vtf() >> 28) as u8
    }

    /// Traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.vtf() >> 20) as u8
    }

    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN bits.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.traffic_class())
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.vtf() & 0x000f_ffff
    }

    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// Next header (17 = UDP).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }

    /// Where the payload lies in the buffer.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        field::HEADER_LEN..field::HEADER_LEN + usize::from(self.payload_len())
    }

    /// The payload, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The whole packet (without trailing Ethernet padding).
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..field::HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the ECN bits of the traffic class — a congested switch marks an ECN-capable
    /// packet CE (RFC 3168 §5). IPv6 has no header checksum, and the ICRC covers the traffic
    /// class as ones (RoCEv2 annex A17.8.1).
    ///
    /// # Panics
    ///
    /// On a buffer shorter than the 40-byte header: wrap it with [`Ipv6Packet::new_checked`]
    /// first.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let vtf = self.vtf();
        let b = self.buffer.as_mut();
        put_u32(
            b,
            field::VTF,
            (vtf & !(3 << 20)) | (u32::from(ecn.bits()) << 20),
        );
    }
}

/// The high-level representation of an IPv6 header without extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header (protocol of the payload).
    pub next_header: u8,
    /// DSCP (0–63).
    pub dscp: u8,
    /// ECN bits.
    pub ecn: Ecn,
    /// Flow label (20 bits). RoCEv2 derives it from the QP numbers so ECMP keeps a QP on one path.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Self> {
        packet.check_len()?;
        Ok(Ipv6Repr {
            src: packet.src(),
            dst: packet.dst(),
            next_header: packet.next_header(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            flow_label: packet.flow_label(),
            hop_limit: packet.hop_limit(),
            payload_len: usize::from(packet.payload_len()),
        })
    }

    /// Header length: always 40.
    pub const fn buffer_len(&self) -> usize {
        field::HEADER_LEN
    }

    /// Writes the 40-byte header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.dscp > 63 || self.flow_label > 0x000f_ffff {
            return Err(Error::Invalid {
                layer: Layer::Ipv6,
                what: "DSCP above 63 or flow label above 20 bits",
            });
        }
        let len = u16::try_from(self.payload_len).map_err(|_| Error::Invalid {
            layer: Layer::Ipv6,
            what: "payload length above 65535",
        })?;
        room(buf.len(), field::HEADER_LEN)?;
        let tc = u32::from((self.dscp << 2) | self.ecn.bits());
        put_u32(buf, field::VTF, (6 << 28) | (tc << 20) | self.flow_label);
        put_u16(buf, field::PAYLOAD_LEN, len);
        buf[field::NEXT_HEADER] = self.next_header;
        buf[field::HOP_LIMIT] = self.hop_limit;
        buf[field::SRC].copy_from_slice(&self.src.octets());
        buf[field::DST].copy_from_slice(&self.dst.octets());
        Ok(field::HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marking_ce_changes_only_the_ecn_bits() {
        let repr = Ipv6Repr {
            src: "fd00::1".parse().expect("addr"),
            dst: "fd00::2".parse().expect("addr"),
            next_header: 17,
            dscp: 26,
            ecn: Ecn::Ect0,
            flow_label: 0xabcde,
            hop_limit: 64,
            payload_len: 8,
        };
        let mut buf = vec![0u8; repr.buffer_len() + 8];
        repr.emit(&mut buf).expect("emit");
        let before = buf.clone();
        let mut p = Ipv6Packet::new_checked(&mut buf[..]).expect("parse");
        p.set_ecn(Ecn::Ce);
        assert_eq!((p.ecn(), p.dscp(), p.flow_label()), (Ecn::Ce, 26, 0xabcde));
        assert_eq!(buf[1] ^ before[1], 0x10, "ECT(0) 10 -> CE 11: one bit");
        assert_eq!(buf[2..], before[2..]);
    }
}
