//! The gfx101x scan of `rmcp doctor`: an RX 5700 XT (the `rdna1` KFD fixture, gfx1010)
//! under `HSA_OVERRIDE_GFX_VERSION=10.3.0`, and the gfx1030 code the runtime would load on
//! it:
//! - Debian's rocSPARSE (librocsparse0: its `.hip_fatbin` holds 111 plain bundles, each
//!   with a gfx1030 code object);
//! - the pytorch.org-shaped venv the remedy tests use (`libtorch_hip.so` with stand-in
//!   code objects for pytorch.org's target list), and the same venv with real hipcc code,
//!   plain, compressed (zstd, built byte by byte: Debian's hipcc cannot compress) and in a
//!   rocBLAS Tensile directory;
//! - a gfx1010 build (hipcc --offload-arch=gfx1010), in which the scan finds nothing to
//!   read: the runtime loads no gfx1030 code from it.
//!
//! Each run has its own cache directory (`RMCP_CACHE_DIR`); a second run reads every code
//! object from the cache (the counts in `--json` say so). Debian's rocSPARSE has thousands
//! of v_cmpx EXEC WAR sites, and the doctor says so as an error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use rmcp_core::code_objects::{FATBIN_SECTION, Method, write};
use rmcp_core::gfx101x::Bug;
use rmcp_core::remedy::PYTORCH_ORG_TARGETS;
use rmcp_testkit::{code_objects_row, fixture, hip_fat_libraries, missing, which};
use serde_json::Value;

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
const ROCSPARSE: &str = "/usr/lib/x86_64-linux-gnu/librocsparse.so.0";
const OVERRIDE: (&str, &str) = ("HSA_OVERRIDE_GFX_VERSION", "10.3.0");

fn doctor(sysfs: &str, scan: &[&Path], vars: &[(&str, &str)], json: bool, cache: &Path) -> Output {
    let mut c = Command::new(RMCP);
    c.env_clear();
    for k in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(k) {
            c.env(k, v);
        }
    }
    c.env("RMCP_PYTHON", "").env("RMCP_CACHE_DIR", cache);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.arg("doctor").arg("--sysfs").arg(fixture(sysfs));
    c.arg("--scan").args(scan);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Never a progress line into a pipe.
    assert!(!stderr.contains('\r'), "{stderr:?}");
    out
}

fn json(sysfs: &str, scan: &[&Path], vars: &[(&str, &str)], cache: &Path) -> Value {
    let out = doctor(sysfs, scan, vars, true, cache);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn text(sysfs: &str, scan: &[&Path], vars: &[(&str, &str)], cache: &Path) -> String {
    let t = String::from_utf8(doctor(sysfs, scan, vars, false, cache).stdout).unwrap();
    if let Err(e) = rmcp_testkit::check_doctor_layout(&t) {
        panic!("{e} in\n{t}");
    }
    t
}

/// The row's scan for the fixture's one GPU (None: not scanned).
fn sites<'a>(j: &'a Value, path: &Path) -> Option<&'a Value> {
    code_objects_row(j, path)["gpus"][0].get("gfx101x")
}

/// The gfx101x-sites finding, if any.
fn sites_finding(j: &Value) -> Option<&Value> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["verdict"] == "gfx101x-sites")
}

