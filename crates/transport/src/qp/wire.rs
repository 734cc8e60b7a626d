//! What the wire format changes in the requester and the completer, asked as properties of
//! [`Wire`] — whether Read responses have a PSN space of their own, whether every request is
//! acknowledged, whether every packet can be placed on its own — and the extension header
//! each request, acknowledgement and response carries. Each is one exhaustive match here, so
//! a new format answers them in this file. The responders, which keep different state per
//! format, are variants of their own (`ResponderWire`); the headers of their packets are
//! asked for here too.

use irn_wire::{IrnEthRepr, LocalBuffer, LossBitmap, Psn};

use super::requester::SendWqe;
use crate::config::Wire;

impl Wire {
    /// Reads and atomics are answered in a PSN space of their own (IRN §5.4): a request takes
    /// one sPSN, its responses rPSNs that the requester counts alike. Otherwise (IBTA §9.7.5)
    /// a Read takes a PSN per response packet, a response missing is resent as a Read of the
    /// rest, and an ACK beyond a Read whose responses are missing implies they were lost.
    #[inline]
    pub(crate) fn splits_response_psns(self) -> bool {
        match self {
            Wire::Irn => true,
            Wire::Standard | Wire::ExtIb => false,
        }
    }

    /// Every request packet asks for an acknowledgement, and each ACK or NACK answers one
    /// arrived packet (IRN, SPEC T7); otherwise the requester asks where its recovery and its
    /// congestion controller need it.
    #[inline]
    pub(crate) fn acks_every_packet(self) -> bool {
        match self {
            Wire::Irn => true,
            Wire::Standard | Wire::ExtIb => false,
        }
    }

    /// Every packet carries what places it on its own: the RETH on every Write packet and
    /// the PSN offset within its message (IRN §5.3.1–5.3.2, extended IB T8(c)); standard
    /// RoCE's responder places from the message's first packet.
    #[inline]
    pub(crate) fn places_every_packet(self) -> bool {
        match self {
            Wire::Irn | Wire::ExtIb => true,
            Wire::Standard => false,
        }
    }

    /// Read responses echo the PSN offset they answer and the requester checks it (extended
    /// IB, T8(c)).
    #[inline]
    pub(crate) fn responses_echo_offset(self) -> bool {
        match self {
            Wire::ExtIb => true,
            Wire::Standard | Wire::Irn => false,
        }
    }

    /// The extension header of packet `k` of Send `w` (IRN §5.3.2: the receive WQE's number
    /// and the offset; extended IB adds the SSN, T8(c)).
    #[inline]
    pub(crate) fn send_header(self, w: &SendWqe, k: u32) -> Option<IrnEthRepr> {
        let eth = IrnEthRepr {
            wqe_sn: w.recv_sn,
            psn_offset: Some(k),
            ..IrnEthRepr::default()
        };
        match self {
            Wire::Standard => None,
            Wire::Irn => Some(eth),
            Wire::ExtIb => Some(IrnEthRepr {
                ssn: Some(w.ssn),
                ..eth
            }),
        }
    }

    /// The extension header of packet `k` of Write `w`: the offset, and on the last packet of
    /// a Write with immediate the receive WQE it consumes.
    #[inline]
    pub(crate) fn write_header(
        self,
        w: &SendWqe,
        k: u32,
        last: bool,
        imm: bool,
    ) -> Option<IrnEthRepr> {
        match self {
            Wire::Standard => None,
            Wire::Irn | Wire::ExtIb => Some(IrnEthRepr {
                wqe_sn: if last && imm { w.recv_sn } else { None },
                psn_offset: Some(k),
                ..IrnEthRepr::default()
            }),
        }
    }

    /// The extension header of Read `w` requested from its packet `k`, `off` bytes in: IRN's
    /// read WQE number (IRN §5.4); extended IB's requester buffer, echoed by every response
    /// with its offset (the address of the part asked for when the list has one entry).
    #[inline]
    pub(crate) fn read_header(self, w: &SendWqe, k: u32, off: u64) -> Option<IrnEthRepr> {
        match self {
            Wire::Standard => None,
            Wire::Irn => Some(IrnEthRepr {
                wqe_sn: w.read_sn,
                ..IrnEthRepr::default()
            }),
            Wire::ExtIb => Some(IrnEthRepr {
                psn_offset: Some(k),
                local: w.wr.sg_list.first().map(|s| LocalBuffer {
                    va: s.addr + off,
                    lkey: s.lkey,
                }),
                ..IrnEthRepr::default()
            }),
        }
    }

    /// The extension header of atomic `w`: IRN's read WQE number; extended IB's, empty.
    #[inline]
    pub(crate) fn atomic_header(self, w: &SendWqe) -> Option<IrnEthRepr> {
        match self {
            Wire::Standard => None,
            Wire::Irn => Some(IrnEthRepr {
                wqe_sn: w.read_sn,
                ..IrnEthRepr::default()
            }),
            Wire::ExtIb => Some(IrnEthRepr::default()),
        }
    }

    /// The extension header of a Read response packet at `offset` within its Read, for the
    /// requester's buffer `local` (extended IB echoes both, T8(c)).
    #[inline]
    pub(crate) fn read_response_header(
        self,
        offset: u32,
        local: Option<LocalBuffer>,
    ) -> Option<IrnEthRepr> {
        match self {
            Wire::Standard | Wire::Irn => None,
            Wire::ExtIb => Some(IrnEthRepr {
                psn_offset: Some(offset & Psn::MASK),
                local,
                ..IrnEthRepr::default()
            }),
        }
    }

    /// The extension header of an atomic acknowledgement (extended IB's packets all carry
    /// one; IRN's atomic ACKs are answered in the rPSN space without).
    #[inline]
    pub(crate) fn atomic_ack_header(self) -> Option<IrnEthRepr> {
        match self {
            Wire::Standard | Wire::Irn => None,
            Wire::ExtIb => Some(IrnEthRepr::default()),
        }
    }

    /// The extension header of an ACK or NAK: the selectively acknowledged PSN and the loss
    /// bitmap (IRN §3.1; extended IB's bitmap NAK, T8(d)).
    #[inline]
    pub(crate) fn ack_header(
        self,
        sack: Option<Psn>,
        lost: Option<LossBitmap>,
    ) -> Option<IrnEthRepr> {
        match self {
            Wire::Standard => None,
            Wire::Irn | Wire::ExtIb => Some(IrnEthRepr {
                sack_psn: sack,
                loss_bitmap: lost,
                ..IrnEthRepr::default()
            }),
        }
    }
}
