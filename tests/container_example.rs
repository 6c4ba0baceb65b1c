//! The container example (`examples/container/Dockerfile`) as far as it can be checked
//! without a Docker engine (none here): the Rust toolchain it installs is pinned to
//! Cargo.toml's `rust-version`, and the repository's `.dockerignore` keeps build output,
//! venvs and `.git` out of the build context while every file git tracks, and every file
//! the Dockerfile copies, stays in. `.dockerignore` is read by Docker's rules: patterns
//! relative to the context root, `*` within a component, `**` any number of components, and
//! a pattern that matches a directory excludes what is under it.

use std::process::Command;

use rmcp_testkit::repo;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn glob(p: &[u8], n: &[u8]) -> bool {
    match p.split_first() {
        None => n.is_empty(),
        Some((b'*', rest)) => (0..=n.len()).any(|i| glob(rest, &n[i..])),
        Some((b'?', rest)) => !n.is_empty() && glob(rest, &n[1..]),
        Some((c, rest)) => n.first() == Some(c) && glob(rest, &n[1..]),
    }
}

/// Components of a pattern against components of a path (`**`: any number of them).
fn matches(pat: &[&str], path: &[&str]) -> bool {
    match pat.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|i| matches(rest, &path[i..])),
        Some((p, rest)) => {
            !path.is_empty() && glob(p.as_bytes(), path[0].as_bytes()) && matches(rest, &path[1..])
        }
    }
}

/// Whether `.dockerignore` keeps `path` (relative to the repository root) out of the
/// context: a pattern matches it or one of the directories above it.
fn excluded(patterns: &[String], path: &str) -> bool {
    let comps: Vec<&str> = path.split('/').collect();
    patterns.iter().any(|p| {
        let pat: Vec<&str> = p.trim_matches('/').split('/').collect();
        (1..=comps.len()).any(|n| matches(&pat, &comps[..n]))
    })
}

fn patterns() -> Vec<String> {
    read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            assert!(
                !l.starts_with('!'),
                "an exception the reader here does not know: {l}"
            );
            l.to_string()
        })
        .collect()
}

#[test]
fn the_toolchain_is_pinned_to_the_rust_version() {
    let manifest = read("Cargo.toml");
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("Cargo.toml's rust-version")
        .trim_matches('"');
    let dockerfile = read("examples/container/Dockerfile");
    let pin = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_TOOLCHAIN="))
        .expect("the Dockerfile's ARG RUST_TOOLCHAIN=...");
    assert!(
        pin.starts_with(&format!("{msrv}.")),
        "the Dockerfile installs {pin}, Cargo.toml's rust-version is {msrv}"
    );
    assert!(dockerfile.contains("--default-toolchain \"${RUST_TOOLCHAIN}\""));
    assert!(!dockerfile.contains("--default-toolchain stable"));
    assert!(dockerfile.contains("cargo build --release --locked"));
}

#[test]
fn the_context_leaves_out_build_output_and_keeps_the_sources() {
    let pats = patterns();
    for out in [
        "target/release/rmcp",
        "fuzz/target/x86_64-unknown-linux-gnu/release/properties",
        "fuzz/artifacts/properties/crash-0",
        ".git/HEAD",
        ".venv/bin/python",
        "python/venv/bin/python",
        "python/rmcp_rdna/__pycache__/x.pyc",
        "build/lib/rmcp_rdna/librmcp_shim.so",
        "examples/field-check/build/rmcp-field-check",
    ] {
        assert!(excluded(&pats, out), "{out} is in the build context");
    }
    // What the Dockerfile copies from the context.
    let dockerfile = read("examples/container/Dockerfile");
    let mut copied = vec!["Cargo.toml".to_string(), "Cargo.lock".to_string()];
    for line in dockerfile.lines() {
        let Some(args) = line.strip_prefix("COPY ") else {
            continue;
        };
        if args.starts_with("--from") {
            continue;
        }
        let words: Vec<&str> = args.split_whitespace().collect();
        for src in &words[..words.len() - 1] {
            if *src != "." {
                assert!(repo().join(src).exists(), "COPY {src}: no such file");
                copied.push(src.to_string());
            }
        }
    }
    assert!(copied.len() > 3, "{copied:?}");
    for f in &copied {
        assert!(
            !excluded(&pats, f),
            "{f} is copied but left out of the context"
        );
    }
    // Every file git tracks stays in (the sources, the lock file, the examples).
    let tracked = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo())
        .output();
    match tracked {
        Ok(o) if o.status.success() && !o.stdout.is_empty() => {
            let list = String::from_utf8(o.stdout).unwrap();
            let files: Vec<&str> = list.split('\0').filter(|f| !f.is_empty()).collect();
            let left_out: Vec<&&str> = files.iter().filter(|f| excluded(&pats, f)).collect();
            assert!(left_out.is_empty(), "tracked files left out: {left_out:?}");
            assert!(files.contains(&"rmcp-shim/build.rs"), "{files:?}");
        }
        _ => rmcp_testkit::skip("not a git checkout, or no git: tracked files not compared"),
    }
}

#[test]
fn the_reader_follows_dockers_rules() {
    let pats: Vec<String> = ["**/target", ".git", "python/*.egg-info"]
        .map(String::from)
        .to_vec();
    assert!(excluded(&pats, "target"));
    assert!(excluded(&pats, "a/b/target/c"));
    assert!(excluded(&pats, ".git/objects/ab"));
    assert!(excluded(&pats, "python/rmcp_rdna.egg-info/PKG-INFO"));
    assert!(!excluded(&pats, "targets.rs"));
    assert!(!excluded(&pats, "src/.gitkeep"));
    assert!(!excluded(&pats, "x/python/a.egg-info"));
}
