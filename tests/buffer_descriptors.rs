//! `rmcp_core::buffer_descriptors` on real compiler output (issue 34, item 1):
//! - Triton 3.5.1 from PyPI (scripts/triton-venv; CI sets RMCP_TRITON_VENV), its vector-add
//!   kernel compiled here for gfx1010 and gfx1030 with AMDGCN_USE_BUFFER_OPS on and off: the
//!   gfx1010 buffer-ops object is flagged at exactly the literal and the buffer instructions
//!   LLVM's own disassembler shows, the others are not, and the fix changes those 4 bytes;
//! - hipcc-built gfx1010 kernels whose buffer descriptor is made by hand: word 3 `0x31014000`
//!   (Composable Kernel's RDNA layout) is not flagged, `0x00027000` (Triton's) is;
//! - the real libraries the doctor scans: Debian's rocSPARSE (bookworm; no gfx101x code,
//!   every object scanned) and the gfx101x Tensile code objects of Debian's rocBLAS in the
//!   compatibility roots (RMCP_COMPAT_CACHE): decoded to the end, none flagged.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rmcp_core::buffer_descriptors::{
    CodeObjectScan, ImageScan, fix_image, fixed_word3, image_len, scan_image,
};
use rmcp_core::code_objects::{self as co, FATBIN_SECTION};
use rmcp_testkit::{hipcc, missing, repo, which};

/// Triton's four objects (`rmcp_testkit::triton_objects`), compiled once per test process.
fn triton_objects() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("rmcp-triton-objects-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        rmcp_testkit::triton_objects(&dir)?;
        Some(dir)
    })
    .as_deref()
}

/// LLVM's disassembler: the one of the LLVM hipcc uses (Debian's hipcc depends on
/// llvm-15), else `llvm-objdump` on PATH.
fn objdump() -> Option<PathBuf> {
    let found = Some(PathBuf::from("/usr/lib/llvm-15/bin/llvm-objdump"))
        .filter(|p| p.is_file())
        .or_else(|| which("llvm-objdump"));
    if found.is_none() {
        missing("no llvm-objdump (apt-get install hipcc, which brings llvm-15)");
    }
    found
}

/// What LLVM's disassembler shows in an AMDGPU ELF: (file offset, text) of each
/// instruction.
fn disassemble(objdump: &Path, elf: &[u8], mcpu: &str) -> Vec<(usize, String)> {
    let file = std::env::temp_dir().join(format!(
        "rmcp-bd-{}-{:x}.elf",
        std::process::id(),
        elf.len() ^ elf.iter().take(4096).map(|&b| b as usize).sum::<usize>()
    ));
    std::fs::write(&file, elf).unwrap();
    let out = Command::new(objdump)
        .args(["-d", &format!("--mcpu={mcpu}")])
        .arg(&file)
        .output()
        .unwrap();
    std::fs::remove_file(&file).ok();
    assert!(out.status.success(), "{out:?}");
    // VMA -> file offset through the executable sections' headers.
    let headers = co::section_headers(elf).unwrap().unwrap();
    let to_offset = |vma: u64| {
        headers
            .iter()
            .find(|h| h.flags & 4 != 0 && vma >= h.addr && vma < h.addr + h.size)
            .map(|h| (vma - h.addr + h.offset) as usize)
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (text, rest) = l.split_once("//")?;
            let vma = u64::from_str_radix(rest.trim().split(':').next()?, 16).ok()?;
            Some((to_offset(vma)?, text.trim().to_string()))
        })
        .collect()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A copy of an AMDGPU ELF whose header names another processor (`EF_AMDGPU_MACH`).
fn with_mach(elf: &[u8], mach: u8) -> Vec<u8> {
    let mut b = elf.to_vec();
    b[0x30] = mach;
    b
}

/// Checks what the fix changes: exactly the findings' literals, to the RDNA layout.
fn check_fix(image: &[u8], scan: &ImageScan) {
    let fixed = fix_image(image, scan).expect("something to fix");
    assert_eq!(fixed.len(), image.len());
    let changed: Vec<usize> = (0..image.len()).filter(|&i| fixed[i] != image[i]).collect();
    let mut allowed = BTreeSet::new();
    for (_, f) in scan.findings() {
        allowed.extend(f.literal_at..f.literal_at + 4);
        let now = u32::from_le_bytes(fixed[f.literal_at..f.literal_at + 4].try_into().unwrap());
        assert_eq!(now, fixed_word3(f.word3));
    }
    assert!(changed.iter().all(|i| allowed.contains(i)), "{changed:?}");
    let again = scan_image(&fixed).unwrap();
    assert_eq!(again.literals(), 0, "{again:?}");
    assert_eq!(fix_image(&fixed, &again), None);
}

