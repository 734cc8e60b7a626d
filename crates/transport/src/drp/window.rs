//! DRP's reliable data transfer (seed 003 §3.1: "TCP-like window control and retransmission
//! control", a fixed window of 8 frames and fast retransmission): a frame sender with a
//! cumulative acknowledgement, duplicate-ACK fast retransmit and a retransmit timer, and a
//! frame receiver that places any frame inside its window on arrival and acknowledges the next
//! frame it expects.
//!
//! The seed gives no more detail than "TCP-like" and "fast retransmission". The rules chosen:
//! the receiver keeps a bitmap of frames received beyond the first hole (data is placed at its
//! address as it arrives, so nothing is buffered for reordering); the sender retransmits the
//! first unacknowledged frame on the third duplicate ACK (RFC 5681 §3.2) and, while it recovers,
//! the next hole on every partial ACK (NewReno, RFC 6582 §3.2); the timer retransmits the first
//! unacknowledged frame, enters the same recovery and doubles itself until progress (RFC 6298
//! §5.5), up to [`MAX_BACKOFF`] times its base value.

use std::collections::VecDeque;

use super::{frames_of, DrpConfig};
use crate::time::{Dur, Time};

/// The largest window a receiver tracks (its bitmap's width).
pub const MAX_WINDOW: u32 = 64;

/// The data timer backs off to at most this multiple of its base value.
pub const MAX_BACKOFF: u32 = 64;

/// `rto` doubled per consecutive expiry, up to [`MAX_BACKOFF`] times (RFC 6298 §5.5).
pub(crate) fn backed_off(rto: Dur, expiries: u32) -> Dur {
    rto.doubled(expiries.min(MAX_BACKOFF.trailing_zeros()))
}

/// Sends `frames` numbered frames with at most `window` outstanding.
#[derive(Debug, Clone)]
pub(crate) struct FrameSender {
    /// Frames in the transfer.
    pub frames: u32,
    /// Oldest unacknowledged frame.
    pub una: u32,
    /// Next new frame.
    pub next: u32,
    window: u32,
    dup_threshold: u32,
    dups: u32,
    /// While recovering: the `next` at the start of recovery (partial ACKs below it retransmit).
    recover: Option<u32>,
    /// Frames to send again before new ones.
    resend: VecDeque<u32>,
    /// When the retransmit timer fires, if it runs.
    pub deadline: Option<Time>,
    /// Consecutive expiries without progress.
    pub expiries: u32,
    /// Frames sent again.
    pub retransmitted: u64,
}

/// What an ACK did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckOutcome {
    /// New frames acknowledged.
    Progress,
    /// A duplicate that started fast retransmission.
    FastRetransmit,
    /// A duplicate or stale ACK.
    Duplicate,
    /// Acknowledges frames never sent: ignored.
    Invalid,
}

impl FrameSender {
    /// A sender for a transfer of `len` bytes framed and windowed as `cfg` says.
    pub fn for_transfer(cfg: &DrpConfig, len: u64) -> Self {
        FrameSender::new(
            frames_of(len, cfg.payload),
            cfg.window,
            cfg.dup_ack_threshold,
        )
    }

    pub fn new(frames: u32, window: u32, dup_threshold: u32) -> Self {
        FrameSender {
            frames,
            una: 0,
            next: 0,
            window,
            dup_threshold,
            dups: 0,
            recover: None,
            resend: VecDeque::new(),
            deadline: None,
            expiries: 0,
            retransmitted: 0,
        }
    }

    /// Every frame acknowledged.
    pub fn done(&self) -> bool {
        self.una == self.frames
    }

    /// Whether a frame may go now.
    pub fn ready(&self) -> bool {
        !self.resend.is_empty() || (self.next < self.frames && self.next < self.una + self.window)
    }

    /// The frame to send now, if any, arming the timer at `now + rto` if it is idle.
    pub fn take(&mut self, now: Time, rto: Dur) -> Option<u32> {
        let sn = if let Some(sn) = self.resend.pop_front() {
            self.retransmitted += 1;
            sn
        } else if self.next < self.frames && self.next < self.una + self.window {
            self.next += 1;
            self.next - 1
        } else {
            return None;
        };
        if self.deadline.is_none() {
            self.deadline = Some(now + rto);
        }
        Some(sn)
    }

    fn queue_resend(&mut self, sn: u32) {
        if sn < self.next && !self.resend.contains(&sn) {
            self.resend.push_back(sn);
        }
    }

    /// A cumulative ACK: the receiver expects frame `ackn` next.
    pub fn on_ack(&mut self, now: Time, rto: Dur, ackn: u32) -> AckOutcome {
        if ackn > self.next {
            return AckOutcome::Invalid;
        }
        if ackn > self.una {
            self.una = ackn;
            self.dups = 0;
            self.expiries = 0;
            self.resend.retain(|&sn| sn >= ackn);
            match self.recover {
                Some(r) if ackn < r => self.queue_resend(ackn),
                _ => self.recover = None,
            }
            self.deadline = (self.una < self.next).then(|| now + rto);
            return AckOutcome::Progress;
        }
        if ackn == self.una && self.una < self.next {
            self.dups += 1;
            if self.dups == self.dup_threshold && self.recover.is_none() {
                self.recover = Some(self.next);
                self.queue_resend(self.una);
                return AckOutcome::FastRetransmit;
            }
        }
        AckOutcome::Duplicate
    }

