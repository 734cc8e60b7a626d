//! Where a queue pair puts the payload of a packet it builds ([`QueuePair::poll_transmit`]).
//!
//! A packet's payload is either bytes the queue pair makes itself (an atomic's original value,
//! zeros standing in for memory that went away) or bytes of registered memory: a Send's or
//! Write's gather list, a Read response's source. The second kind is *lent*
//! ([`Memory::lend`]), borrowed for as long as the memory is, so a driver chooses what to do
//! with it: a `Vec<u8>` copies it (the simulator, tests, anything that keeps packets), while
//! the UDP runtime keeps where it lies and hands it to the kernel as an I/O vector — the copy
//! a NIC's DMA engine saves: the HCA reads a work request's buffers when it sends, and the
//! application may reuse them only once the request has been executed and its completion
//! retrieved (rdma-core's `ibv_post_send(3)`).
//!
//! [`QueuePair::poll_transmit`]: crate::QueuePair::poll_transmit
//! [`Memory::lend`]: crate::Memory::lend

/// The payload of the packet being built: emptied first, then appended to in order.
pub trait TxPayload<'m> {
    /// Forgets what it holds: the next packet's payload starts empty.
    fn clear(&mut self);
    /// Appends `len` bytes the queue pair writes itself and returns them (their content is
    /// unspecified until written).
    fn fill(&mut self, len: usize) -> &mut [u8];
    /// Appends bytes of registered memory, lent where they lie.
    fn gather(&mut self, bytes: &'m [u8]);
}

/// A `Vec` holds a copy: exactly the payload's bytes.
impl<'m> TxPayload<'m> for Vec<u8> {
    fn clear(&mut self) {
        Vec::clear(self);
    }

    fn fill(&mut self, len: usize) -> &mut [u8] {
        let at = self.len();
        self.resize(at + len, 0);
        &mut self[at..]
    }

    fn gather(&mut self, bytes: &'m [u8]) {
        self.extend_from_slice(bytes);
    }
}