fn only(scan: &ImageScan) -> &CodeObjectScan {
    assert_eq!(scan.objects.len(), 1, "{scan:?}");
    &scan.objects[0]
}

#[test]
fn triton_gfx1010_buffer_ops_object_is_flagged_at_the_disassemblers_instructions() {
    let (Some(dir), Some(objdump)) = (triton_objects(), objdump()) else {
        return;
    };
    let image = read(&dir.join("add-gfx1010-bufops1.hsaco"));
    let scan = scan_image(&image).unwrap();
    let obj = only(&scan);
    assert_eq!(obj.target, "amdgcn-amd-amdhsa--gfx1010");
    assert_eq!(obj.gfx.map(|g| g.to_string()).as_deref(), Some("gfx1010"));
    assert!(obj.runs_on_rdna1());
    assert_eq!(obj.kernels, 1);
    assert_eq!(obj.undecodable, None);
    assert_eq!(obj.literal_word3, obj.buffer_instructions);

    let listing = disassemble(&objdump, &image, "gfx1010");
    let movs: Vec<usize> = listing
        .iter()
        .filter(|(_, t)| t.starts_with("s_mov_b32") && t.ends_with(", 0x27000"))
        .map(|(at, _)| *at)
        .collect();
    let buffers: Vec<usize> = listing
        .iter()
        .filter(|(_, t)| t.starts_with("buffer_load") || t.starts_with("buffer_store"))
        .map(|(at, _)| *at)
        .collect();
    // The claim: one `s_mov_b32 s3, 0x27000` feeding buffer loads and stores.
    assert_eq!(movs.len(), 1, "{listing:?}");
    assert!(listing.iter().any(|(_, t)| t == "s_mov_b32 s3, 0x27000"));
    assert!(buffers.len() >= 2, "{listing:?}");

    assert_eq!(obj.findings.len(), 1, "{obj:?}");
    let f = &obj.findings[0];
    assert_eq!(f.word3, 0x0002_7000);
    assert_eq!(f.literal_at, movs[0] + 4);
    assert_eq!(f.buffer_at, buffers);
    assert_eq!(f.kernel.as_deref(), Some("add_kernel"));
    assert_eq!(scan.broken_buffer_instructions(), buffers.len());
    assert_eq!(scan.kernels_with_findings(), 1);
    check_fix(&image, &scan);
}

#[test]
fn triton_buffer_ops_off_and_gfx1030_objects_are_not_flagged() {
    let (Some(dir), Some(objdump)) = (triton_objects(), objdump()) else {
        return;
    };
    for (name, mcpu) in [
        ("add-gfx1010-bufops0.hsaco", "gfx1010"),
        ("add-gfx1030-bufops0.hsaco", "gfx1030"),
        ("add-gfx1030-bufops1.hsaco", "gfx1030"),
    ] {
        let image = read(&dir.join(name));
        let scan = scan_image(&image).unwrap();
        let obj = only(&scan);
        assert_eq!(obj.target, format!("amdgcn-amd-amdhsa--{mcpu}"), "{name}");
        assert!(obj.findings.is_empty(), "{name}: {obj:?}");
        assert_eq!(fix_image(&image, &scan), None, "{name}");
        // The same code read as gfx1010 code (its header rewritten): decoded to the end,
        // and still nothing (buffer ops off: global_load/store; gfx1030: Triton's RDNA2
        // layout, 0x31027000).
        let as_rdna1 = with_mach(&image, 0x33);
        let scan = scan_image(&as_rdna1).unwrap();
        let obj = only(&scan);
        assert!(obj.runs_on_rdna1(), "{name}");
        assert_eq!(obj.undecodable, None, "{name}");
        assert!(obj.findings.is_empty(), "{name}: {obj:?}");
        let listing = disassemble(&objdump, &image, mcpu);
        if name.ends_with("bufops1.hsaco") {
            assert!(
                listing.iter().any(|(_, t)| t == "s_mov_b32 s3, 0x31027000"),
                "{name}: {listing:?}"
            );
        } else {
            assert!(
                !listing.iter().any(|(_, t)| t.starts_with("buffer_")),
                "{name}: {listing:?}"
            );
        }
    }
    // And the broken gfx1010 object read as gfx1030 code: another target, not scanned.
    let image = with_mach(&read(&dir.join("add-gfx1010-bufops1.hsaco")), 0x36);
    assert_eq!(scan_image(&image).unwrap().literals(), 0);
}

