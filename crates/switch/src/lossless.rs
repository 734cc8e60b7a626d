//! The switch's lossless side (SPEC N1, N2): priority flow control (IEEE 802.1Qbb) or 802.3x
//! PAUSE (Annex 31B) towards the hosts, without I/O.
//!
//! A frame's priority is its DSCP's top three bits (DSCP-based PFC, seed 001 §3: the switch
//! reads the IP header, so untagged frames keep their priority), or with `--trust pcp` its
//! 802.1Q tag's PCP ([`crate::Egress::with_trust`]). Each ingress port counts the
//! bytes of every lossless priority it has queued at any egress ([`Lossless::queued`]); above
//! the XOFF threshold it sends its upstream a pause for that priority — under PAUSE, for the
//! whole link once all its frames together pass it — and a resume (0 quanta) once it has
//! drained a gap below ([`Lossless::released`]), or once the threshold has risen a gap above
//! it ([`Lossless::resume_below`]: a shared buffer's threshold rises as other queues drain).
//! A pause that must go on is sent again after half its time ([`Lossless::due`]), so that it
//! never lapses while the queue stands. The threshold, which the switch's memory sets
//! ([`crate::mmu`]), leaves headroom for what the link still delivers after the pause
//! leaves; lossless frames are never dropped for a full buffer.

use irn_wire::mac_control::{MacControlRepr, PfcRepr};

/// The shortest interval at which a pause in force is sent again, ns: a pause of a few quanta
/// on a fast link (one quantum is 51 ns at 10 Gb/s) would otherwise be refreshed as fast as the
/// switch can send. Such a pause then lapses between refreshes, as its quanta ask.
pub const MIN_REFRESH_NS: u64 = 10_000;

/// The priority of a frame's DSCP (the usual map, DSCP ÷ 8).
pub fn priority_of_dscp(dscp: u8) -> u8 {
    (dscp >> 3) & 7
}

/// What the switch pauses its upstream with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No flow control: every frame is dropped when its queue is full.
    Off,
    /// PFC on the priorities of the mask (bit `p`: priority `p` is lossless).
    Pfc(u8),
    /// 802.3x PAUSE: every frame lossless, one pause stops the whole link.
    Pause,
}

impl Mode {
    /// How many lossless slots each ingress port counts: its lossless priorities under PFC,
    /// one for the whole link under PAUSE, none without flow control.
    pub fn slots(self) -> u64 {
        match self {
            Mode::Off => 0,
            Mode::Pause => 1,
            Mode::Pfc(mask) => u64::from(mask.count_ones()),
        }
    }

    /// Whether frames of priority `prio` (`None`: not IP) are lossless.
    pub fn lossless(self, prio: Option<u8>) -> bool {
        match (self, prio) {
            (Mode::Off, _) => false,
            (Mode::Pause, _) => true,
            (Mode::Pfc(mask), Some(p)) => mask & (1 << (p & 7)) != 0,
            (Mode::Pfc(_), None) => false,
        }
    }
}

/// One ingress port's lossless state.
#[derive(Debug, Clone, Copy, Default)]
struct Port {
    /// Per priority (under PAUSE, all in slot 0): bytes queued that arrived here.
    held: [u64; 8],
    /// Bit `p`: a pause for priority `p` (slot 0 under PAUSE) is in force upstream.
    xoff: u8,
    /// Per priority: when the pause in force is sent again, ns.
    refresh_at: [u64; 8],
}

/// Every ingress port's lossless state, and the thresholds.
#[derive(Debug, Clone)]
pub struct Lossless {
    mode: Mode,
    /// Resume this far below the threshold.
    gap: u64,
    /// What a pause frame carries.
    quanta: u16,
    /// Per port: the time `quanta` lasts on its link, ns.
    pause_ns: Vec<u64>,
    ports: Vec<Port>,
}

