//! Switches: a packet's way through one (SPEC N2, N5), and what a switch owns to decide it —
//! its ports, its queues, its buffer's admission and PFC thresholds, its ECN marking and the
//! random stream it draws from, and, when the run models them, its L2 tables
//! ([`L2Table`], seed 001 §4.2) and its PFC watchdog ([`PfcWatchdog`], §4.3).
//!
//! On arrival a packet takes an output (the one next hop, or ECMP by its hash salted per
//! switch), passes admission (input-queued: its input port's buffer; shared-buffer: the whole
//! buffer and, lossy, the dynamic threshold α × free of its egress queue; a lossless packet
//! is always admitted and counted as a headroom overflow when it does not fit), may be ECN
//! marked (`ecn.rs`), and joins the queue of its (output, class) (`queues.rs`) — or, at an
//! idle output with nothing queued, leaves at once. Its input's ingress may then pause the
//! upstream (`pfc.rs`). An output serves its classes in strict priority, or by DWRR when the
//! run weights them (`network.scheduler`, `sched.rs`), skipping a paused class, one frame at
//! a time.
//!
//! A switch is driven alone with a [`Fabric`]: [`Switch::receive`] (a frame arrived),
//! [`Switch::tx_done`] (an output finished a frame), [`Switch::pfc`] (a pause frame arrived),
//! and, when it has them, its L2 tables' and watchdog's entries ([`Switch::link_down`],
//! [`Switch::announce`], [`Switch::watchdog_poll`]).

use irn_transport::rng::{mix, Rng};
use irn_transport::{Dur, Time};
use irn_wire::Ecn;

use super::classes::MAX_CLASSES;
use super::ecn::Marking;
use super::fabric::Fabric;
use super::l2::{L2Counts, L2Table};
use super::memory::SimMemory;
use super::monitor::PortStats;
use super::packet::{Ev, Hop, Meta, NIL};
use super::pfc::{pause_time, shared_xoff, Ingress, Pause, PauseClock, ALL_PRIORITIES};
use super::queues::Queues;
use super::sched::{Dwrr, Weights};
use crate::config::{SimConfig, SwitchModel, SwitchWatchdog, UnknownUnicast};
use crate::topology::Port;

/// What a packet passing through a switch port touches, as an output and as an input, laid
/// out so that a hop of class 0 reads one cache line of its output (transmitter, link, queue
/// totals, pause state) and one of its input (what it holds, whether it paused its upstream).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct SwPort {
    // --- As an output (the first line).
    /// Serializing until then.
    pub(super) busy_until: Time,
    /// Bytes queued for this output, all classes (the sum of `egress`).
    pub(super) queued: u64,
    /// The link this port sends on: the switch's own copy of the topology's, so that a frame
    /// leaving reads it beside the port's state.
    pub(super) link: Port,
    /// A `TxDone` event is pending (at most one).
    pub(super) wake: bool,
    /// Bit `c`: class `c` is paused by the downstream peer.
    paused: u8,
    /// Bit `c`: the switch watchdog found a storm here and acts on it (ignores the peer's
    /// pauses; with `drop`, drops the class's packets both ways).
    storm: u8,
    /// PFC is off on this port, against the configuration (a `tor-pfc-off` drift): its
    /// ingress never pauses and drops when full, and pauses received are ignored.
    pfc_off: bool,
    /// Per class, bytes queued for this output.
    pub(super) egress: [u64; MAX_CLASSES],
    // --- As an input (a line of its own).
    /// Bytes buffered that arrived here, and pauses sent upstream.
    pub(super) ingress: Ingress,
}

const _: () = assert!(std::mem::offset_of!(SwPort, egress) + 8 <= 64);
const _: () = assert!(std::mem::size_of::<SwPort>() <= 256);

impl SwPort {
    /// An idle port sending on `link`.
    pub(super) const fn idle(link: Port) -> SwPort {
        SwPort {
            busy_until: Time::ZERO,
            queued: 0,
            link,
            wake: false,
            paused: 0,
            storm: 0,
            pfc_off: false,
            egress: [0; MAX_CLASSES],
            ingress: Ingress::EMPTY,
        }
    }

    /// Whether class `c` may not send: paused, and not overridden by the watchdog.
    #[inline]
    pub(super) fn held(&self, c: usize) -> bool {
        (self.paused & !self.storm) & (1 << c) != 0
    }

    /// Whether the downstream peer pauses class `c`.
    #[inline]
    pub(super) fn is_paused(&self, c: usize) -> bool {
        self.paused & (1 << c) != 0
    }

    fn set_paused(&mut self, c: usize, on: bool) {
        self.paused = (self.paused & !(1 << c)) | (u8::from(on) << c);
    }

    /// Whether the watchdog acts on a storm of class `c` here.
    #[inline]
    pub(super) fn stormed(&self, c: usize) -> bool {
        self.storm & (1 << c) != 0
    }

    fn set_storm(&mut self, c: usize, on: bool) {
        self.storm = (self.storm & !(1 << c)) | (u8::from(on) << c);
    }
}

