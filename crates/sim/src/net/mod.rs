//! The network model: NICs running irn-transport queue pairs, switches with virtual output
//! queues or a shared buffer, PFC and ECN, links with rate and delay — and the event loop that
//! drives them.
//!
//! # Model, as built (differences from the IRN paper's simulator are listed in
//! `docs/RESULTS.md`)
//!
//! - **Links** serialize one frame at a time at their rate and deliver it after the
//!   propagation delay (store-and-forward everywhere). A frame's wire size is its RoCEv2
//!   packet (BTH onward, as `irn_wire` would emit it, plus ICRC) + UDP + IPv4 + Ethernet
//!   header and FCS; preamble and inter-frame gap are not counted.
//! - **NICs** pull packets from their queue pairs when their link is free (so a NIC never
//!   queues): queue pairs with something to send are served round-robin, one packet each;
//!   ACK/NAK/CNP travel at a control priority when configured, and are still sent while the
//!   data priority is paused by PFC.
//!   On the receive side a frame reaches its queue pair on arrival, unless the receive
//!   pipeline has a rate (`[nic] rx_gbps`): then frames wait in a receive buffer drained at
//!   that rate, and the NIC pauses its switch (lossless priorities) or drops (lossy) as a
//!   switch ingress does — the slow receiver of SPEC N6.
//! - **Switches**: see [`SwitchModel`](crate::config::SwitchModel). A frame's priority comes
//!   from its DSCP through a many-to-one map, or from its VLAN PCP (SPEC N2; `classes`); per
//!   priority, lossless (PFC) or lossy (drop-tail); a queue per priority in use at each port,
//!   served in strict priority;
//!   ECMP by a hash of the 5-tuple (source and destination host and the queue pair numbers,
//!   from which RoCEv2 derives its UDP source port) salted per switch.
//! - **PFC** (802.1Qbb, SPEC N1): an ingress (port, priority) above its threshold sends a
//!   pause frame upstream; once it has drained `pfc_resume_gap_bytes` below, a resume frame.
//!   A pause holds until the resume (real switches refresh the pause before its quanta
//!   expire; those refreshes are not modelled or counted). A pause frame reaches the peer
//!   after its 64-byte serialization and the propagation delay, overtaking data frames.
//!
//! # Components (after htsim's `Queue`, `Pipe`, `Switch`, with Rust's ownership)
//!
//! Each component is a type that owns its state and is driven with the shared `Fabric`
//! context (event list, packet table, topology, classes, monitor):
//!
//! | module | component | owns |
//! |---|---|---|
//! | `switch` | `Switch` | ports, queues, admission and PFC thresholds, ECN marking and its stream; optionally L2 tables and a PFC watchdog |
//! | `nic` | `Nic` | queue pairs, transmit scheduling, pause state, memory; optionally a receive pipeline (buffer, translation cache, watchdog) |
//! | `link` | `Loss`, `Fabric::occupy`, `Fabric::propagate` | loss and its per-node streams; serialization and propagation |
//! | `flows` | `Workload` | flows, their records, where each end's queue pair lives |
//! | `safety` | `Safety` | faults, the watchdogs' clocks, deadlock detection |
//! | `fabric` | `Fabric` | the shared context and the border with other partitions |
//! | `packet` | `Pool`, `Events` | frames, events, the packet table, the keyed event list |
//! | `queues`, `pfc`, `ecn`, `classes`, `mtt` | | the rules a component applies: buffer architectures, pause thresholds, marking, priority classes, the translation cache |
//! | `monitor` | `Monitor` | the counters the components report to (SPEC N9) |
//! | `setup` | | what every queue pair of a run shares |
//! | `memory` | | the application memory models |
//!
//! `Part` is one partition of the network: it builds the components, routes each event to
//! the component it is for, and reads the statistics back.
//!
//! Each end of a flow is set up by an event of its own host when the flow starts; the
//! requester's queue pair is destroyed when its work request completes, the responder's one
//! longest link delay later (a teardown that may cross partitions, `crate::parallel`).

use std::sync::Arc;

use irn_transport::{Counters, Dur, Time};

use crate::config::{FaultKind, Scheduler, SimConfig, SwitchWatchdog, UnknownUnicast};
use crate::engine::EventQueue;
use crate::topology::Topology;
use crate::workload::Flow;
use irn_transport::rng::mix;

mod classes;
mod conformance;
mod ecn;
mod fabric;
mod failed;
mod flows;
mod l2;
mod link;
mod memory;
mod monitor;
mod mtt;
mod nic;
mod packet;
mod pfc;
mod queues;
mod ready;
mod safety;
pub mod sched;
mod setup;
mod switch;
#[cfg(test)]
mod tests;

