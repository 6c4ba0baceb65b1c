//! `rmcp report`: every section, on the emulated GPU (tests/emulated-gpu) with Debian's
//! 5.2.3 runtime; the redaction of the home directory, user and host names (a venv with a
//! stand-in torch under HOME puts the home directory into the report); `--no-redact`;
//! `--json`; and the `faults` of a stats file, every key of each fault rendered, with its
//! `buffer_descriptors` (the load-time fix's counts).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");

fn rmcp() -> Command {
    let mut c = Command::new(RMCP);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_") || k == "LD_PRELOAD" || k == "VIRTUAL_ENV" {
            c.env_remove(&k);
        }
    }
    c.env("RMCP_PYTHON", "");
    c
}

/// HOME with a venv holding a stand-in torch and a stand-in Triton 3.6.0 (site-packages
/// found through VIRTUAL_ENV).
fn home_with_venv(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let home = dir.join("home").join("somebody");
    let venv = home.join("venv");
    let torch = venv.join("lib/python3.11/site-packages/torch");
    std::fs::create_dir_all(torch.join("lib")).unwrap();
    std::fs::write(torch.join("__init__.py"), "").unwrap();
    std::fs::write(
        torch.join("version.py"),
        "__version__ = '2.4.0+rocm6.1'\nhip = '6.1'\n",
    )
    .unwrap();
    let sp = venv.join("lib/python3.11/site-packages");
    std::fs::create_dir_all(sp.join("triton-3.6.0.dist-info")).unwrap();
    std::fs::create_dir_all(sp.join("triton")).unwrap();
    std::fs::write(
        sp.join("triton/knobs.py"),
        "    use_buffer_ops: env_bool = env_bool(\"AMDGCN_USE_BUFFER_OPS\", True)\n",
    )
    .unwrap();
    (home, venv)
}

