//! `rmcp doctor`: one finding per check, each with a status, one plain sentence and, where
//! relevant, the public source behind it. This file is the command (options, exit
//! statuses); the report model is in `report`, the checks in `checks`, the search for
//! HIP runtimes in `runtimes`, the output in `render`. Exit status: 0 when no finding is
//! an error, 1 when one is, 2 when doctor itself failed.

use std::io::Write;
use std::path::PathBuf;

use rmcp_shim::config::Config;

use report::{Report, Roots};

mod checks;
mod render;
mod report;
mod runtimes;

/// The options of `rmcp doctor`.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Print the findings as JSON (schema: docs/cli.md).
    #[arg(long)]
    pub json: bool,
    /// KFD topology root (default: $RMCP_SYSFS_ROOT, else /sys/class/kfd/kfd/topology).
    #[arg(long, value_name = "ROOT")]
    pub sysfs: Option<PathBuf>,
}

/// Exit status when doctor itself failed (a check panicked, the report could not be
/// written). The report decides between 0 and 1 (`report::EXIT_OK`,
/// `report::EXIT_ERROR_FINDING`, `Report::exit_status`).
pub const EXIT_DOCTOR_FAILED: u8 = 2;

fn env_path(name: &str, default: &str) -> PathBuf {
    match std::env::var_os(name) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(default),
    }
}

/// Collects every finding.
pub fn diagnose(args: &DoctorArgs) -> Report {
    let cfg = Config::from_env();
    let roots = Roots {
        sysfs: args.sysfs.clone().unwrap_or_else(|| cfg.sysfs_root.clone()),
        module: env_path("RMCP_MODULE_ROOT", "/sys/module"),
        dev: env_path("RMCP_DEV_ROOT", "/dev"),
    };
    checks::run_all(&roots, &cfg)
}

/// `rmcp doctor`.
pub fn main(args: DoctorArgs) -> u8 {
    // A panic in a check is doctor's own failure (status 2), never a finding.
    let report = match std::panic::catch_unwind(|| diagnose(&args)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("rmcp doctor: internal error (see the message above); this is a bug");
            return EXIT_DOCTOR_FAILED;
        }
    };
    let text = if args.json {
        match serde_json::to_string_pretty(&render::json(&report)) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("rmcp doctor: cannot write JSON: {e}");
                return EXIT_DOCTOR_FAILED;
            }
        }
    } else {
        render::human(&report, render::use_colour())
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A reader that stopped early (`| head`) needs no message.
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("rmcp doctor: cannot write the report: {e}");
        }
        return EXIT_DOCTOR_FAILED;
    }
    report.exit_status()
}
