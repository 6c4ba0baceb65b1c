//! librmcp_shim.so, the object LD_PRELOAD loads: the shim's exports and nothing else.
//!
//! Why it is separate from the body (issue 17, docs/design.md "Two objects"): LD_PRELOAD
//! reaches every process of a tree, and a Rust std library costs about five times an empty
//! C library to start (libgcc_s to find and map, about 1,350 relocations, std's
//! initialisers). This object is what every process pays for: `no_std`, `panic = "abort"`,
//! no allocator, no dependency but libc, a few relocations, one fstat(2) at load. build.rs
//! compiles it with the `rustc` and linker cargo uses for the target, outside cargo's crate
//! graph (cargo sets the panic strategy per profile, not per crate). The shim itself,
//! librmcp_shim_body.so (the crate's library), is mapped next to it only when a process
//! first calls a hooked HIP function, or looks one up that a runtime in the process
//! defines. A process that never touches HIP never maps it.
//!
//! What is here:
//! - one export per row of the hook table (`rmcp_sys::hooked_functions!`, included from
//!   rmcp-sys, so the lists cannot drift): `jmp *ENTRIES[i]`. Until the body is attached,
//!   `ENTRIES[i]` is a stub that saves the arguments, attaches the body and goes on to the
//!   body's function with the stack as the caller left it (the body reads the caller's
//!   return address at [rsp]). After that, a hooked call costs one indirect jump here.
//! - `rmcp_shim_stats`, the counters as JSON (for Python's `rmcp_rdna.stats()`), from the
//!   body, which it attaches if need be.
//! - `dlsym` and `dlvsym`: a lookup that is not for a hooked name (anything not starting
//!   "hip" first, by three byte compares) or on RTLD_NEXT leaves by a jump to the next
//!   dlsym (dlvsym), so it answers as without the shim. A hooked name asks `route` (the body's
//!   `lookup` once the body is attached), which either sends the caller on to the next
//!   dlsym, with its registers and return address, or returns a value (issue 33: the
//!   caller's `dlerror()` state is part of the answer; see `route`). Before the body is
//!   attached, a lookup whose answer without the shim is NULL (a presence probe in a process
//!   without HIP) loads nothing; otherwise the body is attached first.
//! - what the body needs from the object the process preloaded (`abi::Front`): glibc's
//!   dlsym, the next dlsym and dlvsym after this object, `dlsym(RTLD_NEXT)` from this
//!   object's place in the search order, the address of each export, the thread-state block
//!   (initial-exec TLS, so that access from the lazily mapped body never allocates), and
//!   what descriptor 2 was at load.
//!
//! If the body cannot be mapped (the file is missing, ABI mismatch, no memory), every call
//! still goes where it would have gone without the shim, unchanged: the next definition
//! after this object, else the caller's own dependency tree, else
//! hipErrorSharedObjectSymbolNotFound; one line says so on stderr (not with RMCP_LOG=off).
//!
//! No panic can happen here: nothing indexes without `get`, no arithmetic can overflow, and
//! build.rs links this crate's object alone, without `core`'s compiled code, so a panic path
//! left in it would be an undefined reference to `core::panicking` and fail the build. The
//! panic handler exists because `no_std` requires one; it traps and cannot unwind.
//!
//! Nothing here may call a function this object exports through the PLT: `dlsym` would
//! reach this object's own. glibc's is found with glibc's own dlvsym, which `sys` reads from
//! libc's dynamic symbol table (this object exports a `dlvsym` too).
//! glibc reads dlsym's return address to tell what RTLD_NEXT is after, so the calls that
//! mean "after this object" must be real calls from here, never tail jumps
//! (`next_after_front`).

#![no_std]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("the front is written for x86-64 Linux only");

// What only the body reads of the shared definition is unused here.
#[allow(dead_code)]
mod abi;
mod body;
mod fork;
mod installs;
mod sys;
mod unattached;

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use abi::{Addr, DlsymFn, Front};

include!("../../rmcp-sys/src/hooks.rs");

/// hipErrorSharedObjectSymbolNotFound.
const ERROR_SYMBOL_NOT_FOUND: i32 = 302;

/// Whether an observed row's words end in `passive` (`observed_functions!`).
macro_rules! passive {
    (passive) => {
        true
    };
    ($first:ident $($rest:ident)*) => {
        passive!($($rest)*)
    };
    () => {
        false
    };
}

/// The hooked rows, handed on to `observed_functions!` with the observed ones.
macro_rules! front_rows {
    ($($rows:tt)*) => {
        observed_functions!(front_hooks [$($rows)*]);
    };
}

