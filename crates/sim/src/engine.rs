//! The event list: events ordered by time, ties broken by a key the caller gives each event
//! (so a run is a pure function of its configuration and seed), owned by the simulation — no
//! global list (htsim's `EventList` singleton is what DESIGN.md asks us to avoid).
//!
//! The simulator keys an event by the node that scheduled it and that node's own count of
//! events scheduled (`net`), not by a global insertion number: a node's count is the same
//! whether the network runs as one event list or as several partitions on their own threads,
//! so the order, and the results, are too. [`EventQueue::push`] numbers events itself, for
//! users with one list.
//!
//! # Structure: a two-level timing wheel over a heap
//!
//! A datacenter simulation schedules almost every event a few microseconds ahead — a frame's
//! serialization (≈ 200 ns for 1 KB at 40 Gb/s) and a link's propagation delay (1–2 µs) — and
//! pops them about one per simulated nanosecond. So most events go into a *hierarchical timing
//! wheel* (Varghese & Lauck, "Hashed and hierarchical timing wheels", SOSP 1987):
//! - the **near level** holds the current *span* of [`FINE`] slots of [`SLOT_PS`] picoseconds
//!   (≈ 65 ns): one vector per slot and a one-word bitmap of the non-empty ones;
//! - the **coarse level** holds the next [`BUCKETS`] − 1 spans (reaching ≈ 8.4 µs ahead), one
//!   vector per span, to which an event is only appended;
//! - events further ahead (retransmission timers, the next flow's start) wait in a binary heap
//!   and move into the wheel when it reaches them.
//!
//! When the near level runs dry, the next non-empty span's bucket is read once, in order, and
//! spread over the near slots; a near slot is sorted once when the wheel reaches it and popped
//! in order. Pushes thus write to the tail of one of a few hundred vectors and pops read
//! vectors front to back, so the memory the event list touches stays in the first-level cache
//! even in a large network, where a single-level wheel of thousands of slots walks a cold list
//! per event. Everything orders by (time, key), so ties resolve exactly as they would in one
//! sorted list.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use irn_transport::Time;

/// log2 of a near slot's width in picoseconds.
const SLOT_SHIFT: u32 = 10;
/// A near slot's width: 1.024 ns.
pub const SLOT_PS: u64 = 1 << SLOT_SHIFT;
/// log2 of the near slots in a span.
const SPAN_SHIFT: u32 = 6;
/// Near slots in a span (one bitmap word): a span is ≈ 65.5 ns.
pub const FINE: usize = 1 << SPAN_SHIFT;
/// Spans the wheel covers, the current one included (a power of two): ≈ 8.4 µs.
pub const BUCKETS: usize = 128;
/// Slots the wheel covers (its reach beyond the current span's start).
pub const SLOTS: usize = FINE * BUCKETS;
const BUCKET_WORDS: usize = BUCKETS / 64;

/// An event with its time (ps) and key.
type Entry<E> = (u64, u64, E);

/// An event beyond the wheel's reach, in the overflow heap.
#[derive(Debug)]
struct Far<E> {
    at: u64,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Far<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Far<E> {}
impl<E> PartialOrd for Far<E> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Far<E> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A time-ordered queue of events of type `E`.
#[derive(Debug)]
pub struct EventQueue<E> {
    /// The near slots of span `span`, by slot number modulo [`FINE`].
    fine: Box<[Vec<Entry<E>>]>,
    /// Bit `i` set when near slot `i` is non-empty.
    fine_bits: u64,
    /// Events in the near slots (not counting `cur`).
    in_fine: usize,
    /// The coarse buckets: bucket `s % BUCKETS` holds the events of span `s`, for the spans
    /// after `span` within reach.
    buckets: Box<[Vec<Entry<E>>]>,
    /// Bit `i % 64` of word `i / 64` set when bucket `i` is non-empty.
    bucket_bits: [u64; BUCKET_WORDS],
    /// Events in the buckets.
    in_buckets: usize,
    /// The absolute number of the span the near slots hold. Every waiting event is in it or
    /// later; now is in it or earlier (the span moves on only when its first event pops).
    span: u64,
    /// The slot being consumed, sorted latest first so the earliest pops off the end; new
    /// events for that slot are inserted in order.
    cur: Vec<Entry<E>>,
    /// The absolute slot number `cur` holds (meaningful while `cur` is non-empty).
    cur_slot: u64,
    far: BinaryHeap<Reverse<Far<E>>>,
    seq: u64,
    now: u64,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            fine: (0..FINE).map(|_| Vec::new()).collect(),
            fine_bits: 0,
            in_fine: 0,
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            bucket_bits: [0; BUCKET_WORDS],
            in_buckets: 0,
            span: 0,
            cur: Vec::new(),
            cur_slot: 0,
            far: BinaryHeap::new(),
            seq: 0,
            now: 0,
            popped: 0,
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
        Time::from_picos(self.now)
    }

