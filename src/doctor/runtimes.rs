//! The `hip-runtime` check: which libamdhip64 a process would load. The ld.so search
//! (LD_LIBRARY_PATH, then the ld.so cache), ROCm's own directories, and copies bundled in
//! Python site-packages (PyTorch wheels ship one in torch/lib). Versions come from the file
//! names (libamdhip64.so.5.2.21153 -> 5.2.21153); the runtime is never loaded.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp_sys::locate::{FILE_PREFIX, is_runtime_file};

use super::report::{Check, Finding, LibraryRow, Origin, Remedy, Status};

/// Directory entries read per directory, at most (site-packages can be large).
const MAX_ENTRIES: usize = 4096;
/// How long python3 may take to name its site-packages.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(5);

/// The version in a runtime file name: `libamdhip64.so.6.4.60403` -> `6.4.60403`.
pub fn version_from_name(name: &str) -> Option<String> {
    let rest = name.strip_prefix(FILE_PREFIX)?;
    let v = rest.strip_prefix('.')?;
    (!v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| v.to_string())
}

/// `libamdhip64.so.N`: what DT_NEEDED names and ld.so opens.
fn is_soname(name: &str) -> bool {
    version_from_name(name).is_some_and(|v| !v.contains('.'))
}

/// Runtime files directly in `dir`, sorted by name.
fn runtime_files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .take(MAX_ENTRIES)
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_str().is_some_and(is_runtime_file) && p.is_file())
        .collect();
    out.sort();
    out
}

/// `ldconfig -p` entries for the runtime: (soname, path).
fn ld_cache() -> Vec<(String, PathBuf)> {
    let candidates = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"];
    for exe in candidates {
        let Ok(out) = Command::new(exe)
            .arg("-p")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
        else {
            continue;
        };
        if !out.status.success() {
            continue;
        }
        return parse_ld_cache(&String::from_utf8_lossy(&out.stdout));
    }
    Vec::new()
}

/// Parses `ldconfig -p`: `\tlibamdhip64.so.5 (libc6,x86-64) => /lib/.../libamdhip64.so.5`.
pub fn parse_ld_cache(text: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some((left, path)) = line.split_once(" => ") else {
            continue;
        };
        let name = left.split_whitespace().next().unwrap_or("");
        if !is_runtime_file(name) {
            continue;
        }
        // Only this machine's word size: a 32-bit entry would never be loaded by x86-64.
        if cfg!(target_pointer_width = "64") && !left.contains("64") {
            continue;
        }
        out.push((name.to_string(), PathBuf::from(path.trim())));
    }
    out
}

/// Site-packages directories of the python3 on PATH, or of the interpreter RMCP_PYTHON
/// names (empty: do not ask); none if there is none or it takes too long.
pub fn site_packages() -> Vec<PathBuf> {
    let python = std::env::var_os("RMCP_PYTHON").unwrap_or_else(|| "python3".into());
    if python.is_empty() {
        return Vec::new();
    }
    let code = "import site,sys\n\
                p=[]\n\
                try: p+=site.getsitepackages()\n\
                except Exception: pass\n\
                try: p.append(site.getusersitepackages())\n\
                except Exception: pass\n\
                p+=[x for x in sys.path if x.endswith(('site-packages','dist-packages'))]\n\
                print('\\n'.join(dict.fromkeys(p)))";
    let Ok(mut child) = Command::new(&python)
        .args(["-I", "-c", code])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return Vec::new();
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < PYTHON_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Vec::new();
            }
        }
    }
    let mut text = String::new();
    if let Some(mut so) = child.stdout.take() {
        use std::io::Read;
        let _ = so.by_ref().take(64 * 1024).read_to_string(&mut text);
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect()
}

