//! IPv4 headers (RFC 791), as RoCEv2 uses them.
//!
//! What matters to RDMA: the DSCP (priority under DSCP-based PFC, SPEC N2), the ECN bits (ECT on
//! data, CE from a congested switch, SPEC T9), the Identification field (covered by the ICRC, so a
//! sender must know it: see `docs/WIRE.md`), and DF (RoCEv2 packets are never fragmented).
//!
//! Options and fragments are rejected as [`Error::Unsupported`]: no RoCEv2 implementation sends
//! them, and the ICRC of a fragment cannot be checked.

use core::fmt;
use std::net::Ipv4Addr;

use crate::bytes::{ones_finish, ones_sum, put_u16, u16_at};
use crate::error::{need, room, Error, Layer, Result};

/// The two ECN bits of the IP header (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ecn {
    /// 00: not ECN-capable.
    #[default]
    NotEct,
    /// 01: ECN-capable transport (1).
    Ect1,
    /// 10: ECN-capable transport (0).
    Ect0,
    /// 11: congestion experienced.
    Ce,
}

impl Ecn {
    /// From the two low bits of `v`.
    pub const fn from_bits(v: u8) -> Ecn {
        match v & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two bits.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }
}

impl fmt::Display for Ecn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ecn::NotEct => "not-ECT",
            Ecn::Ect1 => "ECT(1)",
            Ecn::Ect0 => "ECT(0)",
            Ecn::Ce => "CE",
        })
    }
}

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: core::ops::Range<usize> = 12..16;
    pub const DST: core::ops::Range<usize> = 16..20;
    pub const HEADER_LEN: usize = 20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::HEADER_LEN;

/// A read/write view of an IPv4 packet.
///
/// [`Ipv4Packet::new_checked`] checks the version, that the header and the total length fit in
/// the buffer, and that the total length covers the header; after it succeeds no accessor panics.
/// The buffer may be longer than the packet (Ethernet padding): [`Ipv4Packet::payload`] stops at
/// the total length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after [`Ipv4Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks version, header length and total length against the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::Ipv4, b, field::HEADER_LEN)?;
        if self.version() != 4 {
            return Err(Error::Malformed {
                layer: Layer::Ipv4,
                what: "version is not 4",
            });
        }
        let hl = self.header_len();
        if hl < field::HEADER_LEN {
            return Err(Error::Malformed {
                layer: Layer::Ipv4,
                what: "IHL below 5",
            });
        }
        need(Layer::Ipv4, b, hl)?;
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::Malformed {
                layer: Layer::Ipv4,
                what: "total length shorter than header",
            });
        }
        need(Layer::Ipv4, b, total)
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IP version (4 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Differentiated services code point (6 bits).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::TOS] >> 2
    }

    /// ECN bits.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buffer.as_ref()[field::TOS])
    }

    /// Total length (header + payload).
    pub fn total_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS_FRAG] & 0x40 != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS_FRAG] & 0x20 != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::FLAGS_FRAG) & 0x1fff
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload (17 = UDP).
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum as carried.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        ones_finish(ones_sum(0, &self.buffer.as_ref()[..self.header_len()])) == 0
    }

    /// The header bytes (options included).
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// Where the payload lies in the buffer: from the header's end to the total length.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        self.header_len()..usize::from(self.total_len())
    }

    /// The payload, up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The whole packet, header to total length (without trailing Ethernet padding).
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the ECN bits — a congested switch marks an ECN-capable packet CE (RFC 3168 §5) —
    /// and recomputes the header checksum (RFC 791). The ICRC covers the TOS byte as ones
    /// (RoCEv2 annex A17.8.1), so a RoCEv2 packet's ICRC stays valid.
    ///
    /// # Panics
    ///
    /// On a buffer shorter than its header length says: wrap it with
    /// [`Ipv4Packet::new_checked`] first.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        b[field::TOS] = (b[field::TOS] & !3) | ecn.bits();
        put_u16(b, field::CHECKSUM, 0);
        let sum = ones_finish(ones_sum(0, &b[..hl]));
        put_u16(b, field::CHECKSUM, sum);
    }
}

