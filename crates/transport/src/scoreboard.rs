//! The TCP model's SACK scoreboard (RFC 6675), which replaces IRN's recovery state in a
//! [`SendWindow`](crate::window::SendWindow) under SPEC E10's TCP model (split from
//! `window/`, which keeps IRN's selective repeat and the go-back modes).

use std::collections::VecDeque;

use irn_wire::Psn;

/// Where an outstanding segment stands on the TCP model's scoreboard (RFC 6675 §2–§5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seg {
    /// Sent once and neither acknowledged nor deemed lost: in the pipe.
    Sent,
    /// Selectively acknowledged: out of the pipe.
    Sacked,
    /// Deemed lost and not resent since: out of the pipe, next to retransmit.
    Lost,
    /// Retransmitted since it was deemed lost: in the pipe again.
    Retx,
}

/// The TCP model's SACK scoreboard (RFC 6675): one [`Seg`] per outstanding PSN, the `pipe`
/// the congestion window is compared with, and the loss-recovery episode.
///
/// A segment is deemed lost when `DupThresh` segments above it are SACKed (`IsLost`), when a
/// partial ACK during recovery leaves it the next hole (NewReno, RFC 6582 §3.2), and — every
/// segment not SACKed — when the retransmission timer expires (RFC 6675 §5.1, as Linux's
/// `tcp_enter_loss` marks them), so that after a timeout the window's slow start resends the
/// holes in order instead of one per timeout. Retransmissions are the lowest lost segments,
/// and they too wait for room in the congestion window (RFC 6675 §5 `NextSeg`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scoreboard {
    pub(crate) seg: VecDeque<Seg>,
    /// Segments [`Seg::Sent`] or [`Seg::Retx`].
    pub(crate) pipe: u32,
    /// Segments [`Seg::Lost`].
    pub(crate) lost: u32,
    /// Index (from `una`) below which every [`Seg::Sent`] segment is lost already: `IsLost`
    /// only moves it up.
    pub(crate) frontier: usize,
    /// No [`Seg::Lost`] segment has a lower index.
    pub(crate) first_lost: usize,
    /// The loss-recovery episode's RecoveryPoint (`HighData` when it began, RFC 6675 §5);
    /// `None` outside one.
    pub(crate) recover: Option<Psn>,
    /// The episode began on SACKs and nothing was retransmitted yet: the first retransmission
    /// is the fast retransmit.
    pub(crate) fast_pending: bool,
}

impl Scoreboard {
    pub(crate) fn set(&mut self, i: usize, to: Seg) {
        let Some(s) = self.seg.get_mut(i) else {
            return;
        };
        let from = std::mem::replace(s, to);
        let in_pipe = |x: Seg| matches!(x, Seg::Sent | Seg::Retx);
        self.pipe = self.pipe + u32::from(in_pipe(to)) - u32::from(in_pipe(from));
        self.lost = self.lost + u32::from(to == Seg::Lost) - u32::from(from == Seg::Lost);
        if to == Seg::Lost {
            self.first_lost = self.first_lost.min(i);
        }
    }

    /// Drops the first `n` segments (cumulatively acknowledged).
    pub(crate) fn pop(&mut self, n: usize) {
        for _ in 0..n {
            match self.seg.pop_front() {
                Some(Seg::Sent | Seg::Retx) => self.pipe -= 1,
                Some(Seg::Lost) => self.lost -= 1,
                _ => {}
            }
        }
        self.frontier = self.frontier.saturating_sub(n);
        self.first_lost = self.first_lost.saturating_sub(n);
    }

    /// Marks lost every sent segment with `dup` SACKed segments above it (`IsLost`, with
    /// full-sized segments), starting an episode at `high` (the highest PSN sent) if none
    /// runs. `top` is the highest SACKed segment's index: nothing above it is SACKed, so the
    /// count starts there rather than at the window's newest segment (per SACK, a few steps
    /// instead of the whole flight).
    pub(crate) fn detect(&mut self, dup: u32, high: Psn, top: usize) {
        let mut above = 0;
        let mut at = None;
        let end = (top + 1).min(self.seg.len());
        for (i, s) in self.seg.range(..end).enumerate().rev() {
            if i < self.frontier {
                break;
            }
            if *s == Seg::Sacked {
                above += 1;
                if above >= dup {
                    at = Some(i);
                    break;
                }
            }
        }
        let Some(top) = at else {
            return;
        };
        let mut marked = false;
        for i in self.frontier..top {
            if self.seg[i] == Seg::Sent {
                self.set(i, Seg::Lost);
                marked = true;
            }
        }
        self.frontier = self.frontier.max(top);
        if marked && self.recover.is_none() {
            self.recover = Some(high);
            self.fast_pending = true;
        }
    }

    /// The lowest lost segment's index.
    pub(crate) fn next_lost(&mut self) -> Option<usize> {
        if self.lost == 0 {
            return None;
        }
        let i = (self.first_lost..self.seg.len()).find(|&i| self.seg[i] == Seg::Lost)?;
        self.first_lost = i;
        Some(i)
    }
}
