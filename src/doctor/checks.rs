//! The checks of `rmcp doctor`. Each pushes findings; none may panic on odd input (a
//! malformed topology, unreadable files, non-UTF-8 variables): what cannot be read is a
//! finding, never a crash.

use std::ffi::OsString;
use std::path::Path;

use rmcp_shim::config::{Config, Mode};
use rmcp_shim::topology::{Gfx, GpuNode, PcieAtomics, Properties, Topology, is_affected};

use super::report::{Finding, GpuRow, Report, Roots, Status};

/// Atomics on fine-grained (coherent) host memory are wrong without PCIe AtomicOps.
pub const SRC_CLR_285: &str = "https://github.com/ROCm/clr/issues/285";
/// RX 5700: HSA_OVERRIDE_GFX_VERSION=10.3.0 crashes the card, 10.1.0 works.
pub const SRC_OVERRIDE_RX5700: &str = "https://github.com/ROCm/legacy-rocm-build/issues/887";
/// AMD: the override is meant for internal debugging, not a workaround.
pub const SRC_OVERRIDE_DEBUG_AID: &str = "https://github.com/ROCm/legacy-rocm-build/issues/5238";
/// RX 5500 XT overridden to gfx1030: HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION.
pub const SRC_OVERRIDE_RX5500: &str =
    "https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/9283";
/// libhsakmt: HSA_OVERRIDE_GFX_VERSION[_<node>] parsing (topology_sysfs_get_node_props).
pub const SRC_HSAKMT_TOPOLOGY: &str =
    "https://github.com/ROCm/ROCR-Runtime/blob/HEAD/libhsakmt/src/topology.c";
/// amdkfd: XNACK is never enabled on GFX10 and later (kfd_process_xnack_mode).
pub const SRC_KFD_XNACK: &str =
    "https://github.com/torvalds/linux/blob/master/drivers/gpu/drm/amd/amdkfd/kfd_process.c";
/// amdgpu module parameters and their descriptions.
pub const SRC_AMDGPU_PARAMS: &str =
    "https://github.com/torvalds/linux/blob/master/drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c";
/// clr: HIP_HOST_COHERENT and the coherence of hipHostMalloc.
pub const SRC_CLR_HOST_MALLOC: &str =
    "https://github.com/ROCm/clr/blob/HEAD/hipamd/src/hip_memory.cpp";

const OVERRIDE: &str = "HSA_OVERRIDE_GFX_VERSION";

pub fn run_all(roots: &Roots, cfg: &Config) -> Report {
    let mut findings = Vec::new();
    let topo = topology(roots, &mut findings);
    let gpus: &[GpuNode] = topo.as_ref().map(|t| t.gpus.as_slice()).unwrap_or(&[]);
    let mut override_findings = Vec::new();
    let overrides = gfx_overrides(gpus, topo.is_some(), &mut override_findings);
    let render_minors: Vec<Option<u64>> = gpus
        .iter()
        .map(|g| render_minor(&roots.sysfs, g.node))
        .collect();
    let mut rows = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let row = gpu_row(g, cfg, overrides[i].clone(), render_minors[i]);
        findings.push(gpu_finding(g, &row, cfg));
        rows.push(row);
    }
    findings.append(&mut override_findings);
    for (g, row) in gpus.iter().zip(&rows) {
        findings.push(pcie_atomics(g, row, cfg));
    }
    rmcp_config(cfg, &mut findings);
    ld_preload(&mut findings);
    shim(&mut findings);
    let libraries = super::runtimes::search();
    super::runtimes::findings(&libraries, &mut findings);
    environment(gpus, &mut findings);
    amdgpu_params(&roots.module, gpus, &mut findings);
    device_access(&roots.dev, &rows, &mut findings);
    Report {
        sysfs: roots.sysfs.clone(),
        gpus: rows,
        libraries,
        findings,
    }
}

