//! Hostile input to every option and variable that names a file rmcp reads (issue 35, item
//! 6): a FIFO with no writer, /dev/zero, a directory, a file past the cap, a field of
//! 100 KB, wrong types, not JSON. Each run must end within a few seconds (the test kit's
//! bounded runner kills it otherwise), stay within [`PEAK_RSS_KIB`] of resident memory
//! (wait4's ru_maxrss), and, for a path an option names, exit 2 (125 for `rmcp run`, whose
//! statuses are env(1)'s) with one sentence naming the file and what is wrong.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rmcp_testkit::{Measured, fixture, measured_within};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");

/// How long one run may take: each refusal is immediate; doctor reads a fixture topology.
const LIMIT: Duration = Duration::from_secs(20);
/// The most resident memory a run may reach: rmcp's own is about 10 MiB, and the largest
/// input it reads (a 1 MiB stats file) parses to a few MiB more. (`rmcp report --stats
/// /dev/zero` reached 4.5 GB before the cap.)
const PEAK_RSS_KIB: u64 = 64 * 1024;

/// rmcp with a clean environment: no RMCP_* (but those given), no LD_PRELOAD, no Python
/// search.
fn rmcp(vars: &[(&str, &Path)]) -> Command {
    let mut c = Command::new(RMCP);
    c.env_clear();
    for k in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(k) {
            c.env(k, v);
        }
    }
    c.env("RMCP_PYTHON", "");
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// Runs `cmd` within [`LIMIT`]: its exit status, stdout, stderr; fails the test on a hang
/// or on memory past [`PEAK_RSS_KIB`].
fn bounded(cmd: &mut Command, what: &str) -> (Option<i32>, String, String) {
    let m: Measured = measured_within(cmd, LIMIT).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (out, err) = (
        String::from_utf8_lossy(&m.output.stdout).into_owned(),
        String::from_utf8_lossy(&m.output.stderr).into_owned(),
    );
    assert!(
        m.peak_rss_kib <= PEAK_RSS_KIB,
        "{what}: {} KiB resident at the peak (at most {PEAK_RSS_KIB}); stderr: {err}",
        m.peak_rss_kib
    );
    (m.output.status.code(), out, err)
}

