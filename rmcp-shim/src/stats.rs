//! Per-hook counters: what the exit report (`report`) sums; and the load-time fix's
//! counters (`module_load`, the report's `buffer_descriptors`).
//!
//! Each thread gets a slot of its own, claimed on its first hooked call and released when
//! it exits. Only that thread writes the slot, so a count is a plain load and store (no
//! locked instruction; measured about 7 ns a call cheaper than atomic adds, see
//! docs/performance.md), and no two threads write the same cache line. Past `SLOTS` live
//! threads, further threads share a few slots with atomic adds. A report sums the slots.
//!
//! The same slot index names the thread's launch ring (`launches`) and allocation ring
//! (`allocations`): one claim per thread serves all three, and [`take`] numbers a ring's
//! records the way [`record`] counts (a plain load and store in an exclusive slot).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;

use rmcp_core::registry::Hook;

use crate::thread::{self, ThreadState};

/// Slots that belong to one thread at a time.
pub(crate) const SLOTS: usize = 64;
/// Slots shared, with atomic adds, by the threads that found no free one.
pub(crate) const SHARED: usize = 4;

struct Counters {
    calls: AtomicU64,
    rewritten: AtomicU64,
    fallbacks: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
    coherent: AtomicU64,
    host_location: AtomicU64,
}

impl Counters {
    const fn zero() -> Counters {
        Counters {
            calls: AtomicU64::new(0),
            rewritten: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            coherent: AtomicU64::new(0),
            host_location: AtomicU64::new(0),
        }
    }
    fn all(&self) -> [&AtomicU64; 7] {
        [
            &self.calls,
            &self.rewritten,
            &self.fallbacks,
            &self.errors,
            &self.bytes,
            &self.coherent,
            &self.host_location,
        ]
    }
}

/// One slot's counters for every hook, on cache lines of its own.
#[repr(align(128))]
struct Slot([Counters; Hook::COUNT]);

static COUNTERS: [Slot; SLOTS + SHARED] =
    [const { Slot([const { Counters::zero() }; Hook::COUNT]) }; SLOTS + SHARED];
static OWNED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
static NEXT_SHARED: AtomicUsize = AtomicUsize::new(0);

/// The pthread key whose destructor gives a thread's slot back when the thread exits;
/// NO_KEY until the first claim creates it.
///
/// A key, not a Rust `thread_local!` with a destructor: registering such a destructor makes
/// glibc allocate (`__cxa_thread_atexit_impl`), and glibc ends the process when that
/// allocation fails ("failed to register TLS destructor"). A key's value needs no
/// allocation for the first 32 keys of a process, and where it does, a failure is an error
/// code: that thread then keeps its slot (counts are never lost, at worst a slot is).
static RELEASE_KEY: AtomicUsize = AtomicUsize::new(NO_KEY);
const NO_KEY: usize = usize::MAX;

/// At thread exit (the key's value is the slot + 1).
extern "C" fn release(value: *mut libc::c_void) {
    let slot = (value as usize).wrapping_sub(1);
    if slot < SLOTS {
        // Calls this thread still makes (from destructors that run later) go to a shared
        // slot; the next owner of this one sees every count written so far.
        thread::with(|t| t.set_slot(SLOTS));
        OWNED[slot].store(false, Ordering::Release);
    }
}

/// The release key, created on first use; None if the process has no key left.
fn release_key() -> Option<libc::pthread_key_t> {
    let key = RELEASE_KEY.load(Ordering::Acquire);
    if key != NO_KEY {
        return Some(key as libc::pthread_key_t);
    }
    let mut new: libc::pthread_key_t = 0;
    // SAFETY: `new` is a valid out-pointer; `release` is an `extern "C"` function of this
    // library, which is never unloaded.
    if unsafe { libc::pthread_key_create(&mut new, Some(release)) } != 0 {
        return None;
    }
    match RELEASE_KEY.compare_exchange(NO_KEY, new as usize, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(new),
        Err(theirs) => {
            // Another thread created one first: use that, give this one back.
            // SAFETY: `new` was created above and no thread has a value for it.
            unsafe { libc::pthread_key_delete(new) };
            Some(theirs as libc::pthread_key_t)
        }
    }
}

