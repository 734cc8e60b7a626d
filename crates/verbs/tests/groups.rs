//! Engines per core: groups of devices sharing one address and port, their queue pairs
//! spread over the members by number and each packet steered to its owner
//! (`Device::open_group`).

mod common;

use std::thread;

use common::*;
use irn_verbs::{
    Device, DeviceConfig, Error, Mr, Pd, Qp, QpAttr, QpMode, ReceivePath, RecvWr, SendOp, WcStatus,
};

/// A group of `engines` on 127.0.0.1 (a free port) receiving through `path`.
fn group(engines: usize, path: ReceivePath, seed: u64) -> Vec<Device> {
    let mut cfg = DeviceConfig::new("127.0.0.1".parse().expect("address"));
    cfg.port = 0;
    cfg.seed = seed;
    cfg.receive = path;
    Device::open_group(cfg, engines).expect("open a group")
}

/// One end of a connection: a queue pair with its own PD, CQ and region on one device.
struct End {
    _pd: Pd,
    cq: irn_verbs::Cq,
    qp: Qp,
    mr: Mr,
}

const REGION: usize = 1 << 20;

fn end(dev: &Device, mode: QpMode) -> End {
    let (pd, cq, qp) = queue_pair(dev, mode, 4096);
    let mr = pd.reg_mr(REGION, all()).expect("mr");
    End {
        _pd: pd,
        cq,
        qp,
        mr,
    }
}

fn connect_ends(a: (&Device, &End), b: (&Device, &End), mode: QpMode) {
    let at = |d: &Device, e: &End| irn_verbs::RemoteQp {
        gid: d.gid(),
        port: d.local_addr().port(),
        qpn: e.qp.qpn(),
        psn: 7,
    };
    let attr = QpAttr::default();
    a.1.qp.connect(&attr, &at(b.0, b.1), 7).expect("connect a");
    b.1.qp.connect(&attr, &at(a.0, a.1), 7).expect("connect b");
    let _ = mode;
}

/// Sends `sends` messages of 1 KiB and Writes the whole region to `to` in messages of varied
/// sizes (up to 48 KiB: GSO messages of many packets), from `from`; each work request
/// completes once, successfully.
fn drive(from: &End, to: &End, seed: u64, sends: u64) {
    let mut data = vec![0u8; REGION];
    pattern(seed, &mut data);
    from.mr.write(0, &data).expect("fill");
    let (mut off, mut id, mut outstanding) = (0usize, 0u64, 0u64);
    let mut seen = std::collections::BTreeSet::new();
    let post = |op: SendOp, at: usize, n: usize, id: u64| {
        from.qp
            .post_send(wr(id, op, vec![from.mr.sge(at as u64, n as u32)]))
            .expect("post");
    };
    while off < REGION || outstanding > 0 {
        while off < REGION && outstanding < 16 {
            let n = (1 + (id as usize * 7919) % (48 << 10)).min(REGION - off);
            let op = if id < sends {
                SendOp::Send
            } else {
                SendOp::Write(remote_of(&to.mr, off as u64))
            };
            let n = if id < sends { 1024 } else { n };
            post(op, off, n, id);
            if id >= sends {
                off += n;
            }
            id += 1;
            outstanding += 1;
        }
        let wc = wait(&from.cq, 20);
        assert_eq!(wc.status, WcStatus::Success, "work request {}", wc.wr_id);
        assert!(
            seen.insert(wc.wr_id),
            "work request {} completed twice",
            wc.wr_id
        );
        outstanding -= 1;
    }
    assert_eq!(seen.len() as u64, id);
}

/// The receiving end: `sends` receives of 1 KiB at the region's end, each completed once.
fn take_sends(to: &End, sends: u64) {
    for i in 0..sends {
        to.qp
            .post_recv(RecvWr {
                wr_id: i,
                sg_list: vec![to.mr.sge((REGION - 1024) as u64, 1024)].into(),
            })
            .expect("recv");
    }
}

