//! Configuration: the RMCP_* variables, from one declarative table.
//!
//! Each row of the `config!` table below is one variable: the `Config` field, its type,
//! the variable's name, its default and a line of help. From the table come the `Config`
//! struct, its reading ([`Config::from_lookup`]) with the warnings, and [`VARIABLES`], the
//! documented list that docs/cli.md's table, `rmcp doctor` and the CLI's options are
//! checked against or built from. How a type reads its text is its [`Value`] impl; the
//! choice types (`Mode`, `LogLevel`, `Finegrained`) list their spellings once, in `choices!`,
//! and the CLI's value lists are their `NAMES`.
//!
//! A bad value gets one warning naming the variable and the accepted values, then the
//! default. In secure-execution mode (setuid/setgid, `AT_SECURE`) the variables that name
//! paths are ignored, as glibc ignores LD_LIBRARY_PATH there. Nothing here reads the
//! process environment or asks the kernel: callers pass a lookup and the secure flag.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::gfx::Gfx;

/// How a variable's text becomes a value of the type.
pub trait Value: Sized {
    /// What the variable accepts, as the docs and the warnings say it.
    const ACCEPTED: &'static str;
    /// A path: ignored in secure-execution mode; only the empty text means "unset".
    const IS_PATH: bool = false;
    /// An empty text is a value of its own, not "use the default" (an empty RMCP_EXEMPT
    /// exempts nothing).
    const EMPTY_IS_A_VALUE: bool = false;
    /// The value of a non-empty text; None: not accepted.
    fn parse(text: &str) -> Option<Self>;
}

/// A value named by one of a fixed list of spellings (`Mode`, `LogLevel`, `Finegrained`):
/// what the CLI needs to offer the same spellings the shim reads.
pub trait Choice: Value + Copy + 'static {
    /// Every value, in the order the docs list them.
    const ALL: &'static [Self];
    /// The canonical spellings, in `ALL` order.
    const NAMES: &'static [&'static str];
    fn as_str(self) -> &'static str;
}

/// `"a", "b"` -> `"a, b"`, at compile time.
macro_rules! join_names {
    ($first:literal $(, $rest:literal)*) => {
        concat!($first $(, ", ", $rest)*)
    };
}

/// A choice among named values: the enum, its canonical spellings and accepted aliases.
macro_rules! choices {
    ($(
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $canon:literal $(| $alias:literal)* ),+ $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// The canonical spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $canon, )+
                }
            }
        }

        impl Choice for $name {
            const ALL: &'static [$name] = &[$($name::$variant),+];
            const NAMES: &'static [&'static str] = &[$($canon),+];
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl Value for $name {
            const ACCEPTED: &'static str = join_names!($($canon),+);
            fn parse(text: &str) -> Option<Self> {
                match text.trim().to_ascii_lowercase().as_str() {
                    $( $canon $(| $alias)* => Some($name::$variant), )+
                    _ => None,
                }
            }
        }
    )*};
}

choices! {
    /// What the shim does to allocations.
    pub enum Mode {
        /// Rewrite on devices the KFD topology shows to be affected.
        Auto = "auto",
        /// Treat every device as affected.
        Force = "force" | "on",
        /// Decide, log and count as `auto` would, but forward every call unchanged.
        DryRun = "dry-run" | "dryrun" | "dry_run",
        /// Forward everything unchanged; only count.
        Off = "off",
    }

    /// What `hipExtMallocWithFlags(.., hipDeviceMallocFinegrained)` becomes on affected
    /// devices.
    pub enum Finegrained {
        /// Coarse-grained VRAM (`hipDeviceMallocDefault`).
        Coarsen = "coarsen",
        /// Left as the caller asked.
        Keep = "keep",
    }

    /// What the shim does with a gfx1010-gfx1013 code object whose buffer instructions take
    /// resource descriptors in the layout those GPUs drop (Triton's buffer ops), loaded with
    /// hipModuleLoadData/Ex on a gfx1010-gfx1013 GPU (`rmcp_core::module_load`).
    pub enum BufferDescriptors {
        /// Forward a private copy with those descriptor literals in the RDNA layout.
        Fix = "fix",
        /// Forward the original and say what to do.
        Warn = "warn",
        /// Do nothing (the image is not even read).
        Off = "off",
    }

    /// What the shim does, on a gfx1010-gfx1013 GPU that an override makes run gfx103x code,
    /// with a module loaded from memory whose gfx103x code holds what can be fixed in place
    /// (`rmcp_core::gfx101x::in_place_fixes`).
    pub enum OverrideFixes {
        /// Forward a private copy with `s_nop 0` in those words.
        Fix = "fix",
        /// Forward the original and say what a fix would change.
        Warn = "warn",
        /// Do nothing.
        Off = "off",
    }

    /// Whether the programs rmcp starts get the variables that keep other software's
    /// known-wrong GPU code away (`quirks`).
    pub enum Quirks {
        On = "on" | "1",
        Off = "off" | "0",
    }

    /// How much the shim logs.
    pub enum LogLevel {
        Off = "off" | "none",
        Error = "error",
        Warn = "warn" | "warning",
        Info = "info",
        Debug = "debug",
        Trace = "trace",
    }
}

