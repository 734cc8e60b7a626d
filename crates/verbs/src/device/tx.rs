//! The transmit batches, and sending them without the device's lock.
//!
//! Packets are built in place, under the lock, into the current [`TxQueue`]: `TX_SLOTS` slots
//! of `SLOT` bytes, grouped into messages (one datagram each, or a UDP GSO run). A full or
//! flushed queue is *sealed* — the socket each run of its messages leaves from is decided then
//! — and joins the ready list.
//!
//! * [`Shared::flush`] — the end of an engine wake-up or burst, a post to an idle queue pair,
//!   a completion-queue poll — sends the ready queues with the lock released around each
//!   `sendmmsg`, so that posting threads and the engine do not wait for the kernel (on
//!   loopback a `sendmmsg` runs the receiver's network stack too, and a 64-byte Send stream
//!   spent a fifth of its cycles in the lock's contention and wake-ups). One thread at a time
//!   sends so ([`TxState::sending`]); one that finds another sending leaves its queue to it.
//! * [`Core::flush_tx`] — a batch filled in the middle of a transmit turn, a queue pair or the
//!   device closing — sends under the lock, after whatever is being sent without it.
//!
//! Every send holds `send_order`, so order on the wire is the order of sealing, as before, and
//! the sockets' `SO_NO_CHECK` switches happen in that order too. Counters count what the
//! kernel took once the queue has left.
//!
//! A device that tags its frames (`device/tagged.rs`) sends each packet whole — its IP
//! packet as built in the slot, behind the tagged Ethernet header — through its packet
//! socket instead, and a message whose peer's MAC address is not known yet through the UDP
//! socket as above.

use std::collections::VecDeque;
use std::net::UdpSocket;
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::lent::Lent;
use super::tagged::{Tagged, TaggedTx};
use super::{Core, Shared, SourceSocket, SLOT, TX_SLOTS};
use crate::net;

/// Ready queues one [`Shared::flush`] sends at most; the engine, woken, sends the rest.
const FLUSH_MAX: usize = 8;

/// One batch of packets built in place, and how it leaves.
pub(crate) struct TxQueue {
    /// `TX_SLOTS` slots of `SLOT` bytes.
    pub(super) buf: Vec<u8>,
    /// Each packet: where it is in `buf`, and the memory lent to it.
    pub(super) batch: Vec<TxPacket>,
    /// The pieces of registered memory the packets carry where they lie (`lent`).
    pub(super) lent: Vec<Lent>,
    /// The messages `batch` goes out in.
    pub(super) msgs: Vec<net::TxMsg>,
    /// Set when sealed: the runs of messages and their sockets.
    runs: Vec<TxRun>,
}

/// A packet of a batch: its headers (and, unless its payload is lent, all of it) in a slot,
/// then the pieces of memory lent to it, then its trailer (pad and ICRC) back in the slot.
#[derive(Debug, Clone)]
pub(super) struct TxPacket {
    pub(super) slot: usize,
    /// IP + UDP header length: the UDP path sends the packet from there.
    pub(super) hdr: usize,
    /// The slot's bytes before the lent pieces: the whole packet when none are.
    pub(super) head: usize,
    /// Its lent pieces, in [`TxQueue::lent`].
    pub(super) lent: Range<usize>,
    /// The slot's bytes after them, from `head` on.
    pub(super) tail: usize,
    /// The whole IP packet's length.
    pub(super) len: usize,
}

impl TxPacket {
    /// The UDP payload's length: a datagram on the wire.
    pub(super) fn datagram_len(&self) -> usize {
        self.len - self.hdr
    }
}

/// A run of messages that leave from one socket.
struct TxRun {
    /// The source port's socket; `None`: the device's own.
    sock: Option<Arc<SourceSocket>>,
    /// Its messages may be GSO runs, which need a UDP checksum (the kernel refuses UDP GSO
    /// without one, `udp_send_skb`); others go without one over IPv4, as rxe sends them.
    checksum: bool,
    msgs: Range<usize>,
}

/// How a sealed queue leaves: the device's own socket, whether it currently sends IPv4
/// without a checksum, and whether the device is IPv4.
pub(super) struct MainSocket<'a> {
    pub(super) sock: &'a UdpSocket,
    pub(super) no_check: &'a AtomicBool,
    pub(super) ipv4: bool,
    /// The device tags its frames: they leave through this instead.
    pub(super) tagged: Option<&'a TaggedTx>,
}

