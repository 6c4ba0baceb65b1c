//! The HIP runtime copies the process's calls reach: each one's own functions, its version
//! and its devices, which belong to the copy they came from (two copies may be different
//! ROCm releases), and what the fault handler needs later without asking the loader (its
//! ROCr's functions, its segments, where its `hsa_queue_create` and `hsa_executable_freeze`
//! calls go). Found when a binding first leads to them, kept in a fixed lock-free
//! table. Each fact is asked once, by the first thread that needs it; another thread waits
//! for the answer at most `PATIENCE` and then forwards its call unchanged, because a
//! runtime query can take the loader's lock, which the waiting thread might hold.
//!
//! A copy holds the generation of loaded objects it was last seen in (`front::generation`):
//! after a `dlclose`, the object at a copy's base is looked at again, and a copy that is no
//! longer the same (another runtime loaded where one was unloaded) is a new copy, in a free
//! slot or in place of one from an older generation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rmcp_core::classify::{self, Device, DeviceClass};
use rmcp_core::policy;
use rmcp_sys::HipApi;
use rmcp_sys::locate::{self, LoadedObject};

use crate::devices;
use crate::once::{ForkOnce, Published};
use crate::state::Global;

/// One runtime copy.
pub(crate) struct Copy {
    /// Load base: the key.
    pub(crate) base: usize,
    /// The name it was opened by (the loader's).
    pub(crate) name: String,
    /// The file it is (symbolic links resolved).
    pub(crate) path: String,
    /// Its own functions (not an interposer's).
    pub(crate) api: HipApi,
    /// hipRuntimeGetVersion, once asked (None: no answer).
    version: ForkOnce<Option<i32>>,
    /// The HIP ordinals with their classification, once listed.
    devices: ForkOnce<Listed>,
    /// The banner for this copy was logged.
    pub(crate) announced: AtomicBool,
    /// The generation of loaded objects it was last found in.
    generation: AtomicU64,
    /// Whether its ROCr has the fault handler (`fault::watch`'s state; 0: not tried).
    pub(crate) watched: std::sync::atomic::AtomicU8,
    /// Both of the above are done for good (announced, `watched` done): what a hooked call
    /// checks first, so that a settled copy costs one load (`intercept::settle`).
    pub(crate) settled: AtomicBool,
    /// How often its ROCr said it was not open yet (`fault::watch`).
    pub(crate) watch_tries: std::sync::atomic::AtomicU8,
    /// Its own ROCr's functions that the fault handler needs, found with its other functions
    /// (so registering the handler later asks the loader nothing).
    pub(crate) rocr: RocrApi,
    /// Its `PT_LOAD` segments, (start, end): [`containing`] finds the copy of a return
    /// address without asking the loader.
    segments: Vec<(usize, usize)>,
    /// What its own calls of `hsa_queue_create` reach without the shim (the next definition
    /// after the shim in the global scope, else the one in its own tree; 0: none found):
    /// where `observed` sends them without asking the loader inside the runtime's locks.
    pub(crate) queue_create: usize,
    /// The same for its calls of `hsa_executable_freeze` (`kernel_objects`).
    pub(crate) executable_freeze: usize,
}

/// The ROCr functions the fault handler uses, as the runtime copy's own dependency tree
/// binds them (0: not there). Addresses only: `fault` calls them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RocrApi {
    /// `hsa_amd_register_system_event_handler`.
    pub(crate) register: usize,
    /// `hsa_amd_pointer_info`.
    pub(crate) pointer_info: usize,
    /// `hsa_agent_get_info`.
    pub(crate) agent_info: usize,
    /// `hsa_executable_iterate_symbols` (`kernel_objects`).
    pub(crate) iterate_symbols: usize,
    /// `hsa_executable_symbol_get_info`.
    pub(crate) symbol_info: usize,
}

/// The devices of a copy and what they mean on a machine whose GPUs are partly affected.
struct Listed {
    devices: Vec<Device>,
    host: bool,
    class: DeviceClass,
}

/// How long a thread waits for another that is asking a copy a question, before it treats
/// the answer as unknown and forwards its call unchanged (issue 13: a runtime query may take
/// the loader's lock, which the waiting thread may hold). Where nothing is wrong the answer
/// comes in microseconds, so every thread decides alike.
const PATIENCE: std::time::Duration = std::time::Duration::from_millis(20);

const COPY_SLOTS: usize = 16;
static COPIES: [Published<Copy>; COPY_SLOTS] = [const { Published::new() }; COPY_SLOTS];

