//! Workloads: flow-size distributions and the flows of a run, all drawn up front from the seed
//! (so a run's traffic does not depend on how the network treats it).

use std::path::Path;

use irn_transport::{Dur, Time};

use crate::config::{PingLevel, SimConfig, WorkloadKind};
use crate::topology::Topology;
use irn_transport::rng::Rng;

/// A piecewise-linear cumulative distribution of flow sizes (the format of the HPCC and
/// ConWeave simulators' traffic files): points `(bytes, cumulative percent)`.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeCdf {
    points: Vec<(f64, f64)>,
}

/// Why a size distribution was refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The CDF file could not be read.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The CDF or flows file is malformed.
    #[error("{0}:{1}: {2}")]
    Parse(String, usize, String),
    /// No such distribution.
    #[error("unknown size distribution `{0}` (built in: irn, websearch, fb_hadoop, data_mining, ali_storage, google_rpc; or a path to a .cdf file)")]
    Unknown(String),
    /// A flow names a host that does not exist.
    #[error("{0}:{1}: host {2} does not exist (the network has {3})")]
    NoHost(String, usize, u32, u32),
}

/// The IRN paper's default workload, built from its words (SPEC E0; IRN §4.1): "50 % of the
/// flows are single-packet messages of 32 B–1 KB, 15 % are 200 KB–3 MB, most bytes are in
/// large flows". Between them, 35 % of flows spread log-uniformly-ish over 1 KB–200 KB. Mean
/// ≈ 180 KB; flows above 200 KB carry ≈ 90 % of the bytes.
const IRN_CDF: &str = "32 0\n1024 50\n10000 65\n50000 75\n200000 85\n1000000 95\n3000000 100\n";

const BUILTIN: [(&str, &str); 5] = [
    ("websearch", include_str!("../workloads/websearch.cdf")),
    ("fb_hadoop", include_str!("../workloads/fb_hadoop.cdf")),
    ("data_mining", include_str!("../workloads/data_mining.cdf")),
    ("ali_storage", include_str!("../workloads/ali_storage.cdf")),
    ("google_rpc", include_str!("../workloads/google_rpc.cdf")),
];

impl SizeCdf {
    /// Parses `SIZE PERCENT` lines: sizes non-decreasing, percents non-decreasing from 0 to 100.
    pub fn parse(text: &str, origin: &str) -> Result<SizeCdf, WorkloadError> {
        let err = |l: usize, m: &str| WorkloadError::Parse(origin.into(), l, m.into());
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut w = line.split_whitespace();
            let (Some(s), Some(p), None) = (w.next(), w.next(), w.next()) else {
                return Err(err(i + 1, "expected `SIZE PERCENT`"));
            };
            let s: f64 = s.parse().map_err(|_| err(i + 1, "size is not a number"))?;
            let p: f64 = p
                .parse()
                .map_err(|_| err(i + 1, "percent is not a number"))?;
            if !(s.is_finite() && s >= 0.0 && (0.0..=100.0).contains(&p)) {
                return Err(err(i + 1, "size must be ≥ 0 and percent 0–100"));
            }
            if let Some(&(ls, lp)) = points.last() {
                if s < ls || p < lp {
                    return Err(err(i + 1, "sizes and percents must not decrease"));
                }
            } else if p != 0.0 {
                return Err(err(i + 1, "the first point must be at 0 %"));
            }
            points.push((s, p));
        }
        match points.last() {
            Some(&(s, p)) if p == 100.0 && s >= 1.0 => Ok(SizeCdf { points }),
            _ => Err(err(
                0,
                "the last point must be at 100 % with a size of at least 1 byte",
            )),
        }
    }

    /// A built-in distribution by name, or a file.
    pub fn named(name: &str, base_dir: &Path) -> Result<SizeCdf, WorkloadError> {
        if name == "irn" {
            return SizeCdf::parse(IRN_CDF, "irn");
        }
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            return SizeCdf::parse(text, name);
        }
        let p = base_dir.join(name);
        if name.ends_with(".cdf") || p.exists() {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| WorkloadError::Io(p.display().to_string(), e))?;
            return SizeCdf::parse(&text, &p.display().to_string());
        }
        Err(WorkloadError::Unknown(name.into()))
    }

    /// A size in bytes (at least 1), by inverse-transform sampling with linear interpolation.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit() * 100.0;
        self.quantile(u)
    }

    fn quantile(&self, u: f64) -> u64 {
        let i = self.points.partition_point(|&(_, p)| p <= u);
        let s = if i == 0 {
            self.points[0].0
        } else if i >= self.points.len() {
            self.points[self.points.len() - 1].0
        } else {
            let (s0, p0) = self.points[i - 1];
            let (s1, p1) = self.points[i];
            if p1 > p0 {
                s0 + (s1 - s0) * (u - p0) / (p1 - p0)
            } else {
                s1
            }
        };
        (s.round() as u64).max(1)
    }

    /// The distribution's mean in bytes.
    pub fn mean(&self) -> f64 {
        self.points
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) / 100.0 * (w[0].0 + w[1].0) / 2.0)
            .sum::<f64>()
            .max(1.0)
    }
}

