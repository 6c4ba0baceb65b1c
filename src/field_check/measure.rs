//! The measurement of `rmcp check`, run in each of its two child processes
//! (`rmcp check --measure`, one without and one with librmcp_shim.so preloaded): are device
//! atomics on coherent host memory right on this machine?
//!
//! The failure rmcp exists for (ROCm/clr issue 285, reproduced on gfx1010 and gfx1031): on
//! a platform without PCIe AtomicOps, atomics such as atomicMin into fine-grained (coherent)
//! host memory give wrong results with no error, while the same atomics on non-coherent
//! host memory and on VRAM are right. This runs atomicMin / atomicMax / atomicAdd /
//! atomicCAS kernels (`kernels.hip`, built into rmcp by build.rs) from 262,144 threads into
//! 256 slots placed in
//!   vram              hipMalloc
//!   host-default      hipHostMalloc(flags 0)           coherent: what PyTorch, rocBLAS... ask for
//!   host-mapped       hipHostMalloc(Mapped)            coherent
//!   host-coherent     hipHostMalloc(Coherent)          coherent
//!   host-noncoherent  hipHostMalloc(NonCoherent)       non-coherent: a control, as vram is
//! and compares every slot with the answer computed here. Under librmcp_shim.so the three
//! coherent host placements reach the runtime as NonCoherent; `hipHostGetFlags` shows the
//! flags the runtime recorded.
//!
//! The runtime is opened with dlopen(RTLD_NOW | RTLD_LOCAL), as Python extension modules
//! are, never linked: rmcp names no HIP soname, so one binary works with ROCm 5.x, 6.x and
//! 7.x, and with the copy a PyTorch wheel bundles. Lookups go through `dlsym`, which the
//! shim, when preloaded, answers for the hooked names (as for any framework that dlopens
//! the runtime). The kernels are loaded with hipModuleLoadData and launched with
//! hipModuleLaunchKernel.
//!
//! Output (stdout), one `key: value` line per fact, then one line per placement and
//! operation, `PLACEMENT OP BAD/TOTAL` (or `PLACEMENT OP error: ...`), then the verdict;
//! `mod.rs` reads it:
//!
//!   field-check: 1
//!   runtime: /usr/lib/x86_64-linux-gnu/libamdhip64.so.5.2.50203
//!   hip-runtime: 50221153
//!   shim: not loaded
//!   device: 0 gfx1031 "AMD Radeon RX 6750 XT" pci 0000:03:00.0 (1 visible)
//!   kfd: node 1 gfx1031 pcie-atomics unsupported (io_links flags [13])
//!   flags: host-default asked 0x0 runtime 0x0
//!   ...
//!   host-default atomicMin 256/256
//!   ...
//!   unchanged: host-default host-mapped      (placements whose every slot kept its initial value)
//!   buffer-triton: written 0/4096 read 0/4096     (buffer_layout.rs: the buffer-layout
//!   buffer-rdna: written 4096/4096 read 4096/4096  experiment, on hipMalloc memory; its
//!   buffer-global: written 4096/4096 read 4096/4096  verdict does not change the exit
//!   buffer-verdict: buffer-layout-drops-writes      status)
//!   verdict: wrong: host-default host-mapped host-coherent
//!
//! The override run (`rmcp check --measure-override`, on an RX 5000 only, under
//! HSA_OVERRIDE_GFX_VERSION=10.3.0; [`main_override`]) prints the same facts, then
//! `override-kernels: loaded (gfx1030)`, `override-flat-offset: offset16 X control Y` and
//! `override-fma-legacy: fmac-legacy X fma Y mul-add Z` (override_bugs.rs reads them).
//!
//! Exit status: 0 every placement right; 1 some placement wrong; 2 no usable device
//! (nothing run); 3 nothing wrong but some placement could not be measured (a HIP call
//! failed, e.g. no code object for this GPU); 4 the runtime could not be loaded.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::path::Path;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use rmcp_core::topology::{PcieAtomics, Topology};
use rmcp_sys::PciAddress;

use super::buffer_layout;
use super::kernels;
use super::override_bugs;

/// The output format's version (the `field-check:` line).
pub const FORMAT: u32 = 1;

/// Exit statuses of the measurement.
pub const RIGHT: u8 = 0;
pub const WRONG: u8 = 1;
pub const NO_DEVICE: u8 = 2;
pub const INCOMPLETE: u8 = 3;
pub const NO_RUNTIME: u8 = 4;

// 256 slots, each hit by 1024 threads: 262144 threads per operation (kernels.hip has the
// same numbers).
const SLOTS: usize = 256;
const PER_SLOT: u32 = 1024;
const THREADS: u32 = SLOTS as u32 * PER_SLOT;
const BLOCK: u32 = 256;
const GRID: u32 = THREADS / BLOCK;

/// hipHostMalloc flags (hip_runtime_api.h).
const MAPPED: c_uint = 0x2;
const COHERENT: c_uint = 0x4000_0000;
const NON_COHERENT: c_uint = 0x8000_0000;
/// hipMemcpyKind.
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Min,
    Max,
    Add,
    Cas,
}