/// The copies found so far, in the order they were found.
pub(crate) fn all() -> impl Iterator<Item = &'static Copy> {
    COPIES.iter().map_while(Published::get)
}

/// The copy a function belongs to, if it is a runtime's.
pub(crate) fn of_function(addr: usize) -> Option<&'static Copy> {
    let object = locate::loaded_object(addr)?;
    locate::is_runtime_file(&object.name).then_some(())?;
    of_object(&object)
}

/// The first runtime copy mapped in the process (load order): the facts of a caller whose
/// functions are an interposer's.
pub(crate) fn first_mapped() -> Option<&'static Copy> {
    let own = locate::loaded_object(first_mapped as *const () as usize).map_or(0, |o| o.base);
    let first = locate::mapped_runtimes(own).into_iter().next()?;
    // The runtime exports hipMalloc; its object is found from that address.
    of_function(in_object(first.base)?)
}

/// The address of `hipMalloc` in the object loaded at `base`.
fn in_object(base: usize) -> Option<usize> {
    let object = locate::loaded_object(base)?;
    let p = crate::front::with_handle(&object, |h| {
        // SAFETY: `h` is a live dlopen handle; the name is NUL-terminated.
        unsafe { crate::front::glibc_dlsym()(h, c"hipMalloc".as_ptr()) }
    })?;
    (!p.is_null()).then_some(p as usize)
}

fn of_object(object: &LoadedObject) -> Option<&'static Copy> {
    let now = crate::front::generation();
    let here = |c: &Copy| c.base == object.base;
    if let Some(c) = all().find(|c| here(c) && c.generation.load(Ordering::Acquire) == now) {
        return Some(c);
    }
    let mut fresh = Some(new_copy(object, now));
    // Known in an older generation and still the same copy: its facts hold.
    if let Some(f) = &fresh {
        if let Some(c) = all().find(|c| here(c) && c.same_as(f)) {
            c.generation.fetch_max(now, Ordering::AcqRel);
            return Some(c);
        }
    }
    // A new copy: slots fill in order; a slot another thread filled with another copy is
    // passed over.
    for slot in &COPIES {
        let c = slot.get_or_publish(|| fresh.take().unwrap_or_else(|| new_copy(object, now)));
        if here(c) && c.generation.load(Ordering::Acquire) == now {
            return Some(c);
        }
    }
    // All slots taken: in place of a copy not seen in this generation.
    let slot = COPIES.iter().find(|slot| {
        slot.get()
            .is_some_and(|c| c.generation.load(Ordering::Acquire) < now)
    })?;
    let old = slot.get()?;
    slot.replace(old, fresh.unwrap_or_else(|| new_copy(object, now)));
    slot.get().filter(|c| here(c))
}

fn new_copy(object: &LoadedObject, generation: u64) -> Copy {
    let glibc = crate::front::glibc_dlsym();
    let api = crate::front::with_handle(object, |h| {
        let find = |name: &std::ffi::CStr| {
            // SAFETY: `h` is a live dlopen handle; `name` is NUL-terminated. The copy's own
            // search list starts with the copy.
            unsafe { glibc(h, name.as_ptr()) }
        };
        let api = HipApi::resolve(&find);
        let rocr = RocrApi {
            register: find(c"hsa_amd_register_system_event_handler") as usize,
            pointer_info: find(c"hsa_amd_pointer_info") as usize,
            agent_info: find(c"hsa_agent_get_info") as usize,
            iterate_symbols: find(c"hsa_executable_iterate_symbols") as usize,
            symbol_info: find(c"hsa_executable_symbol_get_info") as usize,
        };
        // Where the copy's own calls of an observed ROCr function go without the shim.
        let next = |o: rmcp_core::registry::Observed, name: &std::ffi::CStr| {
            let own = crate::front::observed_export(o);
            match crate::front::next(name.as_ptr()) as usize {
                0 => Some(find(name) as usize).filter(|&p| p != own),
                p => Some(p),
            }
            .unwrap_or(0)
        };
        use rmcp_core::registry::Observed::{HsaExecutableFreeze, HsaQueueCreate};
        let queue_create = next(HsaQueueCreate, c"hsa_queue_create");
        let executable_freeze = next(HsaExecutableFreeze, c"hsa_executable_freeze");
        (api, rocr, queue_create, executable_freeze)
    })
    .unwrap_or_default();
    let (api, rocr, queue_create, executable_freeze) = api;
    // The loader's walk, unless the loader must not be asked (a fork child of a parent
    // inside dlopen: `with_handle` answered None above for the same reason).
    let segments = if crate::front::loader_inconsistent() {
        Vec::new()
    } else {
        locate::mapping_with_imports(object.base, &|_| false)
            .filter(|m| m.name == object.name)
            .map(|m| m.segments)
            .unwrap_or_default()
    };
    let path = std::fs::canonicalize(&object.name).map_or_else(
        |_| object.name.clone(),
        |p| p.to_string_lossy().into_owned(),
    );
    Copy {
        base: object.base,
        name: object.name.clone(),
        path,
        api,
        version: ForkOnce::new(),
        devices: ForkOnce::new(),
        announced: AtomicBool::new(false),
        generation: AtomicU64::new(generation),
        watched: std::sync::atomic::AtomicU8::new(0),
        settled: AtomicBool::new(false),
        watch_tries: std::sync::atomic::AtomicU8::new(0),
        rocr,
        segments,
        queue_create,
        executable_freeze,
    }
}