/// One flow: a message from `src` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// Bytes.
    pub size: u64,
    /// When it starts.
    pub start: Time,
    /// Incast request it belongs to, if any.
    pub group: Option<u32>,
    /// A Pingmesh probe, at this level (not part of the workload's statistics).
    pub probe: Option<PingLevel>,
    /// Its traffic class: 0 for `[workload]`'s flows, `i` for the `i`-th `[[traffic]]`'s.
    pub class: u8,
}

/// The flows of a run, sorted by start time (ties: generation order): `[workload]`'s, and
/// each `[[traffic]]` class's from a random stream of its own ([`SimConfig::class_config`]),
/// so that `[workload]`'s flows are the same with or without other classes and keep their
/// numbers when no other class has flows.
pub fn generate(
    cfg: &SimConfig,
    hosts: u32,
    host_rate_bps: u64,
) -> Result<Vec<Flow>, WorkloadError> {
    let mut flows = generate_class(cfg, hosts, host_rate_bps)?;
    for t in 1..cfg.class_count() {
        let class = u8::try_from(t).expect("at most 15 classes (validated)");
        let more = generate_class(&cfg.class_config(t), hosts, host_rate_bps)?;
        // Incast requests are numbered across the classes.
        let groups = flows
            .iter()
            .filter_map(|f| f.group)
            .max()
            .map_or(0, |g| g + 1);
        flows.extend(more.into_iter().map(|f| Flow {
            class,
            group: f.group.map(|g| g + groups),
            ..f
        }));
    }
    if cfg.class_count() > 1 {
        flows.sort_by_key(|f| f.start);
    }
    Ok(flows)
}

