//! Simulation configuration: TOML, validated in two stages (ripgrep's pattern): serde with
//! `deny_unknown_fields` turns text into typed settings — a misspelled key is an error that
//! names the key and the file — and [`SimConfig::validate`] checks the values against each
//! other.
//!
//! Every field has a default, documented next to it; `docs/SIMULATOR.md` lists them all. An
//! experiment file holds one base configuration plus, optionally, `[[run]]` tables (named
//! variants, each a set of overrides) and a `[sweep]` table (parameter → list of values; every
//! combination runs). `--set key=value` on the command line overrides any key of the base.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod experiment;
mod safety;
mod validate;

pub(crate) use experiment::apply_sets_checked;
pub use experiment::{load_experiment, parse_value, Experiment};
pub use safety::{
    DeadlockConfig, FaultConfig, FaultKind, L2Config, PingLevel, PingmeshConfig, SwitchWatchdog,
    UnknownUnicast, WatchdogConfig,
};
use validate::check;

/// An error in a configuration: which file (or `--set`), and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {msg}")]
pub struct ConfigError {
    /// The file, `--set`, or run the error comes from.
    pub origin: String,
    /// What is wrong, naming the key.
    pub msg: String,
}

impl ConfigError {
    pub(crate) fn new(origin: impl Into<String>, msg: impl Into<String>) -> Self {
        ConfigError {
            origin: origin.into(),
            msg: msg.into(),
        }
    }
}

/// A value given once for every tier, or per tier from the hosts up (the last value repeats).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PerTier {
    /// The same for every tier.
    One(f64),
    /// Tier 0 = host links, 1 = edge–aggregation (leaf–spine), 2 = aggregation–core.
    Many(Vec<f64>),
}

impl PerTier {
    /// The value of tier `t`.
    pub fn tier(&self, t: usize) -> f64 {
        match self {
            PerTier::One(v) => *v,
            PerTier::Many(v) => v.get(t).or_else(|| v.last()).copied().unwrap_or(f64::NAN),
        }
    }

    fn values(&self) -> Vec<f64> {
        match self {
            PerTier::One(v) => vec![*v],
            PerTier::Many(v) => v.clone(),
        }
    }
}

/// Which topology to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// A k-ary fat-tree (Al-Fares et al., SIGCOMM 2008): k pods of k/2 edge and k/2
    /// aggregation switches, (k/2)² core switches, k³/4 hosts. Full bisection bandwidth.
    FatTree,
    /// Two tiers: `leaves` leaf switches with `hosts_per_leaf` hosts each, every leaf linked
    /// to every one of `spines` spine switches.
    LeafSpine,
    /// Two switches joined by one link, `hosts_per_side` hosts on each.
    Dumbbell,
    /// Read from `file` (format in `docs/SIMULATOR.md`).
    File,
}

/// `[topology]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopologyConfig {
    /// `fat-tree` (default), `leaf-spine`, `dumbbell` or `file`.
    pub kind: TopologyKind,
    /// Fat-tree arity (even, ≥ 2). Default 6: 54 hosts, 45 switches (IRN's E0).
    pub k: u32,
    /// Leaf-spine: leaf switches. Default 4.
    pub leaves: u32,
    /// Leaf-spine: spine switches. Default 2.
    pub spines: u32,
    /// Leaf-spine: hosts per leaf. Default 8.
    pub hosts_per_leaf: u32,
    /// Dumbbell: hosts on each side. Default 4.
    pub hosts_per_side: u32,
    /// Topology file, for `kind = "file"` (relative to the configuration file).
    pub file: Option<PathBuf>,
    /// Link rate in Gb/s, one value or one per tier. Default 40 (IRN's E0).
    pub link_gbps: PerTier,
    /// One-way propagation delay in ns, one value or one per tier. Default 2000 (IRN's E0).
    pub link_delay_ns: PerTier,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            kind: TopologyKind::FatTree,
            k: 6,
            leaves: 4,
            spines: 2,
            hosts_per_leaf: 8,
            hosts_per_side: 4,
            file: None,
            link_gbps: PerTier::One(40.0),
            link_delay_ns: PerTier::One(2000.0),
        }
    }
}

/// The switch architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchModel {
    /// The IRN paper's switch (SPEC N7): input-queued with virtual output queues, round-robin
    /// among inputs at every output, a private buffer per input port; PFC at
    /// buffer − headroom.
    InputQueued,
    /// A shared-buffer output-queued switch with dynamic thresholds (Choudhury & Hahne), as
    /// production switches have: a packet is admitted at an ingress (port, priority) while its
    /// occupancy is below α × the free shared buffer.
    SharedBuffer,
}

/// ECN marking at switch egress queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EcnMode {
    /// No marking (the default: the paper's default runs have no congestion control).
    Off,
    /// RED-style: probability 0 below `kmin_bytes`, rising linearly to `pmax` at `kmax_bytes`,
    /// 1 above (DCQCN's setting).
    Red,
    /// DCTCP-style: mark every packet that finds more than `kmin_bytes` queued.
    Threshold,
}

