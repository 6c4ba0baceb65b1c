//! Where things are, whichever package's test or example is running: the workspace root
//! and its KFD fixtures, and what cargo built (librmcp_shim.so, the `rmcp` binary).

use std::path::{Path, PathBuf};

/// The shim's file name, as cargo writes it.
const SHIM: &str = "librmcp_shim.so";

/// The workspace root (this crate's parent directory).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("rmcp-testkit lives in the workspace root")
        .to_path_buf()
}

/// A KFD topology fixture: `tests/fixtures/<name>` (see its README).
pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

/// The directory of the running executable, and target/<profile> above it.
///
/// Tests run from target/<profile>/deps, examples from target/<profile>/examples.
fn exe_dirs() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().expect("the running executable's path");
    let dir = exe
        .parent()
        .expect("the running executable's directory")
        .to_path_buf();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps" | "examples") => dir.parent().map_or_else(|| dir.clone(), Path::to_path_buf),
        _ => dir.clone(),
    };
    (dir, profile)
}

/// The first of `candidates` that exists.
fn first_existing(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates.iter().find(|p| p.exists()).cloned()
}

/// The shim under test.
///
/// RMCP_TEST_SHIM if set; else the librmcp_shim.so next to the running executable
/// (target/<profile>/deps, rebuilt whenever rmcp-shim's tests or anything depending on
/// rmcp-shim are built); else target/<profile>/deps/librmcp_shim.so (for examples, which
/// run from target/<profile>/examples); else the uplifted target/<profile>/librmcp_shim.so
/// that `cargo build` writes. Panics, saying how to build it, when there is none.
pub fn shim() -> PathBuf {
    if let Some(p) = std::env::var_os("RMCP_TEST_SHIM") {
        return PathBuf::from(p);
    }
    let (dir, profile) = exe_dirs();
    let candidates = [
        dir.join(SHIM),
        profile.join("deps").join(SHIM),
        profile.join(SHIM),
    ];
    first_existing(&candidates).unwrap_or_else(|| {
        panic!(
            "{SHIM} not found (looked at {candidates:?}): build it with `cargo build -p \
             rmcp-shim` (`cargo test -p rmcp-shim` builds it too), or set RMCP_TEST_SHIM to \
             its path"
        )
    })
}

/// The `rmcp` CLI, for tests outside the CLI package (the CLI's own tests use
/// `env!("CARGO_BIN_EXE_rmcp")`, which cargo keeps up to date).
///
/// RMCP_TEST_BIN if set; else target/<profile>/rmcp. Panics, saying how to build it,
/// when there is none. Cargo does not rebuild it for other packages' tests: run
/// `cargo build -p rmcp` first.
pub fn rmcp_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RMCP_TEST_BIN") {
        return PathBuf::from(p);
    }
    let (_, profile) = exe_dirs();
    let bin = profile.join("rmcp");
    if bin.exists() {
        return bin;
    }
    panic!(
        "the rmcp binary was not found at {}: build it with `cargo build -p rmcp`, or set \
         RMCP_TEST_BIN to its path",
        bin.display()
    )
}
