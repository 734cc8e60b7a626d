//! The production-RoCEv2 safety model (seed 001 §4–§5): PFC deadlock from flooding, pause
//! storms and the watchdogs that stop them, the slow receiver's translation misses, and the
//! configuration's errors. Each scenario at reduced scale, over several seeds, asserting the
//! direction and size of the effect and each flow's fate.

mod common;

use std::path::{Path, PathBuf};

use irn_sim::config::{load_experiment, SimConfig};
use irn_sim::metrics::RunSummary;
use irn_sim::RunOutput;
use irn_transport::{Dur, Time, WcStatus};

const SEEDS: [u64; 3] = [1, 2, 3];

fn experiments() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

/// Every run of an experiment text at `seed`, with `sets` applied; `dir` resolves its files.
fn configs(text: &str, dir: &Path, sets: &[&str], seed: u64) -> Vec<SimConfig> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load_experiment(text, "safety.toml", dir, &sets, Some(seed))
        .expect("valid")
        .runs
}

fn run_full(cfg: &SimConfig) -> RunOutput {
    irn_sim::run(cfg, |_| {}).expect("valid configuration")
}

fn named<'a>(runs: &'a [(String, RunOutput)], name: &str) -> &'a RunOutput {
    &runs.iter().find(|(n, _)| n == name).expect("run exists").1
}

/// Figure 4 (experiments/e11-deadlock.toml): flooding for two dead servers makes RoCE+PFC
/// deadlock on the figure's cycle, and the cycle outlives the servers' return; the paper's
/// fix and lossy flooding do not deadlock, nor does IRN without PFC, and there the flows to
/// live servers complete while those to dead ones fail with retry-exceeded, once each.
#[test]
fn flooding_deadlocks_roce_with_pfc_and_the_fix_prevents_it() {
    let text = std::fs::read_to_string(experiments().join("e11-deadlock.toml")).expect("read");
    for seed in SEEDS {
        let runs: Vec<(String, RunOutput)> = configs(&text, &experiments(), &[], seed)
            .iter()
            .map(|c| (c.name.clone(), run_full(c)))
            .collect();
        let dead = |r: &irn_sim::net::FlowRecord| r.flow.dst == 1 || r.flow.dst == 2;

        let pfc = named(&runs, "RoCE+PFC");
        let s = &pfc.summary;
        assert!(s.deadlocked, "seed {seed}: {s:?}");
        // The servers came back at 30 ms; the cycle, formed before, is still there.
        let at = s.safety.deadlock_at_ms.expect("when");
        assert!(
            at < 30.0 && s.safety.deadlock_at_end,
            "seed {seed}: at {at}"
        );
        let cycle = s.deadlock_cycle.join(" ");
        for member in ["T0.p2/3", "La.p1/3", "T1.p4/3", "Lb.p0/3"] {
            assert!(cycle.contains(member), "seed {seed}: {cycle}");
        }
        assert!(s.safety.counts.floods > 0);
        // Nothing completes: the collateral flows are stuck behind the cycle too.
        assert_eq!(s.flows_completed, 0, "seed {seed}");
        for r in &pfc.records {
            assert_eq!(r.status, Some(WcStatus::RetryExcErr), "seed {seed}: {r:?}");
        }

        for name in ["RoCE+PFC, fix", "RoCE+PFC, lossy flood", "IRN"] {
            let o = named(&runs, name);
            let s = &o.summary;
            assert!(
                !s.deadlocked && !s.safety.deadlock_at_end,
                "seed {seed} {name}"
            );
            assert_eq!(s.flows_unfinished, 0, "seed {seed} {name}");
            for r in &o.records {
                let want = if dead(r) {
                    WcStatus::RetryExcErr
                } else {
                    WcStatus::Success
                };
                assert_eq!(r.status, Some(want), "seed {seed} {name}: {r:?}");
                assert!(r.intact, "seed {seed} {name}");
            }
            assert!(o.records.iter().any(|r| !dead(r)));
        }
        let fix = &named(&runs, "RoCE+PFC, fix").summary;
        assert!(
            fix.safety.counts.l2_drops > 0 && fix.safety.counts.floods == 0,
            "{:?}",
            fix.safety
        );
        let lossy = &named(&runs, "RoCE+PFC, lossy flood").summary;
        assert!(lossy.safety.counts.floods > 0);
        let irn = &named(&runs, "IRN").summary;
        assert_eq!(irn.pause_frames, 0);
    }
}

