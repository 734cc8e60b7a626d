//! Each component driven alone: a [`Fabric`] around a two-switch dumbbell (hosts 0 and 1 on
//! switch 4, hosts 2 and 3 on switch 5; a switch's ports 0 and 1 lead to its hosts, port 2 to
//! the other switch), frames and pause frames handed to one switch or NIC, and what it emits
//! read off the event list — no network, no queue pairs at the other end.

use std::path::Path;
use std::sync::Arc;

use irn_transport::{Dur, Time};
use irn_wire::{BthRepr, Ecn, IbRepr, Opcode, Psn};

use super::pfc::pause_time;
use super::*;
use crate::config::{TopologyConfig, TopologyKind};
use packet::{Meta, Packet, NIL};

type Mem = SharedChecked;

pub(super) fn config(pfc: bool) -> SimConfig {
    let mut cfg = SimConfig {
        topology: TopologyConfig {
            kind: TopologyKind::Dumbbell,
            hosts_per_side: 2,
            ..TopologyConfig::default()
        },
        ..SimConfig::default()
    };
    cfg.network.pfc = pfc;
    cfg
}

fn fabric(cfg: &SimConfig) -> Fabric<Mem> {
    let topo = Topology::build(&cfg.topology, Path::new(".")).expect("a dumbbell");
    let (classes, data_dscp, _) = classes_of(cfg);
    let ports: Vec<usize> = topo.nodes.iter().map(|n| n.ports.len()).collect();
    let data_class = classes.class(classes.of_dscp(data_dscp));
    let mon = Monitor::new(true, None, &ports, classes.len(), data_class);
    let q = Events {
        q: EventQueue::new(),
        origin: 0,
        count: vec![0; topo.nodes.len()],
    };
    let part_of: Arc<[u16]> = vec![0; topo.nodes.len()].into();
    Fabric::new(q, topo, classes, mon, part_of, 0)
}

/// A data frame of `wire` bytes for host `dst`, in the packet table.
fn frame(fx: &mut Fabric<Mem>, cfg: &SimConfig, dst: u32, wire: u16) -> (u32, Hop) {
    let bth = BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        solicited: false,
        mig_req: false,
        tver: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qpn: 2,
        ack_req: false,
        psn: Psn::new(0),
    };
    let hop = Hop::new(dst, 7, wire, cfg.network.data_dscp, Ecn::Ect0, None);
    let p = Packet {
        ib: IbRepr::new(bth),
        flow: 0,
        to: RESP as u8,
    };
    (fx.pool.alloc(p, Vec::new(), Meta { hop, next: NIL }), hop)
}

/// The events scheduled up to `until`, in order.
fn drain(fx: &mut Fabric<Mem>, until: Time) -> Vec<(Time, Ev)> {
    std::iter::from_fn(|| fx.q.q.pop_before(until)).collect()
}

fn switch(cfg: &SimConfig, fx: &Fabric<Mem>, node: u32) -> Switch {
    build_switch(
        cfg,
        &fx.topo,
        &fx.classes,
        node,
        true,
        Time::ZERO + Dur::from_micros(10),
    )
}

const LEFT: u32 = 4;
const FAR: Time = Time::MAX;

fn arrivals(evs: &[(Time, Ev)]) -> Vec<(Time, u32, u16)> {
    evs.iter()
        .filter_map(|&(t, e)| match e {
            Ev::Arrive { node, port, .. } => Some((t, node, port)),
            _ => None,
        })
        .collect()
}

fn pauses(evs: &[(Time, Ev)]) -> Vec<(u32, bool)> {
    evs.iter()
        .filter_map(|&(_, e)| match e {
            Ev::Pfc { node, quanta, .. } => Some((node, quanta > 0)),
            _ => None,
        })
        .collect()
}

/// Runs switch `sw`'s own `TxDone` events until none is left; returns everything else.
fn run_switch(sw: &mut Switch, fx: &mut Fabric<Mem>) -> Vec<(Time, Ev)> {
    let mut out = Vec::new();
    while let Some((t, e)) = fx.q.q.pop_before(FAR) {
        match e {
            Ev::TxDone { node, port } if node == LEFT => sw.tx_done(fx, t, usize::from(port)),
            _ => out.push((t, e)),
        }
    }
    out
}

#[test]
fn a_link_serializes_at_its_rate_and_delivers_after_its_delay() {
    let cfg = config(false);
    let mut fx = fabric(&cfg);
    let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
    let link = *fx.topo.host_port(0);
    let free = fx.occupy(Time::ZERO, 0, 0, &link, u64::from(hop.wire), true);
    fx.propagate(free, &link, pkt, hop);
    // 1000 bytes at 40 Gb/s: 200 ns; then 2 µs of propagation.
    assert_eq!(free, Time::ZERO + Dur::from_nanos(200));
    let evs = drain(&mut fx, FAR);
    assert!(matches!(evs[0], (t, Ev::TxDone { node: 0, port: 0 }) if t == free));
    assert_eq!(arrivals(&evs), [(free + Dur::from_micros(2), LEFT, 0)]);
}

