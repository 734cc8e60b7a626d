//! A workload of random verbs on a [`Pair`] and the reference model that says what memory and
//! completions must look like afterwards.

#![allow(dead_code)]

use irn_transport::pair::{Pair, Rng};
use irn_transport::{
    Access, Completion, MrKeys, RecvWr, Remote, SendOp, SendWr, SgList, Sge, WcOpcode, WcStatus,
};

/// One operation A performs on B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CompareSwap,
}

pub const ALL_KINDS: [Kind; 7] = [
    Kind::Send,
    Kind::SendImm,
    Kind::Write,
    Kind::WriteImm,
    Kind::Read,
    Kind::FetchAdd,
    Kind::CompareSwap,
];

#[derive(Debug, Clone)]
pub struct Op {
    pub kind: Kind,
    pub len: usize,
    pub signaled: bool,
    pub fence: bool,
    /// Split the local buffer over this many scatter/gather entries.
    pub sges: usize,
}

/// Every kind of operation once, signaled, `len` bytes (atomics: 8) in two pieces.
pub fn every_kind(len: usize) -> Vec<Op> {
    ALL_KINDS
        .iter()
        .map(|&kind| Op {
            kind,
            len: if matches!(kind, Kind::FetchAdd | Kind::CompareSwap) {
                8
            } else {
                len
            },
            signaled: true,
            fence: false,
            sges: 2,
        })
        .collect()
}

/// What must hold after the run.
#[derive(Debug)]
struct Expect {
    wr_id: u64,
    kind: Kind,
    signaled: bool,
    /// (memory side, address, bytes).
    a_bytes: Option<(u64, Vec<u8>)>,
    b_bytes: Option<(u64, Vec<u8>)>,
    recv: Option<(u64, u32, Option<u32>, WcOpcode)>,
}

pub struct Workload {
    expects: Vec<Expect>,
    counter_addr: u64,
    counter_keys: MrKeys,
    recv_ids: Vec<u64>,
}

