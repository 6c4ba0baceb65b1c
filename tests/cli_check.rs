//! `rmcp check`: the verdict for each combination of the two runs, with a fake measurement
//! (a shell script whose output depends on whether LD_PRELOAD carries librmcp_shim.so,
//! run through the hidden `--measure-with`), then the real measurement: without a GPU it
//! must say "no usable device" and exit 2; rmcp links no HIP soname; the runtime is the
//! PyTorch-bundled one by default (a venv with a stand-in torch); and on the emulated GPU
//! (tests/emulated-gpu) it must say `inconclusive`, because a GPU that runs no kernel gets
//! the control placements wrong too, and so must the override experiments (an emulated
//! gfx1010: they run, and their controls keep the sentinel). With fakes, the override
//! experiments run on a gfx1010 only, in a third run, without the shim.
//!
//! The fake's shim is any existing file named librmcp_shim.so, as in cli_run.rs: the fake
//! program only looks at LD_PRELOAD; ld.so complains on stderr that it cannot preload a
//! non-ELF file and carries on.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use std::process::{Command, Output};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");

const PLACEMENTS: [&str; 5] = [
    "vram",
    "host-default",
    "host-mapped",
    "host-coherent",
    "host-noncoherent",
];
const OPS: [&str; 4] = ["atomicMin", "atomicMax", "atomicAdd", "atomicCAS"];
const COHERENT: &[&str] = &["host-default", "host-mapped", "host-coherent"];

/// What the fake program does in one run.
#[derive(Clone)]
enum Fake {
    Right,
    /// atomicMin is wrong on these placements.
    Wrong(&'static [&'static str]),
    NoDevice,
    /// A HIP error on host-coherent, exit 3.
    Incomplete,
    /// Exit 0 although a line says 5/256.
    Lying,
    /// Killed by SIGSEGV after the header.
    Crash,
    /// Never ends.
    Hang,
    /// Not field-check output at all.
    Garbage,
}

fn body(f: &Fake) -> String {
    let mut s = String::new();
    let dev = "echo 'device: 0 gfx1031 \"Fake RX 6750 XT\" pci 0000:03:00.0 (1 visible)'\n\
               echo 'kfd: node 1 gfx1031 pcie-atomics unsupported (io_links flags [13])'\n";
    let results = |wrong: &[&str], err: Option<&str>, lie: bool| {
        let mut r = String::new();
        for p in PLACEMENTS {
            for op in OPS {
                let line = if Some(p) == err {
                    format!("{p} {op} error: kernel: hipErrorNoBinaryForGpu (209)")
                } else if op == "atomicMin" && wrong.contains(&p) {
                    format!("{p} {op} 256/256")
                } else if lie && p == "vram" && op == "atomicAdd" {
                    format!("{p} {op} 5/256")
                } else {
                    format!("{p} {op} 0/256")
                };
                writeln!(r, "echo '{line}'").unwrap();
            }
        }
        r
    };
    match f {
        Fake::Right => {
            s += dev;
            s += &results(&[], None, false);
            s += "echo 'verdict: right: every placement gave the host'\\''s answer'\nexit 0\n";
        }
        Fake::Wrong(w) => {
            s += dev;
            s += &results(w, None, false);
            writeln!(s, "echo 'verdict: wrong: {}'\nexit 1", w.join(" ")).unwrap();
        }
        Fake::NoDevice => {
            s += "echo 'device: none (hipGetDeviceCount: hipErrorNoDevice (100), 0 devices)'\n\
                  echo 'verdict: no usable device: nothing was run'\nexit 2\n";
        }
        Fake::Incomplete => {
            s += dev;
            s += &results(&[], Some("host-coherent"), false);
            s += "echo 'verdict: incomplete: could not measure host-coherent'\nexit 3\n";
        }
        Fake::Lying => {
            s += dev;
            s += &results(&[], None, true);
            s += "exit 0\n";
        }
        Fake::Crash => s += "kill -SEGV $$\n",
        Fake::Hang => s += "exec sleep 60\n",
        Fake::Garbage => {}
    }
    s
}

struct Setup {
    dir: tempfile::TempDir,
    shim: PathBuf,
    program: PathBuf,
}

