//! The report of `rmcp doctor`: findings (one per check, each with a status, one plain
//! sentence and the public source behind it), the GPUs and the HIP runtimes found, and the
//! places that were read. The checks fill it in; `render` prints it.

use std::path::PathBuf;

use serde_json::{Map, Value};

/// Exit status of doctor when no finding is an error.
pub const EXIT_OK: u8 = 0;
/// Exit status of doctor when at least one finding is an error.
pub const EXIT_ERROR_FINDING: u8 = 1;

/// Version of the JSON layout (docs/cli.md); bumped only on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Info,
    Warn,
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Error => "error",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    pub message: String,
    pub source: Option<String>,
    /// Further sources, printed after `source`.
    pub see_also: Vec<String>,
    /// Check-specific fields (node, variable, value, path, ...), kept in insertion order.
    pub extra: Map<String, Value>,
    /// Detail lines printed under the message (also in `extra` where they matter).
    pub details: Vec<String>,
}

impl Finding {
    pub fn new(check: &'static str, status: Status, message: impl Into<String>) -> Finding {
        Finding {
            check,
            status,
            message: message.into(),
            source: None,
            see_also: Vec::new(),
            extra: Map::new(),
            details: Vec::new(),
        }
    }

    pub fn source(mut self, url: &str) -> Finding {
        self.source = Some(url.to_string());
        self
    }

    pub fn see_also(mut self, url: &str) -> Finding {
        self.see_also.push(url.to_string());
        self
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Finding {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("check".into(), self.check.into());
        m.insert("status".into(), self.status.as_str().into());
        m.insert("message".into(), self.message.clone().into());
        m.insert(
            "source".into(),
            self.source.clone().map(Value::from).unwrap_or(Value::Null),
        );
        if !self.see_also.is_empty() {
            m.insert("see_also".into(), self.see_also.clone().into());
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

/// One GPU of the KFD topology as doctor reports it.
#[derive(Clone, Debug)]
pub struct GpuRow {
    pub node: u32,
    pub gfx: String,
    pub gfx_target_version: Option<u32>,
    pub pci: Option<String>,
    pub vendor_id: Option<u64>,
    pub device_id: Option<u64>,
    /// "supported", "unsupported", "unknown".
    pub pcie_atomics: &'static str,
    pub affected: bool,
    /// "rewrites", "dry-run", "off" (affected but RMCP_MODE says so), "no" (not affected).
    pub rmcp: &'static str,
    /// The override ROCr applies to this node, if any.
    pub gfx_override: Option<String>,
    pub render_node: Option<String>,
}

impl GpuRow {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "node": self.node,
            "gfx": self.gfx,
            "gfx_target_version": self.gfx_target_version,
            "pci": self.pci,
            "vendor_id": self.vendor_id,
            "device_id": self.device_id,
            "pcie_atomics": self.pcie_atomics,
            "affected": self.affected,
            "rmcp": self.rmcp,
            "gfx_override": self.gfx_override,
            "render_node": self.render_node,
        })
    }
}

/// One copy of the HIP runtime found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryRow {
    /// The file itself (symlinks resolved).
    pub path: String,
    pub version: Option<String>,
    /// Names it was found under (ld.so cache entries, directory entries).
    pub found_as: Vec<String>,
    /// "ld-library-path", "ld-cache", "rocm", "site-packages".
    pub origins: Vec<String>,
    /// Sonames for which a plain program (no RUNPATH) would load this copy.
    pub default_for: Vec<String>,
}

impl LibraryRow {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "path": self.path,
            "version": self.version,
            "found_as": self.found_as,
            "origins": self.origins,
            "default_for": self.default_for,
        })
    }
}

/// Everything doctor found.
#[derive(Clone, Debug)]
pub struct Report {
    pub sysfs: PathBuf,
    pub gpus: Vec<GpuRow>,
    pub libraries: Vec<LibraryRow>,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn worst(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    pub fn count(&self, s: Status) -> usize {
        self.findings.iter().filter(|f| f.status == s).count()
    }

    pub fn exit_status(&self) -> u8 {
        if self.worst() == Status::Error {
            EXIT_ERROR_FINDING
        } else {
            EXIT_OK
        }
    }
}

/// The places doctor reads, overridable for tests.
#[derive(Clone, Debug)]
pub struct Roots {
    pub sysfs: PathBuf,
    /// `/sys/module` (RMCP_MODULE_ROOT).
    pub module: PathBuf,
    /// `/dev` (RMCP_DEV_ROOT).
    pub dev: PathBuf,
}
