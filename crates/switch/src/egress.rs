//! One output port of the switch, without I/O: its queues (a control queue and one per
//! priority, [`Classify`] says which frames the priorities hold), how they share the wire
//! (strict priority or DWRR, [`Egress::with_dwrr`]), its drops (the switch's memory,
//! [`crate::mmu`], says which frames fit), its ECN marking,
//! the pauses it received, and the pacer that lets frames out at the port's rate
//! ([`MAX_LAG`]). Time is nanoseconds since the switch started; the switch's loop
//! ([`crate::run`]) offers it frames and takes them out.
//!
//! A frame's priority is read from its DSCP, or from its 802.1Q tag's PCP when the switch
//! trusts PCP ([`Egress::with_trust`]; an untagged frame then has priority 0, a port's
//! default, IEEE 802.1Q §6.9). An egress that routes ([`Egress::routed`]) sends a frame on
//! without its tag, as a routed hop's new Ethernet header carries none — the PCP does not
//! cross a subnet boundary, which is why RoCEv2 fabrics moved PFC to the DSCP (seed 001
//! §3).

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use irn_sim::config::Trust;
use irn_sim::net::sched::{self, Dwrr, Weights};
use irn_sim::net::Marking;
use irn_transport::rng::Rng;
use irn_wire::ethernet::{EtherType, EthernetFrame};
use irn_wire::mac_control::MacControlRepr;
use irn_wire::{Ecn, Ipv4Packet, Ipv6Packet};

use crate::lossless::{priority_of_dscp, PausedUntil};
use crate::mmu::{Admit, Mmu};
use crate::PortCounters;

/// How far behind its schedule an egress may catch up in one burst after a late wake-up.
pub const MAX_LAG: Duration = Duration::from_micros(200);

/// The FCS a frame carries on the wire and a packet socket does not show.
const FCS: u64 = 4;

/// An 802.1Q tag's bytes: its TPID (0x8100) and TCI.
pub const VLAN_TAG_LEN: usize = 4;

/// What became of a frame offered to an egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Queued as it was.
    Queued,
    /// Queued, marked CE.
    Marked,
    /// Dropped: the buffer had no room for it.
    Dropped,
    /// Dropped: longer than the port can send.
    Oversize,
}

/// Which frames an egress classifies by DSCP into the eight priorities (`--classify`); the
/// rest go to the control queue, served above them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Classify {
    /// UDP only: the RDMA traffic (RoCEv2 — to port 4791 from an RDMA NIC or rxe, to
    /// whatever port an irn device listens on) the buffer, the marking and the drops are
    /// about. ARP and TCP (an out-of-band set-up exchange, …) are control traffic, kept apart
    /// from the RDMA class as a production network keeps it (seed 001 §2) — a dropped TCP SYN
    /// would otherwise stall a connection for the kernel's one-second SYN timeout.
    #[default]
    Udp,
    /// Every IPv4 and IPv6 packet by its DSCP, TCP included, as a switch that trusts DSCP
    /// does: TCP and RDMA each in a class of their own, shared by strict priority or weight
    /// (seed 004's lossy fabric with QoS), or in one class together. Only frames that are not
    /// IP (ARP, LLDP, …) are control traffic.
    Ip,
}

/// A `--classify` value: `udp` or `ip`.
pub fn parse_classify(s: &str) -> std::result::Result<Classify, String> {
    match s {
        "udp" => Ok(Classify::Udp),
        "ip" => Ok(Classify::Ip),
        _ => Err(format!("udp or ip, not {s:?}")),
    }
}

/// A frame's traffic class at an egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Classified by its DSCP into one of the eight priorities ([`Classify`] says which
    /// frames are).
    Data = 0,
    /// Control traffic: a queue of its own, served first.
    Control = 1,
}

impl Class {
    /// The class of an Ethernet frame (the switch reads it with the rest of the IP header,
    /// [`Class::of_ip`]).
    #[cfg(test)]
    fn of(frame: &[u8], classify: Classify) -> Class {
        Class::of_ip(ip_info(frame), classify)
    }

    /// The class of a frame whose IP header (if any) reads `ip`.
    fn of_ip(ip: Option<IpInfo>, classify: Classify) -> Class {
        match (ip, classify) {
            (Some(ip), Classify::Udp) if ip.udp => Class::Data,
            (Some(_), Classify::Ip) => Class::Data,
            _ => Class::Control,
        }
    }
}

/// Queues of an egress: the control queue first, then one per priority, highest first,
/// shared by strict priority or DWRR ([`Egress::with_dwrr`]).
const QUEUES: usize = 9;

/// The queue of a frame of class `class` and priority `prio`.
fn queue_of(class: Class, prio: Option<u8>) -> usize {
    match class {
        Class::Control => 0,
        Class::Data => 1 + usize::from((7 - prio.unwrap_or(0)) & 7),
    }
}

