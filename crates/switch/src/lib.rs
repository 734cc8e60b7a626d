//! An output-queued Ethernet switch in user space (`irn switch` runs it), with the simulator's ECN
//! marking at each egress — a congested switch port for hosts whose kernel has no marking
//! queue discipline (no `red`, `fq_codel`, …), so that congestion control can be tried on real
//! packets through a real bottleneck.
//!
//! Each port ([`Options::ports`], `--port`) is an interface (a veth end, a NIC) opened as a packet socket
//! ([`PacketSocket::open_port`]): every frame it receives is taken, whatever its destination.
//! Frames are switched as a learning bridge does (IEEE 802.1D): the source MAC is remembered
//! against its port; a frame to a known unicast MAC goes to that port (to none if that is the
//! port it came from), one to a group or unknown address to every other port.
//!
//! Every egress drains at `--rate` bits per second (a frame occupies the wire for its length
//! plus the 4-byte FCS; preamble and inter-frame gap are not counted, as in the simulator)
//! from FIFOs, one per priority (a packet's priority is its
//! DSCP ÷ 8), served highest priority first — or, with `--dwrr`, shared by weight (IEEE
//! 802.1Qaz ETS: deficit round robin between the weighted priorities, strict ones above them;
//! [`Egress::with_dwrr`]) — and one control queue served above them all. Which frames the
//! priorities hold is `--classify` ([`Classify`]): by default UDP only (RoCEv2, to port 4791
//! or wherever an irn device listens), every other frame — ARP and the TCP of `irn perf`'s
//! set-up exchange — in the control queue, kept apart from the RDMA class as production
//! networks keep them; with `--classify ip` every IP packet, TCP included, by its DSCP, as a
//! switch that trusts DSCP classifies, so that TCP and RDMA can be given classes of their
//! own, only frames that are not IP (ARP, LLDP) in the control queue. The queues' memory is
//! `--buffer` bytes for each of them, or with `--shared-buffer` one pool for the whole switch
//! from which a queue takes by a dynamic threshold (`--alpha`, Choudhury and Hahne), headroom
//! reserved for the lossless priorities (`--headroom`) ([`mmu`]). A frame the memory has no
//! room for is dropped, unless it is lossless. An
//! ECN-capable IPv4 or IPv6 packet (ECT(0) or ECT(1)) joining a queue of `q` bytes is marked
//! CE by the rule the simulator's switches use ([`irn_sim::net::Marking`]): RED
//! between `--kmin` and `--kmax` with probability up to `--pmax` (DCQCN's marking, Zhu et al.,
//! SIGCOMM 2015 §3), or every packet above `--kmin` (DCTCP's, RFC 8257 §3.1). Marking changes
//! the ECN bits and the IPv4 header checksum only: the ICRC treats both as ones (RoCEv2 annex
//! A17.8.1) and the UDP checksum does not cover them, so a marked RoCEv2 packet stays valid.
//! Packets that are not ECN-capable are never marked, and dropped only when the buffer has
//! no room for them.
//!
//! A frame's priority is its DSCP ÷ 8 by default; with `--trust pcp` it is its 802.1Q
//! tag's PCP, as a switch doing VLAN-based PFC reads it, and an untagged frame is priority 0
//! (IEEE 802.1Q's port default). With `--routed` the switch sends every frame on without the
//! tag it came with, as a routed hop's new Ethernet header carries none: a switch past it
//! that trusts PCP sees priority 0, which is why PFC moved to the DSCP (seed 001 §3). A
//! tagged frame may be 4 bytes past a port's MTU plus header (counted in `rx_tagged` at the
//! port it came in on, `tags_stripped` at the one that took its tag off).
//!
//! With `--pfc PRIOS` the frames of those priorities (DSCP-based PFC, seed 001 §3) are
//! lossless: never dropped for a full queue, and each port
//! counts what it brought in of each lossless priority and sends its upstream an 802.1Qbb
//! pause for that priority once it passes `--xoff` — in a shared pool, `--pfc-alpha` × what
//! is free of its shared part, a threshold that falls as the pool fills — again every half
//! pause time while it stays above, and a resume (0 quanta) once it is two frames below
//! ([`lossless`]).
//! `--pause` does the same with 802.3x PAUSE for the whole link (every frame lossless). A
//! PFC or PAUSE frame that arrives on a port pauses that port's egress for its quanta — the
//! priorities it names, or everything — and is not forwarded. Pause frames leave at once,
//! ahead of queued data, from a locally administered MAC of the port ([`port_mac`]).
//!
//! Once every port's socket is open the switch says so on standard error (`irn switch:
//! forwarding between N ports (…)`); what reaches a port before then is lost. It stops after
//! `--duration` seconds, or once no frame has arrived for `--idle`
//! seconds and every queue has drained; it then returns its counters per port ([`Report`],
//! which `irn switch` writes as JSON to `--json FILE` or standard output). The egress pacing is
//! a user-space timer: a wake-up that comes late lets out what accumulated, at most
//! [`MAX_LAG`] of it, as one burst.
//!
//! Frames are forwarded as the kernel hands them over, so a sender on the same machine must
//! not offload checksums or segmentation to its link (`ethtool -K DEV tx off`): otherwise its
//! frames reach the switch with partial checksums, or as 64 KB super-frames larger than any
//! port's MTU (counted as `oversize` and dropped).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod egress;
pub mod intended;
pub mod lossless;
pub mod mmu;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use intended::{ConfigFinding, ConfigMonitor, Intended, PortState};
use irn_sim::config::{EcnMode, SwitchConfig};
use irn_sim::net::Marking;
use irn_transport::rng::Rng;
use irn_verbs::packet::{wait_any, PacketSocket};
use irn_wire::ethernet::EtherType;
use irn_wire::mac_control::{MacControl, MacControlRepr};
use irn_wire::MacAddr;
use lossless::Mode;
use mmu::{Buffer, Mmu};

