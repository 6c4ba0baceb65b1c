//! The `triton` check: which Triton the Python environments hold (`triton`,
//! `pytorch-triton-rocm`), whether it compiles buffer loads and stores by default and what
//! the environment sets (`AMDGCN_USE_BUFFER_OPS`), and the kernels already compiled in
//! Triton's cache (`TRITON_CACHE_DIR`, else `$TRITON_HOME/.triton/cache`, else
//! `~/.triton/cache`) and Inductor's (`TORCHINDUCTOR_CACHE_DIR`, else
//! `<tmp>/torchinductor_<user>`, and the separate one `rmcp run` points Inductor at): each
//! `.hsaco` code object there is read by `rmcp_core::buffer_descriptors::scan_image`, and
//! each one for gfx1010-gfx1013 whose buffer descriptors make loads read 0 and drop stores
//! on those GPUs is named, with a remedy that works as printed (tests/remedy_triton.rs).
//!
//! Where Inductor keeps Triton's code objects: `torch._inductor.runtime.cache_dir_utils`
//! points Triton's cache at `<inductor cache>/triton/<device>` when TRITON_CACHE_DIR is
//! unset, and the FX graph cache bundles the kernels it reuses and writes them back there;
//! so the `.hsaco` files under Inductor's directory are the kernels it runs. The FX graph
//! entries themselves (pickles) are not decoded, and they carry copies of the kernels they
//! reuse: so the remedy for Inductor's cache removes the whole directory, while the one for
//! Triton's own cache removes only the entries (one directory per kernel, named by its hash)
//! that hold the broken code objects, and the other entries stay.
//!
//! Bounded: at most [`MAX_FILES`] code objects, [`MAX_FILE_BYTES`] each and
//! [`MAX_TOTAL_BYTES`] in all per cache, [`MAX_DEPTH`] directories deep and
//! [`MAX_ENTRIES`] entries per directory; symbolic links are not followed; only regular
//! files are opened (never a FIFO or a device), without blocking; the finding says when
//! the scan stopped early.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use rmcp_core::buffer_descriptors::scan_image;
use rmcp_core::quirks::{self, BUFFER_OPS_VARIABLE, INDUCTOR_CACHE_VARIABLE};

use super::report::{Check, Finding, Remedy, Status};

/// Code objects read per cache, at most.
pub const MAX_FILES: usize = 2_000;
/// Bytes read of one code object, at most (a larger one is skipped, and said).
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Bytes read per cache, at most.
pub const MAX_TOTAL_BYTES: u64 = 512 << 20;
/// Directory levels below a cache's root.
pub const MAX_DEPTH: usize = 8;
/// Entries read per directory.
const MAX_ENTRIES: usize = 20_000;
/// Entries one printed `rm -rf --` command names, at most: a command stays far below the
/// kernel's argument limit (32 paths of at most PATH_MAX bytes, quoted), and a cache with
/// many broken entries gets one command per 32 (at most [`MAX_FILES`] / 32 of them, as long
/// as the list of broken code objects above them).
const ENTRIES_PER_COMMAND: usize = 32;
/// The largest Triton source file read to learn its default.
const MAX_SOURCE_BYTES: u64 = 1 << 20;

/// Triton's issue about the descriptor layout on RDNA1 as users meet it, and the code.
const SRC_UNSLOTH: &str = "https://github.com/unslothai/unsloth/issues/11614";
const SRC_THEROCK: &str = "https://github.com/ROCm/TheRock/issues/6467";
const SRC_EMITTER: &str = "https://github.com/triton-lang/triton/blob/main/third_party/amd/lib/TritonAMDGPUToLLVM/BufferOpsEmitter.cpp";

/// One Triton install.
struct Install {
    /// `triton` or `pytorch-triton-rocm`.
    name: &'static str,
    version: Option<String>,
    /// The site-packages directory.
    site: PathBuf,
    /// Whether buffer ops are on when AMDGCN_USE_BUFFER_OPS is unset, and how that was
    /// learnt.
    default_on: Option<bool>,
    default_from: &'static str,
}

