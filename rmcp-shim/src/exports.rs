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
//!
//! The labels, and the addresses `handout` and `attach` hand out, are `entries`'s.
//!
//! Per-copy entries (issue 22): for each hook, [`COPY_ENTRIES`] more trampolines, one per
//! slot of `handout`'s copy table. Entry `k` puts the return address in that same register
//! with bit 56 + `k` set (issue 30: the debug line names the caller) and jumps to the hook's
//! per-copy body, which sends the call to slot `k`'s
//! runtime copy whoever makes it (JIT code, another object, another thread): what `dlsym`
//! on a copy's handle and a copy's `hipGetProcAddress` hand out, so the destination travels
//! in the pointer. The ordinary entries and bodies are unchanged by them.

use std::ffi::{c_int, c_uint};

use rmcp_core::registry::Hook;
use rmcp_sys::{HipError, error};

use crate::entries::{COPY_ENTRIES, COPY_ENTRY_SIZE, copy_entries_label, entry_label};
use crate::intercept::{Call, Caller, count_host_location, intercept, substitute_proc_address};

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the trampolines are written for x86-64 only");

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

/// The call to the runtime a hook makes: `intercept`'s, or for a row that loads an image
/// from memory `module_load`'s, whose closure takes the image to pass (its parameter shadows
/// the caller's argument of the same name, so the other arguments go on unchanged).
macro_rules! forward {
    ($copy:ident, $call:ident, $name:ident, [$($arg:ident),*]) => {
        intercept::<$copy>($call, move |api| {
            // SAFETY: the caller's own arguments, passed on unchanged to the runtime's
            // function of the same name and C signature.
            api.$name.map(|f| unsafe { f($($arg),*) })
        })
    };
    ($copy:ident, $call:ident, $name:ident, [$($arg:ident),*], image $image:ident) => {
        crate::module_load::load::<$copy>($call, $image, move |api, $image| {
            // SAFETY: the caller's own arguments, passed on unchanged to the runtime's
            // function of the same name and C signature, but for the image: the caller's,
            // or a private copy of it that lives as long as the process (`module_load`).
            api.$name.map(|f| unsafe { f($($arg),*) })
        })
    };
}

/// Before `hipModuleLoad(.., fname)` is forwarded: the file is the origin of what it loads.
fn loading_file(fname: *const std::ffi::c_char) -> u32 {
    std::panic::catch_unwind(|| {
        if fname.is_null() {
            return crate::thread::with(|t| t.loading());
        }
        // SAFETY: the caller's path argument, NUL-terminated (the runtime reads it so).
        let path = unsafe { std::ffi::CStr::from_ptr(fname) };
        crate::kernel_objects::loading(crate::kernel_objects::Origin {
            path: path.to_string_lossy().into_owned(),
            in_memory: false,
        })
    })
    .unwrap_or(0)
}

/// Before a module load from memory is forwarded: the caller's library is the origin.
fn loading_image<const COPY: bool>(_image: *const std::ffi::c_void, ret: usize) -> u32 {
    std::panic::catch_unwind(|| {
        let caller = match Caller::of::<COPY>(ret) {
            Caller::At(ret) | Caller::Copy { ret, .. } => ret,
        };
        let path = rmcp_sys::locate::object_of(caller).map_or_else(
            || "an unknown caller".to_string(),
            |(_, p)| {
                if p.is_empty() {
                    "the program".into()
                } else {
                    p
                }
            },
        );
        crate::kernel_objects::loading(crate::kernel_objects::Origin {
            path,
            in_memory: true,
        })
    })
    .unwrap_or(0)
}