/// RMCP_HANG_AFTER: seconds a synchronizing call may wait before the stall block, or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HangAfter(pub Option<u32>);

impl HangAfter {
    /// The default: amdgpu's compute job timeout before linux 6.x made it 10 s for kernel
    /// queues (`amdgpu_device_get_job_timeout_settings`: "60000 for compute jobs"), the
    /// longest a compute job has ever been allowed to run before the driver called it hung;
    /// the KFD user queues HIP uses have no timeout at all. A wait this long is worth one
    /// block; it is said as "still running", never as a verdict.
    pub const DEFAULT: HangAfter = HangAfter(Some(60));
    /// The longest threshold accepted (a day).
    pub const MAX: u32 = 86_400;
}

impl Value for HangAfter {
    const ACCEPTED: &'static str = "seconds (1-86400), off, 0";
    fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "off" | "0" => Some(HangAfter(None)),
            t => t
                .parse::<u32>()
                .ok()
                .filter(|s| (1..=HangAfter::MAX).contains(s))
                .map(|s| HangAfter(Some(s))),
        }
    }
}

/// RMCP_STATS, RMCP_HOOK_DLSYM: `0` or `1`.
impl Value for bool {
    const ACCEPTED: &'static str = "0, 1";
    fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }
    }
}

/// RMCP_TARGETS: a list that must name at least one GPU (an empty one is a mistake).
impl Value for Vec<Gfx> {
    const ACCEPTED: &'static str = "comma-separated gfx names such as gfx1010,gfx1031";
    const EMPTY_IS_A_VALUE: bool = true;
    fn parse(text: &str) -> Option<Self> {
        parse_targets(text)
    }
}

