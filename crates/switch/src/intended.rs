//! Configuration monitoring (seed 001 §5.1, SPEC N9): the switch checks what it runs against
//! the intended configuration of the fabric, and reports every difference.
//!
//! In production, enabling RDMA configures PFC at the switches — a global part (buffer,
//! DSCP classification, queues, their bandwidth) and a per-port part — and a monitoring
//! service checks that every switch's running configuration is the intended one, since any
//! of it can drift. Here the intended configuration is a TOML file (`irn switch --intended
//! FILE`, [`Intended`]) that names only what it cares about, so that one file can serve
//! every switch of a fabric:
//!
//! ```toml
//! pfc = [3]            # the lossless priorities
//! ecn = "red"          # and kmin, kmax, pmax
//! buffer_model = "shared"
//! mtu = 1500           # every port's
//! up = true            # every port's link
//! [port.sw0p1]         # one port's own, over the above
//! mtu = 9000
//! ```
//!
//! The switch-wide keys — `rate` (bits per second, or `"10g"`), `buffer_model`
//! (`"per-queue"`, `"shared"`), `buffer` (bytes per queue, or the pool's), `xoff`,
//! `headroom`, `alpha`, `pfc_alpha`, `pfc`, `pause`, `pause_quanta`, `ecn`, `kmin`, `kmax`,
//! `pmax`, `classify`, `trust` (`"dscp"`, `"pcp"`), `routed`, `scheduler` (`"strict"`,
//! `"dwrr"`), `dwrr` — are compared with the
//! switch's own settings once, when it starts; the per-port keys — `mtu` and `up` (the
//! link's operational state), for every port or in a `[port.NAME]` table, and a table naming
//! a port the switch does not have — are read from the interfaces
//! (`/sys/class/net/NAME/{mtu,operstate}`) at start and every `--config-check` seconds, since
//! an interface can change under a running switch. [`ConfigMonitor`] records each difference
//! once, with when a check first found it and when one found it set right; the switch
//! reports them (`config_findings`) and says so on standard error as they come, change and
//! go.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use irn_sim::config::{EcnMode, Trust};

use crate::egress::Classify;
use crate::mmu::Buffer;
use crate::Options;

/// The intended configuration: every key optional, only those given are checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intended {
    /// Egress rate, bits per second: a number, or a string as `--rate` takes it.
    pub rate: Option<Rate>,
    /// `per-queue` or `shared`.
    pub buffer_model: Option<String>,
    /// Bytes per queue, or the shared pool's.
    pub buffer: Option<u64>,
    /// Per queue: the pause threshold, bytes.
    pub xoff: Option<u64>,
    /// Shared: headroom per (port, lossless priority), bytes.
    pub headroom: Option<u64>,
    /// Shared: the dynamic threshold's α for lossy queues.
    pub alpha: Option<f64>,
    /// Shared: the α at which a lossless ingress pauses.
    pub pfc_alpha: Option<f64>,
    /// The priorities PFC makes lossless (in any order).
    pub pfc: Option<Vec<u8>>,
    /// 802.3x PAUSE on every port.
    pub pause: Option<bool>,
    /// The quanta a pause frame carries.
    pub pause_quanta: Option<u16>,
    /// ECN marking: `off`, `red`, `threshold`.
    pub ecn: Option<EcnMode>,
    /// ECN K_min, bytes.
    pub kmin: Option<u64>,
    /// RED's K_max, bytes.
    pub kmax: Option<u64>,
    /// RED's P_max.
    pub pmax: Option<f64>,
    /// Which frames the priorities hold: `udp` or `ip`.
    pub classify: Option<Classify>,
    /// What a frame's priority is read from: `dscp` or `pcp` (a switch trusting PCP in a
    /// routed fabric loses PFC past the first hop: seed 001 §3).
    pub trust: Option<Trust>,
    /// The switch routes (sends frames on without their 802.1Q tag).
    pub routed: Option<bool>,
    /// `strict` or `dwrr`.
    pub scheduler: Option<String>,
    /// DWRR weights, priority 0 to 7.
    pub dwrr: Option<Vec<u32>>,
    /// Every port's MTU.
    pub mtu: Option<u32>,
    /// Every port's link is up.
    pub up: Option<bool>,
    /// Per port, over the above.
    #[serde(default)]
    pub port: BTreeMap<String, PortIntent>,
}

/// A rate as the intended file gives it: bits per second, or `"10g"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Rate {
    /// Bits per second.
    Bps(u64),
    /// As `--rate` takes it.
    Text(String),
}

