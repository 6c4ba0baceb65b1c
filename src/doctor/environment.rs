//! The `env` check: the variables of the HIP runtime, ROCr and PyTorch that change how
//! memory is allocated (HIP_HOST_COHERENT, HSA_FORCE_FINE_GRAIN_PCIE, HSA_XNACK,
//! HSA_USE_SVM, *_VISIBLE_DEVICES, PYTORCH_HIP_ALLOC_CONF), and what each does here.
//!
//! As in every check, nothing here may panic on odd input (a malformed topology,
//! unreadable files, non-UTF-8 variables): what cannot be read is a finding, never a crash.

use rmcp_core::topology::GpuNode;

use super::report::{Check, Finding, Status};

/// amdkfd: XNACK is never enabled on GFX10 and later (kfd_process_xnack_mode).
pub const SRC_KFD_XNACK: &str =
    "https://github.com/torvalds/linux/blob/master/drivers/gpu/drm/amd/amdkfd/kfd_process.c";
/// clr: HIP_HOST_COHERENT and the coherence of hipHostMalloc.
pub const SRC_CLR_HOST_MALLOC: &str =
    "https://github.com/ROCm/clr/blob/HEAD/hipamd/src/hip_memory.cpp";

/// Variables that change allocation behaviour, and what they do.
pub fn variables(gpus: &[GpuNode], out: &mut Vec<Finding>) {
    let all_rdna = !gpus.is_empty() && gpus.iter().all(|g| g.gfx.major() >= 10);
    let mut any = false;
    let mut push = |name: &str, status: Status, msg: String, source: Option<&str>| {
        let value = std::env::var_os(name)
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut f = Finding::new(Check::Env, status, format!("{name}={value}: {msg}"))
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
            Check::Env,
            Status::Ok,
            "No variable that changes HIP allocation behaviour is set (HIP_HOST_COHERENT, \
             HSA_FORCE_FINE_GRAIN_PCIE, HSA_XNACK, HSA_USE_SVM, *_VISIBLE_DEVICES, \
             PYTORCH_HIP_ALLOC_CONF).",
        ));
    }
}
