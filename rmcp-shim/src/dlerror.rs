//! The thread's `dlerror()` state, which is part of what a lookup answers (issue 33): glibc
//! clears a pending message on every successful dl* call and leaves its own on a failed
//! one. What the shim does about it: its own loader calls (finding the runtime, resolving a
//! caller, a lookup's answer without the shim) end by consuming what they left ([`clear`]);
//! a lookup the shim answers itself with NULL leaves the message the loader would have
//! given the caller ([`fail_as_loader`]). A message pending before the shim's own calls is
//! gone after them: glibc cleared it, and no public interface sets one.

use std::ffi::{c_char, c_void};

use crate::front;

/// Leaves no `dlerror()` message pending in this thread: what a successful lookup leaves.
/// glibc's `dlerror()` hands a pending message over once and then holds none.
pub(crate) fn clear() {
    // SAFETY: dlerror takes no argument; its answer (the message, or null) is dropped.
    unsafe { libc::dlerror() };
}

/// Leaves pending the message the loader gives for a failed lookup of `symbol` on `handle`
/// made from `ret`: "<object>: undefined symbol: <name>", the object being the handle's
/// (the caller's own for RTLD_DEFAULT). The loader names the object by its link map's name;
/// a failed lookup on that very link map makes the same message. The main program's link
/// map has no name (the loader then writes argv[0]) and its search list holds the shim's
/// export, so no lookup can fail there: the message is then the failed lookup of the name
/// after the shim (naming librmcp_shim.so). False when the object's own lookup finds the
/// name (its tree holds the shim): the next dlsym answers then.
pub(crate) fn fail_as_loader(handle: *mut c_void, symbol: *const c_char, ret: usize) -> bool {
    let map = if handle == libc::RTLD_DEFAULT {
        rmcp_sys::locate::link_map_of(ret).map_or(0, |(m, _)| m)
    } else {
        handle as usize
    };
    if map != 0 && link_map_named(map) {
        // SAFETY: a link map of a loaded object is what glibc's dlsym takes as a handle
        // (dlopen returns the link map); the lookup only reads it and the name.
        return unsafe { front::glibc_dlsym()(map as *mut c_void, symbol) }.is_null();
    }
    front::next(symbol).is_null()
}

/// Whether a link map's `l_name` (glibc's `struct link_map`: `l_addr`, then `l_name`) is a
/// non-empty string.
fn link_map_named(map: usize) -> bool {
    // SAFETY: `map` is a live link map (the caller's object, or a handle the caller passed
    // to dlsym); its second word is `l_name`, a NUL-terminated string or null.
    let name = unsafe { *((map as *const *const c_char).wrapping_add(1)) };
    // SAFETY: as above: a non-null `l_name` is NUL-terminated.
    !name.is_null() && unsafe { *name } != 0
}
