//! Scripted, packet-by-packet tests of the queue pair (smoltcp style): exact packets in, exact
//! packets out.

use irn_transport::pair::{connect, LinkConfig, Pair, PairConfig};
use irn_transport::{
    Access, ByteMemory, Dur, Memory, QpAttr, QpConfig, QpState, QueuePair, RecoveryConfig, RecvWr,
    Remote, RtoPolicy, SendOp, SendWr, Sge, Time, Transmit, WcStatus,
};
use irn_wire::{
    AethRepr, AtomicEthRepr, BthRepr, CreditCode, Ecn, IbRepr, IrnEthRepr, NakCode, Opcode, Psn,
    RethRepr, RnrTimer, Syndrome, DEFAULT_PKEY, TVER_IRN, TVER_STANDARD,
};

const T0: Time = Time::ZERO;
const SQ_PSN: u32 = 100;
const RQ_PSN: u32 = 500;

fn qp(recovery: RecoveryConfig) -> QueuePair {
    let mut q = QueuePair::new(
        T0,
        QpConfig {
            qpn: 0x11,
            recovery,
            ..QpConfig::default()
        },
    )
    .expect("a valid queue-pair configuration");
    connect(
        &mut q,
        &QpAttr::default(),
        0x22,
        Psn::new(SQ_PSN),
        Psn::new(RQ_PSN),
    );
    q
}

fn drain(q: &mut QueuePair, now: Time, mem: &ByteMemory) -> Vec<IbRepr> {
    let mut buf = Vec::new();
    std::iter::from_fn(|| q.poll_transmit(now, mem, &mut buf).map(|t| t.ib)).collect()
}

fn bth(opcode: Opcode, psn: u32, irn: bool) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        tver: if irn { TVER_IRN } else { TVER_STANDARD },
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: 0x11,
        ack_req: true,
        psn: Psn::new(psn),
    }
}

fn ack(psn: u32, syndrome: Syndrome, sack: Option<u32>, irn: bool) -> IbRepr {
    let mut ib = IbRepr::new(bth(Opcode::RC_ACKNOWLEDGE, psn, irn));
    ib.aeth = Some(AethRepr { syndrome, msn: 0 });
    if irn {
        ib.irn = Some(IrnEthRepr {
            sack_psn: sack.map(Psn::new),
            ..IrnEthRepr::default()
        });
    }
    ib
}

const NAK_SEQ: Syndrome = Syndrome::Nak(NakCode::PsnSequenceError);
const ACK: Syndrome = Syndrome::Ack(CreditCode::INVALID);

/// A memory with a source buffer of `len` bytes and a remotely writable target.
fn memory(len: usize) -> (ByteMemory, Sge, Remote, u64) {
    let mut m = ByteMemory::new(9);
    let src = m.alloc_with(&vec![0xab; len]);
    let k = m
        .register(src, len as u64, Access::LOCAL_WRITE)
        .expect("register");
    let dst = m.alloc(len);
    let dk = m.register(dst, len as u64, Access::ALL).expect("register");
    (
        m,
        Sge {
            addr: src,
            len: len as u32,
            lkey: k.lkey,
        },
        Remote {
            addr: dst,
            rkey: dk.rkey,
        },
        dst,
    )
}

fn write_wr(sge: Sge, remote: Remote) -> SendWr {
    SendWr {
        wr_id: 1,
        op: SendOp::Write(remote),
        sg_list: irn_transport::sgl![sge],
        signaled: true,
        fence: false,
        solicited: false,
    }
}

/// Hands `q` a packet without payload or ECN mark at `now`.
fn give(q: &mut QueuePair, mem: &mut ByteMemory, now: Time, ib: &IbRepr) {
    q.handle_packet(now, ib, &[], Ecn::NotEct, mem);
}

fn psns(pkts: &[IbRepr]) -> Vec<u32> {
    pkts.iter().map(|p| p.bth.psn.value() - SQ_PSN).collect()
}

// ---- Building packets in the driver's slot -----------------------------------------------------

/// Every packet a queue pair sends, built into one reused [`Transmit::SLOT`]
/// (`poll_transmit_into`, the drivers' way), is the packet `poll_transmit` returns fresh:
/// nothing an earlier packet left in the slot (an AETH, a RETH, an atomic header, an ECN
/// codepoint, a payload) shows in a later one. Both queue pairs see the same inputs: a peer's
/// Write out of order (a NAK or IRN's NACK, then ACKs), then a Write of three packets, a Read,
/// a fetch-and-add and a Send of their own.
#[test]
fn a_packet_built_in_a_reused_slot_is_the_packet_built_fresh() {
    for recovery in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let irn = recovery.wire == irn_transport::Wire::Irn;
        let run = |into: bool| {
            let mut q = qp(recovery);
            let (mut mem, sge, remote, _) = memory(4096);
            let sge = Sge { len: 3000, ..sge };
            let (_, _, peer_remote, _) = memory(4096);
            let data = vec![7u8; 1024];
            for i in [0u32, 2, 3, 1] {
                let p = write_pkt(i, 1024, peer_remote, 4096, irn);
                let p = IbRepr {
                    reth: p.reth.map(|r| RethRepr {
                        rkey: remote.rkey,
                        va: remote.addr,
                        ..r
                    }),
                    ..p
                };
                q.handle_packet(T0, &p, &data, Ecn::NotEct, &mut mem);
            }
            let ops = [
                SendOp::Write(remote),
                SendOp::Read(Remote {
                    addr: remote.addr,
                    rkey: remote.rkey,
                }),
                SendOp::FetchAdd { remote, add: 5 },
                SendOp::Send,
            ];
            for (i, op) in ops.into_iter().enumerate() {
                let sge = Sge {
                    len: [sge.len, sge.len, 8, 100][i],
                    ..sge
                };
                q.post_send(SendWr {
                    wr_id: i as u64,
                    op,
                    sg_list: irn_transport::sgl![sge],
                    signaled: true,
                    fence: false,
                    solicited: false,
                })
                .expect("post");
            }
            let mut buf = Vec::new();
            let mut slot = Transmit::SLOT;
            let mut sent = Vec::new();
            loop {
                let t = if into {
                    q.poll_transmit_into(T0, &mem, &mut buf, &mut slot)
                        .then_some(slot)
                } else {
                    q.poll_transmit(T0, &mem, &mut buf)
                };
                let Some(t) = t else { break };
                sent.push((t, buf.clone()));
            }
            sent
        };
        let fresh = run(false);

        let reused = run(true);
        assert_eq!(reused, fresh, "irn {irn}");
        // The sequence does put a packet without each header after one with it.
        let after = |has: fn(&IbRepr) -> bool| {
            fresh
                .windows(2)
                .any(|w| has(&w[0].0.ib) && !has(&w[1].0.ib))
        };
        assert!(
            after(|ib| ib.aeth.is_some()),
            "irn {irn}: an AETH, then none"
        );
        assert!(
            after(|ib| ib.reth.is_some()),
            "irn {irn}: a RETH, then none"
        );
        assert!(
            after(|ib| ib.atomic_eth.is_some()),
            "irn {irn}: an atomic header, then none"
        );
        assert!(
            fresh.windows(2).any(|w| w[0].0.ecn != w[1].0.ecn),
            "irn {irn}: ECT(0) and not-ECT"
        );
        assert!(
            fresh
                .windows(2)
                .any(|w| !w[0].1.is_empty() && w[1].1.is_empty()),
            "irn {irn}: a payload, then none"
        );
    }
}

// ---- IRN sender (T5) -------------------------------------------------------------------------

#[test]
fn irn_sender_retransmits_the_cumulative_ack_first_and_then_only_sacked_holes() {
    let mut q = qp(RecoveryConfig::irn());
    let (mem, sge, remote, _) = memory(10 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    let sent = drain(&mut q, T0, &mem);
    assert_eq!(psns(&sent), (0..10).collect::<Vec<_>>());
    assert!(
        sent.iter().all(|p| p.reth.is_some()),
        "RETH on every packet"
    );
    // Packets 1 and 4 lost. Packet 2 arrives: NACK(expected 1, sack 2).
    let mut m = mem.clone();
    give(&mut q, &mut m, T0, &ack(SQ_PSN, ACK, Some(SQ_PSN), true));
    give(
        &mut q,
        &mut m,
        T0,
        &ack(SQ_PSN + 1, NAK_SEQ, Some(SQ_PSN + 2), true),
    );
    assert_eq!(
        psns(&drain(&mut q, T0, &mem)),
        vec![1],
        "cumulative ACK PSN first"
    );
    // 3 arrives: NACK(1, sack 3): nothing new is lost (2 and 3 sacked, 1 just resent).
    give(
        &mut q,
        &mut m,
        T0,
        &ack(SQ_PSN + 1, NAK_SEQ, Some(SQ_PSN + 3), true),
    );
    assert_eq!(psns(&drain(&mut q, T0, &mem)), Vec::<u32>::new());
    // 5 arrives: 4 is now lost (a higher PSN was selectively acked).
    give(
        &mut q,
        &mut m,
        T0,
        &ack(SQ_PSN + 1, NAK_SEQ, Some(SQ_PSN + 5), true),
    );
    assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![4]);
    assert_eq!(q.counters().retransmitted, 2);
    assert_eq!(q.counters().nacks_received, 3);
    // Everything through 9 acknowledged: recovery over, WQE complete.
    give(
        &mut q,
        &mut m,
        T0,
        &ack(SQ_PSN + 9, ACK, Some(SQ_PSN + 9), true),
    );
    assert_eq!(q.in_flight(), 0);
    let c = q.poll_completion().expect("completion");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    assert!(q.poll_completion().is_none(), "exactly one completion");
}

#[test]
fn irn_sends_new_packets_in_recovery_when_nothing_is_lost_and_recovery_ends_past_the_recovery_sequence(
) {
    let mut cfg = RecoveryConfig::irn();
    cfg.bdp_cap = Some(4);
    let mut q = qp(cfg);
    let (mut mem, sge, remote, _) = memory(8 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    assert_eq!(
        psns(&drain(&mut q, T0, &mem)),
        vec![0, 1, 2, 3],
        "BDP cap of 4"
    );
    // 0 lost; 1 arrives: NACK(0, sack 1). Recovery sequence = 3.
    give(
        &mut q,
        &mut mem,
        T0,
        &ack(SQ_PSN, NAK_SEQ, Some(SQ_PSN + 1), true),
    );
    assert_eq!(
        psns(&drain(&mut q, T0, &mem)),
        vec![0],
        "BDP-FC: cum 0 + cap 4 = 3 max"
    );
    // The retransmitted 0 arrives with 1..2 already there: cum = 3 (ACK of 2).
    give(
        &mut q,
        &mut mem,
        T0,
        &ack(SQ_PSN + 2, ACK, Some(SQ_PSN), true),
    );
    // Still in recovery (cum 3 is not past 3). A partial ACK with no selective ACK above it:
    // 3 left before the retransmission of 0 on the same path and is not acknowledged with
    // it, so it is lost (the partial-ACK rule) and goes first; then new packets 4, 5, 6.
    assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![3, 4, 5, 6]);
    // A NACK now (4 lost, 5 arrived) does not restart recovery: the retransmission cursor
    // continues past 3 and 4 (not sacked, below sack 5) is resent; 6 is above every SACK.
    give(
        &mut q,
        &mut mem,
        T0,
        &ack(SQ_PSN + 3, NAK_SEQ, Some(SQ_PSN + 5), true),
    );
    assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![4]);
}

