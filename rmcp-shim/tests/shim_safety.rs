//! Never worse than without the shim: fallbacks, caller errors, bad configuration, the
//! first-call race, processes that never touch HIP, and stats that agree with the runtime.

use rmcp_testkit::*;

const NC: u32 = 0x8000_0000;

#[test]
fn rejected_rewrite_is_retried_as_asked() {
    // The runtime refuses NonCoherent: the caller's own call is made, its answer returned.
    let out = Run::probe(6)
        .env("FAKEHIP_FAIL", "hipHostMalloc@0x80000000:1")
        .args([
            "hipHostMalloc:4096:0",
            "hipHostMalloc:4096:2",
            "hipMemAllocHost:64",
        ])
        .run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), NC),
            ("hipHostMalloc".into(), 0),
            ("hipHostMalloc".into(), NC | 2),
            ("hipHostMalloc".into(), 2),
            ("hipHostMalloc".into(), NC),
            ("hipMemAllocHost".into(), 0),
        ]
    );
    assert!(
        out.results().iter().all(|l| l.ends_with("rc=0 ptr=1")),
        "{}",
        out.stdout
    );
    assert_eq!(out.stat("hipHostMalloc", "fallbacks"), 2);
    assert_eq!(out.stat("hipHostMalloc", "errors"), 0);
    assert_eq!(out.stat("hipMemAllocHost", "fallbacks"), 1);
    let warnings = out.stderr_lines("retried as the caller asked");
    assert_eq!(warnings.len(), 2, "once per function: {}", out.stderr);

    // The caller's call fails too: that answer, bit for bit.
    let out = Run::probe(6)
        .env(
            "FAKEHIP_FAIL",
            "hipHostMalloc@0x80000000:801,hipHostMalloc:999",
        )
        .args(["hipHostMalloc:4096:0"])
        .run();
    assert_eq!(
        out.allocs(),
        [("hipHostMalloc".into(), NC), ("hipHostMalloc".into(), 0)]
    );
    assert!(out.stdout.contains("rc=999 ptr=0"), "{}", out.stdout);
    assert_eq!(out.stat("hipHostMalloc", "errors"), 1);

    // Device memory: Default refused, Finegrained retried.
    let out = Run::probe(6)
        .env("FAKEHIP_FAIL", "hipExtMallocWithFlags:3")
        .args(["hipExtMallocWithFlags:4096:1"])
        .run();
    assert_eq!(
        out.allocs(),
        [
            ("hipExtMallocWithFlags".into(), 0),
            ("hipExtMallocWithFlags".into(), 1)
        ]
    );
    assert!(out.stdout.contains("rc=3 ptr=0"), "{}", out.stdout);
    assert_eq!(out.stat("hipExtMallocWithFlags", "fallbacks"), 1);
}

#[test]
fn out_of_memory_is_not_retried() {
    let out = Run::probe(6)
        .env("FAKEHIP_FAIL", "hipHostMalloc@0x80000000:2")
        .args(["hipHostMalloc:4096:0"])
        .run();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
    assert!(out.stdout.contains("rc=2 ptr=0"), "{}", out.stdout);
    assert_eq!(out.stat("hipHostMalloc", "fallbacks"), 0);
    assert_eq!(out.stat("hipHostMalloc", "errors"), 1);
}

/// Steps that are caller errors or edge cases.
const BAD: &[&str] = &[
    "hipHostMalloc:4096:0:null",
    "hipHostMalloc:0:0",
    "hipHostMalloc:max:0",
    "hipHostMalloc:4096:0xc0000000",
    "hipHostMalloc:4096:0x100",
    "hipHostMalloc:4096:0xffffffff",
    "hipMemAllocHost:4096:0:null",
    "hipMemAllocHost:max",
    "hipHostAlloc:4096:0:null",
    "hipHostAlloc:max:2",
    "hipHostAlloc:4096:0x80000000",
    "hipExtMallocWithFlags:4096:1:null",
    "hipExtMallocWithFlags:max:1",
    "hipExtMallocWithFlags:0:1",
    "hipExtMallocWithFlags:4096:2",
    "hipExtMallocWithFlags:4096:7",
    "hipMalloc:4096:0:null",
    "hipMalloc:max",
    "hipMallocHost:4096:0:null",
    "hipMallocManaged:4096:0:null",
    "hipHostRegister:4096:0:null",
    "hipMallocAsync:max",
    "hipMallocFromPoolAsync:4096:0:null",
];

