//! What can go wrong in a lossless fabric, and what operators built against it (seed 001:
//! Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, §4–§5; SPEC N4–N6):
//!
//! - **Layer-2 forwarding at the ToR** (§4.2). A ToR delivers a packet for one of its
//!   servers through its ARP table (IP→MAC, `l2.arp_timeout_s`, 4 h) and its MAC table
//!   (MAC→port, learned from the server's frames, `l2.mac_timeout_s`, 5 min, and flushed
//!   when the link goes down). With the ARP entry present and the MAC entry gone — a dead
//!   server — the entry is *incomplete*, and the ToR floods the packet to every port but the
//!   one it came in on. Each copy queues at its egress, in its class, holding its ingress
//!   buffer, and is discarded when it reaches the head of a queue that does not lead to the
//!   destination. A copy of a lossless packet stuck behind a paused egress keeps its ingress
//!   full: the buffer dependency that up-down routing was supposed to rule out, and Figure 4's
//!   deadlock. `l2.unknown_unicast` chooses the paper's fix (`drop-lossless`) or flooding in
//!   a lossy class (`flood-lossy`).
//! - **Faults** (`[[fault]]`): a server dies (its link goes down; its queue pairs are gone)
//!   and may boot again; a NIC's receive pipeline stops (§4.3's NIC bug).
//! - **Watchdogs** (§4.3): the NIC's stops the NIC from pausing, for good, once its receive
//!   pipeline has not moved for `nic_watchdog_ms` while it pauses; the switch's, on
//!   server-facing ports, follows SONiC's `pfcwd`: polled every `poll_ms`, a queue with
//!   packets, nothing transmitted and pauses received since the last poll for `detection_ms`
//!   is stormed, and the action (`drop`, `forward`, `alert`) holds until `restoration_ms`
//!   pass without pauses. A pause in force counts as pauses received: a real link refreshes a
//!   pause before its quanta run out, and the model does not send the refreshes.
//! - **Deadlock detection**: a cycle of (switch port, priority) egresses, each paused by its
//!   peer for at least `deadlock.detect_ms`, holding packets, and waiting on an ingress whose
//!   packets sit in the next egress of the cycle — checked every `deadlock.check_us`.
//!
//! The safety model needs the whole network in one partition (`SimConfig::needs_one_partition`).

use irn_transport::{Dur, Time};

use super::classes::MAX_CLASSES;
use super::memory::SimMemory;
use super::packet::{Ctl, Hop, Meta, NIL};
use super::Part;
use crate::config::{us, FaultKind, SimConfig, SwitchWatchdog, UnknownUnicast};
use crate::topology::Topology;

/// What the safety model counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}

/// The switch watchdog's state of one (server-facing port, lossless class).
#[derive(Debug, Clone, Copy)]
struct WdQueue {
    node: u32,
    port: u16,
    class: u8,
    /// Counters at the previous poll (`None` before the first).
    last: Option<(u64, u64)>,
    time_left: Dur,
    restore_left: Dur,
}

/// A deadlock found: when, and the cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlock {
    /// When the detector first saw it.
    pub at: Time,
    /// The cycle's egresses, `NODE.pPORT/PRIO`, each paused by the next one's node.
    pub cycle: Vec<String>,
}

