//! Links: serialization at the port's rate and delivery after the propagation delay, and the
//! hand-over of events (with their packets) to the partition that owns the receiving node.

use super::memory::SimMemory;
use super::packet::{Ev, Hop, Meta, Msg, NIL};
use super::Part;
use irn_transport::Time;

impl<M: SimMemory> Part<M> {
    /// Serializes `pkt` onto `node`'s port `out` from `now`: schedules its arrival at the peer
    /// and, when `wake`, the node's `TxDone` for that port. Returns when the link is free.
    pub(super) fn put_on_link(
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
    pub(super) fn schedule(&mut self, at: Time, node: u32, ev: Ev) {
        if self.part_of[node as usize] == self.me {
            self.q.push(at, ev);
        } else {
            self.send_away(at, node, ev);
        }
    }

    #[cold]
    pub(super) fn send_away(&mut self, at: Time, node: u32, ev: Ev) {
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
}
