//! ECN marking at a switch egress (RFC 3168; SPEC N5's congestion signal): which packets
//! joining a queue get Congestion Experienced, as pure functions of the queue's length.
//!
//! * **Threshold** (DCTCP, RFC 8257 §3.1): mark every ECN-capable packet that joins a queue
//!   longer than K (`ecn_kmin_bytes`).
//! * **RED** (DCQCN's marking, Zhu et al., SIGCOMM 2015 §3): no mark up to Kmin, every
//!   packet from Kmax on, and in between with a probability rising linearly from 0 to Pmax.
//!
//! The queue length is the egress queue of the packet's output and class: by default before
//! the packet joins it (RED's and DCTCP's rule), or with `switch.ecn_mark_at = "dequeue"` as
//! the packet leaves it — the bytes queued behind it, as the ns-3 RDMA simulators mark
//! ([`EcnPoint`]).
//!
//! `irn switch` (a user-space Ethernet switch for real hosts) marks by the same rule, at enqueue.

use irn_transport::rng::Rng;

use crate::config::{EcnMode, EcnPoint, SwitchConfig};

/// A switch's marking rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Marking {
    mode: EcnMode,
    kmin: u64,
    kmax: u64,
    pmax: f64,
    at: EcnPoint,
}

impl Marking {
    /// The rule `[switch]`'s `ecn`, `ecn_kmin_bytes`, `ecn_kmax_bytes` and `ecn_pmax` set.
    pub fn new(cfg: &SwitchConfig) -> Marking {
        Marking {
            mode: cfg.ecn,
            kmin: cfg.ecn_kmin_bytes,
            kmax: cfg.ecn_kmax_bytes,
            pmax: cfg.ecn_pmax,
            at: cfg.ecn_mark_at,
        }
    }

    /// No marking.
    pub fn off() -> Marking {
        Marking {
            mode: EcnMode::Off,
            kmin: 0,
            kmax: 0,
            pmax: 0.0,
            at: EcnPoint::Enqueue,
        }
    }

    /// The rule as an operator reads it in a switch's configuration.
    pub fn describe(&self) -> String {
        let rule = match self.mode {
            EcnMode::Off => return "off".into(),
            EcnMode::Threshold => format!("threshold K = {} B", self.kmin),
            EcnMode::Red => format!(
                "red Kmin {} B, Kmax {} B, Pmax {}",
                self.kmin, self.kmax, self.pmax
            ),
        };
        match self.at {
            EcnPoint::Enqueue => rule,
            EcnPoint::Dequeue => format!("{rule}, at dequeue"),
        }
    }

    /// Whether switches mark at all.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.mode != EcnMode::Off
    }

    /// Whether packets are marked as they join their egress queue.
    #[inline]
    pub fn on_enqueue(&self) -> bool {
        self.mode != EcnMode::Off && self.at == EcnPoint::Enqueue
    }

    /// Whether packets are marked as they leave their egress queue for the link.
    #[inline]
    pub fn on_dequeue(&self) -> bool {
        self.mode != EcnMode::Off && self.at == EcnPoint::Dequeue
    }

    /// The probability that a packet joining (or, marking at dequeue, leaving behind) a queue
    /// of `q` bytes is marked.
    pub fn probability(&self, q: u64) -> f64 {
        match self.mode {
            EcnMode::Off => 0.0,
            EcnMode::Threshold => f64::from(u8::from(q > self.kmin)),
            EcnMode::Red => {
                if q <= self.kmin {
                    0.0
                } else if q >= self.kmax {
                    1.0
                } else {
                    self.pmax * (q - self.kmin) as f64 / (self.kmax - self.kmin).max(1) as f64
                }
            }
        }
    }

    /// Whether a packet joining (or, marking at dequeue, leaving behind) a queue of `q` bytes
    /// is marked; a random draw only where the
    /// outcome is uncertain (RED between Kmin and Kmax), so that a run's draws do not depend
    /// on how many packets pass outside that band.
    #[inline]
    pub fn mark(&self, q: u64, rng: &mut Rng) -> bool {
        match self.mode {
            EcnMode::Off => false,
            EcnMode::Threshold => q > self.kmin,
            EcnMode::Red => {
                if q <= self.kmin {
                    false
                } else if q >= self.kmax {
                    true
                } else {
                    rng.chance(self.probability(q))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn red() -> Marking {
        Marking {
            mode: EcnMode::Red,
            kmin: 5_000,
            kmax: 200_000,
            pmax: 0.01,
            at: EcnPoint::Enqueue,
        }
    }

    #[test]
    fn red_rises_linearly_from_kmin_to_pmax_then_marks_everything() {
        let m = red();
        assert_eq!(m.probability(0), 0.0);
        assert_eq!(m.probability(5_000), 0.0);
        let mid = m.probability(102_500);
        assert!((mid - 0.005).abs() < 1e-12, "{mid}");
        let mut last = 0.0;
        for q in (5_001..200_000).step_by(997) {
            let p = m.probability(q);
            assert!(p > 0.0 && p <= 0.01 && p >= last, "q {q}: {p}");
            last = p;
        }
        assert_eq!(m.probability(200_000), 1.0);
        assert_eq!(m.probability(1 << 40), 1.0);
    }

    #[test]
    fn red_marks_at_its_probability_and_draws_only_between_kmin_and_kmax() {
        let m = red();
        let mut rng = Rng::stream(1, 2);
        let n = 200_000;
        let marked = (0..n).filter(|_| m.mark(150_000, &mut rng)).count();
        let p = m.probability(150_000);
        let expect = p * n as f64;
        assert!(
            (marked as f64 - expect).abs() < 5.0 * (expect * (1.0 - p)).sqrt(),
            "{marked} marked, {expect} expected"
        );
        // Outside the band the outcome is certain and the generator is not touched.
        let before = rng.clone().next_u64();
        assert!(!m.mark(5_000, &mut rng));
        assert!(m.mark(200_000, &mut rng));
        assert_eq!(rng.next_u64(), before);
    }

    #[test]
    fn threshold_marks_above_k_only_and_off_never_marks() {
        let t = Marking {
            mode: EcnMode::Threshold,
            ..red()
        };
        let mut rng = Rng::new(3);
        assert!(!t.mark(5_000, &mut rng));
        assert!(t.mark(5_001, &mut rng));
        assert_eq!(t.probability(4_000), 0.0);
        assert_eq!(t.probability(6_000), 1.0);
        let off = Marking {
            mode: EcnMode::Off,
            ..red()
        };
        assert!(!off.is_on());
        assert!(!off.mark(1 << 40, &mut rng));
    }

    #[test]
    fn a_rule_marks_at_one_point_only_and_says_which() {
        let enq = red();
        assert!(enq.on_enqueue() && !enq.on_dequeue());
        let deq = Marking {
            at: EcnPoint::Dequeue,
            ..red()
        };
        assert!(deq.on_dequeue() && !deq.on_enqueue());
        assert!(
            deq.describe().ends_with(", at dequeue"),
            "{}",
            deq.describe()
        );
        assert_ne!(deq.describe(), enq.describe());
        let off = Marking {
            mode: EcnMode::Off,
            ..deq
        };
        assert!(!off.on_enqueue() && !off.on_dequeue());
        assert_eq!(off.describe(), "off");
    }
}
