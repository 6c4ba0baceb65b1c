//! The fault handler: when the GPU faults, say why, before the runtime's own message. It owns
//! the registration of one ROCr system event handler per ROCr copy in the process ([`watch`]:
//! after the first hooked call the runtime served, which opens ROCr, and at a launch or a
//! queue creation; so before the program's first GPU work, be it a copy or a kernel) and the
//! report of a VM fault
//! (ROCr's `HSA_AMD_GPU_MEMORY_FAULT_EVENT`), a hardware exception (`_HW_EXCEPTION_EVENT`:
//! the driver reset the GPU after a hang, or an ECC error) or a queue error (`queues`'
//! wrappers call [`queue_error`]). Each block names the dispatch each queue was on (`queues`,
//! `kernel_objects`) before the recent launches, which are context. It reads, at fault time only: ROCr's answers about the agent and the
//! address (`hsa_agent_get_info`, `hsa_amd_pointer_info`: safe on ROCr's event thread, no HIP
//! call), the shim's allocation record and launch ring, the KFD topology, the configuration
//! and the counters. The words are `rmcp_core::fault::render`'s; the block goes through the
//! shim's logger, one `error` line each (stderr or RMCP_LOG_FILE; RMCP_LOG=off silences it),
//! and its facts into the stats report, written before the handler returns (an abort follows
//! and no exit handler runs).
//!
//! Never worse: the handler returns `HSA_STATUS_ERROR`, so ROCr prints its message and ends
//! the process as it would have (a handler returning `HSA_STATUS_SUCCESS` would make ROCr
//! print nothing and stop watching); a queue's own callback is called with its own arguments
//! after the block. Everything here runs under `catch_unwind`; a fact that cannot be had is
//! left out, never waited for. At most [`BLOCKS`] blocks per process.
//!
//! ROCr copies: the registration function is the one the runtime copy's own dependency tree
//! binds, found with the copy's other functions when the copy is first bound (`copies`),
//! never by `RTLD_NEXT` alone; registering asks the loader nothing, so it can happen inside
//! the runtime's own calls and under the loader's lock. Two HIP copies on one ROCr register
//! once. At most [`ROCRS`] ROCr copies are watched.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicUsize, Ordering};

use rmcp_core::fault::{Allocation, Fault, Gpu, Made, Place, What};
use rmcp_core::policy::Forward;
use rmcp_core::registry::Hook;

use crate::copies::Copy;

/// ROCr copies watched.
pub(crate) const ROCRS: usize = 8;
/// Blocks written per process.
pub(crate) const BLOCKS: u32 = 8;

const HSA_STATUS_SUCCESS: u32 = 0;
const HSA_STATUS_ERROR: u32 = 0x1000;
const HSA_STATUS_ERROR_NOT_INITIALIZED: u32 = 0x100B;
const HSA_AMD_GPU_MEMORY_FAULT_EVENT: i32 = 0;
const HSA_AMD_GPU_HW_EXCEPTION_EVENT: i32 = 1;
const HSA_AGENT_INFO_NAME: u32 = 0;
const HSA_AGENT_INFO_DEVICE: u32 = 17;
const HSA_AMD_AGENT_INFO_DRIVER_NODE_ID: u32 = 0xA004;
const HSA_AMD_AGENT_INFO_PRODUCT_NAME: u32 = 0xA009;

type RegisterFn =
    unsafe extern "C" fn(unsafe extern "C" fn(*const u8, *mut c_void) -> u32, *mut c_void) -> u32;
type PointerInfoFn = unsafe extern "C" fn(
    *const c_void,
    *mut PointerInfo,
    *mut c_void,
    *mut u32,
    *mut c_void,
) -> u32;
type AgentInfoFn = unsafe extern "C" fn(u64, u32, *mut c_void) -> u32;

/// `hsa_amd_pointer_info_t` up to `global_flags` (hsa_ext_amd.h, 5.x to 7.x).
#[repr(C)]
struct PointerInfo {
    size: u32,
    kind: u32,
    agent_base: usize,
    host_base: usize,
    size_in_bytes: usize,
    user_data: usize,
    owner: u64,
    global_flags: u32,
}