/// The hooks, their count, their names and the exports' assembly, from the table's rows:
/// the hooked functions first, then the observed ones (the body's `Hook` order, then its
/// `Observed` order).
macro_rules! front_hooks {
    ([$(
        $(#[$doc:meta])* $hname:ident = $hvariant:ident ($($arg:ident : $ty:ty),*)
        => out: $out:expr, size: $size:expr, flags: $flags:expr
        $(, resolves $sym:ident into $pfn:ident)?
        $(, host location in $prop:ident)?
        $(, names $nfn:ident from $kname:ident)?
        $(, loads image from $image:ident)?
        $(, loads file $fname:ident)?
        $(, unloads module $umodule:ident)?
        $(, waits $wait:ident)? ;
    )*]
    $( $(#[$odoc:meta])* $oname:ident = $ovariant:ident, $($word:ident)+ ; )*) => {
        front_hooks! { @all
            $( $hname = $hvariant, hook; )*
            $( $oname = $ovariant, $($word)+; )*
        }
    };
    (@all $( $name:ident = $variant:ident, $($word:ident)+ ; )*) => {
        /// The hooks in the table's order (the body's `Hook` order, then `Observed`).
        #[derive(Clone, Copy)]
        #[repr(u32)]
        #[allow(clippy::enum_variant_names)]
        enum Hook { $( $variant, )* }

        /// How many hooks there are, observed ones included.
        const HOOKS: usize = [$( Hook::$variant ),*].len();

        /// Each hook's name, NUL-terminated.
        static NAMES: [&[u8]; HOOKS] = [$( concat!(stringify!($name), "\0").as_bytes() ),*];

        /// Whether a hook maps the body only for a call from a HIP runtime.
        static PASSIVE: [bool; HOOKS] = [$( passive!($($word)+) ),*];

        // Each export: one indirect jump through its slot of ENTRIES. Each stub: the hook's
        // index in eax (no hook is variadic, so al carries nothing), then the common path.
        // `rmcp_front_own_<name>` is a hidden alias of the export, so that the address the
        // body is handed is this object's, whatever else in the process has the same name.
        $(
            core::arch::global_asm!(
                ".pushsection .text",
                concat!(".globl ", stringify!($name)),
                concat!(".type ", stringify!($name), ", @function"),
                ".p2align 4",
                concat!(stringify!($name), ":"),
                "jmp qword ptr [rip + {entries} + {offset}]",
                concat!(".size ", stringify!($name), ", . - ", stringify!($name)),
                concat!(".globl rmcp_front_own_", stringify!($name)),
                concat!(".hidden rmcp_front_own_", stringify!($name)),
                concat!(".set rmcp_front_own_", stringify!($name), ", ", stringify!($name)),
                concat!(".globl rmcp_front_stub_", stringify!($name)),
                concat!(".hidden rmcp_front_stub_", stringify!($name)),
                concat!(".type rmcp_front_stub_", stringify!($name), ", @function"),
                concat!("rmcp_front_stub_", stringify!($name), ":"),
                "mov eax, {index}",
                "jmp rmcp_front_first_call",
                concat!(".size rmcp_front_stub_", stringify!($name), ", . - rmcp_front_stub_", stringify!($name)),
                ".popsection",
                entries = sym ENTRIES,
                offset = const (Hook::$variant as usize) * size_of::<usize>(),
                index = const Hook::$variant as u32,
            );
        )*

        /// The exports' own addresses and the stubs (assembly labels above).
        #[allow(non_upper_case_globals)]
        mod labels {
            pub(crate) mod own {
                unsafe extern "C" {
                    $( #[link_name = concat!("rmcp_front_own_", stringify!($name))]
                    pub(crate) static $name: u8; )*
                }
            }
            pub(crate) mod stub {
                unsafe extern "C" {
                    $( #[link_name = concat!("rmcp_front_stub_", stringify!($name))]
                    pub(crate) static $name: u8; )*
                }
            }
        }

        /// Where each export jumps: its stub until the body is attached, then the body's
        /// entry (or, without a body, the function the caller would have reached).
        static ENTRIES: [AtomicPtr<c_void>; HOOKS] =
            [$( AtomicPtr::new((&raw const labels::stub::$name).cast_mut().cast()) ),*];

        /// What the body is handed.
        static FRONT: Front<HOOKS> = Front {
            abi: abi::ABI,
            size: Front::<HOOKS>::SIZE,
            hooks: HOOKS as u32,
            stderr_state: AtomicU32::new(0),
            stderr_dev: AtomicU64::new(0),
            stderr_ino: AtomicU64::new(0),
            glibc_dlsym: AtomicUsize::new(0),
            next_dlsym: AtomicUsize::new(0),
            next_dlvsym: AtomicUsize::new(0),
            next: next_after_front,
            dlsym_export: Addr((&raw const OWN_DLSYM).cast()),
            thread_offset: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            loader_inconsistent: AtomicU32::new(0),
            exports: [$( Addr((&raw const labels::own::$name).cast()) ),*],
        };
    };
}

hooked_functions!(front_rows);

unsafe extern "C" {
    #[link_name = "rmcp_front_own_dlsym"]
    static OWN_DLSYM: u8;
}

// The common path of the stubs: the six argument registers saved, `resolve(index, the
// caller's return address)` gives the function to go on to, the registers come back and the
// stack is as the caller left it. Entry: rsp = 8 mod 16; six pushes and 8 bytes align the
// call.
core::arch::global_asm!(
    ".pushsection .text",
    ".globl rmcp_front_first_call",
    ".hidden rmcp_front_first_call",
    ".type rmcp_front_first_call, @function",
    "rmcp_front_first_call:",
    "push rdi",
    "push rsi",
    "push rdx",
    "push rcx",
    "push r8",
    "push r9",
    "sub rsp, 8",
    "mov edi, eax",
    "mov rsi, qword ptr [rsp + 56]",
    "call {resolve}",
    "add rsp, 8",
    "pop r9",
    "pop r8",
    "pop rcx",
    "pop rdx",
    "pop rsi",
    "pop rdi",
    "jmp rax",
    ".size rmcp_front_first_call, . - rmcp_front_first_call",
    ".popsection",
    resolve = sym resolve,
);

// dlsym. The fast way out is for names that do not start "hip", "__hip" or "hsa_" (the
// hooked and observed names start so) and for RTLD_NEXT ((void *)-1): a jump to the next
// dlsym, so that it (and an audit module) sees the original caller. A "hip" name asks
// `route(handle, name, return address)`, which answers in two registers (`Route`): a dlsym
// to jump to with the caller's registers and return address (rax), or, when rax is 0, the
// value to return (rdx).
core::arch::global_asm!(
    ".pushsection .text",
    ".globl dlsym",
    ".type dlsym, @function",
    ".p2align 4",
    "dlsym:",
    "test rsi, rsi",
    "jz .Lrmcp_dlsym_next",
    "cmp rdi, -1",
    "je .Lrmcp_dlsym_next",
    "cmp byte ptr [rsi], 0x5f", // _: "__hip"
    "je .Lrmcp_dlsym_under",
    "cmp byte ptr [rsi], 0x68", // h
    "jne .Lrmcp_dlsym_next",
    "cmp byte ptr [rsi + 1], 0x73", // s: "hsa_"
    "je .Lrmcp_dlsym_hsa",
    "cmp byte ptr [rsi + 1], 0x69", // i
    "jne .Lrmcp_dlsym_next",
    "cmp byte ptr [rsi + 2], 0x70", // p
    "jne .Lrmcp_dlsym_next",
    ".Lrmcp_dlsym_route:",
    "push rdi",
    "push rsi",
    "sub rsp, 8",
    "mov rdx, qword ptr [rsp + 24]",
    "call {route}",
    "add rsp, 8",
    "pop rsi",
    "pop rdi",
    "test rax, rax",
    "jz .Lrmcp_dlsym_value",
    "jmp rax",
    ".Lrmcp_dlsym_value:",
    "mov rax, rdx",
    "ret",
    ".Lrmcp_dlsym_under:",
    "cmp byte ptr [rsi + 1], 0x5f", // _
    "jne .Lrmcp_dlsym_next",
    "cmp byte ptr [rsi + 2], 0x68", // h
    "jne .Lrmcp_dlsym_next",
    "cmp byte ptr [rsi + 3], 0x69", // i
    "jne .Lrmcp_dlsym_next",
    "cmp byte ptr [rsi + 4], 0x70", // p
    "jne .Lrmcp_dlsym_next",
    "jmp .Lrmcp_dlsym_route",
    ".Lrmcp_dlsym_hsa:",
    "cmp byte ptr [rsi + 2], 0x61", // a
    "jne .Lrmcp_dlsym_next",
    "cmp byte ptr [rsi + 3], 0x5f", // _
    "jne .Lrmcp_dlsym_next",
    "jmp .Lrmcp_dlsym_route",
    ".Lrmcp_dlsym_next:",
    "mov rax, qword ptr [rip + {front} + {next_dlsym}]",
    "test rax, rax",
    "jz .Lrmcp_dlsym_find",
    "jmp rax",
    ".Lrmcp_dlsym_find:",
    "push rdi",
    "push rsi",
    "sub rsp, 8",
    "call {find_next}",
    "add rsp, 8",
    "pop rsi",
    "pop rdi",
    "jmp rax",
    ".size dlsym, . - dlsym",
    ".globl rmcp_front_own_dlsym",
    ".hidden rmcp_front_own_dlsym",
    ".set rmcp_front_own_dlsym, dlsym",
    ".popsection",
    route = sym route,
    find_next = sym find_next_dlsym,
    front = sym FRONT,
    next_dlsym = const core::mem::offset_of!(Front<HOOKS>, next_dlsym),
);

// dlvsym, routed as dlsym is: names that do not start "hip", "__hip" or "hsa_", null
// arguments and RTLD_NEXT jump to the next dlvsym; a "hip" name asks
// `route_versioned(handle, name, version, return address)`, which answers as `route` does.
// Three pushes leave the stack aligned for the call (rsp = 8 mod 16 at entry).
core::arch::global_asm!(
    ".pushsection .text",
    ".globl dlvsym",
    ".type dlvsym, @function",
    ".p2align 4",
    "dlvsym:",
    "test rsi, rsi",
    "jz .Lrmcp_dlvsym_next",
    "test rdx, rdx",
    "jz .Lrmcp_dlvsym_next",
    "cmp rdi, -1",
    "je .Lrmcp_dlvsym_next",
    "cmp byte ptr [rsi], 0x5f", // _: "__hip"
    "je .Lrmcp_dlvsym_under",
    "cmp byte ptr [rsi], 0x68", // h
    "jne .Lrmcp_dlvsym_next",
    "cmp byte ptr [rsi + 1], 0x73", // s: "hsa_"
    "je .Lrmcp_dlvsym_hsa",
    "cmp byte ptr [rsi + 1], 0x69", // i
    "jne .Lrmcp_dlvsym_next",
    "cmp byte ptr [rsi + 2], 0x70", // p
    "jne .Lrmcp_dlvsym_next",
    ".Lrmcp_dlvsym_route:",
    "push rdi",
    "push rsi",
    "push rdx",
    "mov rcx, qword ptr [rsp + 24]",
    "call {route}",
    "test rax, rax",
    "jz .Lrmcp_dlvsym_value",
    "pop rdx",
    "pop rsi",
    "pop rdi",
    "jmp rax",
    ".Lrmcp_dlvsym_value:",
    "mov rax, rdx",
    "add rsp, 24",
    "ret",
    ".Lrmcp_dlvsym_under:",
    "cmp byte ptr [rsi + 1], 0x5f", // _
    "jne .Lrmcp_dlvsym_next",
    "cmp byte ptr [rsi + 2], 0x68", // h
    "jne .Lrmcp_dlvsym_next",
    "cmp byte ptr [rsi + 3], 0x69", // i
    "jne .Lrmcp_dlvsym_next",
    "cmp byte ptr [rsi + 4], 0x70", // p
    "jne .Lrmcp_dlvsym_next",
    "jmp .Lrmcp_dlvsym_route",
    ".Lrmcp_dlvsym_hsa:",
    "cmp byte ptr [rsi + 2], 0x61", // a
    "jne .Lrmcp_dlvsym_next",
    "cmp byte ptr [rsi + 3], 0x5f", // _
    "jne .Lrmcp_dlvsym_next",
    "jmp .Lrmcp_dlvsym_route",
    ".Lrmcp_dlvsym_next:",
    "mov rax, qword ptr [rip + {front} + {next_dlvsym}]",
    "test rax, rax",
    "jz .Lrmcp_dlvsym_find",
    "jmp rax",
    ".Lrmcp_dlvsym_find:",
    "push rdi",
    "push rsi",
    "push rdx",
    "call {find_next}",
    "pop rdx",
    "pop rsi",
    "pop rdi",
    "jmp rax",
    ".size dlvsym, . - dlvsym",
    ".popsection",
    route = sym route_versioned,
    find_next = sym find_next_dlvsym,
    front = sym FRONT,
    next_dlvsym = const core::mem::offset_of!(Front<HOOKS>, next_dlvsym),
);

// The body's per-thread state (`thread::ThreadState`, 8 bytes; 16 reserved). Initial-exec:
// part of the static TLS block every thread gets at creation, so no access allocates.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl rmcp_front_thread_state",
    ".hidden rmcp_front_thread_state",
    ".type rmcp_front_thread_state, @object",
    ".size rmcp_front_thread_state, 16",
    "rmcp_front_thread_state:",
    ".zero 16",
    ".popsection",
);

/// The front's initialiser, run by the loader when it maps the object.
extern "C" fn init() {
    body::record_stderr();
    fork::register();
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // Unreachable by construction (see the top): a trap, never an unwind.
    // SAFETY: `ud2` raises SIGILL and does not return.
    unsafe { core::arch::asm!("ud2", options(noreturn, nomem, nostack)) }
}

// ---- glibc's dlsym and the next one -----------------------------------------------------

extern "C" fn not_found(_: *mut c_void, _: *const c_char) -> *mut c_void {
    core::ptr::null_mut()
}

/// glibc's dlsym: at GLIBC_2.34 in libc since 2.34, at GLIBC_2.2.5 in libdl before; a
/// function that finds nothing when the process has no glibc loader.
fn glibc_dlsym() -> DlsymFn {
    if let Some(f) = FRONT.glibc_dlsym() {
        return f;
    }
    let mut p = core::ptr::null_mut();
    if let Some(dlvsym) = sys::dlvsym_fn() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: NUL-terminated strings; dlvsym only reads them.
            p = unsafe { dlvsym(sys::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
    }
    let f = if p.is_null() {
        not_found as *const () as usize
    } else {
        p as usize
    };
    FRONT.glibc_dlsym.store(f, Ordering::Release);
    FRONT.glibc_dlsym().unwrap_or(not_found)
}

/// dlsym(RTLD_NEXT, name) from this object: the next definition after it in the search
/// order. A real call, never a tail jump (the result is kept past it), so that glibc sees
/// this object as the caller.
#[inline(never)]
unsafe fn raw_next(name: *const c_char) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated (the callers' contract); dlsym only reads it.
    let p = unsafe { glibc_dlsym()(sys::RTLD_NEXT, name) };
    core::hint::black_box(p)
}

/// The next definition of `name` after the shim: after this object, and after any other
/// install of the shim that follows it (`installs`).
unsafe extern "C" fn next_after_front(name: *const c_char) -> *mut c_void {
    // SAFETY: the callers' contract.
    installs::skip(unsafe { raw_next(name) }, name)
}

/// The next dlsym after this object (a wrapper preloaded after the shim, or glibc's).
extern "C" fn find_next_dlsym() -> usize {
    let known = FRONT.next_dlsym.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: a NUL-terminated name.
    let mut p = unsafe { next_after_front(c"dlsym".as_ptr()) } as usize;
    if p == 0 {
        p = glibc_dlsym() as usize;
    }
    FRONT.next_dlsym.store(p, Ordering::Release);
    p
}

extern "C" fn not_found_versioned(
    _: *mut c_void,
    _: *const c_char,
    _: *const c_char,
) -> *mut c_void {
    core::ptr::null_mut()
}

/// The next dlvsym after this object (a wrapper preloaded after the shim, or glibc's); a
/// function that finds nothing when the process has none.
extern "C" fn find_next_dlvsym() -> usize {
    let known = FRONT.next_dlvsym.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: a NUL-terminated name.
    let mut p = unsafe { next_after_front(c"dlvsym".as_ptr()) } as usize;
    if p == 0 {
        p = sys::dlvsym_fn().map_or(not_found_versioned as *const () as usize, |f| f as usize);
    }
    FRONT.next_dlvsym.store(p, Ordering::Release);
    p
}

// ---- dlopen --------------------------------------------------------------------------------

// dlopen: a jump to the next dlopen, so that it sees the original caller (glibc searches the
// caller's RUNPATH and namespace). A load with RTLD_DEEPBIND (0x8) first notes it
// (`deepbind`): such a library binds its HIP imports in its own tree, never reaching the
// shim, and the body names it at exit.
core::arch::global_asm!(
    ".pushsection .text",
    ".globl dlopen",
    ".type dlopen, @function",
    ".p2align 4",
    "dlopen:",
    "test esi, 8",
    "jnz .Lrmcp_dlopen_deep",
    ".Lrmcp_dlopen_go:",
    "mov rax, qword ptr [rip + {next}]",
    "test rax, rax",
    "jz .Lrmcp_dlopen_find",
    "jmp rax",
    ".Lrmcp_dlopen_find:",
    "push rdi",
    "push rsi",
    "sub rsp, 8",
    "call {find}",
    "add rsp, 8",
    "pop rsi",
    "pop rdi",
    "test rax, rax",
    "jz .Lrmcp_dlopen_none",
    "jmp rax",
    ".Lrmcp_dlopen_none:",
    "ret",
    ".Lrmcp_dlopen_deep:",
    "push rdi",
    "push rsi",
    "sub rsp, 8",
    "call {deep}",
    "add rsp, 8",
    "pop rsi",
    "pop rdi",
    "jmp .Lrmcp_dlopen_go",
    ".size dlopen, . - dlopen",
    ".popsection",
    next = sym NEXT_DLOPEN,
    find = sym find_next_dlopen,
    deep = sym deepbind,
);

/// The dlopen after this object (0 until found).
static NEXT_DLOPEN: AtomicUsize = AtomicUsize::new(0);

extern "C" fn find_next_dlopen() -> usize {
    let mut p = NEXT_DLOPEN.load(Ordering::Acquire);
    if p == 0 {
        // SAFETY: a NUL-terminated name.
        p = unsafe { raw_next(c"dlopen".as_ptr()) } as usize;
        NEXT_DLOPEN.store(p, Ordering::Release);
    }
    p
}

/// The dlopen after this object, for the front's own loads.
fn next_dlopen() -> Option<sys::DlopenFn> {
    let p = find_next_dlopen();
    // SAFETY: `p` is null or the next definition of `dlopen`, with its C signature.
    (p != 0).then(|| unsafe { core::mem::transmute::<usize, sys::DlopenFn>(p) })
}

/// A library is being loaded with RTLD_DEEPBIND: at exit, the body (attached then if need
/// be) names the libraries that bind HIP functions past the shim. Registered once.
extern "C" fn deepbind() {
    static REGISTERED: AtomicU32 = AtomicU32::new(0);
    if installs::standing_aside() || REGISTERED.swap(1, Ordering::AcqRel) != 0 {
        return;
    }
    // SAFETY: `at_exit` lives as long as the front (never unmapped); the handle names it.
    unsafe { sys::cxa_atexit(at_exit, core::ptr::null_mut(), (&raw const FRONT).cast()) };
}

/// At exit, the body names what bypassed the shim. It is mapped for that only in a process
/// that has a HIP runtime mapped (issue 30: a process that never touched HIP maps nothing,
/// reads nothing and prints nothing at exit), and never in a fork child, whose loader may
/// be in the middle of a dlopen another thread of the parent was making (a dlopen there
/// aborts, "Inconsistency detected by ld.so", or hangs).
extern "C" fn at_exit(_: *mut c_void) {
    let attached =
        body::attached() || (!fork::in_child() && fork::runtime_mapped() && body::attach());
    if attached {
        if let Some(report) = body::deepbind_seen() {
            report();
        }
    }
}

// ---- dlclose ---------------------------------------------------------------------------

/// The dlclose after this object (another wrapper's, or glibc's), found once.
fn next_dlclose() -> Option<sys::DlcloseFn> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut p = NEXT.load(Ordering::Acquire);
    if p == 0 {
        // SAFETY: a NUL-terminated name.
        p = unsafe { next_after_front(c"dlclose".as_ptr()) } as usize;
        NEXT.store(p, Ordering::Release);
    }
    // SAFETY: `p` is null or the next definition of `dlclose`, with its C signature.
    (p != 0).then(|| unsafe { core::mem::transmute::<usize, sys::DlcloseFn>(p) })
}

/// `int dlclose(void *handle)`: the next dlclose's answer, unchanged; once it has returned
/// and the loader's count of unloaded objects has moved, the generation of loaded objects
/// moves on (`abi::Front::generation`), so that the body
/// forgets what it learnt about objects that may be gone (issue 22: a library unloaded and
/// another mapped at its address must not inherit its callers' bindings). glibc's dlclose
/// does not read its caller's address, so this is a plain call.
///
/// # Safety
/// dlclose's contract: `handle` came from dlopen.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let Some(close) = next_dlclose() else {
        return -1;
    };
    // SAFETY: the caller's handle, as it passed it.
    let rc = unsafe { close(handle) };
    // Only a dlclose that unmapped something makes what the body knows stale; most give
    // back a reference (an RTLD_NOLOAD probe, a library still in use).
    static UNLOADS: AtomicU64 = AtomicU64::new(0);
    let now = fork::unloads();
    if now == u64::MAX || UNLOADS.swap(now, Ordering::AcqRel) != now {
        FRONT.generation.fetch_add(1, Ordering::AcqRel);
    }
    rc
}

