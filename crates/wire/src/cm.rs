//! InfiniBand Communication Management messages (IBTA Vol. 1 §12.6), as the RDMA CM sends them
//! on RoCEv2: a 256-byte MAD (the 24-byte common header of §13.4.2, class 0x07, class version
//! 2, method Send) in a `UD_SEND_ONLY` to QP1 with Q_Key 0x80010000. REQ, MRA, REJ, REP, RTU,
//! DREQ and DREP, every field, with rdma_cm's addressing header in a REQ's private data
//! (Linux `drivers/infiniband/core/cma.c`, `struct cma_hdr`).
//!
//! Offsets are bytes from the start of the CM message (after the MAD header); every field is
//! big-endian, sub-byte fields numbered from the most significant bit, as the IBTA tables
//! draw them (Linux `include/rdma/ibta_vol1_c12.h` has the same layout as `IBA_FIELD`s).
//! Parsing takes untrusted bytes and returns an error, never panics; emitting masks nothing
//! silently: a value wider than its field is an error.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Layer};

/// A MAD on RoCE: 256 bytes.
pub const MAD_LEN: usize = 256;
/// The MAD common header.
pub const MAD_HDR_LEN: usize = 24;
/// The CM message after it.
pub const CM_LEN: usize = MAD_LEN - MAD_HDR_LEN;
/// The general services interface queue pair, where CM MADs go.
pub const GSI_QPN: u32 = 1;
/// QP1's well-known Q_Key (IBTA §13.5.3.2).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Management class of the communication manager.
pub const CLASS_CM: u8 = 0x07;
/// The CM class version Linux speaks.
pub const CM_CLASS_VERSION: u8 = 2;
/// MAD method Send (every CM message).
pub const METHOD_SEND: u8 = 0x03;
/// rdma_cm's TCP port space in a service ID (`RDMA_IB_IP_PS_TCP`): the ID is this plus the
/// port.
pub const RDMA_CM_TCP_SERVICE: u64 = 0x0000_0000_0106_0000;

/// The service ID of rdma_cm's TCP port space for `port`.
pub const fn rdma_cm_service_id(port: u16) -> u64 {
    RDMA_CM_TCP_SERVICE | port as u64
}

/// The MAD common header (IBTA §13.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHdr {
    /// Base version (1).
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific.
    pub class_specific: u16,
    /// Transaction ID.
    pub tid: u64,
    /// Attribute ID: which CM message.
    pub attr_id: u16,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl MadHdr {
    /// The header of a CM message `attr_id` with transaction `tid`.
    pub const fn cm(attr_id: u16, tid: u64) -> MadHdr {
        MadHdr {
            base_version: 1,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }
}

/// One path of a REQ (primary or alternate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPath {
    /// Local port LID (0xFFFF, permissive, on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits).
    pub local_ack_timeout: u8,
}

/// Connection request (attribute 0x0010, IBTA §12.6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmReq {
    /// The requester's communication ID.
    pub local_comm_id: u32,
    /// Which service (rdma_cm: [`rdma_cm_service_id`]).
    pub service_id: u64,
    /// The requester's CA GUID.
    pub local_ca_guid: u64,
    /// Q_Key (UD/RD only).
    pub local_qkey: u32,
    /// The requester's QPN (24 bits).
    pub local_qpn: u32,
    /// Reads/atomics the requester accepts as responder.
    pub responder_resources: u8,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Reads/atomics the requester issues at once.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// How long the requester waits for a reply (5 bits, 4.096 µs × 2^t).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits: 0 RC, 1 UC, 3 XRC).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// The requester's first PSN (24 bits).
    pub starting_psn: u32,
    /// How long the requester takes to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (4 bits, the IB enum: 1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// The requester's queue pair uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits).
    pub extended_transport: u8,
    /// Primary path.
    pub primary: CmPath,
    /// Alternate path (zero: none).
    pub alternate: CmPath,
    /// Private data (rdma_cm: [`CmaHdr`] then the consumer's).
    pub private_data: [u8; 92],
}

/// Message receipt acknowledgement: "I need more time" (attribute 0x0011, §12.6.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's.
    pub remote_comm_id: u32,
    /// Which message is MRAed (2 bits: 0 REQ, 1 REP, 2 LAP).
    pub message_mraed: u8,
    /// Service timeout (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; 222],
}

