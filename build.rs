//! What the CLI needs from its build (std only, no build-dependencies, no C):
//! - the commit it was built from, as `RMCP_BUILD_COMMIT` (`env!`) for `rmcp --version`;
//! - the GPU code of `rmcp check` ([`check_kernels`]), built by hipcc when this machine has
//!   one, and embedded in the binary; without hipcc, nothing and no warning.
//!
//! `git rev-parse --short=12 HEAD`, with `-dirty` appended when `git status --porcelain`
//! lists changes, when this package's directory is the top of a git checkout and git runs;
//! `unknown` otherwise (a crates.io tarball, no git installed). Reruns when HEAD or the
//! branch it points to moves.
//!
//! The C test programs are built by rmcp-testkit/build.rs, only for tests and examples.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let commit = commit(&dir).unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=RMCP_BUILD_COMMIT={commit}");
    check_kernels(
        &PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")),
        &dir,
    );
}

/// The targets of `rmcp check`'s GPU code: every GPU rmcp rewrites for by default
/// (gfx1010-gfx1013, gfx1030-gfx1036) and, as controls for cards rmcp leaves alone, the
/// RDNA3 targets Debian's hipcc 5.2.3 (clang 15) knows. Its clang knows no gfx115x and no
/// RDNA4 (gfx1200, gfx1201): those need a newer compiler (`RMCP_CHECK_ARCHS` adds them).
const CHECK_ARCHS: &[&str] = &[
    "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031", "gfx1032", "gfx1033",
    "gfx1034", "gfx1035", "gfx1036", "gfx1100", "gfx1101", "gfx1102", "gfx1103",
];

/// `rmcp check`'s GPU code (src/field_check/kernels.hip) as one offload bundle, code object
/// v4 (what every runtime from ROCm 5.2.3 to 7.2.4 loads), written to
/// `OUT_DIR/check-kernels.hipfb`, which src/field_check/kernels.rs embeds
/// (`include_bytes!`), with `RMCP_CHECK_KERNELS_TARGETS` and `RMCP_CHECK_KERNELS_COMPILER`;
/// and the override experiments' code (src/field_check/override_kernels.hip), for gfx1030
/// only ([`OVERRIDE_ARCH`]), as `OUT_DIR/check-override-kernels.hipfb`. Both or neither.
///
/// Why here and not in a script: the bundle is part of the `rmcp` binary, wherever that is
/// built (`cargo build --release`, `pip install .`, the wheel), and needs no file of its own
/// to be found at run time. Why it may be empty: a machine without hipcc builds rmcp all the
/// same, silently (a plain `cargo build` needs no ROCm, and a newcomer's build shows no
/// warning); that rmcp's `check` says it has no GPU code and how to get it. hipcc is
/// `$HIPCC`, else `hipcc` on PATH. `RMCP_REQUIRE_CHECK_KERNELS=1` (scripts/wheel, CI) makes
/// a missing or failing hipcc an error.
fn check_kernels(out: &Path, dir: &Path) {
    let src = dir.join("src/field_check/kernels.hip");
    let bundle = out.join("check-kernels.hipfb");
    let override_src = dir.join("src/field_check/override_kernels.hip");
    let override_bundle = out.join("check-override-kernels.hipfb");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", override_src.display());
    for v in ["HIPCC", "RMCP_CHECK_ARCHS", "RMCP_REQUIRE_CHECK_KERNELS"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let required = env::var_os("RMCP_REQUIRE_CHECK_KERNELS").is_some_and(|v| !v.is_empty());
    let hipcc = env::var_os("HIPCC")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "hipcc".into());
    let mut archs: Vec<String> = CHECK_ARCHS.iter().map(|a| a.to_string()).collect();
    if let Ok(extra) = env::var("RMCP_CHECK_ARCHS") {
        archs.extend(
            extra
                .split([' ', ','])
                .filter(|a| !a.is_empty())
                .map(String::from),
        );
    }
    let name = hipcc.to_string_lossy().into_owned();
    // Err(None): no hipcc. Err(Some(why)): one that failed.
    let built = (|| -> Result<String, Option<String>> {
        let version = match Command::new(&hipcc)
            .arg("--version")
            .stderr(std::process::Stdio::null())
            .output()
        {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
            r => r.map_err(|e| Some(format!("{name}: {e}")))?,
        };
        let version = String::from_utf8_lossy(&version.stdout);
        let compiler = compiler_name(&version);
        genco(&hipcc, &archs, &src, &bundle).map_err(Some)?;
        genco(
            &hipcc,
            &[OVERRIDE_ARCH.to_string()],
            &override_src,
            &override_bundle,
        )
        .map_err(Some)?;
        Ok(compiler)
    })();
    match built {
        Ok(compiler) => {
            println!(
                "cargo:rustc-env=RMCP_CHECK_KERNELS_TARGETS={}",
                archs.join(",")
            );
            println!("cargo:rustc-env=RMCP_CHECK_KERNELS_COMPILER={compiler}");
        }
        Err(why) => {
            let why = why.unwrap_or_else(|| format!("{name} not found"));
            if required {
                panic!(
                    "RMCP_REQUIRE_CHECK_KERNELS is set and rmcp check's GPU code was not built: {why}"
                );
            }
            // hipcc missing (the usual case) is silent; one that is there and fails is not.
            if !why.ends_with("not found") {
                println!("cargo:warning=rmcp check's GPU code not built: {why}");
            }
            std::fs::write(&bundle, b"").expect("write OUT_DIR/check-kernels.hipfb");
            std::fs::write(&override_bundle, b"")
                .expect("write OUT_DIR/check-override-kernels.hipfb");
            println!("cargo:rustc-env=RMCP_CHECK_KERNELS_TARGETS=");
            println!("cargo:rustc-env=RMCP_CHECK_KERNELS_COMPILER=");
        }
    }
}

