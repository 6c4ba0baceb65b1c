//! Once-cells: [`ForkOnce`], a once-cell that survives `fork` (for state threads may wait
//! for), and [`Published`], a value published once and never waited for.
//!
//! `once_cell::sync::OnceCell` makes every other thread wait while one builds the value. If
//! the process forks meanwhile, the child inherits a cell marked "being built" by a thread
//! that does not exist in the child, and the child's first hooked call waits forever. This
//! cell records which process is building. A caller finding a build started in another
//! process (its parent, before a fork) starts its own; one finding a build in its own
//! process waits, as with `OnceCell`. A builder that panics leaves the cell empty.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

const EMPTY: u64 = 0;
const DONE: u64 = 1;

/// "Being built by process `pid`": distinct from EMPTY and DONE.
fn building(pid: u32) -> u64 {
    (u64::from(pid) << 2) | 2
}

pub(crate) struct ForkOnce<T> {
    state: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the value is written once, by the thread that won the state's compare-exchange,
// before the Release store of DONE; it is only read after an Acquire load of DONE.
unsafe impl<T: Send + Sync> Sync for ForkOnce<T> {}

impl<T> Default for ForkOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ForkOnce<T> {
    pub(crate) const fn new() -> Self {
        ForkOnce {
            state: AtomicU64::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    #[inline(always)]
    pub(crate) fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == DONE {
            // SAFETY: DONE is stored only after the value was written (see `Sync`).
            Some(unsafe { (*self.value.get()).assume_init_ref() })
        } else {
            None
        }
    }

    #[inline(always)]
    pub(crate) fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        match self.get() {
            Some(v) => v,
            None => self.init(f),
        }
    }

    /// Like `get_or_init`, but returns None instead of waiting when another thread of this
    /// process is building the value.
    pub(crate) fn get_or_init_unless_busy(&self, f: impl FnOnce() -> T) -> Option<&T> {
        match self.get() {
            Some(v) => Some(v),
            None => self.init_or_give_up(f, Some(std::time::Duration::ZERO)),
        }
    }

    /// Like `get_or_init`, but waits at most `patience` for another thread of this process
    /// that is building the value, then returns None. For values whose building may take a
    /// lock the waiting thread could hold (a runtime query may take the loader's lock): the
    /// wait is short where nothing is wrong, and ends where something is.
    pub(crate) fn get_or_init_within(
        &self,
        patience: std::time::Duration,
        f: impl FnOnce() -> T,
    ) -> Option<&T> {
        match self.get() {
            Some(v) => Some(v),
            None => self.init_or_give_up(f, Some(patience)),
        }
    }

    #[cold]
    fn init(&self, f: impl FnOnce() -> T) -> &T {
        match self.init_or_give_up(f, None) {
            Some(v) => v,
            None => unreachable!("init_or_give_up waits as long as it takes without patience"),
        }
    }

