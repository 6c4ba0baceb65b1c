//! Every repository path README.md and docs/*.md name in backticks exists, so that a file
//! moved or renamed cannot leave the documentation pointing at nothing.
//!
//! A path is a backticked word without spaces whose first component is an entry at the top
//! of the repository (`rmcp-core/src/topology.rs`, `tests/cli_*.rs`, `Cargo.toml`); a
//! `:LINE` or `#anchor` after it is dropped, `*` and `<name>` match any one component's
//! part. Paths a build makes (ignored by a `.gitignore` of the repository: `target/...`,
//! `examples/field-check/build/...`, `fuzz/artifacts/...`) are not checked, nor the few
//! words below that name another project's file with the same first component.

use std::path::{Path, PathBuf};

use rmcp_testkit::repo;

/// (document, word): another project's file whose path starts like one of ours.
const FOREIGN: &[(&str, &str)] = &[
    // ROCm/hipamd's source at tag rocm-5.2.3.
    ("docs/compat.md", "src/hip_memory.cpp"),
];

/// The documents checked.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// The backticked words of a text, in order.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The path a word names, if it names one of this repository's.
fn as_path(word: &str, top: &[String]) -> Option<String> {
    if word.is_empty() || word.contains(char::is_whitespace) {
        return None;
    }
    let mut p = word.split('#').next().unwrap_or(word);
    if let Some((head, line)) = p.rsplit_once(':') {
        if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
            p = head;
        }
    }
    let first = p.split('/').next()?;
    let is_top = top.iter().any(|t| t == first);
    (is_top && (p.contains('/') || p.contains('.'))).then(|| p.trim_end_matches('/').to_string())
}

/// `*` and `<name>` match any run of characters within one component.
fn matches(pattern: &str, name: &str) -> bool {
    let pattern = {
        let mut out = String::new();
        let mut in_angle = false;
        for c in pattern.chars() {
            match (c, in_angle) {
                ('<', false) => {
                    in_angle = true;
                    out.push('*');
                }
                ('>', true) => in_angle = false,
                (_, true) => {}
                _ => out.push(c),
            }
        }
        out
    };
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((b'*', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some((c, rest)) => n.first() == Some(c) && go(rest, &n[1..]),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// Whether `path` (relative to `root`, components matched with `matches`) names something
/// that exists.
fn exists(root: &Path, path: &str) -> bool {
    let mut dirs = vec![root.to_path_buf()];
    for comp in path.split('/') {
        let mut next = Vec::new();
        for d in &dirs {
            if !comp.contains('*') && !comp.contains('<') {
                let p = d.join(comp);
                if p.exists() {
                    next.push(p);
                }
                continue;
            }
            let Ok(rd) = std::fs::read_dir(d) else {
                continue;
            };
            for e in rd.flatten() {
                if matches(comp, &e.file_name().to_string_lossy()) {
                    next.push(e.path());
                }
            }
        }
        dirs = next;
    }
    !dirs.is_empty()
}

/// Whether a `.gitignore` in the repository (at its root or in a directory on the path)
/// ignores `path`: anchored patterns (`/target`) from that directory, plain names (`build/`,
/// `*.pyc`) as any component below it.
fn ignored(root: &Path, path: &str) -> bool {
    let comps: Vec<&str> = path.split('/').collect();
    for depth in 0..comps.len() {
        let dir = root.join(comps[..depth].join("/"));
        let Ok(text) = std::fs::read_to_string(dir.join(".gitignore")) else {
            continue;
        };
        let below = &comps[depth..];
        for pat in text.lines().map(str::trim) {
            if pat.is_empty() || pat.starts_with('#') || pat.starts_with('!') {
                continue;
            }
            let pat = pat.trim_end_matches('/');
            if let Some(anchored) = pat.strip_prefix('/') {
                let parts: Vec<&str> = anchored.split('/').collect();
                if parts.len() <= below.len() && parts.iter().zip(below).all(|(p, c)| matches(p, c))
                {
                    return true;
                }
            } else if !pat.contains('/') && below.iter().any(|c| matches(pat, c)) {
                return true;
            }
        }
    }
    false
}

#[test]
fn every_path_the_documents_name_exists() {
    let root = repo();
    let top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".git")
        .collect();
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in documents(&root) {
        let rel = doc
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&doc).unwrap();
        for (n, line) in text.lines().enumerate() {
            for word in backticked(line) {
                let Some(path) = as_path(word, &top) else {
                    continue;
                };
                if ignored(&root, &path) || FOREIGN.contains(&(rel.as_str(), path.as_str())) {
                    continue;
                }
                checked += 1;
                if !exists(&root, &path) {
                    missing.push(format!("{rel}:{}: `{word}`", n + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths named in the documentation that do not exist:\n{}",
        missing.join("\n")
    );
    // The documents name well over a hundred paths; none found means the reading broke.
    assert!(checked > 100, "only {checked} paths found");
}

#[test]
fn the_reading_of_words_and_patterns() {
    let top: Vec<String> = ["rmcp-core", "tests", "Cargo.toml", "target", "src"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        as_path("rmcp-core/src/topology.rs:97", &top).as_deref(),
        Some("rmcp-core/src/topology.rs")
    );
    assert_eq!(as_path("tests/", &top).as_deref(), Some("tests"));
    assert_eq!(as_path("Cargo.toml", &top).as_deref(), Some("Cargo.toml"));
    assert_eq!(as_path("cargo test --workspace", &top), None);
    assert_eq!(as_path("RMCP_MODE", &top), None);
    assert_eq!(as_path("hipamd/src/hip_memory.cpp", &top), None);
    assert!(matches("reliability_*.rs", "reliability_fork.rs"));
    assert!(matches("<target>", "properties"));
    assert!(!matches("cli_*.rs", "shim_rewrite.rs"));
    let root = repo();
    assert!(exists(&root, "tests/cli_*.rs"));
    assert!(!exists(&root, "rmcp-shim/src/topology.rs"));
    assert!(ignored(&root, "target/release/rmcp"));
    assert!(!ignored(&root, "rmcp-core/src/topology.rs"));
}
