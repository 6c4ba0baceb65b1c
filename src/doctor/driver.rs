//! The driver checks: the amdgpu module parameters that touch memory (`amdgpu-param`) and
//! access to /dev/kfd and each GPU's render node (`device-access`).
//!
//! As in every check, nothing here may panic on odd input (a malformed topology,
//! unreadable files, non-UTF-8 variables): what cannot be read is a finding, never a crash.

use std::path::Path;

use rmcp_core::topology::GpuNode;

use super::files::read_small;
use super::report::{Check, Finding, GpuRow, Remedy, Status};

/// amdgpu module parameters and their descriptions.
pub const SRC_AMDGPU_PARAMS: &str =
    "https://github.com/torvalds/linux/blob/master/drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c";

pub fn amdgpu_params(module_root: &Path, gpus: &[GpuNode], out: &mut Vec<Finding>) {
    let dir = module_root.join("amdgpu").join("parameters");
    if !dir.is_dir() {
        out.push(
            Finding::new(
                Check::AmdgpuParam,
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
                    Check::AmdgpuParam,
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
                Check::AmdgpuParam,
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

pub fn device_access(dev: &Path, rows: &[GpuRow], out: &mut Vec<Finding>) {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let kfd = dev.join("kfd");
    let have_gpus = !rows.is_empty();
    let bad = if have_gpus {
        Status::Error
    } else {
        Status::Info
    };
    let container = Remedy::new(
        "Load the amdgpu driver on the host; in a container, pass the devices through.",
    )
    .command("sudo modprobe amdgpu")
    .command("docker run --device=/dev/kfd --device=/dev/dri --group-add render IMAGE");
    let group = Remedy::new(
        "Add the user to the group that owns the device (render; video on older systems), \
         then log in again; in a container, add the group (--group-add).",
    )
    .command("sudo usermod -aG render,video \"$USER\"");
    let f = if !kfd.exists() {
        Finding::new(
            Check::DeviceAccess,
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
        .remedy_opt(have_gpus.then(|| container.clone()))
    } else if !access_rw(&kfd) {
        Finding::new(
            Check::DeviceAccess,
            bad,
            format!(
                "{} is not readable and writable by uid {uid}: add the user to the group \
                 that owns it (render, or video on older systems).",
                kfd.display()
            ),
        )
        .remedy_opt(have_gpus.then(|| group.clone()))
    } else {
        Finding::new(
            Check::DeviceAccess,
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
                Check::DeviceAccess,
                Status::Warn,
                format!(
                    "{}, {who}, is missing: HIP will not see this GPU (in a container, \
                     pass --device=/dev/dri).",
                    path.display()
                ),
            )
            .remedy(container.clone())
        } else if !access_rw(&path) {
            Finding::new(
                Check::DeviceAccess,
                Status::Warn,
                format!(
                    "{}, {who}, is not readable and writable by uid {uid}: HIP will not \
                     see this GPU; add the user to the render group.",
                    path.display()
                ),
            )
            .remedy(group.clone())
        } else {
            Finding::new(
                Check::DeviceAccess,
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
