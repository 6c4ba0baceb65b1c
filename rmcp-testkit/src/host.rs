//! What this machine provides outside the workspace: Debian's real HIP runtime and python3
//! (a skip when missing, a failure where CI requires them), the ctypes loading shape run
//! with python3, executables on PATH.

use std::path::{Path, PathBuf};

/// Debian's real runtime (ROCm 5.2.3), if installed. Missing: a skip, but a failure with
/// RMCP_REQUIRE_REAL_HIP=1 or in CI (`crate::missing`).
pub fn real_runtime() -> Option<PathBuf> {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5",
        "/opt/rocm/lib/libamdhip64.so.5",
    ];
    let found = candidates.iter().map(PathBuf::from).find(|p| p.exists());
    if found.is_none() {
        crate::missing("no real libamdhip64.so.5 (apt-get install libamdhip64-dev)");
    }
    found
}

/// An executable on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.exists())
    })
}

/// python3, for the ctypes loading shape. Missing: a skip, but a failure with
/// RMCP_REQUIRE_REAL_HIP=1 or in CI.
pub fn python3() -> Option<PathBuf> {
    let found = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| which("python3"));
    if found.is_none() {
        crate::missing("no python3 (apt-get install python3)");
    }
    found
}

/// `python3 -c CTYPES_PROBE FRAMEWORK STEP...`: loads the framework library with ctypes
/// (RTLD_LOCAL, as CPython loads extension modules) and calls its probe_main.
pub const CTYPES_PROBE: &str = r#"
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
args = [a.encode() for a in sys.argv[1:]]
argv = (ctypes.c_char_p * len(args))(*args)
sys.stdout.flush()
sys.exit(lib.probe_main(len(args), argv))
"#;

/// The defined dynamic function symbols of an ELF file (`nm -D --defined-only`, binutils),
/// without their versions.
pub fn exported_functions(file: &std::path::Path) -> std::collections::BTreeSet<String> {
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(file)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}", file.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            matches!(kind, "T" | "W" | "i")
                .then(|| name.split('@').next().unwrap_or(name).to_string())
        })
        .collect()
}

/// Debian's hipcc (ROCm 5.2.3), if installed. Missing: a skip, but a failure with
/// RMCP_REQUIRE_REAL_HIP=1 or in CI.
pub fn hipcc() -> Option<PathBuf> {
    let found = which("hipcc");
    if found.is_none() {
        crate::missing("no hipcc (apt-get install hipcc)");
    }
    found
}

/// A code object for `arch` holding `extern "C" __global__ void k(int *p) { p[0] = 1; }`,
/// built by hipcc into `dir` as `k-ARCH.co`: the kernel the emulated GPU's tests load,
/// launch and fault (None: no hipcc, a skip). Panics when hipcc fails.
pub fn kernel_object(dir: &Path, arch: &str) -> Option<PathBuf> {
    kernel_object_of(
        dir,
        arch,
        "extern \"C\" __global__ void k(int *p) { p[0] = 1; }\n",
    )
}

