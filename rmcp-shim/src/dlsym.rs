//! The interposed `dlsym`: callers that look HIP up by name instead of binding it through
//! the PLT. XLA, TensorFlow and JAX dlopen libamdhip64 and call every function through
//! `dlsym(handle, name)`; Triton asks `dlsym(handle, "hipGetProcAddress")` and then
//! hipGetProcAddress for the rest. LD_PRELOAD alone does not reach them, because a lookup
//! on a handle searches only that library and its dependencies.
//!
//! The rule: a lookup answers what it answered without the shim, except that a hooked
//! runtime function comes back as the shim's.
//! - `RTLD_NEXT` lookups, and lookups of any name that is not hooked, leave the export
//!   (`exports.rs`) by a jump to the next `dlsym` with the stack untouched, so the next
//!   wrapper, glibc and audit modules see the original caller.
//! - For a hooked name, [`lookup`] works out the answer without the shim: on a handle, the
//!   next dlsym's answer, unless that is the shim's own export (the main program's handle
//!   searches the global scope, where the shim is); for `RTLD_DEFAULT`, the global scope
//!   after the shim, then the caller's own dependency tree. NULL stays NULL and another
//!   library's function stays that function, so presence probes answer as before. Only when
//!   the answer is a HIP runtime's function in the base link-map namespace, and the mode
//!   allows it, does the caller get the shim's function instead; the runtime's function is
//!   recorded as that caller's binding (`binding::record`), so calls through the shim's
//!   function reach it.
//! - A lookup never loads, maps or initialises a runtime, and in a process without HIP it
//!   reads no configuration and prints nothing.
//!
//! The next dlsym is found the way another wrapper would find it: glibc's
//! `dlsym(RTLD_NEXT, "dlsym")` from this library, so a dlsym wrapper preloaded after the
//! shim sees every lookup. glibc's own dlsym (found by version with `dlvsym`, which the
//! shim does not export) serves the shim's own lookups. RMCP_HOOK_DLSYM=0 turns the
//! substitution off; the export stays, and then only forwards. docs/design.md says why this
//! design was chosen over an rtld-audit module or ROCm's dispatch-table tool interface.

use std::ffi::{CStr, c_char, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp_core::policy;
use rmcp_core::registry::Hook;

use crate::{binding, state, thread};

pub(crate) type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The next dlsym after this library (a wrapper, or glibc's), once found. The export in
/// `exports.rs` jumps to it.
pub(crate) static NEXT_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// glibc's dlsym, once found: the shim's own lookups.
static GLIBC_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc's dlsym. glibc 2.34 moved it into libc (version GLIBC_2.34); older glibc has it in
/// libdl at GLIBC_2.2.5.
fn find_glibc_dlsym() -> usize {
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: dlvsym only reads the two NUL-terminated strings; RTLD_NEXT from this
        // library finds a definition after it, never this library's own export.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            return p as usize;
        }
    }
    // No glibc dlsym (not a glibc system): answer every lookup with "not found" rather
    // than jump to nowhere.
    not_found as *const () as usize
}

