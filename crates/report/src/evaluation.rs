//! The evaluation as data: which experiments make it up and which of the papers' claims each
//! one checks (`experiments/evaluation.toml`), read and validated here, run by
//! `irn reproduce`, and judged by [`crate::claims`].
//!
//! An `[[experiment]]` names an experiment file of `experiments/`, where its JSON and figures
//! go, the baseline its ratios divide by, and how `--quick` shrinks it (`quick`: `--set`
//! overrides; `quick_runs`: the runs kept). A `[[claim]]` states one claim of a paper — its
//! words, its number, the band it gives — and how irn measures it: a ratio of two runs of an
//! experiment (`of ÷ to`, per metric, per scenario, within each seed and then pooled), a value
//! of one run, a point of E12's dynamic-RDMA sweep, or a row of E13's NIC-state table; what
//! the claim expects of that measure (`above`, `below` or `within`); and the measured cause
//! where irn's number differs from the paper's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The evaluation file could not be read or means nothing.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// Reading the file failed.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not the TOML this module reads (the message names the key).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What `toml` said (with the key and line).
        message: String,
    },
    /// A value that cannot mean anything: which key of which entry, and why.
    #[error("{path}: {key}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// `claim "E1".of`, `experiment "e4".file`, …
        key: String,
        /// Why.
        message: String,
    },
}

/// How an experiment is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A simulator experiment (`irn sim FILE`): runs of the fabric simulator.
    #[default]
    Sim,
    /// A dynamic-RDMA experiment (`kind = "dynamic-rdma"`, E12): one piece.
    DynamicRdma,
    /// E13's table of per-queue-pair NIC state (`irn nic-state`): computed, not simulated.
    NicState,
}

/// The figures drawn from an experiment's runs, as `irn sim`'s flags of the same names draw
/// them; each a path relative to the output directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureFiles {
    /// `--plot`: the metrics as ratios to the baseline (or E8's RCT, E12's transfer times).
    pub plot: Option<String>,
    /// `--ratio-plot`: the baseline ÷ each run per scenario.
    pub ratio_plot: Option<String>,
    /// `--tail-cdf`: single-packet flows' FCT tail.
    pub tail_cdf: Option<String>,
    /// `--timeline`: each run's fabric over time.
    pub timeline: Option<String>,
}

/// One experiment of the evaluation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name (`e1-e3`, `e11-storm`), what `--only` and claims refer to.
    pub id: String,
    /// One line a reader of the report sees.
    pub title: String,
    /// How it runs.
    #[serde(default)]
    pub kind: Kind,
    /// The experiment file, relative to the evaluation file (none for `nic-state`).
    #[serde(default)]
    pub file: Option<String>,
    /// Its JSON, relative to the output directory (`e1-e3/results.json`).
    pub json: String,
    /// The run its ratio columns and bar figures divide by (`irn sim --baseline`).
    #[serde(default)]
    pub baseline: Option<String>,
    /// Its figures.
    #[serde(default)]
    pub figures: FigureFiles,
    /// `--set KEY=VALUE` overrides that make it `--quick`.
    #[serde(default)]
    pub quick: Vec<String>,
    /// Under `--quick`, only the runs whose name without its seed is one of these (all when
    /// empty).
    #[serde(default)]
    pub quick_runs: Vec<String>,
    /// Left out of `--quick` entirely (its claims are then reported as not checked).
    #[serde(default)]
    pub quick_skip: bool,
}

/// What a claim expects of its measure's mean over the seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// Greater than the threshold (a ratio above 1: the divisor is better).
    Above,
    /// Less than the threshold.
    Below,
    /// Inside the claim's `within` band.
    Within,
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Measure {
    /// `of ÷ to` per metric and scenario, within each seed, then pooled over the seeds.
    #[default]
    Ratio,
    /// `of`'s metrics themselves, over the seeds.
    Value,
    /// E12: dynamic ÷ traditional transfer time − 1, in percent, at `points` of `series`.
    DynamicRdma,
    /// E13: a design's added per-QP state as a percentage of an mlx5 QP context, per rate.
    NicState,
}