/// What one port should run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortIntent {
    /// Its MTU.
    pub mtu: Option<u32>,
    /// Its link is up.
    pub up: Option<bool>,
}

/// Why an intended configuration cannot be read, naming the file and the key.
#[derive(Debug, thiserror::Error)]
#[error("--intended {file}: {what}")]
pub struct IntendedError {
    /// The file.
    pub file: String,
    /// What is wrong, with the key.
    pub what: String,
}

impl Intended {
    /// Reads and checks the intended configuration in `path`.
    pub fn load(path: &Path) -> Result<Intended, IntendedError> {
        let err = |what: String| IntendedError {
            file: path.display().to_string(),
            what,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let intended: Intended = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        intended.check().map_err(err)?;
        Ok(intended)
    }

    /// Refuses values that cannot mean anything, naming the key.
    fn check(&self) -> Result<(), String> {
        if let Some(Rate::Text(t)) = &self.rate {
            crate::parse_rate(t).map_err(|e| format!("rate: {e}"))?;
        }
        if let Some(m) = &self.buffer_model {
            if m != "per-queue" && m != "shared" {
                return Err(format!("buffer_model: per-queue or shared, not {m:?}"));
            }
        }
        if let Some(s) = &self.scheduler {
            if s != "strict" && s != "dwrr" {
                return Err(format!("scheduler: strict or dwrr, not {s:?}"));
            }
        }
        if let Some(p) = self.pfc.iter().flatten().find(|&&p| p > 7) {
            return Err(format!("pfc: priorities are 0 to 7, not {p}"));
        }
        if self.dwrr.as_ref().is_some_and(|w| w.len() != 8) {
            return Err("dwrr: one weight per priority 0 to 7 (8 of them)".into());
        }
        Ok(())
    }

    /// The switch-wide settings it names, as (key, canonical value).
    fn settings(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut put = |k: &'static str, v: Option<String>| {
            if let Some(v) = v {
                out.push((k, v));
            }
        };
        put(
            "rate",
            self.rate.as_ref().map(|r| match r {
                Rate::Bps(b) => b.to_string(),
                Rate::Text(t) => crate::parse_rate(t).map_or_else(|e| e, |b| b.to_string()),
            }),
        );
        put("buffer_model", self.buffer_model.clone());
        put("buffer", self.buffer.map(|b| b.to_string()));
        put("xoff", self.xoff.map(|b| b.to_string()));
        put("headroom", self.headroom.map(|b| b.to_string()));
        put("alpha", self.alpha.map(|a| a.to_string()));
        put("pfc_alpha", self.pfc_alpha.map(|a| a.to_string()));
        put("pfc", self.pfc.as_deref().map(priorities));
        put("pause", self.pause.map(|p| p.to_string()));
        put("pause_quanta", self.pause_quanta.map(|q| q.to_string()));
        put("ecn", self.ecn.map(ecn_name));
        put("kmin", self.kmin.map(|b| b.to_string()));
        put("kmax", self.kmax.map(|b| b.to_string()));
        put("pmax", self.pmax.map(|p| p.to_string()));
        put("classify", self.classify.map(classify_name));
        put("trust", self.trust.map(trust_name));
        put("routed", self.routed.map(|r| r.to_string()));
        put("scheduler", self.scheduler.clone());
        put("dwrr", self.dwrr.as_deref().map(weights));
        out
    }

    /// What port `port` should run: its table's keys over the file's.
    fn port_intent(&self, port: &str) -> PortIntent {
        let own = self.port.get(port).cloned().unwrap_or_default();
        PortIntent {
            mtu: own.mtu.or(self.mtu),
            up: own.up.or(self.up),
        }
    }
}

/// A set of priorities as one canonical string: sorted, without repeats, `3,4`; `none`.
fn priorities(p: &[u8]) -> String {
    let mut v = p.to_vec();
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
}