/// Asserts a refusal: `status`, nothing on stdout, and `sentence` on stderr (one line).
#[track_caller]
fn refused(r: (Option<i32>, String, String), status: i32, sentence: &str) {
    let (code, out, err) = r;
    assert_eq!(code, Some(status), "stdout: {out}\nstderr: {err}");
    assert!(err.contains(sentence), "no {sentence:?} in stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one sentence: {err}");
    assert!(out.is_empty(), "{out}");
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// A scratch directory with a FIFO (no writer ever opens it) named `name`.
fn with_fifo(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join(name);
    mkfifo(&fifo);
    (dir, fifo)
}

fn report_stats(stats: &Path) -> (Option<i32>, String, String) {
    bounded(
        rmcp(&[])
            .args(["report", "--no-check", "--stats"])
            .arg(stats),
        &format!("rmcp report --stats {}", stats.display()),
    )
}

#[test]
fn report_stats_refuses_what_is_not_a_small_regular_file() {
    let (dir, fifo) = with_fifo("stats.json");
    refused(
        report_stats(&fifo),
        2,
        &format!(
            "rmcp report: --stats {}: a FIFO (named pipe), not a regular file",
            fifo.display()
        ),
    );
    refused(
        report_stats(Path::new("/dev/zero")),
        2,
        "rmcp report: --stats /dev/zero: a character device, not a regular file",
    );
    refused(
        report_stats(dir.path()),
        2,
        &format!(
            "rmcp report: --stats {}: a directory, not a regular file",
            dir.path().display()
        ),
    );
    refused(
        report_stats(Path::new("/nonexistent/stats.json")),
        2,
        "rmcp report: --stats /nonexistent/stats.json: No such file or directory",
    );
    // A 10 MB field: past the 1 MiB cap, refused without being read.
    let big = dir.path().join("big.json");
    std::fs::write(
        &big,
        format!(
            r#"{{"faults": [{{"address": "0x{}"}}]}}"#,
            "4".repeat(10_000_000)
        ),
    )
    .unwrap();
    refused(
        report_stats(&big),
        2,
        &format!(
            "rmcp report: --stats {}: larger than 1048576 bytes, the most rmcp reads of a stats file",
            big.display()
        ),
    );
}

#[test]
fn report_stats_refuses_what_the_shim_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (file("binary", "\u{0}\u{1}garbage"), "not JSON ("),
        (file("empty", ""), "empty: not a stats file"),
        (
            file("array", "[1, 2]"),
            "the top level is a list, not an object: not a stats file",
        ),
        (
            file("faults", r#"{"faults": "none"}"#),
            "`faults` is a string, not a list",
        ),
        (
            file("address", r#"{"faults": [{"address": 140737488355328}]}"#),
            "faults[0].address is a number, not a string or null as the shim writes it",
        ),
        (
            file("kernels", r#"{"faults": [{"kernels": [{"name": ["k"]}]}]}"#),
            "faults[0].kernels[0].name is a list, not a string or null as the shim writes it",
        ),
        (
            file("fault", r#"{"faults": [7]}"#),
            "faults[0] is a number, not an object",
        ),
    ];
    for (path, why) in cases {
        refused(
            report_stats(&path),
            2,
            &format!("rmcp report: --stats {}: {why}", path.display()),
        );
    }
}

#[test]
fn report_stats_cuts_long_fields_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let long = "A".repeat(100_000);
    std::fs::write(
        &stats,
        format!(
            r#"{{"faults": [{{"kind": "vm", "address": "0x{long}", "lines": ["{long}"],
                "note": "\u001b]0;title\u0007"}}]}}"#
        ),
    )
    .unwrap();
    let (code, md, err) = report_stats(&stats);
    assert_eq!(code, Some(0), "{err}");
    let address = md
        .lines()
        .find_map(|l| l.strip_prefix("   - address: "))
        .unwrap_or_else(|| panic!("no address in\n{md}"));
    let want = format!("0x{}… [cut: 100002 bytes, 64 shown]", &long[..62]);
    assert!(
        address == want,
        "the address is printed as {} bytes, not as {want:?}",
        address.len()
    );
    assert!(
        md.contains(
            "rmcp cut what is longer than it prints (4096 bytes of a field, 256 items of a list): \
             faults[0].address: 100002 bytes, 64 shown; faults[0].lines[0]: 100000 bytes, 4096 shown."
        ),
        "{md}"
    );
    // No escape sequence reaches the terminal.
    assert!(md.contains(r"- note: \u{1b}]0;title\u{7}"), "{md}");
    assert!(!md.contains('\u{1b}'));
    // The whole report is small: each field is cut, not printed whole.
    assert!(md.len() < 64 * 1024, "{} bytes", md.len());
}

#[test]
fn report_runtime_is_a_regular_file() {
    let (_dir, fifo) = with_fifo("libamdhip64.so");
    refused(
        bounded(
            rmcp(&[]).args(["report", "--runtime"]).arg(&fifo),
            "rmcp report --runtime FIFO",
        ),
        2,
        &format!(
            "rmcp report: --runtime {}: a FIFO (named pipe), not a regular file",
            fifo.display()
        ),
    );
}

#[test]
fn doctor_scan_refuses_fifos_and_devices() {
    let (_dir, fifo) = with_fifo("libtorch_hip.so");
    for (path, kind) in [
        (fifo.as_path(), "a FIFO (named pipe)"),
        (Path::new("/dev/zero"), "a character device"),
    ] {
        refused(
            bounded(
                rmcp(&[])
                    .args(["doctor", "--scan"])
                    .arg(path)
                    .arg("--sysfs")
                    .arg(fixture("rdna1")),
                &format!("rmcp doctor --scan {}", path.display()),
            ),
            2,
            &format!(
                "rmcp doctor: --scan {}: {kind}, not a regular file or a directory",
                path.display()
            ),
        );
    }
}

