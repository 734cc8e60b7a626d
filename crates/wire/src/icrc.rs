//! The RoCEv2 invariant CRC (IBTA RoCEv2 annex A17.3.3; bit-exact with Linux rxe's
//! `rxe_icrc_hdr`).
//!
//! The ICRC is the IEEE 802.3 CRC-32 over:
//! 1. 8 bytes of ones, standing in for the InfiniBand LRH a RoCEv2 packet does not have;
//! 2. the IP header with its variant fields set to ones — IPv4: TOS (DSCP + ECN), TTL and header
//!    checksum; IPv6: traffic class, flow label and hop limit. The IPv4 Identification, flags,
//!    total length and addresses are *not* masked, so a sender must know the ID the receiver will
//!    see (see `docs/WIRE.md`);
//! 3. the UDP header with its checksum set to ones;
//! 4. the BTH with byte 4 (Resv8a, where FECN/BECN live) set to ones;
//! 5. everything after the BTH: extension headers, payload and pad.
//!
//! It is appended little-endian: the value returned here is what `zlib.crc32` computes, and
//! `value.to_le_bytes()` are the four bytes on the wire. (Wireshark displays the byte-swapped
//! value.)

use crate::bth::BTH_LEN;
use crate::error::{need, Error, Layer, Result};
use crate::{ipv4, ipv6, udp};

/// Length of the ICRC.
pub const ICRC_LEN: usize = 4;

/// Computes the ICRC from the IP header (20 bytes for IPv4, 40 for IPv6, chosen by the version
/// nibble), the UDP header, and the InfiniBand packet from the BTH up to, not including, the
/// ICRC.
pub fn compute(ip_header: &[u8], udp_header: &[u8], ib: &[u8]) -> Result<u32> {
    compute_gather(ip_header, udp_header, ib, [])
}

/// [`compute`] over an InfiniBand packet given in pieces: `ib` from the BTH on (at least the
/// BTH), then each of `rest` in order — the headers a sender wrote, then the payload where it
/// lies in application memory and the pad, with no copy to put them side by side
/// ([`RoceRepr::emit_gather`](crate::RoceRepr::emit_gather)).
pub fn compute_gather<'a>(
    ip_header: &[u8],
    udp_header: &[u8],
    ib: &[u8],
    rest: impl IntoIterator<Item = &'a [u8]>,
) -> Result<u32> {
    // The masked pseudo-header (8 ones, IP, UDP, BTH) is assembled in one stack buffer so the CRC
    // runs over two slices, not five (about 10 % off a frame parse; docs/BENCHMARKS.md).
    const ONES: usize = 8;
    // Extension headers up to this long join the pseudo-header's buffer too: each short
    // update of the CRC has a fixed cost, which a gathered packet's headers paid twice.
    const TAIL: usize = 96;
    let mut pseudo = [0xffu8; ONES + ipv6::HEADER_LEN + udp::HEADER_LEN + BTH_LEN + TAIL];
    let ip_len = match ip_header.first().map(|b| b >> 4) {
        Some(4) => {
            need(Layer::Ipv4, ip_header, ipv4::HEADER_LEN)?;
            let h = &mut pseudo[ONES..ONES + ipv4::HEADER_LEN];
            h.copy_from_slice(&ip_header[..ipv4::HEADER_LEN]);
            h[1] = 0xff; // TOS
            h[8] = 0xff; // TTL
            h[10] = 0xff; // header checksum
            h[11] = 0xff;
            ipv4::HEADER_LEN
        }
        Some(6) => {
            need(Layer::Ipv6, ip_header, ipv6::HEADER_LEN)?;
            let h = &mut pseudo[ONES..ONES + ipv6::HEADER_LEN];
            h.copy_from_slice(&ip_header[..ipv6::HEADER_LEN]);
            h[0] |= 0x0f; // traffic class, high nibble
            h[1] = 0xff; // traffic class low nibble + flow label
            h[2] = 0xff;
            h[3] = 0xff;
            h[7] = 0xff; // hop limit
            ipv6::HEADER_LEN
        }
        _ => {
            return Err(Error::Malformed {
                layer: Layer::Icrc,
                what: "IP header is neither version 4 nor 6",
            })
        }
    };
    need(Layer::Udp, udp_header, udp::HEADER_LEN)?;
    need(Layer::Bth, ib, BTH_LEN)?;
    let udp_at = ONES + ip_len;
    let u = &mut pseudo[udp_at..udp_at + udp::HEADER_LEN];
    u.copy_from_slice(&udp_header[..udp::HEADER_LEN]);
    u[6] = 0xff; // checksum
    u[7] = 0xff;
    let bth_at = udp_at + udp::HEADER_LEN;
    let b = &mut pseudo[bth_at..bth_at + BTH_LEN];
    b.copy_from_slice(&ib[..BTH_LEN]);
    b[4] = 0xff; // FECN, BECN, reserved

    let mut h = crc32fast::Hasher::new();
    let after = &ib[BTH_LEN..];
    let end = bth_at + BTH_LEN;
    if after.len() <= TAIL {
        pseudo[end..end + after.len()].copy_from_slice(after);
        h.update(&pseudo[..end + after.len()]);
    } else {
        h.update(&pseudo[..end]);
        h.update(after);
    }
    for piece in rest {
        h.update(piece);
    }
    Ok(h.finalize())
}

