//! Behaviour of the simulator at small scale: determinism, data integrity through loss, the
//! PFC and BDP-FC invariants, fairness of the switch, and the models' basic physics.

use std::path::Path;

use irn_sim::config::{
    load_experiment, CcKind, EcnMode, FlowOp, Recovery, SimConfig, SwitchModel, TopologyKind,
    Trust, WorkloadKind,
};
use irn_sim::{run, RunOutput};

fn small(recovery: Recovery, pfc: bool) -> SimConfig {
    let mut c = SimConfig::default();
    c.topology.k = 4;
    c.transport.recovery = recovery;
    c.network.pfc = pfc;
    c.workload.duration_us = 300.0;
    c.workload.load = 0.8;
    c
}

fn go(c: &SimConfig) -> RunOutput {
    run(c, |_| {}).expect("valid configuration")
}

fn all_done(o: &RunOutput) {
    let s = &o.summary;
    assert!(s.flows > 20, "too few flows to mean anything: {}", s.flows);
    assert_eq!(
        (
            s.flows_completed,
            s.flows_failed,
            s.flows_unfinished,
            s.flows_corrupted
        ),
        (s.flows, 0, 0, 0),
        "{}",
        s.name
    );
}

#[test]
fn same_seed_same_everything_other_seed_other_traffic() {
    let c = small(Recovery::Irn, false);
    let a = without_wall(go(&c));
    let b = without_wall(go(&c));
    assert_eq!(a.records, b.records);
    assert_eq!(a.summary, b.summary);
    let mut c2 = c.clone();
    c2.seed = 2;
    assert_ne!(go(&c2).records, a.records);
}

/// Output with the wall time (the one thing allowed to differ) zeroed.
fn without_wall(mut o: RunOutput) -> RunOutput {
    o.summary.wall_s = 0.0;
    o
}

/// A run on several threads (the network cut into partitions that advance in windows) gives
/// exactly what one thread gives: records, counters, per-port pauses and drops — across
/// everything that crosses a partition's edge (frames, pause frames, flow teardowns) and every
/// per-node random stream (loss, RED), on the topologies the partitioner cuts differently.
#[test]
fn every_thread_count_gives_the_same_run() {
    let mut cases = Vec::new();
    // Lossy IRN with random loss and RED marking, through a shared-buffer switch, under
    // DCQCN (CNPs cross partitions; its timers are jittered from per-queue-pair seeds).
    let mut c = small(Recovery::Irn, false);
    c.network.link_loss = 0.002;
    c.switch.model = SwitchModel::SharedBuffer;
    c.switch.ecn = EcnMode::Red;
    c.transport.cc = CcKind::Dcqcn;
    cases.push(c);
    // RoCE with PFC under TIMELY: pauses cross partitions and spread.
    let mut c = small(Recovery::Roce, true);
    c.workload.load = 0.9;
    c.transport.cc = CcKind::Timely;
    cases.push(c);
    // Reads and a slow receiving pipeline (NIC pauses), on a leaf-spine.
    let mut c = small(Recovery::Irn, true);
    c.transport.op = FlowOp::Read;
    c.nic.rx_gbps = Some(30.0);
    c.topology.kind = TopologyKind::LeafSpine;
    cases.push(c);
    // An incast of Sends into one host, on a dumbbell.
    let mut c = small(Recovery::IrnGoBackN, false);
    c.transport.op = FlowOp::Send;
    c.topology.kind = TopologyKind::Dumbbell;
    c.workload.kind = WorkloadKind::Incast;
    c.workload.load = 0.0;
    c.workload.incast_senders = 6;
    c.workload.incast_bytes = 3_000_000;
    cases.push(c);
    for c in cases {
        let one = without_wall(go(&c));
        assert!(one.summary.events > 10_000, "{:?}", one.summary);
        for threads in [2, 3, 4] {
            let mut ct = c.clone();
            ct.threads = threads;
            let many = without_wall(go(&ct));
            let first = one
                .records
                .iter()
                .zip(&many.records)
                .position(|(a, b)| a != b);
            assert_eq!(
                first.map(|i| (&one.records[i], &many.records[i])),
                None,
                "{threads} threads, {:?}: the first record that differs",
                c.topology.kind
            );
            assert_eq!(one.records.len(), many.records.len());
            assert_eq!(one.summary, many.summary, "{threads} threads");
        }
    }
}

