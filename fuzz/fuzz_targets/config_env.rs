//! `Config::from_lookup` with arbitrary variable values (valid UTF-8 or not), in normal and
//! secure-execution mode: never panic; secure mode never keeps a path variable; a warning
//! for each bad value, never more than one per variable.
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use rmcp_core::config::{Config, DEFAULT_SYSFS_ROOT, VARIABLES};

fuzz_target!(|data: &[u8]| {
    let Some((&bits, rest)) = data.split_first() else {
        return;
    };
    let secure = bits & 1 != 0;
    // One value per documented variable, separated by NUL; a missing one is unset.
    let values: Vec<Option<OsString>> = {
        let mut parts = rest.split(|b| *b == 0);
        VARIABLES
            .iter()
            .map(|_| parts.next().map(|p| OsString::from_vec(p.to_vec())))
            .collect()
    };
    let lookup = |name: &str| -> Option<OsString> {
        let i = VARIABLES.iter().position(|v| v.name == name)?;
        values[i].clone()
    };
    let cfg = Config::from_lookup(lookup, secure);
    assert!(!cfg.targets.is_empty());
    assert!(cfg.warnings.len() <= VARIABLES.len(), "{:?}", cfg.warnings);
    if secure {
        assert_eq!(cfg.log_file, None);
        assert_eq!(cfg.stats_file, None);
        assert_eq!(cfg.hip_library, None);
        assert_eq!(cfg.sysfs_root, PathBuf::from(DEFAULT_SYSFS_ROOT));
    }
    assert!(cfg.exempt.iter().all(|e| !e.is_empty() && e.trim() == e));
    // Reading the same environment twice gives the same configuration.
    assert_eq!(cfg, Config::from_lookup(lookup, secure));
});
