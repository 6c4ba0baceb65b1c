//! What every hook does: decide, forward, fall back, count. The exported functions in
//! `hooks.rs` only gather their arguments and call [`intercept`].
//!
//! Never worse than without the shim:
//! - deciding and bookkeeping run under `catch_unwind`; a panic there forwards the caller's
//!   call unchanged (deciding) or is dropped (bookkeeping). The runtime is called outside
//!   them, exactly once per attempt, so a panic can never repeat an allocation;
//! - a rewritten call that fails for any reason but out-of-memory is retried once exactly
//!   as the caller asked, and that answer is returned;
//! - the runtime's return value reaches the caller untouched; out-pointers are written by
//!   the runtime alone.

use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rmcp_sys::{HipApi, HipError, error};

use rmcp_core::classify::Classes;

use crate::binding::{self, Binding};
use crate::entries::COPY_SLOT_SHIFT;
use crate::handout;
use crate::state::{self, Global};
use crate::stats::{self, Outcome};
use crate::thread::{self, ThreadState};
use rmcp_core::policy::{self, Decision, Facts, Forward, LeftCoherent};
use rmcp_core::registry::Hook;

/// The facts of one call, computed only when the policy asks.
struct CallFacts<'a> {
    global: &'a Global,
    binding: &'a Binding,
}

impl Facts for CallFacts<'_> {
    fn host_affected(&self) -> bool {
        match self.global.classes {
            Classes::Uniform(v) => v,
            Classes::Mixed => self
                .binding
                .copy
                .is_none_or(|c| c.host_affected(self.global)),
        }
    }
    fn device_affected(&self) -> bool {
        match self.global.classes {
            Classes::Uniform(v) => v,
            Classes::Mixed => self
                .binding
                .copy
                .is_none_or(|c| c.current_device_affected(self.global)),
        }
    }
    fn caller_exempt(&self) -> bool {
        self.binding.exempt
    }
    fn host_alloc_is_host(&self) -> bool {
        self.binding.copy.is_some_and(|c| c.host_alloc_is_host())
    }
}

static WARNED_FALLBACK: [AtomicBool; Hook::COUNT] = [const { AtomicBool::new(false) }; Hook::COUNT];
static WARNED_MISSING: [AtomicBool; Hook::COUNT] = [const { AtomicBool::new(false) }; Hook::COUNT];

/// Makes the rewritten call. None: the runtime lacks the function it needs.
fn call_forward(api: &HipApi, fw: Forward, out: *mut *mut c_void, size: usize) -> Option<HipError> {
    match fw {
        // SAFETY: `out` and `size` are the caller's own arguments to an allocation function
        // of the same shape (void**, size_t, ...); the runtime validates them as it would
        // the caller's call.
        Forward::HostMalloc(flags) => api.hipHostMalloc.map(|f| unsafe { f(out, size, flags) }),
        Forward::ExtMallocWithFlags(flags) => api
            .hipExtMallocWithFlags
            // SAFETY: as above.
            .map(|f| unsafe { f(out, size, flags) }),
    }
}

/// A call made from inside a call the shim is forwarding (a runtime calling its own
/// exported functions through its PLT), or one the shim cannot decide for: to the function
/// the caller would have reached, unchanged, not counted. Never waits for another thread.
/// A caller no rule places reaches what the loader would have bound (`handout::unplaced`).
#[cold]
pub(crate) fn forward_bare(
    caller: Caller,
    asked: &impl Fn(&HipApi) -> Option<HipError>,
) -> HipError {
    let found = catch_unwind(|| binding_of(caller, state::config()).map(|b| b.api))
        .ok()
        .flatten();
    match found {
        Some(api) => asked(&api).unwrap_or(error::SHARED_OBJECT_SYMBOL_NOT_FOUND),
        None => error::SHARED_OBJECT_SYMBOL_NOT_FOUND,
    }
}

/// Who made a call, as its entry knows it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Caller {
    /// An ordinary entry: the caller's return address, whose object decides (`binding`).
    At(usize),
    /// A per-copy entry (`entries::copy_entry`): the call goes to that slot's copy
    /// (`handout`), whoever made it; `ret` is the caller's return address, for the log.
    Copy { slot: usize, ret: usize },
}

