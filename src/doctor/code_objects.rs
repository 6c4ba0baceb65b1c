//! The `code-objects` check: does the installed software carry GPU code for each GPU?
//!
//! Finds the HIP libraries (ELF files with a `.hip_fatbin` section), rocBLAS / hipBLASLt
//! Tensile directories and MIOpen kernel databases in the default places (Python
//! site-packages, ROCm installations, the system's multiarch library directory) or in the
//! paths `--scan` names, reads which targets each carries (`rmcp_core::code_objects`: the
//! ELF header, the section headers and each bundle's entry table, with positioned reads of
//! small ranges, never a whole file), and gives a verdict per library and GPU.
//!
//! As in every check, nothing here may panic on odd input: a file that cannot be read is a
//! `warn` finding naming it.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rmcp_core::code_objects::{
    self as co, BundleFormat, FATBIN_SECTION, FatbinScan, TargetId, Verdict,
};
use rmcp_core::gfx::Gfx;
use rmcp_core::remedy::{Carries, OverrideEffect, advise, override_effect};
use rmcp_core::topology::GpuNode;

use super::remedies;
use super::report::{Check, CodeFormat, CodeObjectRow, CodeVerdict, Finding, Remedy, Status};

/// A GPU build without the card's ISA: hipErrorNoBinaryForGpu on an RX 5700 XT (gfx1010).
pub const SRC_NO_BINARY: &str = "https://github.com/ROCm/pytorch/issues/882";
/// rocBLAS without Tensile files for gfx101x ("TensileLibrary.dat not found").
pub const SRC_TENSILE: &str = "https://github.com/ROCm/rocBLAS/issues/1331";
/// RX 5700: HSA_OVERRIDE_GFX_VERSION=10.3.0 crashes the card, 10.1.0 works.
pub const SRC_OVERRIDE_RX5700: &str = rmcp_core::remedy::sources::ROCM_887;
/// PyTorch uses hipBLASLt only on the architectures it lists, rocBLAS elsewhere.
pub const SRC_HIPBLASLT: &str = "https://github.com/pytorch/pytorch/pull/128753";
/// MIOpen's precompiled-kernel databases; without one it compiles kernels at first use.
pub const SRC_MIOPEN_KDB: &str = "https://rocm.docs.amd.com/projects/MIOpen/en/latest/cache.html";
/// The bundle format and entry IDs.
pub const SRC_BUNDLER: &str = "https://clang.llvm.org/docs/ClangOffloadBundler.html";

/// Directory entries read per directory, at most.
const MAX_ENTRIES: usize = 20_000;
/// How deep `--scan` walks into a directory.
const MAX_DEPTH: usize = 12;
/// Files `--scan` looks at in all, at most.
const MAX_FILES: usize = 200_000;

/// Where a library was found.
#[derive(Clone, Debug)]
enum Origin {
    /// A Python site-packages directory.
    SitePackages(PathBuf),
    /// A ROCm installation (`/opt/rocm*`, `$ROCM_PATH`).
    Rocm,
    /// The distribution's directories (`/usr/lib/<multiarch>`, `/usr/share`).
    System,
    /// A path given to `--scan`.
    Scan,
}

/// What to read.
#[derive(Clone, Debug)]
enum Item {
    /// A file that may be an ELF file with GPU code.
    Elf(PathBuf),
    /// A directory of Tensile files.
    Tensile(PathBuf),
    /// A directory of MIOpen kernel databases.
    Kdb(PathBuf),
}

/// Everything the check found, before the verdicts.
pub struct Scanned {
    /// Human words for where it looked.
    pub places: Vec<String>,
    libraries: Vec<Library>,
    /// Files that could not be read: (path, why).
    problems: Vec<(String, String)>,
}

struct Library {
    path: PathBuf,
    name: String,
    package: Option<String>,
    format: CodeFormat,
    compression: Option<String>,
    /// One target list per fat binary (one list for a Tensile directory).
    sets: Vec<Vec<TargetId>>,
    /// MIOpen databases: the ISAs they are for.
    kdb: Vec<Gfx>,
    bundles: Option<usize>,
    /// ELF files: where each bundle of `sets` starts in the file and how it is stored, and
    /// where the fat binary ends (what the gfx101x scan reads).
    places: Vec<(u64, BundleFormat)>,
    fatbin_end: u64,
}

impl Library {
    fn targets(&self) -> Vec<String> {
        let mut all: BTreeSet<String> = self.sets.iter().flatten().map(|t| t.to_string()).collect();
        all.extend(self.kdb.iter().map(|g| g.to_string()));
        let mut v: Vec<String> = all.into_iter().collect();
        v.sort_by_key(|s| target_sort_key(s));
        v
    }

    fn label(&self) -> String {
        match &self.package {
            Some(p) => format!("{} ({p}) {}", self.name, self.path.display()),
            None => format!("{} {}", self.name, self.path.display()),
        }
    }
}

/// gfx900 < gfx90a < gfx1010 < gfx10-1-generic < gfx1100, roughly as people read them:
/// a generic target after the processors of its family.
fn target_sort_key(s: &str) -> (u32, String) {
    let processor = s.split(':').next().unwrap_or(s);
    let n = match Gfx::parse(processor) {
        Some(g) => g.0 * 10,
        None => {
            let mut parts = processor
                .trim_start_matches("gfx")
                .trim_end_matches("-generic")
                .split('-')
                .map(|p| p.parse::<u32>().ok());
            match (parts.next().flatten(), parts.next().flatten()) {
                (Some(major), Some(minor)) => (major * 10000 + minor * 100 + 99) * 10 + 9,
                (Some(major), None) => (major * 10000 + 9999) * 10 + 9,
                _ => u32::MAX,
            }
        }
    };
    (n, s.to_string())
}

/// `lib*.so`, `lib*.so.6`, `*.cpython-311-x86_64-linux-gnu.so`.
fn is_shared_object_name(name: &str) -> bool {
    name.ends_with(".so") || name.contains(".so.")
}

