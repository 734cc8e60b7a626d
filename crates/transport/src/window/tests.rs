//! Tests of the send window: each drives a [`SendWindow`] through the ACKs, SACKs and timeouts
//! of one recovery case and checks which PSNs it resends, and when.

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

fn tcp_window(start: u32) -> SendWindow {
    SendWindow::new(Retransmission::SelectiveRepeat, p(start))
        .dup_threshold(3)
        .tcp_scoreboard()
}

fn us(n: u64) -> Time {
    Time::ZERO + Dur::from_micros(n)
}

/// RFC 6675 `IsLost` with DupThresh 3: a hole is lost once three segments above it are
/// SACKed — not at the first SACK, as IRN's selective repeat would have it — and the
/// first retransmission is the one fast retransmit of the episode.
#[test]
fn tcp_model_deems_a_hole_lost_at_three_sacks_above_it() {
    let mut w = tcp_window(0);
    sent(&mut w, 10); // 0..=9; 0 and 5 lost
    assert_eq!(w.pipe(), 10);
    w.sack(us(1), p(1));
    w.enter_recovery(false); // what a NACK does: nothing yet under the TCP model
    assert_eq!(
        w.next_retransmit(),
        None,
        "one SACK is reordering, not loss"
    );
    w.sack(us(2), p(2));
    assert_eq!(w.next_retransmit(), None);
    assert!(!w.fast_retransmit_due());
    w.sack(us(3), p(3));
    assert!(w.fast_retransmit_due());
    assert_eq!(w.next_retransmit(), Some(p(0)));
    assert_eq!(
        w.pipe(),
        10 - 3 - 1,
        "SACKed and lost segments left the pipe"
    );
    assert!(w.take_fast_retransmit());
    w.on_retransmitted(us(4), p(0), 1);
    assert!(!w.take_fast_retransmit(), "one fast retransmit per episode");
    assert_eq!(w.pipe(), 7, "the retransmission is in the pipe again");
    assert_eq!(w.next_retransmit(), None);
    // 5 is lost too, but needs three SACKs above it: 6 and 7 are two.
    w.sack(us(5), p(4));
    w.sack(us(5), p(6));
    w.sack(us(5), p(7));
    assert_eq!(w.next_retransmit(), None);
    w.sack(us(6), p(8));
    assert_eq!(w.next_retransmit(), Some(p(5)));
    assert!(
        !w.take_fast_retransmit(),
        "same episode: no second window cut"
    );
    w.on_retransmitted(us(6), p(5), 1);
    // The retransmitted 0 arrives: a partial ACK up to the still-missing 5.
    w.ack(us(30), p(5));
    assert!(!w.in_recovery(), "nothing left to resend");
    w.ack(us(40), p(10));
    assert_eq!((w.pipe(), w.in_flight()), (0, 0));
}

/// A timeout deems every segment not SACKed lost (RFC 6675 §5.1): they are resent in order
/// as the window allows, with no fast retransmit.
#[test]
fn tcp_model_timeout_marks_every_unsacked_segment_lost() {
    let mut w = tcp_window(50);
    sent(&mut w, 6); // 50..=55
    w.sack(us(1), p(52));
    w.on_timeout(us(400), None);
    w.enter_recovery(true);
    assert_eq!(w.pipe(), 0);
    assert!(!w.fast_retransmit_due());
    let mut resent = Vec::new();
    while let Some(psn) = w.next_retransmit() {
        resent.push(psn.value());
        w.on_retransmitted(us(401), psn, 1);
    }
    assert_eq!(resent, [50, 51, 53, 54, 55], "SACKed 52 is not resent");
    assert_eq!(w.pipe(), 5);
}

/// NewReno's partial-ACK rule (RFC 6582): an ACK answering a retransmission with nothing
/// SACKed above it leaves the next hole lost.
#[test]
fn tcp_model_partial_ack_marks_the_next_hole() {
    let mut w = tcp_window(0);
    sent(&mut w, 8);
    for s in [1, 2, 3] {
        w.sack(us(1), p(s));
    }
    assert_eq!(w.next_retransmit(), Some(p(0)));
    w.on_retransmitted(us(2), p(0), 1);
    // 0 arrives; 4..=7 were a lost tail: cum = 4, no SACK above.
    w.ack(us(2) + Dur::from_micros(30), p(4));
    assert_eq!(w.next_retransmit(), Some(p(4)));
}

/// What a driver may do to a TCP-model send window, for the property below.
#[derive(Debug, Clone)]
enum TcpOp {
    Send(u8),
    Sack(u16),
    Ack(u16),
    Timeout,
    Retransmit,
}

