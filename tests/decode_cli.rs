//! `irn decode` end to end: the golden capture, and a capture full of damage.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use irn_wire::drp::{CTRL_CONN_REQ, CTRL_WRITE};
use irn_wire::{
    DrpRepr, EtherType, EthernetRepr, IrnEthRepr, MacAddr, MacControlRepr, Opcode, PfcRepr,
    RethRepr, TVER_IRN,
};
use serde_json::Value;

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/captures/rxe-golden.pcap")
}

fn decode(args: &[&str], file: &Path) -> Output {
    Command::new(irn_bin())
        .arg("decode")
        .args(args)
        .arg(file)
        .output()
        .expect("run irn")
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn golden_capture_json_has_no_icrc_errors() {
    let out = decode(&["--json"], &golden());
    assert!(out.status.success());
    let lines = json_lines(&out);
    let summary = lines.last().expect("summary");
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["packets"], 730);
    assert_eq!(summary["rocev2"], 533);
    assert_eq!(summary["icrc_ok"], 533);
    assert_eq!(summary["icrc_bad"], 0);
    assert_eq!(summary["malformed"], 0);
    assert_eq!(
        lines.len(),
        533 + 1,
        "one object per RoCEv2 packet, then the summary"
    );
    for l in &lines[..lines.len() - 1] {
        assert_eq!(l["kind"], "rocev2");
        assert_eq!(l["icrc"], "ok");
        for key in [
            "time",
            "src",
            "dst",
            "opcode",
            "qpn",
            "psn",
            "ack_req",
            "headers",
            "payload_len",
        ] {
            assert!(l.get(key).is_some(), "missing {key}: {l}");
        }
    }
    // Spot checks against what the capture is known to hold.
    let first = &lines[0];
    assert_eq!(first["opcode"], "RC_SEND_ONLY");
    assert_eq!(first["qpn"], 0x11);
    assert_eq!(first["psn"], 0xb0b212);
    assert_eq!(first["payload_len"], 64);
    assert!(lines
        .iter()
        .any(|l| l["headers"]["RETH"]["dma_len"] == 4096));
    assert!(lines.iter().any(|l| l["headers"]["MAD"]
        .as_str()
        .is_some_and(|m| m.contains("CM REQ"))));
    // The CM exchange (rping's), every field: the REQ's rdma_cm header names both ends.
    let req = lines
        .iter()
        .find(|l| l["headers"]["CM"]["message"] == "REQ")
        .expect("a REQ");
    assert_eq!(req["headers"]["CM"]["service_id"], "0x1061c06");
    assert_eq!(req["headers"]["CM"]["primary_remote_gid"], "10.99.0.11");
    assert_eq!(req["headers"]["CM"]["cma_src"], "10.99.0.12:41162");
    let names: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["headers"]["CM"]["message"].as_str())
        .collect();
    assert_eq!(names, ["REQ", "REP", "RTU", "DREQ", "DREP"]);
}

#[test]
fn golden_capture_text_lines_and_strict_exit() {
    let out = decode(&["--strict"], &golden());
    assert!(out.status.success(), "clean capture passes --strict");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 534);
    assert!(lines[..533].iter().all(|l| l.ends_with("icrc=ok")));
    assert!(lines[533]
        .starts_with("packets: 730  rocev2: 533  icrc_ok: 533  icrc_bad: 0  malformed: 0"));
}