fn topology(roots: &Roots, out: &mut Vec<Finding>) -> Option<Topology> {
    let root = &roots.sysfs;
    match Topology::read(root) {
        Err(e) => {
            out.push(
                Finding::new(
                    "topology",
                    Status::Warn,
                    format!(
                        "No KFD topology at {} ({}): the amdgpu driver is not loaded or \
                         there is no AMD GPU, so rmcp has nothing to rewrite.",
                        root.display(),
                        io_error_text(&e)
                    ),
                )
                .with("path", root.display().to_string())
                .with("cpu_nodes", serde_json::Value::Null)
                .with("gpu_count", 0),
            );
            None
        }
        Ok(t) => {
            let gpus = t.gpus.len();
            let base = format!(
                "KFD topology at {}: {} CPU node{}, {} GPU{}.",
                root.display(),
                t.cpu_nodes,
                if t.cpu_nodes == 1 { "" } else { "s" },
                gpus,
                if gpus == 1 { "" } else { "s" }
            );
            let mut f = if t.problems.is_empty() {
                Finding::new("topology", Status::Ok, base)
            } else {
                Finding::new(
                    "topology",
                    Status::Warn,
                    format!(
                        "{base} {} line{} or file{} could not be understood and {} skipped.",
                        t.problems.len(),
                        if t.problems.len() == 1 { "" } else { "s" },
                        if t.problems.len() == 1 { "" } else { "s" },
                        if t.problems.len() == 1 { "was" } else { "were" },
                    ),
                )
            };
            // Shown relative to the root (the JSON keeps them as they are).
            let prefix = format!("{}/", root.display());
            f.details = t
                .problems
                .iter()
                .map(|p| p.strip_prefix(&prefix).unwrap_or(p).to_string())
                .collect();
            f = f
                .with("path", root.display().to_string())
                .with("cpu_nodes", t.cpu_nodes)
                .with("gpu_count", gpus)
                .with("problems", t.problems.clone());
            out.push(f);
            if gpus == 0 {
                out.push(Finding::new(
                    "gpu",
                    Status::Info,
                    "No GPU node in the KFD topology: rmcp has nothing to rewrite here.",
                ));
            }
            Some(t)
        }
    }
}

/// "No such file or directory", without Rust's " (os error 2)".
fn io_error_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `drm_render_minor` of a node (not in `GpuNode`; read here).
fn render_minor(sysfs: &Path, node: u32) -> Option<u64> {
    let path = sysfs
        .join("nodes")
        .join(node.to_string())
        .join("properties");
    let text = read_small(&path)?;
    Properties::parse(&text)
        .get("drm_render_minor")
        .filter(|m| *m < 1 << 20)
}

/// Reads a small text file (sysfs-sized), lossily.
pub fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(64 * 1024).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

fn atomics_str(a: PcieAtomics) -> &'static str {
    match a {
        PcieAtomics::Supported => "supported",
        PcieAtomics::Unsupported => "unsupported",
        PcieAtomics::Unknown => "unknown",
    }
}

fn rmcp_action(affected: bool, mode: Mode) -> &'static str {
    match (affected, mode) {
        (false, _) => "no",
        (true, Mode::Auto | Mode::Force) => "rewrites",
        (true, Mode::DryRun) => "dry-run",
        (true, Mode::Off) => "off",
    }
}

fn gpu_row(g: &GpuNode, cfg: &Config, ov: Option<String>, minor: Option<u64>) -> GpuRow {
    let affected = is_affected(g, cfg);
    GpuRow {
        node: g.node,
        gfx: g.gfx.to_string(),
        gfx_target_version: (g.gfx.0 != 0).then_some(g.gfx.0),
        pci: g.pci.map(|p| p.to_string()),
        vendor_id: g.vendor_id,
        device_id: g.device_id,
        pcie_atomics: atomics_str(g.pcie_atomics()),
        affected,
        rmcp: rmcp_action(affected, cfg.mode),
        gfx_override: ov,
        render_node: minor.map(|m| format!("renderD{m}")),
    }
}

fn describe_gpu(g: &GpuNode) -> String {
    let mut s = format!("node {}: {}", g.node, g.gfx);
    if let Some(d) = g.device_id {
        s.push_str(&format!(" (device 0x{d:04x})"));
    }
    match g.pci {
        Some(p) => s.push_str(&format!(" at {p}")),
        None => s.push_str(" at an unknown PCI address"),
    }
    s
}

