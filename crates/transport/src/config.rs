//! Loss-recovery configuration of a queue pair: the knobs that distinguish RoCE from IRN and the
//! variants of IRN's factor analysis (SPEC T3–T6, E5), with the paper's numbers as defaults.
//!
//! The knobs are orthogonal, so every variant the paper evaluates is one combination:
//!
//! | preset | retransmission | BDP-FC | timeouts | wire |
//! |---|---|---|---|---|
//! | [`RecoveryConfig::roce_go_back_0`] (early RoCE, T3) | go-back-0 | off | fixed RTO_high | standard |
//! | [`RecoveryConfig::roce`] (T4) | go-back-N | off | fixed RTO_high | standard |
//! | [`RecoveryConfig::roce_pfc`] (T4 over PFC) | go-back-N | off | disabled | standard |
//! | [`RecoveryConfig::irn`] (T5, T6) | selective repeat with SACK | on | RTO_low / RTO_high | IRN |
//! | [`RecoveryConfig::irn_go_back_n`] (E5) | go-back-N | on | RTO_low / RTO_high | IRN |
//! | [`RecoveryConfig::irn_without_bdp_fc`] (E5) | selective repeat with SACK | off | RTO_low / RTO_high | IRN |
//! | [`RecoveryConfig::irn_without_sack`] (E5) | selective repeat, no SACK bitmap | on | RTO_low / RTO_high | IRN |

use crate::time::Dur;

/// How lost packets are retransmitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retransmission {
    /// Restart the whole message from its first packet (early RoCE; livelocks under loss, T3).
    GoBack0,
    /// Resend everything from the NAKed / timed-out PSN (RoCE and InfiniBand today, T4).
    GoBackN,
    /// IRN's selective repeat (T5): the sender keeps a bitmap of selectively acked packets,
    /// retransmits the cumulative-ACK PSN first and a later packet only if a higher PSN was
    /// selectively acked; recovery ends when the cumulative ACK passes the recovery sequence.
    SelectiveRepeat,
    /// Selective retransmit without the SACK bitmap (E5): on a NACK the sender retransmits only
    /// the cumulatively-acked-next PSN, remembering no selective acks.
    SelectiveRepeatNoSack,
}

/// When the retransmission timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtoPolicy {
    /// No timeouts (RoCE over a lossless PFC fabric, as in the IRN evaluation).
    Disabled,
    /// One fixed timeout (RoCE without PFC: RTO_high).
    Fixed(Dur),
    /// IRN's two timeouts (T5): `low` when at most `n` packets are in flight, `high` otherwise.
    Irn {
        /// RTO_low (100 µs in the paper's default scenario).
        low: Dur,
        /// RTO_high (320 µs: longest-path propagation plus a full switch buffer of queueing).
        high: Dur,
        /// N (3 in the paper).
        n: u32,
    },
    /// The verbs `timeout` attribute of the queue pair: 4.096 µs × 2^timeout, 0 = never
    /// (IBTA §9.7.6.1.3). What a standard RoCE NIC (and Linux rxe) does; the UDP runtime uses it
    /// to behave like rxe towards rxe.
    FromAttr,
}

impl RtoPolicy {
    /// The timeout for `in_flight` packets; `None` when timeouts are disabled.
    pub const fn timeout(&self, in_flight: u32) -> Option<Dur> {
        match *self {
            RtoPolicy::Disabled => None,
            RtoPolicy::Fixed(d) => Some(d),
            RtoPolicy::Irn { low, high, n } => Some(if in_flight <= n { low } else { high }),
            // Resolved by the queue pair into `Fixed` or `Disabled` when the attribute is set.
            RtoPolicy::FromAttr => None,
        }
    }
}

/// RTO_low of the IRN paper's default scenario (§4.1).
pub const IRN_RTO_LOW: Dur = Dur::from_micros(100);
/// RTO_high of the IRN paper's default scenario (§4.1).
pub const IRN_RTO_HIGH: Dur = Dur::from_micros(320);
/// N of the IRN paper (§3.1).
pub const IRN_RTO_N: u32 = 3;
/// The BDP cap of the paper's default scenario: 40 Gb/s, 2 µs links, 6-hop longest path, 1 KB
/// MTU (§3.2: "≈110 packets").
pub const IRN_DEFAULT_BDP_CAP: u32 = 110;

/// How a queue pair recovers from loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecoveryConfig {
    /// Retransmission scheme.
    pub retransmission: Retransmission,
    /// BDP-FC (T6): at most this many packets beyond the last acked one; `None` = off.
    pub bdp_cap: Option<u32>,
    /// Timeouts.
    pub rto: RtoPolicy,
    /// Whether packets carry IRN's extensions (BTH TVer 1, IRNETH, per-packet ACKs, read
    /// (N)ACKs, split sPSN/rPSN). Off: standard RoCEv2 that Linux rxe understands.
    pub irn_wire: bool,
}

