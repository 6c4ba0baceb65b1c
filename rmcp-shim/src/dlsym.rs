//! Callers that look HIP up by name instead of binding it through the PLT: XLA, TensorFlow
//! and JAX dlopen libamdhip64 and call every function through `dlsym(handle, name)`;
//! Triton asks `dlsym(handle, "hipGetProcAddress")` and then hipGetProcAddress for the
//! rest. LD_PRELOAD alone does not reach them, because a lookup on a handle searches only
//! that library and its dependencies.
//!
//! The shim exports `dlsym`. The export is a trampoline (`exports.rs`):
//! - `RTLD_DEFAULT` and `RTLD_NEXT` lookups jump straight to glibc's dlsym with the stack
//!   untouched. glibc identifies the caller by its return address, which is still the
//!   original caller's, so those lookups mean exactly what they meant without the shim.
//! - A lookup on a handle goes to glibc's dlsym, and the answer comes back unchanged, with
//!   one exception. When the name is a hooked HIP function and the answer is the very
//!   function the shim forwards that name to, the caller gets the shim's function instead.
//!   Calls through it then behave as calls through the PLT do. hipGetProcAddress, reached
//!   this way, hands back the shim's functions in turn (`intercept`).
//!
//! glibc's dlsym is found with `dlvsym(RTLD_NEXT, "dlsym", version)`, since the shim
//! exports no dlvsym. The lookup happens on the first `dlsym` call of the process, not in
//! a constructor. RMCP_HOOK_DLSYM=0 turns the substitution off; the trampoline stays, and
//! then only forwards. docs/design.md says why this design was chosen over an rtld-audit
//! module or ROCm's dispatch-table tool interface.

use std::ffi::{CStr, c_char, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::state;
use crate::thread;
use rmcp_core::policy;
use rmcp_core::registry::Hook;

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's dlsym, once found (read by the trampoline in `exports.rs`).
pub(crate) static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// Finds glibc's dlsym. glibc 2.34 moved it into libc (version GLIBC_2.34); older glibc
/// has it in libdl at GLIBC_2.2.5.
pub(crate) extern "C" fn find_real_dlsym() -> usize {
    let known = REAL_DLSYM.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    let mut found = 0;
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: dlvsym only reads the two NUL-terminated strings; RTLD_NEXT from this
        // library finds the definition after it, glibc's, never this library's own export.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            found = p as usize;
            break;
        }
    }
    if found == 0 {
        // No glibc dlsym (not a glibc system): answer every lookup with "not found" rather
        // than jump to nowhere.
        found = not_found as *const () as usize;
    }
    REAL_DLSYM.store(found, Ordering::Release);
    found
}

extern "C" fn not_found(_: *mut c_void, _: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

fn real_dlsym() -> DlsymFn {
    let p = find_real_dlsym();
    // SAFETY: `p` is glibc's dlsym (or `not_found`), whose C signature is DlsymFn.
    unsafe { std::mem::transmute::<usize, DlsymFn>(p) }
}

/// The body of the `dlsym` export (`exports.rs`) for lookups on a handle.
pub(crate) extern "C" fn dlsym_on_handle(
    handle: *mut c_void,
    symbol: *const c_char,
) -> *mut c_void {
    // SAFETY: the caller's own arguments, passed on unchanged.
    let found = unsafe { real_dlsym()(handle, symbol) };
    if found.is_null() || symbol.is_null() {
        return found;
    }
    // SAFETY: glibc just read `symbol` as a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if !name.starts_with(b"hip") {
        return found;
    }
    let Some(hook) = Hook::from_name(name) else {
        return found;
    };
    catch_unwind(|| substitute(hook, found)).unwrap_or(found)
}

/// The shim's function for `hook` if `found` is the function the shim forwards that name
/// to; otherwise `found`.
fn substitute(hook: Hook, found: *mut c_void) -> *mut c_void {
    thread::with(|t| {
        // The shim's own lookups (finding the runtime) must get the runtime's functions.
        if t.inside() {
            return found;
        }
        let _inside = t.enter();
        let cfg = state::config();
        if !policy::substitute_dlsym(cfg.mode, cfg.hook_dlsym) {
            return found;
        }
        let Some(rt) = state::runtime() else {
            return found;
        };
        if rt.api.address_of(hook.name()) != Some(found as usize) {
            // Another copy of the runtime, or another library's function of that name.
            return found;
        }
        tracing::debug!("dlsym({}): handing back rmcp's function", hook.name());
        crate::exports::own_address(hook) as *mut c_void
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_dlsym_is_found_and_is_not_this_one() {
        let p = find_real_dlsym();
        assert_ne!(p, 0);
        assert_ne!(
            p, not_found as *const () as usize,
            "glibc's dlsym not found"
        );
        assert_ne!(p, crate::exports::own_dlsym_address());
        // It works: libc's own strlen through it.
        let f = real_dlsym();
        // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
        let strlen = unsafe { f(libc::RTLD_DEFAULT, c"strlen".as_ptr()) };
        assert_eq!(strlen as usize, libc::strlen as *const () as usize);
    }
}
