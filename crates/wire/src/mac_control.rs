//! IEEE 802.3 MAC control frames: PAUSE (802.3x, Annex 31B) and priority-based flow control
//! (802.1Qbb), SPEC N1.
//!
//! Both travel in an Ethernet frame to 01:80:c2:00:00:01 with EtherType 0x8808, padded to the
//! 60-byte minimum frame (46 bytes of MAC control payload). A pause time is in *quanta* of 512
//! bit times at the link's speed; 0 means "resume".
//!
//! ```text
//! PAUSE:  | opcode 0x0001 | pause time |  zero pad to 46 bytes
//! PFC:    | opcode 0x0101 | class-enable vector | time[0] | ... | time[7] | zero pad
//! ```
//!
//! The class-enable vector is 16 bits; bit `p` of its low byte enables priority `p`'s time.

use crate::bytes::{put_u16, u16_at};
use crate::error::{need, room, Layer, Result};
use crate::ethernet::{EtherType, EthernetRepr, MacAddr};

/// Opcode of an 802.3x PAUSE frame.
pub const OPCODE_PAUSE: u16 = 0x0001;
/// Opcode of an 802.1Qbb PFC frame.
pub const OPCODE_PFC: u16 = 0x0101;
/// MAC control payload length in a minimum-size frame (60 bytes − 14-byte header).
pub const PAYLOAD_LEN: usize = 46;
/// Bytes a MAC control payload must have to be parsed: opcode and the PFC fields.
pub const MIN_LEN: usize = 20;

/// A view of a MAC control payload (the bytes after the EtherType).
///
/// After [`MacControl::new_checked`] (which requires the fields of the frame's opcode) no
/// accessor panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacControl<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MacControl<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        MacControl { buffer }
    }

    /// Wraps a buffer after [`MacControl::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds the 20 bytes every accessor may read (opcode, class-enable
    /// vector and eight times). Any real MAC control frame has 46: the minimum frame is 64 bytes.
    pub fn check_len(&self) -> Result<()> {
        need(Layer::MacControl, self.buffer.as_ref(), MIN_LEN)
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// MAC control opcode.
    pub fn opcode(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 0)
    }

    /// PAUSE: the pause time in quanta.
    pub fn pause_time(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// PFC: the class-enable vector.
    pub fn class_enable(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// PFC: the pause time of priority `p` (0–7) in quanta.
    pub fn pfc_time(&self, p: usize) -> u16 {
        u16_at(self.buffer.as_ref(), 4 + 2 * (p & 7))
    }
}

/// A PFC frame's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PfcRepr {
    /// Bit `p` set: the frame speaks for priority `p`.
    pub class_enable: u8,
    /// Pause time per priority, in quanta (0 = resume). Only enabled priorities matter.
    pub quanta: [u16; 8],
}

impl PfcRepr {
    /// A frame pausing (or, with `quanta == 0`, resuming) one priority.
    pub fn single(priority: u8, quanta: u16) -> PfcRepr {
        let mut r = PfcRepr {
            class_enable: 1 << (priority & 7),
            quanta: [0; 8],
        };
        r.quanta[usize::from(priority & 7)] = quanta;
        r
    }

    /// The pause time for `priority` if the frame speaks for it.
    pub fn pause_for(&self, priority: u8) -> Option<u16> {
        let p = priority & 7;
        (self.class_enable & (1 << p) != 0).then(|| self.quanta[usize::from(p)])
    }
}

/// A MAC control frame's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MacControlRepr {
    /// 802.3x PAUSE: stop all traffic for this many quanta.
    Pause {
        /// Pause time in quanta.
        quanta: u16,
    },
    /// 802.1Qbb PFC.
    Pfc(PfcRepr),
    /// Another MAC control opcode (e.g. EPON's GATE), carried opaquely.
    Unknown {
        /// The opcode.
        opcode: u16,
    },
}

