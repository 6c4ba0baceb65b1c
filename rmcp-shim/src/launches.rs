//! The launch ring: which kernels the process launched last, and their names. It owns three
//! fixed tables, all lock-free, and reads nothing of the shim's other state:
//! - the ring: the last [`RING`] launches (the kernel's stub or `hipFunction_t`, the caller's
//!   return address, the launch function, the launching thread). A launch costs one
//!   `fetch_add` and six stores: no lock, no heap, no system call. The oldest is overwritten;
//!   [`total`] says how many there were;
//! - the stubs' names: `__hipRegisterFunction` gives each kernel's host stub with its device
//!   name when a fat binary loads ([`STUBS`] of them; past that a stub's name is not kept,
//!   and the fault report says "name not recorded"). The name is kept as the pointer the fat
//!   binary passed (its own read-only data); it is read at fault time only while the stub's
//!   object is still mapped (`dladdr`), and then only up to [`NAME_MAX`] bytes;
//! - the functions' names: `hipModuleGetFunction` gives a `hipFunction_t` for a name the
//!   caller owns, so the name is copied ([`FUNCTIONS`] of them, cut at [`NAME_MAX`] bytes;
//!   past that, not kept). A handle seen again keeps its first name.
//!
//! Names are made only at fault time ([`recent`]), from these tables and the loader (which
//! library a stub or a caller is in): `dladdr` alone sees exported symbols only, and an
//! executable's kernel stubs are not exported.

use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

use rmcp_core::registry::Observed;

/// Launches kept.
pub(crate) const RING: usize = 256;
/// Host stubs whose names are kept.
pub(crate) const STUBS: usize = 1 << 16;
/// `hipFunction_t`s whose names are kept.
pub(crate) const FUNCTIONS: usize = 4096;
/// The longest name read or kept, in bytes.
pub(crate) const NAME_MAX: usize = 256;

/// What a launch names its kernel by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// A host stub (hipLaunchKernel and its kin).
    Stub(usize),
    /// A `hipFunction_t` (hipModuleLaunchKernel and its kin).
    Function(usize),
    /// A `hipGraphExec_t` (hipGraphLaunch): the kernels it runs are `graphs`'.
    Graph(usize),
}

struct Entry {
    /// 0: never written; odd: being written; else (launch number + 1) * 2.
    seq: AtomicU64,
    kernel: AtomicUsize,
    caller: AtomicUsize,
    thread: AtomicUsize,
    /// The `Observed` index, with 0x80 set for a `hipFunction_t`, 0x40 for a graph.
    via: AtomicU8,
}

static LAUNCHES: [Entry; RING] = [const {
    Entry {
        seq: AtomicU64::new(0),
        kernel: AtomicUsize::new(0),
        caller: AtomicUsize::new(0),
        thread: AtomicUsize::new(0),
        via: AtomicU8::new(0),
    }
}; RING];
static HEAD: AtomicU64 = AtomicU64::new(0);

const FUNCTION_BIT: u8 = 0x80;
const GRAPH_BIT: u8 = 0x40;
const _: () = assert!(Observed::COUNT < GRAPH_BIT as usize);

/// The calling thread's `pthread_t` (read from the thread pointer: no system call).
#[inline(always)]
fn thread_id() -> usize {
    // SAFETY: pthread_self has no preconditions and makes no system call.
    unsafe { libc::pthread_self() as usize }
}

/// Records one launch: the hot path.
#[inline(always)]
pub(crate) fn record(via: Observed, kernel: Kernel, caller: usize) {
    let n = HEAD.fetch_add(1, Ordering::Relaxed);
    let e = &LAUNCHES[(n % RING as u64) as usize];
    e.seq.store(n.wrapping_mul(2) | 1, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    let (k, bit) = match kernel {
        Kernel::Stub(s) => (s, 0),
        Kernel::Function(f) => (f, FUNCTION_BIT),
        Kernel::Graph(g) => (g, GRAPH_BIT),
    };
    e.kernel.store(k, Ordering::Relaxed);
    e.caller.store(caller, Ordering::Relaxed);
    e.thread.store(thread_id(), Ordering::Relaxed);
    e.via.store(via.index() as u8 | bit, Ordering::Relaxed);
    e.seq
        .store(n.wrapping_add(1).wrapping_mul(2), Ordering::Release);
}

/// Launches recorded since the process started.
pub(crate) fn total() -> u64 {
    HEAD.load(Ordering::Relaxed)
}

/// One launch as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    pub(crate) kernel: Kernel,
    pub(crate) caller: usize,
    pub(crate) thread: usize,
    pub(crate) via: Observed,
}

