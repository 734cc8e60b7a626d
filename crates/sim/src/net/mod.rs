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
//! # Components (after htsim's: one module per part of the network)
//!
//! | module | owns |
//! |---|---|
//! | this one | `Part`: one partition's nodes and event list, set-up, dispatch, statistics, audits |
//! | `packet` | frames and events: [`FRAME_OVERHEAD`], the forwarding state, the keyed event list |
//! | `link` | serialization, propagation, events crossing to another partition |
//! | `nic` | the hosts' ports and their queue pairs' scheduling; the receive pipeline |
//! | `switch` | forwarding, admission, strict priority between classes |
//! | `queues` | the two buffer architectures (virtual output queues, output FIFOs) behind one interface |
//! | `pfc` | per (port, class) pause state, XOFF/XON thresholds and headroom |
//! | `ecn` | RED and threshold marking, as pure functions of the queue length |
//! | `flows` | flow ends, their queue pairs and records |
//! | `setup` | what every queue pair of a run shares: recovery, timeouts, BDP cap, congestion control |
//! | `memory` | the application memory models |
//!
//! The component modules are parts of one partition's model: each adds methods to `Part` for
//! its component, and imports by name what it uses of the others.
//!
//! Each end of a flow is set up by an event of its own host when the flow starts; the
//! requester's queue pair is destroyed when its work request completes, the responder's one
//! longest link delay later (a teardown that may cross partitions, `crate::parallel`).

use std::collections::VecDeque;
use std::sync::Arc;

use irn_transport::{Counters, Dur, QpAttr, QpConfig, Time};

use crate::config::SimConfig;
use crate::engine::EventQueue;
use crate::topology::Topology;
use crate::workload::Flow;
use irn_transport::rng::{mix, Rng};

mod classes;
mod ecn;
mod flows;
mod link;
mod memory;
mod monitor;
mod mtt;
mod nic;
mod packet;
mod pfc;
mod queues;
mod safety;
mod setup;
mod switch;

use classes::{Classes, MAX_CLASSES};
pub use ecn::Marking;
pub use flows::FlowRecord;
use flows::{end_host, FlowState, REQ, RESP};
pub use memory::{SharedChecked, SimMemory};
use monitor::Monitor;
pub use monitor::{MonitorRow, PrioCounters, TimelinePoint};
use nic::Nic;
pub(crate) use packet::Msg;
pub use packet::FRAME_OVERHEAD;
use packet::{Ev, Events, Meta, Packet, CONTROL, WORKLOAD};
use pfc::{default_headroom, xoff_threshold, Ingress};
use safety::Safety;
pub use safety::{Deadlock, SafetyStats};
use setup::{mtu_wire, queue_pair_config};
use switch::Switch;

/// Counters of one port (NIC or switch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames sent (data and control, not PFC).
    pub tx_packets: u64,
    /// Bytes sent on the wire.
    pub tx_bytes: u64,
    /// Packets dropped at this port's ingress (buffer full, lossy) or on its incoming link.
    pub drops: u64,
    /// PFC pause frames (pause and resume) sent upstream through this port.
    pub pause_sent: u64,
    /// PFC frames received.
    pub pause_received: u64,
    /// Time this port's egress spent paused (any priority).
    pub paused: Dur,
    /// Lossless packets admitted beyond the buffer (headroom too small).
    pub headroom_overflow: u64,
    /// Packets marked CE at this egress.
    pub ecn_marked: u64,
}

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
}

