//! `irn drp`: the Dynamic RDMA Protocol (SPEC T10, seed 003) between real hosts, over raw
//! Ethernet (EtherType 0x01FF) through an `AF_PACKET` socket. Both ends run the sans-IO
//! [`irn_transport::drp::DrpEndpoint`] the simulator runs; this file is the clock, the socket
//! and the upper layers.
//!
//! * `irn drp --iface IF` is the responder: it serves writes and reads into its memory
//!   (`--memory` bytes), and its upper layer registers each requested region after
//!   `--registration-us`, failing with probability `--frp` (and always for a region outside the
//!   memory). It serves any number of initiators, one endpoint per peer MAC, until interrupted,
//!   or — with `--count N` — until it has served N writes and the link has been quiet for a
//!   second (so that read-backs of the last write are served too).
//! * `irn drp --iface IF PEER_MAC` is the initiator: `--count` writes of `--size` bytes of
//!   seeded random data, one after another; each is read back into a second buffer and compared
//!   (unless `--no-verify`). It prints each transfer's time and, last, the average; exit status
//!   0 only if every transfer completed and every byte came back intact.
//!
//! `--loss P` drops each frame this end sends with probability P, on top of whatever the link
//! does. Loss and registration failures are drawn per frame and per registration from `--seed`
//! ([`Draws`]), so runs of the two modes with one seed meet the same losses and failures. `--pcap FILE` captures every DRP frame sent and received as Ethernet
//! (link type 1), which `irn decode` reads.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Context, Error, Result};
use crate::{bail, usage};

use irn_transport::drp::{
    DrpConfig, DrpEndpoint, DrpEvent, DrpMode, DrpOp, DrpRole, DrpStatus, TransferMode,
};
use irn_transport::rng::mix;
use irn_transport::{Dur, Time};
use irn_verbs::drp::{fill_seeded, Clock, Draws, DrpLink, ETHERTYPE_DRP};
use irn_verbs::packet::{parse_mac, PacketSocket};
use irn_wire::ethernet::MacAddr;

/// Options of `irn drp`.
#[derive(clap::Args)]
pub struct DrpArgs {
    /// The interface to run on (a veth end, a NIC).
    #[arg(long)]
    pub iface: String,
    /// The responder's MAC address: given, this end is the initiator; absent, the responder.
    pub peer: Option<String>,
    /// Traditional (always wait for a valid set-up reply) or dynamic RDMA.
    #[arg(long, default_value = "dynamic")]
    pub mode: DrpMode,
    /// Failed-registration probability of this end's upper layer (the responder registers).
    #[arg(long, default_value_t = 0.0)]
    pub frp: f64,
    /// Probability of dropping each frame this end sends.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Bytes per transfer.
    #[arg(long, default_value_t = 128 * 1024)]
    pub size: u64,
    /// Initiator: transfers to make (default 100). Responder: exit after serving this many
    /// writes (default: serve until interrupted).
    #[arg(long)]
    pub count: Option<u32>,
    /// Payload bytes per data frame.
    #[arg(long, default_value_t = 1024)]
    pub payload: u32,
    /// Capture every DRP frame sent and received (pcap, Ethernet).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Seed of the data, the loss and the registration failures.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The responder's registration time, µs.
    #[arg(long, default_value_t = 50.0)]
    pub registration_us: f64,
    /// Set-up and release retransmit timer, µs (longer than the simulator's 500: a user-space
    /// endpoint on a busy host sees scheduling delays of a few hundred µs).
    #[arg(long, default_value_t = 2000.0)]
    pub setup_timeout_us: f64,
    /// Data retransmit timer, µs (the simulator's is 200).
    #[arg(long, default_value_t = 1000.0)]
    pub data_timeout_us: f64,
    /// The responder's memory, bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub memory: usize,
    /// Do not read each write back to compare it.
    #[arg(long)]
    pub no_verify: bool,
    /// Write the transfers' times and the summary as JSON.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
}

fn micros(v: f64, flag: &str) -> Result<Dur> {
    if !(v >= 0.0 && v.is_finite()) {
        usage!("{flag} must be zero or positive, not {v}");
    }
    Ok(Dur::from_picos((v * 1e6).round() as u64))
}

