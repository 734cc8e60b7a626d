//! Set-up of a run: what every queue pair and NIC of the run shares, derived once from the
//! configuration — the queue pairs' recovery, timeouts, BDP cap and congestion controller, and
//! the largest frame on the wire.

use super::packet::{FRAME_OVERHEAD, VLAN_TAG_LEN};
use crate::config::{us, CcKind, Recovery, SimConfig};
use crate::topology::Topology;
use irn_transport::{
    bdp_cap_packets, BackoffOnLossFactory, ControllerFactory, DcqcnFactory, Dur, HoleRule,
    NoCcFactory, QpAttr, QpConfig, RecoveryConfig, RtoPolicy, TcpModel, TimelyFactory,
    WindowAlgorithm, WindowConfig, WindowFactory,
};
use std::sync::Arc;

/// The congestion controller every queue pair of the run gets (`transport.cc`, `[cc]`), backing
/// off on losses too with `transport.cc_backoff_on_loss`.
pub(super) fn cc_factory(cfg: &SimConfig, bdp_cap: u32, rtt: Dur) -> Arc<dyn ControllerFactory> {
    let own = own_cc_factory(cfg, bdp_cap, rtt);
    if cfg.transport.cc_backoff_on_loss {
        Arc::new(BackoffOnLossFactory {
            inner: own,
            interval: us(cfg.transport.cc_backoff_interval_us),
        })
    } else {
        own
    }
}

/// The congestion controller of `transport.cc` as published.
fn own_cc_factory(cfg: &SimConfig, bdp_cap: u32, rtt: Dur) -> Arc<dyn ControllerFactory> {
    let tcp = cfg.transport.recovery == Recovery::Tcp;
    match cfg.transport.cc {
        CcKind::None if !tcp => Arc::new(NoCcFactory),
        CcKind::Dcqcn => Arc::new(DcqcnFactory {
            config: cfg.cc.dcqcn.config(),
            seed: cfg.seed,
        }),
        CcKind::Timely => Arc::new(TimelyFactory(cfg.cc.timely.config())),
        // `recovery = "tcp"` with dcqcn or timely is refused by the configuration's checks.
        CcKind::None | CcKind::Dctcp | CcKind::Aimd => window_factory(cfg, bdp_cap, rtt, tcp),
    }
}

/// AIMD's or DCTCP's window (`[cc.window]`), as IRN runs it or as the TCP model does.
fn window_factory(
    cfg: &SimConfig,
    bdp_cap: u32,
    rtt: Dur,
    tcp: bool,
) -> Arc<dyn ControllerFactory> {
    let w = &cfg.cc.window;
    let mss = u64::from(cfg.network.mtu);
    // IRN's flows start at line rate: a window of the BDP, in congestion avoidance, no
    // larger than the BDP (beyond it a window sends nothing more, IRN's cap, and only
    // dulls the cuts). The TCP model (SPEC E10) slow-starts from its initial window
    // with ssthresh and ceiling at the receive window, the receiver's out-of-order
    // window (4 096 segments).
    let rwnd = u64::from(QpConfig::default().ooo_window) * mss;
    let (init, ssthresh, ceiling) = if tcp {
        let iw = u64::from(cfg.transport.tcp_initial_window) * mss;
        (w.init_window_bytes.unwrap_or(iw), Some(rwnd), rwnd)
    } else {
        let init = w.init_window_bytes.unwrap_or(u64::from(bdp_cap) * mss);
        (init, None, init)
    };
    Arc::new(WindowFactory(WindowConfig {
        algorithm: if cfg.transport.cc == CcKind::Dctcp {
            WindowAlgorithm::Dctcp
        } else {
            WindowAlgorithm::Aimd
        },
        mss,
        init_window: init,
        init_ssthresh: ssthresh,
        min_window: w.min_window_bytes.unwrap_or(mss),
        max_window: Some(w.max_window_bytes.unwrap_or(ceiling)),
        g: w.g,
        initial_rtt: rtt,
    }))
}

