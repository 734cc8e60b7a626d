//! Application memory as the queue pair sees it: registered memory regions with keys, access
//! flags and bounds (IBTA Vol. 1 §10.6; verbs `ibv_reg_mr`).
//!
//! The core reads and writes application memory only through [`Memory`]. Two implementations:
//!
//! * [`ByteMemory`] holds real bytes: the UDP runtime's model, and what data-integrity tests check
//!   byte for byte;
//! * [`CheckedMemory`] keeps the same regions, keys and checks but no bytes, so a simulator with
//!   thousands of queue pairs and gigabytes "in flight" costs nothing per byte.
//!
//! Both check every access completely **before** touching anything: an access that fails a key,
//! permission, bounds or alignment check changes no byte (the IBTA's "no memory is modified on a
//! protection error").
//!
//! Address space: [`Regions::alloc`] hands out non-overlapping buffers at deterministic virtual
//! addresses; [`Regions::register`] makes a memory region over part of one buffer. Two regions
//! over the same buffer alias the same bytes, as two registrations of one buffer do in verbs.
//! Keys come from a seeded generator: unguessable to a peer that does not know the seed, and
//! reproducible in tests and simulations.

use core::fmt;
use std::collections::BTreeMap;

/// Access rights of a memory region (verbs `ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// Local read only (always allowed).
    pub const LOCAL_READ: Access = Access(0);
    /// The local HCA may write (receive buffers, Read response targets).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote peers may RDMA Write.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote peers may RDMA Read.
    pub const REMOTE_READ: Access = Access(4);
    /// Remote peers may do atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Everything.
    pub const ALL: Access = Access(15);

    /// The union.
    #[must_use]
    pub const fn with(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }

    /// Whether every right of `o` is granted.
    pub const fn allows(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }

    /// IBTA rule (verbs: `EINVAL`): remote write or atomic access requires local write.
    pub const fn is_valid(self) -> bool {
        let remote_mutating = self.0 & (Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0;
        !remote_mutating || self.allows(Self::LOCAL_WRITE)
    }
}

/// Keys of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Key for local access (scatter/gather entries).
    pub lkey: u32,
    /// Key a remote peer names in RETH / AtomicETH.
    pub rkey: u32,
}

/// Why a memory access was refused. The queue pair maps these to completion statuses and NAKs
/// (local protection error; remote access error; remote invalid request for misalignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// No region has this key.
    #[error("unknown key 0x{0:08x}")]
    BadKey(u32),
    /// The range leaves the region.
    #[error("range outside the region")]
    OutOfBounds,
    /// The region does not grant the access.
    #[error("access not granted by the region")]
    NoAccess,
    /// An atomic on an address not 8-byte aligned.
    #[error("atomic address not 8-byte aligned")]
    Misaligned,
    /// Registration over memory that was never allocated, or with invalid access flags.
    #[error("invalid registration")]
    InvalidRegistration,
}

/// An atomic operation on 8 bytes (IBTA §9.4.5; big-endian is the wire's business, memory holds
/// host-order u64 values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// If the value equals `compare`, replace it by `swap`.
    CompareSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Add `add` (wrapping).
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

impl AtomicOp {
    /// The new value given the old one.
    pub const fn apply(self, old: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
        }
    }
}

/// Which key space an access uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A local key from a scatter/gather entry.
    Local(u32),
    /// A remote key from a packet.
    Remote(u32),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Local(k) => write!(f, "lkey 0x{k:08x}"),
            Key::Remote(k) => write!(f, "rkey 0x{k:08x}"),
        }
    }
}

/// What the queue pair needs from application memory.
///
/// Every method checks the whole access before doing any of it. `HOLDS_BYTES` tells the core
/// whether reading gives real data; when it is `false`, reads leave the output untouched and
/// writes only check, so the core can skip carrying payload bytes altogether.
pub trait Memory {
    /// Whether this memory stores bytes.
    const HOLDS_BYTES: bool;

    /// Checks that `len` bytes at `addr` may be accessed with `key` for `access`.
    fn check(&self, key: Key, addr: u64, len: u64, access: Access) -> Result<(), MemError>;