use classes::{Classes, MAX_CLASSES};
pub use conformance::ConfigFinding;
pub use ecn::Marking;
use fabric::Fabric;
pub use flows::FlowRecord;
use flows::{QpSetup, Workload};
use l2::L2Table;
use link::Loss;
pub use memory::{SharedChecked, SimMemory};
use monitor::Monitor;
pub use monitor::{MonitorRow, PortStats, PrioCounters, TimelinePoint};
use nic::{Nic, RxPipeline};
pub(crate) use packet::Msg;
pub use packet::FRAME_OVERHEAD;
use packet::{Ev, Events, Hop, CONTROL, REQ, RESP, WORKLOAD};
pub use pfc::shared_xoff;
use pfc::PauseTiming;
use pfc::{default_headroom, xoff_threshold};
pub use safety::{Deadlock, SafetyStats};
use safety::{Nodes, Safety};
use sched::Weights;
use setup::{mtu_wire, queue_pair_config};
use switch::{Buffer, PfcWatchdog, Switch};

/// Totals over the run.
#[derive(Debug, Clone, Default)]
pub struct NetStats {
    /// Packets sent by NICs.
    pub host_packets: u64,
    /// Packets dropped anywhere.
    pub drops: u64,
    /// PFC frames sent by all ports.
    pub pause_frames: u64,
    /// Summed queue-pair counters of destroyed queue pairs.
    pub qp: Counters,
    /// What the configuration monitor found (with `config_check_ms`).
    pub config_findings: Vec<ConfigFinding>,
    /// The same per traffic class, when the run has more than one (`[[traffic]]`).
    pub class_qp: Vec<Counters>,
    /// Per host and priority: how long the host's NIC was paused, in µs (with more than one
    /// traffic class).
    pub host_paused_us: Vec<[f64; 8]>,
    /// Per (node, port), for ports with pause or drop activity.
    pub ports: Vec<(u32, u16, PortStats)>,
    /// Lossless packets admitted beyond the buffer.
    pub headroom_overflow: u64,
    /// The most packets any queue pair had in flight (requests or responses), measured after
    /// every packet a queue pair sent: BDP-FC keeps it at or below the cap.
    pub max_in_flight: u32,
    /// What the safety model counted (floods, watchdogs).
    pub safety: SafetyStats,
    /// The first PFC deadlock found, if any.
    pub deadlock: Option<Deadlock>,
    /// A deadlock stood when the run ended.
    pub deadlock_at_end: bool,
    /// Payload bytes of the flows that completed successfully.
    pub delivered_bytes: u64,
    /// Per (node, port, priority), the counters that are not all zero (when kept).
    pub prio: Vec<(u32, u16, u8, PrioCounters)>,
    /// Translation-cache misses at NICs (SPEC N6).
    pub mtt_misses: u64,
    /// The monitor's samples (with `monitor_interval_us`).
    pub rows: Vec<MonitorRow>,
    /// The fabric-wide time series (with `monitor_interval_us`).
    pub timeline: Vec<TimelinePoint>,
    /// Packets sent to failed hosts per millisecond from the start (with faults).
    pub sent_to_failed_per_ms: Vec<u64>,
}

/// The nodes of one partition of the network and their event list (with one partition: the
/// whole simulation), generic over whether memory holds bytes. Every node's state exists in
/// every partition; only the partition that owns a node ever touches it (the others keep it
/// empty), so counters and records add up across partitions.
/// [`Simulation`](crate::parallel::Simulation) drives the partitions.
pub(crate) struct Part<M: SimMemory> {
    /// What the components share: events, packets, topology, classes, monitor.
    fx: Fabric<M>,
    switches: Vec<Switch>,
    nics: Vec<Nic<M>>,
    /// Loss on the links.
    loss: Loss,
    work: Workload,
    /// Per traffic class: what its queue pairs share.
    qps: Vec<QpSetup>,
    /// The safety model's fabric-wide tasks (seed 001): faults, watchdog clocks, deadlocks.
    safety: Safety,
    cfg: SimConfig,
    end_time: Time,
    /// The time of the last event that was not a periodic safety task.
    last_real: Time,
}

impl<M: SimMemory> std::fmt::Debug for Part<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("name", &self.cfg.name)
            .field("now", &self.fx.q.q.now())
            .field("flows", &self.work.flows.len())
            .finish_non_exhaustive()
    }
}

/// A switch buffer that cannot hold the PFC headroom of even the least demanding link (its
/// round trip at its rate, plus two frames) is a configuration that cannot mean anything: no
/// lossless class could pause in time anywhere. (A single long link whose headroom exceeds the
/// buffer — e11-pingmesh's 100 µs link — is a modelled fault: its overflow is counted in
/// `headroom_overflow`; its port pauses at one frame.)
pub(crate) fn check_headroom(cfg: &SimConfig, topo: &Topology) -> Result<(), String> {
    if !(cfg.network.pfc || cfg.network.pause) || cfg.switch.pfc_headroom_bytes.is_some() {
        return Ok(());
    }
    let mtu = u64::from(mtu_wire(cfg));
    let least = topo
        .nodes
        .iter()
        .flat_map(|n| n.ports.iter())
        .map(|p| default_headroom(p.rate_bps, p.delay, mtu))
        .min();
    if let Some(headroom) = least {
        if cfg.switch.buffer_bytes < headroom + mtu {
            return Err(format!(
                "switch.buffer_bytes: {} B cannot hold the PFC headroom of any link of this \
                 topology (at least {} B: a link's round trip at its rate plus two frames) and a \
                 frame more; raise it, or set switch.pfc_headroom_bytes",
                cfg.switch.buffer_bytes, headroom
            ));
        }
    }
    Ok(())
}

