//! Global identifiers: the 16-byte addresses RoCEv2 names ports by (IBTA annex A17.4.5.1 —
//! an IPv6 address, or an IPv4 address mapped into IPv6 as `::ffff:a.b.c.d`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A RoCEv2 GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IP address this GID names (IPv4-mapped GIDs give IPv4).
    pub fn ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid::from(IpAddr::V4(ip))
    }
}

/// 32 lower-case hex digits, the raw bytes in order: the form `ibv_rc_pingpong` exchanges
/// (`gid_to_wire_gid` in rdma-core's `pingpong.c`).
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Error parsing a GID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a GID is 32 hex digits, not {0:?}")]
pub struct GidParseError(pub String);

impl FromStr for Gid {
    type Err = GidParseError;

    fn from_str(s: &str) -> Result<Gid, GidParseError> {
        let bad = || GidParseError(s.chars().take(64).collect());
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Gid(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_round_trip_and_wire_form() {
        let g = Gid::from(Ipv4Addr::new(10, 99, 0, 1));
        // As the interop README's capture shows it.
        assert_eq!(g.to_string(), "00000000000000000000ffff0a630001");
        assert_eq!("00000000000000000000ffff0a630001".parse::<Gid>(), Ok(g));
        assert_eq!(g.ip(), IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1)));
        let v6: IpAddr = "fe80::5054:ff:fe99:11"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(Gid::from(v6).ip(), v6);
        assert!("xyz".parse::<Gid>().is_err());
        assert!("0000000000000000000000000000000g".parse::<Gid>().is_err());
        assert!("ééééééééééééééee".parse::<Gid>().is_err());
    }
}
