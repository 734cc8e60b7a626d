//! The figures of irn's experiments, drawn as SVG with `plotters` from the simulator's run
//! summaries ([`irn_sim::metrics::RunSummary`]): the IRN paper's three metrics of every run as
//! ratios to a baseline run ([`plot::bars`], the form of the paper's Figures 1–3), ratios over a
//! sweep ([`plot::ratio_plot`]), incast completion times ([`plot::incast_plot`]), single-packet
//! tails ([`plot::tail_cdf`]), the fabric's timeline of a run ([`plot::timeline`]), and E12's
//! transfer times of dynamic against traditional RDMA ([`drp::figure`]); and the runs of an
//! experiment pooled over its seeds ([`seeds::over_seeds`]: mean and range), which the tables
//! print and the figures draw as whiskers. The
//! `irn sim` command calls them; they are a library so that they can be tested, and used by
//! whatever else reports on runs.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod axes;
pub mod claims;
pub mod drp;
pub mod evaluation;
pub mod experiment;
pub mod figure;
pub mod nic_state;
pub mod plot;
pub mod report;
pub mod reproduce;
pub mod seeds;
pub mod tables;

/// A figure could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The runs hold nothing this figure shows (no timeline, no single-packet flow, …).
    #[error("nothing to plot: {0}")]
    Nothing(&'static str),
    /// The drawing backend failed (writing the file, laying out the chart): what it said.
    #[error("drawing failed: {0}")]
    Draw(String),
}

/// What a figure's drawing returns.
type Result<T> = std::result::Result<T, PlotError>;

/// A drawing backend's error, as this crate's.
fn draw(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}
