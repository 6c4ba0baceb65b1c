//! `rmcp run`: find the shim, put it first in LD_PRELOAD, set the RMCP_* variables the
//! options ask for, and exec the command (no fork, no shell), so that its exit status and
//! signals are its own.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::preload::{self, SHIM_NAME};
use crate::{FinegrainedArg, LogArg, ModeArg, RunArgs};

/// Exit statuses, as env(1) uses them.
pub const EXIT_CANNOT_RUN: u8 = 126;
pub const EXIT_NOT_FOUND: u8 = 127;
/// rmcp itself could not do its part (env(1) uses 125 for that).
pub const EXIT_FAILED: u8 = 125;

/// Where the shim was looked for, in order, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimSearch {
    /// (place, path) pairs tried, in order.
    pub tried: Vec<(String, PathBuf)>,
    /// The first that exists (explicit settings are never skipped past).
    pub found: Option<PathBuf>,
}

impl ShimSearch {
    /// "--shim /x (missing); next to rmcp: /a/librmcp_shim.so (missing); ..."
    pub fn describe_tried(&self) -> String {
        self.tried
            .iter()
            .map(|(what, p)| format!("{what}: {}", p.display()))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Finds the shim: `explicit` (--shim), else `RMCP_SHIM`, else next to the rmcp executable,
/// else `../lib/` relative to it. An explicit path or RMCP_SHIM that does not exist is a
/// failure: rmcp never silently falls back past what the user named.
pub fn locate_shim(
    explicit: Option<&Path>,
    env_shim: Option<&OsStr>,
    exe: Option<&Path>,
) -> ShimSearch {
    let mut tried = Vec::new();
    if let Some(p) = explicit {
        tried.push(("--shim".to_string(), p.to_path_buf()));
        let found = p.is_file().then(|| p.to_path_buf());
        return ShimSearch { tried, found };
    }
    if let Some(v) = env_shim.filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        tried.push(("RMCP_SHIM".to_string(), p.clone()));
        let found = p.is_file().then_some(p);
        return ShimSearch { tried, found };
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        for (what, p) in [
            ("next to rmcp", dir.join(SHIM_NAME)),
            ("../lib of rmcp", dir.join("..").join("lib").join(SHIM_NAME)),
        ] {
            tried.push((what.to_string(), p.clone()));
            if p.is_file() {
                return ShimSearch {
                    tried,
                    found: Some(p),
                };
            }
        }
    }
    ShimSearch { tried, found: None }
}

/// The shim as the current environment and executable would find it (for doctor).
pub fn locate_shim_from_env() -> ShimSearch {
    let exe = std::env::current_exe().ok();
    locate_shim(
        None,
        std::env::var_os("RMCP_SHIM").as_deref(),
        exe.as_deref(),
    )
}

fn mode_value(m: ModeArg) -> &'static str {
    match m {
        ModeArg::Auto => "auto",
        ModeArg::Force => "force",
        ModeArg::DryRun => "dry-run",
        ModeArg::Off => "off",
    }
}

fn log_value(l: LogArg) -> &'static str {
    match l {
        LogArg::Off => "off",
        LogArg::Error => "error",
        LogArg::Warn => "warn",
        LogArg::Info => "info",
        LogArg::Debug => "debug",
        LogArg::Trace => "trace",
    }
}

/// The RMCP_* variables the options set (only those given; the rest of the environment is
/// passed through as it is).
pub fn option_env(args: &RunArgs) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = Vec::new();
    let mode = if args.dry_run {
        Some(ModeArg::DryRun)
    } else {
        args.mode
    };
    if let Some(m) = mode {
        env.push(("RMCP_MODE", mode_value(m).into()));
    }
    if let Some(l) = args.log {
        env.push(("RMCP_LOG", log_value(l).into()));
    }
    if let Some(p) = &args.log_file {
        env.push(("RMCP_LOG_FILE", p.clone().into_os_string()));
    }
    if args.stats {
        env.push(("RMCP_STATS", "1".into()));
    }
    if let Some(p) = &args.stats_file {
        env.push(("RMCP_STATS_FILE", p.clone().into_os_string()));
    }
    if let Some(t) = &args.targets {
        env.push(("RMCP_TARGETS", t.into()));
    }
    if let Some(f) = args.finegrained {
        let v = match f {
            FinegrainedArg::Coarsen => "coarsen",
            FinegrainedArg::Keep => "keep",
        };
        env.push(("RMCP_FINEGRAINED", v.into()));
    }
    if let Some(e) = &args.exempt {
        env.push(("RMCP_EXEMPT", e.into()));
    }
    if let Some(p) = &args.hip_library {
        env.push(("RMCP_HIP_LIBRARY", p.clone().into_os_string()));
    }
    env
}

