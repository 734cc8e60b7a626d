//! The fabric over simulated time ([`timeline`]): goodput, hosts paused, pause frames per
//! second, and the packets sent to failed hosts — the view an operator has of a PFC storm or
//! deadlock (seed 001 §4–§5).

use std::path::Path;

use plotters::prelude::*;

use irn_sim::metrics::RunSummary;

use super::marks::{compact, thousands, Area, Chart};
use crate::{draw, PlotError, Result};

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
