//! Against Debian's real HIP runtime (ROCm 5.2.3, libamdhip64.so.5) on a machine without a
//! GPU: it answers hipGetDeviceCount with 100 and allocations with 101. That is enough to
//! prove that the shim interposes the runtime's versioned symbols, forwards to the runtime
//! that is mapped, and hands back its answers bit for bit. Skipped when the runtime is not
//! installed, unless RMCP_REQUIRE_REAL_HIP=1.

use rmcp_testkit::*;

/// Every hook, normal and bad input.
const STEPS: &[&str] = &[
    "all",
    "hipHostMalloc:4096:0",
    "hipHostMalloc:4096:2",
    "hipHostMalloc:4096:0x40000000",
    "hipHostMalloc:4096:0xc0000000",
    "hipHostMalloc:4096:0:null",
    "hipHostMalloc:0:0",
    "hipHostMalloc:max:0",
    "hipHostMalloc:4096:0x100",
    "hipMemAllocHost:4096",
    "hipMemAllocHost:4096:0:null",
    "hipHostAlloc:4096:2",
    "hipHostAlloc:4096:0:null",
    "hipExtMallocWithFlags:4096:1",
    "hipExtMallocWithFlags:4096:1:null",
    "hipExtMallocWithFlags:8:2",
    "hipExtMallocWithFlags:4096:9",
    "hipMalloc:max",
    "hipMalloc:0",
    "hipMallocHost:4096:0:null",
    "hipMallocManaged:4096:4",
    "hipHostRegister:4096:0:null",
    "hipHostRegister:4096:8",
    "hipMallocAsync:4096",
    "hipMallocFromPoolAsync:4096",
    "procaddr:hipHostMalloc",
    "maps",
];

/// A run against the real runtime: no fake on the library path.
fn real(program: Run) -> Run {
    program.env_remove("LD_LIBRARY_PATH")
}

#[test]
fn every_hook_returns_exactly_what_the_runtime_returns() {
    let Some(_) = real_runtime() else { return };
    for shape in ["app", "framework"] {
        let make = || match shape {
            "app" => real(Run::probe(5)),
            _ => real(Run::framework(5)),
        };
        let without = make().no_shim().args(STEPS).run();
        without.assert_success();
        let codes: std::collections::BTreeSet<&str> = without
            .stdout
            .split_whitespace()
            .filter(|w| w.starts_with("rc="))
            .collect();
        assert!(
            codes.contains("rc=101"),
            "the real runtime answered: {}",
            without.stdout
        );
        for mode in ["off", "dry-run", "force"] {
            let with = make()
                .mode(mode)
                .env("FAKEHIP_DEVICES", "")
                .args(STEPS)
                .run();
            with.assert_success();
            // procaddr differs by design: 5.2.3 has no hipGetProcAddress, so without the
            // shim the probe finds none, with it the probe finds the shim's, which answers
            // 302 (hipErrorSharedObjectSymbolNotFound).
            let strip = |o: &Out| -> Vec<String> {
                o.results()
                    .into_iter()
                    .filter(|l| !l.starts_with("procaddr"))
                    .collect()
            };
            assert_eq!(strip(&with), strip(&without), "{shape} {mode}");
            assert!(
                with.stdout.contains("procaddr hipHostMalloc rc=302"),
                "{}",
                with.stdout
            );

            let s = with.stats.as_ref().expect("stats");
            let path = s["runtime"]["path"].as_str().unwrap();
            assert!(
                path.contains("libamdhip64.so.5") && !path.contains("fake-hip"),
                "{path}"
            );
            assert_eq!(
                s["runtime"]["version"], 50221153,
                "hipRuntimeGetVersion of ROCm 5.2.3"
            );
            // The versioned references (hipHostMalloc@hip_4.2) were bound to the shim:
            // every call of the probe was counted by it.
            assert_eq!(with.stat("hipHostMalloc", "calls"), 9, "{shape} {mode}");
            assert_eq!(with.stat("hipHostMalloc", "errors"), 9);
            assert_eq!(with.stat("hipMallocAsync", "calls"), 2);
            // One runtime mapped, the one the process loaded.
            let maps: Vec<&str> = with
                .stdout
                .lines()
                .filter(|l| l.starts_with("maps /"))
                .collect();
            assert_eq!(maps.len(), 1, "{}", with.stdout);
            assert!(
                maps[0].contains(
                    path.rsplit('/')
                        .next()
                        .unwrap()
                        .trim_end_matches(|c: char| c != '5')
                ),
                "{maps:?} vs {path}"
            );
        }
    }
}

#[test]
fn force_mode_rewrites_and_falls_back_on_the_real_runtime() {
    let Some(_) = real_runtime() else { return };
    // No GPU: the rewritten call fails with 101 (not out-of-memory), so the caller's call is
    // retried and its 101 returned; each rewrite counts a fallback.
    let out = real(Run::probe(5))
        .mode("force")
        .args([
            "hipHostMalloc:4096:0",
            "hipExtMallocWithFlags:4096:1",
            "hipMalloc:64",
        ])
        .run();
    out.assert_success();
    assert!(
        out.results().iter().all(|l| l.ends_with("rc=101 ptr=0")),
        "{}",
        out.stdout
    );
    assert_eq!(out.stat("hipHostMalloc", "rewritten"), 1);
    assert_eq!(out.stat("hipHostMalloc", "fallbacks"), 1);
    assert_eq!(out.stat("hipExtMallocWithFlags", "fallbacks"), 1);
    assert_eq!(out.stat("hipMalloc", "rewritten"), 0);
    assert!(
        out.stats.as_ref().unwrap()["devices"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no GPU: no device listed"
    );
}

#[test]
fn python_ctypes_with_the_real_runtime() {
    let Some(_) = real_runtime() else { return };
    let Some(python) = python3() else { return };
    let mut with = real(Run::new(5, &python)).mode("force");
    with.cmd.args(["-c", CTYPES_PROBE]).arg(framework(5)).args([
        "hipHostMalloc:4096:0",
        "hipMemAllocHost:64",
        "maps",
    ]);
    let with = with.run();
    with.assert_success();
    assert!(
        with.stdout
            .contains("hipHostMalloc size=4096 flags=0x0 rc=101 ptr=0"),
        "{}",
        with.stdout
    );
    assert!(
        with.stdout
            .contains("hipMemAllocHost size=64 flags=0x0 rc=101 ptr=0"),
        "{}",
        with.stdout
    );
    assert_eq!(with.stdout.matches("maps /").count(), 1, "{}", with.stdout);
    assert_eq!(with.stat("hipHostMalloc", "calls"), 1);
    assert_eq!(with.stat("hipMemAllocHost", "fallbacks"), 1);
}

#[test]
fn the_real_runtime_exports_versioned_symbols() {
    let Some(lib) = real_runtime() else { return };
    let Ok(out) = std::process::Command::new("objdump")
        .arg("-T")
        .arg(&lib)
        .output()
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "objdump is required in CI"
        );
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "hipHostMalloc",
        "hipExtMallocWithFlags",
        "hipMemAllocHost",
        "hipMalloc",
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains("hip_4.2") && l.split_whitespace().last() == Some(name)),
            "{name}@@hip_4.2 not exported"
        );
    }
    // What the shim exports is unversioned, and still binds those references (the tests above).
    let shim = std::process::Command::new("objdump")
        .arg("-T")
        .arg(shim())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shim.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().last() == Some("hipHostMalloc"))
        .expect("shim exports hipHostMalloc");
    assert!(line.contains("Base") || !line.contains("hip_4.2"), "{line}");
}