/// RMCP_MODULE_ROOT's files (amdgpu's parameters, `rmcp report`'s amdgpu version) as FIFOs:
/// doctor and report read around them.
#[test]
fn module_root_fifos_are_not_waited_on() {
    let module = tempfile::tempdir().unwrap();
    let params = module.path().join("amdgpu/parameters");
    std::fs::create_dir_all(&params).unwrap();
    for name in ["noretry", "vm_fragment_size", "mtype_local"] {
        mkfifo(&params.join(name));
    }
    mkfifo(&module.path().join("amdgpu/version"));
    let scan = tempfile::tempdir().unwrap();
    let vars = [("RMCP_MODULE_ROOT", module.path())];
    let (code, out, err) = bounded(
        rmcp(&vars)
            .args(["doctor", "--json", "--scan"])
            .arg(scan.path())
            .arg("--sysfs")
            .arg(fixture("rdna1")),
        "rmcp doctor with FIFOs under RMCP_MODULE_ROOT",
    );
    assert!(matches!(code, Some(0 | 1)), "{code:?} {err}");
    assert!(out.contains("amdgpu.noretry"), "{out}");
    let (code, md, err) = bounded(
        rmcp(&vars).args(["report", "--no-check"]),
        "rmcp report with FIFOs under RMCP_MODULE_ROOT",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(md.contains("- amdgpu module: loaded, in-kernel"), "{md}");
}

/// `rmcp check --runtime` with a path that is not a regular file: 2 and a sentence (was 127,
/// the shell's "command not found", for a missing one, and a measurement that waited
/// forever on a FIFO).
#[test]
fn check_runtime_is_a_regular_file() {
    let (_dir, fifo) = with_fifo("libamdhip64.so.6");
    let cases = [
        (
            PathBuf::from("/nonexistent/libamdhip64.so.6"),
            "No such file or directory".to_string(),
        ),
        (
            fifo.clone(),
            "a FIFO (named pipe), not a regular file".into(),
        ),
        (
            PathBuf::from("/dev/zero"),
            "a character device, not a regular file".into(),
        ),
    ];
    for (path, why) in cases {
        let r = bounded(
            rmcp(&[])
                .args(["check", "--timeout", "5", "--runtime"])
                .arg(&path),
            &format!("rmcp check --runtime {}", path.display()),
        );
        if r.2.contains("built without the GPU code") {
            rmcp_testkit::missing(
                "rmcp was built without hipcc: no GPU code for rmcp check (apt-get install hipcc, then rebuild)",
            );
            return;
        }
        refused(
            r,
            2,
            &format!("rmcp check: {}: {why} (--runtime)", path.display()),
        );
    }
    // --json says it as JSON too (what `rmcp report` reads).
    let (code, out, err) = bounded(
        rmcp(&[]).args(["check", "--json", "--runtime"]).arg(&fifo),
        "rmcp check --json --runtime FIFO",
    );
    assert_eq!(code, Some(2), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["exit_status"], 2);
    assert!(v["error"].as_str().unwrap().contains("a FIFO (named pipe)"));
}

/// `rmcp run`: a shim or runtime path that is no file would be handed to the loader, which
/// waits forever on a FIFO; refused with 125 (env(1)'s status for its own failure).
#[test]
fn run_refuses_a_shim_or_runtime_that_is_no_file() {
    let (_dir, fifo) = with_fifo("librmcp_shim.so");
    refused(
        bounded(
            rmcp(&[])
                .args(["run", "--shim"])
                .arg(&fifo)
                .args(["--", "true"]),
            "rmcp run --shim FIFO",
        ),
        125,
        &format!(
            "rmcp: {}: a FIFO (named pipe), not a regular file: the shim must be its library file",
            fifo.display()
        ),
    );
    refused(
        bounded(
            rmcp(&[])
                .args(["run", "--shim"])
                .arg(rmcp_testkit::shim())
                .arg("--hip-library")
                .arg(&fifo)
                .args(["--", "true"]),
            "rmcp run --hip-library FIFO",
        ),
        125,
        &format!(
            "rmcp: --hip-library {}: a FIFO (named pipe), not a regular file",
            fifo.display()
        ),
    );
}
