//! Reading the small system files doctor looks at (sysfs, /sys/module): through `input`
//! (regular files only, never blocking, at most `input::SMALL_FILE_BYTES`), lossy, and with
//! I/O errors worded for people.

use std::path::Path;

/// "No such file or directory", without Rust's " (os error 2)".
pub fn io_error_text(e: &std::io::Error) -> String {
    crate::input::io_error_text(e)
}

/// Reads a small text file (sysfs-sized), lossily; None when it is not a readable regular
/// file.
pub fn read_small(path: &Path) -> Option<String> {
    crate::input::read_head(path, crate::input::SMALL_FILE_BYTES).ok()
}