pub use egress::{parse_classify, Class, Classify, Egress, Queued, Verdict, MAX_LAG};
pub use irn_sim::config::Trust;

/// A trust as `--trust` takes it: `dscp` or `pcp`.
pub fn parse_trust(s: &str) -> std::result::Result<Trust, String> {
    match s {
        "dscp" => Ok(Trust::Dscp),
        "pcp" => Ok(Trust::Pcp),
        _ => Err(format!("dscp or pcp, not {s:?}")),
    }
}

/// Options of `irn switch`.
/// A rate as `--rate` takes it — `500m`, `10g`, `1000000` — in bits per second.
pub fn parse_rate(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("bit")
        .or(t.strip_suffix("bps"))
        .unwrap_or(&t);
    let (num, mult) = match t.as_bytes().last() {
        Some(b'k') => (&t[..t.len() - 1], 1e3),
        Some(b'm') => (&t[..t.len() - 1], 1e6),
        Some(b'g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v * mult >= 1.0 && v * mult <= 1e13 => Ok((v * mult) as u64),
        _ => Err(format!(
            "a rate in bits per second (e.g. 500m, 10g), from 1 b/s to 10 Tb/s, not {s:?}"
        )),
    }
}

/// An ECN marking as `--ecn` takes it: `off`, `red` (DCQCN's) or `threshold` (DCTCP's).
pub fn parse_ecn(s: &str) -> std::result::Result<EcnMode, String> {
    match s {
        "off" => Ok(EcnMode::Off),
        "red" => Ok(EcnMode::Red),
        "threshold" => Ok(EcnMode::Threshold),
        _ => Err(format!("off, red or threshold, not {s:?}")),
    }
}

/// Counters of one port; `dropped`, `marked` and `peak_queue_bytes` are its egress's.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct PortCounters {
    /// The interface.
    pub port: String,
    /// Frames received on the port.
    pub rx_frames: u64,
    /// Their bytes (Ethernet header onward, no FCS).
    pub rx_bytes: u64,
    /// Frames sent out of the port.
    pub tx_frames: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames dropped at this egress: their class's buffer was full.
    pub dropped: u64,
    /// ECN-capable packets marked CE at this egress.
    pub marked: u64,
    /// Frames larger than this port's MTU allows (an offloaded super-frame): dropped.
    pub oversize: u64,
    /// Frames that arrived on the port with an 802.1Q tag.
    pub rx_tagged: u64,
    /// Frames sent out of this port without the 802.1Q tag they came with (`--routed`).
    pub tags_stripped: u64,
    /// The link rate the port counts pause quanta at, bits per second (its pauses' times
    /// and those it receives).
    pub pause_rate_bps: u64,
    /// The longest a queue of this egress has been, bytes.
    pub peak_queue_bytes: u64,
    /// Frames the kernel dropped before the switch read them (the socket's receive buffer
    /// was full).
    pub kernel_drops: u64,
    /// Sends the kernel refused.
    pub tx_errors: u64,
    /// Receive errors the socket reported (a link going down): counted, not fatal.
    pub rx_errors: u64,
    /// PFC or PAUSE frames the switch sent out of this port (pauses, their refreshes and
    /// resumes) for what it received here.
    pub pause_sent: u64,
    /// PFC or PAUSE frames that arrived on this port (they pause its egress).
    pub pause_received: u64,
    /// Lossless frames queued at this egress beyond its buffer: the headroom was too small.
    pub headroom_overflow: u64,
    /// When the port sent its first and its last frame, seconds since the switch started
    /// (what a goodput over the port's busy time divides by); `null` if it sent none.
    pub first_tx_at: Option<f64>,
    /// See `first_tx_at`.
    pub last_tx_at: Option<f64>,
}

/// The MAC control frame (PFC or PAUSE) a frame is, if it is one.
fn mac_control(frame: &[u8]) -> Option<MacControlRepr> {
    let t = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if t != u16::from(EtherType::MacControl) {
        return None;
    }
    let v = MacControl::new_checked(frame.get(14..)?).ok()?;
    MacControlRepr::parse(&v).ok()
}

/// Sends each (port, PFC or PAUSE frame) out of its port at once, ahead of queued data (a
/// MAC control frame is not queued behind the traffic it controls), and counts it.
fn send_controls(
    socks: &[PacketSocket],
    egress: &mut [Egress],
    controls: &mut Vec<(usize, MacControlRepr)>,
) {
    for (port, f) in controls.drain(..) {
        let mut buf = [0u8; 64];
        let Ok(n) = f.emit_frame(port_mac(port), &mut buf) else {
            continue;
        };
        match socks[port].send(&buf[..n]) {
            Ok(()) => egress[port].counters.pause_sent += 1,
            Err(_) => egress[port].counters.tx_errors += 1,
        }
    }
}

