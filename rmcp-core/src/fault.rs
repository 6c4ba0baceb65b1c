//! What rmcp says when the GPU faults: the facts the shim gathers at the moment of a VM fault
//! or a queue error ([`Fault`]), and the block of text a person reads ([`render`]). Pure: the
//! shim's `fault` module gathers the facts over FFI (ROCr's event, `hsa_amd_pointer_info`, its
//! own launch ring and allocation record, the KFD topology) and writes the lines through its
//! logger; this module only turns facts into words, so that every case is a table test.
//!
//! The words follow ROCr's own (runtime.cpp `VMFaultHandler`, `hsa_amd_memory_fault_reason_t`
//! in hsa_ext_amd.h) and the queue errors HIP's `callbackQueue` prints (hsa.h, hsa_ext_amd.h
//! status codes). What the block claims about a cause is only what the facts show: the
//! faulting kernel is among those in flight, not necessarily the last launched.

use std::fmt::Write as _;

use crate::gfx::Gfx;
use crate::remedy::{
    OVERRIDE_VARIABLE, OverrideEffect, OverrideValue, family, override_effect, therock_commands,
    therock_device,
};
use crate::topology::PcieAtomics;

/// `hsa_amd_memory_fault_reason_t` bits (hsa_ext_amd.h).
pub mod reason {
    pub const PAGE_NOT_PRESENT: u32 = 1 << 0;
    pub const READ_ONLY: u32 = 1 << 1;
    pub const NX: u32 = 1 << 2;
    pub const HOST_ONLY: u32 = 1 << 3;
    pub const DRAMECC: u32 = 1 << 4;
    pub const IMPRECISE: u32 = 1 << 5;
    pub const SRAMECC: u32 = 1 << 6;
    pub const HANG: u32 = 1 << 31;
}

/// `hsa_status_t` values a queue's error callback receives (hsa.h, hsa_ext_amd.h).
pub mod status {
    pub const ERROR_EXCEPTION: u32 = 0x1016;
    pub const ERROR_MEMORY_APERTURE_VIOLATION: u32 = 0x29;
    pub const ERROR_ILLEGAL_INSTRUCTION: u32 = 0x2a;
    pub const ERROR_MEMORY_FAULT: u32 = 0x2b;
}

/// `hsa_amd_pointer_type_t` (hsa_ext_amd.h; 7.x adds 5 and 6).
pub mod pointer_type {
    pub const UNKNOWN: u32 = 0;
    pub const HSA: u32 = 1;
    pub const LOCKED: u32 = 2;
    pub const GRAPHICS: u32 = 3;
    pub const IPC: u32 = 4;
    pub const RESERVED_ADDR: u32 = 5;
    pub const HSA_VMEM: u32 = 6;
}

/// `hsa_amd_memory_pool_global_flag_t` bits, as `hsa_amd_pointer_info` reports them.
pub mod global_flag {
    pub const KERNARG: u32 = 1;
    pub const FINE_GRAINED: u32 = 2;
    pub const COARSE_GRAINED: u32 = 4;
    pub const EXTENDED_SCOPE_FINE_GRAINED: u32 = 8;
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// ROCr's `HSA_AMD_GPU_MEMORY_FAULT_EVENT`: `fault_reason_mask` bits.
    VmFault { reasons: u32 },
    /// A queue's error callback: its `hsa_status_t`.
    QueueError { status: u32 },
    /// ROCr's `HSA_AMD_GPU_HW_EXCEPTION_EVENT`: the driver reset the GPU
    /// (`hsa_amd_hw_exception_reset_cause_t`: 1 a GPU hang, 2 an ECC error).
    HwException { cause: u32 },
}

/// `hsa_amd_hw_exception_reset_cause_t` (hsa_ext_amd.h).
pub mod hw_exception {
    pub const GPU_HANG: u32 = 1 << 0;
    pub const ECC: u32 = 1 << 1;
}

/// The GPU it happened on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gpu {
    /// The KFD node (ROCr's `node-N`).
    pub node: Option<u32>,
    /// The silicon's ISA, from the KFD topology.
    pub real: Option<Gfx>,
    /// The ISA the runtime reports (`HSA_AGENT_INFO_NAME`): another under an override.
    pub runtime_isa: Option<String>,
    /// The marketing name (`HSA_AMD_AGENT_INFO_PRODUCT_NAME`).
    pub marketing: Option<String>,
    pub pcie_atomics: Option<PcieAtomics>,
}

