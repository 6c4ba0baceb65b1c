//! The addresses of the body's entry points, which `exports` and `observed` define in
//! assembly: each hook's ordinary entry ([`entry`], what the front's export jumps to) and its
//! [`COPY_ENTRIES`] per-copy entries ([`copy_entry`], what `handout` hands out), and each
//! observed function's per-copy entries ([`observed_copy_entry`]). The labels
//! are named here and nowhere else ([`entry_label!`], [`copy_entries_label!`]), so that the
//! modules which hand these addresses out need not import the hooks' bodies (which import
//! them). Imports no module of this crate.

use std::ffi::c_void;

use rmcp_core::registry::Hook;

/// The label of a hook's entry (hidden: the library exports none of them).
macro_rules! entry_label {
    ($name:ident) => {
        concat!("rmcp_body_", stringify!($name))
    };
}
pub(crate) use entry_label;

/// The label of a hook's first per-copy entry; entry `k` is `COPY_ENTRY_SIZE * k` past it.
macro_rules! copy_entries_label {
    ($name:ident) => {
        concat!("rmcp_body_copies_", stringify!($name))
    };
}
pub(crate) use copy_entries_label;

/// How many runtime copies have entries of their own (`handout` hands out the runtime's own
/// function for copies past these, and says so).
pub(crate) const COPY_ENTRIES: usize = 8;
/// The bytes each per-copy entry takes: the assembler checks that each fits (`exports`).
pub(crate) const COPY_ENTRY_SIZE: usize = 16;
/// Per-copy entry `k` passes the caller's return address with bit `COPY_SLOT_SHIFT + k`
/// set (user-space addresses have 47 bits), so the body knows both the slot and the caller.
pub(crate) const COPY_SLOT_SHIFT: u32 = 56;
const _: () = assert!(COPY_SLOT_SHIFT as usize + COPY_ENTRIES <= 64);

/// The labels as symbols, from the table's rows.
macro_rules! labels {
    ($(
        $(#[$doc:meta])* $name:ident = $variant:ident ($($arg:ident : $ty:ty),*)
        => out: $out:expr, size: $size:expr, flags: $flags:expr
        $(, resolves $sym:ident into $pfn:ident)?
        $(, host location in $prop:ident)?
        $(, names $nfn:ident from $kname:ident)?
        $(, loads image from $image:ident)?
        $(, loads file $fname:ident)?
        $(, unloads module $umodule:ident)?
        $(, waits $wait:ident)? ;
    )*) => {
        mod entries {
            unsafe extern "C" {
                $(
                    #[link_name = entry_label!($name)]
                    pub(super) fn $name();
                )*
            }
        }

        mod copy_entries {
            unsafe extern "C" {
                $(
                    #[link_name = copy_entries_label!($name)]
                    pub(super) fn $name();
                )*
            }
        }

        /// The per-copy entry `slot` (below [`COPY_ENTRIES`]) for `hook`: calls through it
        /// reach slot `slot`'s copy (`handout`).
        pub(crate) fn copy_entry(hook: Hook, slot: usize) -> Option<*const c_void> {
            if slot >= COPY_ENTRIES {
                return None;
            }
            let first = match hook {
                $( Hook::$variant => copy_entries::$name as *const c_void, )*
            };
            Some(first.wrapping_byte_add(slot * COPY_ENTRY_SIZE))
        }

        /// This library's entry for `hook`, which the front's export jumps to.
        pub(crate) fn entry(hook: Hook) -> *const c_void {
            match hook {
                $( Hook::$variant => entries::$name as *const c_void, )*
            }
        }
    };
}

rmcp_sys::hooked_functions!(labels);

/// The label of an observed function's first per-copy entry; entry `k` is
/// `COPY_ENTRY_SIZE * k` past it (`observed` defines them).
macro_rules! observed_copies_label {
    ($name:ident) => {
        concat!("rmcp_body_observed_copies_", stringify!($name))
    };
}
pub(crate) use observed_copies_label;

macro_rules! observed_labels {
    ($( $(#[$doc:meta])* $name:ident = $variant:ident, $($word:ident)+ ; )*) => {
        mod observed_copy_entries {
            unsafe extern "C" {
                $(
                    #[link_name = observed_copies_label!($name)]
                    pub(super) fn $name();
                )*
            }
        }

        /// The per-copy entry `slot` (below [`COPY_ENTRIES`]) for the observed function `o`:
        /// calls through it reach slot `slot`'s copy's own `o` and are recorded
        /// (`handout`, `observed`).
        pub(crate) fn observed_copy_entry(
            o: rmcp_core::registry::Observed,
            slot: usize,
        ) -> Option<*const c_void> {
            if slot >= COPY_ENTRIES {
                return None;
            }
            let first = match o {
                $( rmcp_core::registry::Observed::$variant =>
                    observed_copy_entries::$name as *const c_void, )*
            };
            Some(first.wrapping_byte_add(slot * COPY_ENTRY_SIZE))
        }
    };
}

rmcp_sys::observed_functions!(observed_labels);

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp_core::registry::HOOKS;

    #[test]
    fn every_hook_has_a_distinct_entry() {
        let mut addrs: Vec<usize> = HOOKS.iter().map(|(h, _)| entry(*h) as usize).collect();
        assert!(addrs.iter().all(|a| *a != 0));
        addrs.sort();
        addrs.dedup();
        assert_eq!(addrs.len(), HOOKS.len());
    }

    #[test]
    fn every_hook_has_distinct_copy_entries() {
        let mut all = Vec::new();
        for (hook, _) in HOOKS {
            for k in 0..COPY_ENTRIES {
                all.push(copy_entry(hook, k).unwrap() as usize);
            }
            assert!(copy_entry(hook, COPY_ENTRIES).is_none());
            assert!(!all.contains(&(entry(hook) as usize)));
        }
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn every_observed_function_has_distinct_copy_entries() {
        let mut all = Vec::new();
        for (o, _) in rmcp_core::registry::OBSERVED {
            for k in 0..COPY_ENTRIES {
                all.push(observed_copy_entry(o, k).unwrap() as usize);
            }
            assert!(observed_copy_entry(o, COPY_ENTRIES).is_none());
        }
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