/// The distributions that install the `triton` package.
const DISTRIBUTIONS: [(&str, &str); 2] = [
    ("triton", "triton"),
    ("pytorch-triton-rocm", "pytorch_triton_rocm"),
];

fn sorted_entries(dir: &Path) -> Vec<std::fs::DirEntry> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = rd.take(MAX_ENTRIES).filter_map(Result::ok).collect();
    v.sort_by_key(|e| e.file_name());
    v
}

/// `triton-3.5.1.dist-info` -> `3.5.1` for the prefix `triton`.
fn dist_info_version(name: &str, prefix: &str) -> Option<String> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('-')?;
    let v = rest.strip_suffix(".dist-info")?;
    (!v.is_empty() && !v.contains('-')).then(|| v.to_string())
}

/// The default of `AMDGCN_USE_BUFFER_OPS` in Triton's source as installed: `knobs.py`
/// (3.4 and later: `env_bool("AMDGCN_USE_BUFFER_OPS")` off, `..., True)` on), else the AMD
/// backend's `compiler.py` (3.2, 3.3: on only for `"1"`).
pub fn default_from_source(knobs: Option<&str>, compiler: Option<&str>) -> Option<bool> {
    if let Some(k) = knobs {
        for line in k.lines() {
            let line: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            if let Some(i) = line.find("env_bool(\"AMDGCN_USE_BUFFER_OPS\"") {
                let args = &line[i + "env_bool(\"AMDGCN_USE_BUFFER_OPS\"".len()..];
                return Some(args.starts_with(",True"));
            }
        }
    }
    if let Some(c) = compiler {
        if c.contains("\"AMDGCN_USE_BUFFER_OPS\", \"0\")") {
            return Some(false);
        }
    }
    None
}

/// The default by release, from Triton's PyPI releases' `knobs.py` and `compiler.py`:
/// opt-in (`=1`) in 3.2-3.5, on by default from 3.6.0; None before 3.2 (no such knob) or
/// for a version that does not parse.
pub fn default_from_version(version: &str) -> Option<bool> {
    let mut it = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (it.next(), it.next()) else {
        return None;
    };
    match (major, minor) {
        (3, 2..=5) => Some(false),
        (3, 6..) | (4.., _) => Some(true),
        _ => None,
    }
}

fn read_text(path: &Path, max: u64) -> Option<String> {
    let f = open_regular(path).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

fn installs(site_packages: &[PathBuf]) -> Vec<Install> {
    let mut out = Vec::new();
    for sp in site_packages {
        let entries = sorted_entries(sp);
        for (name, prefix) in DISTRIBUTIONS {
            let Some(version) = entries
                .iter()
                .find_map(|e| dist_info_version(&e.file_name().to_string_lossy(), prefix))
            else {
                continue;
            };
            let pkg = sp.join("triton");
            let knobs = read_text(&pkg.join("knobs.py"), MAX_SOURCE_BYTES);
            let compiler = read_text(&pkg.join("backends/amd/compiler.py"), MAX_SOURCE_BYTES);
            let (default_on, default_from) =
                match default_from_source(knobs.as_deref(), compiler.as_deref()) {
                    Some(d) => (Some(d), "its source"),
                    None => (default_from_version(&version), "its version"),
                };
            out.push(Install {
                name,
                version: Some(version),
                site: sp.clone(),
                default_on,
                default_from,
            });
        }
    }
    out
}

/// O_NONBLOCK | O_NOFOLLOW open of a regular file only; anything else is refused before
/// it is opened, and checked again on the open file.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || std::io::Error::other("not a regular file");
    if !std::fs::symlink_metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(f)
}

/// One broken code object.
#[derive(Debug)]
struct Broken {
    path: PathBuf,
    /// The cache entry that holds it: its directory (Triton's cache keeps one per kernel),
    /// or the file itself when it lies in the cache's root.
    entry: PathBuf,
    targets: Vec<String>,
    kernels: Vec<String>,
    literals: usize,
    instructions: usize,
}