/// An allocation as `hsa_amd_pointer_info` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// [`pointer_type`].
    pub kind: u32,
    pub base: u64,
    pub size: u64,
    /// The KFD node of the agent that owns its pool (None: unknown).
    pub owner_node: Option<u32>,
    /// Whether the owner is the CPU.
    pub owner_is_cpu: Option<bool>,
    /// [`global_flag`] bits.
    pub global_flags: u32,
}

/// The hooked call that made an allocation (the shim's own record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    pub call: String,
    /// The calling library (its file), or what is known of it.
    pub library: String,
    pub size: u64,
    pub flags_asked: u32,
    pub flags_forwarded: u32,
    /// The call the shim made in its place, when it rewrote it (`hipHostMalloc`, ...).
    pub forwarded_as: Option<String>,
}

/// Where the address lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The event carries no address (a queue error).
    NoAddress,
    /// The runtime could not be asked.
    NotAsked,
    /// In no allocation the runtime knows.
    Outside,
    Inside {
        allocation: Allocation,
        made: Option<Made>,
    },
}

/// A kernel launched before the fault, newest first (within its thread: the order across
/// threads is not recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The device kernel's name (`__hipRegisterFunction`, `hipModuleGetFunction`), or None.
    pub name: Option<String>,
    /// The library the kernel (its host stub) or the launch came from.
    pub library: Option<String>,
    /// The launch function it went through.
    pub via: &'static str,
    /// The thread that launched it (its `pthread_t`).
    pub thread: u64,
}

/// Everything the block says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub what: What,
    /// The faulting address (VM faults; ROCr gives it page-aligned).
    pub address: Option<u64>,
    pub gpu: Gpu,
    pub place: Place,
    /// Each queue rmcp saw created, with the packet at its read index (the dispatch running,
    /// [`crate::dispatch`]).
    pub running: Vec<crate::dispatch::Running>,
    /// Newest first within each thread, threads interleaved (`Kernel`): context.
    pub kernels: Vec<Kernel>,
    /// Launches recorded in all (how many the ring saw, beyond those listed).
    pub launches_total: u64,
    /// The kernels put into HIP graphs in this process, each with the call that showed it
    /// (`via`: `hipStreamBeginCapture` for a launch during a stream capture, else the call
    /// that took its kernel node parameters). Said when a graph launch is listed.
    pub graph_kernels: Vec<Kernel>,
    /// Kernels put into graphs that were not kept (the table was full).
    pub graph_kernels_dropped: u64,
    /// More than one GPU in the process's topology: the launches are not told apart by GPU.
    pub several_gpus: bool,
    /// HSA_OVERRIDE_GFX_VERSION (or `_<node>`) as the process holds it.
    pub override_value: Option<String>,
    /// RMCP_MODE.
    pub mode: String,
    /// Allocations the shim rewrote in this process.
    pub rewritten: u64,
    /// For the kernels listed, when a gfx101x card runs gfx103x code (the override): the
    /// sites of LLVM's gfx101x hardware bugs in each, from the shim's scan of the modules
    /// it saw loaded ([`crate::gfx101x`]).
    pub gfx101x_sites: Vec<KernelSites>,
}

/// One kernel's gfx101x sites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSites {
    pub name: String,
    pub counts: crate::gfx101x::Counts,
    /// Instructions the card decodes as others or not at all.
    pub otherwise: usize,
}

/// A VM fault's reasons in words, as ROCr names them (runtime.cpp) and what each means.
pub fn reasons(mask: u32) -> Vec<&'static str> {
    let table: [(u32, &str); 8] = [
        (
            reason::PAGE_NOT_PRESENT,
            "page not present or supervisor privilege: nothing the GPU may use is mapped at \
             this address (freed, never allocated, or out of bounds)",
        ),
        (reason::READ_ONLY, "write access to a read-only page"),
        (reason::NX, "execute access to a non-executable page"),
        (reason::HOST_ONLY, "GPU access to host-only memory"),
        (
            reason::DRAMECC,
            "DRAM ECC failure: the memory itself reported an uncorrectable error",
        ),
        (
            reason::IMPRECISE,
            "imprecise: the address may not be the one the kernel used",
        ),
        (
            reason::SRAMECC,
            "SRAM ECC failure: the GPU's own memory reported an uncorrectable error",
        ),
        (reason::HANG, "the GPU hung"),
    ];
    let mut out: Vec<&str> = table
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, w)| *w)
        .collect();
    if out.is_empty() {
        out.push("no reason given");
    }
    out
}

/// A hardware exception's cause in words (ROCr prints "GPU Hang" or "ECC").
pub fn hw_exception_cause(cause: u32) -> &'static str {
    if cause & hw_exception::ECC != 0 {
        "an uncorrectable ECC memory error (ROCr: ECC)"
    } else {
        "the GPU hung and the driver reset it (ROCr: GPU Hang)"
    }
}

