//! The `code-objects` check of `rmcp doctor` against real and constructed GPU code:
//! - fat binaries built here by Debian's hipcc (ROCm 5.2.3) for chosen targets;
//! - Debian's rocSPARSE (librocsparse0), its targets checked against what LLVM's own
//!   clang-offload-bundler lists;
//! - compressed bundles and generic targets, which hipcc 5.2.3 cannot make, built byte by
//!   byte from the LLVM layout (`rmcp_core::code_objects::write`), plus a zstd stream made
//!   by the real zstd tool when it is installed;
//! - Tensile directories, MIOpen kernel databases, corrupt files, site-packages.
//!
//! GPUs come from the KFD fixtures (rdna1 gfx1010, rdna2 gfx1031, rdna3 gfx1100).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use rmcp_core::code_objects::{FATBIN_SECTION, Method, write};
use rmcp_testkit::{code_objects_row, fixture, hip_fat_libraries, missing, which};
use serde_json::Value;

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");

fn doctor(sysfs: &str, scan: &[&Path], vars: &[(&str, &str)], json: bool) -> Output {
    let mut c = Command::new(RMCP);
    c.env_clear();
    for k in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(k) {
            c.env(k, v);
        }
    }
    c.env("RMCP_PYTHON", "");
    // The gfx101x scan's cache (RX 5000 under 10.3.0) stays out of the home directory.
    c.env(
        "RMCP_CACHE_DIR",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("code-objects-cache"),
    );
    for (k, v) in vars {
        c.env(k, v);
    }
    c.arg("doctor").arg("--sysfs").arg(fixture(sysfs));
    if !scan.is_empty() {
        c.arg("--scan").args(scan);
    }
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{out:?}"
    );
    out
}

fn json(sysfs: &str, scan: &[&Path], vars: &[(&str, &str)]) -> (Option<i32>, Value) {
    let out = doctor(sysfs, scan, vars, true);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), v)
}

/// The human-readable doctor output.
fn text(sysfs: &str, scan: &[&Path], vars: &[(&str, &str)]) -> String {
    String::from_utf8(doctor(sysfs, scan, vars, false).stdout).unwrap()
}

fn code_findings(j: &Value) -> Vec<&Value> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "code-objects")
        .collect()
}

/// (verdict, status) of a library for the fixture's one GPU.
fn verdict(j: &Value, path: &Path) -> (String, String) {
    let g = &code_objects_row(j, path)["gpus"][0];
    (
        g["verdict"].as_str().unwrap().to_string(),
        g["status"].as_str().unwrap().to_string(),
    )
}

fn pair(v: &str, s: &str) -> (String, String) {
    (v.to_string(), s.to_string())
}