fn override_finding(j: &Value) -> &Value {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "gfx-override")
        .unwrap()
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The twelve `-mattr` names, sorted as the JSON keys are.
fn mattr_names() -> Vec<String> {
    let mut v: Vec<String> = Bug::ALL.iter().map(|b| b.mattr().to_string()).collect();
    v.sort();
    v
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// Checks a library's scan: every object's and the totals' site keys are the twelve names,
/// the totals are the sums of the objects', the harm classes add up. Returns the totals.
fn consistent(s: &Value) -> [u64; 12] {
    let names = mattr_names();
    assert_eq!(keys(&s["gfx101x_sites"]), names, "{s:#}");
    let objects = s["objects"].as_array().unwrap();
    assert_eq!(n(&s["code_objects"]), objects.len() as u64);
    let mut sum = [0u64; 12];
    let (mut kernels, mut instructions, mut otherwise) = (0, 0, 0);
    for o in objects {
        assert_eq!(keys(&o["gfx101x_sites"]), names, "{o:#}");
        for (i, name) in names.iter().enumerate() {
            sum[i] += n(&o["gfx101x_sites"][name]);
        }
        kernels += n(&o["kernels"]);
        instructions += n(&o["instructions"]);
        otherwise += n(&o["gfx101x_decodes_otherwise"]["count"]);
        assert!(matches!(o["cache"].as_str(), Some("hit" | "miss")), "{o:#}");
        assert!(n(&o["functions"]) >= n(&o["kernels"]) || !o["error"].is_null());
    }
    for (i, name) in names.iter().enumerate() {
        assert_eq!(n(&s["gfx101x_sites"][name]), sum[i], "{name}");
    }
    assert_eq!(n(&s["kernels"]), kernels);
    assert_eq!(n(&s["instructions"]), instructions);
    assert_eq!(n(&s["gfx101x_decodes_otherwise"]["count"]), otherwise);
    let by_harm = n(&s["fault"]) + n(&s["hang"]) + n(&s["race"]) + n(&s["if_misaligned"]);
    assert_eq!(by_harm, sum.iter().sum::<u64>());
    sum
}

/// The counts by -mattr name.
fn count(s: &Value, bug: Bug) -> u64 {
    n(&s["gfx101x_sites"][bug.mattr()])
}

fn rocsparse() -> Option<&'static Path> {
    let lib = Path::new(ROCSPARSE);
    if lib.exists() {
        Some(lib)
    } else {
        missing(
            "no librocsparse0, Debian's rocSPARSE with gfx1030 code (apt-get install librocsparse0)",
        );
        None
    }
}

/// Debian's rocSPARSE on a gfx1010 under 10.3.0: every gfx1030 object is read, the counts
/// are consistent, the override finding cites them; a second run takes every object from
/// the cache and says the same.
#[test]
fn debian_rocsparse_gfx1030_code_on_gfx1010() {
    let Some(lib) = rocsparse() else { return };
    let cache = tempfile::tempdir().unwrap();
    let vars = [OVERRIDE, ("RMCP_GFX101X_BOUNDS", "seconds=600")];
    let j = json("rdna1", &[lib], &vars, cache.path());
    let s = sites(&j, lib).expect("the gfx1030 code is scanned");
    assert_eq!(s["card"], "gfx1010");
    assert_eq!(s["runtime_gfx"], "gfx1030");
    // One gfx1030 object per bundle (every bundle of Debian's build has one).
    assert_eq!(
        n(&s["code_objects"]),
        n(&code_objects_row(&j, lib)["bundles"])
    );
    assert_eq!(n(&s["unscanned_count"]), 0, "{:#}", s["unscanned"]);
    assert!(n(&s["kernels"]) > 1000, "{}", s["kernels"]);
    assert!(n(&s["instructions"]) > n(&s["kernels"]));
    for o in s["objects"].as_array().unwrap() {
        assert_eq!(o["target"], "gfx1030");
        assert_eq!(o["gfx103x"], true);
        assert_eq!(o["compressed"], false);
        assert_eq!(o["cache"], "miss");
        assert!(o["error"].is_null(), "{o:#}");
    }
    let totals = consistent(s);
    let f = sites_finding(&j).expect("the gfx101x-sites finding");
    assert_eq!(f["node"], 1);
    assert_eq!(f["gfx101x"]["kernels"], s["kernels"]);
    let scan = &f["gfx101x_scan"];
    assert_eq!(n(&scan["cache"]["misses"]), n(&s["code_objects"]));
    assert_eq!(scan["cache"]["written"], true);
    assert!(scan["stopped"].as_array().unwrap().is_empty());
    // The override finding cites the totals and keeps its remedy.
    let o = override_finding(&j);
    assert_eq!(o["status"], "error");
    assert_eq!(o["gfx101x"]["kernels"], s["kernels"]);
    assert_eq!(o["gfx101x"]["complete"], true);
    let m = o["message"].as_str().unwrap();
    assert!(
        m.contains("In the gfx1030 code of rocSPARSE")
            && m.contains(&format!("{} kernels", s["kernels"]))
            && m.contains("sites gfx1010 executes wrongly"),
        "{m}"
    );
    assert_eq!(o["remedy"]["commands"][0], "unset HSA_OVERRIDE_GFX_VERSION");

    // Again: every object from the cache, the same counts.
    let again = json("rdna1", &[lib], &vars, cache.path());
    let s2 = sites(&again, lib).unwrap();
    assert!(
        s2["objects"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["cache"] == "hit")
    );
    let scan2 = &sites_finding(&again).unwrap()["gfx101x_scan"];
    assert_eq!(n(&scan2["cache"]["hits"]), n(&s["code_objects"]));
    assert_eq!(n(&scan2["cache"]["misses"]), 0);
    assert_eq!(scan2["cache"]["written"], false);
    assert_eq!(consistent(s2), totals);
    assert_eq!(s2["kernels"], s["kernels"]);

    // The text says it: the finding, the library line, the cache line.
    let t = text("rdna1", &[lib], &vars, cache.path());
    let flat: String = t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("the gfx1030 code the runtime loads on it (111 code objects of rocSPARSE"),
        "{t}"
    );
    assert!(flat.contains("111 of 111 from the cache"), "{t}");
}

