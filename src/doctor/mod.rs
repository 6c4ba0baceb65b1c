//! `rmcp doctor`: one finding per check, each with a status, one plain sentence and, where
//! relevant, the public source behind it. Exit status: 0 when no finding is an error, 1
//! when one is, 2 when doctor itself failed or a `--scan` path is neither a file nor a
//! directory.
//!
//! This file is the command: its options, its exit statuses, and the order in which the
//! checks run. The rest:
//! - `report`: the report model (findings, GPU rows, runtime rows), serialised to JSON;
//! - `gpus`: the KFD topology, each GPU and its PCIe atomics (`topology`, `gpu`,
//!   `pcie-atomics`);
//! - `overrides`: HSA_OVERRIDE_GFX_VERSION against each GPU's ISA (`gfx-override`);
//! - `setup`: RMCP_* settings, LD_PRELOAD and where the shim is (`rmcp-config`,
//!   `ld-preload`, `shim`);
//! - `runtimes`: every libamdhip64 a process could load (`hip-runtime`), and the Python
//!   site-packages directories;
//! - `code_objects`: which GPU targets the installed HIP libraries carry code for
//!   (`code-objects`; the formats are `rmcp_core::code_objects`);
//! - `gfx101x`: on an RX 5000 made to run gfx103x code, the sites of the gfx101x hardware
//!   bugs in the code the runtime would load (`code-objects`, and the totals in
//!   `gfx-override`), bounded and cached by content;
//! - `pytorch`: the PyTorch installs, their builds and targets, the verdict and remedy per
//!   GPU (`pytorch`); `remedies`: the words of the remedies the checks attach;
//! - `triton`: the Triton installs, whether they compile buffer loads and stores, and the
//!   kernels in Triton's and Inductor's caches that drop writes on an RX 5000 (`triton`);
//! - `environment`: HIP/ROCr/PyTorch variables that change allocations (`env`);
//! - `driver`: amdgpu parameters and device files (`amdgpu-param`, `device-access`);
//! - `files`: reading small system files;
//! - `render`: the human and JSON output.
//!
//! The checks and `render` use `report` (the checks also `files`), never this file nor
//! each other.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use rmcp_core::config::Config;
use rmcp_core::topology::GpuNode;

use crate::build_info;
use report::{Report, Roots};

mod code_objects;
mod driver;
mod environment;
mod files;
mod gfx101x;
mod gpus;
mod overrides;
mod pytorch;
mod remedies;
mod render;
mod report;
mod runtimes;
mod setup;
mod triton;

/// The options of `rmcp doctor`.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Print the findings as JSON (schema: docs/cli.md).
    #[arg(long)]
    pub json: bool,
    /// KFD topology root (default: $RMCP_SYSFS_ROOT, else /sys/class/kfd/kfd/topology).
    #[arg(long, value_name = "ROOT")]
    pub sysfs: Option<PathBuf>,
    /// Look for GPU code in these files or directories (a venv, /opt/rocm, a build tree)
    /// instead of the default places (Python site-packages, /opt/rocm*, the system's
    /// library directory).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub scan: Vec<PathBuf>,
}

/// Exit status when doctor itself failed (a check panicked, the report could not be
/// written), and of a `--scan` path that is neither a file nor a directory
/// (`input::EXIT_USAGE`, the same 2). The report decides between 0 and 1 (`report::EXIT_OK`,
/// `report::EXIT_ERROR_FINDING`, `Report::exit_status`).
pub const EXIT_DOCTOR_FAILED: u8 = 2;

fn env_path(name: &str, default: &str) -> PathBuf {
    match std::env::var_os(name) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(default),
    }
}

/// Collects every finding; `progress`: the gfx101x scan may show a progress line on
/// stderr.
pub fn diagnose(args: &DoctorArgs, progress: bool) -> Report {
    // Read the path variables as the shim reads them in the programs rmcp starts, which
    // do not run in secure-execution mode (rmcp itself is never installed setuid).
    let cfg = Config::from_env(false);
    let roots = Roots {
        sysfs: args.sysfs.clone().unwrap_or_else(|| cfg.sysfs_root.clone()),
        module: env_path("RMCP_MODULE_ROOT", "/sys/module"),
        dev: env_path("RMCP_DEV_ROOT", "/dev"),
    };
    run_all(&roots, &cfg, &args.scan, progress)
}

/// The Python site-packages directories doctor reads: python3's (or RMCP_PYTHON's), then
/// the active VIRTUAL_ENV's and CONDA_PREFIX's. `rmcp check` takes PyTorch's runtime from
/// the same list.
pub fn python_site_packages() -> Vec<PathBuf> {
    let mut site_packages = runtimes::site_packages();
    for sp in runtimes::env_site_packages() {
        if !site_packages.contains(&sp) {
            site_packages.push(sp);
        }
    }
    site_packages
}

/// The version in a runtime's file name (`libamdhip64.so.6.4.60403` -> `6.4.60403`).
pub fn runtime_version_from_name(name: &str) -> Option<String> {
    runtimes::version_from_name(name)
}

