//! What a run reports: per-flow records (CSV) and a summary (JSON, table).

use std::io::Write;

use irn_transport::Dur;
use serde::{Deserialize, Serialize};

use crate::net::FlowRecord;

/// Size buckets of the summary: single packets, short, medium and long flows.
pub const BUCKETS: [(&str, u64, u64); 4] = [
    ("<=1KB", 0, 1024),
    ("1KB-100KB", 1025, 100_000),
    ("100KB-1MB", 100_001, 1_000_000),
    (">1MB", 1_000_001, u64::MAX),
];

/// Statistics of a set of flows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FlowStats {
    /// Completed flows counted. Not serialized here: where the statistics are flattened into a
    /// run's summary, `flows` is the workload's count ([`RunSummary::flows`]); a bucket and the
    /// incast background say it themselves ([`Bucket::flows`], [`Counted::flows`]).
    #[serde(skip)]
    pub flows: usize,
    /// Mean slowdown (FCT ÷ ideal FCT).
    pub avg_slowdown: f64,
    /// Mean FCT in µs.
    pub avg_fct_us: f64,
    /// Median FCT in µs.
    pub p50_fct_us: f64,
    /// 95th-percentile FCT in µs.
    pub p95_fct_us: f64,
    /// 99th-percentile FCT in µs.
    pub p99_fct_us: f64,
    /// 99.9th-percentile FCT in µs.
    pub p999_fct_us: f64,
    /// Median slowdown.
    pub p50_slowdown: f64,
    /// 95th-percentile slowdown.
    pub p95_slowdown: f64,
    /// 99th-percentile slowdown.
    pub p99_slowdown: f64,
    /// 99.9th-percentile slowdown.
    pub p999_slowdown: f64,
}

/// The nearest-rank percentile `p` (0–100) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // p × n ÷ 100, rounded up — except where it is an integer that floating point missed by
    // an ulp (99.9 % of 1 000 is 999, not 999.000…1 rounded up to 1 000).
    let x = p / 100.0 * sorted.len() as f64;
    let rank = if (x - x.round()).abs() < 1e-9 * sorted.len() as f64 {
        x.round()
    } else {
        x.ceil()
    } as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl FlowStats {
    /// Statistics of the completed, successful flows among `records`.
    pub fn of<'a>(records: impl Iterator<Item = &'a FlowRecord>) -> FlowStats {
        let mut fct = Vec::new();
        let mut sd = Vec::new();
        for r in records {
            if let (Some(f), Some(s)) = (r.fct(), r.slowdown()) {
                if r.status == Some(irn_transport::WcStatus::Success) {
                    fct.push(f.as_micros_f64());
                    sd.push(s);
                }
            }
        }
        let n = fct.len();
        let avg = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let (afct, asd) = (avg(&fct), avg(&sd));
        fct.sort_by(f64::total_cmp);
        sd.sort_by(f64::total_cmp);
        FlowStats {
            flows: n,
            avg_slowdown: asd,
            avg_fct_us: afct,
            p50_fct_us: percentile(&fct, 50.0),
            p95_fct_us: percentile(&fct, 95.0),
            p99_fct_us: percentile(&fct, 99.0),
            p999_fct_us: percentile(&fct, 99.9),
            p50_slowdown: percentile(&sd, 50.0),
            p95_slowdown: percentile(&sd, 95.0),
            p99_slowdown: percentile(&sd, 99.0),
            p999_slowdown: percentile(&sd, 99.9),
        }
    }
}

impl FlowStats {
    /// Statistics of every successful or unfinished flow among `records`, an unfinished flow
    /// counted with the time it had run when the run stopped at `end` — a lower bound of its
    /// FCT. Leaving unfinished flows out (as [`FlowStats::of`] must) flatters a transport
    /// that leaves many, and by an amount that moves with how long the run drains after the
    /// last arrival; counted this way, they can only raise its figures, the more the longer
    /// the drain. Flows that failed (the transport gave up with an error) are left out as in
    /// [`FlowStats::of`].
    pub fn with_unfinished<'a>(
        records: impl Iterator<Item = &'a FlowRecord>,
        end: irn_transport::Time,
    ) -> FlowStats {
        let censored: Vec<FlowRecord> = records
            .filter(|r| r.status.is_none() || r.status == Some(irn_transport::WcStatus::Success))
            .map(|r| {
                let mut r = *r;
                if r.status.is_none() {
                    r.end = Some(end.max(r.flow.start));
                    r.status = Some(irn_transport::WcStatus::Success);
                }
                r
            })
            .collect();
        FlowStats::of(censored.iter())
    }
}

