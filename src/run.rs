//! `rmcp run`: find the shim, put it first in LD_PRELOAD, set the RMCP_* variables the
//! options ask for, and exec the command (no fork, no shell), so that its exit status and
//! signals are its own.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::install;
use crate::preload::{self, SHIM_NAME};
use crate::{FinegrainedArg, LogArg, ModeArg, RunArgs};

/// Exit statuses, as env(1) uses them.
pub const EXIT_CANNOT_RUN: u8 = 126;
pub const EXIT_NOT_FOUND: u8 = 127;
/// rmcp itself could not do its part (env(1) uses 125 for that).
pub const EXIT_FAILED: u8 = 125;

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

/// The shim's absolute path, ready for LD_PRELOAD: found by `install::SHIM` from
/// `explicit` (--shim), RMCP_SHIM and the rmcp executable. On failure the reason has been
/// printed and the exit status is returned (127 not found, 125 unusable path).
pub(crate) fn shim_for_preload(explicit: Option<&Path>) -> Result<PathBuf, u8> {
    let search = install::SHIM.search_here(explicit);
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
