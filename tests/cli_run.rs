//! `rmcp run`: LD_PRELOAD merging, the RMCP_* options, exec semantics (status, signals,
//! pid), missing and non-executable commands, awkward arguments, shim not found.
//!
//! The shim is any existing file (the tests only look at LD_PRELOAD); ld.so complains on
//! stderr that it cannot preload a non-ELF file and carries on.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");

struct Fixture {
    dir: tempfile::TempDir,
    shim: PathBuf,
}

impl Fixture {
    /// `rmcp run --shim <this fixture's shim>`, arguments to follow.
    fn run(&self) -> Command {
        let mut c = rmcp();
        c.args(["run", "--shim"]).arg(&self.shim);
        c
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("librmcp_shim.so");
    std::fs::write(&shim, b"not really a library").unwrap();
    let shim = std::fs::canonicalize(&shim).unwrap();
    Fixture { dir, shim }
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

/// Runs `rmcp run --shim SHIM [opts] -- sh -c 'printf "%s\0" "$LD_PRELOAD"'`.
fn preload_seen(shim: &Path, existing: Option<&str>) -> String {
    let mut c = rmcp();
    c.arg("run").arg("--shim").arg(shim);
    c.args(["--", "sh", "-c", "printf '%s' \"$LD_PRELOAD\""]);
    if let Some(v) = existing {
        c.env("LD_PRELOAD", v);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn ld_preload_is_set_when_empty() {
    let f = fixture();
    let s = f.shim.display().to_string();
    assert_eq!(preload_seen(&f.shim, None), s);
    assert_eq!(preload_seen(&f.shim, Some("")), s);
}

#[test]
fn ld_preload_keeps_colon_and_space_separated_entries() {
    let f = fixture();
    let s = f.shim.display().to_string();
    assert_eq!(
        preload_seen(&f.shim, Some("/x/liba.so:/x/libb.so")),
        format!("{s}:/x/liba.so:/x/libb.so")
    );
    assert_eq!(
        preload_seen(&f.shim, Some("/x/liba.so /x/libb.so")),
        format!("{s}:/x/liba.so:/x/libb.so")
    );
    assert_eq!(
        preload_seen(&f.shim, Some(" /x/liba.so : /x/libb.so ")),
        format!("{s}:/x/liba.so:/x/libb.so")
    );
}

#[test]
fn ld_preload_never_gets_the_shim_twice() {
    let f = fixture();
    let s = f.shim.display().to_string();
    // Already there, in any position: unchanged.
    let v = format!("/x/liba.so {s}");
    assert_eq!(preload_seen(&f.shim, Some(&v)), v);
    // The same file through another path (a symlink) counts as the shim.
    let link = f.dir.path().join("link.so");
    std::os::unix::fs::symlink(&f.shim, &link).unwrap();
    let v = format!("{}:/x/liba.so", link.display());
    assert_eq!(preload_seen(&f.shim, Some(&v)), v);
    // Another copy of the shim is replaced.
    assert_eq!(
        preload_seen(&f.shim, Some("/old/librmcp_shim.so:/x/liba.so")),
        format!("{s}:/x/liba.so")
    );
    let seen = preload_seen(&f.shim, Some(&format!("{s}:/old/librmcp_shim.so")));
    assert_eq!(seen, s);
}

#[test]
fn relative_shim_path_becomes_absolute() {
    let f = fixture();
    let out = rmcp()
        .current_dir(f.dir.path())
        .args(["run", "--shim", "./sub/../librmcp_shim.so", "--"])
        .args(["sh", "-c", "printf '%s' \"$LD_PRELOAD\""])
        .output()
        .unwrap();
    // ./sub does not exist: the shim is not found there.
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    std::fs::create_dir(f.dir.path().join("sub")).unwrap();
    let out = rmcp()
        .current_dir(f.dir.path())
        .args(["run", "--shim", "./sub/../librmcp_shim.so", "--"])
        .args(["sh", "-c", "printf '%s' \"$LD_PRELOAD\""])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        f.shim.display().to_string()
    );
}

fn env_of(out: &Output) -> Vec<(String, String)> {
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
    env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

#[test]
fn options_map_to_shim_variables() {
    let f = fixture();
    let out = f
        .run()
        .args([
            "--mode",
            "force",
            "--log",
            "debug",
            "--log-file",
            "/tmp/rmcp.log",
            "--stats",
            "--stats-file",
            "/tmp/rmcp-%p.json",
            "--targets",
            "gfx1010, gfx1031",
            "--finegrained",
            "keep",
            "--exempt",
            "librccl,libfoo",
            "--hip-library",
            "/opt/rocm/lib/libamdhip64.so.6",
            "--",
            "env",
            "-0",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let env = env_of(&out);
    assert_eq!(get(&env, "RMCP_MODE"), Some("force"));
    assert_eq!(get(&env, "RMCP_LOG"), Some("debug"));
    assert_eq!(get(&env, "RMCP_LOG_FILE"), Some("/tmp/rmcp.log"));
    assert_eq!(get(&env, "RMCP_STATS"), Some("1"));
    assert_eq!(get(&env, "RMCP_STATS_FILE"), Some("/tmp/rmcp-%p.json"));
    assert_eq!(get(&env, "RMCP_TARGETS"), Some("gfx1010,gfx1031"));
    assert_eq!(get(&env, "RMCP_FINEGRAINED"), Some("keep"));
    assert_eq!(get(&env, "RMCP_EXEMPT"), Some("librccl,libfoo"));
    assert_eq!(
        get(&env, "RMCP_HIP_LIBRARY"),
        Some("/opt/rocm/lib/libamdhip64.so.6")
    );
    assert_eq!(get(&env, "LD_PRELOAD"), Some(f.shim.to_str().unwrap()));
}

#[test]
fn dry_run_and_untouched_variables() {
    let f = fixture();
    let out = rmcp()
        .args(["run", "--dry-run", "--shim"])
        .arg(&f.shim)
        .env("RMCP_LOG", "trace")
        .env("SOME_OTHER", "kept")
        .args(["--", "env", "-0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let env = env_of(&out);
    assert_eq!(get(&env, "RMCP_MODE"), Some("dry-run"));
    // Options not given leave the environment as it was.
    assert_eq!(get(&env, "RMCP_LOG"), Some("trace"));
    assert_eq!(get(&env, "SOME_OTHER"), Some("kept"));
    assert_eq!(get(&env, "RMCP_STATS"), None);
}

#[test]
fn bad_options_are_usage_errors() {
    let f = fixture();
    let out = rmcp()
        .args(["run", "--dry-run", "--mode", "force", "--shim"])
        .arg(&f.shim)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = rmcp()
        .args(["run", "--targets", "rdna2", "--shim"])
        .arg(&f.shim)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("gfx names"));
    let out = rmcp()
        .args(["run", "--mode", "sometimes", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn exit_status_is_the_commands() {
    let f = fixture();
    for code in [0, 1, 42, 255] {
        let out = f
            .run()
            .args(["--", "sh", "-c", &format!("exit {code}")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{out:?}");
    }
}

#[test]
fn signals_are_the_commands() {
    let f = fixture();
    let out = f
        .run()
        .args(["--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(15), "SIGTERM expected: {out:?}");
    assert_eq!(out.status.code(), None);
}

#[test]
fn exec_replaces_rmcp_no_fork() {
    let f = fixture();
    let child = f
        .run()
        .args(["--", "sh", "-c", "echo $$"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pid.to_string());
}

#[test]
fn sigpipe_is_not_left_ignored() {
    // Rust ignores SIGPIPE in its own process; the command must get the default back.
    let f = fixture();
    let out = f
        .run()
        .args(["--", "grep", "^SigIgn:", "/proc/self/status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout);
    let mask = u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_eq!(mask & (1 << (13 - 1)), 0, "SIGPIPE ignored: {line}");
}

#[test]
fn missing_command_is_127() {
    let f = fixture();
    let out = f
        .run()
        .args(["--", "rmcp-no-such-command-xyz", "arg"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rmcp-no-such-command-xyz"), "{err}");
}

#[test]
fn non_executable_command_is_126() {
    let f = fixture();
    let script = f.dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = f.run().arg("--").arg(&script).output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("script.sh"));
    // A directory cannot be run either.
    let out = f.run().arg("--").arg(f.dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{out:?}");
}

#[test]
fn awkward_arguments_pass_through_untouched() {
    let f = fixture();
    let args = [
        "two words",
        "it's",
        "\"double\"",
        "line1\nline2",
        "",
        "$HOME",
        "*",
        "--mode",
        "-x",
        "tab\there",
        "back\\slash",
    ];
    let out = f
        .run()
        .args([
            "--",
            "sh",
            "-c",
            "for a; do printf '%s\\0' \"$a\"; done",
            "sh",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .strip_suffix('\0')
        .unwrap()
        .split('\0')
        .collect();
    assert_eq!(seen, args);
}

#[test]
fn command_without_double_dash_and_hyphen_arguments() {
    let f = fixture();
    let out = f
        .run()
        .args(["printf", "%s|", "--help", "-v"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "--help|-v|");
}

/// A copy of rmcp in `dir/bin`, so that "next to rmcp" and "../lib" are under our control.
fn rmcp_copy(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("rmcp");
    // Never open the copy for writing in this process: a child forked by another test
    // thread would inherit the descriptor and exec would fail with ETXTBSY.
    if std::fs::hard_link(RMCP, &exe).is_err() {
        let ok = Command::new("cp").arg(RMCP).arg(&exe).status().unwrap();
        assert!(ok.success());
    }
    exe
}

fn clean(mut c: Command) -> Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_") || k == "LD_PRELOAD" {
            c.env_remove(&k);
        }
    }
    c
}

#[test]
fn shim_not_found_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let exe = rmcp_copy(dir.path());
    let out = clean(Command::new(&exe))
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let bin = dir.path().join("bin");
    assert!(err.contains("librmcp_shim.so not found"), "{err}");
    assert!(
        err.contains(&bin.join("librmcp_shim.so").display().to_string()),
        "{err}"
    );
    assert!(err.contains("../lib"), "{err}");
    assert!(err.contains("--shim"), "{err}");

    // Explicit settings that name nothing are failures too, naming what was given.
    let out = clean(Command::new(&exe))
        .args([
            "run",
            "--shim",
            "/nonexistent/librmcp_shim.so",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shim: /nonexistent/librmcp_shim.so"));
    let out = clean(Command::new(&exe))
        .env("RMCP_SHIM", "/nonexistent/env/librmcp_shim.so")
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("RMCP_SHIM: /nonexistent/env/librmcp_shim.so")
    );
}

#[test]
fn shim_search_order() {
    let dir = tempfile::tempdir().unwrap();
    let exe = rmcp_copy(dir.path());
    let seen = |c: &mut Command| -> String {
        let out = c
            .args(["run", "--", "sh", "-c", "printf '%s' \"$LD_PRELOAD\""])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let root = std::fs::canonicalize(dir.path()).unwrap();
    // ../lib relative to the executable.
    std::fs::create_dir(dir.path().join("lib")).unwrap();
    std::fs::write(dir.path().join("lib/librmcp_shim.so"), b"x").unwrap();
    assert_eq!(
        seen(&mut clean(Command::new(&exe))),
        root.join("lib/librmcp_shim.so").display().to_string()
    );
    // Next to the executable wins over ../lib.
    std::fs::write(dir.path().join("bin/librmcp_shim.so"), b"x").unwrap();
    assert_eq!(
        seen(&mut clean(Command::new(&exe))),
        root.join("bin/librmcp_shim.so").display().to_string()
    );
    // RMCP_SHIM wins over both, --shim over RMCP_SHIM.
    let other = dir.path().join("other.so");
    std::fs::write(&other, b"x").unwrap();
    let mut c = clean(Command::new(&exe));
    c.env("RMCP_SHIM", &other);
    assert_eq!(seen(&mut c), root.join("other.so").display().to_string());
    let mut c = clean(Command::new(&exe));
    c.env("RMCP_SHIM", &other).arg("run");
    let out = c
        .args(["--shim"])
        .arg(dir.path().join("lib/librmcp_shim.so"))
        .args(["--", "sh", "-c", "printf '%s' \"$LD_PRELOAD\""])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        root.join("lib/librmcp_shim.so").display().to_string()
    );
}

#[test]
fn shim_path_that_ld_preload_cannot_carry() {
    let dir = tempfile::tempdir().unwrap();
    let spaced = dir.path().join("with space");
    std::fs::create_dir(&spaced).unwrap();
    let shim = spaced.join("librmcp_shim.so");
    std::fs::write(&shim, b"x").unwrap();
    let out = rmcp()
        .args(["run", "--shim"])
        .arg(&shim)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("LD_PRELOAD cannot carry"));
}

#[test]
fn run_without_a_command_is_a_usage_error() {
    let out = rmcp().args(["run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// `rmcp run` says what the shim will say about a cross-family HSA_OVERRIDE_GFX_VERSION
/// (rmcp_core::remedy::cross_family_warning) before it execs, and leaves the variable as
/// it is; nothing for a same-family value, an unaffected card or RMCP_LOG=off.
#[test]
fn warns_about_a_cross_family_override_and_leaves_it_set() {
    let f = fixture();
    let run = |sysfs: &str, vars: &[(&str, &str)]| -> (Vec<String>, Vec<(String, String)>) {
        let mut c = f.run();
        c.env("RMCP_SYSFS_ROOT", rmcp_testkit::fixture(sysfs));
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.args(["--", "env", "-0"]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let warnings = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("rmcp: warning: "))
            .map(str::to_string)
            .collect();
        (warnings, env_of(&out))
    };
    let (w, env) = run("rdna1", &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    assert_eq!(w.len(), 1, "{w:?}");
    for part in [
        "HSA_OVERRIDE_GFX_VERSION=10.3.0",
        "node 1 (gfx1010)",
        "RDNA2 code on RDNA1 silicon",
        "rmcp doctor",
    ] {
        assert!(w[0].contains(part), "{part} in {}", w[0]);
    }
    assert_eq!(get(&env, "HSA_OVERRIDE_GFX_VERSION"), Some("10.3.0"));
    let (w, _) = run("rdna1", &[("HSA_OVERRIDE_GFX_VERSION_1", "10.3.0")]);
    assert_eq!(w.len(), 1, "{w:?}");
    // Options count as the command will see them: --log off silences it.
    let mut c = f.run();
    c.env("RMCP_SYSFS_ROOT", rmcp_testkit::fixture("rdna1"))
        .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
        .args(["--log", "off", "--", "true"]);
    let out = c.output().unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("rmcp: warning"),
        "{out:?}"
    );
    for (sysfs, vars) in [
        ("rdna2", vec![("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]),
        ("rdna3", vec![("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]),
        ("rdna1", vec![("HSA_OVERRIDE_GFX_VERSION", "10.1.0")]),
        ("rdna1", vec![]),
        (
            "rdna1",
            vec![("HSA_OVERRIDE_GFX_VERSION", "10.3.0"), ("RMCP_LOG", "off")],
        ),
    ] {
        let (w, _) = run(sysfs, &vars);
        assert!(w.is_empty(), "{sysfs} {vars:?}: {w:?}");
    }
}