    /// Reads `out.len()` bytes at `addr` (local reads need no right; remote reads need
    /// `REMOTE_READ`).
    fn read(&self, key: Key, addr: u64, out: &mut [u8]) -> Result<(), MemError>;
    /// The `len` bytes at `addr`, checked as [`read`](Memory::read) checks them, lent where
    /// they lie: what a driver may hand the kernel as they are instead of copying them
    /// ([`TxPayload::gather`](crate::TxPayload::gather)). `None` when there are no bytes to
    /// lend — a memory that holds none, or a buffer released while a region still names it,
    /// whose bytes read as zeros.
    fn lend(&self, key: Key, addr: u64, len: u64) -> Result<Option<&[u8]>, MemError>;

    /// Writes `data` at `addr` (local writes need `LOCAL_WRITE`, remote ones `REMOTE_WRITE`).
    fn write(&mut self, key: Key, addr: u64, data: &[u8]) -> Result<(), MemError>;

    /// Applies an atomic operation to the 8 aligned bytes at `addr` (needs `REMOTE_ATOMIC`) and
    /// returns the value before it.
    fn atomic(&mut self, rkey: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError>;

    /// Revokes remote access through `rkey` (Send with Invalidate, IBTA §10.6.7.2): later
    /// remote accesses with it fail with a bad key.
    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError>;
}

/// The rights an access by `key` for reading or writing needs.
const fn needed(key: Key, write: bool) -> Access {
    match (key, write) {
        (Key::Local(_), false) => Access::LOCAL_READ,
        (Key::Local(_), true) => Access::LOCAL_WRITE,
        (Key::Remote(_), false) => Access::REMOTE_READ,
        (Key::Remote(_), true) => Access::REMOTE_WRITE,
    }
}

#[derive(Debug, Clone)]
struct Region {
    buffer: u64,
    addr: u64,
    /// The address the region is named by in work requests and RETHs: `addr` unless it was
    /// registered at another I/O virtual address ([`Regions::register_iova`]).
    iova: u64,
    len: u64,
    access: Access,
    keys: MrKeys,
}

/// Allocations, regions and keys: the bookkeeping both memories share.
#[derive(Debug, Clone)]
pub struct Regions {
    /// Buffer start address → length.
    buffers: BTreeMap<u64, u64>,
    /// Next free address.
    next_addr: u64,
    /// lkey → region; rkey → lkey.
    by_lkey: BTreeMap<u32, Region>,
    by_rkey: BTreeMap<u32, u32>,
    rng: crate::rng::Rng,
}

impl Regions {
    /// An empty address space whose keys and addresses derive from `seed`.
    pub fn new(seed: u64) -> Regions {
        let mut r = Regions {
            buffers: BTreeMap::new(),
            next_addr: 0,
            by_lkey: BTreeMap::new(),
            by_rkey: BTreeMap::new(),
            rng: crate::rng::Rng::from_state(seed ^ 0x9e37_79b9_7f4a_7c15),
        };
        // A random-looking, page-aligned base in the lower half of the canonical user range.
        r.next_addr = 0x1000_0000_0000 + (r.next_u64() & 0x0fff_ffff_f000);
        r
    }

    /// Keys and addresses come from the workspace generator: unpredictable without the
    /// seed, reproducible with it.
    fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn fresh_key(&mut self) -> u32 {
        loop {
            let k = self.next_u64() as u32;
            if k != 0 && !self.by_lkey.contains_key(&k) && !self.by_rkey.contains_key(&k) {
                return k;
            }
        }
    }

    /// Reserves `len` bytes at a fresh, page-aligned virtual address and returns it. Buffers never
    /// overlap and are separated by an unmapped guard page.
    pub fn alloc(&mut self, len: u64) -> u64 {
        let addr = self.next_addr;
        self.buffers.insert(addr, len);
        let pages = len.div_ceil(4096) + 1;
        self.next_addr = addr + pages * 4096;
        addr
    }

