//! What the shim tells about itself: the banner after the first forwarded call
//! (RMCP_LOG=info), the warning about a cross-family HSA_OVERRIDE_GFX_VERSION on the first
//! hooked call (default level), and the report at exit (RMCP_STATS=1 on stderr, RMCP_STATS_FILE as
//! JSON), with the exit and fork hooks that make them. The counters are `stats`'s.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use rmcp_core::classify::is_affected;
use rmcp_core::config::{Config, LogLevel, Mode};
use rmcp_core::registry::HOOKS;
use rmcp_core::remedy::{OVERRIDE_VARIABLE, cross_family_warning};
use rmcp_core::topology::Topology;

use crate::binding::Binding;
use crate::copies::{self, Copy};
use crate::log::{InPlace, Placed};
use crate::state::{self, Global, global_if_built};
use crate::stats::{self, Counts, counts};

/// A runtime copy calls reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct RuntimeReport {
    /// The name the loader has for it (as it was opened).
    pub(crate) path: Option<String>,
    /// The file it is, symbolic links resolved.
    pub(crate) file: Option<String>,
    pub(crate) version: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct DeviceReport {
    pub(crate) ordinal: i32,
    pub(crate) gfx: String,
    pub(crate) pci: String,
    pub(crate) affected: bool,
}

/// The JSON summary (RMCP_STATS_FILE); docs/cli.md documents it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) rmcp: &'static str,
    pub(crate) pid: u32,
    pub(crate) mode: &'static str,
    /// The first runtime copy calls reached.
    pub(crate) runtime: RuntimeReport,
    /// Every runtime copy calls reached, in the order they were first reached.
    pub(crate) runtimes: Vec<RuntimeReport>,
    /// The first copy's devices, if they were listed.
    pub(crate) devices: Vec<DeviceReport>,
    pub(crate) calls: BTreeMap<&'static str, Counts>,
    /// Loaded objects whose hooked imports are bound past the shim (RTLD_DEEPBIND).
    pub(crate) not_reached: Vec<NotReached>,
    /// GPU faults this process had (`fault`), in order.
    pub(crate) faults: Vec<serde_json::Value>,
    /// What the load-time fix saw and did (`module_load`).
    pub(crate) buffer_descriptors: stats::ImageCounts,
    /// What the in-place fixes under an override did (`module_load`).
    pub(crate) override_fixes: stats::OverrideCounts,
}

/// A loaded object whose calls of hooked functions do not reach the shim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct NotReached {
    pub(crate) object: String,
    pub(crate) functions: Vec<&'static str>,
    pub(crate) reason: String,
}

impl Report {
    pub(crate) fn new(
        mode: &'static str,
        runtimes: Vec<RuntimeReport>,
        devices: Vec<DeviceReport>,
    ) -> Report {
        Report {
            rmcp: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            mode,
            runtime: runtimes.first().cloned().unwrap_or(RuntimeReport {
                path: None,
                file: None,
                version: None,
            }),
            runtimes,
            devices,
            calls: HOOKS.iter().map(|(h, name)| (*name, counts(*h))).collect(),
            not_reached: Vec::new(),
            faults: FAULTS.lock().map(|f| f.clone()).unwrap_or_default(),
            buffer_descriptors: stats::image_counts(),
            override_fixes: stats::override_counts(),
        }
    }

