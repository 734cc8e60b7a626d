//! The second stage of reading a configuration ([`SimConfig::validate`]): the values, against
//! each other — what serde's typed parsing (`mod.rs`) cannot check. Each error names its key.

use super::*;

/// `Ok` if `ok`, else the error "`key` what" (every check names its key).
pub(super) fn check(ok: bool, key: &str, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("`{key}` {what}"))
    }
}

impl SimConfig {
    /// `[cc]` and what the chosen controller needs of the network.
    fn validate_cc(&self) -> Result<(), String> {
        // Positive, and still positive once converted to whole bits per second or picoseconds
        // (a rate rounded to zero would stop a sender for good).
        let positive = |v: f64| v.is_finite() && v * 1e6 >= 1.0;
        let fraction = |v: f64| v > 0.0 && v <= 1.0;
        let d = &self.cc.dcqcn;
        check(fraction(d.g), "cc.dcqcn.g", "must be in (0, 1]")?;
        for (v, k) in [
            (d.alpha_period_us, "cc.dcqcn.alpha_period_us"),
            (d.increase_period_us, "cc.dcqcn.increase_period_us"),
            (d.ai_mbps, "cc.dcqcn.ai_mbps"),
            (d.hai_mbps, "cc.dcqcn.hai_mbps"),
            (d.min_rate_mbps, "cc.dcqcn.min_rate_mbps"),
            (d.decrease_interval_us, "cc.dcqcn.decrease_interval_us"),
            (self.cc.timely.delta_mbps, "cc.timely.delta_mbps"),
            (self.cc.timely.min_rtt_us, "cc.timely.min_rtt_us"),
            (self.cc.timely.min_rate_mbps, "cc.timely.min_rate_mbps"),
        ] {
            check(positive(v), k, "must be positive")?;
        }
        check(
            d.cnp_interval_us >= 0.0 && d.cnp_interval_us.is_finite(),
            "cc.dcqcn.cnp_interval_us",
            "must be ≥ 0",
        )?;
        check(
            (0.0..=1.0).contains(&d.initial_alpha),
            "cc.dcqcn.initial_alpha",
            "must be in [0, 1]",
        )?;
        check(
            (0.0..1.0).contains(&d.timer_jitter),
            "cc.dcqcn.timer_jitter",
            "must be in [0, 1)",
        )?;
        let t = &self.cc.timely;
        check(fraction(t.alpha), "cc.timely.alpha", "must be in (0, 1]")?;
        check(fraction(t.beta), "cc.timely.beta", "must be in (0, 1]")?;
        check(
            t.t_low_us >= 0.0 && t.t_low_us < t.t_high_us && t.t_high_us.is_finite(),
            "cc.timely.t_low_us",
            "must be ≥ 0 and below t_high_us",
        )?;
        check(
            t.hai_threshold >= 1,
            "cc.timely.hai_threshold",
            "must be at least 1",
        )?;
        check(
            t.segment_bytes > 0,
            "cc.timely.segment_bytes",
            "must be positive",
        )?;
        let w = &self.cc.window;
        check(fraction(w.g), "cc.window.g", "must be in (0, 1]")?;
        check(
            w.min_window_bytes.is_none_or(|m| m > 0),
            "cc.window.min_window_bytes",
            "must be positive",
        )?;
        check(
            w.max_window_bytes.is_none_or(|m| {
                m >= w
                    .min_window_bytes
                    .unwrap_or(u64::from(self.network.mtu))
                    .max(1)
            }),
            "cc.window.max_window_bytes",
            "must be at least min_window_bytes (default: one MTU)",
        )?;
        let host_mbps = self.topology.link_gbps.tier(0) * 1000.0;
        match self.transport.cc {
            CcKind::Dcqcn => check(
                d.min_rate_mbps <= host_mbps,
                "cc.dcqcn.min_rate_mbps",
                "must not exceed the host link rate",
            )?,
            CcKind::Timely => check(
                t.min_rate_mbps <= host_mbps,
                "cc.timely.min_rate_mbps",
                "must not exceed the host link rate",
            )?,
            CcKind::Dctcp | CcKind::Aimd => check(
                self.transport.recovery.takes_a_window(),
                "transport.cc",
                "cannot be a window (dctcp, aimd) over roce-go-back-0: its responder ACKs only \
                 at message ends, so a window smaller than a message would never reopen",
            )?,
            CcKind::None => {}
        }
        if self.transport.cc_backoff_on_loss {
            check(
                matches!(self.transport.cc, CcKind::Dcqcn | CcKind::Timely),
                "transport.cc_backoff_on_loss",
                "backs off a rate controller: needs transport.cc = \"dcqcn\" or \"timely\" \
                 (dctcp and aimd already cut their window on a loss; none has nothing to cut)",
            )?;
            let i = self.transport.cc_backoff_interval_us;
            check(
                i.is_finite() && i >= 0.0,
                "transport.cc_backoff_interval_us",
                "must be a number of µs, 0 or more",
            )?;
        }
        // Only DCQCN controls Read responses: its CNPs reach the responder; the others' signals
        // (ACK round trips, echoes, losses) come from request ACKs only.
        check(
            self.transport.op != FlowOp::Read
                || matches!(self.transport.cc, CcKind::None | CcKind::Dcqcn),
            "transport.cc",
            "must be none or dcqcn with transport.op = \"read\" (TIMELY, DCTCP and AIMD \
             control request data only)",
        )?;
        // DCQCN's CNPs and DCTCP's echoes come from ECN marks: without marking switches they
        // would silently run as no congestion control at all.
        if matches!(self.transport.cc, CcKind::Dcqcn | CcKind::Dctcp) {
            check(
                self.switch.ecn != EcnMode::Off,
                "switch.ecn",
                &format!(
                    "must be `red` or `threshold` with transport.cc = \"{}\" (it reacts to ECN marks)",
                    self.transport.cc.name()
                ),
            )?;
        }
        Ok(())
    }

