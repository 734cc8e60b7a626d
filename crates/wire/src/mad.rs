//! The common header of InfiniBand management datagrams (IBTA Vol. 1 §13.4.2), enough to name
//! the RDMA CM messages that travel on QP1 (UD SEND_ONLY, Q_Key 0x80010000) in RoCE captures.

use crate::bytes::{u16_at, u32_at, u64_at};
use crate::error::Layer;
use crate::view::fixed_view;

/// Management class of the communication manager (IBTA §12).
pub const CLASS_CM: u8 = 0x07;

fixed_view!(
    /// A view of the 24-byte MAD common header.
    Mad,
    24,
    Layer::Mad
);

impl<T: AsRef<[u8]>> Mad<T> {
    /// Base version (1).
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Management class.
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// Class version.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[2]
    }
    /// Method (with the response bit 0x80).
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[3]
    }
    /// Status.
    pub fn status(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }
    /// Transaction ID.
    pub fn tid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 8)
    }
    /// Attribute ID.
    pub fn attr_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 16)
    }
    /// Attribute modifier.
    pub fn attr_mod(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 20)
    }
}

/// The name of a management class, if well known.
pub fn class_name(class: u8) -> Option<&'static str> {
    Some(match class {
        0x01 => "SubnMgmt",
        0x81 => "SubnMgmt-DR",
        0x03 => "SubnAdm",
        0x04 => "Perf",
        0x05 => "BM",
        0x06 => "DevMgmt",
        0x07 => "CM",
        0x08 => "SNMP",
        _ => return None,
    })
}

/// The name of a CM attribute (IBTA §12.6, Table 106), if known.
pub fn cm_attr_name(attr: u16) -> Option<&'static str> {
    Some(match attr {
        0x0001 => "ClassPortInfo",
        0x0010 => "REQ",
        0x0011 => "MRA",
        0x0012 => "REJ",
        0x0013 => "REP",
        0x0014 => "RTU",
        0x0015 => "DREQ",
        0x0016 => "DREP",
        0x0017 => "SIDR_REQ",
        0x0018 => "SIDR_REP",
        0x0019 => "LAP",
        0x001a => "APR",
        _ => return None,
    })
}