fn gpu_finding(g: &GpuNode, row: &GpuRow, cfg: &Config) -> Finding {
    let what = describe_gpu(g);
    let mode = cfg.mode.as_str();
    let (status, tail) = if g.gfx.0 == 0 && !row.affected {
        (
            Status::Warn,
            "its ISA is unknown (no usable gfx_target_version), so rmcp cannot tell whether \
             it is affected and leaves it alone."
                .to_string(),
        )
    } else {
        match row.rmcp {
            "rewrites" => (
                Status::Ok,
                format!("rmcp rewrites coherent host allocations for it (RMCP_MODE={mode})."),
            ),
            "dry-run" => (
                Status::Info,
                "affected, but RMCP_MODE=dry-run: rmcp logs and counts, changes nothing."
                    .to_string(),
            ),
            "off" => (
                Status::Info,
                "affected, but RMCP_MODE=off: rmcp forwards every call unchanged.".to_string(),
            ),
            _ => (
                Status::Ok,
                "not in RMCP_TARGETS: rmcp leaves its allocations alone.".to_string(),
            ),
        }
    };
    let mut f = Finding::new("gpu", status, format!("{what}; {tail}"))
        .with("node", g.node)
        .with("gfx", g.gfx.to_string())
        .with("pci", row.pci.clone())
        .with("device_id", g.device_id)
        .with("affected", row.affected)
        .with("rmcp", row.rmcp);
    if g.vendor_id.is_some_and(|v| v != 4098) {
        f.message
            .push_str(" Its vendor_id is not AMD's (4098), which KFD does not normally report.");
    }
    f
}

fn pcie_atomics(g: &GpuNode, row: &GpuRow, cfg: &Config) -> Finding {
    let flags: Vec<u64> = g.io_links.iter().filter_map(|l| l.flags).collect();
    let flags_json = serde_json::Value::from(flags.clone());
    let who = format!("node {} ({})", g.node, g.gfx);
    let f = match g.pcie_atomics() {
        PcieAtomics::Supported => Finding::new(
            "pcie-atomics",
            Status::Ok,
            format!("{who}: the PCIe link does AtomicOps (io_links flags {flags:?})."),
        ),
        PcieAtomics::Unknown => Finding::new(
            "pcie-atomics",
            Status::Info,
            format!(
                "{who}: no io_link gives usable flags, so whether the platform does PCIe \
                 AtomicOps is unknown."
            ),
        ),
        PcieAtomics::Unsupported => {
            let action = match row.rmcp {
                "rewrites" => "rmcp makes its coherent host allocations non-coherent.".to_string(),
                "dry-run" => "RMCP_MODE=dry-run: rmcp only logs what it would rewrite.".to_string(),
                "off" => "RMCP_MODE=off: rmcp changes nothing.".to_string(),
                _ => format!(
                    "it is not in RMCP_TARGETS, so rmcp leaves it alone (RMCP_MODE={} or \
                     RMCP_TARGETS={} would include it).",
                    Mode::Force.as_str(),
                    cfg.targets
                        .iter()
                        .map(|t| t.to_string())
                        .chain(std::iter::once(g.gfx.to_string()))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            };
            Finding::new(
                "pcie-atomics",
                Status::Warn,
                format!(
                    "{who}: the PCIe link has no AtomicOps (io_links flags {flags:?}): atomics \
                     on coherent host memory are unreliable on this GPU, the case rmcp exists \
                     for; {action}"
                ),
            )
            .source(SRC_CLR_285)
        }
    };
    f.with("node", g.node)
        .with("pcie_atomics", row.pcie_atomics)
        .with("flags", flags_json)
}

/// A parsed HSA_OVERRIDE_GFX_VERSION value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverrideValue {
    pub major: u32,
    pub minor: u32,
    pub stepping: u32,
}

impl OverrideValue {
    /// libhsakmt's rule: `%u.%u.%u` and nothing after, major <= 63, minor and stepping <= 255.
    pub fn parse(s: &str) -> Option<OverrideValue> {
        let mut it = s.split('.');
        let mut num = |max: u32| -> Option<u32> {
            let t = it.next()?;
            if t.is_empty() || t.len() > 10 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse::<u32>().ok().filter(|v| *v <= max)
        };
        let v = OverrideValue {
            major: num(63)?,
            minor: num(255)?,
            stepping: num(255)?,
        };
        if it.next().is_some() {
            return None;
        }
        Some(v)
    }

    pub fn gfx(self) -> Gfx {
        Gfx(self.major * 10000 + self.minor * 100 + self.stepping)
    }
}

/// The per-node override variables set in the environment: (node, name, value).
fn per_node_overrides() -> Vec<(u32, String, OsString)> {
    let prefix = format!("{OVERRIDE}_");
    let mut out: Vec<(u32, String, OsString)> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.into_string().ok()?;
            let n = k.strip_prefix(&prefix)?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((n.parse::<u32>().ok()?, k, v))
        })
        .collect();
    out.sort();
    out
}

