//! Per-thread state, in one thread-local looked up once per hooked call:
//!
//! - the re-entry flag. Runtimes before 6.1 call some of their own exported functions
//!   through their PLT (5.2.3's hipMemAllocHost calls hipHostMalloc@plt), so a hook can be
//!   entered from inside a call the shim is forwarding. Such a call belongs to the runtime,
//!   not to the application: it is forwarded unchanged and not counted;
//! - the thread's stats slot (see `stats`).
//!
//! Const-initialised and without a destructor, so access never allocates and stays valid
//! while the thread's other thread-locals are being destroyed.

use std::cell::Cell;

pub(crate) struct ThreadState {
    inside: Cell<bool>,
    slot: Cell<u32>,
}

const NO_SLOT: u32 = u32::MAX;

thread_local! {
    static STATE: ThreadState = const {
        ThreadState { inside: Cell::new(false), slot: Cell::new(NO_SLOT) }
    };
}

/// Runs `f` with this thread's state.
#[inline(always)]
pub(crate) fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    STATE.with(f)
}

/// Marks the thread as inside a hook until dropped.
pub(crate) struct Entered<'a>(&'a ThreadState);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.inside.set(false);
    }
}

impl ThreadState {
    /// True while this thread is inside a hook.
    #[inline(always)]
    pub(crate) fn inside(&self) -> bool {
        self.inside.get()
    }

    pub(crate) fn enter(&self) -> Entered<'_> {
        self.inside.set(true);
        Entered(self)
    }

    /// This thread's stats slot, claimed on first use.
    #[inline(always)]
    pub(crate) fn slot(&self) -> usize {
        match self.slot.get() {
            NO_SLOT => {
                let s = crate::stats::claim_slot();
                self.slot.set(s as u32);
                s
            }
            s => s as usize,
        }
    }

    pub(crate) fn set_slot(&self, slot: usize) {
        self.slot.set(slot as u32);
    }

    /// The slot, if one was claimed.
    pub(crate) fn claimed_slot(&self) -> Option<usize> {
        (self.slot.get() != NO_SLOT).then(|| self.slot.get() as usize)
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
