//! The dispatch each queue is running: what an AQL queue says about the work the GPU is on,
//! in words. An AQL queue is a ring of 64-byte packets; the packet processor takes them in
//! order and moves the queue's read index past a packet only when it is done, so the packet
//! at the read index (while the read index is below the write index) is the one the GPU is
//! running or waiting on, and a kernel dispatch packet names its kernel object (the address
//! of the kernel's descriptor in the loaded code object). Pure: the shim reads the indices
//! and the packet ([`Packet::parse`] takes its 64 bytes) and maps the kernel object to a
//! name; this module turns that into the lines of a fault block, a hardware exception's
//! block and the stall block ([`running_lines`], [`stall_lines`]).
//!
//! Layouts: `hsa_kernel_dispatch_packet_t` (hsa.h: header, setup, the workgroup size, grid
//! size, segment sizes, kernel object at 32, kernarg address at 40, completion signal at
//! 56), the packet types of `hsa_packet_type_t`, and `amd_queue_t` (amd_hsa_queue.h:
//! `write_dispatch_id` at 56 and `read_dispatch_id` at 128 of the public `hsa_queue_t`, whose
//! ring is `base_address` at 8 with `size` packets at 24).

use std::fmt::Write as _;

/// Bytes in an AQL packet.
pub const PACKET_BYTES: usize = 64;

/// Offsets in `amd_queue_t`, from the `hsa_queue_t *` ROCr hands out (its first member).
pub mod queue {
    /// `hsa_queue_t.base_address`: the ring.
    pub const BASE_ADDRESS: usize = 8;
    /// `hsa_queue_t.size`: packets in the ring (a power of two).
    pub const SIZE: usize = 24;
    /// `hsa_queue_t.id`.
    pub const ID: usize = 32;
    /// `amd_queue_t.write_dispatch_id`.
    pub const WRITE_DISPATCH_ID: usize = 56;
    /// `amd_queue_t.read_dispatch_id`.
    pub const READ_DISPATCH_ID: usize = 128;
    /// Bytes read from the queue's start to have all of the above.
    pub const HEAD_BYTES: usize = 136;
}

/// A kernel dispatch packet's facts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dispatch {
    pub workgroup: [u16; 3],
    pub grid: [u32; 3],
    pub private_segment: u32,
    pub group_segment: u32,
    pub kernel_object: u64,
    pub kernarg: u64,
}

/// The packet at a queue's read index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// `HSA_PACKET_TYPE_KERNEL_DISPATCH` (2).
    Dispatch(Dispatch),
    /// `HSA_PACKET_TYPE_BARRIER_AND` (3) or `_OR` (5): the queue waits for signals.
    Barrier { and: bool },
    /// `HSA_PACKET_TYPE_INVALID` (1): the slot is free (already consumed or not yet
    /// published).
    Invalid,
    /// Any other type (vendor-specific 0, agent dispatch 4).
    Other(u8),
}

