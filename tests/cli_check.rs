//! `rmcp check`: the verdict for each combination of the two runs, with a fake field-check
//! program (a shell script whose output depends on whether LD_PRELOAD carries
//! librmcp_shim.so), plus the real compiled program (examples/field-check), which on a
//! machine without a GPU must say "no usable device" and exit 2.
//!
//! The shim is any existing file named librmcp_shim.so, as in cli_run.rs: the fake program
//! only looks at LD_PRELOAD; ld.so complains on stderr that it cannot preload a non-ELF
//! file and carries on.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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
        .arg("--binary")
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
fn wrong_on_vram_is_more_than_the_coherence_failure() {
    assert_verdict(
        Fake::Wrong(&["vram", "host-default"]),
        Fake::Right,
        0,
        "includes placements rmcp does not change",
    );
    assert_verdict(
        Fake::Wrong(&["host-noncoherent"]),
        Fake::Wrong(&["host-noncoherent"]),
        1,
        "atomics are wrong on host-noncoherent, which includes placements rmcp does not change; \
         with rmcp: not fixed",
    );
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
        .arg("--binary")
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

#[test]
fn missing_program_or_shim_is_127() {
    let s = fake(Fake::Right, Fake::Right, 3, true);
    let out = rmcp()
        .args([
            "check",
            "--binary",
            "/nonexistent/rmcp-field-check",
            "--shim",
        ])
        .arg(&s.shim)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--binary: /nonexistent/rmcp-field-check"),
        "{err}"
    );
    assert!(err.contains("examples/field-check/build.sh"), "{err}");

    let out = rmcp()
        .env("RMCP_FIELD_CHECK", &s.program)
        .args(["check", "--shim", "/nonexistent/librmcp_shim.so"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("librmcp_shim.so not found"));
}

// ---- the real program ----

/// The compiled field-check program: RMCP_FIELD_CHECK. Under CI its absence fails.
fn real_program() -> Option<PathBuf> {
    match std::env::var_os("RMCP_FIELD_CHECK").filter(|v| !v.is_empty()) {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "RMCP_FIELD_CHECK={} does not exist",
                p.display()
            );
            Some(p)
        }
        None => {
            rmcp_testkit::missing(
                "RMCP_FIELD_CHECK is not set (build examples/field-check/build.sh, with hipcc, \
                 and point RMCP_FIELD_CHECK at the result)",
            );
            None
        }
    }
}

fn clean(program: &Path) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_") || k == "LD_PRELOAD" || k.starts_with("HSA_") {
            c.env_remove(&k);
        }
    }
    c
}

/// No GPU here: the real program must say so, cleanly, with exit status 2.
#[test]
fn real_program_without_a_gpu_says_no_device() {
    let Some(program) = real_program() else {
        return;
    };
    if Path::new("/dev/kfd").exists() {
        rmcp_testkit::skip("/dev/kfd exists; this test is for machines without a GPU");
        return;
    }
    for preload in [None, Some(rmcp_testkit::shim())] {
        let mut c = clean(&program);
        if let Some(s) = &preload {
            c.env("LD_PRELOAD", s);
        }
        let out = c.output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "stdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines[0], "field-check: 1", "{stdout}");
        assert!(
            lines.iter().any(|l| l.starts_with("hip-runtime: ")),
            "{stdout}"
        );
        assert!(
            lines.contains(&"device: none (hipGetDeviceCount: hipErrorNoDevice (100), 0 devices)"),
            "{stdout}"
        );
        assert_eq!(
            lines.last(),
            Some(&"verdict: no usable device: nothing was run"),
            "{stdout}"
        );
        let shim = if preload.is_some() {
            "shim: loaded /"
        } else {
            "shim: not loaded"
        };
        assert!(lines.iter().any(|l| l.starts_with(shim)), "{stdout}");
        // A clean message: no abort, no C++ exception, nothing on stderr but what the
        // runtime itself may say.
        for bad in ["terminate called", "Aborted", "Segmentation", "core dumped"] {
            assert!(!stderr.contains(bad), "{stderr}");
        }
    }

    // rmcp check on the real program, with the real shim.
    let out = rmcp()
        .arg("check")
        .arg("--binary")
        .arg(&program)
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
}

/// The program reads the KFD topology as `rmcp doctor` does (tests/fixtures).
#[test]
fn real_program_reads_pcie_atomics_like_doctor() {
    let Some(program) = real_program() else {
        return;
    };
    let cases = [
        (
            "rdna1",
            "0000:03:00.0",
            "kfd: node 1 gfx1010 pcie-atomics unsupported (io_links flags [13])",
        ),
        (
            "rdna2",
            "0000:03:00.0",
            "kfd: node 1 gfx1031 pcie-atomics supported (io_links flags [1])",
        ),
        (
            "mixed",
            "0000:0a:00.0",
            "kfd: node 2 gfx1100 pcie-atomics supported (io_links flags [1])",
        ),
        (
            "two-cpu-mixed-domain",
            "0001:41:00.0",
            "kfd: node 2 gfx1031 pcie-atomics unsupported (io_links flags [13])",
        ),
        (
            "malformed",
            "0000:03:00.0",
            "kfd: node 1 gfx1010 pcie-atomics unknown (io_links flags [])",
        ),
        (
            "rdna1",
            "0000:04:00.0",
            "kfd: unknown (no GPU node at 0000:04:00.0 under ",
        ),
    ];
    for (fixture, pci, want) in cases {
        let out = clean(&program)
            .env("RMCP_SYSFS_ROOT", rmcp_testkit::fixture(fixture))
            .args(["--kfd", pci])
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{fixture}: {stdout}");
        assert!(
            stdout.starts_with(want),
            "{fixture} {pci}: got {stdout:?}, want {want:?}"
        );
    }
}
