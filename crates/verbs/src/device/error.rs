//! What the verbs calls fail with: [`Error`] (the `errno`s and statuses a verbs programmer
//! expects, named) and [`PostListError`] (a list post's `bad_wr`).

use super::*;

/// A list post stopped at a refused work request ([`Qp::post_send_list`],
/// [`Qp::post_recv_list`]): the `bad_wr` of `ibv_post_send` / `ibv_post_recv`.
#[derive(Debug, thiserror::Error)]
#[error("work request {posted} of the list refused: {error}")]
pub struct PostListError {
    /// Work requests posted before it (they will complete).
    pub posted: usize,
    /// Why it was refused (in the message, so not also a `source`).
    pub error: Error,
}

/// Everything the verbs calls can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket or file operation failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The work request is not accepted in the queue pair's state (`EINVAL` from
    /// `ibv_post_send` in RESET/INIT, for instance).
    #[error("work request refused in queue-pair state {0}")]
    InvalidState(QpState),
    /// The send or receive queue is full (`ENOMEM`).
    #[error("work queue full")]
    QueueFull,
    /// The work request is malformed (e.g. an atomic whose buffer is not 8 bytes).
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    /// The completion queue could receive more completions than it holds (`ENOMEM`: verbs
    /// would overrun it; irn refuses the post instead).
    #[error("completion queue {0} full: poll it before posting more")]
    CqFull(u32),
    /// A completion arrived at a full completion queue; completions were lost
    /// (`IBV_EVENT_CQ_ERR`).
    #[error("completion queue {0} overran")]
    CqOverrun(u32),
    /// `modify` refused the transition or an attribute.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// A UD queue pair's `modify` refused the transition.
    #[error("{0}")]
    UdModify(irn_transport::UdModifyError),
    /// `create_qp` refused the queue pair's configuration (`EINVAL` from `ibv_create_qp`).
    // Its cause is in the message, not also a `source` (which an error chain would print a
    // second time).
    #[error("queue pair configuration: {0}")]
    QpConfig(irn_transport::QpConfigError),
    /// RTR needs the peer's address.
    #[error("moving to RTR needs the remote address (GID and port)")]
    NoRemote,
    /// INIT → RTR asked for a path MTU the route to the peer cannot carry (`EINVAL`): every
    /// full-size packet would be refused by the kernel (`EMSGSIZE`) and the queue pair would
    /// end in `RETRY_EXC_ERR` half a second later.
    #[error(
        "path MTU {asked} does not fit the route to {peer}, which carries IB MTU {route} at most \
         (its link MTU less 80 bytes of headers, as rxe derives its active MTU)"
    )]
    PathMtu {
        /// The `path_mtu` asked for.
        asked: u32,
        /// The peer.
        peer: IpAddr,
        /// The largest IB MTU the route carries ([`crate::active_mtu`]).
        route: u32,
    },
    /// Memory registration failed.
    #[error(transparent)]
    Memory(#[from] MemError),
    /// A memory-region access outside the region.
    #[error("access of {len} bytes at offset {offset} outside a {size}-byte region")]
    OutOfRange {
        /// Offset asked.
        offset: u64,
        /// Length asked.
        len: u64,
        /// Region size.
        size: u64,
    },
    /// The object no longer exists (destroyed, or its device closed).
    #[error("the object was destroyed")]
    Gone,
    /// The remote address's family differs from the device's.
    #[error("remote {0} is not reachable from a device bound to {1}")]
    AddressFamily(IpAddr, IpAddr),
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

impl From<irn_transport::QpConfigError> for Error {
    fn from(e: irn_transport::QpConfigError) -> Error {
        Error::QpConfig(e)
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        match e {
            PostError::InvalidState(s) => Error::InvalidState(s),
            PostError::QueueFull => Error::QueueFull,
            PostError::InvalidWr(w) => Error::InvalidWr(w),
        }
    }
}

/// Result of the verbs calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A completion (verbs `struct ibv_wc`).
pub type Wc = Completion;
