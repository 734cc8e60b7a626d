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
//! # One agent per device
//!
//! Every listener and connection of a device shares its QP1 through one agent (Linux's
//! `ib_cm`), so a device carries any number of connections — perftest's `-R` makes one for its
//! own exchange and one per queue pair, all to one port. The agent has a thread of its own that
//! receives every MAD and routes it by the communication IDs it names (a REQ by its service
//! ID) to the call waiting for it, and answers what needs no consumer, as Linux's CM does in
//! the kernel, whether or not the application is in a CM call: a DREQ with a DREP (also for a
//! connection it no longer knows), a repeated REQ with the REP, a repeated REP with the RTU (a
//! lost RTU), a REQ for a port nobody listens on with a REJ. A copy of a REQ the application
//! holds and has not answered yet (between `get_request` and `accept` or `reject`) is
//! dropped: the answer follows.
//!
//! # Not built
//!
//! No alternate paths (LAP/APR), no UD service resolution (SIDR), no TIMEWAIT (a connection's
//! IDs are forgotten when it is dropped).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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
    #[error(transparent)]
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
    #[error(transparent)]
    Wire(#[from] irn_wire::Error),
    /// Another listener of the device has that port.
    #[error("rdma_cm port {0} already has a listener on this device")]
    PortInUse(u16),
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
/// How often the agent's thread looks whether the agent is still in use, and a wait for a
/// connection's state looks at its queue pair.
const SLICE: Duration = Duration::from_millis(10);
/// MADs kept for calls that have not asked for them yet (a REQ for a listener between two
/// `get_request`s, a REP for a connect in progress); beyond, the oldest is counted and dropped.
const PENDING_MAX: usize = 64;

/// How long a requester goes on sending `req` without an answer, by the timers it names
/// (IBTA §12.7.27-28: `max_cm_retries` + 1 sends, each waiting 4.096 µs × 2^`remote CM
/// response timeout`; rdma_cm's 16 sends of about 4.3 s each), and 5 s more; at most 5 min.
/// A REQ the application holds unanswered stays taken (`Agent::taken`) so long.
fn req_patience(req: &CmReq) -> Duration {
    patience(req.remote_cm_response_timeout, req.max_cm_retries)
}

/// [`req_patience`] of a REQ naming response timeout `timeout` and `retries` retries.
fn patience(timeout: u8, retries: u8) -> Duration {
    let per_send = Duration::from_nanos(4096 << timeout.min(31));
    (per_send * (u32::from(retries) + 1) + Duration::from_secs(5)).min(Duration::from_secs(300))
}

/// QP1 of a device, with its buffers: sends and receives CM MADs.
struct Gsi {
    qp: UdQp,
    scq: Cq,
    mr: Mr,
    pd: Pd,
    ahs: Vec<(IpAddr, u16, Ah)>,
    local: IpAddr,
    dropped: u64,
}

impl Gsi {
    /// QP1 and its receive completion queue (which the agent's thread waits on).
    fn open(dev: &Device) -> CmResult<(Gsi, Cq)> {
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
                sg_list: irn_transport::sgl![mr.sge(i * SLOT, SLOT as u32)],
            })?;
        }
        qp.ready(1024, 0)?;
        let gsi = Gsi {
            qp,
            scq,
            mr,
            pd,
            ahs: Vec::new(),
            local: dev.local_addr().ip(),
            dropped: 0,
        };
        Ok((gsi, rcq))
    }

    /// Sends `mad` to QP1 at `to`, whose device listens on UDP port `port`.
    fn send(&mut self, to: IpAddr, port: u16, mad: &CmMad) -> CmResult<()> {
        let bytes = mad.emit()?;
        let i = match self
            .ahs
            .iter()
            .position(|(ip, p, _)| *ip == to && *p == port)
        {
            Some(i) => i,
            None => {
                let ah = self.pd.create_ah(Gid::from(to), port)?;
                self.ahs.push((to, port, ah));
                self.ahs.len() - 1
            }
        };
        self.mr.write(SEND_AT, &bytes)?;
        self.qp.post_send(UdSend {
            wr_id: 0,
            ah: &self.ahs[i].2,
            remote_qpn: GSI_QPN,
            remote_qkey: GSI_QKEY,
            sg_list: irn_transport::sgl![self.mr.sge(SEND_AT, MAD_LEN as u32)],
            imm: None,
            signaled: true,
        })?;
        // Sleeping, not spinning, on a busy-polling device too: a spin here would mark the
        // device polled and keep the engine away for a millisecond that nobody polls.
        match self.scq.sleep(Duration::from_secs(5))? {
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

    /// The well-formed CM MAD (and its sender's address) a receive completion holds, if it
    /// does; the slot is posted again. Anything else is counted and dropped.
    fn take_recv(&mut self, wc: &crate::Wc) -> CmResult<Option<(IpAddr, CmMad)>> {
        if wc.opcode != WcOpcode::Recv {
            return Ok(None);
        }
        let slot = wc.wr_id;
        let mut buf = [0u8; (GRH_LEN + MAD_LEN)];
        // A MAD is exactly 256 bytes (IBTA §13.4.2); a shorter datagram must not be read with
        // what an earlier MAD left in the slot.
        let whole = wc.byte_len as usize == GRH_LEN + MAD_LEN;
        let got = if wc.status == WcStatus::Success && whole {
            self.mr.read(slot * SLOT, &mut buf)?;
            let from = grh_source(&buf[..GRH_LEN]);
            let mad = CmMad::parse(&buf[GRH_LEN..]).ok();
            from.zip(mad)
        } else {
            None
        };
        self.qp.post_recv(RecvWr {
            wr_id: slot,
            sg_list: irn_transport::sgl![self.mr.sge(slot * SLOT, SLOT as u32)],
        })?;
        if got.is_none() {
            self.dropped += 1;
        }
        Ok(got)
    }
}

/// The sender's address from the GRH area of a UD receive ([`irn_transport::ud::grh_source`]).
fn grh_source(grh: &[u8]) -> Option<IpAddr> {
    irn_transport::ud::grh_source(grh).map(|s| s.addr)
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

/// Where a connection of the device stands, as its agent tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// REQ sent, no REP yet.
    Connecting,
    /// REP sent, no RTU (nor packet) yet.
    Accepting,
    Established,
    /// DREQ or DREP received (or a REJ while connecting).
    Disconnected,
}

/// One connection of the device, keyed by this end's communication ID.
struct Conn {
    peer: IpAddr,
    peer_port: u16,
    /// The peer's communication ID (0 until its REP names it).
    remote_id: u32,
    remote_qpn: u32,
    state: State,
    /// It was established (RTU or first packet) before whatever ended it.
    was_up: bool,
    /// What a repeated message of the peer is answered with: the REP for a repeated REQ
    /// (passive side), the RTU for a repeated REP (active side: its RTU was lost).
    again: Option<CmMad>,
}

/// The connection manager of one device: QP1, shared by every listener and connection of the
/// device (Linux's `ib_cm` agent). Whoever calls into it receives MADs for everyone: each is
/// routed to its connection by the communication IDs it names (IBTA §12.6), or to a listener
/// by its service ID. The agent itself answers what needs no consumer, as Linux's CM does:
/// a DREQ with a DREP (also for a connection it no longer knows, `cm_issue_drep`), a repeated
/// REQ with the REP, a repeated REP with the RTU, a REQ for a port nobody listens on with a
/// REJ (reason 8, invalid service ID: `ECONNREFUSED` at the requester).
pub(crate) struct Agent {
    gsi: Gsi,
    /// The UDP port of a peer's QP1 when nothing else says (a REJ to an unknown requester).
    default_port: u16,
    conns: BTreeMap<u32, Conn>,
    /// rdma_cm ports listened on.
    listening: BTreeSet<u16>,
    /// MADs for calls in progress that have not taken them yet.
    pending: VecDeque<(IpAddr, CmMad)>,
    /// REQs a listener handed to the application (`CmListener::get_request`) that it has
    /// not yet accepted or rejected, by requester and its communication ID, until when its
    /// requester may send it again: a copy of one (its REP not yet sent) is dropped, not
    /// kept as a new request. Oldest first, at most `PENDING_MAX`.
    taken: VecDeque<(IpAddr, u32, Instant)>,
}

/// The agent with what its thread needs outside the lock: the thread waits on QP1's receive
/// completions without holding the agent, then routes each MAD under it and wakes the calls
/// waiting for a MAD or a state change — so the device answers DREQs, repeated REQs and the
/// like at any time, as Linux's CM (in the kernel) does, whether or not the application is in
/// a CM call.
pub(crate) struct AgentCell {
    state: Mutex<Agent>,
    changed: Condvar,
    rcq: Cq,
}

type AgentRef = Arc<AgentCell>;

fn lock(agent: &AgentRef) -> MutexGuard<'_, Agent> {
    agent.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `agent`'s condition variable at most `d`.
fn wait_changed<'a>(
    agent: &'a AgentRef,
    a: MutexGuard<'a, Agent>,
    d: Duration,
) -> MutexGuard<'a, Agent> {
    match agent.changed.wait_timeout(a, d) {
        Ok((a, _)) => a,
        Err(p) => p.into_inner().0,
    }
}