/// A switch's buffer: its architecture, size and thresholds.
#[derive(Debug, Clone)]
pub(super) struct Buffer {
    pub(super) model: SwitchModel,
    /// Bytes: per input port (input-queued), or shared by all.
    pub(super) bytes: u64,
    /// The dynamic threshold's α for lossy egress queues (shared buffer).
    pub(super) dt_alpha: f64,
    /// The dynamic threshold's α at which a lossless ingress pauses (shared buffer).
    pub(super) pfc_alpha: f64,
    /// PFC resumes this far below the threshold.
    pub(super) resume_gap: u64,
    /// Per input port: the occupancy of a lossless class above which the port pauses its
    /// upstream — the buffer less the headroom of that port's own link (input-queued).
    pub(super) xoff: Vec<u64>,
    /// The headroom the ports reserve together (a shared-buffer switch's share kept out of
    /// the dynamic threshold).
    pub(super) reserved: u64,
}

/// A switch.
#[derive(Debug)]
pub(super) struct Switch {
    node: u32,
    pub(super) ports: Vec<SwPort>,
    /// The packets waiting, per the switch's buffer architecture.
    pub(super) queues: Queues,
    /// Bytes in the whole buffer.
    pub(super) used: u64,
    salt: u64,
    /// Per (output, class): when the pause in force began.
    pub(super) paused_since: Vec<Time>,
    /// Per port: when the pause its output received runs out, and when its ingress
    /// refreshes the pause it sent.
    clocks: Vec<PauseClock>,
    pub(super) stats: Vec<PortStats>,
    buffer: Buffer,
    marking: Marking,
    /// RED's marking decisions.
    ecn_rng: Rng,
    /// A ToR's ARP and MAC tables, when the run models them (faults, or a MAC timeout
    /// shorter than the run).
    l2: Option<Box<L2Table>>,
    /// The PFC watchdog of the server-facing ports, when configured.
    watchdog: Option<Box<PfcWatchdog>>,
    /// It routes (L3): what it sends has lost its 802.1Q tag (`network.routed_tiers`).
    routes: bool,
    /// Weighted scheduling between its classes (`network.scheduler = "dwrr"`); without it,
    /// strict priority.
    dwrr: Option<Box<PortSchedulers>>,
}

/// A switch's DWRR: its classes' weights and each output's round.
#[derive(Debug)]
struct PortSchedulers {
    weights: Weights,
    ports: Vec<Dwrr>,
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

/// Switch `node`'s ECMP salt from `seed`: each switch hashes differently, so a flow's choices at
/// successive hops are independent.
fn ecmp_salt(seed: u64, node: u32) -> u64 {
    mix(seed ^ (u64::from(node) << 32))
}

impl Switch {
    /// Switch `node` with `nports` ports and `nclasses` classes; its ECMP salt and RED stream
    /// derive from the run's `seed`.
    pub(super) fn new(
        node: u32,
        links: &[Port],
        nclasses: usize,
        seed: u64,
        buffer: Buffer,
        marking: Marking,
    ) -> Switch {
        Switch {
            node,
            ports: links.iter().map(|&l| SwPort::idle(l)).collect(),
            queues: Queues::new(buffer.model, links.len(), nclasses),
            used: 0,
            salt: ecmp_salt(seed, node),
            paused_since: vec![Time::ZERO; links.len() * MAX_CLASSES],
            clocks: vec![PauseClock::default(); links.len()],
            stats: vec![PortStats::default(); links.len()],
            buffer,
            marking,
            ecn_rng: Rng::stream(seed, (12 << 32) | u64::from(node)),
            l2: None,
            watchdog: None,
            routes: false,
            dwrr: None,
        }
    }

    /// The switch routes (L3): frames leave it without their 802.1Q tag.
    pub(super) fn routing(mut self) -> Switch {
        self.routes = true;
        self
    }

    /// Its ECMP salt from `seed` instead of the run's seed (`network.ecmp_seed`).
    pub(super) fn with_ecmp_seed(mut self, seed: u64) -> Switch {
        self.salt = ecmp_salt(seed, self.node);
        self
    }

    /// The switch's outputs share their links between classes by DWRR with `weights` (its
    /// classes', highest priority first) instead of strict priority.
    pub(super) fn with_dwrr(mut self, weights: Weights) -> Switch {
        self.dwrr = Some(Box::new(PortSchedulers {
            weights,
            ports: vec![Dwrr::default(); self.ports.len()],
        }));
        self
    }

    /// Whether PFC runs on `port` (the configuration's; a `tor-pfc-off` drift turns it off).
    pub(super) fn pfc_on(&self, port: usize) -> bool {
        !self.ports[port].pfc_off
    }

    /// Turns PFC on `port` off (a configuration drift) or back on. Off, its ingress forgets
    /// the pauses it sent (it sends no resume) and its output any pause in force.
    pub(super) fn set_pfc<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        port: usize,
        on: bool,
    ) {
        fx.q.origin = self.node;
        self.ports[port].pfc_off = !on;
        if !on {
            self.ports[port].ingress.xoff = [false; MAX_CLASSES];
            for c in 0..MAX_CLASSES {
                self.clocks[port].resumed(c);
            }
            for c in 0..fx.classes.len() {
                if self.ports[port].is_paused(c) {
                    self.resume(fx, now, port, c);
                }
            }
        }
    }

    /// The ECN marking it runs.
    pub(super) fn marking(&self) -> Marking {
        self.marking
    }

