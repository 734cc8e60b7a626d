//! Lossless Ethernet on real hosts (SPEC N1, N2): two senders and one receiver, each in a
//! network namespace of its own, joined by `irn switch` in a fourth with PFC on priority 3
//! (`--pfc 3`). The senders' queue pairs carry traffic class 104 (DSCP 26: priority 3) and
//! honour the pause frames that reach their interface (`--pause-iface e0`, quanta counted at
//! the switch's 300 Mb/s); both write to the receiver at once through its 300 Mb/s port, a 2:1
//! oversubscription.
//!
//! In the lossless class the switch drops nothing: it pauses the senders instead, they hold
//! their queue pairs, and a capture on a sender's link holds the PFC frames, decoded by
//! `irn decode` and by tshark. The same traffic in the lossy class (traffic class 0,
//! priority 0) is dropped at the receiver's port. Every run verifies every byte. Needs root,
//! iproute2, ethtool, tcpdump and tshark; in CI a missing one fails.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;
use common::netns::Star;
use common::{finish, text};

const TEST: &str =
    "pfc_keeps_a_class_lossless_through_a_congested_switch_and_the_lossy_class_drops";

/// 64 KiB Writes per sender.
const MESSAGES: u32 = 200;

/// What one run saw: the switch's report, and each sender's output.
struct Run {
    report: serde_json::Value,
    senders: Vec<Output>,
}

fn run(star: &Star, lossless: bool, capture: Option<&std::path::Path>) -> Run {
    let json = std::env::temp_dir().join(format!("irn-pfc-{}-{lossless}.json", std::process::id()));
    let json_s = json.to_string_lossy().to_string();
    let (sw, mut sw_err) = star.start_switch(&[
        "--rate",
        "300m",
        "--buffer",
        "100000",
        "--ecn",
        "off",
        "--pfc",
        "3",
        "--xoff",
        "30000",
        "--idle",
        "1",
        "--duration",
        "120",
        "--json",
        &json_s,
    ]);
    // A capture of the MAC control frames on the first sender's link.
    let mut dump = capture.map(|path| {
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &star.hosts[0],
                "tcpdump",
                "-i",
                "e0",
                "-U",
                "-w",
            ])
            .arg(path)
            .args(["ether", "proto", "0x8808"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump");
        std::thread::sleep(Duration::from_millis(500));
        child
    });
    let r = &star.hosts[2];
    let servers: Vec<_> = ["5001", "5002"]
        .iter()
        .map(|port| star.spawn(r, &["perf", "write", "-p", port]))
        .collect();
    let messages = MESSAGES.to_string();
    let tclass = if lossless { "104" } else { "0" };
    let client = |ns: &str, port: &str| {
        let args = [
            "perf",
            "write",
            "10.236.0.3",
            "-p",
            port,
            "--mode",
            "roce",
            "--verify",
            "-n",
            &messages,
            "-s",
            "65536",
            "--counters",
            "--tclass",
            tclass,
            "--pause-iface",
            "e0",
        ];
        star.client(ns, &args, r, 120)
    };
    let (c1, c2) = std::thread::scope(|s| {
        let a = s.spawn(|| client(&star.hosts[0], "5001"));
        let b = s.spawn(|| client(&star.hosts[1], "5002"));
        (a.join().expect("client 1"), b.join().expect("client 2"))
    });
    for srv in servers {
        let srv = finish(srv, 60);
        assert!(srv.status.success(), "lossless {lossless}: {}", text(&srv));
    }
    let sw = finish(sw, 130);
    let mut rest = String::new();
    let _ = sw_err.read_to_string(&mut rest);
    assert!(sw.status.success(), "switch: {}{rest}", text(&sw));
    if let Some(mut d) = dump.take() {
        let _ = Command::new("kill")
            .args(["-INT", &d.id().to_string()])
            .status();
        let _ = d.wait();
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the switch's JSON"))
            .expect("JSON");
    let _ = std::fs::remove_file(&json);
    Run {
        report,
        senders: vec![c1, c2],
    }
}

/// The number after `key: ` in a sender's printed device counters.
fn counter(o: &Output, key: &str) -> u64 {
    let out = String::from_utf8_lossy(&o.stdout);
    out.split(&format!("{key}: "))
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn pfc_keeps_a_class_lossless_through_a_congested_switch_and_the_lossy_class_drops() {
    for tool in ["tcpdump", "tshark"] {
        if Command::new(tool).arg("--version").output().is_err() {
            common::precondition_missing(TEST, &format!("needs {tool}"));
            return;
        }
    }
    let Some(star) = Star::setup(TEST, "f", 236, 3) else {
        return;
    };
    let pcap = std::env::temp_dir().join(format!("irn-pfc-{}.pcap", std::process::id()));
    let lossless = run(&star, true, Some(&pcap));
    let lossy = run(&star, false, None);
    let port = |r: &Run, i: usize, k: &str| r.report["ports"][i][k].as_u64().expect(k);
    for (what, r) in [("lossless", &lossless), ("lossy", &lossy)] {
        for c in &r.senders {
            assert!(c.status.success(), "{what}: {}", text(c));
            assert!(
                String::from_utf8_lossy(&c.stdout).contains("verify: ok"),
                "{what}: {}",
                text(c)
            );
        }
    }
    // Lossless: nothing dropped at the receiver's port; both senders paused, and held.
    assert_eq!(port(&lossless, 2, "dropped"), 0, "{}", lossless.report);
    for (i, c) in lossless.senders.iter().enumerate() {
        assert!(port(&lossless, i, "pause_sent") > 0, "{}", lossless.report);
        assert!(counter(c, "pause_frames_received") > 0, "{}", text(c));
        assert!(counter(c, "pause_held_turns") > 0, "{}", text(c));
    }
    eprintln!(
        "lossless: receiver port dropped {} (headroom overflow {}), pauses sent {} / {}, \
         senders held {} / {} turns; lossy: dropped {}",
        port(&lossless, 2, "dropped"),
        port(&lossless, 2, "headroom_overflow"),
        port(&lossless, 0, "pause_sent"),
        port(&lossless, 1, "pause_sent"),
        counter(&lossless.senders[0], "pause_held_turns"),
        counter(&lossless.senders[1], "pause_held_turns"),
        port(&lossy, 2, "dropped"),
    );
    // Lossy: the same traffic in priority 0 overflows the receiver's port.
    assert!(port(&lossy, 2, "dropped") > 0, "{}", lossy.report);
    assert_eq!(
        port(&lossy, 0, "pause_sent") + port(&lossy, 1, "pause_sent"),
        0
    );
    // The capture holds the PFC frames, as irn decode and tshark read them.
    let decode = Command::new(env!("CARGO_BIN_EXE_irn"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .expect("irn decode");
    let lines = String::from_utf8_lossy(&decode.stdout).to_string();
    assert!(
        lines.lines().any(|l| l.contains("PFC") && l.contains("3")),
        "irn decode: {}",
        text(&decode)
    );
    let tshark = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .output()
        .expect("tshark");
    let shown = String::from_utf8_lossy(&tshark.stdout).to_string();
    assert!(
        shown.contains("Class Based Flow Control"),
        "tshark: {}",
        text(&tshark)
    );
    let _ = std::fs::remove_file(&pcap);
}
