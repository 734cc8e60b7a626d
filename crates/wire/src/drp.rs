//! The Dynamic RDMA Protocol frame of SPEC T10 (seed 003: "Hardware Accelerated Dynamic RDMA
//! Method for Gigabit Ethernet").
//!
//! DRP rides directly on Ethernet with EtherType 0x01FF (from the experimental range
//! 0x0101–0x01FF). The paper names the header's fields — an 8-bit control field, TID, TYPE,
//! MODE, SBA, DBA, LEN, SN, ACKN — but its figure with their widths is not in the text we have;
//! the widths and order below are this project's choice, documented in `docs/WIRE.md`.
//!
//! ```text
//!  0        1        2-3        4-7   8-11  12-15  16-23  24-31  32-35
//! +--------+--------+----------+-----+-----+------+------+------+-----+--------
//! | ctrl   | status | reserved | TID | SN  | ACKN | SBA  | DBA  | LEN | payload
//! +--------+--------+----------+-----+-----+------+------+------+-----+--------
//! ```
//!
//! LEN is the transfer length in connection set-up frames and the payload length in data frames
//! (the control field says which). TYPE (read/write) and MODE (direct/indirect) are control bits.

use crate::bytes::{put_u32, put_u64, u32_at, u64_at};
use crate::error::{need, room, Error, Layer, Result};

/// Control bit: connection set-up request.
pub const CTRL_CONN_REQ: u8 = 0x80;
/// Control bit: reply to a set-up request.
pub const CTRL_CONN_ACK: u8 = 0x40;
/// Control bit: data frame.
pub const CTRL_DATA: u8 = 0x20;
/// Control bit: release request.
pub const CTRL_REL_REQ: u8 = 0x10;
/// Control bit: reply to a release request.
pub const CTRL_REL_ACK: u8 = 0x08;
/// Control bit: the transfer is a write (clear: a read).
pub const CTRL_WRITE: u8 = 0x04;
/// Control bit: indirect mode (clear: direct).
pub const CTRL_INDIRECT: u8 = 0x02;

/// Status of a set-up reply: registration succeeded (a *valid* reply).
pub const STATUS_OK: u8 = 0;
/// Status of a set-up reply: memory registration failed (an *invalid* reply).
pub const STATUS_REG_FAILED: u8 = 1;

/// DRP header length.
pub const HEADER_LEN: usize = 36;

/// A view of a DRP frame (the bytes after the EtherType). After [`Drp::new_checked`] no accessor
/// panics, and for a data frame [`Drp::payload`] is LEN bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drp<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Drp<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Drp { buffer }
    }

    /// Wraps a buffer after [`Drp::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks the header, and for data frames that LEN bytes of payload follow.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::Drp, b, HEADER_LEN)?;
        if self.control() & CTRL_DATA != 0 {
            let len = usize::try_from(self.len()).unwrap_or(usize::MAX);
            need(Layer::Drp, b, HEADER_LEN.saturating_add(len))?;
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Control field.
    pub fn control(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Status of a set-up reply.
    pub fn status(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// Transfer ID.
    pub fn tid(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 4)
    }
    /// Sequence number of a data frame.
    pub fn sn(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// Acknowledgement number.
    pub fn ackn(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 12)
    }
    /// Source (initiator) base address.
    pub fn sba(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 16)
    }
    /// Destination (responder) base address.
    pub fn dba(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 24)
    }
    /// Transfer length (set-up) or payload length (data).
    pub fn len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 32)
    }
    /// Whether LEN is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Where the payload of a data frame lies (empty for other frames).
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        if self.control() & CTRL_DATA == 0 {
            return HEADER_LEN..HEADER_LEN;
        }
        let len = usize::try_from(self.len()).unwrap_or(usize::MAX);
        HEADER_LEN..HEADER_LEN + len
    }

    /// Payload of a data frame (empty for other frames).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }
}

/// DRP header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DrpRepr {
    /// Control bits (`CTRL_*`).
    pub control: u8,
    /// Set-up reply status (`STATUS_*`).
    pub status: u8,
    /// Transfer ID.
    pub tid: u32,
    /// Sequence number.
    pub sn: u32,
    /// Acknowledgement number.
    pub ackn: u32,
    /// Source base address.
    pub sba: u64,
    /// Destination base address.
    pub dba: u64,
    /// Transfer or payload length.
    pub len: u32,
}

impl DrpRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Drp<T>) -> Result<Self> {
        v.check_len()?;
        if v.control() & 1 != 0 {
            return Err(Error::Malformed {
                layer: Layer::Drp,
                what: "reserved control bit set",
            });
        }
        Ok(DrpRepr {
            control: v.control(),
            status: v.status(),
            tid: v.tid(),
            sn: v.sn(),
            ackn: v.ackn(),
            sba: v.sba(),
            dba: v.dba(),
            len: v.len(),
        })
    }

    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.control & 1 != 0 {
            return Err(Error::Invalid {
                layer: Layer::Drp,
                what: "reserved control bit set",
            });
        }
        room(buf.len(), HEADER_LEN)?;
        buf[0] = self.control;
        buf[1] = self.status;
        buf[2] = 0;
        buf[3] = 0;
        put_u32(buf, 4, self.tid);
        put_u32(buf, 8, self.sn);
        put_u32(buf, 12, self.ackn);
        put_u64(buf, 16, self.sba);
        put_u64(buf, 24, self.dba);
        put_u32(buf, 32, self.len);
        Ok(HEADER_LEN)
    }
}