/// The forwarding table of a learning bridge: which port each source MAC was seen on.
#[derive(Debug, Default)]
pub struct Bridge {
    table: BTreeMap<[u8; 6], usize>,
}

impl Bridge {
    /// The ports a frame that came in on `from` goes out of (after learning its source).
    pub fn route(&mut self, frame: &[u8], from: usize, ports: usize) -> Vec<usize> {
        if frame.len() < 14 {
            return Vec::new();
        }
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[..6]);
        let mut src = [0u8; 6];
        src.copy_from_slice(&frame[6..12]);
        if src[0] & 1 == 0 {
            self.table.insert(src, from);
        }
        match self.table.get(&dst) {
            Some(&p) if dst[0] & 1 == 0 => {
                if p == from {
                    Vec::new()
                } else {
                    vec![p]
                }
            }
            _ => (0..ports).filter(|&p| p != from).collect(),
        }
    }
}

/// What `irn switch` writes at exit.
/// What a run of the switch did: its settings and every port's counters (written as JSON).
#[derive(Debug, Serialize)]
pub struct Report {
    /// Every egress's rate, bits per second.
    pub rate_bps: u64,
    /// How the memory is laid out: `"per-queue"` (`buffer_bytes` per queue) or `"shared"`
    /// (one pool of `buffer_bytes`).
    pub buffer_model: &'static str,
    /// Per queue: every egress's buffer per class, bytes. Shared: the whole pool.
    pub buffer_bytes: u64,
    /// Shared: the headroom reserved per (port, lossless priority), bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headroom_bytes: Option<u64>,
    /// Shared: the headroom reserved in all, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    /// Shared: the dynamic threshold's α for lossy egress queues.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Shared: the dynamic threshold's α at which a lossless ingress pauses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pfc_alpha: Option<f64>,
    /// The most the switch ever held at once, every queue, bytes.
    pub peak_buffer_bytes: u64,
    /// The ECN marking.
    pub ecn: EcnMode,
    /// The marking's K_min, bytes.
    pub kmin_bytes: u64,
    /// RED's K_max, bytes.
    pub kmax_bytes: u64,
    /// RED's P_max.
    pub pmax: f64,
    /// The priorities PFC makes lossless (empty: none).
    pub pfc: Vec<u8>,
    /// 802.3x PAUSE on every port instead.
    pub pause: bool,
    /// Per queue: the ingress occupancy of a lossless priority above which a port pauses,
    /// bytes (`null` in a shared pool, whose threshold moves with its occupancy).
    pub xoff_bytes: Option<u64>,
    /// Which frames the priorities hold: `"udp"` (the rest are control traffic) or `"ip"`.
    pub classify: Classify,
    /// What a frame's priority is read from: `"dscp"` or `"pcp"` (its 802.1Q tag's).
    pub trust: Trust,
    /// Frames leave without their 802.1Q tag, as from a routed hop.
    pub routed: bool,
    /// How the priorities share each egress: `"strict"` or `"dwrr"`.
    pub scheduler: &'static str,
    /// Under DWRR, each priority's weight (0: strict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dwrr_weights: Option<[u32; 8]>,
    /// With `--intended`: every difference between what the switch ran and what was
    /// intended, with when a check found it and when one found it set right.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_findings: Option<Vec<ConfigFinding>>,
    /// With `--intended`: the checks of the ports made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_checks: Option<u64>,
    /// How long the switch ran.
    pub seconds: f64,
    /// Per port, in the order given.
    pub ports: Vec<PortCounters>,
}

