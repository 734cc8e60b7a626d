//! Plots made by irn itself (SVG, through plotters): the paper's three metrics of every run,
//! as ratios to a baseline run — the form of the IRN paper's bar charts (Figures 1–3) — and
//! the fabric's timeline of every run (goodput, hosts paused, pause frames per second), the
//! view an operator has of a PFC storm or deadlock (seed 001 §4–§5).

use std::path::Path;

use crate::axes::{decade_ticks, nines, nines_label, Ticked};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use irn_sim::metrics::{ClassReport, FlowStats, RunSummary};

use crate::{draw, PlotError, Result};

/// A metric's name and how to read it off a run.
type Metric = (&'static str, fn(&RunSummary) -> f64);

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

/// Grouped bars: for each metric (average slowdown, average FCT, 99th-percentile FCT), one
/// bar per run, divided by its baseline run's value ([`baseline_of`]; the first run when there
/// is none), the ratio written on it, the metric's name under its group and the legend beside
/// the chart, outside the data. Runs that differ only by their seed are one bar: the mean of
/// their ratios (each taken within its seed), with the seeds' range as a whisker. An
/// experiment of several congestion controllers with more than eight bars (E4) gets one panel
/// per controller.
pub fn bars(path: &Path, runs: &[RunSummary], baseline: Option<&str>) -> Result<()> {
    if runs.is_empty() {
        return Err(PlotError::Nothing("nothing to plot"));
    }
    let groups = crate::seeds::groups_of(runs);
    let mut ccs: Vec<&str> = Vec::new();
    for g in &groups {
        note(&mut ccs, g[0].cc.as_str());
    }
    let panels: Vec<Vec<&[&RunSummary]>> = if ccs.len() > 1 && groups.len() > 8 {
        ccs.iter()
            .map(|cc| {
                groups
                    .iter()
                    .filter(|g| g[0].cc == *cc)
                    .map(Vec::as_slice)
                    .collect()
            })
            .collect()
    } else {
        vec![groups.iter().map(Vec::as_slice).collect()]
    };
    let widest = panels.iter().map(Vec::len).max().unwrap_or(1);
    if panels.len() == 1 && widest > 6 {
        return bars_across(path, runs, &panels[0], baseline);
    }
    let legend_w = 40
        + 8 * groups
            .iter()
            .map(|g| crate::seeds::without_seed(&g[0].name).chars().count())
            .max()
            .unwrap_or(8) as u32;
    let px_w = 120 + 3 * 34 * (widest as u32 + 1) + legend_w;
    let root =
        SVGBackend::new(path, (px_w.max(520), 360 * panels.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    for (area, panel) in root.split_evenly((panels.len(), 1)).iter().zip(&panels) {
        bar_panel(&root, area, runs, panel, baseline, legend_w)?;
    }
    root.present().map_err(draw)?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// [`bars`] for more runs than a column holds side by side (T8's thirteen, spraying's
/// twelve): small multiples two columns wide, one panel per metric, the runs down the side
/// in their transports' colours, each bar the seeds' mean ratio with their range.
fn bars_across(
    path: &Path,
    runs: &[RunSummary],
    groups: &[&[&RunSummary]],
    baseline: Option<&str>,
) -> Result<()> {
    type Stat = (&'static str, fn(&FlowStats) -> f64);
    let metrics: [Stat; 3] = [
        ("avg_slowdown", |s| s.avg_slowdown),
        ("avg_fct_us", |s| s.avg_fct_us),
        ("p99_fct_us", |s| s.p99_fct_us),
    ];
    let mut rows = Vec::new();
    let mut names = Vec::new();
    for g in groups {
        let name = crate::seeds::without_seed(&g[0].name);
        for (key, f) in metrics {
            let ratios: Vec<f64> = g
                .iter()
                .filter_map(|r| {
                    let b = baseline_of(runs, r, baseline).unwrap_or(&runs[0]);
                    let d = f(&b.all);
                    (d > 0.0).then(|| f(&r.all) / d)
                })
                .collect();
            if let Some(spread) = crate::seeds::Spread::of(&ratios) {
                rows.push(crate::claims::Row {
                    scenario: name.clone(),
                    metric: key.to_string(),
                    spread,
                    seeds: ratios.len(),
                    held: true,
                    every_seed: true,
                });
            }
        }
        names.push(name);
    }
    let label = match baseline {
        Some(n) => n.to_string(),
        None => baseline_label(runs, None).unwrap_or_else(|| runs[0].name.clone()),
    };
    let title = format!("each run ÷ {label} (below 1: better than it); seeds' mean and range");
    let colours = crate::figure::colours_for(&names);
    crate::figure::claim_figure(
        path,
        &crate::figure::ClaimFigure {
            title: &title,
            axis: "ratio",
            rows: &rows,
            band: None,
            threshold: Some(1.0),
            within: None,
            colour: BLACK,
            label_colours: Some(&colours),
            threshold_words: "the baseline",
        },
    )
}

/// One panel of [`bars`]: `panel`'s runs (each a group of seeds), their ratios to their
/// baselines among `runs`.
fn bar_panel(
    root: &Area<'_>,
    area: &Area<'_>,
    runs: &[RunSummary],
    panel: &[&[&RunSummary]],
    baseline: Option<&str>,
    legend_w: u32,
) -> Result<()> {
    let metrics: [Metric; 3] = [
        ("average slowdown", |r| r.all.avg_slowdown),
        ("average FCT", |r| r.all.avg_fct_us),
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
    // A group's ratio on a metric over its seeds: (mean, least, greatest).
    let spread = |g: &[&RunSummary], f: fn(&RunSummary) -> f64| {
        let v: Vec<f64> = g.iter().map(|r| ratio(r, f)).collect();
        crate::seeds::Spread::of(&v).map_or((0.0, 0.0, 0.0), |s| (s.mean, s.min, s.max))
    };
    let label = {
        let owned: Vec<RunSummary> = panel
            .iter()
            .flat_map(|g| g.iter().map(|r| (*r).clone()))
            .collect();
        match baseline {
            Some(n) => n.to_string(),
            None => baseline_label(&owned, None)
                .or_else(|| baseline_label(runs, None))
                .unwrap_or_else(|| runs[0].name.clone()),
        }
    };
    let seeded = panel.iter().any(|g| g.len() > 1);
    let ymax = panel
        .iter()
        .flat_map(|g| metrics.iter().map(move |(_, f)| spread(g, *f).2))
        .fold(1.0f64, f64::max)
        * 1.15;
    let n = panel.len();
    let group = n + 1;
    let width = (3 * group) as f64;
    let caption = if seeded {
        format!("each run ÷ {label} (below 1: better than it); seeds' mean and range")
    } else {
        format!("each run ÷ {label} (below 1: better than it)")
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .margin_right(legend_w + 12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..width, 0.0..ymax)
        .map_err(draw)?;
    ratio_mesh(&mut chart)?;
    let palette = crate::figure::colours_for(
        &panel
            .iter()
            .map(|g| crate::seeds::without_seed(&g[0].name))
            .collect::<Vec<_>>(),
    );
    for (ri, g) in panel.iter().enumerate() {
        let color = palette[ri];
        for (mi, (_, f)) in metrics.iter().enumerate() {
            let (v, lo, hi) = spread(g, *f);
            let x0 = (mi * group + ri) as f64 + 0.5;
            chart
                .draw_series([Rectangle::new([(x0, 0.0), (x0 + 0.9, v)], color.filled())])
                .map_err(draw)?;
            if hi > lo {
                whisker(&mut chart, x0 + 0.45, lo, hi)?;
            }
            value_label(
                &mut chart,
                (x0 + 0.45, hi.max(v)),
                format!("{v:.2}"),
                10,
                Some(1.0),
            )?;
        }
        // The legend, right of the plotting area.
        let (right, top) = chart.backend_coord(&(width, ymax));
        let y = top + 8 + 18 * ri as i32;
        root.draw(&Rectangle::new(
            [(right + 14, y), (right + 26, y + 12)],
            color.filled(),
        ))
        .map_err(draw)?;
        root.draw(&Text::new(
            crate::seeds::without_seed(&g[0].name),
            (right + 32, y),
            ("sans-serif", 12).into_font().color(&BLACK),
        ))
        .map_err(draw)?;
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 1.0), (width, 1.0)],
            BLACK.stroke_width(1),
        )))
        .map_err(draw)?;
    // Each metric's name centred under its group.
    for (mi, (name, _)) in metrics.iter().enumerate() {
        let centre = (mi * group) as f64 + 0.5 + n as f64 / 2.0;
        let (x, y) = chart.backend_coord(&(centre, 0.0));
        root.draw(&Text::new(name.to_string(), (x, y + 8), centred(13)))
            .map_err(draw)?;
    }
    Ok(())
}

/// A class's metric: its name, its unit's caption, and how to read it off a class.
type ClassMetric = (&'static str, fn(&ClassReport) -> f64);

/// Traffic classes side by side (`[[traffic]]`): one panel per metric — average slowdown,
/// 99th-percentile FCT, and how long the class's senders were paused — with a group of bars
/// per run, one bar per class in the class's own colour, its value written above it, and the
/// classes' legend under the panels.
pub fn class_bars(path: &Path, runs: &[RunSummary]) -> Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        for c in &r.classes {
            note(&mut names, c.name.as_str());
        }
    }
    if names.is_empty() {
        return Err(PlotError::Nothing("no run has traffic classes"));
    }
    let metrics: [ClassMetric; 3] = [
        ("average slowdown", |c| c.stats.avg_slowdown),
        ("p99 FCT (ms)", |c| c.stats.p99_fct_us / 1e3),
        ("its senders paused (ms, summed)", |c| c.paused_us / 1e3),
    ];
    // Runs that differ only by their seed are one group of bars: the seeds' mean, their range
    // as a whisker.
    let groups = crate::seeds::groups_of(runs);
    let per_group = names.len() + 1;
    let px_w = (90 + 30 * per_group * groups.len()).max(480) as u32;
    let legend_h = 22 * names.len() as u32 + 16;
    let root =
        SVGBackend::new(path, (px_w, 250 * metrics.len() as u32 + legend_h)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let (panels, legend_area) = root.split_vertically(250 * metrics.len() as u32);
    for (area, (title, f)) in panels.split_evenly((metrics.len(), 1)).iter().zip(metrics) {
        let ymax = runs
            .iter()
            .flat_map(|r| r.classes.iter().map(f))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.2;
        let width = (per_group * groups.len()) as f64;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(46)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..width, 0.0..ymax)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .draw()
            .map_err(draw)?;
        for (ri, g) in groups.iter().enumerate() {
            for (ci, name) in names.iter().enumerate() {
                let vals: Vec<f64> = g
                    .iter()
                    .flat_map(|r| r.classes.iter().filter(|c| c.name == *name).map(f))
                    .collect();
                let Some(sp) = crate::seeds::Spread::of(&vals) else {
                    continue;
                };
                let v = sp.mean;
                let x0 = (ri * per_group + ci) as f64 + 0.5;
                let color = COLORS[(2 * ci) % COLORS.len()];
                chart
                    .draw_series([Rectangle::new([(x0, 0.0), (x0 + 0.9, v)], color.filled())])
                    .map_err(draw)?;
                if sp.max > sp.min {
                    whisker(&mut chart, x0 + 0.45, sp.min, sp.max)?;
                }
                let label = format!("{v:.*}", crate::seeds::decimals(v));
                value_label(&mut chart, (x0 + 0.45, sp.max.max(v)), label, 9, None)?;
            }
            // The run's name under its group, wrapped at its comma.
            let centre = (ri * per_group) as f64 + per_group as f64 / 2.0;
            let (x, y) = chart.backend_coord(&(centre, 0.0));
            for (li, line) in crate::seeds::without_seed(&g[0].name)
                .split(", ")
                .enumerate()
            {
                root.draw(&Text::new(
                    line.to_string(),
                    (x, y + 6 + 13 * li as i32),
                    centred(11),
                ))
                .map_err(draw)?;
            }
        }
    }
    for (ci, name) in names.iter().enumerate() {
        let y = 8 + 22 * ci as i32;
        let color = COLORS[(2 * ci) % COLORS.len()];
        legend_area
            .draw(&Rectangle::new([(60, y), (74, y + 14)], color.filled()))
            .map_err(draw)?;
        legend_area
            .draw(&Text::new(
                name.to_string(),
                (82, y),
                ("sans-serif", 13).into_font().color(&BLACK),
            ))
            .map_err(draw)?;
    }
    root.present().map_err(draw)?;
    Ok(())
}

/// The grid of a chart of ratios over categories: horizontal lines only, no x labels (the
/// caller writes the categories' names under their groups).
fn ratio_mesh(chart: &mut Chart<'_>) -> Result<()> {
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(1)
        .x_labels(0)
        .y_desc("ratio")
        .draw()
        .map_err(draw)
}

/// A chart of the SVG backend over two `f64` axes.
type Chart<'a> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A vertical line at `x` from `lo` to `hi`: a spread over seeds, or a slowest request.
fn whisker(chart: &mut Chart<'_>, x: f64, lo: f64, hi: f64) -> Result<()> {
    chart
        .draw_series([PathElement::new(
            vec![(x, lo), (x, hi)],
            BLACK.stroke_width(1),
        )])
        .map_err(draw)?;
    Ok(())
}

/// A bar's value, centred over `x` just above `top` (its bar's or whisker's end); where it
/// would sit across the chart's `reference` line, it is lifted clear above it.
fn value_label(
    chart: &mut Chart<'_>,
    (x, top): (f64, f64),
    text: String,
    size: u32,
    reference: Option<f64>,
) -> Result<()> {
    let (_, y0) = chart.backend_coord(&(x, 0.0));
    let (_, y1) = chart.backend_coord(&(x, 1.0));
    // (one data unit in pixels: the y axis starts at 0 in every chart drawn here)
    // Data units per pixel, from the axis's scale.
    let per_px = 1.0 / f64::from((y0 - y1).max(1));
    let pad = 3.0 * per_px;
    let height = f64::from(size) * 1.2 * per_px;
    let mut y = top + pad;
    if let Some(r) = reference.filter(|r| y < r + pad && y + height > r - pad) {
        y = r + pad;
    }
    chart
        .draw_series([Text::new(
            text,
            (x, y),
            anchored(
                size,
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Bottom,
            ),
        )])
        .map_err(draw)?;
    Ok(())
}

/// Black sans-serif text of `size` pixels whose point `(h, v)` is where it is drawn (centre and
/// top: a name under its bar).
pub fn anchored(
    size: u32,
    h: plotters::style::text_anchor::HPos,
    v: plotters::style::text_anchor::VPos,
) -> TextStyle<'static> {
    ("sans-serif", size)
        .into_font()
        .color(&BLACK)
        .pos(plotters::style::text_anchor::Pos::new(h, v))
}

/// Text centred on its point and hanging from it, for names under groups of bars.
fn centred(size: u32) -> TextStyle<'static> {
    anchored(
        size,
        plotters::style::text_anchor::HPos::Center,
        plotters::style::text_anchor::VPos::Top,
    )
}

