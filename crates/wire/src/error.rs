//! The one error type of the codec.
//!
//! Every failure names the [`Layer`] it happened in, so a decoder can say *where* a packet from the
//! network went wrong ("truncated BTH: need 12 bytes, have 3") without the codec allocating.

use core::fmt;

/// The header (or part of a packet) an [`Error`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// IEEE 802.1Q VLAN tag.
    Vlan,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
    /// UDP header.
    Udp,
    /// InfiniBand Base Transport Header.
    Bth,
    /// IRN extended transport header (this project's extension, see `docs/WIRE.md`).
    IrnEth,
    /// RDMA Extended Transport Header.
    Reth,
    /// ACK Extended Transport Header.
    Aeth,
    /// Atomic Extended Transport Header.
    AtomicEth,
    /// Atomic ACK Extended Transport Header.
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate Extended Transport Header.
    Ieth,
    /// Datagram Extended Transport Header.
    Deth,
    /// The payload and pad of an InfiniBand packet.
    Payload,
    /// The invariant CRC.
    Icrc,
    /// An IEEE 802.3 MAC control frame (PAUSE, PFC).
    MacControl,
    /// A Dynamic RDMA Protocol frame (ethertype 0x01FF).
    Drp,
    /// A management datagram (QP1 / RDMA CM).
    Mad,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "802.1Q tag",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
            Layer::Bth => "BTH",
            Layer::IrnEth => "IRNETH",
            Layer::Reth => "RETH",
            Layer::Aeth => "AETH",
            Layer::AtomicEth => "AtomicETH",
            Layer::AtomicAckEth => "AtomicAckETH",
            Layer::ImmDt => "ImmDt",
            Layer::Ieth => "IETH",
            Layer::Deth => "DETH",
            Layer::Payload => "payload",
            Layer::Icrc => "ICRC",
            Layer::MacControl => "MAC control",
            Layer::Drp => "DRP",
            Layer::Mad => "MAD",
        })
    }
}

/// Why bytes could not be parsed, or a representation could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the header does.
    #[error("truncated {layer}: need {need} bytes, have {have}")]
    Truncated {
        /// Where.
        layer: Layer,
        /// Bytes the header needs.
        need: usize,
        /// Bytes there were.
        have: usize,
    },
    /// A field has a value the specification forbids, or headers contradict each other.
    #[error("malformed {layer}: {what}")]
    Malformed {
        /// Where.
        layer: Layer,
        /// What is wrong, in a few words.
        what: &'static str,
    },
    /// A checksum does not match the bytes it covers.
    #[error("bad {layer} checksum")]
    Checksum {
        /// Which checksum.
        layer: Layer,
    },
    /// Well-formed, but a feature this codec does not implement (e.g. IPv4 options).
    #[error("unsupported {layer}: {what}")]
    Unsupported {
        /// Where.
        layer: Layer,
        /// What.
        what: &'static str,
    },
    /// A representation cannot be emitted: a field is out of range or the headers it asks for
    /// do not fit its opcode.
    #[error("cannot emit {layer}: {what}")]
    Invalid {
        /// Where.
        layer: Layer,
        /// What.
        what: &'static str,
    },
    /// The output buffer is too small for what is being emitted.
    #[error("buffer too small: need {need} bytes, have {have}")]
    Exhausted {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}

impl Error {
    /// The layer the error is about, if any.
    pub fn layer(&self) -> Option<Layer> {
        match *self {
            Error::Truncated { layer, .. }
            | Error::Malformed { layer, .. }
            | Error::Checksum { layer }
            | Error::Unsupported { layer, .. }
            | Error::Invalid { layer, .. } => Some(layer),
            Error::Exhausted { .. } => None,
        }
    }
}

/// Result of a codec operation.
pub type Result<T> = core::result::Result<T, Error>;

/// `Ok(())` if `buf` holds at least `need` bytes, else [`Error::Truncated`] for `layer`.
#[inline]
pub(crate) fn need(layer: Layer, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated {
            layer,
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// `Ok(())` if an output buffer of `have` bytes can hold `need`.
#[inline]
pub(crate) fn room(have: usize, need: usize) -> Result<()> {
    if have < need {
        Err(Error::Exhausted { need, have })
    } else {
        Ok(())
    }
}
