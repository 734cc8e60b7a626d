//! An experiment's runs over seeds: every run that differs from others only by its seed
//! (`IRN load=0.5 seed=1`, `… seed=2`, …) is one [`SeedGroup`], with the mean, least and
//! greatest value over its seeds of every number its summaries hold, and of its ratios to its
//! baseline, each ratio taken within one seed (a run against the baseline run of its own seed
//! and scenario) before the seeds are pooled.
//!
//! This is what a table or a figure over seeds reports: the mean, and the range as the spread
//! (with three to five seeds, a range says more than a standard deviation would). The numbers
//! are found generically — every numeric field (and flag, as 0 or 1) of a [`RunSummary`], and
//! of the objects inside it (`avg_slowdown`, `incast.avg_rct_us`, `safety.counts.nic_watchdog`…), by its JSON
//! key — so that a field added to the summary is aggregated without a change here.

use std::collections::BTreeMap;

use irn_sim::metrics::{FlowStats, RunSummary};

use crate::plot::baseline_of;

/// Mean, least and greatest of a quantity over seeds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    /// The arithmetic mean over seeds.
    pub mean: f64,
    /// The least value.
    pub min: f64,
    /// The greatest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Spread { mean, min, max })
    }

    /// `mean (min–max)` with `digits` decimals, or the mean alone when all seeds agree.
    pub fn show(&self, digits: usize) -> String {
        let (m, a, b) = (
            format!("{:.*}", digits, self.mean),
            format!("{:.*}", digits, self.min),
            format!("{:.*}", digits, self.max),
        );
        if a == b {
            m
        } else {
            format!("{m} ({a}–{b})")
        }
    }
}

/// The decimals a figure or table writes `x` with: two, one from 10, none from 100 (three
/// significant digits or so, whatever the size).
pub fn decimals(x: f64) -> usize {
    match x.abs() {
        a if a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        _ => 2,
    }
}

/// The runs of one configuration over its seeds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeedGroup {
    /// The runs' name without the seed (`IRN load=0.5`).
    pub name: String,
    /// The scenario without the seed (`load=0.5`; empty for an experiment of one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scenario: String,
    /// The seeds, in the experiment's order.
    pub seeds: Vec<u64>,
    /// Every numeric field of the runs' summaries, by its dotted JSON key
    /// (`avg_slowdown`, `p99_fct_us`, `incast.avg_rct_us`).
    pub metrics: BTreeMap<String, Spread>,
    /// The baseline the ratios divide by (its name without the seed); absent when the group's
    /// runs are their own baseline or have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Run ÷ baseline within each seed, pooled: `avg_slowdown`, `avg_fct_us`, `p99_fct_us`
    /// (below 1, the run is better than its baseline); and where either left flows
    /// unfinished in some seed, `with_unfinished.avg_slowdown` … over those seeds, with the
    /// unfinished flows counted ([`irn_sim::metrics::FlowStats::with_unfinished`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ratios: BTreeMap<String, Spread>,
}

impl SeedGroup {
    /// A metric's spread by its dotted key, if the runs have it.
    pub fn metric(&self, key: &str) -> Option<Spread> {
        self.metrics.get(key).copied()
    }
}

/// The `seed=N` token of a run's scenario, if it has one.
pub fn seed_token(r: &RunSummary) -> Option<&str> {
    r.scenario.split(' ').find(|t| t.starts_with("seed="))
}

/// `text` without its `seed=N` token: a run's name or scenario as its seed group knows it.
pub fn without_seed(text: &str) -> String {
    text.split(' ')
        .filter(|t| !t.starts_with("seed="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `runs` hold some configuration under more than one seed.
pub fn has_seeds<'a>(runs: impl IntoIterator<Item = &'a RunSummary>) -> bool {
    groups_of(runs).iter().any(|g| g.len() > 1)
}

/// The runs grouped by name without seed, groups in order of first appearance.
pub fn groups_of<'a>(runs: impl IntoIterator<Item = &'a RunSummary>) -> Vec<Vec<&'a RunSummary>> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: Vec<Vec<&RunSummary>> = Vec::new();
    for r in runs {
        let key = without_seed(&r.name);
        match order.iter().position(|k| *k == key) {
            Some(i) => groups[i].push(r),
            None => {
                order.push(key);
                groups.push(vec![r]);
            }
        }
    }
    groups
}

