//! What the simulator's multi-seed direction tests share: running many configurations two at a
//! time, and finding a run by name.

#![allow(dead_code)]

use irn_sim::config::{load_experiment, SimConfig};
use irn_sim::metrics::RunSummary;

/// Runs every configuration, two at a time (the CI machine's cores), in order.
pub fn run_all(runs: &[SimConfig]) -> Vec<RunSummary> {
    let out: Vec<std::sync::Mutex<Option<RunSummary>>> =
        runs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(cfg) = runs.get(i) else { break };
                let r = irn_sim::run(cfg, |_| {}).expect("valid configuration");
                *out[i].lock().expect("not poisoned") = Some(r.summary);
            });
        }
    });
    out.into_iter()
        .map(|m| m.into_inner().expect("not poisoned").expect("ran"))
        .collect()
}

/// `experiment` (a whole experiment file's text) at each of `seeds`: per seed, the summaries
/// by run.
pub fn per_seed(experiment: &str, seeds: &[u64]) -> Vec<Vec<RunSummary>> {
    let configs: Vec<SimConfig> = seeds
        .iter()
        .flat_map(|&seed| {
            load_experiment(
                experiment,
                "directions",
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
