//! The bandwidth test's two loops: the client's ([`Runner`]), which keeps up to its depth of
//! operations outstanding on every queue pair, retires each signaled completion with the
//! unsignaled ones before it (perftest's `-Q`), and measures; and a Send test's server
//! ([`Receiver`]), which keeps receives posted and checks what arrives, in order. Both print
//! perftest's bandwidth columns ([`print_bw`]). The exchange around them, and what each end
//! sets up, is the parent module's.

use std::time::{Duration, Instant};

use super::lat::LINE;
use super::{engines, pattern, region_len, Side};
use crate::bail;
use crate::error::Result;
use irn_verbs::exchange::{BwReport, PerfKey, PerfOp, PerfParams};
use irn_verbs::{RecvWr, Remote, SendOp, SendWr, WcStatus};

/// CRC-32 of every queue pair's region, in order: what a verified Write or atomic test
/// leaves in the server's memory, compared with the client's expectation.
pub(super) fn region_crc(side: &Side) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for mr in &side.mrs {
        let _ = mr.with_bytes(|b| h.update(b));
    }
    h.finalize()
}

/// The server of a Send test: keeps receives posted, checks patterns in order when asked.
pub(super) struct Receiver<'a> {
    side: &'a Side,
    p: &'a PerfParams,
    /// Receives kept posted per queue pair.
    depth: u64,
}

impl<'a> Receiver<'a> {
    pub(super) fn new(side: &'a Side, p: &'a PerfParams) -> Receiver<'a> {
        // perftest keeps 512 receives posted in a Send test (its `DEF_RX_SEND`): the
        // responder acknowledges what arrived whether or not the application has reposted,
        // so the sender's `--tx-depth` of 128 does not bound the receives in use, and with
        // 256 a server that lagged for a moment drew RNR NAKs on a lossless loopback.
        // Verifying keeps one receive per message slot, so that no later message lands in a
        // slot before its predecessor there has been checked.
        let depth = if p.verify { side.slots } else { 512 };
        Receiver { side, p, depth }
    }

    fn post(&self, q: usize, i: u64) -> Result<()> {
        self.side.qps[q].post_recv(self.recv_wr(q, i))?;
        Ok(())
    }

    /// The receive of message `i` on queue pair `q`.
    fn recv_wr(&self, q: usize, i: u64) -> RecvWr {
        let mr = &self.side.mrs[q];
        let p = self.p;
        RecvWr {
            wr_id: (q as u64) << 40 | i,
            sg_list: irn_verbs::sgl![mr.sge((i % self.side.slots) * p.size, p.size as u32)],
        }
    }

    /// The first receives of each queue pair (a Send test posts them before its last
    /// hand-shake).
    pub(super) fn post_initial(&self) -> Result<()> {
        if self.p.op != PerfOp::Send {
            return Ok(());
        }
        for q in 0..self.side.qps.len() {
            for i in 0..self.depth.min(self.p.iters) {
                self.post(q, i)?;
            }
        }
        Ok(())
    }

    /// Receives every Send, reposting as they complete; prints the bandwidth received.
    ///
    /// `peer_closed` says whether the client has closed the exchange: a client that stopped
    /// (an error, or killed; over `-R`'s CM exchange, one that dropped its connection, which
    /// sends a DREQ) ends the wait within a fraction of a second, as a Write or Read test's
    /// server, which waits on the exchange itself, notices at once.
    pub(super) fn run(&self, peer_closed: &mut dyn FnMut() -> bool) -> Result<bool> {
        let (side, p) = (self.side, self.p);
        let mut got = vec![0u64; side.qps.len()];
        let mut buf = vec![0u8; p.size as usize];
        let mut want = vec![0u8; p.size as usize];
        let mut ok = true;
        let total = p.iters * side.qps.len() as u64;
        let mut done = 0;
        let mut start = None;
        let mut repost: Vec<Vec<RecvWr>> = vec![Vec::new(); side.qps.len()];
        while done < total {
            let waited = Instant::now();
            let first = loop {
                if let Some(wc) = side.rcq.wait(Duration::from_millis(200))? {
                    break wc;
                }
                if peer_closed() {
                    bail!(
                        "the client closed the exchange after {done} of {total} Sends (it \
                         stopped: its own output says why)"
                    );
                }
                if waited.elapsed() >= Duration::from_secs(30) {
                    bail!("no Send for 30 s after {done} of {total}");
                }
            };
            start.get_or_insert_with(Instant::now);
            // What else has completed, with the receives to replace them posted in one list per
            // queue pair (one acquisition of the device rather than one per message) — a
            // quarter of the receive depth at most, so the queue never runs dry meanwhile.
            let more = side.rcq.poll((self.depth / 4).max(1) as usize - 1)?;
            for wc in std::iter::once(first).chain(more) {
                ok &= self.received(wc, &mut got, &mut buf, &mut want, &mut repost)?;
                done += 1;
            }
            for (q, wrs) in repost.iter_mut().enumerate() {
                if !wrs.is_empty() {
                    side.qps[q].post_recv_list(wrs.drain(..))?;
                }
            }
        }
        // From the first arrival: perftest's server measures from its first completion too.
        let secs = start.map_or(0.0, |s| s.elapsed().as_secs_f64()).max(1e-9);
        let avg = (total * p.size) as f64 / secs / (1024.0 * 1024.0);
        print_bw(&BwReport {
            size: p.size,
            iters: p.iters,
            bw_peak: avg,
            bw_avg: avg,
            msg_rate: total as f64 / secs / 1e6,
        });
        if p.verify && ok {
            println!("verify: ok ({total} messages)");
        }
        Ok(ok)
    }

    /// Checks one receive completion (order, and data when verifying) and queues the receive
    /// that replaces it; returns whether the data matched.
    fn received(
        &self,
        wc: irn_verbs::Wc,
        got: &mut [u64],
        buf: &mut [u8],
        want: &mut [u8],
        repost: &mut [Vec<RecvWr>],
    ) -> Result<bool> {
        let (side, p) = (self.side, self.p);
        let mut ok = true;
        if wc.status != WcStatus::Success {
            bail!("receive failed: {} ({})", wc.status, wc.status.ibv_number());
        }
        let (q, i) = ((wc.wr_id >> 40) as usize, wc.wr_id & ((1 << 40) - 1));
        if q >= got.len() || i != got[q] {
            bail!("receive {i} on QP {q} completed out of order");
        }
        if p.verify {
            side.mrs[q].read((i % side.slots) * p.size, buf)?;
            pattern(q as u32, i, want);
            if buf != want {
                ok = false;
                println!("verify: message {i} of QP {q} differs");
            }
        }
        got[q] += 1;
        if i + self.depth < p.iters {
            repost[q].push(self.recv_wr(q, i + self.depth));
        }
        Ok(ok)
    }
}

