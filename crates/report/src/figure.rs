//! Figures as a paper prints them: one colour per transport in every figure
//! ([`transport_colour`]), each claim's measure against the paper's band ([`claim_figure`]),
//! PNG at 300 dpi for one column (3.5 in) or two (7 in) ([`png`]), and a check that no two
//! texts of a drawn SVG overlap ([`text_overlaps`]).

use std::path::Path;

use plotters::prelude::*;

use crate::claims::Row;
use crate::seeds::Spread;
use crate::{draw, PlotError, Result};

/// Pixels per inch of the SVG figures drawn here: 3.5 in (a column) is 525 px.
pub const SVG_PPI: f64 = 150.0;

/// One column of a two-column paper, inches.
pub const COLUMN_IN: f64 = 3.5;

/// Both columns, inches.
pub const TWO_COLUMNS_IN: f64 = 7.0;

/// The colour of a transport, the same in every figure: the run's name is matched from its
/// most specific family to its least (Okabe–Ito's colour-blind-safe palette).
pub fn transport_colour(name: &str) -> RGBColor {
    // Ordered so that `RoCE+PFC` is found before `RoCE`, `IRN+PFC` before `IRN`.
    const FAMILIES: [(&str, RGBColor); 10] = [
        ("Resilient RoCE", RGBColor(204, 121, 167)),
        ("RoCE+PFC", RGBColor(230, 159, 0)),
        ("IRN+PFC", RGBColor(86, 180, 233)),
        ("Reorder buffer", RGBColor(0, 158, 115)),
        ("Extended IB", RGBColor(240, 228, 66)),
        ("TCP", RGBColor(120, 120, 120)),
        ("go-back-0", RGBColor(170, 60, 60)),
        ("go-back-N", RGBColor(213, 94, 0)),
        ("RoCE", RGBColor(213, 94, 0)),
        ("IRN", RGBColor(0, 114, 178)),
    ];
    // A family counts where it begins a word of the name (`lossy, IRN`, `IRN+AIMD`), not
    // inside one (`DCTCP` is no TCP).
    let begins_word = |family: &str| {
        name.match_indices(family).any(|(at, _)| {
            name[..at]
                .chars()
                .next_back()
                .is_none_or(|c| matches!(c, ' ' | ',' | '(' | '/'))
        })
    };
    FAMILIES
        .iter()
        .find(|(family, _)| begins_word(family))
        .map_or(RGBColor(90, 90, 90), |&(_, c)| c)
}

/// One colour per run of a figure: each run its transport's ([`transport_colour`]), so that a
/// transport is the same colour in every figure; a second run of a transport already drawn
/// (IRN and IRN without BDP-FC) a shade of it, lighter then darker; a run of no known
/// transport a colour of the fallback palette no transport uses.
pub fn colours_for<S: AsRef<str>>(names: &[S]) -> Vec<RGBColor> {
    const OTHERS: [RGBColor; 6] = [
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(23, 190, 207),
        RGBColor(188, 189, 34),
        RGBColor(127, 127, 127),
        RGBColor(227, 119, 194),
    ];
    let unknown = RGBColor(90, 90, 90);
    let shade = |c: RGBColor, k: usize| -> RGBColor {
        // 1: 45 % towards white; 2: 35 % towards black; 3: 70 % towards white; then again.
        let (towards, t) = match k % 3 {
            1 => (255.0, 0.45),
            2 => (0.0, 0.35),
            _ => (255.0, 0.7),
        };
        let mix = |x: u8| (f64::from(x) + (towards - f64::from(x)) * t).round() as u8;
        RGBColor(mix(c.0), mix(c.1), mix(c.2))
    };
    let mut used: Vec<(RGBColor, usize)> = Vec::new();
    let mut others = 0;
    names
        .iter()
        .map(|n| {
            let base = transport_colour(n.as_ref());
            if base == unknown {
                let c = OTHERS[others % OTHERS.len()];
                others += 1;
                return c;
            }
            match used.iter_mut().find(|(c, _)| *c == base) {
                Some((_, k)) => {
                    *k += 1;
                    shade(base, *k)
                }
                None => {
                    used.push((base, 0));
                    base
                }
            }
        })
        .collect()
}

