//! The network model: NICs running irn-transport queue pairs, switches with virtual output
//! queues or a shared buffer, PFC and ECN, links with rate and delay — and the event loop that
//! drives them.
//!
//! # Model, as built (differences from the IRN paper's simulator are listed in
//! `docs/RESULTS.md`)
//!
//! - **Links** serialize one frame at a time at their rate and deliver it after the
//!   propagation delay (store-and-forward everywhere). A frame's wire size is its RoCEv2
//!   packet (BTH onward, as `irn_wire` would emit it, plus ICRC) + UDP + IPv4 + Ethernet
//!   header and FCS; preamble and inter-frame gap are not counted.
//! - **NICs** pull packets from their queue pairs when their link is free (so a NIC never
//!   queues): queue pairs with something to send are served round-robin, one packet each;
//!   ACK/NAK/CNP travel at a control priority when configured, and are still sent while the
//!   data priority is paused by PFC.
//!   On the receive side a frame reaches its queue pair on arrival, unless the receive
//!   pipeline has a rate (`[nic] rx_gbps`): then frames wait in a receive buffer drained at
//!   that rate, and the NIC pauses its switch (lossless priorities) or drops (lossy) as a
//!   switch ingress does — the slow receiver of SPEC N6.
//! - **Switches**: see [`SwitchModel`]. Priorities come from the DSCP (SPEC N2); per priority,
//!   lossless (PFC) or lossy (drop-tail); strict priority between classes at each output;
//!   ECMP by a hash of the 5-tuple (source and destination host and the queue pair numbers,
//!   from which RoCEv2 derives its UDP source port) salted per switch.
//! - **PFC** (802.1Qbb, SPEC N1): an ingress (port, priority) above its threshold sends a
//!   pause frame upstream; once it has drained `pfc_resume_gap_bytes` below, a resume frame.
//!   A pause holds until the resume (real switches refresh the pause before its quanta
//!   expire; those refreshes are not modelled or counted). A pause frame reaches the peer
//!   after its 64-byte serialization and the propagation delay, overtaking data frames.
//!
//! Each end of a flow is set up by an event of its own host when the flow starts; the
//! requester's queue pair is destroyed when its work request completes, the responder's one
//! longest link delay later (a teardown that may cross partitions, `crate::parallel`).

use std::collections::VecDeque;
use std::sync::Arc;

use irn_transport::{
    bdp_cap_packets, connect_qp, Access, ByteMemory, CheckedMemory, Completion, ControllerFactory,
    Counters, DcqcnConfig, DcqcnFactory, Dur, Key, Memory, MrKeys, NoCcFactory, QpAttr, QpConfig,
    QueuePair, RecoveryConfig, RecvWr, Remote, RtoPolicy, SendOp, SendWr, Sge, Time, TimelyConfig,
    TimelyFactory, WcStatus, WindowAlgorithm, WindowConfig, WindowFactory,
};
use irn_wire::{Ecn, IbRepr, Opcode, Psn};

use crate::config::{CcKind, EcnMode, FlowOp, Recovery, SimConfig, SwitchModel};
use crate::engine::EventQueue;
use crate::topology::Topology;
use crate::workload::Flow;
use irn_transport::rng::{mix, Rng};

/// Ethernet header (14) + FCS (4) + IPv4 (20) + UDP (8) + ICRC (4) around the BTH onward.
pub const FRAME_OVERHEAD: u32 = 14 + 4 + 20 + 8 + 4;
/// A PFC frame on the wire: the 64-byte minimum Ethernet frame.
const PFC_FRAME: u64 = 64;

/// Application memory as the simulator needs it: one buffer per flow end.
pub trait SimMemory: Memory + Sized + Send {
    /// An empty memory.
    fn create(seed: u64) -> Self;
    /// A registered buffer of `len` bytes for one end of a flow, filled from `fill` when the
    /// memory holds bytes. Returns its address and keys.
    fn flow_buffer(&mut self, len: u64, fill: Option<u64>) -> (u64, MrKeys);
    /// Whether the `len` bytes at `addr` are those `fill` makes (always true when no bytes are
    /// held).
    fn verify(&self, addr: u64, len: u64, fill: u64) -> bool;
    /// Releases a flow's buffer.
    fn release(&mut self, addr: u64, keys: MrKeys);
    /// The buffer every flow of this memory uses, if the model has one: then the other end of
    /// a flow addresses it without asking (as with a well-known region), which is what lets
    /// the two ends of a flow be set up in different partitions. A requester reads it from its
    /// own partition's copy of the peer's memory, so it must depend on the `create` seed only,
    /// never on what happened to the memory since. `None`: each flow has its own
    /// buffer, and the requester reads the responder's from the flow's state (one partition).
    fn known_buffer(&self) -> Option<(u64, MrKeys)>;
}

const ALL_ACCESS: Access = Access::LOCAL_WRITE
    .with(Access::REMOTE_WRITE)
    .with(Access::REMOTE_READ)
    .with(Access::REMOTE_ATOMIC);

/// Memory that only checks keys and bounds: one region, large enough for any flow, that every
/// flow of the host shares.
#[derive(Debug)]
pub struct SharedChecked {
    mem: CheckedMemory,
    addr: u64,
    keys: MrKeys,
}

impl Memory for SharedChecked {
    const HOLDS_BYTES: bool = false;
    fn check(
        &self,
        key: Key,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(), irn_transport::MemError> {
        self.mem.check(key, addr, len, access)
    }
    fn read(&self, key: Key, addr: u64, out: &mut [u8]) -> Result<(), irn_transport::MemError> {
        self.mem.read(key, addr, out)
    }
    fn write(&mut self, key: Key, addr: u64, data: &[u8]) -> Result<(), irn_transport::MemError> {
        self.mem.write(key, addr, data)
    }
    fn atomic(
        &mut self,
        rkey: u32,
        addr: u64,
        op: irn_transport::AtomicOp,
    ) -> Result<u64, irn_transport::MemError> {
        self.mem.atomic(rkey, addr, op)
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), irn_transport::MemError> {
        self.mem.invalidate(rkey)
    }
}

impl SimMemory for SharedChecked {
    fn create(seed: u64) -> Self {
        let mut mem = CheckedMemory::new(seed);
        let len = 1u64 << 40;
        let addr = mem.alloc(len);
        let keys = mem
            .register(addr, len, ALL_ACCESS)
            .unwrap_or(MrKeys { lkey: 0, rkey: 0 });
        SharedChecked { mem, addr, keys }
    }
    fn flow_buffer(&mut self, _len: u64, _fill: Option<u64>) -> (u64, MrKeys) {
        (self.addr, self.keys)
    }
    fn verify(&self, _addr: u64, _len: u64, _fill: u64) -> bool {
        true
    }
    fn release(&mut self, _addr: u64, _keys: MrKeys) {}
    fn known_buffer(&self) -> Option<(u64, MrKeys)> {
        Some((self.addr, self.keys))
    }
}

fn pattern(seed: u64, len: u64) -> Vec<u8> {
    let mut r = Rng::stream(seed, 77);
    let mut v = Vec::with_capacity(len as usize);
    while (v.len() as u64) < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len as usize);
    v
}