fn tcp_op() -> impl proptest::strategy::Strategy<Value = TcpOp> {
    use proptest::prelude::*;
    prop_oneof![
        (1u8..8).prop_map(TcpOp::Send),
        any::<u16>().prop_map(TcpOp::Sack),
        any::<u16>().prop_map(TcpOp::Ack),
        Just(TcpOp::Timeout),
        Just(TcpOp::Retransmit),
    ]
}

proptest::proptest! {
    /// Whatever SACKs, ACKs, timeouts and retransmissions arrive in whatever order, the
    /// scoreboard's counts stay those of its segments (pipe + lost + SACKed = in flight),
    /// and only an outstanding PSN that is neither SACKed nor already resent since it was
    /// deemed lost is ever offered for retransmission.
    #[test]
    fn tcp_scoreboard_counts_stay_exact(ops in proptest::collection::vec(tcp_op(), 1..200)) {
        let mut w = tcp_window(0xff_fff0);
        let mut t = Time::ZERO;
        for op in ops {
            t += Dur::from_micros(1);
            match op {
                TcpOp::Send(n) => sent(&mut w, u32::from(n)),
                TcpOp::Sack(k) => {
                    let psn = w.una().add(u32::from(k) % (w.in_flight() + 1));
                    w.sack(t, psn);
                }
                TcpOp::Ack(k) => {
                    let cum = w.una().add(u32::from(k) % (w.in_flight() + 1));
                    w.ack(t, cum);
                }
                TcpOp::Timeout => {
                    w.on_timeout(t, None);
                    w.enter_recovery(true);
                }
                TcpOp::Retransmit => {
                    if let Some(psn) = w.next_retransmit() {
                        proptest::prop_assert!(w.outstanding(psn));
                        let i = w.una().distance(psn) as usize;
                        let b = w.board.as_ref().expect("tcp");
                        proptest::prop_assert_eq!(b.seg[i], Seg::Lost);
                        w.take_fast_retransmit();
                        w.on_retransmitted(t, psn, 1);
                    }
                }
            }
            let b = w.board.as_ref().expect("tcp");
            let count = |f: fn(&Seg) -> bool| b.seg.iter().filter(|s| f(s)).count() as u32;
            proptest::prop_assert_eq!(b.seg.len() as u32, w.in_flight());
            proptest::prop_assert_eq!(b.pipe, count(|s| matches!(s, Seg::Sent | Seg::Retx)));
            proptest::prop_assert_eq!(b.lost, count(|s| *s == Seg::Lost));
            proptest::prop_assert_eq!(w.in_recovery(), b.lost > 0);
        }
    }
}

/// The retry budget under a short RTO counts local-ACK-timeout periods without progress,
/// but never more than the expiries seen: a driver that wakes late (a busy host) fires
/// once, and that is one retry; a peer that stays silent while the timer keeps firing
/// still exhausts the budget in `retry_cnt + 1` periods.
#[test]
fn a_late_wake_up_is_one_retry_and_a_silent_peer_still_exhausts_the_budget() {
    let period = Dur::from_micros(4_200);
    let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0));
    sent(&mut w, 4);
    // Nothing ran for 40 ms: the first expiry, 9 periods late.
    assert_eq!(w.on_timeout(us(40_000), Some(period)), 1);
    assert_eq!(w.on_timeout(us(42_000), Some(period)), 2);
    // An ACK: progress, the count starts again.
    w.ack(us(42_100), p(1));
    // A silent peer, the timer firing every 2 ms: the periods count, one per 4.2 ms.
    let mut retries = 0;
    let mut t = 42_100;
    while t < 42_100 + 9 * 4_200 {
        t += 2_000;
        retries = w.on_timeout(us(t), Some(period));
    }
    assert_eq!(
        retries, 9,
        "nine periods without progress, eighteen expiries"
    );
}