#[test]
fn every_byte_arrives_through_heavy_loss_in_every_recovery_mode() {
    for (recovery, pfc) in [
        (Recovery::Irn, false),
        (Recovery::IrnGoBackN, false),
        (Recovery::IrnNoBdpFc, false),
        (Recovery::IrnNoSack, false),
        (Recovery::Roce, false),
        (Recovery::Roce, true),
    ] {
        let mut c = small(recovery, pfc);
        c.transport.payload = true;
        c.network.link_loss = 0.01;
        c.workload.duration_us = 200.0;
        c.workload.load = 0.5;
        if pfc {
            // RoCE over PFC keeps no timer by default; random loss needs one.
            c.transport.roce_timeout_with_pfc = true;
        }
        let o = go(&c);
        all_done(&o);
        assert!(
            o.summary.drops > 0 && o.summary.retransmissions > 0,
            "{recovery:?}: loss was exercised"
        );
    }
}

#[test]
fn send_and_read_flows_deliver_their_bytes_too() {
    for op in [FlowOp::Send, FlowOp::Read] {
        let mut c = small(Recovery::Irn, false);
        c.transport.payload = true;
        c.transport.op = op;
        c.network.link_loss = 0.005;
        c.workload.duration_us = 100.0;
        let o = go(&c);
        all_done(&o);
    }
}

#[test]
fn pfc_never_drops_and_its_headroom_suffices() {
    for model in [SwitchModel::InputQueued, SwitchModel::SharedBuffer] {
        for recovery in [Recovery::Irn, Recovery::Roce] {
            let mut c = small(recovery, true);
            c.switch.model = model;
            if model == SwitchModel::SharedBuffer {
                c.switch.buffer_bytes = 1_000_000;
            }
            c.workload.load = 0.9;
            c.workload.duration_us = 400.0;
            let o = go(&c);
            all_done(&o);
            let s = &o.summary;
            assert_eq!(
                (s.drops, s.headroom_overflow),
                (0, 0),
                "{model:?} {recovery:?}"
            );
            if recovery == Recovery::Roce {
                assert!(s.pause_frames > 0, "{model:?}: this load must congest RoCE");
                assert_eq!(
                    (s.timeouts, s.retransmissions),
                    (0, 0),
                    "RoCE over PFC keeps no timer"
                );
            }
        }
    }
}

/// A pause lasts its quanta and a congested ingress refreshes it before it runs out
/// (802.1Qbb): with short pauses (100 quanta, 1.28 µs at 40 Gb/s) refreshed at half their
/// time, PFC still loses nothing — at the cost of many more pause frames than 65 535-quanta
/// pauses need; refreshed only after they lapse (`pause_refresh` 3), the upstream sends into
/// a full buffer between refreshes and lossless frames overrun the headroom.
#[test]
fn a_pause_refreshed_before_it_runs_out_holds_and_one_that_lapses_overruns_the_buffer() {
    for seed in [1, 2, 3] {
        let mut c = small(Recovery::Roce, true);
        c.seed = seed;
        c.workload.load = 0.9;
        c.workload.duration_us = 400.0;
        let long = go(&c);
        all_done(&long);
        c.network.pause_quanta = 100;
        let short = go(&c);
        all_done(&short);
        c.network.pause_refresh = 3.0;
        let lapsing = go(&c);
        let (l, s, x) = (&long.summary, &short.summary, &lapsing.summary);
        assert_eq!((l.drops, l.headroom_overflow), (0, 0), "seed {seed}");
        assert_eq!((s.drops, s.headroom_overflow), (0, 0), "seed {seed}");
        assert!(
            s.pause_frames > 3 * l.pause_frames,
            "seed {seed}: {} vs {} pause frames",
            s.pause_frames,
            l.pause_frames
        );
        assert!(
            x.headroom_overflow > 0,
            "seed {seed}: a lapsing pause must overrun the buffer"
        );
    }
}

/// Seed 001 §3 (experiments/n2-routed-pcp.toml at k = 4): with every switch routing, a frame
/// loses its VLAN tag past the first hop, so PFC that classifies by PCP sees the RDMA traffic as
/// priority 0 — lossy — and the fabric drops it; PCP-based PFC on a bridged fabric, and
/// DSCP-based PFC on a routed one, lose nothing.
#[test]
fn pcp_based_pfc_breaks_across_routed_hops_and_dscp_based_pfc_does_not() {
    for seed in [1, 2, 3] {
        let mut c = small(Recovery::Roce, true);
        c.seed = seed;
        c.workload.load = 0.9;
        c.workload.duration_us = 400.0;
        c.network.vlan = true;
        c.transport.roce_timeout_with_pfc = true;
        c.transport.roce_rto_us = 1000.0;
        let mut run_as = |trust: Trust, routed: bool| {
            c.network.trust = trust;
            c.network.routed_tiers = if routed { vec![1, 2, 3] } else { Vec::new() };
            go(&c).summary
        };
        let dscp_routed = run_as(Trust::Dscp, true);
        let pcp_bridged = run_as(Trust::Pcp, false);
        let pcp_routed = run_as(Trust::Pcp, true);
        for s in [&dscp_routed, &pcp_bridged] {
            assert_eq!((s.drops, s.headroom_overflow), (0, 0), "seed {seed}");
            assert_eq!(s.flows_completed, s.flows, "seed {seed}");
            assert!(s.pause_frames > 0, "seed {seed}: this load must pause");
        }
        assert!(pcp_routed.drops > 0, "seed {seed}: lossy past the ToR");
        assert!(pcp_routed.retransmissions > 0, "seed {seed}");
    }
}

