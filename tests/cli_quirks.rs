//! The quirks (rmcp-core's quirks.rs: `AMDGCN_USE_BUFFER_OPS=0` and a separate
//! `TORCHINDUCTOR_CACHE_DIR` on an RX 5000) as each of their three appliers applies them,
//! against one table: `rmcp run -- env`, examples/container/entrypoint.sh `env` (with
//! `rmcp run` and in plain sh, in every shell here) and `rmcp_rdna.enable()` (python/rmcp_rdna, copied
//! beside the cargo-built shim and imported by python3, which loads the shim for real; no
//! HIP runtime is involved). Each case names a KFD fixture and the variables the user set;
//! the command then shows what it got.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rmcp_testkit as kit;

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
const BUFFER_OPS: &str = "AMDGCN_USE_BUFFER_OPS";
const INDUCTOR: &str = "TORCHINDUCTOR_CACHE_DIR";
/// Inductor's default for the user and temporary directory every case sets.
const DEFAULT: &str = "/tmp/torchinductor_rmcpquirks";
const OURS: &str = "/tmp/torchinductor_rmcpquirks_rmcp_nobufferops";

/// (fixture, variables the user set, AMDGCN_USE_BUFFER_OPS seen, TORCHINDUCTOR_CACHE_DIR
/// seen, words the message must have: None when there must be no message).
type Case = (
    &'static str,
    &'static [(&'static str, &'static str)],
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
);

const CASES: &[Case] = &[
    // An RX 5700 XT: both set, and said.
    (
        "rdna1",
        &[],
        Some("0"),
        Some(OURS),
        Some("AMDGCN_USE_BUFFER_OPS=0"),
    ),
    (
        "rdna1-gfx1013",
        &[],
        Some("0"),
        Some(OURS),
        Some("AMDGCN_USE_BUFFER_OPS=0"),
    ),
    (
        "mixed",
        &[],
        Some("0"),
        Some(OURS),
        Some("AMDGCN_USE_BUFFER_OPS=0"),
    ),
    // The user's knob is kept, whatever it says, and Inductor's cache with it.
    (
        "rdna1",
        &[(BUFFER_OPS, "1")],
        Some("1"),
        None,
        Some("=1 kept"),
    ),
    (
        "rdna1",
        &[(BUFFER_OPS, "0")],
        Some("0"),
        None,
        Some("=0 kept"),
    ),
    // Inductor's default is replaced; another directory is kept.
    (
        "rdna1",
        &[(INDUCTOR, DEFAULT)],
        Some("0"),
        Some(OURS),
        Some("TORCHINDUCTOR_CACHE_DIR="),
    ),
    (
        "rdna1",
        &[(INDUCTOR, "/data/ind")],
        Some("0"),
        Some("/data/ind"),
        Some("/data/ind"),
    ),
    // RMCP_QUIRKS=off: nothing set, nothing said.
    ("rdna1", &[("RMCP_QUIRKS", "off")], None, None, None),
    (
        "rdna1",
        &[("RMCP_QUIRKS", "off"), (BUFFER_OPS, "1")],
        Some("1"),
        None,
        None,
    ),
    // RDNA2, RDNA3, no GPU: nothing.
    ("rdna2-gfx1030", &[], None, None, None),
    ("rdna2", &[], None, None, None),
    ("rdna3", &[], None, None, None),
    ("cpu-only", &[], None, None, None),
];

/// The environment of every case: no RMCP_*, LD_PRELOAD or quirk variable from the test's
/// own environment; a fixed user and temporary directory (Inductor's default follows).
fn clean(c: &mut Command, fixture: &str, vars: &[(&str, &str)]) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_")
            || k == "LD_PRELOAD"
            || k == BUFFER_OPS
            || k == INDUCTOR
            || [
                "LOGNAME", "USER", "LNAME", "USERNAME", "TMPDIR", "TEMP", "TMP",
            ]
            .contains(&k.as_str())
        {
            c.env_remove(&k);
        }
    }
    c.env("LOGNAME", "rmcpquirks").env("TMPDIR", "/tmp");
    c.env("RMCP_SYSFS_ROOT", kit::fixture(fixture));
    for (k, v) in vars {
        c.env(k, v);
    }
}

fn seen(out: &Output, name: &str) -> Option<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")).map(str::to_owned))
}

