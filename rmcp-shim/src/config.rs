//! Configuration: the RMCP_* environment, read once, on the first hooked call.
//!
//! A bad value gets one warning naming the variable and the accepted values, then the
//! default. In secure-execution mode (setuid/setgid, `AT_SECURE`) the variables that name
//! paths are ignored, as glibc ignores LD_LIBRARY_PATH there.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::topology::Gfx;

/// What the shim does to allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Rewrite on devices the KFD topology shows to be affected.
    Auto,
    /// Treat every device as affected.
    Force,
    /// Decide, log and count as `auto` would, but forward every call unchanged.
    DryRun,
    /// Forward everything unchanged; only count.
    Off,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Force => "force",
            Mode::DryRun => "dry-run",
            Mode::Off => "off",
        }
    }
}

/// What `hipExtMallocWithFlags(.., hipDeviceMallocFinegrained)` becomes on affected devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finegrained {
    /// Coarse-grained VRAM (`hipDeviceMallocDefault`).
    Coarsen,
    /// Left as the caller asked.
    Keep,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// The documented variables: name, accepted values, default. The README's table and
/// `rmcp doctor` are written from this.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    ("RMCP_MODE", "auto, force, dry-run, off", "auto"),
    ("RMCP_TARGETS", "comma-separated gfx names", DEFAULT_TARGETS),
    ("RMCP_FINEGRAINED", "coarsen, keep", "coarsen"),
    (
        "RMCP_EXEMPT",
        "comma-separated substrings of caller library paths",
        DEFAULT_EXEMPT,
    ),
    ("RMCP_LOG", "off, error, warn, info, debug, trace", "warn"),
    ("RMCP_LOG_FILE", "path", "stderr"),
    ("RMCP_STATS", "0, 1", "0"),
    ("RMCP_STATS_FILE", "path", "none"),
    ("RMCP_HIP_LIBRARY", "path", "none"),
    ("RMCP_SYSFS_ROOT", "path", DEFAULT_SYSFS_ROOT),
    ("RMCP_HOOK_DLSYM", "0, 1", "1"),
];

/// RDNA1 (gfx1010-gfx1013) and RDNA2 (gfx1030-gfx1036).
pub const DEFAULT_TARGETS: &str =
    "gfx1010,gfx1011,gfx1012,gfx1013,gfx1030,gfx1031,gfx1032,gfx1033,gfx1034,gfx1035,gfx1036";
/// RCCL needs coherent memory for correctness.
pub const DEFAULT_EXEMPT: &str = "librccl";
pub const DEFAULT_SYSFS_ROOT: &str = "/sys/class/kfd/kfd/topology";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub mode: Mode,
    pub targets: Vec<Gfx>,
    pub finegrained: Finegrained,
    pub exempt: Vec<String>,
    pub log: LogLevel,
    pub log_file: Option<PathBuf>,
    pub stats: bool,
    pub stats_file: Option<PathBuf>,
    pub hip_library: Option<PathBuf>,
    pub sysfs_root: PathBuf,
    /// dlsym on a HIP runtime handle hands back the shim's functions (RMCP_HOOK_DLSYM).
    pub hook_dlsym: bool,
    /// Problems found while reading, to be logged once logging is set up.
    pub warnings: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config::from_lookup(|_| None, false)
    }
}

