//! The standard extended transport headers (IBTA Vol. 1 §9.3): RETH, AETH, AtomicETH,
//! AtomicAckETH, ImmDt, IETH and DETH.

use core::fmt;

use crate::bytes::{put_u24, put_u32, put_u64, u24_at, u32_at, u64_at};
use crate::error::{room, Error, Layer, Result};
use crate::view::fixed_view;

// ---------------------------------------------------------------------------------------------
// RETH

fixed_view!(
    /// A view of an RDMA Extended Transport Header (§9.3.3): virtual address, R_Key, DMA length.
    Reth,
    16,
    Layer::Reth
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// DMA length of the whole message.
    pub fn dma_len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 12)
    }
}

/// RETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address of the message's first byte.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole message in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Length on the wire.
    pub const LEN: usize = 16;

    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Reth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(RethRepr {
            va: v.va(),
            rkey: v.rkey(),
            dma_len: v.dma_len(),
        })
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        room(buf.len(), Self::LEN)?;
        put_u64(buf, 0, self.va);
        put_u32(buf, 8, self.rkey);
        put_u32(buf, 12, self.dma_len);
        Ok(Self::LEN)
    }
}

// ---------------------------------------------------------------------------------------------
// AETH

/// NAK codes of the AETH syndrome (IBTA §9.7.5.2.2, Table 43).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error (the responder expected another PSN, carried in the BTH).
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error (bad R_Key, bounds, permissions).
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5–31: reserved.
    Reserved(u8),
}

impl NakCode {
    const fn from_bits(v: u8) -> NakCode {
        match v & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            other => NakCode::Reserved(other),
        }
    }

    const fn bits(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1f,
        }
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NakCode::PsnSequenceError => f.write_str("PSN-sequence-error"),
            NakCode::InvalidRequest => f.write_str("invalid-request"),
            NakCode::RemoteAccessError => f.write_str("remote-access-error"),
            NakCode::RemoteOperationalError => f.write_str("remote-operational-error"),
            NakCode::InvalidRdRequest => f.write_str("invalid-RD-request"),
            NakCode::Reserved(v) => write!(f, "reserved-{v}"),
        }
    }
}

/// The 5-bit RNR NAK timer code (IBTA §9.7.5.2.8, Table 45).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RnrTimer(pub u8);

impl RnrTimer {
    /// Table 45 in microseconds, indexed by code. Code 0 is the longest (655.36 ms).
    const MICROS: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];

    /// How long the requester waits before retrying, in microseconds.
    pub const fn micros(self) -> u32 {
        Self::MICROS[(self.0 & 0x1f) as usize]
    }

    /// The smallest code whose delay is at least `us` microseconds (code 0, the longest, if none
    /// of the others is long enough).
    pub fn at_least_micros(us: u32) -> RnrTimer {
        (1..32u8)
            .map(RnrTimer)
            .find(|t| t.micros() >= us)
            .unwrap_or(RnrTimer(0))
    }
}

/// End-to-end credit codes of an ACK's AETH (IBTA §9.7.7.2.3, Table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CreditCode(pub u8);

impl CreditCode {
    /// Code 31: no credit information ("unlimited"); what Linux rxe sends.
    pub const INVALID: CreditCode = CreditCode(31);

    /// The number of receive WQEs the code stands for; `None` for [`CreditCode::INVALID`].
    pub const fn credits(self) -> Option<u32> {
        let c = (self.0 & 0x1f) as u32;
        match c {
            31 => None,
            0..=4 => Some(c),
            // From 4 on, the values alternate between a power of two and 1.5 times it:
            // 6, 8, 12, 16, 24, ... 32768.
            _ => {
                let k = (c - 4) / 2 + 2;
                Some(if c % 2 == 0 { 1 << k } else { 3 << (k - 1) })
            }
        }
    }
}

/// The syndrome of an AETH: what kind of acknowledgement this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// 000: a positive ACK, with an end-to-end credit code.
    Ack(CreditCode),
    /// 001: receiver not ready, retry after the timer.
    RnrNak(RnrTimer),
    /// 011: a negative acknowledgement.
    Nak(NakCode),
    /// 010 (reserved), or bit 7 set: carried as the raw byte.
    Reserved(u8),
}

impl Syndrome {
    /// From the syndrome byte.
    pub const fn from_byte(b: u8) -> Syndrome {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        match (b >> 5) & 3 {
            0 => Syndrome::Ack(CreditCode(b & 0x1f)),
            1 => Syndrome::RnrNak(RnrTimer(b & 0x1f)),
            3 => Syndrome::Nak(NakCode::from_bits(b)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// The syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.0 & 0x1f,
            Syndrome::RnrNak(t) => 0x20 | (t.0 & 0x1f),
            Syndrome::Nak(n) => 0x60 | n.bits(),
            Syndrome::Reserved(b) => b,
        }
    }

    /// Whether this is a positive ACK.
    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack(_))
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syndrome::Ack(c) => match c.credits() {
                Some(n) => write!(f, "ACK credits={n}"),
                None => f.write_str("ACK"),
            },
            Syndrome::RnrNak(t) => write!(f, "RNR-NAK timer={}us", t.micros()),
            Syndrome::Nak(n) => write!(f, "NAK {n}"),
            Syndrome::Reserved(b) => write!(f, "reserved-syndrome=0x{b:02x}"),
        }
    }
}

