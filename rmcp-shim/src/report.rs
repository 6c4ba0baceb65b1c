//! What the shim tells about itself: the banner after the first forwarded call
//! (RMCP_LOG=info), and the report at exit (RMCP_STATS=1 on stderr, RMCP_STATS_FILE as
//! JSON), with the exit and fork hooks that make them. The counters are `stats`'s.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use rmcp_core::config::{Config, Mode};
use rmcp_core::registry::HOOKS;

use crate::state::{Shim, shim_if_built};
use crate::stats::{self, Counts, counts};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct RuntimeReport {
    pub(crate) path: Option<String>,
    pub(crate) version: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct DeviceReport {
    pub(crate) ordinal: i32,
    pub(crate) gfx: String,
    pub(crate) pci: String,
    pub(crate) affected: bool,
}

/// The JSON summary (RMCP_STATS_FILE); the README documents it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) rmcp: &'static str,
    pub(crate) pid: u32,
    pub(crate) mode: &'static str,
    pub(crate) runtime: RuntimeReport,
    pub(crate) devices: Vec<DeviceReport>,
    pub(crate) calls: BTreeMap<&'static str, Counts>,
}

impl Report {
    pub(crate) fn new(
        mode: &'static str,
        runtime: RuntimeReport,
        devices: Vec<DeviceReport>,
    ) -> Report {
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
    pub(crate) fn human(&self) -> String {
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

impl Shim {
    fn report(&self) -> Report {
        Report::new(
            self.config.mode.as_str(),
            RuntimeReport {
                path: self.runtime.map(|rt| rt.path.clone()),
                version: self.version_if_known(),
            },
            self.devices_if_listed()
                .iter()
                .map(|d| DeviceReport {
                    ordinal: d.ordinal,
                    gfx: d.gfx.to_string(),
                    pci: d.pci.map_or_else(|| "unknown".into(), |p| p.to_string()),
                    affected: d.affected,
                })
                .collect(),
        )
    }

    /// The banner or the stats report will want the version and the devices.
    fn wants_details(&self) -> bool {
        self.config.stats
            || self.config.stats_file.is_some()
            || tracing::enabled!(tracing::Level::INFO)
    }
}

static DETAILS: AtomicBool = AtomicBool::new(false);

/// Called after each forwarded call: the first time, if the banner or the stats report
/// want them, asks the runtime for its version and devices and logs the banner.
#[inline(always)]
pub(crate) fn after_call(shim: &Shim) {
    if !DETAILS.load(Ordering::Relaxed) {
        first_details(shim);
    }
}

#[cold]
fn first_details(shim: &Shim) {
    if DETAILS.swap(true, Ordering::Relaxed) || !shim.wants_details() {
        return;
    }
    shim.version();
    if shim.config.mode != Mode::Off {
        shim.devices();
    }
    banner(shim);
}

fn banner(shim: &Shim) {
    let rt = shim.runtime.map_or_else(
        || "none".to_string(),
        |rt| format!("{} ({})", rt.path, rt.source.as_str()),
    );
    let version = shim
        .version()
        .map_or_else(|| "unknown".to_string(), |v| v.to_string());
    tracing::info!(
        "mode {}, runtime {rt}, hipRuntimeGetVersion {version}, host allocations {}",
        shim.config.mode.as_str(),
        if shim.host_affected {
            "rewritten"
        } else {
            "unchanged"
        },
    );
    for d in shim.devices_if_listed() {
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
}

static EXIT_HOOKS: AtomicBool = AtomicBool::new(false);

pub(crate) fn install_exit_hooks(cfg: &Config) {
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
    // The child counts its own calls.
    stats::reset_after_fork();
}

extern "C" fn at_exit() {
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

fn write_report() {
    let Some(shim) = shim_if_built() else {
        return;
    };
    let report = shim.report();
    let stderr = crate::log::FdWriter(libc::STDERR_FILENO);
    if shim.config.stats {
        let _ = std::io::Write::write_all(&mut stderr.clone(), report.human().as_bytes());
    }
    if let Some(template) = &shim.config.stats_file {
        let path = stats_path(template, report.pid);
        let json = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
        if let Err(e) = std::fs::write(&path, &json) {
            tracing::warn!(
                "RMCP_STATS_FILE {}: {e}; writing the report to stderr instead",
                path.display()
            );
            let _ = std::io::Write::write_all(&mut stderr.clone(), json.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