pub(super) fn sorted_entries(dir: &Path) -> Vec<std::fs::DirEntry> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<std::fs::DirEntry> = rd.take(MAX_ENTRIES).filter_map(Result::ok).collect();
    v.sort_by_key(|e| e.file_name());
    v
}

/// Shared objects directly in `dir`.
fn shared_objects_in(dir: &Path, out: &mut Vec<(Item, Origin)>, origin: &Origin) {
    for e in sorted_entries(dir) {
        let name = e.file_name().to_string_lossy().into_owned();
        if is_shared_object_name(&name) && e.path().is_file() {
            out.push((Item::Elf(e.path()), origin.clone()));
        }
    }
}

/// Tensile directories under a library directory: `rocblas/library`,
/// `rocblas/<version>/library` (Debian), the same for hipblaslt.
fn tensile_dirs_in(lib: &Path, out: &mut Vec<(Item, Origin)>, origin: &Origin) {
    for component in ["rocblas", "hipblaslt"] {
        let base = lib.join(component);
        let direct = base.join("library");
        if direct.is_dir() {
            out.push((Item::Tensile(direct), origin.clone()));
        }
        for e in sorted_entries(&base) {
            let d = e.path().join("library");
            if e.path().is_dir() && d.is_dir() {
                out.push((Item::Tensile(d), origin.clone()));
            }
        }
    }
}

fn kdb_dir(share: &Path, out: &mut Vec<(Item, Origin)>, origin: &Origin) {
    let d = share.join("miopen").join("db");
    if d.is_dir() {
        out.push((Item::Kdb(d), origin.clone()));
    }
}

/// The distribution's multiarch library directory (`/usr/lib/x86_64-linux-gnu`).
fn multiarch_dir() -> PathBuf {
    PathBuf::from(format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH))
}

/// The ROCm installations: `$ROCM_PATH`, `/opt/rocm`, `/opt/rocm-*`.
fn rocm_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(r) = std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty()) {
        roots.push(PathBuf::from(r));
    }
    roots.push(PathBuf::from("/opt/rocm"));
    let mut extra: Vec<PathBuf> = sorted_entries(Path::new("/opt"))
        .into_iter()
        .filter(|e| e.file_name().to_string_lossy().starts_with("rocm-"))
        .map(|e| e.path())
        .collect();
    extra.sort();
    roots.extend(extra);
    roots
}

/// The default places: site-packages, ROCm installations, the system directories.
fn default_items(site_packages: &[PathBuf], places: &mut Vec<String>) -> Vec<(Item, Origin)> {
    let mut items = Vec::new();
    for sp in site_packages {
        let origin = Origin::SitePackages(sp.clone());
        places.push(sp.display().to_string());
        shared_objects_in(sp, &mut items, &origin);
        for pkg in sorted_entries(sp) {
            let p = pkg.path();
            if !pkg.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            shared_objects_in(&p, &mut items, &origin);
            shared_objects_in(&p.join("lib"), &mut items, &origin);
            tensile_dirs_in(&p.join("lib"), &mut items, &origin);
            kdb_dir(&p.join("share"), &mut items, &origin);
        }
    }
    for root in rocm_roots() {
        if !root.is_dir() {
            continue;
        }
        places.push(root.display().to_string());
        let origin = Origin::Rocm;
        shared_objects_in(&root.join("lib"), &mut items, &origin);
        tensile_dirs_in(&root.join("lib"), &mut items, &origin);
        kdb_dir(&root.join("share"), &mut items, &origin);
    }
    let multiarch = multiarch_dir();
    places.push(multiarch.display().to_string());
    shared_objects_in(&multiarch, &mut items, &Origin::System);
    tensile_dirs_in(&multiarch, &mut items, &Origin::System);
    kdb_dir(Path::new("/usr/share"), &mut items, &Origin::System);
    items
}

/// `--scan`: files as they are; directories walked, keeping shared objects, executables,
/// and the directories that hold Tensile files or kernel databases.
fn scan_items(paths: &[PathBuf], places: &mut Vec<String>) -> Vec<(Item, Origin)> {
    let mut items = Vec::new();
    let mut budget = MAX_FILES;
    for p in paths {
        places.push(p.display().to_string());
        if p.is_dir() {
            walk(p, 0, &mut items, &mut budget);
        } else {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
            if starts_as_bundle(p) {
                // A code-object file named on its own (what hipModuleLoad loads): its own
                // targets, never its directory's by file name.
                items.push((Item::Elf(p.clone()), Origin::Scan));
            } else if co::kdb_target(&name).is_some() {
                items.push((Item::Kdb(dir), Origin::Scan));
            } else if co::tensile_target(&name).is_some() {
                items.push((Item::Tensile(dir), Origin::Scan));
            } else {
                items.push((Item::Elf(p.clone()), Origin::Scan));
            }
        }
    }
    items
}

fn walk(dir: &Path, depth: usize, items: &mut Vec<(Item, Origin)>, budget: &mut usize) {
    let (mut tensile, mut kdb) = (false, false);
    let mut subdirs = Vec::new();
    for e in sorted_entries(dir) {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let Ok(ft) = e.file_type() else { continue };
        let name = e.file_name().to_string_lossy().into_owned();
        if ft.is_dir() {
            subdirs.push(e.path());
            continue;
        }
        if !ft.is_file() {
            // Symlinks: their targets are found where they live, or not at all.
            continue;
        }
        if co::kdb_target(&name).is_some() {
            kdb = true;
        } else if co::tensile_target(&name).is_some() {
            tensile = true;
        } else if is_shared_object_name(&name)
            || e.metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
        {
            items.push((Item::Elf(e.path()), Origin::Scan));
        }
    }
    if tensile {
        items.push((Item::Tensile(dir.to_path_buf()), Origin::Scan));
    }
    if kdb {
        items.push((Item::Kdb(dir.to_path_buf()), Origin::Scan));
    }
    if depth < MAX_DEPTH {
        for d in subdirs {
            walk(&d, depth + 1, items, budget);
        }
    }
}

