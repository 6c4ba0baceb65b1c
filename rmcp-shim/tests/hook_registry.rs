//! The preloaded library (the front, `front/front.rs`) exports exactly the names of the hook
//! registry, `dlsym`, `dlvsym`, `dlopen`, `dlclose` and the one plain function `rmcp_shim_stats`, nothing more (build.rs
//! generates the front's list from the table; only the linked result can show the
//! compiler and linker did their part), and the comparison catches a difference.

use std::collections::BTreeSet;
use std::path::Path;

use rmcp_testkit as kit;

/// The exports that hook nothing (`front/front.rs`).
const PLAIN_EXPORTS: &[&str] = &["rmcp_shim_stats", "dlopen", "dlclose", "rmcp_front_next"];

/// `-name` for a registry name the library lacks, `+name` for an export the registry lacks.
fn difference(so: &Path) -> Vec<String> {
    let want: BTreeSet<String> = rmcp_core::registry::exported_names()
        .chain(PLAIN_EXPORTS.iter().copied())
        .map(String::from)
        .collect();
    let got = kit::exported_functions(so);
    let missing = want.difference(&got).map(|n| format!("-{n}"));
    let extra = got.difference(&want).map(|n| format!("+{n}"));
    missing.chain(extra).collect()
}

#[test]
fn registry_and_exports_agree() {
    assert_eq!(difference(&kit::shim()), Vec::<String>::new());
    assert_eq!(
        rmcp_core::registry::exported_names().count(),
        rmcp_core::registry::Observed::COUNT + 27,
        "25 hooks, the observed entry points, dlsym and dlvsym"
    );
}

#[test]
fn a_library_missing_hooks_fails_the_check() {
    // The fake runtime exports more than the registry and lacks hipGetProcAddress and
    // hipGetDriverEntryPoint in its 5.x build: the comparison must see both differences.
    let d = difference(&kit::fake_dir(5).join("libamdhip64.so.5"));
    assert!(d.contains(&"-hipGetProcAddress".to_string()), "{d:?}");
    assert!(d.contains(&"+hipFree".to_string()), "{d:?}");
}