#[test]
fn bad_input_gets_the_runtimes_answer() {
    for major in [5, 6] {
        let without = Run::probe(major).no_shim().args(BAD).run();
        without.assert_success();
        for mode in ["auto", "force", "dry-run", "off"] {
            let with = Run::probe(major).mode(mode).args(BAD).run();
            with.assert_success();
            assert_eq!(with.results(), without.results(), "so.{major} {mode}");
        }
        // Not every answer is success: the comparison means something.
        let failures = without
            .results()
            .iter()
            .filter(|l| !l.contains("rc=0 "))
            .count();
        assert!(failures >= 15, "{}", without.stdout);
    }
}

#[test]
fn bad_environment_values_warn_once_and_use_the_default() {
    let out = Run::probe(6)
        .env("RMCP_MODE", "sometimes")
        .env("RMCP_LOG", "chatty")
        .env("RMCP_FINEGRAINED", "perhaps")
        .args([
            "hipHostMalloc:4096:0",
            "hipExtMallocWithFlags:4096:1",
            "hipHostMalloc:4096:0",
        ])
        .run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), NC),
            ("hipExtMallocWithFlags".into(), 0),
            ("hipHostMalloc".into(), NC)
        ],
        "defaults: auto, coarsen"
    );
    for var in ["RMCP_MODE", "RMCP_LOG", "RMCP_FINEGRAINED"] {
        assert_eq!(out.stderr.matches(var).count(), 1, "{var}: {}", out.stderr);
    }
    assert!(
        out.stderr.contains("auto, force, dry-run, off"),
        "{}",
        out.stderr
    );
}

#[test]
fn threads_racing_the_first_call_each_reach_the_runtime_once() {
    for major in [5, 6] {
        let out = Run::probe(major)
            .args(["threads:8:hipHostMalloc:4096:0"])
            .run();
        out.assert_success();
        assert_eq!(
            out.allocs(),
            vec![("hipHostMalloc".to_string(), NC); 8],
            "so.{major}"
        );
        assert_eq!(out.count("hipRuntimeGetVersion"), 1, "state is built once");
        assert_eq!(out.count("hipGetDeviceCount"), 1);
        assert_eq!(out.stat("hipHostMalloc", "calls"), 8);
        assert_eq!(out.stat("hipHostMalloc", "rewritten"), 8);
        assert_eq!(
            out.stdout
                .lines()
                .filter(|l| l.ends_with("rc=0 ptr=1 hostflags=0x80000000"))
                .count(),
            8
        );
    }
}

