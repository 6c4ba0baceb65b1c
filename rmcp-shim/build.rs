//! Writes the linker version script of librmcp_shim.so: the hooked names of
//! `rmcp_core::registry` (generated from `rmcp_sys::hooked_functions!`) and `dlsym`, the
//! same table the trampolines in `src/exports.rs` are generated from. rustc's own script
//! exports only `#[no_mangle]` Rust items and hides the rest; the trampolines are written in
//! `global_asm!`, so this script is what keeps them visible. GNU ld merges the two scripts.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut script = String::from("{\n  global:\n");
    for name in rmcp_core::registry::exported_names() {
        script.push_str(&format!("    {name};\n"));
    }
    script.push_str("};\n");
    let path = out.join("exports.map");
    std::fs::write(&path, script).expect("writing the version script into OUT_DIR");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        path.display()
    );
    println!("cargo:rerun-if-changed=build.rs");
}
