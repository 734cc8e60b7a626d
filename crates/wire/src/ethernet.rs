//! Ethernet II frames with an optional IEEE 802.1Q tag.
//!
//! The tag matters to RDMA because VLAN-based PFC takes a frame's priority from the tag's PCP
//! bits (802.1Qbb); DSCP-based PFC (SPEC N2) takes it from IP instead. Frames arrive here without
//! the FCS, as capture files and raw sockets deliver them.
//!
//! ```text
//!  0               6               12      14      16      18
//! +---------------+---------------+-------+-------+-------+------
//! | destination   | source        | TPID  |  TCI  | type  | payload     (tagged, TPID 0x8100)
//! +---------------+---------------+-------+-------+-------+------
//! | destination   | source        | type  | payload                      (untagged)
//! ```

use core::fmt;

use crate::bytes::{put_u16, u16_at};
use crate::error::{need, room, Error, Layer, Result};

/// A 48-bit IEEE MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 01:80:c2:00:00:01, the reserved multicast address of MAC control frames (PAUSE, PFC).
    pub const MAC_CONTROL: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);

    /// The address as six bytes.
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// The EtherType of a frame's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800.
    Ipv4,
    /// 0x86DD.
    Ipv6,
    /// 0x0806.
    Arp,
    /// 0x8100: an IEEE 802.1Q tag follows.
    Vlan,
    /// 0x8808: IEEE 802.3 MAC control (PAUSE, PFC).
    MacControl,
    /// 0x01FF: the Dynamic RDMA Protocol of SPEC T10 (from the experimental range 0x0101–0x01FF).
    Drp,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x86dd => EtherType::Ipv6,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x8808 => EtherType::MacControl,
            0x01ff => EtherType::Drp,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::MacControl => 0x8808,
            EtherType::Drp => 0x01ff,
            EtherType::Unknown(other) => other,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Ipv4 => f.write_str("IPv4"),
            EtherType::Ipv6 => f.write_str("IPv6"),
            EtherType::Arp => f.write_str("ARP"),
            EtherType::Vlan => f.write_str("802.1Q"),
            EtherType::MacControl => f.write_str("MAC-control"),
            EtherType::Drp => f.write_str("DRP"),
            EtherType::Unknown(v) => write!(f, "0x{v:04x}"),
        }
    }
}

/// The tag control information of an 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point (0–7): the PFC priority under VLAN-based PFC.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (0–4095).
    pub vid: u16,
}

impl VlanTag {
    fn from_tci(tci: u16) -> Self {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    fn tci(self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }
}

mod field {
    pub const DST: core::ops::Range<usize> = 0..6;
    pub const SRC: core::ops::Range<usize> = 6..12;
    pub const TYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_TYPE: usize = 16;
    pub const UNTAGGED_LEN: usize = 14;
    pub const TAGGED_LEN: usize = 18;
}

/// A read/write view of an Ethernet II frame (optionally 802.1Q-tagged).
///
/// After [`EthernetFrame::new_checked`] succeeds, no accessor panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it. Accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after checking that it holds the whole header (tag included).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the buffer holds the header, including the 802.1Q tag if the TPID says so.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::Ethernet, b, field::UNTAGGED_LEN)?;
        if u16_at(b, field::TYPE) == 0x8100 {
            need(Layer::Vlan, b, field::TAGGED_LEN)?;
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        MacAddr(a)
    }

    /// Source address.
    pub fn src(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        MacAddr(a)
    }

    /// The 802.1Q tag, if the frame has one.
    pub fn vlan(&self) -> Option<VlanTag> {
        let b = self.buffer.as_ref();
        (u16_at(b, field::TYPE) == 0x8100).then(|| VlanTag::from_tci(u16_at(b, field::TCI)))
    }

    /// The EtherType of the payload (behind the tag, if any).
    pub fn ethertype(&self) -> EtherType {
        let b = self.buffer.as_ref();
        match u16_at(b, field::TYPE) {
            0x8100 => EtherType::from(u16_at(b, field::INNER_TYPE)),
            other => EtherType::from(other),
        }
    }

    /// Length of the header: 14 bytes, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if u16_at(self.buffer.as_ref(), field::TYPE) == 0x8100 {
            field::TAGGED_LEN
        } else {
            field::UNTAGGED_LEN
        }
    }

    /// The bytes after the header (which may include Ethernet padding past the payload proper).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The high-level representation of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src: MacAddr,
    /// Destination address.
    pub dst: MacAddr,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload. Must not be [`EtherType::Vlan`]: use `vlan` for the tag.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<Self> {
        frame.check_len()?;
        let ethertype = frame.ethertype();
        if ethertype == EtherType::Vlan {
            return Err(Error::Unsupported {
                layer: Layer::Vlan,
                what: "stacked 802.1Q tags",
            });
        }
        Ok(EthernetRepr {
            src: frame.src(),
            dst: frame.dst(),
            vlan: frame.vlan(),
            ethertype,
        })
    }

    /// Header length: 14 bytes, or 18 with a tag.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            field::TAGGED_LEN
        } else {
            field::UNTAGGED_LEN
        }
    }

    /// Writes the header at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.ethertype == EtherType::Vlan {
            return Err(Error::Invalid {
                layer: Layer::Ethernet,
                what: "ethertype 0x8100; set the vlan field instead",
            });
        }
        if let Some(tag) = self.vlan {
            if tag.pcp > 7 || tag.vid > 0x0fff {
                return Err(Error::Invalid {
                    layer: Layer::Vlan,
                    what: "PCP above 7 or VID above 4095",
                });
            }
        }
        let len = self.buffer_len();
        room(buf.len(), len)?;
        buf[field::DST].copy_from_slice(&self.dst.0);
        buf[field::SRC].copy_from_slice(&self.src.0);
        match self.vlan {
            Some(tag) => {
                put_u16(buf, field::TYPE, 0x8100);
                put_u16(buf, field::TCI, tag.tci());
                put_u16(buf, field::INNER_TYPE, self.ethertype.into());
            }
            None => put_u16(buf, field::TYPE, self.ethertype.into()),
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_frame_round_trips_and_exposes_pcp() {
        let repr = EthernetRepr {
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan: Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100,
            }),
            ethertype: EtherType::Ipv4,
        };
        let mut buf = [0u8; 18];
        assert_eq!(repr.emit(&mut buf), Ok(18));
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x60, 0x64, 0x08, 0x00]);
        let f = EthernetFrame::new_checked(&buf[..]).expect("valid frame");
        assert_eq!(f.vlan().map(|t| t.pcp), Some(3));
        assert_eq!(EthernetRepr::parse(&f), Ok(repr));
    }

    #[test]
    fn tag_cut_short_is_truncated_not_panic() {
        let mut buf = [0u8; 16];
        buf[12] = 0x81;
        assert!(matches!(
            EthernetFrame::new_checked(&buf[..]),
            Err(Error::Truncated {
                layer: Layer::Vlan,
                ..
            })
        ));
    }
}
