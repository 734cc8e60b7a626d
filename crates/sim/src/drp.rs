//! # E12: dynamic against traditional RDMA on a point-to-point link (SPEC E12, seed 003 §3)
//!
//! The seed's simulation set-up: two hosts on a full-duplex gigabit link, 128 KB RDMA writes in
//! 1 KB frames, 800 transfers per point, 5 runs averaged; the failed-registration probability
//! (FRP) and the lost-frame probability (LFP) each swept from 0 to 10 %, then both together at
//! 1, 5 and 10 %. Both hosts run the real [`irn_transport::drp::DrpEndpoint`]; this module is
//! only the wire and the upper layers:
//!
//! * **The link**: per direction, one frame at a time at the line rate, each DRP frame inside an
//!   Ethernet frame (14 B header, 4 B FCS, padded to 64 B, plus 8 B preamble and 12 B gap), then
//!   the propagation delay. Every frame (set-up, data, ACK, release, both directions) is lost
//!   independently with probability LFP — the seed's "link frame loss".
//! * **The upper layers**: the initiator posts the next transfer the moment the previous one
//!   completes; the responder's upper layer answers each registration request after
//!   `registration_us` (the seed gives no figure: see `docs/RESULTS.md`), failing with
//!   probability FRP, independently per attempt.
//! * **Transfer time**: from the post to the initiator's completion (which the seed's
//!   "transfer time" is: the release is part of the transfer, §1.1). Each transfer's bytes are
//!   checked at the responder (writes) or the initiator (reads) when it completes.
//!
//! Random numbers come from seeded streams of their own (loss per direction, registration), the
//! same for the traditional and the dynamic run of a point (common random numbers), so the
//! difference between them is the method's and not the draw's.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use irn_transport::drp::{DrpConfig, DrpEndpoint, DrpEvent, DrpMode, DrpStatus, TransferMode};
use irn_transport::rng::Rng;
use irn_transport::{Dur, Time};

use crate::config::us;
use crate::config::ConfigError;

/// An E12 experiment file (`kind = "dynamic-rdma"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrpExperiment {
    /// Experiment name.
    pub name: String,
    /// Always `"dynamic-rdma"`.
    pub kind: String,
    /// Seed of run 0 (run `r` uses streams derived from it and `r`).
    #[serde(default = "one")]
    pub seed: u64,
    /// Runs averaged per point (the seed: 5).
    #[serde(default = "five")]
    pub runs: u32,
    /// Transfers per run (the seed: 800).
    #[serde(default = "eight_hundred")]
    pub transfers: u32,
    /// The link.
    #[serde(default)]
    pub link: DrpLink,
    /// The endpoints and the transfers.
    #[serde(default)]
    pub drp: DrpParams,
    /// What to sweep: one curve each.
    pub series: Vec<DrpSeries>,
}

fn one() -> u64 {
    1
}
fn five() -> u32 {
    5
}
fn eight_hundred() -> u32 {
    800
}

/// The point-to-point link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrpLink {
    /// Line rate, Gb/s (the seed: gigabit Ethernet).
    pub rate_gbps: f64,
    /// One-way propagation delay, ns.
    pub propagation_ns: u64,
}

impl Default for DrpLink {
    fn default() -> Self {
        DrpLink {
            rate_gbps: 1.0,
            propagation_ns: 500,
        }
    }
}

/// Endpoint and transfer parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrpParams {
    /// `"write"` or `"read"`.
    pub op: String,
    /// Bytes per transfer (the seed: 128 KB).
    pub size: u64,
    /// Payload bytes per data frame (the seed: 1 024).
    pub payload: u32,
    /// Window, frames (the seed: 8).
    pub window: u32,
    /// Set-up and release retransmit timer, µs.
    pub setup_timeout_us: f64,
    /// Data retransmit timer, µs.
    pub data_timeout_us: f64,
    /// The responder's upper layer's registration time, µs.
    pub registration_us: f64,
    /// Set-up timer expiries before a dynamic initiator goes indirect (the seed: 2).
    pub indirect_after: u32,
    /// Indirect buffer of the dynamic responder, bytes.
    pub indirect_buffer: usize,
    /// Consecutive expiries after which a transfer fails.
    pub max_retries: u32,
}

impl Default for DrpParams {
    fn default() -> Self {
        DrpParams {
            op: "write".into(),
            size: 128 * 1024,
            payload: 1024,
            window: 8,
            setup_timeout_us: 500.0,
            data_timeout_us: 200.0,
            registration_us: 50.0,
            indirect_after: 2,
            indirect_buffer: 256 * 1024,
            max_retries: 64,
        }
    }
}

