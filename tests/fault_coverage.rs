//! Issue 35, fault coverage, shown on the emulated GPU with the real 5.2.3 runtime: a fault
//! in the program's first GPU work when that is a copy (no kernel launched yet), a fault in
//! a kernel launched only through pointers from `dlsym` on an RTLD_LOCAL handle, and a fault
//! in a kernel a graph runs. Each is explained (rmcp's block first, the node, the gfx and the
//! kernels named) and the runtime's own message and ending are the same with rmcp as
//! without, byte for byte after masking addresses and numbers. tests/compat/run (`n:faults`)
//! shows the same on the 6.4.3 and 7.2.4 runtimes, where hipGetProcAddress exists.

use rmcp_testkit::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Masks what changes from run to run: hex addresses, numbers (times, pids, ids).
fn masked(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && chars.peek() == Some(&'x') {
            chars.next();
            while chars.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                chars.next();
            }
            out.push_str("0xN");
        } else if c.is_ascii_digit() {
            while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                chars.next();
            }
            out.push('N');
        } else {
            out.push(c);
        }
    }
    out
}

/// stderr without rmcp's lines and the emulator's own notes.
fn runtime_part(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with("rmcp[") && !l.starts_with("emulated-gpu:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `args` on the emulated GPU in `dir`, rmcp preloaded when `shim`.
fn run(lib: &Path, dir: &Path, shim: bool, args: &[&std::ffi::OsStr]) -> Output {
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.arg("--log")
        .arg(dir.join("run.jsonl"))
        .arg("--")
        .args(args)
        .current_dir(dir)
        .env("EMUGPU_LIB", lib)
        .env_remove("LD_PRELOAD")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .env_remove("EMUGPU_FAULT")
        .env_remove("RMCP_LOG")
        .env_remove("RMCP_MODE");
    if shim {
        cmd.env("LD_PRELOAD", rmcp_testkit::shim());
    }
    output_within(&mut cmd, Duration::from_secs(120)).expect("the program within its time")
}

/// Runs `args` with and without rmcp: the same ending and runtime message; returns rmcp's
/// block (which comes first, once) and the whole context for messages.
fn explained(lib: &Path, dir: &Path, args: &[&std::ffi::OsStr]) -> (String, String) {
    let without = run(lib, dir, false, args);
    let with = run(lib, dir, true, args);
    let (e0, e1) = (text(&without.stderr), text(&with.stderr));
    let ctx = format!(
        "--- without {:?}\n{}{e0}\n--- with {:?}\n{}{e1}",
        without.status,
        text(&without.stdout),
        with.status,
        text(&with.stdout)
    );
    assert!(
        e0.contains("Memory access fault by GPU node-1"),
        "the fault did not happen\n{ctx}"
    );
    assert_eq!(with.status.signal(), without.status.signal(), "{ctx}");
    assert_eq!(with.status.code(), without.status.code(), "{ctx}");
    assert_eq!(
        masked(&text(&with.stdout)),
        masked(&text(&without.stdout)),
        "{ctx}"
    );
    assert_eq!(
        masked(&runtime_part(&e1)),
        masked(&runtime_part(&e0)),
        "{ctx}"
    );
    let lines: Vec<&str> = e1.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("error: GPU memory fault on GPU "))
        .unwrap_or_else(|| panic!("no block\n{ctx}"));
    let runtime_first = lines
        .iter()
        .position(|l| !l.starts_with("rmcp[") && !l.starts_with("emulated-gpu:"))
        .unwrap_or(lines.len());
    assert!(start < runtime_first, "the block is not first\n{ctx}");
    let block = lines[start..runtime_first].join("\n");
    assert_eq!(
        block.matches("GPU memory fault").count(),
        1,
        "one block\n{ctx}"
    );
    assert!(
        block.contains("GPU memory fault on GPU node-1 at address 0x")
            && block.contains("GPU: node-1, gfx1010 (KFD topology)"),
        "node and gfx\n{ctx}"
    );
    (block, ctx)
}

fn hipcc_build(hipcc: &Path, dir: &Path, name: &str, src: &str) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.hip"));
    std::fs::write(&file, src).unwrap();
    let exe = dir.join(name);
    let out = Command::new(hipcc)
        .arg("--offload-arch=gfx1010")
        .arg(&file)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "hipcc: {}", text(&out.stderr));
    exe
}