/// Finds and reads every library: `scan` paths when given, else the default places.
pub fn scan(paths: &[PathBuf], site_packages: &[PathBuf]) -> Scanned {
    let mut places = Vec::new();
    let items = if paths.is_empty() {
        default_items(site_packages, &mut places)
    } else {
        scan_items(paths, &mut places)
    };
    let mut seen = BTreeSet::new();
    let mut libraries = Vec::new();
    let mut problems = Vec::new();
    let mut packages = Packages::default();
    for (item, origin) in items {
        let path = match &item {
            Item::Elf(p) | Item::Tensile(p) | Item::Kdb(p) => p.clone(),
        };
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if !seen.insert(real.clone()) {
            continue;
        }
        let read = match item {
            Item::Elf(_) => read_elf(&real),
            Item::Tensile(_) => Read::Lib(read_tensile(&real), None),
            Item::Kdb(_) => Read::Lib(read_kdb(&real), None),
        };
        match read {
            Read::NotHip => {}
            Read::Unreadable(why) => problems.push((real.display().to_string(), why)),
            Read::Lib(mut lib, problem) => {
                if let Some(why) = problem {
                    problems.push((real.display().to_string(), why));
                }
                lib.path = real.clone();
                let (name, package) = packages.describe(&real, &origin, lib.format);
                lib.name = name;
                lib.package = package;
                libraries.push(lib);
            }
        }
    }
    Scanned {
        places,
        libraries,
        problems,
    }
}

/// Where a library keeps its GPU code, for the gfx101x scan (`gfx101x`).
pub enum CodeAt<'a> {
    /// An ELF file's fat binary (or a bare bundle file): each bundle's start, how it is
    /// stored and its targets, and where the fat binary ends.
    Fatbin {
        bundles: Vec<(u64, BundleFormat, &'a [TargetId])>,
        end: u64,
    },
    /// A Tensile directory: one code-object file per target.
    Tensile,
}

/// A library with GPU code as the gfx101x scan sees it; `index` is its row in
/// `code_objects[]`.
pub struct CodeSource<'a> {
    pub index: usize,
    pub path: &'a Path,
    /// `rocSPARSE (librocsparse0 5.3.0+dfsg-2)`.
    pub name: String,
    pub at: CodeAt<'a>,
}

/// Every library with GPU code (not MIOpen's databases), in the order of the rows.
pub fn code_sources(scanned: &Scanned) -> Vec<CodeSource<'_>> {
    scanned
        .libraries
        .iter()
        .enumerate()
        .filter_map(|(index, l)| {
            let at = match l.format {
                CodeFormat::Kdb => return None,
                CodeFormat::Tensile => CodeAt::Tensile,
                CodeFormat::Plain | CodeFormat::CompressedBundle => CodeAt::Fatbin {
                    bundles: l
                        .places
                        .iter()
                        .zip(&l.sets)
                        .map(|((at, format), set)| (*at, *format, set.as_slice()))
                        .collect(),
                    end: l.fatbin_end,
                },
            };
            Some(CodeSource {
                index,
                path: &l.path,
                name: names(&[l]),
                at,
            })
        })
        .collect()
}

/// What reading one item gave.
enum Read {
    /// Not a HIP library (not ELF, or no `.hip_fatbin`).
    NotHip,
    /// What could be read, and why reading stopped early, if it did.
    Lib(Library, Option<String>),
    /// Nothing could be read.
    Unreadable(String),
}

fn empty(format: CodeFormat) -> Library {
    Library {
        path: PathBuf::new(),
        name: String::new(),
        package: None,
        format,
        compression: None,
        sets: Vec::new(),
        kdb: Vec::new(),
        bundles: None,
        places: Vec::new(),
        fatbin_end: 0,
    }
}

/// An ELF file: its `.hip_fatbin` bundles, or None when it has no GPU code.
/// The file starts with an offload bundle's magic, plain or compressed.
fn starts_as_bundle(path: &Path) -> bool {
    let mut head = [0u8; 24];
    crate::input::open_regular(path)
        .ok()
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head).ok())
        .is_some_and(|()| {
            head.starts_with(b"__CLANG_OFFLOAD_BUNDLE__") || head.starts_with(b"CCOB")
        })
}

fn read_elf(path: &Path) -> Read {
    // A regular file only, opened without blocking (`input`): a FIFO found in a walk is
    // never waited on.
    let file = match crate::input::open_regular(path) {
        Ok(f) => f,
        Err(e) => return Read::Unreadable(e.why),
    };
    let section = match co::find_section(&file, FATBIN_SECTION) {
        Ok(Some(s)) => s,
        // A bare bundle file (`hipcc --genco`, a Tensile `.co`): the whole file.
        Ok(None) if starts_as_bundle(path) => {
            let len = file.metadata().map_or(0, |m| m.len());
            co::Section {
                name: String::new(),
                kind: 1,
                offset: 0,
                size: len,
            }
        }
        Ok(None) => return Read::NotHip,
        // A file that is not ELF at all is Ok(None); only a broken ELF gets here.
        Err(e) => return Read::Unreadable(e.to_string()),
    };
    let FatbinScan { bundles, problem } = co::scan_fatbin(&file, section.offset, section.size);
    let mut lib = empty(CodeFormat::Plain);
    let mut compression = BTreeSet::new();
    for b in &bundles {
        if let BundleFormat::Compressed { version, method } = b.format {
            compression.insert(format!("{} v{version}", method.as_str()));
        }
    }
    if !compression.is_empty() {
        lib.format = CodeFormat::CompressedBundle;
        lib.compression = Some(compression.into_iter().collect::<Vec<_>>().join(", "));
    }
    lib.bundles = Some(bundles.len());
    lib.places = bundles.iter().map(|b| (b.offset, b.format)).collect();
    lib.fatbin_end = section.offset.saturating_add(section.size);
    lib.sets = bundles.into_iter().map(|b| b.targets).collect();
    Read::Lib(lib, problem.map(|e| format!("{FATBIN_SECTION}: {e}")))
}

