//! `irn reproduce`: the whole evaluation in one command ([`irn_report::reproduce`]).

use std::path::PathBuf;

use anyhow::{Context, Result};
use irn_report::reproduce::{self, Options};

/// Options of `irn reproduce`.
#[derive(clap::Args)]
pub struct ReproduceArgs {
    /// Every experiment at the reduced scale its `quick` keys give (fewer seeds, shorter
    /// runs, fewer variants): checks the direction of every claim marked `quick` in minutes.
    #[arg(long)]
    pub quick: bool,
    /// Seeds of every simulator experiment: a count N (seeds 1 to N) or a list (`1,4,9`)
    /// (default: each experiment's own, 3 or 5; under --quick, the quick keys').
    #[arg(long, value_name = "N|LIST", value_parser = crate::sim_cmd::parse_seeds)]
    pub seeds: Option<String>,
    /// Only these experiments or claims (comma-separated; a claim brings its experiment:
    /// `--only E1,E6,e11-storm`).
    #[arg(long, value_delimiter = ',', value_name = "ID,…")]
    pub only: Vec<String>,
    /// Runs in parallel (default: all cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Where the experiments' JSON and figures, the report and the cache of finished runs go.
    #[arg(long, default_value = "reproduce", value_name = "DIR")]
    pub out: PathBuf,
    /// The evaluation: its experiments and claims.
    #[arg(
        long,
        default_value = "experiments/evaluation.toml",
        value_name = "FILE"
    )]
    pub evaluation: PathBuf,
    /// Run nothing: make the figures and the report from the JSON already in DIR (with
    /// `--out experiments`, the committed evaluation's; with `--quick`, a quick run's, whose
    /// claims left out of `--quick` are not judged).
    #[arg(long, conflicts_with_all = ["seeds", "slurm"])]
    pub report_only: bool,
    /// Run, write each experiment's JSON and figures, but no report (a Slurm array task).
    #[arg(long)]
    pub no_report: bool,
    /// Write a Slurm batch script that runs the evaluation as a job array (one task per
    /// experiment, sharing DIR's cache) and then the report, and exit; run the script
    /// (`bash FILE`) to submit both.
    #[arg(long, value_name = "FILE.sh")]
    pub slurm: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: ReproduceArgs) -> Result<bool> {
    let options = Options {
        quick: args.quick,
        seeds: args.seeds,
        only: args.only,
        jobs: args.jobs,
        out: args.out,
        evaluation: args.evaluation,
        report_only: args.report_only,
        no_report: args.no_report,
        slurm: args.slurm,
        quiet: args.quiet,
        binary: std::env::current_exe().context("finding this binary")?,
        command: command_line(),
    };
    Ok(reproduce::run(&options)?)
}

/// This invocation as a command line (`irn reproduce --quick`).
fn command_line() -> String {
    let mut words = vec!["irn".to_string()];
    words.extend(std::env::args().skip(1).map(|a| {
        if a.contains([' ', '"', '\'']) {
            format!("'{a}'")
        } else {
            a
        }
    }));
    words.join(" ")
}