#[test]
fn a_switch_forwards_to_an_idle_output_at_once_and_queues_behind_a_busy_one() {
    let cfg = config(false);
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    for _ in 0..3 {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    }
    let got = arrivals(&run_switch(&mut sw, &mut fx));
    // Out through port 2 to the other switch, back to back: one serialization apart.
    let ser = Dur::from_nanos(200);
    let first = Time::ZERO + ser + Dur::from_micros(2);
    assert_eq!(
        got,
        [
            (first, 5, 2),
            (first + ser, 5, 2),
            (first + ser + ser, 5, 2)
        ]
    );
    assert_eq!(sw.stats[2].tx_packets, 3);
    assert_eq!((sw.used, sw.ports[0].ingress.total()), (0, 0));
}

#[test]
fn a_lossless_ingress_pauses_its_upstream_above_xoff_and_resumes_after_draining() {
    let cfg = config(true);
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    let prio = fx.classes.of_dscp(cfg.network.data_dscp);
    // The next switch pauses the output: everything from host 0 stays in port 0's buffer.
    sw.pfc(&mut fx, Time::ZERO, 2, prio, u16::MAX);
    let xoff = sw.pause_threshold(0);
    let mut sent = 0;
    while sw.ports[0].ingress.total() <= xoff {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
        sent += 1;
    }
    let evs = drain(&mut fx, FAR);
    assert_eq!(pauses(&evs), [(0, true)], "one pause, to host 0");
    assert!(arrivals(&evs).is_empty(), "nothing leaves a paused output");
    // The headroom takes what is still on the wire: nothing is dropped.
    for _ in 0..10 {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
        sent += 1;
    }
    assert_eq!(sw.stats[0].drops, 0);
    // Resumed: the queue drains, and host 0 is resumed once, after the pause.
    sw.pfc(&mut fx, Time::ZERO + Dur::from_micros(1), 2, prio, 0);
    let evs = run_switch(&mut sw, &mut fx);
    assert_eq!(arrivals(&evs).len(), sent);
    assert_eq!(pauses(&evs), [(0, false)]);
    assert_eq!(sw.stats[0].pause_sent, 2);
    assert_eq!(sw.stats[2].pause_received, 2);
    assert_eq!(sw.used, 0);
}

/// The pause timers of events `evs`: (node, port, class, refresh) at their times.
fn pause_timers(evs: &[(Time, Ev)]) -> Vec<(Time, u32, u16, u8, bool)> {
    evs.iter()
        .filter_map(|&(t, e)| match e {
            Ev::PauseTimer {
                node,
                port,
                class,
                refresh,
            } => Some((t, node, port, class, refresh)),
            _ => None,
        })
        .collect()
}

/// A pause lasts its quanta (512 bit times each at the link's rate, IEEE 802.1Qbb): a switch
/// output paused for 1 000 quanta at 40 Gb/s sends again 12.8 µs later by itself; a second
/// frame before then replaces the time, and the first frame's timer then changes nothing.
#[test]
fn a_pause_runs_out_after_its_quanta_unless_a_later_frame_moves_the_end() {
    let cfg = config(true);
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    let prio = fx.classes.of_dscp(cfg.network.data_dscp);
    let c = fx.classes.class(prio);
    let quantum = Dur::from_picos(12_800);
    sw.pfc(&mut fx, Time::ZERO, 2, prio, 1_000);
    let first = Time::ZERO + quantum.saturating_mul(1_000);
    assert_eq!(
        pause_timers(&drain(&mut fx, FAR)),
        [(first, LEFT, 2, c as u8, false)]
    );
    assert!(sw.ports[2].is_paused(c));
    // Refreshed 5 µs in: the end moves to 5 µs + 12.8 µs.
    let t5 = Time::ZERO + Dur::from_micros(5);
    sw.pfc(&mut fx, t5, 2, prio, 1_000);
    let second = t5 + quantum.saturating_mul(1_000);
    drain(&mut fx, FAR);
    sw.pause_timer(&mut fx, first, 2, c, false);
    assert!(
        sw.ports[2].is_paused(c),
        "the first frame's time no longer holds"
    );
    sw.pause_timer(&mut fx, second, 2, c, false);
    assert!(!sw.ports[2].is_paused(c), "ran out");
    assert_eq!(sw.stats[2].paused, second.since(Time::ZERO));
    assert_eq!(sw.stats[2].pause_received, 2);
}