/// What a cache's scan found.
#[derive(Debug, Default)]
struct CacheScan {
    scanned: usize,
    bytes: u64,
    broken: Vec<Broken>,
    /// Why the scan stopped before the end (None: it read everything).
    stopped: Option<String>,
    /// Files passed over (too large, unreadable, not a code object).
    skipped: usize,
    /// The entries that hold the code objects seen (see [`Broken::entry`]).
    entries: BTreeSet<PathBuf>,
}

fn scan_cache(root: &Path) -> CacheScan {
    let mut s = CacheScan::default();
    walk(root, 0, &mut s);
    s
}

fn walk(dir: &Path, depth: usize, s: &mut CacheScan) {
    if s.stopped.is_some() {
        return;
    }
    for e in sorted_entries(dir) {
        if s.stopped.is_some() {
            return;
        }
        let Ok(t) = e.file_type() else { continue };
        let path = e.path();
        if t.is_dir() {
            if depth + 1 >= MAX_DEPTH {
                s.stopped = Some(format!("directories deeper than {MAX_DEPTH} levels"));
                return;
            }
            walk(&path, depth + 1, s);
        } else if t.is_file() && path.extension().is_some_and(|x| x == "hsaco") {
            let entry = if depth == 0 { &path } else { dir };
            scan_file(&path, entry, s);
        }
    }
}

fn scan_file(path: &Path, entry: &Path, s: &mut CacheScan) {
    if s.scanned >= MAX_FILES {
        s.stopped = Some(format!("more than {MAX_FILES} code objects"));
        return;
    }
    let Ok(f) = open_regular(path) else {
        s.skipped += 1;
        s.entries.insert(entry.to_path_buf());
        return;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_FILE_BYTES {
        s.skipped += 1;
        s.entries.insert(entry.to_path_buf());
        return;
    }
    if s.bytes + len > MAX_TOTAL_BYTES {
        s.stopped = Some(format!(
            "more than {} MiB of code objects",
            MAX_TOTAL_BYTES >> 20
        ));
        return;
    }
    s.entries.insert(entry.to_path_buf());
    let mut buf = Vec::with_capacity(len as usize);
    if f.take(MAX_FILE_BYTES).read_to_end(&mut buf).is_err() {
        s.skipped += 1;
        return;
    }
    s.scanned += 1;
    s.bytes += buf.len() as u64;
    let Ok(scan) = scan_image(&buf) else {
        s.skipped += 1;
        return;
    };
    let mut b = Broken {
        path: path.to_path_buf(),
        entry: entry.to_path_buf(),
        targets: Vec::new(),
        kernels: Vec::new(),
        literals: 0,
        instructions: 0,
    };
    for o in scan.objects.iter().filter(|o| o.runs_on_rdna1()) {
        if o.findings.is_empty() {
            continue;
        }
        if !b.targets.contains(&o.target) {
            b.targets.push(o.target.clone());
        }
        for f in &o.findings {
            b.literals += 1;
            b.instructions += f.buffer_at.len();
            let k = f.kernel.clone().unwrap_or_else(|| "(unnamed)".into());
            if !b.kernels.contains(&k) {
                b.kernels.push(k);
            }
        }
    }
    if b.literals > 0 {
        s.broken.push(b);
    }
}

/// A word for the shell: as it is when it needs no quoting, else in single quotes.
pub fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Whose cache: what its remedy may remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Triton's own: one directory per kernel, and nothing else refers to them; the broken
    /// entries alone are removed.
    Triton,
    /// Inductor's: its FX graph entries (not decoded) carry copies of the kernels and write
    /// them back, so the whole directory goes.
    Inductor,
}

