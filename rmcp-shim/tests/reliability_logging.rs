//! Logging under pressure, with the stress client (tests/c/stress.c) and the exact
//! accounting of rmcp_testkit::stress_model:
//! - RMCP_LOG=trace with 8 threads: no deadlock, every line whole (`rmcp[pid] level: `),
//!   one line per call, per hook as many lines as the callers made calls;
//! - an unwritable RMCP_LOG_FILE: the log goes to stderr, with one warning saying so;
//! - a full disk (/dev/full as RMCP_LOG_FILE and RMCP_STATS_FILE, or as stderr): the process
//!   exits 0 and every account still agrees.
//!
//! Every run is killed after 60 s, so a deadlock fails the test instead of hanging CI.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp_testkit::Run;
use rmcp_testkit::stress_model::{check, stress_run};

const THREADS: u32 = 8;
const CALLS: u64 = 5_000;

struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    run: Run,
}

/// Runs in a process group of its own, killed after 60 s; stdout and stderr are files
/// (set `stderr` to send stderr elsewhere, e.g. /dev/full).
fn run_limited(mut run: Run, stderr: Option<&str>) -> Done {
    let out_path = run.dir().join("stdout");
    let err_path = run.dir().join("stderr");
    let err_file = std::fs::File::create(stderr.map_or(err_path.clone(), Into::into))
        .or_else(|_| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(stderr.unwrap())
        })
        .unwrap();
    let mut child = run
        .cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(err_file)
        .spawn()
        .expect("spawn stress client");
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if start.elapsed() > Duration::from_secs(60) {
            // SAFETY: kill(2) on the process group this test created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("the stress client did not finish in 60 s (deadlock?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &std::path::Path| {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(p) {
            f.read_to_string(&mut s).unwrap();
        }
        s
    };
    Done {
        code,
        stdout: read(&out_path),
        stderr: if stderr.is_none() {
            read(&err_path)
        } else {
            String::new()
        },
        run,
    }
}

fn counts(d: &Done) -> String {
    std::fs::read_to_string(d.run.dir().join("counts")).expect("FAKEHIP_COUNTS file")
}

fn stats(d: &Done) -> serde_json::Value {
    let t = std::fs::read_to_string(d.run.dir().join("stats.json")).expect("stats file");
    serde_json::from_str(&t).unwrap()
}

/// Calls per hook, from the client's tallies.
fn calls_per_hook(stdout: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in stdout.lines().filter(|l| l.starts_with("tally ")) {
        let w: Vec<&str> = l.split(' ').collect();
        *m.entry(w[1].to_string()).or_default() += w[5][2..].parse::<u64>().unwrap();
    }
    m
}

/// Checks that every line is one whole event of this process; returns the lines by level.
fn whole_lines(text: &str) -> BTreeMap<&'static str, Vec<&str>> {
    let mut by_level: BTreeMap<&'static str, Vec<&str>> = BTreeMap::new();
    let mut pid = None;
    for line in text.lines() {
        let rest = line
            .strip_prefix("rmcp[")
            .unwrap_or_else(|| panic!("not a whole log line: {line:?}"));
        let (p, rest) = rest.split_once("] ").expect(line);
        assert!(p.bytes().all(|b| b.is_ascii_digit()), "{line:?}");
        assert_eq!(*pid.get_or_insert(p.to_string()), p, "two pids: {line:?}");
        let level = ["trace", "debug", "info", "warn", "error"]
            .into_iter()
            .find(|l| rest.starts_with(&format!("{l}: ")))
            .unwrap_or_else(|| panic!("no level: {line:?}"));
        assert!(
            !rest[level.len() + 2..].contains("rmcp["),
            "two events on a line: {line:?}"
        );
        by_level.entry(level).or_default().push(line);
    }
    by_level
}

