//! A test harness: two queue pairs connected back to back through in-memory links with latency,
//! bandwidth, loss, reordering and duplication, all from one seed (after quinn-proto's
//! `tests/util.rs` `Pair`). Used by this crate's tests, the fuzz target and anyone who wants to
//! watch the core work without a simulator.
//!
//! Time is simulated: [`Pair::drive`] jumps from event to event, so a run of seconds of
//! simulated time takes milliseconds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use irn_wire::{Ecn, IbRepr, Psn};

use crate::config::RecoveryConfig;
use crate::memory::ByteMemory;
use crate::qp::{connect_qp, QpAttr, QpConfig, QueuePair};
use crate::time::{Dur, Time};
use crate::wr::Completion;

pub use crate::rng::Rng;

/// One direction of the connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub latency: Dur,
    /// Serialization rate in bits per second (0 = infinitely fast).
    pub bandwidth_bps: u64,
    /// Probability that a packet is dropped.
    pub loss: f64,
    /// Probability that a packet is delayed by an extra `0..reorder_delay` (and so reordered).
    pub reorder: f64,
    /// Largest extra delay of a reordered packet.
    pub reorder_delay: Dur,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Probability that a data packet arrives CE-marked.
    pub ce_mark: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            latency: Dur::from_micros(2),
            bandwidth_bps: 40_000_000_000,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Dur::from_micros(5),
            duplicate: 0.0,
            ce_mark: 0.0,
        }
    }
}

/// Which queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The first (QPN 0x11 by default).
    A,
    /// The second (QPN 0x22 by default).
    B,
}

/// A packet on a link.
#[derive(Debug, Clone)]
pub struct Packet {
    /// Headers.
    pub ib: IbRepr,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// ECN field.
    pub ecn: Ecn,
}

#[derive(Debug)]
struct Link {
    cfg: LinkConfig,
    busy_until: Time,
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    slots: Vec<Option<Packet>>,
    free: Vec<usize>,
}

impl Link {
    fn new(cfg: LinkConfig) -> Link {
        Link {
            cfg,
            busy_until: Time::ZERO,
            queue: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn push(&mut self, at: Time, seq: u64, p: Packet) {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(p);
                i
            }
            None => {
                self.slots.push(Some(p));
                self.slots.len() - 1
            }
        };
        self.queue.push(Reverse((at, seq, i)));
    }

    fn next_arrival(&self) -> Option<Time> {
        self.queue.peek().map(|Reverse((t, _, _))| *t)
    }

    fn pop_due(&mut self, now: Time) -> Option<Packet> {
        let Reverse((t, _, _)) = *self.queue.peek()?;
        if t > now {
            return None;
        }
        let Reverse((_, _, i)) = self.queue.pop()?;
        self.free.push(i);
        self.slots[i].take()
    }
}

/// How [`Pair::new`] builds and connects the two queue pairs.
#[derive(Debug, Clone)]
pub struct PairConfig {
    /// Queue-pair configuration of both sides (their QPNs are set to 0x11 and 0x22).
    pub qp: QpConfig,
    /// Attributes of both sides (QPNs and PSNs are filled in).
    pub attr: QpAttr,
    /// A → B.
    pub a_to_b: LinkConfig,
    /// B → A.
    pub b_to_a: LinkConfig,
    /// Seed of the impairments and of the memories' keys.
    pub seed: u64,
}

impl PairConfig {
    /// Both directions alike, with this loss recovery.
    pub fn new(recovery: RecoveryConfig, link: LinkConfig, seed: u64) -> PairConfig {
        PairConfig {
            qp: QpConfig {
                recovery,
                ..QpConfig::default()
            },
            attr: QpAttr::default(),
            a_to_b: link,
            b_to_a: link,
            seed,
        }
    }
}

/// An observer of delivered packets: `(to, packet)`; `false` drops the packet.
pub type Tap = Box<dyn FnMut(Side, &Packet) -> bool + Send>;

