//! Connecting RC queue pairs by address and port, as the RDMA CM does (`rdma_listen` /
//! `rdma_connect` / `rdma_accept` / `rdma_disconnect`): IBTA CM messages (REQ, REP, RTU, REJ,
//! DREQ, DREP, MRA; `irn_wire::cm`) carried in management datagrams to QP1, with rdma_cm's
//! service IDs (TCP port space: 0x0000000001060000 + port) and its addressing header in the
//! REQ's private data — what Linux's `ib_cm` / `rdma_cm` (and so rxe's `rping`) speak.
//!
//! # The exchange
//!
//! * **Active side** ([`connect`]): sends a REQ naming its RC queue pair, a starting PSN, path
//!   MTU and the service; on the REP, moves its queue pair to RTR and RTS towards the replier's
//!   QPN and PSN and sends an RTU. A REJ is a refused connection ([`CmError::Rejected`]).
//! * **Passive side** ([`CmListener`]): takes a REQ for its port, moves its queue pair to RTR
//!   and RTS (as rdma_cm does before replying), sends a REP and waits for the RTU; a duplicate
//!   REQ (its REP lost) is answered with the REP again. A REQ for another port is rejected
//!   (reason 8, invalid service ID).
//! * **Disconnecting** ([`CmConnection::disconnect`], [`CmConnection::wait_disconnect`]): DREQ,
//!   answered with a DREP.
//!
//! The starting PSNs are read as Linux's CM reads them: a REQ's is the PSN the *passive* side
//! sends from (the active side expects it), a REP's the active side's — the reverse of what
//! the names suggest, but what every Linux peer does (`drivers/infiniband/core/cm.c`).
//!
//! MADs are datagrams: a REQ, REP or DREQ unanswered for [`CmConfig::retry_timeout`] is sent
//! again, up to [`CmConfig::max_retries`] times; an MRA from the peer ("I need more time")
//! stretches the wait by its service timeout. Malformed or unrelated MADs are counted and
//! dropped ([`CmConnection::dropped`]).
//!
//! # Not built
//!
//! One connection per [`CmListener`] (it becomes the connection, holding QP1), and one user of
//! QP1 per device; no alternate paths (LAP/APR), no UD service resolution (SIDR). A lost RTU is
//! recovered only by the REP's retransmission while the passive side still waits for it.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use irn_wire::cm::{
    rdma_cm_service_id, CmDreq, CmIds224, CmMad, CmMsg, CmPath, CmRej, CmRep, CmReq, CmaHdr,
    MadHdr, GSI_QKEY, GSI_QPN, MAD_LEN,
};

use crate::{
    Ah, Cq, Device, Gid, Mr, Pd, Qp, QpAttr, RecvWr, RemoteQp, UdInit, UdQp, UdSend, WcOpcode,
    WcStatus, GRH_LEN, ROCE_PORT,
};

/// What can go wrong while connecting.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// A verbs call failed.
    #[error("{0}")]
    Verbs(#[from] crate::Error),
    /// The peer answered with a REJ (reason 28: the consumer rejected; 8: no one listens on
    /// that port — `ECONNREFUSED`).
    #[error("connection rejected by the peer (REJ reason {0})")]
    Rejected(u16),
    /// Nothing came back after every retry.
    #[error("no answer from the peer to {what} after {tries} tries")]
    Timeout {
        /// The message unanswered.
        what: &'static str,
        /// How many times it was sent.
        tries: u32,
    },
    /// Waiting for a request or a disconnect took longer than asked.
    #[error("nothing arrived in {0:?}")]
    Idle(Duration),
    /// A message that cannot be built (a field out of range, private data too long).
    #[error("{0}")]
    Wire(#[from] irn_wire::Error),
}

/// Result of the CM calls.
pub type CmResult<T> = std::result::Result<T, CmError>;

/// Timers and the connection's parameters.
#[derive(Debug, Clone, Copy)]
pub struct CmConfig {
    /// How long a REQ, REP or DREQ waits for its answer before it is sent again.
    pub retry_timeout: Duration,
    /// Sends after the first.
    pub max_retries: u32,
    /// The UDP port of the peer's QP1 (4791 for a standard peer).
    pub peer_port: u16,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            retry_timeout: Duration::from_millis(500),
            max_retries: 8,
            peer_port: ROCE_PORT,
        }
    }
}