    /// The summary for RMCP_STATS=1: a header, then one line per hook that was called.
    pub(crate) fn human(&self) -> String {
        let pid = self.pid;
        let mut out = String::new();
        let version = |r: &RuntimeReport| {
            r.version
                .map_or_else(|| "unknown".to_string(), |v| v.to_string())
        };
        if self.runtimes.len() > 1 {
            out.push_str(&format!("rmcp[{pid}] stats: mode {}\n", self.mode));
            for r in &self.runtimes {
                out.push_str(&format!(
                    "rmcp[{pid}] runtime {}{} (version {})\n",
                    r.path.as_deref().unwrap_or("none"),
                    file_note(r),
                    version(r)
                ));
            }
        } else {
            out.push_str(&format!(
                "rmcp[{pid}] stats: mode {}, runtime {}{} (version {})\n",
                self.mode,
                self.runtime.path.as_deref().unwrap_or("none"),
                file_note(&self.runtime),
                version(&self.runtime),
            ));
        }
        // Each column keeps at least one space before it, so that counts of any length
        // never run together (issue 30); the widths are those of counts that fit.
        let mut line = |name: &str, c: [String; 7]| {
            out.push_str(&format!(
                "rmcp[{pid}] {name:<27} {:>7} {:>9} {:>9} {:>7} {:>13} {:>8} {:>13}\n",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6]
            ));
        };
        line(
            "function",
            [
                "calls",
                "rewritten",
                "fallbacks",
                "errors",
                "bytes",
                "coherent",
                "host_location",
            ]
            .map(String::from),
        );
        for (_, name) in HOOKS {
            let c = self.calls[name];
            if c.calls > 0 {
                line(
                    name,
                    [
                        c.calls,
                        c.rewritten,
                        c.fallbacks,
                        c.errors,
                        c.bytes,
                        c.coherent,
                        c.host_location,
                    ]
                    .map(|v| v.to_string()),
                );
            }
        }
        let b = self.buffer_descriptors;
        if b.scanned > 0 {
            out.push_str(&format!(
                "rmcp[{pid}] code objects loaded: {} scanned, {} unreadable, {} with broken \
                 buffer descriptors, {} fixed ({} instructions), {} warned, {} fallbacks\n",
                b.scanned,
                b.unreadable,
                b.broken,
                b.fixed,
                b.instructions_fixed,
                b.warned,
                b.fallbacks
            ));
        }
        let o = self.override_fixes;
        if o.fixed + o.warned + o.fat_binaries + o.fat_binaries_left > 0 {
            out.push_str(&format!(
                "rmcp[{pid}] gfx103x code under HSA_OVERRIDE_GFX_VERSION: {} code objects \
                 fixed in place ({} instructions became s_nop 0), {} warned; {} fat binaries \
                 registered were read, {} left as they were\n",
                o.fixed, o.instructions_fixed, o.warned, o.fat_binaries, o.fat_binaries_left
            ));
        }
        for n in &self.not_reached {
            out.push_str(&format!(
                "rmcp[{pid}] not reached: {}: {} ({})\n",
                n.object,
                n.functions.join(", "),
                n.reason
            ));
        }
        out
    }
}

/// ` (file PATH)` when the name a copy was opened by is not the file it is.
fn file_note(r: &RuntimeReport) -> String {
    match (&r.path, &r.file) {
        (Some(p), Some(f)) if p != f => format!(" (file {f})"),
        _ => String::new(),
    }
}

fn runtime_report(c: &Copy) -> RuntimeReport {
    RuntimeReport {
        path: Some(c.name.clone()),
        file: Some(c.path.clone()),
        version: c.version_if_known(),
    }
}

fn device_reports(c: Option<&Copy>) -> Vec<DeviceReport> {
    c.map_or(&[][..], Copy::devices_if_listed)
        .iter()
        .map(|d| DeviceReport {
            ordinal: d.ordinal,
            gfx: d.gfx.to_string(),
            pci: d.pci.map_or_else(|| "unknown".into(), |p| p.to_string()),
            affected: d.affected,
        })
        .collect()
}

fn report(g: &Global) -> Report {
    let mut r = Report::new(
        g.config.mode.as_str(),
        copies::all().map(runtime_report).collect(),
        device_reports(copies::all().next()),
    );
    r.not_reached = crate::binding::unreached()
        .into_iter()
        .map(|u| NotReached {
            object: u.object,
            functions: u.functions,
            reason: u.reason,
        })
        .collect();
    r
}

/// The banner or the stats report will want the version and the devices.
fn wants_details(g: &Global) -> bool {
    g.config.stats || g.config.stats_file.is_some() || tracing::enabled!(tracing::Level::INFO)
}

/// Called after each forwarded call: the first time a runtime copy is reached, if the
/// banner or the stats report want them, has its version and devices asked and logs the
/// banner for it.
#[inline(always)]
pub(crate) fn after_call(g: &'static Global, b: &Binding) {
    if let Some(c) = b.copy {
        announce(g, c);
    }
}