/// A size bucket's statistics.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Bucket {
    /// Its label.
    pub size: String,
    /// Completed flows counted.
    pub flows: usize,
    /// Statistics of its flows.
    #[serde(flatten)]
    pub stats: FlowStats,
}

/// Statistics with their count (the incast background).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Counted {
    /// Completed flows counted.
    pub flows: usize,
    /// Their statistics.
    #[serde(flatten)]
    pub stats: FlowStats,
}

impl Counted {
    fn of(stats: FlowStats) -> Counted {
        Counted {
            flows: stats.flows,
            stats,
        }
    }
}

/// Pause and drop activity of one port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortReport {
    /// Node number (hosts first, then switches).
    pub node: u32,
    /// Port number on the node.
    pub port: u16,
    /// PFC frames sent upstream.
    pub pause_sent: u64,
    /// PFC frames received.
    pub pause_received: u64,
    /// Time the port's egress was paused, µs.
    pub paused_us: f64,
    /// Packets dropped at this port.
    pub drops: u64,
}

/// One (node, port, priority)'s counters over the run (SPEC N9), as operators read them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortPrioReport {
    /// Node number (hosts first, then switches).
    pub node: u32,
    /// The node's name (a topology file's `name`, else `hN`/`sN`).
    pub name: String,
    /// Port number on the node.
    pub port: u16,
    /// Priority.
    pub prio: u8,
    /// Its counters over the run: frames and bytes sent and received, pause frames sent and
    /// received, time paused (µs), drops on arrival and at the egress (their keys sit at this
    /// level of the JSON).
    #[serde(flatten)]
    pub counts: crate::net::PrioCounters,
}

/// What the safety model (seed 001) counted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SafetyReport {
    /// The safety model's counters: floods, ARP and L2 drops, watchdog firings and
    /// restorations (their keys sit at this level of the JSON).
    #[serde(flatten)]
    pub counts: crate::net::SafetyStats,
    /// Translation-cache misses at NICs (slow receiver, SPEC N6).
    pub mtt_misses: u64,
    /// When the deadlock was first seen, ms.
    pub deadlock_at_ms: Option<f64>,
    /// A deadlock cycle still stood when the run ended.
    pub deadlock_at_end: bool,
    /// The most hosts held paused (over half of a monitoring interval) at once.
    pub paused_hosts_max: u32,
    /// Pause frames sent by NICs per second of the run, averaged over the servers (a slow
    /// receiver's symptom, seed 001 §4.4).
    pub nic_pauses_per_server_s: f64,
    /// The same for the server that sent the most.
    pub nic_pauses_max_server_s: f64,
    /// Packets NICs sent to failed hosts in each millisecond from the start of the run, up
    /// to the last one that saw any (runs with `[[fault]]`s; the total is
    /// `sent_to_failed_packets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sent_to_failed_per_ms: Vec<u64>,
    /// What the configuration monitor found (`config_check_ms`): each difference between a
    /// switch's or NIC's running configuration and the intended one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_findings: Vec<crate::net::ConfigFinding>,
}

/// One Pingmesh level's probes (seed 001 §5.3): how many, how many failed, and the RTT
/// percentiles of those that succeeded in time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PingLevelReport {
    /// `tor`, `pod` or `fabric`.
    pub level: String,
    /// Probes sent.
    pub probes: usize,
    /// Probes that failed: an error completion, no completion, or later than the timeout.
    pub failed: usize,
    /// RTT percentiles of the successful probes (post to completion), µs.
    pub p50_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// Longest, µs.
    pub max_us: f64,
}

/// One server's probes, sent or answered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PingServerReport {
    /// The server.
    pub server: u32,
    /// Probes it sent or was sent.
    pub probes: usize,
    /// Of which failed.
    pub failed: usize,
    /// Median RTT of its successful probes, µs.
    pub p50_us: f64,
    /// 99th-percentile RTT, µs.
    pub p99_us: f64,
}

/// A server Pingmesh points at, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PingSuspect {
    /// The server.
    pub server: u32,
    /// What its probes showed.
    pub reason: String,
}

