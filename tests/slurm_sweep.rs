//! `scripts/slurm-sweep.sh` against a real single-node Slurm (Debian's slurm-wlm and munge,
//! started by `scripts/slurm-local` in a state directory of its own): an experiment of six runs
//! cut into four array tasks and merged by a dependent job gives the JSON of the unsharded run,
//! wall times aside. Needs root (it installs and starts the daemons); without it the test says
//! why and skips — in CI (`CI=true`) that is a failure.

use std::path::PathBuf;
use std::process::Command;

mod common;
use common::{irn_bin, precondition_missing, text, without_wall_times};

const TEST: &str = "slurm_sweep";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Stops the test's Slurm however the test ends.
struct Slurm(PathBuf);

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/slurm-local"))
            .arg("stop")
            .arg(&self.0)
            .output();
    }
}

#[test]
fn a_slurm_job_array_of_shards_merges_into_the_unsharded_run() {
    let dir = std::env::temp_dir().join(format!("irn-slurm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let state = dir.join("slurm");
    std::fs::create_dir_all(&state).expect("state dir");
    let start = Command::new(root().join("scripts/slurm-local"))
        .arg("start")
        .arg(&state)
        .output()
        .expect("scripts/slurm-local runs");
    let _stop = Slurm(state.clone());
    if start.status.code() == Some(3) {
        precondition_missing(TEST, String::from_utf8_lossy(&start.stderr).trim());
        return;
    }
    assert!(
        start.status.success(),
        "slurm-local start:\n{}",
        text(&start)
    );
    let conf = state.join("slurm.conf");
    let exp = dir.join("sweep.toml");
    std::fs::write(
        &exp,
        "[topology]\nk = 4\n[workload]\nduration_us = 150\n[[run]]\nname = \"IRN\"\n\
         [[run]]\nname = \"RoCE+PFC\"\ntransport.recovery = \"roce\"\nnetwork.pfc = true\n\
         [sweep]\n\"workload.load\" = [0.3, 0.6, 0.9]\n",
    )
    .expect("write");
    let whole = dir.join("whole.json");
    let out = Command::new(irn_bin())
        .args(["sim", "-q", "--seed", "4", "--json"])
        .arg(&whole)
        .arg(&exp)
        .output()
        .expect("irn runs");
    assert!(out.status.success(), "{}", text(&out));
    let swept = dir.join("out");
    let out = Command::new(root().join("scripts/slurm-sweep.sh"))
        .arg(&exp)
        .arg("4")
        .arg(&swept)
        .args(["--seed", "4"])
        .env("SLURM_CONF", &conf)
        .env("SLURM_SWEEP_WAIT", "1")
        .env("IRN", irn_bin())
        .output()
        .expect("slurm-sweep runs");
    assert!(out.status.success(), "slurm-sweep:\n{}", text(&out));
    for i in 0..4 {
        assert!(swept.join(format!("shard-{i}.json")).exists(), "shard {i}");
    }
    assert_eq!(
        without_wall_times(&swept.join("results.json")),
        without_wall_times(&whole),
        "the merged sweep is the unsharded run"
    );
    let table = std::fs::read_to_string(swept.join("table.txt")).expect("table");
    assert!(table.contains("RoCE+PFC load=0.9"), "{table}");
    assert!(swept.join("results.svg").exists());
    drop(_stop);
    let _ = std::fs::remove_dir_all(&dir);
}