/// A reduced E11 storm: a k = 4 fat-tree at 30 % load, host 0's receive pipeline stops at
/// 5 ms, the watchdogs' clocks scaled down tenfold (NIC 10 ms; switch polled every 5 ms,
/// detection and restoration 20 ms) in a 100 ms run.
const STORM: &str = r#"
monitor_interval_us = 2000
[topology]
kind = "fat-tree"
k = 4
[workload]
kind = "poisson"
load = 0.3
sizes = "irn"
duration_us = 100000
drain_us = 5000
[network]
pfc = true
[transport]
recovery = "roce"
roce_timeout_with_pfc = true
roce_rto_us = 67108.864
retry_cnt = 7
ack_timeout = 14
[watchdog]
nic_watchdog_ms = 10
poll_ms = 5
detection_ms = 20
restoration_ms = 20
[[fault]]
kind = "nic-rx-stall"
host = 0
at_ms = 5
[[run]]
name = "none"
[[run]]
name = "nic"
watchdog.nic = true
[[run]]
name = "switch"
watchdog.switch = "drop"
[[run]]
name = "both"
watchdog.nic = true
watchdog.switch = "drop"
[[run]]
name = "forward"
watchdog.switch = "forward"
[[run]]
name = "alert"
watchdog.switch = "alert"
[[run]]
name = "IRN"
transport.recovery = "irn"
network.pfc = false
"#;

/// Hosts held paused over the last quarter of the run's timeline, on average (a loaded PFC
/// fabric has a few now and then; a storm, nearly all of them all the time).
fn paused_late(s: &RunSummary) -> f64 {
    let n = s.timeline.len();
    let late = &s.timeline[n * 3 / 4..];
    late.iter().map(|p| f64::from(p.paused_hosts)).sum::<f64>() / late.len().max(1) as f64
}

/// Goodput over the last quarter of the arrivals (60–95 ms), Gb/s.
fn goodput_late(s: &RunSummary) -> f64 {
    let pts: Vec<f64> = s
        .timeline
        .iter()
        .filter(|p| (60.0..=95.0).contains(&p.t_ms))
        .map(|p| p.goodput_gbps)
        .collect();
    pts.iter().sum::<f64>() / pts.len().max(1) as f64
}