    /// The retransmit timer fired: resend the oldest frame and back the timer off, doubling it
    /// per consecutive expiry up to [`MAX_BACKOFF`] times `rto` (RFC 6298 §5.5), so that a peer
    /// that stalls for a while is not sent the same frame every `rto`.
    pub fn on_timeout(&mut self, now: Time, rto: Dur) {
        self.expiries += 1;
        self.dups = 0;
        self.recover = Some(self.next);
        self.queue_resend(self.una);
        self.deadline = Some(now + backed_off(rto, self.expiries));
    }
}

/// What the receiver made of a data frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Not seen before: place it.
    New,
    /// Seen before: acknowledge again, place nothing.
    Duplicate,
    /// Beyond the window: drop.
    OutOfWindow,
}

/// Tracks which frames have arrived; the ACK number is the first missing one.
#[derive(Debug, Clone, Default)]
pub(crate) struct FrameReceiver {
    /// The first frame not yet received.
    pub expected: u32,
    /// Bit `i`: frame `expected + 1 + i` received.
    above: u64,
}

impl FrameReceiver {
    /// Classifies frame `sn` without recording it.
    pub fn classify(&self, sn: u32) -> Arrival {
        if sn < self.expected {
            return Arrival::Duplicate;
        }
        let off = sn - self.expected;
        if off == 0 {
            return Arrival::New;
        }
        if off >= MAX_WINDOW {
            return Arrival::OutOfWindow;
        }
        if self.above & (1u64 << (off - 1)) != 0 {
            Arrival::Duplicate
        } else {
            Arrival::New
        }
    }

    /// Records frame `sn`, which [`FrameReceiver::classify`] called new.
    pub fn record(&mut self, sn: u32) {
        let off = sn - self.expected;
        if off == 0 {
            self.expected += 1;
            while self.above & 1 != 0 {
                self.above >>= 1;
                self.expected += 1;
            }
            self.above >>= 1;
        } else {
            self.above |= 1u64 << (off - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTO: Dur = Dur::from_micros(100);

    #[test]
    fn receiver_advances_over_filled_holes() {
        let mut r = FrameReceiver::default();
        for sn in [1, 2, 4] {
            assert_eq!(r.classify(sn), Arrival::New);
            r.record(sn);
        }
        assert_eq!(r.expected, 0);
        assert_eq!(r.classify(2), Arrival::Duplicate);
        r.record(0);
        assert_eq!(r.expected, 3);
        r.record(3);
        assert_eq!(r.expected, 5);
        assert_eq!(r.classify(4), Arrival::Duplicate);
        assert_eq!(r.classify(5 + MAX_WINDOW), Arrival::OutOfWindow);
        assert_eq!(r.classify(5 + MAX_WINDOW - 1), Arrival::New);
    }

    #[test]
    fn sender_window_fast_retransmit_and_partial_acks() {
        let now = Time::ZERO;
        let mut s = FrameSender::new(20, 8, 3);
        let sent: Vec<u32> = std::iter::from_fn(|| s.take(now, RTO)).collect();
        assert_eq!(sent, (0..8).collect::<Vec<_>>(), "a window of 8");
        // Frames 2 and 5 lost: ACKs 1, 2, 2, 2 (for 1, 3, 4, 6).
        assert_eq!(s.on_ack(now, RTO, 1), AckOutcome::Progress);
        assert_eq!(s.take(now, RTO), Some(8));
        assert_eq!(s.on_ack(now, RTO, 2), AckOutcome::Progress);
        assert_eq!(s.take(now, RTO), Some(9));
        assert_eq!(s.on_ack(now, RTO, 2), AckOutcome::Duplicate);
        assert_eq!(s.on_ack(now, RTO, 2), AckOutcome::Duplicate);
        assert_eq!(s.on_ack(now, RTO, 2), AckOutcome::FastRetransmit);
        assert_eq!(s.take(now, RTO), Some(2), "the hole goes first");
        assert_eq!(s.take(now, RTO), None, "window full");
        // The retransmission fills 2; the receiver now expects 5: a partial ACK resends 5.
        assert_eq!(s.on_ack(now, RTO, 5), AckOutcome::Progress);
        assert_eq!(s.take(now, RTO), Some(5));
        assert_eq!(s.on_ack(now, RTO, 10), AckOutcome::Progress);
        assert_eq!(s.retransmitted, 2);
        assert_eq!(s.on_ack(now, RTO, 11), AckOutcome::Invalid, "never sent");
    }

    #[test]
    fn timeout_resends_the_oldest_and_counts() {
        let mut s = FrameSender::new(3, 8, 3);
        while s.take(Time::ZERO, RTO).is_some() {}
        assert_eq!(s.deadline, Some(Time::ZERO + RTO));
        let t = Time::ZERO + RTO;
        s.on_timeout(t, RTO);
        assert_eq!(s.expiries, 1);
        assert_eq!(
            s.deadline,
            Some(t + RTO + RTO),
            "backed off to twice the timer"
        );
        assert_eq!(s.take(t, RTO), Some(0));
        let mut u = t;
        for _ in 0..10 {
            s.on_timeout(u, RTO);
            u = s.deadline.expect("armed");
        }
        let last = s.deadline.expect("armed");
        s.on_timeout(last, RTO);
        assert_eq!(
            s.deadline.expect("armed").since(last),
            Dur::from_picos(RTO.as_picos() * u64::from(MAX_BACKOFF)),
            "capped"
        );
        assert_eq!(s.on_ack(last, RTO, 3), AckOutcome::Progress);
        assert!(s.done());
        assert_eq!(s.deadline, None);
        assert_eq!(s.expiries, 0, "progress resets the back-off");
    }
}
