//! Switches: a packet's way through one (SPEC N2, N5).
//!
//! On arrival a packet takes an output (the one next hop, or ECMP by its hash salted per
//! switch), passes admission (input-queued: its input port's buffer; shared-buffer: the whole
//! buffer and, lossy, the dynamic threshold α × free of its egress queue; a lossless packet
//! is always admitted and counted as a headroom overflow when it does not fit), may be ECN
//! marked (`ecn.rs`), and joins the queue of its (output, class) (`queues.rs`) — or, at an
//! idle output with nothing queued, leaves at once. Its input's ingress may then pause the
//! upstream (`pfc.rs`). An output serves its classes in strict priority, skipping a paused
//! class, one frame at a time.

use super::classes::MAX_CLASSES;
use super::memory::SimMemory;
use super::packet::{Ev, Hop};
use super::pfc::Ingress;
use super::queues::Queues;
use super::{Part, PortStats};
use crate::config::SwitchModel;
use irn_transport::rng::mix;
use irn_transport::Time;
use irn_wire::Ecn;

/// What a packet passing through a switch port touches, as an input and as an output, in one
/// record (three cache lines with eight classes): a hop reads and writes its input's and its
/// output's records (and its queue). Measured at k = 16 one record is no faster than the ten
/// parallel arrays it replaced (the switches' state fits in L2 either way,
/// docs/BENCHMARKS.md), but it keeps a port's state in one place.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
pub(super) struct SwPort {
    /// As an input: bytes buffered that arrived here, and pauses sent upstream.
    pub(super) ingress: Ingress,
    // --- As an output.
    /// Per class, bytes queued for this output.
    pub(super) egress: [u64; MAX_CLASSES],
    /// Bytes queued for this output, all classes (the sum of `egress`).
    pub(super) queued: u64,
    /// Serializing until then.
    pub(super) busy_until: Time,
    /// Per class: paused by the downstream peer.
    pub(super) paused: [bool; MAX_CLASSES],
    /// A `TxDone` event is pending (at most one).
    pub(super) wake: bool,
    /// Per class: the switch watchdog found a storm here and acts on it (ignores the peer's
    /// pauses; with `drop`, drops the class's packets both ways).
    pub(super) storm: [bool; MAX_CLASSES],
}

impl SwPort {
    pub(super) const IDLE: SwPort = SwPort {
        ingress: Ingress::EMPTY,
        egress: [0; MAX_CLASSES],
        queued: 0,
        busy_until: Time::ZERO,
        paused: [false; MAX_CLASSES],
        wake: false,
        storm: [false; MAX_CLASSES],
    };

    /// Whether class `c` must wait: paused by the peer, and no watchdog overriding it.
    #[inline]
    pub(super) fn held(&self, c: usize) -> bool {
        self.paused[c] && !self.storm[c]
    }
}

const _: () = assert!(std::mem::size_of::<SwPort>() <= 192);

/// A switch. The fields a packet's hop reads come first, in one cache line.
#[derive(Debug)]
#[repr(C)]
pub(super) struct Switch {
    pub(super) ports: Vec<SwPort>,
    /// The packets waiting, per the switch's buffer architecture.
    pub(super) queues: Queues,
    /// Shared-buffer: bytes in the whole switch.
    pub(super) used: u64,
    pub(super) salt: u64,
    /// Per (output, class): when the pause in force began.
    pub(super) paused_since: Vec<Time>,
    pub(super) stats: Vec<PortStats>,
}

impl Switch {
    pub(super) fn new(nports: usize, nclasses: usize, salt: u64, model: SwitchModel) -> Switch {
        Switch {
            ports: vec![SwPort::IDLE; nports],
            queues: Queues::new(model, nports, nclasses),
            used: 0,
            salt,
            paused_since: vec![Time::ZERO; nports * MAX_CLASSES],
            stats: vec![PortStats::default(); nports],
        }
    }
}

