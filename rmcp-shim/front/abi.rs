//! The ABI between the two objects of the shim: what librmcp_shim.so (the preloaded front,
//! `front/front.rs`) hands librmcp_shim_body.so (the crate's library, `src/`) when it maps
//! it, and what the body hands back. This one file is compiled into both: the front
//! includes it as its module `abi`, the body as `front::abi` (`#[path]`), so the layouts
//! cannot drift. Only `core` may be named here (the front is `no_std`).
//!
//! Both structs are generic over the number of hooks, which each side takes from the one
//! hook table (`rmcp_sys::hooked_functions!`). What a compiler cannot check is that the two
//! files a process maps come from the same build; [`ABI`] and the `size`/`hooks` fields,
//! checked by both sides at attach, catch a body from another build.
//!
//! Every field the front fills after load is an atomic: threads that find the body
//! unattached may fill it at once, and the body reads it from any thread.

use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Bumped whenever `Front` or `Body` changes.
pub const ABI: u32 = 8;

/// glibc's `dlvsym`, or a wrapper with its signature.
pub type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;
/// glibc's `dlsym`, or a wrapper with its signature.
pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
/// `dlsym(RTLD_NEXT, name)` as seen from the front.
pub type NextFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;
/// The body's lookup of a hooked name: (handle, name, the caller's return address).
pub type LookupFn = extern "C" fn(*mut c_void, *const c_char, usize) -> Answer;
/// The body's versioned lookup of a hooked name: (handle, name, version, the caller's
/// return address).
pub type VlookupFn = extern "C" fn(*mut c_void, *const c_char, *const c_char, usize) -> Answer;

/// What a lookup of a hooked name answers (issue 33: the thread's `dlerror()` state is
/// part of the answer). Returned in two registers (rax, rdx).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Answer {
    /// Non-zero: the caller's lookup goes on to the next `dlsym` / `dlvsym`, with the
    /// caller's own registers and return address, so that the loader answers it, pointer
    /// and `dlerror()` state alike, exactly as without the shim. `value` is then unused.
    pub next: usize,
    /// The pointer the lookup returns when `next` is 0. The thread's `dlerror()` state has
    /// been made what the caller's own lookup would have left: none when `value` is
    /// non-null, the loader's message for a failed lookup when it is null.
    pub value: *mut c_void,
}

impl Answer {
    /// Go on to the next lookup function.
    pub const NEXT: Answer = Answer {
        next: 1,
        value: core::ptr::null_mut(),
    };

    /// Answer `value` (with the `dlerror()` state already made right).
    pub const fn value(value: *mut c_void) -> Answer {
        Answer { next: 0, value }
    }
}
/// `size_t rmcp_shim_stats(char *buf, size_t len)`.
pub type StatsFn = extern "C" fn(*mut c_char, usize) -> usize;

/// `stderr_state`: descriptor 2 was open when the front was loaded (dev and ino recorded).
pub const STDERR_OPEN: u32 = 1;
/// `stderr_state`: descriptor 2 was closed when the front was loaded.
pub const STDERR_CLOSED: u32 = 2;

/// An address in the front that never changes (an export's entry, its `dlsym`).
#[repr(transparent)]
pub struct Addr(pub *const c_void);
// SAFETY: an `Addr` is only ever read; the address it holds is of code in the front, which
// is immutable and stays mapped as long as anything can read the `Addr`.
unsafe impl Sync for Addr {}

/// What the front hands the body (one static in the front, for the life of the process).
#[repr(C)]
pub struct Front<const HOOKS: usize> {
    pub abi: u32,
    pub size: u32,
    pub hooks: u32,
    /// [`STDERR_OPEN`] or [`STDERR_CLOSED`] once the front's initialiser ran; 0 before.
    pub stderr_state: AtomicU32,
    pub stderr_dev: AtomicU64,
    pub stderr_ino: AtomicU64,
    /// glibc's dlsym (0 until the front found it): for lookups on handles.
    pub glibc_dlsym: AtomicUsize,
    /// The dlsym after the front (another wrapper's, or glibc's; 0 until found).
    pub next_dlsym: AtomicUsize,
    /// The dlvsym after the front (another wrapper's, or glibc's; 0 until found).
    pub next_dlvsym: AtomicUsize,
    /// `dlsym(RTLD_NEXT, name)` from the front's place in the search order.
    pub next: NextFn,
    /// The front's own `dlsym`: an address inside the front, to recognise its handle.
    pub dlsym_export: Addr,
    /// The offset of the per-thread state block (16 bytes of initial-exec TLS in the front)
    /// from the thread pointer.
    pub thread_offset: AtomicUsize,
    /// Bumped by the front's `dlclose` after every `dlclose` of the process returns: what
    /// the body remembers about loaded objects (who calls, where calls go) holds only for
    /// the generation it was learnt in.
    pub generation: AtomicU64,
    /// 1 in a fork child whose parent forked while another thread was inside dlopen or
    /// dlclose: the loader's state stays inconsistent in the child, and glibc asserts in the
    /// next dlopen, so the body must not call it (issue 22, shape 4).
    pub loader_inconsistent: AtomicU32,
    /// The front's export for each hook, in `Hook` order.
    pub exports: [Addr; HOOKS],
}

