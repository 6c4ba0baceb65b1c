//! The built library exports exactly the names of the hook registry and `dlsym`, nothing
//! more (the compiler keeps the table, the registry and the trampolines in step; only the
//! linked result can show the version script did its part), and the comparison catches a
//! difference.

use std::collections::BTreeSet;
use std::path::Path;

mod common;

/// The defined dynamic function symbols of `so` (`nm -D --defined-only`), without versions.
fn exported_functions(so: &Path) -> BTreeSet<String> {
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(so)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}", so.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            matches!(kind, "T" | "W" | "i")
                .then(|| name.split('@').next().unwrap_or(name).to_string())
        })
        .collect()
}

/// `-name` for a registry name the library lacks, `+name` for an export the registry lacks.
fn difference(so: &Path) -> Vec<String> {
    let want: BTreeSet<String> = rmcp_core::registry::exported_names()
        .map(String::from)
        .collect();
    let got = exported_functions(so);
    let missing = want.difference(&got).map(|n| format!("-{n}"));
    let extra = got.difference(&want).map(|n| format!("+{n}"));
    missing.chain(extra).collect()
}

#[test]
fn registry_and_exports_agree() {
    assert_eq!(difference(&common::shim()), Vec::<String>::new());
    assert_eq!(
        rmcp_core::registry::exported_names().count(),
        12,
        "11 hooks and dlsym"
    );
}

#[test]
fn a_library_missing_hooks_fails_the_check() {
    // The fake runtime exports more than the registry and lacks nothing hooked but
    // hipGetProcAddress in its 5.x build: the comparison must see both differences.
    let d = difference(&common::fake_dir(5).join("libamdhip64.so.5"));
    assert!(d.contains(&"-hipGetProcAddress".to_string()), "{d:?}");
    assert!(d.contains(&"+hipFree".to_string()), "{d:?}");
}

#[test]
fn the_cli_exports_no_hook_and_no_dlsym() {
    let rmcp = exported_functions(Path::new(env!("CARGO_BIN_EXE_rmcp")));
    let leaked: Vec<_> = rmcp
        .iter()
        .filter(|n| n.starts_with("hip") || *n == "dlsym")
        .collect();
    assert!(leaked.is_empty(), "the rmcp binary exports {leaked:?}");
    // The same check finds them in the shim.
    assert!(exported_functions(&common::shim()).contains("dlsym"));
}