    /// Runs `marking` instead (a configuration drift, or its repair).
    pub(super) fn set_marking(&mut self, marking: Marking) {
        self.marking = marking;
    }

    /// Its input buffers hold the lossy classes of `mask` beside lossless ones (input-queued):
    /// lossy bytes count against a lossless class's pause threshold, and never take the
    /// headroom ([`Ingress::with_lossy`]).
    pub(super) fn with_lossy_classes(mut self, mask: u8) -> Switch {
        for p in &mut self.ports {
            p.ingress = Ingress::with_lossy(mask);
        }
        self
    }

    /// The links of `ports` run 802.3x PAUSE instead of PFC (`network.pause_hosts`): their
    /// ingress pauses the whole link, and a pause received there stops every class.
    pub(super) fn with_pause_ports(mut self, ports: &[usize]) -> Switch {
        for &p in ports {
            self.ports[p].ingress = Ingress::PAUSE;
        }
        self
    }

    /// Gives the switch L2 tables (a ToR's ARP and MAC tables and flooding).
    pub(super) fn with_l2(mut self, l2: L2Table) -> Switch {
        self.l2 = Some(Box::new(l2));
        self
    }

    /// Gives the switch a PFC watchdog.
    pub(super) fn with_watchdog(mut self, wd: PfcWatchdog) -> Switch {
        self.watchdog = Some(Box::new(wd));
        self
    }

    /// The L2 tables' counters and the watchdog's, as the safety report has them.
    pub(super) fn safety_counts(&self) -> (L2Counts, (u64, u64)) {
        (
            self.l2
                .as_ref()
                .map_or_else(L2Counts::default, |l| l.counts),
            self.watchdog
                .as_ref()
                .map_or((0, 0), |w| (w.storms, w.restorations)),
        )
    }

