//! DCQCN's reaction point (Zhu et al., *Congestion Control for Large-Scale RDMA Deployments*,
//! SIGCOMM 2015; SPEC T9; `seeds/004`): rate-based control driven by CNPs.
//!
//! The notification point (the receiving queue pair) sends at most one CNP per 50 µs when
//! CE-marked packets arrive (`QueuePair`'s `cnp_interval`); the switches mark with RED
//! (Kmin 5 KB, Kmax 200 KB, Pmax 1 %). Here, at the sender:
//!
//! * **on a CNP**: target rate `RT = RC`, current rate `RC = RC · (1 − α/2)`, then
//!   `α = (1 − g)·α + g`; the increase stages restart;
//! * **α decays** by `(1 − g)` every `K` = 55 µs without a CNP;
//! * **rate increase events** come from a timer (`T` = 55 µs) and a byte counter (`B` = 10 MB
//!   sent). With `t` and `b` the timer's and byte counter's stage counts since the last CNP
//!   (this event included): while `max(t, b) ≤ F` (= 5) it is *fast recovery*
//!   (`RC = (RT + RC)/2`, back towards the rate before the cut); once one of them passed `F`,
//!   *additive increase* (`RT += R_AI`, then the same averaging); once both did, *hyper
//!   increase* (`RT += (min(t, b) − F) · R_HAI`).
//!
//! Flows start at line rate, as the IRN paper's runs (§4.1: "the flow starts at line-rate for
//! all cases"), and meet their first CNP with `α = 1`: α's timer starts with the first CNP, as
//! a NIC creates a flow's rate limiter only then. The rate never falls below `min_rate_bps`.
//! Timers get a seeded jitter (`seeds/004`: without it, senders cut by the same congestion
//! event ramp up in lock step and burst together).
//!
//! For speed, α's decay is applied lazily (the number of whole periods since its last update,
//! when a CNP needs it: the same value), and a sender back at line rate runs no timer at all.
//! To get there, the current rate snaps to line rate (and the target with it) once an increase
//! brings it within one `R_AI` of it: a departure from the paper's asymptotic approach, by at
//! most `R_AI` (40 Mb/s of 40 Gb/s). A simulator with thousands of queue pairs at line rate
//! therefore pays nothing for DCQCN until a CNP arrives.
//!
//! [`DcqcnModel::Mlx`] is the reaction point the ns-3 RDMA simulators model as Mellanox's
//! (HPCC's `rdma-hw.cc`, which ConWeave's ns-3 keeps; experiments/crossval): a CNP only sets
//! a bit, and the rate is cut at most once per `decrease_interval` (4 µs) when the bit is
//! set — the first CNP sets α = 1 and cuts nothing until that check; α is updated once per
//! `K` from whether a CNP came in the period (`(1 − g)·α + g` if one did, `(1 − g)·α` if
//! not); a cut sets the target to the current rate only if an increase event came since the
//! last cut; increases come from the timer alone (no byte counter): `F` events of fast
//! recovery, one of additive increase, then hyper increase by a constant `R_HAI` each. An
//! increase event due at a check's instant comes first, as ns-3 orders them; ns-3's checks
//! fall 1 ns after the grid's points, which is not modelled. `byte_counter` and
//! `initial_alpha` do not apply to this model.

use crate::rng::Rng;
use crate::time::{Dur, Time};

use super::{Controller, ControllerFactory};