/// RFC 6298: the first sample sets SRTT = R, RTTVAR = R/2; later ones smooth with 1/8 and
/// 1/4; the timeout is SRTT + 4·RTTVAR within [min, max], doubled per expiry and back
/// after an ACK of new data (a valid sample).
#[test]
fn adaptive_rto_follows_rfc_6298() {
    let rto = RtoPolicy::Adaptive {
        min: Dur::from_micros(50),
        max: Dur::from_micros(10_000),
        initial: Dur::from_micros(300),
    };
    let mut w = tcp_window(0);
    sent(&mut w, 1);
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(300)),
        "initial before a sample"
    );
    w.ack(us(100), p(1)); // R = 100 µs
    assert_eq!(w.srtt(), Some(Dur::from_micros(100)));
    w.on_sent_new(us(100), 1);
    // SRTT 100 + 4 × 50.
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(100) + Dur::from_micros(300))
    );
    w.ack(us(120), p(2)); // R = 20: RTTVAR = 3/4·50 + 1/4·80 = 57.5; SRTT = 90
    assert_eq!(w.srtt(), Some(Dur::from_micros(90)));
    w.on_sent_new(us(120), 1);
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(120) + Dur::from_micros(320))
    );
    w.on_timeout(us(440), None);
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(440) + Dur::from_micros(640)),
        "backed off"
    );
    w.on_timeout(us(1080), None);
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(1080) + Dur::from_micros(1280))
    );
    // Floors and ceilings.
    let tight = RtoPolicy::Adaptive {
        min: Dur::from_micros(500),
        max: Dur::from_micros(1000),
        initial: Dur::from_micros(500),
    };
    assert_eq!(
        w.deadline(&tight, None),
        Some(us(1080) + Dur::from_micros(1000))
    );
    // An ACK of new data ends the backoff; its 980 µs sample (PSN 2 was never resent)
    // moves the estimate: RTTVAR 265.625, SRTT 201.25, RTO 1 263.75 µs — not 4× that.
    w.ack(us(1100), p(3));
    w.on_sent_new(us(1100), 1);
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(1100) + Dur::from_picos(1_263_750_000))
    );
}

/// Karn's algorithm with RFC 6298 §5: an ACK that covers only resent packets gives no
/// sample and keeps the backed-off timer; the first valid sample collapses it.
#[test]
fn adaptive_rto_stays_backed_off_until_a_valid_sample() {
    let rto = RtoPolicy::Adaptive {
        min: Dur::from_micros(500),
        max: Dur::from_micros(200_000),
        initial: Dur::from_micros(2_000),
    };
    let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0));
    sent(&mut w, 4); // 0..=3 at 0
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(2_000)),
        "initial, no sample yet"
    );
    w.on_timeout(us(2_000), None);
    w.enter_recovery(true);
    for psn in 0..4 {
        w.on_retransmitted(us(2_000), p(psn), 1);
    }
    // The originals' ACKs (10 ms away) come after the timeout: no sample, as every PSN
    // was resent; the timer restarts at 4 ms, still doubled.
    w.ack(us(10_000), p(2));
    assert_eq!(w.srtt(), None);
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(10_000) + Dur::from_micros(4_000))
    );
    // New data, acknowledged: a sample (R = 10 ms) and the timer collapses to
    // SRTT + 4·RTTVAR = 10 + 4 × 5 = 30 ms.
    w.ack(us(10_000), p(4));
    w.on_sent_new(us(10_000), 1);
    w.ack(us(20_000), p(5));
    assert_eq!(w.srtt(), Some(Dur::from_micros(10_000)));
    w.on_sent_new(us(20_000), 1);
    assert_eq!(
        w.deadline(&rto, None),
        Some(us(20_000) + Dur::from_micros(30_000))
    );
}

/// Per-packet ACKs (RFC 7323 Appendix G): a round trip's worth of equal samples lowers
/// RTTVAR about as much as RFC 6298's one sample per round trip would, not to nothing;
/// a round trip that grows is followed at once (SRTT per sample, RTTVAR up at once), so
/// the timer stays above it.
#[test]
fn per_packet_samples_neither_collapse_rttvar_nor_lag_a_growing_round_trip() {
    let rto = RtoPolicy::Adaptive {
        min: Dur::from_micros(500),
        max: Dur::from_micros(200_000),
        initial: Dur::from_micros(2_000),
    };
    let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0));
    // A steady window of 100 packets, each acknowledged 10 ms after it left.
    let mut next_ack = 0u32;
    for k in 0..100u64 {
        w.on_sent_new(us(k * 100), 1);
    }
    for k in 100..200u64 {
        next_ack += 1;
        w.ack(us(k * 100 - 10_000 + 10_000), p(next_ack));
        w.on_sent_new(us(k * 100), 1);
    }
    assert_eq!(w.srtt(), Some(Dur::from_micros(10_000)));
    // RTTVAR started at 5 ms; a hundred equal samples in one round trip take it down by
    // about a quarter, as one RFC 6298 sample of no deviation would (not to 5 × 0.75^100).
    let var = w.est.rttvar.as_picos();
    assert!(
        (3_500_000_000..=4_000_000_000).contains(&var),
        "RTTVAR {var} ps"
    );
    // The round trip doubles: ten samples later SRTT has moved most of the way and the
    // timer is above the new round trip.
    for k in 200..210u64 {
        next_ack += 1;
        w.ack(us(k * 100 + 10_000), p(next_ack));
        w.on_sent_new(us(k * 100 + 10_000), 1);
    }
    let srtt = w.srtt().expect("srtt").as_picos();
    assert!(srtt > 15_000_000_000, "SRTT {srtt} ps");
    let base = us(209 * 100 + 10_000);
    let deadline = w.deadline(&rto, None).expect("armed");
    assert!(
        deadline.since(base) > Dur::from_micros(20_000),
        "RTO {:?}",
        deadline.since(base)
    );
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

