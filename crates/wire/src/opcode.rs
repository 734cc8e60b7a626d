//! BTH opcodes and the extension headers each one carries (IBTA Vol. 1 §9.2.1, Table 38;
//! RoCEv2 annex A17 for CNP).
//!
//! An opcode is a byte: bits 7–5 name the transport service (RC, UC, RD, UD, CNP, XRC, vendor),
//! bits 4–0 the operation. [`Opcode`] is a newtype over that byte, so every value is
//! representable — an unknown opcode is data, not an error — and the constants below can be used
//! in `match` patterns.
//!
//! [`Layout`] tells which extension headers follow the BTH and what payload is allowed. It is
//! known for every RC, UC and UD opcode, for CNP, and for IRN's packets (`tver == 1`, see
//! `docs/WIRE.md`). Other opcodes (RD, XRC, FLUSH, unassigned, vendor-specific) are carried
//! opaquely: BTH parsed, the rest left as payload; their ICRC can still be checked.

use core::fmt;

/// The transport service of an opcode (bits 7–5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// 000: reliable connection.
    Rc,
    /// 001: unreliable connection.
    Uc,
    /// 010: reliable datagram.
    Rd,
    /// 011: unreliable datagram.
    Ud,
    /// 100: congestion notification (RoCEv2 annex A17.9.3).
    Cnp,
    /// 101: extended reliable connection.
    Xrc,
    /// 110 and 111: manufacturer specific.
    Vendor,
}

