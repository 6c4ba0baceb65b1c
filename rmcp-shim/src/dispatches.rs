//! The queues the runtime created, and the packet each is on: what names the dispatch a GPU
//! was running at a fault, a reset or a stall. It owns two fixed tables:
//! - the creation wrappers: a `hsa_queue_create` call (observed, `observed`) goes on through
//!   [`creating`]'s wrapper of the function the caller would have reached (one per distinct
//!   function, [`TARGETS`] of them), which calls it with the caller's own arguments, returns
//!   its status unchanged and, on success, keeps the queue the runtime wrote;
//! - the queues kept ([`QUEUES`]; past that, a queue is not kept): each one's address, agent,
//!   ring and id when it was created.
//!
//! At event time [`running`] reads each kept queue's indices and the packet at its read index
//! (`rmcp_core::dispatch` says what they mean), through `own_memory` (`process_vm_readv`):
//! a queue destroyed since is not a fault, and one whose memory no longer holds the same ring
//! and id is left out. No lock, no runtime call: safe on ROCr's event thread and in the
//! watchdog. Queue creation is not a hot path; nothing here runs on a launch.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use rmcp_core::dispatch::{self, PACKET_BYTES, Packet, Running};

/// Queues kept.
pub(crate) const QUEUES: usize = 64;

/// Distinct `hsa_queue_create` functions wrapped (one per ROCr copy).
pub(crate) const TARGETS: usize = 8;

/// `hsa_status_t hsa_queue_create(hsa_agent_t, uint32_t size, hsa_queue_type32_t, callback,
/// void *data, uint32_t private_segment_size, uint32_t group_segment_size, hsa_queue_t **)`.
type Create = unsafe extern "C" fn(u64, u32, u32, usize, *mut c_void, u32, u32, *mut usize) -> u32;

static TARGET: [AtomicUsize; TARGETS] = [const { AtomicUsize::new(0) }; TARGETS];

/// A created queue: its address, agent and what it was when created (to tell it from a
/// later use of its memory).
struct Kept {
    queue: AtomicUsize,
    agent: AtomicU64,
    ring: AtomicU64,
    id: AtomicU64,
}

static KEPT: [Kept; QUEUES] = [const {
    Kept {
        queue: AtomicUsize::new(0),
        agent: AtomicU64::new(0),
        ring: AtomicU64::new(0),
        id: AtomicU64::new(0),
    }
}; QUEUES];
static KEPT_NEXT: AtomicUsize = AtomicUsize::new(0);

/// The wrapper of target `K`: the same call, then the queue kept.
unsafe extern "C" fn create_via<const K: usize>(
    agent: u64,
    size: u32,
    kind: u32,
    callback: usize,
    data: *mut c_void,
    private_segment: u32,
    group_segment: u32,
    out: *mut usize,
) -> u32 {
    let f = TARGET[K].load(Ordering::Acquire);
    // SAFETY: TARGET[K] was set, before this wrapper was handed out, to the hsa_queue_create
    // the caller would have reached, of this signature; it gets the caller's arguments.
    let f = unsafe { std::mem::transmute::<usize, Create>(f) };
    // SAFETY: as above.
    let rc = unsafe {
        f(
            agent,
            size,
            kind,
            callback,
            data,
            private_segment,
            group_segment,
            out,
        )
    };
    if rc == 0 && !out.is_null() {
        // SAFETY: on success the runtime wrote the queue's address to `out`, the caller's
        // out-pointer.
        let queue = unsafe { out.read() };
        let _ = std::panic::catch_unwind(|| keep(queue, agent));
    }
    rc
}

macro_rules! creators {
    ($($k:literal)*) => {
        [$( create_via::<$k> as Create ),*]
    };
}

static CREATORS: [Create; TARGETS] = creators!(0 1 2 3 4 5 6 7);

/// What a `hsa_queue_create` call that would reach `function` goes to: the wrapper that calls
/// `function` and keeps the queue, or `function` itself past [`TARGETS`] distinct ones.
pub(crate) fn creating(function: usize) -> usize {
    if function == 0 {
        return function;
    }
    for (t, c) in TARGET.iter().zip(CREATORS.iter()) {
        match t.compare_exchange(0, function, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return *c as usize,
            Err(f) if f == function => return *c as usize,
            Err(_) => {}
        }
    }
    function
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(w)
}

fn head_of(queue: usize) -> Option<[u8; dispatch::queue::HEAD_BYTES]> {
    let mut head = [0u8; dispatch::queue::HEAD_BYTES];
    crate::own_memory::read(queue, &mut head).then_some(head)
}

fn keep(queue: usize, agent: u64) {
    let Some(head) = head_of(queue) else {
        return;
    };
    let k = KEPT_NEXT.fetch_add(1, Ordering::AcqRel);
    let Some(slot) = KEPT.get(k) else {
        KEPT_NEXT.store(QUEUES, Ordering::Relaxed);
        return;
    };
    slot.agent.store(agent, Ordering::Relaxed);
    slot.ring.store(
        u64_at(&head, dispatch::queue::BASE_ADDRESS),
        Ordering::Relaxed,
    );
    slot.id
        .store(u64_at(&head, dispatch::queue::ID), Ordering::Relaxed);
    slot.queue.store(queue, Ordering::Release);
}

