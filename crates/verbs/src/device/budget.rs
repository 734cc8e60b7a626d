//! The device's in-flight budget ([`DeviceConfig::in_flight_budget`](super::DeviceConfig)):
//! the bytes all its queue pairs have in flight, counted together, and the queue of those held
//! back for want of room. The budget is the device's stand-in for a line rate; the queue keeps
//! it fair: until it is empty no other queue pair starts new packets, so those whose
//! acknowledgements come back first do not take the room again and again.

use std::collections::VecDeque;

/// Bytes in flight against a limit, and the queue pairs waiting for room, first come first
/// served.
#[derive(Debug)]
pub(super) struct Budget {
    limit: u64,
    /// The sum of every queue pair's charge.
    used: u64,
    /// Queue pairs with new packets held back, in the order they were held.
    queue: VecDeque<u32>,
}

impl Budget {
    /// A budget of `limit` bytes, nothing in flight.
    pub(super) fn new(limit: u64) -> Budget {
        Budget {
            limit,
            used: 0,
            queue: VecDeque::new(),
        }
    }

    /// Whether what is in flight fills the budget.
    pub(super) fn full(&self) -> bool {
        self.used >= self.limit
    }

    /// Whether a queue pair may start new packets: the budget has room, and no queue pair
    /// waits for it ahead of this one (`granted`: this one's turn comes from the queue).
    pub(super) fn may_start(&self, granted: bool) -> bool {
        !self.full() && (granted || self.queue.is_empty())
    }

    /// Whether a queue pair waits and the budget has room for it.
    pub(super) fn has_room(&self) -> bool {
        !self.queue.is_empty() && !self.full()
    }

    /// A queue pair's charge moves from `old` to `new` bytes; returns the bytes in flight.
    pub(super) fn recharge(&mut self, old: u64, new: u64) -> u64 {
        self.used = self.used - old + new;
        self.used
    }

    /// A queue pair that had `charged` bytes in flight is gone.
    pub(super) fn release(&mut self, charged: u64) {
        self.used -= charged;
    }

    /// Queue pair `qpn` waits for room, behind those already waiting.
    pub(super) fn wait(&mut self, qpn: u32) {
        self.queue.push_back(qpn);
    }

    /// The queue pair whose turn comes next, while the budget has room.
    pub(super) fn next_waiting(&mut self) -> Option<u32> {
        if self.full() {
            return None;
        }
        self.queue.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_queue_pairs_go_first_and_only_while_there_is_room() {
        let mut b = Budget::new(1000);
        assert!(b.may_start(false) && !b.has_room());
        assert_eq!(b.recharge(0, 600), 600);
        assert_eq!(b.recharge(0, 400), 1000);
        assert!(b.full() && !b.may_start(false) && !b.may_start(true));
        b.wait(7);
        b.wait(9);
        assert_eq!(b.next_waiting(), None, "no room yet");
        // An acknowledgement frees room: the waiting ones come first, in order.
        assert_eq!(b.recharge(600, 100), 500);
        assert!(b.has_room());
        assert!(!b.may_start(false), "a newcomer waits behind the queue");
        assert!(
            b.may_start(true),
            "a queue pair granted its turn from the queue starts"
        );
        assert_eq!(b.next_waiting(), Some(7));
        b.release(500);
        assert_eq!(b.recharge(0, 0), 0, "nothing left in flight");
        assert_eq!(b.next_waiting(), Some(9));
        assert_eq!(b.next_waiting(), None);
        assert!(b.may_start(false));
    }
}
