//! The re-entry guard. Runtimes before 6.1 call some of their own exported functions
//! through their PLT (5.2.3's hipMemAllocHost calls hipHostMalloc@plt), so a hook can be
//! entered from inside a call the shim is forwarding. Such a call belongs to the runtime,
//! not to the application: it is forwarded unchanged and not counted.

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread is inside a hook.
pub fn active() -> bool {
    INSIDE.with(Cell::get)
}

/// Marks this thread as inside a hook until dropped.
pub struct Entered(());

impl Entered {
    pub fn enter() -> Entered {
        INSIDE.with(|c| c.set(true));
        Entered(())
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_is_per_thread_and_scoped() {
        assert!(!active());
        {
            let _g = Entered::enter();
            assert!(active());
            std::thread::spawn(|| assert!(!active())).join().unwrap();
        }
        assert!(!active());
    }
}
