//! `rmcp_core::gfx10::decode` against LLVM's own disassembler on whole real code objects:
//! Debian's `llvm-objdump` (LLVM 15, the one Debian's hipcc uses) prints every instruction
//! with a `// <address>: <raw words>` comment, so its offset and length. For every function
//! of every object (`code_objects::amdgpu::object`), the decoder walks from the function's
//! start; each instruction must start where LLVM's does and be as long. Objects:
//!
//! - hipcc-built (`hipcc --genco`, gfx1010 and gfx1030): `rmcp check`'s kernels
//!   (src/field_check/kernels.hip) and the project's other kernels (the fault tests' and
//!   rmcp-testkit's one-liners), with a few more that reach the encodings those do not (LDS,
//!   DPP, f64, f16, scratch, images);
//! - Debian's rocSPARSE (librocsparse0, ROCm 5.3): the gfx1030 entries of five of the 111
//!   bundles of its `.hip_fatbin` (the smallest and the 25th, 50th, 75th and 90th percentile
//!   by size; all of them would be 190 MB);
//! - Debian sid's rocBLAS in the compatibility root (tests/compat/run builds it into
//!   `RMCP_COMPAT_CACHE`, default /var/cache/rmcp-compat): Tensile's assembly kernels (the
//!   two smallest gfx1030 `.co` files), its source kernels (`.hsaco`, three each for gfx1010
//!   and gfx1030) and entries of `librocblas.so.4`'s `.hip_fatbin`;
//! - MIOpen in the same root, where it holds code objects (sid's `libMIOpen.so.1` has no
//!   `.hip_fatbin` and the root no `.kdb` kernel database: it compiles at run time);
//! - Triton's objects (tests/triton/compile.py) when `RMCP_TRITON_VENV` names a venv.
//!
//! Words LLVM does not decode (`.long`) are not compared; they are counted (column `llvm
//! .long`). Tensile's assembly objects name their kernels with size-0 symbols, so the
//! parser gives their whole `.text` as one function, and the zeros padding between kernels
//! are such words (0x00000000 is no GFX10 instruction; `llvm-objdump -z` lists
//! them, where it would otherwise print `...` and skip them).
//!
//! At most [`MAX_PER_OBJECT`] instructions are compared per object. The summary (object,
//! target, instructions compared, mismatches, undecodable) goes to stderr and to
//! `$CARGO_TARGET_TMPDIR/gfx10_llvm_objdump.md`. A length or offset mismatch fails the test
//! with the bytes, LLVM's line and the decoder's length; so does an instruction LLVM decodes
//! and the decoder calls `Undecodable`, listed by encoding and opcode.
//!
//! Missing llvm-objdump, hipcc or rocSPARSE is a skip (`skipped: gfx10_llvm_objdump: ...`
//! on stderr), a failure with `RMCP_REQUIRE_REAL_HIP=1` or `CI` set; a missing compat root
//! is a skip even then (CI builds the roots after the tests).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rmcp_core::code_objects::{self as co, BundleFormat, FATBIN_SECTION, Partial, amdgpu};
use rmcp_core::gfx10::{self, Undecodable};

const TEST: &str = "gfx10_llvm_objdump";
const LLVM_OBJDUMP: &str = "/usr/lib/llvm-15/bin/llvm-objdump";
/// Instructions compared at most per object (none of the chosen objects reaches it).
const MAX_PER_OBJECT: usize = 1_500_000;
/// Mismatches shown in full per object (all are counted by encoding).
const SHOWN: usize = 5;

/// Where prerequisites are required (CI), a missing one fails.
fn required() -> bool {
    std::env::var("RMCP_REQUIRE_REAL_HIP").as_deref() == Ok("1") || std::env::var_os("CI").is_some()
}

/// To stderr past libtest's capture (as rmcp-testkit's skips: a passing test's output shows).
fn say(s: &str) {
    let _ = std::io::stderr().write_all(s.as_bytes());
}

/// A skip that is no missing prerequisite.
fn skip(why: &str) {
    say(&format!("skipped: {TEST}: {why}\n"));
}

