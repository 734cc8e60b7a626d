//! An output-queued Ethernet switch in user space (`irn switch` runs it), with the simulator's ECN
//! marking at each egress — a congested switch port for hosts whose kernel has no marking
//! queue discipline (no `red`, `fq_codel`, …), so that congestion control can be tried on real
//! packets through a real bottleneck.
//!
//! Each port ([`Options::ports`], `--port`) is an interface (a veth end, a NIC) opened as a packet socket
//! ([`PacketSocket::open_port`]): every frame it receives is taken, whatever its destination.
//! Frames are switched as a learning bridge does (IEEE 802.1D): the source MAC is remembered
//! against its port; a frame to a known unicast MAC goes to that port (to none if that is the
//! port it came from), one to a group or unknown address to every other port.
//!
//! Every egress drains at `--rate` bits per second (a frame occupies the wire for its length
//! plus the 4-byte FCS; preamble and inter-frame gap are not counted, as in the simulator)
//! from two FIFOs of at most `--buffer` bytes each: one for UDP (RoCEv2, to port 4791 or to
//! wherever an irn device listens) and one, served first, for everything else — ARP and the
//! TCP of `irn perf`'s set-up exchange, kept apart from the RDMA class as production networks
//! keep them ([`Class`]). A frame that would queue past its class's buffer is dropped. An
//! ECN-capable IPv4 or IPv6 packet (ECT(0) or ECT(1)) joining a queue of `q` bytes is marked
//! CE by the rule the simulator's switches use ([`irn_sim::net::Marking`]): RED
//! between `--kmin` and `--kmax` with probability up to `--pmax` (DCQCN's marking, Zhu et al.,
//! SIGCOMM 2015 §3), or every packet above `--kmin` (DCTCP's, RFC 8257 §3.1). Marking changes
//! the ECN bits and the IPv4 header checksum only: the ICRC treats both as ones (RoCEv2 annex
//! A17.8.1) and the UDP checksum does not cover them, so a marked RoCEv2 packet stays valid.
//! Packets that are not ECN-capable are never marked, and dropped only when the buffer is
//! full.
//!
//! Once every port's socket is open the switch says so on standard error (`irn switch:
//! forwarding between N ports (…)`); what reaches a port before then is lost. It stops after
//! `--duration` seconds, or once no frame has arrived for `--idle`
//! seconds and every queue has drained; it then returns its counters per port ([`Report`],
//! which `irn switch` writes as JSON to `--json FILE` or standard output). The egress pacing is
//! a user-space timer: a wake-up that comes late lets out what accumulated, at most
//! [`MAX_LAG`] of it, as one burst.
//!
//! Frames are forwarded as the kernel hands them over, so a sender on the same machine must
//! not offload checksums or segmentation to its link (`ethtool -K DEV tx off`): otherwise its
//! frames reach the switch with partial checksums, or as 64 KB super-frames larger than any
//! port's MTU (counted as `oversize` and dropped).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

use irn_sim::config::{EcnMode, SwitchConfig};
use irn_sim::net::Marking;
use irn_transport::rng::Rng;
use irn_verbs::packet::{wait_any, PacketSocket};
use irn_wire::ethernet::EtherType;
use irn_wire::{Ecn, Ipv4Packet, Ipv6Packet};