/// The last `n` launches, newest first; one being written as it is read is left out.
pub(crate) fn last(n: usize) -> Vec<Launch> {
    let head = HEAD.load(Ordering::Acquire);
    let mut out = Vec::new();
    for back in 0..(n.min(RING) as u64) {
        let Some(k) = head.checked_sub(back + 1) else {
            break;
        };
        let e = &LAUNCHES[(k % RING as u64) as usize];
        let before = e.seq.load(Ordering::Acquire);
        if before != k.wrapping_add(1).wrapping_mul(2) {
            continue;
        }
        let kernel = e.kernel.load(Ordering::Relaxed);
        let caller = e.caller.load(Ordering::Relaxed);
        let thread = e.thread.load(Ordering::Relaxed);
        let via = e.via.load(Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Acquire);
        if e.seq.load(Ordering::Relaxed) != before {
            continue;
        }
        let Some(&(o, _)) =
            rmcp_core::registry::OBSERVED.get(usize::from(via & !(FUNCTION_BIT | GRAPH_BIT)))
        else {
            continue;
        };
        out.push(Launch {
            kernel: if via & FUNCTION_BIT != 0 {
                Kernel::Function(kernel)
            } else if via & GRAPH_BIT != 0 {
                Kernel::Graph(kernel)
            } else {
                Kernel::Stub(kernel)
            },
            caller,
            thread,
            via: o,
        });
    }
    out
}

// ---- names ---------------------------------------------------------------------------------

struct StubName {
    stub: AtomicUsize,
    name: AtomicUsize,
}

static STUB_NAMES: [StubName; STUBS] = [const {
    StubName {
        stub: AtomicUsize::new(0),
        name: AtomicUsize::new(0),
    }
}; STUBS];

const PROBES: usize = 32;

fn hash(key: usize) -> usize {
    (key as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_right(29) as usize
}

/// `__hipRegisterFunction(modules, stub, device_function, name, ...)`: keeps `name` for
/// `stub`. A full probe window drops it.
pub(crate) fn name_stub(stub: usize, name: usize) {
    if stub == 0 || name == 0 {
        return;
    }
    let start = hash(stub);
    for i in 0..PROBES {
        let e = &STUB_NAMES[(start.wrapping_add(i)) % STUBS];
        match e
            .stub
            .compare_exchange(0, stub, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                e.name.store(name, Ordering::Release);
                return;
            }
            Err(s) if s == stub => {
                // Registered again (a library loaded again at the same address).
                e.name.store(name, Ordering::Release);
                return;
            }
            Err(_) => {}
        }
    }
}

fn stub_name_pointer(stub: usize) -> Option<usize> {
    let start = hash(stub);
    for i in 0..PROBES {
        let e = &STUB_NAMES[(start.wrapping_add(i)) % STUBS];
        match e.stub.load(Ordering::Acquire) {
            0 => return None,
            s if s == stub => return Some(e.name.load(Ordering::Acquire)).filter(|n| *n != 0),
            _ => {}
        }
    }
    None
}

const WORDS: usize = NAME_MAX / 8;

struct FunctionName {
    function: AtomicUsize,
    /// 0 until the name is whole.
    ready: AtomicU8,
    len: AtomicUsize,
    words: [AtomicU64; WORDS],
}

static FUNCTION_NAMES: [FunctionName; FUNCTIONS] = [const {
    FunctionName {
        function: AtomicUsize::new(0),
        ready: AtomicU8::new(0),
        len: AtomicUsize::new(0),
        words: [const { AtomicU64::new(0) }; WORDS],
    }
}; FUNCTIONS];

/// After a successful `hipModuleGetFunction`: keeps a copy of `name` for `function`.
pub(crate) fn name_function(function: usize, name: &[u8]) {
    if function == 0 {
        return;
    }
    let start = hash(function);
    for i in 0..PROBES {
        let e = &FUNCTION_NAMES[(start.wrapping_add(i)) % FUNCTIONS];
        match e
            .function
            .compare_exchange(0, function, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                let name = &name[..name.len().min(NAME_MAX)];
                for (w, chunk) in e.words.iter().zip(name.chunks(8)) {
                    let mut b = [0u8; 8];
                    b[..chunk.len()].copy_from_slice(chunk);
                    w.store(u64::from_le_bytes(b), Ordering::Relaxed);
                }
                e.len.store(name.len(), Ordering::Relaxed);
                e.ready.store(1, Ordering::Release);
                return;
            }
            Err(f) if f == function => return,
            Err(_) => {}
        }
    }
}

/// After a successful `hipModuleGetFunction(function, module, name)`: keeps the name for the
/// function the runtime wrote.
///
/// # Safety
/// `function` is null or points to the `hipFunction_t` the runtime wrote; `name` is null or a
/// NUL-terminated string.
pub(crate) unsafe fn name_module_function(
    function: *mut *mut std::ffi::c_void,
    name: *const std::ffi::c_char,
) {
    if function.is_null() || name.is_null() {
        return;
    }
    // SAFETY: per this function's contract.
    let (f, name) = unsafe { (function.read() as usize, std::ffi::CStr::from_ptr(name)) };
    name_function(f, name.to_bytes());
}