/// The safety model's state.
#[derive(Debug, Default)]
pub(super) struct Safety {
    /// ToRs keep MAC tables that can miss (faults, or a MAC timeout shorter than the run).
    pub(super) l2_on: bool,
    /// NICs buffer received frames in a pipeline (a rate, a stall fault, a translation cache).
    pub(super) rx_pipeline: bool,
    /// The switch watchdog drops stormed queues' packets.
    pub(super) wd_drop: bool,
    pub(super) host_up: Vec<bool>,
    /// Per host: when its ToR last learned its MAC, and whether a link-down flushed it.
    pub(super) mac_seen: Vec<Time>,
    mac_flushed: Vec<bool>,
    /// Per host: its ARP entry's expiry (`Time::MAX` while the host is up).
    arp_until: Vec<Time>,
    mac_timeout: Dur,
    arp_timeout: Dur,
    /// Per host: the receive pipeline is stopped by a fault.
    pub(super) rx_stalled: Vec<bool>,
    /// Per host: the NIC watchdog fired; the NIC no longer pauses.
    pub(super) nic_pfc_off: Vec<bool>,
    /// Per host: the last time its receive pipeline finished a frame or was empty.
    pub(super) rx_progress: Vec<Time>,
    wd: Vec<WdQueue>,
    /// Flooded packets' copies: each copy's group, and per group the copies still queued.
    group_of: std::collections::HashMap<u32, u32>,
    groups: Vec<u32>,
    free_groups: Vec<u32>,
    /// Sequence of the safety events' keys.
    seq: u64,
    /// Periodic events in the event list (they run only while something else is pending).
    pub(super) periodic: usize,
    pub(super) deadlock: Option<Deadlock>,
    /// A deadlock cycle stood when the run ended.
    pub(super) deadlock_at_end: bool,
    pub(super) stats: SafetyStats,
}

impl Safety {
    pub(super) fn new(cfg: &SimConfig, topo: &Topology, end: Time) -> Safety {
        let hosts = topo.hosts as usize;
        let mac_timeout =
            Dur::from_picos((cfg.l2.mac_timeout_s * 1e12).min(u64::MAX as f64) as u64);
        let arp_timeout =
            Dur::from_picos((cfg.l2.arp_timeout_s * 1e12).min(u64::MAX as f64) as u64);
        let mut wd = Vec::new();
        if cfg.watchdog.switch != SwitchWatchdog::Off {
            for node in topo.hosts..topo.nodes.len() as u32 {
                for port in 0..topo.nodes[node as usize].ports.len() {
                    if topo.port_host(node, port).is_some() {
                        // Classes are filled in by `Part::new` (it knows which are lossless).
                        wd.push(WdQueue {
                            node,
                            port: port as u16,
                            class: 0,
                            last: None,
                            time_left: Dur::ZERO,
                            restore_left: Dur::ZERO,
                        });
                    }
                }
            }
        }
        Safety {
            l2_on: !cfg.fault.is_empty() || Time::ZERO + mac_timeout < end,
            rx_pipeline: cfg.nic.rx_gbps.is_some()
                || cfg.nic.mtt_miss_ns > 0.0
                || cfg.fault.iter().any(|f| f.kind == FaultKind::NicRxStall),
            wd_drop: cfg.watchdog.switch == SwitchWatchdog::Drop,
            host_up: vec![true; hosts],
            mac_seen: vec![Time::ZERO; hosts],
            mac_flushed: vec![false; hosts],
            arp_until: vec![Time::MAX; hosts],
            mac_timeout,
            arp_timeout,
            rx_stalled: vec![false; hosts],
            nic_pfc_off: vec![false; hosts],
            rx_progress: vec![Time::ZERO; hosts],
            wd,
            ..Safety::default()
        }
    }
}

impl<M: SimMemory> Part<M> {
    /// Schedules the faults and the first round of the periodic tasks.
    pub(super) fn safety_start(&mut self) {
        // One watchdog entry per lossless class of each server-facing port.
        let lossless: Vec<u8> = (0..self.classes.len())
            .filter(|&c| self.classes.class_lossless(c))
            .map(|c| c as u8)
            .collect();
        let ports = std::mem::take(&mut self.safety.wd);
        self.safety.wd = ports
            .iter()
            .flat_map(|q| lossless.iter().map(move |&c| WdQueue { class: c, ..*q }))
            .collect();
        let cfg = &self.cfg;
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
            events.push((Time::ZERO + self.nic_watchdog_period(), Ctl::NicWatchdog));
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
        for (at, ctl) in events {
            self.push_ctl(at, ctl);
        }
    }

    fn push_ctl(&mut self, at: Time, ctl: Ctl) {
        if ctl.periodic() {
            self.safety.periodic += 1;
        }
        self.q.push_control(at, ctl, &mut self.safety.seq);
    }