/// Checks one applier's output against the case; `prefix` starts its message lines.
fn check(who: &str, case: &Case, out: &Output, prefix: &str) {
    let (fixture, vars, ops, ind, words) = case;
    let what = format!("{who}: {fixture} {vars:?}");
    assert!(out.status.success(), "{what}: {out:?}");
    assert_eq!(seen(out, BUFFER_OPS).as_deref(), *ops, "{what}: {out:?}");
    assert_eq!(seen(out, INDUCTOR).as_deref(), *ind, "{what}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with(prefix)).collect();
    match words {
        None => assert!(said.is_empty(), "{what}: said {said:?}"),
        Some(w) => {
            assert_eq!(said.len(), 1, "{what}: {err}");
            assert!(said[0].contains(w), "{what}: {w:?} not in {}", said[0]);
        }
    }
}

fn shim_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("librmcp_shim.so");
    std::fs::write(&shim, b"not a library").unwrap();
    (dir, shim)
}

#[test]
fn rmcp_run_applies_the_quirks() {
    let (_dir, shim) = shim_file();
    for case in CASES {
        let mut c = Command::new(RMCP);
        c.args(["run", "--shim"]).arg(&shim).args(["--", "env"]);
        clean(&mut c, case.0, case.1);
        check("rmcp run -- env", case, &c.output().unwrap(), "rmcp: ");
    }
}

#[test]
fn rmcp_log_off_silences_the_banner_not_the_quirks() {
    let (_dir, shim) = shim_file();
    let mut c = Command::new(RMCP);
    c.args(["run", "--shim"]).arg(&shim).args(["--", "env"]);
    clean(&mut c, "rdna1", &[("RMCP_LOG", "off")]);
    let case: Case = ("rdna1", &[("RMCP_LOG", "off")], Some("0"), Some(OURS), None);
    check(
        "rmcp run, RMCP_LOG=off",
        &case,
        &c.output().unwrap(),
        "rmcp: ",
    );
}

#[test]
fn the_entrypoint_applies_the_quirks() {
    let script = kit::repo().join("examples/container/entrypoint.sh");
    let (dir, shim) = shim_file();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(RMCP, bin.join("rmcp")).unwrap();
    let shim = shim.display().to_string();
    for sh in ["sh", "dash", "bash"] {
        if kit::which(sh).is_none() {
            continue;
        }
        for case in CASES {
            for (mode, rmcp_bin, prefix) in [
                ("plain", "", "rmcp-entrypoint: "),
                ("rmcp run", RMCP, "rmcp: "),
            ] {
                let mut c = Command::new(sh);
                c.arg(&script).arg("env");
                clean(&mut c, case.0, case.1);
                c.env("RMCP_BIN", rmcp_bin).env("RMCP_SHIM", &shim);
                check(
                    &format!("{sh} entrypoint ({mode})"),
                    case,
                    &c.output().unwrap(),
                    prefix,
                );
            }
        }
    }
}

/// python/rmcp_rdna copied into a directory with the cargo-built shim's two files, so that
/// `enable()` finds and loads them as in an installed wheel.
fn package_with_shim(dir: &Path) {
    let pkg = dir.join("rmcp_rdna");
    std::fs::create_dir(&pkg).unwrap();
    for e in std::fs::read_dir(kit::repo().join("python/rmcp_rdna")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "py") {
            std::fs::copy(&p, pkg.join(p.file_name().unwrap())).unwrap();
        }
    }
    let front = kit::shim();
    std::fs::copy(&front, pkg.join("librmcp_shim.so")).unwrap();
    std::fs::copy(
        front.with_file_name("librmcp_shim_body.so"),
        pkg.join("librmcp_shim_body.so"),
    )
    .unwrap();
}

#[test]
fn enable_applies_the_quirks() {
    let Some(python) = kit::python3() else { return };
    let dir = tempfile::tempdir().unwrap();
    package_with_shim(dir.path());
    // enable() twice: the second call says nothing more and changes nothing.
    let code = "import os, rmcp_rdna\n\
                p = rmcp_rdna.enable()\n\
                assert rmcp_rdna.enable() == p\n\
                assert any(l.rstrip().endswith('/librmcp_shim.so') for l in open('/proc/self/maps'))\n\
                for v in ('AMDGCN_USE_BUFFER_OPS', 'TORCHINDUCTOR_CACHE_DIR'):\n\
                \x20   if v in os.environ: print(v + '=' + os.environ[v])\n";
    for case in CASES {
        let mut c = Command::new(&python);
        c.args(["-c", code]).current_dir(dir.path());
        clean(&mut c, case.0, case.1);
        c.env("PYTHONPATH", dir.path())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        check("enable()", case, &c.output().unwrap(), "rmcp_rdna: ");
    }
}