/// [`after_call`] for copy `c`.
#[inline(always)]
pub(crate) fn announce(g: &'static Global, c: &'static Copy) {
    if !c.announced.load(Ordering::Relaxed) {
        first_details(g, c);
    }
}

/// How long the first call waits for the details thread ([`ask_elsewhere`]) before it
/// returns to the program; the thread then logs the banner when it has the answers.
const DETAILS_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

#[cold]
fn first_details(g: &'static Global, c: &'static Copy) {
    let _no_cancel = crate::cancel::NoCancel::new();
    if c.announced.swap(true, Ordering::Relaxed) || !wants_details(g) {
        return;
    }
    if !ask_elsewhere(g, c) {
        // No thread could be started: the banner without the answers.
        banner(g, c);
    }
}

/// What the details thread is given: the state, the copy, and the flag it sets when done.
struct Ask {
    g: &'static Global,
    c: &'static Copy,
    done: std::sync::Arc<AtomicBool>,
}

/// Asks `c` for its version and devices on a thread of the shim's own, never on the
/// caller's (issue 30): the runtime keeps per-thread state (the last error that
/// hipGetLastError and hipPeekAtLastError return), which any query of the caller's thread
/// would reset. The thread has every signal blocked (the program's handlers never run on
/// it), logs the banner once it has the answers, and ends. The caller waits for it at most
/// [`DETAILS_PATIENCE`] (a runtime query may take the loader's lock, which the caller may
/// hold). False if no thread could be started.
fn ask_elsewhere(g: &'static Global, c: &'static Copy) -> bool {
    extern "C" fn details(arg: *mut libc::c_void) -> *mut libc::c_void {
        // SAFETY: `arg` is the Box<Ask> leaked by `ask_elsewhere` for this thread alone.
        let ask = unsafe { Box::from_raw(arg.cast::<Ask>()) };
        let (g, c) = (ask.g, ask.c);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _no_cancel = crate::cancel::NoCancel::new();
            c.version();
            if g.config.mode != Mode::Off {
                c.devices(g);
            }
            banner(g, c);
        }));
        ask.done.store(true, Ordering::Release);
        std::ptr::null_mut()
    }
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let arg = Box::into_raw(Box::new(Ask {
        g,
        c,
        done: done.clone(),
    }));
    // SAFETY: the attribute and signal sets are initialised before use and the attribute
    // destroyed after; pthread_create starts `details` with `arg`, which it owns from then
    // on; the caller's mask is restored before returning.
    let started = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut t: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut t, &attr, details, arg.cast());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        rc == 0
    };
    if !started {
        // SAFETY: no thread took `arg`; it is still this function's.
        drop(unsafe { Box::from_raw(arg) });
        return false;
    }
    let start = std::time::Instant::now();
    while !done.load(Ordering::Acquire) && start.elapsed() < DETAILS_PATIENCE {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    true
}

/// The banner for `c`, from what is known of it (nothing is asked here).
fn banner(g: &Global, c: &Copy) {
    let version = c
        .version_if_known()
        .map_or_else(|| "unknown".to_string(), |v| v.to_string());
    let host = match g.classes {
        rmcp_core::classify::Classes::Uniform(v) => v,
        rmcp_core::classify::Classes::Mixed => c.host_affected_if_listed().unwrap_or(false),
    };
    let file = if c.path == c.name {
        String::new()
    } else {
        format!(" (file {})", c.path)
    };
    tracing::info!(
        "mode {}, runtime {}{file}, hipRuntimeGetVersion {version}, coherent host \
         allocations: {}{}; left coherent whatever the mode (counted as coherent): \
         hipHostRegister, Uncached host allocations; hipMemCreate with a host location: \
         unchanged (counted as host_location)",
        g.config.mode.as_str(),
        c.name,
        if g.config.mode == Mode::DryRun {
            if host { "would rewrite" } else { "unchanged" }
        } else if host && g.config.mode != Mode::Off {
            "rewritten"
        } else {
            "unchanged"
        },
        if g.rules.host_coherent {
            " (HIP_HOST_COHERENT is on: requests without a coherence flag are coherent too)"
        } else {
            ""
        },
    );
    for d in c.devices_if_listed() {
        tracing::info!(
            "device {}: {} at {}, {}",
            d.ordinal,
            d.gfx,
            d.pci.map_or_else(|| "unknown".into(), |p| p.to_string()),
            if d.affected {
                "affected"
            } else {
                "not affected"
            }
        );
    }
    static UNREACHED_TOLD: AtomicBool = AtomicBool::new(false);
    if !UNREACHED_TOLD.swap(true, Ordering::Relaxed) {
        for u in crate::binding::unreached() {
            tracing::info!("{}", crate::binding::describe_unreached(&u));
        }
    }
}

