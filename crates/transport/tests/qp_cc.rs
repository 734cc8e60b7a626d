//! Congestion control through real queue pairs (SPEC T9): every controller still delivers every
//! operation exactly, with one completion per work request, under loss and ECN marks; and each
//! one actually slows its sender when its signal says so — DCQCN on CNPs, DCTCP and AIMD on ECN
//! echoes, TIMELY on a rising RTT — while no congestion control ignores the same signals.

mod common;

use std::sync::Arc;

use common::{every_kind, Kind, Op, Workload};
use irn_transport::pair::{LinkConfig, Pair, PairConfig, Side};
use irn_transport::{
    ControllerFactory, DcqcnConfig, DcqcnFactory, Dur, NoCcFactory, RecoveryConfig, Time,
    TimelyFactory, WindowAlgorithm, WindowConfig, WindowFactory,
};

fn controllers() -> Vec<(&'static str, Arc<dyn ControllerFactory>)> {
    vec![
        ("none", Arc::new(NoCcFactory)),
        (
            "dcqcn",
            Arc::new(DcqcnFactory {
                config: DcqcnConfig::default(),
                seed: 1,
            }),
        ),
        ("timely", Arc::new(TimelyFactory::default())),
        (
            "dctcp",
            Arc::new(WindowFactory(WindowConfig {
                algorithm: WindowAlgorithm::Dctcp,
                ..WindowConfig::default()
            })),
        ),
        (
            "aimd",
            Arc::new(WindowFactory(WindowConfig {
                algorithm: WindowAlgorithm::Aimd,
                ..WindowConfig::default()
            })),
        ),
    ]
}

fn pair(recovery: RecoveryConfig, cc: Arc<dyn ControllerFactory>, link: LinkConfig) -> Pair {
    let mut cfg = PairConfig::new(recovery, link, 7);
    cfg.qp.retry_limit = Some(1_000);
    cfg.qp.cc = cc;
    Pair::new(cfg)
}

#[test]
fn every_controller_delivers_every_operation_under_loss_and_marks() {
    let link = LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        ce_mark: 0.3,
        ..LinkConfig::default()
    };
    for (name, cc) in controllers() {
        for (mode, rec) in [
            ("irn", RecoveryConfig::irn()),
            ("roce", RecoveryConfig::roce()),
        ] {
            for seed in 1..=3 {
                let mut p = pair(rec, cc.clone(), link);
                let w = Workload::post(&mut p, &every_kind(20_000), seed);
                let idle = p.drive_until(Time::ZERO + Dur::from_millis(60_000), 50_000_000);
                assert!(idle, "{name}/{mode} seed {seed}: did not finish");
                if let Err(e) = w.check(&p) {
                    panic!("{name}/{mode} seed {seed}: {e}");
                }
                if let Some(cap) = rec.bdp_cap {
                    assert!(p.max_in_flight_a <= cap, "{name}/{mode}: BDP cap exceeded");
                }
                assert_eq!(p.a.controller().name(), name);
                // B notifies on marked requests, A on marked responses: CNPs flow both ways.
                // (The link loses some of them.)
                assert!(p.b.counters().cnps_sent > 0, "{name}/{mode}: no CNP sent");
                assert!(p.a.counters().cnps_received <= p.b.counters().cnps_sent);
                assert!(p.a.counters().cnps_received > 0, "{name}/{mode}");
            }
        }
    }
}

/// A writes `len` bytes to B over `link`; returns the time its completion came, with the pair
/// as it was then (the controller's state included).
fn write_time(
    rec: RecoveryConfig,
    cc: Arc<dyn ControllerFactory>,
    link: LinkConfig,
    len: usize,
) -> (Dur, Pair) {
    let mut p = pair(rec, cc, link);
    let w = Workload::post(&mut p, &[write(len)], 1);
    p.drive_while(Time::ZERO + Dur::from_millis(1_000), |p| {
        p.done_a.is_empty()
    });
    let done = p.now().since(Time::ZERO);
    assert!(p.drive_until(Time::ZERO + Dur::from_millis(60_000), 50_000_000));
    w.check(&p).expect("exact delivery");
    (done, p)
}