/// The nodes of one partition of the network and their event list (with one partition: the
/// whole simulation), generic over whether memory holds bytes. Every node's state exists in
/// every partition; only the partition that owns a node ever touches it (the others keep it
/// empty), so counters and records add up across partitions.
/// [`Simulation`](crate::parallel::Simulation) drives the partitions.
pub(crate) struct Part<M: SimMemory> {
    /// Per node, the partition that owns it.
    part_of: Arc<[u16]>,
    /// This partition.
    me: u16,
    /// Events for other partitions, scheduled during the current window.
    outbox: Vec<Msg>,
    cfg: SimConfig,
    topo: Topology,
    q: Events,
    packets: Vec<Packet>,
    /// Per packet, its payload bytes (only when the memory model holds bytes: otherwise
    /// empty, so a packet's slot is its headers alone).
    payloads: Vec<Vec<u8>>,
    meta: Vec<Meta>,
    free_packets: Vec<u32>,
    switches: Vec<Switch>,
    nics: Vec<Nic<M>>,
    flows: Vec<Flow>,
    records: Vec<FlowRecord>,
    states: Vec<FlowState>,
    /// Flow ends to set up, as (start, key, flow, end), in start order: flow starts are events
    /// of their own (one pending at a time) at the end's host.
    starts: Vec<(Time, u64, u32, u8)>,
    next_start: usize,
    /// From the requester's completion to the responder's teardown: the longest link delay,
    /// so that it is never shorter than a partition's lookahead.
    teardown: Dur,
    done_flows: usize,
    qp_cfg: QpConfig,
    /// Packets that size the per-QP state of designs without a BDP cap (SPEC E13).
    state_window: u32,
    qp_attr: QpAttr,
    /// The DSCP → priority map, the classes and the lossless priorities.
    classes: Classes,
    /// The DSCPs of data and of control packets, and their priorities as NICs see them.
    data_dscp: u8,
    ctrl_dscp: u8,
    /// Header bytes the TCP model adds to (data, control) packets (zero otherwise).
    extra_headers: [u32; 2],
    data_prio: u8,
    ctrl_prio: u8,
    /// NICs tag their frames (802.1Q) with the priority as PCP.
    vlan: bool,
    /// Per switch (index), per input port: the occupancy of a lossless class above which the
    /// port pauses its upstream — the buffer less the headroom of that port's own link.
    xoff_in: Vec<Vec<u64>>,
    /// Per switch: the headroom its ports reserve together (a shared-buffer switch's share
    /// kept out of the dynamic threshold).
    reserved: Vec<u64>,
    /// Per host: the share of its receive buffer a lossless class may hold before the NIC
    /// pauses its switch (the buffer less its own link's headroom).
    nic_xoff: Vec<u64>,
    /// The NICs' receive pipeline rate in bits per second (`None`: never the bottleneck).
    rx_rate: Option<u64>,
    /// Per node: random link loss on its incoming links.
    loss_rng: Vec<Rng>,
    /// The switches' ECN marking rule.
    marking: ecn::Marking,
    /// Per node: RED's marking decisions at its outputs.
    ecn_rng: Vec<Rng>,
    buf: Vec<u8>,
    totals: Counters,
    end_time: Time,
    max_in_flight: u32,
    /// The safety model (seed 001): L2 tables, faults, watchdogs, deadlock detection.
    safety: Safety,
    /// Per (node, port, priority) counters and their time series (SPEC N9).
    mon: Monitor,
    /// The time of the last event that was not a periodic safety task.
    last_real: Time,
    /// Payload bytes of flows completed successfully.
    delivered: u64,
    /// Per host, the NIC's translation cache (empty when not modelled).
    mtt: Vec<mtt::Mtt>,
    mtt_misses: u64,
}

