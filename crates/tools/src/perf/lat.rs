//! `irn perf write|read|send|atomic --latency`: perftest's latency tests (`ib_write_lat`,
//! `ib_read_lat`, `ib_send_lat`, `ib_atomic_lat`), on the wire and in what they measure, so
//! that either end may be perftest (perftest 4.5, `perftest_resources.c`: `run_iter_lat_write`,
//! `run_iter_lat_send`, `run_iter_lat`; `perftest_parameters.c`: `print_report_lat`).
//!
//! * **Write** — a ping-pong over RDMA Writes. Each end writes `size` bytes to the same
//!   address of the other's region every iteration, the last byte carrying the iteration
//!   number (mod 256); each end waits until the peer's write of that number has landed in its
//!   own region before writing the next. The server writes first. Every Write is signaled and
//!   waited for.
//! * **Send** — a ping-pong over Sends: both ends keep receives posted (at most 512, `iters`
//!   in all); the client sends first, each end answers a received message with its next Send.
//! * **Read**, **atomic** — the client alone: one operation outstanding, the next posted when
//!   the previous completed. The server only waits for the closing hand-shake.
//!
//! Both ends of a ping-pong measure; perftest's numbers are the times between successive
//! posts (each one round trip), halved for Write and Send (one way) and not for Read and
//! atomics; sorted, the two largest dropped: `t_typical` is the median, `t_max` the largest
//! kept.
//!
//! The spin on the last byte is perftest's signal and holds for a peer that places a Write's
//! packets in order (RoCE). Under IRN's out-of-order placement the last byte can land before
//! earlier ones; `--verify` (between irn ends) therefore waits until the whole message is
//! there, and fails only if it is not within a second.

use std::time::{Duration, Instant};

use crate::error::{Context, Result};
use crate::{bail, usage};
use irn_verbs::exchange::{PerfKey, PerfOp, PerfParams};
use irn_verbs::{Cq, Mr, Qp, RecvWr, Remote, SendOp, SendWr, Wc, WcStatus};

/// How long an end waits for its peer's next message or for a completion.
const STALL: Duration = Duration::from_secs(30);
/// How long a verifying end waits for the rest of a Write whose last byte has landed.
const VERIFY_GRACE: Duration = Duration::from_secs(1);
/// What to do when the two ends' message sizes differ (perftest agrees on nothing).
const SAME_SIZE: &str = "give both ends the same -s (perftest's latency tools send 2 bytes by \
                         default, its bandwidth tools 65 536)";

/// perftest's receive depth for `ib_send_lat` (`min(512, iters)`).
const RX_DEPTH: u64 = 512;

/// One end of a latency test: its single queue pair, region and completion queues.
pub(crate) struct LatEnd<'a> {
    pub(crate) qp: &'a Qp,
    pub(crate) mr: &'a Mr,
    pub(crate) send_cq: &'a Cq,
    pub(crate) recv_cq: &'a Cq,
    pub(crate) peer: &'a PerfKey,
    pub(crate) p: &'a PerfParams,
    pub(crate) client: bool,
    /// Whether the peer is irn (data is then checked with `--verify`).
    pub(crate) verify: bool,
    /// The bytes of a verified message: `pattern(stream, index, out)`.
    pub(crate) pattern: fn(u32, u64, &mut [u8]),
}

/// Where this end's own messages are built: past the landing area at offset 0.
pub(crate) fn source_offset(size: u64) -> u64 {
    size.next_multiple_of(64)
}

/// The region a latency end needs: the landing area and the source.
pub(crate) fn region_len(size: u64) -> u64 {
    2 * source_offset(size)
}

/// What [`LatEnd::run`] measured.
pub(crate) struct LatResult {
    /// When each operation was posted (empty for a server of Read or atomic).
    pub(crate) posted: Vec<Instant>,
    /// Every checked message matched.
    pub(crate) ok: bool,
}