fn function_name(function: usize) -> Option<String> {
    let start = hash(function);
    for i in 0..PROBES {
        let e = &FUNCTION_NAMES[(start.wrapping_add(i)) % FUNCTIONS];
        match e.function.load(Ordering::Acquire) {
            0 => return None,
            f if f == function => {
                if e.ready.load(Ordering::Acquire) == 0 {
                    return None;
                }
                let len = e.len.load(Ordering::Relaxed).min(NAME_MAX);
                let mut bytes: Vec<u8> = e
                    .words
                    .iter()
                    .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
                    .collect();
                bytes.truncate(len);
                return Some(String::from_utf8_lossy(&bytes).into_owned());
            }
            _ => {}
        }
    }
    None
}

/// The name a launch's kernel had, and the library it is in (a stub's own object; for a
/// `hipFunction_t`, the caller's). At fault time only: it asks the loader.
pub(crate) fn describe(l: &Launch) -> rmcp_core::fault::Kernel {
    let library_of = |addr: usize| rmcp_sys::locate::object_of(addr).map(|(_, p)| p);
    let (name, library) = match l.kernel {
        Kernel::Stub(stub) => {
            let object = rmcp_sys::locate::object_of(stub);
            // Read the name only while it lies in a loaded segment of the object that holds
            // the stub (dladdr answers only for addresses inside a PT_LOAD segment): an
            // object unloaded since, or another mapped in its place, is not read.
            let name = stub_name_pointer(stub)
                .filter(|p| {
                    let here = rmcp_sys::locate::object_of(*p).map(|(base, _)| base);
                    here.is_some() && here == object.as_ref().map(|(base, _)| *base)
                })
                // SAFETY: the pointer __hipRegisterFunction was handed for this stub: a
                // NUL-terminated string in the fat binary's data of the object that holds the
                // stub, mapped (checked above); read up to NAME_MAX bytes or a NUL.
                .map(|p| unsafe { bounded_c_string(p as *const u8) });
            (name, object.map(|(_, path)| path))
        }
        Kernel::Function(f) => (function_name(f), library_of(l.caller)),
        // A graph: named by its handle, from the library that launched it.
        Kernel::Graph(g) => (
            Some(format!("a graph (hipGraphExec_t {g:#x})")),
            library_of(l.caller),
        ),
    };
    rmcp_core::fault::Kernel {
        name,
        library,
        via: l.via.name(),
        thread: l.thread as u64,
    }
}

/// Up to NAME_MAX bytes at `p`, to the first NUL.
///
/// # Safety
/// `p` points to at least NAME_MAX readable bytes or to a NUL-terminated string.
unsafe fn bounded_c_string(p: *const u8) -> String {
    let mut out = Vec::new();
    for i in 0..NAME_MAX {
        // SAFETY: per the contract, every byte up to the first NUL (or NAME_MAX) is readable.
        let b = unsafe { p.add(i).read() };
        if b == 0 {
            break;
        }
        out.push(b);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_first_and_wraps() {
        let before = total();
        for i in 0..(RING + 10) {
            record(
                Observed::HipLaunchKernel,
                Kernel::Stub(0x1000 + i),
                0x2000 + i,
            );
        }
        assert_eq!(total() - before, (RING + 10) as u64);
        let last = last(3);
        // Other tests of this binary do not launch; the newest are ours.
        assert_eq!(last[0].kernel, Kernel::Stub(0x1000 + RING + 9));
        assert_eq!(last[2].caller, 0x2000 + RING + 7);
        assert_eq!(last[0].via, Observed::HipLaunchKernel);
        assert_eq!(super::last(RING * 2).len(), RING);
    }

    #[test]
    fn function_names_are_copied_and_cut() {
        name_function(0x5000, b"first_kernel");
        name_function(0x5000, b"ignored");
        assert_eq!(function_name(0x5000).as_deref(), Some("first_kernel"));
        let long = vec![b'k'; NAME_MAX + 40];
        name_function(0x6000, &long);
        assert_eq!(function_name(0x6000).map(|n| n.len()), Some(NAME_MAX));
        assert_eq!(function_name(0x7000), None);
        name_function(0, b"x");
        assert_eq!(function_name(0), None);
    }

    #[test]
    fn stub_names_point_into_the_registering_object() {
        static NAME: &[u8] = b"_Z6kernelPi\0";
        let stub = the_ring_keeps_the_newest_first_and_wraps as *const () as usize;
        name_stub(stub, NAME.as_ptr() as usize);
        let d = describe(&Launch {
            kernel: Kernel::Stub(stub),
            caller: 0,
            thread: 1,
            via: Observed::HipLaunchKernel,
        });
        assert_eq!(d.name.as_deref(), Some("_Z6kernelPi"));
        assert!(d.library.is_some());
        assert_eq!(d.via, "hipLaunchKernel");
    }
}
