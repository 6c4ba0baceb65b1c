//! Running a command with a time limit, for tests that must fail, not hang, when the
//! program blocks: the command runs in a process group of its own, its stdout and stderr
//! go to files (no pipe for it to fill), and the whole group is killed at the limit.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Runs `cmd` and collects its output, like `Command::output` (stdin as the command says).
/// Err when it was still running after `limit`: its process group was killed.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("scratch directory: {e}"))?;
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let file =
        |p: &std::path::Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut child = cmd
        .process_group(0)
        .stdout(file(&out_path)?)
        .stderr(file(&err_path)?)
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            break st;
        }
        if start.elapsed() > limit {
            kill_group(child.id());
            let _ = child.wait();
            return Err(format!("still running after {limit:?}: killed (a hang)"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &std::path::Path| {
        let mut v = Vec::new();
        if let Ok(mut f) = std::fs::File::open(p) {
            let _ = f.read_to_end(&mut v);
        }
        v
    };
    Ok(Output {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
    })
}

/// SIGKILL to the process group `pgid` (the child's own, from `process_group(0)`, not yet
/// reaped, so the group cannot be another's).
fn kill_group(pgid: u32) {
    // SAFETY: kill(2) has no memory preconditions; the group is the test's own child's.
    unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
}