/// The largest headers a data packet carries beyond its payload: BTH, a RETH (on every IRN
/// Write packet, IRN §5.3.1) and an IRNETH with up to three 4-byte fields (16 bytes, over its
/// 4-byte head).
const LARGEST_HEADERS: u32 = (irn_wire::BTH_LEN + irn_wire::RethRepr::LEN + 16) as u32;

/// What the TCP model's segments carry beyond the IRN packet they ride, in bytes: (data,
/// ACK). An iWARP data segment has TCP's 20-byte header with the 12-byte timestamp option,
/// MPA's 2-byte length and 4-byte CRC, and the DDP/RDMAP tagged header (14) — 52 bytes where
/// an IRN Write packet has UDP (8), BTH (12), RETH (16) and ICRC (4), 40: 12 more. A pure ACK
/// has TCP's header, the timestamps and a SACK option of up to three blocks (26) — 58 bytes
/// against IRN's UDP, BTH, AETH, SACK PSN and ICRC (32): 26 more. (RFC 793, 7323, 2018;
/// RFC 5044 MPA without markers; RFC 5041 DDP; RFC 5040 RDMAP.)
pub(super) const TCP_EXTRA_HEADERS: [u32; 2] = [12, 26];

/// The TCP model's extra header bytes (data, control) for this run, zero for every RDMA
/// transport.
pub(super) fn extra_headers(cfg: &SimConfig) -> [u32; 2] {
    if cfg.transport.recovery == Recovery::Tcp {
        TCP_EXTRA_HEADERS
    } else {
        [0, 0]
    }
}

/// The largest frame on the wire at the network's path MTU: the payload, the largest headers
/// (the TCP model's larger ones when it runs) and the framing ([`FRAME_OVERHEAD`], and the
/// 802.1Q tag when frames carry one).
pub(super) fn mtu_wire(cfg: &SimConfig) -> u32 {
    let net = &cfg.network;
    let tag = if net.vlan { VLAN_TAG_LEN } else { 0 };
    // The TCP model's larger headers, if any class runs it.
    let tcp = cfg.transport.recovery == Recovery::Tcp
        || cfg
            .traffic
            .iter()
            .any(|t| t.recovery == Some(Recovery::Tcp));
    let extra = if tcp { TCP_EXTRA_HEADERS[0] } else { 0 };
    net.mtu + FRAME_OVERHEAD + tag + LARGEST_HEADERS + extra
}

