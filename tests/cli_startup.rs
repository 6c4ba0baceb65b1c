//! `rmcp run` hands the command the process state its parent left, as running the command
//! directly would (issue 13): an ignored SIGPIPE stays ignored, the signal mask is kept,
//! and closed standard descriptors stay closed. The Rust runtime's start-up does the
//! opposite (it ignores SIGPIPE and opens /dev/null on closed 0-2), and std's exec resets
//! SIGPIPE and the mask; each test compares the command run through `rmcp run` with the
//! same command run directly. The other commands keep Rust's start-up.
//!
//! Every run is killed after 20 s.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
const LIMIT: Duration = Duration::from_secs(20);

/// A stand-in for the shim: `rmcp run` only needs an existing file (ld.so says on stderr
/// that it cannot preload it, and carries on).
fn fake_shim(dir: &std::path::Path) -> PathBuf {
    let p = dir.join("librmcp_shim.so");
    std::fs::write(&p, b"not really a library").unwrap();
    p
}

/// `argv` run directly, or through `rmcp run --shim SHIM --`.
fn command(through_rmcp: Option<&std::path::Path>, argv: &[&str]) -> Command {
    let mut c = match through_rmcp {
        Some(shim) => {
            let mut c = Command::new(RMCP);
            c.args(["run", "--shim"]).arg(shim).arg("--").args(argv);
            c
        }
        None => {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_") || k == "LD_PRELOAD" {
            c.env_remove(&k);
        }
    }
    c
}

/// `argv` under `sh -c 'exec "$@" REDIR'`: the shell closes a standard descriptor and
/// execs, directly or through rmcp.
fn with_redirect(through_rmcp: Option<&std::path::Path>, redirect: &str, argv: &[&str]) -> Output {
    let inner = command(through_rmcp, argv);
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("exec \"$@\" {redirect}"))
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    rmcp_testkit::output_within(&mut c, LIMIT).unwrap()
}

#[test]
fn closed_standard_descriptors_stay_closed() {
    let dir = tempfile::tempdir().unwrap();
    let shim = fake_shim(dir.path());
    // (redirect, command): each fails on its closed descriptor when run directly.
    let cases: &[(&str, &[&str])] = &[
        (">&-", &["sh", "-c", "echo hi"]),
        ("<&-", &["cat"]),
        ("2>&-", &["sh", "-c", "echo hi >&2"]),
        (">&- 2>&-", &["sh", "-c", "echo hi; echo there >&2"]),
    ];
    for (redirect, argv) in cases {
        let direct = with_redirect(None, redirect, argv);
        let through = with_redirect(Some(&shim), redirect, argv);
        assert!(!direct.status.success(), "{redirect} {argv:?}: {direct:?}");
        assert_eq!(
            through.status, direct.status,
            "{redirect} {argv:?}: through rmcp {through:?}, directly {direct:?}"
        );
        assert_eq!(through.stdout, direct.stdout, "{redirect} {argv:?}");
    }
}

/// The SigIgn and SigBlk lines of /proc/self/status, as the command sees them, started by
/// a parent that ignores SIGPIPE and blocks SIGUSR1.
fn signal_state(through_rmcp: Option<&std::path::Path>) -> String {
    let mut c = command(
        through_rmcp,
        &["grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"],
    );
    // SAFETY: between fork and exec only async-signal-safe calls (signal, sigprocmask and
    // the sigset functions), on the child's own state.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let out = rmcp_testkit::output_within(&mut c, LIMIT).unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn an_ignored_sigpipe_and_the_signal_mask_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let shim = fake_shim(dir.path());
    let direct = signal_state(None);
    let mask = |name: &str| {
        let line = direct.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
    };
    assert_ne!(mask("SigIgn:") & 1 << (libc::SIGPIPE - 1), 0, "{direct}");
    assert_ne!(mask("SigBlk:") & 1 << (libc::SIGUSR1 - 1), 0, "{direct}");
    assert_eq!(signal_state(Some(&shim)), direct);
}

/// `yes` writing into a pipe whose reader goes away, under a parent that ignores SIGPIPE
/// (`trap "" PIPE`): yes gets EPIPE, says so and exits 1 (not killed by SIGPIPE, 141).
fn yes_into_a_closed_pipe(through_rmcp: Option<&std::path::Path>) -> std::process::ExitStatus {
    let inner = command(through_rmcp, &["yes"]);
    let mut c = Command::new("sh");
    c.args(["-c", "trap '' PIPE; exec \"$@\"", "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = c.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 4096];
    out.read_exact(&mut buf).unwrap();
    drop(out);
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if start.elapsed() > LIMIT {
            // SAFETY: kill(2) on the process group this test created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("yes did not stop after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn yes_under_a_parent_that_ignores_sigpipe_exits_as_it_does_directly() {
    let dir = tempfile::tempdir().unwrap();
    let shim = fake_shim(dir.path());
    let direct = yes_into_a_closed_pipe(None);
    assert_eq!(direct.code(), Some(1), "{direct:?}");
    let through = yes_into_a_closed_pipe(Some(&shim));
    assert_eq!(through.signal(), None, "killed by a signal: {through:?}");
    assert_eq!(through.code(), direct.code());
}

/// The other commands keep Rust's start-up: SIGPIPE ignored, so writing into a closed pipe
/// is an error rmcp reports, not a signal that kills it.
#[test]
fn other_commands_keep_sigpipe_ignored() {
    let fixture = rmcp_testkit::fixture("rdna1");
    let mut c = Command::new(RMCP);
    c.args(["doctor", "--sysfs"])
        .arg(&fixture)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // The parent's SIGPIPE is the default: Rust's start-up must ignore it itself.
    let mut child = c.spawn().unwrap();
    drop(child.stdout.take());
    let start = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < LIMIT, "rmcp doctor did not finish");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(st.signal(), None, "killed by SIGPIPE: {st:?}");
}
