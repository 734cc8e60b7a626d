//! The device's line: what it sends leaves no faster than its link's rate, as a NIC's
//! port serializes frames (`DeviceConfig::line_rate_bps`).
//!
//! A software device has no line of its own: its engine hands the kernel whatever the
//! queue pairs' windows allow, at memory speed — RoCE's 128 packets, 141 KB at MTU 1024,
//! in well under a millisecond. Link-level flow control assumes a line: a switch reserves
//! headroom for what a sender's link delivers between the moment the switch asks for a
//! pause and the moment the pause takes hold — the link's rate times the cable's and both
//! ends' reaction time (IEEE 802.1Qbb Annex N; seed 001 §2). A sender that bursts its whole
//! window in that time overruns any headroom sized for its link. So a device that honours
//! pauses serializes at its link's rate by default.
//!
//! The line is booked frame by frame: each frame given to it is on the wire, whole, after
//! the ones before it (`len × 8 / rate`, counting the Ethernet header and FCS, as `irn
//! switch` counts a frame's time at its ports). A transmit turn waits while the line is
//! booked more than [`SLACK`] ahead, and the queue pairs it held get their turns again once
//! half of that is left: the engine wakes late by tens of microseconds (its timer's slack,
//! the scheduler), and a line never booked ahead would run slower than its rate, while one
//! booked far ahead would burst into a switch's headroom. A line that fell idle starts
//! again from now: no credit is saved up while nothing is sent.

use std::collections::{BTreeSet, VecDeque};

use irn_transport::{Dur, Time};

/// Bytes an Ethernet frame carries besides its IP packet: the header (14) and the FCS (4).
pub(crate) const ETH_FRAME_OVERHEAD: usize = 18;

/// Bytes an IP packet carries besides its InfiniBand headers and payload, at most: an IPv6
/// header (40), UDP (8) and the ICRC (4), for a packet's size before it is built.
pub(crate) const IP_UDP_ICRC_LEN: usize = 52;

/// How far ahead of now the line may be booked before a turn waits: what the device may
/// put on the link at once after a pause ends, 7.5 KB at 300 Mb/s, 250 KB at 10 Gb/s.
pub(crate) const SLACK: Dur = Dur::from_micros(200);

/// A link the device's frames leave by, at `rate_bps`.
#[derive(Debug)]
pub(crate) struct Line {
    rate_bps: u64,
    /// Bytes a frame carries besides its IP packet: [`ETH_FRAME_OVERHEAD`], and a tag's 4.
    framing: usize,
    /// When the frames given to the line so far have all left it.
    free_at: Time,
    /// Queue pairs whose turn found the line booked, first come first served: each gets a
    /// turn in that order once the line takes frames again, and one the line holds again
    /// goes to the back — so that queue pairs share a slow line turn by turn, rather than the
    /// lowest-numbered one taking every turn.
    waiting: VecDeque<u32>,
    /// The queue pairs in `waiting`.
    queued: BTreeSet<u32>,
    /// Transmit turns the line held back.
    pub(crate) held_turns: u64,
}

impl Line {
    /// A line of `rate_bps` bits per second (at least 1).
    pub(crate) fn new(rate_bps: u64) -> Line {
        Line {
            rate_bps: rate_bps.max(1),
            framing: ETH_FRAME_OVERHEAD,
            free_at: Time::ZERO,
            waiting: VecDeque::new(),
            queued: BTreeSet::new(),
            held_turns: 0,
        }
    }

    /// The line's frames carry an 802.1Q tag (`device/tagged.rs`): 4 bytes more each.
    pub(crate) fn tagged(mut self, tagged: bool) -> Line {
        self.framing = ETH_FRAME_OVERHEAD + if tagged { 4 } else { 0 };
        self
    }

    /// The line's rate, bits per second.
    pub(crate) fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// When the line would be free if an IP packet of `ip_len` bytes were given to it at
    /// `now`.
    fn free_after(&self, ip_len: usize, now: Time) -> Time {
        let bytes = (ip_len + self.framing) as u64;
        self.free_at.max(now) + Dur::transmission(bytes, self.rate_bps)
    }

    /// An IP packet of `ip_len` bytes is given to the line at `now`.
    pub(crate) fn send(&mut self, ip_len: usize, now: Time) {
        self.free_at = self.free_after(ip_len, now);
    }

    /// Whether the line is booked too far ahead of `now` to take another frame.
    pub(crate) fn busy(&self, now: Time) -> bool {
        self.free_at > now + SLACK
    }

    /// Whether an IP packet of `ip_len` bytes given to the line at `now` would leave it
    /// booked too far ahead to take another.
    pub(crate) fn fills(&self, ip_len: usize, now: Time) -> bool {
        self.free_after(ip_len, now) > now + SLACK
    }