/// A capture with one of everything that can go wrong, and the frame kinds besides RoCEv2.
fn damaged_capture(dir: &Path) -> PathBuf {
    let (_, good) = sample(Opcode::RC_RDMA_WRITE_FIRST, 1);
    let mut bad_icrc = good.clone();
    let last = bad_icrc.len() - 10;
    bad_icrc[last] ^= 0x40; // payload bit: ICRC mismatch
    let cut = good[..40].to_vec(); // record cut inside the BTH by the capture's snap length
    let mut short_reth = good.clone();
    short_reth.truncate(14 + 20 + 8 + 12 + 8); // IP and UDP lengths claim more than is there
    let mut bad_ip_csum = good.clone();
    bad_ip_csum[14 + 10] ^= 0xff;
    let mut bad_ip_csum_too = bad_ip_csum.clone();
    bad_ip_csum_too[20] ^= 1;
    let garbage = vec![0xab; 5];
    let mut arp = vec![0u8; 42];
    EthernetRepr {
        ethertype: EtherType::Arp,
        ..eth()
    }
    .emit(&mut arp)
    .expect("fits");
    let mut pfc = vec![0u8; 60];
    MacControlRepr::Pfc(PfcRepr::single(3, 0xffff))
        .emit_frame(MacAddr([2, 0, 0, 0, 0, 1]), &mut pfc)
        .expect("fits");
    let mut pause = vec![0u8; 60];
    MacControlRepr::Pause { quanta: 100 }
        .emit_frame(MacAddr([2, 0, 0, 0, 0, 1]), &mut pause)
        .expect("fits");
    let mut drp = vec![0u8; 14 + 36 + 10];
    EthernetRepr {
        ethertype: EtherType::Drp,
        ..eth()
    }
    .emit(&mut drp)
    .expect("fits");
    DrpRepr {
        control: CTRL_CONN_REQ | CTRL_WRITE,
        tid: 7,
        len: 131072,
        ..Default::default()
    }
    .emit(&mut drp[14..])
    .expect("fits");
    let mut irn = irn_wire::IbRepr::new(bth(Opcode::RC_RDMA_WRITE_MIDDLE, 0x42, 100));
    irn.bth.tver = TVER_IRN;
    irn.irn = Some(IrnEthRepr {
        psn_offset: Some(1),
        ..Default::default()
    });
    irn.reth = Some(RethRepr {
        va: 0x1000,
        rkey: 0x99,
        dma_len: 2048,
    });
    irn.payload_len = 1024;
    let irn_frame = frame(irn, &[5u8; 1024]);

    let path = dir.join("damaged.pcap");
    let full = |f: &Vec<u8>| (f.clone(), f.len() as u32);
    write_pcap(
        &path,
        &[
            full(&good),
            full(&bad_icrc),
            (cut, good.len() as u32),
            full(&short_reth),
            full(&bad_ip_csum),
            full(&garbage),
            full(&arp),
            full(&pfc),
            full(&pause),
            full(&drp),
            full(&irn_frame),
            full(&good),
        ],
    );
    path
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irn-decode-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn damaged_frames_are_reported_counted_and_decoding_goes_on() {
    let dir = tempdir("damaged");
    let path = damaged_capture(&dir);
    let out = decode(&["--json"], &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let s = lines.last().expect("summary");
    assert_eq!(s["packets"], 12);
    assert_eq!(
        s["rocev2"], 7,
        "good, bad ICRC, cut, short, bad IP checksum, IRN, good"
    );
    assert_eq!(
        s["malformed"], 4,
        "cut, short, bad IP checksum, 5-byte garbage"
    );
    assert_eq!(s["icrc_bad"], 1);
    assert_eq!(s["pfc"], 1);
    assert_eq!(s["pause"], 1);
    assert_eq!(s["drp"], 1);
    assert_eq!(s["other"], 1, "the ARP frame");
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "rocev2",
            "rocev2",
            "malformed",
            "malformed",
            "malformed",
            "malformed",
            "pfc",
            "pause",
            "drp",
            "rocev2",
            "rocev2",
            "summary"
        ]
    );
    assert_eq!(lines[1]["icrc"], "bad");
    assert!(lines[2]["error"]
        .as_str()
        .is_some_and(|e| e.contains("truncated")));
    // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + payload 65 + pad 3 + ICRC 4.
    assert_eq!(lines[2]["captured_len"], 40);
    assert_eq!(lines[2]["orig_len"], 142);
    assert!(lines[4]["error"]
        .as_str()
        .is_some_and(|e| e.contains("IPv4 checksum")));
    // The IP checksum does not enter the ICRC: it still checks.
    assert_eq!(lines[4]["icrc"], "ok");
    assert_eq!(lines[6]["quanta"][3], 0xffff);
    assert_eq!(lines[8]["control"], "CONN_REQ|WRITE|DIRECT");
    assert_eq!(lines[9]["tver"], 1);
    assert_eq!(lines[9]["headers"]["IRNETH"]["psn_offset"], 1);
    assert_eq!(lines[9]["headers"]["RETH"]["rkey"], 0x99);

    let strict = decode(&["--strict"], &path);
    assert_eq!(strict.status.code(), Some(1), "--strict fails on damage");
    let text = String::from_utf8_lossy(&strict.stdout);
    assert!(text.contains("MALFORMED truncated"));
    assert!(text.contains("PFC enable=0x08 p3=65535"));
    assert!(text.contains("IRNETH[psn_offset=1]"));
}

