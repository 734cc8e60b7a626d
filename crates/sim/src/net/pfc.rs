//! Priority flow control (IEEE 802.1Qbb; SPEC N1): per (port, priority) pause state.
//!
//! An ingress — a switch input port, or a NIC's receive buffer — counts the bytes it holds
//! per class ([`Ingress`]). A lossless class that holds more than its XOFF threshold sends a
//! pause frame upstream; once it has drained `pfc_resume_gap_bytes` below the threshold (or
//! emptied), a resume frame. The threshold leaves headroom for what is already on the wire
//! when the pause leaves: by default the upstream link's round trip at its rate plus a frame
//! in flight each way ([`default_headroom`]), so that a lossless class never overruns its
//! buffer ([`xoff_threshold`]). A shared-buffer switch's threshold is dynamic: a fraction α of
//! what is left of the shared part ([`shared_xoff`]).
//!
//! A pause frame carries its pause time in quanta of 512 bit times at the link's rate
//! (IEEE 802.1Qbb §36.1.3.1, as 802.3 Annex 31B's PAUSE does): the receiver holds the class
//! until that time runs out or a frame of 0 quanta (XON) arrives, whichever is first
//! ([`PauseClock::received`]). An ingress that is still above its threshold sends the pause
//! again after a fraction of that time (`network.pause_refresh`, its refresh timer), so a
//! pause lasts as long as the congestion; every refresh is a frame on the wire and in the
//! counters. A pause frame reaches the peer after its 64-byte serialization and the link's
//! delay, overtaking queued data.

use super::classes::MAX_CLASSES;
use irn_transport::{Dur, Time};

/// The pause time of `quanta` on a link of `rate_bps`: 512 bit times each (the codec's
/// conversion, which `irn decode` prints too).
pub(super) fn pause_time(quanta: u16, rate_bps: u64) -> Dur {
    Dur::from_picos(irn_wire::mac_control::quanta_to_picos(quanta, rate_bps))
}

/// The priority a pause frame names to mean every priority: an 802.3x PAUSE (Annex 31B), which
/// stops the whole link, on a link that runs PAUSE in a fabric that runs PFC elsewhere
/// (`network.pause_hosts`).
pub(super) const ALL_PRIORITIES: u8 = 8;

/// What a pause frame an ingress sends says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pause {
    /// XOFF: the ingress crossed its threshold.
    Xoff,
    /// XOFF again, from the refresh timer of an ingress still above its threshold: it
    /// changes nothing the receiver does, so the run's bookkeeping treats it as a timer.
    Refresh,
    /// XON (0 quanta): the ingress drained.
    Xon,
}

/// The pause frames' timing of a run (`network.pause_quanta`, `network.pause_refresh`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PauseTiming {
    /// What an XOFF frame carries.
    pub(super) quanta: u16,
    /// The fraction of its pause time after which a still-congested ingress sends it again.
    pub(super) refresh: f64,
}

impl PauseTiming {
    /// IEEE 802.1Qbb's largest pause, refreshed at half its time.
    pub(super) const DEFAULT: PauseTiming = PauseTiming {
        quanta: u16::MAX,
        refresh: 0.5,
    };

    /// When an ingress that sent XOFF at `now` on a link of `rate_bps` sends it again.
    pub(super) fn refresh_after(&self, rate_bps: u64) -> Dur {
        let t = pause_time(self.quanta, rate_bps).as_picos() as f64;
        Dur::from_picos((t * self.refresh).round().max(1.0) as u64)
    }
}

/// One port's pause timers, per class: until when the pause it received holds, and when its
/// own ingress refreshes the pause it sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct PauseClock {
    until: [Time; MAX_CLASSES],
    refresh_at: [Time; MAX_CLASSES],
}

impl Default for PauseClock {
    fn default() -> Self {
        PauseClock {
            until: [Time::ZERO; MAX_CLASSES],
            refresh_at: [Time::MAX; MAX_CLASSES],
        }
    }
}

impl PauseClock {
    /// A pause of `time` for class `c` arrived at `now` (a later frame replaces the time of
    /// an earlier one, 802.1Qbb §36.1.3.1): returns when it runs out.
    pub(super) fn received(&mut self, c: usize, now: Time, time: Dur) -> Time {
        self.until[c] = now + time;
        self.until[c]
    }