/// The calling thread's slot (`t` is its state), claimed on first use.
#[inline(always)]
pub(crate) fn slot(t: &ThreadState) -> usize {
    match t.claimed_slot() {
        Some(s) => s,
        None => {
            let s = claim_slot();
            t.set_slot(s);
            s
        }
    }
}

/// Claims a free slot for the calling thread, or a shared one.
fn claim_slot() -> usize {
    for (i, owned) in OWNED.iter().enumerate() {
        if owned
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            if let Some(key) = release_key() {
                // SAFETY: a key of this process; the value is an integer, never
                // dereferenced. A failure (no memory for the key's block) only means the
                // slot is not given back.
                unsafe { libc::pthread_setspecific(key, (i + 1) as *const libc::c_void) };
            }
            return i;
        }
    }
    SLOTS + NEXT_SHARED.fetch_add(1, Ordering::Relaxed) % SHARED
}

/// Whether `slot` belongs to one thread at a time (written by its owner only).
#[inline(always)]
pub(crate) fn exclusive(slot: usize) -> bool {
    slot < SLOTS
}

/// Whether `slot`'s owner is a live thread (or the slot is shared); at fault time only.
pub(crate) fn live(slot: usize) -> bool {
    !exclusive(slot) || OWNED.get(slot).is_some_and(|o| o.load(Ordering::Relaxed))
}

/// The next number of a per-slot sequence `head` (a ring's): in an exclusive slot only its
/// owner writes `head`, so a plain load and store; in a shared one an atomic add. The owner
/// of a slot it claimed after another thread sees that thread's last store (the claim
/// acquires what the release at its exit published).
#[inline(always)]
pub(crate) fn take(head: &AtomicU64, slot: usize) -> u64 {
    if exclusive(slot) {
        let n = head.load(Ordering::Relaxed);
        head.store(n.wrapping_add(1), Ordering::Relaxed);
        n
    } else {
        head.fetch_add(1, Ordering::Relaxed)
    }
}

#[inline(always)]
fn add(c: &AtomicU64, v: u64, exclusive: bool) {
    if exclusive {
        // Only this thread writes the slot: no read-modify-write needed.
        c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
    } else {
        c.fetch_add(v, Ordering::Relaxed);
    }
}

/// What one call did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Outcome {
    /// The shim changed the call (dry-run: would have).
    pub(crate) rewritten: bool,
    /// The changed call failed and was retried as the caller asked.
    pub(crate) fallback: bool,
    /// The caller got a non-success answer.
    pub(crate) error: bool,
    pub(crate) bytes: u64,
    /// The call succeeded and left memory coherent that no flag changes
    /// (`rmcp_core::policy::LeftCoherent`).
    pub(crate) coherent: bool,
}

/// Counts one call in `slot` (the calling thread's, from [`slot`]).
#[inline(always)]
pub(crate) fn record(slot: usize, hook: Hook, o: Outcome) {
    let c = &COUNTERS[slot].0[hook.index()];
    let exclusive = slot < SLOTS;
    add(&c.calls, 1, exclusive);
    if o.rewritten {
        add(&c.rewritten, 1, exclusive);
    }
    if o.fallback {
        add(&c.fallbacks, 1, exclusive);
    }
    if o.error {
        add(&c.errors, 1, exclusive);
    }
    if o.bytes != 0 {
        add(&c.bytes, o.bytes, exclusive);
    }
    if o.coherent {
        add(&c.coherent, 1, exclusive);
    }
}

/// Counts one successful hipMemCreate with a host location in `slot`.
pub(crate) fn record_host_location(slot: usize, hook: Hook) {
    add(
        &COUNTERS[slot].0[hook.index()].host_location,
        1,
        slot < SLOTS,
    );
}

