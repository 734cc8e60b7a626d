//! Congestion control as a trait object made per queue pair by a factory (the shape of
//! quinn-proto's `congestion::Controller`), never an integer mode. SPEC T9.
//!
//! IRN decouples loss recovery from congestion control (IRN §3.1): the queue pair tells the
//! controller what happened — packets sent, ACKs with RTT samples, CNPs, ECN echoes, losses,
//! timeouts — and asks it two things: how fast it may send (a pacing rate) and how much it may
//! have in flight (a window). Either may be unlimited. Controllers with their own timers (DCQCN's
//! rate-increase and alpha timers) expose a deadline the queue pair folds into
//! `poll_timeout`.
//!
//! Controllers: [`NoCc`] (line rate, IRN's default), [`dcqcn`] (rate, from CNPs), [`timely`]
//! (rate, from the RTT gradient), and [`window`]'s AIMD and DCTCP (window, from losses and ECN
//! echoes). [`backoff`] makes a rate controller back off on losses too (IRN §4.3's variant
//! for go-back-N). The queue pair does the signalling around them: as notification point it answers
//! CE-marked packets with at most one CNP per `QpConfig::cnp_interval`; as responder it sets
//! BTH's BECN bit in the ACK of a CE-marked packet; as requester it paces data packets at
//! [`Controller::rate_bps`] and stops sending new ones at [`Controller::window`] (control
//! packets — ACKs, NAKs, CNPs — are never paced).

use core::fmt::Debug;

use crate::time::{Dur, Time};

pub mod backoff;
pub mod dcqcn;
pub mod timely;
pub mod window;

pub use backoff::{BackoffOnLoss, BackoffOnLossFactory};
pub use dcqcn::{Dcqcn, DcqcnConfig, DcqcnFactory, DcqcnModel, DcqcnParams};
pub use timely::{Timely, TimelyConfig, TimelyFactory, TimelyParams};
pub use window::{WindowAlgorithm, WindowCc, WindowConfig, WindowFactory, WindowParams};

/// Which congestion controller a queue pair runs: the one list of them, named as the
/// simulator's `transport.cc` and the runtime's tools (`--cc`) spell them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum CcKind {
    /// None: line rate within the queue pair's own in-flight limits (IRN's BDP cap, RoCE's
    /// window); IRN's default.
    #[default]
    None,
    /// DCQCN (Zhu et al., SIGCOMM 2015): the rate cut on the CNPs that receivers of
    /// ECN-marked packets send, and recovered by timer and byte counter ([`dcqcn`]).
    Dcqcn,
    /// TIMELY (Mittal et al., SIGCOMM 2015): the rate from the RTT gradient ([`timely`]).
    Timely,
    /// DCTCP (RFC 8257): the window cut by the fraction of ECN-echoed bytes ([`window`]).
    Dctcp,
    /// TCP's AIMD window: halved once per round trip with a loss or an ECN echo, one MSS more
    /// per round trip otherwise, one MSS and slow start after a timeout (the IRN paper's AIMD,
    /// §4.3; [`window`]).
    Aimd,
}

impl CcKind {
    /// Every controller, in the order the tools list them.
    pub const ALL: [CcKind; 5] = [
        CcKind::None,
        CcKind::Dcqcn,
        CcKind::Timely,
        CcKind::Dctcp,
        CcKind::Aimd,
    ];

    /// Its name in configurations, command lines and reports.
    pub fn name(self) -> &'static str {
        match self {
            CcKind::None => "none",
            CcKind::Dcqcn => "dcqcn",
            CcKind::Timely => "timely",
            CcKind::Dctcp => "dctcp",
            CcKind::Aimd => "aimd",
        }
    }

    /// The window algorithm, for the controllers that keep a window.
    pub fn window_algorithm(self) -> Option<WindowAlgorithm> {
        match self {
            CcKind::Dctcp => Some(WindowAlgorithm::Dctcp),
            CcKind::Aimd => Some(WindowAlgorithm::Aimd),
            CcKind::None | CcKind::Dcqcn | CcKind::Timely => None,
        }
    }
}

impl core::str::FromStr for CcKind {
    type Err = String;
    fn from_str(s: &str) -> Result<CcKind, String> {
        CcKind::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!("congestion control is none, dcqcn, timely, dctcp or aimd, not {s:?}")
            })
    }
}

