//! Packets and events of one partition: the frame overhead, a packet's forwarding state
//! ([`Hop`], [`Meta`]: what switches read, kept apart from the headers only the receiving NIC
//! reads, [`Packet`]), the events of the model ([`Ev`]) and the keyed event list ([`Events`])
//! whose order does not depend on how the network is partitioned. Packets live in the
//! partition's packet table ([`Pool`]), allocated and freed there.
//!
//! This module depends on nothing of the model but the memory model's trait: every component
//! uses it.

use std::marker::PhantomData;

use super::memory::SimMemory;
use crate::engine::EventQueue;
use irn_transport::Time;
use irn_wire::{Ecn, IbRepr};

/// The requester end of a flow.
pub(super) const REQ: usize = 0;
/// The responder end of a flow.
pub(super) const RESP: usize = 1;

/// The QPN of end `end` of `flow`: a function of the flow, so that each end knows the other's
/// without asking (the two ends may be set up in different partitions at the same instant).
/// QPNs are 24 bits and 0 and 1 are special in InfiniBand; past 2^23 flows they repeat, which
/// is harmless (a NIC finds a packet's queue pair by its flow).
pub(super) fn qpn(flow: u32, end: usize) -> u32 {
    2 + ((2 * u64::from(flow) + end as u64) % ((1 << 24) - 2)) as u32
}

/// An 802.1Q tag, on frames when `network.vlan` is on.
pub(super) const VLAN_TAG_LEN: u32 = 4;

/// What an untagged frame adds around the BTH onward: Ethernet header (14) and FCS (4), IPv4
/// (20), UDP (8) and ICRC (4); preamble and inter-frame gap are not counted.
pub const FRAME_OVERHEAD: u32 =
    (irn_wire::ETHERNET_FRAMING_LEN + irn_wire::ROCEV2_IPV4_ENCAP_LEN) as u32;
const _: () = assert!(FRAME_OVERHEAD == 50);

/// A PFC frame on the wire: the 64-byte minimum Ethernet frame.
pub(super) const PFC_FRAME: u64 = 64;

/// What switches and the receiving NIC's admission look at, kept apart from the headers. The
/// arrival event carries a copy: the event is read in order from the event list, while the
/// packet's [`Meta`] line has usually left the cache since the previous hop.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hop {
    pub(super) dst: u32,
    pub(super) hash: u32,
    /// Frame bytes (at most a 4096-byte MTU plus headers).
    pub(super) wire: u16,
    /// The IP header's traffic class: DSCP (bits 7–2) and ECN (bits 1–0), as the packet
    /// carries them (RFC 2474, RFC 3168).
    tos: u8,
    /// The 802.1Q tag: [`TAGGED`] and the PCP in bits 2–0; 0 when untagged.
    vlan: u8,
}

/// [`Hop::vlan`]: the frame carries an 802.1Q tag.
const TAGGED: u8 = 0x80;

/// [`Hop::vlan`]: a copy a ToR flooded (an unknown destination MAC, seed 001 §4.2); an egress
/// that does not lead to the destination discards it when it reaches the head of its queue.
const FLOODED: u8 = 0x40;

impl Hop {
    pub(super) fn new(dst: u32, hash: u32, wire: u16, dscp: u8, ecn: Ecn, pcp: Option<u8>) -> Hop {
        Hop {
            dst,
            hash,
            wire,
            tos: (dscp << 2) | ecn.bits(),
            vlan: pcp.map_or(0, |p| TAGGED | (p & 7)),
        }
    }

    /// The DSCP.
    #[inline]
    pub(super) fn dscp(&self) -> u8 {
        self.tos >> 2
    }

    /// The ECN field.
    #[inline]
    pub(super) fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.tos & 3)
    }

    /// Marks Congestion Experienced.
    #[inline]
    pub(super) fn mark_ce(&mut self) {
        self.tos |= Ecn::Ce.bits();
    }

    /// The PCP of a tagged frame.
    #[inline]
    pub(super) fn pcp(&self) -> Option<u8> {
        (self.vlan & TAGGED != 0).then_some(self.vlan & 7)
    }

    /// Whether this is a flooded copy.
    #[inline]
    pub(super) fn flooded(&self) -> bool {
        self.vlan & FLOODED != 0
    }

    /// Marks this a flooded copy.
    pub(super) fn mark_flooded(&mut self) {
        self.vlan |= FLOODED;
    }

    /// The frame as a routed hop sends it on: in a new Ethernet header without the 802.1Q
    /// tag, so its PCP is gone — there is no standard way to carry it across a subnet
    /// boundary (seed 001 §3, the reason for DSCP-based PFC) — while the DSCP travels on in
    /// the IP header.
    #[inline]
    pub(super) fn routed(mut self) -> Hop {
        if self.vlan & TAGGED != 0 {
            self.vlan &= FLOODED;
            self.wire -= VLAN_TAG_LEN as u16;
        }
        self
    }

    /// Moves the frame to DSCP `dscp` (a flooded copy demoted to a lossy class); a tag's PCP
    /// follows as `pcp`.
    pub(super) fn set_dscp(&mut self, dscp: u8, pcp: u8) {
        self.tos = (dscp << 2) | (self.tos & 3);
        if self.vlan & TAGGED != 0 {
            self.vlan = (self.vlan & !7) | (pcp & 7);
        }
    }
}