/// One ROCr copy: its registration function (the key) and what the report asks it.
struct Rocr {
    register: AtomicUsize,
    pointer_info: AtomicUsize,
    agent_info: AtomicUsize,
    registered: AtomicU8,
}

static ROCR: [Rocr; ROCRS] = [const {
    Rocr {
        register: AtomicUsize::new(0),
        pointer_info: AtomicUsize::new(0),
        agent_info: AtomicUsize::new(0),
        registered: AtomicU8::new(0),
    }
}; ROCRS];

/// `Copy::watched`: 0 not tried; being tried; done (registered, or nothing to register);
/// `KNOWN + k`: its ROCr is slot k, not yet open.
const BUSY: u8 = 1;
const DONE: u8 = 2;
const KNOWN: u8 = 3;

/// Makes sure the ROCr behind runtime copy `c` has rmcp's handler: one load once it has.
/// Asks the loader nothing (the copy's ROCr functions were found with its other functions,
/// `copies`), so it may run anywhere the shim runs: at a launch before the runtime is
/// entered, inside the runtime's queue creation, and after any hooked call the runtime
/// served (`intercept`), which is the first moment ROCr is surely open in a process whose
/// first GPU work is a copy. A ROCr that is not open yet is asked again at most [`TRIES`]
/// times in all, so a runtime that never opens it costs nothing after that.
#[inline(always)]
pub(crate) fn watch(c: &Copy) {
    if c.watched.load(Ordering::Relaxed) != DONE {
        try_watch(c);
    }
}

/// Whether [`watch`] has nothing more to do for copy `c` (registered, or given up).
pub(crate) fn watched(c: &Copy) -> bool {
    c.watched.load(Ordering::Acquire) == DONE
}

/// Times a copy's ROCr is asked to register before rmcp stops asking (ROCr not open).
pub(crate) const TRIES: u8 = 32;

#[cold]
fn try_watch(c: &Copy) {
    let state = c.watched.load(Ordering::Acquire);
    if state == BUSY
        || state == DONE
        || c.watched
            .compare_exchange(state, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    let _no_cancel = crate::cancel::NoCancel::new();
    let slot = match state.checked_sub(KNOWN) {
        Some(k) => Some(usize::from(k)),
        None => find_rocr(c),
    };
    let next = match slot.and_then(|k| ROCR.get(k).map(|r| (k, r))) {
        None => DONE,
        Some((k, r)) => match register(r, k) {
            Some(true) => DONE,
            Some(false) if c.watch_tries.fetch_add(1, Ordering::Relaxed) + 1 >= TRIES => DONE,
            Some(false) => KNOWN + k as u8,
            None => DONE,
        },
    };
    c.watched.store(next, Ordering::Release);
}

/// Finds (or claims) the ROCr slot of copy `c`'s own ROCr. None: none found.
fn find_rocr(c: &Copy) -> Option<usize> {
    let crate::copies::RocrApi {
        register,
        pointer_info,
        agent_info,
        ..
    } = c.rocr;
    if register == 0 {
        return None;
    }
    for (k, r) in ROCR.iter().enumerate() {
        match r
            .register
            .compare_exchange(0, register, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                r.pointer_info.store(pointer_info, Ordering::Relaxed);
                r.agent_info.store(agent_info, Ordering::Release);
                return Some(k);
            }
            Err(existing) if existing == register => return Some(k),
            Err(_) => {}
        }
    }
    None
}

