//! irn-verbs between two network namespaces joined by a veth pair — two hosts as far as the
//! kernel is concerned, each on UDP 4791 with its own address, so every packet is standard
//! RoCEv2 on a real (virtual) Ethernet link. The test creates the namespaces with private
//! addresses and removes them even when it fails. It needs root (CAP_NET_ADMIN) and iproute2;
//! without them it says why and skips.

use std::process::{Command, Output};

mod common;
use common::netns::Netns;
use common::{finish, text};
use std::time::Duration;

/// Server in `b`, client in `a`; retries the client while the server starts.
fn run(n: &Netns, server: &[&str], client: &[&str]) -> (Output, Output) {
    let s = n.spawn(&n.b, server);
    for _ in 0..100 {
        let out = finish(n.spawn(&n.a, client), 300);
        if String::from_utf8_lossy(&out.stderr).contains("Connection refused") {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        return (finish(s, 60), out);
    }
    panic!("the server in {} never listened", n.b);
}

fn setup() -> Option<Netns> {
    Netns::setup("verbs_netns", "v", 231)
}

#[test]
fn operations_bulk_loss_and_pingpong_across_namespaces() {
    let Some(n) = setup() else { return };
    // Every operation in both modes through 1 % loss on the client, data verified.
    for mode in ["irn", "roce"] {
        for op in ["write", "read", "send", "atomic"] {
            let (s, c) = run(
                &n,
                &["perf", op],
                &[
                    "perf",
                    op,
                    "10.231.0.2",
                    "--mode",
                    mode,
                    "--verify",
                    "--loss",
                    "0.01",
                    "-n",
                    "200",
                    "-s",
                    "16384",
                ],
            );
            assert!(c.status.success(), "{mode} {op}: {}", text(&c));
            assert!(s.status.success(), "{mode} {op}: {}", text(&s));
            assert!(
                String::from_utf8_lossy(&c.stdout).contains("verify: ok"),
                "{}",
                text(&c)
            );
        }
    }
    // Bulk Writes through 5 % loss on both ends, both modes, with a capture on the client.
    let dir = std::env::temp_dir().join(format!("irn-netns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for mode in ["irn", "roce"] {
        let pcap = dir.join(format!("bulk-{mode}.pcap"));
        let pcap = pcap.to_string_lossy().to_string();
        let (s, c) = run(
            &n,
            &["perf", "write", "--loss", "0.05"],
            &[
                "perf",
                "write",
                "10.231.0.2",
                "--mode",
                mode,
                "--verify",
                "--loss",
                "0.05",
                "-n",
                "512",
                "-s",
                "65536",
                "--pcap",
                &pcap,
            ],
        );
        assert!(
            c.status.success() && s.status.success(),
            "{mode}: {}\n{}",
            text(&c),
            text(&s)
        );
        let d = Command::new(env!("CARGO_BIN_EXE_irn"))
            .args(["decode", "--json", &pcap])
            .output()
            .expect("decode");
        let summary = String::from_utf8_lossy(&d.stdout);
        let last = summary.lines().last().unwrap_or_default();
        assert!(
            last.contains("\"icrc_bad\":0") && last.contains("\"other\":0"),
            "{mode}: {last}"
        );
    }
    // ibv_rc_pingpong's pattern, multi-packet messages, both modes.
    for mode in ["roce", "irn"] {
        let (s, c) = run(
            &n,
            &["pingpong", "-n", "50", "-s", "8192", "--mode", mode],
            &[
                "pingpong",
                "10.231.0.2",
                "-n",
                "50",
                "-s",
                "8192",
                "--mode",
                mode,
                "--loss",
                "0.02",
            ],
        );
        assert!(
            c.status.success() && s.status.success(),
            "{mode}: {}\n{}",
            text(&c),
            text(&s)
        );
        assert!(
            String::from_utf8_lossy(&c.stdout).contains("GID ::ffff:10.231.0.1"),
            "{}",
            text(&c)
        );
    }
}

/// UDP GSO batches cut into datagrams before the wire carry the ICRCs a standard
/// receiver computes. With the client's veth made to segment in software (`ethtool -K
/// tx-udp-segmentation off`, as a NIC without the offload or a router would), the kernel
/// numbers the segments' IPv4 identifications 0, 1, 2, … — which the ICRC covers — and the
/// server on the raw path, verifying every ICRC, accepts every packet: the data arrives
/// verified in both modes, at 1024- and 4096-byte MTUs.
#[test]
fn gso_segments_cut_before_the_wire_pass_a_verifying_receiver() {
    // Namespaces and a subnet of its own: the other test of this file runs at the same time.
    let Some(n) = Netns::setup("verbs_netns", "g", 236) else {
        return;
    };
    let ethtool = Command::new("ip")
        .args(["netns", "exec", &n.a, "ethtool", "-K", &n.dev_a])
        .args(["tx-udp-segmentation", "off"])
        .output();
    match ethtool {
        Ok(o) if o.status.success() => {}
        other => {
            common::precondition_missing(
                "gso_segments_cut_before_the_wire_pass_a_verifying_receiver",
                &format!("ethtool could not turn the veth's UDP segmentation off: {other:?}"),
            );
            return;
        }
    }
    // Over the veth's 1500 bytes a 4096-byte path MTU cannot work: both ends refuse it as they
    // connect, naming the route's MTU (it used to end in RETRY_EXC_ERR, every send refused by
    // the kernel with EMSGSIZE).
    let (s, c) = run(
        &n,
        &["perf", "write", "-m", "4096"],
        &["perf", "write", "10.236.0.2", "-m", "4096", "-n", "10"],
    );
    for o in [&s, &c] {
        assert!(!o.status.success(), "{}", text(o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("does not fit the route"),
            "{}",
            text(o)
        );
    }
    // Jumbo frames, so that 4096-byte packets fit the link.
    for (ns, dev) in [(&n.a, &n.dev_a), (&n.b, &n.dev_b)] {
        let ok = Command::new("ip")
            .args(["-n", ns, "link", "set", dev, "mtu", "9000"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "setting {dev}'s MTU in {ns}");
    }
    for mode in ["irn", "roce"] {
        for mtu in ["1024", "4096"] {
            let (s, c) = run(
                &n,
                &["perf", "write", "--rx", "raw", "--counters", "-m", mtu],
                &[
                    "perf",
                    "write",
                    "10.236.0.2",
                    "--mode",
                    mode,
                    "--verify",
                    "--gso",
                    "on",
                    "--counters",
                    "-m",
                    mtu,
                    "-n",
                    "300",
                    "-s",
                    "65536",
                ],
            );
            assert!(
                c.status.success() && s.status.success(),
                "{mode} {mtu}: {}\n{}",
                text(&c),
                text(&s)
            );
            let client = String::from_utf8_lossy(&c.stdout);
            let server = String::from_utf8_lossy(&s.stdout);
            assert!(client.contains("verify: ok"), "{}", text(&c));
            assert!(server.contains("receive path: raw"), "{}", text(&s));
            assert!(!client.contains("tx_gso_messages: 0,"), "{}", text(&c));
            assert!(server.contains("rx_icrc_errors: 0,"), "{}", text(&s));
            assert!(server.contains("rx_coalesced: 0"), "{}", text(&s));
        }
    }
}
