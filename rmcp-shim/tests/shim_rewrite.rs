//! The rewrite table end to end: every hook x {affected, unaffected, mixed with the current
//! device affected / not} x every mode, asserting the flags the (fake) runtime received.

use rmcp_testkit::*;

const NC: u32 = 0x8000_0000;

#[derive(Clone, Copy, PartialEq)]
enum Class {
    /// Rewritten when a visible GPU is affected.
    Host,
    /// Rewritten when the current device is affected.
    Device,
    /// Never rewritten.
    Never,
}

struct Step {
    arg: &'static str,
    class: Class,
    /// What the runtime receives when the shim rewrites.
    rewritten: (&'static str, u32),
    /// What the runtime receives otherwise (the caller's call).
    asked: (&'static str, u32),
}

const fn step(
    arg: &'static str,
    class: Class,
    rewritten: (&'static str, u32),
    asked: (&'static str, u32),
) -> Step {
    Step {
        arg,
        class,
        rewritten,
        asked,
    }
}

const fn same(arg: &'static str, func: &'static str, flags: u32) -> Step {
    step(arg, Class::Never, (func, flags), (func, flags))
}

/// Run against the .so.6 fake (HIP 6.4: hipHostAlloc allocates host memory).
const STEPS: &[Step] = &[
    step(
        "hipHostMalloc:4096:0",
        Class::Host,
        ("hipHostMalloc", NC),
        ("hipHostMalloc", 0),
    ),
    step(
        "hipHostMalloc:4096:0x2",
        Class::Host,
        ("hipHostMalloc", NC | 0x2),
        ("hipHostMalloc", 0x2),
    ),
    step(
        "hipHostMalloc:4096:0x40000000",
        Class::Host,
        ("hipHostMalloc", NC),
        ("hipHostMalloc", 0x4000_0000),
    ),
    step(
        "hipHostMalloc:4096:0x20000005",
        Class::Host,
        ("hipHostMalloc", NC | 0x2000_0005),
        ("hipHostMalloc", 0x2000_0005),
    ),
    same("hipHostMalloc:4096:0x80000000", "hipHostMalloc", NC),
    same(
        "hipHostMalloc:4096:0xc0000000",
        "hipHostMalloc",
        0xc000_0000,
    ),
    same(
        "hipHostMalloc:4096:0x10000000",
        "hipHostMalloc",
        0x1000_0000,
    ),
    same("hipHostMalloc:4096:0x100", "hipHostMalloc", 0x100),
    // Portable and WriteCombined alone: the runtime already makes them non-coherent.
    same("hipHostMalloc:4096:0x1", "hipHostMalloc", 0x1),
    same("hipHostMalloc:4096:0x4", "hipHostMalloc", 0x4),
    same("hipHostMalloc:4096:0x5", "hipHostMalloc", 0x5),
    step(
        "hipMemAllocHost:4096",
        Class::Host,
        ("hipHostMalloc", NC),
        ("hipMemAllocHost", 0),
    ),
    step(
        "hipHostAlloc:4096:0",
        Class::Host,
        ("hipHostMalloc", NC),
        ("hipHostAlloc", 0),
    ),
    step(
        "hipHostAlloc:4096:0x6",
        Class::Host,
        ("hipHostMalloc", NC | 0x6),
        ("hipHostAlloc", 0x6),
    ),
    same("hipHostAlloc:4096:0x40000000", "hipHostAlloc", 0x4000_0000),
    same("hipHostAlloc:4096:0x1", "hipHostAlloc", 0x1),
    same("hipHostAlloc:4096:0x4", "hipHostAlloc", 0x4),
    step(
        "hipExtMallocWithFlags:4096:1",
        Class::Device,
        ("hipExtMallocWithFlags", 0),
        ("hipExtMallocWithFlags", 1),
    ),
    same("hipExtMallocWithFlags:4096:0", "hipExtMallocWithFlags", 0),
    same("hipExtMallocWithFlags:8:2", "hipExtMallocWithFlags", 2),
    same("hipExtMallocWithFlags:4096:3", "hipExtMallocWithFlags", 3),
    same("hipExtMallocWithFlags:4096:4", "hipExtMallocWithFlags", 4),
    same("hipMalloc:4096", "hipMalloc", 0),
    same("hipMallocHost:4096", "hipMallocHost", 0),
    same("hipMallocManaged:4096:1", "hipMallocManaged", 1),
    same("hipHostRegister:4096:2", "hipHostRegister", 2),
    same("hipMallocAsync:4096", "hipMallocAsync", 0),
    same("hipMallocFromPoolAsync:4096", "hipMallocFromPoolAsync", 0),
];

struct Scenario {
    name: &'static str,
    fixture: &'static str,
    devices: &'static str,
    current: u8,
    host: bool,
    device: bool,
    per_call_query: bool,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "affected (RDNA1)",
        fixture: "rdna1",
        devices: "0000:03:00.0",
        current: 0,
        host: true,
        device: true,
        per_call_query: false,
    },
    Scenario {
        name: "affected (RDNA2)",
        fixture: "rdna2",
        devices: "0000:03:00.0",
        current: 0,
        host: true,
        device: true,
        per_call_query: false,
    },
    Scenario {
        name: "unaffected (RDNA3)",
        fixture: "rdna3",
        devices: "0000:03:00.0",
        current: 0,
        host: false,
        device: false,
        per_call_query: false,
    },
    Scenario {
        name: "mixed, current affected",
        fixture: "mixed",
        devices: "0000:03:00.0,0000:0a:00.0",
        current: 0,
        host: true,
        device: true,
        per_call_query: true,
    },
    Scenario {
        name: "mixed, current unaffected",
        fixture: "mixed",
        devices: "0000:03:00.0,0000:0a:00.0",
        current: 1,
        host: true,
        device: false,
        per_call_query: true,
    },
    Scenario {
        name: "mixed domains, current unaffected",
        fixture: "two-cpu-mixed-domain",
        devices: "0000:c1:00.0,0001:41:00.0",
        current: 0,
        host: true,
        device: false,
        per_call_query: true,
    },
];

#[test]
fn every_hook_in_every_situation_and_mode() {
    let mut checked = 0;
    for sc in SCENARIOS {
        for mode in ["auto", "force", "dry-run", "off"] {
            let out = Run::probe(6)
                .fixture(sc.fixture)
                .env("FAKEHIP_DEVICES", sc.devices)
                .env("FAKEHIP_CURRENT", sc.current.to_string())
                .mode(mode)
                .args(STEPS.iter().map(|s| s.arg))
                .run();
            out.assert_success();
            let ctx = format!("{} / {mode}", sc.name);
            let applies = |s: &Step| match (mode, s.class) {
                (_, Class::Never) => false,
                ("force", _) => true,
                ("auto", Class::Host) => sc.host,
                ("auto", Class::Device) => sc.device,
                _ => false,
            };
            let would = |s: &Step| match s.class {
                Class::Never => false,
                _ if mode == "off" => false,
                _ if mode == "force" => true,
                Class::Host => sc.host,
                Class::Device => sc.device,
            };
            let expected: Vec<(String, u32)> = STEPS
                .iter()
                .map(|s| if applies(s) { s.rewritten } else { s.asked })
                .map(|(f, fl)| (f.to_string(), fl))
                .collect();
            let got = out.allocs();
            for (i, (s, (e, g))) in STEPS
                .iter()
                .zip(expected.iter().zip(got.iter()))
                .enumerate()
            {
                assert_eq!(
                    e, g,
                    "{ctx}: step {i} {} -> runtime got {g:?}, expected {e:?}",
                    s.arg
                );
            }
            assert_eq!(got.len(), expected.len(), "{ctx}: {got:?}");

            // The caller sees the runtime's answer: every step succeeds on the fake
            // except the caller error Coherent|NonCoherent.
            for line in out.results() {
                let want = if line.contains("flags=0xc0000000") {
                    "rc=1"
                } else {
                    "rc=0"
                };
                assert!(line.contains(want), "{ctx}: {line}");
            }

            // Stats count would-be rewrites in dry-run, applied ones otherwise.
            let rewritten: u64 = [
                "hipHostMalloc",
                "hipMemAllocHost",
                "hipHostAlloc",
                "hipExtMallocWithFlags",
            ]
            .iter()
            .map(|f| out.stat(f, "rewritten"))
            .sum();
            let want = STEPS.iter().filter(|s| would(s)).count() as u64;
            assert_eq!(rewritten, want, "{ctx}: stats rewritten");
            let calls: u64 = ALLOCATORS.iter().map(|f| out.stat(f, "calls")).sum();
            assert_eq!(calls, STEPS.len() as u64, "{ctx}: stats calls");
            assert_eq!(out.stats.as_ref().unwrap()["mode"], mode, "{ctx}");

            // The current device is asked per call only on a mixed machine, and only for
            // the one call it can change (hipExtMallocWithFlags Finegrained).
            let queries = out.count("hipGetDevice");
            let want = usize::from(sc.per_call_query && (mode == "auto" || mode == "dry-run"));
            assert_eq!(queries, want, "{ctx}: hipGetDevice calls");
            checked += STEPS.len();
        }
    }
    assert_eq!(checked, SCENARIOS.len() * 4 * STEPS.len());
}

#[test]
fn runtime_5x_host_alloc_is_left_alone_and_re_entry_is_forwarded() {
    // 5.2.3's hipHostAlloc allocates VRAM with the flags as internal flags: not rewritten.
    // Its hipMemAllocHost calls hipHostMalloc through its PLT, which lands in the shim:
    // that inner call belongs to the runtime and goes through unchanged and uncounted.
    let out = Run::probe(5)
        .mode("force")
        .args(["hipHostAlloc:4096:0", "hipHostAlloc:4096:2"])
        .run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [("hipHostAlloc".into(), 0), ("hipHostAlloc".into(), 2)]
    );
    assert_eq!(out.stat("hipHostAlloc", "rewritten"), 0);

    let out = Run::probe(5)
        .mode("off")
        .args(["hipMemAllocHost:4096"])
        .run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [("hipMemAllocHost".into(), 0), ("hipHostMalloc".into(), 0)],
        "the runtime's own inner call is visible in its record"
    );
    let inner = out
        .record
        .iter()
        .find(|r| r.func == "hipHostMalloc")
        .unwrap();
    assert_eq!(
        inner.caller, "librmcp_shim_body.so",
        "the inner call passed through the shim"
    );
    assert_eq!(out.stat("hipMemAllocHost", "calls"), 1);
    assert_eq!(
        out.stat("hipHostMalloc", "calls"),
        0,
        "the runtime's inner call is not counted"
    );

    // Rewritten, the inner path is never taken.
    let out = Run::probe(5).args(["hipMemAllocHost:4096"]).run();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
    assert!(
        out.stdout.contains("hostflags=0x80000000"),
        "{}",
        out.stdout
    );
}

#[test]
fn host_alloc_follows_the_runtime_version() {
    for (version, rewritten) in [("60242134", false), ("60342131", true), ("70051831", true)] {
        let out = Run::probe(6)
            .mode("force")
            .env("FAKEHIP_VERSION", version)
            .args(["hipHostAlloc:4096:2"])
            .run();
        out.assert_success();
        let want = if rewritten {
            ("hipHostMalloc".to_string(), NC | 2)
        } else {
            ("hipHostAlloc".to_string(), 2)
        };
        assert_eq!(out.allocs(), [want], "version {version}");
    }
}

/// The runtime's HIP_HOST_COHERENT, read as the runtime reads it (atoi, non-zero), makes a
/// request without a coherence flag coherent: then Portable and WriteCombined are rewritten
/// too, and counted.
#[test]
fn hip_host_coherent_makes_portable_and_write_combined_coherent() {
    let steps = [
        "hipHostMalloc:4096:0x1",
        "hipHostMalloc:4096:0x4",
        "hipHostAlloc:4096:0x1",
        "hipHostMalloc:4096:0x80000001",
    ];
    for (value, on) in [
        (None, false),
        (Some("0"), false),
        (Some("true"), false),
        (Some(""), false),
        (Some("1"), true),
        (Some(" -1"), true),
        (Some("2x"), true),
    ] {
        let mut run = Run::probe(6).mode("force").args(steps);
        if let Some(v) = value {
            run = run.env("HIP_HOST_COHERENT", v);
        }
        let out = run.run();
        out.assert_success();
        let want: Vec<(String, u32)> = if on {
            vec![
                ("hipHostMalloc".into(), NC | 0x1),
                ("hipHostMalloc".into(), NC | 0x4),
                ("hipHostMalloc".into(), NC | 0x1),
                ("hipHostMalloc".into(), NC | 0x1),
            ]
        } else {
            vec![
                ("hipHostMalloc".into(), 0x1),
                ("hipHostMalloc".into(), 0x4),
                ("hipHostAlloc".into(), 0x1),
                ("hipHostMalloc".into(), NC | 0x1),
            ]
        };
        assert_eq!(out.allocs(), want, "HIP_HOST_COHERENT={value:?}");
        let n = u64::from(on);
        assert_eq!(out.stat("hipHostMalloc", "rewritten"), 2 * n, "{value:?}");
        assert_eq!(out.stat("hipHostAlloc", "rewritten"), n, "{value:?}");
    }
}

#[test]
fn finegrained_keep_leaves_device_memory() {
    let out = Run::probe(6)
        .env("RMCP_FINEGRAINED", "keep")
        .args(["hipExtMallocWithFlags:4096:1", "hipHostMalloc:4096:0"])
        .run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [
            ("hipExtMallocWithFlags".into(), 1),
            ("hipHostMalloc".into(), NC)
        ]
    );
}