/// A driver's hold (the UDP runtime's device-wide in-flight budget) keeps new request
/// packets back and nothing else: the queue pair still resends what is lost and still answers
/// its peer, says it has new packets ready, and sends them when the hold is lifted.
#[test]
fn a_held_queue_pair_still_retransmits_and_answers_but_starts_nothing_new() {
    let mut q = qp(RecoveryConfig::irn());
    let (mem, sge, remote, _) = memory(10 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    let mut buf = Vec::new();
    let first: Vec<u32> = (0..4)
        .map(|_| q.poll_transmit(T0, &mem, &mut buf).expect("packet").ib)
        .map(|p| p.bth.psn.value() - SQ_PSN)
        .collect();
    assert_eq!(first, vec![0, 1, 2, 3]);
    q.hold_new_requests(true);
    assert!(q.new_request_ready(), "six packets wait for the hold alone");
    assert!(!q.may_transmit());
    assert!(drain(&mut q, T0, &mem).is_empty(), "nothing new while held");
    // Packet 0 lost, 1 arrived: the NACK's retransmission still goes.
    let mut m = mem.clone();
    give(
        &mut q,
        &mut m,
        T0,
        &ack(SQ_PSN, NAK_SEQ, Some(SQ_PSN + 1), true),
    );
    assert_eq!(
        psns(&drain(&mut q, T0, &mem)),
        vec![0],
        "the hole, not PSN 4"
    );
    // The peer's Write to this queue pair is still acknowledged.
    let incoming = write_pkt(0, 1024, remote, 1024, true);
    q.handle_packet(T0, &incoming, &[0x5a; 1024], Ecn::NotEct, &mut m);
    let out = drain(&mut q, T0, &mem);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].bth.opcode, Opcode::RC_ACKNOWLEDGE);
    // Lifted: the rest of the message.
    q.hold_new_requests(false);
    assert!(q.may_transmit());
    assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![4, 5, 6, 7, 8, 9]);
    assert!(!q.new_request_ready());
}

/// An IRN queue pair (BDP cap 8) that has sent PSNs 0..7 of an 8 KiB Write at T0.
fn irn_eight_packets_sent() -> (QueuePair, ByteMemory) {
    let mut cfg = RecoveryConfig::irn();
    cfg.bdp_cap = Some(8);
    let mut q = qp(cfg);
    let (mem, sge, remote, _) = memory(8 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    assert_eq!(psns(&drain(&mut q, T0, &mem)), (0..8).collect::<Vec<_>>());
    (q, mem)
}

/// `size_for_path` re-sizes BDP-FC before the queue pair connects (a verbs consumer learns
/// the path MTU at INIT → RTR) and is refused once it has: the cap then bounds the packets in
/// flight, which `peak_in_flight` reports.
#[test]
fn the_bdp_cap_is_sized_before_connecting_and_bounds_the_packets_in_flight() {
    let mut q = QueuePair::new(
        T0,
        QpConfig {
            qpn: 0x11,
            recovery: RecoveryConfig::irn(),
            ..QpConfig::default()
        },
    )
    .expect("config");
    let cc = q.config().cc.clone();
    // A cap that cannot mean anything is refused and changes nothing.
    assert!(q.size_for_path(T0, Some(0), None, cc.clone()).is_err());
    assert_eq!(q.config().recovery.bdp_cap, RecoveryConfig::irn().bdp_cap);
    q.size_for_path(T0, Some(5), None, cc.clone())
        .expect("in RESET");
    connect(
        &mut q,
        &QpAttr::default(),
        0x22,
        Psn::new(SQ_PSN),
        Psn::new(RQ_PSN),
    );
    assert!(
        q.size_for_path(T0, Some(50), None, cc).is_err(),
        "connected"
    );
    let (mem, sge, remote, _) = memory(8 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    assert_eq!(psns(&drain(&mut q, T0, &mem)), (0..5).collect::<Vec<_>>());
    assert_eq!((q.in_flight(), q.counters().peak_in_flight), (5, 5));
}

#[test]
fn time_spent_in_rnr_waits_does_not_count_against_the_retry_budget() {
    // IRN counts retries per local ACK timeout without progress (timeout 14: 67 ms; retry_cnt
    // 7: give up after 537 ms). Two RNR NAKs of 327 ms each keep the request waiting 655 ms
    // with nothing acknowledged; the responder was answering all along, so the next RTO is a
    // first retry, not RETRY_EXC_ERR.
    let mut q = qp(RecoveryConfig::irn());
    let (mut mem, sge, remote, _) = memory(1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![0]);
    let mut t = T0;
    for _ in 0..2 {
        t += Dur::from_micros(10);
        let mut rnr = ack(SQ_PSN, Syndrome::RnrNak(RnrTimer(0x1e)), None, true);
        rnr.aeth = Some(AethRepr {
            syndrome: Syndrome::RnrNak(RnrTimer(0x1e)),
            msn: 0,
        });
        give(&mut q, &mut mem, t, &rnr);
        t = q.poll_timeout().expect("the RNR wait");
        q.handle_timeout(t);
        assert_eq!(
            psns(&drain(&mut q, t, &mem)),
            vec![0],
            "resent after the wait"
        );
    }
    assert!(t.since(T0) > Dur::from_millis(600));
    let rto = q.poll_timeout().expect("the retransmission timer");
    q.handle_timeout(rto);
    assert_eq!(
        psns(&drain(&mut q, rto, &mem)),
        vec![0],
        "an ordinary retry"
    );
    assert!(q.poll_completion().is_none(), "no RETRY_EXC_ERR");
}

/// The IRN ACK of cumulative `psn` (relative to `SQ_PSN`) arrives at `t`; what the queue
/// pair sends in reply.
fn ack_at(q: &mut QueuePair, mem: &mut ByteMemory, t: Time, psn: u32) -> Vec<u32> {
    q.handle_packet(
        t,
        &ack(SQ_PSN + psn, ACK, None, true),
        &[],
        Ecn::NotEct,
        mem,
    );
    psns(&drain(q, t, mem))
}

/// After the timeout at `t` resent `first`, each retransmission's ACK arrives `rtt` after it
/// and releases the next hole at once, through PSN 7; one timeout in all.
fn each_partial_ack_resends_the_next_hole(
    q: &mut QueuePair,
    mem: &mut ByteMemory,
    mut t: Time,
    rtt: Dur,
    first: u32,
) {
    for k in first + 1..8 {
        t += rtt;
        assert_eq!(
            ack_at(q, mem, t, k - 1),
            vec![k],
            "after the ACK of {}",
            k - 1
        );
    }
    assert_eq!(q.counters().timeouts, 1);
}

#[test]
fn irn_draws_no_loss_from_an_ack_that_comes_sooner_than_a_round_trip_after_a_retransmission() {
    // 0..7 sent; the ACK of 0 after 10 µs is a round-trip sample. Then a (spurious) timeout
    // resends 1, and the ACK of 1 arrives 1 µs later: it answers the original 1, which was
    // only delayed, so 2 (queued behind it) is not presumed lost.
    let (mut q, mut mem) = irn_eight_packets_sent();
    ack_at(&mut q, &mut mem, T0 + Dur::from_micros(10), 0);
    let t = q.poll_timeout().expect("timer");
    q.handle_timeout(t);
    assert_eq!(psns(&drain(&mut q, t, &mem)), vec![1]);
    assert_eq!(
        ack_at(&mut q, &mut mem, t + Dur::from_micros(1), 1),
        Vec::<u32>::new()
    );
}

#[test]
fn irn_resends_the_next_hole_on_a_partial_ack_when_a_window_tail_was_lost_whole() {
    // 0..7 sent and all lost: no NACK ever comes. The timeout resends 0; its ACK (cum 1) is
    // partial with no SACK above it, so 1 is the next hole and goes at once — not one RTO per
    // packet.
    let (mut q, mut mem) = irn_eight_packets_sent();
    let t = q.poll_timeout().expect("timer");
    q.handle_timeout(t);
    assert_eq!(psns(&drain(&mut q, t, &mem)), vec![0]);
    each_partial_ack_resends_the_next_hole(&mut q, &mut mem, t, Dur::ZERO, 0);
}

#[test]
fn irn_partial_ack_rule_answers_a_retransmission_faster_than_the_smallest_rtt_sample() {
    // 0 is acknowledged after 30 µs (the smallest sample: its packet met some queueing); 1..7
    // are lost whole. The timeout resends 1, and its ACK comes back in 28 µs through the
    // emptied network: it answers the retransmission, so 2 goes at once, and so on — not one
    // RTO per packet. (An ACK much sooner than that answers a delayed original: the test
    // above.)
    let (mut q, mut mem) = irn_eight_packets_sent();
    let rtt = Dur::from_micros(30);
    assert!(ack_at(&mut q, &mut mem, T0 + rtt, 0).is_empty());
    let t = q.poll_timeout().expect("timer");
    q.handle_timeout(t);
    assert_eq!(psns(&drain(&mut q, t, &mem)), vec![1]);
    each_partial_ack_resends_the_next_hole(&mut q, &mut mem, t, Dur::from_micros(28), 1);
}

#[test]
fn irn_timeout_is_rto_low_with_few_packets_in_flight_and_rto_high_otherwise() {
    let mut q = qp(RecoveryConfig::irn());
    let (mem, sge, remote, _) = memory(10 * 1024);
    let small = Sge { len: 100, ..sge };
    q.post_send(write_wr(small, remote)).expect("post");
    assert_eq!(drain(&mut q, T0, &mem).len(), 1);
    assert_eq!(
        q.poll_timeout(),
        Some(T0 + Dur::from_micros(100)),
        "RTO_low, N = 3"
    );
    q.post_send(write_wr(sge, remote)).expect("post");
    assert_eq!(drain(&mut q, T0, &mem).len(), 10);
    assert_eq!(
        q.poll_timeout(),
        Some(T0 + Dur::from_micros(320)),
        "RTO_high"
    );
    // The timeout retransmits the cumulative-ACK PSN and enters recovery.
    let t = T0 + Dur::from_micros(320);
    q.handle_timeout(t);
    assert_eq!(psns(&drain(&mut q, t, &mem)), vec![0]);
    assert_eq!(q.counters().timeouts, 1);
}

#[test]
fn irn_without_sack_recovers_one_hole_per_round_trip() {
    let mut q = qp(RecoveryConfig::irn_without_sack());
    let (mut mem, sge, remote, _) = memory(10 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    drain(&mut q, T0, &mem);
    // 0 and 3 lost.
    give(
        &mut q,
        &mut mem,
        T0,
        &ack(SQ_PSN, NAK_SEQ, Some(SQ_PSN + 4), true),
    );
    assert_eq!(
        psns(&drain(&mut q, T0, &mem)),
        vec![0],
        "only the cumulative-ACK PSN"
    );
    give(
        &mut q,
        &mut mem,
        T0,
        &ack(SQ_PSN + 2, ACK, Some(SQ_PSN), true),
    );
    assert_eq!(
        psns(&drain(&mut q, T0, &mem)),
        vec![3],
        "the next hole, a round trip later"
    );
}

// ---- receivers --------------------------------------------------------------------------------

fn write_pkt(psn_off: u32, len: usize, remote: Remote, total: u32, irn: bool) -> IbRepr {
    let n = total.div_ceil(1024).max(1);
    let op = match (psn_off == 0, psn_off + 1 == n) {
        (true, true) => Opcode::RC_RDMA_WRITE_ONLY,
        (true, false) => Opcode::RC_RDMA_WRITE_FIRST,
        (false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (false, true) => Opcode::RC_RDMA_WRITE_LAST,
    };
    let mut ib = IbRepr::new(bth(op, RQ_PSN + psn_off, irn));
    ib.bth.ack_req = irn || psn_off + 1 == n;
    if irn || psn_off == 0 {
        ib.reth = Some(RethRepr {
            va: remote.addr,
            rkey: remote.rkey,
            dma_len: total,
        });
    }
    if irn {
        ib.irn = Some(IrnEthRepr {
            psn_offset: Some(psn_off),
            ..IrnEthRepr::default()
        });
    }
    ib.payload_len = len;
    ib
}

fn summary(p: &IbRepr) -> (Opcode, u32, Option<Syndrome>, Option<u32>) {
    (
        p.bth.opcode,
        p.bth.psn.value().wrapping_sub(RQ_PSN),
        p.aeth.map(|a| a.syndrome),
        p.irn
            .and_then(|i| i.sack_psn)
            .map(|s| s.value().wrapping_sub(RQ_PSN)),
    )
}

type Summary = (Opcode, u32, Option<Syndrome>, Option<u32>);

/// Packets 0, 2, 3, 1 of a 4 KB Write (packet `i` full of `i + 1`) into `q`: its memory, the
/// target buffer, and what `q` sent.
fn write_0231(q: &mut QueuePair, irn: bool) -> (ByteMemory, u64, Vec<Summary>) {
    let (mut mem, _, remote, dst) = memory(4096);
    let data: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i + 1; 1024]).collect();
    for i in [0u32, 2, 3, 1] {
        let p = write_pkt(i, 1024, remote, 4096, irn);
        q.handle_packet(T0, &p, &data[i as usize], Ecn::NotEct, &mut mem);
    }
    let out = drain(q, T0, &mem).iter().map(summary).collect();
    (mem, dst, out)
}

/// Every 1 KB chunk `i` of the buffer at `dst` holds `i + 1`.
fn assert_chunks_in_place(mem: &ByteMemory, dst: u64, n: usize) {
    let got = mem.buffer(dst).expect("dst");
    for i in 0..n {
        assert!(got[i * 1024..(i + 1) * 1024]
            .iter()
            .all(|&b| b == i as u8 + 1));
    }
}

#[test]
fn irn_receiver_places_out_of_order_packets_and_nacks_each_with_a_sack() {
    let mut q = qp(RecoveryConfig::irn());
    let (mem, dst, out) = write_0231(&mut q, true);
    let a = Opcode::RC_ACKNOWLEDGE;
    assert_eq!(
        out,
        vec![
            (a, 0, Some(ACK), Some(0)),
            (a, 1, Some(NAK_SEQ), Some(2)),
            (a, 1, Some(NAK_SEQ), Some(3)),
            (a, 3, Some(ACK), Some(1)),
        ],
        "per-packet ACKs; NACK = expected PSN + triggering PSN; cum jumps when the hole fills"
    );
    assert_chunks_in_place(&mem, dst, 4);
    assert_eq!(q.counters().out_of_order, 2);
}

/// `(opcode, psn, syndrome, sack)` and the PSNs a NACK's loss bitmap marks missing, relative
/// to the receive queue's first PSN.
fn with_lost(p: &IbRepr) -> (Summary, Vec<u32>) {
    let base = p.bth.psn.value().wrapping_sub(RQ_PSN);
    let lost = p
        .irn
        .and_then(|i| i.loss_bitmap)
        .map(|b| b.iter().map(|i| base + i as u32).collect())
        .unwrap_or_default();
    (summary(p), lost)
}

/// With `nack_bitmap`, a NACK carries the receiver's loss bitmap up to the highest PSN that
/// arrived (its SACK), every arrival while a hole is open is NACKed so, and the newest
/// (N)ACK waiting in the control queue replaces the ones before it: what the sender reads
/// after a burst is one packet saying everything.
#[test]
fn irn_receiver_with_nack_bitmaps_sends_one_nack_per_burst_saying_everything() {
    let mut q = qp(RecoveryConfig {
        nack_bitmap: true,
        ..RecoveryConfig::irn()
    });
    let (mut mem, _, remote, dst) = memory(8 * 1024);
    let data: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i + 1; 1024]).collect();
    let burst = |q: &mut QueuePair, mem: &mut ByteMemory, pkts: &[u32]| {
        for &i in pkts {
            let p = write_pkt(i, 1024, remote, 8 * 1024, true);
            q.handle_packet(T0, &p, &data[i as usize], Ecn::NotEct, mem);
        }
        drain(q, T0, mem).iter().map(with_lost).collect::<Vec<_>>()
    };
    let a = Opcode::RC_ACKNOWLEDGE;
    // 0 in order, then 2, 4, 5 behind holes at 1 and 3: one NACK for 1, SACK 5, 1 and 3 lost.
    assert_eq!(
        burst(&mut q, &mut mem, &[0, 2, 4, 5]),
        vec![((a, 1, Some(NAK_SEQ), Some(5)), vec![1, 3])]
    );
    // 1 fills the first hole; 3 is still missing: a NACK for 3 with the bitmap, not an ACK.
    assert_eq!(
        burst(&mut q, &mut mem, &[1]),
        vec![((a, 3, Some(NAK_SEQ), Some(5)), vec![3])]
    );
    // 6, then 3 closes the hole: the plain ACK replaces the NACK before it.
    assert_eq!(
        burst(&mut q, &mut mem, &[6, 3]),
        vec![((a, 6, Some(ACK), Some(3)), vec![])]
    );
    // 7, then a duplicate of 2: plain ACKs, which coalesce as before.
    assert_eq!(
        burst(&mut q, &mut mem, &[7, 2]),
        vec![((a, 7, Some(ACK), Some(2)), vec![])]
    );
    assert_chunks_in_place(&mem, dst, 8);
    // 2, 4, 5, 1 and 6 each left a hole open and drew a NACK, but the counters count the
    // packets that left: one per burst, two NACKs and two ACKs.
    let c = q.counters();
    assert_eq!((c.nacks_sent, c.acks_sent), (2, 2));
    assert_eq!(c.tx_packets, 4);
}

