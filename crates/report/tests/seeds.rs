//! An experiment over seeds: its runs pooled per configuration (mean and range of every
//! number, ratios taken within each seed) and drawn with the seeds' range.

use irn_report::plot;
use irn_report::seeds::{has_seeds, over_seeds, Spread};
use irn_sim::metrics::RunSummary;

mod common;
use common::{run_all, NETWORK};

/// [`NETWORK`] over seeds 1–3, run once for the whole test binary.
fn runs() -> Vec<RunSummary> {
    static RUNS: std::sync::OnceLock<Vec<RunSummary>> = std::sync::OnceLock::new();
    RUNS.get_or_init(|| run_all(&format!("name = \"seeds\"\nseeds = 3\n{NETWORK}")))
        .clone()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn each_configuration_is_pooled_over_its_seeds() {
    let runs = runs();
    assert_eq!(runs.len(), 6);
    assert!(has_seeds(&runs));
    let groups = over_seeds(&runs, None);
    let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["IRN", "RoCE+PFC"]);
    for g in &groups {
        assert_eq!(g.seeds, [1, 2, 3]);
        let mine: Vec<&RunSummary> = runs
            .iter()
            .filter(|r| r.name.starts_with(&format!("{} seed=", g.name)))
            .collect();
        assert_eq!(mine.len(), 3);
        for (key, get) in [
            (
                "avg_slowdown",
                (|r: &RunSummary| r.all.avg_slowdown) as fn(&RunSummary) -> f64,
            ),
            ("p99_fct_us", |r| r.all.p99_fct_us),
            ("flows_completed", |r| r.flows_completed as f64),
        ] {
            let v: Vec<f64> = mine.iter().map(|r| get(r)).collect();
            let s = g.metric(key).expect(key);
            assert!(
                close(s.mean, v.iter().sum::<f64>() / 3.0),
                "{key}: {s:?} {v:?}"
            );
            assert!(close(s.min, v.iter().copied().fold(f64::MAX, f64::min)));
            assert!(close(s.max, v.iter().copied().fold(f64::MIN, f64::max)));
        }
        // The seeds are different arrivals: the workload differs between them.
        let flows = g.metric("flows").expect("flows");
        assert!(flows.max > flows.min, "{}: {flows:?}", g.name);
        assert!(g.metric("seed").is_none() && g.metric("wall_s").is_none());
    }
    // IRN's ratios divide each seed's IRN by the same seed's RoCE+PFC; the baseline has none.
    let irn = &groups[0];
    assert_eq!(irn.baseline.as_deref(), Some("RoCE+PFC"));
    let want: Vec<f64> = (1..=3)
        .map(|s| {
            let find = |n: &str| {
                runs.iter()
                    .find(|r| r.name == format!("{n} seed={s}"))
                    .expect("run")
            };
            find("IRN").all.avg_slowdown / find("RoCE+PFC").all.avg_slowdown
        })
        .collect();
    let got = irn.ratios["avg_slowdown"];
    assert_eq!(Some(got), Spread::of(&want));
    assert!(groups[1].ratios.is_empty() && groups[1].baseline.is_none());
    // A named baseline is found by its name without the seed, within each seed.
    let by_name = over_seeds(&runs, Some("IRN"));
    let r = by_name[1].ratios["avg_slowdown"];
    assert!(
        close(r.mean, want.iter().map(|x| 1.0 / x).sum::<f64>() / 3.0),
        "{r:?}"
    );
}

#[test]
fn a_spread_reads_as_mean_and_range() {
    let s = Spread::of(&[1.0, 2.0, 6.0]).expect("values");
    assert_eq!(s.show(2), "3.00 (1.00–6.00)");
    assert_eq!(Spread::of(&[2.0, 2.0]).expect("values").show(1), "2.0");
    assert_eq!(Spread::of(&[]), None);
}

#[test]
fn bars_over_seeds_draw_one_bar_per_configuration_with_its_range() {
    let runs = runs();
    let path = std::env::temp_dir().join(format!("irn-seeds-{}.svg", std::process::id()));
    plot::bars(&path, &runs, None).expect("drawn");
    let svg = std::fs::read_to_string(&path).expect("written");
    std::fs::remove_file(&path).ok();
    assert!(svg.contains("seeds&apos; mean and range") || svg.contains("seeds' mean and range"));
    // Legend entries name configurations, not seeds.
    let texts: Vec<&str> = svg.lines().map(str::trim).collect();
    assert!(
        texts.contains(&"IRN") && texts.contains(&"RoCE+PFC"),
        "{svg}"
    );
    assert!(!svg.contains("seed=1"));
}