#[test]
fn stats_agree_with_the_runtime_record() {
    let out = Run::probe(6)
        .args([
            "all",
            "all",
            "hipHostMalloc:100:2",
            "hipExtMallocWithFlags:8:1",
            "hipMalloc:max",
        ])
        .run();
    out.assert_success();
    // Every call the application made reached the runtime exactly once, as the function
    // the shim chose: count what the runtime saw against what the shim says it did.
    let seen = |f: &str| out.count(f) as u64;
    let stat = |f: &str, k: &str| out.stat(f, k);
    assert_eq!(
        seen("hipHostMalloc"),
        stat("hipHostMalloc", "calls")
            + stat("hipMemAllocHost", "rewritten")
            + stat("hipHostAlloc", "rewritten")
    );
    assert_eq!(
        seen("hipMemAllocHost"),
        stat("hipMemAllocHost", "calls") - stat("hipMemAllocHost", "rewritten")
    );
    assert_eq!(
        seen("hipHostAlloc"),
        stat("hipHostAlloc", "calls") - stat("hipHostAlloc", "rewritten")
    );
    for f in [
        "hipMalloc",
        "hipExtMallocWithFlags",
        "hipMallocHost",
        "hipMallocManaged",
        "hipHostRegister",
        "hipMallocAsync",
        "hipMallocFromPoolAsync",
    ] {
        assert_eq!(seen(f), stat(f, "calls"), "{f}");
        let errors = out
            .record
            .iter()
            .filter(|r| r.func == f && r.rc != 0)
            .count() as u64;
        assert_eq!(errors, stat(f, "errors"), "{f}");
    }
    assert_eq!(stat("hipMalloc", "calls"), 3);
    assert_eq!(stat("hipMalloc", "errors"), 1);
    assert_eq!(stat("hipHostMalloc", "bytes"), 4096 * 2 + 100);
    assert_eq!(stat("hipExtMallocWithFlags", "rewritten"), 1);
    let s = out.stats.as_ref().unwrap();
    assert_eq!(s["rmcp"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        s["calls"].as_object().unwrap().len(),
        rmcp_core::registry::Hook::COUNT,
        "every hook is reported"
    );
}

#[test]
fn stats_summary_on_stderr_and_pid_in_file_name() {
    let mut run = Run::probe(6)
        .env("RMCP_STATS", "1")
        .args(["hipHostMalloc:4096:0"]);
    let template = run.dir().join("s-%p.json");
    run = run.env("RMCP_STATS_FILE", &template);
    let out = run.run();
    out.assert_success();
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains("hipHostMalloc")
                && l.split_whitespace().skip(2).take(2).eq(["1", "1"])),
        "{}",
        out.stderr
    );
    let files: Vec<_> = std::fs::read_dir(out.dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("s-") && n.ends_with(".json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let pid: u32 = files[0][2..files[0].len() - 5].parse().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.dir.path().join(&files[0])).unwrap())
            .unwrap();
    assert_eq!(json["pid"], pid);
}

#[test]
fn unwritable_stats_file_falls_back_to_stderr() {
    let out = Run::probe(6)
        .env("RMCP_STATS_FILE", "/nonexistent/dir/stats.json")
        .args(["hipMalloc:64"])
        .run();
    out.assert_success();
    assert_eq!(
        out.stderr.matches("RMCP_STATS_FILE").count(),
        1,
        "{}",
        out.stderr
    );
    let start = out.stderr.find('{').expect("JSON on stderr");
    let json: serde_json::Value = serde_json::from_str(&out.stderr[start..]).unwrap();
    assert_eq!(json["calls"]["hipMalloc"]["calls"], 1);
}

#[test]
fn log_lines_carry_the_pid_and_go_to_the_log_file() {
    let mut run = Run::probe(6)
        .env("RMCP_LOG", "debug")
        .args(["hipHostMalloc:4096:0"]);
    let log = run.dir().join("rmcp.log");
    run = run.env("RMCP_LOG_FILE", &log);
    let out = run.run();
    out.assert_success();
    assert_eq!(out.stderr, "", "nothing on stderr when a log file is set");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.iter().all(|l| l.starts_with("rmcp[")), "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("info: mode auto") && l.contains("libamdhip64.so.6")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("device 0: gfx1010 at 0000:03:00.0, affected")),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.contains(
            "debug: hipHostMalloc size=4096 flags=0x0 -> hipHostMalloc flags=0x80000000"
        )),
        "{text}"
    );
}

#[test]
fn a_process_that_never_calls_hip_pays_nothing() {
    // Under LD_PRELOAD, a program that never calls HIP: the shim's body is never mapped,
    // its state never built (the log file it would open on the first hooked call never
    // appears), no runtime is mapped and, where strace exists, no topology file, runtime
    // or body is even looked at.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("never.log");
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .env("LD_PRELOAD", shim())
            .env("RMCP_LOG", "trace")
            .env("RMCP_LOG_FILE", &log)
            .env("RMCP_SYSFS_ROOT", fixture("rdna1"))
            .output()
            .unwrap()
    };
    let out = run("cat", &["/proc/self/maps"]);
    assert!(out.status.success());
    let maps = String::from_utf8_lossy(&out.stdout);
    assert!(
        maps.contains("librmcp_shim.so"),
        "the shim is loaded: {maps}"
    );
    assert!(!maps.contains("libamdhip64"), "{maps}");
    assert!(!maps.contains("librmcp_shim_body"), "{maps}");
    assert!(
        !log.exists(),
        "the shim initialised in a process that never called HIP"
    );

    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(strace) = strace else {
        rmcp_testkit::missing("no strace for the syscall check (apt-get install strace)");
        return;
    };
    let trace = dir.path().join("trace");
    let out = run(
        strace,
        &[
            "-f",
            "-o",
            trace.to_str().unwrap(),
            "-e",
            "trace=%file",
            "true",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = std::fs::read_to_string(&trace).unwrap();
    assert!(t.contains("librmcp_shim.so"), "strace saw the preload: {t}");
    for needle in [
        "fixtures/rdna1",
        "kfd",
        "libamdhip64",
        "never.log",
        "librmcp_shim_body",
    ] {
        assert!(!t.contains(needle), "{needle} touched:\n{t}");
    }
}

#[test]
fn fork_after_the_first_call_keeps_working_with_its_own_stats() {
    let Some(python) = python3() else { return };
    let script = r#"
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
def call(*steps):
    args = [sys.argv[1].encode()] + [s.encode() for s in steps]
    sys.stdout.flush()
    rc = lib.probe_main(len(args), (ctypes.c_char_p * len(args))(*args))
    sys.stdout.flush()
    return rc
call("hipHostMalloc:4096:0")
pid = os.fork()
if pid == 0:
    call("hipHostMalloc:4096:2", "hipHostMalloc:4096:0x20000000")
    sys.exit(0)
_, status = os.waitpid(pid, 0)
call("hipMalloc:64")
print("child-status", status)
"#;
    let mut run = Run::new(5, &python);
    let template = run.dir().join("s-%p.json");
    run = run.env("RMCP_STATS_FILE", &template);
    run.cmd.args(["-c", script]).arg(framework(5));
    let out = run.run();
    out.assert_success();
    assert!(out.stdout.contains("child-status 0"), "{}", out.stdout);
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), NC),
            ("hipHostMalloc".into(), NC | 2),
            ("hipHostMalloc".into(), NC | 0x2000_0000),
            ("hipMalloc".into(), 0),
        ]
    );
    let mut reports: Vec<serde_json::Value> = std::fs::read_dir(out.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("s-"))
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    assert_eq!(reports.len(), 2, "one report per process");
    reports.sort_by_key(|r| r["calls"]["hipMalloc"]["calls"].as_u64());
    let (child, parent) = (&reports[0], &reports[1]);
    assert_ne!(child["pid"], parent["pid"]);
    assert_eq!(
        child["calls"]["hipHostMalloc"]["calls"], 2,
        "the child counts its own calls only"
    );
    assert_eq!(child["calls"]["hipMalloc"]["calls"], 0);
    assert_eq!(parent["calls"]["hipHostMalloc"]["calls"], 1);
    assert_eq!(parent["calls"]["hipMalloc"]["calls"], 1);
}