/// Fills what the body reads from `FRONT` that is not known before the process runs.
fn prepare_front() {
    glibc_dlsym();
    find_next_dlsym();
    find_next_dlvsym();
    let offset: usize;
    // SAFETY: loads the GOT slot holding the thread-state block's offset from the thread
    // pointer (initial-exec TLS); no other effect.
    unsafe {
        core::arch::asm!(
            "mov {o}, qword ptr [rip + rmcp_front_thread_state@GOTTPOFF]",
            o = out(reg) offset,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    FRONT.thread_offset.store(offset, Ordering::Release);
}

// ---- where calls and lookups go ----------------------------------------------------------

/// `name` in the dependency tree of the object holding `ret`, never this object's own
/// export: a handle from dlopen(RTLD_NOLOAD) of the object's name, released at once.
fn in_callers_tree(ret: usize, name: *const c_char, own: *const c_void) -> *mut c_void {
    let Some(loader) = sys::loader() else {
        return core::ptr::null_mut();
    };
    let mut info = sys::DlInfo::EMPTY;
    // SAFETY: dladdr reads the loader's tables and fills `info`; `ret` is only compared.
    if unsafe { (loader.dladdr)(ret as *const c_void, &mut info) } == 0
        || info.dli_fname.is_null()
        // SAFETY: dli_fname is a NUL-terminated string (checked non-null).
        || unsafe { *info.dli_fname } == 0
    {
        return core::ptr::null_mut();
    }
    // SAFETY: a NUL-terminated file name from the loader; RTLD_NOLOAD maps nothing new.
    let h = unsafe { (loader.dlopen)(info.dli_fname, sys::RTLD_LAZY | sys::RTLD_NOLOAD) };
    if h.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: a live handle and a NUL-terminated name; then the reference dlopen took is
    // given back.
    let p = unsafe {
        let p = glibc_dlsym()(h, name);
        if let Some(close) = next_dlclose() {
            close(h);
        }
        p
    };
    if p.cast_const() == own {
        core::ptr::null_mut()
    } else {
        p
    }
}

/// Whether the object holding `ret` is a HIP runtime (its file name starts "libamdhip64"):
/// a passive hook maps the body only for such a caller.
fn called_from_hip(ret: usize) -> bool {
    let Some(loader) = sys::loader() else {
        return false;
    };
    let mut info = sys::DlInfo::EMPTY;
    // SAFETY: dladdr reads the loader's tables and fills `info`; `ret` is only compared.
    if unsafe { (loader.dladdr)(ret as *const c_void, &mut info) } == 0 {
        return false;
    }
    // SAFETY: dli_fname is null or the loader's NUL-terminated name for the object.
    let name = unsafe { sys::c_bytes(info.dli_fname) };
    let file = match name.iter().rposition(|&b| b == b'/') {
        Some(i) => name.get(i.wrapping_add(1)..).unwrap_or_default(),
        None => name,
    };
    file.starts_with(b"libamdhip64")
}

extern "C" fn unavailable() -> i32 {
    ERROR_SYMBOL_NOT_FOUND
}

/// Where hook `hook`, called from `ret`, goes: the body's function once attached;
/// otherwise what the caller would have reached without the shim.
extern "C" fn resolve(hook: u32, ret: usize) -> *mut c_void {
    let (Some(slot), Some(name), Some(own)) = (
        ENTRIES.get(hook as usize),
        NAMES.get(hook as usize),
        FRONT.exports.get(hook as usize),
    ) else {
        return unavailable as *mut c_void;
    };
    let name = name.as_ptr().cast::<c_char>();
    let passive = PASSIVE.get(hook as usize).copied().unwrap_or(false);
    if installs::standing_aside() {
        // The first install's export: the same for every caller, so kept.
        let p = installs::first(name);
        if !p.is_null() && p.cast_const() != own.0 {
            slot.store(p, Ordering::Release);
            return p;
        }
    } else if (!passive || body::attached() || called_from_hip(ret)) && body::attach() {
        return slot.load(Ordering::Acquire);
    }
    let p = unattached::function(hook as usize, ret, || {
        // SAFETY: a NUL-terminated name from NAMES.
        let p = unsafe { next_after_front(name) };
        if p.is_null() {
            in_callers_tree(ret, name, own.0)
        } else {
            p
        }
    });
    // Those lookups were the front's own: they leave no dlerror() message behind.
    if let Some(loader) = sys::loader() {
        // SAFETY: dlerror takes no argument; its answer is dropped.
        unsafe { (loader.dlerror)() };
    }
    if p.is_null() {
        unavailable as *mut c_void
    } else {
        p
    }
}

/// What `route` answers, in rax and rdx: a lookup function to jump to with the caller's
/// registers and return address (`jump`), or, when `jump` is 0, the value to return.
#[repr(C)]
struct Route {
    jump: usize,
    value: *mut c_void,
}

impl Route {
    /// On to the next dlsym: the loader answers the caller, `dlerror()` state included.
    fn next() -> Route {
        Route::to(find_next_dlsym())
    }

    /// On to the lookup function at `jump`.
    fn to(jump: usize) -> Route {
        Route {
            jump,
            value: core::ptr::null_mut(),
        }
    }

    /// The body's answer (`abi::Answer`); `next`: the lookup function that follows.
    fn of(answer: abi::Answer, next: fn() -> Route) -> Route {
        if answer.next != 0 {
            next()
        } else {
            Route {
                jump: 0,
                value: answer.value,
            }
        }
    }
}

/// What a "hip" lookup answers, called with (handle, name, return address). Issue 33: the
/// caller's `dlerror()` state is part of the answer, so whenever the answer without the
/// shim is what the next dlsym gives the caller, the caller asks it itself (`Route::next`).
extern "C" fn route(handle: *mut c_void, name: *const c_char, ret: usize) -> Route {
    // SAFETY: dlsym's contract: `name` is a NUL-terminated string (non-null: the assembly
    // checked).
    let wanted = unsafe { CStr::from_ptr(name) }.to_bytes_with_nul();
    let Some(hook) = NAMES.iter().position(|n| *n == wanted) else {
        return Route::next();
    };
    if installs::standing_aside() {
        return Route::next();
    }
    if let Some(lookup) = body::lookup() {
        return Route::of(lookup(handle, name, ret), Route::next);
    }
    if body::failed() {
        return Route::next();
    }
    // The answer without the shim: on a handle, the next dlsym's (unless that is this
    // object's export); on RTLD_DEFAULT, the global scope after this object, then the
    // caller's own tree. NULL there means no runtime defines the name for this caller.
    let own = FRONT.exports.get(hook).map_or(core::ptr::null(), |a| a.0);
    // SAFETY: find_next_dlsym returns a function with dlsym's signature.
    let next = unsafe { core::mem::transmute::<usize, DlsymFn>(find_next_dlsym()) };
    // SAFETY: the caller's handle and name, as it passed them to dlsym.
    let found = unsafe { next(handle, name) };
    if found.is_null() {
        // The caller's own lookup fails too: let it, with the loader's message.
        return Route::next();
    }
    if found.cast_const() == own {
        // SAFETY: a NUL-terminated name.
        let mut after = unsafe { next_after_front(name) };
        if after.is_null() && handle == sys::RTLD_DEFAULT {
            after = in_callers_tree(ret, name, own);
        }
        if after.is_null() {
            // Without the shim the lookup fails; the caller's own would find the export.
            return if fail_as_loader(handle, name, ret) {
                Route {
                    jump: 0,
                    value: core::ptr::null_mut(),
                }
            } else {
                Route::next()
            };
        }
    }
    if PASSIVE.get(hook).copied().unwrap_or(false) {
        // A passive hook (hsa_queue_create) maps nothing for a lookup: a process may use
        // ROCr without HIP. The next dlsym answers (on RTLD_DEFAULT, this object's export,
        // which forwards as the loader would bind).
        return Route::next();
    }
    if body::attach() {
        if let Some(lookup) = body::lookup() {
            return Route::of(lookup(handle, name, ret), Route::next);
        }
    }
    Route::next()
}

/// What a "hip" dlvsym answers, called with (handle, name, version, return address). A
/// versioned lookup never finds this object's exports (they have no version, and dlvsym
/// accepts only the version asked for), so the caller's own lookup answers as without the
/// shim, and goes on to the next dlvsym, unless the body hands its own function for the
/// runtime's that the lookup finds (`body`'s `vlookup`). Until the body is attached, it is
/// attached only when something defines the name at that version.
extern "C" fn route_versioned(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    ret: usize,
) -> Route {
    fn next() -> Route {
        Route::to(find_next_dlvsym())
    }
    // SAFETY: dlvsym's contract: `name` is a NUL-terminated string (non-null: the assembly
    // checked).
    let wanted = unsafe { CStr::from_ptr(name) }.to_bytes_with_nul();
    let Some(hook) = NAMES.iter().position(|n| *n == wanted) else {
        return next();
    };
    if installs::standing_aside() || PASSIVE.get(hook).copied().unwrap_or(false) {
        return next();
    }
    if let Some(vlookup) = body::vlookup() {
        return Route::of(vlookup(handle, name, version, ret), next);
    }
    if body::failed() {
        return next();
    }
    // SAFETY: find_next_dlvsym returns a function with dlvsym's signature.
    let nextv = unsafe { core::mem::transmute::<usize, abi::DlvsymFn>(find_next_dlvsym()) };
    // SAFETY: the caller's own arguments.
    if unsafe { nextv(handle, name, version) }.is_null() {
        return next();
    }
    if body::attach() {
        if let Some(vlookup) = body::vlookup() {
            return Route::of(vlookup(handle, name, version, ret), next);
        }
    }
    next()
}

/// Leaves pending the `dlerror()` message of a failed lookup of `name` on `handle` from
/// `ret` without the shim: "<object>: undefined symbol: <name>", the object being the
/// handle's, or the caller's for RTLD_DEFAULT (glibc names it by its link map's `l_name`),
/// made by a failed lookup on that very link map (what dlopen returns is the link map).
/// The main program's link map has no name and its search list holds this object's
/// export: its message cannot be made, and the failed lookup after this object stands in
/// for it (naming librmcp_shim.so). False when the object's own lookup finds the name (its
/// tree holds this object): then the next dlsym answers.
fn fail_as_loader(handle: *mut c_void, name: *const c_char, ret: usize) -> bool {
    let map = if handle == sys::RTLD_DEFAULT {
        sys::link_map_of(ret)
    } else {
        handle
    };
    if !map.is_null() && sys::link_map_named(map) {
        // SAFETY: a live link map (the caller's object, or the caller's handle) is a
        // handle for glibc's dlsym; `name` is NUL-terminated.
        return unsafe { glibc_dlsym()(map, name) }.is_null();
    }
    // SAFETY: a NUL-terminated name.
    unsafe { raw_next(name) }.is_null()
}

/// `size_t rmcp_shim_stats(char *buf, size_t len)`: this process's counters as JSON, for
/// `rmcp_rdna.stats()` (the body's `exports::stats` says the contract). An explicit
/// request, so it attaches the body if no hooked call has yet; 0 when the body cannot be
/// attached.
#[unsafe(no_mangle)]
pub extern "C" fn rmcp_shim_stats(buf: *mut c_char, len: usize) -> usize {
    if installs::standing_aside() {
        let first = installs::first(c"rmcp_shim_stats".as_ptr());
        if first.is_null() {
            return 0;
        }
        // SAFETY: the first install's `rmcp_shim_stats`, of this signature.
        let first = unsafe { core::mem::transmute::<*mut c_void, abi::StatsFn>(first) };
        return first(buf, len);
    }
    if !body::attach() {
        return 0;
    }
    body::stats().map_or(0, |f| f(buf, len))
}
