//! What rmcp reads on a user's say-so: the files and directories an option or a variable
//! names (`report --stats`, `doctor --scan`, `check --runtime`, `--shim`, `run
//! --hip-library`, RMCP_SYSFS_ROOT, RMCP_MODULE_ROOT, RMCP_DPKG_STATUS, the site-packages
//! of VIRTUAL_ENV) and the files found under them. It owns the rules every command reads
//! them by: a file is read only when it is a regular file (a FIFO, a device, a socket or a
//! directory is refused with a sentence, never opened in a way that blocks), never past a
//! size cap named here with its reason, and a problem is one sentence naming the path.
//! Usage errors end the command with [`EXIT_USAGE`] (`rmcp run`, whose statuses are env(1)'s,
//! uses its own 125).
//!
//! The type is checked twice: with `stat` before opening (so that nothing but a regular
//! file is ever opened: opening some devices does something), and with `fstat` on the
//! descriptor, opened `O_NONBLOCK | O_CLOEXEC`, in case the path was replaced in between (a
//! FIFO opened without O_NONBLOCK waits for a writer).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The exit status of a usage error (clap's too): an option names something rmcp cannot use.
pub const EXIT_USAGE: u8 = 2;

/// A file of the system's (sysfs attributes, /sys/module parameters, /proc, os-release)
/// or a Python package's small text file (`torch/version.py`, a dist-info `METADATA`,
/// `.info/version`): sysfs attributes are at most a page (4 KiB); what rmcp needs of the
/// others is in their first lines.
pub const SMALL_FILE_BYTES: u64 = 64 * 1024;
/// dpkg's status file: about 3 MiB on a desktop with 3,000 packages; 64 MiB is twenty
/// times that.
pub const DPKG_STATUS_BYTES: u64 = 64 << 20;

/// A path rmcp cannot use, and why: `"{path}: {why}"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: PathBuf,
    pub why: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

fn problem(path: &Path, why: impl Into<String>) -> Problem {
    Problem {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// An I/O error in words, without Rust's " (os error N)".
pub fn io_error_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// What a file type is, as a sentence names it.
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// What exists at `path` (symbolic links followed).
fn stat(path: &Path) -> Result<std::fs::Metadata, Problem> {
    std::fs::metadata(path).map_err(|e| problem(path, io_error_text(&e)))
}

/// `path` is a regular file (symbolic links followed), checked without opening it: for the
/// files rmcp hands to another reader (the dynamic loader takes `--runtime` and `--shim`).
pub fn regular_file(path: &Path) -> Result<(), Problem> {
    let m = stat(path)?;
    if m.is_file() {
        Ok(())
    } else {
        Err(problem(
            path,
            format!("{}, not a regular file", kind_of(m.file_type())),
        ))
    }
}

/// Whether `path` is a directory, else a regular file; anything else is refused (symbolic
/// links followed): `doctor --scan`.
pub fn file_or_directory(path: &Path) -> Result<bool, Problem> {
    let m = stat(path)?;
    if m.is_dir() || m.is_file() {
        Ok(m.is_dir())
    } else {
        Err(problem(
            path,
            format!(
                "{}, not a regular file or a directory",
                kind_of(m.file_type())
            ),
        ))
    }
}

/// `path` when it exists as something other than a regular file: for a path rmcp passes on
/// that may also be missing or a bare name the loader searches (`run --hip-library`).
pub fn not_regular_if_present(path: &Path) -> Option<Problem> {
    let m = std::fs::metadata(path).ok()?;
    (!m.is_file()).then(|| {
        problem(
            path,
            format!("{}, not a regular file", kind_of(m.file_type())),
        )
    })
}

/// Opens a regular file for reading, never blocking: refused before opening when it is not
/// one, and again after (`fstat` on the descriptor) in case it changed in between.
pub fn open_regular(path: &Path) -> Result<File, Problem> {
    regular_file(path)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        // std adds O_CLOEXEC.
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| problem(path, io_error_text(&e)))?;
    let m = file
        .metadata()
        .map_err(|e| problem(path, io_error_text(&e)))?;
    if !m.is_file() {
        return Err(problem(
            path,
            format!(
                "{} (it was replaced while rmcp opened it), not a regular file",
                kind_of(m.file_type())
            ),
        ));
    }
    Ok(file)
}

/// The whole of a regular file of at most `cap` bytes; a larger one is refused, naming
/// the cap and `what` the file was taken for. Reads at most `cap + 1` bytes whatever the
/// file's size says (a /proc or sysfs file says 0, a file may grow while read).
pub fn read_capped(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, Problem> {
    let file = open_regular(path)?;
    let too_big = || {
        problem(
            path,
            format!("larger than {cap} bytes, the most rmcp reads of {what}"),
        )
    };
    if file.metadata().is_ok_and(|m| m.len() > cap) {
        return Err(too_big());
    }
    let mut buf = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut buf)
        .map_err(|e| problem(path, io_error_text(&e)))?;
    if buf.len() as u64 > cap {
        return Err(too_big());
    }
    Ok(buf)
}

/// The first `cap` bytes of a regular file, as text (invalid UTF-8 replaced): for files
/// whose needed part comes first (a sysfs attribute, a package's `METADATA` header).
pub fn read_head(path: &Path, cap: u64) -> Result<String, Problem> {
    let file = open_regular(path)?;
    let mut buf = Vec::new();
    file.take(cap)
        .read_to_end(&mut buf)
        .map_err(|e| problem(path, io_error_text(&e)))?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn only_regular_files_are_read_and_nothing_blocks() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let start = Instant::now();
        let e = read_capped(&fifo, 10, "a test file").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: a FIFO (named pipe), not a regular file",
                fifo.display()
            )
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        let e = read_capped(Path::new("/dev/zero"), 10, "a test file").unwrap_err();
        assert_eq!(e.why, "a character device, not a regular file");
        assert_eq!(
            read_head(d.path(), 10).unwrap_err().why,
            "a directory, not a regular file"
        );
        assert_eq!(
            read_capped(&d.path().join("none"), 1, "x").unwrap_err().why,
            "No such file or directory"
        );
        assert!(file_or_directory(d.path()).unwrap());
        assert!(
            file_or_directory(&fifo)
                .unwrap_err()
                .why
                .contains("not a regular file or a directory")
        );
        assert!(not_regular_if_present(&d.path().join("none")).is_none());
        assert!(not_regular_if_present(&fifo).is_some());
    }

    #[test]
    fn the_cap_is_kept_and_named() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read_capped(&f, 10, "x").unwrap(), b"0123456789");
        assert_eq!(
            read_capped(&f, 9, "a stats file").unwrap_err().why,
            "larger than 9 bytes, the most rmcp reads of a stats file"
        );
        assert_eq!(read_head(&f, 4).unwrap(), "0123");
        // A file whose size says 0 (procfs) is read to its end, within the cap.
        assert!(
            !read_capped(Path::new("/proc/self/status"), 1 << 20, "x")
                .unwrap()
                .is_empty()
        );
    }
}
