//! Callers that look HIP up by name (rmcp-shim/src/dlsym.rs): XLA-shaped (dlsym on a
//! runtime handle), Triton-shaped (hipGetProcAddress found by dlsym), and the lookups
//! whose meaning depends on who asks (RTLD_NEXT, RTLD_DEFAULT from an RTLD_LOCAL library),
//! which must not change.

use rmcp_testkit::*;

const NC: u32 = 0x8000_0000;
const HOOKED: &[&str] = &[
    "hipMalloc",
    "hipHostMalloc",
    "hipExtMallocWithFlags",
    "hipMemAllocHost",
    "hipGetProcAddress",
];

fn client(major: u8) -> Run {
    Run::new(major, &dlsym_client())
}

fn soname(major: u8) -> String {
    format!("libamdhip64.so.{major}")
}

/// `sym NAME owner=OBJ` lines as (name, owner).
fn owners(out: &Out) -> Vec<(String, String)> {
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("sym "))
        .map(|l| {
            let (name, owner) = l.split_once(" owner=").unwrap();
            (name.to_string(), owner.to_string())
        })
        .collect()
}

#[test]
fn xla_shaped_lookups_get_the_shims_functions() {
    for major in [5, 6] {
        let out = client(major).args(["xla", &soname(major)]).run();
        out.assert_success();
        for (name, owner) in owners(&out) {
            // The fake runtime has no module loads.
            let want = if name == "hipNoSuchFunction"
                || (major == 5 && name == "hipGetProcAddress")
                || name.starts_with("hipModuleLoad")
            {
                "none"
            } else if HOOKED.contains(&name.as_str()) {
                // The runtime is RTLD_LOCAL: the per-copy entry, in the shim's body.
                "librmcp_shim_body.so"
            } else {
                "libamdhip64.so"
            };
            assert!(owner.starts_with(want), "so.{major} {name}: {owner}");
        }
        assert!(
            out.stdout.contains("call hipHostMalloc rc=0 ptr=1"),
            "{}",
            out.stdout
        );
        assert_eq!(
            out.allocs(),
            [
                ("hipHostMalloc".into(), NC),
                ("hipExtMallocWithFlags".into(), 0)
            ],
            "so.{major}"
        );
        assert_eq!(out.stat("hipHostMalloc", "calls"), 1);
        assert_eq!(out.stat("hipHostMalloc", "rewritten"), 1);
    }
}

#[test]
fn the_substitution_can_be_turned_off() {
    for (var, value) in [("RMCP_HOOK_DLSYM", "0"), ("RMCP_MODE", "off")] {
        let out = client(6)
            .env(var, value)
            .args(["xla", "libamdhip64.so.6"])
            .run();
        out.assert_success();
        for (name, owner) in owners(&out) {
            if name != "hipNoSuchFunction" && !name.starts_with("hipModuleLoad") {
                assert_eq!(owner, "libamdhip64.so.6", "{var}={value} {name}");
            }
        }
        assert_eq!(
            out.allocs(),
            [
                ("hipHostMalloc".into(), 0),
                ("hipExtMallocWithFlags".into(), 1)
            ]
        );
    }
    // Without the shim, the same lookups: the runtime's functions, the caller's flags.
    let out = client(6).no_shim().args(["xla", "libamdhip64.so.6"]).run();
    assert!(owners(&out).iter().all(|(n, o)| o == "libamdhip64.so.6"
        || n == "hipNoSuchFunction"
        || n.starts_with("hipModuleLoad")));
}

#[test]
fn triton_shaped_lookups_get_the_shims_functions() {
    let out = client(6).args(["triton", "libamdhip64.so.6"]).run();
    out.assert_success();
    let want = "sym hipGetProcAddress owner=librmcp_shim_body.so\n\
                procaddr hipHostMalloc rc=0 owner=librmcp_shim_body.so\n\
                call hipHostMalloc rc=0 ptr=1\n";
    assert_eq!(out.stdout, want);
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
    assert_eq!(out.stat("hipGetProcAddress", "calls"), 1);
    let without = client(6)
        .no_shim()
        .args(["triton", "libamdhip64.so.6"])
        .run();
    assert!(
        without
            .stdout
            .contains("procaddr hipHostMalloc rc=0 owner=libamdhip64.so.6")
    );
    assert_eq!(without.allocs(), [("hipHostMalloc".into(), 0)]);
}

