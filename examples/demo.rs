//! What the HIP runtime receives, without and with librmcp_shim.so, on the bundled fake
//! runtime and the RDNA1 (gfx1010) KFD fixture: no GPU needed.
//!
//!     cargo run --release --example demo
//!
//! The fake runtime (tests/fake-hip/) records the flags each call arrives with; the probe
//! (examples/hip_probe.c) makes the calls PyTorch, MIOpen and rocBLAS make.

use std::path::Path;
use std::process::Command;

use rmcp_testkit::{fake_dir, fixture, probe, shim};

const CALLS: &[(&str, &str)] = &[
    (
        "hipHostMalloc:4096:0",
        "pinned host memory (PyTorch, MIOpen, rocBLAS)",
    ),
    ("hipHostMalloc:4096:0x2", "mapped host memory"),
    ("hipMemAllocHost:4096", "deprecated host allocation"),
    ("hipExtMallocWithFlags:4096:1", "fine-grained VRAM"),
    ("hipMalloc:4096", "plain VRAM"),
];

/// Runs the probe; returns the runtime's record, one "function flags" per call.
fn run(preload: Option<&Path>, record: &Path) -> (Vec<String>, String) {
    let _ = std::fs::remove_file(record);
    let mut cmd = Command::new(probe(6));
    cmd.args(CALLS.iter().map(|c| c.0))
        .env("LD_LIBRARY_PATH", fake_dir(6))
        .env("FAKEHIP_RECORD", record)
        .env("RMCP_SYSFS_ROOT", fixture("rdna1"))
        .env("RMCP_LOG", "info")
        .env("RMCP_STATS", "1");
    if let Some(p) = preload {
        cmd.env("LD_PRELOAD", p);
    }
    let out = cmd.output().expect("run the probe");
    assert!(out.status.success(), "probe failed: {out:?}");
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let received = text
        .lines()
        .filter(|l| l.contains("caller=hip_probe6") || l.contains("caller=librmcp_shim_body.so"))
        .filter(|l| {
            !l.starts_with("hipHost")
                || l.starts_with("hipHostMalloc")
                || l.starts_with("hipHostAlloc")
        })
        .filter(|l| {
            !l.starts_with("hipRuntimeGetVersion")
                && !l.starts_with("hipGetDevice")
                && !l.starts_with("hipDeviceGetPCIBusId")
        })
        .filter(|l| !l.starts_with("hipFree") && !l.starts_with("hipHostFree"))
        .map(|l| {
            let mut w = l.split(' ');
            let f = w.next().unwrap_or("?");
            let flags = w.find(|t| t.starts_with("flags=")).unwrap_or("flags=?");
            format!("{f}({})", &flags[6..])
        })
        .collect();
    (received, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn main() {
    let dir = std::env::temp_dir().join(format!("rmcp-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let record = dir.join("record");
    let shim = shim();
    let (without, _) = run(None, &record);
    let (with, log) = run(Some(&shim), &record);
    let _ = std::fs::remove_dir_all(&dir);

    println!("rmcp demo: fake HIP runtime 6.4, KFD fixture tests/fixtures/rdna1 (gfx1010)\n");
    println!(
        "{:<30} {:<34} with rmcp",
        "the application calls", "the runtime receives"
    );
    for (i, (call, what)) in CALLS.iter().enumerate() {
        let a = without.get(i).map_or("?", String::as_str);
        let b = with.get(i).map_or("?", String::as_str);
        let mark = if a != b { "  <- rewritten" } else { "" };
        println!("{:<30} {:<34} {b}{mark}", call, a);
        println!("  {what}");
    }
    println!(
        "\n0x80000000 = hipHostMallocNonCoherent; hipExtMallocWithFlags 1 = Finegrained, 0 = Default."
    );
    println!("\nThe shim's own report (RMCP_LOG=info, RMCP_STATS=1):\n{log}");
}
