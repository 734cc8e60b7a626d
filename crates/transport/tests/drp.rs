//! The DRP endpoint (SPEC T10, seed 003) frame by frame: every branch of the seed's pseudo-code
//! for both ends (valid reply, invalid reply, reply lost once, lost twice → indirect, the
//! indirect buffer drained on the late valid reply, the read's mirror case), the decisions the
//! seed leaves open (a full indirect buffer, bad input), and property tests under loss,
//! duplication and reordering: every transfer delivered exactly, exactly once.

use irn_transport::drp::{
    DrpCompletion, DrpConfig, DrpEndpoint, DrpEvent, DrpMode, DrpOp, DrpRole, DrpStatus,
    TransferMode,
};
use irn_transport::rng::Rng;
use irn_transport::{Dur, Time};
use irn_wire::drp::{
    Drp, DrpRepr, CTRL_CONN_ACK, CTRL_CONN_REQ, CTRL_DATA, CTRL_INDIRECT, CTRL_REL_ACK,
    CTRL_REL_REQ, CTRL_WRITE, STATUS_OK,
};
use proptest::prelude::*;

const MEM: usize = 1 << 20;
const ONE_WAY: Dur = Dur::from_micros(5);
const REG_DELAY: Dur = Dur::from_micros(20);

/// A frame on the wire.
struct Flight {
    at: Time,
    seq: u64,
    to_b: bool,
    bytes: Vec<u8>,
}

type DropRule = Box<dyn FnMut(&DrpRepr, bool) -> bool>;
type RegRule = Box<dyn FnMut(u32, u32) -> bool>;

/// Two endpoints, a wire with a fixed delay, scripted or random drops, and two upper layers
/// that answer registrations after `REG_DELAY` (failing when `reg_fails(tid, attempt)`).
struct Net {
    a: DrpEndpoint,
    b: DrpEndpoint,
    now: Time,
    wire: Vec<Flight>,
    seq: u64,
    regs: Vec<(Time, bool, u32, bool)>,
    attempts: std::collections::BTreeMap<(bool, u32), u32>,
    drop: DropRule,
    reg_fails: RegRule,
    rng: Rng,
    loss: f64,
    dup: f64,
    jitter_us: u64,
    events_a: Vec<DrpEvent>,
    events_b: Vec<DrpEvent>,
    /// Every frame sent, in order, with its direction.
    log: Vec<(bool, DrpRepr)>,
    max_outstanding: u32,
}

impl Net {
    fn new(a: DrpConfig, b: DrpConfig) -> Net {
        Net {
            a: DrpEndpoint::new(a, MEM).expect("config"),
            b: DrpEndpoint::new(b, MEM).expect("config"),
            now: Time::ZERO,
            wire: Vec::new(),
            seq: 0,
            regs: Vec::new(),
            attempts: Default::default(),
            drop: Box::new(|_, _| false),
            reg_fails: Box::new(|_, _| false),
            rng: Rng::new(1),
            loss: 0.0,
            dup: 0.0,
            jitter_us: 0,
            events_a: Vec::new(),
            events_b: Vec::new(),
            log: Vec::new(),
            max_outstanding: 0,
        }
    }

    fn pair(mode: DrpMode) -> Net {
        Net::new(DrpConfig::seed(mode), DrpConfig::seed(mode))
    }

    fn pump(&mut self) {
        let mut buf = Vec::new();
        for from_a in [true, false] {
            loop {
                let ep = if from_a { &mut self.a } else { &mut self.b };
                if !ep.poll_transmit(self.now, &mut buf) {
                    break;
                }
                let repr =
                    DrpRepr::parse(&Drp::new_checked(&buf[..]).expect("frame")).expect("parse");
                self.log.push((from_a, repr));
                if (self.drop)(&repr, from_a) || self.rng.chance(self.loss) {
                    continue;
                }
                let copies = if self.rng.chance(self.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let jitter = if self.jitter_us > 0 {
                        Dur::from_nanos(self.rng.below(self.jitter_us * 1000))
                    } else {
                        Dur::ZERO
                    };
                    self.seq += 1;
                    self.wire.push(Flight {
                        at: self.now + ONE_WAY + jitter,
                        seq: self.seq,
                        to_b: from_a,
                        bytes: buf.clone(),
                    });
                }
            }
        }
        for at_b in [false, true] {
            let ep = if at_b { &mut self.b } else { &mut self.a };
            while let Some(ev) = ep.poll_event() {
                if let DrpEvent::Register { tid, .. } = ev {
                    let n = self.attempts.entry((at_b, tid)).or_insert(0);
                    *n += 1;
                    let ok = !(self.reg_fails)(tid, *n);
                    self.regs.push((self.now + REG_DELAY, at_b, tid, ok));
                }
                if at_b {
                    self.events_b.push(ev);
                } else {
                    self.events_a.push(ev);
                }
            }
        }
    }

