//! The device: one UDP socket, the queue pairs, memory and completion queues behind it, and the
//! engine thread that receives packets and runs timers.
//!
//! # Concurrency
//!
//! Everything mutable lives in one [`Core`] behind a mutex. Application threads lock it to post
//! work and then transmit what the queue pair has to send *on their own thread* (no hand-off,
//! so a post costs no context switch); the engine thread blocks in `poll(2)` on the socket with
//! the earliest queue-pair deadline as timeout, then locks the core to hand it a burst of
//! received packets, fire expired timers and transmit the answers. Completions go to their CQ,
//! and a condition variable wakes the threads blocked in [`Cq::wait`].
//!
//! # Wire
//!
//! Packets leave through an unconnected UDP socket whose IPv4 ID is predictable, so their ICRC
//! is right; they arrive through that socket (unprivileged) or a raw socket (privileged, every
//! ICRC verified). The `net` module has the details ([`ReceivePath`]). Either way the engine
//! handles whole IP packets: on the UDP path their headers are rebuilt in front of the payload.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use irn_transport::{
    Access, AttrMask, ByteMemory, Completion, Counters, Dur, MemError, ModifyError, PostError,
    QpAttr, QpConfig, QpState, QueuePair, RecoveryConfig, RecvWr, SendWr, Sge, Time, Transmit,
    WcOpcode,
};
use irn_wire::{Ecn, IbRepr, RoceRepr};

use irn_wire::udp::HEADER_LEN as UDP_LEN;

use crate::capture::Capture;
use crate::impair::{Fate, Impairment, Rng};
use crate::net::{self, ReceivePath, Reject, RxBatch, Sockets};
use crate::Gid;

/// The UDP port of RoCEv2 (IANA).
pub const ROCE_PORT: u16 = irn_wire::ROCEV2_PORT;

/// In-flight bound of a RoCE-mode queue pair, as Linux rxe's.
const ROCE_MAX_UNACKED_PSNS: u32 = 128;

/// Largest IP packet handled: a 4096-byte MTU packet with every header.
const MAX_DATAGRAM: usize = 4096 + 128;
/// Packets received per lock of the core.
const RX_BURST: usize = 64;
/// Packets one queue pair sends per turn. Bounding the turn keeps the lock short, so ACKs and
/// NAKs are processed while a deep send queue drains (without it, a go-back-N sender with
/// thousands of packets posted would send them all before hearing that the first was lost,
/// and its retransmission timer would expire behind its own burst), and shares the link
/// fairly among queue pairs.
const TX_BURST: usize = 32;
/// Bytes of one packet slot of a transmit batch.
const SLOT: usize = MAX_DATAGRAM + 64;
/// The engine thread wakes at least this often (to notice a closed device).
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// How a device is opened.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Local address to bind (IPv4 or IPv6). Peers name this device by its GID, derived from it.
    pub addr: IpAddr,
    /// UDP port to bind and to send from; 4791 for interoperability, 0 for any free port
    /// (tests running side by side).
    pub port: u16,
    /// Impairment of packets this device sends.
    pub tx_impairment: Impairment,
    /// Impairment of packets this device receives.
    pub rx_impairment: Impairment,
    /// Seed of the impairment draws (the keys are always from the OS's random source).
    pub seed: u64,
    /// Capture every packet sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Socket buffer sizes in bytes (0 = the system default).
    pub socket_buffer: usize,
    /// How packets are received: through the UDP socket, or a raw socket that sees (and so
    /// verifies the ICRC of) every packet whole. [`ReceivePath::Auto`] takes the raw path
    /// when the process may.
    pub receive: ReceivePath,
}

impl DeviceConfig {
    /// Defaults on `addr`: port 4791, no impairment, no capture, 4 MB socket buffers, the
    /// raw receive path if permitted.
    pub fn new(addr: IpAddr) -> DeviceConfig {
        DeviceConfig {
            addr,
            port: ROCE_PORT,
            tx_impairment: Impairment::default(),
            rx_impairment: Impairment::default(),
            seed: 1,
            pcap: None,
            socket_buffer: 4 << 20,
            receive: ReceivePath::Auto,
        }
    }
}

/// Loss recovery of a queue pair; both ends must use the same (agreed out of band): any of
/// irn-transport's [`RecoveryMode`](irn_transport::RecoveryMode)s, by the same names as the
/// simulator's (`roce`, `irn`, and the factor-analysis variants).
pub use irn_transport::RecoveryMode as QpMode;

/// The recovery configuration of `mode` for a runtime on real hosts. The RoCE modes time out
/// as the `timeout` attribute says (rxe does the same). IRN's RTO_low / RTO_high are the
/// paper's 100 / 320 µs stretched to 500 µs / 2 ms, because a user-space engine is woken by the
/// kernel's scheduler, whose latency is tens of microseconds, not a NIC's nanoseconds; IRN's
/// BDP-FC cap (where the mode has one) is the bandwidth-delay product of `line_rate_bps` over
/// a 100 µs software round trip in 1 KB packets.
pub fn runtime_recovery(mode: QpMode, line_rate_bps: u64) -> RecoveryConfig {
    let preset = mode.preset();
    if mode.is_irn() {
        RecoveryConfig {
            rto: irn_transport::RtoPolicy::Irn {
                low: Dur::from_micros(500),
                high: Dur::from_micros(2_000),
                n: 3,
            },
            bdp_cap: preset.bdp_cap.map(|_| {
                irn_transport::bdp_cap_packets(line_rate_bps, Dur::from_micros(100), 1024)
            }),
            ..preset
        }
    } else {
        RecoveryConfig {
            rto: irn_transport::RtoPolicy::FromAttr,
            // Linux rxe never has more than RXE_MAX_UNACKED_PSNS = 128 PSNs unacknowledged
            // (`rxe_param.h`, checked in `rxe_req.c`); a software receiver behind a socket
            // buffer needs the same bound, or go-back-N drowns in its own retransmissions.
            bdp_cap: Some(ROCE_MAX_UNACKED_PSNS),
            ..preset
        }
    }
}