    /// `[topology]`: the shape's parameters, link rates and delays.
    fn validate_topology(&self) -> Result<(), String> {
        let t = &self.topology;
        match t.kind {
            TopologyKind::FatTree => check(
                t.k >= 2 && t.k % 2 == 0 && t.k <= 64,
                "topology.k",
                "must be even, 2–64",
            )?,
            TopologyKind::LeafSpine => {
                check(t.leaves >= 1, "topology.leaves", "must be at least 1")?;
                check(t.spines >= 1, "topology.spines", "must be at least 1")?;
                check(
                    t.hosts_per_leaf >= 1,
                    "topology.hosts_per_leaf",
                    "must be at least 1",
                )?;
                check(
                    t.leaves * t.hosts_per_leaf >= 2,
                    "topology.leaves",
                    "× hosts_per_leaf must be at least 2",
                )?;
            }
            TopologyKind::Dumbbell => check(
                t.hosts_per_side >= 1,
                "topology.hosts_per_side",
                "must be at least 1",
            )?,
            TopologyKind::File => check(t.file.is_some(), "topology.file", "is required")?,
        }
        for v in t.link_gbps.values() {
            check(
                v > 0.0 && v.is_finite() && v <= 100_000.0,
                "topology.link_gbps",
                "must be in (0, 100000]",
            )?;
        }
        for v in t.link_delay_ns.values() {
            check(
                v >= 0.0 && v.is_finite(),
                "topology.link_delay_ns",
                "must be ≥ 0",
            )?;
        }
        Ok(())
    }

