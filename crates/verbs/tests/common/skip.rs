//! What a test does when it cannot run here, shared by the verbs crate's tests and the
//! workspace's (`tests/common` includes this file by path).

/// A test cannot run here: its precondition (`why`) is missing. In CI (`CI=true`, where the
/// machine is root and has everything the tests need) that is a failure, never a pass;
/// elsewhere the test returns after saying so loudly. Call it and `return`. The harness hides
/// a passing test's output, so the skip is also appended to the file `IRN_SKIP_LOG` names
/// when set: `scripts/test` ends with the count of skipped tests and their reasons.
pub fn precondition_missing(test: &str, why: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(!ci, "{test}: precondition missing in CI: {why}");
    eprintln!(
        "\n*** SKIPPED {test}: {why} ***\n*** (it did not run: with CI=true this is a failure) ***\n"
    );
    if let Some(log) = std::env::var_os("IRN_SKIP_LOG") {
        use std::io::Write;
        let line = format!("{test}: {why}\n");
        // One write of one line to a file opened for appending: lines of tests skipping at
        // once do not interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}