/// A NACK round in which the retransmission of 100 is lost too: 100..=109 out, 100 and
/// 103 lost, both resent; then new packets 110 and 111.
fn lost_retransmission_scenario(resend_lost: bool, dup: u32) -> SendWindow {
    let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(100))
        .dup_threshold(dup)
        .resend_lost_retransmissions(resend_lost);
    sent(&mut w, 10);
    for s in [101, 102, 104, 105, 106, 107, 108, 109] {
        w.sack(Time::ZERO, p(s));
        w.enter_recovery(false);
    }
    // Under a tolerance the cumulative-ACK PSN waits for `dup` SACKs beyond it; 109 is
    // nine beyond 100 and six beyond 103.
    for want in [100, 103] {
        assert_eq!(w.next_retransmit(), Some(p(want)));
        w.on_retransmitted(Time::ZERO, p(want), 1);
    }
    assert_eq!(w.next_retransmit(), None);
    sent(&mut w, 2); // 110, 111: after both retransmissions
    w
}

#[test]
fn a_lost_retransmission_is_resent_once_a_packet_sent_after_it_is_sacked() {
    let mut w = lost_retransmission_scenario(true, 1);
    // The resent 103 arrives (sent after the resent 100, which is still unanswered):
    // that alone proves the resent 100 lost — the path keeps order.
    w.sack(Time::ZERO, p(103));
    assert_eq!(w.next_retransmit(), Some(p(100)), "resent 100 lost again");
    w.on_retransmitted(Time::ZERO, p(100), 1);
    assert_eq!(w.next_retransmit(), None, "once, not per SACK");
    // A packet sent before the second resend of 100 proves nothing about it.
    w.sack(Time::ZERO, p(110));
    assert_eq!(
        w.next_retransmit(),
        None,
        "the second resend is still on its way"
    );
    // It arrives: everything up to 111 but 111 has arrived.
    w.ack(Time::ZERO, p(111));
    assert_eq!(w.next_retransmit(), None);
    assert_eq!(w.in_flight(), 1);
}

#[test]
fn a_retransmission_still_on_its_way_is_not_resent() {
    // A SACK of an original sent before the retransmissions says nothing about them, and
    // with the option off only the timer resends a lost retransmission (IRN §3.1).
    for on in [true, false] {
        let mut w = lost_retransmission_scenario(on, 1);
        w.sack(Time::ZERO, p(109));
        assert_eq!(w.next_retransmit(), None, "on: {on}");
        w.sack(Time::ZERO, p(110));
        w.sack(Time::ZERO, p(111));
        assert_eq!(
            w.next_retransmit(),
            on.then(|| p(100)),
            "on: {on}: 110 and 111 left after both resends"
        );
        if on {
            // 100 comes first; 103's resend is lost too, and goes next.
            w.on_retransmitted(Time::ZERO, p(100), 1);
            assert_eq!(w.next_retransmit(), Some(p(103)));
            w.on_retransmitted(Time::ZERO, p(103), 1);
            assert_eq!(w.next_retransmit(), None);
        }
    }
}

#[test]
fn a_reordering_tolerance_waits_for_transmissions_that_far_after_a_retransmission() {
    // Transmission serials: 100..=109 are 0..=9, resends of 100 and 103 are 10 and 11,
    // 110 and 111 are 12 and 13. With a tolerance of 3, a resend is lost once a packet
    // sent three transmissions after it is SACKed.
    let mut w = lost_retransmission_scenario(true, 3);
    w.sack(Time::ZERO, p(103)); // serial 11: one after the resent 100
    w.sack(Time::ZERO, p(110)); // serial 12
    assert_eq!(w.next_retransmit(), None, "within the tolerance");
    w.sack(Time::ZERO, p(111)); // serial 13: three after the resent 100
    assert_eq!(w.next_retransmit(), Some(p(100)));
}