/// An ingress above its threshold sends XOFF and, while it stays above, sends it again every
/// half pause time (its refresh timer), so that the pause holds as long as the congestion;
/// the XON cancels the refresh that was due. (The event list is only drained up to the next
/// step's time: it cannot take events for a time it has passed.)
#[test]
fn a_congested_ingress_refreshes_its_pause_until_it_resumes() {
    let cfg = config(true);
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    let prio = fx.classes.of_dscp(cfg.network.data_dscp);
    let c = fx.classes.class(prio);
    // The output is held by a pause that the test refreshes itself.
    sw.pfc(&mut fx, Time::ZERO, 2, prio, u16::MAX);
    let xoff = sw.pause_threshold(0);
    while sw.ports[0].ingress.total() <= xoff {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    }
    // 65 535 quanta at the link's rate; refreshed at half of that.
    let rate = fx.topo.nodes[LEFT as usize].ports[0].rate_bps;
    let half = Dur::from_picos(pause_time(u16::MAX, rate).as_picos() / 2);
    let at = |k: u64| Time::ZERO + half.saturating_mul(k);
    let ingress = |evs: &[(Time, Ev)]| -> Vec<(Time, bool)> {
        pause_timers(evs)
            .into_iter()
            .filter(|&(_, node, port, class, _)| (node, port, class) == (LEFT, 0, c as u8))
            .map(|(t, _, _, _, refresh)| (t, refresh))
            .collect()
    };
    let just_after = |t: Time| Time::from_picos(t.as_picos() + 1);
    let evs = drain(&mut fx, at(1));
    assert_eq!(pauses(&evs), [(0, true)]);
    for k in 1..=3u64 {
        sw.pfc(&mut fx, at(k), 2, prio, u16::MAX);
        // The refresh timer is due now: handled, XOFF again and the next one.
        let evs = drain(&mut fx, just_after(at(k)));
        assert_eq!(ingress(&evs), [(at(k), true)], "refresh {k} due");
        sw.pause_timer(&mut fx, at(k), 0, c, true);
        let evs = drain(&mut fx, at(k + 1));
        assert_eq!(pauses(&evs), [(0, true)], "refresh {k}");
    }
    assert_eq!(sw.stats[0].pause_sent, 4);
    // The output resumes and the ingress drains: XON, and the refresh due is void.
    let t = at(3) + Dur::from_micros(1);
    sw.pfc(&mut fx, t, 2, prio, 0);
    let mut evs = Vec::new();
    while let Some((t, e)) = fx.q.q.pop_before(at(4)) {
        match e {
            Ev::TxDone { node, port } if node == LEFT => sw.tx_done(&mut fx, t, usize::from(port)),
            _ => evs.push((t, e)),
        }
    }
    assert_eq!(pauses(&evs), [(0, false)]);
    sw.pause_timer(&mut fx, at(4), 0, c, true);
    assert!(
        pauses(&drain(&mut fx, FAR)).is_empty(),
        "no refresh after XON"
    );
    assert_eq!(sw.stats[0].pause_sent, 5);
}

/// A routing switch (`network.routed_tiers`) sends a tagged frame on untagged, 4 bytes
/// shorter, its PCP gone and its DSCP kept; a bridging one forwards the tag as it came.
#[test]
fn a_routed_hop_sends_frames_on_without_their_vlan_tag() {
    let mut cfg = config(false);
    cfg.network.vlan = true;
    for routed in [false, true] {
        cfg.network.routed_tiers = if routed { vec![1] } else { Vec::new() };
        let mut fx = fabric(&cfg);
        let mut sw = switch(&cfg, &fx, LEFT);
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1004);
        let hop = Hop::new(hop.dst, hop.hash, hop.wire, hop.dscp(), hop.ecn(), Some(3));
        fx.pool.meta[pkt as usize].hop = hop;
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
        let sent: Vec<Hop> = run_switch(&mut sw, &mut fx)
            .into_iter()
            .filter_map(|(_, e)| match e {
                Ev::Arrive { hop, .. } => Some(hop),
                _ => None,
            })
            .collect();
        assert_eq!(sent.len(), 1);
        let out = sent[0];
        assert_eq!(out.dscp(), cfg.network.data_dscp, "the DSCP travels on");
        if routed {
            assert_eq!((out.pcp(), out.wire), (None, 1000), "untagged");
            assert_eq!(sw.stats[2].tx_bytes, 1000);
        } else {
            assert_eq!((out.pcp(), out.wire), (Some(3), 1004), "tag intact");
        }
    }
}

#[test]
fn a_lossy_input_drops_what_its_buffer_cannot_hold() {
    let cfg = config(false);
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    let n = cfg.switch.buffer_bytes / 1000 + 50;
    for _ in 0..n {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    }
    let delivered = arrivals(&run_switch(&mut sw, &mut fx)).len() as u64;
    // The first frame left at once, the next ones filled the input's buffer, the rest was
    // dropped.
    assert_eq!(delivered, cfg.switch.buffer_bytes / 1000 + 1);
    assert_eq!(sw.stats[0].drops, n - delivered);
}

#[test]
fn a_tor_floods_a_frame_for_a_dead_server_and_a_copy_towards_a_switch_is_discarded() {
    let mut cfg = config(true);
    cfg.fault.push(crate::config::FaultConfig {
        kind: FaultKind::HostDown,
        host: 1,
        at_ms: 0.0,
        until_ms: None,
        dscp: None,
    });
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    // Host 1 (port 1) dies: its MAC entry is flushed, its ARP entry stays for hours.
    sw.link_down(&mut fx, Time::ZERO, 1);
    let (pkt, hop) = frame(&mut fx, &cfg, 1, 1000);
    sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    let evs = run_switch(&mut sw, &mut fx);
    // The only other port that is up leads to a switch: the copy is dropped at its egress.
    assert!(arrivals(&evs).is_empty());
    let (l2, _) = sw.safety_counts();
    assert_eq!((l2.floods, l2.flood_discards), (1, 1));
    assert_eq!(sw.used, 0);
    // A frame for a live server is forwarded as ever.
    let (pkt, hop) = frame(&mut fx, &cfg, 0, 1000);
    sw.receive(&mut fx, Time::ZERO, 2, pkt, hop);
    assert_eq!(arrivals(&run_switch(&mut sw, &mut fx)).len(), 1);
}

fn nic(cfg: &SimConfig, fx: &Fabric<Mem>, host: u32) -> Nic<Mem> {
    build_nic(cfg, &fx.topo, host, &nic_tagging(cfg))
}

