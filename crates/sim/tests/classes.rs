//! Traffic classes side by side (SPEC N3, N8; seed 004): `[[traffic]]` classes with their own
//! DSCPs and transports, links shared between them by strict priority or DWRR at switches and
//! NICs, and the victim flow of congestion spreading. Each asserts exact delivery (one
//! completion per flow) and the direction and size of the effect, over seeds.

mod common;

use std::path::{Path, PathBuf};

use irn_sim::config::{load_experiment, SimConfig};
use irn_sim::metrics::{ClassReport, RunSummary};

const SEEDS: [u64; 3] = [1, 2, 3];

fn experiments() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

/// A directory of its own for one test's flow files.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irn-classes-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn configs(text: &str, dir: &Path, seed: u64) -> Vec<SimConfig> {
    configs_with(text, dir, &[], seed)
}

fn configs_with(text: &str, dir: &Path, sets: &[&str], seed: u64) -> Vec<SimConfig> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load_experiment(text, "classes.toml", dir, &sets, Some(seed))
        .expect("valid")
        .runs
}

fn class<'a>(r: &'a RunSummary, name: &str) -> &'a ClassReport {
    r.classes
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{}: no class {name}", r.name))
}

/// Every flow of every class completed successfully, once.
fn all_delivered(r: &RunSummary) {
    assert_eq!(
        (r.flows_completed, r.flows_failed, r.flows_unfinished),
        (r.flows, 0, 0),
        "{}",
        r.name
    );
    for c in &r.classes {
        assert_eq!(c.flows_completed, c.flows, "{} {}", r.name, c.name);
    }
    assert_eq!(
        r.classes.iter().map(|c| c.flows).sum::<usize>(),
        r.flows,
        "{}",
        r.name
    );
}

/// Two 4 MB Writes start together, one per class, on a dumbbell (hosts 0, 1 left; 2, 3
/// right), `a` the `[workload]` class (DSCP 26, priority 3) and `b` a second lossless class
/// (DSCP 34, priority 4), each over `path` (src, dst). Returns each run's FCTs (a, b) in µs.
fn two_flows(
    dir: &Path,
    a: (u32, u32),
    b: (u32, u32),
    net: &str,
    runs: &str,
    seed: u64,
) -> Vec<(String, f64, f64)> {
    std::fs::write(dir.join("a.csv"), format!("0,{},{},4000000\n", a.0, a.1)).expect("write");
    std::fs::write(dir.join("b.csv"), format!("0,{},{},4000000\n", b.0, b.1)).expect("write");
    let text = format!(
        r#"
[topology]
kind = "dumbbell"
hosts_per_side = 2
[network]
{net}
[workload]
name = "a"
kind = "flows"
flows_file = "a.csv"
[[traffic]]
name = "b"
kind = "flows"
flows_file = "b.csv"
dscp = 34
{runs}
"#
    );
    let cfgs = configs(&text, dir, seed);
    common::run_all(&cfgs)
        .iter()
        .map(|r| {
            all_delivered(r);
            (
                r.name.clone(),
                class(r, "a").stats.avg_fct_us,
                class(r, "b").stats.avg_fct_us,
            )
        })
        .collect()
}

/// The FCTs that sharing a link in ratio `wa : wb` gives two equal transfers of `t` µs
/// alone: the first to finish took `t × (wa + wb) / max(wa, wb)`; the other, its share of
/// the link until then and the whole link after, `2t`.
fn shared(t: f64, wa: f64, wb: f64) -> (f64, f64) {
    let first = t * (wa + wb) / wa.max(wb);
    if wa >= wb {
        (first, 2.0 * t)
    } else {
        (2.0 * t, first)
    }
}

fn near(x: f64, want: f64, tol: f64) -> bool {
    (x / want - 1.0).abs() < tol
}