fn targets(j: &Value, path: &Path) -> Vec<String> {
    code_objects_row(j, path)["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

/// The message of the code-objects finding with this verdict.
fn message_for(j: &Value, verdict: &str) -> String {
    code_findings(j)
        .into_iter()
        .find(|f| f["verdict"] == verdict)
        .unwrap_or_else(|| panic!("no {verdict} finding in {:#}", j["findings"]))["message"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Shared libraries built once per test run by hipcc: libk_1030_900.so
/// (`--offload-arch=gfx1030 --offload-arch=gfx900`) and libk_1010_1030.so. None without
/// hipcc: each test asking records its skip (or fails where prerequisites are required).
fn hip_libs() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    let built = BUILT
        .get_or_init(|| {
            let hipcc = which("hipcc")?;
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("code-objects-hipcc");
            hip_fat_libraries(
                &hipcc,
                &dir,
                &[
                    ("libk_1030_900.so", &["gfx1030", "gfx900"]),
                    ("libk_1010_1030.so", &["gfx1010", "gfx1030"]),
                ],
            );
            Some(dir)
        })
        .as_deref();
    if built.is_none() {
        missing("no hipcc, Debian's ROCm 5.2.3, for real fat binaries (apt-get install hipcc)");
    }
    built
}

#[test]
fn hipcc_library_without_the_cards_code() {
    let Some(dir) = hip_libs() else { return };
    let lib = dir.join("libk_1030_900.so");
    let (code, j) = json("rdna1", &[&lib], &[]);
    assert_eq!(targets(&j, &lib), ["gfx900", "gfx1030"]);
    assert_eq!(code_objects_row(&j, &lib)["format"], "plain");
    assert_eq!(code_objects_row(&j, &lib)["bundles"], 1);
    assert_eq!(verdict(&j, &lib), pair("missing", "error"));
    assert_eq!(code, Some(1));
    let m = message_for(&j, "missing");
    assert!(
        m.contains("no gfx1010 code") && m.contains("hipErrorNoBinaryForGpu"),
        "{m}"
    );
    assert!(
        m.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0") && m.contains("hangs"),
        "{m}"
    );

    // The usual workaround: the runtime loads the gfx1030 code on gfx1010 silicon.
    let (code, j) = json("rdna1", &[&lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    assert_eq!(verdict(&j, &lib), pair("override", "error"));
    assert_eq!(
        code_objects_row(&j, &lib)["gpus"][0]["runtime_gfx"],
        "gfx1030"
    );
    assert_eq!(code, Some(1));
    let m = message_for(&j, "override");
    assert!(m.contains("RDNA2 code on RDNA1 silicon"), "{m}");
    // The human output says the same, in the same order, within 80 columns.
    let text = text("rdna1", &[&lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let flat = squash(&text);
    let mut at = 0;
    for f in code_findings(&j) {
        let m = squash(f["message"].as_str().unwrap());
        at += flat[at..]
            .find(&m)
            .unwrap_or_else(|| panic!("{m} not in order in {text}"));
    }
    if let Err(e) = rmcp_testkit::check_doctor_layout(&text) {
        panic!("{e} in\n{text}");
    }
    // 10.1.0, the matching value, gives the runtime gfx1010, which the library lacks.
    let (_, j) = json("rdna1", &[&lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.1.0")]);
    assert_eq!(verdict(&j, &lib), pair("missing", "error"));
}

#[test]
fn hipcc_library_on_rdna2_and_rdna3() {
    let Some(dir) = hip_libs() else { return };
    let lib = dir.join("libk_1030_900.so");
    // gfx1031 cannot load gfx1030 code without the override; with it, same family: ok.
    let (_, j) = json("rdna2", &[&lib], &[]);
    assert_eq!(verdict(&j, &lib), pair("missing", "error"));
    let m = message_for(&j, "missing");
    assert!(
        m.contains("HSA_OVERRIDE_GFX_VERSION=10.3.0 makes the runtime load it"),
        "{m}"
    );
    let (_, j) = json("rdna2", &[&lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    assert_eq!(verdict(&j, &lib), pair("override", "ok"));
    let (_, j) = json("rdna3", &[&lib], &[]);
    assert_eq!(verdict(&j, &lib), pair("missing", "error"));
}

#[test]
fn hipcc_library_with_the_cards_code() {
    let Some(dir) = hip_libs() else { return };
    let lib = dir.join("libk_1010_1030.so");
    let (_, j) = json("rdna1", &[&lib], &[]);
    assert_eq!(targets(&j, &lib), ["gfx1010", "gfx1030"]);
    assert_eq!(verdict(&j, &lib), pair("present", "ok"));
    let f = code_findings(&j);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0]["status"], "ok");
    // With the override the runtime takes the gfx1030 code even though gfx1010 is there.
    let (_, j) = json("rdna1", &[&lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    assert_eq!(verdict(&j, &lib), pair("override", "error"));
    // The messages say the gfx1010 code is there, unused, not that it is missing.
    let m = message_for(&j, "override");
    assert!(
        m.contains("gfx1010 code too, which the override leaves unused")
            && m.ends_with("Unset the override.")
            && !m.contains("no gfx1010"),
        "{m}"
    );
    let text = text("rdna1", &[&lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "gfx1010 code present, but the override makes the runtime load its gfx1030 code"
        ),
        "{text}"
    );
    // Both libraries in one scan of the directory: the summary counts them.
    let (_, j) = json("rdna1", &[dir], &[]);
    let summary = code_findings(&j)[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        summary,
        "node 1 (gfx1010): 1 of 2 HIP libraries found carry gfx1010 code (or a generic \
         target covering it)."
    );
    let text = String::from_utf8(doctor("rdna1", &[dir], &[], false).stdout).unwrap();
    assert!(
        text.contains("error code-objects  node 1 (gfx1010): 1 of 2"),
        "{text}"
    );
}

/// A compressed bundle around a zstd stream made by the zstd tool (libzstd, long-distance
/// matching on as clang asks for), when it is installed.
fn zstd_tool_bundle(plain: &[u8], tmp: &Path) -> Option<Vec<u8>> {
    let zstd = which("zstd")?;
    let input = tmp.join("plain.bin");
    std::fs::write(&input, plain).unwrap();
    let out = Command::new(zstd)
        .args(["-q", "-3", "--long=27", "-c"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    Some(write::with_stream(
        3,
        Method::Zstd,
        plain.len() as u64,
        &out.stdout,
    ))
}

#[test]
fn compressed_bundles_and_generic_targets() {
    let tmp = tempfile::tempdir().unwrap();
    let generic = write::hip_bundle(&["gfx10-1-generic", "gfx10-3-generic", "gfx11-generic"]);
    let mut bundles = vec![
        write::compressed(2, Method::Zlib, &generic),
        write::compressed(
            3,
            Method::Zstd,
            &write::hip_bundle(&["gfx10-1-generic:xnack-", "gfx1030"]),
        ),
        write::compressed(1, Method::Zlib, &write::hip_bundle(&["gfx1010", "gfx1100"])),
    ];
    let tool = zstd_tool_bundle(
        &write::hip_bundle(&["gfx1011", "gfx10-1-generic"]),
        tmp.path(),
    );
    if let Some(b) = tool {
        bundles.insert(2, b);
    } else {
        eprintln!("note: no zstd tool; the zstd stream comes from ruzstd's encoder only");
    }
    let lib = tmp.path().join("libgeneric.so");
    std::fs::write(
        &lib,
        write::elf(&[(FATBIN_SECTION, &write::section(&bundles))]),
    )
    .unwrap();
    let (_, j) = json("rdna1", &[&lib], &[]);
    let r = code_objects_row(&j, &lib);
    assert_eq!(r["format"], "compressed-bundle");
    assert_eq!(r["compression"], "zlib v1, zlib v2, zstd v3");
    assert_eq!(r["bundles"], bundles.len());
    assert_eq!(verdict(&j, &lib), pair("present", "ok"));
    assert!(code_findings(&j).iter().all(|f| f["status"] == "ok"));
    // gfx1031 (RDNA2) through gfx10-3-generic in the first bundle only.
    let (_, j) = json("rdna2", &[&lib], &[]);
    assert_eq!(verdict(&j, &lib), pair("partial", "error"));
    assert!(message_for(&j, "partial").contains("only some of the fat binaries"));
    // gfx1100 (RDNA3): gfx11-generic and gfx1100, but not in the second bundle.
    let (_, j) = json("rdna3", &[&lib], &[]);
    assert_eq!(verdict(&j, &lib), pair("partial", "error"));

    // Code for the real ISA only, and an override that asks for another.
    let only = tmp.path().join("libonly1010.so");
    let sec = write::section(&[write::compressed(
        3,
        Method::Zlib,
        &write::hip_bundle(&["gfx1010"]),
    )]);
    std::fs::write(&only, write::elf(&[(FATBIN_SECTION, &sec)])).unwrap();
    let (_, j) = json("rdna1", &[&only], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    assert_eq!(verdict(&j, &only), pair("override-misses", "error"));
    assert!(message_for(&j, "override-misses").contains("Unset the override"));
}

#[test]
fn tensile_and_kernel_databases() {
    let tmp = tempfile::tempdir().unwrap();
    let tensile = tmp.path().join("rocblas/library");
    let kdb = tmp.path().join("miopen/db");
    std::fs::create_dir_all(&tensile).unwrap();
    std::fs::create_dir_all(&kdb).unwrap();
    for f in [
        "TensileLibrary_lazy_gfx1030.dat",
        "TensileLibrary_Type_HH_Contraction_l_Alik_Bjlk_Cijk_Dijk_gfx1030.co",
        "TensileLibrary_Type_HH_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx90a-xnack+.hsaco",
        "TensileManifest.txt",
    ] {
        std::fs::write(tensile.join(f), b"").unwrap();
    }
    std::fs::write(kdb.join("gfx1030_36.kdb"), b"").unwrap();
    let (code, j) = json("rdna1", &[tmp.path()], &[]);
    assert_eq!(targets(&j, &tensile), ["gfx90a:xnack+", "gfx1030"]);
    assert_eq!(code_objects_row(&j, &tensile)["format"], "tensile");
    assert_eq!(code_objects_row(&j, &tensile)["name"], "rocBLAS (Tensile)");
    assert_eq!(verdict(&j, &tensile), pair("missing", "error"));
    assert!(message_for(&j, "missing").contains("Cannot read TensileLibrary.dat"));
    assert_eq!(code_objects_row(&j, &kdb)["format"], "kdb");
    assert_eq!(verdict(&j, &kdb), pair("missing", "info"));
    assert_eq!(code, Some(1));
    // RDNA2 with the override: Tensile gfx1030 files and the gfx1030 database serve it.
    let (_, j) = json(
        "rdna2",
        &[tmp.path()],
        &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")],
    );
    assert_eq!(verdict(&j, &tensile), pair("override", "ok"));
    assert_eq!(verdict(&j, &kdb), pair("present", "ok"));
}

#[test]
fn corrupt_files_are_one_warning_each() {
    let tmp = tempfile::tempdir().unwrap();
    let good = write::section(&[
        write::hip_bundle(&["gfx1030"]),
        write::hip_bundle(&["gfx1100"]),
    ]);
    let elf = write::elf(&[(FATBIN_SECTION, &good)]);
    // Section headers cut off.
    std::fs::write(tmp.path().join("libcut.so"), &elf[..elf.len() - 40]).unwrap();
    // The second bundle's table overwritten.
    let mut bad = elf.clone();
    let second = 4096 + 2 * 4096;
    bad[second..second + 64].fill(0xee);
    std::fs::write(tmp.path().join("libbad.so"), &bad).unwrap();
    // A compressed stream cut short.
    let c = write::compressed(3, Method::Zstd, &write::hip_bundle(&["gfx1030"]));
    let sec = write::section(&[c[..40].to_vec()]);
    std::fs::write(
        tmp.path().join("libz.so"),
        write::elf(&[(FATBIN_SECTION, &sec)]),
    )
    .unwrap();
    // Not ELF at all, and an empty file: not HIP libraries, no finding.
    std::fs::write(tmp.path().join("libtext.so"), b"INPUT(-lfoo)\n").unwrap();
    std::fs::write(tmp.path().join("libempty.so"), b"").unwrap();
    let (code, j) = json("cpu-only", &[tmp.path()], &[]);
    assert_eq!(code, Some(0), "{j:#}");
    let warns: Vec<&Value> = code_findings(&j)
        .into_iter()
        .filter(|f| f["status"] == "warn")
        .collect();
    assert_eq!(warns.len(), 3, "{warns:#?}");
    for name in ["libcut.so", "libbad.so", "libz.so"] {
        assert!(
            warns
                .iter()
                .any(|w| w["path"].as_str().unwrap().ends_with(name)),
            "{name}: {warns:#?}"
        );
    }
    // What was read before the damage is kept.
    assert_eq!(targets(&j, &tmp.path().join("libbad.so")), ["gfx1030"]);
}

#[test]
fn default_places_include_python_site_packages() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let sp = root.join("venv/lib/python3.11/site-packages");
    std::fs::create_dir_all(sp.join("torch/lib")).unwrap();
    std::fs::create_dir_all(sp.join("torch-2.5.1+rocm6.2.dist-info")).unwrap();
    let sec = write::section(&[write::hip_bundle(&["gfx1030", "gfx1100"])]);
    let lib = sp.join("torch/lib/libtorch_hip.so");
    std::fs::write(&lib, write::elf(&[(FATBIN_SECTION, &sec)])).unwrap();
    let src = root.join("fake-python3.src");
    let py = root.join("fake-python3");
    std::fs::write(
        &src,
        format!("#!/bin/sh\nprintf '%s\\n' '{}'\n", sp.display()),
    )
    .unwrap();
    // Installed by a child process (see cli_doctor.rs: ETXTBSY).
    assert!(
        Command::new("install")
            .args(["-m", "0755"])
            .arg(&src)
            .arg(&py)
            .status()
            .unwrap()
            .success()
    );
    let (_, j) = json("rdna1", &[], &[("RMCP_PYTHON", py.to_str().unwrap())]);
    let r = code_objects_row(&j, &lib);
    assert_eq!(r["name"], "PyTorch");
    assert_eq!(
        r["package"].as_str().unwrap(),
        format!("torch 2.5.1+rocm6.2 in {}", root.join("venv").display())
    );
    assert_eq!(verdict(&j, &lib), pair("missing", "error"));
    let summary = code_findings(&j)
        .into_iter()
        .find(|f| f["node"] == 1 && f["places"].is_array())
        .unwrap();
    assert!(
        summary["places"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == sp.to_str().unwrap())
    );
}

/// The section's offset in the file, from binutils' readelf (not rmcp's reader).
fn readelf_section(file: &Path, name: &str) -> Option<(u64, u64)> {
    let out = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(file)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains(&format!(" {name} ")))?;
    let f: Vec<&str> = line.split(']').nth(1)?.split_whitespace().collect();
    // Name Type Address Off Size ...
    Some((
        u64::from_str_radix(f[3], 16).ok()?,
        u64::from_str_radix(f[4], 16).ok()?,
    ))
}

/// Debian's rocSPARSE (librocsparse0, bookworm: ROCm 5.3.0). The expected targets are what
/// LLVM's own clang-offload-bundler (clang-15, installed with hipcc) lists for the first
/// bundle of its .hip_fatbin, located with readelf; the expected verdicts follow from that
/// list and the fixtures' ISAs.
#[test]
fn debian_rocsparse_against_llvms_bundler() {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/librocsparse.so.0");
    let bundler = Path::new("/usr/lib/llvm-15/bin/clang-offload-bundler");
    if !lib.exists() || !bundler.exists() {
        missing("no librocsparse0 or clang-offload-bundler (apt-get install librocsparse0 hipcc)");
        return;
    }
    let (offset, _) = readelf_section(lib, FATBIN_SECTION).expect("readelf -S");
    let tmp = tempfile::tempdir().unwrap();
    let head = tmp.path().join("head.bundle");
    let ok = Command::new("dd")
        .arg(format!("if={}", lib.display()))
        .arg(format!("of={}", head.display()))
        // 64 MiB: the whole first bundle (clang 15's bundler crashes on a cut one).
        .args(["bs=4096", "count=16384", "status=none"])
        .arg(format!("skip={}", offset / 4096))
        .status()
        .unwrap();
    assert!(ok.success() && offset % 4096 == 0);
    let out = Command::new(bundler)
        .args(["--list", "--type=bc"])
        .arg(format!("--input={}", head.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut llvm: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("hipv4-amdgcn-amd-amdhsa--"))
        .map(str::to_string)
        .collect();
    llvm.sort();
    llvm.dedup();
    assert!(!llvm.is_empty());

    let (_, j) = json("rdna1", &[lib], &[]);
    let mut ours = targets(&j, lib);
    ours.sort();
    assert_eq!(
        ours, llvm,
        "rmcp's targets against clang-offload-bundler --list"
    );
    let r = code_objects_row(&j, lib);
    assert_eq!(r["name"], "rocSPARSE");
    assert!(
        r["package"].as_str().unwrap().starts_with("librocsparse0 "),
        "{r:#}"
    );
    assert!(r["bundles"].as_u64().unwrap() > 1);
    for (fixture_name, gfx) in [
        ("rdna1", "gfx1010"),
        ("rdna2", "gfx1031"),
        ("rdna3", "gfx1100"),
    ] {
        let (_, j) = json(fixture_name, &[lib], &[]);
        let want = if llvm.iter().any(|t| t.split(':').next() == Some(gfx)) {
            pair("present", "ok")
        } else {
            pair("missing", "error")
        };
        assert_eq!(verdict(&j, lib), want, "{fixture_name}");
    }
    // With the override, RDNA2 takes the gfx1030 code when the library has it.
    if llvm.iter().any(|t| t == "gfx1030") {
        let (_, j) = json("rdna2", &[lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
        assert_eq!(verdict(&j, lib), pair("override", "ok"));
        let (_, j) = json("rdna1", &[lib], &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
        assert_eq!(verdict(&j, lib), pair("override", "error"));
    }
}

/// Debian sid's rocBLAS (librocblas4 6.4.4), from the root tests/compat/run builds and
/// caches (RMCP_COMPAT_CACHE, default /var/cache/rmcp-compat in CI): the shared library
/// (1 GB) against clang-offload-bundler's list of its first bundle, and its Tensile
/// directory against the files dpkg recorded for the package. A missing root is a missing
/// prerequisite: a skip on a bare machine, a failure under CI (.ci/run builds the roots with
/// `tests/compat/run --roots-only` before the test command).
#[test]
fn debian_sid_rocblas_and_its_tensile_files() {
    let cache = std::env::var_os("RMCP_COMPAT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/rmcp-compat"));
    let root = cache.join("roots/sid");
    let lib = root.join("usr/lib/x86_64-linux-gnu/librocblas.so.4");
    let dpkg_list = root.join("var/lib/dpkg/info/librocblas4.list");
    let bundler = Path::new("/usr/lib/llvm-15/bin/clang-offload-bundler");
    if !lib.exists() || !dpkg_list.exists() {
        missing(&format!(
            "no Debian sid root with librocblas4 under {} (tests/compat/run --roots-only builds it, as root)",
            cache.display()
        ));
        return;
    }
    if !bundler.exists() {
        missing(&format!("no {} (apt-get install hipcc)", bundler.display()));
        return;
    }
    let (offset, _) = readelf_section(&lib, FATBIN_SECTION).expect("readelf -S");
    let tmp = tempfile::tempdir().unwrap();
    let head = tmp.path().join("head.bundle");
    let real = std::fs::canonicalize(&lib).unwrap();
    assert!(
        Command::new("dd")
            .arg(format!("if={}", real.display()))
            .arg(format!("of={}", head.display()))
            // 64 MiB: the whole first bundle (clang 15's bundler crashes on a cut one).
            .args(["bs=4096", "count=16384", "status=none"])
            .arg(format!("skip={}", offset / 4096))
            .status()
            .unwrap()
            .success()
    );
    let out = Command::new(bundler)
        .args(["--list", "--type=bc"])
        .arg(format!("--input={}", head.display()))
        .output()
        .unwrap();
    let llvm: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("hipv4-amdgcn-amd-amdhsa--"))
        .map(str::to_string)
        .collect();
    assert!(!llvm.is_empty(), "{out:?}");
    // The Tensile directory: what dpkg installed under rocblas/<version>/library/.
    let installed = std::fs::read_to_string(&dpkg_list).unwrap();
    let tensile_files: Vec<&str> = installed
        .lines()
        .filter(|l| l.contains("/rocblas/") && l.contains("/library/"))
        .collect();
    let tensile_dir = root.join(
        Path::new(tensile_files[0].trim_start_matches('/'))
            .parent()
            .unwrap(),
    );
    for (fixture_name, gfx) in [
        ("rdna1", "gfx1010"),
        ("rdna2", "gfx1031"),
        ("rdna3", "gfx1100"),
    ] {
        let (_, j) = json(fixture_name, &[&lib, &tensile_dir], &[]);
        let want = |has: bool| {
            if has {
                pair("present", "ok")
            } else {
                pair("missing", "error")
            }
        };
        let in_llvm = llvm.iter().any(|t| t.split(':').next() == Some(gfx));
        assert_eq!(verdict(&j, &lib), want(in_llvm), "{fixture_name} library");
        let in_dpkg = tensile_files
            .iter()
            .any(|f| f.contains(&format!("_{gfx}.")) || f.contains(&format!("_{gfx}-")));
        assert_eq!(
            verdict(&j, &tensile_dir),
            want(in_dpkg),
            "{fixture_name} Tensile"
        );
        assert!(
            code_objects_row(&j, &lib)["package"]
                .as_str()
                .unwrap()
                .starts_with("librocblas4 ")
        );
    }
}
