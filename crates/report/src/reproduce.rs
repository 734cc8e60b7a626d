//! The whole evaluation in one call (`irn reproduce`): every experiment of
//! `experiments/evaluation.toml` over its seeds, with one progress bar, resumable (a run whose
//! configuration and binary are unchanged is read back, not run again), then each
//! experiment's JSON and figures and the report: `DIR/report/REPORT.md` and
//! `DIR/report/report.html`, one section per claim (see [`crate::report`]).
//!
//! Finished runs are kept in `DIR/.cache/` under the SHA-256 of the binary that made them and
//! the run's whole configuration, each written as soon as the run ends, so an interrupted
//! evaluation picks up where it stopped and a Slurm array ([`Options::slurm`]) shares one
//! cache between its tasks. Progress goes to stderr, the claims' verdicts to stdout.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use indicatif::{ProgressBar, ProgressStyle};
use irn_sim::config::{load_experiment, ConfigError, SimConfig};
use irn_sim::drp::DrpExperiment;
use irn_sim::metrics::RunSummary;
use sha2::{Digest, Sha256};

use crate::claims::{judge, Outcome};
use crate::evaluation::{CatalogueError, Evaluation, Experiment, Kind, Measure};
use crate::experiment;
use crate::figure::{claim_figure, png, print_width_in, transport_colour, ClaimFigure};
use crate::nic_state::{self, NicStateError, Params, Table};
use crate::plot::{draw_figures, FigureError, FigurePaths};
use crate::report::{anchor, ClaimSection, ExperimentSection, Figure, Report};
use crate::PlotError;