    /// `[switch]`: the buffer, PFC headroom, the dynamic threshold, ECN marking.
    fn validate_switch(&self) -> Result<(), String> {
        let s = &self.switch;
        check(
            s.buffer_bytes >= 4096,
            "switch.buffer_bytes",
            "must be at least 4096",
        )?;
        if let Some(h) = s.pfc_headroom_bytes {
            check(
                h < s.buffer_bytes,
                "switch.pfc_headroom_bytes",
                "must be below buffer_bytes",
            )?;
        }
        check(
            s.dt_alpha > 0.0 && s.dt_alpha.is_finite(),
            "switch.dt_alpha",
            "must be positive",
        )?;
        check(
            s.pfc_alpha.is_none_or(|a| a > 0.0 && a.is_finite()),
            "switch.pfc_alpha",
            "must be positive",
        )?;
        check(
            s.ecn_kmin_bytes <= s.ecn_kmax_bytes,
            "switch.ecn_kmin_bytes",
            "must be ≤ ecn_kmax_bytes",
        )?;
        check(
            (0.0..=1.0).contains(&s.ecn_pmax),
            "switch.ecn_pmax",
            "must be in [0, 1]",
        )?;
        Ok(())
    }

    /// `[network]`: MTU, DSCPs and priorities, PFC or PAUSE, trust, loss.
    fn validate_network(&self) -> Result<(), String> {
        let n = &self.network;
        check(
            matches!(n.mtu, 256 | 512 | 1024 | 2048 | 4096),
            "network.mtu",
            "must be 256, 512, 1024, 2048 or 4096",
        )?;
        check(n.data_dscp < 64, "network.data_dscp", "must be below 64")?;
        check(
            n.control_dscp < 64,
            "network.control_dscp",
            "must be below 64",
        )?;
        check(
            n.lossless_priorities.iter().all(|&p| p < 8),
            "network.lossless_priorities",
            "must be 0–7",
        )?;
        check(
            n.flowlet_gap_us.is_finite() && n.flowlet_gap_us > 0.0,
            "network.flowlet_gap_us",
            "must be positive",
        )?;
        check(
            !(n.pfc && n.pause),
            "network.pause",
            "802.3x PAUSE and PFC must not both be enabled on a port (IEEE 802.1Qbb); choose one",
        )?;
        check(
            n.pause_hosts.is_empty() || (n.pfc && !n.pause),
            "network.pause_hosts",
            "needs network.pfc (PAUSE on these servers' links, PFC on the others); with \
             network.pause every link runs PAUSE already",
        )?;
        check(
            n.trust != Trust::Pcp || n.vlan,
            "network.trust",
            "\"pcp\" needs network.vlan = true (untagged frames carry no PCP)",
        )?;
        if let Some(m) = &n.dscp_to_priority {
            check(
                m.len() == 64,
                "network.dscp_to_priority",
                "must have 64 entries",
            )?;
            check(
                m.iter().all(|&p| p < 8),
                "network.dscp_to_priority",
                "entries must be 0–7",
            )?;
        }
        check(
            (0.0..1.0).contains(&n.link_loss),
            "network.link_loss",
            "must be in [0, 1)",
        )?;
        check(
            !n.routed_tiers.contains(&0),
            "network.routed_tiers",
            "names switch tiers (1 and up); hosts (tier 0) do not route",
        )?;
        check(
            n.pause_quanta >= 1,
            "network.pause_quanta",
            "must be at least 1 (a pause of 0 quanta is a resume)",
        )?;
        check(
            n.pause_refresh > 0.0 && n.pause_refresh.is_finite(),
            "network.pause_refresh",
            "must be a positive fraction of the pause time",
        )?;
        Ok(())
    }