/// A BTH opcode.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($name:ident = $value:expr, $text:expr;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", $text, "` (0x", stringify!($value), ").")]
                pub const $name: Opcode = Opcode($value);
            )*

            /// The opcode's name as the IBTA (and Linux `ib_pack.h`) spell it, e.g.
            /// `RC_SEND_FIRST`; `None` for an opcode no specification assigns.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00, "RC_SEND_FIRST";
    RC_SEND_MIDDLE = 0x01, "RC_SEND_MIDDLE";
    RC_SEND_LAST = 0x02, "RC_SEND_LAST";
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, "RC_SEND_LAST_WITH_IMMEDIATE";
    RC_SEND_ONLY = 0x04, "RC_SEND_ONLY";
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE";
    RC_RDMA_WRITE_FIRST = 0x06, "RC_RDMA_WRITE_FIRST";
    RC_RDMA_WRITE_MIDDLE = 0x07, "RC_RDMA_WRITE_MIDDLE";
    RC_RDMA_WRITE_LAST = 0x08, "RC_RDMA_WRITE_LAST";
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE";
    RC_RDMA_WRITE_ONLY = 0x0a, "RC_RDMA_WRITE_ONLY";
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE";
    RC_RDMA_READ_REQUEST = 0x0c, "RC_RDMA_READ_REQUEST";
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, "RC_RDMA_READ_RESPONSE_FIRST";
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE";
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, "RC_RDMA_READ_RESPONSE_LAST";
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, "RC_RDMA_READ_RESPONSE_ONLY";
    RC_ACKNOWLEDGE = 0x11, "RC_ACKNOWLEDGE";
    RC_ATOMIC_ACKNOWLEDGE = 0x12, "RC_ATOMIC_ACKNOWLEDGE";
    RC_COMPARE_SWAP = 0x13, "RC_COMPARE_SWAP";
    RC_FETCH_ADD = 0x14, "RC_FETCH_ADD";
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, "RC_SEND_LAST_WITH_INVALIDATE";
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, "RC_SEND_ONLY_WITH_INVALIDATE";
    RC_IRN_READ_ACK = 0x18, "RC_IRN_READ_ACK";
    RC_FLUSH = 0x1c, "RC_FLUSH";
    RC_ATOMIC_WRITE = 0x1d, "RC_ATOMIC_WRITE";
    UC_SEND_FIRST = 0x20, "UC_SEND_FIRST";
    UC_SEND_MIDDLE = 0x21, "UC_SEND_MIDDLE";
    UC_SEND_LAST = 0x22, "UC_SEND_LAST";
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, "UC_SEND_LAST_WITH_IMMEDIATE";
    UC_SEND_ONLY = 0x24, "UC_SEND_ONLY";
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, "UC_SEND_ONLY_WITH_IMMEDIATE";
    UC_RDMA_WRITE_FIRST = 0x26, "UC_RDMA_WRITE_FIRST";
    UC_RDMA_WRITE_MIDDLE = 0x27, "UC_RDMA_WRITE_MIDDLE";
    UC_RDMA_WRITE_LAST = 0x28, "UC_RDMA_WRITE_LAST";
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE";
    UC_RDMA_WRITE_ONLY = 0x2a, "UC_RDMA_WRITE_ONLY";
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE";
    RD_SEND_FIRST = 0x40, "RD_SEND_FIRST";
    RD_SEND_MIDDLE = 0x41, "RD_SEND_MIDDLE";
    RD_SEND_LAST = 0x42, "RD_SEND_LAST";
    RD_SEND_LAST_WITH_IMMEDIATE = 0x43, "RD_SEND_LAST_WITH_IMMEDIATE";
    RD_SEND_ONLY = 0x44, "RD_SEND_ONLY";
    RD_SEND_ONLY_WITH_IMMEDIATE = 0x45, "RD_SEND_ONLY_WITH_IMMEDIATE";
    RD_RDMA_WRITE_FIRST = 0x46, "RD_RDMA_WRITE_FIRST";
    RD_RDMA_WRITE_MIDDLE = 0x47, "RD_RDMA_WRITE_MIDDLE";
    RD_RDMA_WRITE_LAST = 0x48, "RD_RDMA_WRITE_LAST";
    RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x49, "RD_RDMA_WRITE_LAST_WITH_IMMEDIATE";
    RD_RDMA_WRITE_ONLY = 0x4a, "RD_RDMA_WRITE_ONLY";
    RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x4b, "RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE";
    RD_RDMA_READ_REQUEST = 0x4c, "RD_RDMA_READ_REQUEST";
    RD_RDMA_READ_RESPONSE_FIRST = 0x4d, "RD_RDMA_READ_RESPONSE_FIRST";
    RD_RDMA_READ_RESPONSE_MIDDLE = 0x4e, "RD_RDMA_READ_RESPONSE_MIDDLE";
    RD_RDMA_READ_RESPONSE_LAST = 0x4f, "RD_RDMA_READ_RESPONSE_LAST";
    RD_RDMA_READ_RESPONSE_ONLY = 0x50, "RD_RDMA_READ_RESPONSE_ONLY";
    RD_ACKNOWLEDGE = 0x51, "RD_ACKNOWLEDGE";
    RD_ATOMIC_ACKNOWLEDGE = 0x52, "RD_ATOMIC_ACKNOWLEDGE";
    RD_COMPARE_SWAP = 0x53, "RD_COMPARE_SWAP";
    RD_FETCH_ADD = 0x54, "RD_FETCH_ADD";
    RD_RESYNC = 0x55, "RD_RESYNC";
    RD_FLUSH = 0x5c, "RD_FLUSH";
    UD_SEND_ONLY = 0x64, "UD_SEND_ONLY";
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE";
    CNP = 0x81, "CNP";
    XRC_SEND_FIRST = 0xa0, "XRC_SEND_FIRST";
    XRC_SEND_MIDDLE = 0xa1, "XRC_SEND_MIDDLE";
    XRC_SEND_LAST = 0xa2, "XRC_SEND_LAST";
    XRC_SEND_LAST_WITH_IMMEDIATE = 0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE";
    XRC_SEND_ONLY = 0xa4, "XRC_SEND_ONLY";
    XRC_SEND_ONLY_WITH_IMMEDIATE = 0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE";
    XRC_RDMA_WRITE_FIRST = 0xa6, "XRC_RDMA_WRITE_FIRST";
    XRC_RDMA_WRITE_MIDDLE = 0xa7, "XRC_RDMA_WRITE_MIDDLE";
    XRC_RDMA_WRITE_LAST = 0xa8, "XRC_RDMA_WRITE_LAST";
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE";
    XRC_RDMA_WRITE_ONLY = 0xaa, "XRC_RDMA_WRITE_ONLY";
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE";
    XRC_RDMA_READ_REQUEST = 0xac, "XRC_RDMA_READ_REQUEST";
    XRC_RDMA_READ_RESPONSE_FIRST = 0xad, "XRC_RDMA_READ_RESPONSE_FIRST";
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE";
    XRC_RDMA_READ_RESPONSE_LAST = 0xaf, "XRC_RDMA_READ_RESPONSE_LAST";
    XRC_RDMA_READ_RESPONSE_ONLY = 0xb0, "XRC_RDMA_READ_RESPONSE_ONLY";
    XRC_ACKNOWLEDGE = 0xb1, "XRC_ACKNOWLEDGE";
    XRC_ATOMIC_ACKNOWLEDGE = 0xb2, "XRC_ATOMIC_ACKNOWLEDGE";
    XRC_COMPARE_SWAP = 0xb3, "XRC_COMPARE_SWAP";
    XRC_FETCH_ADD = 0xb4, "XRC_FETCH_ADD";
    XRC_SEND_LAST_WITH_INVALIDATE = 0xb6, "XRC_SEND_LAST_WITH_INVALIDATE";
    XRC_SEND_ONLY_WITH_INVALIDATE = 0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE";
}

