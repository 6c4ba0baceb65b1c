//! Has the linker define each export of librmcp_shim.so as its trampoline: the hooked names
//! of `rmcp_core::registry` (generated from `rmcp_sys::hooked_functions!`) and `dlsym`, the
//! same table the trampolines in `src/exports.rs` are generated from. The trampolines are
//! written in `global_asm!` under the label `rmcp_export_NAME`; rustc's linker version
//! script exports only `#[no_mangle]` Rust items, so `NAME` is a placeholder function there
//! (which puts it in that script), and `--defsym NAME=rmcp_export_NAME` replaces it. GNU ld
//! takes no second version script beside rustc's, so the names cannot be listed in one.

fn main() {
    for name in rmcp_core::registry::exported_names() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--defsym={name}=rmcp_export_{name}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