#[test]
fn targets_replace_the_defaults() {
    // RDNA3 becomes a target; RDNA1 stops being one.
    let out = Run::probe(6)
        .fixture("rdna3")
        .env("RMCP_TARGETS", "gfx1100")
        .args(["hipHostMalloc:4096:0"])
        .run();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), NC)]);
    let out = Run::probe(6)
        .env("RMCP_TARGETS", "gfx1100")
        .args(["hipHostMalloc:4096:0"])
        .run();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), 0)]);
}

#[test]
fn no_topology_rewrites_nothing_in_auto_and_everything_in_force() {
    for (fixture, mode, want) in [
        ("does-not-exist", "auto", 0),
        ("cpu-only", "auto", 0),
        ("does-not-exist", "force", NC),
    ] {
        let out = Run::probe(6)
            .fixture(fixture)
            .mode(mode)
            .env("RMCP_LOG", "info")
            .args(["hipHostMalloc:4096:0"])
            .run();
        out.assert_success();
        assert_eq!(
            out.allocs(),
            [("hipHostMalloc".into(), want)],
            "{fixture} {mode}"
        );
        if fixture == "does-not-exist" {
            assert_eq!(
                out.stderr.matches("no readable KFD topology").count(),
                1,
                "{}",
                out.stderr
            );
        }
    }
}

