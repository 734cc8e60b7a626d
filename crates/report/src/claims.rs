//! Judging the papers' claims ([`crate::evaluation::Claim`]) on an experiment's JSON: each
//! claim becomes rows — one per scenario and metric (a ratio, a value), per point of E12's
//! sweep, or per link rate of E13's table — each with irn's mean and range over the seeds,
//! and a verdict: held when every row's mean does what the claim expects, held in part when
//! some do, not held when none do, not measured when the JSON lacks the runs.
//!
//! Ratios are taken within each seed (a run ÷ the divisor run of the same seed and scenario)
//! and then pooled, as [`crate::seeds::over_seeds`] does. A metric under `with_unfinished.`
//! falls back to the plain one in a run that left no flow unfinished (where the two agree),
//! so such a claim pools every seed — where `over_seeds`' counted ratios pool only the seeds
//! that left flows unfinished. A row the claim asks for and the JSON cannot give (a named
//! scenario or point absent, a divisor missing, a metric no run has) makes the claim not
//! measured, so a typo never narrows a verdict.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::evaluation::{Claim, Expect, Measure};
use crate::seeds::{without_seed, Spread};

/// One measured row of a claim.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The scenario (without seed; empty for an experiment of one), E12's series or E13's
    /// design.
    pub scenario: String,
    /// The metric's key, E12's point (`frp=0.1`) or E13's rate (`40 Gb/s`).
    pub metric: String,
    /// Mean and range over the seeds (or runs).
    pub spread: Spread,
    /// How many seeds (or runs) the spread is over.
    pub seeds: usize,
    /// Whether the mean does what the claim expects.
    pub held: bool,
    /// Whether every seed does.
    pub every_seed: bool,
}

impl Row {
    /// `scenario · metric`, or whichever of them is not empty.
    pub fn label(&self) -> String {
        match (self.scenario.is_empty(), self.metric.is_empty()) {
            (true, _) => self.metric.clone(),
            (false, true) => self.scenario.clone(),
            (false, false) => format!("{} · {}", self.scenario, self.metric),
        }
    }
}

/// What the rows say of the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
pub enum Verdict {
    /// Every row's mean does what the claim expects.
    Held,
    /// Some rows do.
    HeldInPart {
        /// Rows that hold.
        held: usize,
        /// Of how many.
        of: usize,
    },
    /// No row does.
    NotHeld,
    /// The experiment's JSON holds none of the runs the claim measures.
    NotMeasured,
}

impl Verdict {
    /// Whether this is the verdict the evaluation records for the claim (a count of rows held
    /// in part may differ: the rows, not the count, are what a rerun checks).
    pub fn is(&self, recorded: crate::evaluation::Recorded) -> bool {
        use crate::evaluation::Recorded;
        matches!(
            (self, recorded),
            (Verdict::Held, Recorded::Held)
                | (Verdict::HeldInPart { .. }, Recorded::InPart)
                | (Verdict::NotHeld, Recorded::NotHeld)
        )
    }

    /// How the report says it.
    pub fn words(&self) -> String {
        match self {
            Verdict::Held => "held".into(),
            Verdict::HeldInPart { held, of } => format!("held in {held} of {of}"),
            Verdict::NotHeld => "not held".into(),
            Verdict::NotMeasured => "not measured".into(),
        }
    }
}

/// Where irn's means lie against the paper's band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Size {
    /// Every row's mean inside the band.
    Inside,
    /// Every one below it.
    Below,
    /// Every one above it.
    Above,
    /// Some inside, some not.
    Mixed,
}

impl Size {
    /// How the report says it.
    pub fn words(&self) -> &'static str {
        match self {
            Size::Inside => "inside the paper's band",
            Size::Below => "below the paper's band",
            Size::Above => "above the paper's band",
            Size::Mixed => "partly inside the paper's band",
        }
    }
}

/// A claim judged.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The claim's id.
    pub id: String,
    /// Its rows.
    pub rows: Vec<Row>,
    /// Rows the claim asks for that its experiment's JSON cannot give (a scenario, point or
    /// divisor missing, a metric no run has): any makes the claim not measured.
    pub missing: Vec<String>,
    /// The verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// irn's means against the paper's band, where the paper gives one.
    pub size: Option<Size>,
}

