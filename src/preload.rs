//! LD_PRELOAD lists: recognising the shim by its file name, putting it in (`rmcp run`, the
//! run with rmcp of `rmcp check`), taking it out (the run without rmcp), and listing the
//! copies a value carries (`rmcp doctor`).
//!
//! The order: sanitizer runtimes that must be first in the initial library list
//! (AddressSanitizer refuses to start otherwise) stay first, in their order; the shim comes
//! right after them, then everything else ([`with_shim`]).
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

/// Whether an entry names a sanitizer runtime that goes before the shim, by its file name:
/// gcc's `libasan.so*`, `libhwasan.so*`, `liblsan.so*`, `libtsan.so*`, `libubsan.so*`
/// (`libasan.so.8`, or `libasan.so` from `gcc -print-file-name`), and clang's shared
/// runtimes `libclang_rt.<rt>-<arch>.so` (`libclang_rt.asan-x86_64.so`) or, in the
/// per-target layout, `libclang_rt.<rt>.so`, for asan, hwasan, hwasan_aliases, lsan, tsan,
/// ubsan_standalone and ubsan_minimal.
///
/// AddressSanitizer checks that its runtime is the first object after the program and
/// refuses to start otherwise. The other runtimes interpose libc functions too; they are
/// kept in front with it, so the shim never lands between two of them.
pub fn is_sanitizer_runtime(entry: &[u8]) -> bool {
    const GCC: [&[u8]; 5] = [
        b"libasan",
        b"libhwasan",
        b"liblsan",
        b"libtsan",
        b"libubsan",
    ];
    const CLANG: [&[u8]; 7] = [
        b"asan",
        b"hwasan",
        b"hwasan_aliases",
        b"lsan",
        b"tsan",
        b"ubsan_standalone",
        b"ubsan_minimal",
    ];
    let name = file_name(entry);
    GCC.iter().any(|lib| is_gcc_runtime(name, lib))
        || CLANG.iter().any(|rt| is_clang_runtime(name, rt))
}

fn file_name(entry: &[u8]) -> &[u8] {
    entry.rsplit(|b| *b == b'/').next().unwrap_or(entry)
}

/// `LIB.so` or `LIB.so.<anything>`.
fn is_gcc_runtime(name: &[u8], lib: &[u8]) -> bool {
    name.strip_prefix(lib)
        .and_then(|r| r.strip_prefix(b".so"))
        .is_some_and(|r| r.is_empty() || r.starts_with(b"."))
}

/// `libclang_rt.RT.so` or `libclang_rt.RT-<arch...>.so`.
fn is_clang_runtime(name: &[u8], rt: &[u8]) -> bool {
    name.strip_prefix(b"libclang_rt.")
        .and_then(|r| r.strip_prefix(rt))
        .and_then(|r| r.strip_suffix(b".so"))
        .is_some_and(|r| r.is_empty() || (r.len() > 1 && r.starts_with(b"-")))
}

/// The new LD_PRELOAD with `shim` in it.
///
/// - Sanitizer runtimes ([`is_sanitizer_runtime`]) come first, in their order.
/// - `shim` already there (same path or same file) and no other copy of the shim: then the
///   other entries in their order, the shim where it was. When that is the order they
///   already had, the value is returned unchanged.
/// - Otherwise `shim`, then the other entries in their order, minus any other
///   `librmcp_shim.so` (two copies of the shim in one process would hook each other).
///
/// Changed values are joined with colons.
pub fn with_shim(shim: &Path, existing: Option<&OsStr>) -> OsString {
    let entries = entries(existing);
    let is_ours = |e: &[u8]| same_file(Path::new(OsStr::from_bytes(e)), shim);
    let ours_present = entries.iter().any(|e| is_ours(e));
    let other_shims = entries.iter().any(|e| is_shim_entry(e) && !is_ours(e));
    let (mut out, rest): (Vec<&[u8]>, Vec<&[u8]>) =
        entries.iter().partition(|e| is_sanitizer_runtime(e));
    if ours_present && !other_shims {
        out.extend(rest);
        if out == entries {
            return existing.unwrap_or_default().to_os_string();
        }
    } else {
        out.push(shim.as_os_str().as_bytes());
        out.extend(
            rest.into_iter()
                .filter(|e| !is_shim_entry(e) && !is_ours(e)),
        );
    }
    OsString::from(OsStr::from_bytes(&out.join(&b':')))
}

/// The ASAN_OPTIONS flag that turns off AddressSanitizer's link-order check.
pub const ASAN_LINK_ORDER_OFF: &str = "verify_asan_link_order=0";

