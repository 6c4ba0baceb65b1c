//! The body's side of the two objects: what librmcp_shim.so (the preloaded front,
//! `front/front.c`) hands this library when it maps it on the first hooked call, and the
//! one function this library exports, `rmcp_shim_attach`.
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
//! Layouts: `Front` and `Body` are `struct rmcp_front` and `struct rmcp_body` of front.c;
//! the ABI number both are built with comes from build.rs, and the sizes are checked at
//! attach. Until attached (unit tests), every accessor answers as a library loaded on its
//! own would.

use std::ffi::{c_char, c_int, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicPtr, Ordering};

use rmcp_core::registry::{HOOKS, Hook};

pub(crate) type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type LookupFn = extern "C" fn(*mut c_void, *const c_char, usize) -> *mut c_void;
type StatsFn = extern "C" fn(*mut c_char, usize) -> usize;

/// The ABI number front.c was built with (build.rs writes one number for both).
const ABI: u32 = include!(concat!(env!("OUT_DIR"), "/front_abi.rs"));

/// `struct rmcp_front`.
#[repr(C)]
pub(crate) struct Front {
    abi: u32,
    size: u32,
    hooks: u32,
    /// 1: descriptor 2 was open at load (dev, ino below); 2: it was closed.
    pub(crate) stderr_state: u32,
    pub(crate) stderr_dev: u64,
    pub(crate) stderr_ino: u64,
    glibc_dlsym: DlsymFn,
    next_dlsym: DlsymFn,
    next: unsafe extern "C" fn(*const c_char) -> *mut c_void,
    dlsym_export: *const c_void,
    thread_offset: isize,
    exports: [*const c_void; Hook::COUNT],
}

/// `struct rmcp_body`.
#[repr(C)]
pub(crate) struct Body {
    abi: u32,
    size: u32,
    hooks: u32,
    reserved: u32,
    lookup: LookupFn,
    stats: StatsFn,
    entries: [*const c_void; Hook::COUNT],
}

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

/// Called by the front, once per thread that finds the body unattached (so possibly more
/// than once, concurrently): checks the layout, keeps the front and fills `body` with this
/// library's entry points. 0 on success. Never panics or unwinds; allocates nothing.
///
/// # Safety
/// `front` points to the front's static `struct rmcp_front`, filled; `body` to writable
/// memory of `struct rmcp_body`'s size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcp_shim_attach(front: *const Front, body: *mut Body) -> c_int {
    catch_unwind(|| {
        // SAFETY: the caller's contract.
        let Some(f) = (unsafe { front.as_ref() }) else {
            return 1;
        };
        if f.abi != ABI || f.size as usize != size_of::<Front>() || f.hooks as usize != Hook::COUNT
        {
            return 1;
        }
        if body.is_null() {
            return 1;
        }
        FRONT.store(front.cast_mut(), Ordering::Release);
        let out = Body {
            abi: ABI,
            size: size_of::<Body>() as u32,
            hooks: Hook::COUNT as u32,
            reserved: 0,
            lookup: crate::dlsym::lookup,
            stats: crate::exports::stats,
            entries: HOOKS.map(|(hook, _)| crate::exports::entry(hook)),
        };
        // SAFETY: the caller's contract: `body` is writable and sized for a Body.
        unsafe { body.write(out) };
        0
    })
    .unwrap_or(1)
}

/// The front's export for `hook`: what a caller is handed in place of a runtime's function.
/// Without a front (unit tests), this library's own entry.
pub(crate) fn export(hook: Hook) -> usize {
    get().map_or_else(
        || crate::exports::entry(hook) as usize,
        |f| f.exports[hook.index()] as usize,
    )
}

/// glibc's dlsym, for the shim's own lookups on handles.
pub(crate) fn glibc_dlsym() -> DlsymFn {
    match get() {
        Some(f) => f.glibc_dlsym,
        None => libc::dlsym,
    }
}

/// The dlsym after the shim (another wrapper's, or glibc's): what a lookup reaches
/// without the shim.
pub(crate) fn next_dlsym() -> DlsymFn {
    match get() {
        Some(f) => f.next_dlsym,
        None => libc::dlsym,
    }
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
    let tp: usize;
    // SAFETY: on x86-64 Linux the word at fs:0 is the thread pointer itself (the TCB's
    // self-pointer); reading it has no other effect.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    Some(tp.wrapping_add_signed(f.thread_offset) as *mut u64)
}

/// A pointer inside the front, for "is this handle the shim's own" (dladdr on it).
pub(crate) fn own_object_address() -> Option<usize> {
    get().map(|f| f.dlsym_export as usize)
}

/// What descriptor 2 was when the front was loaded: Some(Some((dev, ino))) when open,
/// Some(None) when closed, None without a front.
pub(crate) fn stderr_at_load() -> Option<Option<(u64, u64)>> {
    let f = get()?;
    match f.stderr_state {
        1 => Some(Some((f.stderr_dev, f.stderr_ino))),
        2 => Some(None),
        _ => None,
    }
}