/// A missing prerequisite: a skip, a failure where prerequisites are required.
#[track_caller]
fn missing(what: &str) {
    assert!(
        !required(),
        "RMCP_REQUIRE_REAL_HIP=1 or CI is set, but a prerequisite is missing: {what}"
    );
    skip(what);
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// One AMDGPU ELF to compare.
struct Object {
    name: String,
    /// The `--mcpu` (gfx1010, gfx1030, ...).
    mcpu: String,
    elf: Vec<u8>,
}

/// The gfx10 ELF objects of an image (a bare ELF or a plain offload bundle), through the
/// project's own parser.
fn objects_of(name: &str, image: &[u8], out: &mut Vec<Object>) {
    let (places, _) = amdgpu::places(image).unwrap_or_else(|e| panic!("{name}: {e}"));
    for p in places {
        let elf = &image[p.at..p.at + p.len];
        let o = amdgpu::object(elf, p.bundle_target.as_deref())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mcpu = amdgpu::processor(&o.header_target).to_string();
        if !mcpu.starts_with("gfx10") || mcpu.contains("generic") {
            continue;
        }
        let name = if p.bundle_target.is_some() {
            format!("{name} [{mcpu}]")
        } else {
            name.to_string()
        };
        out.push(Object {
            name,
            mcpu,
            elf: elf.to_vec(),
        });
    }
}

/// Kernels beside the project's own (src/field_check/kernels.hip): the one-liners of the
/// fault tests and rmcp-testkit, and a few reaching LDS, DPP, f64, f16, scratch and images.
const KERNELS: &str = r#"#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
extern "C" __global__ void k(int *p) { p[0] = 1; }
extern "C" __global__ void fill(int *p) { p[0] = 1; }
extern "C" __global__ void poke(int *p) { p[1] = 2; }
extern "C" __global__ void mathk(float *o, const float *a, const double *d, const __half *h, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i];
    double y = d[i];
    __half z = h[i];
    float s = sinf(x) + expf(x) * logf(fabsf(x) + 1.0f) + sqrtf(x * x + 1.0f) + 1.0f / x;
    double t = sqrt(y) * y + (double)s + fma(y, y, 3.0);
    __half u = __hmul(z, z);
    int dpp = __builtin_amdgcn_mov_dpp(__float_as_int(s), 0x111, 0xf, 0xf, false);
    o[i] = s + (float)t + __half2float(u) + __shfl_xor(s, 1) + __shfl_down(s, 2) + __int_as_float(dpp);
}
extern "C" __global__ void reduce(float *o, const float *a, int n) {
    __shared__ float sm[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) acc += a[i];
    sm[t] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sm[t] += sm[t + s];
        __syncthreads();
    }
    if (t == 0) atomicAdd(o, sm[0]);
}
extern "C" __global__ void scratch(int *o, const int *idx, int n) {
    volatile int local[64];
    int t = threadIdx.x;
    for (int i = 0; i < 64; i++) local[i] = i * t + idx[(i + t) % n];
    o[t] = local[idx[t] & 63] + local[(idx[t] >> 6) & 63];
}
extern "C" __global__ void texk(float *o, hipTextureObject_t t1, hipTextureObject_t t3, int n) {
    int i = threadIdx.x;
    float x = (float)i / n;
    o[i] = tex1Dfetch<float>(t1, i) + tex3D<float>(t3, x, x * 0.5f, x * 0.25f)
        + tex2DLod<float>(t1, x, x, 1.5f);
}
"#;

