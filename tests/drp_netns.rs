//! `irn drp` (Dynamic RDMA, seed 003, SPEC T10) between two network namespaces joined by a veth
//! pair: raw Ethernet frames of type 0x01FF on a real (virtual) link. Needs root and iproute2;
//! in CI their absence is a failure.
//!
//! Through 5 % frame loss at both ends and 5 % failed registrations at the responder, in both
//! modes: every write is read back and compared (the initiator's exit status), and the dynamic
//! method is not slower on average than the traditional one.
//!
//! How "not slower on average" is judged on a noisy host. This 2-vCPU VM stalls for 5–10 ms
//! about three times a second (a `time.sleep(100 µs)` loop overshoots by > 5 ms 15 times in
//! 5 s). With the simulator's timers (200 µs / 500 µs) such stalls fire retransmit timers
//! spuriously and the two runs' averages differ by ±30 % either way from the host alone; so
//! both timers here are 20 ms, longer than any stall, and each end is pinned to a CPU of its
//! own. Both runs meet the same lost frames and failed registrations (`irn drp` draws them per
//! frame and per registration from the seed), so transfer *i* of one run and transfer *i* of
//! the other are a pair; most pairs go through the same protocol events and differ only by the
//! host. The verdict is the sum of the differences over the pairs whose events differ (above
//! all the transfers dynamic sent indirect): it must not be positive — the average difference
//! with the host's share, whose expectation is zero, taken out. The raw averages are printed
//! but not compared: on this VM two runs of one mode differ by up to 29 % from the host alone
//! (measured: traditional 24.6, 25.1 and 30.9 ms in three runs of this test), far more than the
//! method's effect here (2–4 %), so comparing them would test the host. The two tests of this
//! file take turns (one lock), so neither loads the CPUs while the other measures. Measured over
//! 6 runs: 10 pairs with different events every time, −565 to −902 µs per transfer.

use std::process::Output;
use std::time::Duration;

mod common;
use common::netns::Netns;
use common::{finish, text};

/// The tests of this file take turns: each runs processes pinned to both CPUs.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs a responder in `b` and an initiator in `a` with `extra` flags on both; returns both
/// outputs and the initiator's per-transfer records.
fn transfer(
    n: &Netns,
    mode: &str,
    extra: &[&str],
    count: u32,
    json: &std::path::Path,
) -> (Output, Output, Vec<serde_json::Value>) {
    let count = count.to_string();
    let mut server = vec![
        "drp", "--iface", &n.dev_b, "--mode", mode, "--count", &count,
    ];
    server.extend_from_slice(extra);
    let s = n.spawn_on(&n.b, Some(1), &server);
    std::thread::sleep(Duration::from_millis(200));
    let mac = n.mac(&n.b, &n.dev_b);
    let json_s = json.to_string_lossy().to_string();
    let mut client = vec![
        "drp", "--iface", &n.dev_a, &mac, "--mode", mode, "--count", &count, "--json", &json_s,
    ];
    client.extend_from_slice(extra);
    let c = finish(n.spawn_on(&n.a, Some(0), &client), 300);
    let s = finish(s, 60);
    let records = std::fs::read_to_string(json)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["transfers"].as_array().cloned())
        .unwrap_or_default();
    (s, c, records)
}

