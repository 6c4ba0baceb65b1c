//! Per-thread state, in one thread-local looked up once per hooked call:
//!
//! - the re-entry flag. Runtimes before 6.1 call some of their own exported functions
//!   through their PLT (5.2.3's hipMemAllocHost calls hipHostMalloc@plt), so a hook can be
//!   entered from inside a call the shim is forwarding. Such a call belongs to the runtime,
//!   not to the application: it is forwarded unchanged and not counted;
//! - the thread's stats slot, as `stats` claims it (this module only keeps it); the same
//!   index names the thread's launch ring (`launches`) and allocation ring (`allocations`);
//! - the origin of the code object a hooked module load is loading (`kernel_objects`).
//!
//! The block lives in the front's initial-exec TLS (`front::thread_block`): every thread
//! gets it zeroed at creation, so access never allocates and stays valid while the
//! thread's other thread-locals are being destroyed. This library's own thread-locals
//! would be allocated by glibc on each thread's first use, since it is mapped by dlopen,
//! and glibc aborts when that allocation fails. Without a front (unit tests), a
//! const-initialised thread-local without a destructor stands in. All-zero bytes are the
//! initial state.

use std::cell::Cell;

#[repr(C)]
pub(crate) struct ThreadState {
    inside: Cell<bool>,
    /// The stats slot + 1; 0 = none claimed yet.
    slot: Cell<u32>,
    /// While a hooked module load is forwarded: its origin in `kernel_objects` + 1; else 0.
    loading: Cell<u32>,
}

// The front's block is 16 bytes, 8-aligned.
const _: () = assert!(size_of::<ThreadState>() <= 16 && align_of::<ThreadState>() <= 8);

thread_local! {
    static STATE: ThreadState = const {
        ThreadState { inside: Cell::new(false), slot: Cell::new(0), loading: Cell::new(0) }
    };
}

/// Runs `f` with this thread's state.
#[inline(always)]
pub(crate) fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    match crate::front::thread_block() {
        // SAFETY: the front's block is this thread's own, 16 zero-initialised bytes,
        // 8-aligned, that nothing else touches; all-zero is a valid ThreadState, and the
        // reference does not leave this thread.
        Some(p) => f(unsafe { &*p.cast::<ThreadState>() }),
        None => STATE.with(f),
    }
}

/// Marks the thread as inside a hook until dropped, then as it was before.
pub(crate) struct Entered<'a>(&'a ThreadState, bool);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.inside.set(self.1);
    }
}

impl ThreadState {
    /// True while this thread is inside a hook.
    #[inline(always)]
    pub(crate) fn inside(&self) -> bool {
        self.inside.get()
    }

    /// Marks the thread as inside a hook without a guard, for the hook's own frame: that
    /// frame calls the runtime, which a thread cancellation may unwind, and must then have
    /// nothing to unwind (`crate::cancel`). Paired with [`ThreadState::leave`]; a thread
    /// cancelled in the runtime ends with the flag set, and calls made by its cleanup are
    /// forwarded unchanged.
    #[inline(always)]
    pub(crate) fn mark_inside(&self) {
        self.inside.set(true);
    }

    #[inline(always)]
    pub(crate) fn leave(&self) {
        self.inside.set(false);
    }

    pub(crate) fn enter(&self) -> Entered<'_> {
        let before = self.inside.replace(true);
        Entered(self, before)
    }

    pub(crate) fn set_slot(&self, slot: usize) {
        self.slot.set(slot as u32 + 1);
    }

    /// The slot, if one was claimed.
    pub(crate) fn claimed_slot(&self) -> Option<usize> {
        (self.slot.get() != 0).then(|| self.slot.get() as usize - 1)
    }
    /// Sets the origin of the code this thread is loading (0: none); returns the one before.
    pub(crate) fn set_loading(&self, origin: u32) -> u32 {
        self.loading.replace(origin)
    }
    pub(crate) fn loading(&self) -> u32 {
        self.loading.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_entry_flag_is_per_thread_and_scoped() {
        with(|t| {
            assert!(!t.inside());
            {
                let _g = t.enter();
                assert!(t.inside());
                std::thread::spawn(|| with(|u| assert!(!u.inside())))
                    .join()
                    .unwrap();
            }
            assert!(!t.inside());
        });
    }
}