/// Without a watchdog the stalled NIC's pauses spread to (nearly) every server and stay; the
/// fabric's goodput collapses. Either watchdog contains it — after its detection time, at most
/// a few of the 16 servers are paused now and then (congestion, as in any loaded PFC fabric,
/// and the dead NIC's peers still resending to it) against all but one without, and
/// goodput returns to within reach of what IRN, whose dead NIC just drops, delivers all along.
/// With both, the NIC's (10 ms) acts before the switch's (20 ms + polling) could. The switch
/// watchdog's `forward` action contains it as well; `alert` sees it and changes nothing.
#[test]
fn a_pause_storm_spreads_without_watchdogs_and_either_watchdog_stops_it() {
    let per_seed = common::per_seed(STORM, &SEEDS);
    for (seed, runs) in SEEDS.iter().zip(&per_seed) {
        let none = common::by(runs, "none");
        let irn = common::by(runs, "IRN");
        assert!(
            none.safety.paused_hosts_max >= 12,
            "seed {seed}: {:?}",
            none.safety
        );
        assert!(paused_late(none) >= 12.0, "seed {seed}");
        assert_eq!(none.watchdog_triggers, 0);
        assert_eq!(irn.pause_frames, 0);
        assert_eq!(irn.safety.paused_hosts_max, 0);
        let healthy = goodput_late(irn);
        assert!(healthy > 50.0, "seed {seed}: IRN {healthy} Gb/s");
        assert!(goodput_late(none) < 0.2 * healthy, "seed {seed}");
        for name in ["nic", "switch", "both"] {
            let s = common::by(runs, name);
            assert!(s.watchdog_triggers >= 1, "seed {seed} {name}");
            assert!(
                paused_late(s) < 4.0,
                "seed {seed} {name}: {}",
                paused_late(s)
            );
            let g = goodput_late(s);
            assert!(
                g > 0.6 * healthy,
                "seed {seed} {name}: {g} vs IRN {healthy}"
            );
        }
        assert_eq!(common::by(runs, "nic").safety.counts.nic_watchdog, 1);
        assert_eq!(common::by(runs, "nic").safety.counts.switch_watchdog, 0);
        assert_eq!(common::by(runs, "switch").safety.counts.nic_watchdog, 0);
        assert_eq!(common::by(runs, "both").safety.counts.nic_watchdog, 1);
        // SONiC's other actions: `forward` ignores the stalled NIC's pauses (the NIC then
        // drops what it cannot hold) and contains the storm too; `alert` only counts it.
        let forward = common::by(runs, "forward");
        assert!(forward.safety.counts.switch_watchdog >= 1, "seed {seed}");
        assert!(
            paused_late(forward) < 4.0,
            "seed {seed}: {}",
            paused_late(forward)
        );
        let alert = common::by(runs, "alert");
        assert!(alert.safety.counts.switch_watchdog >= 1, "seed {seed}");
        assert!(
            paused_late(alert) >= 12.0,
            "seed {seed}: {}",
            paused_late(alert)
        );
        assert!(common::by(runs, "switch").safety.counts.switch_watchdog >= 1);
    }
}

/// A storm shorter than the detection time (the pipeline stops for 12 ms against a switch
/// detection time of 20 ms and a NIC watchdog of 15 ms) triggers neither watchdog, and once
/// the pipeline runs again every flow completes.
#[test]
fn a_storm_shorter_than_the_detection_time_triggers_nothing() {
    let text = STORM.replace("at_ms = 5\n", "at_ms = 5\nuntil_ms = 17\n");
    let sets = [
        "watchdog.nic_watchdog_ms=15",
        "workload.duration_us=40000",
        "workload.drain_us=60000",
    ];
    let cfgs: Vec<SimConfig> = SEEDS
        .iter()
        .flat_map(|&seed| configs(&text, Path::new("."), &sets, seed))
        .filter(|c| c.name == "both")
        .collect();
    for s in common::run_all(&cfgs) {
        assert_eq!(s.watchdog_triggers, 0, "seed {}: {:?}", s.seed, s.safety);
        assert!(
            s.safety.paused_hosts_max >= 4,
            "seed {}: the storm spread",
            s.seed
        );
        assert_eq!(s.flows_completed, s.flows, "seed {}", s.seed);
    }
}

/// Seed 001 §4.4: with 4 KB pages the 2 K-entry translation cache misses on every new page,
/// the receive pipeline falls behind and the NICs pause their ToRs thousands of times a
/// second; with 2 MB pages hardly ever. Under PFC nothing is lost either way.
#[test]
fn small_pages_make_slow_receivers_that_pause() {
    let text = r#"
[topology]
kind = "fat-tree"
k = 4
[workload]
kind = "poisson"
load = 0.5
sizes = "irn"
duration_us = 3000
[network]
pfc = true
[nic]
mtt_miss_ns = 1000
[transport]
recovery = "roce"
[[run]]
name = "4k"
nic.page_bytes = 4096
[[run]]
name = "2m"
nic.page_bytes = 2097152
[[run]]
name = "none"
nic.mtt_miss_ns = 0
"#;
    let per_seed = common::per_seed(text, &SEEDS);
    for (seed, runs) in SEEDS.iter().zip(&per_seed) {
        let (small, huge, none) = (
            common::by(runs, "4k"),
            common::by(runs, "2m"),
            common::by(runs, "none"),
        );
        for s in [small, huge, none] {
            assert_eq!(s.flows_completed, s.flows, "seed {seed} {}", s.name);
            assert_eq!(s.drops, 0, "seed {seed} {}", s.name);
        }
        assert!(small.safety.mtt_misses > 50 * huge.safety.mtt_misses.max(1) / 10);
        assert!(
            small.safety.nic_pauses_per_server_s > 1000.0,
            "seed {seed}: {:?}",
            small.safety
        );
        assert!(
            huge.safety.nic_pauses_per_server_s < 0.1 * small.safety.nic_pauses_per_server_s,
            "seed {seed}: {:?} vs {:?}",
            huge.safety,
            small.safety
        );
        assert_eq!(none.safety.nic_pauses_per_server_s, 0.0);
        assert!(
            small.all.avg_slowdown > none.all.avg_slowdown,
            "seed {seed}"
        );
    }
}