/// Receive slots of QP1.
const SLOTS: u64 = 32;
/// Bytes of a slot: the GRH area and one MAD.
const SLOT: u64 = (GRH_LEN + MAD_LEN) as u64;
/// Where this side builds the MAD it sends.
const SEND_AT: u64 = SLOTS * SLOT;

/// QP1 of a device, with its buffers: sends and receives CM MADs.
struct Gsi {
    qp: UdQp,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
    pd: Pd,
    ahs: Vec<(IpAddr, Ah)>,
    port: u16,
    local: IpAddr,
    dropped: u64,
}

impl Gsi {
    fn open(dev: &Device, port: u16) -> CmResult<Gsi> {
        let pd = dev.alloc_pd();
        let scq = dev.create_cq(4)?;
        let rcq = dev.create_cq(SLOTS as usize + 1)?;
        let qp = pd.create_gsi_qp(
            &scq,
            &rcq,
            UdInit {
                max_send_wr: 2,
                max_recv_wr: SLOTS as usize,
            },
        )?;
        qp.init(GSI_QKEY)?;
        let mr = pd.reg_mr(
            (SEND_AT + MAD_LEN as u64) as usize,
            crate::Access::LOCAL_WRITE,
        )?;
        for i in 0..SLOTS {
            qp.post_recv(RecvWr {
                wr_id: i,
                sg_list: vec![mr.sge(i * SLOT, SLOT as u32)],
            })?;
        }
        qp.ready(1024, 0)?;
        Ok(Gsi {
            qp,
            scq,
            rcq,
            mr,
            pd,
            ahs: Vec::new(),
            port,
            local: dev.local_addr().ip(),
            dropped: 0,
        })
    }

    fn send(&mut self, to: IpAddr, mad: &CmMad) -> CmResult<()> {
        let bytes = mad.emit()?;
        if !self.ahs.iter().any(|(ip, _)| *ip == to) {
            let ah = self.pd.create_ah(Gid::from(to), self.port)?;
            self.ahs.push((to, ah));
        }
        let ah = &self
            .ahs
            .iter()
            .find(|(ip, _)| *ip == to)
            .expect("just made")
            .1;
        self.mr.write(SEND_AT, &bytes)?;
        self.qp.post_send(UdSend {
            wr_id: 0,
            ah,
            remote_qpn: GSI_QPN,
            remote_qkey: GSI_QKEY,
            sg_list: vec![self.mr.sge(SEND_AT, MAD_LEN as u32)],
            imm: None,
            signaled: true,
        })?;
        match self.scq.wait(Duration::from_secs(5))? {
            Some(wc) if wc.status == WcStatus::Success => Ok(()),
            Some(wc) => Err(CmError::Verbs(crate::Error::InvalidWr(
                if wc.status == WcStatus::LocProtErr {
                    "QP1 send: protection error"
                } else {
                    "QP1 send failed"
                },
            ))),
            None => Err(CmError::Timeout {
                what: "a QP1 send's completion",
                tries: 1,
            }),
        }
    }

    /// The next well-formed CM MAD (and its sender's address) within `until`; anything else
    /// that arrives is counted and dropped.
    fn recv(&mut self, until: Instant) -> CmResult<Option<(IpAddr, CmMad)>> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let Some(wc) = self.rcq.wait(left)? else {
                return Ok(None);
            };
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = wc.wr_id;
            let mut buf = [0u8; (GRH_LEN + MAD_LEN)];
            let got = if wc.status == WcStatus::Success {
                self.mr.read(slot * SLOT, &mut buf)?;
                let from = grh_source(&buf[..GRH_LEN]);
                let mad = CmMad::parse(&buf[GRH_LEN..]).ok();
                from.zip(mad)
            } else {
                None
            };
            self.qp.post_recv(RecvWr {
                wr_id: slot,
                sg_list: vec![self.mr.sge(slot * SLOT, SLOT as u32)],
            })?;
            match got {
                Some(m) => return Ok(Some(m)),
                None => self.dropped += 1,
            }
        }
    }
}

/// The sender's address from the GRH area of a UD receive (IPv6 header, or 20 zero bytes and
/// the IPv4 header).
fn grh_source(grh: &[u8]) -> Option<IpAddr> {
    if grh.get(20).is_some_and(|b| b >> 4 == 4) && grh[..20].iter().all(|&b| b == 0) {
        let s = &grh[32..36];
        return Some(IpAddr::from([s[0], s[1], s[2], s[3]]));
    }
    if grh.first().is_some_and(|b| b >> 4 == 6) {
        let mut a = [0u8; 16];
        a.copy_from_slice(&grh[8..24]);
        return Some(IpAddr::from(a));
    }
    None
}