fn endpoint_config(a: &DrpArgs) -> Result<DrpConfig> {
    let mut c = DrpConfig::seed(a.mode);
    c.payload = a.payload;
    c.setup_timeout = micros(a.setup_timeout_us, "--setup-timeout-us")?;
    c.data_timeout = micros(a.data_timeout_us, "--data-timeout-us")?;
    c.validate()?;
    Ok(c)
}

fn open_link(a: &DrpArgs) -> Result<DrpLink> {
    let sock = PacketSocket::open(&a.iface, ETHERTYPE_DRP).map_err(|e| {
        // The privilege is named only when it is what was missing (not for an interface
        // that does not exist).
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (needs CAP_NET_RAW: root or a namespace of one's own)"
        } else {
            ""
        };
        Error::Context {
            what: format!("opening a raw Ethernet socket on {}{hint}", a.iface),
            source: Box::new(e.into()),
        }
    })?;
    let frame = irn_wire::drp::HEADER_LEN + a.payload as usize;
    if frame > sock.mtu() {
        usage!(
            "--payload {} makes {frame}-byte DRP frames, more than {}'s MTU of {} bytes",
            a.payload,
            a.iface,
            sock.mtu()
        );
    }
    if !(0.0..1.0).contains(&a.loss) {
        usage!("--loss must be in [0, 1), not {}", a.loss);
    }
    if !(0.0..=1.0).contains(&a.frp) {
        usage!("--frp must be in [0, 1], not {}", a.frp);
    }
    DrpLink::new(sock, a.pcap.as_deref(), a.loss, a.seed)
        .with_context(|| format!("creating the capture {:?}", a.pcap))
}

/// A registration the upper layer will answer.
struct PendingReg {
    at: Time,
    peer: [u8; 6],
    tid: u32,
    ok: bool,
}

fn mode_name(m: TransferMode) -> &'static str {
    match m {
        TransferMode::Direct => "direct",
        TransferMode::Indirect => "indirect",
    }
}

pub fn run(a: DrpArgs) -> Result<bool> {
    let cfg = endpoint_config(&a)?;
    match a.peer.clone() {
        None => responder(&a, cfg),
        Some(p) => {
            let Some(peer) = parse_mac(&p) else {
                usage!("`{p}` is not a MAC address");
            };
            initiator(&a, cfg, peer)
        }
    }
}