    /// The NIC watchdog looks at its pipeline ten times per `nic_watchdog_ms`.
    fn nic_watchdog_period(&self) -> Dur {
        us(self.cfg.watchdog.nic_watchdog_ms * 100.0)
    }

    /// Handles a safety event.
    pub(super) fn control(&mut self, now: Time, ctl: Ctl) {
        let period = match ctl {
            Ctl::Fault { i, end } => {
                self.fault(now, i as usize, end);
                None
            }
            Ctl::Announce { host } => {
                // The restarted server's gratuitous ARP: the ToR learns its MAC again.
                self.safety.mac_seen[host as usize] = now;
                self.safety.mac_flushed[host as usize] = false;
                None
            }
            Ctl::NicWatchdog => {
                self.nic_watchdog(now);
                Some(self.nic_watchdog_period())
            }
            Ctl::SwitchWatchdog => {
                self.switch_watchdog(now);
                Some(us(self.cfg.watchdog.poll_ms * 1e3))
            }
            Ctl::DeadlockCheck => {
                let age = us(self.cfg.deadlock.detect_ms * 1e3);
                if self.safety.deadlock.is_none() {
                    if let Some(cycle) = self.find_deadlock(now, age) {
                        self.safety.deadlock = Some(Deadlock { at: now, cycle });
                    }
                }
                Some(us(self.cfg.deadlock.check_us))
            }
            Ctl::Monitor => {
                self.monitor_sample(now);
                self.cfg.monitor_interval_us.map(us)
            }
        };
        if ctl.periodic() {
            self.safety.periodic -= 1;
            // Periodic tasks go on while anything else is pending, and never extend the run.
            if let Some(p) = period {
                if self.q.q.len() > self.safety.periodic {
                    self.push_ctl(now + p, ctl);
                }
            }
        }
    }

    /// Whether the ToR of `dst` knows its MAC (and so its port).
    #[inline]
    pub(super) fn mac_known(&self, now: Time, dst: u32) -> bool {
        let h = dst as usize;
        !self.safety.mac_flushed[h] && now.since(self.safety.mac_seen[h]) <= self.safety.mac_timeout
    }

    /// `pkt` (class `c`, in through `inp`) is for a server of this ToR whose MAC entry is
    /// missing: drop it without an ARP entry, drop it if lossless under `drop-lossless`,
    /// flood it otherwise.
    pub(super) fn unknown_destination(
        &mut self,
        now: Time,
        node: u32,
        inp: u16,
        c: usize,
        pkt: u32,
        mut hop: Hop,
    ) {
        let dst = hop.dst as usize;
        if now >= self.safety.arp_until[dst] {
            self.safety.stats.arp_drops += 1;
            self.ingress_drop(node, inp, c, pkt);
            return;
        }
        let policy = self.cfg.l2.unknown_unicast;
        if policy == UnknownUnicast::DropLossless && self.classes.class_lossless(c) {
            self.safety.stats.l2_drops += 1;
            self.ingress_drop(node, inp, c, pkt);
            return;
        }
        let mut c = c;
        if policy == UnknownUnicast::FloodLossy {
            let dscp = self.cfg.l2.flood_dscp;
            let prio = self.classes.of_dscp(dscp);
            hop.set_dscp(dscp, prio);
            c = self.classes.class(prio);
        }
        hop.mark_flooded();
        self.safety.stats.floods += 1;
        let outs: Vec<usize> = (0..self.topo.nodes[node as usize].ports.len())
            .filter(|&p| {
                p != usize::from(inp)
                    && self
                        .topo
                        .port_host(node, p)
                        .is_none_or(|h| self.safety.host_up[h as usize])
            })
            .collect();
        let Some(&first) = outs.first() else {
            self.ingress_drop(node, inp, c, pkt);
            return;
        };
        // One packet in the buffer, charged once to its ingress, queued at every port: its
        // bytes are released when the last copy leaves (a shared-memory switch's multicast).
        if !self.admit(node, inp, first, c, u64::from(hop.wire)) {
            self.ingress_drop(node, inp, c, pkt);
            return;
        }
        let mut copies = vec![pkt];
        for _ in 1..outs.len() {
            let copy = self.packets[pkt as usize];
            let payload = if M::HOLDS_BYTES {
                self.payloads[pkt as usize].clone()
            } else {
                Vec::new()
            };
            copies.push(self.alloc_packet(copy, payload, Meta { hop, next: NIL }));
        }
        self.meta[pkt as usize].hop = hop;
        if copies.len() > 1 {
            let g = match self.safety.free_groups.pop() {
                Some(g) => g,
                None => {
                    self.safety.groups.push(0);
                    (self.safety.groups.len() - 1) as u32
                }
            };
            self.safety.groups[g as usize] = copies.len() as u32;
            for &q in &copies {
                self.safety.group_of.insert(q, g);
            }
        }
        for (k, (&out, &q)) in outs.iter().zip(&copies).enumerate() {
            self.place(now, node, inp, out, c, q, hop, k == 0);
        }
    }