/// A loss bitmap reaches 512 PSNs past the hole: an arrival beyond that (an out-of-order
/// window that wide, here IRN without BDP-FC) gets the paper's NACK, which SACKs it alone and
/// is not replaced by the bitmap NACKs that follow.
#[test]
fn an_arrival_beyond_the_bitmaps_reach_gets_a_plain_nack_that_stays() {
    let mut q = qp(RecoveryConfig {
        nack_bitmap: true,
        ..RecoveryConfig::irn_without_bdp_fc()
    });
    let n = 700u32;
    let (mut mem, _, remote, _) = memory(n as usize * 1024);
    let chunk = vec![7u8; 1024];
    for i in [0u32, 600, 5] {
        let p = write_pkt(i, 1024, remote, n * 1024, true);
        q.handle_packet(T0, &p, &chunk, Ecn::NotEct, &mut mem);
    }
    let a = Opcode::RC_ACKNOWLEDGE;
    assert_eq!(
        drain(&mut q, T0, &mem)
            .iter()
            .map(with_lost)
            .collect::<Vec<_>>(),
        vec![
            ((a, 0, Some(ACK), Some(0)), vec![]),
            ((a, 1, Some(NAK_SEQ), Some(600)), vec![]),
            ((a, 1, Some(NAK_SEQ), Some(5)), vec![1, 2, 3, 4]),
        ]
    );
}

/// A NACK's loss bitmap tells an IRN sender which packets arrived although their own NACKs
/// were lost: it resends exactly the ones marked missing. The paper's NACK (the triggering
/// PSN alone) makes every unSACKed packet below it lost.
#[test]
fn irn_sender_resends_only_what_a_nack_bitmap_marks_missing() {
    let run = |bitmap: bool| {
        let mut q = qp(RecoveryConfig::irn());
        let (mem, sge, remote, _) = memory(10 * 1024);
        q.post_send(write_wr(sge, remote)).expect("post");
        assert_eq!(psns(&drain(&mut q, T0, &mem)), (0..10).collect::<Vec<_>>());
        // 0 acknowledged; 1 and 4 lost; 2, 3 and 5 arrived, but only the NACK of 5 got back.
        let mut m = mem.clone();
        give(&mut q, &mut m, T0, &ack(SQ_PSN, ACK, Some(SQ_PSN), true));
        let mut nack = ack(SQ_PSN + 1, NAK_SEQ, Some(SQ_PSN + 5), true);
        if bitmap {
            let mut b = irn_wire::LossBitmap::with_words(1).expect("one word");
            b.set(0); // PSN 1
            b.set(3); // PSN 4
            nack.irn.as_mut().expect("IRNETH").loss_bitmap = Some(b);
        }
        give(&mut q, &mut m, T0, &nack);
        psns(&drain(&mut q, T0, &mem))
    };
    assert_eq!(run(true), vec![1, 4], "the bitmap's missing PSNs only");
    assert_eq!(
        run(false),
        vec![1, 2, 3, 4],
        "every unSACKed PSN below the SACK"
    );
}

/// The UDP runtime's IRN rules: a timeout's sweep held back by F-RTO, NACK bitmaps, lost
/// retransmissions resent.
fn runtime_irn() -> RecoveryConfig {
    RecoveryConfig {
        timeout_resends_unsacked: true,
        nack_bitmap: true,
        resend_lost_retransmissions: true,
        ..RecoveryConfig::irn()
    }
}

/// An IRN NACK of `base` (absolute PSNs) that SACKs `highest` and whose bitmap marks the
/// `lost` offsets from `base` missing.
fn bitmap_nack(base: u32, highest: u32, lost: &[usize]) -> IbRepr {
    let mut n = ack(base, NAK_SEQ, Some(highest), true);
    let mut b = irn_wire::LossBitmap::with_words(1).expect("one word");
    for &i in lost {
        b.set(i);
    }
    n.irn.as_mut().expect("IRNETH").loss_bitmap = Some(b);
    n
}

/// Under the runtime's IRN rules: a 10 KiB Write sent as PSNs 0..=9, 0 acknowledged `rtt`
/// later (the round-trip sample), then the timer fires and F-RTO resends 1 only. Returns the
/// queue pair, its memory, the Write's SGE and target, and the time of the timeout.
fn ten_sent_and_timed_out(rtt: Dur) -> (QueuePair, ByteMemory, Sge, Remote, Time) {
    let mut q = qp(runtime_irn());
    let (mut mem, sge, remote, _) = memory(10 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    assert_eq!(psns(&drain(&mut q, T0, &mem)), (0..10).collect::<Vec<_>>());
    assert!(ack_at(&mut q, &mut mem, T0 + rtt, 0).is_empty());
    let t = q.poll_timeout().expect("timer");
    q.handle_timeout(t);
    assert_eq!(
        psns(&drain(&mut q, t, &mem)),
        vec![1],
        "F-RTO resends una only"
    );
    (q, mem, sge, remote, t)
}

/// The runtime's IRN rules (a timeout's sweep held back by F-RTO, NACK bitmaps): 0..=9 of a
/// Write sent; 1 lost, 2..=5 arrive but the NACK saying so is lost, and the tail 6..=9 is lost
/// too. The timeout resends 1, whose answer, ACK 6, acknowledges originals: the timeout looks
/// spurious and nothing is swept. With nothing new to send, the sender probes with 9; the
/// NACK the probe draws names 6..=8, which go at once — without the probe they would wait
/// for another timeout. With a second Write posted meanwhile, its new packets are the probes
/// and 9 is not resent.
#[test]
fn irn_probes_the_tail_after_a_spurious_looking_timeout_only_with_nothing_new_to_send() {
    let run = |more: bool| {
        let (mut q, mut mem, sge, remote, t) = ten_sent_and_timed_out(Dur::from_micros(10));
        if more {
            q.post_send(write_wr(sge, remote)).expect("post");
        }
        let t = t + Dur::from_micros(20);
        let after_ack = ack_at(&mut q, &mut mem, t, 5);
        // 6, 7 and 8 missing.
        let nack = bitmap_nack(SQ_PSN + 6, SQ_PSN + 9, &[0, 1, 2]);
        give(&mut q, &mut mem, t, &nack);
        let after_nack = psns(&drain(&mut q, t, &mem));
        (after_ack, after_nack, q.counters().timeouts)
    };
    assert_eq!(run(false), (vec![9], vec![6, 7, 8], 1));
    let (after_ack, after_nack, timeouts) = run(true);
    assert!(
        !after_ack.contains(&9) && after_ack.first() == Some(&10),
        "new data, no probe: {after_ack:?}"
    );
    assert_eq!((after_nack, timeouts), (vec![6, 7, 8], 1));
}

/// The runtime's IRN rules after a timeout whose answer cannot be judged. 0..=9 of a
/// Write sent; 0's ACK comes 6 ms later (the smallest round trip, taken under a standing
/// queue), and 1..=9 are lost. The timeout resends 1; its ACK comes 0.4 ms later — sooner than
/// half that smallest sample, so it may answer a delayed original, and the sweep stays held.
/// Unless new data went out since the timeout, the sender probes with 9, and the NACK that
/// draws (2..=8 missing) starts the sweep; with a second Write posted and sent after the
/// timeout, its new packets draw the deciding NACK and 9 goes with the sweep. Before, the
/// queue pair waited for a timeout per PSN.
#[test]
fn irn_decides_an_undecided_timeout_by_new_data_or_a_probe_of_the_tail() {
    let run = |more: bool| {
        let (mut q, mut mem, sge, remote, t) = ten_sent_and_timed_out(Dur::from_micros(6_000));
        let mut sent_new = vec![];
        if more {
            q.post_send(write_wr(sge, remote)).expect("post");
            sent_new = psns(&drain(&mut q, t, &mem));
        }
        let t = t + Dur::from_micros(400);
        let mut after_ack = ack_at(&mut q, &mut mem, t, 1);
        after_ack.extend(sent_new);
        // The deciding NACK: what is left of the first Write (2..=8, or 2..=9 when new data
        // went instead of the probe) missing below the highest PSN that arrived.
        let highest = after_ack.iter().copied().max().expect("something went");
        let lost: Vec<usize> = (0..(highest.min(10) - 2) as usize).collect();
        let nack = bitmap_nack(SQ_PSN + 2, SQ_PSN + highest, &lost);
        give(&mut q, &mut mem, t, &nack);
        let after_nack = psns(&drain(&mut q, t, &mem));
        (after_ack, after_nack, q.counters().timeouts)
    };
    assert_eq!(run(false), (vec![9], (2..=8).collect(), 1));
    let (after_ack, after_nack, timeouts) = run(true);
    assert!(
        !after_ack.contains(&9) && after_ack.first() == Some(&10),
        "new data, no probe: {after_ack:?}"
    );
    assert_eq!((after_nack, timeouts), ((2..=9).collect(), 1));
}

/// The rPSNs of the Read responses among `pkts`.
fn rpsns(pkts: &[IbRepr]) -> Vec<u32> {
    pkts.iter()
        .filter(|p| p.bth.opcode.is_read_response())
        .map(|p| p.bth.psn.value() - RQ_PSN)
        .collect()
}

/// A read (N)ACK `ib` (its opcode made `RC_IRN_READ_ACK`) arrives at `t`; returns the rPSNs
/// of the responses sent in answer.
fn read_ack(q: &mut QueuePair, mem: &mut ByteMemory, t: Time, ib: IbRepr) -> Vec<u32> {
    let mut ib = ib;
    ib.bth.opcode = Opcode::RC_IRN_READ_ACK;
    q.handle_packet(t, &ib, &[], Ecn::NotEct, mem);
    rpsns(&drain(q, t, mem))
}

/// Under the runtime's IRN rules, a 10 KiB Read answered with rPSNs 0..=9; rPSN 0's read ACK
/// comes `rtt` later (the round-trip sample), then the response timer fires and F-RTO resends
/// 1 only. Returns the queue pair, its memory and the time of the timeout.
fn ten_responses_and_timed_out(rtt: Dur) -> (QueuePair, ByteMemory, Time) {
    let mut q = qp(runtime_irn());
    let mut mem = ByteMemory::new(4);
    let src = mem.alloc_with(&[7; 10 * 1024]);
    let k = mem.register(src, 10 * 1024, Access::ALL).expect("reg");
    let mut ib = IbRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST, RQ_PSN, true));
    ib.reth = Some(RethRepr {
        va: src,
        rkey: k.rkey,
        dma_len: 10 * 1024,
    });
    ib.irn = Some(IrnEthRepr {
        wqe_sn: Some(0),
        ..IrnEthRepr::default()
    });
    give(&mut q, &mut mem, T0, &ib);
    assert_eq!(rpsns(&drain(&mut q, T0, &mem)), (0..10).collect::<Vec<_>>());
    assert!(read_ack(&mut q, &mut mem, T0 + rtt, ack(RQ_PSN, ACK, None, true)).is_empty());
    let t = q.poll_timeout().expect("the response timer");
    q.handle_timeout(t);
    assert_eq!(
        rpsns(&drain(&mut q, t, &mem)),
        vec![1],
        "F-RTO resends the oldest only"
    );
    assert_eq!(q.counters().timeouts, 1);
    (q, mem, t)
}

