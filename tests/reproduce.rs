//! `irn reproduce` as a reader uses it.
//!
//! - `--quick` runs every experiment of `experiments/evaluation.toml` at its reduced scale
//!   and must give every claim it checks the verdict the evaluation records, with the
//!   sizes below: the IRN paper's central claims (E1–E7, E9, E10) at 8 ms of arrivals over
//!   seeds 1–3, each ratio's seeds' least and mean above a bound set against the seed noise
//!   measured over seeds 1–6 (every per-seed bound below all six seeds' ratios, every bound
//!   on the mean two standard deviations of a three-seed mean below the six seeds' mean).
//!   Its report must read: a section per claim, every image inside report.html loading in
//!   headless Chromium, PNGs at 300 dpi of one column or two, and no two texts of a figure
//!   overlapping. Run again, it makes nothing and writes the same claims.
//! - The committed evaluation's JSON (`experiments/`) gives every claim its recorded
//!   verdict, and the committed report (REPORT.md, claims.json) and docs/RESULTS.md's summary
//!   are what that JSON gives, so neither verdicts nor numbers in them can go stale; its
//!   figures, drawn again, have no overlapping text.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::Value;

mod common;
use common::{irn_bin, precondition_missing, text};

const TEST: &str = "reproduce";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("irn-reproduce-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn reproduce(args: &[&str]) -> std::process::Output {
    Command::new(irn_bin())
        .arg("reproduce")
        .arg("--evaluation")
        .arg(root().join("experiments/evaluation.toml"))
        .args(args)
        .output()
        .expect("irn reproduce runs")
}