/// Everything the verbs calls can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket or file operation failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The work request is not accepted in the queue pair's state (`EINVAL` from
    /// `ibv_post_send` in RESET/INIT, for instance).
    #[error("work request refused in queue-pair state {0}")]
    InvalidState(QpState),
    /// The send or receive queue is full (`ENOMEM`).
    #[error("work queue full")]
    QueueFull,
    /// The work request is malformed (e.g. an atomic whose buffer is not 8 bytes).
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    /// The completion queue could receive more completions than it holds (`ENOMEM`: verbs
    /// would overrun it; irn refuses the post instead).
    #[error("completion queue {0} full: poll it before posting more")]
    CqFull(u32),
    /// A completion arrived at a full completion queue; completions were lost
    /// (`IBV_EVENT_CQ_ERR`).
    #[error("completion queue {0} overran")]
    CqOverrun(u32),
    /// `modify` refused the transition or an attribute.
    #[error("{0}")]
    Modify(#[from] ModifyError),
    /// `create_qp` refused the queue pair's configuration (`EINVAL` from `ibv_create_qp`).
    #[error("queue pair configuration: {0}")]
    QpConfig(#[from] irn_transport::QpConfigError),
    /// RTR needs the peer's address.
    #[error("moving to RTR needs the remote address (GID and port)")]
    NoRemote,
    /// Memory registration failed.
    #[error("{0}")]
    Memory(#[from] MemError),
    /// A memory-region access outside the region.
    #[error("access of {len} bytes at offset {offset} outside a {size}-byte region")]
    OutOfRange {
        /// Offset asked.
        offset: u64,
        /// Length asked.
        len: u64,
        /// Region size.
        size: u64,
    },
    /// The object no longer exists (destroyed, or its device closed).
    #[error("the object was destroyed")]
    Gone,
    /// The remote address's family differs from the device's.
    #[error("remote {0} is not reachable from a device bound to {1}")]
    AddressFamily(IpAddr, IpAddr),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        match e {
            PostError::InvalidState(s) => Error::InvalidState(s),
            PostError::QueueFull => Error::QueueFull,
            PostError::InvalidWr(w) => Error::InvalidWr(w),
        }
    }
}

/// Result of the verbs calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A completion (verbs `struct ibv_wc`).
pub type Wc = Completion;

/// Device-wide counters (the driver's, next to each queue pair's own [`Counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Datagrams sent.
    pub tx_packets: u64,
    /// Bytes sent (UDP payloads).
    pub tx_bytes: u64,
    /// Datagrams received.
    pub rx_packets: u64,
    /// Bytes received (UDP payloads).
    pub rx_bytes: u64,
    /// Received datagrams that do not parse as an InfiniBand packet (dropped).
    pub rx_malformed: u64,
    /// Received packets whose ICRC is wrong (dropped, as rxe drops them). Counted only where
    /// received ICRCs can be verified: on the raw path, and for IPv6.
    pub rx_icrc_errors: u64,
    /// Received packets for a queue pair this device does not have (dropped, as rxe does).
    pub rx_unknown_qp: u64,
    /// Received packets whose source is not the queue pair's peer (dropped, as rxe does).
    pub rx_wrong_source: u64,
    /// Sends the kernel refused (buffer full, unreachable): the packet is lost.
    pub tx_errors: u64,
    /// Packets dropped by the send impairment.
    pub tx_impaired_drops: u64,
    /// Packets dropped by the receive impairment.
    pub rx_impaired_drops: u64,
    /// Packets duplicated, reordered or delayed by either impairment.
    pub impaired_other: u64,
    /// Packets written to the capture.
    pub captured: u64,
}

struct QpEntry {
    qp: QueuePair,
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    remote: Option<SocketAddr>,
}

struct CqState {
    entries: VecDeque<Wc>,
    depth: usize,
    /// Completions that may still arrive: posted receive WRs and signaled send WRs not yet
    /// completed, bounding what could land in `entries`.
    reserved: usize,
    overrun: bool,
}

struct PdState {
    mem: ByteMemory,
    /// The handle was dropped; the memory goes when its last queue pair does.
    closed: bool,
}

/// A packet held back by an impairment.
struct Held {
    at: Instant,
    /// `Some(peer)`: a packet to send to `peer`; `None`: a received one.
    to: Option<SocketAddr>,
    /// The IP packet.
    bytes: Vec<u8>,
}