    /// Schedules `ev` at `at` (never before now: an earlier time is moved to now), after
    /// every event already scheduled for the same time: keyed by insertion order. Do not mix
    /// with [`EventQueue::push_keyed`] in one queue.
    pub fn push(&mut self, at: Time, ev: E) {
        let seq = self.seq;
        self.seq += 1;
        self.push_keyed(at, seq, ev);
    }

    /// Schedules `ev` at `at` (never before now: an earlier time is moved to now); events of
    /// one time pop in the order of their keys. Keys must be unique.
    #[inline]
    pub fn push_keyed(&mut self, at: Time, key: u64, ev: E) {
        let at = at.as_picos().max(self.now);
        let slot = at >> SLOT_SHIFT;
        if !self.cur.is_empty() && slot <= self.cur_slot {
            if slot == self.cur_slot {
                // Latest first: the new event goes after every later one and before the
                // earlier ones.
                let i = self.cur.partition_point(|&(t, k, _)| (t, k) > (at, key));
                self.cur.insert(i, (at, key, ev));
                return;
            }
            // Only after `pop_before` declined a loaded slot: that slot goes back to the
            // near level, behind this earlier one.
            self.spill_cur();
        }
        self.place(at, key, ev);
    }

    /// Puts an event in the near slots, a bucket or the far heap, by its time.
    #[inline]
    fn place(&mut self, at: u64, key: u64, ev: E) {
        let slot = at >> SLOT_SHIFT;
        let span = slot >> SPAN_SHIFT;
        // A pushed event is never before now, and now never before the current span: the
        // span moves only when its first event is popped at once (`advance`).
        debug_assert!(span >= self.span, "an event before the current span");
        if span <= self.span {
            let i = slot as usize & (FINE - 1);
            self.fine[i].push((at, key, ev));
            self.fine_bits |= 1 << i;
            self.in_fine += 1;
        } else if span < self.span + BUCKETS as u64 {
            let b = span as usize & (BUCKETS - 1);
            self.buckets[b].push((at, key, ev));
            self.bucket_bits[b / 64] |= 1 << (b % 64);
            self.in_buckets += 1;
        } else {
            self.far.push(Reverse(Far { at, seq: key, ev }));
        }
    }

    /// Puts the loaded slot back among the near slots.
    fn spill_cur(&mut self) {
        let i = self.cur_slot as usize & (FINE - 1);
        self.in_fine += self.cur.len();
        self.fine_bits |= 1 << i;
        self.fine[i].append(&mut self.cur);
    }

