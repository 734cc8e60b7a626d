//! NICs: the hosts' ports, which run irn-transport queue pairs. A [`Nic`] owns its queue
//! pairs (a table of slots), its transmit scheduling, the pause state its switch imposes, its
//! memory, and — when the run models one — its receive pipeline ([`RxPipeline`]) with its
//! buffer, translation cache and watchdog.
//!
//! Sending: a NIC pulls packets from its queue pairs when its link is free (so it never
//! queues). Its queue pairs are listed in transmit lanes, one per (data, control) pair of
//! priorities its traffic classes send at (`[[traffic]]`; one lane without them); the lanes
//! share the link in strict priority or by DWRR (`network.scheduler`, `sched.rs`), and within
//! a lane the queue pairs with something to send take turns, one packet each. ACK/NAK/CNP
//! travel at the control priority when configured and still leave while the data priority is
//! paused by PFC. Receiving: a frame reaches its queue pair on arrival, unless the
//! receive pipeline has a rate (`[nic] rx_gbps`, SPEC N6's slow receiver): then frames wait in
//! a receive buffer drained at that rate, which pauses the switch (lossless) or drops (lossy)
//! as a switch ingress does.
//!
//! A NIC is driven alone with a [`Fabric`]: [`Nic::receive`] or [`Nic::buffer`] (a frame
//! arrived), [`Nic::tx_done`] (its link is free), [`Nic::pfc`] (a pause frame arrived),
//! [`Nic::rx_done`] (its pipeline finished a frame), [`Nic::timer`] (a queue pair's timer).

use std::collections::VecDeque;

use irn_transport::rng::mix;
use irn_transport::{Counters, Dur, MrKeys, QpConfig, QueuePair, Time, WcStatus};
use irn_wire::Psn;

use super::fabric::Fabric;
use super::memory::SimMemory;
use super::monitor::PortStats;
use super::mtt::Mtt;
use super::packet::{qpn, Ev, Events, Hop, Meta, Packet, FRAME_OVERHEAD, NIL, REQ, VLAN_TAG_LEN};
use super::pfc::{pause_time, Ingress, Pause, PauseClock, ALL_PRIORITIES};
use super::ready::ReadyList;
use super::sched::{Dwrr, Weights};
use crate::config::{us, Ecmp, Scheduler, SimConfig};
use crate::topology::Port;
use crate::workload::Flow;

/// A queue pair's place in its NIC.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) qp: Option<QueuePair>,
    gen: u32,
    /// Time of the timer event in the queue, if one is.
    timer: Option<Time>,
    pub(super) flow: u32,
    /// Which end of the flow: [`REQ`] or [`RESP`](super::packet::RESP).
    pub(super) end: u8,
    /// The host of the queue pair at the other end (kept here: the slot is read for every
    /// packet sent, the flow's state is not).
    peer: u32,
    /// The ECMP hash of the queue pair's 5-tuple: its host, the peer's, and both QPNs (the
    /// UDP source port a RoCE NIC derives from them), computed once per queue pair.
    flow_hash: u64,
    /// Packets sent (packet spraying salts each packet's ECMP hash with it).
    sent: u32,
    /// Flowlet number (`ecmp = "flowlet"`) and when the queue pair last sent.
    flowlet: u32,
    last_tx: Time,
    /// Its flow's traffic class (`Flow::class`), which marks its packets.
    class: u8,
    /// The transmit lane it is listed in (its class's).
    lane: u8,
}

/// How one traffic class's packets leave a NIC: the DSCPs and priorities of its data and
/// control packets, the headers its transport model adds, and the transmit lane it joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Marks {
    pub(super) data_dscp: u8,
    pub(super) ctrl_dscp: u8,
    pub(super) data_prio: u8,
    pub(super) ctrl_prio: u8,
    /// Header bytes the TCP model adds to (data, control) packets (zero otherwise).
    pub(super) extra_headers: [u32; 2],
    /// Its lane ([`Tagging::lanes`]).
    pub(super) lane: u8,
}

/// How a NIC marks, schedules and spreads what it sends: each traffic class's [`Marks`], the
/// transmit lanes and how they share the link, the 802.1Q tag, the ECMP granularity.
#[derive(Debug, Clone)]
pub(super) struct Tagging {
    /// Per traffic class.
    pub(super) marks: Vec<Marks>,
    /// The lanes, as their (data, control) priorities, highest data priority first: one per
    /// pair of priorities the classes send at, each a round-robin list of queue pairs paused
    /// and resumed by its priorities (a NIC's per-traffic-class transmit queues).
    pub(super) lanes: Vec<(u8, u8)>,
    /// How the lanes share the link (`network.scheduler`): their weights, in lane order.
    pub(super) weights: Weights,
    /// Frames carry an 802.1Q tag with the priority as PCP.
    pub(super) vlan: bool,
    pub(super) ecmp: Ecmp,
    pub(super) flowlet_gap: Dur,
}

/// A transmit lane: the queue pairs of the classes that send at one (data, control) pair of
/// priorities.
#[derive(Debug)]
struct Lane {
    data_prio: u8,
    ctrl_prio: u8,
    /// Queue pairs that may have something to send, in round-robin order.
    ready: ReadyList,
    /// No queue pair on `ready` has a control packet: the last look found none, and none has
    /// had an input (a packet or a timeout — the only things that make control packets)
    /// since. While the data priority is paused, looking again would only rotate the list.
    ctrl_idle: bool,
    /// At most this many entries of `ready` name a destroyed queue pair (0: none).
    dead_ready: u32,
}

