//! Unreliable-datagram queue pairs and address handles (`IBV_QPT_UD`, `ibv_create_ah`): the
//! verbs over irn-transport's [`UdQueuePair`], and the engine's part — sending each datagram
//! where its work request's address handle says, and handing a received one the GRH area of
//! its IP header.

use super::engine::{post_reserving, push_wc};
use super::*;
use irn_transport::{SgList, UdAttr, UdCounters, UdDest, UdQueuePair, UdSendWr};

/// A UD queue pair in the device.
pub(super) struct UdEntry {
    pub(super) qp: UdQueuePair,
    pub(super) pd: u32,
    pub(super) send_cq: u32,
    pub(super) recv_cq: u32,
}

/// Creation parameters of a UD queue pair.
#[derive(Debug, Clone, Copy)]
pub struct UdInit {
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
}

impl Default for UdInit {
    fn default() -> Self {
        UdInit {
            max_send_wr: 1024,
            max_recv_wr: 1024,
        }
    }
}

/// An unreliable-datagram queue pair (`struct ibv_qp`, `IBV_QPT_UD`). Dropping it destroys it.
#[derive(Debug)]
pub struct UdQp {
    shared: Arc<Shared>,
    qpn: u32,
}

/// An address handle (`struct ibv_ah`): where UD datagrams go — a peer's GID and UDP port.
#[derive(Debug)]
pub struct Ah {
    shared: Arc<Shared>,
    id: u32,
    peer: SocketAddr,
}

/// A UD Send work request (`ibv_send_wr` with `wr.ud`).
#[derive(Debug, Clone)]
pub struct UdSend<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where to.
    pub ah: &'a Ah,
    /// The destination queue pair.
    pub remote_qpn: u32,
    /// The destination's Q_Key (most significant bit set: this queue pair's own).
    pub remote_qkey: u32,
    /// The message: at most the path MTU.
    pub sg_list: SgList,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Whether a successful completion is reported.
    pub signaled: bool,
}

impl Ah {
    /// The address datagrams go to.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        self.shared.lock().objects.ahs.remove(&self.id);
    }
}

impl Pd {
    /// Creates a UD queue pair in RESET (`ibv_create_qp` with `IBV_QPT_UD`).
    pub fn create_ud_qp(&self, send_cq: &Cq, recv_cq: &Cq, init: UdInit) -> Result<UdQp> {
        self.new_ud_qp(send_cq, recv_cq, init, None)
    }

    /// Creates the device's general services interface queue pair, QP1 (IBTA §13.5.1), a UD
    /// queue pair that receives the management datagrams (the CM's) sent to QP1; at most one
    /// per device. Give it Q_Key 0x80010000 ([`irn_wire::cm::GSI_QKEY`]) in INIT.
    pub fn create_gsi_qp(&self, send_cq: &Cq, recv_cq: &Cq, init: UdInit) -> Result<UdQp> {
        self.new_ud_qp(send_cq, recv_cq, init, Some(irn_wire::cm::GSI_QPN))
    }

    fn new_ud_qp(
        &self,
        send_cq: &Cq,
        recv_cq: &Cq,
        init: UdInit,
        qpn: Option<u32>,
    ) -> Result<UdQp> {
        if init.max_send_wr == 0 || init.max_recv_wr == 0 {
            return Err(Error::Config("queue depths must be at least 1"));
        }
        let mut core = self.shared.lock();
        if !core.objects.pds.contains_key(&self.id) {
            return Err(Error::Gone);
        }
        if !core.objects.cqs.contains_key(&send_cq.id)
            || !core.objects.cqs.contains_key(&recv_cq.id)
        {
            return Err(Error::Gone);
        }
        let qpn = match qpn {
            Some(q) if core.objects.uds.contains_key(&q) || core.objects.qps.contains_key(&q) => {
                return Err(Error::Config("the device already has a QP1"));
            }
            Some(q) if core.member.as_deref().is_some_and(|m| m.foreign(q)) => {
                return Err(Error::Config(
                    "QP1: a group's general services QP is member 0's, where QP1's packets arrive",
                ));
            }
            Some(q) => q,
            None => core.objects.fresh_qpn(),
        };
        core.objects.uds.insert(
            qpn,
            UdEntry {
                qp: UdQueuePair::new(qpn, init.max_send_wr, init.max_recv_wr),
                pd: self.id,
                send_cq: send_cq.id,
                recv_cq: recv_cq.id,
            },
        );
        Ok(UdQp {
            shared: self.shared.clone(),
            qpn,
        })
    }