fn read_tensile(dir: &Path) -> Library {
    let mut set: Vec<TargetId> = Vec::new();
    for e in sorted_entries(dir) {
        if let Some(t) = co::tensile_target(&e.file_name().to_string_lossy()) {
            if !set.contains(&t) {
                set.push(t);
            }
        }
    }
    let mut lib = empty(CodeFormat::Tensile);
    lib.sets = vec![set];
    lib
}

fn read_kdb(dir: &Path) -> Library {
    let mut lib = empty(CodeFormat::Kdb);
    for e in sorted_entries(dir) {
        if let Some(g) = co::kdb_target(&e.file_name().to_string_lossy()) {
            if !lib.kdb.contains(&g) {
                lib.kdb.push(g);
            }
        }
    }
    lib
}

// ---------------------------------------------------------------------------------------
// Names and packages
// ---------------------------------------------------------------------------------------

/// Library names people know, by file-name stem.
const NAMES: &[(&str, &str)] = &[
    ("libtorch_hip", "PyTorch"),
    ("librocblas", "rocBLAS"),
    ("librocsparse", "rocSPARSE"),
    ("librocfft", "rocFFT"),
    ("librocsolver", "rocSOLVER"),
    ("librocrand", "rocRAND"),
    ("libhiprand", "hipRAND"),
    ("libhipblaslt", "hipBLASLt"),
    ("libhipblas", "hipBLAS"),
    ("libhipsparse", "hipSPARSE"),
    ("libhipfft", "hipFFT"),
    ("libhipsolver", "hipSOLVER"),
    ("libMIOpen", "MIOpen"),
    ("librccl", "RCCL"),
    ("librocalution", "rocALUTION"),
    ("libhipsparselt", "hipSPARSELt"),
    ("librocwmma", "rocWMMA"),
];

fn library_name(file: &str) -> Option<&'static str> {
    let stem = file.split(".so").next().unwrap_or(file);
    NAMES.iter().find(|(s, _)| *s == stem).map(|(_, n)| *n)
}

/// The installed Debian packages' versions, read once when first needed, per root (a
/// chroot scanned with `--scan` has its own).
#[derive(Default)]
struct Packages {
    status: Vec<(PathBuf, Vec<(String, String)>)>,
}

impl Packages {
    fn dpkg_version(&mut self, root: &Path, package: &str) -> Option<String> {
        let idx = match self.status.iter().position(|(r, _)| r == root) {
            Some(i) => i,
            None => {
                let text = dpkg_status(&root.join("var/lib/dpkg/status"));
                self.status
                    .push((root.to_path_buf(), parse_dpkg_status(&text)));
                self.status.len() - 1
            }
        };
        self.status[idx]
            .1
            .iter()
            .find(|(p, _)| p == package)
            .map(|(_, v)| v.clone())
    }

    /// (name, package) for a library.
    fn describe(
        &mut self,
        path: &Path,
        origin: &Origin,
        format: CodeFormat,
    ) -> (String, Option<String>) {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let s = path.to_string_lossy();
        let name = match format {
            CodeFormat::Tensile if s.contains("/hipblaslt/") => "hipBLASLt (Tensile)".to_string(),
            CodeFormat::Tensile => "rocBLAS (Tensile)".to_string(),
            CodeFormat::Kdb => "MIOpen (kernel database)".to_string(),
            _ => library_name(&file)
                .map(str::to_string)
                .unwrap_or(file.clone()),
        };
        if let Some(p) = python_package(path, origin) {
            return (name, Some(p));
        }
        if let Some(v) = tensile_version(path) {
            return (name, Some(v));
        }
        if let Some(p) = self.debian_package(path, &file) {
            return (name, Some(p));
        }
        if let Some(v) = rocm_version(path) {
            return (name, Some(v));
        }
        (name, None)
    }

    /// `/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1` -> `librocsparse0 5.3.0+dfsg-2`,
    /// from the Debian library-package naming (name and soname major) and dpkg's status.
    fn debian_package(&mut self, path: &Path, file: &str) -> Option<String> {
        let s = path.to_str()?;
        let i = s.find("/usr/lib/")?;
        let root = PathBuf::from(if i == 0 { "/" } else { &s[..i] });
        let (stem, rest) = file.split_once(".so.")?;
        let major = rest.split('.').next()?;
        let sep = if stem.ends_with(|c: char| c.is_ascii_digit()) {
            "-"
        } else {
            ""
        };
        let candidate = format!("{}{sep}{major}", stem.to_ascii_lowercase());
        let version = self.dpkg_version(&root, &candidate)?;
        Some(format!("{candidate} {version}"))
    }
}

/// dpkg's status file under a root, read through `input` (at most
/// `input::DPKG_STATUS_BYTES`); empty when it cannot be.
pub fn dpkg_status(path: &Path) -> String {
    crate::input::read_capped(path, crate::input::DPKG_STATUS_BYTES, "a dpkg status file")
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// (package, version) of each installed package in dpkg's status file.
fn parse_dpkg_status(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let (mut name, mut version, mut installed) = (None, None, false);
        for line in stanza.lines() {
            if let Some(v) = line.strip_prefix("Package: ") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("Version: ") {
                version = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("Status: ") {
                installed = v.trim().ends_with(" installed");
            }
        }
        if let (Some(n), Some(v), true) = (name, version, installed) {
            out.push((n, v));
        }
    }
    out
}

/// `<site-packages>/torch/lib/libtorch_hip.so` -> `torch 2.5.1+rocm6.2 in <venv>`, from
/// the `torch-2.5.1+rocm6.2.dist-info` directory beside the package.
fn python_package(path: &Path, origin: &Origin) -> Option<String> {
    let sp = match origin {
        Origin::SitePackages(sp) => sp.clone(),
        _ => path
            .ancestors()
            .find(|a| {
                a.file_name()
                    .is_some_and(|n| n == "site-packages" || n == "dist-packages")
            })?
            .to_path_buf(),
    };
    let rel = path.strip_prefix(&sp).ok()?;
    let top = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    let env = sp
        .ancestors()
        .nth(3)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| sp.display().to_string());
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    for e in sorted_entries(&sp) {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = n.strip_suffix(".dist-info") else {
            continue;
        };
        let Some((dist, version)) = stem.split_once('-') else {
            continue;
        };
        if norm(dist) == norm(&top) {
            return Some(format!("{dist} {version} in {env}"));
        }
    }
    // Not a package's own file (a top-level extension module): say which environment.
    Some(format!("in {env}"))
}

