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

/// The checks, by the name the report gives them (the `check` column and field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Topology,
    Gpu,
    GfxOverride,
    PcieAtomics,
    RmcpConfig,
    LdPreload,
    Shim,
    HipRuntime,
    Env,
    AmdgpuParam,
    DeviceAccess,
}

impl Check {
    pub fn as_str(self) -> &'static str {
        match self {
            Check::Topology => "topology",
            Check::Gpu => "gpu",
            Check::GfxOverride => "gfx-override",
            Check::PcieAtomics => "pcie-atomics",
            Check::RmcpConfig => "rmcp-config",
            Check::LdPreload => "ld-preload",
            Check::Shim => "shim",
            Check::HipRuntime => "hip-runtime",
            Check::Env => "env",
            Check::AmdgpuParam => "amdgpu-param",
            Check::DeviceAccess => "device-access",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Finding {
    pub check: Check,
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
    pub fn new(check: Check, status: Status, message: impl Into<String>) -> Finding {
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
        m.insert("check".into(), self.check.as_str().into());
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

/// Whether a GPU's PCIe link does AtomicOps, from its io_links flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atomics {
    Supported,
    Unsupported,
    Unknown,
}

impl Atomics {
    pub fn as_str(self) -> &'static str {
        match self {
            Atomics::Supported => "supported",
            Atomics::Unsupported => "unsupported",
            Atomics::Unknown => "unknown",
        }
    }
}

/// What the shim does for a GPU under the current settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Affected: coherent host allocations are rewritten (RMCP_MODE auto or force).
    Rewrites,
    /// Affected, but RMCP_MODE=dry-run: logged and counted only.
    DryRun,
    /// Affected, but RMCP_MODE=off.
    Off,
    /// Not affected.
    No,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Rewrites => "rewrites",
            Action::DryRun => "dry-run",
            Action::Off => "off",
            Action::No => "no",
        }
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
    pub pcie_atomics: Atomics,
    pub affected: bool,
    pub rmcp: Action,
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
            "pcie_atomics": self.pcie_atomics.as_str(),
            "affected": self.affected,
            "rmcp": self.rmcp.as_str(),
            "gfx_override": self.gfx_override,
            "render_node": self.render_node,
        })
    }
}

/// Where a copy of the HIP runtime was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A directory of LD_LIBRARY_PATH.
    LdLibraryPath,
    /// The ld.so cache (`ldconfig -p`).
    LdCache,
    /// A ROCm installation ($ROCM_PATH/lib, /opt/rocm*/lib).
    Rocm,
    /// A Python package (torch/lib and the like).
    SitePackages,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::LdLibraryPath => "ld-library-path",
            Origin::LdCache => "ld-cache",
            Origin::Rocm => "rocm",
            Origin::SitePackages => "site-packages",
        }
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
    /// Where it was found, in the order of the search.
    pub origins: Vec<Origin>,
    /// Sonames for which a plain program (no RUNPATH) would load this copy.
    pub default_for: Vec<String>,
}

impl LibraryRow {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "path": self.path,
            "version": self.version,
            "found_as": self.found_as,
            "origins": self.origins.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
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