/// ECMP: which of `n` equal-cost ports a packet whose mixed hash is `h` takes, `h mod n`.
/// The usual set sizes (k/2 for a k-ary fat-tree, the spines of a leaf-spine) are spelled out
/// so that the compiler turns the division, once per switch hop, into a multiplication.
#[inline]
pub(super) fn ecmp_pick(h: u64, n: usize) -> usize {
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

impl<M: SimMemory> Part<M> {
    /// Lets a switch output send now if it is free, or once it is.
    pub(super) fn kick_port(&mut self, now: Time, node: u32, out: usize) {
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

    pub(super) fn switch_receive(&mut self, now: Time, node: u32, inp: u16, pkt: u32, hop: Hop) {
        let si = (node - self.topo.hosts) as usize;
        let dst = hop.dst;
        let c = self.classes.class(self.classes.priority(&hop));
        if self.mon.on {
            let pc = self.mon.at(node, inp, c);
            pc.rx_packets += 1;
            pc.rx_bytes += u64::from(hop.wire);
        }
        if self.safety.l2_on {
            // The ToR learns a server's MAC from every frame it sends (seed 001 §4.2).
            if let Some(h) = self.topo.port_host(node, usize::from(inp)) {
                self.safety.mac_seen[h as usize] = now;
            }
        }
        let (hops, last) = self.topo.route(node, dst);
        let out = match hops.len() {
            0 => {
                self.ingress_drop(node, inp, c, pkt);
                return;
            }
            1 => hops[0] as usize,
            n => hops[ecmp_pick(mix(u64::from(hop.hash) ^ self.switches[si].salt), n)] as usize,
        };
        if last && self.safety.l2_on && !self.mac_known(now, dst) {
            self.unknown_destination(now, node, inp, c, pkt, hop);
            return;
        }
        if self.safety.wd_drop
            && (self.switches[si].ports[out].storm[c]
                || self.switches[si].ports[usize::from(inp)].storm[c])
        {
            // The switch watchdog disabled lossless on this queue: its packets are dropped,
            // both ways.
            self.ingress_drop(node, inp, c, pkt);
            return;
        }
        self.enqueue(now, node, inp, out, c, pkt, hop);
    }

    /// A packet dropped on arrival at `node` through `inp` (class `c`).
    pub(super) fn ingress_drop(&mut self, node: u32, inp: u16, c: usize, pkt: u32) {
        if self.mon.on {
            self.mon.at(node, inp, c).ingress_drops += 1;
        }
        self.drop_packet(node, inp, pkt);
    }

    /// Admission, ECN marking and queueing of `pkt` (class `c`, arrived through `inp`) for
    /// output `out` — or, at an idle output with nothing queued, departure at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn enqueue(
        &mut self,
        now: Time,
        node: u32,
        inp: u16,
        out: usize,
        c: usize,
        pkt: u32,
        hop: Hop,
    ) {
        if self.admit(node, inp, out, c, u64::from(hop.wire)) {
            self.place(now, node, inp, out, c, pkt, hop, true);
        } else {
            self.ingress_drop(node, inp, c, pkt);
        }
    }

    /// Whether a `wire`-byte packet of class `c` from `inp` for `out` may enter the buffer
    /// (a lossless one always may, counted as a headroom overflow when it does not fit).
    pub(super) fn admit(&mut self, node: u32, inp: u16, out: usize, c: usize, wire: u64) -> bool {
        let si = (node - self.topo.hosts) as usize;
        let sw = &mut self.switches[si];
        let lossless = self.classes.class_lossless(c);
        let i = inp as usize;
        let buffer = self.cfg.switch.buffer_bytes;
        match self.cfg.switch.model {
            SwitchModel::InputQueued => {
                if sw.ports[i].ingress.total() + wire > buffer {
                    if lossless {
                        sw.stats[i].headroom_overflow += 1;
                    }
                    lossless
                } else {
                    true
                }
            }
            SwitchModel::SharedBuffer => {
                let free = buffer.saturating_sub(sw.used);
                let limit = (self.cfg.switch.dt_alpha * free as f64) as u64;
                if lossless {
                    if sw.used + wire > buffer {
                        sw.stats[i].headroom_overflow += 1;
                    }
                    true
                } else {
                    !(sw.used + wire > buffer || sw.ports[out].egress[c] + wire > limit)
                }
            }
        }
    }

    /// Puts an admitted packet in the queue of (`out`, `c`), or on the link at once. `charge`:
    /// its bytes count against its ingress and the buffer (false for the second and later
    /// copies of a flooded packet, which share the first one's buffer).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn place(
        &mut self,
        now: Time,
        node: u32,
        inp: u16,
        out: usize,
        c: usize,
        pkt: u32,
        mut hop: Hop,
        charge: bool,
    ) {
        let si = (node - self.topo.hosts) as usize;
        let wire = u64::from(hop.wire);
        let sw = &mut self.switches[si];
        let i = inp as usize;
        // ECN marking on the egress queue this packet joins.
        if self.marking.is_on()
            && matches!(hop.ecn(), Ecn::Ect0 | Ecn::Ect1)
            && self
                .marking
                .mark(sw.ports[out].egress[c], &mut self.ecn_rng[node as usize])
        {
            hop.mark_ce();
            self.meta[pkt as usize].hop.mark_ce();
            sw.stats[out].ecn_marked += 1;
        }
        // Nothing queued for an idle output: the packet leaves at once (exactly as queueing it
        // and serving the queue would do, without touching queue or packet metadata).
        let port = &sw.ports[out];
        let through = port.queued == 0 && !port.held(c) && !port.wake && now >= port.busy_until;
        if charge {
            sw.ports[i].ingress.add(c, wire);
            sw.used += wire;
        }
        sw.ports[out].egress[c] += wire;
        sw.ports[out].queued += wire;
        if through {
            self.pause_if_full(now, node, si, inp, c);
            if !self.depart(now, node, si, out, c, inp, pkt, hop) {
                self.kick_port(now, node, out);
            }
            return;
        }
        sw.queues.push(&mut self.meta, out, c, inp, pkt);
        self.pause_if_full(now, node, si, inp, c);
        self.kick_port(now, node, out);
    }

    pub(super) fn switch_send(&mut self, now: Time, node: u32, out: usize) {
        let si = (node - self.topo.hosts) as usize;
        let nc = self.classes.len();
        if now < self.switches[si].ports[out].busy_until {
            return;
        }
        let mut c = 0;
        while c < nc {
            let sw = &mut self.switches[si];
            if sw.ports[out].held(c) {
                c += 1;
                continue;
            }
            let picked = sw.queues.pop(&self.meta, out, c);
            let Some((pkt, inp)) = picked else {
                c += 1;
                continue;
            };
            let hop = self.meta[pkt as usize].hop;
            if self.depart(now, node, si, out, c, inp, pkt, hop) {
                return;
            }
            // Discarded without using the link: serve the next packet (from the highest
            // class again).
            c = 0;
        }
    }

    /// Takes `pkt` (class `c`, arrived through `inp`) out of the switch's books: its bytes
    /// leave the output's queue and — unless other copies of a flooded packet still share them
    /// — the input's ingress (which may resume its upstream) and the buffer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn release(
        &mut self,
        now: Time,
        node: u32,
        si: usize,
        out: usize,
        c: usize,
        inp: u16,
        pkt: u32,
        wire: u64,
    ) {
        let i = inp as usize;
        let last = !self.safety.l2_on || self.flood_release(pkt);
        let sw = &mut self.switches[si];
        sw.ports[out].egress[c] -= wire;
        sw.ports[out].queued -= wire;
        if !last {
            return;
        }
        sw.ports[i].ingress.remove(c, wire);
        sw.used -= wire;
        if sw.ports[i].ingress.xoff[c] {
            let t = self.pause_threshold(si, i as u16);
            let gap = self.cfg.switch.pfc_resume_gap_bytes;
            if self.switches[si].ports[i].ingress.resume_below(c, t, gap) {
                let prio = self.classes.class_priority(c);
                self.send_pfc(now, node, inp, prio, false);
            }
        }
    }

    /// Takes `pkt` (class `c`, arrived through `inp`) out of the switch's books and puts it
    /// on the link of `out`, which is free — or discards it at the head of the queue: a
    /// flooded copy on a port that does not lead to its destination (seed 001 §4.2), a packet
    /// for a port whose link is down or whose queue the switch watchdog drops. Returns whether
    /// it went on the link.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn depart(
        &mut self,
        now: Time,
        node: u32,
        si: usize,
        out: usize,
        c: usize,
        inp: u16,
        pkt: u32,
        hop: Hop,
    ) -> bool {
        let wire = u64::from(hop.wire);
        self.release(now, node, si, out, c, inp, pkt, wire);
        if self.safety.l2_on || self.safety.wd_drop {
            let to_host = self.topo.port_host(node, out);
            let mismatch = hop.flooded() && to_host != Some(hop.dst);
            let discard = mismatch
                || to_host.is_some_and(|h| !self.safety.host_up[h as usize])
                || (self.safety.wd_drop && self.switches[si].ports[out].storm[c]);
            if discard {
                if self.mon.on {
                    self.mon.at(node, out as u16, c).egress_drops += 1;
                }
                self.free_packet(pkt);
                if mismatch {
                    self.safety.stats.flood_discards += 1;
                }
                if !mismatch || to_host.is_none() {
                    // A link down, a watchdog's drop, or a flooded copy at a port towards a
                    // switch, whose egress drops a frame whose destination MAC is not the next
                    // router's (seed 001 §4.2): gone at once.
                    return false;
                }
                // A flooded copy for another server's port is sent, and dropped by that
                // server's NIC (not its MAC): it takes the port's time.
                let wake = self.switches[si].ports[out].queued > 0;
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
                let p = &mut self.switches[si].ports[out];
                p.busy_until = done;
                p.wake = wake;
                return true;
            }
        }
        let sw = &mut self.switches[si];
        sw.stats[out].tx_packets += 1;
        sw.stats[out].tx_bytes += wire;
        if self.mon.on {
            let pc = self.mon.at(node, out as u16, c);
            pc.tx_packets += 1;
            pc.tx_bytes += wire;
        }
        // Wake up when this frame is out only if something else waits for this output.
        let wake = self.switches[si].ports[out].queued > 0;
        let done = self.put_on_link(now, node, out, pkt, hop, wake);
        let port = &mut self.switches[si].ports[out];
        port.busy_until = done;
        port.wake = wake;
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    pub(super) fn ecmp_pick_is_the_remainder() {
        for n in 1..40usize {
            for h in [0, 1, 5, 0xdead_beef, u64::MAX, u64::MAX - 7, 1 << 63] {
                assert_eq!(super::ecmp_pick(h, n), (h % n as u64) as usize);
            }
        }
    }
}