    /// Queue pair `qpn`'s turn found the line booked: it waits at the back, unless it
    /// already waits. Returns whether the queue was empty (then the caller must see that
    /// the engine wakes for [`Line::next_release`]).
    pub(crate) fn wait(&mut self, qpn: u32) -> bool {
        self.held_turns += 1;
        let was_empty = self.waiting.is_empty();
        if self.queued.insert(qpn) {
            self.waiting.push_back(qpn);
        }
        was_empty
    }

    /// The queue pair to give a turn next, if the line takes frames at `now` and one waits.
    pub(crate) fn next_ready(&mut self, now: Time) -> Option<u32> {
        if self.busy(now) {
            return None;
        }
        let qpn = self.waiting.pop_front()?;
        self.queued.remove(&qpn);
        Some(qpn)
    }

    /// When the queue pairs waiting for the line get their turns again — half the slack
    /// before it falls idle, so that each wake-up of the engine books half the slack's worth
    /// of frames rather than one — if any waits.
    pub(crate) fn next_release(&self) -> Option<Time> {
        if self.waiting.is_empty() {
            return None;
        }
        let half = SLACK.as_picos() / 2;
        Some(Time::from_picos(
            self.free_at.as_picos().saturating_sub(half),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBPS: u64 = 1_000_000;

    #[test]
    fn frames_leave_one_after_another_at_the_rate_and_a_turn_waits_past_the_slack() {
        // 300 Mb/s: a 1 082-byte frame (a 1 064-byte packet) takes 28.85 µs.
        let frame = Dur::transmission(1082, 300 * MBPS);
        assert_eq!(frame.as_nanos(), 28_853);
        let mut l = Line::new(300 * MBPS);
        let t0 = Time::ZERO + Dur::from_millis(1);
        let mut sent = 0;
        while !l.busy(t0) {
            l.send(1064, t0);
            sent += 1;
        }
        // Booked up to the slack (200 µs: 6.9 frames) and one frame past it.
        assert_eq!(sent, 7);
        assert_eq!(l.free_at.since(t0), frame.saturating_mul(7));
        // Nobody waits: no release is due.
        assert_eq!(l.next_release(), None);
        l.wait(7);
        // Released with half the slack left on the line, and then no longer busy.
        let r = l.next_release().expect("a release");
        assert_eq!(l.free_at.since(r), Dur::from_micros(100));
        assert!(!l.busy(r) && l.busy(t0));
    }

    #[test]
    fn a_late_engine_still_fills_the_line_at_its_rate() {
        // Over one second the line carries its rate when each wake-up comes up to half the
        // slack after the release asked for.
        for rate in [300 * MBPS, 10_000 * MBPS] {
            let mut l = Line::new(rate);
            let mut now = Time::ZERO;
            let mut bytes = 0u64;
            let end = Time::ZERO + Dur::from_millis(1_000);
            while now < end {
                while !l.busy(now) {
                    l.send(1064, now);
                    bytes += 1082;
                }
                l.wait(1);
                now = l.next_release().expect("waits") + Dur::from_micros(90);
            }
            let bps = bytes * 8;
            assert!(bps.abs_diff(rate) < rate / 100, "{rate}: {bps}");
        }
    }

    #[test]
    fn waiting_queue_pairs_take_turns_in_the_order_they_came() {
        let mut l = Line::new(300 * MBPS);
        let now = Time::ZERO;
        while !l.busy(now) {
            l.send(1064, now);
        }
        assert!(l.wait(9));
        assert!(!l.wait(2));
        assert!(!l.wait(9), "already waiting: not queued twice");
        assert_eq!(l.held_turns, 3);
        assert_eq!(l.next_ready(now), None, "the line is booked");
        let r = l.next_release().expect("a release");
        assert_eq!(l.next_ready(r), Some(9));
        // 9 books the line again and goes to the back, behind 2.
        while !l.busy(r) {
            l.send(1064, r);
        }
        l.wait(9);
        let r = l.next_release().expect("a release");
        assert_eq!(l.next_ready(r), Some(2));
        assert_eq!(l.next_ready(r), Some(9));
        assert_eq!(l.next_ready(r), None);
        assert_eq!(l.next_release(), None);
        // Whether a packet would fill the line: 200 µs are 7.4 frames of 1 082 bytes.
        let idle = Line::new(300 * MBPS);
        assert!(!idle.fills(1064, r) && idle.fills(8 * 1064, r));
    }

    #[test]
    fn an_idle_line_saves_no_credit() {
        let mut l = Line::new(300 * MBPS);
        l.send(1064, Time::ZERO);
        // Idle for a second: the next frame still ends one frame's time after it is sent.
        let later = Time::ZERO + Dur::from_millis(1_000);
        l.send(1064, later);
        assert_eq!(l.free_at.since(later), Dur::transmission(1082, 300 * MBPS));
        assert_eq!(l.rate_bps(), 300 * MBPS);
    }
}
