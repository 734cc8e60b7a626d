//! Queue-pair states and `modify` as a declarative transition table (IBTA Vol. 1 §10.3.1,
//! the QP state diagram; attribute rules as `ibv_modify_qp(3)` states them for RC QPs).
//!
//! A transition not in [`TRANSITIONS`], a missing required attribute or an attribute the
//! transition does not allow is a typed [`ModifyError`]; nothing is changed.
//!
//! irn deviation: the verbs' port number and P_Key *index* have no meaning inside the sans-IO core,
//! so RESET → INIT requires only the access flags (`pkey` is optional and defaults to 0xFFFF).
//! The verbs API of the UDP runtime enforces the rdma-core rules on top.

use core::fmt;

use crate::time::Dur;

/// The states of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    /// Just created or reset: no traffic, work requests rejected.
    Reset,
    /// Initialized: receive WQEs may be posted; nothing is processed yet.
    Init,
    /// Ready to receive: the responder runs; send WQEs are rejected.
    Rtr,
    /// Ready to send: both sides run.
    Rts,
    /// Send queue drained: posted sends wait; outstanding ones complete.
    Sqd,
    /// Send queue error (UD/UC only in IBTA; kept for completeness of the diagram).
    Sqe,
    /// Error: every outstanding and newly posted work request completes with `WrFlushErr`.
    Err,
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}

/// A set of QP attributes, as flags (the `ibv_qp_attr_mask` of verbs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(u32);

impl AttrMask {
    /// No attribute.
    pub const NONE: AttrMask = AttrMask(0);
    /// Access flags (remote read / write / atomic enable).
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 0);
    /// Partition key.
    pub const PKEY: AttrMask = AttrMask(1 << 1);
    /// Path MTU.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 2);
    /// Destination QP number.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 3);
    /// Receive-side starting PSN (expected PSN).
    pub const RQ_PSN: AttrMask = AttrMask(1 << 4);
    /// Read/atomic requests this QP accepts as responder.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 5);
    /// RNR NAK timer this QP asks requesters to wait.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 6);
    /// Send-side starting PSN.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 7);
    /// Local ACK timeout.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 8);
    /// Retry count on timeout / NAK.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 9);
    /// RNR retry count.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 10);
    /// Read/atomic requests this QP may have outstanding as requester.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 11);

    const NAMES: [(AttrMask, &'static str); 12] = [
        (Self::ACCESS_FLAGS, "access_flags"),
        (Self::PKEY, "pkey"),
        (Self::PATH_MTU, "path_mtu"),
        (Self::DEST_QPN, "dest_qpn"),
        (Self::RQ_PSN, "rq_psn"),
        (Self::MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic"),
        (Self::MIN_RNR_TIMER, "min_rnr_timer"),
        (Self::SQ_PSN, "sq_psn"),
        (Self::TIMEOUT, "timeout"),
        (Self::RETRY_CNT, "retry_cnt"),
        (Self::RNR_RETRY, "rnr_retry"),
        (Self::MAX_QP_RD_ATOMIC, "max_qp_rd_atomic"),
    ];

    /// The union.
    #[must_use]
    pub const fn with(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 | o.0)
    }

    /// `self` without `o`.
    #[must_use]
    pub const fn without(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 & !o.0)
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `o` is set.
    pub const fn contains(self, o: AttrMask) -> bool {
        self.0 & o.0 == o.0
    }
}

impl fmt::Display for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(m, _)| self.contains(*m))
            .map(|(_, n)| *n)
            .collect();
        f.write_str(&names.join(", "))
    }
}

/// One allowed transition and its attribute rules.
#[derive(Debug, Clone, Copy)]
pub struct Transition {
    /// From.
    pub from: QpState,
    /// To.
    pub to: QpState,
    /// Attributes that must be given.
    pub required: AttrMask,
    /// Attributes that may be given besides.
    pub optional: AttrMask,
}

const fn t(from: QpState, to: QpState, required: AttrMask, optional: AttrMask) -> Transition {
    Transition {
        from,
        to,
        required,
        optional,
    }
}

use AttrMask as A;
use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

