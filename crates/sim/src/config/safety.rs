//! The production-RoCEv2 safety settings of seed 001 (Guo et al., "RDMA over Commodity
//! Ethernet at Scale", SIGCOMM 2016, §4–§5; SPEC N4, N5, N6, N9): layer-2 forwarding at the
//! ToR (`[l2]`), the NIC and switch PFC watchdogs (`[watchdog]`), deadlock detection
//! (`[deadlock]`), fault events (`[[fault]]`), RDMA Pingmesh (`[pingmesh]`) and the NIC's
//! memory-translation cache (in `[nic]`, see [`NicConfig`](super::NicConfig)).

use serde::{Deserialize, Serialize};

use super::check;

/// What a ToR does with a packet for one of its servers whose IP→MAC (ARP) entry exists but
/// whose MAC→port entry does not — an *incomplete* ARP entry (seed 001 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownUnicast {
    /// Flood it to every port but the one it came in on, in its own class (standard Ethernet
    /// behaviour; what deadlocked the paper's cluster).
    Flood,
    /// Drop it if it is lossless, flood it if lossy: the paper's fix (option 3).
    DropLossless,
    /// Flood it, but in the lossy class of `l2.flood_dscp` — the paper's lesson that
    /// broadcast and flooded traffic must never be lossless.
    FloodLossy,
}

/// `[l2]`: the ToR's ARP and MAC tables (seed 001 §4.2). A ToR learns a server's MAC→port
/// entry from every frame the server sends (and forgets it when the link goes down, or
/// `mac_timeout_s` after the last frame); the ARP entry outlives it by `arp_timeout_s`
/// (refreshed by the switch CPU while the server answers ARP, i.e. while it is up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct L2Config {
    /// ARP entry lifetime after the server was last heard, seconds. Default 14 400 (4 h).
    pub arp_timeout_s: f64,
    /// MAC entry lifetime after the server's last frame, seconds. Default 300 (5 min).
    pub mac_timeout_s: f64,
    /// `flood` (default), `drop-lossless` or `flood-lossy`.
    pub unknown_unicast: UnknownUnicast,
    /// DSCP that flooded copies take with `flood-lossy`; its priority must be lossy.
    /// Default 0 (priority 0, best effort).
    pub flood_dscp: u8,
}

impl Default for L2Config {
    fn default() -> Self {
        L2Config {
            arp_timeout_s: 14_400.0,
            mac_timeout_s: 300.0,
            unknown_unicast: UnknownUnicast::Flood,
            flood_dscp: 0,
        }
    }
}

/// The switch PFC watchdog's action on a storm (SONiC `pfcwd`'s actions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchWatchdog {
    /// No switch watchdog (default).
    Off,
    /// Disable lossless on the stormed (port, priority): drop what is queued for it and what
    /// arrives for it or from it in that priority, ignore its pauses, send it none.
    Drop,
    /// Ignore the port's pauses on that priority and keep transmitting.
    Forward,
    /// Only count the storm.
    Alert,
}

/// `[watchdog]`: seed 001 §4.3's two watchdogs against a NIC's pause-frame storm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchdogConfig {
    /// The NIC watchdog: a receive pipeline that has not moved for `nic_watchdog_ms` while
    /// the NIC pauses its switch stops the NIC from pausing, for good. Default false.
    pub nic: bool,
    /// Default 100 (the paper's).
    pub nic_watchdog_ms: f64,
    /// The switch watchdog on server-facing ports: `off` (default), `drop`, `forward`,
    /// `alert`.
    pub switch: SwitchWatchdog,
    /// The switch watchdog's polling interval, ms. Default 100 (SONiC's).
    pub poll_ms: f64,
    /// A queue is stormed after this long with packets queued, nothing transmitted and
    /// pauses received, ms. Default 200.
    pub detection_ms: f64,
    /// A stormed queue is restored after this long without pauses received, ms. Default 200.
    pub restoration_ms: f64,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            nic: false,
            nic_watchdog_ms: 100.0,
            switch: SwitchWatchdog::Off,
            poll_ms: 100.0,
            detection_ms: 200.0,
            restoration_ms: 200.0,
        }
    }
}

impl WatchdogConfig {
    /// Whether either watchdog runs.
    pub fn any(&self) -> bool {
        self.nic || self.switch != SwitchWatchdog::Off
    }
}

/// `[deadlock]`: the run reports a PFC deadlock when a cycle of paused (switch port,
/// priority) pairs, each holding packets and none transmitting, has lasted `detect_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadlockConfig {
    /// How long a cycle must persist, ms; 0 turns detection off. Default 10.
    pub detect_ms: f64,
    /// How often the fabric is checked, µs. Default 1000.
    pub check_us: f64,
}

impl Default for DeadlockConfig {
    fn default() -> Self {
        DeadlockConfig {
            detect_ms: 10.0,
            check_us: 1000.0,
        }
    }
}

/// What goes wrong in a fault event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The server dies: its link goes down (its ToR forgets its MAC entry, keeps the ARP
    /// entry), it sends and receives nothing, and its queue pairs are gone. At `until_ms` it
    /// boots again and announces itself (its ToR relearns the MAC); queue pairs that existed
    /// before stay gone.
    HostDown,
    /// The NIC's receive pipeline stops (seed 001 §4.3's NIC bug): frames pile up in its
    /// receive buffer, which pauses the ToR once full. At `until_ms` it runs again.
    NicRxStall,
    /// Configuration drift at the switch (seed 001 §5.1: PFC's per-port part): the ToR's
    /// port to the host runs with PFC off — its ingress never pauses the host and drops when
    /// full, and pauses the host sends it are ignored. At `until_ms` it is set right again.
    TorPfcOff,
    /// Configuration drift at the switch: the host's ToR stops ECN marking.
    TorEcnOff,
    /// Configuration drift at the server (its traffic configuration): the host's NIC sends
    /// its data packets with DSCP `dscp` instead of its classes' own.
    NicDscp,
}