/// Two lossless classes into one congested port: strict priority serves the higher class
/// first; DWRR splits the port by weight (3:1 gives the heavier class ¾ of the port until it
/// is done); the same weights share it equally. PFC keeps both classes lossless, so the
/// switch's scheduler alone sets the shares.
#[test]
fn a_congested_port_shares_its_link_by_strict_priority_or_by_weight() {
    let dir = scratch("port");
    let net = "pfc = true\nlossless_priorities = [3, 4]";
    let runs = r#"
[[run]]
name = "strict"
[[run]]
name = "dwrr 3:1"
network.scheduler = "dwrr"
network.dwrr_weights = [1, 1, 1, 3, 1, 1, 0, 0]
[[run]]
name = "dwrr 1:1"
network.scheduler = "dwrr"
"#;
    for seed in SEEDS {
        let out = two_flows(&dir, (0, 2), (1, 2), net, runs, seed);
        // 4 MB alone at 40 Gb/s: ≈ 860 µs of serialization, and IRN at its BDP cap ≈ 940.
        let alone = out[0].1.min(out[0].2);
        assert!((800.0..1000.0).contains(&alone), "seed {seed}: {out:?}");
        let (_, a, b) = out[0];
        // Strict: priority 4 (b) goes first, at the full rate.
        assert!(
            b < 1.1 * alone && near(a, 2.0 * alone, 0.08),
            "seed {seed}: {out:?}"
        );
        let (wa, wb) = shared(alone, 3.0, 1.0);
        let (_, a, b) = out[1];
        assert!(
            near(a, wa, 0.08) && near(b, wb, 0.08),
            "seed {seed}: {out:?} want {wa} {wb}"
        );
        let (_, a, b) = out[2];
        assert!(
            near(a, 2.0 * alone, 0.08) && near(b, 2.0 * alone, 0.08),
            "seed {seed}: {out:?}"
        );
    }
}

/// One NIC sending two classes to two idle receivers: its own link is the bottleneck, and
/// its lanes share it as the switch's classes would — by weight under DWRR, the higher
/// priority first under strict priority — with no pause and no loss in between.
#[test]
fn a_nics_lanes_share_its_link_by_strict_priority_or_by_weight() {
    let dir = scratch("nic");
    let runs = r#"
[transport]
recovery = "irn"
[[run]]
name = "strict"
[[run]]
name = "dwrr 1:3"
network.scheduler = "dwrr"
network.dwrr_weights = [1, 1, 1, 1, 3, 1, 0, 0]
"#;
    for seed in SEEDS {
        let out = two_flows(&dir, (0, 2), (0, 3), "", runs, seed);
        let (_, a, b) = out[0];
        let alone = b;
        assert!((800.0..1000.0).contains(&alone), "seed {seed}: {out:?}");
        assert!(near(a, 2.0 * alone, 0.08), "seed {seed}: {out:?}");
        let (wa, wb) = shared(alone, 1.0, 3.0);
        let (_, a, b) = out[1];
        assert!(
            near(a, wa, 0.08) && near(b, wb, 0.08),
            "seed {seed}: {out:?} want {wa} {wb}"
        );
    }
}