/// One claim of a paper and how irn checks it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The paper's label (`E1`, `E6 (b)`, `§4.4.4`), unique.
    pub id: String,
    /// The experiment (`Experiment::id`) that measures it.
    pub experiment: String,
    /// What the paper says, in a sentence.
    pub claim: String,
    /// The paper's number as it states it (`2.8–3.7×`, `order`, `figure only`).
    pub paper: String,
    /// The paper's band for the measure, when it gives one: drawn on the claim's figure, and
    /// irn's mean reported as inside, below or above it.
    #[serde(default)]
    pub band: Option<[f64; 2]>,
    /// How it is measured.
    #[serde(default)]
    pub measure: Measure,
    /// The run measured (the numerator of a ratio), by name without scenario and seed; for
    /// `nic-state`, the design.
    #[serde(default)]
    pub of: Option<String>,
    /// The divisor of a ratio.
    #[serde(default)]
    pub to: Option<String>,
    /// The metrics, by the run summary's dotted JSON keys (`avg_slowdown`,
    /// `incast.avg_rct_us`); default: average slowdown, average and 99th-percentile FCT.
    #[serde(default = "paper_metrics")]
    pub metrics: Vec<String>,
    /// The scenarios (without seed) measured; all that hold both runs when empty. For
    /// `dynamic-rdma`, the series' names.
    #[serde(default)]
    pub scenarios: Vec<String>,
    /// `dynamic-rdma`: the sweep's x values; `nic-state`: the link rates, Gb/s.
    #[serde(default)]
    pub points: Vec<f64>,
    /// What the mean of every row must do for the claim to hold.
    pub expect: Expect,
    /// The bound of `above` and `below` (default 1).
    #[serde(default = "one")]
    pub threshold: f64,
    /// The band of `within`.
    #[serde(default)]
    pub within: Option<[f64; 2]>,
    /// Where irn's number differs from the paper's, or the claim does not hold: the cause as
    /// measured (with the experiment that measured it).
    #[serde(default)]
    pub cause: Option<String>,
    /// Whether `--quick` checks it (its experiment's reduced scale keeps the effect clear of
    /// seed noise); true unless said.
    #[serde(default = "yes")]
    pub quick: bool,
    /// irn's verdict in the committed evaluation (`held` unless said): a run whose verdict
    /// differs from it reports the change, and `irn reproduce` exits with failure.
    #[serde(default)]
    pub measured: Recorded,
}

/// A claim's verdict as the committed evaluation records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Recorded {
    /// Every row holds.
    #[default]
    Held,
    /// Some rows hold.
    InPart,
    /// No row holds.
    NotHeld,
}

fn paper_metrics() -> Vec<String> {
    ["avg_slowdown", "avg_fct_us", "p99_fct_us"]
        .map(String::from)
        .to_vec()
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

/// The evaluation: its experiments in the order they run and its claims in the order the
/// report gives them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evaluation {
    /// The experiments.
    #[serde(rename = "experiment")]
    pub experiments: Vec<Experiment>,
    /// The claims.
    #[serde(rename = "claim", default)]
    pub claims: Vec<Claim>,
    /// The directory the file is in: experiment files are relative to it.
    #[serde(skip)]
    pub dir: PathBuf,
}