/// The device's state, behind one mutex.
pub(crate) struct Core {
    local: SocketAddr,
    pds: BTreeMap<u32, PdState>,
    cqs: BTreeMap<u32, CqState>,
    qps: BTreeMap<u32, QpEntry>,
    next_id: u32,
    tx_imp: Impairment,
    rx_imp: Impairment,
    rng: Rng,
    /// Packets delayed by an impairment, released by the engine thread.
    delayed: Vec<Held>,
    /// A packet held for reordering in each direction (tx, rx).
    reorder: [Option<Held>; 2],
    /// Queue pairs whose last turn ended with packets left to send.
    tx_pending: std::collections::BTreeSet<u32>,
    counters: DeviceCounters,
    capture: Option<Capture>,
    /// Received packets carry all their ICRC covers (see [`ReceivePath`]).
    verify_icrc: bool,
    /// Packets of the current transmit turn, built in place and sent with one `sendmmsg`:
    /// `TX_BURST` slots of `SLOT` bytes.
    tx_buf: Vec<u8>,
    /// (slot, IP + UDP header length, packet length, destination) of each packet in `tx_buf`.
    tx_batch: Vec<(usize, usize, usize, SocketAddr)>,
    payload: Vec<u8>,
}

pub(crate) struct Shared {
    pub(crate) core: Mutex<Core>,
    pub(crate) cq_ready: Condvar,
    socks: Sockets,
    /// An eventfd the engine polls with the socket: application threads write it when a
    /// queue pair has more to send than its turn allowed.
    wake: rustix::fd::OwnedFd,
    epoch: Instant,
    closed: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("socks", &self.socks)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock is a bug in irn; the state is still the best there
        // is, so keep going rather than poison every later call.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Time {
        Time::from_picos(self.epoch.elapsed().as_nanos() as u64 * 1000)
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn wake_engine(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// An open device: a UDP socket with its engine thread (`ibv_open_device` + `ibv_alloc_pd`'s
/// context). Closing it (dropping) stops the engine; queue pairs left open stop moving.
pub struct Device {
    shared: Arc<Shared>,
    engine: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("local", &self.local_addr())
            .finish()
    }
}

fn random_u64() -> u64 {
    // The OS's random source: keys a peer cannot guess. Should it fail, the clock is better
    // than a constant.
    getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64)
    })
}

/// A random 24-bit packet sequence number, as verbs programs pick their first PSN.
pub fn random_psn() -> u32 {
    (random_u64() as u32) & 0x00ff_ffff
}