/// The completion time of a `size`-byte Write from `src` to `dst` alone in the network:
/// every byte serialized once at the slowest rate, the largest packet's serialization once
/// more at each further hop (store and forward), the propagation delay of every link, and the ACK's way back. Packets
/// count a fixed 78 bytes of headers (standard RoCE Write: Ethernet, IPv4, UDP, BTH, RETH,
/// ICRC, FCS) whatever the transport, so that slowdowns of different transports share
/// their denominator.
pub(crate) fn ideal_fct(cfg: &SimConfig, topo: &Topology, src: u32, dst: u32, size: u64) -> Dur {
    let links = u64::from(topo.hops(src, dst));
    let rate = topo.slowest_rate();
    let mtu = u64::from(cfg.network.mtu);
    let n = size.div_ceil(mtu).max(1);
    let largest = size.min(mtu);
    let delay = topo.host_port(src).delay;
    let ser = |b: u64| Dur::transmission(b, rate);
    // Through equal-rate store-and-forward links, the last packet leaves the last link
    // after every byte's serialization plus, per further link, the largest packet's.
    ser(size + 78 * n)
        + ser(largest + 78).saturating_mul(links.saturating_sub(1))
        + (delay + ser(66)).saturating_mul(links)
        + delay.saturating_mul(links)
}

/// The (data, control) DSCPs a traffic class's NICs send ([`SimConfig::class_config`]).
fn class_dscps(c: &SimConfig) -> (u8, u8) {
    let net = &c.network;
    let ctrl = if net.control_priority {
        net.control_dscp
    } else {
        net.data_dscp
    };
    (net.data_dscp, ctrl)
}

/// The DSCPs the NICs send — every traffic class's data and control DSCPs, and those of
/// `nic-dscp` drifts — and, with flooding in a lossy class, the flood DSCP, which needs its
/// class at every port; the classes they make, and `[workload]`'s data and control DSCPs.
fn classes_of(cfg: &SimConfig) -> (Classes, u8, u8) {
    let (data_dscp, ctrl_dscp) = class_dscps(cfg);
    let mut dscps = vec![data_dscp, ctrl_dscp];
    for t in 1..cfg.class_count() {
        let (d, c) = class_dscps(&cfg.class_config(t));
        dscps.extend([d, c]);
    }
    if cfg.l2.unknown_unicast == UnknownUnicast::FloodLossy {
        dscps.push(cfg.l2.flood_dscp);
    }
    // A NIC whose traffic configuration drifts sends a DSCP of its own: the switches
    // classify it as they would any frame of that DSCP.
    dscps.extend(cfg.fault.iter().filter_map(|f| f.dscp));
    (Classes::new(&cfg.network, &dscps), data_dscp, ctrl_dscp)
}

/// How the run's NICs mark and schedule each traffic class ([`nic::tagging`]).
fn nic_tagging(cfg: &SimConfig) -> nic::Tagging {
    let classes: Vec<SimConfig> = (0..cfg.class_count())
        .map(|t| cfg.class_config(t))
        .collect();
    let dscps: Vec<(u8, u8)> = classes.iter().map(class_dscps).collect();
    let extra: Vec<[u32; 2]> = classes.iter().map(setup::extra_headers).collect();
    nic::tagging(
        cfg,
        &dscps,
        |d| cfg.network.priority(d) & 7,
        &extra,
        mtu_wire(cfg),
    )
}

/// The XOFF threshold of a lossless class at an ingress of `buffer` bytes fed by `link`: the
/// buffer less the headroom — what that link still delivers after the pause leaves (its round
/// trip at its rate, plus a frame each way), unless the configuration gives one.
fn xoff(cfg: &SimConfig, buffer: u64, headroom: Option<u64>, link: &crate::topology::Port) -> u64 {
    let mtu_wire = u64::from(mtu_wire(cfg));
    let h = headroom.unwrap_or_else(|| default_headroom(link.rate_bps, link.delay, mtu_wire));
    xoff_threshold(buffer, h, mtu_wire)
}

