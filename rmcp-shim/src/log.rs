//! Logging: `tracing` events written as `rmcp[pid] level: message`, one write(2) per line,
//! to stderr or RMCP_LOG_FILE. This is the shim's own `tracing` dispatcher: a host program
//! that uses `tracing` itself keeps its own.
//!
//! Never worse than without the shim:
//! - no lock: a fork or a signal in the middle of a log line leaves nothing held;
//! - no heap: a line is formatted into a buffer on the stack (cut at [`LINE_MAX`] bytes),
//!   so logging works, and cannot abort the process, when malloc fails;
//! - RMCP_LOG_FILE is opened when the first line is written, not before: at a level that
//!   writes nothing it is never opened. It is opened non-blocking and close-on-exec, and
//!   moved to a descriptor above 2, so a program that closed stdout or stderr never finds
//!   the log file on the descriptor it opens next. A line whose write would block (a FIFO
//!   whose reader is slow) is dropped, never waited for. If it cannot be opened (a FIFO
//!   with no reader, a directory), one warning says so on stderr and the log goes there;
//! - the log file's descriptor is written only while it is still the file opened (device
//!   and inode, checked before each line): once the program closed it and perhaps opened
//!   its own file on the number, it is never written or closed again, and the log is
//!   reopened by name if the name still names that file (issue 30);
//! - stderr is written only while descriptor 2 is the file it was when the process
//!   started (the front's record at load; same device and inode): a program that closed
//!   stderr, or put a data file of its own on descriptor 2, never gets the shim's lines;
//! - a write never raises SIGPIPE (blocked on the thread for the write, one it raised
//!   consumed) and waits at most [`WRITE_PATIENCE_MS`] for room ([`write_fd`]);
//! - a line that is not written (would block, descriptor 2 replaced, write error) is
//!   dropped and counted ([`dropped_lines`]).
//!
//! The stats report goes through [`place_report`]: it replaces only a report rmcp wrote,
//! and writes or appends to anything else in place (issue 30), non-blocking.

use std::ffi::{CStr, CString, c_char, c_int};
use std::fmt::{self, Write as _};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber, span};

use rmcp_core::config::{Config, LogLevel};

/// The longest line written, newline included: at most PIPE_BUF, so that a line written
/// to a pipe is never interleaved with another process's.
pub(crate) const LINE_MAX: usize = 4096;

// ---- stderr as the process had it ------------------------------------------------------

/// What descriptor 2 was when the process started: the front records it at load (one
/// fstat(2), its only work at load), and hands it over at attach (`front`).
fn stderr_at_start() -> Option<(u64, u64)> {
    crate::front::stderr_at_load().unwrap_or_else(|| {
        // No front (unit tests): what it is now.
        identity(libc::STDERR_FILENO)
    })
}

/// (st_dev, st_ino) of an open descriptor; None if it is not open.
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes at most one `struct stat` into `st`; on failure it writes
    // nothing and `st` is not read.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

/// Is descriptor 2 still the file it was when the process started?
fn stderr_is_the_processs() -> bool {
    match stderr_at_start() {
        Some(id) => identity(libc::STDERR_FILENO) == Some(id),
        None => false,
    }
}

// ---- writing -----------------------------------------------------------------------------

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Log lines (and stderr reports) not written: the write would have blocked, descriptor 2
/// was no longer the process's stderr, or the write failed.
#[allow(dead_code, reason = "for the stats report to show")]
pub(crate) fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// How long one write waits for room (a pipe whose reader is slow, a terminal on hold)
/// before the rest is dropped: a line of the shim's never holds the program up for long.
const WRITE_PATIENCE_MS: c_int = 100;
/// The most written at once: PIPE_BUF, so that room `poll` reports for a pipe takes it
/// without waiting.
const WRITE_CHUNK: usize = 4096;

/// SIGPIPE blocked on this thread while the shim writes (issue 30): a write into a pipe or
/// FIFO whose reader has gone fails with EPIPE instead of killing the program. Dropped: a
/// SIGPIPE the write raised, which was not pending before, is consumed (`sigtimedwait`, no
/// wait), and the thread's mask is restored; one the program had pending stays pending.
struct NoSigpipe {
    old: libc::sigset_t,
    pipe: libc::sigset_t,
    pending_before: bool,
    /// A write returned EPIPE (so it raised a SIGPIPE for this thread).
    raised: bool,
}

