//! Plots made by irn itself (SVG, through plotters): the paper's three metrics of every run,
//! as ratios to a baseline run — the form of the IRN paper's bar charts (Figures 1–3) — and
//! the fabric's timeline of every run (goodput, hosts paused, pause frames per second), the
//! view an operator has of a PFC storm or deadlock (seed 001 §4–§5).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use irn_sim::metrics::RunSummary;

/// A metric's name and how to read it off a run.
type Metric = (&'static str, fn(&RunSummary) -> f64);

/// Matplotlib's "tab20" pairs: each colour with its lighter shade, so that up to 16 runs
/// (E4's four transports under four controllers) stay apart.
const COLORS: [RGBColor; 16] = [
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

/// The run that `run`'s ratios divide by: the run named `name` if given; otherwise the first
/// RoCE run with PFC under the same congestion control (so that an experiment comparing
/// controllers, such as E4, compares transports within each), else the first RoCE run with PFC.
pub fn baseline_of<'a>(
    runs: &'a [RunSummary],
    run: &RunSummary,
    name: Option<&str>,
) -> Option<&'a RunSummary> {
    let roce_pfc = |r: &&RunSummary| r.transport == "roce" && r.pfc;
    match name {
        Some(n) => runs.iter().find(|r| r.name == n),
        None => runs
            .iter()
            .filter(roce_pfc)
            .find(|r| r.cc == run.cc)
            .or_else(|| runs.iter().find(roce_pfc)),
    }
}

/// What the ratios divide by, for a caption or a column header.
pub fn baseline_label(runs: &[RunSummary], name: Option<&str>) -> Option<String> {
    let first = baseline_of(runs, runs.first()?, name)?;
    if runs
        .iter()
        .all(|r| baseline_of(runs, r, name).is_some_and(|b| b.name == first.name))
    {
        Some(first.name.clone())
    } else {
        Some("RoCE+PFC under the same congestion control".into())
    }
}

/// Grouped bars: for each metric (average slowdown, average FCT, 99th-percentile FCT), one
/// bar per run, divided by its baseline run's value ([`baseline_of`]; the first run when there
/// is none).
pub fn bars(path: &Path, runs: &[RunSummary], baseline: Option<&str>) -> Result<()> {
    if runs.is_empty() {
        return Err(anyhow!("nothing to plot"));
    }
    let label = baseline_label(runs, baseline).unwrap_or_else(|| runs[0].name.clone());
    let metrics: [Metric; 3] = [
        ("avg slowdown", |r| r.all.avg_slowdown),
        ("avg FCT", |r| r.all.avg_fct_us),
        ("p99 FCT", |r| r.all.p99_fct_us),
    ];
    let ratio = |r: &RunSummary, f: fn(&RunSummary) -> f64| {
        let base = baseline_of(runs, r, baseline).unwrap_or(&runs[0]);
        let b = f(base);
        if b > 0.0 {
            f(r) / b
        } else {
            0.0
        }
    };
    let ymax = runs
        .iter()
        .flat_map(|r| metrics.iter().map(move |(_, f)| ratio(r, *f)))
        .fold(1.0f64, f64::max)
        * 1.15;
    let n = runs.len();
    let group = n + 1;
    let width = (3 * group) as f64;
    let root = SVGBackend::new(path, (200 + 90 * n as u32 * 3, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("relative to {label}"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..width, 0.0..ymax)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(3)
        .x_label_formatter(&|x| {
            let g = (*x / group as f64).floor() as usize;
            metrics.get(g).map_or(String::new(), |m| m.0.to_string())
        })
        .y_desc("ratio")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (ri, r) in runs.iter().enumerate() {
        let color = COLORS[ri % COLORS.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = metrics
            .iter()
            .enumerate()
            .map(|(mi, (_, f))| {
                let x0 = (mi * group + ri) as f64 + 0.5;
                Rectangle::new([(x0, 0.0), (x0 + 0.9, ratio(r, *f))], color.filled())
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| anyhow!("{e}"))?
            .label(r.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 1.0), (width, 1.0)],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| anyhow!("{e}"))?;
    legend(&mut chart)?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// A chart of the SVG backend over two `f64` axes.
type Chart<'a> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The runs' legend, upper right.
fn legend(chart: &mut Chart<'_>) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| anyhow!("{e}"))
}

/// Three panels over simulated time, one line per run: the goodput of the flows completed in
/// each sampling interval, the hosts whose data priority was paused for most of it, and the
/// pause frames sent per second (runs must have been sampled: `monitor_interval_us`).
pub fn timeline(path: &Path, runs: &[RunSummary]) -> Result<()> {
    if runs.iter().all(|r| r.timeline.is_empty()) {
        return Err(anyhow!("no run has a timeline (set monitor_interval_us)"));
    }
    type Series = (&'static str, fn(&irn_sim::net::TimelinePoint) -> f64);
    let panels: [Series; 3] = [
        ("goodput (Gb/s)", |p| p.goodput_gbps),
        ("hosts paused", |p| f64::from(p.paused_hosts)),
        ("pause frames / s", |p| p.pause_rate),
    ];
    let t_max = runs
        .iter()
        .flat_map(|r| r.timeline.iter().map(|p| p.t_ms))
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let root = SVGBackend::new(path, (900, 3 * 260)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    for (area, (label, f)) in root.split_evenly((3, 1)).iter().zip(panels) {
        let y_max = runs
            .iter()
            .flat_map(|r| r.timeline.iter().map(f))
            .fold(0.0f64, f64::max)
            .max(1.0)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("simulated time (ms)")
            .y_desc(label)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for (ri, r) in runs.iter().enumerate() {
            let color = COLORS[(2 * ri) % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    r.timeline.iter().map(|p| (p.t_ms, f(p))),
                    color.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e}"))?
                .label(r.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
                });
        }
        legend(&mut chart)?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// The tail of single-packet flows' FCTs (IRN §4.3's figure, SPEC E7): one panel per
/// congestion controller, side by side, one line per run in it — FCT (µs) across, the
/// percentile (90 to 99.9) up — so that the lowest, leftmost line has the best tail.
pub fn tail_cdf(path: &Path, runs: &[RunSummary]) -> Result<()> {
    if runs.iter().all(|r| r.single_packet_tail.is_empty()) {
        return Err(anyhow!("no run completed a single-packet flow"));
    }
    let mut ccs: Vec<&str> = Vec::new();
    for r in runs {
        if !ccs.contains(&r.cc.as_str()) {
            ccs.push(&r.cc);
        }
    }
    let root = SVGBackend::new(path, (420 * ccs.len() as u32, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    for (area, cc) in root.split_evenly((1, ccs.len())).iter().zip(&ccs) {
        // Each controller's own scale: their tails differ by an order of magnitude.
        let x_max = runs
            .iter()
            .filter(|r| r.cc == *cc)
            .flat_map(|r| r.single_packet_tail.iter().map(|p| p.fct_us))
            .fold(0.0f64, f64::max)
            .max(1.0)
            * 1.05;
        let mut chart = ChartBuilder::on(area)
            .caption(format!("congestion control: {cc}"), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..x_max, 90.0..100.0)
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("FCT of single-packet flows (µs)")
            .y_desc("percentile")
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for (ri, r) in runs.iter().filter(|r| r.cc == *cc).enumerate() {
            let color = COLORS[(2 * ri) % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    r.single_packet_tail.iter().map(|p| (p.fct_us, p.pct)),
                    color.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e}"))?
                .label(r.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
