//! TIMELY (Mittal et al., *TIMELY: RTT-based Congestion Control for the Datacenter*, SIGCOMM
//! 2015; SPEC T9): rate control from the gradient of the round-trip time, run at the NIC.
//!
//! Once per completion event — every `segment_bytes` acknowledged, with the RTT sample of the
//! ACK that completed it (the paper's segments are 16–64 KB) — with `rtt` the new sample:
//!
//! * `new_diff = rtt − prev_rtt`; `diff = (1 − α)·diff + α·new_diff`;
//!   `gradient = diff / min_rtt`;
//! * `rtt < T_low`: additive increase, `rate += δ`;
//! * `rtt > T_high`: `rate ×= 1 − β·(1 − T_high/rtt)`;
//! * `gradient ≤ 0`: `rate += N·δ`, where `N` = 5 after five such events in a row (hyperactive
//!   increase), 1 before;
//! * otherwise `rate ×= 1 − β·gradient`.
//!
//! The rate stays within `[min_rate_bps, line rate]`; flows start at line rate (IRN §4.1).
//! [`Default`] holds the TIMELY paper's parameters (α = 0.875, β = 0.8, δ = 10 Mb/s,
//! T_low = 50 µs, T_high = 500 µs, min RTT = 20 µs, N = 5), which the IRN paper uses unchanged.
//! Samples come from the queue pair's ACKs (Karn: none from a retransmitted packet).

use crate::time::{Dur, Time};

use super::{Controller, ControllerFactory};

/// TIMELY's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelyConfig {
    /// EWMA weight α of the newest RTT difference. Default 0.875.
    pub alpha: f64,
    /// Multiplicative decrease factor β. Default 0.8.
    pub beta: f64,
    /// Additive increment δ in bits per second. Default 10 Mb/s.
    pub delta_bps: u64,
    /// Below this RTT the rate only increases. Default 50 µs.
    pub t_low: Dur,
    /// Above this RTT the rate decreases whatever the gradient. Default 500 µs.
    pub t_high: Dur,
    /// The RTT that normalizes the gradient (the network's minimum). Default 20 µs.
    pub min_rtt: Dur,
    /// Consecutive non-positive gradients before hyperactive increase (`N`). Default 5.
    pub hai_threshold: u32,
    /// Bytes acknowledged per completion event (rate update). Default 16 KB.
    pub segment_bytes: u64,
    /// The lowest rate, in bits per second. Default 100 Mb/s.
    pub min_rate_bps: u64,
}

impl Default for TimelyConfig {
    fn default() -> Self {
        TimelyConfig {
            alpha: 0.875,
            beta: 0.8,
            delta_bps: 10_000_000,
            t_low: Dur::from_micros(50),
            t_high: Dur::from_micros(500),
            min_rtt: Dur::from_micros(20),
            hai_threshold: 5,
            segment_bytes: 16 * 1024,
            min_rate_bps: 100_000_000,
        }
    }
}

/// One queue pair's TIMELY rate computation.
#[derive(Debug, Clone)]
pub struct Timely {
    cfg: TimelyConfig,
    line: f64,
    rate: f64,
    /// The previous completion event's RTT, in picoseconds.
    prev_rtt: Option<f64>,
    /// The smoothed RTT difference, in picoseconds.
    diff: f64,
    /// Consecutive completion events with a non-positive gradient.
    negatives: u32,
    /// Bytes acknowledged towards the next completion event.
    acked: u64,
}

impl Timely {
    /// A sender at line rate.
    pub fn new(cfg: TimelyConfig, line_rate_bps: u64) -> Timely {
        let line = line_rate_bps.max(1) as f64;
        Timely {
            cfg,
            line,
            rate: line,
            prev_rtt: None,
            diff: 0.0,
            negatives: 0,
            acked: 0,
        }
    }

    /// The current rate in bits per second (line rate included).
    pub fn current_bps(&self) -> u64 {
        self.rate as u64
    }