/// A packet's forwarding state, 16 bytes instead of the 300-odd of its [`IbRepr`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Meta {
    pub(super) hop: Hop,
    /// The next packet of the virtual output queue this one waits in ([`NIL`]: the last).
    /// Threading the queues through the packets keeps a queue operation on cache lines the
    /// hop touches anyway, instead of a `VecDeque` header and buffer per queue.
    pub(super) next: u32,
}

const _: () = assert!(std::mem::size_of::<Meta>() == 16);

/// No packet: the end of a virtual output queue.
pub(super) const NIL: u32 = u32::MAX;

/// What only the receiving NIC reads (with the payload bytes, kept apart in
/// `Pool::payloads` when the memory model holds bytes).
#[derive(Debug, Clone, Copy)]
pub(super) struct Packet {
    pub(super) ib: IbRepr,
    /// The flow it belongs to and the end ([`REQ`] or [`RESP`]) it is addressed to: how the
    /// receiving NIC finds the queue pair (a NIC would look the QPN up in its QP table).
    pub(super) flow: u32,
    pub(super) to: u8,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Ev {
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
    /// A PFC frame for `prio` arrived at `node` through `port`, pausing it for `quanta`
    /// (0: a resume, XON); `refresh`: the sender repeats a pause it sent before.
    Pfc {
        node: u32,
        port: u16,
        prio: u8,
        quanta: u16,
        refresh: bool,
    },
    /// A pause timer of `node`'s `port` for `class` (of a NIC: for that priority when
    /// `refresh` is false): its ingress refreshes the pause it sent (`refresh`), or the pause
    /// it received may have run out.
    PauseTimer {
        node: u32,
        port: u16,
        class: u8,
        refresh: bool,
    },
    /// A queue pair's timer.
    QpTimer { host: u32, slot: u32, gen: u32 },
    /// The next flow end of the workload starts (see `Workload::starts`).
    FlowStart,
    /// The requester of `flow` completed a teardown delay ago: `host` destroys the responder.
    FlowEnd { host: u32, flow: u32 },
    /// A fabric-wide task of the safety model (`safety.rs`): a fault, a watchdog's poll, the
    /// deadlock check, a monitoring sample.
    Control(Ctl),
}

/// The safety model's own events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ctl {
    /// `[[fault]]` number `i` starts (`end` false) or ends.
    Fault { i: u32, end: bool },
    /// A restarted host's first frame (a gratuitous ARP) reaches its ToR.
    Announce { host: u32 },
    /// The NIC watchdogs look at their receive pipelines.
    NicWatchdog,
    /// The switch watchdogs poll their server-facing queues.
    SwitchWatchdog,
    /// The deadlock detector looks for a cycle of paused queues.
    DeadlockCheck,
    /// The monitor samples every counter.
    Monitor,
    /// The configuration monitor checks every switch and NIC.
    ConfigCheck,
}

impl Ctl {
    /// Whether the event is periodic (it runs only while other events are pending, so that it
    /// never extends a run).
    pub(super) fn periodic(self) -> bool {
        !matches!(self, Ctl::Fault { .. } | Ctl::Announce { .. })
    }
}

/// An event for another partition, with its key, and the packet when a frame crosses: the
/// receiving partition stores it in its own packet table.
#[derive(Debug)]
pub(crate) struct Msg {
    /// The partition it is for.
    pub(crate) to: u16,
    pub(super) at: Time,
    pub(super) key: u64,
    pub(super) ev: Ev,
    pub(super) packet: Option<(Packet, Vec<u8>)>,
}

/// The event key's origin for the workload's flow starts (a node number never used).
pub(super) const WORKLOAD: u32 = (1 << 24) - 1;

/// The event key's origin for the safety model's events (a node number never used).
pub(super) const CONTROL: u32 = (1 << 24) - 2;

/// The events of one event list, keyed so that their order does not depend on how the
/// network is partitioned: an event's key is the node that scheduled it (`origin`: the node
/// whose event is being handled) and that node's count of events scheduled so far. A node's
/// count is the same whether it shares the event list with the whole network or with its
/// partition only, so ties between events of one time resolve the same way in both.
#[derive(Debug)]
pub(super) struct Events {
    pub(super) q: EventQueue<Ev>,
    pub(super) origin: u32,
    /// Per node, events it has scheduled.
    pub(super) count: Vec<u64>,
}