/// Three panels over simulated time, one line per run: the goodput of the flows completed in
/// each sampling interval, the hosts whose data priority was paused for most of it, and the
/// pause frames sent per second (runs must have been sampled: `monitor_interval_us`). When a
/// run sent packets to a failed host (`[[fault]]`), a fourth panel counts them as they add
/// up, on a log scale: what a dead peer costs the fabric under each run's retry rules. Over
/// seeds, each run's first seed is drawn.
pub fn timeline(path: &Path, runs: &[RunSummary]) -> Result<()> {
    // Over seeds, each run's first seed (a timeline is one run's story; lines of several
    // seeds over each other would hide each other).
    let firsts: Vec<RunSummary>;
    let runs = if crate::seeds::has_seeds(runs) {
        firsts = crate::seeds::groups_of(runs)
            .iter()
            .map(|g| g[0].clone())
            .collect();
        &firsts[..]
    } else {
        runs
    };
    if runs.iter().all(|r| r.timeline.is_empty()) {
        return Err(PlotError::Nothing(
            "no run has a timeline (set monitor_interval_us)",
        ));
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
    // Two columns wide; the key above the panels, outside the data, two runs a line.
    let names: Vec<String> = runs
        .iter()
        .map(|r| crate::seeds::without_seed(&r.name))
        .collect();
    let dead = runs
        .iter()
        .any(|r| !r.safety.sent_to_failed_per_ms.is_empty());
    // With a dead host, each run's total sent to it in the key.
    let labels: Vec<String> = names
        .iter()
        .zip(runs)
        .map(|(name, r)| {
            if dead {
                format!(
                    "{name}: {} packets to failed hosts",
                    thousands(r.safety.counts.sent_to_failed_packets)
                )
            } else {
                name.clone()
            }
        })
        .collect();
    // Two a line when they fit in half the width (13 px text, 0.62 em a glyph).
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let columns = if longest as f64 * 13.0 * 0.62 < 400.0 {
        2
    } else {
        1
    };
    let key_h = 14 + 22 * names.len().div_ceil(columns) as u32;
    let rows = if dead { 4 } else { 3 };
    let root = SVGBackend::new(path, (1050, key_h + rows * 230)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let (key, plots) = root.split_vertically(key_h);
    let areas = plots.split_evenly((rows as usize, 1));
    let palette = crate::figure::colours_for(&names);
    // Runs that draw the same line stay apart: each a width narrower than the one before
    // (the first widest, underneath), and a marker of its own every few samples.
    let width_of = |ri: usize| (2 + runs.len() - 1 - ri) as u32;
    for (area, (label, f)) in areas.iter().zip(panels) {
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
            .map_err(draw)?;
        chart
            .configure_mesh()
            .max_light_lines(1)
            .x_desc("simulated time (ms)")
            .y_desc(label)
            .y_label_formatter(&|v| compact(*v))
            .x_label_formatter(&|v| compact(*v))
            .draw()
            .map_err(draw)?;
        for (ri, r) in runs.iter().enumerate() {
            let color = palette[ri];
            let points: Vec<(f64, f64)> = r.timeline.iter().map(|p| (p.t_ms, f(p))).collect();
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(width_of(ri)),
                ))
                .map_err(draw)?;
            let every = (points.len() / 12).max(1);
            let offset = (ri * every / runs.len().max(1)).min(points.len().saturating_sub(1));
            let sampled = points.iter().skip(offset).step_by(every).copied().collect();
            markers(&mut chart, ri, sampled, color)?;
        }
    }
    for (ri, name) in labels.into_iter().enumerate() {
        let (x, y) = (
            80 + 480 * (ri % columns) as i32,
            14 + 22 * (ri / columns) as i32,
        );
        key.draw(&PathElement::new(
            vec![(x, y), (x + 28, y)],
            palette[ri].stroke_width(width_of(ri)),
        ))
        .map_err(draw)?;
        key_marker(&key, ri, (x + 14, y), palette[ri])?;
        key.draw(&Text::new(
            name,
            (x + 36, y),
            ("sans-serif", 13).into_font().color(&BLACK).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Left,
                    plotters::style::text_anchor::VPos::Center,
                ),
            ),
        ))
        .map_err(draw)?;
    }
    if dead {
        sent_to_failed(&areas[3], runs, t_max, &palette, &width_of)?;
    }
    root.present().map_err(draw)?;
    Ok(())
}