/// The creation-time configuration every queue pair of the run shares (its QPN set per queue
/// pair) and the connection attributes: recovery by `transport.recovery` with the run's
/// timeouts (IRN's RTO_low/RTO_high; RoCE's one RTO, or none over PFC) and BDP cap (the
/// longest path's round trip at the host rate, in largest frames, unless configured), and
/// the congestion controller of `transport.cc`.
/// The queue pairs' configuration and attributes, and the window (packets) that sizes the
/// per-QP state of designs not bounded by a BDP cap (SPEC E13: the path's BDP, or the cap).
pub(super) fn queue_pair_config(cfg: &SimConfig, topo: &Topology) -> (QpConfig, QpAttr, u32) {
    let net = &cfg.network;
    let host_rate = topo.host_port(0).rate_bps;
    let tr = &cfg.transport;
    let bdp_cap = tr
        .bdp_cap
        .unwrap_or_else(|| bdp_cap_packets(host_rate, topo.max_rtt(), mtu_wire(cfg)));
    let irn_rto = if tr.rto_adaptive {
        RtoPolicy::Adaptive {
            min: us(tr.rto_high_us),
            max: us(tr.tcp_max_rto_us),
            initial: us(tr.rto_high_us),
        }
    } else {
        RtoPolicy::Irn {
            low: us(tr.rto_low_us),
            high: us(tr.rto_high_us),
            n: tr.rto_n,
        }
    };
    let roce_rto = if net.pfc && !tr.roce_timeout_with_pfc {
        RtoPolicy::Disabled
    } else {
        RtoPolicy::Fixed(us(tr.roce_rto_us))
    };
    let tcp_rto = RtoPolicy::Adaptive {
        min: us(tr.tcp_min_rto_us),
        max: us(tr.tcp_max_rto_us),
        initial: us(tr.tcp_min_rto_us),
    };
    let recovery = tr.recovery.preset();
    let tcp = tr.recovery == Recovery::Tcp;
    let recovery = RecoveryConfig {
        bdp_cap: recovery.bdp_cap.map(|_| bdp_cap),
        rto: if tcp {
            tcp_rto
        } else if tr.recovery.is_irn() {
            irn_rto
        } else {
            roce_rto
        },
        rto_backoff_after: match tr.rto_backoff {
            None => recovery.rto_backoff_after.map(|_| tr.rto_backoff_after),
            Some(on) => on.then_some(tr.rto_backoff_after),
        },
        tcp: tcp.then(|| TcpModel {
            delayed_ack: tr.tcp_delayed_ack_us.map(us),
        }),
        reorder_buffer: recovery.reorder_buffer.map(|_| tr.reorder_buffer),
        hole_rule: recovery.hole_rule.map(|_| HoleRule {
            delay: us(tr.nak_delay_us),
            threshold: tr.nak_threshold,
        }),
        dup_threshold: if tcp {
            tr.tcp_dup_thresh
        } else {
            tr.dup_threshold
        },
        resend_lost_retransmissions: tr.resend_lost_retransmissions,
        ack_every: tr.ack_every,
        renak_after: tr.renak_us.map(us),
        timeout_resends_unsacked: tr.timeout_resends_unsacked,
        nack_bitmap: tr.nack_bitmap,
        ..recovery
    };
    let qp_cfg = QpConfig {
        qpn: 0,
        recovery,
        cc: cc_factory(cfg, bdp_cap, topo.max_rtt()),
        // Only DCQCN reads CNPs: under any other controller they would be wasted bytes.
        cnp_interval: (tr.cc == CcKind::Dcqcn).then(|| cfg.cc.dcqcn.cnp_interval()),
        line_rate_bps: host_rate,
        retry_limit: if tr.retry_cnt.is_some() {
            None
        } else {
            Some(u32::MAX / 2)
        },
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpConfig::default()
    };
    let qp_attr = QpAttr {
        path_mtu: cfg.network.mtu,
        retry_cnt: tr.retry_cnt.unwrap_or(QpAttr::default().retry_cnt),
        timeout: tr.ack_timeout,
        ..QpAttr::default()
    };
    let state_window = qp_cfg.recovery.state_window(bdp_cap, qp_cfg.ooo_window);
    (qp_cfg, qp_attr, state_window)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::TrafficConfig;

    /// The components' tests' dumbbell, with `recovery`.
    fn config(recovery: Recovery, pfc: bool) -> SimConfig {
        let mut cfg = crate::net::tests::config(pfc);
        cfg.transport.recovery = recovery;
        cfg
    }

    fn qp(cfg: &SimConfig) -> (QpConfig, QpAttr, u32) {
        let topo = Topology::build(&cfg.topology, Path::new(".")).expect("a dumbbell");
        queue_pair_config(cfg, &topo)
    }

    /// Each recovery gets its own timer: IRN's two timeouts (T5), RoCE's one — none over a
    /// lossless fabric unless asked for, as in the IRN evaluation — and the TCP model's
    /// adaptive one.
    #[test]
    fn each_recovery_gets_its_own_timer() {
        let mut irn = config(Recovery::Irn, false);
        irn.transport.rto_low_us = 100.0;
        irn.transport.rto_high_us = 320.0;
        irn.transport.rto_n = 3;
        assert_eq!(
            qp(&irn).0.recovery.rto,
            RtoPolicy::Irn {
                low: us(100.0),
                high: us(320.0),
                n: 3
            }
        );
        irn.transport.rto_adaptive = true;
        assert!(matches!(
            qp(&irn).0.recovery.rto,
            RtoPolicy::Adaptive { min, initial, .. } if min == us(320.0) && initial == us(320.0)
        ));

        let mut roce = config(Recovery::Roce, true);
        roce.transport.roce_rto_us = 640.0;
        assert_eq!(qp(&roce).0.recovery.rto, RtoPolicy::Disabled);
        roce.transport.roce_timeout_with_pfc = true;
        assert_eq!(qp(&roce).0.recovery.rto, RtoPolicy::Fixed(us(640.0)));
        roce.network.pfc = false;
        roce.transport.roce_timeout_with_pfc = false;
        assert_eq!(qp(&roce).0.recovery.rto, RtoPolicy::Fixed(us(640.0)));

        let mut tcp = config(Recovery::Tcp, false);
        tcp.transport.tcp_min_rto_us = 1000.0;
        assert!(matches!(
            qp(&tcp).0.recovery.rto,
            RtoPolicy::Adaptive { min, .. } if min == us(1000.0)
        ));
    }

    /// The BDP cap is the path's round trip at the host rate in largest frames unless
    /// configured, and only recoveries that have one (IRN, not RoCE) get it.
    #[test]
    fn the_bdp_cap_is_the_round_trip_in_frames_unless_configured() {
        let irn = config(Recovery::Irn, false);
        let topo = Topology::build(&irn.topology, Path::new(".")).expect("a dumbbell");
        let derived = bdp_cap_packets(topo.host_port(0).rate_bps, topo.max_rtt(), mtu_wire(&irn));
        assert!(derived > 1);
        assert_eq!(qp(&irn).0.recovery.bdp_cap, Some(derived));
        let mut fixed = irn.clone();
        fixed.transport.bdp_cap = Some(7);
        assert_eq!(qp(&fixed).0.recovery.bdp_cap, Some(7));
        assert_eq!(qp(&config(Recovery::Roce, true)).0.recovery.bdp_cap, None);
    }

    /// The largest frame grows by the 802.1Q tag when frames carry one, and by the TCP
    /// model's larger headers when any class runs it; only the TCP model adds header bytes
    /// per packet.
    #[test]
    fn the_largest_frame_counts_tags_and_the_tcp_models_headers() {
        let mut cfg = config(Recovery::Irn, false);
        let plain = mtu_wire(&cfg);
        // Ethernet 14 + FCS 4 + IPv4 20 + UDP 8 + ICRC 4, and BTH 12 + RETH 16 + IRNETH 16.
        assert_eq!(plain, cfg.network.mtu + 50 + 44);
        assert_eq!(extra_headers(&cfg), [0, 0]);
        cfg.network.vlan = true;
        assert_eq!(mtu_wire(&cfg), plain + VLAN_TAG_LEN);
        cfg.network.vlan = false;
        cfg.traffic.push(TrafficConfig {
            recovery: Some(Recovery::Tcp),
            ..TrafficConfig::default()
        });
        assert_eq!(mtu_wire(&cfg), plain + TCP_EXTRA_HEADERS[0]);
        assert_eq!(
            extra_headers(&cfg),
            [0, 0],
            "the run's own transport is IRN"
        );
        let tcp = config(Recovery::Tcp, false);
        assert_eq!(extra_headers(&tcp), TCP_EXTRA_HEADERS);
    }

    /// CNPs are sent only to a controller that reads them (DCQCN), and a queue pair retries
    /// without limit unless `retry_cnt` gives verbs' limit.
    #[test]
    fn cnps_only_for_dcqcn_and_retries_unlimited_unless_configured() {
        let mut cfg = config(Recovery::Irn, false);
        let (c, _, _) = qp(&cfg);
        assert_eq!(c.cnp_interval, None);
        assert!(c.retry_limit.is_some_and(|l| l >= u32::MAX / 2));
        cfg.transport.cc = CcKind::Dcqcn;
        cfg.transport.retry_cnt = Some(3);
        let (c, attr, _) = qp(&cfg);
        assert_eq!(c.cnp_interval, Some(cfg.cc.dcqcn.cnp_interval()));
        assert_eq!(c.retry_limit, None);
        assert_eq!(attr.retry_cnt, 3);
        assert_eq!(attr.path_mtu, cfg.network.mtu);
    }
}
