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
//! whose own condition variable wakes the threads blocked in [`Cq::wait`] on it — only when one
//! sleeps there, so a completion costs no system call otherwise. With busy polling
//! ([`DeviceConfig::busy_poll`]) a thread polling a CQ does the engine's work while it spins,
//! and a watcher thread (under `SCHED_IDLE`: `engine::watcher`, `sched`) wakes the engine when
//! it stops; with [`DeviceConfig::wait_drives`] a thread waiting on a CQ does it between its
//! sleeps in `poll(2)` (`drive`), and the watcher hands the device back once the program has
//! stopped waiting.
//!
//! # Wire
//!
//! Packets leave through an unconnected UDP socket whose IPv4 ID is predictable, so their ICRC
//! is right; they arrive through that socket (unprivileged) or a raw socket (privileged, every
//! ICRC verified). The `net` module has the details ([`ReceivePath`]). Either way the engine
//! handles whole IP packets: on the UDP path their headers are rebuilt in front of the payload.
//! Sent payloads stay where they lie in registered memory until the kernel copies them
//! (`lent`): a transmit batch holds headers and trailers, and I/O vectors point at the rest.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use irn_transport::{
    Access, AttrMask, ByteMemory, CcKind, Completion, Counters, Dur, MemError, ModifyError,
    PostError, QpAttr, QpConfig, QpState, QueuePair, RecoveryConfig, RecvWr, SendWr, Sge, Time,
    Transmit, WcOpcode,
};
use irn_wire::{Ecn, IbRepr, IpRepr, RoceRepr};

use irn_wire::udp::HEADER_LEN as UDP_LEN;

use crate::capture::Capture;

mod app_memory;
mod budget;
mod config;
mod counters;
mod drive;
mod engine;
mod error;
mod group;
mod lent;
mod line;
mod objects;
mod pause;
mod ports;
mod rx;
mod sched;
mod table;
mod tagged;
mod turns;
mod tx;
mod ud;

pub(crate) use config::cc_factory;
pub use config::{
    check_runtime_cc, check_runtime_mode, runtime_recovery, DeviceConfig, QpMode, Vlan,
    DEFAULT_IN_FLIGHT_BUDGET,
};
pub use counters::DeviceCounters;
pub use error::{Error, PostListError, Result, Wc};
pub use group::MAX_ENGINES;
pub use ud::{Ah, UdInit, UdQp, UdSend};

use crate::impair::{Impairer, Impairment};
use crate::net::{self, ReceivePath, Reject, RxBatch, Sockets};
use crate::Gid;
use engine::engine;

/// The UDP port of RoCEv2 (IANA).
pub const ROCE_PORT: u16 = irn_wire::ROCEV2_PORT;

/// In-flight bound of a RoCE-mode queue pair, as Linux rxe's.
const ROCE_MAX_UNACKED_PSNS: u32 = 128;

/// Largest IP packet handled: a 4096-byte MTU packet with every header.
const MAX_DATAGRAM: usize = 4096 + 128;
/// Packets received per lock of the core.
const RX_BURST: usize = 64;
/// The packets after which the engine stops reading bursts in one wake-up (it stops earlier
/// when the socket is empty) to run its timers and the turns of queue pairs with more to
/// send: one burst of coalesced datagrams, or many of single packets (ACKs).
const RX_PACKETS: usize = 4096;
/// Packets one queue pair sends per turn. Bounding the turn keeps the lock short, so ACKs and
/// NAKs are processed while a deep send queue drains (without it, a go-back-N sender with
/// thousands of packets posted would send them all before hearing that the first was lost,
/// and its retransmission timer would expire behind its own burst), and shares the link
/// fairly among queue pairs.
const TX_BURST: usize = 32;
/// Packets a transmit batch holds before it is sent: a turn's, or (while a received burst is
/// processed) those of every queue pair the burst gave a turn.
const TX_SLOTS: usize = 64;
/// Bytes of one packet slot of a transmit batch.
const SLOT: usize = MAX_DATAGRAM + 64;
/// The engine thread wakes at least this often (to notice a closed device).
const MAX_SLEEP: Duration = Duration::from_millis(20);

