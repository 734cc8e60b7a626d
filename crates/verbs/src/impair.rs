//! Seeded impairment of the send and receive paths: what a lossy Ethernet does to packets,
//! reproducibly, so that loss recovery can be exercised on a loopback interface.
//!
//! Each direction draws, per packet and in this order: drop, duplicate, reorder (hold the
//! packet back until after the next one), delay (release it `delay_us` later). The generator
//! is a SplitMix64 seeded from the configuration, so the same seed and the same packet sequence
//! give the same impairments.

/// Probabilities (0–1) of each impairment in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Impairment {
    /// Packet dropped.
    pub drop: f64,
    /// Packet delivered twice.
    pub duplicate: f64,
    /// Packet held back and delivered after the next packet.
    pub reorder: f64,
    /// Packet delivered `delay_us` later than it would have been.
    pub delay: f64,
    /// The extra delay of a delayed packet, in microseconds.
    pub delay_us: u64,
    /// An ECN-capable packet sent is marked Congestion Experienced (RFC 3168), as a switch
    /// whose queue is past its marking threshold would mark it: the marking reaches the peer
    /// through the kernel's IP headers, and the peer's congestion notification answers it.
    /// Applied on the send path only.
    pub ce: f64,
}

impl Impairment {
    /// Only random loss with probability `p`.
    pub fn loss(p: f64) -> Impairment {
        Impairment {
            drop: p,
            ..Impairment::default()
        }
    }

    /// Whether every probability is a number in 0–1.
    pub fn is_valid(&self) -> bool {
        [self.drop, self.duplicate, self.reorder, self.delay, self.ce]
            .iter()
            .all(|p| (0.0..=1.0).contains(p))
    }

    /// Whether packets may only be dropped (none duplicated, reordered or delayed): a sender
    /// then decides each packet's fate before batching, and what survives may still be
    /// coalesced (UDP GSO), as a lossy link drops segments and passes the rest in order.
    pub fn only_drops(&self) -> bool {
        self.duplicate == 0.0 && self.reorder == 0.0 && self.delay == 0.0
    }

    /// Whether any packet may be dropped, duplicated, reordered or delayed (CE marking is
    /// applied as packets are built, apart from these).
    pub fn is_active(&self) -> bool {
        self.drop > 0.0 || self.duplicate > 0.0 || self.reorder > 0.0 || self.delay > 0.0
    }
}

/// What to do with one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Drop,
    Deliver { copies: u8, hold: bool, delay: bool },
}

pub(crate) use irn_transport::rng::Rng;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::DeviceCounters;

/// Where a packet the device built goes, as it was built: the peer, the UDP source port its
/// ICRC covers, the IP traffic-class byte and the length of its IP and UDP headers — so that a
/// packet held back leaves as it would have, without its own headers being parsed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outbound {
    /// The peer.
    pub(crate) peer: SocketAddr,
    /// The UDP source port.
    pub(crate) sport: u16,
    /// The IPv4 TOS / IPv6 traffic class: DSCP and ECN.
    pub(crate) tos: u8,
    /// Bytes of IP and UDP headers in front of the datagram's payload.
    pub(crate) hdr: usize,
}

/// A packet an impairment holds back: released when `at` comes (delayed), or after the next
/// packet of its direction (held for reordering, or a millisecond later at the latest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// When it leaves at the latest.
    pub(crate) at: Instant,
    /// `Some(out)`: a packet to send; `None`: a received one.
    pub(crate) to: Option<Outbound>,
    /// The IP packet.
    pub(crate) bytes: Vec<u8>,
}

/// What [`Impairer::admit`] lets through now, one at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Out {
    /// The packet that was admitted (once per copy).
    This,
    /// A packet held for reordering, released after the one admitted.
    Held(Held),
}

/// What one admission lets through now, in order: each of at most two copies of the packet,
/// each followed by the packet held for reordering it releases — at most four, kept in place
/// (no allocation per packet).
#[derive(Debug, Default)]
pub(crate) struct Admitted {
    outs: [Option<Out>; 4],
    len: usize,
}

impl Admitted {
    fn push(&mut self, out: Out) {
        self.outs[self.len] = Some(out);
        self.len += 1;
    }
}

impl IntoIterator for Admitted {
    type Item = Out;
    type IntoIter = std::iter::Flatten<std::array::IntoIter<Option<Out>, 4>>;

    fn into_iter(self) -> Self::IntoIter {
        self.outs.into_iter().flatten()
    }
}

/// A device's impairment of both directions as a component: the probabilities, the one
/// seeded random stream every draw comes from (CE marks as packets are built, each packet's
/// fate), and the packets it holds back. It decides; the device sends or receives what it
/// lets through, so it is driven alone in a test.
#[derive(Debug)]
pub(crate) struct Impairer {
    tx: Impairment,
    rx: Impairment,
    rng: Rng,
    /// Packets delayed, in the order they were held (a slow link keeps its order).
    delayed: Vec<Held>,
    /// A packet held for reordering in each direction (tx, rx).
    reorder: [Option<Held>; 2],
}

