//! `irn decode`: a capture, one line (or JSON object) per RoCEv2, PFC, PAUSE or DRP frame.
//!
//! Frames of other protocols are counted and skipped. A truncated or malformed frame is reported
//! on its own line and counted, and decoding goes on; an unreadable file, or a capture that ends
//! in the middle of a record, ends the run with what was read so far reported.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::time::Duration;

use crate::error::{Context, Result};
use irn_wire::drp::{
    CTRL_CONN_ACK, CTRL_CONN_REQ, CTRL_DATA, CTRL_INDIRECT, CTRL_REL_ACK, CTRL_REL_REQ, CTRL_WRITE,
};
use irn_wire::ethernet::EthernetFrame;
use irn_wire::mad::{self, Mad};
use irn_wire::udp::ROCEV2_PORT;
use irn_wire::{
    icrc, DrpRepr, EtherType, EthernetRepr, Frame, IbRepr, IcrcCheck, IpRepr, MacControlRepr,
    Opcode, RocePacket, Syndrome, UdpChecksum, DEFAULT_PKEY,
};
use pcap_file::pcapng::Block;
use pcap_file::DataLink;
use serde_json::{json, Map, Value};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One human-readable line per frame, then a summary line.
    Text,
    /// One JSON object per frame, then a summary object.
    Json,
}

/// What a run counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Records in the capture.
    pub packets: u64,
    /// RoCEv2 packets (UDP destination port 4791, or one given), well-formed or not.
    pub rocev2: u64,
    /// RoCEv2 packets whose ICRC is right.
    pub icrc_ok: u64,
    /// RoCEv2 packets whose ICRC is wrong.
    pub icrc_bad: u64,
    /// Frames that could not be decoded (truncated, malformed).
    pub malformed: u64,
    /// PFC frames.
    pub pfc: u64,
    /// 802.3x PAUSE frames.
    pub pause: u64,
    /// Dynamic RDMA frames.
    pub drp: u64,
    /// Frames of other protocols, skipped.
    pub other: u64,
    /// Why the capture ended early, if it did.
    pub truncated_file: Option<String>,
}

impl Summary {
    /// No malformed packet, no bad ICRC, no early end.
    pub fn clean(&self) -> bool {
        self.malformed == 0 && self.icrc_bad == 0 && self.truncated_file.is_none()
    }

    fn to_json(&self) -> Value {
        json!({
            "kind": "summary",
            "packets": self.packets,
            "rocev2": self.rocev2,
            "icrc_ok": self.icrc_ok,
            "icrc_bad": self.icrc_bad,
            "malformed": self.malformed,
            "pfc": self.pfc,
            "pause": self.pause,
            "drp": self.drp,
            "other": self.other,
            "truncated_file": self.truncated_file,
        })
    }
}

/// One record of a capture.
struct Record<'a> {
    timestamp: Duration,
    orig_len: u32,
    data: &'a [u8],
    link: DataLink,
}

/// Decodes the capture at `path` into `out`; UDP datagrams to 4791 and to any of `ports` are
/// RoCEv2.
pub fn run(path: &Path, format: Format, ports: &[u16], out: &mut impl Write) -> Result<Summary> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut reader = BufReader::new(file);
    let mut magic = [0u8; 4];
    reader
        .read_exact(&mut magic)
        .with_context(|| format!("{}: too short to be a capture", path.display()))?;
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = BufReader::new(file);

    let mut roce_ports = vec![ROCEV2_PORT];
    roce_ports.extend(ports.iter().filter(|&&p| p != ROCEV2_PORT));
    let mut dec = Decoder {
        format,
        ports: roce_ports,
        summary: Summary::default(),
        first: None,
        skipped: Vec::new(),
    };
    let mut sink = |rec: &Record| dec.record(rec, out);
    let end = if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        read_pcapng(reader, &mut sink)
    } else {
        read_pcap(reader, &mut sink)
    }
    .with_context(|| format!("{}: not a pcap or pcapng capture", path.display()))?;
    dec.summary.truncated_file = end;
    dec.finish(out)?;
    Ok(dec.summary)
}

