//! The rmcp binary links no part of the shim: it exports no HIP hook and no dlsym (before
//! the layout issue it linked the shim's rlib and exported all of them).

use rmcp_testkit as kit;

#[test]
fn the_cli_exports_no_hook_and_no_dlsym() {
    let rmcp = kit::exported_functions(std::path::Path::new(env!("CARGO_BIN_EXE_rmcp")));
    let leaked: Vec<_> = rmcp
        .iter()
        .filter(|n| n.starts_with("hip") || *n == "dlsym")
        .collect();
    assert!(leaked.is_empty(), "the rmcp binary exports {leaked:?}");
    // The same check finds them in the shim.
    let shim = kit::exported_functions(&kit::shim());
    assert!(shim.contains("dlsym") && shim.contains("hipHostMalloc"));
}