impl LatEnd<'_> {
    /// Runs this end's side of the test.
    pub(crate) fn run(&self) -> Result<LatResult> {
        match self.p.op {
            PerfOp::Write => self.write_pingpong(),
            PerfOp::Send => self.send_pingpong(),
            PerfOp::Read | PerfOp::Atomic if self.client => self.one_sided(),
            PerfOp::Read | PerfOp::Atomic => Ok(LatResult {
                posted: Vec::new(),
                ok: true,
            }),
        }
    }

    /// Which end's pattern a message from `from_client` carries.
    fn side_id(from_client: bool) -> u32 {
        if from_client {
            0x00c1
        } else {
            0x005e
        }
    }

    /// The message this end sends as its `i`-th (1-based): a pattern when verifying, zeros
    /// otherwise (as perftest), the last byte the iteration number for Writes.
    fn message(&self, from_client: bool, i: u64, out: &mut [u8]) {
        if self.verify {
            (self.pattern)(Self::side_id(from_client), i, out);
        } else {
            out.fill(0);
        }
        if self.p.op == PerfOp::Write {
            if let Some(last) = out.last_mut() {
                *last = i as u8;
            }
        }
    }

    fn post(&self, wr_id: u64, op: SendOp) -> Result<()> {
        let off = source_offset(self.p.size);
        self.qp.post_send(SendWr {
            wr_id,
            op,
            sg_list: irn_verbs::sgl![self.mr.sge(off, self.p.size as u32)],
            signaled: true,
            fence: false,
            solicited: false,
        })?;
        Ok(())
    }

    /// Waits for the completion of this end's only outstanding operation.
    fn wait_send(&self, i: u64) -> Result<Wc> {
        let Some(wc) = self.send_cq.wait(STALL)? else {
            bail!("operation {i} did not complete in {} s", STALL.as_secs());
        };
        check(&wc, i)?;
        Ok(wc)
    }

    fn write_pingpong(&self) -> Result<LatResult> {
        let p = self.p;
        let size = p.size as usize;
        let iters = p.iters;
        let remote = Remote {
            addr: self.peer.vaddr,
            rkey: self.peer.rkey,
        };
        let mut out = vec![0u8; size];
        let mut got = vec![0u8; size];
        let mut want = vec![0u8; size];
        let mut posted = Vec::with_capacity(iters as usize);
        let mut ok = true;
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        // perftest's loop: wait for the peer's write (the server skips the first wait: it
        // opens), write, wait for the write's completion.
        while scnt < iters || rcnt < iters {
            if rcnt < iters && (self.client || scnt > 0) {
                rcnt += 1;
                self.wait_landed(rcnt)?;
                if self.verify {
                    self.message(!self.client, rcnt, &mut want);
                    ok &= self.wait_whole(rcnt, &mut got, &want)?;
                }
            }
            if scnt < iters {
                scnt += 1;
                self.message(self.client, scnt, &mut out);
                self.mr.write(source_offset(p.size), &out)?;
                posted.push(Instant::now());
                self.post(scnt, SendOp::Write(remote))?;
                self.wait_send(scnt)?;
            }
        }
        Ok(LatResult { posted, ok })
    }

    /// Spins until the last byte of the landing area is `i` (mod 256).
    fn wait_landed(&self, i: u64) -> Result<()> {
        let at = self.p.size - 1;
        let mut last = [0u8; 1];
        let since = Instant::now();
        let mut spins = 0u32;
        loop {
            self.mr.read(at, &mut last)?;
            if last[0] == i as u8 {
                return Ok(());
            }
            spins += 1;
            // A busy-polling device is driven by polling its CQ: every spin does.
            let busy = self.send_cq.busy_polls();
            if busy || spins % 64 == 0 {
                // A failed Write of ours ends the test at once (the peer will never answer).
                if let Some(wc) = self.send_cq.poll(1)?.first() {
                    check(wc, i)?;
                }
                if since.elapsed() > STALL {
                    bail!(
                        "the peer's write {i} did not land in {} s (last byte {}){}",
                        STALL.as_secs(),
                        last[0],
                        self.size_mismatch()
                    );
                }
                if !busy {
                    std::thread::yield_now();
                }
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Why the peer's Writes may not land where this end waits for them: they went past the
    /// landing area (refused with a NAK, counted by the queue pair), or they end before its
    /// last byte — a writer sets the last byte of its message to the iteration's number, as
    /// perftest's does, so the last byte written in the zeroed landing area is the end of the
    /// peer's messages. Empty when neither shows.
    fn size_mismatch(&self) -> String {
        let refused = self.qp.counters().error_naks_sent;
        if refused > 0 {
            return format!(
                ": {refused} of the peer's writes went past this end's {}-byte landing area, \
                 so the peer runs a larger -s; {SAME_SIZE}",
                self.p.size
            );
        }
        let mut area = vec![0u8; self.p.size as usize];
        if self.mr.read(0, &mut area).is_err() {
            return String::new();
        }
        match area.iter().rposition(|&b| b != 0) {
            Some(end) if end + 1 < area.len() => format!(
                ": the peer's writes end at byte {end} of the landing area, so it runs -s {}, \
                 this end -s {}; {SAME_SIZE}",
                end + 1,
                self.p.size
            ),
            _ => String::new(),
        }
    }

    /// With the last byte there, waits (briefly) for the whole of message `i`.
    fn wait_whole(&self, i: u64, got: &mut [u8], want: &[u8]) -> Result<bool> {
        let since = Instant::now();
        loop {
            self.mr.read(0, got)?;
            if got == want {
                return Ok(true);
            }
            if since.elapsed() > VERIFY_GRACE {
                println!("verify: the peer's Write {i} differs");
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }

    fn send_pingpong(&self) -> Result<LatResult> {
        let p = self.p;
        let size = p.size as usize;
        let iters = p.iters;
        let mut out = vec![0u8; size];
        let mut got = vec![0u8; size];
        let mut want = vec![0u8; size];
        let mut posted = Vec::with_capacity(iters as usize);
        let mut ok = true;
        let mut recvs = RX_DEPTH.min(iters);
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        // perftest's loop: wait for the peer's message (the client skips the first wait: it
        // opens), send the next one and wait for its completion.
        while scnt < iters || rcnt < iters {
            if rcnt < iters && (!self.client || scnt > 0) {
                let Some(wc) = self.recv_cq.wait(STALL)? else {
                    bail!(
                        "no message from the peer for {} s after {rcnt} of {iters}",
                        STALL.as_secs()
                    );
                };
                if wc.status == WcStatus::LocLenErr {
                    bail!(
                        "message {} is longer than this end's -s {}: the peer sends larger \
                         messages; {SAME_SIZE}",
                        rcnt + 1,
                        p.size
                    );
                }
                check(&wc, rcnt + 1)?;
                if wc.byte_len != p.size as u32 {
                    bail!(
                        "message {} has {} bytes, not {}: the peer runs -s {}; {SAME_SIZE}",
                        rcnt + 1,
                        wc.byte_len,
                        p.size,
                        wc.byte_len
                    );
                }
                rcnt += 1;
                if self.verify {
                    self.mr.read(0, &mut got)?;
                    self.message(!self.client, rcnt, &mut want);
                    if got != want {
                        ok = false;
                        println!("verify: the peer's Send {rcnt} differs");
                    }
                }
                if recvs < iters {
                    post_recv(self.qp, self.mr, p, recvs)?;
                    recvs += 1;
                }
            }
            if scnt < iters {
                scnt += 1;
                self.message(self.client, scnt, &mut out);
                self.mr.write(source_offset(p.size), &out)?;
                posted.push(Instant::now());
                self.post(scnt, SendOp::Send)?;
                self.wait_send(scnt)?;
            }
        }
        Ok(LatResult { posted, ok })
    }

    fn one_sided(&self) -> Result<LatResult> {
        let p = self.p;
        let remote = Remote {
            addr: self.peer.vaddr,
            rkey: self.peer.rkey,
        };
        let mut got = vec![0u8; p.size as usize];
        let mut want = vec![0u8; p.size as usize];
        let mut posted = Vec::with_capacity(p.iters as usize);
        let mut ok = true;
        for i in 1..=p.iters {
            let op = match p.op {
                PerfOp::Read => SendOp::Read(remote),
                _ => SendOp::FetchAdd { remote, add: 1 },
            };
            posted.push(Instant::now());
            self.post(i, op)?;
            self.wait_send(i)?;
            if self.verify {
                self.mr.read(source_offset(p.size), &mut got)?;
                if p.op == PerfOp::Read {
                    // The irn server's first message slot of queue pair 0.
                    (self.pattern)(0, 0, &mut want);
                } else {
                    // Fetch-and-add returns the counter before this add.
                    want.copy_from_slice(&(i - 1).to_ne_bytes());
                }
                if got != want {
                    ok = false;
                    println!("verify: {} {i} returned other bytes", p.op.name());
                }
            }
        }
        Ok(LatResult { posted, ok })
    }
}

fn post_recv(qp: &Qp, mr: &Mr, p: &PerfParams, i: u64) -> Result<()> {
    qp.post_recv(RecvWr {
        wr_id: i,
        sg_list: irn_verbs::sgl![mr.sge(0, p.size as u32)],
    })?;
    Ok(())
}

/// The receives a Send latency test posts before its last hand-shake (perftest's
/// `ctx_set_recv_wqes`: `min(512, iters)`, all into the landing area); returns how many.
pub(crate) fn post_initial_recvs(qp: &Qp, mr: &Mr, p: &PerfParams) -> Result<u64> {
    if p.op != PerfOp::Send {
        return Ok(0);
    }
    let n = RX_DEPTH.min(p.iters);
    for i in 0..n {
        post_recv(qp, mr, p, i)?;
    }
    Ok(n)
}

fn check(wc: &Wc, i: u64) -> Result<()> {
    if wc.status != WcStatus::Success {
        bail!(
            "work request {i} on QP 0x{:06x} failed: {} ({})",
            wc.qp_num,
            wc.status,
            wc.status.ibv_number()
        );
    }
    Ok(())
}

/// perftest's latency figures, µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LatReport {
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) typical: f64,
    pub(crate) avg: f64,
    pub(crate) stdev: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
}

impl LatReport {
    /// perftest's `print_report_lat` over the times between successive posts: one round trip
    /// each, divided by `rtt_factor` (2 for Write and Send, 1 for Read and atomics); sorted, the
    /// two largest left out of everything but the percentiles (`measure_cnt = iters - 3`).
    /// `None` with fewer than two posts.
    pub(crate) fn from_posts(posted: &[Instant], rtt_factor: f64) -> Option<LatReport> {
        let mut d: Vec<f64> = posted
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / rtt_factor)
            .collect();
        if d.is_empty() {
            return None;
        }
        d.sort_by(f64::total_cmp);
        let n = d.len();
        let m = n.saturating_sub(2).max(1);
        let kept = &d[..m];
        let typical = if m % 2 == 1 {
            kept[m / 2]
        } else {
            (kept[m / 2 - 1] + kept[m / 2]) / 2.0
        };
        let avg = kept.iter().sum::<f64>() / m as f64;
        let var = kept.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / m as f64;
        let at = |f: f64| d[((m as f64 * f).ceil() as usize).min(n - 1)];
        Some(LatReport {
            min: d[0],
            max: d[m.min(n - 1)],
            typical,
            avg,
            stdev: var.sqrt(),
            p99: at(0.99),
            p999: at(0.999),
        })
    }
}

/// The dashed line around perftest's reports.
pub(crate) const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// perftest's latency columns (`RESULT_FMT_LAT`, `REPORT_FMT_LAT`).
pub(crate) fn print_report(size: u64, iters: u64, r: &LatReport) {
    println!("{LINE}");
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    );
    println!(
        " {:<7} {:<10} {:>14.2} {:>14.2} {:>16.2} {:>14.2} {:>16.2} {:>22.2} {:>24.2}",
        size, iters, r.min, r.max, r.typical, r.avg, r.stdev, r.p99, r.p999
    );
    println!("{LINE}");
}

