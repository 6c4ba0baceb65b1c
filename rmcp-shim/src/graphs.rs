//! Graphs: which kernels the process put into HIP graphs, for the fault report. A graph's
//! kernels run at `hipGraphLaunch` without a launch call of their own, so the launch ring
//! (`launches`) holds the graph launch, not its kernels. Those were seen earlier, in one of
//! two ways, and this module keeps them:
//! - launched on a stream while it was being captured (`hipStreamBeginCapture` to
//!   `hipStreamEndCapture`): the launch went into a graph instead of to the GPU (the ring
//!   records it too, as a launch);
//! - given in a `hipKernelNodeParams` to `hipGraphAddKernelNode`,
//!   `hipGraphKernelNodeSetParams` or `hipGraphExecKernelNodeSetParams` (its `func`, a host
//!   stub).
//!
//! It owns two fixed lock-free tables:
//! - the streams being captured ([`STREAMS`] of them; past that a capture is not seen): a
//!   launch made while any is open is taken for a captured one. Which stream a launch went
//!   to is not read (its place among the arguments differs per launch function), so a launch
//!   on another stream meanwhile is listed too, and a capture the runtime refused stays open
//!   here until `hipStreamEndCapture` on that stream;
//! - the kernels put into graphs ([`KERNELS`] distinct ones, each with the call that first
//!   showed it; past that, counted). Which graph holds which kernel is not recorded: the
//!   graph and executable-graph handles are written by the runtime after the call, which an
//!   observed entry does not see. `hipGraphAddNode` and a graph cloned or loaded otherwise
//!   are not seen.
//!
//! Cost: a launch pays one load of a line written only when a capture begins or ends; a
//! captured launch or a kernel node, a probe of the kernel table.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use rmcp_core::registry::Observed;

use crate::launches::{self, Kernel};

/// Streams whose captures are followed at once.
pub(crate) const STREAMS: usize = 64;
/// Distinct kernels kept.
pub(crate) const KERNELS: usize = 256;

/// A capturing stream's handle + 1 (the null stream is 0); 0: free.
static CAPTURING: [AtomicUsize; STREAMS] = [const { AtomicUsize::new(0) }; STREAMS];
/// How many of `CAPTURING` are taken.
static OPEN: AtomicU32 = AtomicU32::new(0);

/// A kernel: its value with [`FUNCTION`] set for a `hipFunction_t`; 0: free.
static KEYS: [AtomicUsize; KERNELS] = [const { AtomicUsize::new(0) }; KERNELS];
/// The `Observed` index of the call that first showed it, + 1 (0: not yet written).
static HOW: [AtomicU8; KERNELS] = [const { AtomicU8::new(0) }; KERNELS];
/// Kernels not kept, the table being full.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Marks a `hipFunction_t` (user-space addresses have 47 bits).
const FUNCTION: usize = 1 << 62;

/// `hipStreamBeginCapture(stream, ...)` is being called.
pub(crate) fn begin_capture(stream: usize) {
    let key = stream.wrapping_add(1);
    if CAPTURING.iter().any(|s| s.load(Ordering::Acquire) == key) {
        return;
    }
    for s in &CAPTURING {
        if s.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            OPEN.fetch_add(1, Ordering::Release);
            return;
        }
    }
}

/// `hipStreamEndCapture(stream, ...)` is being called.
pub(crate) fn end_capture(stream: usize) {
    let key = stream.wrapping_add(1);
    for s in &CAPTURING {
        if s.compare_exchange(key, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            OPEN.fetch_sub(1, Ordering::Release);
            return;
        }
    }
}

/// Whether a stream capture is open (the launch path's one load).
#[inline(always)]
pub(crate) fn capturing() -> bool {
    OPEN.load(Ordering::Relaxed) != 0
}

/// A launch made while a capture was open.
#[cold]
pub(crate) fn captured(kernel: Kernel) {
    keep(kernel, Observed::HipStreamBeginCapture);
}