    /// Whether class `c`'s pause has run out by `now` (its last frame's time is over).
    pub(super) fn expired(&self, c: usize, now: Time) -> bool {
        self.until[c] <= now
    }

    /// The ingress sent XOFF for class `c`; it refreshes it at `at`.
    pub(super) fn sent(&mut self, c: usize, at: Time) {
        self.refresh_at[c] = at;
    }

    /// The ingress resumed class `c`: no refresh is due.
    pub(super) fn resumed(&mut self, c: usize) {
        self.refresh_at[c] = Time::MAX;
    }

    /// Whether the refresh of class `c` scheduled for `now` is the one due (not one a resume
    /// cancelled, or a later pause replaced).
    pub(super) fn refresh_due(&self, c: usize, now: Time) -> bool {
        self.refresh_at[c] == now
    }
}

/// A buffer that pauses its upstream per class with PFC (SPEC N1): a switch input port, a
/// NIC's receive buffer. The pause and resume rules are these two methods, for both.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ingress {
    /// Per class, bytes held.
    pub(super) bytes: [u64; MAX_CLASSES],
    /// Per class: a pause is in force upstream.
    pub(super) xoff: [bool; MAX_CLASSES],
    /// Bytes held, all classes (the sum of `bytes`, kept so that admission reads one word).
    held: u64,
    /// The ingress of a link that runs 802.3x PAUSE: every frame is lossless, and one pause
    /// (flagged in `xoff[0]`) stops the whole link once all classes together hold more
    /// than the threshold.
    link_wide: bool,
    /// Bit `c`: class `c` is lossy here. Lossy classes share the buffer below the threshold
    /// with the lossless ones (a switch's priority groups share one pool, the headroom kept
    /// apart for the lossless ones): a lossy frame may not take the headroom, and a lossless
    /// class pauses once the whole input holds more than the threshold, so that what its
    /// headroom must absorb still fits the buffer. Without lossy classes (0), a lossless
    /// class pauses on its own bytes, as in the IRN paper's switch.
    lossy_mask: u8,
}

impl Ingress {
    pub(super) const EMPTY: Ingress = Ingress {
        bytes: [0; MAX_CLASSES],
        xoff: [false; MAX_CLASSES],
        held: 0,
        link_wide: false,
        lossy_mask: 0,
    };

    /// An empty ingress of a link that runs 802.3x PAUSE.
    pub(super) const PAUSE: Ingress = Ingress {
        link_wide: true,
        ..Ingress::EMPTY
    };

    /// Empty, of the same kind.
    pub(super) fn cleared(&self) -> Ingress {
        Ingress {
            link_wide: self.link_wide,
            lossy_mask: self.lossy_mask,
            ..Ingress::EMPTY
        }
    }

    /// An empty ingress (of a PFC link) whose classes of `mask` are lossy.
    pub(super) fn with_lossy(mask: u8) -> Ingress {
        Ingress {
            lossy_mask: mask,
            ..Ingress::EMPTY
        }
    }

    /// Whether its lossless classes pause on the whole input (lossy classes beside them, a PFC
    /// link): a frame of any class leaving may resume any of them.
    #[inline]
    pub(super) fn shares_threshold(&self) -> bool {
        self.lossy_mask != 0 && !self.link_wide
    }

    /// The classes lossy here, as a bit mask.
    #[inline]
    pub(super) fn lossy_mask(&self) -> u8 {
        self.lossy_mask
    }

    /// Whether its link runs 802.3x PAUSE.
    #[inline]
    pub(super) fn link_wide(&self) -> bool {
        self.link_wide
    }

    /// Whether a pause for class `c` (under PAUSE: for the link) is in force upstream.
    #[inline]
    pub(super) fn pausing(&self, c: usize) -> bool {
        self.xoff[if self.link_wide { 0 } else { c }]
    }

    /// Bytes held, all classes.
    #[inline]
    pub(super) fn total(&self) -> u64 {
        self.held
    }

    /// `wire` bytes of class `c` arrived.
    #[inline]
    pub(super) fn add(&mut self, c: usize, wire: u64) {
        self.bytes[c] += wire;
        self.held += wire;
    }

    /// `wire` bytes of class `c` left.
    #[inline]
    pub(super) fn remove(&mut self, c: usize, wire: u64) {
        self.bytes[c] -= wire;
        self.held -= wire;
    }

