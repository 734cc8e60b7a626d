//! Feeds arbitrary bytes to every decoder entry point. Beyond "never panics": whatever parses
//! as RoCEv2 must re-emit to a frame that parses to the same headers with a valid ICRC.
//!
//! Run with `cargo +nightly fuzz run decode_frame` from the repository root (seed it with
//! `fixtures/captures` frames for faster coverage).
#![no_main]

use irn_wire::{icrc, Frame, IbRepr, RoceRepr, UdpChecksum};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Frame::parse_ip(data);
    let _ = IbRepr::parse(data);
    let _ = icrc::check_ip_packet(data);
    let _ = RoceRepr::parse(data);
    if let Ok(Frame::RoceV2 { eth: Some(eth), packet }) = Frame::parse_ethernet(data) {
        let mut out = vec![0u8; eth.buffer_len() + packet.repr.buffer_len()];
        packet
            .repr
            .emit_frame(&eth, &mut out, packet.payload)
            .expect("a parsed packet re-emits");
        match Frame::parse_ethernet(&out).expect("a re-emitted packet parses") {
            Frame::RoceV2 { packet: again, .. } => {
                assert!(again.icrc.ok());
                let mut want = packet.repr;
                if let UdpChecksum::Mismatch(_) = want.udp.checksum {
                    want.udp.checksum = again.repr.udp.checksum;
                }
                assert_eq!(again.repr, want);
                assert_eq!(again.payload, packet.payload);
            }
            other => panic!("re-emitted RoCEv2 parsed as {other:?}"),
        }
    }
});
