//! End-to-end behaviour of two queue pairs through impaired links: every operation, every loss
//! recovery mode, exact data and exactly one completion per work request.

mod common;

use common::{every_kind, Kind, Op, Workload, ALL_KINDS};
use irn_transport::pair::{LinkConfig, Pair, PairConfig, Rng};
use irn_transport::{Dur, RecoveryConfig, Retransmission, Time};
use proptest::prelude::*;

fn modes() -> Vec<(&'static str, RecoveryConfig)> {
    vec![
        ("roce", RecoveryConfig::roce()),
        ("irn", RecoveryConfig::irn()),
        ("irn-gbn", RecoveryConfig::irn_go_back_n()),
        ("irn-no-bdpfc", RecoveryConfig::irn_without_bdp_fc()),
        ("irn-no-sack", RecoveryConfig::irn_without_sack()),
        ("reorder-buffer", RecoveryConfig::reorder_buffer()),
        ("ext-ib", RecoveryConfig::ext_ib()),
        (
            "reorder-buffer-first-hole",
            RecoveryConfig {
                reread_all: false,
                ..RecoveryConfig::reorder_buffer()
            },
        ),
        (
            "irn-dup4",
            RecoveryConfig {
                dup_threshold: 4,
                ..RecoveryConfig::irn()
            },
        ),
        ("tcp", RecoveryConfig::tcp()),
        (
            "tcp-delayed-ack",
            RecoveryConfig {
                tcp: Some(irn_transport::TcpModel {
                    delayed_ack: Some(Dur::from_micros(40)),
                }),
                ..RecoveryConfig::tcp()
            },
        ),
        // Appended, so that the indices the proptest regressions recorded keep their modes.
        // The runtime's additions to IRN's rules (docs/VERBS.md, Modes).
        (
            "irn-resend-lost-sweep",
            RecoveryConfig {
                resend_lost_retransmissions: true,
                timeout_resends_unsacked: true,
                ..RecoveryConfig::irn()
            },
        ),
        (
            "irn-dup4-resend-lost-sweep",
            RecoveryConfig {
                dup_threshold: 4,
                resend_lost_retransmissions: true,
                timeout_resends_unsacked: true,
                ..RecoveryConfig::irn()
            },
        ),
        (
            "irn-nack-bitmap",
            RecoveryConfig {
                nack_bitmap: true,
                ..RecoveryConfig::irn()
            },
        ),
        // The runtime's IRN (`irn_verbs::runtime_recovery`, less its stretched timers).
        (
            "irn-runtime-rules",
            RecoveryConfig {
                resend_lost_retransmissions: true,
                timeout_resends_unsacked: true,
                nack_bitmap: true,
                bdp_fc_span: Some(4),
                ..RecoveryConfig::irn()
            },
        ),
    ]
}

fn pair_for(recovery: RecoveryConfig, link: LinkConfig, seed: u64, mtu: u32) -> Pair {
    let mut cfg = PairConfig::new(recovery, link, seed);
    cfg.qp.retry_limit = Some(1_000);
    cfg.attr.path_mtu = mtu;
    Pair::new(cfg)
}

fn run(recovery: RecoveryConfig, link: LinkConfig, ops: &[Op], seed: u64, mtu: u32) -> Pair {
    let mut pair = pair_for(recovery, link, seed, mtu);
    let w = Workload::post(&mut pair, ops, seed);
    let idle = pair.drive_until(Time::ZERO + Dur::from_millis(60_000), 50_000_000);
    assert!(idle, "did not finish: livelock or deadlock (seed {seed})");
    if let Err(e) = w.check(&pair) {
        panic!("seed {seed}, mtu {mtu}: {e}");
    }
    if let Some(cap) = recovery.bdp_cap {
        // `next − una`: at most the cap (IRN §3.2), or with a span that many caps (the
        // unSACKed PSNs then being what the cap bounds).
        let bound = cap * recovery.bdp_fc_span.unwrap_or(1);
        assert!(
            pair.max_in_flight_a <= bound && pair.max_rsp_in_flight <= bound,
            "BDP-FC violated: {} / {} > {bound}",
            pair.max_in_flight_a,
            pair.max_rsp_in_flight
        );
    }
    pair
}

#[test]
fn every_operation_over_a_clean_link_in_every_mode() {
    for (name, rec) in modes() {
        for len in [0, 1, 1000, 1024, 5000] {
            let p = run(rec, LinkConfig::default(), &every_kind(len), 1, 1024);
            assert_eq!(p.a.counters().retransmitted, 0, "{name}");
        }
    }
}

#[test]
fn every_operation_under_loss_in_every_mode() {
    let link = LinkConfig {
        loss: 0.1,
        reorder: 0.1,
        duplicate: 0.05,
        ..LinkConfig::default()
    };
    for (name, rec) in modes() {
        for seed in 0..4 {
            let mut ops = every_kind(9000);
            ops.extend(every_kind(3000));
            let p = run(rec, link, &ops, seed, 1024);
            assert!(
                p.a.counters().retransmitted > 0,
                "{name}: no loss exercised"
            );
        }
    }
}