#[test]
fn a_timeout_forgets_judged_retransmissions_and_resends_from_the_cumulative_ack() {
    let mut w = lost_retransmission_scenario(true, 1);
    w.sack(Time::ZERO, p(110));
    assert_eq!(w.next_retransmit(), Some(p(100)));
    w.on_timeout(us(1_000), None);
    w.enter_recovery(true);
    // The restart resends 100 first (forced), then 103 below the SACKed 110: each once.
    assert_eq!(w.next_retransmit(), Some(p(100)));
    w.on_retransmitted(us(1_000), p(100), 1);
    assert_eq!(w.next_retransmit(), Some(p(103)));
    w.on_retransmitted(us(1_000), p(103), 1);
    assert_eq!(w.next_retransmit(), None);
}

#[test]
fn a_sack_that_may_answer_an_earlier_transmission_judges_nothing() {
    // min_rtt 100 µs from 0's ACK; 1..=9 out, 1 and 2 lost (3 and 4 SACKed), resent at
    // 1 000 µs (serials 10, 11); 5 resent at 1 001 µs too (a spurious resend, serial 12).
    let mut w =
        SendWindow::new(Retransmission::SelectiveRepeat, p(0)).resend_lost_retransmissions(true);
    w.on_sent_new(Time::ZERO, 1);
    w.ack(us(100), p(1));
    sent(&mut w, 9);
    w.sack(us(150), p(3));
    w.sack(us(150), p(4));
    w.enter_recovery(false);
    for q in [1, 2] {
        assert_eq!(w.next_retransmit(), Some(p(q)));
        w.on_retransmitted(us(1_000), p(q), 1);
    }
    w.on_retransmitted(us(1_001), p(5), 1);
    // 5's SACK 9 µs after its resend answers the original: no verdict on 1 and 2.
    w.sack(us(1_010), p(5));
    assert_eq!(w.next_retransmit(), None);
    // Half a round trip later a SACK of 5 would be its resend's, sent after 1's and 2's.
    w.sack(us(1_060), p(5));
    assert_eq!(w.next_retransmit(), Some(p(1)));
}

#[test]
fn a_go_back_in_recovery_resends_each_psn_once() {
    // Selective repeat in recovery with holes 0 and 2 below the SACKed 3; an RNR NAK's
    // go-back from 0 resends 0..=5 in order but the SACKed 1 and 3 (the receiver holds
    // them), and the scan does not resend them again.
    for sweep in [false, true] {
        let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0))
            .resend_lost_retransmissions(true)
            .timeout_resends_unsacked(sweep);
        sent(&mut w, 6);
        w.sack(Time::ZERO, p(1));
        w.sack(Time::ZERO, p(3));
        w.on_timeout(us(1_000), None);
        w.enter_recovery(true);
        assert_eq!(w.next_retransmit(), Some(p(0)));
        w.on_retransmitted(us(1_000), p(0), 1);
        w.go_back(p(0));
        let mut resent = vec![];
        while let Some(q) = w.next_retransmit() {
            resent.push(q.value());
            w.on_retransmitted(us(1_100), q, 1);
        }
        assert_eq!(resent, [0, 2, 4, 5], "sweep {sweep}");
    }
}

#[test]
fn go_backs_that_nothing_sacks_keep_the_judging_queue_bounded() {
    // A receiver that refuses everything without a SACK (no receive posted) while the
    // requester goes back after each RNR wait: the queue of resends to judge stays within
    // twice the window.
    let mut w =
        SendWindow::new(Retransmission::SelectiveRepeat, p(0)).resend_lost_retransmissions(true);
    sent(&mut w, 50);
    for round in 0..100u64 {
        w.go_back(p(0));
        while let Some(q) = w.next_retransmit() {
            w.on_retransmitted(us(round * 1_000), q, 1);
        }
    }
    let r = w.relost.as_ref().expect("on");
    assert!(r.resent.len() <= 2 * 50 + 1, "{} entries", r.resent.len());
}

