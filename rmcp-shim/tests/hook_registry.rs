//! The registry of hooked names, the hooks! table and the library's exports agree
//! (scripts/check-hooks), and the check catches a difference.

use rmcp_testkit::{fake_dir, repo, shim};

fn check(so: &std::path::Path) -> std::process::Output {
    std::process::Command::new(repo().join("scripts/check-hooks"))
        .arg(so)
        .output()
        .expect("run scripts/check-hooks")
}

#[test]
fn registry_table_and_exports_agree() {
    let out = check(&shim());
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("11 hooks"));
}

#[test]
fn a_library_missing_hooks_fails_the_check() {
    // The fake runtime exports more than the registry and lacks nothing hooked but
    // hipGetProcAddress in its 5.x build: the check must see both differences.
    let out = check(&fake_dir(5).join("libamdhip64.so.5"));
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("-hipGetProcAddress"), "{text}");
    assert!(text.contains("+hipFree"), "{text}");
}