/// Why the evaluation could not be run or reported.
#[derive(Debug, thiserror::Error)]
pub enum ReproduceError {
    /// Options, or an entry of the evaluation, that cannot mean anything (or select nothing).
    #[error("{0}")]
    Usage(String),
    /// A simulator run that could not be made.
    #[error("run '{run}'")]
    Run {
        /// The run's name.
        run: String,
        /// Why.
        #[source]
        source: irn_sim::SimError,
    },
    /// The evaluation's catalogue is wrong.
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
    /// An experiment's file is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Runs failed; the others are in the cache.
    #[error(
        "{} run(s) failed (the others are kept in {}):\n  {}",
        failed.len(),
        cache.display(),
        failed.join("\n  ")
    )]
    RunsFailed {
        /// Each failed run's error, with its causes.
        failed: Vec<String>,
        /// Where the finished ones are.
        cache: PathBuf,
    },
    /// A file or directory could not be read, written or created.
    #[error("{what} {}", path.display())]
    Io {
        /// `reading`, `writing`, `creating`, …
        what: &'static str,
        /// Which.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file that is not what it should hold.
    #[error("{}: {what}", path.display())]
    Json {
        /// What it should be.
        what: &'static str,
        /// Which.
        path: PathBuf,
        /// What the reader said.
        #[source]
        source: serde_json::Error,
    },
    /// A JSON file without the part the report reads.
    #[error("{}: {what}", path.display())]
    Incomplete {
        /// What is missing.
        what: &'static str,
        /// Which file.
        path: PathBuf,
    },
    /// A configuration or a summary could not be put into JSON.
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
    /// An experiment's figure could not be drawn.
    #[error(transparent)]
    Figure(#[from] FigureError),
    /// A claim's figure, or a PNG, could not be made.
    #[error("{what} {}", path.display())]
    Draw {
        /// `drawing` or `rendering`.
        what: &'static str,
        /// Which file.
        path: PathBuf,
        /// Why.
        #[source]
        source: PlotError,
    },
    /// E13's table.
    #[error(transparent)]
    NicState(#[from] NicStateError),
}

type Result<T, E = ReproduceError> = std::result::Result<T, E>;

/// An I/O error as `what` (reading, writing, creating) `path`.
fn io_at<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ReproduceError + 'a {
    move |source| ReproduceError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A JSON error as `path` not being `what`.
fn json_at<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(serde_json::Error) -> ReproduceError + 'a {
    move |source| ReproduceError::Json {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A figure's error as `what` (drawing, rendering) `path`.
fn draw_at<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(PlotError) -> ReproduceError + 'a {
    move |source| ReproduceError::Draw {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// An error and its causes, outermost first, as one line.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s += &format!(": {c}");
        cause = c.source();
    }
    s
}

/// What to reproduce, how, and where.
#[derive(Debug, Clone)]
pub struct Options {
    /// Every experiment at the reduced scale its `quick` keys give.
    pub quick: bool,
    /// Seeds of every simulator experiment: a count N or a list (`1,4,9`); `None`: each
    /// experiment's own.
    pub seeds: Option<String>,
    /// Only these experiments or claims (a claim brings its experiment).
    pub only: Vec<String>,
    /// Runs in parallel (`None`: every core).
    pub jobs: Option<usize>,
    /// Where the experiments' JSON and figures, the report and the cache go.
    pub out: PathBuf,
    /// The evaluation: its experiments and claims.
    pub evaluation: PathBuf,
    /// Run nothing: make the figures and the report from the JSON already in `out`.
    pub report_only: bool,
    /// Run and write each experiment's JSON and figures, but no report.
    pub no_report: bool,
    /// Write a Slurm batch script here instead of running.
    pub slurm: Option<PathBuf>,
    /// No progress bar.
    pub quiet: bool,
    /// The `irn` binary that runs: its digest keys the cache, and the Slurm script runs it.
    pub binary: PathBuf,
    /// The command line, as the report quotes it.
    pub command: String,
}

/// One run to make, or read back from the cache.
struct Pending<'a> {
    experiment: usize,
    config: &'a SimConfig,
    key: String,
}

/// An experiment's plan: its runs and their cache keys.
enum Plan {
    Sim {
        runs: Vec<SimConfig>,
        keys: Vec<String>,
    },
    Drp {
        exp: Box<DrpExperiment>,
        key: String,
    },
    NicState,
}

/// Runs (or, with `report_only`, only reports) the evaluation; true when every claim judged
/// has the verdict the evaluation records.
pub fn run(args: &Options) -> Result<bool> {
    let eval = Evaluation::load(&args.evaluation)?;
    let wanted = eval.select(&args.only).map_err(ReproduceError::Usage)?;
    // `--quick` leaves out the experiments too long to shrink; their claims are reported as
    // not run at this scale.
    let selected: Vec<&Experiment> = wanted
        .iter()
        .copied()
        .filter(|e| !(args.quick && e.quick_skip))
        .collect();
    if let Some(script) = &args.slurm {
        return write_slurm(args, script, &selected);
    }
    std::fs::create_dir_all(&args.out).map_err(io_at("creating", &args.out))?;
    if !args.report_only {
        run_experiments(args, &eval, &selected)?;
    }
    if args.no_report {
        return Ok(true);
    }
    report(args, &eval, &wanted, &selected)
}

/// Plans every selected experiment, runs what the cache does not hold, and writes each
/// experiment's JSON and figures.
fn run_experiments(args: &Options, eval: &Evaluation, selected: &[&Experiment]) -> Result<()> {
    let binary = binary_digest(&args.binary)?;
    let plans: Vec<Plan> = selected
        .iter()
        .map(|e| plan(args, eval, e, &binary))
        .collect::<Result<_>>()?;
    let cache = args.out.join(".cache");
    std::fs::create_dir_all(&cache).map_err(io_at("creating", &cache))?;
    let mut pending = Vec::new();
    let mut cached = 0usize;
    // A run two experiments share (E1–E3's IRN is E5's) is made once.
    let mut planned = std::collections::BTreeSet::new();
    for (i, p) in plans.iter().enumerate() {
        if let Plan::Drp { key, .. } = p {
            if cache.join(format!("{key}.json")).is_file() {
                cached += 1;
            }
        }
        if let Plan::Sim { runs, keys } = p {
            for (config, key) in runs.iter().zip(keys) {
                if cache.join(format!("{key}.json")).is_file() {
                    cached += 1;
                } else if planned.insert(key.clone()) {
                    pending.push(Pending {
                        experiment: i,
                        config,
                        key: key.clone(),
                    });
                }
            }
        }
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let simulated_ms: f64 = pending.iter().map(|p| horizon_us(p.config) / 1000.0).sum();
    // E12's sweeps count as one run each (they run after the simulator's, bar of their own).
    let sweeps = plans
        .iter()
        .filter(
            |p| matches!(p, Plan::Drp { key, .. } if !cache.join(format!("{key}.json")).is_file()),
        )
        .count();
    eprintln!(
        "irn reproduce: {} experiment(s), {} run(s) to make ({simulated_ms:.0} ms simulated), \
         {cached} finished before{}",
        selected.len(),
        pending.len() + sweeps,
        estimate(args, eval, selected, &pending, jobs)
    );
    run_pending(args, &pending, &cache, jobs)?;
    for (e, p) in selected.iter().zip(&plans) {
        write_experiment(args, e, p, &cache, jobs)?;
    }
    Ok(())
}

/// The runs of one experiment as this invocation sees them (quick keys, seeds), with their
/// cache keys.
fn plan(args: &Options, eval: &Evaluation, e: &Experiment, binary: &str) -> Result<Plan> {
    let Some(file) = eval.file_of(e) else {
        return Ok(Plan::NicState);
    };
    let text = std::fs::read_to_string(&file).map_err(io_at("reading", &file))?;
    let origin = file.display().to_string();
    let mut sets: Vec<String> = if args.quick {
        e.quick.clone()
    } else {
        Vec::new()
    };
    match e.kind {
        Kind::DynamicRdma => {
            let exp = DrpExperiment::load(&text, &origin, &sets, None)?;
            let key = digest(binary, &serde_json::to_string(&exp)?);
            Ok(Plan::Drp {
                exp: Box::new(exp),
                key,
            })
        }
        Kind::Sim => {
            if let Some(s) = &args.seeds {
                sets.push(format!("seeds={s}"));
            }
            let dir = file
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            let mut exp = load_experiment(&text, &origin, &dir, &sets, None)?;
            if args.quick && !e.quick_runs.is_empty() {
                exp.runs
                    .retain(|r| e.quick_runs.contains(&crate::seeds::without_seed(&r.name)));
                if exp.runs.is_empty() {
                    return Err(ReproduceError::Usage(format!(
                        "{}: experiment \"{}\".quick_runs: no run of {origin} is named so",
                        args.evaluation.display(),
                        e.id
                    )));
                }
            }
            if e.figures.timeline.is_some() {
                for r in &mut exp.runs {
                    r.monitor_interval_us.get_or_insert(1000.0);
                }
            }
            let keys = exp
                .runs
                .iter()
                .map(|r| run_key(binary, r))
                .collect::<Result<_>>()?;
            Ok(Plan::Sim {
                runs: exp.runs,
                keys,
            })
        }
        Kind::NicState => Ok(Plan::NicState),
    }
}

/// The simulated time a run is given (its arrivals and its drain), µs.
fn horizon_us(r: &SimConfig) -> f64 {
    r.workload.duration_us + r.workload.drain_us
}

/// What the runs to make will take, from the committed runs' wall times (full scale only:
/// a quick run's time is not in the committed JSON).
fn estimate(
    args: &Options,
    eval: &Evaluation,
    selected: &[&Experiment],
    pending: &[Pending<'_>],
    jobs: usize,
) -> String {
    if args.quick || pending.is_empty() {
        return String::new();
    }
    let mut total = 0.0;
    let mut known = 0;
    for (i, e) in selected.iter().enumerate() {
        let Ok(text) = std::fs::read_to_string(eval.dir.join(&e.json)) else {
            continue;
        };
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let walls: Vec<(String, f64)> = doc["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                Some((
                    crate::seeds::without_seed(r["name"].as_str()?),
                    r["wall_s"].as_f64()?,
                ))
            })
            .collect();
        for p in pending.iter().filter(|p| p.experiment == i) {
            let name = crate::seeds::without_seed(&p.config.name);
            let same: Vec<f64> = walls
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, w)| *w)
                .collect();
            if !same.is_empty() {
                total += same.iter().sum::<f64>() / same.len() as f64;
                known += 1;
            }
        }
    }
    if known == 0 {
        return String::new();
    }
    format!(
        "; about {:.0} min on {jobs} core(s), from the committed runs' wall times ({known} of \
         {} runs known)",
        total / jobs as f64 / 60.0,
        pending.len()
    )
}

