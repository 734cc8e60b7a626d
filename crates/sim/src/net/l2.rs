//! A ToR's layer-2 tables for the servers it serves (seed 001 §4.2): the ARP and MAC entries
//! per server-facing port, whether a packet for a server is flooded, dropped or forwarded,
//! and the groups of a flooded packet's copies, which share its buffer until the last leaves.
//! A [`super::switch::Switch`] has one when the run models them; it owns the forwarding and
//! asks these tables.

use std::collections::HashMap;

use irn_transport::{Dur, Time};

use crate::config::{SimConfig, UnknownUnicast};

/// What a ToR's L2 tables counted.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct L2Counts {
    /// Packets flooded (an incomplete ARP entry).
    pub(super) floods: u64,
    /// Flooded copies discarded at an egress that did not lead to the destination.
    pub(super) flood_discards: u64,
    /// Lossless packets dropped for an incomplete ARP entry (`drop-lossless`).
    pub(super) l2_drops: u64,
    /// Packets dropped for a missing ARP entry.
    pub(super) arp_drops: u64,
}

/// A switch's layer-2 tables for the servers it serves (seed 001 §4.2), per port: its ARP
/// table (IP→MAC, `l2.arp_timeout_s`, 4 h) and its MAC table (MAC→port, learned from the
/// server's frames, `l2.mac_timeout_s`, 5 min, flushed when the link goes down). With the
/// ARP entry present and the MAC entry gone — a dead server — the entry is *incomplete*, and
/// the ToR floods the packet to every port but the one it came in on. Each copy queues at its
/// egress, in its class, holding its ingress buffer, and is discarded when it reaches the head
/// of a queue that does not lead to the destination. `l2.unknown_unicast` chooses the paper's
/// fix (`drop-lossless`) or flooding in a lossy class (`flood-lossy`).
#[derive(Debug)]
pub(super) struct L2Table {
    /// Per port: when the MAC of the server there was last learned, and whether a link-down
    /// flushed it.
    learned: Vec<Time>,
    flushed: Vec<bool>,
    /// Per port: the ARP entry's expiry (`Time::MAX` while the server is up).
    arp_until: Vec<Time>,
    /// Per port: its link is down.
    down: Vec<bool>,
    mac_timeout: Dur,
    arp_timeout: Dur,
    policy: UnknownUnicast,
    flood_dscp: u8,
    /// Flooded packets' copies: each copy's group, and per group the copies still queued.
    group_of: HashMap<u32, u32>,
    groups: Vec<u32>,
    free_groups: Vec<u32>,
    pub(super) counts: L2Counts,
}

impl L2Table {
    /// The tables of a switch with `nports` ports, under the run's `[l2]` settings.
    pub(super) fn new(cfg: &SimConfig, nports: usize) -> L2Table {
        L2Table {
            learned: vec![Time::ZERO; nports],
            flushed: vec![false; nports],
            arp_until: vec![Time::MAX; nports],
            down: vec![false; nports],
            mac_timeout: L2Table::mac_timeout(cfg),
            arp_timeout: seconds(cfg.l2.arp_timeout_s),
            policy: cfg.l2.unknown_unicast,
            flood_dscp: cfg.l2.flood_dscp,
            group_of: HashMap::new(),
            groups: Vec::new(),
            free_groups: Vec::new(),
            counts: L2Counts::default(),
        }
    }

    /// What a packet for a server whose MAC entry is incomplete meets (`l2.unknown_unicast`).
    pub(super) fn policy(&self) -> UnknownUnicast {
        self.policy
    }

    /// The DSCP flooded copies take under `flood-lossy` (`l2.flood_dscp`).
    pub(super) fn flood_dscp(&self) -> u8 {
        self.flood_dscp
    }

    /// Whether the link at `port` is down.
    #[inline]
    pub(super) fn is_down(&self, port: usize) -> bool {
        self.down[port]
    }

    /// Whether the ARP entry of the server at `port` has aged out by `now`.
    pub(super) fn arp_expired(&self, now: Time, port: usize) -> bool {
        now >= self.arp_until[port]
    }

    /// The group of flooded copies `pkt` belongs to, if it is one.
    pub(super) fn group_of(&self, pkt: u32) -> Option<u32> {
        self.group_of.get(&pkt).copied()
    }

