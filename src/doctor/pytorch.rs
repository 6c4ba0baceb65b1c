//! The `pytorch` check: every PyTorch install doctor can find, which build it is, which GPU
//! targets its libraries carry, and for each GPU the verdict and the remedy the decision
//! table (`rmcp_core::remedy::advise`) gives for card, override and build.
//!
//! Where: the `torch` package in the site-packages directories (python3's, the active
//! VIRTUAL_ENV's or CONDA_PREFIX's), or under the paths `--scan` names. Which build:
//! `torch/version.py` (`2.9.1+rocm7.0`), TheRock's device packages beside it
//! (`amd_torch_device_gfxNNNN-*.dist-info/METADATA`) and family packages
//! (`_rocm_sdk_libraries_<family>`, whose `lib` the runtime search and the code-object scan
//! read like any package's), a Debian package (dpkg's status file, with its
//! `X-ROCm-GPU-Architecture` field compared with what the scan found) or an Arch package
//! (pacman's local database). The dpkg and pacman databases are read under the root the
//! install lives in (`<root>/usr/lib/...` -> `<root>/var/lib/dpkg/status`), so a chroot or a
//! constructed tree given to `--scan` brings its own.
//!
//! As in every check, nothing here may panic on odd input: a broken version.py, unreadable
//! metadata or a torch directory without libraries is a finding.

use std::path::{Path, PathBuf};

use rmcp_core::gfx::Gfx;
use rmcp_core::remedy::{Advice, advise, sources, therock_device};

use super::code_objects::{self, Gpu, Scanned};
use super::remedies;
use super::report::{Check, Finding, Remedy, Status};

/// How deep `--scan` looks for a torch package.
const MAX_DEPTH: usize = 8;
/// Directory entries read per directory, at most.
const MAX_ENTRIES: usize = 20_000;

/// One install, as found on disk.
struct Install {
    /// The `torch` directory.
    dir: PathBuf,
    /// The directory holding it (site-packages, dist-packages).
    parent: PathBuf,
    version: Option<String>,
    build: &'static str,
    /// The package it came from (`python3-torch-rocm 2.6.0+dfsg-1`), when a database says.
    package: Option<String>,
    /// TheRock's device packages: the targets their names give.
    devices: Vec<Gfx>,
    /// TheRock's family packages (`gfx101X-dgpu`).
    families: Vec<String>,
    /// Targets a package database declares (Debian's X-ROCm-GPU-Architecture).
    declared: Option<Vec<Gfx>>,
    /// What could not be read.
    problems: Vec<String>,
}

fn entries(dir: &Path) -> Vec<std::fs::DirEntry> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = rd.take(MAX_ENTRIES).filter_map(Result::ok).collect();
    v.sort_by_key(|e| e.file_name());
    v
}

/// A directory that looks like the torch package.
fn is_torch(dir: &Path) -> bool {
    dir.file_name().is_some_and(|n| n == "torch")
        && (dir.join("version.py").exists()
            || dir.join("__init__.py").exists()
            || dir.join("lib").is_dir())
}

/// The torch packages: in each site-packages directory, or under each `--scan` path.
fn find(site_packages: &[PathBuf], scan: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if scan.is_empty() {
        for sp in site_packages {
            let t = sp.join("torch");
            if is_torch(&t) {
                found.push(t);
            }
        }
    } else {
        for p in scan {
            walk(p, 0, &mut found);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    found.retain(|p| seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())));
    found
}

fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if is_torch(dir) {
        found.push(dir.to_path_buf());
        return;
    }
    if depth >= MAX_DEPTH {
        return;
    }
    for e in entries(dir) {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&e.path(), depth + 1, found);
        }
    }
}

/// `__version__ = '2.9.1+rocm7.0'` in torch/version.py.
pub fn parse_version_py(text: &str) -> Option<String> {
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("__version__") else {
            continue;
        };
        let rest = rest.trim_start();
        // `__version__ = '...'` or, annotated, `__version__: str = '...'`.
        let rest = match rest.strip_prefix(':') {
            Some(r) => r.split_once('=')?.1,
            None => rest.strip_prefix('=')?,
        }
        .trim();
        let q = rest.chars().next()?;
        if q != '\'' && q != '"' {
            return None;
        }
        let inner = &rest[1..];
        let end = inner.find(q)?;
        let v = &inner[..end];
        return (!v.is_empty() && !v.contains(char::is_whitespace)).then(|| v.to_string());
    }
    None
}

