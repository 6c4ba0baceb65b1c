// The one table of HIP entry points rmcp interposes, included by rmcp-sys (src/lib.rs) and
// by the preloaded front (rmcp-shim/front/front.rs), which is `no_std` and built outside
// cargo's crate graph: so nothing here may name anything but `core`.

/// The one table of HIP entry points rmcp interposes: name, `Hook` variant, the C
/// signature (hip_runtime_api.h), and which arguments carry the out-pointer, the size and
/// the flags. `resolves SYMBOL into PFN` marks a function that hands out function pointers
/// by name; `host location in PROP` one whose `hipMemAllocationProp` argument may ask for host
/// memory (counted, never changed). Everything that lists hooks is generated from this table: `HipApi` here,
/// `rmcp_core::registry::Hook`, the shim's exports and its linker version script.
///
/// Invoke with the name of a local macro, which receives the rows.
#[macro_export]
macro_rules! hooked_functions {
    ($callback:ident) => {
        $callback! {
            hipMalloc = HipMalloc (ptr: *mut *mut ::core::ffi::c_void, size: usize)
                => out: ptr, size: size, flags: 0;
            hipExtMallocWithFlags = HipExtMallocWithFlags
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipHostMalloc = HipHostMalloc
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipHostAlloc = HipHostAlloc
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipMallocHost = HipMallocHost (ptr: *mut *mut ::core::ffi::c_void, size: usize)
                => out: ptr, size: size, flags: 0;
            hipMemAllocHost = HipMemAllocHost (ptr: *mut *mut ::core::ffi::c_void, size: usize)
                => out: ptr, size: size, flags: 0;
            hipMallocManaged = HipMallocManaged
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipHostRegister = HipHostRegister
                (host_ptr: *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ::core::ptr::null_mut(), size: size, flags: flags;
            /// Since hip_5.1.
            hipMallocAsync = HipMallocAsync
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, stream: *mut ::core::ffi::c_void)
                => out: ptr, size: size, flags: 0;
            /// Since hip_5.1.
            hipMallocFromPoolAsync = HipMallocFromPoolAsync
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, pool: *mut ::core::ffi::c_void,
                 stream: *mut ::core::ffi::c_void)
                => out: ptr, size: size, flags: 0;
            /// Since hip_6.1. `status` is a `hipDriverProcAddressQueryResult*`.
            hipGetProcAddress = HipGetProcAddress
                (symbol: *const ::core::ffi::c_char, pfn: *mut *mut ::core::ffi::c_void,
                 hip_version: ::core::ffi::c_int, flags: u64, status: *mut ::core::ffi::c_int)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, resolves symbol into pfn;
            /// Since hip_7.1. Resolves names as hipGetProcAddress does (dlsym on the runtime's
            /// own handle, trying `NAME_spt` first for hipEnablePerThreadDefaultStream).
            /// `status` is a `hipDriverEntryPointQueryResult*`.
            hipGetDriverEntryPoint = HipGetDriverEntryPoint
                (symbol: *const ::core::ffi::c_char, pfn: *mut *mut ::core::ffi::c_void,
                 flags: ::core::ffi::c_ulonglong, status: *mut ::core::ffi::c_int)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, resolves symbol into pfn;
            /// Since hip_5.1. `handle` is a `hipMemGenericAllocationHandle_t*`, `prop` a
            /// `const hipMemAllocationProp*` (see `mem_alloc_prop`).
            hipMemCreate = HipMemCreate
                (handle: *mut u64, size: usize, prop: *const ::core::ffi::c_void,
                 flags: ::core::ffi::c_ulonglong)
                => out: ::core::ptr::null_mut(), size: size, flags: 0, host location in prop;
            /// Since hip_7.1: what hipGetDriverEntryPoint becomes in code built with
            /// per-thread default streams (`amd_hip_runtime_pt_api.h`).
            hipGetDriverEntryPoint_spt = HipGetDriverEntryPointSpt
                (symbol: *const ::core::ffi::c_char, pfn: *mut *mut ::core::ffi::c_void,
                 flags: ::core::ffi::c_ulonglong, status: *mut ::core::ffi::c_int)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, resolves symbol into pfn;
        }
    };
}
