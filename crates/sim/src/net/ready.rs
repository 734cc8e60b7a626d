//! A NIC's list of queue pairs that may have something to send, in round-robin order, and
//! where on it the next control packet waits.
//!
//! While the data priority is paused only a control packet can go, and the NIC looks for the
//! first queue pair on the list that has one, passing the others to the back in order — the
//! list keeps its cyclic order, only its front moves. In a fabric that is paused for long (a
//! storm) a NIC holds thousands of queue pairs with data and a few with ACKs to send; looking
//! from the front each time walked the whole list for every ACK. The list therefore remembers
//! one run of entries it has seen without a control packet ([`ReadyList::first_flagged`]
//! skips it) until the flag of a slot with an entry on the list turns on
//! ([`ReadyList::flag_raised`]; it counts each slot's entries, since a destroyed queue pair's
//! entry can outlive it into its slot's next life). What it answers is what a walk from the
//! front would, always; only the walking is saved.

use std::collections::VecDeque;

/// Entries `start .. start + len` of the list (from its front) have no flag set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    start: usize,
    len: usize,
}

/// Slots in round-robin order, with a run of them known to have no control packet.
#[derive(Debug, Default)]
pub(super) struct ReadyList {
    q: VecDeque<u32>,
    clean: Option<Run>,
    /// Per slot, its entries on the list: a slot can have two (a destroyed queue pair's entry
    /// stays until a look drops it, and its slot may be reused and listed again meanwhile).
    entries: Vec<u16>,
}

impl ReadyList {
    pub(super) fn len(&self) -> usize {
        self.q.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Appends `slot` (outside the clean run: it has not been looked at).
    pub(super) fn push_back(&mut self, slot: u32) {
        let i = slot as usize;
        if self.entries.len() <= i {
            self.entries.resize(i + 1, 0);
        }
        self.entries[i] += 1;
        self.q.push_back(slot);
    }

    pub(super) fn pop_front(&mut self) -> Option<u32> {
        let slot = self.q.pop_front()?;
        self.entries[slot as usize] -= 1;
        if let Some(r) = self.clean.as_mut() {
            if r.start > 0 {
                r.start -= 1;
            } else {
                r.len -= 1;
                if r.len == 0 {
                    self.clean = None;
                }
            }
        }
        Some(slot)
    }

    pub(super) fn clear(&mut self) {
        self.q.clear();
        self.entries.iter_mut().for_each(|n| *n = 0);
        self.clean = None;
    }

    /// Keeps the slots `keep` accepts, in order.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&u32) -> bool) {
        let entries = &mut self.entries;
        self.q.retain(|s| {
            let k = keep(s);
            if !k {
                entries[*s as usize] -= 1;
            }
            k
        });
        self.clean = None;
    }

    /// `slot`'s flag turned on: if it has an entry on the list, that entry may lie in the
    /// clean run, which is forgotten.
    pub(super) fn flag_raised(&mut self, slot: u32) {
        if self.entries.get(slot as usize).is_some_and(|&n| n > 0) {
            self.clean = None;
        }
    }

    /// The position of the first slot from the front whose `flags` entry is set, if any; the
    /// entries before it (or all of them) are remembered as clean.
    pub(super) fn first_flagged(&mut self, flags: &[bool]) -> Option<usize> {
        let n = self.q.len();
        let run = self.clean.unwrap_or(Run { start: n, len: 0 });
        debug_assert!(run.start + run.len <= n);
        debug_assert!(self
            .q
            .range(run.start..run.start + run.len)
            .all(|&s| !flags[s as usize]));
        let flagged = |s: &u32| flags[*s as usize];
        let found = match self.q.range(..run.start).position(flagged) {
            Some(p) => Some(p),
            None => {
                let after = run.start + run.len;
                self.q.range(after..).position(flagged).map(|p| after + p)
            }
        };
        let seen = found.unwrap_or(n);
        // Everything before `seen` is clean; an old run beyond it stays known if longer.
        if !(run.start > seen && run.len > seen) && seen > 0 {
            self.clean = Some(Run {
                start: 0,
                len: seen,
            });
        }
        found
    }

    /// Moves the first `k` slots to the back, in order.
    pub(super) fn rotate_left(&mut self, k: usize) {
        let n = self.q.len();
        self.q.rotate_left(k);
        if let Some(r) = self.clean {
            self.clean = if r.start + r.len <= k {
                Some(Run {
                    start: r.start + n - k,
                    len: r.len,
                })
            } else if r.start >= k {
                Some(Run {
                    start: r.start - k,
                    len: r.len,
                })
            } else {
                // Split by the rotation: keep the longer piece.
                let (head, tail) = (k - r.start, r.start + r.len - k);
                if head >= tail {
                    Some(Run {
                        start: n - head,
                        len: head,
                    })
                } else {
                    Some(Run {
                        start: 0,
                        len: tail,
                    })
                }
            };
        }
    }

    /// The slots, front first.
    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = &u32> {
        self.q.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Pop,
        /// Serve the first flagged slot as the NIC does: rotate to it, pop it, push it back.
        Serve,
        Flag(u32, bool),
        Retain(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..24).prop_map(Op::Push),
            (0u32..24).prop_map(Op::Push),
            Just(Op::Pop),
            Just(Op::Serve),
            Just(Op::Serve),
            (0u32..24, any::<bool>()).prop_map(|(s, f)| Op::Flag(s, f)),
            (0u32..24).prop_map(Op::Retain),
        ]
    }

    proptest! {
        /// Whatever happens to the list and the flags, the first flagged slot it names is
        /// the one a walk from the front finds, and its order is a plain deque's.
        #[test]
        fn answers_as_a_walk_from_the_front(ops in proptest::collection::vec(op(), 1..300)) {
            let mut list = ReadyList::default();
            let mut plain: VecDeque<u32> = VecDeque::new();
            let mut flags = vec![false; 24];
            for op in ops {
                match op {
                    Op::Push(s) => {
                        list.push_back(s);
                        plain.push_back(s);
                    }
                    Op::Pop => {
                        prop_assert_eq!(list.pop_front(), plain.pop_front());
                    }
                    Op::Serve => {
                        let walked = plain.iter().position(|&s| flags[s as usize]);
                        prop_assert_eq!(list.first_flagged(&flags), walked);
                        if let Some(p) = walked {
                            list.rotate_left(p);
                            plain.rotate_left(p);
                            let s = list.pop_front();
                            prop_assert_eq!(s, plain.pop_front());
                            list.push_back(s.unwrap_or(0));
                            plain.push_back(s.unwrap_or(0));
                        }
                    }
                    Op::Flag(s, f) => {
                        if f && !flags[s as usize] {
                            list.flag_raised(s);
                        }
                        flags[s as usize] = f;
                    }
                    Op::Retain(s) => {
                        list.retain(|&x| x != s);
                        plain.retain(|&x| x != s);
                    }
                }
                prop_assert!(list.iter().eq(plain.iter()));
            }
        }
    }

    #[test]
    fn a_served_slot_at_the_back_is_found_without_walking_the_rest() {
        let mut list = ReadyList::default();
        let mut flags = vec![false; 1000];
        for s in 0..1000 {
            list.push_back(s);
        }
        flags[999] = true;
        assert_eq!(list.first_flagged(&flags), Some(999));
        list.rotate_left(999);
        let s = list.pop_front().expect("one");
        list.push_back(s);
        // The 999 others are the clean run now, at the front.
        assert_eq!(list.clean, Some(Run { start: 0, len: 999 }));
        assert_eq!(list.first_flagged(&flags), Some(999));
    }
}