/// The markers of the `ri`th run of a line figure at `points`: circles, triangles, crosses or
/// squares, in turn (filled the first time round, hollow after).
fn markers(
    chart: &mut Chart<'_>,
    ri: usize,
    points: Vec<(f64, f64)>,
    color: RGBColor,
) -> Result<()> {
    let style = if ri < 4 {
        color.filled()
    } else {
        color.stroke_width(2)
    };
    let drawn = match ri % 4 {
        0 => chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, style))),
        1 => chart.draw_series(points.into_iter().map(|p| TriangleMarker::new(p, 5, style))),
        2 => chart.draw_series(
            points
                .into_iter()
                .map(|p| Cross::new(p, 4, color.stroke_width(2))),
        ),
        _ => chart.draw_series(
            points
                .into_iter()
                .map(|p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], style)),
        ),
    };
    drawn.map(|_| ()).map_err(draw)
}

/// The key's sample of the `ri`th run's marker, at pixel `at` of `area`.
fn key_marker(area: &Area<'_>, ri: usize, at: (i32, i32), color: RGBColor) -> Result<()> {
    let style = if ri < 4 {
        color.filled()
    } else {
        color.stroke_width(2)
    };
    match ri % 4 {
        0 => area.draw(&Circle::new(at, 4, style)),
        1 => area.draw(&TriangleMarker::new(at, 5, style)),
        2 => area.draw(&Cross::new(at, 4, color.stroke_width(2))),
        _ => area.draw(&Rectangle::new(
            [(at.0 - 4, at.1 - 4), (at.0 + 4, at.1 + 4)],
            style,
        )),
    }
    .map_err(draw)
}

