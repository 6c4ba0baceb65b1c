//! The launch ring: which kernels the process launched last, and their names. It owns three
//! fixed tables, all lock-free, and reads nothing of the shim's other state but the calling
//! thread's slot (`stats::slot`):
//! - the rings: each thread's last [`RING`] launches (the kernel's stub or `hipFunction_t`,
//!   the caller's return address, the launch function, the launching thread), in a ring of
//!   the thread's own, indexed by its stats slot (claimed once per thread, on its first
//!   hooked call or launch, and given back at its exit; a later thread goes on in the same
//!   ring). A launch costs a plain load and store of the ring's own count and six stores,
//!   on cache lines no other thread writes: no lock, no heap, no system call, no shared
//!   written line. Threads beyond `stats::SLOTS` share a few rings with an atomic add;
//!   [`total`] says how many launches there were in all;
//! - the order across threads is approximate. Within a thread the order is exact (the
//!   ring's own count); across threads no clock is read per launch (`rdtsc` costs more
//!   than the whole record on the machines measured, a shared counter is the contended
//!   line this design removes), so [`last`] takes each thread's newest, then each thread's
//!   second newest, and so on, live threads first;
//! - the stubs' names: `__hipRegisterFunction` gives each kernel's host stub with its device
//!   name when a fat binary loads, kept in the order registered ([`STUBS`] registrations;
//!   past that a stub's name is not kept, and the fault report says "name not recorded"),
//!   looked up at fault time only, newest first. The name is kept as the pointer the fat
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

use crate::seqlock;

use crate::stats::{SHARED, SLOTS};

/// Launches kept per thread.
pub(crate) const RING: usize = 64;
/// Registrations (host stubs with their names) kept.
pub(crate) const STUBS: usize = 1 << 18;
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
    /// 0: never written; odd: being written; else (the ring's launch number + 1) * 2.
    seq: AtomicU64,
    kernel: AtomicUsize,
    caller: AtomicUsize,
    thread: AtomicUsize,
    /// The `Observed` index, with 0x80 set for a `hipFunction_t`, 0x40 for a graph.
    via: AtomicU8,
}

/// One slot's launches, on cache lines of its own.
#[repr(align(128))]
struct Ring {
    /// Launches recorded in this ring (written by its owner only, unless shared).
    head: AtomicU64,
    entries: [Entry; RING],
}

static RINGS: [Ring; SLOTS + SHARED] = [const {
    Ring {
        head: AtomicU64::new(0),
        entries: [const {
            Entry {
                seq: AtomicU64::new(0),
                kernel: AtomicUsize::new(0),
                caller: AtomicUsize::new(0),
                thread: AtomicUsize::new(0),
                via: AtomicU8::new(0),
            }
        }; RING],
    }
}; SLOTS + SHARED];

const FUNCTION_BIT: u8 = 0x80;
const GRAPH_BIT: u8 = 0x40;
const _: () = assert!(Observed::COUNT < GRAPH_BIT as usize);

/// The calling thread's `pthread_t`: its thread pointer (`front::thread_pointer`), one load
/// where a call to `pthread_self` took four instructions more.
#[inline(always)]
fn thread_id() -> usize {
    crate::front::thread_pointer()
}

/// Records one launch: the hot path.
#[inline(always)]
pub(crate) fn record(via: Observed, kernel: Kernel, caller: usize) {
    let slot = crate::thread::with(crate::stats::slot);
    let Some(ring) = RINGS.get(slot) else {
        return;
    };
    let n = crate::stats::take(&ring.head, slot);
    let e = &ring.entries[(n % RING as u64) as usize];
    let (k, bit) = match kernel {
        Kernel::Stub(s) => (s, 0),
        Kernel::Function(f) => (f, FUNCTION_BIT),
        Kernel::Graph(g) => (g, GRAPH_BIT),
    };
    seqlock::write(&e.seq, n, || {
        e.kernel.store(k, Ordering::Relaxed);
        e.caller.store(caller, Ordering::Relaxed);
        e.thread.store(thread_id(), Ordering::Relaxed);
        e.via.store(via.index() as u8 | bit, Ordering::Relaxed);
    });
}

