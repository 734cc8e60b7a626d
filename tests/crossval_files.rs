//! `scripts/crossval-ns3 --generate-only`: the files it writes for ConWeave's ns-3 parse as
//! that simulator's readers expect (scratch/network-load-balance.cc: the topology, the flow
//! file, the configuration keys), and say what irn ran — the same links, the same flows to the
//! nanosecond, the same MTU, buffer and timers. ns-3 itself is not needed: the script's full run
//! is not part of the suite (it needs a built ns-3 checkout, experiments/crossval/README.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{irn_bin, text};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The keys the patched scratch program reads (its `conf >> key` chain and the patch's).
const NS3_KEYS: &[&str] = &[
    "TOPOLOGY_FILE",
    "FLOW_FILE",
    "FLOW_INPUT_FILE",
    "CNP_OUTPUT_FILE",
    "FCT_OUTPUT_FILE",
    "PFC_OUTPUT_FILE",
    "QLEN_MON_FILE",
    "VOQ_MON_FILE",
    "VOQ_MON_DETAIL_FILE",
    "UPLINK_MON_FILE",
    "CONN_MON_FILE",
    "EST_ERROR_MON_FILE",
    "QLEN_MON_START",
    "QLEN_MON_END",
    "SW_MONITORING_INTERVAL",
    "FLOWGEN_START_TIME",
    "FLOWGEN_STOP_TIME",
    "SIMULATOR_STOP_TIME",
    "BUFFER_SIZE",
    "BUFFER_SIZE_BYTES",
    "EGRESS_DT_OFF",
    "CC_MODE",
    "LB_MODE",
    "ENABLE_PFC",
    "PAUSE_TIME",
    "ENABLE_IRN",
    "IRN_BDP",
    "IRN_RTO_HIGH_US",
    "IRN_RTO_LOW_US",
    "L2_TIMEOUT_US",
    "CONWEAVE_TX_EXPIRY_TIME",
    "CONWEAVE_REPLY_TIMEOUT_EXTRA",
    "CONWEAVE_PATH_PAUSE_TIME",
    "CONWEAVE_EXTRA_VOQ_FLUSH_TIME",
    "CONWEAVE_DEFAULT_VOQ_WAITING_TIME",
    "ALPHA_RESUME_INTERVAL",
    "RATE_DECREASE_INTERVAL",
    "CLAMP_TARGET_RATE",
    "RP_TIMER",
    "FAST_RECOVERY_TIMES",
    "EWMA_GAIN",
    "RATE_AI",
    "RATE_HAI",
    "MIN_RATE",
    "DCTCP_RATE_AI",
    "ERROR_RATE_PER_LINK",
    "L2_CHUNK_SIZE",
    "L2_ACK_INTERVAL",
    "L2_BACK_TO_ZERO",
    "RATE_BOUND",
    "HAS_WIN",
    "VAR_WIN",
    "FAST_REACT",
    "MI_THRESH",
    "INT_MULTI",
    "GLOBAL_T",
    "U_TARGET",
    "MULTI_RATE",
    "SAMPLE_FEEDBACK",
    "ENABLE_QCN",
    "USE_DYNAMIC_PFC_THRESHOLD",
    "PACKET_PAYLOAD_SIZE",
    "LINK_DOWN",
    "KMAX_MAP",
    "KMIN_MAP",
    "PMAX_MAP",
    "LOAD",
    "RANDOM_SEED",
];

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn num<T: std::str::FromStr>(s: &str, what: &str) -> T {
    s.parse()
        .unwrap_or_else(|_| panic!("{what}: `{s}` does not parse"))
}

