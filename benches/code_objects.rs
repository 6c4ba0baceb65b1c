//! How long `rmcp doctor`'s code-objects check takes on a PyTorch-sized install, warm cache.
//!
//!     cargo bench --bench code_objects
//!
//! Generates, in a scratch directory, sparse files shaped like the real ones (nothing is
//! written but the headers, so they take a few MiB of disk):
//! - a venv: `torch/lib/libtorch_hip.so`, 1 GiB, whose `.hip_fatbin` holds 4,000 bundles
//!   256 KiB apart (half plain, half zstd-compressed version 3, 12 targets each; PyTorch
//!   has about one bundle per HIP source file), beside a `torch-*.dist-info`;
//! - a ROCm tree: `lib/librocblas.so.4` (512 MiB, 500 bundles), `lib/librocsparse.so.1`
//!   (256 MiB, 100 zlib-compressed bundles), 300 shared objects without GPU code, a rocBLAS
//!   Tensile directory of 1,400 files and an MIOpen kernel-database directory.
//!
//! Then it runs `rmcp doctor --json --scan VENV ROCM` (the rdna1 fixture) 10 times after
//! one warm-up run, and prints the median, fastest and slowest wall time and the median CPU
//! time. It also times the default places of this machine (`rmcp doctor` without
//! `--scan`: python3's site-packages, /opt/rocm*, the multiarch directory), for comparison.
//! `RMCP_BENCH_DIR=DIR` generates into DIR and keeps it, for profiling by hand.
//!
//! A figure, not a test: nothing here asserts on time. docs/cli.md holds a run.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp_core::code_objects::{FATBIN_SECTION, Method, write};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
const TARGETS: [&str; 12] = [
    "gfx900",
    "gfx906:xnack-",
    "gfx908:xnack-",
    "gfx90a:xnack-",
    "gfx90a:xnack+",
    "gfx942",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1200",
    "gfx1201",
];

