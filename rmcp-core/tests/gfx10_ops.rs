//! `rmcp-core/src/gfx10/ops.tsv` is what LLVM 15's disassembler says: `scripts/gfx10-ops
//! --check` regenerates it with llvm-mc and compares. Without llvm-mc-15 the test skips,
//! saying why, except where the prerequisites are required (`RMCP_REQUIRE_REAL_HIP=1` or
//! `CI` set), where it fails.

use std::path::Path;
use std::process::Command;

const LLVM_MC: &str = "/usr/lib/llvm-15/bin/llvm-mc";

/// rmcp-testkit's rule, written here (rmcp-core cannot depend on it).
fn required() -> bool {
    std::env::var("RMCP_REQUIRE_REAL_HIP").as_deref() == Ok("1") || std::env::var_os("CI").is_some()
}

#[test]
fn ops_tsv_is_what_llvm_mc_decodes() {
    if !Path::new(LLVM_MC).exists() {
        let why = "gfx10_ops: no llvm-mc-15 (apt-get install llvm-15)";
        assert!(!required(), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gfx10-ops");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--check")
        .output()
        .expect("run python3 scripts/gfx10-ops --check");
    assert_eq!(
        out.status.code(),
        Some(0),
        "scripts/gfx10-ops --check: ops.tsv differs from what llvm-mc decodes (rerun \
         scripts/gfx10-ops and commit)\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
