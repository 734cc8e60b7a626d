//! The simulator's way of running the core: memory that checks keys and bounds but holds no
//! bytes, and packets whose payload is a length only.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use irn_transport::pair::connect;
use irn_transport::{
    Access, CheckedMemory, Completion, ControllerFactory, DcqcnFactory, Dur, NoCcFactory, QpAttr,
    QpConfig, QueuePair, RecoveryConfig, RecvWr, Remote, SendOp, SendWr, Sge, Time, TimelyConfig,
    TimelyFactory, Transmit, WcOpcode, WcStatus,
};
use irn_wire::{Ecn, IbRepr, NakCode, Opcode, Psn, Syndrome};

#[test]
fn every_operation_runs_without_payload_bytes() {
    for rec in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let t = Time::ZERO;
        let cfg = QpConfig {
            recovery: rec,
            ..QpConfig::default()
        };
        let mut a = QueuePair::new(
            t,
            QpConfig {
                qpn: 1,
                ..cfg.clone()
            },
        )
        .expect("a valid queue-pair configuration");
        let mut b = QueuePair::new(t, QpConfig { qpn: 2, ..cfg })
            .expect("a valid queue-pair configuration");
        connect(&mut a, &QpAttr::default(), 2, Psn::new(10), Psn::new(20));
        connect(&mut b, &QpAttr::default(), 1, Psn::new(20), Psn::new(10));
        let mut ma = CheckedMemory::new(1);
        let mut mb = CheckedMemory::new(2);
        let la = ma.alloc(1 << 20);
        let ka = ma.register(la, 1 << 20, Access::LOCAL_WRITE).expect("reg");
        let rb = mb.alloc(1 << 20);
        let kb = mb.register(rb, 1 << 20, Access::ALL).expect("reg");
        let remote = Remote {
            addr: rb,
            rkey: kb.rkey,
        };
        let local = |len: u32| {
            irn_transport::sgl![Sge {
                addr: la,
                len,
                lkey: ka.lkey,
            }]
        };
        let ops = [
            (SendOp::Write(remote), 300_000),
            (SendOp::Read(remote), 200_000),
            (SendOp::Send, 5_000),
            (SendOp::WriteWithImm(remote, 7), 10),
            (SendOp::FetchAdd { remote, add: 1 }, 8),
        ];
        for _ in 0..2 {
            b.post_recv(RecvWr {
                wr_id: 50,
                sg_list: irn_transport::sgl![Sge {
                    addr: rb,
                    len: 1 << 20,
                    lkey: kb.lkey,
                }],
            })
            .expect("post recv");
        }
        for (i, (op, len)) in ops.iter().enumerate() {
            a.post_send(SendWr {
                wr_id: i as u64,
                op: *op,
                sg_list: local(*len),
                signaled: true,
                fence: false,
                solicited: false,
            })
            .expect("post");
        }
        // Lossless, zero-delay exchange: no payload bytes ever.
        let mut buf = Vec::new();
        let mut moved = 0;
        loop {
            let mut any = false;
            while let Some(tx) = a.poll_transmit(t, &ma, &mut buf) {
                assert!(buf.is_empty(), "checked memory produced payload bytes");
                b.handle_packet(t, &tx.ib, &[], tx.ecn, &mut mb);
                any = true;
                moved += tx.ib.payload_len;
            }
            while let Some(tx) = b.poll_transmit(t, &mb, &mut buf) {
                a.handle_packet(t, &tx.ib, &[], tx.ecn, &mut ma);
                any = true;
                moved += tx.ib.payload_len;
            }
            if !any {
                break;
            }
        }
        let done: Vec<_> = std::iter::from_fn(|| a.poll_completion()).collect();
        assert_eq!(done.len(), ops.len(), "{rec:?}");
        assert!(
            done.iter().all(|c| c.status == WcStatus::Success),
            "{done:?}"
        );
        let recv: Vec<_> = std::iter::from_fn(|| b.poll_completion()).collect();
        assert_eq!(
            recv.iter()
                .map(|c| (c.opcode, c.byte_len))
                .collect::<Vec<_>>(),
            vec![(WcOpcode::Recv, 5_000), (WcOpcode::RecvRdmaWithImm, 10)]
        );
        assert_eq!(moved, 300_000 + 200_000 + 5_000 + 10);
        assert!(a.counters().dropped_invalid + b.counters().dropped_invalid == 0);
    }
}

