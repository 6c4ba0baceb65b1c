//! Where a hooked call goes: the function its calling object would have bound to if the
//! shim were not loaded. Found once per calling object and generation of loaded objects,
//! kept in fixed lock-free tables; nothing here ever waits for another thread.
//!
//! The calling object is the one holding the hook's return address (`dladdr1`). What it
//! would have bound to, per name:
//! 0. when the caller's other HIP imports are already bound (bind-now, LD_BIND_NOW, or
//!    after their first calls) to a runtime copy that is not the one the global scope
//!    would give now: that copy, which is where the caller's frees go (`bound_copy`);
//! 1. the next definition after the shim in the global scope (glibc's `dlsym(RTLD_NEXT)`
//!    from the preloaded front, `front::next`): an interposer preloaded after the shim, or
//!    the runtime when it is in the global scope (linked by the program, or dlopened
//!    RTLD_GLOBAL);
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
//! the same object both build one, the first published wins; past its capacity, a
//! lock-free list that is slower to search, `EXTRA`); `SITES` maps a return address to its
//! object's slot, so a call site seen before costs one hash probe, no loader call; a site
//! the table has no room for finds its object from the loader's link map, without
//! allocating. Nothing outlives a `dlclose`: every binding holds the generation of loaded
//! objects it was resolved in (`front::generation`, bumped by the front after each
//! dlclose), a binding from an older one is resolved again and replaced in place, and the
//! site table is emptied once per generation before anything is resolved in it.
//!
//! Fork (`before_fork`, in the parent): the bindings of every loaded object that imports a
//! hooked function are resolved, and the objects' address ranges kept, so that a child
//! whose parent forked while another thread was inside dlopen or dlclose (where the loader
//! must not be asked anything) finds its caller's binding by address alone, and a caller
//! the parent did not know reaches the runtime the parent located.

use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use rmcp_core::config::Config;
use rmcp_core::registry::Hook;
use rmcp_sys::HipApi;
use rmcp_sys::locate::{self, LoadedObject, Mapping};

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
    /// The generation of loaded objects it was resolved in (`front::generation`).
    generation: u64,
}

impl Binding {
    /// A binding learnt now, for callers no object table keeps (`handout`): stamped with
    /// the current generation of loaded objects.
    pub(crate) fn now(api: HipApi, copy: Option<&'static Copy>, exempt: bool) -> Binding {
        Binding {
            api,
            copy,
            exempt,
            generation: crate::front::generation(),
        }
    }
}

const OBJECT_SLOTS: usize = 4096;
const SITE_SLOTS: usize = 16384;
const PROBES: usize = 16;

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

/// `(return address << 13) | (object slot + 1)`; 0 = empty. User-space addresses have 47
/// bits, slots need 13.
static SITES: [AtomicUsize; SITE_SLOTS] = [const { AtomicUsize::new(0) }; SITE_SLOTS];
const SLOT_BITS: u32 = 13;
const _: () = assert!(OBJECT_SLOTS < 1 << SLOT_BITS);

/// The generation the site table was last emptied for.
static SITES_GENERATION: AtomicU64 = AtomicU64::new(0);

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

