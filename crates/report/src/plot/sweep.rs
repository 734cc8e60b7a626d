//! Figures over a sweep of scenarios: a robustness sweep's ratios to RoCE+PFC per scenario
//! ([`ratio_plot`], E6) and an incast's request completion times against the number of
//! senders ([`incast_plot`], the IRN paper's Figure 9, E8).

use std::path::Path;

use plotters::prelude::*;

use irn_sim::metrics::RunSummary;

use super::marks::{centred, ratio_mesh, value_label, whisker};
use super::{baseline_of, label_of, note};
use crate::{draw, PlotError, Result};

/// Baseline ÷ run for each of the paper's three metrics, where the baseline is
/// [`baseline_of`] (the RoCE+PFC run of the run's own scenario): above 1, the run is better —
/// the IRN paper's "RoCE+PFC ÷ IRN" convention.
fn paper_ratios(runs: &[RunSummary], r: &RunSummary) -> Option<[f64; 3]> {
    let b = baseline_of(runs, r, None)?;
    let m = |s: &RunSummary| [s.all.avg_slowdown, s.all.avg_fct_us, s.all.p99_fct_us];
    let (x, y) = (m(b), m(r));
    (y.iter().all(|v| *v > 0.0)).then(|| [x[0] / y[0], x[1] / y[1], x[2] / y[2]])
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