/// Runs what the cache lacks, `jobs` at a time, under one progress bar over all of them
/// (weighted by each run's simulated time), writing each to the cache as it ends.
fn run_pending(args: &Options, pending: &[Pending<'_>], cache: &Path, jobs: usize) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let weights: Vec<u64> = pending
        .iter()
        .map(|p| horizon_us(p.config).max(1.0) as u64)
        .collect();
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(weights.iter().sum())
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>44} [{bar:30}] {percent:>3}% {elapsed_precise} ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let done = AtomicUsize::new(0);
    let simulated_us = AtomicU64::new(0);
    let message = |done: usize, sim_us: u64| {
        format!(
            "{done}/{} runs, {:.0} ms simulated",
            pending.len(),
            sim_us as f64 / 1000.0
        )
    };
    bar.set_message(message(0, 0));
    let shown: Vec<AtomicU64> = pending.iter().map(|_| AtomicU64::new(0)).collect();
    let results = irn_sim::pool::map(pending, jobs, |i, p| -> Result<()> {
        let w = weights[i];
        let out = irn_sim::run(p.config, |f| {
            let now = (f.clamp(0.0, 1.0) * w as f64) as u64;
            let before = shown[i].swap(now, Ordering::Relaxed);
            bar.inc(now.saturating_sub(before));
        })
        .map_err(|source| ReproduceError::Run {
            run: p.config.name.clone(),
            source,
        })?;
        let before = shown[i].swap(w, Ordering::Relaxed);
        bar.inc(w.saturating_sub(before));
        cache_put(cache, &p.key, &serde_json::to_vec(&out.summary)?)?;
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        let sim = simulated_us
            .fetch_add((out.summary.sim_time_ms * 1000.0) as u64, Ordering::Relaxed)
            + (out.summary.sim_time_ms * 1000.0) as u64;
        bar.set_message(message(n, sim));
        Ok(())
    });
    bar.finish_and_clear();
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| with_causes(&e)))
        .collect();
    if !failed.is_empty() {
        return Err(ReproduceError::RunsFailed {
            failed,
            cache: cache.to_path_buf(),
        });
    }
    Ok(())
}

