//! Axes the figures choose the ticks of: a log axis labelled at 1-2-5 ([`decade_ticks`]), the
//! tail figure's "nines" axis ([`nines`]), and the coordinate that carries chosen ticks over a
//! plotters one ([`Ticked`]).

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

/// A percentile's height on the tail figure's "nines" axis, `-log10(1 - p/100)`: 90 sits at 1,
/// 99 at 2, 99.9 at 3, so each tenfold-rarer tail gets the same room (on a linear axis from 90
/// to 100, 99 to 99.9 gets 9 % of the height). The 100th percentile sits at 4, as 99.99 would.
pub(crate) fn nines(pct: f64) -> f64 {
    -(1.0 - pct / 100.0).max(1e-4).log10()
}

/// An axis whose ticks the figure chooses (`bold`, labelled, and `light` grid lines) over a
/// plotters coordinate that maps the values: plotters' own choice on a log axis spanning
/// about one decade is a single tick, and a "nines" axis wants its ticks at 90, 99, 99.9.
pub(crate) struct Ticked<R> {
    inner: R,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ticked<R> {
    /// `inner` with the given ticks, those outside its range dropped.
    pub(crate) fn new(inner: R, bold: &[f64], light: &[f64]) -> Self {
        let range = inner.range();
        let (lo, hi) = (range.start.min(range.end), range.start.max(range.end));
        let within = |v: &[f64]| {
            v.iter()
                .copied()
                .filter(|x| (lo..=hi).contains(x))
                .collect()
        };
        Ticked {
            bold: within(bold),
            light: within(light),
            inner,
        }
    }
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> std::ops::Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

/// The ticks of a log axis over `lo..=hi`, labelled (`bold`) and grid lines only (`light`),
/// all within the range: the 1-2-5 steps of each decade (…, 10, 20, 50, 100, …) with the other
/// whole multiples as grid lines — every whole multiple labelled where a span under about
/// two has fewer than two 1-2-5 steps, and only the powers of ten over more than four decades
/// (three labels a decade would crowd a panel).
pub(crate) fn decade_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut bold, mut light) = (Vec::new(), Vec::new());
    if !(lo > 0.0 && hi >= lo) {
        return (bold, light);
    }
    let decades = (hi / lo).log10();
    let mut decade = 10f64.powf(lo.log10().floor());
    let mut multiples = Vec::new();
    while decade <= hi {
        for m in 1..10u32 {
            let v = decade * f64::from(m);
            if (lo..=hi).contains(&v) {
                multiples.push((m, v));
            }
        }
        decade *= 10.0;
    }
    let labelled = |m: u32| match decades {
        d if d > 4.0 => m == 1,
        _ => matches!(m, 1 | 2 | 5),
    };
    if multiples.iter().filter(|(m, _)| labelled(*m)).count() < 2 {
        return (multiples.into_iter().map(|(_, v)| v).collect(), light);
    }
    for (m, v) in multiples {
        if labelled(m) {
            bold.push(v);
        } else {
            light.push(v);
        }
    }
    (bold, light)
}

/// The percentile at a height of the "nines" axis ([`nines`]'s inverse), as its tick reads.
pub(crate) fn nines_label(y: f64) -> String {
    let pct = 100.0 * (1.0 - 10f64.powf(-y));
    let text = format!("{pct:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nines_axis_gives_each_decade_of_the_tail_the_same_height() {
        for (pct, y) in [(90.0, 1.0), (99.0, 2.0), (99.9, 3.0)] {
            assert!((nines(pct) - y).abs() < 1e-9, "{pct} at {}", nines(pct));
        }
        assert!(nines(99.5) > nines(99.0) && nines(99.5) < nines(99.9));
        // Its ticks read as the percentiles they mark.
        for (pct, text) in [(90.0, "90"), (95.0, "95"), (99.0, "99"), (99.9, "99.9")] {
            assert_eq!(nines_label(nines(pct)), text);
        }
        // The 100th percentile stays on the chart instead of at infinity.
        assert!(nines(100.0).is_finite());
    }

    #[test]
    fn a_log_axis_over_one_decade_is_labelled_at_one_two_and_five() {
        let (bold, light) = decade_ticks(120.0, 1750.0);
        assert_eq!(bold, [200.0, 500.0, 1000.0]);
        assert_eq!(light, [300.0, 400.0, 600.0, 700.0, 800.0, 900.0]);
        let axis = Ticked::new(LogCoord::from((120.0..1750.0).log_scale()), &bold, &light);
        assert_eq!(
            axis.key_points(plotters::coord::ranged1d::BoldPoints(3)),
            [200.0, 500.0, 1000.0]
        );
        assert!(decade_ticks(0.0, 10.0).0.is_empty());
        // A span with no two 1-2-5 steps labels every whole multiple in it.
        assert_eq!(decade_ticks(5.09, 9.35).0, [6.0, 7.0, 8.0, 9.0]);
        // Many decades: only the powers of ten are labelled.
        let (bold, _) = decade_ticks(1.0, 1e6);
        assert_eq!(bold, [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
    }
}