/// HSA_OVERRIDE_GFX_VERSION[_<node>] as the process holds it now: read with getenv on
/// the first hooked call, so that a value the program set itself before its first HIP
/// call (as some setup helpers do) is the one seen.
pub(crate) fn override_now(node: u32) -> Option<String> {
    let read = |name: &CStr| -> Option<String> {
        // SAFETY: `name` is NUL-terminated; getenv returns null or a pointer into the
        // environment, copied out at once, before this thread could change it.
        let p = unsafe { libc::getenv(name.as_ptr()) };
        if p.is_null() {
            return None;
        }
        // SAFETY: getenv's non-null result is a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let per_node = CString::new(format!("{OVERRIDE_VARIABLE}_{node}")).ok();
    per_node
        .as_deref()
        .and_then(read)
        .or_else(|| read(c"HSA_OVERRIDE_GFX_VERSION"))
}

/// Once per process, on its first hooked call (the device picture is built then): warns,
/// at the default level, for each affected GPU that HSA_OVERRIDE_GFX_VERSION makes run
/// another family's code. The shim never changes the variable.
fn override_warning(cfg: &Config, topology: Option<&Topology>) {
    let Some(topo) = topology else { return };
    for g in &topo.gpus {
        if !is_affected(g.gfx, &cfg.targets, cfg.mode) {
            continue;
        }
        let Some(value) = override_now(g.node) else {
            continue;
        };
        if let Some(w) = cross_family_warning(g.node, g.gfx, &value) {
            tracing::warn!("{w}");
        }
    }
}

/// The shared state (`state::global_with`), with what building it starts: the exit and
/// fork hooks and the override warning. Every path that builds the state comes here, so
/// whichever builds it first starts them.
#[inline(always)]
pub(crate) fn global() -> &'static Global {
    state::global_with(|g| {
        install_exit_hooks(g.config);
        override_warning(g.config, g.topology.as_ref());
    })
}

static EXIT_HOOKS: AtomicBool = AtomicBool::new(false);

// ---- GPU faults (issue 28) ------------------------------------------------------------------

/// The faults seen so far, as the report's `faults` entries. Locked only when a fault is
/// reported and when a report is made, never on a hooked call.
static FAULTS: std::sync::Mutex<Vec<serde_json::Value>> = std::sync::Mutex::new(Vec::new());

/// A GPU fault was explained (`fault`): its facts join the report, and the RMCP_STATS_FILE
/// report is written now, since the process is about to be ended by the runtime and no exit
/// handler will run.
pub(crate) fn fault_seen(facts: serde_json::Value) {
    if let Ok(mut all) = FAULTS.lock() {
        all.push(facts);
    }
    // The shared state is built if no allocation built it (a process that only launched),
    // without what a first call starts: the process is about to be ended by the runtime.
    if state::global_with(|_| {}).config.stats_file.is_some() {
        write_report();
    }
}

/// A stall was said (`watchdog`): its facts join the report's `faults` (kind `stall`),
/// written at exit as always (the process goes on).
pub(crate) fn stall_seen(facts: serde_json::Value) {
    if let Ok(mut all) = FAULTS.lock() {
        all.push(facts);
    }
}