/// The same for a kernel `k(int *p)` of the caller's `source` (after the HIP include).
pub fn kernel_object_of(dir: &Path, arch: &str, source: &str) -> Option<PathBuf> {
    let hipcc = hipcc()?;
    let src = dir.join("k.hip");
    std::fs::write(&src, format!("#include <hip/hip_runtime.h>\n{source}")).unwrap();
    let co = dir.join(format!("k-{arch}.co"));
    let out = genco(&hipcc, &[&format!("--offload-arch={arch}")], &src, &co).expect("run hipcc");
    assert!(
        out.status.success(),
        "hipcc {arch}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(co)
}

/// `hipcc --genco ARGS SRC -o CO`: a code object (an offload bundle) from one source.
fn genco(
    hipcc: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
    src: &Path,
    co: &Path,
) -> std::io::Result<std::process::Output> {
    std::process::Command::new(hipcc)
        .arg("--genco")
        .args(args)
        .arg(src)
        .arg("-o")
        .arg(co)
        .output()
}

/// A gfx1010 code object (an offload bundle, built by hipcc into `dir`) whose kernel `copy`
/// loads and stores through raw buffer descriptors built by hand, with word 3 = `word3`
/// (`0x00027000`: Triton's layout, which gfx1010-gfx1013 drop; `0x31014000`: Composable
/// Kernel's RDNA layout). None: no hipcc (a skip). Panics when hipcc fails.
pub fn buffer_kernel_object(dir: &Path, word3: &str) -> Option<PathBuf> {
    let hipcc = hipcc()?;
    let src = dir.join("buffer_kernel.hip");
    std::fs::write(&src, format!("{BUFFER_HELPERS}{COPY_KERNEL}")).unwrap();
    let co = dir.join(format!("buffer-{word3}.co"));
    let define = format!("-DWORD3={word3}");
    let out = genco(
        &hipcc,
        &["--offload-arch=gfx1010", "-O2", &define],
        &src,
        &co,
    )
    .expect("run hipcc");
    assert!(
        out.status.success(),
        "hipcc {word3}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(co)
}

/// A gfx1010 code object built by `hipcc` (`--genco --offload-arch=gfx1010 -O2`) into `dir`
/// as `NAME.co` from `NAME.hip`: [`BUFFER_HELPERS`] with word 3 = `word3`, then `kernels`.
/// The bytes hipcc wrote (an offload bundle); None when hipcc cannot run or fails (its
/// stderr printed): the benches' builder, which then measure nothing.
pub fn buffer_helpers_object(
    hipcc: &std::ffi::OsStr,
    dir: &Path,
    name: &str,
    word3: &str,
    kernels: &str,
) -> Option<Vec<u8>> {
    let src = dir.join(format!("{name}.hip"));
    std::fs::write(&src, BUFFER_HELPERS.replace("WORD3", word3) + kernels).ok()?;
    let co = dir.join(format!("{name}.co"));
    let out = genco(hipcc, &["--offload-arch=gfx1010", "-O2"], &src, &co).ok()?;
    if !out.status.success() {
        eprintln!("hipcc failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    std::fs::read(&co).ok()
}

/// HIP device helpers for kernels that load and store through raw buffer descriptors built
/// by hand: `raw_load` / `raw_store` (the LLVM raw buffer intrinsics) and `rsrc(p, bytes)`,
/// a descriptor whose word 3 is the macro `WORD3`.
pub const BUFFER_HELPERS: &str = r#"#include <hip/hip_runtime.h>
typedef int v4i __attribute__((ext_vector_type(4)));
__device__ float raw_load(v4i rsrc, int voffset, int soffset, int aux)
    __asm("llvm.amdgcn.raw.buffer.load.f32");
__device__ void raw_store(float v, v4i rsrc, int voffset, int soffset, int aux)
    __asm("llvm.amdgcn.raw.buffer.store.f32");
__device__ static v4i rsrc(const void *p, int bytes) {
    unsigned long long a = (unsigned long long)p;
    v4i r;
    r.x = (int)(unsigned)a;
    r.y = (int)(unsigned)(a >> 32) & 0xffff;
    r.z = bytes;
    r.w = WORD3;
    return r;
}
"#;

const COPY_KERNEL: &str = r#"extern "C" __global__ void copy(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = raw_load(rsrc(in, n * 4), i * 4, 0, 0);
    raw_store(v + 1.0f, rsrc(out, n * 4), i * 4, 0, 0);
}
"#;

/// The Python of the venv holding Triton from PyPI: RMCP_TRITON_VENV, else
/// scripts/triton-venv's default (target/wheel-cache/triton-venv). None: a skip.
pub fn triton_python() -> Option<PathBuf> {
    let venv = std::env::var_os("RMCP_TRITON_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo().join("target/wheel-cache/triton-venv"));
    let python = venv.join("bin/python");
    if python.is_file() {
        Some(python)
    } else {
        crate::missing(&format!(
            "no Triton venv at {} (run scripts/triton-venv; CI exports RMCP_TRITON_VENV)",
            venv.display()
        ));
        None
    }
}

/// Triton's kernels (a vector add, and others) compiled by tests/triton/compile.py into `dir`
/// (`add-<gfx1010|gfx1030>-bufops<0|1>.hsaco` and the others it lists). None: no Triton
/// venv (a skip). Panics when the compile fails.
pub fn triton_objects(dir: &Path) -> Option<()> {
    let python = triton_python()?;
    let out = std::process::Command::new(python)
        .arg(crate::repo().join("tests/triton/compile.py"))
        .arg(dir)
        .output()
        .expect("run tests/triton/compile.py");
    assert!(
        out.status.success(),
        "tests/triton/compile.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

/// Builds, in parallel, one hipcc fat-binary shared library per `(file name, targets)` into
/// `dir` (a small kernel and a host function that launches it; each file written under a
/// temporary name and moved into place). Panics when hipcc fails.
pub fn hip_fat_libraries(hipcc: &Path, dir: &Path, builds: &[(&str, &[&str])]) {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("k.hip");
    std::fs::write(
        &src,
        "#include <hip/hip_runtime.h>\n\
         __global__ void k(int *p) { p[threadIdx.x] = 1; }\n\
         extern \"C\" int launch(int *p) { hipLaunchKernelGGL(k, 1, 1, 0, 0, p); return 0; }\n",
    )
    .unwrap();
    let children: Vec<_> = builds
        .iter()
        .map(|(name, archs)| {
            let mut c = std::process::Command::new(hipcc);
            c.args(["-shared", "-fPIC", "-O1"]);
            for a in *archs {
                c.arg(format!("--offload-arch={a}"));
            }
            c.arg("-o").arg(dir.join(format!("{name}.tmp"))).arg(&src);
            (name, c.output().expect("run hipcc"))
        })
        .collect();
    for (name, out) in children {
        assert!(out.status.success(), "hipcc {name}: {out:?}");
        std::fs::rename(dir.join(format!("{name}.tmp")), dir.join(name)).unwrap();
    }
}
