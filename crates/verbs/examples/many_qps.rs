//! Scale of one device: N connected queue pairs between two devices on loopback,
//! each writing K small messages, all posted at once; prints the wall time and the aggregate
//! message rate. Compare an engine that scans every queue pair per wake-up with one that keeps
//! their deadlines in a heap by running both binaries on the same N.
//!
//! `cargo run --release -p irn-verbs --example many_qps -- N K SIZE [irn|roce]`
//! (defaults 10000, 4, 1024, irn).

use std::time::{Duration, Instant};

use irn_verbs::{
    Access, Device, DeviceConfig, QpAttr, QpInit, QpMode, Remote, RemoteQp, SendOp, SendWr, Sge,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (n, k, size) = (arg(1, 10_000) as usize, arg(2, 4), arg(3, 1024) as u32);
    let mode = match args.get(4).map(String::as_str) {
        Some("roce") => QpMode::Roce,
        _ => QpMode::Irn,
    };
    let open = |seed| {
        let mut cfg = DeviceConfig::new("127.0.0.1".parse().expect("address"));
        cfg.port = 0;
        cfg.seed = seed;
        Device::open(cfg)
    };
    let (da, db) = (open(1)?, open(2)?);
    let (pa, pb) = (da.alloc_pd(), db.alloc_pd());
    let depth = n * (k as usize + 2) + 16;
    let (ca, cb) = (da.create_cq(depth)?, db.create_cq(16)?);
    let init = QpInit {
        mode,
        max_send_wr: k as usize + 1,
        max_recv_wr: 1,
        ..QpInit::default()
    };
    let src = pa.reg_mr(size as usize, Access::ALL)?;
    let dst = pb.reg_mr(size as usize, Access::ALL)?;
    let attr = QpAttr {
        timeout: 14,
        ..QpAttr::default()
    };
    let mut qps = Vec::with_capacity(n);
    let t0 = Instant::now();
    for _ in 0..n {
        let (qa, qb) = (pa.create_qp(&ca, &ca, init)?, pb.create_qp(&cb, &cb, init)?);
        let ra = RemoteQp {
            gid: da.gid(),
            port: da.local_addr().port(),
            qpn: qa.qpn(),
            psn: 1,
        };
        let rb = RemoteQp {
            gid: db.gid(),
            port: db.local_addr().port(),
            qpn: qb.qpn(),
            psn: 2,
        };
        qa.connect(&attr, &rb, 1)?;
        qb.connect(&attr, &ra, 2)?;
        qps.push((qa, qb));
    }
    let setup = t0.elapsed();
    let t1 = Instant::now();
    for (qa, _) in &qps {
        for i in 0..k {
            qa.post_send(SendWr {
                wr_id: i,
                op: SendOp::Write(Remote {
                    addr: dst.addr(),
                    rkey: dst.rkey(),
                }),
                sg_list: irn_verbs::sgl![Sge {
                    addr: src.addr(),
                    len: size,
                    lkey: src.lkey(),
                }],
                signaled: true,
                fence: false,
                solicited: false,
            })?;
        }
    }
    let total = n * k as usize;
    let mut done = 0;
    let mut failed = 0;
    while done < total {
        match ca.wait(Duration::from_secs(60))? {
            Some(wc) => {
                done += 1;
                if wc.status != irn_verbs::WcStatus::Success {
                    failed += 1;
                }
            }
            None => return Err(format!("{done} of {total} completions after 60 s").into()),
        }
    }
    let run = t1.elapsed();
    println!(
        "{n} queue pairs ({mode}), {k} × {size} B each: set-up {:.2} s, transfer {:.3} s, \
         {:.3} Mmsg/s, {failed} failed",
        setup.as_secs_f64(),
        run.as_secs_f64(),
        total as f64 / run.as_secs_f64() / 1e6
    );
    Ok(())
}