/// At exit in a process that loaded a library with RTLD_DEEPBIND (the front calls this,
/// through `front::deepbind_seen`, after every earlier exit handler of the body): the
/// report is written now, whether or not a hooked call ever reached the shim, so that what
/// it says about libraries the shim did not reach is not lost.
///
/// The process is exiting: the state is built without what a first call starts (the exit
/// hooks, the override warning), and nothing is done in a fork child whose loader may be
/// inconsistent beyond what needs no loader.
pub(crate) fn deepbind_seen() {
    state::global_with(|_| {});
    crate::binding::note_loaded();
    write_report();
}

fn install_exit_hooks(cfg: &Config) {
    if EXIT_HOOKS.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: both callbacks are `extern "C"` functions of this library, which is never
    // unloaded (it is preloaded, or at worst dlopened and never closed by us).
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        if cfg.stats || cfg.stats_file.is_some() {
            libc::atexit(at_exit);
        }
    }
}

extern "C" fn after_fork_in_child() {
    // The child counts its own calls, and writes its own report.
    stats::reset_after_fork();
    WRITTEN.store(false, Ordering::Release);
    crate::binding::after_fork_in_child();
}

extern "C" fn at_exit() {
    let _no_cancel = crate::cancel::NoCancel::new();
    let _ = std::panic::catch_unwind(write_report);
}

/// `%p` in RMCP_STATS_FILE becomes the process id, so the processes of one job do not
/// overwrite each other's report.
fn stats_path(template: &std::path::Path, pid: u32) -> std::path::PathBuf {
    let s = template.to_string_lossy();
    if s.contains("%p") {
        s.replace("%p", &pid.to_string()).into()
    } else {
        template.to_path_buf()
    }
}

/// The report was written in this process (a fork child writes its own).
static WRITTEN: AtomicBool = AtomicBool::new(false);

/// Writes the exit report, once per process: the exit hook and the RTLD_DEEPBIND exit step
/// may both come here.
fn write_report() {
    let Some(g) = global_if_built() else {
        return;
    };
    if WRITTEN.swap(true, Ordering::AcqRel) {
        return;
    }
    let report = report(g);
    let stderr = crate::log::FdWriter(libc::STDERR_FILENO);
    // Written directly, in the logger's format: at exit the logger's thread-local state may
    // already be destroyed, and that must not cost the report.
    let say = |line: &str| {
        let _ = std::io::Write::write_all(&mut stderr.clone(), line.as_bytes());
    };
    if g.config.stats {
        say(&report.human());
    }
    let Some(template) = &g.config.stats_file else {
        return;
    };
    let path = stats_path(template, report.pid);
    let json = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    let level = g.config.log;
    let pid = report.pid;
    match crate::log::place_report(&path, json.as_bytes(), is_report) {
        Ok(Placed::Replaced(replaced)) => {
            let line = replaced.and_then(|r| replaced_warning(&r, pid, &path));
            if let (Some(line), true) = (line, level >= LogLevel::Warn) {
                say(&line);
            }
        }
        Ok(Placed::InPlace(why)) => {
            // A file rmcp did not create, appended to: a warning. A device, a pipe or the
            // program's own output named on purpose (/dev/stdout): said at info.
            let at = if why == InPlace::NotAReport {
                LogLevel::Warn
            } else {
                LogLevel::Info
            };
            if level >= at {
                say(&format!(
                    "rmcp[{pid}] {}: RMCP_STATS_FILE {}: {}\n",
                    if at == LogLevel::Warn { "warn" } else { "info" },
                    path.display(),
                    why.describe()
                ));
            }
        }
        Err(e) => {
            if level >= LogLevel::Warn {
                say(&format!(
                    "rmcp[{pid}] warn: RMCP_STATS_FILE {}: {e}; writing the report to stderr \
                     instead\n",
                    path.display()
                ));
            }
            say(&json);
        }
    }
}

/// Whether `bytes` are an rmcp report (a file rmcp created, which a later report may
/// replace): a JSON object with an `rmcp` version and a `pid`.
fn is_report(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .is_ok_and(|v| v["rmcp"].is_string() && v["pid"].is_u64())
}

