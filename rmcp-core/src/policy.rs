//! The rewrite rules: given a hooked call's flags, what the device situation is and the
//! configuration, what does the runtime receive? Pure: no FFI, no sysfs, no logging.
//!
//! Facts that cost something to learn (the current device, the caller's library) are asked
//! through [`Facts`] only when the answer can change the decision.

use rmcp_sys::{
    HipError, device_malloc, error, host_alloc, host_malloc, mem_location, split_hip_version,
};

use crate::config::{Finegrained, Mode};
use crate::registry::Hook;

/// What the rules need to know about the call's situation.
pub trait Facts {
    /// A GPU visible to the process is affected: host allocations are rewritten.
    fn host_affected(&self) -> bool;
    /// The calling thread's current device is affected: device allocations are rewritten.
    fn device_affected(&self) -> bool;
    /// The caller lives in a library matched by RMCP_EXEMPT.
    fn caller_exempt(&self) -> bool;
    /// The loaded runtime's hipHostAlloc allocates host memory like hipHostMalloc (6.3 and
    /// later). Older ones pass its flags on as internal flags and allocate VRAM; such a
    /// call is not a coherent host allocation and is left alone.
    fn host_alloc_is_host(&self) -> bool;
}

/// The configuration the rules depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub mode: Mode,
    pub finegrained: Finegrained,
    /// The runtime's own `HIP_HOST_COHERENT`, read as the runtime reads it
    /// ([`hip_host_coherent`]): on, a hipHostMalloc with no coherence flag is coherent too.
    pub host_coherent: bool,
}

/// A call the shim makes instead of the caller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// The runtime's hipHostMalloc with these flags.
    HostMalloc(u32),
    /// The runtime's hipExtMallocWithFlags with this flag.
    ExtMallocWithFlags(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Forward the caller's call as it is.
    Unchanged,
    /// Make this call instead.
    Rewrite(Forward),
    /// Dry-run: this is what would be made; forward the caller's call as it is.
    WouldRewrite(Forward),
}

impl Decision {
    /// The rewrite decided, applied or not.
    pub fn forward(self) -> Option<Forward> {
        match self {
            Decision::Unchanged => None,
            Decision::Rewrite(f) | Decision::WouldRewrite(f) => Some(f),
        }
    }
}

/// Whether the runtime allocates `hipHostMalloc(flags)` coherent: fine-grained with atomics
/// (`CL_MEM_SVM_ATOMICS`). `host_coherent` is the runtime's HIP_HOST_COHERENT
/// ([`hip_host_coherent`]). The rule of `ihipHostMalloc` in every runtime checked (5.2.3,
/// 5.7.1, 6.4.3, 7.2.4; docs/compat.md cites the lines): coherent when flags are 0, or any of
/// Coherent, Mapped, NumaUser is set, or none is and HIP_HOST_COHERENT is on; NonCoherent
/// then removes the atomics. So Portable or WriteCombined alone is already non-coherent.
///
/// For flags without Uncached. Uncached is a coherence flag in 7.x (where it may not be
/// combined with either coherence flag: hipErrorInvalidValue) and no flag at all before 7.0;
/// [`non_coherent_host_flags`] leaves every Uncached request alone.
pub fn runtime_makes_coherent(flags: u32, host_coherent: bool) -> bool {
    let coherence = host_malloc::COHERENT | host_malloc::MAPPED | host_malloc::NUMA_USER;
    flags & host_malloc::NON_COHERENT == 0
        && (flags == 0 || flags & coherence != 0 || host_coherent)
}

/// hipHostMalloc flags that make a coherent request non-coherent, or None when the call must
/// go through as it is: the runtime already makes it non-coherent ([`runtime_makes_coherent`]:
/// NonCoherent set, or Portable / WriteCombined alone with HIP_HOST_COHERENT off), a caller
/// error the runtime should answer (Coherent together with NonCoherent), Uncached (7.x:
/// coherent, and NonCoherent may not be added; before 7.0 a bit the runtime does not
/// define), or bits no released runtime defines.
pub fn non_coherent_host_flags(flags: u32, host_coherent: bool) -> Option<u32> {
    let both = host_malloc::COHERENT | host_malloc::NON_COHERENT;
    if flags & both == both
        || flags & host_malloc::UNCACHED != 0
        || flags & !host_malloc::KNOWN != 0
        || !runtime_makes_coherent(flags, host_coherent)
    {
        return None;
    }
    Some((flags & !host_malloc::COHERENT) | host_malloc::NON_COHERENT)
}

