//! How fast the core moves packets: a 4 MB RDMA Write between two queue pairs through the
//! in-memory `Pair` (clean link, and 1 % loss), RoCE go-back-N against IRN in the same run.
//! The `Pair` carries real bytes (byte memory, payloads copied per packet), so this is the cost
//! of the core plus the harness, an upper bound on what the core itself costs per packet.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use irn_transport::pair::{LinkConfig, Pair, PairConfig};
use irn_transport::{Access, RecoveryConfig, Remote, SendOp, SendWr, Sge};

const LEN: usize = 4 << 20;

fn write_4mb(rec: RecoveryConfig, loss: f64) -> u64 {
    let link = LinkConfig {
        loss,
        ..LinkConfig::default()
    };
    let mut cfg = PairConfig::new(rec, link, 1);
    cfg.qp.retry_limit = Some(1000);
    let mut p = Pair::new(cfg);
    let src = p.mem_a.alloc(LEN);
    let k = p
        .mem_a
        .register(src, LEN as u64, Access::LOCAL_WRITE)
        .expect("reg");
    let dst = p.mem_b.alloc(LEN);
    let dk = p.mem_b.register(dst, LEN as u64, Access::ALL).expect("reg");
    p.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write(Remote {
            addr: dst,
            rkey: dk.rkey,
        }),
        sg_list: irn_transport::sgl![Sge {
            addr: src,
            len: LEN as u32,
            lkey: k.lkey,
        }],
        signaled: true,
        fence: false,
        solicited: false,
    })
    .expect("post");
    p.drive();
    assert_eq!(p.done_a.len(), 1);
    p.packets_sent
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_4mb_pair");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(LEN as u64));
    for (name, rec) in [
        ("roce", RecoveryConfig::roce()),
        ("irn", RecoveryConfig::irn()),
    ] {
        for loss in [0.0, 0.01] {
            g.bench_function(format!("{name}_loss{loss}"), |b| {
                b.iter(|| write_4mb(rec, loss))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
