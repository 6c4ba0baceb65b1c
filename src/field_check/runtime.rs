//! Which HIP runtime `rmcp check` measures with: the one the user's framework uses, because
//! that is the one that crashes.
//!
//! In order: `--runtime PATH`; the runtime bundled with the PyTorch `rmcp doctor` finds
//! (`torch/lib/libamdhip64.so*` in the site-packages of the active Python, of VIRTUAL_ENV,
//! of CONDA_PREFIX), then TheRock's `_rocm_sdk_core/lib` there; else whatever the dynamic
//! loader finds for `libamdhip64.so.7`, `.6`, `.5` or `libamdhip64.so` (the measurement
//! asks it, measure.rs). Nothing is loaded here: the child processes load the choice.

use std::path::{Path, PathBuf};

/// The runtime chosen, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The file to load; None: ask the loader.
    pub path: Option<PathBuf>,
    /// How it was chosen: `--runtime`, `PyTorch` (torch/lib), `TheRock` (_rocm_sdk_core),
    /// `the loader`.
    pub by: &'static str,
}

/// The files of a directory named `libamdhip64.so`, `.so.N` or `.so.N.M...`, the plain
/// name and the shortest soname first (what a framework's loader asks for).
fn runtimes_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "libamdhip64.so" || n.starts_with("libamdhip64.so."))
                && p.is_file()
        })
        .collect();
    v.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
    v
}

/// The runtime for `rmcp check`, given `--runtime` and the site-packages directories.
pub fn choose(explicit: Option<&Path>, site_packages: &[PathBuf]) -> Choice {
    if let Some(p) = explicit {
        return Choice {
            path: Some(p.to_path_buf()),
            by: "--runtime",
        };
    }
    for (pkg, by) in [("torch", "PyTorch"), ("_rocm_sdk_core", "TheRock")] {
        for sp in site_packages {
            if let Some(p) = runtimes_in(&sp.join(pkg).join("lib")).into_iter().next() {
                return Choice { path: Some(p), by };
            }
        }
    }
    Choice {
        path: None,
        by: "the loader",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_then_torch_then_therock_then_the_loader() {
        let d = tempfile::tempdir().unwrap();
        let sp1 = d.path().join("a/site-packages");
        let sp2 = d.path().join("b/site-packages");
        let sps = [sp1.clone(), sp2.clone()];
        assert_eq!(choose(None, &sps).by, "the loader");
        std::fs::create_dir_all(sp1.join("_rocm_sdk_core/lib")).unwrap();
        std::fs::write(sp1.join("_rocm_sdk_core/lib/libamdhip64.so.7"), b"").unwrap();
        let c = choose(None, &sps);
        assert_eq!(
            (c.by, c.path),
            (
                "TheRock",
                Some(sp1.join("_rocm_sdk_core/lib/libamdhip64.so.7"))
            )
        );
        std::fs::create_dir_all(sp2.join("torch/lib")).unwrap();
        for n in [
            "libamdhip64.so.6.4.43482",
            "libamdhip64.so",
            "libamdhip64.so.6",
            "libamdhip64_x.so",
        ] {
            std::fs::write(sp2.join("torch/lib").join(n), b"").unwrap();
        }
        let c = choose(None, &sps);
        assert_eq!(
            (c.by, c.path),
            ("PyTorch", Some(sp2.join("torch/lib/libamdhip64.so")))
        );
        let c = choose(Some(Path::new("/x/libamdhip64.so.5")), &sps);
        assert_eq!(c.by, "--runtime");
    }
}