/// Reads a pcap file. `Ok(Some(why))` when the file ends inside a record.
fn read_pcap(
    reader: impl Read,
    sink: &mut impl FnMut(&Record) -> Result<()>,
) -> Result<Option<String>> {
    let mut r = pcap_file::pcap::PcapReader::new(reader)?;
    let link = r.header().datalink;
    while let Some(p) = r.next_packet() {
        match p {
            Ok(p) => sink(&Record {
                timestamp: p.timestamp,
                orig_len: p.orig_len,
                data: &p.data,
                link,
            })?,
            Err(e) => return Ok(Some(e.to_string())),
        }
    }
    Ok(None)
}

/// Reads a pcapng file (enhanced and simple packet blocks).
fn read_pcapng(
    reader: impl Read,
    sink: &mut impl FnMut(&Record) -> Result<()>,
) -> Result<Option<String>> {
    let mut r = pcap_file::pcapng::PcapNgReader::new(reader)?;
    // Link types of the current section's interfaces, by interface id.
    let mut links: Vec<DataLink> = r.interfaces().iter().map(|i| i.linktype).collect();
    let unknown = DataLink::Unknown(u32::MAX);
    while let Some(b) = r.next_block() {
        let block = match b {
            Ok(b) => b,
            Err(e) => return Ok(Some(e.to_string())),
        };
        match block {
            Block::SectionHeader(_) => links.clear(),
            Block::InterfaceDescription(i) => links.push(i.linktype),
            Block::EnhancedPacket(p) => {
                let link = usize::try_from(p.interface_id)
                    .ok()
                    .and_then(|i| links.get(i).copied())
                    .unwrap_or(unknown);
                sink(&Record {
                    timestamp: p.timestamp,
                    orig_len: p.original_len,
                    data: &p.data,
                    link,
                })?;
            }
            Block::SimplePacket(p) => {
                let link = links.first().copied().unwrap_or(unknown);
                sink(&Record {
                    timestamp: Duration::ZERO,
                    orig_len: p.original_len,
                    data: &p.data,
                    link,
                })?;
            }
            _ => {}
        }
    }
    Ok(None)
}

struct Decoder {
    format: Format,
    /// UDP destination ports whose datagrams are RoCEv2: 4791, and those given.
    ports: Vec<u16>,
    summary: Summary,
    first: Option<Duration>,
    /// Link types or cooked protocols already reported as skipped.
    skipped: Vec<String>,
}

/// Where the decodable part of a record starts.
enum L3<'a> {
    Ethernet(&'a [u8]),
    Ip(&'a [u8]),
    /// A link type or cooked protocol this decoder does not follow.
    Unsupported(String),
}

fn layer3<'a>(rec: &Record<'a>) -> L3<'a> {
    let d = rec.data;
    match rec.link {
        DataLink::ETHERNET => L3::Ethernet(d),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => L3::Ip(d),
        // Linux cooked capture v1: 16-byte header, protocol in bytes 14–15.
        DataLink::LINUX_SLL => cooked(d, 16, 14),
        // v2: 20-byte header, protocol in bytes 0–1.
        DataLink::LINUX_SLL2 => cooked(d, 20, 0),
        other => L3::Unsupported(format!("link type {other:?}")),
    }
}

fn cooked(d: &[u8], header: usize, proto_at: usize) -> L3<'_> {
    if d.len() < header {
        return L3::Unsupported("truncated Linux cooked header".into());
    }
    match EtherType::from(u16::from_be_bytes([d[proto_at], d[proto_at + 1]])) {
        EtherType::Ipv4 | EtherType::Ipv6 => L3::Ip(&d[header..]),
        other => L3::Unsupported(format!("cooked protocol {other}")),
    }
}