/// Debian's rocBLAS Tensile directory: `.../rocblas/4.4.1/library` -> `4.4.1`.
fn tensile_version(path: &Path) -> Option<String> {
    if path.file_name()? != "library" {
        return None;
    }
    let v = path.parent()?.file_name()?.to_string_lossy().into_owned();
    v.starts_with(|c: char| c.is_ascii_digit())
        .then(|| format!("version {v}"))
}

/// `/opt/rocm-6.2.0/lib/...` -> `ROCm 6.2.0`; `/opt/rocm/...` -> from `.info/version`.
fn rocm_version(path: &Path) -> Option<String> {
    let root = path.ancestors().find(|a| {
        a.parent() == Some(Path::new("/opt"))
            && a.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("rocm"))
    })?;
    let name = root.file_name()?.to_string_lossy().into_owned();
    if let Some(v) = name.strip_prefix("rocm-") {
        return Some(format!("ROCm {v}"));
    }
    let text = crate::input::read_head(&root.join(".info/version"), crate::input::SMALL_FILE_BYTES)
        .ok()?;
    let v = text.lines().next()?.trim();
    (!v.is_empty()).then(|| format!("ROCm {v}"))
}

// ---------------------------------------------------------------------------------------
// Verdicts and findings
// ---------------------------------------------------------------------------------------

/// A GPU as this check needs it.
pub struct Gpu {
    pub node: u32,
    pub gfx: Gfx,
    /// The ISA HSA_OVERRIDE_GFX_VERSION gives it, and the variable's text.
    pub override_gfx: Option<(Gfx, String)>,
}

impl Gpu {
    pub fn new(g: &GpuNode, override_gfx: Option<(Gfx, String)>) -> Gpu {
        Gpu {
            node: g.node,
            gfx: g.gfx,
            override_gfx,
        }
    }

    pub fn who(&self) -> String {
        format!("node {} ({})", self.node, self.gfx)
    }

    /// The ISA the runtime looks for.
    pub fn runtime_gfx(&self) -> Gfx {
        self.override_gfx
            .as_ref()
            .map(|(g, _)| *g)
            .unwrap_or(self.gfx)
    }
}

/// The status of running `claimed` code on `real` silicon through the override.
fn override_status(real: Gfx, claimed: Gfx) -> Status {
    match override_effect(real, claimed) {
        OverrideEffect::Rdna1AsRdna2 => Status::Error,
        OverrideEffect::Same | OverrideEffect::SameFamily => Status::Ok,
        OverrideEffect::OtherFamily | OverrideEffect::Unknown => Status::Warn,
    }
}

/// What a verdict means for one library kind.
fn status_of(lib: &Library, gpu: &Gpu, v: Verdict) -> Status {
    let optional = lib.name.starts_with("hipBLASLt");
    match v {
        Verdict::Present => Status::Ok,
        Verdict::Override => override_status(gpu.gfx, gpu.runtime_gfx()),
        _ if optional => Status::Info,
        _ => Status::Error,
    }
}

fn verdict_for(lib: &Library, gpu: &Gpu) -> (Verdict, Status) {
    if lib.format == CodeFormat::Kdb {
        let want = gpu.runtime_gfx();
        return if lib.kdb.contains(&want) {
            (Verdict::Present, Status::Ok)
        } else {
            (Verdict::Missing, Status::Info)
        };
    }
    let sets: Vec<&[TargetId]> = lib.sets.iter().map(Vec::as_slice).collect();
    let over = gpu.override_gfx.as_ref().map(|(g, _)| *g);
    let v = co::verdict(&sets, gpu.gfx, over);
    (v, status_of(lib, gpu, v))
}

fn short(v: Verdict, lib: &Library, gpu: &Gpu) -> String {
    let real = gpu.gfx;
    let rt = gpu.runtime_gfx();
    let sets = lib.sets.iter().filter(|s| !s.is_empty()).count();
    let covered = {
        let dev = co::Device::from_gfx(rt);
        let s: Vec<&[TargetId]> = lib.sets.iter().map(Vec::as_slice).collect();
        co::covered(&s, &dev)
    };
    match (lib.format, v) {
        (CodeFormat::Kdb, Verdict::Present) => format!("{rt} database present"),
        (CodeFormat::Kdb, _) => format!("no {rt} database"),
        (_, Verdict::Present) => format!("{real} present"),
        (_, Verdict::Override) if native(lib, gpu) => {
            format!("{real} code present, but the override makes the runtime load its {rt} code")
        }
        (_, Verdict::Override) => format!("no {real} code; {rt} code, loaded through the override"),
        (_, Verdict::OverrideMisses) => {
            format!("{real} code present, but the override asks for {rt}, which is missing")
        }
        (_, Verdict::Partial) => format!("{rt} code in {covered} of {sets} fat binaries"),
        (_, Verdict::Missing) => format!("no {rt} code"),
    }
}

