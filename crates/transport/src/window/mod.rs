//! The two loss-recovery engines of a PSN space, independent of what the packets carry.
//!
//! * [`SendWindow`]: the sender's side — cumulative and selective acknowledgements, go-back-0 /
//!   go-back-N / IRN selective repeat (with and without the SACK bitmap), BDP-FC and the
//!   retransmission timer. It decides *which PSN* goes out next; the queue pair builds the
//!   packet for that PSN from its work requests (a NIC retransmits by re-reading the WQE, so no
//!   packet is ever stored).
//! * [`RecvWindow`] (in `recv_window.rs`): the receiver's side — the expected PSN, and for IRN
//!   the out-of-order bitmap with one optional deferred action per PSN (the *2-bitmap* of IRN
//!   §5.3.3).
//!
//! A queue pair runs one pair of these per PSN space: the requester's sPSN space (requests out,
//! ACKs in) and, with IRN's split spaces (IRN §5.4), the rPSN space of Read and atomic
//! responses (responses out from the responder, read (N)ACKs back from the requester).

pub(crate) use crate::recv_window::{Arrival, RecvWindow};
use crate::rtt::RttEstimator;
use crate::scoreboard::{Scoreboard, Seg};
use std::collections::VecDeque;
use timer::RetryTimer;

use irn_wire::{LossBitmap, Psn};

use crate::config::{Retransmission, RtoPolicy};
use crate::time::{Dur, Time};

/// Selective-repeat recovery state (IRN §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Recovery {
    /// The recovery sequence: the last regular packet sent before the first retransmission.
    /// Recovery ends when the cumulative ACK passes it.
    seq: Psn,
    /// The next PSN to consider for retransmission.
    cursor: Psn,
    /// The cursor's PSN must be retransmitted whatever the SACK bitmap says (it is the
    /// cumulative-ACK PSN on entering recovery, or after a partial ACK without SACKs).
    force: bool,
    /// After a timeout with [`SendWindow::timeout_resends_unsacked`]: every PSN below this
    /// one not selectively acknowledged is resent, SACKs above it or not.
    sweep: Option<Psn>,
    /// The sweep a timeout holds back until an answer after it shows the loss was real
    /// (F-RTO, RFC 5682 §3): an ACK that answers the retransmission and newly acknowledges
    /// only PSNs resent or SACKed before starts the sweep, and so does a SACK of a PSN sent
    /// after the timeout (new data, or [`SendWindow::probe_held_timeout`]'s probe) — it
    /// arrived while holes below it stayed open; an ACK that newly acknowledges an original
    /// transmission proves the window was delivered, the timeout spurious, and drops it. An
    /// ACK that does neither (answering the retransmission too soon to tell it from a delayed
    /// original: [`Acked::undecided_timeout`]) leaves it held.
    held_sweep: Option<Psn>,
    /// [`SendWindow::probe_held_timeout`] resent the tail (`held_sweep − 1`) while the sweep
    /// is held.
    held_probed: bool,
    /// A PSN to resend ahead of the cursor ([`SendWindow::probe_tail`],
    /// [`SendWindow::probe_held_timeout`]).
    probe: Option<Probe>,
}

impl Recovery {
    /// The held sweep starts: the loss is shown real. A probe not sent yet is moot (the sweep
    /// resends what it would), and the cursor starts no lower than `una`.
    fn start_held_sweep(&mut self, una: Psn) {
        self.sweep = self.held_sweep.take();
        self.held_probed = false;
        if matches!(self.probe, Some(Probe::Due(_))) {
            self.probe = None;
        }
        if self.cursor.distance(una) > 0 {
            self.cursor = una;
        }
    }
}

/// The tail loss probe's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// To be resent next.
    Due(Psn),
    /// Handed out by [`SendWindow::next_retransmit`]: its retransmission, when reported,
    /// leaves the cursor where it is.
    Out(Psn),
}

/// The sender side of a PSN space.
#[derive(Debug, Clone)]
pub(crate) struct SendWindow {
    mode: Retransmission,
    /// Oldest unacknowledged PSN.
    una: Psn,
    /// Next new PSN.
    next: Psn,
    /// Go-back modes: next PSN to resend, while it differs from `next`.
    go_back: Option<Psn>,
    /// `sacked[i]`: PSN `una + i` was selectively acknowledged.
    sacked: VecDeque<bool>,
    /// How many of `sacked` are set.
    sacked_n: u32,
    /// BDP-FC counts only unSACKed PSNs and lets `next − una` reach this many caps
    /// ([`RecoveryConfig::bdp_fc_span`](crate::RecoveryConfig::bdp_fc_span)).
    span: Option<u32>,
    /// Highest selectively acknowledged PSN, if any above `una`.
    highest_sack: Option<Psn>,
    recovery: Option<Recovery>,
    /// The retransmission timer and the retry count.
    timer: RetryTimer,
    /// When each outstanding PSN was first sent; `Time::MAX` once retransmitted (Karn: no RTT
    /// sample from a retransmitted packet).
    sent_at: VecDeque<Time>,
    /// The smallest round-trip time sampled (from packets never retransmitted).
    min_rtt: Option<Dur>,
    /// The last retransmission: the PSN after it, and when it left.
    last_retx: Option<(Psn, Time)>,
    /// Selective repeat: a PSN counts as lost once a PSN at least this far beyond it is
    /// selectively acknowledged (1: any higher one, IRN §3.1) — under the TCP model, once
    /// this many PSNs beyond it are.
    dup_threshold: u32,
    /// The TCP model's scoreboard, which replaces `recovery` there (boxed: IRN's windows,
    /// one per queue pair and space, stay small).
    board: Option<Box<Scoreboard>>,
    /// RFC 6298's estimator.
    est: RttEstimator,
    /// Lost retransmissions are detected and resent before the timer
    /// ([`RecoveryConfig::resend_lost_retransmissions`](crate::RecoveryConfig::resend_lost_retransmissions));
    /// `None` when off.
    relost: Option<Box<LostRetransmissions>>,
    /// A timeout resends every PSN not selectively acknowledged
    /// ([`RecoveryConfig::timeout_resends_unsacked`](crate::RecoveryConfig::timeout_resends_unsacked)).
    sweep_on_timeout: bool,
}