#[test]
fn a_buffer_below_its_pfc_headroom_is_refused() {
    // 40 Gb/s × 2 µs each way is 20 000 B of round trip, plus two 1 118-byte frames: a 20 KB
    // buffer cannot pause in time. Without PFC, or with the headroom given, it runs.
    let mut c = small(Recovery::Roce, true);
    c.switch.buffer_bytes = 20_000;
    let e = run(&c, |_| {}).expect_err("refused").to_string();
    assert!(
        e.contains("switch.buffer_bytes") && e.contains("22236"),
        "{e}"
    );
    c.network.pfc = false;
    c.workload.duration_us = 50.0;
    assert!(run(&c, |_| {}).is_ok());
    c.network.pfc = true;
    c.switch.pfc_headroom_bytes = Some(4_000);
    assert!(run(&c, |_| {}).is_ok());
}

/// Each switch port's PFC threshold is the buffer less its own link's headroom: on seed 001's
/// Figure 4 with S5 behind a 100 µs link (e11-pingmesh), T1's port to S5 needs a megabyte of
/// headroom (its 240 KB buffer pauses at one frame), every other port 22 236 B (40 Gb/s × 1 µs
/// each way plus two frames) — not the network's worst link's for every port.
#[test]
fn pfc_headroom_is_each_ports_own_links() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let mut c = SimConfig::default();
    c.topology.kind = irn_sim::config::TopologyKind::File;
    c.topology.file = Some("e11/fig4-slow-s5.topo".into());
    c.network.pfc = true;
    let topo = irn_sim::topology::Topology::build(&c.topology, &dir).expect("topology");
    let frame = 1118;
    let short = 240_000 - (2 * 40_000 * 1_000 / 8 / 1_000 + 2 * frame);
    let sim =
        irn_sim::parallel::Simulation::<irn_sim::net::SharedChecked>::new(c, topo, Vec::new());
    let t1 = 7; // T1: S3, S4, S5, La, Lb, S6 on ports 0-5
    assert_eq!(sim.port_xoff(t1, 2), Some(frame), "the 100 µs link");
    for p in [0, 1, 3, 4, 5] {
        assert_eq!(sim.port_xoff(t1, p), Some(short), "T1 port {p}");
    }
    assert_eq!(sim.port_xoff(6, 0), Some(short), "T0 port 0");
    assert_eq!(sim.port_xoff(0, 0), None, "a host");
}

/// With PFC the control class is lossless too (`network.control_lossless`, the default: a
/// RoCE NIC's ACKs travel in the queue pair's lossless class): on E0's network with 120 KB
/// buffers (seed 1) a lossy control class loses ACKs, and RoCE, which keeps no timer under
/// PFC, leaves flows unfinished — reported as such; lossless, nothing is dropped and every
/// flow finishes, with about the same pauses.
#[test]
fn a_lossless_fabric_drops_no_ack() {
    let mut c = SimConfig::default();
    c.topology.k = 6;
    c.switch.buffer_bytes = 120_000;
    c.transport.recovery = Recovery::Roce;
    c.network.pfc = true;
    c.workload.duration_us = 8000.0;
    let lossless = go(&c);
    all_done(&lossless);
    assert_eq!(lossless.summary.drops, 0);
    c.network.control_lossless = false;
    let lossy = go(&c).summary;
    assert!(
        lossy.drops > 0 && lossy.flows_unfinished > 0,
        "{} drops, {} unfinished",
        lossy.drops,
        lossy.flows_unfinished
    );
    assert_eq!(lossy.flows_failed, 0);
    // The data still pauses about as often: lossy ACKs share the inputs' pool below the
    // threshold, but their bytes are few.
    let ratio = lossy.pause_frames as f64 / lossless.summary.pause_frames as f64;
    assert!((ratio - 1.0).abs() < 0.05, "{ratio}");
}