impl TxQueue {
    pub(super) fn new() -> TxQueue {
        TxQueue {
            buf: vec![0; TX_SLOTS * SLOT],
            batch: Vec::with_capacity(TX_SLOTS),
            lent: Vec::new(),
            msgs: Vec::with_capacity(TX_SLOTS),
            runs: Vec::new(),
        }
    }

    pub(super) fn is_full(&self) -> bool {
        self.batch.len() == TX_SLOTS
    }

    fn clear(&mut self) {
        self.batch.clear();
        self.lent.clear();
        self.msgs.clear();
        self.runs.clear();
    }

    /// Sends a sealed queue: each run from its socket, in order, switching the socket's
    /// `SO_NO_CHECK` first where the run needs the other setting (rarely: a device's queue
    /// pairs are usually all of one kind). Only the thread holding `send_order` calls this,
    /// so the switches and their record follow the order of the sends; a switch that fails
    /// is not recorded, and the next run tries again.
    fn send(&self, main: &MainSocket<'_>) -> net::Sent {
        let mut parts = Vec::with_capacity(self.batch.len() * 3);
        let mut packets = Vec::with_capacity(self.batch.len());
        for p in &self.batch {
            let slot = &self.buf[p.slot * SLOT..(p.slot + 1) * SLOT];
            let at = parts.len();
            parts.push(net::IoPart::of(&slot[p.hdr..p.head]));
            parts.extend(self.lent[p.lent.clone()].iter().map(Lent::part));
            if p.tail > 0 {
                parts.push(net::IoPart::of(&slot[p.head..p.head + p.tail]));
            }
            packets.push(at..parts.len());
        }
        let mut total = net::Sent::default();
        for run in &self.runs {
            let (sock, no_check) = match &run.sock {
                Some(s) => (&s.sock, &s.no_check),
                None => (main.sock, main.no_check),
            };
            if let Some(tagged) = main.tagged {
                total += self.send_tagged(tagged, sock, run, &packets, &parts);
                continue;
            }
            if main.ipv4
                && no_check.load(Ordering::Relaxed) == run.checksum
                && net::sys::set_no_check(sock.as_fd(), !run.checksum).is_ok()
            {
                no_check.store(!run.checksum, Ordering::Relaxed);
            }
            total += net::send_batch(sock, &self.msgs[run.msgs.clone()], &packets, &parts);
        }
        total
    }

    /// Sends the messages of `run` tagged, packet by packet, each gathered as its IP and
    /// UDP headers from its slot and the rest of its parts; a message whose peer's MAC is
    /// not known yet leaves untagged from `sock`. A tagging device builds no GSO message
    /// (`Core::queue_tx`), so every message is one packet, which over IPv4 goes without a UDP
    /// checksum either way, as rxe sends it.
    fn send_tagged(
        &self,
        tagged: &TaggedTx,
        sock: &UdpSocket,
        run: &TxRun,
        packets: &[Range<usize>],
        parts: &[net::IoPart],
    ) -> net::Sent {
        let mut total = net::Sent::default();
        let mut frame = Vec::new();
        for m in &self.msgs[run.msgs.clone()] {
            for i in m.first..m.first + m.count {
                let p = &self.batch[i];
                let slot = &self.buf[p.slot * SLOT..(p.slot + 1) * SLOT];
                frame.clear();
                frame.push(net::IoPart::of(&slot[..p.hdr]));
                frame.extend_from_slice(&parts[packets[i].clone()]);
                match tagged.send(m.dest.ip(), m.tos, &frame) {
                    Tagged::Sent => {
                        total.packets += 1;
                        total.tagged += 1;
                        total.bytes += p.datagram_len() as u64;
                        total.calls += 1;
                    }
                    Tagged::Failed => total.errors += 1,
                    Tagged::Unresolved => {
                        // The rest of the message untagged, as the UDP path sends it.
                        let rest = net::TxMsg {
                            first: i,
                            count: m.first + m.count - i,
                            ..*m
                        };
                        let sent = net::send_batch(sock, &[rest], packets, parts);
                        total.unresolved += sent.packets;
                        total += sent;
                        break;
                    }
                }
            }
        }
        total
    }
}