#[test]
fn a_timeout_can_resend_every_psn_not_sacked() {
    // 0..=9 out; 3 and 7 arrived out of order (SACKed), nothing else came back, and no
    // SACK lies above 8 and 9 (the tail was lost whole, or refused without a SACK).
    for sweep in [false, true] {
        let mut w =
            SendWindow::new(Retransmission::SelectiveRepeat, p(0)).timeout_resends_unsacked(sweep);
        sent(&mut w, 10);
        w.sack(Time::ZERO, p(3));
        w.sack(Time::ZERO, p(7));
        w.on_timeout(us(1_000), None);
        w.enter_recovery(true);
        // IRN §3.1 first, either way: the cumulative-ACK PSN, then the holes below the
        // highest SACK.
        let mut resent = vec![];
        while let Some(q) = w.next_retransmit() {
            resent.push(q.value());
            w.on_retransmitted(us(1_000), q, 1);
        }
        assert_eq!(resent, [0, 1, 2, 4, 5, 6]);
        // The answer to the retransmissions, a round trip later (the smallest round trip
        // sampled from 7's original is 3 ms), acknowledges only what was resent or
        // SACKed: the loss was real, and with the sweep 8 and 9 go out now, once; without
        // it they wait for a SACK above them.
        w.ack(us(3_000), p(8));
        let mut resent = vec![];
        while let Some(q) = w.next_retransmit() {
            resent.push(q.value());
            w.on_retransmitted(us(3_000), q, 1);
        }
        if sweep {
            assert_eq!(resent, [8, 9], "every PSN not SACKed, once");
        } else {
            // The partial ACK answering a retransmission with nothing SACKed above
            // (NewReno's rule) makes 8 lost; 9 waits.
            assert_eq!(resent, [8]);
        }
        // A NACK for a later packet: without the sweep, the SACK above 9 is what finally
        // makes it lost; with it, it went out already, once.
        sent(&mut w, 2); // 10, 11
        w.sack(us(3_100), p(10));
        w.enter_recovery(false);
        assert_eq!(w.next_retransmit(), (!sweep).then(|| p(9)));
        assert!(w.in_recovery());
    }
}

#[test]
fn a_span_counts_only_unsacked_psns_against_the_cap_within_span_caps() {
    // Cap 4: without a span a hole pins the window; with span 2, SACKed PSNs make room
    // for new ones until `next − una` reaches 8.
    for span in [None, Some(2)] {
        let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0)).bdp_fc_span(span);
        sent(&mut w, 4);
        assert!(!w.may_send_new(Some(4)));
        w.sack(us(10), p(1));
        w.sack(us(10), p(2));
        w.sack(us(10), p(2)); // counted once
        assert_eq!(w.may_send_new(Some(4)), span.is_some(), "{span:?}");
        if span.is_none() {
            continue;
        }
        sent(&mut w, 2); // 4, 5: four unSACKed (0, 3, 4, 5)
        assert!(!w.may_send_new(Some(4)));
        for q in 3..6 {
            w.sack(us(20), p(q));
        }
        sent(&mut w, 2); // 6, 7: next − una = 8
        assert!(!w.may_send_new(Some(4)), "held at span × cap");
        // The hole fills: 0..=5 acknowledged, 6 and 7 in flight.
        w.ack(us(30), p(6));
        assert_eq!(w.sacked_n, 0);
        assert!(w.may_send_new(Some(4)));
        // Without a cap there is nothing to hold to.
        assert!(w.may_send_new(None));
    }
}

#[test]
fn a_spurious_timeout_resends_only_the_cumulative_ack_psn() {
    // 0..=9 out, their ACKs late (a receiver descheduled): the timeout resends 0, then the
    // late ACKs acknowledge original transmissions, and nothing else is resent (F-RTO).
    let mut w =
        SendWindow::new(Retransmission::SelectiveRepeat, p(0)).timeout_resends_unsacked(true);
    sent(&mut w, 10);
    w.ack(us(10), p(1)); // a first RTT sample
    w.on_timeout(us(1_000), None);
    w.enter_recovery(true);
    assert_eq!(w.next_retransmit(), Some(p(1)));
    w.on_retransmitted(us(1_000), p(1), 1);
    assert_eq!(w.next_retransmit(), None);
    w.ack(us(1_050), p(6));
    assert_eq!(
        w.next_retransmit(),
        None,
        "no sweep after originals were acknowledged"
    );
    w.ack(us(1_060), p(10));
    assert!(!w.in_recovery());
    // The timeout of a window that really was lost whole: the first answer acknowledges
    // just the retransmission, and the rest goes out at once.
    sent(&mut w, 5); // 10..=14
    w.on_timeout(us(3_000), None);
    w.enter_recovery(true);
    assert_eq!(w.next_retransmit(), Some(p(10)));
    w.on_retransmitted(us(3_000), p(10), 1);
    assert_eq!(w.next_retransmit(), None);
    w.ack(us(3_100), p(11));
    let mut resent = vec![];
    while let Some(q) = w.next_retransmit() {
        resent.push(q.value());
        w.on_retransmitted(us(3_100), q, 1);
    }
    assert_eq!(resent, [11, 12, 13, 14]);
}