/// The switch `node` of a run (with no ports when another partition owns it: it is never
/// touched here).
fn build_switch(
    cfg: &SimConfig,
    topo: &Topology,
    classes: &Classes,
    node: u32,
    mine: bool,
    end: Time,
) -> Switch {
    let links = if mine {
        &topo.nodes[node as usize].ports[..]
    } else {
        &[]
    };
    let sw = &cfg.switch;
    let xoff: Vec<u64> = topo.nodes[node as usize]
        .ports
        .iter()
        .map(|l| xoff(cfg, sw.buffer_bytes, sw.pfc_headroom_bytes, l))
        .collect();
    let reserved = xoff
        .iter()
        .map(|&x| sw.buffer_bytes - x.min(sw.buffer_bytes))
        .sum();
    let buffer = Buffer {
        model: sw.model,
        bytes: sw.buffer_bytes,
        dt_alpha: sw.dt_alpha,
        pfc_alpha: sw.pfc_alpha.unwrap_or(sw.dt_alpha),
        resume_gap: sw.pfc_resume_gap_bytes,
        xoff,
        reserved,
    };
    let mut s = Switch::new(
        node,
        links,
        classes.len(),
        cfg.seed,
        buffer,
        Marking::new(sw),
    );
    if l2_modelled(cfg, end) {
        s = s.with_l2(L2Table::new(cfg, links.len()));
    }
    if let Some(seed) = cfg.network.ecmp_seed {
        s = s.with_ecmp_seed(seed);
    }
    // Input-queued, lossy classes beside lossless ones share each input's buffer below the
    // pause threshold (set before the PAUSE ports, whose every class is lossless).
    let lossless_any = (0..classes.len()).any(|c| classes.class_lossless(c));
    let lossy_mask = (0..classes.len())
        .filter(|&c| !classes.class_lossless(c))
        .fold(0u8, |m, c| m | 1 << c);
    if sw.model == crate::config::SwitchModel::InputQueued && lossless_any && lossy_mask != 0 {
        s = s.with_lossy_classes(lossy_mask);
    }
    // Its ports to servers whose link runs 802.3x PAUSE.
    let pause_ports: Vec<usize> = (0..links.len())
        .filter(|&p| {
            topo.port_host(node, p)
                .is_some_and(|h| cfg.network.pause_hosts.contains(&h))
        })
        .collect();
    if !pause_ports.is_empty() {
        s = s.with_pause_ports(&pause_ports);
    }
    if cfg.network.scheduler == Scheduler::Dwrr {
        let unit = mtu_wire(cfg);
        let w: Vec<u32> = (0..classes.len())
            .map(|c| cfg.network.dwrr_weight(classes.class_priority(c)))
            .collect();
        s = s.with_dwrr(Weights::new(&w, unit));
    }
    if cfg
        .network
        .routed_tiers
        .contains(&topo.nodes[node as usize].tier)
    {
        s = s.routing();
    }
    if cfg.watchdog.switch != SwitchWatchdog::Off && mine {
        // One watchdog queue per lossless class of each server-facing port.
        let ports: Vec<u16> = (0..links.len())
            .filter(|&p| topo.port_host(node, p).is_some())
            .map(|p| p as u16)
            .collect();
        if !ports.is_empty() {
            let lossless: Vec<u8> = (0..classes.len())
                .filter(|&c| classes.class_lossless(c))
                .map(|c| c as u8)
                .collect();
            s = s.with_watchdog(PfcWatchdog::new(cfg, &ports, &lossless));
        }
    }
    s
}

/// ToRs keep MAC tables that can miss: faults, or a MAC timeout shorter than the run.
fn l2_modelled(cfg: &SimConfig, end: Time) -> bool {
    !cfg.fault.is_empty() || Time::ZERO + L2Table::mac_timeout(cfg) < end
}

/// NICs buffer received frames in a pipeline: a rate, a stall fault, a translation cache.
fn pipeline_modelled(cfg: &SimConfig) -> bool {
    cfg.nic.rx_gbps.is_some()
        || cfg.nic.mtt_miss_ns > 0.0
        || cfg.fault.iter().any(|f| f.kind == FaultKind::NicRxStall)
}

/// The NIC of `host`.
fn build_nic<M: SimMemory>(
    cfg: &SimConfig,
    topo: &Topology,
    host: u32,
    tag: &nic::Tagging,
) -> Nic<M> {
    let rx = pipeline_modelled(cfg).then(|| {
        let x = xoff(
            cfg,
            cfg.nic.rx_buffer_bytes,
            cfg.nic.rx_pfc_headroom_bytes,
            topo.host_port(host),
        );
        let rx = RxPipeline::new(cfg, x);
        if cfg.network.pause_hosts.contains(&host) {
            rx.pause_link()
        } else {
            rx
        }
    });
    Nic::new(
        host,
        *topo.host_port(host),
        M::create(mix(cfg.seed ^ 0xA5A5 ^ u64::from(host))),
        tag,
        rx,
    )
}