fn weights(w: &[u32]) -> String {
    w.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn ecn_name(e: EcnMode) -> String {
    match e {
        EcnMode::Off => "off",
        EcnMode::Red => "red",
        EcnMode::Threshold => "threshold",
    }
    .into()
}

fn trust_name(t: Trust) -> String {
    match t {
        Trust::Dscp => "dscp",
        Trust::Pcp => "pcp",
    }
    .into()
}

fn classify_name(c: Classify) -> String {
    match c {
        Classify::Udp => "udp",
        Classify::Ip => "ip",
    }
    .into()
}

impl Options {
    /// What the switch runs, switch-wide, as (key, canonical value) — the keys of
    /// [`Intended`]; a setting its memory layout does not have is `none`.
    pub fn running(&self, layout: Buffer) -> BTreeMap<&'static str, String> {
        let none = || "none".to_string();
        let (model, buffer, xoff, headroom, alpha, pfc_alpha) = match layout {
            Buffer::PerQueue { bytes, xoff } => {
                ("per-queue", bytes, xoff.to_string(), none(), none(), none())
            }
            Buffer::Shared {
                bytes,
                headroom,
                alpha,
                pfc_alpha,
            } => (
                "shared",
                bytes,
                none(),
                headroom.to_string(),
                alpha.to_string(),
                pfc_alpha.to_string(),
            ),
        };
        BTreeMap::from([
            ("rate", self.rate_bps.to_string()),
            ("buffer_model", model.to_string()),
            ("buffer", buffer.to_string()),
            ("xoff", xoff),
            ("headroom", headroom),
            ("alpha", alpha),
            ("pfc_alpha", pfc_alpha),
            ("pfc", priorities(&self.pfc)),
            ("pause", self.pause.to_string()),
            ("pause_quanta", self.pause_quanta.to_string()),
            ("ecn", ecn_name(self.ecn)),
            ("kmin", self.kmin.to_string()),
            ("kmax", self.kmax.to_string()),
            ("pmax", self.pmax.to_string()),
            ("classify", classify_name(self.classify)),
            ("trust", trust_name(self.trust)),
            ("routed", self.routed.to_string()),
            (
                "scheduler",
                if self.dwrr.is_some() {
                    "dwrr"
                } else {
                    "strict"
                }
                .to_string(),
            ),
            ("dwrr", self.dwrr.as_deref().map_or_else(none, weights)),
        ])
    }
}

/// What a port runs, as the check reads it; `None` for what could not be read (the
/// interface is gone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortState {
    /// Its MTU.
    pub mtu: Option<u32>,
    /// Whether its link is up.
    pub up: Option<bool>,
}

impl PortState {
    /// Reads interface `port` from sysfs (the switch's network namespace's).
    pub fn read(port: &str) -> PortState {
        let read = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{port}/{f}")).ok();
        PortState {
            mtu: read("mtu").and_then(|s| s.trim().parse().ok()),
            up: read("operstate").map(|s| s.trim() == "up"),
        }
    }
}

/// A difference between what the switch runs and what is intended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigFinding {
    /// The port, for a per-port setting; `null` for a switch-wide one.
    pub port: Option<String>,
    /// The setting (the intended file's key; `present` for a port the file names and the
    /// switch does not have).
    pub key: String,
    /// What is intended.
    pub intended: String,
    /// What the switch ran at the last check that found it wrong (a value that changes while
    /// still wrong is said as it changes, [`Change::Changed`]).
    pub running: String,
    /// When a check first found it, seconds since the switch started.
    pub found_s: f64,
    /// When a check found it set right (absent: still wrong at the end).
    pub cleared_s: Option<f64>,
}

/// The checks' findings, and which are still open.
#[derive(Debug)]
pub struct ConfigMonitor {
    intended: Intended,
    /// Every finding, in the order found.
    pub findings: Vec<ConfigFinding>,
    /// (port, key) → its open finding.
    open: BTreeMap<(Option<String>, &'static str), usize>,
    /// Checks made.
    pub checks: u64,
}

/// A finding as it begins or ends, for the operator's log.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A difference a check found.
    Found(ConfigFinding),
    /// A difference a check found set right.
    Cleared(ConfigFinding),
    /// A difference still open whose running value changed to another wrong one: the
    /// finding as it is now, and the value it had.
    Changed(ConfigFinding, String),
}

impl ConfigMonitor {
    /// A monitor of `intended`.
    pub fn new(intended: Intended) -> ConfigMonitor {
        ConfigMonitor {
            intended,
            findings: Vec::new(),
            open: BTreeMap::new(),
            checks: 0,
        }
    }

