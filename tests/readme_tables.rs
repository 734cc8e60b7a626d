//! The tables the experiments' READMEs and docs/RESULTS.md quote are the committed JSON's, as
//! `irn merge` prints them: a table is a fenced block under a marker naming its source,
//!
//! ````text
//! <!-- table: experiments/e4/results.json --over-seeds -->
//! ```text
//! …what `irn merge OUT experiments/e4/results.json --over-seeds` prints…
//! ```
//! ````
//!
//! and this test fails when a block differs from what its JSON gives now (a rerun whose
//! README was not updated, or a README edited by hand). `IRN_BLESS=1 cargo test --test
//! readme_tables` rewrites every block from its JSON instead.

use std::path::{Path, PathBuf};
use std::process::Command;

const MARK: &str = "<!-- table: ";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents that quote tables: every experiment's README and docs/RESULTS.md.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("experiments"))
        .expect("experiments/")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("README.md"))
        .filter(|p| p.exists())
        .collect();
    docs.push(root().join("docs/RESULTS.md"));
    docs.sort();
    docs
}

/// A marker's arguments, split as a shell would.
fn words(text: &str, doc: &Path) -> Vec<String> {
    shlex::split(text).unwrap_or_else(|| panic!("{}: unbalanced quotes in `{text}`", doc.display()))
}

/// What `irn merge` prints for a marker's arguments (relative paths from the repository root).
fn table(args: &[String], scratch: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_irn"))
        .current_dir(root())
        .arg("merge")
        .arg(scratch.join("merged.json"))
        .args(args)
        .output()
        .expect("irn runs");
    assert!(
        out.status.success() || !out.stdout.is_empty(),
        "irn merge {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 table")
}

/// Each marked block of `text`: the marker's arguments and the byte range of the block's
/// contents (between its fences).
fn blocks(text: &str, doc: &Path) -> Vec<(Vec<String>, std::ops::Range<usize>)> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find(MARK) {
        let start = at + i + MARK.len();
        let end = start
            + text[start..]
                .find("-->")
                .unwrap_or_else(|| panic!("{}: a table marker is not closed", doc.display()));
        let args = words(&text[start..end], doc);
        let after = end + 3;
        let fence = "\n```text\n";
        assert!(
            text[after..].starts_with(fence),
            "{}: the table marker `{}` is not followed by a ```text block",
            doc.display(),
            text[start..end].trim()
        );
        let body = after + fence.len();
        let close = body
            + text[body..]
                .find("```")
                .unwrap_or_else(|| panic!("{}: a table block is not closed", doc.display()));
        found.push((args, body..close));
        at = close;
    }
    found
}

#[test]
fn every_quoted_table_is_its_json_as_irn_prints_it() {
    let scratch = std::env::temp_dir().join(format!("irn-readme-tables-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    let bless = std::env::var_os("IRN_BLESS").is_some();
    let mut stale = Vec::new();
    let mut count = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("readable");
        let mut fixed = text.clone();
        // Back to front, so that earlier ranges stay valid while later blocks are replaced.
        for (args, range) in blocks(&text, &doc).into_iter().rev() {
            count += 1;
            let want = table(&args, &scratch);
            if text[range.clone()] != want {
                stale.push(format!("{}: table of {}", doc.display(), args.join(" ")));
                fixed.replace_range(range, &want);
            }
        }
        if bless && fixed != text {
            std::fs::write(&doc, fixed).expect("writable");
        }
    }
    std::fs::remove_dir_all(&scratch).ok();
    assert!(count > 0, "no document quotes a table");
    assert!(
        bless || stale.is_empty(),
        "tables that differ from their JSON (IRN_BLESS=1 cargo test --test readme_tables \
         rewrites them):\n{}",
        stale.join("\n")
    );
}

#[test]
fn marker_arguments_split_as_a_shell_would() {
    assert_eq!(
        words(
            r#"experiments/e5/results.json --over-seeds --baseline "RoCE+PFC, no misses" "#,
            Path::new("test")
        ),
        [
            "experiments/e5/results.json",
            "--over-seeds",
            "--baseline",
            "RoCE+PFC, no misses"
        ]
    );
}
