//! What the report's tests share: a small network to run, and running it.

use std::path::Path;

use irn_sim::config::load_experiment;
use irn_sim::metrics::RunSummary;

/// A k = 4 fat-tree at 50 % load for 300 µs, IRN and RoCE+PFC (the top-level keys, such as the
/// seed, are the caller's).
pub const NETWORK: &str = r#"
[topology]
kind = "fat-tree"
k = 4
link_gbps = 40
link_delay_ns = 2000

[workload]
kind = "poisson"
load = 0.5
sizes = "irn"
duration_us = 300

[[run]]
name = "IRN"
transport.recovery = "irn"

[[run]]
name = "RoCE+PFC"
transport.recovery = "roce"
network.pfc = true
"#;

/// The summaries of every run of an experiment's `text`.
pub fn run_all(text: &str) -> Vec<RunSummary> {
    load_experiment(text, "report test", Path::new("."), &[], None)
        .expect("valid experiment")
        .runs
        .iter()
        .map(|cfg| irn_sim::run(cfg, |_| {}).expect("runs").summary)
        .collect()
}
