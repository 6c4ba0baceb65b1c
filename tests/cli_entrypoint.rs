//! examples/container/entrypoint.sh, run by the shells a container may have (dash as
//! /bin/sh on Debian/Ubuntu, bash): both paths (with `rmcp run`, and plain LD_PRELOAD),
//! exit statuses, signals, argument passing and LD_PRELOAD merging. No Docker engine is
//! involved: the Dockerfile beside the script is an example, not built in CI.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/container/entrypoint.sh")
}

/// The POSIX shells available here (at least `sh`).
fn shells() -> Vec<&'static str> {
    let mut out = vec!["sh"];
    for s in ["dash", "bash"] {
        if Command::new(s)
            .args(["-c", "exit 0"])
            .status()
            .is_ok_and(|st| st.success())
        {
            out.push(s);
        }
    }
    out
}

struct Fx {
    _dir: tempfile::TempDir,
    shim: String,
    /// A directory on PATH holding a symlink to rmcp.
    rmcp_dir: PathBuf,
}

fn fx() -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let shim = root.join("librmcp_shim.so");
    std::fs::write(&shim, b"not a library").unwrap();
    let rmcp_dir = root.join("bin");
    std::fs::create_dir(&rmcp_dir).unwrap();
    std::os::unix::fs::symlink(RMCP, rmcp_dir.join("rmcp")).unwrap();
    Fx {
        _dir: dir,
        shim: shim.display().to_string(),
        rmcp_dir,
    }
}

/// `shell entrypoint.sh ARGS` with a clean RMCP_*/LD_PRELOAD environment.
fn entry(shell: &str, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(shell);
    c.arg(script()).args(args);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_") || k == "LD_PRELOAD" {
            c.env_remove(&k);
        }
    }
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

// MERGES: the merge rule as a table, shared with src/preload.rs's unit test.
include!("../src/preload_cases.rs");

const SHOW_PRELOAD: [&str; 3] = ["sh", "-c", "printf '%s' \"$LD_PRELOAD\""];

#[test]
fn script_parses_as_posix_sh() {
    for sh in shells() {
        let st = Command::new(sh).arg("-n").arg(script()).status().unwrap();
        assert!(st.success(), "{sh} -n");
    }
    if Command::new("bash").arg("--version").output().is_ok() {
        let st = Command::new("bash")
            .args(["--posix", "-n"])
            .arg(script())
            .status()
            .unwrap();
        assert!(st.success());
    }
}

