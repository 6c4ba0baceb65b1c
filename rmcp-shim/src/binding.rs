//! Where a hooked call goes: the function its calling object would have bound to if the
//! shim were not loaded. Found once per calling object, kept in fixed lock-free tables;
//! nothing here ever waits for another thread.
//!
//! The calling object is the one holding the hook's return address (`dladdr1`). What it
//! would have bound to, per name:
//! 1. the next definition after the shim in the global scope (glibc's `dlsym(RTLD_NEXT)`
//!    from the preloaded front, `front::next`): an interposer preloaded after the shim, or the runtime when it is
//!    in the global scope (linked by the program, or dlopened RTLD_GLOBAL);
//! 2. else the definition in the caller's own dependency tree (`dlsym` on its link map,
//!    which glibc's handles are): the runtime an RTLD_LOCAL dlopen brought in, which is how
//!    every Python extension loads it;
//!
//! So each framework reaches its own runtime copy when two are mapped, an interposer after
//! the shim sees every call, and a caller none of this finds gets the runtime `state`
//! locates (RMCP_HIP_LIBRARY, then the sonames), as before. What `dlsym` and
//! `hipGetProcAddress` hand out carries its own destination (`handout`).
//!
//! Tables: `OBJECTS` maps a link map to its `Binding` (`Published`: two threads resolving
//! the same object both build one, the first published wins); `SITES` maps a return address to its object's slot, so a call site seen
//! before costs one hash probe, no loader call. Objects are never forgotten: a library
//! unloaded with dlclose and another loaded at its address would inherit its binding
//! (docs/design.md).

use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp_core::config::Config;
use rmcp_core::registry::Hook;
use rmcp_sys::HipApi;
use rmcp_sys::locate::{self, LoadedObject};

use crate::copies::{self, Copy};
use crate::once::Published;

/// One calling object's view of HIP.
pub(crate) struct Binding {
    /// The functions this object's calls reach.
    pub(crate) api: HipApi,
    /// The runtime copy behind them (for its version and devices); None if none is known.
    pub(crate) copy: Option<&'static Copy>,
    /// The object's path matches RMCP_EXEMPT.
    pub(crate) exempt: bool,
}

const OBJECT_SLOTS: usize = 256;
const SITE_SLOTS: usize = 1024;
const PROBES: usize = 8;

struct ObjectSlot {
    /// The object's link map; 0 = free.
    key: AtomicUsize,
    binding: Published<Binding>,
}

static OBJECTS: [ObjectSlot; OBJECT_SLOTS] = [const {
    ObjectSlot {
        key: AtomicUsize::new(0),
        binding: Published::new(),
    }
}; OBJECT_SLOTS];

/// `(return address << 9) | (object slot + 1)`; 0 = empty. User-space addresses have 47
/// bits, slots need 9.
static SITES: [AtomicUsize; SITE_SLOTS] = [const { AtomicUsize::new(0) }; SITE_SLOTS];
const SLOT_BITS: u32 = 9;

fn hash(v: usize, slots: usize) -> usize {
    (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % slots
}

/// The object slot a call site belongs to, from the site table.
#[inline(always)]
fn site(ret: usize) -> Option<usize> {
    let start = hash(ret, SITE_SLOTS);
    for i in 0..PROBES {
        let v = SITES[(start + i) % SITE_SLOTS].load(Ordering::Acquire);
        if v == 0 {
            return None;
        }
        if v >> SLOT_BITS == ret {
            return Some((v & ((1 << SLOT_BITS) - 1)) - 1);
        }
    }
    None
}

fn remember_site(ret: usize, slot: usize) {
    if ret >> (usize::BITS - SLOT_BITS) != 0 {
        return;
    }
    let enc = (ret << SLOT_BITS) | (slot + 1);
    let start = hash(ret, SITE_SLOTS);
    for i in 0..PROBES {
        match SITES[(start + i) % SITE_SLOTS].compare_exchange(
            0,
            enc,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return,
            Err(v) if v >> SLOT_BITS == ret => return,
            Err(_) => continue,
        }
    }
}

/// The slot of the object with this link map, claimed if new; None when the table is full.
fn object_slot(link_map: usize) -> Option<usize> {
    let start = hash(link_map, OBJECT_SLOTS);
    for i in 0..OBJECT_SLOTS {
        let idx = (start + i) % OBJECT_SLOTS;
        let slot = &OBJECTS[idx];
        match slot
            .key
            .compare_exchange(0, link_map, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some(idx),
            Err(k) if k == link_map => return Some(idx),
            Err(_) => continue,
        }
    }
    None
}

/// The binding of the object that called from `ret`, resolved on first use.
#[inline(always)]
pub(crate) fn for_caller(ret: usize, cfg: &Config) -> Option<&'static Binding> {
    if let Some(b) = site(ret).and_then(|slot| OBJECTS[slot].binding.get()) {
        return Some(b);
    }
    for_new_caller(ret, cfg)
}