/// What the body hands back, into memory the front provides.
#[repr(C)]
pub struct Body<const HOOKS: usize> {
    pub abi: u32,
    pub size: u32,
    pub hooks: u32,
    pub reserved: u32,
    pub lookup: LookupFn,
    pub vlookup: VlookupFn,
    pub stats: StatsFn,
    /// Called by the front's fork handler in the parent, before every fork, once the body is
    /// attached: whatever a child could otherwise only learn from the loader, learnt now.
    pub before_fork: extern "C" fn(),
    /// Called by the front at exit in a process that dlopened a library with
    /// RTLD_DEEPBIND (the front attaches the body for it if need be): such a library binds
    /// its HIP imports inside its own tree, past the shim; the body finds which and reports
    /// them.
    pub deepbind_seen: extern "C" fn(),
    /// The body's entry for each hook, in `Hook` order; never null.
    pub entries: [*const c_void; HOOKS],
}

/// The signature of the body's one export, `rmcp_shim_attach`: 0 when `body` was filled.
pub type AttachFn<const HOOKS: usize> =
    unsafe extern "C" fn(*const Front<HOOKS>, *mut Body<HOOKS>) -> i32;

impl<const HOOKS: usize> Front<HOOKS> {
    /// The size and hook count a `Front` of this build has.
    pub const SIZE: u32 = size_of::<Self>() as u32;

    /// Whether `self` was built from this same definition with this many hooks.
    pub fn matches(&self) -> bool {
        self.abi == ABI && self.size == Self::SIZE && self.hooks as usize == HOOKS
    }

    /// glibc's dlsym, once the front has found it.
    pub fn glibc_dlsym(&self) -> Option<DlsymFn> {
        fn_at(self.glibc_dlsym.load(Ordering::Acquire))
    }

    /// The dlsym after the front, once found.
    pub fn next_dlsym(&self) -> Option<DlsymFn> {
        fn_at(self.next_dlsym.load(Ordering::Acquire))
    }

    /// The dlvsym after the front, once found.
    pub fn next_dlvsym(&self) -> Option<DlvsymFn> {
        let addr = self.next_dlvsym.load(Ordering::Acquire);
        // SAFETY: the front stores here only the address of a function with `dlvsym`'s
        // signature (the next definition of `dlvsym` after it).
        (addr != 0).then(|| unsafe { core::mem::transmute::<usize, DlvsymFn>(addr) })
    }

    /// The current generation (see the field): one load.
    #[inline(always)]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether dlopen may not be called in this process (see the field).
    pub fn loader_inconsistent(&self) -> bool {
        self.loader_inconsistent.load(Ordering::Acquire) != 0
    }

    /// What descriptor 2 was at load: Some(Some((dev, ino))) when open, Some(None) when
    /// closed, None when the front's initialiser has not run.
    pub fn stderr_at_load(&self) -> Option<Option<(u64, u64)>> {
        match self.stderr_state.load(Ordering::Acquire) {
            STDERR_OPEN => Some(Some((
                self.stderr_dev.load(Ordering::Relaxed),
                self.stderr_ino.load(Ordering::Relaxed),
            ))),
            STDERR_CLOSED => Some(None),
            _ => None,
        }
    }
}

impl<const HOOKS: usize> Body<HOOKS> {
    /// The size a `Body` of this build has.
    pub const SIZE: u32 = size_of::<Self>() as u32;
}

/// A dlsym-shaped function at `addr`, or None for 0.
fn fn_at(addr: usize) -> Option<DlsymFn> {
    if addr == 0 {
        return None;
    }
    // SAFETY: the front stores only addresses of functions with `DlsymFn`'s signature in
    // these fields (glibc's dlsym, or the next object's), and a function pointer has the
    // size and representation of a `usize` on every target the shim builds for.
    Some(unsafe { core::mem::transmute::<usize, DlsymFn>(addr) })
}