#[test]
fn dynamic_rdma_across_namespaces_exact_and_not_slower() {
    let _turn = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(n) = Netns::setup("drp_netns", "d", 233) else {
        return;
    };
    if std::thread::available_parallelism().map_or(1, |p| p.get()) < 2 {
        common::precondition_missing("drp_netns", "needs two CPUs to pin the two ends");
        return;
    }
    let dir = std::env::temp_dir().join(format!("irn-drp-cmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let lossy = [
        "--loss",
        "0.05",
        "--frp",
        "0.05",
        "--seed",
        "3",
        "--setup-timeout-us",
        "20000",
        "--data-timeout-us",
        "20000",
    ];
    let count = 150;
    let mut runs = Vec::new();
    for mode in ["traditional", "dynamic"] {
        let (s, c, records) = transfer(&n, mode, &lossy, count, &dir.join(format!("{mode}.json")));
        assert!(c.status.success(), "{mode}: initiator: {}", text(&c));
        assert!(s.status.success(), "{mode}: responder: {}", text(&s));
        let out = String::from_utf8_lossy(&c.stdout);
        assert!(out.contains("verify: ok"), "{mode}: {out}");
        let served = String::from_utf8_lossy(&s.stdout);
        assert_eq!(
            served
                .lines()
                .filter(|l| l.starts_with("served write"))
                .count(),
            count as usize,
            "{mode}: every write completes once at the responder"
        );
        assert_eq!(records.len(), count as usize, "{mode}");
        // Hash-verified: the CRC-32 of each write's source at the initiator is the CRC-32 of
        // what the responder holds when it completes that write.
        let crcs = |text: &str, prefix: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(prefix) && l.contains("crc32 "))
                .filter_map(|l| l.rsplit("crc32 ").next().map(str::to_string))
                .collect()
        };
        assert_eq!(
            crcs(&out, "transfer "),
            crcs(&served, "served write"),
            "{mode}: every write's bytes arrived intact"
        );
        let indirect = records.iter().filter(|r| r["mode"] == "indirect").count();
        match mode {
            "dynamic" => assert!(indirect > 0 && served.contains("(indirect)"), "{out}"),
            _ => assert_eq!(indirect, 0, "traditional never goes indirect: {out}"),
        }
        runs.push(records);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let us = |r: &serde_json::Value| r["us"].as_f64().expect("us");
    let events = |r: &serde_json::Value| {
        (
            r["mode"].clone(),
            r["setup_attempts"].clone(),
            r["retransmitted"].clone(),
        )
    };
    let (mut paired, mut differing) = (0.0, 0);
    for (t, d) in runs[0].iter().zip(&runs[1]) {
        if events(t) != events(d) {
            paired += us(d) - us(t);
            differing += 1;
        }
    }
    let avg = |rs: &[serde_json::Value]| rs.iter().map(us).sum::<f64>() / rs.len() as f64;
    eprintln!(
        "drp_netns: raw averages traditional {:.1} µs, dynamic {:.1} µs; {differing} pairs with \
         different events, dynamic - traditional over them: {:.1} µs per transfer",
        avg(&runs[0]),
        avg(&runs[1]),
        paired / f64::from(count)
    );
    assert!(
        paired <= 0.0,
        "dynamic slower on average: {:.1} µs per transfer over the {differing} pairs whose events \
         differ",
        paired / f64::from(count)
    );
}

#[test]
fn capture_decodes_and_bad_peer_fails_cleanly() {
    let _turn = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(n) = Netns::setup("drp_netns", "e", 234) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("irn-drp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let pcap = dir.join("drp.pcap");
    let pcap_s = pcap.to_string_lossy().to_string();
    // A short lossy run with a capture at the initiator, 1 KB and 300-byte frames.
    let s = n.spawn(
        &n.b,
        &["drp", "--iface", &n.dev_b, "--count", "10", "--frp", "0.2"],
    );
    std::thread::sleep(Duration::from_millis(200));
    let mac = n.mac(&n.b, &n.dev_b);
    let c = finish(
        n.spawn(
            &n.a,
            &[
                "drp",
                "--iface",
                &n.dev_a,
                &mac,
                "--count",
                "10",
                "--size",
                "20000",
                "--payload",
                "300",
                "--loss",
                "0.1",
                "--pcap",
                &pcap_s,
            ],
        ),
        120,
    );
    let s = finish(s, 60);
    assert!(
        c.status.success() && s.status.success(),
        "{}\n{}",
        text(&c),
        text(&s)
    );
    let d = std::process::Command::new(env!("CARGO_BIN_EXE_irn"))
        .args(["decode", "--json", &pcap_s])
        .output()
        .expect("decode");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&d.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let summary = lines.last().expect("summary");
    assert_eq!(summary["malformed"], 0, "{summary}");
    assert!(summary["drp"].as_u64().unwrap_or(0) > 100, "{summary}");
    assert_eq!(summary["other"], 0, "only DRP frames are captured");
    let kinds: std::collections::BTreeSet<String> = lines
        .iter()
        .filter_map(|l| l["control"].as_str())
        .map(|c| c.split('|').next().unwrap_or_default().to_string())
        .collect();
    for k in ["CONN_REQ", "CONN_ACK", "DATA", "ACK", "REL_REQ", "REL_ACK"] {
        assert!(kinds.contains(k), "{k} missing from {kinds:?}");
    }
    // Every field is decoded: a data frame of the first write.
    let data = lines
        .iter()
        .find(|l| l["control"] == "DATA|WRITE|DIRECT" && l["sn"] == 1)
        .expect("data frame 1");
    assert_eq!(data["len"], 300);
    assert_eq!(data["dba"], 300);
    assert_eq!(data["payload_len"], 300);
    let _ = std::fs::remove_dir_all(&dir);

    // No responder: the initiator fails with "retries exceeded" and a non-zero status, quickly.
    let c = finish(
        n.spawn(
            &n.a,
            &[
                "drp",
                "--iface",
                &n.dev_a,
                "02:00:00:00:00:01",
                "--count",
                "1",
                "--setup-timeout-us",
                "1000",
                "--mode",
                "traditional",
            ],
        ),
        60,
    );
    assert!(!c.status.success(), "{}", text(&c));
    assert!(
        String::from_utf8_lossy(&c.stdout).contains("retries exceeded"),
        "{}",
        text(&c)
    );
}