/// An axis value in few characters: 8 M, 250 k, 0.5.
pub(crate) fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{} M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{} k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// A count with its thousands apart: 7 963 210.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A number with at most two decimals and no trailing zeros.
pub(crate) fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// The timeline's panel of packets sent to failed hosts, cumulative per millisecond, log scale.
fn sent_to_failed(
    area: &Area<'_>,
    runs: &[RunSummary],
    t_max: f64,
    palette: &[RGBColor],
    width_of: &dyn Fn(usize) -> u32,
) -> Result<()> {
    let cumulative = |r: &RunSummary| -> Vec<(f64, f64)> {
        let mut sum = 0u64;
        r.safety
            .sent_to_failed_per_ms
            .iter()
            .enumerate()
            .map(|(ms, &n)| {
                sum += n;
                ((ms + 1) as f64, sum as f64)
            })
            .collect()
    };
    let y_max = runs
        .iter()
        .map(|r| r.safety.counts.sent_to_failed_packets as f64)
        .fold(10.0f64, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, (1.0..y_max).log_scale())
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("simulated time (ms)")
        .y_desc("packets sent to failed hosts")
        .y_label_formatter(&|v| compact(*v))
        .x_label_formatter(&|v| compact(*v))
        .draw()
        .map_err(draw)?;
    for (ri, r) in runs.iter().enumerate() {
        let color = palette[ri];
        let points: Vec<(f64, f64)> = cumulative(r).into_iter().filter(|p| p.1 >= 1.0).collect();
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(width_of(ri))))
            .map_err(draw)?;
    }
    Ok(())
}