/// What detecting lost retransmissions keeps (RACK's ordering rule, RFC 8985 §6.2, counted in
/// transmissions): every transmission gets a serial number; a retransmission is lost once a
/// packet sent at least `dup_threshold` transmissions after it is selectively acknowledged
/// while it is not. A SACK that may answer a packet's earlier transmission rather than its
/// latest (it comes sooner than half the smallest round trip after the latest left, a
/// retransmission) judges nothing: the earlier one's serial is not kept (RFC 8985 §6.2 step
/// 2's spurious-retransmission check, by time).
#[derive(Debug, Clone, Default)]
struct LostRetransmissions {
    /// The next transmission's serial.
    serial: u64,
    /// `serial_of[i]`: the serial of PSN `una + i`'s latest transmission, and when that left
    /// if it was a retransmission (`Time::MAX` for an original).
    serial_of: VecDeque<(u64, Time)>,
    /// Retransmissions not yet judged, oldest first: (PSN, serial).
    resent: VecDeque<(Psn, u64)>,
    /// Retransmissions judged lost, to resend before anything else.
    lost: VecDeque<Psn>,
}

/// What a cumulative acknowledgement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Acked {
    /// PSNs newly acknowledged.
    pub(crate) psns: u32,
    /// Round-trip time of the newest acknowledged PSN, if it was never retransmitted (Karn)
    /// and this ACK is the first to report it: a PSN selectively acknowledged earlier, now
    /// covered when a hole fills, would give the whole recovery's length as a round trip.
    pub(crate) rtt: Option<crate::time::Dur>,
    /// This ACK judged the last timeout spurious (F-RTO): what the timeout held back is not
    /// resent. With nothing new to send, the sender should [`SendWindow::probe_tail`].
    pub(crate) spurious_timeout: bool,
    /// This ACK, the first progress after a timeout, could not judge it: it acknowledged only
    /// the retransmitted PSN (or PSNs SACKed before), sooner after the resend than half the
    /// smallest round trip seen — the answer to a delayed original, or to the resend on a
    /// path whose queue has drained since that smallest sample was taken. RFC 5682 §2 step 2b
    /// sends new data to draw a second, deciding answer; the sender should call
    /// [`SendWindow::probe_held_timeout`], which resends the tail for it unless new data has
    /// gone out since the timeout.
    pub(crate) undecided_timeout: bool,
}

impl SendWindow {
    pub(crate) fn new(mode: Retransmission, start: Psn) -> SendWindow {
        SendWindow {
            mode,
            una: start,
            next: start,
            go_back: None,
            sacked: VecDeque::new(),
            sacked_n: 0,
            span: None,
            highest_sack: None,
            recovery: None,
            timer: RetryTimer::default(),
            sent_at: VecDeque::new(),
            min_rtt: None,
            last_retx: None,
            dup_threshold: 1,
            board: None,
            est: RttEstimator::default(),
            relost: None,
            sweep_on_timeout: false,
        }
    }

    /// A timeout resends every PSN not selectively acknowledged
    /// ([`RecoveryConfig::timeout_resends_unsacked`](crate::RecoveryConfig::timeout_resends_unsacked)).
    pub(crate) fn timeout_resends_unsacked(mut self, on: bool) -> SendWindow {
        self.sweep_on_timeout = on;
        self
    }

    /// Resend lost retransmissions as soon as a later transmission is acknowledged
    /// ([`RecoveryConfig::resend_lost_retransmissions`](crate::RecoveryConfig::resend_lost_retransmissions)).
    pub(crate) fn resend_lost_retransmissions(mut self, on: bool) -> SendWindow {
        self.relost = on.then(Box::default);
        self
    }

    /// BDP-FC over unSACKed PSNs within `span` caps ([`SendWindow::may_send_new`]).
    pub(crate) fn bdp_fc_span(mut self, span: Option<u32>) -> SendWindow {
        self.span = span;
        self
    }

    /// The TCP model's loss recovery ([`Scoreboard`]) instead of IRN's.
    pub(crate) fn tcp_scoreboard(mut self) -> SendWindow {
        self.board = Some(Box::default());
        self
    }

    /// RFC 6675's `pipe`: under the TCP model, segments sent (or resent) and neither
    /// acknowledged nor deemed lost; otherwise every PSN past the cumulative ACK.
    pub(crate) fn pipe(&self) -> u32 {
        self.board.as_ref().map_or(self.in_flight(), |b| b.pipe)
    }

    /// The smoothed round trip of RFC 6298, once sampled.
    #[cfg(test)]
    pub(crate) fn srtt(&self) -> Option<Dur> {
        self.est.srtt
    }