#[test]
fn trace_with_eight_threads_one_whole_line_per_call() {
    let run = stress_run(THREADS, CALLS);
    let log = run.dir().join("log");
    let run = run.env("RMCP_LOG", "trace").env("RMCP_LOG_FILE", &log);
    let d = run_limited(run, None);
    assert_eq!(d.code, Some(0), "stderr:\n{}", d.stderr);
    assert_eq!(d.stderr, "", "with RMCP_LOG_FILE nothing goes to stderr");
    check(THREADS, CALLS, &d.stdout, &counts(&d), &stats(&d));

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.ends_with('\n'));
    let lines = whole_lines(&text);
    // One line per call: `FUNC size=.. flags=.. unchanged rc=..` (trace) or
    // `FUNC size=.. flags=.. -> ... caller=.. rc=..` (debug, rewritten).
    let mut per_hook: BTreeMap<String, u64> = BTreeMap::new();
    let mut substituted = 0;
    let mut dlsym_lines = 0;
    let mut other = Vec::new();
    for l in lines.values().flatten() {
        let msg = l.split_once(": ").unwrap().1;
        let func = msg.split(' ').next().unwrap();
        if msg.contains(" unchanged rc=") || (msg.contains(" -> ") && msg.contains(" caller=")) {
            *per_hook.entry(func.to_string()).or_default() += 1;
        } else if msg.starts_with("hipGetProcAddress(") && msg.contains("handing back") {
            substituted += 1;
        } else if msg.starts_with("dlsym(") && msg.contains("handing back") {
            // The client's three RTLD_DEFAULT lookups of hooked names, before its threads.
            dlsym_lines += 1;
        } else {
            other.push(*l);
        }
    }
    assert_eq!(per_hook, calls_per_hook(&d.stdout), "log lines per hook");
    assert_eq!(
        per_hook.values().sum::<u64>(),
        u64::from(THREADS) * CALLS,
        "one line per call"
    );
    let got: u64 = d
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("getproc substituted="))
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        substituted, got,
        "one debug line per substituted hipGetProcAddress"
    );
    assert_eq!(dlsym_lines, 3, "one debug line per substituted lookup");
    // The rest: the banner (info), one fallback warning per function that fell back, and
    // one for hipHostRegister (its memory stays coherent).
    let warns: Vec<_> = other.iter().filter(|l| l.contains(" warn: ")).collect();
    assert_eq!(warns.len(), 5, "{warns:#?}");
    assert!(
        other
            .iter()
            .all(|l| l.contains(" info: ") || l.contains(" warn: ")),
        "{other:#?}"
    );
    eprintln!(
        "logging: {} lines checked ({} per-call lines, {substituted} substitutions)",
        text.lines().count(),
        per_hook.values().sum::<u64>()
    );
}

#[test]
fn unwritable_log_file_falls_back_to_stderr_with_one_warning() {
    let run = stress_run(THREADS, 2_000);
    // A directory: open(O_WRONLY) fails with EISDIR, even for root.
    let dir = run.dir().to_path_buf();
    let run = run.env("RMCP_LOG", "warn").env("RMCP_LOG_FILE", &dir);
    let d = run_limited(run, None);
    assert_eq!(d.code, Some(0), "stderr:\n{}", d.stderr);
    check(THREADS, 2_000, &d.stdout, &counts(&d), &stats(&d));
    let lines = whole_lines(&d.stderr);
    let about_file: Vec<_> = d
        .stderr
        .lines()
        .filter(|l| l.contains("RMCP_LOG_FILE"))
        .collect();
    assert_eq!(about_file.len(), 1, "{}", d.stderr);
    assert!(about_file[0].contains(" warn: ") && about_file[0].contains("stderr"));
    // The four fallback warnings and the one about hipHostRegister reached stderr too.
    assert_eq!(lines["warn"].len(), 6, "{}", d.stderr);
}

/// /dev/full as the log file and the stats file: every write fails with ENOSPC.
fn full_disk_run() -> Done {
    let run = stress_run(THREADS, 2_000)
        .env("RMCP_LOG", "trace")
        .env("RMCP_LOG_FILE", "/dev/full")
        .env("RMCP_STATS_FILE", "/dev/full");
    run_limited(run, None)
}

#[test]
fn full_disk_is_not_fatal() {
    let d = full_disk_run();
    assert_eq!(d.code, Some(0), "stderr:\n{}", d.stderr);
    // The report could not be written: it is on stderr, whole.
    let start = d
        .stderr
        .find("{\n  \"rmcp\"")
        .expect("the JSON report on stderr");
    let end = d.stderr[start..]
        .find("\n}\n")
        .expect("end of the JSON report")
        + start
        + 2;
    let report: serde_json::Value = serde_json::from_str(&d.stderr[start..end]).unwrap();
    let a = check(THREADS, 2_000, &d.stdout, &counts(&d), &report);
    eprintln!(
        "full disk: {} calls checked, {} faults injected",
        a.calls, a.faults
    );
}

#[test]
fn full_disk_adds_nothing_per_event_to_stderr() {
    let d = full_disk_run();
    assert_eq!(d.code, Some(0));
    let noise = d
        .stderr
        .lines()
        .filter(|l| l.contains("tracing-subscriber"))
        .count();
    assert_eq!(
        noise, 0,
        "{noise} lines of tracing-subscriber errors on stderr"
    );
}

#[test]
fn stderr_on_a_full_disk_is_not_fatal() {
    let run = stress_run(THREADS, 2_000).env("RMCP_LOG", "debug");
    let d = run_limited(run, Some("/dev/full"));
    assert_eq!(d.code, Some(0), "killed by a signal (SIGABRT) when None");
    check(THREADS, 2_000, &d.stdout, &counts(&d), &stats(&d));
}