/// HIP_HOST_COHERENT as the runtime reads it: `release(uint, HIP_HOST_COHERENT, 0, ...)` in
/// rocclr's `utils/flags.hpp`, set by `Flag::setValue` with `atoi(value)` (glibc's
/// `(int) strtol(value, NULL, 10)`), and tested for non-zero by `ihipHostMalloc`. `Flag::init`
/// takes a variable set to the empty string as `" "`. So: leading white space, an optional
/// sign, decimal digits up to the first other byte; a value past `long`'s range saturates
/// (`strtol`); the low 32 bits decide. `1`, `-1`, ` 7`, `2abc` are on; unset, empty, `0`,
/// `true`, `yes`, `0x1`, `4294967296` are off.
pub fn hip_host_coherent(value: Option<&[u8]>) -> bool {
    let Some(value) = value else {
        return false;
    };
    let mut rest = value;
    // C's isspace in the "C" locale.
    while let [b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r', tail @ ..] = rest {
        rest = tail;
    }
    let negative = match rest {
        [b'-', tail @ ..] => {
            rest = tail;
            true
        }
        [b'+', tail @ ..] => {
            rest = tail;
            false
        }
        _ => false,
    };
    // The magnitude, saturated just past i64's range (strtol's ERANGE).
    let mut magnitude: u64 = 0;
    for &b in rest.iter().take_while(|b| b.is_ascii_digit()) {
        magnitude = magnitude
            .saturating_mul(10)
            .saturating_add(u64::from(b - b'0'));
    }
    let long: i64 = if negative {
        if magnitude > i64::MAX as u64 {
            i64::MIN
        } else {
            -(magnitude as i64)
        }
    } else {
        i64::try_from(magnitude).unwrap_or(i64::MAX)
    };
    // `(int) long`: the low 32 bits.
    long as i32 != 0
}

/// The decision for one hooked call. Inlined into each hook, where the hook is a constant
/// and the match on it folds away.
#[inline(always)]
pub fn decide(hook: Hook, flags: u32, rules: &Rules, facts: &impl Facts) -> Decision {
    if rules.mode == Mode::Off {
        return Decision::Unchanged;
    }
    let candidate = match hook {
        Hook::HipHostMalloc => non_coherent_host_flags(flags, rules.host_coherent)
            .filter(|_| facts.host_affected())
            .map(Forward::HostMalloc),
        // Its own path is hipHostMalloc with flags 0: coherent.
        Hook::HipMemAllocHost => facts
            .host_affected()
            .then_some(Forward::HostMalloc(host_malloc::NON_COHERENT)),
        // From 6.3 on, ihipHostMalloc with the caller's flags, after checking them: the same
        // rule as hipHostMalloc.
        Hook::HipHostAlloc => (flags & !host_alloc::VALID == 0
            && runtime_makes_coherent(flags, rules.host_coherent)
            && facts.host_affected()
            && facts.host_alloc_is_host())
        .then_some(Forward::HostMalloc(flags | host_malloc::NON_COHERENT)),
        Hook::HipExtMallocWithFlags => (flags == device_malloc::FINEGRAINED
            && rules.finegrained == Finegrained::Coarsen
            && facts.device_affected())
        .then_some(Forward::ExtMallocWithFlags(device_malloc::DEFAULT)),
        // Already coarse-grained, or nothing the runtime honours: counted, not changed.
        Hook::HipMalloc
        | Hook::HipMallocHost
        | Hook::HipMallocManaged
        | Hook::HipHostRegister
        | Hook::HipMallocAsync
        | Hook::HipMallocFromPoolAsync
        | Hook::HipGetProcAddress
        | Hook::HipGetDriverEntryPoint
        | Hook::HipGetDriverEntryPointSpt
        // Not an allocation: counted, and its name kept for the fault report.
        | Hook::HipModuleGetFunction
        // Not allocations: what a module load does with its image is `module_load`'s.
        | Hook::HipModuleLoadData
        | Hook::HipModuleLoadDataEx
        | Hook::HipModuleLoad
        | Hook::HipModuleUnload
        // Not allocations: calls that wait for the GPU (the watchdog's), forwarded as they are.
        | Hook::HipDeviceSynchronize
        | Hook::HipStreamSynchronize
        | Hook::HipStreamSynchronizeSpt
        | Hook::HipEventSynchronize
        | Hook::HipMemcpy
        | Hook::HipMemcpyDtoH
        // Counted (host locations too: `host_location`), never changed.
        | Hook::HipMemCreate => None,
    };
    match candidate {
        None => Decision::Unchanged,
        Some(_) if facts.caller_exempt() => Decision::Unchanged,
        Some(f) if rules.mode == Mode::DryRun => Decision::WouldRewrite(f),
        Some(f) => Decision::Rewrite(f),
    }
}