struct QpEntry {
    qp: QueuePair,
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    remote: Option<SocketAddr>,
    /// The deadline of this queue pair's entry in [`Core::turns`]' timers that is current
    /// (they may hold older ones, skipped when they come up).
    armed: Option<Time>,
    /// RoCE modes: the UDP source port the peer's first packet came from, which its later
    /// ones must come from too (a RoCE peer picks one per connection: rxe and irn
    /// `rdma_get_udp_sport`'s, see [`net::roce_source_port`]). `None` until then, and after each
    /// (re)connection.
    peer_sport: Option<u16>,
    /// The peer takes coalesced datagrams ([`Qp::set_peer_gso`]).
    gso: bool,
    /// The DSCP its packets carry ([`Qp::set_traffic_class`]).
    dscp: u8,
    /// The UDP source port its packets leave from ([`Core::source_port`]), set as it
    /// connects.
    sport: u16,
    /// The source port an irn peer's queue pair sends from when it has its own (the same
    /// [`net::roce_source_port`]: the choice is symmetric), set as it connects.
    peer_port: u16,
    /// What it was created with: INIT → RTR sizes its BDP cap and congestion window for the
    /// path MTU from these.
    init: QpInit,
    /// The bytes it has in flight, as counted in [`Core::budget`].
    charged: u64,
    /// It waits in [`Core::budget`]'s queue.
    waiting: bool,
    /// It is listed in [`Core::turns`] as having received packets in this burst.
    turn_due: bool,
}

impl QpEntry {
    /// Sizes the BDP-FC cap and the congestion controller for packets of `mtu` bytes (the
    /// path MTU INIT → RTR sets). The queue pair is created sized for 1024-byte packets.
    fn size_for_path(&mut self, now: Time, mtu: u32) -> Result<()> {
        let (recovery, cc, _) = self.init.for_path(mtu);
        self.qp
            .size_for_path(now, recovery.bdp_cap, recovery.bdp_fc_span, cc)?;
        Ok(())
    }
}

struct CqState {
    entries: VecDeque<Wc>,
    depth: usize,
    /// Completions that may still arrive: posted receive WRs and signaled send WRs not yet
    /// completed, bounding what could land in `entries`.
    reserved: usize,
    overrun: bool,
    /// Wakes the threads asleep in [`Cq::wait`] on this CQ (they wait on it with the core's
    /// lock). One per CQ, so that a completion wakes only the threads waiting for that CQ — a
    /// device-wide one woke the connection manager's agent for every completion of every CQ.
    ready: Arc<Condvar>,
    /// Threads asleep on `ready`: with none, a completion needs no wake-up (a notify is a
    /// system call even when nobody waits).
    sleepers: usize,
    /// Threads asleep in `poll(2)` in a wait that drives the device
    /// ([`DeviceConfig::wait_drives`]), which a completion wakes through `drive_wake`.
    drivers: usize,
    /// The eventfd those threads sleep on, made by the first of them.
    drive_wake: Option<Arc<rustix::fd::OwnedFd>>,
    /// `drive_wake` was written since the last of those threads went to sleep, for a
    /// completion it has not taken yet: the other completions of a burst need no system call
    /// each. A thread that takes one and leaves more passes the wake-up on (`drive`).
    drive_rung: bool,
    /// `ready` was notified since the last thread went to sleep on it: the other completions
    /// of a burst need no system call each (the woken thread takes them all once it has the
    /// lock).
    notified: bool,
    /// Armed for one completion event ([`Cq::req_notify`]): called, and disarmed, when the
    /// next completion arrives.
    armed: Option<CqNotify>,
    /// `entries.len()`, published for [`Cq::queued`] to read without the device lock.
    queued: Arc<AtomicUsize>,
}