/// How to run the switch (`irn switch`'s flags, which the errors name).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The interfaces to switch between (`--port`, two or more).
    pub ports: Vec<String>,
    /// Egress rate of every port, bits per second (`--rate`).
    pub rate_bps: u64,
    /// Egress buffer of every port and class, bytes (`--buffer`).
    pub buffer: u64,
    /// One pool of this many bytes shared by every queue instead (`--shared-buffer`).
    pub shared_buffer: Option<u64>,
    /// The shared pool's dynamic threshold α for lossy egress queues (`--alpha`).
    pub alpha: Option<f64>,
    /// The shared pool's α at which a lossless ingress pauses (`--pfc-alpha`); absent:
    /// `alpha`'s.
    pub pfc_alpha: Option<f64>,
    /// The shared pool's headroom per (port, lossless priority), bytes (`--headroom`);
    /// absent: [`Options::headroom`]'s default.
    pub headroom: Option<u64>,
    /// ECN marking at every egress (`--ecn`).
    pub ecn: EcnMode,
    /// Queue length from which packets are marked, bytes (`--kmin`).
    pub kmin: u64,
    /// RED: queue length from which every ECN-capable packet is marked, bytes (`--kmax`).
    pub kmax: u64,
    /// RED: the marking probability just below `kmax` (`--pmax`).
    pub pmax: f64,
    /// Seed of RED's draws (`--seed`).
    pub seed: u64,
    /// Stop after this many seconds (`--duration`).
    pub duration: Option<f64>,
    /// Stop once no frame has arrived for this many seconds and every queue is empty
    /// (`--idle`).
    pub idle: Option<f64>,
    /// Priorities PFC makes lossless (`--pfc`, e.g. `3` or `3,4`): their frames are never
    /// dropped for a full queue, and each port pauses that priority of its upstream when
    /// what it brought in passes `xoff`.
    pub pfc: Vec<u8>,
    /// 802.3x PAUSE instead (`--pause`): every frame lossless, a pause stops the whole link.
    pub pause: bool,
    /// The pause threshold per (port, priority), bytes (`--xoff`); absent: three quarters
    /// of `buffer`, the rest kept as headroom.
    pub xoff: Option<u64>,
    /// The pause time a pause frame carries, quanta of 512 bit times (`--pause-quanta`).
    pub pause_quanta: u16,
    /// The link rate pause quanta are counted at, on every port, bits per second
    /// (`--pause-rate`); absent: each port's link speed ([`irn_verbs::packet::link_speed`]:
    /// a veth reports 10 Gb/s), or `rate_bps` when it reports none.
    pub pause_rate: Option<u64>,
    /// The priorities share each egress by DWRR with these weights, one per priority 0 to
    /// 7, 0 for a strict one (`--dwrr`, IEEE 802.1Qaz ETS: [`Egress::with_dwrr`]); absent:
    /// strict priority.
    pub dwrr: Option<Vec<u32>>,
    /// Which frames are classified by DSCP into the priorities (`--classify`); the rest are
    /// control traffic, served above them.
    pub classify: Classify,
    /// What a frame's priority is read from (`--trust`): its DSCP, or its 802.1Q tag's PCP
    /// (an untagged frame is then priority 0, a port's default).
    pub trust: Trust,
    /// The switch routes (`--routed`): every frame it forwards leaves without the 802.1Q tag
    /// it arrived with, as a routed hop's new Ethernet header carries none (seed 001 §3).
    /// Its priority at this switch is read from the frame as it arrived. Only the tag's fate
    /// is a router's here: the MAC addresses are left as they came (the hosts behind the
    /// switch share one subnet).
    pub routed: bool,
    /// The fabric's intended configuration, checked against what the switch runs
    /// (`--intended FILE`, [`intended`]).
    pub intended: Option<Intended>,
    /// How often the ports are checked against it, seconds (`--config-check`).
    pub config_check: f64,
}

impl Options {
    /// A switch between `ports` with `irn switch`'s defaults: 1 Gb/s egresses of 256 KB per
    /// queue, RED marking from 20 KB to 100 KB up to 0.2, no flow control, strict priority,
    /// UDP classified by DSCP, no configuration monitoring, run until stopped.
    pub fn new(ports: &[&str]) -> Options {
        Options {
            ports: ports.iter().map(|p| p.to_string()).collect(),
            rate_bps: 1_000_000_000,
            buffer: 256_000,
            shared_buffer: None,
            alpha: None,
            pfc_alpha: None,
            headroom: None,
            ecn: EcnMode::Red,
            kmin: 20_000,
            kmax: 100_000,
            pmax: 0.2,
            seed: 1,
            duration: None,
            idle: None,
            pfc: Vec::new(),
            pause: false,
            xoff: None,
            pause_quanta: u16::MAX,
            pause_rate: None,
            dwrr: None,
            classify: Classify::Udp,
            trust: Trust::Dscp,
            routed: false,
            intended: None,
            config_check: 1.0,
        }
    }
}

/// The round trip a shared pool's default headroom covers, µs ([`Options::headroom`]).
pub const HEADROOM_RTT_US: u64 = 400;

/// The largest DWRR weight `--dwrr` takes (the simulator's `network.dwrr_weights` bound).
pub const MAX_DWRR_WEIGHT: u32 = 1000;

impl Options {
    /// The flow-control mode the options ask for.
    pub fn mode(&self) -> Mode {
        if self.pause {
            Mode::Pause
        } else if self.pfc.is_empty() {
            Mode::Off
        } else {
            Mode::Pfc(self.pfc.iter().fold(0u8, |m, &p| m | 1 << (p & 7)))
        }
    }

    /// The pause threshold per (port, priority), bytes.
    pub fn xoff(&self) -> u64 {
        self.xoff.unwrap_or(self.buffer / 4 * 3)
    }

    /// A shared pool's headroom per (port, lossless priority), bytes: what a port's link of
    /// `link_bps` still delivers after a pause leaves, over the software round trip of a
    /// user-space switch and sender (400 µs, the runtime's, `irn_verbs`' BDP cap assumes it),
    /// plus two largest frames (`max_frame` bytes) in flight either way.
    pub fn headroom(&self, max_frame: u64, link_bps: u64) -> u64 {
        self.headroom.unwrap_or(
            (u128::from(link_bps) * u128::from(HEADROOM_RTT_US) / 8 / 1_000_000) as u64
                + 2 * max_frame,
        )
    }

    /// The memory layout the options ask for, for frames up to `max_frame` bytes over links
    /// of up to `link_bps`.
    pub fn buffer_layout(&self, max_frame: u64, link_bps: u64) -> Buffer {
        match self.shared_buffer {
            None => Buffer::PerQueue {
                bytes: self.buffer,
                xoff: self.xoff(),
            },
            Some(bytes) => {
                let alpha = self.alpha.unwrap_or(1.0);
                Buffer::Shared {
                    bytes,
                    headroom: self.headroom(max_frame, link_bps),
                    alpha,
                    pfc_alpha: self.pfc_alpha.unwrap_or(alpha),
                }
            }
        }
    }

