//! Window-based congestion control (SPEC T9; IRN §4.4.4): TCP's AIMD (RFC 5681's congestion
//! avoidance, slow start after a timeout) and DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257).
//!
//! The window bounds the bytes in flight (`QueuePair` compares packets in flight × MTU with it);
//! IRN's BDP cap still applies underneath. Both algorithms share the machinery:
//!
//! * **increase** per acknowledged byte: slow start (`cwnd += acked`) below `ssthresh`,
//!   congestion avoidance (`cwnd += mss · acked / cwnd`, one MSS per round trip) above it;
//! * **a loss** (a NAK for a sequence error) halves the window, at most once per smoothed
//!   round trip — `initial_rtt` before the first sample (the losses of one window are one
//!   congestion event);
//! * **a timeout** sets `ssthresh` to half the window and the window to one MSS, which then
//!   slow-starts back; a second timeout before any progress keeps that `ssthresh` (RFC 5681
//!   §3.1, §7);
//! * **ECN echo**: AIMD treats a marked echo like a loss (RFC 3168 §6.1.2). DCTCP (RFC 8257
//!   §3.3) cuts `cwnd ×= 1 − α/2` at the first marked echo of each observation window (one
//!   window of acknowledged bytes), and at the window's end updates `α = (1 − g)·α + g·F`,
//!   with `F` the fraction of the window's bytes echoed as marked.
//!
//! There is no slow start at the beginning by default: as IRN's flows start at line rate, a
//! new queue pair's window is `init_window` (the simulator sets the BDP) with `ssthresh` equal
//! to it (`init_ssthresh` gives TCP's slow start instead), so it grows by congestion avoidance, up to `max_window` (the simulator: the same BDP, as a
//! window beyond IRN's BDP cap sends nothing more and only dulls the cuts). Echoes ride on
//! ACKs: the responder sets BTH's BECN bit in the ACK or NACK of a CE-marked packet — IRN
//! answers every packet, and a standard RoCE requester under a window asks for an ACK on every
//! packet ([`Controller::ack_interval_bytes`]).

use crate::time::{Dur, Time};

use super::{Controller, ControllerFactory};

/// Which window algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowAlgorithm {
    /// TCP's additive increase, multiplicative decrease, on losses and ECN echoes.
    Aimd,
    /// DCTCP: cuts in proportion to the fraction of marked bytes.
    Dctcp,
}

/// Parameters of [`WindowCc`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowConfig {
    /// AIMD or DCTCP.
    pub algorithm: WindowAlgorithm,
    /// The increase unit (the path MTU's payload). Default 1024.
    pub mss: u64,
    /// A new queue pair's window in bytes. Default 120 000 (IRN's E0 BDP).
    pub init_window: u64,
    /// A new queue pair's slow-start threshold in bytes. `None` (the default): the initial
    /// window, so a flow starts in congestion avoidance, at IRN's line rate. TCP's slow start
    /// (RFC 5681 §3.1, the TCP model of SPEC E10) sets it high — "arbitrarily high" in the
    /// RFC's words — with an initial window of a few segments (RFC 6928: ten).
    pub init_ssthresh: Option<u64>,
    /// The smallest window. Default one MSS.
    pub min_window: u64,
    /// The largest window (`None`: unbounded; the BDP cap bounds what is in flight anyway).
    /// Default `None`.
    pub max_window: Option<u64>,
    /// DCTCP's EWMA gain `g`. Default 1/16.
    pub g: f64,
    /// The round trip assumed before the first RTT sample (how long one congestion event's
    /// losses are taken as one). Default 25 µs (IRN's E0: 24 µs).
    pub initial_rtt: Dur,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            algorithm: WindowAlgorithm::Dctcp,
            mss: 1024,
            init_window: 120_000,
            init_ssthresh: None,
            min_window: 1024,
            max_window: None,
            g: 1.0 / 16.0,
            initial_rtt: Dur::from_micros(25),
        }
    }
}