/// The smallest round trip was sampled under a standing queue (6 ms, 0's ACK), which has
/// drained since; 1..=9 out (with a reordering tolerance of `dup` PSNs). The timeout at 20 ms
/// resends 1, whose answer comes 0.4 ms later — sooner than half that smallest sample, so it
/// may answer a delayed original: undecided.
fn timeout_answered_too_soon_to_tell(dup: u32) -> SendWindow {
    let mut w = SendWindow::new(Retransmission::SelectiveRepeat, p(0))
        .timeout_resends_unsacked(true)
        .dup_threshold(dup);
    w.on_sent_new(Time::ZERO, 1);
    w.ack(us(6_000), p(1));
    sent(&mut w, 9); // 1..=9
    w.on_timeout(us(20_000), None);
    w.enter_recovery(true);
    assert_eq!(w.next_retransmit(), Some(p(1)));
    w.on_retransmitted(us(20_000), p(1), 1);
    assert_eq!(w.next_retransmit(), None);
    let acked = w.ack(us(20_400), p(2));
    assert_eq!(
        (acked.psns, acked.spurious_timeout, acked.undecided_timeout),
        (1, false, true)
    );
    assert_eq!(w.next_retransmit(), None, "no sweep on a guess");
    w
}

fn resend_all(w: &mut SendWindow, at: u64) -> Vec<u32> {
    let mut resent = vec![];
    while let Some(q) = w.next_retransmit() {
        resent.push(q.value());
        w.on_retransmitted(us(at), q, 1);
    }
    resent
}

/// A queue pair whose window is closed has nothing new to send after such an
/// answer, and waited for its next (backed-off) timeout for each PSN of a lost window. Its
/// probe of the tail decides: past the holes, the probe's SACK shows the loss real and the
/// held sweep resends every PSN not SACKed — all of them with a reordering tolerance too,
/// under which the SACK rule alone would leave the last `dup − 1` below the probe waiting.
#[test]
fn a_timeout_answer_too_soon_to_judge_probes_the_tail_and_its_sack_starts_the_sweep() {
    for dup in [1, 4] {
        let mut w = timeout_answered_too_soon_to_tell(dup);
        w.probe_held_timeout();
        // The highest PSN goes again at once, and only it; a second call probes no more.
        assert_eq!(w.next_retransmit(), Some(p(9)), "dup {dup}");
        w.on_retransmitted(us(20_400), p(9), 1);
        w.probe_held_timeout();
        assert_eq!(w.next_retransmit(), None, "dup {dup}");
        // It arrives past the holes (the window was lost): 2..=8 are resent, each once.
        w.sack(us(20_800), p(9));
        w.enter_recovery(false);
        assert_eq!(
            resend_all(&mut w, 20_800),
            [2, 3, 4, 5, 6, 7, 8],
            "dup {dup}"
        );
        // Their answers end recovery without another probe or resend.
        w.ack(us(21_000), p(5));
        assert_eq!(w.next_retransmit(), None, "dup {dup}");
        w.ack(us(21_100), p(10));
        assert!(!w.in_recovery(), "dup {dup}");
    }
}

/// The window was only delayed: after the probe, its originals are acknowledged in turn, and
/// nothing more is resent — no sweep, no second probe (the ACK of originals judges the
/// timeout spurious, but the tail went already), and no next PSN by the partial-ACK rule.
#[test]
fn a_timeout_answer_too_soon_to_judge_then_delayed_originals_resend_nothing_more() {
    let mut w = timeout_answered_too_soon_to_tell(1);
    w.probe_held_timeout();
    assert_eq!(w.next_retransmit(), Some(p(9)));
    w.on_retransmitted(us(20_400), p(9), 1);
    let acked = w.ack(us(23_500), p(4));
    assert!(!acked.spurious_timeout && !acked.undecided_timeout);
    assert_eq!(w.next_retransmit(), None);
    w.ack(us(23_600), p(7));
    assert_eq!(w.next_retransmit(), None);
    w.ack(us(23_700), p(10));
    assert!(!w.in_recovery());
}