/// Launches recorded since the process started.
pub(crate) fn total() -> u64 {
    RINGS
        .iter()
        .map(|r| r.head.load(Ordering::Relaxed))
        .fold(0, u64::wrapping_add)
}

/// One launch as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    pub(crate) kernel: Kernel,
    pub(crate) caller: usize,
    pub(crate) thread: usize,
    pub(crate) via: Observed,
}

/// The `back`-th newest launch of `ring` (0: its newest), if it is whole and still there.
fn read(ring: &Ring, head: u64, back: u64) -> Option<Launch> {
    let k = head.checked_sub(back + 1)?;
    let e = &ring.entries[(k % RING as u64) as usize];
    let (kernel, caller, thread, via) = seqlock::read(&e.seq, k, || {
        (
            e.kernel.load(Ordering::Relaxed),
            e.caller.load(Ordering::Relaxed),
            e.thread.load(Ordering::Relaxed),
            e.via.load(Ordering::Relaxed),
        )
    })?;
    let &(o, _) =
        rmcp_core::registry::OBSERVED.get(usize::from(via & !(FUNCTION_BIT | GRAPH_BIT)))?;
    Some(Launch {
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
    })
}

/// The last `n` launches, newest first within each thread; across threads, each thread's
/// newest, then each one's second newest, and so on, the rings of live threads first (the
/// order across threads is not recorded: see the module's header). One being written as it
/// is read is left out.
pub(crate) fn last(n: usize) -> Vec<Launch> {
    let mut rings: Vec<(usize, u64)> = RINGS
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.head.load(Ordering::Acquire)))
        .filter(|(_, h)| *h != 0)
        .collect();
    // Live threads' rings first; a stable sort keeps the slots' order within each.
    rings.sort_by_key(|(i, _)| !crate::stats::live(*i));
    let mut out = Vec::new();
    for back in 0..(RING as u64) {
        for &(i, head) in &rings {
            if out.len() >= n {
                return out;
            }
            if let Some(l) = read(&RINGS[i], head, back) {
                out.push(l);
            }
        }
    }
    out
}

// ---- names ---------------------------------------------------------------------------------

struct StubName {
    /// 0 until the entry is whole.
    stub: AtomicUsize,
    name: AtomicUsize,
}

/// Every registration in the order made, to [`STUBS`]: appended, never probed, so that a
/// registration writes the next 16 bytes after the last (one cache line per four, one new
/// page per 256) and a fat binary's tens of thousands cost little more than the call.
static STUB_NAMES: [StubName; STUBS] = [const {
    StubName {
        stub: AtomicUsize::new(0),
        name: AtomicUsize::new(0),
    }
}; STUBS];
/// Registrations made (past [`STUBS`], not kept).
static STUBS_NAMED: AtomicUsize = AtomicUsize::new(0);

const PROBES: usize = 32;