/// A pytorch.org ROCm wheel's version: `2.9.1+rocm7.0` (nothing after the ROCm version).
fn is_pytorch_org_version(v: &str) -> bool {
    v.split_once('+').is_some_and(|(_, local)| {
        local.strip_prefix("rocm").is_some_and(|r| {
            !r.is_empty()
                && r.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// The `Name:` of a dist-info METADATA file.
fn metadata_name(text: &str) -> Option<String> {
    text.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix("Name:"))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
}

/// One installed package's stanza in dpkg's status file, if installed.
fn dpkg_stanza<'a>(status: &'a str, package: &str) -> Option<&'a str> {
    status.split("\n\n").find(|st| {
        st.lines()
            .any(|l| l.strip_prefix("Package: ").map(str::trim) == Some(package))
            && st.lines().any(|l| {
                l.strip_prefix("Status: ")
                    .is_some_and(|v| v.trim().ends_with(" installed"))
            })
    })
}

fn field<'a>(stanza: &'a str, name: &str) -> Option<&'a str> {
    stanza
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// `X-ROCm-GPU-Architecture: gfx1010 gfx1030 ...` (spaces, commas or semicolons).
pub fn parse_gpu_architectures(v: &str) -> Vec<Gfx> {
    v.split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .filter_map(|t| Gfx::parse(t.split(':').next().unwrap_or(t)))
        .collect()
}

/// The root a system path lives under: `<root>/usr/lib/...` -> `<root>`.
fn system_root(path: &Path) -> Option<PathBuf> {
    let s = path.to_str()?;
    let i = s.find("/usr/lib/")?;
    Some(PathBuf::from(if i == 0 { "/" } else { &s[..i] }))
}

fn read(dir: PathBuf, parent: PathBuf) -> Install {
    let mut i = Install {
        dir,
        parent,
        version: None,
        build: "unknown",
        package: None,
        devices: Vec::new(),
        families: Vec::new(),
        declared: None,
        problems: Vec::new(),
    };
    let vpy = i.dir.join("version.py");
    match crate::input::read_head(&vpy, crate::input::SMALL_FILE_BYTES) {
        Ok(text) => match parse_version_py(&text) {
            Some(v) => i.version = Some(v),
            None => i.problems.push(format!(
                "{} has no readable __version__ (a broken or hand-edited file)",
                vpy.display()
            )),
        },
        Err(e) => i
            .problems
            .push(format!("{} cannot be read ({})", vpy.display(), e.why)),
    }
    // TheRock's packages beside torch.
    for e in entries(&i.parent) {
        let name = e.file_name().to_string_lossy().into_owned();
        let lower = name.to_ascii_lowercase();
        if let Some(fam) = name.strip_prefix("_rocm_sdk_libraries_") {
            i.families.push(fam.to_string());
        }
        if lower.starts_with("amd_torch_device_") && lower.ends_with(".dist-info") {
            let meta = e.path().join("METADATA");
            match crate::input::read_head(&meta, crate::input::SMALL_FILE_BYTES) {
                Ok(text) => match metadata_name(&text) {
                    Some(n) => {
                        if let Some(g) = n
                            .to_ascii_lowercase()
                            .strip_prefix("amd-torch-device-")
                            .and_then(Gfx::parse)
                        {
                            i.devices.push(g);
                        } else {
                            i.problems.push(format!(
                                "{}: Name {n:?} names no GPU target",
                                meta.display()
                            ));
                        }
                    }
                    None => i
                        .problems
                        .push(format!("{} has no Name field", meta.display())),
                },
                Err(err) => {
                    i.problems
                        .push(format!("{} cannot be read ({})", meta.display(), err.why))
                }
            }
        }
    }
    let therock =
        !i.devices.is_empty() || !i.families.is_empty() || i.parent.join("_rocm_sdk_core").is_dir();
    let path = i.dir.to_string_lossy().into_owned();
    if therock {
        i.build = "TheRock";
    } else if path.contains("/usr/lib/python3/dist-packages/") {
        i.build = "Debian package";
        if let Some(root) = system_root(&i.dir) {
            let status = std::env::var_os("RMCP_DPKG_STATUS")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("var/lib/dpkg/status"));
            let text = super::code_objects::dpkg_status(&status);
            for name in ["python3-torch-rocm", "python3-torch"] {
                if let Some(st) = dpkg_stanza(&text, name) {
                    i.package = Some(format!(
                        "{name} {}",
                        field(st, "Version").unwrap_or("(no version)")
                    ));
                    i.declared = field(st, "X-ROCm-GPU-Architecture").map(parse_gpu_architectures);
                    break;
                }
            }
        }
    } else if path.contains("/usr/lib/python3.") {
        if let Some(root) = system_root(&i.dir) {
            for e in entries(&root.join("var/lib/pacman/local")) {
                let n = e.file_name().to_string_lossy().into_owned();
                for pkg in ["python-pytorch-opt-rocm-", "python-pytorch-rocm-"] {
                    if let Some(v) = n.strip_prefix(pkg) {
                        i.build = "Arch package";
                        i.package = Some(format!("{} {v}", pkg.trim_end_matches('-')));
                    }
                }
            }
        }
    }
    if i.build == "unknown" && i.version.as_deref().is_some_and(is_pytorch_org_version) {
        i.build = "pytorch.org wheel";
    }
    i
}

