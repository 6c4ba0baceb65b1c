//! The report of `rmcp doctor`: findings (one per check, each with a status, one plain
//! sentence and the public source behind it), the GPUs and the HIP runtimes found, and the
//! places that were read. The checks fill it in; `render` prints it.
//!
//! The JSON output (docs/cli.md) is this model serialised: the field names here are the
//! keys there, and the enums serialise to the names their `as_str` gives.

use std::path::PathBuf;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

/// Exit status of doctor when no finding is an error.
pub const EXIT_OK: u8 = 0;
/// Exit status of doctor when at least one finding is an error.
pub const EXIT_ERROR_FINDING: u8 = 1;

/// Version of the JSON layout (docs/cli.md); bumped only on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    Topology,
    Gpu,
    GfxOverride,
    PcieAtomics,
    RmcpConfig,
    LdPreload,
    Shim,
    HipRuntime,
    CodeObjects,
    Pytorch,
    Triton,
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
            Check::CodeObjects => "code-objects",
            Check::Pytorch => "pytorch",
            Check::Triton => "triton",
            Check::Env => "env",
            Check::AmdgpuParam => "amdgpu-param",
            Check::DeviceAccess => "device-access",
        }
    }
}

/// One finding: `check`, `status`, `message` and `source` always, `see_also` when there
/// are further sources, then the check-specific fields of `extra` (docs/cli.md lists them).
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub check: Check,
    pub status: Status,
    pub message: String,
    /// URL of the public source behind the finding (null in JSON when there is none).
    pub source: Option<String>,
    /// Further sources, printed after `source`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub see_also: Vec<String>,
    /// Check-specific fields (node, variable, value, path, ...), flattened into the
    /// finding's JSON object.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// Detail lines printed under the message in the human output (also in `extra`
    /// where they matter).
    #[serde(skip)]
    pub details: Vec<String>,
    /// What to do: every `warn` and `error` finding has one, `ok` findings never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<Remedy>,
}

/// What to do about a finding (`remedy` in JSON): the advice, the exact commands where
/// there are any, the public sources behind it, and what it does not promise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Remedy {
    pub text: String,
    /// Shell commands, one per entry (may be empty).
    pub commands: Vec<String>,
    /// URLs of the sources (empty when the remedy is about rmcp's own setup or this
    /// machine's configuration).
    pub sources: Vec<String>,
    /// What the remedy does not promise (untested builds, unconfirmed facts).
    pub caveat: Option<String>,
    /// The date the outside facts it relies on were last checked (null when it relies on
    /// none).
    pub checked: Option<&'static str>,
}

impl Remedy {
    pub fn new(text: impl Into<String>) -> Remedy {
        Remedy {
            text: text.into(),
            commands: Vec::new(),
            sources: Vec::new(),
            caveat: None,
            checked: None,
        }
    }

    pub fn command(mut self, c: impl Into<String>) -> Remedy {
        self.commands.push(c.into());
        self
    }

    pub fn source(mut self, url: &str) -> Remedy {
        if !self.sources.iter().any(|s| s == url) {
            self.sources.push(url.to_string());
        }
        self
    }

    pub fn caveat(mut self, c: impl Into<String>) -> Remedy {
        self.caveat = Some(c.into());
        self
    }

    /// It relies on outside facts, checked on `rmcp_core::remedy::FACTS_CHECKED`.
    pub fn checked(mut self) -> Remedy {
        self.checked = Some(rmcp_core::remedy::FACTS_CHECKED);
        self
    }
}

