//! Fork: a child never maps the body for the first time (issue 22, shape 4); and the
//! loader's count of unloaded objects, for the front's `dlclose`.
//!
//! A child of a multi-threaded parent inherits the loader's lock as it was at the fork: held,
//! if another thread was inside dlopen or dlclose, by a thread the child does not have.
//! glibc does not reset it, so a child whose first hooked call maps the body waits forever.
//! The front therefore registers one fork handler at load (`__register_atfork`: no system
//! call, no allocation for the first handlers) whose prepare step, run in the parent before
//! every fork, maps the body when a HIP runtime is mapped and the body is not. In a process
//! without HIP it walks the list of loaded objects once per fork and does nothing else.
//!
//! Mapped is not enough: the child's first hooked call also asks the loader who its caller
//! is and what that caller binds, and `dlopen(RTLD_NOLOAD)` asserts ("Inconsistency detected
//! by ld.so") in a child whose parent forked mid-dlopen. The child step reads the loader's
//! debug state (`_r_debug.r_state`, found in the parent) and tells the body
//! (`abi::Front::loader_inconsistent`), which then resolves without dlopen.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sys::{self, DlPhdrInfo};
use crate::{FRONT, body, installs};

/// Called by the front's initialiser.
pub fn register() {
    // SAFETY: `prepare` lives as long as the front (which is never unmapped: -z nodelete);
    // the handle names the front, as glibc expects of the registering object.
    unsafe { sys::register_atfork(Some(prepare), None, Some(child), (&raw const FRONT).cast()) };
}

/// `_r_debug` (link.h), found in the parent once the body is attached; 0 before.
static R_DEBUG: AtomicUsize = AtomicUsize::new(0);
/// `r_state`'s offset in `struct r_debug`: after `int r_version`, `r_map` and `r_brk`.
const R_STATE_OFFSET: usize = 24;

extern "C" fn prepare() {
    if !body::settled() && !installs::standing_aside() && runtime_mapped() {
        body::attach();
    }
    if let Some(step) = body::before_fork() {
        step();
    }
    if body::attached() && R_DEBUG.load(Ordering::Relaxed) == 0 {
        // SAFETY: RTLD_DEFAULT and a NUL-terminated name.
        let p = unsafe { crate::glibc_dlsym()(sys::RTLD_DEFAULT, c"_r_debug".as_ptr()) };
        R_DEBUG.store(p as usize, Ordering::Relaxed);
    }
}

/// Set in every fork child (the child step).
static IN_CHILD: AtomicU32 = AtomicU32::new(0);

/// Whether this process is a fork child (of a process that had the front loaded).
pub fn in_child() -> bool {
    IN_CHILD.load(Ordering::Acquire) != 0
}

extern "C" fn child() {
    IN_CHILD.store(1, Ordering::Release);
    let r = R_DEBUG.load(Ordering::Relaxed);
    if r == 0 {
        return;
    }
    // SAFETY: `r` is the loader's `_r_debug`, mapped for the life of the process; its
    // `r_state` is an int at this offset on x86-64 (0: RT_CONSISTENT).
    let state = unsafe { core::ptr::read_volatile((r + R_STATE_OFFSET) as *const c_int) };
    FRONT
        .loader_inconsistent
        .store(u32::from(state != 0), Ordering::Release);
}

/// Whether an object whose name contains "libamdhip64" is loaded.
pub fn runtime_mapped() -> bool {
    let mut found = false;
    // SAFETY: `visit` only reads each entry and writes the bool behind `data`, which lives
    // across the call.
    unsafe { sys::dl_iterate_phdr(visit, (&raw mut found).cast()) };
    found
}

extern "C" fn visit(info: *const DlPhdrInfo, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: the loader hands a valid entry whose name is NUL-terminated (or null).
    let name = unsafe { info.as_ref().map_or(&[][..], |i| sys::c_bytes(i.dlpi_name)) };
    let hit = name
        .windows(b"libamdhip64".len())
        .any(|w| w == b"libamdhip64");
    if hit {
        // SAFETY: `data` is `runtime_mapped`'s bool.
        unsafe { *data.cast::<bool>() = true };
    }
    c_int::from(hit)
}

/// How many objects the loader has unloaded in this process (`dlpi_subs` of
/// `dl_iterate_phdr`, glibc 2.4 and later): the front's `dlclose` tells from it whether a
/// call unmapped anything. `u64::MAX` when the loader does not say.
pub fn unloads() -> u64 {
    let subs = AtomicU64::new(u64::MAX);
    // SAFETY: `read_subs` only reads the first entry and stores into `subs`, which lives
    // across the call.
    unsafe { sys::dl_iterate_phdr(read_subs, (&raw const subs).cast_mut().cast()) };
    subs.load(Ordering::Relaxed)
}

/// Where `dlpi_subs` is in `struct dl_phdr_info` (link.h, x86-64): after the address, the
/// name, the headers, `dlpi_phnum` (padded to 8) and `dlpi_adds`.
const SUBS_OFFSET: usize = 40;

extern "C" fn read_subs(info: *const DlPhdrInfo, size: usize, data: *mut c_void) -> c_int {
    if size >= SUBS_OFFSET + 8 && !info.is_null() {
        // SAFETY: the loader's entry is `size` bytes long, which covers the field.
        let subs =
            unsafe { core::ptr::read_unaligned((info as usize + SUBS_OFFSET) as *const u64) };
        // SAFETY: `data` is `unloads`'s atomic.
        unsafe { (*data.cast::<AtomicU64>()).store(subs, Ordering::Relaxed) };
    }
    1
}
