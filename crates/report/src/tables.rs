//! The tables `irn sim` and `irn merge` print: an experiment's runs with their ratios to the
//! baseline, each configuration over its seeds, the traffic classes side by side, what the
//! configuration monitor found, and Pingmesh's summary.

use std::io::{self, Write};

use irn_sim::metrics::{PingmeshReport, RunSummary};

/// Every run: flows, the paper's three metrics, drops, pauses and wall time, with the
/// ratios to its baseline; then, where they apply, the table over seeds, the classes, the
/// configuration monitor's findings and Pingmesh's summaries.
pub fn experiment(out: &mut dyn Write, runs: &[RunSummary], base: Option<&str>) -> io::Result<()> {
    let label = crate::plot::baseline_label(runs, base);
    writeln!(
        out,
        "{:<22} {:>8} {:>10} {:>12} {:>12} {:>9} {:>8} {:>8}   {}",
        "run",
        "flows",
        "avg slowdn",
        "avg FCT µs",
        "p99 FCT µs",
        "drop rate",
        "pauses",
        "wall s",
        label.map_or(String::new(), |l| format!(
            "÷ {l}: slowdown / avg FCT / p99 FCT"
        ))
    )?;
    for r in runs {
        let ratio = crate::plot::baseline_of(runs, r, base).map_or(String::new(), |b| {
            let q = |a: f64, c: f64| {
                if c > 0.0 {
                    format!("{:.2}", a / c)
                } else {
                    "-".into()
                }
            };
            format!(
                "{} / {} / {}",
                q(r.all.avg_slowdown, b.all.avg_slowdown),
                q(r.all.avg_fct_us, b.all.avg_fct_us),
                q(r.all.p99_fct_us, b.all.p99_fct_us)
            )
        });
        let mut unfinished = if r.flows_unfinished + r.flows_failed > 0 {
            format!(
                " ({} unfinished, {} failed)",
                r.flows_unfinished, r.flows_failed
            )
        } else {
            String::new()
        };
        if r.deadlocked {
            unfinished += &format!(
                " DEADLOCK at {:.1} ms{}: {}",
                r.safety.deadlock_at_ms.unwrap_or(0.0),
                if r.safety.deadlock_at_end {
                    ", still at the end"
                } else {
                    ""
                },
                r.deadlock_cycle.join(" → ")
            );
        }
        if r.watchdog_triggers > 0 {
            unfinished += &format!(
                " watchdogs: {} NIC, {} switch",
                r.safety.counts.nic_watchdog, r.safety.counts.switch_watchdog
            );
        }
        writeln!(
            out,
            "{:<22} {:>8} {:>10.3} {:>12.1} {:>12.1} {:>8.3}% {:>8} {:>8.1}   {}{}",
            r.name,
            r.flows_completed,
            r.all.avg_slowdown,
            r.all.avg_fct_us,
            r.all.p99_fct_us,
            r.drop_rate * 100.0,
            r.pause_frames,
            r.wall_s,
            ratio,
            unfinished
        )?;
    }
    if crate::seeds::has_seeds(runs) {
        writeln!(out)?;
        over_seeds(out, runs, base)?;
    }
    if runs.iter().any(|r| !r.classes.is_empty()) {
        classes(out, runs)?;
    }
    for r in runs.iter().filter(|r| !r.safety.config_findings.is_empty()) {
        writeln!(out, "\n{}: the configuration monitor found", r.name)?;
        for f in &r.safety.config_findings {
            let port = f.port.map_or(String::new(), |p| format!(" port {p}"));
            let cleared = f.cleared_ms.map_or("still at the end".to_string(), |c| {
                format!("set right by {c:.2} ms")
            });
            writeln!(
                out,
                "  {}{port} {}: runs {}, intended {}; found at {:.2} ms, {cleared}",
                f.node, f.key, f.running, f.intended, f.found_ms
            )?;
        }
    }
    for r in runs {
        if let Some(pm) = &r.pingmesh {
            pingmesh(out, &r.name, pm)?;
        }
    }
    Ok(())
}

