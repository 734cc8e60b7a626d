//! The receiver's side of a PSN space (split from `window.rs`, which keeps the sender's):
//! the expected PSN and, when out-of-order packets are accepted (IRN), a bitmap of arrivals
//! beyond it holding one deferred action per PSN (the *2-bitmap* of IRN §5.3.3).

use std::collections::VecDeque;

use irn_wire::{LossBitmap, Psn, MAX_BITMAP_WORDS};

/// What a receiver makes of an arriving PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The expected PSN.
    Expected,
    /// Already received (before the expected PSN, or marked in the bitmap).
    Duplicate,
    /// Ahead of the expected PSN, within the out-of-order window (IRN only), `offset` PSNs on.
    Ahead(u32),
    /// Ahead and not acceptable: beyond the window, or the receiver discards out-of-order
    /// packets (RoCE).
    OutOfOrder,
}

#[derive(Debug, Clone)]
struct Slot<A> {
    arrived: bool,
    action: Option<A>,
}

/// The receiver side of a PSN space: the expected PSN and, when out-of-order packets are
/// accepted, a bitmap of arrivals beyond it holding one deferred action per PSN.
#[derive(Debug, Clone)]
pub(crate) struct RecvWindow<A> {
    epsn: Psn,
    accept_ooo: bool,
    capacity: u32,
    slots: VecDeque<Slot<A>>,
    /// Arrived slots beyond the expected PSN (packets held out of order).
    arrived: u32,
    /// A NAK was sent for the current gap (RoCE sends one per sequence error, IBTA §9.7.5.1.3;
    /// cleared when the expected packet arrives).
    pub(crate) nak_sent: bool,
}

impl<A> RecvWindow<A> {
    /// A window expecting `epsn` first. `capacity` bounds how far ahead out-of-order packets are
    /// kept (the BDP cap, IRN §5.3); 0 or `!accept_ooo` makes it discard them.
    pub(crate) fn new(epsn: Psn, accept_ooo: bool, capacity: u32) -> RecvWindow<A> {
        RecvWindow {
            epsn,
            accept_ooo: accept_ooo && capacity > 1,
            capacity: capacity.max(1),
            slots: VecDeque::new(),
            arrived: 0,
            nak_sent: false,
        }
    }

    pub(crate) fn epsn(&self) -> Psn {
        self.epsn
    }

    pub(crate) fn set_epsn(&mut self, epsn: Psn) {
        self.epsn = epsn;
        self.slots.clear();
        self.arrived = 0;
    }

    /// PSNs that arrived beyond a hole and wait for it (0 when nothing is held).
    pub(crate) fn held(&self) -> u32 {
        self.arrived
    }

    /// The extended-IB loss bitmap (T8(d)): bit `i` set when PSN `epsn + i` has not arrived,
    /// up to the highest PSN that has (at most [`MAX_BITMAP_WORDS`] words), and that highest
    /// arrived PSN the bitmap reaches. `None` when nothing is held beyond the expected PSN.
    pub(crate) fn loss_bitmap(&self) -> Option<(LossBitmap, Psn)> {
        let cap = 32 * MAX_BITMAP_WORDS;
        let highest = self
            .slots
            .iter()
            .take(cap)
            .rposition(|s| s.arrived)
            .filter(|&h| h > 0)?;
        let mut b = LossBitmap::with_words(highest.div_ceil(32).max(1))?;
        for (i, s) in self.slots.iter().take(highest).enumerate() {
            if !s.arrived {
                b.set(i);
            }
        }
        Some((b, self.epsn.add(highest as u32)))
    }

    /// The loss bitmap for a NACK that `trigger`'s arrival provokes ([`RecvWindow::loss_bitmap`]),
    /// or `None` when `trigger` lies beyond a bitmap's reach ([`MAX_BITMAP_WORDS`] words past
    /// the expected PSN: an out-of-order window wider than 512), and the NACK must SACK it alone.
    pub(crate) fn nack_bitmap(&self, trigger: Psn) -> Option<(LossBitmap, Psn)> {
        let reach = 32 * MAX_BITMAP_WORDS as i32;
        (self.epsn.distance(trigger) < reach)
            .then(|| self.loss_bitmap())
            .flatten()
    }

