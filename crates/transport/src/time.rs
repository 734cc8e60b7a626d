//! The core's own clock types. The core never reads a clock: drivers pass `now` into every call
//! and get absolute deadlines back.
//!
//! Time is an integer count of **picoseconds**, so that a simulator can represent the
//! serialization time of a 64-byte frame at 400 Gb/s (1.28 ns) exactly. `u64` picoseconds last
//! 213 days.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time: picoseconds since an epoch the driver chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

/// A span of time in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Dur(u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);
    /// The end of time: a deadline that never comes.
    pub const MAX: Time = Time(u64::MAX);

    /// From picoseconds since the epoch.
    pub const fn from_picos(ps: u64) -> Time {
        Time(ps)
    }

    /// Picoseconds since the epoch.
    pub const fn as_picos(self) -> u64 {
        self.0
    }

    /// Time since `earlier`, zero if `earlier` is later.
    pub const fn since(self, earlier: Time) -> Dur {
        Dur(self.0.saturating_sub(earlier.0))
    }
}

impl Dur {
    /// Zero.
    pub const ZERO: Dur = Dur(0);
    /// Longer than anything.
    pub const MAX: Dur = Dur(u64::MAX);

    /// From picoseconds.
    pub const fn from_picos(ps: u64) -> Dur {
        Dur(ps)
    }
    /// From nanoseconds (saturating).
    pub const fn from_nanos(ns: u64) -> Dur {
        Dur(ns.saturating_mul(1_000))
    }
    /// From microseconds (saturating).
    pub const fn from_micros(us: u64) -> Dur {
        Dur(us.saturating_mul(1_000_000))
    }
    /// From milliseconds (saturating).
    pub const fn from_millis(ms: u64) -> Dur {
        Dur(ms.saturating_mul(1_000_000_000))
    }
    /// Picoseconds.
    pub const fn as_picos(self) -> u64 {
        self.0
    }
    /// Nanoseconds, rounded down.
    pub const fn as_nanos(self) -> u64 {
        self.0 / 1_000
    }
    /// Microseconds as a float (for reports).
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// A duration given in microseconds as a float (configurations, reports), to the nearest
    /// picosecond; negative and NaN give zero (callers check their inputs first).
    pub fn from_micros_f64(us: f64) -> Dur {
        Dur((us * 1e6).round() as u64)
    }

    /// The time `bytes` take on a link of `bits_per_second`, rounded up to a picosecond.
    pub const fn transmission(bytes: u64, bits_per_second: u64) -> Dur {
        if bits_per_second == 0 {
            return Dur::MAX;
        }
        let ps = (bytes as u128 * 8 * 1_000_000_000_000).div_ceil(bits_per_second as u128);
        if ps > u64::MAX as u128 {
            Dur::MAX
        } else {
            Dur(ps as u64)
        }
    }

    /// `self × n`, saturating.
    pub const fn saturating_mul(self, n: u64) -> Dur {
        Dur(self.0.saturating_mul(n))
    }

    /// `self` doubled `times` times, saturating: a timer backed off once per expiry
    /// (RFC 6298 §5.5).
    pub const fn doubled(self, times: u32) -> Dur {
        if times >= 64 {
            return if self.0 == 0 { Dur(0) } else { Dur::MAX };
        }
        match self.0.checked_mul(1u64 << times) {
            Some(ps) => Dur(ps),
            None => Dur::MAX,
        }
    }
}

impl Add<Dur> for Time {
    type Output = Time;
    /// Saturates at [`Time::MAX`].
    fn add(self, d: Dur) -> Time {
        Time(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Dur> for Time {
    fn add_assign(&mut self, d: Dur) {
        *self = *self + d;
    }
}

impl Sub<Time> for Time {
    type Output = Dur;
    /// Saturates at zero.
    fn sub(self, earlier: Time) -> Dur {
        self.since(earlier)
    }
}

impl Add for Dur {
    type Output = Dur;
    fn add(self, o: Dur) -> Dur {
        Dur(self.0.saturating_add(o.0))
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ps = self.0;
        if ps >= 1_000_000_000 {
            write!(f, "{:.3}ms", ps as f64 / 1e9)
        } else if ps >= 1_000_000 {
            write!(f, "{:.3}us", ps as f64 / 1e6)
        } else {
            write!(f, "{:.3}ns", ps as f64 / 1e3)
        }
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}", Dur(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_saturates() {
        let d = Dur::from_micros(100);
        assert_eq!(d.doubled(0), d);
        assert_eq!(d.doubled(3), Dur::from_micros(800));
        assert_eq!(d.doubled(40), Dur::MAX);
        assert_eq!(d.doubled(200), Dur::MAX);
        assert_eq!(Dur::ZERO.doubled(200), Dur::ZERO);
        assert_eq!(Dur::from_picos(1).doubled(63), Dur::from_picos(1 << 63));
    }

    #[test]
    fn transmission_time_is_exact_in_picoseconds() {
        // 64 B at 400 Gb/s = 1.28 ns; 1024 B at 40 Gb/s = 204.8 ns.
        assert_eq!(
            Dur::transmission(64, 400_000_000_000),
            Dur::from_picos(1_280)
        );
        assert_eq!(
            Dur::transmission(1024, 40_000_000_000),
            Dur::from_picos(204_800)
        );
        assert_eq!(Dur::transmission(1, 3), Dur::from_picos(2_666_666_666_667));
        assert_eq!(Dur::transmission(1, 0), Dur::MAX);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Time::MAX + Dur::from_micros(1), Time::MAX);
        assert_eq!(Time::ZERO - Time::from_picos(5), Dur::ZERO);
        assert_eq!(
            Time::ZERO + Dur::from_micros(100),
            Time::from_picos(100_000_000)
        );
    }
}
