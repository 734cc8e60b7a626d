//! The evaluation's report: `REPORT.md` (figures as PNG beside it) and `report.html` (one
//! self-contained page, every figure inside it), one section per claim — the paper's statement
//! and number, irn's mean and range over seeds, held or not and the measured cause, the
//! claim's figure, the experiment's figures, and the command that reproduces just that claim —
//! after a summary table of every claim.

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;

use crate::claims::{Outcome, Verdict};
use crate::evaluation::{Claim, Evaluation, Expect, Experiment};
use crate::figure::metric_words;
use crate::seeds::decimals;

/// A figure of the report: its SVG and PNG, relative to the report's directory.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The SVG.
    pub svg: String,
    /// The PNG at 300 dpi.
    pub png: String,
}

/// A claim as the report gives it.
#[derive(Debug, Clone)]
pub struct ClaimSection<'a> {
    /// The claim.
    pub claim: &'a Claim,
    /// Its judgement; `None` when its experiment was not run (`--only`, `--quick`).
    pub outcome: Option<Outcome>,
    /// Its own figure.
    pub figure: Option<Figure>,
}

/// An experiment as the report gives it.
#[derive(Debug, Clone)]
pub struct ExperimentSection<'a> {
    /// The experiment.
    pub experiment: &'a Experiment,
    /// Its figures.
    pub figures: Vec<Figure>,
    /// Its runs' seeds (`1–3`), empty for a computed table.
    pub seeds: String,
    /// Runs.
    pub runs: usize,
    /// Whether it ran at `--quick`'s reduced scale.
    pub quick: bool,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    /// The evaluation.
    pub eval: &'a Evaluation,
    /// The command that made it.
    pub command: String,
    /// `full` or `quick (reduced scale)`, with the seeds.
    pub scale: String,
    /// Every claim, in the evaluation's order.
    pub claims: Vec<ClaimSection<'a>>,
    /// Every experiment run.
    pub experiments: Vec<ExperimentSection<'a>>,
}

