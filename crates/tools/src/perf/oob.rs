//! The out-of-band exchange of `irn perf` (module [`crate::perf`]): perftest's own over
//! TCP (perftest 4.5, "6.06") or, with `-R`, over an RC connection made through the RDMA CM —
//! versions, system data and path MTU when it opens, the key-message hand-shakes around the
//! connection and the test in perftest's order (its peer follows them step by step), the
//! client's bandwidth report, and `done`; with an irn peer (a marker after the version string
//! tells), irn's additions too.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::bail;
use crate::error::Result;
use irn_verbs::exchange::{self, BwReport, PerfKey, PerfOp, PerftestVersion};
use irn_verbs::{Device, Qp, QpAttr};

use crate::cm::CmChannel;

/// How long one step of the exchange may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server waits for its client to finish the test: as long as it takes (a client
/// that dies closes the connection, which ends the wait at once).
pub(crate) const TEST_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// perftest's cycle buffer (the page size it advertises) and cache line.
pub(crate) const CYCLE_BUFFER: u64 = 4096;
const CACHE_LINE: u32 = 64;

/// What carries the exchange: TCP, or (`-R`) an RC connection made through the RDMA CM.
pub(crate) enum Chan {
    Tcp(TcpStream),
    Cm(Box<CmChannel>),
}

/// The out-of-band connection: perftest's exchange, with irn's additions when both ends are
/// irn.
pub(crate) struct Oob {
    pub(crate) chan: Chan,
    pub(crate) client: bool,
    pub(crate) peer_irn: bool,
    pub(crate) peer: SocketAddr,
}

impl Oob {
    /// Runs the opening over `chan`: versions, system data, path MTU. Returns the session and
    /// the path MTU both ends use.
    pub(crate) fn open(chan: Chan, client: bool, mtu: Option<u32>) -> Result<(Oob, u32)> {
        let peer = match &chan {
            Chan::Tcp(t) => t.peer_addr()?,
            Chan::Cm(c) => c.peer(),
        };
        let mtu = mtu.unwrap_or_else(|| irn_verbs::active_mtu(peer.ip()));
        let mut oob = Oob {
            chan,
            client,
            peer_irn: false,
            peer,
        };
        let v = oob.swap(&PerftestVersion::ours(), PerftestVersion::LEN, TIMEOUT)?;
        let v = PerftestVersion::parse(&v)?;
        oob.peer_irn = v.irn;
        // System data: each end keeps the larger; they only shape perftest's buffers.
        oob.swap(&(CYCLE_BUFFER as u32).to_be_bytes(), 4, TIMEOUT)?;
        oob.swap(&CACHE_LINE.to_be_bytes(), 4, TIMEOUT)?;
        let theirs =
            exchange::mtu_from_wire(&oob.swap(&exchange::mtu_to_wire(mtu), 2, TIMEOUT)?)?;
        Ok((oob, mtu.min(theirs)))
    }

    pub(crate) fn cm(&self) -> bool {
        matches!(self.chan, Chan::Cm(_))
    }

    /// One message of `n` bytes from the peer.
    pub(crate) fn recv_msg(&mut self, n: usize, timeout: Duration) -> Result<Vec<u8>> {
        match &mut self.chan {
            Chan::Tcp(t) => Ok(exchange::read_exact(t, n, timeout)?),
            Chan::Cm(c) => c.recv(n, timeout),
        }
    }

    /// The peer closed the exchange's connection: a TCP end of file is waiting, or the CM
    /// connection was ended (its DREQ). Data waiting is not a close.
    pub(crate) fn peer_closed(&mut self) -> bool {
        let t = match &mut self.chan {
            Chan::Tcp(t) => t,
            Chan::Cm(c) => return c.peer_disconnected(),
        };
        if t.set_nonblocking(true).is_err() {
            return false;
        }
        let closed = matches!(t.peek(&mut [0u8; 1]), Ok(0));
        // Back to blocking for the exchange's next message; if that fails, the next read
        // reports it.
        let _ = t.set_nonblocking(false);
        closed
    }

    /// One message to the peer.
    pub(crate) fn send_msg(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.chan {
            Chan::Tcp(t) => Ok(exchange::write_all(t, bytes)?),
            Chan::Cm(c) => c.send(bytes),
        }
    }

    /// perftest's `ctx_xchg_data`: the client sends first, the server answers.
    pub(crate) fn swap(&mut self, mine: &[u8], n: usize, timeout: Duration) -> Result<Vec<u8>> {
        match &mut self.chan {
            Chan::Tcp(t) => Ok(exchange::swap(t, self.client, mine, n, timeout)?),
            Chan::Cm(_) if self.client => {
                self.send_msg(mine)?;
                self.recv_msg(n, timeout)
            }
            Chan::Cm(_) => {
                let theirs = self.recv_msg(n, timeout)?;
                self.send_msg(mine)?;
                Ok(theirs)
            }
        }
    }

    /// perftest's `ctx_hand_shake`: one key message each way (text over TCP, perftest's
    /// binary `struct pingpong_dest` over the CM).
    pub(crate) fn hand_shake(&mut self, mine: &PerfKey, timeout: Duration) -> Result<PerfKey> {
        if self.cm() {
            let theirs = self.swap(&mine.to_binary(0), PerfKey::BINARY_LEN, timeout)?;
            return Ok(PerfKey::parse_binary(&theirs)?);
        }
        let theirs = self.swap(&mine.to_wire(), PerfKey::LEN, timeout)?;
        Ok(PerfKey::parse(&theirs)?)
    }

