//! Test support: run the probe programs against the fake runtime (or the real one) with
//! and without the shim, and read back what the runtime received.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Directory holding the C test programs build.rs made.
pub fn fake_dir(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_FAKE_HIP_DIR_5"),
        6 => env!("RMCP_FAKE_HIP_DIR_6"),
        7 => env!("RMCP_FAKE_HIP_DIR_7"),
        _ => panic!("no fake runtime .so.{major}"),
    })
}

pub fn probe(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_HIP_PROBE_5"),
        6 => env!("RMCP_HIP_PROBE_6"),
        _ => panic!("no probe for .so.{major}"),
    })
}

pub fn framework(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_FRAMEWORK_5"),
        6 => env!("RMCP_FRAMEWORK_6"),
        _ => panic!("no framework for .so.{major}"),
    })
}

pub fn dlopen_client() -> PathBuf {
    PathBuf::from(env!("RMCP_DLOPEN_CLIENT"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

/// The shim under test: RMCP_TEST_SHIM, else the one cargo built alongside these tests.
pub fn shim() -> PathBuf {
    if let Some(p) = std::env::var_os("RMCP_TEST_SHIM") {
        return PathBuf::from(p);
    }
    // target/<profile>/rmcp -> target/<profile>/deps/librmcp_shim.so is rebuilt with every
    // `cargo test`; the uplifted target/<profile>/librmcp_shim.so only by `cargo build`.
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rmcp"));
    let dir = bin.parent().unwrap();
    for p in [
        dir.join("deps/librmcp_shim.so"),
        dir.join("librmcp_shim.so"),
    ] {
        if p.exists() {
            return p;
        }
    }
    panic!("librmcp_shim.so not found next to {}", bin.display());
}

/// One line of the fake runtime's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub func: String,
    pub size: u64,
    pub flags: u32,
    pub rc: i32,
    pub caller: String,
    pub lib: String,
    pub symbol: Option<String>,
}

pub fn parse_record(text: &str) -> Vec<Rec> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut it = line.split(' ');
            let func = it.next().unwrap().to_string();
            let kv: BTreeMap<&str, &str> = it.filter_map(|t| t.split_once('=')).collect();
            Rec {
                func,
                size: kv["size"].parse().unwrap(),
                flags: u32::from_str_radix(kv["flags"].trim_start_matches("0x"), 16).unwrap(),
                rc: kv["rc"].parse().unwrap(),
                caller: kv["caller"].to_string(),
                lib: kv["lib"].to_string(),
                symbol: kv.get("symbol").map(|s| s.to_string()),
            }
        })
        .collect()
}

/// Functions that allocate (what the tests assert on); queries and frees are left out.
pub const ALLOCATORS: &[&str] = &[
    "hipMalloc",
    "hipExtMallocWithFlags",
    "hipHostMalloc",
    "hipHostAlloc",
    "hipMallocHost",
    "hipMemAllocHost",
    "hipMallocManaged",
    "hipHostRegister",
    "hipMallocAsync",
    "hipMallocFromPoolAsync",
];

/// What a run produced.
#[derive(Debug)]
pub struct Out {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub record: Vec<Rec>,
    pub stats: Option<serde_json::Value>,
    /// The run's scratch directory, kept until the output is dropped.
    pub dir: tempfile::TempDir,
}

impl Out {
    /// Record lines of allocation functions, as (function, flags).
    pub fn allocs(&self) -> Vec<(String, u32)> {
        self.record
            .iter()
            .filter(|r| ALLOCATORS.contains(&r.func.as_str()))
            .map(|r| (r.func.clone(), r.flags))
            .collect()
    }

    pub fn count(&self, func: &str) -> usize {
        self.record.iter().filter(|r| r.func == func).count()
    }

    /// The probe's result lines (`FUNC size=.. flags=.. rc=.. ptr=..`), without hostflags.
    pub fn results(&self) -> Vec<String> {
        self.stdout
            .lines()
            .map(|l| l.split(" hostflags=").next().unwrap().to_string())
            .collect()
    }

    pub fn stat(&self, func: &str, field: &str) -> u64 {
        let s = self.stats.as_ref().expect("no stats file written");
        s["calls"][func][field]
            .as_u64()
            .unwrap_or_else(|| panic!("stats has no calls.{func}.{field}: {s}"))
    }

