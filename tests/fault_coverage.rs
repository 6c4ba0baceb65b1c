//! Issue 35, fault coverage, shown on the emulated GPU with the real 5.2.3 runtime: a fault
//! in the program's first GPU work when that is a copy (no kernel launched yet), a fault in
//! a kernel launched only through pointers from `dlsym` on an RTLD_LOCAL handle, and a fault
//! in a kernel a graph runs. Each is explained (rmcp's block first, the node, the gfx and the
//! kernels named) and the runtime's own message and ending are the same with rmcp as
//! without, byte for byte after masking addresses and numbers. In the roots tests/compat/run
//! builds (chroot, as root): the copy on the 6.4.3 runtime, launches through
//! hipGetProcAddress pointers on the 7.2.4 runtime, and real llama.cpp (Debian's, with its
//! HIP backend) on the 6.4.3 runtime, faulting in its model upload and running unfaulted.

use rmcp_testkit::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `args` on the emulated GPU in `dir`, rmcp preloaded when `shim`; with the emulator's log.
fn run(lib: &Path, dir: &Path, shim: bool, args: &[&std::ffi::OsStr]) -> (Output, String) {
    let log = dir.join("run.jsonl");
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.arg("--log")
        .arg(&log)
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
    let out =
        output_within(&mut cmd, Duration::from_secs(120)).expect("the program within its time");
    (out, std::fs::read_to_string(&log).unwrap_or_default())
}

/// Runs a program with and without rmcp (`go(shim)` gives its output and the emulator's
/// log): a VM fault happened in both, and the ending and the runtime's message are the
/// same. Returns rmcp's block (which comes first, once, naming the node and the gfx) and the
/// whole context for messages.
fn explained(go: impl Fn(bool) -> (Output, String)) -> (String, String) {
    explained_as(go, "vm", "GPU memory fault on GPU node-1 at address 0x")
}

/// [`explained`] for the fault `kind`, whose block starts with `first`.
fn explained_as(
    go: impl Fn(bool) -> (Output, String),
    kind: &str,
    first: &str,
) -> (String, String) {
    let (without, log0) = go(false);
    let (with, log1) = go(true);
    let (e0, e1) = (text(&without.stderr), text(&with.stderr));
    let ctx = format!(
        "--- without {:?}\n{}{e0}\n--- with {:?}\n{}{e1}",
        without.status,
        text(&without.stdout),
        with.status,
        text(&with.stdout)
    );
    for log in [&log0, &log1] {
        assert!(
            log.contains(&format!("\"fault\":\"{kind}\"")),
            "the fault did not happen\n{ctx}"
        );
    }
    assert_same_ending_seen(&without, &with, &ctx, without_memory_map);
    let lines: Vec<&str> = e1.lines().collect();
    let (start, runtime_first) =
        fault_block_span(&lines, first).unwrap_or_else(|| panic!("no block\n{ctx}"));
    assert!(start < runtime_first, "the block is not first\n{ctx}");
    let block = lines[start..runtime_first].join("\n");
    assert_eq!(
        block.matches("GPU memory fault").count() + block.matches("GPU queue error").count(),
        1,
        "one block\n{ctx}"
    );
    assert!(
        block.contains("GPU: node-1, gfx1010 (KFD topology)"),
        "node and gfx\n{ctx}"
    );
    (block, ctx)
}

fn cc(src: &Path, exe: &Path, more: &[&std::ffi::OsStr]) {
    let out = Command::new("cc")
        .arg(src)
        .arg("-o")
        .arg(exe)
        .args(more)
        .arg("-ldl")
        .output()
        .expect("run cc");
    assert!(out.status.success(), "cc: {}", text(&out.stderr));
}

fn hipcc_build(hipcc: &Path, dir: &Path, name: &str, src: &str) -> std::path::PathBuf {
    hipcc_build_for("gfx1010", hipcc, dir, name, src)
}