/// Reject (attribute 0x0012, §12.6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRej {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's (0 when rejecting a REQ before knowing it… the REQ's own ID otherwise).
    pub remote_comm_id: u32,
    /// Which message is rejected (2 bits: 0 REQ, 1 REP, 2 none/other).
    pub message_rejected: u8,
    /// Bytes of `ari` that mean something (7 bits).
    pub reject_info_length: u8,
    /// Reason (e.g. 8 invalid service ID, 28 consumer reject).
    pub reason: u16,
    /// Additional reject information.
    pub ari: [u8; 72],
    /// Private data.
    pub private_data: [u8; 148],
}

/// Connection reply (attribute 0x0013, §12.6.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRep {
    /// The replier's communication ID.
    pub local_comm_id: u32,
    /// The requester's.
    pub remote_comm_id: u32,
    /// Q_Key.
    pub local_qkey: u32,
    /// The replier's QPN (24 bits).
    pub local_qpn: u32,
    /// Local EEC (24 bits).
    pub local_eecn: u32,
    /// The replier's first PSN (24 bits).
    pub starting_psn: u32,
    /// Reads/atomics the replier accepts.
    pub responder_resources: u8,
    /// Reads/atomics the replier issues at once.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The replier uses an SRQ.
    pub srq: bool,
    /// The replier's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; 196],
}

/// Ready to use (attribute 0x0014), or a disconnect reply (0x0016): IDs and private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmIds224 {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; 224],
}

/// Disconnect request (attribute 0x0015, §12.6.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The peer's.
    pub remote_comm_id: u32,
    /// The peer's QPN or EECN (24 bits).
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: [u8; 220],
}

/// A CM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMsg {
    /// 0x0010.
    Req(CmReq),
    /// 0x0011.
    Mra(CmMra),
    /// 0x0012.
    Rej(CmRej),
    /// 0x0013.
    Rep(CmRep),
    /// 0x0014.
    Rtu(CmIds224),
    /// 0x0015.
    Dreq(CmDreq),
    /// 0x0016.
    Drep(CmIds224),
}

impl CmMsg {
    /// Its attribute ID.
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMsg::Req(_) => 0x0010,
            CmMsg::Mra(_) => 0x0011,
            CmMsg::Rej(_) => 0x0012,
            CmMsg::Rep(_) => 0x0013,
            CmMsg::Rtu(_) => 0x0014,
            CmMsg::Dreq(_) => 0x0015,
            CmMsg::Drep(_) => 0x0016,
        }
    }

    /// Its name, as the IBTA spells it.
    pub const fn name(&self) -> &'static str {
        match self {
            CmMsg::Req(_) => "REQ",
            CmMsg::Mra(_) => "MRA",
            CmMsg::Rej(_) => "REJ",
            CmMsg::Rep(_) => "REP",
            CmMsg::Rtu(_) => "RTU",
            CmMsg::Dreq(_) => "DREQ",
            CmMsg::Drep(_) => "DREP",
        }
    }

    /// The sender's communication ID (every message has one, first).
    pub const fn local_comm_id(&self) -> u32 {
        match self {
            CmMsg::Req(m) => m.local_comm_id,
            CmMsg::Mra(m) => m.local_comm_id,
            CmMsg::Rej(m) => m.local_comm_id,
            CmMsg::Rep(m) => m.local_comm_id,
            CmMsg::Rtu(m) | CmMsg::Drep(m) => m.local_comm_id,
            CmMsg::Dreq(m) => m.local_comm_id,
        }
    }

    /// The private data.
    pub fn private_data(&self) -> &[u8] {
        match self {
            CmMsg::Req(m) => &m.private_data,
            CmMsg::Mra(m) => &m.private_data,
            CmMsg::Rej(m) => &m.private_data,
            CmMsg::Rep(m) => &m.private_data,
            CmMsg::Rtu(m) | CmMsg::Drep(m) => &m.private_data,
            CmMsg::Dreq(m) => &m.private_data,
        }
    }
}

/// A whole CM MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// The common header.
    pub hdr: MadHdr,
    /// The message.
    pub msg: CmMsg,
}