/// The device's agent, opened (QP1 created, its thread started) on first use; it closes when
/// its last listener or connection is dropped.
fn agent_of(dev: &Device, default_port: u16) -> CmResult<AgentRef> {
    let mut slot = dev.cm_slot().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(a) = slot.upgrade() {
        return Ok(a);
    }
    let (gsi, rcq) = Gsi::open(dev)?;
    let a = Arc::new(AgentCell {
        state: Mutex::new(Agent {
            gsi,
            default_port,
            conns: BTreeMap::new(),
            listening: BTreeSet::new(),
            pending: VecDeque::new(),
            taken: VecDeque::new(),
        }),
        changed: Condvar::new(),
        rcq,
    });
    *slot = Arc::downgrade(&a);
    let weak = Arc::downgrade(&a);
    std::thread::Builder::new()
        .name("irn-cm".into())
        .spawn(move || agent_thread(&weak))
        .map_err(crate::Error::Io)?;
    Ok(a)
}

/// Receives and routes QP1's MADs while anyone holds the agent.
fn agent_thread(weak: &std::sync::Weak<AgentCell>) {
    while let Some(agent) = weak.upgrade() {
        let wc = match agent.rcq.sleep(SLICE) {
            Ok(Some(wc)) => wc,
            // The device closed: every wait would return at once.
            Ok(None) if agent.rcq.device_closed() => return,
            Ok(None) => continue,
            // The CQ is gone (its device with it).
            Err(_) => return,
        };
        let mut a = lock(&agent);
        // A reply that cannot be sent (the device closing) changes nothing here.
        if let Ok(Some((from, m))) = a.gsi.take_recv(&wc) {
            let _ = a.route(from, m);
        }
        drop(a);
        agent.changed.notify_all();
    }
}