/// Writes an experiment's JSON (from the cache) and draws its figures, as PNG too.
fn write_experiment(
    args: &Options,
    e: &Experiment,
    plan: &Plan,
    cache: &Path,
    jobs: usize,
) -> Result<()> {
    let json = args.out.join(&e.json);
    if let Some(dir) = json.parent() {
        std::fs::create_dir_all(dir).map_err(io_at("creating", dir))?;
    }
    match plan {
        Plan::Sim { keys, .. } => {
            let summaries = keys
                .iter()
                .map(|k| read_cached(&cache.join(format!("{k}.json"))))
                .collect::<Result<Vec<RunSummary>>>()?;
            experiment::write_doc(&json, &experiment::doc(&summaries, e.baseline.as_deref()))
                .map_err(io_at("writing", &json))?;
        }
        Plan::Drp { exp, key } => {
            let path = cache.join(format!("{key}.json"));
            if !path.is_file() {
                let bar = if args.quiet {
                    ProgressBar::hidden()
                } else {
                    ProgressBar::new(1000)
                };
                bar.set_message(e.id.clone());
                let report = irn_sim::drp::run_experiment(exp, jobs, &|f| {
                    bar.set_position((f * 1000.0) as u64);
                });
                bar.finish_and_clear();
                cache_put(cache, key, &serde_json::to_vec(&report)?)?;
            }
            let report: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).map_err(io_at("reading", &path))?)
                    .map_err(json_at("not a dynamic-RDMA report", &path))?;
            std::fs::write(&json, serde_json::to_string_pretty(&report)? + "\n")
                .map_err(io_at("writing", &json))?;
        }
        Plan::NicState => {}
    }
    draw_experiment(args, e)
}

