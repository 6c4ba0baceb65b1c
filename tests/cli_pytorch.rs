//! The `pytorch` check and its remedies, one test per row of README's decision table ("PyTorch
//! crashes on my RX 5000 / RX 6000"), text and JSON, on installs laid out as the real
//! ones are, built here under a temporary directory:
//! - a pytorch.org-style wheel: `site-packages/torch/version.py` (`2.9.1+rocm7.0`),
//!   `torch/lib/libtorch_hip.so` a real fat binary made by Debian's hipcc (ROCm 5.2.3) for
//!   the part of pytorch.org's target list it can build (gfx900, gfx906, gfx908, gfx90a,
//!   gfx1030: it cannot target gfx942, gfx950, gfx110x, gfx115x or gfx120x), and the
//!   wheel's rocBLAS Tensile files for the same list. The RDNA3 row needs gfx1100 code, so
//!   there the library is built byte by byte (`rmcp_core::code_objects::write`) for the
//!   whole list instead;
//! - a TheRock multi-arch install: torch with a hipcc gfx1010 fat binary, the
//!   `amd_torch_device_gfx1010` dist-info with its METADATA, `_rocm_sdk_core/lib` and
//!   `_rocm_sdk_libraries_gfx101X_dgpu/lib/rocblas/library` (TheRock's real device wheels
//!   put their kernels in their own packages; the layout here is the documented one, not a
//!   copy of a downloaded wheel);
//! - a Debian install: `usr/lib/python3/dist-packages/torch` with a hipcc fat binary for
//!   gfx1010, gfx1012 and gfx1030, and `var/lib/dpkg/status` with python3-torch-rocm and
//!   its `X-ROCm-GPU-Architecture` field, under the same root.
//!
//! GPUs come from the KFD fixtures (tests/fixtures/README.md).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rmcp_core::code_objects::{FATBIN_SECTION, write};
use rmcp_core::remedy::PYTORCH_ORG_TARGETS;
use rmcp_testkit::{fixture, hip_fat_libraries, missing, remedy_commands, which};
use serde_json::Value;

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
/// The doctor's commands that replace the installed torch with TheRock's build for a
/// target (tests/remedy_pip.rs runs them with real pip).
fn therock_commands(target: &str) -> [String; 2] {
    [
        "pip uninstall -y torch torchvision torchaudio".to_string(),
        format!(
            "pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \
             \"torch[device-{target}]\" \"torchvision[device-{target}]\" torchaudio"
        ),
    ]
}

/// hipcc's fat binaries, built once per test run: (org subset, gfx1010, Debian's list).
/// None without hipcc: every test here needs them, so each starts with [`skip_without_hipcc`].
fn hip_libs() -> Option<&'static (PathBuf, PathBuf, PathBuf)> {
    static BUILT: OnceLock<Option<(PathBuf, PathBuf, PathBuf)>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let hipcc = which("hipcc")?;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pytorch-hipcc");
        hip_fat_libraries(
            &hipcc,
            &dir,
            &[
                (
                    "liborg.so",
                    &["gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030"],
                ),
                ("libgfx1010.so", &["gfx1010"]),
                ("libdebian.so", &["gfx1010", "gfx1012", "gfx1030"]),
            ],
        );
        Some((
            dir.join("liborg.so"),
            dir.join("libgfx1010.so"),
            dir.join("libdebian.so"),
        ))
    });
    built.as_ref()
}

/// True (and the test records its skip, or fails where prerequisites are required) when
/// there is no hipcc to build the fat binaries with.
fn skip_without_hipcc() -> bool {
    if hip_libs().is_some() {
        return false;
    }
    missing("no hipcc, Debian's ROCm 5.2.3, for real fat binaries (apt-get install hipcc)");
    true
}

