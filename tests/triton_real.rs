//! Issue 33: real Triton (triton==3.5.1 from PyPI) under rmcp. In the ROCm 7.2.4 compat
//! root with Triton installed (scripts/triton-root), on the emulated RX 5700 XT (gfx1010,
//! tests/emulated-gpu), tests/triton/vector_add.py starts Triton's HIP driver (it opens the
//! runtime RTLD_LOCAL and checks dlerror() after every dlsym), compiles an @triton.jit
//! kernel for gfx1010, loads it and launches it, once without rmcp and once with the shim
//! preloaded: the lines it prints are the same, and the shim was in the way of the calls.
//!
//! The emulated GPU completes every packet without running it: the output buffer holds what
//! its memory held, so "the same output" means the same compiled code object, the same
//! module and function found, the same launch accepted and the same bytes read back, not a
//! computed sum.

use rmcp_testkit::*;
use std::process::Output;
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// vector_add.py in the root on the emulated GPU, rmcp preloaded when `shim`.
fn run(dir: &RootDir, shim: bool) -> Output {
    let d = dir.inside.display().to_string();
    let tag = if shim { "with" } else { "without" };
    let mut preload = format!("{d}/libemugpu.so");
    if shim {
        preload.push_str(&format!(":{d}/librmcp_shim.so"));
    }
    let env = [
        (
            "PATH",
            "/opt/rmcp-triton/venv/bin:/usr/bin:/bin".to_string(),
        ),
        ("PYTHONPATH", format!("{d}/triton")),
        ("LD_LIBRARY_PATH", "/opt/rmcp-triton/lib".to_string()),
        (
            "TRITON_LIBHIP_PATH",
            "/opt/rmcp-triton/lib/libamdhip64.so".to_string(),
        ),
        // A cache of its own for each run: both compile.
        ("TRITON_CACHE_DIR", format!("{d}/cache-{tag}")),
        ("LD_PRELOAD", preload),
        ("EMUGPU_FIXTURE", format!("{d}/rdna1")),
        ("EMUGPU_LOG", format!("{d}/emu-{tag}.jsonl")),
        ("RMCP_STATS_FILE", format!("{d}/stats-{tag}.json")),
        ("RMCP_LOG", "info".to_string()),
    ];
    let mut cmd = dir.command(
        &env,
        "/opt/rmcp-triton/venv/bin/python3",
        &[format!("{d}/triton/vector_add.py")],
    );
    output_within(&mut cmd, Duration::from_secs(600)).expect("vector_add.py within 10 minutes")
}

#[test]
fn real_triton_compiles_loads_and_launches_the_same_under_rmcp() {
    let Some(root) = triton_root() else { return };
    let Some(emu) = emugpu_lib() else { return };
    let dir = RootDir::new(&root, "triton");
    dir.copy(&emu, "libemugpu.so");
    dir.copy(&fixture("rdna1"), "rdna1");
    dir.copy(&shim(), "librmcp_shim.so");
    dir.copy(
        &shim().with_file_name("librmcp_shim_body.so"),
        "librmcp_shim_body.so",
    );
    dir.copy(&repo().join("tests/triton"), "triton");

    let without = run(&dir, false);
    let with = run(&dir, true);
    let (out_without, out_with) = (text(&without.stdout), text(&with.stdout));
    assert!(
        without.status.success(),
        "without rmcp: {}\n{out_without}\n{}",
        without.status,
        text(&without.stderr)
    );
    assert!(
        with.status.success(),
        "with rmcp: {}\n{out_with}\n{}",
        with.status,
        text(&with.stderr)
    );
    for want in [
        "driver: HIPDriver",
        "target: hip gfx1010 warp 32",
        "compiled for: gfx1010",
        "amdgcn has add_kernel: True",
        "module loaded: True",
        "function found: True",
        "launched: 4 blocks of 256",
    ] {
        assert!(
            out_without.lines().any(|l| l == want),
            "{want}:\n{out_without}"
        );
    }
    assert_eq!(out_with, out_without, "the same lines with rmcp as without");

    // The shim was there: its stats name the 7.2.4 runtime, and Triton's driver found its
    // functions through the shim's hipGetProcAddress and its kernel through
    // hipModuleGetFunction (the program's three buffers came through hipMalloc).
    let stats = std::fs::read_to_string(dir.host().join("stats-with.json"))
        .expect("rmcp's stats file (the shim was preloaded)");
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    let runtime = stats["runtime"]["file"].as_str().unwrap_or_default();
    assert!(runtime.contains("libamdhip64.so.7"), "{stats}");
    let calls = |name: &str| stats["calls"][name]["calls"].as_u64().unwrap_or(0);
    assert!(calls("hipGetProcAddress") >= 1, "{stats}");
    assert!(calls("hipModuleGetFunction") >= 1, "{stats}");
    assert_eq!(calls("hipMalloc"), 3, "{stats}");
    assert!(
        !dir.host().join("stats-without.json").exists(),
        "no rmcp without the shim"
    );
}
