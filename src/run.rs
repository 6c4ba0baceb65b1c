//! `rmcp run`: find the shim, put it first in LD_PRELOAD, set the RMCP_* variables the
//! options ask for and the variables of the quirks (`crate::quirks`: Triton's buffer ops
//! off on an RX 5000, with the line that says so), and exec the command (no fork, no
//! shell), so that its exit status and signals are its own. The command gets the process state the parent left: main.rs skips
//! the Rust runtime's start-up for `run` (SIGPIPE, closed descriptors), and the exec is
//! execvpe(3), not std's (which resets SIGPIPE and the signal mask).

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use clap::builder::{PossibleValuesParser, TypedValueParser};
use rmcp_core::config::{Choice, Finegrained, LogLevel, Mode, parse_targets};

use crate::install;
use crate::preload::{self, SHIM_NAME};

/// Exit statuses, as env(1) uses them.
pub const EXIT_CANNOT_RUN: u8 = 126;
pub const EXIT_NOT_FOUND: u8 = 127;
/// rmcp itself could not do its part (env(1) uses 125 for that).
pub const EXIT_FAILED: u8 = 125;

/// The options and the command of `rmcp run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Path of librmcp_shim.so (default: $RMCP_SHIM, else next to rmcp, else ../lib/, else
    /// the rmcp_rdna package beside rmcp).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// RMCP_MODE: what the shim does to allocations.
    #[arg(long, value_parser = choice::<Mode>(), conflicts_with = "dry_run")]
    pub mode: Option<Mode>,
    /// Same as --mode dry-run: decide and log, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// RMCP_LOG: log level of the shim.
    #[arg(long, value_parser = choice::<LogLevel>(), value_name = "LEVEL")]
    pub log: Option<LogLevel>,
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
    #[arg(long, value_parser = choice::<Finegrained>())]
    pub finegrained: Option<Finegrained>,
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
    match parse_targets(s) {
        Some(t) => Ok(t
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",")),
        None => Err("expected a comma-separated list of gfx names such as gfx1010,gfx1031".into()),
    }
}

/// A clap parser for a configuration choice: it offers the choice's canonical spellings,
/// from rmcp-core's table, and gives the value they name.
fn choice<T: Choice + Clone + Send + Sync>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::NAMES).map(|s| {
        // Every canonical spelling parses to its value (rmcp-core's table tests); the
        // first value is a formality.
        T::parse(&s).unwrap_or(T::ALL[0])
    })
}