/// What a group of libraries carries for the GPU, as the decision table wants it: the
/// card's own code in all of them, another ISA of its family common to all, the override's
/// code in all.
fn carries(libs: &[&Library], gpu: &Gpu) -> Carries {
    let libs: Vec<&&Library> = libs
        .iter()
        .filter(|l| l.format != CodeFormat::Kdb)
        .collect();
    if libs.is_empty() {
        return Carries::default();
    }
    let real = gpu.gfx;
    let family_of = |l: &Library| -> BTreeSet<Gfx> {
        l.sets
            .iter()
            .flatten()
            .filter_map(TargetId::gfx)
            .filter(|g| *g != real && g.major() == real.major() && g.minor() == real.minor())
            .collect()
    };
    let mut common = family_of(libs[0]);
    for l in &libs[1..] {
        let f = family_of(l);
        common.retain(|g| f.contains(g));
    }
    let has = |l: &Library, g: Gfx| {
        let sets: Vec<&[TargetId]> = l.sets.iter().map(Vec::as_slice).collect();
        co::verdict(&sets, g, None) == Verdict::Present
    };
    Carries {
        native: libs.iter().all(|l| native(l, gpu)),
        same_family: common.into_iter().next(),
        for_override: gpu
            .override_gfx
            .as_ref()
            .is_some_and(|(o, _)| libs.iter().all(|l| has(l, *o))),
    }
}

/// The libraries under any of `dirs` that carry code PyTorch needs (not the optional
/// hipBLASLt, not MIOpen's databases).
fn needed_under<'a>(scanned: &'a Scanned, dirs: &[PathBuf]) -> Vec<&'a Library> {
    scanned
        .libraries
        .iter()
        .filter(|l| l.format != CodeFormat::Kdb && !l.name.starts_with("hipBLASLt"))
        .filter(|l| {
            dirs.iter().any(|d| {
                let d = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
                l.path.starts_with(&d)
            })
        })
        .collect()
}

/// What the libraries under `dirs` carry for `gpu`; None when there is no such library.
pub fn carries_under(scanned: &Scanned, dirs: &[PathBuf], gpu: &Gpu) -> Option<Carries> {
    let libs = needed_under(scanned, dirs);
    (!libs.is_empty()).then(|| carries(&libs, gpu))
}

/// Every target the libraries under `dirs` carry, sorted as people read them.
pub fn targets_under(scanned: &Scanned, dirs: &[PathBuf]) -> Vec<String> {
    let mut all: BTreeSet<String> = BTreeSet::new();
    for l in needed_under(scanned, dirs) {
        all.extend(l.targets());
    }
    let mut v: Vec<String> = all.into_iter().collect();
    v.sort_by_key(|s| target_sort_key(s));
    v
}

/// The remedy for a group of libraries that fail the GPU.
fn remedy_for(libs: &[&Library], gpu: &Gpu) -> Remedy {
    let over = gpu.override_gfx.as_ref();
    let advice = advise(gpu.gfx, over.map(|(g, _)| *g), carries(libs, gpu));
    remedies::for_advice(advice, gpu.gfx, over.map(|(_, t)| t.as_str())).unwrap_or_else(|| {
        Remedy::new(format!(
            "Use builds of these libraries that carry {} code.",
            gpu.runtime_gfx()
        ))
    })
}

fn has_family_code(lib: &Library, gfx: Gfx, minor: u32) -> Option<Gfx> {
    lib.sets
        .iter()
        .flatten()
        .filter_map(TargetId::gfx)
        .find(|g| g.major() == gfx.major() && g.minor() == minor)
}

/// The rows (`code_objects[]`) and the findings.
pub fn findings(scanned: &Scanned, gpus: &[Gpu], out: &mut Vec<Finding>) -> Vec<CodeObjectRow> {
    let mut rows = Vec::new();
    let libs = &scanned.libraries;
    let places = scanned.places.join(", ");
    for (path, why) in &scanned.problems {
        out.push(
            Finding::new(
                Check::CodeObjects,
                Status::Warn,
                format!("{path}: its GPU code could not be read ({why}); the targets listed for it, if any, are those read before the problem."),
            )
            .source(SRC_BUNDLER)
            .remedy(Remedy::new(
                "Check that the file is complete and readable (an interrupted download or copy \
                 leaves a truncated file); reinstall the package it belongs to.",
            ))
            .with("path", path.clone()),
        );
    }
    if libs.is_empty() {
        out.push(
            Finding::new(
                Check::CodeObjects,
                Status::Info,
                format!("No HIP library with GPU code, Tensile library or MIOpen kernel database found in {places}."),
            )
            .with("places", scanned.places.clone()),
        );
        return rows;
    }
    let verdicts: Vec<Vec<(Verdict, Status)>> = libs
        .iter()
        .map(|l| gpus.iter().map(|g| verdict_for(l, g)).collect())
        .collect();
    for (lib, vs) in libs.iter().zip(&verdicts) {
        rows.push(CodeObjectRow {
            path: lib.path.display().to_string(),
            name: lib.name.clone(),
            package: lib.package.clone(),
            format: lib.format,
            compression: lib.compression.clone(),
            bundles: lib.bundles,
            targets: lib.targets(),
            gpus: gpus
                .iter()
                .zip(vs)
                .map(|(g, (v, s))| CodeVerdict {
                    node: g.node,
                    gfx: g.gfx.to_string(),
                    runtime_gfx: g.runtime_gfx().to_string(),
                    verdict: v.as_str(),
                    status: *s,
                    gfx101x: None,
                })
                .collect(),
        });
    }
    if gpus.is_empty() {
        let mut f = Finding::new(
            Check::CodeObjects,
            Status::Info,
            format!(
                "{} HIP librar{} with GPU code found in {places}; there is no GPU to compare them with.",
                libs.len(),
                if libs.len() == 1 { "y" } else { "ies" }
            ),
        );
        f.details = libs
            .iter()
            .map(|l| format!("{}: {}", l.label(), l.targets().join(", ")))
            .collect();
        out.push(f.with("places", scanned.places.clone()));
        return rows;
    }
    for (gi, gpu) in gpus.iter().enumerate() {
        gpu_findings(libs, &verdicts, gi, gpu, &scanned.places, out);
    }
    rows
}

