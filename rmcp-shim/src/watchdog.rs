//! The stall watchdog (RMCP_HANG_AFTER): when a synchronizing call (the hooks that `wait`:
//! `hipDeviceSynchronize`, `hipStreamSynchronize`, `hipEventSynchronize`, the blocking
//! copies) has waited longer than the threshold, one block through the shim's logger says
//! which threads wait, in which call, and what each queue is running and since when; and one
//! line when that wait ends. It never changes what the program does: nothing is cancelled,
//! no signal is sent, the queues are read as at a fault (`dispatches`), and the runtime
//! is asked only which GPU a queue is on, when a block is said.
//!
//! It owns the waiting marks ([`WAITS`], one per stats slot, on cache lines of their own) and
//! the watchdog thread. A waiting call makes its thread's mark odd before it forwards and
//! even after ([`begin`], [`end`]): two plain stores on a line no other thread writes, no
//! clock read. The thread is started by the first synchronizing call of a process (a
//! process that never synchronizes starts none), with every signal blocked (a program's
//! signals never land on it), and looks every [`TICK`]: the clock it reads is its own, so
//! "waited" means "seen waiting by the watchdog for". A block is said once per stall (all
//! the waits past the threshold then), and the wait's end once; at most [`BLOCKS`] blocks per
//! process. A fork child starts its own thread on its first synchronizing call (the marks
//! of the parent's other threads are cleared there); at exit the thread says nothing more.
//! Threads past the stats slots (which share slots) are not watched.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp_core::dispatch::{Running, Waiter};
use rmcp_core::registry::{HOOKS, Hook};

use crate::stats::SLOTS;

/// How often the watchdog looks.
pub(crate) const TICK: Duration = Duration::from_millis(500);
/// Blocks said per process.
pub(crate) const BLOCKS: u32 = 16;

#[repr(align(128))]
struct Wait {
    /// Even: not waiting; odd: waiting (each wait moves it on by two).
    seq: AtomicU64,
    hook: AtomicU8,
    thread: AtomicU64,
}

static WAITS: [Wait; SLOTS] = [const {
    Wait {
        seq: AtomicU64::new(0),
        hook: AtomicU8::new(0),
        thread: AtomicU64::new(0),
    }
}; SLOTS];

static STARTED: AtomicBool = AtomicBool::new(false);
static STOPPING: AtomicBool = AtomicBool::new(false);
static FORK_HOOK: AtomicBool = AtomicBool::new(false);
static SAID: AtomicU32 = AtomicU32::new(0);

/// Before a synchronizing call is forwarded: marks the calling thread as waiting in `hook`
/// and starts the watchdog if this process has none. None: not watched (RMCP_HANG_AFTER=off,
/// or a thread in a shared slot); pass the answer to [`end`].
#[inline(always)]
pub(crate) fn begin(hook: Hook) -> Option<usize> {
    let threshold = crate::state::config().hang_after.0?;
    let slot = crate::thread::with(crate::stats::slot);
    let w = WAITS.get(slot)?;
    let s = w.seq.load(Ordering::Relaxed);
    w.hook.store(hook as u8, Ordering::Relaxed);
    // SAFETY: pthread_self has no precondition.
    w.thread
        .store(unsafe { libc::pthread_self() } as u64, Ordering::Relaxed);
    // Odd: waiting (a mark left odd by a cancelled wait moves on to the next odd number).
    w.seq.store((s | 1) + 2 * (s & 1), Ordering::Release);
    if !STARTED.load(Ordering::Relaxed) {
        start(threshold);
    }
    Some(slot)
}

/// After the call returned: the thread waits no more.
#[inline(always)]
pub(crate) fn end(slot: Option<usize>) {
    if let Some(w) = slot.and_then(|s| WAITS.get(s)) {
        let s = w.seq.load(Ordering::Relaxed);
        w.seq.store(s + (s & 1), Ordering::Release);
    }
}

#[cold]
fn start(threshold: u32) {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    if !FORK_HOOK.swap(true, Ordering::AcqRel) {
        // SAFETY: both callbacks are `extern "C"` functions of this library, which is never
        // unloaded.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
            libc::atexit(at_exit);
        }
    }
    // The thread is born with every signal blocked: the program's signals go to its own
    // threads, as without rmcp.
    // SAFETY: sigset_t values filled by sigfillset; the calling thread's mask is restored
    // right after the spawn.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        let spawned = std::thread::Builder::new()
            .name("rmcp-watchdog".into())
            .spawn(move || {
                let _ = std::panic::catch_unwind(|| watch(threshold));
            });
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        if spawned.is_err() {
            tracing::debug!(
                "the watchdog thread could not be started: RMCP_HANG_AFTER is not in effect"
            );
        }
    }
}