impl Device {
    /// Opens a device: binds the UDP socket, starts the engine thread.
    pub fn open(cfg: DeviceConfig) -> Result<Device> {
        if !cfg.tx_impairment.is_valid() || !cfg.rx_impairment.is_valid() {
            return Err(Error::Config("impairment probabilities must be in 0–1"));
        }
        let socks = Sockets::open(cfg.addr, cfg.port, cfg.receive, cfg.socket_buffer)?;
        let local = socks.local();
        let capture = cfg.pcap.as_deref().map(Capture::create).transpose()?;
        let core = Core {
            local,
            pds: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            next_id: 1,
            tx_imp: cfg.tx_impairment,
            rx_imp: cfg.rx_impairment,
            rng: Rng::from_state(cfg.seed),
            delayed: Vec::new(),
            reorder: [None, None],
            tx_pending: std::collections::BTreeSet::new(),
            counters: DeviceCounters::default(),
            capture,
            verify_icrc: socks.verifies_icrc(),
            tx_buf: vec![0; TX_BURST * SLOT],
            tx_batch: Vec::with_capacity(TX_BURST),
            payload: Vec::with_capacity(MAX_DATAGRAM),
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            cq_ready: Condvar::new(),
            socks,
            wake: rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
            )
            .map_err(io::Error::from)?,
            epoch: Instant::now(),
            closed: AtomicBool::new(false),
        });
        let s = shared.clone();
        let engine = std::thread::Builder::new()
            .name(format!("irn-engine {local}"))
            .spawn(move || engine(&s))?;
        Ok(Device {
            shared,
            engine: Some(engine),
        })
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.lock().local
    }

    /// The receive path in use ([`ReceivePath::Udp`] or [`ReceivePath::Raw`]).
    pub fn receive_path(&self) -> ReceivePath {
        self.shared.socks.path()
    }

    /// This device's GID (IPv4-mapped for an IPv4 device), what peers put in their RTR.
    pub fn gid(&self) -> Gid {
        Gid::from(self.local_addr().ip())
    }

    /// Device-wide counters.
    pub fn counters(&self) -> DeviceCounters {
        let core = self.shared.lock();
        let mut c = core.counters;
        c.captured = core.capture.as_ref().map_or(0, |cap| cap.written);
        c
    }

    /// Allocates a protection domain (`ibv_alloc_pd`): a memory space whose regions the queue
    /// pairs of the domain may access.
    pub fn alloc_pd(&self) -> Pd {
        let mut core = self.shared.lock();
        let id = core.fresh_id();
        core.pds.insert(
            id,
            PdState {
                mem: ByteMemory::new(random_u64()),
                closed: false,
            },
        );
        Pd {
            shared: self.shared.clone(),
            id,
        }
    }

    /// Creates a completion queue of `depth` entries (`ibv_create_cq`).
    pub fn create_cq(&self, depth: usize) -> Result<Cq> {
        if depth == 0 {
            return Err(Error::Config("completion queue depth must be at least 1"));
        }
        let mut core = self.shared.lock();
        let id = core.fresh_id();
        core.cqs.insert(
            id,
            CqState {
                entries: VecDeque::with_capacity(depth.min(1 << 16)),
                depth,
                reserved: 0,
                overrun: false,
            },
        );
        Ok(Cq {
            shared: self.shared.clone(),
            id,
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
        let mut core = self.shared.lock();
        core.capture = None;
        for e in core.qps.values_mut() {
            let now = self.shared.now();
            let _ =
                e.qp.modify(now, QpState::Err, &QpAttr::default(), AttrMask::NONE);
        }
        drop(core);
        self.shared.cq_ready.notify_all();
    }
}

/// A protection domain (`struct ibv_pd`).
#[derive(Debug)]
pub struct Pd {
    shared: Arc<Shared>,
    id: u32,
}

/// A memory region (`struct ibv_mr`): `len` bytes owned by the device, read and written
/// through [`Mr::read`] and [`Mr::write`], named in work requests by [`Mr::sge`] and by peers
/// through [`Mr::addr`] and [`Mr::rkey`].
#[derive(Debug)]
pub struct Mr {
    shared: Arc<Shared>,
    pd: u32,
    addr: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

/// A completion queue (`struct ibv_cq`).
#[derive(Debug)]
pub struct Cq {
    shared: Arc<Shared>,
    id: u32,
}

/// Creation parameters of a queue pair (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInit {
    /// Loss recovery.
    pub mode: QpMode,
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
    /// Link rate the congestion controller and BDP-FC assume, bits per second.
    pub line_rate_bps: u64,
}

impl Default for QpInit {
    fn default() -> Self {
        QpInit {
            mode: QpMode::Roce,
            max_send_wr: 1024,
            max_recv_wr: 1024,
            line_rate_bps: 10_000_000_000,
        }
    }
}

/// A reliable-connected queue pair (`struct ibv_qp`, `IBV_QPT_RC`). Dropping it destroys it.
#[derive(Debug)]
pub struct Qp {
    shared: Arc<Shared>,
    qpn: u32,
}

impl Core {
    fn fresh_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn cq_mut(&mut self, id: u32) -> Result<&mut CqState> {
        self.cqs.get_mut(&id).ok_or(Error::Gone)
    }

    /// Moves the completions of queue pair `qpn` to their CQs. Returns whether any moved.
    fn drain_completions(&mut self, qpn: u32) -> bool {
        let Some(e) = self.qps.get_mut(&qpn) else {
            return false;
        };
        let mut any = false;
        while let Some(wc) = e.qp.poll_completion() {
            any = true;
            let to = match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => e.recv_cq,
                _ => e.send_cq,
            };
            if let Some(cq) = self.cqs.get_mut(&to) {
                cq.reserved = cq.reserved.saturating_sub(1);
                if cq.entries.len() >= cq.depth {
                    cq.overrun = true;
                } else {
                    cq.entries.push_back(wc);
                }
            }
        }
        any
    }

    /// Gives queue pair `qpn` a turn: up to [`TX_BURST`] packets. Returns whether it may have
    /// more (then it is in `tx_pending`).
    fn transmit(&mut self, sock: &UdpSocket, now: Time, qpn: u32) -> bool {
        let mut payload = std::mem::take(&mut self.payload);
        let mut budget = TX_BURST;
        let mut more = false;
        while let Some(e) = self.qps.get_mut(&qpn) {
            if budget == 0 {
                more = true;
                break;
            }
            budget -= 1;
            let (Some(peer), Some(pd)) = (e.remote, self.pds.get(&e.pd)) else {
                break;
            };
            let Some(t) = e.qp.poll_transmit(now, &pd.mem, &mut payload) else {
                break;
            };
            let slot = self.tx_batch.len();
            let buf = &mut self.tx_buf[slot * SLOT..(slot + 1) * SLOT];
            let Some((hdr, len)) = build(buf, self.local, peer, &t, &payload) else {
                continue;
            };
            if !self.tx_imp.is_active() {
                if let Some(c) = self.capture.as_mut() {
                    c.write(&buf[..len]);
                }
                self.tx_batch.push((slot, hdr, len, peer));
                continue;
            }
            let bytes = buf[..len].to_vec();
            impair(self, sock, now, Some(peer), &bytes);
        }
        self.flush_tx(sock);
        self.payload = payload;
        if more {
            self.tx_pending.insert(qpn);
        } else {
            self.tx_pending.remove(&qpn);
        }
        more
    }

    /// Sends the packets batched in this turn, in order, with as few system calls as the
    /// socket buffer allows.
    fn flush_tx(&mut self, sock: &UdpSocket) {
        if self.tx_batch.is_empty() {
            return;
        }
        let msgs: Vec<(SocketAddr, &[u8])> = self
            .tx_batch
            .iter()
            .map(|&(slot, hdr, len, peer)| {
                (peer, &self.tx_buf[slot * SLOT + hdr..slot * SLOT + len])
            })
            .collect();
        let (sent, bytes, errors) = net::send_batch(sock, &msgs);
        self.counters.tx_packets += sent;
        self.counters.tx_bytes += bytes;
        self.counters.tx_errors += errors;
        self.tx_batch.clear();
    }

    /// Handles one received IP packet.
    fn receive(&mut self, sock: &UdpSocket, now: Time, packet: &[u8]) {
        self.counters.rx_packets += 1;
        if let Some(c) = self.capture.as_mut() {
            // Everything received, malformed or not.
            c.write(packet);
        }
        let rx = match net::split(packet, self.verify_icrc) {
            Ok(rx) => rx,
            Err(Reject::Malformed) => {
                self.counters.rx_malformed += 1;
                return;
            }
            Err(Reject::Icrc) => {
                self.counters.rx_icrc_errors += 1;
                return;
            }
        };
        self.counters.rx_bytes += rx.datagram_len as u64;
        let from = rx.from;
        let Ok((ib, payload)) = IbRepr::parse(rx.ib) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let qpn = ib.bth.dest_qpn;
        let Some(e) = self.qps.get_mut(&qpn) else {
            self.counters.rx_unknown_qp += 1;
            return;
        };
        if e.remote.is_some_and(|r| r.ip() != from.ip()) {
            self.counters.rx_wrong_source += 1;
            return;
        }
        let Some(pd) = self.pds.get_mut(&e.pd) else {
            return;
        };
        e.qp.handle_packet(now, &ib, payload, Ecn::NotEct, &mut pd.mem);
        self.transmit(sock, now, qpn);
        self.drain_completions(qpn);
    }

    /// Fires expired timers; returns the earliest deadline left.
    fn timers(&mut self, sock: &UdpSocket, now: Time) -> (bool, Option<Time>) {
        let mut any = false;
        let due: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, e)| e.qp.poll_timeout().is_some_and(|t| t <= now))
            .map(|(&q, _)| q)
            .collect();
        for qpn in due {
            if let Some(e) = self.qps.get_mut(&qpn) {
                e.qp.handle_timeout(now);
                self.transmit(sock, now, qpn);
                any |= self.drain_completions(qpn);
            }
        }
        let next = self.qps.values().filter_map(|e| e.qp.poll_timeout()).min();
        (any, next)
    }
}

