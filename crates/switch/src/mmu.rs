//! The switch's packet memory, without I/O: what a frame may take of it, and when an ingress
//! pauses its upstream (SPEC N1, N2).
//!
//! Two layouts ([`Buffer`]):
//! - **Per queue** (`--buffer`, the default): every queue of every egress owns `bytes`; a
//!   frame that would queue past them is dropped, and a lossless (port, priority) pauses its
//!   upstream once what it brought in passes a fixed `xoff`, the rest of a queue's buffer
//!   being headroom. Memory is partitioned statically: one congested queue can use no more
//!   than its own share however idle the others are.
//! - **Shared** (`--shared-buffer`): one pool for every queue of the switch, as the shared
//!   memory of a datacenter switch ASIC. Out of it a headroom is reserved for each port's
//!   lossless priorities (one per port under 802.3x PAUSE); the rest is the shared part.
//!   A lossy frame is admitted while the shared part has room for it and its egress queue,
//!   the frame included, holds at most α × what is free of the shared part — the dynamic
//!   threshold of
//!   Choudhury and Hahne ("Dynamic queue length thresholds for shared-memory packet
//!   switches", IEEE/ACM ToN 6(2), 1998), which lets one queue take much of an idle buffer
//!   and shrinks every queue's share as the buffer fills. A lossless (port, priority)
//!   pauses its upstream once it holds α_pfc × the free shared part
//!   ([`irn_sim::net::shared_xoff`], the rule the simulator's shared-buffer switch uses), and
//!   its frames are never dropped: past the shared part they take headroom, and past the
//!   whole pool they are counted as a headroom overflow. This is seed 001's remedy for slow
//!   receivers (§4.4): with dynamic buffer sharing a switch absorbs a queue behind a paused
//!   port locally, where static reservation pauses the upstream and spreads the congestion.
//!
//! [`Mmu::admit`] answers whether a frame may join a queue; [`Mmu::queued`] and
//! [`Mmu::released`] charge and free it (every frame, lossy or not, is memory) and return the
//! pause or resume its ingress now owes upstream ([`crate::lossless`]).

use irn_wire::mac_control::MacControlRepr;

use crate::lossless::{Lossless, Mode};

/// How the switch's memory is laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Buffer {
    /// Every queue of every egress owns `bytes`; a lossless (port, priority) pauses past
    /// `xoff` of them.
    PerQueue {
        /// Bytes per queue.
        bytes: u64,
        /// The pause threshold per (port, priority), bytes.
        xoff: u64,
    },
    /// One pool shared by every queue.
    Shared {
        /// The whole pool, headroom included, bytes.
        bytes: u64,
        /// Headroom reserved per (port, lossless priority), bytes.
        headroom: u64,
        /// The dynamic threshold's α for lossy egress queues.
        alpha: f64,
        /// The dynamic threshold's α at which a lossless ingress pauses.
        pfc_alpha: f64,
    },
}

impl Buffer {
    /// Bytes a shared pool keeps out of its shared part as headroom, for `ports` ports under
    /// flow control `mode`: one headroom per lossless slot of every port (0 per queue).
    pub fn reserved(&self, mode: Mode, ports: usize) -> u64 {
        match *self {
            Buffer::PerQueue { .. } => 0,
            Buffer::Shared { headroom, .. } => headroom * mode.slots() * ports as u64,
        }
    }
}

/// What a frame offered to a queue may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Join the queue.
    Yes,
    /// Join it although there is no room: it is lossless, and the headroom was too small.
    Overflow,
    /// Be dropped.
    No,
}

/// The switch's memory: its layout, what is in use, and the ingress pause state.
#[derive(Debug, Clone)]
pub struct Mmu {
    buffer: Buffer,
    /// Bytes of a shared pool reserved as headroom (0 per queue).
    reserved: u64,
    /// Bytes queued, every egress.
    used: u64,
    /// The most ever queued at once.
    peak: u64,
    lossless: Lossless,
}