/// Checks that `to` holds what `from` wrote (the region but its last KiB, which the Sends
/// overwrote, is the Writes').
fn check_written(from: &End, to: &End, what: &str) {
    let (mut a, mut b) = (vec![0u8; REGION], vec![0u8; REGION]);
    from.mr.read(0, &mut a).expect("read");
    to.mr.read(0, &mut b).expect("read");
    // The first Sends' sources (1 KiB each from offset 0) are not part of the Writes:
    // compare the Writes' range, which starts at 0 and covers the region.
    let last = REGION - 1024;
    assert!(a[..last] == b[..last], "{what}: the Writes' data");
}

/// Queue pairs on every member of two groups — a client of 2 and a server of 3 — connected
/// across members, each member driven from its own thread: every work request completes
/// once with exact data, each member's queue pairs are numbered in its class, and the kernel
/// delivered every packet to the member owning its queue pair (no member forwarded one, and
/// none met an unknown queue pair). Both paths where the process may open raw sockets.
#[test]
fn a_groups_queue_pairs_are_spread_over_its_members_and_each_packet_reaches_its_owner() {
    let mut paths = vec![ReceivePath::Udp];
    if raw_permitted() {
        paths.push(ReceivePath::Raw);
    } else {
        precondition_missing(
            "a_groups_queue_pairs_are_spread_over_its_members_and_each_packet_reaches_its_owner",
            "raw sockets (root): the raw path's per-member filters are not tested",
        );
    }
    for path in paths {
        let (clients, servers) = (group(2, path, 1), group(3, path, 2));
        let port = servers[0].local_addr().port();
        for (i, s) in servers.iter().enumerate() {
            assert_eq!(
                s.local_addr().port(),
                port,
                "{path:?}: one port for the group"
            );
            assert_eq!(s.group_member(), (i, 3));
        }
        const QPS: usize = 6;
        let mode = |j: usize| {
            if j % 2 == 0 {
                QpMode::Irn
            } else {
                QpMode::Roce
            }
        };
        let cends: Vec<End> = (0..QPS).map(|j| end(&clients[j % 2], mode(j))).collect();
        let sends: Vec<End> = (0..QPS).map(|j| end(&servers[j % 3], mode(j))).collect();
        for j in 0..QPS {
            assert_eq!(
                cends[j].qp.qpn() % 2,
                (j % 2) as u32,
                "{path:?}: client QP {j}"
            );
            assert_eq!(
                sends[j].qp.qpn() % 3,
                (j % 3) as u32,
                "{path:?}: server QP {j}"
            );
            connect_ends(
                (&clients[j % 2], &cends[j]),
                (&servers[j % 3], &sends[j]),
                mode(j),
            );
            take_sends(&sends[j], 8);
        }
        // A thread per client member, over its queue pairs.
        thread::scope(|s| {
            for m in 0..2 {
                let (cends, sends) = (&cends, &sends);
                s.spawn(move || {
                    for j in (m..QPS).step_by(2) {
                        drive(&cends[j], &sends[j], j as u64, 8);
                    }
                });
            }
        });
        for j in 0..QPS {
            for _ in 0..8 {
                let wc = wait(&sends[j].cq, 10);
                assert_eq!(wc.status, WcStatus::Success, "{path:?}: QP {j}'s receive");
                assert_eq!(wc.byte_len, 1024);
            }
            assert!(
                sends[j].cq.is_empty(),
                "{path:?}: QP {j}: one completion each"
            );
            check_written(&cends[j], &sends[j], &format!("{path:?}: QP {j}"));
        }
        for (who, g) in [("client", &clients), ("server", &servers)] {
            for (i, d) in g.iter().enumerate() {
                let c = d.counters();
                assert!(c.rx_packets > 0, "{path:?}: {who} {i} received nothing");
                assert_eq!(
                    (c.rx_forwarded, c.rx_unknown_qp, c.rx_malformed),
                    (0, 0, 0),
                    "{path:?}: {who} member {i} got another's packets"
                );
            }
        }
    }
}

