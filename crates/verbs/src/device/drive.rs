//! Waiting threads that drive their device ([`super::DeviceConfig::wait_drives`]).
//!
//! A thread in [`Cq::wait`] does the device's work itself — a round of it, as a busy poller's
//! (`Shared::progress`: what the socket holds is received and processed, timers fire, queue
//! pairs get their turns, batches leave) — and between rounds sleeps in `poll(2)` on what can
//! give it more: the device's socket (a packet), the CQ's own eventfd (a completion another
//! thread made: a thread that drove the device meanwhile, or a post completed at once), the
//! device's post eventfd (a post from another thread, deferred for the waiter to send), and
//! the pause socket; no longer than the device's next deadline. So a packet wakes the thread
//! that waits for what it brings, as a blocking socket's `recv` does, where otherwise it wakes
//! the engine, which then wakes the waiter: one wake-up per completion instead of two, and no
//! second thread contending for the device's lock.
//!
//! The engine leaves the device to such threads as it does to a busy poller (`engine::engine`):
//! while one waits, and for a millisecond after the last wait or poll, so that a program's
//! next wait, a few microseconds later, finds the socket to itself. The watcher
//! (`engine::watcher`) wakes the engine at each look once the program's last poll is over
//! 20 µs old, and the engine takes the device back at the first look after that millisecond
//! (about two after the last wait; it looks itself every 20 ms too); while a thread waits the
//! watcher leaves the engine asleep. Nothing is held for a program's next visit on such a
//! device (`TxState::held`): a thread asleep here would keep it. What wakes the engine
//! otherwise — more to send than a turn allows, budget freed, a batch left to send
//! (`Shared::wake_engine`) — wakes a thread asleep here too.
//!
//! Several threads may wait at once, on one CQ or several: each sleeps on the socket and its
//! CQ's eventfd, and whichever wakes first for a packet receives it, the others running their
//! rounds after its (they find the socket empty, or their completion made). A completion
//! writes its CQ's eventfd once for the threads asleep on it; one that takes it and leaves
//! more passes the wake-up on.
//!
//! Measured on loopback, both ends waiting so, against the same binary with a sleeping
//! engine, six alternating rounds (docs/BENCHMARKS.md): 64-byte Sends 0.74–0.83 → 1.40–1.47
//! Mpps; a 64-byte Send ping-pong's latency (half a round trip, each end asleep in its wait)
//! 38.5–40.2 → 26.9–28.6 µs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::fd::OwnedFd;

use super::{Cq, CqState, Result, Shared};

/// The device's side of waiting threads that drive it.
#[derive(Debug)]
pub(super) struct Drive {
    /// Threads in a driving wait now, asleep or working.
    waiting: AtomicUsize,
    /// Of those, threads asleep in `poll(2)` now.
    asleep: AtomicUsize,
    /// Written by a post from another thread that leaves its packets for a waiter to send.
    posted: OwnedFd,
}

impl Drive {
    pub(super) fn new() -> std::io::Result<Drive> {
        Ok(Drive {
            waiting: AtomicUsize::new(0),
            asleep: AtomicUsize::new(0),
            posted: eventfd()?,
        })
    }

    /// A thread waits, and drives the device, now.
    pub(super) fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// A waiting thread sleeps in `poll(2)`: a post that leaves its packets for the device's
    /// drivers wakes one ([`Drive::wake_for_post`]).
    pub(super) fn asleep(&self) -> bool {
        self.asleep.load(Ordering::Acquire) > 0
    }

    /// Wakes the threads asleep in a driving wait for what a post left them: its packets in
    /// the transmit batch, or a turn the queue pair still needs.
    pub(super) fn wake_for_post(&self) {
        ring(&self.posted);
    }
}

/// A non-blocking eventfd: the device's wake-ups (the engine's, the waiters').
pub(super) fn eventfd() -> std::io::Result<OwnedFd> {
    rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
    )
    .map_err(std::io::Error::from)
}

/// Writes an eventfd, waking whoever polls it: the engine (`Shared::wake`), the threads asleep
/// in a driving wait on a CQ (its `drive_wake`), or on the device (`Drive::posted`).
pub(super) fn ring(fd: &OwnedFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Reads an eventfd empty.
fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 8];
    let _ = rustix::io::read(fd, &mut buf);
}

/// Counts a thread in a driving wait for as long as it lives; as the wait ends the thread
/// counts as having polled then, so that the engine leaves the device to the program for the
/// millisecond after.
struct Entered<'a> {
    shared: &'a Shared,
    drive: &'a Drive,
}

