//! Work requests and completions: the verbs vocabulary (IBTA Vol. 1 §10.8, §11.4; rdma-core
//! `ibv_post_send(3)`, `ibv_poll_cq(3)`).

use core::fmt;

/// A scatter/gather entry: `len` bytes at `addr` in the region of `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Local virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// A work request's scatter/gather list. Its first entry is held inline, so that the list of a
/// work request of one entry — almost every one a verbs program posts — costs no allocation to
/// build and none to free when it completes, as `ibv_post_send(3)` copies a caller's list into
/// the send queue without one; longer lists spill to the heap. It is a `smallvec::SmallVec`
/// (smallvec 1.x), with that type's whole API: build one with [`sgl!`](crate::sgl) (as `vec!`
/// builds a `Vec`), [`SgList::from_slice`] or by collecting entries.
pub type SgList = smallvec::SmallVec<[Sge; 1]>;

/// Builds an [`SgList`] from its entries, as `vec!` builds a `Vec`: `sgl![mr.sge(0, 64)]`.
#[macro_export]
macro_rules! sgl {
    ($($sge:expr),* $(,)?) => {
        <$crate::SgList as ::core::iter::FromIterator<$crate::Sge>>::from_iter([$($sge),*])
    };
}

/// Remote memory a one-sided operation targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Remote {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The operation of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// Send, consuming a receive WQE at the responder.
    Send,
    /// Send with 4 bytes of immediate data for the receiver's completion.
    SendWithImm(u32),
    /// Send that invalidates a remote key at the responder.
    SendWithInv(u32),
    /// RDMA Write.
    Write(Remote),
    /// RDMA Write with immediate: also consumes a receive WQE and completes at the responder.
    WriteWithImm(Remote, u32),
    /// RDMA Read into the local scatter list.
    Read(Remote),
    /// 8-byte compare-and-swap; the old value lands in the (8-byte) local buffer.
    CompareSwap {
        /// Target (8-byte aligned).
        remote: Remote,
        /// Expected value.
        compare: u64,
        /// Value written if equal.
        swap: u64,
    },
    /// 8-byte fetch-and-add; the old value lands in the local buffer.
    FetchAdd {
        /// Target (8-byte aligned).
        remote: Remote,
        /// Addend.
        add: u64,
    },
}

impl SendOp {
    /// Whether this is a Read or an atomic: a request answered with data, bounded by the peer's
    /// `max_dest_rd_atomic`.
    pub const fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    /// Whether this is an atomic.
    pub const fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }

    /// Whether the responder consumes a receive WQE for it.
    pub const fn consumes_recv(&self) -> bool {
        matches!(
            self,
            SendOp::Send
                | SendOp::SendWithImm(_)
                | SendOp::SendWithInv(_)
                | SendOp::WriteWithImm(..)
        )
    }

    /// The completion opcode at the requester.
    pub const fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => WcOpcode::Send,
            SendOp::Write(_) | SendOp::WriteWithImm(..) => WcOpcode::RdmaWrite,
            SendOp::Read(_) => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local buffers: gathered for Send/Write, scattered for Read, one 8-byte entry for atomics.
    pub sg_list: SgList,
    /// Whether a successful completion is reported (errors always are).
    pub signaled: bool,
    /// Wait for all earlier Reads and atomics to complete before starting (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Ask for a solicited event at the responder (BTH SE).
    pub solicited: bool,
}

impl SendWr {
    /// Total bytes of the scatter/gather list.
    pub fn len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.len)).sum()
    }

    /// Whether the scatter/gather list is empty or all zero-length.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming Send is scattered.
    pub sg_list: SgList,
}

