//! The two loss-recovery engines of a PSN space, independent of what the packets carry.
//!
//! * [`SendWindow`]: the sender's side — cumulative and selective acknowledgements, go-back-0 /
//!   go-back-N / IRN selective repeat (with and without the SACK bitmap), BDP-FC and the
//!   retransmission timer. It decides *which PSN* goes out next; the queue pair builds the
//!   packet for that PSN from its work requests (a NIC retransmits by re-reading the WQE, so no
//!   packet is ever stored).
//! * [`RecvWindow`]: the receiver's side — the expected PSN, and for IRN the out-of-order
//!   bitmap with one optional deferred action per PSN (the *2-bitmap* of IRN §5.3.3).
//!
//! A queue pair runs one pair of these per PSN space: the requester's sPSN space (requests out,
//! ACKs in) and, with IRN's split spaces (IRN §5.4), the rPSN space of Read and atomic
//! responses (responses out from the responder, read (N)ACKs back from the requester).

use std::collections::VecDeque;

use irn_wire::{LossBitmap, Psn, MAX_BITMAP_WORDS};

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
    /// Highest selectively acknowledged PSN, if any above `una`.
    highest_sack: Option<Psn>,
    recovery: Option<Recovery>,
    /// When the retransmission timer was (re)started; `None` = not running.
    timer_base: Option<Time>,
    /// When the current stretch without progress began: the timer's start from idle, or the
    /// last progress. `None` while nothing is in flight.
    stall_base: Option<Time>,
    /// Retries counted in the current stretch without progress.
    retries: u32,
    /// When each outstanding PSN was first sent; `Time::MAX` once retransmitted (Karn: no RTT
    /// sample from a retransmitted packet).
    sent_at: VecDeque<Time>,
    /// The smallest round-trip time sampled (from packets never retransmitted).
    min_rtt: Option<Dur>,
    /// The last retransmission: the PSN after it, and when it left.
    last_retx: Option<(Psn, Time)>,
    /// Selective repeat: a PSN counts as lost once a PSN at least this far beyond it is
    /// selectively acknowledged (1: any higher one, IRN §3.1).
    dup_threshold: u32,
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
}

impl SendWindow {
    pub(crate) fn new(mode: Retransmission, start: Psn) -> SendWindow {
        SendWindow {
            mode,
            una: start,
            next: start,
            go_back: None,
            sacked: VecDeque::new(),
            highest_sack: None,
            recovery: None,
            timer_base: None,
            stall_base: None,
            retries: 0,
            sent_at: VecDeque::new(),
            min_rtt: None,
            last_retx: None,
            dup_threshold: 1,
        }
    }

    /// Selective repeat's reordering tolerance ([`RecoveryConfig::dup_threshold`](crate::RecoveryConfig::dup_threshold)).
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

    pub(crate) fn in_recovery(&self) -> bool {
        self.recovery.is_some() || self.go_back.is_some()
    }

    /// Whether `psn` lies in `[una, next)`.
    pub(crate) fn outstanding(&self, psn: Psn) -> bool {
        let d = self.una.distance(psn);
        d >= 0 && (d as u32) < self.in_flight()
    }

    /// Whether a new packet may go out: nothing left to retransmit first (go-back modes resend
    /// in order; selective repeat retransmits before sending new data, IRN §3.1) and BDP-FC
    /// (T6) allows it.
    pub(crate) fn may_send_new(&self, bdp_cap: Option<u32>) -> bool {
        if self.go_back.is_some() {
            return false;
        }
        bdp_cap.is_none_or(|cap| self.in_flight() < cap)
    }

    /// A new packet covering `covers` PSNs went out.
    pub(crate) fn on_sent_new(&mut self, now: Time, covers: u32) {
        self.next = self.next.add(covers.max(1));
        for _ in 0..covers.max(1) {
            if self.keeps_sacks() {
                self.sacked.push_back(false);
            }
            self.sent_at.push_back(now);
        }
        if self.timer_base.is_none() {
            self.timer_base = Some(now);
            self.stall_base.get_or_insert(now);
        }
    }

