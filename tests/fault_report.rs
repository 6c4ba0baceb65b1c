//! Issue 28, never worse, shown on the emulated GPU with the real 5.2.3 runtime: for each
//! fault kind the emulator injects (`vm`, `vm-read-only`, `vm-imprecise` through KFD's memory
//! event, `aperture`, `illegal` through the queue's inactive signal), the runtime's own
//! message and how the process ends are the same with rmcp preloaded as without, byte for
//! byte after masking addresses, times and ids; rmcp's block comes before the runtime's
//! message, naming the allocation, the call that made it and the kernel. RMCP_MODE=off still
//! explains; RMCP_LOG=off prints nothing of rmcp's.

use rmcp_testkit::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// emu_probe5 STEPS on the emulated GPU, rmcp preloaded when `shim`, with `env`.
fn run(lib: &Path, dir: &Path, shim: bool, env: &[(&str, &str)], steps: &[&str]) -> Output {
    let mut cmd = emugpu_probe_command(lib, dir, &dir.join("log.jsonl"), None, steps);
    cmd.env_remove("RMCP_LOG").env_remove("RMCP_MODE");
    if shim {
        cmd.env("LD_PRELOAD", rmcp_testkit::shim());
    }
    cmd.envs(env.iter().copied());
    output_within(&mut cmd, Duration::from_secs(120)).expect("emu_probe5 within its time")
}

#[test]
fn each_fault_is_explained_before_the_runtime_and_ends_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let Some((lib, co)) = emugpu_with_kernel(dir.path()) else {
        return;
    };
    let load = format!("load:{}", co.display());
    for (kind, first) in [
        ("vm", "GPU memory fault on GPU node-1 at address 0x"),
        (
            "vm-read-only",
            "GPU memory fault on GPU node-1 at address 0x",
        ),
        (
            "vm-imprecise",
            "GPU memory fault on GPU node-1 at an address the GPU did not report",
        ),
        (
            "aperture",
            "GPU queue error on GPU node-1: HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION (0x29)",
        ),
        (
            "illegal",
            "GPU queue error on GPU node-1: HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION (0x2a)",
        ),
    ] {
        let fault = format!("fault:{kind}");
        let steps = ["init", &load, "launch", "sync", &fault, "launch", "sync"];
        let without = run(&lib, dir.path(), false, &[], &steps);
        let with = run(&lib, dir.path(), true, &[], &steps);
        let (e0, e1) = (text(&without.stderr), text(&with.stderr));
        let ctx = format!("{kind}\n--- without\n{e0}\n--- with\n{e1}");
        // How the process ends, and what the runtime says, are the same.
        assert_eq!(without.status.signal(), Some(libc::SIGABRT), "{ctx}");
        assert_same_ending(&without, &with, &ctx);
        // rmcp's block comes first, whole, with the facts right.
        let lines: Vec<&str> = e1.lines().collect();
        let (start, runtime_first) =
            fault_block_span(&lines, first).unwrap_or_else(|| panic!("no block\n{ctx}"));
        assert!(start < runtime_first, "{ctx}");
        let block = lines[start..runtime_first].join("\n");
        assert_eq!(
            block.matches("GPU memory fault").count() + block.matches("GPU queue error").count(),
            1,
            "one block per fault\n{ctx}"
        );
        assert!(block.contains("gfx1010 (KFD topology)"), "{ctx}");
        assert!(
            block.contains(" k in ") && block.contains("via hipModuleLaunchKernel"),
            "{ctx}"
        );
        if kind == "vm" || kind == "vm-read-only" {
            assert!(
                block.contains("made by hipMalloc(4096 bytes, flags 0x0) from ")
                    && block.contains("emu_probe5; forwarded unchanged"),
                "{ctx}"
            );
        }
        if kind == "vm-read-only" {
            assert!(
                block.contains("reason: write access to a read-only page"),
                "{ctx}"
            );
        }
        if kind == "vm-imprecise" {
            assert!(
                block.contains("at an address the GPU did not report")
                    && block.contains("reason: imprecise"),
                "{ctx}"
            );
        }
        assert!(block.contains("`rmcp doctor`"), "{ctx}");
    }

    // RMCP_MODE=off still explains; RMCP_LOG=off says nothing, and ends the same.
    let steps = [
        "init", &load, "launch", "sync", "fault:vm", "launch", "sync",
    ];
    let off = run(&lib, dir.path(), true, &[("RMCP_MODE", "off")], &steps);
    let e = text(&off.stderr);
    assert!(e.contains("GPU memory fault on GPU node-1"), "{e}");
    assert!(
        e.contains("RMCP_MODE=off: rmcp changed no allocation"),
        "{e}"
    );
    // The stats report holds the fault, written before the runtime aborted.
    let stats = dir.path().join("stats.json");
    let stats_env = stats.to_str().unwrap();
    run(
        &lib,
        dir.path(),
        true,
        &[("RMCP_STATS_FILE", stats_env)],
        &steps,
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("the report")).unwrap();
    let f = &report["faults"][0];
    assert_eq!(f["kind"], "vm", "{report}");
    assert_eq!(f["gpu"]["gfx"], "gfx1010", "{report}");
    assert_eq!(f["address_in"]["made_by"]["call"], "hipMalloc", "{report}");
    assert_eq!(f["kernels"][0]["name"], "k", "{report}");
    assert_eq!(f["kernels"][0]["via"], "hipModuleLaunchKernel", "{report}");
    assert!(
        f["lines"][0].as_str().unwrap().contains("GPU memory fault"),
        "{report}"
    );
    // RMCP_LOG_FILE takes the block instead of stderr.
    let log = dir.path().join("rmcp.log");
    let logged = run(
        &lib,
        dir.path(),
        true,
        &[("RMCP_LOG_FILE", log.to_str().unwrap())],
        &steps,
    );
    let e = text(&logged.stderr);
    assert!(!e.contains("rmcp["), "{e}");
    assert!(e.contains("Memory access fault by GPU node-1"), "{e}");
    let l = std::fs::read_to_string(&log).expect("the log file");
    assert!(l.contains("error: GPU memory fault on GPU node-1"), "{l}");
    let quiet = run(&lib, dir.path(), true, &[("RMCP_LOG", "off")], &steps);
    let e = text(&quiet.stderr);
    assert!(!e.contains("rmcp["), "{e}");
    assert_eq!(quiet.status.signal(), Some(libc::SIGABRT), "{e}");
}