impl core::fmt::Display for CcKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Megabits per second (the configuration's unit) as bits per second.
fn mbps(v: f64) -> u64 {
    (v * 1e6).round() as u64
}

/// One queue pair's congestion controller.
pub trait Controller: Debug + Send {
    /// The algorithm's name, for reports.
    fn name(&self) -> &'static str;

    /// `bytes` (on the wire) were sent.
    fn on_send(&mut self, _now: Time, _bytes: u64) {}

    /// An ACK newly acknowledged `bytes`; `rtt` is a sample when the ACK allows one.
    fn on_ack(&mut self, _now: Time, _bytes: u64, _rtt: Option<Dur>) {}

    /// A congestion notification packet arrived (DCQCN's reaction point).
    fn on_cnp(&mut self, _now: Time) {}

    /// ECN echo accounting (DCTCP): `marked` of `total` bytes the receiver reports had met CE.
    /// Each IRN ACK or NACK reports one packet; a standard ACK, what it newly acknowledges.
    fn on_ecn_echo(&mut self, _now: Time, _marked: u64, _total: u64) {}

    /// Loss recovery detected a loss: a NAK for a sequence error (IRN's NACK, RoCE's
    /// go-back-N NAK), once per NAK.
    fn on_loss(&mut self, _now: Time) {}

    /// The retransmission timer expired.
    fn on_timeout(&mut self, _now: Time) {}

    /// Back off as on a sign of severe congestion: asked on losses only when the run wants
    /// a rate controller to react to them ([`BackoffOnLoss`]). A controller with no reaction
    /// of its own (none, or a window that already reacts to [`Controller::on_loss`]) ignores
    /// it.
    fn back_off(&mut self, _now: Time) {}

    /// The controller's own next deadline, if it has one.
    fn next_timer(&self) -> Option<Time> {
        None
    }

    /// Runs the controller's timers up to `now`.
    fn on_timer(&mut self, _now: Time) {}

    /// Pacing rate in bits per second; `None` = line rate.
    fn rate_bps(&self) -> Option<u64>;

    /// Bytes the queue pair may have in flight; `None` = no window.
    fn window(&self) -> Option<u64>;

    /// How often the controller needs an ACK, in request payload bytes: a standard RoCE
    /// requester, which otherwise asks for an ACK only at the end of a message and every 64
    /// packets, also asks once this many bytes went out since it last asked (`Some(0)`: on
    /// every packet). IRN acknowledges every packet anyway. `None` (the default): the
    /// controller's feedback does not come from ACKs (DCQCN's CNPs, or none). A controller that
    /// reads ECN echoes needs `Some(0)`: a standard responder echoes a mark only in the ACK of
    /// the marked packet.
    fn ack_interval_bytes(&self) -> Option<u64> {
        None
    }
}

/// Makes a controller for each new queue pair.
pub trait ControllerFactory: Debug + Send + Sync {
    /// A controller for a queue pair created at `now` on a link of `line_rate_bps`; `seed`
    /// (the queue pair's number) seeds whatever it randomizes, such as timer jitter, so that a
    /// run is replayable.
    fn build(&self, now: Time, line_rate_bps: u64, seed: u64) -> Box<dyn Controller>;
}

/// No congestion control: line rate, no window (the IRN paper's default configuration).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCc;

impl Controller for NoCc {
    fn name(&self) -> &'static str {
        "none"
    }
    fn rate_bps(&self) -> Option<u64> {
        None
    }
    fn window(&self) -> Option<u64> {
        None
    }
}

/// Factory of [`NoCc`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCcFactory;

impl ControllerFactory for NoCcFactory {
    fn build(&self, _now: Time, _line_rate_bps: u64, _seed: u64) -> Box<dyn Controller> {
        Box::new(NoCc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_unlimited_whatever_happens() {
        let f: &dyn ControllerFactory = &NoCcFactory;
        let mut c = f.build(Time::ZERO, 40_000_000_000, 1);
        c.on_send(Time::ZERO, 1024);
        c.on_cnp(Time::ZERO);
        c.on_loss(Time::ZERO);
        c.on_timeout(Time::ZERO);
        assert_eq!(c.name(), "none");
        assert_eq!(c.rate_bps(), None);
        assert_eq!(c.window(), None);
        assert_eq!(c.next_timer(), None);
    }

    #[test]
    fn every_controller_is_named_once_and_read_back_from_its_name() {
        for k in CcKind::ALL {
            assert_eq!(k.name().parse::<CcKind>(), Ok(k));
            assert_eq!(k.to_string(), k.name());
        }
        let names: std::collections::BTreeSet<_> = CcKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), CcKind::ALL.len());
        assert_eq!(CcKind::default(), CcKind::None);
        let e = "cubic".parse::<CcKind>().expect_err("no such controller");
        assert!(e.contains("cubic") && e.contains("dcqcn"), "{e}");
        // The window controllers, and only they, name their window's algorithm.
        assert_eq!(
            CcKind::Dctcp.window_algorithm(),
            Some(WindowAlgorithm::Dctcp)
        );
        assert_eq!(CcKind::Aimd.window_algorithm(), Some(WindowAlgorithm::Aimd));
        for k in [CcKind::None, CcKind::Dcqcn, CcKind::Timely] {
            assert_eq!(k.window_algorithm(), None);
        }
    }
}
