//! Engines per core: groups of devices sharing one address and port, their queue pairs
//! spread over the members by number and each packet steered to its owner
//! (`Device::open_group`).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

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

/// The UDP path, and the raw path where the process may open raw sockets (`test` says what
/// goes untested where it may not: a failure in CI).
fn both_paths(test: &str, untested: &str) -> Vec<ReceivePath> {
    if raw_permitted() {
        return vec![ReceivePath::Udp, ReceivePath::Raw];
    }
    precondition_missing(
        test,
        &format!("raw sockets (root): {untested} is not tested"),
    );
    vec![ReceivePath::Udp]
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

fn connect_ends(a: (&Device, &End), b: (&Device, &End)) {
    let at = |d: &Device, e: &End| irn_verbs::RemoteQp {
        gid: d.gid(),
        port: d.local_addr().port(),
        qpn: e.qp.qpn(),
        psn: 7,
    };
    let attr = QpAttr::default();
    a.1.qp.connect(&attr, &at(b.0, b.1), 7).expect("connect a");
    b.1.qp.connect(&attr, &at(a.0, a.1), 7).expect("connect b");
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
    for path in both_paths(
        "a_groups_queue_pairs_are_spread_over_its_members_and_each_packet_reaches_its_owner",
        "the raw path's per-member filters",
    ) {
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
            connect_ends((&clients[j % 2], &cends[j]), (&servers[j % 3], &sends[j]));
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

/// A member that closes keeps its socket in the group until the whole group closes, so the
/// kernel's steering stays exact for the members left: were the socket to leave, the kernel
/// would move the last member's into its place and hash that member's packets over the
/// sockets left. Sixteen connections (sixteen flows) to the last member of three, member 0
/// closed: every Write completes with exact data, and no member forwarded a packet (with the
/// hash, all sixteen flows reaching the last member has probability 2^-16).
#[test]
fn a_closed_member_leaves_the_others_steering_exact() {
    let mut servers = group(3, ReceivePath::Udp, 3);
    drop(servers.remove(0));
    let client = device_on("127.0.0.1", ReceivePath::Udp, 0.0, 4).expect("client");
    const QPS: usize = 16;
    let cends: Vec<End> = (0..QPS).map(|_| end(&client, QpMode::Irn)).collect();
    let sends: Vec<End> = (0..QPS).map(|_| end(&servers[1], QpMode::Irn)).collect();
    for j in 0..QPS {
        assert_eq!(sends[j].qp.qpn() % 3, 2);
        connect_ends((&client, &cends[j]), (&servers[1], &sends[j]));
        take_sends(&sends[j], 2);
    }
    // Sixteen flows: the queue pairs send from source ports of their own.
    assert!(
        client.source_ports().len() >= 8,
        "{:?}",
        client.source_ports()
    );
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
    for m in &servers {
        let c = m.counters();
        assert_eq!((c.rx_forwarded, c.rx_unknown_qp), (0, 0), "{c:?}");
    }
    assert_eq!(
        servers[0].counters().rx_packets,
        0,
        "member 1 owns no queue pair"
    );
    assert_eq!(client.counters().rx_unknown_qp, 0);
}

/// A RoCE Send Only packet for queue pair `qpn`, PSN `psn`, of `len` bytes of `fill`, from
/// `from` to `to`, with the ICRC the IPv4 packet that carries it as segment `ident` of a GSO
/// message (DF set, identification 0 for the first) gets: its BTH to ICRC, a UDP payload.
fn send_only(
    qpn: u32,
    psn: u32,
    fill: u8,
    len: usize,
    from: SocketAddr,
    to: SocketAddr,
    ident: u16,
) -> Vec<u8> {
    let q = qpn.to_be_bytes();
    let p = psn.to_be_bytes();
    // SEND_ONLY, TVer 0, default P_Key, AckReq.
    let mut ib = vec![
        0x04, 0, 0xff, 0xff, 0, q[1], q[2], q[3], 0x80, p[1], p[2], p[3],
    ];
    ib.resize(ib.len() + len, fill);
    let udp_len = (8 + ib.len() + 4) as u16;
    let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
        panic!("IPv4");
    };
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
    ip.extend_from_slice(&ident.to_be_bytes());
    ip.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&f.ip().octets());
    ip.extend_from_slice(&t.ip().octets());
    let mut udp = Vec::new();
    udp.extend_from_slice(&f.port().to_be_bytes());
    udp.extend_from_slice(&t.port().to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    let icrc = irn_wire::icrc::compute(&ip, &udp, &ib).expect("icrc");
    ib.extend_from_slice(&icrc.to_le_bytes());
    ib
}

/// A coalesced datagram whose packets are for queue pairs of two members — one GSO message of
/// two segments, as an older irn peer could send, which the kernel steers by its first
/// packet — reaches member 0, which receives its own packet and hands the other to member 1:
/// both receives complete with their bytes, and member 0 counts one forwarded packet. A
/// datagram too short for a BTH's queue pair reaches member 0, which counts it. Both paths
/// where the process may open raw sockets (there the ICRCs are verified).
#[test]
fn a_coalesced_datagram_for_two_members_is_split_between_them() {
    for path in both_paths(
        "a_coalesced_datagram_for_two_members_is_split_between_them",
        "the raw path's cut of a mixed datagram",
    ) {
        let g = group(2, path, 8);
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
        rustix::net::sockopt::set_ip_mtu_discover(
            &sock,
            rustix::net::sockopt::Ipv4PathMtuDiscovery::DO,
        )
        .expect("DF");
        const SEG: usize = 12 + 64 + 4;
        let seg = SEG as libc::c_int;
        // UDP_SEGMENT: every send is a GSO message of SEG-byte datagrams.
        #[allow(unsafe_code)]
        // SAFETY: a plain integer option, its size given.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                std::ptr::from_ref(&seg).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "UDP_SEGMENT");
        let from = sock.local_addr().expect("addr");
        let to = g[0].local_addr();
        let ends: Vec<End> = g.iter().map(|d| end(d, QpMode::Roce)).collect();
        for e in &ends {
            let peer = irn_verbs::RemoteQp {
                gid: irn_verbs::Gid::from(from.ip()),
                port: from.port(),
                qpn: 0x123,
                psn: 100,
            };
            e.qp.connect(&QpAttr::default(), &peer, 5).expect("connect");
            e.qp.post_recv(RecvWr {
                wr_id: 1,
                sg_list: vec![e.mr.sge(0, 64)].into(),
            })
            .expect("recv");
        }
        let mut datagram = send_only(ends[0].qp.qpn(), 100, b'a', 64, from, to, 0);
        datagram.extend(send_only(ends[1].qp.qpn(), 100, b'b', 64, from, to, 1));
        assert_eq!(datagram.len(), 2 * SEG);
        sock.send_to(&datagram, to).expect("send");
        for (e, fill) in ends.iter().zip([b'a', b'b']) {
            let wc = wait(&e.cq, 10);
            assert_eq!(
                (wc.status, wc.byte_len),
                (WcStatus::Success, 64),
                "{path:?}"
            );
            let mut got = [0u8; 64];
            e.mr.read(0, &mut got).expect("read");
            assert!(got.iter().all(|&b| b == fill), "{path:?}: {got:?}");
        }
        let (zero, one) = (g[0].counters(), g[1].counters());
        assert_eq!(
            (zero.rx_forwarded, one.rx_forwarded),
            (1, 0),
            "{path:?}: {zero:?}"
        );
        assert_eq!(
            (zero.rx_icrc_errors, one.rx_packets),
            (0, 0),
            "{path:?}: {one:?}"
        );
        // Three bytes: no BTH.
        let plain = UdpSocket::bind("127.0.0.1:0").expect("bind");
        plain.send_to(&[1, 2, 3], to).expect("send");
        let deadline = Instant::now() + Duration::from_secs(5);
        while g[0].counters().rx_malformed == 0 {
            assert!(Instant::now() < deadline, "{path:?}: {:?}", g[0].counters());
            thread::sleep(Duration::from_millis(5));
        }
        // Member 1 would have counted it by now too, had its filter let it through.
        thread::sleep(Duration::from_millis(100));
        assert_eq!(g[1].counters().rx_malformed, 0, "{path:?}");
    }
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
    // QP1's packets reach member 0: only there may the general services QP be.
    let g = Device::open_group(cfg(), 2).expect("group");
    let gsi = |d: &Device| {
        let pd = d.alloc_pd();
        let cq = d.create_cq(16).expect("cq");
        pd.create_gsi_qp(&cq, &cq, irn_verbs::UdInit::default())
            .map(drop)
    };
    assert!(matches!(gsi(&g[1]), Err(Error::Config(m)) if m.contains("QP1")));
    gsi(&g[0]).expect("member 0's QP1");
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
        connect_ends((&client, &a), (m, &b));
        take_sends(&b, 1);
        drive(&a, &b, 9, 1);
        assert_eq!(wait(&b.cq, 10).status, WcStatus::Success);
        check_written(&a, &b, "after the refused groups");
        assert_eq!(m.counters().rx_forwarded, 0);
    }
}

/// The UDP sockets bound to `port`: each one's receive queue and drops (`/proc/net/udp`).
fn udp_sockets_on(port: u16) -> Vec<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/udp").expect("/proc/net/udp");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let rx_queue = u64::from_str_radix(f.get(4)?.rsplit(':').next()?, 16).ok()?;
            let drops = f.last()?.parse().ok()?;
            (local_port == port).then_some((rx_queue, drops))
        })
        .collect()
}

