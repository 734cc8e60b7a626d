//! IRNETH: the IRN extended transport header (this project's encoding of IRN §5.2–5.4 and the
//! extended-IB header fields of SPEC T8(c–d)). `docs/WIRE.md` documents it byte by byte.
//!
//! An IRNETH follows the BTH of every RC packet whose BTH carries transport header version
//! [`TVER_IRN`](crate::TVER_IRN) (1). A standard RoCEv2 receiver drops such packets (IBTA: a
//! packet with an unsupported TVer is silently dropped; Linux rxe does so in `hdr_check`), so
//! it can never take IRN traffic for its own.
//!
//! The header is self-describing: a 4-byte head whose flags say which optional fields follow, in a
//! fixed order, each a multiple of 4 bytes. Unknown flag bits make the header malformed (a parser
//! could not know its length); the two reserved bytes are ignored on receipt and zero on emission.
//!
//! ```text
//!  0        1            2        3
//! +--------+------------+-----------------+
//! | flags  | bitmap_len | reserved (0)    |    head, always
//! +--------+------------+-----------------+
//! | WQE_SN (32)                            |    flags & W
//! | resv8  | PSN_OFFSET (24)               |    flags & O
//! | resv8  | SSN (24)                      |    flags & S
//! | local VA (64)                          |    flags & L
//! |                                        |
//! | local key (32)                         |
//! | resv8  | SACK_PSN (24)                 |    flags & A
//! | loss bitmap, bitmap_len words of 32    |    bitmap_len > 0
//! ```

use crate::bytes::{put_u24, put_u32, put_u64, u24_at, u32_at, u64_at};
use crate::error::{need, room, Error, Layer, Result};
use crate::psn::Psn;

/// Flag bit: a 32-bit WQE sequence number follows (`recv_WQE_SN` on Send and
/// Write-with-immediate packets, `read_WQE_SN` on Read and Atomic requests; IRN §5.3.2).
pub const FLAG_WQE_SN: u8 = 0x80;
/// Flag bit: the packet's PSN offset within its message follows (IRN §5.3.2, T8(c)).
pub const FLAG_PSN_OFFSET: u8 = 0x40;
/// Flag bit: the send sequence number (message number) follows (T8(c)).
pub const FLAG_SSN: u8 = 0x20;
/// Flag bit: the requester's local address and key follow, echoed by Read responses (T8(c)).
pub const FLAG_LOCAL: u8 = 0x10;
/// Flag bit: a selectively acknowledged PSN follows: the PSN whose arrival triggered this
/// (N)ACK (IRN §3.1).
pub const FLAG_SACK: u8 = 0x08;
/// The flag bits this version defines; any other set bit makes the header malformed.
pub const FLAGS_KNOWN: u8 = FLAG_WQE_SN | FLAG_PSN_OFFSET | FLAG_SSN | FLAG_LOCAL | FLAG_SACK;

/// Largest loss bitmap, in 32-bit words (512 PSNs: above IRN's BDP cap at 100 Gb/s).
pub const MAX_BITMAP_WORDS: usize = 16;

const HEAD_LEN: usize = 4;