    /// A copy of a flooded packet leaves the buffer; returns whether it was the last one (or
    /// not a shared copy at all), so that the packet's bytes leave its ingress.
    pub(super) fn flood_release(&mut self, pkt: u32) -> bool {
        let Some(g) = self.safety.group_of.remove(&pkt) else {
            return true;
        };
        let left = &mut self.safety.groups[g as usize];
        *left -= 1;
        if *left == 0 {
            self.safety.free_groups.push(g);
            true
        } else {
            false
        }
    }

    /// Whether queued packet `pkt` shares its buffer with other copies, and which group.
    pub(super) fn flood_group(&self, pkt: u32) -> Option<u32> {
        self.safety.group_of.get(&pkt).copied()
    }

    fn fault(&mut self, now: Time, i: usize, end: bool) {
        let f = self.cfg.fault[i].clone();
        let h = f.host;
        match (f.kind, end) {
            (FaultKind::HostDown, false) => self.host_down(now, h),
            (FaultKind::HostDown, true) => {
                let hu = h as usize;
                self.safety.host_up[hu] = true;
                self.safety.arp_until[hu] = Time::MAX;
                let p = *self.topo.host_port(h);
                self.push_ctl(now + p.delay, Ctl::Announce { host: h });
                self.q.origin = h;
                self.kick_nic(now, h);
            }
            (FaultKind::NicRxStall, false) => self.safety.rx_stalled[h as usize] = true,
            (FaultKind::NicRxStall, true) => {
                self.safety.rx_stalled[h as usize] = false;
                self.safety.rx_progress[h as usize] = now;
                self.q.origin = h;
                if !self.nics[h as usize].rx.is_empty() {
                    self.nic_rx_start(now, h);
                }
            }
        }
    }