/// One curve: a parameter swept over `values`, the others fixed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrpSeries {
    /// Curve name (the table's and the plot's).
    pub name: String,
    /// `"frp"`, `"lfp"`, `"both"` (FRP = LFP) or `"size"` (bytes per transfer).
    pub x: String,
    /// The swept values (probabilities, or bytes for `size`).
    pub values: Vec<f64>,
    /// FRP where it is not swept.
    #[serde(default)]
    pub frp: f64,
    /// LFP where it is not swept.
    #[serde(default)]
    pub lfp: f64,
}

/// One point of a curve: both methods, averaged over the runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrpPoint {
    /// The swept value.
    pub x: f64,
    /// Failed-registration probability.
    pub frp: f64,
    /// Lost-frame probability.
    pub lfp: f64,
    /// Bytes per transfer.
    pub size: u64,
    /// The traditional method.
    pub traditional: MethodResult,
    /// The dynamic method.
    pub dynamic: MethodResult,
    /// Dynamic's mean transfer time relative to traditional's, percent (negative: faster).
    pub change_pct: f64,
}

/// One method at one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodResult {
    /// Mean transfer time over every transfer of every run, µs.
    pub mean_us: f64,
    /// Each run's mean, µs.
    pub run_means_us: Vec<f64>,
    /// 99th-percentile transfer time, µs.
    pub p99_us: f64,
    /// Transfers completed successfully.
    pub completed: u64,
    /// Transfers that failed (retries exceeded) or did not finish.
    pub failed: u64,
    /// Transfers whose bytes arrived wrong (must be 0).
    pub corrupted: u64,
    /// Share of transfers that went indirect.
    pub indirect_share: f64,
    /// Mean set-up requests per transfer.
    pub setup_attempts: f64,
    /// Data frames retransmitted per transfer.
    pub retransmitted: f64,
    /// Retransmit timer expiries per transfer (both ends).
    pub timeouts: f64,
    /// Frames parked in the indirect buffer per transfer.
    pub indirect_frames: f64,
}

/// A curve's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrpSeriesResult {
    /// Curve name.
    pub name: String,
    /// What was swept.
    pub x: String,
    /// The points.
    pub points: Vec<DrpPoint>,
}

/// The whole experiment's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrpReport {
    /// Experiment name.
    pub name: String,
    /// The configuration it ran.
    pub config: DrpExperiment,
    /// One per series.
    pub series: Vec<DrpSeriesResult>,
}