/// (a) hipcc's objects of the project's kernels, gfx1010 and gfx1030.
fn hipcc_objects(dir: &Path, out: &mut Vec<Object>) {
    let hipcc = std::env::var_os("HIPCC")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/usr/bin/hipcc")).filter(|p| p.is_file()));
    let Some(hipcc) = hipcc else {
        missing("hipcc part: no hipcc (apt-get install hipcc)");
        return;
    };
    let extra = dir.join("kernels-extra.hip");
    std::fs::write(&extra, KERNELS).unwrap();
    let check = repo().join("src/field_check/kernels.hip");
    for (name, src, flags) in [
        (
            "kernels.hip",
            &check,
            &["-nogpuinc", "-nogpulib", "-O2"][..],
        ),
        ("kernels-extra.hip", &extra, &["-O3"][..]),
    ] {
        let co = dir.join(format!("{name}.co"));
        let o = Command::new(&hipcc)
            .arg("--genco")
            .args(flags)
            .args(["--offload-arch=gfx1010", "--offload-arch=gfx1030"])
            .arg(src)
            .arg("-o")
            .arg(&co)
            .output()
            .expect("run hipcc");
        assert!(
            o.status.success(),
            "hipcc {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        objects_of(&format!("hipcc {name}"), &std::fs::read(&co).unwrap(), out);
    }
}

fn read_at(f: &std::fs::File, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    std::os::unix::fs::FileExt::read_exact_at(f, &mut b, at).unwrap();
    b
}

/// The `processor` entries of a library's `.hip_fatbin` (plain bundles), as (bundle index,
/// file offset, size), without reading the library whole.
fn fatbin_entries(lib: &Path, processor: &str) -> Option<Vec<(usize, u64, usize)>> {
    let f = std::fs::File::open(lib).unwrap();
    let section = co::find_section(&f, FATBIN_SECTION).unwrap()?;
    let fat = co::scan_fatbin(&f, section.offset, section.size);
    let mut out = Vec::new();
    for (i, b) in fat.bundles.iter().enumerate() {
        if b.format != BundleFormat::Plain {
            continue;
        }
        let mut want = 4096;
        let entries = loop {
            match co::parse_bundle_header(&read_at(&f, b.offset, want)).unwrap() {
                Partial::Complete(e) => break e,
                Partial::NeedBytes(n) => want = n.max(want * 2),
            }
        };
        for e in entries {
            if amdgpu::processor(&e.id) == processor && e.size > 0 {
                out.push((i, b.offset + e.offset, e.size as usize));
            }
        }
    }
    Some(out)
}

/// The entries at these quantiles of size (deduplicated), as objects.
fn pick_entries(
    label: &str,
    lib: &Path,
    entries: &[(usize, u64, usize)],
    quantiles: &[f64],
    out: &mut Vec<Object>,
) {
    let mut by_size = entries.to_vec();
    by_size.sort_by_key(|e| (e.2, e.0));
    let mut picked: Vec<usize> = quantiles
        .iter()
        .map(|q| (q * (by_size.len() - 1) as f64).round() as usize)
        .collect();
    picked.dedup();
    let f = std::fs::File::open(lib).unwrap();
    for i in picked {
        let (bundle, at, len) = by_size[i];
        let bytes = read_at(&f, at, len);
        objects_of(&format!("{label} bundle {bundle}"), &bytes, out);
    }
}

/// (b) rocSPARSE's gfx1030 code.
fn rocsparse_objects(out: &mut Vec<Object>) {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/librocsparse.so.0");
    if !lib.exists() {
        missing("rocSPARSE part: no librocsparse0 (apt-get install librocsparse0)");
        return;
    }
    let entries = fatbin_entries(lib, "gfx1030").expect("rocSPARSE's .hip_fatbin");
    assert!(!entries.is_empty(), "no gfx1030 code in {}", lib.display());
    pick_entries(
        "rocSPARSE",
        lib,
        &entries,
        &[0.0, 0.25, 0.5, 0.75, 0.9],
        out,
    );
}

/// The sid compat root (as rmcp-testkit's compat_root: `RMCP_COMPAT_CACHE`, else
/// /var/cache/rmcp-compat, else target/compat), when built.
fn sid_root() -> Option<PathBuf> {
    let cache = std::env::var_os("RMCP_COMPAT_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            Some(PathBuf::from("/var/cache/rmcp-compat")).filter(|p| p.join("roots").is_dir())
        })
        .unwrap_or_else(|| repo().join("target/compat"));
    let root = cache.join("roots/sid");
    if root.join(".rmcp-compat").is_file() {
        Some(root)
    } else {
        // As tests/buffer_descriptors.rs: CI makes the roots after the tests.
        skip(&format!(
            "rocBLAS and MIOpen parts: no Debian sid compat root under {} (tests/compat/run \
             builds it)",
            cache.display()
        ));
        None
    }
}

