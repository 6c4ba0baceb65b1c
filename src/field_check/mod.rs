//! `rmcp check`: measures, on the user's GPU and with the HIP runtime their framework uses,
//! whether device atomics on coherent host memory are right, without and with
//! librmcp_shim.so, shows the two runs side by side and says what they mean.
//!
//! - `measure`: the measurement, run in a child process (`rmcp check --measure`) so that the
//!   shim can be preloaded into one run and not the other; it opens the runtime with
//!   dlopen (no HIP soname is linked) and launches the GPU code of `kernels` (built by
//!   build.rs from `kernels.hip`, embedded in rmcp);
//! - `runtime`: which runtime (`--runtime`, PyTorch's, TheRock's, the loader's);
//! - `buffer_layout`: the buffer-layout experiment (Triton's RDNA1 descriptor layout, the
//!   RDNA layout rmcp writes, plain global stores) and its verdict, reported beside the
//!   atomics verdict (it does not change the exit status);
//! - `override_bugs`: on an RX 5000 only, the override experiments (what the card does with
//!   a FLAT instruction offset and with `v_fmac_legacy_f32` in gfx1030 code), run in a third
//!   child process (`rmcp check --measure-override`) under HSA_OVERRIDE_GFX_VERSION=10.3.0,
//!   without the shim, and their two verdicts (they do not change the exit status either);
//! - this file: the options, the two runs, reading their output, the verdict (a fixed word
//!   and a sentence) and the exit status, as text or `--json`.
//!
//! The run without rmcp gets LD_PRELOAD minus any librmcp_shim.so; the run with rmcp gets
//! LD_PRELOAD as `rmcp run` makes it, RMCP_MODE=auto (or force with --force), RMCP_LOG=info
//! and an RMCP_STATS_FILE in a private temporary directory, whose hipHostMalloc counters
//! say whether the shim rewrote anything.
//!
//! (The folder is named for the field check, not for the subcommand, so that it is not
//! taken for doctor's checks.)

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::preload;
use crate::run;

mod buffer_layout;
mod kernels;
mod measure;
mod override_bugs;
mod runtime;

/// The options of `rmcp check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The HIP runtime to measure with (default: the one bundled with the PyTorch `rmcp
    /// doctor` finds, torch/lib or TheRock's _rocm_sdk_core; else the one the dynamic loader
    /// finds).
    #[arg(long, value_name = "PATH")]
    pub runtime: Option<PathBuf>,
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
    /// Print one JSON object (both runs, the runtime, the device, the verdict) instead.
    #[arg(long)]
    pub json: bool,
    /// The measurement itself, in the child process each run is.
    #[arg(long, hide = true)]
    pub measure: bool,
    /// The override experiments, in the child process run under HSA_OVERRIDE_GFX_VERSION.
    #[arg(long, hide = true)]
    pub measure_override: bool,
    /// Tests only: run PROGRAM (no arguments) in place of the measurement.
    #[arg(long, hide = true, value_name = "PROGRAM")]
    pub measure_with: Option<PathBuf>,
}

/// Exit statuses of `rmcp check` (docs/field-check.md).
pub const EXIT_RIGHT_WITH_RMCP: u8 = 0;
pub const EXIT_WRONG_WITH_RMCP: u8 = 1;
pub const EXIT_NO_GPU: u8 = 2;
pub const EXIT_INCONCLUSIVE: u8 = 3;

/// Exit statuses of the measurement (measure.rs).
const FC_RIGHT: i32 = measure::RIGHT as i32;
const FC_WRONG: i32 = measure::WRONG as i32;
const FC_NO_DEVICE: i32 = measure::NO_DEVICE as i32;
const FC_INCOMPLETE: i32 = measure::INCOMPLETE as i32;
const FC_NO_RUNTIME: i32 = measure::NO_RUNTIME as i32;

