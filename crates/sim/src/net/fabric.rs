//! The context every component of one partition is driven with, htsim-style: the event list,
//! the packet table, the topology, the priority classes, the monitor (an observer the
//! components report to) and the hand-over of events to other partitions. A component — a
//! [`Switch`](super::switch::Switch), a [`Nic`](super::nic::Nic) — owns its own state and is
//! handed `&mut Fabric` to receive, decide and emit: `switch.receive(&mut fabric, …)`.

use std::sync::Arc;

use irn_transport::{Time, Transmit};

use super::classes::Classes;
use super::failed::FailedHosts;
use super::memory::SimMemory;
use super::monitor::Monitor;
use super::packet::{Ev, Events, Meta, Msg, Pool, NIL};
use super::pfc::PauseTiming;
use crate::topology::Topology;

/// What the components of one partition share.
#[derive(Debug)]
pub(super) struct Fabric<M> {
    /// The event list.
    pub(super) q: Events,
    /// The packets in flight or queued.
    pub(super) pool: Pool<M>,
    pub(super) topo: Topology,
    /// The DSCP → priority map, the classes and the lossless priorities.
    pub(super) classes: Classes,
    /// Per (node, port, priority) counters and their time series (SPEC N9).
    pub(super) mon: Monitor,
    /// Which partition owns each node, and the events for the others.
    cross: Crossing,
    /// Where a NIC's queue pair builds the payload of the packet it sends.
    pub(super) scratch: Vec<u8>,
    /// Where it builds that packet's headers, kept from packet to packet: a fresh one per
    /// look at a NIC's queue pairs costs as much as building in place saves.
    pub(super) headers: Transmit,
    /// The hosts faults hold now, and what was sent to them.
    pub(super) failed: FailedHosts,
    /// What pause frames carry and how often a congested ingress refreshes them.
    pub(super) pause: PauseTiming,
    /// Pause timers and refreshed pause frames in the event list. They are bookkeeping, not
    /// work: like the periodic tasks they neither keep the monitor sampling nor move the
    /// run's end — a deadlocked fabric refreshes its pauses for ever, and is still frozen (a
    /// pause that runs out with packets queued sends them, and those events are work).
    pub(super) bookkeeping: usize,
}

/// The border with the other partitions.
#[derive(Debug)]
struct Crossing {
    /// Per node, the partition that owns it.
    part_of: Arc<[u16]>,
    /// This partition.
    me: u16,
    /// Events for other partitions, scheduled during the current window.
    outbox: Vec<Msg>,
}

impl<M: SimMemory> Fabric<M> {
    pub(super) fn new(
        q: Events,
        topo: Topology,
        classes: Classes,
        mon: Monitor,
        part_of: Arc<[u16]>,
        me: u16,
    ) -> Fabric<M> {
        Fabric {
            q,
            pool: Pool::new(),
            topo,
            classes,
            mon,
            cross: Crossing {
                part_of,
                me,
                outbox: Vec::new(),
            },
            scratch: Vec::new(),
            headers: Transmit::SLOT,
            failed: FailedHosts::default(),
            pause: PauseTiming::DEFAULT,
            bookkeeping: 0,
        }
    }

    /// Whether this partition owns `node`.
    #[inline]
    pub(super) fn owns(&self, node: u32) -> bool {
        self.cross.part_of[node as usize] == self.cross.me
    }

    /// The number of hosts (nodes below it are hosts, the others switches).
    #[inline]
    pub(super) fn hosts(&self) -> u32 {
        self.topo.hosts
    }

    /// Schedules `ev`, which happens at `node`: into this partition's event list, or the
    /// outbox when another partition owns `node` (only ever a link's delay or more ahead).
    #[inline]
    pub(super) fn schedule(&mut self, at: Time, node: u32, ev: Ev) {
        if self.owns(node) {
            self.q.push(at, ev);
        } else {
            self.send_away(at, node, ev);
        }
    }

    #[cold]
    fn send_away(&mut self, at: Time, node: u32, ev: Ev) {
        let key = self.q.next_key();
        let packet = match ev {
            Ev::Arrive { pkt, .. } => Some(self.pool.take(pkt)),
            _ => None,
        };
        self.cross.outbox.push(Msg {
            to: self.cross.part_of[node as usize],
            at,
            key,
            ev,
            packet,
        });
    }

    /// Takes in an event from another partition.
    pub(super) fn deliver(&mut self, m: Msg) {
        let ev = match (m.ev, m.packet) {
            (
                Ev::Arrive {
                    node, port, hop, ..
                },
                Some((p, payload)),
            ) => {
                let pkt = self.pool.alloc(p, payload, Meta { hop, next: NIL });
                Ev::Arrive {
                    node,
                    port,
                    pkt,
                    hop,
                }
            }
            (ev, _) => {
                if matches!(ev, Ev::Pfc { refresh: true, .. }) {
                    self.bookkeeping += 1;
                }
                ev
            }
        };
        self.q.q.push_keyed(m.at, m.key, ev);
    }

    /// The events for other partitions scheduled since the last call.
    pub(super) fn take_outbox(&mut self) -> std::vec::Drain<'_, Msg> {
        self.cross.outbox.drain(..)
    }
}