    /// The DWRR weights per priority, if the priorities share egresses by weight.
    pub fn dwrr_weights(&self) -> Option<[u32; 8]> {
        let w = self.dwrr.as_ref()?;
        let mut by_priority = [0; 8];
        for (slot, &x) in by_priority.iter_mut().zip(w) {
            *slot = x;
        }
        Some(by_priority)
    }
}

/// The MAC address the switch sends its pause frames from on port `i`: locally administered,
/// "IRN" and the port's number.
pub fn port_mac(i: usize) -> MacAddr {
    MacAddr([0x02, b'I', b'R', b'N', (i >> 8) as u8, i as u8])
}

/// Why the switch could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option that cannot mean anything, named by its flag.
    #[error("{0}")]
    Option(String),
    /// A port's packet socket could not be opened.
    #[error("--port {port}: {source}")]
    Port {
        /// The interface.
        port: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for frames failed.
    #[error("poll: {0}")]
    Poll(std::io::Error),
}

impl Options {
    /// Refuses options that cannot mean anything, naming the flag.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Option(m));
        if self.ports.len() < 2 {
            return bad("--port: a switch needs two ports or more".into());
        }
        for (i, p) in self.ports.iter().enumerate() {
            if self.ports[..i].contains(p) {
                return bad(format!("--port: {p} is named twice"));
            }
        }
        if self.buffer == 0 {
            return bad("--buffer: must be at least one byte".into());
        }
        if !(0.0..=1.0).contains(&self.pmax) {
            return bad(format!(
                "--pmax: a probability, from 0 to 1, not {}",
                self.pmax
            ));
        }
        if self.ecn == EcnMode::Red && self.kmin > self.kmax {
            return bad(format!(
                "--kmin ({}) is above --kmax ({}): RED marks between them",
                self.kmin, self.kmax
            ));
        }
        if self.pause && !self.pfc.is_empty() {
            return bad(
                "--pause and --pfc: 802.3x PAUSE and PFC must not both be enabled on a port \
                 (IEEE 802.1Qbb); choose one"
                    .into(),
            );
        }
        if let Some(p) = self.pfc.iter().find(|&&p| p > 7) {
            return bad(format!("--pfc: priorities are 0 to 7, not {p}"));
        }
        self.check_shared()?;
        if self.xoff.is_some_and(|x| x == 0 || x >= self.buffer) {
            return bad(format!(
                "--xoff: must be above 0 and below --buffer ({}), leaving headroom",
                self.buffer
            ));
        }
        if let Some(w) = &self.dwrr {
            if w.len() != 8 {
                return bad(format!(
                    "--dwrr: one weight per priority 0 to 7 (8 of them), not {}",
                    w.len()
                ));
            }
            if w.iter().all(|&x| x == 0) {
                return bad(
                    "--dwrr: every weight 0 is strict priority, the default: give a priority a \
                     weight, or leave --dwrr out"
                        .into(),
                );
            }
            if let Some(x) = w.iter().find(|&&x| x > MAX_DWRR_WEIGHT) {
                return bad(format!(
                    "--dwrr: a weight is 0 (strict) to {MAX_DWRR_WEIGHT}, not {x}"
                ));
            }
        }
        if self.pause_quanta == 0 {
            return bad("--pause-quanta: a pause of 0 quanta is a resume; at least 1".into());
        }
        for (flag, v) in [
            ("--duration", self.duration),
            ("--idle", self.idle),
            ("--config-check", Some(self.config_check)),
        ] {
            if v.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
                return bad(format!("{flag}: a positive number of seconds"));
            }
        }
        Ok(())
    }
}

impl Options {
    /// Refuses a shared pool's options that cannot mean anything: the pool's own without
    /// `--shared-buffer`, the per-queue threshold with it, an α that is not a positive
    /// number, a headroom that leaves no shared part.
    fn check_shared(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Option(m));
        if self.shared_buffer.is_none() {
            for (flag, given) in [
                ("--alpha", self.alpha.is_some()),
                ("--pfc-alpha", self.pfc_alpha.is_some()),
                ("--headroom", self.headroom.is_some()),
            ] {
                if given {
                    return bad(format!(
                        "{flag}: a setting of the shared pool; give --shared-buffer too"
                    ));
                }
            }
            return Ok(());
        }
        if self.xoff.is_some() {
            return bad(
                "--xoff: the fixed threshold of a per-queue buffer; a shared pool's moves with \
                 what is free of it (--pfc-alpha)"
                    .into(),
            );
        }
        for (flag, a) in [("--alpha", self.alpha), ("--pfc-alpha", self.pfc_alpha)] {
            if a.is_some_and(|a| !(a.is_finite() && a > 0.0)) {
                return bad(format!(
                    "{flag}: a positive number, not {}",
                    a.unwrap_or(0.0)
                ));
            }
        }
        // A headroom given is checked now; the default one, which follows the ports' MTUs
        // and link speeds, once they are open ([`Options::check_layout`]).
        match self.headroom {
            Some(_) => self.check_layout(self.buffer_layout(1514, self.rate_bps)),
            None => Ok(()),
        }
    }

    /// Refuses a shared pool whose headroom reservations leave nothing to share, naming
    /// `--shared-buffer` and `--headroom`.
    pub fn check_layout(&self, layout: Buffer) -> Result<(), Error> {
        let Buffer::Shared {
            bytes, headroom, ..
        } = layout
        else {
            return Ok(());
        };
        let lossless = self.mode().slots();
        if layout.reserved(self.mode(), self.ports.len()) >= bytes {
            return Err(Error::Option(format!(
                "--shared-buffer: {bytes} bytes leave nothing to share once {} ports × {lossless} \
                 lossless priorities reserve their headroom ({headroom} bytes each, --headroom)",
                self.ports.len(),
            )));
        }
        Ok(())
    }
}