/// The hipHostMalloc placements that are coherent unless rmcp rewrites them.
const COHERENT_PLACEMENTS: [&str; 3] = ["host-default", "host-mapped", "host-coherent"];
/// The placements the failure does not touch, and rmcp does not change: the controls.
const CONTROL_PLACEMENTS: [&str; 2] = ["vram", "host-noncoherent"];

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

    /// The placements whose every slot kept its initial value (the `unchanged` line).
    fn unchanged(&self) -> BTreeSet<String> {
        self.get("unchanged")
            .unwrap_or("")
            .split_whitespace()
            .map(String::from)
            .collect()
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
        Ended::Exited(FC_NO_RUNTIME) => Class::Failed(format!(
            "it could not load the HIP runtime ({})",
            r.get("runtime").unwrap_or("no runtime line")
        )),
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

/// What rmcp's stats file says about hipHostMalloc: (calls, rewritten).
pub fn rewritten_host_mallocs(stats: &str) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(stats).ok()?;
    let h = v.get("calls")?.get("hipHostMalloc")?;
    Some((h.get("calls")?.as_u64()?, h.get("rewritten")?.as_u64()?))
}

/// The verdict: a fixed word, the sentence, and rmcp check's exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `fixed`, `no-difference`, `worse`, `not-fixed`, `inconclusive` or `no-gpu`.
    pub word: &'static str,
    pub text: String,
    pub status: u8,
}

fn v(word: &'static str, text: String, status: u8) -> Verdict {
    Verdict { word, text, status }
}

fn inconclusive(text: String) -> Verdict {
    v(
        "inconclusive",
        format!("inconclusive: {text}"),
        EXIT_INCONCLUSIVE,
    )
}

/// The verdict on the two runs.
pub fn verdict(
    without: &RunOutput,
    with: &RunOutput,
    rewrites: Option<(u64, u64)>,
    force: bool,
) -> Verdict {
    let (a, b) = (classify(without), classify(with));
    if let Class::Failed(why) = &a {
        return inconclusive(format!("the run without rmcp failed: {why}"));
    }
    if let Class::Failed(why) = &b {
        return inconclusive(format!("the run with rmcp failed: {why}"));
    }
    match (&a, &b) {
        (Class::NoDevice, Class::NoDevice) => {
            return v(
                "no-gpu",
                "no usable GPU: nothing to check".into(),
                EXIT_NO_GPU,
            );
        }
        (Class::NoDevice, _) | (_, Class::NoDevice) => {
            return inconclusive("one run found a usable GPU and the other did not".into());
        }
        _ => {}
    }
    if without.shim_loaded() != Some(false) {
        return inconclusive(
            "librmcp_shim.so was loaded in the run without rmcp (is it in /etc/ld.so.preload?)"
                .into(),
        );
    }
    if with.shim_loaded() != Some(true) {
        return inconclusive(
            "librmcp_shim.so was not loaded in the run with rmcp (a setuid program, or a \
             statically linked one, ignores LD_PRELOAD)"
                .into(),
        );
    }
    // A control wrong: the GPU gets atomics wrong where the coherence failure cannot be,
    // so nothing this measures can be put down to coherent memory, nor a change to rmcp.
    let controls = |c: &Class| match c {
        Class::Wrong(w) => w
            .iter()
            .filter(|p| CONTROL_PLACEMENTS.contains(&p.as_str()))
            .cloned()
            .collect::<BTreeSet<_>>(),
        _ => BTreeSet::new(),
    };
    let (ca, cb) = (controls(&a), controls(&b));
    if !ca.is_empty() || !cb.is_empty() {
        let runs = match (ca.is_empty(), cb.is_empty()) {
            (false, false) if ca == cb => format!("{} in both runs", names(&ca)),
            (false, false) => format!("{} without rmcp, {} with rmcp", names(&ca), names(&cb)),
            (false, true) => format!("{} without rmcp", names(&ca)),
            _ => format!("{} with rmcp", names(&cb)),
        };
        let host: BTreeSet<String> = measure::PLACEMENTS
            .iter()
            .filter(|p| p.1)
            .map(|p| p.0.to_string())
            .collect();
        let untouched = [without, with]
            .iter()
            .all(|r| host.is_subset(&r.unchanged()));
        let why = if untouched {
            "; every slot in host memory kept the value it started with, in both runs: the \
             GPU ran no kernel (an emulated GPU, or a broken driver)"
        } else {
            "; run it again, and if it stays so, this GPU's atomics are wrong beyond what rmcp \
             is about"
        };
        return inconclusive(format!(
            "the control placement is wrong too ({runs}): atomics go wrong on memory the \
             coherence failure does not touch, so this cannot show it{why}"
        ));
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
        (Class::Right, Class::Right) => v(
            "no-difference",
            format!(
                "no difference on this platform: atomics were right on every placement, \
                 without and with rmcp{hint}"
            ),
            EXIT_RIGHT_WITH_RMCP,
        ),
        (Class::Wrong(w), Class::Right) => v(
            "fixed",
            format!(
                "this platform corrupts atomics on coherent host memory; with rmcp: fixed \
                 (wrong without rmcp: {})",
                names(&w)
            ),
            EXIT_RIGHT_WITH_RMCP,
        ),
        (Class::Right, Class::Wrong(w)) => v(
            "worse",
            format!(
                "atomics were right without rmcp but wrong with rmcp on {}: rmcp made it worse; \
                 please report this",
                names(&w)
            ),
            EXIT_WRONG_WITH_RMCP,
        ),
        (Class::Wrong(w0), Class::Wrong(w1)) => {
            let with = if w1 == w0 {
                format!("not fixed (still wrong: {}){hint}", names(&w1))
            } else if w1.is_subset(&w0) {
                format!("partly fixed (still wrong: {}){hint}", names(&w1))
            } else {
                format!("wrong on {}{hint}", names(&w1))
            };
            v(
                "not-fixed",
                format!(
                    "this platform corrupts atomics on coherent host memory; with rmcp: {with}"
                ),
                EXIT_WRONG_WITH_RMCP,
            )
        }
        _ => unreachable!("failed and no-device runs were handled above"),
    }
}