/// RDMA Pingmesh's summary: per level, per server, the errors seen, and the servers whose
/// probes fail or are slow.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PingmeshReport {
    /// Probes sent.
    pub probes: usize,
    /// Probes failed.
    pub failed: usize,
    /// Per level.
    pub levels: Vec<PingLevelReport>,
    /// Per server (every server that sent or was sent a probe).
    pub servers: Vec<PingServerReport>,
    /// Failed probes by error (`IBV_WC_RETRY_EXC_ERR`, `TIMEOUT`, `UNFINISHED`, …).
    pub errors: std::collections::BTreeMap<String, usize>,
    /// Suspect servers, most failing first.
    pub suspects: Vec<PingSuspect>,
}

/// A server is suspect when at least this share of its probes failed…
pub const PING_FAIL_SHARE: f64 = 0.2;
/// …or its median (or 99th-percentile) RTT is this many times that of the probes it took no
/// part in (the median server's when those are too few)…
pub const PING_SLOW_FACTOR: f64 = 3.0;
/// …judged on at least this many successful probes for the median…
pub const PING_MIN_MEDIAN: usize = 5;
/// …and this many for the 99th percentile (below, it is one unlucky probe).
pub const PING_MIN_TAIL: usize = 100;

/// Pingmesh's summary of its probes' records. A probe fails when it completed with an error,
/// did not complete, or took longer than `timeout`. Both ends of a probe are charged with
/// it: a dead or slow server fails or slows every probe it takes part in, while each of its
/// peers sees it in only a few of theirs — so the share of failed probes (explained away
/// greedily, worst server first), and its RTTs against the probes between other servers, point
/// at it
/// (seed 001 §5.3: which servers or links are at fault).
pub fn pingmesh_report(probes: &[FlowRecord], timeout: Dur) -> PingmeshReport {
    let outcomes: Vec<ProbeOutcome> = probes
        .iter()
        .filter_map(|r| {
            let level = r.flow.probe?;
            let result = match (r.status, r.fct()) {
                (Some(irn_transport::WcStatus::Success), Some(f)) if f <= timeout => {
                    Ok(f.as_micros_f64())
                }
                (Some(irn_transport::WcStatus::Success), Some(_)) => Err("TIMEOUT".into()),
                (Some(st), _) => Err(st.to_string()),
                (None, _) => Err("UNFINISHED".into()),
            };
            Some(ProbeOutcome {
                src: r.flow.src,
                dst: r.flow.dst,
                level,
                result,
            })
        })
        .collect();
    pingmesh_summary(&outcomes, 0.0)
}

/// One Pingmesh probe's outcome, wherever it ran (the simulator or `irn pingmesh`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOutcome {
    /// The prober.
    pub src: u32,
    /// The probed server.
    pub dst: u32,
    /// Their level.
    pub level: crate::config::PingLevel,
    /// The RTT in µs, or the error (a verbs status's name, `TIMEOUT`, …).
    pub result: Result<f64, String>,
}

