//! The hosts a fault has taken out (a server down, a NIC whose receive pipeline stopped),
//! and what the other NICs kept sending them meanwhile: the cost of a dead peer to the
//! fabric, which a transport's retry rules decide (seed 001 §4.3's dead NIC; IBTA
//! §9.7.6.1.3's retry budget; the back-off of `RecoveryConfig::rto_backoff_after`).

use irn_transport::Time;

/// The picoseconds of one bucket of [`FailedHosts::per_ms`].
const MS: u64 = 1_000_000_000;

/// Which hosts are failed now, and the packets sent to them while they were.
#[derive(Debug, Default)]
pub(super) struct FailedHosts {
    /// Per host, whether a fault holds it now (empty until the first fault).
    down: Vec<bool>,
    /// Hosts failed now: the send path looks no further while there are none.
    count: u32,
    /// Packets NICs put on their links for a failed host.
    pub(super) packets: u64,
    /// Their wire bytes.
    pub(super) bytes: u64,
    /// The packets per millisecond of simulated time from the start of the run, up to the
    /// last millisecond in which one was sent.
    pub(super) per_ms: Vec<u64>,
}

impl FailedHosts {
    /// A fault begins (`true`) or ends at `host`, one of `hosts`.
    pub(super) fn set(&mut self, hosts: u32, host: u32, failed: bool) {
        if self.down.len() < hosts as usize {
            self.down.resize(hosts as usize, false);
        }
        let h = &mut self.down[host as usize];
        if *h != failed {
            *h = failed;
            if failed {
                self.count += 1;
            } else {
                self.count -= 1;
            }
        }
    }

    /// Whether `host` is failed now.
    pub(super) fn is_down(&self, host: u32) -> bool {
        self.count > 0 && self.down.get(host as usize).copied().unwrap_or(false)
    }

    /// A NIC sent a packet of `wire` bytes for `to` at `now`: counted if `to` is failed.
    #[inline]
    pub(super) fn sent(&mut self, now: Time, to: u32, wire: u16) {
        if self.count == 0 || !self.is_down(to) {
            return;
        }
        self.packets += 1;
        self.bytes += u64::from(wire);
        let ms = (now.as_picos() / MS) as usize;
        if self.per_ms.len() <= ms {
            self.per_ms.resize(ms + 1, 0);
        }
        self.per_ms[ms] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_ms(ms: f64) -> Time {
        Time::from_picos((ms * MS as f64) as u64)
    }

    #[test]
    fn counts_only_what_is_sent_to_a_host_while_it_is_failed() {
        let mut f = FailedHosts::default();
        f.sent(at_ms(0.5), 3, 1000);
        assert_eq!(f.packets, 0, "nothing failed yet");
        f.set(8, 3, true);
        f.set(8, 3, true);
        f.sent(at_ms(1.2), 3, 1000);
        f.sent(at_ms(1.9), 3, 64);
        f.sent(at_ms(1.9), 4, 1000);
        f.sent(at_ms(3.0), 3, 1000);
        f.set(8, 3, false);
        f.sent(at_ms(4.0), 3, 1000);
        assert_eq!((f.packets, f.bytes), (3, 2064));
        assert_eq!(f.per_ms, vec![0, 2, 0, 1]);
        assert!(!f.is_down(3));
        f.set(8, 3, false);
        assert_eq!(f.count, 0, "ending a fault twice counts once");
    }
}
