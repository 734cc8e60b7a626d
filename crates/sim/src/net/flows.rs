//! The workload as the network runs it ([`Workload`]): each end of a flow is set up by an
//! event of its own host (buffer, queue pair brought to RTS, work request posted); the
//! requester's queue pair is destroyed when its work request completes, the responder's one
//! longest link delay later. The workload keeps each flow's record and, per end, where its
//! queue pair lives.

use super::fabric::Fabric;
use super::memory::SimMemory;
use super::nic::{first_psn, Finished, Nic};
use super::packet::{qpn, Ev, Events, NIL, REQ, RESP};
use crate::config::{FlowOp, SimConfig};
use crate::workload::Flow;
use irn_transport::rng::mix;
use irn_transport::{
    connect_qp, Dur, MrKeys, QpAttr, QpConfig, RecvWr, Remote, SendOp, SendWr, SgList, Sge, Time,
    WcStatus,
};
use irn_wire::Psn;

/// The host of end `end` ([`REQ`], [`RESP`]) of flow `f` under operation `op`: a Read's
/// requester is the destination of its data.
pub(super) fn end_host(op: FlowOp, f: &Flow, end: usize) -> u32 {
    if (end == REQ) != (op == FlowOp::Read) {
        f.src
    } else {
        f.dst
    }
}

/// What happened to one flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowRecord {
    /// The flow.
    pub flow: Flow,
    /// Completion time, if it completed.
    pub end: Option<Time>,
    /// Its status (success unless the transport gave up).
    pub status: Option<WcStatus>,
    /// Flow completion time in an empty network (see [`Simulation::ideal_fct`](crate::parallel::Simulation::ideal_fct)).
    pub ideal: Dur,
    /// Data intact at the destination (only checked when payload bytes are carried).
    pub intact: bool,
}

impl FlowRecord {
    /// The flow completion time.
    pub fn fct(&self) -> Option<Dur> {
        self.end.map(|e| e - self.flow.start)
    }
    /// FCT ÷ ideal FCT, at least 1: standard RoCE's multi-packet Writes carry the RETH in
    /// their first packet only and can finish ≈ 1.4 % under the ideal, which counts it in
    /// every packet (docs/SIMULATOR.md).
    pub fn slowdown(&self) -> Option<f64> {
        self.fct()
            .map(|f| (f.as_picos() as f64 / self.ideal.as_picos().max(1) as f64).max(1.0))
    }
}

/// A flow's ends that live here: per end ([`REQ`], [`RESP`]), its queue pair's slot at its
/// host ([`NIL`]: not set up yet, or destroyed) and its buffer's (address, keys).
#[derive(Debug, Clone, Copy)]
struct FlowState {
    slot: [u32; 2],
    buf: [(u64, MrKeys); 2],
}

impl FlowState {
    const NONE: FlowState = FlowState {
        slot: [NIL; 2],
        buf: [(0, MrKeys { lkey: 0, rkey: 0 }); 2],
    };
}

/// Scatter/gather entries covering `len` bytes at `addr` (an entry holds at most 2^32 − 1).
fn sg_list(addr: u64, len: u64, lkey: u32) -> SgList {
    const CHUNK: u64 = 1 << 30;
    let mut v = SgList::new();
    let mut off = 0;
    while off < len || (len == 0 && v.is_empty()) {
        let n = (len - off).min(CHUNK);
        v.push(Sge {
            addr: addr + off,
            len: n as u32,
            lkey,
        });
        off += n;
        if len == 0 {
            break;
        }
    }
    v
}

/// What every queue pair of the run shares (`setup.rs`).
#[derive(Debug)]
pub(super) struct QpSetup {
    pub(super) cfg: QpConfig,
    pub(super) attr: QpAttr,
    /// Packets that size the per-QP state of designs without a BDP cap (SPEC E13).
    pub(super) state_window: u32,
}

/// The flows of a run, their records, and where each end's queue pair lives.
#[derive(Debug)]
pub(super) struct Workload {
    pub(super) flows: Vec<Flow>,
    pub(super) records: Vec<FlowRecord>,
    states: Vec<FlowState>,
    /// Flow ends to set up, as (start, key, flow, end), in start order: flow starts are events
    /// of their own (one pending at a time) at the end's host.
    starts: Vec<(Time, u64, u32, u8)>,
    next_start: usize,
    /// From the requester's completion to the responder's teardown: the longest link delay,
    /// so that it is never shorter than a partition's lookahead.
    teardown: Dur,
    /// Flows whose requester completed here.
    pub(super) done: usize,
    /// Payload bytes of flows completed successfully.
    pub(super) delivered: u64,
    op: FlowOp,
    seed: u64,
}