/// Prints perftest's bandwidth columns in one write (the members of a group print theirs from
/// their own threads: `--engines`).
pub(super) fn print_bw(r: &BwReport) {
    print!(
        "{LINE}\n {:<10} {:<15} {:<18} {:<20} {:<15}\n {:<10} {:<15} {:<18.2} {:<20.2} {:<15.6}\n{LINE}\n",
        "#bytes",
        "#iterations",
        "BW peak[MB/sec]",
        "BW average[MB/sec]",
        "MsgRate[Mpps]",
        r.size,
        r.iters,
        r.bw_peak,
        r.bw_avg,
        r.msg_rate
    );
}

pub(super) struct Runner<'a> {
    pub(super) side: &'a Side,
    pub(super) p: &'a PerfParams,
    pub(super) theirs: &'a [PerfKey],
    /// Message slots the peer's region has (1 for a perftest peer).
    pub(super) remote_slots: u64,
    pub(super) depth: u32,
    /// Work requests per post call (`--post-list`).
    pub(super) post_list: usize,
    /// Every `cq_mod`-th work request of a queue pair is signaled, and its last
    /// (`--cq-mod`).
    pub(super) cq_mod: u64,
    /// What the bandwidth loop waits for before it starts its clock, and its member's index
    /// there (`--engines`).
    pub(super) start: Option<(&'a engines::Gate, usize)>,
}

