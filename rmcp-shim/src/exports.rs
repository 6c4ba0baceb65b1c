//! The body's entry points: one trampoline per row of the hook table
//! (`rmcp_sys::hooked_functions!`), and [`stats`], the counters as JSON for
//! `rmcp_rdna.stats()` in Python. The front (librmcp_shim.so, `front/front.rs`) exports the
//! names (`rmcp_shim_stats` for the last) and jumps or calls here once the body is attached
//! (`front`); this library itself exports only `rmcp_shim_attach`.
//!
//! Each entry is a two-instruction trampoline written with `global_asm!`: it loads its
//! own return address (the caller's next instruction, at `[rsp]` on entry: the front
//! reaches it by a jump, so the caller's return address is still there) into the first
//! argument register after the function's own arguments, and jumps to the body. The body
//! therefore sees the caller's return address as one more argument and returns straight to
//! the caller. The register is derived from the argument count at compile time, and every
//! argument's type is checked at compile time to travel in an integer register, so a row
//! added to the table cannot make a trampoline overwrite an argument.

use std::ffi::{c_int, c_uint};

use std::ffi::c_void;

use rmcp_core::registry::Hook;
use rmcp_sys::{HipError, error};

use crate::intercept::{Call, count_host_location, intercept, substitute_proc_address};

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the trampolines are written for x86-64 only");

/// The label of a hook's entry (hidden: the library exports none of them).
macro_rules! entry_label {
    ($name:ident) => {
        concat!("rmcp_body_", stringify!($name))
    };
}

/// System V x86-64: integer arguments travel in rdi, rsi, rdx, rcx, r8, r9. The return
/// address goes in the first one the function's own arguments leave free.
macro_rules! return_address_register {
    () => {
        "rdi"
    };
    ($a:ident) => {
        "rsi"
    };
    ($a:ident $b:ident) => {
        "rdx"
    };
    ($a:ident $b:ident $c:ident) => {
        "rcx"
    };
    ($a:ident $b:ident $c:ident $d:ident) => {
        "r8"
    };
    ($a:ident $b:ident $c:ident $d:ident $e:ident) => {
        "r9"
    };
    ($($a:ident)*) => {
        compile_error!(
            "a hook with six or more arguments leaves no register for the return address"
        )
    };
}

/// Types passed in one integer register (INTEGER class, at most 8 bytes): the only kind a
/// trampoline's register arithmetic is right for. (rustc 1.85 does not count the use in the
/// `const _` item of `exports!` and calls the trait and the function dead.)
#[allow(dead_code)]
trait IntegerRegister {}
impl<T> IntegerRegister for *mut T {}
impl<T> IntegerRegister for *const T {}
impl IntegerRegister for usize {}
impl IntegerRegister for u64 {}
impl IntegerRegister for c_uint {}
impl IntegerRegister for c_int {}
#[allow(dead_code)]
const fn integer_register<T: IntegerRegister>() {}

/// The hook entries, their bodies and `entry`, from the table's rows.
macro_rules! exports {
    ($(
        $(#[$doc:meta])* $name:ident = $variant:ident ($($arg:ident : $ty:ty),*)
        => out: $out:expr, size: $size:expr, flags: $flags:expr
        $(, resolves $sym:ident into $pfn:ident)?
        $(, host location in $prop:ident)? ;
    )*) => {
        // Every argument of every hook travels in an integer register.
        const _: () = { $( $( integer_register::<$ty>(); )* )* };

        $(
            core::arch::global_asm!(
                ".pushsection .text",
                ".p2align 4",
                concat!(".globl ", entry_label!($name)),
                concat!(".hidden ", entry_label!($name)),
                concat!(".type ", entry_label!($name), ", @function"),
                concat!(entry_label!($name), ":"),
                concat!("mov ", return_address_register!($($arg)*), ", qword ptr [rsp]"),
                // `jmp` keeps the stack as the caller left it: the body returns to the caller.
                "jmp {body}",
                concat!(".size ", entry_label!($name), ", . - ", entry_label!($name)),
                ".popsection",
                body = sym body::$name,
            );
        )*

        mod body {
            use super::*;
            $(
                #[allow(non_snake_case)]
                pub(super) unsafe extern "C" fn $name($($arg: $ty,)* ret: usize) -> HipError {
                    let call = Call { hook: Hook::$variant, out: $out, size: $size, flags: $flags, ret };
                    let rc = intercept(call, |api| {
                        // SAFETY: the caller's own arguments, passed on unchanged to the
                        // runtime's function of the same name and C signature.
                        api.$name.map(|f| unsafe { f($($arg),*) })
                    });
                    // Bookkeeping after the call: a panic there (a log line that cannot be
                    // written) must not cross into the caller.
                    $( if rc == error::SUCCESS {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            // SAFETY: the caller's own arguments, which the runtime just
                            // accepted.
                            unsafe { substitute_proc_address(Hook::$variant, $sym, $pfn, ret) }
                        }));
                    } )?
                    $( if rc == error::SUCCESS {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            // SAFETY: the runtime accepted the caller's call, so `$prop`
                            // points to the hipMemAllocationProp it read.
                            unsafe { count_host_location(Hook::$variant, $prop, ret) }
                        }));
                    } )?
                    rc
                }
            )*
        }

        mod entries {
            unsafe extern "C" {
                $(
                    #[link_name = entry_label!($name)]
                    pub(super) fn $name();
                )*
            }
        }

        /// This library's entry for `hook`, which the front's export jumps to.
        pub(crate) fn entry(hook: Hook) -> *const c_void {
            match hook {
                $( Hook::$variant => entries::$name as *const c_void, )*
            }
        }
    };
}

rmcp_sys::hooked_functions!(exports);

/// The front's `size_t rmcp_shim_stats(char *buf, size_t len)` calls this: writes this
/// process's counters as UTF-8 JSON (the RMCP_STATS_FILE report, no terminating NUL) into
/// `buf`, as much as fits in `len` bytes, and returns the report's full length: a caller
/// whose buffer was too short calls again with one at least that long. `buf` may be NULL
/// when `len` is 0. Returns 0 if the report could not be made (a panic inside is caught).
pub(crate) extern "C" fn stats(buf: *mut std::ffi::c_char, len: usize) -> usize {
    let _no_cancel = crate::cancel::NoCancel::new();
    std::panic::catch_unwind(|| {
        let out: &mut [u8] = if buf.is_null() || len == 0 {
            &mut []
        } else {
            // SAFETY: the caller hands `len` writable bytes at `buf` (the function's
            // contract), not aliased by anything the shim holds.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
        };
        crate::report::stats_json(out)
    })
    .unwrap_or(0)
}

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
}