fn random_u32() -> u32 {
    loop {
        let v = (crate::random_psn() << 8) ^ crate::random_psn();
        if v != 0 {
            return v;
        }
    }
}

/// A CA GUID for this end: its address, as an EUI-64-shaped number (the RoCE GUID is derived
/// from the MAC; a UDP device has none).
fn ca_guid(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => 0x0200_5eff_fe00_0000_u64 ^ u64::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6) as u64,
    }
}

fn gid_bytes(ip: IpAddr) -> [u8; 16] {
    Gid::from(ip).0
}

fn mtu_enum(mtu: u32) -> u8 {
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

fn mtu_bytes(e: u8) -> u32 {
    match e {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        _ => 4096,
    }
}

/// An established connection: its QP1, the peer, the IDs both ends use.
pub struct CmConnection {
    gsi: Gsi,
    cfg: CmConfig,
    peer: IpAddr,
    local_id: u32,
    remote_id: u32,
    remote_qpn: u32,
    private_data: Vec<u8>,
}

impl std::fmt::Debug for CmConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmConnection")
            .field("peer", &self.peer)
            .field("local_id", &self.local_id)
            .field("remote_id", &self.remote_id)
            .finish_non_exhaustive()
    }
}

impl CmConnection {
    /// The peer's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// The peer's queue pair.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }

    /// The private data of the peer's REQ or REP (rdma_cm's header excluded).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// MADs received and dropped (malformed, or not for this connection).
    pub fn dropped(&self) -> u64 {
        self.gsi.dropped
    }

    fn dreq(&self) -> CmMad {
        CmMad {
            hdr: MadHdr::cm(0x0015, u64::from(random_u32())),
            msg: CmMsg::Dreq(CmDreq {
                local_comm_id: self.local_id,
                remote_comm_id: self.remote_id,
                remote_qpn: self.remote_qpn,
                private_data: [0; 220],
            }),
        }
    }

    fn drep(&self, tid: u64) -> CmMad {
        CmMad {
            hdr: MadHdr::cm(0x0016, tid),
            msg: CmMsg::Drep(CmIds224 {
                local_comm_id: self.local_id,
                remote_comm_id: self.remote_id,
                private_data: [0; 224],
            }),
        }
    }

    /// Waits until `until` for the peer's DREQ (and, with `drep_too`, a DREP answering ours);
    /// answers a DREQ with a DREP. Returns whether either came; drops everything else (the
    /// peer's retransmitted RTU or REP: the connection is up already).
    fn await_disconnect(&mut self, until: Instant, drep_too: bool) -> CmResult<bool> {
        while let Some((from, m)) = self.gsi.recv(until)? {
            if from != self.peer {
                self.gsi.dropped += 1;
                continue;
            }
            match m.msg {
                CmMsg::Drep(d) if drep_too && d.remote_comm_id == self.local_id => return Ok(true),
                CmMsg::Dreq(d) if d.remote_comm_id == self.local_id => {
                    let drep = self.drep(m.hdr.tid);
                    self.gsi.send(self.peer, &drep)?;
                    return Ok(true);
                }
                _ => self.gsi.dropped += 1,
            }
        }
        Ok(false)
    }

