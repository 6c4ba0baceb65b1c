//! What the shim hands a caller in place of a runtime's own function (`dlsym` on a
//! runtime's handle, `hipGetProcAddress`, `hipGetDriverEntryPoint`), and where calls go
//! that no calling object places. Issue 22: the destination travels in the pointer, so a
//! call through it reaches the function the lookup found, whoever makes the call (JIT code
//! in an anonymous mapping, another object, another thread).
//!
//! - A function the global scope binds after the shim (the copy the program linked, or one
//!   dlopened RTLD_GLOBAL first) comes back as the front's export. Every calling object
//!   that binds by the loader's order reaches it through that export, a caller no object
//!   holds reaches it too ([`unplaced`]), and the pointer compares equal to the program's
//!   own reference to the name, as it did without the shim.
//! - Any other runtime copy's function comes back as that copy's entry in `exports`
//!   (`copy_entry`): one of [`COPY_ENTRIES`] slots, claimed here by the first lookup that
//!   finds the copy and kept for the life of the process. Calls through it are decided and
//!   rewritten with that copy's functions, version and devices ([`for_slot`]).
//! - Past the slots, or when the copy's own function is not what the lookup found, the
//!   runtime's own function comes back, unrewritten, and one line says so.
//! - An observed function (a launch, a graph call: `observed`) follows the same two rules
//!   ([`substitute_observed`]): the front's export, else the copy's per-copy observed entry
//!   in the same slot, so that launches through a pointer from `dlsym` on an RTLD_LOCAL
//!   handle or from `hipGetProcAddress` are recorded.
//!
//! A caller no rule places (code outside every object calling the front's export) reaches
//! what the loader would have bound: the global scope after the shim, else the first
//! runtime copy mapped, else the runtime the shim locates; never 302 while a runtime
//! defines the function.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use rmcp_core::registry::{Hook, Observed};
use rmcp_sys::HipApi;

use crate::binding::Binding;
use crate::copies::{self, Copy};
use crate::entries::{COPY_ENTRIES, copy_entry, observed_copy_entry};
use crate::once::Published;

/// One per-copy entry slot: the copy its entries reach, and the binding calls through them
/// use.
struct Slot {
    /// The copy; null while free. Claimed once, never given back.
    copy: AtomicPtr<Copy>,
    binding: Published<Binding>,
}

static SLOTS: [Slot; COPY_ENTRIES] = [const {
    Slot {
        copy: AtomicPtr::new(std::ptr::null_mut()),
        binding: Published::new(),
    }
}; COPY_ENTRIES];

static WARNED_FULL: AtomicBool = AtomicBool::new(false);

/// The slot whose entries reach `copy`, claimed if new; None when every slot holds another
/// copy.
fn slot_of(copy: &'static Copy) -> Option<usize> {
    let want = copy as *const Copy as *mut Copy;
    SLOTS.iter().position(|s| {
        match s.copy.compare_exchange(
            std::ptr::null_mut(),
            want,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(held) => held == want,
        }
    })
}

/// The binding of calls made through slot `k`'s entries: its copy's own functions, not
/// exempt (the entry names no caller).
pub(crate) fn for_slot(k: usize) -> Option<&'static Binding> {
    let slot = SLOTS.get(k)?;
    let copy = slot.copy.load(Ordering::Acquire);
    // SAFETY: a non-null pointer here came from a `&'static Copy` (`slot_of`): copies are
    // published once and never freed.
    let copy: &'static Copy = unsafe { copy.as_ref() }?;
    Some(
        slot.binding
            .get_or_publish(|| Binding::now(copy.api, Some(copy), false)),
    )
}

/// What a caller is handed for `hook` in place of `got`, a HIP runtime's own function that
/// the lookup found by `name` (see the module documentation); None: `got` itself.
pub(crate) fn substitute(hook: Hook, name: &CStr, got: usize) -> Option<usize> {
    if crate::front::next(name.as_ptr()) as usize == got {
        return Some(crate::front::export(hook));
    }
    let copy = copies::of_function(got)?;
    if copy.api.address_of(hook.name()) != Some(got) {
        return None;
    }
    let Some(k) = slot_of(copy) else {
        if !WARNED_FULL.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "{}: more than {COPY_ENTRIES} HIP runtime copies were looked up by name; \
                 lookups in {} and later copies get the runtime's own functions, whose calls \
                 rmcp does not see or rewrite",
                hook.name(),
                copy.path
            );
        }
        return None;
    };
    copy_entry(hook, k).map(|p| p as usize)
}