/// A fake field-check program: `without` when LD_PRELOAD has no librmcp_shim.so, `with`
/// when it has. With the shim it writes an rmcp stats file saying `rewritten` of 3
/// hipHostMalloc calls were rewritten. `shim_seen` false: it reports "not loaded" anyway.
fn fake(without: Fake, with: Fake, rewritten: u64, shim_seen: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("librmcp_shim.so");
    std::fs::write(&shim, b"not really a library").unwrap();
    let shim = std::fs::canonicalize(&shim).unwrap();
    let program = dir.path().join("rmcp-field-check");
    let header = |loaded: bool| {
        format!(
            "echo 'field-check: 1'\necho 'hip-runtime: 50221153'\n{}\
             echo \"preload: $LD_PRELOAD\"\necho \"mode: ${{RMCP_MODE:-unset}}\"\n",
            if loaded {
                "echo \"shim: loaded ${LD_PRELOAD%%:*}\"\n"
            } else {
                "echo 'shim: not loaded'\n"
            }
        )
    };
    let part = |f: &Fake, loaded: bool| {
        if matches!(f, Fake::Garbage) {
            "echo 'hello'\nexit 0\n".to_string()
        } else {
            header(loaded) + &body(f)
        }
    };
    let stats = format!(
        "if [ -n \"$RMCP_STATS_FILE\" ]; then printf '%s' '{{\"calls\":{{\"hipHostMalloc\":\
         {{\"calls\":3,\"rewritten\":{rewritten}}}}}}}' > \"$RMCP_STATS_FILE\"; fi\n"
    );
    let script = format!(
        "#!/bin/sh\ncase \"$LD_PRELOAD\" in\n*librmcp_shim.so*)\n{stats}{}\n;;\n*)\n{}\n;;\nesac\n",
        part(&with, shim_seen),
        part(&without, false),
    );
    std::fs::write(&program, script).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    Setup { dir, shim, program }
}

/// rmcp with a clean RMCP_*/LD_PRELOAD environment.
fn rmcp() -> Command {
    let mut c = Command::new(RMCP);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_") || k == "LD_PRELOAD" {
            c.env_remove(&k);
        }
    }
    c
}

fn check(s: &Setup, extra: &[&str]) -> (i32, String, String) {
    let out: Output = rmcp()
        .arg("check")
        .arg("--measure-with")
        .arg(&s.program)
        .arg("--shim")
        .arg(&s.shim)
        .args(extra)
        .output()
        .unwrap();
    let code = out.status.code().expect("rmcp check was killed");
    (
        code,
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn verdict_line(stdout: &str) -> &str {
    stdout
        .lines()
        .rfind(|l| l.starts_with("verdict: "))
        .unwrap_or_else(|| panic!("no verdict line in:\n{stdout}"))
}

fn assert_verdict(without: Fake, with: Fake, code: i32, verdict: &str) -> String {
    let s = fake(without, with, 3, true);
    let (c, out, err) = check(&s, &[]);
    assert_eq!(c, code, "stdout:\n{out}\nstderr:\n{err}");
    let v = verdict_line(&out);
    assert!(
        v.contains(verdict),
        "expected {verdict:?} in {v:?}; stdout:\n{out}"
    );
    out
}

#[test]
fn coherent_wrong_without_right_with_is_fixed() {
    let out = assert_verdict(
        Fake::Wrong(COHERENT),
        Fake::Right,
        0,
        "this platform corrupts atomics on coherent host memory; with rmcp: fixed",
    );
    // Side by side: the same row carries both runs' values.
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("host-mapped atomicMin"))
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols,
        ["host-mapped", "atomicMin", "256/256", "0/256"],
        "{row}"
    );
    assert!(
        out.contains("rmcp rewrote 3 of 3 hipHostMalloc calls"),
        "{out}"
    );
    assert!(out.contains("shim") && out.contains("not loaded"), "{out}");
}

#[test]
fn right_both_times_is_no_difference() {
    assert_verdict(
        Fake::Right,
        Fake::Right,
        0,
        "no difference on this platform",
    );
}