/// The same for an IRN Read responder's rPSN space (§5.4), with its read (N)ACKs: 1 is lost,
/// the read NACK for 2..=5 is lost, 6..=9 are lost. The response timer resends 1; the read
/// ACK of 5 judges the timeout spurious; no response is left to start, so 9 is resent, and
/// the read NACK it draws has 6..=8 resent.
#[test]
fn irn_read_responder_times_out_and_probes_the_tail_of_its_responses() {
    let (mut q, mut mem, t) = ten_responses_and_timed_out(Dur::from_micros(10));
    let t = t + Dur::from_micros(20);
    assert_eq!(
        read_ack(&mut q, &mut mem, t, ack(RQ_PSN + 5, ACK, None, true)),
        vec![9],
        "judged spurious, nothing left to start: the tail is probed"
    );
    // 6, 7 and 8 missing.
    let nack = bitmap_nack(RQ_PSN + 6, RQ_PSN + 9, &[0, 1, 2]);
    assert_eq!(read_ack(&mut q, &mut mem, t, nack), vec![6, 7, 8]);
    assert_eq!(q.counters().timeouts, 1);
}

/// And the undecided case there: rPSN 0's read ACK came 6 ms after it (a smallest sample
/// taken under a standing queue) and 1..=9 were lost. The resent 1 is acknowledged 0.4 ms
/// later — too soon to tell from a delayed original — so the sweep stays held and the tail is
/// probed; the read NACK the probe draws (2..=8 missing) starts the sweep.
#[test]
fn irn_read_responder_decides_an_undecided_timeout_with_a_probe_of_the_tail() {
    let (mut q, mut mem, t) = ten_responses_and_timed_out(Dur::from_micros(6_000));
    let t = t + Dur::from_micros(400);
    assert_eq!(
        read_ack(&mut q, &mut mem, t, ack(RQ_PSN + 1, ACK, None, true)),
        vec![9],
        "undecided: the tail is probed, nothing swept"
    );
    let nack = bitmap_nack(RQ_PSN + 2, RQ_PSN + 9, &[0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(
        read_ack(&mut q, &mut mem, t, nack),
        (2..=8).collect::<Vec<_>>()
    );
    assert_eq!(q.counters().timeouts, 1);
}

/// With `renak_after`, the receiver NAKs the same gap again once that long has passed since
/// its last NAK and another out-of-order packet arrives (the ns-3 RDMA simulators' receiver).
#[test]
fn roce_receiver_with_renak_naks_a_gap_again_after_the_interval() {
    let mut q = qp(RecoveryConfig {
        renak_after: Some(Dur::from_micros(4)),
        ..RecoveryConfig::roce()
    });
    let (mut mem, _, remote, _) = memory(8192);
    let data = vec![7u8; 1024];
    let mut naks = Vec::new();
    // Packet 0, then 1 is lost; 2..=6 arrive 1 µs apart.
    for (i, us) in [(0u32, 0u64), (2, 1), (3, 2), (4, 3), (5, 5), (6, 6)] {
        let t = T0 + Dur::from_micros(us);
        let p = write_pkt(i, 1024, remote, 8192, false);
        q.handle_packet(t, &p, &data, Ecn::NotEct, &mut mem);
        for a in drain(&mut q, t, &mem).iter().map(summary) {
            naks.push((us, a));
        }
    }
    let nak = (Opcode::RC_ACKNOWLEDGE, 1, Some(NAK_SEQ), None);
    assert_eq!(naks, vec![(1, nak), (5, nak)], "at the gap, and 4 µs later");
    // The requester goes back to 1 and the message completes; a new gap 1 µs later (PSN 8
    // missing) is NAKed at once, not 4 µs after the last NAK.
    let t7 = T0 + Dur::from_micros(7);
    for i in 1u32..8 {
        let p = write_pkt(i, 1024, remote, 8192, false);
        q.handle_packet(t7, &p, &data, Ecn::NotEct, &mut mem);
    }
    drain(&mut q, t7, &mem);
    let t = T0 + Dur::from_micros(8);
    q.handle_packet(
        t,
        &write_pkt(9, 1024, remote, 16384, false),
        &data,
        Ecn::NotEct,
        &mut mem,
    );
    let out: Vec<_> = drain(&mut q, t, &mem).iter().map(summary).collect();
    assert!(
        out.contains(&(Opcode::RC_ACKNOWLEDGE, 8, Some(NAK_SEQ), None)),
        "{out:?}"
    );
    let once = RecoveryConfig {
        renak_after: Some(Dur::ZERO),
        ..RecoveryConfig::roce()
    };
    assert_eq!(
        once.validate(),
        Err(irn_transport::ConfigError::ZeroTimeout)
    );
    let irn = RecoveryConfig {
        renak_after: Some(Dur::from_micros(4)),
        ..RecoveryConfig::irn()
    };
    assert_eq!(
        irn.validate(),
        Err(irn_transport::ConfigError::RenakNeedsGoBackN)
    );
}

#[test]
fn roce_receiver_discards_out_of_order_and_naks_once_per_gap_like_rxe() {
    let mut q = qp(RecoveryConfig::roce());
    let (mut mem, _, remote, dst) = memory(4096);
    let data = vec![7u8; 1024];
    for i in [0u32, 2, 3] {
        let p = write_pkt(i, 1024, remote, 4096, false);
        q.handle_packet(T0, &p, &data, Ecn::NotEct, &mut mem);
    }
    // rxe: one NAK (syndrome 0x60, PSN = expected) for the sequence error, none for later
    // out-of-order packets of the same gap; no ACK for packet 0 (AckReq clear).
    let out: Vec<_> = drain(&mut q, T0, &mem).iter().map(summary).collect();
    assert_eq!(out, vec![(Opcode::RC_ACKNOWLEDGE, 1, Some(NAK_SEQ), None)]);
    assert_eq!(
        mem.buffer(dst).expect("dst")[2048..]
            .iter()
            .filter(|&&b| b != 0)
            .count(),
        0,
        "out-of-order data is discarded"
    );
    // The go-back-N retransmission from 1 completes the message; a duplicate is re-ACKed.
    for i in [1u32, 2, 3, 2] {
        let p = write_pkt(i, 1024, remote, 4096, false);
        q.handle_packet(T0, &p, &data, Ecn::NotEct, &mut mem);
    }
    let out: Vec<_> = drain(&mut q, T0, &mem).iter().map(summary).collect();
    assert_eq!(
        out,
        vec![(Opcode::RC_ACKNOWLEDGE, 3, Some(ACK), None)],
        "ACKs coalesce"
    );
    assert_eq!(q.counters().duplicates, 1);
}

/// Standard RoCE asks for an ACK on a message's last packet and every `ack_every`-th before
/// it (IBTA §9.2's AckReq); 1 asks on every packet, as the ns-3 RDMA simulators' NICs answer.
#[test]
fn roce_asks_for_an_ack_every_ack_every_packets_and_on_the_last() {
    for (every, asked) in [
        (64, vec![9]),
        (4, vec![3, 7, 9]),
        (1, (0..10).collect::<Vec<u32>>()),
    ] {
        let mut q = qp(RecoveryConfig {
            ack_every: every,
            ..RecoveryConfig::roce()
        });
        let (mem, sge, remote, _) = memory(10 * 1024);
        q.post_send(write_wr(sge, remote)).expect("post");
        let sent = drain(&mut q, T0, &mem);
        assert_eq!(psns(&sent), (0..10).collect::<Vec<u32>>());
        let with: Vec<u32> = sent
            .iter()
            .filter(|p| p.bth.ack_req)
            .map(|p| p.bth.psn.value() - SQ_PSN)
            .collect();
        assert_eq!(with, asked, "ack_every = {every}");
    }
    let zero = RecoveryConfig {
        ack_every: 0,
        ..RecoveryConfig::roce()
    };
    assert_eq!(
        zero.validate(),
        Err(irn_transport::ConfigError::ZeroAckEvery)
    );
}

#[test]
fn roce_sender_goes_back_n_on_a_nak() {
    let mut q = qp(RecoveryConfig::roce());
    let (mut mem, sge, remote, _) = memory(6 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    let first = drain(&mut q, T0, &mem);
    assert_eq!(psns(&first), vec![0, 1, 2, 3, 4, 5]);
    assert!(
        first[1].reth.is_none(),
        "standard RoCE: RETH only on the first packet"
    );
    assert!(!first[0].bth.ack_req && first[5].bth.ack_req);
    give(&mut q, &mut mem, T0, &ack(SQ_PSN + 2, NAK_SEQ, None, false));
    assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![2, 3, 4, 5]);
    // A timeout goes back to the oldest unacknowledged PSN.
    let t = T0 + Dur::from_micros(320);
    q.handle_timeout(t);
    assert_eq!(psns(&drain(&mut q, t, &mem)), vec![2, 3, 4, 5]);
}

// ---- go-back-0 livelock (E11) ---------------------------------------------------------------

fn big_write(rec: RecoveryConfig, loss: f64, run_for: Dur) -> (bool, u64) {
    let link = LinkConfig {
        loss,
        ..LinkConfig::default()
    };
    let mut cfg = PairConfig::new(rec, link, 42);
    cfg.qp.retry_limit = Some(1 << 20);
    let mut p = Pair::new(cfg);
    let len = 4 << 20;
    let src = p.mem_a.alloc_with(&vec![0x5a; len]);
    let k = p
        .mem_a
        .register(src, len as u64, Access::LOCAL_WRITE)
        .expect("reg");
    let dst = p.mem_b.alloc(len);
    let dk = p.mem_b.register(dst, len as u64, Access::ALL).expect("reg");
    p.a.post_send(write_wr(
        Sge {
            addr: src,
            len: len as u32,
            lkey: k.lkey,
        },
        Remote {
            addr: dst,
            rkey: dk.rkey,
        },
    ))
    .expect("post");
    p.drive_until(T0 + run_for, u64::MAX);
    let done = p.done_a.iter().any(|c| c.status == WcStatus::Success);
    (done, p.packets_sent)
}

#[test]
fn go_back_0_livelocks_at_one_in_256_loss_while_go_back_n_and_irn_complete() {
    // 4 MB at 1 KB MTU = 4096 packets; P(no loss in one attempt) = (255/256)^4096 ≈ 1e-7.
    let run = Dur::from_millis(30);
    let (done, sent) = big_write(RecoveryConfig::roce_go_back_0(), 1.0 / 256.0, run);
    assert!(!done, "go-back-0 completed");
    assert!(
        sent > 20_000,
        "the link stayed busy ({sent} packets): a livelock, not a stall"
    );
    for rec in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let (done, _) = big_write(rec, 1.0 / 256.0, run);
        assert!(done, "{rec:?} did not complete the 4 MB Write");
    }
    // Without loss go-back-0 completes too: the livelock is the loss's doing.
    assert!(big_write(RecoveryConfig::roce_go_back_0(), 0.0, run).0);
}

// ---- hostile input ------------------------------------------------------------------------------

#[test]
fn wrong_qpn_pkey_tver_or_length_is_dropped_and_counted_silently() {
    let mut q = qp(RecoveryConfig::roce());
    let (mut mem, _, remote, dst) = memory(1024);
    let before = mem.buffer(dst).expect("dst").to_vec();
    let good = write_pkt(0, 16, remote, 16, false);
    let mut wrong_qpn = good;
    wrong_qpn.bth.dest_qpn = 0x99;
    let mut wrong_pkey = good;
    wrong_pkey.bth.pkey = 0x1234;
    let mut wrong_tver = good;
    wrong_tver.bth.tver = TVER_IRN;
    for p in [wrong_qpn, wrong_pkey, wrong_tver] {
        q.handle_packet(T0, &p, &[1; 16], Ecn::NotEct, &mut mem);
    }
    // Payload shorter than the header says.
    q.handle_packet(T0, &good, &[1; 15], Ecn::NotEct, &mut mem);
    assert_eq!(q.counters().dropped_invalid, 4);
    assert!(drain(&mut q, T0, &mem).is_empty());
    assert_eq!(mem.buffer(dst).expect("dst"), &before[..]);
    assert_eq!(q.state(), QpState::Rts);
}

fn expect_error_nak(q: &mut QueuePair, mem: &ByteMemory, code: NakCode) {
    let out = drain(q, T0, mem);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].aeth.map(|a| a.syndrome), Some(Syndrome::Nak(code)));
    assert_eq!(q.state(), QpState::Err);
}