/// DCQCN's parameters. [`Default`] is the DCQCN paper's set (g, K, T, B, F, R_AI, its RED
/// marking at the switches), which the IRN paper uses unchanged (§4.1: "the same congestion
/// control parameters as specified in" the DCQCN paper); R_HAI, the minimum rate and the
/// jitter are ours, as documented on each field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnConfig {
    /// α's EWMA gain `g`. Default 1/256.
    pub g: f64,
    /// α's update period `K` without CNPs. Default 55 µs.
    pub alpha_period: Dur,
    /// The rate-increase timer `T`. Default 55 µs.
    pub increase_period: Dur,
    /// The byte counter `B`: one increase event per this many bytes sent. Default 10 MB.
    /// 0: none — the timer's stages alone decide fast recovery, additive and hyper increase,
    /// as Mellanox's NICs do in the ns-3 RDMA simulators (HPCC's and ConWeave's `mlx` DCQCN);
    /// with the paper's 10 MB a flow rarely sends enough for hyper increase.
    pub byte_counter: u64,
    /// Fast-recovery stages `F`: the first `F` increase events after a cut only average the
    /// current rate with the target. Default 5.
    pub fast_recovery_steps: u32,
    /// Additive increase step `R_AI` in bits per second. Default 40 Mb/s.
    pub ai_bps: u64,
    /// Hyper increase step `R_HAI` in bits per second. Default 400 Mb/s (10 × `R_AI`, QCN's
    /// ratio).
    pub hai_bps: u64,
    /// The lowest rate a cut can reach, in bits per second. Default 100 Mb/s.
    pub min_rate_bps: u64,
    /// α of a new queue pair. Default 1.
    pub initial_alpha: f64,
    /// Each timer period is drawn uniformly within ± this fraction of its nominal value.
    /// Default 0.1 (55 µs ± 5.5 µs).
    pub timer_jitter: f64,
    /// Which reaction point: the DCQCN paper's (default) or the ns-3 simulators' Mellanox
    /// model ([`DcqcnModel::Mlx`]).
    pub model: DcqcnModel,
    /// [`DcqcnModel::Mlx`]: how often the rate may be cut, at most. Default 4 µs (ns-3's
    /// `RateDecreaseInterval`).
    pub decrease_interval: Dur,
}

/// Which DCQCN reaction point ([`DcqcnConfig::model`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum DcqcnModel {
    /// The DCQCN paper's (Zhu et al. §3.2, Figure 7): a cut per CNP, a byte counter beside
    /// the timer, hyper increase by `(min(t, b) − F) · R_HAI`.
    #[default]
    Paper,
    /// The Mellanox model of the ns-3 RDMA simulators (HPCC's and ConWeave's `mlx`): cuts at
    /// most once per decrease interval, α updated per period from a CNP-arrived bit, the
    /// timer alone, one additive step after `F` fast-recovery steps, then a constant
    /// `R_HAI` per step.
    Mlx,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            g: 1.0 / 256.0,
            alpha_period: Dur::from_micros(55),
            increase_period: Dur::from_micros(55),
            byte_counter: 10_000_000,
            fast_recovery_steps: 5,
            ai_bps: 40_000_000,
            hai_bps: 400_000_000,
            min_rate_bps: 100_000_000,
            initial_alpha: 1.0,
            timer_jitter: 0.1,
            model: DcqcnModel::Paper,
            decrease_interval: Dur::from_micros(4),
        }
    }
}

/// `[cc.dcqcn]`: DCQCN (Zhu et al., SIGCOMM 2015).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields, default)
)]
pub struct DcqcnParams {
    /// α's EWMA gain g. Default 1/256.
    pub g: f64,
    /// α's decay period K, µs. Default 55.
    pub alpha_period_us: f64,
    /// Rate-increase timer T, µs. Default 55.
    pub increase_period_us: f64,
    /// Byte counter B: one rate-increase event per this many bytes sent. Default 10 MB. 0: no
    /// byte counter, the timer's stages alone (the ns-3 RDMA simulators' DCQCN).
    pub byte_counter_bytes: u64,
    /// Fast-recovery events F after a cut. Default 5.
    pub fast_recovery_steps: u32,
    /// Additive increase R_AI, Mb/s. Default 40.
    pub ai_mbps: f64,
    /// Hyper increase R_HAI, Mb/s. Default 400.
    pub hai_mbps: f64,
    /// Lowest rate, Mb/s. Default 100.
    pub min_rate_mbps: f64,
    /// α of a new queue pair. Default 1.
    pub initial_alpha: f64,
    /// Timer periods drawn within ± this fraction. Default 0.1.
    pub timer_jitter: f64,
    /// The notification point sends at most one CNP per this interval, µs. Default 50.
    pub cnp_interval_us: f64,
    /// The reaction point: `paper` (default) or `mlx`, the ns-3 simulators' Mellanox model.
    pub model: DcqcnModel,
    /// `mlx`: the rate is cut at most once per this interval, µs. Default 4.
    pub decrease_interval_us: f64,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        let d = DcqcnConfig::default();
        DcqcnParams {
            g: d.g,
            alpha_period_us: d.alpha_period.as_micros_f64(),
            increase_period_us: d.increase_period.as_micros_f64(),
            byte_counter_bytes: d.byte_counter,
            fast_recovery_steps: d.fast_recovery_steps,
            ai_mbps: d.ai_bps as f64 / 1e6,
            hai_mbps: d.hai_bps as f64 / 1e6,
            min_rate_mbps: d.min_rate_bps as f64 / 1e6,
            initial_alpha: d.initial_alpha,
            timer_jitter: d.timer_jitter,
            cnp_interval_us: crate::QpConfig::default()
                .cnp_interval
                .map_or(50.0, Dur::as_micros_f64),
            model: d.model,
            decrease_interval_us: d.decrease_interval.as_micros_f64(),
        }
    }
}