/// The keys every finding has; `Finding::with` must not reuse them.
const FINDING_KEYS: [&str; 6] = ["check", "status", "message", "source", "see_also", "remedy"];

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
            remedy: None,
        }
    }

    /// What to do about it.
    pub fn remedy(mut self, r: Remedy) -> Finding {
        self.remedy = Some(r);
        self
    }

    /// What to do about it, if there is anything to say.
    pub fn remedy_opt(mut self, r: Option<Remedy>) -> Finding {
        self.remedy = r;
        self
    }

    pub fn source(mut self, url: &str) -> Finding {
        self.source = Some(url.to_string());
        self
    }

    pub fn see_also(mut self, url: &str) -> Finding {
        self.see_also.push(url.to_string());
        self
    }

    /// Adds a check-specific field.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Finding {
        debug_assert!(!FINDING_KEYS.contains(&key), "{key} is a fixed finding key");
        self.extra.insert(key.to_string(), value.into());
        self
    }
}

/// Whether a GPU's PCIe link does AtomicOps, from its io_links flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
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

/// One GPU of the KFD topology as doctor reports it (`gpus[]` in JSON).
#[derive(Clone, Debug, Serialize)]
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

/// Where a copy of the HIP runtime was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
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

/// One copy of the HIP runtime found on disk (`libraries[]` in JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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

/// How a library carries its GPU code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodeFormat {
    /// An ELF file whose `.hip_fatbin` holds plain offload bundles.
    Plain,
    /// The same with compressed (`CCOB`) bundles, some or all.
    CompressedBundle,
    /// A directory of Tensile code objects (rocBLAS, hipBLASLt), one file set per target.
    Tensile,
    /// A directory of MIOpen kernel databases.
    Kdb,
}

/// The verdict for one library and one GPU (`code_objects[].gpus[]` in JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CodeVerdict {
    pub node: u32,
    /// The real ISA.
    pub gfx: String,
    /// The ISA the runtime looks for: the override's, when HSA_OVERRIDE_GFX_VERSION applies.
    pub runtime_gfx: String,
    /// `present`, `override`, `override-misses`, `partial`, `missing`.
    pub verdict: &'static str,
    pub status: Status,
    /// On gfx101x silicon made to run gfx103x code: the sites of the gfx101x hardware bugs
    /// in the code the runtime loads (`gfx101x`; docs/cli.md has the layout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gfx101x: Option<Value>,
}

/// One library with GPU code (`code_objects[]` in JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CodeObjectRow {
    /// The file, or the directory of a Tensile library or kernel databases.
    pub path: String,
    /// `PyTorch`, `rocBLAS (Tensile)`, or the file name.
    pub name: String,
    /// The package it belongs to, when the path tells: `torch 2.5.1+rocm6.2 in /venv`,
    /// `librocsparse0 5.3.0+dfsg-2`, `ROCm 6.2.0`.
    pub package: Option<String>,
    pub format: CodeFormat,
    /// For compressed bundles: `zstd v3`, ...
    pub compression: Option<String>,
    /// Offload bundles read (ELF files only).
    pub bundles: Option<usize>,
    /// Every target found, canonical target IDs (`gfx90a:xnack-`).
    pub targets: Vec<String>,
    pub gpus: Vec<CodeVerdict>,
}

/// Everything doctor found.
#[derive(Clone, Debug)]
pub struct Report {
    /// rmcp's version (`rmcp` in JSON) and the commit it was built from.
    pub version: String,
    pub commit: String,
    /// The KFD topology root that was read.
    pub sysfs: PathBuf,
    pub gpus: Vec<GpuRow>,
    pub libraries: Vec<LibraryRow>,
    /// Libraries with GPU code (the `code-objects` check).
    pub code_objects: Vec<CodeObjectRow>,
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

/// Findings per status (`summary` in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub ok: usize,
    pub info: usize,
    pub warn: usize,
    pub error: usize,
}

/// The JSON layout of a report: the model, plus what follows from it (the worst status,
/// the exit status, the counts).
#[derive(Serialize)]
struct ReportJson<'a> {
    rmcp: &'a str,
    commit: &'a str,
    schema: u32,
    sysfs: String,
    status: Status,
    exit_status: u8,
    summary: Summary,
    gpus: &'a [GpuRow],
    libraries: &'a [LibraryRow],
    code_objects: &'a [CodeObjectRow],
    findings: &'a [Finding],
}