    /// `-R`: the test queue pairs connect through the CM between two hand-shakes
    /// (perftest's `create_rdma_cm_connection`); nothing over TCP.
    pub(crate) fn cm_connect(
        &mut self,
        dev: &Device,
        qps: &[Qp],
        attr: &QpAttr,
        k: &PerfKey,
    ) -> Result<()> {
        if !self.cm() {
            return Ok(());
        }
        self.hand_shake(k, TIMEOUT)?;
        let client = self.client;
        if let Chan::Cm(c) = &mut self.chan {
            c.connect_data(dev, qps, attr, client)?;
        }
        self.hand_shake(k, TIMEOUT)?;
        Ok(())
    }

    /// The hand-shakes before a test (perftest's order, which its peer follows step by step):
    /// one per queue pair to learn the keys; the queue pairs connect (`connect`); then, for
    /// Writes, Reads and atomics, one per queue pair and one more; for Sends, one, one per
    /// queue pair, the server's receives posted (`ready`), and one more, so that no Send
    /// arrives before its receive.
    ///
    /// A latency test (`latency`) follows perftest's latency tools instead, one queue pair:
    /// Write, Read and atomics swap keys twice, connect and swap twice more; Send swaps once,
    /// connects, swaps twice, posts its receives (`ready`) and swaps a last time.
    pub(crate) fn before_test(
        &mut self,
        mine: &[PerfKey],
        op: PerfOp,
        latency: bool,
        connect: impl FnOnce(&[PerfKey]) -> Result<()>,
        ready: impl FnOnce() -> Result<()>,
    ) -> Result<Vec<PerfKey>> {
        if latency {
            let k = &mine[0];
            let theirs = [self.hand_shake(k, TIMEOUT)?];
            same_family(&theirs, k)?;
            if op != PerfOp::Send {
                self.hand_shake(k, TIMEOUT)?;
            }
            connect(&theirs)?;
            self.hand_shake(k, TIMEOUT)?;
            self.hand_shake(k, TIMEOUT)?;
            if op == PerfOp::Send {
                ready()?;
                self.hand_shake(k, TIMEOUT)?;
            }
            return Ok(theirs.to_vec());
        }
        let mut theirs = Vec::with_capacity(mine.len());
        for k in mine {
            theirs.push(self.hand_shake(k, TIMEOUT)?);
        }
        same_family(&theirs, &mine[0])?;
        connect(&theirs)?;
        let (first, then) = if op == PerfOp::Send {
            (1, mine.len())
        } else {
            (mine.len(), 1)
        };
        for k in mine.iter().take(first) {
            self.hand_shake(k, TIMEOUT)?;
        }
        for k in mine.iter().take(then) {
            self.hand_shake(k, TIMEOUT)?;
        }
        if op == PerfOp::Send {
            ready()?;
            self.hand_shake(&mine[0], TIMEOUT)?;
        }
        Ok(theirs)
    }

    /// After a Write, Read or atomic test: one hand-shake (the server waits here for the test
    /// to end) and the client's report, eight bytes at a time (the server's comes back,
    /// meaningless from perftest).
    pub(crate) fn after_test(&mut self, mine: &PerfKey, report: &BwReport) -> Result<BwReport> {
        self.hand_shake(mine, TEST_TIMEOUT)?;
        // Value by value, each its own lock-step step, as perftest reads them.
        let wire = report.to_wire();
        let mut theirs = Vec::with_capacity(BwReport::LEN);
        for word in wire.chunks(8) {
            theirs.extend(self.swap(word, 8, TIMEOUT)?);
        }
        Ok(BwReport::parse(&theirs)?)
    }

    /// perftest's `ctx_close_connection`: a hand-shake (waiting up to `timeout` for the
    /// peer to get there), then `done` over TCP (the peer's is not required); then
    /// [`Oob::end`].
    pub(crate) fn close(mut self, mine: &PerfKey, timeout: Duration) -> Result<()> {
        self.hand_shake(mine, timeout)?;
        if let Chan::Tcp(t) = &mut self.chan {
            exchange::write_all(t, b"done\0")?;
            let _ = exchange::read_exact(t, 5, Duration::from_secs(2));
        }
        self.end()
    }

    /// Ends the session: over the CM, the client disconnects every connection and the server
    /// waits for it to (the CM answering); a TCP connection just closes.
    pub(crate) fn end(self) -> Result<()> {
        match self.chan {
            Chan::Tcp(_) => Ok(()),
            Chan::Cm(c) => c.finish(self.client, Duration::from_secs(10)),
        }
    }
}

/// perftest refuses to connect an IPv4 GID with an IPv6 one (`ctx_check_gid_compatibility`).
fn same_family(theirs: &[PerfKey], mine: &PerfKey) -> Result<()> {
    if theirs
        .iter()
        .any(|t| t.gid.ip().is_ipv4() != mine.gid.ip().is_ipv4())
    {
        bail!(
            "the peer's GID {} and ours {} are not both IPv4 (or both IPv6): give the peer the \
             GID index (-x / -g) of the address family this connection uses",
            theirs[0].gid.ip(),
            mine.gid.ip()
        );
    }
    Ok(())
}