/// A gfx1010 kernel that loads and stores through raw buffer descriptors made by hand
/// with word 3 = `word3`, built by hipcc (an offload bundle;
/// `rmcp_testkit::buffer_kernel_object`).
fn hipcc_buffer_kernel(dir: &Path, word3: &str) -> Option<Vec<u8>> {
    rmcp_testkit::buffer_kernel_object(dir, word3).map(|co| read(&co))
}

#[test]
fn hipcc_buffer_kernels_flagged_only_with_the_cdna_layout() {
    let dir = tempfile::tempdir().unwrap();
    let Some(good) = hipcc_buffer_kernel(dir.path(), "0x31014000") else {
        return;
    };
    let Some(bad) = hipcc_buffer_kernel(dir.path(), "0x00027000") else {
        return;
    };
    let scan = scan_image(&good).unwrap();
    let obj = only(&scan);
    assert_eq!(obj.target, "amdgcn-amd-amdhsa--gfx1010");
    assert_eq!(obj.kernels, 1);
    assert_eq!(obj.undecodable, None);
    assert!(obj.findings.is_empty(), "{obj:?}");
    assert_eq!((obj.buffer_instructions, obj.literal_word3), (2, 2));
    assert_eq!(fix_image(&good, &scan), None);

    let scan = scan_image(&bad).unwrap();
    let obj = only(&scan);
    assert_eq!(obj.findings.len(), 1, "{obj:?}");
    let f = &obj.findings[0];
    assert_eq!(f.word3, 0x0002_7000);
    assert_eq!(f.kernel.as_deref(), Some("copy"));
    // Against the disassembly of the bundle's entry.
    if let Some(objdump) = objdump() {
        let elf = &bad[obj.at..obj.at + obj.len];
        let listing = disassemble(&objdump, elf, "gfx1010");
        let lit = listing
            .iter()
            .find(|(_, t)| t.starts_with("s_mov_b32") && t.ends_with(", 0x27000"))
            .map(|(at, _)| obj.at + at + 4);
        let buffers: Vec<usize> = listing
            .iter()
            .filter(|(_, t)| t.starts_with("buffer_"))
            .map(|(at, _)| obj.at + at)
            .collect();
        assert_eq!(Some(f.literal_at), lit, "{listing:?}");
        assert_eq!(f.buffer_at, buffers, "{listing:?}");
        assert_eq!(buffers.len(), 2, "{listing:?}");
    }
    check_fix(&bad, &scan);
    // The bundle's length from its headers alone, read piece by piece.
    let mut reads = 0;
    let len = image_len(&mut |at, buf| {
        reads += 1;
        match bad.get(at..at + buf.len()) {
            Some(b) => {
                buf.copy_from_slice(b);
                true
            }
            None => false,
        }
    });
    assert_eq!(len, Some(bad.len()));
    assert!(reads <= 8, "{reads} reads");
}

/// Every code object of a HIP library's `.hip_fatbin` (plain bundles; each bundle's
/// length from its own headers, as the shim finds it).
fn fatbin_scans(data: &[u8]) -> Vec<ImageScan> {
    let Some(section) = co::find_section(data, FATBIN_SECTION).unwrap() else {
        return Vec::new();
    };
    let fat = co::scan_fatbin(data, section.offset, section.size);
    let mut out = Vec::new();
    for b in &fat.bundles {
        let start = b.offset as usize;
        let len = image_len(
            &mut |at, buf| match data.get(start + at..start + at + buf.len()) {
                Some(s) => {
                    buf.copy_from_slice(s);
                    true
                }
                None => false,
            },
        )
        .expect("bundle length");
        out.push(scan_image(&data[start..start + len]).unwrap());
    }
    out
}

/// Checks the RDNA1 objects of `scans`: decoded to the end, none flagged; returns how many
/// objects, kernels, buffer instructions and buffer instructions whose word 3 the scan
/// followed to a literal.
fn none_flagged(what: &str, scans: &[ImageScan]) -> [usize; 4] {
    let mut n = [0; 4];
    for obj in scans.iter().flat_map(|s| &s.objects) {
        if !obj.runs_on_rdna1() {
            continue;
        }
        n[0] += 1;
        n[1] += obj.kernels;
        n[2] += obj.buffer_instructions;
        n[3] += obj.literal_word3;
        assert_eq!(obj.undecodable, None, "{what} {}: {obj:?}", obj.target);
        assert!(
            obj.findings.is_empty(),
            "{what} {}: {:?}",
            obj.target,
            obj.findings
        );
    }
    n
}

