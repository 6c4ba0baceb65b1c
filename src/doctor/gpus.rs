//! The GPU checks: the KFD topology (`topology`), one finding and one table row per GPU
//! (`gpu`: its ISA and what rmcp does for it), and whether its PCIe link does AtomicOps
//! (`pcie-atomics`).
//!
//! As in every check, nothing here may panic on odd input (a malformed topology,
//! unreadable files, non-UTF-8 variables): what cannot be read is a finding, never a crash.

use std::path::Path;

use rmcp_core::classify::is_affected;
use rmcp_core::config::{Config, Mode};
use rmcp_core::topology::{GpuNode, PcieAtomics, Properties, Topology};

use super::files::{io_error_text, read_small};
use super::report::{Action, Atomics, Check, Finding, GpuRow, Remedy, Roots, Status};

/// What to do about a GPU without PCIe AtomicOps: run programs under rmcp, in a mode that
/// rewrites, with the GPU among its targets.
/// RMCP_TARGETS with `gfx` added, as the value to pass (`gfx1010,...,gfx1100`).
fn targets_with(cfg: &Config, gfx: impl std::fmt::Display) -> String {
    cfg.targets
        .iter()
        .map(|t| t.to_string())
        .chain(std::iter::once(gfx.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

fn atomics_remedy(g: &GpuNode, row: &GpuRow, cfg: &Config) -> Remedy {
    let r = match row.rmcp {
        Action::Rewrites => Remedy::new(
            "Start HIP programs with `rmcp run -- CMD` (or the container entrypoint) so that \
             the shim makes their coherent host allocations non-coherent.",
        )
        .command("rmcp run -- python3 train.py"),
        Action::DryRun | Action::Off => Remedy::new(
            "Let the shim rewrite: run with RMCP_MODE=auto (the default) instead of \
             dry-run or off.",
        )
        .command("rmcp run --mode auto -- python3 train.py"),
        Action::No if g.gfx.0 == 0 => Remedy::new(
            "Its ISA is unknown, so no target list can name it: if it shows the faults rmcp \
             exists for, treat every GPU as affected.",
        )
        .command("rmcp run --mode force -- python3 train.py"),
        Action::No => Remedy::new(format!(
            "If this GPU shows the faults rmcp exists for, add {} to the shim's targets.",
            g.gfx
        ))
        .command(format!(
            "rmcp run --targets {} -- python3 train.py",
            targets_with(cfg, g.gfx)
        )),
    };
    r.source(SRC_CLR_285)
}

/// Atomics on fine-grained (coherent) host memory are wrong without PCIe AtomicOps.
pub const SRC_CLR_285: &str = "https://github.com/ROCm/clr/issues/285";

pub fn topology(roots: &Roots, out: &mut Vec<Finding>) -> Option<Topology> {
    let root = &roots.sysfs;
    match Topology::read(root) {
        Err(e) => {
            out.push(
                Finding::new(
                    Check::Topology,
                    Status::Warn,
                    format!(
                        "No KFD topology at {} ({}): the amdgpu driver is not loaded or \
                         there is no AMD GPU, so rmcp has nothing to rewrite.",
                        root.display(),
                        io_error_text(&e)
                    ),
                )
                .remedy(
                    Remedy::new(
                        "Load the amdgpu driver (it creates the topology), or point doctor at \
                         a copy with --sysfs (RMCP_SYSFS_ROOT for the shim). In a container \
                         the host's /sys is normally visible; check it is mounted.",
                    )
                    .command("sudo modprobe amdgpu")
                    .command("ls /sys/class/kfd/kfd/topology/nodes"),
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
                Finding::new(Check::Topology, Status::Ok, base)
            } else {
                Finding::new(
                    Check::Topology,
                    Status::Warn,
                    format!(
                        "{base} {} line{} or file{} could not be understood and {} skipped.",
                        t.problems.len(),
                        if t.problems.len() == 1 { "" } else { "s" },
                        if t.problems.len() == 1 { "" } else { "s" },
                        if t.problems.len() == 1 { "was" } else { "were" },
                    ),
                )
                .remedy(Remedy::new(
                    "Doctor and the shim skip what they cannot read; check the GPU rows below \
                     against the card you have. If a GPU is missing or its ISA is unknown, \
                     update the kernel (the amdgpu driver writes these files) and report the \
                     listed lines to rmcp.",
                ))
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
                    Check::Gpu,
                    Status::Info,
                    "No GPU node in the KFD topology: rmcp has nothing to rewrite here.",
                ));
            }
            Some(t)
        }
    }
}

/// `drm_render_minor` of a node (not in `GpuNode`; read here).
pub fn render_minor(sysfs: &Path, node: u32) -> Option<u64> {
    let path = sysfs
        .join("nodes")
        .join(node.to_string())
        .join("properties");
    let text = read_small(&path)?;
    Properties::parse(&text)
        .get("drm_render_minor")
        .filter(|m| *m < 1 << 20)
}

fn atomics(a: PcieAtomics) -> Atomics {
    match a {
        PcieAtomics::Supported => Atomics::Supported,
        PcieAtomics::Unsupported => Atomics::Unsupported,
        PcieAtomics::Unknown => Atomics::Unknown,
    }
}

fn rmcp_action(affected: bool, mode: Mode) -> Action {
    match (affected, mode) {
        (false, _) => Action::No,
        (true, Mode::Auto | Mode::Force) => Action::Rewrites,
        (true, Mode::DryRun) => Action::DryRun,
        (true, Mode::Off) => Action::Off,
    }
}

pub fn gpu_row(g: &GpuNode, cfg: &Config, ov: Option<String>, minor: Option<u64>) -> GpuRow {
    let affected = is_affected(g.gfx, &cfg.targets, cfg.mode);
    GpuRow {
        node: g.node,
        gfx: g.gfx.to_string(),
        gfx_target_version: (g.gfx.0 != 0).then_some(g.gfx.0),
        pci: g.pci.map(|p| p.to_string()),
        vendor_id: g.vendor_id,
        device_id: g.device_id,
        pcie_atomics: atomics(g.pcie_atomics()),
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

pub fn gpu_finding(g: &GpuNode, row: &GpuRow, cfg: &Config) -> Finding {
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
            Action::Rewrites => (
                Status::Ok,
                format!("rmcp rewrites coherent host allocations for it (RMCP_MODE={mode})."),
            ),
            Action::DryRun => (
                Status::Info,
                "affected, but RMCP_MODE=dry-run: rmcp logs and counts, changes nothing."
                    .to_string(),
            ),
            Action::Off => (
                Status::Info,
                "affected, but RMCP_MODE=off: rmcp forwards every call unchanged.".to_string(),
            ),
            Action::No => (
                Status::Ok,
                "not in RMCP_TARGETS: rmcp leaves its allocations alone.".to_string(),
            ),
        }
    };
    let mut f = Finding::new(Check::Gpu, status, format!("{what}; {tail}"));
    if status == Status::Warn {
        f = f.remedy(
            Remedy::new(format!(
                "If node {} is an RX 5000 or RX 6000 card, name its ISA for the shim \
                 (RMCP_TARGETS takes gfx names) or treat every GPU as affected with \
                 RMCP_MODE=force; check `cat /sys/class/kfd/kfd/topology/nodes/{}/properties` \
                 for gfx_target_version.",
                g.node, g.node
            ))
            .command("rmcp run --mode force -- python3 train.py"),
        );
    }
    let mut f = f
        .with("node", g.node)
        .with("gfx", g.gfx.to_string())
        .with("pci", row.pci.clone())
        .with("device_id", g.device_id)
        .with("affected", row.affected)
        .with("rmcp", row.rmcp.as_str());
    if g.vendor_id.is_some_and(|v| v != 4098) {
        f.message
            .push_str(" Its vendor_id is not AMD's (4098), which KFD does not normally report.");
    }
    f
}

pub fn pcie_atomics(g: &GpuNode, row: &GpuRow, cfg: &Config) -> Finding {
    let flags: Vec<u64> = g.io_links.iter().filter_map(|l| l.flags).collect();
    let flags_json = serde_json::Value::from(flags.clone());
    let who = format!("node {} ({})", g.node, g.gfx);
    let f = match g.pcie_atomics() {
        PcieAtomics::Supported => Finding::new(
            Check::PcieAtomics,
            Status::Ok,
            format!("{who}: the PCIe link does AtomicOps (io_links flags {flags:?})."),
        ),
        PcieAtomics::Unknown => Finding::new(
            Check::PcieAtomics,
            Status::Info,
            format!(
                "{who}: no io_link gives usable flags, so whether the platform does PCIe \
                 AtomicOps is unknown."
            ),
        ),
        PcieAtomics::Unsupported => {
            let action = match row.rmcp {
                Action::Rewrites => {
                    "rmcp makes its coherent host allocations non-coherent.".to_string()
                }
                Action::DryRun => {
                    "RMCP_MODE=dry-run: rmcp only logs what it would rewrite.".to_string()
                }
                Action::Off => "RMCP_MODE=off: rmcp changes nothing.".to_string(),
                Action::No => format!(
                    "it is not in RMCP_TARGETS, so rmcp leaves it alone (RMCP_MODE={} or \
                     RMCP_TARGETS={} would include it).",
                    Mode::Force.as_str(),
                    targets_with(cfg, g.gfx)
                ),
            };
            Finding::new(
                Check::PcieAtomics,
                Status::Warn,
                format!(
                    "{who}: the PCIe link has no AtomicOps (io_links flags {flags:?}): atomics \
                     on coherent host memory are unreliable on this GPU, the case rmcp exists \
                     for; {action}"
                ),
            )
            .source(SRC_CLR_285)
            .remedy(atomics_remedy(g, row, cfg))
        }
    };
    f.with("node", g.node)
        .with("pcie_atomics", row.pcie_atomics.as_str())
        .with("flags", flags_json)
}