    /// `[transport]`: recovery and its options, the TCP model, verbs retry attributes, BDP cap, timeouts.
    fn validate_transport(&self) -> Result<(), String> {
        let t = &self.transport;
        check(
            t.reorder_buffer >= 1,
            "transport.reorder_buffer",
            "must be at least 1 packet",
        )?;
        check(
            t.nak_threshold >= 1,
            "transport.nak_threshold",
            "must be at least 1 packet",
        )?;
        check(
            t.nak_delay_us.is_finite() && t.nak_delay_us > 0.0,
            "transport.nak_delay_us",
            "must be positive",
        )?;
        check(
            t.dup_threshold == 1
                || (t.dup_threshold > 1
                    && t.recovery.preset().retransmission
                        == irn_transport::Retransmission::SelectiveRepeat),
            "transport.dup_threshold",
            "must be 1, or above 1 with irn or irn-no-bdp-fc (selective repeat with SACKs)",
        )?;
        // Selective repeat's options beyond the paper (the TCP model keeps RFC 6675's rules).
        let selective = t.recovery.preset().retransmission
            == irn_transport::Retransmission::SelectiveRepeat
            && t.recovery != Recovery::Tcp;
        for (on, key) in [
            (
                t.resend_lost_retransmissions,
                "transport.resend_lost_retransmissions",
            ),
            (
                t.timeout_resends_unsacked,
                "transport.timeout_resends_unsacked",
            ),
            (t.nack_bitmap, "transport.nack_bitmap"),
        ] {
            check(
                !on || selective,
                key,
                "needs irn or irn-no-bdp-fc (selective repeat with SACKs)",
            )?;
        }
        check(
            t.tcp_initial_window >= 1,
            "transport.tcp_initial_window",
            "must be at least 1 segment",
        )?;
        check(
            t.tcp_min_rto_us.is_finite()
                && t.tcp_min_rto_us > 0.0
                && t.tcp_max_rto_us.is_finite()
                && t.tcp_max_rto_us >= t.tcp_min_rto_us,
            "transport.tcp_min_rto_us",
            "must be positive and at most transport.tcp_max_rto_us",
        )?;
        check(
            t.tcp_dup_thresh >= 1,
            "transport.tcp_dup_thresh",
            "must be at least 1 segment",
        )?;
        check(
            t.ack_every >= 1,
            "transport.ack_every",
            "must be at least 1 packet",
        )?;
        check(
            t.renak_us.is_none_or(|d| d.is_finite() && d > 0.0),
            "transport.renak_us",
            "must be positive",
        )?;
        check(
            t.renak_us.is_none() || t.recovery == Recovery::Roce,
            "transport.renak_us",
            "is standard RoCE's responder's (recovery = \"roce\")",
        )?;
        check(
            t.tcp_delayed_ack_us
                .is_none_or(|d| d.is_finite() && d > 0.0),
            "transport.tcp_delayed_ack_us",
            "must be positive",
        )?;
        check(
            t.recovery != Recovery::Tcp
                || matches!(t.cc, CcKind::None | CcKind::Aimd | CcKind::Dctcp),
            "transport.cc",
            "must be none or aimd (TCP's own slow start and AIMD) or dctcp with recovery = \"tcp\"",
        )?;
        check(
            t.retry_cnt.is_none_or(|r| r <= 7),
            "transport.retry_cnt",
            "must be 0 to 7 (the verbs attribute's 3 bits)",
        )?;
        check(
            (1..=31).contains(&t.ack_timeout),
            "transport.ack_timeout",
            "must be 1 to 31 (the verbs attribute's 5 bits; 0, infinite, is not simulated)",
        )?;
        check(
            t.bdp_cap != Some(0),
            "transport.bdp_cap",
            "must be at least 1",
        )?;
        // The receive bitmaps are sized by the cap, within the PSN window (IRN §5.3).
        check(
            t.bdp_cap.is_none_or(|c| c <= 1 << 23),
            "transport.bdp_cap",
            "must be at most 2^23 packets (the PSN window)",
        )?;
        // Timeouts are kept in picoseconds: a shorter one would be zero.
        const PICOSECOND_US: f64 = 1e-6;
        check(
            t.rto_low_us >= PICOSECOND_US && t.rto_low_us.is_finite(),
            "transport.rto_low_us",
            "must be positive (at least 1 ps)",
        )?;
        check(
            t.rto_high_us >= t.rto_low_us && t.rto_high_us.is_finite(),
            "transport.rto_high_us",
            "must be ≥ rto_low_us",
        )?;
        check(
            t.roce_rto_us >= PICOSECOND_US && t.roce_rto_us.is_finite(),
            "transport.roce_rto_us",
            "must be positive (at least 1 ps)",
        )?;
        check(
            !t.rto_adaptive || (t.recovery.is_irn() && t.recovery != Recovery::Tcp),
            "transport.rto_adaptive",
            "applies to the IRN modes only (RoCE's timer is the verbs timeout, TCP's is adaptive)",
        )?;
        check(
            !t.rto_adaptive || t.tcp_max_rto_us >= t.rto_high_us,
            "transport.tcp_max_rto_us",
            "must be ≥ rto_high_us, the adaptive timer's floor",
        )?;
        Ok(())
    }

