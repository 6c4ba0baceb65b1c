//! fork while another thread is inside a hooked call (tests/c/forker.c).
//!
//! - Thread A is held inside the runtime during hipMalloc (FAKEHIP_BLOCK) when the main
//!   thread forks: the child makes six hooked calls and exits 0, its stats are its own, and
//!   the parent carries on.
//! - Thread A makes the process's first hooked call and the shim, building its state, is
//!   held inside a runtime query (the mixed fixture makes it list the devices) when the
//!   main thread forks. The child must not deadlock (it did, until the shim's state cells
//!   learnt which process is building them: rmcp-shim/src/once.rs).
//!
//! The child arms alarm(5), so a deadlocked child dies of SIGALRM; the test also kills the
//! whole process group after 20 s, so CI never hangs here.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp_testkit::{Run, fork_client};

/// Runs `run` in its own process group; kills the group after `limit`.
/// Returns (exit code, or None if killed; stdout; stderr).
fn run_with_timeout(mut run: Run, limit: Duration) -> (Option<i32>, String, String, Run) {
    let mut child = run
        .cmd
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn forker");
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if start.elapsed() > limit {
            // SAFETY: kill(2) on the process group this test created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (code, out, err, run)
}

fn stats_files(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("stats-") {
            let text = std::fs::read_to_string(&p).unwrap();
            v.push(serde_json::from_str(&text).unwrap());
        }
    }
    v
}

fn calls(report: &serde_json::Value, func: &str) -> u64 {
    report["calls"][func]["calls"].as_u64().unwrap()
}

#[test]
fn fork_while_another_thread_is_inside_a_hook() {
    let run = Run::new(6, &fork_client()).env_remove("FAKEHIP_RECORD");
    let mark = run.dir().join("mark");
    let stats = run.dir().join("stats-%p.json");
    let run = run
        .env("RMCP_STATS_FILE", &stats)
        .env("FAKEHIP_BLOCK", "hipMalloc:300000")
        .env("FAKEHIP_BLOCK_MARK", &mark)
        .args([std::ffi::OsStr::new("inside"), mark.as_os_str()]);
    let (code, out, err, run) = run_with_timeout(run, Duration::from_secs(20));
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("child status=exited:0"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("child hip")).count(),
        6
    );
    assert!(out.contains("parent thread-A hipMalloc rc=0"), "{out}");

    // Two reports, one per process; the child counts only its own six calls.
    let reports = stats_files(run.dir());
    assert_eq!(reports.len(), 2, "{reports:?}");
    let (parent, child): (Vec<_>, Vec<_>) =
        reports.iter().partition(|r| calls(r, "hipMalloc") == 1);
    assert_eq!((parent.len(), child.len()), (1, 1), "{reports:?}");
    let (parent, child) = (parent[0], child[0]);
    assert_ne!(parent["pid"], child["pid"]);
    let want_child = [
        ("hipHostMalloc", 2),
        ("hipMemAllocHost", 1),
        ("hipHostAlloc", 1),
        ("hipExtMallocWithFlags", 1),
        ("hipMallocManaged", 1),
        ("hipMalloc", 0),
    ];
    for (f, n) in want_child {
        assert_eq!(calls(child, f), n, "child {f}: {child}");
        // The parent made the same calls twice (before the fork and after), plus hipMalloc.
        assert_eq!(
            calls(parent, f),
            if n == 0 { 1 } else { 2 * n },
            "parent {f}"
        );
    }
    assert_eq!(child["calls"]["hipHostMalloc"]["rewritten"], 2, "{child}");
}

/// Fork while thread A is making the process's first hooked call (the shim's state is
/// being built and A is held in the runtime's hipGetDeviceCount).
fn fork_during_first_call() -> (Option<i32>, String, String) {
    let run = Run::new(6, &fork_client())
        .env_remove("FAKEHIP_RECORD")
        .fixture("mixed")
        .env("FAKEHIP_DEVICES", "0000:03:00.0,0000:0a:00.0");
    let mark = run.dir().join("mark");
    let stats = run.dir().join("stats-%p.json");
    let run = run
        .env("RMCP_STATS_FILE", &stats)
        .env("FAKEHIP_BLOCK", "hipGetDeviceCount:1000000")
        .env("FAKEHIP_BLOCK_MARK", &mark)
        .args([std::ffi::OsStr::new("first"), mark.as_os_str()]);
    let (code, out, err, _run) = run_with_timeout(run, Duration::from_secs(20));
    (code, out, err)
}

#[test]
fn fork_while_another_thread_makes_the_first_call() {
    let (code, out, err) = fork_during_first_call();
    assert!(
        out.contains("child status=exited:0"),
        "the child did not finish its calls (signal 14 = SIGALRM after 5 s: deadlocked)\n\
         stdout:\n{out}\nstderr:\n{err}"
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
}

/// The parent finishes normally whatever the child does.
#[test]
fn fork_during_the_first_call_never_hangs_the_parent() {
    let (code, out, err) = fork_during_first_call();
    assert!(
        code.is_some(),
        "killed after 20 s\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        out.contains("parent thread-A hipMalloc rc=0"),
        "{out}\n{err}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("parent hip") && l.ends_with("rc=0"))
            .count(),
        6,
        "{out}"
    );
}