/// A kept queue as it is now: its agent and what it runs (the kernel not yet named).
pub(crate) struct Now {
    pub(crate) agent: u64,
    pub(crate) running: Running,
}

/// Each kept queue, read now: its indices and the packet at its read index. No lock, no
/// runtime call: safe on ROCr's event thread and in the watchdog.
pub(crate) fn running() -> Vec<Now> {
    let made = KEPT_NEXT.load(Ordering::Acquire).min(QUEUES);
    let mut out = Vec::new();
    for slot in &KEPT[..made] {
        let queue = slot.queue.load(Ordering::Acquire);
        if queue == 0 {
            continue;
        }
        let Some(head) = head_of(queue) else {
            continue;
        };
        let ring = u64_at(&head, dispatch::queue::BASE_ADDRESS);
        let id = u64_at(&head, dispatch::queue::ID);
        if ring != slot.ring.load(Ordering::Relaxed) || id != slot.id.load(Ordering::Relaxed) {
            continue; // destroyed, its memory used again
        }
        let size = u64::from(u32::from_le_bytes([
            head[dispatch::queue::SIZE],
            head[dispatch::queue::SIZE + 1],
            head[dispatch::queue::SIZE + 2],
            head[dispatch::queue::SIZE + 3],
        ]));
        let read = u64_at(&head, dispatch::queue::READ_DISPATCH_ID);
        let write = u64_at(&head, dispatch::queue::WRITE_DISPATCH_ID);
        let packet = (write > read && size.is_power_of_two())
            .then(|| {
                let at = ring.checked_add((read & (size - 1)).checked_mul(PACKET_BYTES as u64)?)?;
                let mut p = [0u8; PACKET_BYTES];
                crate::own_memory::read(usize::try_from(at).ok()?, &mut p)
                    .then(|| Packet::parse(&p))
            })
            .flatten();
        out.push(Now {
            agent: slot.agent.load(Ordering::Relaxed),
            running: Running {
                queue: id,
                read,
                write,
                packet,
                ..Running::default()
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    static QUEUE: std::sync::Mutex<Option<Box<[u64; 32]>>> = std::sync::Mutex::new(None);

    /// A stand-in `hsa_queue_create`: writes a queue (an amd_queue_t's head over a ring of
    /// four packets, the second a dispatch) to `out` and returns `size` as its status.
    unsafe extern "C" fn fake_create(
        agent: u64,
        size: u32,
        _: u32,
        _: usize,
        _: *mut c_void,
        _: u32,
        _: u32,
        out: *mut usize,
    ) -> u32 {
        let ring: &'static mut [u8; 256] = Box::leak(Box::new([0u8; 256]));
        ring[64] = 2; // the packet at index 1: a dispatch
        ring[64 + 32..64 + 40].copy_from_slice(&0xabc0u64.to_le_bytes());
        let mut q = Box::new([0u64; 32]);
        q[1] = ring.as_ptr() as u64; // base_address
        q[3] = 4; // size
        q[4] = agent; // id
        q[7] = 3; // write_dispatch_id
        q[16] = 1; // read_dispatch_id
        // SAFETY: the caller's out-pointer.
        unsafe { out.write(q.as_ptr() as usize) };
        *QUEUE.lock().unwrap() = Some(q);
        size
    }

    #[test]
    fn a_created_queue_is_kept_and_its_packet_read() {
        let w = creating(fake_create as *const () as usize);
        assert_ne!(w, fake_create as *const () as usize);
        assert_eq!(
            creating(fake_create as *const () as usize),
            w,
            "one wrapper per target"
        );
        // SAFETY: the wrapper has hsa_queue_create's signature.
        let w = unsafe { std::mem::transmute::<usize, Create>(w) };
        let mut out = 0usize;
        // A failed creation (status 5) keeps nothing and returns its status unchanged.
        // SAFETY: arguments as the stand-in reads them.
        let failed = unsafe { w(0x76, 5, 0, 0, std::ptr::null_mut(), 0, 0, &mut out) };
        assert_eq!(failed, 5);
        assert!(!running().iter().any(|n| n.running.queue == 0x76));
        // SAFETY: as above.
        let created = unsafe { w(0x77, 0, 0, 0, std::ptr::null_mut(), 0, 0, &mut out) };
        assert_eq!(created, 0);
        let q = out;
        let now = running();
        let mine = now.iter().find(|n| n.running.queue == 0x77).expect("kept");
        assert_eq!(mine.agent, 0x77);
        assert_eq!((mine.running.read, mine.running.write), (1, 3));
        match mine.running.packet {
            Some(Packet::Dispatch(d)) => assert_eq!(d.kernel_object, 0xabc0),
            p => panic!("{p:?}"),
        }
        // The queue's memory reused for something else: left out.
        // SAFETY: the stand-in's queue, still owned by QUEUE.
        unsafe { (q as *mut u64).add(1).write(0) };
        assert!(!running().iter().any(|n| n.running.queue == 0x77));
    }
}
