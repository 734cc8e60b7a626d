//! Backing off on loss: a rate controller told of losses as of congestion (IRN §4.3, "Can
//! go-back-N be made more efficient?": the authors found that explicitly backing off on
//! losses improved go-back-N with TIMELY, though not with DCQCN, and that selective repeat
//! stayed 20–50 % better in average FCT).
//!
//! DCQCN and TIMELY read congestion from ECN marks and delay only; a loss leaves their rate
//! where it was. [`BackoffOnLoss`] wraps any controller and, on a loss (a NAK for a sequence
//! error) or a retransmission timeout, asks it to [`back_off`](super::Controller::back_off)
//! — DCQCN as on a CNP, TIMELY by halving its rate — at most once per `interval`, as a
//! notification point sends at most one CNP per interval: a burst of NACKs is one signal,
//! not one cut each. Everything else passes through unchanged.

use std::sync::Arc;

use super::{Controller, ControllerFactory};
use crate::time::{Dur, Time};

/// A controller that also backs off on losses.
#[derive(Debug)]
pub struct BackoffOnLoss {
    inner: Box<dyn Controller>,
    /// At most one back-off per this long.
    interval: Dur,
    /// When the next back-off may come.
    next: Time,
    /// Back-offs made.
    pub backoffs: u64,
}

impl BackoffOnLoss {
    /// `inner`, backing off on losses at most once per `interval`.
    pub fn new(inner: Box<dyn Controller>, interval: Dur) -> BackoffOnLoss {
        BackoffOnLoss {
            inner,
            interval,
            next: Time::ZERO,
            backoffs: 0,
        }
    }

    fn lost(&mut self, now: Time) {
        if now >= self.next {
            self.inner.back_off(now);
            self.backoffs += 1;
            self.next = now + self.interval;
        }
    }
}

impl Controller for BackoffOnLoss {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn on_send(&mut self, now: Time, bytes: u64) {
        self.inner.on_send(now, bytes);
    }
    fn on_ack(&mut self, now: Time, bytes: u64, rtt: Option<Dur>) {
        self.inner.on_ack(now, bytes, rtt);
    }
    fn on_cnp(&mut self, now: Time) {
        self.inner.on_cnp(now);
    }
    fn on_ecn_echo(&mut self, now: Time, marked: u64, total: u64) {
        self.inner.on_ecn_echo(now, marked, total);
    }
    fn on_loss(&mut self, now: Time) {
        self.inner.on_loss(now);
        self.lost(now);
    }
    fn on_timeout(&mut self, now: Time) {
        self.inner.on_timeout(now);
        self.lost(now);
    }
    fn back_off(&mut self, now: Time) {
        self.inner.back_off(now);
    }
    fn next_timer(&self) -> Option<Time> {
        self.inner.next_timer()
    }
    fn on_timer(&mut self, now: Time) {
        self.inner.on_timer(now);
    }
    fn rate_bps(&self) -> Option<u64> {
        self.inner.rate_bps()
    }
    fn window(&self) -> Option<u64> {
        self.inner.window()
    }
    fn ack_interval_bytes(&self) -> Option<u64> {
        self.inner.ack_interval_bytes()
    }
}

/// Makes `inner`'s controllers back off on losses, at most once per `interval`.
#[derive(Debug)]
pub struct BackoffOnLossFactory {
    /// The controllers' own factory.
    pub inner: Arc<dyn ControllerFactory>,
    /// At most one back-off per this long.
    pub interval: Dur,
}

impl ControllerFactory for BackoffOnLossFactory {
    fn build(&self, now: Time, line_rate_bps: u64, seed: u64) -> Box<dyn Controller> {
        Box::new(BackoffOnLoss::new(
            self.inner.build(now, line_rate_bps, seed),
            self.interval,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{DcqcnConfig, DcqcnFactory, NoCcFactory, TimelyConfig, TimelyFactory};

    const LINE: u64 = 40_000_000_000;

    fn us(n: u64) -> Time {
        Time::ZERO + Dur::from_micros(n)
    }

    #[test]
    fn timely_halves_its_rate_on_a_loss_once_per_interval() {
        let f = BackoffOnLossFactory {
            inner: Arc::new(TimelyFactory(TimelyConfig::default())),
            interval: Dur::from_micros(50),
        };
        let mut c = f.build(Time::ZERO, LINE, 1);
        assert_eq!(c.rate_bps(), None, "line rate to start");
        c.on_loss(us(10));
        assert_eq!(c.rate_bps(), Some(LINE / 2));
        // A burst of NACKs within the interval is one signal.
        c.on_loss(us(20));
        c.on_timeout(us(59));
        assert_eq!(c.rate_bps(), Some(LINE / 2));
        // A timeout after it is another.
        c.on_timeout(us(60));
        assert_eq!(c.rate_bps(), Some(LINE / 4));
        // Without the wrapper a loss leaves TIMELY's rate alone.
        let mut plain = TimelyFactory(TimelyConfig::default()).build(Time::ZERO, LINE, 1);
        plain.on_loss(us(10));
        plain.on_timeout(us(70));
        assert_eq!(plain.rate_bps(), None);
    }

    #[test]
    fn dcqcn_backs_off_on_a_loss_as_on_a_cnp_and_recovers_by_its_timers() {
        let cfg = DcqcnConfig::default();
        let f = BackoffOnLossFactory {
            inner: Arc::new(DcqcnFactory {
                config: cfg,
                seed: 1,
            }),
            interval: Dur::from_micros(50),
        };
        let mut lossy = f.build(Time::ZERO, LINE, 1);
        let mut marked = DcqcnFactory {
            config: cfg,
            seed: 1,
        }
        .build(Time::ZERO, LINE, 1);
        lossy.on_loss(us(5));
        marked.on_cnp(us(5));
        assert!(lossy.rate_bps().is_some_and(|r| r < LINE));
        assert_eq!(lossy.rate_bps(), marked.rate_bps());
        assert_eq!(lossy.next_timer(), marked.next_timer());
        // Its timers raise the rate again, as after a CNP.
        let t = lossy.next_timer().expect("a recovery timer");
        lossy.on_timer(t);
        marked.on_timer(t);
        assert_eq!(lossy.rate_bps(), marked.rate_bps());
        // No controller, nothing to back off.
        let none = BackoffOnLossFactory {
            inner: Arc::new(NoCcFactory),
            interval: Dur::from_micros(50),
        };
        let mut c = none.build(Time::ZERO, LINE, 1);
        c.on_loss(us(1));
        assert_eq!((c.rate_bps(), c.window(), c.name()), (None, None, "none"));
    }
}