fn responder(a: &DrpArgs, cfg: DrpConfig) -> Result<bool> {
    let mut link = open_link(a)?;
    let clock = Clock::start();
    let mut reg_draws = Draws::new(a.seed, 2);
    // Per peer, its first TID: registration failures are drawn by TID counted from there, so
    // runs whose TIDs start elsewhere meet the same failures.
    let mut reg_base: BTreeMap<[u8; 6], u32> = BTreeMap::new();
    let reg_delay = micros(a.registration_us, "--registration-us")?;
    let mut peers: BTreeMap<[u8; 6], DrpEndpoint> = BTreeMap::new();
    let mut heard: BTreeMap<[u8; 6], Instant> = BTreeMap::new();
    let mut regs: Vec<PendingReg> = Vec::new();
    let mut served_writes = 0u32;
    let mut last_frame = Instant::now();
    let mut buf = vec![0u8; 65536];
    let stdout = std::io::stdout();
    println!(
        "irn drp: responder on {} ({}), {} mode, memory {} B",
        a.iface,
        link.sock().mac(),
        a.mode.name(),
        a.memory
    );
    loop {
        let now = clock.now();
        // The upper layer's registrations that are due.
        let mut i = 0;
        while i < regs.len() {
            if regs[i].at <= now {
                let r = regs.swap_remove(i);
                if let Some(ep) = peers.get_mut(&r.peer) {
                    ep.registration_done(now, r.tid, r.ok);
                }
            } else {
                i += 1;
            }
        }
        for (mac, ep) in peers.iter_mut() {
            if ep.poll_timeout().is_some_and(|t| t <= now) {
                ep.handle_timeout(now);
            }
            while let Some(ev) = ep.poll_event() {
                match ev {
                    DrpEvent::Register { tid, addr, len, .. } => {
                        let fits = addr.checked_add(len).is_some_and(|e| e <= a.memory as u64);
                        regs.push(PendingReg {
                            at: now + reg_delay,
                            peer: *mac,
                            tid,
                            ok: fits && {
                                let base = *reg_base.entry(*mac).or_insert(tid);
                                !reg_draws.chance(mix(u64::from(tid.wrapping_sub(base))), a.frp)
                            },
                        });
                    }
                    DrpEvent::Complete(c) if c.role == DrpRole::Responder => {
                        let range = c.dba as usize..(c.dba + c.len) as usize;
                        let crc = crc32fast::hash(&ep.memory()[range]);
                        if c.op == DrpOp::Write {
                            served_writes += 1;
                        }
                        let mut out = stdout.lock();
                        writeln!(
                            out,
                            "served {} tid {} from {}: {} B at {:#x} ({}) crc32 {crc:08x}",
                            if c.op == DrpOp::Write {
                                "write"
                            } else {
                                "read"
                            },
                            c.tid,
                            MacAddr(*mac),
                            c.len,
                            c.dba,
                            mode_name(c.mode)
                        )?;
                        out.flush()?;
                    }
                    _ => {}
                }
            }
            link.flush(ep, MacAddr(*mac), now)?;
        }
        // A peer with nothing in progress and silent for a minute is forgotten (its memory freed).
        peers.retain(|mac, ep| {
            ep.active() > 0
                || heard
                    .get(mac)
                    .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        });
        heard.retain(|mac, _| peers.contains_key(mac));
        reg_base.retain(|mac, _| peers.contains_key(mac));
        if a.count
            .is_some_and(|n| served_writes >= n && last_frame.elapsed() > Duration::from_secs(1))
        {
            break;
        }
        let deadline = peers
            .values()
            .filter_map(DrpEndpoint::poll_timeout)
            .chain(regs.iter().map(|r| r.at))
            .min();
        let wait = deadline
            .map_or(Duration::from_millis(100), |t| clock.until(t))
            .min(Duration::from_millis(100));
        if let Some(n) = link.sock().recv(&mut buf, wait)? {
            last_frame = Instant::now();
            let frame = &buf[..n];
            link.capture(frame);
            if n < 14 || frame[12..14] != ETHERTYPE_DRP.to_be_bytes() {
                continue;
            }
            let mut src = [0u8; 6];
            src.copy_from_slice(&frame[6..12]);
            heard.insert(src, Instant::now());
            let ep = match peers.entry(src) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(DrpEndpoint::new(cfg.clone(), a.memory)?)
                }
            };
            ep.handle_frame(clock.now(), &frame[14..]);
        }
    }
    let mut out = stdout.lock();
    for (mac, ep) in &peers {
        writeln!(out, "peer {}: {:?}", MacAddr(*mac), ep.counters())?;
    }
    writeln!(
        out,
        "served {served_writes} writes; dropped {} frames (--loss)",
        link.dropped()
    )?;
    Ok(true)
}

/// One transfer's record.
#[derive(serde::Serialize)]
struct Record {
    transfer: u32,
    us: f64,
    status: &'static str,
    mode: &'static str,
    setup_attempts: u32,
    retransmitted: u64,
    verified: Option<bool>,
}