/// A metric key as a reader reads it (`avg_fct_us` → `avg FCT`,
/// `single_packet_tail[pct=99.9].fct_us` → `p99.9 single-packet FCT`,
/// `classes.victim.paused_us` → `victim: paused µs`).
pub fn metric_words(key: &str) -> String {
    if let Some(rest) = key.strip_prefix("with_unfinished.") {
        return format!("{}, unfinished counted", metric_words(rest));
    }
    if let Some(rest) = key.strip_prefix("incast.background.") {
        return format!("background {}", metric_words(rest));
    }
    if let Some(rest) = key.strip_prefix("single_packet_tail[pct=") {
        let pct = rest.split(']').next().unwrap_or(rest);
        return format!("p{pct} single-packet FCT");
    }
    if let Some(rest) = key.strip_prefix("classes.") {
        if let Some((class, metric)) = rest.rsplit_once('.') {
            return format!("{class}: {}", metric_words(metric));
        }
    }
    match key {
        "avg_slowdown" => "avg slowdown",
        "avg_fct_us" => "avg FCT",
        "p99_fct_us" => "p99 FCT",
        "p999_fct_us" => "p99.9 FCT",
        "incast.avg_rct_us" => "avg RCT",
        "drop_rate" => "drop rate",
        "paused_us" => "paused µs",
        "goodput_gbps" => "goodput",
        "flows_unfinished" => "flows unfinished",
        "pct_of_mlx5_qpc" => "% of a QP context",
        "safety.paused_hosts_max" => "servers paused, most",
        "safety.config_findings" => "findings",
        "pingmesh.suspects" => "suspects",
        other => other,
    }
    .to_string()
}

/// What a claim's figure shows: its rows (label, spread), the axis's name, the paper's band
/// and the claim's threshold or expected band.
pub struct ClaimFigure<'a> {
    /// The claim's id and a few words (`E1: RoCE+PFC ÷ IRN`).
    pub title: &'a str,
    /// The axis's name with its unit (`ratio`, `change of transfer time, %`).
    pub axis: &'a str,
    /// The rows.
    pub rows: &'a [Row],
    /// The paper's band, shaded.
    pub band: Option<[f64; 2]>,
    /// The line a held claim's means must be on the right side of (dashed).
    pub threshold: Option<f64>,
    /// The band a held claim's means must be in (dashed edges).
    pub within: Option<[f64; 2]>,
    /// The bars' colour (the measured run's transport).
    pub colour: RGBColor,
    /// A colour per label down the side instead (one per run, [`colours_for`]), if given.
    pub label_colours: Option<&'a [RGBColor]>,
    /// What the dashed line is, in the key (`what the claim needs`).
    pub threshold_words: &'a str,
}

