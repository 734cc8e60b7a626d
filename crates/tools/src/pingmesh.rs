//! `irn pingmesh`: RDMA Pingmesh (seed 001 §5.3; SPEC N9) on real hosts over irn-verbs.
//!
//! Every host of a list runs one agent. An agent serves — it answers each prober's
//! out-of-band request (TCP, `--port`) with a queue pair connected to the prober's and a
//! memory region the prober may write — and probes: every `--interval-ms`, for each other
//! host in the list, one `--size`-byte RDMA Write, timed from post to completion. Each probe
//! is one JSON line: `{"t_ms", "src", "dst", "level", "rtt_us", "status"}` with `rtt_us`
//! null and `status` the verbs status (`IBV_WC_RETRY_EXC_ERR`, …), `TIMEOUT` (no completion
//! within `--timeout-ms`) or `CONNECT_FAILED` (no out-of-band answer) when it failed. A queue
//! pair that failed is dropped and connected afresh for the next probe, as a real agent must.
//!
//! At the end the agent prints the summary of its own probes — the simulator's Pingmesh
//! summary (`irn_sim::metrics::pingmesh_summary`: RTT percentiles per level and per server,
//! errors, suspects) with the hosts named — and `irn pingmesh --summarize FILES…` gives the
//! same summary over every agent's lines: the fabric-wide view that points at the host or
//! link at fault.
//!
//! Host list: one host per line, `ADDRESS [tor=NAME] [pod=NAME]`, `#` comments. Two hosts
//! with the same `tor` are probed at ToR level, the same `pod` at pod level, otherwise at
//! fabric level. The agent is the host whose address it can bind (or `--me`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Context, Result};
use crate::{bail, usage};
use irn_sim::config::PingLevel;
use irn_sim::metrics::{pingmesh_summary, PingmeshReport, ProbeOutcome};
use irn_verbs::{
    Access, Device, Gid, Mr, Pd, Qp, QpAttr, QpInit, QpMode, Remote, RemoteQp, SendOp, SendWr,
    WcStatus,
};

use crate::link::{device_config, LinkArgs};

/// `irn pingmesh` flags.
#[derive(clap::Args, Debug)]
pub struct PingmeshArgs {
    /// The host list (`ADDRESS [tor=NAME] [pod=NAME]` per line).
    #[arg(long, required_unless_present = "summarize")]
    hosts: Option<PathBuf>,
    /// This host's address (default: the listed address this machine can bind).
    #[arg(long)]
    me: Option<IpAddr>,
    /// TCP port of the out-of-band exchange, on every host.
    #[arg(long, default_value_t = 18600)]
    port: u16,
    /// A round of probes (one per peer) this often, ms.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Stop probing after this long, s (then serve a little longer so peers finish).
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Probe size, bytes (the paper's: 512).
    #[arg(long, default_value_t = 512)]
    size: u32,
    /// A probe without a completion after this long counts as failed (`TIMEOUT`), ms; also
    /// how long the out-of-band connection may take (`CONNECT_FAILED`).
    #[arg(long, default_value_t = 500)]
    timeout_ms: u64,
    /// A host is slow only if its median (or p99) RTT also exceeds the median host's by this
    /// much, µs: scheduling noise on busy hosts is not a fault.
    #[arg(long, default_value_t = 1000.0)]
    slow_us: f64,
    /// Loss recovery of the probes' queue pairs (every agent must use the same).
    #[arg(long, default_value = "irn")]
    mode: QpMode,
    /// Write the probes' JSON lines here (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the summary as JSON here.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// Summarize the JSON lines of these files (every agent's) instead of probing.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    summarize: Vec<PathBuf>,
    #[command(flatten)]
    link: LinkArgs,
}

/// One host of the list.
#[derive(Debug, Clone)]
struct Host {
    addr: IpAddr,
    tor: Option<String>,
    pod: Option<String>,
}

fn parse_hosts(path: &Path) -> Result<Vec<Host>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let at = || format!("{}:{}", path.display(), i + 1);
        let addr: IpAddr = words
            .next()
            .unwrap_or_default()
            .parse()
            .with_context(|| format!("{}: not an IP address", at()))?;
        let mut h = Host {
            addr,
            tor: None,
            pod: None,
        };
        for w in words {
            match w.split_once('=') {
                Some(("tor", v)) => h.tor = Some(v.to_string()),
                Some(("pod", v)) => h.pod = Some(v.to_string()),
                _ => usage!("{}: `{w}` is not tor=NAME or pod=NAME", at()),
            }
        }
        if hosts.iter().any(|o: &Host| o.addr == addr) {
            usage!("{}: {addr} is listed twice", at());
        }
        hosts.push(h);
    }
    if hosts.len() < 2 {
        usage!("{}: a mesh needs at least two hosts", path.display());
    }
    Ok(hosts)
}