/// Registers the handler with ROCr slot `k`: Some(true) done, Some(false) ROCr is not open
/// yet, None it refused.
fn register(r: &Rocr, k: usize) -> Option<bool> {
    match r
        .registered
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => {}
        // Registered (2), or another copy of the same ROCr is registering (1): ask again.
        Err(2) => return Some(true),
        Err(_) => return Some(false),
    }
    let f = r.register.load(Ordering::Acquire);
    // SAFETY: the address of hsa_amd_register_system_event_handler in this ROCr, of this
    // signature (hsa_ext_amd.h).
    let f = unsafe { std::mem::transmute::<usize, RegisterFn>(f) };
    // SAFETY: a handler that lives as long as the process (this library is never unmapped)
    // and a slot index as its data.
    let rc = unsafe { f(on_event, k as *mut c_void) };
    match rc {
        HSA_STATUS_SUCCESS => {
            r.registered.store(2, Ordering::Release);
            tracing::debug!("watching GPU faults (ROCr copy {k})");
            Some(true)
        }
        HSA_STATUS_ERROR_NOT_INITIALIZED => {
            r.registered.store(0, Ordering::Release);
            Some(false)
        }
        rc => {
            r.registered.store(0, Ordering::Release);
            tracing::debug!("ROCr refused the fault handler: {rc:#x}");
            None
        }
    }
}

/// ROCr's system event callback. Returns an error status always: ROCr then prints its own
/// message and ends the process as without rmcp.
unsafe extern "C" fn on_event(event: *const u8, data: *mut c_void) -> u32 {
    let _ = std::panic::catch_unwind(|| {
        if event.is_null() {
            return;
        }
        // SAFETY: ROCr passes a hsa_amd_event_t: an int event type, then (8-aligned) the
        // event's info: for a memory fault {agent, virtual_address, fault_reason_mask}, for a
        // hardware exception {agent, reset_type, reset_cause} (hsa_ext_amd.h). The union is
        // at least as large as the memory fault's, so the three words are there.
        let (kind, agent, va, mask) = unsafe {
            (
                event.cast::<i32>().read(),
                event.add(8).cast::<u64>().read(),
                event.add(16).cast::<u64>().read(),
                event.add(24).cast::<u32>().read(),
            )
        };
        match kind {
            HSA_AMD_GPU_MEMORY_FAULT_EVENT => explain(
                What::VmFault { reasons: mask },
                Some(va),
                agent,
                ROCR.get(data as usize),
            ),
            HSA_AMD_GPU_HW_EXCEPTION_EVENT => explain(
                // reset_cause, the second u32 after the agent.
                What::HwException {
                    cause: (va >> 32) as u32,
                },
                None,
                agent,
                ROCR.get(data as usize),
            ),
            _ => {}
        }
    });
    HSA_STATUS_ERROR
}

/// A queue's error callback was called (`queues`): the block, before HIP's own callback.
pub(crate) fn queue_error(status: u32, agent: u64) {
    let rocr = ROCR
        .iter()
        .find(|r| r.agent_info.load(Ordering::Acquire) != 0);
    explain(What::QueueError { status }, None, agent, rocr);
}

static WRITTEN: AtomicU32 = AtomicU32::new(0);

fn explain(what: What, address: Option<u64>, agent: u64, rocr: Option<&Rocr>) {
    if WRITTEN.fetch_add(1, Ordering::Relaxed) >= BLOCKS {
        return;
    }
    let _no_cancel = crate::cancel::NoCancel::new();
    let cfg = crate::state::config();
    let fault = gather(what, address, agent, rocr, cfg);
    for line in rmcp_core::fault::render(&fault) {
        tracing::error!("{line}");
    }
    crate::report::fault_seen(to_json(&fault));
}

fn agent_info<T>(rocr: Option<&Rocr>, agent: u64, attribute: u32, out: &mut T) -> bool {
    let Some(f) = rocr
        .map(|r| r.agent_info.load(Ordering::Acquire))
        .filter(|f| *f != 0)
    else {
        return false;
    };
    // SAFETY: hsa_agent_get_info of this ROCr, of this signature.
    let f = unsafe { std::mem::transmute::<usize, AgentInfoFn>(f) };
    // SAFETY: `out` is as large as the attribute's value (u32 for the node and device type,
    // 64 bytes for the names).
    unsafe { f(agent, attribute, (out as *mut T).cast()) == HSA_STATUS_SUCCESS }
}

