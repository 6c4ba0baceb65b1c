//! Test support for the rmcp workspace (not published): the C test programs its build
//! script compiles (fake HIP runtimes, probes, C clients, the bench client), where the
//! shim, the CLI and the fixtures are, and the helpers that run a program under the fake
//! runtime and read back what the runtime received.
//!
//! The shim's integration tests, the CLI's and the examples use it as a dev-dependency,
//! usually as `use rmcp_testkit::*;`.

#![warn(missing_docs)]

pub mod artifacts;
pub mod bounded;
pub mod compat_root;
pub mod doctor_text;
pub mod fault_text;
pub mod host;
pub mod locate;
pub mod record;
pub mod run;
pub mod skip;
pub mod stress_model;

pub use artifacts::*;
pub use bounded::{Measured, measured_within, output_within};
pub use compat_root::{RootDir, compat_cache, compat_root, triton_root};
pub use doctor_text::{
    check_doctor_layout, code_objects_row, printed_commands_in, remedy_commands,
};
pub use fault_text::{
    assert_same_ending, assert_same_ending_seen, fault_block_span, masked, runtime_part,
    without_memory_map,
};
pub use host::*;
pub use locate::*;
pub use record::*;
pub use run::{Out, Run};
pub use skip::{missing, prerequisites_required, skip};

/// Re-exported for tests whose package does not depend on it: scratch directories.
pub use tempfile;

/// Re-exported for tests whose package does not depend on it: stats reports are JSON.
pub use serde_json;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_artifact_was_built() {
        let mut paths = vec![
            dlopen_client(),
            hotpath_client(),
            dlsym_client(),
            stress_client(),
            fork_client(),
            bench_client(),
            nomem_client(),
            fd_client(),
            miopen_conv(),
        ];
        for major in [5, 6, 7] {
            paths.push(fake_dir(major).join(format!("libamdhip64.so.{major}")));
            paths.push(fake_dir(major).join("libamdhip64.so"));
        }
        for major in [5, 6] {
            paths.extend([probe(major), framework(major), scope_lib(major)]);
        }
        for p in paths {
            assert!(p.is_file(), "{} was not built", p.display());
        }
    }

    #[test]
    fn repo_is_the_workspace_root() {
        let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"), "{manifest}");
        assert!(fixture("rdna1").is_dir());
    }
}