/// The transmit state of a device: the queue being filled, the sealed ones waiting, spares.
pub(crate) struct TxState {
    pub(super) cur: TxQueue,
    ready: VecDeque<TxQueue>,
    spare: Vec<TxQueue>,
    /// A thread is sending ready queues with the lock released ([`Shared::flush`]).
    pub(super) sending: bool,
    /// Posts left packets in the batch and the engine was woken to send them
    /// ([`Core::ring_doorbell`]); cleared when the batch leaves.
    pub(super) doorbell: bool,
    /// A busy poller spinning on the device (its polls under [`super::HOLD_SPIN`] apart)
    /// left what its round's received packets provoked (ACKs above all) for its next visit —
    /// its next poll, or a post that adds packets — so that they go out in one system call
    /// with what the program posts in answer: in a Write ping-pong the ACK of the peer's Write
    /// and this end's own Write. The next poll sends it before it receives; if the program
    /// stops polling instead, the engine sends it when the watcher's next look finds the
    /// poller stopped (`engine::watcher`) or, if that look came under [`super::HOLD_SPIN`]
    /// after the last poll, as it takes the device back: at most
    /// [`super::engine::POLLER_WATCH`] + `HOLD_SPIN` after the last poll where a core is free
    /// for the watcher (and the scheduler's lateness; on a host whose cores are all busy, the
    /// engine's own look at [`super::MAX_SLEEP`]), as it does a poller's last posts
    /// (`engine::engine`). Cleared when the batch leaves.
    pub(super) held: bool,
    /// The queue pair whose turn it is may have its packets coalesced (its peer said it takes
    /// GSO batches: [`super::Qp::set_peer_gso`]).
    pub(super) coalescing: bool,
    /// Held around each send: a thread that sends under the device's lock waits for a queue
    /// being sent without it, which was sealed earlier.
    send_order: Arc<Mutex<()>>,
    /// The device's own socket currently sends IPv4 without a checksum (`SO_NO_CHECK`).
    main_no_check: Arc<AtomicBool>,
    ipv4: bool,
    /// The device tags its frames (`device/tagged.rs`).
    pub(super) tagged: Option<Arc<TaggedTx>>,
}

impl TxState {
    pub(super) fn new(ipv4: bool, tagged: Option<Arc<TaggedTx>>) -> TxState {
        TxState {
            cur: TxQueue::new(),
            ready: VecDeque::new(),
            spare: Vec::new(),
            sending: false,
            doorbell: false,
            held: false,
            coalescing: false,
            send_order: Arc::new(Mutex::new(())),
            // An IPv4 socket is opened without checksums, as rxe sends (`net`).
            main_no_check: Arc::new(AtomicBool::new(ipv4)),
            ipv4,
            tagged,
        }
    }

    /// Packets built and not yet handed to the kernel (or being handed to it).
    pub(super) fn waiting(&self) -> bool {
        !self.cur.batch.is_empty() || !self.ready.is_empty()
    }

    /// Packets in the queue being filled.
    pub(super) fn filling(&self) -> usize {
        self.cur.batch.len()
    }

    /// Sealed queues wait to be sent, or a poller holds the batch: what a poller's next
    /// round sends before it receives.
    pub(super) fn due(&self) -> bool {
        self.held || !self.ready.is_empty()
    }

    /// Packets waiting while no thread sends: the engine does not sleep on them. (While a
    /// thread sends, the engine sleeps even if the queue being filled has packets: spinning
    /// there took the core from the sender and cost a Write stream a fifth of its rate. A
    /// busy poller's last posts left unsealed then wait for the next packet or timer.)
    pub(super) fn unsent(&self) -> bool {
        self.waiting() && !self.sending
    }
}

impl Core {
    /// Seals the queue being filled, if it holds packets: decides the socket of each run of its
    /// messages — the one bound to the source port its packets were built with (their ICRC
    /// covers it) — and queues it to be sent.
    pub(super) fn seal_tx(&mut self) {
        self.tx.doorbell = false;
        self.tx.held = false;
        if self.tx.cur.batch.is_empty() {
            return;
        }
        let next = self.tx.spare.pop().unwrap_or_else(TxQueue::new);
        let mut q = std::mem::replace(&mut self.tx.cur, next);
        let mut at = 0;
        while at < q.msgs.len() {
            let (checksum, sport) = (q.msgs[at].coalesce, q.msgs[at].sport);
            let run = q.msgs[at..]
                .iter()
                .take_while(|m| m.coalesce == checksum && m.sport == sport)
                .count();
            let Ok(sock) = self.ports.shared(sport) else {
                // Its queue pair is gone, and the port's socket with it: lost, counted.
                let lost: usize = q.msgs[at..at + run].iter().map(|m| m.count).sum();
                self.counters.tx_errors += lost as u64;
                at += run;
                continue;
            };
            q.runs.push(TxRun {
                sock,
                checksum,
                msgs: at..at + run,
            });
            at += run;
        }
        self.tx.ready.push_back(q);
    }