/// Where a switch decides a packet's ECN mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EcnPoint {
    /// As the packet joins its egress queue, on the bytes ahead of it: RED's rule (Floyd &
    /// Jacobson 1993, on each arriving packet; RFC 3168 §5) and DCTCP's ("mark arriving
    /// packets", RFC 8257 §3.1), which DCQCN's switch follows (Zhu et al., SIGCOMM 2015 §3).
    #[default]
    Enqueue,
    /// As the packet leaves for the link, on the bytes behind it: the ns-3 RDMA simulators'
    /// rule (HPCC's and ConWeave's `SwitchNode::SwitchNotifyDequeue`), which tells the sender
    /// one queueing delay sooner ("mark from front").
    Dequeue,
}

/// `[switch]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchConfig {
    /// `input-queued` (default, the IRN paper's) or `shared-buffer`.
    pub model: SwitchModel,
    /// Input-queued: buffer per input port in bytes. Shared-buffer: the whole switch's buffer.
    /// Default 240 000 (IRN: 2 × the 120 KB BDP).
    pub buffer_bytes: u64,
    /// PFC headroom in bytes: an ingress queue pauses its upstream at buffer − headroom
    /// (input-queued) or at its dynamic threshold (shared-buffer), and the headroom absorbs
    /// what the upstream link still delivers. Default: absent = the upstream link's
    /// round-trip bytes plus two MTU-sized frames (20 KB + 2 frames in E0; the paper: 20 KB).
    pub pfc_headroom_bytes: Option<u64>,
    /// PFC resume (XON) hysteresis in bytes: resume once the queue is this far below the pause
    /// threshold. Default 2048.
    pub pfc_resume_gap_bytes: u64,
    /// Shared-buffer dynamic threshold α (Choudhury & Hahne): a lossy packet is admitted while
    /// its egress queue holds less than α × the free buffer. Default 1.0.
    pub dt_alpha: f64,
    /// Shared buffer: the α of PFC's ingress dynamic threshold — a lossless (port, priority)
    /// pauses its upstream once it holds α × the free shared buffer. Absent (default): `dt_alpha`.
    /// Broadcom's MMU, as the ns-3 RDMA simulators model it, pauses at 1/16 while admitting
    /// lossy egress queues at 1 (experiments/crossval).
    pub pfc_alpha: Option<f64>,
    /// ECN marking: `off` (default), `red` or `threshold`.
    pub ecn: EcnMode,
    /// ECN Kmin in bytes. Default 5000.
    pub ecn_kmin_bytes: u64,
    /// ECN Kmax in bytes. Default 200 000.
    pub ecn_kmax_bytes: u64,
    /// ECN Pmax. Default 0.01.
    pub ecn_pmax: f64,
    /// Where the mark is decided: `enqueue` (default; on the queue a packet joins) or
    /// `dequeue` (on the queue it leaves behind, as the ns-3 RDMA simulators mark).
    pub ecn_mark_at: EcnPoint,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            model: SwitchModel::InputQueued,
            buffer_bytes: 240_000,
            pfc_headroom_bytes: None,
            pfc_resume_gap_bytes: 2048,
            dt_alpha: 1.0,
            pfc_alpha: None,
            ecn: EcnMode::Off,
            ecn_kmin_bytes: 5_000,
            ecn_kmax_bytes: 200_000,
            ecn_pmax: 0.01,
            ecn_mark_at: EcnPoint::Enqueue,
        }
    }
}

