//! The GPU code of `rmcp check`: `kernels.hip`, compiled by build.rs with hipcc into one
//! offload bundle and embedded here, and `override_kernels.hip`, the override experiments'
//! gfx1030 code, in a second bundle. Both empty when rmcp was built where no hipcc was
//! found.

/// The offload bundle (`__CLANG_OFFLOAD_BUNDLE__`), or empty.
static BUNDLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/check-kernels.hipfb"));

/// The override experiments' bundle (gfx1030 only), or empty.
static OVERRIDE_BUNDLE: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/check-override-kernels.hipfb"));

/// The target of the override experiments' code.
pub const OVERRIDE_TARGET: &str = "gfx1030";

/// The bundle's targets, as build.rs compiled them (empty: no bundle).
pub fn targets() -> Vec<&'static str> {
    env!("RMCP_CHECK_KERNELS_TARGETS")
        .split(',')
        .filter(|t| !t.is_empty())
        .collect()
}

/// `hipcc 5.2.21153-0, Debian clang version 15.0.6`: what built the bundle.
pub fn compiler() -> &'static str {
    env!("RMCP_CHECK_KERNELS_COMPILER")
}

/// Whether this rmcp carries the GPU code.
pub fn present() -> bool {
    BUNDLE.starts_with(b"__CLANG_OFFLOAD_BUNDLE__")
}

/// The code-object version of the bundle's code objects (build.rs compiles v4, which
/// ROCm 5.2.3 through 7.2.4 load).
pub const CODE_OBJECT_VERSION: u32 = 4;

/// The bundle in 8-byte-aligned memory that lives until the process ends (the runtime
/// reads its headers as 64-bit fields and may keep pointers into it).
pub fn aligned() -> &'static [u64] {
    leak_aligned(BUNDLE)
}

/// The override experiments' bundle (`override_kernels.hip`), as it is embedded.
#[cfg(test)]
pub fn override_bundle() -> &'static [u8] {
    OVERRIDE_BUNDLE
}

/// Whether this rmcp carries the override experiments' code.
pub fn override_present() -> bool {
    OVERRIDE_BUNDLE.starts_with(b"__CLANG_OFFLOAD_BUNDLE__")
}

/// The override experiments' bundle as [`aligned`] gives the other.
pub fn override_aligned() -> &'static [u64] {
    leak_aligned(OVERRIDE_BUNDLE)
}

fn leak_aligned(bytes: &[u8]) -> &'static [u64] {
    let mut v = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: `v` has at least bytes.len() bytes; u64 has no invalid bit patterns.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len())
    };
    Vec::leak(v)
}
