//! The InfiniBand transport part of a RoCEv2 packet: BTH, extension headers, payload and pad —
//! everything between the UDP header and the ICRC.
//!
//! [`IbRepr`] is the structured packet description the queue-pair core produces and consumes.
//! The simulator forwards it as is (payload as a length); the UDP runtime serializes it with
//! [`IbRepr::emit`] inside a [`RoceRepr`](crate::RoceRepr).

use crate::bth::{Bth, BthRepr, BTH_LEN};
use crate::error::{room, Error, Layer, Result};
use crate::ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, Deth, DethRepr, Ieth,
    ImmDt, Reth, RethRepr,
};
use crate::irn::{IrnEth, IrnEthRepr};
use crate::opcode::{Headers, Layout, Opcode, PayloadRule};
use crate::psn::Psn;

/// BTH, extension headers and payload length of one InfiniBand packet.
///
/// A header is present on the wire exactly when its field is `Some`; which headers an opcode
/// requires is [`Opcode::layout`](crate::Opcode::layout). [`IbRepr::parse`] only accepts packets
/// whose headers match their opcode's layout, and [`IbRepr::emit`] only writes such packets;
/// opcodes without a known layout are carried opaquely (no extension header, payload = the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IbRepr {
    /// Base transport header.
    pub bth: BthRepr,
    /// IRN extension header (TVer 1 packets).
    pub irn: Option<IrnEthRepr>,
    /// Datagram ETH (UD).
    pub deth: Option<DethRepr>,
    /// RDMA ETH.
    pub reth: Option<RethRepr>,
    /// Atomic ETH.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// ACK ETH.
    pub aeth: Option<AethRepr>,
    /// Atomic ACK ETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data (big-endian reading of the 4 bytes).
    pub imm: Option<u32>,
    /// Invalidate ETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    /// Payload length in bytes, without pad.
    pub payload_len: usize,
}

impl IbRepr {
    /// A place to keep for packets to be parsed into ([`IbRepr::parse_into`]) or built in
    /// (a queue pair's transmit slot): what it holds means nothing until it is written (an
    /// empty RC Send-only to queue pair 0).
    pub const SLOT: IbRepr = IbRepr::new(BthRepr {
        opcode: Opcode::RC_SEND_ONLY,
        solicited: false,
        mig_req: false,
        tver: 0,
        pkey: crate::DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: 0,
        ack_req: false,
        psn: Psn::new(0),
    });

    /// A packet with only a BTH and no payload; fill in the rest.
    pub const fn new(bth: BthRepr) -> IbRepr {
        IbRepr {
            bth,
            irn: None,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm: None,
            ieth: None,
            payload_len: 0,
        }
    }

    /// The layout its opcode and TVer call for (`None`: carried opaquely).
    pub const fn layout(&self) -> Option<Layout> {
        self.bth.opcode.layout(self.bth.tver)
    }

    /// The extension headers present.
    pub fn headers(&self) -> Headers {
        let mut h = Headers::NONE;
        let mut add = |present: bool, which: Headers| {
            if present {
                h = h.with(which);
            }
        };
        add(self.irn.is_some(), Headers::IRNETH);
        add(self.deth.is_some(), Headers::DETH);
        add(self.reth.is_some(), Headers::RETH);
        add(self.atomic_eth.is_some(), Headers::ATOMIC_ETH);
        add(self.aeth.is_some(), Headers::AETH);
        add(self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH);
        add(self.imm.is_some(), Headers::IMMDT);
        add(self.ieth.is_some(), Headers::IETH);
        h
    }

    /// Length of BTH and extension headers.
    #[inline]
    pub fn header_len(&self) -> usize {
        BTH_LEN
            + self.irn.as_ref().map_or(0, IrnEthRepr::buffer_len)
            + self.deth.map_or(0, |_| DethRepr::LEN)
            + self.reth.map_or(0, |_| RethRepr::LEN)
            + self.atomic_eth.map_or(0, |_| AtomicEthRepr::LEN)
            + self.aeth.map_or(0, |_| AethRepr::LEN)
            + self.atomic_ack_eth.map_or(0, |_| AtomicAckEthRepr::LEN)
            + self.imm.map_or(0, |_| 4)
            + self.ieth.map_or(0, |_| 4)
    }