/// A sparse ELF file of `size` bytes whose `.hip_fatbin` starts at 1 MiB and holds
/// `bundles` bundles `stride` bytes apart; only the headers are written.
fn sparse_library(path: &Path, size: u64, bundles: u64, stride: u64, method: Option<Method>) {
    let f = File::create(path).unwrap();
    f.set_len(size).unwrap();
    let start = 1u64 << 20;
    let sec_len = bundles * stride;
    let ids: Vec<String> = std::iter::once("host-x86_64-unknown-linux-gnu-".to_string())
        .chain(
            TARGETS
                .iter()
                .map(|t| format!("hipv4-amdgcn-amd-amdhsa--{t}")),
        )
        .collect();
    for i in 0..bundles {
        let at = start + i * stride;
        // A table whose code objects fill the stride (they are holes in the file).
        let per = (stride - 8192) / ids.len() as u64;
        let mut table = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
        table.extend_from_slice(&(ids.len() as u64).to_le_bytes());
        for (k, id) in ids.iter().enumerate() {
            table.extend_from_slice(&(4096 + k as u64 * per).to_le_bytes());
            table.extend_from_slice(&per.to_le_bytes());
            table.extend_from_slice(&(id.len() as u64).to_le_bytes());
            table.extend_from_slice(id.as_bytes());
        }
        let bytes = match method {
            Some(m) if i % 2 == 1 || m == Method::Zlib => {
                let mut plain = table.clone();
                plain.resize(64 << 10, 0);
                let mut c = write::compressed(3, m, &plain);
                // The total size says the bundle fills its stride.
                c[8..16].copy_from_slice(&(stride - 4096).to_le_bytes());
                c
            }
            _ => table,
        };
        f.write_all_at(&bytes, at).unwrap();
    }
    // Section headers at the end: null, .hip_fatbin, .shstrtab.
    let strtab = format!("\0{FATBIN_SECTION}\0.shstrtab\0");
    let str_at = start + sec_len;
    f.write_all_at(strtab.as_bytes(), str_at).unwrap();
    let shoff = (str_at + strtab.len() as u64).div_ceil(8) * 8;
    let mut sh = vec![0u8; 3 * 64];
    let mut put = |i: usize, name: u32, kind: u32, off: u64, len: u64| {
        let h = &mut sh[i * 64..(i + 1) * 64];
        h[0..4].copy_from_slice(&name.to_le_bytes());
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[24..32].copy_from_slice(&off.to_le_bytes());
        h[32..40].copy_from_slice(&len.to_le_bytes());
    };
    put(1, 1, 1, start, sec_len);
    put(
        2,
        1 + FATBIN_SECTION.len() as u32 + 1,
        3,
        str_at,
        strtab.len() as u64,
    );
    f.write_all_at(&sh, shoff).unwrap();
    let mut eh = [0u8; 64];
    eh[0..4].copy_from_slice(b"\x7fELF");
    eh[4] = 2;
    eh[5] = 1;
    eh[6] = 1;
    eh[16] = 3;
    eh[18] = 62;
    eh[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    eh[0x3a] = 64;
    eh[0x3c] = 3;
    eh[0x3e] = 2;
    f.write_all_at(&eh, 0).unwrap();
    assert!(shoff + 192 <= size, "{} too small", path.display());
}

/// CPU time (user + system) of the children this process has waited for.
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes one `rusage` into the zeroed value it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Median, fastest and slowest wall time, and the median CPU time, of `runs` runs.
fn time(args: &[&str], scan: &[&Path], runs: usize) -> (Duration, Duration, Duration, Duration) {
    let run = || {
        let cpu = children_cpu();
        let t = Instant::now();
        let out = Command::new(RMCP)
            .args(args)
            .args(if scan.is_empty() {
                vec![]
            } else {
                vec!["--scan"]
            })
            .args(scan)
            .output()
            .unwrap();
        let took = t.elapsed();
        assert!(out.status.code().is_some_and(|c| c < 2), "{out:?}");
        (took, children_cpu() - cpu)
    };
    run();
    let all: Vec<(Duration, Duration)> = (0..runs).map(|_| run()).collect();
    let mut wall: Vec<Duration> = all.iter().map(|a| a.0).collect();
    let mut cpu: Vec<Duration> = all.iter().map(|a| a.1).collect();
    wall.sort();
    cpu.sort();
    (wall[runs / 2], wall[0], wall[runs - 1], cpu[runs / 2])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    // RMCP_BENCH_DIR: generate there and keep it (for profiling by hand).
    let tmp = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("RMCP_BENCH_DIR").map(std::path::PathBuf::from);
    let root = keep.as_deref().unwrap_or(tmp.path());
    let sp = root.join("venv/lib/python3.11/site-packages");
    std::fs::create_dir_all(sp.join("torch/lib")).unwrap();
    std::fs::create_dir_all(sp.join("torch-2.5.1+rocm6.2.dist-info")).unwrap();
    let torch_bundles = if quick { 40 } else { 4000 };
    sparse_library(
        &sp.join("torch/lib/libtorch_hip.so"),
        (torch_bundles * (256 << 10)) + (4 << 20),
        torch_bundles,
        256 << 10,
        Some(Method::Zstd),
    );
    let rocm = root.join("rocm");
    let lib = rocm.join("lib");
    std::fs::create_dir_all(lib.join("rocblas/library")).unwrap();
    std::fs::create_dir_all(rocm.join("share/miopen/db")).unwrap();
    let n = if quick { 5 } else { 500 };
    sparse_library(
        &lib.join("librocblas.so.4"),
        n * (1 << 20) + (4 << 20),
        n,
        1 << 20,
        None,
    );
    let n = if quick { 2 } else { 100 };
    sparse_library(
        &lib.join("librocsparse.so.1"),
        n * (2 << 20) + (4 << 20),
        n,
        2 << 20,
        Some(Method::Zlib),
    );
    let plain = write::elf(&[(".text", b"no GPU code")]);
    for i in 0..300 {
        std::fs::write(lib.join(format!("libplain{i}.so.1")), &plain).unwrap();
    }
    for i in 0..1400 {
        let t = TARGETS[i % TARGETS.len()].replace(':', "-");
        let name = format!("TensileLibrary_Type_{i}_Contraction_l_Alik_Bjlk_Cijk_Dijk_{t}.co");
        std::fs::write(lib.join("rocblas/library").join(name), b"").unwrap();
    }
    for k in ["gfx1030_36.kdb", "gfx90a6e.kdb", "gfx1100_48.kdb"] {
        std::fs::write(rocm.join("share/miopen/db").join(k), b"").unwrap();
    }
    let sysfs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rdna1");
    let sysfs = sysfs.to_str().unwrap();
    let runs = if quick { 1 } else { 10 };
    let venv = root.join("venv");
    let (med, lo, hi, cpu) = time(
        &["doctor", "--json", "--sysfs", sysfs],
        &[&venv, &rocm],
        runs,
    );
    println!(
        "rmcp doctor --scan VENV ROCM (libtorch_hip.so 1 GiB with {torch_bundles} bundles, \
         ROCm tree): wall median {:.0} ms (fastest {:.0}, slowest {:.0}), CPU median {:.0} ms; \
         {runs} runs, warm",
        ms(med),
        ms(lo),
        ms(hi),
        ms(cpu)
    );
    let (med, lo, hi, cpu) = time(&["doctor", "--json", "--sysfs", sysfs], &[], runs);
    println!(
        "rmcp doctor, this machine's default places: wall median {:.0} ms (fastest {:.0}, \
         slowest {:.0}), CPU median {:.0} ms; {runs} runs, warm",
        ms(med),
        ms(lo),
        ms(hi),
        ms(cpu)
    );
}
