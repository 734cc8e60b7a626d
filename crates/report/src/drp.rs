//! The figure of a dynamic-RDMA experiment (E12, seed 003; [`irn_sim::drp`]): one panel per
//! series, the mean transfer time of traditional and dynamic RDMA against the swept failure
//! probability, or the relative gain against the transfer size.

use std::path::Path;

use plotters::prelude::*;

use irn_sim::drp::{DrpReport, DrpSeriesResult};

use crate::plot::{compact, trim};
use crate::{draw, Result};

/// The two methods, each with its colour: the same in every panel and in the key.
const METHODS: [(&str, RGBColor, bool); 2] = [
    ("traditional RDMA", RGBColor(214, 39, 40), false),
    ("dynamic RDMA", RGBColor(31, 119, 180), true),
];

/// Height of the key above the panels, px.
const KEY_H: u32 = 30;

/// One panel per series: mean transfer time of both methods against the swept value, each
/// point with a whisker over its runs' means (the seeds the point averages); one key for all
/// panels above them, outside the data.
pub fn figure(path: &Path, r: &DrpReport) -> Result<()> {
    let n = r.series.len().max(1);
    // A size sweep's panels draw one line, the gain: no key.
    let keyed = r.series.iter().any(|s| s.x != "size");
    let key_h = if keyed { KEY_H } else { 0 };
    let root = SVGBackend::new(path, (420 * n as u32, 380 + key_h)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let (key, body) = root.split_vertically(key_h);
    if keyed {
        for (i, (name, color, _)) in METHODS.iter().enumerate() {
            let x = 70 + 200 * i as i32;
            key.draw(&PathElement::new(
                vec![(x, 15), (x + 24, 15)],
                color.stroke_width(2),
            ))
            .map_err(draw)?;
            key.draw(&Circle::new((x + 12, 15), 3, color.filled()))
                .map_err(draw)?;
            key.draw(&Text::new(
                name.to_string(),
                (x + 32, 8),
                ("sans-serif", 13).into_font().color(&BLACK),
            ))
            .map_err(draw)?;
        }
    }
    let panels = body.split_evenly((1, n));
    for (s, area) in r.series.iter().zip(panels.iter()) {
        if s.x == "size" {
            size_panel(area, s)?;
            continue;
        }
        let xs: Vec<f64> = s.points.iter().map(|p| p.x).collect();
        let (x0, x1) = xs
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        let (x0, x1) = if x1 > x0 {
            (x0, x1)
        } else {
            (x0 - 1.0, x0 + 1.0)
        };
        let scale = 100.0;
        // Each point's runs (its seeds): their means set the whiskers, and the axis holds them.
        let spread = |m: &irn_sim::drp::MethodResult| {
            m.run_means_us
                .iter()
                .fold((m.mean_us, m.mean_us), |(lo, hi), &x| {
                    (lo.min(x), hi.max(x))
                })
        };
        let ymax = s
            .points
            .iter()
            .map(|p| spread(&p.traditional).1.max(spread(&p.dynamic).1))
            .fold(0.0, f64::max)
            * 1.1;
        let ymin = s
            .points
            .iter()
            .map(|p| spread(&p.traditional).0.min(spread(&p.dynamic).0))
            .fold(f64::MAX, f64::min)
            * 0.9;
        let mut chart = ChartBuilder::on(area)
            .caption(&s.name, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(x0 * scale..x1 * scale, ymin..ymax.max(ymin + 1.0))
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc(match s.x.as_str() {
                "frp" => "FRP (%)",
                "lfp" => "LFP (%)",
                _ => "FRP = LFP (%)",
            })
            .y_desc("mean transfer time (µs)")
            .x_label_formatter(&|v| trim(*v))
            .y_label_formatter(&|v| compact(*v))
            .light_line_style(BLACK.mix(0.03))
            .bold_line_style(BLACK.mix(0.12))
            .draw()
            .map_err(draw)?;
        for (_, color, dynamic) in METHODS {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|p| {
                    let m = if dynamic { &p.dynamic } else { &p.traditional };
                    (p.x * scale, m.mean_us)
                })
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(draw)?;
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(draw)?;
            // The runs' range at each point: the spread the mean hides.
            chart
                .draw_series(s.points.iter().map(|p| {
                    let m = if dynamic { &p.dynamic } else { &p.traditional };
                    let (lo, hi) = spread(m);
                    PathElement::new(vec![(p.x * scale, lo), (p.x * scale, hi)], color)
                }))
                .map_err(draw)?;
        }
    }
    root.present().map_err(draw)?;
    Ok(())
}

/// A size sweep: what matters is the relative gain, against the transfer size on a log scale.
fn size_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    s: &DrpSeriesResult,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts: Vec<(f64, f64)> = s
        .points
        .iter()
        .map(|p| (p.x.max(1.0) / 1024.0, p.change_pct))
        .collect();
    let (x0, x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &(x, _)| (a.min(x), b.max(x)));
    let ymin = pts.iter().map(|p| p.1).fold(0.0, f64::min) * 1.2 - 0.5;
    let mut chart = ChartBuilder::on(area)
        .caption(&s.name, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d((x0 / 1.5..x1 * 1.5).log_scale(), ymin..1.0)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("transfer size (KiB, log scale)")
        .y_desc("dynamic vs traditional (%)")
        .x_label_formatter(&|v| trim(*v))
        .y_label_formatter(&|v| trim(*v))
        .light_line_style(BLACK.mix(0.03))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(draw)?;
    let color = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
        .map_err(draw)?;
    chart
        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
        .map_err(draw)?;
    chart
        .draw_series(LineSeries::new(
            [(x0 / 1.5, 0.0), (x1 * 1.5, 0.0)],
            BLACK.mix(0.5),
        ))
        .map_err(draw)?;
    Ok(())
}

fn x_label(s: &DrpSeriesResult, x: f64) -> String {
    if s.x == "size" {
        format!("{:.0} B", x)
    } else {
        format!("{:.0} %", x * 100.0)
    }
}

/// E12's table: per series, each point's failed-registration and lost-frame probabilities
/// (FRP, LFP), traditional and dynamic RDMA's mean transfer times, the change, the share
/// sent indirectly, the 99th percentiles and the transfers that failed or arrived corrupted.
pub fn table(out: &mut dyn std::io::Write, r: &DrpReport) -> std::io::Result<()> {
    let c = &r.config;
    let size = if c.series.iter().any(|s| s.x == "size") {
        "per-row".to_string()
    } else {
        format!("{} B", c.drp.size)
    };
    writeln!(
        out,
        "{}: {} {size} transfers in {} B frames, {} transfers x {} runs per point, {} Gb/s",
        r.name, c.drp.op, c.drp.payload, c.transfers, c.runs, c.link.rate_gbps
    )?;
    for s in &r.series {
        writeln!(out)?;
        writeln!(
            out,
            "{:<14} {:>8} {:>8} {:>15} {:>13} {:>9} {:>10} {:>13} {:>9}",
            s.name,
            "FRP",
            "LFP",
            "traditional µs",
            "dynamic µs",
            "change",
            "indirect",
            "p99 trad/dyn",
            "failed"
        )?;
        for p in &s.points {
            writeln!(
                out,
                "{:<14} {:>7.1}% {:>7.1}% {:>15.1} {:>13.1} {:>8.1}% {:>9.1}% {:>6.0}/{:<6.0} {:>9}",
                x_label(s, p.x),
                p.frp * 100.0,
                p.lfp * 100.0,
                p.traditional.mean_us,
                p.dynamic.mean_us,
                p.change_pct,
                p.dynamic.indirect_share * 100.0,
                p.traditional.p99_us,
                p.dynamic.p99_us,
                p.traditional.failed + p.dynamic.failed
                    + p.traditional.corrupted
                    + p.dynamic.corrupted
            )?;
        }
    }
    Ok(())
}
