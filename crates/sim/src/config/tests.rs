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

/// Backing off on loss (IRN §4.3's go-back-N variant) is for the rate controllers only.
#[test]
fn backing_off_on_loss_needs_a_rate_controller() {
    let on = "transport.cc_backoff_on_loss=true";
    load("", &["transport.cc=timely", on]).expect("TIMELY");
    load("", &["transport.cc=dcqcn", "switch.ecn=red", on]).expect("DCQCN");
    for cc in ["none", "dctcp", "aimd"] {
        let set = format!("transport.cc={cc}");
        let e = load("", &[&set, "switch.ecn=threshold", on]).expect_err(cc);
        assert!(
            e.to_string().contains("transport.cc_backoff_on_loss"),
            "{cc}: {e}"
        );
    }
    let e = load(
        "",
        &[
            "transport.cc=timely",
            on,
            "transport.cc_backoff_interval_us=-1",
        ],
    )
    .expect_err("a negative interval");
    assert!(
        e.to_string().contains("transport.cc_backoff_interval_us"),
        "{e}"
    );
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

#[test]
fn a_traffic_class_is_the_run_with_its_own_transport_dscps_and_flows() {
    let text = r#"
[switch]
ecn = "red"
[transport]
recovery = "irn"
cc = "dcqcn"
[network]
control_dscp = 48
[[traffic]]
name = "tcp"
recovery = "tcp"
cc = "dctcp"
dscp = 10
load = 0.3
sizes = "websearch"
[[traffic]]
dscp = 34
kind = "incast"
incast_senders = 4
"#;
    let cfg = load(text, &[]).expect("valid").runs.remove(0);
    assert_eq!(cfg.class_count(), 3);
    assert_eq!(cfg.class_config(0), cfg);
    let tcp = cfg.class_config(1);
    assert_eq!(tcp.transport.recovery, Recovery::Tcp);
    assert_eq!(tcp.transport.cc, CcKind::Dctcp);
    // A TCP socket marks its ACKs as its data.
    assert_eq!((tcp.network.data_dscp, tcp.network.control_dscp), (10, 10));
    assert_eq!(
        (tcp.workload.load, tcp.workload.sizes.as_str()),
        (0.3, "websearch")
    );
    assert!(tcp.traffic.is_empty());
    assert_ne!(tcp.seed, cfg.seed, "its flows from a stream of their own");
    // An RDMA class takes [transport]'s keys and the control DSCP.
    let rdma = cfg.class_config(2);
    assert_eq!(rdma.transport.recovery, Recovery::Irn);
    assert_eq!(rdma.transport.cc, CcKind::Dcqcn);
    assert_eq!(
        (rdma.network.data_dscp, rdma.network.control_dscp),
        (34, 48)
    );
    assert_eq!(rdma.workload.kind, WorkloadKind::Incast);
    assert_eq!(
        (cfg.class_name(0), cfg.class_name(1), cfg.class_name(2)),
        ("irn".to_string(), "tcp".to_string(), "traffic2".to_string())
    );
}

#[test]
fn a_traffic_class_that_cannot_mean_anything_is_refused_by_its_key() {
    for (text, key) in [
        ("[[traffic]]\ndscp = 64\n", "traffic[0].dscp"),
        (
            "[[traffic]]\ncontrol_dscp = 70\n",
            "traffic[0].control_dscp",
        ),
        (
            "[[traffic]]\nrecovery = \"tcp\"\ncc = \"dcqcn\"\n",
            "traffic[0] (its transport",
        ),
        ("[[traffic]]\nload = 0\n", "traffic[0].load"),
        ("[[traffic]]\nkind = \"flows\"\n", "traffic[0].flows_file"),
        (
            "[network]\nscheduler = \"dwrr\"\ndwrr_weights = [1, 2]\n",
            "network.dwrr_weights",
        ),
        (
            "[network]\ndwrr_weights = [1, 1, 1, 1, 1, 1, 1, 1]\n",
            "network.dwrr_weights",
        ),
        ("config_check_ms = 0\n", "config_check_ms"),
        ("[transport]\nack_every = 0\n", "transport.ack_every"),
        (
            "[transport]\nrecovery = \"roce\"\nrenak_us = 0\n",
            "transport.renak_us",
        ),
        ("[transport]\nrenak_us = 4\n", "transport.renak_us"),
        ("[switch]\npfc_alpha = -1\n", "switch.pfc_alpha"),
        ("[network]\npause_hosts = [1]\n", "network.pause_hosts"),
        (
            "[[fault]]\nkind = \"nic-dscp\"\nhost = 1\nat_ms = 1\n",
            "fault[0].dscp",
        ),
        (
            "[[fault]]\nkind = \"host-down\"\nhost = 1\nat_ms = 1\ndscp = 3\n",
            "fault[0].dscp",
        ),
        ("[[traffic]]\nrecovery = \"tcpp\"\n", "tcpp"),
        ("[[traffic]]\ncc = \"dctcp\"\n", "traffic[0] (its transport"),
    ] {
        let e = load(text, &[]).expect_err(text).to_string();
        assert!(e.contains(key) && e.contains("test.toml"), "{text}: {e}");
    }
}

#[test]
fn dwrr_weights_default_to_equal_shares_with_the_control_priority_strict() {
    let mut n = NetworkConfig::default();
    assert_eq!(n.dwrr_weight(3), 1);
    assert_eq!(n.dwrr_weight(0), 1);
    assert_eq!(n.dwrr_weight(6), 0, "control_dscp 48 is priority 6");
    n.control_priority = false;
    assert_eq!(n.dwrr_weight(6), 1);
    n.dwrr_weights = Some(vec![2, 0, 0, 5, 0, 0, 0, 0]);
    assert_eq!(
        (n.dwrr_weight(0), n.dwrr_weight(3), n.dwrr_weight(6)),
        (2, 5, 0)
    );
}

#[test]
fn seeds_run_every_configuration_once_per_seed_with_the_seed_last_in_its_name() {
    let text = "seeds = 3\n[[run]]\nname = \"IRN\"\n[[run]]\nname = \"RoCE\"\n\
                transport.recovery = \"roce\"\n[sweep]\n\"workload.load\" = [0.3, 0.5]\n";
    let e = load(text, &[]).expect("valid");
    let names: Vec<(&str, u64)> = e.runs.iter().map(|r| (r.name.as_str(), r.seed)).collect();
    assert_eq!(names.len(), 12);
    assert_eq!(names[0], ("IRN load=0.3 seed=1", 1));
    assert_eq!(names[2], ("IRN load=0.3 seed=3", 3));
    assert_eq!(names[3], ("IRN load=0.5 seed=1", 1));
    assert_eq!(names[11], ("RoCE load=0.5 seed=3", 3));
    assert_eq!(e.runs[4].scenario, "load=0.5 seed=2");
    // A list, in its own order; `--set seeds=…` replaces the file's.
    let e = load("seeds = [7, 2]\n", &[]).expect("valid");
    let seeds: Vec<u64> = e.runs.iter().map(|r| r.seed).collect();
    assert_eq!(seeds, [7, 2]);
    assert_eq!(e.runs[0].name, "run seed=7");
    let e = load("seeds = [7, 2]\n", &["seeds=[4, 5, 6]"]).expect("valid");
    assert_eq!(e.runs.iter().map(|r| r.seed).collect::<Vec<_>>(), [4, 5, 6]);
    // One seed: the base's seed, names unchanged, a run's own seed still its own.
    let e = load(
        "seeds = [9]\n[[run]]\nname = \"a\"\n[[run]]\nname = \"b\"\nseed = 2\n",
        &[],
    )
    .expect("valid");
    assert_eq!((e.runs[0].name.as_str(), e.runs[0].seed), ("a", 9));
    assert_eq!((e.runs[1].name.as_str(), e.runs[1].seed), ("b", 2));
}

#[test]
fn a_seed_given_replays_that_one_seed_instead_of_the_files_seeds() {
    for text in ["seeds = 5\n", "[sweep]\nseed = [1, 2, 3]\n"] {
        let e = load_experiment(text, "t.toml", Path::new("."), &[], Some(4)).expect("valid");
        assert_eq!(e.runs.len(), 1, "{text}");
        assert_eq!(e.runs[0].seed, 4);
        assert_eq!(e.runs[0].name, "run");
    }
}

#[test]
fn seeds_that_cannot_mean_anything_are_errors_naming_the_key() {
    for (text, what) in [
        ("seeds = 0\n", "0 seeds"),
        ("seeds = []\n", "empty"),
        ("seeds = [1, 2, 1]\n", "twice"),
        ("seeds = [-1]\n", "not a seed"),
        ("seeds = \"three\"\n", "neither"),
        ("seeds = 3\n[sweep]\nseed = [1, 2]\n", "one place"),
    ] {
        let s = load(text, &[]).expect_err(text).to_string();
        assert!(
            s.contains("test.toml") && s.contains("`seeds`") && s.contains(what),
            "{text}: {s}"
        );
    }
}