#[test]
fn a_receive_pipeline_takes_each_frame_at_its_rate() {
    let mut cfg = config(false);
    cfg.nic.rx_gbps = Some(10.0);
    let mut fx = fabric(&cfg);
    let mut n = nic(&cfg, &fx, 0);
    assert!(n.has_pipeline());
    for _ in 0..2 {
        let (pkt, hop) = frame(&mut fx, &cfg, 0, 1000);
        n.buffer(&mut fx, Time::ZERO, pkt, hop, &[]);
    }
    // One frame in the pipeline at a time: 1000 bytes at 10 Gb/s is 800 ns.
    let evs = drain(&mut fx, FAR);
    assert_eq!(evs.len(), 1);
    let (t, ev) = evs[0];
    assert!(matches!(ev, Ev::RxDone { host: 0 }));
    assert_eq!(t, Time::ZERO + Dur::from_nanos(800));
    let f = n.rx_done(&mut fx, t, &[]).expect("the first frame");
    assert_eq!(f.hop.wire, 1000);
    let c = fx.classes.class(fx.classes.of_dscp(cfg.network.data_dscp));
    assert_eq!(n.rx_bytes(c), 1000, "the second frame waits");
    assert!(
        matches!(drain(&mut fx, FAR)[..], [(t2, Ev::RxDone { .. })] if t2 == t + Dur::from_nanos(800))
    );
}

#[test]
fn a_stalled_pipeline_pauses_its_switch_until_the_watchdog_stops_it_pausing() {
    let mut cfg = config(true);
    cfg.nic.rx_gbps = Some(40.0);
    let mut fx = fabric(&cfg);
    let mut n = nic(&cfg, &fx, 0);
    n.stall_rx(&mut fx, Time::ZERO, true, &[]);
    let mut sent = 0u64;
    while n.stats.pause_sent == 0 {
        let (pkt, hop) = frame(&mut fx, &cfg, 0, 1000);
        n.buffer(&mut fx, Time::ZERO, pkt, hop, &[]);
        sent += 1;
    }
    let evs = drain(&mut fx, FAR);
    // A pause to its switch (node 4), and nothing processed.
    assert_eq!(pauses(&evs), [(LEFT, true)]);
    assert!(evs.iter().all(|(_, e)| !matches!(e, Ev::RxDone { .. })));
    assert!(n.check_books().is_ok());
    // Not stuck long enough yet.
    let limit = Dur::from_millis(100);
    assert!(!n.watchdog_poll(&mut fx, Time::ZERO + Dur::from_millis(50), limit));
    // Stuck for the limit while pausing: the watchdog fires once and resumes the switch.
    assert!(n.watchdog_poll(&mut fx, Time::ZERO + limit, limit));
    assert!(!n.watchdog_poll(&mut fx, Time::ZERO + limit + limit, limit));
    assert_eq!(pauses(&drain(&mut fx, FAR)), [(LEFT, false)]);
    // From then on the class is lossy to it: a full buffer drops instead of overflowing.
    let before = n.stats.drops;
    for _ in 0..cfg.nic.rx_buffer_bytes / 1000 {
        let (pkt, hop) = frame(&mut fx, &cfg, 0, 1000);
        n.buffer(&mut fx, Time::ZERO + limit, pkt, hop, &[]);
        sent += 1;
    }
    assert!(n.stats.drops > before);
    assert!(pauses(&drain(&mut fx, FAR)).is_empty(), "it pauses no more");
    assert!(sent > 0);
}

#[test]
fn a_nic_paused_by_its_switch_counts_the_pause_and_a_frame_for_no_queue_pair_is_discarded() {
    let cfg = config(true);
    let mut fx = fabric(&cfg);
    let mut n = nic(&cfg, &fx, 0);
    let prio = fx.classes.of_dscp(cfg.network.data_dscp);
    n.pfc(&mut fx, Time::ZERO, 0, prio, u16::MAX);
    assert_eq!(
        n.open_pause(Time::ZERO + Dur::from_micros(3), prio),
        Dur::from_micros(3)
    );
    n.pfc(&mut fx, Time::ZERO + Dur::from_micros(5), 0, prio, 0);
    assert_eq!(n.stats.paused, Dur::from_micros(5));
    assert_eq!(n.stats.pause_received, 2);
    // A straggler for a queue pair that is gone: freed, no completion.
    let (pkt, hop) = frame(&mut fx, &cfg, 0, 100);
    assert_eq!(n.receive(&mut fx, Time::ZERO, NIL, pkt, hop), None);
    let (again, _) = frame(&mut fx, &cfg, 0, 100);
    assert_eq!(again, pkt, "its slot in the packet table is free again");
}