    /// Whether the TCP model's fast retransmit is due: the one retransmission that does not
    /// wait for room in the congestion window (RFC 6675 §5 step 4.3).
    pub(crate) fn fast_retransmit_due(&self) -> bool {
        self.board
            .as_ref()
            .is_some_and(|b| b.fast_pending && b.lost > 0)
    }

    /// Whether this is the TCP model's fast retransmit — the first retransmission of a loss
    /// episode its SACKs began — and from now on not: its one congestion signal per loss
    /// event. Always `false` outside the TCP model. Call before
    /// [`on_retransmitted`](Self::on_retransmitted).
    pub(crate) fn take_fast_retransmit(&mut self) -> bool {
        self.board
            .as_mut()
            .is_some_and(|b| std::mem::replace(&mut b.fast_pending, false))
    }

    /// Selective repeat's reordering tolerance
    /// ([`RecoveryConfig::dup_threshold`](crate::RecoveryConfig::dup_threshold)).
    pub(crate) fn dup_threshold(mut self, n: u32) -> SendWindow {
        self.dup_threshold = n.max(1);
        self
    }

    pub(crate) fn una(&self) -> Psn {
        self.una
    }

    /// Whether the sender keeps a bitmap of selectively acknowledged PSNs: IRN's selective
    /// repeat, and precise retransmission, whose loss bitmaps fill it (T8(d)).
    fn keeps_sacks(&self) -> bool {
        matches!(
            self.mode,
            Retransmission::SelectiveRepeat | Retransmission::Precise
        )
    }

    pub(crate) fn next(&self) -> Psn {
        self.next
    }

    /// PSNs sent and not yet cumulatively acknowledged.
    pub(crate) fn in_flight(&self) -> u32 {
        self.una.distance(self.next).max(0) as u32
    }

    /// In loss recovery — under the TCP model, with a lost segment waiting to be resent.
    pub(crate) fn in_recovery(&self) -> bool {
        if let Some(b) = &self.board {
            return b.lost > 0;
        }
        self.recovery.is_some() || self.go_back.is_some() || self.relost_pending().is_some()
    }

    /// The first retransmission judged lost that is still neither acknowledged nor resent.
    fn relost_pending(&self) -> Option<Psn> {
        let r = self.relost.as_ref()?;
        r.lost.iter().copied().find(|&q| {
            let d = self.una.distance(q);
            d >= 0
                && (d as u32) < self.in_flight()
                && !self.sacked.get(d as usize).copied().unwrap_or(true)
        })
    }

    /// Whether `psn` lies in `[una, next)`.
    pub(crate) fn outstanding(&self, psn: Psn) -> bool {
        let d = self.una.distance(psn);
        d >= 0 && (d as u32) < self.in_flight()
    }

    /// Whether a new packet may go out: nothing left to retransmit first (go-back modes resend
    /// in order; selective repeat retransmits before sending new data, IRN §3.1) and BDP-FC
    /// (T6) allows it — counting `next − una`, or with a span the PSNs not SACKed, within
    /// `span` caps of `una`.
    pub(crate) fn may_send_new(&self, bdp_cap: Option<u32>) -> bool {
        if self.go_back.is_some() {
            return false;
        }
        let in_flight = self.in_flight();
        bdp_cap.is_none_or(|cap| match self.span {
            None => in_flight < cap,
            Some(k) => {
                in_flight.saturating_sub(self.sacked_n) < cap && in_flight < cap.saturating_mul(k)
            }
        })
    }

    /// A new packet covering `covers` PSNs went out.
    pub(crate) fn on_sent_new(&mut self, now: Time, covers: u32) {
        self.next = self.next.add(covers.max(1));
        if let Some(r) = self.relost.as_mut() {
            let s = r.serial;
            r.serial += 1;
            r.serial_of
                .extend(std::iter::repeat_n((s, Time::MAX), covers.max(1) as usize));
        }
        for _ in 0..covers.max(1) {
            if self.keeps_sacks() {
                self.sacked.push_back(false);
            }
            self.sent_at.push_back(now);
            if let Some(b) = self.board.as_mut() {
                b.seg.push_back(Seg::Sent);
                b.pipe += 1;
            }
        }
        self.timer.sent(now);
    }

