//! `irn sim` on an E12 file (`kind = "dynamic-rdma"`): dynamic against traditional RDMA on a
//! point-to-point link ([`irn_sim::drp`]), printed as a table per series, written as JSON, and
//! drawn as one panel of transfer time per series.

use std::io::Write;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use irn_sim::drp::{all_intact, run_experiment, DrpExperiment};

/// What `irn sim` asks of a dynamic-RDMA experiment: its command line's options that apply.
pub struct Options<'a> {
    /// `--set KEY=VALUE`s.
    pub sets: &'a [String],
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--jobs` (default: every core).
    pub jobs: Option<usize>,
    /// `-q`: no progress bar.
    pub quiet: bool,
    /// `--json FILE`.
    pub json: Option<&'a std::path::Path>,
    /// `--plot FILE`.
    pub plot: Option<&'a std::path::Path>,
    /// `--csv` was given (there are no per-flow records to write).
    pub csv: bool,
}

/// Runs the experiment; `Ok(false)` if a transfer failed or arrived corrupted.
pub fn run(args: &Options<'_>, text: &str, origin: &str) -> Result<bool> {
    let exp = DrpExperiment::load(text, origin, args.sets, args.seed)?;
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(1000)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>24} [{bar:30}] {percent:>3}% {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(exp.name.clone());
    let report = run_experiment(&exp, threads, &|f| bar.set_position((f * 1000.0) as u64));
    bar.finish_and_clear();
    let stdout = std::io::stdout();
    irn_report::drp::table(&mut stdout.lock(), &report)?;
    if let Some(path) = args.json {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(&mut f, &report)?;
        writeln!(f)?;
    }
    if let Some(path) = args.plot {
        irn_report::drp::figure(path, &report)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    if args.csv {
        eprintln!("note: --csv has no per-flow records for a dynamic-rdma experiment");
    }
    let ok = all_intact(&report);
    if !ok {
        eprintln!("error: some transfers failed or arrived corrupted (see `failed`, `corrupted`)");
    }
    Ok(ok)
}