/// A frame waiting at an egress, and where it came from (for its ingress's lossless count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The frame.
    pub frame: Vec<u8>,
    /// The port it arrived on.
    pub from: usize,
    /// Its priority (its DSCP's, or its tag's PCP); `None` for control traffic.
    pub prio: Option<u8>,
    /// Its length as it arrived, what its ingress counted ([`Mmu::queued`]): a routed
    /// egress took 4 bytes off with the tag.
    pub arrived_len: u64,
}

/// One output port's queues and pacer, without I/O: time is nanoseconds since the switch
/// started. Control traffic has a queue of its own, served first, and the rest ([`Classify`])
/// one per priority (its DSCP's), served highest first or by weight ([`Egress::with_dwrr`]).
/// A queue takes what the switch's memory admits ([`Mmu::admit`]); a lossless frame
/// (`--pfc`, `--pause`) it has no room for is queued anyway (counted as a headroom overflow)
/// rather than dropped. A queue whose priority the peer paused waits; the port's rate is
/// shared.
#[derive(Debug)]
pub struct Egress {
    queues: [VecDeque<Queued>; QUEUES],
    bytes: [u64; QUEUES],
    /// Which frames the priorities' queues hold.
    classify: Classify,
    /// What a frame's priority is read from.
    trust: Trust,
    /// Frames leave without their 802.1Q tag ([`Egress::routed`]).
    routed: bool,
    /// How the priorities' queues share the wire (index 0 is priority 7's queue, 7 priority
    /// 0's): all strict unless [`Egress::with_dwrr`] weighs them.
    weights: Weights,
    /// The round robin's state between them.
    dwrr: Dwrr,
    /// The pauses this port received.
    paused: PausedUntil,
    /// Largest frame the port sends (its MTU plus the Ethernet header).
    max_frame: usize,
    rate_bps: u64,
    /// The rate the pause frames this port receives count their quanta at.
    pause_rate_bps: u64,
    /// When the wire is free for the next frame.
    free_at: u64,
    /// Counters (the switch fills in the receive side).
    pub counters: PortCounters,
}

impl Egress {
    /// An empty egress at `rate_bps`, for frames up to `max_frame` bytes.
    pub fn new(port: &str, rate_bps: u64, max_frame: usize) -> Egress {
        Egress {
            queues: Default::default(),
            bytes: [0; QUEUES],
            classify: Classify::Udp,
            trust: Trust::Dscp,
            routed: false,
            weights: Weights::strict(sched::QUEUES),
            dwrr: Dwrr::default(),
            paused: PausedUntil::default(),
            max_frame,
            rate_bps,
            pause_rate_bps: rate_bps,
            free_at: 0,
            counters: PortCounters {
                port: port.to_string(),
                ..PortCounters::default()
            },
        }
    }

    /// Counts the quanta of the pause frames the port receives at `bps`, its link's speed
    /// (512 bit times each, IEEE 802.3 Annex 31B), rather than at the rate it drains at.
    pub fn with_pause_rate(mut self, bps: u64) -> Egress {
        self.pause_rate_bps = bps.max(1);
        self
    }

    /// Classifies `classify`'s frames by DSCP (UDP only without it).
    pub fn with_classify(mut self, classify: Classify) -> Egress {
        self.classify = classify;
        self
    }

    /// Reads a frame's priority from what `trust` says: its DSCP (the default) or its
    /// 802.1Q tag's PCP, an untagged frame then being priority 0.
    pub fn with_trust(mut self, trust: Trust) -> Egress {
        self.trust = trust;
        self
    }

    /// The port routes: a frame leaves it in a new Ethernet header, without the 802.1Q tag
    /// it came with (its PCP is gone; its DSCP, in the IP header, stays). Its priority here
    /// is read before the tag goes. Counted in `tags_stripped`.
    pub fn routed(mut self, routed: bool) -> Egress {
        self.routed = routed;
        self
    }

    /// The priorities share the wire by IEEE 802.1Qaz ETS instead of strict priority:
    /// `by_priority[p]` is priority `p`'s weight, 0 for a strict priority (served above every
    /// weighted one, the highest first), and the weighted ones by deficit round robin with a
    /// quantum of one largest frame per unit of weight ([`irn_sim::net::sched`], the
    /// simulator's scheduler). Control traffic stays strict above them all.
    pub fn with_dwrr(mut self, by_priority: &[u32; 8]) -> Egress {
        // Queue j holds priority 7 - j.
        let by_queue: Vec<u32> = (0..8).map(|j| by_priority[7 - j]).collect();
        self.weights = Weights::new(&by_queue, self.max_frame as u32);
        self
    }

