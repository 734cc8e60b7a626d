//! `irn switch`: the user-space switch of the `irn-switch` crate, on the interfaces named, its
//! counters written as JSON at exit.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use irn_sim::config::EcnMode;

/// `irn switch`'s command line (the crate's [`irn_switch::Options`], and where to write).
#[derive(clap::Args)]
pub struct SwitchArgs {
    /// An interface to switch between (repeat: two or more).
    #[arg(long = "port", value_name = "IFACE", required = true)]
    pub ports: Vec<String>,
    /// Egress rate of every port in bits per second; suffixes k, m, g (`500m` = 500 Mb/s).
    #[arg(long, default_value = "1g", value_parser = irn_switch::parse_rate)]
    pub rate: u64,
    /// Egress buffer of every port and queue (each priority's, the control queue's), bytes:
    /// a frame that would queue past it is dropped.
    #[arg(long, default_value_t = 256_000)]
    pub buffer: u64,
    /// One buffer of this many bytes shared by every queue of the switch instead of
    /// `--buffer` per queue, as a switch ASIC's shared memory: a lossy queue takes up to
    /// `--alpha` × what is free of it, a lossless priority pauses its upstream at
    /// `--pfc-alpha` × what is free, and `--headroom` per port and lossless priority is kept
    /// for what arrives after a pause.
    #[arg(long, value_name = "BYTES", conflicts_with_all = ["buffer", "xoff"])]
    pub shared_buffer: Option<u64>,
    /// The shared buffer's dynamic threshold α for lossy queues (default 1).
    #[arg(long, requires = "shared_buffer")]
    pub alpha: Option<f64>,
    /// The shared buffer's α at which a lossless priority pauses its upstream (default:
    /// `--alpha`'s).
    #[arg(long, requires = "shared_buffer")]
    pub pfc_alpha: Option<f64>,
    /// The shared buffer's headroom per port and lossless priority, bytes. Default: what
    /// `--rate` delivers in 400 µs (a software round trip) plus two largest frames.
    #[arg(long, value_name = "BYTES", requires = "shared_buffer")]
    pub headroom: Option<u64>,
    /// ECN marking at every egress: `off`, `red` (DCQCN's) or `threshold` (DCTCP's).
    #[arg(long, default_value = "red", value_parser = irn_switch::parse_ecn)]
    pub ecn: EcnMode,
    /// Queue length in bytes from which packets are marked (RED: with a probability rising
    /// from 0; threshold: every one).
    #[arg(long, default_value_t = 20_000)]
    pub kmin: u64,
    /// RED: queue length in bytes from which every ECN-capable packet is marked.
    #[arg(long, default_value_t = 100_000)]
    pub kmax: u64,
    /// RED: the marking probability just below `--kmax`.
    #[arg(long, default_value_t = 0.2)]
    pub pmax: f64,
    /// Seed of RED's random draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Stop once no frame has arrived for this many seconds (counted from the first frame)
    /// and every queue is empty.
    #[arg(long)]
    pub idle: Option<f64>,
    /// Priorities made lossless by PFC (IEEE 802.1Qbb), e.g. `3` or `3,4`; a frame's priority
    /// is its DSCP ÷ 8. Their frames are never dropped for a full queue, and a port pauses
    /// that priority of its upstream once what it brought in passes `--xoff`.
    #[arg(long, value_delimiter = ',', value_name = "PRIOS")]
    pub pfc: Vec<u8>,
    /// 802.3x PAUSE on every port instead of PFC: every frame lossless, a pause stops the
    /// whole link.
    #[arg(long)]
    pub pause: bool,
    /// The pause threshold of a (port, priority), bytes; the rest of `--buffer` is headroom.
    /// Default: three quarters of `--buffer`.
    #[arg(long, value_name = "BYTES")]
    pub xoff: Option<u64>,
    /// The pause time a pause frame carries, in quanta of 512 bit times.
    #[arg(long, default_value_t = u16::MAX)]
    pub pause_quanta: u16,
    /// The link rate pause quanta are counted at (512 bit times each), e.g. `10g`: the time
    /// the switch's pauses last (it refreshes them at half) and the time those it receives
    /// hold a port. Default: each port's link speed (a veth reports 10 Gb/s, as the hosts'
    /// `--pause-rate` defaults to), or `--rate` when it reports none.
    #[arg(long, value_parser = irn_switch::parse_rate)]
    pub pause_rate: Option<u64>,
    /// Share each egress between the priorities by DWRR (IEEE 802.1Qaz ETS) instead of
    /// strict priority: one weight per priority 0 to 7, e.g. `1,0,0,3,0,0,0,0`; 0 keeps a
    /// priority strict (above the weighted ones), and a unit of weight is one largest frame
    /// of quantum per round. Control traffic (`--classify`) stays strict above all.
    #[arg(long, value_delimiter = ',', value_name = "W0,…,W7")]
    pub dwrr: Option<Vec<u32>>,
    /// Which frames are classified by DSCP into the priorities: `udp` (RoCEv2; ARP and TCP
    /// are control traffic, served above every priority) or `ip` (every IP packet, TCP
    /// included, as a switch that trusts DSCP does; only ARP and other non-IP frames are
    /// control traffic).
    #[arg(long, default_value = "udp", value_parser = irn_switch::parse_classify)]
    pub classify: irn_switch::Classify,
    /// What a frame's priority is read from: `dscp` (its IP header's DSCP ÷ 8) or `pcp` (its
    /// 802.1Q tag's priority code point; an untagged frame is priority 0).
    #[arg(long, default_value = "dscp", value_parser = irn_switch::parse_trust)]
    pub trust: irn_switch::Trust,
    /// The switch routes: every frame leaves without the 802.1Q tag it came with, as a routed
    /// hop's new Ethernet header carries none (its priority here is read before the tag goes).
    #[arg(long)]
    pub routed: bool,
    /// The fabric's intended configuration (TOML: `pfc`, `ecn`, `buffer_model`, `mtu`, `up`,
    /// `[port.NAME]` tables, …), checked against what the switch runs: its settings at start,
    /// its ports' MTU and link state every `--config-check` seconds. Each difference is said
    /// on standard error as it comes and goes, and reported (`config_findings`).
    #[arg(long, value_name = "FILE")]
    pub intended: Option<PathBuf>,
    /// How often the ports are checked against `--intended`, seconds.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub config_check: f64,
    /// Write the counters here at exit (JSON) instead of to standard output.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Runs the switch; `Ok(true)` when it stopped as asked.
pub fn run(args: SwitchArgs) -> Result<bool> {
    let report = irn_switch::run(&irn_switch::Options {
        ports: args.ports,
        rate_bps: args.rate,
        buffer: args.buffer,
        shared_buffer: args.shared_buffer,
        alpha: args.alpha,
        pfc_alpha: args.pfc_alpha,
        headroom: args.headroom,
        ecn: args.ecn,
        kmin: args.kmin,
        kmax: args.kmax,
        pmax: args.pmax,
        seed: args.seed,
        duration: args.duration,
        idle: args.idle,
        pfc: args.pfc,
        pause: args.pause,
        xoff: args.xoff,
        pause_quanta: args.pause_quanta,
        pause_rate: args.pause_rate,
        dwrr: args.dwrr,
        classify: args.classify,
        trust: args.trust,
        routed: args.routed,
        intended: args
            .intended
            .as_deref()
            .map(irn_switch::intended::Intended::load)
            .transpose()?,
        config_check: args.config_check,
    })?;
    let text = serde_json::to_string_pretty(&report)? + "\n";
    match &args.json {
        Some(path) => File::create(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("--json {}", path.display()))?,
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    Ok(true)
}