/// A view of an IRNETH. After [`IrnEth::new_checked`] (known flags, every field present) no
/// accessor panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrnEth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IrnEth<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        IrnEth { buffer }
    }

    /// Wraps a buffer after [`IrnEth::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks the flags and that every field they announce is in the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::IrnEth, b, HEAD_LEN)?;
        if b[0] & !FLAGS_KNOWN != 0 {
            return Err(Error::Malformed {
                layer: Layer::IrnEth,
                what: "unknown flag bits",
            });
        }
        if usize::from(b[1]) > MAX_BITMAP_WORDS {
            return Err(Error::Malformed {
                layer: Layer::IrnEth,
                what: "loss bitmap longer than 16 words",
            });
        }
        need(Layer::IrnEth, b, self.header_len())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Flag byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Loss bitmap length in 32-bit words.
    pub fn bitmap_words(&self) -> usize {
        usize::from(self.buffer.as_ref()[1])
    }

    /// Length of the whole header.
    pub fn header_len(&self) -> usize {
        header_len(self.flags(), self.bitmap_words())
    }

    fn field(&self, flag: u8) -> Option<usize> {
        (self.flags() & flag != 0).then(|| offset_of(self.flags(), flag))
    }

    /// `recv_WQE_SN` / `read_WQE_SN`.
    pub fn wqe_sn(&self) -> Option<u32> {
        self.field(FLAG_WQE_SN)
            .map(|at| u32_at(self.buffer.as_ref(), at))
    }

    /// PSN offset of the packet within its message.
    pub fn psn_offset(&self) -> Option<u32> {
        self.field(FLAG_PSN_OFFSET)
            .map(|at| u24_at(self.buffer.as_ref(), at + 1))
    }

    /// Send sequence number.
    pub fn ssn(&self) -> Option<u32> {
        self.field(FLAG_SSN)
            .map(|at| u24_at(self.buffer.as_ref(), at + 1))
    }

    /// Requester-local buffer.
    pub fn local(&self) -> Option<LocalBuffer> {
        self.field(FLAG_LOCAL).map(|at| LocalBuffer {
            va: u64_at(self.buffer.as_ref(), at),
            lkey: u32_at(self.buffer.as_ref(), at + 8),
        })
    }

    /// Selectively acknowledged PSN.
    pub fn sack_psn(&self) -> Option<Psn> {
        self.field(FLAG_SACK)
            .map(|at| Psn::new(u24_at(self.buffer.as_ref(), at + 1)))
    }

    /// The loss bitmap, if any.
    pub fn loss_bitmap(&self) -> Option<LossBitmap> {
        let n = self.bitmap_words();
        if n == 0 {
            return None;
        }
        let at = header_len(self.flags(), 0);
        let mut words = [0u32; MAX_BITMAP_WORDS];
        for (i, w) in words.iter_mut().take(n).enumerate() {
            *w = u32_at(self.buffer.as_ref(), at + 4 * i);
        }
        Some(LossBitmap {
            words,
            len: n as u8,
        })
    }
}

/// Bytes of the optional fields among `flags` (known bits only): four per field, and eight
/// more for the 12-byte local buffer. The fields follow each other on the wire in the order
/// of their flags from the highest bit down (the diagram above), so the fields before one are
/// those whose flags are above its bit. Every packet's length goes through here (a sender
/// computes it several times), so it is arithmetic rather than a walk over the fields; a test
/// checks the two agree on every set of flags.
#[inline]
const fn fields_len(flags: u8) -> usize {
    let flags = flags & FLAGS_KNOWN;
    4 * flags.count_ones() as usize + if flags & FLAG_LOCAL != 0 { 8 } else { 0 }
}

/// Where the field of `flag` (one of the `FLAG_*` bits) starts when `flags` are present.
#[inline]
const fn offset_of(flags: u8, flag: u8) -> usize {
    debug_assert!(flag.is_power_of_two(), "one field's flag");
    // The flags above `flag`'s bit: the fields before it on the wire.
    HEAD_LEN + fields_len(flags & !(flag | (flag - 1)))
}

#[inline]
const fn header_len(flags: u8, bitmap_words: usize) -> usize {
    HEAD_LEN + fields_len(flags) + 4 * bitmap_words
}

/// A requester-local buffer named in a Read request and echoed by its responses (T8(c)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LocalBuffer {
    /// Local virtual address.
    pub va: u64,
    /// Local key.
    pub lkey: u32,
}

/// A bitmap of lost PSNs relative to the BTH PSN of a NACK (SPEC T8(d)): bit `i` set means PSN
/// `bth.psn + i` is missing and should be retransmitted. Bit `i` is bit `i % 32` (LSB = 0) of
/// big-endian word `i / 32`, so the paper's example `0x0003` marks the first two PSNs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LossBitmap {
    words: [u32; MAX_BITMAP_WORDS],
    len: u8,
}