/// Safety settings that cannot mean anything are errors naming the key and the file; a fault
/// on a host the topology lacks is an error naming the fault.
#[test]
fn safety_config_errors_name_the_key() {
    for (text, key) in [
        ("[l2]\nflood_dscp = 64\n", "l2.flood_dscp"),
        ("[l2]\nmac_timeout_s = 0\n", "l2.mac_timeout_s"),
        ("[watchdog]\npoll_ms = 0\n", "watchdog.poll_ms"),
        ("[watchdog]\ndetection_ms = -1\n", "watchdog.detection_ms"),
        ("[watchdog]\nswitch = \"reboot\"\n", "reboot"),
        ("[deadlock]\ndetect_ms = -1\n", "deadlock.detect_ms"),
        (
            "[[fault]]\nkind = \"host-down\"\nhost = 0\nat_ms = 5\nuntil_ms = 1\n",
            "fault[0].until_ms",
        ),
        ("[transport]\nretry_cnt = 8\n", "transport.retry_cnt"),
        ("[transport]\nack_timeout = 0\n", "transport.ack_timeout"),
        ("[nic]\npage_bytes = 5000\n", "nic.page_bytes"),
    ] {
        let e = load_experiment(text, "exp.toml", Path::new("."), &[], None).expect_err(key);
        let m = e.to_string();
        assert!(m.contains("exp.toml") && m.contains(key), "{key}: {m}");
    }
    let text = "[topology]\nk = 4\n[[fault]]\nkind = \"nic-rx-stall\"\nhost = 16\nat_ms = 1\n";
    let cfg = &configs(text, Path::new("."), &[], 1)[0];
    let e = irn_sim::run(cfg, |_| {}).expect_err("host 16 of 16");
    assert!(e.to_string().contains("fault[0].host"), "{e}");
}

