//! Wireshark agrees with irn: packets irn-wire emits for every standard opcode decode in tshark
//! with the opcode, QPN, PSN and extension-header values irn wrote.
//!
//! tshark is installed by `scripts/test`, which sets `IRN_REQUIRE_TSHARK=1`; run directly with
//! `cargo test` on a machine without tshark, the test says so and passes vacuously.

mod common;

use std::process::Command;

use common::*;
use irn_wire::{IbRepr, Opcode};

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Opcodes Wireshark 4.0 does not dissect past the BTH: CNP (shown as "Unknown") and IBTA 1.5's
/// ATOMIC_WRITE, which postdates its dissector.
fn tshark_knows_headers(op: Opcode) -> bool {
    op != Opcode::CNP && op != Opcode::RC_ATOMIC_WRITE
}

/// What tshark must show for one packet, field by field.
fn expected(ib: &IbRepr) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("infiniband.bth.opcode", ib.bth.opcode.0.to_string()),
        ("infiniband.bth.destqp", ib.bth.dest_qpn.to_string()),
        ("infiniband.bth.psn", ib.bth.psn.value().to_string()),
        ("infiniband.bth.a", u8::from(ib.bth.ack_req).to_string()),
        ("infiniband.bth.padcnt", ib.pad_len().to_string()),
    ];
    if !tshark_knows_headers(ib.bth.opcode) {
        return v;
    }
    if let Some(r) = ib.reth {
        v.push(("infiniband.reth.va", r.va.to_string()));
        v.push(("infiniband.reth.r_key", r.rkey.to_string()));
        v.push(("infiniband.reth.dmalen", r.dma_len.to_string()));
    }
    if let Some(a) = ib.aeth {
        v.push(("infiniband.aeth.syndrome", a.syndrome.to_byte().to_string()));
        v.push(("infiniband.aeth.msn", a.msn.to_string()));
    }
    if let Some(a) = ib.atomic_eth {
        v.push(("infiniband.atomiceth.swapdt", a.swap_add.to_string()));
        v.push(("infiniband.atomiceth.cmpdt", a.compare.to_string()));
    }
    if let Some(a) = ib.atomic_ack_eth {
        v.push(("infiniband.atomicacketh.origremdt", a.orig.to_string()));
    }
    if let Some(d) = ib.deth {
        v.push(("infiniband.deth.q_key", d.qkey.to_string()));
        v.push(("infiniband.deth.srcqp", d.src_qpn.to_string()));
    }
    if let Some(i) = ib.imm {
        // An FT_BYTES field: tshark prints the 4 bytes in hex.
        v.push(("infiniband.immdt", format!("{i:08x}")));
    }
    if let Some(r) = ib.ieth {
        v.push(("infiniband.ieth", format!("{r:08x}"))); // FT_BYTES too
    }
    v
}

#[test]
fn tshark_decodes_what_irn_emits_for_every_standard_opcode() {
    if !tshark_available() {
        assert!(
            std::env::var_os("IRN_REQUIRE_TSHARK").is_none(),
            "IRN_REQUIRE_TSHARK is set but tshark is not installed"
        );
        precondition_missing(
            "tshark_decodes_what_irn_emits_for_every_standard_opcode",
            "tshark not installed (scripts/test installs it)",
        );
        return;
    }
    let opcodes = standard_opcodes();
    assert!(opcodes.len() >= 25, "{opcodes:?}");
    let samples: Vec<(IbRepr, Vec<u8>)> = opcodes
        .iter()
        .enumerate()
        .map(|(i, op)| sample(*op, i as u32))
        .collect();
    let dir = tempdir();
    let pcap = dir.join("irn-emitted.pcap");
    let frames: Vec<(Vec<u8>, u32)> = samples
        .iter()
        .map(|(_, f)| (f.clone(), f.len() as u32))
        .collect();
    write_pcap(&pcap, &frames);

    let fields: Vec<&str> = {
        let mut f: Vec<&str> = samples
            .iter()
            .flat_map(|(ib, _)| expected(ib).into_iter().map(|(k, _)| k))
            .collect();
        f.sort_unstable();
        f.dedup();
        f
    };
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]);
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), samples.len(), "one line per packet:\n{text}");
    for ((ib, _), row) in samples.iter().zip(&rows) {
        for (field, want) in expected(ib) {
            let col = fields
                .iter()
                .position(|f| *f == field)
                .expect("field listed");
            let got = parse_tshark_number(row.get(col).copied().unwrap_or(""));
            assert_eq!(
                got,
                want,
                "{}: tshark shows {field} = {:?}, irn wrote {want}",
                ib.bth.opcode,
                row.get(col)
            );
        }
    }
    // CNP is among them; tshark knows it only as an unknown opcode, which is expected.
    assert!(samples.iter().any(|(ib, _)| ib.bth.opcode == Opcode::CNP));
}

/// tshark prints booleans as 1/0 or True/False and some integers in hex; normalize to decimal.
fn parse_tshark_number(s: &str) -> String {
    let s = s.trim();
    match s {
        "True" | "true" => "1".into(),
        "False" | "false" => "0".into(),
        _ => match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).map_or(s.to_string(), |v| v.to_string()),
            None => s.to_string(),
        },
    }
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("irn-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
