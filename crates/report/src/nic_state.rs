//! E13's table: the per-queue-pair NIC state each loss-recovery design adds to a standard
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
//! the seed: this table measures the state half of that claim only.

use std::path::Path;

use plotters::prelude::*;

use irn_transport::{bdp_cap_packets, Dur, RecoveryMode};

use crate::{draw, PlotError};

/// Bits of the mlx5 QP context (`struct mlx5_ifc_qpc_bits`: offsets 0x000–0x73f).
pub const MLX5_QPC_BITS: u64 = 0x740;

/// Frame bytes on the wire per full packet: a 1 KB payload with the simulator's largest
/// headers and framing (what `irn sim` sizes the BDP cap with: 108 packets at 40 Gb/s).
const HEADERS: u32 = 94;

/// What the table is computed for.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Link rates, Gb/s.
    pub gbps: Vec<f64>,
    /// Longest-path round trip, µs.
    pub rtt_us: f64,
    /// Path MTU payload, bytes.
    pub mtu: u32,
    /// Queue pairs on one NIC, for the totals.
    pub qps: u64,
}

impl Default for Params {
    /// The IRN paper's: 10, 40 and 100 Gb/s, E0's 24 µs round trip (six 2 µs links each
    /// way), a 1 KB MTU, 10 000 queue pairs.
    fn default() -> Self {
        Params {
            gbps: vec![10.0, 40.0, 100.0],
            rtt_us: 24.0,
            mtu: 1024,
            qps: 10_000,
        }
    }
}

/// Parameters that cannot mean anything, or a table that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum NicStateError {
    /// A parameter out of range (the message names it as the command's flag).
    #[error("{0}")]
    Params(&'static str),
    /// The table's JSON could not be read.
    #[error("{path}: not an `irn nic-state` table: {why}")]
    Table {
        /// The file.
        path: String,
        /// What was wrong with it.
        why: String,
    },
}

/// One row: a design at a link rate.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// The design (a recovery mode's name).
    pub design: String,
    /// Link rate, Gb/s.
    pub gbps: f64,
    /// The BDP cap at this rate, packets.
    pub bdp_packets: u32,
    /// Bits of loss and receive bitmaps.
    pub bitmap_bits: u64,
    /// Bits of per-packet descriptors (the reorder buffer's).
    pub descriptor_bits: u64,
    /// Bits of counters and registers.
    pub register_bits: u64,
    /// All of it.
    pub total_bits: u64,
    /// `total_bits` in bytes, rounded up.
    pub bytes_per_qp: u64,
    /// Added state ÷ the mlx5 QP context, in percent.
    pub pct_of_mlx5_qpc: f64,
    /// Added state for `qps` queue pairs, KiB.
    pub kib_for_qps: f64,
}

/// E13's table: every design at every rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// What it was computed for.
    pub params: Params,
    /// A row per design and rate, rates outermost.
    pub rows: Vec<Row>,
}

impl Table {
    /// Computes the table from irn-transport's accounting.
    pub fn compute(params: &Params) -> Result<Table, NicStateError> {
        let rows = rows(params)?;
        Ok(Table {
            params: params.clone(),
            rows,
        })
    }

