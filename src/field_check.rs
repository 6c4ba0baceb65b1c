//! `rmcp check`: run the field-check program (examples/field-check) twice, without and
//! with librmcp_shim.so, show the two outputs side by side and say what they mean.
//!
//! Nothing is built here: the program comes from `examples/field-check/build.sh` (hipcc).
//! The run without rmcp gets LD_PRELOAD minus any librmcp_shim.so; the run with rmcp gets
//! LD_PRELOAD as `rmcp run` makes it, RMCP_MODE=auto (or force with --force), RMCP_LOG=info
//! and an RMCP_STATS_FILE in a private temporary directory, whose hipHostMalloc counters
//! say whether the shim rewrote anything.
//!
//! (The file is named for the program it runs, not for the subcommand, so that it is not
//! taken for doctor's checks.)

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::install::Wanted;
use crate::preload;
use crate::run::{self, EXIT_NOT_FOUND};

/// The options of `rmcp check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The field-check program (default: $RMCP_FIELD_CHECK, else rmcp-field-check next to
    /// rmcp).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Path of librmcp_shim.so (default: $RMCP_SHIM, else next to rmcp, else ../lib/).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// RMCP_MODE=force for the run with rmcp (default: auto, which rewrites only for the
    /// GPUs in RMCP_TARGETS).
    #[arg(long)]
    pub force: bool,
    /// Seconds each run may take before it is killed.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
}

/// File name of the field-check program.
pub const FIELD_CHECK_NAME: &str = "rmcp-field-check";

/// The program: `--binary`, else `RMCP_FIELD_CHECK`, else next to rmcp. Nothing about the
/// machine rmcp was built on is used (no path into its source tree).
pub const FIELD_CHECK: Wanted = Wanted {
    file_name: FIELD_CHECK_NAME,
    option: "--binary",
    variable: "RMCP_FIELD_CHECK",
    beside_rmcp: &[("next to rmcp", &[])],
};

/// Exit statuses of `rmcp check` (docs/field-check.md).
pub const EXIT_RIGHT_WITH_RMCP: u8 = 0;
pub const EXIT_WRONG_WITH_RMCP: u8 = 1;
pub const EXIT_NO_GPU: u8 = 2;
pub const EXIT_INCONCLUSIVE: u8 = 3;

/// Exit statuses of the field-check program (examples/field-check/field_check.hip).
const FC_RIGHT: i32 = 0;
const FC_WRONG: i32 = 1;
const FC_NO_DEVICE: i32 = 2;
const FC_INCOMPLETE: i32 = 3;

/// The hipHostMalloc placements that are coherent unless rmcp rewrites them.
const COHERENT_PLACEMENTS: [&str; 3] = ["host-default", "host-mapped", "host-coherent"];

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signal(i32),
    TimedOut(u64),
}

impl Ended {
    fn describe(&self) -> String {
        match self {
            Ended::Exited(c) => format!("{c}"),
            Ended::Signal(s) => format!("killed by signal {s}"),
            Ended::TimedOut(t) => format!("killed after {t} s (--timeout)"),
        }
    }
}

/// One run of the program: its output, split into keyed lines.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub ended: Ended,
    pub stderr: String,
    /// (key, value) per stdout line, in order.
    pub lines: Vec<(String, String)>,
}

/// A result line: `PLACEMENT OP BAD/TOTAL` or `PLACEMENT OP error: ...`.
fn result_line(line: &str) -> Option<(String, String)> {
    let mut it = line.splitn(3, ' ');
    let (place, op, rest) = (it.next()?, it.next()?, it.next()?);
    let is_place = place == "vram" || place.starts_with("host-");
    if !is_place || !op.starts_with("atomic") {
        return None;
    }
    Some((format!("{place} {op}"), rest.to_string()))
}

fn key_lines(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            if let Some(kv) = result_line(l) {
                return kv;
            }
            match l.split_once(": ") {
                Some(("flags", v)) => {
                    let (place, rest) = v.split_once(' ').unwrap_or((v, ""));
                    (format!("flags {place}"), rest.to_string())
                }
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (l.to_string(), String::new()),
            }
        })
        .collect()
}