fn hash(key: usize) -> usize {
    (key as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_right(29) as usize
}

/// `__hipRegisterFunction(modules, stub, device_function, name, ...)`: keeps `name` for
/// `stub`, past any earlier name (a library loaded again at the same address). Past
/// [`STUBS`] registrations in the process, not kept.
#[inline(always)]
pub(crate) fn name_stub(stub: usize, name: usize) {
    if stub == 0 || name == 0 {
        return;
    }
    let i = STUBS_NAMED.fetch_add(1, Ordering::Relaxed);
    if let Some(e) = STUB_NAMES.get(i) {
        e.name.store(name, Ordering::Relaxed);
        e.stub.store(stub, Ordering::Release);
    }
}

/// The name last registered for `stub`: the newest entry first. At fault time only (a scan
/// of at most [`STUBS`] entries).
fn stub_name_pointer(stub: usize) -> Option<usize> {
    let made = STUBS_NAMED.load(Ordering::Acquire).min(STUBS);
    STUB_NAMES[..made]
        .iter()
        .rev()
        .find(|e| e.stub.load(Ordering::Acquire) == stub)
        .map(|e| e.name.load(Ordering::Relaxed))
        .filter(|n| *n != 0)
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

/// Where the kernel named `name` came from: the library whose fat binary registered a stub
/// of that name (the newest such registration whose name can still be read), else "a module"
/// when `hipModuleGetFunction` made a function of that name. At fault time only (a scan of
/// the registrations, each name read through `process_vm_readv`, so an unloaded library's
/// is not a fault).
pub(crate) fn origin_of(name: &str) -> Option<String> {
    let want = name.as_bytes();
    let made = STUBS_NAMED.load(Ordering::Acquire).min(STUBS);
    let mut buf = vec![0u8; want.len() + 1];
    for e in STUB_NAMES[..made].iter().rev() {
        let (stub, p) = (
            e.stub.load(Ordering::Acquire),
            e.name.load(Ordering::Relaxed),
        );
        if stub == 0 || p == 0 || !crate::own_memory::read(p, &mut buf) {
            continue;
        }
        if buf[..want.len()] == *want && buf[want.len()] == 0 {
            if let Some((_, path)) = rmcp_sys::locate::object_of(stub) {
                return Some(if path.is_empty() {
                    "the program".into()
                } else {
                    path
                });
            }
        }
    }
    let cut = &want[..want.len().min(NAME_MAX)];
    let named_by_module = FUNCTION_NAMES.iter().any(|e| {
        let f = e.function.load(Ordering::Acquire);
        f != 0
            && e.len.load(Ordering::Relaxed) == cut.len()
            && function_name(f).is_some_and(|n| n.as_bytes() == cut)
    });
    named_by_module.then(|| "a module (hipModuleLoad*)".to_string())
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

    /// The tests that launch run one at a time (each counts the launches it made, and claims
    /// slots).
    use crate::stats::tests::SLOT_TESTS as LAUNCH_TESTS;

    fn mine(all: Vec<Launch>) -> Vec<Launch> {
        all.into_iter()
            .filter(|l| l.thread == thread_id())
            .collect()
    }

    #[test]
    fn the_ring_keeps_the_newest_first_and_wraps() {
        let _one_at_a_time = LAUNCH_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let before = total();
        for i in 0..(RING + 10) {
            record(
                Observed::HipLaunchKernel,
                Kernel::Stub(0x1000 + i),
                0x2000 + i,
            );
        }
        assert_eq!(total() - before, (RING + 10) as u64);
        let last = mine(last(usize::MAX));
        assert_eq!(last.len(), RING, "the ring keeps {RING} of this thread's");
        assert_eq!(last[0].kernel, Kernel::Stub(0x1000 + RING + 9));
        assert_eq!(last[2].caller, 0x2000 + RING + 7);
        assert_eq!(last[RING - 1].kernel, Kernel::Stub(0x1000 + 10));
        assert_eq!(last[0].via, Observed::HipLaunchKernel);
    }

    #[test]
    fn threads_record_in_rings_of_their_own_and_all_appear() {
        let _one_at_a_time = LAUNCH_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let before = total();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = (0..2usize)
            .map(|t| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..1000usize {
                        record(
                            Observed::HipModuleLaunchKernel,
                            Kernel::Function(0x10_0000 * (t + 1) + i),
                            0x99,
                        );
                    }
                    let slot = crate::thread::with(crate::stats::slot);
                    // Both alive at once: each holds its own slot, so its own ring.
                    barrier.wait();
                    (thread_id(), slot)
                })
            })
            .collect();
        let ids: Vec<(usize, usize)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_ne!(ids[0].1, ids[1].1, "two live threads share a ring");
        assert_eq!(total() - before, 2000);
        let last = last(4);
        // Each thread's newest first, then each one's second newest.
        let of = |id: usize| -> Vec<Kernel> {
            last.iter()
                .filter(|l| l.thread == id)
                .map(|l| l.kernel)
                .collect()
        };
        for (t, (id, _)) in ids.iter().enumerate() {
            let base = 0x10_0000 * (t + 1);
            assert_eq!(
                of(*id),
                vec![Kernel::Function(base + 999), Kernel::Function(base + 998)],
                "thread {t} in {last:?}"
            );
        }
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