/// Attributes a path/timer change may carry while the QP is running.
const RUNNING: AttrMask = A::ACCESS_FLAGS.with(A::MIN_RNR_TIMER);
/// Everything `SQD → SQD` may change (the send queue is drained, so even PSNs may be set).
const DRAINED: AttrMask = A::ACCESS_FLAGS
    .with(A::PKEY)
    .with(A::PATH_MTU)
    .with(A::MAX_DEST_RD_ATOMIC)
    .with(A::MIN_RNR_TIMER)
    .with(A::SQ_PSN)
    .with(A::TIMEOUT)
    .with(A::RETRY_CNT)
    .with(A::RNR_RETRY)
    .with(A::MAX_QP_RD_ATOMIC);

/// The RC queue-pair state diagram. Transitions to RESET and ERR are allowed from every state
/// and take no attributes; they are not listed.
pub const TRANSITIONS: [Transition; 9] = [
    t(Reset, Init, A::ACCESS_FLAGS, A::PKEY),
    t(Init, Init, A::NONE, A::ACCESS_FLAGS.with(A::PKEY)),
    t(
        Init,
        Rtr,
        A::PATH_MTU
            .with(A::DEST_QPN)
            .with(A::RQ_PSN)
            .with(A::MAX_DEST_RD_ATOMIC)
            .with(A::MIN_RNR_TIMER),
        A::ACCESS_FLAGS.with(A::PKEY),
    ),
    t(
        Rtr,
        Rts,
        A::SQ_PSN
            .with(A::TIMEOUT)
            .with(A::RETRY_CNT)
            .with(A::RNR_RETRY)
            .with(A::MAX_QP_RD_ATOMIC),
        RUNNING,
    ),
    t(Rts, Rts, A::NONE, RUNNING),
    t(Rts, Sqd, A::NONE, A::NONE),
    t(Sqd, Sqd, A::NONE, DRAINED),
    t(Sqd, Rts, A::NONE, RUNNING),
    t(Sqe, Rts, A::NONE, RUNNING),
];

/// Why a `modify` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    /// The state diagram has no such edge.
    #[error("invalid QP transition {from} -> {to}")]
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// Required attributes are missing.
    #[error("QP transition {from} -> {to} requires: {missing}")]
    MissingAttributes {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// What is missing.
        missing: AttrMask,
    },
    /// Attributes the transition does not allow.
    #[error("QP transition {from} -> {to} does not accept: {extra}")]
    UnexpectedAttributes {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// What was given in excess.
        extra: AttrMask,
    },
    /// An attribute value out of its range.
    #[error("invalid value for {0}")]
    InvalidValue(&'static str),
}

/// Checks a transition from `from` to `to` with attributes `given` against the table.
pub fn check_transition(from: QpState, to: QpState, given: AttrMask) -> Result<(), ModifyError> {
    let (required, optional) = if to == Reset || to == QpState::Err {
        (A::NONE, A::NONE)
    } else {
        let tr = TRANSITIONS
            .iter()
            .find(|t| t.from == from && t.to == to)
            .ok_or(ModifyError::InvalidTransition { from, to })?;
        (tr.required, tr.optional)
    };
    let missing = required.without(given);
    if !missing.is_empty() {
        return Err(ModifyError::MissingAttributes { from, to, missing });
    }
    let extra = given.without(required.with(optional));
    if !extra.is_empty() {
        return Err(ModifyError::UnexpectedAttributes { from, to, extra });
    }
    Ok(())
}

/// What a posted work request meets in a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostRule {
    /// Queued and (eventually) processed.
    Accept,
    /// Queued and completed at once with `WrFlushErr` (verbs: posting to a QP in ERR).
    Flush,
    /// Refused with an error; nothing is queued.
    Reject,
}

/// Whether a send work request may be posted in `state` (verbs: RTS, SQD queue; ERR flushes).
pub const fn post_send_rule(state: QpState) -> PostRule {
    match state {
        Rts | Sqd | Sqe => PostRule::Accept,
        QpState::Err => PostRule::Flush,
        Reset | Init | Rtr => PostRule::Reject,
    }
}

