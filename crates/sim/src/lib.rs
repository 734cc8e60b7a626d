//! # irn-sim: a datacenter network simulator that runs the real transport
//!
//! A discrete-event simulator of RDMA datacenter fabrics whose NICs run
//! [`irn_transport::QueuePair`]s — the same code the UDP runtime runs — never a model of the
//! protocol. It reproduces the IRN paper's evaluation (SIGCOMM 2018; SPEC E0–E5, E8):
//! fat-trees of input-queued or shared-buffer switches with PFC and ECN, Poisson or incast
//! workloads, the transport's congestion controllers (DCQCN, TIMELY, DCTCP, AIMD), flow
//! completion times and slowdowns.
//!
//! ## Use
//!
//! ```
//! use irn_sim::{config::SimConfig, run};
//! let mut cfg = SimConfig::default();
//! cfg.topology.k = 4; // 16 hosts
//! cfg.workload.duration_us = 50.0;
//! let out = run(&cfg, |_| {}).expect("valid configuration");
//! assert!(out.summary.flows_completed > 0);
//! assert_eq!(out.summary.flows_completed, out.summary.flows);
//! ```
//!
//! ## Shape (htsim's lessons, without its globals)
//!
//! - [`engine`]: one event list per simulation (a timing wheel over a heap), integer picosecond
//!   time, ties broken by the scheduling node and its own count of events: the same
//!   configuration and seed give byte-identical output.
//! - [`parallel`]: with `threads = N`, the network is cut into N partitions that advance in
//!   windows of the shortest link delay between them, on N threads; the output is the same
//!   for every N.
//! - Packets are metadata: the transport's structured header description
//!   ([`irn_wire::IbRepr`]) plus a wire size; payload bytes only when
//!   `transport.payload = true` (then every delivered byte is checked).
//! - Routes are precomputed ([`topology`]); each switch port and each queue pair keeps at most
//!   one pending "next" event of its own (a serialization end, a timer).
//! - Every random choice draws from a seeded stream of its own ([`irn_transport::rng`]).
//!
//! Configuration: [`config`]; the network model and its differences from the paper's: [`net`];
//! reports: [`metrics`]. `docs/SIMULATOR.md` documents every parameter and output.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod drp;
pub mod engine;
pub mod metrics;
pub mod net;
pub mod parallel;
pub mod pool;
pub mod topology;
pub mod workload;

use std::time::Instant;

use irn_transport::{ByteMemory, Dur, Time};

use crate::config::{SimConfig, TopologyKind};
use crate::metrics::{summarize, PortPrioReport, PortReport, RunSummary, SafetyReport};
use crate::net::{FlowRecord, SharedChecked, SimMemory};
use crate::parallel::Simulation;
use crate::topology::{Topology, TopologyError};
use crate::workload::WorkloadError;

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration is invalid.
    #[error("{0}")]
    Config(String),
    /// The topology could not be built.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The workload could not be built.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The summary.
    pub summary: RunSummary,
    /// Every flow's record (the workload's; Pingmesh's probes are in `probes`).
    pub records: Vec<FlowRecord>,
    /// Every Pingmesh probe's record.
    pub probes: Vec<FlowRecord>,
    /// The monitor's samples (with `monitor_interval_us`; see [`metrics::write_monitor_csv`]).
    pub monitor: Vec<crate::net::MonitorRow>,
    /// Every node's name, for the samples.
    pub node_names: Vec<String>,
}

/// Runs one configuration to the end. `progress` receives the fraction of flows done now and
/// then.
pub fn run(cfg: &SimConfig, mut progress: impl FnMut(f64)) -> Result<RunOutput, SimError> {
    run_dyn(cfg, &mut progress)
}

