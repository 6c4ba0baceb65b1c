//! The shim changes the coherence flags and nothing else, in the loading shapes real users
//! have (issue 12): other HIP interposers, other dlsym wrappers, audit modules, presence
//! probes in processes without HIP, and a pending dlerror() message. Each shape is run with
//! and without the shim and compared. (Two runtime copies: shim_loading.rs.)

use std::ffi::OsString;
use std::path::Path;

use rmcp_testkit::*;

const NC: u32 = 0x8000_0000;

/// LD_PRELOAD made of these files, in this order.
fn preload(files: &[&Path]) -> OsString {
    let mut s = OsString::new();
    for (i, f) in files.iter().enumerate() {
        if i > 0 {
            s.push(":");
        }
        s.push(f);
    }
    s
}

/// The tracer's lines for a probe run with this LD_PRELOAD.
fn traced(preloaded: &[&Path]) -> (Vec<String>, Out) {
    let run = Run::probe(6);
    let log = run.dir().join("tracer.log");
    let out = run
        .env("LD_PRELOAD", preload(preloaded))
        .env("TRACER_LOG", &log)
        .args([
            "hipHostMalloc:4096:0",
            "hipMalloc:64",
            "hipExtMallocWithFlags:64:1",
        ])
        .run();
    out.assert_success();
    let lines = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    (lines, out)
}

#[test]
fn a_tracer_preloaded_after_the_shim_sees_every_call_as_rewritten() {
    let (lines, out) = traced(&[&shim(), &tracer()]);
    assert_eq!(
        lines,
        [
            "tracer hipHostMalloc flags=0x80000000",
            "tracer hipMalloc flags=0x0",
            "tracer hipExtMallocWithFlags flags=0x0",
        ]
    );
    assert_eq!(out.allocs()[0], ("hipHostMalloc".into(), NC));
}

#[test]
fn a_tracer_preloaded_before_the_shim_sees_every_call_as_made() {
    let (lines, out) = traced(&[&tracer(), &shim()]);
    assert_eq!(
        lines,
        [
            "tracer hipHostMalloc flags=0x0",
            "tracer hipMalloc flags=0x0",
            "tracer hipExtMallocWithFlags flags=0x1",
        ]
    );
    // The shim still rewrites, behind the tracer.
    assert_eq!(out.allocs()[0], ("hipHostMalloc".into(), NC));
}

/// What the presence program printed, with this LD_PRELOAD (None: no preload), and its
/// stderr.
fn presence_run(preloaded: Option<&[&Path]>, extra: &[(&str, &Path)]) -> (String, String) {
    let mut cmd = std::process::Command::new(presence());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    if let Some(p) = preloaded {
        cmd.env("LD_PRELOAD", preload(p));
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the presence program");
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_process_without_hip_sees_no_hip_and_maps_nothing() {
    let (without, _) = presence_run(None, &[]);
    assert_eq!(without, "default=0\nmain=0\ncos=1\n");
    // Even at trace level and with a stats file asked for: nothing is read, loaded or
    // printed.
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let mut cmd = std::process::Command::new(presence());
    cmd.env_clear()
        .env("LD_PRELOAD", shim())
        .env("RMCP_LOG", "trace")
        .env("RMCP_MODE", "force")
        .env("RMCP_STATS_FILE", &stats)
        .env("LD_LIBRARY_PATH", fake_dir(6));
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), without);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(
        !stats.exists(),
        "no report from a process that never called HIP"
    );
}

#[test]
fn a_dlsym_wrapper_after_the_shim_sees_every_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(name);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (out_without, _) = presence_run(
        Some(&[&dlsym_wrapper()]),
        &[("WRAPPER_LOG", &log("without"))],
    );
    let (out_with, _) = presence_run(
        Some(&[&shim(), &dlsym_wrapper()]),
        &[("WRAPPER_LOG", &log("with"))],
    );
    assert_eq!(out_with, out_without);
    let without = read(&log("without"));
    assert_eq!(
        without,
        "wrapper hipMalloc\nwrapper hipMalloc\nwrapper cos\n"
    );
    assert_eq!(read(&log("with")), without);
}

#[test]
fn an_audit_module_sees_the_program_as_the_binder() {
    let audit = audit_module();
    let (_, without) = presence_run(None, &[("LD_AUDIT", &audit)]);
    let (_, with) = presence_run(Some(&[&shim()]), &[("LD_AUDIT", &audit)]);
    let binds = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("audit bind cos"))
            .map(String::from)
            .collect()
    };
    assert_eq!(binds(&without), ["audit bind cos by <program>"]);
    assert_eq!(binds(&with), binds(&without));
}

#[test]
fn a_pending_dlerror_message_survives_later_hooked_calls() {
    // The first hooked call from an object resolves where its calls go, with dlopen and
    // dlsym, and glibc clears a pending message on every such call (docs/design.md,
    // "Known limits, in full"). Every call after that leaves it as it was.
    let steps = [
        "hipMalloc:64",
        "dlopen-fail",
        "hipHostMalloc:64:0",
        "dlerror",
    ];
    let with = Run::probe(6).args(steps).run();
    let without = Run::probe(6).no_shim().args(steps).run();
    let line = |o: &Out| {
        o.stdout
            .lines()
            .find(|l| l.starts_with("dlerror="))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        line(&without).contains("rmcp-probe-missing.so"),
        "{}",
        without.stdout
    );
    assert_eq!(line(&with), line(&without));
}

#[test]
fn the_shims_own_lookups_leave_no_dlerror_message() {
    // Issue 33: the first hooked call makes the shim's own loader calls (attaching the
    // body, finding the runtime, resolving the caller), some of which fail; none of their
    // messages is left for the caller. On the fake runtime and on the real 5.2.3 one.
    let steps = ["hipMalloc:64", "dlerror", "hipHostMalloc:64:0", "dlerror"];
    let mut runs = vec![(
        "fake .so.6",
        Run::probe(6).args(steps).run(),
        Run::probe(6).no_shim().args(steps).run(),
    )];
    if real_runtime().is_some() {
        runs.push((
            "real 5.2.3",
            Run::probe(5)
                .env_remove("LD_LIBRARY_PATH")
                .args(steps)
                .run(),
            Run::probe(5)
                .no_shim()
                .env_remove("LD_LIBRARY_PATH")
                .args(steps)
                .run(),
        ));
    }
    for (what, with, without) in runs {
        let lines = |o: &Out| -> Vec<String> {
            o.stdout
                .lines()
                .filter(|l| l.starts_with("dlerror="))
                .map(String::from)
                .collect()
        };
        assert_eq!(lines(&without), ["dlerror=none", "dlerror=none"], "{what}");
        assert_eq!(lines(&with), lines(&without), "{what}: {}", with.stdout);
    }
}