impl Caller {
    /// The caller of a call that came through an ordinary entry (`COPY` false) or a
    /// per-copy entry (true), with `ret` as that entry passed it.
    #[inline(always)]
    pub(crate) fn of<const COPY: bool>(ret: usize) -> Caller {
        if COPY {
            // The per-copy entry sets bit 56 + slot above the return address (`exports`).
            Caller::Copy {
                slot: ((ret >> COPY_SLOT_SHIFT) as u8).trailing_zeros() as usize,
                ret: ret & ((1 << COPY_SLOT_SHIFT) - 1),
            }
        } else {
            Caller::At(ret)
        }
    }
}

/// The binding a call from `caller` uses: its object's; for a caller no object holds,
/// what the loader would have bound; for a per-copy entry, its copy's.
#[inline(always)]
pub(crate) fn binding_of(
    caller: Caller,
    cfg: &rmcp_core::config::Config,
) -> Option<&'static Binding> {
    match caller {
        Caller::At(ret) => binding::for_caller(ret, cfg).or_else(handout::unplaced),
        Caller::Copy { slot, .. } => handout::for_slot(slot).or_else(handout::unplaced),
    }
}

/// A hooked call as the caller made it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub(crate) hook: Hook,
    /// The caller's out-pointer (null if the function has none).
    pub(crate) out: *mut *mut c_void,
    pub(crate) size: usize,
    pub(crate) flags: u32,
    /// The hook's return address, naming the caller; through a per-copy entry, the copy's
    /// slot ([`Caller::of`]).
    pub(crate) ret: usize,
}

/// The body of every hook. `asked` makes the caller's call to the runtime's function of
/// the same name (None if the runtime lacks it). `COPY`: the call came through a per-copy
/// entry (a compile-time choice, so an ordinary call pays nothing for it).
#[inline(always)]
pub(crate) fn intercept<const COPY: bool>(
    call: Call,
    asked: impl Fn(&HipApi) -> Option<HipError>,
) -> HipError {
    thread::with(|t| intercept_on::<COPY>(t, call, &asked))
}

#[inline(always)]
fn intercept_on<const COPY: bool>(
    t: &ThreadState,
    call: Call,
    asked: &impl Fn(&HipApi) -> Option<HipError>,
) -> HipError {
    if t.inside() {
        return forward_bare(Caller::of::<COPY>(call.ret), asked);
    }
    // No guard with a destructor: the runtime call below may be unwound by a thread
    // cancellation, and this frame must then have nothing to run (crate::cancel).
    t.mark_inside();
    let rc = decide_and_call::<COPY>(t, call, asked);
    t.leave();
    rc
}