impl Lossless {
    /// Flow control `mode` over ports whose links run at `rates_bps`, resuming `gap` bytes
    /// below the threshold, with pauses of `quanta`.
    pub fn new(mode: Mode, rates_bps: &[u64], gap: u64, quanta: u16) -> Lossless {
        Lossless {
            mode,
            gap,
            quanta,
            pause_ns: rates_bps
                .iter()
                .map(|&r| irn_wire::mac_control::quanta_to_picos(quanta, r) / 1000)
                .collect(),
            ports: vec![Port::default(); rates_bps.len()],
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The slot a frame of priority `prio` counts in: its priority, or the link's (0) under
    /// PAUSE. `None` for a frame that is not lossless.
    fn slot(&self, prio: Option<u8>) -> Option<usize> {
        match self.mode {
            Mode::Pause => Some(0),
            m if m.lossless(prio) => prio.map(|p| usize::from(p & 7)),
            _ => None,
        }
    }

    /// The frame that pauses (`quanta` > 0) or resumes slot `k`'s traffic.
    fn frame(&self, k: usize, quanta: u16) -> MacControlRepr {
        match self.mode {
            Mode::Pause => MacControlRepr::Pause { quanta },
            _ => MacControlRepr::Pfc(PfcRepr::single(k as u8, quanta)),
        }
    }

    /// A frame of `len` bytes and priority `prio` that arrived through `port` was queued at
    /// `now` (ns): the pause to send back out of `port`, if its ingress just crossed `xoff`.
    pub fn queued(
        &mut self,
        port: usize,
        prio: Option<u8>,
        len: u64,
        now: u64,
        xoff: u64,
    ) -> Option<MacControlRepr> {
        let k = self.slot(prio)?;
        let pause_ns = self.pause_ns[port];
        let p = &mut self.ports[port];
        p.held[k] += len;
        if p.xoff & (1 << k) == 0 && p.held[k] > xoff {
            p.xoff |= 1 << k;
            p.refresh_at[k] = now + (pause_ns / 2).max(MIN_REFRESH_NS);
            return Some(self.frame(k, self.quanta));
        }
        None
    }

    /// A frame counted by [`Lossless::queued`] left its egress (sent or discarded): the
    /// resume to send out of `port`, if its ingress just drained a gap below `xoff` or
    /// emptied.
    pub fn released(
        &mut self,
        port: usize,
        prio: Option<u8>,
        len: u64,
        xoff: u64,
    ) -> Option<MacControlRepr> {
        let k = self.slot(prio)?;
        let p = &mut self.ports[port];
        p.held[k] = p.held[k].saturating_sub(len);
        let held = p.held[k];
        if p.xoff & (1 << k) != 0 && (held + self.gap <= xoff || held == 0) {
            p.xoff &= !(1 << k);
            return Some(self.frame(k, 0));
        }
        None
    }

    /// Resumes every paused (port, priority) now a gap below `xoff`, pushing (port, resume)
    /// onto `out`: a threshold that rises (a shared buffer draining elsewhere) releases an
    /// ingress that has not drained itself.
    pub fn resume_below(&mut self, xoff: u64, out: &mut Vec<(usize, MacControlRepr)>) {
        for i in 0..self.ports.len() {
            let p = &mut self.ports[i];
            if p.xoff == 0 {
                continue;
            }
            let mut resumed = 0u8;
            for k in 0..8 {
                if p.xoff & (1 << k) != 0 && p.held[k] + self.gap <= xoff {
                    resumed |= 1 << k;
                }
            }
            p.xoff &= !resumed;
            for k in (0..8).filter(|k| resumed & (1 << k) != 0) {
                out.push((i, self.frame(k, 0)));
            }
        }
    }

    /// Whether a pause is in force anywhere.
    pub fn any_paused(&self) -> bool {
        self.ports.iter().any(|p| p.xoff != 0)
    }

    /// The pauses still in force whose refresh is due at `now`: (port, frame) to send again.
    pub fn due(&mut self, now: u64) -> Vec<(usize, MacControlRepr)> {
        let mut out = Vec::new();
        for (i, p) in self.ports.iter_mut().enumerate() {
            for k in 0..8 {
                if p.xoff & (1 << k) != 0 && p.refresh_at[k] <= now {
                    p.refresh_at[k] = now + (self.pause_ns[i] / 2).max(MIN_REFRESH_NS);
                    out.push((i, k));
                }
            }
        }
        out.into_iter()
            .map(|(i, k)| (i, self.frame(k, self.quanta)))
            .collect()
    }

    /// When the next refresh falls due, ns, if a pause is in force.
    pub fn next_refresh(&self) -> Option<u64> {
        self.ports
            .iter()
            .flat_map(|p| {
                (0..8)
                    .filter(move |&k| p.xoff & (1 << k) != 0)
                    .map(move |k| p.refresh_at[k])
            })
            .min()
    }

    /// Bytes port `port` holds of slot `k` (its priority, or 0 under PAUSE).
    pub fn held(&self, port: usize, k: usize) -> u64 {
        self.ports[port].held[k]
    }
}

/// When the pauses a port's egress received run out, per priority (ns): the egress sends a
/// priority only once its time has passed. 802.3x PAUSE stops every priority and the frames
/// that are not IP as well.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PausedUntil {
    /// Per priority.
    pub prio: [u64; 8],
    /// Every frame (PAUSE).
    pub all: u64,
}

impl PausedUntil {
    /// A MAC control frame arrived at `now` on a link where one quantum lasts
    /// `quantum_ps` picoseconds; a later frame replaces an earlier one's time, 0 quanta
    /// resumes at once.
    pub fn apply(&mut self, frame: &MacControlRepr, now: u64, rate_bps: u64) {
        let until = |q: u16| now + irn_wire::mac_control::quanta_to_picos(q, rate_bps) / 1000;
        match *frame {
            MacControlRepr::Pause { quanta } => self.all = until(quanta),
            MacControlRepr::Pfc(pfc) => {
                for p in 0..8u8 {
                    if let Some(q) = pfc.pause_for(p) {
                        self.prio[usize::from(p)] = until(q);
                    }
                }
            }
            MacControlRepr::Unknown { .. } => {}
        }
    }

