//! Application memory as the simulator needs it ([`SimMemory`]): one registered buffer per
//! flow end. [`SharedChecked`] checks keys and bounds only (runs at scale carry no payload
//! bytes); `ByteMemory` holds real bytes, filled from a per-flow pattern and verified at the
//! destination when the flow completes.

use irn_transport::rng::Rng;
use irn_transport::{Access, ByteMemory, CheckedMemory, Key, Memory, MrKeys};

/// Application memory as the simulator needs it: one buffer per flow end.
pub trait SimMemory: Memory + Sized + Send {
    /// An empty memory.
    fn create(seed: u64) -> Self;
    /// A registered buffer of `len` bytes for one end of a flow, filled from `fill` when the
    /// memory holds bytes. Returns its address and keys.
    fn flow_buffer(&mut self, len: u64, fill: Option<u64>) -> (u64, MrKeys);
    /// Whether the `len` bytes at `addr` are those `fill` makes (always true when no bytes are
    /// held).
    fn verify(&self, addr: u64, len: u64, fill: u64) -> bool;
    /// Releases a flow's buffer.
    fn release(&mut self, addr: u64, keys: MrKeys);
    /// The buffer every flow of this memory uses, if the model has one: then the other end of
    /// a flow addresses it without asking (as with a well-known region), which is what lets
    /// the two ends of a flow be set up in different partitions. A requester reads it from its
    /// own partition's copy of the peer's memory, so it must depend on the `create` seed only,
    /// never on what happened to the memory since. `None`: each flow has its own
    /// buffer, and the requester reads the responder's from the flow's state (one partition).
    fn known_buffer(&self) -> Option<(u64, MrKeys)>;
}

pub(super) const ALL_ACCESS: Access = Access::LOCAL_WRITE
    .with(Access::REMOTE_WRITE)
    .with(Access::REMOTE_READ)
    .with(Access::REMOTE_ATOMIC);

/// Memory that only checks keys and bounds: one region, large enough for any flow, that every
/// flow of the host shares.
#[derive(Debug)]
pub struct SharedChecked {
    pub(super) mem: CheckedMemory,
    pub(super) addr: u64,
    pub(super) keys: MrKeys,
}

impl Memory for SharedChecked {
    const HOLDS_BYTES: bool = false;
    fn check(
        &self,
        key: Key,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(), irn_transport::MemError> {
        self.mem.check(key, addr, len, access)
    }
    fn read(&self, key: Key, addr: u64, out: &mut [u8]) -> Result<(), irn_transport::MemError> {
        self.mem.read(key, addr, out)
    }
    fn lend(
        &self,
        key: Key,
        addr: u64,
        len: u64,
    ) -> Result<Option<&[u8]>, irn_transport::MemError> {
        self.mem.lend(key, addr, len)
    }
    fn write(&mut self, key: Key, addr: u64, data: &[u8]) -> Result<(), irn_transport::MemError> {
        self.mem.write(key, addr, data)
    }
    fn atomic(
        &mut self,
        rkey: u32,
        addr: u64,
        op: irn_transport::AtomicOp,
    ) -> Result<u64, irn_transport::MemError> {
        self.mem.atomic(rkey, addr, op)
    }
    fn invalidate(&mut self, rkey: u32) -> Result<(), irn_transport::MemError> {
        self.mem.invalidate(rkey)
    }
}

impl SimMemory for SharedChecked {
    fn create(seed: u64) -> Self {
        let mut mem = CheckedMemory::new(seed);
        let len = 1u64 << 40;
        let addr = mem.alloc(len);
        let keys = mem
            .register(addr, len, ALL_ACCESS)
            .unwrap_or(MrKeys { lkey: 0, rkey: 0 });
        SharedChecked { mem, addr, keys }
    }
    fn flow_buffer(&mut self, _len: u64, _fill: Option<u64>) -> (u64, MrKeys) {
        (self.addr, self.keys)
    }
    fn verify(&self, _addr: u64, _len: u64, _fill: u64) -> bool {
        true
    }
    fn release(&mut self, _addr: u64, _keys: MrKeys) {}
    fn known_buffer(&self) -> Option<(u64, MrKeys)> {
        Some((self.addr, self.keys))
    }
}

pub(super) fn pattern(seed: u64, len: u64) -> Vec<u8> {
    let mut r = Rng::stream(seed, 77);
    let mut v = Vec::with_capacity(len as usize);
    while (v.len() as u64) < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len as usize);
    v
}

impl SimMemory for ByteMemory {
    fn create(seed: u64) -> Self {
        ByteMemory::new(seed)
    }
    fn flow_buffer(&mut self, len: u64, fill: Option<u64>) -> (u64, MrKeys) {
        let addr = match fill {
            Some(seed) => self.alloc_with(&pattern(seed, len)),
            None => self.alloc(len as usize),
        };
        let keys = self
            .register(addr, len.max(1), ALL_ACCESS)
            .unwrap_or(MrKeys { lkey: 0, rkey: 0 });
        (addr, keys)
    }
    fn verify(&self, addr: u64, len: u64, fill: u64) -> bool {
        self.buffer(addr)
            .is_some_and(|b| b.len() as u64 >= len && b[..len as usize] == pattern(fill, len)[..])
    }
    fn release(&mut self, _addr: u64, keys: MrKeys) {
        let _ = self.deregister(keys.lkey);
    }
    fn known_buffer(&self) -> Option<(u64, MrKeys)> {
        None
    }
}