/// `[network]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Priority flow control (802.1Qbb) on the lossless priorities. Default false.
    pub pfc: bool,
    /// IEEE 802.3x PAUSE (Annex 31B) instead of PFC (SPEC N1): one pause stops the whole
    /// link — every priority, data and control alike — and every frame is lossless. A port
    /// must not run both (IEEE 802.1Qbb), so `pfc` and `pause` together are an error.
    /// Default false.
    pub pause: bool,
    /// Servers whose link runs 802.3x PAUSE in a fabric that runs PFC everywhere else (a NIC
    /// that knows only global pause, on a ToR port set to match): their NIC's receive
    /// buffer and their ToR's port to them pause the whole link — every priority, lossless
    /// and lossy, data and control — and every frame on that link is lossless. PAUSE and PFC
    /// are never both on one port (IEEE 802.1Qbb); they coexist in the fabric, as seed 004
    /// says they can. Needs `pfc`. Default none.
    pub pause_hosts: Vec<u32>,
    /// The pause time an XOFF frame carries, in quanta of 512 bit times at its link's rate
    /// (IEEE 802.1Qbb §36.1.3.1; 802.3 Annex 31B for PAUSE): the receiver holds that priority
    /// (or, under PAUSE, the link) until the time runs out or a frame with quanta 0 (XON)
    /// arrives. Default 65 535, the largest (839 µs at 40 Gb/s).
    pub pause_quanta: u16,
    /// While its buffer stays above the threshold, an ingress sends XOFF again after this
    /// fraction of the pause time it asked for, so that the pause does not lapse (a switch's
    /// XOFF refresh timer). Default 0.5. Above 1 the pause lapses between refreshes and
    /// traffic resumes into a full buffer: what a mis-set refresh timer does.
    pub pause_refresh: f64,
    /// Priorities that are lossless when `pfc` is on. Default `[3]`.
    pub lossless_priorities: Vec<u8>,
    /// Path MTU in bytes (256–4096). Default 1024 (IRN's E0).
    pub mtu: u32,
    /// DSCP of data packets (requests and read responses). Default 26 (priority 3).
    pub data_dscp: u8,
    /// DSCP of ACKs, NAKs and CNPs when `control_priority` is on. Default 48 (priority 6).
    pub control_dscp: u8,
    /// ACK/NAK/CNP travel at `control_dscp`, ahead of data and never paused with it. Default
    /// true. Off: they share the data packets' DSCP (and PFC class).
    pub control_priority: bool,
    /// With PFC, the control priority is lossless as well. Default true: a RoCE NIC sends its
    /// ACKs and NAKs in the queue pair's own traffic class, which PFC protects (ConnectX: the
    /// QP's DSCP; only CNPs take a priority of their own), so a lossless fabric never drops
    /// one. Off: a full buffer drops control packets, and RoCE over PFC — which keeps no timer
    /// unless `transport.roce_timeout_with_pfc` — leaves a flow whose last ACK was dropped
    /// unfinished (docs/RESULTS.md).
    pub control_lossless: bool,
    /// DSCP → priority map (SPEC N2), 64 entries, many-to-one; absent = the usual DSCP ÷ 8.
    pub dscp_to_priority: Option<Vec<u8>>,
    /// NICs send 802.1Q-tagged frames whose PCP is the packet's priority (the map of its
    /// DSCP); a tag adds 4 bytes to every frame. Default false.
    pub vlan: bool,
    /// What switches classify a frame by: `dscp` (default; through `dscp_to_priority`) or
    /// `pcp` (the VLAN tag's; needs `vlan`).
    pub trust: Trust,
    /// The switch tiers that route (1: ToRs and leaves, 2: aggregation and spines, 3: cores;
    /// a topology file's own tiers): a routed hop sends a frame on in a new Ethernet header,
    /// without the 802.1Q tag and so without its PCP, which has no standard way across a
    /// subnet boundary (seed 001 §3) — the next hop classifies it as priority 0 when it trusts
    /// the PCP; the DSCP travels on. Default none (every switch bridges, tags intact).
    pub routed_tiers: Vec<u8>,
    /// Probability that a link loses a packet (random loss, for fault experiments). Default 0.
    pub link_loss: f64,
    /// How switches spread packets over equal-cost paths: `flow` (default: by the 5-tuple
    /// hash, every packet of a queue pair on one path), `packet` (packet spraying: each packet
    /// on a path of its own, as UEC and AWS SRD do), or `flowlet` (a queue pair moves to a new
    /// path after `flowlet_gap_us` of silence).
    pub ecmp: Ecmp,
    /// The silence that starts a new flowlet, in µs (`ecmp = "flowlet"`). Default 50.
    pub flowlet_gap_us: f64,
    /// Seed of the switches' ECMP hash salts. Absent (default): the run's `seed`. Another value
    /// puts the same flows on other equal-cost paths: the spread over it is what per-flow
    /// hashing alone does to a result (another simulator's hash function is one such draw;
    /// experiments/crossval).
    pub ecmp_seed: Option<u64>,
    /// How switch outputs and NICs share a link between classes: `strict` (default: strict
    /// priority, the highest class first) or `dwrr` (weighted by `dwrr_weights`).
    pub scheduler: Scheduler,
    /// `dwrr`: the weight of each priority 0–7 (8 entries); a priority of weight 0 is strict,
    /// served before the weighted ones. Absent: every priority weight 1, except the control
    /// priority (`control_dscp`'s, when `control_priority` is on), which is strict.
    pub dwrr_weights: Option<Vec<u32>>,
}

/// ECMP granularity (`network.ecmp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ecmp {
    /// Per flow (5-tuple hash).
    Flow,
    /// Per packet (spraying).
    Packet,
    /// Per flowlet (a new path after a gap).
    Flowlet,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            pfc: false,
            pause: false,
            pause_hosts: Vec::new(),
            pause_quanta: u16::MAX,
            pause_refresh: 0.5,
            lossless_priorities: vec![3],
            mtu: 1024,
            data_dscp: 26,
            control_dscp: 48,
            control_priority: true,
            control_lossless: true,
            dscp_to_priority: None,
            vlan: false,
            trust: Trust::Dscp,
            routed_tiers: Vec::new(),
            link_loss: 0.0,
            ecmp: Ecmp::Flow,
            ecmp_seed: None,
            flowlet_gap_us: 50.0,
            scheduler: Scheduler::Strict,
            dwrr_weights: None,
        }
    }
}