impl Workload {
    /// The flows of a run whose ends at the hosts `mine` owns are set up here; `teardown`:
    /// the longest link delay. Schedules the first start.
    pub(super) fn new(
        cfg: &SimConfig,
        flows: Vec<Flow>,
        teardown: Dur,
        mine: impl Fn(u32) -> bool,
        q: &mut Events,
    ) -> Workload {
        let op = cfg.transport.op;
        let mut starts: Vec<(Time, u64, u32, u8)> = (0..flows.len() as u32)
            .flat_map(|i| {
                let f = flows[i as usize];
                [REQ, RESP].map(|end| {
                    mine(end_host(op, &f, end)).then_some((
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
        if let Some(&(at, key, ..)) = starts.first() {
            q.q.push_keyed(at, key, Ev::FlowStart);
        }
        Workload {
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
            done: 0,
            delivered: 0,
            op,
            seed: cfg.seed,
            flows,
        }
    }

    /// The host of end `end` of flow `f` ([`end_host`] under this run's operation).
    pub(super) fn end_host(&self, f: &Flow, end: usize) -> u32 {
        end_host(self.op, f, end)
    }

    /// The slot of the queue pair of end `end` of flow `i` at its host ([`NIL`]: none).
    #[inline]
    pub(super) fn slot(&self, i: u32, end: u8) -> u32 {
        self.states[i as usize].slot[usize::from(end)]
    }

    /// The next flow end to set up, as (flow, end); schedules the start after it.
    pub(super) fn next_start(&mut self, q: &mut Events) -> Option<(usize, usize)> {
        let &(_, _, flow, end) = self.starts.get(self.next_start)?;
        self.next_start += 1;
        if let Some(&(at, key, ..)) = self.starts.get(self.next_start) {
            q.q.push_keyed(at, key, Ev::FlowStart);
        }
        Some((flow as usize, usize::from(end)))
    }

    /// The seed of flow `i`'s source bytes (payload runs).
    fn fill_seed(&self, i: usize) -> u64 {
        mix(self.seed ^ ((i as u64) << 1))
    }

    /// Sets up end `end` of flow `i` at its host: its buffer and queue pair, connected to the
    /// other end's (whose QPN and buffer it knows without asking: see [`qpn`] and
    /// [`SimMemory::known_buffer`]); the requester posts the flow's work request.
    pub(super) fn start_end<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        nics: &mut [Nic<M>],
        qps: &[QpSetup],
        now: Time,
        (i, end): (usize, usize),
    ) {
        let f = self.flows[i];
        let host = self.end_host(&f, end);
        let peer = self.end_host(&f, 1 - end);
        let holds_source = host == f.src;
        let fill = (M::HOLDS_BYTES && holds_source).then(|| self.fill_seed(i));
        let buf = nics[host as usize].mem.flow_buffer(f.size, fill);
        let qps = &qps[usize::from(f.class)];
        let cfg = QpConfig {
            qpn: qpn(i as u32, end),
            ..qps.cfg.clone()
        };
        let slot = nics[host as usize].new_qp(now, cfg, (i as u32, f.class), end, peer);
        self.states[i].slot[end] = slot;
        self.states[i].buf[end] = buf;
        let attr = qps.attr;
        let psn = |x: u64| Psn::new((mix(x) & 0xff_ffff) as u32);
        let (p_req, p_resp) = (first_psn(self.seed, i), psn(!(self.seed ^ i as u64)));
        let (mine, theirs) = if end == REQ {
            (p_req, p_resp)
        } else {
            (p_resp, p_req)
        };
        let op = self.op;
        // The responder's buffer, which the requester's work request names.
        let remote = (end == REQ).then(|| {
            nics[peer as usize]
                .mem
                .known_buffer()
                .unwrap_or(self.states[i].buf[RESP])
        });
        let len = f.size;
        let Some(qp) = nics[host as usize].qp_mut(slot) else {
            if end == REQ {
                self.finish(fx, nics, now, i, WcStatus::LocQpOpErr);
            }
            return;
        };
        let mut setup_ok = connect_qp(qp, now, &attr, qpn(i as u32, 1 - end), mine, theirs).is_ok();
        if end == RESP && op == FlowOp::Send {
            setup_ok &= qp
                .post_recv(RecvWr {
                    wr_id: i as u64,
                    sg_list: sg_list(buf.0, len, buf.1.lkey),
                })
                .is_ok();
        }
        if let Some(remote) = remote {
            let remote = Remote {
                addr: remote.0,
                rkey: remote.1.rkey,
            };
            let posted = qp.post_send(SendWr {
                wr_id: i as u64,
                op: match op {
                    FlowOp::Write => SendOp::Write(remote),
                    FlowOp::Read => SendOp::Read(remote),
                    FlowOp::Send => SendOp::Send,
                },
                sg_list: sg_list(buf.0, len, buf.1.lkey),
                signaled: true,
                fence: false,
                solicited: false,
            });
            setup_ok &= posted.is_ok();
        }
        if !setup_ok {
            // Cannot happen with a valid configuration; reported, never hidden.
            if end == REQ {
                self.finish(fx, nics, now, i, WcStatus::LocQpOpErr);
            }
            return;
        }
        let done = nics[host as usize].touch(fx, now, slot);
        self.finished(fx, nics, now, done);
    }

    /// Finishes the flow a NIC reported complete, if any.
    #[inline]
    pub(super) fn finished<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        nics: &mut [Nic<M>],
        now: Time,
        done: Option<Finished>,
    ) {
        if let Some(d) = done {
            self.finish(fx, nics, now, d.flow as usize, d.status);
        }
    }

    /// The requester of flow `i` completed with `status`: record it, destroy the requester's
    /// queue pair, and have the responder's destroyed a teardown delay later.
    pub(super) fn finish<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        nics: &mut [Nic<M>],
        now: Time,
        i: usize,
        status: WcStatus,
    ) {
        let slot = std::mem::replace(&mut self.states[i].slot[REQ], NIL);
        if slot == NIL {
            return;
        }
        let f = self.flows[i];
        // Payload runs have one partition: the destination's memory is here.
        let intact = !(M::HOLDS_BYTES && status == WcStatus::Success) || {
            let end = if self.end_host(&f, REQ) == f.dst {
                REQ
            } else {
                RESP
            };
            nics[f.dst as usize]
                .mem
                .verify(self.states[i].buf[end].0, f.size, self.fill_seed(i))
        };
        if status == WcStatus::Success {
            self.delivered += f.size;
            fx.mon.delivered(f.size);
        }
        let r = &mut self.records[i];
        r.end = Some(now);
        r.status = Some(status);
        r.intact = intact;
        self.done += 1;
        let host = self.end_host(&f, REQ);
        nics[host as usize].destroy(slot, self.states[i].buf[REQ]);
        let resp_host = self.end_host(&f, RESP);
        fx.schedule(
            now + self.teardown,
            resp_host,
            Ev::FlowEnd {
                host: resp_host,
                flow: i as u32,
            },
        );
    }

    /// Destroys the responder of flow `i` at `nic` (if it was ever set up here).
    pub(super) fn end_responder<M: SimMemory>(&mut self, nic: &mut Nic<M>, i: usize) {
        let slot = std::mem::replace(&mut self.states[i].slot[RESP], NIL);
        if slot != NIL {
            nic.destroy(slot, self.states[i].buf[RESP]);
        }
    }

    /// The host of `nic` died: its queue pairs are destroyed, and the flows lose these ends.
    pub(super) fn lose_host<M: SimMemory>(&mut self, nic: &mut Nic<M>) {
        for (slot, flow, end) in nic.live() {
            let end = usize::from(end);
            if self.states[flow as usize].slot[end] == slot {
                self.states[flow as usize].slot[end] = NIL;
            }
            let buf = self.states[flow as usize].buf[end];
            nic.destroy(slot, buf);
        }
    }

    /// End `end`'s slot of flow `i`, for debugging.
    pub(super) fn end_slot(&self, i: usize, end: usize) -> Option<u32> {
        self.states.get(i).map(|s| s.slot[end])
    }
}
