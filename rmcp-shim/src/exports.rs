//! Everything the library exports: one trampoline per row of the hook table
//! (`rmcp_sys::hooked_functions!`), `dlsym`, and one plain C function that hooks nothing,
//! [`rmcp_shim_stats`] (the counters as JSON, for `rmcp_rdna.stats()` in Python). Nothing
//! else leaves the library.
//!
//! How the names get exported: rustc hides every symbol of a cdylib but its `#[no_mangle]`
//! Rust items with a linker version script of its own, and GNU ld takes no second version
//! script beside it ("anonymous version tag cannot be combined with other version tags";
//! only rust-lld, rustc's default linker on x86-64 Linux since 1.90, merges two). So each
//! exported name is first a `#[no_mangle]` placeholder function here, which puts it in
//! rustc's script, and `build.rs` has the linker define the name as the trampoline's label
//! (`--defsym NAME=rmcp_export_NAME`, from the same table), which replaces the placeholder.
//! The placeholders are never called.
//!
//! Each hook export is a two-instruction trampoline written with `global_asm!`: it loads its
//! own return address (the caller's next instruction, at `[rsp]` on entry) into the first
//! argument register after the function's own arguments, and jumps to the body. The body
//! therefore sees the caller's return address as one more argument and returns straight to
//! the caller. The register is derived from the argument count at compile time, and every
//! argument's type is checked at compile time to travel in an integer register, so a row
//! added to the table cannot make a trampoline overwrite an argument.
//!
//! Under `cfg(test)` the symbols carry a prefix, so unit tests never interpose themselves.

use std::ffi::{c_int, c_uint};

use rmcp_core::registry::Hook;
use rmcp_sys::{HipError, error};

use crate::intercept::{Call, count_host_location, intercept, substitute_proc_address};

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the trampolines are written for x86-64 only");

/// The symbol prefix: none in the library, one in unit-test executables.
#[cfg(not(test))]
macro_rules! prefix {
    () => {
        ""
    };
}
#[cfg(test)]
macro_rules! prefix {
    () => {
        "rmcp_unit_test_"
    };
}

/// The label the trampoline is written under. In the library, the linker makes the exported
/// name an alias of it (`build.rs`, whose `--defsym` arguments use the same prefix); a
/// unit-test executable exports nothing and defines the (prefixed) name itself.
#[cfg(not(test))]
macro_rules! export_label {
    ($name:ident) => {
        concat!("rmcp_export_", stringify!($name))
    };
}
#[cfg(test)]
macro_rules! export_label {
    ($name:ident) => {
        concat!(prefix!(), stringify!($name))
    };
}

/// The placeholder that puts an exported name in rustc's version script (see the module
/// comment). The linker's definition of the name replaces it, so it never runs. (Nothing in
/// the library calls these names. Cross-crate LTO could inline the `dlsym` placeholder into
/// libloading's calls: the profiles have none.)
#[cfg(not(test))]
macro_rules! placeholder {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        extern "C" fn $name() {
            std::process::abort()
        }
    };
}
#[cfg(test)]
macro_rules! placeholder {
    ($name:ident) => {};
}

/// A hidden alias of the export at the same address, so the library names its own function
/// without going through the dynamic linker (an earlier definition of the same name
/// elsewhere in the process cannot be taken for it).
macro_rules! own_symbol {
    ($name:ident) => {
        concat!("rmcp_own_", prefix!(), stringify!($name))
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

/// The hook exports, their bodies and `own_address`, from the table's rows.
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
                concat!(".globl ", export_label!($name)),
                concat!(".type ", export_label!($name), ", @function"),
                concat!(".globl ", own_symbol!($name)),
                concat!(".hidden ", own_symbol!($name)),
                concat!(export_label!($name), ":"),
                concat!(own_symbol!($name), ":"),
                concat!("mov ", return_address_register!($($arg)*), ", qword ptr [rsp]"),
                // `jmp` keeps the stack as the caller left it: the body returns to the caller.
                "jmp {body}",
                concat!(".size ", export_label!($name), ", . - ", export_label!($name)),
                ".popsection",
                body = sym body::$name,
            );
        )*

        mod placeholders {
            $( placeholder!($name); )*
        }

        // cargo before 1.87 (Debian trixie's is 1.85) passes a library's cdylib link
        // arguments to its unit-test executable too (rust-lang/cargo#12663), so the targets
        // of build.rs's `--defsym` must exist there as well. Nothing there calls the hook
        // names they define.
        #[cfg(test)]
        core::arch::global_asm!(
            ".pushsection .text",
            $(
                concat!(".globl rmcp_export_", stringify!($name)),
                concat!("rmcp_export_", stringify!($name), ":"),
            )*
            "ud2",
            ".popsection",
        );

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

        mod own {
            unsafe extern "C" {
                $(
                    #[link_name = own_symbol!($name)]
                    pub(super) fn $name();
                )*
            }
        }

        /// The address of the library's export for `hook`.
        pub(crate) fn own_address(hook: Hook) -> usize {
            match hook {
                $( Hook::$variant => own::$name as *const () as usize, )*
            }
        }
    };
}