impl DcqcnParams {
    /// The controller's parameters, in its own units.
    pub fn config(&self) -> DcqcnConfig {
        DcqcnConfig {
            g: self.g,
            alpha_period: Dur::from_micros_f64(self.alpha_period_us),
            increase_period: Dur::from_micros_f64(self.increase_period_us),
            byte_counter: self.byte_counter_bytes,
            fast_recovery_steps: self.fast_recovery_steps,
            ai_bps: super::mbps(self.ai_mbps),
            hai_bps: super::mbps(self.hai_mbps),
            min_rate_bps: super::mbps(self.min_rate_mbps),
            initial_alpha: self.initial_alpha,
            timer_jitter: self.timer_jitter,
            model: self.model,
            decrease_interval: Dur::from_micros_f64(self.decrease_interval_us),
        }
    }

    /// The notification point's CNP interval (`QpConfig::cnp_interval`).
    pub fn cnp_interval(&self) -> Dur {
        Dur::from_micros_f64(self.cnp_interval_us)
    }
}

/// One queue pair's DCQCN reaction point.
#[derive(Debug, Clone)]
pub struct Dcqcn {
    cfg: DcqcnConfig,
    line: f64,
    /// Current rate `RC` (bits per second).
    rc: f64,
    /// Target rate `RT`.
    rt: f64,
    alpha: f64,
    /// When α was last updated (decays are counted in whole periods from here); `None` until
    /// the first CNP.
    alpha_at: Option<Time>,
    /// The increase timer's next expiry; `None` at line rate.
    next_increase: Option<Time>,
    /// Timer stages since the last CNP.
    t_stage: u32,
    /// Byte-counter stages since the last CNP.
    b_stage: u32,
    /// Bytes sent towards the next byte-counter stage.
    bytes: u64,
    /// [`DcqcnModel::Mlx`]: a CNP came since the last cut check, and since the last α
    /// update; `None` until the first CNP, then when the cut checks' grid started.
    mlx: Option<MlxState>,
    rng: Rng,
}

/// The Mellanox model's state between events ([`DcqcnModel::Mlx`]).
#[derive(Debug, Clone, Copy)]
struct MlxState {
    /// The first CNP: α's periods and the cut checks run on grids from here.
    start: Time,
    /// The next cut check, when a CNP came since the last one (checks that would find none
    /// are not run).
    check_at: Option<Time>,
    /// A CNP came in α's current period.
    cnp_in_period: bool,
}

impl Dcqcn {
    /// A reaction point at line rate, created at `now`; `seed` drives the timer jitter.
    pub fn new(cfg: DcqcnConfig, _now: Time, line_rate_bps: u64, seed: u64) -> Dcqcn {
        let line = line_rate_bps.max(1) as f64;
        Dcqcn {
            cfg,
            line,
            rc: line,
            rt: line,
            alpha: cfg.initial_alpha,
            alpha_at: None,
            next_increase: None,
            t_stage: 0,
            b_stage: 0,
            bytes: 0,
            mlx: None,
            rng: Rng::new(seed),
        }
    }

    /// α now (with the decays due since its last update; under [`DcqcnModel::Mlx`], the
    /// first period due also counts the CNPs that came in it).
    pub fn alpha(&self, now: Time) -> f64 {
        let periods = self.alpha_periods(now);
        if periods == 0 {
            return self.alpha;
        }
        let g = self.cfg.g;
        let (first, rest) = match self.mlx {
            Some(m) if m.cnp_in_period => ((1.0 - g) * self.alpha + g, periods - 1),
            _ => (self.alpha, periods),
        };
        first * (1.0 - g).powi(rest.min(i32::MAX as u64) as i32)
    }

