//! How the runtime gets into the process, and which copy the shim forwards to.

use rmcp_testkit::*;

const NC: u32 = 0x8000_0000;

#[test]
fn directly_linked_app() {
    for major in [5, 6] {
        let out = Run::probe(major)
            .args(["hipHostMalloc:4096:0", "maps"])
            .run();
        out.assert_success();
        assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
        assert_eq!(
            out.record
                .iter()
                .find(|r| r.func == "hipHostMalloc")
                .unwrap()
                .caller,
            "librmcp_shim_body.so"
        );
        assert_eq!(out.maps().len(), 1, "one runtime copy: {}", out.stdout);
    }
}

#[test]
fn framework_loaded_rtld_local() {
    // The Python-extension shape: the runtime is a dependency of an RTLD_LOCAL dlopen, so
    // it is not in the global scope and dlsym(RTLD_NEXT) from the shim finds nothing.
    for major in [5, 6] {
        let out = Run::framework(major)
            .args(["hipHostMalloc:4096:0", "hipMemAllocHost:64", "maps"])
            .run();
        out.assert_success();
        assert_eq!(
            out.allocs(),
            [("hipHostMalloc".into(), NC), ("hipHostMalloc".into(), NC)]
        );
        assert_eq!(out.maps().len(), 1, "{}", out.stdout);
        assert!(out.stdout.contains("rc=0 ptr=1"), "{}", out.stdout);
    }
}

#[test]
fn python_ctypes_loading_a_framework() {
    let Some(python) = python3() else { return };
    let mut run = Run::new(5, &python);
    run.cmd.args(["-c", CTYPES_PROBE]).arg(framework(5)).args([
        "hipHostMalloc:4096:2",
        "hipExtMallocWithFlags:4096:1",
        "maps",
    ]);
    let out = run.run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), NC | 2),
            ("hipExtMallocWithFlags".into(), 0)
        ]
    );
    assert_eq!(out.maps().len(), 1, "{}", out.stdout);
}

#[test]
fn two_copies_each_caller_served_by_its_own_copy() {
    // A bundled copy opened by path first (as PyTorch wheels do), then a framework linked to
    // the other soname: two runtimes are mapped. Without the shim the framework's calls
    // reach its own copy (.so.5); with it they must too, in every mode, so that its frees
    // (which the shim does not hook) find what its allocations made.
    let bundled = fake_dir(6).join("libamdhip64.so.6");
    for mode in ["off", "auto", "force"] {
        let mut run = Run::new(5, &dlopen_client()).mode(mode);
        run.cmd
            .arg("--first")
            .arg(&bundled)
            .arg(framework(5))
            .args(["hipHostMalloc:4096:0", "hipMalloc:64", "maps"]);
        let out = run.run();
        out.assert_success();
        assert_eq!(out.maps().len(), 2, "{mode}: {}", out.stdout);
        let served: Vec<(&str, &str, i32)> = out
            .record
            .iter()
            .map(|r| (r.func.as_str(), r.lib.as_str(), r.rc))
            .collect();
        assert!(
            served.iter().all(|(_, lib, _)| *lib == "libamdhip64.so.5"),
            "{mode}: every call served by the framework's own copy: {served:?}"
        );
        for free in ["hipHostFree", "hipFree"] {
            assert!(
                served.iter().any(|(f, _, rc)| *f == free && *rc == 0),
                "{mode}: {free} found what was allocated: {served:?}"
            );
        }
        let nc = if mode == "off" { 0 } else { NC };
        assert_eq!(out.allocs()[0], ("hipHostMalloc".into(), nc), "{mode}");
    }
}

/// Calls the shim's hipHostMalloc directly, in a process where no runtime is mapped.
fn call_shim_without_runtime(run: Run) -> Out {
    let script = r#"
import ctypes, sys
shim = ctypes.CDLL(sys.argv[1])
p = ctypes.c_void_p()
rc = shim.hipHostMalloc(ctypes.byref(p), ctypes.c_size_t(4096), ctypes.c_uint(0))
maps = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libamdhip64' in l})
print("rc=%d ptr=%d" % (rc, p.value is not None))
for m in maps: print("maps " + m)
"#;
    let mut run = run.env_remove("LD_PRELOAD");
    run.cmd.arg("-c").arg(script).arg(shim());
    run.run()
}

