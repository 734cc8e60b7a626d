//! The responder's reorder buffer (seed 002's first design, SPEC T8(a)).
//!
//! A standard RoCE responder discards a request packet whose PSN is not the expected one and
//! NAKs, so one reordered packet costs a go-back-N of everything behind it. With a reorder
//! buffer the responder instead parks the packet *whole* (headers and payload) in a per-QP
//! buffer in host memory, at bitmap offset `PSN − ePSN`; when the expected packet arrives and
//! is processed, the parked packets that follow it are taken back, in PSN order, and processed
//! as if they had just arrived ("bitmap 0bit非0时 … 取到OOO模块解析处理 … bitmap右移1bit").
//!
//! What the design costs, and where this implementation pays it:
//! * host memory: the buffer holds up to `capacity` packets; [`Counters::reorder_peak_bytes`]
//!   is the most it held;
//! * PCIe: a parked packet is written to host memory and read back before it is placed, two
//!   crossings more than a packet placed directly ([`Counters::reorder_bytes`]); the simulator
//!   charges them to the NIC's receive pipeline;
//! * NIC state per QP: the bitmap (`capacity` bits) and one buffer descriptor per slot.
//!
//! Loss is still the requester's to repair (it is a standard go-back-N sender): the responder
//! NAKs the expected PSN once the hole meets the [`HoleRule`](crate::HoleRule) — open for its
//! delay, or with its threshold of packets parked behind it — instead of on the first
//! out-of-order arrival; a packet beyond the buffer is discarded and NAKed at once, as a
//! standard responder would.
//!
//! [`Counters::reorder_peak_bytes`]: crate::Counters::reorder_peak_bytes
//! [`Counters::reorder_bytes`]: crate::Counters::reorder_bytes

use std::collections::VecDeque;

use irn_wire::{IbRepr, Psn};

use crate::time::Time;

/// A packet parked in the buffer.
#[derive(Debug, Clone)]
pub(crate) struct Parked {
    pub(crate) ib: IbRepr,
    pub(crate) payload: Vec<u8>,
    /// It arrived CE-marked (its ACK echoes the mark).
    pub(crate) ce: bool,
    /// When it arrived.
    pub(crate) at: Time,
}

/// What parking a packet did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Park {
    /// Parked: `bytes` written to the buffer.
    Parked { bytes: u64 },
    /// The slot already holds this PSN: a duplicate.
    Duplicate,
    /// Beyond the buffer: discarded.
    Full,
}

/// A reorder buffer of `capacity` packets, slot `i` holding PSN `base + i`.
#[derive(Debug, Clone)]
pub(crate) struct ReorderBuffer {
    capacity: u32,
    base: Psn,
    slots: VecDeque<Option<Parked>>,
    parked: u32,
    bytes: u64,
}

impl ReorderBuffer {
    pub(crate) fn new(capacity: u32) -> ReorderBuffer {
        ReorderBuffer {
            capacity: capacity.max(1),
            base: Psn::new(0),
            slots: VecDeque::new(),
            parked: 0,
            bytes: 0,
        }
    }

    /// Packets parked.
    pub(crate) fn len(&self) -> u32 {
        self.parked
    }

    /// Bytes parked (headers and payload as they arrived).
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// When the oldest parked packet arrived: the hole before it has been open at least since.
    pub(crate) fn oldest(&self) -> Option<Time> {
        self.slots.iter().flatten().map(|p| p.at).min()
    }

    /// Moves the window to start at `epsn`, dropping every slot before it (those PSNs were
    /// processed, or the responder moved past them).
    fn align(&mut self, epsn: Psn) {
        if self.slots.is_empty() {
            self.base = epsn;
            return;
        }
        let d = self.base.distance(epsn);
        if d <= 0 {
            if d < 0 {
                // The expected PSN went back (a reset): nothing parked can be trusted.
                self.clear();
                self.base = epsn;
            }
            return;
        }
        for _ in 0..d {
            match self.slots.pop_front() {
                Some(Some(p)) => self.forget(&p),
                Some(None) => {}
                None => break,
            }
        }
        self.base = epsn;
    }