fn names(libs: &[&Library]) -> String {
    let v: Vec<String> = libs
        .iter()
        .map(|l| match &l.package {
            Some(p) => format!("{} ({p})", l.name),
            None => l.name.clone(),
        })
        .collect();
    match v.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => v.concat(),
    }
}

/// Whether a library has code for the GPU's real ISA in every fat binary.
fn native(lib: &Library, gpu: &Gpu) -> bool {
    if lib.format == CodeFormat::Kdb {
        return lib.kdb.contains(&gpu.gfx);
    }
    let sets: Vec<&[TargetId]> = lib.sets.iter().map(Vec::as_slice).collect();
    co::verdict(&sets, gpu.gfx, None) == Verdict::Present
}

fn gpu_findings(
    libs: &[Library],
    verdicts: &[Vec<(Verdict, Status)>],
    gi: usize,
    gpu: &Gpu,
    places: &[String],
    out: &mut Vec<Finding>,
) {
    let who = gpu.who();
    let real = gpu.gfx;
    let rt = gpu.runtime_gfx();
    let of = |want: &dyn Fn(&Library, Verdict, Status) -> bool| -> Vec<&Library> {
        libs.iter()
            .zip(verdicts)
            .filter(|(l, vs)| want(l, vs[gi].0, vs[gi].1))
            .map(|(l, _)| l)
            .collect()
    };
    let code_libs = of(&|l, _, _| l.format != CodeFormat::Kdb);
    let worst = libs
        .iter()
        .zip(verdicts)
        .map(|(_, vs)| vs[gi].1)
        .max()
        .unwrap_or(Status::Ok);
    let n = code_libs.len();
    let natives = code_libs.iter().filter(|l| native(l, gpu)).count();
    let mut text = format!(
        "{who}: {natives} of {n} HIP librar{} found {} {real} code (or a generic target \
         covering it).",
        if n == 1 { "y" } else { "ies" },
        if n == 1 { "carries" } else { "carry" },
    );
    if let Some((_, value)) = gpu.override_gfx.as_ref().filter(|_| rt != real) {
        let runs = code_libs
            .iter()
            .filter(|l| {
                let sets: Vec<&[TargetId]> = l.sets.iter().map(Vec::as_slice).collect();
                co::verdict(&sets, real, Some(rt)) == Verdict::Override
            })
            .count();
        text.push_str(&format!(
            " HSA_OVERRIDE_GFX_VERSION={value} makes the runtime look for {rt} code instead, \
             which {runs} of them carry."
        ));
    }
    let mut summary = Finding::new(Check::CodeObjects, worst, text);
    if worst >= Status::Warn {
        let bad = of(&|l, _, s| l.format != CodeFormat::Kdb && s >= Status::Warn);
        summary = summary.remedy(remedy_for(&bad, gpu));
    }
    summary.details = libs
        .iter()
        .zip(verdicts)
        .map(|(l, vs)| format!("{}: {}", l.label(), short(vs[gi].0, l, gpu)))
        .collect();
    out.push(
        summary
            .with("node", gpu.node)
            .with("gfx", real.to_string())
            .with("places", places.to_vec()),
    );

    let push = |out: &mut Vec<Finding>,
                group: Vec<&Library>,
                status: Status,
                msg: String,
                src: &str,
                verdict: Verdict| {
        if group.is_empty() {
            return;
        }
        let mut f = Finding::new(Check::CodeObjects, status, msg).source(src);
        if status >= Status::Warn {
            f = f.remedy(remedy_for(&group, gpu));
        }
        f.details = group
            .iter()
            .map(|l| format!("{}: {}", l.label(), l.targets().join(", ")))
            .collect();
        out.push(
            f.with("node", gpu.node)
                .with("gfx", real.to_string())
                .with("verdict", verdict.as_str())
                .with(
                    "paths",
                    group
                        .iter()
                        .map(|l| l.path.display().to_string())
                        .collect::<Vec<_>>(),
                ),
        );
    };

    // No code at all for the ISA the runtime looks for.
    let missing =
        of(&|l, v, s| l.format != CodeFormat::Kdb && v == Verdict::Missing && s == Status::Error);
    let mut msg = format!(
        "{who}: no {rt} code (nor a generic target covering it) in {}. {} kernels fail to load: \
         hipErrorNoBinaryForGpu (\"Unable to find code object for all current devices\") or \
         \"invalid device function\".",
        names(&missing),
        if missing.len() == 1 { "Its" } else { "Their" }
    );
    if missing.iter().any(|l| l.format == CodeFormat::Tensile) {
        msg.push_str(&format!(
            " rocBLAS without Tensile files for {rt} stops with \"Cannot read \
             TensileLibrary.dat\"."
        ));
    }
    let family = |minor: u32| {
        missing
            .iter()
            .filter(|l| has_family_code(l, real, minor).is_some())
            .count()
    };
    let has = |count: usize| match (missing.len(), count) {
        (1, _) => "It has",
        (m, c) if m == c => "They have",
        _ => "Some of them have",
    };
    if rt == real {
        if real.major() == 10 && real.minor() == 1 {
            if let Some(g) = missing.iter().find_map(|l| has_family_code(l, real, 3)) {
                msg.push_str(&format!(
                    " {} {g} code, but HSA_OVERRIDE_GFX_VERSION=10.3.0, the usual \
                     workaround, runs RDNA2 code on this RDNA1 silicon: a known cause of GPU \
                     memory faults and hangs. Use builds that include {real} (or \
                     gfx10-1-generic).",
                    has(family(3))
                ));
            }
        } else if let Some(g) = missing
            .iter()
            .find_map(|l| has_family_code(l, real, real.minor()))
        {
            msg.push_str(&format!(
                " {} {g} code, of the same ISA family: \
                 HSA_OVERRIDE_GFX_VERSION={}.{}.{} makes the runtime load it.",
                has(family(real.minor())),
                g.major(),
                g.minor(),
                g.stepping()
            ));
        }
    }
    let tensile = missing.iter().any(|l| l.format == CodeFormat::Tensile);
    let before = out.len();
    push(
        out,
        missing,
        Status::Error,
        msg,
        SRC_NO_BINARY,
        Verdict::Missing,
    );
    if tensile && out.len() > before {
        if let Some(f) = out.last_mut() {
            f.see_also.push(SRC_TENSILE.to_string());
        }
    }

    // Only through the override.
    if let Some((o, text)) = &gpu.override_gfx {
        let through = of(&|l, v, _| l.format != CodeFormat::Kdb && v == Verdict::Override);
        let status = override_status(real, *o);
        // Libraries that carry the real ISA's code too: the override leaves it unused.
        let own: Vec<&Library> = through.iter().copied().filter(|l| native(l, gpu)).collect();
        let unused = match own.len() {
            0 => String::new(),
            n if n == through.len() => format!(
                " ({} {real} code too, which the override leaves unused)",
                if n == 1 { "it has" } else { "they have" }
            ),
            _ => format!(
                " ({} {} {real} code too, which the override leaves unused)",
                names(&own),
                if own.len() == 1 { "has" } else { "have" }
            ),
        };
        let lead = format!(
            "{who}: HSA_OVERRIDE_GFX_VERSION={text} makes the runtime load the {o} code of {} \
             instead of {real} code{unused}",
            names(&through)
        );
        let (msg, src) = match status {
            Status::Error => (
                format!(
                    "{lead}: RDNA2 code on RDNA1 silicon, a known cause of GPU memory faults and \
                     hangs. {}",
                    if own.len() == through.len() {
                        "Unset the override.".to_string()
                    } else {
                        format!(
                            "Use builds that include {real} (or gfx10-1-generic) and unset the override."
                        )
                    }
                ),
                SRC_OVERRIDE_RX5700,
            ),
            Status::Ok => (format!("{lead}, of the same ISA family."), SRC_NO_BINARY),
            _ => (
                format!("{lead}, of another ISA family: kernels may fault or hang."),
                SRC_OVERRIDE_RX5700,
            ),
        };
        if status != Status::Ok {
            push(out, through, status, msg, src, Verdict::Override);
        }
        let misses = of(&|l, v, s| {
            l.format != CodeFormat::Kdb && v == Verdict::OverrideMisses && s == Status::Error
        });
        let msg = format!(
            "{who}: {} {} {real} code, but HSA_OVERRIDE_GFX_VERSION={text} makes the runtime look \
             for {o} code, which {} not: their kernels fail with hipErrorNoBinaryForGpu. Unset the \
             override.",
            names(&misses),
            if misses.len() == 1 { "has" } else { "have" },
            if misses.len() == 1 {
                "it does"
            } else {
                "they do"
            }
        );
        push(
            out,
            misses,
            Status::Error,
            msg,
            SRC_NO_BINARY,
            Verdict::OverrideMisses,
        );
    }

    // Some fat binaries only.
    let partial =
        of(&|l, v, s| l.format != CodeFormat::Kdb && v == Verdict::Partial && s == Status::Error);
    let msg = format!(
        "{who}: only some of the fat binaries in {} carry {rt} code; kernels from the others fail \
         with hipErrorNoBinaryForGpu or \"invalid device function\".",
        names(&partial)
    );
    push(
        out,
        partial,
        Status::Error,
        msg,
        SRC_NO_BINARY,
        Verdict::Partial,
    );

    // hipBLASLt: optional for PyTorch.
    let optional =
        of(&|l, v, s| l.format != CodeFormat::Kdb && v != Verdict::Present && s == Status::Info);
    let msg = format!(
        "{who}: no {rt} code in {}. PyTorch uses hipBLASLt only on the GPUs it lists and rocBLAS \
         on the others, so this matters only to programs that call hipBLASLt themselves.",
        names(&optional)
    );
    push(
        out,
        optional,
        Status::Info,
        msg,
        SRC_HIPBLASLT,
        Verdict::Missing,
    );

    // MIOpen kernel databases.
    let kdbs = of(&|l, _, _| l.format == CodeFormat::Kdb);
    if !kdbs.is_empty() && kdbs.iter().all(|l| !l.kdb.contains(&rt)) {
        let msg = format!(
            "{who}: no MIOpen kernel database for {rt} in {}: MIOpen compiles its kernels at \
             first use (slower the first time; they are cached in ~/.cache/miopen).",
            kdbs.iter()
                .map(|l| l.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        push(
            out,
            kdbs,
            Status::Info,
            msg,
            SRC_MIOPEN_KDB,
            Verdict::Missing,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_sort_as_people_read_them() {
        let mut v = vec![
            "gfx1030",
            "gfx10-3-generic",
            "gfx900",
            "gfx90a:xnack-",
            "gfx1100",
            "gfx1010",
            "gfx906",
        ];
        v.sort_by_key(|s| target_sort_key(s));
        assert_eq!(
            v,
            [
                "gfx900",
                "gfx906",
                "gfx90a:xnack-",
                "gfx1010",
                "gfx1030",
                "gfx10-3-generic",
                "gfx1100"
            ]
        );
    }

    #[test]
    fn dpkg_status_stanzas() {
        let text = "Package: librocsparse0\nStatus: install ok installed\nVersion: 5.3.0+dfsg-2\n\n\
                    Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n";
        assert_eq!(
            parse_dpkg_status(text),
            vec![("librocsparse0".to_string(), "5.3.0+dfsg-2".to_string())]
        );
    }

    #[test]
    fn names_from_files() {
        assert_eq!(library_name("libtorch_hip.so"), Some("PyTorch"));
        assert_eq!(library_name("librocsparse.so.0.1"), Some("rocSPARSE"));
        assert_eq!(library_name("libhipblaslt.so.0"), Some("hipBLASLt"));
        assert_eq!(library_name("libfoo.so"), None);
        assert!(is_shared_object_name("libamdhip64.so.6"));
        assert!(is_shared_object_name("x.cpython-311-x86_64-linux-gnu.so"));
        assert!(!is_shared_object_name("libfoo.a"));
    }
}
