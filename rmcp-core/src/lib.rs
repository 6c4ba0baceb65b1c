//! What the shim (`librmcp_shim.so`) and the `rmcp` CLI both need, as plain Rust: no
//! exported symbols, no FFI, no logging, no global state. Everything here is a function of
//! its inputs (a topology root is read from the file system, nothing else is).
//!
//! - [`gfx`]: GPU ISA names (`gfx1030`) as KFD encodes them;
//! - [`topology`]: the KFD topology reader;
//! - [`classify`]: which GPUs, and so which allocations, rmcp treats as affected;
//! - [`policy`]: the rewrite rules (given flags, device class and config, what is forwarded);
//! - [`registry`]: the hooked HIP functions, generated from `rmcp_sys::hooked_functions!`;
//! - [`remedy`]: HSA_OVERRIDE_GFX_VERSION, which override makes which card run another
//!   family's code, and the advice for a card, an override and a build;
//! - [`config`]: the RMCP_* variables, from one declarative table;
//! - [`quirks`]: the variables rmcp sets for the programs it starts to keep other
//!   software's known-wrong GPU code away (Triton's buffer ops on RDNA1);
//! - [`fault`]: what the shim says when the GPU faults (the facts and the words);
//! - [`dispatch`]: the dispatch each queue is running (an AQL packet, a queue's indices) and
//!   the stall block, in words;
//! - [`code_objects`]: which GPU targets a HIP library carries code for (ELF sections,
//!   offload bundles, target IDs), read from bytes a caller supplies;
//! - [`buffer_descriptors`]: buffer resource descriptors RDNA1 misreads (Triton's), found in
//!   a code object's machine code and fixed in a private copy.
//! - [`miopen`]: which of MIOpen's kernels a GPU is running (by library and name), its
//!   solver family, and MIOpen's own switches that avoid that family or its search.
//! - [`stats_file`]: the stats file (RMCP_STATS_FILE) read back by `rmcp report`: its size
//!   cap, the types of the fault fields, the caps on what is printed of them.

pub mod buffer_descriptors;
pub mod classify;
pub mod code_objects;
pub mod config;
pub mod dispatch;
pub mod fatbin;
pub mod fault;
pub mod gfx;
pub mod gfx10;
pub mod gfx101x;
pub mod miopen;
pub mod module_load;
pub mod policy;
pub mod quirks;
pub mod registry;
pub mod remedy;
pub mod stats_file;
pub mod topology;