/// `[nic]`: the NIC's receive side. By default the receive pipeline keeps up with the link
/// (a packet is handed to its queue pair the moment it arrives). With `rx_gbps`, arriving
/// frames wait in a receive buffer that the pipeline drains at that rate — a slow receiver
/// (SPEC N6: e.g. translation-table misses stall it) — and the NIC sends PFC pauses to its
/// switch when a lossless priority's share of the buffer passes buffer − headroom, like a
/// switch ingress; lossy frames that find the buffer full are dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicConfig {
    /// Rate of the receive pipeline in Gb/s of frame bytes. Default: absent = never the
    /// bottleneck.
    pub rx_gbps: Option<f64>,
    /// Receive buffer in bytes (with `rx_gbps`). Default 256 000.
    pub rx_buffer_bytes: u64,
    /// Host-interface (PCIe) rate in Gb/s that a reorder buffer's traffic takes from the
    /// receive pipeline (T8(a)): a parked packet is written to host memory and read back, two
    /// crossings of its bytes at this rate before the pipeline moves on. Used with `rx_gbps`.
    /// Default 64 (PCIe 3.0 x8).
    pub pcie_gbps: f64,
    /// PFC headroom of the receive buffer in bytes: the NIC pauses its switch at
    /// buffer − headroom. Default: absent = as the switches' (the link's round-trip bytes plus
    /// two frames).
    pub rx_pfc_headroom_bytes: Option<u64>,
    /// Entries of the NIC's memory-translation table cache (SPEC N6; seed 001 §4.4: 2 K).
    /// Default 2048.
    pub mtt_entries: u32,
    /// Page size the registered memory uses, bytes: 4096 (default) or 2 MiB huge pages.
    pub page_bytes: u64,
    /// How long a translation miss stalls the receive pipeline (the entry is fetched from
    /// host memory over PCIe), ns. Default 0: the cache is not modelled.
    pub mtt_miss_ns: f64,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            rx_gbps: None,
            rx_buffer_bytes: 256_000,
            pcie_gbps: 64.0,
            rx_pfc_headroom_bytes: None,
            mtt_entries: 2048,
            page_bytes: 4096,
            mtt_miss_ns: 0.0,
        }
    }
}

/// What a switch reads a frame's priority from (`network.trust`), as real switches are set
/// to trust one or the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trust {
    /// The IP header's DSCP, through `dscp_to_priority` (RoCEv2 deployments' usual choice).
    Dscp,
    /// The 802.1Q tag's PCP (untagged frames get priority 0, a port's default).
    Pcp,
}

impl NetworkConfig {
    /// The network as the switches run it: with 802.3x `pause`, one lossless class that
    /// every frame shares — every DSCP in priority 0, control frames too, PFC's machinery
    /// pausing that one class, which is the whole link. Without, itself.
    pub fn as_run(&self) -> NetworkConfig {
        if !self.pause {
            return self.clone();
        }
        NetworkConfig {
            pfc: true,
            lossless_priorities: vec![0],
            control_priority: false,
            dscp_to_priority: Some(vec![0; 64]),
            trust: Trust::Dscp,
            ..self.clone()
        }
    }

    /// The DWRR weight of priority `prio` (`dwrr_weights`; 0: strict).
    pub fn dwrr_weight(&self, prio: u8) -> u32 {
        match &self.dwrr_weights {
            Some(w) => w.get(usize::from(prio & 7)).copied().unwrap_or(1),
            None if self.control_priority && prio == self.priority(self.control_dscp) => 0,
            None => 1,
        }
    }

    /// The priority of a DSCP.
    pub fn priority(&self, dscp: u8) -> u8 {
        match &self.dscp_to_priority {
            Some(m) => m.get(usize::from(dscp)).copied().unwrap_or(0),
            None => dscp >> 3,
        }
    }
}

/// Loss recovery, by the names of IRN's evaluation: irn-transport's [`RecoveryMode`](irn_transport::RecoveryMode)
/// (shared with the UDP runtime), read and written by its name.
pub use irn_transport::RecoveryMode as Recovery;

/// `transport.recovery` by its name ([`Recovery::name`]).
mod recovery_name {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    use super::Recovery;

    pub fn serialize<S: Serializer>(m: &Recovery, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Recovery, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

/// The RDMA operation each flow uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowOp {
    /// RDMA Write (default): the flow completes when the last byte is acknowledged.
    Write,
    /// Send to a posted receive.
    Send,
    /// RDMA Read by the destination from the source (data flows source → destination; the
    /// flow completes at the reader).
    Read,
}

/// Congestion control (SPEC T9), run by every queue pair (`transport.cc`); its parameters are
/// in `[cc]`. The transport's list, shared with the runtime.
pub use irn_transport::CcKind;

/// The controllers' parameter tables, as irn-transport defines them (in the configuration's
/// units, µs and Mb/s; [`DcqcnParams::config`] and [`TimelyParams::config`] convert).
pub use irn_transport::cc::{DcqcnParams, TimelyParams, WindowParams};

/// `[cc]`: the congestion controllers' parameters (`transport.cc` chooses which one runs).
/// Defaults are each algorithm's paper's, which the IRN paper uses (§4.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CcConfig {
    /// `[cc.dcqcn]`.
    pub dcqcn: DcqcnParams,
    /// `[cc.timely]`.
    pub timely: TimelyParams,
    /// `[cc.window]`: AIMD and DCTCP.
    pub window: WindowParams,
}