/// Draws an experiment's figures from its JSON in DIR, each as SVG and PNG.
fn draw_experiment(args: &Options, e: &Experiment) -> Result<()> {
    let json = args.out.join(&e.json);
    let at = |f: &Option<String>| f.as_ref().map(|p| args.out.join(p));
    let (plot, ratio, tail, timeline) = (
        at(&e.figures.plot),
        at(&e.figures.ratio_plot),
        at(&e.figures.tail_cdf),
        at(&e.figures.timeline),
    );
    for p in [&plot, &ratio, &tail, &timeline].into_iter().flatten() {
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(io_at("creating", dir))?;
        }
    }
    match e.kind {
        Kind::NicState => {
            let plot = plot
                .clone()
                .unwrap_or_else(|| args.out.join(format!("{}.svg", e.id)));
            if args.report_only {
                // The table in DIR is the one judged: drawn, not made again.
                let text = std::fs::read_to_string(&json).map_err(io_at("reading", &json))?;
                let rows = Table::rows_from_json(&text, &json)?;
                nic_state::plot(&plot, &rows).map_err(draw_at("drawing", &plot))?;
            } else {
                let table = Table::compute(&Params::default())?;
                table.write_json(&json).map_err(io_at("writing", &json))?;
                nic_state::plot(&plot, &table.rows).map_err(draw_at("drawing", &plot))?;
            }
        }
        Kind::DynamicRdma => {
            if let Some(p) = &plot {
                let report: irn_sim::drp::DrpReport =
                    serde_json::from_slice(&std::fs::read(&json).map_err(io_at("reading", &json))?)
                        .map_err(json_at("not a dynamic-RDMA report", &json))?;
                crate::drp::figure(p, &report).map_err(draw_at("drawing", p))?;
            }
        }
        Kind::Sim => {
            let summaries = read_runs(&json)?;
            draw_figures(
                &summaries,
                e.baseline.as_deref(),
                &FigurePaths {
                    plot: plot.as_deref(),
                    tail_cdf: tail.as_deref(),
                    ratio_plot: ratio.as_deref(),
                    timeline: timeline.as_deref(),
                },
            )?;
        }
    }
    for svg in [plot, ratio, tail, timeline].into_iter().flatten() {
        to_png(&svg)?;
    }
    Ok(())
}

/// The PNG beside an SVG, at the width it prints (one column or two) and 300 dpi.
fn to_png(svg: &Path) -> Result<PathBuf> {
    let out = svg.with_extension("png");
    let width = print_width_in(svg).map_err(draw_at("reading", svg))?;
    png(svg, &out, width).map_err(draw_at("rendering", &out))?;
    Ok(out)
}