/// A `hipKernelNodeParams *` given to `via`: its `func` (offset 24: after `dim3 blockDim`,
/// padded to 16, and `void **extra`; the same in the 5.2 and 6.4 hip_runtime_api.h and in
/// the 6.x one Triton bundles) is a host stub. A null pointer or func is passed over.
#[cold]
pub(crate) fn node_params(via: Observed, params: usize) {
    if params == 0 {
        return;
    }
    // SAFETY: the caller's `const hipKernelNodeParams *`, which the runtime reads in full
    // right after this; `func` is a pointer-aligned field at offset 24.
    let func = unsafe { (params as *const u8).add(24).cast::<usize>().read() };
    if func != 0 {
        keep(Kernel::Stub(func), via);
    }
}

fn keep(kernel: Kernel, via: Observed) {
    let key = match kernel {
        Kernel::Stub(s) => s & !FUNCTION,
        Kernel::Function(f) => f | FUNCTION,
        Kernel::Graph(_) => return,
    };
    if key == 0 {
        return;
    }
    let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % KERNELS;
    for i in 0..KERNELS {
        let k = (start + i) % KERNELS;
        let cell = &KEYS[k];
        let held = cell.load(Ordering::Acquire);
        if held == key {
            return;
        }
        if held == 0 {
            match cell.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    HOW[k].store(via.index() as u8 + 1, Ordering::Release);
                    return;
                }
                Err(now) if now == key => return,
                Err(_) => {}
            }
        }
    }
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// The kernels put into graphs, described (at fault time only: it asks the loader), with
/// the call that showed each: `via` is `hipStreamBeginCapture` for a captured launch.
pub(crate) fn kernels() -> (Vec<rmcp_core::fault::Kernel>, u64) {
    let mut out = Vec::new();
    for (k, cell) in KEYS.iter().enumerate() {
        let key = cell.load(Ordering::Acquire);
        let how = HOW[k].load(Ordering::Acquire);
        let Some(&(via, _)) = how
            .checked_sub(1)
            .and_then(|h| rmcp_core::registry::OBSERVED.get(usize::from(h)))
        else {
            continue;
        };
        if key == 0 {
            continue;
        }
        let kernel = if key & FUNCTION != 0 {
            Kernel::Function(key & !FUNCTION)
        } else {
            Kernel::Stub(key)
        };
        out.push(launches::describe(&launches::Launch {
            kernel,
            caller: 0,
            thread: 0,
            via,
        }));
    }
    (out, DROPPED.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the tables are the process's.
    #[test]
    fn captures_and_kernel_nodes_are_kept_once() {
        assert!(!capturing());
        end_capture(0x1234);
        assert!(!capturing(), "an end without a begin changes nothing");
        begin_capture(0);
        begin_capture(0);
        assert!(capturing());
        begin_capture(0x5000);
        end_capture(0);
        assert!(capturing(), "another stream is still captured");
        end_capture(0x5000);
        assert!(!capturing());

        captured(Kernel::Stub(0x4000));
        captured(Kernel::Stub(0x4000));
        captured(Kernel::Function(0x4000));
        captured(Kernel::Graph(0x9000));
        let params = [0usize, 0, 0, 0x7000, 0, 0, 0, 0];
        node_params(Observed::HipGraphAddKernelNode, params.as_ptr() as usize);
        node_params(Observed::HipGraphAddKernelNode, 0);
        let (k, dropped) = kernels();
        assert_eq!(k.len(), 3, "{k:?}");
        assert_eq!(dropped, 0);
        assert_eq!(
            k.iter()
                .filter(|k| k.via == "hipStreamBeginCapture")
                .count(),
            2
        );
        assert_eq!(
            k.iter()
                .filter(|k| k.via == "hipGraphAddKernelNode")
                .count(),
            1
        );
    }
}
