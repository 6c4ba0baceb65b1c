//! The entries of the observed functions (`rmcp_sys::observed_functions!`): launches, graph
//! calls (`graphs`), `__hipRegisterFunction`, `__hipRegisterFatBinary`, `hsa_queue_create`,
//! `hsa_executable_freeze`. Each entry saves the six
//! argument registers and rax, calls [`observe`] with them and its row's index, restores them
//! and jumps to the function `observe` returns, with the stack as the caller left it:
//! whatever the function's arguments (dim3 structs, arguments on the stack), the callee
//! receives the caller's own, and returns straight to the caller. `observe` finds where the call goes (the function the
//! caller would have reached: `binding`, as for the hooked functions), records its fact
//! (`launches`, `graphs`, `queues`, `kernel_objects`) and, for `hsa_queue_create`, puts the
//! wrapped callback in place of the caller's (rcx) and goes on through `dispatches`' wrapper of
//! the function, which records the queue it created; for `__hipRegisterFatBinary`, under an
//! override, maybe a private wrapper in place of the caller's (rdi: `fatbin`).
//!
//! A launch costs the front's jump, this entry and `observe`'s binding lookup and ring
//! record: no lock, no heap, no system call (`docs/performance.md`). A lookup by name of an
//! observed function (`dlsym`, `hipGetProcAddress`) that finds a runtime copy's own
//! function gets the front's export when the global scope binds that function after the
//! shim, else the copy's per-copy entry (`handout`): eight stubs per row that put the row
//! and the copy's slot in r11 (which carries no argument) and jump to one common entry,
//! which goes on to that copy's own function ([`observe_copy`]), so such callers' launches
//! are recorded too.

use std::ffi::c_void;

use rmcp_core::registry::{OBSERVED, Observed};

use crate::entries::{COPY_ENTRIES, COPY_ENTRY_SIZE, observed_copies_label};
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
            // The per-copy entries: entry k puts (row << 8) | k in r11 (no argument travels
            // there) and jumps to the common per-copy entry; each fits COPY_ENTRY_SIZE.
            core::arch::global_asm!(
                ".pushsection .text",
                ".p2align 4",
                concat!(".globl ", observed_copies_label!($name)),
                concat!(".hidden ", observed_copies_label!($name)),
                concat!(".type ", observed_copies_label!($name), ", @function"),
                concat!(observed_copies_label!($name), ":"),
                ".irp k,0,1,2,3,4,5,6,7",
                "mov r11d, ({index} << 8) | \\k",
                "jmp rmcp_body_observed_copy_common",
                // Pads to the next entry; the assembler fails if an entry is longer.
                concat!(".org ", observed_copies_label!($name), " + {size} * (\\k + 1), 0xcc"),
                ".endr",
                concat!(".size ", observed_copies_label!($name), ", . - ", observed_copies_label!($name)),
                ".popsection",
                index = const Observed::$variant as u32,
                size = const COPY_ENTRY_SIZE,
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

// The per-copy entries' `.irp` list names slots 0 to 7.
const _: () = assert!(COPY_ENTRIES == 8);

// The common per-copy entry: as an ordinary entry, with r11 (row << 8 | slot) in place of the
// row's index.
core::arch::global_asm!(
    ".pushsection .text",
    ".p2align 4",
    ".globl rmcp_body_observed_copy_common",
    ".hidden rmcp_body_observed_copy_common",
    ".type rmcp_body_observed_copy_common, @function",
    "rmcp_body_observed_copy_common:",
    "push rdi",
    "push rsi",
    "push rdx",
    "push rcx",
    "push r8",
    "push r9",
    "push rax",
    "mov rdi, rsp",
    "mov esi, r11d",
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
    ".size rmcp_body_observed_copy_common, . - rmcp_body_observed_copy_common",
    ".popsection",
    observe = sym observe_copy,
);

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
    if matches!(o, Observed::HsaQueueCreate | Observed::HsaExecutableFreeze) {
        if let Ok(Some((function, copy))) = std::panic::catch_unwind(|| rocr_target(o, saved.ret)) {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                record(o, saved, Some(copy));
            }));
            return onward(o, function);
        }
    }
    let Ok(found) = std::panic::catch_unwind(|| target(o, saved.ret)) else {
        return not_found as *const () as usize;
    };
    let Some((function, binding)) = found else {
        return not_found as *const () as usize;
    };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        record(o, saved, binding.and_then(|b| b.copy));
    }));
    onward(o, function)
}

/// Where a runtime copy's own `hsa_queue_create` or `hsa_executable_freeze` call from `ret`
/// goes, without asking the loader: a runtime creates its queues and loads its code objects
/// under its own locks, which a thread inside dlopen (holding the loader's lock) may be
/// waiting for. Known once the copy was found (its first hooked or observed call, or a
/// kernel's registration, all before its first queue or code object); else None, and the
/// call's binding is found as any other's.
fn rocr_target(o: Observed, ret: usize) -> Option<(usize, &'static crate::copies::Copy)> {
    let c = crate::copies::containing(ret)?;
    let f = match o {
        Observed::HsaExecutableFreeze => c.executable_freeze,
        _ => c.queue_create,
    };
    (f != 0).then_some((f, c))
}

