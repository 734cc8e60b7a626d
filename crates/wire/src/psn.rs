//! 24-bit packet sequence numbers (IBTA §9.7.1: PSNs are 24 bits and wrap).

use core::fmt;

/// A 24-bit packet sequence number with wrapping arithmetic.
///
/// Ordering between PSNs is only meaningful within half the space (2^23), as in IBTA's PSN
/// window rules; use [`Psn::distance`] rather than comparing raw values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 valid bits.
    pub const MASK: u32 = 0x00ff_ffff;
    /// Half the PSN space: the largest forward distance [`Psn::distance`] reports.
    pub const HALF: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as an integer below 2^24.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping at 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n`, wrapping at 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The signed distance from `self` to `to`, in `(-2^23, 2^23]`: positive when `to` is after
    /// `self`.
    pub const fn distance(self, to: Psn) -> i32 {
        let d = to.0.wrapping_sub(self.0) & Self::MASK;
        if d > Self::HALF {
            d as i32 - (1 << 24)
        } else {
            d as i32
        }
    }

    /// Whether `self` comes strictly before `other` (within half the space).
    pub const fn precedes(self, other: Psn) -> bool {
        self.distance(other) > 0
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_orders_across_zero() {
        let a = Psn::new(0xff_fffe);
        let b = a.add(3);
        assert_eq!(b.value(), 1);
        assert_eq!(a.distance(b), 3);
        assert_eq!(b.distance(a), -3);
        assert!(a.precedes(b));
        assert_eq!(b.sub(3), a);
        assert_eq!(Psn::new(0x1ff_ffff).value(), 0xff_ffff);
    }
}
