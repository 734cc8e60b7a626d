//! Scatter/gather lists against a [`Memory`]: gathering a request's payload, scattering a
//! response's, checking a receive WQE's buffers (local keys and rights, IBTA §10.6.3).

use crate::memory::{Access, Key, MemError, Memory};
use crate::payload::TxPayload;
use crate::wr::Sge;

/// Walks a scatter/gather list from byte `off` for `len` bytes, calling `f(sge, addr, at, n)`
/// for each piece (`at` = offset into the data).
fn walk_sg(
    sg: &[Sge],
    off: u64,
    len: u64,
    mut f: impl FnMut(&Sge, u64, usize, usize) -> Result<(), MemError>,
) -> Result<(), MemError> {
    let mut skip = off;
    let mut left = len;
    let mut at = 0usize;
    for s in sg {
        if left == 0 {
            break;
        }
        let slen = u64::from(s.len);
        if skip >= slen {
            skip -= slen;
            continue;
        }
        let n = (slen - skip).min(left);
        f(s, s.addr + skip, at, n as usize)?;
        skip = 0;
        left -= n;
        at += n as usize;
    }
    if left > 0 {
        return Err(MemError::OutOfBounds);
    }
    Ok(())
}

/// Appends `len` bytes of a gather list from byte `off` to `payload`: lent where they lie
/// ([`Memory::lend`]), zeros where a memory has no bytes to lend.
pub(crate) fn gather<'m, M: Memory, P: TxPayload<'m>>(
    mem: &'m M,
    sg: &[Sge],
    off: u64,
    len: u64,
    payload: &mut P,
) -> Result<(), MemError> {
    walk_sg(sg, off, len, |s, addr, _, n| {
        match mem.lend(Key::Local(s.lkey), addr, n as u64)? {
            Some(b) => payload.gather(b),
            None => payload.fill(n).fill(0),
        }
        Ok(())
    })
}

/// Writes `data` into a scatter list from byte `off` (checking every piece before writing any).
pub(crate) fn scatter<M: Memory>(
    mem: &mut M,
    sg: &[Sge],
    off: u64,
    data: &[u8],
) -> Result<(), MemError> {
    let len = data.len() as u64;
    walk_sg(sg, off, len, |s, addr, _, n| {
        mem.check(Key::Local(s.lkey), addr, n as u64, Access::LOCAL_WRITE)
    })?;
    walk_sg(sg, off, len, |s, addr, at, n| {
        mem.write(Key::Local(s.lkey), addr, &data[at..at + n])
    })
}

/// Places `len` bytes of an incoming Send at byte `off` of a receive WQE: writes them when the
/// memory holds bytes, else only checks.
pub(crate) fn place_local<M: Memory>(
    mem: &mut M,
    sg: &[Sge],
    off: u64,
    len: u64,
    payload: &[u8],
) -> Result<(), MemError> {
    if M::HOLDS_BYTES && !payload.is_empty() {
        scatter(mem, sg, off, payload)
    } else {
        walk_sg(sg, off, len, |s, addr, _, n| {
            mem.check(Key::Local(s.lkey), addr, n as u64, Access::LOCAL_WRITE)
        })
    }
}