    /// The PSN to retransmit next, if any.
    pub(crate) fn next_retransmit(&mut self) -> Option<Psn> {
        if let Some(b) = self.board.as_mut() {
            return b.next_lost().map(|i| self.una.add(i as u32));
        }
        if let Some(mut c) = self.go_back {
            if self.mode == Retransmission::SelectiveRepeat {
                // A go-back under IRN's selective repeat (an RNR NAK's, a Read's missing
                // response) skips what the receiver selectively acknowledged: it holds those
                // PSNs, and resending them only draws duplicates (an RNR refuses one packet,
                // and IRN's responder keeps everything it placed after it). Extended IB's
                // go-back from a NAK without a bitmap still resends everything (T8(d) as the
                // simulator's T8 experiment ran it; skipping there lowered its average FCT
                // from 1 537 to 1 298 µs, a change of published results left for later).
                while c != self.next
                    && self
                        .sacked
                        .get(self.una.distance(c).max(0) as usize)
                        .copied()
                        .unwrap_or(false)
                {
                    c = c.add(1);
                }
                self.go_back = (c != self.next).then_some(c);
            }
            return (c != self.next).then_some(c);
        }
        if let Some(q) = self.relost_pending() {
            return Some(q);
        }
        let rec = self.recovery.as_mut()?;
        if self.una.distance(rec.cursor) < 0 {
            rec.cursor = self.una;
        }
        if let Some(Probe::Due(q)) = rec.probe {
            rec.probe = None;
            // Still outstanding and not SACKed: `outstanding` and the SACK lookup written out,
            // since `rec` borrows the recovery state mutably.
            let i = self.una.distance(q);
            if i >= 0
                && q.distance(self.next) > 0
                && !self.sacked.get(i as usize).copied().unwrap_or(false)
            {
                rec.probe = Some(Probe::Out(q));
                return Some(q);
            }
        }
        match self.mode {
            Retransmission::SelectiveRepeat | Retransmission::Precise => loop {
                let c = rec.cursor;
                if c == self.next {
                    return None;
                }
                if rec.force {
                    return Some(c);
                }
                let i = self.una.distance(c) as usize;
                if self.sacked.get(i).copied().unwrap_or(false) {
                    rec.cursor = c.add(1);
                    continue;
                }
                if rec.sweep.is_some_and(|end| c.distance(end) > 0) {
                    return Some(c);
                }
                // Lost only if a higher PSN was selectively acknowledged (IRN §3.1) — with a
                // reordering tolerance, one at least `dup_threshold` PSNs higher.
                return match self.highest_sack {
                    Some(h) if c.distance(h) >= self.dup_threshold as i32 => Some(c),
                    _ => None,
                };
            },
            Retransmission::SelectiveRepeatNoSack => {
                (rec.force && rec.cursor != self.next).then_some(rec.cursor)
            }
            Retransmission::GoBackN | Retransmission::GoBack0 => None,
        }
    }

    /// The packet at `psn`, covering `covers` PSNs, was retransmitted.
    pub(crate) fn on_retransmitted(&mut self, now: Time, psn: Psn, covers: u32) {
        self.last_retx = Some((psn.add(covers.max(1)), now));
        // A retransmission judged lost, resent again: it lies behind the recovery cursor (or
        // anywhere), which it must not move.
        // The tail loss probe, resent ahead of the cursor, does not move it.
        let mut judged = self.recovery.as_mut().is_some_and(|r| {
            let probe = r.probe == Some(Probe::Out(psn));
            if probe {
                r.probe = None;
            }
            probe && r.cursor != psn
        });
        if self.outstanding(psn) {
            let i = self.una.distance(psn) as usize;
            let in_flight = self.in_flight() as usize;
            if let Some(r) = self.relost.as_mut() {
                let s = r.serial;
                r.serial += 1;
                let end = (i + covers.max(1) as usize).min(r.serial_of.len());
                for x in r.serial_of.range_mut(i..end) {
                    *x = (s, now);
                }
                if r.resent.len() > 2 * in_flight {
                    // Entries whose PSN was resent since are dead; drop them (RNR go-backs
                    // that nothing SACKs could otherwise pile them up).
                    let una = self.una;
                    let live = &r.serial_of;
                    r.resent.retain(|&(q, qs)| {
                        let d = una.distance(q);
                        d >= 0 && live.get(d as usize).is_some_and(|x| x.0 == qs)
                    });
                }
                r.resent.push_back((psn, s));
                judged |= r.lost.contains(&psn);
                r.lost.retain(|&q| q != psn);
            }
            if let Some(b) = self.board.as_mut() {
                for j in i..i + covers.max(1) as usize {
                    if matches!(b.seg.get(j), Some(Seg::Lost | Seg::Sent)) {
                        b.set(j, Seg::Retx);
                    }
                }
            }
            for t in self
                .sent_at
                .range_mut(i..(i + covers.max(1) as usize).min(self.sent_at.len()))
            {
                *t = Time::MAX;
            }
        }
        if self.go_back.is_some() {
            let after = psn.add(covers.max(1));
            self.go_back = (after.distance(self.next) > 0).then_some(after);
        } else if let Some(rec) = self.recovery.as_mut() {
            // A packet covering several PSNs (a standard Read request) resends them all.
            if !judged && rec.cursor.distance(psn) >= 0 {
                rec.cursor = psn.add(covers.max(1));
                rec.force = false;
            }
        }
        self.timer.sent(now);
    }

