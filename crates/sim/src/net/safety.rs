//! What can go wrong in a lossless fabric, and what operators built against it (seed 001:
//! Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, §4–§5; SPEC N4–N6):
//!
//! - **Layer-2 forwarding at the ToR** (§4.2): a switch *has* L2 tables
//!   ([`L2Table`](super::l2::L2Table)); with a server dead its entry is incomplete and the
//!   ToR floods. A copy of a lossless packet stuck behind a paused egress keeps its ingress
//!   full: the buffer dependency that up-down routing was supposed to rule out, and Figure 4's
//!   deadlock.
//! - **Faults** (`[[fault]]`): a server dies (its link goes down; its queue pairs are gone)
//!   and may boot again; a NIC's receive pipeline stops (§4.3's NIC bug).
//! - **Watchdogs** (§4.3): a NIC's receive pipeline has one
//!   ([`Nic::watchdog_poll`]), a switch has one on its server-facing ports
//!   ([`PfcWatchdog`](super::switch::PfcWatchdog), after SONiC's `pfcwd`); this module polls
//!   them on their clocks.
//! - **Deadlock detection**: a cycle of (switch port, priority) egresses, each paused by its
//!   peer for at least `deadlock.detect_ms`, holding packets, and waiting on an ingress whose
//!   packets sit in the next egress of the cycle — checked every `deadlock.check_us`.
//!
//! The components own the mechanisms; this module's [`Safety`] schedules what happens to the
//! fabric as a whole — faults, the watchdogs' polls, the deadlock check, the monitor's samples
//! — as control events, and runs them. The safety model needs the whole network in one
//! partition (`SimConfig::needs_one_partition`).

use irn_transport::{Dur, Time};

use super::classes::MAX_CLASSES;
use super::conformance::ConfigMonitor;
use super::ecn::Marking;
use super::fabric::Fabric;
use super::flows::Workload;
use super::memory::SimMemory;
use super::nic::Nic;
use super::packet::Ctl;
use super::switch::Switch;
use crate::config::{us, FaultKind, SimConfig, SwitchWatchdog};

/// What the safety model counted (reported as they are, inside the run's
/// [`SafetyReport`](crate::metrics::SafetyReport)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SafetyStats {
    /// Packets a ToR flooded (an incomplete ARP entry).
    pub floods: u64,
    /// Flooded copies discarded at an egress that did not lead to the destination.
    pub flood_discards: u64,
    /// Lossless packets dropped for an incomplete ARP entry (`drop-lossless`).
    pub l2_drops: u64,
    /// Packets dropped for a missing ARP entry.
    pub arp_drops: u64,
    /// NIC watchdogs that fired.
    pub nic_watchdog: u64,
    /// Switch watchdog storms detected.
    pub switch_watchdog: u64,
    /// Switch watchdog restorations.
    pub restorations: u64,
    /// Packets NICs sent to a host while a fault held it (down, or its NIC's receive
    /// pipeline stopped): what a dead peer costs the fabric under the run's retry rules.
    pub sent_to_failed_packets: u64,
    /// Their wire bytes.
    pub sent_to_failed_bytes: u64,
}

/// A deadlock found: when, and the cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlock {
    /// When the detector first saw it.
    pub at: Time,
    /// The cycle's egresses, `NODE.pPORT/PRIO`, each paused by the next one's node.
    pub cycle: Vec<String>,
}

/// The fabric-wide tasks of the safety model: their clocks and what they found. Their
/// settings are the run's configuration, which each call is handed.
#[derive(Debug, Default)]
pub(super) struct Safety {
    /// Sequence of the safety events' keys.
    seq: u64,
    /// Periodic events in the event list (they run only while something else is pending).
    pub(super) periodic: usize,
    pub(super) deadlock: Option<Deadlock>,
    /// A deadlock cycle stood when the run ended.
    pub(super) deadlock_at_end: bool,
    /// NIC watchdogs that fired.
    pub(super) nic_watchdogs: u64,
    /// The configuration monitor (with `config_check_ms`).
    pub(super) config: ConfigMonitor,
}

/// The parts of the network the safety model acts on.
pub(super) struct Nodes<'a, M> {
    pub(super) fx: &'a mut Fabric<M>,
    pub(super) switches: &'a mut [Switch],
    pub(super) nics: &'a mut [Nic<M>],
    pub(super) work: &'a mut Workload,
}

