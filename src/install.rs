//! Finding the files rmcp works with: the shim (`rmcp run`, `rmcp check`, doctor's `shim`
//! check) and the field-check program (`rmcp check`).
//!
//! First match wins: the path the command-line option names, else the path the variable
//! names, else the places relative to the rmcp executable (next to it, `../lib/`). A path
//! the user named is never skipped past: when it does not exist, nothing else is tried.
//! Only paths given at run time or relative to the executable are used, never a path of
//! the machine rmcp was built on. The search lists every place it tried, for the "not
//! found; looked at ..." messages.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::preload::SHIM_NAME;

/// A file rmcp looks for, and where.
#[derive(Debug)]
pub struct Wanted {
    /// Its file name in the places relative to rmcp: `librmcp_shim.so`.
    pub file_name: &'static str,
    /// The option that names it: `--shim`.
    pub option: &'static str,
    /// The variable that names it: `RMCP_SHIM`.
    pub variable: &'static str,
    /// Directories relative to the one holding the rmcp executable, in order, with how
    /// the search report names them: `("../lib of rmcp", &["..", "lib"])`.
    pub beside_rmcp: &'static [(&'static str, &'static [&'static str])],
}

/// `librmcp_shim.so`: `--shim`, `RMCP_SHIM`, next to rmcp, `../lib/`.
pub const SHIM: Wanted = Wanted {
    file_name: SHIM_NAME,
    option: "--shim",
    variable: "RMCP_SHIM",
    beside_rmcp: &[("next to rmcp", &[]), ("../lib of rmcp", &["..", "lib"])],
};

/// The shim's body for the shim at `shim`: the file librmcp_shim.so maps on a process's
/// first hooked call, beside it with symlinks followed, named as it with `_body` before
/// `.so` (the rule `body_path` in rmcp-shim/front/front.c follows).
pub fn shim_body(shim: &Path) -> PathBuf {
    let real = std::fs::canonicalize(shim).unwrap_or_else(|_| shim.to_path_buf());
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".so").unwrap_or(&name);
    real.with_file_name(format!("{stem}_body.so"))
}

/// Where a file was looked for, in order, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// (place, path) pairs tried, in order.
    pub tried: Vec<(String, PathBuf)>,
    /// The first that exists (explicit settings are never skipped past).
    pub found: Option<PathBuf>,
}

impl Search {
    /// "next to rmcp: /a/librmcp_shim.so; ../lib of rmcp: /a/../lib/librmcp_shim.so"
    pub fn describe_tried(&self) -> String {
        self.tried
            .iter()
            .map(|(what, p)| format!("{what}: {}", p.display()))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl Wanted {
    /// Looks for the file: `explicit` (the option's value), else `env` (the variable's
    /// value, ignored when empty), else the places relative to `exe`.
    pub fn search(
        &self,
        explicit: Option<&Path>,
        env: Option<&OsStr>,
        exe: Option<&Path>,
    ) -> Search {
        let named = explicit
            .map(|p| (self.option, p.to_path_buf()))
            .or_else(|| {
                env.filter(|v| !v.is_empty())
                    .map(|v| (self.variable, PathBuf::from(v)))
            });
        if let Some((what, p)) = named {
            let found = p.is_file().then(|| p.clone());
            return Search {
                tried: vec![(what.to_string(), p)],
                found,
            };
        }
        let mut tried = Vec::new();
        if let Some(dir) = exe.and_then(Path::parent) {
            for (what, rel) in self.beside_rmcp {
                let p = rel
                    .iter()
                    .fold(dir.to_path_buf(), |d, c| d.join(c))
                    .join(self.file_name);
                tried.push((what.to_string(), p.clone()));
                if p.is_file() {
                    return Search {
                        tried,
                        found: Some(p),
                    };
                }
            }
        }
        Search { tried, found: None }
    }

    /// The file as this process finds it: `explicit`, else the variable in the
    /// environment, else relative to the running rmcp executable.
    pub fn search_here(&self, explicit: Option<&Path>) -> Search {
        let exe = std::env::current_exe().ok();
        self.search(
            explicit,
            std::env::var_os(self.variable).as_deref(),
            exe.as_deref(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_pairs_with_the_shims_real_name() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("libX.so");
        std::fs::write(&real, b"").unwrap();
        let link = dir.path().join("sub");
        std::fs::create_dir(&link).unwrap();
        std::os::unix::fs::symlink(&real, link.join("librmcp_shim.so")).unwrap();
        let canon = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(shim_body(&real), canon.join("libX_body.so"));
        assert_eq!(
            shim_body(&link.join("librmcp_shim.so")),
            canon.join("libX_body.so")
        );
        assert_eq!(
            shim_body(Path::new("/nonexistent/librmcp_shim.so")),
            Path::new("/nonexistent/librmcp_shim_body.so")
        );
    }

    #[test]
    fn explicit_shim_is_never_skipped() {
        let s = SHIM.search(
            Some(Path::new("/nonexistent/x.so")),
            Some(OsStr::new("/bin/sh")),
            Some(Path::new("/bin/rmcp")),
        );
        assert_eq!(s.found, None);
        assert_eq!(s.tried.len(), 1);
        assert!(s.describe_tried().contains("--shim: /nonexistent/x.so"));
        let s = SHIM.search(None, Some(OsStr::new("/nonexistent/y.so")), None);
        assert_eq!(s.found, None);
        assert!(s.describe_tried().contains("RMCP_SHIM: /nonexistent/y.so"));
    }

    #[test]
    fn places_beside_rmcp_in_order() {
        let s = SHIM.search(
            None,
            Some(OsStr::new("")),
            Some(Path::new("/nonexistent/bin/rmcp")),
        );
        assert_eq!(s.found, None);
        assert_eq!(
            s.describe_tried(),
            "next to rmcp: /nonexistent/bin/librmcp_shim.so; \
             ../lib of rmcp: /nonexistent/bin/../lib/librmcp_shim.so"
        );
    }
}
