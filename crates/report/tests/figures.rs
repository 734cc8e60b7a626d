//! Each figure drawn from real runs of a small network: the file is an SVG that names the runs
//! it shows, and runs that lack what a figure needs give `PlotError::Nothing`, never a file.

use std::path::{Path, PathBuf};

use irn_report::{plot, PlotError};
use irn_sim::metrics::RunSummary;

mod common;
use common::{run_all, NETWORK};

/// [`NETWORK`] at seed 3, the monitor sampling every 50 µs (what the timeline draws).
fn experiment() -> String {
    format!("name = \"figures\"\nseed = 3\nmonitor_interval_us = 50\n{NETWORK}")
}

/// The experiment's summaries, run once for the whole test binary.
fn summaries() -> Vec<RunSummary> {
    static RUNS: std::sync::OnceLock<Vec<RunSummary>> = std::sync::OnceLock::new();
    RUNS.get_or_init(|| run_all(&experiment())).clone()
}

fn out(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("irn-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// The SVG at `path`, checked to be one.
fn svg(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("written");
    assert!(
        text.starts_with("<svg") && text.trim_end().ends_with("</svg>"),
        "{text:.200}"
    );
    text
}

#[test]
fn bars_and_timeline_name_every_run_and_the_ratios_baseline() {
    let runs = summaries();
    assert_eq!(runs.len(), 2);

    let bars = out("bars.svg");
    plot::bars(&bars, &runs, None).expect("drawn");
    let text = svg(&bars);
    for r in &runs {
        assert!(text.contains(&r.name), "{} missing from the bars", r.name);
    }
    // The ratios divide by the RoCE+PFC run of the scenario.
    assert_eq!(
        plot::baseline_label(&runs, None).as_deref(),
        Some("RoCE+PFC")
    );
    let irn = &runs[0];
    let base = plot::baseline_of(&runs, irn, None).expect("a baseline");
    assert_eq!(base.name, "RoCE+PFC");

    let timeline = out("timeline.svg");
    plot::timeline(&timeline, &runs).expect("drawn");
    let text = svg(&timeline);
    assert!(text.contains("IRN") && text.contains("RoCE+PFC"));
    assert!(
        !text.contains("packets sent to failed hosts"),
        "no fault, no fourth panel"
    );
}

/// A run with a dead server gets the timeline's fourth panel: the packets sent to it, with
/// each run's total in its legend.
#[test]
fn the_timeline_adds_up_what_was_sent_to_a_dead_server() {
    let text = format!(
        "{}\n[transport]\nretry_cnt = 3\nack_timeout = 8\n\n[[fault]]\nkind = \"host-down\"\nhost = 0\nat_ms = 0.1\n",
        experiment()
    );
    let runs = run_all(&text);
    let sent: Vec<u64> = runs
        .iter()
        .map(|r| r.safety.counts.sent_to_failed_packets)
        .collect();
    assert!(sent.iter().all(|&n| n > 0), "{sent:?}");
    let path = out("dead-timeline.svg");
    plot::timeline(&path, &runs).expect("drawn");
    let text = svg(&path);
    assert!(text.contains("packets sent to failed hosts"));
    for (r, n) in runs.iter().zip(&sent) {
        // The count with its thousands apart.
        let digits = n.to_string();
        let grouped: String = digits
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                let gap = i > 0 && (digits.len() - i) % 3 == 0;
                gap.then_some(' ').into_iter().chain([c])
            })
            .collect();
        assert!(
            text.contains(&format!("{}: {grouped} packets to failed hosts", r.name)),
            "{} missing",
            r.name
        );
    }
}

#[test]
fn figures_without_their_data_say_so_and_write_nothing() {
    // Runs without the monitor's samples: no timeline.
    let mut runs = summaries();
    assert!(runs.iter().all(|r| !r.timeline.is_empty()));
    for r in &mut runs {
        r.timeline.clear();
    }
    let path = out("no-timeline.svg");
    let e = plot::timeline(&path, &runs).expect_err("nothing to draw");
    assert!(matches!(e, PlotError::Nothing(_)), "{e}");
    assert!(!path.exists());
    // No runs: no bars.
    let path = out("no-bars.svg");
    assert!(matches!(
        plot::bars(&path, &[], None),
        Err(PlotError::Nothing(_))
    ));
    assert!(!path.exists());
}

/// E12's figure from a small dynamic-RDMA experiment: one panel per series, the size sweep and
/// the probability sweep both drawn, each named.
#[test]
fn the_dynamic_rdma_figure_draws_a_panel_per_series() {
    let text = r#"
name = "e12-figure"
kind = "dynamic-rdma"
seed = 1
runs = 1
transfers = 20

[link]
rate_gbps = 1.0
propagation_ns = 500

[drp]
op = "write"
payload = 1024

[[series]]
name = "by size"
x = "size"
values = [1024, 16384]
frp = 0.05
lfp = 0.05

[[series]]
name = "by FRP"
x = "frp"
values = [0.0, 0.1]
lfp = 0.0
"#;
    let exp = irn_sim::drp::DrpExperiment::load(text, "e12-figure", &[], None).expect("valid");
    let report = irn_sim::drp::run_experiment(&exp, 2, &|_| {});
    let path = out("e12.svg");
    irn_report::drp::figure(&path, &report).expect("drawn");
    let text = svg(&path);
    assert!(text.contains("by size") && text.contains("by FRP"));
}