impl<M: SimMemory> Part<M> {
    /// Sets up partition `me` of the network (`part_of`: each node's partition) and its ends
    /// of the flows; nothing runs yet.
    pub(crate) fn new(
        cfg: SimConfig,
        topo: Topology,
        flows: Vec<Flow>,
        part_of: Arc<[u16]>,
        me: u16,
    ) -> Part<M> {
        let (classes, data_dscp, _) = classes_of(&cfg);
        let data_prio = classes.of_dscp(data_dscp);
        let mine = |n: u32| part_of[n as usize] == me;
        let last = flows.last().map_or(Time::ZERO, |f| f.start);
        let end_time = last + Dur::from_picos((cfg.workload.drain_us * 1e6) as u64);
        let switches = (topo.hosts..topo.nodes.len() as u32)
            .map(|n| build_switch(&cfg, &topo, &classes, n, mine(n), end_time))
            .collect();
        let tag = nic_tagging(&cfg);
        let nics = (0..topo.hosts)
            .map(|h| build_nic(&cfg, &topo, h, &tag))
            .collect();
        let qps = (0..cfg.class_count())
            .map(|t| {
                // Each class's BDP cap in its own largest frames.
                let mut class = cfg.class_config(t);
                class.traffic.clear();
                let (cfg, attr, state_window) = queue_pair_config(&class, &topo);
                QpSetup {
                    cfg,
                    attr,
                    state_window,
                }
            })
            .collect();
        let nodes = topo.nodes.len();
        let keep_counters =
            cfg.monitor_interval_us.is_some() || cfg.watchdog.any() || !cfg.fault.is_empty();
        let port_counts: Vec<usize> = topo.nodes.iter().map(|n| n.ports.len()).collect();
        let mon = Monitor::new(
            keep_counters,
            cfg.monitor_interval_us.map(crate::config::us),
            &port_counts,
            classes.len(),
            classes.class(data_prio),
        );
        let mut q = Events {
            q: EventQueue::new(),
            origin: 0,
            count: vec![0; nodes],
        };
        let mut work = Workload::new(&cfg, flows, topo.max_delay(), mine, &mut q);
        let mut fx = Fabric::new(q, topo, classes, mon, part_of, me);
        fx.pause = PauseTiming {
            quanta: cfg.network.pause_quanta,
            refresh: cfg.network.pause_refresh,
        };
        for i in 0..work.records.len() {
            let f = work.flows[i];
            work.records[i].ideal = ideal_fct(&cfg, &fx.topo, f.src, f.dst, f.size);
        }
        let mut safety = Safety::default();
        if cfg.needs_one_partition() {
            safety.start(&cfg, &mut fx);
        }
        Part {
            loss: Loss::new(cfg.network.link_loss, cfg.seed, nodes),
            fx,
            switches,
            nics,
            work,
            qps,
            safety,
            cfg,
            end_time,
            last_real: Time::ZERO,
        }
    }

    /// The BDP cap the queue pairs use (packets), if BDP-FC is on.
    pub(crate) fn bdp_cap(&self) -> Option<u32> {
        self.qps[0].cfg.recovery.bdp_cap
    }

    /// Per-QP NIC state the transport adds to standard RoCE, in bits (SPEC E13).
    pub(crate) fn qp_state_bits(&self) -> u64 {
        self.qps[0]
            .cfg
            .recovery
            .nic_state(self.qps[0].state_window)
            .total_bits()
    }

    /// The largest pause threshold of an input-queued switch port, in bytes (every port's,
    /// where all links are alike).
    pub(crate) fn xoff_bytes(&self) -> u64 {
        let hosts = self.fx.hosts();
        (hosts..self.fx.topo.nodes.len() as u32)
            .flat_map(|n| {
                (0..self.fx.topo.nodes[n as usize].ports.len() as u16).map(move |p| (n, p))
            })
            .filter_map(|(n, p)| self.port_xoff(n, p))
            .max()
            .unwrap_or(0)
    }

    /// The pause threshold of switch `node`'s input `port` (input-queued), in bytes.
    pub(crate) fn port_xoff(&self, node: u32, port: u16) -> Option<u64> {
        let si = node.checked_sub(self.fx.hosts())? as usize;
        self.switches.get(si)?.port_xoff(port)
    }

    /// The completion time of a `size`-byte Write from `src` to `dst` alone in the network
    /// ([`ideal_fct`]).
    pub(crate) fn ideal_fct(&self, src: u32, dst: u32, size: u64) -> Dur {
        ideal_fct(&self.cfg, &self.fx.topo, src, dst, size)
    }

    /// Handles this partition's events before `limit` that are not past the end of the run.
    pub(crate) fn run_until(&mut self, limit: Time) {
        let limit = limit.min(self.end_time + Dur::from_picos(1));
        while let Some((now, ev)) = self.fx.q.q.pop_before(limit) {
            self.dispatch(now, ev);
            // Debug builds (the test suite) audit the switches' books as they go. Every 2^16
            // events: an audit walks every queued packet, and a wrong count stays wrong, so a
            // later audit — at the latest the one at the end of the run
            // (`Simulation::run`) — still catches it (every 2^14 cost a debug run a fifth of
            // its time).
            if cfg!(debug_assertions) && self.fx.q.q.processed() % (1 << 16) == 0 {
                if let Err(e) = self.check_invariants() {
                    panic!("at {now:?}, after {} events: {e}", self.fx.q.q.processed());
                }
            }
        }
    }

