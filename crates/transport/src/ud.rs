//! Unreliable-datagram queue pairs (IBTA Vol. 1 §9.8.4, §10.2.4 and §11; RoCEv2 annex A17).
//!
//! A UD queue pair has no connection and no reliability: every Send is one packet
//! (`UD_SEND_ONLY`, or `…_WITH_IMMEDIATE`) of at most one path MTU, addressed per work request
//! (an address handle, the remote QPN and its Q_Key), carrying a DETH with the Q_Key and the
//! source QPN. Nothing is acknowledged or retransmitted; a datagram that finds no receive
//! posted, or whose Q_Key does not match, is dropped silently (and counted here). A receive
//! completes with the 40-byte GRH area in front of the payload (§11.4.1.1: the first 40 bytes
//! of every UD receive buffer); on RoCEv2 that area holds the received IP header — for IPv6
//! the whole header, for IPv4 20 zero bytes then the IPv4 header (as Linux rxe and RoCE NICs
//! fill it; rdma-core's `ibv_ud_pingpong` posts `size + 40` bytes for it).
//!
//! The same sans-IO contract as [`QueuePair`](crate::QueuePair): verbs
//! ([`UdQueuePair::modify`], [`UdQueuePair::post_send`], [`UdQueuePair::post_recv`]) and
//! [`UdQueuePair::handle_packet`] in, [`UdQueuePair::poll_transmit`] and
//! [`UdQueuePair::poll_completion`] out. No timers. The driver resolves address handles: a
//! work request names one by number ([`UdDest::ah`]) and the packet it produces carries it
//! back ([`UdTransmit::ah`]).

use crate::payload::TxPayload;
use std::collections::VecDeque;

use irn_wire::{BthRepr, DethRepr, IbRepr, Opcode, Psn, TVER_STANDARD};

use crate::memory::Memory;
use crate::qp::PostError;
use crate::state::QpState;
use crate::wr::{Completion, RecvWr, SgList, WcOpcode, WcStatus};

/// Bytes at the start of every UD receive buffer that hold the GRH (IBTA §11.4.1.1).
pub const GRH_LEN: usize = 40;

/// Where a UD Send goes (`ibv_send_wr.wr.ud`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// The driver's address handle (the destination's GID and port): returned with the packet.
    pub ah: u32,
    /// The destination queue pair.
    pub remote_qpn: u32,
    /// The destination's Q_Key. With the most significant bit set, the sending queue pair's
    /// own Q_Key is sent instead (IBTA §10.2.4, C10-15).
    pub remote_qkey: u32,
}

/// A UD Send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdSendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The destination.
    pub dest: UdDest,
    /// The message (at most one path MTU).
    pub sg_list: SgList,
    /// Immediate data (`IBV_WR_SEND_WITH_IMM`).
    pub imm: Option<u32>,
    /// Whether a successful completion is reported (errors always are).
    pub signaled: bool,
    /// Ask for a solicited event at the receiver (BTH SE).
    pub solicited: bool,
}

/// A packet a UD queue pair wants sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdTransmit {
    /// The address handle of its work request: where to send it.
    pub ah: u32,
    /// BTH onward; the payload is in the buffer given to [`UdQueuePair::poll_transmit`].
    pub ib: IbRepr,
}

/// The attributes a UD queue pair's transitions take (`ibv_modify_qp` for `IBV_QPT_UD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdAttr {
    /// Partition key (RESET → INIT).
    pub pkey: u16,
    /// The queue pair's Q_Key (RESET → INIT): received datagrams must carry it.
    pub qkey: u32,
    /// Largest message, bytes (the port's path MTU: 256 to 4096).
    pub pmtu: u32,
    /// First PSN sent (RTR → RTS).
    pub sq_psn: u32,
}

/// A transition the UD state diagram does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a UD queue pair cannot go from {from:?} to {to:?}")]
pub struct UdModifyError {
    /// The state it was in.
    pub from: QpState,
    /// The state asked for.
    pub to: QpState,
}

