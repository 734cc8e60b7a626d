//! The drawing pieces the figures share: the chart and area types of the SVG backend, a ratio
//! chart's grid, whiskers, value labels kept clear of a reference line, anchored text, and
//! axis numbers in few characters.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::{draw, Result};

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// A chart of the SVG backend over two `f64` axes.
pub(super) type Chart<'a> =
    ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The grid of a chart of ratios over categories: horizontal lines only, no x labels (the
/// caller writes the categories' names under their groups).
pub(super) fn ratio_mesh(chart: &mut Chart<'_>) -> Result<()> {
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(1)
        .x_labels(0)
        .y_desc("ratio")
        .draw()
        .map_err(draw)
}

/// A vertical line at `x` from `lo` to `hi`: a spread over seeds, or a slowest request.
pub(super) fn whisker(chart: &mut Chart<'_>, x: f64, lo: f64, hi: f64) -> Result<()> {
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
pub(super) fn value_label(
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
pub(super) fn centred(size: u32) -> TextStyle<'static> {
    anchored(
        size,
        plotters::style::text_anchor::HPos::Center,
        plotters::style::text_anchor::VPos::Top,
    )
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
