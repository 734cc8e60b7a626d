//! Arbitrary packets thrown at queue pairs in the middle of real traffic: never a panic, never a
//! byte written outside a region that allows it, and the run still ends. The same harness is
//! the cargo-fuzz target `fuzz/fuzz_targets/qp_packets.rs`.

use irn_transport::pair::{LinkConfig, Pair, PairConfig};
use irn_transport::{Access, Dur, RecoveryConfig, Remote, SendOp, SendWr, Sge, Time};
use irn_wire::{Ecn, IbRepr, Psn, DEFAULT_PKEY, TVER_IRN, TVER_STANDARD};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// Runs a Write and a Read between two queue pairs while `packets` (raw BTH-onward bytes, each
/// steered to a QP) arrive; returns whether a canary buffer stayed intact.
fn hostile_run(irn: bool, packets: &[(bool, u32, Vec<u8>)]) -> bool {
    let rec = if irn {
        RecoveryConfig::irn()
    } else {
        RecoveryConfig::roce()
    };
    let mut cfg = PairConfig::new(rec, LinkConfig::default(), 7);
    cfg.qp.retry_limit = Some(3);
    let mut p = Pair::new(cfg);
    let mut accepted = 0u64;
    // A canary next to a writable region, registered without remote access.
    let canary = p.mem_b.alloc_with(&[0xc5; 4096]);
    p.mem_b
        .register(canary, 4096, Access::LOCAL_WRITE)
        .expect("register canary");
    let src = p.mem_a.alloc_with(&[1; 5000]);
    let sk = p
        .mem_a
        .register(src, 5000, Access::LOCAL_WRITE)
        .expect("reg");
    let dst = p.mem_b.alloc(5000);
    let dk = p.mem_b.register(dst, 5000, Access::ALL).expect("reg");
    for op in [
        SendOp::Write(Remote {
            addr: dst,
            rkey: dk.rkey,
        }),
        SendOp::Read(Remote {
            addr: dst,
            rkey: dk.rkey,
        }),
    ] {
        p.a.post_send(SendWr {
            wr_id: 1,
            op,
            sg_list: irn_transport::sgl![Sge {
                addr: src,
                len: 5000,
                lkey: sk.lkey,
            }],
            signaled: true,
            fence: false,
            solicited: false,
        })
        .expect("post");
    }
    for (to_b, psn_hint, bytes) in packets {
        p.drive_until(p.now() + Dur::from_nanos(300), 50);
        let now = p.now();
        let mut bytes = bytes.clone();
        // An RC opcode and this connection's TVer, so the layout is known and the packet gets
        // past the first checks.
        bytes[0] &= 0x1f;
        bytes[1] = (bytes[1] & 0xf0) | if irn { TVER_IRN } else { TVER_STANDARD };
        let len = bytes.len() / 4 * 4;
        bytes.truncate(len);
        let Ok((mut ib, payload)) = IbRepr::parse(&bytes) else {
            continue;
        };
        // Steer it where the logic is: the right QPN, P_Key and version, a PSN near the
        // window, so checks past the first ones get exercised.
        let (qp, mem) = if *to_b {
            (&mut p.b, &mut p.mem_b)
        } else {
            (&mut p.a, &mut p.mem_a)
        };
        ib.bth.dest_qpn = qp.qpn();
        ib.bth.pkey = DEFAULT_PKEY;
        ib.bth.tver = if irn { TVER_IRN } else { TVER_STANDARD };
        ib.bth.psn = Psn::new(ib.bth.psn.value() % 64 + psn_hint);
        let payload = payload.to_vec();
        let before = qp.counters().dropped_invalid;
        qp.handle_packet(now, &ib, &payload, Ecn::NotEct, mem);
        accepted += u64::from(qp.counters().dropped_invalid == before);
    }
    ACCEPTED.fetch_add(accepted, std::sync::atomic::Ordering::Relaxed);
    p.drive_until(Time::ZERO + Dur::from_millis(500), 200_000);
    p.mem_b
        .buffer(canary)
        .is_some_and(|b| b.iter().all(|&x| x == 0xc5))
}

static ACCEPTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_packets_never_panic_or_write_outside_regions(
        irn in any::<bool>(),
        packets in prop::collection::vec(
            (any::<bool>(), any::<u32>(), prop::collection::vec(any::<u8>(), 12..120)), 0..16),
    ) {
        prop_assert!(hostile_run(irn, &packets));
    }
}

#[test]
fn hostile_packets_reach_the_protocol_logic() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = prop::collection::vec(
        (
            any::<bool>(),
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 12..120),
        ),
        16,
    );
    for _ in 0..64 {
        let packets = strat.new_tree(&mut runner).expect("value").current();
        assert!(hostile_run(true, &packets));
        assert!(hostile_run(false, &packets));
    }
    // Not just dropped at the door: a good share gets past the QPN/P_Key/TVer/layout checks.
    assert!(ACCEPTED.load(std::sync::atomic::Ordering::Relaxed) > 200);
}