    /// Seals and sends everything waiting, under the lock: a full batch in the middle of a
    /// transmit turn (the peer starts on the first packets while the rest are built; leaving
    /// them all for the turn's end cost a loopback IRN stream 15 %), or a queue pair or device
    /// closing. A queue another thread is sending without the lock goes first: this waits
    /// for it.
    pub(super) fn flush_tx(&mut self, main: &UdpSocket) {
        self.seal_tx();
        let (order, no_check) = (self.tx.send_order.clone(), self.tx.main_no_check.clone());
        let tagged = self.tx.tagged.clone();
        let main = MainSocket {
            sock: main,
            no_check: &no_check,
            ipv4: self.tx.ipv4,
            tagged: tagged.as_deref(),
        };
        let _turn = order.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(q) = self.tx.ready.pop_front() {
            let sent = q.send(&main);
            self.count_sent(sent, q);
        }
    }

    fn count_sent(&mut self, sent: net::Sent, mut q: TxQueue) {
        self.counters.tx_packets += sent.packets;
        self.counters.tx_bytes += sent.bytes;
        self.counters.tx_errors += sent.errors;
        self.counters.tx_gso_messages += sent.gso;
        self.counters.tx_calls += sent.calls;
        self.counters.tx_tagged += sent.tagged;
        self.counters.tx_tag_unresolved += sent.unresolved;
        q.clear();
        // A few spares: more were made only for a burst.
        if self.tx.spare.len() < 4 {
            self.tx.spare.push(q);
        }
    }
}

impl Shared {
    /// Sends what the transmit batch holds: seals it and, unless another thread is sending
    /// already (which then sends it too, in order), sends the ready queues with the lock
    /// released around each `sendmmsg` — at most [`FLUSH_MAX`] of them, the engine woken for
    /// the rest, so that a posting thread does not end up sending for everyone. Returns the
    /// lock, held again.
    pub(crate) fn flush<'a>(&'a self, mut core: MutexGuard<'a, Core>) -> MutexGuard<'a, Core> {
        core.seal_tx();
        if core.tx.sending || core.tx.ready.is_empty() {
            return core;
        }
        core.tx.sending = true;
        let (order, no_check) = (core.tx.send_order.clone(), core.tx.main_no_check.clone());
        let tagged = core.tx.tagged.clone();
        let main = MainSocket {
            sock: &self.socks.udp,
            no_check: &no_check,
            ipv4: core.tx.ipv4,
            tagged: tagged.as_deref(),
        };
        for _ in 0..FLUSH_MAX {
            let Some(q) = core.tx.ready.pop_front() else {
                break;
            };
            let turn = order.lock().unwrap_or_else(|p| p.into_inner());
            drop(core);
            let unwinding = ClearSendingOnUnwind(self);
            let sent = q.send(&main);
            std::mem::forget(unwinding);
            drop(turn);
            core = self.lock();
            core.count_sent(sent, q);
        }
        core.tx.sending = false;
        // Queues beyond FLUSH_MAX, or a batch a poller held meanwhile (which the engine does
        // not see as unsent while this thread sends): the engine sends them if nobody else
        // does.
        if !core.tx.ready.is_empty() || core.tx.held {
            self.wake_engine();
        }
        core
    }

    /// [`Shared::flush`], unless a busy poller's round holds the batch for its next visit
    /// ([`TxState::held`]).
    pub(crate) fn flush_unless_held<'a>(
        &'a self,
        core: MutexGuard<'a, Core>,
    ) -> MutexGuard<'a, Core> {
        if core.tx.held {
            core
        } else {
            self.flush(core)
        }
    }
}

/// Held around a send made without the lock: should it unwind, the device is marked as no
/// longer sending, or every later flush would leave its queues to a sender that is gone (and
/// only the engine's in-lock sends would move them). Forgotten when the send returns.
struct ClearSendingOnUnwind<'a>(&'a Shared);

impl Drop for ClearSendingOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.lock().tx.sending = false;
    }
}