fn hostname() -> String {
    let out = Command::new("uname").arg("-n").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn the_report_has_every_section_and_redacts() {
    let dir = tempfile::tempdir().unwrap();
    let (home, venv) = home_with_venv(dir.path());
    let stats = dir.path().join("stats.json");
    std::fs::write(
        &stats,
        r#"{"calls": {}, "faults": [{"kind": "memory access fault", "address": "0x7f00dead0000",
            "allocation": {"api": "hipHostMalloc", "flags": "0x0"}, "future_key": 42}]}"#,
    )
    .unwrap();
    let mut cmd = rmcp();
    cmd.env("HOME", &home)
        .env("VIRTUAL_ENV", &venv)
        .args(["report", "--stats"])
        .arg(&stats);
    let emu = rmcp_testkit::emugpu_lib();
    match &emu {
        Some(lib) => {
            cmd.env("LD_PRELOAD", lib)
                .env("EMUGPU_FIXTURE", rmcp_testkit::fixture("rdna1"))
                .env("EMUGPU_LOG", dir.path().join("emu.jsonl"));
        }
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: libemugpu.so was not built (libdrm-dev)"
            );
            eprintln!("note: libemugpu.so not built (libdrm-dev): the check runs without a GPU");
        }
    }
    let out = cmd.output().unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{md}");
    for section in [
        "# rmcp field report",
        "## rmcp",
        "## System",
        "## PyTorch and HIP runtimes",
        "## rmcp check",
        "## Faults",
        "## rmcp doctor",
    ] {
        assert!(md.lines().any(|l| l == section), "no {section:?} in\n{md}");
    }
    assert!(
        md.lines()
            .nth(2)
            .unwrap()
            .starts_with("Redacted: home directory"),
        "{md}"
    );
    assert!(md.contains("- version: 0.1.0\n- commit: "), "{md}");
    assert!(md.contains("- kernel: "), "{md}");
    assert!(md.contains("- amdgpu module: "), "{md}");
    // The stand-in torch, found under HOME, appears under ~.
    assert!(
        md.contains("~/venv/lib/python3.11/site-packages/torch"),
        "{md}"
    );
    // So does the Triton beside it, with its buffer-ops default.
    assert!(
        md.contains("] triton: triton 3.6.0 in ~/venv/lib/python3.11/site-packages: buffer"),
        "{md}"
    );
    assert!(!md.contains(&home.display().to_string()), "{md}");
    let host = hostname();
    assert!(
        !md.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
            .any(|w| w == host),
        "the host name {host} is in\n{md}"
    );
    // Every key of the fault, the unknown one too.
    for kv in [
        "- kind: memory access fault",
        "- address: 0x7f00dead0000",
        "- allocation: {\"api\":\"hipHostMalloc\",\"flags\":\"0x0\"}",
        "- future_key: 42",
    ] {
        assert!(md.contains(kv), "no {kv:?} in\n{md}");
    }
    let no_gpu_code = md.contains("built without the GPU code of `rmcp check`");
    assert!(
        !no_gpu_code || std::env::var_os("CI").is_none(),
        "CI: rmcp was built without hipcc"
    );
    if emu.is_some()
        && !no_gpu_code
        && Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5").exists()
    {
        assert!(
            md.contains("- verdict: **inconclusive** (exit status 3)"),
            "{md}"
        );
        assert!(md.contains("gfx1010"), "{md}");
        // The buffer-layout experiment: its kernels ran nothing either.
        assert!(md.contains("- buffer layout: **inconclusive**"), "{md}");
        assert!(
            md.contains("| Triton's RDNA1 layout (0x00027000) | written 0/4096 read 0/4096 |"),
            "{md}"
        );
        // The override experiments ran (a gfx1010) and ran nothing either.
        assert!(
            md.contains("gfx1030 code on this gfx1010\n- override flat offset: **inconclusive**"),
            "{md}"
        );
        assert!(
            md.contains("- override legacy FMA: **inconclusive**"),
            "{md}"
        );
    }

    // --no-redact keeps the path; --json is one object with the same parts.
    let out = rmcp()
        .env("HOME", &home)
        .env("VIRTUAL_ENV", &venv)
        .args(["report", "--no-check", "--no-redact", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(text.contains(&home.display().to_string()), "{text}");
    assert!(
        v["redaction"].as_str().unwrap().starts_with("Not redacted"),
        "{v:#}"
    );
    assert_eq!(v["check"]["not_run"], "--no-check");
    assert_eq!(v["faults"], Value::Null);
    for k in ["rmcp", "system", "pytorch_and_runtimes", "doctor"] {
        assert!(!v[k].is_null(), "{k}: {v:#}");
    }
    assert!(
        v["pytorch_and_runtimes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["check"] == "pytorch" && f["message"].as_str().unwrap().contains("2.4.0")),
        "{v:#}"
    );
}

#[test]
fn the_load_time_fix_counts_are_shown() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    std::fs::write(
        &stats,
        r#"{"calls": {}, "faults": [], "buffer_descriptors": {"scanned": 7, "unreadable": 1,
           "broken": 3, "fixed": 2, "warned": 1, "instructions_fixed": 5, "fallbacks": 0},
           "override_fixes": {"fixed": 3, "instructions_fixed": 9, "warned": 1,
           "fat_binaries": 40, "fat_binaries_left": 6}}"#,
    )
    .unwrap();
    let out = rmcp()
        .args(["report", "--no-check", "--stats"])
        .arg(&stats)
        .output()
        .unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.contains("## Code objects loaded"), "{md}");
    assert!(
        md.contains("7 scanned, 1 unreadable, 3 broken, 2 fixed (5 instructions), 1 loaded as they were with a warning, 0 fixed copies refused"),
        "{md}"
    );
    // The in-place fixes under an override, the fat binaries registered at start-up too.
    assert!(
        md.contains("3 code objects fixed (9 instructions), 1 loaded as they were with a warning; of the fat binaries registered at start-up, 40 read and 6 left as they were"),
        "{md}"
    );
    let out = rmcp()
        .args(["report", "--no-check", "--json", "--stats"])
        .arg(&stats)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["faults"]["buffer_descriptors"]["instructions_fixed"], 5);
    assert_eq!(v["faults"]["override_fixes"]["fat_binaries"], 40);
    assert_eq!(v["faults"]["override_fixes"]["fat_binaries_left"], 6);
}

#[test]
fn a_stats_file_without_faults_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    std::fs::write(&stats, r#"{"calls": {}}"#).unwrap();
    let out = rmcp()
        .args(["report", "--no-check", "--stats"])
        .arg(&stats)
        .output()
        .unwrap();
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.contains("the stats file has no `faults` array."), "{md}");
    assert!(
        md.contains("the stats file has no `buffer_descriptors`"),
        "{md}"
    );
    // A stats file that cannot be read is a usage error, said before any work is done
    // (tests/cli_input.rs has the rest).
    let out = rmcp()
        .args(["report", "--no-check", "--stats", "/nonexistent/stats.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rmcp report: --stats /nonexistent/stats.json: No such file or directory\n"
    );
}