#[test]
fn lookups_that_depend_on_the_caller_keep_their_meaning() {
    // RTLD_NEXT and RTLD_DEFAULT asked from an RTLD_LOCAL library: the same answers with
    // and without the shim (its dlsym must not become the caller glibc sees).
    for major in [5, 6] {
        let lib = scope_lib(major);
        let lib = lib.to_str().expect("a UTF-8 path");
        let with = client(major).args(["scopes", lib]).run();
        let without = client(major).no_shim().args(["scopes", lib]).run();
        with.assert_success();
        assert_eq!(with.stdout, without.stdout, "so.{major}");
        assert!(
            with.stdout
                .contains("default rmcp_local_only_symbol owner=libscopedep.so"),
            "{}",
            with.stdout
        );
    }
    // RTLD_NEXT from the executable: the next object is the preloaded shim. Had glibc seen
    // the shim as the caller, the answer would have been the runtime.
    let out = client(6).args(["next", "libamdhip64.so.6"]).run();
    assert!(
        out.stdout
            .contains("next hipHostMalloc owner=librmcp_shim.so"),
        "{}",
        out.stdout
    );
    let out = client(6).no_shim().args(["next", "libamdhip64.so.6"]).run();
    assert!(
        out.stdout
            .contains("next hipHostMalloc owner=libamdhip64.so.6"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_process_that_never_touches_hip_sees_no_change() {
    let mut run = client(6).env("RMCP_LOG", "trace").args(["plain"]);
    let log = run.dir().join("never.log");
    run = run.env("RMCP_LOG_FILE", &log);
    let with = run.run();
    let without = client(6).no_shim().args(["plain"]).run();
    with.assert_success();
    assert_eq!(with.stdout, without.stdout);
    assert!(
        with.stdout.contains("missing found=0 error=1"),
        "dlerror kept: {}",
        with.stdout
    );
    assert!(
        with.stdout.contains("missing-on-handle found=0 error=1"),
        "{}",
        with.stdout
    );
    assert!(
        with.stdout
            .contains("default strlen owner=libc.so.6 same=1")
    );
    assert!(
        !log.exists(),
        "the shim built its state in a process that never used HIP"
    );
}

#[test]
fn xla_shaped_lookups_on_the_real_runtime() {
    let Some(_) = real_runtime() else { return };
    let with = client(5)
        .env_remove("LD_LIBRARY_PATH")
        .args(["xla", "libamdhip64.so.5"])
        .run();
    let without = client(5)
        .no_shim()
        .env_remove("LD_LIBRARY_PATH")
        .args(["xla", "libamdhip64.so.5"])
        .run();
    with.assert_success();
    let calls = |o: &Out| -> Vec<String> {
        o.stdout
            .lines()
            .filter(|l| l.starts_with("call "))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        calls(&with),
        calls(&without),
        "the runtime's answers, unchanged"
    );
    assert!(
        calls(&with).iter().all(|l| l.contains("rc=101")),
        "{}",
        with.stdout
    );
    for (name, owner) in owners(&with) {
        if [
            "hipMalloc",
            "hipHostMalloc",
            "hipExtMallocWithFlags",
            "hipMemAllocHost",
            "hipModuleLoadData",
            "hipModuleLoadDataEx",
            "hipModuleLoad",
        ]
        .contains(&name.as_str())
        {
            assert_eq!(owner, "librmcp_shim_body.so", "{name}");
        } else if name == "hipFree" {
            assert!(owner.starts_with("libamdhip64.so.5"), "{name}: {owner}");
        }
    }
    assert_eq!(with.stat("hipHostMalloc", "calls"), 1);
    assert_eq!(with.stat("hipExtMallocWithFlags", "calls"), 1);
    assert!(
        with.stats.as_ref().unwrap()["runtime"]["path"]
            .as_str()
            .unwrap()
            .contains("libamdhip64.so.5")
    );
}

/// An RMCP_EXEMPT caller's lookups get the runtime's own functions, and its calls through
/// them are the caller's own (issue 22: a per-copy entry names no caller, so it cannot carry
/// the exemption).
#[test]
fn an_exempt_callers_lookups_get_the_runtimes_functions() {
    let exe = dlsym_client();
    let name = exe.file_name().unwrap().to_str().unwrap().to_string();
    let out = client(6)
        .env("RMCP_EXEMPT", &name)
        .args(["xla", "libamdhip64.so.6"])
        .run();
    out.assert_success();
    for (sym, owner) in owners(&out) {
        // The fake runtime has no module loads.
        if sym != "hipNoSuchFunction" && !sym.starts_with("hipModuleLoad") {
            assert_eq!(owner, "libamdhip64.so.6", "{sym}");
        }
    }
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), 0),
            ("hipExtMallocWithFlags".into(), 1)
        ]
    );
}