/// (c) rocBLAS's Tensile files and library, (d) MIOpen's code objects, in the sid root.
fn sid_objects(root: &Path, out: &mut Vec<Object>) {
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for v in std::fs::read_dir(lib.join("rocblas")).into_iter().flatten() {
        let library = v.unwrap().path().join("library");
        for e in std::fs::read_dir(&library).into_iter().flatten() {
            let p = e.unwrap().path();
            files.push((p.metadata().unwrap().len(), p));
        }
    }
    files.sort();
    let named = |suffix: &str| -> Vec<&(u64, PathBuf)> {
        files
            .iter()
            .filter(|(_, p)| p.to_string_lossy().ends_with(suffix))
            .collect()
    };
    let mut picked: Vec<&PathBuf> = Vec::new();
    // Tensile's assembly kernels: the two smallest files.
    picked.extend(named("_gfx1030.co").iter().take(2).map(|(_, p)| p));
    // Its source kernels: the smallest, the median and the largest.
    for suffix in ["_gfx1010.hsaco", "_gfx1030.hsaco"] {
        let n = named(suffix);
        if !n.is_empty() {
            for i in [0, n.len() / 2, n.len() - 1] {
                if !picked.contains(&&n[i].1) {
                    picked.push(&n[i].1);
                }
            }
        }
    }
    if picked.is_empty() {
        skip(&format!(
            "rocBLAS part: no gfx1010/gfx1030 Tensile files under {}",
            lib.join("rocblas").display()
        ));
    }
    for p in picked {
        let name = format!("rocBLAS {}", p.file_name().unwrap().to_string_lossy());
        objects_of(&name, &std::fs::read(p).unwrap(), out);
    }
    let rocblas = lib.join("librocblas.so.4");
    if rocblas.exists() {
        for processor in ["gfx1010", "gfx1030"] {
            if let Some(e) = fatbin_entries(&rocblas, processor).filter(|e| !e.is_empty()) {
                pick_entries("librocblas.so.4", &rocblas, &e, &[0.0, 0.5, 0.9], out);
            }
        }
    }
    // MIOpen: a .hip_fatbin in the library, or .kdb kernel databases (sqlite; not read).
    let miopen = lib.join("libMIOpen.so.1");
    if miopen.exists() {
        let before = out.len();
        if let Some(e) = fatbin_entries(&miopen, "gfx1030").filter(|e| !e.is_empty()) {
            pick_entries("libMIOpen.so.1", &miopen, &e, &[0.0, 0.5, 0.9], out);
        }
        let kdb: Vec<String> = [root.join("usr/share/miopen"), lib.join("miopen")]
            .iter()
            .flat_map(|d| walk(d))
            .filter(|p| p.extension().is_some_and(|x| x == "kdb"))
            .map(|p| p.display().to_string())
            .collect();
        if out.len() == before {
            say(&format!(
                "{TEST}: MIOpen: no code object to compare (libMIOpen.so.1 has no gfx1030 \
                 code in a .hip_fatbin; .kdb databases: {})\n",
                if kdb.is_empty() {
                    "none".to_string()
                } else {
                    format!("{} (sqlite, not read here)", kdb.join(", "))
                }
            ));
        }
    }
}