/// What an armed completion queue calls when its next completion arrives
/// ([`Cq::req_notify`], `ibv_req_notify_cq(3)`). It runs on whichever thread completes the
/// work request — the engine, or an application thread polling a busy-polled device — with
/// the device locked: it must not block, nor call back into the device.
pub type CqNotify = Arc<dyn Fn() + Send + Sync>;

struct PdState {
    mem: ByteMemory,
    /// The handle was dropped; the memory goes when its last queue pair does.
    closed: bool,
}

/// The device's state, behind one mutex.
pub(crate) struct Core {
    local: SocketAddr,
    /// The device's objects by number.
    objects: table::Objects,
    /// Both directions' impairment, its random stream and the packets it holds back.
    impairer: Impairer,
    /// Which queue pairs get transmit turns, and their timers.
    turns: turns::Turns,
    /// [`DeviceConfig::in_flight_budget`]: what the queue pairs have in flight together (the
    /// sum of their `charged`), and those held back for room, served first.
    budget: budget::Budget,
    counters: DeviceCounters,
    capture: Option<Capture>,
    /// Packets built in place, waiting to be sent, in batches (`tx.rs`).
    tx: tx::TxState,
    /// The receive side's state between packets.
    rx: rx::RxState,
    /// The UDP source ports its queue pairs send from, and their sockets.
    ports: ports::SourcePorts,
    /// The payload of the packet being built, reused.
    payload: lent::Gathered,
    /// Link-level pauses honoured ([`DeviceConfig::pause_iface`]).
    pause: Option<Box<pause::PauseIn>>,
    /// The line frames leave by, at its rate ([`DeviceConfig::line_rate_bps`]).
    line: Option<Box<line::Line>>,
    /// Its place in a group of engines sharing its address ([`Device::open_group`]).
    member: Option<Arc<group::Member>>,
}

/// The rate of the link pause frames arrive on (socket `s`): [`DeviceConfig::pause_link_bps`],
/// else the line's ([`DeviceConfig::line_rate_bps`]: one link, one rate), else the
/// interface's speed, else 1 Gb/s.
fn link_rate(cfg: &DeviceConfig, s: &crate::packet::PacketSocket) -> u64 {
    match (cfg.pause_link_bps, cfg.line_rate_bps) {
        (0, Some(r)) if r > 0 => r,
        (0, _) => crate::packet::link_speed(s.iface()).unwrap_or(1_000_000_000),
        (r, _) => r,
    }
}

pub(crate) use ports::SourceSocket;
pub use ports::MAX_SOURCE_PORTS;

impl Core {
    /// The UDP source port queue pair `qpn` sends from once connected to `dest_qpn`
    /// ([`ports::SourcePorts::open`]); a fallback to the device's port is counted.
    fn source_port(&mut self, qpn: u32, dest_qpn: u32) -> u16 {
        let got = self.ports.open(qpn, dest_qpn);
        if let ports::Got::Fallback(_) = got {
            self.counters.tx_port_fallbacks += 1;
        }
        got.port()
    }

    /// Closes the socket of source port `port` if no queue pair sends from it any more.
    fn release_port(&mut self, port: u16) {
        // The device's own port is never closed: no scan of the queue pairs (past
        // MAX_SOURCE_PORTS most of them send from it, and each would scan all the others).
        if port == self.local.port() {
            return;
        }
        let in_use = self.objects.qps.values().any(|e| e.sport == port);
        self.ports.release(port, in_use);
    }
}