#[test]
fn the_monitor_samples_what_moved_and_the_fabric_wide_point() {
    let cfg = config(true);
    let fx = fabric(&cfg);
    let ports: Vec<usize> = fx.topo.nodes.iter().map(|n| n.ports.len()).collect();
    let mut mon = Monitor::new(true, Some(Dur::from_micros(100)), &ports, 2, 1);
    mon.tx(LEFT, 2, 1, 1000);
    mon.tx(LEFT, 2, 1, 500);
    mon.pause_sent(0, 0, 1);
    mon.ingress_drop(LEFT, 0, 0);
    mon.delivered(125_000);
    // Host 0's data class (1) has been paused for 60 of the 100 µs, without a resume.
    let t = Time::ZERO + Dur::from_micros(100);
    mon.sample(t, &fx.topo, &fx.classes, |node, _, c| {
        let open = if node == 0 && c == 1 {
            Dur::from_micros(60)
        } else {
            Dur::ZERO
        };
        (open, 0)
    });
    let rows: Vec<(u32, u16, u64, u64)> = mon
        .rows
        .iter()
        .map(|r| (r.node, r.port, r.delta.tx_bytes, r.delta.pause_sent))
        .collect();
    assert_eq!(rows, [(0, 0, 0, 1), (LEFT, 0, 0, 0), (LEFT, 2, 1500, 0)]);
    let p = mon.timeline[0];
    // 125 kB in 100 µs is 10 Gb/s; one pause frame in 100 µs is 10 000 per second.
    assert!((p.goodput_gbps - 10.0).abs() < 1e-9, "{p:?}");
    assert!((p.pause_rate - 10_000.0).abs() < 1e-6, "{p:?}");
    assert_eq!((p.paused_hosts, p.drops), (1, 1));
    // The next sample shows only what moved since: nothing but the pause still open.
    mon.sample(
        t + Dur::from_micros(100),
        &fx.topo,
        &fx.classes,
        |node, _, c| {
            let open = if node == 0 && c == 1 {
                Dur::from_micros(160)
            } else {
                Dur::ZERO
            };
            (open, 0)
        },
    );
    let later: Vec<_> = mon.rows[3..]
        .iter()
        .map(|r| (r.node, r.delta.paused))
        .collect();
    assert_eq!(later, [(0, Dur::from_micros(100))]);
    assert_eq!(mon.timeline[1].paused_hosts, 1);
}

#[test]
fn the_packet_table_reuses_freed_slots_and_keeps_payloads_only_with_bytes() {
    let cfg = config(false);
    let mut fx = fabric(&cfg);
    let (a, _) = frame(&mut fx, &cfg, 2, 100);
    let (b, hop) = frame(&mut fx, &cfg, 2, 100);
    assert_ne!(a, b);
    fx.pool.free(a);
    let c = fx.pool.copy(b, Meta { hop, next: NIL });
    assert_eq!(c, a, "the freed slot first");
    assert!(
        fx.pool.payload(c).is_empty(),
        "no bytes held by this memory model"
    );
    let mut bytes: packet::Pool<irn_transport::ByteMemory> = packet::Pool::new();
    let p = fx.pool.packets[b as usize];
    let m = Meta { hop, next: NIL };
    let x = bytes.alloc(p, vec![1, 2, 3], m);
    let y = bytes.copy(x, m);
    assert_eq!(bytes.payload(y), [1, 2, 3]);
    let (_, taken) = bytes.take(x);
    assert_eq!(taken, [1, 2, 3]);
    assert_eq!(
        bytes.alloc(p, Vec::new(), m),
        x,
        "taking a packet frees its slot"
    );
}

#[test]
fn flow_ends_start_in_time_order_responder_first_and_only_where_owned() {
    let cfg = config(false);
    let at = |us| Time::ZERO + Dur::from_micros(us);
    let flows = vec![
        write(0, 2, 1000, at(5)),
        write(1, 3, 1000, at(5)),
        write(3, 0, 1000, at(1)),
    ];
    let mut q = Events {
        q: EventQueue::new(),
        origin: 0,
        count: vec![0; 6],
    };
    // This partition owns hosts 0, 1 and 2, not 3.
    let mut w = Workload::new(&cfg, flows, Dur::from_micros(2), |h| h != 3, &mut q);
    let mut order = Vec::new();
    while let Some((t, ev)) = q.q.pop() {
        assert!(matches!(ev, Ev::FlowStart));
        let (i, end) = w.next_start(&mut q).expect("a start per event");
        order.push((t, i, end));
    }
    assert_eq!(
        order,
        [
            (at(1), 2, RESP),
            (at(5), 0, RESP),
            (at(5), 0, REQ),
            (at(5), 1, REQ)
        ]
    );
    // Nothing is set up until a NIC does it.
    assert_eq!(w.slot(0, REQ as u8), NIL);
}

/// A flow of `size` bytes from `src` to `dst` starting at `start`.
fn write(src: u32, dst: u32, size: u64, start: Time) -> Flow {
    Flow {
        src,
        dst,
        size,
        start,
        group: None,
        probe: None,
        class: 0,
    }
}