impl DrpExperiment {
    /// Parses an experiment file's text (with `--set` overrides and a `--seed`), checking every
    /// key; errors name the key and `origin`.
    pub fn load(
        text: &str,
        origin: &str,
        sets: &[String],
        seed: Option<u64>,
    ) -> Result<Self, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError::new(origin, e.to_string()))?;
        // A key alone is checked inside the smallest experiment that parses.
        crate::config::apply_sets_checked(&mut table, sets, seed, |text| {
            let mut alone: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
            alone.entry("name").or_insert_with(|| "check".into());
            alone.entry("kind").or_insert_with(|| KIND.into());
            alone
                .entry("series")
                .or_insert_with(|| toml::Value::Array(Vec::new()));
            let text = toml::to_string(&alone).map_err(|e| e.to_string())?;
            toml::from_str::<DrpExperiment>(&text)
                .map(|_| ())
                .map_err(|e| e.message().to_string())
        })?;
        let text = toml::to_string(&table).map_err(|e| ConfigError::new(origin, e.to_string()))?;
        let exp: DrpExperiment =
            toml::from_str(&text).map_err(|e| ConfigError::new(origin, e.message().to_string()))?;
        exp.validate().map_err(|m| ConfigError::new(origin, m))?;
        Ok(exp)
    }

    /// Whether a file's text is an E12 experiment (`kind = "dynamic-rdma"`).
    pub fn is_kind(text: &str) -> bool {
        toml::from_str::<toml::Table>(text)
            .ok()
            .and_then(|t| t.get("kind").and_then(|k| k.as_str()).map(|k| k == KIND))
            .unwrap_or(false)
    }

    /// Refuses values that cannot mean anything, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.kind != KIND {
            return Err(format!("`kind` must be \"{KIND}\""));
        }
        if self.runs == 0 {
            return Err("`runs` must be at least 1".into());
        }
        if self.transfers == 0 {
            return Err("`transfers` must be at least 1".into());
        }
        if !(self.link.rate_gbps > 0.0 && self.link.rate_gbps.is_finite()) {
            return Err("`link.rate_gbps` must be positive".into());
        }
        if self.drp.op != "write" && self.drp.op != "read" {
            return Err(format!(
                "`drp.op` must be \"write\" or \"read\", not \"{}\"",
                self.drp.op
            ));
        }
        if self.drp.size > u64::from(u32::MAX) {
            return Err("`drp.size` exceeds DRP's 32-bit LEN".into());
        }
        for (key, v) in [
            ("drp.setup_timeout_us", self.drp.setup_timeout_us),
            ("drp.data_timeout_us", self.drp.data_timeout_us),
        ] {
            if !(v > 0.0 && v.is_finite()) {
                return Err(format!("`{key}` must be positive"));
            }
        }
        if !(self.drp.registration_us >= 0.0 && self.drp.registration_us.is_finite()) {
            return Err("`drp.registration_us` must be zero or positive".into());
        }
        self.endpoint_config(DrpMode::Dynamic)
            .validate()
            .map_err(|e| format!("`drp.{}` {}", e.field, e.why))?;
        if self.series.is_empty() {
            return Err("`series` is empty: nothing to run".into());
        }
        for (i, s) in self.series.iter().enumerate() {
            let at = format!("series {} ('{}')", i + 1, s.name);
            if !["frp", "lfp", "both", "size"].contains(&s.x.as_str()) {
                return Err(format!(
                    "{at}: `x` must be \"frp\", \"lfp\", \"both\" or \"size\", not \"{}\"",
                    s.x
                ));
            }
            if s.values.is_empty() {
                return Err(format!("{at}: `values` is empty"));
            }
            for &p in [s.frp, s.lfp].iter().chain(if s.x == "size" {
                &[][..]
            } else {
                &s.values[..]
            }) {
                if !(0.0..1.0).contains(&p) {
                    return Err(format!("{at}: probability {p} is not in [0, 1)"));
                }
            }
            if s.x == "size"
                && s.values
                    .iter()
                    .any(|&v| !(v >= 0.0 && v <= f64::from(u32::MAX) && v.fract() == 0.0))
            {
                return Err(format!("{at}: sizes must be whole bytes below 2^32"));
            }
        }
        Ok(())
    }

    fn endpoint_config(&self, mode: DrpMode) -> DrpConfig {
        let mut c = DrpConfig::seed(mode);
        c.window = self.drp.window;
        c.payload = self.drp.payload;
        c.setup_timeout = us(self.drp.setup_timeout_us);
        c.data_timeout = us(self.drp.data_timeout_us);
        c.indirect_after = self.drp.indirect_after;
        c.max_retries = self.drp.max_retries;
        c.indirect_buffer = match mode {
            DrpMode::Traditional => 0,
            DrpMode::Dynamic => self.drp.indirect_buffer,
        };
        c
    }

    /// The points of every series, in order: (series index, x, frp, lfp, size).
    fn points(&self) -> Vec<(usize, f64, f64, f64, u64)> {
        let mut v = Vec::new();
        for (i, s) in self.series.iter().enumerate() {
            for &x in &s.values {
                let (frp, lfp, size) = match s.x.as_str() {
                    "frp" => (x, s.lfp, self.drp.size),
                    "lfp" => (s.frp, x, self.drp.size),
                    "both" => (x, x, self.drp.size),
                    _ => (s.frp, s.lfp, x as u64),
                };
                v.push((i, x, frp, lfp, size));
            }
        }
        v
    }
}

/// The experiment kind this module runs.
pub const KIND: &str = "dynamic-rdma";

/// One run's raw outcome.
#[derive(Debug, Default, Clone)]
struct RunOutcome {
    times_us: Vec<f64>,
    failed: u64,
    corrupted: u64,
    indirect: u64,
    setup_attempts: u64,
    retransmitted: u64,
    timeouts: u64,
    indirect_frames: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A frame reaches host B (`true`) or A.
    Arrive(bool, Vec<u8>),
    /// A's (`true`) or B's transmitter is free again.
    LinkFree(bool),
    /// B's upper layer answers a registration.
    Registered(u32, bool),
}

/// Wire time of a DRP frame of `len` bytes (header and payload) on a link of `rate_gbps`.
fn wire_time(len: usize, rate_gbps: f64) -> Dur {
    let frame = (14 + len + 4).max(64) + 20;
    Dur::from_picos((frame as f64 * 8.0 * 1000.0 / rate_gbps).round() as u64)
}