/// Remembers that `ret` is a call site of the object in `slot` (replacing what an earlier
/// generation said). No room in its probe window: not remembered, and calls from there find
/// their object from the loader's link map (slower, no allocation).
fn remember_site(ret: usize, slot: usize) {
    if ret >> (usize::BITS - SLOT_BITS) != 0 {
        return;
    }
    let enc = (ret << SLOT_BITS) | (slot + 1);
    let start = hash(ret, SITE_SLOTS);
    for i in 0..PROBES {
        let cell = &SITES[(start + i) % SITE_SLOTS];
        let mut v = cell.load(Ordering::Acquire);
        loop {
            if v != 0 && v >> SLOT_BITS != ret {
                break;
            }
            if v == enc {
                return;
            }
            match cell.compare_exchange(v, enc, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
    }
}

/// Empties the site table once per generation, before anything is resolved in it: a
/// return address may now be in another object than the one it was seen in.
fn forget_sites_before(now: u64) {
    if SITES_GENERATION.load(Ordering::Acquire) >= now {
        return;
    }
    for cell in &SITES {
        cell.store(0, Ordering::Release);
    }
    SITES_GENERATION.fetch_max(now, Ordering::AcqRel);
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

/// An object past `OBJECTS`' capacity: a list searched from its head, never shrunk.
struct Extra {
    link_map: usize,
    binding: Published<Binding>,
    next: *const Extra,
}

static EXTRA: AtomicPtr<Extra> = AtomicPtr::new(null_mut());

/// The binding cell of the object with this link map; `claim`: added if missing.
fn cell(link_map: usize, claim: bool) -> Option<&'static Published<Binding>> {
    let slot = if claim {
        object_slot(link_map)
    } else {
        existing_slot(link_map)
    };
    if let Some(slot) = slot {
        return Some(&OBJECTS[slot].binding);
    }
    extra(link_map, claim)
}

/// The slot already holding this link map, without claiming one.
fn existing_slot(link_map: usize) -> Option<usize> {
    let start = hash(link_map, OBJECT_SLOTS);
    (0..OBJECT_SLOTS)
        .map(|i| (start + i) % OBJECT_SLOTS)
        .take_while(|&idx| OBJECTS[idx].key.load(Ordering::Acquire) != 0)
        .find(|&idx| OBJECTS[idx].key.load(Ordering::Acquire) == link_map)
}

fn extra(link_map: usize, claim: bool) -> Option<&'static Published<Binding>> {
    let mut mine: *mut Extra = null_mut();
    loop {
        let head = EXTRA.load(Ordering::Acquire);
        let mut p = head.cast_const();
        while !p.is_null() {
            // SAFETY: entries are leaked boxes, published by the Release compare-exchange
            // below and never freed or unlinked.
            let e = unsafe { &*p };
            if e.link_map == link_map {
                if !mine.is_null() {
                    // SAFETY: `mine` was never published; this thread owns it.
                    drop(unsafe { Box::from_raw(mine) });
                }
                return Some(&e.binding);
            }
            p = e.next;
        }
        if !claim {
            return None;
        }
        if mine.is_null() {
            mine = Box::into_raw(Box::new(Extra {
                link_map,
                binding: Published::new(),
                next: null_mut(),
            }));
        }
        // SAFETY: `mine` is unpublished and this thread's alone.
        unsafe { (*mine).next = head };
        if EXTRA
            .compare_exchange(head, mine, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: published now, never freed.
            return Some(unsafe { &(*mine).binding });
        }
    }
}

/// The binding of the object that called from `ret`, resolved on first use and again after
/// a `dlclose`. The cost on the fast path: a site probe, the binding, and one load of the
/// generation.
#[inline(always)]
pub(crate) fn for_caller(ret: usize, cfg: &Config) -> Option<&'static Binding> {
    let now = crate::front::generation();
    if let Some(b) = site(ret).and_then(|slot| OBJECTS[slot].binding.get()) {
        if b.generation == now {
            return Some(b);
        }
    }
    for_new_caller(ret, cfg, now)
}

#[cold]
fn for_new_caller(ret: usize, cfg: &Config, now: u64) -> Option<&'static Binding> {
    let _no_cancel = crate::cancel::NoCancel::new();
    if crate::front::loader_inconsistent() {
        return in_forked_child(ret);
    }
    if let Some(b) = from_snapshot(ret, now) {
        return Some(b);
    }
    forget_sites_before(now);
    let (link_map, _) = locate::link_map_of(ret)?;
    current(link_map, now, || locate::loaded_object(ret), cfg, Some(ret))
}