    /// The PSN to retransmit next, if any.
    pub(crate) fn next_retransmit(&mut self) -> Option<Psn> {
        if let Some(c) = self.go_back {
            return (c != self.next).then_some(c);
        }
        let rec = self.recovery.as_mut()?;
        if self.una.distance(rec.cursor) < 0 {
            rec.cursor = self.una;
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
        if self.outstanding(psn) {
            let i = self.una.distance(psn) as usize;
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
            rec.cursor = psn.add(covers.max(1));
            rec.force = false;
        }
        if self.timer_base.is_none() {
            self.timer_base = Some(now);
            self.stall_base.get_or_insert(now);
        }
    }

    /// A cumulative acknowledgement: every PSN before `cum` has arrived. Returns how many PSNs
    /// it newly acknowledged (none for a stale or duplicate ACK) and an RTT sample.
    pub(crate) fn ack(&mut self, now: Time, cum: Psn) -> Acked {
        let d = self.una.distance(cum);
        if d <= 0 || d as u32 > self.in_flight() {
            return Acked::default();
        }
        let n = d as u32;
        self.una = cum;
        let mut newest = Time::MAX;
        let mut newest_sacked = false;
        for _ in 0..n {
            newest_sacked = self.sacked.pop_front().unwrap_or(false);
            newest = self.sent_at.pop_front().unwrap_or(Time::MAX);
        }
        let rtt = (newest != Time::MAX).then(|| now - newest);
        if let Some(r) = rtt {
            self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        }
        // The smallest-RTT estimate keeps every sample (an old one only overestimates); a
        // congestion controller gets none from a PSN selectively acknowledged before.
        let rtt = rtt.filter(|_| !newest_sacked);
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
        let answers_retx = self.last_retx.is_some_and(|(after, at)| {
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
        if let Some(rec) = self.recovery.as_mut() {
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
        Acked { psns: n, rtt }
    }

    /// Progress — an ACK of this space, or Read responses arriving in order: restarts the timer
    /// and resets the retry count.
    pub(crate) fn progress(&mut self, now: Time) {
        self.retries = 0;
        self.timer_base = (self.in_flight() > 0).then_some(now);
        self.stall_base = self.timer_base;
    }

    /// The peer answered without acknowledging anything new (an RNR NAK, a NACK): it is alive,
    /// so the stretch without progress that the retry budget measures starts again.
    pub(crate) fn peer_alive(&mut self, now: Time) {
        self.retries = 0;
        if self.in_flight() > 0 {
            self.stall_base = Some(now);
        }
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
            *b = true;
        }
        if self.highest_sack.is_none_or(|h| h.distance(psn) > 0) {
            self.highest_sack = Some(psn);
        }
    }

    /// Selective repeat enters loss recovery (on a NACK or a timeout); a no-op when already in
    /// it, unless `restart` (a timeout restarts recovery from the cumulative ACK).
    pub(crate) fn enter_recovery(&mut self, restart: bool) {
        if self.in_flight() == 0 {
            return;
        }
        if self.recovery.is_some() && !restart {
            return;
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
    }

    /// Precise retransmission's timeout (T8(d)): forget every selective acknowledgement and
    /// resend everything from the oldest unacknowledged PSN.
    pub(crate) fn timeout_go_back(&mut self) {
        self.recovery = None;
        self.highest_sack = None;
        for s in self.sacked.iter_mut() {
            *s = false;
        }
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
                self.sent_at.push_front(Time::MAX);
            }
        }
        self.go_back(to);
    }

    /// The retransmission deadline under `rto`, if the timer runs. IRN picks RTO_low or
    /// RTO_high from the packets in flight *now* (T5), so the deadline follows the window.
    pub(crate) fn deadline(&self, rto: &RtoPolicy) -> Option<Time> {
        let base = self.timer_base?;
        if self.in_flight() == 0 {
            return None;
        }
        rto.timeout(self.in_flight()).map(|d| base + d)
    }

    /// Restarts the timer at `now` (after a timeout, or an RNR wait).
    pub(crate) fn restart_timer(&mut self, now: Time) {
        self.timer_base = (self.in_flight() > 0).then_some(now);
    }

    /// The retransmission timer expired: restarts it and returns the retries counted so far
    /// without progress. The caller starts the retransmission its mode calls for.
    ///
    /// With `retry_every` `None`, every expiry is a retry (the timer is the verbs local ACK
    /// timeout). With `Some(t)` (a retransmission timer shorter than the local ACK timeout
    /// `t`, as IRN's), the retries are the whole `t`s elapsed without progress, so a queue
    /// pair gives up after `retry_cnt + 1` local ACK timeouts whatever its RTO.
    pub(crate) fn on_timeout(&mut self, now: Time, retry_every: Option<crate::time::Dur>) -> u32 {
        match retry_every {
            None => self.retries += 1,
            Some(t) => {
                let base = *self.stall_base.get_or_insert(now);
                let stalled = now.since(base).as_picos() / t.as_picos().max(1);
                self.retries = self.retries.max(u32::try_from(stalled).unwrap_or(u32::MAX));
            }
        }
        self.timer_base = Some(now);
        self.retries
    }
}

/// What a receiver makes of an arriving PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The expected PSN.
    Expected,
    /// Already received (before the expected PSN, or marked in the bitmap).
    Duplicate,
    /// Ahead of the expected PSN, within the out-of-order window (IRN only), `offset` PSNs on.
    Ahead(u32),
    /// Ahead and not acceptable: beyond the window, or the receiver discards out-of-order
    /// packets (RoCE).
    OutOfOrder,
}

#[derive(Debug, Clone)]
struct Slot<A> {
    arrived: bool,
    action: Option<A>,
}

/// The receiver side of a PSN space: the expected PSN and, when out-of-order packets are
/// accepted, a bitmap of arrivals beyond it holding one deferred action per PSN.
#[derive(Debug, Clone)]
pub(crate) struct RecvWindow<A> {
    epsn: Psn,
    accept_ooo: bool,
    capacity: u32,
    slots: VecDeque<Slot<A>>,
    /// Arrived slots beyond the expected PSN (packets held out of order).
    arrived: u32,
    /// A NAK was sent for the current gap (RoCE sends one per sequence error, IBTA §9.7.5.1.3;
    /// cleared when the expected packet arrives).
    pub(crate) nak_sent: bool,
}

impl<A> RecvWindow<A> {
    /// A window expecting `epsn` first. `capacity` bounds how far ahead out-of-order packets are
    /// kept (the BDP cap, IRN §5.3); 0 or `!accept_ooo` makes it discard them.
    pub(crate) fn new(epsn: Psn, accept_ooo: bool, capacity: u32) -> RecvWindow<A> {
        RecvWindow {
            epsn,
            accept_ooo: accept_ooo && capacity > 1,
            capacity: capacity.max(1),
            slots: VecDeque::new(),
            arrived: 0,
            nak_sent: false,
        }
    }