/// Every numeric field of `v`, by dotted key, into `out`, a flag as 0 or 1 (arrays are
/// per-run detail — size buckets, tails, timelines — and are left out; so are the seed and
/// wall-clock figures).
fn numbers(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, f64>) {
    let serde_json::Value::Object(map) = v else {
        return;
    };
    for (k, x) in map {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match x {
            serde_json::Value::Number(n) if !matches!(key.as_str(), "seed" | "wall_s") => {
                if let Some(f) = n.as_f64() {
                    out.insert(key, f);
                }
            }
            // A flag (`deadlocked`) counts as 0 or 1: its mean is the share of seeds.
            serde_json::Value::Bool(b) => {
                out.insert(key, f64::from(u8::from(*b)));
            }
            serde_json::Value::Object(_) => numbers(&key, x, out),
            _ => {}
        }
    }
}

/// The seed groups of `runs`, with the ratios to each run's baseline ([`baseline_of`] with
/// `baseline`, the `--baseline` name).
pub fn over_seeds(runs: &[RunSummary], baseline: Option<&str>) -> Vec<SeedGroup> {
    groups_of(runs)
        .into_iter()
        .map(|g| {
            let mut per_key: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for r in &g {
                let mut nums = BTreeMap::new();
                if let Ok(v) = serde_json::to_value(r) {
                    numbers("", &v, &mut nums);
                }
                for (k, x) in nums {
                    per_key.entry(k).or_default().push(x);
                }
            }
            // A key some seed lacks (an optional report) is pooled over the seeds that have it.
            let metrics = per_key
                .iter()
                .filter_map(|(k, v)| Spread::of(v).map(|s| (k.clone(), s)))
                .collect();
            let mut ratios: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            let mut base_name = None;
            for r in &g {
                let Some(b) = baseline_of(runs, r, baseline) else {
                    continue;
                };
                if std::ptr::eq(b, *r) {
                    continue;
                }
                base_name.get_or_insert_with(|| without_seed(&b.name));
                let mut pool = |prefix: &str, x: &FlowStats, y: &FlowStats| {
                    let pairs = [
                        ("avg_slowdown", x.avg_slowdown, y.avg_slowdown),
                        ("avg_fct_us", x.avg_fct_us, y.avg_fct_us),
                        ("p99_fct_us", x.p99_fct_us, y.p99_fct_us),
                    ];
                    for (k, x, y) in pairs {
                        if y > 0.0 {
                            ratios
                                .entry(format!("{prefix}{k}"))
                                .or_default()
                                .push(x / y);
                        }
                    }
                };
                pool("", &r.all, &b.all);
                // Where either left flows unfinished, the same ratios with them counted at
                // the time they had run (a lower bound of their FCTs).
                if r.with_unfinished.is_some() || b.with_unfinished.is_some() {
                    pool(
                        "with_unfinished.",
                        r.with_unfinished.as_ref().unwrap_or(&r.all),
                        b.with_unfinished.as_ref().unwrap_or(&b.all),
                    );
                }
            }
            SeedGroup {
                name: without_seed(&g[0].name),
                scenario: without_seed(&g[0].scenario),
                seeds: g.iter().map(|r| r.seed).collect(),
                metrics,
                baseline: base_name,
                ratios: ratios
                    .iter()
                    .filter_map(|(k, v)| Spread::of(v).map(|s| (k.clone(), s)))
                    .collect(),
            }
        })
        .collect()
}
