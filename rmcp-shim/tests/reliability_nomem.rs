//! An allocation that fails inside the shim never ends the process (issue 13): the program
//! gets the runtime's own answers and exits as it does without the shim, whatever the log
//! level, whether the heap runs out before the first hooked call, at any point inside it,
//! or after it.
//!
//! tests/c/nomem.c has a malloc family that fails from a chosen call on (`arm:N`); every
//! object in the process, the shim and glibc included, allocates through it. Before the
//! fix, the first failure inside the shim ended the process with "memory allocation of N
//! bytes failed" and SIGABRT (Rust's allocation-error handler).
//!
//! Every run is killed after 20 s, so a hang fails the test.

use std::time::Duration;

use rmcp_testkit::*;

const LIMIT: Duration = Duration::from_secs(20);
const LEVELS: &[&str] = &["off", "warn", "info", "debug", "trace"];

/// The first calls: rewritten (hipHostMalloc 0, Finegrained, hipHostAlloc on the 6.x fake,
/// hipMemAllocHost), counted (hipMalloc), and one that allocates nothing in the runtime.
const FIRST: &[&str] = &[
    "hipHostMalloc:4096:0",
    "hipExtMallocWithFlags:4096:1",
    "hipHostAlloc:4096:2",
    "hipMemAllocHost:4096:0",
    "hipMalloc:4096:0",
    "hipHostMalloc:0:0",
];

/// Later calls, many of each: at debug and trace every one of them is logged.
const LATER: &[&str] = &[
    "hipHostMalloc:4096:0:2000",
    "hipExtMallocWithFlags:4096:1:2000",
    "hipMalloc:4096:0:2000",
    "hipHostMalloc:0:0:2000",
];

/// nomem with `steps`, at RMCP_LOG=`level`, with the shim or without; the stats report is
/// asked for (RMCP_STATS_FILE), so it too is written with no heap.
fn nomem(shim: bool, level: &str, steps: &[String]) -> Out {
    let run = Run::new(6, &nomem_client())
        .env_remove("FAKEHIP_RECORD")
        .env("RMCP_LOG", level)
        .args(steps);
    let run = if shim { run } else { run.no_shim() };
    run.run_within(LIMIT)
}

fn steps(parts: &[&[&str]]) -> Vec<String> {
    parts
        .iter()
        .flat_map(|p| p.iter())
        .map(|s| s.to_string())
        .collect()
}

/// The program's answers: its output without the `allocations=` lines.
fn answers(out: &Out) -> Vec<&str> {
    out.stdout
        .lines()
        .filter(|l| !l.contains("allocations="))
        .collect()
}

/// `exit allocations=A failed=F` (counted after the shim's exit report) -> (A, F).
fn allocations(out: &Out) -> (u64, u64) {
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("exit allocations="))
        .unwrap_or_else(|| panic!("no exit allocations line: {out:?}"));
    let (a, f) = line.split_once(" failed=").unwrap();
    (a.parse().unwrap(), f.parse().unwrap())
}

/// Exits as `without` did: same status, never a signal.
fn same_exit(with: &Out, without: &Out, what: &str) {
    assert!(
        with.status.code().is_some(),
        "{what}: killed by a signal ({:?}); stderr:\n{}",
        with.status,
        with.stderr
    );
    assert_eq!(
        with.status, without.status,
        "{what}: stderr:\n{}",
        with.stderr
    );
}

#[test]
fn no_heap_from_the_start_changes_no_answer() {
    let s = steps(&[&["arm:0"], FIRST, LATER]);
    let without = nomem(false, "warn", &s);
    without.assert_success();
    for level in LEVELS {
        let with = nomem(true, level, &s);
        same_exit(&with, &without, level);
        assert_eq!(answers(&with), answers(&without), "RMCP_LOG={level}");
    }
}

#[test]
fn no_heap_after_the_first_call_changes_no_answer() {
    let s = steps(&[FIRST, &["arm:0"], LATER]);
    let without = nomem(false, "warn", &s);
    without.assert_success();
    for level in LEVELS {
        let with = nomem(true, level, &s);
        same_exit(&with, &without, level);
        assert_eq!(answers(&with), answers(&without), "RMCP_LOG={level}");
        let (_, failed) = allocations(&with);
        assert!(failed > 0, "RMCP_LOG={level}: nothing failed");
    }
}

/// The heap runs out at every point of the first calls in turn, and of the exit report
/// after them: after their first N allocations, for every N up to as many as they make
/// with a heap.
#[test]
fn the_heap_running_out_anywhere_in_the_first_call_is_not_fatal() {
    let mut runs = 0;
    for level in LEVELS {
        // How many allocations the first calls and the exit make when none fails.
        let counted = nomem(true, level, &steps(&[&["arm:1000000000"], FIRST]));
        counted.assert_success();
        let (total, _) = allocations(&counted);
        assert!(total > 0, "RMCP_LOG={level}: the shim allocated nothing?");
        eprintln!("RMCP_LOG={level}: {total} allocations in the first calls and at exit");
        for n in 0..=total {
            let s = steps(&[&[&format!("arm:{n}")], FIRST]);
            let with = nomem(true, level, &s);
            let what = format!("RMCP_LOG={level}, heap gone after {n} of {total}");
            assert!(
                with.status.success(),
                "{what}: {:?}; stderr:\n{}",
                with.status,
                with.stderr
            );
            // Each call got the runtime's answer: success, or out of memory (2) where the
            // fake runtime's own allocation failed; never the shim's 302.
            let got = answers(&with);
            assert!(got.len() >= FIRST.len(), "{what}: {got:?}");
            for line in &got {
                assert!(
                    line.contains(" rc=0 ") || line.contains(" rc=2 "),
                    "{what}: {line}"
                );
            }
            runs += 1;
        }
    }
    eprintln!("{runs} runs, the heap running out at each point of the first calls and the exit");
}