/// The hook's work once the thread is marked inside: the shim's own steps under
/// `catch_unwind` (cancellation off where they may meet a cancellation point), the runtime
/// called outside them, as cancellable as the caller's call would have been.
#[inline(always)]
fn decide_and_call<const COPY: bool>(
    t: &ThreadState,
    call: Call,
    asked: &impl Fn(&HipApi) -> Option<HipError>,
) -> HipError {
    let caller = Caller::of::<COPY>(call.ret);
    let Ok(global) = catch_unwind(crate::report::global) else {
        return forward_bare(caller, asked);
    };
    let Ok(Some(binding)) = catch_unwind(|| binding_of(caller, global.config)) else {
        return forward_bare(caller, asked);
    };
    let api = &binding.api;
    let facts = CallFacts { global, binding };
    // What the decision needs from the runtime is asked here, before the caller's call, never
    // after it: the caller's own call then sets the runtime's per-thread state (the last
    // error) as it would have without the shim.
    let (decision, coherent_if_served) = catch_unwind(AssertUnwindSafe(|| {
        let d = policy::decide(call.hook, call.flags, &global.rules, &facts);
        (d, d == Decision::Unchanged && left_coherent(call, binding))
    }))
    .unwrap_or((Decision::Unchanged, false));
    // From here to the bookkeeping: runtime calls and plain comparisons only.
    let mut fallback = false;
    let mut lacks = false;
    let rc = match decision {
        Decision::Rewrite(fw) => match call_forward(api, fw, call.out, call.size) {
            Some(rc) if policy::retry_as_asked(rc) => {
                fallback = true;
                asked(api).unwrap_or_else(|| {
                    lacks = true;
                    rc
                })
            }
            Some(rc) => rc,
            None => asked(api).unwrap_or_else(|| {
                lacks = true;
                error::SHARED_OBJECT_SYMBOL_NOT_FOUND
            }),
        },
        Decision::Unchanged | Decision::WouldRewrite(_) => asked(api).unwrap_or_else(|| {
            lacks = true;
            error::SHARED_OBJECT_SYMBOL_NOT_FOUND
        }),
    };

    let _ = catch_unwind(AssertUnwindSafe(|| {
        let coherent = rc == error::SUCCESS && coherent_if_served;
        let slot = stats::slot(t);
        stats::record(
            slot,
            call.hook,
            Outcome {
                rewritten: decision != Decision::Unchanged,
                fallback,
                error: rc != error::SUCCESS,
                bytes: call.size as u64,
                coherent,
            },
        );
        // What is said about a call is out of line: an ordinary call only checks whether
        // there is anything to say (trace implies debug).
        if lacks || fallback || coherent || tracing::level_enabled!(tracing::Level::DEBUG) {
            tell::<COPY>(&facts, call, decision, rc, fallback, lacks, coherent);
        }
        if rc == error::SUCCESS {
            for_fault_report::<COPY>(slot, call, decision, fallback);
        }
        if let Some(c) = binding.copy {
            if !c.settled.load(Relaxed) {
                settle(global, c, rc == error::SUCCESS);
            }
        }
    }));
    rc
}

/// What the first calls reaching runtime copy `c` do once: its banner (`report::announce`)
/// and, once the runtime served a call (`served`), rmcp's fault handler in its ROCr: ROCr is
/// open then, before any GPU work of the caller's (a copy may be the first), and this thread
/// holds none of the runtime's locks; registering asks the loader nothing (`fault::watch`).
/// When both are done for good, the copy is settled and a call checks one flag.
#[cold]
#[inline(never)]
fn settle(global: &'static Global, c: &'static crate::copies::Copy, served: bool) {
    crate::report::announce(global, c);
    if served {
        crate::fault::watch(c);
    }
    if c.announced.load(Relaxed) && crate::fault::watched(c) {
        c.settled.store(true, Relaxed);
    }
}

/// What the GPU fault report needs of a successful call (issue 28): an allocation in the
/// allocation record of the calling thread's `slot`, with what was asked and what was
/// forwarded.
#[inline(always)]
fn for_fault_report<const COPY: bool>(slot: usize, call: Call, decision: Decision, fallback: bool) {
    if !call.out.is_null() {
        // SAFETY: the runtime accepted the call and wrote the allocation's address to the
        // caller's out-pointer.
        let base = unsafe { call.out.read() } as usize;
        let forwarded = match decision {
            Decision::Rewrite(fw) if !fallback => Some(fw),
            _ => None,
        };
        let caller = match Caller::of::<COPY>(call.ret) {
            Caller::At(ret) | Caller::Copy { ret, .. } => ret,
        };
        crate::allocations::record_in(
            slot, call.hook, base, call.size, caller, call.flags, forwarded,
        );
    }
}

/// Whether the call, if the runtime serves it as asked, leaves memory coherent that no flag
/// changes. Uncached needs the runtime's version, asked now (before the call) if not yet.
fn left_coherent(call: Call, binding: &Binding) -> bool {
    match policy::left_coherent(call.hook, call.flags) {
        LeftCoherent::No => false,
        LeftCoherent::Yes => true,
        LeftCoherent::IfUncachedDefined => binding
            .copy
            .and_then(|c| c.version())
            .is_some_and(policy::uncached_defined),
    }
}

static WARNED_BEYOND_REACH: [AtomicBool; Hook::COUNT] =
    [const { AtomicBool::new(false) }; Hook::COUNT];