    pub(crate) fn epsn(&self) -> Psn {
        self.epsn
    }

    pub(crate) fn set_epsn(&mut self, epsn: Psn) {
        self.epsn = epsn;
        self.slots.clear();
        self.arrived = 0;
    }

    /// PSNs that arrived beyond a hole and wait for it (0 when nothing is held).
    pub(crate) fn held(&self) -> u32 {
        self.arrived
    }

    /// The extended-IB loss bitmap (T8(d)): bit `i` set when PSN `epsn + i` has not arrived,
    /// up to the highest PSN that has (at most [`MAX_BITMAP_WORDS`] words), and that highest
    /// arrived PSN the bitmap reaches. `None` when nothing is held beyond the expected PSN.
    pub(crate) fn loss_bitmap(&self) -> Option<(LossBitmap, Psn)> {
        let cap = 32 * MAX_BITMAP_WORDS;
        let highest = self
            .slots
            .iter()
            .take(cap)
            .rposition(|s| s.arrived)
            .filter(|&h| h > 0)?;
        let mut b = LossBitmap::with_words(highest.div_ceil(32).max(1))?;
        for (i, s) in self.slots.iter().take(highest).enumerate() {
            if !s.arrived {
                b.set(i);
            }
        }
        Some((b, self.epsn.add(highest as u32)))
    }

