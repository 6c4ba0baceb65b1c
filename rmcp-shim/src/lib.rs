//! librmcp_shim.so: makes coherent (fine-grained) HIP allocations non-coherent on the GPUs
//! where that memory is served badly (RDNA1/RDNA2 by default), transparently, for any
//! program that loads the HIP runtime, through LD_PRELOAD.
//!
//! This crate is the library and nothing else: every module is private, and the only
//! symbols it exports are those in `exports`: the trampolines (build.rs has the linker
//! define them, from the same table) and `rmcp_shim_stats`. What it decides comes from `rmcp-core`
//! (pure: configuration, classification, policy, the hook registry); what it is is here:
//! - `exports`: the exported trampolines, one per hooked function, and `dlsym`;
//! - `intercept`: what every hook does (decide, forward, fall back, count);
//! - `binding`: where each caller's calls go (the function it would have reached without
//!   the shim), and whether it is exempt (RMCP_EXEMPT);
//! - `copies`: the runtime copies calls reach, with each one's version and devices;
//! - `dlsym`: the interposed lookup, for callers that look HIP up on a handle;
//! - `state`: the shared lazy stages (configuration, device picture);
//! - `devices`: a runtime's answers about its devices, over FFI;
//! - `stats`: the per-hook counters; `report`: the banner and the exit report;
//! - `alloc`: the shim's heap, with an emergency arena when malloc fails;
//! - `log`: the shim's own log writer; `thread`: per-thread state; `once`: a fork-safe
//!   once-cell.
//!
//! The library's constructor does one thing: an fstat(2) of descriptor 2, so that the log
//! later writes to stderr only while it is still the process's stderr (`log`). No file is
//! opened, no dlopen, no HIP call. All other work happens on the first hooked call.
//!
//! The crate is also built as an rlib, only because cargo builds a library's cdylib for
//! integration tests and dependents when it has an rlib as well; the rlib exposes nothing.

mod alloc;
mod binding;
mod copies;
mod devices;
mod dlsym;
mod exports;
mod intercept;
mod log;
mod once;
mod report;
mod state;
mod stats;
mod thread;
