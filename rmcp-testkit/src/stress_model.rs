//! The model of what the shim does under the stress client (tests/c/stress.c) on the rdna1
//! fixture with the fake runtime's FAKEHIP_PATTERN=mod4, and the check that the runtime's
//! counts, the callers' results and the shim's stats agree with it, call for call.
//! Shared by the reliability_stress and reliability_logging tests.

use std::collections::BTreeMap;

use crate::artifacts::stress_client;
use crate::run::Run;

const NC: u32 = 0x8000_0000;
const COHERENT: u32 = 0x4000_0000;
const UNCACHED: u32 = 0x1000_0000;
/// hipHostMalloc flags a released runtime defines.
const HOST_MALLOC_KNOWN: u32 = 0x1 | 0x2 | 0x4 | UNCACHED | 0x2000_0000 | COHERENT | NC;
/// hipHostAlloc flags the shim rewrites on runtimes >= 6.3 (Portable | Mapped | WriteCombined).
const HOST_ALLOC_VALID: u32 = 0x7;
/// The flags that make a hipHostMalloc coherent (Mapped | NumaUser | Coherent); without one,
/// and with HIP_HOST_COHERENT unset, the runtime already makes it non-coherent.
const HOST_MALLOC_COHERENCE: u32 = 0x2 | 0x2000_0000 | COHERENT;

/// The runtime's rule (HIP_HOST_COHERENT unset): coherent when flags are 0 or carry a
/// coherence flag, and NonCoherent is not set.
fn coherent(flags: u32) -> bool {
    flags & NC == 0 && (flags == 0 || flags & HOST_MALLOC_COHERENCE != 0)
}

/// The fake runtime's answer under FAKEHIP_PATTERN=mod4 (tests/fake-hip/fake_hip.c).
fn runtime_answer(func: &str, flags: u32, class: u32) -> i32 {
    match class {
        0 => 0,
        1 => 2,
        2 => 1,
        _ => {
            let rejects = (func == "hipHostMalloc" && flags & NC != 0)
                || (func == "hipExtMallocWithFlags" && flags == 0);
            i32::from(rejects)
        }
    }
}

/// What the shim sends instead, on an affected machine (rdna1, auto, runtime 6.4).
fn rewrite(func: &str, flags: u32) -> Option<(&'static str, u32)> {
    match func {
        "hipHostMalloc" => {
            let keep = flags & (COHERENT | NC) == (COHERENT | NC)
                || flags & UNCACHED != 0
                || flags & !HOST_MALLOC_KNOWN != 0
                || !coherent(flags);
            (!keep).then_some(("hipHostMalloc", (flags & !COHERENT) | NC))
        }
        "hipMemAllocHost" => Some(("hipHostMalloc", NC)),
        "hipHostAlloc" => (flags & !HOST_ALLOC_VALID == 0 && coherent(flags))
            .then_some(("hipHostMalloc", flags | NC)),
        "hipExtMallocWithFlags" => (flags == 1).then_some(("hipExtMallocWithFlags", 0)),
        _ => None,
    }
}

/// One hook's entry in the shim's stats report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Stat {
    calls: u64,
    rewritten: u64,
    fallbacks: u64,
    errors: u64,
    bytes: u64,
}

/// (function, rc, flags) -> calls.
type Counts = BTreeMap<(String, i32, u32), u64>;

/// The figures of a run.
pub struct Accounting {
    /// Hooked calls the callers made (and tallied).
    pub calls: u64,
    /// Runtime answers other than success (the injected faults).
    pub faults: u64,
    /// Calls the runtime received, the shim's own queries included.
    pub runtime_calls: u64,
    /// Rewritten calls the runtime rejected, retried as the caller asked.
    pub fallbacks: u64,
}

/// The stress client on the .so.6 fake with FAKEHIP_PATTERN=mod4 and FAKEHIP_COUNTS (in the
/// run's directory, file `counts`), not recording.
pub fn stress_run(threads: u32, per_thread: u64) -> Run {
    let run = Run::new(6, &stress_client()).env_remove("FAKEHIP_RECORD");
    let counts_path = run.dir().join("counts");
    run.env("FAKEHIP_PATTERN", "mod4")
        .env("FAKEHIP_COUNTS", &counts_path)
        .args([threads.to_string(), per_thread.to_string()])
}

/// Runs the stress client and checks the three accounts. Returns the figures.
pub fn stress(threads: u32, per_thread: u64) -> Accounting {
    let run = stress_run(threads, per_thread);
    let counts_path = run.dir().join("counts");
    let out = run.run();
    out.assert_success();
    let counts_text = std::fs::read_to_string(&counts_path).expect("FAKEHIP_COUNTS file");
    let stats = out.stats.clone().expect("stats report");
    check(threads, per_thread, &out.stdout, &counts_text, &stats)
}

