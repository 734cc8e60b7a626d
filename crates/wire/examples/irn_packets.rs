//! Prints example IRN packets (BTH onward, ICRC excluded) as hex, with their decoded form: the
//! byte dumps in `docs/WIRE.md` come from here. Run: `cargo run -p irn-wire --example irn_packets`.

use irn_wire::*;

fn bth(opcode: Opcode, psn: u32, ack_req: bool) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        tver: TVER_IRN,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: 0x000123,
        ack_req,
        psn: Psn::new(psn),
    }
}

fn show(title: &str, ib: IbRepr) {
    let mut buf = vec![0u8; ib.header_len()];
    ib.emit_header(&mut buf).expect("valid IRN packet");
    println!(
        "{title} ({} header bytes, payload {}):",
        buf.len(),
        ib.payload_len
    );
    for chunk in buf.chunks(4) {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        println!("    {}", hex.join(" "));
    }
    println!();
}

fn main() {
    // Middle packet (PSN offset 1) of a 3 KB Write: IRNETH with the offset, then the message's RETH.
    let mut w = IbRepr::new(bth(Opcode::RC_RDMA_WRITE_MIDDLE, 0x000101, false));
    w.irn = Some(IrnEthRepr {
        psn_offset: Some(1),
        ..Default::default()
    });
    w.reth = Some(RethRepr {
        va: 0x7f00_0000_0000,
        rkey: 0x0000_1234,
        dma_len: 3072,
    });
    w.payload_len = 1024;
    show("RC_RDMA_WRITE_MIDDLE, IRN", w);

    // Last packet of a 2-packet Send consuming the 5th receive WQE (recv_WQE_SN 4).
    let mut s = IbRepr::new(bth(Opcode::RC_SEND_LAST, 0x000201, true));
    s.irn = Some(IrnEthRepr {
        wqe_sn: Some(4),
        psn_offset: Some(1),
        ..Default::default()
    });
    s.payload_len = 100;
    show("RC_SEND_LAST, IRN", s);

    // A Read request occupying read-WQE slot 7.
    let mut r = IbRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST, 0x000300, true));
    r.irn = Some(IrnEthRepr {
        wqe_sn: Some(7),
        ..Default::default()
    });
    r.reth = Some(RethRepr {
        va: 0x7f00_0000_8000,
        rkey: 0x0000_5678,
        dma_len: 4096,
    });
    show("RC_RDMA_READ_REQUEST, IRN", r);

    // NACK: expected PSN 0x000100, triggered by the arrival of 0x000103.
    let mut n = IbRepr::new(bth(Opcode::RC_ACKNOWLEDGE, 0x000100, false));
    n.irn = Some(IrnEthRepr {
        sack_psn: Some(Psn::new(0x000103)),
        ..Default::default()
    });
    n.aeth = Some(AethRepr {
        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        msn: 9,
    });
    show("RC_ACKNOWLEDGE as IRN NACK", n);

    // Read NACK from the requester: expected rPSN 0x000400, response 0x000402 arrived.
    let mut rn = IbRepr::new(bth(Opcode::RC_IRN_READ_ACK, 0x000400, false));
    rn.irn = Some(IrnEthRepr {
        sack_psn: Some(Psn::new(0x000402)),
        ..Default::default()
    });
    rn.aeth = Some(AethRepr {
        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        msn: 0,
    });
    show("RC_IRN_READ_ACK as read NACK", rn);

    // T8(d): a NACK naming exactly the lost PSNs 0x000100 and 0x000101.
    let mut lost = LossBitmap::with_words(1).expect("one word");
    lost.set(0);
    lost.set(1);
    let mut b = IbRepr::new(bth(Opcode::RC_ACKNOWLEDGE, 0x000100, false));
    b.irn = Some(IrnEthRepr {
        sack_psn: Some(Psn::new(0x000104)),
        loss_bitmap: Some(lost),
        ..Default::default()
    });
    b.aeth = Some(AethRepr {
        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        msn: 9,
    });
    show("RC_ACKNOWLEDGE as bitmap NACK (T8(d))", b);
}