/// The transmit side's scheduling state.
#[derive(Debug)]
struct Tx {
    /// Its lanes, in [`Tagging::lanes`]' order.
    lanes: Vec<Lane>,
    /// How the lanes share the link.
    weights: Weights,
    dwrr: Dwrr,
    busy_until: Time,
    /// A `TxDone` event is pending.
    wake: bool,
    /// Per slot: its queue pair's [`QueuePair::control_ready`], as of its last input or
    /// poll. This and the two flags below are kept apart from the slots, which hold whole
    /// queue pairs (1.6 KB each), so that a NIC walking its list scans bytes, not queue pairs:
    /// a paused NIC with hundreds of queue pairs listed would otherwise miss the cache on
    /// each of them for every control packet it sends.
    ctrl: Vec<bool>,
    /// Per slot: it holds a queue pair.
    live: Vec<bool>,
    /// Per slot: it is on its lane's `ready`.
    listed: Vec<bool>,
}

impl Tx {
    /// Whether some lane lists a queue pair.
    fn any_ready(&self) -> bool {
        self.lanes.iter().any(|l| !l.ready.is_empty())
    }
}

/// A requester's work request completed: the flow is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Finished {
    pub(super) flow: u32,
    pub(super) status: WcStatus,
}

/// A NIC.
#[derive(Debug)]
pub(super) struct Nic<M> {
    host: u32,
    /// The link it sends on (its copy of the topology's).
    link: Port,
    pub(super) mem: M,
    slots: Vec<Slot>,
    /// Per lane, its free slots: a slot keeps its lane for life, because a destroyed queue
    /// pair's entry may linger on its lane's list until a look drops it, and must not then
    /// name a queue pair of another lane.
    free: Vec<Vec<u32>>,
    tx: Tx,
    /// Per priority: paused by the switch.
    paused: [bool; 8],
    paused_since: [Time; 8],
    /// When the pause received for each priority runs out, and when the receive buffer
    /// refreshes the pause it sent for each class.
    clock: PauseClock,
    pub(super) stats: PortStats,
    /// The receive pipeline, when the run models one (a rate, a stall fault, a translation
    /// cache); without it a frame reaches its queue pair on arrival.
    rx: Option<Box<RxPipeline>>,
    /// Its link is up (a host-down fault takes it down).
    up: bool,
    tag: Tagging,
    /// Its classes' marks as configured, kept while a `nic-dscp` drift of its traffic
    /// configuration has replaced their data DSCP in `tag` (each class stays in its lane).
    configured: Option<Box<[Marks]>>,
    /// Summed counters of its destroyed queue pairs.
    pub(super) retired: Counters,
    /// The same per traffic class, when the run has more than one.
    pub(super) retired_by_class: Vec<Counters>,
    /// Per priority: how long it was paused.
    pub(super) paused_by_prio: [Dur; 8],
    /// The most packets any of its queue pairs had in flight (requests or responses).
    pub(super) max_in_flight: u32,
}

/// A frame in a NIC's receive buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct RxFrame {
    pub(super) pkt: u32,
    pub(super) hop: Hop,
    class: u8,
}

/// A NIC's receive pipeline (SPEC N6; seed 001 §4.3–§4.4): frames wait in a receive buffer
/// drained at the pipeline's rate, plus what it owes for reorder-buffer traffic over PCIe
/// (seed 002) and translation-cache misses; a lossless class pauses the switch above its
/// threshold. A fault can stop it; its watchdog stops the NIC from pausing for good once it
/// has not moved for `nic_watchdog_ms` while pausing.
#[derive(Debug)]
pub(super) struct RxPipeline {
    /// Frames in arrival order (the first is being processed).
    frames: VecDeque<RxFrame>,
    /// The buffer's bytes per class, and the pauses the NIC has sent its switch.
    held: Ingress,
    /// Pipeline time owed to reorder-buffer traffic over PCIe (T8(a)), charged to the next
    /// frame the pipeline starts.
    debt: Dur,
    /// The share of the buffer a lossless class may hold before the NIC pauses its switch.
    xoff: u64,
    buffer: u64,
    resume_gap: u64,
    /// The pipeline's rate in bits per second (`None`: never the bottleneck).
    rate: Option<u64>,
    pcie_bps: u64,
    /// Stopped by a fault.
    stalled: bool,
    /// The last time it finished a frame or was empty.
    progress: Time,
    /// The watchdog fired: the NIC no longer pauses.
    pfc_off: bool,
    /// The translation cache, when modelled.
    mtt: Option<MttModel>,
}

/// The translation cache and what a miss costs (`mtt.rs`).
#[derive(Debug)]
struct MttModel {
    cache: Mtt,
    miss: Dur,
    page_bytes: u64,
    mtu: u64,
    seed: u64,
}

impl RxPipeline {
    /// The priority the pause frames of class `c` name: the class's, or every priority when
    /// the NIC's link runs 802.3x PAUSE.
    fn pause_prio<M: SimMemory>(&self, fx: &Fabric<M>, c: usize) -> u8 {
        if self.held.link_wide() {
            ALL_PRIORITIES
        } else {
            fx.classes.class_priority(c)
        }
    }

    /// The pipeline's buffer pauses the whole link: 802.3x PAUSE (`network.pause_hosts`).
    pub(super) fn pause_link(mut self) -> RxPipeline {
        self.held = Ingress::PAUSE;
        self
    }

    /// The pipeline a run's `[nic]` settings describe, with XOFF threshold `xoff`.
    pub(super) fn new(cfg: &SimConfig, xoff: u64) -> RxPipeline {
        RxPipeline {
            frames: VecDeque::new(),
            held: Ingress::EMPTY,
            debt: Dur::ZERO,
            xoff,
            buffer: cfg.nic.rx_buffer_bytes,
            resume_gap: cfg.switch.pfc_resume_gap_bytes,
            rate: cfg.nic.rx_gbps.map(|g| (g * 1e9).round() as u64),
            pcie_bps: (cfg.nic.pcie_gbps * 1e9).round() as u64,
            stalled: false,
            progress: Time::ZERO,
            pfc_off: false,
            mtt: (cfg.nic.mtt_miss_ns > 0.0).then(|| MttModel {
                cache: Mtt::new(cfg.nic.mtt_entries as usize),
                miss: Dur::from_picos((cfg.nic.mtt_miss_ns * 1000.0).round() as u64),
                page_bytes: cfg.nic.page_bytes,
                mtu: u64::from(cfg.network.mtu),
                seed: cfg.seed,
            }),
        }
    }
}