impl Decoder {
    fn record(&mut self, rec: &Record, out: &mut impl Write) -> Result<()> {
        self.summary.packets += 1;
        let n = self.summary.packets;
        let first = *self.first.get_or_insert(rec.timestamp);
        let time = rec.timestamp.saturating_sub(first).as_secs_f64();
        let ctx = Ctx {
            n,
            time,
            ts: rec.timestamp.as_secs_f64(),
            cut: (rec.data.len() < rec.orig_len as usize).then_some((rec.data.len(), rec.orig_len)),
        };
        let (parsed, ip_bytes) = match layer3(rec) {
            L3::Ethernet(b) => (
                Frame::parse_ethernet_on_ports(b, &self.ports),
                ethernet_ip_payload(b),
            ),
            L3::Ip(b) => (Frame::parse_ip_on_ports(b, &self.ports), Some(b)),
            L3::Unsupported(why) => {
                self.summary.other += 1;
                if !self.skipped.contains(&why) {
                    eprintln!("irn: skipping frames of {why} (counted as other)");
                    self.skipped.push(why);
                }
                return Ok(());
            }
        };
        match parsed {
            Ok(Frame::RoceV2 { eth, packet }) => {
                self.summary.rocev2 += 1;
                if packet.icrc.ok() {
                    self.summary.icrc_ok += 1;
                } else {
                    self.summary.icrc_bad += 1;
                }
                self.emit_roce(&ctx, eth.as_ref(), &packet, out)
            }
            Ok(Frame::MacControl { eth, control }) => {
                match control {
                    MacControlRepr::Pfc(_) => self.summary.pfc += 1,
                    MacControlRepr::Pause { .. } => self.summary.pause += 1,
                    MacControlRepr::Unknown { .. } => self.summary.other += 1,
                }
                self.emit_mac_control(&ctx, &eth, &control, out)
            }
            Ok(Frame::Drp { eth, drp, payload }) => {
                self.summary.drp += 1;
                self.emit_drp(&ctx, &eth, &drp, payload.len(), out)
            }
            Ok(Frame::Other { .. }) => {
                self.summary.other += 1;
                Ok(())
            }
            Err(e) => {
                self.summary.malformed += 1;
                // A frame that failed on the IP path was addressed to RoCEv2 (other IP traffic is
                // classified, not parsed): count it, and say whether its ICRC still checks.
                let icrc = ip_bytes.and_then(|ip| icrc::check_ip_packet(ip).ok());
                if ip_bytes.is_some() {
                    self.summary.rocev2 += 1;
                    match icrc {
                        Some(c) if c.ok() => self.summary.icrc_ok += 1,
                        Some(_) => self.summary.icrc_bad += 1,
                        None => {}
                    }
                }
                self.emit_malformed(&ctx, &e.to_string(), icrc, out)
            }
        }
    }

    fn emit_roce(
        &self,
        ctx: &Ctx,
        eth: Option<&EthernetRepr>,
        p: &RocePacket,
        out: &mut impl Write,
    ) -> Result<()> {
        let r = &p.repr;
        let ib = &r.ib;
        let bth = &ib.bth;
        match self.format {
            Format::Text => {
                let mut l = String::with_capacity(160);
                let _ = write!(
                    l,
                    "{:>6} {:>11.6} {} > {} {} qpn=0x{:06x} psn={}",
                    ctx.n,
                    ctx.time,
                    endpoint(r.ip.src(), r.udp.src_port),
                    endpoint(r.ip.dst(), r.udp.dst_port),
                    bth.opcode,
                    bth.dest_qpn,
                    bth.psn,
                );
                if bth.ack_req {
                    l.push_str(" ack_req");
                }
                if bth.solicited {
                    l.push_str(" se");
                }
                if bth.tver != 0 {
                    let _ = write!(l, " tver={}", bth.tver);
                }
                if bth.pkey != DEFAULT_PKEY {
                    let _ = write!(l, " pkey=0x{:04x}", bth.pkey);
                }
                if bth.fecn {
                    l.push_str(" fecn");
                }
                if bth.becn {
                    l.push_str(" becn");
                }
                if let Some(vlan) = eth.and_then(|e| e.vlan) {
                    let _ = write!(l, " vlan={} pcp={}", vlan.vid, vlan.pcp);
                }
                if r.ip.dscp() != 0 {
                    let _ = write!(l, " dscp={}", r.ip.dscp());
                }
                if r.ip.ecn() != irn_wire::Ecn::NotEct {
                    let _ = write!(l, " ecn={}", r.ip.ecn());
                }
                ext_text(&mut l, ib, p.payload);
                let _ = write!(l, " len={} icrc={}", ib.payload_len, verdict(p.icrc));
                if let UdpChecksum::Mismatch(v) = r.udp.checksum {
                    let _ = write!(l, " udp_csum=0x{v:04x}(mismatch)");
                }
                writeln!(out, "{l}")?;
            }
            Format::Json => {
                let mut o = ctx.json("rocev2");
                o.insert("src".into(), json!(r.ip.src().to_string()));
                o.insert("dst".into(), json!(r.ip.dst().to_string()));
                o.insert("sport".into(), json!(r.udp.src_port));
                o.insert("dport".into(), json!(r.udp.dst_port));
                if let IpRepr::V4(v4) = r.ip {
                    o.insert("ip_id".into(), json!(v4.ident));
                }
                o.insert("dscp".into(), json!(r.ip.dscp()));
                o.insert("ecn".into(), json!(r.ip.ecn().to_string()));
                if let Some(vlan) = eth.and_then(|e| e.vlan) {
                    o.insert("vlan".into(), json!({"vid": vlan.vid, "pcp": vlan.pcp}));
                }
                o.insert(
                    "udp_checksum".into(),
                    json!(match r.udp.checksum {
                        UdpChecksum::None => "none",
                        UdpChecksum::Computed => "ok",
                        UdpChecksum::Mismatch(_) => "mismatch",
                    }),
                );
                o.insert("opcode".into(), json!(bth.opcode.to_string()));
                o.insert("opcode_value".into(), json!(bth.opcode.0));
                o.insert("qpn".into(), json!(bth.dest_qpn));
                o.insert("psn".into(), json!(bth.psn.value()));
                o.insert("ack_req".into(), json!(bth.ack_req));
                o.insert("solicited".into(), json!(bth.solicited));
                o.insert("mig_req".into(), json!(bth.mig_req));
                o.insert("tver".into(), json!(bth.tver));
                o.insert("pkey".into(), json!(bth.pkey));
                o.insert("fecn".into(), json!(bth.fecn));
                o.insert("becn".into(), json!(bth.becn));
                o.insert("headers".into(), ext_json(ib, p.payload));
                o.insert("payload_len".into(), json!(ib.payload_len));
                o.insert("icrc".into(), json!(verdict(p.icrc)));
                o.insert(
                    "icrc_carried".into(),
                    json!(format!("0x{:08x}", p.icrc.carried)),
                );
                o.insert(
                    "icrc_computed".into(),
                    json!(format!("0x{:08x}", p.icrc.computed)),
                );
                writeln!(out, "{}", Value::Object(o))?;
            }
        }
        Ok(())
    }

