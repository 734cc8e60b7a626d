//! Running one simulation on several threads: the network cut into partitions, each with its
//! own event list, advanced in lock-step windows (conservative parallel discrete-event
//! simulation, Chandy & Misra 1979; synchronous windows as in Lubachevsky's "bounded lag",
//! CACM 1989).
//!
//! # Why the results do not depend on the number of threads
//!
//! A node's events can only be caused by another partition through a link, and a link takes
//! at least its propagation delay: the *lookahead* `L`, the shortest delay of a link between
//! two partitions. So if the earliest pending event anywhere is at `t`, every partition can
//! handle its events before `t + L` without waiting for the others: nothing another partition
//! does in that window can reach it before `t + L`. At the window's end the partitions swap
//! what they scheduled for each other (frames with their packet, pause frames, flow teardowns)
//! and the next window starts at the new earliest event.
//!
//! Within a partition, events run in (time, key) order, and the key is the scheduling node and
//! that node's own count of events (`net`): the same numbers whatever the partitioning. A
//! partition's events therefore run in the same order as they do in the whole network's single
//! list, every random draw comes from a per-node stream, and the two ends of a flow are set up
//! by their own hosts: one thread or several, the output is byte-identical (tested).
//!
//! Partitions follow the topology ([`Topology::partition`]): a fat-tree is cut between pods,
//! so that only links to core switches cross. Runs that carry payload bytes use one partition
//! (a requester reads its responder's buffer address from the flow's state).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use irn_transport::{Dur, Time};

use crate::config::SimConfig;
use crate::net::{FlowRecord, Msg, NetStats, Part, SimMemory};
use crate::topology::Topology;
use crate::workload::Flow;

/// A simulation: the partitions of the network and how to advance them together.
pub struct Simulation<M: SimMemory> {
    parts: Vec<Part<M>>,
    /// Per node, the partition that owns it.
    part_of: Arc<[u16]>,
    /// The shortest link delay between two partitions.
    lookahead: Dur,
    end: Time,
}

impl<M: SimMemory> std::fmt::Debug for Simulation<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("parts", &self.parts.len())
            .field("lookahead", &self.lookahead)
            .finish_non_exhaustive()
    }
}

impl<M: SimMemory> Simulation<M> {
    /// Sets up the network and the flows in `cfg.threads` partitions (one when payload bytes
    /// are carried, when the safety model needs the whole network
    /// ([`SimConfig::needs_one_partition`]), or when two partitions would share a link without
    /// delay); nothing runs yet.
    pub fn new(mut cfg: SimConfig, topo: Topology, flows: Vec<Flow>) -> Simulation<M> {
        // 802.3x PAUSE runs as one lossless class for every frame (`NetworkConfig::as_run`).
        cfg.network = cfg.network.as_run();
        let want = if M::HOLDS_BYTES || cfg.needs_one_partition() {
            1
        } else {
            cfg.threads.clamp(1, usize::from(u16::MAX))
        };
        let mut part_of: Arc<[u16]> = topo.partition(want).into();
        let mut lookahead = lookahead(&topo, &part_of);
        if lookahead == Dur::ZERO {
            part_of = vec![0; topo.nodes.len()].into();
            lookahead = Dur::from_picos(u64::MAX);
        }
        let n = part_of
            .iter()
            .copied()
            .max()
            .map_or(1, |m| usize::from(m) + 1);
        let parts = (0..n as u16)
            .map(|me| {
                Part::new(
                    cfg.clone(),
                    topo.clone(),
                    flows.clone(),
                    part_of.clone(),
                    me,
                )
            })
            .collect();
        Simulation {
            parts,
            part_of,
            lookahead,
            end: Time::ZERO,
        }
    }

    /// Partitions the network is cut into (threads the run uses).
    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// Runs to the end; `progress` is called now and then with the fraction of flows done.
    pub fn run(&mut self, mut progress: impl FnMut(f64)) {
        let total = self.parts[0].records().len().max(1);
        if self.parts.len() == 1 {
            let part = &mut self.parts[0];
            // Windows only to report progress.
            let mut next = part.next_time();
            while let Some(t) = next {
                part.run_until(t + Dur::from_micros(100));
                progress(part.done_flows() as f64 / total as f64);
                next = part.next_time();
            }
        } else {
            self.run_parallel(&mut progress, total);
        }
        // Debug builds audit the books once more at the end (`Part::run_until` audits every
        // 2^16 events): a run shorter than that is audited too.
        if cfg!(debug_assertions) {
            if let Err(e) = self.check_invariants() {
                panic!("at the end of the run: {e}");
            }
        }
        self.end = self.parts.iter().map(Part::now).max().unwrap_or(Time::ZERO);
        for p in &mut self.parts {
            p.finish(self.end);
        }
        progress(self.done_flows() as f64 / total as f64);
    }

