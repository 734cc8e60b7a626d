//! Flows and their queue pairs: each end of a flow is set up by an event of its own host
//! (buffer, queue pair brought to RTS, work request posted); the queue pair's completions,
//! timer and place in its NIC's ready list are looked after after every input (`Part::touch`);
//! the requester's queue pair is destroyed when its work request completes, the responder's
//! one longest link delay later.

use super::memory::SimMemory;
use super::nic::Slot;
use super::packet::{Ev, Events, NIL};
use super::Part;
use crate::config::FlowOp;
use crate::workload::Flow;
use irn_transport::rng::mix;
use irn_transport::{
    connect_qp, Completion, Dur, MrKeys, QpConfig, QueuePair, RecvWr, Remote, SendOp, SendWr, Sge,
    Time, WcStatus,
};
use irn_wire::Psn;

/// The requester end of a flow.
pub(super) const REQ: usize = 0;
/// The responder end of a flow.
pub(super) const RESP: usize = 1;

/// The host of end `end` ([`REQ`], [`RESP`]) of flow `f` under operation `op`: a Read's
/// requester is the destination of its data.
pub(super) fn end_host(op: FlowOp, f: &Flow, end: usize) -> u32 {
    if (end == REQ) != (op == FlowOp::Read) {
        f.src
    } else {
        f.dst
    }
}