/// The site-packages of the active virtual environment (VIRTUAL_ENV) and conda
/// environment (CONDA_PREFIX): `<prefix>/lib/python3.*/site-packages`.
pub fn env_site_packages() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        let Some(prefix) = std::env::var_os(var).filter(|v| !v.is_empty()) else {
            continue;
        };
        let lib = PathBuf::from(prefix).join("lib");
        let Ok(rd) = std::fs::read_dir(&lib) else {
            continue;
        };
        let mut v: Vec<PathBuf> = rd
            .take(MAX_ENTRIES)
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        v.sort();
        out.extend(v);
    }
    out
}

struct Found {
    path: PathBuf,
    origin: Origin,
    /// Soname this entry answers to, for ld.so's choice.
    soname: Option<String>,
}

/// Every copy found, deduplicated by the real file, in ld.so order first; `site_packages`
/// from [`site_packages`].
pub fn search(site_packages: &[PathBuf]) -> Vec<LibraryRow> {
    let mut found: Vec<Found> = Vec::new();

    // 1. LD_LIBRARY_PATH (ld.so searches it before the cache).
    if let Some(v) = std::env::var_os("LD_LIBRARY_PATH") {
        for dir in std::env::split_paths(&v).filter(|d| !d.as_os_str().is_empty()) {
            for p in runtime_files_in(&dir) {
                let soname = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .filter(|n| is_soname(n));
                found.push(Found {
                    path: p,
                    origin: Origin::LdLibraryPath,
                    soname,
                });
            }
        }
    }
    // 2. The ld.so cache.
    for (name, path) in ld_cache() {
        let soname = is_soname(&name).then(|| name.clone());
        found.push(Found {
            path,
            origin: Origin::LdCache,
            soname,
        });
    }
    // 3. ROCm installations.
    let mut rocm_dirs: Vec<PathBuf> = Vec::new();
    if let Some(r) = std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty()) {
        rocm_dirs.push(PathBuf::from(r).join("lib"));
    }
    rocm_dirs.push(PathBuf::from("/opt/rocm/lib"));
    if let Ok(rd) = std::fs::read_dir("/opt") {
        let mut extra: Vec<PathBuf> = rd
            .take(MAX_ENTRIES)
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("rocm-"))
            .map(|e| e.path().join("lib"))
            .collect();
        extra.sort();
        rocm_dirs.extend(extra);
    }
    for dir in rocm_dirs {
        for p in runtime_files_in(&dir) {
            found.push(Found {
                path: p,
                origin: Origin::Rocm,
                soname: None,
            });
        }
    }
    // 4. Python site-packages: <package>/lib/ and <package>/ (torch/lib, rocm wheels).
    for sp in site_packages {
        let Ok(rd) = std::fs::read_dir(sp) else {
            continue;
        };
        let mut pkgs: Vec<PathBuf> = rd
            .take(MAX_ENTRIES)
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        pkgs.sort();
        for pkg in pkgs {
            for dir in [pkg.join("lib"), pkg.clone()] {
                for p in runtime_files_in(&dir) {
                    found.push(Found {
                        path: p,
                        origin: Origin::SitePackages,
                        soname: None,
                    });
                }
            }
        }
    }
    collate(found)
}

fn collate(found: Vec<Found>) -> Vec<LibraryRow> {
    let mut rows: Vec<LibraryRow> = Vec::new();
    let mut chosen_sonames: Vec<String> = Vec::new();
    for f in found {
        let real = std::fs::canonicalize(&f.path).unwrap_or_else(|_| f.path.clone());
        let real_s = real.display().to_string();
        let as_s = f.path.display().to_string();
        let idx = match rows.iter().position(|r| r.path == real_s) {
            Some(i) => i,
            None => {
                let name = real
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                rows.push(LibraryRow {
                    path: real_s.clone(),
                    version: version_from_name(&name),
                    found_as: Vec::new(),
                    origins: Vec::new(),
                    default_for: Vec::new(),
                });
                rows.len() - 1
            }
        };
        let row = &mut rows[idx];
        if !row.found_as.contains(&as_s) {
            row.found_as.push(as_s);
        }
        if !row.origins.contains(&f.origin) {
            row.origins.push(f.origin);
        }
        // ld.so's choice for a soname: the first LD_LIBRARY_PATH or cache entry for it.
        if matches!(f.origin, Origin::LdLibraryPath | Origin::LdCache) {
            // ld.so opens a file named exactly like the soname.
            if let Some(s) = f.soname.filter(|s| !chosen_sonames.contains(s)) {
                chosen_sonames.push(s.clone());
                row.default_for.push(s);
            }
        }
    }
    rows
}