/// Debian's rocSPARSE (librocsparse0, ROCm 5.3 in bookworm): every code object scanned
/// (it carries no gfx101x code: gfx803, gfx900, gfx906, gfx908, gfx90a, gfx1030).
#[test]
fn debian_rocsparse_scans_without_error() {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/librocsparse.so.0");
    if !lib.exists() {
        missing("no librocsparse0 (apt-get install librocsparse0)");
        return;
    }
    let scans = fatbin_scans(&read(lib));
    assert!(!scans.is_empty());
    let objects: usize = scans.iter().map(|s| s.objects.len()).sum();
    assert!(objects > 0);
    assert_eq!(none_flagged("rocSPARSE", &scans)[0], 0);
    assert!(scans.iter().all(|s| s.literals() == 0));
}

/// Debian's rocBLAS in the compatibility roots (sid: ROCm 6.4, experimental: 7.2;
/// tests/compat/run builds them into RMCP_COMPAT_CACHE, default /var/cache/rmcp-compat in
/// CI; skipped when they are not there): its gfx101x Tensile code objects (the files the
/// doctor's code-objects check reads), every one decoded to the end and none flagged.
#[test]
fn debian_rocblas_gfx101x_tensile_objects_are_not_flagged() {
    let cache = std::env::var_os("RMCP_COMPAT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/rmcp-compat"));
    let mut files = Vec::new();
    for root in ["sid", "exp"] {
        let libdir = cache
            .join("roots")
            .join(root)
            .join("usr/lib/x86_64-linux-gnu/rocblas");
        let Ok(versions) = std::fs::read_dir(&libdir) else {
            continue;
        };
        for v in versions.flatten() {
            let Ok(entries) = std::fs::read_dir(v.path().join("library")) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains("gfx101") && (name.ends_with(".hsaco") || name.ends_with(".co")) {
                    files.push(e.path());
                }
            }
        }
    }
    if files.is_empty() {
        // As tests/cli_code_objects.rs: the roots are made after the tests in .ci/run.
        rmcp_testkit::skip(&format!(
            "no Debian sid/experimental root with rocBLAS under {} (tests/compat/run builds it)",
            cache.display()
        ));
        return;
    }
    files.sort();
    let mut n = [0; 4];
    for f in &files {
        let image = read(f);
        let scan = scan_image(&image).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let one = none_flagged(&f.display().to_string(), std::slice::from_ref(&scan));
        for i in 0..4 {
            n[i] += one[i];
        }
    }
    eprintln!(
        "rocBLAS: {} files, {} gfx101x code objects, {} kernels, {} buffer instructions, \
         {} with a literal word 3 followed; none flagged",
        files.len(),
        n[0],
        n[1],
        n[2],
        n[3]
    );
    // (Debian ships only Tensile's fallback kernels for gfx101x, compiled from source: their
    // buffer instructions are scratch accesses through the kernel's own descriptor, never
    // a literal word 3.)
    assert!(n[0] > 0 && n[1] > 0, "{n:?}");
}

/// `rmcp check`'s own buffer-layout kernels (src/field_check/kernels.hip, built as build.rs
/// builds them): the Triton-layout kernel is flagged, at its one literal feeding its store
/// and load, so the shim's load-time rewrite applies to it as to a Triton kernel; the
/// RDNA-layout kernel, the control and the atomics kernels are not.
#[test]
fn rmcp_checks_triton_layout_kernel_is_flagged_and_only_it() {
    let Some(hipcc) = hipcc() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let co = dir.path().join("check.co");
    let out = Command::new(hipcc)
        .args(["--genco", "-nogpuinc", "-nogpulib", "-O2", "-Wall"])
        .args(["--offload-arch=gfx1010", "--offload-arch=gfx1030"])
        .arg(repo().join("src/field_check/kernels.hip"))
        .arg("-o")
        .arg(&co)
        .output()
        .expect("run hipcc");
    assert!(out.status.success(), "hipcc: {out:?}");
    let image = read(&co);
    let scan = scan_image(&image).unwrap();
    assert_eq!(scan.objects.len(), 2, "{scan:?}");
    for obj in &scan.objects {
        assert_eq!(obj.kernels, 7, "{obj:?}");
        if obj.target.ends_with("gfx1030") {
            assert!(obj.findings.is_empty());
            continue;
        }
        assert_eq!(obj.undecodable, None);
        assert_eq!(obj.findings.len(), 1, "{obj:?}");
        let f = &obj.findings[0];
        assert_eq!(f.kernel.as_deref(), Some("rmcp_check_buffer_triton"));
        assert_eq!(f.word3, 0x0002_7000);
        assert_eq!(f.buffer_at.len(), 2);
        // Both buffer kernels' word 3 were followed (the RDNA one to 0x31027000).
        assert_eq!(obj.literal_word3, 4, "{obj:?}");
    }
    check_fix(&image, &scan);
}