/// A set of extension headers, as flags. They appear on the wire in the order of the constants
/// below (IBTA §9.2: DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH), after the IRNETH
/// when there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u8);

impl Headers {
    /// No extension header.
    pub const NONE: Headers = Headers(0);
    /// IRN extended transport header (TVer 1 packets only).
    pub const IRNETH: Headers = Headers(1 << 0);
    /// Datagram ETH.
    pub const DETH: Headers = Headers(1 << 1);
    /// RDMA ETH.
    pub const RETH: Headers = Headers(1 << 2);
    /// Atomic ETH.
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    /// ACK ETH.
    pub const AETH: Headers = Headers(1 << 4);
    /// Atomic ACK ETH.
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    /// Immediate data.
    pub const IMMDT: Headers = Headers(1 << 6);
    /// Invalidate ETH.
    pub const IETH: Headers = Headers(1 << 7);

    /// The union of two sets.
    #[must_use]
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }
}

/// What may follow the headers of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadRule {
    /// No payload (requests, ACKs).
    Empty,
    /// Any length, zero included (data packets; the transport checks path-MTU rules).
    Any,
    /// Exactly this many bytes (CNP's 16 reserved bytes, ATOMIC_WRITE's 8).
    Exactly(usize),
}

/// The headers and payload a packet of a given opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Extension headers after the BTH.
    pub headers: Headers,
    /// What may follow them.
    pub payload: PayloadRule,
}

/// Standard layout of an RC/UC operation (the low 5 bits), per IBTA Table 38.
const fn operation_layout(op: u8) -> Option<Layout> {
    use Headers as H;
    use PayloadRule::{Any, Empty, Exactly};
    let (headers, payload) = match op {
        0x00..=0x02 | 0x04 => (H::NONE, Any),
        0x03 | 0x05 => (H::IMMDT, Any),
        0x06 | 0x0a => (H::RETH, Any),
        0x07 | 0x08 => (H::NONE, Any),
        0x09 => (H::IMMDT, Any),
        0x0b => (H::RETH.with(H::IMMDT), Any),
        0x0c => (H::RETH, Empty),
        0x0d | 0x0f | 0x10 => (H::AETH, Any),
        0x0e => (H::NONE, Any),
        0x11 => (H::AETH, Empty),
        0x12 => (H::AETH.with(H::ATOMIC_ACK_ETH), Empty),
        0x13 | 0x14 => (H::ATOMIC_ETH, Empty),
        0x16 | 0x17 => (H::IETH, Any),
        0x1d => (H::RETH, Exactly(8)),
        _ => return None,
    };
    Some(Layout { headers, payload })
}