/// What a UD queue pair counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdCounters {
    /// Datagrams sent.
    pub tx_packets: u64,
    /// Payload bytes sent.
    pub tx_bytes: u64,
    /// Datagrams received into a receive buffer (successfully or with a length error).
    pub rx_packets: u64,
    /// Payload bytes received.
    pub rx_bytes: u64,
    /// Datagrams dropped: no receive posted (UD has no RNR NAK).
    pub rx_no_recv: u64,
    /// Datagrams dropped: wrong Q_Key.
    pub rx_bad_qkey: u64,
    /// Datagrams dropped: not a UD Send, no DETH, or the queue pair not ready to receive.
    pub rx_dropped: u64,
}

/// One unreliable-datagram queue pair.
#[derive(Debug)]
pub struct UdQueuePair {
    qpn: u32,
    state: QpState,
    attr: UdAttr,
    psn: Psn,
    max_send_wr: usize,
    max_recv_wr: usize,
    sq: VecDeque<UdSendWr>,
    rq: VecDeque<RecvWr>,
    done: VecDeque<Completion>,
    counters: UdCounters,
}

impl UdQueuePair {
    /// A queue pair in RESET with room for `max_send_wr` / `max_recv_wr` outstanding work
    /// requests.
    pub fn new(qpn: u32, max_send_wr: usize, max_recv_wr: usize) -> UdQueuePair {
        UdQueuePair {
            qpn,
            state: QpState::Reset,
            attr: UdAttr {
                pkey: irn_wire::DEFAULT_PKEY,
                qkey: 0,
                pmtu: 1024,
                sq_psn: 0,
            },
            psn: Psn::new(0),
            max_send_wr: max_send_wr.max(1),
            max_recv_wr: max_recv_wr.max(1),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            done: VecDeque::new(),
            counters: UdCounters::default(),
        }
    }

    /// The queue pair number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The attributes last given.
    pub fn attr(&self) -> &UdAttr {
        &self.attr
    }

    /// What it counted.
    pub fn counters(&self) -> &UdCounters {
        &self.counters
    }

    /// Moves along the UD state diagram (IBTA §10.3.1): RESET → INIT (takes `pkey`, `qkey`),
    /// INIT → RTR (`pmtu`), RTR → RTS (`sq_psn`); any state → ERR (every outstanding work
    /// request completes with `IBV_WC_WR_FLUSH_ERR`) or → RESET (everything forgotten).
    pub fn modify(&mut self, to: QpState, attr: &UdAttr) -> Result<(), UdModifyError> {
        let from = self.state;
        match (from, to) {
            (_, QpState::Err) => {
                self.state = QpState::Err;
                self.flush();
            }
            (_, QpState::Reset) => {
                self.state = QpState::Reset;
                self.sq.clear();
                self.rq.clear();
                self.done.clear();
            }
            (QpState::Reset, QpState::Init) => {
                self.attr.pkey = attr.pkey;
                self.attr.qkey = attr.qkey;
                self.state = to;
            }
            (QpState::Init, QpState::Rtr) => {
                self.attr.pmtu = attr.pmtu;
                self.state = to;
            }
            (QpState::Rtr, QpState::Rts) => {
                self.attr.sq_psn = attr.sq_psn;
                self.psn = Psn::new(attr.sq_psn);
                self.state = to;
            }
            _ => return Err(UdModifyError { from, to }),
        }
        Ok(())
    }

    fn flush(&mut self) {
        for wr in self.sq.drain(..) {
            self.done.push_back(Completion::bare(
                wr.wr_id,
                WcOpcode::Send,
                WcStatus::WrFlushErr,
                self.qpn,
            ));
        }
        for wr in self.rq.drain(..) {
            self.done.push_back(Completion::bare(
                wr.wr_id,
                WcOpcode::Recv,
                WcStatus::WrFlushErr,
                self.qpn,
            ));
        }
    }