/// The program's first GPU work is a hipMemcpy (the runtime's own copy kernel), which
/// faults: no kernel was launched, yet the block is there, with the node, the gfx and the
/// allocation (issue 35, item 1).
#[test]
fn a_fault_in_a_copy_before_any_launch_is_explained() {
    if real_runtime().is_none() {
        return;
    }
    let Some(lib) = emugpu_lib() else { return };
    let Some(hipcc) = hipcc() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exe = hipcc_build(
        &hipcc,
        dir.path(),
        "copy",
        r#"#include <hip/hip_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
static char host[65536];
int main() {
    void *d = 0;
    if (hipMalloc(&d, sizeof host) != hipSuccess) return 3;
    int (*arm)(const char *, unsigned long long) =
        (int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
    if (!arm || arm("vm", (unsigned long long)(uintptr_t)d) != 0) return 5;
    hipError_t rc = hipMemcpy(host, d, sizeof host, hipMemcpyDeviceToHost);
    printf("hipMemcpy: %d\n", (int)rc);
    return 0;
}
"#,
    );
    let (block, ctx) = explained(&lib, dir.path(), &[exe.as_os_str()]);
    assert!(
        block.contains("made by hipMalloc(65536 bytes, flags 0x0) from "),
        "{ctx}"
    );
    assert!(
        block.contains("kernels: no launch went through rmcp in this process"),
        "{ctx}"
    );
}

/// A program that reaches the runtime only through `dlsym` on an RTLD_LOCAL handle (the
/// runtime is not in the global scope): its hipModuleLaunchKernel pointer is rmcp's per-copy
/// entry, so the faulting launch is recorded and the kernel named (issue 35, item 2).
#[test]
fn launches_through_dlsym_on_a_local_handle_are_named() {
    if real_runtime().is_none() {
        return;
    }
    let Some(lib) = emugpu_lib() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object(dir.path(), "gfx1010") else {
        return;
    };
    let exe = dir.path().join("by_name_launch");
    let out = Command::new("cc")
        .arg(repo().join("tests/c/by_name_launch.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .unwrap();
    assert!(out.status.success(), "cc: {}", text(&out.stderr));
    let (block, ctx) = explained(
        &lib,
        dir.path(),
        &[
            exe.as_os_str(),
            "libamdhip64.so.5".as_ref(),
            co.as_os_str(),
            "dlsym".as_ref(),
        ],
    );
    assert!(
        block.contains("    k in ") && block.contains(" via hipModuleLaunchKernel (thread "),
        "{ctx}"
    );
    assert!(block.contains("2 launches in all"), "{ctx}");
    assert!(
        block.contains("made by hipMalloc(4096 bytes, flags 0x0) from "),
        "{ctx}"
    );
}

/// A program whose kernels run only in graphs: one captured from a stream, one built with
/// hipGraphAddKernelNode, which faults. The block lists the graph launch and the kernels put
/// into graphs (issue 35, item 3).
#[test]
fn a_fault_in_a_graph_names_its_kernels() {
    if real_runtime().is_none() {
        return;
    }
    let Some(lib) = emugpu_lib() else { return };
    let Some(hipcc) = hipcc() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exe = hipcc_build(
        &hipcc,
        dir.path(),
        "graph",
        r#"#include <hip/hip_runtime.h>
#include <dlfcn.h>
__global__ void fill(int *p) { p[0] = 1; }
__global__ void poke(int *p) { p[1] = 2; }
int main() {
    int *d = 0;
    if (hipMalloc((void **)&d, 4096) != hipSuccess) return 3;
    hipStream_t s;
    if (hipStreamCreate(&s) != hipSuccess) return 4;
    hipGraph_t captured, built;
    hipGraphExec_t run1, run2;
    if (hipStreamBeginCapture(s, hipStreamCaptureModeGlobal) != hipSuccess) return 5;
    hipLaunchKernelGGL(fill, dim3(1), dim3(1), 0, s, d);
    if (hipStreamEndCapture(s, &captured) != hipSuccess) return 6;
    if (hipGraphCreate(&built, 0) != hipSuccess) return 7;
    void *args[] = {&d};
    hipKernelNodeParams p = {};
    p.func = (void *)poke;
    p.gridDim = dim3(1);
    p.blockDim = dim3(1);
    p.kernelParams = args;
    hipGraphNode_t node;
    if (hipGraphAddKernelNode(&node, built, nullptr, 0, &p) != hipSuccess) return 8;
    if (hipGraphInstantiate(&run1, captured, nullptr, nullptr, 0) != hipSuccess) return 9;
    if (hipGraphInstantiate(&run2, built, nullptr, nullptr, 0) != hipSuccess) return 10;
    if (hipGraphLaunch(run1, s) != hipSuccess || hipStreamSynchronize(s) != hipSuccess)
        return 11;
    int (*arm)(const char *, unsigned long long) =
        (int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
    if (!arm || arm("vm", 0) != 0) return 12;
    hipGraphLaunch(run2, s);
    return hipStreamSynchronize(s);
}
"#,
    );
    let (block, ctx) = explained(&lib, dir.path(), &[exe.as_os_str()]);
    assert!(
        block.contains("a graph (hipGraphExec_t 0x") && block.contains(" via hipGraphLaunch ("),
        "{ctx}"
    );
    assert!(
        block.contains("a graph launch runs its kernels without a launch call each"),
        "{ctx}"
    );
    assert!(
        block.contains("_Z4pokePi in ") && block.contains(", given to hipGraphAddKernelNode"),
        "{ctx}"
    );
    assert!(
        block.contains("_Z4fillPi in ") && block.contains(", launched during a stream capture"),
        "{ctx}"
    );
}