const OPS: [(Op, &str, &CStr); 4] = [
    (Op::Min, "atomicMin", c"rmcp_check_min"),
    (Op::Max, "atomicMax", c"rmcp_check_max"),
    (Op::Add, "atomicAdd", c"rmcp_check_add"),
    (Op::Cas, "atomicCAS", c"rmcp_check_cas"),
];

/// Where the slots live: (name, host placement, hipHostMalloc flags).
pub const PLACEMENTS: [(&str, bool, c_uint); 5] = [
    ("vram", false, 0),
    ("host-default", true, 0),
    ("host-mapped", true, MAPPED),
    ("host-coherent", true, COHERENT),
    ("host-noncoherent", true, NON_COHERENT),
];

// ---- the host's side of the arithmetic (kernels.hip's `mix` and `value_of`) ----

fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

fn value_of(t: u32, op: Op) -> i32 {
    let op = match op {
        Op::Min => 0,
        Op::Max => 1,
        Op::Add => 2,
        Op::Cas => 3,
    };
    (mix(t.wrapping_mul(4).wrapping_add(op)) & 0x3fff_ffff) as i32
}

fn initial(op: Op) -> [u32; SLOTS] {
    [if op == Op::Min { 0x7fff_ffff } else { 0 }; SLOTS]
}

/// The host's answer for min/max/add.
fn expected(op: Op) -> [u32; SLOTS] {
    let mut e = initial(op);
    for t in 0..THREADS {
        let s = t as usize % SLOTS;
        let v = value_of(t, op);
        match op {
            Op::Min if v < e[s] as i32 => e[s] = v as u32,
            Op::Max if v > e[s] as i32 => e[s] = v as u32,
            Op::Add => e[s] = e[s].wrapping_add(v as u32 & 0xffff),
            _ => {}
        }
    }
    e
}

/// Slots with a wrong value. atomicCAS: exactly one thread per slot won, and the slot holds
/// that thread's id + 1.
fn count_bad(op: Op, got: &[u32; SLOTS], wins: &[u32; SLOTS]) -> usize {
    if op == Op::Cas {
        return (0..SLOTS)
            .filter(|&s| {
                let v = got[s];
                !(v != 0 && v <= THREADS && (v - 1) as usize % SLOTS == s && wins[s] == 1)
            })
            .count();
    }
    let e = expected(op);
    (0..SLOTS).filter(|&s| got[s] != e[s]).count()
}

// ---- the runtime ----

type Err = c_int;

/// The functions used, from one runtime, which stays loaded for the process's life.
struct Hip {
    path: String,
    runtime_get_version: unsafe extern "C" fn(*mut c_int) -> Err,
    get_device_count: unsafe extern "C" fn(*mut c_int) -> Err,
    get_device_properties: unsafe extern "C" fn(*mut c_void, c_int) -> Err,
    device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Err,
    host_malloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> Err,
    host_get_device_pointer: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint) -> Err,
    host_get_flags: unsafe extern "C" fn(*mut c_uint, *mut c_void) -> Err,
    host_free: unsafe extern "C" fn(*mut c_void) -> Err,
    malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> Err,
    free: unsafe extern "C" fn(*mut c_void) -> Err,
    memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> Err,
    memset: unsafe extern "C" fn(*mut c_void, c_int, usize) -> Err,
    device_synchronize: unsafe extern "C" fn() -> Err,
    get_last_error: unsafe extern "C" fn() -> Err,
    get_error_name: unsafe extern "C" fn(Err) -> *const c_char,
    module_load_data: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> Err,
    module_get_function: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> Err,
    #[allow(clippy::type_complexity)]
    module_launch_kernel: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> Err,
}

/// The names the loader is asked for when no runtime is named: the newest soname first.
pub const LOADER_NAMES: [&str; 4] = [
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libamdhip64.so",
];