/// Runs every check, in the order of the report.
fn run_all(roots: &Roots, cfg: &Config, scan: &[PathBuf], progress: bool) -> Report {
    let mut findings = Vec::new();
    let topo = gpus::topology(roots, &mut findings);
    let nodes: &[GpuNode] = topo.as_ref().map(|t| t.gpus.as_slice()).unwrap_or(&[]);
    let mut override_findings = Vec::new();
    let overrides = overrides::gfx_overrides(nodes, topo.is_some(), &mut override_findings);
    let render_minors: Vec<Option<u64>> = nodes
        .iter()
        .map(|g| gpus::render_minor(&roots.sysfs, g.node))
        .collect();
    let mut rows = Vec::new();
    for (i, g) in nodes.iter().enumerate() {
        let row = gpus::gpu_row(g, cfg, overrides[i].clone(), render_minors[i]);
        findings.push(gpus::gpu_finding(g, &row, cfg));
        rows.push(row);
    }
    findings.append(&mut override_findings);
    for (g, row) in nodes.iter().zip(&rows) {
        findings.push(gpus::pcie_atomics(g, row, cfg));
    }
    setup::rmcp_config(cfg, &mut findings);
    setup::ld_preload(&mut findings);
    setup::shim(&mut findings);
    let site_packages = python_site_packages();
    let libraries = runtimes::search(&site_packages);
    runtimes::findings(&libraries, &mut findings);
    let scanned = code_objects::scan(scan, &site_packages);
    let code_gpus: Vec<code_objects::Gpu> = nodes
        .iter()
        .zip(&overrides)
        .map(|(g, ov)| {
            let parsed = ov
                .as_deref()
                .and_then(|v| overrides::OverrideValue::parse(v).map(|o| (o.gfx(), v.to_string())));
            code_objects::Gpu::new(g, parsed)
        })
        .collect();
    let mut code_rows = code_objects::findings(&scanned, &code_gpus, &mut findings);
    // On an RX 5000 made to run gfx103x code: what that code holds.
    let sites = gfx101x::scan(&scanned, &code_gpus, progress);
    for s in sites.iter().flatten() {
        if let Some((sentence, value)) = gfx101x::override_citation(s) {
            overrides::cite_scan(&mut findings, gfx101x::node(s), &sentence, value);
        }
    }
    let override_remedy = |node: u32| overrides::remedy_of(&findings, node);
    let mut site_findings = Vec::new();
    gfx101x::findings(&sites, &mut code_rows, &override_remedy, &mut site_findings);
    findings.append(&mut site_findings);
    pytorch::findings(&site_packages, scan, &scanned, &code_gpus, &mut findings);
    let rdna1 = nodes.iter().any(|g| rmcp_core::quirks::is_rdna1(g.gfx));
    triton::findings(&site_packages, rdna1, &mut findings);
    environment::variables(nodes, &mut findings);
    driver::amdgpu_params(&roots.module, nodes, &mut findings);
    driver::device_access(&roots.dev, &rows, &mut findings);
    // Every warn and error finding says what to do; ok findings never carry advice.
    for f in &mut findings {
        debug_assert!(
            f.status < report::Status::Warn || f.remedy.is_some(),
            "a {} {} finding without a remedy: {}",
            f.status.as_str(),
            f.check.as_str(),
            f.message
        );
        if f.status == report::Status::Ok {
            f.remedy = None;
        }
    }
    Report {
        version: build_info::VERSION.to_string(),
        commit: build_info::commit().to_string(),
        sysfs: roots.sysfs.clone(),
        gpus: rows,
        libraries,
        code_objects: code_rows,
        findings,
    }
}

/// The doctor's report for `rmcp report`: the human text (no colour) and the JSON value;
/// None when doctor failed (a check panicked).
pub fn for_report(progress: bool) -> Option<(String, serde_json::Value)> {
    let args = DoctorArgs {
        json: true,
        sysfs: None,
        scan: Vec::new(),
    };
    let report = std::panic::catch_unwind(|| diagnose(&args, progress)).ok()?;
    let value = serde_json::to_value(&report).ok()?;
    Some((render::human(&report, false), value))
}

/// `rmcp doctor`.
pub fn main(args: DoctorArgs) -> u8 {
    // Each --scan path is a file or a directory (`input`): a FIFO or a device is refused
    // before anything is opened, with status 2.
    for p in &args.scan {
        if let Err(e) = crate::input::file_or_directory(p) {
            eprintln!("rmcp doctor: --scan {e}");
            return crate::input::EXIT_USAGE;
        }
    }
    // A panic in a check is doctor's own failure (status 2), never a finding.
    // A progress line only for a person watching: stderr a terminal, and not JSON.
    let progress = !args.json && std::io::stderr().is_terminal();
    let report = match std::panic::catch_unwind(|| diagnose(&args, progress)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("rmcp doctor: internal error (see the message above); this is a bug");
            return EXIT_DOCTOR_FAILED;
        }
    };
    let text = if args.json {
        match render::json(&report) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rmcp doctor: cannot write JSON: {e}");
                return EXIT_DOCTOR_FAILED;
            }
        }
    } else {
        render::human(&report, render::use_colour())
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A reader that stopped early (`| head`) needs no message.
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("rmcp doctor: cannot write the report: {e}");
        }
        return EXIT_DOCTOR_FAILED;
    }
    report.exit_status()
}
