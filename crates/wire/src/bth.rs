//! The InfiniBand Base Transport Header (IBTA Vol. 1 §9.2, 12 bytes).
//!
//! ```text
//!  byte 0    1                 2-3      4                 5-7      8              9-11
//! +--------+-----------------+--------+-----------------+--------+--------------+--------+
//! | OpCode | SE M Pad(2) TVer | P_Key  | F B Resv6       | DestQP | A Resv7      | PSN    |
//! +--------+-----------------+--------+-----------------+--------+--------------+--------+
//! ```
//!
//! Byte 4 is "Resv8a" in the base spec; RoCE NICs use its top two bits as FECN/BECN. The ICRC
//! treats the whole byte as variant (it is masked to ones). `TVer` is 0 for standard traffic; IRN
//! traffic carries 1. IBTA Vol. 1 §9.6 (transport header validation) has a receiver silently drop
//! a packet whose TVer it does not support, and Linux rxe does so first thing in `hdr_check`, so
//! IRN packets are never mistaken for standard ones (see `docs/WIRE.md`).

use crate::bytes::{put_u16, put_u24, u16_at, u24_at};
use crate::error::{room, Error, Layer, Result};
use crate::opcode::Opcode;
use crate::psn::Psn;
use crate::view::fixed_view;

/// Length of the BTH.
pub const BTH_LEN: usize = 12;

/// The BTH transport header version of standard RoCE / InfiniBand traffic.
pub const TVER_STANDARD: u8 = 0;
/// The BTH transport header version of IRN traffic (`docs/WIRE.md`).
pub const TVER_IRN: u8 = 1;
/// BTH transport header version of extended-IB selective retransmission (SPEC T8(c–d), this
/// project's encoding, `docs/WIRE.md` §5): an IRNETH follows the BTH as under [`TVER_IRN`], so
/// a standard receiver drops the packet (an unsupported TVer) and an IRN receiver does too.
pub const TVER_EXT_IB: u8 = 2;

/// The default partition key (full membership, default partition), as RoCE uses.
pub const DEFAULT_PKEY: u16 = 0xffff;

fixed_view!(
    /// A read/write view of a BTH.
    Bth,
    BTH_LEN,
    Layer::Bth
);

impl<T: AsRef<[u8]>> Bth<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[0])
    }

    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }

    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }

    /// Pad count: bytes of padding after the payload (0–3).
    pub fn pad_count(&self) -> u8 {
        (self.b()[1] >> 4) & 3
    }

    /// Transport header version.
    pub fn tver(&self) -> u8 {
        self.b()[1] & 0x0f
    }

    /// Partition key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), 2)
    }

    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }

    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }

    /// Destination queue pair number (24 bits).
    pub fn dest_qpn(&self) -> u32 {
        u24_at(self.b(), 5)
    }

    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }

    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), 9))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the pad count (0–3).
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = self.buffer.as_mut();
        b[1] = (b[1] & !0x30) | ((pad & 3) << 4);
    }

    /// Sets the PSN.
    pub fn set_psn(&mut self, psn: Psn) {
        put_u24(self.buffer.as_mut(), 9, psn.value());
    }
}

/// The high-level representation of a BTH. Reserved bits are not represented: they parse as
/// ignored and emit as zero. The pad count belongs to the packet, not the header: see
/// [`crate::IbRepr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Transport header version: [`TVER_STANDARD`], [`TVER_IRN`] or [`TVER_EXT_IB`] (others are
    /// carried opaquely).
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qpn: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<Self> {
        bth.check_len()?;
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            tver: bth.tver(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qpn: bth.dest_qpn(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Length: always 12.
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes the header at the start of `buf` with pad count 0 and reserved bits 0.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.tver > 0x0f {
            return Err(Error::Invalid {
                layer: Layer::Bth,
                what: "TVer above 15",
            });
        }
        if self.dest_qpn > 0x00ff_ffff {
            return Err(Error::Invalid {
                layer: Layer::Bth,
                what: "destination QPN above 24 bits",
            });
        }
        room(buf.len(), BTH_LEN)?;
        buf[0] = self.opcode.0;
        buf[1] = (u8::from(self.solicited) << 7) | (u8::from(self.mig_req) << 6) | self.tver;
        put_u16(buf, 2, self.pkey);
        buf[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put_u24(buf, 5, self.dest_qpn);
        buf[8] = u8::from(self.ack_req) << 7;
        put_u24(buf, 9, self.psn.value());
        Ok(BTH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rxe_send_only() {
        // BTH of frame 13 of rxe-golden.pcap: RC SEND_ONLY to QP 0x11, AckReq, PSN 0xb0b212.
        let raw = [
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0xb0, 0xb2, 0x12,
        ];
        let r = BthRepr::parse(&Bth::new_checked(&raw[..]).expect("12 bytes")).expect("valid");
        assert_eq!(r.opcode, Opcode::RC_SEND_ONLY);
        assert_eq!(r.dest_qpn, 0x11);
        assert!(r.ack_req);
        assert_eq!(r.psn, Psn::new(0xb0b212));
        assert_eq!(r.pkey, DEFAULT_PKEY);
        let mut out = [0u8; 12];
        r.emit(&mut out).expect("fits");
        assert_eq!(out, raw);
    }
}