#[cold]
fn for_new_caller(ret: usize, cfg: &Config) -> Option<&'static Binding> {
    let _no_cancel = crate::cancel::NoCancel::new();
    let object = locate::loaded_object(ret)?;
    let slot = object_slot(object.link_map)?;
    remember_site(ret, slot);
    Some(
        OBJECTS[slot]
            .binding
            .get_or_publish(|| resolve(&object, cfg)),
    )
}

/// Resolves every name the shim calls as `object` would bind it.
fn resolve(object: &LoadedObject, cfg: &Config) -> Binding {
    let lookup = |handle: Option<*mut c_void>| {
        HipApi::resolve(|name| {
            // The next definition after the shim in the global scope.
            let global = crate::front::next(name.as_ptr());
            match handle {
                Some(h) if global.is_null() => in_tree(h, name.as_ptr(), own_address_of(name)),
                _ => global,
            }
        })
    };
    let api =
        crate::front::with_handle(object, |h| lookup(Some(h))).unwrap_or_else(|| lookup(None));
    let copy = api
        .address_of("hipMalloc")
        .or(api.address_of("hipHostMalloc"))
        .and_then(copies::of_function)
        .or_else(copies::first_mapped);
    finish(api, copy, &object.name, cfg)
}

fn finish(api: HipApi, copy: Option<&'static Copy>, name: &str, cfg: &Config) -> Binding {
    let api = if api.hipMalloc.is_none() && api.hipHostMalloc.is_none() {
        // Nothing in the caller's scopes: the runtime found (or loaded) for everyone.
        crate::state::located_runtime().map_or(api, |rt| rt.api)
    } else {
        api
    };
    Binding {
        api,
        copy,
        exempt: exempt(name, &cfg.exempt),
    }
}

/// The object path contains one of RMCP_EXEMPT's patterns.
fn exempt(path: &str, patterns: &[String]) -> bool {
    patterns
        .iter()
        .any(|p| !p.is_empty() && path.contains(p.as_str()))
}

/// The shim's own export for a name, so a lookup that finds it can skip it (0: not hooked).
fn own_address_of(name: &CStr) -> usize {
    Hook::from_name(name.to_bytes()).map_or(0, crate::front::export)
}

/// `name` in the dependency tree of the object with this handle; never the shim's own.
fn in_tree(handle: *mut c_void, name: *const c_char, own: usize) -> *mut c_void {
    // SAFETY: `handle` is a live dlopen handle (`locate::with_handle`); `name` is
    // NUL-terminated.
    let p = unsafe { crate::front::glibc_dlsym()(handle, name) };
    if p as usize == own { null_mut() } else { p }
}

/// `name` in the dependency tree of the object that called from `ret` (dlsym's
/// RTLD_DEFAULT, after the global scope).
pub(crate) fn in_callers_tree(ret: usize, name: *const c_char, own: usize) -> *mut c_void {
    locate::loaded_object(ret)
        .and_then(|o| crate::front::with_handle(&o, |h| in_tree(h, name, own)))
        .unwrap_or(null_mut())
}

/// The handle is the shim's own (`dlopen("librmcp_shim.so")`, the front): its answer is
/// the shim's.
pub(crate) fn is_own_handle(handle: *mut c_void) -> bool {
    let own = crate::front::own_object_address().unwrap_or(is_own_handle as *const () as usize);
    locate::loaded_object(own).is_some_and(|o| o.link_map == handle as usize)
}

/// `addr` is a function of a HIP runtime file in the base link-map namespace.
pub(crate) fn is_runtime_function(addr: usize) -> bool {
    locate::loaded_object(addr).is_some_and(|o| {
        locate::is_runtime_file(&o.name) && locate::namespace_of(o.link_map) == Some(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_remember_their_object_slot() {
        let ret = 0x7f00_1234_5678usize;
        assert_eq!(site(ret), None);
        remember_site(ret, 17);
        assert_eq!(site(ret), Some(17));
        remember_site(ret, 18);
        assert_eq!(site(ret), Some(17), "first one wins");
        remember_site(usize::MAX, 3);
        assert_eq!(
            site(usize::MAX),
            None,
            "addresses past 55 bits are not cached"
        );
    }

    #[test]
    fn object_slots_are_claimed_once() {
        let a = object_slot(0x5555_0000_1000).unwrap();
        assert_eq!(object_slot(0x5555_0000_1000), Some(a));
        assert_ne!(object_slot(0x5555_0000_2000), Some(a));
    }

    #[test]
    fn exempt_matches_substrings_of_the_path() {
        let p = ["librccl".to_string()];
        assert!(exempt("/opt/rocm/lib/librccl.so.1", &p));
        assert!(!exempt("/opt/rocm/lib/librocblas.so.4", &p));
        assert!(!exempt("/x", &[String::new()]));
    }

    #[test]
    fn a_test_executable_calls_into_no_runtime() {
        // libc's strlen: a function of a loaded object that is not a HIP runtime.
        assert!(!is_runtime_function(libc::strlen as *const () as usize));
        assert!(!is_own_handle(null_mut()));
    }
}
