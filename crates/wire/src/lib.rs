//! # irn-wire: the RoCEv2 wire codec of irn
//!
//! Real RoCEv2 packets, byte for byte: Ethernet II (+ 802.1Q), IPv4, IPv6, UDP, the InfiniBand
//! Base Transport Header and every extension header RC, UC and UD traffic uses (RETH, AETH,
//! AtomicETH, AtomicAckETH, ImmDt, IETH, DETH), the invariant CRC bit-exact with Linux rxe, CNP,
//! PFC and PAUSE frames, IRN's extensions (IRNETH, the read (N)ACK) and the Dynamic RDMA frame.
//! `docs/WIRE.md` in the repository documents every encoding choice.
//!
//! ## Two layers per header (the smoltcp pattern)
//!
//! * A **view** `Header<T: AsRef<[u8]>>` reads fields straight out of a buffer, zero-copy.
//!   `Header::new_checked(bytes)` validates the length (and whatever the length depends on) of
//!   untrusted bytes; **after it succeeds, no accessor panics.** `new_unchecked` is for buffers
//!   whose size the caller guarantees.
//! * A **representation** `HeaderRepr` holds validated, high-level fields: `parse(&view)` checks
//!   semantics (checksums, reserved values, consistency), `buffer_len()` says how many bytes
//!   `emit(&mut buf)` writes. Emitting checks field ranges and returns an error instead of
//!   writing something no parser would read back.
//!
//! Whole packets compose these: [`IbRepr`] (BTH to payload: the structured packet the transport
//! core exchanges), [`RoceRepr`] (IP to ICRC), and [`Frame`] (what a capture holds).
//!
//! ## Untrusted input
//!
//! Parsing never panics on any input (property-tested, and fuzzed under `fuzz/`): every failure
//! is an [`Error`] naming the [`Layer`] at fault. Unknown opcodes, EtherTypes and MAC control
//! opcodes are data, not errors.
//!
//! ## Example
//!
//! ```
//! use irn_wire::{BthRepr, IbRepr, Opcode, Psn, RethRepr, RoceRepr, DEFAULT_PKEY, TVER_STANDARD};
//! use std::net::Ipv4Addr;
//!
//! let mut ib = IbRepr::new(BthRepr {
//!     opcode: Opcode::RC_RDMA_WRITE_ONLY, solicited: false, mig_req: false,
//!     tver: TVER_STANDARD, pkey: DEFAULT_PKEY, fecn: false, becn: false,
//!     dest_qpn: 0x11, ack_req: true, psn: Psn::new(100),
//! });
//! ib.reth = Some(RethRepr { va: 0x1000, rkey: 0x1234, dma_len: 5 });
//! ib.payload_len = 5;
//! // IPv4 ID 0, DF, TTL 64, ECT(0), UDP port 4791: as a Linux UDP socket sends it.
//! let packet = RoceRepr::ipv4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 0xc000, ib);
//! let mut buf = vec![0u8; packet.buffer_len()];
//! packet.emit(&mut buf, b"hello").unwrap();
//!
//! let parsed = RoceRepr::parse(&buf).unwrap();
//! assert!(parsed.icrc.ok());
//! assert_eq!(parsed.payload, b"hello");
//! assert_eq!(parsed.repr.ib, ib);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bytes;
mod error;
mod view;

pub mod bth;
pub mod cm;
pub mod drp;
pub mod ethernet;
pub mod ext;
pub mod frame;
pub mod ib;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod irn;
pub mod mac_control;
pub mod mad;
pub mod opcode;
pub mod psn;
pub mod roce;
pub mod udp;

pub use bth::{Bth, BthRepr, BTH_LEN, DEFAULT_PKEY, TVER_EXT_IB, TVER_IRN, TVER_STANDARD};
pub use drp::{Drp, DrpRepr};
pub use error::{Error, Layer, Result};
pub use ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, VlanTag};
pub use ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, CreditCode, Deth,
    DethRepr, Ieth, ImmDt, NakCode, Reth, RethRepr, RnrTimer, Syndrome,
};
pub use frame::{Frame, Other};
pub use ib::IbRepr;
pub use icrc::{IcrcCheck, ICRC_LEN};
pub use ipv4::{Ecn, Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use irn::{IrnEth, IrnEthRepr, LocalBuffer, LossBitmap, MAX_BITMAP_WORDS};
pub use mac_control::{MacControl, MacControlRepr, PfcRepr};
pub use opcode::{Headers, Layout, Opcode, PayloadRule, Transport};
pub use psn::Psn;
pub use roce::{IpRepr, RocePacket, RoceRepr};
pub use udp::{UdpChecksum, UdpPacket, UdpRepr, ROCEV2_PORT};

/// Ethernet's frame check sequence (IEEE 802.3), which captures and raw sockets leave out.
pub const ETHERNET_FCS_LEN: usize = 4;

/// An untagged Ethernet frame's header and FCS: what the link adds to an IP packet
/// (IEEE 802.3; a VLAN tag adds 4 more, [`ethernet`]'s tagged layout).
pub const ETHERNET_FRAMING_LEN: usize = 14 + ETHERNET_FCS_LEN;

/// What RoCEv2 over IPv4 adds to the IB transport headers and payload: the IPv4 and UDP
/// headers and the ICRC (RoCEv2 annex A17.4).
pub const ROCEV2_IPV4_ENCAP_LEN: usize = ipv4::HEADER_LEN + udp::HEADER_LEN + ICRC_LEN;

#[cfg(test)]
mod overhead_tests {
    use super::*;

    #[test]
    fn a_full_size_rocev2_frame_adds_50_bytes_to_its_transport_headers() {
        // 14 Ethernet + 4 FCS + 20 IPv4 + 8 UDP + 4 ICRC.
        assert_eq!(ETHERNET_FRAMING_LEN + ROCEV2_IPV4_ENCAP_LEN, 50);
        assert_eq!(ROCEV2_IPV4_ENCAP_LEN, 32);
    }
}