/// The flows of one traffic class's workload (`cfg.workload`), sorted by start time.
fn generate_class(
    cfg: &SimConfig,
    hosts: u32,
    host_rate_bps: u64,
) -> Result<Vec<Flow>, WorkloadError> {
    let w = &cfg.workload;
    let duration = Dur::from_picos((w.duration_us * 1e6) as u64);
    let max = w.max_flows.unwrap_or(u64::MAX);
    let mut flows = Vec::new();
    // Poisson arrivals: the whole workload, or an incast's background traffic.
    if w.kind == WorkloadKind::Poisson || (w.kind == WorkloadKind::Incast && w.load > 0.0) {
        let cdf = SizeCdf::named(&w.sizes, &cfg.base_dir)?;
        flows = poisson(&cdf, cfg.seed, hosts, host_rate_bps, w.load, duration, max);
    }
    match w.kind {
        WorkloadKind::Poisson => {}
        WorkloadKind::Incast => {
            let mut rng = Rng::stream(cfg.seed, 3);
            let m = w.incast_senders.min(hosts - 1);
            // Requests one after the other: each starts when the previous could have ended at
            // the receiver's line rate, plus 10 %.
            let gap = Dur::from_picos(
                Dur::transmission(w.incast_bytes, host_rate_bps).as_picos() / 10 * 11,
            );
            for r in 0..w.incast_repetitions {
                let start = Time::ZERO + gap.saturating_mul(u64::from(r));
                let dst = rng.below(u64::from(hosts)) as u32;
                let mut senders: Vec<u32> = (0..hosts).filter(|&h| h != dst).collect();
                // Partial Fisher–Yates: the first m are a uniform sample.
                for i in 0..m as usize {
                    let j = i + rng.below((senders.len() - i) as u64) as usize;
                    senders.swap(i, j);
                }
                let each = w.incast_bytes / u64::from(m);
                let extra = w.incast_bytes % u64::from(m);
                for (i, &src) in senders[..m as usize].iter().enumerate() {
                    flows.push(Flow {
                        src,
                        dst,
                        size: each + u64::from((i as u64) < extra),
                        start,
                        group: Some(r),
                        probe: None,
                        class: 0,
                    });
                }
            }
        }
        WorkloadKind::Flows => {
            let p = cfg.resolve(w.flows_file.as_deref().unwrap_or(Path::new("")));
            let origin = p.display().to_string();
            let text =
                std::fs::read_to_string(&p).map_err(|e| WorkloadError::Io(origin.clone(), e))?;
            for (i, raw) in text.lines().enumerate() {
                let line = raw.split('#').next().unwrap_or("").trim();
                if line.is_empty() || line.starts_with("start") {
                    continue;
                }
                let f: Vec<&str> = line.split(',').map(str::trim).collect();
                let bad = |m: &str| WorkloadError::Parse(origin.clone(), i + 1, m.into());
                let [start, src, dst, size] = f.as_slice() else {
                    return Err(bad("expected start_us,src,dst,bytes"));
                };
                let start: f64 = start.parse().map_err(|_| bad("start_us is not a number"))?;
                let src: u32 = src.parse().map_err(|_| bad("src is not a host number"))?;
                let dst: u32 = dst.parse().map_err(|_| bad("dst is not a host number"))?;
                let size: u64 = size.parse().map_err(|_| bad("bytes is not a number"))?;
                for h in [src, dst] {
                    if h >= hosts {
                        return Err(WorkloadError::NoHost(origin.clone(), i + 1, h, hosts));
                    }
                }
                if src == dst || size == 0 || !(start >= 0.0 && start.is_finite()) {
                    return Err(bad(
                        "a flow needs two different hosts, a size and a start ≥ 0",
                    ));
                }
                flows.push(Flow {
                    src,
                    dst,
                    size,
                    start: Time::from_picos((start * 1e6) as u64),
                    group: None,
                    probe: None,
                    class: 0,
                });
            }
        }
    }
    flows.sort_by_key(|f| f.start);
    flows.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    Ok(flows)
}

/// The level at which Pingmesh sees the pair `a`, `b` (seed 001 §5.3): under one ToR (two
/// links apart), across the whole fabric (the topology's diameter), or in between (a pod of
/// a fat-tree; a leaf-spine has no such level).
pub fn ping_level(topo: &Topology, a: u32, b: u32) -> PingLevel {
    let hops = topo.hops(a, b);
    if hops <= 2 {
        PingLevel::Tor
    } else if hops >= topo.diameter() {
        PingLevel::Fabric
    } else {
        PingLevel::Pod
    }
}