extern "C" fn after_fork_in_child() {
    // The child has no watchdog, and none of the parent's other threads.
    for w in &WAITS {
        w.seq.store(0, Ordering::Relaxed);
    }
    STARTED.store(false, Ordering::Release);
}

extern "C" fn at_exit() {
    STOPPING.store(true, Ordering::Release);
}

/// What the watchdog remembers of one slot's wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    seq: u64,
    since: Option<Instant>,
    said: bool,
}

/// The watchdog's memory: each slot's wait, and each queue's packet with when it was first
/// seen there.
struct Watch {
    threshold: Duration,
    slots: [Seen; SLOTS],
    queues: Vec<((u64, u64), Instant)>,
}

/// One look: (slot, seq, hook, thread) of each thread waiting now.
type Marks = Vec<(usize, u64, u8, u64)>;

fn marks() -> Marks {
    WAITS
        .iter()
        .enumerate()
        .filter_map(|(i, w)| {
            let seq = w.seq.load(Ordering::Acquire);
            (seq & 1 == 1 && crate::stats::live(i)).then(|| {
                (
                    i,
                    seq,
                    w.hook.load(Ordering::Relaxed),
                    w.thread.load(Ordering::Relaxed),
                )
            })
        })
        .collect()
}

/// What one look finds to say.
#[derive(Debug, PartialEq, Eq)]
enum Say {
    Nothing,
    /// Waits past the threshold not said yet: the block, with every wait seen now.
    Stall(Vec<Waiter>),
    /// A wait that was said has ended, after this long.
    Ended(Vec<Waiter>),
}

impl Watch {
    fn new(threshold: u32) -> Watch {
        Watch {
            threshold: Duration::from_secs(u64::from(threshold)),
            slots: [Seen::default(); SLOTS],
            queues: Vec::new(),
        }
    }

    /// Takes the marks seen at `now`: what to say.
    fn look(&mut self, marks: &Marks, now: Instant) -> Say {
        let mut ended = Vec::new();
        // Waits that ended (or moved on to another wait).
        for (i, seen) in self.slots.iter_mut().enumerate() {
            if seen.since.is_none() {
                continue;
            }
            let still = marks
                .iter()
                .any(|&(s, seq, _, _)| s == i && seq == seen.seq);
            if !still {
                if seen.said {
                    ended.push(Waiter {
                        thread: WAITS[i].thread.load(Ordering::Relaxed),
                        call: "",
                        waited: seen.since.map_or(0, |t| now.duration_since(t).as_secs()),
                    });
                }
                *seen = Seen::default();
            }
        }
        if !ended.is_empty() {
            return Say::Ended(ended);
        }
        let mut due = false;
        for &(s, seq, _, _) in marks {
            let seen = &mut self.slots[s];
            if seen.since.is_none() {
                *seen = Seen {
                    seq,
                    since: Some(now),
                    said: false,
                };
            }
            let waited = seen.since.map_or(Duration::ZERO, |t| now.duration_since(t));
            due |= !seen.said && waited >= self.threshold;
        }
        if !due {
            return Say::Nothing;
        }
        let waiters = marks
            .iter()
            .map(|&(s, _, hook, thread)| {
                let seen = &mut self.slots[s];
                seen.said = true;
                Waiter {
                    thread,
                    call: HOOKS
                        .get(usize::from(hook))
                        .map_or("a synchronizing call", |(_, n)| n),
                    waited: seen.since.map_or(0, |t| now.duration_since(t).as_secs()),
                }
            })
            .collect();
        Say::Stall(waiters)
    }

    /// Notes each busy queue's packet (queue, read index) at `now`: kept from when it was
    /// first seen there.
    fn note_queues(&mut self, busy: &[(u64, u64)], now: Instant) {
        self.queues = busy
            .iter()
            .map(|key| {
                let since = self
                    .queues
                    .iter()
                    .find(|(k, _)| k == key)
                    .map_or(now, |(_, t)| *t);
                (*key, since)
            })
            .collect();
    }

    /// How long each of `running`'s packets has been seen at its queue's read index.
    fn seen_for(&self, running: &mut [Running], now: Instant) {
        for r in running.iter_mut().filter(|r| r.busy()) {
            r.seen_for = self
                .queues
                .iter()
                .find(|(k, _)| *k == (r.queue, r.read))
                .map(|(_, t)| now.duration_since(*t).as_secs());
        }
    }
}