    /// The time of this partition's next event, if it has one before the end of the run.
    pub(crate) fn next_time(&self) -> Option<Time> {
        self.fx.q.q.peek_time().filter(|&t| t <= self.end_time)
    }

    /// The host of flow `i`'s requester.
    pub(crate) fn requester(&self, i: usize) -> u32 {
        self.work.end_host(&self.work.flows[i], REQ)
    }

    /// Flows whose requester completed here.
    pub(crate) fn done_flows(&self) -> usize {
        self.work.done
    }

    /// Takes in an event from another partition.
    pub(crate) fn deliver(&mut self, m: Msg) {
        self.fx.deliver(m);
    }

    /// The events for other partitions scheduled since the last call.
    pub(crate) fn take_outbox(&mut self) -> std::vec::Drain<'_, Msg> {
        self.fx.take_outbox()
    }

    /// Routes event `ev` to the component it is for.
    fn dispatch(&mut self, now: Time, ev: Ev) {
        self.fx.q.origin = match ev {
            Ev::Arrive { node, .. }
            | Ev::TxDone { node, .. }
            | Ev::Pfc { node, .. }
            | Ev::PauseTimer { node, .. } => node,
            Ev::RxDone { host } | Ev::QpTimer { host, .. } | Ev::FlowEnd { host, .. } => host,
            // Set below, once the flow end (and so its host) is known.
            Ev::FlowStart => WORKLOAD,
            // The handlers set the node they act for before scheduling anything.
            Ev::Control(_) => CONTROL,
        };
        match ev {
            Ev::Control(c) if c.periodic() => {}
            Ev::PauseTimer { .. } | Ev::Pfc { refresh: true, .. } => self.fx.bookkeeping -= 1,
            _ => self.last_real = now,
        }
        let hosts = self.fx.hosts();
        let fx = &mut self.fx;
        match ev {
            Ev::Arrive {
                node,
                port,
                pkt,
                hop,
            } => {
                if self.loss.lost(node) {
                    let c = fx.classes.class(fx.classes.priority(&hop));
                    fx.mon.ingress_drop(node, port, c);
                    fx.pool.free(pkt);
                    self.port_stats(node, port).drops += 1;
                } else if node < hosts {
                    let nic = &mut self.nics[node as usize];
                    if !nic.is_up() {
                        // The link is down.
                        fx.pool.free(pkt);
                        nic.stats.drops += 1;
                    } else if nic.has_pipeline() {
                        nic.buffer(fx, now, pkt, hop, &self.work.flows);
                    } else {
                        self.deliver_to_qp(now, node, pkt, hop);
                    }
                } else {
                    self.switches[(node - hosts) as usize].receive(fx, now, port, pkt, hop);
                }
            }
            Ev::TxDone { node, port } => {
                if node < hosts {
                    self.nics[node as usize].tx_done(fx, now);
                } else {
                    self.switches[(node - hosts) as usize].tx_done(fx, now, usize::from(port));
                }
            }
            Ev::RxDone { host } => {
                if let Some(f) = self.nics[host as usize].rx_done(fx, now, &self.work.flows) {
                    self.deliver_to_qp(now, host, f.pkt, f.hop);
                }
            }
            Ev::Pfc {
                node,
                port,
                prio,
                quanta,
                ..
            } => {
                if node < hosts {
                    self.nics[node as usize].pfc(fx, now, port, prio, quanta);
                } else {
                    self.switches[(node - hosts) as usize].pfc(fx, now, port, prio, quanta);
                }
            }
            Ev::PauseTimer {
                node,
                port,
                class,
                refresh,
            } => {
                let k = usize::from(class);
                if node < hosts {
                    self.nics[node as usize].pause_timer(fx, now, k, refresh);
                } else {
                    self.switches[(node - hosts) as usize].pause_timer(fx, now, port, k, refresh);
                }
            }
            Ev::QpTimer { host, slot, gen } => {
                let done = self.nics[host as usize].timer(fx, now, slot, gen);
                self.work.finished(fx, &mut self.nics, now, done);
            }
            Ev::FlowStart => {
                let Some((i, end)) = self.work.next_start(&mut fx.q) else {
                    return;
                };
                // What the set-up schedules comes from the end's host.
                let host = self.work.end_host(&self.work.flows[i], end);
                fx.q.origin = host;
                if self.nics[host as usize].is_up() {
                    self.work
                        .start_end(fx, &mut self.nics, &self.qps, now, (i, end));
                }
            }
            Ev::FlowEnd { host, flow } => {
                self.work
                    .end_responder(&mut self.nics[host as usize], flow as usize);
            }
            Ev::Control(c) => {
                let mut n = Nodes {
                    fx,
                    switches: &mut self.switches,
                    nics: &mut self.nics,
                    work: &mut self.work,
                };
                self.safety
                    .control(&self.cfg, &mut n, now, c, |n| monitor_sample(n, now));
            }
        }
    }

    /// A frame reaches the queue pair it is addressed to at `host` (a NIC finds it by its
    /// QPN; here, by the packet's flow and end).
    fn deliver_to_qp(&mut self, now: Time, host: u32, pkt: u32, hop: Hop) {
        let p = &self.fx.pool.packets[pkt as usize];
        let slot = self.work.slot(p.flow, p.to);
        let done = self.nics[host as usize].receive(&mut self.fx, now, slot, pkt, hop);
        self.work.finished(&mut self.fx, &mut self.nics, now, done);
    }

    /// The counters of `node`'s `port` (a NIC has one port).
    fn port_stats(&mut self, node: u32, port: u16) -> &mut PortStats {
        if node < self.fx.hosts() {
            &mut self.nics[node as usize].stats
        } else {
            &mut self.switches[(node - self.fx.hosts()) as usize].stats[port as usize]
        }
    }

    /// Ends the run at `now` (the last event of any partition).
    pub(crate) fn finish(&mut self, now: Time) {
        self.safety.finish(&self.cfg, &self.fx, &self.switches, now);
        let probe = Probe {
            nics: &self.nics,
            switches: &self.switches,
            hosts: self.fx.hosts(),
        };
        let classes = &self.fx.classes;
        // Close the per-priority pause intervals still open.
        self.fx
            .mon
            .close(&self.fx.topo, classes.len(), |node, port, c| {
                probe.open_pause(classes, now, node, port, c)
            });
        for nic in &mut self.nics {
            nic.finish(now);
        }
        for sw in &mut self.switches {
            sw.finish(now);
        }
    }

    /// The state of flow `i`'s queue pairs, for debugging a stuck flow.
    pub(crate) fn debug_flow(&self, i: usize) -> String {
        if self.work.end_slot(i, REQ).is_none() {
            return format!("flow {i}: no such flow");
        }
        let f = self.work.flows[i];
        let mut out = String::new();
        for end in [REQ, RESP] {
            let h = self.work.end_host(&f, end);
            if !self.fx.owns(h) {
                continue;
            }
            let s = self.work.end_slot(i, end).unwrap_or(packet::NIL);
            out += &self.nics[h as usize].describe(s);
        }
        out
    }

    /// The per-flow records, in flow order.
    pub(crate) fn records(&self) -> &[FlowRecord] {
        &self.work.records
    }

    /// Simulated time reached: the last event that was not a periodic safety task.
    pub(crate) fn now(&self) -> Time {
        self.last_real
    }

    /// Events processed.
    pub(crate) fn events(&self) -> u64 {
        self.fx.q.q.processed()
    }

    /// The topology.
    pub(crate) fn topology(&self) -> &Topology {
        &self.fx.topo
    }

    /// Network totals.
    pub(crate) fn stats(&self) -> NetStats {
        let mut s = NetStats {
            qp: self.nics.iter().fold(Counters::default(), |mut t, n| {
                t += n.retired;
                t
            }),
            max_in_flight: self.nics.iter().map(|n| n.max_in_flight).max().unwrap_or(0),
            ..NetStats::default()
        };
        if self.cfg.class_count() > 1 {
            s.class_qp = vec![Counters::default(); self.cfg.class_count()];
            for n in &self.nics {
                for (t, c) in n.retired_by_class.iter().enumerate() {
                    s.class_qp[t] += *c;
                }
            }
            s.host_paused_us = self
                .nics
                .iter()
                .map(|n| n.paused_by_prio.map(|d| d.as_picos() as f64 / 1e6))
                .collect();
        }
        let mut port = |node: u32, p: u16, st: &PortStats| {
            s.drops += st.drops;
            s.pause_frames += st.pause_sent;
            s.headroom_overflow += st.headroom_overflow;
            if st.drops + st.pause_sent + st.pause_received > 0 {
                s.ports.push((node, p, *st));
            }
        };
        for (h, nic) in self.nics.iter().enumerate() {
            port(h as u32, 0, &nic.stats);
        }
        for (i, sw) in self.switches.iter().enumerate() {
            for (p, st) in sw.stats.iter().enumerate() {
                port(self.fx.hosts() + i as u32, p as u16, st);
            }
        }
        s.host_packets = self.nics.iter().map(|n| n.stats.tx_packets).sum();
        let mut safety = SafetyStats {
            nic_watchdog: self.safety.nic_watchdogs,
            sent_to_failed_packets: self.fx.failed.packets,
            sent_to_failed_bytes: self.fx.failed.bytes,
            ..SafetyStats::default()
        };
        for sw in &self.switches {
            let (l2, (storms, restorations)) = sw.safety_counts();
            safety.floods += l2.floods;
            safety.flood_discards += l2.flood_discards;
            safety.l2_drops += l2.l2_drops;
            safety.arp_drops += l2.arp_drops;
            safety.switch_watchdog += storms;
            safety.restorations += restorations;
        }
        s.safety = safety;
        s.deadlock = self.safety.deadlock.clone();
        s.config_findings = self.safety.config.findings.clone();
        s.deadlock_at_end = self.safety.deadlock_at_end;
        s.delivered_bytes = self.work.delivered;
        s.mtt_misses = self.nics.iter().map(Nic::mtt_misses).sum();
        let mon = &self.fx.mon;
        if mon.on {
            let topo = &self.fx.topo;
            let classes = &self.fx.classes;
            for node in 0..topo.nodes.len() as u32 {
                for port in 0..topo.nodes[node as usize].ports.len() as u16 {
                    for c in 0..classes.len() {
                        let pc = mon.get(node, port, c);
                        if pc != PrioCounters::default() {
                            s.prio.push((node, port, classes.class_priority(c), pc));
                        }
                    }
                }
            }
        }
        s.rows = mon.rows.clone();
        s.timeline = mon.timeline.clone();
        s.sent_to_failed_per_ms = self.fx.failed.per_ms.clone();
        s
    }

    /// Checks the books: every NIC's receive buffer holds what its counters say; in every
    /// switch every buffered byte is in exactly one queue, and the per-port, per-class
    /// counters (ingress and egress) add up to what the queues hold.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        for nic in &self.nics {
            nic.check_books()?;
        }
        for (si, sw) in self.switches.iter().enumerate() {
            let n = sw.ports.len();
            // Per (port, class): bytes that arrived through it, bytes queued for it.
            let mut ingress = vec![[0u64; MAX_CLASSES]; n];
            let mut egress = vec![[0u64; MAX_CLASSES]; n];
            let mut queued = 0u64;
            // Copies of a flooded packet share its buffer: counted once at their ingress.
            let mut groups = std::collections::BTreeSet::new();
            let meta = &self.fx.pool.meta;
            let mut count = |pkt: u32, inp: u16, out: usize, c: usize| {
                let w = u64::from(meta[pkt as usize].hop.wire);
                egress[out][c] += w;
                if sw.flood_group(pkt).is_none_or(|g| groups.insert(g)) {
                    ingress[usize::from(inp)][c] += w;
                    queued += w;
                }
            };
            sw.queues.for_each(meta, &mut count);
            let held: Vec<[u64; MAX_CLASSES]> = sw.ports.iter().map(|p| p.ingress.bytes).collect();
            let queues: Vec<[u64; MAX_CLASSES]> = sw.ports.iter().map(|p| p.egress).collect();
            let totals_agree = sw.ports.iter().all(|p| {
                p.ingress.total() == p.ingress.bytes.iter().sum::<u64>()
                    && p.queued == p.egress.iter().sum::<u64>()
            });
            if !totals_agree {
                return Err(format!(
                    "switch {si}: a port's totals disagree with its classes"
                ));
            }
            if held != ingress || queues != egress || queued != sw.used {
                return Err(format!(
                    "switch {si}: ingress counters {held:?} egress {queues:?} used {} but the \
                     queues hold ingress {ingress:?} egress {egress:?} total {queued}",
                    sw.used
                ));
            }
        }
        Ok(())
    }
}