fn initiator(a: &DrpArgs, cfg: DrpConfig, peer: MacAddr) -> Result<bool> {
    let count = a.count.unwrap_or(100);
    let size = a.size;
    let mem = usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_mul(2))
        .ok_or_else(|| Error::Usage(format!("--size {size} is too large")))?;
    let mut link = open_link(a)?;
    let mut ep = DrpEndpoint::new(cfg, mem.max(1))?;
    // A fresh TID space per run, so that a responder that outlives us does not take our
    // transfers for duplicates of the last run's.
    let clock_bits = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    ep.set_next_tid(mix(clock_bits ^ u64::from(std::process::id())) as u32);
    let clock = Clock::start();
    let verify = !a.no_verify;
    let mut buf = vec![0u8; 65536];
    let mut records: Vec<Record> = Vec::new();
    let stdout = std::io::stdout();
    println!(
        "irn drp: initiator on {} ({}) to {peer}, {} mode, {count} writes of {size} B in {} B \
         frames, loss {}",
        a.iface,
        link.sock().mac(),
        a.mode.name(),
        a.payload,
        a.loss
    );
    // Transfer i's data: seeded random bytes.
    let fill = |ep: &mut DrpEndpoint, i: u32| {
        fill_seeded(
            &mut ep.memory_mut()[..size as usize],
            a.seed,
            1000 + u64::from(i),
        );
        ep.memory_mut()[size as usize..].fill(0);
    };
    let mut i = 0u32;
    let mut reading_back = false;
    let mut idle_since = Instant::now();
    if count > 0 {
        fill(&mut ep, 0);
        ep.post_write(clock.now(), 0, 0, size)?;
    }
    while i < count {
        let now = clock.now();
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        while let Some(ev) = ep.poll_event() {
            let DrpEvent::Complete(c) = ev else { continue };
            idle_since = Instant::now();
            if c.op == DrpOp::Read {
                // The read-back of write i.
                let n = size as usize;
                let ok =
                    c.status == DrpStatus::Success && ep.memory()[..n] == ep.memory()[n..2 * n];
                if let Some(r) = records.last_mut() {
                    r.verified = Some(ok);
                }
                if !ok {
                    println!("transfer {}: read-back differs or failed", i + 1);
                }
                reading_back = false;
            } else {
                let us = c.finished.since(c.started).as_picos() as f64 / 1e6;
                let ok = c.status == DrpStatus::Success;
                let crc = crc32fast::hash(&ep.memory()[..size as usize]);
                let mut out = stdout.lock();
                writeln!(
                    out,
                    "transfer {}: {us:.1} µs ({}{}, {} set-up requests, {} frames resent) crc32 \
                     {crc:08x}",
                    i + 1,
                    mode_name(c.mode),
                    if ok { "" } else { ", FAILED: retries exceeded" },
                    c.setup_attempts,
                    c.retransmitted
                )?;
                out.flush()?;
                records.push(Record {
                    transfer: i + 1,
                    us,
                    status: if ok { "success" } else { "retry-exceeded" },
                    mode: mode_name(c.mode),
                    setup_attempts: c.setup_attempts,
                    retransmitted: c.retransmitted,
                    verified: None,
                });
                if verify && ok {
                    ep.post_read(now, size, 0, size)?;
                    reading_back = true;
                }
            }
            if !reading_back {
                i += 1;
                if i < count {
                    fill(&mut ep, i);
                    ep.post_write(now, 0, 0, size)?;
                }
            }
        }
        link.flush(&mut ep, peer, now)?;
        if i >= count {
            break;
        }
        let wait = ep
            .poll_timeout()
            .map_or(Duration::from_millis(100), |t| clock.until(t))
            .min(Duration::from_millis(100));
        if let Some(n) = link.sock().recv(&mut buf, wait)? {
            let frame = &buf[..n];
            if n >= 14 && frame[6..12] == peer.0 && frame[12..14] == ETHERTYPE_DRP.to_be_bytes() {
                link.capture(frame);
                ep.handle_frame(clock.now(), &frame[14..]);
            }
        }
        if idle_since.elapsed() > Duration::from_secs(30) {
            bail!(
                "no transfer completed for 30 s (is the responder running on {peer}?); {} of \
                 {count} done",
                i
            );
        }
    }
    let done: Vec<&Record> = records.iter().filter(|r| r.status == "success").collect();
    let avg = done.iter().map(|r| r.us).sum::<f64>() / (done.len().max(1) as f64);
    let failed = records.len() - done.len();
    let bad = records.iter().filter(|r| r.verified == Some(false)).count();
    let indirect = records.iter().filter(|r| r.mode == "indirect").count();
    let verdict = if !verify {
        "not checked".to_string()
    } else if bad == 0 {
        "ok".to_string()
    } else {
        format!("FAILED ({bad} differ)")
    };
    println!(
        "average: {avg:.1} µs over {} transfers ({} mode, {indirect} indirect, {failed} failed); \
         verify: {verdict}; dropped {} frames (--loss)",
        done.len(),
        a.mode.name(),
        link.dropped()
    );
    println!("counters: {:?}", ep.counters());
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "mode": a.mode.name(),
            "size": size,
            "payload": a.payload,
            "loss": a.loss,
            "count": count,
            "average_us": avg,
            "failed": failed,
            "corrupted": bad,
            "indirect": indirect,
            "transfers": records,
        });
        let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(&mut f, &doc)?;
        writeln!(f)?;
    }
    Ok(failed == 0 && bad == 0 && records.len() == count as usize)
}