    /// A cumulative acknowledgement: every PSN before `cum` has arrived. Returns how many PSNs
    /// it newly acknowledged (none for a stale or duplicate ACK) and an RTT sample.
    pub(crate) fn ack(&mut self, now: Time, cum: Psn) -> Acked {
        let d = self.una.distance(cum);
        if d <= 0 || d as u32 > self.in_flight() {
            return Acked::default();
        }
        let n = d as u32;
        // ACKs like this one a round trip brings: the window they answer over what each
        // covers (one per packet under IRN, one per two under delayed ACKs).
        let per_rtt = self.in_flight().div_ceil(n);
        // Whether this ACK covers an original transmission not SACKed before: the packet was
        // delivered as first sent (F-RTO's evidence that a timeout was spurious).
        let originals = self.recovery.is_some_and(|r| r.held_sweep.is_some())
            && (0..n as usize).any(|i| {
                !self.sacked.get(i).copied().unwrap_or(true)
                    && self.sent_at.get(i).is_some_and(|&t| t != Time::MAX)
            });
        self.una = cum;
        let mut newest = Time::MAX;
        let mut newest_sacked = false;
        for _ in 0..n {
            newest_sacked = self.sacked.pop_front().unwrap_or(false);
            self.sacked_n -= u32::from(newest_sacked);
            newest = self.sent_at.pop_front().unwrap_or(Time::MAX);
        }
        if let Some(b) = self.board.as_mut() {
            b.pop(n as usize);
        }
        if let Some(r) = self.relost.as_mut() {
            r.serial_of.drain(..(n as usize).min(r.serial_of.len()));
            let una = self.una;
            r.resent.retain(|&(q, _)| una.distance(q) >= 0);
            r.lost.retain(|&q| una.distance(q) >= 0);
        }
        let rtt = (newest != Time::MAX).then(|| now - newest);
        if let Some(r) = rtt {
            self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        }
        // The smallest-RTT estimate keeps every sample (an old one only overestimates); a
        // congestion controller gets none from a PSN selectively acknowledged before.
        let rtt = rtt.filter(|_| !newest_sacked);
        if let Some(r) = rtt {
            self.est.sample(r, per_rtt);
            // A valid sample ends the backed-off timer; an ACK of retransmitted packets
            // alone does not (RFC 6298 §5, after rule 5.7: the RTO "collapses" only once new
            // data is acknowledged; Karn's algorithm). Clearing it on any progress let a
            // queue pair whose every packet had been resent keep timing out at the first
            // RTO: it never took a sample, so its timer stayed at the initial 2 ms behind a
            // receiver 10 ms away, and each expiry resent the window again (64
            // IRN queue pairs on loopback: 29 000 timeouts in a run).
            self.est.backoff = 0;
        }
        // Whether this ACK can be the answer to the last retransmission: it covers it, and at
        // least half the smallest round trip seen has passed since it left — much sooner, it
        // answers the original, delayed rather than lost (the test TCP stacks use to call a
        // retransmission spurious). Half, because the smallest sample still holds whatever
        // queueing its packet met: in an emptied network the retransmission's own round trip
        // comes in under it (E5 without BDP-FC: 25.4 µs against a 25.8 µs minimum), and a
        // guard of one whole minimum then refused every answer — a 731-packet flow crawled one
        // RTO per packet for 57 ms. Later ACKs of delayed originals still pass it (after a
        // spurious timeout under queueing, one needless resend per half minimum RTT until
        // recovery ends); the latest RTT sample instead would block the rule where it matters,
        // since a flow recovering a lost tail takes no new samples (Karn) and keeps its
        // congested ones.
        let mut spurious_timeout = false;
        let mut undecided_timeout = false;
        let mut answers_retx = self.last_retx.is_some_and(|(after, at)| {
            cum.distance(after) <= 0
                && self
                    .min_rtt
                    .is_none_or(|m| now.since(at).as_picos() >= m.as_picos() / 2)
        });
        if self.highest_sack.is_some_and(|h| h.distance(cum) > 0) {
            self.highest_sack = None;
        }
        if let Some(c) = self.go_back {
            if c.distance(cum) > 0 {
                self.go_back = (cum != self.next).then_some(cum);
            }
        }
        if let Some(b) = self.board.as_mut() {
            match b.recover {
                // The cumulative ACK passed RecoveryPoint: the episode is over.
                Some(r) if r.distance(cum) > 0 => {
                    b.recover = None;
                    b.fast_pending = false;
                    self.last_retx = None;
                }
                // A partial ACK answering a retransmission with nothing SACKed above it: the
                // next hole is lost too (RFC 6582 §3.2 step 5).
                Some(_)
                    if self.highest_sack.is_none()
                        && answers_retx
                        && matches!(b.seg.front(), Some(Seg::Sent | Seg::Retx)) =>
                {
                    b.set(0, Seg::Lost);
                }
                _ => {}
            }
        }
        if let Some(rec) = self.recovery.as_mut() {
            if rec.held_sweep.is_some() {
                if originals {
                    // Delivered as first sent: the timeout was spurious (RFC 5682 §3 step 3b).
                    // Nothing more is resent for it: neither the sweep nor, on this or later
                    // partial ACKs, the next PSN as if the retransmission's answer showed it
                    // lost; holes a SACK proves are still resent.
                    rec.held_sweep = None;
                    rec.force = false;
                    self.last_retx = None;
                    answers_retx = false;
                    // (The tail was probed already if an earlier answer was undecided.)
                    spurious_timeout = !std::mem::take(&mut rec.held_probed);
                } else if answers_retx {
                    // Only the retransmission (and PSNs already SACKed) came back: the loss
                    // was real, and the rest of the window is resent (step 2a's verdict).
                    rec.start_held_sweep(cum);
                } else {
                    undecided_timeout = true;
                }
            }
            if rec.seq.distance(cum) > 0 {
                // The cumulative ACK passed the recovery sequence: recovery is over.
                self.recovery = None;
                self.last_retx = None;
            } else if self.mode == Retransmission::SelectiveRepeatNoSack
                || (self.highest_sack.is_none() && answers_retx)
            {
                // A partial ACK with no selective ACK above it, answering a retransmission:
                // the new hole is the next loss. The retransmission left after every packet
                // still unacknowledged, on the same path, so those are gone (NewReno's
                // partial-ACK rule, RFC 6582). IRN §3.1 retransmits a packet only once a
                // higher PSN is selectively acknowledged; read literally, a window whose tail
                // was dropped whole (an incast's last burst) is recovered one RTO per packet,
                // which is how E8 first failed (docs/RESULTS.md). An ACK that comes sooner
                // than a round trip after the retransmission answers the original packet
                // (delayed, not lost, as after a spurious timeout): no conclusion is drawn
                // from it, or every packet queued behind it would be resent in turn.
                rec.cursor = cum;
                rec.force = true;
            }
        }
        self.progress(now);
        Acked {
            psns: n,
            rtt,
            spurious_timeout,
            undecided_timeout,
        }
    }