/// The high-level representation of an option-less, unfragmented IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// DSCP (0–63).
    pub dscp: u8,
    /// ECN bits.
    pub ecn: Ecn,
    /// Identification. Covered by the ICRC, so it must be what the receiver sees.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses a view: checks the header checksum and rejects options and fragments.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Self> {
        packet.check_len()?;
        if packet.header_len() != field::HEADER_LEN {
            return Err(Error::Unsupported {
                layer: Layer::Ipv4,
                what: "IP options",
            });
        }
        if packet.more_frags() || packet.frag_offset() != 0 {
            return Err(Error::Unsupported {
                layer: Layer::Ipv4,
                what: "fragment",
            });
        }
        if !packet.verify_checksum() {
            return Err(Error::Checksum { layer: Layer::Ipv4 });
        }
        Ok(Ipv4Repr {
            src: packet.src(),
            dst: packet.dst(),
            protocol: packet.protocol(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            ttl: packet.ttl(),
            payload_len: usize::from(packet.total_len()) - field::HEADER_LEN,
        })
    }

    /// Header length: always 20.
    pub const fn buffer_len(&self) -> usize {
        field::HEADER_LEN
    }

    /// Writes the 20-byte header, checksum included, at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.dscp > 63 {
            return Err(Error::Invalid {
                layer: Layer::Ipv4,
                what: "DSCP above 63",
            });
        }
        let total =
            u16::try_from(self.payload_len + field::HEADER_LEN).map_err(|_| Error::Invalid {
                layer: Layer::Ipv4,
                what: "total length above 65535",
            })?;
        room(buf.len(), field::HEADER_LEN)?;
        let b = &mut buf[..field::HEADER_LEN];
        b[field::VER_IHL] = 0x45;
        b[field::TOS] = (self.dscp << 2) | self.ecn.bits();
        put_u16(b, field::LENGTH, total);
        put_u16(b, field::IDENT, self.ident);
        put_u16(
            b,
            field::FLAGS_FRAG,
            if self.dont_frag { 0x4000 } else { 0 },
        );
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol;
        put_u16(b, field::CHECKSUM, 0);
        b[field::SRC].copy_from_slice(&self.src.octets());
        b[field::DST].copy_from_slice(&self.dst.octets());
        let sum = ones_finish(ones_sum(0, b));
        put_u16(b, field::CHECKSUM, sum);
        Ok(field::HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // IPv4 header of the first RoCEv2 packet (frame 13) of rxe-golden.pcap: 10.99.0.12 ->
    // 10.99.0.11, total length 108, ID 0x6d07, DF, TTL 64, checksum 0xb89d.
    const RXE_IP: [u8; 20] = [
        0x45, 0x00, 0x00, 0x6c, 0x6d, 0x07, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x9d, 0x0a, 0x63, 0x00,
        0x0c, 0x0a, 0x63, 0x00, 0x0b,
    ];

    #[test]
    fn marking_ce_keeps_the_checksum_right() {
        let mut buf = [0u8; 108];
        buf[..20].copy_from_slice(&RXE_IP);
        buf[1] = 0x0a; // DSCP 2, ECT(0)
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_ecn(Ecn::Ce);
        assert_eq!((p.ecn(), p.dscp()), (Ecn::Ce, 2));
        assert!(p.verify_checksum());
        // Nothing else changed.
        for (i, (a, b)) in buf[..20].iter().zip(RXE_IP).enumerate() {
            if !(1..2).contains(&i) && !(10..12).contains(&i) {
                assert_eq!(*a, b, "byte {i}");
            }
        }
    }

    #[test]
    fn checksum_round_trip() {
        let mut buf = [0u8; 108];
        buf[..20].copy_from_slice(&RXE_IP);
        let p = Ipv4Packet::new_checked(&buf[..]).expect("valid");
        let r = Ipv4Repr::parse(&p).expect("checksum ok");
        assert_eq!(r.ident, 0x6d07);
        assert_eq!(r.payload_len, 88);
        assert!(r.dont_frag);
        let mut out = [0u8; 20];
        r.emit(&mut out).expect("fits");
        assert_eq!(out, RXE_IP);
    }

    #[test]
    fn bad_checksum_and_short_total_are_errors() {
        let mut buf = [0u8; 108];
        buf[..20].copy_from_slice(&RXE_IP);
        buf[10] ^= 1;
        let p = Ipv4Packet::new_checked(&buf[..]).expect("length ok");
        assert_eq!(
            Ipv4Repr::parse(&p),
            Err(Error::Checksum { layer: Layer::Ipv4 })
        );
        assert!(matches!(
            Ipv4Packet::new_checked(&buf[..50]),
            Err(Error::Truncated { .. })
        ));
    }
}