/// RMCP_EXEMPT: substrings of library paths; empty entries are dropped.
impl Value for Vec<String> {
    const ACCEPTED: &'static str = "comma-separated substrings of caller library paths";
    const EMPTY_IS_A_VALUE: bool = true;
    fn parse(text: &str) -> Option<Self> {
        Some(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

/// A path that may be unset.
impl Value for Option<PathBuf> {
    const ACCEPTED: &'static str = "path";
    const IS_PATH: bool = true;
    fn parse(text: &str) -> Option<Self> {
        Some(Some(PathBuf::from(text)))
    }
}

/// A path with a default.
impl Value for PathBuf {
    const ACCEPTED: &'static str = "path";
    const IS_PATH: bool = true;
    fn parse(text: &str) -> Option<Self> {
        Some(PathBuf::from(text))
    }
}

/// One documented variable: a row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    pub name: &'static str,
    /// What it accepts (the type's [`Value::ACCEPTED`]).
    pub accepted: &'static str,
    /// The default as the docs show it.
    pub default: &'static str,
    pub help: &'static str,
}

/// The table: `field: Type = "VARIABLE", default EXPR, shown "TEXT", help "...";`.
macro_rules! config {
    ($(
        $field:ident : $ty:ty = $var:literal,
        default $default:expr, shown $shown:expr, help $help:literal;
    )*) => {
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Config {
            $( #[doc = concat!("`", $var, "`: ", $help)] pub $field: $ty, )*
            /// Problems found while reading, to be logged once logging is set up.
            pub warnings: Vec<String>,
        }

        /// The documented variables, in the table's order.
        pub const VARIABLES: &[Variable] = &[
            $( Variable {
                name: $var,
                accepted: <$ty as Value>::ACCEPTED,
                default: $shown,
                help: $help,
            }, )*
        ];

        impl Config {
            /// Reads the variables through `get`; `secure` (secure-execution mode) drops
            /// the path variables.
            pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>, secure: bool) -> Config {
                let mut warnings = Vec::new();
                $(
                    let $field: $ty = read::<$ty>($var, get($var), secure, &mut warnings)
                        .unwrap_or_else(|| $default);
                )*
                Config { $($field,)* warnings }
            }

            /// The defaults of every row.
            fn defaults() -> Config {
                Config { $($field: $default,)* warnings: Vec::new() }
            }
        }
    };
}

config! {
    mode: Mode = "RMCP_MODE", default Mode::Auto, shown "auto",
        help "What the shim does to allocations: `auto` rewrites for the affected GPUs, `force` treats every GPU as affected, `dry-run` decides, logs and counts but forwards every call unchanged, `off` forwards everything unchanged and only counts.";
    targets: Vec<Gfx> = "RMCP_TARGETS", default default_targets(), shown DEFAULT_TARGETS,
        help "The GPUs treated as affected.";
    finegrained: Finegrained = "RMCP_FINEGRAINED", default Finegrained::Coarsen,
        shown "coarsen",
        help "What `hipExtMallocWithFlags(.., hipDeviceMallocFinegrained)` becomes on affected GPUs: `coarsen` (coarse-grained VRAM) or `keep`.";
    exempt: Vec<String> = "RMCP_EXEMPT", default vec![DEFAULT_EXEMPT.to_owned()],
        shown DEFAULT_EXEMPT,
        help "Callers whose library path contains one of these are left alone (the caller is the object holding the return address); empty exempts nothing.";
    log: LogLevel = "RMCP_LOG", default LogLevel::Warn, shown "warn",
        help "How much the shim logs.";
    log_file: Option<PathBuf> = "RMCP_LOG_FILE", default None, shown "stderr",
        help "Where the shim logs (appended to).";
    stats: bool = "RMCP_STATS", default false, shown "0",
        help "`1`: a summary of the counters on stderr at exit.";
    stats_file: Option<PathBuf> = "RMCP_STATS_FILE", default None, shown "none",
        help "A JSON summary written at exit; `%p` becomes the process id. A report rmcp wrote there is replaced atomically (without `%p`, processes sharing the name keep the last report, and each one that replaces the report of another process of the same run says so); anything else (a device, a FIFO, `/dev/stdout`, a file the process holds open, a file that is not a report) is written or appended to, never replaced (below).";
    hip_library: Option<PathBuf> = "RMCP_HIP_LIBRARY", default None, shown "none",
        help "The runtime to load for callers that have none in their scopes (README: How the runtime is found).";
    sysfs_root: PathBuf = "RMCP_SYSFS_ROOT", default DEFAULT_SYSFS_ROOT.into(),
        shown DEFAULT_SYSFS_ROOT,
        help "The KFD topology root.";
    hook_dlsym: bool = "RMCP_HOOK_DLSYM", default true, shown "1",
        help "`1`: `dlsym` and `dlvsym` on a HIP runtime's handle hand back the shim's functions; `0`: lookups answer as glibc does.";
    buffer_descriptors: BufferDescriptors = "RMCP_BUFFER_DESCRIPTORS",
        default BufferDescriptors::Fix, shown "fix",
        help "A gfx1010-gfx1013 code object loaded from memory (`hipModuleLoadData`, `hipModuleLoadDataEx`) on a gfx1010-gfx1013 GPU whose buffer instructions take descriptors those GPUs drop (Triton's buffer ops: loads read 0, stores write nothing): `fix` hands the runtime a private copy with those descriptor literals in the RDNA layout, `warn` loads the original and says what to do, `off` does nothing. `RMCP_MODE=off` also leaves images alone; `dry-run` warns.";
    override_fixes: OverrideFixes = "RMCP_OVERRIDE_FIXES", default OverrideFixes::Fix,
        shown "fix",
        help "On a gfx1010-gfx1013 GPU that `HSA_OVERRIDE_GFX_VERSION` makes run gfx103x code, a module loaded from memory (`hipModuleLoadData`, `hipModuleLoadDataEx`), or a fat binary registered at start-up (`__hipRegisterFatBinary`: only the entry the runtime loads, bounded in bytes and time), whose gfx103x code holds `s_inst_prefetch` (gfx101x hangs on it) or an `s_clause` around an NSA image instruction: `fix` hands the runtime a private copy with `s_nop 0` in those words (same size, no result changed: docs/design.md), `warn` loads the original and says what a fix would change, `off` reads nothing and does nothing. Said once per process with what was fixed and what cannot be fixed in place, and when a bound is hit; `RMCP_MODE=off` also leaves images alone; `dry-run` warns.";
    hang_after: HangAfter = "RMCP_HANG_AFTER", default HangAfter::DEFAULT, shown "60",
        help "A synchronizing call (`hipDeviceSynchronize`, `hipStreamSynchronize`, `hipEventSynchronize`, a blocking `hipMemcpy`) that has waited this many seconds gets one block through the shim's log: the dispatch each queue is on and since when, the threads waiting, and once more a line when the wait ends. Nothing is stopped or signalled; `off` (or `0`) starts no watchdog. The default is amdgpu's old compute job timeout (docs/design.md).";
    quirks: Quirks = "RMCP_QUIRKS", default Quirks::On, shown "on",
        help "`on`: `rmcp run`, the container entrypoint and `rmcp_rdna.enable()` set `AMDGCN_USE_BUFFER_OPS=0` (and a separate `TORCHINDUCTOR_CACHE_DIR`) for programs on a machine with an RX 5000 (gfx1010-gfx1013), unless already set; `off`: they set neither.";
}

/// RDNA1 (gfx1010-gfx1013) and RDNA2 (gfx1030-gfx1036).
pub const DEFAULT_TARGETS: &str =
    "gfx1010,gfx1011,gfx1012,gfx1013,gfx1030,gfx1031,gfx1032,gfx1033,gfx1034,gfx1035,gfx1036";
/// RCCL needs coherent memory for correctness.
pub const DEFAULT_EXEMPT: &str = "librccl";
pub const DEFAULT_SYSFS_ROOT: &str = "/sys/class/kfd/kfd/topology";

/// The variables as docs/cli.md's table shows them: one row per variable, from the table
/// above (a test keeps docs/cli.md equal to this).
pub fn markdown_table() -> String {
    let mut out =
        String::from("| variable | what it does | values | default |\n|---|---|---|---|\n");
    for v in VARIABLES {
        out.push_str(&format!(
            "| `{}` | {} | {} | `{}` |\n",
            v.name, v.help, v.accepted, v.default
        ));
    }
    out
}

fn default_targets() -> Vec<Gfx> {
    parse_targets(DEFAULT_TARGETS).unwrap_or_default()
}

/// One variable's value, or None for its default (unset, empty, ignored or not accepted;
/// the last two with a warning).
fn read<T: Value>(
    name: &str,
    raw: Option<OsString>,
    secure: bool,
    warnings: &mut Vec<String>,
) -> Option<T> {
    let text = match raw?.into_string() {
        Ok(text) => text,
        Err(_) => {
            warnings.push(format!("{name} is not valid UTF-8; using its default"));
            return None;
        }
    };
    let empty = if T::IS_PATH {
        text.is_empty()
    } else {
        text.trim().is_empty()
    };
    if empty && !T::EMPTY_IS_A_VALUE {
        return None;
    }
    if T::IS_PATH && secure {
        warnings.push(format!(
            "{name} is ignored: the process runs in secure-execution mode"
        ));
        return None;
    }
    let value = T::parse(&text);
    if value.is_none() {
        warnings.push(format!(
            "{name}={} is not one of: {}; using the default",
            quoted(text.trim()),
            T::ACCEPTED
        ));
    }
    value
}

/// How many characters of a bad value a warning quotes.
const QUOTED_CHARS: usize = 64;

/// `text` quoted (Rust string escapes) for a warning: whole up to [`QUOTED_CHARS`]
/// characters, else its first ones and `… (N bytes)`.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::defaults()
    }
}