fn malformed(what: &'static str) -> Error {
    Error::Malformed {
        layer: Layer::Mad,
        what,
    }
}

fn invalid(what: &'static str) -> Error {
    Error::Invalid {
        layer: Layer::Mad,
        what,
    }
}

/// Big-endian reads of a CM message (bounds known: the message is exactly [`CM_LEN`] bytes).
struct R<'a>(&'a [u8; CM_LEN]);

impl R<'_> {
    fn u8(&self, at: usize) -> u8 {
        self.0[at]
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.0[at], self.0[at + 1]])
    }
    fn u24(&self, at: usize) -> u32 {
        u32::from_be_bytes([0, self.0[at], self.0[at + 1], self.0[at + 2]])
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_be_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }
    fn u64(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[at..at + 8]);
        u64::from_be_bytes(b)
    }
    /// `width` bits of byte `at`, starting `from` bits below its most significant bit.
    fn bits(&self, at: usize, from: u32, width: u32) -> u8 {
        (self.0[at] >> (8 - from - width)) & ((1u16 << width) - 1) as u8
    }
    fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[at..at + N]);
        a
    }
}

/// Big-endian writes, each value checked against its field's width.
struct W<'a>(&'a mut [u8; CM_LEN]);

impl W<'_> {
    fn u8(&mut self, at: usize, v: u8) {
        self.0[at] = v;
    }
    fn u16(&mut self, at: usize, v: u16) {
        self.0[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    fn u24(&mut self, at: usize, v: u32, what: &'static str) -> Result<(), Error> {
        if v >> 24 != 0 {
            return Err(invalid(what));
        }
        self.0[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
        Ok(())
    }
    fn u32(&mut self, at: usize, v: u32) {
        self.0[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, at: usize, v: u64) {
        self.0[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
    fn bits(
        &mut self,
        at: usize,
        from: u32,
        width: u32,
        v: u8,
        what: &'static str,
    ) -> Result<(), Error> {
        if u16::from(v) >> width != 0 {
            return Err(invalid(what));
        }
        let shift = 8 - from - width;
        let mask = (((1u16 << width) - 1) as u8) << shift;
        self.0[at] = (self.0[at] & !mask) | (v << shift);
        Ok(())
    }
    fn bytes(&mut self, at: usize, v: &[u8]) {
        self.0[at..at + v.len()].copy_from_slice(v);
    }
}

impl CmPath {
    fn read(r: &R<'_>, at: usize) -> CmPath {
        let fl = r.u32(at + 36);
        CmPath {
            local_lid: r.u16(at),
            remote_lid: r.u16(at + 2),
            local_gid: r.array(at + 4),
            remote_gid: r.array(at + 20),
            flow_label: fl >> 12,
            packet_rate: (fl & 0x3f) as u8,
            traffic_class: r.u8(at + 40),
            hop_limit: r.u8(at + 41),
            sl: r.bits(at + 42, 0, 4),
            subnet_local: r.bits(at + 42, 4, 1) == 1,
            local_ack_timeout: r.bits(at + 43, 0, 5),
        }
    }

    fn write(&self, w: &mut W<'_>, at: usize) -> Result<(), Error> {
        w.u16(at, self.local_lid);
        w.u16(at + 2, self.remote_lid);
        w.bytes(at + 4, &self.local_gid);
        w.bytes(at + 20, &self.remote_gid);
        if self.flow_label >> 20 != 0 || self.packet_rate >> 6 != 0 {
            return Err(invalid("flow label or packet rate too wide"));
        }
        w.u32(at + 36, self.flow_label << 12 | u32::from(self.packet_rate));
        w.u8(at + 40, self.traffic_class);
        w.u8(at + 41, self.hop_limit);
        w.bits(at + 42, 0, 4, self.sl, "SL")?;
        w.bits(at + 42, 4, 1, u8::from(self.subnet_local), "subnet local")?;
        w.bits(at + 43, 0, 5, self.local_ack_timeout, "local ACK timeout")
    }
}

impl CmMad {
    /// Parses a MAD: the CM class, a CM message this codec knows, 256 bytes (more are
    /// ignored, as a UD receive buffer may be larger).
    pub fn parse(bytes: &[u8]) -> Result<CmMad, Error> {
        if bytes.len() < MAD_LEN {
            return Err(Error::Truncated {
                layer: Layer::Mad,
                need: MAD_LEN,
                have: bytes.len(),
            });
        }
        let h = &bytes[..MAD_HDR_LEN];
        let hdr = MadHdr {
            base_version: h[0],
            mgmt_class: h[1],
            class_version: h[2],
            method: h[3],
            status: u16::from_be_bytes([h[4], h[5]]),
            class_specific: u16::from_be_bytes([h[6], h[7]]),
            tid: u64::from_be_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]),
            attr_id: u16::from_be_bytes([h[16], h[17]]),
            attr_mod: u32::from_be_bytes([h[20], h[21], h[22], h[23]]),
        };
        if hdr.base_version != 1 {
            return Err(malformed("base version is not 1"));
        }
        if hdr.mgmt_class != CLASS_CM {
            return Err(Error::Unsupported {
                layer: Layer::Mad,
                what: "management class other than CM",
            });
        }
        let mut body = [0u8; CM_LEN];
        body.copy_from_slice(&bytes[MAD_HDR_LEN..MAD_LEN]);
        let r = R(&body);
        let ids = || (r.u32(0), r.u32(4));
        let msg = match hdr.attr_id {
            0x0010 => CmMsg::Req(CmReq {
                local_comm_id: r.u32(0),
                service_id: r.u64(8),
                local_ca_guid: r.u64(16),
                local_qkey: r.u32(28),
                local_qpn: r.u24(32),
                responder_resources: r.u8(35),
                local_eecn: r.u24(36),
                initiator_depth: r.u8(39),
                remote_eecn: r.u24(40),
                remote_cm_response_timeout: r.bits(43, 0, 5),
                transport_service_type: r.bits(43, 5, 2),
                e2e_flow_control: r.bits(43, 7, 1) == 1,
                starting_psn: r.u24(44),
                local_cm_response_timeout: r.bits(47, 0, 5),
                retry_count: r.bits(47, 5, 3),
                pkey: r.u16(48),
                path_mtu: r.bits(50, 0, 4),
                rdc_exists: r.bits(50, 4, 1) == 1,
                rnr_retry_count: r.bits(50, 5, 3),
                max_cm_retries: r.bits(51, 0, 4),
                srq: r.bits(51, 4, 1) == 1,
                extended_transport: r.bits(51, 5, 3),
                primary: CmPath::read(&r, 52),
                alternate: CmPath::read(&r, 96),
                private_data: r.array(140),
            }),
            0x0011 => CmMsg::Mra(CmMra {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                message_mraed: r.bits(8, 0, 2),
                service_timeout: r.bits(9, 0, 5),
                private_data: r.array(10),
            }),
            0x0012 => CmMsg::Rej(CmRej {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                message_rejected: r.bits(8, 0, 2),
                reject_info_length: r.bits(9, 0, 7),
                reason: r.u16(10),
                ari: r.array(12),
                private_data: r.array(84),
            }),
            0x0013 => CmMsg::Rep(CmRep {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                local_qkey: r.u32(8),
                local_qpn: r.u24(12),
                local_eecn: r.u24(16),
                starting_psn: r.u24(20),
                responder_resources: r.u8(24),
                initiator_depth: r.u8(25),
                target_ack_delay: r.bits(26, 0, 5),
                failover_accepted: r.bits(26, 5, 2),
                e2e_flow_control: r.bits(26, 7, 1) == 1,
                rnr_retry_count: r.bits(27, 0, 3),
                srq: r.bits(27, 3, 1) == 1,
                local_ca_guid: r.u64(28),
                private_data: r.array(36),
            }),
            0x0014 | 0x0016 => {
                let m = CmIds224 {
                    local_comm_id: ids().0,
                    remote_comm_id: ids().1,
                    private_data: r.array(8),
                };
                if hdr.attr_id == 0x0014 {
                    CmMsg::Rtu(m)
                } else {
                    CmMsg::Drep(m)
                }
            }
            0x0015 => CmMsg::Dreq(CmDreq {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                remote_qpn: r.u24(8),
                private_data: r.array(12),
            }),
            _ => {
                return Err(Error::Unsupported {
                    layer: Layer::Mad,
                    what: "CM attribute other than REQ, MRA, REJ, REP, RTU, DREQ, DREP",
                })
            }
        };
        Ok(CmMad { hdr, msg })
    }

    /// The 256 bytes of the MAD. The header's attribute ID is the message's, whatever `hdr`
    /// says; a field value wider than its field is an error.
    pub fn emit(&self) -> Result<[u8; MAD_LEN], Error> {
        let mut out = [0u8; MAD_LEN];
        let h = &self.hdr;
        out[0] = h.base_version;
        out[1] = h.mgmt_class;
        out[2] = h.class_version;
        out[3] = h.method;
        out[4..6].copy_from_slice(&h.status.to_be_bytes());
        out[6..8].copy_from_slice(&h.class_specific.to_be_bytes());
        out[8..16].copy_from_slice(&h.tid.to_be_bytes());
        out[16..18].copy_from_slice(&self.msg.attr_id().to_be_bytes());
        out[20..24].copy_from_slice(&h.attr_mod.to_be_bytes());
        let mut body = [0u8; CM_LEN];
        let mut w = W(&mut body);
        match &self.msg {
            CmMsg::Req(m) => {
                w.u32(0, m.local_comm_id);
                w.u64(8, m.service_id);
                w.u64(16, m.local_ca_guid);
                w.u32(28, m.local_qkey);
                w.u24(32, m.local_qpn, "local QPN")?;
                w.u8(35, m.responder_resources);
                w.u24(36, m.local_eecn, "local EECN")?;
                w.u8(39, m.initiator_depth);
                w.u24(40, m.remote_eecn, "remote EECN")?;
                w.bits(43, 0, 5, m.remote_cm_response_timeout, "remote CM timeout")?;
                w.bits(43, 5, 2, m.transport_service_type, "transport type")?;
                w.bits(43, 7, 1, u8::from(m.e2e_flow_control), "e2e flow control")?;
                w.u24(44, m.starting_psn, "starting PSN")?;
                w.bits(47, 0, 5, m.local_cm_response_timeout, "local CM timeout")?;
                w.bits(47, 5, 3, m.retry_count, "retry count")?;
                w.u16(48, m.pkey);
                w.bits(50, 0, 4, m.path_mtu, "path MTU")?;
                w.bits(50, 4, 1, u8::from(m.rdc_exists), "RDC exists")?;
                w.bits(50, 5, 3, m.rnr_retry_count, "RNR retry count")?;
                w.bits(51, 0, 4, m.max_cm_retries, "max CM retries")?;
                w.bits(51, 4, 1, u8::from(m.srq), "SRQ")?;
                w.bits(51, 5, 3, m.extended_transport, "extended transport")?;
                m.primary.write(&mut w, 52)?;
                m.alternate.write(&mut w, 96)?;
                w.bytes(140, &m.private_data);
            }
            CmMsg::Mra(m) => {
                w.u32(0, m.local_comm_id);
                w.u32(4, m.remote_comm_id);
                w.bits(8, 0, 2, m.message_mraed, "message MRAed")?;
                w.bits(9, 0, 5, m.service_timeout, "service timeout")?;
                w.bytes(10, &m.private_data);
            }
            CmMsg::Rej(m) => {
                w.u32(0, m.local_comm_id);
                w.u32(4, m.remote_comm_id);
                w.bits(8, 0, 2, m.message_rejected, "message rejected")?;
                w.bits(9, 0, 7, m.reject_info_length, "reject info length")?;
                w.u16(10, m.reason);
                w.bytes(12, &m.ari);
                w.bytes(84, &m.private_data);
            }
            CmMsg::Rep(m) => {
                w.u32(0, m.local_comm_id);
                w.u32(4, m.remote_comm_id);
                w.u32(8, m.local_qkey);
                w.u24(12, m.local_qpn, "local QPN")?;
                w.u24(16, m.local_eecn, "local EECN")?;
                w.u24(20, m.starting_psn, "starting PSN")?;
                w.u8(24, m.responder_resources);
                w.u8(25, m.initiator_depth);
                w.bits(26, 0, 5, m.target_ack_delay, "target ACK delay")?;
                w.bits(26, 5, 2, m.failover_accepted, "failover accepted")?;
                w.bits(26, 7, 1, u8::from(m.e2e_flow_control), "e2e flow control")?;
                w.bits(27, 0, 3, m.rnr_retry_count, "RNR retry count")?;
                w.bits(27, 3, 1, u8::from(m.srq), "SRQ")?;
                w.u64(28, m.local_ca_guid);
                w.bytes(36, &m.private_data);
            }
            CmMsg::Rtu(m) | CmMsg::Drep(m) => {
                w.u32(0, m.local_comm_id);
                w.u32(4, m.remote_comm_id);
                w.bytes(8, &m.private_data);
            }
            CmMsg::Dreq(m) => {
                w.u32(0, m.local_comm_id);
                w.u32(4, m.remote_comm_id);
                w.u24(8, m.remote_qpn, "remote QPN")?;
                w.bytes(12, &m.private_data);
            }
        }
        out[MAD_HDR_LEN..].copy_from_slice(&body);
        Ok(out)
    }

    /// Every field of the message, named as the IBTA tables name them, with its value as
    /// text (what `irn decode` prints).
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let hx = |v: u64| format!("0x{v:x}");
        let gid = |g: &[u8; 16]| {
            let v6 = Ipv6Addr::from(*g);
            v6.to_ipv4_mapped()
                .map_or_else(|| v6.to_string(), |v4| v4.to_string())
        };
        let path = |f: &mut Vec<(&'static str, String)>, p: &CmPath, alt: bool| {
            let n = |a: &'static str, b: &'static str| if alt { b } else { a };
            f.push((
                n("primary_local_lid", "alt_local_lid"),
                hx(p.local_lid.into()),
            ));
            f.push((
                n("primary_remote_lid", "alt_remote_lid"),
                hx(p.remote_lid.into()),
            ));
            f.push((n("primary_local_gid", "alt_local_gid"), gid(&p.local_gid)));
            f.push((
                n("primary_remote_gid", "alt_remote_gid"),
                gid(&p.remote_gid),
            ));
            f.push((
                n("primary_flow_label", "alt_flow_label"),
                hx(p.flow_label.into()),
            ));
            f.push((
                n("primary_packet_rate", "alt_packet_rate"),
                p.packet_rate.to_string(),
            ));
            f.push((
                n("primary_traffic_class", "alt_traffic_class"),
                p.traffic_class.to_string(),
            ));
            f.push((
                n("primary_hop_limit", "alt_hop_limit"),
                p.hop_limit.to_string(),
            ));
            f.push((n("primary_sl", "alt_sl"), p.sl.to_string()));
            f.push((
                n("primary_subnet_local", "alt_subnet_local"),
                u8::from(p.subnet_local).to_string(),
            ));
            f.push((
                n("primary_local_ack_timeout", "alt_local_ack_timeout"),
                p.local_ack_timeout.to_string(),
            ));
        };
        let mut f: Vec<(&'static str, String)> = vec![("tid", hx(self.hdr.tid))];
        if self.hdr.status != 0 {
            f.push(("status", hx(self.hdr.status.into())));
        }
        f.push(("local_comm_id", hx(self.msg.local_comm_id().into())));
        match &self.msg {
            CmMsg::Req(m) => {
                f.push(("service_id", hx(m.service_id)));
                f.push(("local_ca_guid", hx(m.local_ca_guid)));
                f.push(("local_qkey", hx(m.local_qkey.into())));
                f.push(("local_qpn", hx(m.local_qpn.into())));
                f.push(("responder_resources", m.responder_resources.to_string()));
                f.push(("local_eecn", hx(m.local_eecn.into())));
                f.push(("initiator_depth", m.initiator_depth.to_string()));
                f.push(("remote_eecn", hx(m.remote_eecn.into())));
                f.push((
                    "remote_cm_response_timeout",
                    m.remote_cm_response_timeout.to_string(),
                ));
                f.push((
                    "transport_service_type",
                    m.transport_service_type.to_string(),
                ));
                f.push(("e2e_flow_control", u8::from(m.e2e_flow_control).to_string()));
                f.push(("starting_psn", hx(m.starting_psn.into())));
                f.push((
                    "local_cm_response_timeout",
                    m.local_cm_response_timeout.to_string(),
                ));
                f.push(("retry_count", m.retry_count.to_string()));
                f.push(("pkey", hx(m.pkey.into())));
                f.push(("path_mtu", m.path_mtu.to_string()));
                f.push(("rdc_exists", u8::from(m.rdc_exists).to_string()));
                f.push(("rnr_retry_count", m.rnr_retry_count.to_string()));
                f.push(("max_cm_retries", m.max_cm_retries.to_string()));
                f.push(("srq", u8::from(m.srq).to_string()));
                f.push(("extended_transport", m.extended_transport.to_string()));
                path(&mut f, &m.primary, false);
                path(&mut f, &m.alternate, true);
                if let Some(c) = CmaHdr::parse(&m.private_data) {
                    f.push(("cma_version", c.version.to_string()));
                    f.push(("cma_src", format!("{}:{}", c.src, c.src_port)));
                    f.push(("cma_dst", c.dst.to_string()));
                }
            }
            CmMsg::Mra(m) => {
                f.push(("remote_comm_id", hx(m.remote_comm_id.into())));
                f.push(("message_mraed", m.message_mraed.to_string()));
                f.push(("service_timeout", m.service_timeout.to_string()));
            }
            CmMsg::Rej(m) => {
                f.push(("remote_comm_id", hx(m.remote_comm_id.into())));
                f.push(("message_rejected", m.message_rejected.to_string()));
                f.push(("reject_info_length", m.reject_info_length.to_string()));
                f.push(("reason", m.reason.to_string()));
            }
            CmMsg::Rep(m) => {
                f.push(("remote_comm_id", hx(m.remote_comm_id.into())));
                f.push(("local_qkey", hx(m.local_qkey.into())));
                f.push(("local_qpn", hx(m.local_qpn.into())));
                f.push(("local_eecn", hx(m.local_eecn.into())));
                f.push(("starting_psn", hx(m.starting_psn.into())));
                f.push(("responder_resources", m.responder_resources.to_string()));
                f.push(("initiator_depth", m.initiator_depth.to_string()));
                f.push(("target_ack_delay", m.target_ack_delay.to_string()));
                f.push(("failover_accepted", m.failover_accepted.to_string()));
                f.push(("e2e_flow_control", u8::from(m.e2e_flow_control).to_string()));
                f.push(("rnr_retry_count", m.rnr_retry_count.to_string()));
                f.push(("srq", u8::from(m.srq).to_string()));
                f.push(("local_ca_guid", hx(m.local_ca_guid)));
            }
            CmMsg::Rtu(m) | CmMsg::Drep(m) => {
                f.push(("remote_comm_id", hx(m.remote_comm_id.into())));
            }
            CmMsg::Dreq(m) => {
                f.push(("remote_comm_id", hx(m.remote_comm_id.into())));
                f.push(("remote_qpn", hx(m.remote_qpn.into())));
            }
        }
        let pd = self.msg.private_data();
        let used = pd.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        f.push(("private_data_len", used.to_string()));
        f
    }
}

/// rdma_cm's header at the start of a REQ's private data (Linux `cma.c`, `struct cma_hdr`):
/// version, IP version, the requester's port, source and destination addresses; 36 bytes.
/// IPv4 addresses take the last 4 bytes of their 16, the rest zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdr {
    /// CMA version (0x00).
    pub version: u8,
    /// The requester's (source) port.
    pub src_port: u16,
    /// The requester's address.
    pub src: IpAddr,
    /// The address it connects to (the service's port is in the service ID).
    pub dst: IpAddr,
}

impl CmaHdr {
    /// Bytes of the header.
    pub const LEN: usize = 36;

    /// Parses it from private data; `None` unless IP version 4 or 6.
    pub fn parse(pd: &[u8]) -> Option<CmaHdr> {
        let pd = pd.get(..Self::LEN)?;
        let addr = |b: &[u8], v6: bool| -> IpAddr {
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            if v6 {
                IpAddr::V6(Ipv6Addr::from(a))
            } else {
                IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
            }
        };
        let v6 = match pd[1] >> 4 {
            4 => false,
            6 => true,
            _ => return None,
        };
        Some(CmaHdr {
            version: pd[0],
            src_port: u16::from_be_bytes([pd[2], pd[3]]),
            src: addr(&pd[4..20], v6),
            dst: addr(&pd[20..36], v6),
        })
    }

    /// Writes it at the start of `pd` (at least [`CmaHdr::LEN`] bytes); the addresses must
    /// be of one family.
    pub fn write(&self, pd: &mut [u8]) -> Result<(), Error> {
        let have = pd.len();
        let pd = pd.get_mut(..Self::LEN).ok_or(Error::Exhausted {
            need: Self::LEN,
            have,
        })?;
        let bytes = |a: IpAddr| -> [u8; 16] {
            match a {
                IpAddr::V4(v4) => {
                    let mut b = [0u8; 16];
                    b[12..].copy_from_slice(&v4.octets());
                    b
                }
                IpAddr::V6(v6) => v6.octets(),
            }
        };
        let v = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(invalid("CMA addresses of two families")),
        };
        pd[0] = self.version;
        pd[1] = v << 4;
        pd[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        pd[4..20].copy_from_slice(&bytes(self.src));
        pd[20..36].copy_from_slice(&bytes(self.dst));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> CmMad {
        let mut pd = [0u8; 92];
        CmaHdr {
            version: 0,
            src_port: 0xa0ca,
            src: IpAddr::V4(Ipv4Addr::new(10, 99, 0, 12)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 99, 0, 11)),
        }
        .write(&mut pd)
        .expect("cma");
        let gid = |ip: [u8; 4]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&ip);
            g
        };
        CmMad {
            hdr: MadHdr::cm(0x0010, 0x2_0334_b564),
            msg: CmMsg::Req(CmReq {
                local_comm_id: 0x64b5_3403,
                service_id: rdma_cm_service_id(7174),
                local_ca_guid: 0x5054_00ff_fe99_0012,
                local_qkey: 0,
                local_qpn: 0x18,
                responder_resources: 1,
                local_eecn: 0,
                initiator_depth: 1,
                remote_eecn: 0,
                remote_cm_response_timeout: 20,
                transport_service_type: 0,
                e2e_flow_control: false,
                starting_psn: 0x0f4b83,
                local_cm_response_timeout: 20,
                retry_count: 7,
                pkey: 0xffff,
                path_mtu: 3,
                rdc_exists: false,
                rnr_retry_count: 7,
                max_cm_retries: 15,
                srq: false,
                extended_transport: 0,
                primary: CmPath {
                    local_lid: 0xffff,
                    remote_lid: 0xffff,
                    local_gid: gid([10, 99, 0, 12]),
                    remote_gid: gid([10, 99, 0, 11]),
                    flow_label: 0x394,
                    packet_rate: 0x39,
                    traffic_class: 0,
                    hop_limit: 64,
                    sl: 0,
                    subnet_local: false,
                    local_ack_timeout: 19,
                },
                alternate: CmPath::default(),
                private_data: pd,
            }),
        }
    }

    #[test]
    fn a_req_round_trips_and_lays_out_as_rping_sent_it() {
        let m = req();
        let b = m.emit().expect("emit");
        // The first bytes of the REQ's payload in ../shared/interop/captures/rping.pcap.
        let head = [
            0x64, 0xb5, 0x34, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06, 0x50, 0x54, 0,
            0xff, 0xfe, 0x99, 0, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x18, 0x01,
        ];
        assert_eq!(&b[MAD_HDR_LEN..MAD_HDR_LEN + head.len()], &head);
        assert_eq!(&b[..4], &[1, CLASS_CM, 2, METHOD_SEND]);
        assert_eq!(CmMad::parse(&b).expect("parse"), m);
        let f = m.fields();
        let get = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get("cma_src").as_deref(), Some("10.99.0.12:41162"));
        assert_eq!(get("primary_local_gid").as_deref(), Some("10.99.0.12"));
        assert_eq!(get("path_mtu").as_deref(), Some("3"));
    }

    #[test]
    fn wide_values_are_refused_and_short_or_foreign_mads_are_errors() {
        let mut m = req();
        if let CmMsg::Req(r) = &mut m.msg {
            r.retry_count = 8;
        }
        assert!(m.emit().is_err());
        let b = req().emit().expect("emit");
        assert!(CmMad::parse(&b[..255]).is_err());
        let mut x = b;
        x[1] = 0x01;
        assert!(CmMad::parse(&x).is_err());
        let mut x = b;
        x[17] = 0x19; // LAP: not decoded
        assert!(CmMad::parse(&x).is_err());
    }
}