    /// [`DcqcnModel::Mlx`]: brings α up to `now`'s period (the updates due since the last).
    fn mlx_advance_alpha(&mut self, now: Time) {
        let periods = self.alpha_periods(now);
        if periods > 0 {
            self.alpha = self.alpha(now);
            let k = self.cfg.alpha_period.as_picos().max(1);
            if let Some(at) = self.alpha_at.as_mut() {
                *at += Dur::from_picos(periods * k);
            }
            if let Some(m) = self.mlx.as_mut() {
                m.cnp_in_period = false;
            }
        }
    }

    /// [`DcqcnModel::Mlx`]: the first cut check after `now`, on the decrease interval's grid
    /// from the first CNP at `start`.
    fn mlx_check_after(&self, start: Time, now: Time) -> Time {
        let d = self.cfg.decrease_interval.as_picos().max(1);
        let n = now.since(start).as_picos() / d + 1;
        start + Dur::from_picos(n * d)
    }

    /// [`DcqcnModel::Mlx`]: the cut a check makes when a CNP came since the last one.
    fn mlx_cut(&mut self, now: Time) {
        self.mlx_advance_alpha(now);
        if self.t_stage > 0 {
            self.rt = self.rc;
        }
        let floor = (self.cfg.min_rate_bps.max(1) as f64).min(self.line);
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(floor);
        self.t_stage = 0;
        if let Some(m) = self.mlx.as_mut() {
            m.check_at = None;
        }
        self.next_increase = Some(now + self.jittered(self.cfg.increase_period));
    }

    /// [`DcqcnModel::Mlx`]: the cut checks and increase events due by `now`, in time order.
    fn mlx_on_timer(&mut self, now: Time) {
        loop {
            let check = self.mlx.and_then(|m| m.check_at).filter(|&t| t <= now);
            let inc = self.next_increase.filter(|&t| t <= now);
            match (check, inc) {
                // At the same instant the increase goes first: ns-3 scheduled its timer event
                // a period earlier than the check.
                (Some(c), i) if i.is_none_or(|i| c < i) => self.mlx_cut(c),
                (_, Some(t)) => {
                    self.increase();
                    self.next_increase = if self.at_line_rate() {
                        None
                    } else {
                        Some(t + self.jittered(self.cfg.increase_period))
                    };
                }
                (_, None) => return,
            }
        }
    }

    /// The target rate `RT` in bits per second.
    pub fn target_bps(&self) -> u64 {
        self.rt as u64
    }

    /// Whole α periods since the last update (none before the first CNP).
    fn alpha_periods(&self, now: Time) -> u64 {
        let k = self.cfg.alpha_period.as_picos().max(1);
        self.alpha_at.map_or(0, |at| now.since(at).as_picos() / k)
    }

    fn jittered(&mut self, d: Dur) -> Dur {
        let j = self.cfg.timer_jitter.clamp(0.0, 1.0);
        if j == 0.0 {
            return d;
        }
        let f = 1.0 + j * (2.0 * self.rng.unit() - 1.0);
        Dur::from_picos((d.as_picos() as f64 * f) as u64)
    }

    /// One rate-increase event: the target rises by the model's step (none in fast recovery,
    /// towards the rate before the cut), the current rate halves its distance to it. The
    /// paper's model counts the event's stage before (the timer's or the byte counter's);
    /// the Mellanox model reads its timer stage, then counts it — `F` events of fast
    /// recovery, one additive step, then a constant hyper step each.
    fn increase(&mut self) {
        let f = self.cfg.fast_recovery_steps;
        let (ai, hai) = (self.cfg.ai_bps as f64, self.cfg.hai_bps as f64);
        let step = match self.cfg.model {
            DcqcnModel::Paper => {
                let (lo, hi) = if self.cfg.byte_counter == 0 {
                    (self.t_stage, self.t_stage)
                } else {
                    (
                        self.t_stage.min(self.b_stage),
                        self.t_stage.max(self.b_stage),
                    )
                };
                if hi <= f {
                    0.0
                } else if lo > f {
                    f64::from(lo - f) * hai
                } else {
                    ai
                }
            }
            DcqcnModel::Mlx => {
                let stage = self.t_stage;
                self.t_stage = stage.saturating_add(1);
                match stage.cmp(&f) {
                    std::cmp::Ordering::Less => 0.0,
                    std::cmp::Ordering::Equal => ai,
                    std::cmp::Ordering::Greater => hai,
                }
            }
        };
        self.rt = (self.rt + step).min(self.line);
        self.rc = ((self.rt + self.rc) / 2.0).min(self.line);
        if self.line - self.rc < self.cfg.ai_bps.max(1) as f64 {
            self.rc = self.line;
            self.rt = self.line;
        }
    }