/// Options of `irn switch`.
/// A rate as `--rate` takes it — `500m`, `10g`, `1000000` — in bits per second.
pub fn parse_rate(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("bit")
        .or(t.strip_suffix("bps"))
        .unwrap_or(&t);
    let (num, mult) = match t.as_bytes().last() {
        Some(b'k') => (&t[..t.len() - 1], 1e3),
        Some(b'm') => (&t[..t.len() - 1], 1e6),
        Some(b'g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v * mult >= 1.0 && v * mult <= 1e13 => Ok((v * mult) as u64),
        _ => Err(format!(
            "a rate in bits per second (e.g. 500m, 10g), from 1 b/s to 10 Tb/s, not {s:?}"
        )),
    }
}

/// An ECN marking as `--ecn` takes it: `off`, `red` (DCQCN's) or `threshold` (DCTCP's).
pub fn parse_ecn(s: &str) -> std::result::Result<EcnMode, String> {
    match s {
        "off" => Ok(EcnMode::Off),
        "red" => Ok(EcnMode::Red),
        "threshold" => Ok(EcnMode::Threshold),
        _ => Err(format!("off, red or threshold, not {s:?}")),
    }
}

/// How far behind its schedule an egress may catch up in one burst after a late wake-up.
pub const MAX_LAG: Duration = Duration::from_micros(200);

/// The FCS a frame carries on the wire and a packet socket does not show.
const FCS: u64 = 4;

/// Counters of one port; `dropped`, `marked` and `peak_queue_bytes` are its egress's.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct PortCounters {
    /// The interface.
    pub port: String,
    /// Frames received on the port.
    pub rx_frames: u64,
    /// Their bytes (Ethernet header onward, no FCS).
    pub rx_bytes: u64,
    /// Frames sent out of the port.
    pub tx_frames: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames dropped at this egress: their class's buffer was full.
    pub dropped: u64,
    /// ECN-capable packets marked CE at this egress.
    pub marked: u64,
    /// Frames larger than this port's MTU allows (an offloaded super-frame): dropped.
    pub oversize: u64,
    /// The longest a queue of this egress has been, bytes.
    pub peak_queue_bytes: u64,
    /// Frames the kernel dropped before the switch read them (the socket's receive buffer
    /// was full).
    pub kernel_drops: u64,
    /// Sends the kernel refused.
    pub tx_errors: u64,
    /// Receive errors the socket reported (a link going down): counted, not fatal.
    pub rx_errors: u64,
    /// When the port sent its first and its last frame, seconds since the switch started
    /// (what a goodput over the port's busy time divides by); `null` if it sent none.
    pub first_tx_at: Option<f64>,
    /// See `first_tx_at`.
    pub last_tx_at: Option<f64>,
}

/// What became of a frame offered to an egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Queued as it was.
    Queued,
    /// Queued, marked CE.
    Marked,
    /// Dropped: the buffer was full.
    Dropped,
    /// Dropped: longer than the port can send.
    Oversize,
}

/// A frame's traffic class at an egress: UDP (RoCEv2 — to port 4791 from an RDMA NIC or rxe,
/// to whatever port an irn device listens on) or everything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// UDP datagrams: the RDMA class the buffer, the marking and the drops are about.
    Rdma = 0,
    /// The rest (ARP, the TCP of an out-of-band set-up exchange, …): a queue of its own,
    /// served first, as a production network keeps RDMA in a traffic class apart from the
    /// control traffic it depends on (seed 001 §2) — a dropped TCP SYN would otherwise stall
    /// a connection for the kernel's one-second SYN timeout.
    Other = 1,
}

impl Class {
    /// The class of an Ethernet frame (the switch reads it with the rest of the IP header,
    /// [`Class::of_ip`]).
    #[cfg(test)]
    fn of(frame: &[u8]) -> Class {
        Class::of_ip(ip_info(frame))
    }

    /// The class of a frame whose IP header (if any) reads `ip`.
    fn of_ip(ip: Option<IpInfo>) -> Class {
        match ip {
            Some(ip) if ip.udp => Class::Rdma,
            _ => Class::Other,
        }
    }
}

/// One output port's queues and pacer, without I/O: time is nanoseconds since the switch
/// started. Each class has a FIFO of `buffer` bytes; the other class's queue is served
/// first; the port's rate is shared.
#[derive(Debug)]
pub struct Egress {
    queues: [VecDeque<Vec<u8>>; 2],
    bytes: [u64; 2],
    buffer: u64,
    /// Largest frame the port sends (its MTU plus the Ethernet header).
    max_frame: usize,
    rate_bps: u64,
    /// When the wire is free for the next frame.
    free_at: u64,
    /// Counters (the switch fills in the receive side).
    pub counters: PortCounters,
}

impl Egress {
    /// An empty egress of `buffer` bytes per class at `rate_bps`, for frames up to
    /// `max_frame` bytes.
    pub fn new(port: &str, buffer: u64, rate_bps: u64, max_frame: usize) -> Egress {
        Egress {
            queues: [VecDeque::new(), VecDeque::new()],
            bytes: [0; 2],
            buffer,
            max_frame,
            rate_bps,
            free_at: 0,
            counters: PortCounters {
                port: port.to_string(),
                ..PortCounters::default()
            },
        }
    }