/// What [`exchange`] saw.
#[derive(Default)]
struct Exchange {
    /// The control packets it checked, by opcode and acknowledgement kind.
    kinds: BTreeSet<(Opcode, &'static str)>,
    /// How many it checked.
    controls: u32,
    timeouts: u64,
    completions: [Vec<Completion>; 2],
    /// It ended with nothing on the wire and every work request completed.
    finished: bool,
}

/// The kind of acknowledgement `ib` carries, if any.
fn ack_kind(ib: &IbRepr) -> &'static str {
    match ib.aeth.map(|a| a.syndrome) {
        None => "",
        Some(Syndrome::Ack(_)) => "ack",
        Some(Syndrome::Nak(NakCode::PsnSequenceError)) => "nak-sequence",
        Some(Syndrome::Nak(_)) => "nak-error",
        Some(_) => "other",
    }
}

/// Two queue pairs under `rec` and `cc` running a Write, a Read, a Send and an atomic at each
/// other, 2 µs apart, over a path that loses every seventh of the first 400 packets and
/// marks every fifth CE (with `fault`, the first also sends a Write under a wrong R_Key, which
/// ends both connections), driven as the simulator's NIC drives them: the deadline read again
/// after every input and every data packet, and not after a control packet (an ACK, a read
/// ACK, a CNP) or a poll that finds nothing — after which it must not have moved earlier, or
/// the timer the driver armed would miss it; timers fire, and time advances, at the deadlines
/// the driver armed. The second queue pair's control packets are sometimes taken with
/// `poll_control`, as a paused NIC takes them.
fn exchange(rec: RecoveryConfig, cc: Arc<dyn ControllerFactory>, fault: bool) -> Exchange {
    let cfg = QpConfig {
        recovery: rec,
        cc,
        cnp_interval: Some(Dur::from_micros(5)),
        ..QpConfig::default()
    };
    let mut qps = [1u32, 2].map(|qpn| {
        QueuePair::new(Time::ZERO, QpConfig { qpn, ..cfg.clone() })
            .expect("a valid queue-pair configuration")
    });
    connect(
        &mut qps[0],
        &QpAttr::default(),
        2,
        Psn::new(10),
        Psn::new(20),
    );
    connect(
        &mut qps[1],
        &QpAttr::default(),
        1,
        Psn::new(20),
        Psn::new(10),
    );
    let mut mems = [CheckedMemory::new(1), CheckedMemory::new(2)];
    let regions = mems.each_mut().map(|m| {
        let addr = m.alloc(1 << 20);
        (addr, m.register(addr, 1 << 20, Access::ALL).expect("reg"))
    });
    let mut posted = [0; 2];
    for (i, q) in qps.iter_mut().enumerate() {
        let (addr, k) = regions[i];
        let (peer, pk) = regions[1 - i];
        let remote = Remote {
            addr: peer,
            rkey: pk.rkey,
        };
        let sge = |len: u32| Sge {
            addr,
            len,
            lkey: k.lkey,
        };
        q.post_recv(RecvWr {
            wr_id: 9,
            sg_list: irn_transport::sgl![sge(1 << 20)],
        })
        .expect("post recv");
        let mut ops = vec![
            (SendOp::Write(remote), 60_000),
            (SendOp::Read(remote), 30_000),
            (SendOp::Send, 3_000),
            (SendOp::FetchAdd { remote, add: 1 }, 8),
        ];
        if fault && i == 0 {
            let wrong = Remote {
                rkey: pk.rkey ^ 0x5a00,
                ..remote
            };
            ops.push((SendOp::Write(wrong), 2_000));
        }
        posted[i] = 1 + ops.len();
        for (id, (op, len)) in ops.into_iter().enumerate() {
            q.post_send(SendWr {
                wr_id: id as u64,
                op,
                sg_list: irn_transport::sgl![sge(len)],
                signaled: true,
                fence: false,
                solicited: false,
            })
            .expect("post");
        }
    }
    let delay = Dur::from_micros(2);
    let mut wire: VecDeque<(Time, usize, Transmit)> = VecDeque::new();
    let mut seen = Exchange::default();
    let mut armed = [qps[0].poll_timeout(), qps[1].poll_timeout()];
    let mut buf = Vec::new();
    let (mut now, mut sent, mut round) = (Time::ZERO, 0u32, 0u32);
    let check = |q: &QueuePair, armed: Option<Time>, what: &str| {
        let d = q.poll_timeout();
        assert!(
            d.is_none_or(|d| armed.is_some_and(|a| d >= a)),
            "{rec:?}: {what} moved the deadline {armed:?} -> {d:?}"
        );
    };
    for _ in 0..1_000_000 {
        round += 1;
        while wire.front().is_some_and(|w| w.0 <= now) {
            let (_, to, t) = wire.pop_front().expect("a packet");
            qps[to].handle_packet(now, &t.ib, &[], t.ecn, &mut mems[to]);
            armed[to] = qps[to].poll_timeout();
        }
        for i in 0..2 {
            if armed[i].is_some_and(|d| d <= now) {
                qps[i].handle_timeout(now);
                armed[i] = qps[i].poll_timeout();
            }
            let mut out = Vec::new();
            if i == 1 && round % 3 == 0 {
                while let Some(t) = qps[i].poll_control(&mems[i], &mut buf) {
                    assert!(t.ib.bth.opcode.is_control(), "{rec:?}: {t:?}");
                    check(&qps[i], armed[i], "poll_control's packet");
                    out.push(t);
                }
            }
            loop {
                let Some(t) = qps[i].poll_transmit(now, &mems[i], &mut buf) else {
                    check(&qps[i], armed[i], "a poll without a packet");
                    break;
                };
                if t.ib.bth.opcode.is_control() {
                    check(&qps[i], armed[i], "a control packet");
                } else {
                    armed[i] = qps[i].poll_timeout();
                }
                out.push(t);
            }
            for t in out {
                if t.ib.bth.opcode.is_control() {
                    seen.kinds.insert((t.ib.bth.opcode, ack_kind(&t.ib)));
                    seen.controls += 1;
                }
                sent += 1;
                if sent < 400 && sent % 7 == 3 {
                    continue;
                }
                let ecn = match t.ecn {
                    Ecn::NotEct => Ecn::NotEct,
                    _ if sent % 5 == 0 => Ecn::Ce,
                    e => e,
                };
                wire.push_back((now + delay, 1 - i, Transmit { ecn, ..t }));
            }
            seen.completions[i].extend(std::iter::from_fn(|| qps[i].poll_completion()));
        }
        if wire.is_empty() && (0..2).all(|i| seen.completions[i].len() == posted[i]) {
            seen.finished = true;
            break;
        }
        let next = [wire.front().map(|w| w.0), armed[0], armed[1]];
        now = next
            .into_iter()
            .flatten()
            .min()
            .map_or(now, |t| t.max(now))
            .max(now + Dur::from_nanos(1));
    }
    seen.timeouts = qps.iter().map(|q| q.counters().timeouts).sum();
    seen
}

