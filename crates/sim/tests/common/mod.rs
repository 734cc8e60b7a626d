//! What the simulator's multi-seed direction tests share: running many configurations two at a
//! time, and finding a run by name.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use irn_sim::config::{load_experiment, SimConfig};
use irn_sim::metrics::RunSummary;

/// The summary of `cfg`, run once per test binary: tests in one binary that share a
/// configuration under different names (E9's Resilient RoCE is E4's RoCE DCQCN; E10's IRN is
/// E1's) take the first run's summary, renamed, instead of simulating it again. A run is a
/// pure function of its configuration, so this changes no result; a test that asks while
/// another computes it waits for that run.
fn run_once(cfg: &SimConfig) -> RunSummary {
    type Slot = Arc<OnceLock<RunSummary>>;
    static DONE: OnceLock<Mutex<BTreeMap<String, Slot>>> = OnceLock::new();
    let mut key = cfg.clone();
    key.name.clear();
    key.scenario.clear();
    let slot = DONE
        .get_or_init(Default::default)
        .lock()
        .expect("not poisoned")
        .entry(format!("{key:?}"))
        .or_default()
        .clone();
    let mut s = slot
        .get_or_init(|| {
            irn_sim::run(cfg, |_| {})
                .expect("valid configuration")
                .summary
        })
        .clone();
    s.name.clone_from(&cfg.name);
    s.scenario.clone_from(&cfg.scenario);
    s
}

/// Runs every configuration, two at a time (the CI machine's cores), in order.
pub fn run_all(runs: &[SimConfig]) -> Vec<RunSummary> {
    irn_sim::pool::map(runs, 2, |_, cfg| run_once(cfg))
}

/// Runs every configuration, two at a time, in order, keeping each run's flow records.
pub fn run_all_full(runs: &[SimConfig]) -> Vec<irn_sim::RunOutput> {
    irn_sim::pool::map(runs, 2, |_, cfg| {
        irn_sim::run(cfg, |_| {}).expect("valid configuration")
    })
}

/// `experiment` (a whole experiment file's text) at each of `seeds`: per seed, the summaries
/// by run.
pub fn per_seed(experiment: &str, seeds: &[u64]) -> Vec<Vec<RunSummary>> {
    let configs: Vec<SimConfig> = seeds
        .iter()
        .flat_map(|&seed| {
            load_experiment(
                experiment,
                "test experiment",
                std::path::Path::new("."),
                &[],
                Some(seed),
            )
            .expect("valid")
            .runs
        })
        .collect();
    let all = run_all(&configs);
    let per_seed = all.len() / seeds.len();
    all.chunks(per_seed).map(<[RunSummary]>::to_vec).collect()
}

/// Run `n` of one seed's summaries.
pub fn by<'a>(seed: &'a [RunSummary], n: &str) -> &'a RunSummary {
    seed.iter().find(|s| s.name == n).expect("run exists")
}