    /// Builds the value, or waits for the thread building it (at most `patience`, if given),
    /// or gives up (None).
    #[cold]
    fn init_or_give_up(
        &self,
        f: impl FnOnce() -> T,
        patience: Option<std::time::Duration>,
    ) -> Option<&T> {
        // Builds and waits meet cancellation points (files, runtime queries, sleeps).
        let _no_cancel = crate::cancel::NoCancel::new();
        let me = building(std::process::id());
        let since = std::time::Instant::now();
        let mut f = Some(f);
        loop {
            let s = self.state.load(Ordering::Acquire);
            if s == DONE {
                return self.get();
            }
            // Empty, or being built by a thread of another process (our parent, before it
            // forked): build it here.
            let orphaned = s != EMPTY && s != me;
            if (s == EMPTY || orphaned)
                && self
                    .state
                    .compare_exchange(s, me, Ordering::Acquire, Ordering::Acquire)
                    .is_ok()
            {
                struct Reset<'a>(&'a AtomicU64);
                impl Drop for Reset<'_> {
                    fn drop(&mut self) {
                        // Only reached if the builder panicked.
                        self.0.store(EMPTY, Ordering::Release);
                    }
                }
                let reset = Reset(&self.state);
                let v = (f.take().expect("built once"))();
                // SAFETY: this thread won the compare-exchange, so no other thread reads or
                // writes the value until DONE is stored below.
                unsafe { (*self.value.get()).write(v) };
                std::mem::forget(reset);
                self.state.store(DONE, Ordering::Release);
                return self.get();
            }
            if patience.is_some_and(|p| since.elapsed() >= p) {
                return None;
            }
            // Another thread of this process is building: wait for it.
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn builds_once_across_threads() {
        static CELL: ForkOnce<usize> = ForkOnce::new();
        static BUILDS: AtomicUsize = AtomicUsize::new(0);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(|| {
                    *CELL.get_or_init(|| {
                        BUILDS.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        7
                    })
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 7);
        }
        assert_eq!(BUILDS.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_build_left_by_another_process_is_redone() {
        let cell: ForkOnce<u32> = ForkOnce::new();
        // What a child sees when its parent forked during a build.
        cell.state
            .store(building(std::process::id() + 1), Ordering::SeqCst);
        assert_eq!(cell.get(), None);
        assert_eq!(*cell.get_or_init(|| 5), 5);
    }

    #[test]
    fn impatient_callers_give_up_while_another_thread_builds() {
        static CELL: ForkOnce<u32> = ForkOnce::new();
        let builder = std::thread::spawn(|| {
            *CELL.get_or_init(|| {
                std::thread::sleep(std::time::Duration::from_millis(300));
                1
            })
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        let ms = std::time::Duration::from_millis;
        assert_eq!(CELL.get_or_init_unless_busy(|| 2), None);
        assert_eq!(CELL.get_or_init_within(ms(20), || 3), None);
        assert_eq!(builder.join().unwrap(), 1);
        assert_eq!(CELL.get_or_init_within(ms(20), || 4), Some(&1));
    }

    #[test]
    fn a_panicking_builder_leaves_the_cell_empty() {
        let cell: ForkOnce<u32> = ForkOnce::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cell.get_or_init(|| panic!("build failed"));
        }));
        assert!(r.is_err());
        assert_eq!(cell.get(), None);
        assert_eq!(*cell.get_or_init(|| 9), 9);
    }
}

/// A value published once by whichever thread builds it first, and never waited for: a
/// thread that finds it missing builds its own and, if another thread published first,
/// drops its own and takes theirs. For what a waiting thread could deadlock on (anything
/// that may take the loader's lock). Published values live as long as the library: they
/// are never freed, so references to them are `'static`.
pub(crate) struct Published<T: 'static>(std::sync::atomic::AtomicPtr<T>);

impl<T: 'static> Published<T> {
    pub(crate) const fn new() -> Self {
        Published(std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
    }

    pub(crate) fn get(&self) -> Option<&'static T> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer here is a leaked box, published by a Release
        // compare-exchange and never freed or written again.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    pub(crate) fn get_or_publish(&self, make: impl FnOnce() -> T) -> &'static T {
        if let Some(v) = self.get() {
            return v;
        }
        let mine = {
            // Building may meet cancellation points (loader queries, runtime files).
            let _no_cancel = crate::cancel::NoCancel::new();
            Box::into_raw(Box::new(make()))
        };
        match self.0.compare_exchange(
            std::ptr::null_mut(),
            mine,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `mine` is a leaked box, published now and never freed.
            Ok(_) => unsafe { &*mine },
            Err(theirs) => {
                // SAFETY: `mine` was never published; this thread owns it.
                drop(unsafe { Box::from_raw(mine) });
                // SAFETY: as in `get`.
                unsafe { &*theirs }
            }
        }
    }

    /// Publishes `new` in place of `old` (what `get` gave), unless another thread replaced
    /// it first. `old` stays allocated: other threads may hold it.
    pub(crate) fn replace(&self, old: &'static T, new: T) -> bool {
        let new = Box::into_raw(Box::new(new));
        let old = old as *const T as *mut T;
        if self
            .0
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return true;
        }
        // SAFETY: `new` was never published; this thread owns it.
        drop(unsafe { Box::from_raw(new) });
        false
    }
}

#[cfg(test)]
mod published_tests {
    use super::*;

    #[test]
    fn the_first_published_value_wins_and_stays() {
        static CELL: Published<u32> = Published::new();
        assert_eq!(CELL.get(), None);
        let a = CELL.get_or_publish(|| 1);
        assert_eq!(*CELL.get_or_publish(|| 2), 1);
        assert!(std::ptr::eq(a, CELL.get().unwrap()));
        assert!(CELL.replace(a, 3));
        assert_eq!(*CELL.get().unwrap(), 3);
        assert!(!CELL.replace(a, 4), "a stale old value does not replace");
        assert_eq!(*a, 1, "the replaced value is still readable");
    }

    #[test]
    fn racing_builders_agree_on_one_value() {
        static CELL: Published<usize> = Published::new();
        let got: Vec<usize> = (0..8)
            .map(|i| std::thread::spawn(move || *CELL.get_or_publish(|| i)))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(got.iter().all(|v| *v == got[0]), "{got:?}");
    }
}
