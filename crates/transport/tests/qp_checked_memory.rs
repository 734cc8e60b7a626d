//! The simulator's way of running the core: memory that checks keys and bounds but holds no
//! bytes, and packets whose payload is a length only.

use irn_transport::pair::connect;
use irn_transport::{
    Access, CheckedMemory, QpAttr, QpConfig, QueuePair, RecoveryConfig, RecvWr, Remote, SendOp,
    SendWr, Sge, Time, WcOpcode, WcStatus,
};
use irn_wire::Psn;

#[test]
fn every_operation_runs_without_payload_bytes() {
    for rec in [RecoveryConfig::roce(), RecoveryConfig::irn()] {
        let t = Time::ZERO;
        let cfg = QpConfig {
            recovery: rec,
            ..QpConfig::default()
        };
        let mut a = QueuePair::new(
            t,
            QpConfig {
                qpn: 1,
                ..cfg.clone()
            },
        )
        .expect("a valid queue-pair configuration");
        let mut b = QueuePair::new(t, QpConfig { qpn: 2, ..cfg })
            .expect("a valid queue-pair configuration");
        connect(&mut a, &QpAttr::default(), 2, Psn::new(10), Psn::new(20));
        connect(&mut b, &QpAttr::default(), 1, Psn::new(20), Psn::new(10));
        let mut ma = CheckedMemory::new(1);
        let mut mb = CheckedMemory::new(2);
        let la = ma.alloc(1 << 20);
        let ka = ma.register(la, 1 << 20, Access::LOCAL_WRITE).expect("reg");
        let rb = mb.alloc(1 << 20);
        let kb = mb.register(rb, 1 << 20, Access::ALL).expect("reg");
        let remote = Remote {
            addr: rb,
            rkey: kb.rkey,
        };
        let local = |len: u32| {
            irn_transport::sgl![Sge {
                addr: la,
                len,
                lkey: ka.lkey,
            }]
        };
        let ops = [
            (SendOp::Write(remote), 300_000),
            (SendOp::Read(remote), 200_000),
            (SendOp::Send, 5_000),
            (SendOp::WriteWithImm(remote, 7), 10),
            (SendOp::FetchAdd { remote, add: 1 }, 8),
        ];
        for _ in 0..2 {
            b.post_recv(RecvWr {
                wr_id: 50,
                sg_list: irn_transport::sgl![Sge {
                    addr: rb,
                    len: 1 << 20,
                    lkey: kb.lkey,
                }],
            })
            .expect("post recv");
        }
        for (i, (op, len)) in ops.iter().enumerate() {
            a.post_send(SendWr {
                wr_id: i as u64,
                op: *op,
                sg_list: local(*len),
                signaled: true,
                fence: false,
                solicited: false,
            })
            .expect("post");
        }
        // Lossless, zero-delay exchange: no payload bytes ever.
        let mut buf = Vec::new();
        let mut moved = 0;
        loop {
            let mut any = false;
            while let Some(tx) = a.poll_transmit(t, &ma, &mut buf) {
                assert!(buf.is_empty(), "checked memory produced payload bytes");
                b.handle_packet(t, &tx.ib, &[], tx.ecn, &mut mb);
                any = true;
                moved += tx.ib.payload_len;
            }
            while let Some(tx) = b.poll_transmit(t, &mb, &mut buf) {
                a.handle_packet(t, &tx.ib, &[], tx.ecn, &mut ma);
                any = true;
                moved += tx.ib.payload_len;
            }
            if !any {
                break;
            }
        }
        let done: Vec<_> = std::iter::from_fn(|| a.poll_completion()).collect();
        assert_eq!(done.len(), ops.len(), "{rec:?}");
        assert!(
            done.iter().all(|c| c.status == WcStatus::Success),
            "{done:?}"
        );
        let recv: Vec<_> = std::iter::from_fn(|| b.poll_completion()).collect();
        assert_eq!(
            recv.iter()
                .map(|c| (c.opcode, c.byte_len))
                .collect::<Vec<_>>(),
            vec![(WcOpcode::Recv, 5_000), (WcOpcode::RecvRdmaWithImm, 10)]
        );
        assert_eq!(moved, 300_000 + 200_000 + 5_000 + 10);
        assert!(a.counters().dropped_invalid + b.counters().dropped_invalid == 0);
    }
}