/// The tail of single-packet flows' FCTs (IRN §4.3's figure, SPEC E7): one panel per
/// congestion controller, side by side, one line per run in it — FCT (µs, log scale) across,
/// the percentile (90 to 99.9, on a "nines" scale, `-log10(1 - p/100)`) up — so that the lowest,
/// leftmost line has the best tail.
pub fn tail_cdf(path: &Path, runs: &[RunSummary]) -> Result<()> {
    if runs.iter().all(|r| r.single_packet_tail.is_empty()) {
        return Err(PlotError::Nothing("no run completed a single-packet flow"));
    }
    let mut ccs: Vec<&str> = Vec::new();
    for r in runs {
        note(&mut ccs, r.cc.as_str());
    }
    // Two columns wide whatever the number of controllers; the key under the panels.
    let root = SVGBackend::new(path, (1050, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let (plots, key) = root.split_vertically(400);
    let mut keyed: Vec<(String, RGBColor)> = Vec::new();
    for (area, cc) in plots.split_evenly((1, ccs.len())).iter().zip(&ccs) {
        // Each controller's own scale: their tails differ by an order of magnitude, and
        // within one the 90th and the 99.9th percentile differ by another (log scale).
        let (x_min, x_max) = runs
            .iter()
            .filter(|r| r.cc == *cc)
            .flat_map(|r| r.single_packet_tail.iter().map(|p| p.fct_us))
            .filter(|v| *v > 0.0)
            .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (x_min, x_max) = if x_max > 0.0 {
            (x_min / 1.1, x_max * 1.1)
        } else {
            (1.0, 10.0)
        };
        let (bold, light) = decade_ticks(x_min, x_max);
        let x_axis = Ticked::new(LogCoord::from((x_min..x_max).log_scale()), &bold, &light);
        // The percentiles the data holds, from 90 up, on the nines axis: labelled at 90, 99
        // and 99.9, light lines at 95, 98 and 99.5.
        let top = runs
            .iter()
            .flat_map(|r| r.single_packet_tail.iter().map(|p| p.pct))
            .fold(99.0f64, f64::max);
        let y_axis = Ticked::new(
            RangedCoordf64::from(nines(90.0)..nines(top) + 0.05),
            &[90.0, 99.0, 99.9].map(nines),
            &[95.0, 98.0, 99.5].map(nines),
        );
        let mut chart = ChartBuilder::on(area)
            .caption(format!("congestion control: {cc}"), ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(x_axis, y_axis)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| compact(*v))
            .y_label_formatter(&|v| nines_label(*v))
            .x_desc("FCT of single-packet flows (µs, log scale)")
            .y_desc("percentile")
            .draw()
            .map_err(draw)?;
        // One colour per run; a run over seeds draws a line per seed, its spread.
        let mut all: Vec<String> = Vec::new();
        for r in runs.iter().filter(|r| r.cc == *cc) {
            note(&mut all, crate::seeds::without_seed(&r.name));
        }
        let palette = crate::figure::colours_for(&all);
        for r in runs.iter().filter(|r| r.cc == *cc) {
            let name = crate::seeds::without_seed(&r.name);
            let ri = all.iter().position(|n| *n == name).unwrap_or(0);
            let color = palette[ri];
            chart
                .draw_series(LineSeries::new(
                    r.single_packet_tail
                        .iter()
                        .filter(|p| p.fct_us > 0.0)
                        .map(|p| (p.fct_us, nines(p.pct))),
                    color.stroke_width(2),
                ))
                .map_err(draw)?;
            // The key names the transport, the panel the controller.
            let family = name
                .rsplit_once(' ')
                .filter(|(_, last)| last.eq_ignore_ascii_case(cc))
                .map_or(name.clone(), |(head, _)| head.to_string());
            if !keyed.iter().any(|(n, _)| *n == family) {
                keyed.push((family, color));
            }
        }
    }
    let mut x = 60;
    for (name, color) in &keyed {
        key.draw(&PathElement::new(
            vec![(x, 20), (x + 24, 20)],
            color.stroke_width(3),
        ))
        .map_err(draw)?;
        key.draw(&Text::new(
            name.clone(),
            (x + 30, 20),
            ("sans-serif", 13).into_font().color(&BLACK).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Left,
                    plotters::style::text_anchor::VPos::Center,
                ),
            ),
        ))
        .map_err(draw)?;
        x += 30 + (name.chars().count() as f64 * 8.5) as i32 + 30;
    }
    root.present().map_err(draw)?;
    Ok(())
}

