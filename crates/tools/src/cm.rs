//! perftest's `-R` ("connect QPs with rdma_cm") for `irn perf`: the exchange runs over an RC
//! connection made through the RDMA CM instead of TCP, and every test queue pair is connected
//! through the CM too, all to the same rdma_cm port (perftest 4.5, `perftest_communication.c`).
//!
//! * **The exchange** (`create_comm_struct` / `establish_connection`): the client connects
//!   one RC queue pair to the server's port; the server listens, accepts it and keeps one
//!   receive posted (`post_one_recv_wqe`: 56 bytes, `sizeof(struct pingpong_dest)`). Each
//!   message of the TCP exchange becomes one Send of the same bytes, in the same lock-step
//!   order (client sends first) — except the key messages, which travel as the binary
//!   `struct pingpong_dest` ([`PerfKey::to_binary`]) instead of perftest's 108-byte text, and
//!   the closing `done`, which is not sent.
//! * **The test queue pairs** (`create_rdma_cm_connection`): after the version, system-data
//!   and MTU messages, one hand-shake, then one CM connection per queue pair (the client
//!   connects them one after another; the server accepts them in the order they come), then
//!   another hand-shake. Queue pair numbers and PSNs in the later key messages are not used:
//!   the CM set them.
//! * **The end**: the client disconnects every test connection, then the exchange's; the
//!   server waits (a while) for the client to do so, its device's CM answering each DREQ.
//!
//! perftest's server creates its listener again after the first hand-shake, so a REQ that
//! comes too early is refused (REJ, invalid service ID); perftest's client then tries again
//! (10 times, 100 ms apart) and so does irn's.
//!
//! [`PerfKey::to_binary`]: irn_verbs::exchange::PerfKey::to_binary

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::bail;
use crate::error::{Context, Result};
use irn_verbs::cm::{self, CmConfig, CmConnection, CmError, CmListener};
use irn_verbs::{
    Access, Cq, Device, Mr, Pd, Qp, QpAttr, QpInit, QpMode, RecvWr, SendOp, SendWr, WcOpcode,
    WcStatus,
};

/// Bytes of a message slot: perftest's messages are at most 56 bytes; irn's own (between irn
/// ends) at most 128.
const SLOT: u32 = 4096;
/// How often a wait for a message also looks for the peer's disconnect.
const POLL: Duration = Duration::from_millis(100);
/// perftest's client: `rdma_cm_client_connection` tries 10 times, 100 ms apart.
pub(crate) const CONNECT_TRIES: u32 = 10;
const CONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The exchange's connection and, once made, the test queue pairs' connections.
pub(crate) struct CmChannel {
    qp: Qp,
    cq: Cq,
    rcq: Cq,
    mr: Mr,
    _pd: Pd,
    conn: Option<CmConnection>,
    /// The server's listener, kept for the test queue pairs' requests.
    listener: Option<CmListener>,
    data: Vec<CmConnection>,
    /// A Send whose completion has not been taken yet.
    unreaped: bool,
    cfg: CmConfig,
    /// The server's address and rdma_cm port (the client's target; the server's own).
    server: SocketAddr,
}

/// The exchange queue pair's settings: perftest's `rdma_client_connect` (retry count 7, RNR
/// retry 7) with rxe's 67 ms local ACK timeout.
fn control_attr() -> QpAttr {
    QpAttr {
        path_mtu: 1024,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..QpAttr::default()
    }
}

/// Connects `qp` through the CM, trying again while the server refuses (not listening yet)
/// or, with `retry_unanswered`, does not answer (each such try already sent its REQ
/// `cfg.max_retries` times).
pub(crate) fn connect_retrying(
    dev: &Device,
    qp: &Qp,
    attr: &QpAttr,
    to: SocketAddr,
    cfg: CmConfig,
    tries: u32,
    retry_unanswered: bool,
) -> Result<CmConnection> {
    let mut last = None;
    for _ in 0..tries {
        match cm::connect(dev, qp, attr, to, &[], cfg) {
            Ok(c) => return Ok(c),
            Err(e @ CmError::Rejected(8)) => {
                last = Some(e);
                std::thread::sleep(CONNECT_PAUSE);
            }
            Err(e @ CmError::Timeout { .. }) if retry_unanswered => {
                last = Some(e);
                std::thread::sleep(CONNECT_PAUSE);
            }
            Err(e) => return Err(e).with_context(|| format!("connecting to {to}")),
        }
    }
    Err(last.expect("tried at least once")).with_context(|| format!("connecting to {to}"))
}