/// The hook entries, their bodies and `entry`, from the table's rows.
macro_rules! exports {
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
            // The per-copy entries: COPY_ENTRIES of them, each padded to COPY_ENTRY_SIZE
            // bytes, each passing its own index where the return address goes.
            core::arch::global_asm!(
                ".pushsection .text",
                ".p2align 4",
                concat!(".globl ", copy_entries_label!($name)),
                concat!(".hidden ", copy_entries_label!($name)),
                concat!(".type ", copy_entries_label!($name), ", @function"),
                concat!(copy_entries_label!($name), ":"),
                // One entry per slot: the list must name 0 to COPY_ENTRIES - 1 (checked
                // below the macro).
                ".irp k,0,1,2,3,4,5,6,7",
                // The caller's return address, with bit 56 + k set (`entries::COPY_SLOT_SHIFT`).
                concat!("mov ", return_address_register!($($arg)*), ", qword ptr [rsp]"),
                concat!("bts ", return_address_register!($($arg)*), ", 56 + \\k"),
                // `jmp rel32`, spelt out so that the entry's size is fixed.
                ".byte 0xe9",
                ".long {body} - . - 4",
                // Pads to the next entry; the assembler fails if an entry is longer
                // (`.org` cannot move backwards).
                concat!(".org ", copy_entries_label!($name), " + {size} * (\\k + 1), 0xcc"),
                ".endr",
                concat!(".size ", copy_entries_label!($name), ", . - ", copy_entries_label!($name)),
                ".popsection",
                body = sym copy_body::$name,
                size = const COPY_ENTRY_SIZE,
            );
        )*

        /// What every hook does, for both kinds of entry.
        mod work {
            use super::*;
            $(
                #[allow(non_snake_case)]
                #[inline(always)]
                pub(super) unsafe fn $name<const COPY: bool>($($arg: $ty,)* ret: usize) -> HipError {
                    let call = Call { hook: Hook::$variant, out: $out, size: $size, flags: $flags, ret };
                    // A call that waits for the GPU is marked as waiting while it is forwarded
                    // (two plain stores; `watchdog`).
                    $( let _ = stringify!($wait); let waiting = crate::watchdog::begin(Hook::$variant); )?
                    // A module load: the kernels it loads are kept with where they came from.
                    $( let origin = loading_file($fname); )?
                    $( let origin = loading_image::<COPY>($image, ret); )?
                    let rc = forward!(COPY, call, $name, [$($arg),*] $(, image $image)?);
                    $( let _ = $fname; crate::kernel_objects::loaded(origin); )?
                    $( let _ = $image; crate::kernel_objects::loaded(origin); )?
                    $( let _ = stringify!($wait); crate::watchdog::end(waiting); )?
                    // Bookkeeping after the call: a panic there (a log line that cannot be
                    // written) must not cross into the caller.
                    $( if rc == error::SUCCESS {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            // SAFETY: the caller's own arguments, which the runtime just
                            // accepted.
                            unsafe { substitute_proc_address(Hook::$variant, $sym, $pfn, Caller::of::<COPY>(ret)) }
                        }));
                    } )?
                    $( if rc == error::SUCCESS {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            // SAFETY: the runtime accepted the caller's call, so `$prop`
                            // points to the hipMemAllocationProp it read.
                            unsafe { count_host_location(Hook::$variant, $prop, Caller::of::<COPY>(ret)) }
                        }));
                    } )?
                    $( {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            // SAFETY: `$fname` is the caller's argument, which the runtime
                            // read as a NUL-terminated path (or rejected, when null).
                            unsafe { crate::module_load::loaded_file::<COPY>(rc, $fname, ret) }
                        }));
                    } )?
                    $( if rc == error::SUCCESS {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            crate::module_load::unloaded($umodule)
                        }));
                    } )?
                    $( if rc == error::SUCCESS {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            // SAFETY: the runtime accepted the call: `$nfn` points to the
                            // function it wrote, `$kname` to the caller's NUL-terminated name.
                            unsafe { crate::launches::name_module_function($nfn, $kname) }
                        }));
                    } )?
                    rc
                }
            )*
        }

        /// The ordinary entries' bodies: `ret` is the caller's return address.
        mod body {
            use super::*;
            $(
                #[allow(non_snake_case)]
                pub(super) unsafe extern "C" fn $name($($arg: $ty,)* ret: usize) -> HipError {
                    // SAFETY: the caller's own arguments, as the entry received them.
                    unsafe { work::$name::<false>($($arg,)* ret) }
                }
            )*
        }

        /// The per-copy entries' bodies: `slot` is the entry's index, not a return address.
        mod copy_body {
            use super::*;
            $(
                #[allow(non_snake_case)]
                pub(super) unsafe extern "C" fn $name($($arg: $ty,)* slot: usize) -> HipError {
                    // SAFETY: as in `body`.
                    unsafe { work::$name::<true>($($arg,)* slot) }
                }
            )*
        }
    };
}

rmcp_sys::hooked_functions!(exports);

// The per-copy entries' `.irp` list names slots 0 to 7, and sets bit 56 + slot.
const _: () = assert!(COPY_ENTRIES == 8 && crate::entries::COPY_SLOT_SHIFT == 56);

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