fn watch(threshold: u32) {
    let _no_cancel = crate::cancel::NoCancel::new();
    let mut w = Watch::new(threshold);
    loop {
        std::thread::sleep(TICK);
        if STOPPING.load(Ordering::Acquire) || !STARTED.load(Ordering::Acquire) {
            return;
        }
        let marks = marks();
        let now = Instant::now();
        // The queues are read only while someone waits, and named only when said.
        let busy: Vec<(u64, u64)> = if marks.is_empty() {
            Vec::new()
        } else {
            crate::dispatches::running()
                .iter()
                .filter(|n| n.running.busy())
                .map(|n| (n.running.queue, n.running.read))
                .collect()
        };
        w.note_queues(&busy, now);
        match w.look(&marks, now) {
            Say::Nothing => {}
            Say::Ended(waiters) => say(threshold, &waiters, &[], true),
            Say::Stall(waiters) => {
                let mut running = crate::fault::running_now();
                w.seen_for(&mut running, now);
                say(threshold, &waiters, &running, false)
            }
        }
    }
}

fn say(threshold: u32, waiters: &[Waiter], running: &[Running], ended: bool) {
    if SAID.fetch_add(1, Ordering::Relaxed) >= BLOCKS || STOPPING.load(Ordering::Acquire) {
        return;
    }
    let lines = rmcp_core::dispatch::stall_lines(u64::from(threshold), waiters, running, ended);
    for line in &lines {
        tracing::warn!("{line}");
    }
    if ended {
        return;
    }
    crate::report::stall_seen(serde_json::json!({
        "kind": "stall",
        "threshold_s": threshold,
        "waiters": waiters.iter().map(|w| serde_json::json!({
            "thread": format!("{:#x}", w.thread),
            "call": w.call,
            "waited_s": w.waited,
        })).collect::<Vec<_>>(),
        "running": running.iter().filter(|r| r.busy()).map(crate::fault::running_json).collect::<Vec<_>>(),
        "lines": lines,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(slot: usize, seq: u64) -> (usize, u64, u8, u64) {
        (slot, seq, Hook::HipDeviceSynchronize as u8, 0x1234)
    }

    #[test]
    fn a_wait_is_said_once_past_the_threshold_and_its_end_once() {
        let mut w = Watch::new(2);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.look(&vec![mark(3, 1)], at(0)), Say::Nothing);
        assert_eq!(w.look(&vec![mark(3, 1)], at(1)), Say::Nothing);
        match w.look(&vec![mark(3, 1)], at(2)) {
            Say::Stall(ws) => {
                assert_eq!(ws.len(), 1);
                assert_eq!(ws[0].call, "hipDeviceSynchronize");
                assert_eq!(ws[0].waited, 2);
            }
            s => panic!("{s:?}"),
        }
        // Said once: not again while the same wait goes on.
        assert_eq!(w.look(&vec![mark(3, 1)], at(9)), Say::Nothing);
        // It ends: one line.
        match w.look(&vec![], at(10)) {
            Say::Ended(ws) => assert_eq!(ws[0].waited, 10),
            s => panic!("{s:?}"),
        }
        assert_eq!(w.look(&vec![], at(11)), Say::Nothing);
    }

    #[test]
    fn short_waits_say_nothing_and_a_new_wait_starts_afresh() {
        let mut w = Watch::new(2);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        for s in 0..10 {
            // A new wait (another seq) every second: none reaches the threshold.
            assert_eq!(
                w.look(&vec![mark(0, 2 * s + 1)], at(s)),
                Say::Nothing,
                "{s}"
            );
        }
    }

    #[test]
    fn the_marks_follow_begin_and_end() {
        let _one_at_a_time = crate::stats::tests::SLOT_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Without the watchdog's thread: the marks only.
        STARTED.store(true, Ordering::SeqCst);
        let slot = crate::thread::with(crate::stats::slot);
        assert!(slot < SLOTS, "a test thread gets a slot of its own");
        let before = WAITS[slot].seq.load(Ordering::SeqCst);
        WAITS[slot]
            .seq
            .store(before + (before & 1), Ordering::SeqCst);
        let w = WAITS[slot].seq.load(Ordering::SeqCst);
        // begin needs the configuration's threshold (the default is on).
        let got = begin(Hook::HipStreamSynchronize);
        assert_eq!(got, Some(slot));
        assert_eq!(WAITS[slot].seq.load(Ordering::SeqCst), w + 1);
        assert!(
            marks()
                .iter()
                .any(|m| m.0 == slot && m.2 == Hook::HipStreamSynchronize as u8)
        );
        end(got);
        assert_eq!(WAITS[slot].seq.load(Ordering::SeqCst), w + 2);
        assert!(!marks().iter().any(|m| m.0 == slot));
    }
}