    /// Posts a Send (`ibv_post_send`): in RTS only, one path MTU at most.
    pub fn post_send(&mut self, wr: UdSendWr) -> Result<(), PostError> {
        if self.state == QpState::Err {
            // As a verbs provider does: accepted, and flushed.
            self.done.push_back(Completion::bare(
                wr.wr_id,
                WcOpcode::Send,
                WcStatus::WrFlushErr,
                self.qpn,
            ));
            return Ok(());
        }
        if self.state != QpState::Rts {
            return Err(PostError::InvalidState(self.state));
        }
        if self.sq.len() >= self.max_send_wr {
            return Err(PostError::QueueFull);
        }
        let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.len)).sum();
        if len > u64::from(self.attr.pmtu) {
            return Err(PostError::InvalidWr(
                "a UD message is one packet: at most the path MTU",
            ));
        }
        self.sq.push_back(wr);
        Ok(())
    }

    /// Posts a receive (`ibv_post_recv`): from INIT on. Its buffer must have room for the
    /// 40-byte GRH area and the message.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        match self.state {
            QpState::Reset => return Err(PostError::InvalidState(self.state)),
            QpState::Err => {
                self.done.push_back(Completion::bare(
                    wr.wr_id,
                    WcOpcode::Recv,
                    WcStatus::WrFlushErr,
                    self.qpn,
                ));
                return Ok(());
            }
            _ => {}
        }
        if self.rq.len() >= self.max_recv_wr {
            return Err(PostError::QueueFull);
        }
        self.rq.push_back(wr);
        Ok(())
    }

    /// Sends posted and not yet transmitted.
    pub fn outstanding_sends(&self) -> usize {
        self.sq.len()
    }

    /// Receives posted and not yet consumed.
    pub fn outstanding_recvs(&self) -> usize {
        self.rq.len()
    }

    /// Whether [`UdQueuePair::poll_transmit`] has a packet.
    pub fn may_transmit(&self) -> bool {
        self.state == QpState::Rts && !self.sq.is_empty()
    }

    /// The next datagram to send, its payload in `payload`. A Send whose buffers cannot be read
    /// completes with `IBV_WC_LOC_PROT_ERR` and moves the queue pair to ERR.
    pub fn poll_transmit<'m, M: Memory, P: TxPayload<'m>>(
        &mut self,
        mem: &'m M,
        payload: &mut P,
    ) -> Option<UdTransmit> {
        if self.state != QpState::Rts {
            return None;
        }
        let wr = self.sq.pop_front()?;
        let len: usize = wr.sg_list.iter().map(|s| s.len as usize).sum();
        payload.clear();
        if crate::qp::gather(mem, &wr.sg_list, 0, len as u64, payload).is_err() {
            payload.clear();
            self.done.push_back(Completion::bare(
                wr.wr_id,
                WcOpcode::Send,
                WcStatus::LocProtErr,
                self.qpn,
            ));
            self.state = QpState::Err;
            self.flush();
            return None;
        }
        let opcode = if wr.imm.is_some() {
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        } else {
            Opcode::UD_SEND_ONLY
        };
        let mut ib = IbRepr::new(BthRepr {
            opcode,
            solicited: wr.solicited,
            mig_req: false,
            tver: TVER_STANDARD,
            pkey: self.attr.pkey,
            fecn: false,
            becn: false,
            dest_qpn: wr.dest.remote_qpn,
            ack_req: false,
            psn: self.psn,
        });
        let qkey = if wr.dest.remote_qkey & 0x8000_0000 != 0 {
            self.attr.qkey
        } else {
            wr.dest.remote_qkey
        };
        ib.deth = Some(DethRepr {
            qkey,
            src_qpn: self.qpn,
        });
        ib.imm = wr.imm;
        ib.payload_len = len;
        self.psn = self.psn.add(1);
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
        if wr.signaled {
            self.done.push_back(Completion {
                byte_len: len as u32,
                ..Completion::bare(wr.wr_id, WcOpcode::Send, WcStatus::Success, self.qpn)
            });
        }
        Some(UdTransmit { ah: wr.dest.ah, ib })
    }

    /// A received datagram for this queue pair: `grh` is what its receive buffer's first 40
    /// bytes get (the received IP header, as the module documentation says). Anything but a
    /// UD Send with this queue pair's Q_Key is dropped and counted; so is a datagram that finds
    /// no receive posted. A receive buffer too small for GRH area and message completes with
    /// `IBV_WC_LOC_LEN_ERR`, one whose memory cannot be written with `IBV_WC_LOC_PROT_ERR`.
    pub fn handle_packet<M: Memory>(
        &mut self,
        ib: &IbRepr,
        payload: &[u8],
        grh: &[u8; GRH_LEN],
        mem: &mut M,
    ) {
        if !matches!(self.state, QpState::Rtr | QpState::Rts)
            || !matches!(
                ib.bth.opcode,
                Opcode::UD_SEND_ONLY | Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
            )
        {
            self.counters.rx_dropped += 1;
            return;
        }
        let Some(deth) = ib.deth else {
            self.counters.rx_dropped += 1;
            return;
        };
        if deth.qkey != self.attr.qkey {
            self.counters.rx_bad_qkey += 1;
            return;
        }
        let Some(wr) = self.rq.pop_front() else {
            self.counters.rx_no_recv += 1;
            return;
        };
        self.counters.rx_packets += 1;
        let need = (GRH_LEN + payload.len()) as u64;
        let status = if wr.len() < need {
            WcStatus::LocLenErr
        } else if crate::qp::scatter(mem, &wr.sg_list, 0, grh).is_err()
            || crate::qp::scatter(mem, &wr.sg_list, GRH_LEN as u64, payload).is_err()
        {
            WcStatus::LocProtErr
        } else {
            self.counters.rx_bytes += payload.len() as u64;
            WcStatus::Success
        };
        let mut wc = Completion::bare(wr.wr_id, WcOpcode::Recv, status, self.qpn);
        wc.src_qp = Some(deth.src_qpn);
        if status == WcStatus::Success {
            wc.byte_len = need as u32;
            wc.imm = ib.imm;
        }
        self.done.push_back(wc);
    }

    /// The next completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }
}

