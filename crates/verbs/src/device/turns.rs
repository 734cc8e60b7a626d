//! Which queue pairs get a transmit turn, and when: those whose last turn ended with packets
//! left ([`Turns::set_pending`]), those that received packets in the burst being processed
//! ([`Turns::received`], served together once the burst is done so that the ACKs it provokes
//! coalesce), and those whose timer is due ([`Turns::expired`]).
//!
//! The timers are a heap of (deadline, queue pair) entries, earliest first: the engine fires
//! the due ones and sleeps until the next without looking at the other queue pairs (10 000
//! queue pairs with a little traffic each cost a scan of all of them per wake-up before). A
//! queue pair's deadline moves often, and an entry is not removed when it does: the owner of
//! the queue pairs says which entries are still *current* (the deadline the queue pair is
//! armed with now), and the others are skipped as they come up.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use irn_transport::Time;

/// The device's transmit turns and timers.
#[derive(Debug, Default)]
pub(super) struct Turns {
    /// Queue pairs whose last turn ended with packets left to send.
    pending: BTreeSet<u32>,
    /// Queue pairs that received packets in the burst being processed, in arrival order
    /// (each once: the caller marks who is listed).
    due: Vec<u32>,
    /// Deadlines, earliest first; entries no longer current are skipped.
    timers: BinaryHeap<Reverse<(Time, u32)>>,
}

impl Turns {
    /// Queue pair `qpn` has packets left after its turn (`more`), or not.
    pub(super) fn set_pending(&mut self, qpn: u32, more: bool) {
        if more {
            self.pending.insert(qpn);
        } else {
            self.pending.remove(&qpn);
        }
    }

    /// Some queue pair has packets left to send.
    pub(super) fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The queue pairs with packets left, in number order.
    pub(super) fn pending(&self) -> Vec<u32> {
        self.pending.iter().copied().collect()
    }

    /// Queue pair `qpn` received packets in this burst; the caller lists each once.
    pub(super) fn received(&mut self, qpn: u32) {
        self.due.push(qpn);
    }

    /// The queue pairs that received packets since the last call, to give their turns;
    /// hand the vector back ([`Turns::give_back`]) to keep its allocation.
    pub(super) fn take_received(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.due)
    }

    /// Returns the vector [`Turns::take_received`] handed out, emptied, unless more queue
    /// pairs were listed meanwhile.
    pub(super) fn give_back(&mut self, mut due: Vec<u32>) {
        if self.due.is_empty() {
            due.clear();
            self.due = due;
        }
    }

    /// Queue pair `qpn` is armed with deadline `at` from now on.
    pub(super) fn arm(&mut self, qpn: u32, at: Time) {
        self.timers.push(Reverse((at, qpn)));
    }

    /// The earliest current deadline; entries no longer `current` leave the top on the way.
    pub(super) fn next_deadline(&mut self, current: impl Fn(Time, u32) -> bool) -> Option<Time> {
        while let Some(&Reverse((at, qpn))) = self.timers.peek() {
            if current(at, qpn) {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    /// The queue pairs whose current deadline is at or before `now`, each once and in
    /// number order, their entries removed (the caller arms them again after they run).
    pub(super) fn expired(&mut self, now: Time, current: impl Fn(Time, u32) -> bool) -> Vec<u32> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, qpn))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            if current(at, qpn) {
                due.push(qpn);
            }
        }
        due.sort_unstable();
        due.dedup();
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn t(us: u64) -> Time {
        Time::from_picos(us * 1_000_000)
    }

    #[test]
    fn timers_fire_current_deadlines_in_time_and_skip_moved_ones() {
        let mut turns = Turns::default();
        // Queue pair 1 armed at 10 µs then moved to 50; queue pair 2 at 30; 3 at 30 too.
        let armed: BTreeMap<u32, Time> = [(1, t(50)), (2, t(30)), (3, t(30))].into();
        for (qpn, at) in [(1, 10), (2, 30), (1, 50), (3, 30)] {
            turns.arm(qpn, t(at));
        }
        let current = |at: Time, qpn: u32| armed.get(&qpn) == Some(&at);
        // The stale entry at 10 µs does not wake anyone.
        assert_eq!(turns.next_deadline(current), Some(t(30)));
        assert!(turns.expired(t(29), current).is_empty());
        assert_eq!(turns.expired(t(30), current), [2, 3]);
        assert_eq!(turns.next_deadline(current), Some(t(50)));
        assert_eq!(turns.expired(t(1_000), current), [1]);
        assert_eq!(turns.next_deadline(current), None);
        // Two current entries of one queue pair at once (armed twice alike) fire it once.
        turns.arm(2, t(30));
        turns.arm(2, t(30));
        assert_eq!(turns.expired(t(40), current), [2]);
    }

    #[test]
    fn received_turns_are_taken_once_and_pending_ones_kept_by_number() {
        let mut turns = Turns::default();
        turns.received(7);
        turns.received(3);
        let due = turns.take_received();
        assert_eq!(due, [7, 3]);
        assert!(turns.take_received().is_empty());
        turns.give_back(due);
        turns.received(4);
        assert_eq!(turns.take_received(), [4]);
        for (qpn, more) in [(9, true), (2, true), (9, false), (5, true)] {
            turns.set_pending(qpn, more);
        }
        assert!(turns.any_pending());
        assert_eq!(turns.pending(), [2, 5]);
    }
}