fn agent_string(rocr: Option<&Rocr>, agent: u64, attribute: u32) -> Option<String> {
    let mut buf = [0u8; 64];
    if !agent_info(rocr, agent, attribute, &mut buf) {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let s = String::from_utf8_lossy(&buf[..len]).trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn node_of(rocr: Option<&Rocr>, agent: u64) -> Option<u32> {
    let mut node = 0u32;
    agent_info(rocr, agent, HSA_AMD_AGENT_INFO_DRIVER_NODE_ID, &mut node).then_some(node)
}

fn gather(
    what: What,
    address: Option<u64>,
    agent: u64,
    rocr: Option<&Rocr>,
    cfg: &rmcp_core::config::Config,
) -> Fault {
    let node = node_of(rocr, agent);
    let topology = rmcp_core::topology::Topology::read_gpus(&cfg.sysfs_root).ok();
    let gpu_node = topology
        .as_ref()
        .and_then(|t| t.gpus.iter().find(|g| Some(g.node) == node));
    let gpu = Gpu {
        node,
        real: gpu_node.map(|g| g.gfx).filter(|g| g.0 != 0),
        runtime_isa: agent_string(rocr, agent, HSA_AGENT_INFO_NAME),
        marketing: agent_string(rocr, agent, HSA_AMD_AGENT_INFO_PRODUCT_NAME),
        pcie_atomics: gpu_node.map(|g| g.pcie_atomics()),
    };
    let place = match address {
        None | Some(0) => Place::NoAddress,
        Some(a) => place_of(a, rocr),
    };
    let running = running(rocr);
    let kernels: Vec<rmcp_core::fault::Kernel> = crate::launches::last(8)
        .iter()
        .map(crate::launches::describe)
        .collect();
    let _ = std::panic::catch_unwind(|| {
        crate::gfx101x::scan_libraries(&kernels, topology.as_ref());
    });
    // The kernels running first, then those launched.
    let gfx101x_sites = crate::gfx101x::sites_of(
        running
            .iter()
            .filter_map(|r| r.name.as_deref())
            .chain(kernels.iter().filter_map(|k| k.name.as_deref())),
    );
    let (graph_kernels, graph_kernels_dropped) = crate::graphs::kernels();
    let rewritten = rmcp_core::registry::HOOKS
        .iter()
        .map(|(h, _)| crate::stats::counts(*h).rewritten)
        .sum();
    Fault {
        what,
        address,
        gpu,
        place,
        running,
        kernels,
        launches_total: crate::launches::total(),
        graph_kernels,
        graph_kernels_dropped,
        several_gpus: topology.as_ref().is_some_and(|t| t.gpus.len() > 1),
        override_value: node.and_then(crate::report::override_now),
        mode: cfg.mode.as_str().to_string(),
        rewritten,
        gfx101x_sites,
    }
}

/// Each queue rmcp saw created, read now, its dispatch named: the kernel object's name from
/// the executables the runtime froze, where it came from from the registrations and modules.
fn running(rocr: Option<&Rocr>) -> Vec<rmcp_core::dispatch::Running> {
    crate::dispatches::running()
        .into_iter()
        .map(|now| {
            let mut r = now.running;
            r.node = node_of(rocr, now.agent);
            if let Some(rmcp_core::dispatch::Packet::Dispatch(d)) = r.packet {
                let Some((name, origin)) = crate::kernel_objects::name_of(d.kernel_object) else {
                    return r;
                };
                // A module load's file or loader, else the library that registered it.
                let path = origin
                    .as_ref()
                    .map(|o| o.path.clone())
                    .or_else(|| crate::launches::origin_of(&name));
                r.from = origin.map(|o| o.words()).or_else(|| path.clone());
                r.advice = rmcp_core::miopen::advice(
                    &name,
                    &path.iter().map(String::as_str).collect::<Vec<_>>(),
                );
                r.name = Some(name);
            }
            r
        })
        .collect()
}

/// [`running`] outside an event (the watchdog): the agents' nodes asked of the first ROCr
/// copy whose functions are known.
pub(crate) fn running_now() -> Vec<rmcp_core::dispatch::Running> {
    running(
        ROCR.iter()
            .find(|r| r.agent_info.load(Ordering::Acquire) != 0),
    )
}

fn place_of(address: u64, rocr: Option<&Rocr>) -> Place {
    let Some(f) = rocr
        .map(|r| r.pointer_info.load(Ordering::Acquire))
        .filter(|f| *f != 0)
    else {
        return made_without_runtime(address);
    };
    // SAFETY: hsa_amd_pointer_info of this ROCr, of this signature.
    let f = unsafe { std::mem::transmute::<usize, PointerInfoFn>(f) };
    let mut info = PointerInfo {
        size: size_of::<PointerInfo>() as u32,
        kind: 0,
        agent_base: 0,
        host_base: 0,
        size_in_bytes: 0,
        user_data: 0,
        owner: 0,
        global_flags: 0,
    };
    // SAFETY: `info.size` is set as the function requires; no allocator and no agent list
    // are asked for.
    let rc = unsafe {
        f(
            address as usize as *const c_void,
            &mut info,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if rc != HSA_STATUS_SUCCESS {
        return made_without_runtime(address);
    }
    if info.kind == rmcp_core::fault::pointer_type::UNKNOWN {
        return Place::Outside;
    }
    let base = if info.host_base != 0 && info.kind == rmcp_core::fault::pointer_type::LOCKED {
        info.host_base
    } else if info.agent_base != 0 {
        info.agent_base
    } else {
        info.host_base
    };
    let made = crate::allocations::find(base)
        .or_else(|| crate::allocations::find(info.host_base).filter(|_| info.host_base != 0))
        .map(made);
    let mut device = 0u32;
    let owner_is_cpu =
        agent_info(rocr, info.owner, HSA_AGENT_INFO_DEVICE, &mut device).then_some(device == 0);
    Place::Inside {
        allocation: Allocation {
            kind: info.kind,
            base: base as u64,
            size: info.size_in_bytes as u64,
            owner_node: node_of(rocr, info.owner),
            owner_is_cpu,
            global_flags: info.global_flags,
        },
        made,
    }
}

/// Without the runtime's answer: the shim's own record, if one holds the address.
fn made_without_runtime(address: u64) -> Place {
    match crate::allocations::containing(address as usize) {
        Some(r) => Place::Inside {
            allocation: Allocation {
                kind: rmcp_core::fault::pointer_type::UNKNOWN,
                base: r.base as u64,
                size: r.size as u64,
                owner_node: None,
                owner_is_cpu: None,
                global_flags: 0,
            },
            made: Some(made(r)),
        },
        None => Place::NotAsked,
    }
}

fn made(r: crate::allocations::Record) -> Made {
    let (forwarded_as, flags_forwarded) = match r.forwarded {
        Some(Forward::HostMalloc(f)) => (Some(Hook::HipHostMalloc.name().to_string()), f),
        Some(Forward::ExtMallocWithFlags(f)) => {
            (Some(Hook::HipExtMallocWithFlags.name().to_string()), f)
        }
        None => (None, r.asked),
    };
    Made {
        call: r.hook.name().to_string(),
        library: library_of(r.caller),
        size: r.size as u64,
        flags_asked: r.asked,
        flags_forwarded,
        forwarded_as,
    }
}

fn library_of(caller: usize) -> String {
    if caller == 0 {
        return "a caller through a runtime copy's own entry".into();
    }
    rmcp_sys::locate::object_of(caller).map_or_else(
        || format!("code at {caller:#x} in no object"),
        |(_, p)| {
            if p.is_empty() {
                "the program".into()
            } else {
                p
            }
        },
    )
}

/// The fault's facts as the stats report's `faults` entry.
fn to_json(f: &Fault) -> serde_json::Value {
    let (kind, code) = match f.what {
        What::VmFault { reasons } => ("vm", reasons),
        What::QueueError { status } => ("queue", status),
        What::HwException { cause } => ("hw_exception", cause),
    };
    let place = match &f.place {
        Place::NoAddress => serde_json::json!({"in": "none reported"}),
        Place::NotAsked => serde_json::json!({"in": "unknown"}),
        Place::Outside => serde_json::json!({"in": "no allocation"}),
        Place::Inside {
            allocation: a,
            made,
        } => serde_json::json!({
            "in": "allocation",
            "kind": a.kind,
            "base": format!("{:#x}", a.base),
            "size": a.size,
            "owner_node": a.owner_node,
            "owner_is_cpu": a.owner_is_cpu,
            "global_flags": a.global_flags,
            "made_by": made.as_ref().map(|m| serde_json::json!({
                "call": m.call,
                "library": m.library,
                "size": m.size,
                "flags_asked": m.flags_asked,
                "flags_forwarded": m.flags_forwarded,
                "rewritten_as": m.forwarded_as,
            })),
        }),
    };
    serde_json::json!({
        "kind": kind,
        "code": format!("{code:#x}"),
        "reasons": match f.what {
            What::VmFault { reasons } => rmcp_core::fault::reasons(reasons),
            What::QueueError { status } => vec![rmcp_core::fault::queue_error(status).1],
            What::HwException { cause } => vec![rmcp_core::fault::hw_exception_cause(cause)],
        },
        "running": f.running.iter().filter(|r| r.busy()).map(running_json).collect::<Vec<_>>(),
        "address": f.address.map(|a| format!("{a:#x}")),
        "gpu": {
            "node": f.gpu.node,
            "gfx": f.gpu.real.map(|g| g.to_string()),
            "runtime_isa": f.gpu.runtime_isa,
            "name": f.gpu.marketing,
            "pcie_atomics": f.gpu.pcie_atomics.map(|p| format!("{p:?}").to_lowercase()),
        },
        "address_in": place,
        "kernels": f.kernels.iter().map(|k| serde_json::json!({
            "name": k.name,
            "library": k.library,
            "via": k.via,
            "thread": format!("{:#x}", k.thread),
        })).collect::<Vec<_>>(),
        "launches": f.launches_total,
        "graph_kernels": f.graph_kernels.iter().map(|k| serde_json::json!({
            "name": k.name,
            "library": k.library,
            "via": k.via,
        })).collect::<Vec<_>>(),
        "override": f.override_value,
        "mode": f.mode,
        "rewritten": f.rewritten,
        "gfx101x_sites": f.gfx101x_sites.iter().map(|k| serde_json::json!({
            "kernel": k.name,
            "sites": rmcp_core::gfx101x::Bug::ALL
                .iter()
                .map(|b| (b.mattr().to_string(), serde_json::json!(k.counts[b.index()])))
                .collect::<serde_json::Map<_, _>>(),
            "decodes_otherwise": k.otherwise,
        })).collect::<Vec<_>>(),
        "lines": rmcp_core::fault::render(f),
    })
}

/// One busy queue in the stats report's `faults` (and `stalls`) entries.
pub(crate) fn running_json(r: &rmcp_core::dispatch::Running) -> serde_json::Value {
    let packet = match r.packet {
        Some(rmcp_core::dispatch::Packet::Dispatch(d)) => serde_json::json!({
            "type": "kernel_dispatch",
            "kernel": r.name,
            "from": r.from,
            "kernel_object": format!("{:#x}", d.kernel_object),
            "grid": d.grid,
            "workgroup": d.workgroup,
            "kernarg": format!("{:#x}", d.kernarg),
        }),
        Some(rmcp_core::dispatch::Packet::Barrier { and }) => {
            serde_json::json!({"type": if and { "barrier_and" } else { "barrier_or" }})
        }
        Some(rmcp_core::dispatch::Packet::Invalid) => serde_json::json!({"type": "invalid"}),
        Some(rmcp_core::dispatch::Packet::Other(t)) => serde_json::json!({"type": t}),
        None => serde_json::Value::Null,
    };
    serde_json::json!({
        "queue": r.queue,
        "node": r.node,
        "read": r.read,
        "write": r.write,
        "packet": packet,
        "seen_for_s": r.seen_for,
        "advice": r.advice,
    })
}
