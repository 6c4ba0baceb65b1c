//! `rmcp`: the launcher and diagnostics for librmcp_shim.so.
//!
//! - `rmcp run [OPTIONS] -- CMD [ARGS...]` preloads the shim and execs CMD;
//! - `rmcp doctor [--json] [--sysfs ROOT]` says what rmcp sees on this machine;
//! - `rmcp check` runs the field-check program without and with the shim.
//!
//! The GPU facts come from the shim's own code (`rmcp_shim::topology`,
//! `rmcp_shim::config`) through its rlib, so the CLI and the shim cannot disagree.

mod build_info;
mod check;
mod checks;
mod doctor;
mod hiplib;
mod install;
mod preload;
mod render;
mod run;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "rmcp",
    version = build_info::version_line(),
    about = "RDNA Memory Coherency Patch: run programs with librmcp_shim.so and diagnose the setup",
    propagate_version = true,
    max_term_width = 80
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run CMD with librmcp_shim.so preloaded (exec: no fork, no shell).
    #[command(
        arg_required_else_help = true,
        override_usage = "rmcp run [OPTIONS] [--] CMD [ARGS...]"
    )]
    Run(RunArgs),
    /// Check the GPUs, HIP runtimes, environment and driver settings that matter to rmcp.
    Doctor(DoctorArgs),
    /// Run the field-check program without and with librmcp_shim.so and compare.
    Check(CheckArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    Auto,
    Force,
    DryRun,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogArg {
    Off,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FinegrainedArg {
    Coarsen,
    Keep,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Path of librmcp_shim.so (default: $RMCP_SHIM, else next to rmcp, else ../lib/).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// RMCP_MODE: what the shim does to allocations.
    #[arg(long, value_enum, conflicts_with = "dry_run")]
    pub mode: Option<ModeArg>,
    /// Same as --mode dry-run: decide and log, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// RMCP_LOG: log level of the shim.
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub log: Option<LogArg>,
    /// RMCP_LOG_FILE: where the shim logs (default stderr).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// RMCP_STATS=1: print counters when the program exits.
    #[arg(long)]
    pub stats: bool,
    /// RMCP_STATS_FILE: write counters to PATH at exit ("%p" becomes the pid).
    #[arg(long, value_name = "PATH")]
    pub stats_file: Option<PathBuf>,
    /// RMCP_TARGETS: comma-separated gfx names treated as affected (e.g. gfx1010,gfx1031).
    #[arg(long, value_name = "LIST", value_parser = parse_targets_arg)]
    pub targets: Option<String>,
    /// RMCP_FINEGRAINED: what fine-grained VRAM requests become on affected GPUs.
    #[arg(long, value_enum)]
    pub finegrained: Option<FinegrainedArg>,
    /// RMCP_EXEMPT: comma-separated substrings of caller library paths left alone.
    #[arg(long, value_name = "LIST")]
    pub exempt: Option<String>,
    /// RMCP_HIP_LIBRARY: the runtime to load when none is mapped yet.
    #[arg(long, value_name = "PATH")]
    pub hip_library: Option<PathBuf>,
    /// The command and its arguments, passed through untouched.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

fn parse_targets_arg(s: &str) -> Result<String, String> {
    match rmcp_shim::config::parse_targets(s) {
        Some(t) => Ok(t
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",")),
        None => Err("expected a comma-separated list of gfx names such as gfx1010,gfx1031".into()),
    }
}

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Print the findings as JSON (schema: docs/cli.md).
    #[arg(long)]
    pub json: bool,
    /// KFD topology root (default: $RMCP_SYSFS_ROOT, else /sys/class/kfd/kfd/topology).
    #[arg(long, value_name = "ROOT")]
    pub sysfs: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The field-check program (default: $RMCP_FIELD_CHECK, else rmcp-field-check next to
    /// rmcp).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Path of librmcp_shim.so (default: $RMCP_SHIM, else next to rmcp, else ../lib/).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// RMCP_MODE=force for the run with rmcp (default: auto, which rewrites only for the
    /// GPUs in RMCP_TARGETS).
    #[arg(long)]
    pub force: bool,
    /// Seconds each run may take before it is killed.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => ExitCode::from(run::run(args)),
        Command::Doctor(args) => ExitCode::from(doctor::main(args)),
        Command::Check(args) => ExitCode::from(check::main(args)),
    }
}