/// True when the process runs in secure-execution mode (setuid, setgid, capabilities).
pub fn secure_execution() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel handed the process; it has
    // no preconditions and returns 0 for an absent entry.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Config {
        Config::from_lookup(|k| std::env::var_os(k), secure_execution())
    }

    /// Reads variables through `get`; `secure` drops the path variables.
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>, secure: bool) -> Config {
        let mut warnings = Vec::new();
        let mut text = |name: &str| -> Option<String> {
            let v = get(name)?;
            match v.into_string() {
                Ok(s) => Some(s),
                Err(_) => {
                    warnings.push(format!("{name} is not valid UTF-8; using its default"));
                    None
                }
            }
        };
        let mode_raw = text("RMCP_MODE");
        let targets_raw = text("RMCP_TARGETS");
        let fine_raw = text("RMCP_FINEGRAINED");
        let exempt_raw = text("RMCP_EXEMPT");
        let log_raw = text("RMCP_LOG");
        let stats_raw = text("RMCP_STATS");
        let hook_dlsym_raw = text("RMCP_HOOK_DLSYM");
        let paths: Vec<(&str, Option<String>)> = [
            "RMCP_LOG_FILE",
            "RMCP_STATS_FILE",
            "RMCP_HIP_LIBRARY",
            "RMCP_SYSFS_ROOT",
        ]
        .into_iter()
        .map(|n| (n, text(n)))
        .collect();

        let mut bad = |name: &str, value: &str, accepted: &str| {
            warnings.push(format!(
                "{name}={value:?} is not one of: {accepted}; using the default"
            ));
        };

        let mode = match mode_raw.as_deref().map(str::trim) {
            None | Some("") => Mode::Auto,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "auto" => Mode::Auto,
                "force" | "on" => Mode::Force,
                "dry-run" | "dryrun" | "dry_run" => Mode::DryRun,
                "off" => Mode::Off,
                _ => {
                    bad("RMCP_MODE", v, "auto, force, dry-run, off");
                    Mode::Auto
                }
            },
        };
        let default_targets = || parse_targets(DEFAULT_TARGETS).expect("default targets parse");
        let targets = match targets_raw.as_deref() {
            None => default_targets(),
            Some(v) => match parse_targets(v) {
                Some(t) => t,
                None => {
                    bad(
                        "RMCP_TARGETS",
                        v,
                        "a comma-separated list of gfx names such as gfx1010,gfx1031",
                    );
                    default_targets()
                }
            },
        };
        let finegrained = match fine_raw.as_deref().map(str::trim) {
            None | Some("") => Finegrained::Coarsen,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "coarsen" => Finegrained::Coarsen,
                "keep" => Finegrained::Keep,
                _ => {
                    bad("RMCP_FINEGRAINED", v, "coarsen, keep");
                    Finegrained::Coarsen
                }
            },
        };
        // An empty RMCP_EXEMPT is meaningful: exempt nothing.
        let exempt = exempt_raw
            .as_deref()
            .unwrap_or(DEFAULT_EXEMPT)
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let log = match log_raw.as_deref().map(str::trim) {
            None | Some("") => LogLevel::Warn,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "off" | "none" => LogLevel::Off,
                "error" => LogLevel::Error,
                "warn" | "warning" => LogLevel::Warn,
                "info" => LogLevel::Info,
                "debug" => LogLevel::Debug,
                "trace" => LogLevel::Trace,
                _ => {
                    bad("RMCP_LOG", v, "off, error, warn, info, debug, trace");
                    LogLevel::Warn
                }
            },
        };
        let stats = match stats_raw.as_deref().map(str::trim) {
            None | Some("") | Some("0") => false,
            Some("1") => true,
            Some(v) => {
                bad("RMCP_STATS", v, "0, 1");
                false
            }
        };
        let hook_dlsym = match hook_dlsym_raw.as_deref().map(str::trim) {
            None | Some("") | Some("1") => true,
            Some("0") => false,
            Some(v) => {
                bad("RMCP_HOOK_DLSYM", v, "0, 1");
                true
            }
        };
        let mut path = |name: &str| -> Option<PathBuf> {
            let v = paths.iter().find(|(n, _)| *n == name)?.1.clone()?;
            if v.is_empty() {
                return None;
            }
            if secure {
                warnings.push(format!(
                    "{name} is ignored: the process runs in secure-execution mode"
                ));
                return None;
            }
            Some(PathBuf::from(v))
        };
        let log_file = path("RMCP_LOG_FILE");
        let stats_file = path("RMCP_STATS_FILE");
        let hip_library = path("RMCP_HIP_LIBRARY");
        let sysfs_root = path("RMCP_SYSFS_ROOT").unwrap_or_else(|| DEFAULT_SYSFS_ROOT.into());

        Config {
            mode,
            targets,
            finegrained,
            exempt,
            log,
            log_file,
            stats,
            stats_file,
            hip_library,
            sysfs_root,
            hook_dlsym,
            warnings,
        }
    }

    pub fn is_target(&self, gfx: Gfx) -> bool {
        self.targets.contains(&gfx)
    }
}