    /// Offers `frame` at `now`: dropped if its class's buffer cannot take it, else marked by
    /// `marking` from the queue it joins (if it is ECN-capable) and queued. A frame that finds
    /// the egress empty starts its wire time no earlier than `now`.
    pub fn offer(
        &mut self,
        now: u64,
        mut frame: Vec<u8>,
        marking: &Marking,
        rng: &mut Rng,
    ) -> Verdict {
        let len = frame.len() as u64;
        if frame.len() > self.max_frame {
            self.counters.oversize += 1;
            return Verdict::Oversize;
        }
        // The IP header is read once: for the class, and for the mark.
        let ip = ip_info(&frame);
        let c = Class::of_ip(ip) as usize;
        let q = self.bytes[c];
        if q + len > self.buffer {
            self.counters.dropped += 1;
            return Verdict::Dropped;
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
        self.queues[c].push_back(frame);
        verdict
    }

    /// The next frame if the wire is free for it at `now` (the other class's first). A late
    /// wake-up may send what fell due in the last [`MAX_LAG`] back to back.
    pub fn take(&mut self, now: u64) -> Option<Vec<u8>> {
        if self.free_at > now {
            return None;
        }
        let c = [Class::Other as usize, Class::Rdma as usize]
            .into_iter()
            .find(|&c| !self.queues[c].is_empty())?;
        let frame = self.queues[c].pop_front()?;
        let len = frame.len() as u64;
        self.bytes[c] -= len;
        let lag = MAX_LAG.as_nanos() as u64;
        let start = self.free_at.max(now.saturating_sub(lag));
        let wire_ns = ((len + FCS) * 8).saturating_mul(1_000_000_000) / self.rate_bps;
        self.free_at = start + wire_ns.max(1);
        Some(frame)
    }

    /// When the next queued frame may leave, if one is queued.
    pub fn next_departure(&self) -> Option<u64> {
        (self.queued_bytes() > 0).then_some(self.free_at)
    }

    /// Bytes queued, both classes.
    pub fn queued_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }
}

/// What the switch reads of an untagged IPv4 or IPv6 frame.
#[derive(Debug, Clone, Copy)]
struct IpInfo {
    v4: bool,
    /// It carries UDP.
    udp: bool,
    ecn: Ecn,
}

/// The IP header of a frame, if it is an untagged IPv4 or IPv6 one whose header is whole.
fn ip_info(frame: &[u8]) -> Option<IpInfo> {
    const UDP: u8 = 17;
    let t = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = &frame[14..];
    if t == u16::from(EtherType::Ipv4) {
        let p = Ipv4Packet::new_checked(ip).ok()?;
        Some(IpInfo {
            v4: true,
            udp: p.protocol() == UDP,
            ecn: p.ecn(),
        })
    } else if t == u16::from(EtherType::Ipv6) {
        let p = Ipv6Packet::new_checked(ip).ok()?;
        Some(IpInfo {
            v4: false,
            udp: p.next_header() == UDP,
            ecn: p.ecn(),
        })
    } else {
        None
    }
}

/// Marks CE the IP packet of a frame whose header `ip_info` read as `ip`.
fn mark_ce(frame: &mut [u8], ip: IpInfo) {
    // `ip_info` checked the header: it is whole.
    if ip.v4 {
        Ipv4Packet::new_unchecked(&mut frame[14..]).set_ecn(Ecn::Ce);
    } else {
        Ipv6Packet::new_unchecked(&mut frame[14..]).set_ecn(Ecn::Ce);
    }
}

/// The forwarding table of a learning bridge: which port each source MAC was seen on.
#[derive(Debug, Default)]
pub struct Bridge {
    table: BTreeMap<[u8; 6], usize>,
}

impl Bridge {
    /// The ports a frame that came in on `from` goes out of (after learning its source).
    pub fn route(&mut self, frame: &[u8], from: usize, ports: usize) -> Vec<usize> {
        if frame.len() < 14 {
            return Vec::new();
        }
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[..6]);
        let mut src = [0u8; 6];
        src.copy_from_slice(&frame[6..12]);
        if src[0] & 1 == 0 {
            self.table.insert(src, from);
        }
        match self.table.get(&dst) {
            Some(&p) if dst[0] & 1 == 0 => {
                if p == from {
                    Vec::new()
                } else {
                    vec![p]
                }
            }
            _ => (0..ports).filter(|&p| p != from).collect(),
        }
    }
}