    /// The earliest event, advancing now to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        self.pop_before(Time::from_picos(u64::MAX))
    }

    /// The earliest event if it is due before `limit`, advancing now to its time; otherwise
    /// `None`, and now stays where it was, so that events can still be pushed for any time
    /// from now on (a partition's next window brings events from its neighbours).
    #[inline]
    pub fn pop_before(&mut self, limit: Time) -> Option<(Time, E)> {
        let limit = limit.as_picos();
        if self.cur.is_empty() {
            self.load_next_slot_before(limit)?;
        }
        let &(at, _, _) = self.cur.last()?;
        if at >= limit {
            return None;
        }
        let (at, _, ev) = self.cur.pop()?;
        self.now = at;
        self.popped += 1;
        Some((Time::from_picos(at), ev))
    }

    /// Moves the earliest non-empty slot's events into `cur`, sorted, unless that slot begins
    /// at or after `limit`; `None` when nothing moved. Called only with `cur` empty.
    fn load_next_slot_before(&mut self, limit: u64) -> Option<()> {
        if self.fine_bits == 0 {
            self.advance(limit)?;
        }
        let i = self.fine_bits.trailing_zeros() as usize;
        let slot = (self.span << SPAN_SHIFT) | i as u64;
        if slot << SLOT_SHIFT >= limit {
            return None;
        }
        self.cur_slot = slot;
        self.fine_bits &= !(1 << i);
        std::mem::swap(&mut self.cur, &mut self.fine[i]);
        self.in_fine -= self.cur.len();
        if self.cur.len() > 1 {
            self.cur
                .sort_unstable_by_key(|&(at, seq, _)| Reverse((at, seq)));
        }
        Some(())
    }

    /// With the near slots empty: makes the next span with events the current one, unless
    /// its earliest event is at or after `limit`; `None` when it did not.
    #[cold]
    fn advance(&mut self, limit: u64) -> Option<()> {
        let next = if self.in_buckets > 0 {
            let b = self.next_bucket();
            let span = self.span + ((b as u64).wrapping_sub(self.span) & (BUCKETS as u64 - 1));
            let first = self.buckets[b].iter().map(|&(at, _, _)| at).min()?;
            (first < limit).then_some(())?;
            Some(span)
        } else {
            None
        };
        let span = match next {
            Some(span) => span,
            None => {
                // Nothing in the wheel: jump to the earliest far event.
                let at = self.far.peek()?.0.at;
                if at >= limit {
                    return None;
                }
                at >> (SLOT_SHIFT + SPAN_SHIFT)
            }
        };
        self.span = span;
        let b = span as usize & (BUCKETS - 1);
        if self.bucket_bits[b / 64] & (1 << (b % 64)) != 0 {
            self.bucket_bits[b / 64] &= !(1 << (b % 64));
            let mut events = std::mem::take(&mut self.buckets[b]);
            self.in_buckets -= events.len();
            for e in events.drain(..) {
                let i = (e.0 >> SLOT_SHIFT) as usize & (FINE - 1);
                self.fine[i].push(e);
                self.fine_bits |= 1 << i;
                self.in_fine += 1;
            }
            self.buckets[b] = events;
        }
        // The far events the wheel now reaches.
        let reach = span + BUCKETS as u64;
        while self
            .far
            .peek()
            .is_some_and(|f| f.0.at >> (SLOT_SHIFT + SPAN_SHIFT) < reach)
        {
            if let Some(Reverse(f)) = self.far.pop() {
                self.place(f.at, f.seq, f.ev);
            }
        }
        Some(())
    }

    /// The first non-empty bucket after the current span's, going round once.
    #[inline]
    fn next_bucket(&self) -> usize {
        let start = (self.span as usize + 1) & (BUCKETS - 1);
        let (w0, b0) = (start / 64, start % 64);
        let first = self.bucket_bits[w0] & (!0u64 << b0);
        if first != 0 {
            return w0 * 64 + first.trailing_zeros() as usize;
        }
        for k in 1..=BUCKET_WORDS {
            let w = (w0 + k) % BUCKET_WORDS;
            let mut word = self.bucket_bits[w];
            if k == BUCKET_WORDS {
                word &= (1u64 << b0).wrapping_sub(1);
            }
            if word != 0 {
                return w * 64 + word.trailing_zeros() as usize;
            }
        }
        unreachable!("next_bucket with no bucket in use")
    }

    /// The time of the earliest event.
    pub fn peek_time(&self) -> Option<Time> {
        let min = |v: &[Entry<E>]| v.iter().map(|&(at, _, _)| at).min();
        let at = if let Some(&(at, _, _)) = self.cur.last() {
            Some(at)
        } else if self.fine_bits != 0 {
            min(&self.fine[self.fine_bits.trailing_zeros() as usize])
        } else if self.in_buckets > 0 {
            min(&self.buckets[self.next_bucket()])
        } else {
            self.far.peek().map(|f| f.0.at)
        };
        at.map(Time::from_picos)
    }

    /// Events popped so far.
    pub fn processed(&self) -> u64 {
        self.popped
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.cur.len() + self.in_fine + self.in_buckets + self.far.len()
    }

    /// No events waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn time_order_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(Time::from_picos(5), 'a');
        q.push(Time::from_picos(3), 'b');
        q.push(Time::from_picos(5), 'c');
        q.push(Time::from_picos(3), 'd');
        assert_eq!(q.peek_time(), Some(Time::from_picos(3)));
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['b', 'd', 'a', 'c']);
        assert_eq!(q.now(), Time::from_picos(5));
        assert_eq!(q.processed(), 4);
        assert!(q.is_empty());
        // Scheduling in the past lands at now.
        q.push(Time::ZERO, 'e');
        assert_eq!(q.pop(), Some((Time::from_picos(5), 'e')));
        assert_eq!(q.pop(), None);
    }

    proptest! {
        /// Against a reference ordered by (time, key), under interleaved pushes and pops with
        /// the monotone times a simulation produces (offsets from now, some zero, some huge) —
        /// the ties and the redistribution are where a radix heap can go wrong. Keys are the
        /// insertion number, or (`keyed`) arbitrary unique keys.
        #[test]
        fn matches_reference(keyed in any::<bool>(), ops in proptest::collection::vec(
            prop_oneof![
                3 => (0u8..4, any::<u64>(), any::<u16>()).prop_map(|(k, x, key)| Some((match k {
                    0 => 0,
                    1 => x % 16,
                    2 => x % (4 * SLOTS as u64 * SLOT_PS),
                    _ => x >> 4,
                }, key))),
                2 => Just(None),
            ], 0..400),
            limits in proptest::collection::vec(prop_oneof![
                Just(None),
                (0u8..3, any::<u64>()).prop_map(|(k, x)| Some(match k {
                    0 => x % 16,
                    1 => x % (2 * SLOTS as u64 * SLOT_PS),
                    _ => x >> 8,
                })),
            ], 400))
        {
            let mut q = EventQueue::new();
            let mut reference = BTreeMap::new();
            let mut seq = 0u64;
            for op in ops {
                match op {
                    Some((offset, key)) => {
                        let at = q.now().as_picos().saturating_add(offset);
                        let k = if keyed {
                            // Unique, and in no relation to the insertion order.
                            (u64::from(key) << 32) | seq
                        } else {
                            seq
                        };
                        if keyed {
                            q.push_keyed(Time::from_picos(at), k, seq);
                        } else {
                            q.push(Time::from_picos(at), seq);
                        }
                        reference.insert((at, k), seq);
                        seq += 1;
                    }
                    None => match limits[seq as usize % limits.len()] {
                        None => {
                            let want = reference.pop_first().map(|((at, _), s)| (Time::from_picos(at), s));
                            prop_assert_eq!(q.peek_time(), want.map(|w| w.0));
                            prop_assert_eq!(q.pop(), want);
                        }
                        // A partition's window: only what is due before the limit.
                        Some(ahead) => {
                            let limit = q.now().as_picos().saturating_add(ahead);
                            let before = q.now();
                            let due = reference.first_key_value().is_some_and(|(&(at, _), _)| at < limit);
                            let want = if due {
                                reference.pop_first().map(|((at, _), s)| (Time::from_picos(at), s))
                            } else {
                                None
                            };
                            prop_assert_eq!(q.pop_before(Time::from_picos(limit)), want);
                            if !due {
                                prop_assert_eq!(q.now(), before);
                            }
                        }
                    },
                }
                prop_assert_eq!(q.len(), reference.len());
            }
            while let Some(((at, _), s)) = reference.pop_first() {
                prop_assert_eq!(q.pop(), Some((Time::from_picos(at), s)));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }
}
