//! The attach: the one function this library exports, `rmcp_shim_attach`, through which the
//! front (librmcp_shim.so) hands over what it gives (`front.rs` keeps it) and takes back
//! this library's entry points (`abi::Body`): the hooks' entries, the dlsym lookup, the
//! stats, and the steps the front runs before a fork and at exit after an RTLD_DEEPBIND
//! load. It builds on every other module; `front.rs`, which they all read, imports none of
//! them.

use std::ffi::c_int;
use std::panic::catch_unwind;

use rmcp_core::registry::{HOOKS, Hook, OBSERVED};

use crate::front::{self, Body, Front, abi};

/// Called by the front, once per thread that finds the body unattached (so possibly more
/// than once, concurrently): checks the layout, keeps the front and fills `body` with this
/// library's entry points. 0 on success. Never panics or unwinds; allocates nothing.
///
/// # Safety
/// `front` points to the front's static `struct rmcp_front`, filled; `body` to writable
/// memory of `struct rmcp_body`'s size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcp_shim_attach(front: *const Front, body: *mut Body) -> c_int {
    // The front calls this through `abi::AttachFn`: the compiler checks that they agree. (In
    // here, not in a `const _`: rustc 1.85 does not count a use there and warns that the
    // alias is never used.)
    let _: abi::AttachFn<{ front::ENTRIES }> = rmcp_shim_attach;
    catch_unwind(|| {
        // SAFETY: the caller's contract: the front's static, alive for the process.
        let Some(f) = (unsafe { front.as_ref() }) else {
            return 1;
        };
        if body.is_null() || !front::set(f) {
            return 1;
        }
        let out = Body {
            abi: abi::ABI,
            size: Body::SIZE,
            hooks: front::ENTRIES as u32,
            reserved: 0,
            lookup: crate::dlsym::lookup,
            vlookup: crate::dlsym::vlookup,
            stats: crate::exports::stats,
            before_fork,
            deepbind_seen,
            entries: std::array::from_fn(|i| match HOOKS.get(i) {
                Some((hook, _)) => crate::entries::entry(*hook),
                None => crate::observed::entry(OBSERVED[i - Hook::COUNT].0),
            }),
        };
        // SAFETY: the caller's contract: `body` is writable and sized for a Body.
        unsafe { body.write(out) };
        0
    })
    .unwrap_or(1)
}

/// The front's fork handler calls this in the parent before every fork once the body is
/// attached (`abi::Body::before_fork`): the shared state is built here, not in a child
/// whose loader may be unusable (issue 22, shape 4). Never panics or unwinds.
extern "C" fn before_fork() {
    let _no_cancel = crate::cancel::NoCancel::new();
    let _ = catch_unwind(|| {
        crate::report::global();
        crate::binding::before_fork();
    });
}

/// The front calls this at exit in a process that loaded a library with RTLD_DEEPBIND
/// (`abi::Body::deepbind_seen`). Never panics or unwinds.
extern "C" fn deepbind_seen() {
    let _no_cancel = crate::cancel::NoCancel::new();
    let _ = catch_unwind(crate::report::deepbind_seen);
}