impl Report<'_> {
    /// The claims whose verdict is not `held` among those judged.
    pub fn failing(&self) -> Vec<&ClaimSection<'_>> {
        self.claims
            .iter()
            .filter(|c| {
                c.outcome
                    .as_ref()
                    .is_some_and(|o| o.verdict != Verdict::Held)
            })
            .collect()
    }

    /// `REPORT.md`.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# irn's evaluation: the papers' claims, reproduced\n");
        let _ = writeln!(
            s,
            "Made by `{}` ({}). Each number is irn's mean over the seeds and, in brackets, the \
             least and the greatest; a ratio is taken within each seed, then pooled. A claim \
             **holds** when every row's mean does what the paper says.\n",
            self.command, self.scale
        );
        let _ = writeln!(
            s,
            "| claim | the paper | irn | verdict |\n|---|---|---|---|"
        );
        for c in &self.claims {
            let _ = writeln!(
                s,
                "| [{}](#{}) {} | {} | {} | {} |",
                c.claim.id,
                heading_anchor(&c.claim.id),
                cell(&c.claim.claim),
                cell(&c.claim.paper),
                cell(&first_rows(c)),
                cell(&verdict_words(c))
            );
        }
        for c in &self.claims {
            let _ = writeln!(s, "\n## {}\n", c.claim.id);
            let _ = writeln!(s, "**The paper**: {} ({}).\n", c.claim.claim, c.claim.paper);
            let _ = writeln!(s, "**Measured** {}.\n", what_is_measured(c.claim));
            if let Some(o) = &c.outcome {
                let _ = writeln!(s, "| row | irn | seeds | every seed |\n|---|---|---|---|");
                for r in &o.rows {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} |",
                        cell(&row_label(r)),
                        r.spread.show(decimals(r.spread.mean)),
                        r.seeds,
                        if r.every_seed { "yes" } else { "no" }
                    );
                }
                let _ = writeln!(s);
            }
            if let Some(o) = c.outcome.as_ref().filter(|o| !o.missing.is_empty()) {
                let _ = writeln!(
                    s,
                    "**Missing from the JSON**: {}.\n",
                    cell(&o.missing.join(", "))
                );
            }
            let _ = writeln!(s, "**Verdict**: {}.\n", verdict_words(c));
            if let Some(cause) = &c.claim.cause {
                let _ = writeln!(s, "**Why**: {cause}\n");
            }
            if let Some(f) = &c.figure {
                let _ = writeln!(s, "![{}]({})\n", c.claim.id, f.png);
            }
            if let Some(e) = self.experiment(&c.claim.experiment) {
                for f in &e.figures {
                    let _ = writeln!(s, "![{}]({})\n", e.experiment.id, f.png);
                }
            }
            let _ = writeln!(
                s,
                "**Reproduce**: `irn reproduce --only \"{}\"`{}",
                c.claim.id,
                sim_command(self.eval, c.claim)
                    .map_or(String::new(), |cmd| format!(", or `{cmd}`"))
            );
        }
        let _ = writeln!(s, "\n## Experiments\n");
        let _ = writeln!(
            s,
            "| experiment | runs | seeds | scale |\n|---|---|---|---|"
        );
        for e in &self.experiments {
            let _ = writeln!(
                s,
                "| {} ({}) | {} | {} | {} |",
                e.experiment.id,
                cell(&e.experiment.title),
                e.runs,
                e.seeds,
                if e.quick { "quick" } else { "full" }
            );
        }
        s
    }

    /// `report.html`: the same, in one file (its figures inside it as data URIs), read from
    /// `dir` where the figures are.
    pub fn html(&self, dir: &Path) -> std::io::Result<String> {
        let mut s = String::new();
        s.push_str(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>irn's evaluation</title><style>\
             body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;line-height:1.4}\
             table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.25em .5em;\
             text-align:left;vertical-align:top}img{max-width:100%;display:block;margin:1em 0}\
             .held{color:#1a7f37}.part{color:#9a6700}.not{color:#cf222e}code{background:#f3f3f3}\
             </style></head><body>\n",
        );
        let _ = writeln!(
            s,
            "<h1>irn's evaluation: the papers' claims, reproduced</h1>\n<p>Made by \
             <code>{}</code> ({}). Each number is irn's mean over the seeds and, in brackets, \
             the least and the greatest; a ratio is taken within each seed, then pooled. A \
             claim <b>holds</b> when every row's mean does what the paper says.</p>",
            esc(&self.command),
            esc(&self.scale)
        );
        s.push_str(
            "<table><tr><th>claim</th><th>the paper</th><th>irn</th><th>verdict</th></tr>\n",
        );
        for c in &self.claims {
            let _ = writeln!(
                s,
                "<tr><td><a href=\"#{}\">{}</a> {}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
                anchor(&c.claim.id),
                esc(&c.claim.id),
                esc(&c.claim.claim),
                esc(&c.claim.paper),
                esc(&first_rows(c)),
                verdict_class(c),
                esc(&verdict_words(c))
            );
        }
        s.push_str("</table>\n");
        for c in &self.claims {
            let _ = writeln!(
                s,
                "<section id=\"{}\"><h2>{}</h2>\n<p><b>The paper</b>: {} ({}).</p>\n<p><b>Measured</b> {}.</p>",
                anchor(&c.claim.id),
                esc(&c.claim.id),
                esc(&c.claim.claim),
                esc(&c.claim.paper),
                esc(&what_is_measured(c.claim))
            );
            if let Some(o) = &c.outcome {
                s.push_str(
                    "<table><tr><th>row</th><th>irn</th><th>seeds</th><th>every seed</th></tr>\n",
                );
                for r in &o.rows {
                    let _ = writeln!(
                        s,
                        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(&row_label(r)),
                        esc(&r.spread.show(decimals(r.spread.mean))),
                        r.seeds,
                        if r.every_seed { "yes" } else { "no" }
                    );
                }
                s.push_str("</table>\n");
            }
            if let Some(o) = c.outcome.as_ref().filter(|o| !o.missing.is_empty()) {
                let _ = writeln!(
                    s,
                    "<p><b>Missing from the JSON</b>: {}.</p>",
                    esc(&o.missing.join(", "))
                );
            }
            let _ = writeln!(
                s,
                "<p><b>Verdict</b>: <span class=\"{}\">{}</span>.</p>",
                verdict_class(c),
                esc(&verdict_words(c))
            );
            if let Some(cause) = &c.claim.cause {
                let _ = writeln!(s, "<p><b>Why</b>: {}</p>", esc(cause));
            }
            let mut figures: Vec<&Figure> = c.figure.iter().collect();
            if let Some(e) = self.experiment(&c.claim.experiment) {
                figures.extend(&e.figures);
            }
            for f in figures {
                let svg = std::fs::read(dir.join(&f.svg))?;
                let _ = writeln!(
                    s,
                    "<img alt=\"{}\" src=\"data:image/svg+xml;base64,{}\">",
                    esc(&f.svg),
                    base64::engine::general_purpose::STANDARD.encode(svg)
                );
            }
            let _ = writeln!(
                s,
                "<p><b>Reproduce</b>: <code>irn reproduce --only \"{}\"</code>{}</p></section>",
                esc(&c.claim.id),
                sim_command(self.eval, c.claim).map_or(String::new(), |cmd| format!(
                    ", or <code>{}</code>",
                    esc(&cmd)
                ))
            );
        }
        s.push_str("<h2>Experiments</h2>\n<table><tr><th>experiment</th><th>runs</th><th>seeds</th><th>scale</th></tr>\n");
        for e in &self.experiments {
            let _ = writeln!(
                s,
                "<tr><td>{} ({})</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&e.experiment.id),
                esc(&e.experiment.title),
                e.runs,
                esc(&e.seeds),
                if e.quick { "quick" } else { "full" }
            );
        }
        // A browser (or a test driving one headless) reads how many figures decoded off the
        // body once the page has loaded.
        s.push_str(
            "</table>\n<script>addEventListener('load',()=>{const i=[...document.images];\
             document.body.dataset.images=i.length;document.body.dataset.broken=\
             i.filter(x=>!(x.complete&&x.naturalWidth>0)).length;});</script>\n</body></html>\n",
        );
        Ok(s)
    }

    fn experiment(&self, id: &str) -> Option<&ExperimentSection<'_>> {
        self.experiments.iter().find(|e| e.experiment.id == id)
    }
}

