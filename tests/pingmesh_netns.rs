//! `irn pingmesh` across four network namespaces on one bridge — four hosts under one
//! switch as far as the kernel is concerned — with two faults: host 3's link loses every
//! frame (its veth is down: a dead link), and host 4 is slow — every packet it receives is
//! held 5 ms (irn's own `--delay-us` impairment at its receive path: netem would be the
//! natural tool, but the CI machine's kernel has no sch_netem, and a token bucket delays
//! nothing at a probe's rate). Every agent probes the other three with 512-byte RDMA Writes;
//! the fabric-wide summary of the four agents' JSON lines must name exactly those two hosts,
//! the dead one for its failed probes and the slow one for its RTTs. Needs root and iproute2;
//! without them it says why and skips (in CI it fails).

use std::process::{Command, Stdio};

mod common;
use common::netns::ip;
use common::{finish, precondition_missing, text};

struct Mesh {
    bridge: String,
    hosts: Vec<(String, String)>,
}

impl Mesh {
    /// Namespaces h1…h4 at 10.233.0.1–4, each with a veth to a bridge in its own namespace.
    fn create() -> Result<Mesh, String> {
        let id = std::process::id() % 100_000;
        let m = Mesh {
            bridge: format!("irn-pm{id}-br"),
            hosts: (1..=4)
                .map(|i| (format!("irn-pm{id}-h{i}"), format!("pm{id}h{i}")))
                .collect(),
        };
        ip(&["netns", "add", &m.bridge])?;
        ip(&["-n", &m.bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &m.bridge, "link", "set", "br0", "up"])?;
        for (i, (ns, dev)) in m.hosts.iter().enumerate() {
            let port = format!("pm{id}s{}", i + 1);
            let addr = format!("10.233.0.{}/24", i + 1);
            ip(&["netns", "add", ns])?;
            ip(&[
                "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", &port, "netns",
                &m.bridge,
            ])?;
            ip(&["-n", ns, "addr", "add", &addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &m.bridge, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &m.bridge, "link", "set", &port, "up"])?;
        }
        Ok(m)
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        for (ns, _) in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.bridge])
            .output();
    }
}

#[test]
fn pingmesh_names_the_dead_and_the_slow_host() {
    const TEST: &str = "pingmesh_names_the_dead_and_the_slow_host";
    let root =
        Command::new("id").arg("-u").output().ok().map(|o| o.stdout) == Some(b"0\n".to_vec());
    if !root {
        precondition_missing(TEST, "needs root to create network namespaces");
        return;
    }
    let mesh = match Mesh::create() {
        Ok(m) => m,
        Err(e) => {
            precondition_missing(TEST, &format!("cannot create network namespaces: {e}"));
            return;
        }
    };
    if let Err(e) = ip(&[
        "-n",
        &mesh.hosts[2].0,
        "link",
        "set",
        &mesh.hosts[2].1,
        "down",
    ]) {
        precondition_missing(TEST, &format!("cannot take a link down: {e}"));
        return;
    }
    let dir = std::env::temp_dir().join(format!("irn-pingmesh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let hosts = dir.join("hosts.txt");
    std::fs::write(
        &hosts,
        "# one ToR\n10.233.0.1 tor=t0\n10.233.0.2 tor=t0\n10.233.0.3 tor=t0\n10.233.0.4 tor=t0\n",
    )
    .expect("write");
    let hosts_arg = hosts.to_string_lossy().to_string();
    let outs: Vec<String> = (1..=4)
        .map(|i| {
            dir.join(format!("h{i}.jsonl"))
                .to_string_lossy()
                .to_string()
        })
        .collect();
    let agents: Vec<_> = mesh
        .hosts
        .iter()
        .zip(&outs)
        .enumerate()
        .map(|(i, ((ns, _), out))| {
            let delay = if i == 3 { "5000" } else { "0" };
            Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(env!("CARGO_BIN_EXE_irn"))
                .args([
                    "pingmesh",
                    "--hosts",
                    &hosts_arg,
                    "--duration-s",
                    "4",
                    "--interval-ms",
                    "100",
                    "--timeout-ms",
                    "300",
                    "--out",
                    out,
                    "--delay-us",
                    delay,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("ip netns exec")
        })
        .collect();
    for (i, a) in agents.into_iter().enumerate() {
        let o = finish(a, 60);
        assert!(o.status.success(), "agent {}: {}", i + 1, text(&o));
    }
    // Every agent probed; the healthy ones saw most of their probes to host 1 and 2 succeed.
    for (i, out) in outs.iter().enumerate() {
        let lines = std::fs::read_to_string(out).expect("probe lines");
        assert!(lines.lines().count() >= 3, "agent {}: {lines}", i + 1);
    }
    let summary = dir.join("summary.json");
    let mut args = vec!["pingmesh".to_string(), "--summarize".to_string()];
    args.extend(outs.iter().cloned());
    args.extend([
        "--summary".to_string(),
        summary.to_string_lossy().to_string(),
    ]);
    let o = Command::new(env!("CARGO_BIN_EXE_irn"))
        .args(&args)
        .output()
        .expect("summarize");
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("json");
    let hosts_of = s["hosts"].as_array().expect("hosts").clone();
    let named: Vec<(String, String)> = s["suspects"]
        .as_array()
        .expect("suspects")
        .iter()
        .map(|x| {
            let h = &hosts_of[x["server"].as_u64().expect("server") as usize];
            (
                h.as_str().expect("address").to_string(),
                x["reason"].as_str().expect("reason").to_string(),
            )
        })
        .collect();
    assert_eq!(named.len(), 2, "{named:?}\n{}", text(&o));
    assert_eq!(named[0].0, "10.233.0.3", "{named:?}");
    assert!(named[0].1.contains("failed"), "{named:?}");
    assert_eq!(named[1].0, "10.233.0.4", "{named:?}");
    assert!(named[1].1.contains("median RTT"), "{named:?}");
    // The healthy pair's probes succeeded in well under the delay.
    let lines = std::fs::read_to_string(&outs[0]).expect("h1");
    let ok_to_2 = lines
        .lines()
        .filter(|l| l.contains("\"dst\":\"10.233.0.2\"") && l.contains("IBV_WC_SUCCESS"))
        .count();
    assert!(ok_to_2 >= 5, "{lines}");
    let _ = std::fs::remove_dir_all(&dir);
}