/// The binding of the object with `link_map` for generation `now`: the one kept, or one
/// resolved now (replacing an older generation's). `object` names it when it must be
/// resolved; `ret`, a call site to remember.
fn current(
    link_map: usize,
    now: u64,
    object: impl FnOnce() -> Option<LoadedObject>,
    cfg: &Config,
    ret: Option<usize>,
) -> Option<&'static Binding> {
    let slot = object_slot(link_map);
    let cell = match slot {
        Some(s) => &OBJECTS[s].binding,
        None => extra(link_map, true)?,
    };
    let found = cell.get();
    let b = match found {
        Some(b) if b.generation == now => b,
        _ => {
            let object = object()?;
            if object.link_map != link_map {
                return None;
            }
            let fresh = resolve(&object, cfg, now);
            // Resolving made the shim's own loader calls: none leaves a dlerror() message.
            crate::dlerror::clear();
            match found {
                None => cell.get_or_publish(|| fresh),
                Some(old) => {
                    // Another thread may have replaced it first: theirs is as good.
                    cell.replace(old, fresh);
                    cell.get()?
                }
            }
        }
    };
    if let (Some(slot), Some(ret)) = (slot, ret) {
        if crate::front::generation() == now {
            remember_site(ret, slot);
        }
    }
    Some(b)
}

/// Resolves every name the shim calls as `object` would bind it, in generation `now`.
fn resolve(object: &LoadedObject, cfg: &Config, now: u64) -> Binding {
    if let Some(c) = bound_copy(object) {
        return finish(c.api, Some(c), &object.name, cfg, now);
    }
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
    finish(api, copy, &object.name, cfg, now)
}

/// The runtime copy the caller's HIP imports the shim does not hook (hipFree, ...) are
/// already bound to, when that is not the copy the global scope would give the hooked ones
/// now: then the caller's calls go there, where its frees go (issue 22, shape 8: a
/// framework bound at load, then a second copy loaded RTLD_GLOBAL). None when nothing is
/// bound yet (lazy binding, before the first calls), when the imports reach no runtime
/// directly (an interposer), or when the global scope agrees.
fn bound_copy(object: &LoadedObject) -> Option<&'static Copy> {
    let unhooked = |name: &[u8]| name.starts_with(b"hip") && Hook::from_name(name).is_none();
    let mapping =
        locate::mapping_with_imports(object.base, &unhooked).filter(|m| m.name == object.name)?;
    let copy = mapping
        .imports
        .iter()
        .filter_map(|i| rmcp_sys::elf::bound(i.value, &mapping.segments))
        .find_map(copies::of_function)?;
    let global = crate::front::next(c"hipMalloc".as_ptr()) as usize;
    let global_copy = (global != 0).then(|| copies::of_function(global)).flatten();
    match global_copy {
        Some(g) if g.base != copy.base => Some(copy),
        _ => None,
    }
}

fn finish(
    api: HipApi,
    copy: Option<&'static Copy>,
    name: &str,
    cfg: &Config,
    generation: u64,
) -> Binding {
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
        generation,
    }
}

/// What a fork child may use without asking the loader: the segments of every loaded
/// object that imports a hooked function, with its link map (its binding resolved), and the
/// binding for a caller the parent did not know (the runtime the parent located).
struct Snapshot {
    generation: u64,
    objects: Vec<(usize, Vec<(usize, usize)>)>,
    fallback: Option<Binding>,
}

static SNAPSHOT: Published<Snapshot> = Published::new();

/// In the parent, before a fork (`front::before_fork`): resolves, now, the bindings of every
/// loaded object that imports a hooked function and keeps their address ranges, once per
/// generation of loaded objects (issue 22, shape 4).
pub(crate) fn before_fork() {
    if crate::front::loader_inconsistent() {
        return;
    }
    let now = crate::front::generation();
    let kept = SNAPSHOT.get();
    if kept.is_some_and(|s| s.generation == now) {
        return;
    }
    forget_sites_before(now);
    let cfg = crate::state::config();
    let own = |m: &Mapping| {
        m.contains(before_fork as *const () as usize)
            || m.contains(crate::front::export(Hook::HipMalloc))
    };
    let mut objects = Vec::new();
    let hooked = |name: &[u8]| Hook::from_name(name).is_some();
    for m in locate::mappings_with_imports(&hooked) {
        if m.imports.is_empty() || own(&m) || locate::is_runtime_file(&m.name) {
            continue;
        }
        let Some(object) = locate::loaded_object(m.segments[0].0) else {
            continue;
        };
        let link_map = object.link_map;
        if current(link_map, now, || Some(object), cfg, None).is_some() {
            objects.push((link_map, m.segments));
        }
    }
    let fallback = if locate::mapped_runtimes(0).is_empty() {
        None
    } else {
        crate::state::located_runtime().map(|rt| Binding {
            api: rt.api,
            copy: rt.api.address_of("hipMalloc").and_then(copies::of_function),
            exempt: false,
            generation: now,
        })
    };
    let snapshot = Snapshot {
        generation: now,
        objects,
        fallback,
    };
    match kept {
        None => {
            SNAPSHOT.get_or_publish(|| snapshot);
        }
        Some(old) => {
            SNAPSHOT.replace(old, snapshot);
        }
    }
}

