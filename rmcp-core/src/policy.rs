//! The rewrite rules: given a hooked call's flags, what the device situation is and the
//! configuration, what does the runtime receive? Pure: no FFI, no sysfs, no logging.
//!
//! Facts that cost something to learn (the current device, the caller's library) are asked
//! through [`Facts`] only when the answer can change the decision.

use rmcp_sys::{HipError, device_malloc, error, host_alloc, host_malloc, split_hip_version};

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

/// hipHostMalloc flags that make it non-coherent, or None when the call must go through as
/// it is: already non-coherent, a caller error the runtime should answer (Coherent together
/// with NonCoherent), 7.x Uncached (may not be combined with a coherence flag), or bits no
/// released runtime defines.
pub fn non_coherent_host_flags(flags: u32) -> Option<u32> {
    let both = host_malloc::COHERENT | host_malloc::NON_COHERENT;
    if flags & both == both
        || flags & host_malloc::UNCACHED != 0
        || flags & !host_malloc::KNOWN != 0
        || flags & host_malloc::NON_COHERENT != 0
    {
        return None;
    }
    Some((flags & !host_malloc::COHERENT) | host_malloc::NON_COHERENT)
}

/// The decision for one hooked call. Inlined into each hook, where the hook is a constant
/// and the match on it folds away.
#[inline(always)]
pub fn decide(hook: Hook, flags: u32, rules: &Rules, facts: &impl Facts) -> Decision {
    if rules.mode == Mode::Off {
        return Decision::Unchanged;
    }
    let candidate = match hook {
        Hook::HipHostMalloc => non_coherent_host_flags(flags)
            .filter(|_| facts.host_affected())
            .map(Forward::HostMalloc),
        // Its own path is hipHostMalloc with flags 0: coherent.
        Hook::HipMemAllocHost => facts
            .host_affected()
            .then_some(Forward::HostMalloc(host_malloc::NON_COHERENT)),
        Hook::HipHostAlloc => {
            (flags & !host_alloc::VALID == 0 && facts.host_affected() && facts.host_alloc_is_host())
                .then_some(Forward::HostMalloc(flags | host_malloc::NON_COHERENT))
        }
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
        | Hook::HipGetProcAddress => None,
    };
    match candidate {
        None => Decision::Unchanged,
        Some(_) if facts.caller_exempt() => Decision::Unchanged,
        Some(f) if rules.mode == Mode::DryRun => Decision::WouldRewrite(f),
        Some(f) => Decision::Rewrite(f),
    }
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
        (
            Hook::HipHostMalloc,
            PORTABLE | WRITE_COMBINED,
            true,
            false,
            Rewrite(HostMalloc(PORTABLE | WRITE_COMBINED | NC)),
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
        // The runtime's version is asked only for hipHostAlloc calls it can change.
        assert_eq!(f.asked_version.get(), 4);
        decide(Hook::HipHostAlloc, COHERENT, &r, &f);
        decide(Hook::HipHostMalloc, 0, &r, &f);
        decide(Hook::HipHostAlloc, 0, &rules(Mode::Off), &f);
        assert_eq!(f.asked_version.get(), 4);
    }

    #[test]
    fn rewritten_host_flags_are_never_both_and_are_idempotent() {
        for flags in (0..=0xffu32).chain([COHERENT, NUMA_USER, COHERENT | 0x7, NUMA_USER | 0x3]) {
            if let Some(out) = non_coherent_host_flags(flags) {
                assert_ne!(out & (COHERENT | NC), COHERENT | NC, "{flags:#x}");
                assert_ne!(out & NC, 0);
                assert_eq!(
                    non_coherent_host_flags(out),
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
}