    /// Lets output `out` send now if it is free, or once it is.
    fn kick<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, out: usize) {
        let p = &mut self.ports[out];
        if p.wake {
            return;
        }
        if now >= p.busy_until {
            self.send(fx, now, out);
        } else {
            p.wake = true;
            fx.q.push(
                p.busy_until,
                Ev::TxDone {
                    node: self.node,
                    port: out as u16,
                },
            );
        }
    }

    /// Output `out` finished a frame (or may send): serves its classes in strict priority,
    /// skipping paused ones.
    pub(super) fn tx_done<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, out: usize) {
        self.ports[out].wake = false;
        self.send(fx, now, out);
    }

    /// A frame arrived through `inp`.
    pub(super) fn receive<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        inp: u16,
        pkt: u32,
        hop: Hop,
    ) {
        let dst = hop.dst;
        let c = fx.classes.class(fx.classes.priority(&hop));
        fx.mon.rx(self.node, inp, c, u64::from(hop.wire));
        if let Some(l2) = &mut self.l2 {
            // The ToR learns a server's MAC from every frame it sends (seed 001 §4.2); an
            // entry at a port towards a switch is never looked up.
            l2.learn(usize::from(inp), now);
        }
        let (hops, last) = fx.topo.route(self.node, dst);
        let out = match hops.len() {
            0 => {
                self.ingress_drop(fx, inp, c, pkt);
                return;
            }
            1 => hops[0] as usize,
            n => hops[ecmp_pick(mix(u64::from(hop.hash) ^ self.salt), n)] as usize,
        };
        if last && self.l2.as_ref().is_some_and(|l2| !l2.known(now, out)) {
            self.unknown_destination(fx, now, Placement { inp, out, c }, pkt, hop);
            return;
        }
        if self.drops_stormed()
            && (self.ports[out].stormed(c) || self.ports[usize::from(inp)].stormed(c))
        {
            // The switch watchdog disabled lossless on this queue: its packets are dropped,
            // both ways.
            self.ingress_drop(fx, inp, c, pkt);
            return;
        }
        let at = Placement { inp, out, c };
        let lossless = self.lossless_from(fx, usize::from(inp), c);
        if self.admit(at, u64::from(hop.wire), lossless) {
            self.place(fx, now, at, pkt, hop, true);
        } else {
            self.ingress_drop(fx, inp, c, pkt);
        }
    }

    /// Whether a packet leaving may be discarded at the head of its queue instead: a flooded
    /// copy or a link down (with L2 tables), a stormed queue (with a dropping watchdog).
    #[inline]
    fn may_discard(&self) -> bool {
        self.l2.is_some() || self.drops_stormed()
    }

    /// Whether the watchdog drops the packets of the queues it found in a storm.
    #[inline]
    fn drops_stormed(&self) -> bool {
        self.watchdog.as_ref().is_some_and(|w| w.drops())
    }

    /// A packet dropped on arrival through `inp` (class `c`).
    fn ingress_drop<M: SimMemory>(&mut self, fx: &mut Fabric<M>, inp: u16, c: usize, pkt: u32) {
        fx.mon.ingress_drop(self.node, inp, c);
        fx.pool.free(pkt);
        self.stats[usize::from(inp)].drops += 1;
    }

    /// Whether a `wire`-byte packet for `at` may enter the buffer (a lossless one always may,
    /// counted as a headroom overflow when it does not fit).
    fn admit(&mut self, at: Placement, wire: u64, lossless: bool) -> bool {
        let i = usize::from(at.inp);
        let buffer = self.buffer.bytes;
        match self.buffer.model {
            SwitchModel::InputQueued => {
                let ingress = &self.ports[i].ingress;
                // Beside a lossless class, a lossy frame may not take the headroom.
                let limit = if lossless || ingress.lossy_mask() == 0 {
                    buffer
                } else {
                    self.buffer.xoff[i]
                };
                if ingress.total() + wire > limit {
                    if lossless {
                        self.stats[i].headroom_overflow += 1;
                    }
                    lossless
                } else {
                    true
                }
            }
            SwitchModel::SharedBuffer => {
                let free = buffer.saturating_sub(self.used);
                let limit = (self.buffer.dt_alpha * free as f64) as u64;
                if lossless {
                    if self.used + wire > buffer {
                        self.stats[i].headroom_overflow += 1;
                    }
                    true
                } else {
                    !(self.used + wire > buffer || self.ports[at.out].egress[at.c] + wire > limit)
                }
            }
        }
    }

    /// Puts an admitted packet in the queue of (`at.out`, `at.c`), or on the link at once.
    /// `charge`: its bytes count against its ingress and the buffer (false for the second and
    /// later copies of a flooded packet, which share the first one's buffer).
    fn place<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        at: Placement,
        pkt: u32,
        mut hop: Hop,
        charge: bool,
    ) {
        let Placement { inp, out, c } = at;
        let wire = u64::from(hop.wire);
        let i = usize::from(inp);
        // ECN marking on the egress queue this packet joins.
        if self.marking.on_enqueue() {
            self.mark(fx, out, c, pkt, &mut hop);
        }
        // Nothing queued for an idle output: the packet leaves at once (exactly as queueing it
        // and serving the queue would do, without touching queue or packet metadata).
        let port = &self.ports[out];
        let through = port.queued == 0 && !port.held(c) && !port.wake && now >= port.busy_until;
        if through && charge && !fx.classes.class_lossless(c) && !self.may_discard() {
            // A lossy packet through an idle output with nothing queued: it would enter the
            // books and leave them at once (no pause for a lossy class, no copies sharing its
            // buffer, no watchdog to drop it), so it only goes on the link.
            self.put_on_link(fx, now, out, c, pkt, hop);
            return;
        }
        if charge {
            self.ports[i].ingress.add(c, wire);
            self.used += wire;
        }
        self.ports[out].egress[c] += wire;
        self.ports[out].queued += wire;
        if through {
            self.pause_if_full(fx, now, inp, c);
            if !self.depart(fx, now, at, pkt, hop) {
                self.kick(fx, now, out);
            }
            return;
        }
        self.queues.push(&mut fx.pool.meta, out, c, inp, pkt);
        self.pause_if_full(fx, now, inp, c);
        self.kick(fx, now, out);
    }

    fn send<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, out: usize) {
        let nc = fx.classes.len();
        if now < self.ports[out].busy_until {
            return;
        }
        if self.dwrr.is_some() {
            self.send_weighted(fx, now, out);
            return;
        }
        let mut c = 0;
        while c < nc {
            if self.ports[out].held(c) {
                c += 1;
                continue;
            }
            let Some((pkt, inp)) = self.queues.pop(&fx.pool.meta, out, c) else {
                c += 1;
                continue;
            };
            let hop = fx.pool.meta[pkt as usize].hop;
            if self.depart(fx, now, Placement { inp, out, c }, pkt, hop) {
                return;
            }
            // Discarded without using the link: serve the next packet (from the highest
            // class again).
            c = 0;
        }
    }

    /// [`Switch::send`] under DWRR: the class the output's round picks among those with a
    /// frame queued and not paused.
    fn send_weighted<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, out: usize) {
        let nc = fx.classes.len();
        loop {
            let p = &self.ports[out];
            let ready = (0..nc)
                .filter(|&c| p.egress[c] > 0 && !p.held(c))
                .fold(0u8, |m, c| m | 1 << c);
            let d = self.dwrr.as_deref_mut().expect("a DWRR switch");
            let Some(c) = d.ports[out].pick(&d.weights, ready) else {
                return;
            };
            let Some((pkt, inp)) = self.queues.pop(&fx.pool.meta, out, c) else {
                debug_assert!(
                    false,
                    "class {c} of output {out} counts bytes but holds no packet"
                );
                return;
            };
            let hop = fx.pool.meta[pkt as usize].hop;
            if self.depart(fx, now, Placement { inp, out, c }, pkt, hop) {
                let d = self.dwrr.as_deref_mut().expect("a DWRR switch");
                d.ports[out].charge(c, u32::from(hop.wire));
                return;
            }
            // Discarded without using the link: it costs the class nothing.
        }
    }

    /// Takes `pkt` out of the switch's books: its bytes leave the output's queue and — unless
    /// other copies of a flooded packet still share them — the input's ingress (which may
    /// resume its upstream) and the buffer.
    fn release<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        at: Placement,
        pkt: u32,
        wire: u64,
    ) {
        let Placement { inp, out, c } = at;
        let i = usize::from(inp);
        let last = self.l2.as_mut().is_none_or(|l2| l2.flood_release(pkt));
        self.ports[out].egress[c] -= wire;
        self.ports[out].queued -= wire;
        if !last {
            return;
        }
        self.ports[i].ingress.remove(c, wire);
        self.used -= wire;
        if self.ports[i].ingress.shares_threshold() {
            // Every lossless class pauses on the whole input: any frame leaving may resume
            // any of them.
            let t = self.pause_threshold(inp);
            let gap = self.buffer.resume_gap;
            for k in 0..fx.classes.len() {
                if self.ports[i].ingress.xoff[k] && self.ports[i].ingress.resume_below(k, t, gap) {
                    let prio = self.pause_prio(fx, i, k);
                    self.send_pfc(fx, now, inp, prio, Pause::Xon);
                }
            }
        } else if self.ports[i].ingress.pausing(c) {
            let t = self.pause_threshold(inp);
            let gap = self.buffer.resume_gap;
            if self.ports[i].ingress.resume_below(c, t, gap) {
                let prio = self.pause_prio(fx, i, c);
                self.send_pfc(fx, now, inp, prio, Pause::Xon);
            }
        }
    }

    /// Takes `pkt` out of the switch's books and puts it on the link of `at.out`, which is
    /// free — or discards it at the head of the queue: a flooded copy on a port that does not
    /// lead to its destination (seed 001 §4.2), a packet for a port whose link is down or
    /// whose queue the switch watchdog drops. Returns whether it went on the link.
    fn depart<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        at: Placement,
        pkt: u32,
        hop: Hop,
    ) -> bool {
        let (out, c) = (at.out, at.c);
        let wire = u64::from(hop.wire);
        self.release(fx, now, at, pkt, wire);
        if self.may_discard() {
            let to_host = fx.topo.port_host(self.node, out);
            let mismatch = hop.flooded() && to_host != Some(hop.dst);
            let down = to_host.is_some() && self.l2.as_ref().is_some_and(|l2| l2.is_down(out));
            let discard = mismatch || down || (self.drops_stormed() && self.ports[out].stormed(c));
            if discard {
                fx.mon.egress_drop(self.node, out as u16, c);
                fx.pool.free(pkt);
                if mismatch {
                    if let Some(l2) = &mut self.l2 {
                        l2.counts.flood_discards += 1;
                    }
                }
                if !mismatch || to_host.is_none() {
                    // A link down, a watchdog's drop, or a flooded copy at a port towards a
                    // switch, whose egress drops a frame whose destination MAC is not the next
                    // router's (seed 001 §4.2): gone at once.
                    return false;
                }
                // A flooded copy for another server's port is sent, and dropped by that
                // server's NIC (not its MAC): it takes the port's time.
                let p = &mut self.ports[out];
                let wake = p.queued > 0;
                let done = fx.occupy(now, self.node, out, &p.link, wire, wake);
                p.busy_until = done;
                p.wake = wake;
                return true;
            }
        }
        self.put_on_link(fx, now, out, c, pkt, hop);
        true
    }

    /// Marks `pkt` (its record and `hop`, the copy travelling with it) Congestion Experienced
    /// if it is ECN-capable and the rule says so for the queue of (`out`, `c`) as it stands.
    fn mark<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        out: usize,
        c: usize,
        pkt: u32,
        hop: &mut Hop,
    ) {
        if matches!(hop.ecn(), Ecn::Ect0 | Ecn::Ect1)
            && self
                .marking
                .mark(self.ports[out].egress[c], &mut self.ecn_rng)
        {
            hop.mark_ce();
            fx.pool.meta[pkt as usize].hop.mark_ce();
            self.stats[out].ecn_marked += 1;
        }
    }

    /// Serializes `pkt` (class `c`, out of the switch's books) onto the free link of `out`;
    /// marking at dequeue, on the bytes of its class it leaves queued behind.
    #[inline]
    fn put_on_link<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        out: usize,
        c: usize,
        pkt: u32,
        mut hop: Hop,
    ) {
        if self.marking.on_dequeue() {
            self.mark(fx, out, c, pkt, &mut hop);
        }
        // A routed hop's frame leaves untagged; the packet's record follows, since the next
        // hop accounts for it by what it received. A flooded copy is bridged within the
        // ToR's VLAN, tag and all (and its copies share one record).
        let hop = if self.routes && !hop.flooded() {
            let routed = hop.routed();
            fx.pool.meta[pkt as usize].hop = routed;
            routed
        } else {
            hop
        };
        let wire = u64::from(hop.wire);
        self.stats[out].tx_packets += 1;
        self.stats[out].tx_bytes += wire;
        fx.mon.tx(self.node, out as u16, c, wire);
        // Wake up when this frame is out only if something else waits for this output.
        let port = &mut self.ports[out];
        let wake = port.queued > 0;
        let done = fx.occupy(now, self.node, out, &port.link, wire, wake);
        fx.propagate(done, &port.link, pkt, hop);
        port.busy_until = done;
        port.wake = wake;
    }

    /// PFC: pauses the upstream of ingress (`inp`, class `c`) once a lossless class holds more
    /// than its threshold; the pause names the class's priority.
    fn pause_if_full<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, inp: u16, c: usize) {
        let i = usize::from(inp);
        if self.lossless_from(fx, i, c) {
            let threshold = self.pause_threshold(inp);
            if self.ports[i].ingress.pause_above(c, threshold) {
                let prio = self.pause_prio(fx, i, c);
                self.send_pfc(fx, now, inp, prio, Pause::Xoff);
            }
        }
    }

    /// Whether a frame of class `c` arriving through `inp` is lossless there: its class is
    /// and the port runs PFC; every frame, when the port's link runs 802.3x PAUSE.
    #[inline]
    fn lossless_from<M: SimMemory>(&self, fx: &Fabric<M>, inp: usize, c: usize) -> bool {
        let port = &self.ports[inp];
        port.ingress.link_wide() || (fx.classes.class_lossless(c) && !port.pfc_off)
    }

    /// The priority the pause frames of ingress `port`'s class `c` name: the class's, or
    /// every priority when the port's link runs 802.3x PAUSE.
    #[inline]
    fn pause_prio<M: SimMemory>(&self, fx: &Fabric<M>, port: usize, c: usize) -> u8 {
        if self.ports[port].ingress.link_wide() {
            ALL_PRIORITIES
        } else {
            fx.classes.class_priority(c)
        }
    }

    /// The ingress occupancy above which a lossless (port `inp`, priority) pauses its upstream.
    pub(super) fn pause_threshold(&self, inp: u16) -> u64 {
        match self.buffer.model {
            SwitchModel::InputQueued => self.buffer.xoff[usize::from(inp)],
            SwitchModel::SharedBuffer => shared_xoff(
                self.buffer.bytes,
                self.buffer.reserved,
                self.used,
                self.buffer.pfc_alpha,
            ),
        }
    }

    /// The pause threshold of input `inp` as configured (input-queued).
    pub(super) fn port_xoff(&self, inp: u16) -> Option<u64> {
        self.buffer.xoff.get(usize::from(inp)).copied()
    }

    fn send_pfc<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        port: u16,
        prio: u8,
        what: Pause,
    ) {
        let p = usize::from(port);
        self.stats[p].pause_sent += 1;
        // An 802.3x PAUSE is timed as the highest class's pause.
        let c = if prio == ALL_PRIORITIES {
            0
        } else {
            fx.classes.class(prio)
        };
        match fx.send_pfc(now, self.node, port, prio, what) {
            Some(refresh) => self.clocks[p].sent(c, refresh),
            None => self.clocks[p].resumed(c),
        }
    }

    /// A PFC frame for `prio` arrived through `port`: pauses that output's class for
    /// `quanta` (from now: a later frame replaces an earlier one's time), or resumes it (0).
    pub(super) fn pfc<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        port: u16,
        prio: u8,
        quanta: u16,
    ) {
        let all = prio == ALL_PRIORITIES;
        let c = if all {
            Some(0)
        } else {
            fx.classes.paused_class(prio)
        };
        fx.mon.pause_received(self.node, port, c);
        let p = usize::from(port);
        self.stats[p].pause_received += 1;
        let Some(c) = c.filter(|_| !self.ports[p].pfc_off) else {
            return;
        };
        if all {
            // 802.3x PAUSE: the whole output, every class.
            for c in 0..fx.classes.len() {
                self.pause_class(fx, now, p, c, quanta);
            }
        } else {
            self.pause_class(fx, now, p, c, quanta);
        }
    }

    /// Output `p`'s class `c` paused for `quanta`, or resumed (0).
    fn pause_class<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        p: usize,
        c: usize,
        quanta: u16,
    ) {
        let port = p as u16;
        if quanta > 0 {
            let time = pause_time(quanta, self.ports[p].link.rate_bps);
            let until = self.clocks[p].received(c, now, time);
            fx.pause_expiry(until, self.node, port, c);
            if !self.ports[p].is_paused(c) {
                self.ports[p].set_paused(c, true);
                self.paused_since[p * MAX_CLASSES + c] = now;
            }
        } else if self.ports[p].is_paused(c) {
            self.resume(fx, now, p, c);
        }
    }

    /// Output `p`'s class `c` may send again.
    fn resume<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, p: usize, c: usize) {
        self.ports[p].set_paused(c, false);
        let d = now - self.paused_since[p * MAX_CLASSES + c];
        self.stats[p].paused = self.stats[p].paused + d;
        fx.mon.paused(self.node, p as u16, Some(c), d);
        self.kick(fx, now, p);
    }

    /// A pause timer of `port`'s class `c`: its ingress, still above the threshold, sends
    /// the pause again (`refresh`); or the pause its output received has run out, and it
    /// sends again unless a later frame moved the end.
    pub(super) fn pause_timer<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        port: u16,
        c: usize,
        refresh: bool,
    ) {
        let p = usize::from(port);
        if refresh {
            if self.clocks[p].refresh_due(c, now) && self.ports[p].ingress.xoff[c] {
                let prio = self.pause_prio(fx, p, c);
                self.send_pfc(fx, now, port, prio, Pause::Refresh);
            }
        } else if self.ports[p].is_paused(c) && self.clocks[p].expired(c, now) {
            self.resume(fx, now, p, c);
        }
    }

    /// How long output `port`'s class `c` has been paused without a resume.
    pub(super) fn open_pause(&self, now: Time, port: u16, c: usize) -> Dur {
        let p = usize::from(port);
        if self.ports[p].is_paused(c) {
            now - self.paused_since[p * MAX_CLASSES + c]
        } else {
            Dur::ZERO
        }
    }

    /// Ends the run at `now`: closes the pause intervals still open.
    pub(super) fn finish(&mut self, now: Time) {
        for (p, port) in self.ports.iter_mut().enumerate() {
            for c in 0..MAX_CLASSES {
                if port.is_paused(c) {
                    let since = self.paused_since[p * MAX_CLASSES + c];
                    self.stats[p].paused = self.stats[p].paused + (now - since);
                    port.set_paused(c, false);
                }
            }
        }
    }

    /// `pkt` (in through `at.inp`, class `at.c`) is for the server at `at.out` whose MAC entry is
    /// missing: drop it without an ARP entry, drop it if lossless under `drop-lossless`,
    /// flood it otherwise.
    fn unknown_destination<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        at: Placement,
        pkt: u32,
        mut hop: Hop,
    ) {
        let Placement { inp, out, c } = at;
        let Some(l2) = self.l2.as_mut() else {
            debug_assert!(false, "only a switch with L2 tables misses a MAC entry");
            return;
        };
        if l2.arp_expired(now, out) {
            l2.counts.arp_drops += 1;
            self.ingress_drop(fx, inp, c, pkt);
            return;
        }
        if l2.policy() == UnknownUnicast::DropLossless && fx.classes.class_lossless(c) {
            l2.counts.l2_drops += 1;
            self.ingress_drop(fx, inp, c, pkt);
            return;
        }
        let mut c = c;
        if l2.policy() == UnknownUnicast::FloodLossy {
            let dscp = l2.flood_dscp();
            let prio = fx.classes.of_dscp(dscp);
            hop.set_dscp(dscp, prio);
            c = fx.classes.class(prio);
        }
        hop.mark_flooded();
        l2.counts.floods += 1;
        let outs: Vec<usize> = (0..self.ports.len())
            .filter(|&p| {
                p != usize::from(inp)
                    && !(fx.topo.port_host(self.node, p).is_some() && l2.is_down(p))
            })
            .collect();
        let Some(&first) = outs.first() else {
            self.ingress_drop(fx, inp, c, pkt);
            return;
        };
        // One packet in the buffer, charged once to its ingress, queued at every port: its
        // bytes are released when the last copy leaves (a shared-memory switch's multicast).
        let lossless = fx.classes.class_lossless(c);
        if !self.admit(
            Placement { inp, out: first, c },
            u64::from(hop.wire),
            lossless,
        ) {
            self.ingress_drop(fx, inp, c, pkt);
            return;
        }
        let mut copies = vec![pkt];
        for _ in 1..outs.len() {
            copies.push(fx.pool.copy(pkt, Meta { hop, next: NIL }));
        }
        fx.pool.meta[pkt as usize].hop = hop;
        if copies.len() > 1 {
            if let Some(l2) = self.l2.as_mut() {
                l2.flood_group(&copies);
            }
        }
        for (k, (&out, &q)) in outs.iter().zip(&copies).enumerate() {
            self.place(fx, now, Placement { inp, out, c }, q, hop, k == 0);
        }
    }

    /// Whether queued packet `pkt` shares its buffer with other copies, and which group.
    pub(super) fn flood_group(&self, pkt: u32) -> Option<u32> {
        self.l2.as_ref().and_then(|l2| l2.group_of(pkt))
    }

    /// The server at `port` went down: the ToR flushes its MAC entry (and ages its ARP entry
    /// out after the timeout), a pause the NIC held expires, and what was queued for it is
    /// dropped.
    pub(super) fn link_down<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, port: usize) {
        if let Some(l2) = &mut self.l2 {
            l2.link_down(now, port);
        }
        fx.q.origin = self.node;
        for c in 0..MAX_CLASSES {
            if self.ports[port].is_paused(c) {
                let prio = fx.classes.class_priority(c.min(fx.classes.len() - 1));
                self.pfc(fx, now, port as u16, prio, 0);
            }
        }
        self.flush_egress(fx, now, port);
    }

    /// The server at `port` is back: its link is up and its ARP entry no longer ages.
    pub(super) fn link_up(&mut self, port: usize) {
        if let Some(l2) = &mut self.l2 {
            l2.link_up(port);
        }
    }

    /// The server at `port` announced itself (a gratuitous ARP): the ToR learns its MAC again.
    pub(super) fn announce(&mut self, now: Time, port: usize) {
        if let Some(l2) = &mut self.l2 {
            l2.announce(now, port);
        }
    }

    /// Drops everything queued at output `out`.
    fn flush_egress<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time, out: usize) {
        for c in 0..fx.classes.len() {
            while let Some((pkt, inp)) = self.queues.pop(&fx.pool.meta, out, c) {
                let wire = u64::from(fx.pool.meta[pkt as usize].hop.wire);
                self.release(fx, now, Placement { inp, out, c }, pkt, wire);
                fx.mon.egress_drop(self.node, out as u16, c);
                self.stats[out].drops += 1;
                fx.pool.free(pkt);
            }
        }
    }

    /// The watchdog's poll (SONiC `pfcwd`'s detection and restoration) of this switch's
    /// server-facing queues.
    pub(super) fn watchdog_poll<M: SimMemory>(&mut self, fx: &mut Fabric<M>, now: Time) {
        let Some(wd) = self.watchdog.as_ref() else {
            return;
        };
        let (poll, detection, restoration, action) =
            (wd.poll, wd.detection, wd.restoration, wd.action);
        for k in 0..wd.queues.len() {
            let Some(mut q) = self.watchdog.as_ref().map(|w| w.queues[k]) else {
                return;
            };
            let c = usize::from(q.class);
            let pc = fx.mon.get(self.node, q.port, c);
            let port = &self.ports[usize::from(q.port)];
            let (queued, paused, stormed) =
                (port.egress[c] > 0, port.is_paused(c), port.stormed(c));
            let now_counts = (pc.tx_packets, pc.pause_received);
            // What the poll decides, acted on once the queue's state is stored back.
            let mut act = None;
            if let Some((tx, prx)) = q.last {
                // Pauses received since the last poll, or a pause in force (refreshed on a
                // real link).
                let pauses = pc.pause_received > prx || paused;
                if !stormed {
                    if queued && pc.tx_packets == tx && pauses {
                        if q.time_left <= poll {
                            q.time_left = detection;
                            q.restore_left = restoration;
                            act = Some(true);
                        } else {
                            q.time_left = Dur::from_picos(q.time_left.as_picos() - poll.as_picos());
                        }
                    } else {
                        q.time_left = detection;
                    }
                } else if pauses {
                    q.restore_left = restoration;
                } else if q.restore_left <= poll {
                    q.time_left = detection;
                    act = Some(false);
                } else {
                    q.restore_left = Dur::from_picos(q.restore_left.as_picos() - poll.as_picos());
                }
            } else {
                q.time_left = detection;
            }
            q.last = Some(now_counts);
            if let Some(wd) = self.watchdog.as_mut() {
                wd.queues[k] = q;
                match act {
                    Some(true) => wd.storms += 1,
                    Some(false) => wd.restorations += 1,
                    None => {}
                }
            }
            match act {
                Some(true) if action != SwitchWatchdog::Alert => {
                    self.storm(fx, now, action, usize::from(q.port), c, true);
                }
                Some(false) => self.storm(fx, now, action, usize::from(q.port), c, false),
                _ => {}
            }
        }
    }

    /// Starts or ends the watchdog's action on (`port`, class `c`).
    fn storm<M: SimMemory>(
        &mut self,
        fx: &mut Fabric<M>,
        now: Time,
        action: SwitchWatchdog,
        port: usize,
        c: usize,
        on: bool,
    ) {
        self.ports[port].set_storm(c, on);
        fx.q.origin = self.node;
        if on && action == SwitchWatchdog::Drop {
            // Disable lossless: what waits for the port is dropped, and the port's own ingress
            // stops pausing the server.
            self.flush_egress(fx, now, port);
            if self.ports[port].ingress.xoff[c] {
                self.ports[port].ingress.xoff[c] = false;
                let prio = fx.classes.class_priority(c);
                self.send_pfc(fx, now, port as u16, prio, Pause::Xon);
            }
        }
        self.kick(fx, now, port);
    }
}