/// The summary of a set of probes' outcomes: [`pingmesh_report`]'s rules. A slow server must
/// also be slower than the median server by `min_excess_us` (real hosts' scheduling noise;
/// 0 in the simulator, which has none).
pub fn pingmesh_summary(probes: &[ProbeOutcome], min_excess_us: f64) -> PingmeshReport {
    use std::collections::BTreeMap;
    let outcome = |r: &ProbeOutcome| r.result.clone();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut levels: BTreeMap<crate::config::PingLevel, (usize, usize, Vec<f64>)> = BTreeMap::new();
    let mut servers: BTreeMap<u32, (usize, usize, Vec<f64>)> = BTreeMap::new();
    let mut failed = 0;
    for r in probes {
        let l = levels.entry(r.level).or_default();
        l.0 += 1;
        for h in [r.src, r.dst] {
            servers.entry(h).or_default().0 += 1;
        }
        match outcome(r) {
            Ok(rtt) => {
                l.2.push(rtt);
                for h in [r.src, r.dst] {
                    servers.entry(h).or_default().2.push(rtt);
                }
            }
            Err(e) => {
                failed += 1;
                l.1 += 1;
                *errors.entry(e).or_default() += 1;
                for h in [r.src, r.dst] {
                    servers.entry(h).or_default().1 += 1;
                }
            }
        }
    }
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let levels: Vec<PingLevelReport> = levels
        .into_iter()
        .map(|(level, (n, f, rtts))| {
            let v = sorted(rtts);
            PingLevelReport {
                level: level.name().to_string(),
                probes: n,
                failed: f,
                p50_us: percentile(&v, 50.0),
                p90_us: percentile(&v, 90.0),
                p99_us: percentile(&v, 99.0),
                p999_us: percentile(&v, 99.9),
                max_us: v.last().copied().unwrap_or(0.0),
            }
        })
        .collect();
    let servers: Vec<PingServerReport> = servers
        .into_iter()
        .map(|(server, (n, f, rtts))| {
            let v = sorted(rtts);
            PingServerReport {
                server,
                probes: n,
                failed: f,
                p50_us: percentile(&v, 50.0),
                p99_us: percentile(&v, 99.0),
            }
        })
        .collect();
    let p99s = sorted(
        servers
            .iter()
            .filter(|s| s.failed < s.probes)
            .map(|s| s.p99_us)
            .collect(),
    );
    let median_p99 = percentile(&p99s, 50.0);
    // Failures, explained greedily: the server with the largest share of failed probes is a
    // suspect; the probes it took part in are set aside (they are explained), and the rest
    // are looked at again. A dead server's peers thus do not become suspects for the probes
    // they sent it.
    let outcomes: Vec<(u32, u32, bool)> = probes
        .iter()
        .map(|r| (r.src, r.dst, r.result.is_err()))
        .collect();
    let mut flagged: Vec<u32> = Vec::new();
    let mut suspects: Vec<PingSuspect> = Vec::new();
    // Between servers with the same share, the one more of whose failures are probes *to* it
    // is the suspect: with two servers, one of them dead, only the live one's probes exist —
    // all to the dead one and all failed, the same share for both — and a server that does
    // not answer is what a Pingmesh failure most often is (its agent's own probes are missing
    // too).
    loop {
        // Per server: probes it took part in, failed ones, failed ones it was the target of.
        let mut count: BTreeMap<u32, (usize, usize, usize)> = BTreeMap::new();
        for &(a, b, bad) in &outcomes {
            if flagged.contains(&a) || flagged.contains(&b) {
                continue;
            }
            for h in [a, b] {
                let c = count.entry(h).or_default();
                c.0 += 1;
                c.1 += usize::from(bad);
                c.2 += usize::from(bad && h == b);
            }
        }
        let worst = count
            .iter()
            .filter(|(_, &(n, f, _))| f >= 2 && f as f64 >= PING_FAIL_SHARE * n as f64)
            .max_by(|x, y| {
                let share = |&(n, f, _): &(usize, usize, usize)| f as f64 / n as f64;
                share(x.1)
                    .total_cmp(&share(y.1))
                    .then(x.1 .2.cmp(&y.1 .2))
                    .then(y.0.cmp(x.0))
            });
        let Some((&h, &(n, f, _))) = worst else { break };
        flagged.push(h);
        suspects.push(PingSuspect {
            server: h,
            reason: format!("{f} of {n} probes failed"),
        });
    }
    // Slowness: a server behind a slow link or NIC slows every probe it takes part in, so
    // its median RTT stands out; one that slows some of them, its tail. Each server is held
    // against the probes it took no part in (nor a server suspected of failing): in a small
    // mesh the slow server takes part in most probes, and the median *server* is then slow
    // too. With too few such probes, against the median server.
    let p50s = sorted(
        servers
            .iter()
            .filter(|s| s.failed < s.probes)
            .map(|s| s.p50_us)
            .collect(),
    );
    let median_p50 = percentile(&p50s, 50.0);
    let baseline = |h: u32| -> (f64, f64, &'static str) {
        let rest = sorted(
            probes
                .iter()
                .filter(|r| {
                    ![r.src, r.dst]
                        .iter()
                        .any(|x| *x == h || flagged.contains(x))
                })
                .filter_map(|r| r.result.as_ref().ok().copied())
                .collect(),
        );
        if rest.len() >= PING_MIN_MEDIAN {
            (
                percentile(&rest, 50.0),
                percentile(&rest, 99.0),
                "the probes between other servers",
            )
        } else {
            (median_p50, median_p99, "the median server")
        }
    };
    let mut slow: Vec<(f64, PingSuspect)> = servers
        .iter()
        .filter(|s| !flagged.contains(&s.server) && s.probes > s.failed)
        .filter_map(|s| {
            let (base50, base99, against) = baseline(s.server);
            let (x50, x99) = (s.p50_us / base50, s.p99_us / base99);
            let ok = s.probes - s.failed;
            let slow_median = ok >= PING_MIN_MEDIAN
                && base50 > 0.0
                && x50 >= PING_SLOW_FACTOR
                && s.p50_us - base50 >= min_excess_us;
            let slow_tail = ok >= PING_MIN_TAIL
                && base99 > 0.0
                && x99 >= PING_SLOW_FACTOR
                && s.p99_us - base99 >= min_excess_us;
            let (x, what, v, m) = if slow_median {
                (x50, "median", s.p50_us, base50)
            } else if slow_tail {
                (x99, "p99", s.p99_us, base99)
            } else {
                return None;
            };
            Some((
                x,
                PingSuspect {
                    server: s.server,
                    reason: format!("{what} RTT {v:.1} µs, {x:.1}× that of {against} ({m:.1} µs)"),
                },
            ))
        })
        .collect();
    slow.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.server.cmp(&b.1.server)));
    suspects.extend(slow.into_iter().map(|(_, s)| s));
    PingmeshReport {
        probes: probes.len(),
        failed,
        levels,
        servers,
        errors,
        suspects,
    }
}

