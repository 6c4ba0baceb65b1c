//! One entry of a ring that its writer fills without a lock and a reader (at fault time,
//! on another thread) reads without stopping the writer: the entry's sequence word says
//! which write it holds and whether that write is whole. It owns only that protocol; the
//! rings (`launches`, `allocations`) own their entries' fields, which are relaxed atomics
//! stored inside [`write`] and loaded inside [`read`].
//!
//! The word is 0 before the first write, odd while write `n` is under way (`2n + 1`), and
//! `2(n + 1)` once it is whole. A writer marks the entry, fences, stores the fields and
//! publishes with a release store; a reader checks the word for the write it wants, loads
//! the fields, fences, and checks the word again: a write that began meanwhile shows as a
//! changed word, and the read is dropped, never a mix of two writes. Writing costs two plain
//! stores and a fence on top of the fields: no lock, no read-modify-write.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Writes entry number `n` of its ring: `store` stores the fields.
#[inline(always)]
pub(crate) fn write(seq: &AtomicU64, n: u64, store: impl FnOnce()) {
    seq.store(n.wrapping_mul(2) | 1, Ordering::Relaxed);
    fence(Ordering::Release);
    store();
    seq.store(n.wrapping_add(1).wrapping_mul(2), Ordering::Release);
}

/// Reads write number `n` of an entry with `load`; None when the entry holds another
/// write, or one that changed while it was read.
#[inline(always)]
pub(crate) fn read<T>(seq: &AtomicU64, n: u64, load: impl FnOnce() -> T) -> Option<T> {
    let before = seq.load(Ordering::Acquire);
    if before != n.wrapping_add(1).wrapping_mul(2) {
        return None;
    }
    let fields = load();
    fence(Ordering::Acquire);
    (seq.load(Ordering::Relaxed) == before).then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_whole_write_reads_back_and_no_other() {
        let seq = AtomicU64::new(0);
        let field = AtomicUsize::new(0);
        assert_eq!(read(&seq, 0, || 0), None, "never written");
        write(&seq, 0, || field.store(7, Ordering::Relaxed));
        assert_eq!(read(&seq, 0, || field.load(Ordering::Relaxed)), Some(7));
        assert_eq!(read(&seq, 1, || field.load(Ordering::Relaxed)), None);
        write(&seq, 1, || field.store(8, Ordering::Relaxed));
        assert_eq!(
            read(&seq, 0, || field.load(Ordering::Relaxed)),
            None,
            "overwritten"
        );
        assert_eq!(read(&seq, 1, || field.load(Ordering::Relaxed)), Some(8));
    }

    #[test]
    fn a_write_under_way_is_dropped() {
        let seq = AtomicU64::new(0);
        write(&seq, 0, || {});
        // A reader that began before write 1 started sees the word change under it.
        let got = read(&seq, 0, || seq.store(3, Ordering::Relaxed));
        assert_eq!(got, None);
        // And one that begins while write 1 is under way finds no whole write 1.
        assert_eq!(read(&seq, 1, || ()), None);
    }
}