fn origin_text(o: Origin) -> &'static str {
    match o {
        Origin::LdLibraryPath => "LD_LIBRARY_PATH",
        Origin::LdCache => "the ld.so cache",
        Origin::Rocm => "a ROCm directory",
        Origin::SitePackages => "Python site-packages",
    }
}

pub fn findings(libs: &[LibraryRow], out: &mut Vec<Finding>) {
    if libs.is_empty() {
        out.push(
            Finding::new(
                Check::HipRuntime,
                Status::Warn,
                "No libamdhip64 found in LD_LIBRARY_PATH, the ld.so cache, /opt/rocm*/lib or \
                 Python site-packages: HIP programs will not start here.",
            )
            .remedy(Remedy::new(
                "Install a HIP runtime: a ROCm build of PyTorch brings its own (torch/lib, or \
                 TheRock's _rocm_sdk_core package), Debian and Ubuntu package it as \
                 libamdhip64, AMD's ROCm packages put it in /opt/rocm/lib. If it is installed \
                 elsewhere, add that directory to LD_LIBRARY_PATH or give the file to \
                 RMCP_HIP_LIBRARY.",
            )),
        );
        return;
    }
    for lib in libs {
        let version = lib.version.as_deref().unwrap_or("of unknown version");
        let origins: Vec<&str> = lib.origins.iter().map(|o| origin_text(*o)).collect();
        let mut msg = format!(
            "libamdhip64 {version} at {} (from {}).",
            lib.path,
            origins.join(", ")
        );
        if !lib.default_for.is_empty() {
            msg.push_str(&format!(
                " A program linked against {} loads this copy.",
                lib.default_for.join(" or ")
            ));
        }
        if lib.origins.contains(&Origin::SitePackages) {
            msg.push_str(
                " A Python package bundles it (PyTorch loads its own copy from torch/lib); \
                 rmcp hooks whichever copy the process has mapped.",
            );
        }
        out.push(
            Finding::new(Check::HipRuntime, Status::Info, msg)
                .with("path", lib.path.clone())
                .with("version", lib.version.clone())
                .with(
                    "origins",
                    lib.origins.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
                ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_file_names() {
        assert_eq!(
            version_from_name("libamdhip64.so.5.2.21153").as_deref(),
            Some("5.2.21153")
        );
        assert_eq!(version_from_name("libamdhip64.so.6").as_deref(), Some("6"));
        assert_eq!(version_from_name("libamdhip64.so"), None);
        assert_eq!(version_from_name("libamdhip64.so.6.x"), None);
        assert_eq!(version_from_name("libamdhip64.so."), None);
        assert!(is_soname("libamdhip64.so.6"));
        assert!(!is_soname("libamdhip64.so.6.4.60403"));
        assert!(!is_soname("libamdhip64.so"));
    }

    #[test]
    fn ld_cache_lines() {
        let text = "3 libs found in cache `/etc/ld.so.cache'\n\
            \tlibamdhip64.so.5 (libc6,x86-64) => /lib/x86_64-linux-gnu/libamdhip64.so.5\n\
            \tlibamdhip64.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libamdhip64.so\n\
            \tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n";
        let v = parse_ld_cache(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].0, "libamdhip64.so.5");
        assert_eq!(
            v[0].1,
            PathBuf::from("/lib/x86_64-linux-gnu/libamdhip64.so.5")
        );
    }
}