/// Incast requests (E8).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IncastReport {
    /// Requests whose every flow completed.
    pub requests: usize,
    /// Mean request completion time, µs.
    pub avg_rct_us: f64,
    /// Longest request completion time, µs.
    pub max_rct_us: f64,
    /// Statistics of the background flows (flows of no request).
    pub background: Counted,
}

/// The summary of one run: the JSON object of `irn sim --json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunSummary {
    /// Run name.
    pub name: String,
    /// Its scenario (`[[variant]]` and `[sweep]` point; empty for an experiment of one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scenario: String,
    /// Loss recovery (`irn`, `roce`, …).
    pub transport: String,
    /// PFC on.
    pub pfc: bool,
    /// 802.3x link-wide PAUSE on (instead of PFC).
    pub pause: bool,
    /// Congestion control.
    pub cc: String,
    /// Seed.
    pub seed: u64,
    /// Topology, in words.
    pub topology: String,
    /// Switch model.
    pub switch: String,
    /// Offered load.
    pub load: f64,
    /// Flows in the workload.
    pub flows: usize,
    /// Flows completed successfully.
    pub flows_completed: usize,
    /// Flows that completed with an error status.
    pub flows_failed: usize,
    /// Flows unfinished when the run stopped.
    pub flows_unfinished: usize,
    /// Flows whose delivered bytes differ from the source (payload runs only).
    pub flows_corrupted: usize,
    /// All completed flows.
    #[serde(flatten)]
    pub all: FlowStats,
    /// By flow size.
    pub by_size: Vec<Bucket>,
    /// The flows' statistics with the unfinished ones counted at the time they had run when
    /// the run stopped ([`FlowStats::with_unfinished`]): present only when some flow was
    /// unfinished, a lower bound of what they would have been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_unfinished: Option<FlowStats>,
    /// Packets dropped ÷ packets sent by hosts.
    pub drop_rate: f64,
    /// Packets dropped.
    pub drops: u64,
    /// Packets sent by hosts.
    pub packets: u64,
    /// PFC frames sent (pause and resume).
    pub pause_frames: u64,
    /// Time ports spent paused, summed over ports, µs.
    pub paused_us: f64,
    /// Lossless packets admitted beyond a buffer (PFC headroom too small): should be 0.
    pub headroom_overflow: u64,
    /// Packets retransmitted by queue pairs.
    pub retransmissions: u64,
    /// Payload bytes sent again (requests, responses, replayed Read responses).
    pub retransmitted_bytes: u64,
    /// Packets that arrived ahead of their expected PSN (reordering and loss).
    pub out_of_order: u64,
    /// NAKs sent by the hole rule (reorder buffer, extended IB; SPEC T8).
    pub early_naks: u64,
    /// Bytes parked in reorder buffers (each crossed PCIe twice more; T8(a)).
    pub reorder_bytes: u64,
    /// Most bytes one reorder buffer held.
    pub reorder_peak_bytes: u64,
    /// Smaller Read requests for missing response chunks (T8(b)).
    pub read_rerequests: u64,
    /// Per-QP NIC state the transport adds to standard RoCE, bits (SPEC E13).
    pub qp_state_bits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// NACKs sent by receivers.
    pub nacks: u64,
    /// CE-marked packets that reached a queue pair.
    pub ecn_marked: u64,
    /// CNPs sent by notification points (DCQCN).
    pub cnps: u64,
    /// BDP cap in packets, when BDP-FC is on.
    pub bdp_cap: Option<u32>,
    /// The most packets one queue pair had in flight.
    pub max_in_flight: u32,
    /// Incast requests, for incast workloads.
    pub incast: Option<IncastReport>,
    /// RDMA Pingmesh's probes, with `[pingmesh] enabled` (they are not in the flow counts
    /// and statistics above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pingmesh: Option<PingmeshReport>,
    /// Simulated time, ms.
    pub sim_time_ms: f64,
    /// Wall-clock time of the run, s.
    pub wall_s: f64,
    /// Events processed.
    pub events: u64,
    /// Ports with pause or drop activity.
    pub ports: Vec<PortReport>,
    /// A PFC deadlock was detected (a cycle of paused queues that persisted
    /// `deadlock.detect_ms`).
    pub deadlocked: bool,
    /// The deadlock's cycle, `NODE.pPORT/PRIO` per egress (empty if none).
    pub deadlock_cycle: Vec<String>,
    /// PFC watchdogs that fired, NIC and switch.
    pub watchdog_triggers: u64,
    /// Payload of the flows that completed successfully ÷ simulated time, Gb/s.
    pub goodput_gbps: f64,
    /// The safety model's counts.
    pub safety: SafetyReport,
    /// The tail of single-packet flows' FCTs, p90–p99.9 (SPEC E7; `irn sim --tail-cdf`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub single_packet_tail: Vec<TailPoint>,
    /// Per (node, port, priority) counters that are not all zero (kept with monitoring,
    /// watchdogs, faults or Pingmesh).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_prio: Vec<PortPrioReport>,
    /// The fabric-wide time series (with `monitor_interval_us`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<crate::net::TimelinePoint>,
    /// Per traffic class, with `[[traffic]]`: `[workload]`'s first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassReport>,
}