#[test]
fn no_device_both_times() {
    assert_verdict(
        Fake::NoDevice,
        Fake::NoDevice,
        2,
        "no usable GPU: nothing to check",
    );
}

#[test]
fn no_device_in_one_run_only_is_inconclusive() {
    assert_verdict(
        Fake::Right,
        Fake::NoDevice,
        3,
        "inconclusive: one run found a usable GPU and the other did not",
    );
}

#[test]
fn still_wrong_with_rmcp_is_not_fixed() {
    assert_verdict(
        Fake::Wrong(COHERENT),
        Fake::Wrong(COHERENT),
        1,
        "with rmcp: not fixed (still wrong: host-coherent, host-default, host-mapped)",
    );
}

#[test]
fn fewer_wrong_with_rmcp_is_partly_fixed() {
    assert_verdict(
        Fake::Wrong(COHERENT),
        Fake::Wrong(&["host-mapped"]),
        1,
        "with rmcp: partly fixed (still wrong: host-mapped)",
    );
}

#[test]
fn right_without_wrong_with_is_worse() {
    assert_verdict(
        Fake::Right,
        Fake::Wrong(&["host-default"]),
        1,
        "wrong with rmcp on host-default: rmcp made it worse",
    );
}

#[test]
fn a_wrong_control_placement_is_inconclusive() {
    assert_verdict(
        Fake::Wrong(&["vram", "host-default"]),
        Fake::Right,
        3,
        "inconclusive: the control placement is wrong too (vram without rmcp)",
    );
    let out = assert_verdict(
        Fake::Wrong(&["host-noncoherent"]),
        Fake::Wrong(&["host-noncoherent"]),
        3,
        "inconclusive: the control placement is wrong too (host-noncoherent in both runs)",
    );
    assert!(verdict_line(&out).contains("run it again"), "{out}");
    assert!(out.contains("verdict word: inconclusive"), "{out}");
}

#[test]
fn a_failed_run_is_inconclusive() {
    assert_verdict(
        Fake::Right,
        Fake::Incomplete,
        3,
        "inconclusive: the run with rmcp failed: HIP calls failed on host-coherent",
    );
    assert_verdict(
        Fake::Crash,
        Fake::Right,
        3,
        "inconclusive: the run without rmcp failed: it ended with killed by signal 11",
    );
    assert_verdict(
        Fake::Right,
        Fake::Lying,
        3,
        "its exit status 0 does not match its result lines",
    );
    assert_verdict(
        Fake::Garbage,
        Fake::Right,
        3,
        "the run without rmcp failed: its output is not field-check output",
    );
}

#[test]
fn each_verdict_has_its_word_in_json() {
    let cases = [
        (Fake::Wrong(COHERENT), Fake::Right, "fixed", 0),
        (Fake::Right, Fake::Right, "no-difference", 0),
        (Fake::Right, Fake::Wrong(&["host-default"]), "worse", 1),
        (
            Fake::Wrong(COHERENT),
            Fake::Wrong(&["host-mapped"]),
            "not-fixed",
            1,
        ),
        (Fake::NoDevice, Fake::NoDevice, "no-gpu", 2),
        (Fake::Right, Fake::Crash, "inconclusive", 3),
    ];
    for (without, with, word, code) in cases {
        let s = fake(without, with, 3, true);
        let (c, out, _) = check(&s, &["--json"]);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!((c, v["verdict"].as_str()), (code, Some(word)), "{v:#}");
        assert_eq!(v["exit_status"], code, "{v:#}");
        assert!(
            v["sentence"].as_str().is_some_and(|t| !t.is_empty()),
            "{v:#}"
        );
        let placements = v["runs"]["without_rmcp"]["placements"].as_array().unwrap();
        assert_eq!(placements.len(), 5, "{v:#}");
    }
}