/// [`run`] behind a trait object. A generic entry point would have the whole simulator (every
/// `Part<M>` method it reaches) monomorphised in the *calling* crate, at that crate's
/// optimisation level: a test or a `cargo run` dev build ran it at opt-level 0, five times
/// slower than the opt-level 3 this crate is built with. One non-generic function here makes
/// this crate instantiate it all.
#[inline(never)]
fn run_dyn(cfg: &SimConfig, progress: &mut dyn FnMut(f64)) -> Result<RunOutput, SimError> {
    cfg.validate().map_err(SimError::Config)?;
    if cfg.transport.payload {
        run_with::<ByteMemory>(cfg, progress)
    } else {
        run_with::<SharedChecked>(cfg, progress)
    }
}

fn describe(cfg: &SimConfig, topo: &Topology) -> String {
    let t = &cfg.topology;
    let shape = match t.kind {
        TopologyKind::FatTree => format!("fat-tree k={}", t.k),
        TopologyKind::LeafSpine => format!("leaf-spine {}x{}", t.leaves, t.spines),
        TopologyKind::Dumbbell => "dumbbell".to_string(),
        TopologyKind::File => "file".to_string(),
    };
    format!(
        "{shape}: {} hosts, {} switches",
        topo.hosts,
        topo.switches()
    )
}

/// Per traffic class (with `[[traffic]]`): its flows' counts and statistics (of the
/// `measured` ones), goodput, retransmissions, and the pause time its senders saw.
fn class_reports(
    cfg: &SimConfig,
    records: &[FlowRecord],
    measured: &[FlowRecord],
    net: &net::NetStats,
    sim_s: f64,
) -> Vec<metrics::ClassReport> {
    if cfg.class_count() == 1 {
        return Vec::new();
    }
    let run = cfg.network.as_run();
    (0..cfg.class_count())
        .map(|t| {
            let c = cfg.class_config(t);
            let class = |r: &&FlowRecord| usize::from(r.flow.class) == t;
            let mine: Vec<&FlowRecord> = records.iter().filter(class).collect();
            let completed: Vec<&&FlowRecord> = mine
                .iter()
                .filter(|r| r.status == Some(irn_transport::WcStatus::Success))
                .collect();
            let finished = mine.iter().filter(|r| r.end.is_some()).count();
            let delivered: u64 = completed.iter().map(|r| r.flow.size).sum();
            let prio = run.priority(c.network.data_dscp) & 7;
            let mut senders: Vec<u32> = mine.iter().map(|r| r.flow.src).collect();
            senders.sort_unstable();
            senders.dedup();
            let qp = net.class_qp.get(t).copied().unwrap_or_default();
            metrics::ClassReport {
                name: cfg.class_name(t),
                transport: c.transport.recovery.name().into(),
                cc: c.transport.cc.name().into(),
                dscp: c.network.data_dscp,
                priority: prio,
                lossless: run.pfc && run.lossless_priorities.contains(&prio),
                flows: mine.len(),
                flows_completed: completed.len(),
                flows_failed: finished - completed.len(),
                flows_unfinished: mine.len() - finished,
                stats: metrics::FlowStats::of(measured.iter().filter(class)),
                goodput_gbps: if sim_s > 0.0 {
                    delivered as f64 * 8.0 / sim_s / 1e9
                } else {
                    0.0
                },
                retransmissions: qp.retransmitted,
                timeouts: qp.timeouts,
                paused_us: senders
                    .iter()
                    .filter_map(|&h| net.host_paused_us.get(h as usize))
                    .map(|p| p[usize::from(prio)])
                    .sum(),
            }
        })
        .collect()
}