/// One traffic class of a run with `[[traffic]]` (class 0 is `[workload]`'s).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClassReport {
    /// Its name ([`SimConfig::class_name`](crate::config::SimConfig::class_name)): `[workload]`'s `name` or its transport's, a `[[traffic]]`'s `name` or `traffic<i>`.
    pub name: String,
    /// Its transport (`recovery`).
    pub transport: String,
    /// Its congestion control.
    pub cc: String,
    /// The DSCP of its data packets.
    pub dscp: u8,
    /// The priority the switches give them.
    pub priority: u8,
    /// Whether that priority is lossless (PFC or PAUSE).
    pub lossless: bool,
    /// Its flows.
    pub flows: usize,
    /// ...completed successfully.
    pub flows_completed: usize,
    /// ...completed with an error.
    pub flows_failed: usize,
    /// ...not finished when the run ended.
    pub flows_unfinished: usize,
    /// Statistics of its measured flows.
    #[serde(flatten)]
    pub stats: FlowStats,
    /// Payload of its flows that completed successfully ÷ simulated time, Gb/s.
    pub goodput_gbps: f64,
    /// Packets its queue pairs sent again.
    pub retransmissions: u64,
    /// Its queue pairs' retransmission timeouts.
    pub timeouts: u64,
    /// How long the NICs that send its flows had its priority paused, summed over them, µs
    /// (congestion spreading reaching its senders, SPEC N3).
    pub paused_us: f64,
}

/// One point of a tail CDF: the `pct`-th percentile of the flows' completion times.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct TailPoint {
    /// Percentile, 90–99.9.
    pub pct: f64,
    /// FCT at that percentile, µs.
    pub fct_us: f64,
}

/// The percentiles of [`single_packet_tail`]: 90 to 99 by halves, then 99.1 to 99.9 by
/// tenths (IRN §4.3's figure of single-packet messages' tail, SPEC E7).
pub fn tail_percentiles() -> impl Iterator<Item = f64> {
    (0..=18)
        .map(|i| 90.0 + f64::from(i) * 0.5)
        .chain((1..=9).map(|i| 99.0 + f64::from(i) * 0.1))
}

/// The tail CDF (90th to 99.9th percentile) of the completion times of the flows that fit in
/// one packet (`size ≤ mtu`) and completed successfully. Empty when there are none.
pub fn single_packet_tail(records: &[FlowRecord], mtu: u32) -> Vec<TailPoint> {
    let mut fct: Vec<f64> = records
        .iter()
        .filter(|r| r.flow.size <= u64::from(mtu))
        .filter(|r| r.status == Some(irn_transport::WcStatus::Success))
        .filter_map(|r| r.fct().map(|f| f.as_micros_f64()))
        .collect();
    if fct.is_empty() {
        return Vec::new();
    }
    fct.sort_by(f64::total_cmp);
    tail_percentiles()
        .map(|pct| TailPoint {
            pct,
            fct_us: percentile(&fct, pct),
        })
        .collect()
}