    fn done_flows(&self) -> usize {
        self.parts.iter().map(Part::done_flows).sum()
    }

    /// One thread per partition (the calling thread runs the first and reports progress).
    fn run_parallel(&mut self, progress: &mut dyn FnMut(f64), total: usize) {
        let n = self.parts.len();
        let sync = Sync {
            barrier: Barrier::new(n),
            mail: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            next: [
                (0..n).map(|_| AtomicU64::new(u64::MAX)).collect(),
                (0..n).map(|_| AtomicU64::new(u64::MAX)).collect(),
            ],
            done: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
        };
        let lookahead = self.lookahead;
        let (first, rest) = self.parts.split_at_mut(1);
        std::thread::scope(|s| {
            for (i, part) in rest.iter_mut().enumerate() {
                let sync = &sync;
                s.spawn(move || drive(part, i + 1, sync, lookahead, &mut |_| {}));
            }
            drive(&mut first[0], 0, &sync, lookahead, &mut |done| {
                progress(done as f64 / total as f64)
            });
        });
    }

    /// The per-flow records, in flow order.
    pub fn records(&self) -> Vec<FlowRecord> {
        let mut out = self.parts[0].records().to_vec();
        if self.parts.len() > 1 {
            // Each flow's outcome is recorded where its requester lives.
            for (i, r) in out.iter_mut().enumerate() {
                let p = self.part_of[self.parts[0].requester(i) as usize];
                *r = self.parts[usize::from(p)].records()[i];
            }
        }
        out
    }

    /// Network totals.
    pub fn stats(&self) -> NetStats {
        let mut all = NetStats::default();
        for p in &self.parts {
            let s = p.stats();
            all.host_packets += s.host_packets;
            all.drops += s.drops;
            all.pause_frames += s.pause_frames;
            all.qp += s.qp;
            if all.class_qp.is_empty() {
                all.class_qp = s.class_qp;
                all.host_paused_us = s.host_paused_us;
            } else {
                for (a, b) in all.class_qp.iter_mut().zip(&s.class_qp) {
                    *a += *b;
                }
                // A host's NIC lives in one partition; the others' are zero.
                for (a, b) in all.host_paused_us.iter_mut().zip(&s.host_paused_us) {
                    for (x, y) in a.iter_mut().zip(b) {
                        *x += y;
                    }
                }
            }
            all.ports.extend(s.ports);
            all.headroom_overflow += s.headroom_overflow;
            all.max_in_flight = all.max_in_flight.max(s.max_in_flight);
            all.delivered_bytes += s.delivered_bytes;
            if self.parts.len() == 1 {
                // The safety model and the monitor run in one partition only.
                all.safety = s.safety;
                all.deadlock = s.deadlock;
                all.config_findings = s.config_findings;
                all.deadlock_at_end = s.deadlock_at_end;
                all.mtt_misses = s.mtt_misses;
                all.prio = s.prio;
                all.rows = s.rows;
                all.timeline = s.timeline;
                all.sent_to_failed_per_ms = s.sent_to_failed_per_ms;
            }
        }
        all.ports.sort_by_key(|&(node, port, _)| (node, port));
        all
    }

    /// Simulated time reached: the last event handled.
    pub fn now(&self) -> Time {
        self.end
    }

    /// Events handled.
    pub fn events(&self) -> u64 {
        self.parts.iter().map(Part::events).sum()
    }

    /// The BDP cap the queue pairs use (packets), if BDP-FC is on.
    pub fn bdp_cap(&self) -> Option<u32> {
        self.parts[0].bdp_cap()
    }

    /// Per-QP NIC state the transport adds to standard RoCE, in bits (SPEC E13).
    pub fn qp_state_bits(&self) -> u64 {
        self.parts[0].qp_state_bits()
    }

    /// The largest pause threshold of an input-queued switch port, in bytes.
    pub fn xoff_bytes(&self) -> u64 {
        self.parts[0].xoff_bytes()
    }

    /// The pause threshold of switch `node`'s input `port`: the buffer less the headroom of
    /// that port's own link (`None` for a host or a port that does not exist).
    pub fn port_xoff(&self, node: u32, port: u16) -> Option<u64> {
        self.parts[0].port_xoff(node, port)
    }