    /// The libamdhip64 files mapped in the process, from the probe's `maps` step.
    pub fn maps(&self) -> Vec<String> {
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("maps "))
            .filter(|l| !l.starts_with("count="))
            .map(str::to_string)
            .collect()
    }

    /// Lines of stderr containing `needle`.
    pub fn stderr_lines(&self, needle: &str) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.contains(needle)).collect()
    }

    pub fn assert_success(&self) -> &Self {
        assert!(
            self.status.success(),
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A configured run of a test program.
pub struct Run {
    pub cmd: Command,
    dir: tempfile::TempDir,
    record: PathBuf,
    stats: PathBuf,
}

impl Run {
    /// `program args...` with a clean environment: the fake runtime `.so.<major>` on the
    /// library path, recording; the shim preloaded (auto mode) on the rdna1 fixture.
    pub fn new(major: u8, program: &Path) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record");
        let stats = dir.path().join("stats.json");
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LD_LIBRARY_PATH", fake_dir(major))
            .env("LD_PRELOAD", shim())
            .env("FAKEHIP_RECORD", &record)
            .env("RMCP_SYSFS_ROOT", fixture("rdna1"))
            .env("RMCP_STATS_FILE", &stats);
        Run {
            cmd,
            dir,
            record,
            stats,
        }
    }

    /// The probe linked to `.so.<major>`.
    pub fn probe(major: u8) -> Run {
        Run::new(major, &probe(major))
    }

    /// The framework library loaded RTLD_LOCAL by dlopen_client (Python-extension shape).
    pub fn framework(major: u8) -> Run {
        let mut r = Run::new(major, &dlopen_client());
        r.cmd.arg(framework(major));
        r
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Run {
        self.cmd.env(k, v);
        self
    }

    pub fn env_remove(mut self, k: &str) -> Run {
        self.cmd.env_remove(k);
        self
    }

    pub fn no_shim(self) -> Run {
        self.env_remove("LD_PRELOAD")
    }

    pub fn mode(self, m: &str) -> Run {
        self.env("RMCP_MODE", m)
    }

    pub fn fixture(self, name: &str) -> Run {
        self.env("RMCP_SYSFS_ROOT", fixture(name))
    }

    pub fn args<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn run(mut self) -> Out {
        let o = self.cmd.output().expect("spawn test program");
        let record = std::fs::read_to_string(&self.record).unwrap_or_default();
        let stats = std::fs::read_to_string(&self.stats)
            .ok()
            .map(|t| serde_json::from_str(&t).unwrap_or_else(|e| panic!("stats JSON: {e}\n{t}")));
        Out {
            status: o.status,
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            record: parse_record(&record),
            stats,
            dir: self.dir,
        }
    }
}

/// Debian's real runtime (ROCm 5.2.3), if installed. With RMCP_REQUIRE_REAL_HIP=1 its
/// absence fails the test instead of skipping it.
pub fn real_runtime() -> Option<PathBuf> {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5",
        "/opt/rocm/lib/libamdhip64.so.5",
    ];
    let found = candidates.iter().map(PathBuf::from).find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var("RMCP_REQUIRE_REAL_HIP").as_deref() != Ok("1"),
            "RMCP_REQUIRE_REAL_HIP=1 but no real libamdhip64.so.5 is installed \
             (apt-get install libamdhip64-dev)"
        );
        eprintln!("skipped: no real libamdhip64.so.5 installed");
    }
    found
}

/// An executable on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.exists())
    })
}

/// python3, for the ctypes loading shape. Missing: a skip, but a failure in CI.
pub fn python3() -> Option<PathBuf> {
    let found = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| which("python3"));
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is required in CI"
        );
        eprintln!("skipped: no python3");
    }
    found
}

/// `python3 -c CTYPES_PROBE FRAMEWORK STEP...`: loads the framework library with ctypes
/// (RTLD_LOCAL, as CPython loads extension modules) and calls its probe_main.
pub const CTYPES_PROBE: &str = r#"
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
args = [a.encode() for a in sys.argv[1:]]
argv = (ctypes.c_char_p * len(args))(*args)
sys.stdout.flush()
sys.exit(lib.probe_main(len(args), argv))
"#;
