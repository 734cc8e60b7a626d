//! Bar charts: the paper's three metrics of every run as ratios to its baseline
//! ([`bars`], the form of the IRN paper's Figures 1–3), and traffic classes side by side
//! ([`class_bars`]).

use std::path::Path;

use plotters::prelude::*;

use irn_sim::metrics::{ClassReport, FlowStats, RunSummary};

use super::marks::{centred, ratio_mesh, value_label, whisker, Area};
use super::{baseline_label, baseline_of, note, COLORS};
use crate::{draw, PlotError, Result};

/// A metric's name and how to read it off a run.
type Metric = (&'static str, fn(&RunSummary) -> f64);

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