/// NICs joined by a wire that hands every frame straight to its destination NIC (no switch),
/// losing the frames whose numbers (in sending order, from 0) are in `lose`: runs the event
/// list until it is empty, and returns the workload and the NICs.
fn two_nics(cfg: &SimConfig, flows: Vec<Flow>, lose: &[usize]) -> (Workload, Vec<Nic<Mem>>) {
    let mut sent = 0;
    let mut fx = fabric(cfg);
    let mut nics: Vec<Nic<Mem>> = (0..fx.hosts()).map(|h| nic(cfg, &fx, h)).collect();
    let (qp_cfg, attr, state_window) = queue_pair_config(cfg, &fx.topo);
    let qps = QpSetup {
        cfg: qp_cfg,
        attr,
        state_window,
    };
    let mut w = Workload::new(cfg, flows, Dur::from_micros(2), |_| true, &mut fx.q);
    while let Some((now, ev)) = fx.q.q.pop() {
        match ev {
            Ev::FlowStart => {
                let (i, end) = w.next_start(&mut fx.q).expect("a start");
                fx.q.origin = w.end_host(&w.flows[i], end);
                w.start_end(
                    &mut fx,
                    &mut nics,
                    std::slice::from_ref(&qps),
                    now,
                    (i, end),
                );
            }
            Ev::TxDone { node, .. } => nics[node as usize].tx_done(&mut fx, now),
            // A frame reaches the first switch: the wire hands it to its destination.
            Ev::Arrive { pkt, hop, .. } => {
                sent += 1;
                if lose.contains(&(sent - 1)) {
                    fx.pool.free(pkt);
                    continue;
                }
                let p = fx.pool.packets[pkt as usize];
                let slot = w.slot(p.flow, p.to);
                fx.q.origin = hop.dst;
                let done = nics[hop.dst as usize].receive(&mut fx, now, slot, pkt, hop);
                w.finished(&mut fx, &mut nics, now, done);
            }
            Ev::QpTimer { host, slot, gen } => {
                let done = nics[host as usize].timer(&mut fx, now, slot, gen);
                w.finished(&mut fx, &mut nics, now, done);
            }
            Ev::FlowEnd { host, flow } => w.end_responder(&mut nics[host as usize], flow as usize),
            other => panic!("unexpected {other:?}"),
        }
    }
    (w, nics)
}

#[test]
fn a_nic_given_its_peers_packets_completes_the_write_once_and_retires_both_queue_pairs() {
    let mut cfg = config(false);
    cfg.transport.recovery = crate::config::Recovery::Irn;
    let size = 10 * u64::from(cfg.network.mtu) + 7;
    let (w, nics) = two_nics(&cfg, vec![write(0, 2, size, Time::ZERO)], &[]);
    let r = w.records[0];
    assert_eq!(r.status, Some(irn_transport::WcStatus::Success));
    assert_eq!(w.done, 1);
    assert_eq!(w.delivered, size);
    // Eleven data packets one way; IRN acknowledges every one (SPEC T7).
    assert_eq!(nics[0].stats.tx_packets, 11);
    assert_eq!(nics[0].retired.tx_packets, 11);
    assert_eq!(nics[2].retired.acks_sent, 11);
    // Both queue pairs are gone (their counters retired) and nothing else moved.
    assert!(nics[0].live().is_empty() && nics[2].live().is_empty());
    assert_eq!(nics[1].stats.tx_packets + nics[3].stats.tx_packets, 0);
    // Eleven frames of about 230 ns back to back, 2 µs to the peer and 2 µs back.
    assert!(
        r.fct().expect("completed") < Dur::from_micros(10),
        "{:?}",
        r.fct()
    );
}

#[test]
fn a_nic_recovers_lost_packets_selectively_under_irn_and_from_the_hole_under_go_back_n() {
    for (recovery, resent) in [
        (crate::config::Recovery::Irn, 2),
        (crate::config::Recovery::Roce, 9),
    ] {
        let mut cfg = config(false);
        cfg.transport.recovery = recovery;
        let size = 10 * u64::from(cfg.network.mtu);
        // The second and fourth data packets are lost (frames 1 and 3, before any ACK).
        let (w, nics) = two_nics(&cfg, vec![write(0, 2, size, Time::ZERO)], &[1, 3]);
        assert_eq!(
            w.records[0].status,
            Some(irn_transport::WcStatus::Success),
            "{recovery:?}"
        );
        assert_eq!(w.delivered, size);
        // IRN resends the two holes; go-back-N resends everything from the first hole on.
        let data = nics[0].retired.tx_packets;
        assert_eq!(data, 10 + resent, "{recovery:?}: {data} packets sent");
    }
}

/// The DSCPs of the frames `evs` delivers, in arrival order.
fn arriving_dscps(evs: &[(Time, Ev)]) -> Vec<u8> {
    evs.iter()
        .filter_map(|&(_, e)| match e {
            Ev::Arrive { hop, .. } => Some(hop.dscp()),
            _ => None,
        })
        .collect()
}

/// A switch fed 40 frames of priority 3 (DSCP 26) through one input and 40 of priority 4
/// (DSCP 34) through another, all for one output: strict priority sends every priority-4
/// frame first; DWRR weighted 3 : 1 for priority 3 sends three of its frames for each of the
/// other's while both are backlogged.
#[test]
fn a_switch_output_serves_its_classes_in_strict_priority_or_by_weight() {
    let mut cfg = config(false);
    cfg.traffic.push(crate::config::TrafficConfig {
        dscp: 34,
        ..Default::default()
    });
    let run = |cfg: &SimConfig| {
        let mut fx = fabric(cfg);
        let mut sw = switch(cfg, &fx, LEFT);
        // The output is busy with a first frame while the others queue behind it.
        for _ in 0..40 {
            for (inp, dscp) in [(0u16, 26u8), (1, 34)] {
                let (pkt, mut hop) = frame(&mut fx, cfg, 2, 1000);
                hop = Hop::new(2, 7, hop.wire, dscp, Ecn::Ect0, None);
                fx.pool.meta[pkt as usize].hop = hop;
                sw.receive(&mut fx, Time::ZERO, inp, pkt, hop);
            }
        }
        arriving_dscps(&run_switch(&mut sw, &mut fx))
    };
    let strict = run(&cfg);
    assert_eq!(strict.len(), 80);
    // The first frame found the output idle; then priority 4 drains before priority 3.
    assert!(strict[1..41].iter().all(|&d| d == 34), "{strict:?}");
    cfg.network.scheduler = crate::config::Scheduler::Dwrr;
    cfg.network.dwrr_weights = Some(vec![1, 1, 1, 3, 1, 1, 0, 0]);
    let dwrr = run(&cfg);
    assert_eq!(dwrr.len(), 80);
    let first = &dwrr[1..41];
    let p3 = first.iter().filter(|&&d| d == 26).count();
    assert!((29..=31).contains(&p3), "{p3} of 40: {dwrr:?}");
}