impl LossBitmap {
    /// A bitmap of `words` 32-bit words (1–16), all clear.
    pub fn with_words(words: usize) -> Option<LossBitmap> {
        (1..=MAX_BITMAP_WORDS)
            .contains(&words)
            .then_some(LossBitmap {
                words: [0; MAX_BITMAP_WORDS],
                len: words as u8,
            })
    }

    /// From words as carried on the wire (1–16 of them).
    pub fn from_words(words: &[u32]) -> Option<LossBitmap> {
        let mut b = Self::with_words(words.len())?;
        b.words[..words.len()].copy_from_slice(words);
        Some(b)
    }

    /// The words as carried.
    pub fn words(&self) -> &[u32] {
        &self.words[..usize::from(self.len)]
    }

    /// Number of PSNs the bitmap covers.
    pub fn capacity(&self) -> usize {
        32 * usize::from(self.len)
    }

    /// Marks offset `i` lost; `false` if `i` is beyond the bitmap.
    pub fn set(&mut self, i: usize) -> bool {
        if i >= self.capacity() {
            return false;
        }
        self.words[i / 32] |= 1 << (i % 32);
        true
    }

    /// Whether offset `i` is marked lost.
    pub fn is_set(&self, i: usize) -> bool {
        i < self.capacity() && self.words[i / 32] & (1 << (i % 32)) != 0
    }

    /// The offsets marked lost, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.capacity()).filter(|&i| self.is_set(i))
    }
}

/// IRNETH fields. A field is present on the wire exactly when it is `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IrnEthRepr {
    /// `recv_WQE_SN` (Send, Write-with-immediate) or `read_WQE_SN` (Read, Atomic).
    pub wqe_sn: Option<u32>,
    /// PSN offset of this packet within its message (24 bits).
    pub psn_offset: Option<u32>,
    /// Send sequence number (24 bits).
    pub ssn: Option<u32>,
    /// Requester-local buffer of a Read.
    pub local: Option<LocalBuffer>,
    /// PSN whose arrival triggered this (N)ACK.
    pub sack_psn: Option<Psn>,
    /// PSNs missing at the receiver, relative to the BTH PSN.
    pub loss_bitmap: Option<LossBitmap>,
}