impl Impairer {
    /// Both directions' impairments and the random stream's seed.
    pub(crate) fn new(tx: Impairment, rx: Impairment, seed: u64) -> Impairer {
        Impairer {
            tx,
            rx,
            rng: Rng::from_state(seed),
            delayed: Vec::new(),
            reorder: [None, None],
        }
    }

    /// The send direction's impairment.
    pub(crate) fn tx(&self) -> &Impairment {
        &self.tx
    }

    /// The receive direction's impairment.
    pub(crate) fn rx(&self) -> &Impairment {
        &self.rx
    }

    /// Whether an ECN-capable packet being built is marked CE (the send direction's `ce`).
    pub(crate) fn mark_ce(&mut self) -> bool {
        self.tx.ce > 0.0 && self.rng.chance(self.tx.ce)
    }

    /// Whether a packet to send is dropped, when the send direction only drops (its fate is
    /// drawn before batching: what survives may still be coalesced).
    pub(crate) fn drops_tx(&mut self) -> bool {
        self.tx.fate(&mut self.rng) == Fate::Drop
    }

    /// Draws the fate of a packet (`to`: `Some` to send, `None` received) at `now`:
    /// dropped, or delivered once or twice, each copy now, held back until the next packet
    /// of its direction, or delayed. Returns what leaves now, in order; counts drops and held
    /// or delayed copies into `counters`.
    pub(crate) fn admit(
        &mut self,
        now: Instant,
        to: Option<Outbound>,
        bytes: &[u8],
        counters: &mut DeviceCounters,
    ) -> Admitted {
        let imp = if to.is_some() { self.tx } else { self.rx };
        let (copies, hold, delay) = match imp.fate(&mut self.rng) {
            Fate::Drop if to.is_some() => {
                counters.tx_impaired_drops += 1;
                return Admitted::default();
            }
            Fate::Drop => {
                counters.rx_impaired_drops += 1;
                return Admitted::default();
            }
            Fate::Deliver {
                copies,
                hold,
                delay,
            } => (copies, hold, delay),
        };
        let mut out = Admitted::default();
        let slot = usize::from(to.is_none());
        for _ in 0..copies {
            if hold || delay {
                counters.impaired_other += 1;
            }
            if delay {
                self.delayed.push(Held {
                    at: now + Duration::from_micros(imp.delay_us),
                    to,
                    bytes: bytes.to_vec(),
                });
                continue;
            }
            if hold && self.reorder[slot].is_none() {
                // Released after the next packet, or a millisecond later.
                self.reorder[slot] = Some(Held {
                    at: now + Duration::from_millis(1),
                    to,
                    bytes: bytes.to_vec(),
                });
                continue;
            }
            out.push(Out::This);
            if let Some(h) = self.reorder[slot].take() {
                out.push(Out::Held(h));
            }
        }
        out
    }

    /// The held packets whose time has come by `now`: the delayed ones in the order they were
    /// held, then the one held for reordering in each direction.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Held> {
        let mut due = Vec::new();
        if self.delayed.iter().any(|d| d.at <= now) {
            let (now_due, later) = std::mem::take(&mut self.delayed)
                .into_iter()
                .partition(|d| d.at <= now);
            due = now_due;
            self.delayed = later;
        }
        for slot in &mut self.reorder {
            if slot.as_ref().is_some_and(|h| h.at <= now) {
                due.extend(slot.take());
            }
        }
        due
    }

    /// When the next held packet is due, if one is held.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.delayed
            .iter()
            .map(|h| h.at)
            .chain(self.reorder.iter().flatten().map(|h| h.at))
            .min()
    }
}

