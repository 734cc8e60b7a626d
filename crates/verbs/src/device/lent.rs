//! Sending registered memory from where it lies: the payload of a packet the engine builds
//! ([`Gathered`], the engine's [`TxPayload`]) and the pieces of it a transmit batch hands the
//! kernel as an I/O vector ([`Lent`]).
//!
//! A queue pair lends the bytes of a Send's or Write's gather list, or of a Read response's
//! source, as they lie in registered memory (`Memory::lend`). Copying them behind the headers
//! was two of a Write stream's copies per packet — into a payload buffer, then into the batch's
//! slot, 10 % of the sending engine's cycles (docs/BENCHMARKS.md); now the headers and the
//! trailer (pad and ICRC, which covers the pieces) are written into the slot and the payload
//! stays where it is until `sendmmsg(2)` copies it into the kernel, as a NIC's DMA engine reads
//! a work request's buffers when it sends (the application may reuse them only once the
//! request has completed, `ibv_post_send(3)`; before, the bytes on the wire are undefined, as
//! on a NIC).
//!
//! A packet whose first piece is short is copied anyway ([`COPYBREAK`]): an I/O vector entry
//! costs the kernel more than a short copy. So is one gathered from more than [`MAX_LENT`]
//! pieces.
//!
//! **What keeps a lent piece valid.** Its address is read twice: here, under the device lock,
//! right after the queue pair lent it (the ICRC, a capture, a send impairment), and by the
//! kernel during the batch's send, which may run with the lock released. Nothing frees
//! registered memory without first sending every sealed batch and waiting for a send in
//! progress (`Core::flush_tx` before a region's buffer is released or a protection domain's
//! memory dropped), so the kernel never reads memory that is gone. Bytes written meanwhile
//! (`Mr::write`, a peer's Write into the same region, against the verbs rule that a buffer
//! stays untouched while a request reading it is outstanding) are a race with the kernel's
//! read, not with a Rust access: the packet then leaves with bytes its ICRC, computed when it
//! was built, does not cover, and a receiver that verifies ICRCs drops it (the transport
//! resends). The one dereference in Rust is [`Gathered`]'s, under the lock, in the same turn
//! as the lend; a turn ends with the payload cleared, so no lent piece outlives its turn in
//! the engine. This module is one of the three places irn-verbs uses `unsafe`.

#![allow(unsafe_code)]

use irn_transport::TxPayload;

/// A packet whose first piece is shorter than this has its payload copied into the slot
/// rather than lent.
pub(super) const COPYBREAK: usize = 512;
/// Most pieces one packet lends; a payload in more is copied.
const MAX_LENT: usize = 4;

/// A piece of registered memory a packet carries, as the kernel will read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lent {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a `Lent` is an address and a length; the only dereference is `Gathered`'s, on the
// thread that holds the device lock, in the turn the bytes were lent (module docs).
unsafe impl Send for Lent {}

impl Lent {
    /// The piece as a part of an I/O vector.
    pub(crate) fn part(&self) -> crate::net::IoPart {
        crate::net::IoPart {
            ptr: self.ptr,
            len: self.len,
        }
    }
}

/// The payload of the packet being built: bytes in `bytes` (written by the queue pair, or
/// short pieces copied), or pieces of memory lent in `lent` — one or the other, in the order
/// the queue pair gave them.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    bytes: Vec<u8>,
    lent: Vec<Lent>,
}

impl Gathered {
    pub(super) fn with_capacity(n: usize) -> Gathered {
        Gathered {
            bytes: Vec::with_capacity(n),
            lent: Vec::new(),
        }
    }

    /// The payload as bytes: `Some` when it is held here (or empty), `None` when it is lent.
    pub(super) fn bytes(&self) -> Option<&[u8]> {
        self.lent.is_empty().then_some(&self.bytes[..])
    }

    /// Runs `f` over the lent pieces, as slices (the ICRC, a copy). Sound only in the turn
    /// they were lent, under the device lock — where the engine calls it, between
    /// `poll_transmit` and the packet's slot ([`Gathered::take_lent`] ends it).
    pub(super) fn with_lent<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let mut slices: [&[u8]; MAX_LENT] = [&[]; MAX_LENT];
        for (s, l) in slices.iter_mut().zip(&self.lent) {
            // SAFETY: the queue pair lent these bytes in this turn, from memory the device
            // lock keeps alive and unchanged until the lock is released (module docs).
            *s = unsafe { std::slice::from_raw_parts(l.ptr, l.len) };
        }
        f(&slices[..self.lent.len()])
    }

    /// Moves the lent pieces into a transmit batch's list, leaving none here.
    pub(super) fn take_lent(&mut self, into: &mut Vec<Lent>) {
        into.append(&mut self.lent);
    }

    /// Appends the lent pieces to `out`.
    fn copy_lent(&self, out: &mut Vec<u8>) {
        self.with_lent(|pieces| pieces.iter().for_each(|p| out.extend_from_slice(p)));
    }

    /// Copies the lent pieces into `bytes`: the payload is held here from now on.
    fn inline(&mut self) {
        let mut bytes = std::mem::take(&mut self.bytes);
        self.copy_lent(&mut bytes);
        self.bytes = bytes;
        self.lent.clear();
    }

    /// The payload copied into one buffer (a capture, an impaired packet).
    pub(super) fn to_vec(&self) -> Vec<u8> {
        let mut v = self.bytes.clone();
        self.copy_lent(&mut v);
        v
    }
}

impl<'m> TxPayload<'m> for Gathered {
    fn clear(&mut self) {
        self.bytes.clear();
        self.lent.clear();
    }

    fn fill(&mut self, len: usize) -> &mut [u8] {
        if !self.lent.is_empty() {
            self.inline();
        }
        let at = self.bytes.len();
        self.bytes.resize(at + len, 0);
        &mut self.bytes[at..]
    }

    fn gather(&mut self, bytes: &'m [u8]) {
        if self.lent.len() == MAX_LENT {
            // A packet gathered from many pieces: copied, so that a GSO message's I/O vector
            // stays far below the kernel's 1 024 entries (`UIO_MAXIOV`).
            self.inline();
        }
        if self.lent.is_empty() && (bytes.len() < COPYBREAK || !self.bytes.is_empty()) {
            self.bytes.extend_from_slice(bytes);
        } else {
            self.lent.push(Lent {
                ptr: bytes.as_ptr(),
                len: bytes.len(),
            });
        }
    }
}
