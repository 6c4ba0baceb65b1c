//! What librmcp_shim.so (the preloaded front, `front/front.rs`) gives this library when it
//! maps it, read by every other module: the front's exports, its lookups, its generation
//! of loaded objects, its per-thread block, descriptor 2 at start. It imports no module of
//! this crate but `entries` (for unit tests, which have no front); the attach, which hands
//! the front this library's entries, is `attach.rs`.
//!
//! The front is what the process preloaded, so everything that means "the shim's place in
//! the process" is the front's: its exports (what a caller handed the shim's function gets,
//! and what a lookup that finds the shim's own must skip), `dlsym(RTLD_NEXT)` from its
//! place in the search order (this library is mapped RTLD_LOCAL, where RTLD_NEXT would mean
//! nothing useful), the next dlsym after it, and what descriptor 2 was when the process
//! started. It also owns the per-thread state block: initial-exec TLS in the preloaded
//! object, so reaching it never allocates, where this library's own thread-locals would be
//! allocated by `__tls_get_addr` on each thread's first use (and glibc aborts the process
//! when that allocation fails).
//!
//! Layouts: `Front` and `Body` are the front's own types, from the one file both objects
//! compile (`front/abi.rs`); the ABI number, sizes and hook count, checked at attach, catch
//! a front and a body from different builds. Until attached (unit tests), every accessor
//! answers as a library loaded on its own would.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use rmcp_core::registry::{Hook, Observed};

/// The one definition of the two objects' ABI, which the front compiles too.
#[path = "../front/abi.rs"]
pub(crate) mod abi;

pub(crate) use abi::DlsymFn;

/// How many exports the front jumps through its table: the hooks, then the observed ones.
pub(crate) const ENTRIES: usize = Hook::COUNT + Observed::COUNT;
/// The front's `abi::Front`, for this build's hooks.
pub(crate) type Front = abi::Front<ENTRIES>;
/// What this library hands back.
pub(crate) type Body = abi::Body<ENTRIES>;

/// The front, once attached (it lives as long as the process: it is the preloaded object,
/// or one loaded RTLD_GLOBAL, and keeps this library mapped RTLD_NODELETE).
static FRONT: AtomicPtr<Front> = AtomicPtr::new(std::ptr::null_mut());

/// The front this library is attached to.
#[inline(always)]
pub(crate) fn get() -> Option<&'static Front> {
    let p = FRONT.load(Ordering::Acquire);
    // SAFETY: only `rmcp_shim_attach` stores here, a pointer to the front's static struct,
    // which stays mapped and unchanged for the rest of the process.
    unsafe { p.as_ref() }
}

/// Keeps `front` as the front this library is attached to, when it was built from this
/// same definition (`attach.rs` calls this). False when it was not.
pub(crate) fn set(front: &'static Front) -> bool {
    if !front.matches() {
        return false;
    }
    FRONT.store((front as *const Front).cast_mut(), Ordering::Release);
    true
}

/// The front's export for `hook`: what a caller is handed in place of a runtime's function.
/// Without a front (unit tests), this library's own entry; in a build that is not a unit
/// test there is always a front (only the front maps this library), else 0.
pub(crate) fn export(hook: Hook) -> usize {
    match get() {
        Some(f) => f.exports[hook.index()].0 as usize,
        #[cfg(test)]
        None => crate::entries::entry(hook) as usize,
        #[cfg(not(test))]
        None => 0,
    }
}

/// The front's export for an observed entry point; 0 without a front.
pub(crate) fn observed_export(o: Observed) -> usize {
    get().map_or(0, |f| f.exports[Hook::COUNT + o.index()].0 as usize)
}

/// glibc's dlsym, for the shim's own lookups on handles.
pub(crate) fn glibc_dlsym() -> DlsymFn {
    get().and_then(Front::glibc_dlsym).unwrap_or(libc::dlsym)
}

/// The dlsym after the shim (another wrapper's, or glibc's): what a lookup reaches
/// without the shim.
pub(crate) fn next_dlsym() -> DlsymFn {
    get().and_then(Front::next_dlsym).unwrap_or(libc::dlsym)
}

/// The dlvsym after the shim (another wrapper's, or glibc's), once the front found it.
pub(crate) fn next_dlvsym() -> Option<abi::DlvsymFn> {
    get().and_then(Front::next_dlvsym)
}