/// RDMA Pingmesh (seed 001 §5.3, experiments/e11-pingmesh.toml) beside a loaded network:
/// Figure 4's topology with S5 (host 4) behind a link of 100 µs and S3 (host 2) dead. Every
/// probe involving S3 fails (retry exceeded, or never sent), S5's take ~200 µs more, and the
/// summary points at exactly those two servers — not at the peers that probed them — under
/// IRN; under RoCE+PFC at those two first, and at most at bystanders whose probes queued
/// behind the dead server's flooded traffic (slow, by a smaller factor). The probes are not in the workload's statistics: its flows are the same
/// with and without them.
#[test]
fn pingmesh_points_at_the_dead_and_the_slow_server() {
    let text = std::fs::read_to_string(experiments().join("e11-pingmesh.toml")).expect("read");
    for seed in SEEDS {
        let sets = ["workload.duration_us=10000"];
        let cfgs = configs(&text, &experiments(), &sets, seed);
        let mut quiet = cfgs[0].clone();
        quiet.pingmesh.enabled = false;
        let without = run_full(&quiet);
        for cfg in &cfgs {
            let with = run_full(cfg);
            let name = &cfg.name;
            let pm = with.summary.pingmesh.as_ref().expect("a Pingmesh report");
            // Every server probes every 250 µs at both levels (tor, and fabric: 4 links is
            // the diameter here), for 10 ms.
            assert_eq!(pm.probes, 6 * 2 * 40, "seed {seed} {name}");
            assert_eq!(with.probes.len(), pm.probes);
            let levels: Vec<&str> = pm.levels.iter().map(|l| l.level.as_str()).collect();
            assert_eq!(levels, ["tor", "fabric"]);
            let involving_dead = with
                .probes
                .iter()
                .filter(|r| r.flow.src == 2 || r.flow.dst == 2)
                .count();
            assert_eq!(
                pm.failed, involving_dead,
                "seed {seed} {name}: {:?}",
                pm.errors
            );
            assert!(pm.errors.contains_key("IBV_WC_RETRY_EXC_ERR"));
            let named: Vec<u32> = pm.suspects.iter().map(|s| s.server).collect();
            if cfg.network.pfc {
                // Under PFC the dead server's flooded traffic fills lossless queues to their
                // pause thresholds, and a bystander's probes may queue behind it: it can be
                // named slow too, after the two at fault and with a smaller factor.
                assert_eq!(named[..2], [2, 4], "seed {seed} {name}: {:?}", pm.suspects);
                let factor = |r: &str| -> f64 {
                    r.split(", ")
                        .nth(1)
                        .and_then(|x| x.split('×').next())
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(f64::INFINITY)
                };
                let f4 = factor(&pm.suspects[1].reason);
                for extra in &pm.suspects[2..] {
                    assert!(
                        extra.reason.contains("median RTT") && factor(&extra.reason) < f4,
                        "seed {seed} {name}: {:?}",
                        pm.suspects
                    );
                }
            } else {
                assert_eq!(named, [2, 4], "seed {seed} {name}: {:?}", pm.suspects);
            }
            assert!(pm.suspects[1].reason.contains("median RTT"));
            let s5 = pm.servers.iter().find(|s| s.server == 4).expect("S5");
            assert!(s5.p50_us > 200.0, "seed {seed} {name}: {s5:?}");
            if cfg.transport.recovery == cfgs[0].transport.recovery {
                // Same workload, same order, with or without the probes.
                assert!(without.summary.pingmesh.is_none() && without.probes.is_empty());
                assert_eq!(with.records.len(), without.records.len());
                for (a, b) in with.records.iter().zip(&without.records) {
                    let key = |r: &irn_sim::net::FlowRecord| {
                        (r.flow.src, r.flow.dst, r.flow.size, r.flow.start)
                    };
                    assert_eq!(key(a), key(b));
                }
            }
        }
    }
}

/// 802.3x PAUSE (SPEC N1): one pause stops the whole link, so every frame — data and
/// ACK/NAK/CNP alike — is in one lossless class: nothing is dropped anywhere, every pause
/// frame and every counted frame is in that class, and no flow is lost. Under PFC the
/// control priority stays lossy and unpaused beside the paused data priority. PFC and PAUSE
/// together are refused.
#[test]
fn global_pause_stops_the_whole_link_and_excludes_pfc() {
    let text = r#"
monitor_interval_us = 1000
[topology]
kind = "fat-tree"
k = 4
[workload]
kind = "incast"
load = 0.3
incast_senders = 8
incast_bytes = 8000000
duration_us = 2000
[transport]
recovery = "roce"
[[run]]
name = "pause"
network.pause = true
[[run]]
name = "pfc"
network.pfc = true
"#;
    let per_seed = common::per_seed(text, &SEEDS);
    for (seed, runs) in SEEDS.iter().zip(&per_seed) {
        let pause = common::by(runs, "pause");
        let pfc = common::by(runs, "pfc");
        for s in [pause, pfc] {
            assert_eq!(s.flows_completed, s.flows, "seed {seed} {}", s.name);
            assert_eq!(s.drops, 0, "seed {seed} {}", s.name);
            assert!(s.pause_frames > 0, "seed {seed} {}", s.name);
        }
        assert!(pause.pause && !pause.pfc);
        // One class: every counter is priority 0's.
        assert!(pause.port_prio.iter().all(|p| p.prio == 0), "seed {seed}");
        // PFC: data (3) paused, control (6) flowing and never paused.
        assert!(pfc
            .port_prio
            .iter()
            .any(|p| p.prio == 6 && p.counts.tx_packets > 0));
        assert!(pfc
            .port_prio
            .iter()
            .filter(|p| p.prio == 6)
            .all(|p| p.counts.pause_sent == 0 && p.counts.pause_received == 0));
    }
    let e = load_experiment(
        "[network]\npfc = true\npause = true\n",
        "exp.toml",
        Path::new("."),
        &[],
        None,
    )
    .expect_err("both");
    assert!(e.to_string().contains("network.pause"), "{e}");
}