/// `gfx1010,gfx1031` -> targets; None if empty or any entry is not a gfx name.
pub fn parse_targets(s: &str) -> Option<Vec<Gfx>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        let g = Gfx::parse(part)?;
        if !out.contains(&g) {
            out.push(g);
        }
    }
    if out.is_empty() { None } else { Some(out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)], secure: bool) -> Config {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned(), secure)
    }

    #[test]
    fn defaults() {
        let c = cfg(&[], false);
        assert_eq!(c.mode, Mode::Auto);
        assert_eq!(c.finegrained, Finegrained::Coarsen);
        assert_eq!(c.exempt, vec!["librccl".to_string()]);
        assert_eq!(c.log, LogLevel::Warn);
        assert!(!c.stats);
        assert!(c.hook_dlsym);
        assert_eq!(c.sysfs_root, PathBuf::from(DEFAULT_SYSFS_ROOT));
        assert!(c.warnings.is_empty());
        let names: Vec<String> = c.targets.iter().map(|g| g.to_string()).collect();
        assert_eq!(names.join(","), DEFAULT_TARGETS);
        assert!(c.is_target(Gfx::parse("gfx1031").unwrap()));
        assert!(!c.is_target(Gfx::parse("gfx1100").unwrap()));
        assert!(!c.is_target(Gfx::parse("gfx1014").unwrap()));
    }

    type Check = fn(&Config) -> bool;

    #[test]
    fn accepted_values() {
        let table: &[(&str, &str, Check)] = &[
            ("RMCP_MODE", "force", |c| c.mode == Mode::Force),
            ("RMCP_MODE", "DRY-RUN", |c| c.mode == Mode::DryRun),
            ("RMCP_MODE", " off ", |c| c.mode == Mode::Off),
            ("RMCP_FINEGRAINED", "keep", |c| {
                c.finegrained == Finegrained::Keep
            }),
            ("RMCP_LOG", "trace", |c| c.log == LogLevel::Trace),
            ("RMCP_LOG", "off", |c| c.log == LogLevel::Off),
            ("RMCP_STATS", "1", |c| c.stats),
            ("RMCP_HOOK_DLSYM", "0", |c| !c.hook_dlsym),
            ("RMCP_EXEMPT", "", |c| c.exempt.is_empty()),
            ("RMCP_EXEMPT", "librccl, libfoo ,", |c| {
                c.exempt == ["librccl", "libfoo"]
            }),
            ("RMCP_TARGETS", "gfx1100, gfx90a", |c| {
                c.targets.iter().map(|g| g.to_string()).collect::<Vec<_>>() == ["gfx1100", "gfx90a"]
            }),
            ("RMCP_LOG_FILE", "/x/log", |c| {
                c.log_file.as_deref() == Some(std::path::Path::new("/x/log"))
            }),
            ("RMCP_SYSFS_ROOT", "fix", |c| {
                c.sysfs_root == std::path::Path::new("fix")
            }),
        ];
        for (name, value, check) in table {
            let c = cfg(&[(name, value)], false);
            assert!(check(&c), "{name}={value:?} gave {c:?}");
            assert!(c.warnings.is_empty(), "{name}={value:?}: {:?}", c.warnings);
        }
    }

    #[test]
    fn bad_values_warn_once_and_use_the_default() {
        for (name, value) in [
            ("RMCP_MODE", "sometimes"),
            ("RMCP_FINEGRAINED", "maybe"),
            ("RMCP_LOG", "loud"),
            ("RMCP_STATS", "yes"),
            ("RMCP_HOOK_DLSYM", "maybe"),
            ("RMCP_TARGETS", "rdna2"),
            ("RMCP_TARGETS", ","),
        ] {
            let c = cfg(&[(name, value)], false);
            assert_eq!(c.warnings.len(), 1, "{name}={value}: {:?}", c.warnings);
            assert!(c.warnings[0].contains(name), "{:?}", c.warnings);
            let d = Config {
                warnings: vec![],
                ..c.clone()
            };
            assert_eq!(d, cfg(&[], false), "{name}={value} did not fall back");
        }
    }

    #[test]
    fn secure_execution_ignores_path_variables() {
        let vars = [
            ("RMCP_LOG_FILE", "/tmp/l"),
            ("RMCP_STATS_FILE", "/tmp/s"),
            ("RMCP_HIP_LIBRARY", "/tmp/evil.so"),
            ("RMCP_SYSFS_ROOT", "/tmp/fake"),
            ("RMCP_MODE", "force"),
        ];
        let c = cfg(&vars, true);
        assert_eq!(c.log_file, None);
        assert_eq!(c.stats_file, None);
        assert_eq!(c.hip_library, None);
        assert_eq!(c.sysfs_root, PathBuf::from(DEFAULT_SYSFS_ROOT));
        assert_eq!(c.mode, Mode::Force);
        assert_eq!(c.warnings.len(), 4);
        let open = cfg(&vars, false);
        assert_eq!(open.hip_library, Some(PathBuf::from("/tmp/evil.so")));
    }

    #[test]
    fn non_utf8_values_warn() {
        use std::os::unix::ffi::OsStringExt;
        let c = Config::from_lookup(
            |k| (k == "RMCP_MODE").then(|| OsString::from_vec(vec![0xff, 0xfe])),
            false,
        );
        assert_eq!(c.mode, Mode::Auto);
        assert_eq!(c.warnings.len(), 1);
    }

    #[test]
    fn variables_table_documents_every_variable_read() {
        let src = include_str!("config.rs");
        for (name, _, _) in VARIABLES {
            assert!(src.matches(&format!("\"{name}\"")).count() >= 2, "{name}");
        }
    }
}
