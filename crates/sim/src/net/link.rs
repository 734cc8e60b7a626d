//! Links: serialization at the port's rate and delivery after the propagation delay
//! (store-and-forward), pause frames overtaking queued data, and random loss on arrival.

use irn_transport::rng::Rng;
use irn_transport::Time;

use super::fabric::Fabric;
use super::memory::SimMemory;
use super::packet::{Ev, Hop, PFC_FRAME};

impl<M: SimMemory> Fabric<M> {
    /// Serializes `pkt` onto `node`'s port `out` from `now`: schedules its arrival at the peer
    /// and, when `wake`, the node's `TxDone` for that port. Returns when the link is free.
    #[inline]
    pub(super) fn transmit(
        &mut self,
        now: Time,
        node: u32,
        out: usize,
        pkt: u32,
        hop: Hop,
        wake: bool,
    ) -> Time {
        let done = self.occupy(now, node, out, u64::from(hop.wire), wake);
        let port = self.topo.nodes[node as usize].ports[out];
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

    /// Occupies `node`'s port `out` for the serialization of a `wire`-byte frame (alone: a
    /// flooded copy the next NIC discards): schedules the `TxDone` when `wake`. Returns when
    /// the link is free.
    pub(super) fn occupy(
        &mut self,
        now: Time,
        node: u32,
        out: usize,
        wire: u64,
        wake: bool,
    ) -> Time {
        let port = self.topo.nodes[node as usize].ports[out];
        let done = now + port.transmission(wire);
        if wake {
            self.q.push(
                done,
                Ev::TxDone {
                    node,
                    port: out as u16,
                },
            );
        }
        done
    }

    /// Sends a PFC frame (802.1Qbb) for `prio` out of `node`'s `port` (`pause`: XOFF, else
    /// XON): it reaches the peer after its 64-byte serialization and the link's delay,
    /// overtaking queued data. The sender counts it in its own port statistics.
    pub(super) fn send_pfc(&mut self, now: Time, node: u32, port: u16, prio: u8, pause: bool) {
        let p = self.topo.nodes[node as usize].ports[port as usize];
        let c = self.classes.class(prio);
        self.mon.pause_sent(node, port, c);
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
}

/// Random loss on the links (`network.link_loss`): a frame is lost on arrival at a node with
/// that probability, drawn from the receiving node's own stream, so that one node's draws do
/// not depend on what happens elsewhere (nor on how the network is partitioned).
#[derive(Debug)]
pub(super) struct Loss {
    rate: f64,
    /// Per node, the stream of its incoming links.
    rng: Vec<Rng>,
}

impl Loss {
    /// Loss at `rate` on every link into each of `nodes` nodes.
    pub(super) fn new(rate: f64, seed: u64, nodes: usize) -> Loss {
        Loss {
            rate,
            rng: (0..nodes)
                .map(|n| Rng::stream(seed, (11 << 32) | n as u64))
                .collect(),
        }
    }

    /// Whether the frame arriving at `node` now was lost on its way.
    #[inline]
    pub(super) fn lost(&mut self, node: u32) -> bool {
        self.rate > 0.0 && self.rng[node as usize].chance(self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_loses_frames_at_its_rate_from_the_receivers_own_stream() {
        let mut l = Loss::new(0.1, 7, 3);
        let n = 100_000;
        let lost = (0..n).filter(|_| l.lost(1)).count() as f64 / n as f64;
        assert!((lost - 0.1).abs() < 0.005, "{lost}");
        // Node 2's draws do not depend on how many node 1 made.
        let mut a = Loss::new(0.1, 7, 3);
        let mut b = Loss::new(0.1, 7, 3);
        for _ in 0..1000 {
            a.lost(1);
        }
        let xs: Vec<bool> = (0..100).map(|_| a.lost(2)).collect();
        let ys: Vec<bool> = (0..100).map(|_| b.lost(2)).collect();
        assert_eq!(xs, ys);
        // No loss: never a draw, never a loss.
        let mut none = Loss::new(0.0, 7, 3);
        assert!((0..1000).all(|_| !none.lost(0)));
    }
}
