//! Skips: a test whose prerequisite is missing says why and returns, and where
//! prerequisites are required (`RMCP_REQUIRE_REAL_HIP=1` or `CI` set) fails instead. Every
//! skip is also appended to a log under target/ (one line each, tagged with the `cargo test`
//! process that ran it), which rmcp-testkit's last test, tests/skipped.rs, prints as a
//! summary at the end of `cargo test --workspace`: cargo shows a skipped test as `ok` and
//! hides what it printed.

use std::io::Write as _;
use std::path::PathBuf;

/// Whether a missing prerequisite fails the test instead of skipping it:
/// `RMCP_REQUIRE_REAL_HIP=1` or `CI` set (CI installs everything, so a skip there is a bug).
pub fn prerequisites_required() -> bool {
    std::env::var("RMCP_REQUIRE_REAL_HIP").as_deref() == Ok("1") || std::env::var_os("CI").is_some()
}

/// A prerequisite the test needs is missing: `what` says which, and how to get it (e.g. "no
/// hipcc (apt-get install hipcc)"). Where prerequisites are required this fails the test;
/// elsewhere it records the skip (see [`skip`]) and the caller returns.
#[track_caller]
pub fn missing(what: &str) {
    assert!(
        !prerequisites_required(),
        "RMCP_REQUIRE_REAL_HIP=1 or CI is set, but a prerequisite is missing: {what}"
    );
    skip(what);
}

/// The test (or a part of it) does not run here, for `why`: shown at once on stderr (past
/// libtest's capture, so a targeted run shows it too) and recorded for the summary. For
/// situations that are no missing prerequisite (a GPU present, not root); a missing
/// prerequisite goes through [`missing`].
pub fn skip(why: &str) {
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(str::to_owned)
        .unwrap_or_else(binary_name);
    let why = why.replace(['\n', '\t'], " ");
    // Straight to the descriptor: eprintln! output is captured by libtest and shown only
    // for failed tests.
    let _ = std::io::stderr().write_all(format!("skipped: {test}: {why}\n").as_bytes());
    let line = format!("{}\t{test}\t{why}\n", run_id());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log())
    {
        // One write of one short line to an O_APPEND file: lines of test binaries running
        // side by side do not interleave.
        let _ = f.write_all(line.as_bytes());
    }
}

/// The skip log: target/<profile>/rmcp-skipped.log (rmcp-testkit's build script names it).
pub fn log() -> PathBuf {
    PathBuf::from(env!("RMCP_SKIP_LOG"))
}

/// What ties the skips of one `cargo test` run together: the process id of that cargo,
/// the parent of every test binary it runs.
pub fn run_id() -> u32 {
    std::os::unix::process::parent_id()
}

fn binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| s.rsplit_once('-').map_or(s.clone(), |(n, _)| n.to_owned()))
        .unwrap_or_else(|| "?".into())
}

/// The skips of run `id` in the log's `text`: (test, why) pairs, in the order recorded.
pub fn skips_of_run(text: &str, id: u32) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let (run, test, why) = (f.next()?, f.next()?, f.next()?);
            (run.parse() == Ok(id)).then(|| (test.to_owned(), why.to_owned()))
        })
        .collect()
}

/// The summary of `skips`: one line with the count, then one line per reason with the
/// tests it skipped; "no test skipped" when there were none.
pub fn summary(skips: &[(String, String)]) -> String {
    if skips.is_empty() {
        return "rmcp: no test skipped\n".into();
    }
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for (test, why) in skips {
        match reasons.iter_mut().find(|(w, _)| w == why) {
            Some((_, tests)) => tests.push(test),
            None => reasons.push((why, vec![test])),
        }
    }
    let n = skips.len();
    let mut s = format!(
        "rmcp: {n} test{} skipped (README, \"The two commands\", names what they need):\n",
        if n == 1 { "" } else { "s" }
    );
    for (why, tests) in reasons {
        let shown: Vec<&str> = tests.iter().copied().take(3).collect();
        let more = tests.len() - shown.len();
        s.push_str(&format!(
            "  {:>3}  {why}: {}",
            tests.len(),
            shown.join(", ")
        ));
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_one_run_and_groups_reasons() {
        let log = "7\ta::x\tno hipcc (apt-get install hipcc)\n\
                   8\ta::old\tno strace\n\
                   7\tb::y\tno strace (apt-get install strace)\n\
                   7\ta::z\tno hipcc (apt-get install hipcc)\n\
                   garbage\n";
        let skips = skips_of_run(log, 7);
        assert_eq!(skips.len(), 3);
        let s = summary(&skips);
        assert_eq!(
            s,
            "rmcp: 3 tests skipped (README, \"The two commands\", names what they need):\n\
             \x20   2  no hipcc (apt-get install hipcc): a::x, a::z\n\
             \x20   1  no strace (apt-get install strace): b::y\n"
        );
        assert_eq!(summary(&[]), "rmcp: no test skipped\n");
        let many: Vec<_> = (0..5).map(|i| (format!("t{i}"), "w".to_owned())).collect();
        assert!(summary(&many).contains("  5  w: t0, t1, t2 and 2 more\n"));
    }
}