#[test]
fn opcode_out_of_sequence_is_an_invalid_request() {
    let mut q = qp(RecoveryConfig::roce());
    let (mut mem, _, remote, _) = memory(4096);
    // A MIDDLE with no message in progress.
    let mut p = write_pkt(1, 1024, remote, 4096, false);
    p.bth.psn = Psn::new(RQ_PSN);
    q.handle_packet(T0, &p, &[0; 1024], Ecn::NotEct, &mut mem);
    expect_error_nak(&mut q, &mem, NakCode::InvalidRequest);
}

#[test]
fn bad_rkey_and_length_past_the_region_are_remote_access_errors_and_write_nothing() {
    for irn in [false, true] {
        let rec = if irn {
            RecoveryConfig::irn()
        } else {
            RecoveryConfig::roce()
        };
        for (rkey_delta, va_delta) in [(1u32, 0u64), (0, 1)] {
            let mut q = qp(rec);
            let (mut mem, _, remote, dst) = memory(1024);
            let before = mem.buffer(dst).expect("dst").to_vec();
            let r = Remote {
                addr: remote.addr + va_delta,
                rkey: remote.rkey ^ rkey_delta,
            };
            // 1024 bytes at dst + 1 runs one byte past the region.
            let p = write_pkt(0, 1024, r, 1024, irn);
            q.handle_packet(T0, &p, &[0xee; 1024], Ecn::NotEct, &mut mem);
            expect_error_nak(&mut q, &mem, NakCode::RemoteAccessError);
            assert_eq!(
                mem.buffer(dst).expect("dst"),
                &before[..],
                "a byte was written"
            );
        }
    }
}

#[test]
fn psn_ahead_of_the_window_gets_a_sequence_nak_and_far_behind_is_a_duplicate() {
    let mut q = qp(RecoveryConfig::roce());
    let (mut mem, _, remote, _) = memory(1024);
    let mut p = write_pkt(0, 16, remote, 16, false);
    p.bth.psn = Psn::new(RQ_PSN + 1_000_000);
    q.handle_packet(T0, &p, &[0; 16], Ecn::NotEct, &mut mem);
    let out = drain(&mut q, T0, &mem);
    assert_eq!(
        out.iter().map(summary).collect::<Vec<_>>(),
        vec![(Opcode::RC_ACKNOWLEDGE, 0, Some(NAK_SEQ), None)]
    );
    p.bth.psn = Psn::new(RQ_PSN.wrapping_sub(1_000_000));
    q.handle_packet(T0, &p, &[0; 16], Ecn::NotEct, &mut mem);
    assert_eq!(q.counters().duplicates, 1);
    assert_eq!(q.state(), QpState::Rts);
}

fn pair(rec: RecoveryConfig) -> Pair {
    let mut cfg = PairConfig::new(rec, LinkConfig::default(), 3);
    cfg.attr.min_rnr_timer = 1; // 10 µs
    Pair::new(cfg)
}

/// Posts at B a receive (WR 9) of a fresh `len`-byte buffer; returns the buffer's address.
fn post_recv_at_b(p: &mut Pair, len: usize) -> u64 {
    let dst = p.mem_b.alloc(len);
    let dk = p
        .mem_b
        .register(dst, len as u64, Access::LOCAL_WRITE)
        .expect("reg");
    p.b.post_recv(RecvWr {
        wr_id: 9,
        sg_list: irn_transport::sgl![Sge {
            addr: dst,
            len: len as u32,
            lkey: dk.lkey,
        }],
    })
    .expect("post");
    dst
}

fn one_op(p: &mut Pair, op: SendOp, local: Sge) {
    p.a.post_send(SendWr {
        wr_id: 77,
        op,
        sg_list: irn_transport::sgl![local],
        signaled: true,
        fence: false,
        solicited: false,
    })
    .expect("post");
    p.a.post_send(SendWr {
        wr_id: 78,
        op: SendOp::Send,
        sg_list: irn_transport::sgl![],
        signaled: true,
        fence: false,
        solicited: false,
    })
    .expect("post");
    p.drive_until(T0 + Dur::from_millis(100), 100_000);
}

#[test]
fn read_without_remote_read_access_completes_with_remote_access_error_then_flushes() {
    for rec in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let mut p = pair(rec);
        let src = p.mem_b.alloc_with(&[1; 64]);
        let sk = p
            .mem_b
            .register(src, 64, Access::LOCAL_WRITE.with(Access::REMOTE_WRITE))
            .expect("reg");
        let dst = p.mem_a.alloc(64);
        let dk = p.mem_a.register(dst, 64, Access::LOCAL_WRITE).expect("reg");
        one_op(
            &mut p,
            SendOp::Read(Remote {
                addr: src,
                rkey: sk.rkey,
            }),
            Sge {
                addr: dst,
                len: 64,
                lkey: dk.lkey,
            },
        );
        let st: Vec<_> = p.done_a.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            st,
            vec![(77, WcStatus::RemAccessErr), (78, WcStatus::WrFlushErr)],
            "{rec:?}"
        );
        assert_eq!(p.a.state(), QpState::Err);
        assert_eq!(p.mem_a.buffer(dst).expect("dst"), &[0; 64][..]);
    }
}

#[test]
fn misaligned_atomic_is_a_remote_invalid_request() {
    for rec in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let mut p = pair(rec);
        let t = p.mem_b.alloc(64);
        let tk = p.mem_b.register(t, 64, Access::ALL).expect("reg");
        let dst = p.mem_a.alloc(8);
        let dk = p.mem_a.register(dst, 8, Access::LOCAL_WRITE).expect("reg");
        one_op(
            &mut p,
            SendOp::FetchAdd {
                remote: Remote {
                    addr: t + 4,
                    rkey: tk.rkey,
                },
                add: 1,
            },
            Sge {
                addr: dst,
                len: 8,
                lkey: dk.lkey,
            },
        );
        assert_eq!(p.done_a[0].status, WcStatus::RemInvReqErr, "{rec:?}");
        assert_eq!(
            p.mem_b.buffer(t).expect("t"),
            &[0; 64][..],
            "nothing executed"
        );
    }
}

#[test]
fn send_without_a_receive_gets_rnr_naks_until_one_is_posted() {
    for rec in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let mut p = pair(rec);
        let src = p.mem_a.alloc_with(b"hello");
        let k = p.mem_a.register(src, 5, Access::LOCAL_WRITE).expect("reg");
        p.a.post_send(SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: irn_transport::sgl![Sge {
                addr: src,
                len: 5,
                lkey: k.lkey,
            }],
            signaled: true,
            fence: false,
            solicited: false,
        })
        .expect("post");
        p.drive_until(T0 + Dur::from_micros(55), 10_000);
        assert!(p.b.counters().rnr_naks_sent >= 2, "{rec:?}");
        assert!(p.done_a.is_empty());
        let dst = post_recv_at_b(&mut p, 16);
        p.drive_until(T0 + Dur::from_millis(10), 10_000);
        assert_eq!(p.done_a.len(), 1);
        assert_eq!(p.done_a[0].status, WcStatus::Success);
        assert_eq!((p.done_b[0].wr_id, p.done_b[0].byte_len), (9, 5));
        assert_eq!(&p.mem_b.buffer(dst).expect("dst")[..5], b"hello");
    }
}

#[test]
fn irn_resends_after_an_rnr_wait_only_what_the_receiver_did_not_sack() {
    // A Send refused for want of a receive, then four one-packet Writes the responder places
    // and selectively acknowledges: after each RNR wait IRN resends from the Send's PSN but
    // skips the Writes the receiver holds (it would only answer them as duplicates).
    let mut p = pair(RecoveryConfig::irn());
    let src = p.mem_a.alloc_with(&[7u8; 64]);
    let k = p.mem_a.register(src, 64, Access::LOCAL_WRITE).expect("reg");
    let sge = |len| Sge {
        addr: src,
        len,
        lkey: k.lkey,
    };
    let dst = p.mem_b.alloc(256);
    let dk = p.mem_b.register(dst, 256, Access::ALL).expect("reg");
    let mut wrs = vec![SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: irn_transport::sgl![sge(5)],
        signaled: true,
        fence: false,
        solicited: false,
    }];
    for i in 0..4u64 {
        wrs.push(SendWr {
            wr_id: 2 + i,
            op: SendOp::Write(Remote {
                addr: dst + 64 * i,
                rkey: dk.rkey,
            }),
            sg_list: irn_transport::sgl![sge(64)],
            signaled: true,
            fence: false,
            solicited: false,
        });
    }
    for wr in wrs {
        p.a.post_send(wr).expect("post");
    }
    p.drive_until(T0 + Dur::from_micros(55), 10_000);
    assert!(p.b.counters().rnr_naks_sent >= 2);
    assert!(
        p.done_a.is_empty(),
        "nothing completes past the refused Send"
    );
    post_recv_at_b(&mut p, 16);
    p.drive_until(T0 + Dur::from_millis(10), 10_000);
    let ids: Vec<u64> = p.done_a.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert!(p.done_a.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(&p.mem_b.buffer(dst).expect("dst")[..256], &[7u8; 256][..]);
    assert_eq!(p.b.counters().duplicates, 0, "a SACKed Write was resent");
    assert_eq!(
        p.a.counters().retransmitted,
        p.b.counters().rnr_naks_sent,
        "one resend of the Send per RNR NAK, nothing else"
    );
}