/// `name`'s next definition after the shim in the global search order (glibc's
/// `dlsym(RTLD_NEXT)` from the front). Without a front, from this library.
pub(crate) fn next(name: *const c_char) -> *mut c_void {
    match get() {
        // SAFETY: `name` is NUL-terminated (the callers' contract); the front's `next` only
        // reads it.
        Some(f) => unsafe { (f.next)(name) },
        // SAFETY: as above.
        None => unsafe { libc::dlsym(libc::RTLD_NEXT, name) },
    }
}

/// The address of this thread's state block (8 bytes, zero in a new thread), or None
/// without a front.
#[inline(always)]
pub(crate) fn thread_block() -> Option<*mut u64> {
    let f = get()?;
    Some(thread_pointer().wrapping_add(f.thread_offset.load(Ordering::Relaxed)) as *mut u64)
}

/// The calling thread's thread pointer: on x86-64 Linux the word at fs:0 is the thread
/// pointer itself (the TCB's self-pointer), which is also glibc's `pthread_self()` (its
/// `struct pthread` begins with the TCB; the unit test below checks it).
#[inline(always)]
pub(crate) fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the TCB's self-pointer; no other effect.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    tp
}

/// The generation of loaded objects: it changes after every `dlclose` that returns (the
/// front's `dlclose`), so anything learnt about an object under an older one may be stale.
/// 0 without a front (unit tests).
#[inline(always)]
pub(crate) fn generation() -> u64 {
    get().map_or(0, Front::generation)
}

/// Whether dlopen must not be called here: a fork child whose parent forked mid-dlopen
/// (the front's fork handler says so). False without a front.
pub(crate) fn loader_inconsistent() -> bool {
    get().is_some_and(Front::loader_inconsistent)
}

/// Runs `f` with a dlsym handle for `object` (`locate::with_handle`), unless dlopen must not
/// be called in this process; None then, as when no handle can be had.
pub(crate) fn with_handle<R>(
    object: &rmcp_sys::locate::LoadedObject,
    f: impl FnOnce(*mut c_void) -> R,
) -> Option<R> {
    if loader_inconsistent() {
        return None;
    }
    rmcp_sys::locate::with_handle_closed_by(object, glibc_dlclose(), f)
}

/// glibc's dlclose, for the shim's own `RTLD_NOLOAD` handles: the front's `dlclose` (which
/// the body's own calls would reach first) moves the generation on, and a reference the
/// shim takes and drops unloads nothing. Found once, as the next definition after this
/// library in its own scope (libc, or libdl before glibc 2.34).
fn glibc_dlclose() -> rmcp_sys::locate::DlcloseFn {
    static CLOSE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut p = CLOSE.load(Ordering::Acquire);
    if p == 0 && get().is_some() {
        // SAFETY: RTLD_NEXT and a NUL-terminated name; glibc's dlsym reads its caller (this
        // library, loaded RTLD_LOCAL) and searches its own scope after it.
        p = unsafe { glibc_dlsym()(libc::RTLD_NEXT, c"dlclose".as_ptr()) } as usize;
        CLOSE.store(p, Ordering::Release);
    }
    if p == 0 {
        return libc::dlclose;
    }
    // SAFETY: `p` is a definition of `dlclose` found by dlsym, with its C signature.
    unsafe { std::mem::transmute::<usize, rmcp_sys::locate::DlcloseFn>(p) }
}

/// A pointer inside the front, for "is this handle the shim's own" (dladdr on it).
pub(crate) fn own_object_address() -> Option<usize> {
    get().map(|f| f.dlsym_export.0 as usize)
}

/// What descriptor 2 was when the front was loaded: Some(Some((dev, ino))) when open,
/// Some(None) when closed, None without a front.
pub(crate) fn stderr_at_load() -> Option<Option<(u64, u64)>> {
    get()?.stderr_at_load()
}

#[cfg(test)]
mod tests {
    #[test]
    fn thread_pointer_is_pthread_self_in_every_thread() {
        let here = || {
            // SAFETY: pthread_self has no preconditions.
            assert_eq!(super::thread_pointer(), unsafe { libc::pthread_self() }
                as usize);
        };
        here();
        std::thread::spawn(here).join().unwrap();
    }
}
