//! `irn perf --engines N`: a bandwidth test over a group of `N` engines at each end
//! (`Device::open_group`), the queue pairs spread over the members.
//!
//! Each member runs its share of the test as a test of its own, on its own thread, over its
//! own exchange: the client opens `N` exchanges one after the other, the server accepts them
//! in the same order, and member `i` of each end serves exchange `i` (its queue pairs are
//! numbered in member `i`'s class, and the peer's kernel steers their packets to its member
//! `i`). The client's members start their bandwidth loops together ([`Gate`]), and the client
//! prints each member's report and their aggregate: all bytes over the time from the common
//! start to the last member's end.

use std::net::TcpStream;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{oob_connect, open_devices, run_client, serve, Chan, Oob, PerfArgs, Result};
use crate::error::Context;
use crate::link::{local_ip, oob_listen};
use crate::{bail, usage};
use irn_verbs::exchange::BwReport;
use irn_verbs::MAX_ENGINES;

/// How long the server waits for the client's next exchange, and a member for the others at
/// the start.
const GATHER: Duration = Duration::from_secs(30);

/// Where the members of a group meet before their bandwidth loops: each passes once every
/// member has come or left (a member whose test failed before the gate leaves it), or after
/// [`GATHER`].
pub(super) struct Gate {
    came: Mutex<Vec<bool>>,
    all: Condvar,
}

impl Gate {
    fn new(members: usize) -> Gate {
        Gate {
            came: Mutex::new(vec![false; members]),
            all: Condvar::new(),
        }
    }

    /// Member `member` has come: waits until every member has come or left (or [`GATHER`]
    /// has passed).
    pub(super) fn pass(&self, member: usize) {
        let mut came = self.arrive(member);
        let deadline = Instant::now() + GATHER;
        while !came.iter().all(|&c| c) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            came = self
                .all
                .wait_timeout(came, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Member `member` will not come (its test failed), or came already: the others need not
    /// wait for it.
    fn leave(&self, member: usize) {
        drop(self.arrive(member));
    }

    fn arrive(&self, member: usize) -> std::sync::MutexGuard<'_, Vec<bool>> {
        let mut came = self.came.lock().unwrap_or_else(|p| p.into_inner());
        came[member] = true;
        self.all.notify_all();
        came
    }
}

/// Leaves the gate when dropped: at the end of a member's test, however it ended.
struct Leaving<'a>(&'a Gate, usize);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.leave(self.1);
    }
}

pub(super) fn run(args: &PerfArgs) -> Result<bool> {
    let n = args.engines;
    if n == 0 || n > MAX_ENGINES {
        usage!("--engines: 1 to {MAX_ENGINES} engines per end, not {n}");
    }
    if args.rdma_cm || args.latency {
        usage!("--engines: a bandwidth test over TCP exchanges (not with -R or --latency)");
    }
    if args.link.line_rate.is_some_and(|r| r > 0)
        || args.link.pause_iface.is_some()
        || args.link.vlan.is_some()
    {
        usage!(
            "--engines {n}: a paced line, pause frames and tagged frames are one engine's \
             (not with --line-rate, --pause-iface or --vlan)"
        );
    }
    if args.host.is_some() && (args.qps as usize) < n {
        usage!(
            "--engines {n}: each engine needs a queue pair; give -q at least {n}, not {}",
            args.qps
        );
    }
    match &args.host {
        Some(host) => client(args, host),
        None => server(args),
    }
}

/// The exchange over `tcp`, which must be with an irn peer.
fn exchange(tcp: TcpStream, client: bool, args: &PerfArgs) -> Result<(Oob, u32)> {
    let (oob, mtu) = Oob::open(Chan::Tcp(tcp), client, args.mtu)?;
    if !oob.peer_irn {
        bail!("--engines: the peer is perftest, which runs one exchange; an irn peer is needed");
    }
    Ok((oob, mtu))
}

fn server(args: &PerfArgs) -> Result<bool> {
    let n = args.engines;
    let l = oob_listen(args.port)?;
    let (first, _) = l.accept().context("accepting the out-of-band connection")?;
    let ip = local_ip(&first, &args.link)?;
    let mut exchanges = vec![exchange(first, false, args)?];
    l.set_nonblocking(true)?;
    let deadline = Instant::now() + GATHER;
    while exchanges.len() < n {
        match l.accept() {
            Ok((tcp, _)) => {
                tcp.set_nonblocking(false)?;
                exchanges.push(exchange(tcp, false, args)?);
            }
            // A client that gave up on a connection still queued: the next may come.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!(
                        "--engines {n}: {} of {n} exchanges connected within {} s: give the \
                         client the same --engines",
                        exchanges.len(),
                        GATHER.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("accepting the out-of-band connection"),
        }
    }
    // A client with more engines is refused at once.
    drop(l);
    let group = open_devices(ip, true, args, args.engines)?;
    println!("irn perf server: {n} engines on {}", group[0].local_addr());
    let results: Vec<Result<bool>> = std::thread::scope(|s| {
        let runs: Vec<_> = exchanges
            .into_iter()
            .zip(group)
            .map(|((oob, mtu), dev)| s.spawn(move || serve(args, oob, mtu, dev)))
            .collect();
        joined(runs)
    });
    let mut ok = true;
    for r in member_results(results)? {
        ok &= r;
    }
    Ok(ok)
}