fn hipcc_build_for(
    arch: &str,
    hipcc: &Path,
    dir: &Path,
    name: &str,
    src: &str,
) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.hip"));
    std::fs::write(&file, src).unwrap();
    let exe = dir.join(name);
    let out = Command::new(hipcc)
        .arg(format!("--offload-arch={arch}"))
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
    let Some((lib, hipcc)) = emugpu_with_hipcc() else {
        return;
    };
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
    let (block, ctx) = explained(|shim| run(&lib, dir.path(), shim, &[exe.as_os_str()]));
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
    let dir = tempfile::tempdir().unwrap();
    let Some((lib, co)) = emugpu_with_kernel(dir.path()) else {
        return;
    };
    let exe = dir.path().join("by_name_launch");
    cc(&repo().join("tests/c/by_name_launch.c"), &exe, &[]);
    let args = [
        exe.as_os_str(),
        "libamdhip64.so.5".as_ref(),
        co.as_os_str(),
        "dlsym".as_ref(),
    ];
    let (block, ctx) = explained(|shim| run(&lib, dir.path(), shim, &args));
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
    let Some((lib, hipcc)) = emugpu_with_hipcc() else {
        return;
    };
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
    let (block, ctx) = explained(|shim| run(&lib, dir.path(), shim, &[exe.as_os_str()]));
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

/// A root tests/compat/run built (RMCP_COMPAT_CACHE, default /var/cache/rmcp-compat) whose
/// runtime is `libamdhip64.so.<major>`, and a directory staged in it; None (a skip, a
/// failure where prerequisites are required) when there is none or this is not root.
struct Staged {
    root: std::path::PathBuf,
    /// The directory as the host sees it, and as the root's processes see it.
    host: std::path::PathBuf,
    inside: String,
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.host);
    }
}