/// Runs the switch until `--duration` or `--idle` stops it, and returns what it did.
pub fn run(args: &Options) -> Result<Report, Error> {
    args.check()?;
    let socks: Vec<PacketSocket> = args
        .ports
        .iter()
        .map(|p| {
            PacketSocket::open_port(p).map_err(|source| Error::Port {
                port: p.clone(),
                source,
            })
        })
        .collect::<Result<_, _>>()?;
    let marking = Marking::new(&SwitchConfig {
        ecn: args.ecn,
        ecn_kmin_bytes: args.kmin,
        ecn_kmax_bytes: args.kmax,
        ecn_pmax: args.pmax,
        ..SwitchConfig::default()
    });
    let mut rng = Rng::new(args.seed);
    // Pause quanta are 512 bit times of the link (IEEE 802.3 Annex 31B): what the hosts'
    // NICs count them at, whatever rate the switch drains its egresses at.
    let pause_rates: Vec<u64> = args
        .ports
        .iter()
        .map(|p| {
            args.pause_rate
                .or_else(|| irn_verbs::packet::link_speed(p))
                .unwrap_or(args.rate_bps)
        })
        .collect();
    let mut egress: Vec<Egress> = socks
        .iter()
        .zip(&args.ports)
        .zip(&pause_rates)
        .map(|((s, p), &pause_rate)| {
            let e = Egress::new(p, args.rate_bps, s.mtu() + 14)
                .with_classify(args.classify)
                .with_trust(args.trust)
                .routed(args.routed)
                .with_pause_rate(pause_rate);
            match args.dwrr_weights() {
                Some(w) => e.with_dwrr(&w),
                None => e,
            }
        })
        .collect();
    let mut bridge = Bridge::default();
    // The largest frame a port receives: its MTU, the Ethernet header and an 802.1Q tag.
    let max_frame = egress
        .iter()
        .map(|e| (e.max_frame() + egress::VLAN_TAG_LEN) as u64)
        .max()
        .unwrap_or(1518);
    let fastest = pause_rates.iter().copied().max().unwrap_or(args.rate_bps);
    let layout = args.buffer_layout(max_frame, fastest);
    args.check_layout(layout)?;
    let mut mmu = Mmu::new(
        layout,
        args.mode(),
        &pause_rates,
        2 * max_frame,
        args.pause_quanta,
    );
    // Frames that reach a port before its socket is open are lost, and a TCP SYN among them
    // is resent a second later: whoever starts hosts behind the switch waits for this line.
    eprintln!(
        "irn switch: forwarding between {} ports ({})",
        args.ports.len(),
        args.ports.join(", ")
    );
    let start = Instant::now();
    let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
    // Configuration monitoring: the settings once, the ports now and every --config-check.
    let mut monitor = args.intended.clone().map(ConfigMonitor::new);
    let check_every = (args.config_check * 1e9) as u64;
    let mut next_check = 0;
    if let Some(m) = monitor.as_mut() {
        for change in m.check_settings(&args.running(mmu.buffer()), 0.0) {
            eprintln!("irn switch: {change}");
        }
    }
    let mut last_rx: Option<u64> = None;
    let mut buf = vec![0u8; 65_536];
    loop {
        let now = ns(Instant::now());
        if let Some(m) = monitor.as_mut().filter(|_| now >= next_check) {
            let ports: Vec<(String, PortState)> = args
                .ports
                .iter()
                .map(|p| (p.clone(), PortState::read(p)))
                .collect();
            for change in m.check_ports(&ports, now as f64 / 1e9) {
                eprintln!("irn switch: {change}");
            }
            next_check = now + check_every;
        }
        let mut controls: Vec<(usize, MacControlRepr)> = mmu.due(now);
        for (e, s) in egress.iter_mut().zip(&socks) {
            while let Some(q) = e.take(now) {
                match s.send(&q.frame) {
                    Ok(()) => {
                        let c = &mut e.counters;
                        c.tx_frames += 1;
                        c.tx_bytes += q.frame.len() as u64;
                        let at = now as f64 / 1e9;
                        c.first_tx_at.get_or_insert(at);
                        c.last_tx_at = Some(at);
                    }
                    Err(_) => e.counters.tx_errors += 1,
                }
                mmu.released(q.from, q.prio, q.arrived_len, &mut controls);
            }
        }
        send_controls(&socks, &mut egress, &mut controls);
        if args.duration.is_some_and(|d| now as f64 >= d * 1e9) {
            break;
        }
        let drained = egress.iter().all(|e| e.queued_bytes() == 0);
        if let (Some(idle), Some(last)) = (args.idle, last_rx) {
            if drained && (now - last) as f64 >= idle * 1e9 {
                break;
            }
        }
        let wait_ns = egress
            .iter()
            .filter_map(Egress::next_departure)
            .chain(mmu.next_refresh())
            .chain(monitor.as_ref().map(|_| next_check))
            .min()
            .map_or(50_000_000, |t| t.saturating_sub(now))
            .min(50_000_000);
        let ready = wait_any(&socks, Duration::from_nanos(wait_ns)).map_err(Error::Poll)?;
        for (from, _) in ready.iter().enumerate().filter(|(_, r)| **r) {
            // A bounded batch per port, so that one busy port does not starve the pacer.
            for _ in 0..64 {
                let n = match socks[from].try_recv(&mut buf) {
                    Ok(Some(n)) => n,
                    Ok(None) => break,
                    // The port's link went away, or an error is pending on the socket: counted;
                    // the network cannot stop the switch.
                    Err(_) => {
                        egress[from].counters.rx_errors += 1;
                        break;
                    }
                };
                let at = ns(Instant::now());
                last_rx = Some(at);
                egress[from].counters.rx_frames += 1;
                egress[from].counters.rx_bytes += n as u64;
                let frame = &buf[..n];
                egress[from].counters.rx_tagged += u64::from(egress::is_tagged(frame));
                if let Some(control) = mac_control(frame) {
                    // A pause for what this port sends: never forwarded (802.1Qbb, 802.3
                    // Annex 31B: MAC control frames end at the link).
                    egress[from].pause(&control, at);
                    continue;
                }
                for to in bridge.route(frame, from, socks.len()) {
                    let (verdict, prio) =
                        egress[to].offer(at, frame.to_vec(), from, &mmu, &marking, &mut rng);
                    if matches!(verdict, Verdict::Queued | Verdict::Marked) {
                        if let Some(f) = mmu.queued(from, prio, n as u64, at) {
                            let mut one = vec![(from, f)];
                            send_controls(&socks, &mut egress, &mut one);
                        }
                    }
                }
            }
        }
    }
    for (e, s) in egress.iter_mut().zip(&socks) {
        e.counters.kernel_drops = s.kernel_drops().unwrap_or(0);
        e.counters.pause_rate_bps = e.pause_rate_bps();
    }
    let shared = match mmu.buffer() {
        Buffer::Shared {
            headroom,
            alpha,
            pfc_alpha,
            ..
        } => Some((headroom, alpha, pfc_alpha)),
        Buffer::PerQueue { .. } => None,
    };
    Ok(Report {
        rate_bps: args.rate_bps,
        buffer_model: if shared.is_some() {
            "shared"
        } else {
            "per-queue"
        },
        buffer_bytes: args.shared_buffer.unwrap_or(args.buffer),
        headroom_bytes: shared.map(|s| s.0),
        reserved_bytes: shared.map(|_| mmu.reserved()),
        alpha: shared.map(|s| s.1),
        pfc_alpha: shared.map(|s| s.2),
        peak_buffer_bytes: mmu.peak(),
        ecn: args.ecn,
        kmin_bytes: args.kmin,
        kmax_bytes: args.kmax,
        pmax: args.pmax,
        pfc: args.pfc.clone(),
        pause: args.pause,
        xoff_bytes: shared.is_none().then(|| args.xoff()),
        classify: args.classify,
        trust: args.trust,
        routed: args.routed,
        scheduler: if args.dwrr.is_some() {
            "dwrr"
        } else {
            "strict"
        },
        dwrr_weights: args.dwrr_weights(),
        config_checks: monitor.as_ref().map(|m| m.checks),
        config_findings: monitor.map(|m| m.findings),
        seconds: start.elapsed().as_secs_f64(),
        ports: egress.into_iter().map(|e| e.counters).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress::tests::frame;
    use irn_wire::Ecn;

    #[test]
    fn the_bridge_learns_floods_and_filters() {
        let mut b = Bridge::default();
        let f = |dst, src| frame(dst, src, Ecn::NotEct, 60);
        // Unknown destination: every other port.
        assert_eq!(b.route(&f(9, 1), 0, 3), [1, 2]);
        // 1 is on port 0 now: a frame to it goes there only.
        assert_eq!(b.route(&f(1, 9), 2, 3), [0]);
        // 9 learned on port 2; a frame from port 2 to 9 stays there.
        assert_eq!(b.route(&f(9, 5), 2, 3), Vec::<usize>::new());
        // Broadcast floods.
        let mut bc = f(1, 1);
        bc[..6].copy_from_slice(&[0xff; 6]);
        assert_eq!(b.route(&bc, 1, 3), [0, 2]);
        // A runt routes nowhere.
        assert!(b.route(&[0u8; 10], 0, 3).is_empty());
    }

    #[test]
    fn rates_and_bad_options_are_named() {
        assert_eq!(parse_rate("500m"), Ok(500_000_000));
        assert_eq!(parse_rate("10g"), Ok(10_000_000_000));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("64000"), Ok(64_000));
        assert!(parse_rate("fast").is_err() && parse_rate("0").is_err());
        let args = |ports: &[&str], pmax: f64| Options {
            rate_bps: 1_000_000,
            buffer: 1000,
            kmin: 10,
            kmax: 20,
            pmax,
            ..Options::new(ports)
        };
        let err = |a: Options| a.check().expect_err("refused").to_string();
        assert!(err(args(&["a"], 0.1)).contains("--port"));
        assert!(err(args(&["a", "a"], 0.1)).contains("named twice"));
        assert!(err(args(&["a", "b"], 1.5)).contains("--pmax"));
        assert!(args(&["a", "b"], 0.1).check().is_ok());
    }

    #[test]
    fn pfc_and_pause_together_and_bad_thresholds_are_refused() {
        let base = Options {
            rate_bps: 1_000_000,
            buffer: 1000,
            ecn: EcnMode::Off,
            kmin: 10,
            kmax: 20,
            pmax: 0.1,
            pfc: vec![3],
            ..Options::new(&["a", "b"])
        };
        assert!(base.check().is_ok());
        assert_eq!(base.mode(), Mode::Pfc(0b1000));
        assert_eq!(base.xoff(), 750);
        let err = |o: Options| o.check().expect_err("refused").to_string();
        assert!(err(Options {
            pause: true,
            ..base.clone()
        })
        .contains("--pause and --pfc"));
        assert!(err(Options {
            pfc: vec![9],
            ..base.clone()
        })
        .contains("--pfc"));
        assert!(err(Options {
            xoff: Some(1000),
            ..base.clone()
        })
        .contains("--xoff"));
        assert!(err(Options {
            pause_quanta: 0,
            ..base.clone()
        })
        .contains("--pause-quanta"));
        assert!(err(Options {
            dwrr: Some(vec![1, 2, 3]),
            ..base.clone()
        })
        .contains("--dwrr: one weight per priority"));
        assert!(err(Options {
            dwrr: Some(vec![1, 1, 1, 1001, 1, 1, 1, 1]),
            ..base.clone()
        })
        .contains("--dwrr: a weight is 0 (strict) to 1000, not 1001"));
        assert!(err(Options {
            dwrr: Some(vec![0; 8]),
            ..base.clone()
        })
        .contains("--dwrr: every weight 0"));
        let dwrr = Options {
            dwrr: Some(vec![1, 0, 0, 3, 0, 0, 0, 0]),
            ..base.clone()
        };
        assert!(dwrr.check().is_ok());
        assert_eq!(dwrr.dwrr_weights(), Some([1, 0, 0, 3, 0, 0, 0, 0]));
        assert_eq!(base.dwrr_weights(), None);
        // A shared pool: its settings need it, it refuses the per-queue threshold, and its
        // headroom must leave something to share.
        assert!(err(Options {
            alpha: Some(0.5),
            ..base.clone()
        })
        .contains("--alpha: a setting of the shared pool"));
        let pool = Options {
            shared_buffer: Some(1_000_000),
            rate_bps: 1_000_000_000,
            ..base.clone()
        };
        assert!(pool.check().is_ok());
        // 1 Gb/s × 400 µs = 50 KB, and two 1514-byte frames.
        assert_eq!(pool.headroom(1514, 1_000_000_000), 53_028);
        // Over 10 Gb/s links: 500 KB.
        assert_eq!(pool.headroom(1514, 10_000_000_000), 503_028);
        assert_eq!(
            pool.buffer_layout(1514, 1_000_000_000),
            Buffer::Shared {
                bytes: 1_000_000,
                headroom: 53_028,
                alpha: 1.0,
                pfc_alpha: 1.0
            }
        );
        assert!(err(Options {
            xoff: Some(500),
            ..pool.clone()
        })
        .contains("--xoff: the fixed threshold"));
        assert!(err(Options {
            pfc_alpha: Some(f64::NAN),
            ..pool.clone()
        })
        .contains("--pfc-alpha: a positive number"));
        // The default headroom follows the ports' links, checked once they are open; one
        // given is checked at once.
        let small = Options {
            shared_buffer: Some(100_000),
            ..pool.clone()
        };
        assert!(small.check().is_ok());
        assert!(small
            .check_layout(small.buffer_layout(1514, 1_000_000_000))
            .expect_err("refused")
            .to_string()
            .contains("--shared-buffer: 100000 bytes leave nothing to share"));
        assert!(err(Options {
            headroom: Some(50_000),
            ..small.clone()
        })
        .contains("(50000 bytes each, --headroom)"));
        assert!(Options {
            headroom: Some(40_000),
            ..small
        }
        .check()
        .is_ok());
        assert_eq!(
            Options {
                headroom: Some(1_000),
                alpha: Some(2.0),
                ..pool.clone()
            }
            .buffer_layout(1514, 1_000_000_000),
            Buffer::Shared {
                bytes: 1_000_000,
                headroom: 1_000,
                alpha: 2.0,
                pfc_alpha: 2.0
            }
        );
        let pause = Options {
            pause: true,
            pfc: Vec::new(),
            ..base
        };
        assert_eq!(pause.mode(), Mode::Pause);
        assert_eq!(port_mac(3).0, [0x02, b'I', b'R', b'N', 0, 3]);
        // A PFC frame is recognised as MAC control, not forwarded.
        let mut buf = [0u8; 64];
        let repr = MacControlRepr::Pfc(irn_wire::mac_control::PfcRepr::single(3, 7));
        let n = repr.emit_frame(port_mac(0), &mut buf).expect("emit");
        assert_eq!(mac_control(&buf[..n]), Some(repr));
        assert_eq!(mac_control(&frame(1, 2, Ecn::NotEct, 60)), None);
    }
}