/// A closed member's socket, kept in the group, drops what still reaches it rather than
/// holding it: datagrams for its queue pairs' class leave every socket of the group's port
/// empty, and are counted as the kernel's drops.
#[test]
fn a_closed_members_socket_drops_what_reaches_it() {
    let mut g = group(2, ReceivePath::Udp, 9);
    let to = g[0].local_addr();
    drop(g.remove(0));
    assert_eq!(
        udp_sockets_on(to.port()).len(),
        2,
        "both sockets stay in the group"
    );
    let dropped_before: u64 = udp_sockets_on(to.port()).iter().map(|s| s.1).sum();
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    for k in 1..=50u32 {
        // A BTH for queue pair 2k: member 0's class.
        let q = (2 * k).to_be_bytes();
        let bth = [
            0x04, 0, 0xff, 0xff, 0, q[1], q[2], q[3], 0x80, 0, 0, 1, 0, 0, 0, 0,
        ];
        sock.send_to(&bth, to).expect("send");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let socks = udp_sockets_on(to.port());
        let dropped: u64 = socks.iter().map(|s| s.1).sum::<u64>() - dropped_before;
        if dropped >= 50 {
            assert!(socks.iter().all(|s| s.0 == 0), "{socks:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{socks:?}, {dropped} dropped");
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(g[0].counters().rx_packets, 0, "member 1 got none of them");
}

/// Payload bytes that look like well-formed BTHs for another member's queue pairs do not make
/// a group member's raw path cut a coalesced datagram of its own queue pair's packets
/// wrongly. Each message is two Sends shorter than the path MTU, coalesced by an irn sender,
/// whose payloads repeat `00 00 ff ff`: at every 4-byte boundary a BTH with TVer 0, the
/// default P_Key and QPN 0x00ffff (member 1's). Taken as another member's packets, every
/// length from about two thirds of the true one up would pass for a cut and spend the search's
/// ICRCs before the true length; the member searches with its own queue pairs first. All
/// arrive with exact data, none dropped as uncuttable or for a bad ICRC.
#[test]
fn payload_bytes_do_not_pass_for_another_members_packets() {
    if !raw_permitted() {
        precondition_missing(
            "payload_bytes_do_not_pass_for_another_members_packets",
            "raw sockets (root): the raw path's cut search is not tested",
        );
        return;
    }
    let g = group(2, ReceivePath::Raw, 10);
    let client = device_on("127.0.0.1", ReceivePath::Udp, 0.0, 11).expect("client");
    let (a, b) = (end(&client, QpMode::Irn), end(&g[0], QpMode::Irn));
    assert_eq!(b.qp.qpn() % 2, 0);
    connect_ends((&client, &a), (&g[0], &b));
    a.qp.set_peer_gso(true).expect("gso");
    const PAIRS: u64 = 32;
    // Shorter than the path MTU (1024): each Send is one packet, and the datagram's cut is
    // searched for below the MTU's.
    const LEN: usize = 800;
    let fill: Vec<u8> = [0u8, 0, 0xff, 0xff].repeat(LEN / 4);
    a.mr.write(0, &fill).expect("fill");
    for i in 0..2 * PAIRS {
        b.qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: vec![b.mr.sge(i * LEN as u64, LEN as u32)].into(),
        })
        .expect("recv");
    }
    for p in 0..PAIRS {
        // Both in one post: one transmit turn, one GSO message of two packets.
        let two = (0..2).map(|k| wr(2 * p + k, SendOp::Send, vec![a.mr.sge(0, LEN as u32)]));
        a.qp.post_send_list(two).expect("send");
        for _ in 0..2 {
            assert_eq!(wait(&a.cq, 10).status, WcStatus::Success);
        }
    }
    for _ in 0..2 * PAIRS {
        let wc = wait(&b.cq, 10);
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN as u32));
    }
    let mut got = vec![0u8; 2 * PAIRS as usize * LEN];
    b.mr.read(0, &mut got).expect("read");
    assert!(got.chunks(LEN).all(|c| c == &fill[..]));
    let c = g[0].counters();
    assert!(c.rx_coalesced > 0, "no coalesced datagram: {c:?}");
    // A datagram no longer than one packet can be that no cut fits is taken for one packet,
    // whose ICRC fails.
    assert_eq!(
        (
            c.rx_oversized,
            c.rx_icrc_errors,
            c.rx_malformed,
            c.rx_forwarded
        ),
        (0, 0, 0, 0),
        "{c:?}"
    );
}

