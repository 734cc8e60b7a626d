//! Priority classes as switches have them (SPEC N2; IEEE 802.1Q, 802.1Qbb): a frame carries its
//! DSCP in its IP header (and a PCP when tagged); each node maps it to one of 8 priorities —
//! DSCP through a configurable many-to-one map, or the PCP when the switches trust it — and
//! the priority to a class, a queue per (port, class) served in strict priority. Any subset of
//! the 8 priorities may be lossless (PFC pauses them per (port, priority)).
//!
//! Classes are the priorities in use — those of the DSCPs the NICs send — highest first, so a
//! port holds only the queues that can fill; a frame of any other priority shares the lowest
//! class. Where PCP-trusting switches can see untagged frames — behind a routed hop, which
//! drops the tag (`network.routed_tiers`) — priority 0, an untagged frame's (IEEE 802.1Q), is
//! a class of its own, lossless only if configured so.

use super::packet::Hop;
use crate::config::{NetworkConfig, Trust};

/// Classes a port can hold: one per priority.
pub(super) const MAX_CLASSES: usize = 8;

/// No class: a priority not in use.
const NONE: u8 = u8::MAX;

/// The network's priority map and classes.
#[derive(Debug, Clone)]
pub(super) struct Classes {
    trust: Trust,
    /// DSCP → priority.
    dscp_map: [u8; 64],
    /// Priority → class ([`NONE`]: not in use).
    class_of: [u8; 8],
    /// Class → priority, highest priority first.
    priorities: Vec<u8>,
    lossless: [bool; 8],
}

impl Classes {
    /// The classes of a network whose NICs send the DSCPs `dscps`.
    pub(super) fn new(net: &NetworkConfig, dscps: &[u8]) -> Classes {
        let mut dscp_map = [0u8; 64];
        for (d, p) in dscp_map.iter_mut().enumerate() {
            *p = net.priority(d as u8) & 7;
        }
        let mut priorities: Vec<u8> = dscps
            .iter()
            .map(|&d| dscp_map[usize::from(d & 63)])
            .collect();
        if net.trust == Trust::Pcp && !net.routed_tiers.is_empty() {
            priorities.push(0);
        }
        priorities.sort_unstable_by(|a, b| b.cmp(a));
        priorities.dedup();
        let mut class_of = [NONE; 8];
        for (i, &p) in priorities.iter().enumerate() {
            class_of[usize::from(p)] = i as u8;
        }
        let mut lossless = [false; 8];
        if net.pfc {
            for &p in &net.lossless_priorities {
                lossless[usize::from(p & 7)] = true;
            }
            // ACKs, NAKs and CNPs (`control_dscp`, the second DSCP a NIC sends) in a lossless
            // class too: see `NetworkConfig::control_lossless`.
            if net.control_priority && net.control_lossless {
                lossless[usize::from(dscp_map[usize::from(net.control_dscp & 63)])] = true;
            }
        }
        Classes {
            trust: net.trust,
            dscp_map,
            class_of,
            priorities,
            lossless,
        }
    }

    /// The priority of a DSCP, as a NIC sending it sees it.
    pub(super) fn of_dscp(&self, dscp: u8) -> u8 {
        self.dscp_map[usize::from(dscp & 63)]
    }

    /// The priority a node reads from a frame.
    #[inline]
    pub(super) fn priority(&self, hop: &Hop) -> u8 {
        match self.trust {
            Trust::Dscp => self.of_dscp(hop.dscp()),
            Trust::Pcp => hop.pcp().unwrap_or(0),
        }
    }

    /// The class of priority `prio`; a priority not in use shares the lowest class.
    #[inline]
    pub(super) fn class(&self, prio: u8) -> usize {
        match self.class_of[usize::from(prio & 7)] {
            NONE => self.priorities.len() - 1,
            c => usize::from(c),
        }
    }

    /// The class a pause frame for `prio` pauses, if that priority is in use.
    pub(super) fn paused_class(&self, prio: u8) -> Option<usize> {
        match self.class_of[usize::from(prio & 7)] {
            NONE => None,
            c => Some(usize::from(c)),
        }
    }

    /// Whether `prio` is lossless (PFC on and the priority listed).
    #[inline]
    pub(super) fn lossless(&self, prio: u8) -> bool {
        self.lossless[usize::from(prio & 7)]
    }

    /// The priority class `c` stands for: what its pause frames name (a frame of a priority
    /// not in use joins the lowest class, and is paused and resumed as that class's
    /// priority, so a pause and its resume always name the same priority).
    #[inline]
    pub(super) fn class_priority(&self, c: usize) -> u8 {
        self.priorities[c]
    }

    /// Whether class `c` is lossless: its priority is.
    #[inline]
    pub(super) fn class_lossless(&self, c: usize) -> bool {
        self.lossless(self.priorities[c])
    }