fn write(len: usize) -> Op {
    Op {
        kind: Kind::Write,
        len,
        signaled: true,
        fence: false,
        sges: 1,
    }
}

#[test]
fn each_controller_slows_its_sender_on_its_own_signal_and_none_ignores_it() {
    let clean = LinkConfig::default();
    let marked = LinkConfig {
        ce_mark: 1.0,
        ..LinkConfig::default()
    };
    let len = 4 << 20;
    for (mode, rec) in [
        ("irn", RecoveryConfig::irn()),
        ("roce", RecoveryConfig::roce()),
    ] {
        for (name, cc) in controllers() {
            if name == "timely" {
                continue; // marks mean nothing to TIMELY: see the RTT test below
            }
            let (fast, _) = write_time(rec, cc.clone(), clean, len);
            let (slow, p) = write_time(rec, cc, marked, len);
            // 4 MiB at 40 Gb/s is about 0.9 ms.
            let ratio = slow.as_picos() as f64 / fast.as_picos() as f64;
            if name == "none" {
                assert_eq!(fast, slow, "{mode}: no congestion control ignores marks");
                assert!(p.a.counters().cnps_received > 0);
            } else {
                assert!(
                    ratio > 2.0,
                    "{name}/{mode}: every packet marked, yet only {ratio:.2}× slower \
                     ({fast} → {slow})"
                );
            }
        }
    }
}

#[test]
fn dcqcn_rate_recovers_once_marks_stop() {
    let marked = LinkConfig {
        ce_mark: 1.0,
        ..LinkConfig::default()
    };
    let mut p = pair(
        RecoveryConfig::irn(),
        Arc::new(DcqcnFactory {
            config: DcqcnConfig::default(),
            seed: 1,
        }),
        marked,
    );
    let _w = Workload::post(&mut p, &[write(1 << 20)], 1);
    p.drive_while(Time::ZERO + Dur::from_millis(1_000), |p| {
        p.done_a.is_empty()
    });
    let cut =
        p.a.controller()
            .rate_bps()
            .expect("below line rate after CNPs");
    assert!(cut < 40_000_000_000 / 2, "{cut}");
    // Idle, the increase timer runs: fast recovery, then additive and hyper increase bring it
    // back to line rate, and then it stops asking for timeouts.
    let mut last = cut;
    while let Some(rate) = p.a.controller().rate_bps() {
        assert!(rate >= last, "the rate fell without a CNP");
        last = rate;
        let t =
            p.a.poll_timeout()
                .expect("DCQCN's timer is armed below line rate");
        assert!(t < Time::ZERO + Dur::from_millis(1_000), "no recovery");
        p.a.handle_timeout(t);
    }
    assert_eq!(p.a.controller().next_timer(), None);
    assert_eq!(p.a.poll_timeout(), None);
}

/// Drives A's `len`-byte write while the A → B latency grows by 5 µs every 20 µs (a queue
/// building at a bottleneck); returns the lowest pacing rate A's controller asked for.
fn lowest_rate_while_rtt_grows(cc: Arc<dyn ControllerFactory>) -> u64 {
    let mut p = pair(RecoveryConfig::irn(), cc, LinkConfig::default());
    let _w = Workload::post(&mut p, &[write(4 << 20)], 1);
    let mut lowest = u64::MAX;
    let mut latency = Dur::from_micros(2);
    let mut next = Time::ZERO + Dur::from_micros(20);
    while p.done_a.is_empty() && p.now() < Time::ZERO + Dur::from_millis(1_000) {
        assert!(p.step());
        lowest = lowest.min(p.a.controller().rate_bps().unwrap_or(u64::MAX));
        if p.now() >= next && latency < Dur::from_micros(400) {
            latency = latency + Dur::from_micros(5);
            next = p.now() + Dur::from_micros(20);
            p.set_link(
                Side::A,
                LinkConfig {
                    latency,
                    ..LinkConfig::default()
                },
            );
        }
    }
    lowest
}