/// Judges `claim` on its experiment's JSON document (`{"runs": [...]}` for a simulator
/// experiment, a dynamic-RDMA report, or E13's table).
pub fn judge(claim: &Claim, doc: &Value) -> Outcome {
    let samples = match claim.measure {
        Measure::Ratio | Measure::Value => run_samples(claim, doc),
        Measure::DynamicRdma => drp_samples(claim, doc),
        Measure::NicState => nic_samples(claim, doc),
    };
    let mut missing: Vec<String> = samples
        .iter()
        .filter(|(_, _, values)| values.is_empty())
        .map(|(scenario, metric, _)| format!("{scenario} {metric}").trim().to_string())
        .collect();
    // Scenarios (or series) the claim names that the JSON has no rows of at all.
    for want in &claim.scenarios {
        if !samples.iter().any(|(scenario, _, _)| scenario == want) {
            missing.push(want.clone());
        }
    }
    let rows: Vec<Row> = samples
        .into_iter()
        .filter_map(|(scenario, metric, values)| {
            let spread = Spread::of(&values)?;
            Some(Row {
                held: expects(claim, spread.mean),
                every_seed: values.iter().all(|&v| expects(claim, v)),
                seeds: values.len(),
                scenario,
                metric,
                spread,
            })
        })
        .collect();
    let held = rows.iter().filter(|r| r.held).count();
    let verdict = match (held, rows.len()) {
        _ if !missing.is_empty() => Verdict::NotMeasured,
        (_, 0) => Verdict::NotMeasured,
        (h, n) if h == n => Verdict::Held,
        (0, _) => Verdict::NotHeld,
        (h, n) => Verdict::HeldInPart { held: h, of: n },
    };
    let size = claim.band.filter(|_| !rows.is_empty()).map(|[lo, hi]| {
        let (mut inside, mut below, mut above) = (0, 0, 0);
        for r in &rows {
            let m = r.spread.mean;
            if m < lo {
                below += 1;
            } else if m > hi {
                above += 1;
            } else {
                inside += 1;
            }
        }
        match (inside, below, above) {
            (_, 0, 0) => Size::Inside,
            (0, _, 0) => Size::Below,
            (0, 0, _) => Size::Above,
            _ => Size::Mixed,
        }
    });
    Outcome {
        id: claim.id.clone(),
        rows,
        missing,
        verdict,
        size,
    }
}

/// Whether `x` does what the claim expects.
fn expects(claim: &Claim, x: f64) -> bool {
    match (claim.expect, claim.within) {
        (Expect::Above, _) => x > claim.threshold,
        (Expect::Below, _) => x < claim.threshold,
        (Expect::Within, Some([lo, hi])) => (lo..=hi).contains(&x),
        (Expect::Within, None) => false,
    }
}

/// (scenario, metric, one value per seed) of a ratio or value claim.
type Samples = Vec<(String, String, Vec<f64>)>;

/// A run's name without its scenario and seed, and its scenario without the seed.
fn name_and_scenario(run: &Value) -> Option<(String, String)> {
    let name = run.get("name")?.as_str()?;
    let scenario = run.get("scenario").and_then(Value::as_str).unwrap_or("");
    let base = name
        .strip_suffix(scenario)
        .map_or(name, str::trim_end)
        .to_string();
    Some((base, without_seed(scenario)))
}

/// The number under a dotted key of a run's summary (a flag as 0 or 1, a list as its length).
/// Inside a list, a part names the entry of that `name` (`classes.victim.paused_us`), and a
/// part `field[key=value]` the entry of `field` whose `key` is `value`
/// (`single_packet_tail[pct=99.9].fct_us`). Under `with_unfinished.`, the plain key where the
/// run has no such report.
pub fn value_at(run: &Value, key: &str) -> Option<f64> {
    let mut v = run;
    for part in key_parts(key) {
        let (field, select) = match part.split_once('[') {
            Some((f, rest)) => (f, rest.strip_suffix(']')),
            None => (part, None),
        };
        let next = match v {
            Value::Array(items) => items
                .iter()
                .find(|i| i.get("name").and_then(Value::as_str) == Some(field)),
            other => other.get(field),
        };
        let next = match (next, select) {
            (Some(list), Some(sel)) => {
                let (k, want) = sel.split_once('=')?;
                list.as_array()?
                    .iter()
                    .find(|i| match (i.get(k), want.parse::<f64>()) {
                        (Some(Value::Number(n)), Ok(w)) => {
                            n.as_f64().is_some_and(|x| (x - w).abs() < 1e-9)
                        }
                        (Some(Value::String(s)), _) => s == want,
                        _ => false,
                    })
            }
            (n, _) => n,
        };
        match next {
            Some(n) => v = n,
            None => {
                return key
                    .strip_prefix("with_unfinished.")
                    .filter(|_| run.get("with_unfinished").is_none_or(Value::is_null))
                    .and_then(|plain| value_at(run, plain));
            }
        }
    }
    match v {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::Array(items) => Some(items.len() as f64),
        other => other.as_f64(),
    }
}