/// Checks the overrides against the real ISA; returns, per GPU, the override ROCr applies.
fn gfx_overrides(
    gpus: &[GpuNode],
    have_topology: bool,
    out: &mut Vec<Finding>,
) -> Vec<Option<String>> {
    let global = std::env::var_os(OVERRIDE);
    let per_node = per_node_overrides();
    let mut applied = vec![None; gpus.len()];

    if global.is_none() && per_node.is_empty() {
        out.push(
            Finding::new(
                "gfx-override",
                Status::Ok,
                format!("{OVERRIDE} is not set: HIP sees each GPU's real ISA."),
            )
            .with("variable", OVERRIDE)
            .with("value", serde_json::Value::Null),
        );
        return applied;
    }

    for (n, name, _) in &per_node {
        if !gpus.iter().any(|g| g.node == *n) {
            out.push(
                Finding::new(
                    "gfx-override",
                    Status::Warn,
                    format!(
                        "{name} names node {n}, which is not a GPU node of the KFD topology, \
                         so it has no effect: the number is the KFD node number, CPU nodes \
                         included (the first GPU is usually node 1)."
                    ),
                )
                .source(SRC_HSAKMT_TOPOLOGY)
                .with("variable", name.clone())
                .with("node", *n),
            );
        }
    }

    if gpus.is_empty() {
        if let Some(v) = &global {
            out.push(
                Finding::new(
                    "gfx-override",
                    Status::Info,
                    format!(
                        "{OVERRIDE}={} is set but there is no GPU {} to compare it with.",
                        v.to_string_lossy(),
                        if have_topology {
                            "in the topology"
                        } else {
                            "(no topology)"
                        }
                    ),
                )
                .with("variable", OVERRIDE)
                .with("value", v.to_string_lossy().into_owned()),
            );
        }
        return applied;
    }

    for (i, g) in gpus.iter().enumerate() {
        let specific = per_node.iter().find(|(n, _, _)| *n == g.node);
        let (name, raw) = match (specific, &global) {
            (Some((_, name, v)), _) => (name.clone(), v.clone()),
            (None, Some(v)) => (OVERRIDE.to_string(), v.clone()),
            (None, None) => continue,
        };
        let value = raw.to_string_lossy().into_owned();
        applied[i] = Some(value.clone());
        out.push(
            override_finding(g, &name, &value)
                .with("variable", name.clone())
                .with("value", value.clone())
                .with("node", g.node)
                .with("gfx", g.gfx.to_string()),
        );
    }
    applied
}

fn override_finding(g: &GpuNode, name: &str, value: &str) -> Finding {
    let Some(ov) = OverrideValue::parse(value) else {
        return Finding::new(
            "gfx-override",
            Status::Error,
            format!(
                "{name}={value:?} is not major.minor.stepping (e.g. 10.1.0): ROCr rejects it \
                 and HIP finds no usable GPU."
            ),
        )
        .source(SRC_HSAKMT_TOPOLOGY);
    };
    let real = g.gfx;
    let claimed = ov.gfx();
    let node = g.node;
    if real.0 == 0 {
        return Finding::new(
            "gfx-override",
            Status::Warn,
            format!(
                "{name}={value} applies to node {node}, whose real ISA is unknown, so doctor \
                 cannot tell whether {claimed} code can run on it."
            ),
        );
    }
    if real.major() == 10 && real.minor() == 1 && ov.major == 10 && ov.minor == 3 {
        return Finding::new(
            "gfx-override",
            Status::Error,
            format!(
                "{name}={value} makes node {node} ({real}, RX 5000-series RDNA1 silicon) run \
                 {claimed} (RDNA2) code: a known cause of GPU memory faults and hangs. Use \
                 10.1.0, the matching value, or unset it; AMD calls the override a debugging \
                 aid."
            ),
        )
        .source(SRC_OVERRIDE_RX5700)
        .see_also(SRC_OVERRIDE_RX5500)
        .see_also(SRC_OVERRIDE_DEBUG_AID);
    }
    if real.major() == ov.major && real.minor() == ov.minor {
        let detail = if real == claimed {
            "it is the real ISA".to_string()
        } else {
            format!("same ISA family as the real {real}")
        };
        return Finding::new(
            "gfx-override",
            Status::Ok,
            format!("{name}={value} on node {node} ({real}): {claimed} code, {detail}."),
        );
    }
    Finding::new(
        "gfx-override",
        Status::Warn,
        format!(
            "{name}={value} makes node {node} ({real}) run {claimed} code, another ISA family: \
             kernels may fault or hang. AMD calls the override a debugging aid, not a \
             workaround."
        ),
    )
    .source(SRC_OVERRIDE_DEBUG_AID)
}