/// Baseline ÷ run for each of the paper's three metrics, where the baseline is
/// [`baseline_of`] (the RoCE+PFC run of the run's own scenario): above 1, the run is better —
/// the IRN paper's "RoCE+PFC ÷ IRN" convention.
fn paper_ratios(runs: &[RunSummary], r: &RunSummary) -> Option<[f64; 3]> {
    let b = baseline_of(runs, r, None)?;
    let m = |s: &RunSummary| [s.all.avg_slowdown, s.all.avg_fct_us, s.all.p99_fct_us];
    let (x, y) = (m(b), m(r));
    (y.iter().all(|v| *v > 0.0)).then(|| [x[0] / y[0], x[1] / y[1], x[2] / y[2]])
}

/// A run's name without its scenario (`IRN` of `IRN load=0.5`): the series it belongs to.
fn label_of(r: &RunSummary) -> String {
    r.name
        .strip_suffix(&r.scenario)
        .unwrap_or(&r.name)
        .trim()
        .to_string()
}

/// Appends `v` to `seen` unless it is there: the distinct values in order of first appearance.
fn note<T: PartialEq>(seen: &mut Vec<T>, v: T) {
    if !seen.contains(&v) {
        seen.push(v);
    }
}

/// The scenario without its seed (`seed=N` of a sweep): the point seeds are averaged over.
fn point_of(r: &RunSummary) -> String {
    r.scenario
        .split(' ')
        .filter(|t| !t.starts_with("seed="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A robustness sweep (E6): for every scenario (`[[variant]]` and sweep point, seeds pooled)
/// and every run that is not the RoCE+PFC baseline, the baseline ÷ run on each metric — one
/// panel per metric, one group of bars per scenario, the seeds' mean as the bar and their
/// range as a whisker, the mean written above it; above the line at 1 the run beats RoCE+PFC.
pub fn ratio_plot(path: &Path, runs: &[RunSummary]) -> Result<()> {
    let others: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| !(r.transport == "roce" && r.pfc))
        .filter(|r| paper_ratios(runs, r).is_some())
        .collect();
    if others.is_empty() {
        return Err(PlotError::Nothing(
            "no run to compare with a RoCE+PFC run of its scenario",
        ));
    }
    let mut points: Vec<String> = Vec::new();
    let mut series: Vec<String> = Vec::new();
    for r in &others {
        note(&mut points, point_of(r));
        note(&mut series, label_of(r));
    }
    // (series, point) → per metric (mean, min, max) over seeds.
    let stat = |s: &str, p: &str, m: usize| -> Option<(f64, f64, f64)> {
        let v: Vec<f64> = others
            .iter()
            .filter(|r| label_of(r) == s && point_of(r) == p)
            .filter_map(|r| paper_ratios(runs, r).map(|x| x[m]))
            .collect();
        if v.is_empty() {
            return None;
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0f64, f64::max);
        Some((mean, lo, hi))
    };
    let names = ["average slowdown", "average FCT", "99th-percentile FCT"];
    let group = series.len() + 1;
    let width = (points.len() * group) as f64;
    let key_w = 40 + 8 * series.iter().map(|n| n.chars().count()).max().unwrap_or(4) as u32;
    let px_w = (160 + 46 * points.len() * group).max(700) as u32
        + if series.len() > 1 { key_w } else { 0 };
    // Room under each panel for the longest scenario name, turned a quarter.
    let label_px = 20 + 7 * points.iter().map(|p| p.chars().count()).max().unwrap_or(10) as u32;
    let root = SVGBackend::new(path, (px_w, 3 * (235 + label_px.max(105)))).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    for (m, area) in root.split_evenly((3, 1)).iter().enumerate() {
        let ymax = series
            .iter()
            .flat_map(|s| points.iter().filter_map(move |p| stat(s, p, m)))
            .map(|(_, _, hi)| hi)
            .fold(1.0f64, f64::max)
            * 1.2;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "RoCE+PFC ÷ {}, {} (above 1: {} is better); seeds' mean and range",
                    if series.len() == 1 {
                        series[0].as_str()
                    } else {
                        "run"
                    },
                    names[m],
                    if series.len() == 1 {
                        series[0].as_str()
                    } else {
                        "the run"
                    },
                ),
                ("sans-serif", 16),
            )
            .margin(10)
            .margin_bottom(label_px.max(105))
            // Room for the key right of the bars, outside the data.
            .margin_right(if series.len() > 1 { key_w } else { 10 })
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..width, 0.0..ymax)
            .map_err(draw)?;
        ratio_mesh(&mut chart)?;
        let palette = crate::figure::colours_for(&series);
        for (si, s) in series.iter().enumerate() {
            let color = palette[si];
            for (pi, p) in points.iter().enumerate() {
                let Some((mean, lo, hi)) = stat(s, p, m) else {
                    continue;
                };
                let x0 = (pi * group + si) as f64 + 0.5;
                let bar = chart
                    .draw_series([Rectangle::new(
                        [(x0, 0.0), (x0 + 0.9, mean)],
                        color.filled(),
                    )])
                    .map_err(draw)?;
                if pi == 0 {
                    bar.label(s.clone()).legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                    });
                }
                whisker(&mut chart, x0 + 0.45, lo, hi)?;
                value_label(
                    &mut chart,
                    (x0 + 0.45, hi.max(mean)),
                    format!("{mean:.2}"),
                    11,
                    Some(1.0),
                )?;
            }
        }
        chart
            .draw_series([PathElement::new(
                vec![(0.0, 1.0), (width, 1.0)],
                BLACK.stroke_width(1),
            )])
            .map_err(draw)?;
        if series.len() > 1 {
            let (right, top) = chart.backend_coord(&(width, ymax));
            for (si, name) in series.iter().enumerate() {
                let y = top + 8 + 18 * si as i32;
                root.draw(&Rectangle::new(
                    [(right + 14, y), (right + 26, y + 12)],
                    palette[si].filled(),
                ))
                .map_err(draw)?;
                root.draw(&Text::new(
                    name.clone(),
                    (right + 32, y),
                    ("sans-serif", 12).into_font().color(&BLACK),
                ))
                .map_err(draw)?;
            }
        }
        // Scenario names under their groups, turned a quarter to fit.
        for (pi, p) in points.iter().enumerate() {
            let centre = (pi * group) as f64 + 0.5 + (group - 1) as f64 * 0.45;
            let (x, y) = chart.backend_coord(&(centre, 0.0));
            let style = ("sans-serif", 12)
                .into_font()
                .transform(FontTransform::Rotate90)
                .color(&BLACK);
            root.draw(&Text::new(p.clone(), (x + 6, y + 4), style))
                .map_err(draw)?;
        }
    }
    root.present().map_err(draw)?;
    Ok(())
}