/// The first PSN of flow `i`'s requests (and of a Read's responses).
pub(super) fn first_psn(seed: u64, i: usize) -> Psn {
    Psn::new((mix(seed ^ i as u64) & 0xff_ffff) as u32)
}

/// Makes sure an event wakes the queue pair at its next deadline (at most one pending event
/// per queue pair, unless its deadline moved earlier). A deadline already past — a pacing slot
/// that ended while the queue pair waited for its turn — is due now: the event list would run
/// it now anyway, and the handler only accepts the event its slot recorded.
fn arm_timer(q: &mut Events, now: Time, s: &mut Slot, host: u32, slot: u32) {
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

/// Whether [`arm_timer`] would leave `s` as it is: no deadline, or an event pending at or
/// before it.
fn timer_stands(s: &Slot, now: Time) -> bool {
    match s.qp.as_ref().and_then(QueuePair::poll_timeout) {
        None => true,
        Some(d) => s.timer.is_some_and(|t| t <= d.max(now)),
    }
}

impl<M: SimMemory> Nic<M> {
    /// The NIC of `host`, sending on `link`, with memory `mem`, marking its frames as `tag`
    /// says; `rx`: its receive pipeline, if the run models one.
    pub(super) fn new(
        host: u32,
        link: Port,
        mem: M,
        tag: &Tagging,
        rx: Option<RxPipeline>,
    ) -> Nic<M> {
        Nic {
            host,
            link,
            mem,
            slots: Vec::new(),
            free: vec![Vec::new(); tag.lanes.len()],
            tx: Tx {
                lanes: tag
                    .lanes
                    .iter()
                    .map(|&(data_prio, ctrl_prio)| Lane {
                        data_prio,
                        ctrl_prio,
                        ready: ReadyList::default(),
                        ctrl_idle: false,
                        dead_ready: 0,
                    })
                    .collect(),
                weights: tag.weights,
                dwrr: Dwrr::default(),
                busy_until: Time::ZERO,
                wake: false,
                ctrl: Vec::new(),
                live: Vec::new(),
                listed: Vec::new(),
            },
            paused: [false; 8],
            paused_since: [Time::ZERO; 8],
            clock: PauseClock::default(),
            stats: PortStats::default(),
            rx: rx.map(Box::new),
            up: true,
            tag: tag.clone(),
            configured: None,
            retired: Counters::default(),
            retired_by_class: if tag.marks.len() > 1 {
                vec![Counters::default(); tag.marks.len()]
            } else {
                Vec::new()
            },
            paused_by_prio: [Dur::ZERO; 8],
            max_in_flight: 0,
        }
    }

    /// Whether its link is up.
    pub(super) fn is_up(&self) -> bool {
        self.up
    }

    /// Sends its data with DSCP `dscp` — of priority `prio` — instead of its classes' own (a
    /// configuration drift), or with their own again (`None`).
    pub(super) fn set_dscp_drift(&mut self, drift: Option<(u8, u8)>) {
        if let Some(marks) = self.configured.take() {
            self.tag.marks = marks.into_vec();
        }
        if let Some((dscp, prio)) = drift {
            self.configured = Some(self.tag.marks.clone().into_boxed_slice());
            for m in &mut self.tag.marks {
                m.data_dscp = dscp;
                m.data_prio = prio;
            }
        }
    }

    /// The DSCP each traffic class's data leaves with.
    pub(super) fn data_dscps(&self) -> Vec<u8> {
        self.tag.marks.iter().map(|m| m.data_dscp).collect()
    }

    /// Whether it buffers received frames in a pipeline.
    #[inline]
    pub(super) fn has_pipeline(&self) -> bool {
        self.rx.is_some()
    }

    /// The queue pair in `slot`, if live.
    pub(super) fn qp_mut(&mut self, slot: u32) -> Option<&mut QueuePair> {
        self.slots
            .get_mut(slot as usize)
            .and_then(|s| s.qp.as_mut())
    }

    /// Lets the NIC send now if its link is free, or once it is.
    fn kick(&mut self, fx: &mut Fabric<M>, now: Time) {
        if self.tx.wake {
            return;
        }
        if now >= self.tx.busy_until {
            self.send(fx, now);
        } else {
            self.tx.wake = true;
            fx.q.push(
                self.tx.busy_until,
                Ev::TxDone {
                    node: self.host,
                    port: 0,
                },
            );
        }
    }

    /// Its link finished a frame.
    pub(super) fn tx_done(&mut self, fx: &mut Fabric<M>, now: Time) {
        self.tx.wake = false;
        self.send(fx, now);
    }

    /// Its link is free: sends the next frame, from the lane the scheduler picks among those
    /// that may send (strict priority, or DWRR by `network.dwrr_weights`).
    fn send(&mut self, fx: &mut Fabric<M>, now: Time) {
        if now < self.tx.busy_until {
            return;
        }
        if self.tx.lanes.len() == 1 {
            self.send_lane(fx, now, 0);
            return;
        }
        // Lanes asked this time that had nothing they could send.
        let mut tried = 0u8;
        loop {
            let mut ready = 0u8;
            for (l, lane) in self.tx.lanes.iter().enumerate() {
                let data_paused = self.paused[usize::from(lane.data_prio)];
                let ctrl_paused = self.paused[usize::from(lane.ctrl_prio)];
                let separate = lane.ctrl_prio != lane.data_prio;
                let blocked = data_paused
                    && (!separate || ctrl_paused || lane.ctrl_idle)
                    && lane.dead_ready == 0;
                if tried & (1 << l) == 0 && !lane.ready.is_empty() && !blocked {
                    ready |= 1 << l;
                }
            }
            let Some(l) = self.tx.dwrr.pick(&self.tx.weights, ready) else {
                return;
            };
            match self.send_lane(fx, now, l) {
                Some(wire) => {
                    self.tx.dwrr.charge(l, wire);
                    return;
                }
                None => tried |= 1 << l,
            }
        }
    }

    /// Sends the next frame of lane `l`'s queue pairs, round-robin; returns its wire bytes.
    fn send_lane(&mut self, fx: &mut Fabric<M>, now: Time, l: usize) -> Option<u32> {
        let (vlan, ecmp, flowlet_gap) = (self.tag.vlan, self.tag.ecmp, self.tag.flowlet_gap);
        let Tx {
            lanes,
            ctrl: ctrl_flags,
            live,
            listed,
            ..
        } = &mut self.tx;
        let lane = &mut lanes[l];
        let data_paused = self.paused[usize::from(lane.data_prio)];
        let ctrl_paused = self.paused[usize::from(lane.ctrl_prio)];
        let separate = lane.ctrl_prio != lane.data_prio;
        let host = self.host;
        // With the data priority paused, a look at the list sends a control packet or does
        // nothing but rotate it once round (the same order again) and drop the destroyed queue
        // pairs from it. When it can send nothing — control paused too, or sharing the data
        // priority, or no queue pair with a control packet — do only the dropping, and only if
        // there is any: a NIC paused for long with thousands of queue pairs on its list would
        // otherwise spend its time asking each of them, every time it may send.
        if data_paused && (!separate || ctrl_paused || lane.ctrl_idle) {
            if lane.dead_ready > 0 {
                lane.ready.retain(|&slot| {
                    let l = live[slot as usize];
                    if !l {
                        listed[slot as usize] = false;
                    }
                    l
                });
                lane.dead_ready = 0;
            }
            return None;
        }
        let mut tries = lane.ready.len();
        if data_paused && lane.dead_ready == 0 {
            // Only a control packet can go, and the loop below would pass every queue pair
            // before the first that has one to the back of the list, in order: rotate there
            // at once (the flags say where, without touching a queue pair).
            match lane.ready.first_flagged(ctrl_flags) {
                Some(pos) => {
                    lane.ready.rotate_left(pos);
                    tries -= pos;
                }
                None => {
                    lane.ctrl_idle = true;
                    return None;
                }
            }
        }
        while tries > 0 {
            tries -= 1;
            let Some(slot) = lane.ready.pop_front() else {
                break;
            };
            let i = slot as usize;
            if !live[i] {
                listed[i] = false;
                continue;
            }
            // With the data priority paused only a control packet can go, and only a queue
            // pair whose flag says it has one is asked (exactly when it would answer); the
            // others are passed over without touching them.
            let sent = if data_paused {
                // The flag first: a queue pair without one is passed over without loading
                // its slot (a cache miss each, where a paused NIC walks thousands).
                if separate && !ctrl_paused && ctrl_flags[i] {
                    match self.slots[i].qp.as_mut() {
                        Some(qp) => {
                            qp.poll_control_into(&self.mem, &mut fx.scratch, &mut fx.headers)
                        }
                        None => false,
                    }
                } else {
                    false
                }
            } else {
                match self.slots[i].qp.as_mut() {
                    Some(qp) if !(separate && ctrl_paused && qp.has_control()) => {
                        qp.poll_transmit_into(now, &self.mem, &mut fx.scratch, &mut fx.headers)
                    }
                    _ => false,
                }
            };
            // Built in place: the headers are copied once, into the packet table.
            if !sent {
                // A poll that finds nothing moves no deadline earlier either.
                debug_assert!(
                    timer_stands(&self.slots[i], now),
                    "an empty poll moved a deadline"
                );
                if data_paused || ctrl_paused {
                    // It may still have data once the pause ends.
                    lane.ready.push_back(slot);
                } else {
                    listed[i] = false;
                }
                continue;
            }
            let t = &fx.headers;
            let s = &mut self.slots[i];
            let Some(qp) = s.qp.as_mut() else {
                continue;
            };
            let ctrl = qp.control_ready();
            if ctrl && !ctrl_flags[i] {
                lane.ready.flag_raised(slot);
            }
            ctrl_flags[i] = ctrl;
            // Round-robin: back of the list if it may have more; otherwise out of it (a
            // receiver that just sent its ACK usually has nothing more) until an input
            // gives it something, so that the NIC does not wake up for it.
            if qp.may_transmit() {
                lane.ready.push_back(slot);
            } else {
                listed[i] = false;
            }
            self.max_in_flight = self
                .max_in_flight
                .max(qp.in_flight())
                .max(qp.responses_in_flight());
            // Sending data may have started a timer. A control packet moves no deadline
            // earlier (`QueuePair`'s driver contract, at `poll_timeout`): the event armed
            // after the queue pair's last input stands, and half of IRN's packets are ACKs.
            let control = t.ib.bth.opcode.is_control();
            if control {
                debug_assert!(timer_stands(s, now), "a control packet moved a deadline");
            } else {
                arm_timer(&mut fx.q, now, s, host, slot);
            }
            debug_assert_eq!(t.ib.bth.dest_qpn, qpn(s.flow, 1 - usize::from(s.end)));
            let peer_host = s.peer;
            let (flow, end) = (s.flow, usize::from(s.end));
            let marks = &self.tag.marks[usize::from(s.class)];
            let (dscp, prio) = if control {
                (marks.ctrl_dscp, marks.ctrl_prio)
            } else {
                (marks.data_dscp, marks.data_prio)
            };
            // A tagged frame carries the priority of its DSCP as its PCP (IEEE 802.1Q).
            let pcp = vlan.then_some(prio);
            let tag_len = if pcp.is_some() { VLAN_TAG_LEN } else { 0 };
            // At most a 4096-byte MTU (validated) plus headers: it fits.
            let extra = marks.extra_headers[usize::from(control)];
            let wire = u16::try_from(t.ib.buffer_len() as u32 + FRAME_OVERHEAD + tag_len + extra)
                .unwrap_or(u16::MAX);
            let flow_hash = s.flow_hash;
            // ECMP granularity: the flow's hash, or salted per packet (spraying) or per
            // flowlet, so each switch's pick changes with it.
            let salt = match ecmp {
                Ecmp::Flow => None,
                Ecmp::Packet => Some(s.sent),
                Ecmp::Flowlet => {
                    if s.sent > 0 && now.since(s.last_tx) > flowlet_gap {
                        s.flowlet += 1;
                    }
                    Some(s.flowlet)
                }
            };
            s.sent = s.sent.wrapping_add(1);
            s.last_tx = now;
            let hash = match salt {
                None => flow_hash as u32,
                Some(k) => mix(flow_hash ^ (u64::from(k) << 32) ^ 0x5eed) as u32,
            };
            // The QP may have written bytes into the scratch buffer even when the memory
            // holds none: keep the allocation for next time.
            let payload = if M::HOLDS_BYTES {
                std::mem::take(&mut fx.scratch)
            } else {
                Vec::new()
            };
            let hop = Hop::new(peer_host, hash, wire, dscp, t.ecn, pcp);
            let to = (1 - end) as u8;
            let pkt = fx
                .pool
                .alloc_headers(&t.ib, flow, to, payload, Meta { hop, next: NIL });
            fx.mon.tx(host, 0, fx.classes.class(prio), u64::from(wire));
            fx.failed.sent(now, peer_host, wire);
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += u64::from(wire);
            // Look again when the link is free if some queue pair may have more; otherwise
            // the next one to become ready kicks the NIC.
            let more = self.tx.any_ready();
            let done = fx.occupy(now, host, 0, &self.link, u64::from(wire), more);
            fx.propagate(done, &self.link, pkt, hop);
            self.tx.busy_until = done;
            self.tx.wake = more;
            return Some(u32::from(wire));
        }
        // A whole round without a packet: every destroyed queue pair has left the list, and
        // while data is paused, none has a control packet either.
        lane.dead_ready = 0;
        if data_paused {
            lane.ctrl_idle = true;
        }
        None
    }

    /// A frame reaches the queue pair in `slot` ([`NIL`]: the end is gone, or not set up
    /// yet, and the frame is discarded). Returns the flow, if its requester completed.
    pub(super) fn receive(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        slot: u32,
        pkt: u32,
        hop: Hop,
    ) -> Option<Finished> {
        let ecn = hop.ecn();
        let c = fx.classes.class(fx.classes.priority(&hop));
        fx.mon.rx(self.host, 0, c, u64::from(hop.wire));
        let p = &fx.pool.packets[pkt as usize];
        let payload = fx.pool.payload(pkt);
        let live = self
            .slots
            .get_mut(slot as usize)
            .and_then(|s| Some((usize::from(s.lane), s.qp.as_mut()?)));
        let Some((lane, qp)) = live else {
            // A straggler for a queue pair already destroyed.
            fx.pool.free(pkt);
            return None;
        };
        self.tx.lanes[lane].ctrl_idle = false;
        let parked = qp.counters().reorder_bytes;
        qp.handle_packet(now, &p.ib, payload, ecn, &mut self.mem);
        let parked = qp.counters().reorder_bytes - parked;
        if let Some(rx) = self.rx.as_mut().filter(|rx| rx.rate.is_some()) {
            if parked > 0 {
                // Written to host memory, and read back before it is placed (seed 002).
                rx.debt = rx.debt + Dur::transmission(2 * parked, rx.pcie_bps);
            }
        }
        fx.pool.free(pkt);
        self.touch(fx, now, slot)
    }

    /// A queue pair's timer event: handles its timeout if it is still due.
    pub(super) fn timer(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        slot: u32,
        gen: u32,
    ) -> Option<Finished> {
        let s = &mut self.slots[slot as usize];
        if s.gen != gen || s.timer != Some(now) {
            return None;
        }
        s.timer = None;
        if let Some(qp) = s.qp.as_mut() {
            if qp.poll_timeout().is_some_and(|t| t <= now) {
                qp.handle_timeout(now);
                self.tx.lanes[usize::from(s.lane)].ctrl_idle = false;
            }
        }
        self.touch(fx, now, slot)
    }

    /// A frame reaches a NIC with a receive pipeline: it waits in the receive buffer (or is
    /// dropped, lossy and the buffer full), and the NIC pauses its switch when a lossless
    /// class's share passes the threshold. `flows`: the flows' sizes, which the translation
    /// cache reads (a flow's buffer is its registered region).
    pub(super) fn buffer(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        pkt: u32,
        hop: Hop,
        flows: &[Flow],
    ) {
        let Some(rx) = self.rx.as_mut() else {
            debug_assert!(false, "only a NIC with a receive pipeline buffers frames");
            return;
        };
        let c = fx.classes.class(fx.classes.priority(&hop));
        // A NIC whose watchdog fired no longer pauses: every class is lossy to it. On a link
        // that runs 802.3x PAUSE every class is lossless, and a pause stops the link.
        let (prio, lossless) = (
            rx.pause_prio(fx, c),
            (fx.classes.class_lossless(c) || rx.held.link_wide()) && !rx.pfc_off,
        );
        let wire = u64::from(hop.wire);
        if rx.held.total() + wire > rx.buffer {
            if lossless && rx.held.total() + wire <= 2 * rx.buffer {
                self.stats.headroom_overflow += 1;
            } else {
                // Lossy, or lossless frames the peer sent through a pause (a switch
                // watchdog's `forward`) beyond any headroom: the buffer is finite.
                if lossless {
                    self.stats.headroom_overflow += 1;
                }
                fx.mon.ingress_drop(self.host, 0, c);
                fx.pool.free(pkt);
                self.stats.drops += 1;
                return;
            }
        }
        rx.held.add(c, wire);
        rx.frames.push_back(RxFrame {
            pkt,
            hop,
            class: c as u8,
        });
        if rx.frames.len() == 1 {
            // The pipeline was idle until now: no stall so far.
            rx.progress = now;
            self.rx_start(fx, now, flows);
        }
        let rx = self.rx.as_mut().expect("a pipeline");
        if lossless && rx.held.pause_above(c, rx.xoff) {
            self.send_pfc(fx, now, prio, Pause::Xoff);
        }
    }

    /// Starts processing the first frame of the receive buffer: its time at the pipeline's
    /// rate, plus what the pipeline owes (reorder-buffer PCIe traffic) and a translation-cache
    /// miss's stall. A stopped pipeline (a fault) starts nothing.
    fn rx_start(&mut self, fx: &mut Fabric<M>, now: Time, flows: &[Flow]) {
        let Some(rx) = self.rx.as_mut() else { return };
        if rx.stalled {
            return;
        }
        let stall = match (&mut rx.mtt, rx.frames.front()) {
            (Some(m), Some(f)) => m.stall(&fx.pool.packets[f.pkt as usize], flows),
            _ => Dur::ZERO,
        };
        if let Some(f) = rx.frames.front() {
            let debt = std::mem::replace(&mut rx.debt, Dur::ZERO);
            let work = rx.rate.map_or(Dur::ZERO, |rate| {
                Dur::transmission(u64::from(f.hop.wire), rate)
            });
            fx.q.push(now + work + debt + stall, Ev::RxDone { host: self.host });
        }
    }

    /// The receive pipeline is done with its first frame, which it returns for delivery to
    /// its queue pair ([`Nic::receive`]).
    pub(super) fn rx_done(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        flows: &[Flow],
    ) -> Option<RxFrame> {
        let rx = self.rx.as_mut()?;
        let f = rx.frames.pop_front()?;
        let c = usize::from(f.class);
        rx.held.remove(c, u64::from(f.hop.wire));
        rx.progress = now;
        if rx.held.resume_below(c, rx.xoff, rx.resume_gap) {
            let prio = rx.pause_prio(fx, c);
            self.send_pfc(fx, now, prio, Pause::Xon);
        }
        self.rx_start(fx, now, flows);
        Some(f)
    }

    fn send_pfc(&mut self, fx: &mut Fabric<M>, now: Time, prio: u8, what: Pause) {
        self.stats.pause_sent += 1;
        // An 802.3x PAUSE is timed as the highest class's pause.
        let c = if prio == ALL_PRIORITIES {
            0
        } else {
            fx.classes.class(prio)
        };
        match fx.send_pfc(now, self.host, 0, prio, what) {
            Some(refresh) => self.clock.sent(c, refresh),
            None => self.clock.resumed(c),
        }
    }

    /// A PFC frame for `prio` arrived from the switch: pauses that priority for `quanta`
    /// (from now: a later frame replaces an earlier one's time), or resumes it (0).
    pub(super) fn pfc(&mut self, fx: &mut Fabric<M>, now: Time, port: u16, prio: u8, quanta: u16) {
        let all = prio == ALL_PRIORITIES;
        let c = if all {
            Some(0)
        } else {
            fx.classes.paused_class(prio)
        };
        fx.mon.pause_received(self.host, port, c);
        self.stats.pause_received += 1;
        if all {
            // 802.3x PAUSE: every priority.
            for p in 0..8 {
                self.pause_priority(fx, now, port, p, quanta);
            }
        } else {
            self.pause_priority(fx, now, port, usize::from(prio & 7), quanta);
        }
    }

    /// Priority `p` paused for `quanta`, or resumed (0).
    fn pause_priority(&mut self, fx: &mut Fabric<M>, now: Time, port: u16, p: usize, quanta: u16) {
        if quanta > 0 {
            let time = pause_time(quanta, self.link.rate_bps);
            let until = self.clock.received(p, now, time);
            fx.pause_expiry(until, self.host, port, p);
            if !self.paused[p] {
                self.paused[p] = true;
                self.paused_since[p] = now;
            }
        } else if self.paused[p] {
            self.resume(fx, now, p);
        }
    }

    /// Priority `p` may send again.
    fn resume(&mut self, fx: &mut Fabric<M>, now: Time, p: usize) {
        self.paused[p] = false;
        let d = now - self.paused_since[p];
        self.stats.paused = self.stats.paused + d;
        self.paused_by_prio[p] = self.paused_by_prio[p] + d;
        fx.mon
            .paused(self.host, 0, fx.classes.paused_class(p as u8), d);
        // Queue pairs with data were kept in the ready list while paused.
        self.kick(fx, now);
    }

    /// A pause timer: the receive buffer, still above the threshold for class `k`, sends
    /// the pause again (`refresh`); or the pause received for priority `k` has run out, and
    /// the NIC sends again unless a later frame moved the end.
    pub(super) fn pause_timer(&mut self, fx: &mut Fabric<M>, now: Time, k: usize, refresh: bool) {
        if refresh {
            let xoff = self
                .rx
                .as_ref()
                .is_some_and(|rx| rx.held.xoff[k] && !rx.pfc_off);
            if self.clock.refresh_due(k, now) && xoff {
                let prio = self.rx.as_ref().map_or(0, |rx| rx.pause_prio(fx, k));
                self.send_pfc(fx, now, prio, Pause::Refresh);
            }
        } else if self.paused[k] && self.clock.expired(k, now) {
            self.resume(fx, now, k);
        }
    }

    /// How long priority `prio` has been paused without a resume.
    pub(super) fn open_pause(&self, now: Time, prio: u8) -> Dur {
        let p = usize::from(prio);
        if self.paused[p] {
            now - self.paused_since[p]
        } else {
            Dur::ZERO
        }
    }

    /// Bytes of class `c` in the receive buffer.
    pub(super) fn rx_bytes(&self, c: usize) -> u64 {
        self.rx.as_ref().map_or(0, |rx| rx.held.bytes[c])
    }

    /// A new queue pair for end `end` of `flow`, of traffic class `class`, whose other end is
    /// at `peer`, configured as `cfg` (its QPN already set). Returns its slot; a configuration
    /// the queue pair refuses leaves the slot empty.
    pub(super) fn new_qp(
        &mut self,
        now: Time,
        cfg: QpConfig,
        (flow, class): (u32, u8),
        end: usize,
        peer: u32,
    ) -> u32 {
        let lane = self.tag.marks[usize::from(class)].lane;
        let slot = match self.free[usize::from(lane)].pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot {
                    qp: None,
                    gen: 0,
                    timer: None,
                    flow,
                    end: end as u8,
                    peer,
                    flow_hash: 0,
                    sent: 0,
                    flowlet: 0,
                    last_tx: Time::ZERO,
                    class,
                    lane,
                });
                self.tx.ctrl.push(false);
                self.tx.live.push(false);
                self.tx.listed.push(false);
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.qp = QueuePair::new(now, cfg).ok();
        s.flow = flow;
        s.end = end as u8;
        s.peer = peer;
        // The queue pair is connected to the other end's, `qpn(flow, 1 - end)` (flows.rs).
        s.flow_hash = mix((u64::from(self.host) << 40)
            ^ (u64::from(peer) << 20)
            ^ u64::from(qpn(flow, 1 - end))
            ^ (u64::from(qpn(flow, end)) << 48));
        s.timer = None;
        s.sent = 0;
        s.flowlet = 0;
        s.last_tx = Time::ZERO;
        s.class = class;
        debug_assert_eq!(s.lane, lane, "a slot keeps its lane");
        self.tx.ctrl[slot as usize] = false;
        self.tx.live[slot as usize] = s.qp.is_some();
        self.tx.listed[slot as usize] = false;
        slot
    }

    /// After anything happened to the queue pair in `slot`: collect its completions, re-arm
    /// its timer, and let the NIC send. Returns the flow, if its requester completed (the
    /// caller finishes it).
    pub(super) fn touch(&mut self, fx: &mut Fabric<M>, now: Time, slot: u32) -> Option<Finished> {
        let s = &mut self.slots[slot as usize];
        let qp = s.qp.as_mut()?;
        let flow = s.flow;
        let mut finished = None;
        while let Some(c) = qp.poll_completion() {
            if c.wr_id == u64::from(flow) && usize::from(s.end) == REQ {
                finished = Some(Finished {
                    flow,
                    status: c.status,
                });
            }
        }
        if finished.is_some() {
            return finished;
        }
        let ctrl = qp.control_ready();
        let tx = &mut self.tx;
        let lane = &mut tx.lanes[usize::from(s.lane)];
        if ctrl && !tx.ctrl[slot as usize] {
            lane.ready.flag_raised(slot);
        }
        tx.ctrl[slot as usize] = ctrl;
        arm_timer(&mut fx.q, now, s, self.host, slot);
        // Only a queue pair that may have something to send joins the NIC's list and wakes
        // it: an ACK that leaves the requester nothing new to send (all sent, or the BDP cap
        // still full) costs no poll and no wake-up.
        if s.qp.as_ref().is_some_and(QueuePair::may_transmit) {
            if !self.tx.listed[slot as usize] {
                self.tx.listed[slot as usize] = true;
                self.tx.lanes[usize::from(s.lane)].ready.push_back(slot);
            }
            self.kick(fx, now);
        }
        None
    }

    /// Destroys the queue pair in `slot` (its counters go to the NIC's totals) and releases
    /// its buffer.
    pub(super) fn destroy(&mut self, slot: u32, buf: (u64, MrKeys)) {
        let s = &mut self.slots[slot as usize];
        if let Some(qp) = s.qp.take() {
            self.retired += *qp.counters();
            if let Some(c) = self.retired_by_class.get_mut(usize::from(s.class)) {
                *c += *qp.counters();
            }
            // Its entries stay on the NIC's list until a look drops them. (Counted whether or
            // not the slot says it is listed: a reused slot can leave an entry behind.)
            self.tx.lanes[usize::from(s.lane)].dead_ready += 1;
        }
        self.tx.ctrl[slot as usize] = false;
        self.tx.live[slot as usize] = false;
        s.gen = s.gen.wrapping_add(1);
        s.timer = None;
        self.free[usize::from(s.lane)].push(slot);
        self.mem.release(buf.0, buf.1);
    }

    /// The live queue pairs, as (slot, flow, end).
    pub(super) fn live(&self) -> Vec<(u32, u32, u8)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.qp.is_some())
            .map(|(i, s)| (i as u32, s.flow, s.end))
            .collect()
    }

    /// The host died (its queue pairs are already destroyed): its link is down, and what its
    /// lists and buffer held is gone.
    pub(super) fn go_down(&mut self, fx: &mut Fabric<M>) {
        self.up = false;
        for lane in &mut self.tx.lanes {
            lane.ready.clear();
        }
        if let Some(rx) = self.rx.as_mut() {
            for f in rx.frames.drain(..) {
                fx.pool.free(f.pkt);
            }
            rx.held = rx.held.cleared();
        }
    }

    /// The host is back: its link is up.
    pub(super) fn go_up(&mut self, fx: &mut Fabric<M>, now: Time) {
        self.up = true;
        fx.q.origin = self.host;
        self.kick(fx, now);
    }

    /// A fault stops (`true`) or restarts the receive pipeline.
    pub(super) fn stall_rx(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        stalled: bool,
        flows: &[Flow],
    ) {
        let Some(rx) = self.rx.as_mut() else { return };
        rx.stalled = stalled;
        if !stalled {
            rx.progress = now;
            fx.q.origin = self.host;
            if !rx.frames.is_empty() {
                self.rx_start(fx, now, flows);
            }
        }
    }

    /// The NIC watchdog (seed 001 §4.3): a NIC whose receive pipeline has not moved for
    /// `limit` while it pauses its switch stops pausing, for good. Returns whether it fired.
    pub(super) fn watchdog_poll(&mut self, fx: &mut Fabric<M>, now: Time, limit: Dur) -> bool {
        let Some(rx) = self.rx.as_mut() else {
            return false;
        };
        let stuck = !rx.frames.is_empty() && now.since(rx.progress) >= limit;
        let pausing = rx.held.xoff.iter().any(|&x| x);
        if !(stuck && pausing && !rx.pfc_off) {
            return false;
        }
        rx.pfc_off = true;
        fx.q.origin = self.host;
        for c in 0..fx.classes.len() {
            let rx = self.rx.as_mut().expect("a pipeline");
            if rx.held.xoff[c] {
                rx.held.xoff[c] = false;
                let prio = rx.pause_prio(fx, c);
                self.send_pfc(fx, now, prio, Pause::Xon);
            }
        }
        true
    }

    /// Ends the run at `now`: closes the pause intervals still open, and adds the live queue
    /// pairs' counters to the totals.
    pub(super) fn finish(&mut self, now: Time) {
        for p in 0..8 {
            if self.paused[p] {
                let d = now - self.paused_since[p];
                self.stats.paused = self.stats.paused + d;
                self.paused_by_prio[p] = self.paused_by_prio[p] + d;
                self.paused[p] = false;
            }
        }
        for s in &self.slots {
            if let Some(qp) = &s.qp {
                self.retired += *qp.counters();
                if let Some(c) = self.retired_by_class.get_mut(usize::from(s.class)) {
                    *c += *qp.counters();
                }
            }
        }
    }

    /// Checks the receive buffer's books: its counters add up to the frames it holds.
    pub(super) fn check_books(&self) -> Result<(), String> {
        let Some(rx) = &self.rx else { return Ok(()) };
        let mut held = [0u64; super::classes::MAX_CLASSES];
        for f in &rx.frames {
            held[usize::from(f.class)] += u64::from(f.hop.wire);
        }
        if held != rx.held.bytes || rx.held.total() != held.iter().sum::<u64>() {
            return Err(format!(
                "host {}: receive buffer counters {:?} but it holds {held:?}",
                self.host, rx.held.bytes
            ));
        }
        Ok(())
    }

    /// Translation-cache misses.
    pub(super) fn mtt_misses(&self) -> u64 {
        self.rx
            .as_ref()
            .and_then(|rx| rx.mtt.as_ref())
            .map_or(0, |m| m.cache.misses)
    }

    /// A description of the NIC and the queue pair in `slot`, for debugging a stuck flow.
    pub(super) fn describe(&self, slot: u32) -> String {
        let Some(s) = self.slots.get(slot as usize) else {
            return format!("host {}: no live queue pair\n", self.host);
        };
        let mut out = format!(
            "host {} NIC: wake {} busy until {:?} ready {:?} paused {:?}\n",
            self.host,
            self.tx.wake,
            self.tx.busy_until,
            self.tx.lanes.iter().map(|l| &l.ready).collect::<Vec<_>>(),
            self.paused
        );
        out += &format!(
            "host {} slot {slot} timer {:?} ready {}: {:#?}\n",
            self.host,
            s.timer,
            self.tx.listed[slot as usize],
            s.qp.as_ref()
                .map(|q| (q.poll_timeout(), q.in_flight(), q.state()))
        );
        out += &format!("{:?}\n", s.qp);
        out
    }
}