    /// `[nic]`: the receive pipeline, its buffer and translation cache, PCIe.
    fn validate_nic(&self) -> Result<(), String> {
        let nic = &self.nic;
        check(
            nic.pcie_gbps.is_finite() && nic.pcie_gbps > 0.0,
            "nic.pcie_gbps",
            "must be positive",
        )?;
        if let Some(g) = nic.rx_gbps {
            check(
                g > 0.0 && g.is_finite() && g <= 100_000.0,
                "nic.rx_gbps",
                "must be in (0, 100000]",
            )?;
        }
        check(
            nic.rx_buffer_bytes >= 4096,
            "nic.rx_buffer_bytes",
            "must be at least 4096",
        )?;
        if let Some(h) = nic.rx_pfc_headroom_bytes {
            check(
                h < nic.rx_buffer_bytes,
                "nic.rx_pfc_headroom_bytes",
                "must be below rx_buffer_bytes",
            )?;
        }
        check(
            nic.mtt_entries >= 1,
            "nic.mtt_entries",
            "must be at least 1",
        )?;
        check(
            nic.page_bytes.is_power_of_two() && (4096..=1 << 30).contains(&nic.page_bytes),
            "nic.page_bytes",
            "must be a power of two, 4 KiB – 1 GiB",
        )?;
        check(
            nic.mtt_miss_ns >= 0.0 && nic.mtt_miss_ns.is_finite(),
            "nic.mtt_miss_ns",
            "must be ≥ 0",
        )?;
        Ok(())
    }

    /// `[workload]`: load, durations, the measured window, incast and flow files.
    fn validate_workload(&self) -> Result<(), String> {
        self.validate_shape("workload")
    }

    /// The workload's shape (`[workload]`'s, or a `[[traffic]]` class's as
    /// [`SimConfig::class_config`] makes it), its keys named under `section`.
    fn validate_shape(&self, section: &str) -> Result<(), String> {
        let w = &self.workload;
        let key = |k: &str| format!("{section}.{k}");
        let check = |ok: bool, k: &str, what: &str| check(ok, &key(k), what);
        check(
            (0.0..=1.0).contains(&w.load),
            "load",
            "must be in [0, 1]: a fraction of each host's link rate (above 1 a host offers more \
             than its link carries, and no run reaches a steady state)",
        )?;
        check(
            w.kind != WorkloadKind::Poisson || w.load > 0.0,
            "load",
            "must be positive for Poisson arrivals",
        )?;
        check(
            w.duration_us > 0.0 && w.duration_us.is_finite(),
            "duration_us",
            "must be positive",
        )?;
        check(
            w.drain_us >= 0.0 && w.drain_us.is_finite(),
            "drain_us",
            "must be ≥ 0",
        )?;
        check(
            w.measure_from_us >= 0.0 && w.measure_from_us.is_finite(),
            "measure_from_us",
            "must be ≥ 0",
        )?;
        check(
            w.measure_until_us
                .is_none_or(|u| u.is_finite() && u > w.measure_from_us),
            "measure_until_us",
            "must be after workload.measure_from_us",
        )?;
        if w.kind == WorkloadKind::Incast {
            check(
                w.incast_senders >= 1,
                "incast_senders",
                "must be at least 1",
            )?;
            check(
                w.incast_bytes >= u64::from(w.incast_senders),
                "incast_bytes",
                "must be at least one byte per sender",
            )?;
            check(
                w.incast_repetitions >= 1,
                "incast_repetitions",
                "must be at least 1",
            )?;
        }
        if w.kind == WorkloadKind::Flows {
            check(w.flows_file.is_some(), "flows_file", "is required")?;
        }
        Ok(())
    }