/// What the monitor reads of the components: pause intervals still open, bytes held.
struct Probe<'a, M> {
    nics: &'a [Nic<M>],
    switches: &'a [Switch],
    hosts: u32,
}

impl<M: SimMemory> Probe<'_, M> {
    /// How long (`node`, `port`, class `c`) has been paused by its peer without a resume.
    fn open_pause(&self, classes: &Classes, now: Time, node: u32, port: u16, c: usize) -> Dur {
        if node < self.hosts {
            self.nics[node as usize].open_pause(now, classes.class_priority(c))
        } else {
            self.switches[(node - self.hosts) as usize].open_pause(now, port, c)
        }
    }

    /// Bytes of class `c` queued at switch egress (`node`, `port`), or held in a NIC's
    /// receive buffer.
    fn held(&self, node: u32, port: u16, c: usize) -> u64 {
        if node < self.hosts {
            self.nics[node as usize].rx_bytes(c)
        } else {
            self.switches[(node - self.hosts) as usize].ports[usize::from(port)].egress[c]
        }
    }
}

/// The monitor's sample at `now` (SPEC N9).
fn monitor_sample<M: SimMemory>(n: &mut Nodes<'_, M>, now: Time) {
    let probe = Probe {
        nics: n.nics,
        switches: n.switches,
        hosts: n.fx.hosts(),
    };
    let fx = &mut *n.fx;
    let classes = &fx.classes;
    fx.mon.sample(now, &fx.topo, classes, |node, port, c| {
        (
            probe.open_pause(classes, now, node, port, c),
            probe.held(node, port, c),
        )
    });
}