/// Checks the client's output (`stdout`), the runtime's counts and the shim's report
/// against the model and each other.
pub fn check(
    threads: u32,
    per_thread: u64,
    stdout: &str,
    counts_text: &str,
    stats: &serde_json::Value,
) -> Accounting {
    // What the runtime received.
    let mut runtime = Counts::new();
    for line in counts_text.lines() {
        assert!(
            !line.starts_with("dropped"),
            "the fake's count table overflowed: {line}"
        );
        let mut it = line.split(' ');
        let func = it.next().unwrap().to_string();
        let kv: BTreeMap<&str, &str> = it.filter_map(|t| t.split_once('=')).collect();
        let rc: i32 = kv["rc"].parse().unwrap();
        let flags = u32::from_str_radix(kv["flags"].trim_start_matches("0x"), 16).unwrap();
        let n: u64 = kv["count"].parse().unwrap();
        *runtime.entry((func, rc, flags)).or_default() += n;
    }

    // What the callers got, and what the model says every account must hold.
    let mut expected_runtime = Counts::new();
    let mut expected_stats: BTreeMap<String, Stat> = BTreeMap::new();
    let mut calls = 0u64;
    let mut proc_found = 0u64;
    let mut substituted = None;
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words[0] {
            "tally" => {
                let func = words[1];
                let class: u32 = words[3].strip_prefix("class=").unwrap().parse().unwrap();
                let got: i32 = words[4].strip_prefix("rc=").unwrap().parse().unwrap();
                let n: u64 = words[5].strip_prefix("n=").unwrap().parse().unwrap();
                calls += n;
                let st = expected_stats.entry(func.to_string()).or_default();
                st.calls += n;
                if got != 0 {
                    st.errors += n;
                }
                if func == "hipGetProcAddress" {
                    let want = i32::from(words[2] == "hipNoSuchFunction");
                    assert_eq!(got, want, "{line}");
                    if got == 0 && words[2] != "hipFree" {
                        proc_found += n;
                    }
                    *expected_runtime
                        .entry((func.to_string(), got, 0))
                        .or_default() += n;
                    continue;
                }
                let flags = u32::from_str_radix(words[2].trim_start_matches("0x"), 16).unwrap();
                let want = match rewrite(func, flags) {
                    Some((f2, fl2)) => {
                        st.rewritten += n;
                        let r1 = runtime_answer(f2, fl2, class);
                        *expected_runtime
                            .entry((f2.to_string(), r1, fl2))
                            .or_default() += n;
                        if r1 != 0 && r1 != 2 {
                            st.fallbacks += n;
                            let r2 = runtime_answer(func, flags, class);
                            *expected_runtime
                                .entry((func.to_string(), r2, flags))
                                .or_default() += n;
                            r2
                        } else {
                            r1
                        }
                    }
                    None => {
                        let r = runtime_answer(func, flags, class);
                        *expected_runtime
                            .entry((func.to_string(), r, flags))
                            .or_default() += n;
                        r
                    }
                };
                assert_eq!(got, want, "the caller got the wrong answer: {line}");
            }
            "bytes" => {
                let st = expected_stats.entry(words[1].to_string()).or_default();
                st.bytes = words[2].parse().unwrap();
            }
            "getproc" => substituted = Some(line.to_string()),
            _ => panic!("unexpected client output: {line}"),
        }
    }
    assert_eq!(calls, u64::from(threads) * per_thread, "calls tallied");

    // hipGetProcAddress for a hooked name hands back the shim's function, every time.
    let substituted = substituted.expect("getproc line");
    assert!(
        substituted.ends_with(" wrong=0"),
        "{substituted} (a wrong=N also counts out-pointers set on failure)"
    );
    let hooked_found: u64 = substituted
        .split(' ')
        .find_map(|w| w.strip_prefix("substituted="))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(hooked_found, proc_found, "{substituted}");

    // The runtime's account: exactly the modelled calls, plus the shim's own queries (once
    // each: the version for hipHostAlloc, the device list for the report).
    let queries = [
        "hipRuntimeGetVersion",
        "hipGetDeviceCount",
        "hipDeviceGetPCIBusId",
    ];
    let mut runtime_hooked = runtime.clone();
    runtime_hooked.retain(|(f, _, _), _| !queries.contains(&f.as_str()));
    if runtime_hooked != expected_runtime {
        let mut diff = String::new();
        for k in runtime_hooked.keys().chain(expected_runtime.keys()) {
            let (a, b) = (runtime_hooked.get(k), expected_runtime.get(k));
            if a != b {
                diff += &format!("{k:?}: runtime {a:?}, model {b:?}\n");
            }
        }
        panic!("the runtime's record and the callers' results disagree:\n{diff}");
    }
    for q in queries {
        let n: u64 = runtime
            .iter()
            .filter(|((f, _, _), _)| f == q)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(n, 1, "{q} asked {n} times (once expected)");
    }

    // The shim's account.
    let stat = |func: &str, field: &str| -> u64 {
        stats["calls"][func][field]
            .as_u64()
            .unwrap_or_else(|| panic!("stats has no calls.{func}.{field}: {stats}"))
    };
    let mut fallbacks = 0;
    for (func, want) in &expected_stats {
        let got = Stat {
            calls: stat(func, "calls"),
            rewritten: stat(func, "rewritten"),
            fallbacks: stat(func, "fallbacks"),
            errors: stat(func, "errors"),
            bytes: stat(func, "bytes"),
        };
        assert_eq!(&got, want, "stats for {func} (report: {stats})");
        fallbacks += got.fallbacks;
    }
    // Every hook the client calls is in the model; the others were not called.
    for (func, counts) in stats["calls"].as_object().unwrap() {
        if !expected_stats.contains_key(func.as_str()) {
            assert_eq!(counts["calls"], 0, "{func} was called (report: {stats})");
        }
    }
    // Faults injected: runtime answers other than success.
    let faults = runtime
        .iter()
        .filter(|((_, rc, _), _)| *rc != 0)
        .map(|(_, n)| n)
        .sum();
    Accounting {
        calls,
        faults,
        runtime_calls: runtime.values().sum(),
        fallbacks,
    }
}