/// A dead peer under IRN (experiments/e11-dead-peer.toml at reduced scale: a k = 4 fat-tree,
/// server 0 down at 2 ms, a 16.8 ms local ACK timeout and 3 retries): with its timers fixed
/// as IRN §3.1 has them, every queue pair sending to the dead server resends every
/// RTO_low / RTO_high until its budget is spent; backing off after three unanswered
/// expiries, it sends the dead server several times fewer packets (its first transmissions
/// are the same) after ten times fewer timeouts. Either way exactly the flows that
/// involve the dead server fail with retry-exceeded (or never end, when it was their
/// source), at the same time within a local ACK timeout, and every other flow completes.
#[test]
fn a_dead_peer_draws_a_backed_off_trickle_not_a_flood() {
    const DEAD_PEER: &str = r#"
name = "dead-peer"
[topology]
kind = "fat-tree"
k = 4
link_gbps = 40
link_delay_ns = 2000
[switch]
model = "input-queued"
buffer_bytes = 240000
[workload]
kind = "poisson"
load = 0.3
sizes = "irn"
duration_us = 10000
drain_us = 100000
[transport]
recovery = "irn"
retry_cnt = 3
ack_timeout = 12
[[fault]]
kind = "host-down"
host = 0
at_ms = 2
[[run]]
name = "fixed"
transport.rto_backoff = false
[[run]]
name = "backed off"
"#;
    for seed in SEEDS {
        let cfgs = configs(DEAD_PEER, Path::new("."), &[], seed);
        let fixed = run_full(&cfgs[0]);
        let backed = run_full(&cfgs[1]);
        let (f, b) = (&fixed.summary, &backed.summary);
        let (sf, sb) = (
            f.safety.counts.sent_to_failed_packets,
            b.safety.counts.sent_to_failed_packets,
        );
        // 12–14× fewer packets and 33–36× fewer timeouts over seeds 1–3.
        assert!(sb > 0 && sb * 6 < sf, "seed {seed}: {sb} vs {sf} packets");
        assert_eq!(
            f.safety.sent_to_failed_per_ms.iter().sum::<u64>(),
            sf,
            "seed {seed}: the series adds up to the total"
        );
        assert!(b.timeouts * 10 < f.timeouts, "seed {seed}");
        for out in [&fixed, &backed] {
            let name = &out.summary.name;
            for r in &out.records {
                let involved = r.flow.src == 0 || r.flow.dst == 0;
                let late = r.flow.start.since(Time::ZERO) >= Dur::from_millis(2);
                match r.status {
                    Some(WcStatus::Success) => {
                        assert!(r.intact, "seed {seed} {name}: {:?}", r.flow);
                        assert!(!(involved && late), "seed {seed} {name}: {:?}", r.flow);
                    }
                    Some(WcStatus::RetryExcErr) => {
                        assert!(r.flow.dst == 0, "seed {seed} {name}: {:?}", r.flow);
                    }
                    None => assert!(r.flow.src == 0, "seed {seed} {name}: {:?}", r.flow),
                    other => panic!("seed {seed} {name}: {other:?} for {:?}", r.flow),
                }
            }
        }
        assert_eq!(f.flows_failed, b.flows_failed, "seed {seed}");
        assert!(f.flows_failed > 0, "seed {seed}");
        // Each failed flow gives up within a local ACK timeout (4.2 ms) of its twin.
        for (x, y) in fixed.records.iter().zip(&backed.records) {
            if let (Some(WcStatus::RetryExcErr), Some(a), Some(b)) = (x.status, x.end, y.end) {
                let d = a.as_picos().abs_diff(b.as_picos());
                assert!(
                    d < 16_777_216_000,
                    "seed {seed}: {:?} {a:?} vs {b:?}",
                    x.flow
                );
            }
        }
    }
}

