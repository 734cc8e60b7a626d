//! Every deadline of a queue pair in one table (after quinn-proto's `TimerTable`): the
//! driver is handed only the earliest ([`QueuePair::poll_timeout`]) and calls
//! [`QueuePair::handle_timeout`] at or after it, which runs each timer that expired, in the
//! table's order.
//!
//! The slots are derived from the state that owns each deadline (the send windows keep their
//! own timer bases, the controller its own timers), so a slot can never disagree with the
//! state it times.

use super::QueuePair;
use crate::state::QpState;
use crate::time::Time;

/// The timers of a queue pair, in the order [`QueuePair::handle_timeout`] runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Pacing: the next data packet may leave (only while data waits).
    Pacing,
    /// The congestion controller's own timers (DCQCN's rate-increase timer and α decay).
    Controller,
    /// An RNR NAK's wait is over: resend from the refused PSN (IBTA §9.7.5.2.8).
    RnrWait,
    /// The requester's retransmission timeout (RTO_low / RTO_high under IRN, T5; the local
    /// ACK timeout under RoCE).
    Retransmit,
    /// IRN's Read responder: the rPSN space's retransmission timeout (IRN §5.4).
    ResponseRetransmit,
    /// The responder's open hole meets the hole rule's delay: NAK it (T8(a), T8(d)).
    ResponderHole,
    /// The requester's Read hole meets the hole rule's delay: re-request the missing chunks
    /// (T8(b)).
    ReadHole,
    /// The TCP model's delayed ACK is due (RFC 1122 §4.2.3.2).
    DelayedAck,
}

impl Timer {
    const ALL: [Timer; 8] = [
        Timer::Pacing,
        Timer::Controller,
        Timer::RnrWait,
        Timer::Retransmit,
        Timer::ResponseRetransmit,
        Timer::ResponderHole,
        Timer::ReadHole,
        Timer::DelayedAck,
    ];
}

/// One optional deadline per [`Timer`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TimerTable([Option<Time>; Timer::ALL.len()]);

impl TimerTable {
    pub(crate) fn set(&mut self, timer: Timer, at: Option<Time>) {
        self.0[timer as usize] = at;
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Time> {
        self.0[timer as usize]
    }

    /// Whether `timer` is armed for `now` or earlier.
    pub(crate) fn expired(&self, timer: Timer, now: Time) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// The earliest armed deadline.
    pub(crate) fn next(&self) -> Option<Time> {
        self.0.iter().flatten().min().copied()
    }
}

impl QueuePair {
    /// Calls `f` with each armed timer and its deadline, as the queue pair's state has them
    /// now: the one definition of every slot, which [`timers`](QueuePair::timers) tabulates and
    /// [`poll_timeout`](QueuePair::poll_timeout) folds without building the table.
    #[inline]
    fn visit_timers(&self, mut f: impl FnMut(Timer, Time)) {
        let mut slot = |timer: Timer, at: Option<Time>| {
            if let Some(at) = at {
                f(timer, at);
            }
        };
        slot(Timer::Controller, self.cc.next_timer());
        let backoff = self.backoff();
        if matches!(self.state, QpState::Rts | QpState::Sqd) {
            match self.cmp.rnr_until {
                Some(until) => slot(Timer::RnrWait, Some(until)),
                None => slot(
                    Timer::Retransmit,
                    self.req.swin.deadline(&self.rto, backoff),
                ),
            }
        }
        if matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            let responses = self.rsp.wire.response_window();
            slot(
                Timer::ResponseRetransmit,
                responses.and_then(|w| w.deadline(&self.rto, backoff)),
            );
            if self.req.pacing_until > Time::ZERO && self.has_data_to_send() {
                slot(Timer::Pacing, Some(self.req.pacing_until));
            }
            slot(Timer::ResponderHole, self.responder_hole_deadline());
            slot(Timer::DelayedAck, self.delayed_ack_deadline());
        }
        if matches!(self.state, QpState::Rts | QpState::Sqd) {
            slot(Timer::ReadHole, self.read_hole_deadline());
        }
    }

    /// The table of this queue pair's deadlines, as its state has them now.
    pub(crate) fn timers(&self) -> TimerTable {
        let mut t = TimerTable::default();
        self.visit_timers(|timer, at| t.set(timer, Some(at)));
        t
    }

    /// The next deadline at which [`handle_timeout`](QueuePair::handle_timeout) must be called:
    /// the earliest of the table's.
    pub fn poll_timeout(&self) -> Option<Time> {
        let mut next: Option<Time> = None;
        self.visit_timers(|_, at| next = Some(next.map_or(at, |n| n.min(at))));
        debug_assert_eq!(next, self.timers().next(), "the table's earliest deadline");
        next
    }

    fn has_data_to_send(&self) -> bool {
        self.rsp.wire.has_data() || self.req.has_data()
    }

    /// Runs every timer that expired by `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        let due = self.timers();
        // Pacing only gates data: a deadline in the past is simply over, armed or not.
        if self.req.pacing_until <= now {
            self.req.pacing_until = Time::ZERO;
        }
        if due.expired(Timer::Controller, now) {
            self.cc.on_timer(now);
        }
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return;
        }
        if due.expired(Timer::RnrWait, now) {
            // The RNR wait is over: resend from the refused PSN.
            self.cmp.rnr_until = None;
            self.req.swin.go_back(self.cmp.rnr_psn);
            self.req.swin.restart_timer(now);
            self.req.swin.peer_alive(now);
        } else if due.expired(Timer::Retransmit, now) && !self.request_timeout(now) {
            return;
        }
        if due.expired(Timer::ResponseRetransmit, now) {
            self.response_timeout(now);
        }
        if due.expired(Timer::ResponderHole, now) {
            self.check_hole(now);
        }
        if due.expired(Timer::ReadHole, now) && matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.check_read_hole(now);
        }
        if due.expired(Timer::DelayedAck, now) {
            self.delayed_ack_timeout();
        }
    }

    /// IRN's Read responder timed out in the rPSN space: resend, or give the connection up
    /// when the requester stopped acknowledging responses.
    fn response_timeout(&mut self, now: Time) {
        let (every, limit) = (self.retry_every(), self.retry_limit());
        let Some(win) = self.rsp.wire.response_window_mut() else {
            return;
        };
        self.counters.timeouts += 1;
        let retries = win.on_timeout(now, every);
        if retries > limit {
            self.enter_error();
            return;
        }
        // Responses are resent from the oldest unacknowledged one whatever message it ends.
        win.recover_after_timeout(|una| una);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_yields_its_earliest_armed_deadline() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Retransmit, Some(Time::from_picos(300)));
        t.set(Timer::Controller, Some(Time::from_picos(200)));
        t.set(Timer::Pacing, None);
        assert_eq!(t.next(), Some(Time::from_picos(200)));
        assert!(t.expired(Timer::Controller, Time::from_picos(200)));
        assert!(!t.expired(Timer::Retransmit, Time::from_picos(299)));
        assert!(!t.expired(Timer::Pacing, Time::from_picos(1_000)));
        t.set(Timer::Controller, None);
        assert_eq!(t.next(), Some(Time::from_picos(300)));
        assert_eq!(t.get(Timer::Retransmit), Some(Time::from_picos(300)));
    }
}
