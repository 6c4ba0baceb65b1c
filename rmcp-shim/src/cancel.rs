//! Thread cancellation: the shim's own work never meets a cancellation point with
//! cancellation enabled (issue 22, shape 12).
//!
//! glibc cancels a thread (`pthread_cancel`, deferred) at the next cancellation point it
//! reaches (open, read, write, nanosleep, ...) by a forced unwind of its stack. The shim's
//! own work (building its state, reading the KFD topology, asking a runtime copy its
//! version and devices, writing a log line or the report, waiting for another thread's
//! build) runs under `catch_unwind`, and a forced unwind reaching a `catch_unwind` ends the
//! process: the caught foreign exception is dropped, and glibc aborts with "FATAL:
//! exception not rethrown". Rust does not define a forced unwind through frames with
//! pending destructors or `catch_unwind` either (RFC 2945, "plain old frames").
//!
//! So that work runs inside [`NoCancel`]: cancellation is disabled for its duration and
//! the thread's previous state restored after, so a cancellation requested meanwhile
//! stays pending and acts at the thread's next cancellation point outside the shim: in
//! the runtime's function (which stays cancellable as it was, called from frames with
//! nothing to unwind: `intercept`) or after the call returns. Only cold paths take it (a
//! first build, a lookup of a new caller, a line written), never a call's hot path.
//!
//! Not covered: asynchronous cancellation (`PTHREAD_CANCEL_ASYNCHRONOUS`), under which
//! POSIX allows a thread to call only the cancellation functions themselves, so a HIP
//! call in that state is already outside what any runtime supports.

// glibc's <pthread.h> (the libc crate does not declare them for Linux).
const PTHREAD_CANCEL_ENABLE: libc::c_int = 0;
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

unsafe extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, oldstate: *mut libc::c_int) -> libc::c_int;
}

/// Cancellation disabled for the calling thread until dropped; the previous state (enabled,
/// or already disabled by the program or an outer guard) is restored.
pub(crate) struct NoCancel(libc::c_int);

impl NoCancel {
    #[inline]
    pub(crate) fn new() -> NoCancel {
        let mut old = PTHREAD_CANCEL_ENABLE;
        // SAFETY: pthread_setcancelstate only changes the calling thread's own state and
        // writes the old one to `old`, a valid out-pointer. It is not a cancellation point.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        NoCancel(old)
    }
}

impl Drop for NoCancel {
    #[inline]
    fn drop(&mut self) {
        let mut previous = 0;
        // SAFETY: as in `new`; restoring the state the thread had. With deferred
        // cancellation (the only kind a HIP caller can use) re-enabling does not act on a
        // pending request: the next cancellation point does.
        unsafe { pthread_setcancelstate(self.0, &mut previous) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> libc::c_int {
        let mut s = 0;
        // SAFETY: reads and restores the calling thread's state (set to DISABLE, then back).
        unsafe {
            pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut s);
            pthread_setcancelstate(s, &mut 0);
        }
        s
    }

    #[test]
    fn disables_and_restores_nested() {
        assert_eq!(state(), PTHREAD_CANCEL_ENABLE);
        {
            let _outer = NoCancel::new();
            assert_eq!(state(), PTHREAD_CANCEL_DISABLE);
            {
                let _inner = NoCancel::new();
                assert_eq!(state(), PTHREAD_CANCEL_DISABLE);
            }
            assert_eq!(state(), PTHREAD_CANCEL_DISABLE, "the inner guard keeps it");
        }
        assert_eq!(state(), PTHREAD_CANCEL_ENABLE);
    }
}