impl Hip {
    /// Opens `runtime` (a path, or a name for the loader), or the first of
    /// [`LOADER_NAMES`] the loader finds.
    fn open(runtime: Option<&Path>) -> Result<Hip, String> {
        let lib = match runtime {
            Some(p) => open_local(p.as_os_str()).map_err(|e| format!("{}: {e}", p.display()))?,
            None => {
                let mut errors = Vec::new();
                let mut found = None;
                for n in LOADER_NAMES {
                    match open_local(n.as_ref()) {
                        Ok(l) => {
                            found = Some(l);
                            break;
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                found.ok_or_else(|| {
                    format!(
                        "the loader finds none of {}: {}",
                        LOADER_NAMES.join(", "),
                        errors.last().cloned().unwrap_or_default()
                    )
                })?
            }
        };
        // The runtime is never unloaded: the function pointers below stay valid for the
        // process's life.
        let lib: &'static Library = Box::leak(Box::new(lib));
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the type each field is given is the function's C signature in
                // hip_runtime_api.h (the same in 5.x, 6.x and 7.x for these functions); the
                // library is leaked above, so the pointer outlives every use.
                unsafe {
                    *lib.get(concat!($name, "\0").as_bytes())
                        .map_err(|e| format!("{}: {e}", $name))?
                }
            };
        }
        // 6.x and 7.x name the current layout of hipDeviceProp_t R0600; the plain name is
        // 5.x's (or the older layout). Only the name at offset 0 and the first "gfx" string
        // are read, which both layouts hold.
        // SAFETY: as for `sym!`; the signature is the same for both names.
        let props: Result<unsafe extern "C" fn(*mut c_void, c_int) -> Err, _> =
            unsafe { lib.get(b"hipGetDevicePropertiesR0600\0").map(|s| *s) };
        let get_device_properties = match props {
            Ok(f) => f,
            Err(_) => sym!("hipGetDeviceProperties"),
        };
        let runtime_get_version: unsafe extern "C" fn(*mut c_int) -> Err =
            sym!("hipRuntimeGetVersion");
        Ok(Hip {
            path: library_path(runtime_get_version as *const c_void),
            runtime_get_version,
            get_device_count: sym!("hipGetDeviceCount"),
            get_device_properties,
            device_get_pci_bus_id: sym!("hipDeviceGetPCIBusId"),
            host_malloc: sym!("hipHostMalloc"),
            host_get_device_pointer: sym!("hipHostGetDevicePointer"),
            host_get_flags: sym!("hipHostGetFlags"),
            host_free: sym!("hipHostFree"),
            malloc: sym!("hipMalloc"),
            free: sym!("hipFree"),
            memcpy: sym!("hipMemcpy"),
            memset: sym!("hipMemset"),
            device_synchronize: sym!("hipDeviceSynchronize"),
            get_last_error: sym!("hipGetLastError"),
            get_error_name: sym!("hipGetErrorName"),
            module_load_data: sym!("hipModuleLoadData"),
            module_get_function: sym!("hipModuleGetFunction"),
            module_launch_kernel: sym!("hipModuleLaunchKernel"),
        })
    }

    /// `hipErrorNoDevice (100)`.
    fn err_str(&self, e: Err) -> String {
        // SAFETY: hipGetErrorName returns a static NUL-terminated string (or NULL).
        let name = unsafe { (self.get_error_name)(e) };
        let name = if name.is_null() {
            "unknown".into()
        } else {
            // SAFETY: non-NULL, NUL-terminated, static (the runtime's table).
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        format!("{name} ({e})")
    }

    fn check(&self, e: Err, what: &str) -> Result<(), String> {
        if e == 0 {
            Ok(())
        } else {
            Err(format!("{what}: {}", self.err_str(e)))
        }
    }

    /// Frees the buffers of `bufs` that hipMalloc returned (null ones were never made).
    fn free_all(&self, bufs: &[*mut c_void]) {
        for &b in bufs {
            if !b.is_null() {
                // SAFETY: a pointer hipMalloc returned, freed once (each caller frees its
                // buffers here only, after its last use).
                let _ = unsafe { (self.free)(b) };
            }
        }
    }

    /// Launches `function` on `grid` blocks of `block` threads (one dimension) on the null
    /// stream and waits for it.
    ///
    /// # Safety
    /// `function` is a kernel of this runtime's modules; `args` holds pointers to its
    /// parameters' values, in order, as hipModuleLaunchKernel takes them.
    unsafe fn launch_1d(
        &self,
        function: *mut c_void,
        grid: c_uint,
        block: c_uint,
        args: &mut [*mut c_void],
    ) -> Result<(), String> {
        // SAFETY: per this function's contract; no shared memory, no stream, no extra.
        let rc = unsafe {
            (self.module_launch_kernel)(
                function,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                std::ptr::null_mut(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check(rc, "hipModuleLaunchKernel")?;
        // SAFETY: no arguments.
        self.check(unsafe { (self.device_synchronize)() }, "kernel")
    }
}

/// dlopen(name, RTLD_NOW | RTLD_LOCAL).
fn open_local(name: &std::ffi::OsStr) -> Result<Library, libloading::Error> {
    // SAFETY: loading a HIP runtime runs its initialisers, which have no preconditions on
    // this process; nothing else here is loaded or running yet.
    unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL) }
}

/// The real path of the object holding `addr` (dladdr), or "unknown".
fn library_path(addr: *const c_void) -> String {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    let ok = unsafe { libc::dladdr(addr, info.as_mut_ptr()) };
    // SAFETY: zero-initialised, and written by dladdr when it succeeds.
    let info = unsafe { info.assume_init() };
    if ok == 0 || info.dli_fname.is_null() {
        return "unknown".into();
    }
    // SAFETY: dli_fname is the loader's NUL-terminated name of a loaded object.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    std::fs::canonicalize(&name)
        .map(|p| p.display().to_string())
        .unwrap_or(name)
}

/// The kernels, loaded once into the current device.
struct Module {
    functions: [*mut c_void; 4],
    /// The buffer-layout kernels (`BUFFER_KERNELS`), or why they could not be found.
    buffer: Result<[*mut c_void; 3], String>,
}

/// The buffer-layout experiment's kernels (kernels.hip): (line key, name).
const BUFFER_KERNELS: [(&str, &CStr); 3] = [
    (buffer_layout::TRITON_KEY, c"rmcp_check_buffer_triton"),
    (buffer_layout::RDNA_KEY, c"rmcp_check_buffer_rdna"),
    (buffer_layout::GLOBAL_KEY, c"rmcp_check_global"),
];
/// Elements each buffer-layout kernel writes and reads (kernels.hip's BUF_N).
const BUF_N: usize = 4096;

impl Module {
    fn load(hip: &Hip) -> Result<Module, String> {
        let bundle = kernels::aligned();
        let mut module: *mut c_void = std::ptr::null_mut();
        // SAFETY: `bundle` is a complete offload bundle that lives until the process ends
        // (hipModuleLoadData may keep pointers into it); `module` is written by the runtime.
        let e = unsafe { (hip.module_load_data)(&mut module, bundle.as_ptr().cast()) };
        hip.check(e, "hipModuleLoadData")?;
        let mut functions = [std::ptr::null_mut(); 4];
        for (i, (_, _, name)) in OPS.iter().enumerate() {
            // SAFETY: a module the runtime returned and a NUL-terminated name.
            let e = unsafe { (hip.module_get_function)(&mut functions[i], module, name.as_ptr()) };
            hip.check(e, "hipModuleGetFunction")?;
        }
        let mut buffer = [std::ptr::null_mut(); 3];
        let buffer = BUFFER_KERNELS
            .iter()
            .zip(buffer.iter_mut())
            .try_for_each(|((_, name), f)| {
                // SAFETY: as above.
                let e = unsafe { (hip.module_get_function)(f, module, name.as_ptr()) };
                hip.check(e, "hipModuleGetFunction")
            })
            .map(|()| buffer);
        Ok(Module { functions, buffer })
    }
}

/// kernels.hip's `buffer_value`: what thread t stores.
fn buffer_value(t: u32) -> u32 {
    mix(t ^ 0x9e37_79b9) | 1
}

/// Runs one buffer-layout kernel on VRAM (the check's own allocations): `in` holds
/// `!buffer_value(t)`, `out` and `back` zeroes; then counts the elements of `out` that hold
/// what the kernel stored, and of `back` that hold what it loaded. Prints its line.
fn run_buffer(
    hip: &Hip,
    module: &Result<Module, String>,
    index: usize,
) -> Option<buffer_layout::Counts> {
    let key = BUFFER_KERNELS[index].0;
    let bytes = BUF_N * std::mem::size_of::<u32>();
    let input: Vec<u32> = (0..BUF_N as u32).map(|t| !buffer_value(t)).collect();
    let mut out_host = vec![0u32; BUF_N];
    let mut back_host = vec![0u32; BUF_N];
    let mut bufs: [*mut c_void; 3] = [std::ptr::null_mut(); 3];
    let result = (|| -> Result<(), String> {
        let function = match module {
            Ok(m) => match &m.buffer {
                Ok(f) => f[index],
                Err(e) => return Err(e.clone()),
            },
            Err(e) => return Err(e.clone()),
        };
        // SAFETY: HIP calls with out-pointers to locals, sizes matching the buffers, and
        // pointers the runtime returned; the kernel's parameters are pointers to the
        // argument values, as hipModuleLaunchKernel takes.
        unsafe {
            for b in bufs.iter_mut() {
                hip.check((hip.malloc)(b, bytes), "hipMalloc")?;
                hip.check((hip.memset)(*b, 0, bytes), "hipMemset")?;
            }
            hip.check(
                (hip.memcpy)(bufs[0], input.as_ptr().cast(), bytes, HOST_TO_DEVICE),
                "hipMemcpy",
            )?;
            hip.check((hip.device_synchronize)(), "hipDeviceSynchronize")?;
            let mut args: [*mut c_void; 3] = [
                (&raw mut bufs[0]).cast::<c_void>(),
                (&raw mut bufs[1]).cast::<c_void>(),
                (&raw mut bufs[2]).cast::<c_void>(),
            ];
            hip.launch_1d(function, (BUF_N as u32).div_ceil(BLOCK), BLOCK, &mut args)?;
            hip.check(
                (hip.memcpy)(out_host.as_mut_ptr().cast(), bufs[1], bytes, DEVICE_TO_HOST),
                "hipMemcpy",
            )?;
            hip.check(
                (hip.memcpy)(
                    back_host.as_mut_ptr().cast(),
                    bufs[2],
                    bytes,
                    DEVICE_TO_HOST,
                ),
                "hipMemcpy",
            )?;
        }
        Ok(())
    })();
    hip.free_all(&bufs);
    match result {
        Err(e) => {
            println!("{key}: error: {e}");
            None
        }
        Ok(()) => {
            let c = buffer_layout::Counts {
                written: (0..BUF_N)
                    .filter(|&t| out_host[t] == buffer_value(t as u32))
                    .count() as u64,
                read: (0..BUF_N).filter(|&t| back_host[t] == input[t]).count() as u64,
                total: BUF_N as u64,
            };
            println!("{key}: {c}");
            Some(c)
        }
    }
}

/// Runs one operation on one placement; prints its line. Returns (wrong, failed,
/// unchanged): `unchanged` when every slot still holds the value it started with.
fn run_op(
    hip: &Hip,
    module: &Result<Module, String>,
    place: (&str, bool, c_uint),
    op_index: usize,
) -> (bool, bool, bool) {
    let (name, host_placement, flags) = place;
    let (op, op_name, _) = OPS[op_index];
    let bytes = SLOTS * std::mem::size_of::<u32>();
    let mut host: *mut c_void = std::ptr::null_mut();
    let mut dev: *mut c_void = std::ptr::null_mut();
    let mut wins: *mut c_void = std::ptr::null_mut();
    let mut got = [0u32; SLOTS];
    let mut won = [0u32; SLOTS];
    let init = initial(op);
    let result = (|| -> Result<(), String> {
        let function = match module {
            Ok(m) => m.functions[op_index],
            Err(e) => return Err(e.clone()),
        };
        // SAFETY: HIP calls with out-pointers to locals, sizes matching the buffers, and
        // pointers the runtime returned; the kernel's parameters are pointers to the
        // argument values, as hipModuleLaunchKernel takes.
        unsafe {
            if host_placement {
                hip.check((hip.host_malloc)(&mut host, bytes, flags), "hipHostMalloc")?;
                if (hip.host_get_device_pointer)(&mut dev, host, 0) != 0 || dev.is_null() {
                    let _ = (hip.get_last_error)();
                    // ROCm maps pinned host memory at the same address on the device.
                    dev = host;
                }
                std::ptr::copy_nonoverlapping(init.as_ptr(), host.cast::<u32>(), SLOTS);
            } else {
                hip.check((hip.malloc)(&mut dev, bytes), "hipMalloc")?;
                hip.check(
                    (hip.memcpy)(dev, init.as_ptr().cast(), bytes, HOST_TO_DEVICE),
                    "hipMemcpy",
                )?;
            }
            if op == Op::Cas {
                hip.check((hip.malloc)(&mut wins, bytes), "hipMalloc")?;
                hip.check((hip.memset)(wins, 0, bytes), "hipMemset")?;
            }
            hip.check((hip.device_synchronize)(), "hipDeviceSynchronize")?;
            let mut args: [*mut c_void; 2] = [
                (&raw mut dev).cast::<c_void>(),
                (&raw mut wins).cast::<c_void>(),
            ];
            hip.launch_1d(function, GRID, BLOCK, &mut args)?;
            if host_placement {
                std::ptr::copy_nonoverlapping(host.cast::<u32>(), got.as_mut_ptr(), SLOTS);
            } else {
                hip.check(
                    (hip.memcpy)(got.as_mut_ptr().cast(), dev, bytes, DEVICE_TO_HOST),
                    "hipMemcpy",
                )?;
            }
            if !wins.is_null() {
                hip.check(
                    (hip.memcpy)(won.as_mut_ptr().cast(), wins, bytes, DEVICE_TO_HOST),
                    "hipMemcpy",
                )?;
            }
        }
        Ok(())
    })();
    // SAFETY: each pointer is either NULL (not freed) or one the runtime returned.
    unsafe {
        if !wins.is_null() {
            let _ = (hip.free)(wins);
        }
        if host_placement && !host.is_null() {
            let _ = (hip.host_free)(host);
        }
        if !host_placement && !dev.is_null() {
            let _ = (hip.free)(dev);
        }
    }
    match result {
        Err(e) => {
            println!("{name} {op_name} error: {e}");
            (false, true, false)
        }
        Ok(()) => {
            let bad = count_bad(op, &got, &won);
            println!("{name} {op_name} {bad}/{SLOTS}");
            (bad > 0, false, got == init)
        }
    }
}

/// The flags the runtime recorded for hipHostMalloc(flags): under the shim the coherent
/// requests show up as NonCoherent here.
fn print_flags(hip: &Hip, name: &str, flags: c_uint) {
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local; 4096 bytes, freed below.
    let e = unsafe { (hip.host_malloc)(&mut h, 4096, flags) };
    if e != 0 {
        println!("flags: {name} asked {flags:#x} error: {}", hip.err_str(e));
        return;
    }
    let mut got: c_uint = 0;
    // SAFETY: `h` is the runtime's allocation; `got` a local.
    let e = unsafe { (hip.host_get_flags)(&mut got, h) };
    if e == 0 {
        println!("flags: {name} asked {flags:#x} runtime {got:#x}");
    } else {
        println!(
            "flags: {name} asked {flags:#x} runtime unknown (hipHostGetFlags: {})",
            hip.err_str(e)
        );
    }
    // SAFETY: freed once, by the runtime that allocated it.
    let _ = unsafe { (hip.host_free)(h) };
}

/// "kfd: node N gfxXXXX pcie-atomics supported|unsupported|unknown (io_links flags [..])",
/// read by the code `rmcp doctor` reads the topology with.
fn kfd_line(root: &Path, pci: &str) -> String {
    let Some(addr) = PciAddress::parse(pci) else {
        return format!("unknown (PCI bus id \"{pci}\" not understood)");
    };
    let topo = match Topology::read(root) {
        Ok(t) => t,
        Err(e) => return format!("unknown ({}: {e})", root.display()),
    };
    let Some(g) = topo.gpu_at(addr) else {
        return format!("unknown (no GPU node at {pci} under {})", root.display());
    };
    let atomics = match g.pcie_atomics() {
        PcieAtomics::Supported => "supported",
        PcieAtomics::Unsupported => "unsupported",
        PcieAtomics::Unknown => "unknown",
    };
    let flags: Vec<String> = g
        .io_links
        .iter()
        .filter_map(|l| l.flags)
        .map(|f| f.to_string())
        .collect();
    format!(
        "node {} {} pcie-atomics {atomics} (io_links flags [{}])",
        g.node,
        g.gfx,
        flags.join(", ")
    )
}

/// "shim: loaded /path/librmcp_shim.so" or "shim: not loaded", from /proc/self/maps.
fn shim_line() -> String {
    let maps = match std::fs::read_to_string("/proc/self/maps") {
        Ok(m) => m,
        Err(e) => return format!("unknown (/proc/self/maps: {e})"),
    };
    let found = maps.lines().find_map(|l| {
        let path = &l[l.find('/')?..];
        let path = path.trim_end();
        (path == crate::preload::SHIM_NAME
            || path.ends_with(&format!("/{}", crate::preload::SHIM_NAME)))
        .then(|| path.to_string())
    });
    match found {
        Some(p) => format!("loaded {p}"),
        None => "not loaded".into(),
    }
}

/// The device's name (offset 0 of hipDeviceProp_t) and gcnArchName (its first "gfx"
/// string, wherever the layout puts it).
fn device_names(hip: &Hip) -> (String, String) {
    // Larger than any layout of hipDeviceProp_t (R0600 is about 1.5 KiB), u64-aligned.
    let mut props = vec![0u64; 1024];
    // SAFETY: the buffer is larger than the structure the runtime writes.
    let e = unsafe { (hip.get_device_properties)(props.as_mut_ptr().cast(), 0) };
    if e != 0 {
        return ("unknown".into(), "unknown".into());
    }
    // SAFETY: the buffer's bytes, all initialised (zeroed, then written by the runtime).
    let bytes: &[u8] =
        unsafe { std::slice::from_raw_parts(props.as_ptr().cast(), props.len() * 8) };
    let c_str = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len()).min(255);
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    let name = c_str(bytes);
    let arch = (0..bytes.len() - 4)
        .find(|&i| &bytes[i..i + 3] == b"gfx" && bytes[i + 3].is_ascii_digit())
        .map(|i| c_str(&bytes[i..]))
        .unwrap_or_else(|| "unknown".into());
    (name, arch)
}

/// The facts every run prints first (`field-check`, `runtime`, `hip-runtime`, `shim`,
/// `device`, `hsa-override-gfx-version`, `kfd`): the runtime, with a usable device 0; else
/// the exit status, after the `verdict:` line.
fn start(runtime: Option<&Path>) -> Result<Hip, u8> {
    println!("field-check: {FORMAT}");
    let hip = match Hip::open(runtime) {
        Ok(h) => h,
        Err(e) => {
            println!("runtime: cannot load: {e}");
            println!("verdict: no HIP runtime: nothing was run");
            return Err(NO_RUNTIME);
        }
    };
    println!("runtime: {}", hip.path);
    let mut rt: c_int = 0;
    // SAFETY: an out-pointer to a local.
    match unsafe { (hip.runtime_get_version)(&mut rt) } {
        0 => println!("hip-runtime: {rt}"),
        _ => println!("hip-runtime: unknown"),
    }
    println!("shim: {}", shim_line());
    let sysfs = rmcp_core::config::Config::from_env(false).sysfs_root;

    let mut count: c_int = 0;
    // SAFETY: an out-pointer to a local.
    let e = unsafe { (hip.get_device_count)(&mut count) };
    if e != 0 || count <= 0 {
        let kfd = Topology::read_gpus(&sysfs)
            .map(|t| t.gpus.len())
            .unwrap_or(0);
        println!(
            "device: none (hipGetDeviceCount: {}, {} devices)",
            if e == 0 {
                "hipSuccess (0)".to_string()
            } else {
                hip.err_str(e)
            },
            if e == 0 { count } else { 0 }
        );
        if kfd > 0 {
            println!(
                "kfd: {kfd} GPU node(s) in {}, but HIP can use none: check access to /dev/kfd \
                 and /dev/dri/renderD* (rmcp doctor)",
                sysfs.display()
            );
        } else {
            println!("kfd: no GPU node in {}", sysfs.display());
        }
        println!("verdict: no usable device: nothing was run");
        return Err(NO_DEVICE);
    }

    // Device 0 only: HIP_VISIBLE_DEVICES picks another.
    let (name, arch) = device_names(&hip);
    let mut pci = [0 as c_char; 64];
    // SAFETY: the buffer and its length.
    let pci = match unsafe { (hip.device_get_pci_bus_id)(pci.as_mut_ptr(), 64, 0) } {
        // SAFETY: the runtime wrote a NUL-terminated string into the zeroed buffer.
        0 => unsafe { CStr::from_ptr(pci.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
        _ => "unknown".to_string(),
    };
    println!(
        "device: 0 {arch} \"{}\" pci {pci} ({count} visible)",
        name.replace('"', "'")
    );
    if let Some(ov) = std::env::var_os("HSA_OVERRIDE_GFX_VERSION").filter(|v| !v.is_empty()) {
        println!("hsa-override-gfx-version: {}", ov.to_string_lossy());
    }
    if pci == "unknown" {
        println!("kfd: unknown (hipDeviceGetPCIBusId failed)");
    } else {
        println!("kfd: {}", kfd_line(&sysfs, &pci));
    }
    Ok(hip)
}

/// The measurement: prints the lines above and returns the exit status.
pub fn main(runtime: Option<&Path>) -> u8 {
    let hip = match start(runtime) {
        Ok(h) => h,
        Err(status) => return status,
    };
    for (name, host, flags) in PLACEMENTS {
        if host {
            print_flags(&hip, name, flags);
        }
    }
    let module = Module::load(&hip);
    match &module {
        Ok(_) => println!("kernels: loaded ({} targets)", kernels::targets().len()),
        Err(e) => println!("kernels: {e}"),
    }

    let (mut wrong, mut failed, mut unchanged) = (Vec::new(), Vec::new(), Vec::new());
    for place in PLACEMENTS {
        let (mut w, mut f, mut u) = (false, false, true);
        for op in 0..OPS.len() {
            let (ow, of, ou) = run_op(&hip, &module, place, op);
            w |= ow;
            f |= of;
            u &= ou;
        }
        if w {
            wrong.push(place.0);
        }
        if f {
            failed.push(place.0);
        }
        if u && !f {
            unchanged.push(place.0);
        }
    }
    if !unchanged.is_empty() {
        println!("unchanged: {}", unchanged.join(" "));
    }
    // The buffer-layout experiment (its verdict does not change the exit status).
    let counts: Vec<Option<buffer_layout::Counts>> = (0..BUFFER_KERNELS.len())
        .map(|i| run_buffer(&hip, &module, i))
        .collect();
    let bv = buffer_layout::verdict(counts[0], counts[1], counts[2]);
    println!("{}: {}", buffer_layout::VERDICT_KEY, bv.word);
    if !wrong.is_empty() {
        if failed.is_empty() {
            println!("verdict: wrong: {}", wrong.join(" "));
        } else {
            println!(
                "verdict: wrong: {}; could not measure: {}",
                wrong.join(" "),
                failed.join(" ")
            );
        }
        return WRONG;
    }
    if !failed.is_empty() {
        println!(
            "verdict: incomplete: could not measure {}",
            failed.join(" ")
        );
        return INCOMPLETE;
    }
    println!("verdict: right: every placement gave the host's answer");
    RIGHT
}

/// The override experiments' kernels (override_kernels.hip), in launch order.
const OVERRIDE_KERNELS: [&CStr; 4] = [
    c"rmcp_override_flat_offset",
    c"rmcp_override_flat_control",
    c"rmcp_override_fma_legacy",
    c"rmcp_override_fma_control",
];

/// Runs `function` as one thread on `input` (copied to a hipMalloc buffer) and an output
/// of `outputs` words that holds [`override_bugs::UNWRITTEN`] before; returns the output.
fn run_single(
    hip: &Hip,
    function: *mut c_void,
    input: &[u32],
    outputs: usize,
) -> Result<Vec<u32>, String> {
    let mut got = vec![override_bugs::UNWRITTEN; outputs];
    let mut bufs: [*mut c_void; 2] = [std::ptr::null_mut(); 2];
    let sizes = [std::mem::size_of_val(input), outputs * 4];
    let result = (|| -> Result<(), String> {
        // SAFETY: HIP calls with out-pointers to locals, sizes matching the buffers, and
        // pointers the runtime returned; the kernel's two parameters are pointers to the
        // argument values, as hipModuleLaunchKernel takes.
        unsafe {
            for (b, size) in bufs.iter_mut().zip(sizes) {
                hip.check((hip.malloc)(b, size), "hipMalloc")?;
            }
            hip.check(
                (hip.memcpy)(bufs[0], input.as_ptr().cast(), sizes[0], HOST_TO_DEVICE),
                "hipMemcpy",
            )?;
            hip.check(
                (hip.memcpy)(bufs[1], got.as_ptr().cast(), sizes[1], HOST_TO_DEVICE),
                "hipMemcpy",
            )?;
            hip.check((hip.device_synchronize)(), "hipDeviceSynchronize")?;
            let mut args: [*mut c_void; 2] = [
                (&raw mut bufs[0]).cast::<c_void>(),
                (&raw mut bufs[1]).cast::<c_void>(),
            ];
            hip.launch_1d(function, 1, 1, &mut args)?;
            hip.check(
                (hip.memcpy)(got.as_mut_ptr().cast(), bufs[1], sizes[1], DEVICE_TO_HOST),
                "hipMemcpy",
            )?;
        }
        Ok(())
    })();
    hip.free_all(&bufs);
    result.map(|()| got)
}

/// The override experiments (override_bugs.rs), in the child run under
/// HSA_OVERRIDE_GFX_VERSION=10.3.0 (`rmcp check --measure-override`): the facts as
/// [`main`] prints them, then `override-kernels`, `override-flat-offset` and
/// `override-fma-legacy` lines (values, or `error: ...`). Exit status 0 when both lines
/// were printed, else as [`main`] (no runtime, no device).
pub fn main_override(runtime: Option<&Path>) -> u8 {
    let hip = match start(runtime) {
        Ok(h) => h,
        Err(status) => return status,
    };
    let functions = (|| -> Result<[*mut c_void; 4], String> {
        if !kernels::override_present() {
            return Err("this rmcp carries no override kernels".into());
        }
        let bundle = kernels::override_aligned();
        let mut module: *mut c_void = std::ptr::null_mut();
        // SAFETY: as in Module::load: a complete bundle that lives until the process ends.
        let e = unsafe { (hip.module_load_data)(&mut module, bundle.as_ptr().cast()) };
        hip.check(e, "hipModuleLoadData")?;
        let mut f = [std::ptr::null_mut(); 4];
        for (slot, name) in f.iter_mut().zip(OVERRIDE_KERNELS) {
            // SAFETY: a module the runtime returned and a NUL-terminated name.
            let e = unsafe { (hip.module_get_function)(slot, module, name.as_ptr()) };
            hip.check(e, "hipModuleGetFunction")?;
        }
        Ok(f)
    })();
    match &functions {
        Ok(_) => println!("override-kernels: loaded ({})", kernels::OVERRIDE_TARGET),
        Err(e) => println!("override-kernels: error: {e}"),
    }
    let flat_in: Vec<u32> = (0..override_bugs::FLAT_ELEMENTS)
        .map(override_bugs::flat_value)
        .collect();
    let flat = functions.clone().and_then(|f| {
        let a = run_single(&hip, f[0], &flat_in, 1)?;
        let c = run_single(&hip, f[1], &flat_in, 1)?;
        Ok(override_bugs::FlatReadings {
            offset16: a[0],
            control: c[0],
        })
    });
    match flat {
        Ok(r) => println!("{}: {r}", override_bugs::FLAT_KEY),
        Err(e) => println!("{}: error: {e}", override_bugs::FLAT_KEY),
    }
    let fma = functions.and_then(|f| {
        let l = run_single(&hip, f[2], &override_bugs::FMA_INPUTS, 1)?;
        let c = run_single(&hip, f[3], &override_bugs::FMA_INPUTS, 2)?;
        Ok(override_bugs::FmaReadings {
            legacy: l[0],
            fma: c[0],
            mul_add: c[1],
        })
    });
    match fma {
        Ok(r) => println!("{}: {r}", override_bugs::FMA_KEY),
        Err(e) => println!("{}: error: {e}", override_bugs::FMA_KEY),
    }
    RIGHT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_answers_are_not_the_initial_values() {
        // A GPU that runs nothing leaves the initial values: each answer differs from them
        // in every slot, so such a run counts every slot wrong.
        for op in [Op::Min, Op::Max, Op::Add] {
            let e = expected(op);
            let i = initial(op);
            assert!((0..SLOTS).all(|s| e[s] != i[s]));
        }
        let untouched = initial(Op::Cas);
        assert_eq!(count_bad(Op::Cas, &untouched, &[0; SLOTS]), SLOTS);
        assert_eq!(count_bad(Op::Min, &initial(Op::Min), &[0; SLOTS]), SLOTS);
    }

    #[test]
    fn right_answers_count_nothing_bad() {
        for op in [Op::Min, Op::Max, Op::Add] {
            assert_eq!(count_bad(op, &expected(op), &[0; SLOTS]), 0);
        }
        // atomicCAS: slot s won by thread s (id + 1 stored), once.
        let got: [u32; SLOTS] = std::array::from_fn(|s| s as u32 + 1);
        assert_eq!(count_bad(Op::Cas, &got, &[1; SLOTS]), 0);
        assert_eq!(count_bad(Op::Cas, &got, &[2; SLOTS]), SLOTS);
    }

    #[test]
    fn the_hash_is_the_kernels() {
        // kernels.hip's mix(1) and value_of(0, min), computed by hand from its constants.
        assert_eq!(mix(0), 0);
        let x = 1u32;
        let x = x ^ (x >> 16);
        let x = x.wrapping_mul(0x7feb352d);
        let x = x ^ (x >> 15);
        let x = x.wrapping_mul(0x846ca68b);
        let x = x ^ (x >> 16);
        assert_eq!(mix(1), x);
        assert_eq!(value_of(0, Op::Max), (mix(1) & 0x3fff_ffff) as i32);
    }
}