/// A fake RX 5000 (the `kfd:` line says gfx1010): both runs as `Fake::Right`; the third
/// run, with HSA_OVERRIDE_GFX_VERSION=10.3.0, runs `override_body` (and says on stderr
/// what LD_PRELOAD it had).
fn fake_rx5000(override_body: &str) -> Setup {
    let s = fake(Fake::Right, Fake::Right, 3, true);
    let script = std::fs::read_to_string(&s.program)
        .unwrap()
        .replace("gfx1031", "gfx1010");
    let head = format!(
        "#!/bin/sh\nif [ \"$HSA_OVERRIDE_GFX_VERSION\" = 10.3.0 ]; then\n\
         echo \"override preload: $LD_PRELOAD\" >&2\necho 'field-check: 1'\n\
         echo 'device: 0 gfx1030 \"Fake RX 5700 XT\" pci 0000:03:00.0 (1 visible)'\n\
         {override_body}\nexit 0\nfi\n"
    );
    let script = script.replacen("#!/bin/sh\n", &head, 1);
    std::fs::write(&s.program, script).unwrap();
    s
}

const FLAT_IGNORED: &str = "echo 'override-flat-offset: offset16 0x5a5a0000 control 0x5a5a0004'";
const FLAT_OK: &str = "echo 'override-flat-offset: offset16 0x5a5a0004 control 0x5a5a0004'";
const FMA_UNFUSED: &str =
    "echo 'override-fma-legacy: fmac-legacy 0x34800000 fma 0x34400800 mul-add 0x34800000'";
const FMA_OK: &str =
    "echo 'override-fma-legacy: fmac-legacy 0x34400800 fma 0x34400800 mul-add 0x34800000'";