    /// The table as `irn nic-state --json` writes it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "rtt_us": self.params.rtt_us,
            "mtu": self.params.mtu,
            "qps": self.params.qps,
            "mlx5_qpc_bits": MLX5_QPC_BITS,
            "rows": self.rows,
        })
    }

    /// Reads back the rows of a table `to_json` wrote (`path` names it in errors).
    pub fn rows_from_json(text: &str, path: &Path) -> Result<Vec<Row>, NicStateError> {
        #[derive(serde::Deserialize)]
        struct Rows {
            rows: Vec<Row>,
        }
        serde_json::from_str::<Rows>(text)
            .map(|t| t.rows)
            .map_err(|e| NicStateError::Table {
                path: path.display().to_string(),
                why: e.to_string(),
            })
    }

    /// The table as text, a line per row under a header.
    pub fn text(&self) -> String {
        let p = &self.params;
        let mut s = format!(
            "per-QP state each design adds to RoCE (bits), at a {} µs round trip and {}-byte \
             MTU; reference: mlx5 QP context = {MLX5_QPC_BITS} bits\n",
            p.rtt_us, p.mtu
        );
        s += &format!(
            "{:<16} {:>6} {:>5} {:>8} {:>11} {:>9} {:>8} {:>7} {:>8} {:>12}\n",
            "design",
            "Gb/s",
            "BDP",
            "bitmaps",
            "descriptors",
            "registers",
            "total",
            "bytes",
            "÷ QPC",
            format!("{} QPs", p.qps)
        );
        for r in &self.rows {
            s += &format!(
                "{:<16} {:>6} {:>5} {:>8} {:>11} {:>9} {:>8} {:>7} {:>7.1}% {:>8.0} KiB\n",
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
        s
    }

    /// Writes [`Table::to_json`] to `path`, indented, as `irn nic-state --json` does.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }

    /// The link rates of the rows, in their order.
    pub fn rates(rows: &[Row]) -> Vec<f64> {
        let mut rates: Vec<f64> = Vec::new();
        for r in rows {
            if !rates.contains(&r.gbps) {
                rates.push(r.gbps);
            }
        }
        rates
    }
}

/// Every design at every rate of `args`.
fn rows(args: &Params) -> Result<Vec<Row>, NicStateError> {
    if args.gbps.is_empty() || args.gbps.iter().any(|g| !(g.is_finite() && *g > 0.0)) {
        return Err(NicStateError::Params(
            "--gbps: positive link rates, e.g. 10,40,100",
        ));
    }
    if !(args.rtt_us.is_finite() && args.rtt_us > 0.0) || args.mtu == 0 {
        return Err(NicStateError::Params("--rtt-us and --mtu must be positive"));
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

/// Grouped bars: per design, its added state ÷ the mlx5 QP context at each link rate.
pub fn plot(path: &Path, rows: &[Row]) -> Result<(), PlotError> {
    let rates = &Table::rates(rows);
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
    root.fill(&WHITE).map_err(draw)?;
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
        .map_err(draw)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("% of the QP context")
        .draw()
        .map_err(draw)?;
    // One colour per line rate: the plots' palette, its darker shade of each pair.
    let colors: Vec<RGBColor> = crate::plot::COLORS.iter().step_by(2).copied().collect();
    use plotters::style::text_anchor::{HPos, VPos};
    let above = |size| crate::plot::anchored(size, HPos::Center, VPos::Bottom);
    let centred = |size| crate::plot::anchored(size, HPos::Center, VPos::Top);
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
                .map_err(draw)?;
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
                .map_err(draw)?;
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
                .map_err(draw)?;
        }
        let centre = (di * group) as f64 + 0.5 + rates.len() as f64 / 2.0;
        let (x, y) = chart.backend_coord(&(centre, 0.0));
        body.draw(&Text::new(d.to_string(), (x, y + 8), centred(11)))
            .map_err(draw)?;
    }
    for (gi, g) in rates.iter().enumerate() {
        let x = 70 + 120 * gi as i32;
        key.draw(&Rectangle::new(
            [(x, 10), (x + 12, 22)],
            colors[gi % colors.len()].filled(),
        ))
        .map_err(draw)?;
        key.draw(&Text::new(
            format!("{g} Gb/s"),
            (x + 18, 10),
            ("sans-serif", 12).into_font().color(&BLACK),
        ))
        .map_err(draw)?;
    }
    root.present().map_err(draw)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_rates_give_a_row_per_design_and_irn_grows_with_the_bdp() {
        let t = Table::compute(&Params::default()).expect("valid");
        let designs = RecoveryMode::ALL.len();
        assert_eq!(t.rows.len(), 3 * designs);
        let irn: Vec<&Row> = t.rows.iter().filter(|r| r.design == "irn").collect();
        assert_eq!(irn.len(), 3);
        assert!(irn[0].bdp_packets < irn[1].bdp_packets && irn[1].bdp_packets < irn[2].bdp_packets);
        assert!(
            irn[0].total_bits < irn[2].total_bits,
            "bitmaps span the BDP"
        );
        for r in &t.rows {
            assert_eq!(
                r.total_bits,
                r.bitmap_bits + r.descriptor_bits + r.register_bits
            );
            assert_eq!(r.bytes_per_qp, r.total_bits.div_ceil(8));
        }
        assert_eq!(Table::rates(&t.rows), vec![10.0, 40.0, 100.0]);
        let back = Table::rows_from_json(&t.to_json().to_string(), Path::new("t.json"))
            .expect("reads back");
        assert_eq!(back, t.rows);
        assert_eq!(t.text().lines().count(), 2 + t.rows.len());
    }

    #[test]
    fn parameters_that_mean_nothing_are_refused() {
        for p in [
            Params {
                gbps: vec![],
                ..Params::default()
            },
            Params {
                gbps: vec![40.0, -1.0],
                ..Params::default()
            },
            Params {
                rtt_us: 0.0,
                ..Params::default()
            },
            Params {
                mtu: 0,
                ..Params::default()
            },
        ] {
            assert!(
                matches!(Table::compute(&p), Err(NicStateError::Params(_))),
                "{p:?}"
            );
        }
        let e = Table::rows_from_json("{}", Path::new("x.json")).expect_err("no rows");
        assert!(e
            .to_string()
            .starts_with("x.json: not an `irn nic-state` table"));
    }
}