/// The rdma_cm port a REQ's service ID names (TCP port space, RC only).
fn req_port(req: &CmReq) -> Option<u16> {
    (req.service_id & !0xffff == rdma_cm_service_id(0) && req.transport_service_type == 0)
        .then_some(req.service_id as u16)
}

impl Agent {
    /// A communication ID no connection of this device uses.
    fn fresh_id(&self) -> u32 {
        loop {
            let id = random_u32();
            if !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// Whether the application holds the REQ `remote_id` of `from` (`taken`), and its
    /// requester may still send it again.
    fn is_taken(&self, from: IpAddr, remote_id: u32) -> bool {
        let now = Instant::now();
        self.taken
            .iter()
            .any(|&(f, id, until)| f == from && id == remote_id && now < until)
    }

    /// Records that the application holds `req` of `from`, for as long as its requester
    /// may send it again ([`req_patience`]), forgetting what has outlived that, and the
    /// oldest beyond `PENDING_MAX`.
    fn hold_req(&mut self, from: IpAddr, req: &CmReq) {
        let now = Instant::now();
        self.taken.retain(|&(_, _, until)| now < until);
        if self.taken.len() == PENDING_MAX {
            self.taken.pop_front();
        }
        self.taken
            .push_back((from, req.local_comm_id, now + req_patience(req)));
    }

    /// The application answered the REQ `remote_id` of `from` (its REP is recorded with the
    /// connection, or it rejected it).
    fn answered(&mut self, from: IpAddr, remote_id: u32) {
        self.taken
            .retain(|&(f, id, _)| !(f == from && id == remote_id));
    }

    fn keep(&mut self, from: IpAddr, m: CmMad) {
        if self.pending.len() == PENDING_MAX {
            self.pending.pop_front();
            self.gsi.dropped += 1;
        }
        self.pending.push_back((from, m));
    }

    fn route(&mut self, from: IpAddr, m: CmMad) -> CmResult<()> {
        let to = match &m.msg {
            CmMsg::Req(r) => {
                // A repeated REQ of a connection this side replied to: the REP again.
                let known = self.conns.values().find(|c| {
                    c.peer == from && c.state != State::Connecting && c.remote_id == r.local_comm_id
                });
                if let Some(c) = known {
                    if let (Some(rep), State::Accepting | State::Established) = (&c.again, c.state)
                    {
                        let (rep, port) = (*rep, c.peer_port);
                        self.gsi.send(from, port, &rep)?;
                    }
                    return Ok(());
                }
                if req_port(r).is_some_and(|p| self.listening.contains(&p)) {
                    // A copy of a REQ the application holds is dropped: its REP follows, or
                    // its REJ.
                    if !self.is_taken(from, r.local_comm_id) {
                        self.keep(from, m);
                    }
                } else {
                    let rej = reject(r, m.hdr.tid, 8);
                    let port = self.default_port;
                    self.gsi.send(from, port, &rej)?;
                }
                return Ok(());
            }
            CmMsg::Mra(r) => r.remote_comm_id,
            CmMsg::Rej(r) => r.remote_comm_id,
            CmMsg::Rep(r) => r.remote_comm_id,
            CmMsg::Rtu(r) | CmMsg::Drep(r) => r.remote_comm_id,
            CmMsg::Dreq(r) => r.remote_comm_id,
        };
        let Some(c) = self.conns.get_mut(&to).filter(|c| c.peer == from) else {
            if let CmMsg::Dreq(d) = &m.msg {
                // A connection this side no longer knows (destroyed, or never made): Linux's
                // CM answers such a DREQ all the same, so the peer need not time out.
                let drep = drep(d.remote_comm_id, d.local_comm_id, m.hdr.tid);
                let port = self.default_port;
                return self.gsi.send(from, port, &drep);
            }
            self.gsi.dropped += 1;
            return Ok(());
        };
        match (&m.msg, c.state) {
            (CmMsg::Dreq(_), _) => {
                c.state = State::Disconnected;
                let (drep, port) = (drep(to, c.remote_id, m.hdr.tid), c.peer_port);
                self.gsi.send(from, port, &drep)?;
            }
            (CmMsg::Drep(_), _) => c.state = State::Disconnected,
            (CmMsg::Rtu(_), State::Accepting) => {
                c.state = State::Established;
                c.was_up = true;
            }
            (CmMsg::Rep(_), State::Established) => {
                if let Some(rtu) = c.again {
                    let port = c.peer_port;
                    self.gsi.send(from, port, &rtu)?;
                }
            }
            (CmMsg::Rep(_) | CmMsg::Rej(_) | CmMsg::Mra(_), State::Connecting) => {
                self.keep(from, m)
            }
            (CmMsg::Rej(_), State::Accepting) => c.state = State::Disconnected,
            _ => self.gsi.dropped += 1,
        }
        Ok(())
    }

    /// Takes the first pending MAD `want` accepts.
    fn take(&mut self, want: &mut impl FnMut(IpAddr, &CmMad) -> bool) -> Option<(IpAddr, CmMad)> {
        let i = self.pending.iter().position(|(f, m)| want(*f, m))?;
        self.pending.remove(i)
    }

    fn state(&self, id: u32) -> State {
        self.conns.get(&id).map_or(State::Disconnected, |c| c.state)
    }
}

/// Waits until `until` for a MAD that `want` accepts (the agent's thread keeps them).
fn next_mad(
    agent: &AgentRef,
    until: Instant,
    mut want: impl FnMut(IpAddr, &CmMad) -> bool,
) -> CmResult<Option<(IpAddr, CmMad)>> {
    let mut a = lock(agent);
    loop {
        if let Some(got) = a.take(&mut want) {
            return Ok(Some(got));
        }
        let now = Instant::now();
        if now >= until {
            return Ok(None);
        }
        a = wait_changed(agent, a, until - now);
    }
}

/// Waits until `until` for connection `id` to leave `from`, or `done` to hold; returns the
/// state it is in then.
fn wait_state(
    agent: &AgentRef,
    id: u32,
    from: State,
    until: Instant,
    done: impl Fn() -> bool,
) -> CmResult<State> {
    let mut a = lock(agent);
    loop {
        let s = a.state(id);
        let now = Instant::now();
        if s != from || done() || now >= until {
            return Ok(s);
        }
        a = wait_changed(agent, a, (until - now).min(SLICE));
    }
}

fn drep(local_id: u32, remote_id: u32, tid: u64) -> CmMad {
    CmMad {
        hdr: MadHdr::cm(0x0016, tid),
        msg: CmMsg::Drep(CmIds224 {
            local_comm_id: local_id,
            remote_comm_id: remote_id,
            private_data: [0; 224],
        }),
    }
}

/// An established connection: the peer, the IDs both ends use; its device's QP1 is shared
/// with the device's other connections and listeners.
pub struct CmConnection {
    agent: AgentRef,
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

impl Drop for CmConnection {
    fn drop(&mut self) {
        let mut a = lock(&self.agent);
        // A connection dropped while established ends, as `rdma_destroy_id` of a connected ID
        // (or its process exiting) does on Linux, whose CM sends a DREQ for it: one DREQ,
        // best effort and not waited for, so that the peer hears now that this end is gone
        // rather than from its own timeouts. (`disconnect` is the orderly way: it retries.)
        if a.state(self.local_id) == State::Established {
            let _ = a.gsi.send(self.peer, self.cfg.peer_port, &self.dreq());
        }
        // Forgotten: a later DREQ or DREP from the peer is still answered (as for any
        // unknown ID).
        a.conns.remove(&self.local_id);
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

    /// The communication IDs: this end's and the peer's (IBTA §12.6.1).
    pub fn comm_ids(&self) -> (u32, u32) {
        (self.local_id, self.remote_id)
    }

    /// The private data of the peer's REQ or REP (rdma_cm's header excluded).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// MADs the device's QP1 received and dropped (malformed, or for no connection or
    /// listener of the device).
    pub fn dropped(&self) -> u64 {
        lock(&self.agent).gsi.dropped
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

    /// Waits until `until` for the connection to end (the peer's DREQ, answered by the
    /// agent, or the DREP to ours). Returns whether it did.
    fn await_disconnect(&self, until: Instant) -> CmResult<bool> {
        let s = wait_state(
            &self.agent,
            self.local_id,
            State::Established,
            until,
            || false,
        )?;
        Ok(s == State::Disconnected)
    }

    /// Ends the connection (`rdma_disconnect`): DREQ until a DREP (or the peer's own DREQ)
    /// answers it. Returns whether the peer answered: a DREQ unanswered after every retry
    /// still ends the connection (Linux's CM goes to TIMEWAIT the same way).
    pub fn disconnect(self) -> CmResult<bool> {
        let dreq = self.dreq();
        for _ in 0..=self.cfg.max_retries {
            {
                let mut a = lock(&self.agent);
                if a.state(self.local_id) == State::Disconnected {
                    return Ok(true);
                }
                a.gsi.send(self.peer, self.cfg.peer_port, &dreq)?;
            }
            if self.await_disconnect(Instant::now() + self.cfg.retry_timeout)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the peer has ended the connection (`RDMA_CM_EVENT_DISCONNECTED`; its DREQ is
    /// answered with a DREP): looks at QP1 without waiting. Call it between waits on the
    /// data path.
    pub fn poll_disconnect(&mut self) -> CmResult<bool> {
        self.await_disconnect(Instant::now())
    }

    /// Waits (up to `timeout`) for the peer to end the connection, and answers its DREQ with
    /// a DREP (what rping's server does after its last iteration).
    pub fn wait_disconnect(self, timeout: Duration) -> CmResult<()> {
        if self.await_disconnect(Instant::now() + timeout)? {
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
/// Any number of connections (and listeners) may share one device.
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
    let agent = agent_of(dev, cfg.peer_port)?;
    let local_id = {
        let mut a = lock(&agent);
        let id = a.fresh_id();
        a.conns.insert(
            id,
            Conn {
                peer: to.ip(),
                peer_port: cfg.peer_port,
                remote_id: 0,
                remote_qpn: 0,
                state: State::Connecting,
                was_up: false,
                again: None,
            },
        );
        id
    };
    // Registered from here: forget it on any early return.
    let mut conn = CmConnection {
        agent,
        cfg,
        peer: to.ip(),
        local_id,
        remote_id: 0,
        remote_qpn: 0,
        private_data: Vec::new(),
    };
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
    let ours = |m: &CmMad| match &m.msg {
        CmMsg::Rep(r) => r.remote_comm_id == local_id,
        CmMsg::Rej(r) => r.remote_comm_id == local_id,
        CmMsg::Mra(r) => r.remote_comm_id == local_id,
        _ => false,
    };
    let rep = loop {
        if Instant::now() >= until {
            if sent == tries {
                return Err(CmError::Timeout { what: "REQ", tries });
            }
            lock(&conn.agent).gsi.send(to.ip(), cfg.peer_port, &req)?;
            sent += 1;
            until = Instant::now() + cfg.retry_timeout;
        }
        let Some((_, m)) = next_mad(&conn.agent, until, |from, m| from == to.ip() && ours(m))?
        else {
            continue;
        };
        match m.msg {
            CmMsg::Rep(r) => break (r, m.hdr.tid),
            CmMsg::Rej(r) => return Err(CmError::Rejected(r.reason)),
            CmMsg::Mra(r) => {
                // The peer needs 4.096 µs × 2^t more.
                let t = Duration::from_nanos(4096 << r.service_timeout.min(24));
                until = Instant::now() + t + cfg.retry_timeout;
            }
            _ => {}
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
    {
        let mut a = lock(&conn.agent);
        if let Some(c) = a.conns.get_mut(&local_id) {
            c.remote_id = rep.local_comm_id;
            c.remote_qpn = rep.local_qpn;
            c.state = State::Established;
            c.again = Some(rtu);
        }
        a.gsi.send(to.ip(), cfg.peer_port, &rtu)?;
    }
    let used = rep
        .private_data
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i + 1);
    conn.remote_id = rep.local_comm_id;
    conn.remote_qpn = rep.local_qpn;
    conn.private_data = rep.private_data[..used].to_vec();
    Ok(conn)
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

    /// The reads and atomics the requester accepts at once as responder.
    pub fn responder_resources(&self) -> u8 {
        self.req.responder_resources
    }

    /// The reads and atomics the requester keeps outstanding at once as requester.
    pub fn initiator_depth(&self) -> u8 {
        self.req.initiator_depth
    }

    /// The transport retries the requester asks for (IBTA §12.7.27).
    pub fn retry_count(&self) -> u8 {
        self.req.retry_count
    }

    /// The RNR retries the requester asks for.
    pub fn rnr_retry_count(&self) -> u8 {
        self.req.rnr_retry_count
    }
}

/// Listens for connection requests to an rdma_cm port (`rdma_listen`), on the device's QP1.
/// It accepts any number of them; each becomes a [`CmConnection`].
pub struct CmListener {
    agent: AgentRef,
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

impl Drop for CmListener {
    fn drop(&mut self) {
        let mut a = lock(&self.agent);
        a.listening.remove(&self.port);
        // Requests nobody took: refused from now on, as a REQ to a closed port is.
        let port = self.port;
        a.pending
            .retain(|(_, m)| !matches!(&m.msg, CmMsg::Req(r) if req_port(r) == Some(port)));
    }
}

impl CmListener {
    /// Listens on rdma_cm port `port` of `dev`. One listener per port and device
    /// ([`CmError::PortInUse`] otherwise, as `rdma_bind_addr` says `EADDRINUSE`).
    pub fn bind(dev: &Device, port: u16, cfg: CmConfig) -> CmResult<CmListener> {
        let agent = agent_of(dev, cfg.peer_port)?;
        if !lock(&agent).listening.insert(port) {
            return Err(CmError::PortInUse(port));
        }
        Ok(CmListener { agent, cfg, port })
    }

    /// Waits up to `timeout` for a REQ to this port (`rdma_get_cm_event`:
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`). REQs for ports nobody listens on are rejected
    /// (reason 8) meanwhile. Answer every request it returns ([`CmListener::accept`] or
    /// [`CmListener::reject`]): until then the requester's copies of it are dropped, for as
    /// long as its timers say it may send them.
    pub fn get_request(&self, timeout: Duration) -> CmResult<CmRequest> {
        let until = Instant::now() + timeout;
        let port = self.port;
        let got = next_mad(
            &self.agent,
            until,
            |_, m| matches!(&m.msg, CmMsg::Req(r) if req_port(r) == Some(port)),
        )?;
        let Some((
            from,
            CmMad {
                hdr,
                msg: CmMsg::Req(req),
            },
        )) = got
        else {
            return Err(CmError::Idle(timeout));
        };
        // Copies of the same REQ (the requester sent it again before we got to it), and
        // those that come until the application answers it.
        {
            let mut a = lock(&self.agent);
            a.pending.retain(|(f, m)| {
                !(*f == from
                    && matches!(&m.msg, CmMsg::Req(r) if r.local_comm_id == req.local_comm_id))
            });
            a.hold_req(from, &req);
        }
        let cma = CmaHdr::parse(&req.private_data);
        let pd = &req.private_data[if cma.is_some() { CmaHdr::LEN } else { 0 }..];
        let used = pd.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        Ok(CmRequest {
            peer: from,
            cma,
            private_data: pd[..used].to_vec(),
            req,
            tid: hdr.tid,
        })
    }

    /// Refuses a request (REJ, reason 28: the consumer rejected).
    pub fn reject(&self, request: &CmRequest) -> CmResult<()> {
        let rej = reject(&request.req, request.tid, 28);
        let mut a = lock(&self.agent);
        a.answered(request.peer, request.req.local_comm_id);
        a.gsi.send(request.peer, self.cfg.peer_port, &rej)
    }

    /// Accepts a request (`rdma_accept`): moves `qp` (RESET or INIT) to RTR and RTS towards
    /// the requester, replies with a REP carrying `private_data` (at most 196 bytes), and
    /// waits for the RTU (or the first packet on `qp`), the agent answering a repeated REQ
    /// with the REP again. The listener goes on listening.
    pub fn accept(
        &self,
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
        let (local_id, local_guid) = {
            let a = lock(&self.agent);
            (a.fresh_id(), a.gsi.local)
        };
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
                local_ca_guid: ca_guid(local_guid),
                private_data: pd,
            }),
        };
        let mut a = lock(&self.agent);
        a.answered(request.peer, req.local_comm_id);
        a.conns.insert(
            local_id,
            Conn {
                peer: request.peer,
                peer_port: self.cfg.peer_port,
                remote_id: req.local_comm_id,
                remote_qpn: req.local_qpn,
                state: State::Accepting,
                was_up: false,
                again: Some(rep),
            },
        );
        drop(a);
        let conn = CmConnection {
            agent: self.agent.clone(),
            cfg: self.cfg,
            peer: request.peer,
            local_id,
            remote_id: req.local_comm_id,
            remote_qpn: req.local_qpn,
            private_data: request.private_data.clone(),
        };
        let tries = self.cfg.max_retries + 1;
        // A packet on the queue pair means the requester got the REP and is connected even if
        // its RTU was lost (IBTA §12.9.7: communication established).
        let established = || qp.counters().rx_packets > 0;
        for _ in 0..tries {
            lock(&self.agent)
                .gsi
                .send(request.peer, self.cfg.peer_port, &rep)?;
            let until = Instant::now() + self.cfg.retry_timeout;
            match wait_state(&self.agent, local_id, State::Accepting, until, established)? {
                // Up and already ended (a quick peer on a busy host: RTU, data and DREQ all
                // came before this thread looked): the connection was made.
                State::Disconnected
                    if established()
                        || lock(&self.agent)
                            .conns
                            .get(&local_id)
                            .is_some_and(|c| c.was_up) =>
                {
                    return Ok(conn)
                }
                State::Disconnected => return Err(CmError::Rejected(0)),
                State::Established => return Ok(conn),
                _ if established() => {
                    if let Some(c) = lock(&self.agent).conns.get_mut(&local_id) {
                        c.state = State::Established;
                    }
                    return Ok(conn);
                }
                _ => {}
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
    fn a_held_request_is_taken_for_as_long_as_its_requester_may_send_it_again() {
        // rdma_cm's timers (20, 15): 16 sends of 4.096 µs × 2^20 each, about 68.7 s, and 5 s.
        let p = patience(20, 15);
        assert!(
            p > Duration::from_secs(73) && p < Duration::from_secs(74),
            "{p:?}"
        );
        // Short timers still leave the 5 s; long ones stop at 5 min.
        assert_eq!(
            patience(0, 0),
            Duration::from_nanos(4096) + Duration::from_secs(5)
        );
        assert_eq!(patience(31, 15), Duration::from_secs(300));
    }

    #[test]
    fn mtu_codes() {
        for m in [256, 512, 1024, 2048, 4096] {
            assert_eq!(mtu_bytes(mtu_enum(m)), m);
        }
    }
}