/// What the load-time fix counts (`module_load`): process-wide atomic adds, since module
/// loads are rare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Image {
    /// An image (or a hipModuleLoad file) read and scanned.
    Scanned,
    /// Of those, not readable as code objects (forwarded as they were).
    Unreadable,
    /// Of those, with a broken descriptor literal in a gfx1010-gfx1013 code object.
    Broken,
    /// A load the runtime received a fixed copy for, and accepted.
    Fixed,
    /// A broken image loaded as it was on a gfx1010-gfx1013 GPU, with a warning.
    Warned,
    /// Instructions whose descriptor literal was fixed, over the fixed loads.
    InstructionsFixed,
    /// A fixed load the runtime refused, made again with the caller's image.
    Fallback,
}

static IMAGE_COUNTERS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];

/// Counts `n` of `what`.
pub(crate) fn record_image(what: Image, n: u64) {
    IMAGE_COUNTERS[what as usize].fetch_add(n, Ordering::Relaxed);
}

/// The report's `buffer_descriptors`: what the load-time fix saw and did (`Image` says what
/// each counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ImageCounts {
    pub(crate) scanned: u64,
    pub(crate) unreadable: u64,
    pub(crate) broken: u64,
    pub(crate) fixed: u64,
    pub(crate) warned: u64,
    pub(crate) instructions_fixed: u64,
    pub(crate) fallbacks: u64,
}

pub(crate) fn image_counts() -> ImageCounts {
    let c = |what: Image| IMAGE_COUNTERS[what as usize].load(Ordering::Relaxed);
    ImageCounts {
        scanned: c(Image::Scanned),
        unreadable: c(Image::Unreadable),
        broken: c(Image::Broken),
        fixed: c(Image::Fixed),
        warned: c(Image::Warned),
        instructions_fixed: c(Image::InstructionsFixed),
        fallbacks: c(Image::Fallback),
    }
}

/// What the in-place fixes under an override count (`module_load`, `fatbin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OverrideEvent {
    /// A load the runtime received a copy with in-place fixes for, and accepted; or a fat
    /// binary registered as a private copy of its entry with the fixes.
    Fixed,
    /// Words changed to `s_nop 0`, over the fixed loads and fat binaries.
    InstructionsFixed,
    /// A load or fat binary with fixes that was handed on as it was, with a warning
    /// (`warn`, `dry-run`, or a bound).
    Warned,
    /// Fat binaries registered under the override whose entry was read and scanned.
    FatBinaries,
    /// Fat binaries registered under the override and handed on as they were without a
    /// scan: a bound hit, a compressed bundle that does not say its size, GPUs that would
    /// load different entries, a bundle that could not be read.
    FatBinariesLeft,
}

static OVERRIDE_COUNTERS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Counts `n` of `what`.
pub(crate) fn record_override(what: OverrideEvent, n: u64) {
    OVERRIDE_COUNTERS[what as usize].fetch_add(n, Ordering::Relaxed);
}

/// The report's `override_fixes` (`OverrideEvent` says what each counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct OverrideCounts {
    pub(crate) fixed: u64,
    pub(crate) instructions_fixed: u64,
    pub(crate) warned: u64,
    pub(crate) fat_binaries: u64,
    pub(crate) fat_binaries_left: u64,
}

pub(crate) fn override_counts() -> OverrideCounts {
    let c = |what: OverrideEvent| OVERRIDE_COUNTERS[what as usize].load(Ordering::Relaxed);
    OverrideCounts {
        fixed: c(OverrideEvent::Fixed),
        instructions_fixed: c(OverrideEvent::InstructionsFixed),
        warned: c(OverrideEvent::Warned),
        fat_binaries: c(OverrideEvent::FatBinaries),
        fat_binaries_left: c(OverrideEvent::FatBinariesLeft),
    }
}

