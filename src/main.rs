//! `rmcp`: the launcher and diagnostics for librmcp_shim.so.
//!
//! Where things are:
//! - `main.rs`: the top-level parser (`Cli`) and the subcommands (`Command`), each handed
//!   to its module;
//! - `run`: `rmcp run [OPTIONS] -- CMD [ARGS...]`, which preloads the shim and execs CMD
//!   (its options, the RMCP_* values they set, the env(1) exit statuses);
//! - `doctor/`: `rmcp doctor [--json] [--sysfs ROOT]`, what rmcp sees on this machine
//!   (`doctor/mod.rs` lists its files);
//! - `field_check`: `rmcp check`, which runs the field-check program without and with the
//!   shim and compares;
//! - `preload`: LD_PRELOAD lists (putting the shim in, taking it out, recognising it);
//! - `install`: finding the shim and the field-check program (option, variable, next to
//!   rmcp, `../lib/`);
//! - `build_info`: the version and the commit rmcp was built from (`--version`, doctor).
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
