//! The tail of single-packet flows' completion times ([`tail_cdf`], IRN §4.3's figure, SPEC
//! E7), on a log FCT axis against a "nines" percentile axis.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use irn_sim::metrics::RunSummary;

use super::marks::compact;
use super::note;
use crate::axes::{decade_ticks, nines, nines_label, Ticked};
use crate::{draw, PlotError, Result};

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