extern "C" fn not_found(_: *mut c_void, _: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

/// glibc's dlsym, for the shim's own lookups. `RTLD_NEXT` through it means "after this
/// library": glibc names the caller by the return address, which is in this library.
pub(crate) fn glibc() -> DlsymFn {
    let mut p = GLIBC_DLSYM.load(Ordering::Acquire);
    if p == 0 {
        p = find_glibc_dlsym();
        GLIBC_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: `p` is glibc's dlsym (or `not_found`), whose C signature is DlsymFn.
    unsafe { std::mem::transmute::<usize, DlsymFn>(p) }
}

/// Finds the next dlsym (called by the export on the process's first lookup, with the
/// caller's arguments saved around it). Returns its address.
pub(crate) extern "C" fn find_next_dlsym() -> usize {
    let known = NEXT_DLSYM.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    let glibc = glibc();
    // SAFETY: RTLD_NEXT lookup of a NUL-terminated name, from this library.
    let next = unsafe { glibc(libc::RTLD_NEXT, c"dlsym".as_ptr()) } as usize;
    let next = if next == 0 {
        glibc as *const () as usize
    } else {
        next
    };
    NEXT_DLSYM.store(next, Ordering::Release);
    next
}

fn next() -> DlsymFn {
    let p = find_next_dlsym();
    // SAFETY: `p` is a dlsym (the next definition, or glibc's), whose C signature is DlsymFn.
    unsafe { std::mem::transmute::<usize, DlsymFn>(p) }
}

/// Asked by the export before anything else, with the caller's arguments saved around the
/// call: is this a lookup the shim must look at (a hooked name, on a handle or
/// RTLD_DEFAULT)? 0 sends it on to the next dlsym untouched. Cannot panic; allocates nothing.
pub(crate) extern "C" fn wants(handle: *mut c_void, symbol: *const c_char) -> usize {
    if symbol.is_null() || handle == libc::RTLD_NEXT {
        return 0;
    }
    // SAFETY: dlsym's contract: a non-null `symbol` is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    usize::from(name.starts_with(b"hip") && Hook::from_name(name).is_some())
}

/// The export's body for a hooked name. `ret` is the caller's return address.
pub(crate) extern "C" fn lookup(
    handle: *mut c_void,
    symbol: *const c_char,
    ret: usize,
) -> *mut c_void {
    // `wants` said the name is a hook.
    // SAFETY: as in `wants`.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let Some(hook) = Hook::from_name(name) else {
        // SAFETY: the caller's own arguments, passed on unchanged.
        return unsafe { next()(handle, symbol) };
    };
    catch_unwind(|| answer(handle, symbol, hook, ret)).unwrap_or_else(|_| {
        // SAFETY: as above.
        unsafe { next()(handle, symbol) }
    })
}

/// What the lookup answers: see the module documentation.
fn answer(handle: *mut c_void, symbol: *const c_char, hook: Hook, ret: usize) -> *mut c_void {
    let found = without_shim(handle, symbol, hook, ret);
    if found.is_null() {
        return found;
    }
    thread::with(|t| {
        // The shim's own lookups (finding the runtime) get the runtime's functions.
        if t.inside() {
            return found;
        }
        let _inside = t.enter();
        if !binding::is_runtime_function(found as usize) {
            return found;
        }
        // HIP is in the process: the configuration may be read now.
        let cfg = state::config();
        if !policy::substitute_dlsym(cfg.mode, cfg.hook_dlsym) {
            return found;
        }
        if !binding::record(ret, hook, found as usize) {
            return found;
        }
        tracing::debug!("dlsym({}): handing back rmcp's function", hook.name());
        crate::exports::own_address(hook) as *mut c_void
    })
}

/// The answer the lookup would get if the shim were not loaded.
fn without_shim(handle: *mut c_void, symbol: *const c_char, hook: Hook, ret: usize) -> *mut c_void {
    let own = crate::exports::own_address(hook) as *mut c_void;
    let glibc = glibc();
    if handle == libc::RTLD_DEFAULT {
        // The first definition in the global scope, as the next dlsym finds it (a wrapper
        // after the shim sees the lookup); if that is the shim's, the next one after it; if
        // none, the caller's own dependency tree.
        // SAFETY: a lookup of the caller's NUL-terminated name.
        let first = unsafe { next()(libc::RTLD_DEFAULT, symbol) };
        if first != own {
            return first;
        }
        // SAFETY: as above; RTLD_NEXT from this library skips it.
        let after = unsafe { glibc(libc::RTLD_NEXT, symbol) };
        if !after.is_null() {
            return after;
        }
        return binding::in_callers_tree(ret, symbol, own as usize);
    }
    // SAFETY: the caller's own arguments, passed on unchanged.
    let found = unsafe { next()(handle, symbol) };
    if found != own || binding::is_own_handle(handle) {
        return found;
    }
    // The handle's search list holds the shim (the main program's does: it is the global
    // scope): what follows the shim there.
    // SAFETY: as above.
    unsafe { glibc(libc::RTLD_NEXT, symbol) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_dlsym_is_found_and_is_not_this_one() {
        let f = glibc();
        let p = f as *const () as usize;
        assert_ne!(
            p, not_found as *const () as usize,
            "glibc's dlsym not found"
        );
        assert_ne!(p, crate::exports::own_dlsym_address());
        // It works: libc's own strlen through it.
        // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
        let strlen = unsafe { f(libc::RTLD_DEFAULT, c"strlen".as_ptr()) };
        assert_eq!(strlen as usize, libc::strlen as *const () as usize);
        // In a test executable nothing else wraps dlsym: the next one is glibc's.
        assert_eq!(find_next_dlsym(), p);
    }

    #[test]
    fn only_hooked_names_on_handles_are_looked_at() {
        let h = 0x1000 as *mut c_void;
        assert_eq!(wants(h, c"hipMalloc".as_ptr()), 1);
        assert_eq!(wants(libc::RTLD_DEFAULT, c"hipHostMalloc".as_ptr()), 1);
        assert_eq!(wants(libc::RTLD_NEXT, c"hipMalloc".as_ptr()), 0);
        assert_eq!(wants(h, c"hipFree".as_ptr()), 0);
        assert_eq!(wants(h, c"cos".as_ptr()), 0);
        assert_eq!(wants(h, std::ptr::null()), 0);
    }
}
