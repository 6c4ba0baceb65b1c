//! The entries of the observed functions (`rmcp_sys::observed_functions!`): launches,
//! `__hipRegisterFunction`, `hsa_queue_create`. Each entry saves the six argument registers
//! and rax, calls [`observe`] with them and its row's index, restores them and jumps to the
//! function `observe` returns, with the stack as the caller left it: whatever the function's
//! arguments (dim3 structs, arguments on the stack), the callee receives the caller's own,
//! and returns straight to the caller. `observe` finds where the call goes (the function the
//! caller would have reached: `binding`, as for the hooked functions), records its fact
//! (`launches`, `queues`) and, for `hsa_queue_create`, puts the wrapped callback in place of
//! the caller's (rcx).
//!
//! A launch costs the front's jump, this entry and `observe`'s binding lookup and ring
//! record: no lock, no heap, no system call (`docs/performance.md`). A lookup by name of an
//! observed function (`dlsym`, `hipGetProcAddress`) gets the runtime's own: such callers'
//! launches are not in the ring.

use std::ffi::c_void;

use rmcp_core::registry::{OBSERVED, Observed};

use crate::launches::{self, Kernel};

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the observed entries are written for x86-64 only");

/// The registers an entry saved, lowest address first, then the caller's return address.
#[repr(C)]
struct Saved {
    rax: usize,
    r9: usize,
    r8: usize,
    rcx: usize,
    rdx: usize,
    rsi: usize,
    rdi: usize,
    ret: usize,
}

macro_rules! observed_entry_label {
    ($name:ident) => {
        concat!("rmcp_body_observed_", stringify!($name))
    };
}

macro_rules! observed_entries {
    ($( $(#[$doc:meta])* $name:ident = $variant:ident, $($word:ident)+ ; )*) => {
        $(
            core::arch::global_asm!(
                ".pushsection .text",
                ".p2align 4",
                concat!(".globl ", observed_entry_label!($name)),
                concat!(".hidden ", observed_entry_label!($name)),
                concat!(".type ", observed_entry_label!($name), ", @function"),
                concat!(observed_entry_label!($name), ":"),
                // Entry: rsp = 8 mod 16; seven pushes align the call.
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "mov rdi, rsp",
                "mov esi, {index}",
                "call {observe}",
                "mov r11, rax",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "jmp r11",
                concat!(".size ", observed_entry_label!($name), ", . - ", observed_entry_label!($name)),
                ".popsection",
                observe = sym observe,
                index = const Observed::$variant as u32,
            );
        )*

        mod entries {
            unsafe extern "C" {
                $(
                    #[link_name = observed_entry_label!($name)]
                    pub(super) fn $name();
                )*
            }
        }

        /// The address of `o` in `api` (one jump table, on the launch path).
        #[inline(always)]
        fn address(api: &rmcp_sys::HipApi, o: Observed) -> Option<usize> {
            match o {
                $( Observed::$variant => api.$name.map(|f| f as usize), )*
            }
        }

        /// `o`'s name, NUL-terminated (no allocation on the call's path).
        fn c_name(o: Observed) -> &'static std::ffi::CStr {
            match o {
                $( Observed::$variant => {
                    // The literal ends in exactly one NUL and has no other.
                    const NAME: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
                        concat!(stringify!($name), "\0").as_bytes(),
                    ) {
                        Ok(n) => n,
                        Err(_) => panic!("a row's name"),
                    };
                    NAME
                } )*
            }
        }

        /// This library's entry for `o`, which the front's export jumps to.
        pub(crate) fn entry(o: Observed) -> *const c_void {
            match o {
                $( Observed::$variant => entries::$name as *const c_void, )*
            }
        }
    };
}

rmcp_sys::observed_functions!(observed_entries);

/// hipErrorSharedObjectSymbolNotFound, for a call no function can be found for (as a hooked
/// call would get; `__hipRegisterFunction` returns nothing and ignores it).
extern "C" fn not_found() -> i32 {
    rmcp_sys::error::SHARED_OBJECT_SYMBOL_NOT_FOUND
}

/// Where the observed call `o` from `ret` goes: the function the caller would have reached.
#[inline(always)]
fn target(o: Observed, ret: usize) -> Option<(usize, Option<&'static crate::binding::Binding>)> {
    let cfg = crate::state::config();
    let b = crate::binding::for_caller(ret, cfg).or_else(crate::handout::unplaced);
    if let Some(f) = b.and_then(|b| address(&b.api, o)) {
        return Some((f, b));
    }
    // No binding knows it (a function this runtime lacks, a caller nothing places): what
    // follows the shim in the global scope.
    let p = crate::front::next(c_name(o).as_ptr()) as usize;
    (p != 0).then_some((p, b))
}

/// Called by every observed entry with the saved registers and the row's index: records the
/// row's fact and returns the function to go on to. Never unwinds.
extern "C" fn observe(saved: *mut Saved, index: u32) -> usize {
    // SAFETY: the entry passes its own stack frame, laid out as `Saved`, live until it
    // returns.
    let saved = unsafe { &mut *saved };
    let Some(&(o, _)) = OBSERVED.get(index as usize) else {
        return not_found as *const () as usize;
    };
    let Ok(found) = std::panic::catch_unwind(|| target(o, saved.ret)) else {
        return not_found as *const () as usize;
    };
    let Some((function, binding)) = found else {
        return not_found as *const () as usize;
    };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        record(o, saved, binding);
    }));
    function
}

#[inline(always)]
fn record(o: Observed, saved: &mut Saved, binding: Option<&'static crate::binding::Binding>) {
    match o {
        Observed::HipLaunchKernel
        | Observed::HipLaunchKernelSpt
        | Observed::HipLaunchCooperativeKernel
        | Observed::HipLaunchCooperativeKernelSpt
        | Observed::HipExtLaunchKernel => {
            launches::record(o, Kernel::Stub(saved.rdi), saved.ret);
        }
        Observed::HipLaunchKernelExC => launches::record(o, Kernel::Stub(saved.rsi), saved.ret),
        Observed::HipModuleLaunchKernel
        | Observed::HipExtModuleLaunchKernel
        | Observed::HipHccModuleLaunchKernel
        | Observed::HipModuleLaunchCooperativeKernel => {
            launches::record(o, Kernel::Function(saved.rdi), saved.ret);
        }
        Observed::HipDrvLaunchKernelEx => {
            launches::record(o, Kernel::Function(saved.rsi), saved.ret);
        }
        Observed::HipRegisterFunction => {
            // At load, before the runtime is open: nothing to watch yet.
            launches::name_stub(saved.rsi, saved.rcx);
            return;
        }
        Observed::HsaQueueCreate => {
            // (agent, size, type, callback, data, ...): the agent is a one-word struct.
            saved.rcx = crate::queues::wrap(saved.rcx, saved.rdi as u64);
            // The runtime is open when it creates a queue; it runs this under its own
            // locks, so no loader call here (`fault::watch`).
            if let Some(c) = binding.and_then(|b| b.copy) {
                crate::fault::watch(c, false);
            }
            return;
        }
    }
    // A launch, before the runtime is entered: the ROCr behind it is found (and registered
    // with once it is open).
    if let Some(c) = binding.and_then(|b| b.copy) {
        crate::fault::watch(c, true);
    }
}