    /// Registers `[addr, addr + len)`, which must lie in one allocated buffer, with `access`.
    pub fn register(&mut self, addr: u64, len: u64, access: Access) -> Result<MrKeys, MemError> {
        self.register_iova(addr, len, access, addr)
    }

    /// Registers `[addr, addr + len)` as [`register`](Self::register) does, but named by
    /// `[iova, iova + len)`: local scatter/gather entries and remote accesses through its keys
    /// give addresses in that range (`ibv_reg_mr_iova(3)`; IBTA Vol. 1 §10.6.3.1, a region's
    /// virtual address is the consumer's choice). A region over an application's own memory is
    /// named by the application's pointer, which is what its peers are told.
    pub fn register_iova(
        &mut self,
        addr: u64,
        len: u64,
        access: Access,
        iova: u64,
    ) -> Result<MrKeys, MemError> {
        if !access.is_valid() || iova.checked_add(len).is_none() {
            return Err(MemError::InvalidRegistration);
        }
        let (&buffer, &blen) = self
            .buffers
            .range(..=addr)
            .next_back()
            .ok_or(MemError::InvalidRegistration)?;
        let end = addr.checked_add(len).ok_or(MemError::InvalidRegistration)?;
        if end > buffer + blen {
            return Err(MemError::InvalidRegistration);
        }
        let lkey = self.fresh_key();
        let rkey = loop {
            let k = self.fresh_key();
            if k != lkey {
                break k;
            }
        };
        let keys = MrKeys { lkey, rkey };
        self.by_lkey.insert(
            lkey,
            Region {
                buffer,
                addr,
                iova,
                len,
                access,
                keys,
            },
        );
        self.by_rkey.insert(keys.rkey, keys.lkey);
        Ok(keys)
    }

    /// Deregisters the region with this lkey; its keys stop working at once.
    pub fn deregister(&mut self, lkey: u32) -> Result<(), MemError> {
        let r = self.by_lkey.remove(&lkey).ok_or(MemError::BadKey(lkey))?;
        self.by_rkey.remove(&r.keys.rkey);
        Ok(())
    }

    /// Revokes the remote key `rkey`; the region stays usable locally.
    pub fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        self.by_rkey
            .remove(&rkey)
            .map(|_| ())
            .ok_or(MemError::BadKey(rkey))
    }

    /// Checks an access and returns (buffer start, offset of `addr` in it).
    fn resolve(
        &self,
        key: Key,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(u64, u64), MemError> {
        let region = match key {
            Key::Local(k) => self.by_lkey.get(&k),
            Key::Remote(k) => self.by_rkey.get(&k).and_then(|l| self.by_lkey.get(l)),
        };
        let k = match key {
            Key::Local(k) | Key::Remote(k) => k,
        };
        let r = region.ok_or(MemError::BadKey(k))?;
        if !r.access.allows(access) {
            return Err(MemError::NoAccess);
        }
        let end = addr.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if addr < r.iova || end > r.iova + r.len {
            return Err(MemError::OutOfBounds);
        }
        Ok((r.buffer, r.addr - r.buffer + (addr - r.iova)))
    }

    fn check_atomic(&self, rkey: u32, addr: u64) -> Result<(u64, u64), MemError> {
        let at = self.resolve(Key::Remote(rkey), addr, 8, Access::REMOTE_ATOMIC)?;
        if addr % 8 != 0 {
            return Err(MemError::Misaligned);
        }
        Ok(at)
    }
}

/// A buffer an application hands a [`ByteMemory`] to place into and read from directly: any
/// owner of bytes that can move to the engine's thread. `Vec<u8>` and `Box<[u8]>` are; the UDP
/// runtime implements it for memory registered by address (`irn_verbs::Pd::reg_mr_raw`).
///
/// The memory asks for the bytes a work request or a peer names, never more: an application
/// that registered its own memory goes on using the rest of it meanwhile (verbs programs touch
/// one part of a region while a request uses another), so a buffer over such memory must not
/// be borrowed whole by the engine.
pub trait AppBuffer: Send + core::fmt::Debug {
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Whether it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `len` bytes at `off` (`off + len <= self.len()`).
    fn range(&self, off: usize, len: usize) -> &[u8];
    /// The `len` bytes at `off`, to write.
    fn range_mut(&mut self, off: usize, len: usize) -> &mut [u8];
}

impl AppBuffer for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn range(&self, off: usize, len: usize) -> &[u8] {
        &self[off..off + len]
    }
    fn range_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        &mut self[off..off + len]
    }
}