/// What a caller is handed for the observed function `o` (a launch, a graph call) in place
/// of `got`, a HIP runtime's own function that a lookup found by `name`: the front's export
/// when the global scope binds `got` after the shim (as a linked caller reaches it), else the
/// copy's own per-copy observed entry, whose calls reach `got` and are recorded, whoever
/// makes them. None: `got` itself (not the copy's own function, a ROCr function, or past
/// the slots). The lookup's other rules (the mode, exemption) are the caller's.
pub(crate) fn substitute_observed(o: Observed, name: &CStr, got: usize) -> Option<usize> {
    if matches!(o, Observed::HsaQueueCreate | Observed::HsaExecutableFreeze) {
        return None;
    }
    if crate::front::next(name.as_ptr()) as usize == got {
        let export = crate::front::observed_export(o);
        return (export != 0).then_some(export);
    }
    let copy = copies::of_function(got)?;
    if copy.api.address_of(o.name()) != Some(got) {
        return None;
    }
    let k = slot_of(copy)?;
    observed_copy_entry(o, k).map(|p| p as usize)
}

/// What `dlsym` answers for the observed function `o` whose answer without the shim is
/// `found` (`ret`: the caller): the front's export when that is the function the global
/// scope binds after the shim (what a caller linked against the runtime reaches through the
/// export); a runtime copy's own function found on a handle (an RTLD_LOCAL runtime), its
/// per-copy observed entry, unless RMCP_HOOK_DLSYM=0 or the caller is exempt. Anything else
/// (NULL, another library's function) is `found` itself.
pub(crate) fn for_observed_lookup(
    o: Observed,
    symbol: *const std::ffi::c_char,
    found: *mut std::ffi::c_void,
    ret: usize,
) -> *mut std::ffi::c_void {
    if found.is_null() || !crate::binding::is_runtime_function(found as usize) {
        return found;
    }
    let own = crate::front::observed_export(o);
    if own != 0 && found == crate::front::next(symbol) {
        return own as *mut std::ffi::c_void;
    }
    let cfg = crate::state::config();
    if !cfg.hook_dlsym
        || (!cfg.exempt.is_empty()
            && crate::binding::for_caller(ret, cfg).is_some_and(|b| b.exempt))
    {
        return found;
    }
    // SAFETY: dlsym's contract: a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) };
    match substitute_observed(o, name, found as usize) {
        Some(mine) => {
            tracing::debug!("dlsym({}): handing back rmcp's recording entry", o.name());
            mine as *mut std::ffi::c_void
        }
        None => found,
    }
}

/// The binding of a call no calling object places (see the module documentation). Built
/// again after a `dlclose` (the front's generation), since what it names may be gone.
#[cold]
pub(crate) fn unplaced() -> Option<&'static Binding> {
    let generation = crate::front::generation();
    let held = UNPLACED.get();
    if let Some(u) = held {
        if u.generation.load(Ordering::Relaxed) == generation {
            return Some(&u.binding);
        }
    }
    let built = Unplaced {
        generation: AtomicU64::new(generation),
        binding: build_unplaced(),
    };
    let now = match held {
        None => UNPLACED.get_or_publish(|| built),
        Some(old) => {
            // Another thread may have replaced it first: theirs is as good.
            UNPLACED.replace(old, built);
            UNPLACED.get()?
        }
    };
    Some(&now.binding)
}

struct Unplaced {
    generation: AtomicU64,
    binding: Binding,
}

static UNPLACED: Published<Unplaced> = Published::new();

fn build_unplaced() -> Binding {
    let _no_cancel = crate::cancel::NoCancel::new();
    let global = HipApi::resolve(|name| crate::front::next(name.as_ptr()));
    let fallback = copies::first_mapped()
        .map(|c| c.api)
        .or_else(|| crate::state::located_runtime().map(|rt| rt.api));
    let api = match fallback {
        Some(f) => HipApi::resolve(|name| {
            let n = name.to_str().unwrap_or("");
            global
                .address_of(n)
                .or_else(|| f.address_of(n))
                .map_or(std::ptr::null_mut(), |a| a as *mut std::ffi::c_void)
        }),
        None => global,
    };
    let copy = api
        .address_of("hipMalloc")
        .or(api.address_of("hipHostMalloc"))
        .and_then(copies::of_function)
        .or_else(copies::first_mapped);
    // The lookups above are the shim's own: none leaves a dlerror() message.
    crate::dlerror::clear();
    Binding::now(api, copy, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_slot_is_claimed_without_a_copy() {
        for k in 0..COPY_ENTRIES + 2 {
            assert!(for_slot(k).is_none());
        }
    }
}