/// What the entry jumps to for `function`, the function the caller would have reached: the
/// function itself, but for `hsa_queue_create`, which goes through `dispatches`' wrapper of that
/// function (the same call, whose created queue is then recorded).
#[inline(always)]
fn onward(o: Observed, function: usize) -> usize {
    if o == Observed::HsaQueueCreate {
        return std::panic::catch_unwind(|| crate::dispatches::creating(function))
            .unwrap_or(function);
    }
    function
}

/// Called by the per-copy entries (`handout` hands them out for a copy's observed function
/// found by name): `code` is the row's index << 8 | the copy's slot. The call goes to that
/// copy's own function, whoever makes it, and its fact is recorded. Never unwinds.
extern "C" fn observe_copy(saved: *mut Saved, code: u32) -> usize {
    // SAFETY: as in `observe`.
    let saved = unsafe { &mut *saved };
    let Some(&(o, _)) = OBSERVED.get((code >> 8) as usize) else {
        return not_found as *const () as usize;
    };
    let slot = (code & 0xff) as usize;
    let Ok(found) = std::panic::catch_unwind(|| {
        let b = crate::handout::for_slot(slot)?;
        Some((address(&b.api, o)?, b))
    }) else {
        return not_found as *const () as usize;
    };
    let Some((function, binding)) = found else {
        return not_found as *const () as usize;
    };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        record(o, saved, binding.copy);
    }));
    onward(o, function)
}

#[inline(always)]
fn record(o: Observed, saved: &mut Saved, copy: Option<&'static crate::copies::Copy>) {
    let kernel = match o {
        Observed::HipLaunchKernel
        | Observed::HipLaunchKernelSpt
        | Observed::HipLaunchCooperativeKernel
        | Observed::HipLaunchCooperativeKernelSpt
        | Observed::HipExtLaunchKernel => Kernel::Stub(saved.rdi),
        Observed::HipLaunchKernelExC => Kernel::Stub(saved.rsi),
        Observed::HipModuleLaunchKernel
        | Observed::HipExtModuleLaunchKernel
        | Observed::HipHccModuleLaunchKernel
        | Observed::HipModuleLaunchCooperativeKernel => Kernel::Function(saved.rdi),
        Observed::HipDrvLaunchKernelEx => Kernel::Function(saved.rsi),
        Observed::HipGraphLaunch | Observed::HipGraphLaunchSpt => Kernel::Graph(saved.rdi),
        Observed::HipStreamBeginCapture | Observed::HipStreamBeginCaptureSpt => {
            crate::graphs::begin_capture(saved.rdi);
            return;
        }
        Observed::HipStreamEndCapture | Observed::HipStreamEndCaptureSpt => {
            crate::graphs::end_capture(saved.rdi);
            return;
        }
        Observed::HipGraphAddKernelNode => {
            crate::graphs::node_params(o, saved.r8);
            return;
        }
        Observed::HipGraphKernelNodeSetParams => {
            crate::graphs::node_params(o, saved.rsi);
            return;
        }
        Observed::HipGraphExecKernelNodeSetParams => {
            crate::graphs::node_params(o, saved.rdx);
            return;
        }
        Observed::HipRegisterFunction => {
            // At load, before the runtime is open: nothing to watch yet.
            launches::name_stub(saved.rsi, saved.rcx);
            return;
        }
        Observed::HipRegisterFatBinary => {
            // At start-up: under an override, maybe a private copy of the entry to load.
            saved.rdi = crate::fatbin::register(saved.rdi, saved.ret);
            return;
        }
        Observed::HsaExecutableFreeze => {
            // (executable, options): its code objects are loaded, its symbols final.
            if let Some(c) = copy {
                crate::kernel_objects::freezing(c, saved.rdi as u64);
            }
            return;
        }
        Observed::HsaQueueCreate => {
            // (agent, size, type, callback, data, ...): the agent is a one-word struct.
            saved.rcx = crate::queues::wrap(saved.rcx, saved.rdi as u64);
            // The runtime is open when it creates a queue (it runs this under its own locks;
            // `fault::watch` asks the loader nothing).
            if let Some(c) = copy {
                crate::fault::watch(c);
            }
            return;
        }
    };
    launches::record(o, kernel, saved.ret);
    // A launch while a stream is being captured goes into a graph (one load otherwise).
    if crate::graphs::capturing() {
        crate::graphs::captured(kernel);
    }
    // A launch, before the runtime is entered: the ROCr behind it is registered with if it is
    // open (else at the runtime's queue creation, or after its next served hooked call).
    if let Some(c) = copy {
        crate::fault::watch(c);
    }
}