impl AppBuffer for Box<[u8]> {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn range(&self, off: usize, len: usize) -> &[u8] {
        &self[off..off + len]
    }
    fn range_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        &mut self[off..off + len]
    }
}

/// Where an allocation's bytes live.
#[derive(Debug)]
enum Backing {
    /// A `Vec`: allocated here, or handed over by the application ([`ByteMemory::adopt`]),
    /// which may take it back ([`ByteMemory::release`]).
    Owned(Vec<u8>),
    /// Any other application buffer ([`ByteMemory::adopt_buffer`]).
    App(Box<dyn AppBuffer>),
}

impl Backing {
    fn len(&self) -> usize {
        match self {
            Backing::Owned(v) => v.len(),
            Backing::App(b) => b.len(),
        }
    }

    /// The `len` bytes at `off`, if in bounds.
    fn range(&self, off: usize, len: usize) -> Option<&[u8]> {
        if off.checked_add(len)? > self.len() {
            return None;
        }
        Some(match self {
            Backing::Owned(v) => &v[off..off + len],
            Backing::App(b) => b.range(off, len),
        })
    }

    /// The `len` bytes at `off`, to write, if in bounds.
    fn range_mut(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        if off.checked_add(len)? > self.len() {
            return None;
        }
        Some(match self {
            Backing::Owned(v) => &mut v[off..off + len],
            Backing::App(b) => b.range_mut(off, len),
        })
    }

    /// All of it (the owner's view: a test, an application reading its own region, a clone).
    fn whole(&self) -> &[u8] {
        self.range(0, self.len()).unwrap_or(&[])
    }

    fn whole_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        self.range_mut(0, len).unwrap_or(&mut [])
    }
}

impl Clone for Backing {
    /// A clone owns a copy of the bytes: two memories never share one application buffer.
    fn clone(&self) -> Backing {
        Backing::Owned(self.whole().to_vec())
    }
}

/// Memory that holds bytes: its own allocations, or buffers the application handed over —
/// moved in, never copied ([`adopt`](Self::adopt), [`adopt_buffer`](Self::adopt_buffer)) —
/// which packets are placed into directly.
#[derive(Debug, Clone)]
pub struct ByteMemory {
    regions: Regions,
    bytes: BTreeMap<u64, Backing>,
}

impl ByteMemory {
    /// Empty memory; keys and addresses derive from `seed`.
    pub fn new(seed: u64) -> ByteMemory {
        ByteMemory {
            regions: Regions::new(seed),
            bytes: BTreeMap::new(),
        }
    }

    /// Allocates a zeroed buffer of `len` bytes; returns its address.
    pub fn alloc(&mut self, len: usize) -> u64 {
        self.adopt(vec![0; len])
    }

    /// Takes `buf` as an allocation — moved, not copied — and returns its address; the bytes
    /// are placed into and read from `buf` itself, and [`release`](Self::release) gives it
    /// back. What a safe `ibv_reg_mr` over application memory can be in Rust.
    pub fn adopt(&mut self, buf: Vec<u8>) -> u64 {
        let addr = self.regions.alloc(buf.len() as u64);
        self.bytes.insert(addr, Backing::Owned(buf));
        addr
    }

    /// Takes any application buffer as an allocation (moved, not copied); returns its
    /// address. Packets are placed into it directly.
    pub fn adopt_buffer(&mut self, buf: Box<dyn AppBuffer>) -> u64 {
        let addr = self.regions.alloc(buf.len() as u64);
        self.bytes.insert(addr, Backing::App(buf));
        addr
    }