/// One queue pair's congestion window.
#[derive(Debug, Clone)]
pub struct WindowCc {
    cfg: WindowConfig,
    cwnd: f64,
    ssthresh: f64,
    /// DCTCP's marked fraction estimate.
    alpha: f64,
    /// Smoothed RTT (RFC 6298's 1/8 gain), once there is a sample.
    srtt: Option<Dur>,
    /// No second cut before this time (one per round trip).
    cut_until: Time,
    /// Bytes acknowledged, and those with an echo, in the current observation window.
    win_acked: u64,
    win_marked: u64,
    /// The window's size when this observation window began.
    win_target: u64,
    /// DCTCP already cut in this observation window.
    cut_this_window: bool,
    /// A timeout happened and no ACK has made progress since.
    timed_out: bool,
}

impl WindowCc {
    /// A window at `init_window`.
    pub fn new(cfg: WindowConfig) -> WindowCc {
        let w = cfg.init_window.max(cfg.min_window) as f64;
        WindowCc {
            cfg,
            cwnd: w,
            ssthresh: cfg.init_ssthresh.map_or(w, |s| s as f64),
            alpha: 1.0,
            srtt: None,
            cut_until: Time::ZERO,
            win_acked: 0,
            win_marked: 0,
            win_target: w as u64,
            cut_this_window: false,
            timed_out: false,
        }
    }

    /// DCTCP's α.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The slow-start threshold in bytes.
    pub fn ssthresh(&self) -> u64 {
        self.ssthresh as u64
    }

    /// Keeps the window within `[min_window, max_window]` (the minimum wins if they cross).
    fn clamp(&mut self) {
        let max = self.cfg.max_window.map_or(f64::INFINITY, |m| m as f64);
        self.cwnd = self.cwnd.min(max).max(self.cfg.min_window.max(1) as f64);
    }

    fn round_trip(&self) -> Dur {
        self.srtt.unwrap_or(self.cfg.initial_rtt)
    }

    /// Multiplies the window by `factor`, at most once per round trip.
    fn cut(&mut self, now: Time, factor: f64) {
        if now < self.cut_until {
            return;
        }
        self.cwnd *= factor;
        self.clamp();
        self.ssthresh = self.cwnd;
        self.cut_until = now + self.round_trip();
    }
}

impl Controller for WindowCc {
    fn name(&self) -> &'static str {
        match self.cfg.algorithm {
            WindowAlgorithm::Aimd => "aimd",
            WindowAlgorithm::Dctcp => "dctcp",
        }
    }

    fn on_ack(&mut self, _now: Time, bytes: u64, rtt: Option<Dur>) {
        self.timed_out = false;
        if let Some(r) = rtt {
            self.srtt = Some(match self.srtt {
                None => r,
                Some(s) => Dur::from_picos((s.as_picos() / 8) * 7 + r.as_picos() / 8),
            });
        }
        let acked = bytes as f64;
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + acked).min(self.ssthresh.max(self.cwnd));
        } else {
            self.cwnd += self.cfg.mss as f64 * acked / self.cwnd;
        }
        self.clamp();
    }

    fn on_ecn_echo(&mut self, now: Time, marked: u64, total: u64) {
        self.win_acked += total;
        self.win_marked += marked;
        match self.cfg.algorithm {
            WindowAlgorithm::Aimd => {
                if marked > 0 {
                    self.cut(now, 0.5);
                }
                if self.win_acked >= self.win_target {
                    self.win_acked = 0;
                    self.win_marked = 0;
                    self.win_target = self.cwnd as u64;
                }
            }
            WindowAlgorithm::Dctcp => {
                if marked > 0 && !self.cut_this_window {
                    // The first mark of the window cuts by the current α (RFC 8257 §3.3).
                    self.cut_this_window = true;
                    self.cwnd *= 1.0 - self.alpha / 2.0;
                    self.clamp();
                    self.ssthresh = self.cwnd;
                }
                if self.win_acked < self.win_target.max(1) {
                    return;
                }
                let f = self.win_marked as f64 / self.win_acked as f64;
                self.alpha = (1.0 - self.cfg.g) * self.alpha + self.cfg.g * f;
                self.win_acked = 0;
                self.win_marked = 0;
                self.win_target = self.cwnd as u64;
                self.cut_this_window = false;
            }
        }
    }

    fn on_loss(&mut self, now: Time) {
        self.cut(now, 0.5);
    }

    fn on_timeout(&mut self, now: Time) {
        if !self.timed_out {
            self.ssthresh = (self.cwnd / 2.0).max(2.0 * self.cfg.mss as f64);
        }
        self.timed_out = true;
        self.cwnd = self.cfg.mss as f64;
        self.clamp();
        self.cut_until = now + self.round_trip();
    }

    fn rate_bps(&self) -> Option<u64> {
        None
    }

    fn window(&self) -> Option<u64> {
        Some(self.cwnd as u64)
    }

    /// Every packet: a window is clocked by ACKs (as a TCP receiver ACKs every other
    /// segment). Asking only when the window fills is not enough — a cut after the packets
    /// left closes the window below what is in flight with no ACK on its way, and under PFC
    /// there is no timeout to break the wait.
    fn ack_interval_bytes(&self) -> Option<u64> {
        Some(0)
    }
}

