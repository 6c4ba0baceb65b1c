//! librmcp_shim.so: makes coherent (fine-grained) HIP allocations non-coherent on the GPUs
//! where that memory is served badly (RDNA1/RDNA2 by default), transparently, for any
//! program that loads the HIP runtime, through LD_PRELOAD.
//!
//! Where things are:
//! - `hooks`: the exported C functions (thin trampolines);
//! - `dlsym`: the interposed dlsym, for callers that look HIP up on a handle;
//! - `intercept`: what every hook does (decide, forward, fall back, count);
//! - `policy`: the rewrite rules, pure;
//! - `topology`: the KFD topology and which GPUs are affected;
//! - `config`: the RMCP_* environment;
//! - `state`: lazy initialisation, the HIP-ordinal-to-GPU map, exit report, fork;
//! - `registry`: the list of hooked names;
//! - `stats`, `log`, `caller`, `thread`: counters, logging, RMCP_EXEMPT, per-thread state.
//!
//! The library's constructor does nothing: no I/O, no dlopen, no HIP call. All work
//! happens on the first hooked call.

pub mod caller;
pub mod config;
pub mod dlsym;
pub mod hooks;
pub mod intercept;
pub mod log;
pub mod once;
pub mod policy;
pub mod registry;
pub mod state;
pub mod stats;
pub mod thread;
pub mod topology;