/// New data went out after the timeout: no probe. Its SACK while the holes stay open shows
/// the loss real (RFC 5682 §2 step 3a), and the held sweep resends every PSN not SACKed —
/// under a reordering tolerance of 4, where the SACK rule alone would resend only 2..=6.
#[test]
fn after_an_undecided_answer_a_sack_of_new_data_starts_the_held_sweep() {
    let mut w = timeout_answered_too_soon_to_tell(4);
    sent(&mut w, 1); // 10, new data
    w.probe_held_timeout();
    assert_eq!(w.next_retransmit(), None, "new data decides: no probe");
    w.sack(us(20_800), p(10));
    w.enter_recovery(false);
    assert_eq!(resend_all(&mut w, 20_800), [2, 3, 4, 5, 6, 7, 8, 9]);
    // A SACK of a PSN sent before the timeout does not start it: after another timeout, the
    // SACK of 15, an original, resends nothing (11 went with the timeout; 12 is within the
    // tolerance), where the sweep would resend 12..=14, 16 and 17.
    w.ack(us(21_000), p(11));
    sent(&mut w, 7); // 11..=17
    w.on_timeout(us(40_000), None);
    w.enter_recovery(true);
    assert_eq!(resend_all(&mut w, 40_000), [11]);
    w.sack(us(40_100), p(15));
    w.enter_recovery(false);
    assert_eq!(resend_all(&mut w, 40_100), Vec::<u32>::new());
}

/// 0..=9 out. 0 is lost, 1..=5 arrive but the NACK saying so is lost, 6..=9 are lost.
/// The timeout at 1 ms resends 0, which fills the hole: ACK 6 at 1.1 ms covers originals
/// 1..=5, and the timeout is judged spurious.
fn timeout_judged_spurious_over_a_lost_tail() -> SendWindow {
    let mut w =
        SendWindow::new(Retransmission::SelectiveRepeat, p(0)).timeout_resends_unsacked(true);
    sent(&mut w, 10);
    w.on_timeout(us(1_000), None);
    w.enter_recovery(true);
    assert_eq!(w.next_retransmit(), Some(p(0)));
    w.on_retransmitted(us(1_000), p(0), 1);
    assert!(w.ack(us(1_100), p(6)).spurious_timeout);
    w
}

#[test]
fn a_timeout_judged_spurious_with_nothing_new_to_send_probes_the_tail() {
    let mut w = timeout_judged_spurious_over_a_lost_tail();
    assert_eq!(w.next_retransmit(), None, "nothing swept");
    // Nothing new to send: the highest PSN goes again, and only it.
    w.probe_tail();
    assert_eq!(w.next_retransmit(), Some(p(9)));
    w.on_retransmitted(us(1_100), p(9), 1);
    assert_eq!(w.next_retransmit(), None);
    // It arrives beyond the lost tail: the NACK names 6..=8, which are resent (the probe
    // left the cursor where it was).
    w.sack(us(1_200), p(9));
    w.enter_recovery(false);
    let mut resent = vec![];
    while let Some(q) = w.next_retransmit() {
        resent.push(q.value());
        w.on_retransmitted(us(1_200), q, 1);
    }
    assert_eq!(resent, [6, 7, 8]);
    w.ack(us(1_300), p(10));
    assert!(!w.in_recovery());
    // A probe of a PSN selectively acknowledged meanwhile is not sent.
    sent(&mut w, 3); // 10..=12
    w.on_timeout(us(3_000), None);
    w.enter_recovery(true);
    assert_eq!(w.next_retransmit(), Some(p(10)));
    w.on_retransmitted(us(3_000), p(10), 1);
    assert!(w.ack(us(3_100), p(12)).spurious_timeout);
    w.probe_tail();
    w.sack(us(3_100), p(12));
    assert_eq!(w.next_retransmit(), None);
}

#[test]
fn a_probe_handed_out_but_not_sent_leaves_later_retransmissions_their_cursor() {
    let mut w = timeout_judged_spurious_over_a_lost_tail();
    w.probe_tail();
    // The caller takes the probe and does not send it (say, a window that closed).
    assert_eq!(w.next_retransmit(), Some(p(9)));
    assert_eq!(w.next_retransmit(), None, "a probe is handed out once");
    // A SACK of 8: 6 and 7 are resent in turn, each moving the cursor on.
    w.sack(us(1_200), p(8));
    let mut resent = vec![];
    while let Some(q) = w.next_retransmit() {
        resent.push(q.value());
        w.on_retransmitted(us(1_200), q, 1);
    }
    assert_eq!(resent, [6, 7]);
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
    assert_eq!(w.deadline(&rto, None), None);
    sent(&mut w, 3);
    assert_eq!(
        w.deadline(&rto, None),
        Some(Time::ZERO + Dur::from_micros(100))
    );
    sent(&mut w, 1);
    assert_eq!(
        w.deadline(&rto, None),
        Some(Time::ZERO + Dur::from_micros(320))
    );
    let t = Time::ZERO + Dur::from_micros(7);
    w.ack(t, p(2));
    assert_eq!(w.deadline(&rto, None), Some(t + Dur::from_micros(100)));
}