impl<M: SimMemory> std::fmt::Debug for Part<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("name", &self.cfg.name)
            .field("now", &self.q.q.now())
            .field("flows", &self.flows.len())
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
        let net = &cfg.network;
        let data_dscp = net.data_dscp;
        let ctrl_dscp = if net.control_priority {
            net.control_dscp
        } else {
            data_dscp
        };
        // Flooded copies demoted to a lossy class need that class at every port.
        let mut dscps = vec![data_dscp, ctrl_dscp];
        if cfg.l2.unknown_unicast == crate::config::UnknownUnicast::FloodLossy {
            dscps.push(cfg.l2.flood_dscp);
        }
        let classes = Classes::new(net, &dscps);
        let (data_prio, ctrl_prio) = (classes.of_dscp(data_dscp), classes.of_dscp(ctrl_dscp));
        let mtu_wire = u64::from(mtu_wire(&cfg));
        // Upstream link round trip at its rate, plus a frame in flight each way.
        // A lossless queue pauses its upstream at buffer − headroom (at least one frame), the
        // headroom being what its own link still delivers after the pause leaves: that link's
        // round trip at its rate, plus a frame each way — unless the configuration gives one.
        let xoff = |buffer: u64, headroom: Option<u64>, link: &crate::topology::Port| {
            let h =
                headroom.unwrap_or_else(|| default_headroom(link.rate_bps, link.delay, mtu_wire));
            xoff_threshold(buffer, h, mtu_wire)
        };
        let xoff_in: Vec<Vec<u64>> = (topo.hosts..topo.nodes.len() as u32)
            .map(|n| {
                topo.nodes[n as usize]
                    .ports
                    .iter()
                    .map(|l| xoff(cfg.switch.buffer_bytes, cfg.switch.pfc_headroom_bytes, l))
                    .collect()
            })
            .collect();
        let reserved = xoff_in
            .iter()
            .map(|ports| {
                ports
                    .iter()
                    .map(|&x| cfg.switch.buffer_bytes - x.min(cfg.switch.buffer_bytes))
                    .sum()
            })
            .collect();
        let nic_xoff = (0..topo.hosts)
            .map(|h| {
                xoff(
                    cfg.nic.rx_buffer_bytes,
                    cfg.nic.rx_pfc_headroom_bytes,
                    topo.host_port(h),
                )
            })
            .collect();
        let rx_rate = cfg.nic.rx_gbps.map(|g| (g * 1e9).round() as u64);
        let mine = |n: u32| part_of[n as usize] == me;
        let switches = (topo.hosts..topo.nodes.len() as u32)
            .map(|n| {
                Switch::new(
                    // Another partition's switch is never touched: no ports here.
                    if mine(n) {
                        topo.nodes[n as usize].ports.len()
                    } else {
                        0
                    },
                    classes.len(),
                    mix(cfg.seed ^ (u64::from(n) << 32)),
                    cfg.switch.model,
                )
            })
            .collect();
        let nics = (0..topo.hosts)
            .map(|h| Nic {
                mem: M::create(mix(cfg.seed ^ 0xA5A5 ^ u64::from(h))),
                slots: Vec::new(),
                free: Vec::new(),
                ready: VecDeque::new(),
                busy_until: Time::ZERO,
                wake: false,
                paused: [false; 8],
                paused_since: [Time::ZERO; 8],
                stats: PortStats::default(),
                rx: VecDeque::new(),
                rx_held: Ingress::EMPTY,
                rx_debt: Dur::ZERO,
                ctrl_idle: false,
                dead_ready: 0,
                ctrl: Vec::new(),
            })
            .collect();
        let (qp_cfg, qp_attr, state_window) = queue_pair_config(&cfg, &topo);
        let nodes = topo.nodes.len();
        let teardown = topo.max_delay();
        let last = flows.last().map_or(Time::ZERO, |f| f.start);
        let end_time = last + Dur::from_picos((cfg.workload.drain_us * 1e6) as u64);
        let safety = Safety::new(&cfg, &topo, end_time);
        let keep_counters =
            cfg.monitor_interval_us.is_some() || cfg.watchdog.any() || !cfg.fault.is_empty();
        let port_counts: Vec<usize> = topo.nodes.iter().map(|n| n.ports.len()).collect();
        let mon = Monitor::new(
            keep_counters,
            cfg.monitor_interval_us.map(crate::config::us),
            &port_counts,
            classes.len(),
        );
        let mut starts: Vec<(Time, u64, u32, u8)> = (0..flows.len() as u32)
            .flat_map(|i| {
                let f = flows[i as usize];
                [REQ, RESP].map(|end| {
                    mine(end_host(cfg.transport.op, &f, end)).then_some((
                        f.start,
                        Events::start_key(i, end),
                        i,
                        end as u8,
                    ))
                })
            })
            .flatten()
            .collect();
        starts.sort_unstable_by_key(|&(at, key, ..)| (at, key));
        let mut sim = Part {
            part_of,
            me,
            outbox: Vec::new(),
            records: flows
                .iter()
                .map(|&f| FlowRecord {
                    flow: f,
                    end: None,
                    status: None,
                    ideal: Dur::ZERO,
                    intact: true,
                })
                .collect(),
            states: vec![FlowState::NONE; flows.len()],
            starts,
            next_start: 0,
            teardown,
            loss_rng: (0..nodes)
                .map(|n| Rng::stream(cfg.seed, (11 << 32) | n as u64))
                .collect(),
            ecn_rng: (0..nodes)
                .map(|n| Rng::stream(cfg.seed, (12 << 32) | n as u64))
                .collect(),
            q: Events {
                q: EventQueue::new(),
                origin: 0,
                count: vec![0; nodes],
            },
            safety,
            mon,
            last_real: Time::ZERO,
            delivered: 0,
            mtt: if cfg.nic.mtt_miss_ns > 0.0 {
                (0..topo.hosts)
                    .map(|_| mtt::Mtt::new(cfg.nic.mtt_entries as usize))
                    .collect()
            } else {
                Vec::new()
            },
            mtt_misses: 0,
            packets: Vec::new(),
            payloads: Vec::new(),
            meta: Vec::new(),
            free_packets: Vec::new(),
            switches,
            nics,
            done_flows: 0,
            qp_cfg,
            state_window,
            qp_attr,
            classes,
            data_dscp,
            ctrl_dscp,
            extra_headers: setup::extra_headers(&cfg),
            data_prio,
            ctrl_prio,
            vlan: cfg.network.vlan,
            marking: ecn::Marking::new(&cfg.switch),
            xoff_in,
            reserved,
            nic_xoff,
            rx_rate,
            buf: Vec::new(),
            totals: Counters::default(),
            end_time: Time::ZERO,
            max_in_flight: 0,
            flows,
            topo,
            cfg,
        };
        for i in 0..sim.records.len() {
            let f = sim.flows[i];
            sim.records[i].ideal = sim.ideal_fct(f.src, f.dst, f.size);
        }
        if let Some(&(at, key, ..)) = sim.starts.first() {
            sim.q.q.push_keyed(at, key, Ev::FlowStart);
        }
        sim.end_time = end_time;
        if sim.cfg.needs_one_partition() {
            sim.safety_start();
        }
        sim
    }

    /// The BDP cap the queue pairs use (packets), if BDP-FC is on.
    pub(crate) fn bdp_cap(&self) -> Option<u32> {
        self.qp_cfg.recovery.bdp_cap
    }

    /// Per-QP NIC state the transport adds to standard RoCE, in bits (SPEC E13).
    pub(crate) fn qp_state_bits(&self) -> u64 {
        self.qp_cfg
            .recovery
            .nic_state(self.state_window)
            .total_bits()
    }

    /// The largest pause threshold of an input-queued switch port, in bytes (every port's,
    /// where all links are alike).
    pub(crate) fn xoff_bytes(&self) -> u64 {
        self.xoff_in.iter().flatten().copied().max().unwrap_or(0)
    }

    /// The pause threshold of switch `node`'s input `port` (input-queued), in bytes.
    pub(crate) fn port_xoff(&self, node: u32, port: u16) -> Option<u64> {
        let si = node.checked_sub(self.topo.hosts)? as usize;
        self.xoff_in.get(si)?.get(usize::from(port)).copied()
    }

    /// The completion time of a `size`-byte Write from `src` to `dst` alone in the network:
    /// every byte serialized once at the slowest rate, the largest packet's serialization once
    /// more at each further hop (store and forward), the propagation delay of every link, and the ACK's way back. Packets
    /// count a fixed 78 bytes of headers (standard RoCE Write: Ethernet, IPv4, UDP, BTH, RETH,
    /// ICRC, FCS) whatever the transport, so that slowdowns of different transports share
    /// their denominator.
    pub(crate) fn ideal_fct(&self, src: u32, dst: u32, size: u64) -> Dur {
        let links = u64::from(self.topo.hops(src, dst));
        let rate = self.topo.slowest_rate();
        let mtu = u64::from(self.cfg.network.mtu);
        let n = size.div_ceil(mtu).max(1);
        let largest = size.min(mtu);
        let delay = self.topo.host_port(src).delay;
        let ser = |b: u64| Dur::transmission(b, rate);
        // Through equal-rate store-and-forward links, the last packet leaves the last link
        // after every byte's serialization plus, per further link, the largest packet's.
        ser(size + 78 * n)
            + ser(largest + 78).saturating_mul(links.saturating_sub(1))
            + (delay + ser(66)).saturating_mul(links)
            + delay.saturating_mul(links)
    }

    /// Handles this partition's events before `limit` that are not past the end of the run.
    pub(crate) fn run_until(&mut self, limit: Time) {
        let limit = limit.min(self.end_time + Dur::from_picos(1));
        while let Some((now, ev)) = self.q.q.pop_before(limit) {
            self.dispatch(now, ev);
            // Debug builds (the test suite) audit the switches' books as they go. Every 2^16
            // events: an audit walks every queued packet, and a wrong count stays wrong, so a
            // later audit — at the latest the one at the end of the run
            // (`Simulation::run`) — still catches it (every 2^14 cost a debug run a fifth of
            // its time).
            if cfg!(debug_assertions) && self.q.q.processed() % (1 << 16) == 0 {
                if let Err(e) = self.check_invariants() {
                    panic!("at {now:?}, after {} events: {e}", self.q.q.processed());
                }
            }
        }
    }

    /// The time of this partition's next event, if it has one before the end of the run.
    pub(crate) fn next_time(&self) -> Option<Time> {
        self.q.q.peek_time().filter(|&t| t <= self.end_time)
    }

    /// The host of flow `i`'s requester.
    pub(crate) fn requester(&self, i: usize) -> u32 {
        self.end_host(&self.flows[i], REQ)
    }

    /// Flows whose requester completed here.
    pub(crate) fn done_flows(&self) -> usize {
        self.done_flows
    }

    fn dispatch(&mut self, now: Time, ev: Ev) {
        self.q.origin = match ev {
            Ev::Arrive { node, .. } | Ev::TxDone { node, .. } | Ev::Pfc { node, .. } => node,
            Ev::RxDone { host } | Ev::QpTimer { host, .. } | Ev::FlowEnd { host, .. } => host,
            // Set below, once the flow end (and so its host) is known.
            Ev::FlowStart => WORKLOAD,
            // The handlers set the node they act for before scheduling anything.
            Ev::Control(_) => CONTROL,
        };
        match ev {
            Ev::Control(c) if c.periodic() => {}
            _ => self.last_real = now,
        }
        match ev {
            Ev::Arrive {
                node,
                port,
                pkt,
                hop,
            } => {
                if self.cfg.network.link_loss > 0.0
                    && self.loss_rng[node as usize].chance(self.cfg.network.link_loss)
                {
                    if self.mon.on {
                        let c = self.classes.class(self.classes.priority(&hop));
                        self.mon.at(node, port, c).ingress_drops += 1;
                    }
                    self.drop_packet(node, port, pkt);
                } else if node < self.topo.hosts {
                    if self.safety.l2_on && !self.safety.host_up[node as usize] {
                        // The link is down.
                        self.drop_packet(node, port, pkt);
                    } else if self.safety.rx_pipeline {
                        self.nic_buffer(now, node, pkt, hop);
                    } else {
                        self.nic_receive(now, node, pkt, hop);
                    }
                } else {
                    self.switch_receive(now, node, port, pkt, hop);
                }
            }
            Ev::TxDone { node, port } => {
                if node < self.topo.hosts {
                    self.nics[node as usize].wake = false;
                    self.nic_send(now, node);
                } else {
                    let s = (node - self.topo.hosts) as usize;
                    self.switches[s].ports[port as usize].wake = false;
                    self.switch_send(now, node, port as usize);
                }
            }
            Ev::RxDone { host } => self.nic_rx_done(now, host),
            Ev::Pfc {
                node,
                port,
                prio,
                pause,
            } => self.pfc_receive(now, node, port, prio, pause),
            Ev::QpTimer { host, slot, gen } => {
                let s = &mut self.nics[host as usize].slots[slot as usize];
                if s.gen != gen || s.timer != Some(now) {
                    return;
                }
                s.timer = None;
                if let Some(qp) = s.qp.as_mut() {
                    if qp.poll_timeout().is_some_and(|t| t <= now) {
                        qp.handle_timeout(now);
                        self.nics[host as usize].ctrl_idle = false;
                    }
                }
                self.touch(now, host, slot);
            }
            Ev::FlowStart => {
                let Some(&(_, _, flow, end)) = self.starts.get(self.next_start) else {
                    return;
                };
                self.next_start += 1;
                if let Some(&(at, key, ..)) = self.starts.get(self.next_start) {
                    self.q.q.push_keyed(at, key, Ev::FlowStart);
                }
                let (i, end) = (flow as usize, usize::from(end));
                // What the set-up schedules comes from the end's host.
                let host = self.end_host(&self.flows[i], end);
                self.q.origin = host;
                if self.safety.host_up[host as usize] {
                    self.start_end(now, i, end);
                }
            }
            Ev::FlowEnd { host, flow } => self.end_responder(host, flow as usize),
            Ev::Control(c) => self.control(now, c),
        }
    }

    /// The counters of `node`'s `port` (a NIC has one port).
    fn port_stats(&mut self, node: u32, port: u16) -> &mut PortStats {
        if node < self.topo.hosts {
            &mut self.nics[node as usize].stats
        } else {
            &mut self.switches[(node - self.topo.hosts) as usize].stats[port as usize]
        }
    }

    fn drop_packet(&mut self, node: u32, port: u16, pkt: u32) {
        self.free_packet(pkt);
        self.port_stats(node, port).drops += 1;
    }

    /// Ends the run at `now` (the last event of any partition).
    pub(crate) fn finish(&mut self, now: Time) {
        self.safety_finish(now);
        if self.mon.on {
            // Close the per-priority pause intervals still open.
            for node in 0..self.topo.nodes.len() as u32 {
                for port in 0..self.topo.nodes[node as usize].ports.len() as u16 {
                    for c in 0..self.classes.len() {
                        let t = self.paused_total(now, node, port, c);
                        self.mon.at(node, port, c).paused = t;
                    }
                }
            }
        }
        // Close pause intervals still open, and count live queue pairs.
        for nic in &mut self.nics {
            for p in 0..8 {
                if nic.paused[p] {
                    nic.stats.paused = nic.stats.paused + (now - nic.paused_since[p]);
                    nic.paused[p] = false;
                }
            }
            for s in &nic.slots {
                if let Some(qp) = &s.qp {
                    self.totals += *qp.counters();
                }
            }
        }
        for sw in &mut self.switches {
            for (p, port) in sw.ports.iter_mut().enumerate() {
                for c in 0..MAX_CLASSES {
                    if port.paused[c] {
                        let since = sw.paused_since[p * MAX_CLASSES + c];
                        sw.stats[p].paused = sw.stats[p].paused + (now - since);
                        port.paused[c] = false;
                    }
                }
            }
        }
    }

    /// The state of flow `i`'s queue pairs, for debugging a stuck flow.
    pub(crate) fn debug_flow(&self, i: usize) -> String {
        let Some(st) = self.states.get(i) else {
            return format!("flow {i}: no such flow");
        };
        let f = self.flows[i];
        let mut out = String::new();
        for end in [REQ, RESP] {
            let (h, s) = (self.end_host(&f, end), st.slot[end]);
            if self.part_of[h as usize] != self.me {
                continue;
            }
            let Some(slot) = self.nics[h as usize].slots.get(s as usize) else {
                out += &format!("host {h}: no live queue pair\n");
                continue;
            };
            let nic = &self.nics[h as usize];
            out += &format!(
                "host {h} NIC: wake {} busy until {:?} ready {:?} paused {:?}\n",
                nic.wake, nic.busy_until, nic.ready, nic.paused
            );
            out += &format!(
                "host {h} slot {s} timer {:?} ready {}: {:#?}\n",
                slot.timer,
                slot.ready,
                slot.qp
                    .as_ref()
                    .map(|q| (q.poll_timeout(), q.in_flight(), q.state()))
            );
            out += &format!("{:?}\n", slot.qp);
        }
        out
    }

    /// The per-flow records, in flow order.
    pub(crate) fn records(&self) -> &[FlowRecord] {
        &self.records
    }

    /// Simulated time reached: the last event that was not a periodic safety task.
    pub(crate) fn now(&self) -> Time {
        self.last_real
    }

    /// Events processed.
    pub(crate) fn events(&self) -> u64 {
        self.q.q.processed()
    }

    /// The topology.
    pub(crate) fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Network totals.
    pub(crate) fn stats(&self) -> NetStats {
        let mut s = NetStats {
            qp: self.totals,
            max_in_flight: self.max_in_flight,
            ..NetStats::default()
        };
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
                port(self.topo.hosts + i as u32, p as u16, st);
            }
        }
        s.host_packets = self.nics.iter().map(|n| n.stats.tx_packets).sum();
        s.safety = self.safety.stats;
        s.deadlock = self.safety.deadlock.clone();
        s.deadlock_at_end = self.safety.deadlock_at_end;
        s.delivered_bytes = self.delivered;
        s.mtt_misses = self.mtt_misses;
        if self.mon.on {
            for node in 0..self.topo.nodes.len() as u32 {
                for port in 0..self.topo.nodes[node as usize].ports.len() as u16 {
                    for c in 0..self.classes.len() {
                        let pc = self.mon.get(node, port, c);
                        if pc != PrioCounters::default() {
                            s.prio
                                .push((node, port, self.classes.class_priority(c), pc));
                        }
                    }
                }
            }
        }
        s.rows = self.mon.rows.clone();
        s.timeline = self.mon.timeline.clone();
        s
    }

    /// Checks the switches' bookkeeping: every buffered byte is in exactly one queue, and the
    /// per-port, per-class counters (ingress and egress) add up to what the queues hold.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        for (h, nic) in self.nics.iter().enumerate() {
            let mut held = [0u64; MAX_CLASSES];
            for f in &nic.rx {
                held[usize::from(f.class)] += u64::from(f.hop.wire);
            }
            if held != nic.rx_held.bytes || nic.rx_held.total() != held.iter().sum::<u64>() {
                return Err(format!(
                    "host {h}: receive buffer counters {:?} but it holds {held:?}",
                    nic.rx_held.bytes
                ));
            }
        }
        for (si, sw) in self.switches.iter().enumerate() {
            let n = sw.ports.len();
            // Per (port, class): bytes that arrived through it, bytes queued for it.
            let mut ingress = vec![[0u64; MAX_CLASSES]; n];
            let mut egress = vec![[0u64; MAX_CLASSES]; n];
            let mut queued = 0u64;
            // Copies of a flooded packet share its buffer: counted once at their ingress.
            let mut groups = std::collections::BTreeSet::new();
            let mut count = |pkt: u32, inp: u16, out: usize, c: usize| {
                let w = u64::from(self.meta[pkt as usize].hop.wire);
                egress[out][c] += w;
                if self.flood_group(pkt).is_none_or(|g| groups.insert(g)) {
                    ingress[usize::from(inp)][c] += w;
                    queued += w;
                }
            };
            sw.queues.for_each(&self.meta, &mut count);
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