/// Puts a finished run in the cache under `key`, whole or not at all: written to a file of
/// this process and thread, then renamed into place (another task that made the same run
/// may have put it there first; its copy is the same).
fn cache_put(cache: &Path, key: &str, bytes: &[u8]) -> Result<()> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = cache.join(format!("{key}.json"));
    let tmp = cache.join(format!(
        ".{key}.{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, bytes).map_err(io_at("writing", &tmp))?;
    match std::fs::rename(&tmp, &path) {
        Ok(()) => Ok(()),
        Err(_) if path.is_file() => {
            let _ = std::fs::remove_file(&tmp);
            Ok(())
        }
        Err(e) => Err(e).map_err(io_at("writing", &path)),
    }
}

fn read_cached(path: &Path) -> Result<RunSummary> {
    let bytes = std::fs::read(path).map_err(io_at("reading", path))?;
    serde_json::from_slice(&bytes).map_err(json_at("not a run summary", path))
}

/// The run summaries of an experiment's JSON.
fn read_runs(json: &Path) -> Result<Vec<RunSummary>> {
    let text = std::fs::read_to_string(json).map_err(io_at("reading", json))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(json_at("not JSON", json))?;
    let runs = doc["runs"]
        .as_array()
        .ok_or_else(|| ReproduceError::Incomplete {
            what: "no `runs` array",
            path: json.to_path_buf(),
        })?;
    runs.iter()
        .map(|r| serde_json::from_value(r.clone()))
        .collect::<std::result::Result<_, _>>()
        .map_err(json_at("a run summary irn cannot read back", json))
}

/// Judges every claim of the `wanted` experiments that ran (`selected`) on their JSON in DIR,
/// draws each claim's figure, and writes the report (the claims of experiments that did not
/// run are listed as not run); true when every claim judged has the verdict the evaluation
/// records.
fn report(
    args: &Options,
    eval: &Evaluation,
    wanted: &[&Experiment],
    selected: &[&Experiment],
) -> Result<bool> {
    let report_dir = args.out.join("report");
    let figures_dir = report_dir.join("figures");
    std::fs::create_dir_all(&figures_dir).map_err(io_at("creating", &figures_dir))?;
    let rel = |p: &Path| -> String {
        // Figures in DIR are one level above the report.
        let inside = p.strip_prefix(&args.out).unwrap_or(p);
        format!("../{}", inside.display())
    };
    let mut experiments = Vec::new();
    let mut docs = std::collections::BTreeMap::new();
    for e in selected {
        let json = args.out.join(&e.json);
        let Ok(text) = std::fs::read_to_string(&json) else {
            continue;
        };
        if args.report_only {
            draw_experiment(args, e)?;
        }
        let doc: serde_json::Value =
            serde_json::from_str(&text).map_err(json_at("not JSON", &json))?;
        let mut figures = Vec::new();
        let files = [
            &e.figures.plot,
            &e.figures.ratio_plot,
            &e.figures.tail_cdf,
            &e.figures.timeline,
        ];
        for f in files.into_iter().flatten() {
            let svg = args.out.join(f);
            figures.push(Figure {
                svg: rel(&svg),
                png: rel(&svg.with_extension("png")),
            });
        }
        let (runs, seeds) = runs_and_seeds(&doc);
        experiments.push(ExperimentSection {
            experiment: e,
            figures,
            seeds,
            runs,
            quick: args.quick,
        });
        docs.insert(e.id.clone(), doc);
    }
    let mut claims = Vec::new();
    for c in &eval.claims {
        if !wanted.iter().any(|e| e.id == c.experiment) {
            continue;
        }
        let outcome = docs
            .get(&c.experiment)
            .filter(|_| !args.quick || c.quick)
            .map(|doc| judge(c, doc));
        let figure = match &outcome {
            Some(o) if !o.rows.is_empty() => {
                let svg = figures_dir.join(format!("{}.svg", anchor(&c.id)));
                let title = format!("{}: {}", c.id, measured_words(c));
                claim_figure(
                    &svg,
                    &ClaimFigure {
                        title: &title,
                        axis: axis_words(c),
                        rows: &o.rows,
                        band: c.band,
                        threshold: (c.expect != crate::evaluation::Expect::Within)
                            .then_some(c.threshold),
                        within: c.within,
                        colour: transport_colour(c.of.as_deref().unwrap_or("IRN")),
                        label_colours: None,
                        threshold_words: "what the claim needs",
                    },
                )
                .map_err(draw_at("drawing", &svg))?;
                let png_path = to_png(&svg)?;
                Some(Figure {
                    svg: format!(
                        "figures/{}",
                        svg.file_name()
                            .map_or(String::new(), |n| n.to_string_lossy().into())
                    ),
                    png: format!(
                        "figures/{}",
                        png_path
                            .file_name()
                            .map_or(String::new(), |n| n.to_string_lossy().into())
                    ),
                })
            }
            _ => None,
        };
        claims.push(ClaimSection {
            claim: c,
            outcome,
            figure,
        });
    }
    let scale = if args.report_only {
        "the JSON in the output directory".to_string()
    } else if args.quick {
        "quick: reduced scale".to_string()
    } else {
        "full scale".to_string()
    };
    let report = Report {
        eval,
        command: args.command.clone(),
        scale,
        claims,
        experiments,
    };
    // Figure paths in the Markdown are relative to the report; the HTML reads them from
    // the report's directory.
    std::fs::write(report_dir.join("REPORT.md"), report.markdown())
        .map_err(io_at("writing", &report_dir.join("REPORT.md")))?;
    let html = report.html(&report_dir).map_err(io_at(
        "reading the figures for",
        &report_dir.join("report.html"),
    ))?;
    std::fs::write(report_dir.join("report.html"), html)
        .map_err(io_at("writing", &report_dir.join("report.html")))?;
    let outcomes: Vec<&Outcome> = report
        .claims
        .iter()
        .filter_map(|c| c.outcome.as_ref())
        .collect();
    // Written last and whole (renamed into place): whoever waits for the report (a job that
    // follows a Slurm array) reads it complete.
    let claims = report_dir.join("claims.json");
    let tmp = report_dir.join(format!(".claims.json.{}", std::process::id()));
    std::fs::write(
        &tmp,
        serde_json::to_string_pretty(&serde_json::json!({ "claims": outcomes }))? + "\n",
    )
    .map_err(io_at("writing", &tmp))?;
    std::fs::rename(&tmp, &claims).map_err(io_at("writing", &claims))?;
    print_summary(&report).map_err(io_at(
        "writing the verdicts to",
        Path::new("standard output"),
    ))?;
    eprintln!(
        "irn reproduce: report in {} (REPORT.md, report.html)",
        report_dir.display()
    );
    let changed = report
        .claims
        .iter()
        .filter(|c| {
            c.outcome
                .as_ref()
                .is_some_and(|o| !o.verdict.is(c.claim.measured))
        })
        .count();
    if changed > 0 {
        eprintln!(
            "irn reproduce: {changed} claim(s) with a verdict other than the evaluation records"
        );
    }
    Ok(changed == 0)
}

/// What a claim's figure is of, in its title.
fn measured_words(c: &crate::evaluation::Claim) -> String {
    match c.measure {
        Measure::Ratio => format!(
            "{} ÷ {}",
            c.of.as_deref().unwrap_or_default(),
            c.to.as_deref().unwrap_or_default()
        ),
        Measure::Value => c.of.clone().unwrap_or_default(),
        Measure::DynamicRdma => "dynamic vs traditional".into(),
        Measure::NicState => format!("{} per-QP state", c.of.as_deref().unwrap_or_default()),
    }
}

fn axis_words(c: &crate::evaluation::Claim) -> &'static str {
    match c.measure {
        Measure::Ratio => "ratio (mean and range over seeds)",
        Measure::Value => "value (mean and range over seeds)",
        Measure::DynamicRdma => "change of transfer time, % (runs' range)",
        Measure::NicState => "% of an mlx5 QP context",
    }
}

