//! Codec speed: parsing and emitting a full-MTU RoCEv2 frame, an ACK, the ICRC next to a
//! plain CRC-32 over the same bytes (the cost of the masking, as a ratio in one run), and a
//! 4096-byte packet emitted whole against around a payload left in place.
//!
//! `cargo bench -p irn-wire --bench codec`; figures go in `docs/BENCHMARKS.md`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use irn_wire::*;

fn frame(ib: IbRepr, payload: &[u8]) -> Vec<u8> {
    let mut roce = RoceRepr::ipv4(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc000,
        ib,
    );
    if let IpRepr::V4(ip) = &mut roce.ip {
        ip.dscp = 26;
    }
    let eth = EthernetRepr {
        src: MacAddr([2, 0, 0, 0, 0, 1]),
        dst: MacAddr([2, 0, 0, 0, 0, 2]),
        vlan: None,
        ethertype: EtherType::Ipv4,
    };
    let mut buf = vec![0u8; 14 + roce.buffer_len()];
    roce.emit_frame(&eth, &mut buf, payload).expect("valid");
    buf
}

fn bth(opcode: Opcode) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        tver: TVER_STANDARD,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: 0x11,
        ack_req: false,
        psn: Psn::new(1000),
    }
}

fn benches(c: &mut Criterion) {
    let payload = vec![0x5au8; 1024];
    let mut write = IbRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST));
    write.reth = Some(RethRepr {
        va: 0x1000,
        rkey: 7,
        dma_len: 1 << 20,
    });
    write.payload_len = payload.len();
    let write_frame = frame(write, &payload);

    let mut ack = IbRepr::new(bth(Opcode::RC_ACKNOWLEDGE));
    ack.aeth = Some(AethRepr {
        syndrome: Syndrome::Ack(CreditCode::INVALID),
        msn: 1,
    });
    let ack_frame = frame(ack, &[]);

    let mut g = c.benchmark_group("frame");
    g.throughput(Throughput::Bytes(write_frame.len() as u64));
    g.bench_function("parse_write_1024", |b| {
        b.iter(|| Frame::parse_ethernet(black_box(&write_frame)).expect("ok"))
    });
    let mut out = vec![0u8; write_frame.len()];
    let parsed = match Frame::parse_ethernet(&write_frame) {
        Ok(Frame::RoceV2 {
            eth: Some(e),
            packet,
        }) => (e, packet.repr),
        other => panic!("{other:?}"),
    };
    g.bench_function("emit_write_1024", |b| {
        b.iter(|| {
            parsed
                .1
                .emit_frame(black_box(&parsed.0), &mut out, black_box(&payload))
                .expect("ok")
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse_ack", |b| {
        b.iter(|| Frame::parse_ethernet(black_box(&ack_frame)).expect("ok"))
    });
    g.finish();

    let ip = &write_frame[14..];
    let mut g = c.benchmark_group("crc_1024");
    g.throughput(Throughput::Bytes(ip.len() as u64));
    g.bench_function("icrc", |b| {
        b.iter(|| icrc::check_ip_packet(black_box(ip)).expect("ok"))
    });
    g.bench_function("plain_crc32", |b| b.iter(|| crc32fast::hash(black_box(ip))));
    g.finish();

    // A full 4096-byte packet as the UDP runtime sends it: emitted whole (the payload copied
    // behind the headers, then the ICRC), or around the payload left where it lies (headers and
    // trailer only; the ICRC reads the payload in place) — the copy a zero-copy sender saves.
    let big = vec![0x5au8; 4096];
    let mut w = IbRepr::new(bth(Opcode::RC_RDMA_WRITE_MIDDLE));
    w.payload_len = big.len();
    let roce = RoceRepr::ipv4(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc000,
        w,
    );
    let mut whole = vec![0u8; roce.buffer_len()];
    let mut head = vec![0u8; 128];
    let mut g = c.benchmark_group("emit_4096");
    g.throughput(Throughput::Bytes(roce.buffer_len() as u64));
    g.bench_function("emit_whole", |b| {
        b.iter(|| roce.emit(&mut whole, black_box(&big)).expect("ok"))
    });
    g.bench_function("emit_gather", |b| {
        b.iter(|| {
            roce.emit_gather(&mut head, &[black_box(&big[..])])
                .expect("ok")
        })
    });
    g.finish();
}

criterion_group!(codec, benches);
criterion_main!(codec);