impl MttModel {
    /// The stall of the frame `p` about to be processed: a miss's fetch when its payload lands
    /// in a page without a translation.
    fn stall(&mut self, p: &Packet, flows: &[Flow]) -> Dur {
        if p.ib.payload_len == 0 {
            return Dur::ZERO;
        }
        let flow = p.flow as usize;
        // PSNs start where the flow's set-up put them (`first_psn`).
        let first = first_psn(self.seed, flow);
        let n = u64::from(p.ib.bth.psn.value().wrapping_sub(first.value()) & Psn::MASK);
        // A Read's responses and its request share the requester's PSNs.
        let offset = (n * self.mtu).min(flows[flow].size);
        let va = ((flow as u64) << 32) + offset;
        let page = va / self.page_bytes;
        if self.cache.access(page) {
            self.miss
        } else {
            Dur::ZERO
        }
    }
}

/// How the NICs of a run mark, schedule and spread what they send: each traffic class's
/// DSCPs and priorities ([`SimConfig::class_config`]), its transport's extra headers, the
/// lanes their priorities make, and the run's scheduler, VLAN tagging and ECMP granularity.
/// `dscps`: each class's (data, control) DSCPs; `priority`: the network's DSCP map;
/// `extra_headers`: each class's; `unit`: the largest frame, a DWRR weight's quantum.
pub(super) fn tagging(
    cfg: &SimConfig,
    dscps: &[(u8, u8)],
    priority: impl Fn(u8) -> u8,
    extra_headers: &[[u32; 2]],
    unit: u32,
) -> Tagging {
    let prios: Vec<(u8, u8)> = dscps
        .iter()
        .map(|&(d, c)| (priority(d), priority(c)))
        .collect();
    let mut lanes = prios.clone();
    lanes.sort_unstable_by(|a, b| b.cmp(a));
    lanes.dedup();
    let marks = dscps
        .iter()
        .zip(&prios)
        .zip(extra_headers)
        .map(|((&(data_dscp, ctrl_dscp), &p), &extra_headers)| Marks {
            data_dscp,
            ctrl_dscp,
            data_prio: p.0,
            ctrl_prio: p.1,
            extra_headers,
            lane: lanes.iter().position(|&x| x == p).expect("listed") as u8,
        })
        .collect();
    let weights = match cfg.network.scheduler {
        Scheduler::Strict => Weights::strict(lanes.len()),
        Scheduler::Dwrr => {
            let w: Vec<u32> = lanes
                .iter()
                .map(|&(d, _)| cfg.network.dwrr_weight(d))
                .collect();
            Weights::new(&w, unit)
        }
    };
    Tagging {
        marks,
        lanes,
        weights,
        vlan: cfg.network.vlan,
        ecmp: cfg.network.ecmp,
        flowlet_gap: us(cfg.network.flowlet_gap_us),
    }
}