    /// After a timeout judged spurious ([`Acked::spurious_timeout`]) with nothing new to send:
    /// resends the highest PSN sent, unless it was acknowledged. One ACK decided the verdict
    /// (RFC 5682 §2 step 2b waits for a second, which new data would draw); if the NACK that
    /// would have reported the PSNs it acknowledged was lost and the window's tail was lost
    /// too, no packet is left to draw that second answer, and the tail would wait for another
    /// timeout. The probe arrives beyond the holes, so the receiver's NACK names them and
    /// they are resent by the SACK rule — a tail loss probe (RFC 8985 §7.3), one duplicate
    /// when the timeout was indeed spurious. RFC 5682 instead resends the whole window in
    /// this case, which after a spurious timeout is the window's worth of duplicates that
    /// F-RTO is there to avoid.
    pub(crate) fn probe_tail(&mut self) {
        let last = self.next.sub(1);
        if let Some(rec) = self
            .recovery
            .as_mut()
            .filter(|_| self.una.distance(last) >= 0)
        {
            rec.probe = Some(Probe::Due(last));
        }
    }

    /// After an answer that could not judge a timeout ([`Acked::undecided_timeout`]), unless
    /// a packet has gone out since the timeout (new data, which draws the deciding answer
    /// itself): resends the highest PSN sent, once per timeout, unless it was acknowledged.
    /// It does not wait for new data that may be ready: a fence, Read credit or the device's
    /// budget can hold that back, and a queue pair whose new data goes out after the probe
    /// pays one duplicate. RFC 5682 §2 step 2b, with nothing new to send, would go on with
    /// the conventional recovery here (the sweep); the probe decides first. Past holes, its
    /// SACK shows the loss real and starts the held sweep ([`SendWindow::sack`]); after a
    /// window that was only delayed, the originals' ACKs judge the timeout spurious. Without it a
    /// queue pair whose window is closed by what it still counts in flight asks nothing more
    /// until the next timeout — backed off, since Karn's rule takes no sample from an ACK of
    /// a resend: behind two DCTCP senders at a 300 Mb/s switch port (a 6 ms smallest sample
    /// taken under a standing queue, resends answered in 0.2–0.9 ms), a queue pair recovered
    /// a lost window of 105 packets one PSN per 200 ms timeout (tests/switch_netns.rs).
    pub(crate) fn probe_held_timeout(&mut self) {
        let last = self.next.sub(1);
        let i = self.una.distance(last);
        let unsacked = i >= 0 && !self.sacked.get(i as usize).copied().unwrap_or(true);
        let next = self.next;
        if let Some(rec) = self
            .recovery
            .as_mut()
            .filter(|r| r.held_sweep == Some(next) && !r.held_probed && unsacked)
        {
            rec.probe = Some(Probe::Due(last));
            rec.held_probed = true;
        }
    }

    /// Progress — an ACK of this space, or Read responses arriving in order: restarts the timer
    /// and resets the retry count.
    pub(crate) fn progress(&mut self, now: Time) {
        let in_flight = self.in_flight() > 0;
        self.timer.progress(now, in_flight);
    }

    /// The peer answered without acknowledging anything new (an RNR NAK, a NACK): it is alive,
    /// so the stretch without progress that the retry budget measures starts again.
    pub(crate) fn peer_alive(&mut self, now: Time) {
        let in_flight = self.in_flight() > 0;
        self.timer.peer_alive(now, in_flight);
    }

    /// `psn` was selectively acknowledged (the PSN that triggered a NACK) at `now`. The peer
    /// answered, so the retry budget's stall clock starts again whatever the mode makes of it.
    pub(crate) fn sack(&mut self, now: Time, psn: Psn) {
        self.peer_alive(now);
        if !self.keeps_sacks() || !self.outstanding(psn) {
            return;
        }
        let i = self.una.distance(psn) as usize;
        if let Some(b) = self.sacked.get_mut(i) {
            self.sacked_n += u32::from(!*b);
            *b = true;
        }
        if self.highest_sack.is_none_or(|h| h.distance(psn) > 0) {
            self.highest_sack = Some(psn);
        }
        if let Some(rec) = self.recovery.as_mut() {
            // A PSN sent after the timeout arrived while the holes below it stayed open: the
            // loss was real, and the held sweep starts (RFC 5682 §2 step 3a's verdict, for
            // new data; the same for the probe of an undecided timeout). Whatever the
            // reordering tolerance: the holes' transmissions left a timeout earlier.
            let after_timeout =
                |end: Psn| end.distance(psn) >= 0 || (rec.held_probed && psn == end.sub(1));
            if rec.held_sweep.is_some_and(after_timeout) {
                rec.start_held_sweep(self.una);
            }
        }
        let high = self.next.sub(1);
        // `psn` is outstanding and `highest_sack` at or above it.
        let top = self
            .highest_sack
            .map_or(i, |h| self.una.distance(h) as usize);
        if let Some(b) = self.board.as_mut() {
            if b.seg.get(i) != Some(&Seg::Sacked) {
                b.set(i, Seg::Sacked);
            }
            b.detect(self.dup_threshold, high, top);
        }
        if let Some(r) = self.relost.as_mut() {
            // Every retransmission sent at least `dup_threshold` transmissions before this
            // packet's latest, and neither acknowledged nor resent since, is lost.
            let (s, at) = r.serial_of.get(i).copied().unwrap_or((0, Time::MAX));
            let maybe_earlier = at != Time::MAX
                && self
                    .min_rtt
                    .is_some_and(|m| now.since(at).as_picos() < m.as_picos() / 2);
            while let Some(&(q, qs)) = r.resent.front().filter(|_| !maybe_earlier) {
                if qs.saturating_add(u64::from(self.dup_threshold)) > s {
                    break;
                }
                r.resent.pop_front();
                let d = self.una.distance(q);
                if d < 0 {
                    continue;
                }
                let j = d as usize;
                let unsacked = !self.sacked.get(j).copied().unwrap_or(true);
                if unsacked && r.serial_of.get(j).is_some_and(|x| x.0 == qs) {
                    r.lost.push_back(q);
                }
            }
        }
    }