    /// Classifies `psn`.
    pub(crate) fn classify(&self, psn: Psn) -> Arrival {
        let d = self.epsn.distance(psn);
        if d < 0 {
            return Arrival::Duplicate;
        }
        if d == 0 {
            return if self.slots.front().is_some_and(|s| s.arrived) {
                Arrival::Duplicate
            } else {
                Arrival::Expected
            };
        }
        let d = d as u32;
        if !self.accept_ooo || d >= self.capacity {
            return Arrival::OutOfOrder;
        }
        if self.slots.get(d as usize).is_some_and(|s| s.arrived) {
            Arrival::Duplicate
        } else {
            Arrival::Ahead(d)
        }
    }

    /// Records the arrival of `psn` (classified `Expected` or `Ahead`), covering `covers` PSNs,
    /// with an action to run once every PSN before it has arrived.
    pub(crate) fn accept(&mut self, psn: Psn, covers: u32, action: Option<A>) {
        let d = self.epsn.distance(psn).max(0) as usize;
        let covers = covers.max(1) as usize;
        while self.slots.len() < d + covers {
            self.slots.push_back(Slot {
                arrived: false,
                action: None,
            });
        }
        for s in self.slots.range_mut(d..d + covers) {
            if !s.arrived {
                self.arrived += 1;
            }
            s.arrived = true;
        }
        self.slots[d].action = action;
    }

    /// Pops the next in-order arrival, advancing the expected PSN: `(psn, action)`.
    pub(crate) fn pop_ready(&mut self) -> Option<(Psn, Option<A>)> {
        if !self.slots.front().is_some_and(|s| s.arrived) {
            return None;
        }
        let s = self.slots.pop_front()?;
        self.arrived = self.arrived.saturating_sub(1);
        let psn = self.epsn;
        self.epsn = self.epsn.add(1);
        self.nak_sent = false;
        Some((psn, s.action))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Dur;

    fn p(v: u32) -> Psn {
        Psn::new(v)
    }

    fn sent(w: &mut SendWindow, n: u32) {
        for _ in 0..n {
            w.on_sent_new(Time::ZERO, 1);
        }
    }

    #[test]
    fn selective_repeat_retransmits_cum_ack_first_then_only_holes_below_a_sack() {
        let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(100));
        sent(&mut w, 10); // 100..=109
                          // 100 and 103 lost; 101 triggers NACK(cum 100, sack 101).
        w.ack(Time::ZERO, p(100));
        w.sack(Time::ZERO, p(101));
        w.enter_recovery(false);
        assert_eq!(
            w.next_retransmit(),
            Some(p(100)),
            "cumulative ACK PSN first"
        );
        w.on_retransmitted(Time::ZERO, p(100), 1);
        // 102 is not sacked and nothing above it is: not (yet) lost.
        assert_eq!(w.next_retransmit(), None);
        w.sack(Time::ZERO, p(102));
        assert_eq!(w.next_retransmit(), None, "102 arrived; nothing lost");
        w.sack(Time::ZERO, p(104));
        assert_eq!(
            w.next_retransmit(),
            Some(p(103)),
            "103 lost: 104 was sacked"
        );
        w.on_retransmitted(Time::ZERO, p(103), 1);
        assert_eq!(w.next_retransmit(), None);
        assert!(w.in_recovery());
        // The retransmitted 100 arrives: cum jumps to 103; still inside recovery (seq 109).
        w.ack(Time::ZERO, p(103));
        assert!(w.in_recovery());
        // Cum passes the recovery sequence (109): recovery ends.
        w.ack(Time::ZERO, p(110));
        assert!(!w.in_recovery());
        assert_eq!(w.in_flight(), 0);
    }

