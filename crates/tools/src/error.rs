//! The tools' errors: options that cannot mean anything together, a run that went wrong, and
//! the verbs, CM, exchange and I/O errors beneath them, each wrapped in what the tool was
//! doing when it happened.
//!
//! Displayed with its sources (`{:#}` through `anyhow` in the binary, or by walking
//! [`std::error::Error::source`]) an error reads as the tool's context first, then the cause:
//! `opening a device on 10.0.0.1: Address already in use`.

use std::io;

/// What a tool's run can end with instead of its result.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Flags or inputs that cannot mean anything (the message names the flag or the file),
    /// refused before the tool listens, connects or sends.
    #[error("{0}")]
    Usage(String),
    /// A run that went wrong after it started: a peer that broke the exchange, a completion
    /// out of order or in error, data that differs from what was sent, a stall.
    #[error("{0}")]
    Failed(String),
    /// A socket, file or capture.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The verbs runtime refused an operation.
    #[error(transparent)]
    Verbs(#[from] irn_verbs::Error),
    /// The out-of-band exchange (perftest's or rdma-core's examples') failed.
    #[error(transparent)]
    Exchange(#[from] irn_verbs::exchange::ExchangeError),
    /// The RDMA connection manager failed.
    #[error(transparent)]
    Cm(#[from] irn_verbs::cm::CmError),
    /// A list of work requests the runtime took only in part.
    #[error(transparent)]
    PostList(#[from] irn_verbs::PostListError),
    /// A Dynamic RDMA endpoint's configuration (from the flags) that cannot mean anything.
    #[error(transparent)]
    DrpConfig(#[from] irn_transport::drp::DrpConfigError),
    /// A Dynamic RDMA transfer the endpoint refused to post.
    #[error(transparent)]
    DrpPost(#[from] irn_transport::drp::DrpPostError),
    /// A JSON line could not be read or written.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A capture that is not pcap or pcapng, or ends inside a record.
    #[error(transparent)]
    Capture(#[from] pcap_file::PcapError),
    /// A number or an address in an input (a hosts file, a peer's line) that does not parse
    /// or does not fit.
    #[error(transparent)]
    Parse(Box<dyn std::error::Error + Send + Sync>),
    /// What the tool was doing when `source` happened.
    #[error("{what}")]
    Context {
        /// The tool's words for the step that failed.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// The error beneath every context: what actually went wrong.
    pub fn root(&self) -> &Error {
        match self {
            Error::Context { source, .. } => source.root(),
            e => e,
        }
    }

    /// The I/O error at the root, if that is what it is.
    pub fn io(&self) -> Option<&io::Error> {
        match self.root() {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::net::AddrParseError> for Error {
    fn from(e: std::net::AddrParseError) -> Self {
        Error::Parse(Box::new(e))
    }
}

impl From<std::num::ParseIntError> for Error {
    fn from(e: std::num::ParseIntError) -> Self {
        Error::Parse(Box::new(e))
    }
}

impl From<std::num::TryFromIntError> for Error {
    fn from(e: std::num::TryFromIntError) -> Self {
        Error::Parse(Box::new(e))
    }
}

/// A tool's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps an error (or an absent value) in what the tool was doing.
pub trait Context<T> {
    /// The error, or `None`, as `what` failing.
    fn context(self, what: impl Into<String>) -> Result<T>;
    /// As [`Context::context`], the words made only on failure.
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Context {
            what: what.into(),
            source: Box::new(e.into()),
        })
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::Context {
            what: what().into(),
            source: Box::new(e.into()),
        })
    }
}

/// An absent value is a failed run whose message is the context's words.
impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::Failed(what.into()))
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| Error::Failed(what().into()))
    }
}

/// Returns [`Error::Failed`] with a formatted message.
#[macro_export]
#[doc(hidden)]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::Failed(format!($($arg)*)))
    };
}

/// Returns [`Error::Usage`] with a formatted message (it names the flag).
#[macro_export]
#[doc(hidden)]
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::Usage(format!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(e: &Error) -> String {
        let mut s = e.to_string();
        let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(c) = cur {
            s += &format!(": {c}");
            cur = c.source();
        }
        s
    }

    #[test]
    fn context_reads_outside_in_and_the_root_is_kept() {
        let r: Result<()> = Err(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("writing the summary")
            .context("irn decode");
        let e = r.expect_err("an error");
        assert_eq!(chain(&e), "irn decode: writing the summary: broken pipe");
        assert_eq!(e.io().map(io::Error::kind), Some(io::ErrorKind::BrokenPipe));
        let none: Option<u8> = None;
        let e = none.with_context(|| "x has no address").expect_err("none");
        assert!(matches!(e, Error::Failed(ref m) if m == "x has no address"));
        assert!(e.io().is_none());
    }
}