    /// Pad bytes after the payload (BTH PadCnt): the payload is padded to a multiple of 4.
    #[inline]
    pub const fn pad_len(&self) -> usize {
        (4 - self.payload_len % 4) % 4
    }

    /// Length of headers, payload and pad: the UDP payload minus the 4-byte ICRC.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        self.buffer_len_with(self.header_len())
    }

    /// [`IbRepr::buffer_len`] from the headers' length, `header_len`, a sender has already.
    #[inline]
    pub(crate) fn buffer_len_with(&self, header_len: usize) -> usize {
        header_len + self.payload_len + self.pad_len()
    }

    /// Checks that the headers and payload length fit the opcode's layout.
    pub fn check(&self) -> Result<()> {
        let (headers, rule) = match self.layout() {
            Some(l) => (l.headers, l.payload),
            None => (Headers::NONE, PayloadRule::Any),
        };
        if self.headers() != headers {
            return Err(Error::Invalid {
                layer: Layer::Bth,
                what: "extension headers do not match the opcode",
            });
        }
        check_payload(rule, self.payload_len).map_err(|what| Error::Invalid {
            layer: Layer::Payload,
            what,
        })
    }

    /// The length of the BTH and extension headers at the start of `packet` (as [`parse`]
    /// reads them), without looking at what follows: where a packet's payload starts when
    /// what follows may be more than this packet (a receiver looking for the packets of a
    /// coalesced datagram).
    ///
    /// [`parse`]: IbRepr::parse
    pub fn header_len_of(packet: &[u8]) -> Result<usize> {
        let mut headers = IbRepr::SLOT;
        IbRepr::parse_headers(packet, &mut headers)
    }

    /// Parses the BTH and extension headers at the start of `packet` (as its opcode's layout
    /// calls for them) into `repr`, and returns where they end; the payload is not looked at.
    fn parse_headers(packet: &[u8], repr: &mut IbRepr) -> Result<usize> {
        let bth_view = Bth::new_checked(packet)?;
        *repr = IbRepr::new(BthRepr::parse(&bth_view)?);
        let mut at = BTH_LEN;
        let headers = repr.layout().map_or(Headers::NONE, |l| l.headers);
        let rest = |at: usize| &packet[at..];
        if headers.contains(Headers::IRNETH) {
            let v = IrnEth::new_checked(rest(at))?;
            at += v.header_len();
            repr.irn = Some(IrnEthRepr::parse(&v)?);
        }
        if headers.contains(Headers::DETH) {
            repr.deth = Some(DethRepr::parse(&Deth::new_checked(rest(at))?)?);
            at += DethRepr::LEN;
        }
        if headers.contains(Headers::RETH) {
            repr.reth = Some(RethRepr::parse(&Reth::new_checked(rest(at))?)?);
            at += RethRepr::LEN;
        }
        if headers.contains(Headers::ATOMIC_ETH) {
            repr.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEth::new_checked(rest(at))?)?);
            at += AtomicEthRepr::LEN;
        }
        if headers.contains(Headers::AETH) {
            repr.aeth = Some(AethRepr::parse(&Aeth::new_checked(rest(at))?)?);
            at += AethRepr::LEN;
        }
        if headers.contains(Headers::ATOMIC_ACK_ETH) {
            repr.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(
                rest(at),
            )?)?);
            at += AtomicAckEthRepr::LEN;
        }
        if headers.contains(Headers::IMMDT) {
            repr.imm = Some(ImmDt::new_checked(rest(at))?.imm());
            at += 4;
        }
        if headers.contains(Headers::IETH) {
            repr.ieth = Some(Ieth::new_checked(rest(at))?.rkey());
            at += 4;
        }
        Ok(at)
    }

    /// Parses the bytes between the UDP header and the ICRC. Returns the representation and the
    /// payload (without pad).
    pub fn parse(packet: &[u8]) -> Result<(IbRepr, &[u8])> {
        let mut repr = IbRepr::SLOT;
        let payload = IbRepr::parse_into(packet, &mut repr)?;
        Ok((repr, payload))
    }

    /// [`IbRepr::parse`], the representation written into `repr` (a receiver's
    /// [`IbRepr::SLOT`], kept from packet to packet: its few hundred bytes are then not moved
    /// from parser to caller); returns the payload. After an error `repr` holds nothing
    /// meaningful.
    pub fn parse_into<'p>(packet: &'p [u8], repr: &mut IbRepr) -> Result<&'p [u8]> {
        let at = IbRepr::parse_headers(packet, repr)?;
        let data = &packet[at..];
        if packet.len() % 4 != 0 {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                what: "packet length is not a multiple of 4",
            });
        }
        let pad = usize::from(Bth::new_checked(packet)?.pad_count());
        if pad > data.len() {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                what: "pad count exceeds the data",
            });
        }
        let payload = &data[..data.len() - pad];
        repr.payload_len = payload.len();
        let rule = repr.layout().map_or(PayloadRule::Any, |l| l.payload);
        check_payload(rule, payload.len()).map_err(|what| Error::Malformed {
            layer: Layer::Payload,
            what,
        })?;
        Ok(payload)
    }

    /// Writes BTH (with the pad count) and extension headers at the start of `buf`.
    pub fn emit_header(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_header_of_len(buf, self.header_len())
    }

    /// [`IbRepr::emit_header`] for a caller that has [`IbRepr::header_len`] already, `len`:
    /// a sender asks for the lengths of every layer before it writes one.
    pub(crate) fn emit_header_of_len(&self, buf: &mut [u8], len: usize) -> Result<usize> {
        debug_assert_eq!(len, self.header_len());
        self.check()?;
        room(buf.len(), len)?;
        let mut at = self.bth.emit(buf)?;
        Bth::new_unchecked(&mut buf[..BTH_LEN]).set_pad_count(self.pad_len() as u8);
        if let Some(h) = self.irn {
            at += h.emit(&mut buf[at..])?;
        }
        if let Some(h) = self.deth {
            at += h.emit(&mut buf[at..])?;
        }
        if let Some(h) = self.reth {
            at += h.emit(&mut buf[at..])?;
        }
        if let Some(h) = self.atomic_eth {
            at += h.emit(&mut buf[at..])?;
        }
        if let Some(h) = self.aeth {
            at += h.emit(&mut buf[at..])?;
        }
        if let Some(h) = self.atomic_ack_eth {
            at += h.emit(&mut buf[at..])?;
        }
        if let Some(v) = self.imm {
            buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
            at += 4;
        }
        if let Some(v) = self.ieth {
            buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
            at += 4;
        }
        debug_assert_eq!(at, len);
        Ok(at)
    }

    /// Writes headers, `payload` (which must be `payload_len` bytes) and zero pad at the start of
    /// `buf`; returns [`IbRepr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        self.emit_of_header_len(buf, payload, self.header_len())
    }

    /// [`IbRepr::emit`] for a caller that has [`IbRepr::header_len`] already, `len`.
    pub(crate) fn emit_of_header_len(
        &self,
        buf: &mut [u8],
        payload: &[u8],
        len: usize,
    ) -> Result<usize> {
        if payload.len() != self.payload_len {
            return Err(Error::Invalid {
                layer: Layer::Payload,
                what: "payload slice length differs from payload_len",
            });
        }
        let total = self.buffer_len_with(len);
        room(buf.len(), total)?;
        let at = self.emit_header_of_len(buf, len)?;
        buf[at..at + payload.len()].copy_from_slice(payload);
        buf[at + payload.len()..total].fill(0);
        Ok(total)
    }
}