/// How many runs an experiment's JSON holds and their seeds (`1–3`).
fn runs_and_seeds(doc: &serde_json::Value) -> (usize, String) {
    let Some(runs) = doc["runs"].as_array() else {
        let runs = doc["config"]["runs"].as_u64().unwrap_or(0);
        return (runs as usize, String::new());
    };
    let mut seeds: Vec<u64> = runs.iter().filter_map(|r| r["seed"].as_u64()).collect();
    seeds.sort_unstable();
    seeds.dedup();
    let s = match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) if seeds.len() as u64 == b - a + 1 => format!("{a}–{b}"),
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    (runs.len(), s)
}

fn print_summary(report: &Report<'_>) -> io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let w = report
        .claims
        .iter()
        .map(|c| c.claim.id.chars().count())
        .fold(5, usize::max);
    writeln!(
        out,
        "{:<w$} {:<30} irn: mean (least–greatest), first rows",
        "claim", "verdict"
    )?;
    for c in &report.claims {
        let (verdict, rows) = match &c.outcome {
            None => ("not run at this scale".to_string(), String::new()),
            Some(o) => {
                let mut v = o.verdict.words();
                if !o.verdict.is(c.claim.measured) {
                    v = format!("{v} (CHANGED)");
                }
                let rows: Vec<String> = o.rows.iter().take(3).map(|r| r.spread.show(2)).collect();
                (v, rows.join(" / "))
            }
        };
        writeln!(out, "{:<w$} {:<30} {}", c.claim.id, verdict, rows)?;
    }
    Ok(())
}

/// SHA-256 of the binary: a cached run is reused only by the binary that made it.
fn binary_digest(exe: &Path) -> Result<String> {
    let mut f = std::fs::File::open(exe).map_err(io_at("reading", exe))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(io_at("reading", exe))?;
    Ok(hex(&h.finalize()))
}

/// The cache key of a simulator run: the binary, the run's whole configuration, and the
/// content of every file it names (a topology, a flow list, a size distribution), so that
/// editing one of them makes the run again.
fn run_key(binary: &str, run: &SimConfig) -> Result<String> {
    let config = serde_json::to_value(run)?;
    let mut text = serde_json::to_string(&config)?;
    let mut files = Vec::new();
    strings_of(&config, &mut files);
    for name in files {
        let path = run.resolve(Path::new(&name));
        if path.is_file() {
            let bytes = std::fs::read(&path).map_err(io_at("reading", &path))?;
            text.push_str(&format!("\n{name}\n"));
            text.push_str(&hex(&Sha256::digest(&bytes)));
        }
    }
    Ok(digest(binary, &text))
}

/// Every string in a JSON value (a configuration's path-like values among them).
fn strings_of(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) if !s.is_empty() => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|i| strings_of(i, out)),
        serde_json::Value::Object(map) => map.values().for_each(|i| strings_of(i, out)),
        _ => {}
    }
}

