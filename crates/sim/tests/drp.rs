//! E12 at reduced scale (SPEC E12, seed 003 §3): the direction and size of dynamic RDMA's effect
//! over several seeds, with margins outside seed noise, and the experiment file's errors.
//!
//! Noise, measured with `irn sim experiments/e12-dynamic-rdma.toml --set runs=2 --set
//! transfers=150 --seed S` for S = 1–6: the change at FRP = 10 % lies in [-6.7 %, -4.0 %] (its
//! expectation is about −FRP × (set-up timer + registration) / transfer time = −4.7 %); with
//! loss only in [-0.1 %, +0.0 %] at LFP 5 % and [-0.4 %, +0.5 %] at 10 %.

use irn_sim::drp::{all_intact, run_experiment, DrpExperiment, DrpReport};

fn exp(series: &str, seed: u64) -> DrpExperiment {
    let text = format!(
        r#"
name = "t"
kind = "dynamic-rdma"
seed = {seed}
runs = 2
transfers = 150
{series}
"#
    );
    DrpExperiment::load(&text, "test", &[], None).expect("valid")
}

fn run(e: &DrpExperiment) -> DrpReport {
    let r = run_experiment(e, 2, &|_| {});
    assert!(all_intact(&r), "every transfer completes intact: {r:#?}");
    r
}

#[test]
fn no_loss_no_failure_both_methods_identical() {
    let r = run(&exp(
        "[[series]]\nname = \"zero\"\nx = \"frp\"\nvalues = [0.0]",
        1,
    ));
    let p = &r.series[0].points[0];
    assert_eq!(p.traditional.mean_us, p.dynamic.mean_us);
    assert_eq!(p.dynamic.indirect_share, 0.0);
    // 128 frames of 1 118 wire bytes at 1 Gb/s, plus set-up and release.
    let floor = 128.0 * 1118.0 * 8.0 / 1000.0;
    assert!(
        p.traditional.mean_us > floor && p.traditional.mean_us < floor + 100.0,
        "{}",
        p.traditional.mean_us
    );
}

#[test]
fn failed_registrations_dynamic_is_faster_by_the_waits_it_skips() {
    for seed in 1..=3 {
        let r = run(&exp(
            "[[series]]\nname = \"frp\"\nx = \"frp\"\nvalues = [0.10]",
            seed,
        ));
        let p = &r.series[0].points[0];
        assert!(
            (-7.5..=-2.5).contains(&p.change_pct),
            "seed {seed}: change {:.2} %",
            p.change_pct
        );
        // Dynamic goes indirect on about every failed registration; traditional never does.
        assert!(
            p.dynamic.indirect_share > 0.04,
            "{}",
            p.dynamic.indirect_share
        );
        assert_eq!(p.traditional.indirect_share, 0.0);
        assert!(p.traditional.setup_attempts > 1.04);
    }
}

#[test]
fn lost_frames_cost_both_and_dynamic_is_never_slower() {
    for seed in 1..=3 {
        let r = run(&exp(
            "[[series]]\nname = \"lfp\"\nx = \"lfp\"\nvalues = [0.0, 0.05]",
            seed,
        ));
        let (p0, p5) = (&r.series[0].points[0], &r.series[0].points[1]);
        // Loss makes transfers longer by well over the noise...
        assert!(p5.traditional.mean_us > p0.traditional.mean_us * 1.12);
        assert!(p5.traditional.retransmitted > 3.0);
        // ...and dynamic RDMA, which only helps set-up, changes little, never for the worse.
        assert!(
            (-2.0..=0.3).contains(&p5.change_pct),
            "seed {seed}: {:.2} %",
            p5.change_pct
        );
    }
}

#[test]
fn combined_gain_grows_with_the_probabilities() {
    let r = run(&exp(
        "[[series]]\nname = \"both\"\nx = \"both\"\nvalues = [0.01, 0.10]",
        2,
    ));
    let ps = &r.series[0].points;
    assert!(ps[1].change_pct < ps[0].change_pct - 1.5, "{ps:#?}");
    assert!(ps[1].change_pct < -2.0);
}

#[test]
fn reads_run_too() {
    let mut e = exp(
        "[[series]]\nname = \"both\"\nx = \"both\"\nvalues = [0.05]",
        1,
    );
    e.drp.op = "read".into();
    let r = run(&e);
    let p = &r.series[0].points[0];
    assert_eq!(p.traditional.completed, 300);
    assert_eq!(p.dynamic.completed, 300);
    // A read's indirect transfer needs no indirect buffer.
    assert_eq!(p.dynamic.indirect_frames, 0.0);
}

#[test]
fn deterministic() {
    let e = exp(
        "[[series]]\nname = \"both\"\nx = \"both\"\nvalues = [0.05]",
        4,
    );
    let a = run_experiment(&e, 1, &|_| {});
    let b = run_experiment(&e, 2, &|_| {});
    assert_eq!(a, b, "the same with 1 and 2 threads");
}

#[test]
fn errors_name_the_key() {
    let bad = |body: &str| {
        let text = format!("name = \"t\"\nkind = \"dynamic-rdma\"\n{body}");
        DrpExperiment::load(&text, "f.toml", &[], None)
            .expect_err(body)
            .to_string()
    };
    let e = bad("[[series]]\nname = \"s\"\nx = \"frp\"\nvalues = [1.5]");
    assert!(e.contains("f.toml") && e.contains("probability"), "{e}");
    let e = bad("[[series]]\nname = \"s\"\nx = \"rtt\"\nvalues = [0.1]");
    assert!(e.contains("`x`"), "{e}");
    let e = bad("[drp]\nwindow = 0\n[[series]]\nname = \"s\"\nx = \"frp\"\nvalues = [0.1]");
    assert!(e.contains("drp.window"), "{e}");
    let e = bad("[drp]\nwindw = 8\n[[series]]\nname = \"s\"\nx = \"frp\"\nvalues = [0.1]");
    assert!(e.contains("windw"), "{e}");
    let e = bad("series = []");
    assert!(e.contains("series"), "{e}");
    let e = bad("[drp]\nop = \"send\"\n[[series]]\nname = \"s\"\nx = \"frp\"\nvalues = [0.1]");
    assert!(e.contains("drp.op"), "{e}");
}

#[test]
fn set_overrides_apply_and_a_wrong_key_names_the_flag() {
    let text = "name = \"t\"\nkind = \"dynamic-rdma\"\n[[series]]\nname = \"s\"\nx = \"frp\"\nvalues = [0.1]";
    let sets = ["runs=3".to_string(), "drp.window=4".to_string()];
    let e = DrpExperiment::load(text, "f.toml", &sets, Some(7)).expect("valid overrides");
    assert_eq!((e.runs, e.drp.window, e.seed), (3, 4, 7));
    let err = DrpExperiment::load(text, "f.toml", &["runz=3".to_string()], None)
        .expect_err("unknown key")
        .to_string();
    assert!(err.contains("--set") && err.contains("runz"), "{err}");
}