impl Mmu {
    /// Memory laid out as `buffer` for a switch whose ports run at `rates_bps`, with flow
    /// control `mode`: a paused ingress resumes `gap` bytes below its threshold, with pauses
    /// of `quanta`.
    pub fn new(buffer: Buffer, mode: Mode, rates_bps: &[u64], gap: u64, quanta: u16) -> Mmu {
        Mmu {
            buffer,
            reserved: buffer.reserved(mode, rates_bps.len()),
            used: 0,
            peak: 0,
            lossless: Lossless::new(mode, rates_bps, gap, quanta),
        }
    }

    /// The flow-control mode.
    pub fn mode(&self) -> Mode {
        self.lossless.mode()
    }

    /// The layout.
    pub fn buffer(&self) -> Buffer {
        self.buffer
    }

    /// Whether a frame of `len` bytes and priority `prio` (`None`: control traffic) may join
    /// a queue holding `queue` bytes.
    pub fn admit(&self, queue: u64, len: u64, prio: Option<u8>) -> Admit {
        let lossless = self.mode().lossless(prio);
        let fits = match self.buffer {
            Buffer::PerQueue { bytes, .. } => queue + len <= bytes,
            Buffer::Shared { bytes, alpha, .. } => {
                if lossless {
                    self.used + len <= bytes
                } else {
                    let shared = self.shared();
                    let free = shared.saturating_sub(self.used);
                    self.used + len <= shared && (queue + len) as f64 <= alpha * free as f64
                }
            }
        };
        match (fits, lossless) {
            (true, _) => Admit::Yes,
            (false, true) => Admit::Overflow,
            (false, false) => Admit::No,
        }
    }

    /// A frame of `len` bytes and priority `prio` that arrived through `port` was queued at
    /// `now` (ns): it takes its memory, and the pause to send back out of `port` is returned
    /// if its ingress just crossed the threshold.
    pub fn queued(
        &mut self,
        port: usize,
        prio: Option<u8>,
        len: u64,
        now: u64,
    ) -> Option<MacControlRepr> {
        self.used += len;
        self.peak = self.peak.max(self.used);
        let xoff = self.xoff();
        self.lossless.queued(port, prio, len, now, xoff)
    }

    /// A frame counted by [`Mmu::queued`] left its egress (sent or discarded): its memory is
    /// free, and the resumes it makes due go onto `out` as (port, frame) — its own ingress's,
    /// if that drained a gap below the threshold, and in a shared pool any other paused
    /// ingress's that the threshold, risen with the freed memory, now clears by a gap.
    pub fn released(
        &mut self,
        port: usize,
        prio: Option<u8>,
        len: u64,
        out: &mut Vec<(usize, MacControlRepr)>,
    ) {
        self.used = self.used.saturating_sub(len);
        let xoff = self.xoff();
        if let Some(f) = self.lossless.released(port, prio, len, xoff) {
            out.push((port, f));
        }
        if matches!(self.buffer, Buffer::Shared { .. }) && self.lossless.any_paused() {
            self.lossless.resume_below(xoff, out);
        }
    }

    /// The occupancy of a lossless (port, priority) above which it pauses its upstream, now:
    /// fixed per queue, α_pfc × the free shared part in a shared pool.
    pub fn xoff(&self) -> u64 {
        match self.buffer {
            Buffer::PerQueue { xoff, .. } => xoff,
            Buffer::Shared {
                bytes, pfc_alpha, ..
            } => irn_sim::net::shared_xoff(bytes, self.reserved, self.used, pfc_alpha),
        }
    }

    /// The pauses still in force whose refresh is due at `now`: (port, frame) to send again.
    pub fn due(&mut self, now: u64) -> Vec<(usize, MacControlRepr)> {
        self.lossless.due(now)
    }

    /// When the next refresh falls due, ns, if a pause is in force.
    pub fn next_refresh(&self) -> Option<u64> {
        self.lossless.next_refresh()
    }