/// What the latency flag allows: one queue pair (perftest's latency tools have one), at least
/// two iterations (one interval).
pub(crate) fn check_params(p: &PerfParams) -> Result<()> {
    if p.qps != 1 {
        usage!(
            "a latency test runs one queue pair (as perftest's do), not -q {}",
            p.qps
        );
    }
    if p.iters < 2 {
        usage!("a latency test needs -n 2 or more (it times the intervals between posts)");
    }
    u32::try_from(p.size).context("--size")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posts(gaps_us: &[u64]) -> Vec<Instant> {
        let t0 = Instant::now();
        let mut t = t0;
        let mut v = vec![t0];
        for &g in gaps_us {
            t += Duration::from_micros(g);
            v.push(t);
        }
        v
    }

    #[test]
    fn report_follows_perftest() {
        // 10 intervals: 1..=8 µs and two outliers; halved (Write/Send).
        let r = LatReport::from_posts(&posts(&[8, 1, 7, 2, 6, 3, 5, 4, 900, 1000]), 2.0)
            .expect("intervals");
        // Sorted halves: 0.5 1 1.5 2 2.5 3 3.5 4 450 500; kept = first 8.
        assert!((r.min - 0.5).abs() < 1e-9);
        assert!((r.max - 450.0).abs() < 1e-9, "{r:?}");
        assert!((r.typical - 2.25).abs() < 1e-9, "{r:?}");
        assert!((r.avg - 2.25).abs() < 1e-9, "{r:?}");
        // ceil(0.99 × 8) = 8: the first dropped value, as perftest indexes.
        assert!((r.p99 - 450.0).abs() < 1e-9);
        assert!((r.p999 - 450.0).abs() < 1e-9);
        // Reads are not halved.
        let r = LatReport::from_posts(&posts(&[3, 3, 3]), 1.0).expect("intervals");
        assert!((r.typical - 3.0).abs() < 1e-9 && (r.max - 3.0).abs() < 1e-9);
        assert!(LatReport::from_posts(&posts(&[]), 1.0).is_none());
    }

    #[test]
    fn regions_hold_landing_area_and_source() {
        for size in [1, 2, 63, 64, 65, 4096, 1 << 20] {
            let off = source_offset(size);
            assert!(off >= size && off % 64 == 0);
            assert!(region_len(size) >= off + size);
        }
    }
}
