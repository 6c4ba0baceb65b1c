//! Without the body (issue 22, shape 7): where a hooked call goes when the body cannot be
//! mapped, as the loader would have bound it. The loader binds a caller's reference to a
//! function once, at its first call (or at load for bind-now objects), from the global scope
//! and then the caller's own tree, and keeps it. So the front remembers, per calling object
//! and hook, what it found at that object's first call, until a `dlclose` (the generation)
//! may have unmapped it. Finding the calling object costs a `dladdr` per call: this is the
//! degraded mode of a broken install, which has already said so on stderr. An object whose
//! first call came after its bind-now references were bound may get another copy than they
//! did (docs/reliability.md); a full table answers each call afresh.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::{FRONT, sys};

const SLOTS: usize = 128;

struct Slot {
    /// The calling object's base plus the hook's index plus one; 0 = free.
    key: AtomicUsize,
    function: AtomicUsize,
    /// The generation the function was found in, plus one; 0 = not yet.
    generation: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        key: AtomicUsize::new(0),
        function: AtomicUsize::new(0),
        generation: AtomicU64::new(0),
    }
}; SLOTS];

/// What hook `hook` called from `ret` reaches: remembered for the calling object, else
/// `find()`.
pub fn function(hook: usize, ret: usize, find: impl Fn() -> *mut c_void) -> *mut c_void {
    let Some(base) = object_base(ret) else {
        return find();
    };
    let key = base.wrapping_add(hook).wrapping_add(1);
    let now = FRONT.generation().wrapping_add(1);
    let start = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 57; // 7 bits: 0..128
    for i in 0..SLOTS {
        let Some(slot) = TABLE.get((start.wrapping_add(i)) % SLOTS) else {
            break;
        };
        let k = slot.key.load(Ordering::Acquire);
        if k == key {
            if slot.generation.load(Ordering::Acquire) == now {
                return slot.function.load(Ordering::Relaxed) as *mut c_void;
            }
            return remember(slot, now, find());
        }
        if k == 0 {
            match slot
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return remember(slot, now, find()),
                Err(k) if k == key => return remember(slot, now, find()),
                Err(_) => {}
            }
        }
    }
    find()
}

fn remember(slot: &Slot, generation: u64, f: *mut c_void) -> *mut c_void {
    slot.function.store(f as usize, Ordering::Relaxed);
    slot.generation.store(generation, Ordering::Release);
    f
}

/// The load base of the object holding `addr`.
fn object_base(addr: usize) -> Option<usize> {
    let loader = sys::loader()?;
    let mut info = sys::DlInfo::EMPTY;
    // SAFETY: dladdr reads the loader's tables and fills `info`.
    let ok = unsafe { (loader.dladdr)(addr as *const c_void, &mut info) } != 0;
    (ok && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}