/// Finds the installs and gives one finding per install and GPU (or per install when there
/// is no GPU), plus one per problem.
pub fn findings(
    site_packages: &[PathBuf],
    scan: &[PathBuf],
    scanned: &Scanned,
    gpus: &[Gpu],
    out: &mut Vec<Finding>,
) {
    let dirs = find(site_packages, scan);
    if dirs.is_empty() {
        out.push(Finding::new(
            Check::Pytorch,
            Status::Info,
            "No PyTorch install found (no torch package in the Python site-packages or the \
             --scan paths).",
        ));
        return;
    }
    for dir in dirs {
        let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let inst = read(dir, parent);
        install_findings(&inst, scanned, gpus, out);
    }
}

fn install_findings(inst: &Install, scanned: &Scanned, gpus: &[Gpu], out: &mut Vec<Finding>) {
    let mut code_dirs = vec![inst.dir.clone()];
    for f in &inst.families {
        code_dirs.push(inst.parent.join(format!("_rocm_sdk_libraries_{f}")));
    }
    let targets = code_objects::targets_under(scanned, &code_dirs);
    let label = format!(
        "PyTorch {}({}{}) at {}",
        inst.version
            .as_deref()
            .map(|v| format!("{v} "))
            .unwrap_or_default(),
        inst.build,
        inst.package
            .as_deref()
            .map(|p| format!(": {p}"))
            .unwrap_or_default(),
        inst.dir.display()
    );
    let base = |f: Finding| -> Finding {
        f.with("path", inst.dir.display().to_string())
            .with("version", inst.version.clone())
            .with("build", inst.build)
            .with("package", inst.package.clone())
            .with(
                "device_packages",
                inst.devices
                    .iter()
                    .map(|g| g.to_string())
                    .collect::<Vec<_>>(),
            )
            .with("rocm_sdk_families", inst.families.clone())
            .with(
                "declared_targets",
                inst.declared
                    .as_ref()
                    .map(|d| d.iter().map(|g| g.to_string()).collect::<Vec<_>>()),
            )
            .with("targets", targets.clone())
    };
    for p in &inst.problems {
        out.push(base(
            Finding::new(
                Check::Pytorch,
                Status::Warn,
                format!("{label}: {p}; doctor judges the install from its libraries alone."),
            )
            .remedy(Remedy::new(
                "Reinstall PyTorch the way it was installed (pip install --force-reinstall \
                 with the same index, or the distribution's package manager), so that its \
                 files are whole again.",
            )),
        ));
    }
    if let Some(decl) = &inst.declared {
        let scanned_gfx: Vec<Gfx> = targets
            .iter()
            .filter_map(|t| Gfx::parse(t.split(':').next().unwrap_or(t)))
            .collect();
        let missing: Vec<String> = decl
            .iter()
            .filter(|g| !scanned_gfx.contains(g))
            .map(|g| g.to_string())
            .collect();
        if !missing.is_empty() && !targets.is_empty() {
            out.push(base(Finding::new(
                Check::Pytorch,
                Status::Info,
                format!(
                    "{label}: its package declares X-ROCm-GPU-Architecture targets the \
                     libraries found do not carry: {}.",
                    missing.join(", ")
                ),
            )));
        }
    }
    let have_code = !targets.is_empty();
    if !have_code && inst.devices.is_empty() && inst.declared.is_none() {
        let mut f = Finding::new(
            Check::Pytorch,
            Status::Warn,
            format!(
                "{label}: no HIP library with GPU code in it (a CPU-only or CUDA build, or an \
                 incomplete install): it cannot use an AMD GPU."
            ),
        );
        let card = gpus.first().map(|g| g.gfx);
        let r = card
            .and_then(|c| {
                remedies::for_advice(
                    advise(c, None, rmcp_core::remedy::Carries::default()),
                    c,
                    None,
                )
            })
            .unwrap_or_else(|| {
                Remedy::new("Install a ROCm build of PyTorch for the card this machine has.")
            });
        f = f.remedy(r);
        out.push(base(f));
        return;
    }
    if gpus.is_empty() {
        out.push(base(Finding::new(
            Check::Pytorch,
            Status::Info,
            format!(
                "{label}: GPU code for {}; there is no GPU to compare it with.",
                if targets.is_empty() {
                    "the targets its packages declare".to_string()
                } else {
                    targets.join(", ")
                }
            ),
        )));
        return;
    }
    for gpu in gpus {
        out.push(base(gpu_finding(inst, &label, &code_dirs, scanned, gpu)));
    }
}

