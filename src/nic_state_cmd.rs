//! `irn nic-state`: the per-queue-pair NIC state each loss-recovery design adds to a standard
//! RoCE queue pair (SPEC E13, IRN §6), computed from irn-transport's own accounting
//! ([`RecoveryConfig::nic_state`](irn_transport::RecoveryConfig::nic_state): the bitmaps,
//! descriptors and registers this implementation keeps per queue pair), at the BDP of each
//! link rate the paper evaluates, next to the QP context a ConnectX NIC is programmed with.
//!
//! The reference is the QP context of Linux's mlx5 driver interface (`struct mlx5_ifc_qpc_bits`
//! in `include/linux/mlx5/mlx5_ifc.h`, what `CREATE_QP` hands the firmware): 0x740 bits = 1 856
//! bits = 232 bytes. It is a floor of what a RoCE NIC keeps per queue pair (the firmware holds
//! more inside, and Read responder resources live apart), so the percentages below are
//! ceilings of IRN's relative cost in per-QP memory. The IRN paper's "3–10 % more NIC
//! resources" (§6) counts SRAM and logic of a whole NIC from an FPGA synthesis that is not in
//! the seed: this command measures the state half of that claim only.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::Args;
use plotters::prelude::*;

use irn_transport::{bdp_cap_packets, Dur, RecoveryMode};

/// Bits of the mlx5 QP context (`struct mlx5_ifc_qpc_bits`: offsets 0x000–0x73f).
pub const MLX5_QPC_BITS: u64 = 0x740;

/// Frame bytes on the wire per full packet: a 1 KB payload with the simulator's largest
/// headers and framing (what `irn sim` sizes the BDP cap with: 108 packets at 40 Gb/s).
const HEADERS: u32 = 94;

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

/// One row: a design at a link rate.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Row {
    design: String,
    gbps: f64,
    bdp_packets: u32,
    bitmap_bits: u64,
    descriptor_bits: u64,
    register_bits: u64,
    total_bits: u64,
    bytes_per_qp: u64,
    /// Added state ÷ the mlx5 QP context, in percent.
    pct_of_mlx5_qpc: f64,
    /// Added state for `qps` queue pairs, KiB.
    kib_for_qps: f64,
}

pub fn run(args: NicStateArgs) -> Result<bool> {
    let rows = table(&args)?;
    print_rows(&args, &rows);
    write(&args, &rows)?;
    Ok(true)
}

/// E13's table as `irn nic-state` computes it by default (10, 40 and 100 Gb/s, E0's 24 µs
/// round trip, 1 KB MTU), written as JSON to `json` and drawn to `plot`.
pub(crate) fn write_default(json: &Path, plot: &Path) -> Result<()> {
    let args = NicStateArgs {
        gbps: vec![10.0, 40.0, 100.0],
        rtt_us: 24.0,
        mtu: 1024,
        qps: 10_000,
        json: Some(json.to_path_buf()),
        plot: Some(plot.to_path_buf()),
    };
    write(&args, &table(&args)?)
}

/// Draws E13's figure from a table `irn nic-state --json` wrote (`irn reproduce
/// --report-only` judges that table, so draws it rather than computing another).
pub(crate) fn draw_json(json: &Path, plot_path: &Path) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Table {
        rows: Vec<Row>,
    }
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let table: Table = serde_json::from_str(&text)
        .with_context(|| format!("{}: not an `irn nic-state` table", json.display()))?;
    let mut rates: Vec<f64> = Vec::new();
    for r in &table.rows {
        if !rates.contains(&r.gbps) {
            rates.push(r.gbps);
        }
    }
    plot(plot_path, &table.rows, &rates)
}

/// Every design at every rate of `args`.
fn table(args: &NicStateArgs) -> Result<Vec<Row>> {
    if args.gbps.is_empty() || args.gbps.iter().any(|g| !(g.is_finite() && *g > 0.0)) {
        return Err(anyhow!("--gbps: positive link rates, e.g. 10,40,100"));
    }
    if !(args.rtt_us.is_finite() && args.rtt_us > 0.0) || args.mtu == 0 {
        return Err(anyhow!("--rtt-us and --mtu must be positive"));
    }
    let rtt = Dur::from_picos((args.rtt_us * 1e6).round() as u64);
    let mut rows = Vec::new();
    for &g in &args.gbps {
        let bdp = bdp_cap_packets((g * 1e9).round() as u64, rtt, args.mtu + HEADERS);
        for mode in RecoveryMode::ALL {
            let mut cfg = mode.preset();
            // The paper sizes IRN's bitmaps by the BDP cap of the network (§3.2, §5.3).
            cfg.bdp_cap = cfg.bdp_cap.map(|_| bdp);
            // Without a cap, IRN's bitmaps span its out-of-order window instead.
            let window = cfg.state_window(bdp, irn_transport::QpConfig::default().ooo_window);
            let st = cfg.nic_state(window);
            let total = st.total_bits();
            rows.push(Row {
                design: mode.name().to_string(),
                gbps: g,
                bdp_packets: bdp,
                bitmap_bits: st.bitmap_bits,
                descriptor_bits: st.descriptor_bits,
                register_bits: st.register_bits,
                total_bits: total,
                bytes_per_qp: total.div_ceil(8),
                pct_of_mlx5_qpc: 100.0 * total as f64 / MLX5_QPC_BITS as f64,
                kib_for_qps: (total * args.qps) as f64 / 8.0 / 1024.0,
            });
        }
    }
    Ok(rows)
}