/// Puts one IP packet (headers `hdr` bytes long) on the wire: its UDP payload to `peer`.
fn send_now(
    sock: &UdpSocket,
    counters: &mut DeviceCounters,
    capture: &mut Option<Capture>,
    peer: SocketAddr,
    ip_packet: &[u8],
    hdr: usize,
) {
    if let Some(c) = capture.as_mut() {
        c.write(ip_packet);
    }
    let datagram = &ip_packet[hdr..];
    loop {
        match sock.send_to(datagram, peer) {
            Ok(_) => {
                counters.tx_packets += 1;
                counters.tx_bytes += datagram.len() as u64;
                return;
            }
            // The socket buffer is full: wait for room (the kernel drains it at line rate).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => net::wait_writable(sock),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                counters.tx_errors += 1;
                return;
            }
        }
    }
}

/// Builds the IP packet of `t` from `local` to `peer` in `buf`, with the ICRC a standard
/// receiver computes; returns (IP + UDP header length, total length).
fn build(
    buf: &mut [u8],
    local: SocketAddr,
    peer: SocketAddr,
    t: &Transmit,
    payload: &[u8],
) -> Option<(usize, usize)> {
    let (ip, udp) = net::headers(local, peer)?;
    let repr = RoceRepr { ip, udp, ib: t.ib };
    let len = repr.buffer_len();
    repr.emit(buf.get_mut(..len)?, payload).ok()?;
    Some((ip.header_len() + UDP_LEN, len))
}

/// Passes an IP packet through the impairment of its direction (`to`: `Some(peer)` for a
/// packet to send, `None` for a received one): dropped, or delivered once or twice, now, held
/// back or delayed.
fn impair(core: &mut Core, sock: &UdpSocket, now: Time, to: Option<SocketAddr>, bytes: &[u8]) {
    let imp = if to.is_some() {
        core.tx_imp
    } else {
        core.rx_imp
    };
    match imp.fate(&mut core.rng) {
        Fate::Drop if to.is_some() => core.counters.tx_impaired_drops += 1,
        Fate::Drop => core.counters.rx_impaired_drops += 1,
        Fate::Deliver {
            copies,
            hold,
            delay,
        } => {
            for _ in 0..copies {
                deliver(core, sock, now, to, bytes, hold, delay);
            }
        }
    }
}

/// Applies the hold / delay part of an impairment to a packet (`to` as in [`impair`]), or
/// delivers it now.
fn deliver(
    core: &mut Core,
    sock: &UdpSocket,
    now: Time,
    to: Option<SocketAddr>,
    bytes: &[u8],
    hold: bool,
    delay: bool,
) {
    let imp = if to.is_some() {
        core.tx_imp
    } else {
        core.rx_imp
    };
    if hold || delay {
        core.counters.impaired_other += 1;
    }
    if delay {
        core.delayed.push(Held {
            at: Instant::now() + Duration::from_micros(imp.delay_us),
            to,
            bytes: bytes.to_vec(),
        });
        return;
    }
    let slot = usize::from(to.is_none());
    if hold && core.reorder[slot].is_none() {
        core.reorder[slot] = Some(Held {
            // Released after the next packet, or by the engine a millisecond later.
            at: Instant::now() + Duration::from_millis(1),
            to,
            bytes: bytes.to_vec(),
        });
        return;
    }
    release(core, sock, now, to, bytes);
    if let Some(h) = core.reorder[slot].take() {
        release(core, sock, now, h.to, &h.bytes);
    }
}