/// Every configuration over its seeds: the mean and, in brackets, the range of its flows,
/// the paper's three metrics, its drop rate and pause frames, and of its ratios to its
/// baseline (each taken within one seed).
pub fn over_seeds(out: &mut dyn Write, runs: &[RunSummary], base: Option<&str>) -> io::Result<()> {
    let groups = crate::seeds::over_seeds(runs, base);
    let width = groups
        .iter()
        .map(|g| g.name.chars().count())
        .fold(22, usize::max);
    writeln!(
        out,
        "over seeds: mean (least–greatest)\n{:<width$} {:>7} {:>24} {:>26} {:>26} {:>22} {:>8}   {}",
        "run",
        "seeds",
        "avg slowdown",
        "avg FCT µs",
        "p99 FCT µs",
        "drop rate %",
        "pauses",
        crate::plot::baseline_label(runs, base)
            .map_or(String::new(), |l| format!("÷ {l}: slowdown / avg FCT / p99 FCT"))
    )?;
    let show = |g: &crate::seeds::SeedGroup, key: &str, digits: usize, scale: f64| {
        g.metric(key).map_or("-".to_string(), |s| {
            crate::seeds::Spread {
                mean: s.mean * scale,
                min: s.min * scale,
                max: s.max * scale,
            }
            .show(digits)
        })
    };
    for g in &groups {
        // The three ratios under `prefix` (`""`, or `"with_unfinished."`): slowdown / FCTs.
        let three = |prefix: &str| {
            let r = |k: &str| {
                g.ratios
                    .get(&format!("{prefix}{k}"))
                    .map_or("-".to_string(), |s| s.show(2))
            };
            format!(
                "{} / {} / {}",
                r("avg_slowdown"),
                r("avg_fct_us"),
                r("p99_fct_us")
            )
        };
        let ratios = if g.ratios.is_empty() {
            String::new()
        } else {
            three("")
        };
        let mut left = Vec::new();
        for (key, what) in [
            ("flows_unfinished", "unfinished"),
            ("flows_failed", "failed"),
        ] {
            if let Some(u) = g.metric(key).filter(|u| u.max > 0.0) {
                left.push(format!("{what} {}", u.show(1)));
            }
        }
        if g.ratios.contains_key("with_unfinished.avg_slowdown") {
            left.push(format!("counting them: {}", three("with_unfinished.")));
        }
        if let Some(d) = g.metric("deadlocked").filter(|d| d.max > 0.0) {
            let n = (d.mean * g.seeds.len() as f64).round();
            left.push(format!("deadlocked in {n} of {}", g.seeds.len()));
        }
        let unfinished = if left.is_empty() {
            String::new()
        } else {
            format!(" ({})", left.join(", "))
        };
        let line = format!(
            "{:<width$} {:>7} {:>24} {:>26} {:>26} {:>22} {:>8}   {}{}",
            g.name,
            g.seeds.len(),
            show(g, "avg_slowdown", 3, 1.0),
            show(g, "avg_fct_us", 1, 1.0),
            show(g, "p99_fct_us", 1, 1.0),
            show(g, "drop_rate", 3, 100.0),
            show(g, "pause_frames", 0, 1.0),
            ratios,
            unfinished
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Per traffic class of each run with `[[traffic]]`: its transport and priority, its flows'
/// slowdown and FCTs, its goodput, and the pause time its senders saw.
pub fn classes(out: &mut dyn Write, runs: &[RunSummary]) -> io::Result<()> {
    writeln!(
        out,
        "\n{:<22} {:<20} {:<10} {:>4} {:>7} {:>10} {:>12} {:>12} {:>9} {:>9} {:>11}",
        "run",
        "class",
        "transport",
        "prio",
        "flows",
        "avg slowdn",
        "avg FCT µs",
        "p99 FCT µs",
        "Gb/s",
        "resent",
        "paused µs"
    )?;
    for r in runs {
        for c in &r.classes {
            let unfinished = if c.flows_unfinished + c.flows_failed > 0 {
                format!(
                    " ({} unfinished, {} failed)",
                    c.flows_unfinished, c.flows_failed
                )
            } else {
                String::new()
            };
            writeln!(
                out,
                "{:<22} {:<20} {:<10} {:>3}{} {:>7} {:>10.3} {:>12.1} {:>12.1} {:>9.2} {:>9} {:>11.1}{}",
                r.name,
                c.name,
                c.transport,
                c.priority,
                if c.lossless { "L" } else { " " },
                c.flows_completed,
                c.stats.avg_slowdown,
                c.stats.avg_fct_us,
                c.stats.p99_fct_us,
                c.goodput_gbps,
                c.retransmissions,
                c.paused_us,
                unfinished
            )?;
        }
    }
    Ok(())
}

/// Pingmesh's summary of one run: RTT percentiles per level, the errors, the suspects.
pub fn pingmesh(out: &mut dyn Write, run: &str, pm: &PingmeshReport) -> io::Result<()> {
    writeln!(
        out,
        "\npingmesh, {run}: {} probes, {} failed",
        pm.probes, pm.failed
    )?;
    writeln!(
        out,
        "  level    probes  failed   p50 µs   p90 µs   p99 µs p99.9 µs   max µs"
    )?;
    for l in &pm.levels {
        writeln!(
            out,
            "  {:<7} {:>7} {:>7} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            l.level, l.probes, l.failed, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
        )?;
    }
    if !pm.errors.is_empty() {
        let e: Vec<String> = pm.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "  errors: {}", e.join(", "))?;
    }
    if pm.suspects.is_empty() {
        writeln!(out, "  suspects: none")?;
    }
    for s in &pm.suspects {
        writeln!(out, "  suspect: server {}: {}", s.server, s.reason)?;
    }
    Ok(())
}
