//! What the CLI needs from its build (std only, no build-dependencies, no C): the commit
//! it was built from, as `RMCP_BUILD_COMMIT` (`env!`) for `rmcp --version`.
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