/// In a fork child, the generation it started in, plus one; 0 in the process that never
/// forked.
static CHILD_FROM: AtomicU64 = AtomicU64::new(0);

/// Called in every fork child (`report`'s atfork handler).
pub(crate) fn after_fork_in_child() {
    CHILD_FROM.store(
        crate::front::generation().wrapping_add(1),
        Ordering::Release,
    );
}

/// The binding the last fork step resolved for the object `ret` is in, without asking the
/// loader, while it still holds: nothing was dlclosed since (in a fork child: nothing since
/// the child started, for the parent's loader lock may be held by a thread the child does
/// not have even when its state reads consistent).
fn from_snapshot(ret: usize, now: u64) -> Option<&'static Binding> {
    let snap = SNAPSHOT.get()?;
    let child = CHILD_FROM.load(Ordering::Acquire) == now.wrapping_add(1);
    if snap.generation != now && !child {
        return None;
    }
    let (link_map, _) = snap
        .objects
        .iter()
        .find(|(_, segments)| segments.iter().any(|&(s, e)| ret >= s && ret < e))?;
    let b = cell(*link_map, false)?.get()?;
    (b.generation == now || child).then_some(b)
}

/// In a fork child whose loader must not be asked anything: the caller's binding from the
/// parent's snapshot, found by address; else the runtime the parent located.
fn in_forked_child(ret: usize) -> Option<&'static Binding> {
    let snap = SNAPSHOT.get()?;
    let known = snap
        .objects
        .iter()
        .find(|(_, segments)| segments.iter().any(|&(s, e)| ret >= s && ret < e))
        .and_then(|(link_map, _)| cell(*link_map, false))
        .and_then(Published::get);
    known.or(snap.fallback.as_ref())
}

/// A loaded object that imports hooked functions whose GOT slots are bound past the shim,
/// straight to a runtime (issue 22, shape 11): its calls of them are not reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unreached {
    /// The name it was opened by (the main program: empty).
    pub(crate) object: String,
    pub(crate) functions: Vec<&'static str>,
    pub(crate) reason: String,
}

/// What [`note_loaded`] found, kept so an object unloaded later is still named at exit.
static NOTED: Published<Vec<Unreached>> = Published::new();

/// Every loaded object whose bound hooked imports reach a runtime directly instead of the
/// shim's export, now and as noted earlier. Not the shim's objects, not a runtime itself
/// (its calls of its own functions are its business), not a slot still unbound (lazy).
///
/// In a fork child only what was noted before: the walk takes the loader's list lock, which
/// a thread the child does not have may have held at the fork (the exit report of such a
/// child would wait forever).
pub(crate) fn unreached() -> Vec<Unreached> {
    let mut all = NOTED.get().cloned().unwrap_or_default();
    if CHILD_FROM.load(Ordering::Acquire) != 0 {
        return all;
    }
    for u in scan_unreached() {
        if !all.contains(&u) {
            all.push(u);
        }
    }
    all
}

/// Scans the loaded objects now and remembers what is not reached (for the front to call
/// after a `dlopen` that may bypass the shim, RTLD_DEEPBIND above all); says so once per
/// object at info level.
pub(crate) fn note_loaded() {
    let _no_cancel = crate::cancel::NoCancel::new();
    if crate::front::loader_inconsistent() {
        return;
    }
    let kept = NOTED.get();
    let mut all = kept.cloned().unwrap_or_default();
    let mut added = false;
    for u in scan_unreached() {
        if !all.contains(&u) {
            tracing::info!("{}", describe_unreached(&u));
            all.push(u);
            added = true;
        }
    }
    if !added {
        return;
    }
    match kept {
        None => {
            NOTED.get_or_publish(|| all);
        }
        Some(old) => {
            NOTED.replace(old, all);
        }
    }
}