/// Two connected queue pairs, their memories and the links between them.
pub struct Pair {
    /// Queue pair A.
    pub a: QueuePair,
    /// Queue pair B.
    pub b: QueuePair,
    /// A's memory.
    pub mem_a: ByteMemory,
    /// B's memory.
    pub mem_b: ByteMemory,
    /// Completions A produced, in order.
    pub done_a: Vec<Completion>,
    /// Completions B produced, in order.
    pub done_b: Vec<Completion>,
    /// Largest request-PSN window A ever had (BDP-FC invariant).
    pub max_in_flight_a: u32,
    /// Largest request-PSN window B ever had.
    pub max_in_flight_b: u32,
    /// Largest response-PSN window either IRN read responder had.
    pub max_rsp_in_flight: u32,
    /// Packets put on the links (before loss).
    pub packets_sent: u64,
    /// Packets the links dropped.
    pub packets_lost: u64,
    now: Time,
    rng: Rng,
    links: [Link; 2],
    seq: u64,
    buf: Vec<u8>,
    /// An observer of every delivered packet (for scripted tests): `(to, packet)`.
    tap: Option<Tap>,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("now", &self.now)
            .field("a", &self.a)
            .field("b", &self.b)
            .finish_non_exhaustive()
    }
}

impl Pair {
    /// Two queue pairs brought to RTS against each other, with PSNs from the seed.
    pub fn new(cfg: PairConfig) -> Pair {
        let mut rng = Rng::new(cfg.seed);
        let now = Time::ZERO;
        let mut a = QueuePair::new(
            now,
            QpConfig {
                qpn: 0x11,
                ..cfg.qp.clone()
            },
        )
        .expect("a valid queue-pair configuration");
        let mut b = QueuePair::new(
            now,
            QpConfig {
                qpn: 0x22,
                ..cfg.qp.clone()
            },
        )
        .expect("a valid queue-pair configuration");
        let psn_a = Psn::new(rng.next_u64() as u32);
        let psn_b = Psn::new(rng.next_u64() as u32);
        connect(&mut a, &cfg.attr, 0x22, psn_a, psn_b);
        connect(&mut b, &cfg.attr, 0x11, psn_b, psn_a);
        Pair {
            a,
            b,
            mem_a: ByteMemory::new(cfg.seed.wrapping_add(1)),
            mem_b: ByteMemory::new(cfg.seed.wrapping_add(2)),
            done_a: Vec::new(),
            done_b: Vec::new(),
            max_in_flight_a: 0,
            max_in_flight_b: 0,
            max_rsp_in_flight: 0,
            packets_sent: 0,
            packets_lost: 0,
            now,
            rng,
            links: [Link::new(cfg.a_to_b), Link::new(cfg.b_to_a)],
            seq: 0,
            buf: Vec::new(),
            tap: None,
        }
    }

    /// Simulated time now.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Installs an observer that sees every packet about to be delivered and may drop it by
    /// returning `false`.
    pub fn set_tap(&mut self, tap: impl FnMut(Side, &Packet) -> bool + Send + 'static) {
        self.tap = Some(Box::new(tap));
    }

    /// Changes the impairments of one direction.
    pub fn set_link(&mut self, from: Side, cfg: LinkConfig) {
        self.links[from as usize].cfg = cfg;
    }

    /// Lets each queue pair send while its port is free (a NIC pulls the next packet when the
    /// previous one has been serialized), collects completions.
    fn flush(&mut self) {
        for side in [Side::A, Side::B] {
            while self.links[side as usize].busy_until <= self.now {
                let (qp, mem) = match side {
                    Side::A => (&mut self.a, &self.mem_a),
                    Side::B => (&mut self.b, &self.mem_b),
                };
                let may = qp.may_transmit();
                let Some(t) = qp.poll_transmit(self.now, mem, &mut self.buf) else {
                    break;
                };
                // A driver that trusts `may_transmit` (the simulator's NIC) would not have
                // asked: the queue pair would stall.
                debug_assert!(may, "may_transmit() said no, poll_transmit sent {:?}", t.ib);
                let inflight = qp.in_flight();
                let rsp = qp.responses_in_flight();
                match side {
                    Side::A => self.max_in_flight_a = self.max_in_flight_a.max(inflight),
                    Side::B => self.max_in_flight_b = self.max_in_flight_b.max(inflight),
                }
                self.max_rsp_in_flight = self.max_rsp_in_flight.max(rsp);
                let p = Packet {
                    ib: t.ib,
                    payload: self.buf.clone(),
                    ecn: t.ecn,
                };
                self.transmit(side, p);
            }
        }
        while let Some(c) = self.a.poll_completion() {
            self.done_a.push(c);
        }
        while let Some(c) = self.b.poll_completion() {
            self.done_b.push(c);
        }
    }