/// The QPN of end `end` of `flow`: a function of the flow, so that each end knows the other's
/// without asking (the two ends may be set up in different partitions at the same instant).
/// QPNs are 24 bits and 0 and 1 are special in InfiniBand; past 2^23 flows they repeat, which
/// is harmless (a NIC finds a packet's queue pair by its flow).
pub(super) fn qpn(flow: u32, end: usize) -> u32 {
    2 + ((2 * u64::from(flow) + end as u64) % ((1 << 24) - 2)) as u32
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
pub(super) struct FlowState {
    pub(super) slot: [u32; 2],
    pub(super) buf: [(u64, MrKeys); 2],
}

impl FlowState {
    pub(super) const NONE: FlowState = FlowState {
        slot: [NIL; 2],
        buf: [(0, MrKeys { lkey: 0, rkey: 0 }); 2],
    };
}

/// Scatter/gather entries covering `len` bytes at `addr` (an entry holds at most 2^32 − 1).
pub(super) fn sg_list(addr: u64, len: u64, lkey: u32) -> Vec<Sge> {
    pub(super) const CHUNK: u64 = 1 << 30;
    let mut v = Vec::with_capacity(1);
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

/// The first PSN of flow `i`'s requests (and of a Read's responses).
pub(super) fn first_psn(seed: u64, i: usize) -> Psn {
    Psn::new((mix(seed ^ i as u64) & 0xff_ffff) as u32)
}

impl<M: SimMemory> Part<M> {
    pub(super) fn new_qp(&mut self, now: Time, host: u32, flow: u32, end: usize, peer: u32) -> u32 {
        let nic = &mut self.nics[host as usize];
        let slot = match nic.free.pop() {
            Some(s) => s,
            None => {
                nic.slots.push(Slot {
                    qp: None,
                    gen: 0,
                    timer: None,
                    ready: false,
                    flow,
                    end: end as u8,
                    peer,
                    sent: 0,
                    flowlet: 0,
                    last_tx: Time::ZERO,
                });
                nic.ctrl.push(false);
                (nic.slots.len() - 1) as u32
            }
        };
        let cfg = QpConfig {
            qpn: qpn(flow, end),
            ..self.qp_cfg.clone()
        };
        let s = &mut nic.slots[slot as usize];
        // A configuration the queue pair refuses leaves the slot empty: the flow fails below.
        s.qp = QueuePair::new(now, cfg).ok();
        s.flow = flow;
        s.end = end as u8;
        s.peer = peer;
        s.timer = None;
        s.ready = false;
        s.sent = 0;
        s.flowlet = 0;
        s.last_tx = Time::ZERO;
        nic.ctrl[slot as usize] = false;
        slot
    }

    /// The seed of flow `i`'s source bytes (payload runs).
    pub(super) fn fill_seed(&self, i: usize) -> u64 {
        mix(self.cfg.seed ^ ((i as u64) << 1))
    }

    /// The host of end `end` of flow `f` ([`end_host`] under this run's operation).
    pub(super) fn end_host(&self, f: &Flow, end: usize) -> u32 {
        end_host(self.cfg.transport.op, f, end)
    }

    /// Sets up end `end` of flow `i` at its host: its buffer and queue pair, connected to the
    /// other end's (whose QPN and buffer it knows without asking: see [`qpn`] and
    /// [`SimMemory::known_buffer`]); the requester posts the flow's work request.
    pub(super) fn start_end(&mut self, now: Time, i: usize, end: usize) {
        let f = self.flows[i];
        let host = self.end_host(&f, end);
        let peer = self.end_host(&f, 1 - end);
        let holds_source = host == f.src;
        let fill = (M::HOLDS_BYTES && holds_source).then(|| self.fill_seed(i));
        let buf = self.nics[host as usize].mem.flow_buffer(f.size, fill);
        let slot = self.new_qp(now, host, i as u32, end, peer);
        self.states[i].slot[end] = slot;
        self.states[i].buf[end] = buf;
        let attr = self.qp_attr;
        let psn = |x: u64| Psn::new((mix(x) & 0xff_ffff) as u32);
        let (p_req, p_resp) = (
            first_psn(self.cfg.seed, i),
            psn(!(self.cfg.seed ^ i as u64)),
        );
        let (mine, theirs) = if end == REQ {
            (p_req, p_resp)
        } else {
            (p_resp, p_req)
        };
        let op = self.cfg.transport.op;
        // The responder's buffer, which the requester's work request names.
        let remote = (end == REQ).then(|| {
            self.nics[peer as usize]
                .mem
                .known_buffer()
                .unwrap_or(self.states[i].buf[RESP])
        });
        let len = f.size;
        let Some(qp) = self.nics[host as usize].slots[slot as usize].qp.as_mut() else {
            if end == REQ {
                self.finish_flow(now, i, WcStatus::LocQpOpErr);
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
                self.finish_flow(now, i, WcStatus::LocQpOpErr);
            }
            return;
        }
        self.touch(now, host, slot);
    }

    /// After anything happened to a queue pair: collect completions, re-arm its timer, and
    /// let its NIC send.
    pub(super) fn touch(&mut self, now: Time, host: u32, slot: u32) {
        let nic = &mut self.nics[host as usize];
        let s = &mut nic.slots[slot as usize];
        let Some(qp) = s.qp.as_mut() else { return };
        let flow = s.flow as usize;
        let mut finished: Option<Completion> = None;
        while let Some(c) = qp.poll_completion() {
            if c.wr_id == flow as u64 && usize::from(s.end) == REQ {
                finished = Some(c);
            }
        }
        if let Some(c) = finished {
            self.finish_flow(now, flow, c.status);
            return;
        }
        nic.ctrl[slot as usize] = qp.control_ready();
        Self::arm_timer(&mut self.q, now, s, host, slot);
        // Only a queue pair that may have something to send joins the NIC's list and wakes
        // it: an ACK that leaves the requester nothing new to send (all sent, or the BDP cap
        // still full) costs no poll and no wake-up.
        if s.qp.as_ref().is_some_and(QueuePair::may_transmit) {
            if !s.ready {
                s.ready = true;
                nic.ready.push_back(slot);
            }
            self.kick_nic(now, host);
        }
    }

    /// Makes sure an event wakes the queue pair at its next deadline (at most one pending
    /// event per queue pair, unless its deadline moved earlier). A deadline already past — a
    /// pacing slot that ended while the queue pair waited for its turn — is due now: the event
    /// list would run it now anyway, and the handler only accepts the event its slot recorded.
    pub(super) fn arm_timer(q: &mut Events, now: Time, s: &mut Slot, host: u32, slot: u32) {
        if let Some(d) = s.qp.as_ref().and_then(QueuePair::poll_timeout) {
            let d = d.max(now);
            if s.timer.is_none_or(|t| d < t) {
                s.timer = Some(d);
                q.push(
                    d,
                    Ev::QpTimer {
                        host,
                        slot,
                        gen: s.gen,
                    },
                );
            }
        }
    }

    /// The requester of flow `i` completed with `status`: record it, destroy the requester's
    /// queue pair, and have the responder's destroyed a teardown delay later.
    pub(super) fn finish_flow(&mut self, now: Time, i: usize, status: WcStatus) {
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
            self.nics[f.dst as usize].mem.verify(
                self.states[i].buf[end].0,
                f.size,
                self.fill_seed(i),
            )
        };
        if status == WcStatus::Success {
            self.delivered += f.size;
            self.mon.delivered += f.size;
        }
        let r = &mut self.records[i];
        r.end = Some(now);
        r.status = Some(status);
        r.intact = intact;
        self.done_flows += 1;
        let host = self.end_host(&f, REQ);
        self.destroy(host, slot, self.states[i].buf[REQ]);
        let resp_host = self.end_host(&f, RESP);
        self.schedule(
            now + self.teardown,
            resp_host,
            Ev::FlowEnd {
                host: resp_host,
                flow: i as u32,
            },
        );
    }

    /// Destroys the responder of flow `i` (if it was ever set up here).
    pub(super) fn end_responder(&mut self, host: u32, i: usize) {
        let slot = std::mem::replace(&mut self.states[i].slot[RESP], NIL);
        if slot != NIL {
            self.destroy(host, slot, self.states[i].buf[RESP]);
        }
    }

    /// Destroys the queue pair in `slot` of `host` (its counters go to the totals) and releases
    /// its buffer.
    pub(super) fn destroy(&mut self, host: u32, slot: u32, buf: (u64, MrKeys)) {
        let nic = &mut self.nics[host as usize];
        let s = &mut nic.slots[slot as usize];
        if let Some(qp) = s.qp.take() {
            self.totals += *qp.counters();
            // Its entries stay on the NIC's list until a look drops them. (Counted whether or
            // not the slot says it is listed: a reused slot can leave an entry behind.)
            nic.dead_ready += 1;
        }
        nic.ctrl[slot as usize] = false;
        s.gen = s.gen.wrapping_add(1);
        s.timer = None;
        nic.free.push(slot);
        nic.mem.release(buf.0, buf.1);
    }
}