    /// Whether class `c` must pause its upstream now: not paused, and holding more than
    /// `threshold` (under PAUSE: the link, with every class together). Marks it paused.
    pub(super) fn pause_above(&mut self, c: usize, threshold: u64) -> bool {
        let (k, held) = self.counted(c);
        let pause = !self.xoff[k] && held > threshold;
        self.xoff[k] |= pause;
        pause
    }

    /// Whether class `c` must resume its upstream now: paused, and `gap` bytes below
    /// `threshold` (or empty) — under PAUSE, the link with every class together. Marks it
    /// resumed.
    pub(super) fn resume_below(&mut self, c: usize, threshold: u64, gap: u64) -> bool {
        let (k, held) = self.counted(c);
        let resume = self.xoff[k] && (held + gap <= threshold || held == 0);
        self.xoff[k] &= !resume;
        resume
    }

    /// The pause flag class `c` answers to, and the bytes that count against its threshold.
    #[inline]
    fn counted(&self, c: usize) -> (usize, u64) {
        if self.link_wide {
            (0, self.held)
        } else if self.lossy_mask != 0 {
            (c, self.held)
        } else {
            (c, self.bytes[c])
        }
    }
}

/// The default PFC headroom of a port: the bytes its link can still deliver after a pause
/// leaves — the link's round trip at its rate — plus one largest frame in flight each way
/// (`mtu_wire`: the largest frame on the wire).
pub(super) fn default_headroom(rate_bps: u64, delay: Dur, mtu_wire: u64) -> u64 {
    let rtt_bytes =
        (u128::from(rate_bps) * u128::from(delay.as_picos()) * 2 / 8 / 1_000_000_000_000) as u64;
    rtt_bytes + 2 * mtu_wire
}

/// The XOFF threshold of a lossless class of a `buffer`-byte ingress: the buffer less its
/// headroom, and at least one largest frame.
pub(super) fn xoff_threshold(buffer: u64, headroom: u64, mtu_wire: u64) -> u64 {
    buffer.saturating_sub(headroom).max(mtu_wire)
}