    /// A NACK's selective acknowledgement: its SACK PSN alone, or with a loss bitmap all that
    /// [`SendWindow::sack_all_but`] reads from it. `false` when a bitmap was out of its reach.
    pub(crate) fn sack_nack(
        &mut self,
        now: Time,
        base: Psn,
        sack: Option<Psn>,
        lost: Option<&LossBitmap>,
    ) -> bool {
        match (sack, lost) {
            (Some(s), Some(lost)) => self.sack_all_but(now, base, lost, s),
            (Some(s), None) => {
                self.sack(now, s);
                true
            }
            (None, _) => true,
        }
    }

    /// A NACK's loss bitmap ([`RecoveryConfig::nack_bitmap`]): every PSN from `base` (the
    /// NACKed, expected PSN: offset 0) to `highest` that `lost` does not mark has arrived, and
    /// `highest` itself has. Selectively acknowledges those not acknowledged yet, in order;
    /// `false` (and nothing acknowledged but `highest`) when `highest` does not lie within
    /// the bitmap's reach.
    ///
    /// [`RecoveryConfig::nack_bitmap`]: crate::RecoveryConfig::nack_bitmap
    pub(crate) fn sack_all_but(
        &mut self,
        now: Time,
        base: Psn,
        lost: &LossBitmap,
        highest: Psn,
    ) -> bool {
        let span = base.distance(highest);
        // The highest PSN itself (offset `span`) arrived and may lie just past the last word.
        if span <= 0 || span as usize > lost.capacity() {
            self.sack(now, highest);
            return false;
        }
        self.peer_alive(now);
        for i in 0..=span as u32 {
            if i < span as u32 && lost.is_set(i as usize) {
                continue;
            }
            let psn = base.add(i);
            let d = self.una.distance(psn);
            let known = d >= 0 && self.sacked.get(d as usize).copied().unwrap_or(false);
            if !known {
                self.sack(now, psn);
            }
        }
        true
    }

    /// Selective repeat enters loss recovery (on a NACK or a timeout); a no-op when already in
    /// it, unless `restart` (a timeout restarts recovery from the cumulative ACK).
    pub(crate) fn enter_recovery(&mut self, restart: bool) {
        if self.in_flight() == 0 {
            return;
        }
        if let Some(b) = self.board.as_mut() {
            // The TCP model: SACKs start episodes (`Scoreboard::detect`); a timeout deems
            // every segment not SACKed lost and starts one without a fast retransmit.
            if restart {
                for i in 0..b.seg.len() {
                    if matches!(b.seg[i], Seg::Sent | Seg::Retx) {
                        b.set(i, Seg::Lost);
                    }
                }
                b.frontier = b.seg.len();
                b.recover = Some(self.next.sub(1));
                b.fast_pending = false;
            }
            return;
        }
        if self.recovery.is_some() && !restart {
            return;
        }
        if let Some(r) = self.relost.as_mut().filter(|_| restart) {
            // A timeout resends from the cumulative ACK on: what was judged so far is moot.
            r.resent.clear();
            r.lost.clear();
        }
        let seq = self.next.sub(1);
        self.recovery = Some(Recovery {
            seq: match self.recovery {
                // A restart keeps the original recovery sequence if it is later.
                Some(r) if r.seq.distance(seq) < 0 => r.seq,
                _ => seq,
            },
            cursor: self.una,
            // A NACK under a reordering tolerance proves nothing yet about the cumulative-ACK
            // PSN: it is resent when the SACKs beyond it reach the threshold. A timeout does.
            force: restart || self.dup_threshold <= 1,
            // A timeout may sweep every PSN sent so far, once the first ACK after it shows
            // the loss was real; a NACK keeps a sweep under way or held.
            sweep: if restart {
                None
            } else {
                self.recovery.and_then(|r| r.sweep)
            },
            held_sweep: if restart {
                self.sweep_on_timeout.then_some(self.next)
            } else {
                self.recovery.and_then(|r| r.held_sweep)
            },
            held_probed: false,
            probe: None,
        });
    }