impl SimMemory for ByteMemory {
    fn create(seed: u64) -> Self {
        ByteMemory::new(seed)
    }
    fn flow_buffer(&mut self, len: u64, fill: Option<u64>) -> (u64, MrKeys) {
        let addr = match fill {
            Some(seed) => self.alloc_with(&pattern(seed, len)),
            None => self.alloc(len as usize),
        };
        let keys = self
            .register(addr, len.max(1), ALL_ACCESS)
            .unwrap_or(MrKeys { lkey: 0, rkey: 0 });
        (addr, keys)
    }
    fn verify(&self, addr: u64, len: u64, fill: u64) -> bool {
        self.buffer(addr)
            .is_some_and(|b| b.len() as u64 >= len && b[..len as usize] == pattern(fill, len)[..])
    }
    fn release(&mut self, _addr: u64, keys: MrKeys) {
        let _ = self.deregister(keys.lkey);
    }
    fn known_buffer(&self) -> Option<(u64, MrKeys)> {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Packets and events

/// What switches and the receiving NIC's admission look at, kept apart from the headers. The
/// arrival event carries a copy: the event is read in order from the event list, while the
/// packet's [`Meta`] line has usually left the cache since the previous hop.
#[derive(Debug, Clone, Copy)]
struct Hop {
    dst: u32,
    hash: u32,
    /// Frame bytes (at most a 4096-byte MTU plus headers).
    wire: u16,
    prio: u8,
    ecn: Ecn,
}

/// A packet's forwarding state, 16 bytes instead of the 300-odd of its [`IbRepr`].
#[derive(Debug, Clone, Copy)]
struct Meta {
    hop: Hop,
    /// The next packet of the virtual output queue this one waits in ([`NIL`]: the last).
    /// Threading the queues through the packets keeps a queue operation on cache lines the
    /// hop touches anyway, instead of a `VecDeque` header and buffer per queue.
    next: u32,
}

const _: () = assert!(std::mem::size_of::<Meta>() == 16);

/// No packet: the end of a virtual output queue.
const NIL: u32 = u32::MAX;

/// No input: the end of an output's round-robin list.
const NO_INPUT: u16 = u16::MAX;

/// A virtual output queue: a list of packets threaded through [`Meta::next`], and the link of
/// the output's round-robin list of inputs with packets for it.
#[derive(Debug, Clone, Copy)]
struct Voq {
    head: u32,
    tail: u32,
    /// The next input in the output's round-robin list ([`NO_INPUT`]: the last).
    next_input: u16,
}

/// An output's (and class's) round-robin list of inputs with packets for it, threaded through
/// the VOQs' `next_input`.
#[derive(Debug, Clone, Copy)]
struct InputRing {
    head: u16,
    tail: u16,
}

impl Voq {
    const EMPTY: Voq = Voq {
        head: NIL,
        tail: NIL,
        next_input: NO_INPUT,
    };

    fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Appends `pkt`; returns whether the queue was empty. The tail's `next` is never read
    /// (the tail ends the list), so the new packet's metadata is not touched.
    fn push(&mut self, meta: &mut [Meta], pkt: u32) -> bool {
        let was_empty = self.tail == NIL;
        if was_empty {
            self.head = pkt;
        } else {
            meta[self.tail as usize].next = pkt;
        }
        self.tail = pkt;
        was_empty
    }

    fn pop(&mut self, meta: &[Meta]) -> Option<u32> {
        if self.head == NIL {
            return None;
        }
        let pkt = self.head;
        if pkt == self.tail {
            self.head = NIL;
            self.tail = NIL;
        } else {
            self.head = meta[pkt as usize].next;
        }
        Some(pkt)
    }

    /// The packets, head first.
    fn iter<'a>(&self, meta: &'a [Meta]) -> impl Iterator<Item = u32> + 'a {
        let (mut at, tail) = (self.head, self.tail);
        std::iter::from_fn(move || {
            let p = at;
            (p != NIL).then(|| {
                at = if p == tail {
                    NIL
                } else {
                    meta[p as usize].next
                };
                p
            })
        })
    }
}

/// What only the receiving NIC reads (with the payload bytes, kept apart in
/// `Part::payloads` when the memory model holds bytes).
#[derive(Debug, Clone, Copy)]
struct Packet {
    ib: IbRepr,
    /// The flow it belongs to and the end ([`REQ`] or [`RESP`]) it is addressed to: how the
    /// receiving NIC finds the queue pair (a NIC would look the QPN up in its QP table).
    flow: u32,
    to: u8,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    /// A frame has fully arrived at `node` through `port`.
    Arrive {
        node: u32,
        port: u16,
        pkt: u32,
        /// What the receiver reads of the packet's metadata.
        hop: Hop,
    },
    /// `node` finished serializing a frame on `port`.
    TxDone { node: u32, port: u16 },
    /// `host`'s receive pipeline finished the first frame of its receive buffer.
    RxDone { host: u32 },
    /// A PFC frame for `prio` arrived at `node` through `port`.
    Pfc {
        node: u32,
        port: u16,
        prio: u8,
        pause: bool,
    },
    /// A queue pair's timer.
    QpTimer { host: u32, slot: u32, gen: u32 },
    /// The next flow end of the workload starts (see `Part::starts`).
    FlowStart,
    /// The requester of `flow` completed a teardown delay ago: `host` destroys the responder.
    FlowEnd { host: u32, flow: u32 },
}

/// An event for another partition, with its key, and the packet when a frame crosses: the
/// receiving partition stores it in its own packet table.
#[derive(Debug)]
pub(crate) struct Msg {
    /// The partition it is for.
    pub(crate) to: u16,
    at: Time,
    key: u64,
    ev: Ev,
    packet: Option<(Packet, Vec<u8>)>,
}

/// The event key's origin for the workload's flow starts (a node number never used).
const WORKLOAD: u32 = (1 << 24) - 1;

/// The events of one event list, keyed so that their order does not depend on how the
/// network is partitioned: an event's key is the node that scheduled it (`origin`: the node
/// whose event is being handled) and that node's count of events scheduled so far. A node's
/// count is the same whether it shares the event list with the whole network or with its
/// partition only, so ties between events of one time resolve the same way in both.
#[derive(Debug)]
struct Events {
    q: EventQueue<Ev>,
    origin: u32,
    /// Per node, events it has scheduled.
    count: Vec<u64>,
}

impl Events {
    /// Schedules `ev` at `at`, from the node being handled.
    #[inline]
    fn push(&mut self, at: Time, ev: Ev) {
        let key = self.next_key();
        self.q.push_keyed(at, key, ev);
    }

    /// The key of the next event the node being handled schedules.
    #[inline]
    fn next_key(&mut self) -> u64 {
        let c = &mut self.count[self.origin as usize];
        let key = (u64::from(self.origin) << 40) | *c;
        *c += 1;
        key
    }

    /// The key of the workload's start of end `end` of `flow`: starts of one time go in flow
    /// order, the responder's end first (a requester may need its responder's buffer).
    fn start_key(flow: u32, end: usize) -> u64 {
        (u64::from(WORKLOAD) << 40) | (2 * u64::from(flow) + u64::from(end == REQ))
    }
}

/// Counters of one port (NIC or switch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames sent (data and control, not PFC).
    pub tx_packets: u64,
    /// Bytes sent on the wire.
    pub tx_bytes: u64,
    /// Packets dropped at this port's ingress (buffer full, lossy) or on its incoming link.
    pub drops: u64,
    /// PFC pause frames (pause and resume) sent upstream through this port.
    pub pause_sent: u64,
    /// PFC frames received.
    pub pause_received: u64,
    /// Time this port's egress spent paused (any priority).
    pub paused: Dur,
    /// Lossless packets admitted beyond the buffer (headroom too small).
    pub headroom_overflow: u64,
    /// Packets marked CE at this egress.
    pub ecn_marked: u64,
}

// ---------------------------------------------------------------------------------------------
// Switches

/// Priority classes a switch distinguishes at most: the data priority and the control
/// priority (every other priority shares the lowest class).
const MAX_CLASSES: usize = 2;

/// What a packet passing through a switch port touches, as an input and as an output, in one
/// cache line: a hop reads and writes its input's and its output's records (and its virtual
/// output queue). Measured at k = 16 it is no faster than the ten parallel arrays it replaced
/// (the switches' state fits in L2 either way, docs/BENCHMARKS.md), but it keeps a port's
/// state in one place.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
struct SwPort {
    /// As an input: bytes buffered that arrived here, and pauses sent upstream.
    ingress: Ingress,
    // --- As an output.
    /// Per class, bytes queued for this output.
    egress: [u64; MAX_CLASSES],
    /// Serializing until then.
    busy_until: Time,
    /// Input-queued: per class, inputs with packets for this output, in round-robin order.
    active: [InputRing; MAX_CLASSES],
    /// Per class: paused by the downstream peer.
    paused: [bool; MAX_CLASSES],
    /// A `TxDone` event is pending (at most one).
    wake: bool,
}

impl SwPort {
    const IDLE: SwPort = SwPort {
        ingress: Ingress::EMPTY,
        egress: [0; MAX_CLASSES],
        busy_until: Time::ZERO,
        active: [InputRing {
            head: NO_INPUT,
            tail: NO_INPUT,
        }; MAX_CLASSES],
        paused: [false; MAX_CLASSES],
        wake: false,
    };
}

const _: () = assert!(std::mem::size_of::<SwPort>() == 64);

/// A buffer that pauses its upstream per class with PFC (SPEC N1): a switch input port, a
/// NIC's receive buffer. The pause and resume rules are these two methods, for both.
#[derive(Debug, Clone, Copy)]
struct Ingress {
    /// Per class, bytes held.
    bytes: [u64; MAX_CLASSES],
    /// Per class: a pause is in force upstream.
    xoff: [bool; MAX_CLASSES],
}

impl Ingress {
    const EMPTY: Ingress = Ingress {
        bytes: [0; MAX_CLASSES],
        xoff: [false; MAX_CLASSES],
    };

    /// Bytes held, all classes.
    fn total(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// Whether class `c` must pause its upstream now: not paused, and holding more than
    /// `threshold`. Marks it paused.
    fn pause_above(&mut self, c: usize, threshold: u64) -> bool {
        let pause = !self.xoff[c] && self.bytes[c] > threshold;
        self.xoff[c] |= pause;
        pause
    }

    /// Whether class `c` must resume its upstream now: paused, and `gap` bytes below
    /// `threshold` (or empty). Marks it resumed.
    fn resume_below(&mut self, c: usize, threshold: u64, gap: u64) -> bool {
        let resume = self.xoff[c] && (self.bytes[c] + gap <= threshold || self.bytes[c] == 0);
        self.xoff[c] &= !resume;
        resume
    }
}

/// A switch. The fields a packet's hop reads come first, in one cache line.
#[derive(Debug)]
#[repr(C)]
struct Switch {
    ports: Vec<SwPort>,
    /// Input-queued: per (input, output, class), the virtual output queue.
    voq: Vec<Voq>,
    /// Shared-buffer: bytes in the whole switch.
    used: u64,
    salt: u64,
    /// Shared-buffer: per (output, class), FIFO of (packet, input).
    oq: Vec<VecDeque<(u32, u16)>>,
    /// Per (output, class): when the pause in force began.
    paused_since: Vec<Time>,
    stats: Vec<PortStats>,
}

impl Switch {
    /// The virtual output queue of (input `inp`, `out`, class `c`).
    #[inline]
    fn voq_at(&self, out: usize, c: usize, inp: u16) -> usize {
        let n = self.ports.len();
        (usize::from(inp) * n + out) * MAX_CLASSES + c
    }