/// The one target of the override experiments' code: what the runtime loads on an RX 5000
/// under `HSA_OVERRIDE_GFX_VERSION=10.3.0`.
const OVERRIDE_ARCH: &str = "gfx1030";

/// `hipcc --genco` of `src` for `archs` into the bundle `out`; Err: why not.
fn genco(hipcc: &std::ffi::OsStr, archs: &[String], src: &Path, out: &Path) -> Result<(), String> {
    let name = hipcc.to_string_lossy();
    let mut cmd = Command::new(hipcc);
    // No header, no device library (kernels.hip says why); -O2 as any release build.
    cmd.args(["--genco", "-nogpuinc", "-nogpulib", "-O2", "-Wall"]);
    for a in archs {
        cmd.arg(format!("--offload-arch={a}"));
    }
    cmd.arg("-o").arg(out).arg(src);
    let o = cmd.output().map_err(|e| format!("{name}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{name} failed on {} ({}): {}",
            src.file_name().unwrap_or_default().to_string_lossy(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

/// `hipcc 5.2.21153-0, Debian clang version 15.0.6` from `hipcc --version`.
fn compiler_name(version: &str) -> String {
    let hip = version
        .lines()
        .find_map(|l| l.strip_prefix("HIP version: "))
        .map(|v| format!("hipcc {}", v.trim()));
    let clang = version
        .lines()
        .find(|l| l.contains("clang version"))
        .map(|l| l.trim().to_string());
    [hip, clang]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

/// `git <args>` in `dir`: its trimmed stdout, or None if git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        // Never take the index lock (`git status` may refresh the index otherwise): a
        // build must not get in the way of git commands running beside it.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

/// The short commit hash (plus `-dirty`), if `dir` is the top of a git checkout.
fn commit(dir: &Path) -> Option<String> {
    // Only this project's own checkout: not a tarball unpacked inside some other repository.
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let hash = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    watch_head(dir);
    let dirty = git(dir, &["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// rerun-if-changed on what moves when HEAD does: the HEAD file, the branch's ref and
/// packed-refs. In a linked worktree HEAD lives in the worktree's git directory and the
/// refs in the common one. Only existing files: cargo reruns every build for a missing one.
fn watch_head(dir: &Path) {
    let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    let git_dir = PathBuf::from(git_dir);
    let common = git(dir, &["rev-parse", "--git-common-dir"])
        .map(|c| dir.join(c))
        .unwrap_or_else(|| git_dir.clone());
    let mut paths = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(common.join(branch));
    }
    for p in paths.iter().filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