/// `[transport]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    /// `irn` (default), `irn-go-back-n`, `irn-no-bdp-fc`, `irn-no-sack`, `roce`,
    /// `roce-go-back-0`, `reorder-buffer`, `ext-ib` (seed 002's designs, SPEC T8), `tcp`
    /// (iWARP's transport as a TCP model, SPEC E10: the `tcp_*` keys).
    #[serde(with = "recovery_name")]
    pub recovery: Recovery,
    /// BDP cap in packets; absent = the longest path's round-trip propagation × the host link
    /// rate ÷ the wire size of an MTU packet (≈ 110 in E0, as in the paper).
    pub bdp_cap: Option<u32>,
    /// IRN RTO_low in µs. Default 100.
    pub rto_low_us: f64,
    /// IRN RTO_high in µs. Default 320.
    pub rto_high_us: f64,
    /// IRN's N: RTO_low applies with at most N packets in flight. Default 3.
    pub rto_n: u32,
    /// The IRN modes time out by RFC 6298's adaptive timer instead of RTO_low / RTO_high:
    /// SRTT + 4·RTTVAR from the ACKs of packets never resent, never below `rto_high_us`
    /// (where it starts), doubled per expiry up to `tcp_max_rto_us` — so that queueing longer
    /// than RTO_high (an incast's) stretches the timer rather than drawing copies of packets
    /// still queued (experiments/e8/README.md). Default false: the paper's fixed timers.
    pub rto_adaptive: bool,
    /// RoCE's fixed timeout in µs. Default 320 (RTO_high, as the paper sets it).
    pub roce_rto_us: f64,
    /// RoCE keeps its timeout over PFC. Default false (the paper disables it: nothing is lost).
    pub roce_timeout_with_pfc: bool,
    /// Congestion control: `none` (default), `dcqcn`, `timely`, `dctcp` or `aimd`; parameters
    /// in `[cc]`.
    pub cc: CcKind,
    /// DCQCN or TIMELY also backs off on losses (a sequence NAK, a timeout): DCQCN as on a
    /// CNP, TIMELY by halving its rate, at most once per `cc_backoff_interval_us` (IRN §4.3's
    /// variant for go-back-N; `irn_transport::cc::backoff`). Default false: the controllers
    /// read congestion from marks and delay only, as published.
    pub cc_backoff_on_loss: bool,
    /// With `cc_backoff_on_loss`: at most one back-off per this many µs. Default 50 (DCQCN's
    /// CNP interval: a notification point's signal rate).
    pub cc_backoff_interval_us: f64,
    /// Operation of every flow: `write` (default), `send`, `read`.
    pub op: FlowOp,
    /// Carry real payload bytes and check every delivered byte (slower). Default false.
    pub payload: bool,
    /// `reorder-buffer`: the responder's reorder buffer in packets. Default 128.
    pub reorder_buffer: u32,
    /// `reorder-buffer` and `ext-ib`: a hole is declared lost once this many later packets
    /// arrived behind it (T8's early NAK). Default 16.
    pub nak_threshold: u32,
    /// `reorder-buffer` and `ext-ib`: ...or once it has been open this long, in µs. Default 20.
    pub nak_delay_us: f64,
    /// `irn` and `irn-no-bdp-fc`: the reordering tolerance of selective repeat — a PSN counts as
    /// lost once one at least this many beyond it is selectively acknowledged. Default 1 (the
    /// paper's IRN); higher for packet spraying.
    pub dup_threshold: u32,
    /// `irn` and `irn-no-bdp-fc`: resend a retransmission that was lost too as soon as a packet
    /// sent after it is selectively acknowledged, instead of at the next timeout (RACK's
    /// ordering rule, RFC 8985; an option beyond the paper, whose IRN waits for the timer).
    /// Default false; the UDP runtime turns it on.
    pub resend_lost_retransmissions: bool,
    /// `irn` and `irn-no-bdp-fc`: a retransmission timeout resends every outstanding PSN not
    /// selectively acknowledged, as TCP deems them all lost after an RTO (RFC 5681 §3.1),
    /// rather than the cumulative-ACK PSN and the holes below the highest SACK (the paper's
    /// IRN). Default false; the UDP runtime turns it on.
    pub timeout_resends_unsacked: bool,
    /// `irn` and `irn-no-bdp-fc`: every NACK carries the receiver's loss bitmap (T8(d)'s field)
    /// up to the highest PSN that arrived, so one NACK says what all earlier ones did and
    /// NACKs queued together collapse into one (an option beyond the paper, whose NACK SACKs
    /// the one packet that triggered it). Default false; the UDP runtime turns it on.
    pub nack_bitmap: bool,
    /// A fixed retransmission timer (IRN's RTO_low / RTO_high, RoCE's RTO) backs off when
    /// its peer goes silent: after `rto_backoff_after` expiries with no answer it doubles at
    /// each further one, up to the local ACK timeout (`ack_timeout`), and is back at its
    /// value from the peer's first answer (RFC 6298 §5.5; the transport's
    /// `RecoveryConfig::rto_backoff_after`). Absent (default): the recovery mode's preset —
    /// on for IRN's designs, off for RoCE's and seed 002's, whose fixed RTO is the paper's
    /// baseline. `false` is IRN §3.1 as published: a dead peer draws a resend every RTO
    /// until `retry_cnt` gives up.
    pub rto_backoff: Option<bool>,
    /// With `rto_backoff`: the unanswered expiries before the timer doubles. Default 3
    /// (Linux's `tcp_retries1`, the retransmissions after which TCP presumes a path broken).
    pub rto_backoff_after: u32,
    /// Retries after a timeout or sequence NAK before the work request completes with
    /// `IBV_WC_RETRY_EXC_ERR` (the verbs `retry_cnt`, 0–7, IBTA §11.2.4.2 / C9-140). Absent
    /// (default): never give up, as the papers' simulations assume; set it when hosts die
    /// (`[[fault]]`), so that flows to a dead server fail as on a real NIC.
    pub retry_cnt: Option<u8>,
    /// With `retry_cnt`: the verbs local ACK `timeout` code (4.096 µs × 2^code, IBTA
    /// §9.7.6.1.3), the interval at which a requester without progress counts a retry even
    /// when its own RTO is shorter (IRN's). Default 14 (67 ms, perftest's).
    pub ack_timeout: u8,
    /// `tcp`: the initial congestion window in segments (RFC 6928: 10; RFC 3390's 4 KB is
    /// about 3 of ours). Slow start runs from it (ssthresh starts at the receive window).
    pub tcp_initial_window: u32,
    /// `tcp`: the retransmission timer's floor and initial value in µs (RFC 6298 with a
    /// datacenter minimum). Default 320, IRN's RTO_high.
    pub tcp_min_rto_us: f64,
    /// `tcp`: the timer's ceiling after backoff, in µs. Default 100 000.
    pub tcp_max_rto_us: f64,
    /// `tcp`: DupThresh, the SACKed segments above a hole that make it lost (RFC 6675). Default 3.
    pub tcp_dup_thresh: u32,
    /// `tcp`: delayed ACKs — every second segment, or this many µs after the first unacknowledged
    /// one (RFC 1122 §4.2.3.2). Absent (default): every segment is acknowledged.
    pub tcp_delayed_ack_us: Option<f64>,
    /// Standard RoCE (and extended IB): the requester asks for an ACK (AckReq) at least every
    /// this many packets of a message, and on its last. Default 64. 1: an ACK per packet, as
    /// the ns-3 RDMA simulators' NICs send (experiments/crossval). IRN acknowledges every
    /// packet whatever this says (SPEC T7).
    pub ack_every: u32,
    /// Standard RoCE's responder NAKs a sequence error again every this many µs while
    /// out-of-order packets keep arriving. Absent (default): once per error (IBTA §9.7.5.1.3,
    /// Linux rxe). 4 is the ns-3 RDMA simulators' receiver (experiments/crossval).
    pub renak_us: Option<f64>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            recovery: Recovery::Irn,
            bdp_cap: None,
            rto_low_us: 100.0,
            rto_high_us: 320.0,
            rto_n: 3,
            rto_adaptive: false,
            roce_rto_us: 320.0,
            roce_timeout_with_pfc: false,
            cc: CcKind::None,
            cc_backoff_on_loss: false,
            cc_backoff_interval_us: 50.0,
            op: FlowOp::Write,
            payload: false,
            reorder_buffer: irn_transport::DEFAULT_REORDER_BUFFER,
            nak_threshold: irn_transport::HoleRule::DEFAULT.threshold,
            nak_delay_us: 20.0,
            dup_threshold: 1,
            resend_lost_retransmissions: false,
            timeout_resends_unsacked: false,
            nack_bitmap: false,
            rto_backoff: None,
            rto_backoff_after: irn_transport::RTO_BACKOFF_AFTER,
            retry_cnt: None,
            ack_timeout: 14,
            tcp_initial_window: 10,
            tcp_min_rto_us: 320.0,
            tcp_max_rto_us: 100_000.0,
            tcp_dup_thresh: 3,
            tcp_delayed_ack_us: None,
            ack_every: irn_transport::STANDARD_ACK_EVERY,
            renak_us: None,
        }
    }
}