impl Report {
    pub fn summary(&self) -> Summary {
        Summary {
            ok: self.count(Status::Ok),
            info: self.count(Status::Info),
            warn: self.count(Status::Warn),
            error: self.count(Status::Error),
        }
    }
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ReportJson {
            rmcp: &self.version,
            commit: &self.commit,
            schema: SCHEMA_VERSION,
            sysfs: self.sysfs.display().to_string(),
            status: self.worst(),
            exit_status: self.exit_status(),
            summary: self.summary(),
            gpus: &self.gpus,
            libraries: &self.libraries,
            code_objects: &self.code_objects,
            findings: &self.findings,
        }
        .serialize(serializer)
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn name<T: Serialize>(v: T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn enums_serialise_to_their_names() {
        for s in [Status::Ok, Status::Info, Status::Warn, Status::Error] {
            assert_eq!(name(s), s.as_str());
        }
        for c in [
            Check::Topology,
            Check::Gpu,
            Check::GfxOverride,
            Check::PcieAtomics,
            Check::RmcpConfig,
            Check::LdPreload,
            Check::Shim,
            Check::HipRuntime,
            Check::CodeObjects,
            Check::Pytorch,
            Check::Env,
            Check::AmdgpuParam,
            Check::DeviceAccess,
        ] {
            assert_eq!(name(c), c.as_str());
        }
        for a in [Atomics::Supported, Atomics::Unsupported, Atomics::Unknown] {
            assert_eq!(name(a), a.as_str());
        }
        for (f, s) in [
            (CodeFormat::Plain, "plain"),
            (CodeFormat::CompressedBundle, "compressed-bundle"),
            (CodeFormat::Tensile, "tensile"),
            (CodeFormat::Kdb, "kdb"),
        ] {
            assert_eq!(name(f), s);
        }
        for a in [Action::Rewrites, Action::DryRun, Action::Off, Action::No] {
            assert_eq!(name(a), a.as_str());
        }
        for o in [
            Origin::LdLibraryPath,
            Origin::LdCache,
            Origin::Rocm,
            Origin::SitePackages,
        ] {
            assert_eq!(name(o), o.as_str());
        }
    }

    #[test]
    fn finding_json_has_fixed_keys_then_extra_fields() {
        let mut f = Finding::new(Check::Shim, Status::Warn, "m").with("path", Value::Null);
        f.details.push("not in JSON".into());
        assert_eq!(
            name(&f),
            json!({"check": "shim", "status": "warn", "message": "m", "source": null, "path": null})
        );
        let f = Finding::new(Check::Gpu, Status::Ok, "m")
            .source("https://a")
            .see_also("https://b")
            .with("node", 1);
        assert_eq!(
            name(&f),
            json!({"check": "gpu", "status": "ok", "message": "m", "source": "https://a",
                   "see_also": ["https://b"], "node": 1})
        );
    }

    #[test]
    fn report_json_has_the_summary_and_the_build() {
        let r = Report {
            version: "0.1.0".into(),
            commit: "abc1234".into(),
            sysfs: PathBuf::from("/t"),
            gpus: vec![],
            libraries: vec![],
            code_objects: vec![],
            findings: vec![
                Finding::new(Check::Env, Status::Ok, "a"),
                Finding::new(Check::Env, Status::Error, "b"),
            ],
        };
        let j = name(&r);
        assert_eq!(j["rmcp"], "0.1.0");
        assert_eq!(j["commit"], "abc1234");
        assert_eq!(j["schema"], SCHEMA_VERSION);
        assert_eq!(j["sysfs"], "/t");
        assert_eq!(j["status"], "error");
        assert_eq!(j["exit_status"], EXIT_ERROR_FINDING);
        assert_eq!(
            j["summary"],
            json!({"ok": 1, "info": 0, "warn": 0, "error": 1})
        );
        assert_eq!(j["findings"].as_array().unwrap().len(), 2);
    }
}
