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
//!
//! A caller no rule places (code outside every object calling the front's export) reaches
//! what the loader would have bound: the global scope after the shim, else the first
//! runtime copy mapped, else the runtime the shim locates; never 302 while a runtime
//! defines the function.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use rmcp_core::registry::Hook;
use rmcp_sys::HipApi;

use crate::binding::Binding;
use crate::copies::{self, Copy};
use crate::entries::{COPY_ENTRIES, copy_entry};
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
