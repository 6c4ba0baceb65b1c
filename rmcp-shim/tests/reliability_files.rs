//! The files the shim opens never make it wait, and the program's descriptors stay the
//! program's (issue 13):
//! - RMCP_LOG_FILE, RMCP_STATS_FILE and a KFD properties file that are FIFOs (no reader,
//!   or a reader that never reads) never block a HIP call or the exit;
//! - the log file is opened only when a line is written, and never on descriptors 0-2;
//! - the shim's lines never land in a data file the program put on descriptor 2.
//!
//! Every run is killed after 20 s, so a hang fails the test instead of CI.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp_testkit::*;

const LIMIT: Duration = Duration::from_secs(20);
/// hipHostMallocNonCoherent: the rewrite the runtime receives on the rdna1 fixture.
const NC: u32 = 0x8000_0000;

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// The probe's `rc=` answers, in order.
fn rcs(out: &Out) -> Vec<String> {
    out.stdout
        .lines()
        .filter_map(|l| l.split(' ').find(|w| w.starts_with("rc=")))
        .map(str::to_string)
        .collect()
}

/// The probe with `steps`, with the shim and without; checks that both exit 0 with the
/// same answers and that the shim did rewrite. Returns the run with the shim.
fn probe_like_without(run: impl Fn() -> Run, steps: &[&str]) -> Out {
    let without = run().no_shim().args(steps).run_within(LIMIT);
    without.assert_success();
    let with = run().args(steps).run_within(LIMIT);
    with.assert_success();
    assert_eq!(rcs(&with), rcs(&without), "stderr:\n{}", with.stderr);
    assert!(
        with.allocs().contains(&("hipHostMalloc".into(), NC)),
        "the shim rewrote nothing: {:?}\nstderr:\n{}",
        with.allocs(),
        with.stderr
    );
    with
}

#[test]
fn a_fifo_as_the_log_file_never_blocks() {
    let scratch = tempfile::tempdir().unwrap();
    let fifo = scratch.path().join("log.fifo");
    mkfifo(&fifo);
    // warn: nothing is written, so the FIFO is never even opened. trace: lines are
    // written; with no reader it cannot be opened without waiting, so the log goes to
    // stderr after one warning.
    for level in ["warn", "trace"] {
        let with = probe_like_without(
            || {
                Run::probe(6)
                    .env("RMCP_LOG", level)
                    .env("RMCP_LOG_FILE", &fifo)
            },
            &["hipHostMalloc:4096:0", "hipMalloc:64"],
        );
        let about: Vec<_> = with.stderr_lines("RMCP_LOG_FILE");
        if level == "trace" {
            assert_eq!(about.len(), 1, "{}", with.stderr);
            assert!(about[0].contains("logging to stderr instead"), "{about:?}");
            assert!(!with.stderr_lines(" trace: hipMalloc ").is_empty());
        } else {
            assert!(about.is_empty(), "{}", with.stderr);
        }
    }
}

