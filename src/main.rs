//! `rmcp`: the launcher and diagnostics for librmcp_shim.so.
//!
//! Where things are:
//! - `main.rs`: the top-level parser (`Cli`) and the subcommands (`Command`), each handed
//!   to its module;
//! - `run`: `rmcp run [OPTIONS] -- CMD [ARGS...]`, which preloads the shim and execs CMD
//!   (its options, the RMCP_* values they set, the env(1) exit statuses);
//! - `doctor/`: `rmcp doctor [--json] [--sysfs ROOT]`, what rmcp sees on this machine
//!   (`doctor/mod.rs` lists its files);
//! - `field_check/`: `rmcp check`, which measures atomics on the GPU without and with the
//!   shim, with the runtime the user's framework uses, and compares;
//! - `report`: `rmcp report`, what a field report needs (doctor, check, versions), redacted;
//! - `quirks`: what `rmcp run` reads for `rmcp_core::quirks` (Triton's buffer ops on an
//!   RX 5000) and Inductor's default cache directory;
//! - `preload`: LD_PRELOAD lists (putting the shim in, taking it out, recognising it);
//! - `install`: finding the shim (option, variable, next to
//!   rmcp, `../lib/`, the pip package);
//! - `kernel`: `rmcp kernel install`, a Jupyter kernel spec with the shim preloaded;
//! - `build_info`: the version and the commit rmcp was built from (`--version`, doctor);
//! - `input`: what rmcp reads on a user's say-so (regular files only, never blocking, with
//!   size caps; exit status 2 for a path an option names that rmcp cannot use).
//!
//! Start-up: `main` is a C `main` (`#![no_main]`), so the Rust runtime's start-up does not
//! run. That start-up ignores SIGPIPE and opens /dev/null on closed descriptors 0-2, and
//! `rmcp run` promises the command the process state its parent left: for `run`, nothing
//! is changed; every other command gets what Rust's start-up would have done
//! ([`start_as_rust_does`]).
//!
//! The GPU facts come from the code the shim uses too (`rmcp_core::topology`,
//! `rmcp_core::classify`, `rmcp_core::config`), so the CLI and the shim cannot disagree.

// The test harness brings its own main.
#![cfg_attr(not(test), no_main)]

mod build_info;
mod doctor;
mod field_check;
mod input;
mod install;
mod kernel;
mod preload;
mod quirks;
mod report;
mod run;

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
    /// Measure atomics on coherent host memory on this GPU, without and with
    /// librmcp_shim.so, and compare.
    Check(field_check::CheckArgs),
    /// Write a field report (doctor, check, versions) as Markdown, private details redacted.
    Report(report::ReportArgs),
    /// Jupyter kernel specs that start ipykernel with librmcp_shim.so preloaded.
    Kernel(kernel::KernelArgs),
}

/// The entry point (not in the unit-test binary, whose main is libtest's) and the start-up.
mod startup {
    use super::{Cli, Command, doctor, field_check, kernel, report, run};
    use clap::Parser;

    /// The process's entry point, called by the C runtime (glibc's `__libc_start_main`): the
    /// Rust runtime's start-up is skipped. std still works: it takes argv from glibc's
    /// `.init_array` call and needs no other initialisation.
    #[cfg(not(test))]
    #[unsafe(no_mangle)]
    extern "C" fn main(
        _argc: std::ffi::c_int,
        _argv: *const *const std::ffi::c_char,
    ) -> std::ffi::c_int {
        // A panic must not unwind into C: report it as Rust's runtime does (the panic hook has
        // printed it), with status 101.
        let status = std::panic::catch_unwind(rmcp_main).unwrap_or(101);
        // process::exit flushes stdout (std's runtime would have at the end of main).
        std::process::exit(i32::from(status))
    }

    #[cfg_attr(test, allow(dead_code))]
    fn rmcp_main() -> u8 {
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        if args.get(1).is_some_and(|a| a == "run") {
            hold_closed_stdio();
        } else {
            start_as_rust_does();
        }
        let cli = Cli::parse_from(args);
        match cli.command {
            Command::Run(args) => run::run(args),
            Command::Doctor(args) => doctor::main(args),
            Command::Check(args) => field_check::main(args),
            Command::Report(args) => report::main(args),
            Command::Kernel(args) => kernel::main(args),
        }
    }

    /// The closed ones of descriptors 0-2.
    fn closed_stdio() -> Vec<std::ffi::c_int> {
        (0..=2)
            .filter(|&fd| {
                // SAFETY: fcntl(F_GETFD) only reads the descriptor's flags.
                let r = unsafe { libc::fcntl(fd, libc::F_GETFD) };
                r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
            })
            .collect()
    }

    /// Opens /dev/null on each closed descriptor of 0-2, in order (open(2) takes the lowest
    /// free one), with `flags` added. Returns false if one could not be opened there.
    fn fill_closed_stdio(flags: std::ffi::c_int) -> bool {
        for fd in closed_stdio() {
            // SAFETY: a NUL-terminated path; the descriptor is checked and kept or closed.
            let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | flags) };
            if got != fd {
                if got >= 0 {
                    // SAFETY: the descriptor just opened, not the one wanted.
                    unsafe { libc::close(got) };
                }
                return false;
            }
        }
        true
    }

    /// What the Rust runtime's start-up does on Linux, for the commands other than `run`:
    /// /dev/null on closed descriptors 0-2 (so a file rmcp opens never becomes its stdout),
    /// and SIGPIPE ignored (a closed pipe is an error rmcp reports, not a signal that kills
    /// it). Like Rust's runtime, a descriptor that cannot be filled ends the process.
    fn start_as_rust_does() {
        if !fill_closed_stdio(0) {
            std::process::abort();
        }
        // SAFETY: setting a signal's disposition to SIG_IGN; no handler is involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    }

    /// For `run`: each closed descriptor of 0-2 is held by /dev/null, close-on-exec, while rmcp
    /// runs, so that no file rmcp opens lands there and takes rmcp's writes meant for stdout or
    /// stderr; at exec they close again and the command gets them closed, as its parent left
    /// them. SIGPIPE is left as the parent left it (exec keeps an ignored signal ignored).
    fn hold_closed_stdio() {
        // Best effort: a descriptor that cannot be held stays closed, which is what the
        // command is to get anyway.
        let _ = fill_closed_stdio(libc::O_CLOEXEC);
    }
}