    /// Forgets the allocation at `addr` and returns its buffer if it was a `Vec` (allocated
    /// here or [adopted](Self::adopt)): the same `Vec`, never a copy. Another application
    /// buffer ([`adopt_buffer`](Self::adopt_buffer)) is dropped, which ends this memory's use
    /// of it. Its regions should be deregistered first; keys still registered over it read
    /// and write nothing from now on.
    pub fn release(&mut self, addr: u64) -> Option<Vec<u8>> {
        match self.bytes.remove(&addr)? {
            Backing::Owned(v) => Some(v),
            Backing::App(_) => None,
        }
    }

    /// Allocates a buffer holding `data`; returns its address.
    pub fn alloc_with(&mut self, data: &[u8]) -> u64 {
        self.adopt(data.to_vec())
    }

    /// Registers a memory region (see [`Regions::register`]).
    pub fn register(&mut self, addr: u64, len: u64, access: Access) -> Result<MrKeys, MemError> {
        self.regions.register(addr, len, access)
    }

    /// Registers a memory region named by another address (see [`Regions::register_iova`]).
    pub fn register_iova(
        &mut self,
        addr: u64,
        len: u64,
        access: Access,
        iova: u64,
    ) -> Result<MrKeys, MemError> {
        self.regions.register_iova(addr, len, access, iova)
    }

    /// Deregisters a region.
    pub fn deregister(&mut self, lkey: u32) -> Result<(), MemError> {
        self.regions.deregister(lkey)
    }

    /// The length of the allocation at `addr`, without borrowing its bytes (an application
    /// may be using them).
    pub fn len_of(&self, addr: u64) -> Option<usize> {
        self.bytes.get(&addr).map(Backing::len)
    }

    /// The bytes of the allocation at `addr` (for tests and applications, not the QP).
    pub fn buffer(&self, addr: u64) -> Option<&[u8]> {
        self.bytes.get(&addr).map(Backing::whole)
    }

    /// Mutable bytes of the allocation at `addr`.
    pub fn buffer_mut(&mut self, addr: u64) -> Option<&mut [u8]> {
        self.bytes.get_mut(&addr).map(Backing::whole_mut)
    }

    /// The bytes `resolve` found a registered region for; `None` only when the buffer under a
    /// still-registered key was released (see [`release`](Self::release)): nothing to touch.
    fn slice_mut(&mut self, buffer: u64, off: u64, len: usize) -> Option<&mut [u8]> {
        self.bytes.get_mut(&buffer)?.range_mut(off as usize, len)
    }
}

impl Memory for ByteMemory {
    const HOLDS_BYTES: bool = true;

    fn check(&self, key: Key, addr: u64, len: u64, access: Access) -> Result<(), MemError> {
        self.regions.resolve(key, addr, len, access).map(|_| ())
    }

    fn read(&self, key: Key, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        let (buffer, off) =
            self.regions
                .resolve(key, addr, out.len() as u64, needed(key, false))?;
        let off = off as usize;
        match self
            .bytes
            .get(&buffer)
            .and_then(|b| b.range(off, out.len()))
        {
            Some(b) => out.copy_from_slice(b),
            // A region whose buffer was released reads as zeros, never as whatever `out`
            // held (a driver reuses one payload buffer for every packet it builds).
            None => out.fill(0),
        }
        Ok(())
    }

    fn lend(&self, key: Key, addr: u64, len: u64) -> Result<Option<&[u8]>, MemError> {
        let (buffer, off) = self.regions.resolve(key, addr, len, needed(key, false))?;
        Ok(self
            .bytes
            .get(&buffer)
            .and_then(|b| b.range(off as usize, len as usize)))
    }

    fn write(&mut self, key: Key, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let (buffer, off) =
            self.regions
                .resolve(key, addr, data.len() as u64, needed(key, true))?;
        if let Some(dst) = self.slice_mut(buffer, off, data.len()) {
            dst.copy_from_slice(data);
        }
        Ok(())
    }

    fn atomic(&mut self, rkey: u32, addr: u64, op: AtomicOp) -> Result<u64, MemError> {
        let (buffer, off) = self.regions.check_atomic(rkey, addr)?;
        let Some(cell) = self.slice_mut(buffer, off, 8) else {
            return Ok(0);
        };
        let mut v = [0u8; 8];
        v.copy_from_slice(cell);
        let old = u64::from_ne_bytes(v);
        cell.copy_from_slice(&op.apply(old).to_ne_bytes());
        Ok(old)
    }

    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        self.regions.invalidate(rkey)
    }
}