/// A dotted key's parts: split at dots outside brackets.
fn key_parts(key: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in key.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                parts.push(&key[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&key[start..]);
    parts
}

fn run_samples(claim: &Claim, doc: &Value) -> Samples {
    let runs = doc.get("runs").and_then(Value::as_array);
    let of = claim.of.as_deref().unwrap_or_default();
    // (scenario) → seed → run, for the measured run and the divisor.
    let mut by: BTreeMap<(bool, String), Vec<(u64, &Value)>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for run in runs.into_iter().flatten() {
        let Some((base, scenario)) = name_and_scenario(run) else {
            continue;
        };
        let is_of = base == of;
        if !(is_of || claim.to.as_deref() == Some(base.as_str())) {
            continue;
        }
        if !claim.scenarios.is_empty() && !claim.scenarios.contains(&scenario) {
            continue;
        }
        if is_of && !order.contains(&scenario) {
            order.push(scenario.clone());
        }
        let seed = run.get("seed").and_then(Value::as_u64).unwrap_or(0);
        by.entry((is_of, scenario)).or_default().push((seed, run));
    }
    // Rows in the claim's order of scenarios when it lists them, else the runs' order.
    if !claim.scenarios.is_empty() {
        order.sort_by_key(|s| claim.scenarios.iter().position(|c| c == s));
    }
    let mut out = Samples::new();
    for scenario in order {
        let nums = &by[&(true, scenario.clone())];
        let dens = by.get(&(false, scenario.clone()));
        if claim.measure == Measure::Ratio && dens.is_none() {
            // The numerator without its divisor: nothing to divide, every metric missing.
            for metric in &claim.metrics {
                out.push((scenario.clone(), metric.clone(), Vec::new()));
            }
            continue;
        }
        for metric in &claim.metrics {
            let values: Vec<f64> = nums
                .iter()
                .filter_map(|(seed, run)| {
                    let x = value_at(run, metric)?;
                    match dens {
                        None => Some(x),
                        Some(d) => {
                            let (_, base) = d.iter().find(|(s, _)| s == seed)?;
                            let y = value_at(base, metric)?;
                            (y != 0.0).then(|| x / y)
                        }
                    }
                })
                .collect();
            out.push((scenario.clone(), metric.clone(), values));
        }
    }
    out
}

fn drp_samples(claim: &Claim, doc: &Value) -> Samples {
    let mut out = Samples::new();
    let series = doc.get("series").and_then(Value::as_array);
    for s in series.into_iter().flatten() {
        let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
        if !claim.scenarios.is_empty() && !claim.scenarios.iter().any(|c| c == name) {
            continue;
        }
        let axis = s.get("x").and_then(Value::as_str).unwrap_or("x");
        for p in s
            .get("points")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(x) = p.get("x").and_then(Value::as_f64) else {
                continue;
            };
            if !claim.points.iter().any(|&want| (want - x).abs() < 1e-9) {
                continue;
            }
            let means = |side: &str| -> Vec<f64> {
                p.get(side)
                    .and_then(|t| t.get("run_means_us"))
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                    .unwrap_or_default()
            };
            // Each run's dynamic ÷ traditional − 1, in percent (the runs share seeds pairwise).
            let values: Vec<f64> = means("dynamic")
                .iter()
                .zip(means("traditional"))
                .filter(|(_, t)| *t > 0.0)
                .map(|(d, t)| (d / t - 1.0) * 100.0)
                .collect();
            out.push((name.to_string(), format!("{axis}={x}"), values));
        }
        // Points the claim asks for that the series lacks.
        for &want in &claim.points {
            let label = format!("{axis}={want}");
            if !out.iter().any(|(n, m, _)| n == name && *m == label) {
                out.push((name.to_string(), label, Vec::new()));
            }
        }
    }
    out
}