impl MacControlRepr {
    /// Parses a view. The class-enable vector's high byte is reserved and ignored.
    pub fn parse<T: AsRef<[u8]>>(v: &MacControl<T>) -> Result<Self> {
        v.check_len()?;
        Ok(match v.opcode() {
            OPCODE_PAUSE => MacControlRepr::Pause {
                quanta: v.pause_time(),
            },
            OPCODE_PFC => {
                let mut quanta = [0; 8];
                for (p, q) in quanta.iter_mut().enumerate() {
                    *q = v.pfc_time(p);
                }
                MacControlRepr::Pfc(PfcRepr {
                    class_enable: v.class_enable() as u8,
                    quanta,
                })
            }
            opcode => MacControlRepr::Unknown { opcode },
        })
    }

    /// Length on the wire: always the padded 46 bytes.
    pub const fn buffer_len(&self) -> usize {
        PAYLOAD_LEN
    }

    /// Writes the payload, zero-padded to 46 bytes, at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        room(buf.len(), PAYLOAD_LEN)?;
        let b = &mut buf[..PAYLOAD_LEN];
        b.fill(0);
        match *self {
            MacControlRepr::Pause { quanta } => {
                put_u16(b, 0, OPCODE_PAUSE);
                put_u16(b, 2, quanta);
            }
            MacControlRepr::Pfc(pfc) => {
                put_u16(b, 0, OPCODE_PFC);
                put_u16(b, 2, u16::from(pfc.class_enable));
                for (p, q) in pfc.quanta.iter().enumerate() {
                    put_u16(b, 4 + 2 * p, *q);
                }
            }
            MacControlRepr::Unknown { opcode } => put_u16(b, 0, opcode),
        }
        Ok(PAYLOAD_LEN)
    }

    /// Writes a whole 60-byte frame from `src` to the MAC control multicast address.
    pub fn emit_frame(&self, src: MacAddr, buf: &mut [u8]) -> Result<usize> {
        let eth = EthernetRepr {
            src,
            dst: MacAddr::MAC_CONTROL,
            vlan: None,
            ethertype: EtherType::MacControl,
        };
        room(buf.len(), eth.buffer_len() + PAYLOAD_LEN)?;
        let l2 = eth.emit(buf)?;
        Ok(l2 + self.emit(&mut buf[l2..])?)
    }
}

/// How long `quanta` pause quanta last on a link of `bits_per_second`, in picoseconds
/// (one quantum is 512 bit times).
pub fn quanta_to_picos(quanta: u16, bits_per_second: u64) -> u64 {
    if bits_per_second == 0 {
        return u64::MAX;
    }
    let bits = u128::from(quanta) * 512;
    u64::try_from(bits * 1_000_000_000_000 / u128::from(bits_per_second)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::EthernetFrame;

    #[test]
    fn pfc_frame_bytes() {
        let pfc = MacControlRepr::Pfc(PfcRepr::single(3, 0xffff));
        let mut f = [0u8; 60];
        assert_eq!(pfc.emit_frame(MacAddr([2, 0, 0, 0, 0, 9]), &mut f), Ok(60));
        assert_eq!(&f[..6], &MacAddr::MAC_CONTROL.0);
        assert_eq!(&f[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x08]);
        assert_eq!(&f[18 + 6..18 + 8], &[0xff, 0xff]);
        let eth = EthernetFrame::new_checked(&f[..]).expect("frame");
        let back = MacControlRepr::parse(&MacControl::new_checked(eth.payload()).expect("ok"));
        assert_eq!(back, Ok(pfc));
        if let Ok(MacControlRepr::Pfc(p)) = back {
            assert_eq!(p.pause_for(3), Some(0xffff));
            assert_eq!(p.pause_for(4), None);
        }
    }

    #[test]
    fn pause_and_quanta() {
        let mut b = [0u8; 46];
        MacControlRepr::Pause { quanta: 10 }
            .emit(&mut b)
            .expect("fits");
        assert_eq!(&b[..4], &[0, 1, 0, 10]);
        // 512 bits at 40 Gb/s = 12.8 ns.
        assert_eq!(quanta_to_picos(1, 40_000_000_000), 12_800);
    }
}
