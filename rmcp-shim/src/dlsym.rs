//! The interposed `dlsym`: callers that look HIP up by name instead of binding it through
//! the PLT. XLA, TensorFlow and JAX dlopen libamdhip64 and call every function through
//! `dlsym(handle, name)`; Triton asks `dlsym(handle, "hipGetProcAddress")` and then
//! hipGetProcAddress for the rest. LD_PRELOAD alone does not reach them, because a lookup
//! on a handle searches only that library and its dependencies.
//!
//! The rule: a lookup answers what it answered without the shim, `dlerror()` included
//! (issue 33), except that a hooked runtime function comes back as the shim's.
//! - `RTLD_NEXT` lookups, and lookups of any name that is not hooked, never reach this
//!   library: the front's `dlsym` (`front/front.rs`) sends them on to the next `dlsym` with
//!   the stack untouched, so the next wrapper, glibc and audit modules see the original
//!   caller.
//! - [`lookup`] decides, it does not look up for the caller: when the answer is the one the
//!   next dlsym gives the caller itself (the caller's own lookup does not find the shim's
//!   export, and nothing is substituted), it says so ([`Answer::NEXT`]) and the front sends
//!   the caller on to the next dlsym, which answers pointer and `dlerror()` state exactly as
//!   without the shim. Otherwise it returns the value with the state a lookup without the
//!   shim leaves: none after a success; after a failure, the loader's message for it
//!   (`dlerror::fail_as_loader`, which cannot name the main program: docs/design.md, "Known limits, in full").
//! - `dlvsym` ([`vlookup`]): a versioned lookup never matches the front's unversioned
//!   exports, so the caller's own lookup always answers as without the shim; the shim's
//!   function replaces the answer only when it is a runtime's hooked function, found at the
//!   version asked for.
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
//! shim sees every lookup. glibc's own dlsym (found by version with glibc's own `dlvsym`)
//! serves the shim's own lookups, whose `dlerror()` messages never reach the caller. RMCP_HOOK_DLSYM=0 turns the
//! substitution off; the export stays, and then only forwards. docs/design.md says why this
//! design was chosen over an rtld-audit module or ROCm's dispatch-table tool interface.

use std::ffi::{CStr, c_char, c_void};
use std::panic::catch_unwind;

use rmcp_core::policy;
use rmcp_core::registry::Hook;

use crate::front::abi::Answer;
use crate::front::{self, next_dlsym as next};
use crate::{binding, handout, state, thread};

/// The front's `dlsym` asks here for a hooked or observed name, with the caller's return
/// address as `ret`: go on to the next dlsym ([`Answer::NEXT`]), or this value.
pub(crate) extern "C" fn lookup(handle: *mut c_void, symbol: *const c_char, ret: usize) -> Answer {
    // SAFETY: dlsym's contract: `symbol` is a NUL-terminated string (the front checked it
    // is not null and names a hook).
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let Some(hook) = Hook::from_name(name) else {
        if let Some(o) = rmcp_core::registry::Observed::from_name(name) {
            // An observed function: the answer without the shim, or an entry that records
            // the call and reaches exactly that function (`handout::for_observed_lookup`).
            let own = front::observed_export(o);
            return catch_unwind(|| {
                let (found, sees_own) = without_shim(handle, symbol, own, ret);
                let value = handout::for_observed_lookup(o, symbol, found, ret);
                settle(handle, symbol, ret, found, sees_own, value)
            })
            .unwrap_or(Answer::NEXT);
        }
        return Answer::NEXT;
    };
    // The substitution is the shim's own work: no cancellation point acts inside it.
    let _no_cancel = crate::cancel::NoCancel::new();
    catch_unwind(|| {
        let (found, sees_own) = without_shim(handle, symbol, front::export(hook), ret);
        let value = substituted(symbol, hook, ret, found);
        settle(handle, symbol, ret, found, sees_own, value)
    })
    .unwrap_or(Answer::NEXT)
}

/// The front's `dlvsym` asks here for a hooked name: the rewrite is handed only when the
/// versioned lookup finds a runtime's function; every other answer is the next dlvsym's,
/// made by the caller itself (a versioned lookup never matches the front's unversioned
/// exports, so the caller's own lookup answers as without the shim).
pub(crate) extern "C" fn vlookup(
    handle: *mut c_void,
    symbol: *const c_char,
    version: *const c_char,
    ret: usize,
) -> Answer {
    // SAFETY: dlvsym's contract: NUL-terminated strings (the front checked both non-null).
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let Some(hook) = Hook::from_name(name) else {
        return Answer::NEXT;
    };
    let Some(nextv) = front::next_dlvsym() else {
        return Answer::NEXT;
    };
    let _no_cancel = crate::cancel::NoCancel::new();
    catch_unwind(|| {
        // SAFETY: the caller's own arguments. On a handle the answer does not depend on
        // who asks; on RTLD_DEFAULT the global scope is searched first for every caller.
        let found = unsafe { nextv(handle, symbol, version) };
        let value = substituted(symbol, hook, ret, found);
        if value == found {
            return Answer::NEXT;
        }
        crate::dlerror::clear();
        Answer::value(value)
    })
    .unwrap_or(Answer::NEXT)
}

/// What the caller gets for `found`, the answer without the shim: the shim's function in
/// place of a runtime's (see the module documentation), else `found`.
fn substituted(symbol: *const c_char, hook: Hook, ret: usize, found: *mut c_void) -> *mut c_void {
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

/// The answer for `value`, given `found` (the answer without the shim) and whether the
/// caller's own lookup would find the shim's export (`sees_own`). When the next dlsym,
/// asked by the caller itself, gives `value`, the caller asks it: pointer and `dlerror()`
/// state are then the loader's own. Otherwise the value is returned with the `dlerror()`
/// state made what the lookup without the shim leaves: none after a success; after a
/// failure, the loader's message for it (`dlerror::fail_as_loader`).
fn settle(
    handle: *mut c_void,
    symbol: *const c_char,
    ret: usize,
    found: *mut c_void,
    sees_own: bool,
    value: *mut c_void,
) -> Answer {
    if value == found && !sees_own {
        return Answer::NEXT;
    }
    if value.is_null() {
        if !crate::dlerror::fail_as_loader(handle, symbol, ret) {
            return Answer::NEXT;
        }
    } else {
        crate::dlerror::clear();
    }
    Answer::value(value)
}

/// The answer the lookup would get if the shim were not loaded (`own`: the shim's export of
/// the name), and whether the caller's own lookup would find the shim's export.
fn without_shim(
    handle: *mut c_void,
    symbol: *const c_char,
    own: usize,
    ret: usize,
) -> (*mut c_void, bool) {
    let own = own as *mut c_void;
    if handle == libc::RTLD_DEFAULT {
        // The first definition in the global scope, as the next dlsym finds it (a wrapper
        // after the shim sees the lookup); if that is the shim's, the next one after it; if
        // none, the caller's own dependency tree.
        // SAFETY: a lookup of the caller's NUL-terminated name.
        let first = unsafe { next()(libc::RTLD_DEFAULT, symbol) };
        if first != own {
            return (first, false);
        }
        let after = front::next(symbol);
        if !after.is_null() {
            return (after, true);
        }
        return (binding::in_callers_tree(ret, symbol, own as usize), true);
    }
    // SAFETY: the caller's own arguments, passed on unchanged.
    let found = unsafe { next()(handle, symbol) };
    if found != own || binding::is_own_handle(handle) {
        return (found, false);
    }
    // The handle's search list holds the shim (the main program's does: it is the global
    // scope): what follows the shim there.
    (front::next(symbol), true)
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
