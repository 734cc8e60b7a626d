//! The real-host side of the Dynamic RDMA Protocol (SPEC T10, seed 003): what `irn drp` wraps
//! around [`irn_transport::drp::DrpEndpoint`] — the wall clock as the endpoint's time, a raw
//! Ethernet link ([`crate::packet::PacketSocket`]) with an optional pcap capture, and loss drawn
//! per frame so that runs of the two modes meet the same losses ([`Draws`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

use irn_transport::drp::DrpEndpoint;
use irn_transport::rng::{mix, Rng};
use irn_transport::Time;
use irn_wire::drp::{Drp, DrpRepr, CTRL_INDIRECT};
use irn_wire::ethernet::MacAddr;

use crate::packet::PacketSocket;

/// DRP's EtherType (seed 003 §2.1: from the experimental range 0x0101–0x01FF).
pub const ETHERTYPE_DRP: u16 = 0x01ff;

/// The wall clock as the endpoint's time.
pub struct Clock(Instant);
impl Clock {
    /// Starts the clock at zero.
    pub fn start() -> Clock {
        Clock(Instant::now())
    }
    /// Time since the start.
    pub fn now(&self) -> Time {
        Time::from_picos(self.0.elapsed().as_nanos() as u64 * 1000)
    }
    /// How long until `t` (zero if past).
    pub fn until(&self, t: Time) -> Duration {
        Duration::from_nanos(t.since(self.now()).as_picos() / 1000)
    }
}

/// Draws decided by *what* they are about, not by when they are drawn: the k-th transmission
/// of a given frame (TID, kind, SN, ACKN — not the MODE bit) is lost or not, and the k-th
/// registration of a given TID fails or not, the same way in every run with the same seed. So a
/// traditional and a dynamic run lose the same frames and fail the same registrations (common
/// random numbers, as in the simulator), and their difference is the method's.
#[derive(Debug)]
pub struct Draws {
    seed: u64,
    seen: BTreeMap<u64, u64>,
}

impl Draws {
    /// Draws from stream `stream` of `seed`.
    pub fn new(seed: u64, stream: u64) -> Draws {
        Draws {
            seed: mix(seed ^ mix(stream)),
            seen: BTreeMap::new(),
        }
    }

    /// Whether occurrence k of `ident` falls below probability `p`.
    pub fn chance(&mut self, ident: u64, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        let key = mix(self.seed ^ ident);
        let k = self.seen.entry(key).or_insert(0);
        *k += 1;
        let h = mix(key ^ mix(*k));
        ((h >> 11) as f64) / ((1u64 << 53) as f64) < p
    }
}

/// A frame's identity for [`Draws`]: its header without the MODE bit, with its TID counted from
/// `base` (the first TID of the exchange), so that runs whose TIDs start elsewhere — `irn drp`
/// starts each run at a random TID — still meet the same losses.
pub fn frame_ident(drp: &[u8], base: u32) -> u64 {
    match Drp::new_checked(drp)
        .ok()
        .and_then(|v| DrpRepr::parse(&v).ok())
    {
        Some(r) => mix(u64::from(r.tid.wrapping_sub(base))
            ^ mix(u64::from(r.control & !CTRL_INDIRECT) << 56 | u64::from(r.sn))
            ^ mix(u64::from(r.ackn) | 1 << 40)),
        None => 0,
    }
}

/// The socket, the capture and this end's loss.
pub struct DrpLink {
    sock: PacketSocket,
    pcap: Option<PcapWriter<BufWriter<File>>>,
    loss: f64,
    draws: Draws,
    /// Per peer, the TID of the first frame sent to it: the origin of [`frame_ident`]'s TIDs
    /// (an initiator's first frame is its first request; a responder's, its reply to it).
    bases: BTreeMap<[u8; 6], u32>,
    frame: Vec<u8>,
    dropped: u64,
}