    /// Offers `frame`, which arrived on port `from`, at `now`: dropped if the switch's memory
    /// `mmu` does not admit it to its queue (a lossless frame always joins), else marked by
    /// `marking` from the queue it joins (if it is ECN-capable) and queued. A frame that finds
    /// the egress empty starts its wire time no earlier than `now`. Returns the verdict and
    /// the frame's priority; the caller charges a queued frame to `mmu` ([`Mmu::queued`]).
    pub fn offer(
        &mut self,
        now: u64,
        mut frame: Vec<u8>,
        from: usize,
        mmu: &Mmu,
        marking: &Marking,
        rng: &mut Rng,
    ) -> (Verdict, Option<u8>) {
        let arrived_len = frame.len() as u64;
        let tag = if is_tagged(&frame) { VLAN_TAG_LEN } else { 0 };
        // A tag may take a frame 4 bytes past the MTU's (IEEE 802.3 §3.5's envelope frame).
        if frame.len() > self.max_frame + tag {
            self.counters.oversize += 1;
            return (Verdict::Oversize, None);
        }
        // The IP header is read once: for the class and priority, and for the mark.
        let mut ip = ip_info(&frame);
        let class = Class::of_ip(ip, self.classify);
        let prio = match class {
            Class::Data => ip.map(|ip| match self.trust {
                Trust::Dscp => priority_of_dscp(ip.dscp),
                Trust::Pcp => ip.pcp.unwrap_or(0),
            }),
            Class::Control => None,
        };
        if self.routed && tag > 0 {
            frame.drain(12..12 + VLAN_TAG_LEN);
            if let Some(ip) = ip.as_mut() {
                ip.at -= VLAN_TAG_LEN;
            }
            self.counters.tags_stripped += 1;
        }
        let len = frame.len() as u64;
        let c = queue_of(class, prio);
        let q = self.bytes[c];
        // Admitted by what its ingress is charged ([`Mmu::queued`]): the frame as it came.
        match mmu.admit(q, arrived_len, prio) {
            Admit::Yes => {}
            Admit::Overflow => self.counters.headroom_overflow += 1,
            Admit::No => {
                self.counters.dropped += 1;
                return (Verdict::Dropped, prio);
            }
        }
        let ect = ip.filter(|ip| matches!(ip.ecn, Ecn::Ect0 | Ecn::Ect1));
        let verdict = if let Some(ip) = ect.filter(|_| marking.is_on() && marking.mark(q, rng)) {
            mark_ce(&mut frame, ip);
            self.counters.marked += 1;
            Verdict::Marked
        } else {
            Verdict::Queued
        };
        if self.queued_bytes() == 0 {
            // An idle wire: no catching up on time nobody needed.
            self.free_at = self.free_at.max(now);
        }
        self.bytes[c] += len;
        let peak = &mut self.counters.peak_queue_bytes;
        *peak = (*peak).max(self.bytes[c]);
        self.queues[c].push_back(Queued {
            frame,
            from,
            prio,
            arrived_len,
        });
        (verdict, prio)
    }

    /// A PFC or PAUSE frame arrived on this port at `now`: the queues it names wait for its
    /// time (a later frame replaces an earlier one's; 0 quanta resumes).
    pub fn pause(&mut self, frame: &MacControlRepr, now: u64) {
        self.counters.pause_received += 1;
        self.paused.apply(frame, now, self.pause_rate_bps);
    }

    /// The priority the frames of queue `c` have (`None`: control traffic).
    fn queue_prio(c: usize) -> Option<u8> {
        (c > 0).then(|| 7 - (c - 1) as u8)
    }

    /// The next frame if the wire is free for it at `now` (control traffic first, then the
    /// priorities, by priority or by weight), skipping the queues the peer paused. A late
    /// wake-up may send what fell due in the last [`MAX_LAG`] back to back.
    pub fn take(&mut self, now: u64) -> Option<Queued> {
        if self.free_at > now {
            return None;
        }
        let may_send = |e: &Egress, c: usize| {
            !e.queues[c].is_empty() && e.paused.may_send(Egress::queue_prio(c), now)
        };
        let c = if may_send(self, 0) {
            0
        } else {
            let ready = (1..QUEUES)
                .filter(|&c| may_send(self, c))
                .fold(0u8, |m, c| m | 1 << (c - 1));
            1 + self.dwrr.pick(&self.weights, ready)?
        };
        let queued = self.queues[c].pop_front()?;
        let len = queued.frame.len() as u64;
        self.bytes[c] -= len;
        if c > 0 {
            self.dwrr.charge(c - 1, len as u32);
        }
        let lag = MAX_LAG.as_nanos() as u64;
        let start = self.free_at.max(now.saturating_sub(lag));
        let wire_ns = ((len + FCS) * 8).saturating_mul(1_000_000_000) / self.rate_bps;
        self.free_at = start + wire_ns.max(1);
        Some(queued)
    }

    /// When the next queued frame may leave, if one is queued: when the wire is free, or
    /// later, when the pause of every queue with frames runs out.
    pub fn next_departure(&self) -> Option<u64> {
        (0..QUEUES)
            .filter(|&c| !self.queues[c].is_empty())
            .map(|c| self.free_at.max(self.paused.until(Egress::queue_prio(c))))
            .min()
    }