/// An incast experiment (E8), in the form of the IRN paper's Figure 9: per scenario other than
/// the number of senders (a `[[variant]]` such as a link rate: one panel each), the average
/// request completion time of each run at each M (`incast_senders`), a bar per run with the
/// slowest request as a whisker, and each run's RCT ÷ the RoCE+PFC run's of the same point
/// written above its bar. `irn sim --plot` draws this when every run is an incast.
pub fn incast_plot(path: &Path, runs: &[RunSummary]) -> Result<()> {
    let senders = |r: &RunSummary| -> Option<u32> {
        r.scenario
            .split(' ')
            .find_map(|t| t.strip_prefix("incast_senders="))
            .and_then(|v| v.parse().ok())
    };
    let panel_of = |r: &RunSummary| {
        r.scenario
            .split(' ')
            .filter(|t| !t.starts_with("incast_senders=") && !t.starts_with("seed="))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let runs: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.incast.as_ref().is_some_and(|i| i.requests > 0))
        .collect();
    if runs.is_empty() {
        return Err(PlotError::Nothing("no incast run with a completed request"));
    }
    let mut panels: Vec<String> = Vec::new();
    let mut series: Vec<String> = Vec::new();
    let mut ms: Vec<u32> = Vec::new();
    for r in &runs {
        note(&mut panels, panel_of(r));
        note(&mut series, label_of(r));
        note(&mut ms, senders(r).unwrap_or(0));
    }
    ms.sort_unstable();
    let palette = crate::figure::colours_for(&series);
    // The runs of a bar: one per seed.
    let find = |p: &str, s: &str, m: u32| -> Vec<&RunSummary> {
        runs.iter()
            .filter(|r| panel_of(r) == p && label_of(r) == s && senders(r).unwrap_or(0) == m)
            .copied()
            .collect()
    };
    let seeded = crate::seeds::has_seeds(runs.iter().copied());
    let rct = |r: &RunSummary| r.incast.as_ref().map_or(0.0, |i| i.avg_rct_us / 1000.0);
    // A bar's height and whisker (ms): one run's average and slowest request; over seeds,
    // the mean of the averages and their range.
    let ms_of = |g: &[&RunSummary]| -> (f64, f64, f64) {
        if let [r] = g {
            let i = r.incast.as_ref().expect("incast run");
            return (
                i.avg_rct_us / 1000.0,
                i.avg_rct_us / 1000.0,
                i.max_rct_us / 1000.0,
            );
        }
        let v: Vec<f64> = g.iter().map(|r| rct(r)).collect();
        crate::seeds::Spread::of(&v).map_or((0.0, 0.0, 0.0), |s| (s.mean, s.min, s.max))
    };
    let group = series.len() + 1;
    let width = (ms.len() * group) as f64;
    let legend_w = 40
        + 7 * series
            .iter()
            .map(|s| s.chars().count())
            .fold(24, usize::max) as u32;
    let panel_w = (110 + 40 * ms.len() * group) as u32;
    let root =
        SVGBackend::new(path, (panel_w * panels.len() as u32 + legend_w, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let (plots, key) = root.split_horizontally(panel_w * panels.len() as u32);
    for (area, p) in plots.split_evenly((1, panels.len())).iter().zip(&panels) {
        let ymax = runs
            .iter()
            .filter(|r| panel_of(r) == *p)
            .map(|r| ms_of(&find(p, &label_of(r), senders(r).unwrap_or(0))).2)
            .fold(1.0f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(
                if p.is_empty() {
                    "request completion time".to_string()
                } else {
                    format!("request completion time, {p}")
                },
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..width, 0.0..ymax)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(if seeded {
                "RCT (ms): seeds' mean of the average, whisker their range"
            } else {
                "RCT (ms): average, whisker to the slowest"
            })
            .draw()
            .map_err(draw)?;
        for (mi, &m) in ms.iter().enumerate() {
            // Each run's RCT ÷ the RoCE+PFC run's of its own seed, averaged over seeds.
            let base_of = |r: &RunSummary| {
                series
                    .iter()
                    .flat_map(|s| find(p, s, m))
                    .find(|b| {
                        b.transport == "roce"
                            && b.pfc
                            && crate::seeds::seed_token(b) == crate::seeds::seed_token(r)
                    })
                    .map(rct)
            };
            for (si, s) in series.iter().enumerate() {
                let g = find(p, s, m);
                if g.is_empty() {
                    continue;
                }
                let (avg, lo, max) = ms_of(&g);
                let ratios: Vec<f64> = g
                    .iter()
                    .filter_map(|r| base_of(r).filter(|b| *b > 0.0).map(|b| rct(r) / b))
                    .collect();
                let color = palette[si];
                let x0 = (mi * group + si) as f64 + 0.5;
                chart
                    .draw_series([Rectangle::new([(x0, 0.0), (x0 + 0.9, avg)], color.filled())])
                    .map_err(draw)?;
                whisker(&mut chart, x0 + 0.45, lo, max)?;
                let text = match crate::seeds::Spread::of(&ratios) {
                    Some(q) => format!("{:.2}", q.mean),
                    None => format!("{avg:.1}"),
                };
                value_label(&mut chart, (x0 + 0.45, max.max(avg)), text, 10, None)?;
            }
            let centre = (mi * group) as f64 + 0.5 + series.len() as f64 * 0.45;
            let (x, y) = chart.backend_coord(&(centre, 0.0));
            root.draw(&Text::new(format!("M = {m}"), (x, y + 8), centred(12)))
                .map_err(draw)?;
        }
    }
    for (si, s) in series.iter().enumerate() {
        let y = 40 + 18 * si as i32;
        key.draw(&Rectangle::new(
            [(10, y), (22, y + 12)],
            palette[si].filled(),
        ))
        .map_err(draw)?;
        key.draw(&Text::new(
            s.clone(),
            (28, y),
            ("sans-serif", 12).into_font().color(&BLACK),
        ))
        .map_err(draw)?;
    }
    key.draw(&Text::new(
        "above bars: ÷ RoCE+PFC",
        (10, 40 + 18 * series.len() as i32 + 8),
        ("sans-serif", 11).into_font().color(&BLACK),
    ))
    .map_err(draw)?;
    root.present().map_err(draw)?;
    Ok(())
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