impl Events {
    /// Schedules `ev` at `at`, from the node being handled.
    #[inline]
    pub(super) fn push(&mut self, at: Time, ev: Ev) {
        let key = self.next_key();
        self.q.push_keyed(at, key, ev);
    }

    /// Schedules a safety-model event: keys of their own, after every node's at one time.
    pub(super) fn push_control(&mut self, at: Time, ctl: Ctl, seq: &mut u64) {
        let key = (u64::from(CONTROL) << 40) | *seq;
        *seq += 1;
        self.q.push_keyed(at, key, Ev::Control(ctl));
    }

    /// The key of the next event the node being handled schedules.
    #[inline]
    pub(super) fn next_key(&mut self) -> u64 {
        let c = &mut self.count[self.origin as usize];
        let key = (u64::from(self.origin) << 40) | *c;
        *c += 1;
        key
    }

    /// The key of the workload's start of end `end` of `flow`: starts of one time go in flow
    /// order, the responder's end first (a requester may need its responder's buffer).
    pub(super) fn start_key(flow: u32, end: usize) -> u64 {
        (u64::from(WORKLOAD) << 40) | (2 * u64::from(flow) + u64::from(end == REQ))
    }
}

/// The packet table: per packet its headers ([`Packet`]), its forwarding state ([`Meta`]) and,
/// when the memory model holds bytes, its payload. Slots are reused (a free list), so a
/// packet's number is stable from allocation to release and small enough to thread queues
/// through.
#[derive(Debug)]
pub(super) struct Pool<M> {
    pub(super) packets: Vec<Packet>,
    /// Per packet, its payload bytes (only when the memory model holds bytes: otherwise
    /// empty, so a packet's slot is its headers alone).
    pub(super) payloads: Vec<Vec<u8>>,
    pub(super) meta: Vec<Meta>,
    free: Vec<u32>,
    memory: PhantomData<M>,
}

impl<M: SimMemory> Pool<M> {
    pub(super) fn new() -> Pool<M> {
        Pool {
            packets: Vec::new(),
            payloads: Vec::new(),
            meta: Vec::new(),
            free: Vec::new(),
            memory: PhantomData,
        }
    }

    /// Stores a new packet; `payload` is kept only when the memory model holds bytes.
    pub(super) fn alloc(&mut self, p: Packet, payload: Vec<u8>, m: Meta) -> u32 {
        self.alloc_headers(&p.ib, p.flow, p.to, payload, m)
    }

    /// Stores a new packet with headers `ib` for end `to` of `flow`, copying the headers once,
    /// straight into their slot (they are a few hundred bytes, and a NIC sends one per packet).
    #[inline]
    pub(super) fn alloc_headers(
        &mut self,
        ib: &IbRepr,
        flow: u32,
        to: u8,
        payload: Vec<u8>,
        m: Meta,
    ) -> u32 {
        let i = match self.free.pop() {
            Some(i) => {
                let p = &mut self.packets[i as usize];
                p.ib = *ib;
                p.flow = flow;
                p.to = to;
                self.meta[i as usize] = m;
                i
            }
            None => {
                self.packets.push(Packet { ib: *ib, flow, to });
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

    /// Releases packet `i`.
    pub(super) fn free(&mut self, i: u32) {
        if M::HOLDS_BYTES {
            self.payloads[i as usize] = Vec::new();
        }
        self.free.push(i);
    }

    /// The payload of packet `i` (empty when the memory model holds no bytes).
    #[inline]
    pub(super) fn payload(&self, i: u32) -> &[u8] {
        if M::HOLDS_BYTES {
            &self.payloads[i as usize][..]
        } else {
            &[]
        }
    }

    /// A copy of packet `i` (a flooded copy), as a new packet with forwarding state `m`.
    pub(super) fn copy(&mut self, i: u32, m: Meta) -> u32 {
        let p = self.packets[i as usize];
        let payload = if M::HOLDS_BYTES {
            self.payloads[i as usize].clone()
        } else {
            Vec::new()
        };
        self.alloc(p, payload, m)
    }

    /// Takes packet `i` out of the table whole (it crosses to another partition).
    pub(super) fn take(&mut self, i: u32) -> (Packet, Vec<u8>) {
        let p = self.packets[i as usize];
        let payload = if M::HOLDS_BYTES {
            std::mem::take(&mut self.payloads[i as usize])
        } else {
            Vec::new()
        };
        self.free(i);
        (p, payload)
    }
}
