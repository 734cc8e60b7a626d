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
//! # Structure: a timing wheel over a heap
//!
//! A datacenter simulation schedules almost every event a few microseconds ahead — a frame's
//! serialization (≈ 200 ns for 1 KB at 40 Gb/s) and a link's propagation delay (1–2 µs) — and
//! pops them about one per simulated nanosecond. So most events go into a *timing wheel*
//! (Varghese & Lauck, "Hashed and hierarchical timing wheels", SOSP 1987): [`SLOTS`] slots of
//! [`SLOT_PS`] picoseconds each, covering the next ≈ 8 µs. A slot is a singly linked list of
//! chunks of `CHUNK` events in a slab, and a bitmap marks the non-empty slots, so a push is
//! O(1); when the wheel reaches a slot, its events are sorted once and popped in order (a
//! 1024-host network has dozens per slot). Chunks rather than single events, because walking a
//! crowded slot's list is a chain of dependent cache misses in a large network; a slab reused
//! from a LIFO free list rather than a vector per slot, because a small network (one or two
//! events per slot) then keeps its whole event list in cache (docs/BENCHMARKS.md measures both).
//! Events further ahead (retransmission timers, the next flow's start) wait in a binary heap and
//! move into the wheel when it reaches them. Everything orders by (time, key), so ties resolve
//! exactly as they would in one sorted list.
//!
//! On `experiments/e0-websearch.toml` this is ≈ 2× faster per event than the binary heap and the
//! radix heap it replaced (docs/BENCHMARKS.md).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use irn_transport::Time;

/// log2 of the wheel's slot width in picoseconds.
const SLOT_SHIFT: u32 = 10;
/// A slot's width: 1.024 ns.
pub const SLOT_PS: u64 = 1 << SLOT_SHIFT;
/// Slots in the wheel (a power of two): the wheel spans `SLOTS × SLOT_PS` ≈ 8.4 µs.
pub const SLOTS: usize = 8192;
const WORDS: usize = SLOTS / 64;
const NIL: u32 = u32::MAX;

/// Events per chunk of a slot's list.
const CHUNK: usize = 4;

