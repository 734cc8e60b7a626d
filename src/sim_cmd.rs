//! `irn sim`: run an experiment (the built-in E1–E3 comparison by default), in parallel, with
//! progress, and print the table of the paper's three metrics with ratios to a baseline.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
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
            seeds_table(&mut stdout.lock(), summaries, self.baseline.as_deref())?;
        } else {
            print_table(&mut stdout.lock(), summaries, self.baseline.as_deref())?;
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
        )
    }
}

/// Where an experiment's figures go (none drawn where `None`).
#[derive(Default)]
pub(crate) struct FigurePaths<'a> {
    pub plot: Option<&'a Path>,
    pub tail_cdf: Option<&'a Path>,
    pub ratio_plot: Option<&'a Path>,
    pub timeline: Option<&'a Path>,
}

/// Draws an experiment's figures from its runs, as `irn sim`'s flags of the same names do.
pub(crate) fn draw_figures(
    summaries: &[RunSummary],
    baseline: Option<&str>,
    paths: &FigurePaths<'_>,
) -> Result<()> {
    if let Some(path) = paths.plot {
        // An incast experiment (E8) is drawn as the paper's Figure 9: RCT against M.
        if summaries.iter().all(|r| r.incast.is_some()) {
            irn_report::plot::incast_plot(path, summaries).with_context(|| figure(path))?;
        } else if summaries.iter().all(|r| !r.classes.is_empty()) {
            // Traffic classes side by side: each class's own figures.
            irn_report::plot::class_bars(path, summaries).with_context(|| figure(path))?;
        } else {
            irn_report::plot::bars(path, summaries, baseline).with_context(|| figure(path))?;
        }
    }
    if let Some(path) = paths.tail_cdf {
        irn_report::plot::tail_cdf(path, summaries).with_context(|| figure(path))?;
    }
    if let Some(path) = paths.ratio_plot {
        irn_report::plot::ratio_plot(path, summaries).with_context(|| figure(path))?;
    }
    if let Some(path) = paths.timeline {
        irn_report::plot::timeline(path, summaries).with_context(|| figure(path))?;
    }
    Ok(())
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

/// What a shard's JSON adds to `{"runs": [...]}`: which slice it is and where its runs go.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
struct ShardInfo {
    index: usize,
    count: usize,
    /// The experiment's runs, all slices together.
    runs_total: usize,
    /// Each run's position in the whole experiment.
    positions: Vec<usize>,
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
        let total = exp.runs.len();
        let positions: Vec<usize> = (sh.index..total).step_by(sh.count).collect();
        exp.runs = positions.iter().map(|&i| exp.runs[i].clone()).collect();
        ShardInfo {
            index: sh.index,
            count: sh.count,
            runs_total: total,
            positions,
        }
    });
    let outputs = run_all(&exp.runs, args.jobs, args.quiet)?;
    let summaries: Vec<RunSummary> = outputs.iter().map(|o| o.summary.clone()).collect();
    if let Some(path) = &args.json {
        let doc = match &shard {
            Some(info) => serde_json::json!({ "runs": summaries, "shard": info }),
            None => seeds_doc(&summaries, args.figures.baseline.as_deref()),
        };
        write_doc(path, &doc)?;
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

/// The context of a figure's error: which file.
fn figure(path: &Path) -> String {
    format!("drawing {}", path.display())
}

fn print_table(out: &mut dyn Write, runs: &[RunSummary], base: Option<&str>) -> Result<()> {
    let label = irn_report::plot::baseline_label(runs, base);
    writeln!(
        out,
        "{:<22} {:>8} {:>10} {:>12} {:>12} {:>9} {:>8} {:>8}   {}",
        "run",
        "flows",
        "avg slowdn",
        "avg FCT µs",
        "p99 FCT µs",
        "drop rate",
        "pauses",
        "wall s",
        label.map_or(String::new(), |l| format!(
            "÷ {l}: slowdown / avg FCT / p99 FCT"
        ))
    )?;
    for r in runs {
        let ratio = irn_report::plot::baseline_of(runs, r, base).map_or(String::new(), |b| {
            let q = |a: f64, c: f64| {
                if c > 0.0 {
                    format!("{:.2}", a / c)
                } else {
                    "-".into()
                }
            };
            format!(
                "{} / {} / {}",
                q(r.all.avg_slowdown, b.all.avg_slowdown),
                q(r.all.avg_fct_us, b.all.avg_fct_us),
                q(r.all.p99_fct_us, b.all.p99_fct_us)
            )
        });
        let mut unfinished = if r.flows_unfinished + r.flows_failed > 0 {
            format!(
                " ({} unfinished, {} failed)",
                r.flows_unfinished, r.flows_failed
            )
        } else {
            String::new()
        };
        if r.deadlocked {
            unfinished += &format!(
                " DEADLOCK at {:.1} ms{}: {}",
                r.safety.deadlock_at_ms.unwrap_or(0.0),
                if r.safety.deadlock_at_end {
                    ", still at the end"
                } else {
                    ""
                },
                r.deadlock_cycle.join(" → ")
            );
        }
        if r.watchdog_triggers > 0 {
            unfinished += &format!(
                " watchdogs: {} NIC, {} switch",
                r.safety.counts.nic_watchdog, r.safety.counts.switch_watchdog
            );
        }
        writeln!(
            out,
            "{:<22} {:>8} {:>10.3} {:>12.1} {:>12.1} {:>8.3}% {:>8} {:>8.1}   {}{}",
            r.name,
            r.flows_completed,
            r.all.avg_slowdown,
            r.all.avg_fct_us,
            r.all.p99_fct_us,
            r.drop_rate * 100.0,
            r.pause_frames,
            r.wall_s,
            ratio,
            unfinished
        )?;
    }
    if irn_report::seeds::has_seeds(runs) {
        writeln!(out)?;
        seeds_table(out, runs, base)?;
    }
    if runs.iter().any(|r| !r.classes.is_empty()) {
        class_table(out, runs)?;
    }
    for r in runs.iter().filter(|r| !r.safety.config_findings.is_empty()) {
        writeln!(out, "\n{}: the configuration monitor found", r.name)?;
        for f in &r.safety.config_findings {
            let port = f.port.map_or(String::new(), |p| format!(" port {p}"));
            let cleared = f.cleared_ms.map_or("still at the end".to_string(), |c| {
                format!("set right by {c:.2} ms")
            });
            writeln!(
                out,
                "  {}{port} {}: runs {}, intended {}; found at {:.2} ms, {cleared}",
                f.node, f.key, f.running, f.intended, f.found_ms
            )?;
        }
    }
    for r in runs {
        if let Some(pm) = &r.pingmesh {
            pingmesh_table(out, &r.name, pm)?;
        }
    }
    Ok(())
}

/// Every configuration over its seeds: the mean and, in brackets, the range of its flows,
/// the paper's three metrics, its drop rate and pause frames, and of its ratios to its
/// baseline (each taken within one seed).
fn seeds_table(out: &mut dyn Write, runs: &[RunSummary], base: Option<&str>) -> Result<()> {
    let groups = irn_report::seeds::over_seeds(runs, base);
    let width = groups
        .iter()
        .map(|g| g.name.chars().count())
        .fold(22, usize::max);
    writeln!(
        out,
        "over seeds: mean (least–greatest)\n{:<width$} {:>7} {:>24} {:>26} {:>26} {:>22} {:>8}   {}",
        "run",
        "seeds",
        "avg slowdown",
        "avg FCT µs",
        "p99 FCT µs",
        "drop rate %",
        "pauses",
        irn_report::plot::baseline_label(runs, base)
            .map_or(String::new(), |l| format!("÷ {l}: slowdown / avg FCT / p99 FCT"))
    )?;
    let show = |g: &irn_report::seeds::SeedGroup, key: &str, digits: usize, scale: f64| {
        g.metric(key).map_or("-".to_string(), |s| {
            irn_report::seeds::Spread {
                mean: s.mean * scale,
                min: s.min * scale,
                max: s.max * scale,
            }
            .show(digits)
        })
    };
    for g in &groups {
        // The three ratios under `prefix` (`""`, or `"with_unfinished."`): slowdown / FCTs.
        let three = |prefix: &str| {
            let r = |k: &str| {
                g.ratios
                    .get(&format!("{prefix}{k}"))
                    .map_or("-".to_string(), |s| s.show(2))
            };
            format!(
                "{} / {} / {}",
                r("avg_slowdown"),
                r("avg_fct_us"),
                r("p99_fct_us")
            )
        };
        let ratios = if g.ratios.is_empty() {
            String::new()
        } else {
            three("")
        };
        let mut left = Vec::new();
        for (key, what) in [
            ("flows_unfinished", "unfinished"),
            ("flows_failed", "failed"),
        ] {
            if let Some(u) = g.metric(key).filter(|u| u.max > 0.0) {
                left.push(format!("{what} {}", u.show(1)));
            }
        }
        if g.ratios.contains_key("with_unfinished.avg_slowdown") {
            left.push(format!("counting them: {}", three("with_unfinished.")));
        }
        if let Some(d) = g.metric("deadlocked").filter(|d| d.max > 0.0) {
            let n = (d.mean * g.seeds.len() as f64).round();
            left.push(format!("deadlocked in {n} of {}", g.seeds.len()));
        }
        let unfinished = if left.is_empty() {
            String::new()
        } else {
            format!(" ({})", left.join(", "))
        };
        let line = format!(
            "{:<width$} {:>7} {:>24} {:>26} {:>26} {:>22} {:>8}   {}{}",
            g.name,
            g.seeds.len(),
            show(g, "avg_slowdown", 3, 1.0),
            show(g, "avg_fct_us", 1, 1.0),
            show(g, "p99_fct_us", 1, 1.0),
            show(g, "drop_rate", 3, 100.0),
            show(g, "pause_frames", 0, 1.0),
            ratios,
            unfinished
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Per traffic class of each run with `[[traffic]]`: its transport and priority, its flows'
/// slowdown and FCTs, its goodput, and the pause time its senders saw.
fn class_table(out: &mut dyn Write, runs: &[RunSummary]) -> Result<()> {
    writeln!(
        out,
        "\n{:<22} {:<20} {:<10} {:>4} {:>7} {:>10} {:>12} {:>12} {:>9} {:>9} {:>11}",
        "run",
        "class",
        "transport",
        "prio",
        "flows",
        "avg slowdn",
        "avg FCT µs",
        "p99 FCT µs",
        "Gb/s",
        "resent",
        "paused µs"
    )?;
    for r in runs {
        for c in &r.classes {
            let unfinished = if c.flows_unfinished + c.flows_failed > 0 {
                format!(
                    " ({} unfinished, {} failed)",
                    c.flows_unfinished, c.flows_failed
                )
            } else {
                String::new()
            };
            writeln!(
                out,
                "{:<22} {:<20} {:<10} {:>3}{} {:>7} {:>10.3} {:>12.1} {:>12.1} {:>9.2} {:>9} {:>11.1}{}",
                r.name,
                c.name,
                c.transport,
                c.priority,
                if c.lossless { "L" } else { " " },
                c.flows_completed,
                c.stats.avg_slowdown,
                c.stats.avg_fct_us,
                c.stats.p99_fct_us,
                c.goodput_gbps,
                c.retransmissions,
                c.paused_us,
                unfinished
            )?;
        }
    }
    Ok(())
}

/// Pingmesh's summary of one run: RTT percentiles per level, the errors, the suspects.
fn pingmesh_table(
    out: &mut dyn Write,
    run: &str,
    pm: &irn_sim::metrics::PingmeshReport,
) -> Result<()> {
    writeln!(
        out,
        "\npingmesh, {run}: {} probes, {} failed",
        pm.probes, pm.failed
    )?;
    writeln!(
        out,
        "  level    probes  failed   p50 µs   p90 µs   p99 µs p99.9 µs   max µs"
    )?;
    for l in &pm.levels {
        writeln!(
            out,
            "  {:<7} {:>7} {:>7} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            l.level, l.probes, l.failed, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
        )?;
    }
    if !pm.errors.is_empty() {
        let e: Vec<String> = pm.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "  errors: {}", e.join(", "))?;
    }
    if pm.suspects.is_empty() {
        writeln!(out, "  suspects: none")?;
    }
    for s in &pm.suspects {
        writeln!(out, "  suspect: server {}: {}", s.server, s.reason)?;
    }
    Ok(())
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
    let mut total: Option<(usize, usize)> = None;
    let mut seen = std::collections::BTreeMap::new();
    let mut slots: Vec<Option<serde_json::Value>> = Vec::new();
    for path in &args.shards {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut doc: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        let info: ShardInfo = serde_json::from_value(doc["shard"].take()).with_context(|| {
            format!(
                "{}: no `shard` object (written by `irn sim --shard I/N --json`?)",
                path.display()
            )
        })?;
        match total {
            None => {
                total = Some((info.count, info.runs_total));
                slots = vec![None; info.runs_total];
            }
            Some(t) if t != (info.count, info.runs_total) => bail!(
                "{}: slice {}/{} of {} runs, but the first file is of {}/{} runs: not one split",
                path.display(),
                info.index,
                info.count,
                info.runs_total,
                t.0,
                t.1
            ),
            Some(_) => {}
        }
        if let Some(other) = seen.insert(info.index, path.clone()) {
            bail!(
                "slice {} twice: {} and {}",
                info.index,
                other.display(),
                path.display()
            );
        }
        let runs = doc["runs"]
            .as_array()
            .with_context(|| format!("{}: no `runs` array", path.display()))?;
        let want: Vec<usize> = (info.index..info.runs_total).step_by(info.count).collect();
        if info.positions != want || runs.len() != want.len() {
            bail!(
                "{}: slice {}/{} should hold runs {want:?}, holds {:?} ({} summaries)",
                path.display(),
                info.index,
                info.count,
                info.positions,
                runs.len()
            );
        }
        for (&pos, run) in info.positions.iter().zip(runs) {
            slots[pos] = Some(run.clone());
        }
    }
    let (count, _) = total.context("no slices given")?;
    let missing: Vec<usize> = (0..count).filter(|i| !seen.contains_key(i)).collect();
    if !missing.is_empty() {
        bail!("slices {missing:?} of {count} missing");
    }
    write_merged(&args, slots.into_iter().flatten().collect())
}

/// Writes an experiment's JSON with one line per run (and per entry of every other list of
/// objects): a run's per-port counters make it hundreds of lines when indented, and an
/// experiment over seeds holds dozens of runs. Any JSON reader reads it alike.
pub(crate) fn write_doc(path: &Path, doc: &serde_json::Value) -> Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let serde_json::Value::Object(map) = doc else {
        serde_json::to_writer(&mut f, doc)?;
        writeln!(f)?;
        return Ok(());
    };
    write!(f, "{{")?;
    for (i, (key, value)) in map.iter().enumerate() {
        write!(
            f,
            "{}\n{}: ",
            if i == 0 { "" } else { "," },
            serde_json::Value::from(key.as_str())
        )?;
        match value {
            serde_json::Value::Array(items) if items.iter().all(|v| v.is_object()) => {
                write!(f, "[")?;
                for (j, item) in items.iter().enumerate() {
                    writeln!(f, "{}", if j == 0 { "" } else { "," })?;
                    serde_json::to_writer(&mut f, item)?;
                }
                write!(f, "\n]")?;
            }
            other => serde_json::to_writer(&mut f, other)?,
        }
    }
    writeln!(f, "\n}}")?;
    f.flush()?;
    Ok(())
}

/// An experiment's JSON: `{"runs": [...]}`, and when some run was run over several seeds,
/// `"over_seeds"`: each configuration's mean and range over its seeds
/// ([`irn_report::seeds::SeedGroup`]).
pub(crate) fn seeds_doc(summaries: &[RunSummary], baseline: Option<&str>) -> serde_json::Value {
    if irn_report::seeds::has_seeds(summaries) {
        let groups = irn_report::seeds::over_seeds(summaries, baseline);
        serde_json::json!({ "runs": summaries, "over_seeds": groups })
    } else {
        serde_json::json!({ "runs": summaries })
    }
}

/// Writes the whole experiment's JSON of `runs`, prints its table and draws its figures.
fn write_merged(args: &MergeArgs, runs: Vec<serde_json::Value>) -> Result<bool> {
    let summaries: Vec<RunSummary> = runs
        .iter()
        .map(|r| serde_json::from_value(r.clone()))
        .collect::<std::result::Result<_, _>>()
        .context("a run summary that irn cannot read back (written by another version?)")?;
    let mut doc = seeds_doc(&summaries, args.figures.baseline.as_deref());
    // The runs as they were read, byte for byte (a field this version does not know stays).
    doc["runs"] = serde_json::Value::Array(runs);
    write_doc(&args.out, &doc)?;
    args.figures.show(&summaries, args.over_seeds)?;
    Ok(summaries
        .iter()
        .all(|s| s.flows_failed == 0 && s.flows_corrupted == 0))
}