impl NoSigpipe {
    fn new() -> NoSigpipe {
        // SAFETY: sigemptyset/sigaddset fill the sets they are given; pthread_sigmask
        // changes this thread's mask only and writes the old one into `old`; sigpending
        // writes the pending set. None of them fails with valid arguments.
        unsafe {
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
            libc::sigemptyset(&mut pending);
            libc::sigpending(&mut pending);
            NoSigpipe {
                old,
                pipe,
                pending_before: libc::sigismember(&pending, libc::SIGPIPE) == 1,
                raised: false,
            }
        }
    }
}

impl Drop for NoSigpipe {
    fn drop(&mut self) {
        if self.raised && !self.pending_before {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `pipe` holds SIGPIPE, blocked on this thread; with a zero timeout
            // sigtimedwait takes a pending one or returns EAGAIN at once.
            unsafe { libc::sigtimedwait(&self.pipe, std::ptr::null_mut(), &zero) };
        }
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// A write found no room within [`WRITE_PATIENCE_MS`]: later writes do not wait at all
/// until a descriptor has room again, so a stuck reader costs the program one wait, not one
/// per line.
static STUCK: AtomicBool = AtomicBool::new(false);

/// Waits at most [`WRITE_PATIENCE_MS`] (none while [`STUCK`]) for `fd` to take a write;
/// false if it would not.
fn writable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let wait = if STUCK.load(Ordering::Relaxed) {
        0
    } else {
        WRITE_PATIENCE_MS
    };
    for _ in 0..3 {
        // SAFETY: one valid pollfd; poll only writes its `revents`.
        match unsafe { libc::poll(&mut p, 1, wait) } {
            0 => {
                STUCK.store(true, Ordering::Relaxed);
                return false;
            }
            // Ready, or an error the write itself will report (EPIPE, EBADF).
            n if n > 0 => {
                STUCK.store(false, Ordering::Relaxed);
                return true;
            }
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return true,
        }
    }
    false
}

/// Writes all of `buf` to `fd`, retrying after signals; false if any of it was not
/// written (an error, a descriptor that stayed full for [`WRITE_PATIENCE_MS`], or a
/// non-blocking one that would block). Never raises SIGPIPE ([`NoSigpipe`]).
fn write_fd(fd: RawFd, mut buf: &[u8]) -> bool {
    // write(2) is a cancellation point; a line is the shim's own work.
    let _no_cancel = crate::cancel::NoCancel::new();
    let mut no_sigpipe = NoSigpipe::new();
    while !buf.is_empty() {
        if !writable(fd) {
            return false;
        }
        let chunk = buf.len().min(WRITE_CHUNK);
        // SAFETY: `buf` is valid for `chunk` bytes; writing to a closed or invalid fd
        // only returns an error.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), chunk) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EPIPE) => no_sigpipe.raised = true,
                _ => {}
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// Writes `buf` to stderr if descriptor 2 is still the process's stderr; otherwise (or if
/// the write fails) drops it and counts it. True if written.
pub(crate) fn write_stderr(buf: &[u8]) -> bool {
    let ok = stderr_is_the_processs() && write_fd(libc::STDERR_FILENO, buf);
    if !ok {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    ok
}

/// A descriptor the shim writes to, for `std::io::Write` users (the exit report). On
/// descriptor 2 it writes only while that is the process's stderr ([`write_stderr`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FdWriter(pub RawFd);

impl io::Write for FdWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let ok = if self.0 == libc::STDERR_FILENO {
            write_stderr(buf)
        } else {
            write_fd(self.0, buf)
        };
        if ok {
            Ok(buf.len())
        } else {
            Err(io::Error::other("not written"))
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `fd` itself if above 2; else a close-on-exec duplicate at 3 or above, and `fd` closed,
/// so the shim never holds a descriptor the program takes for stdin, stdout or stderr.
fn above_stdio(fd: RawFd) -> io::Result<RawFd> {
    if fd > libc::STDERR_FILENO {
        return Ok(fd);
    }
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor this function owns.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, libc::STDERR_FILENO + 1) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` was opened by the caller for the shim and is not used again.
    unsafe { libc::close(fd) };
    if high < 0 { Err(err) } else { Ok(high) }
}

/// open(2) with O_NONBLOCK | O_CLOEXEC | O_NOCTTY added (opening a FIFO or a device never
/// waits), moved above the standard descriptors.
fn open_nonblocking(path: &CStr, flags: c_int) -> io::Result<RawFd> {
    let _no_cancel = crate::cancel::NoCancel::new();
    let flags = flags | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: `path` is NUL-terminated; the mode argument is read only with O_CREAT.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o644 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    above_stdio(fd)
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::other("NUL in the path"))
}

/// Writes `data` to the regular file `path` (created or truncated). A path that names
/// anything else (a FIFO, a device, a directory) is refused without writing, and no open
/// or write ever waits.
pub(crate) fn write_regular_file(path: &Path, data: &[u8]) -> io::Result<()> {
    let not_regular = || io::Error::other("not a regular file");
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(not_regular());
    }
    let fd = open_nonblocking(
        &c_path(path)?,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
    )?;
    // SAFETY: `fd` was just opened for the shim; the File owns and closes it.
    let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    if write_fd(fd, data) {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Where [`place_report`] put a report.
pub(crate) enum Placed {
    /// At the name, replacing an rmcp report (returned) or nothing.
    Replaced(Option<Replaced>),
    /// Written into what is at the name, replacing nothing: why.
    InPlace(InPlace),
}

/// Why a report was written into what was at its name instead of replacing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InPlace {
    /// A device, a FIFO or a socket (a terminal, /dev/null, a pipe): written to.
    NotRegular,
    /// A regular file this process holds open (/dev/stdout and /dev/stderr redirected to a
    /// file, the program's own output file): appended to.
    HeldOpen,
    /// A regular file that is not an rmcp report (rmcp did not create it): appended to.
    NotAReport,
}

impl InPlace {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            InPlace::NotRegular => "not a regular file; the report was written to it",
            InPlace::HeldOpen => {
                "a file this process holds open; the report was appended to it, nothing replaced"
            }
            InPlace::NotAReport => {
                "a file that is not an rmcp report; the report was appended to it, nothing \
                 replaced"
            }
        }
    }
}

/// Puts the report `data` at `path` (RMCP_STATS_FILE) as a guest in the program (issue 30):
/// replaces only what rmcp itself created there (nothing, or a regular file holding an rmcp
/// report, `is_report`) that this process does not hold open, atomically
/// ([`replace_regular_file`]). Anything else is never replaced, truncated or unlinked: a
/// device, FIFO or socket is written to (non-blocking), a regular file the process holds open
/// (a descriptor path such as /dev/stdout, its own output file) or one that is not a report
/// is appended to, and the caller is told which ([`Placed::InPlace`]). A directory is an
/// error.
pub(crate) fn place_report(
    path: &Path,
    data: &[u8],
    is_report: impl Fn(&[u8]) -> bool,
) -> io::Result<Placed> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return replace_regular_file(path, data).map(Placed::Replaced);
        }
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        return Err(io::Error::other("a directory"));
    }
    let why = if !meta.is_file() {
        InPlace::NotRegular
    } else if held_open(meta.dev(), meta.ino()) {
        InPlace::HeldOpen
    } else if meta.len() <= REPORT_MAX && std::fs::read(path).is_ok_and(|bytes| is_report(&bytes)) {
        return replace_regular_file(path, data).map(Placed::Replaced);
    } else {
        InPlace::NotAReport
    };
    let fd = open_nonblocking(&c_path(path)?, libc::O_WRONLY | libc::O_APPEND)?;
    // SAFETY: `fd` was just opened for the shim; the File owns and closes it.
    let _file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if write_fd(fd, data) {
        Ok(Placed::InPlace(why))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The largest file read to tell whether it is an rmcp report.
const REPORT_MAX: u64 = 1 << 20;

/// Whether any descriptor of this process is open on the file (st_dev, st_ino).
fn held_open(dev: u64, ino: u64) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
        .any(|fd| identity(fd) == Some((dev, ino)))
}

/// A file [`replace_regular_file`] put something else's place.
pub(crate) struct Replaced {
    /// What the file held.
    pub(crate) data: Vec<u8>,
    /// When it was last written.
    pub(crate) modified: Option<std::time::SystemTime>,
}

/// Puts `data` at `path` atomically (RMCP_STATS_FILE, issue 22): written to a temporary
/// file beside it (`.NAME.rmcp-PID.tmp`), then exchanged with what was there
/// (`renameat2(RENAME_EXCHANGE)`), or moved there if nothing was (`RENAME_NOREPLACE`), so
/// a reader, or another process doing the same, never sees a partial file, and each
/// process sees exactly the file it replaced, which is returned. A symbolic link is
/// followed to the file it names. Where the file system has no `renameat2`, a plain
/// `rename` (what it replaced read just before, which a racing writer may miss); where no
/// temporary file can be created beside it (a directory the process may not write), the
/// file is written in place as before. Only a regular file (or none) is replaced.
pub(crate) fn replace_regular_file(path: &Path, data: &[u8]) -> io::Result<Option<Replaced>> {
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if std::fs::metadata(&target).is_ok_and(|m| !m.is_file()) {
        return Err(io::Error::other("not a regular file"));
    }
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return write_regular_file(path, data).map(|()| None);
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".rmcp-{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let (c_tmp, c_target) = (c_path(&tmp)?, c_path(&target)?);
    // SAFETY: a NUL-terminated path; a leftover of this pid's is removed, nothing else.
    unsafe { libc::unlink(c_tmp.as_ptr()) };
    let Ok(fd) = open_nonblocking(&c_tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) else {
        return write_regular_file(path, data).map(|()| None);
    };
    // SAFETY: `fd` was just opened for the shim; the File owns and closes it.
    let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let written = write_fd(fd, data);
    drop(file);
    let remove_tmp = || {
        // SAFETY: a NUL-terminated path of the shim's own temporary file.
        unsafe { libc::unlink(c_tmp.as_ptr()) };
    };
    if !written {
        let e = io::Error::last_os_error();
        remove_tmp();
        return Err(e);
    }
    let _no_cancel = crate::cancel::NoCancel::new();
    let renameat2 = |flags: libc::c_uint| {
        // SAFETY: renameat2(2) with two NUL-terminated paths relative to the working
        // directory (both absolute or as given); it changes nothing else.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                c_tmp.as_ptr(),
                libc::AT_FDCWD,
                c_target.as_ptr(),
                flags,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // What now sits at the temporary name: the file that was replaced.
    let take_replaced = || {
        let replaced = std::fs::symlink_metadata(&tmp)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map(|m| Replaced {
                data: std::fs::read(&tmp).unwrap_or_default(),
                modified: m.modified().ok(),
            });
        remove_tmp();
        replaced
    };
    for _ in 0..8 {
        match renameat2(libc::RENAME_EXCHANGE) {
            Ok(()) => return Ok(take_replaced()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                match renameat2(libc::RENAME_NOREPLACE) {
                    Ok(()) => return Ok(None),
                    // Another process put its report there meanwhile: exchange with it.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                    Err(e) => return plain_rename(&tmp, &target, e, remove_tmp),
                }
            }
            Err(e) => return plain_rename(&tmp, &target, e, remove_tmp),
        }
    }
    remove_tmp();
    Err(io::Error::other("the file kept changing"))
}

/// `rename(tmp, target)` where renameat2 is refused (EINVAL or ENOSYS: a file system or
/// kernel without it); another error is returned as it is, and the temporary file removed.
fn plain_rename(
    tmp: &Path,
    target: &Path,
    e: io::Error,
    remove_tmp: impl Fn(),
) -> io::Result<Option<Replaced>> {
    if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
        remove_tmp();
        return Err(e);
    }
    let replaced = std::fs::symlink_metadata(target)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| Replaced {
            data: std::fs::read(target).unwrap_or_default(),
            modified: m.modified().ok(),
        });
    match std::fs::rename(tmp, target) {
        Ok(()) => Ok(replaced),
        Err(e) => {
            remove_tmp();
            Err(e)
        }
    }
}

// ---- the log's destination ------------------------------------------------------------

/// LOG_FD: stderr, or RMCP_LOG_FILE not yet opened, or lost (its descriptor changed hands
/// and the file could not be reopened), or the log file's descriptor (>= 3).
const TO_STDERR: RawFd = -1;
const NOT_OPENED: RawFd = -2;
const LOST: RawFd = -3;
static LOG_FD: AtomicI32 = AtomicI32::new(TO_STDERR);
/// The log file's (st_dev, st_ino), recorded when it was opened: a line is written to its
/// descriptor only while the descriptor is still that file.
static LOG_DEV: AtomicU64 = AtomicU64::new(0);
static LOG_INO: AtomicU64 = AtomicU64::new(0);
/// RMCP_LOG_FILE, kept for the first line written (leaked once).
static LOG_PATH: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());

/// Where lines go: the log file's descriptor, TO_STDERR, or LOST. Opens the log file on
/// the first call; reopens it when its descriptor is no longer the file opened (a program
/// that closed every descriptor, as a daemon does, and opened its own file on the number).
fn destination() -> RawFd {
    match LOG_FD.load(Ordering::Acquire) {
        NOT_OPENED => open_log_file(),
        fd if fd >= 0 && !is_the_log(fd) => reopen_log_file(fd),
        fd => fd,
    }
}

fn log_identity() -> (u64, u64) {
    (
        LOG_DEV.load(Ordering::Acquire),
        LOG_INO.load(Ordering::Acquire),
    )
}

/// Is `fd` still the log file the shim opened?
fn is_the_log(fd: RawFd) -> bool {
    identity(fd) == Some(log_identity())
}

fn log_path() -> Option<&'static CStr> {
    let path = LOG_PATH.load(Ordering::Acquire);
    // SAFETY: LOG_PATH is null or holds a leaked CString, never freed.
    (!path.is_null()).then(|| unsafe { CStr::from_ptr(path) })
}

#[cold]
fn open_log_file() -> RawFd {
    let Some(path) = log_path() else {
        return TO_STDERR;
    };
    match open_nonblocking(path, libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT) {
        Ok(fd) => {
            if let Some((dev, ino)) = identity(fd) {
                LOG_DEV.store(dev, Ordering::Release);
                LOG_INO.store(ino, Ordering::Release);
            }
            match LOG_FD.compare_exchange(NOT_OPENED, fd, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => fd,
                Err(other) => {
                    // Another thread opened it first.
                    // SAFETY: `fd` is this thread's, unused.
                    unsafe { libc::close(fd) };
                    other
                }
            }
        }
        Err(e) => {
            if LOG_FD
                .compare_exchange(NOT_OPENED, TO_STDERR, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let mut line = Line::new("warn");
                let _ = write!(
                    line,
                    "RMCP_LOG_FILE {}: {e}; logging to stderr instead",
                    path.to_string_lossy()
                );
                write_stderr(line.finish());
            }
            TO_STDERR
        }
    }
}

/// The log's descriptor `stale` is no longer the file the shim opened: the program closed
/// it, and may have opened a file of its own on the number. The shim never writes to or
/// closes it again. The log is reopened by name when the name still names the same file (so
/// a working directory changed since, or a file renamed or replaced at the name, is never
/// written instead); otherwise the log is lost, and its lines are dropped and counted.
#[cold]
fn reopen_log_file(stale: RawFd) -> RawFd {
    let want = log_identity();
    let same_file = |path: &CStr| {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: a NUL-terminated path; stat writes one `struct stat` or nothing.
        if unsafe { libc::stat(path.as_ptr(), st.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: stat succeeded and filled `st`.
        let st = unsafe { st.assume_init() };
        (st.st_dev, st.st_ino) == want
    };
    let fresh = log_path()
        .filter(|p| same_file(p))
        .and_then(|p| open_nonblocking(p, libc::O_WRONLY | libc::O_APPEND).ok())
        .and_then(|fd| {
            if identity(fd) == Some(want) {
                Some(fd)
            } else {
                // SAFETY: `fd` was just opened by this thread and is not used.
                unsafe { libc::close(fd) };
                None
            }
        });
    match LOG_FD.compare_exchange(
        stale,
        fresh.unwrap_or(LOST),
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => fresh.unwrap_or(LOST),
        Err(now) => {
            // Another thread reopened it first.
            if let Some(fd) = fresh {
                // SAFETY: `fd` is this thread's, unused.
                unsafe { libc::close(fd) };
            }
            now
        }
    }
}

fn emit(line: &[u8]) {
    match destination() {
        TO_STDERR => {
            write_stderr(line);
        }
        fd if fd >= 0 => {
            if !write_fd(fd, line) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        _ => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// ---- formatting --------------------------------------------------------------------------

/// One line, formatted on the stack; what does not fit is cut, and the cut marked.
struct Line {
    buf: [u8; LINE_MAX],
    len: usize,
    cut: bool,
}

/// Room kept at the end for the cut mark and the newline.
const TAIL: &[u8] = " [...]\n".as_bytes();

impl Line {
    /// `rmcp[pid] level: `
    fn new(level: &str) -> Line {
        let mut line = Line {
            buf: [0; LINE_MAX],
            len: 0,
            cut: false,
        };
        let _ = write!(line, "rmcp[{}] {level}: ", std::process::id());
        line
    }

    /// The line with its newline.
    fn finish(&mut self) -> &[u8] {
        let tail: &[u8] = if self.cut { TAIL } else { b"\n" };
        self.buf[self.len..self.len + tail.len()].copy_from_slice(tail);
        &self.buf[..self.len + tail.len()]
    }
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = LINE_MAX - TAIL.len() - self.len;
        let mut n = s.len();
        if n > room {
            self.cut = true;
            n = room;
            while !s.is_char_boundary(n) {
                n -= 1;
            }
        }
        // Newlines inside a message would break the one-event-per-line format.
        for (dst, b) in self.buf[self.len..self.len + n].iter_mut().zip(s.bytes()) {
            *dst = if b == b'\n' { b' ' } else { b };
        }
        self.len += n;
        Ok(())
    }
}

struct Fields<'a>(&'a mut Line);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = self.0.write_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

// ---- the dispatcher ------------------------------------------------------------------------

/// The level set by `init`: LevelFilter as 0 (off) to 5 (trace).
static MAX_LEVEL: AtomicU8 = AtomicU8::new(0);

fn max_level() -> LevelFilter {
    match MAX_LEVEL.load(Ordering::Relaxed) {
        0 => LevelFilter::OFF,
        1 => LevelFilter::ERROR,
        2 => LevelFilter::WARN,
        3 => LevelFilter::INFO,
        4 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

fn level_number(level: LogLevel) -> u8 {
    match level {
        LogLevel::Off => 0,
        LogLevel::Error => 1,
        LogLevel::Warn => 2,
        LogLevel::Info => 3,
        LogLevel::Debug => 4,
        LogLevel::Trace => 5,
    }
}

/// The shim's `tracing` subscriber: events only (the shim opens no span), written by
/// [`emit`]. The level is fixed before it is installed, so each callsite's interest is
/// decided once, and a disabled event costs tracing's own static check.
struct Logger;

impl Subscriber for Logger {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.enabled(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= max_level()
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(max_level())
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warn",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        let mut line = Line::new(level);
        event.record(&mut Fields(&mut line));
        emit(line.finish());
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// Installs the shim's logger. RMCP_LOG_FILE is opened when the first line is written;
/// if that fails, that line says so (on stderr). Returns None: nothing is left for the
/// caller to log (the return is kept for the caller's shape).
pub(crate) fn init(cfg: &Config) -> Option<String> {
    MAX_LEVEL.store(level_number(cfg.log), Ordering::Relaxed);
    if let Some(p) = &cfg.log_file {
        if let Ok(c) = c_path(p) {
            LOG_PATH.store(c.into_raw(), Ordering::Release);
            LOG_FD.store(NOT_OPENED, Ordering::Release);
        }
    }
    // Fails only if a dispatcher is already set in this copy of `tracing` (a second init).
    let _ = tracing::subscriber::set_global_default(Logger);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(line: &mut Line) -> String {
        String::from_utf8(line.finish().to_vec()).unwrap()
    }

    #[test]
    fn lines_are_prefixed_and_newline_free() {
        let mut l = Line::new("warn");
        write!(l, "two\nlines").unwrap();
        let t = text(&mut l);
        assert_eq!(t, format!("rmcp[{}] warn: two lines\n", std::process::id()));
    }

    #[test]
    fn long_lines_are_cut_at_a_char_boundary_and_marked() {
        let mut l = Line::new("info");
        for _ in 0..LINE_MAX {
            write!(l, "é").unwrap();
        }
        let t = text(&mut l);
        assert!(t.len() <= LINE_MAX, "{}", t.len());
        assert!(t.ends_with(" [...]\n"), "{}", &t[t.len() - 20..]);
        assert!(t.starts_with("rmcp["));
    }

    #[test]
    fn a_regular_file_only() {
        let dir = std::env::temp_dir().join(format!("rmcp-log-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("report.json");
        write_regular_file(&f, b"{}\n").unwrap();
        write_regular_file(&f, b"[]\n").unwrap();
        assert_eq!(
            std::fs::read(&f).unwrap(),
            b"[]\n",
            "truncated, not appended"
        );
        assert!(write_regular_file(&dir, b"x").is_err(), "a directory");
        assert!(
            write_regular_file(Path::new("/dev/null"), b"x").is_err(),
            "a device"
        );
        let fifo = dir.join("fifo");
        let c = c_path(&fifo).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(
            write_regular_file(&fifo, b"x").is_err(),
            "a FIFO, and no wait"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_report_replaces_only_what_rmcp_created() {
        let dir = std::env::temp_dir().join(format!("rmcp-place-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let is_report = |b: &[u8]| b.starts_with(b"{\"rmcp\"");
        let f = dir.join("r.json");
        // Nothing there: created. A report there: replaced.
        assert!(matches!(
            place_report(&f, b"{\"rmcp\":1}\n", is_report).unwrap(),
            Placed::Replaced(None)
        ));
        assert!(matches!(
            place_report(&f, b"{\"rmcp\":2}\n", is_report).unwrap(),
            Placed::Replaced(Some(_))
        ));
        assert_eq!(std::fs::read(&f).unwrap(), b"{\"rmcp\":2}\n");
        // Another file: appended to, never replaced (same inode, its data kept).
        let other = dir.join("job.log");
        std::fs::write(&other, b"the program's line\n").unwrap();
        let ino = std::fs::metadata(&other).unwrap().ino();
        assert!(matches!(
            place_report(&other, b"{\"rmcp\":3}\n", is_report).unwrap(),
            Placed::InPlace(InPlace::NotAReport)
        ));
        assert_eq!(
            std::fs::read(&other).unwrap(),
            b"the program's line\n{\"rmcp\":3}\n"
        );
        assert_eq!(std::fs::metadata(&other).unwrap().ino(), ino);
        // A report this process holds open: appended to.
        let held = std::fs::File::open(&f).unwrap();
        assert!(matches!(
            place_report(&f, b"{\"rmcp\":4}\n", is_report).unwrap(),
            Placed::InPlace(InPlace::HeldOpen)
        ));
        drop(held);
        assert_eq!(std::fs::read(&f).unwrap(), b"{\"rmcp\":2}\n{\"rmcp\":4}\n");
        // A device: written to.
        assert!(matches!(
            place_report(Path::new("/dev/null"), b"x", is_report).unwrap(),
            Placed::InPlace(InPlace::NotRegular)
        ));
        assert!(place_report(&dir, b"x", is_report).is_err(), "a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn descriptors_are_moved_above_stdio() {
        // A descriptor at 0..=2 cannot be made safely in a test binary that shares them;
        // one above 2 is kept as it is.
        let fd = open_nonblocking(c"/dev/null", libc::O_WRONLY).unwrap();
        assert!(fd > 2);
        // SAFETY: fcntl(F_GETFD) on the descriptor just opened.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        // SAFETY: closing the descriptor just opened.
        unsafe { libc::close(fd) };
    }
}
