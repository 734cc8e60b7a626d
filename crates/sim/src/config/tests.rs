//! Loading and validating experiment files: keys, errors, runs, variants and sweeps.

use super::*;

fn load(text: &str, sets: &[&str]) -> Result<Experiment, ConfigError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load_experiment(text, "test.toml", Path::new("."), &sets, None)
}

#[test]
fn empty_file_is_the_default() {
    let e = load("", &[]).expect("valid");
    assert_eq!(e.runs.len(), 1);
    let d = SimConfig {
        base_dir: PathBuf::from("."),
        ..SimConfig::default()
    };
    assert_eq!(e.runs[0], d);
}

#[test]
fn unknown_key_names_key_and_file() {
    let e = load("[workload]\nlod = 0.5\n", &[]).expect_err("typo");
    let s = e.to_string();
    assert!(s.contains("test.toml") && s.contains("lod"), "{s}");
    let e = load("[[run]]\nname = \"a\"\nnetwork.pfcc = true\n", &[]).expect_err("typo");
    let s = e.to_string();
    assert!(
        s.contains("test.toml") && s.contains("pfcc") && s.contains("'a'"),
        "{s}"
    );
    let e = load("", &["switch.bufer_bytes=5"]).expect_err("typo");
    assert!(e.to_string().contains("bufer_bytes"), "{e}");
    // A typo in a --set key is the flag's: not blamed on the file or a run.
    let e = load("[[run]]\nname = \"a\"\n", &["workload.lod=0.5"]).expect_err("typo");
    let s = e.to_string();
    assert!(
        s.contains("--set") && s.contains("workload.lod") && !s.contains("test.toml"),
        "{s}"
    );
    let e = load("", &["workload.load=high"]).expect_err("a string for a number");
    assert!(e.to_string().contains("--set"), "{e}");
}

#[test]
fn variants_multiply_runs_and_name_their_scenario() {
    let text = r#"
[[run]]
name = "IRN"
[[run]]
name = "RoCE+PFC"
transport.recovery = "roce"
network.pfc = true
[[variant]]
name = "10Gbps"
topology.link_gbps = 10
[[variant]]
name = "default"
[sweep]
seed = [1, 2]
"#;
    let e = load(text, &[]).expect("loads");
    let names: Vec<(&str, &str)> = e
        .runs
        .iter()
        .map(|r| (r.name.as_str(), r.scenario.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("IRN 10Gbps seed=1", "10Gbps seed=1"),
            ("IRN 10Gbps seed=2", "10Gbps seed=2"),
            ("IRN default seed=1", "default seed=1"),
            ("IRN default seed=2", "default seed=2"),
            ("RoCE+PFC 10Gbps seed=1", "10Gbps seed=1"),
            ("RoCE+PFC 10Gbps seed=2", "10Gbps seed=2"),
            ("RoCE+PFC default seed=1", "default seed=1"),
            ("RoCE+PFC default seed=2", "default seed=2"),
        ]
    );
    assert_eq!(e.runs[0].topology.link_gbps.tier(0), 10.0);
    assert_eq!(e.runs[2].topology.link_gbps.tier(0), 40.0);
    assert_eq!(
        (e.runs[1].seed, e.runs[4].transport.recovery),
        (2, Recovery::Roce)
    );
    let e = load("[[variant]]\nworkload.load = 0.5\n", &[]).expect_err("unnamed");
    assert!(e.to_string().contains("variant 1 has no `name`"), "{e}");
}

#[test]
fn meaningless_experiments_are_errors() {
    // An empty [[run]] (nothing differs from the base, not even its name).
    let e = load("[[run]]\nname = \"a\"\n[[run]]\n", &[]).expect_err("empty run");
    assert!(e.to_string().contains("run 2 is empty"), "{e}");
    // Load is a fraction of each host's link rate.
    let e = load("[workload]\nload = 1.2\n", &[]).expect_err("load above 1");
    assert!(e.to_string().contains("workload.load"), "{e}");
    assert!(load("[workload]\nload = 1.0\n", &[]).is_ok());
}