/// The fat binaries, after [`skip_without_hipcc`].
fn libs() -> &'static (PathBuf, PathBuf, PathBuf) {
    hip_libs().expect("the test checked skip_without_hipcc() first")
}

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// `<sp>/torch` with version.py and lib/libtorch_hip.so (a copy of `lib`).
fn torch(sp: &Path, version: &str, lib: &[u8]) -> PathBuf {
    let t = sp.join("torch");
    write_file(&t.join("__init__.py"), b"");
    write_file(
        &t.join("version.py"),
        format!(
            "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n\
             __version__ = '{version}'\ndebug = False\ncuda: Optional[str] = None\n\
             git_version = '0123456789abcdef0123456789abcdef01234567'\nhip: Optional[str] = '7.0.51831'\n"
        )
        .as_bytes(),
    );
    write_file(&t.join("lib/libtorch_hip.so"), lib);
    t
}

/// A pytorch.org-style wheel in `<tmp>/venv/lib/python3.12/site-packages`; `whole_list`:
/// the constructed library for the whole target list instead of hipcc's.
fn pytorch_org(tmp: &Path, whole_list: bool) -> PathBuf {
    let sp = tmp.join("venv/lib/python3.12/site-packages");
    let lib = if whole_list {
        write::elf(&[(
            FATBIN_SECTION,
            &write::section(&[write::hip_bundle(PYTORCH_ORG_TARGETS)]),
        )])
    } else {
        std::fs::read(&libs().0).unwrap()
    };
    let t = torch(&sp, "2.9.1+rocm7.0", &lib);
    write_file(
        &sp.join("torch-2.9.1+rocm7.0.dist-info/METADATA"),
        b"Name: torch\n",
    );
    let tensile = t.join("lib/rocblas/library");
    write_file(&tensile.join("TensileLibrary.dat"), b"");
    let list: &[&str] = if whole_list {
        PYTORCH_ORG_TARGETS
    } else {
        &["gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030"]
    };
    for g in list {
        write_file(&tensile.join(format!("TensileLibrary_lazy_{g}.dat")), b"");
    }
    sp
}

/// TheRock's multi-arch install for gfx1010.
fn therock(tmp: &Path) -> PathBuf {
    let sp = tmp.join("venv/lib/python3.12/site-packages");
    torch(
        &sp,
        "2.11.0+rocm7.13.0a20260630",
        &std::fs::read(&libs().1).unwrap(),
    );
    write_file(
        &sp.join("amd_torch_device_gfx1010-2.11.0+rocm7.13.0a20260630.dist-info/METADATA"),
        b"Metadata-Version: 2.1\nName: amd-torch-device-gfx1010\nVersion: 2.11.0+rocm7.13.0a20260630\n",
    );
    write_file(&sp.join("_rocm_sdk_core/lib/.keep"), b"");
    write_file(
        &sp.join(
            "_rocm_sdk_libraries_gfx101X_dgpu/lib/rocblas/library/TensileLibrary_lazy_gfx1010.dat",
        ),
        b"",
    );
    sp
}

/// Debian's python3-torch-rocm under `<tmp>/root`.
fn debian(tmp: &Path) -> PathBuf {
    let root = tmp.join("root");
    let dp = root.join("usr/lib/python3/dist-packages");
    torch(&dp, "2.6.0+debian", &std::fs::read(&libs().2).unwrap());
    write_file(
        &root.join("var/lib/dpkg/status"),
        b"Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\n\n\
          Package: python3-torch-rocm\nStatus: install ok installed\nVersion: 2.6.0+dfsg-7\n\
          X-ROCm-GPU-Architecture: gfx1010 gfx1012 gfx1030 gfx1031\n",
    );
    root
}

fn doctor(sysfs: &str, scan: &Path, vars: &[(&str, &str)], json: bool) -> (Option<i32>, String) {
    let mut c = Command::new(RMCP);
    c.env_clear();
    for k in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(k) {
            c.env(k, v);
        }
    }
    // A /dev with kfd and a render node, an empty /sys/module: exit statuses depend on
    // the scenario, not on this machine.
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pytorch-roots");
    let (dev, module) = (base.join("dev"), base.join("module"));
    write_file(&dev.join("kfd"), b"");
    write_file(&dev.join("dri/renderD128"), b"");
    std::fs::create_dir_all(&module).unwrap();
    c.env("RMCP_PYTHON", "")
        .env("RMCP_DEV_ROOT", &dev)
        .env("RMCP_MODULE_ROOT", &module)
        .env("RMCP_CACHE_DIR", base.join("cache"));
    for (k, v) in vars {
        c.env(k, v);
    }
    c.arg("doctor")
        .arg("--sysfs")
        .arg(fixture(sysfs))
        .arg("--scan")
        .arg(scan);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

