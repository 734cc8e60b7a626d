//! Unreliable-datagram queue pairs under hostile input: any datagram a network can deliver —
//! any opcode, Q_Key, payload length, with receive buffers of any size — never panics, never
//! completes more receives than were posted, and never writes outside a receive buffer.

use irn_transport::{
    Access, ByteMemory, Key, Memory, QpState, RecvWr, Sge, UdAttr, UdQueuePair, WcStatus, GRH_LEN,
};
use irn_wire::{BthRepr, DethRepr, IbRepr, Opcode, Psn, DEFAULT_PKEY, TVER_STANDARD};
use proptest::prelude::*;

const QKEY: u32 = 0x1111_1111;

fn datagram(opcode: u8, qkey: u32, deth: bool, imm: Option<u32>, len: usize) -> IbRepr {
    let mut ib = IbRepr::new(BthRepr {
        opcode: Opcode(opcode),
        solicited: false,
        mig_req: false,
        tver: TVER_STANDARD,
        pkey: DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qpn: 0x22,
        ack_req: false,
        psn: Psn::new(0),
    });
    if deth {
        ib.deth = Some(DethRepr {
            qkey,
            src_qpn: 0x33,
        });
    }
    ib.imm = imm;
    ib.payload_len = len;
    ib
}

proptest! {
    #[test]
    fn any_datagram_is_placed_in_bounds_or_dropped(
        bufs in proptest::collection::vec(0u32..1200, 0..6),
        packets in proptest::collection::vec(
            (
                prop_oneof![Just(0x64u8), Just(0x65u8), any::<u8>()],
                prop_oneof![Just(QKEY), any::<u32>()],
                any::<bool>(),
                proptest::option::of(any::<u32>()),
                0usize..1100,
            ),
            0..12,
        ),
    ) {
        let mut mem = ByteMemory::new(7);
        // Each receive buffer sits between two guard regions that must never change.
        let mut q = UdQueuePair::new(0x22, 8, 8);
        let attr = UdAttr { pkey: DEFAULT_PKEY, qkey: QKEY, pmtu: 1024, sq_psn: 0 };
        for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
            q.modify(s, &attr).expect("transition");
        }
        let mut guards = Vec::new();
        for (i, &len) in bufs.iter().enumerate() {
            let g0 = mem.alloc_with(&[0xa5; 64]);
            let b = mem.alloc(len as usize);
            let g1 = mem.alloc_with(&[0xa5; 64]);
            let k = mem.register(b, u64::from(len), Access::ALL).expect("reg");
            let kg0 = mem.register(g0, 64, Access::ALL).expect("reg");
            let kg1 = mem.register(g1, 64, Access::ALL).expect("reg");
            guards.push((kg0.lkey, g0));
            guards.push((kg1.lkey, g1));
            q.post_recv(RecvWr {
                wr_id: i as u64,
                sg_list: irn_transport::sgl![Sge { addr: b, len, lkey: k.lkey }],
            }).expect("recv");
        }
        let grh = [0x6eu8; GRH_LEN];
        for &(op, qkey, deth, imm, len) in &packets {
            let ib = datagram(op, qkey, deth, imm, len);
            q.handle_packet(&ib, &vec![0x5a; len], &grh, &mut mem);
        }
        let mut recvs = 0;
        while let Some(wc) = q.poll_completion() {
            recvs += 1;
            prop_assert!(wc.wr_id < bufs.len() as u64);
            let cap = bufs[wc.wr_id as usize];
            if wc.status == WcStatus::Success {
                prop_assert!(wc.byte_len <= cap && wc.byte_len >= GRH_LEN as u32);
                prop_assert_eq!(wc.src_qp, Some(0x33));
            } else {
                prop_assert_eq!(wc.status, WcStatus::LocLenErr);
            }
        }
        prop_assert!(recvs <= bufs.len());
        let c = q.counters();
        prop_assert_eq!(
            c.rx_packets + c.rx_no_recv + c.rx_bad_qkey + c.rx_dropped,
            packets.len() as u64
        );
        for (lkey, g) in guards {
            let mut v = [0u8; 64];
            mem.read(Key::Local(lkey), g, &mut v).expect("read");
            prop_assert_eq!(v, [0xa5; 64]);
        }
        prop_assert_eq!(q.state(), QpState::Rts);
    }
}