    /// Creates an address handle for the peer with GID `gid` at UDP `port` (4791 for a
    /// standard peer) (`ibv_create_ah`).
    pub fn create_ah(&self, gid: Gid, port: u16) -> Result<Ah> {
        let peer = SocketAddr::new(gid.ip(), port);
        let mut core = self.shared.lock();
        if peer.is_ipv4() != core.local.is_ipv4() {
            return Err(Error::AddressFamily(peer.ip(), core.local.ip()));
        }
        let id = core.objects.fresh_id();
        core.objects.ahs.insert(id, peer);
        Ok(Ah {
            shared: self.shared.clone(),
            id,
            peer,
        })
    }
}

impl UdQp {
    /// The queue pair number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    fn with<R>(&self, f: impl FnOnce(&mut Core) -> Result<R>) -> Result<R> {
        let mut core = self.shared.lock();
        if !core.objects.uds.contains_key(&self.qpn) {
            return Err(Error::Gone);
        }
        let now = self.shared.now();
        let r = f(&mut core);
        let more = core.transmit(&self.shared.socks.udp, now, self.qpn);
        core = self.shared.flush(core);
        core.drain_completions(self.qpn);
        drop(core);
        if more {
            self.shared.wake_engine();
        }
        r
    }

    /// Moves the queue pair along the UD state diagram (`ibv_modify_qp`); see
    /// [`UdQueuePair::modify`] for which attribute each transition takes.
    pub fn modify(&self, to: QpState, attr: &UdAttr) -> Result<()> {
        let qpn = self.qpn;
        self.with(|core| {
            let e = core.objects.uds.get_mut(&qpn).ok_or(Error::Gone)?;
            e.qp.modify(to, attr).map_err(Error::UdModify)
        })
    }

    /// RESET → INIT with Q_Key `qkey` (receives may be posted from here), as
    /// `ibv_ud_pingpong` does before its exchange.
    pub fn init(&self, qkey: u32) -> Result<()> {
        self.modify(
            QpState::Init,
            &UdAttr {
                pkey: irn_wire::DEFAULT_PKEY,
                qkey,
                pmtu: 1024,
                sq_psn: 0,
            },
        )
    }

    /// INIT → RTR → RTS: messages up to `pmtu` bytes, sent from PSN `sq_psn`.
    pub fn ready(&self, pmtu: u32, sq_psn: u32) -> Result<()> {
        let attr = UdAttr {
            pkey: irn_wire::DEFAULT_PKEY,
            qkey: 0,
            pmtu,
            sq_psn,
        };
        self.modify(QpState::Rtr, &attr)?;
        self.modify(QpState::Rts, &attr)
    }

    /// Posts a Send (`ibv_post_send`). Refused with [`Error::CqFull`] when the send CQ could
    /// overflow, and as an invalid work request when longer than the path MTU or when its
    /// address handle belongs to another device.
    pub fn post_send(&self, wr: UdSend<'_>) -> Result<()> {
        if !Arc::ptr_eq(&wr.ah.shared, &self.shared) {
            return Err(Error::InvalidWr("the address handle is another device's"));
        }
        let signaled = wr.signaled;
        let t = UdSendWr {
            wr_id: wr.wr_id,
            dest: UdDest {
                ah: wr.ah.id,
                remote_qpn: wr.remote_qpn,
                remote_qkey: wr.remote_qkey,
            },
            sg_list: wr.sg_list,
            imm: wr.imm,
            signaled,
            solicited: false,
        };
        self.post(true, signaled, |qp| qp.post_send(t))
    }

    /// Posts a receive (`ibv_post_recv`): its buffer gets the 40-byte GRH area, then the
    /// message.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post(false, true, |qp| qp.post_recv(wr))
    }

    fn post(
        &self,
        send: bool,
        reserve: bool,
        post: impl FnOnce(&mut UdQueuePair) -> Result<(), PostError>,
    ) -> Result<()> {
        let qpn = self.qpn;
        self.with(|core| {
            let e = core.objects.uds.get_mut(&qpn).ok_or(Error::Gone)?;
            let cq_id = if send { e.send_cq } else { e.recv_cq };
            post_reserving(&mut core.objects.cqs, cq_id, reserve, || post(&mut e.qp))
        })
    }

    /// The queue pair's state.
    pub fn state(&self) -> QpState {
        self.shared
            .lock()
            .objects
            .uds
            .get(&self.qpn)
            .map_or(QpState::Err, |e| e.qp.state())
    }

    /// What it counted (datagrams, drops for want of a receive or a wrong Q_Key).
    pub fn counters(&self) -> UdCounters {
        self.shared
            .lock()
            .objects
            .uds
            .get(&self.qpn)
            .map_or_else(UdCounters::default, |e| *e.qp.counters())
    }
}