/// The caches to scan: (what, whose, path).
fn caches(get: &dyn Fn(&str) -> Option<OsString>) -> Vec<(&'static str, Kind, PathBuf)> {
    let nonempty = |k: &str| get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = nonempty("HOME");
    let triton = nonempty("TRITON_CACHE_DIR").or_else(|| {
        nonempty("TRITON_HOME")
            .or(home)
            .map(|h| h.join(".triton/cache"))
    });
    let default = crate::quirks::inductor_default_dir(get);
    let inductor = nonempty(INDUCTOR_CACHE_VARIABLE).unwrap_or_else(|| PathBuf::from(&default));
    let ours = PathBuf::from(format!("{default}{}", quirks::INDUCTOR_CACHE_SUFFIX));
    let mut out = Vec::new();
    if let Some(t) = triton {
        out.push(("Triton's cache", Kind::Triton, t));
    }
    out.push(("Inductor's cache", Kind::Inductor, inductor.clone()));
    if ours != inductor {
        out.push(("Inductor's cache under rmcp run", Kind::Inductor, ours));
    }
    out
}

/// The findings of the check. `rdna1`: the topology shows an RX 5000.
pub fn findings(site_packages: &[PathBuf], rdna1: bool, out: &mut Vec<Finding>) {
    let get = |k: &str| std::env::var_os(k);
    findings_with(site_packages, rdna1, &get, out)
}

fn findings_with(
    site_packages: &[PathBuf],
    rdna1: bool,
    get: &dyn Fn(&str) -> Option<OsString>,
    out: &mut Vec<Finding>,
) {
    let set = get(BUFFER_OPS_VARIABLE)
        .map(|v| v.to_string_lossy().into_owned())
        .filter(|v| !v.is_empty());
    let found = installs(site_packages);
    if found.is_empty() {
        out.push(
            Finding::new(
                Check::Triton,
                Status::Info,
                "No Triton (triton, pytorch-triton-rocm) in the Python environments doctor \
                 reads.",
            )
            .with("buffer_ops_variable", set.clone()),
        );
    }
    for i in &found {
        let version = i.version.as_deref().unwrap_or("unknown");
        let default = match i.default_on {
            Some(true) => "on by default (AMDGCN_USE_BUFFER_OPS=0 turns them off)",
            Some(false) => "off unless AMDGCN_USE_BUFFER_OPS=1",
            None => "not known to this doctor",
        };
        let effective = match set.as_deref() {
            Some(v) => quirks::triton_bool(v).or(i.default_on),
            None => i.default_on,
        };
        let env_text = match set.as_deref() {
            Some(v) => format!("the environment sets {BUFFER_OPS_VARIABLE}={v}"),
            None => format!("{BUFFER_OPS_VARIABLE} is unset here"),
        };
        let on_text = match effective {
            Some(true) => "so its kernels use buffer loads and stores",
            Some(false) => "so its kernels use global loads and stores",
            None => "so whether its kernels use buffer loads and stores is unknown",
        };
        let mut msg = format!(
            "{} {version} in {}: buffer loads and stores {default} (from {}); {env_text}, {on_text}.",
            i.name,
            i.site.display(),
            i.default_from
        );
        let status = if rdna1 && effective != Some(false) {
            msg.push_str(
                " On an RX 5000 (gfx1010-gfx1013) Triton's buffer descriptors make those loads \
                 read 0 and drop the stores, with no error.",
            );
            Status::Warn
        } else {
            Status::Ok
        };
        let mut f = Finding::new(Check::Triton, status, msg)
            .with("distribution", i.name)
            .with("version", i.version.clone())
            .with("path", i.site.display().to_string())
            .with("buffer_ops_default", i.default_on)
            .with("buffer_ops_variable", set.clone())
            .with("buffer_ops", effective);
        if status == Status::Warn {
            f = f
                .source(SRC_UNSLOTH)
                .see_also(SRC_THEROCK)
                .see_also(SRC_EMITTER)
                .remedy(buffer_ops_remedy());
        }
        out.push(f);
    }
    for (what, kind, dir) in caches(get) {
        out.push(cache_finding(what, kind, &dir));
    }
}