impl RunOutput {
    pub fn new(ended: Ended, stdout: String, stderr: String) -> RunOutput {
        let lines = key_lines(&stdout);
        RunOutput {
            ended,
            stderr,
            lines,
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Some(true) for `shim: loaded ...`, Some(false) for `shim: not loaded`.
    fn shim_loaded(&self) -> Option<bool> {
        match self.get("shim") {
            Some(v) if v.starts_with("loaded") => Some(true),
            Some(v) if v.starts_with("not loaded") => Some(false),
            _ => None,
        }
    }

    /// (placement, Ok(bad) | Err(message)) per result line.
    fn results(&self) -> Vec<(String, Result<u64, String>)> {
        self.lines
            .iter()
            .filter(|(k, _)| k.starts_with("vram ") || k.starts_with("host-"))
            .map(|(k, v)| {
                let place = k.split(' ').next().unwrap_or("").to_string();
                let r = match v.split_once('/') {
                    Some((bad, total))
                        if bad.parse::<u64>().is_ok() && total.parse::<u64>().is_ok() =>
                    {
                        Ok(bad.parse::<u64>().unwrap())
                    }
                    _ => Err(v.clone()),
                };
                (place, r)
            })
            .collect()
    }
}

/// What one run says about the platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    Right,
    Wrong(BTreeSet<String>),
    NoDevice,
    /// The run could not tell: why.
    Failed(String),
}

/// Classifies a run: the exit status must agree with the lines printed.
pub fn classify(r: &RunOutput) -> Class {
    if r.get("field-check").is_none() {
        return Class::Failed(format!(
            "its output is not field-check output (exit status {})",
            r.ended.describe()
        ));
    }
    let results = r.results();
    let wrong: BTreeSet<String> = results
        .iter()
        .filter(|(_, x)| matches!(x, Ok(b) if *b > 0))
        .map(|(p, _)| p.clone())
        .collect();
    let errors: BTreeSet<String> = results
        .iter()
        .filter(|(_, x)| x.is_err())
        .map(|(p, _)| p.clone())
        .collect();
    let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    match r.ended {
        Ended::Exited(FC_RIGHT) if !results.is_empty() && wrong.is_empty() && errors.is_empty() => {
            Class::Right
        }
        Ended::Exited(FC_WRONG) if !wrong.is_empty() => Class::Wrong(wrong),
        Ended::Exited(FC_NO_DEVICE) => Class::NoDevice,
        Ended::Exited(FC_INCOMPLETE) if !errors.is_empty() => Class::Failed(format!(
            "HIP calls failed on {} (see the error lines)",
            list(&errors)
        )),
        Ended::Exited(c @ (FC_RIGHT | FC_WRONG | FC_INCOMPLETE)) => Class::Failed(format!(
            "its exit status {c} does not match its result lines"
        )),
        ref e => Class::Failed(format!(
            "it ended with {} before giving a verdict",
            match e {
                Ended::Exited(c) => format!("exit status {c}"),
                other => other.describe(),
            }
        )),
    }
}

fn names(s: &BTreeSet<String>) -> String {
    s.iter().cloned().collect::<Vec<_>>().join(", ")
}

fn only_coherent(s: &BTreeSet<String>) -> bool {
    s.iter().all(|p| COHERENT_PLACEMENTS.contains(&p.as_str()))
}

/// What rmcp's stats file says about hipHostMalloc: (calls, rewritten).
pub fn rewritten_host_mallocs(stats: &str) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(stats).ok()?;
    let h = v.get("calls")?.get("hipHostMalloc")?;
    Some((h.get("calls")?.as_u64()?, h.get("rewritten")?.as_u64()?))
}

