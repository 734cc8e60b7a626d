//! Plots made by irn itself (SVG, through plotters): the paper's three metrics of every run,
//! as ratios to a baseline run — the form of the IRN paper's bar charts (Figures 1–3) — and
//! the fabric's timeline of every run (goodput, hosts paused, pause frames per second), the
//! view an operator has of a PFC storm or deadlock (seed 001 §4–§5).
//!
//! One file per kind of figure — `bars` (the metrics as ratios, and traffic classes side by
//! side), `timeline` (the fabric over time), `tail` (single-packet flows' tail), `sweep` (a
//! robustness sweep's ratios and an incast's completion times) — over `marks`, the drawing
//! pieces they share (whiskers, value labels, text styles, number formats). This file says
//! what a ratio divides by ([`baseline_of`]) and which figures an experiment gets
//! ([`draw_figures`]).

use std::path::Path;

use plotters::prelude::*;

use irn_sim::metrics::RunSummary;

use crate::PlotError;

mod bars;
mod marks;
mod sweep;
mod tail;
mod timeline;

pub use bars::{bars, class_bars};
pub use marks::anchored;
pub(crate) use marks::{compact, trim};
pub use sweep::{incast_plot, ratio_plot};
pub use tail::tail_cdf;
pub use timeline::timeline;

/// Matplotlib's "tab20" pairs: each colour with its lighter shade, so that up to 16 runs
/// (E4's four transports under four controllers) stay apart.
pub const COLORS: [RGBColor; 16] = [
    RGBColor(31, 119, 180),
    RGBColor(174, 199, 232),
    RGBColor(255, 127, 14),
    RGBColor(255, 187, 120),
    RGBColor(44, 160, 44),
    RGBColor(152, 223, 138),
    RGBColor(214, 39, 40),
    RGBColor(255, 152, 150),
    RGBColor(148, 103, 189),
    RGBColor(197, 176, 213),
    RGBColor(140, 86, 75),
    RGBColor(196, 156, 148),
    RGBColor(227, 119, 194),
    RGBColor(247, 182, 210),
    RGBColor(127, 127, 127),
    RGBColor(199, 199, 199),
];

/// The run that `run`'s ratios divide by: the run named `name` if given — or, when no run has
/// that whole name, the run of that name without its scenario (`IRN` of `IRN seed=2`) in
/// `run`'s own scenario, else of `run`'s seed; otherwise the first RoCE run with PFC of the
/// same scenario (`[[variant]]`, `[sweep]` point and seed) under the same congestion control
/// (so that an experiment comparing controllers, such as E4, compares transports within each,
/// and a sweep compares them at each point), else under the same controller, else the first
/// RoCE run with PFC.
pub fn baseline_of<'a>(
    runs: &'a [RunSummary],
    run: &RunSummary,
    name: Option<&str>,
) -> Option<&'a RunSummary> {
    let roce_pfc = |r: &&RunSummary| r.transport == "roce" && r.pfc;
    match name {
        Some(n) => runs
            .iter()
            .find(|r| r.name == n)
            .or_else(|| {
                runs.iter()
                    .find(|r| label_of(r) == n && r.scenario == run.scenario)
            })
            .or_else(|| {
                runs.iter().find(|r| {
                    label_of(r) == n && crate::seeds::seed_token(r) == crate::seeds::seed_token(run)
                })
            }),
        None => runs
            .iter()
            .filter(roce_pfc)
            .find(|r| r.cc == run.cc && r.scenario == run.scenario)
            .or_else(|| runs.iter().filter(roce_pfc).find(|r| r.cc == run.cc))
            .or_else(|| runs.iter().find(roce_pfc)),
    }
}

/// What the ratios divide by, for a caption or a column header.
pub fn baseline_label(runs: &[RunSummary], name: Option<&str>) -> Option<String> {
    let first = baseline_of(runs, runs.first()?, name)?;
    let key = |b: &RunSummary| crate::seeds::without_seed(&b.name);
    if runs
        .iter()
        .all(|r| baseline_of(runs, r, name).is_some_and(|b| key(b) == key(first)))
    {
        Some(key(first))
    } else {
        Some(match name {
            Some(n) => format!("{n} of the same scenario"),
            None => "RoCE+PFC of the same scenario and congestion control".into(),
        })
    }
}

/// A run's name without its scenario (`IRN` of `IRN load=0.5`): the series it belongs to.
pub(super) fn label_of(r: &RunSummary) -> String {
    r.name
        .strip_suffix(&r.scenario)
        .unwrap_or(&r.name)
        .trim()
        .to_string()
}

/// Appends `v` to `seen` unless it is there: the distinct values in order of first appearance.
pub(super) fn note<T: PartialEq>(seen: &mut Vec<T>, v: T) {
    if !seen.contains(&v) {
        seen.push(v);
    }
}

/// Where an experiment's figures go (none drawn where `None`): `irn sim`'s `--plot`,
/// `--tail-cdf`, `--ratio-plot` and `--timeline`.
#[derive(Default)]
pub struct FigurePaths<'a> {
    /// The three metrics relative to the baseline ([`bars`]; [`incast_plot`], [`class_bars`]).
    pub plot: Option<&'a Path>,
    /// Single-packet flows' tail ([`tail_cdf`]).
    pub tail_cdf: Option<&'a Path>,
    /// RoCE+PFC ÷ each run per scenario ([`ratio_plot`]).
    pub ratio_plot: Option<&'a Path>,
    /// The fabric over time ([`timeline`]).
    pub timeline: Option<&'a Path>,
}

/// Draws an experiment's figures from its runs, each as its kind of experiment is drawn: an
/// incast (E8) as the paper's Figure 9, traffic classes side by side as each class's own
/// bars, anything else as the three metrics relative to the baseline.
pub fn draw_figures(
    summaries: &[RunSummary],
    baseline: Option<&str>,
    paths: &FigurePaths<'_>,
) -> std::result::Result<(), FigureError> {
    if let Some(path) = paths.plot {
        // An incast experiment (E8) is drawn as the paper's Figure 9: RCT against M.
        if summaries.iter().all(|r| r.incast.is_some()) {
            incast_plot(path, summaries).map_err(at(path))?;
        } else if summaries.iter().all(|r| !r.classes.is_empty()) {
            // Traffic classes side by side: each class's own figures.
            class_bars(path, summaries).map_err(at(path))?;
        } else {
            bars(path, summaries, baseline).map_err(at(path))?;
        }
    }
    if let Some(path) = paths.tail_cdf {
        tail_cdf(path, summaries).map_err(at(path))?;
    }
    if let Some(path) = paths.ratio_plot {
        ratio_plot(path, summaries).map_err(at(path))?;
    }
    if let Some(path) = paths.timeline {
        timeline(path, summaries).map_err(at(path))?;
    }
    Ok(())
}

/// A figure that could not be drawn, and which file it was.
#[derive(Debug, thiserror::Error)]
#[error("drawing {}", path.display())]
pub struct FigureError {
    /// The figure's file.
    pub path: std::path::PathBuf,
    /// Why.
    #[source]
    pub source: PlotError,
}

fn at(path: &Path) -> impl FnOnce(PlotError) -> FigureError + '_ {
    move |source| FigureError {
        path: path.to_path_buf(),
        source,
    }
}
