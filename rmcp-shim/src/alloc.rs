//! The shim's own heap: the system allocator, and an emergency arena for when it fails.
//!
//! Without this, an allocation the shim makes while the process is out of memory (building
//! its state on the first hooked call, a log line, the exit report) would end the process:
//! Rust's allocation-error handler prints "memory allocation of N bytes failed" and aborts,
//! and stable Rust offers no way to make it do anything else. Without the shim, the same
//! process would have got an error code from the runtime and carried on.
//!
//! So this library's `#[global_allocator]` (only the shim's own Rust allocations go
//! through it; the program's are untouched) asks the system allocator (`malloc`, as
//! `std::alloc::System` does), and when that returns NULL, serves the request from a fixed
//! static arena:
//! - bump allocation with one atomic offset: no lock, nothing to deadlock on in a signal
//!   handler or in the child of a fork;
//! - freeing the block at the top of the arena gives its space back (a log line's
//!   temporary strings, freed in the reverse order they were made, are reused), and the
//!   top block grows and shrinks in place; any other arena block is never reused;
//! - the arena lives in .bss: it costs no memory until a page of it is touched.
//!
//! What the arena cannot serve (it is full) still ends in Rust's handler; the state build
//! and the exit report need a few KiB, and logging formats into stack buffers (`log`), so
//! the arena's size leaves a wide margin. [`Usage`] counts what the arena served.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Size of the emergency arena.
const ARENA_BYTES: usize = 256 << 10;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: the bytes are handed out in disjoint blocks (claimed with a compare-exchange on
// TOP), each used by the one owner it was handed to.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));
/// Offset of the first free byte.
static TOP: AtomicUsize = AtomicUsize::new(0);
/// Allocations the arena served, and requests it could not serve.
static SERVED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

fn base() -> usize {
    ARENA.0.get() as usize
}

fn in_arena(ptr: *mut u8) -> bool {
    let p = ptr as usize;
    p >= base() && p < base() + ARENA_BYTES
}

/// A block of `layout` from the arena, or null when it is full.
fn arena_alloc(layout: Layout) -> *mut u8 {
    let mut top = TOP.load(Ordering::Relaxed);
    loop {
        // `align` is a power of two no larger than the arena's own alignment when it fits
        // at all; larger alignments are found by aligning the address.
        let start = (base() + top).next_multiple_of(layout.align()) - base();
        let Some(end) = start
            .checked_add(layout.size())
            .filter(|e| *e <= ARENA_BYTES)
        else {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return std::ptr::null_mut();
        };
        match TOP.compare_exchange_weak(top, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                SERVED.fetch_add(1, Ordering::Relaxed);
                return (base() + start) as *mut u8;
            }
            Err(now) => top = now,
        }
    }
}

/// Gives an arena block back if it is the top one; otherwise it stays used.
fn arena_free(ptr: *mut u8, size: usize) {
    let start = ptr as usize - base();
    let _ = TOP.compare_exchange(start + size, start, Ordering::Relaxed, Ordering::Relaxed);
}

/// Resizes the top arena block in place; false if it is not the top one or cannot grow.
fn arena_resize_in_place(ptr: *mut u8, old: usize, new: usize) -> bool {
    let start = ptr as usize - base();
    let Some(end) = start.checked_add(new).filter(|e| *e <= ARENA_BYTES) else {
        return false;
    };
    TOP.compare_exchange(start + old, end, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// What the arena has served: allocations, requests refused because it was full, and the
/// bytes in use at the top (blocks below the top that were freed count as used).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) served: u64,
    pub(crate) refused: u64,
    pub(crate) top: usize,
}

#[allow(dead_code, reason = "for the stats report to show")]
pub(crate) fn usage() -> Usage {
    Usage {
        served: SERVED.load(Ordering::Relaxed),
        refused: REFUSED.load(Ordering::Relaxed),
        top: TOP.load(Ordering::Relaxed),
    }
}

/// The system allocator, with the arena behind it.
pub(crate) struct ShimAlloc;

#[global_allocator]
static GLOBAL: ShimAlloc = ShimAlloc;

// SAFETY: every block handed out is either System's (valid for `layout`, freed and resized
// by System only) or an arena block of at least `layout.size()` bytes at `layout.align()`,
// disjoint from every other live block; `in_arena` tells the two apart by address.
unsafe impl GlobalAlloc for ShimAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout has a non-zero size (GlobalAlloc's contract).
        let p = unsafe { System.alloc(layout) };
        if p.is_null() { arena_alloc(layout) } else { p }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            return p;
        }
        let p = arena_alloc(layout);
        if !p.is_null() {
            // A block given back from the top may hold old bytes.
            // SAFETY: `p` is a fresh arena block of `layout.size()` bytes.
            unsafe { p.write_bytes(0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if in_arena(ptr) {
            arena_free(ptr, layout.size());
        } else {
            // SAFETY: `ptr` came from System.alloc with `layout` (not an arena address).
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if in_arena(ptr) {
            if arena_resize_in_place(ptr, layout.size(), new_size) {
                return ptr;
            }
        } else {
            // SAFETY: `ptr` is System's block for `layout`; `new_size` is non-zero and
            // does not overflow when rounded to the alignment (realloc's contract).
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                return p;
            }
            // System could not: `ptr` is still valid, move it into the arena.
        }
        // SAFETY: the contract of realloc makes this layout valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a non-zero size, as above.
        let p = unsafe { self.alloc(new_layout) };
        if !p.is_null() {
            // SAFETY: both blocks are live, disjoint, and at least this long.
            unsafe { std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size)) };
            // SAFETY: `ptr` is this allocator's block for `layout`, no longer used.
            unsafe { self.dealloc(ptr, layout) };
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arena functions, directly (the unit-test binary's allocations go through
    /// ShimAlloc too, but malloc succeeds there, so nothing else uses the arena). One test,
    /// so that nothing moves the top between its steps.
    #[test]
    fn arena_blocks() {
        let l = Layout::from_size_align(100, 8).unwrap();
        let a = arena_alloc(l);
        assert!(!a.is_null() && in_arena(a));
        assert_eq!(a as usize % 8, 0);
        let top = TOP.load(Ordering::Relaxed);
        assert!(
            arena_resize_in_place(a, 100, 300),
            "the top block grows in place"
        );
        assert_eq!(TOP.load(Ordering::Relaxed), top + 200);
        assert!(arena_resize_in_place(a, 300, 50));
        arena_free(a, 50);
        assert_eq!(arena_alloc(l), a, "the freed top block is reused");

        let b = arena_alloc(l);
        assert!(
            !arena_resize_in_place(a, 100, 200),
            "a is no longer the top"
        );
        arena_free(a, 100);
        assert_eq!(
            TOP.load(Ordering::Relaxed),
            b as usize - base() + 100,
            "a stays used"
        );
        arena_free(b, 100);

        let aligned = arena_alloc(Layout::from_size_align(24, 256).unwrap());
        assert_eq!(aligned as usize % 256, 0);
        arena_free(aligned, 24);

        let refused = usage().refused;
        assert!(arena_alloc(Layout::from_size_align(ARENA_BYTES + 1, 8).unwrap()).is_null());
        assert_eq!(usage().refused, refused + 1);
        assert!(!in_arena(std::ptr::null_mut()));
    }
}