/// A piece of a slot's list: up to [`CHUNK`] events side by side, so that walking a crowded
/// slot costs one dependent load per chunk rather than per event.
#[derive(Debug)]
struct Chunk<E> {
    /// The slot's chunk filled before this one (`NIL`: none); in the free list, the next free.
    next: u32,
    len: u32,
    items: [Option<(u64, u64, E)>; CHUNK],
}

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
    /// Each slot's newest chunk (an index into `chunks`), `NIL` when empty.
    heads: Box<[u32]>,
    /// Bit `i % 64` of word `i / 64` set when slot `i` is non-empty.
    bits: [u64; WORDS],
    chunks: Vec<Chunk<E>>,
    free: u32,
    /// Events in the wheel (not counting `cur`).
    in_wheel: usize,
    /// The slot being consumed, sorted latest first so the earliest pops off the end; new
    /// events for that slot are inserted in order. A slot's list becomes this when the wheel
    /// reaches it, so a crowded slot (a large network has dozens of events per nanosecond) is
    /// sorted once instead of scanned at every pop.
    cur: Vec<(u64, u64, E)>,
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
            heads: vec![NIL; SLOTS].into_boxed_slice(),
            bits: [0; WORDS],
            chunks: Vec::new(),
            free: NIL,
            in_wheel: 0,
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

    /// The first slot number (absolute, not modulo) beyond the wheel's reach.
    #[inline]
    fn reach(&self) -> u64 {
        (self.now >> SLOT_SHIFT) + SLOTS as u64
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
    pub fn push_keyed(&mut self, at: Time, key: u64, ev: E) {
        let at = at.as_picos().max(self.now);
        let slot = at >> SLOT_SHIFT;
        if !self.cur.is_empty() && slot <= self.cur_slot {
            if slot < self.cur_slot {
                // Only after `pop_before` declined a loaded slot: that slot goes back to the
                // wheel, behind this earlier one.
                for (t, k, e) in std::mem::take(&mut self.cur) {
                    self.link(t, k, e);
                }
                self.link(at, key, ev);
            } else {
                // Latest first: the new event goes after every later one and before the
                // earlier ones.
                let i = self.cur.partition_point(|&(t, k, _)| (t, k) > (at, key));
                self.cur.insert(i, (at, key, ev));
            }
        } else if slot < self.reach() {
            self.link(at, key, ev);
        } else {
            self.far.push(Reverse(Far { at, seq: key, ev }));
        }
    }

    #[inline]
    fn link(&mut self, at: u64, seq: u64, ev: E) {
        let slot = (at >> SLOT_SHIFT) as usize & (SLOTS - 1);
        let head = self.heads[slot];
        if head != NIL {
            let c = &mut self.chunks[head as usize];
            if (c.len as usize) < CHUNK {
                c.items[c.len as usize] = Some((at, seq, ev));
                c.len += 1;
                self.in_wheel += 1;
                return;
            }
        }
        // A new chunk, the most recently freed one if any (it is likely still cached).
        let i = if self.free == NIL {
            self.chunks.push(Chunk {
                next: NIL,
                len: 0,
                items: [const { None }; CHUNK],
            });
            (self.chunks.len() - 1) as u32
        } else {
            let i = self.free;
            self.free = self.chunks[i as usize].next;
            i
        };
        let c = &mut self.chunks[i as usize];
        c.next = head;
        c.len = 1;
        c.items[0] = Some((at, seq, ev));
        self.heads[slot] = i;
        self.bits[slot / 64] |= 1 << (slot % 64);
        self.in_wheel += 1;
    }

    /// The earliest event, advancing now to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        if self.cur.is_empty() {
            self.load_next_slot()?;
        }
        let (at, _, ev) = self.cur.pop()?;
        self.now = at;
        self.popped += 1;
        Some((Time::from_picos(at), ev))
    }

    /// The earliest event if it is due before `limit`, advancing now to its time; otherwise
    /// `None`, and now stays where it was, so that events can still be pushed for any time
    /// from now on (a partition's next window brings events from its neighbours).
    pub fn pop_before(&mut self, limit: Time) -> Option<(Time, E)> {
        let limit = limit.as_picos();
        if self.cur.is_empty() {
            self.load_next_slot_before(limit)?;
        }
        let &(at, _, _) = self.cur.last()?;
        if at >= limit {
            return None;
        }
        self.pop()
    }

    /// Moves the earliest non-empty slot's events into `cur`, sorted; `None` when nothing
    /// waits. Called only with `cur` empty.
    fn load_next_slot(&mut self) -> Option<()> {
        self.load_next_slot_before(u64::MAX)
    }

    /// [`EventQueue::load_next_slot`], unless the earliest non-empty slot begins at or after
    /// `limit`: then nothing moves (an event pushed later for an earlier slot must not be
    /// overtaken by a loaded one). A slot that begins before `limit` may hold events after
    /// it; events pushed later for that slot join `cur` in order.
    fn load_next_slot_before(&mut self, limit: u64) -> Option<()> {
        if self.in_wheel == 0 {
            // Jump to the earliest far event; the wheel then reaches it.
            let at = self.far.peek()?.0.at;
            if at >= limit {
                return None;
            }
            self.now = at;
        }
        self.pull_far();
        let slot = self.next_slot()?;
        let here = self.now >> SLOT_SHIFT;
        let ahead = (slot as u64).wrapping_sub(here) & (SLOTS as u64 - 1);
        if (here + ahead) << SLOT_SHIFT >= limit {
            return None;
        }
        self.cur_slot = here + ahead;
        let mut i = std::mem::replace(&mut self.heads[slot], NIL);
        self.bits[slot / 64] &= !(1 << (slot % 64));
        while i != NIL {
            let c = &mut self.chunks[i as usize];
            let next = c.next;
            for item in &mut c.items[..c.len as usize] {
                if let Some(e) = item.take() {
                    self.cur.push(e);
                }
            }
            self.in_wheel -= c.len as usize;
            c.len = 0;
            c.next = self.free;
            self.free = i;
            i = next;
        }
        self.cur
            .sort_unstable_by_key(|&(at, seq, _)| std::cmp::Reverse((at, seq)));
        Some(())
    }

    /// Moves the far events the wheel now reaches into it.
    #[inline]
    fn pull_far(&mut self) {
        let reach = self.reach();
        while self
            .far
            .peek()
            .is_some_and(|f| (f.0.at >> SLOT_SHIFT) < reach)
        {
            if let Some(Reverse(f)) = self.far.pop() {
                self.link(f.at, f.seq, f.ev);
            }
        }
    }

    /// The first non-empty slot at or after now's, going round the wheel once.
    #[inline]
    fn next_slot(&self) -> Option<usize> {
        let start = (self.now >> SLOT_SHIFT) as usize & (SLOTS - 1);
        let (w0, b0) = (start / 64, start % 64);
        let first = self.bits[w0] & (!0u64 << b0);
        if first != 0 {
            return Some(w0 * 64 + first.trailing_zeros() as usize);
        }
        for k in 1..=WORDS {
            let w = (w0 + k) % WORDS;
            let mut word = self.bits[w];
            if k == WORDS {
                // Back at the start word: only the bits before `start`.
                word &= (1u64 << b0).wrapping_sub(1);
            }
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
        }
        None
    }

    /// The time of the earliest event.
    pub fn peek_time(&self) -> Option<Time> {
        if let Some(&(at, _, _)) = self.cur.last() {
            return Some(Time::from_picos(at));
        }
        // A far event may have come within reach since it was pushed (it moves into the wheel
        // when the next slot loads), so both are looked at.
        let far = self.far.peek().map(|f| f.0.at);
        let mut best = far.unwrap_or(u64::MAX);
        if let Some(slot) = self.next_slot() {
            let mut i = self.heads[slot];
            while i != NIL {
                let c = &self.chunks[i as usize];
                for (at, _, _) in c.items[..c.len as usize].iter().flatten() {
                    best = best.min(*at);
                }
                i = c.next;
            }
        }
        (best != u64::MAX || far.is_some()).then(|| Time::from_picos(best))
    }

    /// Events popped so far.
    pub fn processed(&self) -> u64 {
        self.popped
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.cur.len() + self.in_wheel + self.far.len()
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
