//! The exported HIP entry points, one per entry of `registry::HOOKS`.
//!
//! Each export is a two-instruction trampoline: it loads its own return address (the
//! caller's next instruction, at `[rsp]` on entry) into the first unused argument register
//! and jumps to the body, which therefore sees the caller's return address as one more
//! argument and returns straight to the caller. The body gathers the arguments and calls
//! `intercept`. The C signatures are the runtime's exactly (hip_runtime_api.h).
//!
//! Under `cfg(test)` nothing is exported, so unit tests never interpose themselves.

use std::ffi::{c_char, c_int, c_uint, c_void};

use rmcp_sys::{HipError, error};

use crate::intercept::{Call, intercept, substitute_proc_address};
use crate::registry::Hook;

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the hook trampolines are written for x86-64 only");

macro_rules! hooks {
    ($(
        $name:ident = $hook:ident, ret in $reg:literal,
        ($($arg:ident : $ty:ty),*) => out: $out:expr, size: $size:expr, flags: $flags:expr
        $(, then $post:expr)? ;
    )*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`, interposed.")]
            ///
            /// # Safety
            /// The runtime's contract for this function.
            #[allow(non_snake_case)]
            #[cfg_attr(not(test), unsafe(no_mangle))]
            #[unsafe(naked)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> HipError {
                // The return address goes to the register after the last argument; `jmp`
                // keeps the stack as the caller left it, so the body returns to the caller.
                core::arch::naked_asm!(
                    concat!("mov ", $reg, ", qword ptr [rsp]"),
                    "jmp {body}",
                    body = sym body::$name,
                )
            }
        )*

        mod body {
            use super::*;
            $(
                #[allow(non_snake_case)]
                pub(super) unsafe extern "C" fn $name($($arg: $ty,)* ret: usize) -> HipError {
                    let call = Call { hook: Hook::$hook, out: $out, size: $size, flags: $flags, ret };
                    let rc = intercept(call, |api| {
                        // SAFETY: the caller's own arguments, passed on unchanged to the
                        // runtime's function of the same name and C signature.
                        api.$name.map(|f| unsafe { f($($arg),*) })
                    });
                    // Bookkeeping after the call: a panic there (a log line that cannot be
                    // written) must not cross into the caller.
                    $( if rc == error::SUCCESS {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| $post));
                    } )?
                    rc
                }
            )*
        }

        /// The address of the shim's export for `hook`.
        pub fn own_address(hook: Hook) -> usize {
            match hook {
                $( Hook::$hook => $name as *const () as usize, )*
            }
        }
    };
}

hooks! {
    hipMalloc = HipMalloc, ret in "rdx",
        (ptr: *mut *mut c_void, size: usize) => out: ptr, size: size, flags: 0;
    hipExtMallocWithFlags = HipExtMallocWithFlags, ret in "rcx",
        (ptr: *mut *mut c_void, size: usize, flags: c_uint) => out: ptr, size: size, flags: flags;
    hipHostMalloc = HipHostMalloc, ret in "rcx",
        (ptr: *mut *mut c_void, size: usize, flags: c_uint) => out: ptr, size: size, flags: flags;
    hipHostAlloc = HipHostAlloc, ret in "rcx",
        (ptr: *mut *mut c_void, size: usize, flags: c_uint) => out: ptr, size: size, flags: flags;
    hipMallocHost = HipMallocHost, ret in "rdx",
        (ptr: *mut *mut c_void, size: usize) => out: ptr, size: size, flags: 0;
    hipMemAllocHost = HipMemAllocHost, ret in "rdx",
        (ptr: *mut *mut c_void, size: usize) => out: ptr, size: size, flags: 0;
    hipMallocManaged = HipMallocManaged, ret in "rcx",
        (ptr: *mut *mut c_void, size: usize, flags: c_uint) => out: ptr, size: size, flags: flags;
    hipHostRegister = HipHostRegister, ret in "rcx",
        (host_ptr: *mut c_void, size: usize, flags: c_uint) => out: std::ptr::null_mut(), size: size, flags: flags;
    hipMallocAsync = HipMallocAsync, ret in "rcx",
        (ptr: *mut *mut c_void, size: usize, stream: *mut c_void) => out: ptr, size: size, flags: 0;
    hipMallocFromPoolAsync = HipMallocFromPoolAsync, ret in "r8",
        (ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: *mut c_void) => out: ptr, size: size, flags: 0;
    hipGetProcAddress = HipGetProcAddress, ret in "r9",
        (symbol: *const c_char, pfn: *mut *mut c_void, hip_version: c_int, flags: u64, status: *mut c_int)
        => out: std::ptr::null_mut(), size: 0, flags: 0,
        // SAFETY: the caller's own arguments, which the runtime just accepted.
        then unsafe { substitute_proc_address(symbol, pfn, own_address) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::HOOKS;

    #[test]
    fn every_hook_has_a_distinct_export() {
        let mut addrs: Vec<usize> = HOOKS.iter().map(|(h, _)| own_address(*h)).collect();
        assert!(addrs.iter().all(|a| *a != 0));
        addrs.sort();
        addrs.dedup();
        assert_eq!(addrs.len(), HOOKS.len());
    }
}