/// experiments/n3-victim.toml: PFC pauses a flow that crosses no congested link (the victim,
/// in the incast's class), for most of its transfer, and not one in a lossless class of its
/// own; 802.3x PAUSE pauses both; without PFC neither is paused and both finish near their
/// time alone (IRN's 1.14: its BDP cap, a propagation-only round trip, at 25 Gb/s) — but
/// without BDP-FC the incast overflows the input buffer the victims' packets share, and they
/// are lost with it; DCQCN, slowing the incast before buffers fill, spares the victim most of
/// PFC's pausing.
#[test]
fn pfc_makes_a_victim_of_a_flow_that_crosses_no_congested_link() {
    let text = std::fs::read_to_string(experiments().join("n3-victim.toml")).expect("read");
    for seed in SEEDS {
        let runs = common::run_all(&configs(&text, &experiments(), seed));
        let run = |n: &str| common::by(&runs, n);
        for r in &runs {
            all_delivered(r);
        }
        let (pfc, pause, dcqcn, lossy) = (
            run("PFC"),
            run("PAUSE"),
            run("PFC, DCQCN"),
            run("lossy, IRN"),
        );
        let slow = |r: &RunSummary, c: &str| class(r, c).stats.avg_slowdown;
        let paused = |r: &RunSummary, c: &str| class(r, c).paused_us;
        let ctx = |r: &RunSummary| format!("seed {seed} {}: {:#?}", r.name, r.classes);
        // PFC: the victim is paused for over a millisecond and takes over twice its time;
        // the victim in its own lossless class is never paused.
        assert!(
            slow(pfc, "victim") > 2.0 && paused(pfc, "victim") > 1000.0,
            "{}",
            ctx(pfc)
        );
        assert!(
            slow(pfc, "victim, own class") < 1.2 && paused(pfc, "victim, own class") == 0.0,
            "{}",
            ctx(pfc)
        );
        // PAUSE: one pause stops every class of the link.
        assert!(slow(pause, "victim, own class") > 2.0, "{}", ctx(pause));
        assert!(
            paused(pause, "victim, own class") > 1000.0,
            "{}",
            ctx(pause)
        );
        // Lossy: nothing pauses; the victims run near their time alone.
        for c in ["victim", "victim, own class"] {
            assert!(
                slow(lossy, c) < 1.3 && paused(lossy, c) == 0.0,
                "{}",
                ctx(lossy)
            );
        }
        // Without BDP-FC the lossy incast overflows the input buffer the victims share.
        let no_cap = run("lossy, IRN without BDP-FC");
        for c in ["victim", "victim, own class"] {
            assert!(
                slow(no_cap, c) > 3.0 && paused(no_cap, c) == 0.0,
                "{}",
                ctx(no_cap)
            );
            assert!(class(no_cap, c).retransmissions > 0, "{}", ctx(no_cap));
        }
        // DCQCN spares the victim at least half of PFC's slowdown beyond 1.
        assert!(
            slow(dcqcn, "victim") - 1.0 < 0.5 * (slow(pfc, "victim") - 1.0),
            "{} / {}",
            ctx(dcqcn),
            ctx(pfc)
        );
    }
}

/// experiments/n8-classes.toml at 3 ms of arrivals: TCP beside RDMA. Sharing one queue with
/// RDMA costs TCP over 5 % of its slowdown against a class of its own (QoS), under RoCE and
/// under IRN; IRN needs no PFC (its RDMA within 5 % with or without it); on the lossy fabric
/// with QoS, IRN's RDMA beats RoCE's by over 10 %; and PFC on RoCE's class costs TCP over
/// 10 %.
#[test]
fn tcp_beside_rdma_gains_from_a_class_of_its_own_and_irn_needs_no_pfc() {
    let text = std::fs::read_to_string(experiments().join("n8-classes.toml")).expect("read");
    for seed in SEEDS {
        let cfgs = configs_with(&text, &experiments(), &["workload.duration_us=3000"], seed);
        let runs = common::run_all(&cfgs);
        for r in &runs {
            // Every flow finishes (lossy RoCE with go-back-N included), once.
            all_delivered(r);
        }
        let slow = |r: &str, c: &str| class(common::by(&runs, r), c).stats.avg_slowdown;
        for t in ["RoCE", "IRN"] {
            let (one, qos) = (
                slow(&format!("{t}, one queue"), "TCP"),
                slow(&format!("{t}, QoS"), "TCP"),
            );
            assert!(
                one > 1.05 * qos,
                "seed {seed} {t}: TCP {one} in one queue, {qos} with QoS"
            );
        }
        let (pfc, qos) = (slow("IRN, PFC + QoS", "RDMA"), slow("IRN, QoS", "RDMA"));
        assert!(
            (pfc / qos - 1.0).abs() < 0.05,
            "seed {seed}: IRN {pfc} with PFC, {qos} without"
        );
        let roce = slow("RoCE, QoS", "RDMA");
        assert!(qos < 0.9 * roce, "seed {seed}: IRN {qos}, RoCE {roce}");
        // PFC on RoCE's class costs TCP beside it: paused RDMA fills the inputs' shared pool.
        let (pfc_tcp, qos_tcp) = (slow("RoCE, PFC + QoS", "TCP"), slow("RoCE, QoS", "TCP"));
        assert!(
            pfc_tcp > 1.1 * qos_tcp,
            "seed {seed}: TCP {pfc_tcp} beside RoCE with PFC, {qos_tcp} without"
        );
    }
}
