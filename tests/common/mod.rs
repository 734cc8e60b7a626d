//! Packet and capture builders shared by the CLI tests.
#![allow(dead_code)]

pub mod netns;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use irn_wire::*;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

pub fn bth(opcode: Opcode, qpn: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        tver: TVER_STANDARD,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: qpn,
        ack_req: opcode.is_last(),
        psn: Psn::new(psn),
    }
}

pub fn eth() -> EthernetRepr {
    EthernetRepr {
        src: MacAddr([0x52, 0x54, 0, 0x99, 0, 0x0c]),
        dst: MacAddr([0x52, 0x54, 0, 0x99, 0, 0x0b]),
        vlan: None,
        ethertype: EtherType::Ipv4,
    }
}

/// A whole Ethernet frame carrying `ib` with `payload`.
pub fn frame(ib: IbRepr, payload: &[u8]) -> Vec<u8> {
    let roce = RoceRepr::ipv4(
        Ipv4Addr::new(10, 99, 0, 12),
        Ipv4Addr::new(10, 99, 0, 11),
        0xc123,
        ib,
    );
    let e = eth();
    let mut buf = vec![0u8; e.buffer_len() + roce.buffer_len()];
    roce.emit_frame(&e, &mut buf, payload)
        .expect("valid packet");
    buf
}

/// A packet of `opcode` with distinctive header values and the payload its layout allows.
/// Returns the representation and the frame.
pub fn sample(opcode: Opcode, i: u32) -> (IbRepr, Vec<u8>) {
    let mut ib = IbRepr::new(bth(opcode, 0x10_0000 + i, 0x00_abc0 + i));
    let layout = opcode.layout(0).expect("standard opcode");
    let h = layout.headers;
    if h.contains(Headers::DETH) {
        ib.deth = Some(DethRepr {
            qkey: 0x1111_0000 + i,
            src_qpn: 0x2000 + i,
        });
    }
    if h.contains(Headers::RETH) {
        ib.reth = Some(RethRepr {
            va: 0x7f00_0000_1000 + u64::from(i) * 0x100,
            rkey: 0x0bad_0000 + i,
            dma_len: 1000 + i,
        });
    }
    if h.contains(Headers::ATOMIC_ETH) {
        ib.atomic_eth = Some(AtomicEthRepr {
            va: 0x7f00_0000_2000 + u64::from(i) * 8,
            rkey: 0x0a70_0000 + i,
            swap_add: 0x1122_3344_5566_7788,
            compare: 0x0102_0304_0506_0708 + u64::from(i),
        });
    }
    if h.contains(Headers::AETH) {
        ib.aeth = Some(AethRepr {
            syndrome: Syndrome::Ack(CreditCode::INVALID),
            msn: 0x300 + i,
        });
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        ib.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig: 0xdead_beef_0000_0000 + u64::from(i),
        });
    }
    if h.contains(Headers::IMMDT) {
        ib.imm = Some(0x1234_0000 + i);
    }
    if h.contains(Headers::IETH) {
        ib.ieth = Some(0x0e7e_0000 + i);
    }
    let payload: Vec<u8> = match layout.payload {
        PayloadRule::Empty => Vec::new(),
        PayloadRule::Exactly(n) => vec![0; n],
        PayloadRule::Any => (0..64 + i).map(|b| b as u8).collect(),
    };
    ib.payload_len = payload.len();
    let f = frame(ib, &payload);
    (ib, f)
}

/// Every opcode whose standard layout the codec knows: all of RC (less IRN's read ACK), UD's two
/// Sends, and CNP.
pub fn standard_opcodes() -> Vec<Opcode> {
    (0..=255u8)
        .map(Opcode)
        .filter(|o| {
            o.layout(0).is_some()
                && matches!(
                    o.transport(),
                    Transport::Rc | Transport::Ud | Transport::Cnp
                )
        })
        .collect()
}

/// Writes an Ethernet pcap of `frames`; a record may declare a longer original length.
pub fn write_pcap(path: &Path, frames: &[(Vec<u8>, u32)]) {
    let file = std::fs::File::create(path).expect("create pcap");
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(file, header).expect("pcap header");
    for (i, (data, orig_len)) in frames.iter().enumerate() {
        let ts = Duration::from_micros(1_700_000_000_000_000 + 10 * i as u64);
        w.write_packet(&PcapPacket::new(ts, *orig_len, data))
            .expect("write record");
    }
}

pub fn irn_bin() -> &'static str {
    env!("CARGO_BIN_EXE_irn")
}

/// Waits for a child process, killing it (and failing the test with its output) after `secs`.
pub fn finish(mut c: std::process::Child, secs: u64) -> std::process::Output {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return c.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let out = c.wait_with_output().expect("output");
    panic!(
        "still running after {secs} s: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The average bandwidth `irn perf` printed (perftest's "BW average" column, MB/s).
pub fn bw_average(o: &std::process::Output) -> f64 {
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines().skip_while(|l| !l.contains("BW average"));
    lines
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no bandwidth line in:\n{}", text(o)))
}

/// The number after `key: ` in a tool's printed counters (`--counters`; 0 when it printed
/// none: a run that gave up).
pub fn counter(o: &std::process::Output, key: &str) -> u64 {
    let out = String::from_utf8_lossy(&o.stdout);
    out.split(&format!("{key}: "))
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A process's stdout and stderr, for failure messages.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[path = "../../crates/verbs/tests/common/skip.rs"]
mod skip;
pub use skip::precondition_missing;

/// An `irn sim --json` file without its `wall_s` fields (wall times differ between any two
/// runs of the same experiment), as indented JSON text.
pub fn without_wall_times(path: &Path) -> String {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("wall_s");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
    strip(&mut doc);
    serde_json::to_string_pretty(&doc).expect("serializes")
}