/// On an RX 5000 the override experiments run in a third run, without the shim, under
/// HSA_OVERRIDE_GFX_VERSION=10.3.0; their words are in the text and the JSON and leave
/// the exit status alone. On any other card they are not run, and the output says so.
#[test]
fn the_override_experiments_run_on_an_rx_5000_only() {
    for (body, flat, fma) in [
        (
            format!("{FLAT_IGNORED}\n{FMA_UNFUSED}"),
            "override-flat-offset-ignored",
            "override-fma-legacy-unfused",
        ),
        (
            format!("{FLAT_OK}\n{FMA_OK}"),
            "override-flat-offset-ok",
            "override-fma-legacy-ok",
        ),
        (
            format!("{FLAT_IGNORED}\nkill -SEGV $$"),
            "override-flat-offset-ignored",
            "inconclusive",
        ),
        ("kill -SEGV $$".to_string(), "inconclusive", "inconclusive"),
        (
            "echo 'override-flat-offset: error: kernel: hipErrorIllegalAddress (700)'\n\
             echo 'override-fma-legacy: fmac-legacy 0x00000000 fma 0x34400800 mul-add 0x34800000'"
                .to_string(),
            "inconclusive",
            "inconclusive",
        ),
    ] {
        let s = fake_rx5000(&body);
        let (c, out, err) = check(&s, &[]);
        assert_eq!(c, 0, "{out}\n{err}");
        assert!(verdict_line(&out).contains("no difference"), "{out}");
        assert!(
            out.contains("override experiments (HSA_OVERRIDE_GFX_VERSION=10.3.0: gfx1030 code on this gfx1010):"),
            "{out}"
        );
        assert!(
            out.contains(&format!("override flat offset word: {flat}\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!("override legacy fma word: {fma}\n")),
            "{out}"
        );
        let (c, out, _) = check(&s, &["--json"]);
        assert_eq!(c, 0, "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let o = &v["override_bugs"];
        assert_eq!(o["run"], true, "{o:#}");
        assert_eq!(o["card"], "gfx1010", "{o:#}");
        assert_eq!(o["flat_offset"]["verdict"], flat, "{o:#}");
        assert_eq!(o["fma_legacy"]["verdict"], fma, "{o:#}");
        assert_eq!(
            o["device"],
            "0 gfx1030 \"Fake RX 5700 XT\" pci 0000:03:00.0 (1 visible)"
        );
        // Without the shim.
        let stderr = o["stderr"].as_str().unwrap();
        assert!(stderr.starts_with("override preload: "), "{o:#}");
        assert!(!stderr.contains("librmcp_shim.so"), "{o:#}");
        if body.contains("SEGV") {
            assert_eq!(o["ended"]["signal"], 11, "{o:#}");
            let missing = if fma == "inconclusive" && flat == "inconclusive" {
                "flat_offset"
            } else {
                "fma_legacy"
            };
            let sentence = o[missing]["sentence"].as_str().unwrap();
            assert!(sentence.contains("killed by signal 11"), "{sentence}");
        }
    }
    // A gfx1031: not run, and the output says so.
    let (c, out, _) = check(&fake(Fake::Right, Fake::Right, 3, true), &["--json"]);
    assert_eq!(c, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    let o = &v["override_bugs"];
    assert_eq!(o["run"], false, "{o:#}");
    let why = o["not_run"].as_str().unwrap();
    assert!(
        why.contains("the card is gfx1031 (KFD topology), not gfx1010-gfx1013"),
        "{why}"
    );
    assert_eq!(o["flat_offset"], Value::Null);
    let (_, out, _) = check(&fake(Fake::Right, Fake::Right, 3, true), &[]);
    assert!(
        out.contains("override experiments: not run: the card is gfx1031"),
        "{out}"
    );
    assert!(!out.contains("override flat offset word"), "{out}");
    // No GPU: not run either.
    let (_, out, _) = check(&fake(Fake::NoDevice, Fake::NoDevice, 0, true), &["--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["override_bugs"]["run"], false, "{v:#}");
}

#[test]
fn a_hung_run_is_killed_after_the_timeout() {
    let s = fake(Fake::Right, Fake::Hang, 3, true);
    let start = std::time::Instant::now();
    let (c, out, _) = check(&s, &["--timeout", "1"]);
    assert!(start.elapsed().as_secs() < 20, "took {:?}", start.elapsed());
    assert_eq!(c, 3, "{out}");
    assert!(
        verdict_line(&out).contains("the run with rmcp failed: it ended with killed after 1 s"),
        "{out}"
    );
}

#[test]
fn shim_not_loaded_with_rmcp_is_inconclusive() {
    let s = fake(Fake::Right, Fake::Right, 3, false);
    let (c, out, _) = check(&s, &[]);
    assert_eq!(c, 3, "{out}");
    assert!(
        verdict_line(&out).contains("librmcp_shim.so was not loaded in the run with rmcp"),
        "{out}"
    );
}

#[test]
fn nothing_rewritten_suggests_force_and_force_sets_the_mode() {
    let s = fake(Fake::Right, Fake::Right, 0, true);
    let (c, out, _) = check(&s, &[]);
    assert_eq!(c, 0, "{out}");
    let v = verdict_line(&out);
    assert!(v.contains("rmcp rewrote no hipHostMalloc call"), "{v}");
    assert!(v.contains("rmcp check --force"), "{v}");
    let mode: Vec<&str> = out
        .lines()
        .find(|l| l.trim_start().starts_with("mode "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(mode, ["mode", "unset", "auto"], "{out}");

    let (c, out, _) = check(&s, &["--force"]);
    assert_eq!(c, 0, "{out}");
    assert!(!verdict_line(&out).contains("--force"), "{out}");
    let mode: Vec<&str> = out
        .lines()
        .find(|l| l.trim_start().starts_with("mode "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(mode, ["mode", "unset", "force"], "{out}");
}

#[test]
fn the_run_without_rmcp_has_no_shim_in_ld_preload() {
    let s = fake(Fake::Right, Fake::Right, 3, true);
    let other = s.dir.path().join("old/librmcp_shim.so");
    let out = rmcp()
        .env(
            "LD_PRELOAD",
            format!("{}:/nonexistent/liba.so", other.display()),
        )
        .arg("check")
        .arg("--measure-with")
        .arg(&s.program)
        .arg("--shim")
        .arg(&s.shim)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let row: Vec<&str> = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("preload "))
        .unwrap()
        .split_whitespace()
        .collect();
    let with = format!("{}:/nonexistent/liba.so", s.shim.display());
    assert_eq!(
        row,
        ["preload", "/nonexistent/liba.so", with.as_str()],
        "{stdout}"
    );
}

/// A `--runtime` or `--shim` that is not there is a usage error (2, with a sentence naming
/// it; was 127, the shell's "command not found"); so is one that is no regular file
/// (tests/cli_input.rs). A shim found nowhere, with no option naming it, stays 127.
#[test]
fn missing_runtime_or_shim_is_a_usage_error() {
    let s = fake(Fake::Right, Fake::Right, 3, true);
    let out = rmcp()
        .args([
            "check",
            "--runtime",
            "/nonexistent/libamdhip64.so.6",
            "--shim",
        ])
        .arg(&s.shim)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    if err.contains("built without the GPU code") {
        rmcp_testkit::missing(
            "rmcp was built without hipcc: no GPU code for rmcp check (apt-get install hipcc, then rebuild)",
        );
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        "rmcp check: /nonexistent/libamdhip64.so.6: No such file or directory (--runtime)\n"
    );

    let out = rmcp()
        .arg("check")
        .arg("--measure-with")
        .arg(&s.program)
        .args(["--shim", "/nonexistent/librmcp_shim.so"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rmcp check: /nonexistent/librmcp_shim.so: No such file or directory (--shim)\n"
    );
}

// ---- the real measurement ----

/// Whether this rmcp carries the GPU code; under CI its absence fails.
fn has_kernels() -> bool {
    let out = rmcp()
        .args([
            "check",
            "--json",
            "--runtime",
            "/nonexistent/libamdhip64.so",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("built without the GPU code") {
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("apt-get install hipcc"), "{err}");
        rmcp_testkit::missing(
            "rmcp was built without hipcc: no GPU code for rmcp check (apt-get install hipcc, then rebuild)",
        );
        return false;
    }
    true
}

/// Debian's 5.2.3 runtime, the system one here; under CI its absence fails.
fn system_runtime() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5");
    if p.exists() {
        return Some(p);
    }
    rmcp_testkit::missing(&format!(
        "{} is missing (apt-get install libamdhip64-5)",
        p.display()
    ));
    None
}

/// rmcp check --json with the real shim; (exit status, the JSON).
fn check_json(cmd: &mut Command) -> (i32, Value) {
    let out = cmd
        .arg("check")
        .arg("--json")
        .arg("--shim")
        .arg(rmcp_testkit::shim())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("killed"), v)
}

/// No GPU here: the real measurement must say so, with exit status 2, in both runs.
#[test]
fn without_a_gpu_the_check_says_no_gpu() {
    if !has_kernels() || system_runtime().is_none() {
        return;
    }
    if Path::new("/dev/kfd").exists() {
        rmcp_testkit::skip("/dev/kfd exists; this test is for machines without a GPU");
        return;
    }
    let (code, v) = check_json(rmcp().env("RMCP_PYTHON", ""));
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(v["verdict"], "no-gpu", "{v:#}");
    assert_eq!(v["sentence"], "no usable GPU: nothing to check");
    for (run, shim) in [("without_rmcp", "not loaded"), ("with_rmcp", "loaded /")] {
        let r = &v["runs"][run];
        assert_eq!(
            r["device"], "none (hipGetDeviceCount: hipErrorNoDevice (100), 0 devices)",
            "{v:#}"
        );
        assert!(r["shim"].as_str().unwrap().starts_with(shim), "{v:#}");
        assert_eq!(r["ended"]["exit_status"], 2, "{v:#}");
        for bad in ["terminate called", "Aborted", "Segmentation", "panicked"] {
            assert!(!r["stderr"].as_str().unwrap().contains(bad), "{v:#}");
        }
    }
    assert!(
        v["runtime"]["version"]
            .as_str()
            .unwrap()
            .starts_with("5.2."),
        "{v:#}"
    );
    let targets: Vec<&str> = v["kernels"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for t in [
        "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1036", "gfx1100",
    ] {
        assert!(targets.contains(&t), "{targets:?}");
    }
    // The text form says the same.
    let out = rmcp()
        .env("RMCP_PYTHON", "")
        .arg("check")
        .arg("--shim")
        .arg(rmcp_testkit::shim())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert_eq!(
        verdict_line(&stdout),
        "verdict: no usable GPU: nothing to check"
    );
    assert!(stdout.contains("verdict word: no-gpu"), "{stdout}");
}

/// rmcp opens the runtime with dlopen: its binary names no HIP library.
#[test]
fn rmcp_links_no_hip_soname() {
    let out = Command::new("objdump").arg("-p").arg(RMCP).output();
    let Ok(out) = out else {
        rmcp_testkit::missing("objdump is missing (apt-get install binutils)");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("NEEDED"))
        .map(str::trim)
        .collect();
    assert!(!needed.is_empty(), "{text}");
    for n in &needed {
        assert!(
            !n.contains("amdhip") && !n.contains("hsa") && !n.contains("hip"),
            "rmcp needs {n}: {needed:?}"
        );
    }
}

/// A venv with a stand-in torch whose torch/lib holds a copy of the runtime: rmcp check
/// measures with that copy, not with the system's; `--runtime` names another.
#[test]
fn the_pytorch_bundled_runtime_is_chosen_over_the_system_one() {
    if !has_kernels() {
        return;
    }
    let Some(system) = system_runtime() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let st = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status();
    if !st.is_ok_and(|s| s.success()) {
        rmcp_testkit::missing("python3 -m venv failed (apt-get install python3-venv)");
        return;
    }
    let sp = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages"))
        .find(|p| p.is_dir())
        .expect("the venv's site-packages");
    let lib = sp.join("torch/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(sp.join("torch/__init__.py"), "").unwrap();
    std::fs::write(
        sp.join("torch/version.py"),
        "__version__ = '2.4.0+rocm5.2'\nhip = '5.2'\n",
    )
    .unwrap();
    let copy = lib.join("libamdhip64.so");
    std::fs::copy(std::fs::canonicalize(&system).unwrap(), &copy).unwrap();
    let copy = std::fs::canonicalize(&copy).unwrap();
    // The venv's python first on PATH, as `source venv/bin/activate` makes it.
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (_, v) = check_json(rmcp().env("PATH", &path).env_remove("RMCP_PYTHON"));
    assert_eq!(v["runtime"]["chosen_by"], "PyTorch", "{v:#}");
    assert_eq!(v["runtime"]["path"], copy.display().to_string(), "{v:#}");
    assert_eq!(
        v["runs"]["without_rmcp"]["runtime"],
        copy.display().to_string()
    );
    assert_eq!(
        v["runs"]["with_rmcp"]["runtime"],
        copy.display().to_string()
    );
    // VIRTUAL_ENV alone (no python on PATH asked) finds it too.
    let (_, v) = check_json(rmcp().env("VIRTUAL_ENV", &venv).env("RMCP_PYTHON", ""));
    assert_eq!(v["runtime"]["path"], copy.display().to_string(), "{v:#}");
    // --runtime wins.
    let out = rmcp()
        .env("PATH", &path)
        .args(["check", "--json", "--shim"])
        .arg(rmcp_testkit::shim())
        .arg("--runtime")
        .arg(&system)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runtime"]["chosen_by"], "--runtime", "{v:#}");
    assert_eq!(
        v["runtime"]["path"],
        std::fs::canonicalize(&system)
            .unwrap()
            .display()
            .to_string(),
        "{v:#}"
    );
}

/// On the emulated GPU (an RX 5700 XT, gfx1010, no PCIe atomics) the runtime finds the
/// device, allocates, loads the kernels and launches them, but no kernel runs: every
/// placement is wrong, the controls too, and the verdict must be `inconclusive`, never
/// `fixed`. With rmcp the coherent hipHostMalloc calls were rewritten.
#[test]
fn on_the_emulated_gpu_the_verdict_is_inconclusive() {
    if !has_kernels() || system_runtime().is_none() {
        return;
    }
    // emugpu_lib records the skip (or fails under CI).
    let Some(emugpu) = rmcp_testkit::emugpu_lib() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("emu.jsonl");
    let (code, v) = check_json(
        rmcp()
            .env("RMCP_PYTHON", "")
            .env("LD_PRELOAD", &emugpu)
            .env("EMUGPU_FIXTURE", rmcp_testkit::fixture("rdna1"))
            .env("EMUGPU_LOG", &log),
    );
    assert_eq!(code, 3, "{v:#}");
    assert_eq!(v["verdict"], "inconclusive", "{v:#}");
    let sentence = v["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("the control placement is wrong too")
            && sentence.contains("ran no kernel"),
        "{sentence}"
    );
    assert!(v["device"].as_str().unwrap().contains("gfx1010"), "{v:#}");
    assert!(
        v["kfd"]
            .as_str()
            .unwrap()
            .contains("pcie-atomics unsupported"),
        "{v:#}"
    );
    for run in ["without_rmcp", "with_rmcp"] {
        let r = &v["runs"][run];
        assert_eq!(r["kernels"], "loaded (15 targets)", "{run}: {v:#}");
        for p in r["placements"].as_array().unwrap() {
            assert_eq!(p["wrong"], true, "{run}: {p}");
        }
    }
    assert_eq!(v["rewrites"]["rewritten"], 15, "{v:#}");
    // The buffer-layout experiment: its kernels load and launch (counts, no error line) but
    // nothing runs, the control included: inconclusive, never a verdict on the layouts.
    let b = &v["buffer_layout"];
    assert_eq!(b["verdict"], "inconclusive", "{b:#}");
    assert!(
        b["sentence"].as_str().unwrap().contains("the control"),
        "{b:#}"
    );
    for run in ["without_rmcp", "with_rmcp"] {
        for k in ["triton_rdna1_layout", "rdna_layout", "global_control"] {
            let c = &b[run][k];
            assert_eq!(c["total"], 4096, "{run} {k}: {b:#}");
            assert_eq!(c["written"], 0, "{run} {k}: {b:#}");
        }
        assert_eq!(b[run]["triton_rdna1_layout"]["word3"], "0x00027000");
        assert_eq!(b[run]["rdna_layout"]["word3"], "0x31027000");
    }
    // The override experiments: a gfx1010, so they ran, in a third run where the runtime
    // took the card for a gfx1030 and loaded the gfx1030 kernels; the packets completed,
    // nothing ran, every output kept its sentinel: inconclusive, never a verdict on the card.
    let o = &v["override_bugs"];
    assert_eq!(o["run"], true, "{o:#}");
    assert_eq!(o["card"], "gfx1010", "{o:#}");
    assert!(o["device"].as_str().unwrap().contains(" gfx1030 "), "{o:#}");
    assert_eq!(o["override_kernels"], "loaded (gfx1030)", "{o:#}");
    assert_eq!(o["ended"]["exit_status"], 0, "{o:#}");
    for k in ["flat_offset", "fma_legacy"] {
        assert_eq!(o[k]["verdict"], "inconclusive", "{k}: {o:#}");
        assert!(
            o[k]["sentence"].as_str().unwrap().contains("ran no kernel"),
            "{k}: {o:#}"
        );
    }
    assert_eq!(o["flat_offset"]["offset16"], "0xdeadbeef", "{o:#}");
    assert_eq!(o["flat_offset"]["control"], "0xdeadbeef", "{o:#}");
    assert_eq!(o["fma_legacy"]["fmac_legacy"], "0xdeadbeef", "{o:#}");
    // What reached the driver: the coherent placements' hipHostMalloc allocations were
    // COHERENT in the first run only (one main thread per run, in order).
    let text = std::fs::read_to_string(&log).unwrap();
    let mut per_thread: Vec<(u64, usize, usize)> = Vec::new();
    for l in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        if e["api"] != "hipHostMalloc" || e["ioctl"] != "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU" {
            continue;
        }
        let tid = e["tid"].as_u64().unwrap();
        let coherent = e["flag_names"]
            .as_array()
            .is_some_and(|f| f.iter().any(|n| n == "COHERENT"));
        match per_thread.iter_mut().find(|t| t.0 == tid) {
            Some(t) => {
                t.1 += 1;
                t.2 += usize::from(coherent);
            }
            None => per_thread.push((tid, 1, usize::from(coherent))),
        }
    }
    let counts: Vec<(usize, usize)> = per_thread.iter().map(|t| (t.1, t.2)).collect();
    assert_eq!(
        counts,
        [(20, 15), (20, 0)],
        "(allocations, COHERENT) per run"
    );
}