rmcp_sys::hooked_functions!(exports);

// `dlsym` (see `dlsym.rs`). Every lookup first asks `wants`, with the caller's arguments
// saved around the call and the stack then restored exactly; a lookup it does not want
// (RTLD_NEXT, a name that is not hooked) leaves by a jump to the next dlsym, so that dlsym,
// and any audit module, sees the original caller. A hooked name goes to `lookup` with the
// caller's return address as a third argument.
core::arch::global_asm!(
    ".pushsection .text",
    ".p2align 4",
    concat!(".globl ", export_label!(dlsym)),
    concat!(".type ", export_label!(dlsym), ", @function"),
    concat!(".globl ", own_symbol!(dlsym)),
    concat!(".hidden ", own_symbol!(dlsym)),
    ".globl rmcp_dlsym_forward",
    ".hidden rmcp_dlsym_forward",
    concat!(export_label!(dlsym), ":"),
    concat!(own_symbol!(dlsym), ":"),
    "push rdi",
    "push rsi",
    "sub rsp, 8",
    "call {wants}",
    "add rsp, 8",
    "pop rsi",
    "pop rdi",
    "test rax, rax",
    "jz 2f",
    "mov rdx, qword ptr [rsp]",
    "jmp {lookup}",
    "2:",
    "rmcp_dlsym_forward:",
    "mov rax, qword ptr [rip + {next}]",
    "test rax, rax",
    "jz 3f",
    "jmp rax",
    // First lookup of the process: find the next dlsym, keeping the arguments.
    "3:",
    "push rdi",
    "push rsi",
    "sub rsp, 8",
    "call {find}",
    "add rsp, 8",
    "pop rsi",
    "pop rdi",
    "jmp rax",
    concat!(".size ", export_label!(dlsym), ", . - ", export_label!(dlsym)),
    ".popsection",
    wants = sym crate::dlsym::wants,
    lookup = sym crate::dlsym::lookup,
    next = sym crate::dlsym::NEXT_DLSYM,
    find = sym crate::dlsym::find_next_dlsym,
);
placeholder!(dlsym);

// The same for `dlsym` under cargo before 1.87 (see `exports!`): in a unit-test executable
// the `dlsym` that `--defsym` defines (which the linker exports there, glibc defining it
// too) forwards every lookup to glibc's with the stack untouched, so the process's lookups
// mean what they mean without it.
#[cfg(test)]
core::arch::global_asm!(
    ".pushsection .text",
    ".globl rmcp_export_dlsym",
    "rmcp_export_dlsym:",
    "jmp rmcp_dlsym_forward",
    ".popsection",
);

#[cfg(test)]
unsafe extern "C" {
    #[link_name = own_symbol!(dlsym)]
    fn own_dlsym(
        handle: *mut std::ffi::c_void,
        symbol: *const std::ffi::c_char,
    ) -> *mut std::ffi::c_void;
}

/// The address of the library's `dlsym` export.
#[cfg(test)]
pub(crate) fn own_dlsym_address() -> usize {
    own_dlsym as *const () as usize
}

/// `size_t rmcp_shim_stats(char *buf, size_t len)`: writes this process's counters as UTF-8
/// JSON (the RMCP_STATS_FILE report, no terminating NUL) into `buf`, as much as fits in
/// `len` bytes, and returns the report's full length: a caller whose buffer was too short
/// calls again with one at least that long. `buf` may be NULL when `len` is 0. Returns 0 if
/// the report could not be made (a panic inside is caught). Not a hook: a plain export,
/// in rustc's version script as every `#[no_mangle]` item is.
#[unsafe(no_mangle)]
pub extern "C" fn rmcp_shim_stats(buf: *mut std::ffi::c_char, len: usize) -> usize {
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
    fn every_hook_has_a_distinct_export() {
        let mut addrs: Vec<usize> = HOOKS.iter().map(|(h, _)| own_address(*h)).collect();
        assert!(addrs.iter().all(|a| *a != 0));
        addrs.sort();
        addrs.dedup();
        assert_eq!(addrs.len(), HOOKS.len());
    }

    #[test]
    fn dlsym_trampoline_forwards_default_lookups() {
        // SAFETY: the trampoline has dlsym's contract; RTLD_DEFAULT and a NUL-terminated name.
        let p = unsafe { own_dlsym(libc::RTLD_DEFAULT, c"strlen".as_ptr()) };
        assert_eq!(p as usize, libc::strlen as *const () as usize);
    }
}