/// What `irn switch` writes at exit.
/// What a run of the switch did: its settings and every port's counters (written as JSON).
#[derive(Debug, Serialize)]
pub struct Report {
    /// Every egress's rate, bits per second.
    pub rate_bps: u64,
    /// Every egress's buffer per class, bytes.
    pub buffer_bytes: u64,
    /// The ECN marking.
    pub ecn: EcnMode,
    /// The marking's K_min, bytes.
    pub kmin_bytes: u64,
    /// RED's K_max, bytes.
    pub kmax_bytes: u64,
    /// RED's P_max.
    pub pmax: f64,
    /// How long the switch ran.
    pub seconds: f64,
    /// Per port, in the order given.
    pub ports: Vec<PortCounters>,
}

/// How to run the switch (`irn switch`'s flags, which the errors name).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The interfaces to switch between (`--port`, two or more).
    pub ports: Vec<String>,
    /// Egress rate of every port, bits per second (`--rate`).
    pub rate_bps: u64,
    /// Egress buffer of every port and class, bytes (`--buffer`).
    pub buffer: u64,
    /// ECN marking at every egress (`--ecn`).
    pub ecn: EcnMode,
    /// Queue length from which packets are marked, bytes (`--kmin`).
    pub kmin: u64,
    /// RED: queue length from which every ECN-capable packet is marked, bytes (`--kmax`).
    pub kmax: u64,
    /// RED: the marking probability just below `kmax` (`--pmax`).
    pub pmax: f64,
    /// Seed of RED's draws (`--seed`).
    pub seed: u64,
    /// Stop after this many seconds (`--duration`).
    pub duration: Option<f64>,
    /// Stop once no frame has arrived for this many seconds and every queue is empty
    /// (`--idle`).
    pub idle: Option<f64>,
}

/// Why the switch could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option that cannot mean anything, named by its flag.
    #[error("{0}")]
    Option(String),
    /// A port's packet socket could not be opened.
    #[error("--port {port}: {source}")]
    Port {
        /// The interface.
        port: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for frames failed.
    #[error("poll: {0}")]
    Poll(std::io::Error),
}

impl Options {
    /// Refuses options that cannot mean anything, naming the flag.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Option(m));
        if self.ports.len() < 2 {
            return bad("--port: a switch needs two ports or more".into());
        }
        for (i, p) in self.ports.iter().enumerate() {
            if self.ports[..i].contains(p) {
                return bad(format!("--port: {p} is named twice"));
            }
        }
        if self.buffer == 0 {
            return bad("--buffer: must be at least one byte".into());
        }
        if !(0.0..=1.0).contains(&self.pmax) {
            return bad(format!(
                "--pmax: a probability, from 0 to 1, not {}",
                self.pmax
            ));
        }
        if self.ecn == EcnMode::Red && self.kmin > self.kmax {
            return bad(format!(
                "--kmin ({}) is above --kmax ({}): RED marks between them",
                self.kmin, self.kmax
            ));
        }
        for (flag, v) in [("--duration", self.duration), ("--idle", self.idle)] {
            if v.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
                return bad(format!("{flag}: a positive number of seconds"));
            }
        }
        Ok(())
    }
}