/// The pytorch findings for the fixture's GPU, in JSON and text; checks that the text says
/// each finding and its remedy in order, within 80 columns, and that every warn/error
/// finding has a remedy and no ok finding has one.
fn pytorch(sysfs: &str, scan: &Path, vars: &[(&str, &str)]) -> (Option<i32>, Vec<Value>, String) {
    let (code, out) = doctor(sysfs, scan, vars, true);
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let (tcode, text) = doctor(sysfs, scan, vars, false);
    assert_eq!(code, tcode);
    if let Err(e) = rmcp_testkit::check_doctor_layout(&text) {
        panic!("{e} in\n{text}");
    }
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let flat = squash(&text);
    let mut at = 0;
    let mut found = Vec::new();
    for f in j["findings"].as_array().unwrap() {
        let status = f["status"].as_str().unwrap();
        match (status, f.get("remedy")) {
            ("ok", Some(_)) => panic!("ok finding with a remedy: {f:#}"),
            ("warn" | "error", None) => panic!("{status} finding without a remedy: {f:#}"),
            _ => {}
        }
        let m = squash(&format!(
            "{status}{}{}",
            f["check"].as_str().unwrap(),
            f["message"].as_str().unwrap()
        ));
        at += flat[at..]
            .find(&m)
            .unwrap_or_else(|| panic!("{m} not in order in {text}"));
        if let Some(r) = f.get("remedy") {
            let fix = squash(&format!("fix: {}", r["text"].as_str().unwrap()));
            at += flat[at..]
                .find(&fix)
                .unwrap_or_else(|| panic!("{fix} not in {text}"));
            for c in r["commands"].as_array().unwrap() {
                // Commands are wrapped with continuations; the words are all there.
                let words = squash(c.as_str().unwrap());
                let shown = flat[at..].replace(['\\', '$'], "");
                assert!(shown.contains(&words), "{words} not in {text}");
            }
        }
        if f["check"] == "pytorch" {
            found.push(f.clone());
        }
    }
    (code, found, text)
}

/// The one pytorch finding about the GPU.
fn verdict(found: &[Value]) -> &Value {
    let v: Vec<&Value> = found.iter().filter(|f| f.get("node").is_some()).collect();
    assert_eq!(v.len(), 1, "{found:#?}");
    v[0]
}

fn sources(f: &Value) -> Vec<String> {
    f["remedy"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn gfx1010_with_a_pytorch_org_wheel() {
    if skip_without_hipcc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), false);
    let (code, found, text) = pytorch("rdna1", &sp, &[]);
    let f = verdict(&found);
    assert_eq!(f["status"], "error");
    assert_eq!(f["verdict"], "missing");
    assert_eq!(f["build"], "pytorch.org wheel");
    assert_eq!(f["version"], "2.9.1+rocm7.0");
    assert_eq!(
        f["targets"],
        serde_json::json!(["gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030"])
    );
    assert_eq!(code, Some(1));
    let c = remedy_commands(f);
    assert_eq!(c, therock_commands("gfx1010"));
    let r = &f["remedy"];
    assert!(
        r["text"].as_str().unwrap().contains("no gfx101x code"),
        "{r:#}"
    );
    assert!(
        r["caveat"]
            .as_str()
            .unwrap()
            .contains("no gfx101X test machine"),
        "{r:#}"
    );
    assert_eq!(r["checked"], rmcp_core::remedy::FACTS_CHECKED);
    assert!(
        sources(f)
            .iter()
            .any(|s| s.contains("TheRock/blob/main/RELEASES.md"))
    );
    assert!(text.contains("$ pip install --index-url"), "{text}");
    assert!(text.contains("(facts checked 2026-11-25)"), "{text}");
}