    /// Whether a frame of priority `prio` (`None`: not IP) may leave at `now`.
    pub fn may_send(&self, prio: Option<u8>, now: u64) -> bool {
        self.all <= now && prio.is_none_or(|p| self.prio[usize::from(p & 7)] <= now)
    }

    /// When a frame of priority `prio` may leave, at the earliest.
    pub fn until(&self, prio: Option<u8>) -> u64 {
        self.all
            .max(prio.map_or(0, |p| self.prio[usize::from(p & 7)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBPS: u64 = 1_000_000_000;

    #[test]
    fn a_lossless_ingress_pauses_above_xoff_refreshes_and_resumes_a_gap_below() {
        let mut l = Lossless::new(Mode::Pfc(1 << 3), &[GBPS, GBPS], 2_000, u16::MAX);
        const X: u64 = 10_000;
        // Priority 0 is lossy: never counted, never paused.
        assert_eq!(l.queued(0, Some(0), 50_000, 0, X), None);
        assert_eq!(l.queued(0, None, 50_000, 0, X), None);
        assert_eq!(l.queued(0, Some(3), 10_000, 0, X), None);
        let xoff = l.queued(0, Some(3), 1, 0, X);
        assert_eq!(
            xoff,
            Some(MacControlRepr::Pfc(PfcRepr::single(3, u16::MAX)))
        );
        // Once: the pause is in force.
        assert_eq!(l.queued(0, Some(3), 5_000, 0, X), None);
        // 65 535 quanta at 1 Gb/s last 33.55 ms: refreshed after half.
        let half = 33_553_920 / 2;
        assert!(l.due(half - 1).is_empty());
        assert_eq!(l.next_refresh(), Some(half));
        assert_eq!(l.due(half), [(0, xoff.expect("xoff"))]);
        // Drained to the threshold: not yet; a gap below: resume, with 0 quanta.
        assert_eq!(l.released(0, Some(3), 5_001, X), None);
        assert_eq!(l.released(0, Some(3), 1_000, X), None);
        assert_eq!(
            l.released(0, Some(3), 1_000, X),
            Some(MacControlRepr::Pfc(PfcRepr::single(3, 0)))
        );
        assert!(l.due(u64::MAX).is_empty() && l.next_refresh().is_none());
        // The other port is independent.
        assert_eq!(l.held(1, 3), 0);
        // A pause of one quantum at 10 Gb/s (51 ns) is not refreshed every 25 ns.
        let mut short = Lossless::new(Mode::Pfc(1 << 3), &[10 * GBPS], 2_000, 1);
        assert!(short.queued(0, Some(3), 20_000, 0, X).is_some());
        assert_eq!(short.next_refresh(), Some(MIN_REFRESH_NS));
    }

    #[test]
    fn pause_counts_every_frame_of_the_link_and_stops_everything() {
        let mut l = Lossless::new(Mode::Pause, &[GBPS], 100, 100);
        const X: u64 = 1_000;
        assert_eq!(l.queued(0, Some(0), 600, 0, X), None);
        assert_eq!(
            l.queued(0, None, 401, 0, X),
            Some(MacControlRepr::Pause { quanta: 100 })
        );
        assert_eq!(l.held(0, 0), 1_001);
        assert_eq!(
            l.released(0, Some(5), 1_001, X),
            Some(MacControlRepr::Pause { quanta: 0 })
        );
        // The receiving side: a PAUSE stops IP and non-IP frames alike; PFC one priority.
        let mut u = PausedUntil::default();
        u.apply(&MacControlRepr::Pause { quanta: 100 }, 1_000, GBPS);
        // 100 × 512 bits at 1 Gb/s: 51.2 µs.
        assert!(!u.may_send(None, 1_000) && !u.may_send(Some(3), 52_199));
        assert!(u.may_send(Some(3), 52_200) && u.may_send(None, 52_200));
        let mut u = PausedUntil::default();
        u.apply(&MacControlRepr::Pfc(PfcRepr::single(3, 100)), 0, GBPS);
        assert!(!u.may_send(Some(3), 0) && u.may_send(Some(2), 0) && u.may_send(None, 0));
        assert_eq!(u.until(Some(3)), 51_200);
        u.apply(&MacControlRepr::Pfc(PfcRepr::single(3, 0)), 10, GBPS);
        assert!(u.may_send(Some(3), 10));
        assert!(Mode::Pfc(0b1000).lossless(Some(3)) && !Mode::Pfc(0b1000).lossless(None));
        assert_eq!(priority_of_dscp(26), 3);
    }
}