/// In the child of a fork: zero every counter (the child counts its own calls) and free
/// every slot but the forking thread's, the only thread the child has.
pub(crate) fn reset_after_fork() {
    for c in IMAGE_COUNTERS.iter().chain(&OVERRIDE_COUNTERS) {
        c.store(0, Ordering::Relaxed);
    }
    for slot in &COUNTERS {
        for c in &slot.0 {
            for v in c.all() {
                v.store(0, Ordering::Relaxed);
            }
        }
    }
    let mine = thread::with(|t| t.claimed_slot());
    for (i, owned) in OWNED.iter().enumerate() {
        owned.store(Some(i) == mine, Ordering::Relaxed);
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    pub(crate) calls: u64,
    pub(crate) rewritten: u64,
    pub(crate) fallbacks: u64,
    pub(crate) errors: u64,
    pub(crate) bytes: u64,
    /// Successful calls that left memory coherent which no flag changes: hipHostRegister,
    /// 7.x Uncached host allocations.
    pub(crate) coherent: u64,
    /// Successful hipMemCreate calls with a host location (never changed).
    pub(crate) host_location: u64,
}

pub(crate) fn counts(hook: Hook) -> Counts {
    let mut c = Counts::default();
    for slot in &COUNTERS {
        let s = &slot.0[hook.index()];
        c.calls += s.calls.load(Ordering::Relaxed);
        c.rewritten += s.rewritten.load(Ordering::Relaxed);
        c.fallbacks += s.fallbacks.load(Ordering::Relaxed);
        c.errors += s.errors.load(Ordering::Relaxed);
        c.bytes = c.bytes.wrapping_add(s.bytes.load(Ordering::Relaxed));
        c.coherent += s.coherent.load(Ordering::Relaxed);
        c.host_location += s.host_location.load(Ordering::Relaxed);
    }
    c
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, Mutex};

    /// The tests that claim slots run one at a time: a slot freed by one test's thread
    /// would otherwise be claimed at once by another's (`launches` and `allocations` tests,
    /// whose records claim the recording thread's slot, take it too).
    pub(crate) static SLOT_TESTS: Mutex<()> = Mutex::new(());

    fn mine() -> usize {
        thread::with(slot)
    }

    #[test]
    fn slots_are_on_separate_cache_lines() {
        assert!(std::mem::align_of::<Slot>() >= 128);
        let a = &COUNTERS[0] as *const Slot as usize;
        let b = &COUNTERS[1] as *const Slot as usize;
        assert!(b - a >= 128);
    }

    #[test]
    fn records_sum_across_exclusive_and_shared_slots() {
        // More threads alive at once than there are slots: some share. The only test
        // touching hipMallocFromPoolAsync counters.
        let _one_at_a_time = SLOT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let hook = Hook::HipMallocFromPoolAsync;
        let n = SLOTS + 6;
        let barrier = Arc::new(Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let slot = mine();
                    barrier.wait(); // every thread holds its slot at once
                    for _ in 0..1000 {
                        let o = Outcome {
                            rewritten: i % 2 == 0,
                            fallback: i == 0,
                            error: i == 3,
                            bytes: 10,
                            coherent: i == 5,
                        };
                        record(slot, hook, o);
                    }
                    slot
                })
            })
            .collect();
        let slots: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(
            slots.iter().any(|s| *s >= SLOTS),
            "some thread shared a slot"
        );
        let n = n as u64;
        assert_eq!(
            counts(hook),
            Counts {
                calls: 1000 * n,
                rewritten: 1000 * n.div_ceil(2),
                fallbacks: 1000,
                errors: 1000,
                bytes: 10_000 * n,
                coherent: 1000,
                host_location: 0,
            }
        );
    }

    #[test]
    fn a_slot_is_released_when_its_thread_exits() {
        let _one_at_a_time = SLOT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let slot = std::thread::spawn(mine).join().unwrap();
        assert!(slot < SLOTS);
        assert!(
            !OWNED[slot].load(Ordering::Acquire),
            "slot {slot} still owned after its thread exited"
        );
        // The next thread gets the lowest free slot: that one again.
        assert_eq!(std::thread::spawn(mine).join().unwrap(), slot);
    }
}
