//! Links: serialization at the port's rate and delivery after the propagation delay
//! (store-and-forward), pause frames overtaking queued data, and random loss on arrival.

use irn_transport::rng::Rng;
use irn_transport::Time;

use super::fabric::Fabric;
use super::memory::SimMemory;
use super::packet::{Ev, Hop, PFC_FRAME};
use super::pfc::{Pause, ALL_PRIORITIES};
use crate::topology::Port;

impl<M: SimMemory> Fabric<M> {
    /// Sends `pkt`, whose serialization on `link` ends at `done` ([`Fabric::occupy`]): it
    /// arrives at the link's peer after the link's delay.
    #[inline]
    pub(super) fn propagate(&mut self, done: Time, link: &Port, pkt: u32, hop: Hop) {
        self.schedule(
            done + link.delay,
            link.peer,
            Ev::Arrive {
                node: link.peer,
                port: link.peer_port,
                pkt,
                hop,
            },
        );
    }

    /// Occupies `node`'s port `out`, which sends on `link`, for the serialization of a
    /// `wire`-byte frame (alone: a flooded copy the next NIC discards): schedules the `TxDone`
    /// when `wake`. Returns when the link is free.
    #[inline]
    pub(super) fn occupy(
        &mut self,
        now: Time,
        node: u32,
        out: usize,
        link: &Port,
        wire: u64,
        wake: bool,
    ) -> Time {
        let done = now + link.transmission(wire);
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

    /// Sends a PFC frame (802.1Qbb) for `prio` out of `node`'s `port`: an XOFF (or its
    /// refresh) with the run's quanta, or an XON. It reaches the peer after its 64-byte
    /// serialization and the link's delay, overtaking queued data; the sender counts it in its
    /// own port statistics. An XOFF starts the refresh timer of the sender's ingress (the
    /// priority's class): returns when it fires.
    pub(super) fn send_pfc(
        &mut self,
        now: Time,
        node: u32,
        port: u16,
        prio: u8,
        what: Pause,
    ) -> Option<Time> {
        let p = self.topo.nodes[node as usize].ports[port as usize];
        // An 802.3x PAUSE is counted, and timed, as the highest class's.
        let c = if prio == ALL_PRIORITIES {
            0
        } else {
            self.classes.class(prio)
        };
        self.mon.pause_sent(node, port, c);
        let at = now + p.transmission(PFC_FRAME) + p.delay;
        let (quanta, refresh) = match what {
            Pause::Xoff => (self.pause.quanta, false),
            Pause::Refresh => (self.pause.quanta, true),
            Pause::Xon => (0, false),
        };
        if refresh && self.owns(p.peer) {
            // Counted where it is handled (another partition counts it on delivery).
            self.bookkeeping += 1;
        }
        self.schedule(
            at,
            p.peer,
            Ev::Pfc {
                node: p.peer,
                port: p.peer_port,
                prio,
                quanta,
                refresh,
            },
        );
        (quanta > 0).then(|| {
            let refresh = now + self.pause.refresh_after(p.rate_bps);
            self.bookkeeping += 1;
            self.q.push(
                refresh,
                Ev::PauseTimer {
                    node,
                    port,
                    class: c as u8,
                    refresh: true,
                },
            );
            refresh
        })
    }

    /// Wakes `node`'s `port` at `at` to see whether the pause of `class` it received ran out.
    pub(super) fn pause_expiry(&mut self, at: Time, node: u32, port: u16, class: usize) {
        self.bookkeeping += 1;
        self.q.push(
            at,
            Ev::PauseTimer {
                node,
                port,
                class: class as u8,
                refresh: false,
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
