//! Feeds arbitrary frames and registration answers to two DRP endpoints (SPEC T10) in the middle
//! of a real write and read. Beyond "never panics": the responder writes nothing outside the
//! region the write registered, and the run ends (every timer eventually gives up).
//!
//! Run with `cargo +nightly fuzz run drp_endpoint` from the repository root. The property tests
//! `arbitrary_frames_never_panic` and `every_transfer_exact_and_once` in
//! `crates/transport/tests/drp.rs` run the same kind of input in CI.
#![no_main]

use irn_transport::drp::{DrpConfig, DrpEndpoint, DrpEvent, DrpMode, DrpOp};
use irn_transport::{Dur, Time};
use libfuzzer_sys::fuzz_target;

const MEM: usize = 64 * 1024;
const REGION: (usize, usize) = (4096, 4096 + 8192);

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mode = if mode & 1 == 1 { DrpMode::Dynamic } else { DrpMode::Traditional };
    let mut cfg = DrpConfig::seed(mode);
    cfg.max_retries = 4;
    cfg.setup_timeout = Dur::from_micros(50);
    cfg.data_timeout = Dur::from_micros(50);
    let mut a = DrpEndpoint::new(cfg.clone(), MEM).expect("config");
    let mut b = DrpEndpoint::new(cfg, MEM).expect("config");
    a.memory_mut().fill(1);
    let _ = a.post_write(Time::ZERO, 0, REGION.0 as u64, (REGION.1 - REGION.0) as u64);
    let _ = a.post_read(Time::ZERO, 20_000, 0, 3000);
    let mut now = Time::ZERO;
    let mut buf = Vec::new();
    // Whether a forged request got a write region other than ours registered.
    let mut foreign = false;
    for _ in 0..20_000 {
        now = now + Dur::from_micros(1);
        // Real traffic both ways.
        while a.poll_transmit(now, &mut buf) {
            b.handle_frame(now, &buf);
        }
        while b.poll_transmit(now, &mut buf) {
            a.handle_frame(now, &buf);
        }
        // Registrations: answered at once, the fuzzer says how.
        while let Some(ev) = b.poll_event() {
            if let DrpEvent::Register { tid, addr, len, op } = ev {
                let ok = rest.first().is_none_or(|x| x & 3 != 0);
                let ours = addr == REGION.0 as u64 && len == (REGION.1 - REGION.0) as u64;
                foreign |= ok && op == DrpOp::Write && !ours;
                b.registration_done(now, tid, ok);
            }
        }
        while a.poll_event().is_some() {}
        // A hostile frame: a length byte, then that many bytes, to either endpoint.
        if let Some((&n, tail)) = rest.split_first() {
            let n = usize::from(n >> 1).min(tail.len());
            let (frame, tail) = tail.split_at(n);
            if n & 1 == 0 {
                b.handle_frame(now, frame);
            } else {
                a.handle_frame(now, frame);
            }
            rest = tail;
        }
        if a.poll_timeout().is_some_and(|t| t <= now) {
            a.handle_timeout(now);
        }
        if b.poll_timeout().is_some_and(|t| t <= now) {
            b.handle_timeout(now);
        }
        if rest.is_empty() && a.active() == 0 && b.active() == 0 {
            break;
        }
    }
    // The write's bytes may have arrived or not, but nothing lands outside its region unless a
    // forged request had another region registered.
    if !foreign {
        let outside = b.memory()[..REGION.0].iter().chain(&b.memory()[REGION.1..]);
        assert!(outside.into_iter().all(|&x| x == 0), "written outside the registered region");
    }
});