    #[test]
    fn recovery_sequence_is_the_last_regular_packet_before_the_first_retransmission() {
        let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0));
        sent(&mut w, 5); // 0..=4
        w.sack(Time::ZERO, p(1));
        w.enter_recovery(false);
        assert_eq!(w.next_retransmit(), Some(p(0)));
        w.on_retransmitted(Time::ZERO, p(0), 1);
        sent(&mut w, 3); // new packets 5..=7 while in recovery
        w.ack(Time::ZERO, p(5));
        assert!(!w.in_recovery(), "cum 5 > recovery seq 4");
    }

    #[test]
    fn no_sack_retransmits_one_hole_per_round_trip() {
        let mut w = SendWindow::new(Retransmission::SelectiveRepeatNoSack, p(0));
        sent(&mut w, 10);
        w.sack(Time::ZERO, p(5)); // ignored without a bitmap
        w.enter_recovery(false);
        assert_eq!(w.next_retransmit(), Some(p(0)));
        w.on_retransmitted(Time::ZERO, p(0), 1);
        assert_eq!(w.next_retransmit(), None);
        // Partial ACK to 3: 3 is the next hole.
        w.ack(Time::ZERO, p(3));
        assert_eq!(w.next_retransmit(), Some(p(3)));
    }

    #[test]
    fn go_back_n_resends_everything_from_the_nak_psn() {
        let mut w = SendWindow::new(Retransmission::GoBackN, p(0xff_fffe));
        sent(&mut w, 6); // wraps
        w.ack(Time::ZERO, p(0xff_ffff));
        w.go_back(p(0xff_ffff));
        assert!(!w.may_send_new(None));
        let mut resent = vec![];
        while let Some(psn) = w.next_retransmit() {
            resent.push(psn.value());
            w.on_retransmitted(Time::ZERO, psn, 1);
        }
        assert_eq!(resent, vec![0xff_ffff, 0, 1, 2, 3]);
        assert!(w.may_send_new(None));
    }

    #[test]
    fn bdp_fc_caps_packets_beyond_the_last_acked() {
        let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0));
        sent(&mut w, 3);
        assert!(!w.may_send_new(Some(3)));
        w.ack(Time::ZERO, p(1));
        assert!(w.may_send_new(Some(3)));
    }

    #[test]
    fn irn_timer_uses_rto_low_with_few_packets_in_flight() {
        let rto = RtoPolicy::Irn {
            low: Dur::from_micros(100),
            high: Dur::from_micros(320),
            n: 3,
        };
        let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0));
        assert_eq!(w.deadline(&rto), None);
        sent(&mut w, 3);
        assert_eq!(w.deadline(&rto), Some(Time::ZERO + Dur::from_micros(100)));
        sent(&mut w, 1);
        assert_eq!(w.deadline(&rto), Some(Time::ZERO + Dur::from_micros(320)));
        let t = Time::ZERO + Dur::from_micros(7);
        w.ack(t, p(2));
        assert_eq!(w.deadline(&rto), Some(t + Dur::from_micros(100)));
    }

    #[test]
    fn receiver_bitmap_runs_actions_in_psn_order() {
        let mut r: RecvWindow<&str> = RecvWindow::new(p(10), true, 4);
        assert_eq!(r.classify(p(12)), Arrival::Ahead(2));
        r.accept(p(12), 1, Some("last"));
        assert_eq!(r.classify(p(12)), Arrival::Duplicate);
        assert_eq!(r.classify(p(14)), Arrival::OutOfOrder, "beyond capacity");
        assert_eq!(r.pop_ready(), None);
        assert_eq!(r.classify(p(10)), Arrival::Expected);
        r.accept(p(10), 1, None);
        r.accept(p(11), 1, None);
        let got: Vec<_> = std::iter::from_fn(|| r.pop_ready()).collect();
        assert_eq!(
            got,
            vec![(p(10), None), (p(11), None), (p(12), Some("last"))]
        );
        assert_eq!(r.epsn(), p(13));
        assert_eq!(r.classify(p(9)), Arrival::Duplicate);
    }

    #[test]
    fn discarding_receiver_takes_only_the_expected_psn() {
        let r: RecvWindow<()> = RecvWindow::new(p(0), false, 100);
        assert_eq!(r.classify(p(1)), Arrival::OutOfOrder);
        assert_eq!(r.classify(p(0)), Arrival::Expected);
    }
}
