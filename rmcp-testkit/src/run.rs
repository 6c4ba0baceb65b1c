//! Running a test program (the probe, a C client) with a clean environment: the fake
//! runtime on the library path, recording every call, and the shim preloaded on a KFD
//! fixture; then reading back what it printed, what the runtime received and the shim's
//! stats ([`Run`], [`Out`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::artifacts::{dlopen_client, fake_dir, framework, probe};
use crate::locate::{fixture, shim};
use crate::record::{ALLOCATORS, Rec, parse_record};

/// What a run produced.
#[derive(Debug)]
pub struct Out {
    /// The program's exit status.
    pub status: std::process::ExitStatus,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr (the shim's log goes here by default).
    pub stderr: String,
    /// What the fake runtime received (FAKEHIP_RECORD), in order.
    pub record: Vec<Rec>,
    /// The shim's stats report (RMCP_STATS_FILE), if it wrote one.
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

    /// How many calls of `func` the runtime received.
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

    /// The stats report's `calls.<func>.<field>`; panics when absent.
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

    /// Panics, showing the output, unless the program exited 0.
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
    /// The command, for what the builder methods do not cover.
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

    /// The run's scratch directory (record, stats), kept in the [`Out`].
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sets an environment variable.
    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Run {
        self.cmd.env(k, v);
        self
    }

    /// Removes an environment variable.
    pub fn env_remove(mut self, k: &str) -> Run {
        self.cmd.env_remove(k);
        self
    }

    /// Without the shim (no LD_PRELOAD).
    pub fn no_shim(self) -> Run {
        self.env_remove("LD_PRELOAD")
    }

    /// RMCP_MODE.
    pub fn mode(self, m: &str) -> Run {
        self.env("RMCP_MODE", m)
    }

    /// The KFD fixture the shim reads (RMCP_SYSFS_ROOT).
    pub fn fixture(self, name: &str) -> Run {
        self.env("RMCP_SYSFS_ROOT", fixture(name))
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Runs the program to completion and collects what it produced.
    pub fn run(mut self) -> Out {
        let o = self.cmd.output().expect("spawn test program");
        self.collect(o)
    }

    /// Like [`Run::run`], in a process group of its own with stdin from /dev/null; if it
    /// has not exited after `limit`, the group is killed and the test fails (a hang).
    pub fn run_within(mut self, limit: std::time::Duration) -> Out {
        let o = crate::bounded::output_within(&mut self.cmd, limit)
            .unwrap_or_else(|e| panic!("{e}: {:?}", self.cmd));
        self.collect(o)
    }

    fn collect(self, o: std::process::Output) -> Out {
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