impl Runner<'_> {
    fn slot_off(&self, i: u64) -> u64 {
        (i % self.side.slots) * self.p.size
    }

    /// Posts iteration `i` on queue pair `q`.
    fn post(&self, q: usize, i: u64, buf: &mut [u8]) -> Result<()> {
        self.side.qps[q].post_send(self.wr(q, i, buf)?)?;
        Ok(())
    }

    /// Posts iterations `from..to` on queue pair `q`, `--post-list` per call.
    fn post_range(&self, q: usize, from: u64, to: u64, buf: &mut [u8]) -> Result<()> {
        if self.post_list <= 1 {
            return (from..to).try_for_each(|i| self.post(q, i, buf));
        }
        let mut i = from;
        while i < to {
            let n = (to - i).min(self.post_list as u64);
            let wrs = (i..i + n)
                .map(|j| self.wr(q, j, buf))
                .collect::<Result<Vec<_>>>()?;
            self.side.qps[q].post_send_list(wrs)?;
            i += n;
        }
        Ok(())
    }

    /// The work request of iteration `i` on queue pair `q` (its data written first when
    /// verifying).
    fn wr(&self, q: usize, i: u64, buf: &mut [u8]) -> Result<SendWr> {
        let p = self.p;
        let mr = &self.side.mrs[q];
        let off = self.slot_off(i);
        let k = &self.theirs[q];
        let remote = Remote {
            addr: k.vaddr + (i % self.remote_slots) * p.size,
            rkey: k.rkey,
        };
        if p.verify && matches!(p.op, PerfOp::Write | PerfOp::Send) {
            pattern(q as u32, i, buf);
            mr.write(off, buf)?;
        }
        let op = match p.op {
            PerfOp::Write => SendOp::Write(remote),
            PerfOp::Read => SendOp::Read(remote),
            PerfOp::Send => SendOp::Send,
            PerfOp::Atomic => SendOp::FetchAdd {
                remote: Remote {
                    addr: k.vaddr,
                    rkey: k.rkey,
                },
                add: 1,
            },
        };
        Ok(SendWr {
            wr_id: (q as u64) << 40 | i,
            op,
            sg_list: irn_verbs::sgl![mr.sge(off, p.size as u32)],
            signaled: self.signaled(i),
            fence: false,
            solicited: false,
        })
    }

    /// Whether iteration `i` of a queue pair asks for a completion (`--cq-mod`).
    fn signaled(&self, i: u64) -> bool {
        i % self.cq_mod == self.cq_mod - 1 || i + 1 == self.p.iters
    }

    /// Handles one completion of queue pair `q`, whose iterations before `done` had
    /// completed: returns the iterations it retires (itself and the unsignaled ones before
    /// it) and whether their Read data matched when verifying.
    fn complete(
        &self,
        wc: irn_verbs::Wc,
        done: u64,
        buf: &mut [u8],
        want: &mut [u8],
    ) -> Result<(std::ops::Range<u64>, bool)> {
        let (q, i) = ((wc.wr_id >> 40) as usize, wc.wr_id & ((1 << 40) - 1));
        if wc.status != WcStatus::Success {
            bail!(
                "work request {i} on QP {q} (0x{:06x}) failed: {} ({})",
                wc.qp_num,
                wc.status,
                wc.status.ibv_number()
            );
        }
        // Only signaled requests complete successfully, in order: this one retires the
        // unsignaled ones before it.
        if i < done || !self.signaled(i) {
            bail!("work request {i} on QP {q} completed out of order (after {done} of them)");
        }
        let mut ok = true;
        if self.p.verify && self.p.op == PerfOp::Read {
            // None of these slots has been read into again: at most `depth` ≤ `slots`
            // requests were outstanding, all after `done`.
            for j in done..=i {
                self.side.mrs[q].read(self.slot_off(j), buf)?;
                pattern(q as u32, j % self.side.slots, want);
                if buf != want {
                    println!("verify: Read {j} of QP {q} differs");
                    ok = false;
                }
            }
        }
        Ok((done..i + 1, ok))
    }

    /// Returns whether every checked Read matched, and the report.
    pub(super) fn bandwidth(&self) -> Result<(bool, BwReport)> {
        let p = self.p;
        let nq = self.side.qps.len();
        let total = p.iters * nq as u64;
        let mut posted = vec![0u64; nq];
        let mut done = vec![0u64; nq];
        let mut buf = vec![0u8; p.size as usize];
        let mut want = vec![0u8; p.size as usize];
        let mut stamps = Vec::with_capacity(total as usize);
        let mut ok = true;
        let depth = u64::from(self.depth).min(self.side.slots);
        if let Some((g, member)) = self.start {
            g.pass(member);
        }
        let start = Instant::now();
        let mut completed = 0u64;
        while completed < total {
            for q in 0..nq {
                let to = p.iters.min(done[q] + depth);
                if posted[q] < to {
                    self.post_range(q, posted[q], to, &mut buf)?;
                    posted[q] = to;
                }
            }
            let Some(first) = self.side.cq.wait(Duration::from_secs(30))? else {
                bail!("no completion for 30 s after {completed} of {total}");
            };
            let more = self.side.cq.poll(256)?;
            // One clock read per poll: its completions were all seen at once (a read per
            // completion was 2.5 % of a 64-byte Send stream's cycles).
            let seen = start.elapsed();
            for wc in std::iter::once(first).chain(more) {
                let q = (wc.wr_id >> 40) as usize;
                let (retired, matched) = self.complete(wc, done[q], &mut buf, &mut want)?;
                ok &= matched;
                let n = retired.end - retired.start;
                done[q] = retired.end;
                completed += n;
                stamps.extend(std::iter::repeat_n(seen, n as usize));
            }
        }
        // Each request retired exactly once: a completion that retired too many or too few
        // would have ended the loop early or late.
        if let Some(q) = (0..nq).find(|&q| done[q] != p.iters || posted[q] != p.iters) {
            bail!(
                "QP {q}: {} of {} requests retired, {} posted",
                done[q],
                p.iters,
                posted[q]
            );
        }
        let secs = start.elapsed().as_secs_f64();
        let bytes = (total * p.size) as f64;
        let mb = 1024.0 * 1024.0;
        let avg = bytes / secs / mb;
        // Peak: the best window of a sixteenth of the run (at least 1 ms, so that a burst of
        // completions freed by one coalesced ACK does not count as an instant transfer).
        let window = (secs / 16.0).max(1e-3);
        let mut peak = avg;
        let mut j = 0;
        for (i, s) in stamps.iter().enumerate() {
            let end = s.as_secs_f64() + window;
            while j < stamps.len() && stamps[j].as_secs_f64() < end {
                j += 1;
            }
            if end <= secs {
                peak = peak.max(((j - i) as u64 * p.size) as f64 / window / mb);
            }
        }
        let report = BwReport {
            size: p.size,
            iters: p.iters,
            bw_peak: peak,
            bw_avg: avg,
            msg_rate: total as f64 / secs / 1e6,
        };
        print_bw(&report);
        Ok((ok, report))
    }

    /// What the server's regions must hold after a verified Write or atomic run.
    pub(super) fn expected_remote_crc(&self) -> u32 {
        let p = self.p;
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0u8; p.size as usize];
        for q in 0..self.side.qps.len() {
            match p.op {
                PerfOp::Write => {
                    for j in 0..self.side.slots {
                        // The last iteration that wrote slot j, if any.
                        if j < p.iters {
                            let last = j + (p.iters - 1 - j) / self.side.slots * self.side.slots;
                            pattern(q as u32, last, &mut buf);
                        } else {
                            buf.fill(0);
                        }
                        h.update(&buf);
                    }
                    let rest = region_len(p, self.side.slots) - self.side.slots * p.size;
                    h.update(&vec![0u8; rest as usize]);
                }
                _ => {
                    // One counter per queue pair, at the start of its region.
                    let mut region = vec![0u8; region_len(p, self.side.slots) as usize];
                    region[..8].copy_from_slice(&p.iters.to_ne_bytes());
                    h.update(&region);
                }
            }
        }
        h.finalize()
    }
}