#[test]
fn bad_values_name_the_key() {
    let e = load("[topology]\nk = 5\n", &[]).expect_err("odd k");
    assert!(e.to_string().contains("topology.k"), "{e}");
    let e = load("[network]\nmtu = 1500\n", &[]).expect_err("mtu");
    assert!(e.to_string().contains("network.mtu"), "{e}");
    let e = load("[network]\npause_quanta = 0\n", &[]).expect_err("quanta");
    assert!(e.to_string().contains("network.pause_quanta"), "{e}");
    let e = load("[network]\npause_refresh = 0\n", &[]).expect_err("refresh");
    assert!(e.to_string().contains("network.pause_refresh"), "{e}");
}

/// Resending lost retransmissions, every unSACKed PSN on a timeout, and NACKs with a loss
/// bitmap are selective repeat's options: accepted with `irn` and `irn-no-bdp-fc`, refused elsewhere naming the key.
#[test]
fn selective_repeat_options_need_selective_repeat() {
    for key in [
        "transport.resend_lost_retransmissions",
        "transport.timeout_resends_unsacked",
        "transport.nack_bitmap",
    ] {
        let on = format!("{key}=true");
        for ok in ["irn", "irn-no-bdp-fc"] {
            let r = format!("transport.recovery={ok}");
            load("", &[&r, &on]).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["roce", "irn-go-back-n", "irn-no-sack", "ext-ib", "tcp"] {
            let r = format!("transport.recovery={bad}");
            let e = load("", &[&r, &on]).expect_err(bad);
            assert!(e.to_string().contains(key), "{bad}: {e}");
        }
    }
}

/// The TCP model's keys (SPEC E10) and the measurement window refuse what cannot mean
/// anything, naming the key.
#[test]
fn tcp_model_keys_are_checked() {
    let tcp = "[transport]\nrecovery = \"tcp\"\n";
    load(tcp, &[]).expect("the TCP model with its defaults");
    let dctcp = [
        "transport.cc=dctcp",
        "switch.ecn=threshold",
        "transport.tcp_delayed_ack_us=40",
    ];
    load(tcp, &dctcp).expect("DCTCP");
    for (set, key) in [
        ("transport.cc=dcqcn", "transport.cc"),
        ("transport.cc=timely", "transport.cc"),
        (
            "transport.tcp_initial_window=0",
            "transport.tcp_initial_window",
        ),
        ("transport.tcp_min_rto_us=0", "transport.tcp_min_rto_us"),
        ("transport.tcp_max_rto_us=10", "transport.tcp_min_rto_us"),
        ("transport.tcp_dup_thresh=0", "transport.tcp_dup_thresh"),
        (
            "transport.tcp_delayed_ack_us=-1",
            "transport.tcp_delayed_ack_us",
        ),
        ("workload.measure_from_us=-5", "workload.measure_from_us"),
        ("workload.measure_until_us=0", "workload.measure_until_us"),
    ] {
        let e = load(tcp, &[set]).expect_err(set);
        assert!(e.to_string().contains(key), "{set}: {e}");
    }
}

#[test]
fn runs_sets_and_sweeps_combine() {
    let text = r#"
name = "base"
[workload]
load = 0.5
[[run]]
name = "IRN"
[[run]]
name = "RoCE+PFC"
transport.recovery = "roce"
network.pfc = true
[sweep]
"workload.load" = [0.3, 0.9]
"#;
    let e = load(text, &["topology.k=4"]).expect("valid");
    let names: Vec<&str> = e.runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "IRN load=0.3",
            "IRN load=0.9",
            "RoCE+PFC load=0.3",
            "RoCE+PFC load=0.9"
        ]
    );
    assert!(e.runs.iter().all(|r| r.topology.k == 4));
    assert_eq!(e.runs[3].transport.recovery, Recovery::Roce);
    assert!(e.runs[3].network.pfc && !e.runs[0].network.pfc);
    assert_eq!(e.runs[1].workload.load, 0.9);
}

#[test]
fn per_tier_values() {
    let e = load("[topology]\nlink_gbps = [10, 40]\n", &[]).expect("valid");
    let t = &e.runs[0].topology;
    assert_eq!(
        (
            t.link_gbps.tier(0),
            t.link_gbps.tier(1),
            t.link_gbps.tier(2)
        ),
        (10.0, 40.0, 40.0)
    );
}