/// A port whose PFC setting drifted off (seed 001 §5.1's per-port part): its ingress never
/// pauses the host and drops lossless frames once its buffer is full; a pause the host sends
/// it is ignored; set right, it pauses again.
#[test]
fn a_port_with_pfc_off_drops_instead_of_pausing_and_ignores_pauses() {
    let cfg = config(true);
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    let prio = fx.classes.of_dscp(cfg.network.data_dscp);
    assert!(sw.pfc_on(0));
    sw.set_pfc(&mut fx, Time::ZERO, 0, false);
    assert!(!sw.pfc_on(0) && sw.pfc_on(1));
    // The output towards host 2 is paused: host 0's frames stay in port 0's buffer.
    sw.pfc(&mut fx, Time::ZERO, 2, prio, u16::MAX);
    let buffer = cfg.switch.buffer_bytes;
    for _ in 0..(buffer / 1000 + 20) {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    }
    let evs = drain(&mut fx, FAR);
    assert!(pauses(&evs).is_empty(), "no pause from a port with PFC off");
    assert_eq!(
        sw.stats[0].drops, 20,
        "what the buffer cannot hold is dropped"
    );
    assert_eq!(sw.stats[0].headroom_overflow, 0);
    // Host 0 pauses the port's output: ignored, the pause is counted.
    sw.pfc(&mut fx, Time::ZERO, 0, prio, u16::MAX);
    assert!(!sw.ports[0].is_paused(fx.classes.class(prio)));
    assert_eq!(sw.stats[0].pause_received, 1);
    // Set right: the next frame over the threshold pauses host 0.
    sw.set_pfc(&mut fx, Time::ZERO, 0, true);
    let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
    sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    assert_eq!(pauses(&drain(&mut fx, FAR)), [(0, true)]);
}

/// A server's link on 802.3x PAUSE in a PFC fabric (`network.pause_hosts`): its ToR port
/// pauses the server once every class together passes the threshold, with one frame naming
/// every priority; a PAUSE from the server stops every class of the port's output, where a
/// PFC frame stops one.
#[test]
fn a_pause_link_pauses_and_is_paused_as_a_whole() {
    let mut cfg = config(true);
    cfg.network.pause_hosts = vec![0];
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    let data = fx.classes.of_dscp(cfg.network.data_dscp);
    let ctrl = fx.classes.of_dscp(cfg.network.control_dscp);
    let (cd, cc) = (fx.classes.class(data), fx.classes.class(ctrl));
    // The output towards host 2 is paused: frames from host 0 stay in port 0's buffer.
    sw.pfc(&mut fx, Time::ZERO, 2, data, u16::MAX);
    let xoff = sw.pause_threshold(0);
    while sw.ports[0].ingress.total() <= xoff {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    }
    let evs = drain(&mut fx, FAR);
    let frames: Vec<(u32, u8, u16)> = evs
        .iter()
        .filter_map(|&(_, e)| match e {
            Ev::Pfc {
                node, prio, quanta, ..
            } => Some((node, prio, quanta)),
            _ => None,
        })
        .collect();
    assert_eq!(
        frames,
        [(0, pfc::ALL_PRIORITIES, u16::MAX)],
        "one PAUSE for host 0"
    );
    // Host 0 sends a PAUSE: both classes of the port's output stop; a PFC frame on port 1
    // (a PFC link) stops only its class.
    sw.pfc(&mut fx, Time::ZERO, 0, pfc::ALL_PRIORITIES, u16::MAX);
    assert!(sw.ports[0].is_paused(cd) && sw.ports[0].is_paused(cc));
    sw.pfc(&mut fx, Time::ZERO, 1, data, u16::MAX);
    assert!(sw.ports[1].is_paused(cd) && !sw.ports[1].is_paused(cc));
    // XON for every priority resumes both.
    sw.pfc(&mut fx, Time::ZERO, 0, pfc::ALL_PRIORITIES, 0);
    assert!(!sw.ports[0].is_paused(cd) && !sw.ports[0].is_paused(cc));
}

