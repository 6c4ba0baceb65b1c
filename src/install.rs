//! Finding the files rmcp works with: the shim (`rmcp run`, `rmcp check`, doctor's `shim`
//! check).
//!
//! First match wins: the path the command-line option names, else the path the variable
//! names, else the places relative to the rmcp executable (next to it, `../lib/`, and the
//! `rmcp_rdna` package a pip install put beside the `rmcp` script:
//! `../lib/python3.*/site-packages/rmcp_rdna/`, or `dist-packages` as Debian's pip
//! names it). A path
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
    /// the search report names them: `("../lib of rmcp", &["..", "lib"])`. A component
    /// with one `*` matches the directory's entries around it (`python3*`), in name order.
    pub beside_rmcp: &'static [(&'static str, &'static [&'static str])],
}

/// What the search report calls the Python package's places.
pub const IN_PACKAGE: &str = "the rmcp_rdna package beside rmcp";

/// `librmcp_shim.so`: `--shim`, `RMCP_SHIM`, next to rmcp, `../lib/`, then the `rmcp_rdna`
/// package of the pip install that put rmcp in a `bin/` (the wheel's layout: the script in
/// `PREFIX/bin`, the package in `PREFIX/lib/python3.X/site-packages`).
pub const SHIM: Wanted = Wanted {
    file_name: SHIM_NAME,
    option: "--shim",
    variable: "RMCP_SHIM",
    beside_rmcp: &[
        ("next to rmcp", &[]),
        ("../lib of rmcp", &["..", "lib"]),
        (
            IN_PACKAGE,
            &["..", "lib", "python3*", "site-packages", "rmcp_rdna"],
        ),
        (
            IN_PACKAGE,
            &["..", "lib", "python3*", "dist-packages", "rmcp_rdna"],
        ),
    ],
};

/// The shim's body for the shim at `shim`: the file librmcp_shim.so maps on a process's
/// first hooked call, beside it with symlinks followed, named as it with `_body` before
/// `.so` (the rule `body_path` in rmcp-shim/front/body.rs follows).
pub fn shim_body(shim: &Path) -> PathBuf {
    let real = std::fs::canonicalize(shim).unwrap_or_else(|_| shim.to_path_buf());
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".so").unwrap_or(&name);
    real.with_file_name(format!("{stem}_body.so"))
}

/// `dir` joined with each of `rel`'s components; a component with a `*` stands for every
/// entry of the directory so far whose name has the text around the `*`, in name order.
fn expand(dir: &Path, rel: &[&str]) -> Vec<PathBuf> {
    let mut dirs = vec![dir.to_path_buf()];
    for c in rel {
        dirs = match c.split_once('*') {
            None => dirs.into_iter().map(|d| d.join(c)).collect(),
            Some((head, tail)) => dirs
                .into_iter()
                .flat_map(|d| {
                    let mut names: Vec<_> = std::fs::read_dir(&d)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.file_name())
                        .filter(|n| {
                            n.to_str().is_some_and(|n| {
                                n.len() >= head.len() + tail.len()
                                    && n.starts_with(head)
                                    && n.ends_with(tail)
                            })
                        })
                        .collect();
                    names.sort();
                    names.into_iter().map(move |n| d.join(n))
                })
                .collect(),
        };
    }
    dirs
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
    /// Where the file was found, as the report names the place (`RMCP_SHIM`, `next to
    /// rmcp`, ...): the last place tried, when one was found.
    pub fn found_place(&self) -> Option<&str> {
        self.found.as_ref()?;
        self.tried.last().map(|(what, _)| what.as_str())
    }

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
                for d in expand(dir, rel) {
                    let p = d.join(self.file_name);
                    tried.push((what.to_string(), p.clone()));
                    if p.is_file() {
                        return Search {
                            tried,
                            found: Some(p),
                        };
                    }
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
    fn the_pip_package_beside_the_script() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        let pkg = root.path().join("lib/python3.11/site-packages/rmcp_rdna");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&pkg).unwrap();
        // Another python's site-packages without the package comes first and is passed.
        std::fs::create_dir_all(root.path().join("lib/python3.10/site-packages")).unwrap();
        let rmcp = bin.join("rmcp");
        let s = SHIM.search(None, None, Some(&rmcp));
        assert_eq!(s.found, None);
        std::fs::write(pkg.join(SHIM_NAME), b"").unwrap();
        let s = SHIM.search(None, None, Some(&rmcp));
        assert_eq!(
            s.found,
            Some(
                bin.join("../lib/python3.11/site-packages/rmcp_rdna")
                    .join(SHIM_NAME)
            )
        );
        assert_eq!(s.found_place(), Some(IN_PACKAGE));
        assert!(
            s.describe_tried()
                .contains("python3.10/site-packages/rmcp_rdna/librmcp_shim.so"),
            "{}",
            s.describe_tried()
        );
        // Next to rmcp still wins.
        std::fs::write(bin.join(SHIM_NAME), b"").unwrap();
        let s = SHIM.search(None, None, Some(&rmcp));
        assert_eq!(s.found_place(), Some("next to rmcp"));
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