    fn emit_mac_control(
        &self,
        ctx: &Ctx,
        eth: &EthernetRepr,
        c: &MacControlRepr,
        out: &mut impl Write,
    ) -> Result<()> {
        match self.format {
            Format::Text => {
                let what = match c {
                    MacControlRepr::Pause { quanta } => format!("PAUSE quanta={quanta}"),
                    MacControlRepr::Pfc(p) => {
                        let mut s = format!("PFC enable=0x{:02x}", p.class_enable);
                        for prio in 0..8u8 {
                            if let Some(q) = p.pause_for(prio) {
                                let _ = write!(s, " p{prio}={q}");
                            }
                        }
                        s
                    }
                    MacControlRepr::Unknown { opcode } => {
                        format!("MAC-CONTROL opcode=0x{opcode:04x}")
                    }
                };
                writeln!(
                    out,
                    "{:>6} {:>11.6} {} > {} {what}",
                    ctx.n, ctx.time, eth.src, eth.dst
                )?;
            }
            Format::Json => {
                let (kind, fields) = match c {
                    MacControlRepr::Pause { quanta } => ("pause", json!({ "quanta": quanta })),
                    MacControlRepr::Pfc(p) => (
                        "pfc",
                        json!({ "class_enable": p.class_enable, "quanta": p.quanta }),
                    ),
                    MacControlRepr::Unknown { opcode } => {
                        ("mac_control", json!({ "opcode": opcode }))
                    }
                };
                let mut o = ctx.json(kind);
                o.insert("src".into(), json!(eth.src.to_string()));
                o.insert("dst".into(), json!(eth.dst.to_string()));
                if let Value::Object(f) = fields {
                    o.extend(f);
                }
                writeln!(out, "{}", Value::Object(o))?;
            }
        }
        Ok(())
    }