/// Beside a lossless class, a lossy frame may not take the headroom: it is dropped once the
/// input holds the pause threshold, where a lossless one is still admitted.
#[test]
fn a_lossy_frame_beside_a_lossless_class_leaves_the_headroom_free() {
    let mut cfg = config(true);
    cfg.traffic.push(crate::config::TrafficConfig {
        dscp: 0,
        ..Default::default()
    });
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    let data = fx.classes.of_dscp(cfg.network.data_dscp);
    sw.pfc(&mut fx, Time::ZERO, 2, data, u16::MAX);
    sw.pfc(&mut fx, Time::ZERO, 2, 0, u16::MAX);
    let xoff = sw.pause_threshold(0);
    let lossy = |fx: &mut Fabric<Mem>| {
        let (pkt, hop) = frame(fx, &cfg, 2, 1000);
        let hop = Hop::new(2, 7, hop.wire, 0, Ecn::Ect0, None);
        fx.pool.meta[pkt as usize].hop = hop;
        (pkt, hop)
    };
    while sw.ports[0].ingress.total() + 1000 <= xoff {
        let (pkt, hop) = lossy(&mut fx);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    }
    assert_eq!(sw.stats[0].drops, 0);
    let (pkt, hop) = lossy(&mut fx);
    sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    assert_eq!(sw.stats[0].drops, 1, "a lossy frame stops at the threshold");
    // A lossless frame still gets in, and pauses host 0 at once: the input is full.
    let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
    sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    assert_eq!(sw.stats[0].drops, 1);
    assert_eq!(pauses(&drain(&mut fx, FAR)), [(0, true)]);
    assert_eq!(sw.stats[0].headroom_overflow, 0);
}

/// A shared-buffer switch pauses a lossless ingress once it holds `pfc_alpha` × the free
/// shared buffer (the buffer less the ports' headroom, less what is queued): ingress bytes x
/// pause at x > α (S − x), that is at α S ÷ (1 + α) — S ÷ 17 at Broadcom's 1/16, S ÷ 2 at
/// the default (`dt_alpha`, 1).
#[test]
fn a_shared_buffer_pauses_an_ingress_at_pfc_alpha_of_the_free_buffer() {
    let frames_to_xoff = |pfc_alpha: Option<f64>| {
        let mut cfg = config(true);
        cfg.switch.model = crate::config::SwitchModel::SharedBuffer;
        cfg.switch.buffer_bytes = 600_000;
        cfg.switch.pfc_alpha = pfc_alpha;
        let mut fx = fabric(&cfg);
        let mut sw = switch(&cfg, &fx, LEFT);
        let prio = fx.classes.of_dscp(cfg.network.data_dscp);
        // The output is paused: every frame stays in the buffer.
        sw.pfc(&mut fx, Time::ZERO, 2, prio, u16::MAX);
        // The ports' headroom is kept out of the shared pool.
        let b = cfg.switch.buffer_bytes;
        let reserved: u64 = (0..3).map(|i| b - sw.port_xoff(i).expect("a port")).sum();
        let shared = b - reserved;
        let mut n = 0u64;
        while sw.ports[0].ingress.total() <= sw.pause_threshold(0) {
            let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
            sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
            n += 1;
        }
        let evs = drain(&mut fx, FAR);
        assert_eq!(pauses(&evs), [(0, true)], "one XOFF upstream");
        (n, shared)
    };
    let (n16, shared) = frames_to_xoff(Some(1.0 / 16.0));
    assert!(
        n16.abs_diff(shared / 17 / 1000) <= 1,
        "{n16} frames of {shared} B"
    );
    let (n1, _) = frames_to_xoff(Some(1.0));
    assert!(
        n1.abs_diff(shared / 2 / 1000) <= 1,
        "{n1} frames of {shared} B"
    );
    assert_eq!(frames_to_xoff(None).0, n1, "absent: dt_alpha's");
}

/// Which of five 1000-byte frames, arriving together for one output, leave it marked CE under
/// a threshold of 2 500 bytes, marking at `at`.
fn marked_of_five(at: crate::config::EcnPoint) -> Vec<bool> {
    let mut cfg = config(false);
    cfg.switch.ecn = crate::config::EcnMode::Threshold;
    cfg.switch.ecn_kmin_bytes = 2_500;
    cfg.switch.ecn_mark_at = at;
    let mut fx = fabric(&cfg);
    let mut sw = switch(&cfg, &fx, LEFT);
    for _ in 0..5 {
        let (pkt, hop) = frame(&mut fx, &cfg, 2, 1000);
        sw.receive(&mut fx, Time::ZERO, 0, pkt, hop);
    }
    let evs = run_switch(&mut sw, &mut fx);
    let marked: Vec<bool> = evs
        .iter()
        .filter_map(|&(_, e)| match e {
            Ev::Arrive { pkt, hop, .. } => {
                assert_eq!(hop.ecn(), fx.pool.meta[pkt as usize].hop.ecn(), "one mark");
                Some(hop.ecn() == Ecn::Ce)
            }
            _ => None,
        })
        .collect();
    let n = marked.iter().filter(|&&m| m).count() as u64;
    assert_eq!(sw.stats[2].ecn_marked, n);
    marked
}

#[test]
fn a_switch_marks_on_the_queue_a_frame_joins_or_on_the_one_it_leaves_behind() {
    use crate::config::EcnPoint;
    // The first frame goes straight out; the others find 0, 1 000, 2 000 and 3 000 bytes
    // ahead of them: only the last is above the threshold.
    assert_eq!(
        marked_of_five(EcnPoint::Enqueue),
        [false, false, false, false, true]
    );
    // Leaving, they leave 0 (the first, never queued), 3 000, 2 000, 1 000 and 0 bytes
    // behind: only the second is marked, one queueing delay before the last would be.
    assert_eq!(
        marked_of_five(EcnPoint::Dequeue),
        [false, true, false, false, false]
    );
}