/// The dynamic XOFF threshold of a shared-buffer switch: α times what is free of the shared
/// part (the buffer less every port's headroom reservation, `reserved` together), and at least
/// 2 KB.
pub fn shared_xoff(buffer: u64, reserved: u64, used: u64, alpha: f64) -> u64 {
    let shared = buffer.saturating_sub(reserved);
    let free = shared.saturating_sub(used);
    ((alpha * free as f64) as u64).max(2048)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_lasts_its_quanta_and_a_later_frame_replaces_the_time() {
        // 65 535 × 512 bits at 40 Gb/s: 838.8 µs; one quantum at 100 Gb/s: 5.12 ns.
        assert_eq!(
            pause_time(u16::MAX, 40_000_000_000),
            Dur::from_picos(838_848_000)
        );
        assert_eq!(pause_time(1, 100_000_000_000), Dur::from_picos(5_120));
        let t = PauseTiming::DEFAULT;
        assert_eq!(
            t.refresh_after(40_000_000_000),
            Dur::from_picos(419_424_000)
        );
        let mut clock = PauseClock::default();
        let t0 = Time::from_picos(1_000);
        let end = clock.received(2, t0, Dur::from_micros(10));
        assert!(!clock.expired(2, Time::from_picos(end.as_picos() - 1)));
        assert!(clock.expired(2, end));
        // A refresh before the end moves it; a shorter one (fewer quanta) shortens it.
        let later = clock.received(2, t0 + Dur::from_micros(5), Dur::from_micros(10));
        assert!(!clock.expired(2, end));
        assert!(clock.expired(2, later));
        clock.received(2, t0 + Dur::from_micros(6), Dur::from_micros(1));
        assert!(clock.expired(2, Time::from_picos(later.as_picos() - 1_000_000)));
        // The sender's side: a refresh is due only at its time, and not after a resume.
        clock.sent(1, end);
        assert!(clock.refresh_due(1, end) && !clock.refresh_due(1, t0));
        clock.resumed(1);
        assert!(!clock.refresh_due(1, end));
    }

    #[test]
    fn a_class_pauses_above_its_threshold_once_and_resumes_a_gap_below() {
        let mut i = Ingress::EMPTY;
        i.add(0, 1000);
        // At the threshold: not yet.
        assert!(!i.pause_above(0, 1000));
        i.add(0, 1);
        assert!(i.pause_above(0, 1000));
        // Already paused: no second pause frame.
        i.add(0, 3999);
        assert!(!i.pause_above(0, 1000));
        // The other class is independent.
        assert!(!i.xoff[1]);
        // Draining below the threshold is not enough: the resume waits for the gap.
        i.remove(0, 4100);
        assert!(!i.resume_below(0, 1000, 200));
        i.remove(0, 100);
        assert!(i.resume_below(0, 1000, 200));
        assert!(!i.xoff[0]);
        // Not paused: nothing to resume.
        assert!(!i.resume_below(0, 1000, 200));
    }

    #[test]
    fn beside_lossy_classes_a_lossless_one_pauses_on_the_whole_input() {
        // Class 1 lossy: class 0 pauses once both together pass the threshold.
        let mut i = Ingress::with_lossy(0b10);
        i.add(1, 800);
        i.add(0, 200);
        assert!(!i.pause_above(0, 1000));
        i.add(0, 1);
        assert!(i.pause_above(0, 1000));
        // The lossy bytes leaving resume it as well.
        i.remove(1, 800);
        assert!(i.resume_below(0, 1000, 200));
        assert_eq!(i.cleared().lossy_mask(), 0b10);
    }

    #[test]
    fn a_pause_link_counts_every_class_and_flags_the_link() {
        let mut i = Ingress::PAUSE;
        assert!(i.link_wide());
        i.add(2, 600);
        i.add(5, 401);
        // Class 5 alone is far below; the link is above.
        assert!(i.pause_above(5, 1000));
        assert!(i.pausing(0) && i.pausing(2) && i.pausing(5));
        assert!(!i.pause_above(2, 1000), "one pause for the link");
        i.remove(2, 600);
        assert!(i.resume_below(2, 1000, 200));
        assert!(!i.pausing(5));
        assert!(i.cleared().link_wide());
    }

    #[test]
    fn an_emptied_class_resumes_whatever_the_gap() {
        let mut i = Ingress::EMPTY;
        i.add(1, 10);
        assert!(i.pause_above(1, 5));
        i.remove(1, 10);
        assert!(i.resume_below(1, 5, 1_000_000));
        assert_eq!(i.total(), 0);
    }

    #[test]
    fn headroom_covers_the_round_trip_and_a_frame_each_way() {
        // 40 Gb/s, 2 us: 10 000 bytes each way, 20 000 round trip, plus two 1 128-byte frames.
        let h = default_headroom(40_000_000_000, Dur::from_micros(2), 1128);
        assert_eq!(h, 20_000 + 2 * 1128);
        // The paper's switch: 240 KB per input port, XOFF where the headroom starts.
        assert_eq!(xoff_threshold(240_000, h, 1128), 240_000 - h);
        // A buffer smaller than the headroom still holds one frame before pausing.
        assert_eq!(xoff_threshold(1_000, h, 1128), 1128);
    }

    #[test]
    fn what_arrives_after_a_pause_fits_in_the_headroom() {
        // A class pauses at the first byte over XOFF; until the pause takes effect upstream
        // at most the headroom's worth of frames still arrives: the buffer holds it all.
        let (buffer, mtu_wire) = (240_000u64, 1128u64);
        let headroom = default_headroom(40_000_000_000, Dur::from_micros(2), mtu_wire);
        let xoff = xoff_threshold(buffer, headroom, mtu_wire);
        let mut i = Ingress::EMPTY;
        while !i.pause_above(0, xoff) {
            i.add(0, mtu_wire);
        }
        // At most one frame over XOFF when the pause leaves.
        assert!(i.bytes[0] <= xoff + mtu_wire);
        // In flight: a round trip at line rate, and the frame the upstream was sending.
        let in_flight = headroom - mtu_wire;
        assert!(i.bytes[0] + in_flight <= buffer);
    }

    #[test]
    fn the_shared_buffer_threshold_shrinks_as_the_buffer_fills() {
        let (buffer, xoff) = (1_000_000, 900_000);
        // Four ports reserve 100 000 each: 600 000 shared.
        let reserved = 4 * (buffer - xoff);
        assert_eq!(shared_xoff(buffer, reserved, 0, 1.0), 600_000);
        assert_eq!(shared_xoff(buffer, reserved, 200_000, 1.0), 400_000);
        assert_eq!(shared_xoff(buffer, reserved, 200_000, 0.5), 200_000);
        // Never below 2 KB.
        assert_eq!(shared_xoff(buffer, reserved, 600_000, 1.0), 2048);
    }
}