/// The warning for a report that replaced another process's (issue 22): when the file it
/// replaced was written while this process ran (a process of the same job, exiting
/// alongside), its report is lost unless someone says so. An older file (a previous run's)
/// is replaced without a word, as any output file is. None when nothing needs saying.
fn replaced_warning(
    replaced: &crate::log::Replaced,
    pid: u32,
    path: &std::path::Path,
) -> Option<String> {
    let other = serde_json::from_slice::<serde_json::Value>(&replaced.data)
        .ok()
        .and_then(|v| v["pid"].as_u64());
    if other == Some(u64::from(pid)) {
        return None;
    }
    let during = match (replaced.modified, process_start()) {
        (Some(m), Some(start)) => m >= start,
        _ => true,
    };
    if !during {
        return None;
    }
    let whose = other.map_or_else(
        || "a file that was not a whole report".to_string(),
        |p| format!("the report of process {p}"),
    );
    Some(format!(
        "rmcp[{pid}] warn: RMCP_STATS_FILE {}: this report replaced {whose}, written while \
         this process ran; put %p in the name (it becomes the process id) to keep one \
         report per process\n",
        path.display()
    ))
}

/// When this process started (to the second, rounded down): /proc/self/stat's start time
/// after boot and /proc/stat's boot time.
fn process_start() -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces) start at state, field 3;
    // starttime is field 22.
    let after = &stat[stat.rfind(')')? + 2..];
    let ticks: u64 = after.split(' ').nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    (hz > 0).then(|| std::time::UNIX_EPOCH + std::time::Duration::from_secs(boot + ticks / hz))
}