/// The copy whose code holds `addr`, from the segments kept when each copy was found: no
/// loader call (for `hsa_queue_create`, which runtimes call under their own locks). None
/// when no copy of the current generation of loaded objects holds it.
pub(crate) fn containing(addr: usize) -> Option<&'static Copy> {
    let now = crate::front::generation();
    all().find(|c| {
        c.generation.load(Ordering::Acquire) == now
            && c.segments.iter().any(|&(s, e)| addr >= s && addr < e)
    })
}

impl Copy {
    /// The same runtime as `other`: the same name and the same functions.
    fn same_as(&self, other: &Copy) -> bool {
        self.name == other.name
            && HipApi::NAMES
                .iter()
                .all(|n| self.api.address_of(n) == other.api.address_of(n))
    }

    /// hipRuntimeGetVersion, asked once (None: no answer, or another thread is still
    /// asking after `PATIENCE`).
    pub(crate) fn version(&self) -> Option<i32> {
        self.version
            .get_or_init_within(PATIENCE, || devices::runtime_version(&self.api))
            .copied()
            .flatten()
    }

    /// The version if asked already, without asking.
    pub(crate) fn version_if_known(&self) -> Option<i32> {
        self.version.get().copied().flatten()
    }

    /// Whether this copy's hipHostAlloc allocates host memory (false while unknown: the
    /// call goes through unchanged).
    pub(crate) fn host_alloc_is_host(&self) -> bool {
        self.version().is_some_and(policy::host_alloc_is_host)
    }

    /// The HIP ordinals with their PCI address and KFD classification, listed once.
    pub(crate) fn devices(&self, g: &Global) -> &[Device] {
        self.listed(g).map_or(&[], |l| &l.devices)
    }

    /// None while another thread is still listing them after `PATIENCE`.
    fn listed(&self, g: &Global) -> Option<&Listed> {
        self.devices.get_or_init_within(PATIENCE, || {
            let devices = classify::devices(
                g.topology.as_ref(),
                &devices::ordinals(&self.api),
                &g.config.targets,
                g.config.mode,
            );
            let (host, class) = classify::by_ordinal(&devices);
            Listed {
                devices,
                host,
                class,
            }
        })
    }

    /// The devices if listed already, without listing them.
    pub(crate) fn devices_if_listed(&self) -> &[Device] {
        self.devices.get().map_or(&[], |l| &l.devices)
    }

    /// On a machine whose GPUs are partly affected: host allocations are affected for this
    /// copy's ordinals (false while unknown: the call goes through unchanged).
    pub(crate) fn host_affected(&self, g: &Global) -> bool {
        self.listed(g).is_some_and(|l| l.host)
    }

    /// [`Copy::host_affected`] if the devices were listed already, without listing them.
    pub(crate) fn host_affected_if_listed(&self) -> Option<bool> {
        self.devices.get().map(|l| l.host)
    }

    /// Is the calling thread's current device (in this copy) affected?
    pub(crate) fn current_device_affected(&self, g: &Global) -> bool {
        match self.listed(g).map(|l| &l.class) {
            None => false,
            Some(DeviceClass::All(v)) => *v,
            Some(DeviceClass::PerOrdinal(table)) => {
                // The shim's own query, under its catch_unwind (crate::cancel).
                let _no_cancel = crate::cancel::NoCancel::new();
                devices::current(&self.api)
                    .and_then(|i| table.get(i).copied())
                    .unwrap_or(false)
            }
        }
    }
}