/// Priority classes are what the switches read from each frame (SPEC N2): the DSCP through a
/// many-to-one map, or the VLAN PCP when they trust it. PFC protects exactly the lossless
/// priorities, whichever DSCP or PCP puts a packet there.
#[test]
fn pfc_protects_the_priority_each_frame_maps_to() {
    let congested = |f: &dyn Fn(&mut SimConfig)| {
        let mut c = small(Recovery::Roce, true);
        c.workload.load = 0.9;
        c.workload.duration_us = 400.0;
        f(&mut c);
        go(&c).summary
    };
    // The usual map: data DSCP 26 is priority 3, lossless by default. Paused, never dropped.
    let base = congested(&|_| {});
    assert!(base.pause_frames > 0 && base.drops == 0, "{base:?}");
    // A many-to-one map that sends DSCP 26 (with 24..32) to priority 1, not lossless: the same
    // traffic now drops and nothing pauses.
    let mut map: Vec<u8> = (0..64).map(|d| d >> 3).collect();
    for m in &mut map[24..32] {
        *m = 1;
    }
    let lossy = congested(&|c| c.network.dscp_to_priority = Some(map.clone()));
    assert!(lossy.drops > 0 && lossy.pause_frames == 0, "{lossy:?}");
    // List priority 1 as lossless as well (any subset may be): lossless again.
    let two = congested(&|c| {
        c.network.dscp_to_priority = Some(map.clone());
        c.network.lossless_priorities = vec![1, 3];
    });
    assert!(two.pause_frames > 0 && two.drops == 0, "{two:?}");
    // Tagged frames carry the priority as PCP; switches trusting it classify the same way,
    // and the tag's 4 bytes are on the wire.
    let pcp = congested(&|c| {
        c.network.vlan = true;
        c.network.trust = irn_sim::config::Trust::Pcp;
    });
    assert!(pcp.pause_frames > 0 && pcp.drops == 0, "{pcp:?}");
    // Trusting the PCP of frames whose priority is lossy drops, whatever the DSCP says.
    let pcp_lossy = congested(&|c| {
        c.network.vlan = true;
        c.network.trust = irn_sim::config::Trust::Pcp;
        c.network.dscp_to_priority = Some(map.clone());
    });
    assert!(
        pcp_lossy.drops > 0 && pcp_lossy.pause_frames == 0,
        "{pcp_lossy:?}"
    );
}

#[test]
fn bdp_fc_caps_packets_in_flight() {
    let mut c = small(Recovery::Irn, false);
    c.workload.sizes = "websearch".into();
    c.workload.duration_us = 1000.0;
    let o = go(&c);
    all_done(&o);
    let cap = o.summary.bdp_cap.expect("IRN has a cap");
    assert!(
        o.summary.max_in_flight <= cap,
        "{} > {cap}",
        o.summary.max_in_flight
    );
    assert!(
        o.summary.max_in_flight >= cap / 2,
        "large flows fill the window"
    );
    // Without BDP-FC the window is not capped.
    let mut c = c.clone();
    c.transport.recovery = Recovery::IrnNoBdpFc;
    let o = go(&c);
    assert!(o.summary.bdp_cap.is_none());
    assert!(o.summary.max_in_flight > cap, "{}", o.summary.max_in_flight);
}