/// Whether a receive work request may be posted in `state` (verbs: any state but RESET; ERR
/// flushes).
pub const fn post_recv_rule(state: QpState) -> PostRule {
    match state {
        Init | Rtr | Rts | Sqd | Sqe => PostRule::Accept,
        QpState::Err => PostRule::Flush,
        Reset => PostRule::Reject,
    }
}

/// The local ACK timeout an IB `timeout` attribute (5 bits) stands for: 4.096 µs × 2^t, with 0
/// meaning "wait forever" (IBTA §9.7.6.1.3). `None` for 0.
pub const fn ib_timeout(t: u8) -> Option<Dur> {
    match t & 0x1f {
        0 => None,
        t => Some(Dur::from_picos(4_096_000 << t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_bring_up_passes() {
        let init = A::ACCESS_FLAGS;
        let rtr = A::PATH_MTU
            .with(A::DEST_QPN)
            .with(A::RQ_PSN)
            .with(A::MAX_DEST_RD_ATOMIC)
            .with(A::MIN_RNR_TIMER);
        let rts = A::SQ_PSN
            .with(A::TIMEOUT)
            .with(A::RETRY_CNT)
            .with(A::RNR_RETRY)
            .with(A::MAX_QP_RD_ATOMIC);
        assert_eq!(check_transition(Reset, Init, init), Ok(()));
        assert_eq!(check_transition(Init, Rtr, rtr), Ok(()));
        assert_eq!(check_transition(Rtr, Rts, rts), Ok(()));
        assert_eq!(check_transition(Rts, QpState::Err, A::NONE), Ok(()));
        assert_eq!(check_transition(QpState::Err, Reset, A::NONE), Ok(()));
    }

    #[test]
    fn wrong_edges_and_attributes_are_typed_errors() {
        assert_eq!(
            check_transition(Reset, Rts, A::NONE),
            Err(ModifyError::InvalidTransition {
                from: Reset,
                to: Rts
            })
        );
        assert_eq!(
            check_transition(Init, Rtr, A::PATH_MTU),
            Err(ModifyError::MissingAttributes {
                from: Init,
                to: Rtr,
                missing: A::DEST_QPN
                    .with(A::RQ_PSN)
                    .with(A::MAX_DEST_RD_ATOMIC)
                    .with(A::MIN_RNR_TIMER)
            })
        );
        assert_eq!(
            check_transition(Rts, Rts, A::SQ_PSN),
            Err(ModifyError::UnexpectedAttributes {
                from: Rts,
                to: Rts,
                extra: A::SQ_PSN
            })
        );
        assert!(check_transition(Rts, QpState::Err, A::SQ_PSN).is_err());
        let e = check_transition(Init, Rtr, A::PATH_MTU).expect_err("missing");
        assert!(e.to_string().contains("dest_qpn"), "{e}");
    }

    #[test]
    fn every_listed_transition_is_reachable_only_as_listed() {
        let all = [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err];
        for from in all {
            for to in all {
                let listed = TRANSITIONS.iter().any(|t| t.from == from && t.to == to);
                let free = to == Reset || to == QpState::Err;
                let r = check_transition(from, to, A::NONE);
                let invalid = matches!(r, Err(ModifyError::InvalidTransition { .. }));
                assert_eq!(!invalid, listed || free, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn post_rules_follow_verbs() {
        assert_eq!(post_send_rule(Rtr), PostRule::Reject);
        assert_eq!(post_send_rule(Rts), PostRule::Accept);
        assert_eq!(post_send_rule(QpState::Err), PostRule::Flush);
        assert_eq!(post_recv_rule(Reset), PostRule::Reject);
        assert_eq!(post_recv_rule(Init), PostRule::Accept);
    }

    #[test]
    fn ib_timeout_table() {
        assert_eq!(ib_timeout(0), None);
        assert_eq!(ib_timeout(1), Some(Dur::from_picos(8_192_000)));
        // ibv_rc_pingpong's timeout 14: 4.096 us * 2^14 = 67.1 ms (the rxe retransmit seen in
        // the captures).
        assert_eq!(ib_timeout(14), Some(Dur::from_picos(67_108_864_000)));
    }
}