/// Whether a successful call left memory coherent that no flag can make non-coherent, so the
/// shim cannot change it (counted as `coherent` in the stats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftCoherent {
    No,
    /// hipHostRegister: every runtime checked registers host memory fine-grained with atomics
    /// whatever the flags (`CL_MEM_USE_HOST_PTR | CL_MEM_SVM_ATOMICS`; 7.2.4 accepts
    /// hipExtHostRegisterCoarseGrained and ignores it). docs/compat.md cites the lines.
    Yes,
    /// hipHostMalloc / hipHostAlloc with Uncached: coherent where the runtime defines the
    /// flag (7.x, [`uncached_defined`]), which rejects it together with NonCoherent.
    IfUncachedDefined,
}

/// [`LeftCoherent`] for a call the shim forwarded as the caller asked.
pub fn left_coherent(hook: Hook, flags: u32) -> LeftCoherent {
    let coherence = host_malloc::COHERENT | host_malloc::NON_COHERENT;
    match hook {
        Hook::HipHostRegister => LeftCoherent::Yes,
        Hook::HipHostMalloc | Hook::HipHostAlloc
            if flags & host_malloc::UNCACHED != 0 && flags & coherence == 0 =>
        {
            LeftCoherent::IfUncachedDefined
        }
        _ => LeftCoherent::No,
    }
}

/// Whether a runtime reporting `version` gives hipHostMallocUncached a meaning (7.0 on).
pub fn uncached_defined(version: i32) -> bool {
    split_hip_version(version).0 >= 7
}

/// Whether a `hipMemLocationType` names host memory (Host, HostNuma, HostNumaCurrent): what
/// the stats count as `host_location` for hipMemCreate.
pub fn host_location(location_type: i32) -> bool {
    matches!(
        location_type,
        mem_location::HOST | mem_location::HOST_NUMA | mem_location::HOST_NUMA_CURRENT
    )
}

/// First runtime whose hipHostAlloc allocates host memory like hipHostMalloc: ROCm 6.3.0
/// (ROCm/clr e988e5e4 "Un-deprecate hipHostAlloc()" and 1e4c60f2, on the 6.3 branch as
/// 1595b958 and d962d399). Up to 6.2.4 it passes its flags to ihipMalloc as internal
/// flags and allocates VRAM on the current device.
pub const HOST_ALLOC_IS_HOST_SINCE: (i32, i32) = (6, 3);

/// Whether a runtime reporting `hipRuntimeGetVersion` = `version` allocates host memory in
/// hipHostAlloc (the answer to [`Facts::host_alloc_is_host`]).
pub fn host_alloc_is_host(version: i32) -> bool {
    let (major, minor, _) = split_hip_version(version);
    (major, minor) >= HOST_ALLOC_IS_HOST_SINCE
}

/// A rewritten call that failed with `rc` is retried once exactly as the caller asked,
/// unless it succeeded or ran out of memory (asking again for the same bytes would not help).
pub fn retry_as_asked(rc: HipError) -> bool {
    rc != error::SUCCESS && rc != error::OUT_OF_MEMORY
}

/// hipGetProcAddress hands back the shim's function for a hooked name unless rmcp is off.
pub fn substitute_proc_address(mode: Mode) -> bool {
    mode != Mode::Off
}