/// Each member thread's result, in order (a panic as an error).
fn joined<T>(runs: Vec<std::thread::ScopedJoinHandle<'_, Result<T>>>) -> Vec<Result<T>> {
    runs.into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| bail!("an engine's test panicked"))
        })
        .collect()
}

/// The members' results, or, if any failed, each failure said (the first is returned).
fn member_results<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    let n = results.len();
    let mut oks = Vec::with_capacity(n);
    let mut first = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(v) => oks.push(v),
            Err(e) => {
                eprintln!("irn perf: engine {i} of {n}: {e:#}");
                first.get_or_insert(e);
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(oks),
    }
}

/// `-q` spread over `n` members: the first `qps mod n` get one more.
fn shares(qps: u32, n: usize) -> Vec<u32> {
    let n32 = n as u32;
    (0..n32)
        .map(|i| qps / n32 + u32::from(i < qps % n32))
        .collect()
}

fn client(args: &PerfArgs, host: &str) -> Result<bool> {
    let n = args.engines;
    let mut exchanges = Vec::with_capacity(n);
    let mut ip = None;
    for i in 0..n {
        let tcp = oob_connect(Some(host), args.port).with_context(|| {
            format!(
                "exchange {} of {n}: a server runs as many exchanges as its --engines",
                i + 1
            )
        })?;
        if ip.is_none() {
            ip = Some(local_ip(&tcp, &args.link)?);
        }
        exchanges.push(exchange(tcp, true, args)?);
    }
    let ip = ip.expect("at least one engine");
    let group = open_devices(ip, true, args, args.engines)?;
    let gate = Gate::new(n);
    let shares = shares(args.qps, n);
    let results: Vec<Result<(bool, Option<BwReport>)>> = std::thread::scope(|s| {
        let runs: Vec<_> = exchanges
            .into_iter()
            .zip(group)
            .zip(&shares)
            .enumerate()
            .map(|(i, (((oob, mtu), dev), &qps))| {
                let mine = PerfArgs {
                    qps,
                    ..args.clone()
                };
                let gate = &gate;
                s.spawn(move || {
                    // Failed (or panicked) before the gate, the others need not wait for it.
                    let _leave = Leaving(gate, i);
                    run_client(&mine, oob, mtu, dev, Some((gate, i)))
                })
            })
            .collect();
        joined(runs)
    });
    let mut ok = true;
    let mut reports = Vec::with_capacity(n);
    for ((passed, report), &qps) in member_results(results)?.into_iter().zip(&shares) {
        ok &= passed;
        if let Some(rep) = report {
            reports.push((rep, qps));
        }
    }
    if let Some(line) = aggregate(&reports) {
        println!("{line}");
    }
    Ok(ok)
}

/// The aggregate of the members' reports (each with its queue pairs): all their bytes over
/// the longest member's time (they started together), and all their messages so.
fn aggregate(reports: &[(BwReport, u32)]) -> Option<String> {
    let mut bytes = 0.0;
    let mut msgs = 0.0;
    let mut longest: f64 = 0.0;
    for (r, qps) in reports {
        let m = (r.iters * u64::from(*qps)) as f64;
        if r.msg_rate <= 0.0 {
            return None;
        }
        let secs = m / (r.msg_rate * 1e6);
        bytes += m * r.size as f64;
        msgs += m;
        longest = longest.max(secs);
    }
    (longest > 0.0).then(|| {
        format!(
            "aggregate of {} engines: {:.2} MB/s, {:.6} Mpps ({} messages in {:.3} s from \
             their common start)",
            reports.len(),
            bytes / longest / (1024.0 * 1024.0),
            msgs / longest / 1e6,
            msgs,
            longest
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_opens_when_every_member_came_or_left_even_by_a_panic() {
        let gate = Gate::new(3);
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| gate.pass(0));
            s.spawn(|| gate.pass(1));
            let failed = s.spawn(|| {
                let _leave = Leaving(&gate, 2);
                panic!("member 2's test");
            });
            assert!(failed.join().is_err());
        });
        // Well within GATHER: nobody waited for member 2.
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        // A member that came and then leaves is counted once.
        let gate = Gate::new(1);
        gate.pass(0);
        gate.leave(0);
    }

    #[test]
    fn queue_pairs_are_spread_as_evenly_as_they_go() {
        assert_eq!(shares(4, 2), vec![2, 2]);
        assert_eq!(shares(5, 3), vec![2, 2, 1]);
        assert_eq!(shares(3, 3), vec![1, 1, 1]);
        assert_eq!(shares(7, 4).iter().sum::<u32>(), 7);
    }

    #[test]
    fn the_aggregate_is_all_bytes_over_the_longest_member() {
        let r = |iters, rate| BwReport {
            size: 1 << 20,
            iters,
            bw_peak: 0.0,
            bw_avg: 0.0,
            msg_rate: rate,
        };
        // 1 000 MiB in 1 s and 500 MiB in 1 s (two queue pairs of 250): 1 500 MB/s.
        let line = aggregate(&[(r(1000, 0.001), 1), (r(250, 0.0005), 2)]).expect("line");
        assert!(line.contains("1500.00 MB/s"), "{line}");
        // A member that took twice as long halves the rate of the whole.
        let line = aggregate(&[(r(1000, 0.001), 1), (r(1000, 0.0005), 1)]).expect("line");
        assert!(line.contains("1000.00 MB/s"), "{line}");
        assert!(aggregate(&[(r(1, 0.0), 1)]).is_none());
    }
}