fn print_rows(args: &NicStateArgs, rows: &[Row]) {
    println!(
        "per-QP state each design adds to RoCE (bits), at a {} µs round trip and {}-byte MTU; \
         reference: mlx5 QP context = {MLX5_QPC_BITS} bits",
        args.rtt_us, args.mtu
    );
    println!(
        "{:<16} {:>6} {:>5} {:>8} {:>11} {:>9} {:>8} {:>7} {:>8} {:>12}",
        "design",
        "Gb/s",
        "BDP",
        "bitmaps",
        "descriptors",
        "registers",
        "total",
        "bytes",
        "÷ QPC",
        format!("{} QPs", args.qps)
    );
    for r in rows {
        println!(
            "{:<16} {:>6} {:>5} {:>8} {:>11} {:>9} {:>8} {:>7} {:>7.1}% {:>8.0} KiB",
            r.design,
            r.gbps,
            r.bdp_packets,
            r.bitmap_bits,
            r.descriptor_bits,
            r.register_bits,
            r.total_bits,
            r.bytes_per_qp,
            r.pct_of_mlx5_qpc,
            r.kib_for_qps
        );
    }
}

/// Writes the JSON and the figure `args` asks for.
fn write(args: &NicStateArgs, rows: &[Row]) -> Result<()> {
    if let Some(path) = &args.json {
        let v = serde_json::json!({
            "rtt_us": args.rtt_us,
            "mtu": args.mtu,
            "qps": args.qps,
            "mlx5_qpc_bits": MLX5_QPC_BITS,
            "rows": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot(path, rows, &args.gbps)?;
    }
    Ok(())
}

/// Grouped bars: per design, its added state ÷ the mlx5 QP context at each link rate.
fn plot(path: &Path, rows: &[Row], rates: &[f64]) -> Result<()> {
    let designs: Vec<&str> = RecoveryMode::ALL.iter().map(|m| m.name()).collect();
    let group = rates.len() + 1;
    let width = (designs.len() * group) as f64;
    // The reorder buffer's descriptors (several QP contexts' worth) would flatten every other
    // bar: the axis stops at the largest of the rest, and taller bars are cut there, their
    // value still written on top.
    let top = rows
        .iter()
        .map(|r| r.pct_of_mlx5_qpc)
        .filter(|&v| v <= 100.0)
        .fold(10.0f64, f64::max);
    let ymax = top * 1.15;
    // Two columns wide; the rates' key above the chart.
    let root = SVGBackend::new(path, (1050, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let (key, body) = root.split_vertically(30);
    let mut chart = ChartBuilder::on(&body)
        .caption(
            "per-QP state added to RoCE, % of an mlx5 QP context (1 856 bits; ↑: cut)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..width, 0.0..ymax)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("% of the QP context")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    // One colour per line rate: the plots' palette, its darker shade of each pair.
    let colors: Vec<RGBColor> = irn_report::plot::COLORS
        .iter()
        .step_by(2)
        .copied()
        .collect();
    use plotters::style::text_anchor::{HPos, VPos};
    let above = |size| irn_report::plot::anchored(size, HPos::Center, VPos::Bottom);
    let centred = |size| irn_report::plot::anchored(size, HPos::Center, VPos::Top);
    for (di, d) in designs.iter().enumerate() {
        // Bars cut at the top share one label over the group: their value, or range.
        let mut cut: Vec<f64> = Vec::new();
        for (gi, g) in rates.iter().enumerate() {
            let Some(r) = rows.iter().find(|r| r.design == *d && r.gbps == *g) else {
                continue;
            };
            let x0 = (di * group + gi) as f64 + 0.5;
            let color = colors[gi % colors.len()];
            let h = r.pct_of_mlx5_qpc.min(top * 1.05);
            chart
                .draw_series([Rectangle::new([(x0, 0.0), (x0 + 0.9, h)], color.filled())])
                .map_err(|e| anyhow!("{e}"))?;
            if h < r.pct_of_mlx5_qpc {
                cut.push(r.pct_of_mlx5_qpc);
                continue;
            }
            chart
                .draw_series([Text::new(
                    format!("{:.0}", r.pct_of_mlx5_qpc),
                    (x0 + 0.45, h + ymax * 0.01),
                    above(9),
                )])
                .map_err(|e| anyhow!("{e}"))?;
        }
        if !cut.is_empty() {
            let (lo, hi) = cut
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(a, b), &v| (a.min(v), b.max(v)));
            let label = if lo.round() == hi.round() {
                format!("{lo:.0} ↑")
            } else {
                format!("{lo:.0}–{hi:.0} ↑")
            };
            let centre = (di * group) as f64 + 0.5 + rates.len() as f64 / 2.0 - 0.05;
            chart
                .draw_series([Text::new(
                    label,
                    (centre, top * 1.05 + ymax * 0.01),
                    above(9),
                )])
                .map_err(|e| anyhow!("{e}"))?;
        }
        let centre = (di * group) as f64 + 0.5 + rates.len() as f64 / 2.0;
        let (x, y) = chart.backend_coord(&(centre, 0.0));
        body.draw(&Text::new(d.to_string(), (x, y + 8), centred(11)))
            .map_err(|e| anyhow!("{e}"))?;
    }
    for (gi, g) in rates.iter().enumerate() {
        let x = 70 + 120 * gi as i32;
        key.draw(&Rectangle::new(
            [(x, 10), (x + 12, 22)],
            colors[gi % colors.len()].filled(),
        ))
        .map_err(|e| anyhow!("{e}"))?;
        key.draw(&Text::new(
            format!("{g} Gb/s"),
            (x + 18, 10),
            ("sans-serif", 12).into_font().color(&BLACK),
        ))
        .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