impl std::fmt::Debug for DrpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrpLink")
            .field("sock", &self.sock)
            .field("loss", &self.loss)
            .field("capturing", &self.pcap.is_some())
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl DrpLink {
    /// A link on `sock` that drops each frame it sends with probability `loss` (drawn per frame
    /// from `seed`) and captures every frame to `pcap` if given.
    pub fn new(sock: PacketSocket, pcap: Option<&Path>, loss: f64, seed: u64) -> io::Result<Self> {
        let pcap = match pcap {
            None => None,
            Some(p) => {
                let f = BufWriter::new(File::create(p)?);
                let header = PcapHeader {
                    datalink: DataLink::ETHERNET,
                    snaplen: 65535,
                    ..PcapHeader::default()
                };
                Some(PcapWriter::with_header(f, header).map_err(io::Error::other)?)
            }
        };
        Ok(DrpLink {
            sock,
            pcap,
            loss,
            draws: Draws::new(seed, 1),
            bases: BTreeMap::new(),
            frame: Vec::with_capacity(2048),
            dropped: 0,
        })
    }

    /// The socket.
    pub fn sock(&self) -> &PacketSocket {
        &self.sock
    }

    /// Frames not sent because of `loss`.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Appends a frame to the capture, if there is one.
    pub fn capture(&mut self, frame: &[u8]) {
        if let Some(w) = self.pcap.as_mut() {
            let ts = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or(Duration::ZERO);
            let _ = w.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame));
        }
    }

    /// Sends everything `ep` has for `peer`.
    pub fn flush(&mut self, ep: &mut DrpEndpoint, peer: MacAddr, now: Time) -> io::Result<()> {
        let mut drp = Vec::new();
        while ep.poll_transmit(now, &mut drp) {
            let tid = Drp::new_checked(&drp[..]).map_or(0, |v| v.tid());
            let base = *self.bases.entry(peer.0).or_insert(tid);
            if self.draws.chance(frame_ident(&drp, base), self.loss) {
                self.dropped += 1;
                continue;
            }
            self.frame.clear();
            self.frame.extend_from_slice(&peer.0);
            self.frame.extend_from_slice(&self.sock.mac().0);
            self.frame.extend_from_slice(&ETHERTYPE_DRP.to_be_bytes());
            self.frame.extend_from_slice(&drp);
            let frame = std::mem::take(&mut self.frame);
            let sent = self.sock.send(&frame);
            self.capture(&frame);
            self.frame = frame;
            sent?;
        }
        Ok(())
    }
}

/// Fills `buf` with the bytes of stream `stream` of `seed` (a transfer's data).
pub fn fill_seeded(buf: &mut [u8], seed: u64, stream: u64) {
    let mut rng = Rng::stream(seed, stream);
    for chunk in buf.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_depend_on_the_frame_and_its_occurrence_not_the_order() {
        let mut a = Draws::new(7, 1);
        let mut b = Draws::new(7, 1);
        let xs: Vec<bool> = (0..1000).map(|i| a.chance(i % 50, 0.3)).collect();
        // Interleave another identity into b's draws: the first identity's outcomes are the same.
        let ys: Vec<bool> = (0..1000)
            .map(|i| {
                b.chance(9999, 0.3);
                b.chance(i % 50, 0.3)
            })
            .collect();
        assert_eq!(xs, ys);
        let hits = xs.iter().filter(|&&x| x).count();
        assert!((200..400).contains(&hits), "{hits}");
        assert!(!a.chance(1, 0.0));
    }

    #[test]
    fn frame_identity_ignores_the_mode_bit() {
        let mut f = [0u8; 36];
        let r = DrpRepr {
            control: irn_wire::drp::CTRL_DATA | irn_wire::drp::CTRL_WRITE,
            tid: 5,
            sn: 9,
            ..DrpRepr::default()
        };
        r.emit(&mut f).expect("emit");
        let direct = frame_ident(&f, 0);
        DrpRepr {
            control: r.control | CTRL_INDIRECT,
            ..r
        }
        .emit(&mut f)
        .expect("emit");
        assert_eq!(frame_ident(&f, 0), direct);
        DrpRepr { sn: 10, ..r }.emit(&mut f).expect("emit");
        assert_ne!(frame_ident(&f, 0), direct);
        // The same transfer of a run whose TIDs start 1000 later.
        DrpRepr { tid: 1005, ..r }.emit(&mut f).expect("emit");
        assert_eq!(frame_ident(&f, 1000), direct);
    }
}