    /// The link rate the port counts pause quanta at, bits per second.
    pub fn pause_rate_bps(&self) -> u64 {
        self.pause_rate_bps
    }

    /// The largest frame the port sends (its MTU plus the Ethernet header).
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Bytes queued, every queue.
    pub fn queued_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }
}

/// Whether an Ethernet frame carries an 802.1Q tag.
pub fn is_tagged(frame: &[u8]) -> bool {
    pcp_of(frame).is_some()
}

/// The PCP of a frame's 802.1Q tag, if it has a whole one.
pub fn pcp_of(frame: &[u8]) -> Option<u8> {
    EthernetFrame::new_checked(frame)
        .ok()?
        .vlan()
        .map(|t| t.pcp)
}

/// What the switch reads of an IPv4 or IPv6 frame, tagged or not.
#[derive(Debug, Clone, Copy)]
struct IpInfo {
    /// Where the IP header starts in the frame (14, or 18 behind a tag).
    at: usize,
    /// The tag's PCP, if the frame is tagged.
    pcp: Option<u8>,
    v4: bool,
    /// It carries UDP.
    udp: bool,
    ecn: Ecn,
    dscp: u8,
}

/// The IP header of a frame, if it is an IPv4 or IPv6 one (untagged, or behind one 802.1Q
/// tag) whose header is whole.
fn ip_info(frame: &[u8]) -> Option<IpInfo> {
    const UDP: u8 = 17;
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let pcp = eth.vlan().map(|t| t.pcp);
    let (at, t) = (eth.header_len(), eth.ethertype());
    let ip = frame.get(at..)?;
    if t == EtherType::Ipv4 {
        let p = Ipv4Packet::new_checked(ip).ok()?;
        Some(IpInfo {
            at,
            pcp,
            v4: true,
            udp: p.protocol() == UDP,
            ecn: p.ecn(),
            dscp: p.dscp(),
        })
    } else if t == EtherType::Ipv6 {
        let p = Ipv6Packet::new_checked(ip).ok()?;
        Some(IpInfo {
            at,
            pcp,
            v4: false,
            udp: p.next_header() == UDP,
            ecn: p.ecn(),
            dscp: p.dscp(),
        })
    } else {
        None
    }
}