impl Evaluation {
    /// Reads and validates an evaluation file.
    pub fn load(path: &Path) -> Result<Evaluation, CatalogueError> {
        let text = std::fs::read_to_string(path).map_err(|source| CatalogueError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Evaluation::parse(&text, path, dir)
    }

    /// Parses and validates the text of an evaluation file (`path` names it in errors;
    /// experiment files are relative to `dir`).
    pub fn parse(text: &str, path: &Path, dir: PathBuf) -> Result<Evaluation, CatalogueError> {
        let mut eval: Evaluation = toml::from_str(text).map_err(|e| CatalogueError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        eval.dir = dir;
        eval.validate(path)?;
        Ok(eval)
    }

    /// The experiment of this id.
    pub fn experiment(&self, id: &str) -> Option<&Experiment> {
        self.experiments.iter().find(|e| e.id == id)
    }

    /// The experiment file of `e`, as a path.
    pub fn file_of(&self, e: &Experiment) -> Option<PathBuf> {
        e.file.as_ref().map(|f| self.dir.join(f))
    }

    /// The experiments `--only` selects: by experiment id or by claim id (case-insensitive; a
    /// claim selects its experiment); a name that is neither selects the claims whose first
    /// word it is (`E11`: `E11 livelock`, `E11 go-back-N`). Unknown names are an error naming
    /// them.
    pub fn select(&self, only: &[String]) -> Result<Vec<&Experiment>, String> {
        if only.is_empty() {
            return Ok(self.experiments.iter().collect());
        }
        let mut wanted = BTreeSet::new();
        for name in only {
            let n = name.trim();
            let exact: Vec<String> = self
                .experiments
                .iter()
                .filter(|e| e.id.eq_ignore_ascii_case(n))
                .map(|e| e.id.clone())
                .chain(
                    self.claims
                        .iter()
                        .filter(|c| c.id.eq_ignore_ascii_case(n))
                        .map(|c| c.experiment.clone()),
                )
                .collect();
            let found: Vec<String> = if exact.is_empty() {
                self.claims
                    .iter()
                    .filter(|c| first_word_is(&c.id, n))
                    .map(|c| c.experiment.clone())
                    .collect()
            } else {
                exact
            };
            if found.is_empty() {
                return Err(format!(
                    "--only: `{n}` is neither an experiment nor a claim of the evaluation \
                     (experiments: {})",
                    self.experiments
                        .iter()
                        .map(|e| e.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            wanted.extend(found);
        }
        Ok(self
            .experiments
            .iter()
            .filter(|e| wanted.contains(&e.id))
            .collect())
    }

    fn validate(&self, path: &Path) -> Result<(), CatalogueError> {
        let bad = |key: String, message: String| CatalogueError::Invalid {
            path: path.to_path_buf(),
            key,
            message,
        };
        let mut ids = BTreeSet::new();
        let mut jsons = BTreeSet::new();
        for e in &self.experiments {
            let key = |k: &str| format!("experiment \"{}\".{k}", e.id);
            if e.id.is_empty() || e.id.contains([' ', ',', '/']) {
                return Err(bad(
                    key("id"),
                    "an id is one word: no spaces, commas or slashes".into(),
                ));
            }
            if !ids.insert(e.id.clone()) {
                return Err(bad(key("id"), "two experiments have this id".into()));
            }
            if !jsons.insert(e.json.clone()) {
                return Err(bad(
                    key("json"),
                    "another experiment writes this file".into(),
                ));
            }
            match (e.kind, &e.file) {
                (Kind::NicState, Some(_)) => {
                    return Err(bad(
                        key("file"),
                        "a nic-state table has no experiment file".into(),
                    ))
                }
                (Kind::Sim | Kind::DynamicRdma, None) => {
                    return Err(bad(
                        key("file"),
                        "missing: the experiment file to run".into(),
                    ))
                }
                (_, Some(f)) if !self.dir.join(f).is_file() => {
                    return Err(bad(
                        key("file"),
                        format!("no such file {}", self.dir.join(f).display()),
                    ))
                }
                _ => {}
            }
            for s in &e.quick {
                if !s.contains('=') {
                    return Err(bad(key("quick"), format!("`{s}` is not KEY=VALUE")));
                }
            }
        }
        let mut claim_ids = BTreeSet::new();
        for c in &self.claims {
            let key = |k: &str| format!("claim \"{}\".{k}", c.id);
            if !claim_ids.insert(c.id.clone()) {
                return Err(bad(key("id"), "two claims have this id".into()));
            }
            // `--only` takes a comma-separated list of ids.
            if c.id.trim().is_empty() || c.id.contains([',', '"', '\n']) {
                return Err(bad(key("id"), "a claim id has no commas or quotes".into()));
            }
            let Some(e) = self.experiment(&c.experiment) else {
                return Err(bad(
                    key("experiment"),
                    format!("no experiment `{}`", c.experiment),
                ));
            };
            let kind_ok = match c.measure {
                Measure::Ratio | Measure::Value => e.kind == Kind::Sim,
                Measure::DynamicRdma => e.kind == Kind::DynamicRdma,
                Measure::NicState => e.kind == Kind::NicState,
            };
            if !kind_ok {
                return Err(bad(
                    key("measure"),
                    format!(
                        "{:?} cannot be measured on a {:?} experiment",
                        c.measure, e.kind
                    ),
                ));
            }
            if c.of.is_none() && c.measure != Measure::DynamicRdma {
                return Err(bad(
                    key("of"),
                    "missing: the run (or design) measured".into(),
                ));
            }
            if (c.measure == Measure::Ratio) != c.to.is_some() {
                return Err(bad(
                    key("to"),
                    "a ratio needs its divisor `to`, and only a ratio has one".into(),
                ));
            }
            if matches!(c.measure, Measure::DynamicRdma | Measure::NicState) && c.points.is_empty()
            {
                return Err(bad(key("points"), "missing: the points measured".into()));
            }
            if c.metrics.is_empty() {
                return Err(bad(key("metrics"), "empty".into()));
            }
            match (c.expect, c.within) {
                (Expect::Within, None) => {
                    return Err(bad(
                        key("within"),
                        "`expect = \"within\"` needs the band".into(),
                    ))
                }
                (Expect::Within, Some([lo, hi]))
                    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) =>
                {
                    return Err(bad(key("within"), format!("[{lo}, {hi}] is not a band")))
                }
                (Expect::Above | Expect::Below, Some(_)) => {
                    return Err(bad(
                        key("within"),
                        "only `expect = \"within\"` has a band".into(),
                    ))
                }
                _ => {}
            }
            if let Some([lo, hi]) = c.band {
                if !matches!(
                    lo.partial_cmp(&hi),
                    Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
                ) {
                    return Err(bad(key("band"), format!("[{lo}, {hi}] is not a band")));
                }
            }
        }
        Ok(())
    }
}

/// Whether `name` is the first word of claim `id` (`E6` of `E6 (b)`), ignoring case.
fn first_word_is(id: &str, name: &str) -> bool {
    id.split_whitespace()
        .next()
        .is_some_and(|head| head.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Evaluation, CatalogueError> {
        let dir = std::env::temp_dir().join(format!("irn-eval-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("a.toml"), "").expect("write");
        Evaluation::parse(text, Path::new("eval.toml"), dir)
    }

    const ONE: &str = r#"
[[experiment]]
id = "e1"
title = "E1"
file = "a.toml"
json = "e1/results.json"

[[claim]]
id = "E1"
experiment = "e1"
claim = "IRN beats RoCE+PFC"
paper = "2.8–3.7×"
band = [2.8, 3.7]
of = "RoCE+PFC"
to = "IRN"
expect = "above"

[[claim]]
id = "E6 (b)"
experiment = "e1"
claim = "PFC degrades IRN"
paper = "up to 2.4×"
of = "IRN+PFC"
to = "IRN"
expect = "above"
"#;

    #[test]
    fn reads_a_catalogue_and_selects_by_experiment_or_claim() {
        let e = parse(ONE).expect("valid");
        assert_eq!(e.claims[0].metrics, paper_metrics());
        assert_eq!(e.claims[0].threshold, 1.0);
        assert!(e.claims[0].quick);
        assert_eq!(e.select(&[]).expect("all").len(), 1);
        assert_eq!(e.select(&["E1".into()]).expect("by id")[0].id, "e1");
        assert_eq!(e.select(&["e6".into()]).expect("by first word")[0].id, "e1");
        let err = e.select(&["E99".into()]).expect_err("unknown");
        assert!(err.contains("E99") && err.contains("e1"), "{err}");
    }

    #[test]
    fn an_exact_id_selects_alone_and_a_first_word_only_when_nothing_is_exact() {
        let two = ONE.replace(
            "[[claim]]\nid = \"E6 (b)\"\nexperiment = \"e1\"",
            "[[experiment]]\nid = \"e6b\"\ntitle = \"t\"\nfile = \"a.toml\"\njson = \"b.json\"\n\n\
             [[claim]]\nid = \"E6 (b)\"\nexperiment = \"e6b\"",
        )
            + "\n[[claim]]\nid = \"E6\"\nexperiment = \"e1\"\nclaim = \"c\"\npaper = \"p\"\n\
             of = \"IRN\"\nto = \"RoCE\"\nexpect = \"above\"\n";
        let e = parse(&two).expect("valid");
        let ids = |only: &[&str]| -> Vec<String> {
            e.select(&only.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("selects")
                .iter()
                .map(|x| x.id.clone())
                .collect()
        };
        assert_eq!(ids(&["E6"]), ["e1"], "the claim E6 alone");
        assert_eq!(ids(&["e6b"]), ["e6b"], "the experiment alone");
        assert_eq!(ids(&["E6 (b)"]), ["e6b"]);
        assert_eq!(ids(&["E1", "e6b"]), ["e1", "e6b"]);
    }

    #[test]
    fn an_invalid_entry_is_an_error_naming_its_key() {
        let cases = [
            (
                ONE.replace("to = \"IRN\"\nexpect", "expect"),
                "claim \"E1\".to",
            ),
            (
                ONE.replace(
                    "experiment = \"e1\"\nclaim = \"IRN",
                    "experiment = \"e9\"\nclaim = \"IRN",
                ),
                "claim \"E1\".experiment",
            ),
            (
                ONE.replace("file = \"a.toml\"", "file = \"none.toml\""),
                "experiment \"e1\".file",
            ),
            (
                ONE.replace("band = [2.8, 3.7]", "band = [3.7, 2.8]"),
                "claim \"E1\".band",
            ),
            (
                ONE.replace(
                    "expect = \"above\"\n\n[[claim]]",
                    "expect = \"within\"\n\n[[claim]]",
                ),
                "claim \"E1\".within",
            ),
            (
                ONE.replace("id = \"E6 (b)\"", "id = \"E1\""),
                "claim \"E1\".id",
            ),
        ];
        for (text, key) in cases {
            let err = parse(&text).expect_err(key).to_string();
            assert!(
                err.contains(key) && err.contains("eval.toml"),
                "{key}: {err}"
            );
        }
        let err = parse(&ONE.replace("expect = \"above\"", "expect = \"up\"")).expect_err("enum");
        assert!(err.to_string().contains("expect"), "{err}");
    }
}