/// Builds the fields that come from the per-flow records.
pub fn summarize(records: &[FlowRecord]) -> (FlowStats, Vec<Bucket>, Option<IncastReport>) {
    let all = FlowStats::of(records.iter());
    let by_size = BUCKETS
        .iter()
        .map(|&(label, lo, hi)| {
            let stats = FlowStats::of(records.iter().filter(|r| (lo..=hi).contains(&r.flow.size)));
            Bucket {
                size: label.to_string(),
                flows: stats.flows,
                stats,
            }
        })
        .collect();
    let groups = records.iter().filter_map(|r| r.flow.group).max();
    let incast = groups.map(|g| {
        let mut rcts = Vec::new();
        for gi in 0..=g {
            let members: Vec<&FlowRecord> = records
                .iter()
                .filter(|r| r.flow.group == Some(gi))
                .collect();
            if members.iter().all(|r| r.end.is_some()) && !members.is_empty() {
                let start = members.iter().map(|r| r.flow.start).min();
                let end = members.iter().filter_map(|r| r.end).max();
                if let (Some(s), Some(e)) = (start, end) {
                    rcts.push((e - s).as_micros_f64());
                }
            }
        }
        IncastReport {
            requests: rcts.len(),
            avg_rct_us: if rcts.is_empty() {
                0.0
            } else {
                rcts.iter().sum::<f64>() / rcts.len() as f64
            },
            max_rct_us: rcts.iter().copied().fold(0.0, f64::max),
            background: Counted::of(FlowStats::of(
                records.iter().filter(|r| r.flow.group.is_none()),
            )),
        }
    });
    (all, by_size, incast)
}

/// Writes the per-flow CSV: `id,src,dst,bytes,start_us,fct_us,ideal_fct_us,slowdown,status`
/// (FCT and slowdown empty for unfinished flows).
pub fn write_csv(out: &mut dyn Write, records: &[FlowRecord]) -> std::io::Result<()> {
    writeln!(
        out,
        "id,src,dst,bytes,start_us,fct_us,ideal_fct_us,slowdown,status"
    )?;
    for (i, r) in records.iter().enumerate() {
        let start = r.flow.start.as_picos() as f64 / 1e6;
        let (fct, sd) = match (r.fct(), r.slowdown()) {
            (Some(f), Some(s)) => (format!("{:.3}", f.as_micros_f64()), format!("{s:.4}")),
            _ => (String::new(), String::new()),
        };
        let status = r
            .status
            .map_or_else(|| "UNFINISHED".to_string(), |s| s.to_string());
        writeln!(
            out,
            "{i},{},{},{},{start:.3},{fct},{:.3},{sd},{status}",
            r.flow.src,
            r.flow.dst,
            r.flow.size,
            r.ideal.as_micros_f64()
        )?;
    }
    Ok(())
}