    /// Compares the switch-wide settings the switch runs (`running`, [`Options::running`])
    /// with the intended ones, at `now_s` seconds.
    pub fn check_settings(
        &mut self,
        running: &BTreeMap<&'static str, String>,
        now_s: f64,
    ) -> Vec<Change> {
        let seen: Vec<(Option<String>, &'static str, String, String)> = self
            .intended
            .settings()
            .into_iter()
            .map(|(k, want)| {
                let have = running.get(k).cloned().unwrap_or_else(|| "none".into());
                (None, k, want, have)
            })
            .collect();
        self.record(seen, now_s)
    }

    /// Compares the ports the switch runs (`ports`, each with what [`PortState::read`] or
    /// another reader found) with the intended ones, at `now_s` seconds.
    pub fn check_ports(&mut self, ports: &[(String, PortState)], now_s: f64) -> Vec<Change> {
        self.checks += 1;
        let show = |v: Option<String>| v.unwrap_or_else(|| "absent".into());
        let mut seen = Vec::new();
        for (name, state) in ports {
            let want = self.intended.port_intent(name);
            if let Some(mtu) = want.mtu {
                seen.push((
                    Some(name.clone()),
                    "mtu",
                    mtu.to_string(),
                    show(state.mtu.map(|m| m.to_string())),
                ));
            }
            if let Some(up) = want.up {
                let have = state.up.map(|u| if u { "up" } else { "down" }.to_string());
                let want = if up { "up" } else { "down" }.to_string();
                seen.push((Some(name.clone()), "up", want, show(have)));
            }
        }
        for name in self.intended.port.keys() {
            if !ports.iter().any(|(p, _)| p == name) {
                seen.push((
                    Some(name.clone()),
                    "present",
                    "present".into(),
                    "absent".into(),
                ));
            }
        }
        self.record(seen, now_s)
    }

    /// Opens a finding for every (port, key) whose intended and running values differ and
    /// that has none open; closes the open ones now right.
    fn record(
        &mut self,
        seen: Vec<(Option<String>, &'static str, String, String)>,
        now_s: f64,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        for (port, key, intended, running) in seen {
            let id = (port.clone(), key);
            match (self.open.get(&id).copied(), intended == running) {
                (None, false) => {
                    let f = ConfigFinding {
                        port,
                        key: key.to_string(),
                        intended,
                        running,
                        found_s: now_s,
                        cleared_s: None,
                    };
                    self.open.insert(id, self.findings.len());
                    changes.push(Change::Found(f.clone()));
                    self.findings.push(f);
                }
                (Some(i), true) => {
                    self.open.remove(&id);
                    self.findings[i].cleared_s = Some(now_s);
                    changes.push(Change::Cleared(self.findings[i].clone()));
                }
                (Some(i), false) if self.findings[i].running != running => {
                    let was = std::mem::replace(&mut self.findings[i].running, running);
                    changes.push(Change::Changed(self.findings[i].clone(), was));
                }
                // Still wrong the same way, or still right.
                _ => {}
            }
        }
        changes
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |c: &ConfigFinding| match &c.port {
            Some(p) => format!("port {p}: {}", c.key),
            None => c.key.clone(),
        };
        match self {
            Change::Found(c) => write!(
                f,
                "configuration drift: {} is {}, intended {}",
                at(c),
                c.running,
                c.intended
            ),
            Change::Cleared(c) => write!(f, "configuration: {} is {} again", at(c), c.intended),
            Change::Changed(c, was) => write!(
                f,
                "configuration drift: {} is {} (was {was}), intended {}",
                at(c),
                c.running,
                c.intended
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            buffer: 100_000,
            pfc: vec![4, 3],
            ..Options::new(&["a", "b"])
        }
    }

    fn intended(text: &str) -> Intended {
        let i: Intended = toml::from_str(text).expect("toml");
        i.check().expect("valid");
        i
    }

    #[test]
    fn a_switch_started_as_intended_has_no_finding_and_each_difference_is_named_once() {
        let o = options();
        let running = o.running(o.buffer_layout(1514, 1_000_000_000));
        let good = intended(
            r#"
            rate = "1g"
            buffer_model = "per-queue"
            buffer = 100000
            xoff = 75000
            pfc = [3, 4]
            ecn = "red"
            pmax = 0.2
            classify = "udp"
            trust = "dscp"
            routed = false
            scheduler = "strict"
            "#,
        );
        let mut m = ConfigMonitor::new(good);
        assert!(m.check_settings(&running, 0.0).is_empty());
        assert!(m.findings.is_empty());
        // Another fabric's intent: PFC on 3 only, ECN off, a shared pool at 10 Gb/s.
        let other = intended(
            r#"
            rate = 10000000000
            buffer_model = "shared"
            headroom = 60000
            pfc = [3]
            ecn = "off"
            trust = "pcp"
            "#,
        );
        let mut m = ConfigMonitor::new(other);
        let found = m.check_settings(&running, 0.0);
        let keys: Vec<(&str, &str, &str)> = m
            .findings
            .iter()
            .map(|f| (f.key.as_str(), f.intended.as_str(), f.running.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("rate", "10000000000", "1000000000"),
                ("buffer_model", "shared", "per-queue"),
                ("headroom", "60000", "none"),
                ("pfc", "3", "3,4"),
                ("ecn", "off", "red"),
                ("trust", "pcp", "dscp"),
            ]
        );
        assert_eq!(found.len(), 6);
        assert_eq!(
            found[3].to_string(),
            "configuration drift: pfc is 3,4, intended 3"
        );
        // Checked again: the same findings, not new ones.
        assert!(m.check_settings(&running, 1.0).is_empty());
        assert_eq!(m.findings.len(), 6);
    }

    #[test]
    fn port_drift_is_found_when_it_happens_and_cleared_when_it_is_set_right() {
        let mut m = ConfigMonitor::new(intended(
            r#"
            mtu = 1500
            up = true
            [port.b]
            mtu = 9000
            [port.c]
            up = true
            "#,
        ));
        let st = |mtu: u32, up: bool| PortState {
            mtu: Some(mtu),
            up: Some(up),
        };
        let ports = |a: PortState, b: PortState| vec![("a".to_string(), a), ("b".to_string(), b)];
        // Port c is intended and absent from the start.
        let c0 = m.check_ports(&ports(st(1500, true), st(9000, true)), 0.0);
        assert_eq!(c0.len(), 1);
        assert_eq!(
            c0[0].to_string(),
            "configuration drift: port c: present is absent, intended present"
        );
        // Port a's MTU drifts, then its link goes down; b's table wins over the file's MTU.
        let c1 = m.check_ports(&ports(st(1400, true), st(9000, true)), 1.0);
        let c2 = m.check_ports(&ports(st(1400, false), st(9000, true)), 2.0);
        assert_eq!((c1.len(), c2.len()), (1, 1));
        // Set right again, both clear, each at its own check.
        // Port a's MTU drifts again, to another wrong value: said, and the finding follows.
        let again = m.check_ports(&ports(st(1450, false), st(9000, true)), 2.5);
        assert_eq!(
            again.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["configuration drift: port a: mtu is 1450 (was 1400), intended 1500"]
        );
        let c3 = m.check_ports(&ports(st(1500, false), st(9000, true)), 3.0);
        let c4 = m.check_ports(&ports(st(1500, true), st(9000, true)), 4.0);
        assert!(matches!(&c3[..], [Change::Cleared(f)] if f.key == "mtu"));
        assert_eq!(c4[0].to_string(), "configuration: port a: up is up again");
        let summary: Vec<(&str, &str, f64, Option<f64>)> = m
            .findings
            .iter()
            .map(|f| (f.key.as_str(), f.running.as_str(), f.found_s, f.cleared_s))
            .collect();
        assert_eq!(
            summary,
            [
                ("present", "absent", 0.0, None),
                ("mtu", "1450", 1.0, Some(3.0)),
                ("up", "down", 2.0, Some(4.0)),
            ]
        );
        assert_eq!(m.checks, 6);
        // An interface that vanished reads as absent.
        let gone = m.check_ports(&ports(PortState::default(), st(9000, true)), 5.0);
        assert_eq!(gone.len(), 2);
        assert!(m.findings.iter().skip(3).all(|f| f.running == "absent"));
    }

    #[test]
    fn an_intended_file_that_cannot_mean_anything_is_refused_naming_the_key() {
        let dir = std::env::temp_dir().join(format!("irn-intended-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let load = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write");
            Intended::load(&path).expect_err("refused").to_string()
        };
        let e = load("unknown.toml", "pfcs = [3]\n");
        assert!(e.contains("unknown.toml") && e.contains("pfcs"), "{e}");
        let e = load("prio.toml", "pfc = [9]\n");
        assert!(e.contains("pfc: priorities are 0 to 7, not 9"), "{e}");
        let e = load("rate.toml", "rate = \"fast\"\n");
        assert!(e.contains("rate:"), "{e}");
        let e = load("model.toml", "buffer_model = \"deep\"\n");
        assert!(e.contains("buffer_model: per-queue or shared"), "{e}");
        let e = load("port.toml", "[port.a]\nspeed = 10\n");
        assert!(e.contains("speed"), "{e}");
        let path = dir.join("ok.toml");
        std::fs::write(&path, "pfc = [3]\n[port.a]\nmtu = 1500\n").expect("write");
        let ok = Intended::load(&path).expect("loads");
        assert_eq!(ok.port_intent("a").mtu, Some(1500));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
