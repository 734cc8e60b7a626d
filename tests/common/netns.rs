//! Two network namespaces joined by a veth pair — two hosts as far as the kernel is concerned —
//! created for a test and removed when it ends, even when it fails. Needs root
//! (CAP_NET_ADMIN) and iproute2; [`Netns::setup`] says why it cannot run otherwise.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use super::precondition_missing;

pub struct Netns {
    pub a: String,
    pub b: String,
    /// The veth ends in `a` and `b`.
    pub dev_a: String,
    pub dev_b: String,
}

impl Netns {
    /// Namespaces `a` at 10.`net`.0.1 and `b` at 10.`net`.0.2, joined by a veth pair; `tag`
    /// keeps the names of concurrent tests apart.
    pub fn create(tag: &str, net: u8) -> Result<Netns, String> {
        let id = std::process::id() % 100_000;
        let n = Netns {
            a: format!("irn-{tag}{id}-a"),
            b: format!("irn-{tag}{id}-b"),
            dev_a: format!("{tag}{id}a"),
            dev_b: format!("{tag}{id}b"),
        };
        let (ip_a, ip_b) = (format!("10.{net}.0.1/24"), format!("10.{net}.0.2/24"));
        let (va, vb) = (&n.dev_a, &n.dev_b);
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &n.a],
            vec!["netns", "add", &n.b],
            vec![
                "link", "add", va, "netns", &n.a, "type", "veth", "peer", "name", vb, "netns", &n.b,
            ],
            vec!["-n", &n.a, "addr", "add", &ip_a, "dev", va],
            vec!["-n", &n.b, "addr", "add", &ip_b, "dev", vb],
            vec!["-n", &n.a, "link", "set", va, "up"],
            vec!["-n", &n.b, "link", "set", vb, "up"],
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

    /// [`Netns::create`], or `None` after [`precondition_missing`] when this machine cannot.
    pub fn setup(test: &str, tag: &str, net: u8) -> Option<Netns> {
        let root =
            Command::new("id").arg("-u").output().ok().map(|o| o.stdout) == Some(b"0\n".to_vec());
        let has_ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"]
            .iter()
            .any(|p| Path::new(p).exists());
        if !root || !has_ip {
            precondition_missing(
                test,
                "needs root and iproute2 (ip) to create network namespaces",
            );
            return None;
        }
        match Netns::create(tag, net) {
            Ok(n) => Some(n),
            Err(e) => {
                precondition_missing(test, &format!("cannot create network namespaces here: {e}"));
                None
            }
        }
    }