/// The verdict on the two runs, and rmcp check's exit status.
pub fn verdict(
    without: &RunOutput,
    with: &RunOutput,
    rewrites: Option<(u64, u64)>,
    force: bool,
) -> (String, u8) {
    let (a, b) = (classify(without), classify(with));
    if let Class::Failed(why) = &a {
        return (
            format!("inconclusive: the run without rmcp failed: {why}"),
            EXIT_INCONCLUSIVE,
        );
    }
    if let Class::Failed(why) = &b {
        return (
            format!("inconclusive: the run with rmcp failed: {why}"),
            EXIT_INCONCLUSIVE,
        );
    }
    match (&a, &b) {
        (Class::NoDevice, Class::NoDevice) => {
            return ("no usable GPU: nothing to check".into(), EXIT_NO_GPU);
        }
        (Class::NoDevice, _) | (_, Class::NoDevice) => {
            return (
                "inconclusive: one run found a usable GPU and the other did not".into(),
                EXIT_INCONCLUSIVE,
            );
        }
        _ => {}
    }
    if without.shim_loaded() != Some(false) {
        return (
            "inconclusive: librmcp_shim.so was loaded in the run without rmcp (is it in \
             /etc/ld.so.preload?)"
                .into(),
            EXIT_INCONCLUSIVE,
        );
    }
    if with.shim_loaded() != Some(true) {
        return (
            "inconclusive: librmcp_shim.so was not loaded in the run with rmcp (a setuid \
             program, or a statically linked one, ignores LD_PRELOAD)"
                .into(),
            EXIT_INCONCLUSIVE,
        );
    }
    let nothing_rewritten = matches!(rewrites, Some((_, 0)));
    let hint = if nothing_rewritten && !force {
        " (rmcp rewrote no hipHostMalloc call: this GPU is not affected under RMCP_MODE=auto \
         and RMCP_TARGETS; `rmcp check --force` measures the rewrite anyway)"
    } else if nothing_rewritten {
        " (rmcp rewrote no hipHostMalloc call)"
    } else {
        ""
    };
    match (a, b) {
        (Class::Right, Class::Right) => (
            format!(
                "no difference on this platform: atomics were right on every placement, \
                 without and with rmcp{hint}"
            ),
            EXIT_RIGHT_WITH_RMCP,
        ),
        (Class::Wrong(w), Class::Right) if only_coherent(&w) => (
            format!(
                "this platform corrupts atomics on coherent host memory; with rmcp: fixed \
                 (wrong without rmcp: {})",
                names(&w)
            ),
            EXIT_RIGHT_WITH_RMCP,
        ),
        (Class::Wrong(w), Class::Right) => (
            format!(
                "atomics were wrong without rmcp on {}, which includes placements rmcp does not \
                 change; with rmcp every placement was right. Run it again: this looks like \
                 more than the coherent-memory failure",
                names(&w)
            ),
            EXIT_RIGHT_WITH_RMCP,
        ),
        (Class::Right, Class::Wrong(w)) => (
            format!(
                "atomics were right without rmcp but wrong with rmcp on {}: rmcp made it worse; \
                 please report this",
                names(&w)
            ),
            EXIT_WRONG_WITH_RMCP,
        ),
        (Class::Wrong(w0), Class::Wrong(w1)) => {
            let what = if only_coherent(&w0) {
                "this platform corrupts atomics on coherent host memory".to_string()
            } else {
                format!(
                    "atomics are wrong on {}, which includes placements rmcp does not change",
                    names(&w0)
                )
            };
            let with = if w1 == w0 {
                format!("not fixed (still wrong: {}){hint}", names(&w1))
            } else if w1.is_subset(&w0) {
                format!("partly fixed (still wrong: {}){hint}", names(&w1))
            } else {
                format!("wrong on {}{hint}", names(&w1))
            };
            (format!("{what}; with rmcp: {with}"), EXIT_WRONG_WITH_RMCP)
        }
        _ => unreachable!("failed and no-device runs were handled above"),
    }
}