/// A queue error in words: ROCr's status name and what it usually means.
pub fn queue_error(status: u32) -> (String, &'static str) {
    match status {
        status::ERROR_MEMORY_APERTURE_VIOLATION => (
            "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION (0x29)".into(),
            "a kernel used an address outside every aperture the GPU may reach (a null, \
             garbage or host-only pointer), or ran code built for another ISA",
        ),
        status::ERROR_ILLEGAL_INSTRUCTION => (
            "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION (0x2a)".into(),
            "a kernel ran an instruction this GPU does not have: code built for another ISA",
        ),
        status::ERROR_MEMORY_FAULT => (
            "HSA_STATUS_ERROR_MEMORY_FAULT (0x2b)".into(),
            "a kernel faulted on memory",
        ),
        status::ERROR_EXCEPTION => (
            "HSA_STATUS_ERROR_EXCEPTION (0x1016)".into(),
            "the queue stopped on a hardware exception",
        ),
        s => (format!("queue error {s:#x}"), "the queue stopped"),
    }
}

fn pointer_kind(kind: u32) -> &'static str {
    match kind {
        pointer_type::HSA => "memory the runtime allocated from an HSA pool",
        pointer_type::LOCKED => "host memory registered with the GPU (hipHostRegister)",
        pointer_type::GRAPHICS => "graphics interop memory",
        pointer_type::IPC => "memory imported from another process (IPC)",
        pointer_type::RESERVED_ADDR => "a reserved virtual address range (hipMemAddressReserve)",
        pointer_type::HSA_VMEM => "virtual memory mapped through hipMemMap",
        _ => "memory of an unknown kind",
    }
}

fn grain(flags: u32) -> &'static str {
    if flags & global_flag::EXTENDED_SCOPE_FINE_GRAINED != 0 {
        "fine-grained, extended scope (coherent)"
    } else if flags & global_flag::FINE_GRAINED != 0 {
        "fine-grained (coherent)"
    } else if flags & global_flag::COARSE_GRAINED != 0 {
        "coarse-grained (non-coherent)"
    } else {
        "grain not reported"
    }
}

/// The override's effect on this GPU, when both are known.
fn override_on(f: &Fault) -> Option<(OverrideValue, OverrideEffect, Gfx)> {
    let value = OverrideValue::parse(f.override_value.as_deref()?)?;
    let real = f.gpu.real?;
    Some((value, override_effect(real, value.gfx()), real))
}

/// The commands that undo a cross-family override on `real`, as the doctor gives them.
pub fn override_remedy(real: Gfx) -> Vec<String> {
    let mut out = vec![format!("unset {OVERRIDE_VARIABLE}")];
    match family(real) {
        crate::remedy::Family::Rdna2Other => {
            out.push(format!(
                "export {OVERRIDE_VARIABLE}={}",
                OverrideValue::of(Gfx(100300))
            ));
        }
        crate::remedy::Family::Rdna1 if therock_device(real) => out.extend(therock_commands(real)),
        _ => {}
    }
    out
}

/// What is known of the kernels a graph launch ran: those put into graphs in the process.
fn graph_lines(f: &Fault, out: &mut Vec<String>) {
    if f.graph_kernels.is_empty() {
        out.push(
            "  graph kernels: none recorded (rmcp saw no launch during a stream capture and no \
             kernel node parameters; a graph made with hipGraphAddNode, cloned or loaded \
             otherwise is not seen)"
                .into(),
        );
        return;
    }
    out.push(format!(
        "  a graph launch runs its kernels without a launch call each; the kernels put into \
         graphs in this process ({} kernel{}{}; which graph holds which is not recorded):",
        f.graph_kernels.len(),
        if f.graph_kernels.len() == 1 { "" } else { "s" },
        if f.graph_kernels_dropped > 0 {
            format!(" listed, {} more not kept", f.graph_kernels_dropped)
        } else {
            String::new()
        }
    ));
    for k in &f.graph_kernels {
        let how = if k.via == "hipStreamBeginCapture" {
            "launched during a stream capture".to_string()
        } else {
            format!("given to {}", k.via)
        };
        out.push(format!(
            "    {} in {}, {how}",
            k.name.as_deref().unwrap_or("(name not recorded)"),
            k.library.as_deref().unwrap_or("unknown library"),
        ));
    }
}