    fn at_line_rate(&self) -> bool {
        self.rc >= self.line
    }
}

impl Controller for Dcqcn {
    fn name(&self) -> &'static str {
        "dcqcn"
    }

    fn on_send(&mut self, _now: Time, bytes: u64) {
        if self.at_line_rate() || self.cfg.byte_counter == 0 || self.cfg.model == DcqcnModel::Mlx {
            return;
        }
        self.bytes += bytes;
        let b = self.cfg.byte_counter;
        while self.bytes >= b && !self.at_line_rate() {
            self.bytes -= b;
            self.b_stage = self.b_stage.saturating_add(1);
            self.increase();
        }
        if self.at_line_rate() {
            self.next_increase = None;
        }
    }

    fn on_cnp(&mut self, now: Time) {
        if self.cfg.model == DcqcnModel::Mlx {
            match self.mlx {
                None => {
                    // α starts at 1 with its periods; the first check, one interval on, cuts.
                    self.alpha = 1.0;
                    self.alpha_at = Some(now);
                    self.mlx = Some(MlxState {
                        start: now,
                        check_at: Some(now + self.cfg.decrease_interval.max(Dur::from_picos(1))),
                        cnp_in_period: false,
                    });
                }
                Some(m) => {
                    let check = m.check_at.unwrap_or(self.mlx_check_after(m.start, now));
                    self.mlx_advance_alpha(now);
                    if let Some(m) = self.mlx.as_mut() {
                        m.check_at = Some(check);
                        m.cnp_in_period = true;
                    }
                }
            }
            return;
        }
        let alpha = self.alpha(now);
        self.rt = self.rc;
        let floor = (self.cfg.min_rate_bps.max(1) as f64).min(self.line);
        self.rc = (self.rc * (1.0 - alpha / 2.0)).max(floor);
        self.alpha = (1.0 - self.cfg.g) * alpha + self.cfg.g;
        self.alpha_at = Some(now);
        self.t_stage = 0;
        self.b_stage = 0;
        self.bytes = 0;
        self.next_increase = Some(now + self.jittered(self.cfg.increase_period));
    }

    /// A loss backs off as a CNP does: the paper's reaction point cuts its rate by α/2 and
    /// starts its recovery anew; the Mellanox model's cuts at its next check.
    fn back_off(&mut self, now: Time) {
        self.on_cnp(now);
    }

    fn next_timer(&self) -> Option<Time> {
        match (self.mlx.and_then(|m| m.check_at), self.next_increase) {
            (Some(c), Some(i)) => Some(c.min(i)),
            (c, i) => c.or(i),
        }
    }

    fn on_timer(&mut self, now: Time) {
        if self.cfg.model == DcqcnModel::Mlx {
            self.mlx_on_timer(now);
            return;
        }
        while let Some(t) = self.next_increase.filter(|&t| t <= now) {
            self.t_stage = self.t_stage.saturating_add(1);
            self.increase();
            self.next_increase = if self.at_line_rate() {
                None
            } else {
                Some(t + self.jittered(self.cfg.increase_period))
            };
        }
    }

    fn rate_bps(&self) -> Option<u64> {
        (!self.at_line_rate()).then_some(self.rc as u64)
    }

    fn window(&self) -> Option<u64> {
        None
    }
}

/// Makes a [`Dcqcn`] per queue pair.
#[derive(Debug, Clone, Copy, Default)]
pub struct DcqcnFactory {
    /// Every queue pair's parameters.
    pub config: DcqcnConfig,
    /// Mixed with each queue pair's own seed, so that a run's seed changes the jitter.
    pub seed: u64,
}