impl Drop for UdQp {
    fn drop(&mut self) {
        let mut core = self.shared.lock();
        // Its datagrams may carry its protection domain's memory where it lies (`lent`),
        // which `release_pd_of` may free: they leave first.
        core.flush_tx(&self.shared.socks.udp);
        if let Some(e) = core.objects.uds.remove(&self.qpn) {
            core.release_pd_of(e.pd);
        }
    }
}

impl Core {
    /// Forgets a closed protection domain once its last queue pair is gone.
    pub(super) fn release_pd_of(&mut self, pd: u32) {
        if self.objects.pds.get(&pd).is_some_and(|p| p.closed) && !self.objects.pd_in_use(pd) {
            self.objects.pds.remove(&pd);
        }
    }

    /// A UD queue pair's transmit turn: each datagram to its address handle's peer.
    pub(super) fn transmit_ud(&mut self, sock: &UdpSocket, now: Time, qpn: u32) -> bool {
        let mut payload = std::mem::take(&mut self.payload);
        let mut budget = TX_BURST;
        let mut more = false;
        // The line was booked while the queue pair had something to send: it waits for it.
        let mut line_waits = false;
        while let Some(e) = self.objects.uds.get_mut(&qpn) {
            if budget == 0 {
                more = true;
                break;
            }
            if self.line.as_deref().is_some_and(|l| l.busy(now)) {
                line_waits = e.qp.may_transmit();
                break;
            }
            budget -= 1;
            let Some(pd) = self.objects.pds.get(&e.pd) else {
                break;
            };
            let Some(t) = e.qp.poll_transmit(&pd.mem, &mut payload) else {
                break;
            };
            // An address handle destroyed under a posted Send: the datagram has nowhere to go
            // (a real NIC would send it to stale state); it is lost, and counted.
            let Some(&peer) = self.objects.ahs.get(&t.ah) else {
                self.counters.tx_errors += 1;
                continue;
            };
            let t = Transmit {
                ib: t.ib,
                ecn: Ecn::NotEct,
            };
            let sport = self.local.port();
            self.queue_tx(sock, now, (peer, sport, 0), &t, &mut payload);
        }
        // No lent piece outlives the turn (`lent`).
        irn_transport::TxPayload::clear(&mut payload);
        self.payload = payload;
        self.turns.set_pending(qpn, more);
        let line_held = line_waits.then(|| self.held_by_line(now, qpn)).flatten();
        more || line_held == Some(true)
    }

    /// Moves a UD queue pair's completions to their CQs.
    pub(super) fn drain_ud(&mut self, qpn: u32) {
        let Some(e) = self.objects.uds.get_mut(&qpn) else {
            return;
        };
        while let Some(wc) = e.qp.poll_completion() {
            let to = match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => e.recv_cq,
                _ => e.send_cq,
            };
            push_wc(&mut self.objects.cqs, to, wc);
        }
    }
}