    /// The server at `port` went down at `now`: its MAC entry is flushed and its ARP entry
    /// ages out after `l2.arp_timeout_s`.
    pub(super) fn link_down(&mut self, now: Time, port: usize) {
        self.down[port] = true;
        self.flushed[port] = true;
        self.arp_until[port] = now + self.arp_timeout;
    }

    /// The server at `port` is back: its link is up and its ARP entry no longer ages.
    pub(super) fn link_up(&mut self, port: usize) {
        self.down[port] = false;
        self.arp_until[port] = Time::MAX;
    }

    /// The server at `port` announced itself (a gratuitous ARP): its MAC is learned again.
    pub(super) fn announce(&mut self, now: Time, port: usize) {
        self.learned[port] = now;
        self.flushed[port] = false;
    }

    /// How long a MAC entry lives without a frame from its server (`l2.mac_timeout_s`).
    pub(super) fn mac_timeout(cfg: &SimConfig) -> Dur {
        seconds(cfg.l2.mac_timeout_s)
    }

    /// A frame from the server at `port` arrived: its MAC entry is fresh.
    #[inline]
    pub(super) fn learn(&mut self, port: usize, now: Time) {
        self.learned[port] = now;
    }

    /// Whether the MAC of the server at `port` is known.
    #[inline]
    pub(super) fn known(&self, now: Time, port: usize) -> bool {
        !self.flushed[port] && now.since(self.learned[port]) <= self.mac_timeout
    }

    /// Records `copies` as the copies of one flooded packet.
    pub(super) fn flood_group(&mut self, copies: &[u32]) {
        let g = match self.free_groups.pop() {
            Some(g) => g,
            None => {
                self.groups.push(0);
                (self.groups.len() - 1) as u32
            }
        };
        self.groups[g as usize] = copies.len() as u32;
        for &q in copies {
            self.group_of.insert(q, g);
        }
    }

    /// A copy of a flooded packet leaves the buffer; returns whether it was the last one (or
    /// not a shared copy at all), so that the packet's bytes leave its ingress.
    pub(super) fn flood_release(&mut self, pkt: u32) -> bool {
        let Some(g) = self.group_of.remove(&pkt) else {
            return true;
        };
        let left = &mut self.groups[g as usize];
        *left -= 1;
        if *left == 0 {
            self.free_groups.push(g);
            true
        } else {
            false
        }
    }
}

/// `s` seconds, as long as a duration can be (the L2 timeouts run to hours).
fn seconds(s: f64) -> Dur {
    Dur::from_picos((s * 1e12).min(u64::MAX as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Time {
        Time::ZERO + Dur::from_micros(us)
    }

    #[test]
    fn a_dead_servers_entry_is_incomplete_until_it_announces_and_its_arp_entry_ages_out() {
        let cfg = SimConfig::default();
        let mut t = L2Table::new(&cfg, 3);
        t.learn(1, at(10));
        assert!(t.known(at(20), 1) && !t.is_down(1) && !t.arp_expired(at(20), 1));
        t.link_down(at(100), 1);
        assert!(
            t.is_down(1) && !t.known(at(101), 1),
            "MAC flushed with the link"
        );
        let arp = Dur::from_picos((cfg.l2.arp_timeout_s * 1e12) as u64);
        assert!(!t.arp_expired(at(99) + arp, 1));
        assert!(t.arp_expired(at(100) + arp, 1), "ARP entry aged out");
        t.link_up(1);
        assert!(!t.is_down(1) && !t.arp_expired(at(100) + arp, 1));
        assert!(
            !t.known(at(200), 1),
            "still incomplete until the server speaks"
        );
        t.announce(at(200), 1);
        assert!(t.known(at(201), 1));
        // Other ports are untouched.
        assert!(!t.is_down(0) && !t.is_down(2));
    }

    #[test]
    fn a_flooded_packets_bytes_leave_with_its_last_copy() {
        let mut t = L2Table::new(&SimConfig::default(), 4);
        t.flood_group(&[7, 8, 9]);
        let g = t.group_of(7);
        assert!(g.is_some() && t.group_of(8) == g && t.group_of(9) == g);
        assert_eq!(t.group_of(3), None);
        assert!(!t.flood_release(8) && !t.flood_release(7));
        assert!(t.flood_release(9), "the last copy");
        assert!(t.flood_release(3), "not a copy: its own bytes");
        assert_eq!(t.group_of(9), None);
        // The freed group serves the next flooded packet.
        t.flood_group(&[1, 2]);
        assert_eq!(t.group_of(1), g);
    }
}