#[test]
fn rnr_retry_exceeded_and_transport_retry_exceeded_complete_with_their_status() {
    let mut cfg = PairConfig::new(RecoveryConfig::roce(), LinkConfig::default(), 5);
    cfg.attr.rnr_retry = 2;
    cfg.attr.min_rnr_timer = 1;
    let mut p = Pair::new(cfg);
    let (mem, sge, _, _) = memory(64);
    p.mem_a = mem;
    one_op(&mut p, SendOp::Send, sge);
    assert_eq!(p.done_a[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(p.done_a[1].status, WcStatus::WrFlushErr);

    let dead = LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    };
    // IRN with its timer fixed (IRN §3.1) retransmits at its own RTO (100 µs here) but gives
    // up, as the verbs attributes say, after retry_cnt + 1 local ACK timeouts without
    // progress: 4 × 4.096 µs × 2^10 = 16.8 ms.
    let mut p = to_a_dead_peer(RecoveryConfig {
        rto_backoff_after: None,
        ..RecoveryConfig::irn()
    });
    p.drive_until(T0 + Dur::from_micros(16_700), 100_000);
    assert!(p.done_a.is_empty(), "gave up before 4 local ACK timeouts");
    let irn_timeouts = p.a.counters().timeouts;
    assert!(
        irn_timeouts > 20,
        "IRN's RTO kept retransmitting: {irn_timeouts}"
    );
    p.drive_until(T0 + Dur::from_millis(30), 100_000);
    let st: Vec<_> = p.done_a.iter().map(|c| c.status).collect();
    assert_eq!(st, vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr]);

    // With the local ACK timeout as the RTO (RoCE towards rxe), every timeout is a retry.
    let mut cfg = PairConfig::new(RecoveryConfig::roce(), dead, 5);
    cfg.qp.recovery.rto = RtoPolicy::FromAttr;
    cfg.attr.retry_cnt = 3;
    cfg.attr.timeout = 10;
    let mut p = Pair::new(cfg);
    let (mem, sge, remote, _) = memory(64);
    p.mem_a = mem;
    one_op(&mut p, SendOp::Write(remote), sge);
    let st: Vec<_> = p.done_a.iter().map(|c| c.status).collect();
    assert_eq!(st, vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr]);
    assert_eq!(
        p.a.counters().timeouts,
        4,
        "retry_cnt 3: the fourth timeout gives up"
    );
}

#[test]
fn verbs_in_the_wrong_state_are_typed_errors() {
    let mut q = QueuePair::new(T0, QpConfig::default()).expect("a valid queue-pair configuration");
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: irn_transport::sgl![],
        signaled: true,
        fence: false,
        solicited: false,
    };
    assert!(q.post_send(wr.clone()).is_err());
    assert!(q
        .post_recv(RecvWr {
            wr_id: 1,
            sg_list: irn_transport::sgl![]
        })
        .is_err());
    assert!(q
        .modify(
            T0,
            QpState::Rts,
            &QpAttr::default(),
            irn_transport::AttrMask::NONE
        )
        .is_err());
    // In ERR, posts complete at once, flushed.
    q.modify(
        T0,
        QpState::Err,
        &QpAttr::default(),
        irn_transport::AttrMask::NONE,
    )
    .expect("any state may go to ERR");
    q.post_send(wr).expect("flushes");
    assert_eq!(
        q.poll_completion().map(|c| c.status),
        Some(WcStatus::WrFlushErr)
    );
}

#[test]
fn ce_marked_arrivals_make_rate_limited_cnps() {
    let mut q = qp(RecoveryConfig::irn());
    let (mut mem, _, remote, _) = memory(4096);
    for (i, us) in [(0u32, 0u64), (1, 10), (2, 60)] {
        let p = write_pkt(i, 1024, remote, 4096, true);
        q.handle_packet(T0 + Dur::from_micros(us), &p, &[0; 1024], Ecn::Ce, &mut mem);
    }
    let cnps: Vec<_> = drain(&mut q, T0, &mem)
        .into_iter()
        .filter(|p| p.bth.opcode == Opcode::CNP)
        .collect();
    assert_eq!(cnps.len(), 2, "one per 50 µs");
    assert_eq!(cnps[0].bth.dest_qpn, 0x22);
    assert_eq!(cnps[0].bth.psn, Psn::new(0));
    assert!(cnps[0].check().is_ok());
    assert_eq!(
        q.counters().cnps_sent + q.counters().ecn_marked,
        3 + q.counters().cnps_sent
    );
}

#[test]
fn duplicate_atomic_is_answered_from_saved_state_not_executed_twice() {
    let mut q = qp(RecoveryConfig::roce());
    let mut mem = ByteMemory::new(1);
    let t = mem.alloc(8);
    let tk = mem.register(t, 8, Access::ALL).expect("reg");
    let mut ib = IbRepr::new(bth(Opcode::RC_FETCH_ADD, RQ_PSN, false));
    ib.atomic_eth = Some(AtomicEthRepr {
        va: t,
        rkey: tk.rkey,
        swap_add: 5,
        compare: 0,
    });
    give(&mut q, &mut mem, T0, &ib);
    give(&mut q, &mut mem, T0, &ib);
    let out = drain(&mut q, T0, &mem);
    assert_eq!(out.len(), 2);
    assert!(out
        .iter()
        .all(|p| p.bth.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE
            && p.atomic_ack_eth.map(|a| a.orig) == Some(0)));
    let mut v = [0u8; 8];
    mem.read(irn_transport::Key::Local(tk.lkey), t, &mut v)
        .expect("read");
    assert_eq!(u64::from_ne_bytes(v), 5, "executed once");
    // Each response returned 8 bytes of data (the original value): the counters say so.
    let c = q.counters();
    assert_eq!((c.tx_packets, c.tx_bytes), (2, 16), "{c:?}");
}

#[test]
fn send_longer_than_the_receive_buffer_is_a_local_length_error_there_and_invalid_request_here() {
    for rec in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let mut p = pair(rec);
        post_recv_at_b(&mut p, 100);
        let (mem, sge, _, _) = memory(3000);
        p.mem_a = mem;
        one_op(&mut p, SendOp::Send, sge);
        assert_eq!(p.done_a[0].status, WcStatus::RemInvReqErr, "{rec:?}");
        assert_eq!(p.done_b[0].status, WcStatus::LocLenErr, "{rec:?}");
        assert_eq!(p.b.state(), QpState::Err);
    }
}

#[test]
fn region_deregistered_under_a_read_answers_with_a_remote_access_nak() {
    for irn in [false, true] {
        let rec = if irn {
            RecoveryConfig::irn()
        } else {
            RecoveryConfig::roce()
        };
        let mut q = qp(rec);
        let mut mem = ByteMemory::new(4);
        let src = mem.alloc_with(&[3; 2048]);
        let k = mem.register(src, 2048, Access::ALL).expect("reg");
        let mut ib = IbRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST, RQ_PSN, irn));
        ib.reth = Some(RethRepr {
            va: src,
            rkey: k.rkey,
            dma_len: 2048,
        });
        if irn {
            ib.irn = Some(IrnEthRepr {
                wqe_sn: Some(0),
                ..IrnEthRepr::default()
            });
        }
        give(&mut q, &mut mem, T0, &ib);
        mem.deregister(k.lkey).expect("deregister");
        let out = drain(&mut q, T0, &mem);
        let last = out.last().expect("a NAK");
        assert_eq!(
            last.aeth.map(|a| a.syndrome),
            Some(Syndrome::Nak(NakCode::RemoteAccessError)),
            "{out:?}"
        );
        assert!(
            out.iter().all(|p| p.payload_len == 0),
            "no data from a revoked region"
        );
        assert_eq!(q.state(), QpState::Err);
    }
}

// ---- regressions from review ------------------------------------------------------------------

fn send_pkt(psn_off: u32, wqe_sn: u32, inv: Option<u32>) -> IbRepr {
    let op = if inv.is_some() {
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE
    } else {
        Opcode::RC_SEND_ONLY
    };
    let mut ib = IbRepr::new(bth(op, RQ_PSN + psn_off, true));
    ib.ieth = inv;
    ib.irn = Some(IrnEthRepr {
        wqe_sn: Some(wqe_sn),
        psn_offset: Some(0),
        ..IrnEthRepr::default()
    });
    ib
}

#[test]
fn irn_out_of_order_send_without_a_receive_is_nacked_not_rnr_nacked() {
    // An RNR NAK for PSN 1 would acknowledge PSN 0, which never arrived.
    let mut q = qp(RecoveryConfig::irn());
    let mut mem = ByteMemory::new(1);
    give(&mut q, &mut mem, T0, &send_pkt(1, 1, None));
    let out: Vec<_> = drain(&mut q, T0, &mem).iter().map(summary).collect();
    assert_eq!(out, vec![(Opcode::RC_ACKNOWLEDGE, 0, Some(NAK_SEQ), None)]);
    assert_eq!(q.counters().rnr_naks_sent, 0);
}

#[test]
fn send_with_invalidate_revokes_its_key_in_psn_order() {
    let mut q = qp(RecoveryConfig::irn());
    let (mut mem, _, remote, dst) = memory(1024);
    let r = mem.alloc(64);
    let rk = mem.register(r, 64, Access::LOCAL_WRITE).expect("reg");
    q.post_recv(RecvWr {
        wr_id: 3,
        sg_list: irn_transport::sgl![Sge {
            addr: r,
            len: 64,
            lkey: rk.lkey,
        }],
    })
    .expect("post");
    // PSN 1 (Send with Invalidate of the Write's key) overtakes PSN 0 (the Write).
    give(&mut q, &mut mem, T0, &send_pkt(1, 0, Some(remote.rkey)));
    q.handle_packet(
        T0,
        &write_pkt(0, 16, remote, 16, true),
        &[9; 16],
        Ecn::NotEct,
        &mut mem,
    );
    assert_eq!(q.state(), QpState::Rts);
    assert_eq!(&mem.buffer(dst).expect("dst")[..16], &[9; 16]);
    let c = q.poll_completion().expect("recv completion");
    assert_eq!(
        (c.wr_id, c.status, c.invalidated_rkey),
        (3, WcStatus::Success, Some(remote.rkey))
    );
    assert!(mem
        .check(
            irn_transport::Key::Remote(remote.rkey),
            dst,
            1,
            Access::REMOTE_WRITE
        )
        .is_err());
}

#[test]
fn irn_nack_for_a_packet_beyond_the_window_carries_no_sack() {
    let mut q = qp(RecoveryConfig::irn());
    let (mut mem, _, remote, _) = memory(1024);
    let mut p = write_pkt(0, 16, remote, 16, true);
    p.bth.psn = Psn::new(RQ_PSN + 500); // BDP cap 110
    q.handle_packet(T0, &p, &[0; 16], Ecn::NotEct, &mut mem);
    let out: Vec<_> = drain(&mut q, T0, &mem).iter().map(summary).collect();
    assert_eq!(out, vec![(Opcode::RC_ACKNOWLEDGE, 0, Some(NAK_SEQ), None)]);
}

#[test]
fn a_stale_go_back_nak_neither_rewinds_nor_hangs() {
    for rec in [RecoveryConfig::roce_go_back_0(), RecoveryConfig::roce()] {
        let mut q = qp(rec);
        let (mut mem, sge, remote, _) = memory(4096);
        q.post_send(write_wr(sge, remote)).expect("post");
        drain(&mut q, T0, &mem);
        give(&mut q, &mut mem, T0, &ack(SQ_PSN + 3, ACK, None, false));
        assert_eq!(
            q.poll_completion().map(|c| c.status),
            Some(WcStatus::Success)
        );
        // A NAK for the (completed) message's first PSN arrives late.
        give(&mut q, &mut mem, T0, &ack(SQ_PSN, NAK_SEQ, None, false));
        assert!(
            drain(&mut q, T0, &mem).is_empty(),
            "{rec:?} resent completed work"
        );
        assert_eq!(q.in_flight(), 0);
        // The next work request still goes out.
        q.post_send(write_wr(Sge { len: 10, ..sge }, remote))
            .expect("post");
        assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![4], "{rec:?}");
    }
}