    /// The completion time of a `size`-byte Write from `src` to `dst` alone in the network
    /// (see `net`).
    pub fn ideal_fct(&self, src: u32, dst: u32, size: u64) -> Dur {
        self.parts[0].ideal_fct(src, dst, size)
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        self.parts[0].topology()
    }

    /// Checks every partition's switch and NIC bookkeeping.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.parts.iter().try_for_each(Part::check_invariants)
    }

    /// The state of flow `i`'s queue pairs, for debugging a stuck flow.
    pub fn debug_flow(&self, i: usize) -> String {
        self.parts.iter().map(|p| p.debug_flow(i)).collect()
    }
}

/// The shortest delay of a link between two partitions (`u64::MAX` ps when none crosses).
fn lookahead(topo: &Topology, part_of: &[u16]) -> Dur {
    let mut best = Dur::from_picos(u64::MAX);
    for (a, node) in topo.nodes.iter().enumerate() {
        for p in &node.ports {
            if part_of[a] != part_of[p.peer as usize] {
                best = best.min(p.delay);
            }
        }
    }
    best
}

/// What the partitions' threads share.
struct Sync {
    barrier: Barrier,
    /// Per partition, events the others scheduled for it in the window.
    mail: Vec<Mutex<Vec<Msg>>>,
    /// Per partition, the time of its next event (`u64::MAX`: none), in two copies used in
    /// alternate windows so that a fast thread never overwrites what a slow one still reads.
    next: [Vec<AtomicU64>; 2],
    /// Flows done in all partitions, for progress.
    done: AtomicUsize,
    /// A partition panicked (a broken invariant): every thread stops at the window's end,
    /// instead of waiting for it at the next barrier forever.
    failed: AtomicBool,
}

/// Runs partition `me` window by window until no partition has an event left before the end.
fn drive<M: SimMemory>(
    part: &mut Part<M>,
    me: usize,
    sync: &Sync,
    lookahead: Dur,
    progress: &mut dyn FnMut(usize),
) {
    let mut round = 0usize;
    // The mailbox's contents are swapped into this one each window, so that both keep their
    // capacity instead of one being allocated anew every window.
    let mut inbox: Vec<Msg> = Vec::new();
    let mut reported = 0usize;
    let mut start = earliest(part, me, sync, &mut round);
    let mut panicked = None;
    while let Some(t) = start {
        let limit = Time::from_picos(t.as_picos().saturating_add(lookahead.as_picos()));
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| part.run_until(limit))) {
            sync.failed.store(true, Ordering::Release);
            panicked = Some(p);
        }
        for m in part.take_outbox() {
            let to = usize::from(m.to);
            if let Ok(mut mail) = sync.mail[to].lock() {
                mail.push(m);
            }
        }
        let done = part.done_flows();
        sync.done.fetch_add(done - reported, Ordering::Relaxed);
        reported = done;
        sync.barrier.wait();
        if let Ok(mut mail) = sync.mail[me].lock() {
            std::mem::swap(&mut *mail, &mut inbox);
        }
        let taken = catch_unwind(AssertUnwindSafe(|| {
            for m in inbox.drain(..) {
                part.deliver(m);
            }
            // Every 64 windows is often enough for a progress bar.
            if me == 0 && round % 64 == 0 {
                progress(sync.done.load(Ordering::Relaxed));
            }
        }));
        if let Err(p) = taken {
            sync.failed.store(true, Ordering::Release);
            panicked = Some(p);
        }
        start = earliest(part, me, sync, &mut round);
        if sync.failed.load(Ordering::Acquire) {
            break;
        }
    }
    if let Some(p) = panicked {
        resume_unwind(p);
    }
}

/// Publishes this partition's next event time and returns the earliest of all partitions'
/// (`None`: the run is over). All threads call it together.
fn earliest<M: SimMemory>(
    part: &Part<M>,
    me: usize,
    sync: &Sync,
    round: &mut usize,
) -> Option<Time> {
    let board = &sync.next[*round % 2];
    *round += 1;
    let t = part.next_time().map_or(u64::MAX, |t| t.as_picos());
    board[me].store(t, Ordering::Release);
    sync.barrier.wait();
    let min = board
        .iter()
        .map(|a| a.load(Ordering::Acquire))
        .min()
        .unwrap_or(u64::MAX);
    (min != u64::MAX).then(|| Time::from_picos(min))
}