/// Draws a claim's rows as horizontal bars at irn's mean with the seeds' range as a whisker,
/// the paper's band shaded behind them, the claim's threshold dashed: one column wide (two
/// when labels are long or there are several panels), one row of text per bar, values right
/// of the whiskers. Several metrics over several scenarios are small multiples: one panel
/// per metric, the scenarios down the side, one value axis for all.
pub fn claim_figure(path: &Path, fig: &ClaimFigure<'_>) -> Result<()> {
    if fig.rows.is_empty() {
        return Err(PlotError::Nothing("a claim with no measured row"));
    }
    let mut scenarios: Vec<&str> = Vec::new();
    let mut metrics: Vec<&str> = Vec::new();
    for r in fig.rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
        if !metrics.contains(&r.metric.as_str()) {
            metrics.push(&r.metric);
        }
    }
    let multiples = metrics.len() > 1 && scenarios.len() > 3;
    // Panels of rows, and the labels down the side (the same for every panel).
    // Each panel's row of each label, if it has one (a scenario may lack a metric).
    type Panel<'r> = (String, Vec<Option<&'r Row>>);
    let (panels, labels): (Vec<Panel<'_>>, Vec<String>) = if multiples {
        (
            metrics
                .iter()
                .map(|m| {
                    let rows = scenarios
                        .iter()
                        .map(|sc| {
                            fig.rows
                                .iter()
                                .find(|r| r.metric == *m && r.scenario == *sc)
                        })
                        .collect();
                    (metric_words(m), rows)
                })
                .collect(),
            scenarios.iter().map(|s| s.to_string()).collect(),
        )
    } else {
        let labels = fig
            .rows
            .iter()
            .map(|r| {
                let metric = metric_words(&r.metric);
                if r.scenario.is_empty() {
                    metric
                } else if metrics.len() == 1 {
                    r.scenario.clone()
                } else {
                    format!("{} · {metric}", r.scenario)
                }
            })
            .collect();
        (
            vec![(String::new(), fig.rows.iter().map(Some).collect())],
            labels,
        )
    };
    let font = 13u32;
    // What a glyph of the report's sans-serif takes on average (DejaVu Sans: digits 0.64 em).
    let char_w = 0.62 * f64::from(font);
    let label_w =
        labels.iter().map(|l| l.chars().count()).max().unwrap_or(4) as f64 * char_w + 16.0;
    let width_in = if multiples || label_w > 0.4 * COLUMN_IN * SVG_PPI {
        TWO_COLUMNS_IN
    } else {
        COLUMN_IN
    };
    let w = (width_in * SVG_PPI) as u32;
    let row_h = 24u32;
    let n_rows = labels.len();
    let top = if multiples { 52 } else { 34 };
    // The key under the axis, what the shading, the dashes and the grey are, laid out in
    // lines that fit the width: (sample, words, x, line).
    let mut items: Vec<(Key, String)> = Vec::new();
    if fig.band.is_some() {
        items.push((Key::Band, "the paper's band".into()));
    }
    if fig.threshold.is_some() || fig.within.is_some() {
        items.push((Key::Dashes, fig.threshold_words.to_string()));
    }
    if fig.label_colours.is_none() && fig.rows.iter().any(|r| !r.held) {
        items.push((Key::Words, "grey: a row that does not hold".into()));
    }
    let mut placed: Vec<(Key, String, i32, i32)> = Vec::new();
    let (mut x, mut line) = (12i32, 0i32);
    for (kind, words) in items {
        let sample = if kind == Key::Words { 0 } else { 22 };
        let width = sample + (words.chars().count() as f64 * char_w) as i32;
        if x > 12 && x + width > w as i32 - 8 {
            x = 12;
            line += 1;
        }
        placed.push((kind, words, x, line));
        x += width + 18;
    }
    let key_lines = placed.iter().map(|p| p.3 + 1).max().unwrap_or(0) as u32;
    let h = top + row_h * n_rows as u32 + 36 + 20 + 20 * key_lines;
    // One value axis: from 0 (or the least value) to past the greatest, the band and the
    // threshold, with room for the value written right of each whisker.
    let mut lo = fig.rows.iter().map(|r| r.spread.min).fold(0.0f64, f64::min);
    let mut hi = fig
        .rows
        .iter()
        .map(|r| r.spread.max)
        .fold(f64::NEG_INFINITY, f64::max);
    for x in fig
        .band
        .into_iter()
        .flatten()
        .chain(fig.within.into_iter().flatten())
        .chain(fig.threshold)
    {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    let span = (hi - lo).max(1e-9);
    let room = if multiples { 0.35 } else { 0.22 };
    let (x0, x1) = (
        if lo < 0.0 { lo - 0.05 * span } else { 0.0 },
        hi + room * span,
    );
    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let style = ("sans-serif", font).into_font().color(&BLACK);
    root.draw(&Text::new(
        fig.title.to_string(),
        (w as i32 / 2, 8),
        ("sans-serif", 15)
            .into_font()
            .color(&BLACK)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            )),
    ))
    .map_err(draw)?;
    let body = root.margin(top - 18, 40, label_w as u32, 12);
    let areas = body.split_evenly((1, panels.len()));
    let n = n_rows as f64;
    let mut key_at = (0, 0);
    for (pi, ((title, rows), area)) in panels.iter().zip(&areas).enumerate() {
        let mut builder = ChartBuilder::on(area);
        // Panels side by side keep their outer tick labels apart.
        builder
            .margin(6)
            .margin_right(if multiples { 28 } else { 6 })
            .x_label_area_size(36)
            .y_label_area_size(0);
        if multiples {
            builder.caption(title, ("sans-serif", font));
        }
        let mut chart = builder.build_cartesian_2d(x0..x1, 0.0..n).map_err(draw)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_labels(if multiples { 4 } else { 6 })
            .max_light_lines(0)
            .x_desc(if pi == 0 { fig.axis } else { "" })
            .label_style(("sans-serif", font))
            .axis_desc_style(("sans-serif", font))
            .draw()
            .map_err(draw)?;
        if let Some([a, b]) = fig.band {
            chart
                .draw_series([Rectangle::new(
                    [(a, 0.0), (b.max(a + span * 0.004), n)],
                    RGBColor(120, 200, 120).mix(0.25).filled(),
                )])
                .map_err(draw)?;
        }
        // Dashes of a quarter row, whatever the number of rows.
        let dashed = |x: f64| -> Vec<PathElement<(f64, f64)>> {
            let steps = 4 * n_rows.max(1);
            (0..steps)
                .step_by(2)
                .map(|i| {
                    let (a, b) = (
                        n * i as f64 / steps as f64,
                        n * (i + 1) as f64 / steps as f64,
                    );
                    PathElement::new(vec![(x, a), (x, b)], BLACK.stroke_width(1))
                })
                .collect()
        };
        for x in fig
            .threshold
            .into_iter()
            .chain(fig.within.into_iter().flatten())
        {
            chart.draw_series(dashed(x)).map_err(draw)?;
        }
        for (i, row) in rows.iter().enumerate() {
            // Row 0 at the top.
            let y = n - i as f64 - 0.5;
            if pi == 0 {
                let (lx, py) = chart.backend_coord(&(x0, y));
                root.draw(&Text::new(
                    labels[i].clone(),
                    (lx - 8, py),
                    style.clone().pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Right,
                        plotters::style::text_anchor::VPos::Center,
                    )),
                ))
                .map_err(draw)?;
            }
            let Some(row) = row else {
                continue;
            };
            let Spread { mean, min, max } = row.spread;
            let colour = match fig.label_colours.and_then(|c| c.get(i)) {
                Some(&c) => c,
                None if row.held => fig.colour,
                None => RGBColor(200, 200, 200),
            };
            chart
                .draw_series([Rectangle::new(
                    [(0.0f64.max(x0), y - 0.32), (mean, y + 0.32)],
                    colour.filled(),
                )])
                .map_err(draw)?;
            if max > min {
                chart
                    .draw_series([
                        PathElement::new(vec![(min, y), (max, y)], BLACK.stroke_width(1)),
                        PathElement::new(
                            vec![(min, y - 0.18), (min, y + 0.18)],
                            BLACK.stroke_width(1),
                        ),
                        PathElement::new(
                            vec![(max, y - 0.18), (max, y + 0.18)],
                            BLACK.stroke_width(1),
                        ),
                    ])
                    .map_err(draw)?;
            }
            let (px, py) = chart.backend_coord(&(max.max(mean), y));
            // On white, so that a dashed line under it does not strike it through.
            let value = format!("{mean:.*}", crate::seeds::decimals(mean));
            let text_w = (value.chars().count() as f64 * 0.62 * f64::from(font)) as i32;
            root.draw(&Rectangle::new(
                [
                    (px + 3, py - font as i32 / 2),
                    (px + 7 + text_w, py + font as i32 / 2),
                ],
                WHITE.filled(),
            ))
            .map_err(draw)?;
            root.draw(&Text::new(
                value,
                (px + 5, py - font as i32 / 2),
                style.clone(),
            ))
            .map_err(draw)?;
        }
        if pi == 0 {
            key_at = chart.backend_coord(&(x0, 0.0));
        }
    }
    // The key, under the axis.
    let bottom = key_at.1;
    for (kind, words, x, line) in placed {
        let y = bottom + 48 + 20 * line;
        match kind {
            Key::Band => root
                .draw(&Rectangle::new(
                    [(x, y - 5), (x + 16, y + 5)],
                    RGBColor(120, 200, 120).mix(0.25).filled(),
                ))
                .map_err(draw)?,
            Key::Dashes => {
                for i in 0..3 {
                    root.draw(&PathElement::new(
                        vec![(x + 6 * i, y), (x + 6 * i + 3, y)],
                        BLACK.stroke_width(1),
                    ))
                    .map_err(draw)?;
                }
            }
            Key::Words => {}
        }
        let at = if kind == Key::Words { x } else { x + 22 };
        root.draw(&Text::new(words, (at, y - font as i32 / 2), style.clone()))
            .map_err(draw)?;
    }
    root.present().map_err(draw)?;
    Ok(())
}