/// Delivers an IP packet: sends it to `to`, or (`None`) processes it as received.
fn release(core: &mut Core, sock: &UdpSocket, now: Time, to: Option<SocketAddr>, bytes: &[u8]) {
    match to {
        Some(peer) => {
            let hdr = ip_header_len(bytes);
            send_now(
                sock,
                &mut core.counters,
                &mut core.capture,
                peer,
                bytes,
                hdr,
            );
        }
        None => core.receive(sock, now, bytes),
    }
}

/// The engine thread: receive, process, fire timers, sleep until the next deadline.
fn engine(shared: &Shared) {
    // Receive buffers reused burst after burst: no allocation per datagram.
    let mut batch = RxBatch::new(RX_BURST, MAX_DATAGRAM);
    let mut next_deadline: Option<Time> = None;
    while !shared.closed() {
        // Sleep until a packet comes or the next timer is due.
        let now = shared.now();
        let mut sleep = MAX_SLEEP;
        if let Some(d) = next_deadline {
            sleep = sleep.min(Duration::from_nanos(d.since(now).as_nanos()));
        }
        let busy = {
            let core = shared.lock();
            let soonest = core
                .delayed
                .iter()
                .map(|h| h.at)
                .chain(core.reorder.iter().flatten().map(|h| h.at))
                .min();
            if let Some(at) = soonest {
                sleep = sleep.min(at.saturating_duration_since(Instant::now()));
            }
            // Queue pairs with more to send: no sleeping.
            !core.tx_pending.is_empty()
        };
        if !busy && !sleep.is_zero() {
            use rustix::event::{PollFd, PollFlags};
            let ts = rustix::event::Timespec {
                tv_sec: sleep.as_secs() as i64,
                tv_nsec: i64::from(sleep.subsec_nanos()),
            };
            let rx_fd = shared.socks.rx_fd();
            let mut fds = [
                PollFd::new(&rx_fd, PollFlags::IN),
                PollFd::new(&shared.wake, PollFlags::IN),
            ];
            let _ = rustix::event::poll(&mut fds, Some(&ts));
            let mut drain = [0u8; 8];
            let _ = rustix::io::read(&shared.wake, &mut drain);
        }
        // A burst of packets (one system call), read without the lock.
        batch.recv(&shared.socks);
        let mut core = shared.lock();
        let now = shared.now();
        let sock = &shared.socks.udp;
        let mut woke = false;
        for rx in &batch.got {
            woke = true;
            if rx.malformed {
                core.counters.rx_packets += 1;
                core.counters.rx_malformed += 1;
                continue;
            }
            let packet = batch.packet(rx);
            if !core.rx_imp.is_active() {
                core.receive(sock, now, packet);
                continue;
            }
            impair(&mut core, sock, now, None, packet);
        }
        // Impaired packets whose time has come.
        let t = Instant::now();
        let mut due = Vec::new();
        let mut i = 0;
        while i < core.delayed.len() {
            if core.delayed[i].at <= t {
                due.push(core.delayed.swap_remove(i));
            } else {
                i += 1;
            }
        }
        for slot in 0..2 {
            if core.reorder[slot].as_ref().is_some_and(|h| h.at <= t) {
                due.extend(core.reorder[slot].take());
            }
        }
        for h in due {
            release(&mut core, sock, now, h.to, &h.bytes);
            woke = true;
        }
        let (fired, next) = core.timers(sock, now);
        next_deadline = next;
        // Queue pairs with more to send get another turn each.
        let pending: Vec<u32> = core.tx_pending.iter().copied().collect();
        for qpn in pending {
            core.transmit(sock, now, qpn);
            woke |= core.drain_completions(qpn);
        }
        drop(core);
        if woke || fired {
            shared.cq_ready.notify_all();
        }
    }
}

/// Length of the IP + UDP headers at the start of an IP packet this device built.
fn ip_header_len(p: &[u8]) -> usize {
    let ip = match p.first().map(|b| b >> 4) {
        Some(4) => usize::from(p[0] & 0x0f) * 4,
        _ => 40,
    };
    ip + UDP_LEN
}

// ---------------------------------------------------------------------------------------------
// Protection domains and memory regions