/// Once per function, on a machine whose host allocations the shim rewrites (not for an
/// exempt caller, which keeps coherent memory by choice): says what stayed as the runtime
/// made it and under which counter.
#[cold]
fn beyond_reach(facts: &CallFacts, hook: Hook, counter: &str) {
    if facts.global.rules.mode == rmcp_core::config::Mode::Off
        || facts.caller_exempt()
        || WARNED_BEYOND_REACH[hook.index()].load(Relaxed)
        || !facts.host_affected()
        || WARNED_BEYOND_REACH[hook.index()].swap(true, Relaxed)
    {
        return;
    }
    match hook {
        Hook::HipMemCreate => tracing::info!(
            "{}: a host-location (VMM) allocation is left as the runtime makes it: no flag \
             changes it (counted as {counter}; further calls are counted, not logged)",
            hook.name()
        ),
        _ => tracing::warn!(
            "{}: {}; rmcp cannot make it non-coherent (counted as {counter}; further calls \
             are counted, not logged)",
            hook.name(),
            if hook == Hook::HipHostRegister {
                "registered host memory is coherent (fine-grained with atomics) in every HIP \
                 runtime, whatever the flags"
            } else {
                "Uncached host memory is coherent and the runtime rejects it with NonCoherent"
            }
        ),
    }
}

/// After a successful call of a function whose `prop` (`hipMemAllocationProp*`) may ask for
/// host memory (hipMemCreate): counts a host location, and says so once. Not for the
/// runtime's own calls made inside a forwarded one.
///
/// # Safety
/// `prop` is null or points to a `hipMemAllocationProp` (the runtime accepted the call).
pub(crate) unsafe fn count_host_location(hook: Hook, prop: *const c_void, caller: Caller) {
    if prop.is_null() {
        return;
    }
    // SAFETY: per this function's contract; `location.type` is an int at this offset in
    // every runtime (rmcp_sys::mem_alloc_prop), read unaligned to ask nothing of `prop`.
    let location = unsafe {
        prop.cast::<u8>()
            .add(rmcp_sys::mem_alloc_prop::LOCATION_TYPE_OFFSET)
            .cast::<i32>()
            .read_unaligned()
    };
    if !policy::host_location(location) {
        return;
    }
    thread::with(|t| {
        if t.inside() {
            return;
        }
        stats::record_host_location(stats::slot(t), hook);
        let Some(global) = state::global_if_built() else {
            return;
        };
        if let Some(binding) = binding_of(caller, global.config) {
            beyond_reach(&CallFacts { global, binding }, hook, "host_location");
        }
    });
}

/// What the shim says about a call: a runtime that lacks the function, a fallback, memory
/// left coherent (each once per function), and the debug or trace line.
#[cold]
#[inline(never)]
fn tell<const COPY: bool>(
    facts: &CallFacts,
    call: Call,
    decision: Decision,
    rc: HipError,
    fallback: bool,
    lacks: bool,
    coherent: bool,
) {
    let Call {
        hook,
        size,
        flags,
        ret,
        ..
    } = call;
    if lacks {
        missing(hook, "the loaded HIP runtime does not export it");
    }
    if fallback && !WARNED_FALLBACK[hook.index()].swap(true, Relaxed) {
        tracing::warn!(
            "{}: the rewritten call failed; retried as the caller asked, which returned {rc} \
             (further fallbacks of this function are counted, not logged)",
            hook.name()
        );
    }
    if let Some(fw) = decision.forward() {
        tracing::debug!(
            "{} size={size} flags={flags:#x} -> {} caller={} rc={rc}{}{}",
            hook.name(),
            describe(fw),
            describe_caller(Caller::of::<COPY>(ret)),
            if fallback {
                " (fell back to the caller's call)"
            } else {
                ""
            },
            if matches!(decision, Decision::WouldRewrite(_)) {
                " (dry-run: not applied)"
            } else {
                ""
            },
        );
    } else {
        tracing::trace!(
            "{} size={size} flags={flags:#x} unchanged rc={rc}",
            hook.name()
        );
    }
    if coherent {
        beyond_reach(facts, hook, "coherent");
    }
}

pub(crate) fn describe_caller(caller: Caller) -> String {
    match caller {
        Caller::At(ret) | Caller::Copy { ret, .. } => {
            rmcp_sys::locate::object_of(ret).map_or_else(|| "?".to_string(), |(_, p)| p)
        }
    }
}

