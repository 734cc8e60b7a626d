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
