//! The parsers under fuzzing, compiled from the shim's own source files.
//!
//! Linking the `rmcp-shim` crate itself into a fuzz executable would also link its
//! `#[no_mangle]` hooks, among them `dlsym`: inside the executable that definition takes
//! over every `dlsym` call, AddressSanitizer's own early ones included, which then run
//! instrumented code before libFuzzer is set up and crash. The parsers need none of that,
//! so the two modules are compiled here from the same files.

#[path = "../../rmcp-shim/src/config.rs"]
pub mod config;
#[path = "../../rmcp-shim/src/topology.rs"]
pub mod topology;