fn gpu_finding(
    inst: &Install,
    label: &str,
    code_dirs: &[PathBuf],
    scanned: &Scanned,
    gpu: &Gpu,
) -> Finding {
    let card = gpu.gfx;
    let over = gpu.override_gfx.as_ref();
    let mut carries = code_objects::carries_under(scanned, code_dirs, gpu).unwrap_or_default();
    // What the packages declare counts where the scan found no code of its own.
    if code_objects::carries_under(scanned, code_dirs, gpu).is_none() {
        let declared: Vec<Gfx> = inst
            .devices
            .iter()
            .chain(inst.declared.iter().flatten())
            .copied()
            .collect();
        carries.native = declared.contains(&card);
        carries.for_override = over.is_some_and(|(o, _)| declared.contains(o));
    }
    let advice = advise(card, over.map(|(g, _)| *g), carries);
    let who = gpu.who();
    let ov_text = over.map(|(_, t)| t.as_str());
    let (status, verdict, text) = match advice {
        Advice::Fine => (
            Status::Ok,
            "runs",
            format!("{who}: {label} carries {card} code."),
        ),
        Advice::FineThroughOverride { native_exists } => (
            Status::Ok,
            "runs-through-override",
            format!(
                "{who}: {label} has no {card} code; HSA_OVERRIDE_GFX_VERSION={} makes the \
                 runtime load its {} code, of the same instruction set{}.",
                ov_text.unwrap_or("?"),
                gpu.runtime_gfx(),
                if native_exists {
                    format!(
                        " (TheRock's device-{card} extra has {card}'s own code, see {})",
                        sources::THEROCK_RELEASES
                    )
                } else {
                    String::new()
                }
            ),
        ),
        Advice::UnsetOverride => (
            Status::Error,
            "override-harms",
            format!(
                "{who}: {label} carries {card} code, but HSA_OVERRIDE_GFX_VERSION={} makes the \
                 runtime load {} code instead.",
                ov_text.unwrap_or("?"),
                gpu.runtime_gfx()
            ),
        ),
        Advice::SetOverride { value, .. } => (
            Status::Error,
            "missing",
            format!(
                "{who}: {label} carries no {card} code, but {} code of the same instruction \
                 set, which HSA_OVERRIDE_GFX_VERSION={value} would load.",
                value.gfx()
            ),
        ),
        Advice::InstallBuild { .. } => (
            Status::Error,
            "missing",
            format!(
                "{who}: {label} carries no {card} code{}: its kernels fail to load \
                 (hipErrorNoBinaryForGpu){}.",
                if targets_text(inst, code_dirs, scanned).is_empty() {
                    String::new()
                } else {
                    format!(" (it has {})", targets_text(inst, code_dirs, scanned))
                },
                if over.is_some_and(|(o, _)| {
                    rmcp_core::remedy::override_effect(card, *o).cross_family()
                }) {
                    ", or the override makes the card run another family's code, which can \
                     fault or hang the GPU"
                } else {
                    ""
                }
            ),
        ),
        Advice::Unknown => (
            Status::Warn,
            "unknown",
            format!("{who}: the card's ISA is unknown, so doctor cannot judge {label}."),
        ),
    };
    let mut f = Finding::new(Check::Pytorch, status, text);
    if status >= Status::Warn {
        f = f.remedy_opt(remedies::for_advice(advice, card, ov_text));
    }
    if therock_device(card) && inst.build == "TheRock" && advice == Advice::Fine {
        f.message.push_str(
            " TheRock builds it; AMD's CI runs no tests on some of these targets (gfx101X \
             among them).",
        );
    }
    f.with("node", gpu.node)
        .with("gfx", card.to_string())
        .with("runtime_gfx", gpu.runtime_gfx().to_string())
        .with("verdict", verdict)
}

