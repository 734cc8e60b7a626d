//! The device's objects by number: protection domains, completion queues, queue pairs of
//! both kinds (one QPN space) and address handles, with the numbers they are given.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::{random_u64, ud, CqState, Error, PdState, QpEntry, Result};

/// The tables of the device's objects.
pub(super) struct Objects {
    pub(super) pds: BTreeMap<u32, PdState>,
    pub(super) cqs: BTreeMap<u32, CqState>,
    /// Reliable-connected queue pairs.
    pub(super) qps: BTreeMap<u32, QpEntry>,
    /// Unreliable-datagram queue pairs (one QPN space with `qps`).
    pub(super) uds: BTreeMap<u32, ud::UdEntry>,
    /// Address handles: where UD datagrams go.
    pub(super) ahs: BTreeMap<u32, SocketAddr>,
    /// The next PD, CQ, memory key or address handle number.
    next_id: u32,
    /// The device's place in its group (index, members): its queue pairs' numbers are
    /// `index` modulo `members` (`group.rs`).
    qpn_class: (u32, u32),
}

impl Objects {
    /// No objects; numbers start at 1; queue pair numbers in the class `qpn_class` (index,
    /// members) of a group's member, `(0, 1)` for a device alone.
    pub(super) fn new(qpn_class: (u32, u32)) -> Objects {
        Objects {
            pds: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            uds: BTreeMap::new(),
            ahs: BTreeMap::new(),
            next_id: 1,
            qpn_class,
        }
    }

    /// A number no PD, CQ, memory key or address handle of the device has had.
    pub(super) fn fresh_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A random 24-bit QPN above the special ones (0, 1) in the device's class, used by no
    /// queue pair.
    pub(super) fn fresh_qpn(&self) -> u32 {
        let (index, members) = self.qpn_class;
        loop {
            let q = (random_u64() as u32) & 0x00ff_ffff;
            if q > 1
                && super::group::Member::owner_of(q, members) == index
                && !self.qps.contains_key(&q)
                && !self.uds.contains_key(&q)
            {
                return q;
            }
        }
    }

    /// Whether protection domain `pd` is still used by a queue pair of either kind.
    pub(super) fn pd_in_use(&self, pd: u32) -> bool {
        self.qps.values().any(|q| q.pd == pd) || self.uds.values().any(|q| q.pd == pd)
    }

    /// Completion queue `id`, or [`Error::Gone`].
    pub(super) fn cq_mut(&mut self, id: u32) -> Result<&mut CqState> {
        self.cqs.get_mut(&id).ok_or(Error::Gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_never_reused_and_qpns_avoid_the_special_ones() {
        let mut objects = Objects::new((0, 1));
        let ids: Vec<u32> = (0..100).map(|_| objects.fresh_id()).collect();
        assert_eq!(ids, (1..=100).collect::<Vec<u32>>());
        for _ in 0..1000 {
            let q = objects.fresh_qpn();
            assert!(q > 1 && q <= 0x00ff_ffff, "{q:#x}");
        }
        assert!(!objects.pd_in_use(1));
        assert!(matches!(objects.cq_mut(1), Err(Error::Gone)));
    }

    #[test]
    fn a_group_members_qpns_are_its_own() {
        for (index, members) in [(0, 2), (1, 2), (2, 3), (0, 5)] {
            let objects = Objects::new((index, members));
            for _ in 0..200 {
                let q = objects.fresh_qpn();
                assert!(q > 1 && q <= 0x00ff_ffff, "{q:#x}");
                assert_eq!(q % members, index, "{q:#x}");
            }
        }
    }
}