pub(crate) struct Shared {
    pub(crate) core: Mutex<Core>,
    socks: Sockets,
    /// An eventfd the engine polls with the socket: application threads write it when a
    /// queue pair has more to send than its turn allowed.
    wake: rustix::fd::OwnedFd,
    epoch: Instant,
    closed: AtomicBool,
    /// The device's connection manager (QP1 and its connections), while someone uses it: every
    /// listener and connection of the device shares it (`crate::cm`).
    pub(crate) cm: Mutex<std::sync::Weak<crate::cm::AgentCell>>,
    /// The receive buffers, held by whoever receives: the engine thread, or (busy polling) a
    /// thread polling a completion queue.
    rx: Mutex<RxBatch>,
    /// [`DeviceConfig::busy_poll`].
    busy_poll: bool,
    /// [`DeviceConfig::wait_drives`] (without `busy_poll`): the threads waiting on CQs that
    /// drive the device.
    drive: Option<drive::Drive>,
    /// When a thread last busy-polled, nanoseconds after `epoch`.
    last_poll: AtomicU64,
    /// The engine has left the device to a busy poller or to the threads that wait on its
    /// CQs ([`Shared::driven`]), and the watcher looks at it (`engine::watcher`).
    watching: AtomicBool,
    /// The watcher's thread, which the engine unparks as it leaves the device to the program.
    watcher: std::sync::OnceLock<std::thread::Thread>,
    /// The packet socket pause frames arrive on ([`DeviceConfig::pause_iface`]).
    pause_sock: Option<crate::packet::PacketSocket>,
    /// Its place in a group of engines sharing its address ([`Device::open_group`]): the
    /// packets other members hand it.
    member: Option<Arc<group::Member>>,
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

    /// Busy polling ([`DeviceConfig::busy_poll`]): sends what the last round held for this
    /// visit, receives and processes what waits, fires due timers and gives the queue pairs
    /// their turns, on the calling thread — unless another thread is receiving for the device
    /// right now.
    pub(crate) fn progress(&self) {
        self.progress_with(false);
    }

    /// [`Shared::progress`]; with `wait_turn`, a thread receiving for the device right now is
    /// waited for, and the round runs after its own (a thread that sleeps in `poll(2)` between
    /// rounds, `drive`: trying again at once would spin on the lock against that round).
    pub(super) fn progress_with(&self, wait_turn: bool) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let before = self.last_poll.swap(now, Ordering::Relaxed);
        // A thread spinning on the device: its next poll comes soon enough to carry what this
        // round provokes (`TxState::held`). Where waiting threads drive the device nothing is
        // held: a thread asleep in `poll(2)` would keep it, and the watcher leaves the engine
        // asleep while one waits.
        let spinning = polled_within(before, now, HOLD_SPIN) && self.drive.is_none();
        let mut batch = match self.rx.try_lock() {
            Ok(b) => b,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if wait_turn => {
                self.rx.lock().unwrap_or_else(|p| p.into_inner())
            }
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        engine::run_once(self, &mut batch, engine::Round::Poller { spinning });
    }

    /// Threads polling or waiting on the device's CQs drive it: busy polling, or waiting
    /// threads that drive it ([`DeviceConfig::wait_drives`]).
    pub(super) fn driven(&self) -> bool {
        self.busy_poll || self.drive.is_some()
    }

    /// The program no longer drives the device: the engine takes it back at its next
    /// wake-up, which this is (unless a thread is in a driving wait now, which drives it).
    pub(super) fn hand_back(&self) {
        self.last_poll.store(0, Ordering::Relaxed);
        // The engine's eventfd alone: a thread in a driving wait keeps the device anyway.
        drive::ring(&self.wake);
    }

    /// A thread drove the device just now: a driving wait ended (`drive`).
    pub(super) fn polled_now(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.last_poll.store(now.max(1), Ordering::Relaxed);
    }

    /// A thread busy-polls the device now: its last poll came under [`HOLD_SPIN`] ago.
    pub(super) fn spinning(&self) -> bool {
        let last = self.last_poll.load(Ordering::Relaxed);
        polled_within(last, self.epoch.elapsed().as_nanos() as u64, HOLD_SPIN)
    }

    /// A thread busy-polled within the last millisecond.
    pub(super) fn polled_recently(&self) -> bool {
        self.polled_before(self.now())
    }

    /// A thread busy-polled within the millisecond before `now` (the device's clock, read
    /// once by a caller that has it).
    pub(super) fn polled_before(&self, now: Time) -> bool {
        if self.drive.as_ref().is_some_and(drive::Drive::waiting) {
            return true;
        }
        let last = self.last_poll.load(Ordering::Relaxed);
        polled_within(last, now.as_picos() / 1000, Duration::from_millis(1))
    }

