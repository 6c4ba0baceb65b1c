//! Properties of the pure rewrite policy, over every hook, flag value and situation.

use proptest::prelude::*;
use rmcp_core::config::{Finegrained, Mode};
use rmcp_core::policy::{Decision, Facts, Forward, Rules, decide};
use rmcp_core::registry::{HOOKS, Hook};
use rmcp_sys::{device_malloc, host_malloc};

#[derive(Clone, Copy, Debug)]
struct F(bool, bool, bool, bool);
impl Facts for F {
    fn host_affected(&self) -> bool {
        self.0
    }
    fn device_affected(&self) -> bool {
        self.1
    }
    fn caller_exempt(&self) -> bool {
        self.2
    }
    fn host_alloc_is_host(&self) -> bool {
        self.3
    }
}

fn hook() -> impl Strategy<Value = Hook> {
    (0..HOOKS.len()).prop_map(|i| HOOKS[i].0)
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Auto),
        Just(Mode::Force),
        Just(Mode::DryRun),
        Just(Mode::Off)
    ]
}

fn rules() -> impl Strategy<Value = Rules> {
    (mode(), any::<bool>(), any::<bool>()).prop_map(|(mode, keep, host_coherent)| Rules {
        mode,
        finegrained: if keep {
            Finegrained::Keep
        } else {
            Finegrained::Coarsen
        },
        host_coherent,
    })
}

/// Flag values weighted towards the bits that mean something.
fn flags() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        (0u32..8),
        proptest::sample::subsequence(
            vec![
                0x1u32,
                0x2,
                0x4,
                0x1000_0000,
                0x2000_0000,
                0x4000_0000,
                0x8000_0000
            ],
            0..=7
        )
        .prop_map(|bits| bits.into_iter().fold(0, |a, b| a | b)),
    ]
}

fn facts() -> impl Strategy<Value = F> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>())
        .prop_map(|(a, b, c, d)| F(a, b, c, d))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn off_is_the_identity(h in hook(), f in flags(), r in rules(), x in facts()) {
        let r = Rules { mode: Mode::Off, ..r };
        prop_assert_eq!(decide(h, f, &r, &x), Decision::Unchanged);
    }

    #[test]
    fn dry_run_never_applies(h in hook(), f in flags(), r in rules(), x in facts()) {
        let r = Rules { mode: Mode::DryRun, ..r };
        prop_assert!(!matches!(decide(h, f, &r, &x), Decision::Rewrite(_)));
        // ...and it reports what auto would do.
        let auto = decide(h, f, &Rules { mode: Mode::Auto, ..r }, &x);
        prop_assert_eq!(decide(h, f, &r, &x).forward(), auto.forward());
    }

    #[test]
    fn never_both_coherent_and_non_coherent(h in hook(), f in flags(), r in rules(), x in facts()) {
        if let Some(Forward::HostMalloc(out)) = decide(h, f, &r, &x).forward() {
            let both = host_malloc::COHERENT | host_malloc::NON_COHERENT;
            prop_assert_ne!(out & both, both);
            prop_assert_ne!(out & host_malloc::NON_COHERENT, 0);
            prop_assert_eq!(out & host_malloc::UNCACHED, 0);
        }
    }

    #[test]
    fn rewriting_is_idempotent(f in flags(), r in rules(), x in facts()) {
        if let Some(Forward::HostMalloc(out)) = decide(Hook::HipHostMalloc, f, &r, &x).forward() {
            prop_assert_eq!(decide(Hook::HipHostMalloc, out, &r, &x), Decision::Unchanged);
        }
        if let Some(Forward::ExtMallocWithFlags(out)) = decide(Hook::HipExtMallocWithFlags, f, &r, &x).forward() {
            prop_assert_eq!(decide(Hook::HipExtMallocWithFlags, out, &r, &x), Decision::Unchanged);
        }
    }

    #[test]
    fn only_finegrained_device_memory_changes(f in flags(), r in rules(), x in facts()) {
        let d = decide(Hook::HipExtMallocWithFlags, f, &r, &x);
        if f != device_malloc::FINEGRAINED {
            prop_assert_eq!(d, Decision::Unchanged, "flag {:#x}", f);
        } else if let Some(fw) = d.forward() {
            prop_assert_eq!(fw, Forward::ExtMallocWithFlags(device_malloc::DEFAULT));
        }
    }

    #[test]
    fn other_bits_are_kept(f in flags(), r in rules(), x in facts()) {
        let keep = !(host_malloc::COHERENT | host_malloc::NON_COHERENT);
        if let Some(Forward::HostMalloc(out)) = decide(Hook::HipHostMalloc, f, &r, &x).forward() {
            prop_assert_eq!(out & keep, f & keep);
        }
        if let Some(Forward::HostMalloc(out)) = decide(Hook::HipHostAlloc, f, &r, &x).forward() {
            prop_assert_eq!(out & keep, f & keep);
        }
    }

    #[test]
    fn exempt_or_unaffected_callers_are_left_alone(h in hook(), f in flags(), r in rules()) {
        prop_assert_eq!(decide(h, f, &r, &F(true, true, true, true)), Decision::Unchanged);
        prop_assert_eq!(decide(h, f, &r, &F(false, false, false, true)), Decision::Unchanged);
    }

    #[test]
    fn counted_only_hooks_are_never_changed(f in flags(), r in rules(), x in facts()) {
        for h in [Hook::HipMalloc, Hook::HipMallocHost, Hook::HipMallocManaged, Hook::HipHostRegister,
                  Hook::HipMallocAsync, Hook::HipMallocFromPoolAsync, Hook::HipGetProcAddress] {
            prop_assert_eq!(decide(h, f, &r, &x), Decision::Unchanged);
        }
    }
}
