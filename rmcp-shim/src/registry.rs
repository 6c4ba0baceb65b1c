//! The one list of hooked HIP functions.
//!
//! `hooks.rs` exports exactly one C function per entry; `scripts/check-hooks` compares this
//! list with the dynamic symbols of the built library, and the tests below compare it with
//! the runtime table in `rmcp-sys`, so a hook cannot be exported but forgotten here, or
//! listed here but missing from the library.

/// A hooked HIP entry point. The discriminant indexes per-hook tables (stats, warnings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Hook {
    HipMalloc,
    HipExtMallocWithFlags,
    HipHostMalloc,
    HipHostAlloc,
    HipMallocHost,
    HipMemAllocHost,
    HipMallocManaged,
    HipHostRegister,
    HipMallocAsync,
    HipMallocFromPoolAsync,
    HipGetProcAddress,
}

/// Every hook with its exported C name, in `Hook` order.
pub const HOOKS: [(Hook, &str); Hook::COUNT] = [
    (Hook::HipMalloc, "hipMalloc"),
    (Hook::HipExtMallocWithFlags, "hipExtMallocWithFlags"),
    (Hook::HipHostMalloc, "hipHostMalloc"),
    (Hook::HipHostAlloc, "hipHostAlloc"),
    (Hook::HipMallocHost, "hipMallocHost"),
    (Hook::HipMemAllocHost, "hipMemAllocHost"),
    (Hook::HipMallocManaged, "hipMallocManaged"),
    (Hook::HipHostRegister, "hipHostRegister"),
    (Hook::HipMallocAsync, "hipMallocAsync"),
    (Hook::HipMallocFromPoolAsync, "hipMallocFromPoolAsync"),
    (Hook::HipGetProcAddress, "hipGetProcAddress"),
];

/// Exported functions that are not HIP entry points: the lookup `dlsym` (`dlsym.rs`),
/// so that callers which look HIP up on a handle get the hooks too.
pub const LOOKUP_EXPORTS: [&str; 1] = ["dlsym"];

impl Hook {
    pub const COUNT: usize = 11;

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
    fn unknown_names_are_not_hooks() {
        assert_eq!(Hook::from_name(b"hipFree"), None);
        assert_eq!(Hook::from_name(b"hipHostMallocX"), None);
        assert_eq!(Hook::from_name(b""), None);
    }
}