    /// Ends the connection (`rdma_disconnect`): DREQ until a DREP (or the peer's own DREQ)
    /// answers it. Returns whether the peer answered: a DREQ unanswered after every retry
    /// still ends the connection (Linux's CM goes to TIMEWAIT the same way).
    pub fn disconnect(mut self) -> CmResult<bool> {
        let dreq = self.dreq();
        for _ in 0..=self.cfg.max_retries {
            self.gsi.send(self.peer, &dreq)?;
            if self.await_disconnect(Instant::now() + self.cfg.retry_timeout, true)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the peer has ended the connection: looks at QP1 without waiting and answers a
    /// DREQ with a DREP (`RDMA_CM_EVENT_DISCONNECTED`). Call it between waits on the data
    /// path.
    pub fn poll_disconnect(&mut self) -> CmResult<bool> {
        self.await_disconnect(Instant::now(), false)
    }

    /// Waits (up to `timeout`) for the peer to end the connection, and answers its DREQ with
    /// a DREP (what rping's server does after its last iteration).
    pub fn wait_disconnect(mut self, timeout: Duration) -> CmResult<()> {
        if self.await_disconnect(Instant::now() + timeout, false)? {
            Ok(())
        } else {
            Err(CmError::Idle(timeout))
        }
    }
}

/// The QP attributes a connection agrees on, from the REQ / REP.
fn connected_attr(base: &QpAttr, mtu: u32, rd_atomic: u8, dest_rd_atomic: u8) -> QpAttr {
    QpAttr {
        path_mtu: mtu,
        max_rd_atomic: rd_atomic.max(1),
        max_dest_rd_atomic: dest_rd_atomic.max(1),
        ..*base
    }
}

/// Connects `qp` (in RESET or INIT) to the service at `to` — the peer's address and its
/// rdma_cm port (`rdma_connect`). `attr` gives the queue pair's settings (MTU, timeouts,
/// retries, access, reads/atomics outstanding); `private_data` (at most 56 bytes) reaches the
/// peer after rdma_cm's header. The device must be bound to an address of `to`'s family.
pub fn connect(
    dev: &Device,
    qp: &Qp,
    attr: &QpAttr,
    to: SocketAddr,
    private_data: &[u8],
    cfg: CmConfig,
) -> CmResult<CmConnection> {
    let local = dev.local_addr().ip();
    if private_data.len() > 92 - CmaHdr::LEN {
        return Err(CmError::Wire(irn_wire::Error::Invalid {
            layer: irn_wire::Layer::Mad,
            what: "REQ private data longer than 56 bytes",
        }));
    }
    let mut gsi = Gsi::open(dev, cfg.peer_port)?;
    let local_id = random_u32();
    let psn = crate::random_psn();
    let mut pd = [0u8; 92];
    CmaHdr {
        version: 0,
        src_port: (random_u32() as u16) | 0x8000,
        src: local,
        dst: to.ip(),
    }
    .write(&mut pd)?;
    pd[CmaHdr::LEN..CmaHdr::LEN + private_data.len()].copy_from_slice(private_data);
    let tid = u64::from(random_u32()) << 32 | u64::from(random_u32());
    let req = CmMad {
        hdr: MadHdr::cm(0x0010, tid),
        msg: CmMsg::Req(CmReq {
            local_comm_id: local_id,
            service_id: rdma_cm_service_id(to.port()),
            local_ca_guid: ca_guid(local),
            local_qkey: 0,
            local_qpn: qp.qpn(),
            responder_resources: attr.max_dest_rd_atomic,
            local_eecn: 0,
            initiator_depth: attr.max_rd_atomic,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport_service_type: 0,
            e2e_flow_control: false,
            starting_psn: psn,
            local_cm_response_timeout: 20,
            retry_count: attr.retry_cnt.min(7),
            pkey: irn_wire::DEFAULT_PKEY,
            path_mtu: mtu_enum(attr.path_mtu),
            rdc_exists: false,
            rnr_retry_count: attr.rnr_retry.min(7),
            max_cm_retries: 15,
            srq: false,
            extended_transport: 0,
            primary: CmPath {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: gid_bytes(local),
                remote_gid: gid_bytes(to.ip()),
                flow_label: 0,
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: attr.timeout.min(31),
            },
            alternate: CmPath::default(),
            private_data: pd,
        }),
    };
    let tries = cfg.max_retries + 1;
    let mut sent = 0;
    let mut until = Instant::now();
    let rep = 'wait: loop {
        if Instant::now() >= until {
            if sent == tries {
                return Err(CmError::Timeout { what: "REQ", tries });
            }
            gsi.send(to.ip(), &req)?;
            sent += 1;
            until = Instant::now() + cfg.retry_timeout;
        }
        while let Some((from, m)) = gsi.recv(until)? {
            if from != to.ip() {
                gsi.dropped += 1;
                continue;
            }
            match m.msg {
                CmMsg::Rep(r) if r.remote_comm_id == local_id => break 'wait (r, m.hdr.tid),
                CmMsg::Rej(r) if r.remote_comm_id == local_id => {
                    return Err(CmError::Rejected(r.reason))
                }
                CmMsg::Mra(r) if r.remote_comm_id == local_id => {
                    // The peer needs 4.096 µs × 2^t more.
                    let t = Duration::from_nanos(4096 << r.service_timeout.min(24));
                    until = Instant::now() + t + cfg.retry_timeout;
                }
                _ => gsi.dropped += 1,
            }
        }
    };
    let (rep, tid): (CmRep, u64) = rep;
    let qattr = connected_attr(
        attr,
        attr.path_mtu.min(mtu_bytes(mtu_enum(attr.path_mtu))),
        attr.max_rd_atomic.min(rep.responder_resources),
        attr.max_dest_rd_atomic,
    );
    // Linux's CM (and so rxe's peers) reads a REQ's starting PSN as the one the *passive*
    // side sends from, and a REP's as the active side's (`cm_req_handler` sets its sq_psn
    // from the REQ, `ib_send_cm_req` the active rq_psn): this end receives from `psn` and
    // sends from the REP's.
    qp.connect(
        &qattr,
        &RemoteQp {
            gid: Gid::from(to.ip()),
            port: cfg.peer_port,
            qpn: rep.local_qpn,
            psn,
        },
        rep.starting_psn,
    )?;
    let rtu = CmMad {
        hdr: MadHdr::cm(0x0014, tid),
        msg: CmMsg::Rtu(CmIds224 {
            local_comm_id: local_id,
            remote_comm_id: rep.local_comm_id,
            private_data: [0; 224],
        }),
    };
    gsi.send(to.ip(), &rtu)?;
    let used = rep
        .private_data
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i + 1);
    Ok(CmConnection {
        gsi,
        cfg,
        peer: to.ip(),
        local_id,
        remote_id: rep.local_comm_id,
        remote_qpn: rep.local_qpn,
        private_data: rep.private_data[..used].to_vec(),
    })
}