/// An entry of a claim figure's key: its sample, then its words.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    /// A patch of the paper's band.
    Band,
    /// A dashed line.
    Dashes,
    /// Words alone.
    Words,
}

/// Renders an SVG to a PNG `width_in` inches wide at 300 dots per inch (with the system's
/// fonts; a white background).
pub fn png(svg: &Path, out: &Path, width_in: f64) -> Result<()> {
    let data = std::fs::read(svg).map_err(draw)?;
    let mut opt = resvg::usvg::Options::default();
    let db = opt.fontdb_mut();
    db.load_system_fonts();
    // plotters names the generic family; fontdb's default for it (Arial) is rarely installed
    // on Linux: the first sans-serif face the system has.
    let sans = [
        "DejaVu Sans",
        "Liberation Sans",
        "Noto Sans",
        "FreeSans",
        "Arial",
    ]
    .into_iter()
    .find(|f| {
        db.faces()
            .any(|face| face.families.iter().any(|(name, _)| name == f))
    });
    match sans {
        Some(f) => db.set_sans_serif_family(f),
        None if db.is_empty() => {
            return Err(PlotError::Draw(
                "no font on this system: install one (Debian: fonts-dejavu-core)".into(),
            ))
        }
        None => {}
    }
    let tree = resvg::usvg::Tree::from_data(&data, &opt).map_err(draw)?;
    let size = tree.size();
    let px_w = (width_in * 300.0).round() as u32;
    let scale = px_w as f32 / size.width();
    let px_h = (size.height() * scale).ceil() as u32;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(px_w, px_h.max(1))
        .ok_or_else(|| PlotError::Draw(format!("{px_w}×{px_h}: not a picture size")))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap.save_png(out).map_err(draw)
}