fn staged(name: &str, major: u8, lib: &Path) -> Option<Staged> {
    let cache = std::env::var_os("RMCP_COMPAT_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/var/cache/rmcp-compat"));
    let root = cache.join("roots").join(name);
    let runtime = root.join(format!("usr/lib/x86_64-linux-gnu/libamdhip64.so.{major}"));
    if !runtime.exists() {
        missing(&format!(
            "no Debian {name} root with libamdhip64.so.{major} under {} (tests/compat/run \
             builds it)",
            cache.display()
        ));
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(&format!("the {name} root needs chroot, which needs root"));
        return None;
    }
    // One directory per staging: tests of one process run side by side in the same root.
    static STAGED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let inside = format!(
        "/tmp/rmcp-fault-coverage-{}-{}",
        std::process::id(),
        STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let host = root.join(inside.trim_start_matches('/'));
    std::fs::create_dir_all(&host).unwrap();
    let s = Staged { root, host, inside };
    let front = rmcp_testkit::shim();
    let body = front.with_file_name("librmcp_shim_body.so");
    for f in [lib, front.as_path(), body.as_path()] {
        std::fs::copy(f, s.host.join(f.file_name().unwrap())).unwrap();
    }
    let fixture = fixture("rdna1");
    let out = Command::new("cp")
        .arg("-a")
        .arg(&fixture)
        .arg(s.host.join("fixture"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cp: {out:?}");
    Some(s)
}

impl Staged {
    /// Copies `file` in; its path inside.
    fn put(&self, file: &Path) -> String {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        std::fs::copy(file, self.host.join(&name)).unwrap();
        format!("{}/{name}", self.inside)
    }

    /// `args` (paths inside) in the root on the emulated GPU, under `ulimit -c 0` as
    /// tests/compat/run runs them, rmcp preloaded when `shim`; with the emulator's log.
    fn run(&self, shim: bool, env: &[String], args: &[&str]) -> (Output, String) {
        let mut preload = format!("{}/libemugpu.so", self.inside);
        if shim {
            preload.push_str(&format!(":{}/librmcp_shim.so", self.inside));
        }
        let log = format!("{}/run.jsonl", self.inside);
        let _ = std::fs::remove_file(self.host.join("run.jsonl"));
        let mut cmd = Command::new("chroot");
        cmd.arg(&self.root)
            .args([
                "/usr/bin/env",
                "-i",
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/root",
                "sh",
                "-c",
                "ulimit -c 0; cd \"$0\"; exec \"$@\"",
                &self.inside,
                "env",
            ])
            .arg(format!("LD_PRELOAD={preload}"))
            .arg(format!("EMUGPU_FIXTURE={}/fixture", self.inside))
            .arg(format!("EMUGPU_LOG={log}"))
            .args(env)
            .args(args);
        let out = output_within(&mut cmd, Duration::from_secs(120)).expect("within its time");
        (
            out,
            std::fs::read_to_string(self.host.join("run.jsonl")).unwrap_or_default(),
        )
    }
}

/// The copy before any launch on the 6.4.3 runtime (Debian sid), which runs copies as its
/// own blit kernels on HIP's queues.
#[test]
fn a_fault_in_a_copy_before_any_launch_is_explained_on_6_4_3() {
    let Some(lib) = emugpu_lib() else { return };
    let Some(stage) = staged("sid", 6, &lib) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("copy_fault");
    // Linked to the root's own runtime (its dependencies need the root's newer glibc, which
    // the link does not check).
    let libs = stage.root.join("usr/lib/x86_64-linux-gnu");
    cc(
        &repo().join("tests/c/copy_fault.c"),
        &exe,
        &[
            format!("-L{}", libs.display()).as_ref(),
            format!("-Wl,-rpath-link,{}", libs.display()).as_ref(),
            "-Wl,--allow-shlib-undefined".as_ref(),
            "-l:libamdhip64.so.6".as_ref(),
        ],
    );
    let exe = stage.put(&exe);
    let (block, ctx) = explained(|shim| stage.run(shim, &[], &[&exe]));
    assert!(
        block.contains("made by hipMalloc(65536 bytes, flags 0x0) from "),
        "{ctx}"
    );
    // A queue error in HIP's own blit kernel (a device-to-device copy), before any launch:
    // the block names the node and the gfx as a VM fault's does (issue 28 said "GPU of
    // unknown node" here: ROCr was found only at a launch).
    let (block, ctx) = explained_as(
        |shim| stage.run(shim, &[], &[&exe, "aperture", "d2d"]),
        "aperture",
        "GPU queue error on GPU node-1: HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION (0x29)",
    );
    assert!(
        block.contains("kernels: no launch went through rmcp in this process"),
        "{ctx}"
    );
}

/// A program that gets every HIP function through hipGetProcAddress (the runtime dlopened
/// RTLD_LOCAL, only hipGetProcAddress looked up with dlsym), as Triton's HIP driver does,
/// on the 7.2.4 runtime (Debian experimental): its launches are recorded and named.
#[test]
fn launches_through_hip_get_proc_address_are_named_on_7_2_4() {
    let Some(lib) = emugpu_lib() else { return };
    let Some(stage) = staged("exp", 7, &lib) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object(dir.path(), "gfx1010") else {
        return;
    };
    let exe = dir.path().join("by_name_launch");
    cc(&repo().join("tests/c/by_name_launch.c"), &exe, &[]);
    let (exe, co) = (stage.put(&exe), stage.put(&co));
    // hipGetProcAddress finds its own library by the unversioned name, which the -dev
    // package provides (without it every name is hipErrorInvalidValue); Triton opens that
    // name too. The root has only the soname: a link to it in the staged directory.
    std::os::unix::fs::symlink(
        "/usr/lib/x86_64-linux-gnu/libamdhip64.so.7",
        stage.host.join("libamdhip64.so"),
    )
    .unwrap();
    let env = [format!("LD_LIBRARY_PATH={}", stage.inside)];
    let (block, ctx) =
        explained(|shim| stage.run(shim, &env, &[&exe, "libamdhip64.so", &co, "proc"]));
    assert!(
        block.contains("    k in ") && block.contains(" via hipModuleLaunchKernel (thread "),
        "{ctx}"
    );
    assert!(block.contains("2 launches in all"), "{ctx}");
}

/// Real llama.cpp as users run it: Debian's llama.cpp-tools and its HIP backend
/// (libggml0-backend-hip, which ggml loads with dlopen from its backends directory) in the
/// sid root (tests/compat/run installs them), on the 6.4.3 runtime on the emulated gfx1010,
/// with a tiny model (tests/llama/tiny_model.py) and every layer offloaded: the sid root
/// staged, with the model written there (its path inside); None (a skip, a failure where
/// prerequisites are required) when the emulated GPU, the root or llama.cpp is missing.
fn llama_staged() -> Option<(Staged, String)> {
    let lib = emugpu_lib()?;
    let stage = staged("sid", 6, &lib)?;
    for need in [
        "usr/bin/llama-completion",
        "usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-hip.so",
        "usr/lib/python3/dist-packages/gguf",
    ] {
        if !stage.root.join(need).exists() {
            missing(&format!(
                "no /{need} in the sid root (tests/compat/run installs llama.cpp-tools, \
                 libggml0-backend-hip and python3-gguf)"
            ));
            return None;
        }
    }
    let script = stage.put(&repo().join("tests/llama/tiny_model.py"));
    let (out, _) = stage.run(false, &[], &["python3", &script, "tiny.gguf"]);
    assert!(out.status.success(), "tiny_model.py: {out:?}");
    let model = format!("{}/tiny.gguf", stage.inside);
    Some((stage, model))
}

/// llama-completion with `model`: four tokens from a fixed prompt, greedy, fixed seed.
fn llama_args(model: &str) -> [&str; 15] {
    [
        "llama-completion",
        "-m",
        model,
        "-p",
        "abc",
        "-n",
        "4",
        "--no-warmup",
        "-ngl",
        "99",
        "-no-cnv",
        "--seed",
        "1",
        "--temp",
        "0",
    ]
}

/// ROCr's VM fault report without its "Nearby memory map" and "PtrInfo" listing (from the
/// first line to the one before "Failed to enable debug interface").
fn without_nearby(s: &str) -> String {
    let mut out = Vec::new();
    let mut listing = false;
    for l in s.lines() {
        if l == "Nearby memory map:" {
            listing = true;
        } else if l.starts_with("Failed to enable debug interface") {
            listing = false;
        }
        if !listing {
            out.push(l);
        }
    }
    out.join("\n")
}

/// Masked, and with runs of blanks as one (llama.cpp pads its timings to their width).
fn comparable(s: &str) -> String {
    masked(s).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Real llama.cpp run with and without rmcp, a VM fault armed with `env`: both faulted,
/// the same ending and the same message from the runtime, and rmcp's block before the
/// runtime's report, naming the node and the gfx. Returns the block and the context.
fn llama_explained(stage: &Staged, model: &str, env: &[String]) -> (String, String) {
    let (without, log0) = stage.run(false, env, &llama_args(model));
    let (with, log1) = stage.run(true, env, &llama_args(model));
    let (e0, e1) = (text(&without.stderr), text(&with.stderr));
    let ctx = format!(
        "--- without {:?}\n{e0}\n--- with {:?}\n{e1}",
        without.status, with.status
    );
    for log in [&log0, &log1] {
        assert!(log.contains("\"fault\":\"vm\""), "no fault\n{ctx}");
    }
    // The runtime's own message and ending, byte for byte after masking; its listing of the
    // blocks nearest the address is left out: which blocks lie nearest moves with the
    // address space's layout from run to run, with or without rmcp.
    assert_same_ending_seen(&without, &with, &ctx, without_nearby);
    let lines: Vec<&str> = e1.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("GPU memory fault on GPU node-1 at address 0x"))
        .unwrap_or_else(|| panic!("no block\n{ctx}"));
    let runtime = lines
        .iter()
        .position(|l| l.starts_with("Memory access fault by GPU node-1"))
        .unwrap_or_else(|| panic!("no runtime report\n{ctx}"));
    assert!(
        start < runtime,
        "the block is not before the runtime's report\n{ctx}"
    );
    let block = lines[start..runtime]
        .iter()
        .take_while(|l| l.starts_with("rmcp["))
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        block.contains("GPU: node-1, gfx1010 (KFD topology)"),
        "node and gfx\n{ctx}"
    );
    assert!(block.contains("non-coherent in this process"), "{ctx}");
    (block, ctx)
}

/// Real llama.cpp whose first GPU work, the model upload (the runtime's own copy kernels:
/// ggml has launched nothing yet), faults: explained (issue 35 item 1: there was no block
/// at all), the run ending and reading as it does without rmcp.
#[test]
fn real_llama_cpp_faulting_in_its_model_upload_is_explained_on_6_4_3() {
    let Some((stage, model)) = llama_staged() else {
        return;
    };
    let (block, ctx) = llama_explained(&stage, &model, &["EMUGPU_FAULT=vm".to_string()]);
    assert!(
        block.contains("kernels: no launch went through rmcp in this process"),
        "{ctx}"
    );
}

/// Real llama.cpp faulting in the middle of its run (the 61st kernel dispatch, past the
/// upload, in ggml's own kernels): the block names the buffer ggml made, from the backend
/// ggml dlopened, the ggml kernel the GPU was running (from its queue, issue 41), and ggml's
/// recent launches by name, through hipLaunchKernel, as context.
#[test]
fn real_llama_cpp_faulting_in_its_kernels_names_them_on_6_4_3() {
    let Some((stage, model)) = llama_staged() else {
        return;
    };
    let env = [
        "EMUGPU_FAULT=vm".to_string(),
        "EMUGPU_FAULT_AFTER=60".to_string(),
    ];
    let (block, ctx) = llama_explained(&stage, &model, &env);
    let ggml = "/usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-hip.so";
    assert!(
        block.contains("  made by hip") && block.contains(&format!(" from {ggml}; ")),
        "{ctx}"
    );
    assert!(block.contains("  running when it faulted ("), "{ctx}");
    assert!(
        running_from(&block, ggml),
        "ggml's kernel named as running\n{ctx}"
    );
    assert!(block.contains("  recent launches, as context ("), "{ctx}");
    assert!(
        block
            .lines()
            .any(|l| l.contains(&format!(" in {ggml} via hipLaunchKernel (thread "))),
        "{ctx}"
    );
}

/// Whether a block names a dispatch from `library` as one a queue is running.
fn running_from(block: &str, library: &str) -> bool {
    block
        .lines()
        .any(|l| l.contains("    queue ") && l.contains(&format!(" from {library}, grid ")))
}

/// rmcp's lines from the first containing `first` to the first that is not rmcp's.
fn rmcp_block(stderr: &str, first: &str) -> String {
    stderr
        .lines()
        .skip_while(|l| !l.contains(first))
        .take_while(|l| l.starts_with("rmcp["))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Issue 41: real llama.cpp hanging in the middle of its run (ggml's 61st dispatch never
/// completes; the driver resets the GPU 4 s later, EMUGPU_RESET_AFTER): with
/// RMCP_HANG_AFTER=1, the stall block names the ggml kernel the GPU is on, from the backend
/// ggml dlopened, while llama.cpp waits; at the reset, rmcp's block names it again before
/// ROCr's "HW Exception ... reason :GPU Hang"; the run ends as it does without rmcp.
#[test]
fn real_llama_cpp_hanging_in_its_kernels_names_the_one_running_on_6_4_3() {
    let Some((stage, model)) = llama_staged() else {
        return;
    };
    let env = [
        "EMUGPU_FAULT=hang",
        "EMUGPU_FAULT_AFTER=60",
        "EMUGPU_RESET_AFTER=4",
        "RMCP_HANG_AFTER=1",
    ]
    .map(String::from);
    let (without, _) = stage.run(false, &env, &llama_args(&model));
    let (with, log) = stage.run(true, &env, &llama_args(&model));
    let (e0, e1) = (text(&without.stderr), text(&with.stderr));
    let ctx = format!(
        "--- without {:?}\n{e0}\n--- with {:?}\n{e1}",
        without.status, with.status
    );
    assert!(log.contains("\"fault\":\"hang\""), "no hang\n{ctx}");
    assert!(e0.contains("HW Exception by GPU node-1"), "{ctx}");
    assert_same_ending(&without, &with, &ctx);
    let ggml = "/usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-hip.so";
    let stall = rmcp_block(&e1, "GPU wait: a synchronizing call has waited");
    assert!(
        running_from(&stall, ggml),
        "the stall block names ggml's kernel\n{ctx}"
    );
    let reset = rmcp_block(&e1, "GPU reset on GPU node-1: the GPU hung");
    assert!(
        reset.contains("  running when the GPU was reset ("),
        "{ctx}"
    );
    assert!(
        running_from(&reset, ggml),
        "the reset's block names ggml's kernel\n{ctx}"
    );
    let (at_reset, at_rocr) = (
        e1.find("GPU reset on GPU node-1").unwrap(),
        e1.find("HW Exception by GPU node-1")
            .unwrap_or_else(|| panic!("{ctx}")),
    );
    assert!(at_reset < at_rocr, "{ctx}");
}

/// The same llama.cpp run without a fault: the same tokens and the same messages with rmcp
/// as without, and ggml's pinned host buffers (its hipHostMalloc calls, from the backend
/// ggml dlopened) made non-coherent.
#[test]
fn real_llama_cpp_runs_the_same_with_its_pinned_buffers_rewritten_on_6_4_3() {
    let Some((stage, model)) = llama_staged() else {
        return;
    };
    let (without, _) = stage.run(false, &[], &llama_args(&model));
    let env = ["RMCP_LOG=debug".to_string()];
    let (with, _) = stage.run(true, &env, &llama_args(&model));
    let (e0, e1) = (text(&without.stderr), text(&with.stderr));
    let ctx = format!(
        "--- without {:?}\n{e0}\n--- with {:?}\n{e1}",
        without.status, with.status
    );
    assert!(without.status.success() && with.status.success(), "{ctx}");
    assert!(text(&with.stdout).contains("abc"), "{ctx}");
    assert_eq!(text(&with.stdout), text(&without.stdout), "{ctx}");
    assert_eq!(
        comparable(&runtime_part(&e1)),
        comparable(&runtime_part(&e0)),
        "{ctx}"
    );
    let rewritten = e1
        .lines()
        .filter(|l| {
            l.contains("debug: hipHostMalloc size=")
                && l.contains(" -> hipHostMalloc flags=0x80000000 caller=")
                && l.ends_with("/ggml/backends0/libggml-hip.so rc=0")
        })
        .count();
    assert!(
        rewritten >= 1,
        "no pinned buffer of ggml's rewritten\n{ctx}"
    );
}

/// The override tests' hipcc program: `scale(int *, int)` (its body after `first`, a line
/// of the kernel's own), launched once after arming a VM fault (emugpu_fault) for it.
fn scale_program(first: &str) -> String {
    format!(
        r#"#include <hip/hip_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
__global__ void scale(int *p, int n) {{
{first}    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i + 1] = p[i + 1] * 3 + 1;
}}
int main() {{
    int *d = 0;
    if (hipMalloc((void **)&d, 4096) != hipSuccess) return 3;
    int (*arm)(const char *, unsigned long long) =
        (int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
    if (!arm || arm("vm", 0) != 0) return 5;
    scale<<<1, 64>>>(d, 100);
    printf("sync: %d\n", (int)hipDeviceSynchronize());
    return 0;
}}
"#
    )
}

/// Issue 39 item 4 for the fat binary a program registers at start-up (as PyTorch's
/// libraries do): under HSA_OVERRIDE_GFX_VERSION=10.3.0 on the emulated gfx1010, a hipcc
/// program built for gfx1030 faults in its kernel; the block names the kernel's hardware-bug
/// sites, read at the fault from the program's own `.hip_fatbin` (the entry the runtime
/// loads for gfx1030), and the runtime's ending is as without rmcp.
#[test]
fn under_the_override_a_registered_kernels_sites_are_named_at_the_fault() {
    let Some((lib, hipcc)) = emugpu_with_hipcc() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = hipcc_build_for("gfx1030", &hipcc, dir.path(), "scale", &scale_program(""));
    let args = [
        "env".as_ref(),
        "HSA_OVERRIDE_GFX_VERSION=10.3.0".as_ref(),
        exe.as_os_str(),
    ];
    let (block, ctx) = explained(|shim| run(&lib, dir.path(), shim, &args));
    assert!(block.contains("_Z5scalePii in "), "{ctx}");
    assert!(
        block.contains("gfx1030 code that this gfx1010 executes wrongly"),
        "{ctx}"
    );
    let line = block
        .lines()
        .find(|l| l.contains("    _Z5scalePii: "))
        .unwrap_or_else(|| panic!("no sites line for the kernel\n{ctx}"));
    assert!(line.contains("vcmpx-exec-war-hazard "), "{line}\n{ctx}");
}

/// Issue 40 item 2 and the fault block: a fat binary whose gfx1030 entry the runtime was
/// handed fixed in place (`s_inst_prefetch` as `s_nop 0`) faults in its kernel under
/// HSA_OVERRIDE_GFX_VERSION=10.3.0 on the emulated gfx1010: the block's sites for the
/// kernel are those of the code the GPU got (no `inst-fwd-prefetch-bug`, the other sites
/// still named); with RMCP_OVERRIDE_FIXES=warn (the code as built) it names the prefetch.
#[test]
fn under_the_override_a_fixed_fat_binarys_sites_are_those_the_gpu_got() {
    let Some((lib, hipcc)) = emugpu_with_hipcc() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = hipcc_build_for(
        "gfx1030",
        &hipcc,
        dir.path(),
        "prefetch",
        &scale_program("    asm volatile(\"s_inst_prefetch 0x1\");\n"),
    );
    let sites = |setting: &str| -> String {
        let fixes = format!("RMCP_OVERRIDE_FIXES={setting}");
        let args = [
            "env".as_ref(),
            "HSA_OVERRIDE_GFX_VERSION=10.3.0".as_ref(),
            fixes.as_ref(),
            exe.as_os_str(),
        ];
        let (block, ctx) = explained(|shim| run(&lib, dir.path(), shim, &args));
        block
            .lines()
            .find(|l| l.contains("    _Z5scalePii: "))
            .unwrap_or_else(|| panic!("{setting}: no sites line for the kernel\n{ctx}"))
            .to_string()
    };
    let fixed = sites("fix");
    assert!(!fixed.contains("inst-fwd-prefetch-bug"), "{fixed}");
    assert!(fixed.contains("vcmpx-exec-war-hazard "), "{fixed}");
    let warned = sites("warn");
    assert!(warned.contains("inst-fwd-prefetch-bug"), "{warned}");
}
