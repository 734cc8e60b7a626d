//! What the device's receive side keeps between packets: whether received packets carry all
//! their ICRC covers (the path's, [`ReceivePath`](crate::net::ReceivePath)), the headers the
//! last verified segment of a coalesced datagram arrived under, the scratch a segment is
//! rebuilt into when its IP header is needed, and the socket receive buffer the connected
//! queue pairs' peers need.

use std::net::SocketAddr;

use irn_wire::{Ecn, IbRepr};

use super::MAX_RECEIVE_BUFFER;
use crate::net::SegmentHeaders;

/// The receive side's state.
pub(super) struct RxState {
    /// Received packets carry all their ICRC covers: it is verified.
    verify_icrc: bool,
    /// Where a coalesced datagram's segment is rebuilt into a whole IP packet.
    scratch: Vec<u8>,
    /// The headers the last verified segment arrived under, kept for the next one.
    seg_headers: Option<SegmentHeaders>,
    /// The receive buffer asked of the socket so far, bytes.
    buffer: usize,
    /// What the connected queue pairs' peers may have in flight: the configured buffer plus
    /// each connection's BDP cap in bytes.
    wanted: usize,
    /// Where a received packet's InfiniBand headers are parsed into, kept from packet to
    /// packet ([`RxState::parse`]).
    ib: IbRepr,
}

impl RxState {
    /// A receive side whose socket has `buffer` bytes, verifying ICRCs if `verify_icrc`.
    pub(super) fn new(verify_icrc: bool, buffer: usize) -> RxState {
        RxState {
            verify_icrc,
            scratch: Vec::new(),
            seg_headers: None,
            buffer,
            wanted: buffer,
            ib: IbRepr::SLOT,
        }
    }

    /// The InfiniBand headers and the payload of `packet` (the bytes between the UDP header
    /// and the ICRC), the headers parsed in place: a few hundred bytes, not moved from parser
    /// to caller for every packet received.
    pub(super) fn parse<'p>(&mut self, packet: &'p [u8]) -> irn_wire::Result<(&IbRepr, &'p [u8])> {
        let payload = IbRepr::parse_into(packet, &mut self.ib)?;
        Ok((&self.ib, payload))
    }

    /// Whether received ICRCs are verified.
    pub(super) fn verifies_icrc(&self) -> bool {
        self.verify_icrc
    }

    /// The scratch to rebuild a segment in; hand it back with [`RxState::put_scratch`].
    pub(super) fn take_scratch(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.scratch)
    }

    /// Returns the scratch [`RxState::take_scratch`] lent.
    pub(super) fn put_scratch(&mut self, scratch: Vec<u8>) {
        self.scratch = scratch;
    }

    /// The headers segments from `from` to `local` with ECN field `ecn` arrived under, kept
    /// for the next segment; `None` if none can be built (an address family other than the
    /// device's).
    pub(super) fn segment_headers(
        &mut self,
        from: SocketAddr,
        local: SocketAddr,
        ecn: Ecn,
    ) -> Option<&mut SegmentHeaders> {
        if !self.seg_headers.is_some_and(|h| h.matches(from, ecn)) {
            self.seg_headers = Some(SegmentHeaders::new(from, local, ecn)?);
        }
        self.seg_headers.as_mut()
    }

    /// A connection's peer may have `bytes` more in flight towards the device.
    pub(super) fn expect_in_flight(&mut self, bytes: usize) {
        self.wanted = self.wanted.saturating_add(bytes);
    }

    /// The receive buffer to ask the socket for now, if it should grow: what the peers may
    /// have in flight, at most [`MAX_RECEIVE_BUFFER`] — never smaller than asked before.
    pub(super) fn grow(&mut self) -> Option<usize> {
        let want = self.wanted.min(MAX_RECEIVE_BUFFER);
        (want > self.buffer).then(|| {
            self.buffer = want;
            want
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_buffer_grows_with_the_peers_in_flight_up_to_its_bound_and_never_shrinks() {
        let mut rx = RxState::new(true, 4 << 20);
        assert!(rx.verifies_icrc());
        assert_eq!(rx.grow(), None);
        rx.expect_in_flight(123 * 4096);
        assert_eq!(rx.grow(), Some((4 << 20) + 123 * 4096));
        assert_eq!(rx.grow(), None);
        rx.expect_in_flight(usize::MAX);
        assert_eq!(rx.grow(), Some(MAX_RECEIVE_BUFFER));
        assert_eq!(rx.grow(), None);
    }

    #[test]
    fn segment_headers_are_kept_while_sender_and_marking_stay_the_same() {
        let mut rx = RxState::new(true, 1 << 20);
        let local: SocketAddr = "10.0.0.1:4791".parse().expect("addr");
        let from: SocketAddr = "10.0.0.2:49152".parse().expect("addr");
        let h = *rx.segment_headers(from, local, Ecn::Ect0).expect("IPv4");
        assert!(h.matches(from, Ecn::Ect0));
        let h2 = *rx.segment_headers(from, local, Ecn::Ce).expect("IPv4");
        assert!(h2.matches(from, Ecn::Ce) && !h2.matches(from, Ecn::Ect0));
        // Another family than the device's has no headers.
        let v6: SocketAddr = "[::1]:49152".parse().expect("addr");
        assert!(rx.segment_headers(v6, local, Ecn::Ect0).is_none());
    }
}