/// Why a recovery configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Selective repeat needs IRN's wire extensions (out-of-order placement, SACKs).
    #[error("selective repeat needs the IRN wire format")]
    SelectiveRepeatNeedsIrnWire,
    /// A BDP cap of zero would never send.
    #[error("BDP cap must be at least 1 packet")]
    ZeroBdpCap,
    /// The IRN bitmaps are sized by the BDP cap, which is bounded by the PSN window (2^23).
    #[error("BDP cap above 2^23 packets")]
    HugeBdpCap,
    /// A zero timeout would fire at once.
    #[error("retransmission timeouts must be positive")]
    ZeroTimeout,
}

impl RecoveryConfig {
    /// Early RoCE: go-back-0, fixed timeout.
    pub const fn roce_go_back_0() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::GoBack0,
            bdp_cap: None,
            rto: RtoPolicy::Fixed(IRN_RTO_HIGH),
            irn_wire: false,
        }
    }

    /// RoCE without PFC: go-back-N with one fixed timeout, RTO_high.
    pub const fn roce() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::GoBackN,
            bdp_cap: None,
            rto: RtoPolicy::Fixed(IRN_RTO_HIGH),
            irn_wire: false,
        }
    }

    /// RoCE over PFC: go-back-N with timeouts disabled.
    pub const fn roce_pfc() -> Self {
        RecoveryConfig {
            rto: RtoPolicy::Disabled,
            ..Self::roce()
        }
    }

    /// IRN: selective repeat with SACK, BDP-FC, two timeouts.
    pub const fn irn() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::SelectiveRepeat,
            bdp_cap: Some(IRN_DEFAULT_BDP_CAP),
            rto: RtoPolicy::Irn {
                low: IRN_RTO_LOW,
                high: IRN_RTO_HIGH,
                n: IRN_RTO_N,
            },
            irn_wire: true,
        }
    }

    /// IRN with go-back-N retransmission (E5).
    pub const fn irn_go_back_n() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::GoBackN,
            ..Self::irn()
        }
    }

    /// IRN without BDP-FC (E5).
    pub const fn irn_without_bdp_fc() -> Self {
        RecoveryConfig {
            bdp_cap: None,
            ..Self::irn()
        }
    }

    /// IRN's selective retransmit without the SACK bitmap (E5).
    pub const fn irn_without_sack() -> Self {
        RecoveryConfig {
            retransmission: Retransmission::SelectiveRepeatNoSack,
            ..Self::irn()
        }
    }

    /// Checks the combination.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if matches!(
            self.retransmission,
            Retransmission::SelectiveRepeat | Retransmission::SelectiveRepeatNoSack
        ) && !self.irn_wire
        {
            return Err(ConfigError::SelectiveRepeatNeedsIrnWire);
        }
        match self.bdp_cap {
            Some(0) => return Err(ConfigError::ZeroBdpCap),
            Some(c) if c > 1 << 23 => return Err(ConfigError::HugeBdpCap),
            _ => {}
        }
        let zero = match self.rto {
            RtoPolicy::Disabled | RtoPolicy::FromAttr => false,
            RtoPolicy::Fixed(d) => d == Dur::ZERO,
            RtoPolicy::Irn { low, high, .. } => low == Dur::ZERO || high == Dur::ZERO,
        };
        if zero {
            return Err(ConfigError::ZeroTimeout);
        }
        Ok(())
    }
}

/// The loss-recovery schemes by the names of IRN's evaluation (§4): the one list the
/// simulator's `transport.recovery` and the UDP runtime's `--mode` choose from. Each names a
/// [`RecoveryConfig`] preset ([`RecoveryMode::preset`]) that a driver may then adapt (its
/// timeouts, its BDP cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecoveryMode {
    /// IRN: selective repeat with SACK, BDP-FC, RTO_low/RTO_high (T5, T6).
    Irn,
    /// IRN with go-back-N (E5).
    IrnGoBackN,
    /// IRN without BDP-FC (E5).
    IrnNoBdpFc,
    /// IRN's selective retransmit without a SACK bitmap (E5).
    IrnNoSack,
    /// RoCE: go-back-N, standard headers (T4).
    Roce,
    /// Early RoCE: go-back-0 (T3).
    RoceGoBack0,
}

impl RecoveryMode {
    /// Every mode, IRN's first.
    pub const ALL: [RecoveryMode; 6] = [
        RecoveryMode::Irn,
        RecoveryMode::IrnGoBackN,
        RecoveryMode::IrnNoBdpFc,
        RecoveryMode::IrnNoSack,
        RecoveryMode::Roce,
        RecoveryMode::RoceGoBack0,
    ];