impl IrnEthRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &IrnEth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(IrnEthRepr {
            wqe_sn: v.wqe_sn(),
            psn_offset: v.psn_offset(),
            ssn: v.ssn(),
            local: v.local(),
            sack_psn: v.sack_psn(),
            loss_bitmap: v.loss_bitmap(),
        })
    }

    fn flags(&self) -> u8 {
        let mut f = 0;
        if self.wqe_sn.is_some() {
            f |= FLAG_WQE_SN;
        }
        if self.psn_offset.is_some() {
            f |= FLAG_PSN_OFFSET;
        }
        if self.ssn.is_some() {
            f |= FLAG_SSN;
        }
        if self.local.is_some() {
            f |= FLAG_LOCAL;
        }
        if self.sack_psn.is_some() {
            f |= FLAG_SACK;
        }
        f
    }

    /// Length on the wire.
    pub fn buffer_len(&self) -> usize {
        header_len(
            self.flags(),
            self.loss_bitmap.as_ref().map_or(0, |b| usize::from(b.len)),
        )
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.psn_offset.is_some_and(|v| v > Psn::MASK) || self.ssn.is_some_and(|v| v > Psn::MASK)
        {
            return Err(Error::Invalid {
                layer: Layer::IrnEth,
                what: "PSN offset or SSN above 24 bits",
            });
        }
        let len = self.buffer_len();
        room(buf.len(), len)?;
        let flags = self.flags();
        buf[0] = flags;
        buf[1] = self.loss_bitmap.as_ref().map_or(0, |b| b.len);
        buf[2] = 0;
        buf[3] = 0;
        let mut at = HEAD_LEN;
        if let Some(v) = self.wqe_sn {
            put_u32(buf, at, v);
            at += 4;
        }
        if let Some(v) = self.psn_offset {
            buf[at] = 0;
            put_u24(buf, at + 1, v);
            at += 4;
        }
        if let Some(v) = self.ssn {
            buf[at] = 0;
            put_u24(buf, at + 1, v);
            at += 4;
        }
        if let Some(l) = self.local {
            put_u64(buf, at, l.va);
            put_u32(buf, at + 8, l.lkey);
            at += 12;
        }
        if let Some(p) = self.sack_psn {
            buf[at] = 0;
            put_u24(buf, at + 1, p.value());
            at += 4;
        }
        if let Some(b) = self.loss_bitmap {
            for w in b.words() {
                put_u32(buf, at, *w);
                at += 4;
            }
        }
        debug_assert_eq!(at, len);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte length of each optional field, in wire order.
    const FIELDS: [(u8, usize); 5] = [
        (FLAG_WQE_SN, 4),
        (FLAG_PSN_OFFSET, 4),
        (FLAG_SSN, 4),
        (FLAG_LOCAL, 12),
        (FLAG_SACK, 4),
    ];

    /// The closed forms of the fields' offsets and lengths against the walk over the fields
    /// in wire order that defines them, for every flags byte: unknown bits count for nothing
    /// in either (a view's length is asked for before its flags are checked).
    #[test]
    fn lengths_and_offsets_follow_the_field_table() {
        for flags in 0..=u8::MAX {
            let present = |f: &&(u8, usize)| flags & f.0 != 0;
            let walk: usize = FIELDS.iter().filter(present).map(|(_, l)| l).sum();
            for words in [0, 1, MAX_BITMAP_WORDS] {
                assert_eq!(header_len(flags, words), HEAD_LEN + walk + 4 * words);
            }
            for (flag, _) in FIELDS {
                let before: usize = FIELDS
                    .iter()
                    .take_while(|(f, _)| *f != flag)
                    .filter(present)
                    .map(|(_, l)| l)
                    .sum();
                assert_eq!(
                    offset_of(flags, flag),
                    HEAD_LEN + before,
                    "{flags:#x} {flag:#x}"
                );
            }
        }
    }

    #[test]
    fn send_packet_fields_in_wire_order() {
        let r = IrnEthRepr {
            wqe_sn: Some(7),
            psn_offset: Some(3),
            ..Default::default()
        };
        let mut buf = [0u8; 12];
        assert_eq!(r.emit(&mut buf), Ok(12));
        assert_eq!(buf, [0xc0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 3]);
        let v = IrnEth::new_checked(&buf[..]).expect("valid");
        assert_eq!(IrnEthRepr::parse(&v), Ok(r));
    }

    #[test]
    fn nack_with_sack_and_loss_bitmap() {
        let mut lost = LossBitmap::with_words(1).expect("1 word");
        assert!(lost.set(0));
        assert!(lost.set(1));
        assert!(!lost.set(32));
        let r = IrnEthRepr {
            sack_psn: Some(Psn::new(0x123456)),
            loss_bitmap: Some(lost),
            ..Default::default()
        };
        let mut buf = [0u8; 12];
        assert_eq!(r.emit(&mut buf), Ok(12));
        assert_eq!(buf, [0x08, 1, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0, 0, 3]);
        let back = IrnEthRepr::parse(&IrnEth::new_checked(&buf[..]).expect("valid")).expect("ok");
        assert_eq!(back, r);
        assert_eq!(
            back.loss_bitmap.map(|b| b.iter().collect::<Vec<_>>()),
            Some(vec![0, 1])
        );
    }

    #[test]
    fn unknown_flags_and_short_fields_are_rejected() {
        assert!(matches!(
            IrnEth::new_checked(&[0x01, 0, 0, 0][..]),
            Err(Error::Malformed { .. })
        ));
        assert!(matches!(
            IrnEth::new_checked(&[FLAG_LOCAL, 0, 0, 0, 1, 2, 3][..]),
            Err(Error::Truncated { need: 16, .. })
        ));
        assert!(matches!(
            IrnEth::new_checked(&[0, 17, 0, 0][..]),
            Err(Error::Malformed { .. })
        ));
    }
}