/// The ICRC a RoCEv2 IP packet carries and the one its bytes call for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcrcCheck {
    /// The value in the packet (its last four bytes, read little-endian).
    pub carried: u32,
    /// The value computed over the packet.
    pub computed: u32,
}

impl IcrcCheck {
    /// Whether they agree.
    pub const fn ok(&self) -> bool {
        self.carried == self.computed
    }
}

/// Checks the ICRC of a RoCEv2 packet given from its IP header on (trailing bytes past the IP
/// length are ignored). Needs only the IP, UDP and BTH headers to be well-formed, so it also
/// works for packets whose later headers this codec does not decode.
pub fn check_ip_packet(packet: &[u8]) -> Result<IcrcCheck> {
    let (ip_header, datagram) = match packet.first().map(|b| b >> 4) {
        Some(4) => {
            let p = ipv4::Ipv4Packet::new_checked(packet)?;
            (&packet[..p.header_len()], &packet[p.payload_range()])
        }
        Some(6) => {
            let p = ipv6::Ipv6Packet::new_checked(packet)?;
            (&packet[..ipv6::HEADER_LEN], &packet[p.payload_range()])
        }
        Some(_) => {
            return Err(Error::Malformed {
                layer: Layer::Icrc,
                what: "IP header is neither version 4 nor 6",
            })
        }
        None => {
            return Err(Error::Truncated {
                layer: Layer::Ipv4,
                need: 1,
                have: 0,
            })
        }
    };
    let u = udp::UdpPacket::new_checked(datagram)?;
    let ib = &datagram[u.payload_range()];
    need(Layer::Bth, ib, BTH_LEN)?;
    need(Layer::Icrc, ib, BTH_LEN + ICRC_LEN)?;
    let (body, tail) = ib.split_at(ib.len() - ICRC_LEN);
    let carried = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let computed = compute(ip_header, u.header(), body)?;
    Ok(IcrcCheck { carried, computed })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 13 of rxe-golden.pcap (RC SEND_ONLY to QP 0x11, 64 bytes of 0x7b), from the IPv4
    /// header on. Its ICRC, 0xd5cbba68 (bytes 68 ba cb d5), was also verified by the interop
    /// harness's independent `icrc_check.py`.
    fn rxe_send_only() -> Vec<u8> {
        let hex = concat!(
            "4500006c6d0740004011b89d0a63000c0a63000b",
            "c12112b700580000",
            "0400ffff0000001180b0b212",
        );
        let mut v: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        v.extend_from_slice(&[0x7b; 64]);
        v.extend_from_slice(&[0x68, 0xba, 0xcb, 0xd5]);
        v
    }

    #[test]
    fn matches_linux_rxe() {
        let p = rxe_send_only();
        let check = check_ip_packet(&p).expect("well-formed");
        assert_eq!(check.carried, 0xd5cb_ba68);
        assert_eq!(check.computed, 0xd5cb_ba68);
    }

    #[test]
    fn masked_fields_do_not_change_the_crc() {
        let p = rxe_send_only();
        let base = {
            let (ip, rest) = p.split_at(20);
            compute(ip, &rest[..8], &rest[8..rest.len() - 4]).expect("ok")
        };
        for (offset, value) in [(1, 0x2e), (8, 1), (10, 0), (26, 0x12), (32, 0xc0)] {
            let mut q = p.clone();
            q[offset] = value;
            let (ip, rest) = q.split_at(20);
            let c = compute(ip, &rest[..8], &rest[8..rest.len() - 4]).expect("ok");
            assert_eq!(c, base, "byte {offset} is variant and must be masked");
        }
        let mut q = p.clone();
        q[4] ^= 1; // IP ID is covered
        let (ip, rest) = q.split_at(20);
        assert_ne!(
            compute(ip, &rest[..8], &rest[8..rest.len() - 4]).expect("ok"),
            base
        );
    }
}