fn targets_text(inst: &Install, code_dirs: &[PathBuf], scanned: &Scanned) -> String {
    let t = code_objects::targets_under(scanned, code_dirs);
    if t.is_empty() {
        inst.devices
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        t.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_py_lines() {
        assert_eq!(
            parse_version_py(
                "from typing import Optional\n__version__ = '2.9.1+rocm7.0'\nhip = '7.0.0'\n"
            )
            .as_deref(),
            Some("2.9.1+rocm7.0")
        );
        assert_eq!(
            parse_version_py("__version__: str = \"2.11.0+rocm7.13.0a\"\n").as_deref(),
            Some("2.11.0+rocm7.13.0a")
        );
        for bad in [
            "",
            "__version__ = ",
            "__version__ = 2.9",
            "__version__ = '2.9",
            "x = '1'",
        ] {
            assert_eq!(parse_version_py(bad), None, "{bad:?}");
        }
        assert!(is_pytorch_org_version("2.9.1+rocm7.0"));
        assert!(is_pytorch_org_version("2.5.1+rocm6.2"));
        assert!(!is_pytorch_org_version("2.6.0+rocm6.4.2.git76481f7c"));
        assert!(!is_pytorch_org_version("2.9.1+cu128"));
        assert!(!is_pytorch_org_version("2.9.1"));
    }

    #[test]
    fn metadata_and_dpkg_fields() {
        assert_eq!(
            metadata_name("Metadata-Version: 2.1\nName: amd-torch-device-gfx1010\n\nName: x")
                .as_deref(),
            Some("amd-torch-device-gfx1010")
        );
        assert_eq!(metadata_name("Metadata-Version: 2.1\n"), None);
        let status = "Package: python3-torch-rocm\nStatus: install ok installed\nVersion: 2.6\n\
                      X-ROCm-GPU-Architecture: gfx1010 gfx1030,gfx1100\n\n\
                      Package: python3-torch\nStatus: deinstall ok config-files\n";
        let st = dpkg_stanza(status, "python3-torch-rocm").unwrap();
        assert_eq!(field(st, "Version"), Some("2.6"));
        assert_eq!(
            parse_gpu_architectures(field(st, "X-ROCm-GPU-Architecture").unwrap()),
            [Gfx(100100), Gfx(100300), Gfx(110000)]
        );
        assert!(dpkg_stanza(status, "python3-torch").is_none());
    }
}