/// Runs the switch until `--duration` or `--idle` stops it, and returns what it did.
pub fn run(args: &Options) -> Result<Report, Error> {
    args.check()?;
    let socks: Vec<PacketSocket> = args
        .ports
        .iter()
        .map(|p| {
            PacketSocket::open_port(p).map_err(|source| Error::Port {
                port: p.clone(),
                source,
            })
        })
        .collect::<Result<_, _>>()?;
    // Frames that reach a port before its socket is open are lost, and a TCP SYN among them
    // is resent a second later: whoever starts hosts behind the switch waits for this line.
    eprintln!(
        "irn switch: forwarding between {} ports ({})",
        args.ports.len(),
        args.ports.join(", ")
    );
    let marking = Marking::new(&SwitchConfig {
        ecn: args.ecn,
        ecn_kmin_bytes: args.kmin,
        ecn_kmax_bytes: args.kmax,
        ecn_pmax: args.pmax,
        ..SwitchConfig::default()
    });
    let mut rng = Rng::new(args.seed);
    let mut egress: Vec<Egress> = socks
        .iter()
        .zip(&args.ports)
        .map(|(s, p)| Egress::new(p, args.buffer, args.rate_bps, s.mtu() + 14))
        .collect();
    let mut bridge = Bridge::default();
    let start = Instant::now();
    let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
    let mut last_rx: Option<u64> = None;
    let mut buf = vec![0u8; 65_536];
    loop {
        let now = ns(Instant::now());
        for (e, s) in egress.iter_mut().zip(&socks) {
            while let Some(frame) = e.take(now) {
                match s.send(&frame) {
                    Ok(()) => {
                        let c = &mut e.counters;
                        c.tx_frames += 1;
                        c.tx_bytes += frame.len() as u64;
                        let at = now as f64 / 1e9;
                        c.first_tx_at.get_or_insert(at);
                        c.last_tx_at = Some(at);
                    }
                    Err(_) => e.counters.tx_errors += 1,
                }
            }
        }
        if args.duration.is_some_and(|d| now as f64 >= d * 1e9) {
            break;
        }
        let drained = egress.iter().all(|e| e.queued_bytes() == 0);
        if let (Some(idle), Some(last)) = (args.idle, last_rx) {
            if drained && (now - last) as f64 >= idle * 1e9 {
                break;
            }
        }
        let wait_ns = egress
            .iter()
            .filter_map(Egress::next_departure)
            .min()
            .map_or(50_000_000, |t| t.saturating_sub(now))
            .min(50_000_000);
        let ready = wait_any(&socks, Duration::from_nanos(wait_ns)).map_err(Error::Poll)?;
        for (from, _) in ready.iter().enumerate().filter(|(_, r)| **r) {
            // A bounded batch per port, so that one busy port does not starve the pacer.
            for _ in 0..64 {
                let n = match socks[from].try_recv(&mut buf) {
                    Ok(Some(n)) => n,
                    Ok(None) => break,
                    // The port's link went away, or an error is pending on the socket: counted;
                    // the network cannot stop the switch.
                    Err(_) => {
                        egress[from].counters.rx_errors += 1;
                        break;
                    }
                };
                let at = ns(Instant::now());
                last_rx = Some(at);
                egress[from].counters.rx_frames += 1;
                egress[from].counters.rx_bytes += n as u64;
                let frame = &buf[..n];
                for to in bridge.route(frame, from, socks.len()) {
                    egress[to].offer(at, frame.to_vec(), &marking, &mut rng);
                }
            }
        }
    }
    for (e, s) in egress.iter_mut().zip(&socks) {
        e.counters.kernel_drops = s.kernel_drops().unwrap_or(0);
    }
    Ok(Report {
        rate_bps: args.rate_bps,
        buffer_bytes: args.buffer,
        ecn: args.ecn,
        kmin_bytes: args.kmin,
        kmax_bytes: args.kmax,
        pmax: args.pmax,
        seconds: start.elapsed().as_secs_f64(),
        ports: egress.into_iter().map(|e| e.counters).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: u8, src: u8, ecn: Ecn, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = irn_wire::Ipv4Repr {
            src: "10.0.0.1".parse().expect("addr"),
            dst: "10.0.0.2".parse().expect("addr"),
            protocol: 17,
            dscp: 0,
            ecn,
            ident: 7,
            dont_frag: true,
            ttl: 64,
            payload_len: len - 14 - 20,
        };
        ip.emit(&mut f[14..]).expect("emit");
        // UDP to port 4791: RoCEv2.
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
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
        let mut e = Egress::new("p", 5_000, 1_000_000_000, 1514);
        let verdicts: Vec<Verdict> = (0..6)
            .map(|i| {
                let ecn = if i == 3 { Ecn::NotEct } else { Ecn::Ect0 };
                e.offer(0, frame(1, 2, ecn, 1000), &m, &mut rng)
            })
            .collect();
        use Verdict::*;
        // Queues of 0, 1000, 2000 bytes: below K; 3000 (not ECT), 4000: above; then full.
        assert_eq!(verdicts, [Queued, Queued, Queued, Queued, Marked, Dropped]);
        assert_eq!((e.counters.marked, e.counters.dropped), (1, 1));
        assert_eq!(e.counters.peak_queue_bytes, 5_000);
        assert_eq!(e.offer(0, vec![0u8; 1515], &m, &mut rng), Oversize);
        // The marked frame is CE with a valid header checksum; the others are as they came.
        let out: Vec<Vec<u8>> = std::iter::from_fn(|| e.take(u64::MAX / 2)).collect();
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
        // 1000-byte frames at 8.032 Mb/s: one per millisecond (FCS included).
        let mut e = Egress::new("p", 1 << 20, 8_032_000, 1514);
        for _ in 0..100 {
            e.offer(0, frame(1, 2, Ecn::Ect0, 1000), &m, &mut rng);
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
        e.offer(later, frame(1, 2, Ecn::Ect0, 1000), &m, &mut rng);
        e.offer(later, frame(1, 2, Ecn::Ect0, 1000), &m, &mut rng);
        assert!(e.take(later).is_some());
        assert!(e.take(later).is_none(), "one frame's time before the next");
        assert_eq!(e.next_departure(), Some(later + ms));
    }

    #[test]
    fn other_traffic_has_its_own_queue_and_goes_first() {
        let m = marking(EcnMode::Off, 0, 0, 0.0);
        let mut rng = Rng::new(1);
        let mut e = Egress::new("p", 2_000, 1_000_000_000, 1514);
        let roce = frame(1, 2, Ecn::Ect0, 1000);
        let mut tcp = roce.clone();
        tcp[14 + 9] = 6; // protocol TCP
        assert_eq!(
            (Class::of(&roce), Class::of(&tcp)),
            (Class::Rdma, Class::Other)
        );
        // UDP to any port is the RDMA class: an irn device may listen elsewhere than 4791.
        let mut udp = roce.clone();
        udp[36..38].copy_from_slice(&18515u16.to_be_bytes());
        assert_eq!(Class::of(&udp), Class::Rdma);
        assert_eq!(Class::of(&[0u8; 20]), Class::Other);
        // The RoCE queue is full; a TCP segment still finds room, and leaves first.
        for _ in 0..2 {
            assert_eq!(e.offer(0, roce.clone(), &m, &mut rng), Verdict::Queued);
        }
        assert_eq!(e.offer(0, roce.clone(), &m, &mut rng), Verdict::Dropped);
        assert_eq!(e.offer(0, tcp.clone(), &m, &mut rng), Verdict::Queued);
        assert_eq!(e.queued_bytes(), 3_000);
        assert_eq!(e.take(0), Some(tcp));
        assert_eq!(e.take(u64::MAX / 2), Some(roce));
    }

    #[test]
    fn the_bridge_learns_floods_and_filters() {
        let mut b = Bridge::default();
        let f = |dst, src| frame(dst, src, Ecn::NotEct, 60);
        // Unknown destination: every other port.
        assert_eq!(b.route(&f(9, 1), 0, 3), [1, 2]);
        // 1 is on port 0 now: a frame to it goes there only.
        assert_eq!(b.route(&f(1, 9), 2, 3), [0]);
        // 9 learned on port 2; a frame from port 2 to 9 stays there.
        assert_eq!(b.route(&f(9, 5), 2, 3), Vec::<usize>::new());
        // Broadcast floods.
        let mut bc = f(1, 1);
        bc[..6].copy_from_slice(&[0xff; 6]);
        assert_eq!(b.route(&bc, 1, 3), [0, 2]);
        // A runt routes nowhere.
        assert!(b.route(&[0u8; 10], 0, 3).is_empty());
    }

    #[test]
    fn rates_and_bad_options_are_named() {
        assert_eq!(parse_rate("500m"), Ok(500_000_000));
        assert_eq!(parse_rate("10g"), Ok(10_000_000_000));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("64000"), Ok(64_000));
        assert!(parse_rate("fast").is_err() && parse_rate("0").is_err());
        let args = |ports: &[&str], pmax: f64| Options {
            ports: ports.iter().map(|s| s.to_string()).collect(),
            rate_bps: 1_000_000,
            buffer: 1000,
            ecn: EcnMode::Red,
            kmin: 10,
            kmax: 20,
            pmax,
            seed: 1,
            duration: None,
            idle: None,
        };
        let err = |a: Options| a.check().expect_err("refused").to_string();
        assert!(err(args(&["a"], 0.1)).contains("--port"));
        assert!(err(args(&["a", "a"], 0.1)).contains("named twice"));
        assert!(err(args(&["a", "b"], 1.5)).contains("--pmax"));
        assert!(args(&["a", "b"], 0.1).check().is_ok());
    }
}
