//! The transmit batches, and sending them without the device's lock.
//!
//! Packets are built in place, under the lock, into the current [`TxQueue`]: `TX_SLOTS` slots
//! of `SLOT` bytes, grouped into messages (one datagram each, or a UDP GSO run). A full or
//! flushed queue is *sealed*: the sockets its runs of messages leave from, and the
//! `SO_NO_CHECK` changes they need, are decided then, in order, and it joins the ready list.
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
//! Order on the wire is the order of sealing, as before; counters count what the kernel took
//! once the queue has left.

use std::collections::VecDeque;
use std::net::UdpSocket;
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Core, Shared, SLOT, TX_SLOTS};
use crate::net;

/// One batch of packets built in place, and how it leaves.
pub(crate) struct TxQueue {
    /// `TX_SLOTS` slots of `SLOT` bytes.
    pub(super) buf: Vec<u8>,
    /// (slot, IP + UDP header length, packet length) of each packet in `buf`.
    pub(super) batch: Vec<(usize, usize, usize)>,
    /// The messages `batch` goes out in.
    pub(super) msgs: Vec<net::TxMsg>,
    /// Set when sealed: the runs of messages and their sockets.
    runs: Vec<TxRun>,
}

/// A run of messages that leave from one socket.
struct TxRun {
    /// The source port's socket; `None`: the device's own.
    sock: Option<Arc<UdpSocket>>,
    /// Switch the socket's `SO_NO_CHECK` to this first.
    no_check: Option<bool>,
    msgs: Range<usize>,
}

impl TxQueue {
    pub(super) fn new() -> TxQueue {
        TxQueue {
            buf: vec![0; TX_SLOTS * SLOT],
            batch: Vec::with_capacity(TX_SLOTS),
            msgs: Vec::with_capacity(TX_SLOTS),
            runs: Vec::new(),
        }
    }

    pub(super) fn is_full(&self) -> bool {
        self.batch.len() == TX_SLOTS
    }

    fn clear(&mut self) {
        self.batch.clear();
        self.msgs.clear();
        self.runs.clear();
    }

    /// Sends a sealed queue: each run from its socket, in order.
    fn send(&self, main: &UdpSocket) -> net::Sent {
        let packets: Vec<&[u8]> = self
            .batch
            .iter()
            .map(|&(slot, hdr, len)| &self.buf[slot * SLOT + hdr..slot * SLOT + len])
            .collect();
        let mut total = net::Sent::default();
        for run in &self.runs {
            let sock = run.sock.as_deref().unwrap_or(main);
            if let Some(on) = run.no_check {
                // Decided when the queue was sealed, in sending order; a failure leaves the
                // socket as it was (with a checksum: always correct, only slower).
                let _ = net::sys::set_no_check(sock.as_fd(), on);
            }
            let sent = net::send_batch(sock, &self.msgs[run.msgs.clone()], &packets);
            total.packets += sent.packets;
            total.bytes += sent.bytes;
            total.errors += sent.errors;
            total.gso += sent.gso;
            total.calls += sent.calls;
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
    /// Held around each send: a thread that sends under the device's lock waits for a queue
    /// being sent without it, which was sealed earlier.
    send_order: Arc<Mutex<()>>,
}

impl TxState {
    pub(super) fn new() -> TxState {
        TxState {
            cur: TxQueue::new(),
            ready: VecDeque::new(),
            spare: Vec::new(),
            sending: false,
            send_order: Arc::new(Mutex::new(())),
        }
    }

    /// Packets built and not yet handed to the kernel (or being handed to it).
    pub(super) fn waiting(&self) -> bool {
        !self.cur.batch.is_empty() || !self.ready.is_empty()
    }
}

impl Core {
    /// Seals the queue being filled, if it holds packets: decides the socket of each run of its
    /// messages (the one bound to the source port its packets were built with, their ICRC
    /// covers it) and the `SO_NO_CHECK` switches on the way (GSO needs UDP checksums; single
    /// IPv4 datagrams go without, as rxe sends them), and queues it to be sent.
    pub(super) fn seal_tx(&mut self) {
        self.doorbell = false;
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
            let (sock, no_check) = if sport == self.local.port() {
                (None, &mut self.udp_no_check)
            } else if let Some(s) = self.src_socks.get_mut(&sport) {
                (Some(s.sock.clone()), &mut s.no_check)
            } else {
                // Its queue pair is gone, and the port's socket with it: lost, counted.
                let lost: usize = q.msgs[at..at + run].iter().map(|m| m.count).sum();
                self.counters.tx_errors += lost as u64;
                at += run;
                continue;
            };
            let switch = (self.local.is_ipv4() && *no_check == checksum).then(|| {
                *no_check = !checksum;
                !checksum
            });
            q.runs.push(TxRun {
                sock,
                no_check: switch,
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
        let order = self.tx.send_order.clone();
        let _turn = order.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(q) = self.tx.ready.pop_front() {
            let sent = q.send(main);
            self.count_sent(sent, q);
        }
    }

    fn count_sent(&mut self, sent: net::Sent, mut q: TxQueue) {
        self.counters.tx_packets += sent.packets;
        self.counters.tx_bytes += sent.bytes;
        self.counters.tx_errors += sent.errors;
        self.counters.tx_gso_messages += sent.gso;
        self.counters.tx_calls += sent.calls;
        q.clear();
        // A few spares: more were made only for a burst.
        if self.tx.spare.len() < 2 {
            self.tx.spare.push(q);
        }
    }
}

impl Shared {
    /// Sends what the transmit batch holds: seals it and, unless another thread is sending
    /// already (which then sends it too, in order), sends every ready queue with the lock
    /// released around each `sendmmsg`. Returns the lock, held again.
    pub(crate) fn flush<'a>(&'a self, mut core: MutexGuard<'a, Core>) -> MutexGuard<'a, Core> {
        core.seal_tx();
        if core.tx.sending || core.tx.ready.is_empty() {
            return core;
        }
        core.tx.sending = true;
        let order = core.tx.send_order.clone();
        while let Some(q) = core.tx.ready.pop_front() {
            let turn = order.lock().unwrap_or_else(|p| p.into_inner());
            drop(core);
            let sent = q.send(&self.socks.udp);
            drop(turn);
            core = self.lock();
            core.count_sent(sent, q);
        }
        core.tx.sending = false;
        core
    }
}