fn claims(out: &Path) -> Vec<Value> {
    let path = out.join("report/claims.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("claims.json is JSON");
    doc["claims"].as_array().expect("claims").clone()
}

/// Sizes at `--quick`'s scale: (claim, row index, least seed at least, mean at least).
const AT_LEAST: &[(&str, usize, f64, f64)] = &[
    // E1: RoCE+PFC ÷ IRN, slowdown / avg FCT / p99 FCT (seeds 1–6: 1.79 ± 0.13,
    // 1.49 ± 0.08, 1.35 ± 0.07).
    ("E1", 0, 1.4, 1.5),
    ("E1", 1, 1.25, 1.35),
    ("E1", 2, 1.15, 1.25),
    // E2: IRN+PFC ÷ IRN (1.29 ± 0.11, 1.17 ± 0.07, 1.16 ± 0.10).
    ("E2", 0, 1.0, 1.06),
    ("E2", 1, 1.0, 1.03),
    // E3: RoCE ÷ RoCE+PFC (2.97 ± 0.28, 1.82 ± 0.12, 1.76 ± 0.18 with 10 ms of drain; more
    // with the default's 50 ms).
    ("E3", 0, 2.0, 2.4),
    ("E3", 1, 1.35, 1.6),
    ("E3", 2, 1.3, 1.5),
    // E5: IRN no BDP-FC ÷ IRN (3.37 ± 0.36, 2.38 ± 0.20, 1.77 ± 0.15).
    ("E5 BDP-FC", 0, 2.0, 2.5),
    ("E5 BDP-FC", 1, 1.6, 1.9),
    ("E5 BDP-FC", 2, 1.3, 1.5),
    // E5: IRN go-back-N ÷ IRN no BDP-FC on avg FCT (2.61 ± 0.46).
    ("E5 selective repeat", 1, 1.2, 1.6),
    // E4 under DCQCN: RoCE+PFC ÷ IRN (1.18 ± 0.03, 1.24 ± 0.02, 1.17 ± 0.03).
    ("E4 DCQCN", 0, 1.08, 1.12),
    ("E4 DCQCN", 1, 1.15, 1.18),
    ("E4 DCQCN", 2, 1.08, 1.12),
    // RoCE ÷ RoCE+PFC under DCQCN (1.18 ± 0.02, 1.17 ± 0.02).
    ("E4 RoCE without PFC DCQCN", 0, 1.08, 1.12),
    ("E4 RoCE without PFC DCQCN", 1, 1.08, 1.12),
    // AIMD: IRN+PFC ÷ IRN (1.48 ± 0.10, 1.21 ± 0.05).
    ("§4.4.4 AIMD", 0, 1.2, 1.25),
    ("§4.4.4 AIMD", 1, 1.08, 1.12),
    // E7: single-packet p99 / p99.9, RoCE+PFC ÷ IRN (3.12 ± 0.47, 3.03 ± 0.51), DCQCN
    // (1.77 ± 0.27, 1.97 ± 0.27).
    ("E7", 0, 2.0, 2.4),
    ("E7", 1, 2.0, 2.3),
    ("E7 DCQCN", 0, 1.3, 1.45),
    ("E7 DCQCN", 1, 1.4, 1.6),
    // TIMELY (1.59 ± 0.31, 1.88 ± 0.44; smallest seeds 1.35, 1.52).
    ("E7 TIMELY", 0, 1.2, 1.3),
    ("E7 TIMELY", 1, 1.3, 1.45),
    // E6, RoCE+PFC ÷ IRN per scenario (rows: load=0.5, 10 Gb/s, 60 KB, 480 KB buffers, three
    // metrics each; smallest seed of 1–3: 1.78 / 1.35 / 1.13, 1.69 / 1.24 / 1.07,
    // 2.09 / 1.52 / 1.17).
    ("E6", 0, 1.5, 1.6),
    ("E6", 1, 1.2, 1.3),
    ("E6", 2, 1.0, 1.1),
    ("E6", 3, 1.4, 1.6),
    ("E6", 4, 1.1, 1.2),
    ("E6", 5, 1.0, 1.05),
    ("E6", 9, 1.8, 2.0),
    ("E6", 10, 1.3, 1.4),
    ("E6", 11, 1.05, 1.15),
    // E9: Resilient RoCE ÷ IRN (1.07 ± 0.03, 1.88 ± 0.04, 2.33 ± 0.11); ÷ IRN DCQCN
    // (1.39 ± 0.02, 1.46 ± 0.03, 1.23 ± 0.04).
    ("E9", 1, 1.6, 1.75),
    ("E9", 2, 1.9, 2.1),
    ("E9 DCQCN", 0, 1.25, 1.3),
    ("E9 DCQCN", 1, 1.3, 1.38),
    // E10: TCP ÷ IRN slowdown (1.22 ± 0.06); ÷ IRN + AIMD slowdown, avg FCT (1.47 ± 0.04,
    // 1.25 ± 0.02).
    ("E10", 0, 1.08, 1.15),
    ("E10 AIMD", 0, 1.3, 1.42),
    ("E10 AIMD", 1, 1.15, 1.22),
];

/// And where a claim fails by design: (claim, row, greatest seed at most, mean at most). E6
/// at 60 KB buffers, half a BDP, where IRN's cap no longer keeps a port's senders within the
/// buffer (RoCE+PFC ÷ IRN 0.49–0.65 / 0.71–0.84 over seeds 1–3).
const AT_MOST: &[(&str, usize, f64, f64)] = &[("E6", 6, 0.85, 0.8), ("E6", 7, 0.95, 0.92)];

#[test]
fn quick_checks_every_claim_and_its_report_reads() {
    let out = temp("quick");
    let outs = out.to_str().expect("utf-8 path");
    let first = reproduce(&["--quick", "--out", outs, "--jobs", "2", "-q"]);
    assert!(
        first.status.success(),
        "irn reproduce --quick: a claim's verdict changed, or a run failed:\n{}",
        text(&first)
    );
    let judged = claims(&out);
    // Every claim the evaluation checks at this scale was judged.
    let eval = std::fs::read_to_string(root().join("experiments/evaluation.toml"))
        .expect("evaluation.toml");
    let table: toml::Table = toml::from_str(&eval).expect("TOML");
    let skipped: Vec<&str> = table["experiment"]
        .as_array()
        .expect("experiments")
        .iter()
        .filter(|e| e.get("quick_skip").and_then(toml::Value::as_bool) == Some(true))
        .filter_map(|e| e["id"].as_str())
        .collect();
    for c in table["claim"].as_array().expect("claims") {
        let id = c["id"].as_str().expect("id");
        let quick = c
            .get("quick")
            .and_then(toml::Value::as_bool)
            .unwrap_or(true);
        let experiment = c["experiment"].as_str().expect("experiment");
        let expected = quick && !skipped.contains(&experiment);
        let found = judged.iter().any(|j| j["id"] == id);
        assert_eq!(found, expected, "claim {id}: judged at --quick's scale?");
    }
    // The sizes.
    let row = |id: &str, row: usize| -> (Value, f64, f64, f64) {
        let c = judged
            .iter()
            .find(|j| j["id"] == id)
            .unwrap_or_else(|| panic!("claim {id} not judged"));
        let r = &c["rows"][row];
        assert_eq!(r["seeds"], 3, "{id}: over seeds 1–3");
        let s = &r["spread"];
        let f = |k: &str| {
            s[k].as_f64()
                .unwrap_or_else(|| panic!("{id} row {row}: no {k}"))
        };
        (r["scenario"].clone(), f("mean"), f("min"), f("max"))
    };
    for &(id, i, least, mean) in AT_LEAST {
        let (scenario, m, lo, _) = row(id, i);
        assert!(
            lo >= least && m >= mean,
            "{id} row {i} ({scenario}): mean {m:.3}, least seed {lo:.3}; want ≥ {mean}, ≥ {least}"
        );
    }
    for &(id, i, greatest, mean) in AT_MOST {
        let (scenario, m, _, hi) = row(id, i);
        assert!(
            hi <= greatest && m <= mean,
            "{id} row {i} ({scenario}): mean {m:.3}, greatest seed {hi:.3}; want ≤ {mean}, ≤ {greatest}"
        );
    }
    // The paper's experiments finish every flow but where go-back-N collapses without PFC
    // (RoCE, and E5's ablations: IRN with go-back-N, IRN without BDP-FC, which leave a flow
    // or two unfinished by design), and none fails or arrives corrupted.
    for json in [
        "e1-e3/results.json",
        "e4/results.json",
        "e5/results.json",
        "e6/results.json",
        "e7/results.json",
        "e9/results.json",
        "e10/results.json",
    ] {
        let text = std::fs::read_to_string(out.join(json)).expect(json);
        let doc: Value = serde_json::from_str(&text).expect("JSON");
        for r in doc["runs"].as_array().expect("runs") {
            let name = r["name"].as_str().unwrap_or_default();
            assert_eq!(r["flows_failed"], 0, "{json} {name}");
            assert_eq!(r["flows_corrupted"], 0, "{json} {name}");
            let collapses = r["pfc"] == false
                && ["roce", "irn-go-back-n", "irn-no-bdp-fc"]
                    .contains(&r["transport"].as_str().unwrap_or_default());
            if !collapses {
                assert_eq!(
                    r["flows_unfinished"], 0,
                    "{json} {name}: every flow finishes"
                );
            }
        }
    }
    check_report(&out, &judged);
    // Resumed: nothing to make, the same claims.
    let again = reproduce(&["--quick", "--out", outs, "--jobs", "2", "-q"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains(" 0 run(s) to make"),
        "a second run reuses every finished run:\n{}",
        text(&again)
    );
    assert_eq!(claims(&out), judged, "the same claims from the cache");
    let _ = std::fs::remove_dir_all(&out);
}

/// The report as a reader opens it.
fn check_report(out: &Path, judged: &[Value]) {
    let report = out.join("report");
    let md = std::fs::read_to_string(report.join("REPORT.md")).expect("REPORT.md");
    let html = std::fs::read_to_string(report.join("report.html")).expect("report.html");
    for c in judged {
        let id = c["id"].as_str().expect("id");
        assert!(
            md.contains(&format!("\n## {id}\n")),
            "REPORT.md: no section {id}"
        );
        assert!(
            html.contains(&format!("<h2>{}</h2>", id.replace('&', "&amp;"))),
            "report.html: no section {id}"
        );
    }
    // Every image of the HTML is inside it and is a figure.
    let mut images = 0;
    for part in html.split("src=\"data:image/svg+xml;base64,").skip(1) {
        let b64 = &part[..part.find('"').expect("closing quote")];
        let svg = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64");
        let svg = String::from_utf8(svg).expect("UTF-8 SVG");
        assert!(svg.contains("<svg"), "an image that is not an SVG");
        images += 1;
    }
    // Every claim judged on rows has its own figure, inside the HTML and beside REPORT.md.
    for c in judged {
        if c["rows"].as_array().is_some_and(|r| !r.is_empty()) {
            let id = c["id"].as_str().expect("id");
            let name = irn_report::report::anchor(id);
            let svg = format!("figures/{name}.svg");
            assert!(report.join(&svg).is_file(), "claim {id}: no {svg}");
            assert!(
                html.contains(&format!("alt=\"{svg}\"")),
                "claim {id}: {svg} not in report.html"
            );
            assert!(
                md.contains(&format!("(figures/{name}.png)")),
                "claim {id}: not in REPORT.md"
            );
        }
    }
    assert!(
        images >= judged.len(),
        "{images} images for {} claims",
        judged.len()
    );
    // Every figure: no two texts overlap; its PNG prints one or two columns at 300 dpi.
    let mut svgs = Vec::new();
    collect(out, "svg", &mut svgs);
    assert!(svgs.len() >= judged.len(), "{} figures", svgs.len());
    let mut overlapping = Vec::new();
    for svg in &svgs {
        let text = std::fs::read_to_string(svg).expect("svg");
        for (a, b) in irn_report::figure::text_overlaps(&text) {
            overlapping.push(format!("{}: {:?} over {:?}", svg.display(), a.text, b.text));
        }
        let png = std::fs::read(svg.with_extension("png"))
            .unwrap_or_else(|e| panic!("{}: no PNG beside it: {e}", svg.display()));
        assert_eq!(&png[1..4], b"PNG");
        let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
        assert!(
            width == 1050 || width == 2100,
            "{}: {width} px wide",
            svg.display()
        );
    }
    assert!(
        overlapping.is_empty(),
        "overlapping text:\n{}",
        overlapping.join("\n")
    );
    chromium_loads(&report.join("report.html"), images);
}

fn collect(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() && !p.ends_with(".cache") {
            collect(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// Opens the report in headless Chromium: every image decoded (the page counts them into its
/// body's attributes once loaded), and a screenshot taken.
fn chromium_loads(html: &Path, images: usize) {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        precondition_missing(TEST, "no chromium (scripts/install-test-deps installs it)");
        return;
    };
    let url = format!("file://{}", html.display());
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--virtual-time-budget=10000",
    ];
    let dom = Command::new(chromium)
        .args(flags)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium runs");
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom_text.contains(&format!("data-images=\"{images}\"")),
        "chromium counted other images than the {images} inside the page:\n{}",
        &dom_text[..dom_text.len().min(600)]
    );
    assert!(
        dom_text.contains("data-broken=\"0\""),
        "an image of the report does not load in chromium"
    );
    let shot = html.with_file_name("screenshot.png");
    let s = Command::new(chromium)
        .args(flags)
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,4000")
        .arg(&url)
        .output()
        .expect("chromium runs");
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}): {}", text(&s)));
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn the_committed_evaluation_gives_every_claim_its_recorded_verdict() {
    let out = temp("committed");
    let eval = std::fs::read_to_string(root().join("experiments/evaluation.toml"))
        .expect("evaluation.toml");
    let table: toml::Table = toml::from_str(&eval).expect("TOML");
    for e in table["experiment"].as_array().expect("experiments") {
        let json = e["json"].as_str().expect("json");
        let to = out.join(json);
        std::fs::create_dir_all(to.parent().expect("dir")).expect("mkdir");
        std::fs::copy(root().join("experiments").join(json), &to)
            .unwrap_or_else(|err| panic!("experiments/{json}: {err}"));
    }
    let o = reproduce(&["--report-only", "--out", out.to_str().expect("utf-8")]);
    assert!(
        o.status.success(),
        "a claim's verdict on the committed JSON is not the one evaluation.toml records:\n{}",
        text(&o)
    );
    let judged = claims(&out);
    assert_eq!(
        judged.len(),
        table["claim"].as_array().expect("claims").len(),
        "every claim judged"
    );
    for c in &judged {
        assert_ne!(c["verdict"], "not-measured", "claim {}: no rows", c["id"]);
    }
    // The committed report and docs/RESULTS.md's summary are the table this JSON gives.
    let summary = |md: &str| -> Vec<String> {
        md.lines()
            .filter(|l| l.starts_with("| ["))
            .map(|l| l.replace("](../experiments/report/REPORT.md#", "](#"))
            .collect()
    };
    let made = summary(&std::fs::read_to_string(out.join("report/REPORT.md")).expect("REPORT.md"));
    let committed = std::fs::read_to_string(root().join("experiments/report/REPORT.md"))
        .expect("experiments/report/REPORT.md");
    let bless =
        "make them again: cargo run --release -- reproduce --report-only --out experiments, \
                 and copy the summary table into docs/RESULTS.md";
    assert_eq!(
        summary(&committed),
        made,
        "experiments/report/REPORT.md is stale: {bless}"
    );
    let results = std::fs::read_to_string(root().join("docs/RESULTS.md")).expect("RESULTS.md");
    let block = results
        .split("<!-- claims: experiments/report/REPORT.md -->")
        .nth(1)
        .expect("docs/RESULTS.md has the claims marker");
    let block = &block[..block.find("\n\n").unwrap_or(block.len())];
    assert_eq!(
        summary(block),
        made,
        "docs/RESULTS.md's summary is stale: {bless}"
    );
    // And the committed report whole: its claims and every section (the line naming the
    // command that made it aside).
    let body = |md: &str| -> Vec<String> {
        md.lines()
            .filter(|l| !l.starts_with("Made by `"))
            .map(str::to_string)
            .collect()
    };
    let remade = std::fs::read_to_string(out.join("report/REPORT.md")).expect("REPORT.md");
    assert!(
        body(&committed) == body(&remade),
        "experiments/report/REPORT.md is stale: {bless}"
    );
    let claims_of = |p: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).expect("claims.json")).expect("JSON")
    };
    assert_eq!(
        claims_of(&root().join("experiments/report/claims.json")),
        claims_of(&out.join("report/claims.json")),
        "experiments/report/claims.json is stale: {bless}"
    );
    // Every figure of the committed evaluation, drawn again: no two texts overlap.
    let mut svgs = Vec::new();
    collect(&out, "svg", &mut svgs);
    assert!(svgs.len() > judged.len(), "{} figures", svgs.len());
    for svg in &svgs {
        let text = std::fs::read_to_string(svg).expect("svg");
        let overlaps = irn_report::figure::text_overlaps(&text);
        assert!(overlaps.is_empty(), "{}: {overlaps:?}", svg.display());
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_wrong_name_or_an_unknown_claim_is_an_error_naming_it() {
    let o = reproduce(&["--only", "E99", "--out", "/nonexistent/x"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("E99") && t.contains("e1-e3"), "{t}");
    let out = temp("slurm");
    let script = out.join("run.sh");
    // `--slurm` for the experiments of `only`, at quick scale.
    let slurm = |only: &str| {
        reproduce(&[
            "--only",
            only,
            "--quick",
            "--out",
            out.to_str().expect("utf-8"),
            "--slurm",
            script.to_str().expect("utf-8"),
        ])
    };
    let o = slurm("E1,e13");
    assert!(o.status.success(), "{}", text(&o));
    let s = std::fs::read_to_string(&script).expect("script");
    assert!(s.contains("ids=(e1-e3 e13)"), "{s}");
    assert!(
        s.contains("sbatch --parsable --array=0-$((${#ids[@]} - 1))"),
        "{s}"
    );
    assert!(s.contains("--dependency=afterok:"), "{s}");
    // The array task's command: the experiment of its index, at the scale asked for.
    let exec = s
        .lines()
        .skip_while(|l| !l.starts_with("exec "))
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        exec.contains(" --quick ")
            && exec.contains("--no-report")
            && exec.contains("--only \"${ids[$SLURM_ARRAY_TASK_ID]}\""),
        "{exec}"
    );
    // The report job's: every experiment, quoted for the shell --wrap starts.
    assert!(
        s.contains("wrap=$(printf '%q ' \"$IRN\" reproduce") && s.contains("--only e1-e3,e13 -q)"),
        "{s}"
    );
    // Nothing to run is an error, not an empty array.
    let o = slurm("e1-e3-long");
    assert!(!o.status.success(), "an empty array");
    assert!(text(&o).contains("no experiment to run"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&out);
}
