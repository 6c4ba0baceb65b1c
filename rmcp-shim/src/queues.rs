//! The queue wrapping: the error callback of every HSA queue created through
//! `hsa_queue_create` while the shim is attached (HIP's queues: libamdhip64 imports it through
//! its PLT), so that a queue error (an aperture violation, an illegal instruction) is
//! explained before HIP's own callback prints and aborts. It owns a fixed table of
//! [`SLOTS`] wrappers, each a distinct function that knows its slot; a queue's creation
//! claims one, fills it with the caller's callback and its queue's agent, and passes that
//! wrapper in place of the callback. `data` is passed through unchanged (HIP casts it to its
//! own device object). On an error the wrapper has the fault report written
//! (`fault::queue_error`), then calls the caller's callback with the runtime's own arguments,
//! so the runtime prints and ends the process exactly as without rmcp. (The queues
//! themselves, and the packet each is on, are `dispatches`'.)
//!
//! Past [`SLOTS`] queues, a queue is created with its own callback, unwrapped, and one line
//! says so. Slots are never given back (no `hsa_queue_destroy` hook): HIP creates its queues
//! once per device and reuses them. A queue without a callback is left as it is. Queue
//! creation is not a hot path; the wrapper runs only on an error.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Queues whose callbacks can be wrapped.
pub(crate) const SLOTS: usize = 64;

/// `void (*)(hsa_status_t, hsa_queue_t *, void *)`.
type Callback = extern "C" fn(u32, *mut c_void, *mut c_void);

struct Slot {
    callback: AtomicUsize,
    agent: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        callback: AtomicUsize::new(0),
        agent: AtomicU64::new(0),
    }
}; SLOTS];
static NEXT: AtomicUsize = AtomicUsize::new(0);
static FULL_TOLD: AtomicBool = AtomicBool::new(false);

extern "C" fn wrapped<const K: usize>(status: u32, queue: *mut c_void, data: *mut c_void) {
    let slot = &TABLE[K];
    let agent = slot.agent.load(Ordering::Acquire);
    let _ = std::panic::catch_unwind(|| crate::fault::queue_error(status, agent));
    let cb = slot.callback.load(Ordering::Acquire);
    if cb != 0 {
        // SAFETY: `cb` is the callback the queue's creator passed to hsa_queue_create, of
        // this signature; it gets the runtime's own arguments.
        let cb = unsafe { std::mem::transmute::<usize, Callback>(cb) };
        cb(status, queue, data);
    }
}

macro_rules! wrappers {
    ($($k:literal)*) => {
        [$( wrapped::<$k> as Callback ),*]
    };
}

static WRAPPERS: [Callback; SLOTS] = wrappers!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
    61 62 63
);

/// The callback to create a queue on `agent` with, in place of `callback`: a wrapper whose
/// slot holds `callback`, or `callback` itself (null, or no slot left).
pub(crate) fn wrap(callback: usize, agent: u64) -> usize {
    if callback == 0 {
        return 0;
    }
    let k = NEXT.fetch_add(1, Ordering::AcqRel);
    let (Some(slot), Some(w)) = (TABLE.get(k), WRAPPERS.get(k)) else {
        NEXT.store(SLOTS, Ordering::Relaxed);
        if !FULL_TOLD.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "hsa_queue_create: more than {SLOTS} queues; further queues keep their error \
                 callback unwrapped, and rmcp will not explain their errors"
            );
        }
        return callback;
    };
    slot.agent.store(agent, Ordering::Relaxed);
    slot.callback.store(callback, Ordering::Release);
    *w as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    static SEEN: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn original(status: u32, _: *mut c_void, data: *mut c_void) {
        SEEN.store(status as usize + data as usize, Ordering::SeqCst);
    }

    #[test]
    fn a_wrapper_calls_the_original_with_the_original_arguments() {
        assert_eq!(wrap(0, 1), 0, "no callback, nothing to wrap");
        let w = wrap(original as *const () as usize, 7);
        assert_ne!(w, original as *const () as usize);
        // SAFETY: a wrapper has the callback's signature.
        let w = unsafe { std::mem::transmute::<usize, Callback>(w) };
        w(0x29, std::ptr::null_mut(), 0x1000 as *mut c_void);
        assert_eq!(SEEN.load(Ordering::SeqCst), 0x1029);
    }
}
