//! `irn sim` end to end: the JSON keys other tools read, exit statuses, and errors that name
//! the key and the file.

use std::process::Command;

mod common;
use common::without_wall_times;

fn irn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_irn"))
}

/// Runs `cmd`, which must succeed (its stderr is the failure's message).
fn succeeds(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd`, which must fail as a usage or input error (exit status 2); its stderr.
fn fails(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A k = 4 fat-tree for 100 µs of arrivals, IRN and RoCE+PFC.
const TINY: &str = "[topology]\nk = 4\n[workload]\nduration_us = 100\n[[run]]\nname = \"IRN\"\n[[run]]\nname = \"RoCE+PFC\"\ntransport.recovery = \"roce\"\nnetwork.pfc = true\n";

/// A fresh directory of this test process for `tag`'s files.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("irn-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn json_has_the_documented_keys_and_runs_are_named() {
    let dir = scratch("sim-cli");
    let cfg = dir.join("tiny.toml");
    std::fs::write(&cfg, TINY).expect("write");
    let json = dir.join("out.json");
    let csv = dir.join("csv");
    let svg = dir.join("plot.svg");
    let monitor = dir.join("monitor.csv");
    let timeline = dir.join("timeline.svg");
    let out = succeeds(
        irn()
            .args(["sim", "-q", "--seed", "3", "--json"])
            .arg(&json)
            .arg("--csv")
            .arg(&csv)
            .arg("--plot")
            .arg(&svg)
            .arg("--monitor")
            .arg(&monitor)
            .arg("--timeline")
            .arg(&timeline)
            .arg(&cfg),
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("IRN") && table.contains("÷ RoCE+PFC"),
        "{table}"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("valid JSON");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    for key in [
        "name",
        "transport",
        "pfc",
        "cc",
        "flows",
        "avg_slowdown",
        "avg_fct_us",
        "p99_fct_us",
        "drop_rate",
        "pause_frames",
        "sim_time_ms",
        "wall_s",
        "events",
        // The safety model's (seed 001; SPEC N4, N5, N9).
        "pause",
        "deadlocked",
        "deadlock_cycle",
        "watchdog_triggers",
        "goodput_gbps",
        "safety",
        "port_prio",
        "timeline",
    ] {
        assert!(runs.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    assert_eq!(runs[1]["transport"], "roce");
    assert_eq!(runs[1]["pfc"], true);
    assert_eq!(runs[0]["seed"], 3);
    let records = std::fs::read_to_string(csv.join("IRN.csv")).expect("csv");
    assert!(records.starts_with("id,src,dst,bytes,start_us,fct_us,ideal_fct_us,slowdown,status"));
    assert_eq!(
        records.lines().count() as u64,
        runs[0]["flows"].as_u64().expect("flows") + 1
    );
    assert!(std::fs::read_to_string(&svg)
        .expect("svg")
        .starts_with("<svg"));
    assert!(std::fs::read_to_string(&timeline)
        .expect("timeline")
        .starts_with("<svg"));
    assert_eq!(runs[1]["deadlocked"], false);
    assert!(runs[1]["deadlock_cycle"]
        .as_array()
        .is_some_and(Vec::is_empty));
    assert!(runs[1]["timeline"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    let samples = std::fs::read_to_string(&monitor).expect("monitor CSV");
    assert!(samples.starts_with(
        "run,t_us,node,name,port,prio,tx_packets,tx_bytes,rx_packets,rx_bytes,pause_sent,pause_received,paused_us,ingress_drops,egress_drops,queue_bytes"
    ));
    assert!(samples.lines().any(|l| l.starts_with("RoCE+PFC,")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_misspelled_key_is_an_error_naming_key_and_file() {
    let dir = scratch("sim-cli-bad");
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "[workload]\nlaod = 0.5\n").expect("write");
    let err = fails(irn().args(["sim", "-q"]).arg(&cfg));
    assert!(err.contains("bad.toml") && err.contains("laod"), "{err}");
    // A misspelled `--set` key on a good file: the flag's error names the key.
    let good = dir.join("good.toml");
    std::fs::write(&good, "[workload]\nload = 0.5\n").expect("write");
    let err = fails(
        irn()
            .args(["sim", "-q", "--set", "network.pfcc=true"])
            .arg(&good),
    );
    assert!(
        err.contains("--set") && err.contains("network.pfcc"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shards_merge_into_exactly_the_unsharded_json() {
    // Five runs (a sweep) cut into three slices: the merge of the slices' JSON, given in any
    // order, is byte for byte the unsharded run's but for wall times; a missing, repeated or
    // foreign slice is refused.
    let dir = scratch("shards");
    let cfg = dir.join("sweep.toml");
    std::fs::write(
        &cfg,
        "[topology]\nk = 4\n[workload]\nduration_us = 150\n[[run]]\nname = \"IRN\"\n\
         [[run]]\nname = \"RoCE+PFC\"\ntransport.recovery = \"roce\"\nnetwork.pfc = true\n\
         [sweep]\n\"workload.load\" = [0.3, 0.6, 0.9]\n",
    )
    .expect("write");
    let sim = |extra: &[&str], json: &std::path::Path| {
        succeeds(
            irn()
                .args(["sim", "-q", "--seed", "4"])
                .args(extra)
                .arg("--json")
                .arg(json)
                .arg(&cfg),
        );
    };
    let whole = dir.join("whole.json");
    sim(&[], &whole);
    let shard = |i: usize| dir.join(format!("shard-{i}.json"));
    for i in 0..4 {
        sim(&["--shard", &format!("{i}/4")], &shard(i));
    }
    let merged = dir.join("merged.json");
    let out =
        succeeds(
            irn()
                .arg("merge")
                .arg(&merged)
                .args([shard(2), shard(0), shard(3), shard(1)]),
        );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("IRN load=0.3") && table.contains("÷ RoCE+PFC"),
        "{table}"
    );
    assert_eq!(without_wall_times(&merged), without_wall_times(&whole));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&merged).expect("json")).expect("valid JSON");
    assert_eq!(doc["runs"].as_array().map(Vec::len), Some(6));
    // Refusals: a slice missing, a slice twice, slices of another split.
    let other = dir.join("other.json");
    sim(&["--shard", "0/2"], &other);
    for (files, why) in [
        (vec![shard(0), shard(1), shard(2)], "missing"),
        (
            vec![shard(0), shard(1), shard(1), shard(2), shard(3)],
            "twice",
        ),
        (
            vec![shard(0), shard(1), shard(2), shard(3), other],
            "one split",
        ),
    ] {
        let err = fails(irn().arg("merge").arg(dir.join("bad.json")).args(&files));
        assert!(err.contains(why), "{why}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `irn nic-state` (SPEC E13): the state each design adds, from irn-transport's accounting —
/// none for RoCE, IRN's five bitmaps of the BDP cap plus seven 24-bit PSN registers (708 bits
/// at E0's 108-packet cap), growing with the link rate — as a table, JSON and a plot.
#[test]
fn nic_state_reports_each_designs_added_state() {
    let dir = scratch("nic-state");
    let (json, svg) = (dir.join("e13.json"), dir.join("e13.svg"));
    let out = succeeds(
        irn()
            .args(["nic-state", "--json"])
            .arg(&json)
            .arg("--plot")
            .arg(&svg),
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("valid JSON");
    let row = |design: &str, gbps: f64| {
        doc["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r["design"] == design && r["gbps"].as_f64() == Some(gbps))
            .unwrap_or_else(|| panic!("{design} at {gbps}"))
            .clone()
    };
    let irn40 = row("irn", 40.0);
    assert_eq!(irn40["bdp_packets"], 108);
    assert_eq!(irn40["total_bits"], 5 * 108 + 7 * 24);
    assert_eq!(row("roce", 40.0)["total_bits"], 0);
    let bits = |d: &str, g: f64| row(d, g)["total_bits"].as_u64().expect("bits");
    assert!(bits("irn", 10.0) < bits("irn", 40.0) && bits("irn", 40.0) < bits("irn", 100.0));
    assert!(
        bits("tcp", 40.0) > bits("irn", 40.0),
        "RFC 6298's estimator and the scoreboard"
    );
    assert!(
        bits("reorder-buffer", 40.0) > 10 * bits("irn", 40.0),
        "64-bit descriptors"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1856") && text.contains("irn"), "{text}");
    assert!(std::fs::read_to_string(&svg).expect("svg").contains("<svg"));
    let err = fails(irn().args(["nic-state", "--gbps", "0"]));
    assert!(err.contains("--gbps"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An incast experiment's `--plot` is the paper's Figure 9 (RCT against M, ÷ RoCE+PFC), and
/// `irn merge OUT WHOLE.json` redraws a finished experiment's table and figures without running
/// it again, copying its JSON unchanged.
#[test]
fn incast_plots_rct_and_merge_redraws_a_whole_experiment() {
    let dir = scratch("incast-plot");
    let cfg = dir.join("incast.toml");
    std::fs::write(
        &cfg,
        "[topology]\nk = 4\n[workload]\nkind = \"incast\"\nload = 0.0\nincast_bytes = 400000\nincast_repetitions = 2\n[[run]]\nname = \"IRN\"\n[[run]]\nname = \"RoCE+PFC\"\ntransport.recovery = \"roce\"\nnetwork.pfc = true\n[sweep]\n\"workload.incast_senders\" = [2, 4]\n",
    )
    .expect("write");
    let (json, svg) = (dir.join("out.json"), dir.join("rct.svg"));
    succeeds(
        irn()
            .args(["sim", "-q", "--json"])
            .arg(&json)
            .arg("--plot")
            .arg(&svg)
            .arg(&cfg),
    );
    let drawn = std::fs::read_to_string(&svg).expect("svg");
    assert!(drawn.contains("request completion time") && drawn.contains("M = 4"));
    let (copy, again) = (dir.join("copy.json"), dir.join("again.svg"));
    let out = succeeds(
        irn()
            .arg("merge")
            .arg(&copy)
            .arg(&json)
            .arg("--plot")
            .arg(&again),
    );
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).expect("json")).expect("valid JSON")
    };
    assert_eq!(read(&copy), read(&json));
    assert_eq!(std::fs::read_to_string(&again).expect("svg"), drawn);
    assert!(String::from_utf8_lossy(&out.stdout).contains("RoCE+PFC"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn seeds_run_each_configuration_per_seed_and_the_json_pools_them() {
    let dir = scratch("sim-seeds");
    let cfg = dir.join("tiny.toml");
    std::fs::write(&cfg, format!("seeds = 3\n{TINY}")).expect("write");
    let json = dir.join("out.json");
    let run = |extra: &[&str]| -> serde_json::Value {
        succeeds(
            irn()
                .args(["sim", "-q", "--json"])
                .arg(&json)
                .args(extra)
                .arg(&cfg),
        );
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parses")
    };
    let names = |doc: &serde_json::Value| -> Vec<String> {
        doc["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|r| r["name"].as_str().expect("name").to_string())
            .collect()
    };
    // The file's three seeds.
    let doc = run(&[]);
    assert_eq!(names(&doc).len(), 6);
    assert_eq!(names(&doc)[0], "IRN seed=1");
    let groups = doc["over_seeds"].as_array().expect("over_seeds");
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["name"], "IRN");
    assert_eq!(groups[0]["seeds"], serde_json::json!([1, 2, 3]));
    assert_eq!(groups[0]["baseline"], "RoCE+PFC");
    for key in ["avg_slowdown", "p99_fct_us", "flows_completed", "drop_rate"] {
        let m = &groups[0]["metrics"][key];
        let (mean, min, max) = (m["mean"].as_f64(), m["min"].as_f64(), m["max"].as_f64());
        let (mean, min, max) = (mean.expect(key), min.expect(key), max.expect(key));
        assert!(min <= mean && mean <= max, "{key}: {m}");
    }
    assert!(groups[0]["ratios"]["avg_slowdown"]["mean"]
        .as_f64()
        .is_some());
    // `--seeds` replaces them: a count, or a list.
    assert_eq!(names(&run(&["--seeds", "2"])).len(), 4);
    let doc = run(&["--seeds", "4,9"]);
    assert_eq!(doc["over_seeds"][1]["seeds"], serde_json::json!([4, 9]));
    // `--seed` replays one: no seed in the names, no pooling.
    let doc = run(&["--seed", "2"]);
    assert_eq!(names(&doc), ["IRN", "RoCE+PFC"]);
    assert!(doc.get("over_seeds").is_none());
    assert_eq!(doc["runs"][0]["seed"], 2);
    // `irn merge --over-seeds` prints the pooled table alone, and refuses one seed.
    let merge = || {
        irn()
            .arg("merge")
            .arg(dir.join("merged.json"))
            .arg(&json)
            .arg("--over-seeds")
            .output()
            .expect("runs")
    };
    run(&[]);
    let out = merge();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("over seeds"), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(
        table.lines().nth(2).is_some_and(|l| l.starts_with("IRN ")),
        "{table}"
    );
    run(&["--seed", "1"]);
    let out = merge();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--over-seeds"));
    // A bad `--seeds` is the flag's error.
    let err = fails(irn().args(["sim", "-q", "--seeds", "0"]).arg(&cfg));
    assert!(err.contains("--seeds"), "{err}");
}