impl ControllerFactory for DcqcnFactory {
    fn build(&self, now: Time, line_rate_bps: u64, seed: u64) -> Box<dyn Controller> {
        let seed = self.seed.rotate_left(32) ^ seed;
        Box::new(Dcqcn::new(self.config, now, line_rate_bps, seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_table_defaults_to_the_papers_set_and_converts_its_units() {
        let p = DcqcnParams::default();
        assert_eq!(p.config(), DcqcnConfig::default());
        assert_eq!(p.cnp_interval(), Dur::from_micros(50));
        let q = DcqcnParams {
            alpha_period_us: 27.5,
            ai_mbps: 0.5,
            ..p
        };
        assert_eq!(q.config().alpha_period, Dur::from_nanos(27_500));
        assert_eq!(q.config().ai_bps, 500_000);
    }

    const LINE: u64 = 40_000_000_000;

    fn exact() -> DcqcnConfig {
        DcqcnConfig {
            timer_jitter: 0.0,
            ..DcqcnConfig::default()
        }
    }

    fn us(n: u64) -> Time {
        Time::ZERO + Dur::from_micros(n)
    }

    #[test]
    fn starts_at_line_rate_without_timers() {
        let c = Dcqcn::new(exact(), Time::ZERO, LINE, 1);
        assert_eq!(c.rate_bps(), None);
        assert_eq!(c.next_timer(), None);
    }

    #[test]
    fn first_cnp_halves_the_rate_and_raises_alpha() {
        let mut c = Dcqcn::new(exact(), Time::ZERO, LINE, 1);
        c.on_cnp(us(1));
        // α = 1: RC = RC × (1 − 1/2); α stays 1 ((1 − g)·1 + g).
        assert_eq!(c.rate_bps(), Some(LINE / 2));
        assert_eq!(c.target_bps(), LINE);
        assert!((c.alpha(us(1)) - 1.0).abs() < 1e-12);
        assert_eq!(c.next_timer(), Some(us(56)));
    }

    #[test]
    fn alpha_decays_per_period_without_cnps_and_sets_the_next_cut() {
        let g: f64 = 1.0 / 256.0;
        let mut c = Dcqcn::new(exact(), Time::ZERO, LINE, 1);
        c.on_cnp(Time::ZERO);
        // 10 whole periods (550 µs) later, α = (1 − g)^10; 54 µs more is not a period.
        let a = c.alpha(us(604));
        assert!((a - (1.0 - g).powi(10)).abs() < 1e-12, "{a}");
        let before = c.rate_bps().unwrap_or(LINE) as f64;
        c.on_cnp(us(604));
        let after = c.rate_bps().expect("cut") as f64;
        assert!((after - before * (1.0 - a / 2.0)).abs() < 1.0);
        assert!((c.alpha(us(604)) - ((1.0 - g) * a + g)).abs() < 1e-12);
    }

    #[test]
    fn fast_recovery_halves_the_gap_then_additive_increase_then_back_to_line_rate() {
        let cfg = exact();
        let mut c = Dcqcn::new(cfg, Time::ZERO, LINE, 1);
        c.on_cnp(Time::ZERO);
        let half = (LINE / 2) as f64;
        // Fast recovery: F timer events, each halving the distance to RT (= line rate).
        for i in 1..=5u64 {
            c.on_timer(us(55 * i));
            let expect = LINE as f64 - half / f64::powi(2.0, i as i32);
            assert!((c.rate_bps().expect("below line") as f64 - expect).abs() < 2.0);
        }
        // The sixth stage passes F: additive increase, RT stays capped at line rate.
        c.on_timer(us(330));
        assert_eq!(c.target_bps(), LINE);
        // It converges and stops its timer once within one R_AI of line rate.
        let mut t = 330;
        while c.rate_bps().is_some() {
            t += 55;
            assert!(t < 55 * 100, "never got back to line rate");
            c.on_timer(us(t));
        }
        assert_eq!(c.next_timer(), None);
    }

    #[test]
    fn additive_then_hyper_increase_raise_the_target() {
        let cfg = DcqcnConfig {
            byte_counter: 1_000,
            ..exact()
        };
        let mut c = Dcqcn::new(cfg, Time::ZERO, LINE, 1);
        // Two cuts: RT = LINE/2 after the second.
        c.on_cnp(Time::ZERO);
        c.on_cnp(Time::ZERO);
        let rt0 = c.target_bps();
        assert_eq!(rt0, LINE / 2);
        // Bytes alone: five byte stages of fast recovery, RT unchanged.
        c.on_send(Time::ZERO, 5_000);
        assert_eq!(c.target_bps(), rt0);
        // One more byte stage with t = 0: additive increase.
        c.on_send(Time::ZERO, 1_000);
        assert_eq!(c.target_bps(), rt0 + cfg.ai_bps);
        // Five timer stages are additive (b = 6 > F); the sixth, with both past F, is hyper:
        // (min(6, 6) − 5) × R_HAI.
        for i in 1..=5 {
            c.on_timer(us(55 * i));
        }
        let rt5 = c.target_bps();
        c.on_timer(us(330));
        assert_eq!(c.target_bps(), rt5 + cfg.hai_bps);
    }

    /// Without a byte counter the timer's stages alone decide: bytes sent raise nothing, five
    /// stages recover fast, the sixth is hyper (both "counters" past F at once).
    #[test]
    fn without_a_byte_counter_the_timer_alone_reaches_hyper_increase() {
        let cfg = DcqcnConfig {
            byte_counter: 0,
            ..exact()
        };
        let mut c = Dcqcn::new(cfg, Time::ZERO, LINE, 1);
        c.on_cnp(Time::ZERO);
        c.on_cnp(Time::ZERO);
        let rt0 = c.target_bps();
        c.on_send(Time::ZERO, 1_000_000_000);
        assert_eq!(c.target_bps(), rt0, "no byte stages");
        for i in 1..=5 {
            c.on_timer(us(55 * i));
        }
        assert_eq!(c.target_bps(), rt0, "five stages of fast recovery");
        c.on_timer(us(330));
        assert_eq!(
            c.target_bps(),
            rt0 + cfg.hai_bps,
            "t = 6 > F: hyper at once"
        );
    }

    #[test]
    fn alpha_is_one_at_the_first_cnp_however_late_it_comes() {
        let mut c = Dcqcn::new(exact(), Time::ZERO, LINE, 1);
        c.on_cnp(us(30_000));
        assert_eq!(c.rate_bps(), Some(LINE / 2));
    }

    #[test]
    fn rate_never_falls_below_the_minimum() {
        let mut c = Dcqcn::new(exact(), Time::ZERO, LINE, 1);
        for _ in 0..100 {
            c.on_cnp(Time::ZERO);
        }
        assert_eq!(c.rate_bps(), Some(100_000_000));
    }

    #[test]
    fn jitter_stays_within_its_bounds_and_is_seeded() {
        let cfg = DcqcnConfig::default();
        let mut a = Dcqcn::new(cfg, Time::ZERO, LINE, 7);
        let mut b = Dcqcn::new(cfg, Time::ZERO, LINE, 7);
        for _ in 0..50 {
            let now = Time::ZERO;
            a.on_cnp(now);
            b.on_cnp(now);
            let d = a.next_timer().expect("armed").since(now);
            assert_eq!(Some(now + d), b.next_timer());
            assert!(
                d >= Dur::from_nanos(49_500) && d <= Dur::from_nanos(60_500),
                "{d}"
            );
        }
    }

    fn mlx() -> DcqcnConfig {
        DcqcnConfig {
            model: DcqcnModel::Mlx,
            ..exact()
        }
    }

    #[test]
    fn mlx_cuts_at_the_check_after_cnps_at_most_once_per_interval() {
        let mut c = Dcqcn::new(mlx(), Time::ZERO, LINE, 1);
        // The first CNP cuts nothing yet; the check 4 µs on does, with α = 1.
        c.on_cnp(us(10));
        assert_eq!(c.rate_bps(), None);
        assert_eq!(c.next_timer(), Some(us(14)));
        // More CNPs before the check: still one cut.
        c.on_cnp(us(11));
        c.on_cnp(us(13));
        c.on_timer(us(14));
        assert_eq!(c.rate_bps(), Some(LINE / 2));
        assert_eq!(c.target_bps(), LINE);
        // No CNP since: no check, only the increase timer, 55 µs after the cut.
        assert_eq!(c.next_timer(), Some(us(69)));
        // A CNP at 15 µs waits for the grid's next check, at 18 µs; no increase event came
        // between the cuts, so the target stays (ns-3's ClampTargetRate off).
        c.on_cnp(us(15));
        assert_eq!(c.next_timer(), Some(us(18)));
        c.on_timer(us(18));
        assert_eq!(c.rate_bps(), Some(LINE / 4));
        assert_eq!(c.target_bps(), LINE);
    }

    #[test]
    fn mlx_updates_alpha_per_period_from_whether_a_cnp_came() {
        let g: f64 = 1.0 / 256.0;
        let mut c = Dcqcn::new(mlx(), Time::ZERO, LINE, 1);
        c.on_cnp(us(5));
        // The first CNP sets α = 1 and does not count in its period: one period later (its
        // periods run from the first CNP) α has decayed once.
        assert!((c.alpha(us(59)) - 1.0).abs() < 1e-12);
        assert!((c.alpha(us(60)) - (1.0 - g)).abs() < 1e-12);
        // A CNP right on a period's boundary (115 µs) counts in the period it opens, the
        // third: α rises at its end, and the fourth, without a CNP, decays it.
        c.on_cnp(us(115));
        let a3 = (1.0 - g).powi(3) + g;
        assert!((c.alpha(us(115)) - (1.0 - g) * (1.0 - g)).abs() < 1e-12);
        assert!(
            (c.alpha(us(170)) - a3).abs() < 1e-12,
            "{}",
            c.alpha(us(170))
        );
        assert!((c.alpha(us(225)) - a3 * (1.0 - g)).abs() < 1e-12);
        // Many CNPs in one period count once.
        let mut d = Dcqcn::new(mlx(), Time::ZERO, LINE, 1);
        d.on_cnp(us(5));
        for t in 116..170 {
            d.on_cnp(us(t));
        }
        assert!((d.alpha(us(170)) - a3).abs() < 1e-12);
    }

    #[test]
    fn mlx_recovers_by_the_timer_alone_then_adds_one_step_then_constant_hyper_steps() {
        let cfg = DcqcnConfig {
            byte_counter: 1_000,
            ..mlx()
        };
        let mut c = Dcqcn::new(cfg, Time::ZERO, LINE, 1);
        c.on_cnp(Time::ZERO);
        c.on_timer(us(4));
        // One increase event, then a CNP: the next cut clamps the target to the rate.
        c.on_timer(us(59));
        c.on_cnp(us(60));
        c.on_timer(us(64));
        let rt0 = c.target_bps() as f64;
        assert!(rt0 < LINE as f64 * 0.8, "{rt0}");
        // Bytes move nothing: no byte counter in this model.
        c.on_send(us(64), 1_000_000);
        assert_eq!(c.target_bps() as f64, rt0);
        // F = 5 fast-recovery events leave the target; the sixth adds R_AI, the next ones
        // R_HAI each, not (stage − F) × R_HAI.
        let mut t = 64;
        for _ in 0..5 {
            t += 55;
            c.on_timer(us(t));
            assert_eq!(c.target_bps() as f64, rt0);
        }
        t += 55;
        c.on_timer(us(t));
        assert_eq!(c.target_bps() as f64, rt0 + 40e6);
        for k in 1..=3 {
            t += 55;
            c.on_timer(us(t));
            assert_eq!(c.target_bps() as f64, rt0 + 40e6 + f64::from(k) * 400e6);
        }
    }

    #[test]
    fn mlx_runs_an_increase_due_at_a_checks_instant_before_the_cut() {
        let mut c = Dcqcn::new(mlx(), Time::ZERO, LINE, 1);
        // First CNP at 10 µs: checks at 14, 18, … µs; the cut at 14 starts the timer, whose
        // events fall at 69, 124, 179 and 234 µs — a check's instant (10 + 4 × 56).
        c.on_cnp(us(10));
        c.on_timer(us(14));
        c.on_timer(us(179));
        let (rate, target) = (c.rate_bps().expect("cut") as f64, c.target_bps() as f64);
        c.on_cnp(us(231));
        assert_eq!(c.next_timer(), Some(us(234)));
        c.on_timer(us(234));
        // Fast recovery first (its fourth event), then the cut clamps the target to it.
        let recovered = (rate + target) / 2.0;
        assert!(
            (c.target_bps() as f64 - recovered).abs() < 2.0,
            "{}",
            c.target_bps()
        );
        assert!((c.rate_bps().expect("cut") as f64) < recovered);
        // The cut restarted the timer: its next event is T after the cut.
        assert_eq!(c.next_timer(), Some(us(289)));
    }

    #[test]
    fn the_model_is_a_parameter_and_paper_is_the_default() {
        assert_eq!(DcqcnParams::default().model, DcqcnModel::Paper);
        let p = DcqcnParams {
            model: DcqcnModel::Mlx,
            decrease_interval_us: 8.0,
            ..DcqcnParams::default()
        };
        assert_eq!(p.config().model, DcqcnModel::Mlx);
        assert_eq!(p.config().decrease_interval, Dur::from_micros(8));
    }
}