impl Pd {
    /// Registers a new zeroed memory region of `len` bytes with `access` rights
    /// (`ibv_reg_mr` over a fresh buffer).
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        let mut core = self.shared.lock();
        let pd = core.pds.get_mut(&self.id).ok_or(Error::Gone)?;
        let addr = pd.mem.alloc(len);
        let keys = pd.mem.register(addr, len as u64, access)?;
        Ok(Mr {
            shared: self.shared.clone(),
            pd: self.id,
            addr,
            len: len as u64,
            lkey: keys.lkey,
            rkey: keys.rkey,
        })
    }

    /// Creates a reliable-connected queue pair in RESET (`ibv_create_qp`).
    pub fn create_qp(&self, send_cq: &Cq, recv_cq: &Cq, init: QpInit) -> Result<Qp> {
        if init.max_send_wr == 0 || init.max_recv_wr == 0 {
            return Err(Error::Config("queue depths must be at least 1"));
        }
        let mut core = self.shared.lock();
        if !core.pds.contains_key(&self.id) {
            return Err(Error::Gone);
        }
        if !core.cqs.contains_key(&send_cq.id) || !core.cqs.contains_key(&recv_cq.id) {
            return Err(Error::Gone);
        }
        // A random 24-bit QPN above the special ones (0, 1), not in use.
        let qpn = loop {
            let q = (random_u64() as u32) & 0x00ff_ffff;
            if q > 1 && !core.qps.contains_key(&q) {
                break q;
            }
        };
        let cfg = QpConfig {
            qpn,
            recovery: runtime_recovery(init.mode, init.line_rate_bps),
            line_rate_bps: init.line_rate_bps,
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            ..QpConfig::default()
        };
        let now = self.shared.now();
        let qp = QueuePair::new(now, cfg)?;
        core.qps.insert(
            qpn,
            QpEntry {
                qp,
                pd: self.id,
                send_cq: send_cq.id,
                recv_cq: recv_cq.id,
                remote: None,
            },
        );
        Ok(Qp {
            shared: self.shared.clone(),
            qpn,
        })
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        let mut core = self.shared.lock();
        let id = self.id;
        let used = core.qps.values().any(|e| e.pd == id);
        if used {
            if let Some(pd) = core.pds.get_mut(&id) {
                pd.closed = true;
            }
        } else {
            core.pds.remove(&id);
        }
    }
}