fn run_with<M: SimMemory>(
    cfg: &SimConfig,
    progress: &mut dyn FnMut(f64),
) -> Result<RunOutput, SimError> {
    let started = Instant::now();
    let topo = Topology::build(&cfg.topology, &cfg.base_dir)?;
    if let Some((i, f)) = cfg
        .fault
        .iter()
        .enumerate()
        .find(|(_, f)| f.host >= topo.hosts)
    {
        return Err(SimError::Config(format!(
            "fault[{i}].host: host {} does not exist (the topology has hosts 0..{})",
            f.host, topo.hosts
        )));
    }
    if let Some(&h) = cfg.network.pause_hosts.iter().find(|&&h| h >= topo.hosts) {
        return Err(SimError::Config(format!(
            "network.pause_hosts: host {h} does not exist (the topology has hosts 0..{})",
            topo.hosts
        )));
    }
    net::check_headroom(cfg, &topo).map_err(SimError::Config)?;
    let mut flows = workload::generate(cfg, topo.hosts, topo.host_port(0).rate_bps)?;
    // Pingmesh's probes run beside the workload: after its flows, in start order (a stable
    // sort keeps the workload's own order, so its flows keep their numbers).
    let probes = workload::pingmesh_probes(cfg, &topo);
    if !probes.is_empty() {
        flows.extend(probes);
        flows.sort_by_key(|f| f.start);
    }
    let topology = describe(cfg, &topo);
    let hosts = topo.hosts;
    let mut sim: Simulation<M> = Simulation::new(cfg.clone(), topo, flows);
    sim.run(progress);
    let all_records = sim.records();
    if std::env::var_os("IRN_DEBUG_STUCK").is_some() {
        if let Some(i) = all_records.iter().position(|r| r.end.is_none()) {
            eprintln!("{:?}\n{}", all_records[i], sim.debug_flow(i));
        }
    }
    let (probes, records): (Vec<FlowRecord>, Vec<FlowRecord>) = all_records
        .into_iter()
        .partition(|r| r.flow.probe.is_some());
    let pingmesh = cfg.pingmesh.enabled.then(|| {
        metrics::pingmesh_report(
            &probes,
            Dur::from_picos((cfg.pingmesh.timeout_us * 1e6) as u64),
        )
    });
    let net = sim.stats();
    // The statistics cover the flows that started inside the measurement window (all of them
    // by default): a steady-state window leaves out the network's filling and draining.
    let from = Time::ZERO + config::us(cfg.workload.measure_from_us);
    let until = cfg
        .workload
        .measure_until_us
        .map_or(Time::MAX, |u| Time::ZERO + config::us(u));
    let measured: Vec<FlowRecord> = records
        .iter()
        .filter(|r| r.flow.start >= from && r.flow.start < until)
        .copied()
        .collect();
    let measured = &measured[..];
    let (all, by_size, incast) = summarize(measured);
    let with_unfinished = measured
        .iter()
        .any(|r| r.status.is_none())
        .then(|| metrics::FlowStats::with_unfinished(measured.iter(), sim.now()));
    let completed = records
        .iter()
        .filter(|r| r.status == Some(irn_transport::WcStatus::Success))
        .count();
    let finished = records.iter().filter(|r| r.end.is_some()).count();
    let sim_s = sim.now().as_picos() as f64 / 1e12;
    let topo_ref = sim.topology();
    let port_prio = net
        .prio
        .iter()
        .map(|&(node, port, prio, c)| PortPrioReport {
            node,
            name: topo_ref.node_name(node),
            port,
            prio,
            counts: c,
        })
        .collect();
    // Pause frames the NICs sent, per server and second (seed 001 §4.4's "thousands").
    let nic_pauses: Vec<u64> = {
        let mut v = vec![0u64; hosts as usize];
        for &(node, _, st) in &net.ports {
            if node < hosts {
                v[node as usize] += st.pause_sent;
            }
        }
        v
    };
    let per_s = |n: u64| if sim_s > 0.0 { n as f64 / sim_s } else { 0.0 };
    let safety = SafetyReport {
        nic_pauses_per_server_s: per_s(nic_pauses.iter().sum::<u64>()) / f64::from(hosts.max(1)),
        nic_pauses_max_server_s: per_s(nic_pauses.iter().copied().max().unwrap_or(0)),
        counts: net.safety,
        sent_to_failed_per_ms: net.sent_to_failed_per_ms.clone(),
        config_findings: net.config_findings.clone(),
        mtt_misses: net.mtt_misses,
        deadlock_at_ms: net.deadlock.as_ref().map(|d| d.at.as_picos() as f64 / 1e9),
        deadlock_at_end: net.deadlock_at_end,
        paused_hosts_max: net
            .timeline
            .iter()
            .map(|p| p.paused_hosts)
            .max()
            .unwrap_or(0),
    };
    let classes = class_reports(cfg, &records, measured, &net, sim_s);
    let summary = RunSummary {
        name: cfg.name.clone(),
        scenario: cfg.scenario.clone(),
        transport: cfg.transport.recovery.name().into(),
        pfc: cfg.network.pfc,
        pause: cfg.network.pause,
        cc: cfg.transport.cc.name().into(),
        seed: cfg.seed,
        topology,
        switch: match cfg.switch.model {
            config::SwitchModel::InputQueued => "input-queued".into(),
            config::SwitchModel::SharedBuffer => "shared-buffer".into(),
        },
        load: cfg.workload.load,
        flows: records.len(),
        flows_completed: completed,
        flows_failed: finished - completed,
        flows_unfinished: records.len() - finished,
        flows_corrupted: records.iter().filter(|r| !r.intact).count(),
        all,
        by_size,
        with_unfinished,
        single_packet_tail: metrics::single_packet_tail(measured, cfg.network.mtu),
        drop_rate: if net.host_packets == 0 {
            0.0
        } else {
            net.drops as f64 / net.host_packets as f64
        },
        drops: net.drops,
        packets: net.host_packets,
        pause_frames: net.pause_frames,
        paused_us: net.ports.iter().map(|p| p.2.paused.as_micros_f64()).sum(),
        headroom_overflow: net.headroom_overflow,
        retransmissions: net.qp.retransmitted,
        retransmitted_bytes: net.qp.retransmitted_bytes,
        out_of_order: net.qp.out_of_order,
        early_naks: net.qp.early_naks_sent,
        reorder_bytes: net.qp.reorder_bytes,
        reorder_peak_bytes: net.qp.reorder_peak_bytes,
        read_rerequests: net.qp.read_rerequests,
        qp_state_bits: sim.qp_state_bits(),
        timeouts: net.qp.timeouts,
        nacks: net.qp.nacks_sent,
        ecn_marked: net.qp.ecn_marked,
        cnps: net.qp.cnps_sent,
        bdp_cap: sim.bdp_cap(),
        max_in_flight: net.max_in_flight,
        incast,
        pingmesh,
        sim_time_ms: sim.now().as_picos() as f64 / 1e9,
        wall_s: started.elapsed().as_secs_f64(),
        events: sim.events(),
        ports: net
            .ports
            .iter()
            .map(|&(node, port, s)| PortReport {
                node,
                port,
                pause_sent: s.pause_sent,
                pause_received: s.pause_received,
                paused_us: s.paused.as_micros_f64(),
                drops: s.drops,
            })
            .collect(),
        deadlocked: net.deadlock.is_some(),
        deadlock_cycle: net.deadlock.map(|d| d.cycle).unwrap_or_default(),
        watchdog_triggers: net.safety.nic_watchdog + net.safety.switch_watchdog,
        goodput_gbps: if sim_s > 0.0 {
            net.delivered_bytes as f64 * 8.0 / sim_s / 1e9
        } else {
            0.0
        },
        safety,
        port_prio,
        classes,
        timeline: net.timeline,
    };
    let monitor = net.rows;
    Ok(RunOutput {
        summary,
        records,
        probes,
        node_names: if monitor.is_empty() {
            Vec::new()
        } else {
            (0..topo_ref.nodes.len() as u32)
                .map(|n| topo_ref.node_name(n))
                .collect()
        },
        monitor,
    })
}