impl<'a> Entered<'a> {
    fn new(shared: &'a Shared, drive: &'a Drive) -> Entered<'a> {
        drive.waiting.fetch_add(1, Ordering::AcqRel);
        Entered { shared, drive }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.shared.polled_now();
        self.drive.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Cq {
    /// [`Cq::wait`] of a device whose waiting threads drive it: rounds of the device's work
    /// on this thread until `take` finds what it waits for in the CQ — its answer — or
    /// `deadline` passes or the device closes (`Ok(None)`), asleep in `poll(2)` between
    /// rounds (module docs).
    pub(super) fn drive_until<R>(
        &self,
        drive: &Drive,
        deadline: Instant,
        mut take: impl FnMut(&mut CqState) -> Option<Result<R>>,
    ) -> Result<Option<R>> {
        let _entered = Entered::new(&self.shared, drive);
        // Woken by a completion another thread made: the first round after need not wait for
        // a round in progress elsewhere (the completion is likely there; if another thread
        // took it, the rounds after wait again).
        let mut made = false;
        loop {
            // After the round of a thread receiving for the device now, if there is one.
            self.shared.progress_with(!std::mem::take(&mut made));
            // Whatever the round made or held leaves now: a waiting thread leaves nothing
            // in the batch (holding its ACKs for the program's next post is no faster).
            let mut core = self.shared.flush(self.shared.lock());
            core.counters.wait_rounds += 1;
            let cq = core.objects.cq_mut(self.id)?;
            if let Some(r) = take(cq) {
                // Threads still asleep on this CQ: the wake-up that brought this completion
                // may have been read by this thread alone; pass it on if more are there, and
                // let the next completion write the eventfd again if not.
                if cq.drivers > 0 {
                    cq.drive_rung = cq.overrun || !cq.entries.is_empty();
                    if let (true, Some(fd)) = (cq.drive_rung, &cq.drive_wake) {
                        ring(fd);
                    }
                }
                return r.map(Some);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.shared.closed() {
                return Ok(None);
            }
            // Queue pairs with more to send, or a budget with room: another round at once.
            let now = self.shared.now();
            let Some(sleep) = super::engine::wake_in(&mut core, now).filter(|s| !s.is_zero())
            else {
                continue;
            };
            let cq = core.objects.cq_mut(self.id)?;
            if cq.drive_wake.is_none() {
                cq.drive_wake = Some(Arc::new(eventfd()?));
            }
            let fd = cq.drive_wake.clone().expect("made above");
            // Under the lock completions are added with: a completion from now on writes the
            // eventfd (`engine::push_wc`), and a post sees `asleep` and writes the device's.
            cq.drivers += 1;
            cq.drive_rung = false;
            drive.asleep.fetch_add(1, Ordering::AcqRel);
            drop(core);
            let woken = self.sleep_in_poll(drive, &fd, sleep.min(left));
            made = woken.completion;
            drive.asleep.fetch_sub(1, Ordering::AcqRel);
            let mut core = self.shared.lock();
            core.counters.wait_woken_by_completion += u64::from(woken.completion);
            core.counters.wait_woken_by_post += u64::from(woken.post);
            if let Ok(cq) = core.objects.cq_mut(self.id) {
                cq.drivers -= 1;
            }
        }
    }

    /// Sleeps up to `sleep` in `poll(2)` on the device's socket, this CQ's eventfd `cq_fd`,
    /// the device's post eventfd and the pause socket; reads both eventfds empty after, and
    /// says which of them woke it.
    fn sleep_in_poll(&self, drive: &Drive, cq_fd: &OwnedFd, sleep: Duration) -> Woken {
        let ts = rustix::event::Timespec {
            tv_sec: sleep.as_secs() as i64,
            tv_nsec: i64::from(sleep.subsec_nanos()),
        };
        let rx_fd = self.shared.socks.rx_fd();
        let mut fds = vec![
            PollFd::new(&rx_fd, PollFlags::IN),
            PollFd::new(cq_fd, PollFlags::IN),
            PollFd::new(&drive.posted, PollFlags::IN),
        ];
        let pause_fd = self
            .shared
            .pause_sock
            .as_ref()
            .map(std::os::fd::AsFd::as_fd);
        if let Some(fd) = &pause_fd {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        let _ = rustix::event::poll(&mut fds, Some(&ts));
        let woken = Woken {
            completion: fds[1].revents().contains(PollFlags::IN),
            post: fds[2].revents().contains(PollFlags::IN),
        };
        drop(fds);
        if woken.completion {
            drain(cq_fd);
        }
        if woken.post {
            drain(&drive.posted);
        }
        woken
    }
}

/// What woke a thread asleep in a driving wait, besides packets and its timeout.
struct Woken {
    /// A completion another thread made on its CQ.
    completion: bool,
    /// Another thread's post.
    post: bool,
}