/// Marks CE the IP packet of a frame whose header `ip_info` read as `ip`.
fn mark_ce(frame: &mut [u8], ip: IpInfo) {
    // `ip_info` checked the header: it is whole.
    if ip.v4 {
        Ipv4Packet::new_unchecked(&mut frame[ip.at..]).set_ecn(Ecn::Ce);
    } else {
        Ipv6Packet::new_unchecked(&mut frame[ip.at..]).set_ecn(Ecn::Ce);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::lossless::Mode;
    use crate::mmu::Buffer;
    use irn_sim::config::{EcnMode, SwitchConfig};

    /// Memory of `bytes` per queue under flow control `mode`.
    fn per_queue(mode: Mode, bytes: u64) -> Mmu {
        let b = Buffer::PerQueue {
            bytes,
            xoff: bytes / 4 * 3,
        };
        Mmu::new(b, mode, &[1_000_000_000; 2], 3_000, u16::MAX)
    }

    /// An ECN-`ecn` RoCEv2 frame of `len` bytes from MAC …`src` to MAC …`dst`.
    pub(crate) fn frame(dst: u8, src: u8, ecn: Ecn, len: usize) -> Vec<u8> {
        frame_dscp(dst, src, ecn, len, 0)
    }

    fn frame_dscp(dst: u8, src: u8, ecn: Ecn, len: usize, dscp: u8) -> Vec<u8> {
        let mut f = ip_frame(dst, src, ecn, len, dscp, 17);
        // UDP to port 4791: RoCEv2.
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
        f
    }

    /// An IPv4 frame of `len` bytes carrying IP protocol `protocol`.
    fn ip_frame(dst: u8, src: u8, ecn: Ecn, len: usize, dscp: u8, protocol: u8) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = irn_wire::Ipv4Repr {
            src: "10.0.0.1".parse().expect("addr"),
            dst: "10.0.0.2".parse().expect("addr"),
            protocol,
            dscp,
            ecn,
            ident: 7,
            dont_frag: true,
            ttl: 64,
            payload_len: len - 14 - 20,
        };
        ip.emit(&mut f[14..]).expect("emit");
        f
    }

    fn marking(ecn: EcnMode, kmin: u64, kmax: u64, pmax: f64) -> Marking {
        Marking::new(&SwitchConfig {
            ecn,
            ecn_kmin_bytes: kmin,
            ecn_kmax_bytes: kmax,
            ecn_pmax: pmax,
            ..SwitchConfig::default()
        })
    }

    #[test]
    fn a_full_buffer_drops_and_a_long_queue_marks_ect_only() {
        let m = marking(EcnMode::Threshold, 2_500, 2_500, 1.0);
        let mut rng = Rng::new(1);
        let off = per_queue(Mode::Off, 5_000);
        let mut e = Egress::new("p", 1_000_000_000, 1514);
        let verdicts: Vec<Verdict> = (0..6)
            .map(|i| {
                let ecn = if i == 3 { Ecn::NotEct } else { Ecn::Ect0 };
                e.offer(0, frame(1, 2, ecn, 1000), 0, &off, &m, &mut rng).0
            })
            .collect();
        use Verdict::*;
        // Queues of 0, 1000, 2000 bytes: below K; 3000 (not ECT), 4000: above; then full.
        assert_eq!(verdicts, [Queued, Queued, Queued, Queued, Marked, Dropped]);
        assert_eq!((e.counters.marked, e.counters.dropped), (1, 1));
        assert_eq!(e.counters.peak_queue_bytes, 5_000);
        assert_eq!(
            e.offer(0, vec![0u8; 1515], 0, &off, &m, &mut rng).0,
            Oversize
        );
        // The marked frame is CE with a valid header checksum; the others are as they came.
        let out: Vec<Vec<u8>> =
            std::iter::from_fn(|| e.take(u64::MAX / 2).map(|q| q.frame)).collect();
        assert_eq!(out.len(), 5);
        let ecns: Vec<Ecn> = out
            .iter()
            .map(|f| {
                let p = Ipv4Packet::new_checked(&f[14..]).expect("ip");
                assert!(p.verify_checksum());
                p.ecn()
            })
            .collect();
        assert_eq!(
            ecns,
            [Ecn::Ect0, Ecn::Ect0, Ecn::Ect0, Ecn::NotEct, Ecn::Ce]
        );
    }

    #[test]
    fn the_pacer_holds_the_rate_and_bursts_at_most_the_lag() {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let off = per_queue(Mode::Off, 1 << 20);
        // 1000-byte frames at 8.032 Mb/s: one per millisecond (FCS included).
        let mut e = Egress::new("p", 8_032_000, 1514);
        for _ in 0..100 {
            let _ = e.offer(0, frame(1, 2, Ecn::Ect0, 1000), 0, &off, &m, &mut rng);
        }
        let ms = 1_000_000u64;
        assert!(e.take(0).is_some());
        assert!(
            e.take(ms - 1).is_none(),
            "the wire is busy for a millisecond"
        );
        assert!(e.take(ms).is_some());
        // Woken 10 ms late: only what fell due in the last MAX_LAG leaves back to back.
        let mut burst = 0;
        while e.take(12 * ms).is_some() {
            burst += 1;
        }
        assert_eq!(burst, 1, "200 µs of lag is less than one frame's time");
        // Woken on time from then on: one frame per millisecond, none earlier.
        let t = e.next_departure().expect("queued");
        assert_eq!(t, 12 * ms + 800_000, "the burst started 200 µs back");
        assert!(e.take(t - 1).is_none() && e.take(t).is_some());
        // Drained, then idle for a second: a new frame starts when it comes, without a
        // burst of the time nobody used.
        while let Some(t) = e.next_departure() {
            assert!(e.take(t).is_some());
        }
        let later = 2_000 * ms;
        for _ in 0..2 {
            e.offer(later, frame(1, 2, Ecn::Ect0, 1000), 0, &off, &m, &mut rng);
        }
        assert!(e.take(later).is_some());
        assert!(e.take(later).is_none(), "one frame's time before the next");
        assert_eq!(e.next_departure(), Some(later + ms));
    }

    #[test]
    fn other_traffic_has_its_own_queue_and_goes_first() {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let off = per_queue(Mode::Off, 2_000);
        let mut e = Egress::new("p", 1_000_000_000, 1514);
        let roce = frame(1, 2, Ecn::Ect0, 1000);
        let mut tcp = roce.clone();
        tcp[14 + 9] = 6; // protocol TCP
        let udp = Classify::Udp;
        assert_eq!(
            (Class::of(&roce, udp), Class::of(&tcp, udp)),
            (Class::Data, Class::Control)
        );
        // UDP to any port is the RDMA class: an irn device may listen elsewhere than 4791.
        let mut other_port = roce.clone();
        other_port[36..38].copy_from_slice(&18515u16.to_be_bytes());
        assert_eq!(Class::of(&other_port, udp), Class::Data);
        assert_eq!(Class::of(&[0u8; 20], udp), Class::Control);
        // The RoCE queue is full; a TCP segment still finds room, and leaves first.
        for _ in 0..2 {
            assert_eq!(
                e.offer(0, roce.clone(), 0, &off, &m, &mut rng).0,
                Verdict::Queued
            );
        }
        assert_eq!(
            e.offer(0, roce.clone(), 0, &off, &m, &mut rng).0,
            Verdict::Dropped
        );
        assert_eq!(
            e.offer(0, tcp.clone(), 0, &off, &m, &mut rng).0,
            Verdict::Queued
        );
        assert_eq!(e.queued_bytes(), 3_000);
        assert_eq!(e.take(0).map(|q| q.frame), Some(tcp));
        assert_eq!(e.take(u64::MAX / 2).map(|q| q.frame), Some(roce));
    }

    /// A TCP segment (protocol 6) of `len` bytes with DSCP `dscp`.
    fn tcp_dscp(dscp: u8, len: usize) -> Vec<u8> {
        ip_frame(1, 2, Ecn::NotEct, len, dscp, 6)
    }

    #[test]
    fn classify_ip_puts_tcp_in_its_dscps_priority_beside_rdma() {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let (big, small) = (per_queue(Mode::Off, 100_000), per_queue(Mode::Off, 2_000));
        let ip = Classify::Ip;
        let tcp = tcp_dscp(0, 1000);
        let roce = frame_dscp(1, 2, Ecn::NotEct, 1000, 24);
        let mut arp = frame(1, 2, Ecn::NotEct, 60);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(Class::of(&tcp, ip), Class::Data);
        assert_eq!(Class::of(&roce, ip), Class::Data);
        assert_eq!(Class::of(&arp, ip), Class::Control);
        assert_eq!(parse_classify("ip"), Ok(Classify::Ip));
        assert!(parse_classify("tcp").is_err_and(|e| e.contains("udp or ip")));
        // Strict priority: RDMA (priority 3) leaves before TCP (priority 0), which is no
        // longer control traffic above it; ARP still leaves first.
        let mut e = Egress::new("p", 1_000_000_000, 1514).with_classify(ip);
        for f in [&tcp, &tcp, &roce, &roce, &arp] {
            assert_eq!(
                e.offer(0, f.clone(), 0, &big, &m, &mut rng),
                (
                    Verdict::Queued,
                    (f != &arp).then(|| priority_of_dscp(f[15] >> 2))
                )
            );
        }
        let order: Vec<Option<u8>> = (0..5)
            .map(|_| e.take(u64::MAX / 2).expect("queued").prio)
            .collect();
        assert_eq!(order, [None, Some(3), Some(3), Some(0), Some(0)]);
        // TCP's priority fills on its own: its buffer is its queue's, not RDMA's.
        let mut e = Egress::new("p", 1_000_000_000, 1514).with_classify(ip);
        let verdicts: Vec<Verdict> = [&tcp, &tcp, &tcp, &roce]
            .iter()
            .map(|f| e.offer(0, (*f).clone(), 0, &small, &m, &mut rng).0)
            .collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Queued,
                Verdict::Queued,
                Verdict::Dropped,
                Verdict::Queued
            ]
        );
        // PFC on priority 0 makes TCP lossless too: a switch that trusts DSCP pauses what
        // the priority carries, whatever the protocol.
        assert_eq!(
            e.offer(
                0,
                tcp.clone(),
                0,
                &per_queue(Mode::Pfc(1), 2_000),
                &m,
                &mut rng
            )
            .0,
            Verdict::Queued
        );
        // Equal weights: TCP and RDMA alternate, frame for frame of equal size.
        let w = [1, 0, 0, 1, 0, 0, 0, 0];
        let mut e = Egress::new("p", 1_000_000_000, 1514)
            .with_classify(ip)
            .with_dwrr(&w);
        for f in [&roce, &tcp] {
            for _ in 0..8 {
                e.offer(0, f.clone(), 0, &big, &m, &mut rng);
            }
        }
        // (Strict priority would send all eight of RDMA's first.)
        let first: Vec<u8> = (0..8)
            .map(|_| e.take(u64::MAX / 2).and_then(|q| q.prio).expect("queued"))
            .collect();
        let tcp_sent = first.iter().filter(|&&p| p == 0).count();
        assert!((3..=5).contains(&tcp_sent), "{first:?}");
        // The default still keeps TCP above every priority.
        let mut e = Egress::new("p", 1_000_000_000, 1514);
        e.offer(0, roce.clone(), 0, &big, &m, &mut rng);
        e.offer(0, tcp.clone(), 0, &big, &m, &mut rng);
        assert_eq!(e.take(u64::MAX / 2).map(|q| q.prio), Some(None));
    }

    /// A UDP frame with DSCP `dscp`.
    fn with_dscp(dscp: u8, len: usize) -> Vec<u8> {
        frame_dscp(1, 2, Ecn::NotEct, len, dscp)
    }

    #[test]
    fn udp_queues_by_priority_a_paused_one_waits_and_lossless_frames_are_not_dropped() {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let mut e = Egress::new("p", 1_000_000_000, 1514);
        let pfc = &per_queue(Mode::Pfc(1 << 3), 2_000);
        // Priority 0 (DSCP 0): dropped when its queue is full.
        for want in [Verdict::Queued, Verdict::Queued, Verdict::Dropped] {
            assert_eq!(
                e.offer(0, with_dscp(0, 1000), 0, pfc, &m, &mut rng),
                (want, Some(0))
            );
        }
        // Priority 3 (DSCP 26) is lossless: past its buffer it is queued, and counted.
        for _ in 0..3 {
            let (v, prio) = e.offer(0, with_dscp(26, 1000), 1, pfc, &m, &mut rng);
            assert_eq!((v, prio), (Verdict::Queued, Some(3)));
        }
        assert_eq!((e.counters.dropped, e.counters.headroom_overflow), (1, 1));
        // Priority 3 goes first; paused, priority 0 goes instead.
        let first = e.take(0).expect("a frame");
        assert_eq!((first.prio, first.from), (Some(3), 1));
        e.pause(
            &MacControlRepr::Pfc(irn_wire::mac_control::PfcRepr::single(3, 100)),
            0,
        );
        let t = e.next_departure().expect("queued");
        let next = e.take(t).expect("a frame");
        assert_eq!(next.prio, Some(0));
        // Once priority 0 is empty, the next departure waits for priority 3's pause: 100
        // quanta at 1 Gb/s, 51.2 µs.
        let t = e.next_departure().expect("queued");
        assert!(e.take(t).is_some());
        assert_eq!(e.next_departure(), Some(51_200));
        assert!(e.take(51_199).is_none());
        assert_eq!(e.take(51_200).map(|q| q.prio), Some(Some(3)));
        // A PAUSE stops everything, frames that are not UDP too.
        e.pause(&MacControlRepr::Pause { quanta: 100 }, 60_000);
        let mut tcp = frame(1, 2, Ecn::NotEct, 100);
        tcp[14 + 9] = 6;
        e.offer(60_000, tcp, 0, pfc, &m, &mut rng);
        assert!(e.take(60_000).is_none());
        assert_eq!(e.counters.pause_received, 2);
    }

    #[test]
    fn pause_quanta_count_at_the_links_speed_not_the_drain_rate() {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let pfc = irn_wire::mac_control::PfcRepr::single(3, 100);
        let off = per_queue(Mode::Off, 1 << 20);
        // Draining at 300 Mb/s over a 10 Gb/s link: 100 quanta are 5.12 µs of the link's
        // time, not the 170.7 µs they would be at the drain rate.
        for (e, until) in [
            (Egress::new("p", 300_000_000, 1514), 170_666),
            (
                Egress::new("p", 300_000_000, 1514).with_pause_rate(10_000_000_000),
                5_120,
            ),
        ] {
            let mut e = e;
            e.offer(0, with_dscp(26, 1000), 0, &off, &m, &mut rng);
            e.pause(&MacControlRepr::Pfc(pfc), 0);
            assert_eq!(e.next_departure(), Some(until));
        }
    }

    /// Serves an egress holding `n` frames of `len` bytes at each of DSCPs 24 (priority 3)
    /// and 0 (priority 0) for as long as both have frames; returns how many of priority 3's
    /// left, and checks that every frame leaves.
    fn serve_two_priorities(mut e: Egress, n: usize, pause_prio3: bool) -> usize {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let off = per_queue(Mode::Off, 1 << 20);
        for _ in 0..n {
            for dscp in [24, 0] {
                let (v, _) = e.offer(0, with_dscp(dscp, 1000), 0, &off, &m, &mut rng);
                assert_eq!(v, Verdict::Queued);
            }
        }
        if pause_prio3 {
            let pfc = irn_wire::mac_control::PfcRepr::single(3, u16::MAX);
            e.pause(&MacControlRepr::Pfc(pfc), 0);
        }
        let (mut p3, mut out) = (0, Vec::new());
        while let Some(t) = e.next_departure() {
            let q = e.take(t).expect("due");
            out.push(q.prio);
            if out.len() <= n {
                p3 += usize::from(q.prio == Some(3));
            }
        }
        // Without a pause everything leaves; with one, priority 3 waits for it.
        if !pause_prio3 {
            assert_eq!(out.len(), 2 * n);
        }
        p3
    }

    #[test]
    fn dwrr_shares_a_port_by_weight_where_strict_priority_starves_the_lower_class() {
        let egress = || Egress::new("p", 1_000_000_000, 1514);
        // Strict: priority 3 takes the wire until it has nothing left.
        assert_eq!(serve_two_priorities(egress(), 400, false), 400);
        // Priority 0 weighted 3, priority 3 weighted 1: of the first 400 frames, while both
        // are backlogged, a quarter are priority 3's, whatever their priorities' order.
        let mut w = [0; 8];
        (w[0], w[3]) = (3, 1);
        let p3 = serve_two_priorities(egress().with_dwrr(&w), 400, false);
        assert!((95..=105).contains(&p3), "{p3} of 400");
        // Equal weights: half each.
        (w[0], w[3]) = (1, 1);
        let p3 = serve_two_priorities(egress().with_dwrr(&w), 400, false);
        assert!((195..=205).contains(&p3), "{p3} of 400");
        // A strict priority among weighted ones still goes first.
        (w[0], w[3]) = (1, 0);
        assert_eq!(
            serve_two_priorities(egress().with_dwrr(&w), 400, false),
            400
        );
        // A paused priority gives its turns away instead of holding the wire.
        (w[0], w[3]) = (1, 3);
        assert_eq!(serve_two_priorities(egress().with_dwrr(&w), 400, true), 0);
    }

    /// `frame` with an 802.1Q tag of priority `pcp` (VLAN 0: a priority tag) after its
    /// addresses.
    fn tagged(frame: &[u8], pcp: u8) -> Vec<u8> {
        let tci = u16::from(pcp) << 13;
        [
            &frame[..12],
            &[0x81, 0x00],
            &tci.to_be_bytes()[..],
            &frame[12..],
        ]
        .concat()
    }

    #[test]
    fn trust_reads_the_priority_from_the_tag_or_the_dscp_and_a_routed_port_strips_the_tag() {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let pfc = &per_queue(Mode::Pfc(1 << 3), 100_000);
        // DSCP 26 (priority 3) tagged PCP 5, and an untagged DSCP 26 frame.
        let tagged5 = tagged(&with_dscp(26, 1000), 5);
        assert_eq!((is_tagged(&tagged5), pcp_of(&tagged5)), (true, Some(5)));
        assert_eq!(pcp_of(&with_dscp(26, 1000)), None);
        let mut prio = |trust, f: &Vec<u8>| {
            let mut e = Egress::new("p", 1_000_000_000, 1514).with_trust(trust);
            e.offer(0, f.clone(), 0, pfc, &m, &mut rng).1
        };
        assert_eq!(prio(Trust::Dscp, &tagged5), Some(3));
        assert_eq!(prio(Trust::Pcp, &tagged5), Some(5));
        // Untagged, a switch that trusts PCP gives the port's default, priority 0.
        assert_eq!(prio(Trust::Pcp, &with_dscp(26, 1000)), Some(0));
        assert_eq!(prio(Trust::Dscp, &with_dscp(26, 1000)), Some(3));
        // A full-size frame with a tag is 4 bytes past the MTU's and still fits.
        let big = tagged(&with_dscp(26, 1514), 3);
        assert_eq!(prio(Trust::Pcp, &big), Some(3));
        let mut e = Egress::new("p", 1_000_000_000, 1514);
        assert_eq!(
            e.offer(0, tagged(&big, 3), 0, pfc, &m, &mut rng).0,
            Verdict::Oversize
        );
        // Routed: the priority is read from the tag as it came, the frame leaves without it,
        // DSCP and all else intact, and the ingress is released by what it counted.
        let mut e = Egress::new("p", 1_000_000_000, 1514)
            .with_trust(Trust::Pcp)
            .routed(true);
        assert_eq!(
            e.offer(0, tagged5.clone(), 2, pfc, &m, &mut rng),
            (Verdict::Queued, Some(5))
        );
        assert_eq!(e.queued_bytes(), 1000);
        let q = e.take(0).expect("queued");
        assert_eq!(q.frame, with_dscp(26, 1000));
        assert_eq!((q.prio, q.from, q.arrived_len), (Some(5), 2, 1004));
        assert_eq!(e.counters.tags_stripped, 1);
        // A bridged port keeps the tag.
        let mut e = Egress::new("p", 1_000_000_000, 1514).with_trust(Trust::Pcp);
        e.offer(0, tagged5.clone(), 0, pfc, &m, &mut rng);
        let q = e.take(0).expect("queued");
        assert_eq!((q.frame, q.arrived_len), (tagged5, 1004));
        assert_eq!(e.counters.tags_stripped, 0);
    }

    #[test]
    fn a_tagged_frame_is_marked_in_its_own_ip_header() {
        let m = marking(EcnMode::Threshold, 0, 0, 1.0);
        let mut rng = Rng::new(1);
        let off = per_queue(Mode::Off, 100_000);
        for routed in [false, true] {
            let mut e = Egress::new("p", 1_000_000_000, 1514).routed(routed);
            let f = tagged(&frame(1, 2, Ecn::Ect0, 1000), 3);
            e.offer(0, f.clone(), 0, &off, &m, &mut rng);
            // The second joins a queue of 1 000 bytes, past K = 0: marked.
            assert_eq!(e.offer(0, f, 0, &off, &m, &mut rng).0, Verdict::Marked);
            let _ = e.take(0);
            let q = e.take(u64::MAX / 2).expect("queued");
            let at = if routed { 14 } else { 18 };
            let ip = Ipv4Packet::new_checked(&q.frame[at..]).expect("IPv4 where it should be");
            assert_eq!(ip.ecn(), Ecn::Ce);
            assert!(ip.verify_checksum(), "routed {routed}");
        }
    }
}
