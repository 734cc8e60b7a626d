//! Two connected devices on loopback, for the tests.
#![allow(dead_code)]

use std::time::Duration;

use irn_verbs::{
    Access, Cq, Device, DeviceConfig, Impairment, Mr, Pd, Qp, QpAttr, QpInit, QpMode, ReceivePath,
    Remote, RemoteQp, SendOp, SendWr, SgList, Wc,
};

pub struct Side {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
}

/// A device on 127.0.0.1, any port, with the default receive path (raw when run as root).
pub fn device(loss: f64, seed: u64) -> Device {
    device_on("127.0.0.1", ReceivePath::Auto, loss, seed).expect("open a device on 127.0.0.1")
}

/// A device on `addr`, any port, receiving through `path`; `loss` impairs what it sends.
pub fn device_on(addr: &str, path: ReceivePath, loss: f64, seed: u64) -> irn_verbs::Result<Device> {
    let mut cfg = DeviceConfig::new(addr.parse().expect("address"));
    cfg.port = 0;
    cfg.seed = seed;
    cfg.receive = path;
    // Each packet is impaired once, on its way out.
    cfg.tx_impairment = Impairment::loss(loss);
    Device::open(cfg)
}

/// A device on `addr` receiving through `path` whose every received packet is held
/// `delay_us` (a slow link or a busy receiver: its ACKs come back that much later).
pub fn delayed_device(addr: &str, path: ReceivePath, seed: u64, delay_us: u64) -> Device {
    let mut cfg = DeviceConfig::new(addr.parse().expect("address"));
    cfg.port = 0;
    cfg.seed = seed;
    cfg.receive = path;
    cfg.rx_impairment = Impairment {
        delay: 1.0,
        delay_us,
        ..Impairment::default()
    };
    Device::open(cfg).expect("open a delayed device")
}

/// Whether this process may open raw sockets (the raw receive path).
pub fn raw_permitted() -> bool {
    device_on("127.0.0.1", ReceivePath::Raw, 0.0, 1).is_ok()
}

pub fn side(dev: Device, mode: QpMode, cq_depth: usize) -> Side {
    let (pd, cq, qp) = queue_pair(&dev, mode, cq_depth);
    Side { dev, pd, cq, qp }
}

/// A protection domain, a CQ of `cq_depth` and a queue pair of `mode` on `dev`, which the
/// caller keeps (several sides on one device).
pub fn queue_pair(dev: &Device, mode: QpMode, cq_depth: usize) -> (Pd, Cq, Qp) {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(cq_depth).expect("cq");
    let qp = pd
        .create_qp(
            &cq,
            &cq,
            QpInit {
                mode,
                max_send_wr: 4096,
                max_recv_wr: 4096,
                ..QpInit::default()
            },
        )
        .expect("qp");
    (pd, cq, qp)
}

pub fn remote(s: &Side, psn: u32) -> RemoteQp {
    RemoteQp {
        gid: s.dev.gid(),
        port: s.dev.local_addr().port(),
        qpn: s.qp.qpn(),
        psn,
    }
}

/// Two connected queue pairs; `loss` impairs both directions on both sides.
pub fn pair(mode: QpMode, loss: f64, attr: &QpAttr) -> Pair {
    connect(
        side(device(loss, 11), mode, 8192),
        side(device(loss, 22), mode, 8192),
        attr,
    )
}

/// Two connected queue pairs on `addr` receiving through `path`, no impairment.
pub fn pair_on(addr: &str, path: ReceivePath, mode: QpMode) -> Pair {
    let open = |seed| device_on(addr, path, 0.0, seed).expect("open a device");
    connect(
        side(open(11), mode, 8192),
        side(open(22), mode, 8192),
        &QpAttr::default(),
    )
}

pub fn connect(a: Side, b: Side, attr: &QpAttr) -> Pair {
    a.qp.connect(attr, &remote(&b, 0xb0b), 0xa11)
        .expect("connect a");
    b.qp.connect(attr, &remote(&a, 0xa11), 0xb0b)
        .expect("connect b");
    Pair { a, b }
}

/// A signaled work request; `sg` a `Vec` or an [`SgList`].
pub fn wr(wr_id: u64, op: SendOp, sg: impl Into<SgList>) -> SendWr {
    SendWr {
        wr_id,
        op,
        sg_list: sg.into(),
        signaled: true,
        fence: false,
        solicited: false,
    }
}

pub fn remote_of(mr: &Mr, offset: u64) -> Remote {
    Remote {
        addr: mr.addr() + offset,
        rkey: mr.rkey(),
    }
}

/// The next completion, or a test failure after `secs` seconds.
pub fn wait(cq: &Cq, secs: u64) -> Wc {
    match cq.wait(Duration::from_secs(secs)) {
        Ok(Some(wc)) => wc,
        Ok(None) => panic!("no completion within {secs} s"),
        Err(e) => panic!("cq: {e}"),
    }
}

pub fn all() -> Access {
    Access::ALL
}

/// Deterministic bytes for a message.
pub fn pattern(seed: u64, out: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

mod skip;
pub use skip::precondition_missing;