    /// One completion event with RTT sample `rtt`.
    fn update(&mut self, rtt: Dur) {
        let c = &self.cfg;
        let rtt = rtt.as_picos() as f64;
        let Some(prev) = self.prev_rtt.replace(rtt) else {
            // The first sample only sets the reference of the gradient.
            return;
        };
        self.diff = (1.0 - c.alpha) * self.diff + c.alpha * (rtt - prev);
        let gradient = self.diff / c.min_rtt.as_picos().max(1) as f64;
        let delta = c.delta_bps as f64;
        if rtt < c.t_low.as_picos() as f64 {
            self.rate += delta;
            self.negatives = 0;
        } else if rtt > c.t_high.as_picos() as f64 {
            self.rate *= 1.0 - c.beta * (1.0 - c.t_high.as_picos() as f64 / rtt);
            self.negatives = 0;
        } else if gradient <= 0.0 {
            self.negatives = self.negatives.saturating_add(1);
            let n = if self.negatives >= c.hai_threshold {
                f64::from(c.hai_threshold)
            } else {
                1.0
            };
            self.rate += n * delta;
        } else {
            self.rate *= 1.0 - c.beta * gradient;
            self.negatives = 0;
        }
        self.rate = self.rate.min(self.line).max(self.floor());
    }

    /// The lowest rate: the configured minimum, where a minimum above the line rate (or of
    /// zero, which would stop the sender for good) is read as the line rate (or 1 b/s).
    fn floor(&self) -> f64 {
        (self.cfg.min_rate_bps.max(1) as f64).min(self.line)
    }
}

impl Controller for Timely {
    fn name(&self) -> &'static str {
        "timely"
    }

    fn on_ack(&mut self, _now: Time, bytes: u64, rtt: Option<Dur>) {
        self.acked += bytes;
        if self.acked < self.cfg.segment_bytes {
            return;
        }
        // A segment completed; its event takes the first RTT sample from here on (an ACK that
        // allows none — a retransmitted or earlier selectively acknowledged packet — defers
        // it).
        if let Some(r) = rtt {
            self.acked = 0;
            self.update(r);
        }
    }

    /// A loss halves the rate, as TCP halves its window on one (RFC 5681 §3.1), within the
    /// floor; the gradient's state is kept.
    fn back_off(&mut self, _now: Time) {
        self.rate = (self.rate / 2.0).max(self.floor());
        self.negatives = 0;
    }

    fn rate_bps(&self) -> Option<u64> {
        (self.rate < self.line).then_some(self.rate as u64)
    }

    fn window(&self) -> Option<u64> {
        None
    }

    /// One RTT sample per segment: without it a standard RoCE requester's ACKs (every 64
    /// packets) would update the rate a quarter as often.
    fn ack_interval_bytes(&self) -> Option<u64> {
        Some(self.cfg.segment_bytes)
    }
}

/// Makes a [`Timely`] per queue pair.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimelyFactory(pub TimelyConfig);

impl ControllerFactory for TimelyFactory {
    fn build(&self, _now: Time, line_rate_bps: u64, _seed: u64) -> Box<dyn Controller> {
        Box::new(Timely::new(self.0, line_rate_bps))
    }
}

/// `[cc.timely]`: TIMELY (Mittal et al., SIGCOMM 2015).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields, default)
)]
pub struct TimelyParams {
    /// EWMA weight of the newest RTT difference. Default 0.875.
    pub alpha: f64,
    /// Multiplicative decrease β. Default 0.8.
    pub beta: f64,
    /// Additive increment δ, Mb/s. Default 10.
    pub delta_mbps: f64,
    /// T_low, µs. Default 50.
    pub t_low_us: f64,
    /// T_high, µs. Default 500.
    pub t_high_us: f64,
    /// The RTT that normalizes the gradient, µs. Default 20.
    pub min_rtt_us: f64,
    /// Non-positive gradients in a row before hyperactive increase. Default 5.
    pub hai_threshold: u32,
    /// Bytes acknowledged per rate update (completion event). Default 16384.
    pub segment_bytes: u64,
    /// Lowest rate, Mb/s. Default 100.
    pub min_rate_mbps: f64,
}

impl Default for TimelyParams {
    fn default() -> Self {
        let d = TimelyConfig::default();
        TimelyParams {
            alpha: d.alpha,
            beta: d.beta,
            delta_mbps: d.delta_bps as f64 / 1e6,
            t_low_us: d.t_low.as_micros_f64(),
            t_high_us: d.t_high.as_micros_f64(),
            min_rtt_us: d.min_rtt.as_micros_f64(),
            hai_threshold: d.hai_threshold,
            segment_bytes: d.segment_bytes,
            min_rate_mbps: d.min_rate_bps as f64 / 1e6,
        }
    }
}

