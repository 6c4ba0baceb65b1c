//! The quirks of `rmcp run` (and so of the container entrypoint, which execs it): what
//! `rmcp_core::quirks::decide` needs, read from the environment the command will get and
//! from the KFD topology, and Inductor's default cache directory as PyTorch computes it
//! (also what `rmcp doctor`'s `triton` check looks at). The decision itself is rmcp-core's.

use std::ffi::OsString;
use std::path::Path;

use rmcp_core::config::Config;
use rmcp_core::gfx::Gfx;
use rmcp_core::quirks::{self, Decision, Environment};

/// Python's `tempfile.gettempdir()` as far as the environment says it: the first of
/// TMPDIR, TEMP and TMP that is set and not empty, else `/tmp` (Python also checks that
/// the directory is usable and tries others when not; rmcp does not).
pub fn temp_dir(get: &dyn Fn(&str) -> Option<OsString>) -> String {
    ["TMPDIR", "TEMP", "TMP"]
        .iter()
        .filter_map(|k| get(k))
        .map(|v| v.to_string_lossy().into_owned())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| "/tmp".to_string())
}

/// Python's `getpass.getuser()`: the first of LOGNAME, USER, LNAME and USERNAME that is set
/// and not empty, else the password database's name for the real user id, else the id.
pub fn user_name(get: &dyn Fn(&str) -> Option<OsString>) -> String {
    if let Some(v) = ["LOGNAME", "USER", "LNAME", "USERNAME"]
        .iter()
        .filter_map(|k| get(k))
        .map(|v| v.to_string_lossy().into_owned())
        .find(|v| !v.is_empty())
    {
        return v;
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    // SAFETY: passwd is plain data (integers and pointers); all zeroes is a valid value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: pwd, buf and result are valid for the call; buf's length is passed.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc == 0 && !result.is_null() && !pwd.pw_name.is_null() {
        // SAFETY: getpwuid_r succeeded: pw_name is a NUL-terminated string inside buf.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        return name.to_string_lossy().into_owned();
    }
    uid.to_string()
}

/// Inductor's default cache directory for this environment
/// (`rmcp_core::quirks::inductor_default_dir`).
pub fn inductor_default_dir(get: &dyn Fn(&str) -> Option<OsString>) -> String {
    quirks::inductor_default_dir(&temp_dir(get), &user_name(get))
}

/// The GPUs of the topology `cfg` names (none when it cannot be read).
pub fn topology_gpus(sysfs_root: &Path) -> Vec<Gfx> {
    rmcp_core::topology::Topology::read_gpus(sysfs_root)
        .map(|t| t.gpus.iter().map(|g| g.gfx).collect())
        .unwrap_or_default()
}

/// The decision for a command that gets the environment `get` reads.
pub fn decide(get: &dyn Fn(&str) -> Option<OsString>) -> Decision {
    let cfg = Config::from_lookup(get, false);
    let buffer_ops = get(quirks::BUFFER_OPS_VARIABLE).map(|v| v.to_string_lossy().into_owned());
    let inductor = get(quirks::INDUCTOR_CACHE_VARIABLE).map(|v| v.to_string_lossy().into_owned());
    let env = Environment {
        buffer_ops: buffer_ops.as_deref(),
        inductor_cache: inductor.as_deref(),
        inductor_default: inductor_default_dir(get),
    };
    // The topology is read only when the answer may depend on it.
    if cfg.quirks == rmcp_core::config::Quirks::Off {
        return Decision::default();
    }
    quirks::decide(&topology_gpus(&cfg.sysfs_root), &env, cfg.quirks)
}