impl Packet {
    /// The packet in its 64 bytes.
    pub fn parse(p: &[u8; PACKET_BYTES]) -> Packet {
        let u16_at = |o: usize| u16::from_le_bytes([p[o], p[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
        let u64_at = |o: usize| u64::from(u32_at(o)) | (u64::from(u32_at(o + 4)) << 32);
        match p[0] {
            2 => Packet::Dispatch(Dispatch {
                workgroup: [u16_at(4), u16_at(6), u16_at(8)],
                grid: [u32_at(12), u32_at(16), u32_at(20)],
                private_segment: u32_at(24),
                group_segment: u32_at(28),
                kernel_object: u64_at(32),
                kernarg: u64_at(40),
            }),
            3 => Packet::Barrier { and: true },
            5 => Packet::Barrier { and: false },
            1 => Packet::Invalid,
            t => Packet::Other(t),
        }
    }
}

/// What one queue was doing when rmcp looked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Running {
    /// The queue's `hsa_queue_t.id`.
    pub queue: u64,
    /// The KFD node of the queue's GPU, when known.
    pub node: Option<u32>,
    /// Packets the GPU has finished (the read index) and the runtime has published (the
    /// write index).
    pub read: u64,
    pub write: u64,
    /// The packet at the read index (None: idle, or it could not be read).
    pub packet: Option<Packet>,
    /// For a dispatch: its kernel's name and where the kernel came from (a library, a
    /// module), when the kernel object was seen loaded.
    pub name: Option<String>,
    pub from: Option<String>,
    /// The watchdog's observation: seconds since it first saw this packet at the read index
    /// (None outside the stall block).
    pub seen_for: Option<u64>,
    /// Lines about the kernel said under it (MIOpen's switches: [`crate::miopen::advice`]).
    pub advice: Vec<String>,
}

impl Running {
    /// Whether the queue has work it has not finished.
    pub fn busy(&self) -> bool {
        self.write > self.read
    }
}

fn dims<T: std::fmt::Display>(d: &[T; 3]) -> String {
    format!("{}x{}x{}", d[0], d[1], d[2])
}

/// One queue in words (the line under a block's "running" heading), and its packet.
pub fn describe(r: &Running) -> String {
    let mut s = format!("    queue {}", r.queue);
    if let Some(n) = r.node {
        let _ = write!(s, " (GPU node-{n})");
    }
    let _ = write!(s, ", packet {} of {}: ", r.read, r.write);
    match r.packet {
        Some(Packet::Dispatch(d)) => {
            let _ = write!(
                s,
                "{} from {}, grid {}, workgroup {}, kernel object {:#x}, kernargs at {:#x}",
                r.name.as_deref().unwrap_or("(kernel not seen loaded)"),
                r.from.as_deref().unwrap_or("an unknown code object"),
                dims(&d.grid),
                dims(&d.workgroup),
                d.kernel_object,
                d.kernarg
            );
        }
        Some(Packet::Barrier { and }) => {
            let _ = write!(
                s,
                "a barrier ({}): the queue waits for other work to signal",
                if and {
                    "all of its signals"
                } else {
                    "any of its signals"
                }
            );
        }
        Some(Packet::Invalid) => s.push_str("a free slot (the packet was not yet published)"),
        Some(Packet::Other(t)) => {
            let _ = write!(s, "a packet of type {t}");
        }
        None => s.push_str("its packet could not be read"),
    }
    if let Some(secs) = r.seen_for {
        let _ = write!(s, "; seen there for {secs} s");
    }
    s
}

/// The lines a fault block (or a hardware exception's) gives the queues: those with work
/// not finished, each with the packet it is on. `when`: "when it faulted", "when the GPU was
/// reset". Empty when rmcp saw no queue created (it then says so).
pub fn running_lines(queues: &[Running], when: &str) -> Vec<String> {
    let busy: Vec<&Running> = queues.iter().filter(|r| r.busy()).collect();
    if queues.is_empty() {
        return vec![format!(
            "  running {when}: unknown (rmcp saw no queue created in this process)"
        )];
    }
    if busy.is_empty() {
        return vec![format!(
            "  running {when}: no queue had unfinished work ({} queue{} seen)",
            queues.len(),
            if queues.len() == 1 { "" } else { "s" }
        )];
    }
    let mut out = vec![format!(
        "  running {when} (each busy queue's packet at its read index: the one the GPU was on):"
    )];
    for r in busy {
        out.push(describe(r));
        out.extend(r.advice.iter().map(|a| format!("    {a}")));
    }
    out
}

/// A thread waiting in a synchronizing call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// Its `pthread_t`.
    pub thread: u64,
    /// The call it waits in.
    pub call: &'static str,
    /// Seconds the watchdog has seen it waiting in this call.
    pub waited: u64,
}

/// The stall block: a synchronizing call has waited past the threshold. `ended`: the
/// block said when the same wait ends (after `waited` seconds in all). Never a verdict: a
/// long kernel is still running.
pub fn stall_lines(
    threshold: u64,
    waiters: &[Waiter],
    queues: &[Running],
    ended: bool,
) -> Vec<String> {
    let longest = waiters.iter().map(|w| w.waited).max().unwrap_or(0);
    if ended {
        return vec![format!(
            "GPU wait ended: the synchronizing call rmcp reported returned after about {longest} s"
        )];
    }
    let mut out = vec![format!(
        "GPU wait: a synchronizing call has waited about {longest} s (past RMCP_HANG_AFTER={threshold}); \
         the GPU is still running or is hung, rmcp cannot tell which. What rmcp sees (nothing is \
         stopped):"
    )];
    for w in waiters {
        out.push(format!(
            "  thread {:#x} waits in {} (seen for {} s)",
            w.thread, w.call, w.waited
        ));
    }
    out.extend(running_lines(queues, "now"));
    out.push(
        "  next: if this never ends, the kernel above is the one to report; RMCP_HANG_AFTER=off \
         silences this"
            .into(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(kind: u8) -> [u8; PACKET_BYTES] {
        let mut p = [0u8; PACKET_BYTES];
        p[0] = kind;
        p[4..6].copy_from_slice(&64u16.to_le_bytes());
        p[6..8].copy_from_slice(&1u16.to_le_bytes());
        p[8..10].copy_from_slice(&1u16.to_le_bytes());
        p[12..16].copy_from_slice(&4096u32.to_le_bytes());
        p[16..20].copy_from_slice(&2u32.to_le_bytes());
        p[20..24].copy_from_slice(&1u32.to_le_bytes());
        p[28..32].copy_from_slice(&512u32.to_le_bytes());
        p[32..40].copy_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
        p[40..48].copy_from_slice(&0x7f00_0000_2000u64.to_le_bytes());
        p
    }

    #[test]
    fn packets_by_type() {
        let table: [(u8, Packet); 5] = [
            (
                2,
                Packet::Dispatch(Dispatch {
                    workgroup: [64, 1, 1],
                    grid: [4096, 2, 1],
                    private_segment: 0,
                    group_segment: 512,
                    kernel_object: 0x7f00_0000_1000,
                    kernarg: 0x7f00_0000_2000,
                }),
            ),
            (3, Packet::Barrier { and: true }),
            (5, Packet::Barrier { and: false }),
            (1, Packet::Invalid),
            (0, Packet::Other(0)),
        ];
        for (kind, want) in table {
            assert_eq!(Packet::parse(&packet(kind)), want, "type {kind}");
        }
    }

    fn running(read: u64, write: u64, kind: u8) -> Running {
        Running {
            queue: 1,
            node: Some(1),
            read,
            write,
            packet: Some(Packet::parse(&packet(kind))),
            name: Some("_Z4spinPi".into()),
            from: Some("libfoo.so".into()),
            seen_for: None,
            advice: Vec::new(),
        }
    }

    #[test]
    fn only_busy_queues_are_listed_with_their_kernel() {
        let lines = running_lines(&[running(3, 3, 1), running(5, 7, 2)], "when it faulted");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("  running when it faulted ("),
            "{lines:?}"
        );
        assert_eq!(
            lines[1],
            "    queue 1 (GPU node-1), packet 5 of 7: _Z4spinPi from libfoo.so, grid 4096x2x1, \
             workgroup 64x1x1, kernel object 0x7f0000001000, kernargs at 0x7f0000002000"
        );
        let idle = running_lines(&[running(3, 3, 1)], "when it faulted");
        assert_eq!(
            idle,
            ["  running when it faulted: no queue had unfinished work (1 queue seen)"]
        );
        assert_eq!(
            running_lines(&[], "now"),
            ["  running now: unknown (rmcp saw no queue created in this process)"]
        );
    }

    #[test]
    fn advice_goes_under_its_queue() {
        let mut r = running(5, 7, 2);
        r.advice = vec!["MIOpen's kernel".into(), "  MIOPEN_FIND_MODE=FAST".into()];
        let lines = running_lines(&[r], "when it faulted");
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[2], "    MIOpen's kernel");
        assert_eq!(lines[3], "      MIOPEN_FIND_MODE=FAST");
    }

    #[test]
    fn a_kernel_not_seen_loaded_and_a_barrier_say_so() {
        let mut r = running(0, 1, 2);
        r.name = None;
        r.from = None;
        assert!(describe(&r).contains("(kernel not seen loaded) from an unknown code object"));
        let b = running(0, 1, 3);
        assert!(
            describe(&b).ends_with(
                "a barrier (all of its signals): the queue waits for other work to signal"
            )
        );
        let mut unread = running(0, 1, 2);
        unread.packet = None;
        assert!(describe(&unread).ends_with("its packet could not be read"));
    }

    #[test]
    fn the_stall_block_names_the_waiters_and_the_queues_and_says_no_verdict() {
        let mut r = running(5, 7, 2);
        r.seen_for = Some(31);
        let w = [Waiter {
            thread: 0x1234,
            call: "hipDeviceSynchronize",
            waited: 31,
        }];
        let lines = stall_lines(30, &w, &[r], false);
        let text = lines.join("\n");
        assert!(
            lines[0].starts_with(
                "GPU wait: a synchronizing call has waited about 31 s (past RMCP_HANG_AFTER=30)"
            ),
            "{text}"
        );
        assert!(text.contains("cannot tell which"), "{text}");
        assert!(text.contains("  thread 0x1234 waits in hipDeviceSynchronize (seen for 31 s)"));
        assert!(text.contains("_Z4spinPi from libfoo.so"), "{text}");
        assert!(text.contains("; seen there for 31 s"), "{text}");
        let end = stall_lines(30, &w, &[], true);
        assert_eq!(
            end,
            ["GPU wait ended: the synchronizing call rmcp reported returned after about 31 s"]
        );
    }
}