#[test]
fn hip_visible_devices_decide_host_rewrites() {
    // On the mixed machine, a process that sees only the RDNA3 card (HIP ordinal 0 is then
    // 0000:0a:00.0) has no affected GPU: host memory stays as asked.
    let out = Run::probe(6)
        .fixture("mixed")
        .env("FAKEHIP_DEVICES", "0000:0a:00.0")
        .args(["hipHostMalloc:4096:0", "hipExtMallocWithFlags:4096:1"])
        .run();
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), 0),
            ("hipExtMallocWithFlags".into(), 1)
        ]
    );
    assert_eq!(
        out.count("hipGetDevice"),
        0,
        "one device: no per-call query"
    );
}

#[test]
fn devices_and_runtime_appear_in_stats() {
    let out = Run::probe(6)
        .fixture("mixed")
        .env("FAKEHIP_DEVICES", "0000:03:00.0,0000:0a:00.0")
        .args(["hipMalloc:100"])
        .run();
    let s = out.stats.as_ref().unwrap();
    assert_eq!(s["runtime"]["version"], 60443483);
    assert!(
        s["runtime"]["path"]
            .as_str()
            .unwrap()
            .ends_with("libamdhip64.so.6")
    );
    let devices = s["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0]["gfx"], "gfx1010");
    assert_eq!(devices[0]["pci"], "0000:03:00.0");
    assert_eq!(devices[0]["affected"], true);
    assert_eq!(devices[1]["gfx"], "gfx1100");
    assert_eq!(devices[1]["affected"], false);
    assert!(s["pid"].as_u64().unwrap() > 0);
    assert_eq!(out.stat("hipMalloc", "bytes"), 100);
}

/// What stays coherent whatever the shim does is passed through and counted: hipHostRegister
/// (coherent in every runtime, whatever the flags) and 7.x Uncached host memory as
/// `coherent`, hipMemCreate with a host location (7.x) as `host_location`, each said once
/// on an affected machine (a warning; for hipMemCreate at info); nothing about the calls
/// changes.
#[test]
fn what_the_shim_cannot_change_is_passed_through_and_counted() {
    let steps = [
        "hipHostRegister:4096:0",
        "hipHostRegister:4096:8",
        "hipHostMalloc:4096:0x10000000",
        "hipHostMalloc:4096:0x10000002",
        "hipHostAlloc:4096:0x10000000",
        "memcreate:4096:1",
        "memcreate:4096:2",
        "memcreate:4096:2",
    ];
    for mode in ["auto", "force", "dry-run", "off"] {
        let out = Run::probe(7)
            .mode(mode)
            .env("RMCP_LOG", "info")
            .args(steps)
            .run();
        out.assert_success();
        assert_eq!(
            out.allocs(),
            [
                ("hipHostRegister".into(), 0),
                ("hipHostRegister".into(), 8),
                ("hipHostMalloc".into(), 0x1000_0000),
                ("hipHostMalloc".into(), 0x1000_0002),
                ("hipHostAlloc".into(), 0x1000_0000),
            ],
            "{mode}"
        );
        let created: Vec<u32> = out
            .record
            .iter()
            .filter(|r| r.func == "hipMemCreate")
            .map(|r| r.flags)
            .collect();
        assert_eq!(created, [1, 2, 2], "{mode}: location types as asked");
        assert!(
            out.results().iter().all(|l| l.contains("rc=0")),
            "{mode}: {:?}",
            out.results()
        );
        assert_eq!(out.stat("hipHostRegister", "coherent"), 2, "{mode}");
        assert_eq!(out.stat("hipHostMalloc", "coherent"), 2, "{mode}");
        assert_eq!(out.stat("hipHostAlloc", "coherent"), 1, "{mode}");
        assert_eq!(out.stat("hipMemCreate", "calls"), 3, "{mode}");
        assert_eq!(out.stat("hipMemCreate", "host_location"), 2, "{mode}");
        assert_eq!(out.stat("hipMemCreate", "coherent"), 0, "{mode}");
        for f in [
            "hipHostRegister",
            "hipHostMalloc",
            "hipHostAlloc",
            "hipMemCreate",
        ] {
            assert_eq!(out.stat(f, "rewritten"), 0, "{mode} {f}");
            let warned = out.stderr_lines(&format!("{f}: ")).len();
            let want = usize::from(mode != "off");
            assert_eq!(warned, want, "{mode}: warnings for {f}:\n{}", out.stderr);
        }
    }

    // Before 7.0 Uncached means nothing to the runtime: not counted as coherent. A host
    // location is rejected there, and a failed call is not counted.
    let out = Run::probe(6)
        .args(["hipHostMalloc:4096:0x10000000", "memcreate:4096:2"])
        .run();
    out.assert_success();
    assert_eq!(out.stat("hipHostMalloc", "coherent"), 0);
    assert!(
        out.stdout
            .contains("hipMemCreate size=4096 location=2 rc=1"),
        "{}",
        out.stdout
    );
    assert_eq!(out.stat("hipMemCreate", "host_location"), 0);

    // An exempt caller keeps coherent memory by choice: counted, not warned about.
    let out = Run::probe(7)
        .env("RMCP_EXEMPT", "hip_probe")
        .args(["hipHostRegister:4096:0"])
        .run();
    assert_eq!(out.stat("hipHostRegister", "coherent"), 1);
    assert!(
        out.stderr_lines("hipHostRegister").is_empty(),
        "{}",
        out.stderr
    );
}