    /// Wakes the engine for more to send, a turn to give or a budget to serve — and a thread
    /// asleep in a wait that drives the device (`drive`), which does that work while the
    /// engine leaves the device to it.
    fn wake_engine(&self) {
        drive::ring(&self.wake);
        if let Some(d) = self.drive.as_ref().filter(|d| d.asleep()) {
            d.wake_for_post();
        }
    }

    /// Wakes whoever receives for the device — the engine, or threads asleep in a wait that
    /// drives it, whether or not one is asleep yet — for packets another member of its group
    /// handed over (`group.rs`): an eventfd stays readable until the next sleep's wake-up.
    fn wake_for_forward(&self) {
        drive::ring(&self.wake);
        if let Some(d) = self.drive.as_ref() {
            d.wake_for_post();
        }
    }

    /// Grows the receive buffer to what the connected queue pairs' peers may have in flight
    /// at once (`RxState::grow`: the sum of their BDP caps in bytes, which an irn peer
    /// sizes as this side does), at most [`MAX_RECEIVE_BUFFER`]. A NIC's buffer absorbs the
    /// bursts of a port's flows; a software receiver's is its socket's. With 4 MB, 64 IRN
    /// queue pairs on loopback (123 packets of 4 KB each in flight: 32 MB) overflowed it
    /// until one of them went half a second without progress and ended in `RETRY_EXC_ERR`;
    /// with 32 MB they moved 1.4 GB/s (docs/BENCHMARKS.md). Best effort: without
    /// `CAP_NET_ADMIN` the kernel caps it at `net.core.rmem_max`.
    fn fit_receive_buffer(&self) {
        if let Some(want) = self.lock().rx.grow() {
            self.socks.grow_receive_buffer(want);
        }
    }
}

/// Whether a poll at `last` (ns on the device's clock, 0: never) came less than `span` before
/// `now` (ns).
fn polled_within(last: u64, now: u64, span: Duration) -> bool {
    last > 0 && now.saturating_sub(last) < span.as_nanos() as u64
}

/// A busy poller whose polls come closer together than this spins on the device, and its round
/// may hold what it provoked for the next poll (`TxState::held`); a program that polls less
/// often has it sent at the end of each round.
pub(crate) const HOLD_SPIN: Duration = Duration::from_micros(20);

/// The largest receive buffer a device asks for (bytes).
pub const MAX_RECEIVE_BUFFER: usize = 256 << 20;