#[test]
fn plain_mode_merges_ld_preload() {
    let f = fx();
    for sh in shells() {
        let plain = |preload: Option<&str>| -> String {
            let mut vars = vec![("RMCP_BIN", ""), ("RMCP_SHIM", f.shim.as_str())];
            if let Some(p) = preload {
                vars.push(("LD_PRELOAD", p));
            }
            let out = entry(sh, &vars, &SHOW_PRELOAD);
            assert!(out.status.success(), "{sh}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        let s = &f.shim;
        for (existing, want) in MERGES {
            let existing = existing.map(|e| e.replace('S', s));
            assert_eq!(
                plain(existing.as_deref()),
                want.replace('S', s),
                "{sh}: LD_PRELOAD={existing:?}"
            );
        }
    }
}

#[test]
fn rmcp_mode_uses_rmcp_run() {
    let f = fx();
    let path = format!(
        "{}:{}",
        f.rmcp_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for sh in shells() {
        // rmcp on PATH.
        let out = entry(
            sh,
            &[
                ("PATH", &path),
                ("RMCP_SHIM", &f.shim),
                ("LD_PRELOAD", "/x/a.so /x/b.so"),
            ],
            &SHOW_PRELOAD,
        );
        assert!(out.status.success(), "{sh}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{}:/x/a.so:/x/b.so", f.shim)
        );
        // rmcp named by RMCP_BIN, and rmcp's own "not found" (127, says where it looked).
        let bin = f.rmcp_dir.join("rmcp");
        let out = entry(
            sh,
            &[
                ("RMCP_BIN", bin.to_str().unwrap()),
                ("RMCP_SHIM", "/nonexistent/librmcp_shim.so"),
            ],
            &["true"],
        );
        assert_eq!(out.status.code(), Some(127), "{sh}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("RMCP_SHIM: /nonexistent"));
    }
}

#[test]
fn exit_status_signals_and_arguments_are_the_commands() {
    let f = fx();
    let path = format!(
        "{}:{}",
        f.rmcp_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let awkward = ["two words", "it's", "\"q\"", "a\nb", "", "*", "--help"];
    for sh in shells() {
        for mode in [
            vec![("RMCP_BIN", ""), ("RMCP_SHIM", f.shim.as_str())],
            vec![("PATH", path.as_str()), ("RMCP_SHIM", f.shim.as_str())],
        ] {
            let out = entry(sh, &mode, &["sh", "-c", "exit 7"]);
            assert_eq!(out.status.code(), Some(7), "{sh} {mode:?}");
            let out = entry(sh, &mode, &["sh", "-c", "kill -TERM $$"]);
            assert_eq!(out.status.signal(), Some(15), "{sh} {mode:?}: {out:?}");
            let mut args = vec!["sh", "-c", "for a; do printf '%s\\0' \"$a\"; done", "sh"];
            args.extend(awkward);
            let out = entry(sh, &mode, &args);
            assert!(out.status.success(), "{sh} {mode:?}");
            let seen: Vec<&str> = std::str::from_utf8(&out.stdout)
                .unwrap()
                .strip_suffix('\0')
                .unwrap()
                .split('\0')
                .collect();
            assert_eq!(seen, awkward, "{sh} {mode:?}");
            let out = entry(sh, &mode, &["rmcp-no-such-command-xyz"]);
            assert_eq!(out.status.code(), Some(127), "{sh} {mode:?}");
        }
    }
}

#[test]
fn plain_mode_errors() {
    let f = fx();
    for sh in shells() {
        // Named shim missing: 127 and the path.
        let out = entry(
            sh,
            &[
                ("RMCP_BIN", ""),
                ("RMCP_SHIM", "/nonexistent/librmcp_shim.so"),
            ],
            &["true"],
        );
        assert_eq!(out.status.code(), Some(127), "{sh}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("/nonexistent/librmcp_shim.so"), "{err}");
        // Not executable: 126.
        let out = entry(sh, &[("RMCP_BIN", ""), ("RMCP_SHIM", &f.shim)], &[&f.shim]);
        assert_eq!(out.status.code(), Some(126), "{sh}: {out:?}");
        // RMCP_BIN that is not executable falls back to the plain path, saying so.
        let out = entry(
            sh,
            &[("RMCP_BIN", "/nonexistent/rmcp"), ("RMCP_SHIM", &f.shim)],
            &SHOW_PRELOAD,
        );
        assert!(out.status.success(), "{sh}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), f.shim);
        assert!(String::from_utf8_lossy(&out.stderr).contains("not executable"));
    }
}

#[test]
fn plain_mode_default_locations_are_named_when_missing() {
    // Only meaningful where no shim is installed system-wide.
    let installed = ["/usr/local/lib", "/usr/lib", "/opt/rmcp/lib"]
        .iter()
        .any(|d| Path::new(d).join("librmcp_shim.so").exists());
    if installed {
        rmcp_testkit::skip("a system-wide librmcp_shim.so exists: default locations not checked");
        return;
    }
    for sh in shells() {
        let out = entry(sh, &[("RMCP_BIN", "")], &["true"]);
        assert_eq!(out.status.code(), Some(127), "{sh}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("/usr/local/lib") && err.contains("/opt/rmcp/lib"),
            "{err}"
        );
        assert!(
            err.contains("examples/container"),
            "script's own directory: {err}"
        );
    }
}

#[test]
fn train_example_compiles_and_explains_a_missing_pytorch() {
    // examples/train.py needs PyTorch for ROCm and a GPU; CI checks only what it can.
    let train = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/train.py");
    let Ok(out) = Command::new("python3")
        .args(["-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())"])
        .arg(&train)
        .output()
    else {
        rmcp_testkit::missing("no python3 (apt-get install python3)");
        return;
    };
    assert!(out.status.success(), "{out:?}");
    let has_torch = Command::new("python3")
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        let out = Command::new("python3")
            .arg(&train)
            .args(["--steps", "1"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("PyTorch is not installed"));
    }
}