/// The gfx101x sites of the kernels listed (under the override), worst harm first.
fn sites_lines(f: &Fault, out: &mut Vec<String>) {
    use crate::gfx101x::{Bug, Harm};
    if f.gfx101x_sites.is_empty() {
        return;
    }
    out.push(format!(
        "  in the kernels above, gfx1030 code that this {} executes wrongly (LLVM's gfx101x \
         hardware bugs, from rmcp's scan of the modules loaded; `rmcp doctor` names them):",
        f.gpu
            .real
            .map_or_else(|| "gfx101x".to_string(), |g| g.to_string())
    ));
    for k in &f.gfx101x_sites {
        let mut parts: Vec<String> = Vec::new();
        for harm in [Harm::Hang, Harm::Fault, Harm::Race, Harm::IfMisaligned] {
            for b in Bug::ALL.iter().filter(|b| b.harm() == harm) {
                let n = k.counts[b.index()];
                if n > 0 {
                    let word = match harm {
                        Harm::Hang => "can hang",
                        Harm::Fault => "wrong address",
                        Harm::Race => "race",
                        Harm::IfMisaligned => "if misaligned",
                    };
                    parts.push(format!("{} {n} ({word})", b.mattr()));
                }
            }
        }
        if k.otherwise > 0 {
            parts.push(format!(
                "{} instruction{} decoded otherwise",
                k.otherwise,
                if k.otherwise == 1 { "" } else { "s" }
            ));
        }
        if parts.is_empty() {
            parts.push("no site found".to_string());
        }
        out.push(format!("    {}: {}", k.name, parts.join(", ")));
    }
}