/// One flow alone in the network finishes in its ideal time (the slowdown's denominator is
/// the model's own physics, not a formula that disagrees with it).
#[test]
fn a_lone_flow_takes_its_ideal_time() {
    for size in [1u64, 1000, 1024, 1025, 100_000, 3_000_000] {
        let dir = std::env::temp_dir().join(format!("irn-sim-lone-{size}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(
            dir.join("flows.csv"),
            format!("start_us,src,dst,bytes\n0,0,15,{size}\n"),
        )
        .expect("write");
        let text = "[topology]\nk = 4\n[workload]\nkind = \"flows\"\nflows_file = \"flows.csv\"\n[transport]\nrecovery = \"roce\"\n";
        let e = load_experiment(text, "t.toml", &dir, &[], None).expect("valid");
        let o = go(&e.runs[0]);
        let r = o.records[0];
        let sd = r.slowdown().expect("done");
        assert!(
            (1.0..1.02).contains(&sd),
            "{size} B: slowdown {sd}, fct {:?} ideal {:?}",
            r.fct(),
            r.ideal
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Four senders into one receiver through an input-queued switch: round-robin among the
/// inputs shares the receiver's link fairly and keeps it busy. RoCE overflows the input
/// buffers (drops without PFC, pauses with it); IRN's BDP-FC keeps each sender's share below
/// the buffer, so IRN neither drops nor pauses (IRN §3.2).
#[test]
fn incast_shares_the_bottleneck_fairly() {
    let mut c = SimConfig::default();
    c.topology.kind = TopologyKind::LeafSpine;
    c.topology.leaves = 1;
    c.topology.spines = 1;
    c.topology.hosts_per_leaf = 5;
    c.workload.kind = WorkloadKind::Incast;
    c.workload.load = 0.0;
    c.workload.incast_senders = 4;
    c.workload.incast_bytes = 4_000_000;
    for recovery in [Recovery::Roce, Recovery::Irn] {
        for pfc in [false, true] {
            c.transport.recovery = recovery;
            c.network.pfc = pfc;
            let o = go(&c);
            let what = format!("{recovery:?} pfc {pfc}");
            assert_eq!(o.summary.flows_completed, 4, "{what}");
            let fcts: Vec<f64> = o
                .records
                .iter()
                .map(|r| r.fct().expect("done").as_micros_f64())
                .collect();
            let (min, max) = fcts
                .iter()
                .fold((f64::MAX, 0.0f64), |(a, b), &f| (a.min(f), b.max(f)));
            let rct = o.summary.incast.as_ref().expect("incast").max_rct_us;
            let s = &o.summary;
            match (recovery, pfc) {
                (Recovery::Roce, false) => assert!(s.drops > 0, "{what}"),
                (Recovery::Roce, true) => {
                    assert!(s.drops == 0 && s.pause_frames > 0, "{what}");
                    assert!(max / min < 1.1, "{what}: {fcts:?}");
                    // 4 MB through one 40 Gb/s link takes ≥ 800 µs.
                    assert!((800.0..900.0).contains(&rct), "{what}: {rct}");
                }
                _ => {
                    assert_eq!((s.drops, s.pause_frames), (0, 0), "{what}");
                    assert!(max / min < 1.1, "{what}: {fcts:?}");
                    assert!((800.0..900.0).contains(&rct), "{what}: {rct}");
                }
            }
        }
    }
}

/// PFC spreads congestion (SPEC N3): with PFC, an incast pauses the senders' NICs, and pauses
/// reach switches that the incast does not even cross the bottleneck of.
#[test]
fn pauses_propagate_upstream() {
    let mut c = SimConfig::default();
    c.topology.k = 4;
    c.network.pfc = true;
    c.transport.recovery = Recovery::Roce;
    c.workload.kind = WorkloadKind::Incast;
    c.workload.load = 0.0;
    c.workload.incast_senders = 12;
    c.workload.incast_bytes = 6_000_000;
    let o = go(&c);
    assert_eq!(o.summary.flows_completed, 12);
    let hosts = 16;
    let nic_paused = o
        .summary
        .ports
        .iter()
        .filter(|p| p.node < hosts && p.pause_received > 0)
        .count();
    let switches_paused = o
        .summary
        .ports
        .iter()
        .filter(|p| p.node >= hosts && p.pause_received > 0)
        .count();
    assert!(nic_paused > 0, "senders' NICs are paused");
    assert!(switches_paused > 0, "switch-to-switch pauses");
    assert_eq!(o.summary.drops, 0);
}

/// A receiver whose NIC processes 20 Gb/s behind a 40 Gb/s link (SPEC N6's slow receiver):
/// with PFC its NIC pauses its switch and nothing is lost; without, its receive buffer
/// overflows and the frames are dropped at the NIC — unless BDP-FC keeps less in flight than
/// the buffer holds (IRN with the default 256 KB buffer). Either way the flow takes at least
/// its bytes at the pipeline's rate.
#[test]
fn a_slow_receiver_pauses_its_switch_or_drops() {
    let dir = std::env::temp_dir().join(format!("irn-sim-slow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("one.csv"),
        "start_us,src,dst,bytes\n0,0,15,2000000\n",
    )
    .expect("write");
    let text = "[topology]\nk = 4\n[workload]\nkind = \"flows\"\nflows_file = \"one.csv\"\n";
    let fct = |extra: &[&str]| {
        let sets: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let e = load_experiment(text, "t.toml", &dir, &sets, None).expect("valid");
        let o = go(&e.runs[0]);
        assert_eq!(o.summary.flows_completed, 1, "{extra:?}");
        assert_eq!(o.summary.flows_corrupted, 0, "{extra:?}");
        let receiver = o.summary.ports.iter().find(|p| p.node == 15).cloned();
        let fct = o.records[0].fct().expect("done").as_micros_f64();
        (fct, receiver, o.summary)
    };
    // At the link's rate: 2 MB in 400 µs and a little.
    let (fast, nic, s) = fct(&["transport.recovery=\"roce\"", "network.pfc=true"]);
    assert!((400.0..450.0).contains(&fast), "{fast}");
    assert!(nic.is_none() && s.pause_frames == 0);
    // Slow, lossless: the NIC pauses its switch; nothing is dropped anywhere.
    let (slow, nic, s) = fct(&[
        "transport.recovery=\"roce\"",
        "network.pfc=true",
        "nic.rx_gbps=20",
    ]);
    let nic = nic.expect("the receiver's NIC reports its pauses");
    assert!(nic.pause_sent > 0 && nic.drops == 0, "{nic:?}");
    assert_eq!(s.drops, 0);
    assert!((800.0..900.0).contains(&slow), "{slow}");
    // Slow, lossy: RoCE overflows the receive buffer, drops there, and recovers by go-back-N.
    let (roce, nic, s) = fct(&["transport.recovery=\"roce\"", "nic.rx_gbps=20"]);
    let nic = nic.expect("the receiver's NIC reports its drops");
    assert!(
        nic.drops > 0 && nic.pause_sent == 0 && s.pause_frames == 0,
        "{nic:?}"
    );
    assert!(roce > slow, "{roce} vs {slow}");
    // IRN keeps at most the BDP cap (≈ 117 KB) in flight: the 256 KB buffer never fills...
    let (irn, nic, _) = fct(&["nic.rx_gbps=20"]);
    assert!(nic.is_none(), "{nic:?}");
    assert!((800.0..900.0).contains(&irn), "{irn}");
    // ... a 32 KB one does (the cap less the path's 60 KB at 20 Gb/s queues there), and IRN
    // recovers the drops selectively.
    let (irn_small, nic, s) = fct(&["nic.rx_gbps=20", "nic.rx_buffer_bytes=32000"]);
    let nic = nic.expect("drops at the NIC");
    assert!(nic.drops > 0 && s.retransmissions > 0, "{nic:?}");
    assert!(
        irn_small >= 800.0 && irn_small < roce,
        "{irn_small} vs RoCE {roce}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under every congestion controller, with and without PFC, every flow of a loaded network
/// finishes intact. (A paced queue pair whose pacing slot ended while it waited for its NIC
/// left a deadline in the past; the simulator used to lose that wake-up and the flow
/// stalled.)
#[test]
fn every_controller_finishes_every_flow() {
    for (cc, ecn) in [
        (CcKind::Dcqcn, EcnMode::Red),
        (CcKind::Timely, EcnMode::Off),
        (CcKind::Dctcp, EcnMode::Threshold),
        (CcKind::Aimd, EcnMode::Red),
    ] {
        for (rec, pfc) in [(Recovery::Irn, false), (Recovery::Roce, true)] {
            let mut c = small(rec, pfc);
            c.workload.duration_us = 1000.0;
            // TIMELY recovers from a deep cut by δ = 10 Mb/s per 16 KB acknowledged, which at
            // a few hundred Mb/s is once per half millisecond: a cut 1.5 MB flow can take
            // 100 ms (docs/RESULTS.md, E4). Slow is not stuck: give them the time.
            c.workload.drain_us = 300_000.0;
            if !pfc {
                // Losses make flows depend on their retransmission timers.
                c.network.link_loss = 0.01;
            }
            c.transport.cc = cc;
            c.switch.ecn = ecn;
            c.name = format!("{cc:?} {rec:?} pfc={pfc}");
            let o = go(&c);
            all_done(&o);
            assert_eq!(o.summary.cc, cc.name());
        }
    }
}

/// Each congestion controller, in a 15-to-1 incast on a dumbbell without PFC, receives its
/// signal (CNPs for DCQCN, ECN echoes for DCTCP and AIMD, a rising RTT for TIMELY: the 240 KB
/// buffer holds 48 µs of queue, above its T_low) and slows its senders: at least 30 % fewer
/// drops than without congestion control, every byte still delivered.
#[test]
fn congestion_control_cuts_incast_drops() {
    let incast = |cc: CcKind, ecn: EcnMode| {
        let mut c = small(Recovery::Irn, false);
        c.topology.kind = TopologyKind::Dumbbell;
        c.topology.hosts_per_side = 16;
        c.workload.kind = WorkloadKind::Incast;
        c.workload.load = 0.0;
        c.workload.incast_senders = 15;
        c.workload.incast_bytes = 6_000_000;
        c.transport.cc = cc;
        c.switch.ecn = ecn;
        let o = go(&c);
        let s = &o.summary;
        assert_eq!(
            (s.flows_completed, s.flows_corrupted),
            (s.flows, 0),
            "{cc:?}"
        );
        o.summary
    };
    let none = incast(CcKind::None, EcnMode::Red);
    assert!(
        none.drops > 100,
        "the incast must overflow the buffer: {none:?}"
    );
    assert_eq!(none.cc, "none");
    for (cc, ecn) in [
        (CcKind::Dcqcn, EcnMode::Red),
        (CcKind::Dctcp, EcnMode::Threshold),
        (CcKind::Aimd, EcnMode::Red),
        (CcKind::Timely, EcnMode::Off),
    ] {
        let s = incast(cc, ecn);
        assert_eq!(s.cc, cc.name());
        // Measured (seed 1): DCQCN and TIMELY 103, DCTCP 76, AIMD 85 against 187.
        assert!(
            s.drops * 10 < none.drops * 7,
            "{cc:?}: {} drops against {} without congestion control",
            s.drops,
            none.drops
        );
        if cc == CcKind::Dcqcn {
            assert!(s.cnps > 0 && s.ecn_marked >= s.cnps, "{s:?}");
        } else {
            assert_eq!(s.cnps, 0, "{cc:?}: only DCQCN's receivers send CNPs");
        }
    }
}

/// Every experiment shipped in `experiments/` loads and validates (and names its runs).
#[test]
fn every_shipped_experiment_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("experiments/") {
        let p = entry.expect("directory entry").path();
        // The evaluation (every experiment and claim `irn reproduce` runs) is no experiment:
        // tests/reproduce.rs reads it.
        if p.extension().is_some_and(|e| e == "toml") && !p.ends_with("evaluation.toml") {
            let text = std::fs::read_to_string(&p).expect("readable");
            if irn_sim::drp::DrpExperiment::is_kind(&text) {
                // E12's point-to-point experiments have a schema of their own.
                let e =
                    irn_sim::drp::DrpExperiment::load(&text, &p.display().to_string(), &[], None)
                        .unwrap_or_else(|e| panic!("{e}"));
                assert!(!e.series.is_empty(), "{}", p.display());
                checked += 1;
                continue;
            }
            let e = load_experiment(&text, &p.display().to_string(), &dir, &[], None)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!e.runs.is_empty(), "{}", p.display());
            checked += 1;
        }
    }
    assert!(checked >= 6, "{checked} experiments");
}

#[test]
fn config_errors_name_the_key_and_the_file() {
    let e = load_experiment(
        "[switch]\nbuffer = 1\n",
        "exp.toml",
        Path::new("."),
        &[],
        None,
    )
    .expect_err("typo");
    let m = e.to_string();
    assert!(m.contains("exp.toml") && m.contains("buffer"), "{m}");
    for (text, key) in [
        ("[nic]\nrx_gbps = 0\n", "nic.rx_gbps"),
        ("[nic]\nrx_buffer_bytes = 10\n", "nic.rx_buffer_bytes"),
        ("[nic]\nrx_gps = 10\n", "rx_gps"),
        ("threads = 0\n", "threads"),
        // DCQCN and DCTCP react to ECN marks: without marking switches, an error.
        ("[transport]\ncc = \"dcqcn\"\n", "switch.ecn"),
        ("[transport]\ncc = \"dctcp\"\n", "switch.ecn"),
        ("[cc.dcqcn]\ng = 2\n", "cc.dcqcn.g"),
        ("[cc.timely]\nt_low_us = 600\n", "cc.timely.t_low_us"),
        ("[cc.timely]\nbeta2 = 1\n", "beta2"),
        (
            "[cc.window]\nmin_window_bytes = 0\n",
            "cc.window.min_window_bytes",
        ),
        // Passes a naive check, but is below the effective minimum of one MTU.
        (
            "[cc.window]\nmax_window_bytes = 512\n",
            "cc.window.max_window_bytes",
        ),
        (
            "[transport]\ncc = \"timely\"\n[cc.timely]\nmin_rate_mbps = 50000\n",
            "cc.timely.min_rate_mbps",
        ),
        ("[cc.dcqcn]\nai_mbps = 1e-9\n", "cc.dcqcn.ai_mbps"),
        (
            "[cc.dcqcn]\nmodel = \"mlx\"\ndecrease_interval_us = 0\n",
            "cc.dcqcn.decrease_interval_us",
        ),
        ("[cc.dcqcn]\nmodel = \"ns3\"\n", "model"),
        (
            "[transport]\nrecovery = \"roce\"\nrto_adaptive = true\n",
            "transport.rto_adaptive",
        ),
        (
            "[transport]\nrto_adaptive = true\ntcp_max_rto_us = 100\n",
            "transport.tcp_max_rto_us",
        ),
        (
            "[transport]\ncc = \"aimd\"\nrecovery = \"roce-go-back-0\"\n",
            "transport.cc",
        ),
        (
            "[transport]\ncc = \"timely\"\nop = \"read\"\n",
            "transport.cc",
        ),
        // Positive, but zero once in picoseconds: the queue pair would refuse it.
        ("[transport]\nrto_low_us = 1e-9\n", "transport.rto_low_us"),
        ("[transport]\nroce_rto_us = 1e-9\n", "transport.roce_rto_us"),
        // The receive bitmaps live within the PSN window.
        ("[transport]\nbdp_cap = 9000000\n", "transport.bdp_cap"),
        ("[transport]\nrecovery = \"go-back-7\"\n", "go-back-7"),
        // A PCP-trusting switch needs tagged frames.
        ("[network]\ntrust = \"pcp\"\n", "network.trust"),
    ] {
        let e = load_experiment(text, "exp.toml", Path::new("."), &[], None).expect_err(key);
        let m = e.to_string();
        assert!(m.contains("exp.toml") && m.contains(key), "{m}");
    }
}

/// A measurement window (`workload.measure_from_us` / `measure_until_us`) changes what the
/// statistics cover — exactly the flows that start inside it, recomputed here from the
/// per-flow records — and nothing that is simulated: the records and flow counts are those
/// of the unwindowed run.
#[test]
fn a_measurement_window_covers_exactly_the_flows_starting_in_it() {
    let whole = go(&small(Recovery::Irn, false));
    let mut c = small(Recovery::Irn, false);
    c.workload.measure_from_us = 100.0;
    c.workload.measure_until_us = Some(200.0);
    let windowed = go(&c);
    assert_eq!(windowed.records, whole.records, "the same simulation");
    assert_eq!(windowed.summary.flows, whole.summary.flows);
    let inside: Vec<f64> = whole
        .records
        .iter()
        .filter(|r| {
            let t = r.flow.start.as_picos() as f64 / 1e6;
            (100.0..200.0).contains(&t)
        })
        .filter_map(|r| r.fct().map(|f| f.as_micros_f64()))
        .collect();
    assert!(inside.len() > 10 && inside.len() < whole.records.len() / 2);
    let mean = inside.iter().sum::<f64>() / inside.len() as f64;
    assert!((windowed.summary.all.avg_fct_us - mean).abs() < 1e-6 * mean);
    assert_ne!(
        windowed.summary.all.avg_fct_us,
        whole.summary.all.avg_fct_us
    );
}

/// `network.ecmp_seed` moves the same flows onto other equal-cost paths: the workload is the
/// run's seed's, the FCTs are not; absent, it is the run's seed.
#[test]
fn the_ecmp_seed_moves_flows_to_other_paths_and_keeps_the_workload() {
    let base = small(Recovery::Roce, true);
    let a = without_wall(go(&base));
    let mut same = base.clone();
    same.network.ecmp_seed = Some(base.seed);
    assert_eq!(
        format!("{:?}", without_wall(go(&same)).records),
        format!("{:?}", a.records)
    );
    let mut other = base.clone();
    other.network.ecmp_seed = Some(base.seed + 100);
    let b = without_wall(go(&other));
    let flows = |o: &RunOutput| -> Vec<_> {
        o.records
            .iter()
            .map(|r| (r.flow.src, r.flow.dst, r.flow.size, r.flow.start))
            .collect()
    };
    assert_eq!(flows(&a), flows(&b), "one workload");
    let fcts = |o: &RunOutput| -> Vec<_> { o.records.iter().map(|r| r.fct()).collect() };
    assert_ne!(fcts(&a), fcts(&b), "other paths, other completion times");
    all_done(&b);
}

/// `transport.renak_us` reaches RoCE's responders: through a lossy fabric they NAK a gap again
/// while out-of-order packets keep coming, so more NAKs leave than with one per error.
#[test]
fn renak_us_makes_roce_responders_nak_a_gap_again() {
    let mut once = small(Recovery::Roce, false);
    once.network.link_loss = 0.01;
    let mut again = once.clone();
    again.transport.renak_us = Some(4.0);
    let (a, b) = (go(&once).summary, go(&again).summary);
    assert!(a.nacks > 0, "losses draw NAKs: {a:?}");
    assert!(b.nacks > a.nacks, "{} NAKs against {}", b.nacks, a.nacks);
}
