//! `irn nic-state`: E13's table of the per-queue-pair NIC state each loss-recovery design
//! adds to RoCE ([`irn_report::nic_state`]), printed, written as JSON and drawn.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use irn_report::nic_state::{self, Params, Table};

#[derive(Args, Debug)]
pub struct NicStateArgs {
    /// Link rates in Gb/s (the paper's 10, 40 and 100).
    #[arg(long, value_delimiter = ',', default_value = "10,40,100")]
    gbps: Vec<f64>,
    /// Longest-path round trip, µs (E0's: six 2 µs links each way).
    #[arg(long, default_value_t = 24.0)]
    rtt_us: f64,
    /// Path MTU payload, bytes.
    #[arg(long, default_value_t = 1024)]
    mtu: u32,
    /// Queue pairs on one NIC, for the totals.
    #[arg(long, default_value_t = 10_000)]
    qps: u64,
    /// Write the table as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw each design's added state as a share of the mlx5 QP context, per link rate (SVG).
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(args: NicStateArgs) -> Result<bool> {
    let table = Table::compute(&Params {
        gbps: args.gbps.clone(),
        rtt_us: args.rtt_us,
        mtu: args.mtu,
        qps: args.qps,
    })?;
    print!("{}", table.text());
    write(&table, args.json.as_deref(), args.plot.as_deref())?;
    Ok(true)
}

/// Writes the table's JSON and draws its figure, where asked.
fn write(table: &Table, json: Option<&Path>, plot: Option<&Path>) -> Result<()> {
    if let Some(path) = json {
        table
            .write_json(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = plot {
        nic_state::plot(path, &table.rows)?;
    }
    Ok(())
}
