//! LD_PRELOAD lists: recognising the shim by its file name, putting it first (`rmcp run`,
//! the run with rmcp of `rmcp check`), taking it out (the run without rmcp), and listing
//! the copies a value carries (`rmcp doctor`).
//!
//! ld.so separates entries with colons or spaces; the values written here are joined with
//! colons. Values are bytes: a non-UTF-8 entry is kept as it is.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// File name of the shim.
pub const SHIM_NAME: &str = "librmcp_shim.so";

/// The non-empty entries of an LD_PRELOAD value, in order.
fn entries(value: Option<&OsStr>) -> Vec<&[u8]> {
    value
        .map(OsStr::as_bytes)
        .unwrap_or(b"")
        .split(|b| *b == b':' || *b == b' ')
        .filter(|e| !e.is_empty())
        .collect()
}

/// Whether an entry names a copy of the shim (by its file name, wherever it is).
pub fn is_shim_entry(entry: &[u8]) -> bool {
    Path::new(OsStr::from_bytes(entry))
        .file_name()
        .is_some_and(|n| n == SHIM_NAME)
}

fn same_file(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The new LD_PRELOAD with `shim` in it.
///
/// - `shim` already there (same path or same file) and no other copy of the shim: the
///   value is returned unchanged.
/// - Otherwise `shim` goes first, then the existing entries in their order, minus any other
///   `librmcp_shim.so` (two copies of the shim in one process would hook each other),
///   joined with colons.
pub fn with_shim(shim: &Path, existing: Option<&OsStr>) -> OsString {
    let entries = entries(existing);
    let is_ours = |e: &[u8]| same_file(Path::new(OsStr::from_bytes(e)), shim);
    let ours_present = entries.iter().any(|e| is_ours(e));
    let other_shims = entries.iter().any(|e| is_shim_entry(e) && !is_ours(e));
    if ours_present && !other_shims {
        return existing.unwrap_or_default().to_os_string();
    }
    let mut out: Vec<u8> = shim.as_os_str().as_bytes().to_vec();
    for e in entries {
        if is_shim_entry(e) || is_ours(e) {
            continue;
        }
        out.push(b':');
        out.extend_from_slice(e);
    }
    OsString::from(OsStr::from_bytes(&out))
}

/// LD_PRELOAD without any librmcp_shim.so entry; None when nothing is left.
pub fn without_shim(existing: Option<&OsStr>) -> Option<OsString> {
    let kept: Vec<&[u8]> = entries(existing)
        .into_iter()
        .filter(|e| !is_shim_entry(e))
        .collect();
    (!kept.is_empty()).then(|| OsStr::from_bytes(&kept.join(&b':')).to_os_string())
}

/// The copies of the shim an LD_PRELOAD value carries, in order (lossily as text).
pub fn shim_entries(value: Option<&OsStr>) -> Vec<String> {
    entries(value)
        .into_iter()
        .filter(|e| is_shim_entry(e))
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect()
}

/// Whether LD_PRELOAD can carry `path` as one entry (no colon, no space).
pub fn can_carry(path: &Path) -> bool {
    !path
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|b| *b == b':' || *b == b' ')
}

/// An absolute path for LD_PRELOAD (the command's children may chdir): the directory is
/// resolved (no `..`), the file name is kept as it is (a symlink named librmcp_shim.so
/// stays recognisable as the shim).
pub fn absolute_entry(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => Ok(std::fs::canonicalize(dir)?.join(name)),
        _ => Ok(abs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merge(shim: &str, existing: Option<&str>) -> String {
        with_shim(Path::new(shim), existing.map(OsStr::new))
            .into_string()
            .unwrap()
    }

    #[test]
    fn ld_preload_merging() {
        let s = "/opt/rmcp/lib/librmcp_shim.so";
        assert_eq!(merge(s, None), s);
        assert_eq!(merge(s, Some("")), s);
        assert_eq!(merge(s, Some(" : ")), s);
        assert_eq!(merge(s, Some("/a.so")), format!("{s}:/a.so"));
        assert_eq!(merge(s, Some("/a.so:/b.so")), format!("{s}:/a.so:/b.so"));
        assert_eq!(merge(s, Some("/a.so /b.so")), format!("{s}:/a.so:/b.so"));
        assert_eq!(merge(s, Some("/a.so: /b.so ")), format!("{s}:/a.so:/b.so"));
        // Already there: unchanged, whatever the separators.
        assert_eq!(merge(s, Some(&format!("/a.so {s}"))), format!("/a.so {s}"));
        assert_eq!(merge(s, Some(s)), s);
        // Another copy of the shim is replaced, not kept next to ours.
        assert_eq!(
            merge(s, Some("/old/librmcp_shim.so:/a.so")),
            format!("{s}:/a.so")
        );
        assert_eq!(
            merge(s, Some(&format!("/a.so:{s}:/old/librmcp_shim.so"))),
            format!("{s}:/a.so")
        );
    }

    #[test]
    fn ld_preload_without_the_shim() {
        let strip = |v: &str| without_shim(Some(OsStr::new(v))).map(|v| v.into_string().unwrap());
        assert_eq!(without_shim(None), None);
        assert_eq!(strip("/x/librmcp_shim.so"), None);
        assert_eq!(
            strip("/a.so /x/librmcp_shim.so:/b.so").as_deref(),
            Some("/a.so:/b.so")
        );
        assert_eq!(
            shim_entries(Some(OsStr::new(
                "/a.so /x/librmcp_shim.so:/y/librmcp_shim.so"
            ))),
            ["/x/librmcp_shim.so", "/y/librmcp_shim.so"]
        );
        assert!(!can_carry(Path::new("/a b/librmcp_shim.so")));
        assert!(can_carry(Path::new("/ab/librmcp_shim.so")));
    }
}