/// The GRH area of a UD receive for a datagram that arrived in `ip_header` (the IP header as
/// received: 20 bytes of IPv4 without options, or 40 of IPv6): IPv6's header as is; IPv4's
/// after 20 zero bytes (Linux rxe's `union rdma_network_hdr`).
pub fn grh_area(ip_header: &[u8]) -> [u8; GRH_LEN] {
    let mut grh = [0u8; GRH_LEN];
    match ip_header.first().map(|b| b >> 4) {
        Some(6) if ip_header.len() >= GRH_LEN => grh.copy_from_slice(&ip_header[..GRH_LEN]),
        Some(4) if ip_header.len() >= 20 => grh[20..].copy_from_slice(&ip_header[..20]),
        _ => {}
    }
    grh
}

/// Where a UD datagram came from, read back from the GRH area of its receive
/// ([`grh_area`]'s inverse): the sender's address, and the traffic class, flow label and hop
/// limit (TTL) it arrived with — what `ibv_init_ah_from_wc(3)` builds the route back from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrhSource {
    /// The sender's IP address.
    pub addr: std::net::IpAddr,
    /// IPv6's traffic class, or IPv4's type-of-service byte (DSCP and ECN).
    pub traffic_class: u8,
    /// IPv6's flow label; 0 for IPv4.
    pub flow_label: u32,
    /// IPv6's hop limit, or IPv4's TTL.
    pub hop_limit: u8,
}