impl Safety {
    /// Schedules the faults and the first round of the periodic tasks.
    pub(super) fn start<M: SimMemory>(&mut self, cfg: &SimConfig, fx: &mut Fabric<M>) {
        let mut events: Vec<(Time, Ctl)> = Vec::new();
        for (i, f) in cfg.fault.iter().enumerate() {
            events.push((
                Time::ZERO + us(f.at_ms * 1e3),
                Ctl::Fault {
                    i: i as u32,
                    end: false,
                },
            ));
            if let Some(u) = f.until_ms {
                events.push((
                    Time::ZERO + us(u * 1e3),
                    Ctl::Fault {
                        i: i as u32,
                        end: true,
                    },
                ));
            }
        }
        if cfg.watchdog.nic {
            events.push((Time::ZERO + nic_watchdog_period(cfg), Ctl::NicWatchdog));
        }
        if cfg.watchdog.switch != SwitchWatchdog::Off {
            events.push((
                Time::ZERO + us(cfg.watchdog.poll_ms * 1e3),
                Ctl::SwitchWatchdog,
            ));
        }
        if cfg.network.pfc && cfg.deadlock.detect_ms > 0.0 {
            events.push((Time::ZERO + us(cfg.deadlock.check_us), Ctl::DeadlockCheck));
        }
        if let Some(m) = cfg.monitor_interval_us {
            events.push((Time::ZERO + us(m), Ctl::Monitor));
        }
        if let Some(c) = cfg.config_check_ms {
            events.push((Time::ZERO + us(c * 1e3), Ctl::ConfigCheck));
        }
        for (at, ctl) in events {
            self.push(fx, at, ctl);
        }
    }

    fn push<M: SimMemory>(&mut self, fx: &mut Fabric<M>, at: Time, ctl: Ctl) {
        if ctl.periodic() {
            self.periodic += 1;
        }
        fx.q.push_control(at, ctl, &mut self.seq);
    }