fn fill(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn sg_list(addr: u64, len: usize, lkey: u32, pieces: usize) -> SgList {
    let pieces = pieces.clamp(1, 4).min(len.max(1));
    let mut out = SgList::new();
    let mut at = 0usize;
    for i in 0..pieces {
        let n = if i + 1 == pieces {
            len - at
        } else {
            len / pieces
        };
        out.push(Sge {
            addr: addr + at as u64,
            len: n as u32,
            lkey,
        });
        at += n;
    }
    out
}

impl Workload {
    /// Posts `ops` from A to B (and the receive WQEs B needs), building the expectations.
    pub fn post(pair: &mut Pair, ops: &[Op], seed: u64) -> Workload {
        let mut rng = Rng::new(seed);
        let counter_addr = pair.mem_b.alloc(8);
        let counter_keys = pair
            .mem_b
            .register(counter_addr, 8, Access::ALL)
            .expect("register counter");
        let mut counter: u64 = 0;
        let mut expects = Vec::new();
        let mut recv_ids = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let wr_id = 1000 + i as u64;
            let len = op.len;
            let imm = rng.next_u64() as u32;
            let mut e = Expect {
                wr_id,
                kind: op.kind,
                signaled: op.signaled,
                a_bytes: None,
                b_bytes: None,
                recv: None,
            };
            let wop;
            let mut sg;
            match op.kind {
                Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                    let data = fill(&mut rng, len);
                    let src = pair.mem_a.alloc_with(&data);
                    let k = pair
                        .mem_a
                        .register(src, len as u64, Access::LOCAL_WRITE)
                        .expect("register src");
                    sg = sg_list(src, len, k.lkey, op.sges);
                    if len == 0 {
                        sg.clear();
                    }
                    // The target is bigger than the data: nothing may land past it.
                    let dst = pair.mem_b.alloc(len + 64);
                    let dk = pair
                        .mem_b
                        .register(dst, len as u64 + 64, Access::ALL)
                        .expect("register dst");
                    let mut want = data.clone();
                    want.extend_from_slice(&[0u8; 64]);
                    e.b_bytes = Some((dst, want));
                    let remote = Remote {
                        addr: dst,
                        rkey: dk.rkey,
                    };
                    wop = match op.kind {
                        Kind::Send => SendOp::Send,
                        Kind::SendImm => SendOp::SendWithImm(imm),
                        Kind::Write => SendOp::Write(remote),
                        _ => SendOp::WriteWithImm(remote, imm),
                    };
                    let recv_id = 5000 + i as u64;
                    match op.kind {
                        Kind::Send | Kind::SendImm => {
                            pair.b
                                .post_recv(RecvWr {
                                    wr_id: recv_id,
                                    sg_list: sg_list(dst, len + 64, dk.lkey, op.sges),
                                })
                                .expect("post recv");
                            e.recv = Some((
                                recv_id,
                                len as u32,
                                (op.kind == Kind::SendImm).then_some(imm),
                                WcOpcode::Recv,
                            ));
                            recv_ids.push(recv_id);
                        }
                        Kind::WriteImm => {
                            pair.b
                                .post_recv(RecvWr {
                                    wr_id: recv_id,
                                    sg_list: irn_transport::sgl![],
                                })
                                .expect("post recv");
                            e.recv =
                                Some((recv_id, len as u32, Some(imm), WcOpcode::RecvRdmaWithImm));
                            recv_ids.push(recv_id);
                        }
                        _ => {}
                    }
                }
                Kind::Read => {
                    let data = fill(&mut rng, len);
                    let src = pair.mem_b.alloc_with(&data);
                    let sk = pair
                        .mem_b
                        .register(
                            src,
                            len as u64,
                            Access::LOCAL_WRITE.with(Access::REMOTE_READ),
                        )
                        .expect("register read src");
                    let dst = pair.mem_a.alloc(len + 64);
                    let dk = pair
                        .mem_a
                        .register(dst, len as u64 + 64, Access::LOCAL_WRITE)
                        .expect("register read dst");
                    sg = sg_list(dst, len, dk.lkey, op.sges);
                    if len == 0 {
                        sg.clear();
                    }
                    let mut want = data.clone();
                    want.extend_from_slice(&[0u8; 64]);
                    e.a_bytes = Some((dst, want));
                    wop = SendOp::Read(Remote {
                        addr: src,
                        rkey: sk.rkey,
                    });
                }
                Kind::FetchAdd | Kind::CompareSwap => {
                    let dst = pair.mem_a.alloc(8);
                    let dk = pair
                        .mem_a
                        .register(dst, 8, Access::LOCAL_WRITE)
                        .expect("register atomic dst");
                    sg = irn_transport::sgl![Sge {
                        addr: dst,
                        len: 8,
                        lkey: dk.lkey,
                    }];
                    let remote = Remote {
                        addr: counter_addr,
                        rkey: counter_keys.rkey,
                    };
                    e.a_bytes = Some((dst, counter.to_ne_bytes().to_vec()));
                    if op.kind == Kind::FetchAdd {
                        let add = rng.below(1000) + 1;
                        counter = counter.wrapping_add(add);
                        wop = SendOp::FetchAdd { remote, add };
                    } else {
                        // Half the time the comparison succeeds.
                        let compare = if rng.chance(0.5) {
                            counter
                        } else {
                            counter + 1
                        };
                        let swap = rng.next_u64();
                        if compare == counter {
                            counter = swap;
                        }
                        wop = SendOp::CompareSwap {
                            remote,
                            compare,
                            swap,
                        };
                    }
                }
            }
            pair.a
                .post_send(SendWr {
                    wr_id,
                    op: wop,
                    sg_list: sg,
                    signaled: op.signaled,
                    fence: op.fence,
                    solicited: false,
                })
                .expect("post send");
            expects.push(e);
        }
        let mut w = Workload {
            expects,
            counter_addr,
            counter_keys,
            recv_ids,
        };
        w.expects.push(Expect {
            wr_id: u64::MAX,
            kind: Kind::FetchAdd,
            signaled: false,
            a_bytes: None,
            b_bytes: Some((counter_addr, counter.to_ne_bytes().to_vec())),
            recv: None,
        });
        w
    }

    /// Checks completions (exactly one per signaled WR, successful, in posting order; one per
    /// receive) and memory, byte for byte.
    pub fn check(&self, pair: &Pair) -> Result<(), String> {
        let want_sends: Vec<u64> = self
            .expects
            .iter()
            .filter(|e| e.signaled && e.wr_id != u64::MAX)
            .map(|e| e.wr_id)
            .collect();
        let got_sends: Vec<&Completion> = pair.done_a.iter().collect();
        if let Some(bad) = got_sends.iter().find(|c| c.status != WcStatus::Success) {
            return Err(format!("A completed with an error: {bad:?}"));
        }
        let got_ids: Vec<u64> = got_sends.iter().map(|c| c.wr_id).collect();
        if got_ids != want_sends {
            return Err(format!(
                "A's completions {} (first {:?}), expected {} in posting order",
                got_ids.len(),
                &got_ids[..got_ids.len().min(8)],
                want_sends.len()
            ));
        }
        let want_recv: Vec<(u64, u32, Option<u32>, WcOpcode)> =
            self.expects.iter().filter_map(|e| e.recv).collect();
        let got_recv: Vec<(u64, u32, Option<u32>, WcOpcode)> = pair
            .done_b
            .iter()
            .map(|c| (c.wr_id, c.byte_len, c.imm, c.opcode))
            .collect();
        if let Some(bad) = pair.done_b.iter().find(|c| c.status != WcStatus::Success) {
            return Err(format!("B completed with an error: {bad:?}"));
        }
        if got_recv != want_recv {
            return Err(format!(
                "B's receive completions {got_recv:?}, expected {want_recv:?}"
            ));
        }
        for e in &self.expects {
            for (mem, want) in [(&pair.mem_a, &e.a_bytes), (&pair.mem_b, &e.b_bytes)] {
                if let Some((addr, want)) = want {
                    let got = mem.buffer(*addr).ok_or("buffer missing")?;
                    if got[..want.len()] != want[..] {
                        let at = got.iter().zip(want).position(|(a, b)| a != b);
                        return Err(format!(
                            "memory of wr {} ({:?}) differs at byte {at:?}",
                            e.wr_id, e.kind
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