    /// Classifies `psn`.
    pub(crate) fn classify(&self, psn: Psn) -> Arrival {
        let d = self.epsn.distance(psn);
        if d < 0 {
            return Arrival::Duplicate;
        }
        if d == 0 {
            return if self.slots.front().is_some_and(|s| s.arrived) {
                Arrival::Duplicate
            } else {
                Arrival::Expected
            };
        }
        let d = d as u32;
        if !self.accept_ooo || d >= self.capacity {
            return Arrival::OutOfOrder;
        }
        if self.slots.get(d as usize).is_some_and(|s| s.arrived) {
            Arrival::Duplicate
        } else {
            Arrival::Ahead(d)
        }
    }

    /// Records the arrival of `psn` (classified `Expected` or `Ahead`), covering `covers` PSNs,
    /// with an action to run once every PSN before it has arrived, and returns the first
    /// arrival now ready in order, if any, as [`pop_ready`](RecvWindow::pop_ready) does (which
    /// gives the rest). The expected PSN with nothing held beyond it is stepped past at once
    /// ([`advance_in_order`](RecvWindow::advance_in_order)), never entering the bitmap.
    pub(crate) fn arrive(
        &mut self,
        psn: Psn,
        covers: u32,
        action: Option<A>,
    ) -> Option<(Psn, Option<A>)> {
        if self.advance_in_order(psn, covers) {
            return Some((psn, action));
        }
        self.accept(psn, covers, action);
        self.pop_ready()
    }

    /// Records the arrival of `psn` (classified `Expected` or `Ahead`), covering `covers` PSNs,
    /// with an action to run once every PSN before it has arrived: into the bitmap.
    fn accept(&mut self, psn: Psn, covers: u32, action: Option<A>) {
        let d = self.epsn.distance(psn).max(0) as usize;
        let covers = covers.max(1) as usize;
        while self.slots.len() < d + covers {
            self.slots.push_back(Slot {
                arrived: false,
                action: None,
            });
        }
        for s in self.slots.range_mut(d..d + covers) {
            if !s.arrived {
                self.arrived += 1;
            }
            s.arrived = true;
        }
        self.slots[d].action = action;
    }

    /// Takes `psn`, covering `covers` PSNs, if it is the expected PSN and nothing is held
    /// beyond it: the window steps past it at once and the caller runs its action — what
    /// [`accept`](RecvWindow::accept) and then [`pop_ready`](RecvWindow::pop_ready) would do,
    /// without writing the packet into the bitmap and reading it back. That is every packet
    /// of one PSN on a path that loses and reorders nothing (an extended-IB Read, which
    /// occupies several PSNs, still goes through the bitmap), and it leaves a queue pair's bitmap
    /// untouched (unallocated, if it never held a packet) until a packet arrives out of
    /// order. False, and nothing changed, otherwise.
    fn advance_in_order(&mut self, psn: Psn, covers: u32) -> bool {
        if covers > 1 || psn != self.epsn || !self.slots.is_empty() {
            return false;
        }
        self.epsn = self.epsn.add(1);
        self.nak_sent = false;
        true
    }

    /// Pops the next in-order arrival, advancing the expected PSN: `(psn, action)`.
    pub(crate) fn pop_ready(&mut self) -> Option<(Psn, Option<A>)> {
        if !self.slots.front().is_some_and(|s| s.arrived) {
            return None;
        }
        let s = self.slots.pop_front()?;
        self.arrived = self.arrived.saturating_sub(1);
        let psn = self.epsn;
        self.epsn = self.epsn.add(1);
        self.nak_sent = false;
        Some((psn, s.action))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: u32) -> Psn {
        Psn::new(v)
    }

