//! Independent runs on several threads: the one work pool of the experiment runner
//! (`irn sim`), E12's sweep (`drp.rs`) and the tests. Each thread takes the next item from a
//! shared counter, so long and short runs mix without planning; the results come back in the
//! items' order, whatever order they finished in, so that what a caller prints or writes does
//! not depend on scheduling.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `f(i, &items[i])` for every item, on `jobs` threads (at least one), results in item order.
/// A panic in `f` reaches the caller, with its own message, once every thread has stopped.
pub fn map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..jobs.clamp(1, items.len().max(1)))
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(i, item);
                    *out[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                })
            })
            .collect();
        // The first panic goes on with its own message (the scope alone would only say that
        // a thread panicked).
        let mut panic = None;
        for t in threads {
            if let Err(p) = t.join() {
                panic.get_or_insert(p);
            }
        }
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item ran: a thread that panicked made the scope panic")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_once_results_in_order_whatever_the_threads() {
        let items: Vec<u64> = (0..100).collect();
        let calls = AtomicUsize::new(0);
        for jobs in [0, 1, 2, 7, 500] {
            calls.store(0, Ordering::Relaxed);
            let out = map(&items, jobs, |i, &x| {
                calls.fetch_add(1, Ordering::Relaxed);
                assert_eq!(i as u64, x);
                // Uneven work, so that threads finish out of order.
                (0..(x % 7) * 1000).fold(x, |a, b| a ^ b)
                    ^ (0..(x % 7) * 1000).fold(0, |a, b| a ^ b)
            });
            assert_eq!(out, items, "jobs = {jobs}");
            assert_eq!(calls.load(Ordering::Relaxed), items.len());
        }
        assert!(map(&[] as &[u8], 4, |_, _| 0).is_empty());
    }

    #[test]
    #[should_panic(expected = "item 3")]
    fn a_panic_in_a_run_reaches_the_caller() {
        map(&[0, 1, 2, 3, 4], 2, |i, _| {
            if i == 3 {
                panic!("item 3");
            }
        });
    }
}