/// Runs `program` with `env` changes, capturing its output, killing it after `timeout`.
fn run_captured(
    program: &Path,
    ld_preload: Option<&OsStr>,
    env: &[(&str, OsString)],
    timeout: Duration,
) -> std::io::Result<RunOutput> {
    let mut cmd = Command::new(program);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match ld_preload {
        Some(v) => cmd.env("LD_PRELOAD", v),
        None => cmd.env_remove("LD_PRELOAD"),
    };
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let ended = loop {
        if let Some(st) = child.try_wait()? {
            break match (st.code(), st.signal()) {
                (Some(c), _) => Ended::Exited(c),
                (None, Some(s)) => Ended::Signal(s),
                (None, None) => Ended::Exited(-1),
            };
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            break Ended::TimedOut(timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    Ok(RunOutput::new(ended, stdout, stderr))
}

/// The two outputs side by side: one row per key, in the order the runs printed them.
pub fn side_by_side(without: &RunOutput, with: &RunOutput) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for (k, _) in without.lines.iter().chain(with.lines.iter()) {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let value = |r: &RunOutput, k: &str| r.get(k).unwrap_or("-").to_string();
    let kw = keys.iter().map(|k| k.len()).max().unwrap_or(0).max(11);
    let aw = keys
        .iter()
        .map(|k| value(without, k).len())
        .max()
        .unwrap_or(0)
        .clamp(12, 48);
    let mut s = format!("  {:kw$}  {:aw$}  {}\n", "", "without rmcp", "with rmcp");
    for k in keys {
        s += &format!("  {k:kw$}  {:aw$}  {}\n", value(without, k), value(with, k));
    }
    s += &format!(
        "  {:kw$}  {:aw$}  {}\n",
        "exit status",
        without.ended.describe(),
        with.ended.describe()
    );
    s
}

fn print_stderr(label: &str, r: &RunOutput) {
    if r.stderr.trim().is_empty() {
        return;
    }
    println!("\nstderr {label}:");
    for l in r.stderr.lines() {
        println!("  {l}");
    }
}

/// A private directory for the stats file: removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        let base = std::env::temp_dir();
        for i in 0..100u32 {
            let p = base.join(format!("rmcp-check-{}-{i}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no free temporary directory name"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `rmcp check`; returns its exit status.
pub fn main(args: CheckArgs) -> u8 {
    let search = FIELD_CHECK.search_here(args.binary.as_deref());
    let Some(program) = search.found.clone() else {
        eprintln!(
            "rmcp: {FIELD_CHECK_NAME} not found; looked at {}. Build it with \
             examples/field-check/build.sh (needs hipcc; it writes \
             examples/field-check/build/{FIELD_CHECK_NAME}), then give its path with \
             --binary PATH or RMCP_FIELD_CHECK, or put it next to rmcp.",
            search.describe_tried()
        );
        return EXIT_NOT_FOUND;
    };
    let program = std::path::absolute(&program).unwrap_or(program);
    let shim = match run::shim_for_preload(args.shim.as_deref()) {
        Ok(p) => p,
        Err(status) => return status,
    };
    let tmp = match TempDir::new() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rmcp: cannot create a temporary directory: {e}");
            return run::EXIT_FAILED;
        }
    };
    let stats = tmp.0.join("stats.json");
    let mode = if args.force { "force" } else { "auto" };
    let timeout = Duration::from_secs(args.timeout);
    let ld_preload = std::env::var_os("LD_PRELOAD");

    println!("rmcp check");
    println!("  program  {}", program.display());
    println!("  shim     {} (RMCP_MODE={mode})", shim.display());
    println!();

    let without = preload::without_shim(ld_preload.as_deref());
    let with = preload::with_shim(&shim, ld_preload.as_deref());
    let with_env = [
        ("RMCP_MODE", OsString::from(mode)),
        ("RMCP_LOG", OsString::from("info")),
        ("RMCP_STATS_FILE", stats.clone().into_os_string()),
    ];
    let mut outputs = Vec::new();
    for (label, ld, env) in [
        ("without rmcp", without.as_deref(), &[][..]),
        ("with rmcp", Some(with.as_os_str()), &with_env[..]),
    ] {
        match run_captured(&program, ld, env, timeout) {
            Ok(o) => outputs.push(o),
            Err(e) => {
                eprintln!("rmcp: {} ({label}): {e}", program.display());
                return run::exec_error_status(&e);
            }
        }
    }
    let (a, b) = (&outputs[0], &outputs[1]);
    let rewrites = std::fs::read_to_string(&stats)
        .ok()
        .and_then(|s| rewritten_host_mallocs(&s));

    print!("{}", side_by_side(a, b));
    match rewrites {
        Some((calls, rewritten)) => println!(
            "  {:11}  rmcp rewrote {rewritten} of {calls} hipHostMalloc calls",
            "stats"
        ),
        None => println!("  {:11}  no rmcp stats file was written", "stats"),
    }
    print_stderr("without rmcp", a);
    print_stderr("with rmcp", b);
    let (text, status) = verdict(a, b, rewrites, args.force);
    println!("\nverdict: {text}");
    status
}