    /// Go-back modes: resend everything from `to` (clamped to `[una, next]`).
    pub(crate) fn go_back(&mut self, to: Psn) {
        let to = if self.una.distance(to) < 0 || !self.outstanding(to) {
            self.una
        } else {
            to
        };
        self.go_back = (to != self.next).then_some(to);
        // Everything from `to` on is resent in order: what selective repeat had judged lost
        // or still meant to resend there (a sweep, holes below a SACK) is covered — the
        // cursor, left behind, would resend it all a second time once the go-back ends.
        if let Some(rec) = self.recovery.as_mut() {
            if rec.cursor.distance(to) <= 0 {
                rec.cursor = self.next;
                rec.force = false;
                rec.sweep = None;
                rec.held_sweep = None;
                rec.held_probed = false;
            }
            // The go-back resends the tail: a probe of it would be a duplicate.
            rec.probe = None;
        }
        if let Some(r) = self.relost.as_mut() {
            r.resent.retain(|&(q, _)| q.distance(to) > 0);
            r.lost.retain(|&q| q.distance(to) > 0);
        }
    }

    /// The retransmission timer expired and the connection goes on: start the retransmission
    /// this window's mode calls for. Go-back-N resends from the oldest unacknowledged PSN;
    /// go-back-0 from the first PSN of the message holding it, which `message_start` (the
    /// queue pair's work requests) says (T3); selective repeat enters recovery after a timeout
    /// (T5); precise retransmission forgets its selective acknowledgements and goes back
    /// (T8(d)).
    pub(crate) fn recover_after_timeout(&mut self, message_start: impl FnOnce(Psn) -> Psn) {
        match self.mode {
            Retransmission::GoBackN => self.go_back(self.una),
            Retransmission::GoBack0 => {
                let start = message_start(self.una);
                self.go_back(start);
            }
            Retransmission::SelectiveRepeat | Retransmission::SelectiveRepeatNoSack => {
                self.enter_recovery(true)
            }
            Retransmission::Precise => self.timeout_go_back(),
        }
    }

    /// Precise retransmission's timeout (T8(d)): forget every selective acknowledgement and
    /// resend everything from the oldest unacknowledged PSN.
    fn timeout_go_back(&mut self) {
        self.recovery = None;
        if let Some(r) = self.relost.as_mut() {
            r.resent.clear();
            r.lost.clear();
        }
        self.highest_sack = None;
        for s in self.sacked.iter_mut() {
            *s = false;
        }
        self.sacked_n = 0;
        self.go_back(self.una);
    }

    /// Rewinds go-back-0's acknowledged point to the start of a message the receiver discarded.
    /// Only meaningful when `to` is at most `una`; the PSNs become outstanding again.
    pub(crate) fn rewind(&mut self, to: Psn) {
        let d = to.distance(self.una);
        if d > 0 && (d as u32) < Psn::HALF {
            self.una = to;
            for _ in 0..d {
                if self.keeps_sacks() {
                    self.sacked.push_front(false);
                }
                if let Some(r) = self.relost.as_mut() {
                    r.serial_of.push_front((0, Time::MAX));
                }
                self.sent_at.push_front(Time::MAX);
            }
        }
        self.go_back(to);
    }

    /// The retransmission deadline under `rto`, if the timer runs. IRN picks RTO_low or
    /// RTO_high from the packets in flight *now* (T5), so the deadline follows the window.
    /// With a `backoff` of `(after, cap)`, a fixed timer that has expired more than `after`
    /// times since the peer last answered is doubled per further expiry, up to `cap`
    /// ([`RecoveryConfig::rto_backoff_after`](crate::RecoveryConfig::rto_backoff_after)); an
    /// adaptive one backs off by its estimator whatever `backoff` says.
    pub(crate) fn deadline(&self, rto: &RtoPolicy, backoff: Option<(u32, Dur)>) -> Option<Time> {
        let base = self.timer.base()?;
        if self.in_flight() == 0 {
            return None;
        }
        if let RtoPolicy::Adaptive { min, max, initial } = *rto {
            return Some(base + self.est.rto(min, max, initial));
        }
        let d = rto.timeout(self.in_flight())?;
        Some(base + self.timer.backed_off(d, backoff))
    }

    /// Restarts the timer at `now` (after a timeout, or an RNR wait).
    pub(crate) fn restart_timer(&mut self, now: Time) {
        let in_flight = self.in_flight() > 0;
        self.timer.restart(now, in_flight);
    }

    /// The retransmission timer expired: restarts it and returns the retries counted so far
    /// without progress. The caller starts the retransmission its mode calls for.
    ///
    /// With `retry_every` `None`, every expiry is a retry (the timer is the verbs local ACK
    /// timeout). With `Some(t)` (a retransmission timer shorter than the local ACK timeout
    /// `t`, as IRN's), the retries are the whole `t`s elapsed without progress, so a queue
    /// pair gives up after `retry_cnt + 1` local ACK timeouts whatever its RTO — but never
    /// more than the expiries it has seen: a driver that could not run for a while (a busy
    /// host's scheduler) calls in once, late, and that one expiry is one retry, not every
    /// period that passed while nothing ran (7 of 42 benchmark runs on a loaded host
    /// gave up with no packet lost).
    pub(crate) fn on_timeout(&mut self, now: Time, retry_every: Option<Dur>) -> u32 {
        self.est.backoff = self.est.backoff.saturating_add(1);
        self.timer.expired(now, retry_every)
    }
}

mod timer;

#[cfg(test)]
mod tests;