/// Memory that checks keys, rights and bounds but stores nothing: reads leave the output as it
/// is, atomics return 0.
#[derive(Debug, Clone)]
pub struct CheckedMemory {
    regions: Regions,
}

impl CheckedMemory {
    /// Empty; keys and addresses derive from `seed`.
    pub fn new(seed: u64) -> CheckedMemory {
        CheckedMemory {
            regions: Regions::new(seed),
        }
    }

    /// Reserves address space for a buffer of `len` bytes.
    pub fn alloc(&mut self, len: u64) -> u64 {
        self.regions.alloc(len)
    }

    /// Registers a memory region.
    pub fn register(&mut self, addr: u64, len: u64, access: Access) -> Result<MrKeys, MemError> {
        self.regions.register(addr, len, access)
    }
}

impl Memory for CheckedMemory {
    const HOLDS_BYTES: bool = false;

    fn check(&self, key: Key, addr: u64, len: u64, access: Access) -> Result<(), MemError> {
        self.regions.resolve(key, addr, len, access).map(|_| ())
    }

    fn read(&self, key: Key, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        self.check(key, addr, out.len() as u64, needed(key, false))
    }

    fn lend(&self, key: Key, addr: u64, len: u64) -> Result<Option<&[u8]>, MemError> {
        self.check(key, addr, len, needed(key, false))
            .map(|()| None)
    }

    fn write(&mut self, key: Key, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.check(key, addr, data.len() as u64, needed(key, true))
    }

    fn atomic(&mut self, rkey: u32, addr: u64, _op: AtomicOp) -> Result<u64, MemError> {
        self.regions.check_atomic(rkey, addr).map(|_| 0)
    }