impl RecvWr {
    /// Total bytes of the scatter list.
    pub fn len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.len)).sum()
    }

    /// Whether the scatter list holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Completion status (verbs `enum ibv_wc_status`; Display gives rdma-core's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The operation succeeded.
    Success,
    /// Local length error: a message did not fit the receive buffer, or exceeded limits.
    LocLenErr,
    /// Local QP operation error: an internal inconsistency for the work request.
    LocQpOpErr,
    /// Local protection error: an SGE names memory its lkey does not cover or allow.
    LocProtErr,
    /// Work request flushed: the QP is in the error state.
    WrFlushErr,
    /// Bad response: an unexpected opcode in a response.
    BadRespErr,
    /// Remote invalid request: the responder rejected the request (e.g. a misaligned atomic,
    /// an unsupported operation, a message too long).
    RemInvReqErr,
    /// Remote access error: bad rkey, bounds or permissions at the responder.
    RemAccessErr,
    /// Remote operational error: the responder could not complete the request.
    RemOpErr,
    /// Transport retry counter exceeded: no (valid) response within the retries.
    RetryExcErr,
    /// RNR retry counter exceeded: the responder had no receive WQE, too many times.
    RnrRetryExcErr,
}

impl WcStatus {
    /// The number verbs gives it (`enum ibv_wc_status` in rdma-core's `verbs.h`): what a C
    /// program reads in `ibv_wc.status`, and what rc_pingpong prints.
    pub const fn ibv_number(self) -> u32 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocLenErr => 1,
            WcStatus::LocQpOpErr => 2,
            WcStatus::LocProtErr => 4,
            WcStatus::WrFlushErr => 5,
            WcStatus::BadRespErr => 7,
            WcStatus::RemInvReqErr => 9,
            WcStatus::RemAccessErr => 10,
            WcStatus::RemOpErr => 11,
            WcStatus::RetryExcErr => 12,
            WcStatus::RnrRetryExcErr => 13,
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
        })
    }
}

/// What a completion completes (verbs `enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A Send (any flavour) at the requester.
    Send,
    /// An RDMA Write at the requester.
    RdmaWrite,
    /// An RDMA Read at the requester.
    RdmaRead,
    /// A compare-and-swap at the requester.
    CompSwap,
    /// A fetch-and-add at the requester.
    FetchAdd,
    /// A received Send at the responder.
    Recv,
    /// A received Write-with-immediate at the responder.
    RecvRdmaWithImm,
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receive completions) or transferred.
    pub byte_len: u32,
    /// Immediate data of a Send/Write with immediate.
    pub imm: Option<u32>,
    /// The rkey a Send-with-invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// A UD receive: the sender's QP number (`ibv_wc.src_qp`; the GRH area of the receive
    /// buffer is always filled on RoCE, `IBV_WC_GRH`). `None` otherwise.
    pub src_qp: Option<u32>,
}

impl Completion {
    /// A completion that carries no data: an error, a flush, or a success without a length.
    pub const fn bare(wr_id: u64, opcode: WcOpcode, status: WcStatus, qp_num: u32) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            qp_num,
            src_qp: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn sge(addr: u64) -> Sge {
        Sge {
            addr,
            len: 64,
            lkey: 7,
        }
    }

    #[test]
    fn a_list_of_one_entry_is_held_inline_and_longer_ones_in_order() {
        let none = crate::sgl![];
        assert!(none.is_empty() && !none.spilled());
        let one = crate::sgl![sge(0x1000)];
        assert_eq!(one.as_slice(), [sge(0x1000)]);
        assert!(!one.spilled(), "one entry needs no allocation");
        let three = crate::sgl![sge(1), sge(2), sge(3)];
        assert_eq!(three.as_slice(), [sge(1), sge(2), sge(3)]);
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: three,
            signaled: true,
            fence: false,
            solicited: false,
        };
        assert_eq!(wr.len(), 192);
        assert_eq!(SgList::from_slice(&[sge(4)]), crate::sgl![sge(4)]);
        // Inline storage costs a work request nothing beside a `Vec` (smallvec's `union`).
        assert_eq!(
            std::mem::size_of::<SgList>(),
            std::mem::size_of::<Vec<Sge>>()
        );
    }
}