/// The cache key of a run: the binary's digest and the run's whole configuration.
fn digest(binary: &str, config: &str) -> String {
    let mut h = Sha256::new();
    h.update(binary.as_bytes());
    h.update(b"\n");
    h.update(config.as_bytes());
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the Slurm script of `--slurm`: run as a script, it submits itself as a job array of
/// one task per experiment and then the report as a job that waits for the array.
fn write_slurm(args: &Options, script: &Path, selected: &[&Experiment]) -> Result<bool> {
    if selected.is_empty() {
        return Err(ReproduceError::Usage(
            "--slurm: no experiment to run (under --quick, those named are all quick_skip)".into(),
        ));
    }
    let exe = &args.binary;
    let abs = |p: &Path| -> Result<PathBuf> {
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(io_at("finding the directory of", p))?
                .join(p)
        })
    };
    let out = abs(&args.out)?;
    let evaluation = abs(&args.evaluation)?;
    // The arguments every job passes, each quoted for the shell (ids are letters, digits and
    // `.-_` by the evaluation's rules; paths may hold anything).
    let mut common = vec![
        "--out".to_string(),
        shell_quote(&out.display().to_string()),
        "--evaluation".to_string(),
        shell_quote(&evaluation.display().to_string()),
    ];
    if args.quick {
        common.push("--quick".into());
    }
    if let Some(s) = &args.seeds {
        common.push("--seeds".into());
        common.push(shell_quote(s));
    }
    let common = common.join(" ");
    let ids: Vec<String> = selected.iter().map(|e| shell_quote(&e.id)).collect();
    let only: Vec<&str> = selected.iter().map(|e| e.id.as_str()).collect();
    let text = format!(
        r#"#!/usr/bin/env bash
# irn reproduce as a Slurm job array, written by `{cmd}`.
# Run it (bash {script}) to submit one array task per experiment, then the report, which
# waits for every task. The tasks share {out}/.cache, so a task that fails can be rerun
# alone and a finished run is never made twice.
#SBATCH --job-name=irn-reproduce
#SBATCH --cpus-per-task=2
#SBATCH --output={out}/slurm-%A_%a.out
set -euo pipefail
IRN={exe}
ids=({ids})
if [ -z "${{SLURM_ARRAY_TASK_ID:-}}" ]; then
    mkdir -p {out}
    array=$(sbatch --parsable --array=0-$((${{#ids[@]}} - 1)) "$0")
    # The report job's command, each word quoted again for the shell `--wrap` starts.
    wrap=$(printf '%q ' "$IRN" reproduce {common} --only {only} -q)
    report=$(sbatch --parsable --dependency=afterok:"${{array%%;*}}" --job-name=irn-report \
        --output={out}/slurm-report-%j.out --wrap "$wrap")
    echo "irn reproduce: array job $array, report job $report"
    exit 0
fi
exec "$IRN" reproduce {common} --only "${{ids[$SLURM_ARRAY_TASK_ID]}}" \
    --jobs "${{SLURM_CPUS_PER_TASK:-1}}" --no-report -q
"#,
        cmd = args.command,
        script = script.display(),
        out = shell_quote(&out.display().to_string()),
        exe = shell_quote(&exe.display().to_string()),
        ids = ids.join(" "),
        common = common,
        only = only.join(","),
    );
    std::fs::create_dir_all(&out).map_err(io_at("creating", &out))?;
    std::fs::write(script, text).map_err(io_at("writing", script))?;
    eprintln!(
        "irn reproduce: wrote {} ({} array task(s)); submit with: bash {}",
        script.display(),
        selected.len(),
        script.display()
    );
    Ok(true)
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_key_changes_with_the_binary_and_the_configuration() {
        let a = digest("bin1", "{\"seed\":1}");
        assert_eq!(a.len(), 64);
        assert_eq!(a, digest("bin1", "{\"seed\":1}"));
        assert_ne!(a, digest("bin2", "{\"seed\":1}"));
        assert_ne!(a, digest("bin1", "{\"seed\":2}"));
    }

    #[test]
    fn seeds_are_written_as_a_range_when_they_are_one() {
        let doc = serde_json::json!({"runs": [{"seed": 2}, {"seed": 1}, {"seed": 3}, {"seed": 1}]});
        assert_eq!(runs_and_seeds(&doc), (4, "1–3".to_string()));
        let doc = serde_json::json!({"runs": [{"seed": 1}, {"seed": 4}]});
        assert_eq!(runs_and_seeds(&doc).1, "1, 4");
    }

    #[test]
    fn shell_words_are_quoted_only_when_they_need_it() {
        assert_eq!(shell_quote("e1-e3"), "e1-e3");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