/// The shim's own queries of the runtime, in record order.
const QUERIES: &[&str] = &[
    "hipRuntimeGetVersion",
    "hipGetDeviceCount",
    "hipDeviceGetPCIBusId",
    "hipGetDevice",
];

#[test]
fn the_applications_first_call_reaches_the_runtime_before_any_shim_query() {
    let funcs = |out: &Out| -> Vec<String> {
        out.record
            .iter()
            .filter(|r| r.caller == "librmcp_shim_body.so")
            .map(|r| r.func.clone())
            .collect()
    };
    // Every GPU affected, default logging, no report: the shim asks nothing at all.
    for fixture in ["rdna1", "rdna3", "eight-gpu", "cpu-only"] {
        let out = Run::probe(6)
            .fixture(fixture)
            .env_remove("RMCP_STATS_FILE")
            .args([
                "hipHostMalloc:4096:0",
                "hipExtMallocWithFlags:64:1",
                "hipMalloc:64",
            ])
            .run();
        out.assert_success();
        let f = funcs(&out);
        assert_eq!(
            f,
            ["hipHostMalloc", "hipExtMallocWithFlags", "hipMalloc"],
            "{fixture}"
        );
    }
    // A report wanted: the version and devices are asked after the first call returned.
    let out = Run::probe(6)
        .args(["hipHostMalloc:4096:0", "hipMalloc:64"])
        .run();
    let f = funcs(&out);
    assert_eq!(f[0], "hipHostMalloc", "{f:?}");
    assert!(f[1..].iter().any(|q| q == "hipRuntimeGetVersion"), "{f:?}");
    assert_eq!(f.last().unwrap(), "hipMalloc", "{f:?}");
    // Where the decision needs an answer, it is asked first: the version for hipHostAlloc,
    // the ordinals on a mixed machine.
    let out = Run::probe(6)
        .env_remove("RMCP_STATS_FILE")
        .args(["hipHostAlloc:64:2"])
        .run();
    assert_eq!(funcs(&out), ["hipRuntimeGetVersion", "hipHostMalloc"]);
    // (hipHostMalloc: its decision needs to know whether any of the process's GPUs is
    // affected; hipMalloc's needs nothing, and asks nothing.)
    let out = Run::probe(6)
        .fixture("mixed")
        .env("FAKEHIP_DEVICES", "0000:03:00.0,0000:0a:00.0")
        .env_remove("RMCP_STATS_FILE")
        .args(["hipHostMalloc:64:0"])
        .run();
    let f = funcs(&out);
    assert_eq!(f.last().unwrap(), "hipHostMalloc");
    assert!(
        f[..f.len() - 1]
            .iter()
            .all(|q| QUERIES.contains(&q.as_str())),
        "{f:?}"
    );
    assert_eq!(out.count("hipDeviceGetPCIBusId"), 2);
}
