//! Running a command with a time limit, for tests that must fail, not hang, when the
//! program blocks: the command runs in a process group of its own, its stdout and stderr
//! go to files (no pipe for it to fill), and the whole group is killed at the limit. The
//! command is reaped with wait4(2), which also gives its peak resident memory, for tests
//! that must fail when a program reads without bound.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// What [`measured_within`] gives: the output, and the peak resident set size of the
/// command (its own process: wait4's `ru_maxrss`), in KiB.
#[derive(Debug)]
pub struct Measured {
    /// As `Command::output` gives it.
    pub output: Output,
    /// The command's peak resident memory, in KiB.
    pub peak_rss_kib: u64,
}

/// Runs `cmd` and collects its output, like `Command::output` (stdin as the command says).
/// Err when it was still running after `limit`: its process group was killed.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    measured_within(cmd, limit).map(|m| m.output)
}

/// [`output_within`], with the command's peak resident memory.
pub fn measured_within(cmd: &mut Command, limit: Duration) -> Result<Measured, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("scratch directory: {e}"))?;
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let file =
        |p: &std::path::Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    let child = cmd
        .process_group(0)
        .stdout(file(&out_path)?)
        .stderr(file(&err_path)?)
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let (status, peak_rss_kib) = loop {
        let mut raw = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: the child's pid (not yet reaped, so it is still ours) and pointers to
        // locals wait4 fills.
        let r = unsafe { libc::wait4(pid, &mut raw, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (ExitStatus::from_raw(raw), usage.ru_maxrss.max(0) as u64);
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("wait4: {e}"));
        }
        if start.elapsed() > limit {
            kill_group(child.id());
            // SAFETY: as above; this reaps the killed child.
            unsafe { libc::wait4(pid, &mut raw, 0, std::ptr::null_mut()) };
            return Err(format!("still running after {limit:?}: killed (a hang)"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // The child is reaped: std's handle must not wait for it again (it never does on drop).
    drop(child);
    let read = |p: &std::path::Path| {
        let mut v = Vec::new();
        if let Ok(mut f) = std::fs::File::open(p) {
            let _ = f.read_to_end(&mut v);
        }
        v
    };
    Ok(Measured {
        output: Output {
            status,
            stdout: read(&out_path),
            stderr: read(&err_path),
        },
        peak_rss_kib,
    })
}

/// SIGKILL to the process group `pgid` (the child's own, from `process_group(0)`, not yet
/// reaped, so the group cannot be another's).
fn kill_group(pgid: u32) {
    // SAFETY: kill(2) has no memory preconditions; the group is the test's own child's.
    unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
}