/// `irn sim …` for the claim's experiment, as its README runs it.
fn sim_command(eval: &Evaluation, claim: &Claim) -> Option<String> {
    let e = eval.experiment(&claim.experiment)?;
    let file = e.file.as_ref()?;
    let mut cmd = format!("irn sim experiments/{file}");
    if let Some(b) = &e.baseline {
        let _ = write!(cmd, " --baseline \"{b}\"");
    }
    Some(cmd)
}

fn what_is_measured(c: &Claim) -> String {
    use crate::evaluation::Measure;
    let metrics: Vec<String> = c.metrics.iter().map(|m| metric_words(m)).collect();
    let subject = match c.measure {
        Measure::Ratio => format!(
            "{} ÷ {} ({}), within each seed",
            c.of.as_deref().unwrap_or_default(),
            c.to.as_deref().unwrap_or_default(),
            metrics.join(", ")
        ),
        Measure::Value => format!(
            "{} of {}",
            metrics.join(", "),
            c.of.as_deref().unwrap_or_default()
        ),
        Measure::DynamicRdma => {
            "dynamic ÷ traditional transfer time − 1, in percent, per run".into()
        }
        Measure::NicState => format!(
            "the per-QP state {} adds, as {}",
            c.of.as_deref().unwrap_or_default(),
            metrics.join(", ")
        ),
    };
    let expect = match (c.expect, c.within) {
        (Expect::Above, _) => format!("above {}", c.threshold),
        (Expect::Below, _) => format!("below {}", c.threshold),
        (Expect::Within, Some([a, b])) => format!("within {a}–{b}"),
        (Expect::Within, None) => "within a band".into(),
    };
    let scenarios = if c.scenarios.is_empty() {
        String::new()
    } else {
        format!(" in {}", c.scenarios.join(", "))
    };
    format!("{subject}{scenarios}; the claim holds with every mean {expect}")
}

fn row_label(r: &crate::claims::Row) -> String {
    let m = metric_words(&r.metric);
    if r.scenario.is_empty() {
        m
    } else {
        format!("{} · {m}", r.scenario)
    }
}

/// The first three rows' means and ranges, what the summary table shows.
fn first_rows(c: &ClaimSection<'_>) -> String {
    let Some(o) = &c.outcome else {
        return "not run".into();
    };
    let mut parts: Vec<String> = o
        .rows
        .iter()
        .take(3)
        .map(|r| r.spread.show(decimals(r.spread.mean)))
        .collect();
    if o.rows.len() > 3 {
        parts.push(format!("… ({} rows)", o.rows.len()));
    }
    parts.join(" / ")
}

fn verdict_words(c: &ClaimSection<'_>) -> String {
    match &c.outcome {
        None => "not run".into(),
        Some(o) => {
            let mut w = o.verdict.words();
            if o.verdict == Verdict::Held && o.rows.iter().all(|r| r.every_seed && r.seeds > 1) {
                w.push_str(" in every seed");
            }
            if let Some(size) = o.size {
                let _ = write!(w, "; {}", size.words());
            }
            w
        }
    }
}

fn verdict_class(c: &ClaimSection<'_>) -> &'static str {
    match c.outcome.as_ref().map(|o| o.verdict) {
        Some(Verdict::Held) => "held",
        Some(Verdict::HeldInPart { .. }) => "part",
        Some(Verdict::NotHeld | Verdict::NotMeasured) => "not",
        None => "",
    }
}

/// An HTML id for a claim id (`E6 (b)` → `e6-b`).
pub fn anchor(id: &str) -> String {
    let mut out = String::new();
    for c in id.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// The anchor a Markdown renderer (GitHub's, pandoc's `gfm`) gives a heading: lower case,
/// punctuation but hyphens dropped, spaces as hyphens (`E6 (b)` → `e6-b`, `§4.4.4 AIMD` →
/// `444-aimd`).
pub fn heading_anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// A Markdown table cell: no pipes or line breaks.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_lowercase_words_joined_by_hyphens() {
        assert_eq!(anchor("E6 (b)"), "e6-b");
        assert_eq!(anchor("§4.4.4"), "4-4-4");
        assert_eq!(anchor("E1"), "e1");
    }

    #[test]
    fn markdown_links_use_the_anchor_the_renderer_gives_the_heading() {
        assert_eq!(heading_anchor("E6 (b)"), "e6-b");
        assert_eq!(heading_anchor("§4.4.4 AIMD"), "444-aimd");
        assert_eq!(
            heading_anchor("E4 PFC on IRN, DCQCN"),
            "e4-pfc-on-irn-dcqcn"
        );
    }

    #[test]
    fn html_is_escaped_and_cells_have_no_pipes() {
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(cell("a | b\nc"), "a \\| b c");
    }
}
