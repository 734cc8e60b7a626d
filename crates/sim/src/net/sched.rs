//! Sharing a link between priority classes (`network.scheduler`): strict priority, or deficit
//! weighted round robin with strict classes above it — IEEE 802.1Qaz ETS's two kinds of
//! traffic class (seed 004: "weighted round robin is ETS"), which switches and NICs both run.
//!
//! A [`Dwrr`] is one link's state; its queues are numbered in priority order, 0 the highest
//! (a switch port's classes, a NIC's lanes). [`Weights`] says which queues are strict and the
//! others' quanta. DWRR is Shreedhar and Varghese's deficit round robin (SIGCOMM 1995) with
//! the quantum scaled by the weight: the queue at the round's pointer sends while its deficit
//! is positive, each frame charged its bytes once sent (the caller does not know a frame's
//! size before it asks for it, so a deficit may end below zero and the overdraft is repaid
//! from the next quantum); a queue with nothing to send banks no credit. Over a busy period
//! each backlogged weighted queue gets its weight's share of what the strict queues leave.
//!
//! The simulator's switches and NICs run it, and so does `irn switch` on real hosts
//! (`irn_switch::Egress`): one algorithm, tested once here.

use super::classes::MAX_CLASSES;

/// The most queues a link's scheduler shares it between (one per priority).
pub const QUEUES: usize = MAX_CLASSES;

/// The queues' kinds and quanta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    /// Bit `q`: queue `q` is strict.
    strict: u8,
    /// Bit `q`: queue `q` is weighted.
    weighted: u8,
    /// Bytes a weighted queue may send per round.
    quantum: [u32; MAX_CLASSES],
}

impl Weights {
    /// Queues of `weights` (0: strict), a weight unit being `unit` bytes — the largest frame,
    /// so that every visit lets a queue send at least one.
    pub fn new(weights: &[u32], unit: u32) -> Weights {
        let mut w = Weights {
            strict: 0,
            weighted: 0,
            quantum: [0; MAX_CLASSES],
        };
        for (q, &x) in weights.iter().enumerate().take(MAX_CLASSES) {
            if x == 0 {
                w.strict |= 1 << q;
            } else {
                w.weighted |= 1 << q;
                w.quantum[q] = x.saturating_mul(unit.max(1));
            }
        }
        w
    }

    /// `n` queues in strict priority.
    pub fn strict(n: usize) -> Weights {
        Weights::new(&vec![0; n.min(MAX_CLASSES)], 1)
    }
}

/// One link's round-robin state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dwrr {
    /// Per queue: bytes it may still send this round (below zero: overdrawn).
    deficit: [i64; MAX_CLASSES],
    /// The queue the round is at ([`MAX_CLASSES`]: before the first).
    at: u8,
}

impl Default for Dwrr {
    fn default() -> Self {
        Dwrr {
            deficit: [0; MAX_CLASSES],
            at: MAX_CLASSES as u8,
        }
    }
}

impl Dwrr {
    /// The queue to serve among `ready` (bit `q`: queue `q` has a frame it may send now): the
    /// highest strict one, else the weighted one whose turn it is.
    pub fn pick(&mut self, w: &Weights, ready: u8) -> Option<usize> {
        let strict = ready & w.strict;
        if strict != 0 {
            return Some(strict.trailing_zeros() as usize);
        }
        let ready = ready & w.weighted;
        if ready == 0 {
            return None;
        }
        loop {
            let q = usize::from(self.at);
            if q < MAX_CLASSES {
                if ready & (1 << q) != 0 {
                    if self.deficit[q] > 0 {
                        return Some(q);
                    }
                } else {
                    // Nothing to send: it banks no credit (and owes nothing).
                    self.deficit[q] = 0;
                }
            }
            // The next weighted queue's turn, with its quantum.
            let next = (0..MAX_CLASSES)
                .map(|i| (q + 1 + i) % MAX_CLASSES)
                .find(|&i| w.weighted & (1 << i) != 0)
                .expect("a weighted queue is ready");
            self.at = next as u8;
            self.deficit[next] += i64::from(w.quantum[next]);
        }
    }

    /// Queue `q` sent a frame of `bytes`.
    pub fn charge(&mut self, q: usize, bytes: u32) {
        self.deficit[q] -= i64::from(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `ready` queues, every frame `size(q)` bytes, for `frames` frames; returns the
    /// bytes each sent.
    fn serve(w: &Weights, ready: u8, frames: usize, size: impl Fn(usize) -> u32) -> Vec<u64> {
        let mut d = Dwrr::default();
        let mut sent = vec![0u64; MAX_CLASSES];
        for _ in 0..frames {
            let q = d.pick(w, ready).expect("something is ready");
            d.charge(q, size(q));
            sent[q] += u64::from(size(q));
        }
        sent
    }

    #[test]
    fn backlogged_weighted_queues_share_bytes_by_weight() {
        let w = Weights::new(&[3, 1], 1000);
        let sent = serve(&w, 0b11, 40_000, |_| 1000);
        let share = sent[0] as f64 / (sent[0] + sent[1]) as f64;
        assert!((share - 0.75).abs() < 0.001, "{share}");
        // Frames of different sizes: still bytes, not frames, by weight.
        let sent = serve(&Weights::new(&[1, 1], 1500), 0b11, 40_000, |q| {
            if q == 0 {
                1500
            } else {
                64
            }
        });
        let share = sent[0] as f64 / (sent[0] + sent[1]) as f64;
        assert!((share - 0.5).abs() < 0.01, "{share}");
    }

    #[test]
    fn strict_queues_go_first_and_idle_ones_give_their_share_away() {
        let w = Weights::new(&[0, 2, 1], 1000);
        let mut d = Dwrr::default();
        assert_eq!(d.pick(&w, 0b111), Some(0));
        assert_eq!(d.pick(&w, 0b110), Some(1));
        assert_eq!(d.pick(&w, 0), None);
        // Queue 1 alone gets the whole link; queue 2 banks nothing while idle.
        let sent = serve(&w, 0b010, 100, |_| 1000);
        assert_eq!(sent[1], 100_000);
        let mut d = Dwrr::default();
        for _ in 0..100 {
            let q = d.pick(&w, 0b010).expect("ready");
            d.charge(q, 1000);
        }
        assert_eq!(d.deficit[2], 0);
        // Every queue strict: the highest ready one, always.
        let s = Weights::strict(3);
        assert_eq!(Dwrr::default().pick(&s, 0b110), Some(1));
    }

    #[test]
    fn an_overdrawn_queue_repays_from_its_next_quantum() {
        // Quantum 1000, frames 1500: it sends one frame a round, then pays back.
        let w = Weights::new(&[1, 1], 1000);
        let sent = serve(&w, 0b11, 30_000, |q| if q == 0 { 1500 } else { 1000 });
        let share = sent[0] as f64 / (sent[0] + sent[1]) as f64;
        assert!((share - 0.5).abs() < 0.02, "{share}");
    }
}