fn level(a: &Host, b: &Host) -> PingLevel {
    if a.tor.is_some() && a.tor == b.tor {
        PingLevel::Tor
    } else if a.pod.is_some() && a.pod == b.pod {
        PingLevel::Pod
    } else {
        PingLevel::Fabric
    }
}

/// One probe's JSON line.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ProbeLine {
    t_ms: f64,
    src: IpAddr,
    dst: IpAddr,
    level: String,
    rtt_us: Option<f64>,
    status: String,
}

/// The summary with the hosts named: `hosts[i]` is server `i`.
#[derive(Debug, serde::Serialize)]
struct Summary<'a> {
    hosts: Vec<IpAddr>,
    #[serde(flatten)]
    report: &'a PingmeshReport,
}

/// The probes' queue-pair attributes (both ends).
fn qp_attr() -> QpAttr {
    QpAttr {
        path_mtu: 1024,
        max_dest_rd_atomic: 1,
        max_rd_atomic: 1,
        min_rnr_timer: 12,
        // 4.096 µs × 2^12 ≈ 17 ms, 7 retries: a dead peer fails a probe in ~130 ms.
        timeout: 12,
        retry_cnt: 7,
        rnr_retry: 7,
        access: Access::REMOTE_WRITE.with(Access::LOCAL_WRITE),
        ..QpAttr::default()
    }
}

/// A queue pair for one probing connection (either end), in INIT.
fn probe_qp(pd: &Pd, cq: &irn_verbs::Cq, mode: QpMode) -> Result<Qp> {
    let qp = pd.create_qp(
        cq,
        cq,
        QpInit {
            mode,
            max_send_wr: 4,
            max_recv_wr: 4,
            ..QpInit::default()
        },
    )?;
    qp.init(&qp_attr())?;
    Ok(qp)
}

/// The responder side of one prober's connection: kept alive while the agent runs.
struct Served {
    _qp: Qp,
}

/// Answers one prober: `irn-pingmesh QPN PSN GID` → a connected queue pair, `QPN PSN RKEY
/// ADDR`. The prober names its own address: the connection's source address need not be the
/// one its device sends from (a multi-homed host, or loopback).
fn serve_one(
    s: TcpStream,
    pd: &Pd,
    cq: &irn_verbs::Cq,
    mr: &Mr,
    mode: QpMode,
    udp_port: u16,
) -> Result<Served> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let peer = match s.peer_addr()?.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let (qpn, psn, gid) = match w.as_slice() {
        ["irn-pingmesh", q, p, g] => (q.parse::<u32>()?, p.parse::<u32>()?, g.parse::<IpAddr>()?),
        _ => bail!("{peer}: not a Pingmesh request: {line:?}"),
    };
    let qp = probe_qp(pd, cq, mode)?;
    let my_psn = irn_verbs::random_psn();
    qp.connect(
        &qp_attr(),
        &RemoteQp {
            gid: Gid::from(gid),
            port: udp_port,
            qpn,
            psn,
        },
        my_psn,
    )?;
    let mut s = s;
    writeln!(s, "{} {} {} {}", qp.qpn(), my_psn, mr.rkey(), mr.addr())?;
    Ok(Served { _qp: qp })
}

/// The prober's side of one peer: a connected queue pair and where to write.
struct Link {
    qp: Qp,
    remote: Remote,
}