    /// `[[traffic]]` and `network.scheduler`: each class's DSCPs, and its transport and
    /// workload as the class runs them ([`SimConfig::class_config`]).
    fn validate_traffic(&self) -> Result<(), String> {
        check(
            self.traffic.len() <= 15,
            "traffic",
            "at most 15 classes beside [workload]",
        )?;
        for (i, tc) in self.traffic.iter().enumerate() {
            let at = format!("traffic[{i}]");
            check(tc.dscp < 64, &format!("{at}.dscp"), "must be below 64")?;
            check(
                tc.control_dscp.is_none_or(|d| d < 64),
                &format!("{at}.control_dscp"),
                "must be below 64",
            )?;
            let c = self.class_config(i + 1);
            c.validate_transport()
                .and_then(|()| c.validate_cc())
                .map_err(|e| {
                    format!("{at} (its transport, `[transport]` with its own keys): {e}")
                })?;
            c.validate_shape(&at)?;
        }
        let n = &self.network;
        // A NIC's transmit lanes: one per (data, control) pair of priorities, at most 8.
        let mut lanes: Vec<(u8, u8)> = (0..self.class_count())
            .map(|t| {
                let c = self.class_config(t).network;
                let ctrl = if c.control_priority {
                    c.control_dscp
                } else {
                    c.data_dscp
                };
                (n.priority(c.data_dscp) & 7, n.priority(ctrl) & 7)
            })
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        check(
            lanes.len() <= 8,
            "traffic",
            "the classes send at more than 8 pairs of (data, control) priorities; a NIC has \
             8 transmit queues",
        )?;
        check(
            n.dwrr_weights.is_none() || n.scheduler == Scheduler::Dwrr,
            "network.dwrr_weights",
            "weighs classes only with network.scheduler = \"dwrr\"",
        )?;
        if let Some(w) = &n.dwrr_weights {
            check(
                w.len() == 8,
                "network.dwrr_weights",
                "must have 8 entries, one per priority",
            )?;
            check(
                w.iter().all(|&x| x <= 1000),
                "network.dwrr_weights",
                "entries must be 0 (strict) to 1000",
            )?;
        }
        Ok(())
    }

    /// Checks values against each other, section by section; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        check(
            (1..=1024).contains(&self.threads),
            "threads",
            "must be 1–1024",
        )?;
        self.validate_topology()?;
        self.validate_switch()?;
        self.validate_cc()?;
        self.validate_network()?;
        self.validate_transport()?;
        self.validate_nic()?;
        self.validate_workload()?;
        self.validate_traffic()?;
        let n = &self.network;
        if let Some(c) = self.config_check_ms {
            check(
                c.is_finite() && c >= 0.001,
                "config_check_ms",
                "must be at least 0.001 (1 µs)",
            )?;
        }
        if let Some(m) = self.monitor_interval_us {
            check(
                m.is_finite() && m >= 1.0,
                "monitor_interval_us",
                "must be at least 1",
            )?;
        }
        safety::validate(
            &self.l2,
            &self.watchdog,
            &self.deadlock,
            &self.fault,
            &self.pingmesh,
        )?;
        if self.l2.unknown_unicast == UnknownUnicast::FloodLossy {
            check(
                !(n.pfc
                    && n.lossless_priorities
                        .contains(&self.network.priority(self.l2.flood_dscp))),
                "l2.flood_dscp",
                "must map to a lossy priority with unknown_unicast = \"flood-lossy\"",
            )?;
        }
        Ok(())
    }
}