#[test]
fn gfx1010_with_a_pytorch_org_wheel_and_the_10_3_0_override() {
    if skip_without_hipcc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), false);
    let (code, found, _) = pytorch("rdna1", &sp, &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    let f = verdict(&found);
    assert_eq!(f["status"], "error");
    assert_eq!(f["runtime_gfx"], "gfx1030");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("another family's code"),
        "{f:#}"
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        remedy_commands(f),
        [
            vec!["unset HSA_OVERRIDE_GFX_VERSION".to_string()],
            therock_commands("gfx1010").to_vec()
        ]
        .concat()
    );
    assert!(sources(f).iter().any(|s| s.ends_with("/issues/887")));
}

#[test]
fn gfx1010_with_a_therock_gfx1010_build() {
    if skip_without_hipcc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sp = therock(tmp.path());
    let (_, found, _) = pytorch("rdna1", &sp, &[]);
    let f = verdict(&found);
    assert_eq!(f["status"], "ok", "{f:#}");
    assert_eq!(f["verdict"], "runs");
    assert_eq!(f["build"], "TheRock");
    assert_eq!(f["device_packages"], serde_json::json!(["gfx1010"]));
    assert_eq!(f["rocm_sdk_families"], serde_json::json!(["gfx101X_dgpu"]));
    assert_eq!(f["targets"], serde_json::json!(["gfx1010"]));
    assert!(f.get("remedy").is_none());
    assert!(f["message"].as_str().unwrap().contains("no tests"), "{f:#}");
    // The same build under 10.3.0: the override passes over the card's own code.
    let (code, found, _) = pytorch("rdna1", &sp, &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    let f = verdict(&found);
    assert_eq!(f["status"], "error");
    assert_eq!(f["verdict"], "override-harms");
    assert_eq!(remedy_commands(f), ["unset HSA_OVERRIDE_GFX_VERSION"]);
    assert_eq!(code, Some(1));
}

#[test]
fn gfx1012_with_a_pytorch_org_wheel_and_with_debians_build() {
    if skip_without_hipcc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), false);
    let (_, found, _) = pytorch("rdna1-gfx1012", &sp, &[]);
    let f = verdict(&found);
    assert_eq!(f["status"], "error");
    assert_eq!(remedy_commands(f), therock_commands("gfx1012"));
    // Debian's package: found by its place and dpkg's status under the same root.
    let root = debian(tmp.path());
    let (_, found, _) = pytorch("rdna1-gfx1012", &root, &[]);
    let f = verdict(&found);
    assert_eq!(f["status"], "ok", "{f:#}");
    assert_eq!(f["build"], "Debian package");
    assert_eq!(f["package"], "python3-torch-rocm 2.6.0+dfsg-7");
    assert_eq!(
        f["declared_targets"],
        serde_json::json!(["gfx1010", "gfx1012", "gfx1030", "gfx1031"])
    );
    // The field declares gfx1031, which the scanned library lacks: said, as info.
    let info: Vec<&Value> = found.iter().filter(|f| f["status"] == "info").collect();
    assert_eq!(info.len(), 1, "{found:#?}");
    assert!(info[0]["message"].as_str().unwrap().contains("gfx1031"));
}

#[test]
fn gfx1013_with_the_10_3_0_override() {
    if skip_without_hipcc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), false);
    let (_, found, _) = pytorch(
        "rdna1-gfx1013",
        &sp,
        &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")],
    );
    let f = verdict(&found);
    assert_eq!(f["status"], "error");
    assert_eq!(
        remedy_commands(f),
        [
            vec!["unset HSA_OVERRIDE_GFX_VERSION".to_string()],
            therock_commands("gfx1010").to_vec(),
            vec!["export HSA_OVERRIDE_GFX_VERSION=10.1.0".to_string()]
        ]
        .concat()
    );
    assert!(
        sources(f)
            .iter()
            .any(|s| s.ends_with("rocBLAS/issues/1339"))
    );
    assert!(
        f["remedy"]["caveat"]
            .as_str()
            .unwrap()
            .contains("will probably work")
    );
}