/// Debian's rocSPARSE gfx1030 code has thousands of vcmpx-exec-war-hazard sites, and the
/// doctor says so, as an error.
#[test]
fn debian_rocsparse_has_thousands_of_vcmpx_exec_war_sites() {
    let Some(lib) = rocsparse() else { return };
    let cache = tempfile::tempdir().unwrap();
    let j = json(
        "rdna1",
        &[lib],
        &[OVERRIDE, ("RMCP_GFX101X_BOUNDS", "seconds=600")],
        cache.path(),
    );
    let s = sites(&j, lib).unwrap();
    assert!(
        count(s, Bug::VcmpxExecWar) > 1000,
        "{:#}",
        s["gfx101x_sites"]
    );
    assert!(n(&s["race"]) > 1000);
    assert!(!s["most_sites"].as_array().unwrap().is_empty());
    let f = sites_finding(&j).unwrap();
    assert_eq!(f["status"], "error");
    assert!(f["remedy"].is_object());
    assert!(n(&override_finding(&j)["gfx101x"]["race"]) > 1000);
}

/// hipcc's fat binaries, built once per test run: (gfx1030 + gfx900, gfx1010 only, and a
/// bare gfx1030 bundle from `--genco`). None without hipcc.
fn hip() -> Option<&'static (PathBuf, PathBuf, PathBuf)> {
    static BUILT: OnceLock<Option<(PathBuf, PathBuf, PathBuf)>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let hipcc = which("hipcc")?;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gfx101x-hipcc");
        hip_fat_libraries(
            &hipcc,
            &dir,
            &[
                ("libk_1030_900.so", &["gfx1030", "gfx900"]),
                ("libk_1010.so", &["gfx1010"]),
            ],
        );
        let co = dir.join("k_1030.co");
        let out = Command::new(&hipcc)
            .args(["--genco", "--offload-arch=gfx1030", "-O1", "-o"])
            .arg(&co)
            .arg(dir.join("k.hip"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Some((dir.join("libk_1030_900.so"), dir.join("libk_1010.so"), co))
    });
    if built.is_none() {
        missing("no hipcc, Debian's ROCm 5.2.3, for real fat binaries (apt-get install hipcc)");
    }
    built.as_ref()
}

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// The venv of tests/remedy_pip.rs's pytorch.org index: torch 2.9.1+rocm6.4 whose
/// `libtorch_hip.so` carries `lib` as its GPU code.
fn venv(root: &Path, lib: &[u8]) -> PathBuf {
    let sp = root.join("venv/lib/python3.12/site-packages");
    write_file(
        &sp.join("torch/version.py"),
        b"__version__ = '2.9.1+rocm6.4'\nhip = '7.0.0'\n",
    );
    write_file(&sp.join("torch/__init__.py"), b"");
    write_file(&sp.join("torch/lib/libtorch_hip.so"), lib);
    write_file(
        &sp.join("torch-2.9.1+rocm6.4.dist-info/METADATA"),
        b"Name: torch\n",
    );
    root.join("venv")
}