impl TimelyParams {
    /// The controller's parameters, in its own units.
    pub fn config(&self) -> TimelyConfig {
        TimelyConfig {
            alpha: self.alpha,
            beta: self.beta,
            delta_bps: super::mbps(self.delta_mbps),
            t_low: Dur::from_micros_f64(self.t_low_us),
            t_high: Dur::from_micros_f64(self.t_high_us),
            min_rtt: Dur::from_micros_f64(self.min_rtt_us),
            hai_threshold: self.hai_threshold,
            segment_bytes: self.segment_bytes,
            min_rate_bps: super::mbps(self.min_rate_mbps),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_table_defaults_to_the_papers_set_and_converts_its_units() {
        assert_eq!(TimelyParams::default().config(), TimelyConfig::default());
        let p = TimelyParams {
            t_low_us: 12.5,
            delta_mbps: 2.5,
            ..TimelyParams::default()
        };
        assert_eq!(p.config().t_low, Dur::from_nanos(12_500));
        assert_eq!(p.config().delta_bps, 2_500_000);
    }

    const LINE: u64 = 40_000_000_000;

    fn timely() -> Timely {
        Timely::new(
            TimelyConfig {
                segment_bytes: 1,
                ..TimelyConfig::default()
            },
            LINE,
        )
    }

    fn sample(t: &mut Timely, us: u64) {
        t.on_ack(Time::ZERO, 1024, Some(Dur::from_micros(us)));
    }

    #[test]
    fn rising_rtt_cuts_by_the_normalized_gradient() {
        let mut t = timely();
        sample(&mut t, 60);
        assert_eq!(t.rate_bps(), None, "first sample is the reference");
        sample(&mut t, 70);
        // diff = 0.875 × 10 µs; gradient = 8.75 / 20; rate × (1 − 0.8 × 0.4375).
        let expect = LINE as f64 * (1.0 - 0.8 * 0.4375);
        assert!((t.current_bps() as f64 - expect).abs() < 2.0);
    }

    #[test]
    fn low_rtt_adds_delta_and_falling_rtt_turns_hyperactive() {
        let mut t = timely();
        sample(&mut t, 60);
        sample(&mut t, 400); // a large cut
        let r0 = t.current_bps();
        sample(&mut t, 40); // below T_low: + δ
        assert_eq!(t.current_bps(), r0 + 10_000_000);
        // Then within [T_low, T_high] with a non-positive smoothed gradient (40 → 60 is a rise,
        // but the fall before it still dominates the average): + δ four times, then + 5δ.
        let mut r = t.current_bps();
        for (i, us) in [60, 59, 58, 57, 56, 55].into_iter().enumerate() {
            sample(&mut t, us);
            let step = t.current_bps() - r;
            r = t.current_bps();
            let expect = if i < 4 { 10_000_000 } else { 50_000_000 };
            assert_eq!(step, expect, "sample {i}");
        }
    }

    #[test]
    fn above_t_high_cuts_whatever_the_gradient() {
        let mut t = timely();
        sample(&mut t, 1000);
        sample(&mut t, 900);
        // Gradient negative, RTT 900 µs > 500: rate × (1 − 0.8 × (1 − 500/900)).
        let expect = LINE as f64 * (1.0 - 0.8 * (1.0 - 500.0 / 900.0));
        assert!((t.current_bps() as f64 - expect).abs() < 2.0);
    }

    #[test]
    fn one_update_per_segment_and_rate_bounded() {
        let mut t = Timely::new(TimelyConfig::default(), LINE);
        // 15 packets of 1 KB are less than a 16 KB segment: no update at all.
        for _ in 0..15 {
            t.on_ack(Time::ZERO, 1024, Some(Dur::from_micros(400)));
        }
        t.on_ack(Time::ZERO, 1024, Some(Dur::from_micros(400)));
        assert_eq!(t.rate_bps(), None, "the 16th sets the reference only");
        for i in 0..200 {
            for _ in 0..16 {
                t.on_ack(Time::ZERO, 1024, Some(Dur::from_micros(400 + 20 * i)));
            }
        }
        assert_eq!(t.rate_bps(), Some(100_000_000));
    }
}