/// ASAN_OPTIONS for a command whose LD_PRELOAD is `preload` (as [`with_shim`] made it);
/// None leaves the variable as it is.
///
/// At start-up, AddressSanitizer's shared runtime checks that it is the first object after
/// the program (`verify_asan_link_order`) and exits with 1 otherwise. A program linked
/// against it (DT_NEEDED `libasan.so.8`, gcc's default) gets it after every LD_PRELOAD
/// entry, so the shim alone in LD_PRELOAD makes such a program refuse to start. Then
/// `verify_asan_link_order=0` goes in front of what ASAN_OPTIONS holds: the check is
/// skipped and nothing else about ASan changes (the shim defines none of the functions ASan
/// intercepts). Processes without ASan never read the variable.
///
/// Left alone when LD_PRELOAD carries anything besides the shim (an ASan runtime comes
/// first and passes the check; with any other library the check fails without rmcp as
/// well), and when ASAN_OPTIONS already names the flag.
pub fn asan_options(shim: &Path, preload: &OsStr, existing: Option<&OsStr>) -> Option<OsString> {
    let only_the_shim = entries(Some(preload))
        .into_iter()
        .all(|e| is_shim_entry(e) || same_file(Path::new(OsStr::from_bytes(e)), shim));
    let existing = existing.map(OsStr::as_bytes).unwrap_or(b"");
    let named = existing
        .windows(b"verify_asan_link_order".len())
        .any(|w| w == b"verify_asan_link_order");
    if !only_the_shim || named {
        return None;
    }
    let mut out = ASAN_LINK_ORDER_OFF.as_bytes().to_vec();
    if !existing.is_empty() {
        out.push(b':');
        out.extend_from_slice(existing);
    }
    Some(OsStr::from_bytes(&out).to_os_string())
}

/// The variables a command run with the shim gets, from the current LD_PRELOAD and
/// ASAN_OPTIONS: LD_PRELOAD ([`with_shim`]), and ASAN_OPTIONS when [`asan_options`]
/// changes it.
pub fn command_env(
    shim: &Path,
    ld_preload: Option<&OsStr>,
    asan: Option<&OsStr>,
) -> Vec<(&'static str, OsString)> {
    let preload = with_shim(shim, ld_preload);
    let asan = asan_options(shim, &preload, asan);
    let mut env = vec![("LD_PRELOAD", preload)];
    env.extend(asan.map(|v| ("ASAN_OPTIONS", v)));
    env
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

    // MERGES: the table of (existing LD_PRELOAD, result); the entrypoint's test reads it too.
    include!("preload_cases.rs");

    #[test]
    fn ld_preload_merging() {
        let s = "/opt/rmcp/lib/librmcp_shim.so";
        for (existing, want) in MERGES {
            let existing = existing.map(|e| e.replace('S', s));
            assert_eq!(
                merge(s, existing.as_deref()),
                want.replace('S', s),
                "LD_PRELOAD={existing:?}"
            );
        }
    }

    #[test]
    fn asan_link_order_check_is_off_only_when_the_shim_is_alone() {
        let s = "/opt/rmcp/lib/librmcp_shim.so";
        let env = |preload: Option<&str>, asan: Option<&str>| {
            command_env(Path::new(s), preload.map(OsStr::new), asan.map(OsStr::new))
                .into_iter()
                .map(|(k, v)| format!("{k}={}", v.into_string().unwrap()))
                .collect::<Vec<_>>()
        };
        let off = ASAN_LINK_ORDER_OFF;
        // (LD_PRELOAD, ASAN_OPTIONS) before -> ASAN_OPTIONS after (None: not set by rmcp).
        let table: &[(Option<&str>, Option<&str>, Option<&str>)] = &[
            (None, None, Some(off)),
            (Some(""), Some(""), Some(off)),
            (Some(s), None, Some(off)),
            (Some("/old/librmcp_shim.so"), None, Some(off)),
            (
                None,
                Some("detect_leaks=0"),
                Some("verify_asan_link_order=0:detect_leaks=0"),
            ),
            // The user's own setting wins, and a second rmcp run adds nothing.
            (None, Some("verify_asan_link_order=1"), None),
            (None, Some(off), None),
            (None, Some("a=1 verify_asan_link_order=true"), None),
            // An ASan runtime in LD_PRELOAD comes first: no need.
            (Some("/r/libasan.so.8"), None, None),
            (
                Some("/r/libclang_rt.asan-x86_64.so"),
                Some("detect_leaks=0"),
                None,
            ),
            // Another library ahead of a linked runtime fails the check without rmcp too.
            (Some("/a.so"), None, None),
            (Some("/r/libubsan.so.1"), None, None),
        ];
        for (preload, asan, want) in table {
            let got = env(*preload, *asan);
            let merged = with_shim(Path::new(s), preload.map(OsStr::new));
            let mut expect = vec![format!("LD_PRELOAD={}", merged.into_string().unwrap())];
            expect.extend(want.map(|w| format!("ASAN_OPTIONS={w}")));
            assert_eq!(got, expect, "LD_PRELOAD={preload:?} ASAN_OPTIONS={asan:?}");
        }
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