/// How flows arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Poisson arrivals at every host at `load` of its link rate, sizes from `sizes`,
    /// destinations uniformly random among the other hosts (IRN's E0).
    Poisson,
    /// Incast (E8): `incast_bytes` striped over `incast_senders` random senders to one random
    /// receiver, `incast_repetitions` times one after the other, optionally over Poisson
    /// background traffic at `load`.
    Incast,
    /// Flows listed in `flows_file` (CSV: `start_us,src,dst,bytes`).
    Flows,
}

/// `[workload]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadConfig {
    /// The workload's name in per-class reports (with `[[traffic]]`). Default: empty, which
    /// reports it by its transport's name.
    pub name: String,
    /// `poisson` (default), `incast` or `flows`.
    pub kind: WorkloadKind,
    /// Offered load as a fraction of each host's link rate. Default 0.7 (IRN's E0). For
    /// incast, the background load (0 = none).
    pub load: f64,
    /// Flow sizes: `irn` (default: the IRN paper's distribution, built as `docs/SIMULATOR.md`
    /// describes), `websearch`, `fb_hadoop`, `data_mining`, `ali_storage`, `google_rpc`, or a
    /// path to a `.cdf` file (`SIZE CUMULATIVE_PERCENT` per line).
    pub sizes: String,
    /// Flows start during this many µs of simulated time. Default 2000.
    pub duration_us: f64,
    /// At most this many flows (absent = no limit).
    pub max_flows: Option<u64>,
    /// The run stops this many µs after the last flow started, finished or not (unfinished
    /// flows are reported). Default 50 000.
    pub drain_us: f64,
    /// Incast: senders per request. Default 30.
    pub incast_senders: u32,
    /// Incast: bytes per request, striped evenly. Default 150 000 000 (E8).
    pub incast_bytes: u64,
    /// Incast: requests, one after the other. Default 1.
    pub incast_repetitions: u32,
    /// Flows: the CSV file (relative to the configuration file).
    pub flows_file: Option<PathBuf>,
    /// Statistics (slowdowns, FCTs, the per-size buckets and the single-packet tail) cover
    /// only the flows that start at or after this many µs: the warm-up, while queues fill, is
    /// simulated but not measured. Default 0. Flow counts (completed, unfinished, failed)
    /// always cover every flow.
    pub measure_from_us: f64,
    /// ...and before this many µs (absent: every later flow), to leave out the drain after
    /// arrivals stop.
    pub measure_until_us: Option<f64>,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            name: String::new(),
            kind: WorkloadKind::Poisson,
            load: 0.7,
            sizes: "irn".into(),
            duration_us: 2000.0,
            max_flows: None,
            drain_us: 50_000.0,
            incast_senders: 30,
            incast_bytes: 150_000_000,
            incast_repetitions: 1,
            flows_file: None,
            measure_from_us: 0.0,
            measure_until_us: None,
        }
    }
}

