//! The rmcp-rdna wheel (issue 16), installed by `scripts/wheel` into a fresh venv with no
//! Rust on PATH (RMCP_WHEEL_VENV names it): its shim exports what the cargo-built one does,
//! and python/tests/test_wheel.py passes there (the CLI from the venv, shim_path, enable,
//! stats, the Jupyter kernel spec, process pools, Ray), against the fake runtime and the
//! RDNA2 fixture. Without RMCP_WHEEL_VENV the test says skipped; with CI or
//! RMCP_REQUIRE_REAL_HIP=1 set that is a failure (.ci/run builds the wheel first).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rmcp_testkit as kit;

fn venv() -> Option<PathBuf> {
    let v = std::env::var_os("RMCP_WHEEL_VENV").map(PathBuf::from);
    match v {
        Some(v) if v.join("bin/python").is_file() => Some(v),
        _ => {
            kit::missing(
                "RMCP_WHEEL_VENV names no venv (scripts/wheel builds one; it needs python3-venv \
                 and PyPI)",
            );
            None
        }
    }
}

fn site_shim(venv: &std::path::Path) -> PathBuf {
    let lib = venv.join("lib");
    let py = std::fs::read_dir(&lib)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .expect("lib/python3.X in the venv");
    py.path().join("site-packages/rmcp_rdna/librmcp_shim.so")
}

#[test]
fn the_wheel_shim_exports_what_the_cargo_built_one_does() {
    let Some(venv) = venv() else { return };
    let wheel = kit::exported_functions(&site_shim(&venv));
    let cargo = kit::exported_functions(&kit::shim());
    assert_eq!(wheel, cargo);
    assert!(wheel.contains("rmcp_shim_stats") && wheel.contains("hipHostMalloc"));
    // And its body beside it, exporting only the attach, as the cargo-built body does.
    let body = |front: &std::path::Path| front.with_file_name("librmcp_shim_body.so");
    let wheel_body = kit::exported_functions(&body(&site_shim(&venv)));
    assert_eq!(wheel_body, kit::exported_functions(&body(&kit::shim())));
    assert_eq!(
        wheel_body.into_iter().collect::<Vec<_>>(),
        ["rmcp_shim_attach"]
    );
}

#[test]
fn the_python_tests_pass_in_the_venv() {
    let Some(venv) = venv() else { return };
    let bin = venv.join("bin");
    let scratch = kit::tempfile::tempdir().unwrap();
    let out = kit::output_within(
        Command::new(bin.join("python"))
            .args(["-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q"])
            .arg(kit::repo().join("python/tests/test_wheel.py"))
            .arg("--basetemp")
            .arg(scratch.path().join("pytest"))
            .current_dir(scratch.path())
            // No Rust, no cargo-built shim: only the venv and the system.
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
            )
            .env_remove("LD_PRELOAD")
            .env_remove("RMCP_SHIM")
            .env("RMCP_TEST_FAKE_HIP_DIR", kit::fake_dir(6))
            .env("RMCP_TEST_FRAMEWORK", kit::framework(6))
            .env("RMCP_TEST_SYSFS", kit::fixture("rdna2")),
        Duration::from_secs(900),
    )
    .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // Every test ran: none skipped, none deselected.
    let passed = text.lines().filter(|l| l.starts_with("PASSED ")).count();
    assert_eq!(passed, 17, "{text}");
}