fn buffer_ops_remedy() -> Remedy {
    Remedy::new(
        "Start the program with `rmcp run` (it sets AMDGCN_USE_BUFFER_OPS=0 on an RX 5000, and \
         the shim fixes the descriptors of buffer-op kernels as they load), or set the \
         variable yourself in the shell that starts it.",
    )
    .command(format!("export {BUFFER_OPS_VARIABLE}=0"))
    .source(SRC_UNSLOTH)
}

/// `n` and the noun, singular or plural.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The remedy for a cache with broken code objects: for Triton's, `rm -rf --` of the
/// entries that hold them (at most [`ENTRIES_PER_COMMAND`] to a command, each path quoted
/// for the shell), the other entries kept; for Inductor's, of the whole directory.
fn cache_remedy(kind: Kind, dir: &Path, s: &CacheScan) -> Remedy {
    let from_now_on = format!(
        "Compile them without buffer ops from now on: start the program with `rmcp run`, or \
         keep {BUFFER_OPS_VARIABLE}=0 set."
    );
    match kind {
        Kind::Triton => {
            let broken: BTreeSet<&Path> = s.broken.iter().map(|b| b.entry.as_path()).collect();
            let others = s.entries.len().saturating_sub(broken.len());
            let rest = if s.stopped.is_some() {
                " The scan stopped early: run `rmcp doctor` again afterwards to read the rest."
            } else {
                ""
            };
            let mut r = Remedy::new(format!(
                "Remove the {} holding the code objects named above (Triton keeps one \
                 directory per kernel, and the program compiles those again); the {} with code \
                 objects, and the rest of the cache, stay. {from_now_on}{rest}",
                count(broken.len(), "entry", "entries"),
                count(others, "other entry", "other entries"),
            ));
            let words: Vec<String> = broken
                .iter()
                .map(|e| shell_word(&e.display().to_string()))
                .collect();
            for chunk in words.chunks(ENTRIES_PER_COMMAND) {
                r = r.command(format!("rm -rf -- {}", chunk.join(" ")));
            }
            r
        }
        Kind::Inductor => Remedy::new(format!(
            "Remove the cache (the program compiles its kernels again): its FX graph entries, \
             which doctor does not decode, carry copies of the kernels they reuse and write \
             them back, so removing only the {} named above would not last. {from_now_on}",
            count(s.broken.len(), "code object", "code objects"),
        ))
        .command(format!(
            "rm -rf -- {}",
            shell_word(&dir.display().to_string())
        )),
    }
    .command(format!("export {BUFFER_OPS_VARIABLE}=0"))
    .source(SRC_UNSLOTH)
}