/// `[[traffic]]`: a traffic class beside `[workload]`'s — its own flows, sent in a DSCP of its
/// own by a transport of its own (SPEC N8; seed 004's fabrics carry RDMA next to other
/// traffic): TCP (`recovery = "tcp"`, E10's model) beside RDMA, a second RDMA class in a
/// second lossless priority, or one flow list (`kind = "flows"`) whose fate is watched, such
/// as a victim of congestion spreading (SPEC N3). Its flows are drawn from a random stream of
/// their own over `[workload]`'s `duration_us`, so adding a class leaves the others' flows
/// as they were. Every key of `[transport]` it does not set is `[transport]`'s; switches
/// classify its frames by its DSCP like any other (`network.dscp_to_priority`, and
/// `network.lossless_priorities` for PFC), and `network.scheduler` shares links between the
/// classes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrafficConfig {
    /// Its name in per-class reports. Default: `traffic<i>`, i counting from 1.
    pub name: String,
    /// DSCP of its data packets. Default 0 (best effort, priority 0).
    pub dscp: u8,
    /// DSCP of its ACKs, NAKs and CNPs. Default: its own `dscp` for `recovery = "tcp"` (a TCP
    /// socket marks its ACKs as its data); for RDMA, `network.control_dscp` when
    /// `network.control_priority` is on, else its `dscp`.
    pub control_dscp: Option<u8>,
    /// Loss recovery, by `transport.recovery`'s names. Default: `transport.recovery`.
    #[serde(with = "opt_recovery_name")]
    pub recovery: Option<Recovery>,
    /// Congestion control. Default: `transport.cc`.
    pub cc: Option<CcKind>,
    /// `poisson` (default), `incast` or `flows`, as `workload.kind`.
    pub kind: WorkloadKind,
    /// Offered load as a fraction of each host's link rate (Poisson arrivals; the background
    /// of an incast). Default 0.7.
    pub load: f64,
    /// Flow sizes, as `workload.sizes`. Default `irn`.
    pub sizes: String,
    /// `flows`: the CSV file (`start_us,src,dst,bytes`, relative to the configuration file).
    pub flows_file: Option<PathBuf>,
    /// Incast: senders per request. Default 30.
    pub incast_senders: u32,
    /// Incast: bytes per request, striped evenly. Default 150 000 000.
    pub incast_bytes: u64,
    /// Incast: requests, one after the other. Default 1.
    pub incast_repetitions: u32,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        let w = WorkloadConfig::default();
        TrafficConfig {
            name: String::new(),
            dscp: 0,
            control_dscp: None,
            recovery: None,
            cc: None,
            kind: w.kind,
            load: w.load,
            sizes: w.sizes,
            flows_file: None,
            incast_senders: w.incast_senders,
            incast_bytes: w.incast_bytes,
            incast_repetitions: w.incast_repetitions,
        }
    }
}

/// `[[traffic]]`'s `recovery`, by its name, when given.
mod opt_recovery_name {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    use super::Recovery;