/// The inches an SVG figure prints at: its width in pixels at [`SVG_PPI`], which is one
/// column or two for the figures drawn here.
pub fn print_width_in(svg: &Path) -> Result<f64> {
    let data = std::fs::read(svg).map_err(draw)?;
    let opt = resvg::usvg::Options::default();
    let tree = resvg::usvg::Tree::from_data(&data, &opt).map_err(draw)?;
    let inches = f64::from(tree.size().width()) / SVG_PPI;
    Ok(if inches <= COLUMN_IN * 1.2 {
        COLUMN_IN
    } else {
        TWO_COLUMNS_IN
    })
}

/// A text element of an SVG as laid out: its string and its box (x, y of the top left,
/// width, height), estimated from the font size (0.62 em a glyph: DejaVu Sans's digits are
/// 0.64 em, its lower case 0.55–0.65).
#[derive(Debug, Clone, PartialEq)]
pub struct TextBox {
    /// The text.
    pub text: String,
    /// Left, top, width, height, pixels.
    pub rect: [f64; 4],
}

/// Every pair of texts in `svg` (plotters' output: `<text x y dy text-anchor font-size>`) whose boxes overlap by more than a pixel each way.
pub fn text_overlaps(svg: &str) -> Vec<(TextBox, TextBox)> {
    let boxes = text_boxes(svg);
    let mut out = Vec::new();
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            let [ax, ay, aw, ah] = a.rect;
            let [bx, by, bw, bh] = b.rect;
            let dx = (ax + aw).min(bx + bw) - ax.max(bx);
            let dy = (ay + ah).min(by + bh) - ay.max(by);
            if dx > -1.0 && dy > 0.0 {
                out.push((a.clone(), b.clone()));
            }
        }
    }
    out
}

