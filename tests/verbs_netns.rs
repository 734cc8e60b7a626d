//! irn-verbs between two network namespaces joined by a veth pair — two hosts as far as the
//! kernel is concerned, each on UDP 4791 with its own address, so every packet is standard
//! RoCEv2 on a real (virtual) Ethernet link. The test creates the namespaces with private
//! addresses and removes them even when it fails. It needs root (CAP_NET_ADMIN) and iproute2;
//! without them it says why and skips.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

mod common;
use common::{finish, precondition_missing, text};
use std::time::Duration;

struct Netns {
    a: String,
    b: String,
}

impl Netns {
    /// Two namespaces, `a` at 10.231.0.1 and `b` at 10.231.0.2, joined by a veth pair.
    fn create() -> Result<Netns, String> {
        let id = std::process::id() % 100_000;
        let n = Netns {
            a: format!("irn-{id}-a"),
            b: format!("irn-{id}-b"),
        };
        let (va, vb) = (format!("irn{id}a"), format!("irn{id}b"));
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &n.a],
            vec!["netns", "add", &n.b],
            vec![
                "link", "add", &va, "netns", &n.a, "type", "veth", "peer", "name", &vb, "netns",
                &n.b,
            ],
            vec!["-n", &n.a, "addr", "add", "10.231.0.1/24", "dev", &va],
            vec!["-n", &n.b, "addr", "add", "10.231.0.2/24", "dev", &vb],
            vec!["-n", &n.a, "link", "set", &va, "up"],
            vec!["-n", &n.b, "link", "set", &vb, "up"],
            vec!["-n", &n.a, "link", "set", "lo", "up"],
            vec!["-n", &n.b, "link", "set", "lo", "up"],
        ];
        for s in steps {
            let out = Command::new("ip")
                .args(&s)
                .output()
                .map_err(|e| format!("ip: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "`ip {}` failed: {}",
                    s.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(n)
    }

    fn spawn(&self, ns: &str, args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_irn")])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and with it the pair.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

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
    let root =
        Command::new("id").arg("-u").output().ok().map(|o| o.stdout) == Some(b"0\n".to_vec());
    if !root
        || !Path::new("/usr/sbin/ip").exists()
            && !Path::new("/sbin/ip").exists()
            && !Path::new("/usr/bin/ip").exists()
    {
        precondition_missing(
            "verbs_netns",
            "needs root and iproute2 (ip) to create network namespaces",
        );
        return None;
    }
    match Netns::create() {
        Ok(n) => Some(n),
        Err(e) => {
            precondition_missing(
                "verbs_netns",
                &format!("cannot create network namespaces here: {e}"),
            );
            None
        }
    }
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
