//! `irn sim`: run an experiment (the built-in E1–E3 comparison by default), in parallel, with
//! progress, and print the table of the paper's three metrics with ratios to a baseline.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use irn_report::experiment::{self, ShardInfo};
use irn_report::plot::{draw_figures, FigurePaths};
use irn_report::tables;
use irn_sim::config::{load_experiment, SimConfig};
use irn_sim::metrics::{write_csv, RunSummary};
use irn_sim::RunOutput;

/// The experiment `irn sim` runs without a file: E1–E3 at a scale that takes about a minute.
pub const DEFAULT_EXPERIMENT: &str = include_str!("../experiments/default.toml");

/// Options of `irn sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// Experiment file (TOML; see docs/SIMULATOR.md). Absent: the built-in default.
    pub file: Option<PathBuf>,
    /// Seed of every run: replays that one seed (overrides the file's `seed` and `seeds`).
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// Run every configuration once per seed: a count N (seeds 1 to N) or a list (`1,4,9`);
    /// overrides the file's `seeds`. The table and the JSON (`over_seeds`) then give each
    /// configuration's mean and range over its seeds, and the figures draw the range.
    #[arg(long, value_name = "N|LIST", value_parser = parse_seeds)]
    pub seeds: Option<String>,
    /// Write `{"runs": [...]}` with one summary object per run.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Write per-flow records, one CSV per run, into this directory.
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,
    /// Override a configuration key of every run, e.g. `--set workload.load=0.5`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Runs in parallel (default: all cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Threads each run uses (the network cut into that many partitions; same results for
    /// every value). Same as `--set threads=N`; default: the file's, or 1.
    #[arg(long)]
    pub threads: Option<usize>,
    /// The ratio columns' baseline and the figures.
    #[command(flatten)]
    pub figures: Figures,
    /// Write the per (node, port, priority) counters sampled every `monitor_interval_us`
    /// (default 1000 µs when the file sets none) as CSV (SPEC N9).
    #[arg(long, value_name = "FILE.csv")]
    pub monitor: Option<PathBuf>,
    /// Draw every run's fabric timeline (goodput, hosts paused, pause frames per second over
    /// time) as an SVG; samples every `monitor_interval_us` (default 1000 µs when the file
    /// sets none).
    #[arg(long, value_name = "OUT.svg")]
    pub timeline: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
    /// Run only slice I of N (`I/N`, I from 0): the experiment's runs I, I + N, I + 2N, … —
    /// disjoint, deterministic slices whose `--json` files `irn merge` combines into exactly
    /// the JSON of the whole experiment (`scripts/slurm-sweep.sh` runs one per array task).
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
}

/// The baseline of the ratio columns and the figures drawn from a finished experiment — the
/// same for `irn sim` and `irn merge`.
#[derive(clap::Args)]
pub struct Figures {
    /// The run the ratios compare with (default: for each run, the first RoCE run with PFC of
    /// its scenario and congestion control).
    #[arg(long)]
    pub baseline: Option<String>,
    /// Draw the three metrics of every run, relative to its baseline, as an SVG.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Draw the tail (90th to 99.9th percentile) of single-packet flows' completion times,
    /// one panel per congestion controller (SPEC E7), as an SVG.
    #[arg(long, value_name = "OUT.svg")]
    pub tail_cdf: Option<PathBuf>,
    /// Draw RoCE+PFC ÷ each run per scenario (`[[variant]]` and sweep point, seeds pooled:
    /// mean and range), one panel per metric (E6), as an SVG.
    #[arg(long, value_name = "OUT.svg")]
    pub ratio_plot: Option<PathBuf>,
}

impl Figures {
    /// Prints the table (all of it, or only the one over seeds) and draws the figures asked
    /// for.
    fn show(&self, summaries: &[RunSummary], over_seeds_only: bool) -> Result<()> {
        let stdout = std::io::stdout();
        if over_seeds_only {
            if !irn_report::seeds::has_seeds(summaries) {
                bail!("--over-seeds: no configuration of these runs was run over several seeds");
            }
            tables::over_seeds(&mut stdout.lock(), summaries, self.baseline.as_deref())?;
        } else {
            tables::experiment(&mut stdout.lock(), summaries, self.baseline.as_deref())?;
        }
        draw_figures(
            summaries,
            self.baseline.as_deref(),
            &FigurePaths {
                plot: self.plot.as_deref(),
                tail_cdf: self.tail_cdf.as_deref(),
                ratio_plot: self.ratio_plot.as_deref(),
                timeline: None,
            },
        )?;
        Ok(())
    }
}