    /// Handles a safety event; `sample` takes the monitor's sample.
    pub(super) fn control<M: SimMemory>(
        &mut self,
        cfg: &SimConfig,
        n: &mut Nodes<'_, M>,
        now: Time,
        ctl: Ctl,
        sample: impl FnOnce(&mut Nodes<'_, M>),
    ) {
        let period = match ctl {
            Ctl::Fault { i, end } => {
                self.fault(cfg, n, now, i as usize, end);
                None
            }
            Ctl::Announce { host } => {
                // The restarted server's gratuitous ARP: the ToR learns its MAC again.
                let (tor, port) = tor_port(n.fx, host);
                n.switches[tor].announce(now, port);
                None
            }
            Ctl::NicWatchdog => {
                let limit = us(cfg.watchdog.nic_watchdog_ms * 1e3);
                for nic in n.nics.iter_mut() {
                    if nic.watchdog_poll(n.fx, now, limit) {
                        self.nic_watchdogs += 1;
                    }
                }
                Some(nic_watchdog_period(cfg))
            }
            Ctl::SwitchWatchdog => {
                for sw in n.switches.iter_mut() {
                    sw.watchdog_poll(n.fx, now);
                }
                Some(us(cfg.watchdog.poll_ms * 1e3))
            }
            Ctl::DeadlockCheck => {
                let age = us(cfg.deadlock.detect_ms * 1e3);
                if self.deadlock.is_none() {
                    if let Some(cycle) = find_deadlock(n.fx, n.switches, now, age) {
                        self.deadlock = Some(Deadlock { at: now, cycle });
                    }
                }
                Some(us(cfg.deadlock.check_us))
            }
            Ctl::Monitor => {
                sample(n);
                cfg.monitor_interval_us.map(us)
            }
            Ctl::ConfigCheck => {
                self.config.check(cfg, n.fx, n.switches, n.nics, now);
                cfg.config_check_ms.map(|c| us(c * 1e3))
            }
        };
        if ctl.periodic() {
            self.periodic -= 1;
            // Periodic tasks go on while anything else is pending, and never extend the run.
            if let Some(p) = period {
                if n.fx.q.q.len() > self.periodic + n.fx.bookkeeping {
                    self.push(n.fx, now + p, ctl);
                }
            }
        }
    }

    fn fault<M: SimMemory>(
        &mut self,
        cfg: &SimConfig,
        n: &mut Nodes<'_, M>,
        now: Time,
        i: usize,
        end: bool,
    ) {
        let f = &cfg.fault[i];
        let h = f.host;
        let hu = h as usize;
        let (si, tp) = tor_port(n.fx, h);
        let hosts = n.fx.hosts();
        if matches!(f.kind, FaultKind::HostDown | FaultKind::NicRxStall) {
            n.fx.failed.set(hosts, h, !end);
        }
        match (f.kind, end) {
            (FaultKind::HostDown, false) => {
                // Host `h` dies: its queue pairs and buffered frames are gone, its link goes
                // down (its ToR flushes the MAC entry and drops what it queued for it; a pause
                // the NIC held expires), its ARP entry ages out after `arp_timeout`.
                if !n.nics[hu].is_up() {
                    return;
                }
                n.work.lose_host(&mut n.nics[hu]);
                n.nics[hu].go_down(n.fx);
                n.switches[si].link_down(n.fx, now, tp);
            }
            (FaultKind::HostDown, true) => {
                n.switches[si].link_up(tp);
                let delay = n.fx.topo.host_port(h).delay;
                self.push(n.fx, now + delay, Ctl::Announce { host: h });
                n.nics[hu].go_up(n.fx, now);
            }
            (FaultKind::NicRxStall, ended) => {
                n.nics[hu].stall_rx(n.fx, now, !ended, &n.work.flows);
            }
            (FaultKind::TorPfcOff, ended) => {
                n.switches[si].set_pfc(n.fx, now, tp, ended);
            }
            (FaultKind::TorEcnOff, ended) => {
                n.switches[si].set_marking(if ended {
                    Marking::new(&cfg.switch)
                } else {
                    Marking::off()
                });
            }
            (FaultKind::NicDscp, ended) => {
                let drift = f.dscp.filter(|_| !ended);
                n.nics[hu].set_dscp_drift(drift.map(|d| (d, n.fx.classes.of_dscp(d))));
            }
        }
    }

    /// At the end of the run: whether a deadlock cycle still stands. With nothing left to
    /// happen, any cycle of paused egresses is permanent; otherwise it must be as old as the
    /// detection time.
    pub(super) fn finish<M: SimMemory>(
        &mut self,
        cfg: &SimConfig,
        fx: &Fabric<M>,
        switches: &[Switch],
        now: Time,
    ) {
        if !(cfg.network.pfc && cfg.deadlock.detect_ms > 0.0) {
            return;
        }
        let frozen = fx.q.q.len() <= self.periodic + fx.bookkeeping;
        let age = if frozen {
            Dur::ZERO
        } else {
            us(cfg.deadlock.detect_ms * 1e3)
        };
        if let Some(cycle) = find_deadlock(fx, switches, now, age) {
            self.deadlock_at_end = true;
            if self.deadlock.is_none() {
                self.deadlock = Some(Deadlock { at: now, cycle });
            }
        }
    }
}

/// The NIC watchdog looks at its pipeline ten times per `nic_watchdog_ms`.
fn nic_watchdog_period(cfg: &SimConfig) -> Dur {
    us(cfg.watchdog.nic_watchdog_ms * 100.0)
}

/// Host `h`'s ToR (as an index among the switches) and the ToR's port to it.
fn tor_port<M: SimMemory>(fx: &Fabric<M>, h: u32) -> (usize, usize) {
    let p = fx.topo.host_port(h);
    ((p.peer - fx.hosts()) as usize, usize::from(p.peer_port))
}

/// A cycle of paused egresses, each paused for at least `age`, holding packets, whose
/// downstream ingress holds packets queued at the next egress of the cycle.
fn find_deadlock<M>(
    fx: &Fabric<M>,
    switches: &[Switch],
    now: Time,
    age: Dur,
) -> Option<Vec<String>> {
    let h = fx.topo.hosts;
    let nc = fx.classes.len();
    // Candidates: (node, out, class) → index.
    let mut cand: std::collections::BTreeMap<(u32, usize, usize), usize> = Default::default();
    let mut list = Vec::new();
    for (si, sw) in switches.iter().enumerate() {
        let node = h + si as u32;
        for (out, p) in sw.ports.iter().enumerate() {
            for c in 0..nc {
                if p.held(c)
                    && p.egress[c] > 0
                    && fx.classes.class_lossless(c)
                    && now.since(sw.paused_since[out * MAX_CLASSES + c]) >= age
                {
                    cand.insert((node, out, c), list.len());
                    list.push((node, out, c));
                }
            }
        }
    }
    if list.is_empty() {
        return None;
    }
    // Edges: egress (n, o, c) waits on the peer's ingress, whose packets sit in the peer's
    // candidate egresses.
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); list.len()];
    for (k, &(node, out, c)) in list.iter().enumerate() {
        let p = fx.topo.nodes[node as usize].ports[out];
        if p.peer < h {
            continue;
        }
        let peer = &switches[(p.peer - h) as usize];
        peer.queues.outputs_holding(p.peer_port, c, |o| {
            if let Some(&j) = cand.get(&(p.peer, o, c)) {
                edges[k].push(j);
            }
        });
    }
    // A cycle by depth-first search (colours: 0 new, 1 on the stack, 2 done).
    let mut colour = vec![0u8; list.len()];
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for s in 0..list.len() {
        if colour[s] != 0 {
            continue;
        }
        stack.push((s, 0));
        colour[s] = 1;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&w) = edges[v].get(*next) {
                *next += 1;
                if colour[w] == 1 {
                    let from = stack.iter().position(|&(x, _)| x == w).unwrap_or(0);
                    let cycle = stack[from..]
                        .iter()
                        .map(|&(x, _)| {
                            let (node, out, c) = list[x];
                            format!(
                                "{}.p{}/{}",
                                fx.topo.node_name(node),
                                out,
                                fx.classes.class_priority(c)
                            )
                        })
                        .collect();
                    return Some(cycle);
                }
                if colour[w] == 0 {
                    colour[w] = 1;
                    stack.push((w, 0));
                }
            } else {
                colour[v] = 2;
                stack.pop();
            }
        }
    }
    None
}