/// The block: lines without a prefix or newline (the shim's logger adds both).
pub fn render(f: &Fault) -> Vec<String> {
    let mut out = Vec::new();
    let node = f
        .gpu
        .node
        .map_or_else(|| "of unknown node".to_string(), |n| format!("node-{n}"));
    match f.what {
        What::VmFault { reasons: mask } => {
            let at = match f.address {
                Some(0) | None => "an address the GPU did not report".to_string(),
                Some(a) => format!("address {a:#x}"),
            };
            out.push(format!(
                "GPU memory fault on GPU {node} at {at}; what rmcp knows of it \
                 (the runtime's own report, if any, follows):"
            ));
            for r in reasons(mask) {
                out.push(format!("  reason: {r}"));
            }
        }
        What::QueueError { status } => {
            let (name, meaning) = queue_error(status);
            out.push(format!(
                "GPU queue error on GPU {node}: {name}; what rmcp knows of it (the \
                 runtime's own report follows):"
            ));
            out.push(format!("  meaning: {meaning}"));
        }
        What::HwException { cause } => {
            out.push(format!(
                "GPU reset on GPU {node}: {}; what rmcp knows of it (the runtime's own report, \
                 if any, follows):",
                hw_exception_cause(cause)
            ));
        }
    }

    // The GPU.
    let mut gpu = String::from("  GPU: ");
    let _ = write!(gpu, "{node}");
    if let Some(real) = f.gpu.real {
        let _ = write!(gpu, ", {real} (KFD topology)");
    }
    if let Some(isa) = &f.gpu.runtime_isa {
        if f.gpu.real.is_none_or(|r| Gfx::parse(isa) != Some(r)) {
            let _ = write!(gpu, ", the runtime runs {isa} code on it");
        }
    }
    if let Some(m) = f.gpu.marketing.as_deref().filter(|m| !m.is_empty()) {
        let _ = write!(gpu, ", {m}");
    }
    match f.gpu.pcie_atomics {
        Some(PcieAtomics::Supported) => gpu.push_str("; PCIe atomics: supported"),
        Some(PcieAtomics::Unsupported) => gpu.push_str(
            "; PCIe atomics: NOT supported by the platform (atomics on host memory fail)",
        ),
        Some(PcieAtomics::Unknown) | None => gpu.push_str("; PCIe atomics: unknown"),
    }
    out.push(gpu);

    // Where the address lies.
    match &f.place {
        Place::NoAddress => out.push(
            "  address: none reported (a queue error, or an imprecise fault); the kernels below \
             were in flight"
                .into(),
        ),
        Place::NotAsked => {
            out.push("  address: the runtime could not say which allocation holds it".into())
        }
        Place::Outside => out.push(
            "  address: in no allocation the runtime knows (freed, never allocated, or out of \
             bounds of a neighbour): a fault of the program or a library, not of memory rmcp \
             changed"
                .into(),
        ),
        Place::Inside {
            allocation: a,
            made,
        } => {
            let owner = match (a.owner_is_cpu, a.owner_node) {
                (Some(true), _) => "host".to_string(),
                (_, Some(n)) => format!("node {n}"),
                _ => "unknown".to_string(),
            };
            out.push(format!(
                "  address: in {}, base {:#x}, {} bytes (offset {:#x}), owner {owner}, {}",
                pointer_kind(a.kind),
                a.base,
                a.size,
                f.address.unwrap_or(a.base).wrapping_sub(a.base),
                grain(a.global_flags),
            ));
            match made {
                Some(m) => {
                    let how = match &m.forwarded_as {
                        Some(call) => format!(
                            "rmcp rewrote it: forwarded as {call} with flags {:#x}",
                            m.flags_forwarded
                        ),
                        None => format!("forwarded unchanged (flags {:#x})", m.flags_forwarded),
                    };
                    out.push(format!(
                        "  made by {}({} bytes, flags {:#x}) from {}; {how}",
                        m.call, m.size, m.flags_asked, m.library
                    ));
                }
                None => out.push(
                    "  made by: no hooked call rmcp recorded (the runtime's own, an unhooked \
                     function, or older than rmcp's record)"
                        .into(),
                ),
            }
        }
    }

    // The dispatch each queue was on.
    let when = match f.what {
        What::HwException { .. } => "when the GPU was reset",
        What::QueueError { .. } => "when the queue stopped",
        What::VmFault { .. } => "when it faulted",
    };
    out.extend(crate::dispatch::running_lines(&f.running, when));
    let running_known = f.running.iter().any(|r| r.busy());

    // The kernels.
    if f.kernels.is_empty() {
        out.push(if f.launches_total == 0 {
            "  kernels: no launch went through rmcp in this process".into()
        } else {
            format!(
                "  kernels: {} launches went through rmcp, none recorded",
                f.launches_total
            )
        });
    } else {
        // The shim keeps each thread's launches in order, not the order across threads.
        let several_threads = f.kernels.iter().any(|k| k.thread != f.kernels[0].thread);
        out.push(format!(
            "  {}{} (newest first{}; {}; {} launch{} in all):",
            if running_known {
                "recent launches, as context"
            } else {
                "kernels launched last"
            },
            if f.several_gpus {
                " in this process, on any of its GPUs"
            } else {
                ""
            },
            if several_threads {
                " per thread, threads interleaved"
            } else {
                ""
            },
            if running_known {
                "what the GPU was running is above"
            } else {
                "the faulting one is among those still in flight, not necessarily the newest"
            },
            f.launches_total,
            if f.launches_total == 1 { "" } else { "es" }
        ));
        for k in &f.kernels {
            out.push(format!(
                "    {} in {} via {} (thread {:#x})",
                k.name.as_deref().unwrap_or("(name not recorded)"),
                k.library.as_deref().unwrap_or("unknown library"),
                k.via,
                k.thread
            ));
        }
        if f.kernels
            .iter()
            .any(|k| k.via.starts_with("hipGraphLaunch"))
        {
            graph_lines(f, &mut out);
        }
    }

    sites_lines(f, &mut out);

    // What rmcp knows.
    if let Some((value, effect, real)) = override_on(f) {
        if effect.cross_family() {
            out.push(format!(
                "  likely cause: {OVERRIDE_VARIABLE}={} makes this {real} run {} code{}; \
                 rmcp cannot fix this. Instead:",
                f.override_value.as_deref().unwrap_or_default(),
                value.gfx(),
                if effect == OverrideEffect::Rdna1AsRdna2 {
                    " (RDNA2 code on RDNA1 silicon: a known cause of memory faults and hangs)"
                } else {
                    " (another ISA family's code)"
                }
            ));
            for c in override_remedy(real) {
                out.push(format!("    {c}"));
            }
        } else {
            out.push(format!(
                "  {OVERRIDE_VARIABLE}={}: this {real} runs {} code, of its own family",
                f.override_value.as_deref().unwrap_or_default(),
                value.gfx()
            ));
        }
    } else if let Some(v) = &f.override_value {
        out.push(format!("  {OVERRIDE_VARIABLE}={v}"));
    }
    let rewrote = match f.mode.as_str() {
        "off" => "RMCP_MODE=off: rmcp changed no allocation in this process".to_string(),
        "dry-run" => "RMCP_MODE=dry-run: rmcp changed no allocation in this process".to_string(),
        _ if f.rewritten == 0 => format!(
            "rmcp (mode {}) changed no allocation in this process",
            f.mode
        ),
        _ => format!(
            "rmcp (mode {}) made {} allocation{} non-coherent in this process",
            f.mode,
            f.rewritten,
            if f.rewritten == 1 { "" } else { "s" }
        ),
    };
    out.push(format!("  rmcp: {rewrote}"));
    out.push(
        "  next: `rmcp doctor` for the full picture; rerun with RMCP_MODE=off to run without \
         rmcp's rewrite"
            .into(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Fault {
        Fault {
            what: What::VmFault {
                reasons: reason::PAGE_NOT_PRESENT,
            },
            address: Some(0x7f00_1234_0000),
            gpu: Gpu {
                node: Some(1),
                real: Some(Gfx(100100)),
                runtime_isa: Some("gfx1010".into()),
                marketing: Some("AMD Radeon RX 5700 XT".into()),
                pcie_atomics: Some(PcieAtomics::Supported),
            },
            place: Place::Outside,
            running: vec![],
            kernels: vec![],
            launches_total: 0,
            graph_kernels: vec![],
            graph_kernels_dropped: 0,
            several_gpus: false,
            override_value: None,
            gfx101x_sites: Vec::new(),
            mode: "auto".into(),
            rewritten: 0,
        }
    }

    fn text(f: &Fault) -> String {
        render(f).join("\n")
    }

    #[test]
    fn a_reset_names_the_dispatch_each_queue_was_on_and_the_launches_become_context() {
        use crate::dispatch::{Dispatch, Packet, Running};
        let mut f = base();
        f.what = What::HwException {
            cause: hw_exception::GPU_HANG,
        };
        f.address = None;
        f.place = Place::NoAddress;
        f.kernels = vec![Kernel {
            name: Some("_Z5otherPi".into()),
            library: Some("the program".into()),
            via: "hipLaunchKernel",
            thread: 7,
        }];
        f.launches_total = 3;
        let text_before = text(&f);
        assert!(text_before.starts_with(
            "GPU reset on GPU node-1: the GPU hung and the driver reset it (ROCr: GPU Hang); what \
             rmcp knows of it"
        ));
        assert!(text_before.contains("  running when the GPU was reset: unknown (rmcp saw no queue created in this process)"), "{text_before}");
        assert!(
            text_before
                .contains("  kernels launched last (newest first; the faulting one is among"),
            "{text_before}"
        );
        let idle = Running {
            queue: 0,
            node: Some(1),
            read: 4,
            write: 4,
            ..Running::default()
        };
        let busy = Running {
            queue: 1,
            node: Some(1),
            read: 2,
            write: 5,
            packet: Some(Packet::Dispatch(Dispatch {
                kernel_object: 0x1000,
                ..Dispatch::default()
            })),
            name: Some("_Z4spinPi".into()),
            from: Some("the program".into()),
            seen_for: None,
            advice: Vec::new(),
        };
        f.running = vec![idle, busy];
        let t = text(&f);
        assert!(t.contains("  running when the GPU was reset (each busy queue's packet at its read index: the one the GPU was on):\n    queue 1 (GPU node-1), packet 2 of 5: _Z4spinPi from the program"), "{t}");
        assert!(!t.contains("queue 0"), "an idle queue is not listed\n{t}");
        assert!(t.contains("  recent launches, as context (newest first; what the GPU was running is above; 3 launches in all):\n    _Z5otherPi"), "{t}");
        f.what = What::HwException {
            cause: hw_exception::ECC,
        };
        assert!(text(&f).starts_with("GPU reset on GPU node-1: an uncorrectable ECC memory error"));
        f.what = What::VmFault {
            reasons: reason::PAGE_NOT_PRESENT,
        };
        assert!(text(&f).contains("  running when it faulted ("));
    }

    #[test]
    fn gfx101x_sites_of_the_kernels_listed_worst_first() {
        let mut f = base();
        assert!(!render(&f).iter().any(|l| l.contains("executes wrongly")));
        let mut counts = [0; 12];
        counts[crate::gfx101x::Bug::VcmpxExecWar.index()] = 3;
        counts[crate::gfx101x::Bug::InstFwdPrefetch.index()] = 1;
        f.gpu.real = Some(Gfx(100100));
        f.gfx101x_sites = vec![KernelSites {
            name: "k".into(),
            counts,
            otherwise: 2,
        }];
        let lines = render(&f);
        let at = lines
            .iter()
            .position(|l| l.contains("gfx1030 code that this gfx1010 executes wrongly"))
            .expect("the heading");
        assert_eq!(
            lines[at + 1],
            "    k: inst-fwd-prefetch-bug 1 (can hang), vcmpx-exec-war-hazard 3 (race), \
             2 instructions decoded otherwise"
        );
    }

    #[test]
    fn reasons_name_every_bit_and_say_when_none() {
        assert_eq!(reasons(0), ["no reason given"]);
        let all = reasons(u32::MAX);
        assert_eq!(all.len(), 8);
        assert!(reasons(reason::READ_ONLY | reason::IMPRECISE)[1].starts_with("imprecise"));
    }

    #[test]
    fn queue_errors_are_named_with_their_code() {
        for (s, name) in [
            (0x29, "APERTURE_VIOLATION (0x29)"),
            (0x2a, "ILLEGAL_INSTRUCTION (0x2a)"),
            (0x2b, "MEMORY_FAULT (0x2b)"),
            (0x1016, "EXCEPTION (0x1016)"),
            (0x1234, "queue error 0x1234"),
        ] {
            assert!(queue_error(s).0.contains(name), "{s:#x}");
        }
    }

    /// Each case: a change to the base facts, and lines (or parts) the block must hold, and
    /// must not hold.
    #[test]
    fn the_block_says_what_the_facts_show() {
        type Case = (
            &'static str,
            fn(&mut Fault),
            &'static [&'static str],
            &'static [&'static str],
        );
        let cases: &[Case] = &[
            (
                "vm fault outside any allocation",
                |_| {},
                &[
                    "GPU memory fault on GPU node-1 at address 0x7f0012340000",
                    "reason: page not present",
                    "GPU: node-1, gfx1010 (KFD topology), AMD Radeon RX 5700 XT; PCIe atomics: supported",
                    "in no allocation the runtime knows",
                    "no launch went through rmcp",
                    "rmcp (mode auto) changed no allocation",
                    "`rmcp doctor`",
                    "RMCP_MODE=off",
                ],
                &["likely cause", "runs gfx"],
            ),
            (
                "in rewritten host memory",
                |f| {
                    f.place = Place::Inside {
                        allocation: Allocation {
                            kind: pointer_type::HSA,
                            base: 0x7f00_1234_0000,
                            size: 8192,
                            owner_node: Some(0),
                            owner_is_cpu: Some(true),
                            global_flags: global_flag::COARSE_GRAINED,
                        },
                        made: Some(Made {
                            call: "hipHostMalloc".into(),
                            library: "/opt/app/libx.so".into(),
                            size: 8192,
                            flags_asked: 0x4000_0000,
                            flags_forwarded: 0x8000_0000,
                            forwarded_as: Some("hipHostMalloc".into()),
                        }),
                    };
                    f.rewritten = 3;
                },
                &[
                    "base 0x7f0012340000, 8192 bytes (offset 0x0), owner host, coarse-grained (non-coherent)",
                    "made by hipHostMalloc(8192 bytes, flags 0x40000000) from /opt/app/libx.so; rmcp rewrote it: forwarded as hipHostMalloc with flags 0x80000000",
                    "made 3 allocations non-coherent",
                ],
                &["in no allocation"],
            ),
            (
                "in an allocation rmcp did not record",
                |f| {
                    f.place = Place::Inside {
                        allocation: Allocation {
                            kind: pointer_type::LOCKED,
                            base: 0x1000,
                            size: 4096,
                            owner_node: Some(1),
                            owner_is_cpu: Some(false),
                            global_flags: global_flag::FINE_GRAINED,
                        },
                        made: None,
                    };
                },
                &[
                    "hipHostRegister",
                    "owner node 1",
                    "fine-grained (coherent)",
                    "no hooked call rmcp recorded",
                ],
                &[],
            ),
            (
                "a cross-family override on RDNA1",
                |f| {
                    f.what = What::QueueError { status: 0x29 };
                    f.address = None;
                    f.place = Place::NoAddress;
                    f.override_value = Some("10.3.0".into());
                    f.gpu.runtime_isa = Some("gfx1030".into());
                },
                &[
                    "GPU queue error on GPU node-1: HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION (0x29)",
                    "the runtime runs gfx1030 code on it",
                    "likely cause: HSA_OVERRIDE_GFX_VERSION=10.3.0 makes this gfx1010 run gfx1030 code (RDNA2 code on RDNA1 silicon",
                    "    unset HSA_OVERRIDE_GFX_VERSION",
                    "torch[device-gfx1010]",
                    "address: none reported",
                ],
                &["GPU memory fault"],
            ),
            (
                "a same-family override",
                |f| {
                    f.gpu.real = Some(Gfx(100301));
                    f.override_value = Some("10.3.0".into());
                },
                &["runs gfx1030 code, of its own family"],
                &["likely cause"],
            ),
            (
                "kernels, several GPUs, mode off",
                |f| {
                    f.kernels = vec![
                        Kernel {
                            name: Some("_Z4fillPii".into()),
                            library: Some("/opt/app/app".into()),
                            via: "hipLaunchKernel",
                            thread: 42,
                        },
                        Kernel {
                            name: None,
                            library: None,
                            via: "hipModuleLaunchKernel",
                            thread: 43,
                        },
                    ];
                    f.launches_total = 7;
                    f.several_gpus = true;
                    f.mode = "off".into();
                    f.gpu.pcie_atomics = Some(PcieAtomics::Unsupported);
                },
                &[
                    "kernels launched last in this process, on any of its GPUs (newest first per thread, threads interleaved; the faulting one is among those still in flight, not necessarily the newest; 7 launches in all):",
                    "    _Z4fillPii in /opt/app/app via hipLaunchKernel (thread 0x2a)",
                    "    (name not recorded) in unknown library via hipModuleLaunchKernel (thread 0x2b)",
                    "RMCP_MODE=off: rmcp changed no allocation",
                    "PCIe atomics: NOT supported",
                ],
                &[],
            ),
            (
                "a graph launch names the kernels put into graphs",
                |f| {
                    f.kernels = vec![Kernel {
                        name: Some("a graph (hipGraphExec_t 0x5000)".into()),
                        library: Some("/opt/app/app".into()),
                        via: "hipGraphLaunch",
                        thread: 42,
                    }];
                    f.launches_total = 3;
                    f.graph_kernels = vec![
                        Kernel {
                            name: Some("_Z4fillPi".into()),
                            library: Some("/opt/app/app".into()),
                            via: "hipStreamBeginCapture",
                            thread: 0,
                        },
                        Kernel {
                            name: Some("_Z4pokePi".into()),
                            library: Some("/opt/app/app".into()),
                            via: "hipGraphAddKernelNode",
                            thread: 0,
                        },
                    ];
                    f.graph_kernels_dropped = 4;
                },
                &[
                    "    a graph (hipGraphExec_t 0x5000) in /opt/app/app via hipGraphLaunch (thread 0x2a)",
                    "the kernels put into graphs in this process (2 kernels listed, 4 more not kept; which graph holds which is not recorded):",
                    "    _Z4fillPi in /opt/app/app, launched during a stream capture",
                    "    _Z4pokePi in /opt/app/app, given to hipGraphAddKernelNode",
                ],
                &["graph kernels: none recorded"],
            ),
            (
                "a graph launch with no kernel known",
                |f| {
                    f.kernels = vec![Kernel {
                        name: Some("a graph (hipGraphExec_t 0x5000)".into()),
                        library: None,
                        via: "hipGraphLaunch_spt",
                        thread: 42,
                    }];
                    f.launches_total = 1;
                },
                &["graph kernels: none recorded (rmcp saw no launch during a stream capture"],
                &["put into graphs in this process"],
            ),
            (
                "kernels in graphs are not said without a graph launch",
                |f| {
                    f.kernels = vec![Kernel {
                        name: Some("_Z4fillPi".into()),
                        library: None,
                        via: "hipLaunchKernel",
                        thread: 42,
                    }];
                    f.launches_total = 1;
                    f.graph_kernels = vec![Kernel {
                        name: Some("_Z4pokePi".into()),
                        library: None,
                        via: "hipGraphAddKernelNode",
                        thread: 0,
                    }];
                },
                &["_Z4fillPi"],
                &["_Z4pokePi", "graph"],
            ),
            (
                "unknown GPU and reasons",
                |f| {
                    f.gpu = Gpu::default();
                    f.what = What::VmFault {
                        reasons: reason::READ_ONLY | reason::IMPRECISE,
                    };
                    f.place = Place::NotAsked;
                },
                &[
                    "GPU of unknown node",
                    "reason: write access to a read-only page",
                    "reason: imprecise",
                    "could not say",
                ],
                &["KFD topology)"],
            ),
        ];
        for (name, change, want, not) in cases {
            let mut f = base();
            change(&mut f);
            let t = text(&f);
            for w in *want {
                assert!(t.contains(w), "{name}: missing {w:?} in\n{t}");
            }
            for n in *not {
                assert!(!t.contains(n), "{name}: unexpected {n:?} in\n{t}");
            }
            assert!(render(&f).iter().all(|l| !l.contains('\n')), "{name}");
        }
    }

    #[test]
    fn remedies_follow_the_card() {
        assert_eq!(
            override_remedy(Gfx(100301))[1],
            "export HSA_OVERRIDE_GFX_VERSION=10.3.0"
        );
        // RDNA1: TheRock's gfx1010 build replaces the installed torch (uninstall first: a
        // plain install over a pytorch.org torch changes nothing, tests/remedy_pip.rs).
        let rdna1 = override_remedy(Gfx(100100));
        assert_eq!(rdna1[1], "pip uninstall -y torch torchvision torchaudio");
        assert!(rdna1[2].contains("\"torch[device-gfx1010]\""), "{rdna1:?}");
        assert_eq!(
            override_remedy(Gfx(90000)),
            ["unset HSA_OVERRIDE_GFX_VERSION"]
        );
    }
}