#[test]
fn a_fifo_whose_reader_never_reads_drops_lines_instead_of_waiting() {
    let scratch = tempfile::tempdir().unwrap();
    let fifo = scratch.path().join("log.fifo");
    mkfifo(&fifo);
    // A reader that never reads: the pipe (64 KiB) fills after some hundreds of lines.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let steps = ["hipHostMalloc:0:0:20000", "hipMalloc:4096:0:100"];
    let run = || {
        Run::new(6, &nomem_client())
            .env("RMCP_LOG", "trace")
            .env("RMCP_LOG_FILE", &fifo)
            .env_remove("FAKEHIP_RECORD")
            .args(steps)
    };
    let without = run().no_shim().run_within(LIMIT);
    let with = run().run_within(LIMIT);
    with.assert_success();
    let answers = |o: &Out| -> Vec<String> {
        o.stdout
            .lines()
            .filter(|l| !l.contains("allocations="))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(answers(&with), answers(&without));
    assert_eq!(with.stderr, "", "nothing on stderr: the lines were dropped");
    drop(reader);
}

/// tests/fixtures/rdna1 copied, with a node 2 whose properties file is a FIFO.
fn topology_with_a_fifo(dir: &Path) -> PathBuf {
    let root = dir.join("topology");
    let st = std::process::Command::new("cp")
        .arg("-r")
        .arg(fixture("rdna1"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success());
    let node = root.join("nodes/2");
    std::fs::create_dir_all(&node).unwrap();
    mkfifo(&node.join("properties"));
    root
}

#[test]
fn a_fifo_in_the_kfd_topology_never_blocks() {
    let scratch = tempfile::tempdir().unwrap();
    let root = topology_with_a_fifo(scratch.path());
    // The GPU of node 1 is still found (probe_like_without checks the rewrite); node 2 is
    // a problem noted, not a wait.
    probe_like_without(
        || Run::probe(6).env("RMCP_SYSFS_ROOT", &root),
        &["hipHostMalloc:4096:0"],
    );
}

#[test]
fn a_fifo_as_the_stats_file_never_blocks_the_exit() {
    let scratch = tempfile::tempdir().unwrap();
    let fifo = scratch.path().join("stats.fifo");
    mkfifo(&fifo);
    let with = probe_like_without(
        || Run::probe(6).env("RMCP_STATS_FILE", &fifo),
        &["hipHostMalloc:4096:0"],
    );
    assert!(
        with.stderr.contains("{\n  \"rmcp\""),
        "the report goes to stderr: {}",
        with.stderr
    );
    assert_eq!(
        with.stderr_lines("RMCP_STATS_FILE").len(),
        1,
        "{}",
        with.stderr
    );
}

#[test]
fn the_log_file_is_opened_only_when_a_line_is_written() {
    let scratch = tempfile::tempdir().unwrap();
    for (level, written) in [("off", false), ("warn", false), ("debug", true)] {
        let log = scratch.path().join(format!("{level}.log"));
        Run::probe(6)
            .env("RMCP_LOG", level)
            .env("RMCP_LOG_FILE", &log)
            .args(["hipHostMalloc:4096:0"])
            .run_within(LIMIT)
            .assert_success();
        assert_eq!(log.exists(), written, "RMCP_LOG={level}");
    }
}

/// fdclient with `steps`, with the shim or without, at RMCP_LOG=trace, RMCP_STATS=1 and a
/// bad RMCP_MODE (a warning on the first call).
fn fdclient(shim: bool, extra: &[(&str, &Path)], steps: &[String]) -> Out {
    // No record: the fake runtime would open it on the descriptor the program closed.
    let mut r = Run::new(6, &fd_client())
        .env_remove("FAKEHIP_RECORD")
        .env("RMCP_LOG", "trace")
        .env("RMCP_STATS", "1")
        .env("RMCP_MODE", "sometimes")
        .args(steps);
    for (k, v) in extra {
        r = r.env(k, v);
    }
    if !shim {
        r = r.no_shim();
    }
    r.run_within(LIMIT)
}

#[test]
fn with_stdout_closed_the_programs_output_never_reaches_the_log() {
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("rmcp.log");
    let steps = ["close:1", "hip", "say:program-output"].map(String::from);
    let without = fdclient(false, &[("RMCP_LOG_FILE", &log)], &steps);
    let with = fdclient(true, &[("RMCP_LOG_FILE", &log)], &steps);
    // The program's write to its closed stdout fails, with or without the shim.
    assert_eq!(without.status.code(), Some(1), "{without:?}");
    assert_eq!(with.status, without.status, "stderr:\n{}", with.stderr);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("RMCP_MODE"), "the shim logged: {text}");
    assert!(
        text.lines().all(|l| l.starts_with("rmcp[")),
        "the program's output is in the shim's log:\n{text}"
    );
}

/// The steps that put a data file on descriptor 2 (closed first unless `closed_at_start`),
/// make the first HIP call (a warning) and write the program's data.
fn data_steps(data: &Path, closed_at_start: bool) -> Vec<String> {
    let mut steps = vec![
        format!("open:{}", data.display()),
        "hip".to_string(),
        "data:program-data".to_string(),
    ];
    if !closed_at_start {
        steps.insert(0, "close:2".to_string());
    }
    steps
}

#[test]
fn the_shims_lines_never_reach_a_data_file_on_descriptor_2() {
    let scratch = tempfile::tempdir().unwrap();
    for shim in [false, true] {
        // The program closes descriptor 2 and opens its data file, which lands there.
        let data = scratch.path().join(format!("data-{shim}"));
        let out = fdclient(shim, &[], &data_steps(&data, false));
        assert_eq!(out.status.code(), Some(0), "shim {shim}: {out:?}");
        assert_eq!(
            std::fs::read_to_string(&data).unwrap(),
            "program-data\n",
            "shim {shim}: the data file holds only the program's data"
        );

        // Started with descriptor 2 closed: the same.
        let data = scratch.path().join(format!("data-closed-{shim}"));
        let r = Run::new(6, Path::new("/bin/sh"))
            .env_remove("FAKEHIP_RECORD")
            .env("RMCP_LOG", "trace")
            .env("RMCP_MODE", "sometimes")
            .env("RMCP_STATS", "1")
            .args(["-c", "exec \"$0\" \"$@\" 2>&-"])
            .args([fd_client()])
            .args(data_steps(&data, true));
        let out = if shim { r } else { r.no_shim() }.run_within(LIMIT);
        assert_eq!(out.status.code(), Some(0), "shim {shim}: {out:?}");
        assert_eq!(
            std::fs::read_to_string(&data).unwrap(),
            "program-data\n",
            "shim {shim}, started with descriptor 2 closed"
        );
    }

    // The control: with descriptor 2 left alone, the warning and the report are on it.
    let with = fdclient(true, &[], &["hip".to_string()]);
    assert_eq!(with.stderr_lines("RMCP_MODE").len(), 1, "{}", with.stderr);
    assert!(with.stderr.contains(" stats: "), "{}", with.stderr);
}
