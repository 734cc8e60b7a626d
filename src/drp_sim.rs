//! `irn sim` on an E12 file (`kind = "dynamic-rdma"`): dynamic against traditional RDMA on a
//! point-to-point link ([`irn_sim::drp`]), printed as a table per series, written as JSON, and
//! drawn as one panel of transfer time per series.

use std::io::Write;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;

use irn_sim::drp::{all_intact, run_experiment, DrpExperiment, DrpReport, DrpSeriesResult};

use crate::sim_cmd::SimArgs;

/// Runs the experiment; `Ok(false)` if a transfer failed or arrived corrupted.
pub fn run(args: &SimArgs, text: &str, origin: &str) -> Result<bool> {
    let exp = DrpExperiment::load(text, origin, &args.sets, args.seed)?;
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
    print_table(&mut stdout.lock(), &report)?;
    if let Some(path) = &args.json {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(&mut f, &report)?;
        writeln!(f)?;
    }
    if let Some(path) = &args.figures.plot {
        plot(path, &report)?;
    }
    if args.csv.is_some() {
        eprintln!("note: --csv has no per-flow records for a dynamic-rdma experiment");
    }
    let ok = all_intact(&report);
    if !ok {
        eprintln!("error: some transfers failed or arrived corrupted (see `failed`, `corrupted`)");
    }
    Ok(ok)
}

fn x_label(s: &DrpSeriesResult, x: f64) -> String {
    if s.x == "size" {
        format!("{:.0} B", x)
    } else {
        format!("{:.0} %", x * 100.0)
    }
}

fn print_table(out: &mut dyn Write, r: &DrpReport) -> Result<()> {
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

/// One panel per series: mean transfer time of both methods against the swept value.
fn plot(path: &std::path::Path, r: &DrpReport) -> Result<()> {
    let n = r.series.len().max(1);
    let root = SVGBackend::new(path, (420 * n as u32, 380)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, n));
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
        let ymax = s
            .points
            .iter()
            .map(|p| p.traditional.mean_us.max(p.dynamic.mean_us))
            .fold(0.0, f64::max)
            * 1.1;
        let ymin = s
            .points
            .iter()
            .map(|p| p.traditional.mean_us.min(p.dynamic.mean_us))
            .fold(f64::MAX, f64::min)
            * 0.9;
        let mut chart = ChartBuilder::on(area)
            .caption(&s.name, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(x0 * scale..x1 * scale, ymin..ymax.max(ymin + 1.0))?;
        chart
            .configure_mesh()
            .x_desc(match s.x.as_str() {
                "frp" => "FRP (%)",
                "lfp" => "LFP (%)",
                _ => "FRP = LFP (%)",
            })
            .y_desc("mean transfer time (µs)")
            .draw()?;
        let series = [
            ("traditional", RGBColor(214, 39, 40), false),
            ("dynamic", RGBColor(31, 119, 180), true),
        ];
        for (name, color, dynamic) in series {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|p| {
                    let m = if dynamic { &p.dynamic } else { &p.traditional };
                    (p.x * scale, m.mean_us)
                })
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
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
        .build_cartesian_2d((x0 / 1.5..x1 * 1.5).log_scale(), ymin..1.0)?;
    chart
        .configure_mesh()
        .x_desc("transfer size (KiB, log scale)")
        .y_desc("dynamic vs traditional (%)")
        .draw()?;
    let color = RGBColor(31, 119, 180);
    chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?;
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    chart.draw_series(LineSeries::new(
        [(x0 / 1.5, 0.0), (x1 * 1.5, 0.0)],
        BLACK.mix(0.5),
    ))?;
    Ok(())
}