    /// Puts input `inp` last in the round-robin list of (`out`, `c`).
    fn active_push(&mut self, out: usize, c: usize, inp: u16) {
        let at = self.voq_at(out, c, inp);
        self.voq[at].next_input = NO_INPUT;
        let ring = self.ports[out].active[c];
        if ring.tail == NO_INPUT {
            self.ports[out].active[c].head = inp;
        } else {
            let t = self.voq_at(out, c, ring.tail);
            self.voq[t].next_input = inp;
        }
        self.ports[out].active[c].tail = inp;
    }

    /// Takes the first input of the round-robin list of (`out`, `c`).
    fn active_pop(&mut self, out: usize, c: usize) -> Option<u16> {
        let i = self.ports[out].active[c].head;
        if i == NO_INPUT {
            return None;
        }
        let next = self.voq[self.voq_at(out, c, i)].next_input;
        let ring = &mut self.ports[out].active[c];
        ring.head = next;
        if next == NO_INPUT {
            ring.tail = NO_INPUT;
        }
        Some(i)
    }

    fn new(nports: usize, salt: u64, model: SwitchModel) -> Switch {
        let iq = model == SwitchModel::InputQueued;
        Switch {
            ports: vec![SwPort::IDLE; nports],
            voq: if iq {
                vec![Voq::EMPTY; nports * MAX_CLASSES * nports]
            } else {
                Vec::new()
            },
            used: 0,
            salt,
            oq: if iq {
                Vec::new()
            } else {
                (0..nports * MAX_CLASSES).map(|_| VecDeque::new()).collect()
            },
            paused_since: vec![Time::ZERO; nports * MAX_CLASSES],
            stats: vec![PortStats::default(); nports],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// NICs

#[derive(Debug)]
struct Slot {
    qp: Option<QueuePair>,
    gen: u32,
    /// Time of the timer event in the queue, if one is.
    timer: Option<Time>,
    ready: bool,
    flow: u32,
    /// Which end of the flow: [`REQ`] or [`RESP`].
    end: u8,
    /// The host of the queue pair at the other end (kept here: the slot is read for every
    /// packet sent, the flow's state is not).
    peer: u32,
}

#[derive(Debug)]
struct Nic<M> {
    mem: M,
    slots: Vec<Slot>,
    free: Vec<u32>,
    ready: VecDeque<u32>,
    busy_until: Time,
    /// A `TxDone` event is pending.
    wake: bool,
    paused: [bool; 8],
    paused_since: [Time; 8],
    stats: PortStats,
    /// With a receive pipeline rate: frames in the receive buffer, in arrival order (the
    /// first is being processed).
    rx: VecDeque<RxFrame>,
    /// The receive buffer's bytes per class, and the pauses the NIC has sent its switch.
    rx_held: Ingress,
}

/// A frame in a NIC's receive buffer.
#[derive(Debug, Clone, Copy)]
struct RxFrame {
    pkt: u32,
    hop: Hop,
    class: u8,
}

/// The requester end of a flow.
const REQ: usize = 0;
/// The responder end of a flow.
const RESP: usize = 1;

/// The host of end `end` ([`REQ`], [`RESP`]) of flow `f` under operation `op`: a Read's
/// requester is the destination of its data.
fn end_host(op: FlowOp, f: &Flow, end: usize) -> u32 {
    if (end == REQ) != (op == FlowOp::Read) {
        f.src
    } else {
        f.dst
    }
}

/// A configuration's microseconds, to the picosecond.
fn us(v: f64) -> Dur {
    Dur::from_picos((v * 1e6).round() as u64)
}

/// The congestion controller every queue pair of the run gets (`transport.cc`, `[cc]`).
fn cc_factory(cfg: &SimConfig, bdp_cap: u32, rtt: Dur) -> Arc<dyn ControllerFactory> {
    let bps = |mbps: f64| (mbps * 1e6).round() as u64;
    match cfg.transport.cc {
        CcKind::None => Arc::new(NoCcFactory),
        CcKind::Dcqcn => {
            let d = &cfg.cc.dcqcn;
            Arc::new(DcqcnFactory {
                config: DcqcnConfig {
                    g: d.g,
                    alpha_period: us(d.alpha_period_us),
                    increase_period: us(d.increase_period_us),
                    byte_counter: d.byte_counter_bytes,
                    fast_recovery_steps: d.fast_recovery_steps,
                    ai_bps: bps(d.ai_mbps),
                    hai_bps: bps(d.hai_mbps),
                    min_rate_bps: bps(d.min_rate_mbps),
                    initial_alpha: d.initial_alpha,
                    timer_jitter: d.timer_jitter,
                },
                seed: cfg.seed,
            })
        }
        CcKind::Timely => {
            let t = &cfg.cc.timely;
            Arc::new(TimelyFactory(TimelyConfig {
                alpha: t.alpha,
                beta: t.beta,
                delta_bps: bps(t.delta_mbps),
                t_low: us(t.t_low_us),
                t_high: us(t.t_high_us),
                min_rtt: us(t.min_rtt_us),
                hai_threshold: t.hai_threshold,
                segment_bytes: t.segment_bytes,
                min_rate_bps: bps(t.min_rate_mbps),
            }))
        }
        CcKind::Dctcp | CcKind::Aimd => {
            let w = &cfg.cc.window;
            let mss = u64::from(cfg.network.mtu);
            let init = w.init_window_bytes.unwrap_or(u64::from(bdp_cap) * mss);
            Arc::new(WindowFactory(WindowConfig {
                algorithm: if cfg.transport.cc == CcKind::Dctcp {
                    WindowAlgorithm::Dctcp
                } else {
                    WindowAlgorithm::Aimd
                },
                mss,
                init_window: init,
                min_window: w.min_window_bytes.unwrap_or(mss),
                // Beyond the BDP a window sends nothing more (IRN's cap) and only dulls cuts.
                max_window: Some(w.max_window_bytes.unwrap_or(init)),
                g: w.g,
                initial_rtt: rtt,
            }))
        }
    }
}

/// The QPN of end `end` of `flow`: a function of the flow, so that each end knows the other's
/// without asking (the two ends may be set up in different partitions at the same instant).
/// QPNs are 24 bits and 0 and 1 are special in InfiniBand; past 2^23 flows they repeat, which
/// is harmless (a NIC finds a packet's queue pair by its flow).
fn qpn(flow: u32, end: usize) -> u32 {
    2 + ((2 * u64::from(flow) + end as u64) % ((1 << 24) - 2)) as u32
}

// ---------------------------------------------------------------------------------------------
// Flows

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
    /// FCT ÷ ideal FCT.
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

/// Totals over the run.
#[derive(Debug, Clone, Default)]
pub struct NetStats {
    /// Packets sent by NICs.
    pub host_packets: u64,
    /// Packets dropped anywhere.
    pub drops: u64,
    /// PFC frames sent by all ports.
    pub pause_frames: u64,
    /// Summed queue-pair counters of destroyed queue pairs.
    pub qp: Counters,
    /// Per (node, port), for ports with pause or drop activity.
    pub ports: Vec<(u32, u16, PortStats)>,
    /// Lossless packets admitted beyond the buffer.
    pub headroom_overflow: u64,
    /// The most packets any queue pair had in flight (requests or responses), measured after
    /// every packet a queue pair sent: BDP-FC keeps it at or below the cap.
    pub max_in_flight: u32,
}

/// The nodes of one partition of the network and their event list (with one partition: the
/// whole simulation), generic over whether memory holds bytes. Every node's state exists in
/// every partition; only the partition that owns a node ever touches it (the others keep it
/// empty), so counters and records add up across partitions.
/// [`Simulation`](crate::parallel::Simulation) drives the partitions.
pub(crate) struct Part<M: SimMemory> {
    /// Per node, the partition that owns it.
    part_of: Arc<[u16]>,
    /// This partition.
    me: u16,
    /// Events for other partitions, scheduled during the current window.
    outbox: Vec<Msg>,
    cfg: SimConfig,
    topo: Topology,
    q: Events,
    packets: Vec<Packet>,
    /// Per packet, its payload bytes (only when the memory model holds bytes: otherwise
    /// empty, so a packet's slot is its headers alone).
    payloads: Vec<Vec<u8>>,
    meta: Vec<Meta>,
    free_packets: Vec<u32>,
    switches: Vec<Switch>,
    nics: Vec<Nic<M>>,
    flows: Vec<Flow>,
    records: Vec<FlowRecord>,
    states: Vec<FlowState>,
    /// Flow ends to set up, as (start, key, flow, end), in start order: flow starts are events
    /// of their own (one pending at a time) at the end's host.
    starts: Vec<(Time, u64, u32, u8)>,
    next_start: usize,
    /// From the requester's completion to the responder's teardown: the longest link delay,
    /// so that it is never shorter than a partition's lookahead.
    teardown: Dur,
    done_flows: usize,
    qp_cfg: QpConfig,
    qp_attr: QpAttr,
    /// Priority → class index (255: unused).
    class_of: [u8; 8],
    /// Class → priority, highest priority first.
    classes: Vec<u8>,
    lossless: [bool; 8],
    data_prio: u8,
    ctrl_prio: u8,
    xoff_bytes: u64,
    /// A NIC's receive buffer share of a lossless class above which it pauses its switch.
    nic_xoff_bytes: u64,
    /// The NICs' receive pipeline rate in bits per second (`None`: never the bottleneck).
    rx_rate: Option<u64>,
    /// Per node: random link loss on its incoming links.
    loss_rng: Vec<Rng>,
    /// Per node: RED's marking decisions at its outputs.
    ecn_rng: Vec<Rng>,
    buf: Vec<u8>,
    totals: Counters,
    end_time: Time,
    max_in_flight: u32,
}

impl<M: SimMemory> std::fmt::Debug for Part<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("name", &self.cfg.name)
            .field("now", &self.q.q.now())
            .field("flows", &self.flows.len())
            .finish_non_exhaustive()
    }
}

/// Scatter/gather entries covering `len` bytes at `addr` (an entry holds at most 2^32 − 1).
fn sg_list(addr: u64, len: u64, lkey: u32) -> Vec<Sge> {
    const CHUNK: u64 = 1 << 30;
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

/// ECMP: which of `n` equal-cost ports a packet whose mixed hash is `h` takes, `h mod n`.
/// The usual set sizes (k/2 for a k-ary fat-tree, the spines of a leaf-spine) are spelled out
/// so that the compiler turns the division, once per switch hop, into a multiplication.
#[inline]
fn ecmp_pick(h: u64, n: usize) -> usize {
    (match n {
        2 => h % 2,
        3 => h % 3,
        4 => h % 4,
        6 => h % 6,
        8 => h % 8,
        16 => h % 16,
        _ => h % n as u64,
    }) as usize
}

fn is_control(op: Opcode) -> bool {
    op == Opcode::RC_ACKNOWLEDGE || op == Opcode::RC_IRN_READ_ACK || op == Opcode::CNP
}

impl<M: SimMemory> Part<M> {
    /// Sets up partition `me` of the network (`part_of`: each node's partition) and its ends
    /// of the flows; nothing runs yet.
    pub(crate) fn new(
        cfg: SimConfig,
        topo: Topology,
        flows: Vec<Flow>,
        part_of: Arc<[u16]>,
        me: u16,
    ) -> Part<M> {
        let net = &cfg.network;
        let data_prio = net.priority(net.data_dscp);
        let ctrl_prio = if net.control_priority {
            net.priority(net.control_dscp)
        } else {
            data_prio
        };
        let mut classes = vec![data_prio, ctrl_prio];
        classes.sort_unstable_by(|a, b| b.cmp(a));
        classes.dedup();
        let mut class_of = [255u8; 8];
        for (i, &p) in classes.iter().enumerate() {
            class_of[p as usize] = i as u8;
        }
        let mut lossless = [false; 8];
        if net.pfc {
            for &p in &net.lossless_priorities {
                lossless[p as usize & 7] = true;
            }
        }
        let host_rate = topo.host_port(0).rate_bps;
        let mtu_wire = u64::from(cfg.network.mtu + FRAME_OVERHEAD + 12 + 16 + 16);
        // Upstream link round trip at its rate, plus a frame in flight each way.
        let default_headroom = {
            let p = topo
                .nodes
                .iter()
                .flat_map(|n| n.ports.iter())
                .fold((0u64, Dur::ZERO), |(r, d), p| {
                    (r.max(p.rate_bps), d.max(p.delay))
                });
            let rtt_bytes =
                (u128::from(p.0) * u128::from(p.1.as_picos()) * 2 / 8 / 1_000_000_000_000) as u64;
            rtt_bytes + 2 * mtu_wire
        };
        // A lossless queue pauses its upstream at buffer − headroom (at least one frame).
        let xoff = |buffer: u64, headroom: Option<u64>| {
            buffer
                .saturating_sub(headroom.unwrap_or(default_headroom))
                .max(mtu_wire)
        };
        let xoff_bytes = xoff(cfg.switch.buffer_bytes, cfg.switch.pfc_headroom_bytes);
        let nic_xoff_bytes = xoff(cfg.nic.rx_buffer_bytes, cfg.nic.rx_pfc_headroom_bytes);
        let rx_rate = cfg.nic.rx_gbps.map(|g| (g * 1e9).round() as u64);
        debug_assert!(classes.len() <= MAX_CLASSES);
        let mine = |n: u32| part_of[n as usize] == me;
        let switches = (topo.hosts..topo.nodes.len() as u32)
            .map(|n| {
                Switch::new(
                    // Another partition's switch is never touched: no ports here.
                    if mine(n) {
                        topo.nodes[n as usize].ports.len()
                    } else {
                        0
                    },
                    mix(cfg.seed ^ (u64::from(n) << 32)),
                    cfg.switch.model,
                )
            })
            .collect();
        let nics = (0..topo.hosts)
            .map(|h| Nic {
                mem: M::create(mix(cfg.seed ^ 0xA5A5 ^ u64::from(h))),
                slots: Vec::new(),
                free: Vec::new(),
                ready: VecDeque::new(),
                busy_until: Time::ZERO,
                wake: false,
                paused: [false; 8],
                paused_since: [Time::ZERO; 8],
                stats: PortStats::default(),
                rx: VecDeque::new(),
                rx_held: Ingress::EMPTY,
            })
            .collect();
        let tr = &cfg.transport;
        let bdp_cap = tr.bdp_cap.unwrap_or_else(|| {
            bdp_cap_packets(
                host_rate,
                topo.max_rtt(),
                cfg.network.mtu + FRAME_OVERHEAD + 12 + 16 + 16,
            )
        });
        let irn_rto = RtoPolicy::Irn {
            low: us(tr.rto_low_us),
            high: us(tr.rto_high_us),
            n: tr.rto_n,
        };
        let roce_rto = if net.pfc && !tr.roce_timeout_with_pfc {
            RtoPolicy::Disabled
        } else {
            RtoPolicy::Fixed(us(tr.roce_rto_us))
        };
        let recovery = match tr.recovery {
            Recovery::Irn => RecoveryConfig::irn(),
            Recovery::IrnGoBackN => RecoveryConfig::irn_go_back_n(),
            Recovery::IrnNoBdpFc => RecoveryConfig::irn_without_bdp_fc(),
            Recovery::IrnNoSack => RecoveryConfig::irn_without_sack(),
            Recovery::Roce => RecoveryConfig::roce(),
            Recovery::RoceGoBack0 => RecoveryConfig::roce_go_back_0(),
        };
        let recovery = RecoveryConfig {
            bdp_cap: recovery.bdp_cap.map(|_| bdp_cap),
            rto: if tr.recovery.is_irn() {
                irn_rto
            } else {
                roce_rto
            },
            ..recovery
        };
        let qp_cfg = QpConfig {
            qpn: 0,
            recovery,
            cc: cc_factory(&cfg, bdp_cap, topo.max_rtt()),
            // Only DCQCN reads CNPs: under any other controller they would be wasted bytes.
            cnp_interval: (tr.cc == CcKind::Dcqcn).then(|| us(cfg.cc.dcqcn.cnp_interval_us)),
            line_rate_bps: host_rate,
            retry_limit: Some(u32::MAX / 2),
            max_send_wr: 16,
            max_recv_wr: 16,
            ..QpConfig::default()
        };
        let qp_attr = QpAttr {
            path_mtu: cfg.network.mtu,
            ..QpAttr::default()
        };
        let nodes = topo.nodes.len();
        let teardown = topo.max_delay();
        let mut starts: Vec<(Time, u64, u32, u8)> = (0..flows.len() as u32)
            .flat_map(|i| {
                let f = flows[i as usize];
                [REQ, RESP].map(|end| {
                    mine(end_host(cfg.transport.op, &f, end)).then_some((
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
        let mut sim = Part {
            part_of,
            me,
            outbox: Vec::new(),
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
            loss_rng: (0..nodes)
                .map(|n| Rng::stream(cfg.seed, (11 << 32) | n as u64))
                .collect(),
            ecn_rng: (0..nodes)
                .map(|n| Rng::stream(cfg.seed, (12 << 32) | n as u64))
                .collect(),
            q: Events {
                q: EventQueue::new(),
                origin: 0,
                count: vec![0; nodes],
            },
            packets: Vec::new(),
            payloads: Vec::new(),
            meta: Vec::new(),
            free_packets: Vec::new(),
            switches,
            nics,
            done_flows: 0,
            qp_cfg,
            qp_attr,
            class_of,
            classes,
            lossless,
            data_prio,
            ctrl_prio,
            xoff_bytes,
            nic_xoff_bytes,
            rx_rate,
            buf: Vec::new(),
            totals: Counters::default(),
            end_time: Time::ZERO,
            max_in_flight: 0,
            flows,
            topo,
            cfg,
        };
        for i in 0..sim.records.len() {
            let f = sim.flows[i];
            sim.records[i].ideal = sim.ideal_fct(f.src, f.dst, f.size);
        }
        if let Some(&(at, key, ..)) = sim.starts.first() {
            sim.q.q.push_keyed(at, key, Ev::FlowStart);
        }
        let last = sim.flows.last().map_or(Time::ZERO, |f| f.start);
        sim.end_time = last + Dur::from_picos((sim.cfg.workload.drain_us * 1e6) as u64);
        sim
    }

    /// The BDP cap the queue pairs use (packets), if BDP-FC is on.
    pub(crate) fn bdp_cap(&self) -> Option<u32> {
        self.qp_cfg.recovery.bdp_cap
    }

    /// The pause threshold of an input-queued switch port, in bytes.
    pub(crate) fn xoff_bytes(&self) -> u64 {
        self.xoff_bytes
    }

    /// The completion time of a `size`-byte Write from `src` to `dst` alone in the network:
    /// every byte serialized once at the slowest rate, the largest packet's serialization once
    /// more at each further hop (store and forward), the propagation delay of every link, and the ACK's way back. Packets
    /// count a fixed 78 bytes of headers (standard RoCE Write: Ethernet, IPv4, UDP, BTH, RETH,
    /// ICRC, FCS) whatever the transport, so that slowdowns of different transports share
    /// their denominator.
    pub(crate) fn ideal_fct(&self, src: u32, dst: u32, size: u64) -> Dur {
        let links = u64::from(self.topo.hops(src, dst));
        let rate = self.topo.slowest_rate();
        let mtu = u64::from(self.cfg.network.mtu);
        let n = size.div_ceil(mtu).max(1);
        let largest = size.min(mtu);
        let delay = self.topo.host_port(src).delay;
        let ser = |b: u64| Dur::transmission(b, rate);
        // Through equal-rate store-and-forward links, the last packet leaves the last link
        // after every byte's serialization plus, per further link, the largest packet's.
        ser(size + 78 * n)
            + ser(largest + 78).saturating_mul(links.saturating_sub(1))
            + (delay + ser(66)).saturating_mul(links)
            + delay.saturating_mul(links)
    }

    /// Handles this partition's events before `limit` that are not past the end of the run.
    pub(crate) fn run_until(&mut self, limit: Time) {
        let limit = limit.min(self.end_time + Dur::from_picos(1));
        while let Some((now, ev)) = self.q.q.pop_before(limit) {
            self.dispatch(now, ev);
            // Debug builds (the test suite) audit the switches' books as they go.
            if cfg!(debug_assertions) && self.q.q.processed() % (1 << 14) == 0 {
                if let Err(e) = self.check_invariants() {
                    panic!("at {now:?}, after {} events: {e}", self.q.q.processed());
                }
            }
        }
    }

    /// The time of this partition's next event, if it has one before the end of the run.
    pub(crate) fn next_time(&self) -> Option<Time> {
        self.q.q.peek_time().filter(|&t| t <= self.end_time)
    }

    /// The host of flow `i`'s requester.
    pub(crate) fn requester(&self, i: usize) -> u32 {
        self.end_host(&self.flows[i], REQ)
    }

    /// Flows whose requester completed here.
    pub(crate) fn done_flows(&self) -> usize {
        self.done_flows
    }

    fn dispatch(&mut self, now: Time, ev: Ev) {
        self.q.origin = match ev {
            Ev::Arrive { node, .. } | Ev::TxDone { node, .. } | Ev::Pfc { node, .. } => node,
            Ev::RxDone { host } | Ev::QpTimer { host, .. } | Ev::FlowEnd { host, .. } => host,
            // Set below, once the flow end (and so its host) is known.
            Ev::FlowStart => WORKLOAD,
        };
        match ev {
            Ev::Arrive {
                node,
                port,
                pkt,
                hop,
            } => {
                if self.cfg.network.link_loss > 0.0
                    && self.loss_rng[node as usize].chance(self.cfg.network.link_loss)
                {
                    self.drop_packet(node, port, pkt);
                } else if node < self.topo.hosts {
                    if self.rx_rate.is_some() {
                        self.nic_buffer(now, node, pkt, hop);
                    } else {
                        self.nic_receive(now, node, pkt, hop.ecn);
                    }
                } else {
                    self.switch_receive(now, node, port, pkt, hop);
                }
            }
            Ev::TxDone { node, port } => {
                if node < self.topo.hosts {
                    self.nics[node as usize].wake = false;
                    self.nic_send(now, node);
                } else {
                    let s = (node - self.topo.hosts) as usize;
                    self.switches[s].ports[port as usize].wake = false;
                    self.switch_send(now, node, port as usize);
                }
            }
            Ev::RxDone { host } => self.nic_rx_done(now, host),
            Ev::Pfc {
                node,
                port,
                prio,
                pause,
            } => self.pfc_receive(now, node, port, prio, pause),
            Ev::QpTimer { host, slot, gen } => {
                let s = &mut self.nics[host as usize].slots[slot as usize];
                if s.gen != gen || s.timer != Some(now) {
                    return;
                }
                s.timer = None;
                if let Some(qp) = s.qp.as_mut() {
                    if qp.poll_timeout().is_some_and(|t| t <= now) {
                        qp.handle_timeout(now);
                    }
                }
                self.touch(now, host, slot);
            }
            Ev::FlowStart => {
                let Some(&(_, _, flow, end)) = self.starts.get(self.next_start) else {
                    return;
                };
                self.next_start += 1;
                if let Some(&(at, key, ..)) = self.starts.get(self.next_start) {
                    self.q.q.push_keyed(at, key, Ev::FlowStart);
                }
                let (i, end) = (flow as usize, usize::from(end));
                // What the set-up schedules comes from the end's host.
                self.q.origin = self.end_host(&self.flows[i], end);
                self.start_end(now, i, end);
            }
            Ev::FlowEnd { host, flow } => self.end_responder(host, flow as usize),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Flows and queue pairs

    fn new_qp(&mut self, now: Time, host: u32, flow: u32, end: usize, peer: u32) -> u32 {
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
                });
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
        slot
    }

    /// The seed of flow `i`'s source bytes (payload runs).
    fn fill_seed(&self, i: usize) -> u64 {
        mix(self.cfg.seed ^ ((i as u64) << 1))
    }

    /// The host of end `end` of flow `f` ([`end_host`] under this run's operation).
    fn end_host(&self, f: &Flow, end: usize) -> u32 {
        end_host(self.cfg.transport.op, f, end)
    }

    /// Sets up end `end` of flow `i` at its host: its buffer and queue pair, connected to the
    /// other end's (whose QPN and buffer it knows without asking: see [`qpn`] and
    /// [`SimMemory::known_buffer`]); the requester posts the flow's work request.
    fn start_end(&mut self, now: Time, i: usize, end: usize) {
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
            psn(self.cfg.seed ^ i as u64),
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
    fn touch(&mut self, now: Time, host: u32, slot: u32) {
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

    /// Lets a NIC send now if its link is free, or once it is.
    fn kick_nic(&mut self, now: Time, host: u32) {
        let nic = &mut self.nics[host as usize];
        if nic.wake {
            return;
        }
        if now >= nic.busy_until {
            self.nic_send(now, host);
        } else {
            nic.wake = true;
            self.q.push(
                nic.busy_until,
                Ev::TxDone {
                    node: host,
                    port: 0,
                },
            );
        }
    }

    /// Lets a switch output send now if it is free, or once it is.
    fn kick_port(&mut self, now: Time, node: u32, out: usize) {
        let p = &mut self.switches[(node - self.topo.hosts) as usize].ports[out];
        if p.wake {
            return;
        }
        if now >= p.busy_until {
            self.switch_send(now, node, out);
        } else {
            p.wake = true;
            self.q.push(
                p.busy_until,
                Ev::TxDone {
                    node,
                    port: out as u16,
                },
            );
        }
    }

    /// Makes sure an event wakes the queue pair at its next deadline (at most one pending
    /// event per queue pair, unless its deadline moved earlier). A deadline already past — a
    /// pacing slot that ended while the queue pair waited for its turn — is due now: the event
    /// list would run it now anyway, and the handler only accepts the event its slot recorded.
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

    /// The requester of flow `i` completed with `status`: record it, destroy the requester's
    /// queue pair, and have the responder's destroyed a teardown delay later.
    fn finish_flow(&mut self, now: Time, i: usize, status: WcStatus) {
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
    fn end_responder(&mut self, host: u32, i: usize) {
        let slot = std::mem::replace(&mut self.states[i].slot[RESP], NIL);
        if slot != NIL {
            self.destroy(host, slot, self.states[i].buf[RESP]);
        }
    }

    /// Destroys the queue pair in `slot` of `host` (its counters go to the totals) and releases
    /// its buffer.
    fn destroy(&mut self, host: u32, slot: u32, buf: (u64, MrKeys)) {
        let nic = &mut self.nics[host as usize];
        let s = &mut nic.slots[slot as usize];
        if let Some(qp) = s.qp.take() {
            self.totals += *qp.counters();
        }
        s.gen = s.gen.wrapping_add(1);
        s.timer = None;
        nic.free.push(slot);
        nic.mem.release(buf.0, buf.1);
    }

    // -----------------------------------------------------------------------------------------
    // NICs

    /// Stores a new packet; `payload` is kept only when the memory model holds bytes.
    fn alloc_packet(&mut self, p: Packet, payload: Vec<u8>, m: Meta) -> u32 {
        let i = match self.free_packets.pop() {
            Some(i) => {
                self.packets[i as usize] = p;
                self.meta[i as usize] = m;
                i
            }
            None => {
                self.packets.push(p);
                self.meta.push(m);
                if M::HOLDS_BYTES {
                    self.payloads.push(Vec::new());
                }
                (self.packets.len() - 1) as u32
            }
        };
        if M::HOLDS_BYTES {
            self.payloads[i as usize] = payload;
        }
        i
    }

    fn free_packet(&mut self, i: u32) {
        if M::HOLDS_BYTES {
            self.payloads[i as usize] = Vec::new();
        }
        self.free_packets.push(i);
    }

    fn nic_send(&mut self, now: Time, host: u32) {
        let data_paused = self.nics[host as usize].paused[self.data_prio as usize];
        let ctrl_paused = self.nics[host as usize].paused[self.ctrl_prio as usize];
        let separate = self.ctrl_prio != self.data_prio;
        let nic = &mut self.nics[host as usize];
        if now < nic.busy_until {
            return;
        }
        let mut tries = nic.ready.len();
        while tries > 0 {
            tries -= 1;
            let Some(slot) = nic.ready.pop_front() else {
                break;
            };
            let s = &mut nic.slots[slot as usize];
            let Some(qp) = s.qp.as_mut() else {
                s.ready = false;
                continue;
            };
            let t = if !(data_paused || separate && ctrl_paused && qp.has_control()) {
                qp.poll_transmit(now, &nic.mem, &mut self.buf)
            } else if separate && !ctrl_paused {
                qp.poll_control(&nic.mem, &mut self.buf)
            } else {
                None
            };
            let Some(t) = t else {
                if data_paused || ctrl_paused {
                    // It may still have data once the pause ends.
                    nic.ready.push_back(slot);
                } else {
                    s.ready = false;
                }
                continue;
            };
            // Round-robin: back of the list if it may have more; otherwise out of it (a
            // receiver that just sent its ACK usually has nothing more) until an input
            // gives it something, so that the NIC does not wake up for it.
            if qp.may_transmit() {
                nic.ready.push_back(slot);
            } else {
                s.ready = false;
            }
            self.max_in_flight = self
                .max_in_flight
                .max(qp.in_flight())
                .max(qp.responses_in_flight());
            // Sending may have started the retransmission timer.
            Self::arm_timer(&mut self.q, now, s, host, slot);
            let dest_qpn = t.ib.bth.dest_qpn;
            let peer_host = s.peer;
            let (flow, end) = (s.flow, usize::from(s.end));
            let control = is_control(t.ib.bth.opcode);
            let prio = if control {
                self.ctrl_prio
            } else {
                self.data_prio
            };
            // At most a 4096-byte MTU (validated) plus headers: it fits.
            let wire = u16::try_from(t.ib.buffer_len() as u32 + FRAME_OVERHEAD).unwrap_or(u16::MAX);
            let hash = mix((u64::from(host) << 40)
                ^ (u64::from(peer_host) << 20)
                ^ u64::from(dest_qpn)
                ^ (u64::from(qpn(flow, end)) << 48)) as u32;
            let payload = if M::HOLDS_BYTES {
                std::mem::take(&mut self.buf)
            } else {
                Vec::new()
            };
            // The QP may have written bytes into `buf` even when the memory holds none: keep
            // the allocation for next time.
            let hop = Hop {
                dst: peer_host,
                hash,
                wire,
                prio,
                ecn: t.ecn,
            };
            let p = Packet {
                ib: t.ib,
                flow,
                to: (1 - end) as u8,
            };
            let pkt = self.alloc_packet(p, payload, Meta { hop, next: NIL });
            let nic = &mut self.nics[host as usize];
            nic.stats.tx_packets += 1;
            nic.stats.tx_bytes += u64::from(wire);
            // Look again when the link is free if some queue pair may have more; otherwise
            // the next one to become ready kicks the NIC.
            let more = !nic.ready.is_empty();
            let done = self.put_on_link(now, host, 0, pkt, hop, more);
            let nic = &mut self.nics[host as usize];
            nic.busy_until = done;
            nic.wake = more;
            return;
        }
    }

    /// Serializes `pkt` onto `node`'s port `out` from `now`: schedules its arrival at the peer
    /// and, when `wake`, the node's `TxDone` for that port. Returns when the link is free.
    fn put_on_link(
        &mut self,
        now: Time,
        node: u32,
        out: usize,
        pkt: u32,
        hop: Hop,
        wake: bool,
    ) -> Time {
        let port = self.topo.nodes[node as usize].ports[out];
        let done = now + port.transmission(u64::from(hop.wire));
        if wake {
            self.q.push(
                done,
                Ev::TxDone {
                    node,
                    port: out as u16,
                },
            );
        }
        self.schedule(
            done + port.delay,
            port.peer,
            Ev::Arrive {
                node: port.peer,
                port: port.peer_port,
                pkt,
                hop,
            },
        );
        done
    }

    /// Schedules `ev`, which happens at `node`: into this partition's event list, or the
    /// outbox when another partition owns `node` (only ever a link's delay or more ahead).
    #[inline]
    fn schedule(&mut self, at: Time, node: u32, ev: Ev) {
        if self.part_of[node as usize] == self.me {
            self.q.push(at, ev);
        } else {
            self.send_away(at, node, ev);
        }
    }

    #[cold]
    fn send_away(&mut self, at: Time, node: u32, ev: Ev) {
        let key = self.q.next_key();
        let packet = match ev {
            Ev::Arrive { pkt, .. } => {
                let p = self.packets[pkt as usize];
                let payload = if M::HOLDS_BYTES {
                    std::mem::take(&mut self.payloads[pkt as usize])
                } else {
                    Vec::new()
                };
                self.free_packet(pkt);
                Some((p, payload))
            }
            _ => None,
        };
        self.outbox.push(Msg {
            to: self.part_of[node as usize],
            at,
            key,
            ev,
            packet,
        });
    }

    /// Takes in an event from another partition.
    pub(crate) fn deliver(&mut self, m: Msg) {
        let ev = match (m.ev, m.packet) {
            (
                Ev::Arrive {
                    node, port, hop, ..
                },
                Some((p, payload)),
            ) => {
                let pkt = self.alloc_packet(p, payload, Meta { hop, next: NIL });
                Ev::Arrive {
                    node,
                    port,
                    pkt,
                    hop,
                }
            }
            (ev, _) => ev,
        };
        self.q.q.push_keyed(m.at, m.key, ev);
    }

    /// The events for other partitions scheduled since the last call.
    pub(crate) fn take_outbox(&mut self) -> std::vec::Drain<'_, Msg> {
        self.outbox.drain(..)
    }

    fn nic_receive(&mut self, now: Time, host: u32, pkt: u32, ecn: Ecn) {
        let p = &self.packets[pkt as usize];
        let slot = self.states[p.flow as usize].slot[usize::from(p.to)];
        let payload = if M::HOLDS_BYTES {
            &self.payloads[pkt as usize][..]
        } else {
            &[]
        };
        let nic = &mut self.nics[host as usize];
        // NIL (the end is gone, or not set up yet) finds no slot.
        let live = nic.slots.get_mut(slot as usize).and_then(|s| s.qp.as_mut());
        match live {
            Some(qp) => qp.handle_packet(now, &p.ib, payload, ecn, &mut nic.mem),
            None => {
                // A straggler for a queue pair already destroyed.
                self.free_packet(pkt);
                return;
            }
        }
        self.free_packet(pkt);
        self.touch(now, host, slot);
    }

    /// The class of priority `prio` (priorities without one share the lowest).
    fn class(&self, prio: u8) -> usize {
        match self.class_of[prio as usize & 7] {
            255 => self.classes.len() - 1,
            c => c as usize,
        }
    }

    /// A frame reaches a NIC whose receive pipeline has a rate: it waits in the receive
    /// buffer (or is dropped, lossy and the buffer full), and the NIC pauses its switch when
    /// a lossless class's share passes the threshold.
    fn nic_buffer(&mut self, now: Time, host: u32, pkt: u32, hop: Hop) {
        let c = self.class(hop.prio);
        let lossless = self.lossless[hop.prio as usize & 7];
        let wire = u64::from(hop.wire);
        let nic = &mut self.nics[host as usize];
        if nic.rx_held.total() + wire > self.cfg.nic.rx_buffer_bytes {
            if lossless {
                nic.stats.headroom_overflow += 1;
            } else {
                self.drop_packet(host, 0, pkt);
                return;
            }
        }
        nic.rx_held.bytes[c] += wire;
        nic.rx.push_back(RxFrame {
            pkt,
            hop,
            class: c as u8,
        });
        if nic.rx.len() == 1 {
            self.nic_rx_start(now, host);
        }
        let nic = &mut self.nics[host as usize];
        if lossless && nic.rx_held.pause_above(c, self.nic_xoff_bytes) {
            self.send_pfc(now, host, 0, hop.prio, true);
        }
    }

    /// Starts processing the first frame of `host`'s receive buffer.
    fn nic_rx_start(&mut self, now: Time, host: u32) {
        if let (Some(f), Some(rate)) = (self.nics[host as usize].rx.front(), self.rx_rate) {
            let done = now + Dur::transmission(u64::from(f.hop.wire), rate);
            self.q.push(done, Ev::RxDone { host });
        }
    }

    /// The receive pipeline is done with its first frame: the queue pair gets it.
    fn nic_rx_done(&mut self, now: Time, host: u32) {
        let nic = &mut self.nics[host as usize];
        let Some(f) = nic.rx.pop_front() else {
            return;
        };
        let c = usize::from(f.class);
        nic.rx_held.bytes[c] -= u64::from(f.hop.wire);
        let gap = self.cfg.switch.pfc_resume_gap_bytes;
        if nic.rx_held.resume_below(c, self.nic_xoff_bytes, gap) {
            self.send_pfc(now, host, 0, f.hop.prio, false);
        }
        self.nic_rx_start(now, host);
        self.nic_receive(now, host, f.pkt, f.hop.ecn);
    }

    // -----------------------------------------------------------------------------------------
    // Switches

    /// The counters of `node`'s `port` (a NIC has one port).
    fn port_stats(&mut self, node: u32, port: u16) -> &mut PortStats {
        if node < self.topo.hosts {
            &mut self.nics[node as usize].stats
        } else {
            &mut self.switches[(node - self.topo.hosts) as usize].stats[port as usize]
        }
    }

    fn drop_packet(&mut self, node: u32, port: u16, pkt: u32) {
        self.free_packet(pkt);
        self.port_stats(node, port).drops += 1;
    }

    fn switch_receive(&mut self, now: Time, node: u32, inp: u16, pkt: u32, mut hop: Hop) {
        let si = (node - self.topo.hosts) as usize;
        let Hop {
            dst,
            hash,
            prio,
            wire,
            ..
        } = hop;
        let wire = u64::from(wire);
        let c = self.class(prio);
        let hops = self.topo.next_hops(node, dst);
        let sw = &mut self.switches[si];
        let out = match hops.len() {
            0 => {
                self.drop_packet(node, inp, pkt);
                return;
            }
            1 => hops[0] as usize,
            n => hops[ecmp_pick(mix(u64::from(hash) ^ sw.salt), n)] as usize,
        };
        let lossless = self.lossless[prio as usize & 7];
        let i = inp as usize;
        let buffer = self.cfg.switch.buffer_bytes;
        // Admission.
        match self.cfg.switch.model {
            SwitchModel::InputQueued => {
                if sw.ports[i].ingress.total() + wire > buffer {
                    if lossless {
                        sw.stats[i].headroom_overflow += 1;
                    } else {
                        sw.stats[i].drops += 1;
                        self.free_packet(pkt);
                        return;
                    }
                }
            }
            SwitchModel::SharedBuffer => {
                let free = buffer.saturating_sub(sw.used);
                let limit = (self.cfg.switch.dt_alpha * free as f64) as u64;
                if lossless {
                    if sw.used + wire > buffer {
                        sw.stats[i].headroom_overflow += 1;
                    }
                } else if sw.used + wire > buffer || sw.ports[out].egress[c] + wire > limit {
                    sw.stats[i].drops += 1;
                    self.free_packet(pkt);
                    return;
                }
            }
        }
        // ECN marking on the egress queue this packet joins.
        let ecn_mode = self.cfg.switch.ecn;
        if ecn_mode != EcnMode::Off && matches!(hop.ecn, Ecn::Ect0 | Ecn::Ect1) {
            let q = sw.ports[out].egress[c];
            let s = &self.cfg.switch;
            let mark = match ecn_mode {
                EcnMode::Threshold => q > s.ecn_kmin_bytes,
                EcnMode::Red => {
                    if q <= s.ecn_kmin_bytes {
                        false
                    } else if q >= s.ecn_kmax_bytes {
                        true
                    } else {
                        let pr = s.ecn_pmax * (q - s.ecn_kmin_bytes) as f64
                            / (s.ecn_kmax_bytes - s.ecn_kmin_bytes).max(1) as f64;
                        self.ecn_rng[node as usize].chance(pr)
                    }
                }
                EcnMode::Off => false,
            };
            if mark {
                hop.ecn = Ecn::Ce;
                self.meta[pkt as usize].hop.ecn = Ecn::Ce;
                sw.stats[out].ecn_marked += 1;
            }
        }
        // Nothing queued for an idle output: the packet leaves at once (exactly as queueing it
        // and serving the queue would do, without touching queue or packet metadata).
        let port = &sw.ports[out];
        let through = port.egress.iter().all(|&b| b == 0)
            && !port.paused[c]
            && !port.wake
            && now >= port.busy_until;
        sw.ports[i].ingress.bytes[c] += wire;
        sw.ports[out].egress[c] += wire;
        sw.used += wire;
        if through {
            self.pause_if_full(now, node, si, inp, c, prio, lossless);
            self.depart(now, node, si, out, c, inp, pkt, hop);
            return;
        }
        match self.cfg.switch.model {
            SwitchModel::InputQueued => {
                let at = sw.voq_at(out, c, inp);
                if sw.voq[at].push(&mut self.meta, pkt) {
                    sw.active_push(out, c, inp);
                }
            }
            SwitchModel::SharedBuffer => sw.oq[out * MAX_CLASSES + c].push_back((pkt, inp)),
        }
        self.pause_if_full(now, node, si, inp, c, prio, lossless);
        self.kick_port(now, node, out);
    }

    /// PFC: pauses the upstream of ingress (`inp`, class `c`) once it holds more than its
    /// threshold.
    #[allow(clippy::too_many_arguments)]
    fn pause_if_full(
        &mut self,
        now: Time,
        node: u32,
        si: usize,
        inp: u16,
        c: usize,
        prio: u8,
        lossless: bool,
    ) {
        if lossless {
            let threshold = self.pause_threshold(si);
            let port = &mut self.switches[si].ports[inp as usize];
            if port.ingress.pause_above(c, threshold) {
                self.send_pfc(now, node, inp, prio, true);
            }
        }
    }

    /// The ingress occupancy above which a lossless (port, priority) pauses its upstream.
    fn pause_threshold(&self, si: usize) -> u64 {
        match self.cfg.switch.model {
            SwitchModel::InputQueued => self.xoff_bytes,
            SwitchModel::SharedBuffer => {
                // Dynamic threshold over the shared part (the buffer minus every port's
                // headroom reservation).
                let sw = &self.switches[si];
                let headroom = self.cfg.switch.buffer_bytes
                    - self.xoff_bytes.min(self.cfg.switch.buffer_bytes);
                let shared = self
                    .cfg
                    .switch
                    .buffer_bytes
                    .saturating_sub(headroom * sw.ports.len() as u64);
                let free = shared.saturating_sub(sw.used);
                ((self.cfg.switch.dt_alpha * free as f64) as u64).max(2048)
            }
        }
    }

    fn switch_send(&mut self, now: Time, node: u32, out: usize) {
        let si = (node - self.topo.hosts) as usize;
        let model = self.cfg.switch.model;
        let nc = self.classes.len();
        let sw = &mut self.switches[si];
        if now < sw.ports[out].busy_until {
            return;
        }
        for c in 0..nc {
            if sw.ports[out].paused[c] {
                continue;
            }
            let picked = match model {
                SwitchModel::InputQueued => match sw.active_pop(out, c) {
                    Some(i) => {
                        let at = sw.voq_at(out, c, i);
                        let pkt = sw.voq[at].pop(&self.meta);
                        if !sw.voq[at].is_empty() {
                            sw.active_push(out, c, i);
                        }
                        pkt.map(|p| (p, i))
                    }
                    None => None,
                },
                SwitchModel::SharedBuffer => sw.oq[out * MAX_CLASSES + c].pop_front(),
            };
            let Some((pkt, inp)) = picked else { continue };
            let hop = self.meta[pkt as usize].hop;
            self.depart(now, node, si, out, c, inp, pkt, hop);
            return;
        }
    }

    /// Takes `pkt` (class `c`, arrived through `inp`) out of the switch's books and puts it
    /// on the link of `out`, which is free.
    #[allow(clippy::too_many_arguments)]
    fn depart(
        &mut self,
        now: Time,
        node: u32,
        si: usize,
        out: usize,
        c: usize,
        inp: u16,
        pkt: u32,
        hop: Hop,
    ) {
        let wire = u64::from(hop.wire);
        let i = inp as usize;
        let sw = &mut self.switches[si];
        sw.ports[i].ingress.bytes[c] -= wire;
        sw.ports[out].egress[c] -= wire;
        sw.used -= wire;
        sw.stats[out].tx_packets += 1;
        sw.stats[out].tx_bytes += wire;
        if sw.ports[i].ingress.xoff[c] {
            let t = self.pause_threshold(si);
            let gap = self.cfg.switch.pfc_resume_gap_bytes;
            if self.switches[si].ports[i].ingress.resume_below(c, t, gap) {
                self.send_pfc(now, node, inp, hop.prio, false);
            }
        }
        // Wake up when this frame is out only if something else waits for this output.
        let wake = self.switches[si].ports[out].egress.iter().any(|&b| b > 0);
        let done = self.put_on_link(now, node, out, pkt, hop, wake);
        let port = &mut self.switches[si].ports[out];
        port.busy_until = done;
        port.wake = wake;
    }

    fn send_pfc(&mut self, now: Time, node: u32, port: u16, prio: u8, pause: bool) {
        let p = self.topo.nodes[node as usize].ports[port as usize];
        self.port_stats(node, port).pause_sent += 1;
        let at = now + p.transmission(PFC_FRAME) + p.delay;
        self.schedule(
            at,
            p.peer,
            Ev::Pfc {
                node: p.peer,
                port: p.peer_port,
                prio,
                pause,
            },
        );
    }

    fn pfc_receive(&mut self, now: Time, node: u32, port: u16, prio: u8, pause: bool) {
        if node < self.topo.hosts {
            let nic = &mut self.nics[node as usize];
            nic.stats.pause_received += 1;
            let p = prio as usize & 7;
            if pause && !nic.paused[p] {
                nic.paused[p] = true;
                nic.paused_since[p] = now;
            } else if !pause && nic.paused[p] {
                nic.paused[p] = false;
                nic.stats.paused = nic.stats.paused + (now - nic.paused_since[p]);
                // Queue pairs with data were kept in the ready list while paused.
                self.kick_nic(now, node);
            }
            return;
        }
        let si = (node - self.topo.hosts) as usize;
        let c = self.class_of[prio as usize & 7];
        let sw = &mut self.switches[si];
        sw.stats[port as usize].pause_received += 1;
        if c == 255 {
            return;
        }
        let (p, c) = (port as usize, c as usize);
        let oc = p * MAX_CLASSES + c;
        if pause && !sw.ports[p].paused[c] {
            sw.ports[p].paused[c] = true;
            sw.paused_since[oc] = now;
        } else if !pause && sw.ports[p].paused[c] {
            sw.ports[p].paused[c] = false;
            let d = now - sw.paused_since[oc];
            sw.stats[port as usize].paused = sw.stats[port as usize].paused + d;
            self.kick_port(now, node, port as usize);
        }
    }

    /// Ends the run at `now` (the last event of any partition).
    pub(crate) fn finish(&mut self, now: Time) {
        // Close pause intervals still open, and count live queue pairs.
        for nic in &mut self.nics {
            for p in 0..8 {
                if nic.paused[p] {
                    nic.stats.paused = nic.stats.paused + (now - nic.paused_since[p]);
                    nic.paused[p] = false;
                }
            }
            for s in &nic.slots {
                if let Some(qp) = &s.qp {
                    self.totals += *qp.counters();
                }
            }
        }
        for sw in &mut self.switches {
            for (p, port) in sw.ports.iter_mut().enumerate() {
                for c in 0..MAX_CLASSES {
                    if port.paused[c] {
                        let since = sw.paused_since[p * MAX_CLASSES + c];
                        sw.stats[p].paused = sw.stats[p].paused + (now - since);
                        port.paused[c] = false;
                    }
                }
            }
        }
    }

    /// The state of flow `i`'s queue pairs, for debugging a stuck flow.
    pub(crate) fn debug_flow(&self, i: usize) -> String {
        let Some(st) = self.states.get(i) else {
            return format!("flow {i}: no such flow");
        };
        let f = self.flows[i];
        let mut out = String::new();
        for end in [REQ, RESP] {
            let (h, s) = (self.end_host(&f, end), st.slot[end]);
            if self.part_of[h as usize] != self.me {
                continue;
            }
            let Some(slot) = self.nics[h as usize].slots.get(s as usize) else {
                out += &format!("host {h}: no live queue pair\n");
                continue;
            };
            let nic = &self.nics[h as usize];
            out += &format!(
                "host {h} NIC: wake {} busy until {:?} ready {:?} paused {:?}\n",
                nic.wake, nic.busy_until, nic.ready, nic.paused
            );
            out += &format!(
                "host {h} slot {s} timer {:?} ready {}: {:#?}\n",
                slot.timer,
                slot.ready,
                slot.qp
                    .as_ref()
                    .map(|q| (q.poll_timeout(), q.in_flight(), q.state()))
            );
            out += &format!("{:?}\n", slot.qp);
        }
        out
    }

    /// The per-flow records, in flow order.
    pub(crate) fn records(&self) -> &[FlowRecord] {
        &self.records
    }

    /// Simulated time reached.
    pub(crate) fn now(&self) -> Time {
        self.q.q.now()
    }

    /// Events processed.
    pub(crate) fn events(&self) -> u64 {
        self.q.q.processed()
    }

    /// The topology.
    pub(crate) fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Network totals.
    pub(crate) fn stats(&self) -> NetStats {
        let mut s = NetStats {
            qp: self.totals,
            max_in_flight: self.max_in_flight,
            ..NetStats::default()
        };
        let mut port = |node: u32, p: u16, st: &PortStats| {
            s.drops += st.drops;
            s.pause_frames += st.pause_sent;
            s.headroom_overflow += st.headroom_overflow;
            if st.drops + st.pause_sent + st.pause_received > 0 {
                s.ports.push((node, p, *st));
            }
        };
        for (h, nic) in self.nics.iter().enumerate() {
            port(h as u32, 0, &nic.stats);
        }
        for (i, sw) in self.switches.iter().enumerate() {
            for (p, st) in sw.stats.iter().enumerate() {
                port(self.topo.hosts + i as u32, p as u16, st);
            }
        }
        s.host_packets = self.nics.iter().map(|n| n.stats.tx_packets).sum();
        s
    }

    /// Checks the switches' bookkeeping: every buffered byte is in exactly one queue, and the
    /// per-port, per-class counters (ingress and egress) add up to what the queues hold.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        for (h, nic) in self.nics.iter().enumerate() {
            let mut held = [0u64; MAX_CLASSES];
            for f in &nic.rx {
                held[usize::from(f.class)] += u64::from(f.hop.wire);
            }
            if held != nic.rx_held.bytes {
                return Err(format!(
                    "host {h}: receive buffer counters {:?} but it holds {held:?}",
                    nic.rx_held.bytes
                ));
            }
        }
        for (si, sw) in self.switches.iter().enumerate() {
            let n = sw.ports.len();
            // Per (port, class): bytes that arrived through it, bytes queued for it.
            let mut ingress = vec![[0u64; MAX_CLASSES]; n];
            let mut egress = vec![[0u64; MAX_CLASSES]; n];
            let mut queued = 0u64;
            let mut count = |pkt: u32, inp: u16, out: usize, c: usize| {
                let w = u64::from(self.meta[pkt as usize].hop.wire);
                ingress[usize::from(inp)][c] += w;
                egress[out][c] += w;
                queued += w;
            };
            for (k, v) in sw.voq.iter().enumerate() {
                let (inp, out, c) = (k / MAX_CLASSES / n, (k / MAX_CLASSES) % n, k % MAX_CLASSES);
                for p in v.iter(&self.meta) {
                    count(p, inp as u16, out, c);
                }
            }
            for (k, v) in sw.oq.iter().enumerate() {
                for &(p, inp) in v {
                    count(p, inp, k / MAX_CLASSES, k % MAX_CLASSES);
                }
            }
            let held: Vec<[u64; MAX_CLASSES]> = sw.ports.iter().map(|p| p.ingress.bytes).collect();
            let queues: Vec<[u64; MAX_CLASSES]> = sw.ports.iter().map(|p| p.egress).collect();
            if held != ingress || queues != egress || queued != sw.used {
                return Err(format!(
                    "switch {si}: ingress counters {held:?} egress {queues:?} used {} but the \
                     queues hold ingress {ingress:?} egress {egress:?} total {queued}",
                    sw.used
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ecmp_pick_is_the_remainder() {
        for n in 1..40usize {
            for h in [0, 1, 5, 0xdead_beef, u64::MAX, u64::MAX - 7, 1 << 63] {
                assert_eq!(super::ecmp_pick(h, n), (h % n as u64) as usize);
            }
        }
    }
}
