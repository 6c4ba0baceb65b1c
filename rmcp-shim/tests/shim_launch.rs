//! The observed launch entry (issue 28): a launch through the shim reaches the runtime with
//! every argument as the caller passed it, the two dim3 structs in registers and sharedMem
//! and stream on the stack, and its return value back. The fake runtime's hipLaunchKernel
//! returns a digest of what it received (tests/fake-hip/fake_hip.c), and the bench client's
//! `launch` mode passes distinct values in each argument (benches/bench_client.c).

use std::process::Command;

use rmcp_testkit::*;

fn launch(preload: bool, mode: &str) -> String {
    let mut cmd = Command::new(bench_client());
    cmd.arg("launch")
        .env("LD_LIBRARY_PATH", fake_dir(6))
        .env("RMCP_SYSFS_ROOT", fixture("rdna1"))
        .env("FAKEHIP_DEVICES", "0000:03:00.0")
        .env("RMCP_MODE", mode)
        .env_remove("LD_PRELOAD")
        .env_remove("RMCP_LOG");
    if preload {
        cmd.env("LD_PRELOAD", shim());
    }
    let out = cmd.output().expect("run the bench client");
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_launch_reaches_the_runtime_with_every_argument_unchanged() {
    let without = launch(false, "auto");
    assert!(without.starts_with("rc="), "{without}");
    assert_ne!(without.trim(), "rc=0", "the digest of non-zero arguments");
    for mode in ["auto", "off", "force"] {
        assert_eq!(launch(true, mode), without, "RMCP_MODE={mode}");
    }
}