/// Another program's group binding a port holds it: a group on that port waits for the
/// lock every irn group takes (an abstract Unix socket named for the user, address and
/// port) and binds once it is released.
#[test]
fn a_group_waits_for_another_groups_bind_on_its_port() {
    use std::os::linux::net::SocketAddrExt;
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free port")
        .port();
    let name = format!(
        "irn-port-{}-127.0.0.1-{port}",
        rustix::process::getuid().as_raw()
    );
    let at = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
    let held = std::os::unix::net::UnixDatagram::bind_addr(&at).expect("take the lock");
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        drop(held);
    });
    let mut cfg = DeviceConfig::new("127.0.0.1".parse().expect("address"));
    cfg.port = port;
    cfg.receive = ReceivePath::Udp;
    let t = Instant::now();
    let g = Device::open_group(cfg, 2).expect("the group, once the lock is free");
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(g[1].local_addr().port(), port);
    release.join().expect("release");
}

/// A group's connection manager is member 0's, where peers' QP1 packets arrive, and it
/// connects queue pairs of every member: a listener on member 0 accepts two connections, one
/// for a queue pair of each member, and each then moves its Writes' data, steered to its own
/// member.
#[test]
fn member_zeros_cm_connects_queue_pairs_of_every_member() {
    use irn_verbs::cm::{self, CmConfig, CmListener};
    let mut cfg = DeviceConfig::new("127.0.0.2".parse().expect("address"));
    cfg.port = 0;
    cfg.receive = ReceivePath::Udp;
    let g = Device::open_group(cfg, 2).expect("group");
    let client = device_on("127.0.0.1", ReceivePath::Udp, 0.0, 12).expect("client");
    let to = |peer: &Device| CmConfig {
        peer_port: peer.local_addr().port(),
        ..CmConfig::default()
    };
    let attr = QpAttr::default();
    let servers: Vec<End> = g.iter().map(|d| end(d, QpMode::Irn)).collect();
    let clients: Vec<End> = (0..2).map(|_| end(&client, QpMode::Irn)).collect();
    let server_ip = g[0].local_addr().ip();
    // Listening before the client connects, and until the counters are read: a REQ that
    // reached member 0 before its connection manager existed, or a repeated DREQ after it
    // closed, would meet no QP1 there.
    let l = CmListener::bind(&g[0], 7175, to(&client)).expect("listen");
    thread::scope(|s| {
        let srv = s.spawn(|| {
            let conns: Vec<_> = servers
                .iter()
                .map(|e| {
                    let req = l.get_request(Duration::from_secs(10)).expect("request");
                    l.accept(&req, &e.qp, &attr, b"").expect("accept")
                })
                .collect();
            for c in conns {
                c.wait_disconnect(Duration::from_secs(20))
                    .expect("disconnect");
            }
        });
        for (c, e) in clients.iter().zip(&servers) {
            let conn = cm::connect(
                &client,
                &c.qp,
                &attr,
                SocketAddr::new(server_ip, 7175),
                b"",
                to(&g[0]),
            )
            .expect("connect");
            assert_eq!(conn.remote_qpn(), e.qp.qpn());
            drive(c, e, 40 + u64::from(e.qp.qpn() % 2), 0);
            check_written(c, e, "through the CM");
            assert!(conn.disconnect().expect("disconnect"));
        }
        srv.join().expect("server");
    });
    for (i, d) in g.iter().enumerate() {
        let c = d.counters();
        assert!(c.rx_packets > 0, "member {i}");
        assert_eq!(
            (c.rx_forwarded, c.rx_unknown_qp),
            (0, 0),
            "member {i}: {c:?}"
        );
    }
    drop(l);
}