    /// Classes in use.
    pub(super) fn len(&self) -> usize {
        self.priorities.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irn_wire::Ecn;

    fn hop(dscp: u8, pcp: Option<u8>) -> Hop {
        Hop::new(0, 0, 100, dscp, Ecn::Ect0, pcp)
    }

    #[test]
    fn the_usual_map_is_dscp_over_8_and_classes_rank_priorities_highest_first() {
        let net = NetworkConfig::default();
        let c = Classes::new(&net, &[26, 48]);
        assert_eq!(c.of_dscp(26), 3);
        assert_eq!(c.of_dscp(48), 6);
        assert_eq!(c.len(), 2);
        assert_eq!(c.class(6), 0);
        assert_eq!(c.class(3), 1);
        // A priority not in use shares the lowest class — its pauses name that class's
        // priority, and it is lossless as that class is; a pause for it pauses nothing.
        assert_eq!(c.class(0), 1);
        assert_eq!(c.class_priority(c.class(0)), 3);
        assert_eq!(c.class_lossless(c.class(0)), c.lossless(3));
        assert_eq!(c.paused_class(0), None);
        assert_eq!(c.paused_class(6), Some(0));
    }

    #[test]
    fn behind_routed_hops_a_pcp_trusting_switch_has_a_lossy_class_for_untagged_frames() {
        let mut net = NetworkConfig {
            pfc: true,
            vlan: true,
            trust: Trust::Pcp,
            ..NetworkConfig::default()
        };
        let bridged = Classes::new(&net, &[26, 48]);
        assert_eq!(bridged.len(), 2);
        net.routed_tiers = vec![1, 2, 3];
        let c = Classes::new(&net, &[26, 48]);
        assert_eq!(c.len(), 3);
        // An untagged frame (a routed hop dropped its tag) is priority 0: lossy, lowest.
        let untagged = c.priority(&hop(26, None));
        assert_eq!(untagged, 0);
        assert_eq!(c.class(untagged), 2);
        assert!(!c.class_lossless(c.class(untagged)));
        assert!(c.class_lossless(c.class(c.priority(&hop(26, Some(3))))));
        // DSCP-trusting switches read the DSCP, tag or no tag.
        net.trust = Trust::Dscp;
        let d = Classes::new(&net, &[26, 48]);
        assert_eq!((d.len(), d.priority(&hop(26, None))), (2, 3));
    }

    #[test]
    fn a_many_to_one_map_puts_several_dscps_in_one_class() {
        let mut map = vec![0u8; 64];
        for d in [10, 18, 26] {
            map[d] = 5;
        }
        map[46] = 7;
        let net = NetworkConfig {
            dscp_to_priority: Some(map),
            ..NetworkConfig::default()
        };
        let c = Classes::new(&net, &[10, 18, 26, 46, 0]);
        assert_eq!(c.len(), 3);
        for d in [10, 18, 26] {
            assert_eq!(c.priority(&hop(d, None)), 5);
            assert_eq!(c.class(5), 1);
        }
        assert_eq!(c.class(c.priority(&hop(46, None))), 0);
        assert_eq!(c.class(c.priority(&hop(0, None))), 2);
    }

    #[test]
    fn any_subset_of_the_eight_priorities_may_be_lossless() {
        let net = NetworkConfig {
            pfc: true,
            lossless_priorities: vec![1, 3, 4, 6],
            ..NetworkConfig::default()
        };
        let all: Vec<u8> = (0..8).map(|p| p * 8).collect();
        let c = Classes::new(&net, &all);
        assert_eq!(c.len(), 8);
        for p in 0..8 {
            assert_eq!(c.lossless(p), [1, 3, 4, 6].contains(&p), "{p}");
            assert_eq!(c.class(p), usize::from(7 - p));
            assert_eq!(c.paused_class(p), Some(usize::from(7 - p)));
        }
        // Without PFC nothing is lossless.
        let c = Classes::new(&NetworkConfig { pfc: false, ..net }, &all);
        assert!((0..8).all(|p| !c.lossless(p)));
    }

    #[test]
    fn a_pcp_trusting_switch_reads_the_tag_and_gives_untagged_frames_priority_0() {
        let net = NetworkConfig {
            vlan: true,
            trust: Trust::Pcp,
            ..NetworkConfig::default()
        };
        let c = Classes::new(&net, &[26, 48]);
        // The tag wins over the DSCP.
        assert_eq!(c.priority(&hop(26, Some(5))), 5);
        assert_eq!(c.priority(&hop(26, None)), 0);
        let by_dscp = Classes::new(&NetworkConfig::default(), &[26, 48]);
        assert_eq!(by_dscp.priority(&hop(26, Some(5))), 3);
    }
}