/// ns-3's topology reader: `nodes switches links`, the switch ids, then `src dst rate delay
/// error` per link. Returns (hosts, links as (a, b, bits/s, ns)).
fn ns3_topology(text: &str) -> (u32, Vec<(u32, u32, u64, u64)>) {
    let mut lines = text.lines();
    let head: Vec<u32> = lines
        .next()
        .expect("first line")
        .split_whitespace()
        .map(|w| num(w, "topology head"))
        .collect();
    let [nodes, switches, count] = head[..] else {
        panic!("topology head is `nodes switches links`: {head:?}")
    };
    let ids: BTreeSet<u32> = lines
        .next()
        .expect("switch ids")
        .split_whitespace()
        .map(|w| num(w, "switch id"))
        .collect();
    assert_eq!(ids.len() as u32, switches, "one id per switch");
    let hosts = nodes - switches;
    // Hosts are 0..hosts (ns-3's flow generator picks hosts there), switches the rest.
    assert!(
        ids.iter().all(|&i| i >= hosts && i < nodes),
        "switch ids after the hosts"
    );
    let mut links = Vec::new();
    let mut degree = BTreeMap::new();
    for _ in 0..count {
        let w: Vec<&str> = lines
            .next()
            .expect("a link line")
            .split_whitespace()
            .collect();
        assert_eq!(w.len(), 5, "link: src dst rate delay error: {w:?}");
        let (a, b): (u32, u32) = (num(w[0], "src"), num(w[1], "dst"));
        assert!(a < nodes && b < nodes && a != b, "link {a} {b}");
        let rate = w[2]
            .strip_suffix("Gbps")
            .expect("rate in Gbps (ns-3 DataRate)");
        let bps = (num::<f64>(rate, "rate") * 1e9).round() as u64;
        let ns: u64 = num(w[3].strip_suffix("ns").expect("delay in ns"), "delay");
        let err: f64 = num(w[4], "error rate");
        assert!((0.0..1.0).contains(&err));
        *degree.entry(a).or_insert(0u32) += 1;
        *degree.entry(b).or_insert(0u32) += 1;
        links.push((a, b, bps, ns));
    }
    for h in 0..hosts {
        assert_eq!(
            degree.get(&h),
            Some(&1),
            "host {h} has exactly one link (its NIC)"
        );
    }
    // switch-mmu.h: 128 port slots, port 0 unused.
    assert!(
        degree.values().all(|&d| d <= 127),
        "at most 127 ports a switch"
    );
    (hosts, links)
}

/// irn's topology file, as links.
fn irn_topology(text: &str) -> (u32, Vec<(u32, u32, u64, u64)>) {
    let mut hosts = 0;
    let mut links = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["hosts", n] => hosts = num(n, "hosts"),
            ["link", a, b, g, d] => links.push((
                num(a, "a"),
                num(b, "b"),
                (num::<f64>(g, "gbps") * 1e9).round() as u64,
                num(d, "delay"),
            )),
            _ => {}
        }
    }
    (hosts, links)
}