fixed_view!(
    /// A view of an ACK Extended Transport Header (§9.3.5): syndrome and MSN.
    Aeth,
    4,
    Layer::Aeth
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// Syndrome byte.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte(self.buffer.as_ref()[0])
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

/// AETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// What kind of (N)ACK.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits): messages the responder has completed.
    pub msn: u32,
}

impl AethRepr {
    /// Length on the wire.
    pub const LEN: usize = 4;

    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Aeth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(AethRepr {
            syndrome: v.syndrome(),
            msn: v.msn(),
        })
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.msn > 0x00ff_ffff {
            return Err(Error::Invalid {
                layer: Layer::Aeth,
                what: "MSN above 24 bits",
            });
        }
        room(buf.len(), Self::LEN)?;
        buf[0] = self.syndrome.to_byte();
        put_u24(buf, 1, self.msn);
        Ok(Self::LEN)
    }
}

// ---------------------------------------------------------------------------------------------
// AtomicETH and AtomicAckETH

fixed_view!(
    /// A view of an Atomic Extended Transport Header (§9.3.4).
    AtomicEth,
    28,
    Layer::AtomicEth
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Remote virtual address (must be 8-byte aligned; the responder checks).
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// Swap value (compare-and-swap) or addend (fetch-and-add).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 12)
    }
    /// Compare value (compare-and-swap only).
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 20)
    }
}

/// AtomicETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Length on the wire.
    pub const LEN: usize = 28;

    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicEth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(AtomicEthRepr {
            va: v.va(),
            rkey: v.rkey(),
            swap_add: v.swap_add(),
            compare: v.compare(),
        })
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        room(buf.len(), Self::LEN)?;
        put_u64(buf, 0, self.va);
        put_u32(buf, 8, self.rkey);
        put_u64(buf, 12, self.swap_add);
        put_u64(buf, 20, self.compare);
        Ok(Self::LEN)
    }
}

fixed_view!(
    /// A view of an Atomic ACK Extended Transport Header (§9.3.6): the original remote value.
    AtomicAckEth,
    8,
    Layer::AtomicAckEth
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The value at the remote address before the atomic operation.
    pub fn orig(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
}

/// AtomicAckETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// The original remote value.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Length on the wire.
    pub const LEN: usize = 8;

    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicAckEth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(AtomicAckEthRepr { orig: v.orig() })
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        room(buf.len(), Self::LEN)?;
        put_u64(buf, 0, self.orig);
        Ok(Self::LEN)
    }
}

// ---------------------------------------------------------------------------------------------
// ImmDt, IETH

fixed_view!(
    /// A view of Immediate Data (§9.3.7): 4 opaque bytes, handed to the receiver's CQE.
    ImmDt,
    4,
    Layer::ImmDt
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate data, read big-endian (verbs' `imm_data` is in network order).
    pub fn imm(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

fixed_view!(
    /// A view of an Invalidate Extended Transport Header (§9.3.8): the R_Key to invalidate.
    Ieth,
    4,
    Layer::Ieth
);

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key the responder invalidates.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

// ---------------------------------------------------------------------------------------------
// DETH

fixed_view!(
    /// A view of a Datagram Extended Transport Header (§9.3.2): Q_Key and source QP.
    Deth,
    8,
    Layer::Deth
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
    /// Source QP (24 bits).
    pub fn src_qpn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 5)
    }
}

/// DETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key (QP1 uses 0x80010000).
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qpn: u32,
}

impl DethRepr {
    /// Length on the wire.
    pub const LEN: usize = 8;

    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Deth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(DethRepr {
            qkey: v.qkey(),
            src_qpn: v.src_qpn(),
        })
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.src_qpn > 0x00ff_ffff {
            return Err(Error::Invalid {
                layer: Layer::Deth,
                what: "source QPN above 24 bits",
            });
        }
        room(buf.len(), Self::LEN)?;
        put_u32(buf, 0, self.qkey);
        buf[4] = 0;
        put_u24(buf, 5, self.src_qpn);
        Ok(Self::LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_round_trip_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b, "syndrome 0x{b:02x}");
        }
        assert_eq!(
            Syndrome::from_byte(0x1f),
            Syndrome::Ack(CreditCode::INVALID)
        );
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak(RnrTimer(14)));
    }

    #[test]
    fn rnr_timer_table_matches_ibta() {
        assert_eq!(RnrTimer(0).micros(), 655_360);
        assert_eq!(RnrTimer(1).micros(), 10);
        assert_eq!(RnrTimer(12).micros(), 640);
        assert_eq!(RnrTimer(14).micros(), 1_280);
        assert_eq!(RnrTimer(31).micros(), 491_520);
        assert_eq!(RnrTimer::at_least_micros(600), RnrTimer(12));
        assert_eq!(RnrTimer::at_least_micros(1_000_000), RnrTimer(0));
    }

    #[test]
    fn credit_table_matches_ibta() {
        let want = [
            0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
            1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
        ];
        for (code, credits) in want.iter().enumerate() {
            assert_eq!(
                CreditCode(code as u8).credits(),
                Some(*credits),
                "code {code}"
            );
        }
        assert_eq!(CreditCode::INVALID.credits(), None);
    }

    #[test]
    fn deth_of_qp1() {
        let raw = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];
        let d = DethRepr::parse(&Deth::new_checked(&raw[..]).expect("8 bytes")).expect("ok");
        assert_eq!(d.qkey, 0x8001_0000);
        assert_eq!(d.src_qpn, 1);
        let mut out = [0xaa; 8];
        d.emit(&mut out).expect("fits");
        assert_eq!(out, raw);
    }
}