/// The texts of an SVG with their estimated boxes.
pub fn text_boxes(svg: &str) -> Vec<TextBox> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        rest = &rest[start..];
        let Some(tag_end) = rest.find('>') else { break };
        let tag = &rest[..tag_end];
        let Some(close) = rest.find("</text>") else {
            break;
        };
        let body = unescape(&rest[tag_end + 1..close]).trim().to_string();
        rest = &rest[close..];
        let attr = |name: &str| -> Option<&str> {
            let key = format!(" {name}=\"");
            let at = tag.find(&key)? + key.len();
            let end = tag[at..].find('"')?;
            Some(&tag[at..at + end])
        };
        let num =
            |name: &str| attr(name).and_then(|v| v.trim_end_matches("px").parse::<f64>().ok());
        let (Some(x), Some(y)) = (num("x"), num("y")) else {
            continue;
        };
        if body.trim().is_empty() {
            continue;
        }
        let size = num("font-size").unwrap_or(12.0);
        let w = body.chars().count() as f64 * 0.62 * size;
        let h = size;
        let left = match attr("text-anchor") {
            Some("middle") => x - w / 2.0,
            Some("end") => x - w,
            _ => x,
        };
        // plotters places a text by `dy` from `y` (0.76em: `y` is its top; 0.5ex: its middle;
        // none: its baseline); the ascent is 0.76 em.
        let dy = attr("dy").map_or(0.0, |d| {
            if let Some(em) = d.strip_suffix("em") {
                em.parse::<f64>().unwrap_or(0.0) * size
            } else if let Some(ex) = d.strip_suffix("ex") {
                ex.parse::<f64>().unwrap_or(0.0) * size / 2.0
            } else {
                d.trim_end_matches("px").parse::<f64>().unwrap_or(0.0)
            }
        });
        let top = y + dy - 0.76 * h;
        // A rotated text (an axis's name) is left out: its box is not the estimate.
        if attr("transform").is_some_and(|t| t.contains("rotate")) {
            continue;
        }
        out.push(TextBox {
            text: body,
            rect: [left, top, w, h],
        });
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, metric: &str, mean: f64, min: f64, max: f64) -> Row {
        Row {
            scenario: scenario.into(),
            metric: metric.into(),
            spread: Spread { mean, min, max },
            seeds: 3,
            held: mean > 1.0,
            every_seed: min > 1.0,
        }
    }

    #[test]
    fn every_transport_keeps_its_colour_and_pfc_variants_differ() {
        assert_eq!(
            transport_colour("RoCE+PFC DCQCN"),
            transport_colour("RoCE+PFC")
        );
        assert_ne!(transport_colour("RoCE+PFC"), transport_colour("RoCE"));
        assert_ne!(transport_colour("IRN+PFC"), transport_colour("IRN"));
        assert_eq!(
            transport_colour("IRN load=0.3"),
            transport_colour("IRN DCQCN")
        );
        assert_ne!(transport_colour("Resilient RoCE"), transport_colour("RoCE"));
        // A congestion controller's name is no transport.
        assert_eq!(transport_colour("IRN DCTCP"), transport_colour("IRN"));
        assert_eq!(transport_colour("RoCE DCTCP"), transport_colour("RoCE"));
        assert_eq!(transport_colour("lossy, IRN"), transport_colour("IRN"));
        assert_eq!(transport_colour("TCP rwnd=BDP"), transport_colour("TCP"));
    }

    #[test]
    fn runs_of_one_transport_get_shades_of_its_colour_and_others_their_own() {
        let c = colours_for(&["IRN", "IRN no BDP-FC", "RoCE+PFC", "IRN go-back-N", "weird"]);
        assert_eq!(c[0], transport_colour("IRN"));
        assert_eq!(c[2], transport_colour("RoCE+PFC"));
        assert_ne!(c[1], c[0]);
        assert_ne!(c[3], c[1]);
        assert_ne!(c[4], c[0]);
        let mut all = c.clone();
        all.dedup();
        assert_eq!(all.len(), 5, "five runs, five colours");
    }

    #[test]
    fn a_claim_figure_has_no_overlapping_text_and_renders_at_300_dpi() {
        let dir = std::env::temp_dir().join(format!("irn-claimfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let svg = dir.join("c.svg");
        let rows = [
            row("", "avg_slowdown", 1.77, 1.62, 1.91),
            row("", "avg_fct_us", 1.47, 1.39, 1.57),
            row("", "p99_fct_us", 0.94, 0.9, 1.01),
        ];
        claim_figure(
            &svg,
            &ClaimFigure {
                title: "E1: RoCE+PFC ÷ IRN",
                axis: "ratio",
                rows: &rows,
                band: Some([2.8, 3.7]),
                threshold: Some(1.0),
                within: None,
                colour: transport_colour("RoCE+PFC"),
                label_colours: None,
                threshold_words: "what the claim needs",
            },
        )
        .expect("drawn");
        let text = std::fs::read_to_string(&svg).expect("svg");
        for want in [
            "avg slowdown",
            "p99 FCT",
            "1.77",
            "the paper&apos;s band",
            "ratio",
        ] {
            assert!(text.contains(want), "{want} missing");
        }
        let overlaps = text_overlaps(&text);
        assert!(overlaps.is_empty(), "{overlaps:?}");
        assert_eq!(print_width_in(&svg).expect("width"), COLUMN_IN);
        let out = dir.join("c.png");
        png(&svg, &out, COLUMN_IN).expect("png");
        let bytes = std::fs::read(&out).expect("png file");
        assert_eq!(&bytes[1..4], b"PNG");
        // The IHDR's width: 3.5 in at 300 dpi.
        let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        assert_eq!(width, 1050);
    }

    #[test]
    fn overlapping_texts_are_found() {
        let svg = r#"<svg><text x="10" y="20" font-size="12">label one</text>
<text x="30" y="22" font-size="12">label two</text>
<text x="10" y="80" font-size="12">far &amp; away</text></svg>"#;
        let o = text_overlaps(svg);
        assert_eq!(o.len(), 1);
        assert_eq!(
            (o[0].0.text.as_str(), o[0].1.text.as_str()),
            ("label one", "label two")
        );
        assert_eq!(text_boxes(svg)[2].text, "far & away");
    }
}
