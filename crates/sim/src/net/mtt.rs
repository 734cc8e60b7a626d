//! The NIC's memory-translation table cache (SPEC N6; seed 001 §4.4, the slow receiver): the
//! NIC keeps only `nic.mtt_entries` (2 K) virtual→physical page translations on chip; a frame
//! whose payload lands in a page without one stalls the receive pipeline for `nic.mtt_miss_ns`
//! while the entry is fetched from host memory over PCIe, and evicts the least recently used
//! entry. With 4 KB pages 2 K entries cover 8 MB; with 2 MB pages, 4 GB.
//!
//! Each flow's buffer is its own registered region (a distinct virtual range per flow, 4 GiB
//! apart), and a data frame's address is its offset in the message (PSN distance × MTU).

use std::collections::HashMap;

const NONE: u32 = u32::MAX;

/// An exact LRU cache of page numbers.
#[derive(Debug, Clone, Default)]
pub(super) struct Mtt {
    cap: usize,
    map: HashMap<u64, u32>,
    /// Slots: (page, previous, next) in recency order, most recent at `head`.
    slots: Vec<(u64, u32, u32)>,
    head: u32,
    tail: u32,
    /// Lookups and misses.
    pub(super) lookups: u64,
    pub(super) misses: u64,
}

impl Mtt {
    pub(super) fn new(cap: usize) -> Mtt {
        Mtt {
            cap: cap.max(1),
            head: NONE,
            tail: NONE,
            ..Mtt::default()
        }
    }

    fn unlink(&mut self, s: u32) {
        let (_, prev, next) = self.slots[s as usize];
        match prev {
            NONE => self.head = next,
            p => self.slots[p as usize].2 = next,
        }
        match next {
            NONE => self.tail = prev,
            n => self.slots[n as usize].1 = prev,
        }
    }

    fn push_front(&mut self, s: u32) {
        self.slots[s as usize].1 = NONE;
        self.slots[s as usize].2 = self.head;
        if self.head != NONE {
            self.slots[self.head as usize].1 = s;
        }
        self.head = s;
        if self.tail == NONE {
            self.tail = s;
        }
    }

    /// Looks `page` up; returns whether it missed (and is now cached).
    pub(super) fn access(&mut self, page: u64) -> bool {
        self.lookups += 1;
        if let Some(&s) = self.map.get(&page) {
            if self.head != s {
                self.unlink(s);
                self.push_front(s);
            }
            return false;
        }
        self.misses += 1;
        let s = if self.slots.len() < self.cap {
            self.slots.push((page, NONE, NONE));
            (self.slots.len() - 1) as u32
        } else {
            let victim = self.tail;
            self.unlink(victim);
            let old = self.slots[victim as usize].0;
            self.map.remove(&old);
            self.slots[victim as usize].0 = page;
            victim
        };
        self.map.insert(page, s);
        self.push_front(s);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_page_is_evicted() {
        let mut m = Mtt::new(2);
        assert!(m.access(1));
        assert!(m.access(2));
        assert!(!m.access(1)); // 1 is now the most recent
        assert!(m.access(3)); // evicts 2
        assert!(!m.access(1));
        assert!(m.access(2)); // 2 was evicted; evicts 3
        assert!(m.access(3));
        assert_eq!((m.lookups, m.misses), (7, 5));
    }

    #[test]
    fn a_working_set_that_fits_misses_once_per_page() {
        let mut m = Mtt::new(64);
        for round in 0..10 {
            for page in 0..64 {
                assert_eq!(m.access(page), round == 0);
            }
        }
        // One page more than fits, scanned in order: LRU misses every time.
        let mut m = Mtt::new(64);
        for _ in 0..3 {
            for page in 0..65 {
                m.access(page);
            }
        }
        assert_eq!(m.misses, m.lookups);
    }
}