/// A poll that returns a control packet (an ACK or NAK, a read ACK, a CNP), or no packet,
/// moves no deadline earlier and arms none: a driver that read `poll_timeout` after the queue
/// pair's last input, and after its last data packet, need not read it again after those (the
/// simulator's NIC relies on it). Checked at every poll ([`exchange`]) for every loss recovery,
/// with no congestion control, DCQCN (its timers and pacing live) and TIMELY, with and without
/// a fault that ends the connections.
#[test]
fn a_control_packet_moves_no_deadline_earlier() {
    let presets = [
        RecoveryConfig::roce_go_back_0(),
        RecoveryConfig::roce(),
        RecoveryConfig::irn(),
        RecoveryConfig::irn_go_back_n(),
        RecoveryConfig::irn_without_sack(),
        RecoveryConfig::reorder_buffer(),
        RecoveryConfig::ext_ib(),
        RecoveryConfig::tcp(),
    ];
    let ccs: [Arc<dyn ControllerFactory>; 3] = [
        Arc::new(NoCcFactory),
        Arc::new(DcqcnFactory::default()),
        Arc::new(TimelyFactory(TimelyConfig::default())),
    ];
    let mut kinds = BTreeSet::new();
    let mut timeouts = 0;
    for rec in presets {
        for cc in &ccs {
            for fault in [false, true] {
                let x = exchange(rec, cc.clone(), fault);
                assert!(x.finished, "{rec:?}: the exchange did not end");
                assert!(x.controls >= 5, "{rec:?}: {} control packets", x.controls);
                let [a, b] = &x.completions;
                assert_eq!(
                    (a.len(), b.len()),
                    (5 + usize::from(fault), 5),
                    "{rec:?}: one completion per work request"
                );
                if fault {
                    // The wrong key ends the responder's connection: the Write is refused,
                    // or, where earlier packets still wait for it, the requester gives up.
                    assert!(
                        a.iter().any(|c| matches!(
                            c.status,
                            WcStatus::RemAccessErr | WcStatus::RetryExcErr
                        )),
                        "{rec:?}: {a:?}"
                    );
                } else {
                    assert!(
                        a.iter().chain(b).all(|c| c.status == WcStatus::Success),
                        "{rec:?}: {a:?} {b:?}"
                    );
                }
                kinds.extend(x.kinds);
                timeouts += x.timeouts;
            }
        }
    }
    for kind in [
        (Opcode::RC_ACKNOWLEDGE, "ack"),
        (Opcode::RC_ACKNOWLEDGE, "nak-sequence"),
        (Opcode::RC_ACKNOWLEDGE, "nak-error"),
        (Opcode::RC_IRN_READ_ACK, "ack"),
        (Opcode::CNP, ""),
    ] {
        assert!(kinds.contains(&kind), "{kind:?} checked: {kinds:?}");
    }
    assert!(timeouts > 0, "no timeout was exercised");
}
