//! What rmcp knows about its own build: the package version and the commit it was built
//! from. The commit comes from `RMCP_BUILD_COMMIT` at compile time (set by the build
//! script); a build without it says "unknown". Nothing else about the build is recorded.

use std::sync::LazyLock;

/// The package version, `0.1.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit rmcp was built from, or "unknown".
pub fn commit() -> &'static str {
    option_env!("RMCP_BUILD_COMMIT")
        .filter(|c| !c.is_empty())
        .unwrap_or("unknown")
}

/// `0.1.0 (commit abc1234)`: what `rmcp --version` prints after the name.
pub fn version_line() -> &'static str {
    static LINE: LazyLock<String> = LazyLock::new(|| format!("{VERSION} (commit {})", commit()));
    LINE.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line_names_version_and_commit() {
        let line = version_line();
        assert!(line.starts_with(VERSION), "{line}");
        assert!(line.ends_with(&format!("(commit {})", commit())), "{line}");
        assert!(!commit().is_empty());
    }
}
