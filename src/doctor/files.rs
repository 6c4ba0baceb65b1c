//! Reading the small system files doctor looks at (sysfs, /sys/module): bounded, lossy,
//! and with I/O errors worded for people.

use std::path::Path;

/// "No such file or directory", without Rust's " (os error 2)".
pub fn io_error_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Reads a small text file (sysfs-sized), lossily.
pub fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(64 * 1024).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}