#[test]
fn gfx1031_with_a_pytorch_org_wheel_with_and_without_10_3_0() {
    if skip_without_hipcc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), false);
    let (code, found, _) = pytorch("rdna2", &sp, &[]);
    let f = verdict(&found);
    assert_eq!(f["status"], "error");
    assert_eq!(code, Some(1));
    // Only the override: TheRock's build is the alternative, named in the text; run one
    // after the other, the two would not work.
    assert_eq!(
        remedy_commands(f),
        ["export HSA_OVERRIDE_GFX_VERSION=10.3.0"]
    );
    let text = f["remedy"]["text"].as_str().unwrap();
    assert!(text.contains("device-gfx1031"), "{text}");
    assert!(!text.contains("RDNA1"));
    let (_, found, _) = pytorch("rdna2", &sp, &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    let f = verdict(&found);
    assert_eq!(f["status"], "ok", "{f:#}");
    assert_eq!(f["verdict"], "runs-through-override");
    assert!(f.get("remedy").is_none());
    assert!(f["message"].as_str().unwrap().contains("device-gfx1031"));
}

#[test]
fn gfx1030_and_rdna3_with_a_pytorch_org_wheel() {
    if skip_without_hipcc() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), false);
    let (_, found, _) = pytorch("rdna2-gfx1030", &sp, &[]);
    assert_eq!(verdict(&found)["status"], "ok");
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), true);
    let (code, found, text) = pytorch("rdna3", &sp, &[]);
    let f = verdict(&found);
    assert_eq!(f["status"], "ok", "{f:#}");
    assert_eq!(f["gfx"], "gfx1100");
    assert_eq!(code, Some(0), "{text}");
    // Nothing about RDNA1 (the rmcp-config finding lists the shim's targets, gfx101x
    // among them; the PyTorch findings say nothing of them).
    for f in &found {
        assert!(!f["message"].as_str().unwrap().contains("gfx101"), "{f:#}");
        assert!(f.get("remedy").is_none(), "{f:#}");
    }
    assert!(!text.contains("fix:"), "{text}");
}

#[test]
fn bad_input_gives_findings_not_a_crash() {
    if skip_without_hipcc() {
        return;
    }
    // A broken version.py: said, and the libraries still judged.
    let tmp = tempfile::tempdir().unwrap();
    let sp = pytorch_org(tmp.path(), false);
    write_file(
        &sp.join("torch/version.py"),
        b"__version__ = \x00\xff garbage\n",
    );
    let (_, found, _) = pytorch("rdna1", &sp, &[]);
    let w: Vec<&Value> = found.iter().filter(|f| f["status"] == "warn").collect();
    assert_eq!(w.len(), 1, "{found:#?}");
    assert!(w[0]["message"].as_str().unwrap().contains("version.py"));
    assert_eq!(verdict(&found)["status"], "error");
    // Unreadable metadata: a METADATA that is a directory.
    let tmp = tempfile::tempdir().unwrap();
    let sp = therock(tmp.path());
    let meta = sp.join("amd_torch_device_gfx1010-2.11.0+rocm7.13.0a20260630.dist-info/METADATA");
    std::fs::remove_file(&meta).unwrap();
    std::fs::create_dir(&meta).unwrap();
    let (_, found, _) = pytorch("rdna1", &sp, &[]);
    assert!(
        found
            .iter()
            .any(|f| f["status"] == "warn" && f["message"].as_str().unwrap().contains("METADATA")),
        "{found:#?}"
    );
    // A torch directory without libraries.
    let tmp = tempfile::tempdir().unwrap();
    let sp = tmp.path().join("site-packages");
    write_file(&sp.join("torch/__init__.py"), b"");
    write_file(&sp.join("torch/version.py"), b"__version__ = '2.9.1+cpu'\n");
    std::fs::create_dir_all(sp.join("torch/lib")).unwrap();
    let (_, found, _) = pytorch("rdna1", &sp, &[]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["status"], "warn");
    assert!(
        found[0]["message"]
            .as_str()
            .unwrap()
            .contains("no HIP library")
    );
    assert_eq!(found[0]["version"], "2.9.1+cpu");
}