fn rmcp_config(cfg: &Config, out: &mut Vec<Finding>) {
    let targets: Vec<String> = cfg.targets.iter().map(|t| t.to_string()).collect();
    let status = match cfg.mode {
        Mode::Auto | Mode::Force => Status::Ok,
        Mode::DryRun | Mode::Off => Status::Info,
    };
    out.push(
        Finding::new(
            "rmcp-config",
            status,
            format!(
                "RMCP_MODE={}; targets: {}; {} of the shim's {} RMCP_* variables set.",
                cfg.mode.as_str(),
                targets.join(", "),
                rmcp_vars_set(),
                rmcp_shim::config::VARIABLES.len()
            ),
        )
        .with("mode", cfg.mode.as_str())
        .with("targets", targets),
    );
    for w in &cfg.warnings {
        out.push(Finding::new("rmcp-config", Status::Warn, format!("{w}.")));
    }
}

fn rmcp_vars_set() -> usize {
    rmcp_shim::config::VARIABLES
        .iter()
        .filter(|(n, _, _)| std::env::var_os(n).is_some())
        .count()
}

fn ld_preload(out: &mut Vec<Finding>) {
    let shims = crate::preload::shim_entries(std::env::var_os("LD_PRELOAD").as_deref());
    let f = match shims.as_slice() {
        [] => Finding::new(
            "ld-preload",
            Status::Info,
            "LD_PRELOAD does not carry librmcp_shim.so in this shell: start programs with \
             `rmcp run -- CMD` (or the container entrypoint).",
        ),
        [one] if Path::new(one).is_file() => Finding::new(
            "ld-preload",
            Status::Ok,
            format!("LD_PRELOAD carries the shim: {one}."),
        ),
        [one] => Finding::new(
            "ld-preload",
            Status::Warn,
            format!("LD_PRELOAD names {one}, which does not exist: ld.so ignores it."),
        ),
        many => Finding::new(
            "ld-preload",
            Status::Warn,
            format!(
                "LD_PRELOAD carries {} copies of the shim ({}): keep one (rmcp run does).",
                many.len(),
                many.join(", ")
            ),
        ),
    };
    out.push(f.with("shims", shims));
}

fn shim(out: &mut Vec<Finding>) {
    let search = crate::install::SHIM.search_here(None);
    let f = match &search.found {
        Some(p) => Finding::new(
            "shim",
            Status::Ok,
            format!("rmcp run would preload {}.", p.display()),
        )
        .with("path", p.display().to_string()),
        None => Finding::new(
            "shim",
            Status::Warn,
            format!(
                "rmcp run would not find librmcp_shim.so (looked at {}); give --shim PATH \
                 or set RMCP_SHIM.",
                search.describe_tried()
            ),
        )
        .with("path", serde_json::Value::Null),
    };
    out.push(f);
}

