//! Feeds arbitrary packets to queue pairs (RoCE and IRN) in the middle of real traffic. Beyond
//! "never panics": a canary region without remote access is never written, and the run ends.
//!
//! Run with `cargo +nightly fuzz run qp_packets` from the repository root. The property test
//! `crates/transport/tests/qp_hostile.rs` runs the same harness in CI.
#![no_main]

use irn_transport::pair::{LinkConfig, Pair, PairConfig};
use irn_transport::{Access, Dur, RecoveryConfig, Remote, SendOp, SendWr, Sge, Time};
use irn_wire::{Ecn, IbRepr, Psn, DEFAULT_PKEY, TVER_IRN, TVER_STANDARD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let irn = mode & 1 == 1;
    let rec = if irn { RecoveryConfig::irn() } else { RecoveryConfig::roce() };
    let mut cfg = PairConfig::new(rec, LinkConfig::default(), u64::from(mode));
    cfg.qp.retry_limit = Some(3);
    let mut p = Pair::new(cfg);
    let canary = p.mem_b.alloc_with(&[0xc5; 4096]);
    p.mem_b.register(canary, 4096, Access::LOCAL_WRITE).expect("register");
    let src = p.mem_a.alloc_with(&[1; 5000]);
    let sk = p.mem_a.register(src, 5000, Access::LOCAL_WRITE).expect("register");
    let dst = p.mem_b.alloc(5000);
    let dk = p.mem_b.register(dst, 5000, Access::ALL).expect("register");
    for op in [
        SendOp::Write(Remote { addr: dst, rkey: dk.rkey }),
        SendOp::Read(Remote { addr: dst, rkey: dk.rkey }),
    ] {
        let wr = SendWr {
            wr_id: 1,
            op,
            sg_list: irn_transport::sgl![Sge { addr: src, len: 5000, lkey: sk.lkey }],
            signaled: true,
            fence: false,
            solicited: false,
        };
        p.a.post_send(wr).expect("post");
    }
    // Chunks: [flags, psn offset, length, bytes...].
    while rest.len() >= 3 {
        let (flags, off, len) = (rest[0], rest[1], usize::from(rest[2]));
        rest = &rest[3..];
        let n = len.min(rest.len());
        let mut bytes = rest[..n].to_vec();
        rest = &rest[n..];
        p.drive_until(p.now() + Dur::from_nanos(300), 50);
        if bytes.len() < 12 {
            continue;
        }
        bytes[0] &= 0x1f;
        bytes[1] = (bytes[1] & 0xf0) | if irn { TVER_IRN } else { TVER_STANDARD };
        bytes.truncate(bytes.len() / 4 * 4);
        let now = p.now();
        let Ok((mut ib, payload)) = IbRepr::parse(&bytes) else {
            continue;
        };
        let (qp, mem) = if flags & 1 == 1 {
            (&mut p.b, &mut p.mem_b)
        } else {
            (&mut p.a, &mut p.mem_a)
        };
        ib.bth.dest_qpn = qp.qpn();
        ib.bth.pkey = DEFAULT_PKEY;
        ib.bth.tver = if irn { TVER_IRN } else { TVER_STANDARD };
        ib.bth.psn = Psn::new(ib.bth.psn.value().wrapping_add(u32::from(off)));
        let payload = payload.to_vec();
        qp.handle_packet(now, &ib, &payload, Ecn::NotEct, mem);
    }
    p.drive_until(Time::ZERO + Dur::from_millis(500), 200_000);
    assert!(p.mem_b.buffer(canary).is_some_and(|b| b.iter().all(|&x| x == 0xc5)));
});
