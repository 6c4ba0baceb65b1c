//! Logging: `tracing` events written as `rmcp[pid] level: message`, one write(2) per line,
//! to stderr or RMCP_LOG_FILE. The writer takes no lock, so a fork or a signal in the
//! middle of a log line leaves nothing held. This is the shim's own `tracing` dispatcher: a
//! host program that uses `tracing` itself keeps its own.

use std::fmt;
use std::io;
use std::os::fd::RawFd;

use tracing::level_filters::LevelFilter;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use rmcp_core::config::{Config, LogLevel};

/// Writes each buffer with plain write(2) calls on a file descriptor that stays open.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FdWriter(pub RawFd);

impl io::Write for FdWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes; writing to a closed or invalid fd
        // only returns an error.
        let n = unsafe { libc::write(self.0, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for FdWriter {
    type Writer = FdWriter;
    fn make_writer(&'a self) -> FdWriter {
        *self
    }
}

/// `rmcp[pid] level: message key=value`.
struct Prefix;

impl<S, N> FormatEvent<S, N> for Prefix
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warn",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        write!(writer, "rmcp[{}] {level}: ", std::process::id())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Off => LevelFilter::OFF,
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    }
}

/// Opens `path` for appending, close-on-exec.
pub(crate) fn open_append(path: &std::path::Path) -> io::Result<RawFd> {
    use std::os::fd::IntoRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    Ok(f.into_raw_fd())
}

/// Installs the shim's logger. Returns a warning to log when RMCP_LOG_FILE could not be
/// opened (the log then goes to stderr).
pub(crate) fn init(cfg: &Config) -> Option<String> {
    let mut warning = None;
    let fd = match &cfg.log_file {
        None => libc::STDERR_FILENO,
        Some(p) => match open_append(p) {
            Ok(fd) => fd,
            Err(e) => {
                warning = Some(format!(
                    "RMCP_LOG_FILE {}: {e}; logging to stderr instead",
                    p.display()
                ));
                libc::STDERR_FILENO
            }
        },
    };
    let subscriber = tracing_subscriber::fmt::Subscriber::builder()
        .with_max_level(filter(cfg.log))
        .with_writer(FdWriter(fd))
        // A log line that cannot be written is dropped: never a report of that on stderr
        // (a full disk would get two lines per event).
        .log_internal_errors(false)
        .event_format(Prefix)
        .finish();
    // Fails only if a dispatcher is already set in this copy of `tracing` (a second init).
    let _ = tracing::subscriber::set_global_default(subscriber);
    warning
}