#[test]
fn the_files_for_ns3_parse_as_ns3_reads_them_and_carry_irns_input() {
    let dir = std::env::temp_dir().join(format!("irn-crossval-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exp = dir.join("cv.toml");
    std::fs::write(
        &exp,
        "[topology]\nk = 4\nlink_gbps = 40\nlink_delay_ns = 1500\n\
         [switch]\nmodel = \"shared-buffer\"\nbuffer_bytes = 900000\npfc_alpha = 0.0625\n\
         [network]\nmtu = 2048\n\
         [workload]\nload = 0.5\nsizes = \"irn\"\nduration_us = 300\ndrain_us = 5000\n\
         [transport]\nack_every = 1\nrto_low_us = 90\n\
         [[run]]\nname = \"IRN\"\n\
         [[run]]\nname = \"RoCE+PFC\"\ntransport.recovery = \"roce\"\nnetwork.pfc = true\n\
         [[run]]\nname = \"RoCE\"\ntransport.recovery = \"roce\"\ntransport.roce_rto_us = 500\n\
         transport.renak_us = 4\n",
    )
    .expect("experiment");
    let out = dir.join("files");
    let o = Command::new(root().join("scripts/crossval-ns3"))
        .arg("--generate-only")
        .arg(&out)
        .arg("--experiment")
        .arg(&exp)
        .args(["--seed", "2", "--jobs", "1", "--irn", irn_bin()])
        .output()
        .expect("scripts/crossval-ns3 runs");
    assert!(o.status.success(), "crossval-ns3:\n{}", text(&o));

    // One network, in both formats: k = 4 gives 16 hosts, 20 switches, 48 links.
    let (hosts, links) = ns3_topology(&read(&out.join("topology.txt")));
    assert_eq!((hosts, links.len()), (16, 48));
    assert!(links.iter().all(|l| l.2 == 40_000_000_000 && l.3 == 1500));
    assert_eq!(
        irn_topology(&read(&out.join("topology.topo"))),
        (hosts, links)
    );

    // The flow file: a count, then `src dst pg bytes start_s` sorted by start (ns-3 schedules
    // each next flow from the last), and the same flows as irn's records, start times to the
    // nanosecond after ns-3's 2 s.
    let flows_txt = read(&out.join("flows.txt"));
    let mut lines = flows_txt.lines();
    let n: usize = num(lines.next().expect("count").trim(), "flow count");
    let mut ns3_flows = Vec::new();
    let mut last = 0.0f64;
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w.len(), 5, "flow: src dst pg bytes start: {l}");
        let (src, dst): (u32, u32) = (num(w[0], "src"), num(w[1], "dst"));
        assert!(src < hosts && dst < hosts && src != dst, "{l}");
        assert_eq!(w[2], "3", "ns-3's data priority group");
        let bytes: u32 = num(w[3], "bytes");
        assert!(bytes >= 1);
        let start: f64 = num(w[4], "start");
        assert!(start >= 2.0 && start >= last, "sorted, from 2 s: {l}");
        last = start;
        let ns = ((start - 2.0) * 1e9).round() as u64;
        ns3_flows.push((src, dst, u64::from(bytes), ns));
    }
    assert_eq!(ns3_flows.len(), n, "the count is the number of flows");
    assert!(n > 10, "a workload: {n} flows");
    let irn_csv = read(&out.join("irn-csv/IRN.csv"));
    let mut irn_flows: Vec<(u32, u32, u64, u64)> = irn_csv
        .lines()
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split(',').collect();
            (
                num(w[1], "src"),
                num(w[2], "dst"),
                num(w[3], "bytes"),
                (num::<f64>(w[4], "start_us") * 1000.0).round() as u64,
            )
        })
        .collect();
    irn_flows.sort_by_key(|f| (f.3, f.0, f.1, f.2));
    ns3_flows.sort_by_key(|f| (f.3, f.0, f.1, f.2));
    assert_eq!(ns3_flows, irn_flows, "ns-3's flows are irn's");

    // One configuration per transport; every key one the scratch program reads; the values
    // irn ran with.
    let irn: serde_json::Value =
        serde_json::from_str(&read(&out.join("irn.json"))).expect("irn.json");
    let cap = irn["runs"][0]["bdp_cap"].as_u64().expect("IRN's BDP cap");
    for (tag, irn_on, pfc_on) in [("IRN", 1, 0), ("RoCE-PFC", 0, 1), ("RoCE", 0, 0)] {
        let conf = read(&out.join(format!("ns3-{tag}.config.txt")));
        let mut kv = BTreeMap::new();
        for l in conf.lines() {
            let (k, v) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("`KEY value`: {l}"));
            assert!(NS3_KEYS.contains(&k), "{tag}: ns-3 does not read {k}");
            assert!(!v.trim().is_empty(), "{tag}: {k} has a value");
            assert!(kv.insert(k, v.trim()).is_none(), "{tag}: {k} once");
        }
        let get = |k: &str| *kv.get(k).unwrap_or_else(|| panic!("{tag}: no {k}"));
        assert_eq!(get("ENABLE_IRN"), irn_on.to_string(), "{tag}");
        assert_eq!(get("ENABLE_PFC"), pfc_on.to_string(), "{tag}");
        assert_eq!(get("EGRESS_DT_OFF"), pfc_on.to_string(), "{tag}");
        assert_eq!(get("PACKET_PAYLOAD_SIZE"), "2048");
        assert_eq!(get("BUFFER_SIZE_BYTES"), "900000");
        if tag == "IRN" {
            // ns-3 sends while `in flight + payload < IrnBdp` or `highest ACK + IrnBdp >
            // next`: at most irn's cap in packets.
            assert_eq!(get("IRN_BDP"), (cap * 2048).to_string());
        }
        assert_eq!(get("IRN_RTO_LOW_US"), "90");
        assert_eq!(get("IRN_RTO_HIGH_US"), "320");
        // RoCE's timer is irn's; under PFC irn has none, and ns-3's never fires in the run.
        let timer = match tag {
            "RoCE" => "500",
            "RoCE-PFC" => "10000000",
            _ => "320",
        };
        assert_eq!(get("L2_TIMEOUT_US"), timer);
        assert_eq!(get("L2_ACK_INTERVAL"), "1");
        // 65 535 quanta of 512 bit times at 40 Gb/s, in whole µs.
        assert_eq!(get("PAUSE_TIME"), "838");
        assert_eq!(get("CC_MODE"), "0", "no congestion control");
        assert_eq!(get("LB_MODE"), "0", "per-flow ECMP");
        assert!(Path::new(get("TOPOLOGY_FILE")).exists());
        assert!(Path::new(get("FLOW_FILE")).exists());
        // Every link rate has an ECN threshold (ns-3 asserts it).
        let kmax: Vec<&str> = get("KMAX_MAP").split_whitespace().collect();
        assert_eq!(kmax[0], "1");
        assert_eq!(kmax[1], "40000000000");
        let stop: f64 = num(get("SIMULATOR_STOP_TIME"), "stop");
        assert!((stop - 2.0053).abs() < 1e-9, "arrivals and drain: {stop}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The defaults the translation assumes where an experiment is silent are irn's own.
#[test]
fn the_translation_assumes_irns_defaults() {
    let o = Command::new(root().join("scripts/crossval-ns3"))
        .arg("--print-irn-defaults")
        .output()
        .expect("scripts/crossval-ns3 runs");
    assert!(o.status.success(), "{}", text(&o));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let cfg = irn_sim::config::SimConfig::default();
    let f = |k: &str| d[k].as_f64().unwrap_or_else(|| panic!("{k}"));
    assert_eq!(f("mtu"), f64::from(cfg.network.mtu));
    assert_eq!(f("pause_quanta"), f64::from(cfg.network.pause_quanta));
    assert_eq!(f("duration_us"), cfg.workload.duration_us);
    assert_eq!(f("drain_us"), cfg.workload.drain_us);
    assert_eq!(f("rto_n"), f64::from(cfg.transport.rto_n));
    assert_eq!(f("buffer_bytes"), cfg.switch.buffer_bytes as f64);
    assert_eq!(d["model"], "input-queued");
    assert_eq!(cfg.switch.model, irn_sim::config::SwitchModel::InputQueued);
    assert_eq!(f("dt_alpha"), cfg.switch.dt_alpha);
    assert_eq!(f("rto_low_us"), cfg.transport.rto_low_us);
    assert_eq!(f("rto_high_us"), cfg.transport.rto_high_us);
    assert_eq!(f("roce_rto_us"), cfg.transport.roce_rto_us);
    assert_eq!(f("ecn_kmin_bytes"), cfg.switch.ecn_kmin_bytes as f64);
    assert_eq!(f("ecn_kmax_bytes"), cfg.switch.ecn_kmax_bytes as f64);
    assert_eq!(f("ecn_pmax"), cfg.switch.ecn_pmax);
    let q = &d["dcqcn"];
    let p = &cfg.cc.dcqcn;
    let g = |k: &str| q[k].as_f64().unwrap_or_else(|| panic!("dcqcn.{k}"));
    assert_eq!(g("g"), p.g);
    assert_eq!(g("alpha_period_us"), p.alpha_period_us);
    assert_eq!(g("increase_period_us"), p.increase_period_us);
    assert_eq!(g("fast_recovery_steps"), f64::from(p.fast_recovery_steps));
    assert_eq!(g("ai_mbps"), p.ai_mbps);
    assert_eq!(g("hai_mbps"), p.hai_mbps);
    assert_eq!(g("min_rate_mbps"), p.min_rate_mbps);
}

/// The committed comparison is what its JSON renders, and every ratio with its range (`x.xx
/// (a–b)`) that the experiment's README and docs/RESULTS.md quote is in it. (Bare numbers in
/// the prose are not checked.)
#[test]
fn the_committed_crossval_table_and_the_numbers_quoted_from_it_are_the_results() {
    let o = Command::new(root().join("scripts/crossval-ns3"))
        .arg("--check")
        .arg(root().join("experiments/crossval"))
        .output()
        .expect("scripts/crossval-ns3 runs");
    assert!(o.status.success(), "{}", text(&o));
}
