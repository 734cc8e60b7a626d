//! Out-of-band connection set-up over TCP (placeholder, filled in below).