    fn invalidate(&mut self, rkey: u32) -> Result<(), MemError> {
        self.regions.invalidate(rkey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An adopted `Vec` is placed into in place and given back as the same allocation; a
    /// clone of the memory copies it rather than sharing it; a released buffer is no longer
    /// written through keys still registered over it, and reads as zeros through them.
    #[test]
    fn adopted_buffers_are_written_in_place_and_given_back_whole() {
        let mut m = ByteMemory::new(3);
        let buf = vec![0u8; 256];
        let ptr = buf.as_ptr();
        let a = m.adopt(buf);
        let k = m
            .register(a, 256, Access::LOCAL_WRITE.with(Access::REMOTE_WRITE))
            .expect("valid");
        m.write(Key::Remote(k.rkey), a + 10, b"placed")
            .expect("in bounds");
        let copy = m.clone();
        assert_ne!(
            copy.buffer(a).map(<[u8]>::as_ptr),
            Some(ptr),
            "a clone copies"
        );
        let boxed: Box<[u8]> = vec![7u8; 64].into_boxed_slice();
        let b = m.adopt_buffer(Box::new(boxed));
        assert_eq!(m.buffer(b), Some(&[7u8; 64][..]));
        m.deregister(k.lkey).expect("registered");
        let back = m.release(a).expect("a Vec");
        assert_eq!(back.as_ptr(), ptr, "the same allocation, not a copy");
        assert_eq!(&back[10..16], b"placed");
        assert_eq!(m.release(b), None, "not a Vec: dropped");
        assert_eq!(m.buffer(a), None);
        // A key left registered over a released buffer touches nothing (and does not panic).
        let c = m.adopt(vec![0; 16]);
        let k = m
            .register(c, 16, Access::LOCAL_WRITE.with(Access::REMOTE_WRITE))
            .expect("valid");
        m.release(c);
        m.write(Key::Remote(k.rkey), c, &[1; 16])
            .expect("still registered");
        // ... and reads zeros, never what the caller's buffer held.
        let mut out = [0x5a; 16];
        m.read(Key::Local(k.lkey), c, &mut out)
            .expect("still registered");
        assert_eq!(out, [0; 16]);
    }

    /// A region registered at another I/O virtual address is named by it, locally and
    /// remotely, over a part of its buffer; its own address and addresses outside the
    /// named range are out of bounds, and nothing lands outside the part registered.
    #[test]
    fn a_region_is_named_by_its_iova() {
        let mut m = ByteMemory::new(11);
        let a = m.alloc(64);
        let iova = 0x7fff_0000_1000;
        let rw = Access::LOCAL_WRITE
            .with(Access::REMOTE_WRITE)
            .with(Access::REMOTE_READ);
        // Bytes 16..48 of the buffer, named iova..iova + 32.
        let k = m.register_iova(a + 16, 32, rw, iova).expect("valid");
        m.write(Key::Remote(k.rkey), iova + 4, b"far")
            .expect("in range");
        m.write(Key::Local(k.lkey), iova + 29, b"end")
            .expect("in range");
        let buf = m.buffer(a).expect("alloc");
        assert_eq!(&buf[20..23], b"far");
        assert_eq!(&buf[45..48], b"end");
        let mut out = [0u8; 3];
        m.read(Key::Remote(k.rkey), iova + 4, &mut out)
            .expect("in range");
        assert_eq!(&out, b"far");
        for (at, len) in [(iova + 30, 3), (iova - 1, 1), (a + 16, 1)] {
            assert_eq!(
                m.write(Key::Remote(k.rkey), at, &vec![9; len]),
                Err(MemError::OutOfBounds),
                "{at:#x}+{len}"
            );
        }
        assert!(buf_untouched_outside(m.buffer(a).expect("alloc"), 16..48));
        assert_eq!(
            m.register_iova(a, 64, rw, u64::MAX - 10),
            Err(MemError::InvalidRegistration),
            "a named range past the end of the address space"
        );
    }

    fn buf_untouched_outside(buf: &[u8], part: std::ops::Range<usize>) -> bool {
        buf.iter()
            .enumerate()
            .all(|(i, &b)| part.contains(&i) || b == 0)
    }

    fn setup() -> (ByteMemory, u64, MrKeys) {
        let mut m = ByteMemory::new(7);
        let a = m.alloc(4096);
        let k = m
            .register(a, 4096, Access::LOCAL_WRITE.with(Access::REMOTE_WRITE))
            .expect("valid");
        (m, a, k)
    }

    #[test]
    fn remote_write_within_bounds_lands_and_outside_writes_nothing() {
        let (mut m, a, k) = setup();
        m.write(Key::Remote(k.rkey), a + 10, b"abc")
            .expect("allowed");
        assert_eq!(&m.buffer(a).expect("alloc")[10..13], b"abc");
        let before = m.buffer(a).expect("alloc").to_vec();
        // One byte past the end: refused, nothing written (not even the bytes in bounds).
        assert_eq!(
            m.write(Key::Remote(k.rkey), a + 4094, b"xyz"),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            m.write(Key::Remote(k.rkey ^ 1), a, b"x"),
            Err(MemError::BadKey(k.rkey ^ 1))
        );
        assert_eq!(
            m.read(Key::Remote(k.rkey), a, &mut [0; 4]),
            Err(MemError::NoAccess)
        );
        assert_eq!(m.buffer(a).expect("alloc"), &before[..]);
    }

    #[test]
    fn address_overflow_is_out_of_bounds_not_a_panic() {
        let (mut m, _, k) = setup();
        assert_eq!(
            m.write(Key::Remote(k.rkey), u64::MAX - 1, b"abcd"),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            m.check(Key::Local(k.lkey), u64::MAX, u64::MAX, Access::LOCAL_READ),
            Err(MemError::OutOfBounds)
        );
    }

    #[test]
    fn atomics_need_alignment_and_rights_and_return_the_old_value() {
        let mut m = ByteMemory::new(1);
        let a = m.alloc(64);
        let k = m
            .register(a, 64, Access::LOCAL_WRITE.with(Access::REMOTE_ATOMIC))
            .expect("valid");
        assert_eq!(
            m.atomic(k.rkey, a + 8, AtomicOp::FetchAdd { add: 5 }),
            Ok(0)
        );
        assert_eq!(
            m.atomic(k.rkey, a + 8, AtomicOp::FetchAdd { add: 5 }),
            Ok(5)
        );
        assert_eq!(
            m.atomic(
                k.rkey,
                a + 8,
                AtomicOp::CompareSwap {
                    compare: 10,
                    swap: 99
                }
            ),
            Ok(10)
        );
        assert_eq!(
            m.atomic(
                k.rkey,
                a + 8,
                AtomicOp::CompareSwap {
                    compare: 10,
                    swap: 1
                }
            ),
            Ok(99)
        );
        assert_eq!(
            m.atomic(k.rkey, a + 4, AtomicOp::FetchAdd { add: 1 }),
            Err(MemError::Misaligned)
        );
        let no_atomic = m.register(a, 64, Access::LOCAL_WRITE).expect("valid");
        assert_eq!(
            m.atomic(no_atomic.rkey, a, AtomicOp::FetchAdd { add: 1 }),
            Err(MemError::NoAccess)
        );
    }

    #[test]
    fn aliasing_registrations_share_bytes_and_deregistration_revokes() {
        let mut m = ByteMemory::new(3);
        let a = m.alloc(100);
        let k1 = m.register(a, 100, Access::ALL).expect("valid");
        let k2 = m.register(a + 50, 50, Access::ALL).expect("valid");
        assert_ne!(k1.rkey, k2.rkey);
        m.write(Key::Remote(k2.rkey), a + 60, &[9]).expect("ok");
        let mut b = [0u8; 1];
        m.read(Key::Local(k1.lkey), a + 60, &mut b).expect("ok");
        assert_eq!(b, [9]);
        m.deregister(k2.lkey).expect("registered");
        assert_eq!(
            m.write(Key::Remote(k2.rkey), a + 60, &[1]),
            Err(MemError::BadKey(k2.rkey))
        );
    }

    #[test]
    fn registration_rules() {
        let mut m = ByteMemory::new(4);
        let a = m.alloc(10);
        assert_eq!(
            m.register(a, 10, Access::REMOTE_WRITE),
            Err(MemError::InvalidRegistration),
            "remote write needs local write"
        );
        assert_eq!(
            m.register(a, 11, Access::LOCAL_WRITE),
            Err(MemError::InvalidRegistration)
        );
        assert_eq!(
            m.register(a + 4096, 1, Access::LOCAL_WRITE),
            Err(MemError::InvalidRegistration),
            "guard page is not memory"
        );
    }

    #[test]
    fn checked_memory_checks_exactly_like_byte_memory() {
        let mut b = ByteMemory::new(11);
        let mut c = CheckedMemory::new(11);
        let ab = b.alloc(4096);
        let ac = c.alloc(4096);
        assert_eq!(ab, ac, "same seed, same addresses");
        let kb = b.register(ab, 1000, Access::LOCAL_WRITE.with(Access::REMOTE_READ));
        let kc = c.register(ac, 1000, Access::LOCAL_WRITE.with(Access::REMOTE_READ));
        assert_eq!(kb, kc, "same seed, same keys");
        let k = kb.expect("valid");
        for (key, addr, len) in [
            (Key::Remote(k.rkey), ab, 1000u64),
            (Key::Remote(k.rkey), ab + 1, 1000),
            (Key::Local(k.lkey), ab + 999, 1),
            (Key::Remote(k.lkey ^ k.rkey), ab, 1),
        ] {
            let mut buf = vec![0u8; len as usize];
            assert_eq!(b.read(key, addr, &mut buf), c.read(key, addr, &mut buf));
            assert_eq!(b.write(key, addr, &buf), c.write(key, addr, &buf));
        }
    }

    #[test]
    fn keys_differ_across_seeds() {
        let mut x = ByteMemory::new(1);
        let mut y = ByteMemory::new(2);
        let ax = x.alloc(8);
        let ay = y.alloc(8);
        assert_ne!(
            x.register(ax, 8, Access::ALL).expect("ok"),
            y.register(ay, 8, Access::ALL).expect("ok")
        );
    }
}