impl Config {
    /// Reads the process environment. `secure`: the process runs in secure-execution mode
    /// (the caller asks the kernel: `getauxval(AT_SECURE)`).
    pub fn from_env(secure: bool) -> Config {
        Config::from_lookup(|k| std::env::var_os(k), secure)
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
        assert_eq!(c.buffer_descriptors, BufferDescriptors::Fix);
        assert_eq!(c.quirks, Quirks::On);
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
            ("RMCP_BUFFER_DESCRIPTORS", "warn", |c| {
                c.buffer_descriptors == BufferDescriptors::Warn
            }),
            ("RMCP_BUFFER_DESCRIPTORS", " OFF", |c| {
                c.buffer_descriptors == BufferDescriptors::Off
            }),
            ("RMCP_QUIRKS", "off", |c| c.quirks == Quirks::Off),
            ("RMCP_QUIRKS", "0", |c| c.quirks == Quirks::Off),
            ("RMCP_QUIRKS", "On", |c| c.quirks == Quirks::On),
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
            ("RMCP_BUFFER_DESCRIPTORS", "patch"),
            ("RMCP_STATS", "yes"),
            ("RMCP_HOOK_DLSYM", "maybe"),
            ("RMCP_QUIRKS", "sometimes"),
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

    /// A bad value is quoted up to its first 64 characters, then `… (N bytes)`: a value of
    /// 120 KB must not become a 120 KB warning.
    #[test]
    fn warnings_quote_at_most_64_characters() {
        let x64 = "x".repeat(64);
        let e64 = "é".repeat(64);
        // (value, how the warning starts)
        let table: Vec<(String, String)> = vec![
            (
                "sometimes".into(),
                r#"RMCP_MODE="sometimes" is not one of"#.into(),
            ),
            (x64.clone(), format!(r#"RMCP_MODE="{x64}" is not one of"#)),
            (
                "x".repeat(65),
                format!(r#"RMCP_MODE="{x64}"… (65 bytes) is not one of"#),
            ),
            (
                "x".repeat(120 * 1024),
                format!(r#"RMCP_MODE="{x64}"… (122880 bytes) is not one of"#),
            ),
            (
                "é".repeat(100),
                format!(r#"RMCP_MODE="{e64}"… (200 bytes) is not one of"#),
            ),
            (
                "a\u{1}b".into(),
                r#"RMCP_MODE="a\u{1}b" is not one of"#.into(),
            ),
        ];
        for (value, start) in &table {
            let c = cfg(&[("RMCP_MODE", value)], false);
            assert_eq!(c.warnings.len(), 1);
            let w = &c.warnings[0];
            assert!(w.starts_with(start.as_str()), "{value:.80}: {w:.300}");
            assert!(w.len() < 300, "{} bytes", w.len());
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
    fn every_row_is_read_under_its_own_name() {
        use std::os::unix::ffi::OsStringExt;
        for v in VARIABLES {
            let c = Config::from_lookup(
                |k| (k == v.name).then(|| OsString::from_vec(vec![0xff])),
                false,
            );
            assert_eq!(c.warnings.len(), 1, "{}: {:?}", v.name, c.warnings);
            assert!(c.warnings[0].starts_with(v.name), "{:?}", c.warnings);
        }
        let mut names: Vec<_> = VARIABLES.iter().map(|v| v.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), VARIABLES.len());
    }

    #[test]
    fn the_shown_default_is_the_default() {
        for v in VARIABLES {
            let c = cfg(&[(v.name, v.default)], false);
            // A path that is unset by default shows a word ("stderr", "none"), not a path.
            if v.accepted == "path" && c.warnings.is_empty() && c != Config::default() {
                assert!(matches!(v.default, "stderr" | "none"), "{}", v.name);
                continue;
            }
            assert_eq!(c, Config::default(), "{}={}", v.name, v.default);
        }
    }

    #[test]
    fn hang_after_is_seconds_or_off() {
        let table: [(&str, Option<HangAfter>); 8] = [
            ("60", Some(HangAfter(Some(60)))),
            (" 5 ", Some(HangAfter(Some(5)))),
            ("off", Some(HangAfter(None))),
            ("0", Some(HangAfter(None))),
            ("86400", Some(HangAfter(Some(86_400)))),
            ("86401", None),
            ("-1", None),
            ("1.5", None),
        ];
        for (text, want) in table {
            assert_eq!(HangAfter::parse(text), want, "{text:?}");
        }
        assert_eq!(Config::defaults().hang_after, HangAfter(Some(60)));
    }

    #[test]
    fn the_cli_doc_shows_the_table() {
        const START: &str = "<!-- variables: generated from rmcp_core::config::VARIABLES -->\n";
        const END: &str = "<!-- /variables -->";
        let doc = include_str!("../../docs/cli.md");
        let start = doc
            .find(START)
            .expect("docs/cli.md has the variables marker")
            + START.len();
        let end = start
            + doc[start..]
                .find(END)
                .expect("docs/cli.md has the end marker");
        let want = markdown_table();
        assert!(
            doc[start..end] == want,
            "docs/cli.md's variable table is not the table in rmcp-core/src/config.rs; \
             put this between the markers:\n{want}"
        );
    }

    #[test]
    fn choices_spell_each_value_once() {
        fn check<T: Choice + PartialEq + std::fmt::Debug>() {
            let (all, names) = (T::ALL, T::NAMES);
            assert_eq!(all.len(), names.len());
            for (v, n) in all.iter().zip(names) {
                assert_eq!(v.as_str(), *n);
                assert_eq!(T::parse(n), Some(*v));
                assert_eq!(T::parse(&n.to_ascii_uppercase()), Some(*v));
            }
            assert_eq!(T::ACCEPTED, names.join(", "));
            assert_eq!(T::parse("nonsense"), None);
        }
        check::<Mode>();
        check::<LogLevel>();
        check::<Finegrained>();
        check::<BufferDescriptors>();
        check::<Quirks>();
        assert!(LogLevel::Off < LogLevel::Error && LogLevel::Debug < LogLevel::Trace);
    }
}