impl Impairment {
    pub(crate) fn fate(&self, rng: &mut Rng) -> Fate {
        if rng.chance(self.drop) {
            return Fate::Drop;
        }
        Fate::Deliver {
            copies: if rng.chance(self.duplicate) { 2 } else { 1 },
            hold: rng.chance(self.reorder),
            delay: rng.chance(self.delay),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> Option<Outbound> {
        Some(Outbound {
            peer: SocketAddr::from(([127, 0, 0, 1], 4791)),
            sport: 49152,
            tos: 2,
            hdr: 28,
        })
    }

    fn with(p: impl FnOnce(&mut Impairment)) -> Impairment {
        let mut i = Impairment::default();
        p(&mut i);
        i
    }

    #[test]
    fn a_reordered_packet_leaves_after_the_next_of_its_own_direction() {
        let mut imp = Impairer::new(Impairment::default(), with(|i| i.reorder = 1.0), 3);
        let mut c = DeviceCounters::default();
        let t = Instant::now();
        // Received packets: the first is held, the second leaves and then the first.
        assert_eq!(
            imp.admit(t, None, b"one", &mut c)
                .into_iter()
                .collect::<Vec<_>>(),
            vec![]
        );
        // A packet to send passes untouched and does not release the received one.
        assert_eq!(
            imp.admit(t, peer(), b"out", &mut c)
                .into_iter()
                .collect::<Vec<_>>(),
            vec![Out::This]
        );
        let out: Vec<Out> = imp.admit(t, None, b"two", &mut c).into_iter().collect();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], Out::This);
        assert!(matches!(&out[1], Out::Held(h) if h.bytes == b"one" && h.to.is_none()));
        assert_eq!(c.impaired_other, 2);
        // One held with no packet after it leaves a millisecond later.
        assert_eq!(
            imp.admit(t, None, b"three", &mut c)
                .into_iter()
                .collect::<Vec<_>>(),
            vec![]
        );
        assert_eq!(imp.next_at(), Some(t + Duration::from_millis(1)));
        assert!(imp.due(t + Duration::from_micros(999)).is_empty());
        let due = imp.due(t + Duration::from_millis(1));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].bytes, b"three");
        assert_eq!(imp.next_at(), None);
    }

    #[test]
    fn delayed_packets_leave_when_due_in_the_order_they_came() {
        let delay = with(|i| {
            i.delay = 1.0;
            i.delay_us = 500;
        });
        let mut imp = Impairer::new(delay, Impairment::default(), 1);
        let mut c = DeviceCounters::default();
        let t = Instant::now();
        for (k, b) in [b"a", b"b", b"c"].iter().enumerate() {
            let at = t + Duration::from_micros(100 * k as u64);
            assert_eq!(imp.admit(at, peer(), *b, &mut c).into_iter().count(), 0);
        }
        assert_eq!(imp.next_at(), Some(t + Duration::from_micros(500)));
        let first = imp.due(t + Duration::from_micros(650));
        let names: Vec<&[u8]> = first.iter().map(|h| h.bytes.as_slice()).collect();
        assert_eq!(names, [b"a".as_slice(), b"b".as_slice()]);
        assert!(first.iter().all(|h| h.to == peer()));
        let rest = imp.due(t + Duration::from_secs(1));
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].bytes, b"c");
    }

    #[test]
    fn drops_and_copies_are_counted_per_direction_and_the_draws_are_seeded() {
        let lossy = with(|i| {
            i.drop = 0.3;
            i.duplicate = 0.2;
        });
        let run = |seed| {
            let mut imp = Impairer::new(lossy, lossy, seed);
            let mut c = DeviceCounters::default();
            let t = Instant::now();
            let (mut sent, mut got) = (0, 0);
            for k in 0..10_000 {
                if k % 2 == 0 {
                    sent += imp.admit(t, peer(), b"x", &mut c).into_iter().count();
                } else {
                    got += imp.admit(t, None, b"x", &mut c).into_iter().count();
                }
            }
            (c.tx_impaired_drops, c.rx_impaired_drops, sent, got)
        };
        let (tx_drops, rx_drops, sent, got) = run(9);
        assert_eq!(
            run(9),
            (tx_drops, rx_drops, sent, got),
            "same seed, same fates"
        );
        assert_ne!(run(10), (tx_drops, rx_drops, sent, got));
        for drops in [tx_drops, rx_drops] {
            assert!((1_350..1_650).contains(&drops), "{drops} of 5 000 at 30 %");
        }
        // Of the 70 % delivered, a fifth twice: 5 000 × 0.7 × 1.2 = 4 200 copies.
        for n in [sent, got] {
            assert!((4_000..4_400).contains(&n), "{n} copies");
        }
    }

    #[test]
    fn ce_marks_draw_only_when_asked_for() {
        let mut none = Impairer::new(Impairment::default(), Impairment::default(), 1);
        assert!((0..1000).all(|_| !none.mark_ce()));
        let mut all = Impairer::new(with(|i| i.ce = 1.0), Impairment::default(), 1);
        assert!((0..1000).all(|_| all.mark_ce()));
    }

    #[test]
    fn loss_rate_is_close_to_asked_and_seeded() {
        let imp = Impairment::loss(0.05);
        let run = |seed| {
            let mut rng = Rng::from_state(seed);
            (0..100_000)
                .filter(|_| imp.fate(&mut rng) == Fate::Drop)
                .count()
        };
        let n = run(7);
        assert_eq!(n, run(7));
        assert!((4_500..5_500).contains(&n), "{n} drops of 100 000 at 5 %");
        assert_eq!(
            (0..1000)
                .filter(|_| Impairment::default().fate(&mut Rng::from_state(1)) == Fate::Drop)
                .count(),
            0
        );
    }
}