    fn forget(&mut self, p: &Parked) {
        self.parked -= 1;
        self.bytes -= p.ib.buffer_len() as u64;
    }

    /// Parks `ib` (with `payload`), which arrived ahead of `epsn`.
    pub(crate) fn park(
        &mut self,
        epsn: Psn,
        ib: &IbRepr,
        payload: &[u8],
        ce: bool,
        now: Time,
    ) -> Park {
        self.align(epsn);
        let d = epsn.distance(ib.bth.psn);
        if d <= 0 || d as u32 >= self.capacity {
            return Park::Full;
        }
        let d = d as usize;
        while self.slots.len() <= d {
            self.slots.push_back(None);
        }
        if self.slots[d].is_some() {
            return Park::Duplicate;
        }
        let bytes = ib.buffer_len() as u64;
        self.slots[d] = Some(Parked {
            ib: *ib,
            payload: payload.to_vec(),
            ce,
            at: now,
        });
        self.parked += 1;
        self.bytes += bytes;
        Park::Parked { bytes }
    }

    /// Takes the packet parked at `epsn`, if any (dropping anything parked before it).
    pub(crate) fn take(&mut self, epsn: Psn) -> Option<Parked> {
        self.align(epsn);
        let p = self.slots.front_mut()?.take()?;
        self.forget(&p);
        Some(p)
    }

    /// Empties the buffer (the queue pair entered the error state or was reset).
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.parked = 0;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irn_wire::{BthRepr, Opcode, DEFAULT_PKEY, TVER_STANDARD};

    fn pkt(psn: u32) -> IbRepr {
        let mut ib = IbRepr::new(BthRepr {
            opcode: Opcode::RC_SEND_MIDDLE,
            solicited: false,
            mig_req: false,
            tver: TVER_STANDARD,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qpn: 1,
            ack_req: false,
            psn: Psn::new(psn),
        });
        ib.payload_len = 256;
        ib
    }

    #[test]
    fn parks_within_capacity_and_drains_in_psn_order() {
        let mut rb = ReorderBuffer::new(4);
        let e = Psn::new(0xff_fffe);
        let t = Time::ZERO;
        assert_eq!(
            rb.park(e, &pkt(0), &[], false, t),
            Park::Parked { bytes: 268 }
        );
        assert_eq!(rb.park(e, &pkt(0), &[], false, t), Park::Duplicate);
        assert_eq!(rb.park(e, &pkt(2), &[], false, t), Park::Full, "offset 4");
        assert_eq!(rb.park(e, &pkt(0xff_fffe), &[], false, t), Park::Full);
        assert_eq!(rb.len(), 1);
        assert_eq!(rb.bytes(), 268);
        assert!(rb.take(e).is_none(), "the expected PSN itself never parks");
        // The expected packet (and 0xff_ffff) were processed directly.
        let p = rb.take(Psn::new(0)).expect("parked");
        assert_eq!(p.ib.bth.psn, Psn::new(0));
        assert_eq!((rb.len(), rb.bytes()), (0, 0));
    }

    #[test]
    fn moving_past_parked_packets_forgets_them() {
        let mut rb = ReorderBuffer::new(8);
        let t = Time::from_picos(5);
        rb.park(Psn::new(10), &pkt(12), &[], false, t);
        rb.park(Psn::new(10), &pkt(14), &[], true, Time::from_picos(9));
        assert_eq!(rb.oldest(), Some(t));
        // A multi-PSN Read stepped the expected PSN to 13: 12 is gone, 14 stays.
        assert!(rb.take(Psn::new(13)).is_none());
        assert_eq!(rb.len(), 1);
        let p = rb.take(Psn::new(14)).expect("parked");
        assert!(p.ce);
    }
}
