//! Per-hook counters and the exit report.
//!
//! Counters are sharded: each thread adds to one of `SHARDS` copies, each on its own cache
//! lines, so two threads allocating at once do not write the same line. A report sums them.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use serde::Serialize;

use crate::registry::{HOOKS, Hook};

const SHARDS: usize = 8;

#[repr(align(128))]
struct Shard {
    calls: AtomicU64,
    rewritten: AtomicU64,
    fallbacks: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
}

impl Shard {
    const fn zero() -> Shard {
        Shard {
            calls: AtomicU64::new(0),
            rewritten: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }
    fn all(&self) -> [&AtomicU64; 5] {
        [
            &self.calls,
            &self.rewritten,
            &self.fallbacks,
            &self.errors,
            &self.bytes,
        ]
    }
}

static COUNTERS: [[Shard; SHARDS]; Hook::COUNT] =
    [const { [const { Shard::zero() }; SHARDS] }; Hook::COUNT];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> usize {
    MY_SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_SHARD.fetch_add(1, Relaxed) % SHARDS;
        s.set(v);
        v
    })
}

/// What one call did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// The shim changed the call (dry-run: would have).
    pub rewritten: bool,
    /// The changed call failed and was retried as the caller asked.
    pub fallback: bool,
    /// The caller got a non-success answer.
    pub error: bool,
    pub bytes: u64,
}

pub fn record(hook: Hook, o: Outcome) {
    let s = &COUNTERS[hook.index()][shard()];
    s.calls.fetch_add(1, Relaxed);
    if o.rewritten {
        s.rewritten.fetch_add(1, Relaxed);
    }
    if o.fallback {
        s.fallbacks.fetch_add(1, Relaxed);
    }
    if o.error {
        s.errors.fetch_add(1, Relaxed);
    }
    if o.bytes != 0 {
        s.bytes.fetch_add(o.bytes, Relaxed);
    }
}

/// Zeroes every counter (the child of a fork starts its own count).
pub fn reset() {
    for hook in &COUNTERS {
        for s in hook {
            for c in s.all() {
                c.store(0, Relaxed);
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub calls: u64,
    pub rewritten: u64,
    pub fallbacks: u64,
    pub errors: u64,
    pub bytes: u64,
}

pub fn counts(hook: Hook) -> Counts {
    let mut c = Counts::default();
    for s in &COUNTERS[hook.index()] {
        c.calls += s.calls.load(Relaxed);
        c.rewritten += s.rewritten.load(Relaxed);
        c.fallbacks += s.fallbacks.load(Relaxed);
        c.errors += s.errors.load(Relaxed);
        c.bytes = c.bytes.wrapping_add(s.bytes.load(Relaxed));
    }
    c
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuntimeReport {
    pub path: Option<String>,
    pub version: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceReport {
    pub ordinal: i32,
    pub gfx: String,
    pub pci: String,
    pub affected: bool,
}

/// The JSON summary (RMCP_STATS_FILE); the README documents it.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub rmcp: &'static str,
    pub pid: u32,
    pub mode: &'static str,
    pub runtime: RuntimeReport,
    pub devices: Vec<DeviceReport>,
    pub calls: BTreeMap<&'static str, Counts>,
}

impl Report {
    pub fn new(mode: &'static str, runtime: RuntimeReport, devices: Vec<DeviceReport>) -> Report {
        Report {
            rmcp: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            mode,
            runtime,
            devices,
            calls: HOOKS.iter().map(|(h, name)| (*name, counts(*h))).collect(),
        }
    }

    /// The summary for RMCP_STATS=1: a header, then one line per hook that was called.
    pub fn human(&self) -> String {
        let pid = self.pid;
        let mut out = format!(
            "rmcp[{pid}] stats: mode {}, runtime {} (version {})\n",
            self.mode,
            self.runtime.path.as_deref().unwrap_or("none"),
            self.runtime
                .version
                .map_or_else(|| "unknown".to_string(), |v| v.to_string()),
        );
        let mut line = |name: &str, c: [String; 5]| {
            out.push_str(&format!(
                "rmcp[{pid}] {name:<24}{:>10}{:>10}{:>10}{:>10}{:>16}\n",
                c[0], c[1], c[2], c[3], c[4]
            ));
        };
        line(
            "function",
            ["calls", "rewritten", "fallbacks", "errors", "bytes"].map(String::from),
        );
        for (_, name) in HOOKS {
            let c = self.calls[name];
            if c.calls > 0 {
                line(
                    name,
                    [c.calls, c.rewritten, c.fallbacks, c.errors, c.bytes].map(|v| v.to_string()),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_on_separate_cache_lines() {
        assert!(std::mem::align_of::<Shard>() >= 128);
        let a = &COUNTERS[0][0] as *const Shard as usize;
        let b = &COUNTERS[0][1] as *const Shard as usize;
        assert!(b - a >= 128);
    }

    #[test]
    fn records_sum_across_threads() {
        // The only test touching hipMallocFromPoolAsync counters.
        let hook = Hook::HipMallocFromPoolAsync;
        let threads: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        record(
                            hook,
                            Outcome {
                                rewritten: i % 2 == 0,
                                fallback: i == 0,
                                error: i == 3,
                                bytes: 10,
                            },
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c = counts(hook);
        assert_eq!(
            c,
            Counts {
                calls: 4000,
                rewritten: 2000,
                fallbacks: 1000,
                errors: 1000,
                bytes: 40000
            }
        );
        let report = Report::new(
            "auto",
            RuntimeReport {
                path: None,
                version: None,
            },
            vec![],
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["calls"]["hipMallocFromPoolAsync"]["calls"], 4000);
        assert!(report.human().contains("hipMallocFromPoolAsync"));
    }
}