/// experiments/n9-config-drift.toml: the configuration monitor finds each drift at its first
/// check after it (every 0.5 ms) and sees it set right at the first check after the repair;
/// nothing in the run as intended. A NIC that sends its RDMA data in a lossy priority has its
/// packets dropped and its flows slowed over 2× against the same flows as intended, which
/// lose nothing.
#[test]
fn the_configuration_monitor_finds_each_drift_and_its_repair() {
    let text = std::fs::read_to_string(experiments().join("n9-config-drift.toml")).expect("read");
    for seed in SEEDS {
        let cfgs = configs(&text, &experiments(), &[], seed);
        let runs: Vec<(String, RunOutput)> = common::run_all_full(&cfgs)
            .into_iter()
            .zip(&cfgs)
            .map(|(o, c)| (c.name.clone(), o))
            .collect();
        let intended = named(&runs, "as intended");
        let drifted = named(&runs, "drifted");
        assert!(intended.summary.safety.config_findings.is_empty());
        assert_eq!(intended.summary.drops, 0, "seed {seed}: PFC loses nothing");
        let f = &drifted.summary.safety.config_findings;
        let find = |key: &str| {
            f.iter()
                .find(|x| x.key == key)
                .unwrap_or_else(|| panic!("seed {seed}: no {key} finding in {f:#?}"))
        };
        assert_eq!(f.len(), 3, "seed {seed}: {f:#?}");
        let pfc = find("pfc");
        assert_eq!((pfc.port, pfc.running.as_str()), (Some(0), "off"));
        assert_eq!((pfc.found_ms, pfc.cleared_ms), (2.5, Some(6.5)), "{pfc:?}");
        let ecn = find("ecn");
        assert_eq!(
            (ecn.running.as_str(), ecn.found_ms, ecn.cleared_ms),
            ("off", 2.5, None)
        );
        let dscp = find("dscp");
        assert_eq!((dscp.node.as_str(), dscp.running.as_str()), ("h10", "[0]"));
        assert_eq!(dscp.cleared_ms, Some(6.5));
        // Host 10's flows while its NIC sent DSCP 0, in both runs.
        let slowdown = |o: &RunOutput| {
            let v: Vec<f64> = o
                .records
                .iter()
                .filter(|r| r.flow.src == 10)
                .filter(|r| (2.2..6.2).contains(&(r.flow.start.as_picos() as f64 / 1e9)))
                .filter_map(|r| r.slowdown())
                .collect();
            assert!(v.len() > 20, "seed {seed}: {} flows", v.len());
            v.iter().sum::<f64>() / v.len() as f64
        };
        let (before, after) = (slowdown(intended), slowdown(drifted));
        assert!(
            after > 2.0 * before,
            "seed {seed}: {before} as intended, {after} drifted"
        );
        assert!(drifted.summary.drops > 0, "seed {seed}");
        assert_eq!(drifted.summary.flows_completed, drifted.summary.flows);
    }
}

/// experiments/e11-deadlock-trigger.toml: Figure 4 with the seed's own trigger, an incast at
/// S5 (1–4 senders, three buffer sizes): the cycle's pauses come and go as S5's port drains,
/// no deadlock forms, the incast completes and only the flows to the dead servers fail.
#[test]
fn the_seeds_own_trigger_makes_no_deadlock_in_this_model() {
    let text =
        std::fs::read_to_string(experiments().join("e11-deadlock-trigger.toml")).expect("read");
    let cfgs = configs(&text, &experiments(), &[], 1);
    assert_eq!(cfgs.len(), 12);
    for s in common::run_all(&cfgs) {
        assert!(!s.deadlocked, "{}: {:?}", s.name, s.deadlock_cycle);
        assert!(s.pause_frames > 1000, "{}: the cycle's ports pause", s.name);
        // The purple and blue flows address dead servers; every incast flow completes.
        assert_eq!((s.flows_failed, s.flows_unfinished), (2, 0), "{}", s.name);
        assert_eq!(s.flows_completed, s.flows - 2, "{}", s.name);
    }
}
