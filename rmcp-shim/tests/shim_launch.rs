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

/// `hsa_queue_create` is exported by the front (to wrap HIP's queues' error callbacks), but
/// a process that uses ROCr without HIP loads nothing for it: its calls and its lookups go
/// where they went, and the body is never mapped.
#[test]
fn an_hsa_program_without_hip_loads_nothing_for_hsa_queue_create() {
    if real_runtime().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hsa_only.c");
    std::fs::write(
        &src,
        r#"#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <hsa/hsa.h>
int main(void) {
    hsa_agent_t agent = {0};
    hsa_queue_t *q = NULL;
    /* No hsa_init: the runtime answers HSA_STATUS_ERROR_NOT_INITIALIZED. */
    hsa_status_t rc = hsa_queue_create(agent, 64, HSA_QUEUE_TYPE_MULTI, NULL, NULL, 0, 0, &q);
    void *found = dlsym(RTLD_DEFAULT, "hsa_queue_create");
    int same = found == (void *)&hsa_queue_create;
    char line[512];
    int body = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof line, maps))
        body |= strstr(line, "librmcp_shim_body") != NULL;
    printf("rc=%#x found=%d same=%d body=%d\n", rc, found != NULL, same, body);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("hsa_only");
    let out = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(["-lhsa-runtime64", "-ldl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cc: {out:?}");
    let go = |preload: bool| {
        let mut cmd = Command::new(&exe);
        cmd.env_remove("LD_PRELOAD").env_remove("RMCP_LOG");
        if preload {
            cmd.env("LD_PRELOAD", shim());
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let without = go(false);
    assert_eq!(
        without.0, "rc=0x100b found=1 same=1 body=0\n",
        "{without:?}"
    );
    assert_eq!(go(true), without);
}

/// A launch function looked up with `dlsym` on an RTLD_LOCAL handle, or through that
/// runtime's `hipGetProcAddress` (issue 35): the caller gets the shim's per-copy entry for
/// that runtime copy (so the launch is recorded), and a call through it reaches the
/// runtime's function with every argument unchanged.
#[test]
fn a_launch_through_a_local_handles_pointer_reaches_the_runtime_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("local_launch");
    let out = Command::new("cc")
        .arg(repo().join("tests/c/local_launch.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .expect("run cc");
    assert!(out.status.success(), "{out:?}");
    let run = |preload: bool, how: &str| {
        let mut cmd = Command::new(&exe);
        cmd.arg(fake_dir(6).join("libamdhip64.so.6"))
            .arg(how)
            .env("RMCP_SYSFS_ROOT", fixture("rdna1"))
            .env("FAKEHIP_DEVICES", "0000:03:00.0")
            .env_remove("LD_PRELOAD")
            .env_remove("RMCP_LOG");
        if preload {
            cmd.env("LD_PRELOAD", shim());
        }
        let out = cmd.output().expect("run local_launch");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for how in ["dlsym", "proc"] {
        let without = run(false, how);
        let with = run(true, how);
        let rc = |s: &str| s.lines().next().unwrap_or_default().to_string();
        assert!(without.contains("in=libamdhip64.so.6"), "{how}: {without}");
        assert_ne!(rc(&without), "rc=0", "the digest of non-zero arguments");
        assert_eq!(rc(&with), rc(&without), "{how}: {with}");
        assert!(
            with.contains("in=librmcp_shim_body.so"),
            "{how}: the shim's per-copy entry: {with}"
        );
    }
}