/// One line for the banner: what is not reached and why.
pub(crate) fn describe_unreached(u: &Unreached) -> String {
    format!(
        "{}: {} not reached: {}",
        if u.object.is_empty() {
            "the main program"
        } else {
            &u.object
        },
        u.functions.join(", "),
        u.reason
    )
}

fn scan_unreached() -> Vec<Unreached> {
    let hooked = |name: &[u8]| Hook::from_name(name).is_some();
    let maps = locate::mappings_with_imports(&hooked);
    let own = |m: &Mapping| {
        m.contains(scan_unreached as *const () as usize)
            || m.contains(crate::front::export(Hook::HipMalloc))
    };
    let mut out = Vec::new();
    for m in &maps {
        if m.imports.is_empty() || own(m) || locate::is_runtime_file(&m.name) {
            continue;
        }
        let mut functions = Vec::new();
        let mut runtime = None;
        for i in &m.imports {
            let Some(hook) = Hook::from_name(i.name.as_bytes()) else {
                continue;
            };
            let Some(target) = rmcp_sys::elf::bound(i.value, &m.segments) else {
                continue;
            };
            if target == crate::front::export(hook) {
                continue;
            }
            let Some(rt) = maps
                .iter()
                .find(|r| r.contains(target) && locate::is_runtime_file(&r.name))
            else {
                continue; // another object's function: a wrapper, which calls on
            };
            if !functions.contains(&hook.name()) {
                functions.push(hook.name());
            }
            runtime.get_or_insert(rt.name.clone());
        }
        if let Some(rt) = runtime {
            out.push(Unreached {
                object: m.name.clone(),
                functions,
                reason: format!(
                    "bound to {rt} directly, past rmcp (loaded with RTLD_DEEPBIND, or its \
                     own lookup scope puts the runtime first)"
                ),
            });
        }
    }
    out
}

/// The object path contains one of RMCP_EXEMPT's patterns.
fn exempt(path: &str, patterns: &[String]) -> bool {
    patterns
        .iter()
        .any(|p| !p.is_empty() && path.contains(p.as_str()))
}

/// The shim's own export for a name, so a lookup that finds it can skip it (0: not hooked).
fn own_address_of(name: &CStr) -> usize {
    match Hook::from_name(name.to_bytes()) {
        Some(h) => crate::front::export(h),
        None => rmcp_core::registry::Observed::from_name(name.to_bytes())
            .map_or(0, crate::front::observed_export),
    }
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
        assert_eq!(
            site(ret),
            Some(18),
            "a later generation's object replaces it"
        );
        remember_site(usize::MAX, 3);
        assert_eq!(
            site(usize::MAX),
            None,
            "addresses past 51 bits are not cached"
        );
        // The table is emptied once per generation (one test: it is one table).
        forget_sites_before(0);
        assert_eq!(site(ret), Some(18), "the same generation keeps it");
        forget_sites_before(u64::MAX);
        assert_eq!(site(ret), None);
        remember_site(ret, 6);
        forget_sites_before(u64::MAX);
        assert_eq!(site(ret), Some(6), "emptied once");
    }

    #[test]
    fn object_slots_are_claimed_once() {
        let a = object_slot(0x5555_0000_1000).unwrap();
        assert_eq!(object_slot(0x5555_0000_1000), Some(a));
        assert_ne!(object_slot(0x5555_0000_2000), Some(a));
    }

    #[test]
    fn objects_past_the_table_are_kept_in_the_list() {
        let a = extra(0x6666_0000_1000, true).unwrap();
        let b = extra(0x6666_0000_2000, true).unwrap();
        assert!(std::ptr::eq(a, extra(0x6666_0000_1000, false).unwrap()));
        assert!(std::ptr::eq(b, extra(0x6666_0000_2000, true).unwrap()));
        assert!(!std::ptr::eq(a, b));
        assert!(extra(0x6666_0000_3000, false).is_none());
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