    /// The name in configurations, on command lines and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            RecoveryMode::Irn => "irn",
            RecoveryMode::IrnGoBackN => "irn-go-back-n",
            RecoveryMode::IrnNoBdpFc => "irn-no-bdp-fc",
            RecoveryMode::IrnNoSack => "irn-no-sack",
            RecoveryMode::Roce => "roce",
            RecoveryMode::RoceGoBack0 => "roce-go-back-0",
        }
    }

    /// Whether this is one of IRN's variants (IRN's wire format).
    pub const fn is_irn(self) -> bool {
        !matches!(self, RecoveryMode::Roce | RecoveryMode::RoceGoBack0)
    }

    /// The paper's configuration of this mode.
    pub const fn preset(self) -> RecoveryConfig {
        match self {
            RecoveryMode::Irn => RecoveryConfig::irn(),
            RecoveryMode::IrnGoBackN => RecoveryConfig::irn_go_back_n(),
            RecoveryMode::IrnNoBdpFc => RecoveryConfig::irn_without_bdp_fc(),
            RecoveryMode::IrnNoSack => RecoveryConfig::irn_without_sack(),
            RecoveryMode::Roce => RecoveryConfig::roce(),
            RecoveryMode::RoceGoBack0 => RecoveryConfig::roce_go_back_0(),
        }
    }
}

impl core::fmt::Display for RecoveryMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for RecoveryMode {
    type Err = String;

    fn from_str(s: &str) -> Result<RecoveryMode, String> {
        RecoveryMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = RecoveryMode::ALL.iter().map(|m| m.name()).collect();
                format!("recovery mode is one of {}, not {s:?}", names.join(", "))
            })
    }
}

/// The BDP cap (T6) for a path: its bandwidth-delay product divided by the MTU, rounded up.
/// `rtt` is the base round-trip time of the longest path.
pub fn bdp_cap_packets(bits_per_second: u64, rtt: Dur, mtu: u32) -> u32 {
    let bdp_bits = u128::from(bits_per_second) * u128::from(rtt.as_picos()) / 1_000_000_000_000;
    let bdp_bytes = bdp_bits.div_ceil(8);
    let packets = bdp_bytes.div_ceil(u128::from(mtu.max(1)));
    u32::try_from(packets.max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_distinct() {
        let all = [
            RecoveryConfig::roce_go_back_0(),
            RecoveryConfig::roce(),
            RecoveryConfig::roce_pfc(),
            RecoveryConfig::irn(),
            RecoveryConfig::irn_go_back_n(),
            RecoveryConfig::irn_without_bdp_fc(),
            RecoveryConfig::irn_without_sack(),
        ];
        for (i, a) in all.iter().enumerate() {
            assert_eq!(a.validate(), Ok(()), "{a:?}");
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn invalid_combinations_are_refused() {
        let mut c = RecoveryConfig::roce();
        c.retransmission = Retransmission::SelectiveRepeat;
        assert_eq!(c.validate(), Err(ConfigError::SelectiveRepeatNeedsIrnWire));
        let mut c = RecoveryConfig::irn();
        c.bdp_cap = Some(0);
        assert_eq!(c.validate(), Err(ConfigError::ZeroBdpCap));
        c.bdp_cap = Some(1 << 24);
        assert_eq!(c.validate(), Err(ConfigError::HugeBdpCap));
        let c = RecoveryConfig {
            rto: RtoPolicy::Fixed(Dur::ZERO),
            ..RecoveryConfig::roce()
        };
        assert_eq!(c.validate(), Err(ConfigError::ZeroTimeout));
    }

    #[test]
    fn every_mode_parses_by_its_name_and_names_a_valid_preset() {
        for m in RecoveryMode::ALL {
            assert_eq!(m.name().parse::<RecoveryMode>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
            assert_eq!(m.preset().validate(), Ok(()));
            assert_eq!(m.is_irn(), m.preset().irn_wire, "{m}");
        }
        let e = "go-back-7".parse::<RecoveryMode>().expect_err("not a mode");
        assert!(e.contains("irn-no-sack") && e.contains("go-back-7"), "{e}");
    }

    #[test]
    fn irn_rto_switches_at_n() {
        let rto = RecoveryConfig::irn().rto;
        assert_eq!(rto.timeout(0), Some(IRN_RTO_LOW));
        assert_eq!(rto.timeout(3), Some(IRN_RTO_LOW));
        assert_eq!(rto.timeout(4), Some(IRN_RTO_HIGH));
        assert_eq!(RecoveryConfig::roce_pfc().rto.timeout(100), None);
    }

    #[test]
    fn bdp_cap_of_the_default_scenario_is_about_110() {
        // 40 Gb/s, 6 hops of 2 us each way = 24 us RTT (propagation only): 120 KB = 118 x 1 KB.
        // The paper quotes "120 KB" and "≈110 packets" (§3.2, §4.1); the 110 default counts
        // 1 KB as 1024 B payload plus headers, as the paper's packets do.
        let cap = bdp_cap_packets(40_000_000_000, Dur::from_micros(24), 1024);
        assert_eq!(cap, 118);
        assert!((100..=120).contains(&IRN_DEFAULT_BDP_CAP));
        assert_eq!(bdp_cap_packets(40_000_000_000, Dur::ZERO, 1024), 1);
    }
}
