//! The allocation record: each thread's last [`RECORDS`] allocations that went through a
//! hooked call, with what was asked and what the shim forwarded, so that a fault's address
//! can be traced to the call that made its allocation. One fixed lock-free ring per stats
//! slot (`stats::slot`: claimed once per thread, given back at its exit, a later thread goes
//! on in the same ring): a successful allocation costs a plain load and store of the ring's
//! own count and a few stores, on cache lines no other thread writes (no lock, no heap, no
//! system call, no shared written line); threads beyond `stats::SLOTS` share a few rings
//! with an atomic add. The oldest record of a ring is overwritten. Frees are not hooked, so a
//! record may outlive its allocation: it is only believed when its base is the base the
//! runtime reports for the faulting address (`hsa_amd_pointer_info`). It reads nothing of
//! the shim's other state.
//!
//! Within a thread, "newest" is exact. Across threads no clock is kept (see `launches`):
//! when several threads' rings hold a record for the same address (one thread's allocation
//! freed, the address handed to another), the record with the fewest later allocations in
//! its own ring wins, a live thread's on a tie.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use rmcp_core::policy::Forward;
use rmcp_core::registry::{HOOKS, Hook};

use crate::stats::{SHARED, SLOTS};

/// Allocations kept per thread.
pub(crate) const RECORDS: usize = 1024;

struct Entry {
    /// 0: never written; odd: being written; else (number + 1) * 2.
    seq: AtomicU64,
    base: AtomicUsize,
    size: AtomicUsize,
    caller: AtomicUsize,
    asked: AtomicU32,
    forwarded: AtomicU32,
    /// The hook's index, and in the next byte what it was forwarded as (0: unchanged,
    /// 1: hipHostMalloc, 2: hipExtMallocWithFlags).
    how: AtomicU32,
}

/// One slot's allocations, on cache lines of its own.
#[repr(align(128))]
struct Ring {
    /// Allocations recorded in this ring (written by its owner only, unless shared).
    head: AtomicU64,
    entries: [Entry; RECORDS],
}

static RINGS: [Ring; SLOTS + SHARED] = [const {
    Ring {
        head: AtomicU64::new(0),
        entries: [const {
            Entry {
                seq: AtomicU64::new(0),
                base: AtomicUsize::new(0),
                size: AtomicUsize::new(0),
                caller: AtomicUsize::new(0),
                asked: AtomicU32::new(0),
                forwarded: AtomicU32::new(0),
                how: AtomicU32::new(0),
            }
        }; RECORDS],
    }
}; SLOTS + SHARED];

/// One allocation as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) hook: Hook,
    pub(crate) base: usize,
    pub(crate) size: usize,
    /// The caller's return address, or a per-copy entry's slot (`caller_is_slot`).
    pub(crate) caller: usize,
    pub(crate) asked: u32,
    /// What the shim forwarded instead, if it rewrote the call.
    pub(crate) forwarded: Option<Forward>,
}

/// Records a successful allocation at `base` (what the runtime wrote to the caller's
/// out-pointer), in the calling thread's ring. For tests: hooks call [`record_in`] with the
/// slot they hold.
#[cfg(test)]
fn record(hook: Hook, base: usize, size: usize, caller: usize, asked: u32, fw: Option<Forward>) {
    record_in(
        crate::thread::with(crate::stats::slot),
        hook,
        base,
        size,
        caller,
        asked,
        fw,
    );
}

/// [`record`] in `slot`'s ring, which must be the calling thread's (`stats::slot`; a hook
/// already holds it).
#[inline(always)]
pub(crate) fn record_in(
    slot: usize,
    hook: Hook,
    base: usize,
    size: usize,
    caller: usize,
    asked: u32,
    fw: Option<Forward>,
) {
    if base == 0 {
        return;
    }
    let Some(ring) = RINGS.get(slot) else {
        return;
    };
    let n = crate::stats::take(&ring.head, slot);
    let e = &ring.entries[(n % RECORDS as u64) as usize];
    let (how, forwarded) = match fw {
        None => (0u32, asked),
        Some(Forward::HostMalloc(f)) => (1, f),
        Some(Forward::ExtMallocWithFlags(f)) => (2, f),
    };
    crate::seqlock::write(&e.seq, n, || {
        e.base.store(base, Ordering::Relaxed);
        e.size.store(size, Ordering::Relaxed);
        e.caller.store(caller, Ordering::Relaxed);
        e.asked.store(asked, Ordering::Relaxed);
        e.forwarded.store(forwarded, Ordering::Relaxed);
        e.how
            .store(hook.index() as u32 | (how << 8), Ordering::Relaxed);
    });
}

