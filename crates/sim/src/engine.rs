//! The event list: events ordered by time, ties broken by insertion order (so a run is a pure
//! function of its configuration and seed), in one binary heap owned by the simulation — no
//! global list (htsim's `EventList` singleton is what DESIGN.md asks us to avoid).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use irn_transport::Time;

#[derive(Debug)]
struct Entry<E> {
    at: u64,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at && self.seq == o.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed: the heap's maximum is the earliest event.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A time-ordered queue of events of type `E`.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: Time,
    popped: u64,
    max_len: usize,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
            now: Time::ZERO,
            popped: 0,
            max_len: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The time of the event last popped.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedules `ev` at `at` (never before now: an earlier time is moved to now).
    pub fn push(&mut self, at: Time, ev: E) {
        let at = at.max(self.now).as_picos();
        self.heap.push(Entry {
            at,
            seq: self.seq,
            ev,
        });
        self.seq += 1;
        self.max_len = self.max_len.max(self.heap.len());
    }

    /// The most events ever waiting at once.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The earliest event, advancing now to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let e = self.heap.pop()?;
        self.now = Time::from_picos(e.at);
        self.popped += 1;
        Some((self.now, e.ev))
    }

    /// The time of the earliest event.
    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|e| Time::from_picos(e.at))
    }

    /// Events popped so far.
    pub fn processed(&self) -> u64 {
        self.popped
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// No events waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_order_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(Time::from_picos(5), 'a');
        q.push(Time::from_picos(3), 'b');
        q.push(Time::from_picos(5), 'c');
        q.push(Time::from_picos(3), 'd');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['b', 'd', 'a', 'c']);
        assert_eq!(q.now(), Time::from_picos(5));
        assert_eq!(q.processed(), 4);
        // Scheduling in the past lands at now.
        q.push(Time::ZERO, 'e');
        assert_eq!(q.pop(), Some((Time::from_picos(5), 'e')));
    }
}