/// Runs `program` with `env` changes, capturing its output, killing it after `timeout`.
fn run_captured(
    program: &Path,
    args: &[OsString],
    ld_preload: Option<&OsStr>,
    env: &[(&str, OsString)],
    timeout: Duration,
) -> std::io::Result<RunOutput> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
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

/// `50221153` (hipRuntimeGetVersion) -> `5.2.21153`.
fn hip_version(v: &str) -> Option<String> {
    let n: u64 = v.trim().parse().ok()?;
    Some(format!(
        "{}.{}.{}",
        n / 10_000_000,
        (n / 100_000) % 100,
        n % 100_000
    ))
}

/// `asked 0x0 runtime 0x80000000` -> {"asked", "runtime", "noncoherent"}; anything else as
/// it was printed.
fn flags_json(line: Option<&str>) -> Value {
    let Some(line) = line else {
        return Value::Null;
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["asked", asked, "runtime", got] if got.starts_with("0x") => {
            let bits = u32::from_str_radix(got.trim_start_matches("0x"), 16).ok();
            json!({
                "asked": asked,
                "runtime": got,
                "noncoherent": bits.map(|b| b & 0x8000_0000 != 0),
            })
        }
        _ => json!({ "text": line }),
    }
}

/// One run as JSON: its facts, each placement's results and recorded flags, its end.
fn run_json(r: &RunOutput) -> Value {
    let results = r.results();
    let placements: Vec<Value> = measure::PLACEMENTS
        .iter()
        .map(|(name, host, _)| {
            let mut ops = serde_json::Map::new();
            for (k, val) in &r.lines {
                let mut it = k.splitn(2, ' ');
                if it.next() == Some(name) {
                    if let Some(op) = it.next().filter(|o| o.starts_with("atomic")) {
                        let one = match val.split_once('/') {
                            Some((bad, total)) if bad.parse::<u64>().is_ok() => json!({
                                "bad": bad.parse::<u64>().ok(),
                                "total": total.parse::<u64>().ok(),
                            }),
                            _ => json!({ "error": val.strip_prefix("error: ").unwrap_or(val) }),
                        };
                        ops.insert(op.to_string(), one);
                    }
                }
            }
            let wrong = results
                .iter()
                .any(|(p, x)| p == name && matches!(x, Ok(b) if *b > 0));
            json!({
                "name": name,
                "coherent_unless_rewritten": COHERENT_PLACEMENTS.contains(name),
                "flags": if *host { flags_json(r.get(&format!("flags {name}"))) } else { Value::Null },
                "results": ops,
                "wrong": wrong,
            })
        })
        .collect();
    let ended = match &r.ended {
        Ended::Exited(c) => json!({ "exit_status": c }),
        Ended::Signal(s) => json!({ "signal": s }),
        Ended::TimedOut(t) => json!({ "timed_out_after_seconds": t }),
    };
    json!({
        "runtime": r.get("runtime"),
        "hip_runtime_version": r.get("hip-runtime"),
        "shim": r.get("shim"),
        "device": r.get("device"),
        "kfd": r.get("kfd"),
        "kernels": r.get("kernels"),
        "placements": placements,
        "unchanged": r.unchanged(),
        "verdict": r.get("verdict"),
        "ended": ended,
        "stderr": r.stderr,
    })
}