    fn emit_drp(
        &self,
        ctx: &Ctx,
        eth: &EthernetRepr,
        d: &DrpRepr,
        payload_len: usize,
        out: &mut impl Write,
    ) -> Result<()> {
        let flags = drp_flags(d.control);
        match self.format {
            Format::Text => writeln!(
                out,
                "{:>6} {:>11.6} {} > {} DRP {flags} status={} tid={} sn={} ackn={} sba=0x{:x} dba=0x{:x} len={} payload={payload_len}",
                ctx.n, ctx.time, eth.src, eth.dst, d.status, d.tid, d.sn, d.ackn, d.sba, d.dba, d.len
            )?,
            Format::Json => {
                let mut o = ctx.json("drp");
                o.insert("src".into(), json!(eth.src.to_string()));
                o.insert("dst".into(), json!(eth.dst.to_string()));
                o.insert("control".into(), json!(flags));
                for (k, v) in [
                    ("status", u64::from(d.status)),
                    ("tid", u64::from(d.tid)),
                    ("sn", u64::from(d.sn)),
                    ("ackn", u64::from(d.ackn)),
                    ("sba", d.sba),
                    ("dba", d.dba),
                    ("len", u64::from(d.len)),
                ] {
                    o.insert(k.into(), json!(v));
                }
                o.insert("payload_len".into(), json!(payload_len));
                writeln!(out, "{}", Value::Object(o))?;
            }
        }
        Ok(())
    }

    fn emit_malformed(
        &self,
        ctx: &Ctx,
        error: &str,
        icrc: Option<IcrcCheck>,
        out: &mut impl Write,
    ) -> Result<()> {
        let icrc_text = icrc.map(verdict);
        match self.format {
            Format::Text => {
                let mut l = format!("{:>6} {:>11.6} MALFORMED {error}", ctx.n, ctx.time);
                if let Some((have, orig)) = ctx.cut {
                    let _ = write!(l, " (capture kept {have} of {orig} bytes)");
                }
                if let Some(v) = icrc_text {
                    let _ = write!(l, " icrc={v}");
                }
                writeln!(out, "{l}")?;
            }
            Format::Json => {
                let mut o = ctx.json("malformed");
                o.insert("error".into(), json!(error));
                if let Some((have, orig)) = ctx.cut {
                    o.insert("captured_len".into(), json!(have));
                    o.insert("orig_len".into(), json!(orig));
                }
                o.insert("icrc".into(), json!(icrc_text));
                writeln!(out, "{}", Value::Object(o))?;
            }
        }
        Ok(())
    }

    fn finish(&self, out: &mut impl Write) -> Result<()> {
        let s = &self.summary;
        match self.format {
            Format::Text => {
                writeln!(
                    out,
                    "packets: {}  rocev2: {}  icrc_ok: {}  icrc_bad: {}  malformed: {}  pfc: {}  pause: {}  drp: {}  other (skipped): {}",
                    s.packets, s.rocev2, s.icrc_ok, s.icrc_bad, s.malformed, s.pfc, s.pause, s.drp, s.other
                )?;
                if let Some(why) = &s.truncated_file {
                    writeln!(out, "capture ends early: {why}")?;
                }
            }
            Format::Json => writeln!(out, "{}", s.to_json())?,
        }
        Ok(())
    }
}

struct Ctx {
    n: u64,
    time: f64,
    ts: f64,
    cut: Option<(usize, u32)>,
}

impl Ctx {
    fn json(&self, kind: &str) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("kind".into(), json!(kind));
        o.insert("n".into(), json!(self.n));
        o.insert("time".into(), json!(self.time));
        o.insert("ts".into(), json!(self.ts));
        o
    }
}

/// The IP packet inside an Ethernet frame, if the frame says it carries one.
fn ethernet_ip_payload(b: &[u8]) -> Option<&[u8]> {
    let f = EthernetFrame::new_checked(b).ok()?;
    matches!(f.ethertype(), EtherType::Ipv4 | EtherType::Ipv6).then(|| &b[f.header_len()..])
}