/// [`Opcode::layout`] for every opcode under TVer 0, 1 and 2 (the versions with layouts).
static LAYOUTS: [[Option<Layout>; 256]; 3] = {
    let mut t = [[None; 256]; 3];
    let mut tver = 0;
    while tver < 3 {
        let mut op = 0;
        while op < 256 {
            t[tver][op] = Opcode(op as u8).layout_by_rule(tver as u8);
            op += 1;
        }
        tver += 1;
    }
    t
};

impl Opcode {
    /// The transport service (bits 7–5).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Vendor,
        }
    }

    /// The operation (bits 4–0).
    pub const fn operation(self) -> u8 {
        self.0 & 0x1f
    }

    /// The layout of a packet with this opcode and BTH transport header version `tver`, or
    /// `None` when this codec carries the packet opaquely (see the module documentation).
    ///
    /// With `tver == 1` (IRN, `docs/WIRE.md`), RC opcodes put an IRNETH right after the BTH, every
    /// RDMA Write packet carries a RETH (IRN §5.3.1), and `RC_IRN_READ_ACK` is defined. With
    /// `tver == 2` (extended-IB selective retransmission, SPEC T8(c–d)) the layout is the same
    /// but for `RC_IRN_READ_ACK`, which that design does not have (its Read responses share the
    /// request PSN space, as standard RoCE's do).
    #[inline]
    pub const fn layout(self, tver: u8) -> Option<Layout> {
        // Every packet built, checked or parsed asks for its layout, most more than once: a
        // table read, built at compile time from the rules below.
        if tver as usize >= LAYOUTS.len() {
            return None;
        }
        LAYOUTS[tver as usize][self.0 as usize]
    }

    /// [`Opcode::layout`] by its rules, from which the table is built (`None` for TVer 3 and
    /// above).
    const fn layout_by_rule(self, tver: u8) -> Option<Layout> {
        let op = self.operation();
        match (self.transport(), tver) {
            (Transport::Rc, 0) => match op {
                0x18 => None,
                _ => operation_layout(op),
            },
            (Transport::Rc, 1 | 2) => {
                let base = match op {
                    0x18 if tver == 2 => None,
                    0x18 => Some(Layout {
                        headers: Headers::AETH,
                        payload: PayloadRule::Empty,
                    }),
                    0x07..=0x09 => match operation_layout(op) {
                        Some(l) => Some(Layout {
                            headers: l.headers.with(Headers::RETH),
                            payload: l.payload,
                        }),
                        None => None,
                    },
                    _ => operation_layout(op),
                };
                match base {
                    Some(l) => Some(Layout {
                        headers: l.headers.with(Headers::IRNETH),
                        payload: l.payload,
                    }),
                    None => None,
                }
            }
            (Transport::Uc, 0) => match op {
                0x00..=0x0b => operation_layout(op),
                _ => None,
            },
            (Transport::Ud, 0) => match op {
                0x04 => Some(Layout {
                    headers: Headers::DETH,
                    payload: PayloadRule::Any,
                }),
                0x05 => Some(Layout {
                    headers: Headers::DETH.with(Headers::IMMDT),
                    payload: PayloadRule::Any,
                }),
                _ => None,
            },
            (Transport::Cnp, 0) if op == 0x01 => Some(Layout {
                headers: Headers::NONE,
                payload: PayloadRule::Exactly(16),
            }),
            _ => None,
        }
    }

    /// Whether this is a request (sent by the requester) rather than a response or ACK.
    pub const fn is_request(self) -> bool {
        !matches!(self.operation(), 0x0d..=0x12 | 0x18)
            && !matches!(self.transport(), Transport::Cnp)
    }

    /// Whether this opcode starts a message (FIRST or ONLY, or a single-packet request).
    pub const fn is_first(self) -> bool {
        matches!(
            self.operation(),
            0x00 | 0x04
                | 0x05
                | 0x06
                | 0x0a
                | 0x0b
                | 0x0c
                | 0x0d
                | 0x10
                | 0x13
                | 0x14
                | 0x17
                | 0x1d
        )
    }

    /// Whether this opcode ends a message (LAST or ONLY, or a single-packet request).
    pub const fn is_last(self) -> bool {
        matches!(
            self.operation(),
            0x02 | 0x03
                | 0x04
                | 0x05
                | 0x08
                | 0x09
                | 0x0a
                | 0x0b
                | 0x0c
                | 0x0f
                | 0x10
                | 0x13
                | 0x14
                | 0x16
                | 0x17
                | 0x1d
        )
    }

    /// Whether this is a Send packet (FIRST/MIDDLE/LAST/ONLY, with immediate or invalidate).
    pub const fn is_send(self) -> bool {
        matches!(self.operation(), 0x00..=0x05 | 0x16 | 0x17)
    }

    /// Whether this is an RDMA Write packet (FIRST/MIDDLE/LAST/ONLY, with or without
    /// immediate).
    pub const fn is_write(self) -> bool {
        matches!(self.operation(), 0x06..=0x0b)
    }

    /// Whether the packet carries immediate data (the last or only packet of a Send or Write
    /// with immediate; IBTA Table 38's ImmDt column).
    pub const fn has_immediate(self) -> bool {
        matches!(self.operation(), 0x03 | 0x05 | 0x09 | 0x0b)
    }

    /// Whether this is an RDMA Read request or an atomic (Compare & Swap, Fetch & Add): a
    /// request answered by responses rather than by ACKs.
    pub const fn is_read_or_atomic_request(self) -> bool {
        matches!(self.operation(), 0x0c | 0x13 | 0x14)
    }

    /// Whether this is an RDMA Read response packet (FIRST/MIDDLE/LAST/ONLY).
    pub const fn is_read_response(self) -> bool {
        matches!(self.operation(), 0x0d..=0x10)
    }

    /// Whether this packet is pure control — an ACK or NAK, IRN's read (N)ACK, or a CNP — which
    /// carries no data and travels at the control priority.
    pub const fn is_control(self) -> bool {
        self.0 == Opcode::RC_ACKNOWLEDGE.0
            || self.0 == Opcode::RC_IRN_READ_ACK.0
            || self.0 == Opcode::CNP.0
    }

    /// The RC Read response opcode of a packet that is the `first` and/or `last` of its
    /// response (IBTA §9.4.3: ONLY, FIRST, MIDDLE, LAST).
    pub const fn read_response(first: bool, last: bool) -> Opcode {
        match (first, last) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "OPCODE_0x{:02x}", self.0),
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opcode({self} = 0x{:02x})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_partition_the_rc_opcodes() {
        for op in 0u8..=0x1f {
            let o = Opcode(op);
            if o.name().is_none() {
                continue;
            }
            if o == Opcode::RC_FLUSH || o == Opcode::RC_ATOMIC_WRITE {
                // IBTA 1.5's persistence operations: requests of their own kind.
                assert!(o.is_request() && !o.is_send() && !o.is_write());
                continue;
            }
            // Every assigned RC opcode is exactly one of: Send, Write, Read/atomic request,
            // Read response, control, atomic ACK.
            let kinds = [
                o.is_send(),
                o.is_write(),
                o.is_read_or_atomic_request(),
                o.is_read_response(),
                o.is_control(),
                o == Opcode::RC_ATOMIC_ACKNOWLEDGE,
            ];
            assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{o}");
            // Requests are Sends, Writes, Reads and atomics.
            assert_eq!(
                o.is_request(),
                o.is_send() || o.is_write() || o.is_read_or_atomic_request(),
                "{o}"
            );
        }
        assert!(Opcode::CNP.is_control());
        assert!(Opcode::RC_SEND_LAST_WITH_IMMEDIATE.has_immediate());
        assert!(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.has_immediate());
        assert!(!Opcode::RC_RDMA_WRITE_LAST.has_immediate());
        assert!(!Opcode::RC_SEND_LAST_WITH_INVALIDATE.has_immediate());
        for (first, last) in [(true, true), (true, false), (false, false), (false, true)] {
            let o = Opcode::read_response(first, last);
            assert!(o.is_read_response());
            assert_eq!((o.is_first(), o.is_last()), (first, last), "{o}");
        }
    }

    #[test]
    fn the_layout_table_holds_the_rules() {
        // Every TVer: those the table leaves out (3 and above) have no layout by the rules
        // either.
        for tver in 0..=u8::MAX {
            for op in 0..=u8::MAX {
                let want = Opcode(op).layout_by_rule(tver);
                assert_eq!(Opcode(op).layout(tver), want, "opcode {op:#x}, TVer {tver}");
            }
        }
    }

    #[test]
    fn layouts_follow_ibta_table_38() {
        let l = |o: Opcode| o.layout(0).expect("known");
        assert_eq!(l(Opcode::RC_RDMA_WRITE_FIRST).headers, Headers::RETH);
        assert_eq!(l(Opcode::RC_RDMA_WRITE_MIDDLE).headers, Headers::NONE);
        assert_eq!(
            l(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).headers,
            Headers::RETH.with(Headers::IMMDT)
        );
        assert_eq!(
            l(Opcode::RC_ATOMIC_ACKNOWLEDGE).headers,
            Headers::AETH.with(Headers::ATOMIC_ACK_ETH)
        );
        assert_eq!(l(Opcode::RC_RDMA_READ_REQUEST).payload, PayloadRule::Empty);
        assert_eq!(l(Opcode::UD_SEND_ONLY).headers, Headers::DETH);
        assert_eq!(l(Opcode::CNP).payload, PayloadRule::Exactly(16));
        // UC has no reads or atomics; UD only SEND_ONLY.
        assert_eq!(Opcode(0x2c).layout(0), None);
        assert_eq!(Opcode(0x60).layout(0), None);
        // The IRN read ACK opcode is unassigned in standard RoCE.
        assert_eq!(Opcode::RC_IRN_READ_ACK.layout(0), None);
    }

    #[test]
    fn irn_layouts_add_irneth_and_reth_on_every_write() {
        let mid = Opcode::RC_RDMA_WRITE_MIDDLE.layout(1).expect("known");
        assert_eq!(mid.headers, Headers::IRNETH.with(Headers::RETH));
        let last_imm = Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
            .layout(1)
            .expect("known");
        assert_eq!(
            last_imm.headers,
            Headers::IRNETH.with(Headers::RETH).with(Headers::IMMDT)
        );
        let rack = Opcode::RC_IRN_READ_ACK.layout(1).expect("known");
        assert_eq!(rack.headers, Headers::IRNETH.with(Headers::AETH));
        assert_eq!(Opcode::UD_SEND_ONLY.layout(1), None);
        // Extended IB (TVer 2): IRN's layouts without the read (N)ACK; TVer 3 is unknown.
        assert_eq!(
            Opcode::RC_RDMA_WRITE_MIDDLE.layout(2),
            Opcode::RC_RDMA_WRITE_MIDDLE.layout(1)
        );
        assert_eq!(Opcode::RC_IRN_READ_ACK.layout(2), None);
        assert_eq!(Opcode::RC_SEND_ONLY.layout(3), None);
    }

    #[test]
    fn every_byte_has_a_display() {
        for b in 0..=255u8 {
            let s = Opcode(b).to_string();
            assert!(!s.is_empty());
        }
        assert_eq!(Opcode(0x1f).to_string(), "OPCODE_0x1f");
    }
}