/// Variables that change allocation behaviour, and what they do.
fn environment(gpus: &[GpuNode], out: &mut Vec<Finding>) {
    let all_rdna = !gpus.is_empty() && gpus.iter().all(|g| g.gfx.major() >= 10);
    let mut any = false;
    let mut push = |name: &str, status: Status, msg: String, source: Option<&str>| {
        let value = std::env::var_os(name)
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut f = Finding::new("env", status, format!("{name}={value}: {msg}"))
            .with("variable", name)
            .with("value", value);
        if let Some(s) = source {
            f = f.source(s);
        }
        out.push(f);
    };
    let get = |name: &str| -> Option<String> {
        std::env::var_os(name).map(|v| v.to_string_lossy().trim().to_string())
    };

    if let Some(v) = get("HIP_HOST_COHERENT") {
        any = true;
        let msg = if v == "1" {
            "hipHostMalloc calls with only Portable/WriteCombined flags become coherent \
             (fine-grained) host memory, so more allocations are coherent."
        } else {
            "only the value 1 changes anything (it makes hipHostMalloc with Portable or \
             WriteCombined flags coherent); this value leaves the default."
        };
        push(
            "HIP_HOST_COHERENT",
            Status::Info,
            msg.into(),
            Some(SRC_CLR_HOST_MALLOC),
        );
    }
    if let Some(v) = get("HSA_FORCE_FINE_GRAIN_PCIE") {
        any = true;
        let msg = if v == "1" {
            "ROCr exposes fine-grained VRAM on PCIe cards, so hipExtMallocWithFlags(.., \
             Finegrained) gets it (rmcp coarsens such requests on affected GPUs unless \
             RMCP_FINEGRAINED=keep)."
        } else {
            "only 1 changes anything (fine-grained VRAM on PCIe cards); this value leaves \
             the default."
        };
        push("HSA_FORCE_FINE_GRAIN_PCIE", Status::Info, msg.into(), None);
    }
    if get("HSA_XNACK").is_some() {
        any = true;
        let msg = if all_rdna {
            "does nothing here: the kernel never enables XNACK (page-fault retry) on GFX10 \
             and later, which includes every RDNA GPU."
        } else {
            "asks for XNACK (page-fault retry); the kernel never enables it on GFX10 and \
             later (RDNA), only on some GFX9 GPUs."
        };
        push("HSA_XNACK", Status::Info, msg.into(), Some(SRC_KFD_XNACK));
    }
    if let Some(v) = get("HSA_USE_SVM") {
        any = true;
        let msg = if v == "0" {
            "ROCr stops using the kernel's SVM API, which changes how hipMallocManaged \
             memory is backed; it does not change hipHostMalloc coherence."
        } else {
            "only 0 changes anything (it turns off ROCr's use of the SVM API)."
        };
        push("HSA_USE_SVM", Status::Info, msg.into(), None);
    }
    for name in [
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    ] {
        if get(name).is_some() {
            any = true;
            push(
                name,
                Status::Info,
                "hides and renumbers GPUs for HIP; rmcp maps HIP ordinals to GPUs by PCI \
                 address, so it still treats each GPU by its real ISA."
                    .into(),
                None,
            );
        }
    }
    if get("PYTORCH_HIP_ALLOC_CONF").is_some() {
        any = true;
        push(
            "PYTORCH_HIP_ALLOC_CONF",
            Status::Info,
            "tunes PyTorch's caching allocator for device memory (hipMalloc, already \
             coarse-grained); it does not change pinned host memory, which is what rmcp \
             rewrites."
                .into(),
            None,
        );
    }
    if !any {
        out.push(Finding::new(
            "env",
            Status::Ok,
            "No variable that changes HIP allocation behaviour is set (HIP_HOST_COHERENT, \
             HSA_FORCE_FINE_GRAIN_PCIE, HSA_XNACK, HSA_USE_SVM, *_VISIBLE_DEVICES, \
             PYTORCH_HIP_ALLOC_CONF).",
        ));
    }
}

fn amdgpu_params(module_root: &Path, gpus: &[GpuNode], out: &mut Vec<Finding>) {
    let dir = module_root.join("amdgpu").join("parameters");
    if !dir.is_dir() {
        out.push(
            Finding::new(
                "amdgpu-param",
                Status::Info,
                format!(
                    "{} does not exist: the amdgpu module is not loaded here.",
                    dir.display()
                ),
            )
            .with("path", dir.display().to_string()),
        );
        return;
    }
    let has_gc94 = gpus
        .iter()
        .any(|g| g.gfx.major() == 9 && g.gfx.minor() == 4);
    for name in ["noretry", "vm_fragment_size", "mtype_local"] {
        let path = dir.join(name);
        let Some(raw) = read_small(&path) else {
            out.push(
                Finding::new(
                    "amdgpu-param",
                    Status::Info,
                    format!("amdgpu.{name}: not present in this kernel."),
                )
                .with("parameter", name)
                .with("value", serde_json::Value::Null),
            );
            continue;
        };
        let value = raw.trim().to_string();
        let meaning = match name {
            "noretry" => format!(
                "{} Retry faults only matter with XNACK, which the kernel never enables on \
                 RDNA.",
                match value.as_str() {
                    "-1" => "automatic (the default).",
                    "0" => "retry faults enabled.",
                    "1" => "retry faults disabled.",
                    _ => "an unexpected value.",
                }
            ),
            "vm_fragment_size" => format!(
                "GPU page-table fragment size {}; it affects TLB efficiency, not coherence.",
                if value == "-1" {
                    "chosen by the driver (the default)".to_string()
                } else {
                    format!("2^{value} pages")
                }
            ),
            _ => format!(
                "MTYPE of local memory {}. It only affects GC 9.4.x (MI300-class) GPUs{}; it \
                 does nothing for RDNA, where coherent memory is mapped uncached.",
                match value.as_str() {
                    "0" => "is RW (the default)",
                    "1" => "is NC",
                    "2" => "is CC",
                    _ => "has an unexpected value",
                },
                if has_gc94 {
                    ""
                } else {
                    ", and none is present"
                }
            ),
        };
        out.push(
            Finding::new(
                "amdgpu-param",
                Status::Info,
                format!("amdgpu.{name}={value}: {meaning}"),
            )
            .source(SRC_AMDGPU_PARAMS)
            .with("parameter", name)
            .with("value", value),
        );
    }
}