fn endpoint(ip: std::net::IpAddr, port: u16) -> String {
    match ip {
        std::net::IpAddr::V4(a) => format!("{a}:{port}"),
        std::net::IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

fn verdict(c: IcrcCheck) -> &'static str {
    if c.ok() {
        "ok"
    } else {
        "bad"
    }
}

fn drp_flags(c: u8) -> String {
    let names = [
        (CTRL_CONN_REQ, "CONN_REQ"),
        (CTRL_CONN_ACK, "CONN_ACK"),
        (CTRL_DATA, "DATA"),
        (CTRL_REL_REQ, "REL_REQ"),
        (CTRL_REL_ACK, "REL_ACK"),
    ];
    let mut parts: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| c & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if parts.is_empty() {
        // None of the set-up, data or release bits: an acknowledgement of data (ACKN).
        parts.push("ACK");
    }
    parts.push(if c & CTRL_WRITE != 0 { "WRITE" } else { "READ" });
    parts.push(if c & CTRL_INDIRECT != 0 {
        "INDIRECT"
    } else {
        "DIRECT"
    });
    parts.join("|")
}

fn syndrome_json(s: Syndrome) -> Value {
    match s {
        Syndrome::Ack(c) => json!({"type": "ACK", "credit_code": c.0, "credits": c.credits()}),
        Syndrome::RnrNak(t) => json!({"type": "RNR_NAK", "timer": t.0, "timer_us": t.micros()}),
        Syndrome::Nak(n) => json!({"type": "NAK", "code": n.to_string()}),
        Syndrome::Reserved(b) => json!({"type": "reserved", "byte": b}),
    }
}

/// A QP1 datagram's CM message, decoded field by field (IBTA §12.6; `irn_wire::cm`).
fn cm_mad(ib: &IbRepr, payload: &[u8]) -> Option<irn_wire::cm::CmMad> {
    if ib.bth.opcode != Opcode::UD_SEND_ONLY || ib.bth.dest_qpn != irn_wire::cm::GSI_QPN {
        return None;
    }
    irn_wire::cm::CmMad::parse(payload).ok()
}

/// The MAD header of a QP1 datagram, as text.
fn mad_text(ib: &IbRepr, payload: &[u8]) -> Option<String> {
    if ib.bth.opcode != Opcode::UD_SEND_ONLY || ib.bth.dest_qpn != 1 {
        return None;
    }
    let m = Mad::new_checked(payload).ok()?;
    let class = mad::class_name(m.mgmt_class())
        .map_or_else(|| format!("class=0x{:02x}", m.mgmt_class()), str::to_string);
    let attr = if m.mgmt_class() == mad::CLASS_CM {
        mad::cm_attr_name(m.attr_id()).map(str::to_string)
    } else {
        None
    }
    .unwrap_or_else(|| format!("attr=0x{:04x}", m.attr_id()));
    Some(format!(
        "{class} {attr} method=0x{:02x} tid=0x{:x}",
        m.method(),
        m.tid()
    ))
}

fn ext_text(l: &mut String, ib: &IbRepr, payload: &[u8]) {
    if let Some(h) = ib.irn {
        l.push_str(" IRNETH[");
        let mut parts = Vec::new();
        if let Some(v) = h.wqe_sn {
            parts.push(format!("wqe_sn={v}"));
        }
        if let Some(v) = h.psn_offset {
            parts.push(format!("psn_offset={v}"));
        }
        if let Some(v) = h.ssn {
            parts.push(format!("ssn={v}"));
        }
        if let Some(v) = h.local {
            parts.push(format!("local_va=0x{:x} lkey=0x{:x}", v.va, v.lkey));
        }
        if let Some(v) = h.sack_psn {
            parts.push(format!("sack_psn={v}"));
        }
        if let Some(b) = h.loss_bitmap {
            let lost: Vec<String> = b.iter().map(|i| i.to_string()).collect();
            parts.push(format!("lost=+[{}]", lost.join(",")));
        }
        l.push_str(&parts.join(" "));
        l.push(']');
    }
    if let Some(h) = ib.deth {
        let _ = write!(l, " DETH[qkey=0x{:08x} src_qp=0x{:06x}]", h.qkey, h.src_qpn);
    }
    if let Some(h) = ib.reth {
        let _ = write!(
            l,
            " RETH[va=0x{:x} rkey=0x{:08x} len={}]",
            h.va, h.rkey, h.dma_len
        );
    }
    if let Some(h) = ib.atomic_eth {
        let _ = write!(
            l,
            " AtomicETH[va=0x{:x} rkey=0x{:08x} swap_add=0x{:x} compare=0x{:x}]",
            h.va, h.rkey, h.swap_add, h.compare
        );
    }
    if let Some(h) = ib.aeth {
        let _ = write!(l, " AETH[{} msn={}]", h.syndrome, h.msn);
    }
    if let Some(h) = ib.atomic_ack_eth {
        let _ = write!(l, " AtomicAckETH[orig=0x{:x}]", h.orig);
    }
    if let Some(v) = ib.imm {
        let _ = write!(l, " ImmDt[0x{v:08x}]");
    }
    if let Some(v) = ib.ieth {
        let _ = write!(l, " IETH[rkey=0x{v:08x}]");
    }
    if ib.layout().is_none() {
        l.push_str(" (headers not decoded)");
    }
    if let Some(m) = mad_text(ib, payload) {
        let _ = write!(l, " MAD[{m}]");
    }
    if let Some(cm) = cm_mad(ib, payload) {
        let _ = write!(l, " CM[{}", cm.msg.name());
        for (k, v) in cm.fields() {
            let _ = write!(l, " {k}={v}");
        }
        l.push(']');
    }
}

fn ext_json(ib: &IbRepr, payload: &[u8]) -> Value {
    let mut h = Map::new();
    if let Some(x) = ib.irn {
        h.insert(
            "IRNETH".into(),
            json!({
                "wqe_sn": x.wqe_sn,
                "psn_offset": x.psn_offset,
                "ssn": x.ssn,
                "local": x.local.map(|l| json!({"va": l.va, "lkey": l.lkey})),
                "sack_psn": x.sack_psn.map(|p| p.value()),
                "lost": x.loss_bitmap.map(|b| b.iter().collect::<Vec<_>>()),
            }),
        );
    }
    if let Some(x) = ib.deth {
        h.insert("DETH".into(), json!({"qkey": x.qkey, "src_qpn": x.src_qpn}));
    }
    if let Some(x) = ib.reth {
        h.insert(
            "RETH".into(),
            json!({"va": x.va, "rkey": x.rkey, "dma_len": x.dma_len}),
        );
    }
    if let Some(x) = ib.atomic_eth {
        h.insert(
            "AtomicETH".into(),
            json!({"va": x.va, "rkey": x.rkey, "swap_add": x.swap_add, "compare": x.compare}),
        );
    }
    if let Some(x) = ib.aeth {
        h.insert(
            "AETH".into(),
            json!({"syndrome": syndrome_json(x.syndrome), "syndrome_byte": x.syndrome.to_byte(), "msn": x.msn}),
        );
    }
    if let Some(x) = ib.atomic_ack_eth {
        h.insert("AtomicAckETH".into(), json!({"orig": x.orig}));
    }
    if let Some(v) = ib.imm {
        h.insert("ImmDt".into(), json!(v));
    }
    if let Some(v) = ib.ieth {
        h.insert("IETH".into(), json!({"rkey": v}));
    }
    if let Some(m) = mad_text(ib, payload) {
        h.insert("MAD".into(), json!(m));
    }
    if let Some(cm) = cm_mad(ib, payload) {
        let mut f = Map::new();
        f.insert("message".into(), json!(cm.msg.name()));
        for (k, v) in cm.fields() {
            f.insert(k.into(), json!(v));
        }
        h.insert("CM".into(), Value::Object(f));
    }
    if ib.layout().is_none() {
        h.insert("undecoded".into(), json!(true));
    }
    Value::Object(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/captures")
            .join(name)
    }

    #[test]
    fn a_clean_capture_is_every_packet_rocev2_with_its_icrc_right() {
        let mut out = Vec::new();
        let s = run(&capture("rc_pingpong.pcap"), Format::Text, &[], &mut out).expect("decodes");
        assert!(s.clean(), "{s:?}");
        assert!(s.rocev2 > 0);
        assert_eq!(s.icrc_ok, s.rocev2);
        assert_eq!(
            s.packets,
            s.rocev2 + s.pfc + s.pause + s.drp + s.other + s.malformed
        );
        let text = String::from_utf8(out).expect("utf-8");
        assert!(s.other > 0, "the capture holds frames of other protocols");
        assert_eq!(
            text.lines().count() as u64,
            s.packets - s.other + 1,
            "a line a decoded frame, the others only counted, and the summary"
        );
    }

    /// A reader that went away (`irn decode … | head`) ends the run with the pipe's own error,
    /// which the binary takes as a normal end.
    #[test]
    fn a_closed_output_ends_the_run_as_a_broken_pipe() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let e = run(&capture("rc_pingpong.pcap"), Format::Json, &[], &mut Closed)
            .expect_err("nowhere to write");
        assert_eq!(
            e.io().map(std::io::Error::kind),
            Some(std::io::ErrorKind::BrokenPipe)
        );
    }
}