/// A program with its own system event handler that returns HSA_STATUS_SUCCESS: ROCr then
/// prints nothing and does not abort, and the program goes on. With rmcp loaded it keeps
/// that behaviour: the same stdout and exit status, no runtime message (rmcp's own block is
/// written, as rmcp's handler is called too).
#[test]
fn a_program_that_handles_the_fault_itself_keeps_its_behaviour() {
    let Some((lib, hipcc)) = emugpu_with_hipcc() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("handles.hip");
    std::fs::write(
        &src,
        r#"#include <hip/hip_runtime.h>
#include <hsa/hsa_ext_amd.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
__global__ void fill(int *p) { p[0] = 1; }
static hsa_status_t mine(const hsa_amd_event_t *e, void *) {
    if (e->event_type == HSA_AMD_GPU_MEMORY_FAULT_EVENT) {
        printf("handled the fault\n");
        fflush(stdout);
    }
    return HSA_STATUS_SUCCESS;
}
int main() {
    int *p = 0;
    if (hipMalloc((void **)&p, 4096) != hipSuccess) return 3;
    if (hsa_amd_register_system_event_handler(mine, 0) != HSA_STATUS_SUCCESS) return 4;
    fill<<<1, 1>>>(p);
    if (hipDeviceSynchronize() != hipSuccess) return 5;
    int (*arm)(const char *, unsigned long long) =
        (int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
    if (!arm || arm("vm", 0) != 0) return 6;
    fill<<<1, 1>>>(p);
    sleep(2);
    printf("went on\n");
    fflush(stdout);
    _exit(0);
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("handles");
    let out = Command::new(&hipcc)
        .arg("--offload-arch=gfx1010")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-lhsa-runtime64")
        .output()
        .unwrap();
    assert!(out.status.success(), "hipcc: {}", text(&out.stderr));
    let go = |shim: bool| {
        let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
        cmd.arg("--log")
            .arg(dir.path().join("handles.jsonl"))
            .arg("--")
            .arg(&exe)
            .env("EMUGPU_LIB", &lib)
            .env_remove("LD_PRELOAD")
            .env_remove("RMCP_LOG")
            .env_remove("RMCP_MODE");
        if shim {
            cmd.env("LD_PRELOAD", rmcp_testkit::shim());
        }
        output_within(&mut cmd, Duration::from_secs(120)).expect("within its time")
    };
    let without = go(false);
    let with = go(true);
    let ctx = format!(
        "--- without {:?}\n{}{}\n--- with {:?}\n{}{}",
        without.status,
        text(&without.stdout),
        text(&without.stderr),
        with.status,
        text(&with.stdout),
        text(&with.stderr)
    );
    assert_eq!(
        text(&without.stdout),
        "handled the fault\nwent on\n",
        "{ctx}"
    );
    assert!(without.status.success(), "{ctx}");
    assert_eq!(text(&with.stdout), text(&without.stdout), "{ctx}");
    assert_eq!(with.status.code(), without.status.code(), "{ctx}");
    for out in [&without, &with] {
        assert!(
            !text(&out.stderr).contains("Memory access fault by GPU"),
            "the runtime reported a handled fault\n{ctx}"
        );
    }
    assert!(
        text(&with.stderr).contains("GPU memory fault on GPU node-1"),
        "{ctx}"
    );
}

/// The process's very first HIP call is the launch that faults: the handler is found at
/// that launch (before the runtime is entered) and registered when the runtime creates its
/// queue, so even that fault is explained, with the kernel's name from
/// `__hipRegisterFunction`.
#[test]
fn a_fault_in_the_first_launch_is_explained() {
    let Some((lib, hipcc)) = emugpu_with_hipcc() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("first.hip");
    std::fs::write(
        &src,
        r#"#include <hip/hip_runtime.h>
#include <dlfcn.h>
__global__ void fill(int *p) { p[0] = 1; }
int main() {
    int (*arm)(const char *, unsigned long long) =
        (int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
    if (!arm || arm("vm", 0x10000) != 0) return 5;
    fill<<<1, 1>>>((int *)0x10000);
    hipDeviceSynchronize();
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("first");
    let out = Command::new(&hipcc)
        .arg("--offload-arch=gfx1010")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "hipcc: {}", text(&out.stderr));
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.arg("--log")
        .arg(dir.path().join("first.jsonl"))
        .arg("--")
        .arg(&exe)
        .env("EMUGPU_LIB", &lib)
        .env("LD_PRELOAD", rmcp_testkit::shim())
        .env("RMCP_STATS_FILE", dir.path().join("stats.json"))
        .env_remove("RMCP_LOG")
        .env_remove("RMCP_MODE");
    let out = output_within(&mut cmd, Duration::from_secs(120)).expect("within its time");
    let e = text(&out.stderr);
    // A process that made no allocation through the shim still gets its report.
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("stats.json")).expect("the report"),
    )
    .unwrap();
    assert_eq!(
        report["faults"][0]["kernels"][0]["name"], "_Z4fillPi",
        "{report}"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{e}");
    let block = e.find("GPU memory fault on GPU node-1 at address 0x10000");
    let runtime = e.find("Memory access fault by GPU node-1");
    assert!(block.is_some() && block < runtime, "{e}");
    assert!(
        e.contains("address: in no allocation the runtime knows"),
        "{e}"
    );
    assert!(
        e.contains("_Z4fillPi in ") && e.contains("via hipLaunchKernel"),
        "{e}"
    );
    assert!(e.contains("1 launch in all"), "{e}");
}

/// Launches from other threads appear in the block beside the main thread's, each thread's
/// newest first (issue 35: each thread records in a ring of its own; the threads' rings are
/// interleaved, live threads first).
#[test]
fn two_threads_launches_both_appear() {
    let dir = tempfile::tempdir().unwrap();
    let Some((lib, co)) = emugpu_with_kernel(dir.path()) else {
        return;
    };
    let load = format!("load:{}", co.display());
    let steps = [
        "init",
        &load,
        "launch@thread",
        "launch@thread",
        "sync",
        "launch",
        "sync",
        "fault:vm",
        "launch",
        "sync",
    ];
    let out = run(&lib, dir.path(), true, &[], &steps);
    let e = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{e}");
    let threads: Vec<&str> = e
        .lines()
        .filter(|l| l.contains(" k in ") && l.contains("via hipModuleLaunchKernel"))
        .filter_map(|l| l.rsplit("(thread ").next()?.strip_suffix(')'))
        .collect();
    assert_eq!(threads.len(), 4, "four launches listed\n{e}");
    // The main thread (alive) first, then the others' newest, then its second newest.
    let main = threads[0];
    assert_eq!(threads.iter().filter(|t| **t == main).count(), 2, "{e}");
    assert_eq!(threads[2], main, "{e}");
    assert_ne!(threads[1], main, "{e}");
    assert!(
        e.contains("newest first per thread, threads interleaved"),
        "{e}"
    );
    assert!(e.contains("4 launches in all"), "{e}");
}

/// Issue 39 item 4: the RX 5700 XT (gfx1010) under HSA_OVERRIDE_GFX_VERSION=10.3.0 runs a
/// gfx1030 module loaded from memory; at a fault, the block names the hardware-bug sites of
/// the kernel it lists, the same counts `rmcp_core::gfx101x` finds in the object, and the
/// runtime's ending is as without rmcp; the same for the module loaded by file name
/// (`hipModuleLoad`: the file is read after the load). Without the override (the kernel
/// built for gfx1010) the block says nothing of sites.
#[test]
fn under_the_override_the_block_names_the_kernels_hardware_bug_sites() {
    let dir = tempfile::tempdir().unwrap();
    let Some((lib, _)) = emugpu_with_hipcc() else {
        return;
    };
    // A divergent `if`: LLVM 15 writes `s_mov_b32 sN, exec_lo; v_cmpx_*` (a v_cmpx EXEC
    // WAR site on gfx101x).
    let Some(co) = kernel_object_of(
        dir.path(),
        "gfx1030",
        "extern \"C\" __global__ void k(int *p) {\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (i < p[0]) p[i + 1] = p[i + 1] * 3 + 1;\n}\n",
    ) else {
        return;
    };
    let image = std::fs::read(&co).unwrap();
    let scan =
        rmcp_core::gfx101x::scan_image(&image, rmcp_core::gfx::Gfx(100100)).expect("a bundle");
    let k = scan
        .objects
        .iter()
        .flat_map(|o| &o.functions)
        .find(|f| f.name.as_deref() == Some("k"))
        .expect("k scanned");
    assert!(k.total() > 0, "the kernel has sites: {k:?}");
    let mut want: Vec<String> = Vec::new();
    for harm in [
        rmcp_core::gfx101x::Harm::Hang,
        rmcp_core::gfx101x::Harm::Fault,
        rmcp_core::gfx101x::Harm::Race,
    ] {
        for b in rmcp_core::gfx101x::Bug::ALL
            .iter()
            .filter(|b| b.harm() == harm)
        {
            if k.counts[b.index()] > 0 {
                want.push(format!("{} {}", b.mattr(), k.counts[b.index()]));
            }
        }
    }
    // Without the override: the same kernel built for gfx1010, which the card runs as is.
    let source = std::fs::read_to_string(dir.path().join("k.hip")).unwrap();
    let source = source.trim_start_matches("#include <hip/hip_runtime.h>\n");
    let co1010 = kernel_object_of(dir.path(), "gfx1010", source).unwrap();
    let override_env = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0")];
    for (load, co, env, said) in [
        ("loaddata", &co, &override_env[..], true),
        ("load", &co, &override_env[..], true),
        ("loaddata", &co1010, &[][..], false),
    ] {
        let load = format!("{load}:{}", co.display());
        let steps = [
            "init", &load, "launch", "sync", "fault:vm", "launch", "sync",
        ];
        let without = run(&lib, dir.path(), false, env, &steps);
        let with = run(&lib, dir.path(), true, env, &steps);
        let (e0, e1) = (text(&without.stderr), text(&with.stderr));
        let ctx = format!("{load} {env:?}\n--- without\n{e0}\n--- with\n{e1}");
        assert_same_ending_seen(&without, &with, &ctx, without_memory_map);
        let lines: Vec<&str> = e1.lines().collect();
        let (start, runtime_first) =
            fault_block_span(&lines, "GPU memory fault on GPU node-1 at address 0x")
                .unwrap_or_else(|| panic!("no block\n{ctx}"));
        let block = lines[start..runtime_first].join("\n");
        assert!(block.contains(" k in "), "{ctx}");
        let heading = "gfx1030 code that this gfx1010 executes wrongly";
        if !said {
            assert!(!block.contains(heading), "{ctx}");
            continue;
        }
        assert!(block.contains(heading), "{ctx}");
        let line = lines[start..runtime_first]
            .iter()
            .find(|l| l.contains("    k: "))
            .unwrap_or_else(|| panic!("no line for k\n{ctx}"));
        for w in &want {
            assert!(line.contains(w.as_str()), "{w} in {line}\n{ctx}");
        }
    }
}