fn describe(fw: Forward) -> String {
    match fw {
        Forward::HostMalloc(f) => format!("hipHostMalloc flags={f:#x}"),
        Forward::ExtMallocWithFlags(f) => format!("hipExtMallocWithFlags flags={f:#x}"),
    }
}

#[cold]
pub(crate) fn missing(hook: Hook, why: &str) {
    if !WARNED_MISSING[hook.index()].swap(true, Relaxed) {
        tracing::error!(
            "{}: {why}; returning hipErrorSharedObjectSymbolNotFound ({})",
            hook.name(),
            error::SHARED_OBJECT_SYMBOL_NOT_FOUND
        );
    }
}

/// After a successful hipGetProcAddress or hipGetDriverEntryPoint (`resolver`) for a hooked
/// name that returned a runtime's own function, hand the caller the shim's function instead
/// (`handout::substitute`: one whose calls reach the function the runtime gave, whoever
/// makes them). An exempt caller keeps the runtime's function.
///
/// # Safety
/// `symbol` is null or a NUL-terminated string; `pfn` is null or valid for reads and
/// writes of one pointer (the caller's arguments to the resolver).
pub(crate) unsafe fn substitute_proc_address(
    resolver: Hook,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    caller: Caller,
) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    let Some(global) = state::global_if_built() else {
        return;
    };
    // SAFETY: per this function's contract.
    let (name, got) = unsafe { (CStr::from_ptr(symbol), *pfn) };
    let Some(hook) = Hook::from_name(name.to_bytes()) else {
        if !got.is_null() {
            // SAFETY: per this function's contract.
            unsafe { substitute_observed_proc_address(resolver, name, pfn, caller, global) };
            // Its lookups are the shim's own: they leave no dlerror() message behind.
            crate::dlerror::clear();
        }
        return;
    };
    if !policy::substitute_proc_address(global.rules.mode) {
        return;
    }
    if got.is_null() {
        return;
    }
    let mine = substitute_for(hook, name, got as usize, caller, global);
    // The lookups above are the shim's own: they leave no dlerror() message behind (a
    // message the resolver left is gone too: the first of them replaced it).
    crate::dlerror::clear();
    let Some(mine) = mine else {
        return;
    };
    // SAFETY: per this function's contract; the runtime succeeded and wrote `*pfn`.
    unsafe { *pfn = mine as *mut c_void };
    tracing::debug!(
        "{}({}): handing back rmcp's function",
        resolver.name(),
        hook.name()
    );
}

/// The shim's function for `got`, the runtime's `hook` that a resolver returned to
/// `caller`; None: `got` stays.
fn substitute_for(
    hook: Hook,
    name: &CStr,
    got: usize,
    caller: Caller,
    global: &Global,
) -> Option<usize> {
    if !binding::is_runtime_function(got)
        || binding_of(caller, global.config).is_some_and(|b| b.exempt)
    {
        return None;
    }
    handout::substitute(hook, name, got)
}

/// [`substitute_proc_address`] for a name that is not hooked: an observed function (a launch,
/// a graph call) found in a runtime copy comes back as an entry that records it and goes on
/// to exactly that function (`handout::substitute_observed`), in every mode (observing
/// changes nothing; RMCP_MODE=off still explains faults), unless the caller is exempt.
///
/// # Safety
/// As [`substitute_proc_address`].
unsafe fn substitute_observed_proc_address(
    resolver: Hook,
    name: &CStr,
    pfn: *mut *mut c_void,
    caller: Caller,
    global: &Global,
) {
    let Some(o) = rmcp_core::registry::Observed::from_name(name.to_bytes()) else {
        return;
    };
    // SAFETY: per this function's contract: the runtime succeeded and wrote `*pfn`.
    let got = unsafe { *pfn };
    if got.is_null() || !binding::is_runtime_function(got as usize) {
        return;
    }
    if binding_of(caller, global.config).is_some_and(|b| b.exempt) {
        return;
    }
    let Some(mine) = handout::substitute_observed(o, name, got as usize) else {
        return;
    };
    // SAFETY: as above.
    unsafe { *pfn = mine as *mut c_void };
    tracing::debug!(
        "{}({}): handing back rmcp's recording entry",
        resolver.name(),
        o.name()
    );
}