/// Says that this rmcp has no GPU code, and how to get one that has; exit status 2.
fn no_kernels(json_out: bool) -> u8 {
    let msg = "this rmcp was built without the GPU code of `rmcp check` (no hipcc was found \
               when it was built). Install the rmcp-rdna wheel, which carries it, or install \
               hipcc (Debian/Ubuntu: apt-get install hipcc; or HIPCC=/opt/rocm/bin/hipcc) and \
               rebuild: touch build.rs && cargo build --release";
    refuse(msg, EXIT_NO_GPU, json_out)
}

/// Says that an option names a file rmcp cannot use; exit status 2 (`input::EXIT_USAGE`).
fn usage_error(msg: &str, json_out: bool) -> u8 {
    refuse(msg, crate::input::EXIT_USAGE, json_out)
}

/// Says why no check ran, on stderr and (with `--json`) as the JSON answer; `status`.
fn refuse(msg: &str, status: u8, json_out: bool) -> u8 {
    if json_out {
        println!(
            "{}",
            json!({ "verdict": Value::Null, "exit_status": status, "error": msg })
        );
    }
    eprintln!("rmcp check: {msg}");
    status
}

pub fn main(args: CheckArgs) -> u8 {
    if args.measure {
        return measure::main(args.runtime.as_deref());
    }
    if args.measure_override {
        return measure::main_override(args.runtime.as_deref());
    }
    if args.measure_with.is_none() && !kernels::present() {
        return no_kernels(args.json);
    }
    let choice = runtime::choose(
        args.runtime.as_deref(),
        &crate::doctor::python_site_packages(),
    );
    // Every file an option names, and the runtime chosen, is a regular file (`input`):
    // else a sentence naming it and the usage status, before anything runs. (The loader
    // would wait forever on a FIFO, and fail on anything else, in the measurement.)
    let named = [
        (choice.path.as_deref(), choice.by),
        (args.shim.as_deref(), "--shim"),
        (args.measure_with.as_deref(), "--measure-with"),
    ];
    for (path, by) in named {
        if let Some(Err(e)) = path.map(crate::input::regular_file) {
            return usage_error(&format!("{e} ({by})"), args.json);
        }
    }
    let (program, child_args): (PathBuf, Vec<OsString>) = match &args.measure_with {
        Some(p) => (std::path::absolute(p).unwrap_or(p.clone()), Vec::new()),
        None => {
            let exe = match std::env::current_exe() {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("rmcp check: cannot find the rmcp executable: {e}");
                    return run::EXIT_FAILED;
                }
            };
            let mut a: Vec<OsString> = vec!["check".into(), "--measure".into()];
            if let Some(p) = &choice.path {
                let p = std::path::absolute(p).unwrap_or(p.clone());
                a.push("--runtime".into());
                a.push(p.into_os_string());
            }
            (exe, a)
        }
    };
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
        match run_captured(&program, &child_args, ld, env, timeout) {
            Ok(o) => outputs.push(o),
            Err(e) => {
                eprintln!("rmcp: {} ({label}): {e}", program.display());
                return run::exec_error_status(&e);
            }
        }
    }
    let (a, b) = (&outputs[0], &outputs[1]);
    // The override experiments: on an RX 5000 only, in a third run, without the shim
    // (`--measure-with`: the program, with the same environment).
    let kfd = a.get("kfd").or(b.get("kfd"));
    let override_run = match override_bugs::not_run_on(kfd) {
        Some(why) => Err(override_bugs::Outcome::NotRun(why)),
        None => {
            let mut child_args = child_args.clone();
            if args.measure_with.is_none() {
                child_args[1] = "--measure-override".into();
            }
            let env = [(
                override_bugs::OVERRIDE_VARIABLE,
                OsString::from(override_bugs::OVERRIDE),
            )];
            match run_captured(&program, &child_args, without.as_deref(), &env, timeout) {
                Ok(o) => Ok(o),
                Err(e) => {
                    eprintln!("rmcp: {} (override run): {e}", program.display());
                    return run::exec_error_status(&e);
                }
            }
        }
    };
    let card = kfd
        .and_then(override_bugs::kfd_gfx)
        .unwrap_or("unknown")
        .to_string();
    let overrides = match &override_run {
        Err(not_run) => not_run.clone(),
        Ok(o) => override_bugs::outcome(&card, |k| o.get(k).map(String::from), &o.ended.describe()),
    };
    let rewrites = crate::input::read_capped(
        &stats,
        rmcp_core::stats_file::MAX_FILE_BYTES,
        "a stats file",
    )
    .ok()
    .and_then(|b| rewritten_host_mallocs(&String::from_utf8_lossy(&b)));
    let verdict = verdict(a, b, rewrites, args.force);
    let counts = |r: &RunOutput| buffer_layout::run_counts(|k| r.get(k).map(String::from));
    let buffer = buffer_layout::combined(counts(a), counts(b));
    let used = a.get("runtime").or(b.get("runtime")).unwrap_or("unknown");
    let version = a
        .get("hip-runtime")
        .or(b.get("hip-runtime"))
        .and_then(hip_version);

    if args.json {
        let file_version = Path::new(used)
            .file_name()
            .and_then(|n| crate::doctor::runtime_version_from_name(&n.to_string_lossy()));
        let out = json!({
            "rmcp": crate::build_info::VERSION,
            "commit": crate::build_info::commit(),
            "verdict": verdict.word,
            "sentence": verdict.text,
            "exit_status": verdict.status,
            "runtime": {
                "path": used,
                "chosen_by": choice.by,
                "asked_for": choice.path.as_ref().map(|p| p.display().to_string()),
                "version": version,
                "file_version": file_version,
            },
            "device": a.get("device").or(b.get("device")),
            "kfd": a.get("kfd").or(b.get("kfd")),
            "kernels": {
                "targets": kernels::targets(),
                "compiler": kernels::compiler(),
                "code_object_version": kernels::CODE_OBJECT_VERSION,
            },
            "shim": shim.display().to_string(),
            "mode": mode,
            "rewrites": rewrites.map(|(calls, rewritten)| json!({
                "hipHostMalloc_calls": calls,
                "rewritten": rewritten,
            })),
            "runs": { "without_rmcp": run_json(a), "with_rmcp": run_json(b) },
            "buffer_layout": buffer_layout::json(counts(a), counts(b)),
            "override_bugs": override_json(&overrides, override_run.as_ref().ok()),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return verdict.status;
    }

    println!("rmcp check");
    println!(
        "  runtime  {used} ({}{})",
        choice.by,
        version
            .as_deref()
            .map(|v| format!(", HIP {v}"))
            .unwrap_or_default()
    );
    if args.measure_with.is_some() {
        println!("  program  {}", program.display());
    } else {
        println!(
            "  kernels  {} targets, code object v{} ({})",
            kernels::targets().len(),
            kernels::CODE_OBJECT_VERSION,
            kernels::compiler()
        );
    }
    println!("  shim     {} (RMCP_MODE={mode})", shim.display());
    println!();
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
    println!("\nverdict: {}", verdict.text);
    println!("verdict word: {}", verdict.word);
    println!("\nbuffer layout: {}", buffer.text);
    println!("buffer layout word: {}", buffer.word);
    if let Ok(o) = &override_run {
        print_stderr("in the override run", o);
    }
    print!("\n{}", overrides.text());
    verdict.status
}

/// The override experiments as JSON, with the run's facts and end when it ran.
fn override_json(outcome: &override_bugs::Outcome, run: Option<&RunOutput>) -> Value {
    let mut v = outcome.json();
    if let (Some(r), Some(o)) = (run, v.as_object_mut()) {
        let j = run_json(r);
        for k in ["device", "ended", "stderr"] {
            o.insert(k.into(), j[k].clone());
        }
        o.insert("override_kernels".into(), json!(r.get("override-kernels")));
    }
    v
}