/// Closing a member makes the kernel move the group's last socket into its place, so that
/// the last member's packets no longer match the steering and are hashed over the members
/// left: those that reach the wrong member are forwarded to their owner, and nothing is lost.
/// Sixteen connections (sixteen source ports) to the last member of three, member 0 closed:
/// every Write completes with exact data, and the other member forwarded some (with sixteen
/// flows, all hashing to one socket has probability 2^-16).
#[test]
fn packets_the_kernel_gives_the_wrong_member_are_forwarded_to_their_owner() {
    let mut servers = group(3, ReceivePath::Udp, 3);
    drop(servers.remove(0));
    let client = device_on("127.0.0.1", ReceivePath::Udp, 0.0, 4).expect("client");
    const QPS: usize = 16;
    let cends: Vec<End> = (0..QPS).map(|_| end(&client, QpMode::Irn)).collect();
    let sends: Vec<End> = (0..QPS).map(|_| end(&servers[1], QpMode::Irn)).collect();
    for j in 0..QPS {
        assert_eq!(sends[j].qp.qpn() % 3, 2);
        connect_ends((&client, &cends[j]), (&servers[1], &sends[j]), QpMode::Irn);
        take_sends(&sends[j], 2);
    }
    for j in 0..QPS {
        drive(&cends[j], &sends[j], 100 + j as u64, 2);
    }
    for j in 0..QPS {
        for _ in 0..2 {
            let wc = wait(&sends[j].cq, 10);
            assert_eq!(wc.status, WcStatus::Success, "QP {j}'s receive");
        }
        check_written(&cends[j], &sends[j], &format!("QP {j}"));
    }
    let (one, two) = (servers[0].counters(), servers[1].counters());
    assert!(one.rx_forwarded > 0, "member 1 forwarded nothing: {one:?}");
    assert_eq!((one.rx_unknown_qp, two.rx_unknown_qp), (0, 0));
    assert_eq!(two.rx_forwarded, 0, "member 2 owns every queue pair");
    assert_eq!(client.counters().rx_unknown_qp, 0);
}

/// A group is 1 to 64 members; a paced line, pause frames and tagged frames are one engine's.
#[test]
fn a_group_refuses_what_one_engine_must_own() {
    let cfg = || {
        let mut c = DeviceConfig::new("127.0.0.1".parse().expect("address"));
        c.port = 0;
        c.receive = ReceivePath::Udp;
        c
    };
    for n in [0, irn_verbs::MAX_ENGINES + 1] {
        let e = Device::open_group(cfg(), n).expect_err("refused");
        assert!(
            matches!(e, Error::Config(m) if m.contains("engines")),
            "{n}"
        );
    }
    let mut paced = cfg();
    paced.line_rate_bps = Some(1_000_000_000);
    let e = Device::open_group(paced.clone(), 2).expect_err("refused");
    assert!(matches!(e, Error::Config(m) if m.contains("line_rate_bps")));
    // One member is a device alone, which may pace its line.
    let one = Device::open_group(paced, 1).expect("one");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].group_member(), (0, 1));
    let mut tagged = cfg();
    tagged.vlan = Some(irn_verbs::Vlan {
        iface: "lo".into(),
        vid: 5,
    });
    let e = Device::open_group(tagged, 2).expect_err("refused");
    assert!(matches!(e, Error::Config(m) if m.contains("vlan")));
}

/// A group binds its port only where nobody holds it: a second group (or device) on a port a
/// group holds is refused, where `SO_REUSEPORT` alone would have let its sockets join the
/// first group and take its packets; and the first group still works afterwards.
#[test]
fn a_group_never_joins_another_on_its_port() {
    let first = group(2, ReceivePath::Udp, 5);
    let port = first[0].local_addr().port();
    let mut cfg = DeviceConfig::new("127.0.0.1".parse().expect("address"));
    cfg.port = port;
    cfg.receive = ReceivePath::Udp;
    for n in [1, 2, 3] {
        match Device::open_group(cfg.clone(), n) {
            Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{n}"),
            other => panic!(
                "a group of {n} on a held port: {:?}",
                other.map(|g| g.len())
            ),
        }
    }
    // Both members still receive their own queue pairs' packets.
    let client = device_on("127.0.0.1", ReceivePath::Udp, 0.0, 6).expect("client");
    for m in &first {
        let (a, b) = (end(&client, QpMode::Irn), end(m, QpMode::Irn));
        connect_ends((&client, &a), (m, &b), QpMode::Irn);
        take_sends(&b, 1);
        drive(&a, &b, 9, 1);
        assert_eq!(wait(&b.cq, 10).status, WcStatus::Success);
        check_written(&a, &b, "after the refused groups");
        assert_eq!(m.counters().rx_forwarded, 0);
    }
}