/// An open device: a UDP socket with its engine thread (`ibv_open_device` + `ibv_alloc_pd`'s
/// context). Closing it (dropping) stops the engine; queue pairs left open stop moving.
pub struct Device {
    shared: Arc<Shared>,
    engine: Option<JoinHandle<()>>,
    /// The watcher of a device its program's threads drive ([`DeviceConfig::busy_poll`],
    /// [`DeviceConfig::wait_drives`], `engine::watcher`).
    watcher: Option<JoinHandle<()>>,
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
        Device::open_in(cfg, None)
    }

    /// Opens `engines` devices that share `cfg.addr` and `cfg.port` — an engine per core, with
    /// the queue pairs spread over them by number (`device/group.rs`): member `i` gives its
    /// queue pairs the numbers `q` with `q mod engines = i`, and the kernel delivers each
    /// packet to the member owning its destination queue pair. Peers see one device; the
    /// members share nothing else, so a program drives each from its own thread with its own
    /// PD, memory regions and CQs. Port 0 takes a free port, the same for all members; a port
    /// anyone holds is refused (`AddrInUse`), and the members' sockets stay in the port's
    /// reuse-port group until every member has closed, which keeps the steering exact.
    ///
    /// Each member gets `cfg`, with the impairment seed `cfg.seed + i` and, when capturing,
    /// the file `cfg.pcap` for member 0 and `STEM.i.EXT` beside it for member `i`. A paced
    /// line or pause frames ([`DeviceConfig::line_rate_bps`], [`DeviceConfig::pause_iface`])
    /// belong to one engine, and tagged frames ([`DeviceConfig::vlan`]) are sent and
    /// received by one packet socket: a group of more than one refuses them. The group's
    /// connection manager is member 0's, where peers' QP1 packets arrive.
    pub fn open_group(cfg: DeviceConfig, engines: usize) -> Result<Vec<Device>> {
        if engines == 0 || engines > MAX_ENGINES {
            return Err(Error::Config("engines: a group has 1 to 64 members"));
        }
        if engines == 1 {
            return Ok(vec![Device::open(cfg)?]);
        }
        if cfg.line_rate_bps.is_some_and(|r| r > 0) || cfg.pause_iface.is_some() {
            return Err(Error::Config(
                "line_rate_bps, pause_iface: a paced line is one engine's, not a group's",
            ));
        }
        if cfg.vlan.is_some() {
            return Err(Error::Config(
                "vlan: tagged frames go through one packet socket, not a group's",
            ));
        }
        // The port, free, and held against other irn programs' groups until every member has
        // bound it.
        let (port, lock) = net::reserve_shared_port(cfg.addr, cfg.port)?;
        let group = Arc::new(group::Group::default());
        let mut members: Vec<Device> = Vec::with_capacity(engines);
        for i in 0..engines {
            let mut c = cfg.clone();
            c.seed = cfg.seed.wrapping_add(i as u64);
            // The members bind in index order: the kernel numbers a reuse-port group's
            // sockets so, and the steering program names them by that number.
            c.port = port;
            if i > 0 {
                c.pcap = cfg.pcap.as_deref().map(|p| group::capture_path(p, i));
            }
            let member = group::Member::new(i as u32, engines as u32, group.clone());
            let d = Device::open_in(c, Some(Arc::new(member)))?;
            group.retain(d.shared.socks.udp.try_clone()?);
            members.push(d);
        }
        drop(lock);
        group.seal(members.iter().map(|d| Arc::downgrade(&d.shared)).collect());
        Ok(members)
    }

    /// This device's place in its group ([`Device::open_group`]): its index and the group's
    /// size; `(0, 1)` for a device opened alone.
    pub fn group_member(&self) -> (usize, usize) {
        self.shared.member.as_deref().map_or((0, 1), |m| {
            let (i, n) = m.place();
            (i as usize, n as usize)
        })
    }

    fn open_in(cfg: DeviceConfig, member: Option<Arc<group::Member>>) -> Result<Device> {
        if !cfg.tx_impairment.is_valid() || !cfg.rx_impairment.is_valid() {
            return Err(Error::Config("impairment probabilities must be in 0–1"));
        }
        if cfg.in_flight_budget == 0 {
            return Err(Error::Config("in_flight_budget must be more than 0 bytes"));
        }
        if cfg.vlan.is_some() && !cfg.addr.is_ipv4() {
            return Err(Error::Config(
                "vlan: tagged frames are built for IPv4 addresses only",
            ));
        }
        let share = member.as_deref().map(group::Member::place);
        let socks = Sockets::open(cfg.addr, cfg.port, cfg.receive, cfg.socket_buffer, share)?;
        // Receive buffers reused burst after burst: no allocation per datagram. Each holds a
        // coalesced datagram of up to 64 packets on either path, split by the kernel's segment
        // size (UDP path) or where the engine finds the cut (raw path).
        let rx = RxBatch::new(RX_BURST, 1 << 16);
        let local = socks.local();
        let capture = cfg.pcap.as_deref().map(Capture::create).transpose()?;
        let pause_sock = cfg
            .pause_iface
            .as_deref()
            .map(crate::packet::PacketSocket::open_mac_control)
            .transpose()?;
        let core = Core {
            local,
            objects: table::Objects::new(share.unwrap_or((0, 1))),
            impairer: Impairer::new(cfg.tx_impairment, cfg.rx_impairment, cfg.seed),
            turns: turns::Turns::default(),
            budget: budget::Budget::new(cfg.in_flight_budget as u64),
            counters: DeviceCounters::default(),
            capture,
            rx: rx::RxState::new(socks.verifies_icrc(), cfg.socket_buffer),
            tx: tx::TxState::new(
                local.is_ipv4(),
                cfg.vlan
                    .as_ref()
                    .map(|v| tagged::TaggedTx::open(&v.iface, v.vid))
                    .transpose()?
                    .map(Arc::new),
            ),
            ports: ports::SourcePorts::new(local, cfg.socket_buffer),
            payload: lent::Gathered::with_capacity(MAX_DATAGRAM),
            pause: pause_sock.as_ref().map(|s| {
                Box::new(pause::PauseIn::new(
                    link_rate(&cfg, s),
                    cfg.pause_watchdog
                        .map(|d| Dur::from_nanos(d.as_nanos() as u64)),
                ))
            }),
            line: match (cfg.line_rate_bps, &pause_sock) {
                (Some(0), _) | (None, None) => None,
                (Some(r), _) => Some(r),
                (None, Some(s)) => Some(link_rate(&cfg, s)),
            }
            .map(|r| Box::new(line::Line::new(r).tagged(cfg.vlan.is_some()))),
            member: member.clone(),
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            socks,
            wake: drive::eventfd()?,
            epoch: Instant::now(),
            closed: AtomicBool::new(false),
            cm: Mutex::new(std::sync::Weak::new()),
            rx: Mutex::new(rx),
            busy_poll: cfg.busy_poll,
            drive: if cfg.wait_drives && !cfg.busy_poll {
                Some(drive::Drive::new()?)
            } else {
                None
            },
            last_poll: AtomicU64::new(0),
            watching: AtomicBool::new(false),
            watcher: std::sync::OnceLock::new(),
            pause_sock,
            member,
        });
        let s = shared.clone();
        let engine = std::thread::Builder::new()
            .name(format!("irn-engine {local}"))
            .spawn(move || engine(&s))?;
        let mut device = Device {
            shared,
            engine: Some(engine),
            watcher: None,
        };
        if device.shared.driven() {
            // The engine unparks the watcher once it is known; until then the watcher finds
            // the engine watching at its own first look. (A failed spawn drops `device`,
            // which stops the engine.)
            let s = device.shared.clone();
            let w = std::thread::Builder::new()
                // Thread names are cut at 15 bytes: the port tells the device's apart.
                .name(format!("irn-watch {}", local.port()))
                .spawn(move || engine::watcher(&s))?;
            let _ = device.shared.watcher.set(w.thread().clone());
            device.watcher = Some(w);
        }
        Ok(device)
    }

    /// The slot of the device's connection manager.
    pub(crate) fn cm_slot(&self) -> &Mutex<std::sync::Weak<crate::cm::AgentCell>> {
        &self.shared.cm
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.lock().local
    }

    /// Whether this device takes coalesced datagrams: a peer's UDP GSO messages, which stay
    /// whole on loopback and veths. It does on either path: the UDP path learns each one's
    /// segment size from the kernel (`UDP_GRO`), the raw path finds where the sender's kernel
    /// would have cut it (`Core::receive_coalesced`). What a peer passes to
    /// [`Qp::set_peer_gso`] (`false` from an older irn device or Linux rxe).
    pub fn accepts_gso(&self) -> bool {
        true
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
        if let Some(p) = &core.pause {
            c.pause_frames_received = p.frames;
            c.pause_held_turns = p.held_turns;
            c.pause_watchdog_fired = p.watchdog_fired;
        }
        if let Some(l) = &core.line {
            c.line_rate_bps = l.rate_bps();
            c.line_held_turns = l.held_turns;
        }
        c
    }

    /// The UDP source ports this device's connected queue pairs send from besides its own
    /// (each a send-only socket: opened as a queue pair connects, closed when the last queue
    /// pair using it is destroyed or reconnected elsewhere), in ascending order.
    pub fn source_ports(&self) -> Vec<u16> {
        self.shared.lock().ports.open_ports()
    }

    /// Allocates a protection domain (`ibv_alloc_pd`): a memory space whose regions the queue
    /// pairs of the domain may access.
    pub fn alloc_pd(&self) -> Pd {
        let mut core = self.shared.lock();
        let id = core.objects.fresh_id();
        core.objects.pds.insert(
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
        let id = core.objects.fresh_id();
        let queued = Arc::new(AtomicUsize::new(0));
        core.objects.cqs.insert(
            id,
            CqState {
                entries: VecDeque::with_capacity(depth.min(1 << 16)),
                depth,
                reserved: 0,
                overrun: false,
                ready: Arc::new(Condvar::new()),
                sleepers: 0,
                drivers: 0,
                drive_wake: None,
                drive_rung: false,
                notified: false,
                armed: None,
                queued: queued.clone(),
            },
        );
        Ok(Cq {
            shared: self.shared.clone(),
            id,
            queued,
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake_engine();
        if let Some(w) = self.watcher.take() {
            w.thread().unpark();
            let _ = w.join();
        }
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
        if self.shared.member.is_some() {
            // Its socket stays in the group until the last member closes (`group.rs`).
            net::retire(&self.shared.socks.udp);
        }
        let mut core = self.shared.lock();
        // Posts' packets still waiting for the doorbell leave before the queue pairs close.
        core.flush_tx(&self.shared.socks.udp);
        core.capture = None;
        for e in core.objects.qps.values_mut() {
            let now = self.shared.now();
            let _ =
                e.qp.modify(now, QpState::Err, &QpAttr::default(), AttrMask::NONE);
        }
        let closing = irn_transport::UdAttr {
            pkey: irn_wire::DEFAULT_PKEY,
            qkey: 0,
            pmtu: 1024,
            sq_psn: 0,
        };
        for e in core.objects.uds.values_mut() {
            let _ = e.qp.modify(QpState::Err, &closing);
        }
        let ud: Vec<u32> = core.objects.uds.keys().copied().collect();
        for q in ud {
            core.drain_ud(q);
        }
        // Whoever sleeps in `Cq::wait` looks again, and sees the device closed.
        for cq in core.objects.cqs.values() {
            if cq.sleepers > 0 {
                cq.ready.notify_all();
            }
            if let (true, Some(fd)) = (cq.drivers > 0, &cq.drive_wake) {
                drive::ring(fd);
            }
        }
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
    /// The address work requests and peers name it by.
    addr: u64,
    /// Its allocation's address in the protection domain's memory.
    buffer: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

/// A completion queue (`struct ibv_cq`).
#[derive(Debug)]
pub struct Cq {
    shared: Arc<Shared>,
    id: u32,
    /// How many completions it holds, as of the last change ([`Cq::queued`]).
    queued: Arc<AtomicUsize>,
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
    /// Congestion control.
    pub cc: CcKind,
}

impl QpInit {
    /// Its loss recovery and congestion control on a path of `mtu`-byte packets
    /// ([`runtime_recovery`], [`cc_factory`]), and the receiver's CNP interval.
    fn for_path(
        &self,
        mtu: u32,
    ) -> (
        RecoveryConfig,
        Arc<dyn irn_transport::ControllerFactory>,
        Option<Dur>,
    ) {
        let recovery = runtime_recovery(self.mode, self.line_rate_bps, mtu);
        let (cc, cnp_interval) = cc_factory(
            self.cc,
            recovery.bdp_cap,
            u64::from(mtu),
            self.line_rate_bps,
        );
        (recovery, cc, cnp_interval)
    }
}

impl Default for QpInit {
    fn default() -> Self {
        QpInit {
            mode: QpMode::Roce,
            max_send_wr: 1024,
            max_recv_wr: 1024,
            line_rate_bps: 10_000_000_000,
            cc: CcKind::None,
        }
    }
}

/// A reliable-connected queue pair (`struct ibv_qp`, `IBV_QPT_RC`). Dropping it destroys it.
#[derive(Debug)]
pub struct Qp {
    shared: Arc<Shared>,
    qpn: u32,
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