/// dlsym on a runtime handle hands back the shim's function for a hooked name when
/// hipGetProcAddress would, and RMCP_HOOK_DLSYM has not turned it off.
pub fn substitute_dlsym(mode: Mode, hook_dlsym: bool) -> bool {
    hook_dlsym && substitute_proc_address(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp_sys::host_malloc::*;
    use std::cell::Cell;

    /// Facts with fixed answers that count how often each was asked.
    #[derive(Default)]
    struct Fixed {
        host: bool,
        device: bool,
        exempt: bool,
        old_host_alloc: bool,
        asked_device: Cell<u32>,
        asked_exempt: Cell<u32>,
        asked_version: Cell<u32>,
    }
    impl Facts for Fixed {
        fn host_affected(&self) -> bool {
            self.host
        }
        fn device_affected(&self) -> bool {
            self.asked_device.set(self.asked_device.get() + 1);
            self.device
        }
        fn caller_exempt(&self) -> bool {
            self.asked_exempt.set(self.asked_exempt.get() + 1);
            self.exempt
        }
        fn host_alloc_is_host(&self) -> bool {
            self.asked_version.set(self.asked_version.get() + 1);
            !self.old_host_alloc
        }
    }

    fn rules(mode: Mode) -> Rules {
        Rules {
            mode,
            finegrained: Finegrained::Coarsen,
            host_coherent: false,
        }
    }

    const NC: u32 = NON_COHERENT;
    use Decision::*;
    use Forward::*;

    /// (hook, flags, host affected, device affected, expected in auto/force)
    const TABLE: &[(Hook, u32, bool, bool, Decision)] = &[
        // hipHostMalloc: every coherent request becomes non-coherent
        (
            Hook::HipHostMalloc,
            DEFAULT,
            true,
            true,
            Rewrite(HostMalloc(NC)),
        ),
        (
            Hook::HipHostMalloc,
            DEFAULT,
            true,
            false,
            Rewrite(HostMalloc(NC)),
        ),
        (
            Hook::HipHostMalloc,
            MAPPED,
            true,
            false,
            Rewrite(HostMalloc(MAPPED | NC)),
        ),
        (
            Hook::HipHostMalloc,
            COHERENT,
            true,
            false,
            Rewrite(HostMalloc(NC)),
        ),
        (
            Hook::HipHostMalloc,
            COHERENT | MAPPED | PORTABLE,
            true,
            false,
            Rewrite(HostMalloc(MAPPED | PORTABLE | NC)),
        ),
        (
            Hook::HipHostMalloc,
            NUMA_USER,
            true,
            false,
            Rewrite(HostMalloc(NUMA_USER | NC)),
        ),
        // Portable and WriteCombined carry no coherence: already non-coherent
        (Hook::HipHostMalloc, PORTABLE, true, true, Unchanged),
        (Hook::HipHostMalloc, WRITE_COMBINED, true, true, Unchanged),
        (
            Hook::HipHostMalloc,
            PORTABLE | WRITE_COMBINED,
            true,
            true,
            Unchanged,
        ),
        (
            Hook::HipHostMalloc,
            PORTABLE | WRITE_COMBINED | MAPPED,
            true,
            false,
            Rewrite(HostMalloc(PORTABLE | WRITE_COMBINED | MAPPED | NC)),
        ),
        (Hook::HipHostMalloc, DEFAULT, false, true, Unchanged),
        (Hook::HipHostMalloc, NC, true, true, Unchanged),
        (Hook::HipHostMalloc, NC | MAPPED, true, true, Unchanged),
        (Hook::HipHostMalloc, COHERENT | NC, true, true, Unchanged),
        (Hook::HipHostMalloc, UNCACHED, true, true, Unchanged),
        (
            Hook::HipHostMalloc,
            UNCACHED | MAPPED,
            true,
            true,
            Unchanged,
        ),
        (Hook::HipHostMalloc, 0x100, true, true, Unchanged),
        (
            Hook::HipHostMalloc,
            0x0800_0000 | MAPPED,
            true,
            true,
            Unchanged,
        ),
        // hipMemAllocHost: its own path is coherent
        (
            Hook::HipMemAllocHost,
            0,
            true,
            false,
            Rewrite(HostMalloc(NC)),
        ),
        (Hook::HipMemAllocHost, 0, false, true, Unchanged),
        // hipHostAlloc: only flags a validating runtime accepts
        (Hook::HipHostAlloc, 0, true, false, Rewrite(HostMalloc(NC))),
        (
            Hook::HipHostAlloc,
            MAPPED | PORTABLE | WRITE_COMBINED,
            true,
            false,
            Rewrite(HostMalloc(MAPPED | PORTABLE | WRITE_COMBINED | NC)),
        ),
        (Hook::HipHostAlloc, PORTABLE, true, true, Unchanged),
        (Hook::HipHostAlloc, WRITE_COMBINED, true, true, Unchanged),
        (Hook::HipHostAlloc, UNCACHED, true, true, Unchanged),
        (Hook::HipHostAlloc, UNCACHED | MAPPED, true, true, Unchanged),
        (Hook::HipHostAlloc, COHERENT, true, true, Unchanged),
        (Hook::HipHostAlloc, NC, true, true, Unchanged),
        (Hook::HipHostAlloc, 0x8, true, true, Unchanged),
        (Hook::HipHostAlloc, MAPPED, false, true, Unchanged),
        // hipExtMallocWithFlags: fine-grained VRAM becomes coarse on the current device
        (
            Hook::HipExtMallocWithFlags,
            device_malloc::FINEGRAINED,
            false,
            true,
            Rewrite(ExtMallocWithFlags(device_malloc::DEFAULT)),
        ),
        (
            Hook::HipExtMallocWithFlags,
            device_malloc::FINEGRAINED,
            true,
            false,
            Unchanged,
        ),
        (
            Hook::HipExtMallocWithFlags,
            device_malloc::DEFAULT,
            true,
            true,
            Unchanged,
        ),
        (
            Hook::HipExtMallocWithFlags,
            device_malloc::SIGNAL_MEMORY,
            true,
            true,
            Unchanged,
        ),
        (
            Hook::HipExtMallocWithFlags,
            device_malloc::UNCACHED,
            true,
            true,
            Unchanged,
        ),
        (
            Hook::HipExtMallocWithFlags,
            device_malloc::CONTIGUOUS,
            true,
            true,
            Unchanged,
        ),
        (Hook::HipExtMallocWithFlags, 5, true, true, Unchanged),
        (
            Hook::HipExtMallocWithFlags,
            device_malloc::FINEGRAINED | 0x100,
            true,
            true,
            Unchanged,
        ),
        // counted only
        (Hook::HipMalloc, 0, true, true, Unchanged),
        (Hook::HipMallocHost, 0, true, true, Unchanged),
        (Hook::HipMallocManaged, 1, true, true, Unchanged),
        (Hook::HipHostRegister, 0, true, true, Unchanged),
        (Hook::HipHostRegister, 2, true, true, Unchanged),
        (Hook::HipMallocAsync, 0, true, true, Unchanged),
        (Hook::HipMallocFromPoolAsync, 0, true, true, Unchanged),
        (Hook::HipGetProcAddress, 0, true, true, Unchanged),
        (Hook::HipGetDriverEntryPoint, 0, true, true, Unchanged),
        (Hook::HipGetDriverEntryPointSpt, 0, true, true, Unchanged),
        (Hook::HipMemCreate, 0, true, true, Unchanged),
    ];

    fn facts(host: bool, device: bool, exempt: bool) -> Fixed {
        Fixed {
            host,
            device,
            exempt,
            ..Fixed::default()
        }
    }

    #[test]
    fn rewrite_table_in_every_mode() {
        for &(hook, flags, host, device, expected) in TABLE {
            let f = facts(host, device, false);
            let ctx = format!("{hook:?} flags={flags:#x} host={host} device={device}");
            assert_eq!(
                decide(hook, flags, &rules(Mode::Auto), &f),
                expected,
                "auto {ctx}"
            );
            assert_eq!(
                decide(hook, flags, &rules(Mode::Force), &f),
                expected,
                "force {ctx}"
            );
            assert_eq!(
                decide(hook, flags, &rules(Mode::Off), &f),
                Unchanged,
                "off {ctx}"
            );
            let dry = match expected {
                Rewrite(fw) => WouldRewrite(fw),
                other => other,
            };
            assert_eq!(
                decide(hook, flags, &rules(Mode::DryRun), &f),
                dry,
                "dry-run {ctx}"
            );
        }
    }

    #[test]
    fn exempt_callers_are_left_alone_in_every_mode() {
        for &(hook, flags, host, device, _) in TABLE {
            for mode in [Mode::Auto, Mode::Force, Mode::DryRun, Mode::Off] {
                let f = facts(host, device, true);
                assert_eq!(decide(hook, flags, &rules(mode), &f), Unchanged);
            }
        }
    }

    #[test]
    fn costly_facts_are_asked_only_when_they_decide() {
        for &(hook, flags, host, device, expected) in TABLE {
            let f = facts(host, device, false);
            decide(hook, flags, &rules(Mode::Auto), &f);
            let exempt_asked = f.asked_exempt.get();
            assert_eq!(
                exempt_asked,
                u32::from(expected != Unchanged),
                "{hook:?} {flags:#x}: caller looked up {exempt_asked} times"
            );
            assert!(f.asked_device.get() <= 1);
            if hook != Hook::HipExtMallocWithFlags {
                assert_eq!(
                    f.asked_device.get(),
                    0,
                    "{hook:?} asked for the current device"
                );
            }
        }
        let f = facts(true, true, false);
        decide(Hook::HipHostMalloc, 0, &rules(Mode::Off), &f);
        assert_eq!(f.asked_exempt.get(), 0);
    }

    #[test]
    fn keep_finegrained_leaves_device_memory() {
        let r = Rules {
            finegrained: Finegrained::Keep,
            ..rules(Mode::Force)
        };
        let f = facts(true, true, false);
        assert_eq!(
            decide(
                Hook::HipExtMallocWithFlags,
                device_malloc::FINEGRAINED,
                &r,
                &f
            ),
            Unchanged
        );
        assert_eq!(
            decide(Hook::HipHostMalloc, 0, &r, &f),
            Rewrite(HostMalloc(NC))
        );
    }

    #[test]
    fn old_runtime_host_alloc_is_left_alone() {
        let r = rules(Mode::Force);
        let f = Fixed {
            old_host_alloc: true,
            ..facts(true, true, false)
        };
        for flags in [0, PORTABLE, MAPPED, WRITE_COMBINED] {
            assert_eq!(decide(Hook::HipHostAlloc, flags, &r, &f), Unchanged);
        }
        // The runtime's version is asked only for hipHostAlloc calls it can change: flags 0
        // and Mapped (coherent), not Portable or WriteCombined (already non-coherent).
        assert_eq!(f.asked_version.get(), 2);
        decide(Hook::HipHostAlloc, COHERENT, &r, &f);
        decide(Hook::HipHostMalloc, 0, &r, &f);
        decide(Hook::HipHostAlloc, 0, &rules(Mode::Off), &f);
        assert_eq!(f.asked_version.get(), 2);
    }

    #[test]
    fn rewritten_host_flags_are_never_both_and_are_idempotent() {
        for (flags, hc) in (0..=0xffu32)
            .chain([COHERENT, NUMA_USER, COHERENT | 0x7, NUMA_USER | 0x3])
            .flat_map(|f| [(f, false), (f, true)])
        {
            if let Some(out) = non_coherent_host_flags(flags, hc) {
                assert_ne!(out & (COHERENT | NC), COHERENT | NC, "{flags:#x}");
                assert_ne!(out & NC, 0);
                assert_eq!(
                    non_coherent_host_flags(out, hc),
                    None,
                    "{flags:#x} rewritten twice"
                );
                assert_eq!(
                    out & !(COHERENT | NC),
                    flags & !(COHERENT | NC),
                    "other bits kept"
                );
            }
        }
    }

    #[test]
    fn retry_and_proc_address_rules() {
        assert!(!retry_as_asked(error::SUCCESS));
        assert!(!retry_as_asked(error::OUT_OF_MEMORY));
        for rc in [
            error::INVALID_VALUE,
            error::INVALID_DEVICE,
            error::NOT_SUPPORTED,
            error::UNKNOWN,
            -1,
        ] {
            assert!(retry_as_asked(rc), "{rc}");
        }
        for mode in [Mode::Auto, Mode::Force, Mode::DryRun] {
            assert!(substitute_proc_address(mode), "{mode:?}");
            assert!(substitute_dlsym(mode, true), "{mode:?}");
            assert!(!substitute_dlsym(mode, false), "{mode:?}");
        }
        assert!(!substitute_proc_address(Mode::Off));
        assert!(!substitute_dlsym(Mode::Off, true));
    }

    /// What each runtime's `ihipHostMalloc` does with `flags`, written from its source
    /// (docs/compat.md cites the lines), independently of the policy above: Err is
    /// hipErrorInvalidValue, Ok(true) coherent (CL_MEM_SVM_ATOMICS), Ok(false) not.
    fn runtime_host_malloc(version: (i32, i32), flags: u32, hc: bool) -> Result<bool, ()> {
        if flags & (COHERENT | NC) == COHERENT | NC {
            return Err(());
        }
        let mut coherence = COHERENT | MAPPED | NUMA_USER;
        if version >= (7, 0) {
            if flags & UNCACHED != 0 && flags & (COHERENT | NC) != 0 {
                return Err(());
            }
            coherence |= UNCACHED;
        }
        let mut atomics = flags == 0 || flags & coherence != 0 || (flags & NC == 0 && hc);
        if flags & NC != 0 {
            atomics = false;
        }
        Ok(atomics)
    }

    /// `hipHostAlloc`: None before 6.3 (internal flags to ihipMalloc, VRAM); then its flag
    /// check (6.4.3: `flags > 7`; 7.2.4: anything outside Portable|Mapped|WriteCombined|
    /// Uncached) and ihipHostMalloc.
    fn runtime_host_alloc(version: (i32, i32), flags: u32, hc: bool) -> Option<Result<bool, ()>> {
        if version < (6, 3) {
            return None;
        }
        let mut valid = PORTABLE | MAPPED | WRITE_COMBINED;
        if version >= (7, 0) {
            valid |= UNCACHED;
        }
        if flags & !valid != 0 {
            return Some(Err(()));
        }
        Some(runtime_host_malloc(version, flags, hc))
    }

    /// Every subset of the bits a released runtime defines, plus a few it does not.
    fn every_flag_combination() -> impl Iterator<Item = u32> {
        let bits = [
            PORTABLE,
            MAPPED,
            WRITE_COMBINED,
            UNCACHED,
            NUMA_USER,
            COHERENT,
            NC,
        ];
        (0u32..1 << bits.len()).flat_map(move |set| {
            let flags = bits
                .iter()
                .enumerate()
                .filter(|(i, _)| set & (1 << i) != 0)
                .fold(0, |a, (_, b)| a | b);
            [flags, flags | 0x8, flags | 0x100, flags | 0x0800_0000]
        })
    }

    const RUNTIMES: [(i32, i32, i32); 4] = [
        (5, 2, 50_221_153),
        (5, 7, 50_731_921),
        (6, 4, 60_443_484),
        (7, 2, 70_253_211),
    ];

    /// The shim's decision for every flag combination, on every runtime checked, with
    /// HIP_HOST_COHERENT off and on, against that runtime's rule: a call is rewritten exactly
    /// when the runtime would make it coherent and the rewrite makes it non-coherent with every
    /// other bit kept; a call left alone is one the runtime already makes non-coherent or
    /// rejects, or one no flag can change (7.x Uncached), or one with a bit that runtime
    /// does not define.
    #[test]
    fn every_flag_combination_against_each_runtimes_rule() {
        let keep = !(COHERENT | NC);
        for (major, minor, version) in RUNTIMES {
            let v = (major, minor);
            let old_host_alloc = !host_alloc_is_host(version);
            for hc in [false, true] {
                let r = Rules {
                    host_coherent: hc,
                    ..rules(Mode::Force)
                };
                let f = Fixed {
                    old_host_alloc,
                    ..facts(true, true, false)
                };
                let undefined =
                    |flags: u32| flags & !KNOWN != 0 || (v < (7, 0) && flags & UNCACHED != 0);
                for flags in every_flag_combination() {
                    let ctx = format!("{major}.{minor} HIP_HOST_COHERENT={hc} flags={flags:#x}");
                    // hipHostMalloc
                    let asked = runtime_host_malloc(v, flags, hc);
                    match decide(Hook::HipHostMalloc, flags, &r, &f) {
                        Rewrite(HostMalloc(out)) => {
                            assert_eq!(
                                asked,
                                Ok(true),
                                "{ctx}: rewrote a call that is not coherent"
                            );
                            assert_eq!(
                                runtime_host_malloc(v, out, hc),
                                Ok(false),
                                "{ctx} -> {out:#x}"
                            );
                            assert_eq!(out & keep, flags & keep, "{ctx}: other bits");
                            assert!(!undefined(flags), "{ctx}: rewrote an undefined bit");
                        }
                        Unchanged => {
                            let beyond_reach = flags & UNCACHED != 0
                                && v >= (7, 0)
                                && runtime_host_malloc(v, flags | NC, hc).is_err();
                            assert!(
                                asked != Ok(true) || beyond_reach || undefined(flags),
                                "{ctx}: left a coherent call that could be made non-coherent"
                            );
                        }
                        other => panic!("{ctx}: {other:?}"),
                    }
                    // hipHostAlloc
                    let asked = runtime_host_alloc(v, flags, hc);
                    match decide(Hook::HipHostAlloc, flags, &r, &f) {
                        Rewrite(HostMalloc(out)) => {
                            assert_eq!(asked, Some(Ok(true)), "hipHostAlloc {ctx}");
                            assert_eq!(
                                runtime_host_malloc(v, out, hc),
                                Ok(false),
                                "hipHostAlloc {ctx}"
                            );
                            assert_eq!(out & keep, flags & keep, "hipHostAlloc {ctx}");
                        }
                        Unchanged => assert!(
                            asked != Some(Ok(true)) || flags & UNCACHED != 0,
                            "hipHostAlloc {ctx}: left a coherent call"
                        ),
                        other => panic!("hipHostAlloc {ctx}: {other:?}"),
                    }
                }
            }
        }
    }

    /// The two cases, spelled out: Portable alone and WriteCombined alone reach the
    /// runtime unchanged, unless HIP_HOST_COHERENT makes them coherent.
    #[test]
    fn portable_and_write_combined_follow_hip_host_coherent() {
        let f = facts(true, true, false);
        for hook in [Hook::HipHostMalloc, Hook::HipHostAlloc] {
            for flags in [PORTABLE, WRITE_COMBINED, PORTABLE | WRITE_COMBINED] {
                assert_eq!(decide(hook, flags, &rules(Mode::Force), &f), Unchanged);
                let on = Rules {
                    host_coherent: true,
                    ..rules(Mode::Force)
                };
                assert_eq!(
                    decide(hook, flags, &on, &f),
                    Rewrite(HostMalloc(flags | NC)),
                    "{hook:?} {flags:#x}"
                );
            }
        }
    }

    #[test]
    fn hip_host_coherent_is_read_as_the_runtime_reads_it() {
        let on = |v: &str| hip_host_coherent(Some(v.as_bytes()));
        assert!(!hip_host_coherent(None));
        for v in [
            "1",
            "2",
            "-1",
            " 1",
            "\t\n1",
            "+1",
            "1abc",
            "01",
            "4294967297",
            "9223372036854775807",
            "99999999999999999999",
            "-4294967295",
        ] {
            assert!(on(v), "{v:?} is on");
        }
        for v in [
            "",
            " ",
            "0",
            "00",
            "-0",
            "true",
            "yes",
            "on",
            "0x1",
            "x1",
            "4294967296",
            "-4294967296",
            "-99999999999999999999",
            "- 1",
            "+-1",
        ] {
            assert!(!on(v), "{v:?} is off");
        }
        // Not UTF-8: bytes, as the runtime reads them.
        assert!(hip_host_coherent(Some(b"1\xff")));
        assert!(!hip_host_coherent(Some(b"\xff1")));
    }

    #[test]
    fn what_stays_coherent_whatever_the_shim_does() {
        use LeftCoherent::*;
        for flags in [0, 1, 2, 8, 0x8000_0000] {
            assert_eq!(left_coherent(Hook::HipHostRegister, flags), Yes);
        }
        for hook in [Hook::HipHostMalloc, Hook::HipHostAlloc] {
            assert_eq!(left_coherent(hook, UNCACHED), IfUncachedDefined);
            assert_eq!(left_coherent(hook, UNCACHED | MAPPED), IfUncachedDefined);
            assert_eq!(left_coherent(hook, UNCACHED | NC), No, "rejected by 7.x");
            assert_eq!(
                left_coherent(hook, UNCACHED | COHERENT),
                No,
                "rejected by 7.x"
            );
            assert_eq!(left_coherent(hook, 0), No, "rewritten, or exempt by choice");
        }
        assert_eq!(left_coherent(Hook::HipMemCreate, 0), No);
        assert_eq!(left_coherent(Hook::HipMalloc, 0), No);
        assert!(!uncached_defined(60_443_484));
        assert!(uncached_defined(70_253_211));
        assert!(!host_location(mem_location::DEVICE));
        assert!(!host_location(0));
        for t in [2, 3, 4] {
            assert!(host_location(t));
        }
    }
}
