//! The round-trip estimator behind [`RtoPolicy::Adaptive`](crate::RtoPolicy::Adaptive)
//! (RFC 6298, Karn's rule applied by its caller, RFC 7323 Appendix G for per-packet ACKs):
//! each send window keeps one.

use crate::time::Dur;

/// RFC 6298's round-trip estimator, kept by every send window (a few additions per ACK) and
/// read only under [`RtoPolicy::Adaptive`](crate::RtoPolicy::Adaptive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RttEstimator {
    /// SRTT, once there is a sample.
    pub(crate) srtt: Option<Dur>,
    /// RTTVAR.
    pub(crate) rttvar: Dur,
    /// Expiries since the last valid RTT sample (an ACK of a packet never resent): the timer
    /// is doubled this many times (§5.5).
    pub(crate) backoff: u32,
}

impl RttEstimator {
    /// A sample `r` (RFC 6298 §2.2–§2.3, α = 1/8, β = 1/4), one of `per_rtt` samples a round
    /// trip brings. SRTT takes every sample with RFC 6298's gain, and so does RTTVAR when the
    /// sample deviates more than RTTVAR says; a smaller deviation lowers RTTVAR with the gain
    /// divided by `per_rtt` (RFC 7323 Appendix G), so that it decays per round trip as RFC
    /// 6298's one sample would make it — up at once, down slowly, as Linux's `mdev_max` does.
    /// IRN acknowledges every packet: with RFC 6298's gains as they are, a window's worth of
    /// nearly equal samples shrank RTTVAR to microseconds within one round trip, the timer sat
    /// a few microseconds above a 42 ms queue-dominated SRTT, and any later round trip a
    /// little longer timed out (256 IRN queue pairs on loopback: 13 000 spurious
    /// timeouts in a run). Dividing every gain instead left the estimate a few round trips
    /// behind a round trip that grows with the window, and the timer fired under it.
    pub(crate) fn sample(&mut self, r: Dur, per_rtt: u32) {
        let r = r.as_picos();
        match self.srtt {
            None => {
                self.srtt = Some(Dur::from_picos(r));
                self.rttvar = Dur::from_picos(r / 2);
            }
            Some(s) => {
                let s = s.as_picos();
                let var = self.rttvar.as_picos();
                let dev = s.abs_diff(r);
                let gain = if dev > var {
                    4
                } else {
                    4 * u64::from(per_rtt.max(1))
                };
                self.rttvar = Dur::from_picos(var - var / gain + dev / gain);
                self.srtt = Some(Dur::from_picos(s - s / 8 + r / 8));
            }
        }
    }

    /// The timeout: `SRTT + 4·RTTVAR` (`initial` before a sample) within `[min, max]`,
    /// doubled per expiry since the last valid sample and capped at `max` (§2, §5.5).
    pub(crate) fn rto(&self, min: Dur, max: Dur, initial: Dur) -> Dur {
        let (lo, hi) = (min.as_picos(), max.as_picos().max(min.as_picos()));
        let base = self.srtt.map_or(initial.as_picos(), |s| {
            s.as_picos().saturating_add(4 * self.rttvar.as_picos())
        });
        let backed = base
            .clamp(lo, hi)
            .saturating_mul(1u64 << self.backoff.min(20));
        Dur::from_picos(backed.min(hi))
    }
}