/// RDMA Pingmesh's probes (seed 001 §5.3; `[pingmesh]`): every server, from a random phase
/// on, sends a round every `interval_us` until `workload.duration_us` — at each configured
/// level, `peers_per_level` peers drawn at random among the servers at that level — each a
/// `size_bytes` operation of the workload's kind. Drawn from their own random streams, so the
/// workload's flows are the same with or without them.
pub fn pingmesh_probes(cfg: &SimConfig, topo: &Topology) -> Vec<Flow> {
    let pm = &cfg.pingmesh;
    let mut out = Vec::new();
    if !pm.enabled {
        return out;
    }
    let interval = pm.interval_us * 1e6;
    let end = cfg.workload.duration_us * 1e6;
    for h in 0..topo.hosts {
        let peers: Vec<(PingLevel, Vec<u32>)> = pm
            .levels
            .iter()
            .map(|&l| {
                let at: Vec<u32> = (0..topo.hosts)
                    .filter(|&p| p != h && ping_level(topo, h, p) == l)
                    .collect();
                (l, at)
            })
            .filter(|(_, at)| !at.is_empty())
            .collect();
        let mut rng = Rng::stream(cfg.seed, 50_000 + u64::from(h));
        let mut t = rng.below(interval.max(1.0) as u64) as f64;
        while t < end {
            for (level, at) in &peers {
                for _ in 0..pm.peers_per_level {
                    let dst = at[rng.below(at.len() as u64) as usize];
                    out.push(Flow {
                        src: h,
                        dst,
                        size: pm.size_bytes,
                        start: Time::from_picos(t as u64),
                        group: None,
                        probe: Some(*level),
                        class: 0,
                    });
                }
            }
            t += interval;
        }
    }
    out
}

