//! After the first call, a hooked call takes no lock that could block, allocates nothing
//! and makes no system call: shown by running the calls in a thread whose every system
//! call traps (seccomp) and whose mallocs are counted (tests/c/hotpath.c).

use rmcp_testkit::*;

const STEPS: &[&str] = &[
    "hipHostMalloc:0",
    "hipHostMalloc:2",
    "hipHostAlloc:2",
    "hipExtMallocWithFlags:1",
    "hipExtMallocWithFlags:0",
    "hipMalloc",
    "hipMallocHost",
    "hipMemAllocHost",
    "hipLaunchKernel",
];
const N: usize = 2000;

fn hotpath(run: Run, control: bool) -> (u64, u64, u64, u64) {
    hotpath_threads(run, control, 0)
}

/// With `threads` more threads started together after the first, each checked from its own
/// first call on (its slot's claim included).
fn hotpath_threads(run: Run, control: bool, threads: usize) -> (u64, u64, u64, u64) {
    let mut run = run
        .env_remove("FAKEHIP_RECORD")
        .env_remove("RMCP_STATS_FILE");
    run.cmd.arg(N.to_string()).args(STEPS);
    if control {
        run.cmd.arg("control");
    }
    if threads > 0 {
        run.cmd.arg(format!("threads={threads}"));
    }
    let out = run.run();
    out.assert_success();
    let line = out.stdout.trim();
    let field = |k: &str| -> u64 {
        line.split(' ')
            .find_map(|t| t.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {line:?}; stderr {}", out.stderr))
            .parse()
            .unwrap()
    };
    (
        field("calls"),
        field("failed"),
        field("mallocs"),
        field("syscalls"),
    )
}

fn run() -> Run {
    Run::new(6, &hotpath_client())
}

#[test]
fn no_allocation_and_no_syscall_after_the_first_call() {
    let situations: &[(&str, Vec<(&str, &str)>)] = &[
        ("auto, affected", vec![]),
        ("auto, unaffected", vec![("RMCP_SYSFS_ROOT", "rdna3")]),
        (
            "auto, mixed (current device asked per call)",
            vec![
                ("RMCP_SYSFS_ROOT", "mixed"),
                ("FAKEHIP_DEVICES", "0000:03:00.0,0000:0a:00.0"),
            ],
        ),
        ("force", vec![("RMCP_MODE", "force")]),
        ("dry-run", vec![("RMCP_MODE", "dry-run")]),
        ("off", vec![("RMCP_MODE", "off")]),
        ("exempt caller", vec![("RMCP_EXEMPT", "hotpath")]),
        ("no exemptions", vec![("RMCP_EXEMPT", "")]),
        (
            "stats and info log",
            vec![("RMCP_STATS", "1"), ("RMCP_LOG", "info")],
        ),
    ];
    for (name, env) in situations {
        let mut r = run();
        for (k, v) in env {
            r = if *k == "RMCP_SYSFS_ROOT" {
                r.fixture(v)
            } else {
                r.env(k, v)
            };
        }
        let (calls, failed, mallocs, syscalls) = hotpath(r, false);
        assert_eq!(calls, (N * STEPS.len()) as u64, "{name}");
        assert_eq!(failed, 0, "{name}");
        assert_eq!(mallocs, 0, "{name}: heap allocations on the hot path");
        assert_eq!(syscalls, 0, "{name}: system calls on the hot path");
    }
}

#[test]
fn several_threads_claim_their_slots_and_record_without_allocation_or_syscall() {
    // Four threads start together and make every step, launches and recorded allocations
    // included, from their first call on: the claim of each thread's slot (its counters,
    // launch ring and allocation ring) and the records in those rings. Under the pattern
    // the fake runtime answers size 0 with a non-null address, so every allocation is
    // recorded.
    for (name, env) in [
        ("auto, affected", None),
        ("stats and info log", Some(("RMCP_STATS", "1"))),
    ] {
        let mut r = run().env("FAKEHIP_PATTERN", "mod4");
        if let Some((k, v)) = env {
            r = r.env(k, v).env("RMCP_LOG", "info");
        }
        let (calls, failed, mallocs, syscalls) = hotpath_threads(r, false, 4);
        assert_eq!(calls, (N * STEPS.len() * 5) as u64, "{name}");
        assert_eq!(failed, 0, "{name}");
        assert_eq!(mallocs, 0, "{name}: heap allocations on the hot path");
        assert_eq!(syscalls, 0, "{name}: system calls on the hot path");
    }
}

#[test]
fn the_detectors_see_an_allocation_and_a_syscall() {
    let (_, _, mallocs, syscalls) = hotpath(run(), true);
    assert_eq!((mallocs, syscalls), (1, 1));
}
