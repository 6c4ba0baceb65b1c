//! `rmcp`: the launcher and diagnostics for librmcp_shim.so.
//!
//! - `rmcp run [OPTIONS] -- CMD [ARGS...]` preloads the shim and execs CMD;
//! - `rmcp doctor [--json] [--sysfs ROOT]` says what rmcp sees on this machine;
//! - `rmcp check` runs the field-check program without and with the shim.
//!
//! The GPU facts come from the shim's own code (`rmcp_shim::topology`,
//! `rmcp_shim::config`) through its rlib, so the CLI and the shim cannot disagree.

mod build_info;
mod doctor;
mod field_check;
mod install;
mod preload;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Run(run::RunArgs),
    /// Check the GPUs, HIP runtimes, environment and driver settings that matter to rmcp.
    Doctor(doctor::DoctorArgs),
    /// Run the field-check program without and with librmcp_shim.so and compare.
    Check(field_check::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => ExitCode::from(run::run(args)),
        Command::Doctor(args) => ExitCode::from(doctor::main(args)),
        Command::Check(args) => ExitCode::from(field_check::main(args)),
    }
}