/// The newest record of an allocation at `base` (exactly), if it is still in the ring.
pub(crate) fn find(base: usize) -> Option<Record> {
    find_by(|b, _| b == base)
}

/// The newest record whose range holds `addr`.
pub(crate) fn containing(addr: usize) -> Option<Record> {
    find_by(|b, s| addr >= b && addr - b < s.max(1))
}

fn find_by(matches: impl Fn(usize, usize) -> bool) -> Option<Record> {
    // (records newer in its own ring, not live, the record)
    let mut best: Option<(u64, bool, Record)> = None;
    for (slot, ring) in RINGS.iter().enumerate() {
        let head = ring.head.load(Ordering::Acquire);
        let newer = best.as_ref().map_or(RECORDS as u64, |b| b.0 + 1);
        for back in 0..newer.min(RECORDS as u64) {
            let Some(r) = read(ring, head, back) else {
                continue;
            };
            if !matches(r.base, r.size) {
                continue;
            }
            let key = (back, !crate::stats::live(slot));
            if best.as_ref().is_none_or(|b| key < (b.0, b.1)) {
                best = Some((key.0, key.1, r));
            }
            break;
        }
    }
    best.map(|b| b.2)
}

/// The `back`-th newest record of `ring` (0: its newest), if it is whole and still there.
fn read(ring: &Ring, head: u64, back: u64) -> Option<Record> {
    let k = head.checked_sub(back + 1)?;
    let e = &ring.entries[(k % RECORDS as u64) as usize];
    let (base, size, caller, asked, forwarded, how) = crate::seqlock::read(&e.seq, k, || {
        (
            e.base.load(Ordering::Relaxed),
            e.size.load(Ordering::Relaxed),
            e.caller.load(Ordering::Relaxed),
            e.asked.load(Ordering::Relaxed),
            e.forwarded.load(Ordering::Relaxed),
            e.how.load(Ordering::Relaxed),
        )
    })?;
    let (hook, _) = HOOKS.get((how & 0xff) as usize)?;
    Some(Record {
        hook: *hook,
        base,
        size,
        caller,
        asked,
        forwarded: match how >> 8 {
            1 => Some(Forward::HostMalloc(forwarded)),
            2 => Some(Forward::ExtMallocWithFlags(forwarded)),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_record_of_a_base_wins_and_ranges_are_found() {
        let _slots = crate::stats::tests::SLOT_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        record(Hook::HipHostMalloc, 0x10_0000, 4096, 0x1, 0, None);
        record(
            Hook::HipHostMalloc,
            0x10_0000,
            8192,
            0x2,
            0x4000_0000,
            Some(Forward::HostMalloc(0x8000_0000)),
        );
        let r = find(0x10_0000).unwrap();
        assert_eq!((r.size, r.caller, r.asked), (8192, 0x2, 0x4000_0000));
        assert_eq!(r.forwarded, Some(Forward::HostMalloc(0x8000_0000)));
        assert_eq!(containing(0x10_1fff).map(|r| r.caller), Some(0x2));
        assert_eq!(containing(0x10_2000), None);
        assert_eq!(find(0x20_0000), None);
        record(Hook::HipMalloc, 0, 1, 0x3, 0, None);
        assert_eq!(find(0), None, "a null base is not recorded");
    }

    #[test]
    fn another_threads_record_is_found_and_the_fewest_later_wins() {
        let _slots = crate::stats::tests::SLOT_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Bases no other test uses.
        std::thread::spawn(|| {
            record(Hook::HipMalloc, 0x70_0000, 64, 0xa, 0, None);
            record(Hook::HipMalloc, 0x71_0000, 64, 0xb, 0, None);
        })
        .join()
        .unwrap();
        assert_eq!(find(0x70_0000).map(|r| r.caller), Some(0xa));
        assert_eq!(containing(0x71_0010).map(|r| r.caller), Some(0xb));
        // This thread allocates 0x70_0000 again as its newest: no later allocation in its
        // ring against 1 in the other thread's (or, had it taken over that thread's ring,
        // the newest there).
        record(Hook::HipMalloc, 0x70_0000, 64, 0xc, 0, None);
        assert_eq!(find(0x70_0000).map(|r| r.caller), Some(0xc));
    }
}