fn connect(
    pd: &Pd,
    cq: &irn_verbs::Cq,
    me: IpAddr,
    peer: IpAddr,
    args: &PingmeshArgs,
) -> Result<Link> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::new(peer, args.port),
        Duration::from_millis(args.timeout_ms),
    )?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let qp = probe_qp(pd, cq, args.mode)?;
    let my_psn = irn_verbs::random_psn();
    writeln!(s, "irn-pingmesh {} {my_psn} {me}", qp.qpn())?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let w: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("{peer}: bad answer {line:?}"))?;
    let [qpn, psn, rkey, addr] = w.as_slice() else {
        bail!("{peer}: bad answer {line:?}");
    };
    qp.connect(
        &qp_attr(),
        &RemoteQp {
            gid: Gid::from(peer),
            port: args.link.udp_port,
            qpn: *qpn as u32,
            psn: *psn as u32,
        },
        my_psn,
    )?;
    Ok(Link {
        qp,
        remote: Remote {
            addr: *addr,
            rkey: *rkey as u32,
        },
    })
}

/// One probe over `link`: the RTT in µs, or the error's name (and the link is then useless).
fn probe(
    link: &Link,
    cq: &irn_verbs::Cq,
    mr: &Mr,
    size: u32,
    timeout: Duration,
    id: u64,
) -> Result<f64, String> {
    let t0 = Instant::now();
    link.qp
        .post_send(SendWr {
            wr_id: id,
            op: SendOp::Write(link.remote),
            sg_list: irn_verbs::sgl![mr.sge(0, size)],
            signaled: true,
            fence: false,
            solicited: false,
        })
        .map_err(|e| format!("POST_FAILED: {e}"))?;
    loop {
        let left = timeout.saturating_sub(t0.elapsed());
        match cq.wait(left) {
            Ok(Some(wc)) if wc.wr_id == id => {
                return if wc.status == WcStatus::Success {
                    Ok(t0.elapsed().as_secs_f64() * 1e6)
                } else {
                    Err(wc.status.to_string())
                };
            }
            // A late completion of an earlier, timed-out probe: not this one.
            Ok(Some(_)) => continue,
            Ok(None) => return Err("TIMEOUT".into()),
            Err(e) => return Err(format!("CQ_ERROR: {e}")),
        }
    }
}

fn whoami(hosts: &[Host], me: Option<IpAddr>) -> Result<usize> {
    if let Some(me) = me {
        return hosts
            .iter()
            .position(|h| h.addr == me)
            .with_context(|| format!("--me {me} is not in the host list"));
    }
    hosts
        .iter()
        .position(|h| UdpSocket::bind((h.addr, 0)).is_ok())
        .context("no address of the host list is this machine's (give --me)")
}