#[test]
fn timely_cuts_when_the_round_trip_grows() {
    let timely = lowest_rate_while_rtt_grows(Arc::new(TimelyFactory::default()));
    assert!(
        timely < 20_000_000_000,
        "TIMELY never went below 20 Gb/s ({timely})"
    );
}

/// Every CE-marked request is echoed by exactly one ACK with BECN set under a window
/// controller, in IRN (which ACKs every packet) and in standard RoCE (whose requester then asks
/// for an ACK on every packet). A standard RoCE DCQCN notification point reports with CNPs
/// instead, and ACKs as usual (every 64 packets).
#[test]
fn every_marked_request_is_echoed_once() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let window: Arc<dyn ControllerFactory> = Arc::new(WindowFactory(WindowConfig::default()));
    let dcqcn: Arc<dyn ControllerFactory> = Arc::new(DcqcnFactory::default());
    for (rec, cc, cnp) in [
        (RecoveryConfig::irn(), window.clone(), None),
        (RecoveryConfig::roce(), window.clone(), None),
        (RecoveryConfig::roce(), dcqcn, Some(Dur::from_micros(50))),
    ] {
        let link = LinkConfig {
            ce_mark: 0.3,
            ..LinkConfig::default()
        };
        let mut cfg = PairConfig::new(rec, link, 7);
        cfg.qp.cnp_interval = cnp;
        cfg.qp.cc = cc;
        let mut p = Pair::new(cfg);
        let marked = Arc::new(AtomicU64::new(0));
        let echoed = Arc::new(AtomicU64::new(0));
        let (m, e) = (marked.clone(), echoed.clone());
        p.set_tap(move |to, pkt| {
            let op = pkt.ib.bth.opcode;
            if to == Side::B && op.is_request() && pkt.ecn == irn_wire::Ecn::Ce {
                m.fetch_add(1, Ordering::Relaxed);
            }
            if to == Side::A && op == irn_wire::Opcode::RC_ACKNOWLEDGE && pkt.ib.bth.becn {
                e.fetch_add(1, Ordering::Relaxed);
            }
            true
        });
        let w = Workload::post(&mut p, &[write(1 << 20)], 1);
        assert!(p.drive_until(Time::ZERO + Dur::from_millis(60_000), 50_000_000));
        w.check(&p).expect("exact delivery");
        let (m, e) = (
            marked.load(Ordering::Relaxed),
            echoed.load(Ordering::Relaxed),
        );
        assert!(m > 100, "{m}");
        if cnp.is_some() && rec.wire != irn_transport::Wire::Irn {
            // CNPs report the marks; ACKs come when asked (every 64 packets, and after the
            // retransmissions of timeouts DCQCN's low rates cause), far fewer than the marks.
            assert!(p.b.counters().cnps_sent > 0);
            assert!(p.b.counters().acks_sent * 2 < m, "{m} marks");
        } else {
            assert_eq!(m, e, "{:?}, CNPs {cnp:?}", rec.retransmission);
        }
        if cnp.is_none() {
            assert_eq!(p.b.counters().cnps_sent, 0);
        }
    }
}

/// Standard RoCE under a window and without a timeout (as under PFC): echoes cut the window
/// below what is already in flight, and only ACKs can reopen it — so the requester must have
/// asked for them. A stall here would last forever.
#[test]
fn a_window_over_standard_roce_never_waits_for_an_ack_nobody_will_send() {
    for algorithm in [WindowAlgorithm::Aimd, WindowAlgorithm::Dctcp] {
        let rec = RecoveryConfig {
            rto: irn_transport::RtoPolicy::Disabled,
            ..RecoveryConfig::roce()
        };
        let link = LinkConfig {
            ce_mark: 0.3,
            ..LinkConfig::default()
        };
        let cc = Arc::new(WindowFactory(WindowConfig {
            algorithm,
            ..WindowConfig::default()
        }));
        let mut p = pair(rec, cc, link);
        let w = Workload::post(&mut p, &[write(4 << 20), write(100_000)], 1);
        assert!(
            p.drive_until(Time::ZERO + Dur::from_millis(1_000), 50_000_000),
            "{algorithm:?}: stalled"
        );
        w.check(&p).expect("exact delivery, one completion each");
    }
}