    /// Runs until nothing is left to do or `until`.
    fn run_until(&mut self, until: Time) {
        loop {
            self.pump();
            let wire = self.wire.iter().map(|f| (f.at, f.seq)).min();
            let reg = self.regs.iter().map(|r| r.0).min();
            let next = [
                wire.map(|w| w.0),
                reg,
                self.a.poll_timeout(),
                self.b.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next.filter(|&t| t <= until) else {
                break;
            };
            self.now = next;
            if let Some((at, seq)) = wire.filter(|w| w.0 == next) {
                let i = self
                    .wire
                    .iter()
                    .position(|f| f.at == at && f.seq == seq)
                    .expect("present");
                let f = self.wire.swap_remove(i);
                let ep = if f.to_b { &mut self.b } else { &mut self.a };
                ep.handle_frame(next, &f.bytes);
                self.max_outstanding = self.max_outstanding.max(self.outstanding());
                continue;
            }
            if let Some(i) = self.regs.iter().position(|r| r.0 == next) {
                let (_, at_b, tid, ok) = self.regs.swap_remove(i);
                let ep = if at_b { &mut self.b } else { &mut self.a };
                ep.registration_done(next, tid, ok);
                continue;
            }
            self.a.handle_timeout(next);
            self.b.handle_timeout(next);
        }
    }

    fn run(&mut self) {
        self.run_until(Time::from_picos(u64::MAX / 2));
    }

    /// Data frames of any transfer sent but not yet acknowledged, from the log (the largest
    /// SN sent minus the last cumulative ACK, per direction of transfer 1).
    fn outstanding(&self) -> u32 {
        let mut sent_max: Option<u32> = None;
        let mut acked = 0;
        for (_, r) in &self.log {
            if r.control & CTRL_DATA != 0 && r.tid == 1 {
                sent_max = Some(sent_max.map_or(r.sn, |m: u32| m.max(r.sn)));
            } else if r.control & 0xf8 == 0 && r.tid == 1 {
                acked = acked.max(r.ackn);
            }
        }
        sent_max.map_or(0, |m| (m + 1).saturating_sub(acked))
    }

    fn completions(events: &[DrpEvent]) -> Vec<&DrpCompletion> {
        events
            .iter()
            .filter_map(|e| match e {
                DrpEvent::Complete(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    fn fill(&mut self, at: usize, len: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        self.a.memory_mut()[at..at + len].copy_from_slice(&data);
        data
    }

    fn sent(&self, from_a: bool, bits: u8) -> usize {
        self.log
            .iter()
            .filter(|(a, r)| {
                *a == from_a && r.control & bits == bits && r.control & 0xf8 == bits & 0xf8
            })
            .count()
    }
}

fn is(r: &DrpRepr, kind: u8) -> bool {
    r.control & (CTRL_CONN_REQ | CTRL_CONN_ACK | CTRL_DATA | CTRL_REL_REQ | CTRL_REL_ACK) == kind
}

const LEN: usize = 128 * 1024;

/// A 128 KB write from `a` to `b`: the data lands, both ends complete once.
fn write_and_check(net: &mut Net) -> (DrpCompletion, DrpCompletion) {
    let data = net.fill(0, LEN, 7);
    net.a
        .post_write(net.now, 0, 4096, LEN as u64)
        .expect("post");
    net.run();
    assert_eq!(&net.b.memory()[4096..4096 + LEN], &data[..], "data exact");
    assert!(
        net.b.memory()[..4096].iter().all(|&x| x == 0),
        "nothing before"
    );
    assert!(
        net.b.memory()[4096 + LEN..].iter().all(|&x| x == 0),
        "nothing after"
    );
    let ca = Net::completions(&net.events_a);
    let cb = Net::completions(&net.events_b);
    assert_eq!(ca.len(), 1, "one completion at the initiator: {ca:?}");
    assert_eq!(cb.len(), 1, "one completion at the responder: {cb:?}");
    assert_eq!(ca[0].status, DrpStatus::Success);
    assert_eq!(ca[0].role, DrpRole::Initiator);
    assert_eq!(cb[0].role, DrpRole::Responder);
    assert_eq!(net.a.active() + net.b.active(), 0, "state released");
    assert_eq!(net.b.indirect_bytes(), 0);
    (ca[0].clone(), cb[0].clone())
}

fn connected(events: &[DrpEvent]) -> Vec<bool> {
    events
        .iter()
        .filter_map(|e| match e {
            DrpEvent::Connected { simulated, .. } => Some(*simulated),
            _ => None,
        })
        .collect()
}

#[test]
fn valid_reply_gives_a_direct_write() {
    for mode in [DrpMode::Traditional, DrpMode::Dynamic] {
        let mut net = Net::pair(mode);
        let (ca, cb) = write_and_check(&mut net);
        assert_eq!(ca.mode, TransferMode::Direct);
        assert_eq!(cb.mode, TransferMode::Direct);
        assert_eq!(ca.setup_attempts, 1);
        assert_eq!(
            connected(&net.events_a),
            vec![false],
            "one real reply passed up"
        );
        assert_eq!(net.b.counters().indirect_frames, 0);
        // Timeline: request, registration, reply, 128 frames, release: no timer fired.
        assert_eq!(net.a.counters().timeouts + net.b.counters().timeouts, 0);
        assert_eq!(net.a.counters().data_tx, 128);
        // The first data frame leaves only after the reply arrived.
        let first_data = net
            .log
            .iter()
            .position(|(_, r)| is(r, CTRL_DATA))
            .expect("data");
        let reply = net
            .log
            .iter()
            .position(|(_, r)| is(r, CTRL_CONN_ACK))
            .expect("reply");
        assert!(reply < first_data);
    }
}

#[test]
fn window_of_eight_frames() {
    let mut net = Net::pair(DrpMode::Dynamic);
    write_and_check(&mut net);
    assert_eq!(
        net.max_outstanding, 8,
        "never more than 8 frames unacknowledged"
    );
}

#[test]
fn invalid_reply_traditional_waits_dynamic_goes_indirect() {
    // Registration fails the first time.
    let mut trad = Net::pair(DrpMode::Traditional);
    trad.reg_fails = Box::new(|_, attempt| attempt == 1);
    let (ca, _) = write_and_check(&mut trad);
    assert_eq!(ca.mode, TransferMode::Direct);
    assert_eq!(ca.setup_attempts, 2, "re-requested after the timer");
    assert_eq!(trad.a.counters().invalid_replies, 1);
    assert_eq!(connected(&trad.events_a), vec![false]);
    // No data before the valid reply.
    let first_data = trad
        .log
        .iter()
        .position(|(_, r)| is(r, CTRL_DATA))
        .expect("data");
    let valid = trad
        .log
        .iter()
        .position(|(_, r)| is(r, CTRL_CONN_ACK) && r.status == STATUS_OK)
        .expect("valid reply");
    assert!(valid < first_data);

    let mut dynamic = Net::pair(DrpMode::Dynamic);
    dynamic.reg_fails = Box::new(|_, attempt| attempt == 1);
    let (ca, cb) = write_and_check(&mut dynamic);
    assert_eq!(ca.mode, TransferMode::Indirect);
    assert_eq!(cb.mode, TransferMode::Indirect);
    assert_eq!(
        connected(&dynamic.events_a),
        vec![true],
        "a simulated reply, the real one absorbed"
    );
    assert_eq!(dynamic.a.counters().simulated_replies, 1);
    // Data went before the valid reply, parked, and was drained when registration succeeded.
    let c = dynamic.b.counters();
    assert!(c.indirect_frames > 0);
    assert_eq!(c.indirect_drained, c.indirect_frames * 1024);
    assert!(
        ca.finished.since(ca.started) < trad_time(&trad),
        "dynamic is faster"
    );
}

fn trad_time(net: &Net) -> Dur {
    let c = Net::completions(&net.events_a)[0];
    c.finished.since(c.started)
}

#[test]
fn reply_lost_once_both_re_request_and_go_direct() {
    for mode in [DrpMode::Traditional, DrpMode::Dynamic] {
        let mut net = Net::pair(mode);
        let mut lost = 0;
        net.drop = Box::new(move |r, to_b| {
            let hit = !to_b && is(r, CTRL_CONN_ACK) && lost == 0;
            lost += u32::from(hit);
            hit
        });
        let (ca, _) = write_and_check(&mut net);
        assert_eq!(ca.mode, TransferMode::Direct, "{mode:?}");
        assert_eq!(ca.setup_attempts, 2);
        assert_eq!(connected(&net.events_a), vec![false]);
        // The responder registered once and answered the duplicate request from its status.
        assert_eq!(Net::completions(&net.events_b)[0].setup_attempts, 1);
    }
}

#[test]
fn reply_lost_twice_goes_indirect_on_the_second_expiry() {
    // Every reply lost until the fourth: traditional waits for it, dynamic goes indirect at the
    // second expiry (the responder had registered: data lands directly in memory).
    for mode in [DrpMode::Traditional, DrpMode::Dynamic] {
        let mut net = Net::pair(mode);
        let mut replies = 0;
        net.drop = Box::new(move |r, to_b| {
            if !to_b && is(r, CTRL_CONN_ACK) {
                replies += 1;
                return replies < 4;
            }
            false
        });
        let (ca, cb) = write_and_check(&mut net);
        let timeout = DrpConfig::seed(mode).setup_timeout;
        let first_data = net
            .log
            .iter()
            .position(|(_, r)| is(r, CTRL_DATA))
            .expect("data");
        let requests_before = net.log[..first_data]
            .iter()
            .filter(|(_, r)| is(r, CTRL_CONN_REQ))
            .count();
        match mode {
            DrpMode::Traditional => {
                assert_eq!(ca.mode, TransferMode::Direct);
                assert_eq!(
                    requests_before, 4,
                    "data only after the fourth request's reply"
                );
                assert!(ca.finished.since(ca.started) > Dur::from_picos(3 * timeout.as_picos()));
            }
            DrpMode::Dynamic => {
                assert_eq!(ca.mode, TransferMode::Indirect);
                assert_eq!(connected(&net.events_a), vec![true]);
                // Request, resend at the first expiry, resend and go at the second.
                assert_eq!(requests_before, 3);
                assert_eq!(net.log[first_data].1.control & CTRL_INDIRECT, CTRL_INDIRECT);
                assert_eq!(cb.mode, TransferMode::Indirect);
                assert_eq!(
                    net.b.counters().indirect_frames,
                    0,
                    "registered: placed directly"
                );
                assert!(ca.finished.since(ca.started) < Dur::from_picos(4 * timeout.as_picos()));
            }
        }
    }
}

#[test]
fn request_lost_data_parked_before_the_request_then_drained() {
    // Dynamic: the first two requests are lost, so the responder meets the data before it
    // knows the transfer; it parks it and places it after the third request's registration.
    let mut net = Net::pair(DrpMode::Dynamic);
    let mut requests = 0;
    net.drop = Box::new(move |r, to_b| {
        if to_b && is(r, CTRL_CONN_REQ) {
            requests += 1;
            return requests <= 2;
        }
        false
    });
    let (ca, cb) = write_and_check(&mut net);
    assert_eq!(ca.mode, TransferMode::Indirect);
    assert_eq!(cb.mode, TransferMode::Indirect);
    let c = net.b.counters();
    assert!(c.indirect_frames >= 8, "{c:?}");
    assert_eq!(c.indirect_drained, c.indirect_frames * 1024);
}

#[test]
fn full_indirect_buffer_stops_accepting_and_recovers() {
    // Registration fails three times; the buffer holds 16 frames. The sender stalls on
    // unacknowledged frames, then finishes once registration succeeds and the buffer drains.
    let mut cfg = DrpConfig::seed(DrpMode::Dynamic);
    cfg.indirect_buffer = 16 * 1024;
    let mut net = Net::new(DrpConfig::seed(DrpMode::Dynamic), cfg);
    net.reg_fails = Box::new(|_, attempt| attempt <= 3);
    let (ca, _) = write_and_check(&mut net);
    assert_eq!(ca.mode, TransferMode::Indirect);
    let c = net.b.counters();
    assert_eq!(c.indirect_frames, 16);
    assert!(c.indirect_full > 0, "{c:?}");
    assert!(net.b.counters().indirect_drained == 16 * 1024);
}

#[test]
fn traditional_responder_has_no_indirect_buffer() {
    // A dynamic initiator against a traditional responder still delivers: indirect frames are
    // refused (unacknowledged) until the registration is done.
    let mut net = Net::new(
        DrpConfig::seed(DrpMode::Dynamic),
        DrpConfig::seed(DrpMode::Traditional),
    );
    net.reg_fails = Box::new(|_, attempt| attempt == 1);
    write_and_check(&mut net);
    assert_eq!(net.b.counters().indirect_frames, 0);
    assert!(net.b.counters().indirect_full > 0);
}

fn read_and_check(net: &mut Net) -> (DrpCompletion, DrpCompletion) {
    let mut rng = Rng::new(3);
    let data: Vec<u8> = (0..LEN).map(|_| rng.next_u64() as u8).collect();
    net.b.memory_mut()[8192..8192 + LEN].copy_from_slice(&data);
    net.a
        .post_read(net.now, 100, 8192, LEN as u64)
        .expect("post");
    net.run();
    assert_eq!(&net.a.memory()[100..100 + LEN], &data[..], "data exact");
    assert!(net.a.memory()[..100].iter().all(|&x| x == 0));
    assert!(net.a.memory()[100 + LEN..].iter().all(|&x| x == 0));
    let ca = Net::completions(&net.events_a);
    let cb = Net::completions(&net.events_b);
    assert_eq!((ca.len(), cb.len()), (1, 1), "{ca:?} {cb:?}");
    assert_eq!(ca[0].status, DrpStatus::Success);
    assert_eq!(ca[0].op, DrpOp::Read);
    assert_eq!(net.a.active() + net.b.active(), 0);
    (ca[0].clone(), cb[0].clone())
}

#[test]
fn read_direct_is_a_three_way_handshake() {
    for mode in [DrpMode::Traditional, DrpMode::Dynamic] {
        let mut net = Net::pair(mode);
        let (ca, cb) = read_and_check(&mut net);
        assert_eq!(ca.mode, TransferMode::Direct);
        assert_eq!(cb.mode, TransferMode::Direct);
        // Request (a), reply (b), confirmation (a), then data from b.
        let kinds: Vec<(bool, u8)> = net
            .log
            .iter()
            .take(4)
            .map(|(a, r)| (*a, r.control & 0xf8))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (true, CTRL_CONN_REQ),
                (false, CTRL_CONN_ACK),
                (true, 0),
                (false, CTRL_DATA)
            ]
        );
    }
}

#[test]
fn read_mirror_lost_valid_reply_responder_goes_indirect() {
    // Every reply lost: the traditional responder can only keep repeating it (and the initiator
    // its request) — the read fails after the retries; the dynamic responder sends the data at
    // its second expiry and the initiator takes the data as the reply. No indirect buffer.
    let mut net = Net::pair(DrpMode::Dynamic);
    net.drop = Box::new(|r, to_b| !to_b && is(r, CTRL_CONN_ACK));
    let (ca, cb) = read_and_check(&mut net);
    assert_eq!(ca.mode, TransferMode::Indirect);
    assert_eq!(cb.mode, TransferMode::Indirect);
    assert_eq!(
        net.a.counters().indirect_frames + net.b.counters().indirect_frames,
        0
    );
    let first_data = net
        .log
        .iter()
        .position(|(_, r)| is(r, CTRL_DATA))
        .expect("data");
    assert_eq!(net.log[first_data].1.control & CTRL_INDIRECT, CTRL_INDIRECT);

    let mut trad = Net::pair(DrpMode::Traditional);
    trad.drop = Box::new(|r, to_b| !to_b && is(r, CTRL_CONN_ACK));
    trad.b.memory_mut()[0] = 1;
    trad.a
        .post_read(Time::ZERO, 0, 0, LEN as u64)
        .expect("post");
    trad.run();
    let ca = Net::completions(&trad.events_a);
    assert_eq!(ca.len(), 1);
    assert_eq!(
        ca[0].status,
        DrpStatus::RetryExceeded,
        "a failed transfer says so"
    );
    assert_eq!(trad.log.iter().filter(|(_, r)| is(r, CTRL_DATA)).count(), 0);
}

#[test]
fn read_with_failed_registration_waits_for_the_re_request() {
    for mode in [DrpMode::Traditional, DrpMode::Dynamic] {
        let mut net = Net::pair(mode);
        net.reg_fails = Box::new(|_, attempt| attempt == 1);
        let (ca, _) = read_and_check(&mut net);
        assert_eq!(
            ca.mode,
            TransferMode::Direct,
            "a read never sends unregistered memory"
        );
        assert_eq!(ca.setup_attempts, 2);
    }
}

#[test]
fn release_reply_lost_is_answered_again() {
    let mut net = Net::pair(DrpMode::Dynamic);
    let mut lost = false;
    net.drop = Box::new(move |r, to_b| {
        let hit = !to_b && is(r, CTRL_REL_ACK) && !lost;
        lost |= hit;
        hit
    });
    write_and_check(&mut net);
    assert_eq!(net.b.counters().duplicate_releases, 1);
    assert_eq!(net.sent(true, CTRL_REL_REQ), 2);
}

#[test]
fn bad_input_is_counted_never_a_panic() {
    let mut net = Net::pair(DrpMode::Dynamic);
    write_and_check(&mut net);
    let now = net.now;
    let b = &mut net.b;
    let before = b.counters().clone();
    let mut buf = vec![0u8; 36 + 4];
    // Data for an unknown TID in direct mode.
    DrpRepr {
        control: CTRL_DATA | CTRL_WRITE,
        tid: 99,
        len: 4,
        ..DrpRepr::default()
    }
    .emit(&mut buf)
    .expect("emit");
    b.handle_frame(now, &buf);
    assert_eq!(b.counters().unknown_tid, before.unknown_tid + 1);
    // Data for the finished transfer, even marked indirect.
    DrpRepr {
        control: CTRL_DATA | CTRL_WRITE | CTRL_INDIRECT,
        tid: 1,
        len: 4,
        ..DrpRepr::default()
    }
    .emit(&mut buf)
    .expect("emit");
    b.handle_frame(now, &buf);
    assert_eq!(b.counters().unknown_tid, before.unknown_tid + 2);
    // Truncated frames: every prefix.
    for n in 0..buf.len() {
        b.handle_frame(now, &buf[..n]);
    }
    assert_eq!(b.counters().malformed, before.malformed + buf.len() as u64);
    // A release of a TID it never heard of.
    let mut rel = vec![0u8; 36];
    DrpRepr {
        control: CTRL_REL_REQ | CTRL_WRITE,
        tid: 1234,
        ..DrpRepr::default()
    }
    .emit(&mut rel)
    .expect("emit");
    b.handle_frame(now, &rel);
    assert_eq!(b.counters().refused_releases, before.refused_releases + 1);
    // A duplicate release of the finished transfer is answered again.
    DrpRepr {
        control: CTRL_REL_REQ | CTRL_WRITE,
        tid: 1,
        sn: 128,
        ..DrpRepr::default()
    }
    .emit(&mut rel)
    .expect("emit");
    b.handle_frame(now, &rel);
    assert_eq!(
        b.counters().duplicate_releases,
        before.duplicate_releases + 1
    );
    let mut out = Vec::new();
    assert!(b.poll_transmit(now, &mut out));
    assert_eq!(out[0] & CTRL_REL_ACK, CTRL_REL_ACK);
    // A reply for the finished transfer at the initiator.
    let a = &mut net.a;
    DrpRepr {
        control: CTRL_CONN_ACK | CTRL_WRITE,
        tid: 1,
        ..DrpRepr::default()
    }
    .emit(&mut rel)
    .expect("emit");
    a.handle_frame(now, &rel);
    assert_eq!(a.counters().stale_replies, 1);
    // A registration answer nobody asked for.
    b.registration_done(now, 77, true);
    assert_eq!(b.counters().stray_registrations, 1);
    // Impossible control bits: set-up request and data at once.
    DrpRepr {
        control: CTRL_CONN_REQ | CTRL_DATA,
        tid: 5,
        ..DrpRepr::default()
    }
    .emit(&mut rel)
    .expect("emit");
    b.handle_frame(now, &rel);
    assert_eq!(b.counters().bad_control, 1);
    assert_eq!(
        Net::completions(&net.events_b).len(),
        1,
        "nothing completed twice"
    );
}

#[test]
fn data_outside_the_registered_region_is_not_placed() {
    let mut net = Net::pair(DrpMode::Dynamic);
    write_and_check(&mut net);
    // A second transfer's responder region is [4096, 4096 + LEN); a forged frame of it for
    // address 0 must not land.
    let data = net.fill(0, 2048, 9);
    let tid = net.a.post_write(net.now, 0, 4096, 2048).expect("post");
    let end = net.now + Dur::from_micros(30);
    net.run_until(end); // registered, not yet released
    let mut buf = vec![0u8; 36 + 16];
    DrpRepr {
        control: CTRL_DATA | CTRL_WRITE,
        tid,
        sn: 5,
        dba: 0,
        len: 16,
        ..DrpRepr::default()
    }
    .emit(&mut buf)
    .expect("emit");
    buf[36..].fill(0xAB);
    let now = net.now;
    net.b.handle_frame(now, &buf);
    assert_eq!(net.b.counters().out_of_region, 16);
    net.run();
    assert!(net.b.memory()[..4096].iter().all(|&x| x == 0));
    assert_eq!(&net.b.memory()[4096..4096 + 2048], &data[..]);
}

#[test]
fn invalid_configuration_names_the_field() {
    let mut c = DrpConfig::seed(DrpMode::Dynamic);
    c.window = 0;
    let e = DrpEndpoint::new(c, 10).expect_err("window 0");
    assert_eq!(e.field, "window");
    let mut c = DrpConfig::seed(DrpMode::Dynamic);
    c.setup_timeout = Dur::ZERO;
    assert_eq!(
        DrpEndpoint::new(c, 10).expect_err("timer").field,
        "setup_timeout"
    );
    let ep = DrpEndpoint::new(DrpConfig::seed(DrpMode::Dynamic), 10);
    let mut ep = ep.expect("ok");
    assert!(ep.post_write(Time::ZERO, 8, 0, 3).is_err(), "beyond memory");
    assert!(
        ep.post_write(Time::ZERO, u64::MAX, 0, 3).is_err(),
        "overflow"
    );
    assert_eq!(ep.active(), 0);
}

#[derive(Debug, Clone)]
struct Job {
    read: bool,
    len: usize,
    a_to_b: bool,
}

fn job() -> impl Strategy<Value = Job> {
    (any::<bool>(), 0usize..20_000, any::<bool>()).prop_map(|(read, len, a_to_b)| Job {
        read,
        len,
        a_to_b,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Under loss up to 20 %, duplication, reordering and failed registrations, in both modes
    /// and both directions at once: every transfer completes exactly once, successfully, with
    /// its bytes exact and nothing written elsewhere.
    #[test]
    fn every_transfer_exact_and_once(
        jobs in proptest::collection::vec(job(), 1..6),
        seed in any::<u64>(),
        loss in 0.0f64..0.2,
        dup in 0.0f64..0.1,
        frp in 0.0f64..0.3,
        dynamic in any::<bool>(),
        payload_a in prop_oneof![Just(1024u32), Just(100u32), Just(1500u32)],
        payload_b in prop_oneof![Just(1024u32), Just(100u32), Just(1500u32)],
    ) {
        // Each end frames the data it sends with its own payload size.
        let mode = if dynamic { DrpMode::Dynamic } else { DrpMode::Traditional };
        let mut cfg = DrpConfig::seed(mode);
        cfg.payload = payload_a;
        cfg.setup_timeout = Dur::from_micros(200);
        cfg.data_timeout = Dur::from_micros(200);
        cfg.max_retries = 200;
        let mut cfg_b = cfg.clone();
        cfg_b.payload = payload_b;
        let mut net = Net::new(cfg, cfg_b);
        net.rng = Rng::new(seed);
        net.loss = loss;
        net.dup = dup;
        net.jitter_us = 20;
        let mut frng = Rng::new(seed ^ 0x5eed);
        net.reg_fails = Box::new(move |_, _| frp > 0.0 && frng.chance(frp));
        // Each job has its own 32 KB slot on both sides: sources filled, destinations zero.
        let mut expect_a = vec![0u8; MEM];
        let mut expect_b = vec![0u8; MEM];
        let mut rng = Rng::new(seed ^ 1);
        for (i, j) in jobs.iter().enumerate() {
            let slot = i * 32 * 1024;
            let data: Vec<u8> = (0..j.len).map(|_| rng.next_u64() as u8 | 1).collect();
            let (src, dst, src_mem, dst_mem) = match (j.read, j.a_to_b) {
                // Data from a to b: a writes, or b reads.
                (false, true) | (true, false) => (&mut net.a, &mut net.b, &mut expect_a, &mut expect_b),
                _ => (&mut net.b, &mut net.a, &mut expect_b, &mut expect_a),
            };
            src.memory_mut()[slot..slot + j.len].copy_from_slice(&data);
            src_mem[slot..slot + j.len].copy_from_slice(&data);
            dst_mem[slot + 512..slot + 512 + j.len].copy_from_slice(&data);
            let _ = dst;
            let ep = if j.a_to_b { &mut net.a } else { &mut net.b };
            let r = if j.read {
                ep.post_read(Time::ZERO, (slot + 512) as u64, slot as u64, j.len as u64)
            } else {
                ep.post_write(Time::ZERO, slot as u64, (slot + 512) as u64, j.len as u64)
            };
            prop_assert!(r.is_ok());
        }
        net.run();
        let ca = Net::completions(&net.events_a);
        let cb = Net::completions(&net.events_b);
        let initiated_a = jobs.iter().filter(|j| j.a_to_b).count();
        let initiated_b = jobs.len() - initiated_a;
        let count = |cs: &[&DrpCompletion], role| cs.iter().filter(|c| c.role == role).count();
        prop_assert_eq!(count(&ca, DrpRole::Initiator), initiated_a);
        prop_assert_eq!(count(&cb, DrpRole::Initiator), initiated_b);
        prop_assert!(ca.iter().chain(cb.iter()).all(|c| c.status == DrpStatus::Success),
            "{:?} {:?}", ca, cb);
        // Each initiator TID completes once.
        let mut tids: Vec<(bool, u32)> = ca.iter().filter(|c| c.role == DrpRole::Initiator).map(|c| (true, c.tid))
            .chain(cb.iter().filter(|c| c.role == DrpRole::Initiator).map(|c| (false, c.tid))).collect();
        tids.sort_unstable();
        let n = tids.len();
        tids.dedup();
        prop_assert_eq!(tids.len(), n);
        prop_assert!(net.a.memory() == &expect_a[..], "a's memory differs");
        prop_assert!(net.b.memory() == &expect_b[..], "b's memory differs");
        prop_assert_eq!(net.a.indirect_bytes() + net.b.indirect_bytes(), 0);
    }

    /// Arbitrary bytes never panic an endpoint in any state.
    #[test]
    fn arbitrary_frames_never_panic(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 1..40), seed in any::<u64>()) {
        let mut net = Net::pair(DrpMode::Dynamic);
        net.rng = Rng::new(seed);
        net.fill(0, 4000, seed);
        net.a.post_write(Time::ZERO, 0, 0, 4000).expect("post");
        net.run_until(Time::ZERO + Dur::from_micros(40));
        for (i, f) in frames.iter().enumerate() {
            let now = net.now + Dur::from_nanos(i as u64);
            net.b.handle_frame(now, f);
            net.a.handle_frame(now, f);
        }
        net.run();
        let c = net.a.counters().clone();
        prop_assert!(c.frames_rx > 0);
    }
}

#[test]
fn regions_that_wrap_or_exceed_memory_are_refused_not_a_panic() {
    // A read request whose initiator region wraps the address space: counted, never answered.
    let mut net = Net::pair(DrpMode::Dynamic);
    let mut buf = vec![0u8; 36];
    DrpRepr {
        control: CTRL_CONN_REQ,
        tid: 9,
        sba: u64::MAX - 15,
        dba: 0,
        len: 4096,
        ..DrpRepr::default()
    }
    .emit(&mut buf)
    .expect("emit");
    net.b.handle_frame(Time::ZERO, &buf);
    assert_eq!(net.b.counters().bad_regions, 1);
    assert_eq!(net.b.active(), 0);
    // A request for a region beyond the responder's memory: the registration fails whatever the
    // upper layer says, so the transfer fails cleanly at the initiator.
    let mut net = Net::pair(DrpMode::Dynamic);
    net.a
        .post_write(Time::ZERO, 0, MEM as u64 - 100, 4096)
        .expect("post");
    net.run();
    let ca = Net::completions(&net.events_a);
    assert_eq!(ca.len(), 1);
    assert_eq!(ca[0].status, DrpStatus::RetryExceeded);
    assert!(net.b.counters().bad_regions > 0);
    assert_eq!(net.b.indirect_bytes(), 0);
    // Posting a remote region that wraps is refused.
    assert!(net.a.post_write(Time::ZERO, 0, u64::MAX - 10, 100).is_err());
    assert!(net.a.post_read(Time::ZERO, 0, u64::MAX, 2).is_err());
}

#[test]
fn an_abandoned_transfer_is_forgotten_and_its_buffer_freed() {
    // Registration always fails: the dynamic initiator sends everything indirect, then gives
    // up; the responder forgets the transfer once the initiator has been silent long enough,
    // and the parked bytes are free again.
    let mut net = Net::pair(DrpMode::Dynamic);
    net.reg_fails = Box::new(|_, _| true);
    net.fill(0, 64 * 1024, 1);
    net.a.post_write(Time::ZERO, 0, 0, 64 * 1024).expect("post");
    net.run();
    assert_eq!(
        Net::completions(&net.events_a)[0].status,
        DrpStatus::RetryExceeded
    );
    assert!(net.b.counters().indirect_frames > 0);
    assert_eq!(net.b.counters().abandoned, 1);
    assert_eq!(net.b.active(), 0);
    assert_eq!(
        net.b.indirect_bytes(),
        0,
        "the buffer is free for the next transfer"
    );
    assert!(
        net.b.memory().iter().all(|&x| x == 0),
        "nothing placed unregistered"
    );
    // Forged indirect frames that the buffer cannot take open no entry.
    let mut cfg = DrpConfig::seed(DrpMode::Dynamic);
    cfg.indirect_buffer = 0;
    let mut ep = DrpEndpoint::new(cfg, 1024).expect("config");
    let mut frame = vec![0u8; 36 + 8];
    for tid in 1..100 {
        DrpRepr {
            control: CTRL_DATA | CTRL_WRITE | CTRL_INDIRECT,
            tid,
            len: 8,
            ..DrpRepr::default()
        }
        .emit(&mut frame)
        .expect("emit");
        ep.handle_frame(Time::ZERO, &frame);
    }
    assert_eq!(ep.active(), 0);
    assert_eq!(ep.counters().indirect_full, 99);
}

#[test]
fn zero_length_transfers_complete_without_a_timeout() {
    for mode in [DrpMode::Traditional, DrpMode::Dynamic] {
        let mut net = Net::pair(mode);
        net.a.post_write(Time::ZERO, 0, 0, 0).expect("post");
        net.a.post_read(Time::ZERO, 0, 0, 0).expect("post");
        net.run();
        let ca = Net::completions(&net.events_a);
        assert_eq!(ca.len(), 2, "{mode:?}");
        assert!(ca.iter().all(|c| c.status == DrpStatus::Success));
        assert_eq!(
            net.a.counters().timeouts + net.b.counters().timeouts,
            0,
            "{mode:?}"
        );
    }
}

#[test]
fn a_forged_read_frame_does_not_stand_in_for_the_connection() {
    // The read's request is lost; a frame outside the read's region arrives: it is dropped and
    // the initiator goes on asking, and the read completes.
    let mut net = Net::pair(DrpMode::Traditional);
    let mut requests = 0;
    net.drop = Box::new(move |r, to_b| {
        if to_b && is(r, CTRL_CONN_REQ) {
            requests += 1;
            return requests == 1;
        }
        false
    });
    net.b.memory_mut()[..100].fill(7);
    let tid = net.a.post_read(Time::ZERO, 1000, 0, 100).expect("post");
    net.pump();
    let mut frame = vec![0u8; 36 + 4];
    DrpRepr {
        control: CTRL_DATA,
        tid,
        sn: 0,
        sba: 0,
        len: 4,
        ..DrpRepr::default()
    }
    .emit(&mut frame)
    .expect("emit");
    net.a.handle_frame(Time::ZERO, &frame);
    assert_eq!(net.a.counters().out_of_region, 4);
    net.run();
    let ca = Net::completions(&net.events_a);
    assert_eq!(ca[0].status, DrpStatus::Success);
    assert_eq!(ca[0].mode, TransferMode::Direct);
    assert!(net.a.memory()[1000..1100].iter().all(|&x| x == 7));
    assert!(net.a.memory()[..1000].iter().all(|&x| x == 0));
}