#[test]
fn a_hostile_read_length_is_refused_without_tracking_its_psns() {
    let mut q = qp(RecoveryConfig::roce());
    let mut mem = ByteMemory::new(1);
    let a = mem.alloc(64);
    let k = mem.register(a, 64, Access::ALL).expect("reg");
    let mut ib = IbRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST, RQ_PSN, false));
    ib.reth = Some(RethRepr {
        va: a,
        rkey: k.rkey,
        dma_len: u32::MAX,
    });
    give(&mut q, &mut mem, T0, &ib);
    expect_error_nak(&mut q, &mem, NakCode::InvalidRequest);
}

/// `QueuePair::new` refuses a configuration that cannot mean anything, with a typed error
/// naming what is wrong, and accepts every preset.
#[test]
fn impossible_configurations_are_typed_errors_at_creation() {
    use irn_transport::{ConfigError, QpConfigError, RecoveryMode, Retransmission};
    let make = |cfg: QpConfig| {
        QueuePair::new(T0, cfg)
            .map(|_| ())
            .map_err(|e| (e, e.to_string()))
    };
    for mode in RecoveryMode::ALL {
        let cfg = QpConfig {
            recovery: mode.preset(),
            ..QpConfig::default()
        };
        assert_eq!(make(cfg), Ok(()), "{mode}");
    }
    // Selective repeat needs IRN's wire format (out-of-order placement, SACKs).
    let cfg = QpConfig {
        recovery: RecoveryConfig {
            retransmission: Retransmission::SelectiveRepeat,
            ..RecoveryConfig::roce()
        },
        ..QpConfig::default()
    };
    let (e, text) = make(cfg).expect_err("refused");
    assert_eq!(
        e,
        QpConfigError::Recovery(ConfigError::SelectiveRepeatNeedsIrnWire)
    );
    assert!(text.contains("IRN wire format"), "{text}");
    let cases = [
        (
            QpConfig {
                qpn: 1 << 24,
                ..QpConfig::default()
            },
            QpConfigError::QpnTooLarge(1 << 24),
        ),
        (
            QpConfig {
                line_rate_bps: 0,
                ..QpConfig::default()
            },
            QpConfigError::ZeroLineRate,
        ),
        (
            QpConfig {
                recovery: RecoveryConfig::irn_without_bdp_fc(),
                ooo_window: 0,
                ..QpConfig::default()
            },
            QpConfigError::ZeroOooWindow,
        ),
        (
            QpConfig {
                recovery: RecoveryConfig {
                    bdp_cap: Some(0),
                    ..RecoveryConfig::irn()
                },
                ..QpConfig::default()
            },
            QpConfigError::Recovery(ConfigError::ZeroBdpCap),
        ),
        (
            QpConfig {
                recovery: RecoveryConfig {
                    rto: RtoPolicy::Fixed(Dur::ZERO),
                    ..RecoveryConfig::roce()
                },
                ..QpConfig::default()
            },
            QpConfigError::Recovery(ConfigError::ZeroTimeout),
        ),
    ];
    for (cfg, want) in cases {
        assert_eq!(make(cfg).map_err(|(e, _)| e), Err(want));
    }
    // A BDP cap makes the out-of-order window irrelevant: IRN with BDP-FC takes a zero one.
    let cfg = QpConfig {
        ooo_window: 0,
        ..QpConfig::default()
    };
    assert_eq!(make(cfg), Ok(()));
}

// ---- Seed 002: reorder buffer, extended IB, Read re-requests (T8) ----------------------------

fn with_rule(rec: RecoveryConfig, threshold: u32, delay_us: u64) -> RecoveryConfig {
    RecoveryConfig {
        hole_rule: Some(irn_transport::HoleRule {
            delay: Dur::from_micros(delay_us),
            threshold,
        }),
        ..rec
    }
}

fn ext_write_pkt(psn_off: u32, remote: Remote, total: u32) -> IbRepr {
    let mut ib = write_pkt(psn_off, 1024, remote, total, true);
    ib.bth.tver = irn_wire::TVER_EXT_IB;
    ib.bth.ack_req = psn_off + 1 == total.div_ceil(1024);
    ib
}

#[test]
fn reorder_buffer_parks_out_of_order_packets_and_drains_them_in_order_without_a_nak() {
    let mut q = qp(RecoveryConfig::reorder_buffer());
    let (mem, dst, out) = write_0231(&mut q, false);
    assert_eq!(
        out,
        vec![(Opcode::RC_ACKNOWLEDGE, 3, Some(ACK), None)],
        "no NAK: the reordering was absorbed; the last packet's ACK covers all"
    );
    assert_chunks_in_place(&mem, dst, 4);
    let c = q.counters();
    assert_eq!((c.reorder_parked, c.nacks_sent), (2, 0));
    // Two whole packets (BTH + 1 KB; the last one with its RETH-less header) went to host memory.
    assert_eq!(c.reorder_bytes, 2 * (12 + 1024));
    assert_eq!(c.reorder_peak_bytes, 2 * (12 + 1024));
}

#[test]
fn reorder_buffer_naks_a_hole_once_its_threshold_of_packets_is_parked_behind_it() {
    let mut q = qp(with_rule(RecoveryConfig::reorder_buffer(), 3, 1_000));
    let (mut mem, _, remote, _) = memory(8 * 1024);
    let data = vec![5u8; 1024];
    let mut naks = vec![];
    for i in [0u32, 2, 3, 4, 5] {
        let p = write_pkt(i, 1024, remote, 8 * 1024, false);
        q.handle_packet(T0, &p, &data, Ecn::NotEct, &mut mem);
        naks.push(
            drain(&mut q, T0, &mem)
                .iter()
                .map(summary)
                .collect::<Vec<_>>(),
        );
    }
    let nak = vec![(Opcode::RC_ACKNOWLEDGE, 1, Some(NAK_SEQ), None)];
    assert_eq!(
        naks,
        vec![vec![], vec![], vec![], nak, vec![]],
        "NAK on the 3rd parked"
    );
    assert_eq!(q.counters().early_naks_sent, 1);
    // The go-back-N resend from 1: 1 drains 2..=5, the resent 2..=5 are duplicates.
    for i in [1u32, 2, 3, 4, 5, 6, 7] {
        let p = write_pkt(i, 1024, remote, 8 * 1024, false);
        q.handle_packet(T0, &p, &data, Ecn::NotEct, &mut mem);
    }
    assert_eq!(q.counters().duplicates, 4);
    let out: Vec<_> = drain(&mut q, T0, &mem).iter().map(summary).collect();
    assert_eq!(
        out.last(),
        Some(&(Opcode::RC_ACKNOWLEDGE, 7, Some(ACK), None))
    );
}

#[test]
fn reorder_buffer_naks_a_hole_that_stays_open_for_the_delay() {
    let mut q = qp(with_rule(RecoveryConfig::reorder_buffer(), 100, 20));
    let (mut mem, _, remote, _) = memory(4096);
    let data = vec![5u8; 1024];
    let t1 = T0 + Dur::from_micros(3);
    q.handle_packet(
        T0,
        &write_pkt(0, 1024, remote, 4096, false),
        &data,
        Ecn::NotEct,
        &mut mem,
    );
    q.handle_packet(
        t1,
        &write_pkt(2, 1024, remote, 4096, false),
        &data,
        Ecn::NotEct,
        &mut mem,
    );
    assert!(drain(&mut q, t1, &mem).is_empty());
    let at = q.poll_timeout().expect("the hole timer");
    assert_eq!(at, t1 + Dur::from_micros(20));
    q.handle_timeout(at);
    let out: Vec<_> = drain(&mut q, at, &mem).iter().map(summary).collect();
    assert_eq!(out, vec![(Opcode::RC_ACKNOWLEDGE, 1, Some(NAK_SEQ), None)]);
    assert_eq!(q.poll_timeout(), None, "one NAK per hole");
}

#[test]
fn ext_ib_responder_places_any_packet_and_naks_with_the_bitmap_of_the_lost_ones() {
    // Seed 002's example: the first two packets lost, the NAK carries 0x0003.
    let mut q = qp(RecoveryConfig::ext_ib());
    let (mut mem, _, remote, dst) = memory(20 * 1024);
    let total = 20 * 1024;
    let mut outs = vec![];
    for i in 2..18u32 {
        let data = vec![i as u8; 1024];
        q.handle_packet(
            T0,
            &ext_write_pkt(i, remote, total),
            &data,
            Ecn::NotEct,
            &mut mem,
        );
        outs.extend(drain(&mut q, T0, &mem));
    }
    assert_eq!(outs.len(), 1, "one NAK, at the 16th packet behind the hole");
    let nak = &outs[0];
    assert_eq!(nak.bth.tver, irn_wire::TVER_EXT_IB);
    assert_eq!(
        summary(nak),
        (Opcode::RC_ACKNOWLEDGE, 0, Some(NAK_SEQ), Some(17))
    );
    let lost = nak.irn.and_then(|i| i.loss_bitmap).expect("a loss bitmap");
    assert_eq!(lost.words(), &[0x0003]);
    // Placed on arrival, before the hole filled.
    let got = mem.buffer(dst).expect("dst");
    assert!(got[2 * 1024..18 * 1024]
        .chunks(1024)
        .enumerate()
        .all(|(i, c)| c.iter().all(|&b| b == i as u8 + 2)));
    assert!(got[..2048].iter().all(|&b| b == 0));
}

