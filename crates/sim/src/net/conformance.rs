//! Configuration monitoring (seed 001 §5.1; SPEC N9): a service that checks that every
//! switch's and server's running configuration is the intended one. Enabling RDMA configures
//! PFC at the switches — a global part (buffer, DSCP classification, queues) and a per-port
//! part that turns PFC on for each physical port — and RDMA, PFC, DCQCN and the traffic
//! configuration (which traffic PFC protects) at the servers; any of them can drift.
//!
//! The intended configuration is the run's own; what a component runs is read off it: a
//! switch's PFC per port ([`Switch::pfc_on`]) and its ECN marking, a NIC's data DSCP per
//! traffic class ([`Nic::data_dscps`]). [`ConfigMonitor::check`], run every
//! `config_check_ms`, records each difference once, with when a check first found it and
//! when one found it set right. Drift comes from `[[fault]]`s (`tor-pfc-off`, `tor-ecn-off`,
//! `nic-dscp`), which change what the components run and so what they do.

use std::collections::BTreeMap;

use irn_transport::Time;
use serde::{Deserialize, Serialize};

use super::ecn::Marking;
use super::fabric::Fabric;
use super::memory::SimMemory;
use super::nic::Nic;
use super::switch::Switch;
use crate::config::SimConfig;

/// A difference between what a switch or NIC runs and what the configuration intends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigFinding {
    /// The node (its name in the topology).
    pub node: String,
    /// The port, for a per-port setting.
    pub port: Option<u16>,
    /// The setting: `pfc` (a switch port's), `ecn` (a switch's marking), `dscp` (the DSCPs a
    /// NIC sends its traffic classes' data with).
    pub key: String,
    /// What the configuration intends.
    pub intended: String,
    /// What the component ran when the check found it.
    pub running: String,
    /// When a check first found it, ms.
    pub found_ms: f64,
    /// When a check found it set right, ms (absent: still wrong at the end).
    pub cleared_ms: Option<f64>,
}

/// The monitor's findings, and which are still open.
#[derive(Debug, Default)]
pub(super) struct ConfigMonitor {
    pub(super) findings: Vec<ConfigFinding>,
    /// (node, port, setting) → its open finding.
    open: BTreeMap<(u32, u16, &'static str), usize>,
    /// Checks made.
    pub(super) checks: u64,
    /// The data DSCP of each traffic class, as configured (read off the configuration once).
    intended_dscps: Vec<u8>,
}

/// No port: a switch-wide or NIC setting.
const NO_PORT: u16 = u16::MAX;

impl ConfigMonitor {
    /// Checks every switch and NIC at `now` against `cfg`.
    pub(super) fn check<M: SimMemory>(
        &mut self,
        cfg: &SimConfig,
        fx: &Fabric<M>,
        switches: &[Switch],
        nics: &[Nic<M>],
        now: Time,
    ) {
        self.checks += 1;
        let hosts = fx.hosts();
        let mut now_wrong: Vec<((u32, u16, &'static str), String, String)> = Vec::new();
        let lossless: Vec<u8> = (0..fx.classes.len())
            .filter(|&c| fx.classes.class_lossless(c))
            .map(|c| fx.classes.class_priority(c))
            .collect();
        let intended_marking = Marking::new(&cfg.switch);
        for (i, sw) in switches.iter().enumerate() {
            let node = hosts + i as u32;
            let ports = fx.topo.nodes[node as usize].ports.len();
            if !lossless.is_empty() {
                for p in (0..ports).filter(|&p| !sw.pfc_on(p)) {
                    now_wrong.push((
                        (node, p as u16, "pfc"),
                        format!("on for priorities {lossless:?}"),
                        "off".into(),
                    ));
                }
            }
            if sw.marking().describe() != intended_marking.describe() {
                now_wrong.push((
                    (node, NO_PORT, "ecn"),
                    intended_marking.describe(),
                    sw.marking().describe(),
                ));
            }
        }
        if self.intended_dscps.is_empty() {
            self.intended_dscps = (0..cfg.class_count())
                .map(|t| cfg.class_config(t).network.data_dscp)
                .collect();
        }
        let intended = &self.intended_dscps;
        for (h, nic) in nics.iter().enumerate() {
            let running = nic.data_dscps();
            if running != *intended {
                now_wrong.push((
                    (h as u32, NO_PORT, "dscp"),
                    format!("{intended:?}"),
                    format!("{running:?}"),
                ));
            }
        }
        let at_ms = now.as_picos() as f64 / 1e9;
        for (key, intended, running) in &now_wrong {
            if !self.open.contains_key(key) {
                self.open.insert(*key, self.findings.len());
                self.findings.push(ConfigFinding {
                    node: fx.topo.node_name(key.0),
                    port: (key.1 != NO_PORT).then_some(key.1),
                    key: key.2.to_string(),
                    intended: intended.clone(),
                    running: running.clone(),
                    found_ms: at_ms,
                    cleared_ms: None,
                });
            }
        }
        let wrong: Vec<_> = now_wrong.iter().map(|w| w.0).collect();
        let findings = &mut self.findings;
        self.open.retain(|key, &mut i| {
            let still = wrong.contains(key);
            if !still {
                findings[i].cleared_ms = Some(at_ms);
            }
            still
        });
    }
}