impl Mr {
    /// Virtual address of the first byte (what a peer puts in a RETH).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// A scatter/gather entry for `len` bytes at `offset`.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.addr + offset,
            len,
            lkey: self.lkey,
        }
    }

    fn range(&self, offset: u64, len: usize) -> Result<std::ops::Range<usize>> {
        let end = offset.checked_add(len as u64).filter(|&e| e <= self.len);
        match end {
            Some(end) => Ok(offset as usize..end as usize),
            None => Err(Error::OutOfRange {
                offset,
                len: len as u64,
                size: self.len,
            }),
        }
    }

    /// Copies `data` into the region at `offset` (the application writing its own buffer).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.range(offset, data.len())?;
        let mut core = self.shared.lock();
        let pd = core.pds.get_mut(&self.pd).ok_or(Error::Gone)?;
        let buf = pd.mem.buffer_mut(self.addr).ok_or(Error::Gone)?;
        buf[r].copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes at `offset` out of the region.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let r = self.range(offset, out.len())?;
        let core = self.shared.lock();
        let pd = core.pds.get(&self.pd).ok_or(Error::Gone)?;
        let buf = pd.mem.buffer(self.addr).ok_or(Error::Gone)?;
        out.copy_from_slice(&buf[r]);
        Ok(())
    }

    /// Runs `f` over the region's bytes, under the device lock (hashing, checking).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let core = self.shared.lock();
        let pd = core.pds.get(&self.pd).ok_or(Error::Gone)?;
        let buf = pd.mem.buffer(self.addr).ok_or(Error::Gone)?;
        Ok(f(buf))
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let mut core = self.shared.lock();
        if let Some(pd) = core.pds.get_mut(&self.pd) {
            let _ = pd.mem.deregister(self.lkey);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Completion queues

impl Cq {
    /// Takes up to `max` completions (`ibv_poll_cq`). An overrun CQ reports
    /// [`Error::CqOverrun`] once, then goes on.
    pub fn poll(&self, max: usize) -> Result<Vec<Wc>> {
        let mut core = self.shared.lock();
        let cq = core.cq_mut(self.id)?;
        if std::mem::take(&mut cq.overrun) {
            return Err(Error::CqOverrun(self.id));
        }
        let n = max.min(cq.entries.len());
        Ok(cq.entries.drain(..n).collect())
    }

    /// Takes one completion, waiting up to `timeout` for it (`ibv_get_cq_event` + poll).
    /// `Ok(None)` when none came in time.
    pub fn wait(&self, timeout: Duration) -> Result<Option<Wc>> {
        let deadline = Instant::now() + timeout;
        let mut core = self.shared.lock();
        loop {
            let cq = core.cq_mut(self.id)?;
            if std::mem::take(&mut cq.overrun) {
                return Err(Error::CqOverrun(self.id));
            }
            if let Some(wc) = cq.entries.pop_front() {
                return Ok(Some(wc));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.shared.closed() {
                return Ok(None);
            }
            core = self
                .shared
                .cq_ready
                .wait_timeout(core, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.shared
            .lock()
            .cqs
            .get(&self.id)
            .map_or(0, |c| c.entries.len())
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.shared.lock().cqs.remove(&self.id);
    }
}

// ---------------------------------------------------------------------------------------------
// Queue pairs

impl Qp {
    /// The queue pair number (24 bits), what the peer puts in its RTR as `dest_qpn`.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Runs `f` on the core, then gives the queue pair its transmit turn and moves its
    /// completions: what every verb on a queue pair ends with.
    fn with<R>(&self, f: impl FnOnce(&mut Core, Time) -> Result<R>) -> Result<R> {
        let mut core = self.shared.lock();
        if !core.qps.contains_key(&self.qpn) {
            return Err(Error::Gone);
        }
        let now = self.shared.now();
        let r = f(&mut core, now);
        let more = core.transmit(&self.shared.socks.udp, now, self.qpn);
        let any = core.drain_completions(self.qpn);
        drop(core);
        if more {
            self.shared.wake_engine();
        }
        if any {
            self.shared.cq_ready.notify_all();
        }
        r
    }

    /// Moves the queue pair to `to` (`ibv_modify_qp`) with the attributes `mask` names.
    /// INIT → RTR also needs `remote`: the peer's address (from its GID) and UDP port.
    pub fn modify(
        &self,
        to: QpState,
        attr: &QpAttr,
        mask: AttrMask,
        remote: Option<SocketAddr>,
    ) -> Result<()> {
        let qpn = self.qpn;
        self.with(|core, now| {
            let local = core.local;
            let e = core.qps.get_mut(&qpn).ok_or(Error::Gone)?;
            if to == QpState::Rtr && e.qp.state() == QpState::Init {
                let r = remote.ok_or(Error::NoRemote)?;
                if r.is_ipv4() != local.is_ipv4() {
                    return Err(Error::AddressFamily(r.ip(), local.ip()));
                }
            }
            e.qp.modify(now, to, attr, mask)?;
            if let Some(r) = remote {
                e.remote = Some(r);
            }
            Ok(())
        })
    }

    /// RESET → INIT with `attr`'s access flags and P_Key: receives may be posted from here on.
    pub fn init(&self, attr: &QpAttr) -> Result<()> {
        self.modify(
            QpState::Init,
            attr,
            AttrMask::ACCESS_FLAGS.with(AttrMask::PKEY),
            None,
        )
    }

    /// (RESET →) INIT → RTR → RTS towards `remote` (its address and port, QPN and first PSN),
    /// sending from `local_psn`, with `attr`'s other settings: the three `ibv_modify_qp` calls
    /// of `ibv_rc_pingpong`.
    pub fn connect(&self, attr: &QpAttr, remote: &RemoteQp, local_psn: u32) -> Result<()> {
        let attr = QpAttr {
            dest_qpn: remote.qpn,
            rq_psn: irn_wire::Psn::new(remote.psn),
            sq_psn: irn_wire::Psn::new(local_psn),
            ..*attr
        };
        let addr = SocketAddr::new(remote.gid.ip(), remote.port);
        if self.state() == QpState::Reset {
            self.init(&attr)?;
        }
        self.modify(
            QpState::Rtr,
            &attr,
            AttrMask::PATH_MTU
                .with(AttrMask::DEST_QPN)
                .with(AttrMask::RQ_PSN)
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER),
            Some(addr),
        )?;
        self.modify(
            QpState::Rts,
            &attr,
            AttrMask::SQ_PSN
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC),
            None,
        )
    }

    /// Posts a send work request (`ibv_post_send`): Send, Write, Write with immediate, Read,
    /// atomics. Refused with [`Error::CqFull`] when the send CQ could overflow.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        // Every WR may complete (errors are always reported); only signaled ones surely do.
        let signaled = wr.signaled;
        self.post(|e| e.send_cq, signaled, |qp| qp.post_send(wr))
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post(|e| e.recv_cq, true, |qp| qp.post_recv(wr))
    }

    /// Hands a work request to the queue pair (`post`) if the completion queue `cq_of` names
    /// has room for one more completion, which it reserves when `reserve`.
    fn post(
        &self,
        cq_of: fn(&QpEntry) -> u32,
        reserve: bool,
        post: impl FnOnce(&mut QueuePair) -> Result<(), PostError>,
    ) -> Result<()> {
        let qpn = self.qpn;
        self.with(|core, _| {
            let e = core.qps.get_mut(&qpn).ok_or(Error::Gone)?;
            let cq_id = cq_of(e);
            let cq = core.cqs.get_mut(&cq_id).ok_or(Error::Gone)?;
            if cq.entries.len() + cq.reserved >= cq.depth {
                return Err(Error::CqFull(cq_id));
            }
            post(&mut e.qp)?;
            if reserve {
                cq.reserved += 1;
            }
            Ok(())
        })
    }

    /// The queue pair's state.
    pub fn state(&self) -> QpState {
        self.shared
            .lock()
            .qps
            .get(&self.qpn)
            .map_or(QpState::Err, |e| e.qp.state())
    }

    /// The queue pair's counters (packets, retransmissions, NAKs, …).
    pub fn counters(&self) -> Counters {
        self.shared
            .lock()
            .qps
            .get(&self.qpn)
            .map_or_else(Counters::default, |e| *e.qp.counters())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let mut core = self.shared.lock();
        if let Some(e) = core.qps.remove(&self.qpn) {
            let pd = e.pd;
            let orphan = core.pds.get(&pd).is_some_and(|p| p.closed)
                && !core.qps.values().any(|q| q.pd == pd);
            if orphan {
                core.pds.remove(&pd);
            }
        }
    }
}

/// The peer of a queue pair, as exchanged out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    /// Its GID (its IP address).
    pub gid: Gid,
    /// Its UDP port (4791 for a standard peer).
    pub port: u16,
    /// Its queue pair number.
    pub qpn: u32,
    /// The first PSN it sends.
    pub psn: u32,
}