#[test]
fn ext_ib_sender_resends_exactly_the_psns_a_bitmap_nak_names_and_everything_on_timeout() {
    let mut q = qp(RecoveryConfig::ext_ib());
    let (mut mem, sge, remote, _) = memory(10 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    let sent = drain(&mut q, T0, &mem);
    assert_eq!(psns(&sent), (0..10).collect::<Vec<_>>());
    for (k, p) in sent.iter().enumerate() {
        assert_eq!(p.bth.tver, irn_wire::TVER_EXT_IB);
        assert!(p.reth.is_some(), "the RETH rides on every Write packet");
        assert_eq!(p.irn.and_then(|i| i.psn_offset), Some(k as u32));
    }
    // 0, 1 and 5 lost; 2-4 and 6-9 arrived.
    let mut lost = irn_wire::LossBitmap::with_words(1).expect("1 word");
    for i in [0, 1, 5] {
        lost.set(i);
    }
    let mut nak = ack(SQ_PSN, NAK_SEQ, Some(SQ_PSN + 9), false);
    nak.bth.tver = irn_wire::TVER_EXT_IB;
    nak.irn = Some(IrnEthRepr {
        sack_psn: Some(Psn::new(SQ_PSN + 9)),
        loss_bitmap: Some(lost),
        ..IrnEthRepr::default()
    });
    let t1 = T0 + Dur::from_micros(10);
    give(&mut q, &mut mem, t1, &nak);
    assert_eq!(
        psns(&drain(&mut q, t1, &mem)),
        vec![0, 1, 5],
        "exactly the lost ones"
    );
    // Nothing answers: the timeout resends everything from the oldest unacknowledged PSN.
    let at = q.poll_timeout().expect("RTO");
    q.handle_timeout(at);
    assert_eq!(psns(&drain(&mut q, at, &mem)), (0..10).collect::<Vec<_>>());
}

fn read_resp(k: u32, n: u32, data: &[u8], first: bool, last: bool) -> IbRepr {
    let _ = n;
    let mut ib = IbRepr::new(bth(Opcode::read_response(first, last), SQ_PSN + k, false));
    ib.bth.ack_req = false;
    if first || last {
        ib.aeth = Some(AethRepr {
            syndrome: ACK,
            msn: 1,
        });
    }
    ib.payload_len = data.len();
    ib
}

/// A 7-MTU Read (and a Send behind it) whose responses 1, 2, 3 and 5 arrived and whose Send was
/// acknowledged: the queue pair, its memory, the local buffer, the source bytes, when.
fn read_with_holes(rec: RecoveryConfig) -> (QueuePair, ByteMemory, u64, Vec<u8>, Remote, Time) {
    let len = 7 * 1024 - 100;
    let mut q = qp(rec);
    let mut mem = ByteMemory::new(3);
    let local = mem.alloc(len);
    let lk = mem
        .register(local, len as u64, Access::ALL)
        .expect("register");
    let src: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let remote = Remote {
        addr: 0x10_0000,
        rkey: 77,
    };
    let sge = Sge {
        addr: local,
        len: len as u32,
        lkey: lk.lkey,
    };
    for (wr_id, op, sg) in [
        (1, SendOp::Read(remote), irn_transport::sgl![sge]),
        (2, SendOp::Send, irn_transport::sgl![]),
    ] {
        q.post_send(SendWr {
            wr_id,
            op,
            sg_list: sg,
            signaled: true,
            fence: false,
            solicited: false,
        })
        .expect("post");
    }
    assert_eq!(psns(&drain(&mut q, T0, &mem)), vec![0, 7]);
    let t1 = T0 + Dur::from_micros(5);
    for k in [1u32, 2, 3, 5] {
        let c = &src[k as usize * 1024..(k as usize + 1) * 1024];
        q.handle_packet(
            t1,
            &read_resp(k, 7, c, false, false),
            c,
            Ecn::NotEct,
            &mut mem,
        );
    }
    give(&mut q, &mut mem, t1, &ack(SQ_PSN + 7, ACK, None, false));
    (q, mem, local, src, remote, t1)
}

fn asked(pkts: &[IbRepr], remote: Remote) -> Vec<(u32, u64, u32)> {
    pkts.iter()
        .map(|p| {
            let r = p.reth.expect("RETH");
            (p.bth.psn.value() - SQ_PSN, r.va - remote.addr, r.dma_len)
        })
        .collect()
}

#[test]
fn asking_for_the_first_hole_only_moves_forward_as_rxe_needs() {
    let rec = RecoveryConfig {
        reread_all: false,
        ..with_rule(RecoveryConfig::reorder_buffer(), 100, 20)
    };
    let (mut q, mut mem, local, src, remote, t1) = read_with_holes(rec);
    let len = src.len();
    let chunk = |k: u32| &src[k as usize * 1024..((k as usize + 1) * 1024).min(len)];
    let mut order = vec![];
    for _ in 0..3 {
        let now = q.poll_timeout().expect("the Read hole timer");
        assert!(now > t1);
        q.handle_timeout(now);
        let a = asked(&drain(&mut q, now, &mem), remote);
        assert_eq!(a.len(), 1, "one part at a time");
        let k = a[0].0;
        order.push(a[0]);
        let last = k == 6;
        q.handle_packet(
            now,
            &read_resp(k, 7, chunk(k), !last, true),
            chunk(k),
            Ecn::NotEct,
            &mut mem,
        );
    }
    assert_eq!(
        order,
        vec![
            (0, 0, 1024),
            (4, 4096, 1024),
            (6, 6144, (len - 6144) as u32)
        ]
    );
    assert_eq!(mem.buffer(local).expect("local"), &src[..]);
}

#[test]
fn a_read_with_lost_responses_re_requests_only_the_missing_chunks() {
    // Seed 002's example: a 7-MTU Read loses its responses 0, 4 and 6; the Send behind it is
    // acknowledged, so the responder went past the Read and its tail (6) is lost too.
    let (mut q, mut mem, local, src, remote, t1) =
        read_with_holes(with_rule(RecoveryConfig::reorder_buffer(), 100, 20));
    let len = src.len();
    let chunk = |k: u32| &src[k as usize * 1024..((k as usize + 1) * 1024).min(len)];
    assert!(drain(&mut q, t1, &mem).is_empty(), "the rule's delay first");
    let at = q.poll_timeout().expect("the Read hole timer");
    assert_eq!(at, t1 + Dur::from_micros(20));
    q.handle_timeout(at);
    assert_eq!(
        asked(&drain(&mut q, at, &mem), remote),
        vec![
            (0, 0, 1024),
            (4, 4096, 1024),
            (6, 6144, (len - 6144) as u32)
        ],
        "one smaller Read per missing chunk, nothing else"
    );
    assert_eq!(q.counters().read_rerequests, 3);
    for k in [6u32, 0, 4] {
        let r = read_resp(k, 7, chunk(k), true, true);
        q.handle_packet(at, &r, chunk(k), Ecn::NotEct, &mut mem);
    }
    let done: Vec<_> = std::iter::from_fn(|| q.poll_completion()).collect();
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(mem.buffer(local).expect("local"), &src[..]);
}

#[test]
fn a_standard_responder_answers_a_duplicate_read_for_a_part_with_that_part_only() {
    let mut q = qp(RecoveryConfig::roce());
    let (mut mem, _, remote, dst) = memory(7 * 1024);
    let read = |psn_off: u32, off: u64, len: u32| {
        let mut ib = IbRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST, RQ_PSN + psn_off, false));
        ib.reth = Some(RethRepr {
            va: remote.addr + off,
            rkey: remote.rkey,
            dma_len: len,
        });
        ib
    };
    let _ = dst;
    give(&mut q, &mut mem, T0, &read(0, 0, 7 * 1024));
    assert_eq!(drain(&mut q, T0, &mem).len(), 7);
    give(&mut q, &mut mem, T0, &read(4, 4096, 1024));
    let again = drain(&mut q, T0, &mem);
    assert_eq!(
        again
            .iter()
            .map(|p| (p.bth.opcode, p.bth.psn.value() - RQ_PSN, p.payload_len))
            .collect::<Vec<_>>(),
        vec![(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 4, 1024)]
    );
    // A part that is not whole MTUs short of the end, or outside the Read, is refused.
    give(&mut q, &mut mem, T0, &read(4, 4096, 1000));
    give(&mut q, &mut mem, T0, &read(4, 0, 1024));
    assert!(drain(&mut q, T0, &mem).is_empty());
    assert_eq!(q.counters().unexpected, 2);
}

#[test]
fn irn_with_a_dup_threshold_resends_a_hole_only_once_sacks_reach_that_far_beyond_it() {
    let mut q = qp(RecoveryConfig {
        dup_threshold: 3,
        ..RecoveryConfig::irn()
    });
    let (mut mem, sge, remote, _) = memory(10 * 1024);
    q.post_send(write_wr(sge, remote)).expect("post");
    assert_eq!(drain(&mut q, T0, &mem).len(), 10);
    // 0 is late, not lost: the NACKs of 1 and 2 resend nothing (IRN alone would resend 0).
    let mut resent = vec![];
    for s in [1u32, 2, 3] {
        let nack = ack(SQ_PSN, NAK_SEQ, Some(SQ_PSN + s), true);
        give(&mut q, &mut mem, T0, &nack);
        resent.push(psns(&drain(&mut q, T0, &mem)));
    }
    assert_eq!(
        resent,
        vec![vec![], vec![], vec![0]],
        "0 is lost once 3 is SACKed"
    );
}

/// The payload buffer a driver passes to `poll_transmit` is reused packet after packet without
/// being cleared (its length kept, so resizing does not zero-fill every payload): each packet
/// still gets exactly its own bytes — a data packet its source's, a CNP its 16 zero bytes,
/// a packet without payload an empty buffer — whatever the buffer held before.
#[test]
fn a_reused_payload_buffer_never_leaks_into_the_next_packet() {
    let mut q = qp(RecoveryConfig::irn());
    let (mut mem, sge, remote, _) = memory(4096); // source bytes 0xab
    let sge = Sge { len: 3000, ..sge };
    q.post_send(write_wr(sge, remote)).expect("post");
    let mut buf = vec![0x5a; 9000];
    let mut sent = 0;
    while let Some(t) = q.poll_transmit(T0, &mem, &mut buf) {
        assert_eq!(buf.len(), t.ib.payload_len);
        assert!(
            buf.iter().all(|&b| b == 0xab),
            "data: its source's bytes only"
        );
        sent += buf.len();
        buf.resize(9000, 0x5a); // as if a bigger packet had used it since
    }
    assert_eq!(sent, 3000);
    // A CE-marked arrival: the CNP's payload is 16 zero bytes, then an ACK has none.
    let p = write_pkt(0, 1024, remote, 4096, true);
    q.handle_packet(T0, &p, &[0; 1024], Ecn::Ce, &mut mem);
    let mut kinds = vec![];
    buf.resize(9000, 0x5a);
    while let Some(t) = q.poll_transmit(T0, &mem, &mut buf) {
        kinds.push(t.ib.bth.opcode);
        if t.ib.bth.opcode == Opcode::CNP {
            assert_eq!(buf, [0u8; 16]);
        } else {
            assert_eq!(t.ib.payload_len, 0);
            assert!(buf.is_empty(), "{:?} with a payload", t.ib.bth.opcode);
        }
        buf.resize(9000, 0x5a);
    }
    assert!(kinds.contains(&Opcode::CNP), "{kinds:?}");
}

/// A pair whose links lose everything, A's queue pair (`recovery`, `retry_cnt` 3, `timeout`
/// 10: 4.2 ms) with a 64-byte Write (wr_id 77) and a Send (78) posted.
fn to_a_dead_peer(recovery: RecoveryConfig) -> Pair {
    let dead = LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    };
    let mut cfg = PairConfig::new(recovery, dead, 5);
    cfg.attr.retry_cnt = 3;
    cfg.attr.timeout = 10;
    let mut p = Pair::new(cfg);
    let (mem, sge, remote, _) = memory(64);
    p.mem_a = mem;
    for (id, op, sg) in [
        (77, SendOp::Write(remote), irn_transport::sgl![sge]),
        (78, SendOp::Send, irn_transport::sgl![]),
    ] {
        p.a.post_send(SendWr {
            wr_id: id,
            op,
            sg_list: sg,
            signaled: true,
            fence: false,
            solicited: false,
        })
        .expect("post");
    }
    p
}

/// The times at which `p`'s requester timed out, driving it until its first completion or
/// `until`.
fn expiries_until_done(p: &mut Pair, until: Time) -> Vec<Time> {
    let mut at = Vec::new();
    let mut seen = p.a.counters().timeouts;
    while p.done_a.is_empty() && p.now() <= until && p.step() {
        let n = p.a.counters().timeouts;
        if n > seen {
            seen = n;
            at.push(p.now());
        }
    }
    at
}

/// A dead peer (everything lost both ways): IRN's fixed timer (IRN §3.1) resends every
/// RTO_low until the retry budget is spent; with the back-off, three expiries re-arm it
/// unchanged and each further one doubles it, up to the local ACK timeout, so it resends a
/// dozen times instead of ~170 — and either way the Write fails with `RetryExcErr` after
/// `retry_cnt + 1` local ACK timeouts (IBTA §9.7.6.1.3) and the Send behind it is flushed.
#[test]
fn a_dead_peer_draws_backed_off_resends_and_the_same_retry_error() {
    let low = Dur::from_micros(100);
    // timeout 10: 4.096 µs × 2^10.
    let ack_timeout = Dur::from_picos(4_194_304_000);
    let mut gave_up = Vec::new();
    for backoff in [None, Some(3)] {
        let mut p = to_a_dead_peer(RecoveryConfig {
            rto_backoff_after: backoff,
            ..RecoveryConfig::irn()
        });
        let at = expiries_until_done(&mut p, T0 + Dur::from_millis(100));
        p.drive_until(T0 + Dur::from_millis(100), 100_000);
        let st: Vec<_> = p.done_a.iter().map(|c| c.status).collect();
        assert_eq!(
            st,
            vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr],
            "{backoff:?}"
        );
        let last = *at.last().expect("timeouts");
        assert!(
            last.since(T0) >= ack_timeout.saturating_mul(4),
            "{backoff:?}: gave up at {last:?}, before 4 local ACK timeouts"
        );
        gave_up.push(last.since(T0));
        let mut gaps: Vec<Dur> = vec![at[0].since(T0)];
        gaps.extend(at.windows(2).map(|w| w[1].since(w[0])));
        let expected: Vec<Dur> = (0..gaps.len() as u32)
            .map(|i| match backoff {
                Some(after) if i > after => low.doubled(i - after).min(ack_timeout),
                _ => low,
            })
            .collect();
        assert_eq!(gaps, expected, "{backoff:?}: the timer's intervals");
        let resent = p.a.counters().retransmitted;
        match backoff {
            None => assert!(resent > 150, "fixed: {resent} resends"),
            Some(_) => assert!(resent < 15, "backed off: {resent} resends"),
        }
    }
    // Both give up within one local ACK timeout of each other.
    assert!(gave_up[1].as_picos() - gave_up[0].as_picos() < ack_timeout.as_picos());
}