#[test]
fn capture_ending_mid_record_reports_what_was_read() {
    let dir = tempdir("cut");
    let path = damaged_capture(&dir);
    let bytes = std::fs::read(&path).expect("read");
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).expect("write");
    let out = decode(&["--json"], &cut);
    assert!(out.status.success());
    let lines = json_lines(&out);
    let s = lines.last().expect("summary");
    assert_eq!(s["packets"], 11);
    assert!(s["truncated_file"].is_string());
    assert_eq!(decode(&["--strict"], &cut).status.code(), Some(1));
}

#[test]
fn unreadable_input_is_a_clear_error() {
    let out = decode(&[], Path::new("/nonexistent/x.pcap"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/x.pcap"), "{err}");

    let dir = tempdir("notpcap");
    let p = dir.join("notes.txt");
    std::fs::write(&p, "this is not a capture at all").expect("write");
    let out = decode(&[], &p);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pcap"));
}

#[test]
fn extended_ib_bitmap_nak_decodes_with_its_lost_psns() {
    // SPEC T8(d): TVer 2, IRNETH with the highest PSN received and the loss bitmap.
    let mut nak = irn_wire::IbRepr::new(bth(Opcode::RC_ACKNOWLEDGE, 0x11, 0x1f4));
    nak.bth.tver = irn_wire::TVER_EXT_IB;
    nak.irn = Some(IrnEthRepr {
        sack_psn: Some(irn_wire::Psn::new(0x205)),
        loss_bitmap: irn_wire::LossBitmap::from_words(&[0x0003]),
        ..Default::default()
    });
    nak.aeth = Some(irn_wire::AethRepr {
        syndrome: irn_wire::Syndrome::Nak(irn_wire::NakCode::PsnSequenceError),
        msn: 0,
    });
    let dir = tempdir("extib");
    let path = dir.join("ext-ib.pcap");
    let f = frame(nak, &[]);
    write_pcap(&path, &[(f.clone(), f.len() as u32)]);
    let lines = json_lines(&decode(&["--json"], &path));
    assert_eq!(lines[0]["tver"], 2);
    assert_eq!(lines[0]["icrc"], "ok");
    assert_eq!(lines[0]["headers"]["IRNETH"]["sack_psn"], 0x205);
    let text = String::from_utf8_lossy(&decode(&[], &path).stdout).into_owned();
    assert!(
        text.contains("tver=2") && text.contains("sack_psn=") && text.contains("lost=+[0,1]"),
        "{text}"
    );
}

#[test]
fn another_udp_port_decodes_as_rocev2_when_given() {
    // Two irn devices on one address: one holds 4791, the other fell back to another port,
    // and the packets to that one go to its port. Without --udp-port they are other UDP;
    // with it, RoCEv2 with a good ICRC (the port is not among the ICRC's masked fields, so a
    // wrong port would show as a bad ICRC).
    let send = |psn| {
        let mut ib = irn_wire::IbRepr::new(bth(Opcode::RC_SEND_ONLY, 0x12, psn));
        ib.payload_len = 4;
        ib
    };
    let mut roce = irn_wire::RoceRepr::ipv4(
        std::net::Ipv4Addr::new(10, 99, 0, 12),
        std::net::Ipv4Addr::new(10, 99, 0, 11),
        0xc123,
        send(7),
    );
    roce.udp.dst_port = 50123;
    let e = eth();
    let mut f = vec![0u8; e.buffer_len() + roce.buffer_len()];
    roce.emit_frame(&e, &mut f, b"abcd").expect("valid packet");
    let std_port = frame(send(8), b"abcd");
    let dir = tempdir("udpport");
    let path = dir.join("fallback.pcap");
    write_pcap(
        &path,
        &[
            (f.clone(), f.len() as u32),
            (std_port.clone(), std_port.len() as u32),
        ],
    );
    let summary = |out: &Output| json_lines(out).last().cloned().expect("a summary");
    let plain = summary(&decode(&["--json"], &path));
    assert_eq!(
        (plain["rocev2"].clone(), plain["other"].clone()),
        (1.into(), 1.into())
    );
    let out = decode(&["--json", "--udp-port", "50123", "--strict"], &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    assert_eq!(lines[0]["dport"], 50123);
    assert_eq!(lines[0]["icrc"], "ok");
    assert_eq!(lines[0]["psn"], 7);
    let s = summary(&out);
    assert_eq!(
        (s["rocev2"].clone(), s["other"].clone()),
        (2.into(), 0.into())
    );
    assert_eq!(s["icrc_ok"], 2);
}
