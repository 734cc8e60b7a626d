//! Engines per core: a group of devices that share one address and UDP port, each with its own
//! engine thread and its own share of the queue pair numbers ([`Device::open_group`]).
//!
//! A device's engine is one thread, so one device moves what one core can. A NIC spreads its
//! queue pairs over receive queues and completion vectors, one per core, and steers each
//! packet by its destination queue pair; a group does the same with the host's kernel as the
//! NIC:
//!
//! * **Numbers.** Member `i` of `n` gives its queue pairs (both kinds) numbers `q` with
//!   `q mod n = i` ([`Member::owner`]); QPNs 0 and 1 (the subnet manager's and the general
//!   services', the CM's) belong to member 0.
//! * **Steering.** The members' UDP sockets form one `SO_REUSEPORT` group whose classic-BPF
//!   program (`SO_ATTACH_REUSEPORT_CBPF`, `net::steering_program`) picks the socket by the BTH's
//!   destination QP — the kernel delivers each datagram to the member that owns its queue
//!   pair, a coalesced one (a GSO message that stays whole on loopback, or what a NIC's GRO
//!   merged) by its first packet; irn's own GSO messages carry one queue pair's packets. On
//!   the raw path each member's raw socket filter keeps only its own queue pairs' packets
//!   (`net::port_filter`). The sockets stay open until the whole group closes
//!   ([`Group::retain`]), so the steering stays exact while any member lives.
//! * **Binding.** Before the members bind the port shared, a socket bound to it alone checks
//!   that nobody holds it, under a lock every irn group takes (`net::reserve_shared_port`): a
//!   group never joins another's on a port that is taken.
//! * **Forwarding.** A coalesced datagram whose packets are for two members' queue pairs (an
//!   older irn peer's GSO message, or what a NIC's GRO merged from queue pairs that share a
//!   flow) reaches the member of its first packet, which hands the others' packets to their
//!   owners ([`Member::forward`]), who deliver them at their next round: `rx_forwarded`
//!   counts these, and `rx_forward_dropped` those an owner's full inbox refused. A closed
//!   member's socket drops what reaches it (`net::retire`).
//!
//! The members share nothing else: each has its own protection domains, memory regions,
//! completion queues and connection manager (member 0's is the one peers reach). A program
//! drives each member from its own thread — the pattern of a verbs program that scales over
//! cores with a context, PD and CQ per thread. Registering the same application memory with
//! several members ([`Pd::reg_mr_raw`]) gives each its own keys for it, as registering a buffer
//! with two NICs does.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::Shared;

/// The most members a group may have.
pub const MAX_ENGINES: usize = 64;

/// The most packets a member's inbox holds: what one receive burst brings (`RX_PACKETS`),
/// while whoever receives for the owner has not yet run its round.
const INBOX_MAX: usize = super::RX_PACKETS;

/// What [`Member::forward`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Forward {
    /// Handed to its owner.
    Handed,
    /// Its owner's inbox was full: dropped.
    Full,
    /// No other member owns it (this one does, or its owner is closed, or the group is not
    /// yet sealed).
    NoOwner,
}

/// The members of one group, by index, once all are open, and their UDP sockets.
#[derive(Default)]
pub(super) struct Group {
    members: OnceLock<Vec<Weak<Shared>>>,
    /// Each member's UDP socket, open until the last member closes: a socket leaving a
    /// reuse-port group makes the kernel move the group's last socket into its place, which
    /// would give the last member's packets to the hash — and to any socket that later
    /// joins the port with `SO_REUSEPORT` (another device's send-only source port). Kept
    /// open, a closed member's socket takes its own class's packets (its queue pairs are
    /// gone), and a later socket's index is past the program's reach.
    sockets: Mutex<Vec<std::net::UdpSocket>>,
}

impl Group {
    /// Records the members (in index order) once they are all open.
    pub(super) fn seal(&self, members: Vec<Weak<Shared>>) {
        let _ = self.members.set(members);
    }

    /// Keeps `socket` (a member's, duplicated) open for as long as the group lives.
    pub(super) fn retain(&self, socket: std::net::UdpSocket) {
        self.sockets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(socket);
    }
}

/// A device's place in its group.
pub(super) struct Member {
    index: u32,
    count: u32,
    group: Arc<Group>,
    /// Packets other members received for this one's queue pairs.
    inbox: Inbox,
}

/// A member's inbox: whole IP packets other members received for its queue pairs, at most
/// `cap` of them, taken all at once by whoever receives for the member.
struct Inbox {
    packets: Mutex<Vec<Vec<u8>>>,
    cap: usize,
}

/// What [`Inbox::offer`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offered {
    /// Queued into an empty inbox: its receiver needs a wake-up.
    First,
    /// Queued behind others, whose wake-up is still pending.
    Behind,
    /// Refused: the inbox holds `cap` packets.
    Full,
}

impl Inbox {
    fn new(cap: usize) -> Inbox {
        Inbox {
            packets: Mutex::new(Vec::new()),
            cap,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.packets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn offer(&self, packet: &[u8]) -> Offered {
        let mut packets = self.lock();
        if packets.len() >= self.cap {
            return Offered::Full;
        }
        packets.push(packet.to_vec());
        if packets.len() == 1 {
            Offered::First
        } else {
            Offered::Behind
        }
    }

    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.lock())
    }