    #[test]
    fn receiver_bitmap_runs_actions_in_psn_order() {
        let mut r: RecvWindow<&str> = RecvWindow::new(p(10), true, 4);
        assert_eq!(r.classify(p(12)), Arrival::Ahead(2));
        r.accept(p(12), 1, Some("last"));
        assert_eq!(r.classify(p(12)), Arrival::Duplicate);
        assert_eq!(r.classify(p(14)), Arrival::OutOfOrder, "beyond capacity");
        assert_eq!(r.pop_ready(), None);
        assert_eq!(r.classify(p(10)), Arrival::Expected);
        r.accept(p(10), 1, None);
        r.accept(p(11), 1, None);
        let got: Vec<_> = std::iter::from_fn(|| r.pop_ready()).collect();
        assert_eq!(
            got,
            vec![(p(10), None), (p(11), None), (p(12), Some("last"))]
        );
        assert_eq!(r.epsn(), p(13));
        assert_eq!(r.classify(p(9)), Arrival::Duplicate);
    }

    /// The in-order step does exactly what recording an arrival and popping what is ready
    /// does, whatever the window held: over random arrivals (duplicates, holes, runs beyond
    /// the capacity, multi-PSN arrivals), two windows — one taking the step whenever it may
    /// — pop the same PSNs with the same actions and agree on everything they report.
    #[test]
    fn the_in_order_step_equals_accept_then_pop() {
        use proptest::prelude::*;
        let arrival = (0u32..12, 1u32..4, any::<bool>());
        proptest!(|(ooo in any::<bool>(), cap in 1u32..10,
                    arrivals in proptest::collection::vec(arrival, 1..80))| {
            let mut slow: RecvWindow<u32> = RecvWindow::new(p(0x00ff_fff8), ooo, cap);
            let mut fast = slow.clone();
            for (i, &(ahead, covers, nak)) in arrivals.iter().enumerate() {
                let psn = slow.epsn().add(ahead);
                let covers = if ahead == 0 { covers } else { 1 };
                if nak {
                    slow.nak_sent = true;
                    fast.nak_sent = true;
                }
                let class = slow.classify(psn);
                prop_assert_eq!(class, fast.classify(psn));
                if !matches!(class, Arrival::Expected | Arrival::Ahead(_)) {
                    continue;
                }
                let action = Some(i as u32);
                slow.accept(psn, covers, action);
                let slow_popped: Vec<_> = std::iter::from_fn(|| slow.pop_ready()).collect();
                let first = fast.arrive(psn, covers, action);
                let fast_popped: Vec<_> =
                    first.into_iter().chain(std::iter::from_fn(|| fast.pop_ready())).collect();
                prop_assert_eq!(slow_popped, fast_popped);
                prop_assert_eq!(slow.epsn(), fast.epsn());
                prop_assert_eq!(slow.held(), fast.held());
                prop_assert_eq!(slow.nak_sent, fast.nak_sent);
                prop_assert_eq!(slow.loss_bitmap(), fast.loss_bitmap());
            }
        });
    }

    /// The step is taken exactly when the expected PSN of one PSN arrives with nothing held,
    /// and leaves the bitmap empty; otherwise it changes nothing.
    #[test]
    fn the_in_order_step_is_taken_only_with_nothing_held() {
        let mut r: RecvWindow<()> = RecvWindow::new(p(5), true, 8);
        assert!(!r.advance_in_order(p(6), 1), "not the expected PSN");
        assert!(!r.advance_in_order(p(5), 2), "more than one PSN");
        assert_eq!(r.epsn(), p(5));
        assert!(r.advance_in_order(p(5), 1));
        assert_eq!((r.epsn(), r.slots.len()), (p(6), 0));
        r.accept(p(8), 1, None);
        assert!(!r.advance_in_order(p(6), 1), "a packet is held beyond it");
        assert_eq!((r.epsn(), r.held()), (p(6), 1));
    }

    #[test]
    fn discarding_receiver_takes_only_the_expected_psn() {
        let r: RecvWindow<()> = RecvWindow::new(p(0), false, 100);
        assert_eq!(r.classify(p(1)), Arrival::OutOfOrder);
        assert_eq!(r.classify(p(0)), Arrival::Expected);
    }
}