    /// Host `h` dies: its link goes down (its ToR flushes the MAC entry and drops what it
    /// queued for it; a pause the NIC held expires), its queue pairs and buffered frames are
    /// gone, its ARP entry ages out after `arp_timeout`.
    fn host_down(&mut self, now: Time, h: u32) {
        let hu = h as usize;
        if !self.safety.host_up[hu] {
            return;
        }
        self.safety.host_up[hu] = false;
        self.safety.mac_flushed[hu] = true;
        self.safety.arp_until[hu] = now + self.safety.arp_timeout;
        // Its queue pairs: the flows lose these ends.
        let live: Vec<(u32, u32, u8)> = self.nics[hu]
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.qp.is_some())
            .map(|(i, s)| (i as u32, s.flow, s.end))
            .collect();
        for (slot, flow, end) in live {
            let end = usize::from(end);
            if self.states[flow as usize].slot[end] == slot {
                self.states[flow as usize].slot[end] = NIL;
            }
            let buf = self.states[flow as usize].buf[end];
            self.destroy(h, slot, buf);
        }
        let nic = &mut self.nics[hu];
        nic.ready.clear();
        let frames: Vec<u32> = nic.rx.drain(..).map(|f| f.pkt).collect();
        nic.rx_held = super::pfc::Ingress::EMPTY;
        for p in frames {
            self.free_packet(p);
        }
        // The ToR's side of the link.
        let port = *self.topo.host_port(h);
        let (tor, tp) = (port.peer, usize::from(port.peer_port));
        let si = (tor - self.topo.hosts) as usize;
        self.q.origin = tor;
        for c in 0..MAX_CLASSES {
            if self.switches[si].ports[tp].paused[c] {
                let prio = self.classes.class_priority(c.min(self.classes.len() - 1));
                self.pfc_receive(now, tor, tp as u16, prio, false);
            }
        }
        self.flush_egress(now, tor, tp);
    }

    /// Drops everything queued at `node`'s output `out` (its link went down).
    fn flush_egress(&mut self, now: Time, node: u32, out: usize) {
        let si = (node - self.topo.hosts) as usize;
        for c in 0..self.classes.len() {
            while let Some((pkt, inp)) = self.switches[si].queues.pop(&self.meta, out, c) {
                let wire = u64::from(self.meta[pkt as usize].hop.wire);
                self.release(now, node, si, out, c, inp, pkt, wire);
                if self.mon.on {
                    self.mon.at(node, out as u16, c).egress_drops += 1;
                }
                self.switches[si].stats[out].drops += 1;
                self.free_packet(pkt);
            }
        }
    }

    /// The NIC watchdog (seed 001 §4.3): a NIC whose receive pipeline has not moved for
    /// `nic_watchdog_ms` while it pauses its switch stops pausing, for good.
    fn nic_watchdog(&mut self, now: Time) {
        let limit = us(self.cfg.watchdog.nic_watchdog_ms * 1e3);
        for h in 0..self.topo.hosts {
            let hu = h as usize;
            let nic = &self.nics[hu];
            let stuck = !nic.rx.is_empty() && now.since(self.safety.rx_progress[hu]) >= limit;
            let pausing = nic.rx_held.xoff.iter().any(|&x| x);
            if stuck && pausing && !self.safety.nic_pfc_off[hu] {
                self.safety.nic_pfc_off[hu] = true;
                self.safety.stats.nic_watchdog += 1;
                self.q.origin = h;
                for c in 0..self.classes.len() {
                    if self.nics[hu].rx_held.xoff[c] {
                        self.nics[hu].rx_held.xoff[c] = false;
                        let prio = self.classes.class_priority(c);
                        self.send_pfc(now, h, 0, prio, false);
                    }
                }
            }
        }
    }

    /// The switch watchdog's poll (SONiC `pfcwd`'s detection and restoration).
    fn switch_watchdog(&mut self, now: Time) {
        let poll = us(self.cfg.watchdog.poll_ms * 1e3);
        let detection = us(self.cfg.watchdog.detection_ms * 1e3);
        let restoration = us(self.cfg.watchdog.restoration_ms * 1e3);
        let action = self.cfg.watchdog.switch;
        for k in 0..self.safety.wd.len() {
            let q = self.safety.wd[k];
            let c = usize::from(q.class);
            let si = (q.node - self.topo.hosts) as usize;
            let pc = self.mon.get(q.node, q.port, c);
            let port = &self.switches[si].ports[usize::from(q.port)];
            let (queued, paused, stormed) = (port.egress[c] > 0, port.paused[c], port.storm[c]);
            let now_counts = (pc.tx_packets, pc.pause_received);
            let mut q = q;
            if let Some((tx, prx)) = q.last {
                // Pauses received since the last poll, or a pause in force (refreshed on a
                // real link).
                let pauses = pc.pause_received > prx || paused;
                if !stormed {
                    if queued && pc.tx_packets == tx && pauses {
                        if q.time_left <= poll {
                            q.time_left = detection;
                            q.restore_left = restoration;
                            self.safety.stats.switch_watchdog += 1;
                            if action != SwitchWatchdog::Alert {
                                self.storm(now, q.node, usize::from(q.port), c, true);
                            }
                        } else {
                            q.time_left = Dur::from_picos(q.time_left.as_picos() - poll.as_picos());
                        }
                    } else {
                        q.time_left = detection;
                    }
                } else if pauses {
                    q.restore_left = restoration;
                } else if q.restore_left <= poll {
                    self.safety.stats.restorations += 1;
                    self.storm(now, q.node, usize::from(q.port), c, false);
                    q.time_left = detection;
                } else {
                    q.restore_left = Dur::from_picos(q.restore_left.as_picos() - poll.as_picos());
                }
            } else {
                q.time_left = detection;
            }
            q.last = Some(now_counts);
            self.safety.wd[k] = q;
        }
    }

    /// Starts or ends the watchdog's action on (`node`, `port`, class `c`).
    fn storm(&mut self, now: Time, node: u32, port: usize, c: usize, on: bool) {
        let si = (node - self.topo.hosts) as usize;
        self.switches[si].ports[port].storm[c] = on;
        self.q.origin = node;
        if on && self.safety.wd_drop {
            // Disable lossless: what waits for the port is dropped, and the port's own ingress
            // stops pausing the server.
            self.flush_egress(now, node, port);
            if self.switches[si].ports[port].ingress.xoff[c] {
                self.switches[si].ports[port].ingress.xoff[c] = false;
                let prio = self.classes.class_priority(c);
                self.send_pfc(now, node, port as u16, prio, false);
            }
        }
        self.kick_port(now, node, port);
    }

    /// A cycle of paused egresses, each paused for at least `age`, holding packets, whose
    /// downstream ingress holds packets queued at the next egress of the cycle.
    pub(super) fn find_deadlock(&self, now: Time, age: Dur) -> Option<Vec<String>> {
        let h = self.topo.hosts;
        let nc = self.classes.len();
        // Candidates: (node, out, class) → index.
        let mut cand: std::collections::BTreeMap<(u32, usize, usize), usize> = Default::default();
        let mut list = Vec::new();
        for (si, sw) in self.switches.iter().enumerate() {
            let node = h + si as u32;
            for (out, p) in sw.ports.iter().enumerate() {
                for c in 0..nc {
                    if p.held(c)
                        && p.egress[c] > 0
                        && self.classes.class_lossless(c)
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
        let mut held: std::collections::BTreeMap<
            u32,
            std::collections::BTreeSet<(u16, usize, usize)>,
        > = Default::default();
        for (k, &(node, out, c)) in list.iter().enumerate() {
            let p = self.topo.nodes[node as usize].ports[out];
            if p.peer < h {
                continue;
            }
            let sets = held.entry(p.peer).or_insert_with(|| {
                let mut s = std::collections::BTreeSet::new();
                let si = (p.peer - h) as usize;
                self.switches[si]
                    .queues
                    .for_each(&self.meta, |_, inp, o, cl| {
                        s.insert((inp, o, cl));
                    });
                s
            });
            for &(inp, o, cl) in sets.iter() {
                if inp == p.peer_port && cl == c {
                    if let Some(&j) = cand.get(&(p.peer, o, cl)) {
                        edges[k].push(j);
                    }
                }
            }
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
                                    self.topo.node_name(node),
                                    out,
                                    self.classes.class_priority(c)
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

    /// At the end of the run: whether a deadlock cycle still stands. With nothing left to
    /// happen, any cycle of paused egresses is permanent; otherwise it must be as old as the
    /// detection time.
    pub(super) fn safety_finish(&mut self, now: Time) {
        if !(self.cfg.network.pfc && self.cfg.deadlock.detect_ms > 0.0) {
            return;
        }
        let frozen = self.q.q.len() <= self.safety.periodic;
        let age = if frozen {
            Dur::ZERO
        } else {
            us(self.cfg.deadlock.detect_ms * 1e3)
        };
        if let Some(cycle) = self.find_deadlock(now, age) {
            self.safety.deadlock_at_end = true;
            if self.safety.deadlock.is_none() {
                self.safety.deadlock = Some(Deadlock { at: now, cycle });
            }
        }
    }
}