/// Where a packet is in a switch: arrived through `inp`, for output `out`, in class `c`.
#[derive(Debug, Clone, Copy)]
struct Placement {
    inp: u16,
    out: usize,
    c: usize,
}

/// The switch watchdog's state of one (server-facing port, lossless class).
#[derive(Debug, Clone, Copy)]
struct WdQueue {
    port: u16,
    class: u8,
    /// Counters at the previous poll (`None` before the first).
    last: Option<(u64, u64)>,
    time_left: Dur,
    restore_left: Dur,
}

/// A switch's PFC watchdog (seed 001 §4.3, after SONiC's `pfcwd`): polled every `poll_ms`, a
/// server-facing queue with packets, nothing transmitted and pauses received since the last
/// poll for `detection_ms` is stormed, and the action (`drop`, `forward`, `alert`) holds until
/// `restoration_ms` pass without pauses (frames received, a pause in force counting too). It
/// reads the monitor's counters, as pfcwd reads the switch's.
#[derive(Debug)]
pub(super) struct PfcWatchdog {
    queues: Vec<WdQueue>,
    action: SwitchWatchdog,
    poll: Dur,
    detection: Dur,
    restoration: Dur,
    storms: u64,
    restorations: u64,
}

impl PfcWatchdog {
    /// A watchdog over the lossless `classes` of `ports` (the server-facing ones).
    pub(super) fn new(cfg: &SimConfig, ports: &[u16], classes: &[u8]) -> PfcWatchdog {
        let us = crate::config::us;
        PfcWatchdog {
            queues: ports
                .iter()
                .flat_map(|&port| {
                    classes.iter().map(move |&class| WdQueue {
                        port,
                        class,
                        last: None,
                        time_left: Dur::ZERO,
                        restore_left: Dur::ZERO,
                    })
                })
                .collect(),
            action: cfg.watchdog.switch,
            poll: us(cfg.watchdog.poll_ms * 1e3),
            detection: us(cfg.watchdog.detection_ms * 1e3),
            restoration: us(cfg.watchdog.restoration_ms * 1e3),
            storms: 0,
            restorations: 0,
        }
    }

    /// Whether stormed queues' packets are dropped.
    #[inline]
    fn drops(&self) -> bool {
        self.action == SwitchWatchdog::Drop
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
