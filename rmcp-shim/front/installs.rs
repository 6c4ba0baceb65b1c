//! Two installs of the shim in one process (issue 22, shape 10): the wheel's preloaded by
//! `rmcp run` and another from /etc/ld.so.preload, say. The first in the search order does
//! the work; the others stand aside.
//!
//! - Every front exports `rmcp_front_next(name)`: `dlsym(RTLD_NEXT, name)` as seen from
//!   that front. When the next definition after this front is inside another front, this
//!   front asks that one for the next definition after it (`skip`), so the body's
//!   "next definition after the shim" is never another install's export, and calls are
//!   counted once.
//! - A front that finds another front's `rmcp_front_next` first in the global scope stands
//!   aside (`standing_aside`): it maps no body, its exports go on to the first front's of the
//!   same name (by a jump, so the first sees the original caller), its `dlsym` to the next
//!   dlsym and its `rmcp_shim_stats` to the first's.

use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::abi::NextFn;
use crate::sys;

unsafe extern "C" {
    /// This front's own `rmcp_front_next` (a hidden alias: the exported name may be
    /// another front's).
    #[link_name = "rmcp_front_own_next"]
    static OWN_NEXT: u8;
}

core::arch::global_asm!(
    ".globl rmcp_front_own_next",
    ".hidden rmcp_front_own_next",
    ".set rmcp_front_own_next, rmcp_front_next",
);

/// `void *rmcp_front_next(const char *name)`: the next definition of `name` after this
/// front, other installs skipped.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcp_front_next(name: *const c_char) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { crate::next_after_front(name) }
}

const UNKNOWN: u32 = 0;
const FIRST: u32 = 1;
const ASIDE: u32 = 2;

/// Whether another install comes first in the process's search order.
pub fn standing_aside() -> bool {
    static STATE: AtomicU32 = AtomicU32::new(UNKNOWN);
    match STATE.load(Ordering::Acquire) {
        FIRST => return false,
        ASIDE => return true,
        _ => {}
    }
    // SAFETY: RTLD_DEFAULT and a NUL-terminated name.
    let first = unsafe { crate::glibc_dlsym()(sys::RTLD_DEFAULT, c"rmcp_front_next".as_ptr()) };
    let aside = !first.is_null() && first.cast_const() != (&raw const OWN_NEXT).cast();
    STATE.store(if aside { ASIDE } else { FIRST }, Ordering::Release);
    aside
}

/// The first install's definition of `name` (its export), when this front stands aside.
pub fn first(name: *const c_char) -> *mut c_void {
    // SAFETY: RTLD_DEFAULT and a NUL-terminated name (the callers' contract).
    unsafe { crate::glibc_dlsym()(sys::RTLD_DEFAULT, name) }
}

/// The `rmcp_front_next` of the next install after this one, if there is one.
fn next_front() -> Option<NextFn> {
    const NONE: usize = 1;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut p = NEXT.load(Ordering::Acquire);
    if p == 0 {
        // SAFETY: a NUL-terminated name.
        p = unsafe { crate::raw_next(c"rmcp_front_next".as_ptr()) } as usize;
        if p == 0 {
            p = NONE;
        }
        NEXT.store(p, Ordering::Release);
    }
    // SAFETY: `p` is another front's `rmcp_front_next`, which has `NextFn`'s signature.
    (p != NONE).then(|| unsafe { core::mem::transmute::<usize, NextFn>(p) })
}

/// `found`, the next definition of `name` after this front; or, when that is inside the next
/// install, what that install finds after itself.
pub fn skip(found: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(next) = next_front() else {
        return found;
    };
    if !found.is_null() && same_object(found as usize, next as usize) {
        // SAFETY: `name` is NUL-terminated (the callers' contract).
        return unsafe { next(name) };
    }
    found
}

/// Whether two addresses lie in the same loaded object.
fn same_object(a: usize, b: usize) -> bool {
    let Some(loader) = sys::loader() else {
        return false;
    };
    let base = |addr: usize| {
        let mut info = sys::DlInfo::EMPTY;
        // SAFETY: dladdr reads the loader's tables and fills `info`.
        let ok = unsafe { (loader.dladdr)(addr as *const c_void, &mut info) } != 0;
        ok.then_some(info.dli_fbase as usize)
    };
    matches!((base(a), base(b)), (Some(x), Some(y)) if x == y)
}