    /// Bytes queued now, every egress.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The most ever queued at once, bytes.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Bytes of a shared pool reserved as headroom (0 per queue).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// The shared part of a shared pool: the pool less the headroom.
    fn shared(&self) -> u64 {
        match self.buffer {
            Buffer::PerQueue { bytes, .. } => bytes,
            Buffer::Shared { bytes, .. } => bytes.saturating_sub(self.reserved),
        }
    }

    /// Bytes ingress `port` holds of slot `k` (its priority, or 0 under PAUSE).
    pub fn held(&self, port: usize, k: usize) -> u64 {
        self.lossless.held(port, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irn_wire::mac_control::PfcRepr;

    const GBPS: u64 = 1_000_000_000;

    fn shared(bytes: u64, headroom: u64, alpha: f64) -> Buffer {
        Buffer::Shared {
            bytes,
            headroom,
            alpha,
            pfc_alpha: alpha,
        }
    }

    #[test]
    fn per_queue_memory_is_each_queues_own_and_pauses_at_a_fixed_threshold() {
        let b = Buffer::PerQueue {
            bytes: 10_000,
            xoff: 7_500,
        };
        let mut m = Mmu::new(b, Mode::Pfc(1 << 3), &[GBPS; 3], 2_000, u16::MAX);
        // A queue's room is its own, however much the others hold.
        assert_eq!(m.admit(9_000, 1_000, Some(0)), Admit::Yes);
        assert_eq!(m.admit(9_001, 1_000, Some(0)), Admit::No);
        assert_eq!(m.admit(9_001, 1_000, Some(3)), Admit::Overflow);
        assert_eq!(m.reserved(), 0);
        for _ in 0..7 {
            assert_eq!(m.queued(0, Some(3), 1_000, 0), None);
        }
        // 30 000 bytes queued from other ports change nothing: the threshold is fixed.
        for p in 1..3 {
            for _ in 0..15 {
                assert_eq!(m.queued(p, Some(0), 1_000, 0), None);
            }
        }
        assert_eq!(m.xoff(), 7_500);
        assert_eq!(
            m.queued(0, Some(3), 1_000, 0),
            Some(MacControlRepr::Pfc(PfcRepr::single(3, u16::MAX)))
        );
        assert_eq!((m.used(), m.peak()), (38_000, 38_000));
        let mut out = Vec::new();
        m.released(0, Some(3), 2_499, &mut out);
        assert!(out.is_empty());
        m.released(0, Some(3), 1, &mut out);
        assert_eq!(out, [(0, MacControlRepr::Pfc(PfcRepr::single(3, 0)))]);
        assert_eq!(m.used(), 35_500);
    }

    #[test]
    fn a_shared_pool_admits_lossy_frames_by_the_dynamic_threshold_and_keeps_the_headroom() {
        // 100 KB; priority 3 lossless on 4 ports, 5 KB of headroom each: 80 KB shared.
        let mut m = Mmu::new(
            shared(100_000, 5_000, 1.0),
            Mode::Pfc(1 << 3),
            &[GBPS; 4],
            2_000,
            u16::MAX,
        );
        assert_eq!(m.reserved(), 20_000);
        // An empty pool: one lossy queue may take α × 80 KB.
        assert_eq!(m.admit(79_000, 1_000, Some(0)), Admit::Yes);
        assert_eq!(m.admit(79_001, 1_000, Some(0)), Admit::No);
        // 40 KB in use by one queue: it may hold at most α × 40 KB free = 40 KB; another
        // (empty) queue may take up to 40 KB too, so neither can starve the other.
        for _ in 0..40 {
            m.queued(1, Some(0), 1_000, 0);
        }
        assert_eq!(m.admit(40_000, 1_000, Some(0)), Admit::No);
        assert_eq!(m.admit(0, 1_000, Some(0)), Admit::Yes);
        assert_eq!(m.admit(39_000, 1_000, Some(0)), Admit::Yes);
        // A smaller α shares less: at α = 1/2, 20 KB.
        let half = Mmu {
            buffer: shared(100_000, 5_000, 0.5),
            ..m.clone()
        };
        assert_eq!(half.admit(19_000, 1_000, Some(0)), Admit::Yes);
        assert_eq!(half.admit(19_001, 1_000, Some(0)), Admit::No);
        // The shared part full, lossy frames are dropped, lossless ones take the headroom;
        // past the whole pool they are still queued, as an overflow.
        for _ in 0..40 {
            m.queued(2, Some(0), 1_000, 0);
        }
        assert_eq!(m.used(), 80_000);
        assert_eq!(m.admit(0, 1, Some(0)), Admit::No);
        assert_eq!(m.admit(0, 1, None), Admit::No);
        assert_eq!(m.admit(0, 1_000, Some(3)), Admit::Yes);
        for _ in 0..20 {
            m.queued(3, Some(3), 1_000, 0);
        }
        assert_eq!(m.admit(0, 1, Some(3)), Admit::Overflow);
        assert_eq!(m.peak(), 100_000);
        // Under PAUSE the headroom is one per port; without flow control there is none.
        let pause = Mmu::new(shared(100_000, 5_000, 1.0), Mode::Pause, &[GBPS; 4], 0, 1);
        assert_eq!(pause.reserved(), 20_000);
        let off = Mmu::new(shared(100_000, 5_000, 1.0), Mode::Off, &[GBPS; 4], 0, 1);
        assert_eq!(off.reserved(), 0);
        let two = Mmu::new(
            shared(100_000, 5_000, 1.0),
            Mode::Pfc(0b1001),
            &[GBPS; 4],
            0,
            1,
        );
        assert_eq!(two.reserved(), 40_000);
    }

    #[test]
    fn a_shared_pool_pauses_one_congested_ingress_later_and_many_sooner() {
        let pfc = Mode::Pfc(1 << 3);
        let pause = Some(MacControlRepr::Pfc(PfcRepr::single(3, u16::MAX)));
        // 120 KB, 10 KB of headroom on each of 2 ports: 100 KB shared, α = 1.
        let fresh = || {
            Mmu::new(
                shared(120_000, 10_000, 1.0),
                pfc,
                &[GBPS; 2],
                2_000,
                u16::MAX,
            )
        };
        // One congested ingress alone pauses once it holds half the shared part (h > 100 KB
        // − h), where a per-queue buffer of the same 120 KB split in two pauses at 45 KB.
        let mut m = fresh();
        let mut held = 0;
        while m.queued(0, Some(3), 1_000, 0).is_none() {
            held += 1_000;
        }
        assert_eq!(held, 50_000);
        // Two at once: each pauses once it holds a third (h > 100 KB − 2h): the threshold
        // falls as the pool fills, so that no ingress takes it all.
        let mut m = fresh();
        let mut pauses = [None, None];
        let mut held = [0u64; 2];
        while pauses.iter().any(Option::is_none) {
            for p in 0..2 {
                if pauses[p].is_none() {
                    held[p] += 1_000;
                    if let Some(f) = m.queued(p, Some(3), 1_000, 0) {
                        pauses[p] = Some(f);
                    }
                }
            }
        }
        assert!(
            held.iter().all(|h| (33_000..=35_000).contains(h)),
            "{held:?}"
        );
        assert_eq!(pauses, [pause, pause]);
        // As the pool drains the threshold rises again: ingress 1 draining releases ingress
        // 0, which has not drained a byte — once the threshold is a gap above what it holds.
        let resume = MacControlRepr::Pfc(PfcRepr::single(3, 0));
        let mut out = Vec::new();
        let mut drained = 0;
        while !out.iter().any(|&(p, _)| p == 0) {
            m.released(1, Some(3), 1_000, &mut out);
            drained += 1_000;
        }
        assert_eq!(m.held(0, 3), held[0]);
        assert!(m.xoff() >= held[0] + 2_000);
        assert!(drained < held[1], "{drained} of {}", held[1]);
        assert!(out.iter().all(|&(p, f)| p < 2 && f == resume), "{out:?}");
    }
}