/// The counters of this process as the JSON report (the RMCP_STATS_FILE schema), for
/// `rmcp_shim_stats` (`exports`): as much as fits is written to `out`, and the full length
/// is returned, so a caller whose buffer was short can ask again with one as long. The
/// report is the exit report's, with its allocations and no more: it is serialized straight
/// into `out`, without an intermediate string. Before the process's first hooked call the
/// state is built as that call would build it (configuration and topology, no HIP call).
pub(crate) fn stats_json(out: &mut [u8]) -> usize {
    /// Copies what fits into the buffer and counts everything.
    struct Clipped<'a> {
        out: &'a mut [u8],
        len: usize,
    }
    impl std::io::Write for Clipped<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if let Some(room) = self.out.len().checked_sub(self.len) {
                let n = room.min(bytes.len());
                self.out[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            }
            self.len += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let report = report(global());
    let mut w = Clipped { out, len: 0 };
    match serde_json::to_writer(&mut w, &report) {
        Ok(()) => w.len,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_json_reports_the_full_length_and_fills_what_fits() {
        let mut big = vec![0u8; 1 << 16];
        let n = stats_json(&mut big);
        assert!(n > 0 && n < big.len(), "{n}");
        let json: serde_json::Value = serde_json::from_slice(&big[..n]).unwrap();
        assert_eq!(json["pid"], std::process::id());
        assert!(json["calls"]["hipHostMalloc"]["calls"].is_u64(), "{json}");
        let mut small = vec![0u8; 10];
        // Other tests of this process record calls and faults while this one runs, and the
        // report's length moves with them: each reading is compared with a whole report made
        // just before it, until two agree (a report that never tells its length fails).
        let mut agrees = |buf: &mut [u8]| {
            (0..1000).any(|_| {
                let whole = stats_json(&mut big);
                stats_json(buf) == whole && buf[..] == big[..buf.len()]
            })
        };
        assert!(agrees(&mut small), "a 10-byte buffer");
        assert!(agrees(&mut []), "an empty buffer");
    }

    #[test]
    fn the_summary_names_each_copy_and_its_file() {
        let copy = |name: &str, file: &str, v| RuntimeReport {
            path: Some(name.into()),
            file: Some(file.into()),
            version: Some(v),
        };
        let one = Report::new(
            "dry-run",
            vec![copy(
                "/l/libamdhip64.so.7",
                "/l/libamdhip64.so.7.2.53211",
                70253211,
            )],
            vec![],
        );
        let head = one.human().lines().next().unwrap().to_string();
        assert!(
            head.ends_with(
                "stats: mode dry-run, runtime /l/libamdhip64.so.7 (file \
                 /l/libamdhip64.so.7.2.53211) (version 70253211)"
            ),
            "{head}"
        );
        let two = Report::new(
            "force",
            vec![
                copy(
                    "/l/libamdhip64.so.6",
                    "/l/libamdhip64.so.6.4.43484",
                    60443484,
                ),
                copy("/l/libamdhip64.so.7", "/l/libamdhip64.so.7", 70253211),
            ],
            vec![],
        );
        let text = two.human();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with("stats: mode force"), "{text}");
        assert!(
            lines[1].ends_with(
                "runtime /l/libamdhip64.so.6 (file /l/libamdhip64.so.6.4.43484) (version 60443484)"
            ),
            "{text}"
        );
        assert!(
            lines[2].ends_with("runtime /l/libamdhip64.so.7 (version 70253211)"),
            "{text}"
        );
        assert!(lines[3].contains("coherent") && lines[3].contains("host_location"));
        let json = serde_json::to_value(&two).unwrap();
        assert_eq!(json["runtimes"][0]["file"], "/l/libamdhip64.so.6.4.43484");
        assert_eq!(json["runtime"]["path"], "/l/libamdhip64.so.6");
    }

    #[test]
    fn a_report_replaced_is_named_when_written_while_this_process_ran() {
        use crate::log::Replaced;
        let path = std::path::Path::new("/t/x.json");
        let now = Some(std::time::SystemTime::now());
        let other = |pid: u32, modified| Replaced {
            data: format!("{{\"pid\": {pid}}}").into_bytes(),
            modified,
        };
        let line = replaced_warning(&other(77, now), 42, path).unwrap();
        assert!(
            line.starts_with(
                "rmcp[42] warn: RMCP_STATS_FILE /t/x.json: this report replaced \
                 the report of process 77"
            ),
            "{line}"
        );
        assert_eq!(replaced_warning(&other(42, now), 42, path), None, "its own");
        let old = Some(std::time::UNIX_EPOCH);
        assert_eq!(
            replaced_warning(&other(77, old), 42, path),
            None,
            "a previous run's"
        );
        let torn = Replaced {
            data: b"{\"pid\": 7".to_vec(),
            modified: now,
        };
        assert!(
            replaced_warning(&torn, 42, path)
                .unwrap()
                .contains("a file that was not a whole report")
        );
        let start = process_start().expect("/proc is there");
        assert!(start <= std::time::SystemTime::now());
    }

    #[test]
    fn the_summary_columns_never_run_together() {
        let mut r = Report::new("auto", vec![], vec![]);
        let huge = u64::MAX; // 20 digits
        r.calls.insert(
            "hipMalloc",
            Counts {
                calls: huge,
                rewritten: huge,
                fallbacks: huge,
                errors: huge,
                bytes: huge,
                coherent: huge,
                host_location: huge,
            },
        );
        let text = r.human();
        let row = text.lines().find(|l| l.contains(" hipMalloc ")).unwrap();
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields.len(), 9, "{row}");
        assert!(fields[2..].iter().all(|f| *f == huge.to_string()), "{row}");
        // Counts that fit keep the columns where they were.
        let header = text.lines().nth(1).unwrap();
        assert!(
            header.ends_with(
                "function                      calls rewritten fallbacks  errors         bytes \
                 coherent host_location"
            ),
            "{header}"
        );
    }

    #[test]
    fn the_report_shows_what_was_counted() {
        let hook = rmcp_core::registry::Hook::HipMemAllocHost;
        crate::thread::with(|t| {
            let slot = stats::slot(t);
            stats::record(slot, hook, stats::Outcome::default());
        });
        let report = Report::new("auto", vec![], vec![]);
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["calls"]["hipMemAllocHost"]["calls"].as_u64().unwrap() >= 1);
        assert!(report.human().contains("hipMemAllocHost"));
    }

    #[test]
    fn stats_path_substitutes_pid() {
        use std::path::Path;
        assert_eq!(
            stats_path(Path::new("/t/s-%p.json"), 42),
            Path::new("/t/s-42.json")
        );
        assert_eq!(
            stats_path(Path::new("/t/s.json"), 42),
            Path::new("/t/s.json")
        );
    }
}
