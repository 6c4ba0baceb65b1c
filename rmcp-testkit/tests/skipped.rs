//! The skip summary: prints which tests of this `cargo test` run skipped, and why (what
//! rmcp-testkit's `missing` and `skip` recorded in the skip log), then drops those lines.
//!
//! It is a test without libtest's harness, so what it prints is shown; and it is the last
//! test binary `cargo test --workspace` runs: cargo runs packages in name order (rmcp-testkit
//! comes last) and a package's integration tests after its library's, and the workspace's
//! libraries declare no doc-tests (`doctest = false`), so nothing follows it.

use rmcp_testkit::skip;

fn main() {
    // `cargo test -- --list` and the like ask what tests there are: this binary has none.
    if std::env::args().skip(1).any(|a| a == "--list") {
        return;
    }
    let log = skip::log();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let id = skip::run_id();
    print!("{}", skip::summary(&skip::skips_of_run(&text, id)));
    // Keep only the lines of runs still going (another cargo test at the same time); a
    // targeted run that never reaches this binary leaves lines that the next one drops.
    let kept: String = text
        .lines()
        .filter(|l| {
            l.split('\t')
                .next()
                .and_then(|r| r.parse::<u32>().ok())
                .is_some_and(|r| r != id && std::path::Path::new(&format!("/proc/{r}")).exists())
        })
        .map(|l| format!("{l}\n"))
        .collect();
    if kept.is_empty() {
        let _ = std::fs::remove_file(&log);
    } else {
        let _ = std::fs::write(&log, kept);
    }
}