/// Runs one method at one point for one run.
fn run_one(
    exp: &DrpExperiment,
    mode: DrpMode,
    frp: f64,
    lfp: f64,
    size: u64,
    seed: u64,
) -> RunOutcome {
    let cfg = exp.endpoint_config(mode);
    let mem = usize::try_from(size).unwrap_or(usize::MAX).max(1);
    let mut a = DrpEndpoint::new(cfg.clone(), mem).expect("validated");
    let mut b = DrpEndpoint::new(cfg, mem).expect("validated");
    let read = exp.drp.op == "read";
    let mut loss = [Rng::stream(seed, 1), Rng::stream(seed, 2)];
    let mut reg_rng = Rng::stream(seed, 3);
    let prop = Dur::from_nanos(exp.link.propagation_ns);
    let reg_delay = us(exp.drp.registration_us);
    let mut heap: BinaryHeap<Reverse<(Time, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut link_free = [Time::ZERO; 2]; // [from A, from B]
    let mut wake = [false; 2];
    let mut out = RunOutcome::default();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut now = Time::ZERO;
    let mut done = 0u32;
    let mut posted = 0u32;

    // The source of transfer `i`: every byte differs from transfer i-1's.
    let pattern = |i: u32, j: usize| (i.wrapping_mul(131) as usize + j * 7) as u8;
    let post = |a: &mut DrpEndpoint, b: &mut DrpEndpoint, now: Time, i: u32| {
        let src = if read { b.memory_mut() } else { a.memory_mut() };
        for (j, x) in src[..size as usize].iter_mut().enumerate() {
            *x = pattern(i, j);
        }
        let r = if read {
            a.post_read(now, 0, 0, size)
        } else {
            a.post_write(now, 0, 0, size)
        };
        r.expect("the region fits the memory");
    };
    post(&mut a, &mut b, now, posted);
    posted += 1;

    loop {
        // Frames out while the transmitters are free.
        for from_a in [true, false] {
            let d = usize::from(!from_a);
            let ep = if from_a { &mut a } else { &mut b };
            if link_free[d] <= now {
                // Frames are written into buffers that come back once delivered: no allocation
                // per frame.
                let mut frame = pool.pop().unwrap_or_default();
                if ep.poll_transmit(now, &mut frame) {
                    let t = wire_time(frame.len(), exp.link.rate_gbps);
                    link_free[d] = now + t;
                    if !loss[d].chance(lfp) {
                        seq += 1;
                        heap.push(Reverse((
                            link_free[d] + prop,
                            seq,
                            Ev::Arrive(from_a, frame),
                        )));
                        frame = Vec::new();
                    }
                }
                if frame.capacity() > 0 {
                    pool.push(frame);
                }
            }
            if link_free[d] > now && !wake[d] && ep.may_transmit() {
                wake[d] = true;
                seq += 1;
                heap.push(Reverse((link_free[d], seq, Ev::LinkFree(from_a))));
            }
        }
        // Upper layers.
        while let Some(ev) = b.poll_event() {
            if let DrpEvent::Register { tid, .. } = ev {
                let ok = !reg_rng.chance(frp);
                seq += 1;
                heap.push(Reverse((now + reg_delay, seq, Ev::Registered(tid, ok))));
            }
        }
        let mut next_post = false;
        while let Some(ev) = a.poll_event() {
            let DrpEvent::Complete(c) = ev else { continue };
            out.setup_attempts += u64::from(c.setup_attempts);
            out.retransmitted += c.retransmitted;
            if c.status != DrpStatus::Success {
                out.failed += 1;
            } else {
                out.times_us
                    .push(c.finished.since(c.started).as_picos() as f64 / 1e6);
                if c.mode == TransferMode::Indirect {
                    out.indirect += 1;
                }
                let dst = if read { a.memory() } else { b.memory() };
                if dst[..size as usize]
                    .iter()
                    .enumerate()
                    .any(|(j, &x)| x != pattern(posted - 1, j))
                {
                    out.corrupted += 1;
                }
            }
            done += 1;
            next_post = true;
        }
        if next_post && posted < exp.transfers {
            post(&mut a, &mut b, now, posted);
            posted += 1;
            continue;
        }
        if done == exp.transfers {
            break;
        }
        // The next thing to happen.
        let timer = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let ev_at = heap.peek().map(|Reverse((t, _, _))| *t);
        match (ev_at, timer) {
            (Some(e), t) if t.is_none_or(|t| e <= t) => {
                let Some(Reverse((t, _, ev))) = heap.pop() else {
                    break;
                };
                now = t;
                match ev {
                    Ev::Arrive(to_b, bytes) => {
                        let ep = if to_b { &mut b } else { &mut a };
                        ep.handle_frame(now, &bytes);
                        pool.push(bytes);
                    }
                    Ev::LinkFree(from_a) => wake[usize::from(!from_a)] = false,
                    Ev::Registered(tid, ok) => b.registration_done(now, tid, ok),
                }
            }
            (_, Some(t)) => {
                now = t;
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            _ => break, // nothing left to happen: the run is stuck (counted as unfinished)
        }
    }
    out.failed += u64::from(exp.transfers - done);
    out.timeouts = a.counters().timeouts + b.counters().timeouts;
    out.indirect_frames = b.counters().indirect_frames + a.counters().indirect_frames;
    out
}

fn method(runs: &[RunOutcome]) -> MethodResult {
    let mut all: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.times_us.iter().copied())
        .collect();
    let n = all.len().max(1) as f64;
    let total: u64 = runs
        .iter()
        .map(|r| r.times_us.len() as u64 + r.failed)
        .sum();
    let per =
        |f: fn(&RunOutcome) -> u64| runs.iter().map(f).sum::<u64>() as f64 / (total.max(1) as f64);
    let mean_us = all.iter().sum::<f64>() / n;
    all.sort_by(f64::total_cmp);
    let p99_us = if all.is_empty() {
        0.0
    } else {
        all[((all.len() as f64 * 0.99).ceil() as usize).clamp(1, all.len()) - 1]
    };
    MethodResult {
        mean_us,
        run_means_us: runs
            .iter()
            .map(|r| r.times_us.iter().sum::<f64>() / (r.times_us.len().max(1) as f64))
            .collect(),
        p99_us,
        completed: all.len() as u64,
        failed: runs.iter().map(|r| r.failed).sum(),
        corrupted: runs.iter().map(|r| r.corrupted).sum(),
        indirect_share: runs.iter().map(|r| r.indirect).sum::<u64>() as f64 / n,
        setup_attempts: per(|r| r.setup_attempts),
        retransmitted: per(|r| r.retransmitted),
        timeouts: per(|r| r.timeouts),
        indirect_frames: per(|r| r.indirect_frames),
    }
}

/// Runs every point of every series, both methods, on `threads` threads; `progress` is called
/// with the fraction done. The result does not depend on `threads`.
pub fn run_experiment(
    exp: &DrpExperiment,
    threads: usize,
    progress: &(dyn Fn(f64) + Sync),
) -> DrpReport {
    let points = exp.points();
    // Jobs: (point, mode, run).
    let jobs: Vec<(usize, DrpMode, u32)> = (0..points.len())
        .flat_map(|p| {
            [DrpMode::Traditional, DrpMode::Dynamic]
                .into_iter()
                .flat_map(move |m| (0..exp.runs).map(move |r| (p, m, r)))
        })
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let results = crate::pool::map(&jobs, threads, |_, &(p, mode, run)| {
        let (_, _, frp, lfp, size) = points[p];
        // The same streams for both methods of a point and run.
        let seed = irn_transport::rng::mix(
            exp.seed ^ irn_transport::rng::mix((p as u64) << 32 | u64::from(run)),
        );
        let o = run_one(exp, mode, frp, lfp, size, seed);
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        progress(n as f64 / jobs.len() as f64);
        o
    });
    let mut series: Vec<DrpSeriesResult> = exp
        .series
        .iter()
        .map(|s| DrpSeriesResult {
            name: s.name.clone(),
            x: s.x.clone(),
            points: Vec::new(),
        })
        .collect();
    let runs = exp.runs as usize;
    for (p, &(si, x, frp, lfp, size)) in points.iter().enumerate() {
        let base = p * 2 * runs;
        let traditional = method(&results[base..base + runs]);
        let dynamic = method(&results[base + runs..base + 2 * runs]);
        let change_pct = if traditional.mean_us > 0.0 {
            (dynamic.mean_us / traditional.mean_us - 1.0) * 100.0
        } else {
            0.0
        };
        series[si].points.push(DrpPoint {
            x,
            frp,
            lfp,
            size,
            traditional,
            dynamic,
            change_pct,
        });
    }
    DrpReport {
        name: exp.name.clone(),
        config: exp.clone(),
        series,
    }
}

/// Whether every transfer of every point completed with its bytes intact.
pub fn all_intact(r: &DrpReport) -> bool {
    r.series.iter().flat_map(|s| &s.points).all(|p| {
        [&p.traditional, &p.dynamic]
            .iter()
            .all(|m| m.failed == 0 && m.corrupted == 0)
    })
}