/// A connection request received by a [`CmListener`].
#[derive(Debug, Clone)]
pub struct CmRequest {
    /// Who asks.
    pub peer: IpAddr,
    /// Its rdma_cm header (its port and addresses), when there is one.
    pub cma: Option<CmaHdr>,
    /// The consumer's private data (after rdma_cm's header).
    pub private_data: Vec<u8>,
    req: CmReq,
    tid: u64,
}

impl CmRequest {
    /// The requester's queue pair.
    pub fn qpn(&self) -> u32 {
        self.req.local_qpn
    }

    /// The path MTU the requester asks for, bytes.
    pub fn path_mtu(&self) -> u32 {
        mtu_bytes(self.req.path_mtu)
    }
}

/// Listens for connection requests to an rdma_cm port (`rdma_listen`), on the device's QP1.
pub struct CmListener {
    gsi: Gsi,
    cfg: CmConfig,
    port: u16,
}

impl std::fmt::Debug for CmListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmListener")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl CmListener {
    /// Listens on rdma_cm port `port` of `dev` (which then has its QP1 in use).
    pub fn bind(dev: &Device, port: u16, cfg: CmConfig) -> CmResult<CmListener> {
        Ok(CmListener {
            gsi: Gsi::open(dev, cfg.peer_port)?,
            cfg,
            port,
        })
    }

    /// Waits up to `timeout` for a REQ to this port (`rdma_get_cm_event`:
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`). A REQ for another service is rejected (reason 8).
    pub fn get_request(&mut self, timeout: Duration) -> CmResult<CmRequest> {
        let until = Instant::now() + timeout;
        while let Some((from, m)) = self.gsi.recv(until)? {
            let CmMsg::Req(req) = m.msg else {
                self.gsi.dropped += 1;
                continue;
            };
            if req.service_id != rdma_cm_service_id(self.port) || req.transport_service_type != 0 {
                let rej = reject(&req, m.hdr.tid, 8);
                self.gsi.send(from, &rej)?;
                continue;
            }
            let cma = CmaHdr::parse(&req.private_data);
            let pd = &req.private_data[if cma.is_some() { CmaHdr::LEN } else { 0 }..];
            let used = pd.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            return Ok(CmRequest {
                peer: from,
                cma,
                private_data: pd[..used].to_vec(),
                req,
                tid: m.hdr.tid,
            });
        }
        Err(CmError::Idle(timeout))
    }

    /// Refuses a request (REJ, reason 28: the consumer rejected).
    pub fn reject(&mut self, request: &CmRequest) -> CmResult<()> {
        let rej = reject(&request.req, request.tid, 28);
        self.gsi.send(request.peer, &rej)
    }

    /// Accepts a request (`rdma_accept`): moves `qp` (RESET or INIT) to RTR and RTS towards
    /// the requester, replies with a REP carrying `private_data` (at most 196 bytes), and
    /// waits for the RTU, answering a repeated REQ with the REP again. The listener becomes
    /// the connection.
    pub fn accept(
        mut self,
        request: &CmRequest,
        qp: &Qp,
        attr: &QpAttr,
        private_data: &[u8],
    ) -> CmResult<CmConnection> {
        let req = &request.req;
        if private_data.len() > 196 {
            return Err(CmError::Wire(irn_wire::Error::Invalid {
                layer: irn_wire::Layer::Mad,
                what: "REP private data longer than 196 bytes",
            }));
        }
        let local_id = random_u32();
        let psn = crate::random_psn();
        let mtu = attr.path_mtu.min(mtu_bytes(req.path_mtu));
        let qattr = connected_attr(
            attr,
            mtu,
            attr.max_rd_atomic.min(req.responder_resources),
            attr.max_dest_rd_atomic,
        );
        // As Linux reads the starting PSNs (see `connect`): this end sends from the REQ's and
        // receives from the one its REP names.
        qp.connect(
            &qattr,
            &RemoteQp {
                gid: Gid::from(request.peer),
                port: self.cfg.peer_port,
                qpn: req.local_qpn,
                psn,
            },
            req.starting_psn,
        )?;
        let mut pd = [0u8; 196];
        pd[..private_data.len()].copy_from_slice(private_data);
        let rep = CmMad {
            hdr: MadHdr::cm(0x0013, request.tid),
            msg: CmMsg::Rep(CmRep {
                local_comm_id: local_id,
                remote_comm_id: req.local_comm_id,
                local_qkey: 0,
                local_qpn: qp.qpn(),
                local_eecn: 0,
                starting_psn: psn,
                responder_resources: qattr.max_dest_rd_atomic,
                initiator_depth: qattr.max_rd_atomic,
                target_ack_delay: 15,
                failover_accepted: 0,
                e2e_flow_control: false,
                rnr_retry_count: attr.rnr_retry.min(7),
                srq: false,
                local_ca_guid: ca_guid(self.gsi.local),
                private_data: pd,
            }),
        };
        let tries = self.cfg.max_retries + 1;
        // A packet on the queue pair means the requester got the REP and is connected even if
        // its RTU was lost (IBTA §12.9.7: communication established).
        let established = |qp: &Qp| qp.counters().rx_packets > 0;
        for _ in 0..tries {
            self.gsi.send(request.peer, &rep)?;
            let until = Instant::now() + self.cfg.retry_timeout;
            let mut up = false;
            while !up && Instant::now() < until {
                up = established(qp);
                let slice = (Instant::now() + Duration::from_millis(10)).min(until);
                let Some((from, m)) = self.gsi.recv(slice)? else {
                    continue;
                };
                match m.msg {
                    CmMsg::Rtu(r) if from == request.peer && r.remote_comm_id == local_id => {
                        up = true;
                    }
                    // Our REP was lost: the requester asks again.
                    CmMsg::Req(r)
                        if from == request.peer && r.local_comm_id == req.local_comm_id =>
                    {
                        self.gsi.send(request.peer, &rep)?;
                    }
                    _ => self.gsi.dropped += 1,
                }
            }
            if up || established(qp) {
                return Ok(CmConnection {
                    gsi: self.gsi,
                    cfg: self.cfg,
                    peer: request.peer,
                    local_id,
                    remote_id: req.local_comm_id,
                    remote_qpn: req.local_qpn,
                    private_data: request.private_data.clone(),
                });
            }
        }
        Err(CmError::Timeout { what: "REP", tries })
    }
}

fn reject(req: &CmReq, tid: u64, reason: u16) -> CmMad {
    CmMad {
        hdr: MadHdr::cm(0x0012, tid),
        msg: CmMsg::Rej(CmRej {
            local_comm_id: random_u32(),
            remote_comm_id: req.local_comm_id,
            message_rejected: 0,
            reject_info_length: 0,
            reason,
            ari: [0; 72],
            private_data: [0; 148],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_sources() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[10, 1, 2, 3]);
        assert_eq!(grh_source(&g), Some(IpAddr::from([10, 1, 2, 3])));
        let mut g = [0u8; 40];
        g[0] = 0x60;
        g[8..24].copy_from_slice(&[0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(grh_source(&g), Some("fd99::1".parse().expect("v6")));
        assert_eq!(grh_source(&[0u8; 40]), None);
    }

    #[test]
    fn mtu_codes() {
        for m in [256, 512, 1024, 2048, 4096] {
            assert_eq!(mtu_bytes(mtu_enum(m)), m);
        }
    }
}