#[test]
fn nothing_mapped_loads_the_newest_soname_or_the_configured_library() {
    let Some(python) = python3() else { return };
    let path = std::env::join_paths([fake_dir(5), fake_dir(7), fake_dir(6)]).unwrap();

    let out = call_shim_without_runtime(Run::new(5, &python).env("LD_LIBRARY_PATH", &path));
    out.assert_success();
    assert!(out.stdout.starts_with("rc=0 ptr=1"), "{}", out.stdout);
    assert_eq!(
        out.record
            .iter()
            .find(|r| r.func == "hipHostMalloc")
            .unwrap()
            .lib,
        "libamdhip64.so.7"
    );
    assert_eq!(out.maps().len(), 1, "{}", out.stdout);

    let configured = fake_dir(6).join("libamdhip64.so.6");
    let out = call_shim_without_runtime(
        Run::new(5, &python)
            .env("LD_LIBRARY_PATH", &path)
            .env("RMCP_HIP_LIBRARY", &configured),
    );
    assert_eq!(
        out.record
            .iter()
            .find(|r| r.func == "hipHostMalloc")
            .unwrap()
            .lib,
        "libamdhip64.so.6"
    );

    // A configured path that does not load: the sonames are tried next. With none on the
    // library path, the system's runtime is loaded if there is one (Debian's 5.2.3, which
    // answers 101 without a GPU); else the caller gets 302 and one error line.
    let out = call_shim_without_runtime(
        Run::new(5, &python)
            .env("LD_LIBRARY_PATH", "/nonexistent")
            .env("RMCP_HIP_LIBRARY", "/nonexistent/libamdhip64.so.6"),
    );
    if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5").exists() {
        assert!(out.stdout.starts_with("rc=101 ptr=0"), "{}", out.stdout);
        assert_eq!(out.maps().len(), 1, "{}", out.stdout);
        assert!(out.maps()[0].contains("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"));
    } else {
        assert!(out.stdout.starts_with("rc=302 ptr=0"), "{}", out.stdout);
        assert_eq!(
            out.stderr.matches("no HIP runtime is mapped").count(),
            1,
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("/nonexistent/libamdhip64.so.6"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn get_proc_address_hands_back_the_shim_for_hooked_names() {
    let out = Run::probe(6)
        .args([
            "procaddr:hipHostMalloc",
            "procaddr:hipFree",
            "procaddr:hipMalloc",
        ])
        .run();
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    // same_as_direct=1: the pointer equals what the probe's own symbol lookup gives, the
    // shim's export; a call through it is rewritten.
    assert!(
        lines[0].starts_with("procaddr hipHostMalloc rc=0 status=0 found=1 same_as_direct=1"),
        "{}",
        out.stdout
    );
    assert!(
        lines[1].starts_with("procaddr-call rc=0 ptr=1"),
        "{}",
        out.stdout
    );
    assert!(
        lines[2].contains("procaddr hipFree rc=0") && lines[2].contains("found=1"),
        "{}",
        out.stdout
    );
    assert!(
        lines[3].contains("procaddr hipMalloc rc=0") && lines[3].contains("same_as_direct=1"),
        "{}",
        out.stdout
    );
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
    assert_eq!(out.stat("hipGetProcAddress", "calls"), 3);

    // Off: the runtime's own function comes back, from hipGetProcAddress and from
    // dlsym(RTLD_DEFAULT) alike (a lookup answers as without the shim when nothing is
    // substituted), and the call is not rewritten.
    let out = Run::probe(6)
        .mode("off")
        .args(["procaddr:hipHostMalloc"])
        .run();
    assert!(out.stdout.contains("same_as_direct=1"), "{}", out.stdout);
    assert_eq!(out.count("hipHostMalloc"), 1);
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), 0)]);

    // An unknown name: the runtime's answer, untouched.
    let out = Run::probe(6).args(["procaddr:hipNoSuchThing"]).run();
    let without = Run::probe(6)
        .no_shim()
        .args(["procaddr:hipNoSuchThing"])
        .run();
    assert_eq!(out.stdout, without.stdout);
}

#[test]
fn a_hook_the_runtime_lacks_returns_302_and_logs_once() {
    // 5.x has no hipGetProcAddress; the probe finds the shim's export and calls it twice.
    let out = Run::probe(5)
        .args(["procaddr:hipHostMalloc", "procaddr:hipMalloc"])
        .run();
    out.assert_success();
    assert!(
        out.stdout.contains("procaddr hipHostMalloc rc=302"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("procaddr hipMalloc rc=302"),
        "{}",
        out.stdout
    );
    let errors = out.stderr_lines("hipGetProcAddress");
    assert_eq!(errors.len(), 1, "{}", out.stderr);
    assert!(
        errors[0].contains("error") && errors[0].contains("does not export"),
        "{}",
        errors[0]
    );
    assert_eq!(out.stat("hipGetProcAddress", "errors"), 2);
}

#[test]
fn exempt_callers_are_left_alone() {
    let out = Run::framework(5)
        .env("RMCP_EXEMPT", "libframework")
        .args(["hipHostMalloc:4096:0"])
        .run();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), 0)]);
    // The same call from the probe executable is not exempt.
    let out = Run::probe(5)
        .env("RMCP_EXEMPT", "libframework")
        .args(["hipHostMalloc:4096:0"])
        .run();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
    // Clearing RMCP_EXEMPT exempts nothing.
    let out = Run::framework(5)
        .env("RMCP_EXEMPT", "")
        .args(["hipHostMalloc:4096:0"])
        .run();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
}