fn access_rw(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

fn device_access(dev: &Path, rows: &[GpuRow], out: &mut Vec<Finding>) {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let kfd = dev.join("kfd");
    let have_gpus = !rows.is_empty();
    let bad = if have_gpus {
        Status::Error
    } else {
        Status::Info
    };
    let f = if !kfd.exists() {
        Finding::new(
            "device-access",
            bad,
            format!(
                "{} is missing: HIP cannot reach any GPU{}.",
                kfd.display(),
                if have_gpus {
                    " (in a container, pass --device=/dev/kfd)"
                } else {
                    ", and the topology shows none"
                }
            ),
        )
    } else if !access_rw(&kfd) {
        Finding::new(
            "device-access",
            bad,
            format!(
                "{} is not readable and writable by uid {uid}: add the user to the group \
                 that owns it (render, or video on older systems).",
                kfd.display()
            ),
        )
    } else {
        Finding::new(
            "device-access",
            Status::Ok,
            format!("{} is present and readable and writable.", kfd.display()),
        )
    };
    out.push(f.with("path", kfd.display().to_string()));

    for row in rows {
        let Some(name) = &row.render_node else {
            continue;
        };
        let path = dev.join("dri").join(name);
        let who = format!("the render node of node {} ({})", row.node, row.gfx);
        let f = if !path.exists() {
            Finding::new(
                "device-access",
                Status::Warn,
                format!(
                    "{}, {who}, is missing: HIP will not see this GPU (in a container, \
                     pass --device=/dev/dri).",
                    path.display()
                ),
            )
        } else if !access_rw(&path) {
            Finding::new(
                "device-access",
                Status::Warn,
                format!(
                    "{}, {who}, is not readable and writable by uid {uid}: HIP will not \
                     see this GPU; add the user to the render group.",
                    path.display()
                ),
            )
        } else {
            Finding::new(
                "device-access",
                Status::Ok,
                format!(
                    "{}, {who}, is present and readable and writable.",
                    path.display()
                ),
            )
        };
        out.push(
            f.with("path", path.display().to_string())
                .with("node", row.node),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_values_follow_libhsakmt() {
        let v = OverrideValue::parse("10.3.0").unwrap();
        assert_eq!(v.gfx().to_string(), "gfx1030");
        assert_eq!(
            OverrideValue::parse("9.0.10").unwrap().gfx().to_string(),
            "gfx90a"
        );
        for bad in [
            "", "10.3", "10.3.0.1", "10.3.0 ", "a.b.c", "64.0.0", "10.256.0", "-1.0.0", "10..0",
        ] {
            assert_eq!(OverrideValue::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rdna1_with_rdna2_code_is_an_error_and_matching_family_ok() {
        let g = |v: u32| GpuNode {
            node: 1,
            gfx: Gfx(v),
            pci: None,
            vendor_id: Some(4098),
            device_id: Some(0x731f),
            io_links: vec![],
        };
        for (gfx, value, want) in [
            (100100, "10.3.0", Status::Error),
            (100102, "10.3.1", Status::Error),
            (100100, "10.1.0", Status::Ok),
            (100301, "10.3.0", Status::Ok),
            (110000, "10.3.0", Status::Warn),
            (0, "10.3.0", Status::Warn),
            (100100, "ten", Status::Error),
        ] {
            assert_eq!(
                override_finding(&g(gfx), "X", value).status,
                want,
                "gfx {gfx}, override {value}"
            );
        }
    }
}
