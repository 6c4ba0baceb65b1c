//! librmcp_shim_body.so: the shim. Makes coherent (fine-grained) HIP allocations
//! non-coherent on the GPUs where that memory is served badly (RDNA1/RDNA2 by default),
//! transparently, for any program that loads the HIP runtime.
//!
//! Two objects (docs/design.md): a process preloads librmcp_shim.so, the small C object
//! in `front/` (built by build.rs), which exports the hooked names and `dlsym` and maps
//! this library, from its own directory, on the process's first hooked call. A process
//! that never calls HIP pays for the front alone. This library exports one function,
//! `rmcp_shim_attach`, through which the front hands over what belongs to the preloaded
//! object and takes this library's entry points. What it decides comes from `rmcp-core`
//! (pure: configuration, classification, policy, the hook registry); what it is is here:
//! - `front`: what the front provides (its exports, RTLD_NEXT from its place, the
//!   generation of loaded objects, the per-thread block, descriptor 2 at start); it imports
//!   no module of this crate, so every module may read it;
//! - `attach`: `rmcp_shim_attach`, which hands the front this library's entries;
//! - `exports`: the entry trampolines, one per hooked function and eight per-copy ones per
//!   function, and the stats entry;
//! - `intercept`: what every hook does (decide, forward, fall back, count);
//! - `binding`: where each caller's calls go (the function it would have reached without
//!   the shim), and whether it is exempt (RMCP_EXEMPT);
//! - `copies`: the runtime copies calls reach, with each one's version and devices;
//! - `handout`: what a lookup hands out in place of a runtime's function (the front's
//!   export or a copy's own entry), and where a call no calling object places goes;
//! - `dlsym`: the lookup of hooked names, for callers that look HIP up on a handle;
//! - `state`: the shared lazy stages (configuration, device picture);
//! - `devices`: a runtime's answers about its devices, over FFI;
//! - `stats`: the per-hook counters; `report`: the banner and the exit report;
//! - `cancel`: cancellation kept off the shim's own work (pthread_cancel);
//! - `alloc`: the shim's heap, with an emergency arena when malloc fails;
//! - `observed`: the entries of the observed functions (launches, `__hipRegisterFunction`,
//!   `hsa_queue_create`), which record one fact and go on untouched;
//! - `launches`: the launch ring and the kernels' names; `allocations`: the record of the
//!   allocations hooked calls made; `queues`: the wrapped error callbacks of HSA queues;
//! - `fault`: the GPU fault handler and the block it writes;
//! - `log`: the shim's own log writer; `thread`: per-thread state; `once`: a fork-safe
//!   once-cell.
//!
//! Nothing here runs at load: no constructor, no file opened, no HIP call. All work
//! happens on the first hooked call, which is also when the front maps this library.
//!
//! The crate is also built as an rlib, only because cargo builds a library's cdylib for
//! integration tests and dependents when it has an rlib as well; the rlib exposes nothing.

mod alloc;
mod allocations;
mod attach;
mod binding;
mod cancel;
mod copies;
mod devices;
mod dlsym;
mod exports;
mod fault;
mod front;
mod handout;
mod intercept;
mod launches;
mod log;
mod observed;
mod once;
mod queues;
mod report;
mod state;
mod stats;
mod thread;