impl CmChannel {
    fn new(dev: &Device, cfg: CmConfig, server: SocketAddr) -> Result<CmChannel> {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4)?;
        let rcq = dev.create_cq(4)?;
        let qp = pd.create_qp(
            &cq,
            &rcq,
            QpInit {
                mode: QpMode::Roce,
                max_send_wr: 2,
                max_recv_wr: 2,
                ..QpInit::default()
            },
        )?;
        let mr = pd.reg_mr(2 * SLOT as usize, Access::LOCAL_WRITE)?;
        let ch = CmChannel {
            qp,
            cq,
            rcq,
            mr,
            _pd: pd,
            conn: None,
            listener: None,
            data: Vec::new(),
            unreaped: false,
            cfg,
            server,
        };
        // Posted before the connection exists, as perftest does (rdma_create_qp leaves the
        // queue pair in INIT): the peer may send at once.
        ch.qp.init(&control_attr())?;
        ch.post_recv()?;
        Ok(ch)
    }

    /// The client's side: connects the exchange's queue pair to `server`. A server that
    /// is not there yet is waited for (about as long as a TCP connect would).
    pub(crate) fn connect(dev: &Device, server: SocketAddr, cfg: CmConfig) -> Result<CmChannel> {
        let mut ch = CmChannel::new(dev, cfg, server)?;
        let quick = CmConfig {
            max_retries: 2,
            ..cfg
        };
        ch.conn = Some(connect_retrying(
            dev,
            &ch.qp,
            &control_attr(),
            server,
            quick,
            CONNECT_TRIES * 5,
            true,
        )?);
        Ok(ch)
    }

    /// The server's side: listens on `port` of `dev` and accepts the first request (as long
    /// as it takes to come).
    pub(crate) fn accept(
        dev: &Device,
        port: u16,
        cfg: CmConfig,
        wait: Duration,
    ) -> Result<CmChannel> {
        let me = SocketAddr::new(dev.local_addr().ip(), port);
        let mut ch = CmChannel::new(dev, cfg, me)?;
        let l = CmListener::bind(dev, port, cfg)?;
        let req = l
            .get_request(wait)
            .context("waiting for a client's connection request")?;
        ch.conn = Some(l.accept(&req, &ch.qp, &control_attr(), &[])?);
        ch.listener = Some(l);
        Ok(ch)
    }

    /// Whether the peer has ended the exchange's connection (its DREQ: a client that gave up
    /// drops its connections, which sends one), without waiting.
    pub(crate) fn peer_disconnected(&mut self) -> bool {
        self.conn
            .as_mut()
            .is_some_and(|c| c.poll_disconnect().unwrap_or(false))
    }

    /// The peer's address and the rdma_cm port.
    pub(crate) fn peer(&self) -> SocketAddr {
        let ip = self
            .conn
            .as_ref()
            .map_or(self.server.ip(), CmConnection::peer);
        SocketAddr::new(ip, self.server.port())
    }

    fn post_recv(&self) -> Result<()> {
        self.qp.post_recv(RecvWr {
            wr_id: 0,
            sg_list: irn_verbs::sgl![self.mr.sge(0, SLOT)],
        })?;
        Ok(())
    }

    /// Sends one message (`rdma_write_data`). Its completion is taken before the next Send:
    /// the exchange is lock-step, so the peer's answer shows it arrived, and after the last
    /// message the peer may be gone before its ACK (lost) could be sent again.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > SLOT as usize {
            bail!("an exchange message of {} bytes", bytes.len());
        }
        if self.unreaped {
            self.reap()?;
        }
        self.mr.write(u64::from(SLOT), bytes)?;
        self.qp.post_send(SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: irn_verbs::sgl![self.mr.sge(u64::from(SLOT), bytes.len() as u32)],
            signaled: true,
            fence: false,
            solicited: false,
        })?;
        self.unreaped = true;
        Ok(())
    }

    /// Waits for the completion of the last Send.
    fn reap(&mut self) -> Result<()> {
        self.unreaped = false;
        let wc = wait_on(&self.cq, &mut self.conn, Duration::from_secs(60), "a Send")?;
        if wc.status != WcStatus::Success {
            bail!(
                "the exchange's Send completed with {:?} (the peer is gone?)",
                wc.status
            );
        }
        Ok(())
    }

    /// Waits up to `timeout` for the next message, which must be `n` bytes (`rdma_read_data`),
    /// and posts the receive again.
    pub(crate) fn recv(&mut self, n: usize, timeout: Duration) -> Result<Vec<u8>> {
        let wc = wait_on(&self.rcq, &mut self.conn, timeout, "a message")?;
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
            bail!(
                "the exchange's receive completed with {:?} ({:?})",
                wc.status,
                wc.opcode
            );
        }
        if wc.byte_len as usize != n {
            bail!(
                "out-of-band exchange: a {}-byte message where perftest's exchange has {n}",
                wc.byte_len
            );
        }
        let mut buf = vec![0u8; n];
        self.mr.read(0, &mut buf)?;
        self.post_recv()?;
        Ok(buf)
    }

    /// Connects the test queue pairs (`create_rdma_cm_connection`, between its two
    /// hand-shakes): the client one after another, in order; the server accepts as many
    /// requests, in the order they come, and gives each the next of `qps`.
    pub(crate) fn connect_data(
        &mut self,
        dev: &Device,
        qps: &[Qp],
        attr: &QpAttr,
        client: bool,
    ) -> Result<()> {
        for qp in qps {
            let conn = if client {
                connect_retrying(dev, qp, attr, self.server, self.cfg, CONNECT_TRIES, true)?
            } else {
                let l = self
                    .listener
                    .as_mut()
                    .expect("the server keeps its listener");
                let req = l
                    .get_request(Duration::from_secs(60))
                    .context("waiting for the client's test queue pairs")?;
                l.accept(&req, qp, attr, &[])?
            };
            self.data.push(conn);
        }
        Ok(())
    }

    /// Ends the connections: the client disconnects the test queue pairs' and then the
    /// exchange's; the server waits up to `linger` for it (perftest's client disconnects
    /// after its last message), its device answering each DREQ.
    pub(crate) fn finish(mut self, client: bool, linger: Duration) -> Result<()> {
        self.listener = None;
        if client {
            for c in self.data.drain(..) {
                c.disconnect()?;
            }
            if let Some(c) = self.conn.take() {
                c.disconnect()?;
            }
        } else if let Some(c) = self.conn.take() {
            // A client that left without disconnecting is not an error of the test.
            let _ = c.wait_disconnect(linger);
        }
        Ok(())
    }
}

/// The next completion of `cq` within `timeout`; the peer's disconnect (of `conn`) ends the
/// wait.
fn wait_on(
    cq: &Cq,
    conn: &mut Option<CmConnection>,
    timeout: Duration,
    what: &str,
) -> Result<irn_verbs::Wc> {
    let until = Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if let Some(wc) = cq.wait(left.min(POLL))? {
            return Ok(wc);
        }
        if let Some(c) = conn.as_mut() {
            if c.poll_disconnect()? {
                bail!("the peer disconnected while this end waited for {what}");
            }
        }
        if left.is_zero() {
            bail!("out-of-band exchange: no {what} from the peer in {timeout:?}");
        }
    }
}

/// The address the route to `to` leaves from (what `rdma_resolve_addr` binds): `--gid` when
/// given.
pub(crate) fn route_source(to: IpAddr, gid: Option<IpAddr>, udp_port: u16) -> Result<IpAddr> {
    if let Some(ip) = gid {
        return Ok(ip);
    }
    let any: SocketAddr = if to.is_ipv4() {
        SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
    };
    let probe = std::net::UdpSocket::bind(any)?;
    probe.connect(SocketAddr::new(to, udp_port))?;
    Ok(probe.local_addr()?.ip())
}
