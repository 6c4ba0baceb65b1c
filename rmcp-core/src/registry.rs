//! The hooked HIP functions as rmcp names them: `Hook`, its per-hook tables and names.
//!
//! Generated from the one table, `rmcp_sys::hooked_functions!`, like the shim's exports and
//! its linker version script, so the lists cannot drift apart: adding a row there adds the
//! variant here, the export and the runtime pointer there, or the build fails (the policy's
//! `match` on `Hook` is exhaustive).

/// `true` for a row with `resolves SYMBOL into PFN`.
macro_rules! resolves {
    () => {
        false
    };
    ($sym:ident) => {
        true
    };
}

macro_rules! registry {
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
        /// A hooked HIP entry point. The discriminant indexes per-hook tables (stats,
        /// warnings).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Hook {
            $( $(#[$doc])* $variant, )*
        }

        /// Every hook with its exported C name, in `Hook` order.
        pub const HOOKS: [(Hook, &str); Hook::COUNT] = [
            $( (Hook::$variant, stringify!($name)), )*
        ];

        impl Hook {
            pub const COUNT: usize = [$(stringify!($name)),*].len();

            /// Whether this function hands out function pointers by name
            /// (hipGetProcAddress, hipGetDriverEntryPoint): the shim substitutes its own for
            /// hooked names.
            pub const fn resolves_names(self) -> bool {
                match self {
                    $( Hook::$variant => resolves!($($sym)?), )*
                }
            }
        }
    };
}

rmcp_sys::hooked_functions!(registry);

macro_rules! observed_registry {
    ($( $(#[$doc:meta])* $name:ident = $variant:ident, $($word:ident)+ ; )*) => {
        /// An observed entry point (`rmcp_sys::observed_functions!`): forwarded untouched,
        /// with one fact recorded on the way. The discriminant indexes per-row tables.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Observed {
            $( $(#[$doc])* $variant, )*
        }

        /// Every observed entry point with its exported C name, in `Observed` order.
        pub const OBSERVED: [(Observed, &str); Observed::COUNT] = [
            $( (Observed::$variant, stringify!($name)), )*
        ];

        impl Observed {
            pub const COUNT: usize = [$(stringify!($name)),*].len();
        }
    };
}

rmcp_sys::observed_functions!(observed_registry);

impl Observed {
    pub const fn index(self) -> usize {
        self as usize
    }

    pub const fn name(self) -> &'static str {
        OBSERVED[self as usize].1
    }

    /// The observed entry point exported under `name`.
    pub fn from_name(name: &[u8]) -> Option<Observed> {
        OBSERVED
            .iter()
            .find(|(_, n)| n.as_bytes() == name)
            .map(|(o, _)| *o)
    }
}

/// Exported functions that are not HIP entry points: the lookups `dlsym` and `dlvsym`, so
/// that callers which look HIP up on a handle get the hooks too.
pub const LOOKUP_EXPORTS: [&str; 2] = ["dlsym", "dlvsym"];

impl Hook {
    pub const fn index(self) -> usize {
        self as usize
    }

    pub const fn name(self) -> &'static str {
        HOOKS[self as usize].1
    }

    /// The hook exported under `name`, compared without allocating.
    pub fn from_name(name: &[u8]) -> Option<Hook> {
        HOOKS
            .iter()
            .find(|(_, n)| n.as_bytes() == name)
            .map(|(h, _)| *h)
    }
}

/// Every name the shim's library exports, hooks first, then the observed entry points and
/// `dlsym`: what its version script lists.
pub fn exported_names() -> impl Iterator<Item = &'static str> {
    HOOKS
        .iter()
        .map(|(_, n)| *n)
        .chain(OBSERVED.iter().map(|(_, n)| *n))
        .chain(LOOKUP_EXPORTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_hook_order_and_names_are_unique() {
        for (i, (hook, name)) in HOOKS.iter().enumerate() {
            assert_eq!(hook.index(), i, "{name}");
            assert_eq!(Hook::from_name(name.as_bytes()), Some(*hook));
        }
        let mut names: Vec<_> = HOOKS.iter().map(|(_, n)| *n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Hook::COUNT);
        assert_eq!(Hook::COUNT, 25);
    }

    #[test]
    fn every_hook_can_be_resolved_in_the_runtime() {
        for (_, name) in HOOKS {
            assert!(
                rmcp_sys::HipApi::NAMES.contains(&name),
                "{name} is hooked but rmcp-sys cannot resolve it in the runtime"
            );
        }
    }

    #[test]
    fn observed_names_are_unique_and_apart_from_the_hooks() {
        for (i, (o, name)) in OBSERVED.iter().enumerate() {
            assert_eq!(o.index(), i, "{name}");
            assert_eq!(Observed::from_name(name.as_bytes()), Some(*o));
            assert_eq!(Hook::from_name(name.as_bytes()), None, "{name}");
        }
        assert_eq!(Observed::from_name(b"hipMalloc"), None);
    }

    #[test]
    fn unknown_names_are_not_hooks() {
        assert_eq!(Hook::from_name(b"hipFree"), None);
        assert_eq!(Hook::from_name(b"hipHostMallocX"), None);
        assert_eq!(Hook::from_name(b""), None);
    }

    #[test]
    fn only_the_proc_address_functions_resolve_names() {
        let resolvers: Vec<_> = HOOKS
            .iter()
            .filter(|(h, _)| h.resolves_names())
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(
            resolvers,
            [
                "hipGetProcAddress",
                "hipGetDriverEntryPoint",
                "hipGetDriverEntryPoint_spt"
            ]
        );
    }

    #[test]
    fn exported_names_are_hooks_then_the_lookups() {
        let all: Vec<_> = exported_names().collect();
        assert_eq!(all.len(), Hook::COUNT + Observed::COUNT + 2);
        assert_eq!(all[all.len() - 2..], ["dlsym", "dlvsym"]);
    }
}
