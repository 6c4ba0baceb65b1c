//! The interposed `dlsym`: callers that look HIP up by name instead of binding it through
//! the PLT. XLA, TensorFlow and JAX dlopen libamdhip64 and call every function through
//! `dlsym(handle, name)`; Triton asks `dlsym(handle, "hipGetProcAddress")` and then
//! hipGetProcAddress for the rest. LD_PRELOAD alone does not reach them, because a lookup
//! on a handle searches only that library and its dependencies.
//!
//! The rule: a lookup answers what it answered without the shim, except that a hooked
//! runtime function comes back as the shim's.
//! - `RTLD_NEXT` lookups, and lookups of any name that is not hooked, never reach this
//!   library: the front's `dlsym` (`front/front.rs`) sends them on to the next `dlsym` with
//!   the stack untouched, so the next wrapper, glibc and audit modules see the original
//!   caller.
//! - For a hooked name, [`lookup`] works out the answer without the shim: on a handle, the
//!   next dlsym's answer, unless that is the shim's own export (the main program's handle
//!   searches the global scope, where the shim is); for `RTLD_DEFAULT`, the global scope
//!   after the shim, then the caller's own dependency tree. NULL stays NULL and another
//!   library's function stays that function, so presence probes answer as before. Only when
//!   the answer is a HIP runtime's function in the base link-map namespace, and the mode
//!   allows it, does the caller get the shim's function instead: one whose calls reach the
//!   function found, whoever makes them (`handout`: the front's export when the global
//!   scope binds that function after the shim, else the copy's own entry). An exempt caller
//!   (RMCP_EXEMPT) keeps the runtime's function.
//! - A lookup never loads, maps or initialises a runtime. In a process without HIP it does
//!   not even reach this library: the front answers NULL itself when the answer without the
//!   shim is NULL, and maps this library only when a runtime defines the name.
//!
//! The next dlsym is found the way another wrapper would find it: glibc's
//! `dlsym(RTLD_NEXT, "dlsym")` from the front, so a dlsym wrapper preloaded after the
//! shim sees every lookup. glibc's own dlsym (found by version with `dlvsym`, which the
//! shim does not export) serves the shim's own lookups. RMCP_HOOK_DLSYM=0 turns the
//! substitution off; the export stays, and then only forwards. docs/design.md says why this
//! design was chosen over an rtld-audit module or ROCm's dispatch-table tool interface.

use std::ffi::{CStr, c_char, c_void};
use std::panic::catch_unwind;

use rmcp_core::policy;
use rmcp_core::registry::Hook;

use crate::front::{self, next_dlsym as next};
use crate::{binding, handout, state, thread};

/// The front's `dlsym` goes on here for a hooked name, with the caller's return address
/// as `ret`.
pub(crate) extern "C" fn lookup(
    handle: *mut c_void,
    symbol: *const c_char,
    ret: usize,
) -> *mut c_void {
    // SAFETY: dlsym's contract: `symbol` is a NUL-terminated string (the front checked it
    // is not null and names a hook).
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let Some(hook) = Hook::from_name(name) else {
        if let Some(o) = rmcp_core::registry::Observed::from_name(name) {
            // An observed function: the answer without the shim, or an entry that records
            // the call and reaches exactly that function (`handout::for_observed_lookup`).
            let own = front::observed_export(o);
            return catch_unwind(|| {
                let found = without_shim(handle, symbol, own, ret);
                handout::for_observed_lookup(o, symbol, found, ret)
            })
            .unwrap_or_else(|_| {
                // SAFETY: as below.
                unsafe { next()(handle, symbol) }
            });
        }
        // SAFETY: the caller's own arguments, passed on unchanged.
        return unsafe { next()(handle, symbol) };
    };
    // The substitution is the shim's own work: no cancellation point acts inside it.
    let _no_cancel = crate::cancel::NoCancel::new();
    catch_unwind(|| answer(handle, symbol, hook, ret)).unwrap_or_else(|_| {
        // SAFETY: as above.
        unsafe { next()(handle, symbol) }
    })
}

/// What the lookup answers: see the module documentation.
fn answer(handle: *mut c_void, symbol: *const c_char, hook: Hook, ret: usize) -> *mut c_void {
    let found = without_shim(handle, symbol, front::export(hook), ret);
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
        // An exempt caller keeps the runtime's function.
        if !cfg.exempt.is_empty() && binding::for_caller(ret, cfg).is_some_and(|b| b.exempt) {
            return found;
        }
        // SAFETY: as in `lookup`: a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(symbol) };
        let Some(mine) = handout::substitute(hook, name, found as usize) else {
            return found;
        };
        tracing::debug!("dlsym({}): handing back rmcp's function", hook.name());
        mine as *mut c_void
    })
}

/// The answer the lookup would get if the shim were not loaded (`own`: the shim's export of
/// the name).
fn without_shim(handle: *mut c_void, symbol: *const c_char, own: usize, ret: usize) -> *mut c_void {
    let own = own as *mut c_void;
    if handle == libc::RTLD_DEFAULT {
        // The first definition in the global scope, as the next dlsym finds it (a wrapper
        // after the shim sees the lookup); if that is the shim's, the next one after it; if
        // none, the caller's own dependency tree.
        // SAFETY: a lookup of the caller's NUL-terminated name.
        let first = unsafe { next()(libc::RTLD_DEFAULT, symbol) };
        if first != own {
            return first;
        }
        let after = front::next(symbol);
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
    front::next(symbol)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_front_lookups_are_glibcs() {
        let f = front::glibc_dlsym();
        // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
        let strlen = unsafe { f(libc::RTLD_DEFAULT, c"strlen".as_ptr()) };
        assert_eq!(strlen as usize, libc::strlen as *const () as usize);
        assert_eq!(next() as usize, libc::dlsym as *const () as usize);
    }
}