fn nic_samples(claim: &Claim, doc: &Value) -> Samples {
    let design = claim.of.as_deref().unwrap_or_default();
    let metric = &claim.metrics[0];
    let mut out = Samples::new();
    for &gbps in &claim.points {
        let row = doc
            .get("rows")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|r| {
                r.get("design").and_then(Value::as_str) == Some(design)
                    && r.get("gbps")
                        .and_then(Value::as_f64)
                        .is_some_and(|g| (g - gbps).abs() < 1e-9)
            });
        let values = row.and_then(|r| value_at(r, metric)).into_iter().collect();
        out.push((design.to_string(), format!("{gbps} Gb/s"), values));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(text: &str) -> Claim {
        toml::from_str(text).expect("claim")
    }

    fn run(name: &str, scenario: &str, seed: u64, slowdown: f64) -> Value {
        json!({"name": format!("{name} {scenario}").trim(), "scenario": scenario,
               "seed": seed, "avg_slowdown": slowdown, "deadlocked": slowdown > 2.0})
    }

    #[test]
    fn a_ratio_is_taken_within_each_seed_then_pooled() {
        let doc = json!({"runs": [
            run("IRN", "seed=1", 1, 2.0), run("RoCE+PFC", "seed=1", 1, 6.0),
            run("IRN", "seed=2", 2, 4.0), run("RoCE+PFC", "seed=2", 2, 4.0),
        ]});
        let c = claim(
            r#"id = "E1"
experiment = "e"
claim = "c"
paper = "2.8–3.7×"
band = [2.8, 3.7]
of = "RoCE+PFC"
to = "IRN"
metrics = ["avg_slowdown"]
expect = "above""#,
        );
        let o = judge(&c, &doc);
        assert_eq!(o.rows.len(), 1);
        let r = &o.rows[0];
        // Seed 1: 3.0, seed 2: 1.0 (the ratio of the means would be 10 / 6).
        assert_eq!((r.spread.mean, r.spread.min, r.spread.max), (2.0, 1.0, 3.0));
        assert_eq!(r.seeds, 2);
        assert!(r.held && !r.every_seed);
        assert_eq!(o.verdict, Verdict::Held);
        assert_eq!(o.size, Some(Size::Below));
    }

    #[test]
    fn rows_per_scenario_give_a_partial_verdict_and_missing_runs_none() {
        let doc = json!({"runs": [
            run("IRN", "load=0.3 seed=1", 1, 2.0), run("RoCE+PFC", "load=0.3 seed=1", 1, 1.0),
            run("IRN", "load=0.9 seed=1", 1, 2.0), run("RoCE+PFC", "load=0.9 seed=1", 1, 5.0),
            run("IRN", "load=0.5 seed=1", 1, 2.0),
        ]});
        let text = r#"id = "E6"
experiment = "e"
claim = "c"
paper = "p"
of = "RoCE+PFC"
to = "IRN"
metrics = ["avg_slowdown"]
expect = "above""#;
        let o = judge(&claim(text), &doc);
        // load=0.5 has no divisor... and no numerator: no row.
        let labels: Vec<String> = o.rows.iter().map(Row::label).collect();
        assert_eq!(
            labels,
            ["load=0.3 · avg_slowdown", "load=0.9 · avg_slowdown"]
        );
        assert_eq!(o.verdict, Verdict::HeldInPart { held: 1, of: 2 });
        // The JSON keeps the rows a list beside the verdict's counts.
        let json = serde_json::to_value(&o).expect("serializes");
        assert_eq!(json["verdict"], "held-in-part");
        assert_eq!(
            (json["held"].clone(), json["of"].clone()),
            (json!(1), json!(2))
        );
        assert_eq!(json["rows"].as_array().map(Vec::len), Some(2));
        let only = format!("{text}\nscenarios = [\"load=0.9\"]");
        assert_eq!(judge(&claim(&only), &doc).verdict, Verdict::Held);
        let none = text.replace("of = \"RoCE+PFC\"", "of = \"RoCE\"");
        assert_eq!(judge(&claim(&none), &doc).verdict, Verdict::NotMeasured);
        // A named scenario that is not there, or a numerator without its divisor: not measured.
        let typo = format!("{text}\nscenarios = [\"load=0.9\", \"load=0.7\"]");
        let o = judge(&claim(&typo), &doc);
        assert_eq!(
            (o.verdict, o.missing.clone()),
            (Verdict::NotMeasured, vec!["load=0.7".to_string()])
        );
        let flipped = text.replace(
            "of = \"RoCE+PFC\"\nto = \"IRN\"",
            "of = \"IRN\"\nto = \"RoCE+PFC\"",
        );
        let o = judge(&claim(&flipped), &doc);
        assert_eq!(
            o.verdict,
            Verdict::NotMeasured,
            "IRN load=0.5 has no RoCE+PFC to divide by"
        );
        assert_eq!(o.missing, ["load=0.5 avg_slowdown"]);
    }

    #[test]
    fn a_value_claim_pools_flags_as_shares() {
        let doc = json!({"runs": [
            run("RoCE+PFC", "seed=1", 1, 3.0), run("RoCE+PFC", "seed=2", 2, 1.0),
            run("RoCE+PFC", "seed=3", 3, 5.0),
        ]});
        let c = claim(
            r#"id = "D"
experiment = "e"
claim = "c"
paper = "p"
measure = "value"
of = "RoCE+PFC"
metrics = ["deadlocked"]
expect = "above"
threshold = 0.5"#,
        );
        let o = judge(&c, &doc);
        assert!((o.rows[0].spread.mean - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(o.verdict, Verdict::Held);
    }

    #[test]
    fn with_unfinished_falls_back_to_the_plain_metric_only_without_a_report() {
        let done = json!({"avg_slowdown": 2.0});
        let left = json!({"avg_slowdown": 2.0, "with_unfinished": {"avg_slowdown": 3.0}});
        assert_eq!(value_at(&done, "with_unfinished.avg_slowdown"), Some(2.0));
        assert_eq!(value_at(&left, "with_unfinished.avg_slowdown"), Some(3.0));
        assert_eq!(value_at(&left, "with_unfinished.p99_fct_us"), None);
    }

    #[test]
    fn a_key_names_list_entries_by_name_and_counts_lists() {
        let run = json!({"classes": [{"name": "incast", "paused_us": 5.0},
                                     {"name": "victim, own class", "paused_us": 0.0}],
                         "safety": {"config_findings": [{}, {}, {}]}});
        assert_eq!(value_at(&run, "classes.incast.paused_us"), Some(5.0));
        assert_eq!(
            value_at(&run, "classes.victim, own class.paused_us"),
            Some(0.0)
        );
        assert_eq!(value_at(&run, "classes.tcp.paused_us"), None);
        assert_eq!(value_at(&run, "safety.config_findings"), Some(3.0));
        let tail = json!({"single_packet_tail": [{"pct": 99.0, "fct_us": 10.0},
                                                 {"pct": 99.9, "fct_us": 30.0}]});
        assert_eq!(
            value_at(&tail, "single_packet_tail[pct=99.9].fct_us"),
            Some(30.0)
        );
        assert_eq!(
            value_at(&tail, "single_packet_tail[pct=99].fct_us"),
            Some(10.0)
        );
        assert_eq!(value_at(&tail, "single_packet_tail[pct=50].fct_us"), None);
    }

    #[test]
    fn dynamic_rdma_points_are_per_run_changes_in_percent() {
        let doc = json!({"series": [{"name": "FRP", "x": "frp", "points": [
            {"x": 0.1, "traditional": {"run_means_us": [100.0, 200.0]},
                       "dynamic": {"run_means_us": [90.0, 190.0]}},
            {"x": 0.2, "traditional": {"run_means_us": [100.0]}, "dynamic": {"run_means_us": [50.0]}}
        ]}]});
        let c = claim(
            r#"id = "E12"
experiment = "e"
claim = "c"
paper = "−8.8 %"
measure = "dynamic-rdma"
points = [0.1]
expect = "below"
threshold = 0.0"#,
        );
        let o = judge(&c, &doc);
        assert_eq!(o.rows.len(), 1);
        assert_eq!(o.rows[0].metric, "frp=0.1");
        assert!((o.rows[0].spread.min - -10.0).abs() < 1e-9);
        assert!((o.rows[0].spread.max - -5.0).abs() < 1e-9);
        assert_eq!(o.verdict, Verdict::Held);
    }
}
