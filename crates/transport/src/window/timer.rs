//! The retransmission timer of one PSN space and the retry budget it counts: when the timer
//! was started, and how long and how many expiries the current stretch without an answer from
//! the peer has lasted (IBTA §9.7.6.1.3's retry count; the back-off of
//! [`RecoveryConfig::rto_backoff_after`](crate::RecoveryConfig::rto_backoff_after)). The
//! [`SendWindow`](super::SendWindow) says what is in flight; this says when to give up.

use crate::time::{Dur, Time};

/// A space's timer and retry count.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RetryTimer {
    /// When the timer was (re)started; `None` = not running.
    base: Option<Time>,
    /// When the current stretch without progress began: the timer's start from idle, or the
    /// last progress. `None` while nothing is in flight.
    stall_base: Option<Time>,
    /// Retries counted in the current stretch without progress.
    retries: u32,
    /// Expiries in the current stretch without an answer.
    expiries: u32,
}

impl RetryTimer {
    /// When the timer was started, if it runs.
    pub(crate) fn base(&self) -> Option<Time> {
        self.base
    }

    /// Something was sent at `now`: the timer starts if it was not running.
    pub(crate) fn sent(&mut self, now: Time) {
        if self.base.is_none() {
            self.base = Some(now);
            self.stall_base.get_or_insert(now);
        }
    }

    /// Progress: the timer restarts (if anything is still `in_flight`) and the count with it.
    pub(crate) fn progress(&mut self, now: Time, in_flight: bool) {
        self.retries = 0;
        self.expiries = 0;
        self.base = in_flight.then_some(now);
        self.stall_base = self.base;
    }

    /// The peer answered without acknowledging anything new: the count starts again.
    pub(crate) fn peer_alive(&mut self, now: Time, in_flight: bool) {
        self.retries = 0;
        self.expiries = 0;
        if in_flight {
            self.stall_base = Some(now);
        }
    }

    /// Restarts the timer at `now` (if anything is `in_flight`), the count unchanged.
    pub(crate) fn restart(&mut self, now: Time, in_flight: bool) {
        self.base = in_flight.then_some(now);
    }

    /// A fixed timeout `d`, doubled per expiry beyond `after` of the current stretch, up to
    /// `cap` (`backoff` = `(after, cap)`; `None`: `d` as it is).
    pub(crate) fn backed_off(&self, d: Dur, backoff: Option<(u32, Dur)>) -> Dur {
        match backoff {
            Some((after, cap)) if self.expiries > after => {
                d.doubled(self.expiries - after).min(cap.max(d))
            }
            _ => d,
        }
    }

    /// The timer expired at `now`: restarts it and returns the retries counted so far without
    /// progress. With `retry_every` `None` every expiry is a retry; with `Some(t)` the retries
    /// are the whole `t`s elapsed, but never more than the expiries seen (see
    /// [`SendWindow::on_timeout`](super::SendWindow::on_timeout)).
    pub(crate) fn expired(&mut self, now: Time, retry_every: Option<Dur>) -> u32 {
        self.expiries = self.expiries.saturating_add(1);
        match retry_every {
            None => self.retries += 1,
            Some(t) => {
                let base = *self.stall_base.get_or_insert(now);
                let stalled = now.since(base).as_picos() / t.as_picos().max(1);
                let stalled = u32::try_from(stalled).unwrap_or(u32::MAX);
                self.retries = self.retries.max(stalled.min(self.expiries));
            }
        }
        self.base = Some(now);
        self.retries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_timeout_doubles_past_the_grace_up_to_the_cap_and_an_answer_resets_it() {
        let t0 = Time::ZERO;
        let d = Dur::from_micros(100);
        let backoff = Some((3, Dur::from_micros(1_000)));
        let mut t = RetryTimer::default();
        t.sent(t0);
        let mut seen = Vec::new();
        for _ in 0..7 {
            seen.push(t.backed_off(d, backoff).as_picos() / 1_000_000);
            t.expired(t0, None);
        }
        assert_eq!(seen, [100, 100, 100, 100, 200, 400, 800]);
        assert_eq!(t.backed_off(d, backoff), Dur::from_micros(1_000), "capped");
        assert_eq!(t.backed_off(d, None), d, "off");
        t.peer_alive(t0, true);
        assert_eq!(t.backed_off(d, backoff), d, "the peer answered");
    }
}