/// `[[fault]]`: one fault event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// `host-down`, `nic-rx-stall`, or a configuration drift: `tor-pfc-off`, `tor-ecn-off`,
    /// `nic-dscp`.
    pub kind: FaultKind,
    /// The host.
    pub host: u32,
    /// When it happens, ms.
    pub at_ms: f64,
    /// When it ends (absent: never), ms.
    #[serde(default)]
    pub until_ms: Option<f64>,
    /// `nic-dscp`: the DSCP the NIC sends its data with.
    #[serde(default)]
    pub dscp: Option<u8>,
}

/// Which pairs a Pingmesh level probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PingLevel {
    /// Servers under the same ToR.
    Tor,
    /// Servers in the same pod (podset), under different ToRs.
    Pod,
    /// Servers in different pods.
    Fabric,
}

impl PingLevel {
    /// Report name.
    pub fn name(self) -> &'static str {
        match self {
            PingLevel::Tor => "tor",
            PingLevel::Pod => "pod",
            PingLevel::Fabric => "fabric",
        }
    }
}

/// `[pingmesh]`: RDMA Pingmesh (seed 001 §5.3), a workload beside the configured one: every
/// server probes peers at each level with `size_bytes` RDMA operations every `interval_us`
/// and records each probe's RTT or error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PingmeshConfig {
    /// Default false.
    pub enabled: bool,
    /// Probe payload, bytes. Default 512 (the paper's).
    pub size_bytes: u64,
    /// Each server sends a round of probes this often, µs. Default 1000.
    pub interval_us: f64,
    /// Peers a server probes per level and round, drawn at random. Default 1.
    pub peers_per_level: u32,
    /// The levels probed. Default all three.
    pub levels: Vec<PingLevel>,
    /// A probe that takes longer than this counts as failed (a timeout), µs. Default 10 000.
    pub timeout_us: f64,
}

impl Default for PingmeshConfig {
    fn default() -> Self {
        PingmeshConfig {
            enabled: false,
            size_bytes: 512,
            interval_us: 1000.0,
            peers_per_level: 1,
            levels: vec![PingLevel::Tor, PingLevel::Pod, PingLevel::Fabric],
            timeout_us: 10_000.0,
        }
    }
}

fn positive_ms(v: f64, key: &str) -> Result<(), String> {
    check(v.is_finite() && v > 0.0, key, "must be positive")
}

/// Checks the safety settings; `hosts` is not known yet (fault hosts are checked against the
/// topology when the network is built).
pub(super) fn validate(
    l2: &L2Config,
    wd: &WatchdogConfig,
    dl: &DeadlockConfig,
    faults: &[FaultConfig],
    pm: &PingmeshConfig,
) -> Result<(), String> {
    positive_ms(l2.arp_timeout_s, "l2.arp_timeout_s")?;
    positive_ms(l2.mac_timeout_s, "l2.mac_timeout_s")?;
    check(l2.flood_dscp < 64, "l2.flood_dscp", "must be below 64")?;
    positive_ms(wd.nic_watchdog_ms, "watchdog.nic_watchdog_ms")?;
    positive_ms(wd.poll_ms, "watchdog.poll_ms")?;
    positive_ms(wd.detection_ms, "watchdog.detection_ms")?;
    positive_ms(wd.restoration_ms, "watchdog.restoration_ms")?;
    check(
        dl.detect_ms >= 0.0 && dl.detect_ms.is_finite(),
        "deadlock.detect_ms",
        "must be ≥ 0 (0 = off)",
    )?;
    positive_ms(dl.check_us, "deadlock.check_us")?;
    for (i, f) in faults.iter().enumerate() {
        check(
            f.at_ms >= 0.0 && f.at_ms.is_finite(),
            &format!("fault[{i}].at_ms"),
            "must be ≥ 0",
        )?;
        if let Some(u) = f.until_ms {
            check(
                u.is_finite() && u > f.at_ms,
                &format!("fault[{i}].until_ms"),
                "must be after at_ms",
            )?;
        }
        let dscp_key = format!("fault[{i}].dscp");
        if f.kind == FaultKind::NicDscp {
            check(
                f.dscp.is_some_and(|d| d < 64),
                &dscp_key,
                "is required for nic-dscp, and must be below 64",
            )?;
        } else {
            check(f.dscp.is_none(), &dscp_key, "is only for nic-dscp")?;
        }
    }
    if pm.enabled {
        check(
            (1..=1 << 20).contains(&pm.size_bytes),
            "pingmesh.size_bytes",
            "must be 1 B – 1 MiB",
        )?;
        check(
            pm.interval_us.is_finite() && pm.interval_us >= 1.0,
            "pingmesh.interval_us",
            "must be at least 1",
        )?;
        check(
            pm.peers_per_level >= 1,
            "pingmesh.peers_per_level",
            "must be at least 1",
        )?;
        check(
            !pm.levels.is_empty(),
            "pingmesh.levels",
            "must name at least one of tor, pod, fabric",
        )?;
        positive_ms(pm.timeout_us, "pingmesh.timeout_us")?;
    }
    Ok(())
}