/// Poisson arrivals from every host, each its own random stream: exponential gaps so that the
/// offered payload is `load` × `rate_bps`, sizes from `cdf`, destinations uniform over the other
/// hosts, until `duration` or `max` flows per host.
fn poisson(
    cdf: &SizeCdf,
    seed: u64,
    hosts: u32,
    rate_bps: u64,
    load: f64,
    duration: Dur,
    max: u64,
) -> Vec<Flow> {
    let mut flows = Vec::new();
    // Arrivals per host per picosecond so that the offered payload is `load` × line rate.
    let mean_gap_ps = cdf.mean() * 8.0 / (load * rate_bps as f64) * 1e12;
    for h in 0..hosts {
        // One stream per host: adding a host does not change the others' traffic.
        let mut rng = Rng::stream(seed, 1000 + u64::from(h));
        let mut t = rng.exponential(mean_gap_ps);
        let mut n = 0;
        while t < duration.as_picos() as f64 && n < max {
            let mut dst = rng.below(u64::from(hosts) - 1) as u32;
            if dst >= h {
                dst += 1;
            }
            flows.push(Flow {
                src: h,
                dst,
                size: cdf.sample(&mut rng),
                start: Time::from_picos(t as u64),
                group: None,
                probe: None,
                class: 0,
            });
            n += 1;
            t += rng.exponential(mean_gap_ps);
        }
    }
    flows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irn_distribution_matches_the_papers_description() {
        let cdf = SizeCdf::named("irn", Path::new(".")).expect("built in");
        let mut rng = Rng::stream(1, 0);
        let n = 200_000;
        let sizes: Vec<u64> = (0..n).map(|_| cdf.sample(&mut rng)).collect();
        let single = sizes.iter().filter(|&&s| (32..=1024).contains(&s)).count() as f64 / n as f64;
        let large = sizes
            .iter()
            .filter(|&&s| (200_000..=3_000_000).contains(&s))
            .count() as f64
            / n as f64;
        assert!((single - 0.50).abs() < 0.01, "{single}");
        assert!((large - 0.15).abs() < 0.01, "{large}");
        let total: u64 = sizes.iter().sum();
        let big: u64 = sizes.iter().filter(|&&s| s >= 200_000).sum();
        assert!(big as f64 / total as f64 > 0.8, "most bytes in large flows");
        let mean = total as f64 / n as f64;
        assert!(
            (mean / cdf.mean() - 1.0).abs() < 0.03,
            "{mean} vs {}",
            cdf.mean()
        );
    }

    #[test]
    fn builtin_files_parse_and_bad_files_are_refused() {
        for (name, _) in BUILTIN {
            let c = SizeCdf::named(name, Path::new(".")).expect(name);
            assert!(c.mean() > 1.0);
        }
        let ws = SizeCdf::named("websearch", Path::new(".")).expect("built in");
        assert!((ws.mean() - 1.6e6).abs() < 0.3e6, "{}", ws.mean());
        assert!(SizeCdf::parse("10 5\n20 100\n", "x").is_err());
        assert!(SizeCdf::parse("10 0\n5 100\n", "x").is_err());
        assert!(SizeCdf::parse("10 0\n20 90\n", "x").is_err());
        assert!(matches!(
            SizeCdf::named("nope", Path::new(".")),
            Err(WorkloadError::Unknown(_))
        ));
    }

    #[test]
    fn poisson_offers_the_configured_load() {
        let mut cfg = SimConfig::default();
        cfg.workload.duration_us = 20_000.0;
        cfg.workload.load = 0.5;
        let flows = generate(&cfg, 16, 40_000_000_000).expect("valid");
        let bytes: u64 = flows.iter().map(|f| f.size).sum();
        let offered = bytes as f64 * 8.0 / 0.02 / 16.0 / 40e9;
        assert!((offered - 0.5).abs() < 0.1, "{offered}");
        assert!(flows.windows(2).all(|w| w[0].start <= w[1].start));
        assert!(flows.iter().all(|f| f.src != f.dst && f.dst < 16));
        // Deterministic.
        assert_eq!(flows, generate(&cfg, 16, 40_000_000_000).expect("valid"));
    }

    #[test]
    fn incast_stripes_the_request() {
        let mut cfg = SimConfig::default();
        cfg.workload.kind = WorkloadKind::Incast;
        cfg.workload.load = 0.0;
        cfg.workload.incast_senders = 7;
        cfg.workload.incast_bytes = 1_000_003;
        cfg.workload.incast_repetitions = 2;
        let flows = generate(&cfg, 16, 40_000_000_000).expect("valid");
        assert_eq!(flows.len(), 14);
        for r in 0..2 {
            let g: Vec<&Flow> = flows.iter().filter(|f| f.group == Some(r)).collect();
            assert_eq!(g.iter().map(|f| f.size).sum::<u64>(), 1_000_003);
            assert!(g.iter().all(|f| f.dst == g[0].dst && f.src != f.dst));
            let mut srcs: Vec<u32> = g.iter().map(|f| f.src).collect();
            srcs.sort_unstable();
            srcs.dedup();
            assert_eq!(srcs.len(), 7);
        }
    }

    #[test]
    fn another_class_leaves_the_workloads_flows_as_they_were() {
        let mut cfg = SimConfig::default();
        cfg.workload.load = 0.5;
        let alone = generate(&cfg, 16, 40_000_000_000).expect("valid");
        cfg.traffic.push(crate::config::TrafficConfig {
            dscp: 10,
            load: 0.3,
            sizes: "websearch".into(),
            ..Default::default()
        });
        cfg.traffic.push(crate::config::TrafficConfig {
            kind: WorkloadKind::Incast,
            load: 0.0,
            incast_senders: 3,
            incast_bytes: 3000,
            incast_repetitions: 2,
            ..Default::default()
        });
        let all = generate(&cfg, 16, 40_000_000_000).expect("valid");
        let mine: Vec<Flow> = all.iter().filter(|f| f.class == 0).copied().collect();
        assert_eq!(mine, alone);
        assert!(all.windows(2).all(|w| w[0].start <= w[1].start));
        let tcp = all.iter().filter(|f| f.class == 1).count();
        assert!(tcp > 10, "{tcp}");
        let incast: Vec<&Flow> = all.iter().filter(|f| f.class == 2).collect();
        assert_eq!(incast.len(), 6);
        assert!(incast.iter().all(|f| f.group.is_some()));
    }
}