/// A 10 Gb/s link with a 50 µs one-way latency, no impairment.
fn ten_gig() -> LinkConfig {
    LinkConfig {
        latency: Dur::from_micros(50),
        bandwidth_bps: 10_000_000_000,
        ..LinkConfig::default()
    }
}

/// `n` signaled 64 KiB Writes.
fn writes_64k(n: usize) -> Vec<Op> {
    (0..n)
        .map(|_| Op {
            kind: Kind::Write,
            len: 65536,
            signaled: true,
            fence: false,
            sges: 1,
        })
        .collect()
}

/// IRN's selective repeat recovers a lost retransmission only by its timer (IRN §3.1); with
/// `resend_lost_retransmissions` a later packet's SACK resends it. A 64 KiB-message stream at
/// 5 % loss each way (so ~10 % of retransmissions are lost again), the paper's timers: on every
/// seed the option finishes sooner, and it times out at most a quarter as often, with the same
/// bytes delivered.
#[test]
fn resending_lost_retransmissions_replaces_timeouts() {
    let link = LinkConfig {
        loss: 0.05,
        ..ten_gig()
    };
    let ops = writes_64k(200);
    let (mut timeouts_without, mut timeouts_with) = (0, 0);
    for seed in 1..=5 {
        let [without, with] = [false, true].map(|on| {
            let rec = RecoveryConfig {
                resend_lost_retransmissions: on,
                ..RecoveryConfig::irn()
            };
            let p = run(rec, link, &ops, seed, 4096);
            (p.now(), p.a.counters().timeouts)
        });
        assert!(
            with.0 < without.0,
            "seed {seed}: finished at {:?} with, {:?} without",
            with.0,
            without.0
        );
        timeouts_without += without.1;
        timeouts_with += with.1;
    }
    assert!(
        timeouts_without >= 10 && timeouts_with * 4 <= timeouts_without,
        "timeouts: {timeouts_with} with, {timeouts_without} without"
    );
}

/// IRN's NACK SACKs only the packet that triggered it (IRN §3.1), so when a NACK is lost its
/// packet stays unSACKed below a higher SACK and is resent although it arrived. With
/// `nack_bitmap` the next NACK carries the receiver's whole loss bitmap and covers the lost
/// one. A 64 KiB-message stream with 1 % of data and 5 % of (N)ACKs dropped, the paper's
/// timers: on every seed the bitmap resends at most a fifth of what the plain NACKs resend
/// beyond the data actually lost, with the same bytes delivered — Writes (the responder's
/// NACKs, the requester resends) and Reads (the requester's read NACKs in the rPSN space, the
/// responder resends its responses) alike.
#[test]
fn nack_bitmaps_make_lost_nacks_cost_no_resends() {
    for kind in [Kind::Write, Kind::Read] {
        let mut ops = writes_64k(100);
        ops.iter_mut().for_each(|o| o.kind = kind);
        for seed in 1..=4 {
            let [without, with] = [false, true].map(|on| resends_beyond_loss(&ops, on, seed));
            assert!(
                without >= 10 && with * 5 <= without,
                "{kind:?}, seed {seed}: resends beyond the data lost: {with} with bitmaps, \
                 {without} without"
            );
        }
    }
}

/// Runs `ops` from A with 1 % of the data and 5 % of the acknowledgements dropped; returns
/// what the data's sender retransmitted beyond the data packets dropped.
fn resends_beyond_loss(ops: &[Op], bitmaps: bool, seed: u64) -> u64 {
    use irn_transport::pair::Side;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let rec = RecoveryConfig {
        nack_bitmap: bitmaps,
        ..RecoveryConfig::irn()
    };
    let reads = ops.iter().any(|o| o.kind == Kind::Read);
    // Writes' data goes to B and their ACKs to A; Reads' responses to A and read ACKs to B.
    let data_to = if reads { Side::A } else { Side::B };
    let mut pair = pair_for(rec, ten_gig(), seed, 4096);
    let data_lost = Arc::new(AtomicU64::new(0));
    let lost = data_lost.clone();
    let mut rng = Rng::new(seed);
    pair.set_tap(move |to, pkt| {
        let op = pkt.ib.bth.opcode;
        let data = if reads {
            op.is_read_response()
        } else {
            op.is_request()
        };
        let drop = rng.chance(if to == data_to { 0.01 } else { 0.05 });
        if drop && to == data_to && data {
            lost.fetch_add(1, Ordering::Relaxed);
        }
        !drop
    });
    let w = Workload::post(&mut pair, ops, seed);
    assert!(pair.drive_until(Time::ZERO + Dur::from_millis(60_000), 50_000_000));
    w.check(&pair)
        .unwrap_or_else(|e| panic!("seed {seed}, bitmaps {bitmaps}: {e}"));
    let sender = if reads { &pair.b } else { &pair.a };
    sender
        .counters()
        .retransmitted
        .saturating_sub(data_lost.load(Ordering::Relaxed))
}

