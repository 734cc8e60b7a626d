//! The device honours link-level flow control (SPEC N1): 802.1Qbb PFC and 802.3x PAUSE
//! frames that arrive on its interface (`DeviceConfig::pause_iface`) stop its queue pairs
//! of the paused priorities — a queue pair's priority is its DSCP ÷ 8 (its traffic class,
//! `Qp::set_traffic_class`) — for the frame's quanta of 512 bit times at the link's rate, or
//! until a frame of 0 quanta resumes them; a later frame replaces an earlier one's time
//! (IEEE 802.1Qbb §36.1.3.1, 802.3 Annex 31B). A paused queue pair sends nothing, ACKs
//! included, as a NIC's paused transmit queue does.
//!
//! A NIC-side watchdog (seed 001 §4.3) stops honouring pauses, for good, once a priority has
//! been paused without a break for longer than its limit: a peer stuck pausing cannot stop
//! the host for ever.
//!
//! Everything here is the state; the engine reads the frames and asks before each transmit
//! turn.

use std::collections::BTreeSet;

use irn_transport::{Dur, Time};
use irn_wire::mac_control::MacControlRepr;

/// What the device's pause input holds.
#[derive(Debug)]
pub(crate) struct PauseIn {
    /// Per priority: paused until then.
    until: [Time; 8],
    /// Per priority: paused without a break since then.
    since: [Option<Time>; 8],
    rate_bps: u64,
    watchdog: Option<Dur>,
    /// The watchdog fired: pauses are no longer honoured.
    off: bool,
    /// Queue pairs whose turn found their priority paused: given one again when it is not.
    pub(crate) waiting: BTreeSet<u32>,
    /// MAC control frames received.
    pub(crate) frames: u64,
    /// Transmit turns a pause held back.
    pub(crate) held_turns: u64,
    /// The watchdog fired (0 or 1).
    pub(crate) watchdog_fired: u64,
}

impl PauseIn {
    /// Pauses on a link of `rate_bps`, with a watchdog of `watchdog` if any.
    pub(crate) fn new(rate_bps: u64, watchdog: Option<Dur>) -> PauseIn {
        PauseIn {
            until: [Time::ZERO; 8],
            since: [None; 8],
            rate_bps: rate_bps.max(1),
            watchdog,
            off: false,
            waiting: BTreeSet::new(),
            frames: 0,
            held_turns: 0,
            watchdog_fired: 0,
        }
    }

    /// A MAC control frame arrived at `now`.
    pub(crate) fn frame(&mut self, frame: &MacControlRepr, now: Time) {
        self.frames += 1;
        let time =
            |q: u16| Dur::from_picos(irn_wire::mac_control::quanta_to_picos(q, self.rate_bps));
        let mut set = |p: usize, q: u16| {
            self.until[p] = now + time(q);
            if q == 0 {
                self.since[p] = None;
            } else if self.since[p].is_none() {
                self.since[p] = Some(now);
            }
        };
        match *frame {
            MacControlRepr::Pause { quanta } => {
                for p in 0..8 {
                    set(p, quanta);
                }
            }
            MacControlRepr::Pfc(pfc) => {
                for p in 0..8u8 {
                    if let Some(q) = pfc.pause_for(p) {
                        set(usize::from(p), q);
                    }
                }
            }
            MacControlRepr::Unknown { .. } => {}
        }
    }

    /// Whether priority `prio` may not send at `now`. A pause that lasted, without a break,
    /// longer than the watchdog's limit turns the watchdog on: no pause holds from then on.
    pub(crate) fn paused(&mut self, prio: u8, now: Time) -> bool {
        let p = usize::from(prio & 7);
        if self.off {
            return false;
        }
        if self.until[p] <= now {
            // Ran out: the next pause starts a new stretch.
            self.since[p] = None;
            return false;
        }
        if let (Some(limit), Some(since)) = (self.watchdog, self.since[p]) {
            if now.since(since) >= limit {
                self.off = true;
                self.watchdog_fired += 1;
                return false;
            }
        }
        true
    }

    /// When the earliest pause in force runs out (or the watchdog's limit comes), if a queue
    /// pair waits for one.
    pub(crate) fn next_release(&self, now: Time) -> Option<Time> {
        if self.waiting.is_empty() || self.off {
            return None;
        }
        (0..8)
            .filter(|&p| self.until[p] > now)
            .map(|p| {
                let watch = match (self.watchdog, self.since[p]) {
                    (Some(l), Some(s)) => s + l,
                    _ => Time::MAX,
                };
                self.until[p].min(watch)
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irn_wire::mac_control::PfcRepr;

    const GBPS: u64 = 1_000_000_000;

    #[test]
    fn a_pfc_frame_pauses_its_priority_for_its_quanta_and_zero_resumes() {
        let mut p = PauseIn::new(GBPS, None);
        let t0 = Time::ZERO + Dur::from_micros(10);
        p.frame(&MacControlRepr::Pfc(PfcRepr::single(3, 100)), t0);
        // 100 × 512 bits at 1 Gb/s: 51.2 µs; priority 0 is not paused.
        assert!(p.paused(3, t0) && !p.paused(0, t0));
        assert!(p.paused(3, t0 + Dur::from_nanos(51_199)));
        assert!(!p.paused(3, t0 + Dur::from_nanos(51_200)));
        p.frame(&MacControlRepr::Pfc(PfcRepr::single(3, 100)), t0);
        p.frame(
            &MacControlRepr::Pfc(PfcRepr::single(3, 0)),
            t0 + Dur::from_micros(1),
        );
        assert!(!p.paused(3, t0 + Dur::from_micros(1)));
        // PAUSE stops every priority.
        p.frame(&MacControlRepr::Pause { quanta: 10 }, t0);
        assert!((0..8).all(|q| p.paused(q, t0)));
        assert_eq!(p.frames, 4);
        p.waiting.insert(7);
        assert_eq!(p.next_release(t0), Some(t0 + Dur::from_nanos(5_120)));
    }

    #[test]
    fn the_watchdog_stops_honouring_a_pause_refreshed_past_its_limit() {
        let mut p = PauseIn::new(GBPS, Some(Dur::from_millis(1)));
        let mut t = Time::ZERO;
        // Refreshed every 20 µs, each 51.2 µs long: one unbroken pause.
        while t < Time::ZERO + Dur::from_micros(990) {
            p.frame(&MacControlRepr::Pfc(PfcRepr::single(3, 100)), t);
            assert!(p.paused(3, t), "{t:?}");
            t += Dur::from_micros(20);
        }
        p.frame(&MacControlRepr::Pfc(PfcRepr::single(3, 100)), t);
        assert!(!p.paused(3, t + Dur::from_micros(20)), "past the limit");
        assert_eq!(p.watchdog_fired, 1);
        // For good.
        p.frame(
            &MacControlRepr::Pause { quanta: 1000 },
            t + Dur::from_micros(30),
        );
        assert!(!p.paused(0, t + Dur::from_micros(31)));
    }
}