/// A standard RoCE requester asks for ACKs as often as its controller needs feedback: at the
/// end of the message and every 64 packets without congestion control or with DCQCN (whose
/// feedback is CNPs), once per 16 KB segment for TIMELY's RTT samples, on every packet for a
/// window.
#[test]
fn standard_roce_asks_for_acks_as_often_as_its_controller_needs() {
    let packets = 1024u64; // a 1 MiB write of 1 KiB packets
    for (name, cc) in controllers() {
        let (_, p) = write_time(
            RecoveryConfig::roce(),
            cc,
            LinkConfig::default(),
            (packets * 1024) as usize,
        );
        let acks = p.b.counters().acks_sent;
        let expect = match name {
            "none" | "dcqcn" => packets / 64,
            "timely" => packets / 16,
            _ => packets,
        };
        assert_eq!(acks, expect, "{name}");
    }
}

/// What a controller was told about ECN echoes, summed over its queue pair's life.
#[derive(Debug, Default)]
struct EchoTally {
    marked: u64,
    total: u64,
}

#[derive(Debug)]
struct Recorder(Arc<std::sync::Mutex<EchoTally>>);

impl irn_transport::Controller for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }
    fn on_ecn_echo(&mut self, _now: Time, marked: u64, total: u64) {
        let mut t = self.0.lock().expect("not poisoned");
        t.marked += marked;
        t.total += total;
    }
    fn rate_bps(&self) -> Option<u64> {
        None
    }
    fn window(&self) -> Option<u64> {
        None
    }
    fn ack_interval_bytes(&self) -> Option<u64> {
        Some(0)
    }
}

#[derive(Debug, Default)]
struct RecorderFactory(Arc<std::sync::Mutex<EchoTally>>);

impl ControllerFactory for RecorderFactory {
    fn build(&self, _now: Time, _rate: u64, seed: u64) -> Box<dyn irn_transport::Controller> {
        // Only the requester's (A's, QPN 0x11) tally matters.
        let tally = if seed == 0x11 {
            self.0.clone()
        } else {
            Arc::default()
        };
        Box::new(Recorder(tally))
    }
}

/// The fraction of bytes a controller is told were marked matches the fraction of packets the
/// network marked — under loss too, where IRN's NACKs answer the packets behind a hole (their
/// echoes count) and standard RoCE's ACK covers many packets with one echo per marked one.
#[test]
fn the_echoed_fraction_is_the_marked_fraction_under_loss() {
    for rec in [RecoveryConfig::irn(), RecoveryConfig::roce()] {
        let link = LinkConfig {
            ce_mark: 0.2,
            loss: 0.02,
            ..LinkConfig::default()
        };
        let factory = RecorderFactory::default();
        let tally = factory.0.clone();
        let mut cfg = PairConfig::new(rec, link, 3);
        cfg.qp.retry_limit = Some(1_000);
        cfg.qp.cc = Arc::new(factory);
        cfg.qp.cnp_interval = None;
        let mut p = Pair::new(cfg);
        let w = Workload::post(&mut p, &[write(4 << 20)], 1);
        assert!(p.drive_until(Time::ZERO + Dur::from_millis(60_000), 50_000_000));
        w.check(&p).expect("exact delivery");
        let t = tally.lock().expect("not poisoned");
        let f = t.marked as f64 / t.total as f64;
        // Some ACKs are lost on the way back: most bytes are still reported.
        assert!(
            t.total >= 3 << 20,
            "{:?}: only {} bytes reported",
            rec.retransmission,
            t.total
        );
        assert!(
            (0.17..0.23).contains(&f),
            "{:?}: echoed fraction {f:.3}",
            rec.retransmission
        );
    }
}