/// Writes the monitor's samples as CSV: one row per (run, interval end, node, port,
/// priority) that moved or held bytes — what it did during the interval, and its queue at the
/// end (SPEC N9). `header` writes the column names first.
pub fn write_monitor_csv(
    out: &mut dyn Write,
    run: &str,
    rows: &[crate::net::MonitorRow],
    names: &[String],
    header: bool,
) -> std::io::Result<()> {
    if header {
        writeln!(
            out,
            "run,t_us,node,name,port,prio,tx_packets,tx_bytes,rx_packets,rx_bytes,pause_sent,\
             pause_received,paused_us,ingress_drops,egress_drops,queue_bytes"
        )?;
    }
    let run: String = run.chars().filter(|&c| c != ',' && c != '"').collect();
    for r in rows {
        let d = &r.delta;
        let name = names.get(r.node as usize).map_or("", String::as_str);
        writeln!(
            out,
            "{run},{:.3},{},{name},{},{},{},{},{},{},{},{},{:.3},{},{},{}",
            r.t_us,
            r.node,
            r.port,
            r.prio,
            d.tx_packets,
            d.tx_bytes,
            d.rx_packets,
            d.rx_bytes,
            d.pause_sent,
            d.pause_received,
            d.paused.as_micros_f64(),
            d.ingress_drops,
            d.egress_drops,
            r.queue_bytes
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 99.9), 100.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        let w: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&w, 99.9), 999.0);
        assert_eq!(percentile(&w, 99.0 + 9.0 * 0.1), 999.0);
    }

    #[test]
    fn the_single_packet_tail_reads_only_completed_single_packet_flows() {
        use crate::workload::Flow;
        use irn_transport::time::{Dur, Time};
        let rec = |size: u64, fct_us: u64, status: Option<irn_transport::WcStatus>| FlowRecord {
            flow: Flow {
                src: 0,
                dst: 1,
                size,
                start: Time::ZERO,
                group: None,
                probe: None,
                class: 0,
            },
            end: status.map(|_| Time::ZERO + Dur::from_micros(fct_us)),
            status,
            ideal: Dur::from_micros(1),
            intact: true,
        };
        let ok = Some(irn_transport::WcStatus::Success);
        // 1 000 single-packet flows taking 1..=1000 µs; a larger flow, a failed and an
        // unfinished one that must not count.
        let mut v: Vec<FlowRecord> = (1..=1000).map(|i| rec(1000, i, ok)).collect();
        v.push(rec(1025, 1_000_000, ok));
        v.push(rec(
            10,
            2_000_000,
            Some(irn_transport::WcStatus::RetryExcErr),
        ));
        v.push(rec(10, 0, None));
        let t = single_packet_tail(&v, 1024);
        assert_eq!(t.len(), tail_percentiles().count());
        assert_eq!((t[0].pct, t[0].fct_us), (90.0, 900.0));
        let last = t.last().expect("points");
        assert!(
            (last.pct - 99.9).abs() < 1e-9 && last.fct_us == 999.0,
            "{last:?}"
        );
        assert!(t
            .windows(2)
            .all(|w| w[0].pct < w[1].pct && w[0].fct_us <= w[1].fct_us));
        assert!(single_packet_tail(&v[1000..], 1024).is_empty());
    }

    #[test]
    fn unfinished_flows_count_at_the_time_they_had_run_and_failed_ones_not_at_all() {
        use crate::workload::Flow;
        use irn_transport::time::{Dur, Time};
        use irn_transport::WcStatus;
        let rec = |start_us: u64, fct_us: u64, status: Option<WcStatus>| FlowRecord {
            flow: Flow {
                src: 0,
                dst: 1,
                size: 1000,
                start: Time::ZERO + Dur::from_micros(start_us),
                group: None,
                probe: None,
                class: 0,
            },
            end: status.map(|_| Time::ZERO + Dur::from_micros(start_us + fct_us)),
            status,
            ideal: Dur::from_micros(10),
            intact: true,
        };
        let v = [
            rec(0, 20, Some(WcStatus::Success)),
            rec(0, 40, Some(WcStatus::Success)),
            rec(0, 500, Some(WcStatus::RetryExcErr)),
            // Unfinished, started at 100 µs: 900 µs run when the run stops at 1 ms.
            rec(100, 0, None),
        ];
        let done = FlowStats::of(v.iter());
        assert_eq!((done.flows, done.avg_fct_us), (2, 30.0));
        let all = FlowStats::with_unfinished(v.iter(), Time::ZERO + Dur::from_micros(1000));
        assert_eq!(all.flows, 3);
        assert!((all.avg_fct_us - (20.0 + 40.0 + 900.0) / 3.0).abs() < 1e-9);
        assert!((all.avg_slowdown - (2.0 + 4.0 + 90.0) / 3.0).abs() < 1e-9);
        assert_eq!(all.p99_fct_us, 900.0);
        // With nothing unfinished, the two agree.
        assert_eq!(
            FlowStats::with_unfinished(v[..3].iter(), Time::ZERO + Dur::from_micros(1000)),
            FlowStats::of(v[..3].iter())
        );
    }

    #[test]
    fn of_two_servers_the_one_not_answering_is_the_suspect() {
        // Server 1's agent is down: only server 0's probes exist, all to 1, all failed — the
        // same share for both. Then 1 (the target of the failures) is the suspect, whichever
        // number it has.
        for (live, dead) in [(0, 1), (1, 0)] {
            let probes: Vec<ProbeOutcome> = (0..5)
                .map(|_| ProbeOutcome {
                    src: live,
                    dst: dead,
                    level: crate::config::PingLevel::Tor,
                    result: Err("TIMEOUT".into()),
                })
                .collect();
            let r = pingmesh_summary(&probes, 0.0);
            let who: Vec<u32> = r.suspects.iter().map(|s| s.server).collect();
            assert_eq!(who, [dead], "{:?}", r.suspects);
        }
    }
}