/// The pytorch.org-shaped venv of the remedy tests: its stand-in code objects are listed,
/// each as not readable, with the twelve keys and no sites; the override finding still
/// cites the scan.
#[test]
fn the_remedy_tests_pytorch_org_venv() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let lib = write::elf(&[(
        FATBIN_SECTION,
        &write::section(&[write::hip_bundle(PYTORCH_ORG_TARGETS)]),
    )]);
    let v = venv(&root, &lib);
    let torch = v.join("lib/python3.12/site-packages/torch/lib/libtorch_hip.so");
    let j = json("rdna1", &[&v], &[OVERRIDE], &root.join("cache"));
    let s = sites(&j, &torch).expect("scanned");
    let objects = s["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 1, "{s:#}");
    assert_eq!(objects[0]["target"], "gfx1030");
    assert!(objects[0]["error"].is_string(), "{:#}", objects[0]);
    assert_eq!(n(&s["unreadable"]), 1);
    assert_eq!(consistent(s), [0; 12]);
    let f = sites_finding(&j).unwrap();
    assert_eq!(f["status"], "info");
    assert!(
        f["paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == torch.to_str().unwrap())
    );
    assert!(override_finding(&j)["gfx101x"].is_object());
    let t = text("rdna1", &[&v], &[OVERRIDE], &root.join("cache"));
    assert!(t.contains("not readable"), "{t}");
    // Without the override the runtime loads no gfx1030 code: nothing scanned.
    let j = json("rdna1", &[&v], &[], &root.join("cache"));
    assert!(sites(&j, &torch).is_none());
    assert!(sites_finding(&j).is_none());
}

/// The same venv with real gfx1030 code from hipcc: in `libtorch_hip.so` as hipcc built
/// it, compressed (zstd, version 3) in another library, and as a rocBLAS Tensile file. The
/// three give the same counts.
#[test]
fn real_gfx1030_code_plain_compressed_and_tensile() {
    let Some((lib1030, _, co)) = hip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let v = venv(&root, &std::fs::read(lib1030).unwrap());
    let lib = v.join("lib/python3.12/site-packages/torch/lib");
    let bundle = std::fs::read(co).unwrap();
    let compressed = write::compressed(3, Method::Zstd, &bundle);
    write_file(
        &lib.join("libcompressed.so"),
        &write::elf(&[(FATBIN_SECTION, &write::section(&[compressed]))]),
    );
    write_file(
        &lib.join("rocblas/library/Kernels.so-000-gfx1030.hsaco"),
        &bundle,
    );
    write_file(
        &lib.join("rocblas/library/TensileLibrary_lazy_gfx1030.dat"),
        b"",
    );
    // A gfx900 file the runtime never loads on this card.
    write_file(
        &lib.join("rocblas/library/Kernels.so-000-gfx900.hsaco"),
        b"x",
    );
    let cache = root.join("cache");
    let j = json("rdna1", &[&v], &[OVERRIDE], &cache);
    let plain = sites(&j, &lib.join("libtorch_hip.so")).expect("plain");
    let packed = sites(&j, &lib.join("libcompressed.so")).expect("compressed");
    let tensile = sites(&j, &lib.join("rocblas/library")).expect("tensile");
    for s in [plain, packed, tensile] {
        assert_eq!(n(&s["code_objects"]), 1, "{s:#}");
        let o = &s["objects"][0];
        assert!(o["error"].is_null(), "{o:#}");
        assert_eq!(o["gfx103x"], true);
        assert_eq!(o["target"], "gfx1030");
        assert_eq!(n(&s["kernels"]), 1, "{s:#}");
        assert!(n(&s["instructions"]) > 0);
        assert_eq!(n(&s["undecodable"]), 0);
        consistent(s);
    }
    assert_eq!(packed["objects"][0]["compressed"], true);
    assert_eq!(plain["objects"][0]["compressed"], false);
    assert!(
        tensile["objects"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("Kernels.so-000-gfx1030.hsaco")
    );
    // The compressed bundle and the Tensile file hold the same object: the second one read
    // comes from the cache (by content), with the same counts.
    let hits = [packed, tensile]
        .iter()
        .filter(|s| s["objects"][0]["cache"] == "hit")
        .count();
    assert_eq!(hits, 1, "{packed:#}\n{tensile:#}");
    assert_eq!(packed["instructions"], tensile["instructions"]);
    assert_eq!(packed["gfx101x_sites"], tensile["gfx101x_sites"]);
    let o = override_finding(&j);
    assert_eq!(n(&o["gfx101x"]["code_objects"]), 3);
    assert_eq!(n(&o["gfx101x"]["kernels"]), 3);
}

/// A gfx1010 build: the runtime, told to look for gfx1030 code, finds none in it, so the
/// scan reads nothing and says nothing; the override finding keeps its words.
#[test]
fn a_gfx1010_build_gives_the_scan_nothing() {
    let Some((_, lib1010, _)) = hip() else { return };
    let cache = tempfile::tempdir().unwrap();
    let j = json("rdna1", &[lib1010], &[OVERRIDE], cache.path());
    assert_eq!(
        code_objects_row(&j, lib1010)["gpus"][0]["verdict"],
        "override-misses",
        "{:#}",
        code_objects_row(&j, lib1010)
    );
    assert!(sites(&j, lib1010).is_none());
    assert!(sites_finding(&j).is_none());
    let o = override_finding(&j);
    assert!(o.get("gfx101x").is_none(), "{o:#}");
    assert!(
        !o["message"]
            .as_str()
            .unwrap()
            .contains("In the gfx1030 code")
    );
    // Nothing was read, so nothing was cached.
    assert!(!cache.path().join("gfx101x-sites-v1.json").exists());
    // An RDNA2 card under the same override runs its own family's code: no scan either.
    let Some((lib1030, _, _)) = hip() else { return };
    let j = json("rdna2", &[lib1030], &[OVERRIDE], cache.path());
    assert!(sites(&j, lib1030).is_none());
}

/// The bounds: a code object over the object bound and those after the run's byte bound
/// are listed with the reason, in JSON and in the text; an unwritable cache is noted, not
/// fatal.
#[test]
fn bounds_say_what_they_leave_unscanned() {
    let Some((_, _, co)) = hip() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let bundle = std::fs::read(co).unwrap();
    let lib = root.join("libthree.so");
    write_file(
        &lib,
        &write::elf(&[(
            FATBIN_SECTION,
            &write::section(&[bundle.clone(), bundle.clone(), bundle]),
        )]),
    );
    let cache = root.join("cache");
    let j = json(
        "rdna1",
        &[&lib],
        &[OVERRIDE, ("RMCP_GFX101X_BOUNDS", "total=1K")],
        &cache,
    );
    let s = sites(&j, &lib).unwrap();
    assert_eq!(n(&s["code_objects"]), 1);
    assert_eq!(n(&s["unscanned_count"]), 2);
    for u in s["unscanned"].as_array().unwrap() {
        assert!(
            u["why"].as_str().unwrap().contains("bound on the run"),
            "{u:#}"
        );
    }
    let f = sites_finding(&j).unwrap();
    assert_eq!(f["gfx101x_scan"]["bounds"]["total_bytes"], 1024);
    assert_eq!(n(&f["gfx101x_scan"]["unscanned"]), 2);
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("2 code objects were not scanned (stopped by the 1 KiB bound on the run)"),
        "{}",
        f["message"]
    );
    assert_eq!(override_finding(&j)["gfx101x"]["complete"], false);

    // Each object over the object bound; the cache directory is a file: noted, not fatal.
    let not_a_dir = root.join("file");
    write_file(&not_a_dir, b"");
    let j = json(
        "rdna1",
        &[&lib],
        &[OVERRIDE, ("RMCP_GFX101X_BOUNDS", "object=1K")],
        &not_a_dir,
    );
    let s = sites(&j, &lib).unwrap();
    assert_eq!(n(&s["code_objects"]), 0);
    assert_eq!(n(&s["unscanned_count"]), 3);
    let why = s["unscanned"][0]["why"].as_str().unwrap();
    assert!(
        why.ends_with("KiB, over the 1 KiB bound per code object"),
        "{why}"
    );
    let t = text(
        "rdna1",
        &[&lib],
        &[OVERRIDE, ("RMCP_GFX101X_BOUNDS", "total=1K")],
        &not_a_dir,
    );
    assert!(t.contains("not written"), "{t}");
}

/// On a terminal (script(1) gives the doctor one), the scan shows a progress line on
/// stderr, cleared at the end; with --json it shows none.
#[test]
fn progress_only_on_a_terminal_and_never_with_json() {
    let Some((lib1030, _, _)) = hip() else { return };
    let Some(script) = which("script") else {
        missing("no script(1) (util-linux) to give doctor a terminal");
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let run = |json: bool| -> String {
        let cmd = format!(
            "{RMCP} doctor --sysfs {} --scan {}{}",
            fixture("rdna1").display(),
            lib1030.display(),
            if json { " --json" } else { "" }
        );
        let out = Command::new(&script)
            .args(["-qec", &cmd, "/dev/null"])
            .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
            .env("RMCP_PYTHON", "")
            .env("RMCP_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = run(false);
    assert!(
        shown.contains("gfx1030 code for gfx1010: 0/1 code objects"),
        "{shown:?}"
    );
    assert!(shown.contains("\r\x1b[K"), "{shown:?}");
    let quiet = run(true);
    assert!(!quiet.contains("code objects,"), "{quiet:?}");
}
