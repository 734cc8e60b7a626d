//! Staying up after the last completion to acknowledge the peer's resends.
//!
//! A reliable-connection responder acknowledges a request as it executes it, and the
//! requester completes the work request only when that ACK arrives (IBTA vol. 1 §9.7.5.1).
//! The last ACK of a run can be lost like any packet; the peer then resends its last request
//! until its retries run out, and an end that exited as soon as its own work completed is not
//! there to answer, so the peer's last work request never completes (`ib_write_lat`, whose
//! only goodbye is closing its TCP socket, waits for it forever against rxe). The end that
//! may have sent the last ACK therefore stays up until its queue pair has received nothing
//! for a quiet period, as TCP's TIME-WAIT keeps a closed connection's state to acknowledge a
//! retransmitted FIN (RFC 9293 §3.6.1).

use std::time::{Duration, Instant};

/// How long the queue pair must have received nothing: three of rxe's (and perftest's)
/// default retry periods, 4.096 µs × 2^14 ≈ 67 ms each.
pub(crate) const QUIET: Duration = Duration::from_millis(250);

/// The longest an end lingers, however busy its peer keeps it.
pub(crate) const MAX: Duration = Duration::from_secs(3);

/// Returns once `rx_packets` (a queue pair's count of packets received) has not moved for
/// `quiet`, or after `max` in all.
pub(crate) fn linger(rx_packets: impl Fn() -> u64, quiet: Duration, max: Duration) {
    let start = Instant::now();
    let mut seen = rx_packets();
    let mut since = start;
    let step = (quiet.min(max) / 10).max(Duration::from_millis(1));
    loop {
        let now = Instant::now();
        if now.duration_since(since) >= quiet || now.duration_since(start) >= max {
            return;
        }
        std::thread::sleep(step);
        let n = rx_packets();
        if n != seen {
            seen = n;
            since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn waits_a_whole_quiet_period_after_the_last_packet() {
        // Packets keep arriving for the first 20 polls: the quiet period counts from the last.
        let polls = Cell::new(0u64);
        let last_arrival = Cell::new(Instant::now());
        let quiet = Duration::from_millis(30);
        linger(
            || {
                polls.set(polls.get() + 1);
                if polls.get() <= 20 {
                    last_arrival.set(Instant::now());
                }
                polls.get().min(20)
            },
            quiet,
            Duration::from_secs(600),
        );
        assert!(polls.get() > 20, "returned while packets arrived");
        assert!(last_arrival.get().elapsed() >= quiet);
    }

    #[test]
    fn gives_up_after_max_however_busy_the_peer() {
        let polls = Cell::new(0u64);
        let start = Instant::now();
        linger(
            || {
                polls.set(polls.get() + 1);
                polls.get()
            },
            Duration::from_secs(600),
            Duration::from_millis(50),
        );
        assert!(polls.get() >= 2);
        assert!(start.elapsed() < Duration::from_secs(600));
    }
}