fn check_payload(rule: PayloadRule, len: usize) -> core::result::Result<(), &'static str> {
    match rule {
        PayloadRule::Any => Ok(()),
        PayloadRule::Empty if len == 0 => Ok(()),
        PayloadRule::Empty => Err("this opcode carries no payload"),
        PayloadRule::Exactly(n) if len == n => Ok(()),
        PayloadRule::Exactly(_) => Err("payload length wrong for this opcode"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::{DEFAULT_PKEY, TVER_IRN};
    use crate::ext::{CreditCode, Syndrome};
    use crate::opcode::Opcode;
    use crate::psn::Psn;

    fn bth(opcode: Opcode, tver: u8) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            tver,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qpn: 0x11,
            ack_req: true,
            psn: Psn::new(5),
        }
    }

    #[test]
    fn ack_round_trip_and_layout_enforced() {
        let mut ack = IbRepr::new(bth(Opcode::RC_ACKNOWLEDGE, 0));
        ack.aeth = Some(AethRepr {
            syndrome: Syndrome::Ack(CreditCode::INVALID),
            msn: 9,
        });
        let mut buf = [0u8; 16];
        assert_eq!(ack.emit(&mut buf, &[]), Ok(16));
        assert_eq!(IbRepr::parse(&buf), Ok((ack, &[][..])));

        let mut bad = ack;
        bad.reth = Some(RethRepr::default());
        assert!(matches!(
            bad.emit(&mut [0u8; 64], &[]),
            Err(Error::Invalid { .. })
        ));
        bad = ack;
        bad.payload_len = 4;
        assert!(bad.emit(&mut [0u8; 64], &[1, 2, 3, 4]).is_err());
    }

    #[test]
    fn odd_payload_is_padded_and_pad_count_set() {
        let mut send = IbRepr::new(bth(Opcode::RC_SEND_ONLY, 0));
        send.payload_len = 5;
        let mut buf = [0xeeu8; 20];
        assert_eq!(send.emit(&mut buf, b"hello"), Ok(20));
        assert_eq!(buf[1] & 0x30, 3 << 4);
        assert_eq!(&buf[12..20], b"hello\0\0\0");
        assert_eq!(IbRepr::parse(&buf), Ok((send, &b"hello"[..])));
    }

    #[test]
    fn irn_write_middle_carries_irneth_and_reth() {
        let mut w = IbRepr::new(bth(Opcode::RC_RDMA_WRITE_MIDDLE, TVER_IRN));
        w.irn = Some(IrnEthRepr {
            psn_offset: Some(1),
            ..Default::default()
        });
        w.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0x42,
            dma_len: 3000,
        });
        w.payload_len = 1024;
        let payload = vec![7u8; 1024];
        let mut buf = vec![0u8; w.buffer_len()];
        w.emit(&mut buf, &payload).expect("valid");
        assert_eq!(buf[1] & 0x0f, TVER_IRN);
        let (back, p) = IbRepr::parse(&buf).expect("parses");
        assert_eq!(back, w);
        assert_eq!(p, &payload[..]);
        // Without the RETH the IRN layout is not met.
        w.reth = None;
        assert!(w.check().is_err());
    }

    #[test]
    fn ext_ib_bitmap_nak_bytes_as_docs_wire_shows_them() {
        // docs/WIRE.md §4.5: PSNs 0x1f4 and 0x1f5 lost, 0x205 the highest received.
        let mut nak = IbRepr::new(bth(Opcode::RC_ACKNOWLEDGE, crate::bth::TVER_EXT_IB));
        nak.bth.ack_req = false;
        nak.bth.psn = Psn::new(0x1f4);
        nak.irn = Some(IrnEthRepr {
            sack_psn: Some(Psn::new(0x205)),
            loss_bitmap: crate::irn::LossBitmap::from_words(&[3]),
            ..Default::default()
        });
        nak.aeth = Some(AethRepr {
            syndrome: Syndrome::Nak(crate::ext::NakCode::PsnSequenceError),
            msn: 0,
        });
        let mut buf = [0u8; 28];
        assert_eq!(nak.emit(&mut buf, &[]), Ok(28));
        assert_eq!(
            buf,
            [
                0x11, 0x02, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0x01, 0xf4, 0x08, 0x01, 0, 0, 0, 0,
                0x02, 0x05, 0, 0, 0, 0x03, 0x60, 0, 0, 0
            ]
        );
        assert_eq!(IbRepr::parse(&buf), Ok((nak, &[][..])));
        // Extended IB has no read (N)ACK; IRN's TVer 1 has.
        assert!(Opcode::RC_IRN_READ_ACK.layout(2).is_none());
        assert!(Opcode::RC_IRN_READ_ACK.layout(TVER_IRN).is_some());
    }

    #[test]
    fn truncated_extension_header_is_reported_by_layer() {
        let mut r = IbRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST, 0));
        r.reth = Some(RethRepr {
            va: 1,
            rkey: 2,
            dma_len: 4096,
        });
        let mut buf = [0u8; 28];
        r.emit(&mut buf, &[]).expect("valid");
        assert_eq!(
            IbRepr::parse(&buf[..20]),
            Err(Error::Truncated {
                layer: Layer::Reth,
                need: 16,
                have: 8
            })
        );
    }
}