    pub fn serialize<S: Serializer>(m: &Option<Recovery>, s: S) -> Result<S::Ok, S::Error> {
        match m {
            Some(m) => s.serialize_str(m.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Recovery>, D::Error> {
        String::deserialize(d)?
            .parse()
            .map(Some)
            .map_err(D::Error::custom)
    }
}

/// How a switch output and a NIC share their link between the priority classes queued for
/// it (`network.scheduler`; IEEE 802.1Qaz ETS, seed 004's "weighted round robin").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// Strict priority: the highest class with a frame to send goes first.
    Strict,
    /// Deficit weighted round robin: the classes of weighted priorities share the link in
    /// proportion to their `network.dwrr_weights` (in bytes, over time); priorities of weight
    /// 0 are strict, served before every weighted one (ETS's strict and ETS traffic classes).
    Dwrr,
}

/// One simulation run's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// The run's name in reports. Default "run".
    pub name: String,
    /// The scenario the run belongs to — its `[[variant]]` and `[sweep]` point, set by the
    /// experiment loader (empty: the experiment's only one). Ratios divide a run by the
    /// RoCE+PFC run of its own scenario.
    pub scenario: String,
    /// Seed of every random choice. Default 1.
    pub seed: u64,
    /// Threads one run uses: the network is cut into this many partitions that advance
    /// together (`irn_sim::parallel`). The results are the same for every value. Default 1.
    pub threads: usize,
    /// `[topology]`.
    pub topology: TopologyConfig,
    /// `[switch]`.
    pub switch: SwitchConfig,
    /// `[network]`.
    pub network: NetworkConfig,
    /// `[nic]`.
    pub nic: NicConfig,
    /// `[transport]`.
    pub transport: TransportConfig,
    /// `[workload]`.
    pub workload: WorkloadConfig,
    /// `[cc]`.
    pub cc: CcConfig,
    /// `[l2]`: the ToRs' ARP and MAC tables.
    pub l2: L2Config,
    /// `[watchdog]`: PFC storm watchdogs.
    pub watchdog: WatchdogConfig,
    /// `[deadlock]`: PFC deadlock detection.
    pub deadlock: DeadlockConfig,
    /// `[[fault]]`: fault events.
    pub fault: Vec<FaultConfig>,
    /// `[[traffic]]`: traffic classes beside `[workload]`'s.
    pub traffic: Vec<TrafficConfig>,
    /// `[pingmesh]`: RDMA Pingmesh probes beside the workload.
    pub pingmesh: PingmeshConfig,
    /// Sample per (node, port, priority) counters every this many µs (SPEC N9; `irn sim
    /// --monitor FILE` writes them). Default: absent = no time series.
    pub monitor_interval_us: Option<f64>,
    /// Configuration monitoring (seed 001 §5.1; SPEC N9): every this many ms, each switch's
    /// and NIC's running configuration — PFC per port, ECN marking, the DSCPs a NIC sends —
    /// is checked against the intended one (this file's), and every difference is reported
    /// with when it was found and when it was set right (`safety.config_findings`). Drift is
    /// injected with `[[fault]]`s `tor-pfc-off`, `tor-ecn-off` and `nic-dscp`. Default:
    /// absent = no checks.
    pub config_check_ms: Option<f64>,
    /// Directory that relative paths are resolved against (the configuration file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            name: "run".into(),
            scenario: String::new(),
            seed: 1,
            threads: 1,
            topology: TopologyConfig::default(),
            switch: SwitchConfig::default(),
            network: NetworkConfig::default(),
            nic: NicConfig::default(),
            transport: TransportConfig::default(),
            workload: WorkloadConfig::default(),
            cc: CcConfig::default(),
            l2: L2Config::default(),
            watchdog: WatchdogConfig::default(),
            deadlock: DeadlockConfig::default(),
            fault: Vec::new(),
            traffic: Vec::new(),
            pingmesh: PingmeshConfig::default(),
            monitor_interval_us: None,
            config_check_ms: None,
            base_dir: PathBuf::from("."),
        }
    }
}

/// A configuration's microseconds, to the picosecond.
pub(crate) fn us(v: f64) -> irn_transport::Dur {
    irn_transport::Dur::from_micros_f64(v)
}

impl SimConfig {
    /// Whether the run needs the whole network in one partition: its faults, watchdogs,
    /// deadlock detection and monitoring read and act on state across nodes (Pingmesh's
    /// probes are flows like any other).
    pub fn needs_one_partition(&self) -> bool {
        !self.fault.is_empty()
            || self.watchdog.any()
            || (self.network.pfc && self.deadlock.detect_ms > 0.0)
            || self.monitor_interval_us.is_some()
            || self.config_check_ms.is_some()
            || self.nic.mtt_miss_ns > 0.0
    }

    /// Traffic classes of the run: `[workload]`'s (class 0) and each `[[traffic]]`'s.
    pub fn class_count(&self) -> usize {
        1 + self.traffic.len()
    }

    /// The name of traffic class `t` in reports.
    pub fn class_name(&self, t: usize) -> String {
        let (name, recovery) = match t {
            0 => (&self.workload.name, self.transport.recovery),
            _ => {
                let tc = &self.traffic[t - 1];
                if tc.name.is_empty() {
                    return format!("traffic{t}");
                }
                (&tc.name, tc.recovery.unwrap_or(self.transport.recovery))
            }
        };
        if name.is_empty() {
            recovery.name().to_string()
        } else {
            name.clone()
        }
    }

    /// The run as traffic class `t` sees it: for a `[[traffic]]` class, its transport, DSCPs
    /// and workload in place of `[transport]`'s, `[network]`'s and `[workload]`'s own (class
    /// 0 is the run itself). Its queue pairs, packets and flows are set up from it.
    pub fn class_config(&self, t: usize) -> SimConfig {
        let mut c = self.clone();
        let Some(tc) = t.checked_sub(1).map(|i| &self.traffic[i]) else {
            return c;
        };
        let recovery = tc.recovery.unwrap_or(self.transport.recovery);
        c.transport.recovery = recovery;
        c.transport.cc = tc.cc.unwrap_or(self.transport.cc);
        let ctrl = tc.control_dscp.unwrap_or(
            if recovery == Recovery::Tcp || !self.network.control_priority {
                tc.dscp
            } else {
                self.network.control_dscp
            },
        );
        c.network.data_dscp = tc.dscp;
        c.network.control_dscp = ctrl;
        c.network.control_priority = true;
        let w = &mut c.workload;
        w.name = tc.name.clone();
        w.kind = tc.kind;
        w.load = tc.load;
        w.sizes = tc.sizes.clone();
        w.flows_file = tc.flows_file.clone();
        w.incast_senders = tc.incast_senders;
        w.incast_bytes = tc.incast_bytes;
        w.incast_repetitions = tc.incast_repetitions;
        w.max_flows = None;
        // Its flows from a random stream of their own.
        c.seed = irn_transport::rng::mix(self.seed ^ (0x7ca1_0000 + t as u64));
        c.traffic.clear();
        c
    }

    /// A path from the configuration, resolved against its file's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }
}

#[cfg(test)]
mod tests;
