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
    let hipcc = hipcc()?;
    let src = dir.join("k.hip");
    std::fs::write(
        &src,
        "#include <hip/hip_runtime.h>\nextern \"C\" __global__ void k(int *p) { p[0] = 1; }\n",
    )
    .unwrap();
    let co = dir.join(format!("k-{arch}.co"));
    let out = std::process::Command::new(&hipcc)
        .args(["--genco", &format!("--offload-arch={arch}")])
        .arg(&src)
        .arg("-o")
        .arg(&co)
        .output()
        .expect("run hipcc");
    assert!(
        out.status.success(),
        "hipcc {arch}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(co)
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