    fn waiting(&self) -> bool {
        !self.lock().is_empty()
    }
}

impl Member {
    pub(super) fn new(index: u32, count: u32, group: Arc<Group>) -> Member {
        debug_assert!(index < count);
        Member {
            index,
            count,
            group,
            inbox: Inbox::new(INBOX_MAX),
        }
    }

    /// The index of the member that owns queue pair number `qpn` among `count` members.
    pub(super) fn owner_of(qpn: u32, count: u32) -> u32 {
        if qpn <= 1 {
            0
        } else {
            qpn % count
        }
    }

    /// The index of the member that owns `qpn`.
    pub(super) fn owner(&self, qpn: u32) -> u32 {
        Member::owner_of(qpn, self.count)
    }

    /// Whether another member owns `qpn`.
    pub(super) fn foreign(&self, qpn: u32) -> bool {
        self.owner(qpn) != self.index
    }

    /// This member's index and the group's size.
    pub(super) fn place(&self) -> (u32, u32) {
        (self.index, self.count)
    }

    /// Hands `packet` (a whole IP packet) to the member that owns `qpn` and wakes whoever
    /// receives for it: [`Forward::NoOwner`] if this member owns it, the owner is closed or
    /// the group is not yet sealed, [`Forward::Full`] if the owner's inbox is full. Whoever
    /// receives for the owner drains the whole inbox at each round, so only the packet that
    /// finds it empty wakes them (the wake-up of the packets before is still pending).
    pub(super) fn forward(&self, qpn: u32, packet: &[u8]) -> Forward {
        if !self.foreign(qpn) {
            return Forward::NoOwner;
        }
        let owner = self.owner(qpn) as usize;
        let Some(to) = self
            .group
            .members
            .get()
            .and_then(|m| m.get(owner))
            .and_then(Weak::upgrade)
            .filter(|to| !to.closed())
        else {
            return Forward::NoOwner;
        };
        let Some(m) = to.member.as_deref() else {
            return Forward::NoOwner;
        };
        match m.inbox.offer(packet) {
            Offered::Full => return Forward::Full,
            Offered::First => to.wake_for_forward(),
            Offered::Behind => {}
        }
        Forward::Handed
    }

    /// The packets other members handed over since the last call.
    pub(super) fn take_inbox(&self) -> Vec<Vec<u8>> {
        self.inbox.take()
    }

    /// Whether packets wait in the inbox.
    pub(super) fn inbox_waiting(&self) -> bool {
        self.inbox.waiting()
    }
}

/// Member `i`'s capture file beside `path`: `STEM.i.EXT` (`STEM.i` without an extension).
pub(super) fn capture_path(path: &std::path::Path, i: usize) -> std::path::PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{i}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{i}"),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_has_one_owner_and_the_special_ones_are_member_zeros() {
        for count in 1..=8 {
            assert_eq!(Member::owner_of(0, count), 0);
            assert_eq!(Member::owner_of(1, count), 0);
            let mut seen = vec![0u32; count as usize];
            for q in 2..2 + 8 * count {
                let o = Member::owner_of(q, count);
                assert!(o < count);
                assert_eq!(o, q % count);
                seen[o as usize] += 1;
            }
            assert!(seen.iter().all(|&s| s == 8), "{seen:?}");
        }
    }

    #[test]
    fn each_member_captures_beside_the_first() {
        use std::path::Path;
        assert_eq!(
            capture_path(Path::new("/t/run.pcap"), 2),
            Path::new("/t/run.2.pcap")
        );
        assert_eq!(capture_path(Path::new("cap"), 1), Path::new("cap.1"));
    }

    #[test]
    fn a_member_forwards_nothing_before_the_group_is_sealed_or_after_its_owner_closed() {
        let g = Arc::new(Group::default());
        let m = Member::new(0, 2, g.clone());
        assert!(!m.foreign(4) && m.foreign(5));
        assert_eq!(m.forward(5, &[1, 2, 3]), Forward::NoOwner);
        g.seal(vec![Weak::new(), Weak::new()]);
        assert_eq!(m.forward(5, &[1, 2, 3]), Forward::NoOwner);
        assert_eq!(m.forward(4, &[1, 2, 3]), Forward::NoOwner);
        assert!(m.take_inbox().is_empty());
    }

    #[test]
    fn an_inbox_wakes_on_its_first_packet_and_refuses_past_its_cap() {
        let inbox = Inbox::new(3);
        assert!(!inbox.waiting());
        assert_eq!(inbox.offer(&[1]), Offered::First);
        assert!(inbox.waiting());
        assert_eq!(inbox.offer(&[2, 2]), Offered::Behind);
        assert_eq!(inbox.offer(&[3]), Offered::Behind);
        assert_eq!(inbox.offer(&[4]), Offered::Full);
        assert_eq!(inbox.take(), vec![vec![1], vec![2, 2], vec![3]]);
        assert!(!inbox.waiting());
        // Drained, it takes packets again, and the next one needs a wake-up again.
        assert_eq!(inbox.offer(&[5]), Offered::First);
        assert_eq!(inbox.take(), vec![vec![5]]);
    }
}