fn op_strategy() -> impl Strategy<Value = Op> {
    (
        0usize..7,
        prop_oneof![
            6 => 0usize..2048,
            3 => 2048usize..70_000,
            1 => 70_000usize..3_000_000,
        ],
        any::<bool>(),
        prop::bool::weighted(0.1),
        1usize..4,
    )
        .prop_map(|(k, len, signaled, fence, sges)| {
            let kind = ALL_KINDS[k];
            Op {
                kind,
                len: if matches!(kind, Kind::FetchAdd | Kind::CompareSwap) {
                    8
                } else {
                    len
                },
                signaled,
                fence,
                sges,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random verbs under random impairment, in every mode but go-back-0 (the TCP model
    /// too): every work request completes exactly once and successfully, in order; memory
    /// equals the reference model; IRN never has more than the BDP cap in flight.
    #[test]
    fn random_verbs_under_random_impairment(
        ops in prop::collection::vec(op_strategy(), 1..12),
        mode in 0usize..modes().len(),
        loss in 0.0f64..0.2,
        reorder in 0.0f64..0.3,
        duplicate in 0.0f64..0.05,
        mtu_code in 0u32..5,
        seed in any::<u64>(),
    ) {
        let (_, rec) = modes()[mode];
        let link = LinkConfig { loss, reorder, duplicate, ..LinkConfig::default() };
        let mut rng = Rng::new(seed);
        let _ = rng.next_u64();
        run(rec, link, &ops, seed, 256 << mtu_code);
    }
}

/// Seeded soak: `IRN_SOAK=N cargo test --test qp_pair soak -- --ignored --nocapture` runs N
/// random cases and prints each before running it (replay one with `IRN_SOAK_FROM`). Without
/// `IRN_SOAK` it runs nothing, so it is not part of the default suite. Cases draw from every
/// mode of [`modes`]; loss up to 20 % where recovery is selective, up to 10 % for the go-back
/// modes, whose collapse at high loss is the known result (RoCE keeps 1 % of its goodput at
/// 5 %, docs/BENCHMARKS.md) and only ran the case out of its step budget (seed 2824 before:
/// go-back-N, 19 % loss, a 1 MB Write at MTU 256, 1.6 M packets sent).
#[test]
#[ignore = "a soak: IRN_SOAK=N cargo test --test qp_pair soak -- --ignored"]
fn soak() {
    let n: u64 = std::env::var("IRN_SOAK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let from: u64 = std::env::var("IRN_SOAK_FROM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for seed in from..from + n {
        soak_case(seed, Draw::AllModes);
    }
}

/// How a soak case draws its mode and loss.
#[derive(Clone, Copy, PartialEq)]
enum Draw {
    /// The first five modes, loss up to 20 % for all: the cases the regression seeds were
    /// found with.
    FirstFive,
    /// Every mode; loss up to 10 % for the go-back modes.
    AllModes,
}

/// Seeds that once failed: 137 (go-back-N behind an unbounded link queue), 809 (RoCE
/// duplicate Reads each queued a full replay and starved new Reads).
#[test]
fn soak_regressions() {
    for seed in [137, 809] {
        soak_case(seed, Draw::FirstFive);
    }
}

fn soak_case(seed: u64, draw: Draw) {
    {
        let mut rng = Rng::new(seed);
        let mode = match draw {
            Draw::FirstFive => rng.below(5),
            Draw::AllModes => rng.below(modes().len() as u64),
        } as usize;
        let go_back = matches!(
            modes()[mode].1.retransmission,
            Retransmission::GoBackN | Retransmission::GoBack0
        );
        let max_loss = if draw == Draw::AllModes && go_back {
            0.1
        } else {
            0.2
        };
        let link = LinkConfig {
            loss: rng.unit() * max_loss,
            reorder: rng.unit() * 0.3,
            duplicate: rng.unit() * 0.05,
            ..LinkConfig::default()
        };
        let mtu = 256 << rng.below(5);
        let ops: Vec<Op> = (0..1 + rng.below(11))
            .map(|_| {
                let kind = ALL_KINDS[rng.below(7) as usize];
                let len = match rng.below(10) {
                    0 => 70_000 + rng.below(1_000_000) as usize,
                    1..=3 => 2048 + rng.below(68_000) as usize,
                    _ => rng.below(2048) as usize,
                };
                Op {
                    kind,
                    len: if matches!(kind, Kind::FetchAdd | Kind::CompareSwap) {
                        8
                    } else {
                        len
                    },
                    signaled: rng.chance(0.5),
                    fence: rng.chance(0.1),
                    sges: 1 + rng.below(3) as usize,
                }
            })
            .collect();
        eprintln!(
            "seed {seed}: {} mtu {mtu} {link:?} {ops:?}",
            modes()[mode].0
        );
        let mut pair = pair_for(modes()[mode].1, link, seed, mtu);
        let w = Workload::post(&mut pair, &ops, seed);
        let idle = pair.drive_until(Time::ZERO + Dur::from_millis(10_000), 3_000_000);
        assert!(
            idle,
            "seed {seed}: not idle at {:?}, sent {}",
            pair.now(),
            pair.packets_sent
        );
        if let Err(e) = w.check(&pair) {
            panic!("seed {seed}: {e}");
        }
    }
}