/// hipGetDriverEntryPoint (7.1+) and its per-thread-stream form resolve names as
/// hipGetProcAddress does: a hooked name comes back as the shim's function, and calls through
/// it are decided and reach the function the runtime gave.
#[test]
fn get_driver_entry_point_hands_back_the_shim_for_hooked_names() {
    let out = Run::probe(7)
        .args([
            "entrypoint:hipHostMalloc",
            "entrypoint:hipMalloc:1",
            "entrypoint_spt:hipHostMalloc",
            "entrypoint:hipFree:2",
            "entrypoint:hipNoSuchThing",
        ])
        .run();
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    let want = [
        "entrypoint hipHostMalloc rc=0 status=0 found=1 same_as_direct=1",
        "entrypoint-call rc=0 ptr=1",
        "entrypoint hipMalloc rc=0 status=0 found=1 same_as_direct=1",
        "entrypoint_spt hipHostMalloc rc=0 status=0 found=1 same_as_direct=1",
        "entrypoint_spt-call rc=0 ptr=1",
        "entrypoint hipFree rc=0 status=0 found=1",
        "entrypoint hipNoSuchThing rc=1 status=1 found=0",
    ];
    assert!(lines.len() >= want.len(), "{}", out.stdout);
    for (line, prefix) in lines.iter().zip(want) {
        assert!(line.starts_with(prefix), "{prefix:?}:\n{}", out.stdout);
    }
    // Both calls through the handed-back pointers were rewritten.
    assert_eq!(
        out.allocs(),
        [("hipHostMalloc".into(), NC), ("hipHostMalloc".into(), NC)]
    );
    assert_eq!(out.stat("hipGetDriverEntryPoint", "calls"), 4);
    assert_eq!(out.stat("hipGetDriverEntryPoint_spt", "calls"), 1);
    assert_eq!(out.stat("hipHostMalloc", "rewritten"), 2);

    // The answers are the runtime's; without the shim the pointers are the runtime's own.
    let without = Run::probe(7)
        .no_shim()
        .args(["entrypoint:hipHostMalloc", "entrypoint:hipNoSuchThing"])
        .run();
    assert!(
        without
            .stdout
            .starts_with("entrypoint hipHostMalloc rc=0 status=0 found=1 same_as_direct=1"),
        "{}",
        without.stdout
    );
    assert_eq!(without.allocs(), [("hipHostMalloc".into(), 0)]);

    // Off: nothing is substituted.
    let out = Run::probe(7)
        .mode("off")
        .args(["entrypoint:hipHostMalloc"])
        .run();
    assert!(out.stdout.contains("same_as_direct=1"), "{}", out.stdout);
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), 0)]);
}

/// A runtime without hipGetDriverEntryPoint (before 7.1): the shim's export answers 302 and
/// logs once, as for any hooked function the runtime lacks.
#[test]
fn get_driver_entry_point_on_a_runtime_without_it_answers_302() {
    let out = Run::probe(6)
        .args(["entrypoint:hipHostMalloc", "entrypoint:hipMalloc"])
        .run();
    out.assert_success();
    assert!(
        out.stdout.contains("entrypoint hipHostMalloc rc=302")
            && out.stdout.contains("entrypoint hipMalloc rc=302"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stderr_lines("hipGetDriverEntryPoint").len(),
        1,
        "{}",
        out.stderr
    );
    // Without the shim the probe finds no such function.
    let without = Run::probe(6)
        .no_shim()
        .args(["entrypoint:hipHostMalloc"])
        .run();
    assert!(
        without
            .stdout
            .contains("entrypoint hipHostMalloc rc=302 missing=1"),
        "{}",
        without.stdout
    );
}

/// The two files users copy ("keep the two side by side"): copied with `cp -a` (which keeps
/// a link a link) into a fresh directory, the front still maps its body there and the
/// runtime receives NonCoherent. The pair is the one beside the shim under test (deps/, or
/// wherever RMCP_TEST_SHIM points: scripts/newcomer points it at target/release after
/// README's commands and `cargo build --release`); in a `release` directory the body must be
/// a regular file, never a link (rmcp-shim's build.rs).
#[test]
fn the_pair_copied_with_cp_a_still_rewrites() {
    let front = shim();
    let dir = front.parent().unwrap();
    let body = dir.join("librmcp_shim_body.so");
    if dir.file_name().is_some_and(|n| n == "release") {
        let m = body.symlink_metadata().unwrap();
        assert!(m.file_type().is_file(), "{}: {m:?}", body.display());
    }
    let copy = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&front)
        .arg(&body)
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(st.success());
    let out = Run::probe(6)
        .env("LD_PRELOAD", copy.path().join("librmcp_shim.so"))
        .args(["hipHostMalloc:4096:0"])
        .run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [("hipHostMalloc".into(), NC)],
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("cannot load the body"),
        "{}",
        out.stderr
    );
}