fn cache_finding(what: &str, kind: Kind, dir: &Path) -> Finding {
    let shown = dir.display().to_string();
    let meta = std::fs::symlink_metadata(dir);
    let base = |status, msg: String| {
        Finding::new(Check::Triton, status, msg)
            .with("cache", what)
            .with("path", shown.clone())
    };
    match meta {
        Err(_) => {
            return base(Status::Ok, format!("{what} {shown}: not present."))
                .with("scanned", 0)
                .with("broken", Vec::<String>::new())
                .with("broken_entries", Vec::<String>::new());
        }
        Ok(m) if !m.is_dir() => {
            return base(
                Status::Info,
                format!("{what} {shown}: not a directory (a symbolic link is not followed)."),
            )
            .with("scanned", 0)
            .with("broken", Vec::<String>::new())
            .with("broken_entries", Vec::<String>::new());
        }
        Ok(_) => {}
    }
    let s = scan_cache(dir);
    let stopped = s
        .stopped
        .as_deref()
        .map(|w| format!(" The scan stopped early ({w}): the rest was not read."))
        .unwrap_or_default();
    let skipped = if s.skipped > 0 {
        format!(" {} file(s) could not be read as code objects.", s.skipped)
    } else {
        String::new()
    };
    let broken_entries: Vec<String> = s
        .broken
        .iter()
        .map(|b| b.entry.display().to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let broken_paths: Vec<String> = s
        .broken
        .iter()
        .map(|b| b.path.display().to_string())
        .collect();
    let f = if s.broken.is_empty() {
        base(
            if s.stopped.is_some() {
                Status::Info
            } else {
                Status::Ok
            },
            format!(
                "{what} {shown}: clean: {} code object(s) read, none with buffer descriptors that \
                 drop writes on an RX 5000.{skipped}{stopped}",
                s.scanned
            ),
        )
    } else {
        let mut f = base(
            Status::Warn,
            format!(
                "{what} {shown}: {} of {} code object(s) read are for an RX 5000 (gfx1010-gfx1013) \
                 and build buffer descriptors that make their loads read 0 and drop their stores \
                 there; a program that reuses them computes zeros or NaN, with no error.\
                 {skipped}{stopped}",
                s.broken.len(),
                s.scanned
            ),
        );
        for b in &s.broken {
            f.details.push(format!(
                "{}: {} (kernel {}; {} descriptor literal(s) feeding {} buffer instruction(s))",
                b.path.display(),
                b.targets.join(", "),
                b.kernels.join(", "),
                b.literals,
                b.instructions
            ));
        }
        f.source(SRC_UNSLOTH)
            .see_also(SRC_EMITTER)
            .remedy(cache_remedy(kind, dir, &s))
    };
    f.with("scanned", s.scanned)
        .with("bytes", s.bytes)
        .with("broken", broken_paths)
        .with("broken_entries", broken_entries)
        .with("stopped_early", s.stopped.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_by_source_and_by_version() {
        // The lines as Triton's PyPI releases have them.
        let k34 = "    use_buffer_ops: env_bool = env_bool(\"AMDGCN_USE_BUFFER_OPS\")\n";
        let k36 = "    use_buffer_ops: env_bool = env_bool(\"AMDGCN_USE_BUFFER_OPS\", True)\n";
        let c33 = "        return os.environ.get(\"AMDGCN_USE_BUFFER_OPS\", \"0\") == \"1\"\n";
        assert_eq!(default_from_source(Some(k34), None), Some(false));
        assert_eq!(default_from_source(Some(k36), None), Some(true));
        assert_eq!(default_from_source(None, Some(c33)), Some(false));
        assert_eq!(default_from_source(Some("x = 1\n"), Some("y\n")), None);
        for (v, want) in [
            ("3.1.0", None),
            ("3.2.0", Some(false)),
            ("3.3.1", Some(false)),
            ("3.4.0", Some(false)),
            ("3.5.1", Some(false)),
            ("3.6.0", Some(true)),
            ("3.9.0", Some(true)),
            ("3.5.1+gitabc", Some(false)),
            ("4.0.0", Some(true)),
            ("junk", None),
        ] {
            assert_eq!(default_from_version(v), want, "{v}");
        }
    }

    #[test]
    fn dist_info_names() {
        assert_eq!(
            dist_info_version("triton-3.5.1.dist-info", "triton").as_deref(),
            Some("3.5.1")
        );
        assert_eq!(
            dist_info_version("pytorch_triton_rocm-3.4.0.dist-info", "pytorch_triton_rocm")
                .as_deref(),
            Some("3.4.0")
        );
        assert_eq!(
            dist_info_version("triton_kernels-1.0.dist-info", "triton"),
            None
        );
        assert_eq!(dist_info_version("triton-3.5.1.data", "triton"), None);
    }

    #[test]
    fn shell_words_paste_as_one_word() {
        assert_eq!(shell_word("/tmp/torchinductor_a"), "/tmp/torchinductor_a");
        assert_eq!(shell_word("/h/a b"), "'/h/a b'");
        assert_eq!(shell_word("/h/it's"), "'/h/it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    fn broken_in(entry: &Path) -> Broken {
        Broken {
            path: entry.join("k.hsaco"),
            entry: entry.to_path_buf(),
            targets: vec!["gfx1010".into()],
            kernels: vec!["k".into()],
            literals: 1,
            instructions: 2,
        }
    }

    #[test]
    fn the_triton_remedy_names_the_broken_entries_only() {
        let root = Path::new("/c/it's cache");
        let mut s = CacheScan::default();
        for i in 0..40 {
            s.entries.insert(root.join(format!("E{i:02}")));
        }
        for i in 0..34 {
            s.broken.push(broken_in(&root.join(format!("E{i:02}"))));
        }
        // A second broken object in an entry already named: one path for both.
        s.broken.push(broken_in(&root.join("E00")));
        let r = cache_remedy(Kind::Triton, root, &s);
        assert!(
            r.text.contains("Remove the 34 entries holding")
                && r.text.contains("the 6 other entries with code objects"),
            "{}",
            r.text
        );
        // 32 entries to a command, each quoted; never the cache itself, never a glob.
        assert_eq!(r.commands.len(), 3, "{:?}", r.commands);
        let first: Vec<&str> = r.commands[0].split(" '").collect();
        assert_eq!(first.len(), 33, "{}", r.commands[0]);
        assert_eq!(first[0], "rm -rf --");
        assert_eq!(first[1], "/c/it'\\''s cache/E00'");
        assert_eq!(
            r.commands[1],
            "rm -rf -- '/c/it'\\''s cache/E32' '/c/it'\\''s cache/E33'"
        );
        assert_eq!(r.commands[2], "export AMDGCN_USE_BUFFER_OPS=0");
        assert!(!r.commands.iter().any(|c| c.contains('*')));
        // Inductor's cache goes as a whole (its FX graph entries hold copies).
        let r = cache_remedy(Kind::Inductor, root, &s);
        assert_eq!(r.commands[0], "rm -rf -- '/c/it'\\''s cache'");
        assert!(r.text.contains("FX graph"), "{}", r.text);
    }

    #[test]
    fn the_triton_remedy_run_by_the_shell_keeps_the_good_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("it's a cache");
        let mut s = CacheScan::default();
        for e in ["BAD1", "GOOD", "bad two", "GOOD2"] {
            std::fs::create_dir_all(root.join(e)).unwrap();
            std::fs::write(root.join(e).join("k.hsaco"), b"x").unwrap();
            s.entries.insert(root.join(e));
        }
        // A code object in the cache's root is its own entry: the file goes, not the root.
        std::fs::write(root.join("bad.hsaco"), b"x").unwrap();
        for e in ["BAD1", "bad two", "bad.hsaco"] {
            let mut b = broken_in(&root.join(e));
            if e.ends_with(".hsaco") {
                b.path = root.join(e);
            }
            s.entries.insert(b.entry.clone());
            s.broken.push(b);
        }
        let r = cache_remedy(Kind::Triton, &root, &s);
        assert!(r.text.contains("the 2 other entries"), "{}", r.text);
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("set -e\n{}", r.commands.join("\n"))])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let mut left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["GOOD", "GOOD2"]);
    }

    #[test]
    fn a_fifo_in_a_cache_is_passed_over_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("k.hsaco");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::fs::write(dir.path().join("junk.hsaco"), b"not an elf").unwrap();
        let s = scan_cache(dir.path());
        assert_eq!((s.scanned, s.broken.len()), (1, 0), "{s:?}");
        assert_eq!(s.skipped, 1);
    }

    #[test]
    fn the_scan_stops_at_its_file_limit_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_FILES {
            std::fs::write(dir.path().join(format!("{i:05}.hsaco")), b"x").unwrap();
        }
        let s = scan_cache(dir.path());
        assert_eq!(s.scanned, MAX_FILES);
        assert!(
            s.stopped
                .as_deref()
                .is_some_and(|w| w.contains("code objects")),
            "{s:?}"
        );
        let f = cache_finding("Triton's cache", Kind::Triton, dir.path());
        assert!(f.message.contains("stopped early"), "{}", f.message);
        assert_eq!(f.status, Status::Info);
    }
}