    /// Runs `irn ARGS` in namespace `ns`, optionally pinned to one CPU.
    pub fn spawn_on(&self, ns: &str, cpu: Option<usize>, args: &[&str]) -> Child {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        if let Some(cpu) = cpu {
            c.args(["taskset", "-c", &cpu.to_string()]);
        }
        c.arg(env!("CARGO_BIN_EXE_irn"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec")
    }

    pub fn spawn(&self, ns: &str, args: &[&str]) -> Child {
        self.spawn_on(ns, None, args)
    }

    /// The MAC address of `dev` in `ns`.
    pub fn mac(&self, ns: &str, dev: &str) -> String {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "cat",
                &format!("/sys/class/net/{dev}/address"),
            ])
            .output()
            .expect("ip netns exec cat");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
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

/// Runs `ip ARGS`; the command and its complaint if it fails.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}`: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Hosts around a switch: namespaces `host[i]` at 10.`net`.0.(i+1)/24, each joined by a veth
/// pair (`e0` in the host) to port `ports[i]` of namespace `switch`, which has no address —
/// `irn switch` forwards between its ports. IPv6 is off everywhere (no neighbour discovery
/// chatter on the ports) and so are the hosts' transmit offloads (`ethtool -K e0 tx off`:
/// full checksums, no super-frames, as a switch needs). Removed when dropped.
pub struct Star {
    pub hosts: Vec<String>,
    pub switch: String,
    pub ports: Vec<String>,
}

impl Star {
    fn create(tag: &str, net: u8, n: usize) -> Result<Star, String> {
        let id = std::process::id() % 100_000;
        let star = Star {
            hosts: (0..n).map(|i| format!("irn-{tag}{id}-h{i}")).collect(),
            switch: format!("irn-{tag}{id}-sw"),
            ports: (0..n).map(|i| format!("{tag}{id}p{i}")).collect(),
        };
        // No IPv6 (through /proc: procps may not be installed).
        let quiet = |ns: &str| -> Result<(), String> {
            ip(&[
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                "[ ! -d /proc/sys/net/ipv6 ] || { echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 \
                 && echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; }",
            ])
        };
        ip(&["netns", "add", &star.switch])?;
        quiet(&star.switch)?;
        for (i, (h, p)) in star.hosts.iter().zip(&star.ports).enumerate() {
            ip(&["netns", "add", h])?;
            quiet(h)?;
            ip(&[
                "link",
                "add",
                "e0",
                "netns",
                h,
                "type",
                "veth",
                "peer",
                "name",
                p,
                "netns",
                &star.switch,
            ])?;
            ip(&[
                "-n",
                h,
                "addr",
                "add",
                &format!("10.{net}.0.{}/24", i + 1),
                "dev",
                "e0",
            ])?;
            ip(&["-n", h, "link", "set", "e0", "up"])?;
            ip(&["-n", h, "link", "set", "lo", "up"])?;
            ip(&["-n", &star.switch, "link", "set", p, "up"])?;
            ip(&["netns", "exec", h, "ethtool", "-K", "e0", "tx", "off"])?;
        }
        // A veth pair just set up reads operstate down for up to a second: wait until every
        // end is up, so that what starts next (the switch, a ping, a client) sees a link.
        let up = |ns: &str, dev: &str| {
            Command::new("ip")
                .args(["-n", ns, "-o", "link", "show", dev])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("state UP"))
        };
        for _ in 0..50 {
            let all = star
                .hosts
                .iter()
                .zip(&star.ports)
                .all(|(h, p)| up(h, "e0") && up(&star.switch, p));
            if all {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Ok(star)
    }

    /// [`Star::create`], or `None` after [`precondition_missing`] when this machine cannot.
    pub fn setup(test: &str, tag: &str, net: u8, hosts: usize) -> Option<Star> {
        let root =
            Command::new("id").arg("-u").output().ok().map(|o| o.stdout) == Some(b"0\n".to_vec());
        if !root {
            precondition_missing(test, "needs root to create network namespaces");
            return None;
        }
        match Star::create(tag, net, hosts) {
            Ok(s) => Some(s),
            Err(e) => {
                precondition_missing(
                    test,
                    &format!("cannot build namespaces around a switch (iproute2, ethtool): {e}"),
                );
                None
            }
        }
    }

    /// Runs `irn ARGS` in namespace `ns`.
    pub fn spawn(&self, ns: &str, args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(env!("CARGO_BIN_EXE_irn"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec")
    }
}

impl Star {
    /// Starts `irn switch` over every port with `flags` besides the ports (and its report's
    /// file, named `name`), and waits until it says it forwards: nothing starts before, or a
    /// client's TCP SYN lost to a switch still opening its ports is resent a second later.
    pub fn start_switch(&self, name: &str, flags: &[&str]) -> RunningSwitch {
        let ports: Vec<&str> = self.ports.iter().map(String::as_str).collect();
        self.start_switch_on(name, &ports, flags)
    }

    /// [`Star::start_switch`] over `ports` of the switch's namespace only (host ports, trunk
    /// ends): several switches may run there side by side.
    pub fn start_switch_on(&self, name: &str, ports: &[&str], flags: &[&str]) -> RunningSwitch {
        use std::io::BufRead;
        let json = std::env::temp_dir().join(format!("irn-{name}-{}.json", std::process::id()));
        let json_s = json.to_string_lossy().to_string();
        let mut args = vec!["switch"];
        for p in ports {
            args.extend(["--port", p]);
        }
        args.extend(flags);
        args.extend(["--json", &json_s]);
        let mut child = self.spawn(&self.switch, &args);
        let mut err = std::io::BufReader::new(child.stderr.take().expect("the switch's stderr"));
        let mut ready = String::new();
        let _ = err.read_line(&mut ready);
        assert!(ready.contains("forwarding"), "switch: {ready}");
        RunningSwitch { child, err, json }
    }

    /// A veth pair `a`–`b` inside the switch's namespace, both ends up: a link between two
    /// switches running there ([`Star::start_switch_on`]).
    pub fn trunk(&self, a: &str, b: &str) -> Result<(), String> {
        let sw = self.switch.as_str();
        ip(&[
            "-n", sw, "link", "add", a, "type", "veth", "peer", "name", b,
        ])?;
        ip(&["-n", sw, "link", "set", a, "up"])?;
        ip(&["-n", sw, "link", "set", b, "up"])?;
        for _ in 0..50 {
            let up = [a, b].iter().all(|d| {
                Command::new("ip")
                    .args(["-n", sw, "-o", "link", "show", d])
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("state UP"))
            });
            if up {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(format!("{a}–{b} never came up"))
    }

    /// Waits (at most 10 s) until something in namespace `ns` listens on each TCP `port`
    /// (`/proc/net/tcp` and `tcp6` read from inside it), so that clients started next start
    /// together: a client that meets a server not yet listening starts again later, and a
    /// test comparing two flows' rates would compare a flow that ran alone for part of its
    /// time with one that did not.
    pub fn wait_listening(&self, ns: &str, ports: &[u16]) {
        let listening = |port: u16| {
            ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
                Command::new("ip")
                    .args(["netns", "exec", ns, "cat", table])
                    .output()
                    .is_ok_and(|o| listens(&String::from_utf8_lossy(&o.stdout), port))
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if ports.iter().all(|&p| listening(p)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("nothing in {ns} listened on every port of {ports:?} within 10 s");
    }

    /// Runs `irn ARGS` in namespace `ns` to completion (at most `secs`), again while its
    /// server (in `server_ns`) has not started listening.
    pub fn client(&self, ns: &str, args: &[&str], server_ns: &str, secs: u64) -> Output {
        for _ in 0..100 {
            let out = super::finish(self.spawn(ns, args), secs);
            if String::from_utf8_lossy(&out.stderr).contains("Connection refused") {
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
            return out;
        }
        panic!("the server in {server_ns} never listened");
    }
}

/// An `irn switch` started by [`Star::start_switch`].
pub struct RunningSwitch {
    child: Child,
    err: std::io::BufReader<std::process::ChildStderr>,
    json: std::path::PathBuf,
}

impl RunningSwitch {
    /// Waits for the switch to stop by itself (at most `secs`), checks that it ended well,
    /// and returns its report.
    pub fn report(self, secs: u64) -> serde_json::Value {
        self.report_and_log(secs).0
    }

    /// [`RunningSwitch::report`], and what the switch said on standard error after it
    /// started forwarding.
    pub fn report_and_log(mut self, secs: u64) -> (serde_json::Value, String) {
        use std::io::Read;
        let sw = super::finish(self.child, secs);
        let mut rest = String::new();
        let _ = self.err.read_to_string(&mut rest);
        assert!(sw.status.success(), "switch: {}{rest}", super::text(&sw));
        let report =
            serde_json::from_str(&std::fs::read_to_string(&self.json).expect("the switch's JSON"))
                .expect("JSON");
        let _ = std::fs::remove_file(&self.json);
        (report, rest)
    }
}

impl Drop for Star {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends, and with them the pairs.
        for ns in self.hosts.iter().chain([&self.switch]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Whether a `/proc/net/tcp` table lists a socket listening (state `0A`) on local `port`.
fn listens(table: &str, port: u16) -> bool {
    let port = format!(":{port:04X}");
    table.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1).unwrap_or("");
        let state = fields.nth(1).unwrap_or("");
        local.ends_with(&port) && state == "0A"
    })
}
