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
    /// `Pd::reg_mr_raw`'s contract: the bytes stay valid, and nothing else touches them while
    /// the region is registered and a work request or a peer may access them.
    pub(super) unsafe fn new(ptr: std::ptr::NonNull<u8>, len: usize) -> RawBuffer {
        RawBuffer { ptr, len }
    }
}

// SAFETY: the engine (behind the device lock) is the buffer's only user while it is registered
// (the caller's contract), from whichever thread holds the lock.
unsafe impl Send for RawBuffer {}

impl AppBuffer for RawBuffer {
    fn bytes(&self) -> &[u8] {
        // SAFETY: valid for `len` bytes and not written elsewhere (the contract).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes this the only access through the device.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}