/// The RMCP_* variables the options set (only those given; the rest of the environment is
/// passed through as it is).
pub fn option_env(args: &RunArgs) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = Vec::new();
    let mode = if args.dry_run {
        Some(Mode::DryRun)
    } else {
        args.mode
    };
    if let Some(m) = mode {
        env.push(("RMCP_MODE", m.as_str().into()));
    }
    if let Some(l) = args.log {
        env.push(("RMCP_LOG", l.as_str().into()));
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
        env.push(("RMCP_FINEGRAINED", f.as_str().into()));
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
/// printed and the exit status is returned (127 not found, 125 unusable path: not a regular
/// file, or one LD_PRELOAD cannot carry).
pub(crate) fn shim_for_preload(explicit: Option<&Path>) -> Result<PathBuf, u8> {
    let search = install::SHIM.search_here(explicit);
    // A path the user named that is there but is no file (a FIFO, on which the loader
    // would wait forever; a directory; a device): said as such, not as "not found".
    if let (None, [(_, named)]) = (&search.found, search.tried.as_slice()) {
        if let Some(e) = crate::input::not_regular_if_present(named) {
            eprintln!("rmcp: {e}: the shim must be its library file");
            return Err(EXIT_FAILED);
        }
    }
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

    // --hip-library is the shim's to load (RMCP_HIP_LIBRARY), in the command: a path that
    // is there but is no file (a FIFO would hang the command's first HIP call) is refused
    // here. A missing path or a bare name is the loader's to find, as the shim documents.
    if let Some(e) = args
        .hip_library
        .as_deref()
        .and_then(crate::input::not_regular_if_present)
    {
        eprintln!("rmcp: --hip-library {e}: the runtime must be its library file");
        return EXIT_FAILED;
    }
    let (program, _) = args.command.split_first().expect("clap requires a command");
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut set = |k: &str, v: OsString| {
        env.retain(|(name, _)| name != k);
        env.push((k.into(), v));
    };
    for (k, v) in preload::command_env(
        &shim,
        std::env::var_os("LD_PRELOAD").as_deref(),
        std::env::var_os("ASAN_OPTIONS").as_deref(),
    ) {
        set(k, v);
    }
    for (k, v) in option_env(&args) {
        set(k, v);
    }
    let decision = {
        let get = |name: &str| lookup(&env, name);
        crate::quirks::decide(&get)
    };
    for (k, v) in &decision.set {
        env.retain(|(name, _)| name != k);
        env.push((k.into(), v.into()));
    }
    say_quirks(&env, &decision.notes);
    warn_cross_family_override(&env);
    let err = exec(&args.command, &env);
    let name = program.to_string_lossy();
    eprintln!("rmcp: {name}: {err}");
    exec_error_status(&err)
}

/// The value of `name` in the environment the command gets.
fn lookup(env: &[(OsString, OsString)], name: &str) -> Option<OsString> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// The quirks' banner: one line per note on stderr, unless RMCP_LOG=off.
fn say_quirks(env: &[(OsString, OsString)], notes: &[String]) {
    use std::io::Write;
    let cfg = rmcp_core::config::Config::from_lookup(|k| lookup(env, k), false);
    if cfg.log == LogLevel::Off {
        return;
    }
    for n in notes {
        // A closed stderr is no reason not to run the command.
        let _ = writeln!(io::stderr(), "rmcp: {n}");
    }
}

/// Says, as the shim will on the command's first HIP call, when HSA_OVERRIDE_GFX_VERSION
/// in the environment the command gets makes an affected GPU run another family's code
/// (`rmcp_core::remedy::cross_family_warning`). Nothing when RMCP_LOG=off, RMCP_MODE=off
/// or there is no readable topology; the environment is left as it is.
fn warn_cross_family_override(env: &[(OsString, OsString)]) {
    use std::io::Write;
    let get = |name: &str| lookup(env, name);
    let cfg = rmcp_core::config::Config::from_lookup(get, false);
    if cfg.log == LogLevel::Off || cfg.mode == Mode::Off {
        return;
    }
    let Ok(topo) = rmcp_core::topology::Topology::read_gpus(&cfg.sysfs_root) else {
        return;
    };
    for g in &topo.gpus {
        if !rmcp_core::classify::is_affected(g.gfx, &cfg.targets, cfg.mode) {
            continue;
        }
        let name = rmcp_core::remedy::OVERRIDE_VARIABLE;
        let value = get(&format!("{name}_{}", g.node)).or_else(|| get(name));
        let Some(value) = value else { continue };
        if let Some(w) =
            rmcp_core::remedy::cross_family_warning(g.node, g.gfx, &value.to_string_lossy())
        {
            // A closed stderr is no reason not to run the command.
            let _ = writeln!(io::stderr(), "rmcp: warning: {w}");
        }
    }
}

/// execvpe(3): replaces this process with `argv[0]` (searched in PATH as execvp does) and
/// `env`; returns only the error. Not std's `Command::exec`: that sets SIGPIPE back to its
/// default and empties the signal mask before exec, and the command is to get both as the
/// parent left them.
fn exec(argv: &[OsString], env: &[(OsString, OsString)]) -> io::Error {
    use std::ffi::CString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let c = |b: Vec<u8>| CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let argv: Vec<CString> = match argv.iter().map(|a| c(a.as_bytes().to_vec())).collect() {
        Ok(v) => v,
        Err(e) => return e,
    };
    let envp: Vec<CString> = match env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.clone().into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            c(kv)
        })
        .collect()
    {
        Ok(v) => v,
        Err(e) => return e,
    };
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: both arrays are NULL-terminated arrays of NUL-terminated strings that outlive
    // the call; execvpe returns only on failure.
    unsafe { libc::execvpe(argv_ptrs[0], argv_ptrs.as_ptr(), envp_ptrs.as_ptr()) };
    io::Error::last_os_error()
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