/// A slice of an experiment's runs (`--shard I/N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, 0 to `count − 1`.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

/// `--seeds N` or `--seeds a,b,c` as the TOML value of the experiment's `seeds` key.
pub(crate) fn parse_seeds(s: &str) -> std::result::Result<String, String> {
    let bad = || format!("--seeds takes a count (3) or a list of seeds (1,4,9), not `{s}`");
    let parts: Vec<u64> = s
        .split(',')
        .map(|p| p.trim().parse::<u64>().map_err(|_| bad()))
        .collect::<std::result::Result<_, _>>()?;
    match &parts[..] {
        [n] if *n == 0 => Err(bad()),
        [n] if !s.contains(',') => Ok(n.to_string()),
        list => Ok(format!(
            "[{}]",
            list.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn parse_shard(s: &str) -> std::result::Result<Shard, String> {
    let bad = || format!("--shard takes I/N with 0 ≤ I < N (e.g. 0/4), not `{s}`");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

pub fn run(args: SimArgs) -> Result<bool> {
    let (text, origin, dir) = match &args.file {
        Some(f) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            let dir = f
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            (text, f.display().to_string(), dir)
        }
        None => (
            DEFAULT_EXPERIMENT.to_string(),
            "built-in default experiment".to_string(),
            PathBuf::from("."),
        ),
    };
    if let Ok(t) = toml::from_str::<toml::Table>(&text) {
        if t.contains_key("experiment") && t.contains_key("claim") {
            bail!(
                "{origin} is an evaluation (its experiments and claims), not an experiment: \
                 run it with `irn reproduce --evaluation {origin}`"
            );
        }
    }
    if irn_sim::drp::DrpExperiment::is_kind(&text) {
        if args.shard.is_some() {
            bail!("--shard: a dynamic-RDMA experiment ({origin}) runs as one piece");
        }
        let opts = crate::drp_sim::Options {
            sets: &args.sets,
            seed: args.seed,
            jobs: args.jobs,
            quiet: args.quiet,
            json: args.json.as_deref(),
            plot: args.figures.plot.as_deref(),
            csv: args.csv.is_some(),
        };
        return crate::drp_sim::run(&opts, &text, &origin);
    }
    let mut sets = args.sets.clone();
    if let Some(t) = args.threads {
        sets.push(format!("threads={t}"));
    }
    if let Some(s) = &args.seeds {
        sets.push(format!("seeds={s}"));
    }
    let mut exp = load_experiment(&text, &origin, &dir, &sets, args.seed)?;
    if args.monitor.is_some() || args.timeline.is_some() {
        for r in &mut exp.runs {
            r.monitor_interval_us.get_or_insert(1000.0);
        }
    }
    let shard = args.shard.map(|sh| {
        let info = ShardInfo::new(sh.index, sh.count, exp.runs.len());
        exp.runs = info
            .positions
            .iter()
            .map(|&i| exp.runs[i].clone())
            .collect();
        info
    });
    let outputs = run_all(&exp.runs, args.jobs, args.quiet)?;
    let summaries: Vec<RunSummary> = outputs.iter().map(|o| o.summary.clone()).collect();
    if let Some(path) = &args.json {
        let doc = match &shard {
            Some(info) => serde_json::json!({ "runs": summaries, "shard": info }),
            None => experiment::doc(&summaries, args.figures.baseline.as_deref()),
        };
        experiment::write_doc(path, &doc).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.csv {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for o in &outputs {
            let name: String = o
                .summary
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = dir.join(format!("{name}.csv"));
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(&path)
                    .with_context(|| format!("creating {}", path.display()))?,
            );
            write_csv(&mut f, &o.records)?;
            f.flush()?;
        }
    }
    if let Some(path) = &args.monitor {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        for (i, o) in outputs.iter().enumerate() {
            irn_sim::metrics::write_monitor_csv(
                &mut f,
                &o.summary.name,
                &o.monitor,
                &o.node_names,
                i == 0,
            )?;
        }
        f.flush()?;
    }
    args.figures.show(&summaries, false)?;
    if let Some(path) = &args.timeline {
        draw_figures(
            &summaries,
            None,
            &FigurePaths {
                timeline: Some(path),
                ..FigurePaths::default()
            },
        )?;
    }
    // Success means every flow of every run completed intact.
    Ok(summaries
        .iter()
        .all(|s| s.flows_failed == 0 && s.flows_corrupted == 0))
}

fn run_all(runs: &[SimConfig], jobs: Option<usize>, quiet: bool) -> Result<Vec<RunOutput>> {
    let jobs = jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, runs.len().max(1));
    let multi = MultiProgress::new();
    if quiet {
        multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let style = ProgressStyle::with_template("{prefix:>24} [{bar:30}] {percent:>3}% {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bars: Vec<ProgressBar> = runs
        .iter()
        .map(|r| {
            let b = multi.add(ProgressBar::new(1000));
            b.set_style(style.clone());
            b.set_prefix(r.name.clone());
            b
        })
        .collect();
    let results = irn_sim::pool::map(runs, jobs, |i, cfg| {
        let bar = &bars[i];
        let r = irn_sim::run(cfg, |f| bar.set_position((f * 1000.0) as u64))
            .with_context(|| format!("run '{}'", cfg.name));
        bar.finish();
        r
    });
    let out = results.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(out)
}

/// Options of `irn merge`.
#[derive(clap::Args)]
pub struct MergeArgs {
    /// Where the whole experiment's JSON goes.
    pub out: PathBuf,
    /// Every slice's JSON (`irn sim FILE --shard I/N --json …`), in any order — or one whole
    /// experiment's JSON, whose table and figures are then made again.
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// The ratio columns' baseline and the figures, as `irn sim` draws them.
    #[command(flatten)]
    pub figures: Figures,
    /// Print only the table over seeds (each configuration's mean and range), the form the
    /// experiments' READMEs quote (tests/readme_tables.rs keeps them equal to their JSON).
    #[arg(long)]
    pub over_seeds: bool,
}

/// `irn merge`: puts the slices of a sharded experiment back together, in the experiment's
/// order — the JSON an unsharded run writes (wall times aside: each slice ran on its own) —
/// and prints its table. Every slice must be there, once, and all of one split.
pub fn merge(args: MergeArgs) -> Result<bool> {
    if let [only] = &args.shards[..] {
        // One whole experiment's JSON (no `shard` object): copied, its table printed and its
        // figures drawn again — how a figure is redrawn without rerunning the experiment.
        let text =
            std::fs::read_to_string(only).with_context(|| format!("reading {}", only.display()))?;
        let doc: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", only.display()))?;
        if doc.get("shard").is_none_or(serde_json::Value::is_null) {
            let runs = doc["runs"]
                .as_array()
                .with_context(|| format!("{}: no `runs` array", only.display()))?;
            return write_merged(&args, runs.clone());
        }
    }
    let mut slices = Vec::new();
    for path in &args.shards {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let doc: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        slices.push((path.display().to_string(), doc));
    }
    write_merged(&args, experiment::merge(slices)?)
}

/// Writes the whole experiment's JSON of `runs`, prints its table and draws its figures.
fn write_merged(args: &MergeArgs, runs: Vec<serde_json::Value>) -> Result<bool> {
    let summaries: Vec<RunSummary> = runs
        .iter()
        .map(|r| serde_json::from_value(r.clone()))
        .collect::<std::result::Result<_, _>>()
        .context("a run summary that irn cannot read back (written by another version?)")?;
    let mut doc = experiment::doc(&summaries, args.figures.baseline.as_deref());
    // The runs as they were read, byte for byte (a field this version does not know stays).
    doc["runs"] = serde_json::Value::Array(runs);
    experiment::write_doc(&args.out, &doc)
        .with_context(|| format!("writing {}", args.out.display()))?;
    args.figures.show(&summaries, args.over_seeds)?;
    Ok(summaries
        .iter()
        .all(|s| s.flows_failed == 0 && s.flows_corrupted == 0))
}