pub fn run(args: PingmeshArgs) -> Result<bool> {
    if !args.summarize.is_empty() {
        return summarize(&args.summarize, args.summary.as_deref(), args.slow_us);
    }
    crate::link::check_runtime_mode(args.mode)?;
    args.link.check()?;
    let hosts_path = args.hosts.clone().context("--hosts is required")?;
    let hosts = parse_hosts(&hosts_path)?;
    let me = whoami(&hosts, args.me)?;
    if args.size == 0 || args.size > 1 << 20 {
        usage!("--size must be 1 B – 1 MiB, not {}", args.size);
    }
    if !(args.duration_s.is_finite() && args.duration_s > 0.0) || args.interval_ms == 0 {
        usage!("--duration-s and --interval-ms must be positive");
    }
    let ip = hosts[me].addr;
    let dev = Device::open(device_config(ip, args.link.udp_port, &args.link)?)
        .with_context(|| format!("opening a device on {ip} port {}", args.link.udp_port))?;
    let pd = dev.alloc_pd();
    let serve_cq = dev.create_cq(16)?;
    let probe_cq = dev.create_cq(64)?;
    let target = pd.reg_mr(
        args.size as usize,
        Access::REMOTE_WRITE.with(Access::LOCAL_WRITE),
    )?;
    let source = pd.reg_mr(args.size as usize, Access::LOCAL_WRITE)?;
    let listener = TcpListener::bind((ip, args.port))
        .with_context(|| format!("listening on {ip}:{}", args.port))?;
    listener.set_nonblocking(true)?;
    let done = AtomicBool::new(false);
    let served: Mutex<Vec<Served>> = Mutex::new(Vec::new());
    let mut out: Box<dyn std::io::Write> = match &args.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout()),
    };
    let mut outcomes = Vec::new();
    std::thread::scope(|sc| -> Result<()> {
        sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        match serve_one(s, &pd, &serve_cq, &target, args.mode, args.link.udp_port) {
                            Ok(q) => served.lock().expect("not poisoned").push(q),
                            Err(e) => eprintln!("pingmesh: serving: {e:#}"),
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let interval = Duration::from_millis(args.interval_ms);
        let timeout = Duration::from_millis(args.timeout_ms);
        let mut links: BTreeMap<usize, Link> = BTreeMap::new();
        // Agents start at about the same time, not at once: give each peer's agent a few
        // seconds to listen before the first round counts its silence as a failure.
        let grace = Instant::now() + Duration::from_secs(5);
        for (j, peer) in hosts.iter().enumerate() {
            while j != me && !links.contains_key(&j) && Instant::now() < grace {
                match connect(&pd, &probe_cq, ip, peer.addr, &args) {
                    Ok(l) => {
                        links.insert(j, l);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        let start = Instant::now();
        let stop = start + Duration::from_secs_f64(args.duration_s);
        let mut next = start;
        let mut id = 0u64;
        while Instant::now() < stop {
            for (j, peer) in hosts.iter().enumerate() {
                if j == me {
                    continue;
                }
                // Microsecond resolution, so the JSON says 0.59, not 0.5899999999999999.
                let t_ms = start.elapsed().as_micros() as f64 / 1e3;
                if let std::collections::btree_map::Entry::Vacant(e) = links.entry(j) {
                    if let Ok(l) = connect(&pd, &probe_cq, ip, peer.addr, &args) {
                        e.insert(l);
                    }
                }
                id += 1;
                let result = match links.get(&j) {
                    Some(l) => probe(l, &probe_cq, &source, args.size, timeout, id),
                    None => Err("CONNECT_FAILED".into()),
                };
                if result.is_err() {
                    links.remove(&j);
                }
                let lvl = level(&hosts[me], peer);
                let line = ProbeLine {
                    t_ms,
                    src: ip,
                    dst: peer.addr,
                    level: lvl.name().into(),
                    rtt_us: result.as_ref().ok().copied(),
                    status: match &result {
                        Ok(_) => WcStatus::Success.to_string(),
                        Err(e) => e.clone(),
                    },
                };
                writeln!(out, "{}", serde_json::to_string(&line)?)?;
                outcomes.push(ProbeOutcome {
                    src: me as u32,
                    dst: j as u32,
                    level: lvl,
                    result,
                });
            }
            next += interval;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        out.flush()?;
        // Serve a little longer: the other agents may still be probing.
        std::thread::sleep(Duration::from_secs(2).min(timeout * 4));
        done.store(true, Ordering::Relaxed);
        Ok(())
    })?;
    let report = pingmesh_summary(&outcomes, args.slow_us);
    let addrs: Vec<IpAddr> = hosts.iter().map(|h| h.addr).collect();
    print_summary(&format!("{ip}"), &addrs, &report, args.summary.as_deref())?;
    drop(served);
    Ok(true)
}

fn print_summary(
    who: &str,
    hosts: &[IpAddr],
    report: &PingmeshReport,
    json: Option<&Path>,
) -> Result<()> {
    let name = |i: u32| {
        hosts
            .get(i as usize)
            .map_or(i.to_string(), IpAddr::to_string)
    };
    eprintln!(
        "pingmesh, {who}: {} probes, {} failed",
        report.probes, report.failed
    );
    eprintln!("  level    probes  failed   p50 µs   p90 µs   p99 µs p99.9 µs   max µs");
    for l in &report.levels {
        // A level whose every probe failed has no RTT to report: dashes, not zeros.
        let rtt = |v: f64| {
            if l.failed < l.probes {
                format!("{v:>8.1}")
            } else {
                format!("{:>8}", "–")
            }
        };
        eprintln!(
            "  {:<7} {:>7} {:>7} {} {} {} {} {}",
            l.level,
            l.probes,
            l.failed,
            rtt(l.p50_us),
            rtt(l.p90_us),
            rtt(l.p99_us),
            rtt(l.p999_us),
            rtt(l.max_us)
        );
    }
    if !report.errors.is_empty() {
        let e: Vec<String> = report
            .errors
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        eprintln!("  errors: {}", e.join(", "));
    }
    if report.suspects.is_empty() {
        eprintln!("  suspects: none");
    }
    for s in &report.suspects {
        eprintln!("  suspect: {}: {}", name(s.server), s.reason);
    }
    if let Some(p) = json {
        let s = Summary {
            hosts: hosts.to_vec(),
            report,
        };
        std::fs::write(p, serde_json::to_string_pretty(&s)? + "\n")
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// The fabric-wide summary of every agent's JSON lines: hosts numbered in order of first
/// appearance.
fn summarize(files: &[PathBuf], json: Option<&Path>, slow_us: f64) -> Result<bool> {
    let mut hosts: Vec<IpAddr> = Vec::new();
    let index = |a: IpAddr, hosts: &mut Vec<IpAddr>| -> u32 {
        match hosts.iter().position(|&h| h == a) {
            Some(i) => i as u32,
            None => {
                hosts.push(a);
                (hosts.len() - 1) as u32
            }
        }
    };
    let mut outcomes = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let p: ProbeLine = serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not a probe line", f.display(), i + 1))?;
            let level = match p.level.as_str() {
                "tor" => PingLevel::Tor,
                "pod" => PingLevel::Pod,
                "fabric" => PingLevel::Fabric,
                other => usage!("{}:{}: unknown level {other}", f.display(), i + 1),
            };
            let (src, dst) = (index(p.src, &mut hosts), index(p.dst, &mut hosts));
            outcomes.push(ProbeOutcome {
                src,
                dst,
                level,
                result: match p.rtt_us {
                    Some(r) if p.status == WcStatus::Success.to_string() => Ok(r),
                    _ => Err(p.status),
                },
            });
        }
    }
    let report = pingmesh_summary(&outcomes, slow_us);
    print_summary("all agents", &hosts, &report, json)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn hosts_file(tag: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("irn-tools-pingmesh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(tag);
        std::fs::write(&path, text).expect("hosts file");
        path
    }

    #[test]
    fn a_hosts_file_gives_each_pair_its_level() {
        let path = hosts_file(
            "good",
            "# three hosts\n10.0.0.1 tor=a pod=p\n10.0.0.2 tor=a pod=p  # same rack\n\n\
             10.0.1.1 tor=b pod=p\n10.1.0.1 tor=c pod=q\n",
        );
        let h = parse_hosts(&path).expect("parses");
        assert_eq!(h.len(), 4);
        assert_eq!(level(&h[0], &h[1]), PingLevel::Tor);
        assert_eq!(level(&h[0], &h[2]), PingLevel::Pod);
        assert_eq!(level(&h[0], &h[3]), PingLevel::Fabric);
        assert_eq!(whoami(&h, Some(h[2].addr)).expect("listed"), 2);
        assert!(whoami(&h, Some("10.9.9.9".parse().expect("ip"))).is_err());
    }

    #[test]
    fn a_bad_hosts_file_is_refused_at_its_line() {
        for (tag, text, says) in [
            (
                "twice",
                "10.0.0.1\n10.0.0.1\n",
                ":2: 10.0.0.1 is listed twice",
            ),
            (
                "word",
                "10.0.0.1 rack=3\n10.0.0.2\n",
                ":1: `rack=3` is not tor=NAME",
            ),
            ("alone", "10.0.0.1\n", "a mesh needs at least two hosts"),
        ] {
            let e = parse_hosts(&hosts_file(tag, text)).expect_err(tag);
            assert!(
                matches!(&e, Error::Usage(m) if m.contains(says)),
                "{tag}: {e}"
            );
        }
        let e = parse_hosts(&hosts_file("addr", "10.0.0.x\n10.0.0.2\n")).expect_err("addr");
        assert!(e.to_string().ends_with(":1: not an IP address"), "{e}");
        assert!(matches!(e.root(), Error::Parse(_)));
    }
}