    fn transmit(&mut self, from: Side, mut p: Packet) {
        self.packets_sent += 1;
        let link = &mut self.links[from as usize];
        let cfg = link.cfg;
        // The frame without its FCS, as a capture has it.
        let bytes =
            (p.ib.buffer_len() + irn_wire::ROCEV2_IPV4_ENCAP_LEN + irn_wire::ETHERNET_FRAMING_LEN
                - irn_wire::ETHERNET_FCS_LEN) as u64;
        let start = link.busy_until.max(self.now);
        let done = if cfg.bandwidth_bps == 0 {
            start
        } else {
            start + Dur::transmission(bytes, cfg.bandwidth_bps)
        };
        link.busy_until = done;
        if self.rng.chance(cfg.loss) {
            self.packets_lost += 1;
            return;
        }
        if p.ecn == Ecn::Ect0 && self.rng.chance(cfg.ce_mark) {
            p.ecn = Ecn::Ce;
        }
        let mut at = done + cfg.latency;
        if self.rng.chance(cfg.reorder) {
            at += Dur::from_picos(self.rng.below(cfg.reorder_delay.as_picos().max(1)));
        }
        if self.rng.chance(cfg.duplicate) {
            let extra = Dur::from_picos(self.rng.below(cfg.reorder_delay.as_picos().max(1)));
            self.seq += 1;
            self.links[from as usize].push(at + extra, self.seq, p.clone());
        }
        self.seq += 1;
        self.links[from as usize].push(at, self.seq, p);
    }

    /// The next time anything happens: an arrival or a queue pair's deadline.
    fn next_event(&self) -> Option<Time> {
        let free = |l: &Link| (l.busy_until > self.now).then_some(l.busy_until);
        [
            self.links[0].next_arrival(),
            self.links[1].next_arrival(),
            free(&self.links[0]),
            free(&self.links[1]),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advances to the next event and processes it. `false` when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.flush();
        let Some(t) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        for (from, to) in [(0usize, Side::B), (1, Side::A)] {
            while let Some(p) = self.links[from].pop_due(now) {
                if let Some(tap) = self.tap.as_mut() {
                    if !tap(to, &p) {
                        continue;
                    }
                }
                match to {
                    Side::A => self
                        .a
                        .handle_packet(now, &p.ib, &p.payload, p.ecn, &mut self.mem_a),
                    Side::B => self
                        .b
                        .handle_packet(now, &p.ib, &p.payload, p.ecn, &mut self.mem_b),
                }
            }
        }
        if self.a.poll_timeout().is_some_and(|d| d <= now) {
            self.a.handle_timeout(now);
        }
        if self.b.poll_timeout().is_some_and(|d| d <= now) {
            self.b.handle_timeout(now);
        }
        self.flush();
        true
    }

    /// Runs until nothing is left to happen (both idle, links empty). Loops forever on a
    /// livelock: use [`Pair::drive_until`] where that is possible.
    pub fn drive(&mut self) {
        while self.step() {}
    }

    /// Runs until idle or until simulated time passes `deadline` or `max_steps` steps ran.
    /// `true` if it went idle.
    pub fn drive_until(&mut self, deadline: Time, max_steps: u64) -> bool {
        for _ in 0..max_steps {
            if self.now > deadline {
                return false;
            }
            if !self.step() {
                return true;
            }
        }
        false
    }

    /// Runs until `pred` holds (checked after each step), idle, or `deadline`.
    pub fn drive_while(&mut self, deadline: Time, mut pred: impl FnMut(&Pair) -> bool) {
        while pred(self) && self.now <= deadline && self.step() {}
    }
}

/// Brings `qp` from RESET to RTS against a peer `dest_qpn`; panics if that fails (a test
/// harness's set-up).
pub fn connect(qp: &mut QueuePair, attr: &QpAttr, dest_qpn: u32, sq_psn: Psn, rq_psn: Psn) {
    if let Err(e) = connect_qp(qp, Time::ZERO, attr, dest_qpn, sq_psn, rq_psn) {
        panic!("bring-up of a test queue pair failed: {e}");
    }
}