/// Makes a [`WindowCc`] per queue pair.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowFactory(pub WindowConfig);

impl ControllerFactory for WindowFactory {
    fn build(&self, _now: Time, _line_rate_bps: u64, _seed: u64) -> Box<dyn Controller> {
        Box::new(WindowCc::new(self.0))
    }
}

/// `[cc.window]`: AIMD and DCTCP.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields, default)
)]
pub struct WindowParams {
    /// A new queue pair's window, bytes. Default: the BDP cap × the MTU (flows start at line
    /// rate, as the IRN paper's).
    pub init_window_bytes: Option<u64>,
    /// Smallest window, bytes. Default: one MTU.
    pub min_window_bytes: Option<u64>,
    /// Largest window, bytes. Default: the initial window (a window beyond IRN's BDP cap sends
    /// nothing more, and only dulls the cuts).
    pub max_window_bytes: Option<u64>,
    /// DCTCP's EWMA gain g. Default 1/16.
    pub g: f64,
}

impl Default for WindowParams {
    fn default() -> Self {
        WindowParams {
            init_window_bytes: None,
            min_window_bytes: None,
            max_window_bytes: None,
            g: WindowConfig::default().g,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(algorithm: WindowAlgorithm) -> WindowCc {
        WindowCc::new(WindowConfig {
            algorithm,
            init_window: 10 * 1024,
            ..WindowConfig::default()
        })
    }

    fn us(n: u64) -> Time {
        Time::ZERO + Dur::from_micros(n)
    }

    #[test]
    fn congestion_avoidance_grows_one_mss_per_window() {
        let mut c = cc(WindowAlgorithm::Aimd);
        // One window of ACKs (10 packets) adds about one MSS.
        for _ in 0..10 {
            c.on_ack(us(0), 1024, Some(Dur::from_micros(20)));
        }
        let w = c.window().expect("window");
        assert!((11 * 1024 - 60..=11 * 1024).contains(&w), "{w}");
    }

    #[test]
    fn losses_of_one_round_trip_halve_once() {
        let mut c = cc(WindowAlgorithm::Aimd);
        c.on_ack(us(0), 1024, Some(Dur::from_micros(20)));
        let w = c.window().expect("window");
        c.on_loss(us(1));
        assert_eq!(c.window(), Some(w / 2));
        c.on_loss(us(10)); // same round trip
        assert_eq!(c.window(), Some(w / 2));
        c.on_loss(us(30)); // the next one
        assert_eq!(c.window(), Some(w / 4));
    }

    /// TCP's slow start from an initial window (RFC 5681 §3.1, RFC 6928): with ssthresh set
    /// high, every acknowledged byte grows the window by a byte — it doubles per window of
    /// ACKs — until the first loss halves it and congestion avoidance takes over.
    #[test]
    fn slow_start_from_an_initial_window_doubles_per_round_trip_until_a_loss() {
        let mut c = WindowCc::new(WindowConfig {
            algorithm: WindowAlgorithm::Aimd,
            init_window: 10 * 1024,
            init_ssthresh: Some(4 << 20),
            ..WindowConfig::default()
        });
        assert_eq!(c.window(), Some(10 * 1024));
        for round in 0..3u64 {
            let w = c.window().expect("window");
            for _ in 0..w / 1024 {
                c.on_ack(us(round * 30), 1024, Some(Dur::from_micros(25)));
            }
            assert_eq!(c.window(), Some(2 * w), "round {round}");
        }
        c.on_loss(us(100));
        assert_eq!((c.window(), c.ssthresh()), (Some(40 * 1024), 40 * 1024));
        c.on_ack(us(101), 1024, None);
        assert!(
            c.window().expect("window") < 41 * 1024,
            "congestion avoidance now"
        );
    }

    #[test]
    fn timeout_restarts_from_one_mss_in_slow_start() {
        let mut c = cc(WindowAlgorithm::Aimd);
        c.on_timeout(us(0));
        assert_eq!(c.window(), Some(1024));
        assert_eq!(c.ssthresh(), 5 * 1024);
        // Slow start: each ACK adds what it acknowledged, up to ssthresh.
        c.on_ack(us(1), 1024, None);
        assert_eq!(c.window(), Some(2048));
        c.on_ack(us(1), 2048, None);
        c.on_ack(us(1), 4096, None);
        assert_eq!(c.window(), Some(5 * 1024), "slow start stops at ssthresh");
        // Two timeouts with no progress between: the second keeps ssthresh (RFC 5681 §7).
        c.on_timeout(us(100));
        c.on_timeout(us(200));
        assert_eq!((c.window(), c.ssthresh()), (Some(1024), 5 * 1024 / 2));
    }

    #[test]
    fn dctcp_cuts_at_the_first_mark_of_a_window_by_alpha_and_updates_alpha_at_its_end() {
        let mut c = cc(WindowAlgorithm::Dctcp);
        let g = 1.0 / 16.0;
        // Echoes only (no growth), to check the arithmetic. First window (10 KB): a quarter
        // of the packets marked, the first one among them: it cuts at once by α = 1.
        c.on_ecn_echo(us(0), 1024, 1024);
        assert_eq!(c.window(), Some(5 * 1024));
        for i in 1..10 {
            let marked = if i % 4 == 0 { 1024 } else { 0 };
            c.on_ecn_echo(us(i), marked, 1024);
        }
        assert_eq!(c.window(), Some(5 * 1024), "one cut per window");
        // At the window's end F = 3/10: α = (1 − g)·1 + g·0.3.
        let alpha = (1.0 - g) + g * 0.3;
        assert!((c.alpha() - alpha).abs() < 1e-12);
        // The next window (5 KB, the window it began with) has no marks: α decays, no cut.
        for i in 0..5 {
            c.on_ecn_echo(us(100 + i), 0, 1024);
        }
        let alpha = (1.0 - g) * alpha;
        assert!((c.alpha() - alpha).abs() < 1e-12);
        assert_eq!(c.window(), Some(5 * 1024));
        // A mark in the window after: cut by the current α.
        c.on_ecn_echo(us(200), 1024, 1024);
        let expect = (5.0 * 1024.0 * (1.0 - alpha / 2.0)) as u64;
        assert_eq!(c.window(), Some(expect));
    }

    #[test]
    fn losses_before_any_rtt_sample_are_one_event_per_initial_rtt() {
        let mut c = cc(WindowAlgorithm::Dctcp);
        for i in 0..10 {
            c.on_loss(us(i)); // ten NACKs within 10 µs of each other, no sample yet
        }
        assert_eq!(c.window(), Some(5 * 1024));
        c.on_loss(us(30)); // beyond the initial 25 µs round trip
        assert_eq!(c.window(), Some(5 * 1024 / 2));
    }

    #[test]
    fn max_window_below_min_window_keeps_the_minimum_and_does_not_panic() {
        let mut c = WindowCc::new(WindowConfig {
            min_window: 2048,
            max_window: Some(512),
            ..WindowConfig::default()
        });
        c.on_ack(us(0), 1024, None);
        c.on_loss(us(1));
        assert_eq!(c.window(), Some(2048));
    }

    #[test]
    fn aimd_halves_on_an_echo() {
        let mut c = cc(WindowAlgorithm::Aimd);
        c.on_ecn_echo(us(0), 0, 1024);
        assert_eq!(c.window(), Some(10 * 1024));
        c.on_ecn_echo(us(1), 1024, 1024);
        assert_eq!(c.window(), Some(5 * 1024));
    }

    #[test]
    fn window_never_below_the_minimum() {
        let mut c = cc(WindowAlgorithm::Aimd);
        for i in 0..100 {
            c.on_loss(us(i));
        }
        assert_eq!(c.window(), Some(1024));
    }
}
