//! A FIFO queue whose first element lives inline, the rest in a [`VecDeque`] behind it.
//!
//! A queue pair's control queue holds, almost always, one packet: the ACK of the packet just
//! received (IRN acknowledges every packet, IRN §3.1), sent before the next arrives. In a
//! `VecDeque` each push lands in the next slot of a ring of ~100-byte entries, so consecutive
//! ACKs write and read different cache lines of a separate heap block — a cache miss per
//! packet when a NIC's queue pairs are many (docs/BENCHMARKS.md, the storm's profile). Kept
//! inline, the common case touches only the queue pair's own memory, and the deque is not
//! allocated until two packets wait at once.

use std::collections::VecDeque;

/// A FIFO queue (the subset of [`VecDeque`]'s interface the control queue uses) with its
/// first element inline. Invariant: `more` is empty whenever `first` is `None`. Printed with
/// `{:?}` as the list it is, front first, as a `VecDeque` prints.
#[derive(Clone)]
pub(crate) struct FirstInline<T> {
    first: Option<T>,
    more: VecDeque<T>,
}

impl<T> Default for FirstInline<T> {
    fn default() -> Self {
        FirstInline {
            first: None,
            more: VecDeque::new(),
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for FirstInline<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.first.iter().chain(self.more.iter()))
            .finish()
    }
}

impl<T> FirstInline<T> {
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub(crate) fn push_back(&mut self, t: T) {
        if self.first.is_none() {
            self.first = Some(t);
        } else {
            self.more.push_back(t);
        }
    }

    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let t = self.first.take()?;
        self.first = self.more.pop_front();
        Some(t)
    }

    pub(crate) fn back(&self) -> Option<&T> {
        self.more.back().or(self.first.as_ref())
    }

    pub(crate) fn pop_back(&mut self) -> Option<T> {
        self.more.pop_back().or_else(|| self.first.take())
    }

    /// Keeps the elements `keep` accepts, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut all = std::mem::take(&mut self.more);
        if let Some(t) = self.first.take() {
            all.push_front(t);
        }
        all.retain(|t| keep(t));
        self.first = all.pop_front();
        self.more = all;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8),
        PopFront,
        PopBack,
        RetainOdd,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u8>().prop_map(Op::Push),
            3 => Just(Op::PopFront),
            1 => Just(Op::PopBack),
            1 => Just(Op::RetainOdd),
        ]
    }

    proptest! {
        /// Any sequence of operations gives what a `VecDeque` gives, step by step, and prints
        /// as it does.
        #[test]
        fn behaves_as_a_vecdeque(ops in proptest::collection::vec(op(), 0..200)) {
            let mut q = FirstInline::default();
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(v) => {
                        q.push_back(v);
                        model.push_back(v);
                    }
                    Op::PopFront => prop_assert_eq!(q.pop_front(), model.pop_front()),
                    Op::PopBack => prop_assert_eq!(q.pop_back(), model.pop_back()),
                    Op::RetainOdd => {
                        q.retain(|v| v % 2 == 1);
                        model.retain(|v| v % 2 == 1);
                    }
                }
                prop_assert_eq!(q.is_empty(), model.is_empty());
                prop_assert_eq!(q.back(), model.back());
                prop_assert_eq!(q.more.is_empty() || q.first.is_some(), true);
                prop_assert_eq!(format!("{q:?}"), format!("{model:?}"));
            }
            let rest: Vec<_> = std::iter::from_fn(|| q.pop_front()).collect();
            prop_assert_eq!(rest, Vec::from(model));
        }
    }
}
