//! Memory registered by address (`Pd::reg_mr_raw`, `ibv_reg_mr`'s form): the one place besides
//! `net::sys` where irn-verbs uses `unsafe`, behind the contract the caller accepted.

#![allow(unsafe_code)]

use irn_transport::AppBuffer;

/// `len` bytes of the application's memory at `ptr`, placed into directly by the engine.
#[derive(Debug)]
pub(super) struct RawBuffer {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl RawBuffer {
    /// # Safety
    ///
    /// `Pd::reg_mr_raw`'s contract: the bytes stay valid while the region is registered, and
    /// nothing else touches the bytes a work request or a peer may access meanwhile.
    pub(super) unsafe fn new(ptr: std::ptr::NonNull<u8>, len: usize) -> RawBuffer {
        RawBuffer { ptr, len }
    }
}

// SAFETY: the engine (behind the device lock) is the buffer's only user while it is registered
// (the caller's contract), from whichever thread holds the lock.
unsafe impl Send for RawBuffer {}

impl AppBuffer for RawBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn range(&self, off: usize, len: usize) -> &[u8] {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (above), and valid while registered (the contract). Only the bytes
        // a work request or a peer names: the application must leave those alone while they
        // may be accessed, and may use the rest of its region meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    fn range_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: as above; `&mut self` makes this the only access through the device.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }
}