/// Every file under `dir` (none when it is absent).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// (e) Triton's objects, when `RMCP_TRITON_VENV` names its venv.
fn triton_objects(dir: &Path, out: &mut Vec<Object>) {
    let Some(venv) = std::env::var_os("RMCP_TRITON_VENV") else {
        skip("Triton part: RMCP_TRITON_VENV is not set (scripts/triton-venv)");
        return;
    };
    let python = Path::new(&venv).join("bin/python");
    if !python.is_file() {
        missing(&format!(
            "Triton part: no {} (run scripts/triton-venv)",
            python.display()
        ));
        return;
    }
    let dir = dir.join("triton");
    std::fs::create_dir_all(&dir).unwrap();
    let o = Command::new(python)
        .arg(repo().join("tests/triton/compile.py"))
        .arg(&dir)
        .output()
        .expect("run tests/triton/compile.py");
    assert!(
        o.status.success(),
        "tests/triton/compile.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut files: Vec<PathBuf> = walk(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "hsaco"))
        .collect();
    files.sort();
    for p in files {
        let name = format!("Triton {}", p.file_name().unwrap().to_string_lossy());
        objects_of(&name, &std::fs::read(&p).unwrap(), out);
    }
}

/// One instruction of LLVM's listing: file offset, length, and where its line is.
struct Listed {
    at: usize,
    len: usize,
    /// `.long 0x...`: bytes LLVM did not decode.
    unknown: bool,
    line: (usize, usize),
}

/// `llvm-objdump -d` of `elf`: its text and its instructions, sorted by offset.
fn llvm_listing(elf: &[u8], mcpu: &str, file: &Path) -> (String, Vec<Listed>) {
    std::fs::write(file, elf).unwrap();
    let o = Command::new(LLVM_OBJDUMP)
        // -z: runs of zeros too (else shown as `...`; a Tensile object is one function
        // from the scan's view, its kernels padded with zeros).
        .args(["-d", "-z", &format!("--mcpu={mcpu}")])
        .arg(file)
        .output()
        .expect("run llvm-objdump");
    let _ = std::fs::remove_file(file);
    assert!(
        o.status.success(),
        "llvm-objdump: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).expect("llvm-objdump's output is UTF-8");
    let headers = co::section_headers(elf).unwrap().unwrap();
    let exec: Vec<&co::SectionHeader> = headers.iter().filter(|h| h.flags & 4 != 0).collect();
    let mut out = Vec::new();
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let start = pos;
        pos += line.len();
        let Some(c) = line.rfind("//") else {
            continue;
        };
        let Some((addr, words)) = line[c + 2..].trim_start().split_once(':') else {
            continue;
        };
        let Ok(vma) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let n = words
            .split_whitespace()
            .take_while(|w| w.len() == 8 && w.bytes().all(|b| b.is_ascii_hexdigit()))
            .count();
        let Some(h) = exec.iter().find(|h| vma >= h.addr && vma < h.addr + h.size) else {
            continue;
        };
        out.push(Listed {
            at: (vma - h.addr + h.offset) as usize,
            len: 4 * n,
            unknown: line[..c].trim_start().starts_with(".long"),
            line: (start, start + line.len()),
        });
    }
    out.sort_by_key(|l| l.at);
    (text, out)
}

/// The encoding of an instruction's first dword, and the opcode field it has (LLVM's
/// `SIInstrFormats.td` / `*Instructions.td`, GFX10).
fn encoding(w: u32) -> String {
    let (name, op) = if w >> 30 == 0b10 {
        match w >> 23 {
            0x17d => ("SOP1", (w >> 8) & 0xff),
            0x17e => ("SOPC", (w >> 16) & 0x7f),
            0x17f => ("SOPP", (w >> 16) & 0x7f),
            _ if w >> 28 == 0b1011 => ("SOPK", (w >> 23) & 0x1f),
            _ => ("SOP2", (w >> 23) & 0x7f),
        }
    } else if w >> 31 == 0 {
        match (w >> 25) & 0x3f {
            0x3f => ("VOP1", (w >> 9) & 0xff),
            0x3e => ("VOPC", (w >> 17) & 0xff),
            op => ("VOP2", op),
        }
    } else {
        match w >> 26 {
            0b110011 if w >> 24 == 0xcc => ("VOP3P", (w >> 16) & 0x7f),
            0b110101 => ("VOP3", (w >> 16) & 0x3ff),
            0b110010 => ("VINTERP", (w >> 16) & 3),
            0b110110 => ("DS", (w >> 18) & 0xff),
            0b110111 => (
                ["FLAT", "SCRATCH", "GLOBAL", "FLAT?"][((w >> 14) & 3) as usize],
                (w >> 18) & 0x7f,
            ),
            0b111000 => ("MUBUF", (w >> 18) & 0x7f),
            0b111010 => ("MTBUF", (w >> 16) & 7),
            0b111100 => ("MIMG", (w >> 18) & 0x7f),
            0b111101 => ("SMEM", (w >> 18) & 0xff),
            0b111110 => ("EXP", 0),
            top => return format!("top six bits {top:06b}"),
        }
    };
    format!("{name} op {op:#x}")
}

fn hex_words(b: &[u8]) -> String {
    b.chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            format!("{:08X}", u32::from_le_bytes(w))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Undecodable instructions of one encoding and opcode.
#[derive(Default)]
struct Group {
    count: usize,
    /// LLVM's mnemonics for them (a few).
    mnemonics: Vec<String>,
    /// The first: object, offset, LLVM's words.
    example: String,
}

#[derive(Default)]
struct Compared {
    functions: usize,
    instructions: usize,
    mismatches: usize,
    undecodable: usize,
    /// Bytes LLVM shows as `.long` (not compared).
    llvm_unknown: usize,
    capped: bool,
    shown: Vec<String>,
    /// Undecodable instructions by encoding and opcode.
    groups: BTreeMap<String, Group>,
    /// Mismatches by encoding and opcode, and the two lengths.
    mismatch_groups: BTreeMap<String, Group>,
    seconds: f64,
}

impl Group {
    fn add(&mut self, mnemonic: &str, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.mnemonics.len() < 4 && !self.mnemonics.iter().any(|m| m == mnemonic) {
            self.mnemonics.push(mnemonic.to_string());
        }
        if self.example.is_empty() {
            self.example = example();
        }
    }

    fn merge(&mut self, other: &Group) {
        self.count += other.count;
        for m in &other.mnemonics {
            if self.mnemonics.len() < 4 && !self.mnemonics.contains(m) {
                self.mnemonics.push(m.clone());
            }
        }
        if self.example.is_empty() {
            self.example = other.example.clone();
        }
    }
}

/// Groups as a markdown list: key, count, LLVM's mnemonics, the first example.
fn list(groups: &BTreeMap<String, Group>) -> String {
    let mut out = String::new();
    for (k, g) in groups {
        let _ = writeln!(
            out,
            "- {k}: {} ({}), e.g. {}",
            g.count,
            g.mnemonics.join(", "),
            g.example
        );
    }
    out
}

/// Walks every function of `o` with the decoder, against LLVM's listing.
fn compare(o: &Object, file: &Path) -> Compared {
    let t = Instant::now();
    let (text, listing) = llvm_listing(&o.elf, &o.mcpu, file);
    let object = amdgpu::object(&o.elf, None).expect("an AMDGPU ELF");
    let mut c = Compared::default();
    // LLVM's line, its padding squeezed.
    let line = |l: &Listed| {
        text[l.line.0..l.line.1]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    'functions: for f in &object.functions {
        c.functions += 1;
        let code = &o.elf[f.start..f.end];
        let name = f.name.as_deref().unwrap_or("(section)");
        let mut i = listing.partition_point(|l| l.at < f.start);
        let mut at = f.start;
        while at < f.end {
            if c.instructions >= MAX_PER_OBJECT {
                c.capped = true;
                break 'functions;
            }
            let Some(l) = listing.get(i).filter(|l| l.at == at) else {
                c.mismatches += 1;
                c.mismatch_groups
                    .entry("no llvm-objdump instruction where the decoder's walk is".into())
                    .or_default()
                    .add("", || format!("{} {name}+{:#x}", o.name, at - f.start));
                if c.shown.len() < SHOWN {
                    c.shown.push(format!(
                        "{name}+{:#x} (offset {at:#x}): llvm-objdump has no instruction \
                         starting here (bytes {}); the rest of the function is not compared",
                        at - f.start,
                        hex_words(&code[at - f.start..(at - f.start + 8).min(code.len())]),
                    ));
                }
                break;
            };
            i += 1;
            if l.unknown || l.len == 0 {
                c.llvm_unknown += 1;
                at += 4;
                continue;
            }
            if at + l.len > f.end {
                // LLVM's instruction runs past the symbol's end: padding or data.
                c.llvm_unknown += 1;
                break;
            }
            c.instructions += 1;
            let rel = at - f.start;
            let bytes = &code[rel..rel + l.len];
            let w = u32::from_le_bytes(bytes[..4].try_into().unwrap());
            let mnemonic = || line(l).split_whitespace().next().unwrap_or("").to_string();
            let ours = match gfx10::decode(code, rel) {
                Ok(insn) if insn.len == l.len => None,
                Ok(insn) => Some(format!("{} bytes", insn.len)),
                Err(Undecodable::Truncated) => Some("Truncated (past the function's end)".into()),
                Err(Undecodable::Encoding) => {
                    c.undecodable += 1;
                    c.groups
                        .entry(encoding(w))
                        .or_default()
                        .add(&mnemonic(), || {
                            format!("{} {name}+{rel:#x}: `{}`", o.name, line(l))
                        });
                    None
                }
            };
            if let Some(ours) = ours {
                c.mismatches += 1;
                let key = format!(
                    "{}: llvm-objdump {} bytes, decode {ours}",
                    encoding(w),
                    l.len
                );
                c.mismatch_groups
                    .entry(key)
                    .or_default()
                    .add(&mnemonic(), || {
                        format!("{} {name}+{rel:#x}: `{}`", o.name, line(l))
                    });
                if c.shown.len() < SHOWN {
                    c.shown.push(format!(
                        "{name}+{rel:#x} (offset {at:#x}): bytes {}; llvm-objdump: `{}` \
                         ({} bytes); decode: {ours}",
                        hex_words(bytes),
                        line(l),
                        l.len
                    ));
                }
            }
            at += l.len;
        }
    }
    c.seconds = t.elapsed().as_secs_f64();
    c
}

#[test]
fn gfx10_decode_agrees_with_llvm_objdump_on_real_code_objects() {
    let started = Instant::now();
    if !Path::new(LLVM_OBJDUMP).is_file() {
        missing("no llvm-objdump of LLVM 15 (apt-get install llvm-15)");
        return;
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(format!("{TEST}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut objects = Vec::new();
    hipcc_objects(&dir, &mut objects);
    rocsparse_objects(&mut objects);
    if let Some(root) = sid_root() {
        sid_objects(&root, &mut objects);
    }
    triton_objects(&dir, &mut objects);
    if objects.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        skip("no code object to compare");
        return;
    }

    // Two at a time (llvm-objdump is the most of the time).
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Compared>>> =
        Mutex::new((0..objects.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for w in 0..2 {
            let (next, results, objects, dir) = (&next, &results, &objects, &dir);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(o) = objects.get(i) else { break };
                    let c = compare(o, &dir.join(format!("object-{w}.o")));
                    results.lock().unwrap()[i] = Some(c);
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    let results: Vec<Compared> = results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|c| c.expect("compared"))
        .collect();

    let mut md = String::from(
        "# gfx10::decode against llvm-objdump (LLVM 15)\n\n\
         | object | target | bytes | functions | instructions | mismatches | undecodable | \
         llvm .long | seconds |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let (mut total, mut mismatches, mut undecodable) = (0, 0, 0);
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut mismatch_groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut shown = String::new();
    for (o, c) in objects.iter().zip(&results) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {}{} | {} | {} | {} | {:.1} |",
            o.name,
            o.mcpu,
            o.elf.len(),
            c.functions,
            c.instructions,
            if c.capped { " (capped)" } else { "" },
            c.mismatches,
            c.undecodable,
            c.llvm_unknown,
            c.seconds
        );
        total += c.instructions;
        mismatches += c.mismatches;
        undecodable += c.undecodable;
        for s in &c.shown {
            let _ = writeln!(shown, "- {} ({}): {s}", o.name, o.mcpu);
        }
        for (k, g) in &c.groups {
            groups.entry(k.clone()).or_default().merge(g);
        }
        for (k, g) in &c.mismatch_groups {
            mismatch_groups.entry(k.clone()).or_default().merge(g);
        }
    }
    let _ = writeln!(
        md,
        "| **all** | | | | {total} | {mismatches} | {undecodable} ({:.3}%) | | {:.1} |",
        100.0 * undecodable as f64 / total.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    let listed = list(&groups);
    let mismatched = list(&mismatch_groups);
    if !listed.is_empty() {
        let _ = write!(
            md,
            "\n## Undecodable (LLVM decodes them), by encoding and opcode\n\n{listed}"
        );
    }
    if !mismatched.is_empty() {
        let _ = write!(
            md,
            "\n## Mismatches, by encoding, opcode and lengths\n\n{mismatched}\n\
             First {SHOWN} per object, with the bytes:\n\n{shown}"
        );
    }
    say(&format!("{md}\n"));
    std::fs::write(tmp.join(format!("{TEST}.md")), &md).unwrap();

    assert!(total > 0, "no instruction compared");
    assert_eq!(
        mismatches, 0,
        "gfx10::decode disagrees with llvm-objdump on {mismatches} instructions' offset or \
         length; by encoding, opcode and lengths:\n{mismatched}\nfirst {SHOWN} per object:\n\
         {shown}"
    );
    assert_eq!(
        undecodable, 0,
        "gfx10::decode returns Undecodable for {undecodable} of {total} instructions \
         llvm-objdump decodes; by encoding and opcode:\n{listed}"
    );
}