/// The sender of the datagram whose GRH area is `grh` (at least [`GRH_LEN`] bytes: IBTA
/// annex A17.4.5.1, on RoCEv2 the IPv6 header, or 20 zero bytes then the IPv4 header, as
/// rxe fills it), read through the wire crate's IP headers; `None` if it holds neither.
pub fn grh_source(grh: &[u8]) -> Option<GrhSource> {
    use irn_wire::ipv4::Ipv4Packet;
    use irn_wire::ipv6::Ipv6Packet;
    let grh = grh.get(..GRH_LEN)?;
    if grh[0] >> 4 == 6 {
        // The header alone (its payload is not here): fields within its 40 bytes only.
        let ip = Ipv6Packet::new_unchecked(grh);
        return Some(GrhSource {
            addr: ip.src().into(),
            traffic_class: ip.traffic_class(),
            flow_label: ip.flow_label(),
            hop_limit: ip.hop_limit(),
        });
    }
    let (zeros, v4) = grh.split_at(20);
    if zeros.iter().all(|&b| b == 0) && v4[0] >> 4 == 4 {
        let ip = Ipv4Packet::new_unchecked(v4);
        return Some(GrhSource {
            addr: ip.src().into(),
            traffic_class: ip.dscp() << 2 | ip.ecn().bits(),
            flow_label: 0,
            hop_limit: ip.ttl(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Access, ByteMemory};
    use crate::wr::Sge;

    #[test]
    fn the_grh_area_gives_back_the_sender_it_was_filled_from() {
        // IPv4: TOS 0x68, TTL 63, from 10.1.2.3 — through grh_area and back.
        let mut v4 = [0u8; 20];
        v4[0] = 0x45;
        v4[1] = 0x68;
        v4[8] = 63;
        v4[12..16].copy_from_slice(&[10, 1, 2, 3]);
        let s = grh_source(&grh_area(&v4)).expect("IPv4");
        assert_eq!(s.addr, std::net::IpAddr::from([10, 1, 2, 3]));
        assert_eq!((s.traffic_class, s.flow_label, s.hop_limit), (0x68, 0, 63));
        // IPv6: traffic class 0xb8, flow label 0x12345, hop limit 9, from fd99::11.
        let mut v6 = [0u8; GRH_LEN];
        v6[..4].copy_from_slice(&[0x6b, 0x81, 0x23, 0x45]);
        v6[7] = 9;
        v6[8..24].copy_from_slice(&[0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11]);
        let s = grh_source(&grh_area(&v6)).expect("IPv6");
        assert_eq!(s.addr, "fd99::11".parse::<std::net::IpAddr>().expect("v6"));
        assert_eq!(
            (s.traffic_class, s.flow_label, s.hop_limit),
            (0xb8, 0x12345, 9)
        );
        // Neither, or too short.
        assert_eq!(grh_source(&[0u8; GRH_LEN]), None);
        assert_eq!(grh_source(&v6[..39]), None);
        let mut stray = [0u8; GRH_LEN];
        stray[3] = 1;
        stray[20] = 0x45;
        assert_eq!(
            grh_source(&stray),
            None,
            "IPv4 behind bytes that are not zero"
        );
    }

    fn ready(qpn: u32, qkey: u32) -> UdQueuePair {
        let mut q = UdQueuePair::new(qpn, 8, 8);
        let attr = UdAttr {
            pkey: irn_wire::DEFAULT_PKEY,
            qkey,
            pmtu: 1024,
            sq_psn: 100,
        };
        for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
            q.modify(s, &attr).expect("transition");
        }
        q
    }

    #[test]
    fn a_send_is_one_packet_with_deth_and_lands_after_the_grh_area() {
        let mut mem = ByteMemory::new(1);
        let src = mem.alloc_with(b"hello, datagram");
        let sk = mem.register(src, 15, Access::ALL).expect("reg");
        let dst = mem.alloc(100);
        let dk = mem.register(dst, 100, Access::ALL).expect("reg");
        let mut a = ready(0x11, 0x1111_1111);
        let mut b = ready(0x22, 0x1111_1111);
        b.post_recv(RecvWr {
            wr_id: 7,
            sg_list: crate::sgl![Sge {
                addr: dst,
                len: 100,
                lkey: dk.lkey,
            }],
        })
        .expect("recv");
        a.post_send(UdSendWr {
            wr_id: 1,
            dest: UdDest {
                ah: 5,
                remote_qpn: 0x22,
                remote_qkey: 0x1111_1111,
            },
            sg_list: crate::sgl![Sge {
                addr: src,
                len: 15,
                lkey: sk.lkey,
            }],
            imm: Some(0xabcd),
            signaled: true,
            solicited: false,
        })
        .expect("send");
        let mut payload = Vec::new();
        let t = a.poll_transmit(&mem, &mut payload).expect("a packet");
        assert_eq!(t.ah, 5);
        assert_eq!(t.ib.bth.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
        assert_eq!(t.ib.bth.psn, Psn::new(100));
        assert_eq!(t.ib.bth.dest_qpn, 0x22);
        assert_eq!(
            t.ib.deth,
            Some(DethRepr {
                qkey: 0x1111_1111,
                src_qpn: 0x11
            })
        );
        assert!(a.poll_transmit(&mem, &mut payload.clone()).is_none());
        let wc = a.poll_completion().expect("send completion");
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (1, WcStatus::Success, 15)
        );
        let grh = grh_area(&[0x45; 20]);
        b.handle_packet(&t.ib, &payload, &grh, &mut mem);
        let wc = b.poll_completion().expect("recv completion");
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(
            (wc.byte_len, wc.src_qp, wc.imm),
            (55, Some(0x11), Some(0xabcd))
        );
        let mut got = [0u8; 55];
        mem.read(crate::memory::Key::Local(dk.lkey), dst, &mut got)
            .expect("read");
        assert_eq!(&got[..20], &[0; 20]);
        assert_eq!(&got[20..40], &[0x45; 20]);
        assert_eq!(&got[40..], b"hello, datagram");
    }

    #[test]
    fn wrong_qkey_no_receive_and_short_buffers() {
        let mut mem = ByteMemory::new(1);
        let dst = mem.alloc(48);
        let dk = mem.register(dst, 48, Access::ALL).expect("reg");
        let mut b = ready(0x22, 7);
        let mut ib = IbRepr::new(BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            tver: TVER_STANDARD,
            pkey: irn_wire::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qpn: 0x22,
            ack_req: false,
            psn: Psn::new(0),
        });
        ib.deth = Some(DethRepr {
            qkey: 8,
            src_qpn: 3,
        });
        let grh = [0u8; GRH_LEN];
        b.handle_packet(&ib, &[1; 8], &grh, &mut mem);
        assert_eq!(b.counters().rx_bad_qkey, 1);
        ib.deth = Some(DethRepr {
            qkey: 7,
            src_qpn: 3,
        });
        b.handle_packet(&ib, &[1; 8], &grh, &mut mem);
        assert_eq!(b.counters().rx_no_recv, 1);
        assert!(b.poll_completion().is_none(), "UD drops silently");
        for id in [1, 2] {
            b.post_recv(RecvWr {
                wr_id: id,
                sg_list: crate::sgl![Sge {
                    addr: dst,
                    len: 48,
                    lkey: dk.lkey,
                }],
            })
            .expect("recv");
        }
        // 40 + 9 > 48: a length error; the queue pair goes on.
        b.handle_packet(&ib, &[1; 9], &grh, &mut mem);
        let wc = b.poll_completion().expect("completion");
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocLenErr));
        b.handle_packet(&ib, &[1; 8], &grh, &mut mem);
        let wc = b.poll_completion().expect("completion");
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (2, WcStatus::Success, 48)
        );
        assert_eq!(b.state(), QpState::Rts);
    }

    #[test]
    fn states_and_flushes() {
        let mut q = UdQueuePair::new(1, 1, 1);
        let attr = UdAttr {
            pkey: 0xffff,
            qkey: 1,
            pmtu: 256,
            sq_psn: 0,
        };
        assert!(q.modify(QpState::Rts, &attr).is_err());
        assert!(matches!(
            q.post_recv(RecvWr {
                wr_id: 1,
                sg_list: crate::sgl![]
            }),
            Err(PostError::InvalidState(QpState::Reset))
        ));
        q.modify(QpState::Init, &attr).expect("init");
        q.post_recv(RecvWr {
            wr_id: 1,
            sg_list: crate::sgl![],
        })
        .expect("recv in INIT");
        assert_eq!(
            q.post_recv(RecvWr {
                wr_id: 2,
                sg_list: crate::sgl![]
            }),
            Err(PostError::QueueFull)
        );
        q.modify(QpState::Rtr, &attr).expect("rtr");
        q.modify(QpState::Rts, &attr).expect("rts");
        let big = UdSendWr {
            wr_id: 3,
            dest: UdDest {
                ah: 0,
                remote_qpn: 2,
                remote_qkey: 1,
            },
            sg_list: crate::sgl![Sge {
                addr: 0,
                len: 257,
                lkey: 0,
            }],
            imm: None,
            signaled: true,
            solicited: false,
        };
        assert!(matches!(q.post_send(big), Err(PostError::InvalidWr(_))));
        q.modify(QpState::Err, &attr).expect("err");
        let wc = q.poll_completion().expect("flushed receive");
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WrFlushErr));
    }
}