/// The shim's absolute path, ready for LD_PRELOAD: found as `locate_shim` finds it from
/// `explicit` (--shim), RMCP_SHIM and the rmcp executable. On failure the reason has been
/// printed and the exit status is returned (127 not found, 125 unusable path).
pub(crate) fn shim_for_preload(explicit: Option<&Path>) -> Result<PathBuf, u8> {
    let exe = std::env::current_exe().ok();
    let search = locate_shim(
        explicit,
        std::env::var_os("RMCP_SHIM").as_deref(),
        exe.as_deref(),
    );
    let Some(shim) = search.found.clone() else {
        eprintln!(
            "rmcp: {SHIM_NAME} not found; looked at {}. Give its path with --shim PATH or RMCP_SHIM.",
            search.describe_tried()
        );
        return Err(EXIT_NOT_FOUND);
    };
    // Children of the command may chdir: LD_PRELOAD needs an absolute path.
    let shim = match preload::absolute_entry(&shim) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rmcp: cannot make {} absolute: {e}", shim.display());
            return Err(EXIT_FAILED);
        }
    };
    if !preload::can_carry(&shim) {
        eprintln!(
            "rmcp: the shim's path {:?} contains a colon or a space, which LD_PRELOAD cannot carry; \
             install it elsewhere",
            shim.display()
        );
        return Err(EXIT_FAILED);
    }
    Ok(shim)
}

/// Runs `rmcp run`; returns only when the exec failed (or never happened).
pub fn run(args: RunArgs) -> u8 {
    let shim = match shim_for_preload(args.shim.as_deref()) {
        Ok(p) => p,
        Err(status) => return status,
    };

    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let mut cmd = Command::new(program);
    cmd.args(rest);
    cmd.env(
        "LD_PRELOAD",
        preload::with_shim(&shim, std::env::var_os("LD_PRELOAD").as_deref()),
    );
    for (k, v) in option_env(&args) {
        cmd.env(k, v);
    }
    // exec only returns on failure. std resets SIGPIPE to its default before exec, so the
    // command does not inherit Rust's "ignore SIGPIPE".
    let err = cmd.exec();
    let name = program.to_string_lossy();
    eprintln!("rmcp: {name}: {err}");
    exec_error_status(&err)
}

/// env(1)'s statuses: 127 when the command was not found, 126 when it could not be run.
pub fn exec_error_status(err: &io::Error) -> u8 {
    if err.kind() == io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_RUN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_shim_is_never_skipped() {
        let s = locate_shim(
            Some(Path::new("/nonexistent/x.so")),
            Some(OsStr::new("/bin/sh")),
            Some(Path::new("/bin/rmcp")),
        );
        assert_eq!(s.found, None);
        assert_eq!(s.tried.len(), 1);
        assert!(s.describe_tried().contains("--shim: /nonexistent/x.so"));
        let s = locate_shim(None, Some(OsStr::new("/nonexistent/y.so")), None);
        assert_eq!(s.found, None);
        assert!(s.describe_tried().contains("RMCP_SHIM: /nonexistent/y.so"));
    }

    #[test]
    fn exec_errors_map_like_env() {
        assert_eq!(
            exec_error_status(&io::Error::from(io::ErrorKind::NotFound)),
            127
        );
        assert_eq!(
            exec_error_status(&io::Error::from(io::ErrorKind::PermissionDenied)),
            126
        );
    }
}
