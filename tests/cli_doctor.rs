//! `rmcp doctor` against the KFD topology fixtures (tests/fixtures, see its README).
//!
//! Every run gets a clean environment (PATH and HOME only, plus what a test sets), a fake
//! /dev (RMCP_DEV_ROOT) with kfd and render nodes, an empty /sys/module
//! (RMCP_MODULE_ROOT), and an empty directory to look for GPU code in (`--scan`), so the
//! results do not depend on this machine. tests/cli_code_objects.rs tests the
//! `code-objects` check.

use std::path::Path;
use std::process::{Command, Output};

use rmcp_testkit::fixture;
use serde_json::Value;

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");

struct Env {
    dev: tempfile::TempDir,
    module: tempfile::TempDir,
    /// Where the code-objects check looks instead of this machine's libraries.
    scan: tempfile::TempDir,
    /// The gfx101x scan's cache (RMCP_CACHE_DIR), out of the home directory.
    cache: tempfile::TempDir,
}

/// A /dev with kfd and renderD128..renderD135, all rw.
fn env() -> Env {
    let dev = tempfile::tempdir().unwrap();
    std::fs::write(dev.path().join("kfd"), b"").unwrap();
    std::fs::create_dir(dev.path().join("dri")).unwrap();
    for m in 128..136 {
        std::fs::write(dev.path().join(format!("dri/renderD{m}")), b"").unwrap();
    }
    Env {
        dev,
        module: tempfile::tempdir().unwrap(),
        scan: tempfile::tempdir().unwrap(),
        cache: tempfile::tempdir().unwrap(),
    }
}

fn doctor_cmd(e: &Env, sysfs: Option<&Path>, vars: &[(&str, &str)], json: bool) -> Command {
    let mut c = Command::new(RMCP);
    c.env_clear();
    for k in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(k) {
            c.env(k, v);
        }
    }
    // No site-packages search (python3 start-up dominates doctor's run time) unless a
    // test asks for it.
    c.env("RMCP_DEV_ROOT", e.dev.path())
        .env("RMCP_MODULE_ROOT", e.module.path())
        .env("RMCP_PYTHON", "")
        .env("RMCP_CACHE_DIR", e.cache.path());
    for (k, v) in vars {
        c.env(k, v);
    }
    c.arg("doctor").arg("--scan").arg(e.scan.path());
    if let Some(s) = sysfs {
        c.arg("--sysfs").arg(s);
    }
    if json {
        c.arg("--json");
    }
    c
}

struct Run {
    out: Output,
    text: String,
}

fn human(e: &Env, sysfs: Option<&Path>, vars: &[(&str, &str)]) -> Run {
    let out = doctor_cmd(e, sysfs, vars, false).output().unwrap();
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(out.status.code().is_some(), "killed: {out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{out:?}"
    );
    Run { out, text }
}

fn json(e: &Env, sysfs: Option<&Path>, vars: &[(&str, &str)]) -> (Output, Value) {
    let out = doctor_cmd(e, sysfs, vars, true).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {}", String::from_utf8_lossy(&out.stdout)));
    (out, v)
}

fn findings<'a>(v: &'a Value, check: &str) -> Vec<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

fn one<'a>(v: &'a Value, check: &str) -> &'a Value {
    let f = findings(v, check);
    assert_eq!(f.len(), 1, "{check}: {f:#?}");
    f[0]
}

/// Every warn and error finding carries a remedy (text, commands, sources), ok findings
/// none.
fn assert_remedy(f: &Value) {
    let status = f["status"].as_str().unwrap();
    match (status, f.get("remedy")) {
        ("ok", None) | ("info", _) => {}
        ("ok", Some(r)) => panic!("an ok finding with a remedy: {r:#}"),
        (_, None) => panic!("a {status} finding without a remedy: {f:#}"),
        (_, Some(r)) => {
            assert!(!r["text"].as_str().unwrap().trim().is_empty(), "{r:#}");
            assert!(r["commands"].is_array() && r["sources"].is_array(), "{r:#}");
            for s in r["sources"].as_array().unwrap() {
                assert!(s.as_str().unwrap().starts_with("https://"), "{s}");
            }
        }
    }
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect()
}

fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The JSON and the human output say the same things: every finding's status, check,
/// message and sources appear in the text, in the same order, the summary counts agree,
/// and every GPU has its table row.
fn assert_agree(e: &Env, sysfs: Option<&Path>, vars: &[(&str, &str)]) {
    let h = human(e, sysfs, vars);
    let (jo, j) = json(e, sysfs, vars);
    assert_eq!(h.out.status.code(), jo.status.code());
    assert_eq!(j["exit_status"].as_i64(), jo.status.code().map(i64::from));
    let text = squash(&h.text);
    let mut at = 0;
    for f in j["findings"].as_array().unwrap() {
        // Without whitespace: long paths may be broken across lines.
        let line = squash(&format!(
            "{} {} {}",
            f["status"].as_str().unwrap(),
            f["check"].as_str().unwrap(),
            f["message"].as_str().unwrap()
        ));
        let pos = text[at..]
            .find(&line)
            .unwrap_or_else(|| panic!("{line:?} not in order in:\n{}", h.text));
        at += pos + line.len();
        if let Some(src) = f["source"].as_str() {
            assert!(text[at..].starts_with(&format!("see{src}")), "{src}");
        }
        assert_remedy(f);
        if let Some(r) = f.get("remedy") {
            let fix = squash(&format!("fix: {}", r["text"].as_str().unwrap()));
            let pos = text[at..]
                .find(&fix)
                .unwrap_or_else(|| panic!("{fix:?} not after its finding in:\n{}", h.text));
            at += pos + fix.len();
        }
    }
    let s = &j["summary"];
    let summary = format!(
        "{} error{}, {} warning{}, {} info, {} ok.",
        s["error"],
        if s["error"] == 1 { "" } else { "s" },
        s["warn"],
        if s["warn"] == 1 { "" } else { "s" },
        s["info"],
        s["ok"]
    );
    assert!(h.text.contains(&summary), "{summary} in\n{}", h.text);
    let total: u64 = ["ok", "info", "warn", "error"]
        .iter()
        .map(|k| s[k].as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, j["findings"].as_array().unwrap().len());
    for g in j["gpus"].as_array().unwrap() {
        let row = format!(
            "{} {} {}",
            g["node"],
            g["gfx"].as_str().unwrap(),
            g["pci"].as_str().unwrap_or("-")
        );
        assert!(normalize(&h.text).contains(&row), "{row} in\n{}", h.text);
    }
    // 80 columns, except a `see URL` line; links under the text, each once.
    if let Err(e) = rmcp_testkit::check_doctor_layout(&h.text) {
        panic!("{e} in\n{}", h.text);
    }
    for line in h.text.lines() {
        assert!(
            !line.contains('\x1b'),
            "colour without a terminal: {line:?}"
        );
    }
}

#[test]
fn rdna1_with_override_10_3_0_is_an_error() {
    let e = env();
    let vars = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0")];
    let h = human(&e, Some(&fixture("rdna1")), &vars);
    assert_eq!(h.out.status.code(), Some(1), "{}", h.text);
    let t = normalize(&h.text);
    assert!(
        t.contains("error gfx-override HSA_OVERRIDE_GFX_VERSION=10.3.0 makes node 1 (gfx1010"),
        "{}",
        h.text
    );
    assert!(t.contains("Use 10.1.0"), "{}", h.text);

    let (out, j) = json(&e, Some(&fixture("rdna1")), &vars);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(j["status"], "error");
    let f = one(&j, "gfx-override");
    assert_eq!(f["status"], "error");
    assert_eq!(f["node"], 1);
    assert_eq!(f["gfx"], "gfx1010");
    assert_eq!(f["value"], "10.3.0");
    assert_eq!(f["variable"], "HSA_OVERRIDE_GFX_VERSION");
    assert_eq!(
        f["source"],
        "https://github.com/ROCm/legacy-rocm-build/issues/887"
    );
    let gpus = j["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0]["gfx_override"], "10.3.0");
    // The same rule through the per-node variable (node 1 is the GPU).
    let (out, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("HSA_OVERRIDE_GFX_VERSION_1", "10.3.0")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        one(&j, "gfx-override")["variable"],
        "HSA_OVERRIDE_GFX_VERSION_1"
    );
    assert_agree(&e, Some(&fixture("rdna1")), &vars);
}

#[test]
fn rdna1_with_override_10_1_0_is_ok() {
    let e = env();
    let vars = [("HSA_OVERRIDE_GFX_VERSION", "10.1.0")];
    let (out, j) = json(&e, Some(&fixture("rdna1")), &vars);
    assert_eq!(out.status.code(), Some(0), "{j:#}");
    let f = one(&j, "gfx-override");
    assert_eq!(f["status"], "ok");
    assert_eq!(f["node"], 1);
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("it is the real ISA")
    );
    // The GPU: affected, rewritten, no PCIe atomics (warn, cites clr#285).
    let g = &j["gpus"][0];
    assert_eq!(g["node"], 1);
    assert_eq!(g["gfx"], "gfx1010");
    assert_eq!(g["gfx_target_version"], 100100);
    assert_eq!(g["pci"], "0000:03:00.0");
    assert_eq!(g["device_id"], 0x731f);
    assert_eq!(g["vendor_id"], 4098);
    assert_eq!(g["pcie_atomics"], "unsupported");
    assert_eq!(g["affected"], true);
    assert_eq!(g["rmcp"], "rewrites");
    assert_eq!(g["render_node"], "renderD128");
    let a = one(&j, "pcie-atomics");
    assert_eq!(a["status"], "warn");
    assert_eq!(a["source"], "https://github.com/ROCm/clr/issues/285");
    assert_eq!(a["flags"], serde_json::json!([13]));
    assert_eq!(one(&j, "gpu")["status"], "ok");
    assert!(
        findings(&j, "gfx-override")
            .iter()
            .all(|f| f["status"] != "error")
    );
    // A per-node value wins over the global one, as in libhsakmt.
    let (out, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[
            ("HSA_OVERRIDE_GFX_VERSION", "10.3.0"),
            ("HSA_OVERRIDE_GFX_VERSION_1", "10.1.0"),
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(one(&j, "gfx-override")["status"], "ok");
    assert_agree(&e, Some(&fixture("rdna1")), &vars);
}

#[test]
fn override_pitfalls() {
    let e = env();
    // Not major.minor.stepping: ROCr rejects it.
    let (out, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("HSA_OVERRIDE_GFX_VERSION", "gfx1030")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(one(&j, "gfx-override")["status"], "error");
    // A per-node variable naming the CPU node has no effect.
    let (out, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("HSA_OVERRIDE_GFX_VERSION_0", "10.3.0")],
    );
    assert_eq!(out.status.code(), Some(0));
    let f = one(&j, "gfx-override");
    assert_eq!(f["status"], "warn");
    assert_eq!(f["node"], 0);
    assert!(f["message"].as_str().unwrap().contains("not a GPU node"));
    // Unset: ok.
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[]);
    assert_eq!(one(&j, "gfx-override")["status"], "ok");
    assert_eq!(one(&j, "gfx-override")["value"], Value::Null);
}

#[test]
fn rdna2_is_affected_and_10_3_0_matches_its_family() {
    let e = env();
    let vars = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0")];
    let (out, j) = json(&e, Some(&fixture("rdna2")), &vars);
    assert_eq!(out.status.code(), Some(0), "{j:#}");
    let g = &j["gpus"][0];
    assert_eq!(g["gfx"], "gfx1031");
    assert_eq!(g["affected"], true);
    assert_eq!(g["pcie_atomics"], "supported");
    assert_eq!(one(&j, "pcie-atomics")["status"], "ok");
    let f = one(&j, "gfx-override");
    assert_eq!(f["status"], "ok");
    assert!(f["message"].as_str().unwrap().contains("same ISA family"));
    assert_agree(&e, Some(&fixture("rdna2")), &vars);
}

#[test]
fn rdna3_is_not_affected() {
    let e = env();
    let (out, j) = json(&e, Some(&fixture("rdna3")), &[]);
    assert_eq!(out.status.code(), Some(0));
    let g = &j["gpus"][0];
    assert_eq!(g["gfx"], "gfx1100");
    assert_eq!(g["affected"], false);
    assert_eq!(g["rmcp"], "no");
    let f = one(&j, "gpu");
    assert_eq!(f["status"], "ok");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("not in RMCP_TARGETS")
    );
    // RMCP_MODE=force makes every GPU affected; RMCP_MODE=off keeps them affected but idle.
    let (_, j) = json(&e, Some(&fixture("rdna3")), &[("RMCP_MODE", "force")]);
    assert_eq!(j["gpus"][0]["rmcp"], "rewrites");
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[("RMCP_MODE", "off")]);
    assert_eq!(j["gpus"][0]["rmcp"], "off");
    assert_eq!(one(&j, "gpu")["status"], "info");
    assert_agree(&e, Some(&fixture("rdna3")), &[]);
}

#[test]
fn mixed_machine() {
    let e = env();
    let vars = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0")];
    let (out, j) = json(&e, Some(&fixture("mixed")), &vars);
    assert_eq!(out.status.code(), Some(1));
    let gpus = j["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0]["rmcp"], "rewrites");
    assert_eq!(gpus[1]["rmcp"], "no");
    assert_eq!(gpus[1]["pci"], "0000:0a:00.0");
    let ov = findings(&j, "gfx-override");
    assert_eq!(ov.len(), 2);
    assert_eq!(
        (ov[0]["node"].clone(), ov[0]["status"].clone()),
        (1.into(), "error".into())
    );
    assert_eq!(
        (ov[1]["node"].clone(), ov[1]["status"].clone()),
        (2.into(), "warn".into())
    );
    let at = findings(&j, "pcie-atomics");
    assert_eq!(at[0]["status"], "warn");
    assert_eq!(at[1]["status"], "ok");
    assert_agree(&e, Some(&fixture("mixed")), &vars);
    assert_agree(&e, Some(&fixture("mixed")), &[]);
}

#[test]
fn eight_gpus_and_two_cpu_domains() {
    let e = env();
    let (out, j) = json(&e, Some(&fixture("eight-gpu")), &[]);
    assert_eq!(out.status.code(), Some(0));
    let gpus = j["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    assert!(
        gpus.iter()
            .all(|g| g["gfx"] == "gfx1030" && g["affected"] == true)
    );
    assert_eq!(gpus[7]["pci"], "0000:18:00.0");
    assert_eq!(findings(&j, "pcie-atomics").len(), 8);
    let (_, j) = json(&e, Some(&fixture("two-cpu-mixed-domain")), &[]);
    assert_eq!(one(&j, "topology")["cpu_nodes"], 2);
    assert_eq!(j["gpus"][0]["pci"], "0001:41:00.0");
    assert_eq!(j["gpus"][0]["node"], 2);
    assert_agree(&e, Some(&fixture("eight-gpu")), &[]);
}

#[test]
fn cpu_only() {
    let e = env();
    let (out, j) = json(&e, Some(&fixture("cpu-only")), &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(j["gpus"], serde_json::json!([]));
    let t = one(&j, "topology");
    assert_eq!(t["status"], "ok");
    assert_eq!(t["gpu_count"], 0);
    let g = one(&j, "gpu");
    assert_eq!(g["status"], "info");
    assert!(g["message"].as_str().unwrap().contains("No GPU node"));
    assert!(findings(&j, "pcie-atomics").is_empty());
    // No GPU: a missing /dev/kfd is information, not an error.
    let empty_dev = Env {
        dev: tempfile::tempdir().unwrap(),
        module: tempfile::tempdir().unwrap(),
        scan: tempfile::tempdir().unwrap(),
        cache: tempfile::tempdir().unwrap(),
    };
    let (out, j) = json(&empty_dev, Some(&fixture("cpu-only")), &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(one(&j, "device-access")["status"], "info");
    assert_agree(&e, Some(&fixture("cpu-only")), &[]);
}

#[test]
fn missing_dev_kfd_with_gpus_is_an_error() {
    let e = Env {
        dev: tempfile::tempdir().unwrap(),
        module: tempfile::tempdir().unwrap(),
        scan: tempfile::tempdir().unwrap(),
        cache: tempfile::tempdir().unwrap(),
    };
    let (out, j) = json(&e, Some(&fixture("rdna2")), &[]);
    assert_eq!(out.status.code(), Some(1));
    let d = findings(&j, "device-access");
    assert_eq!(d[0]["status"], "error");
    assert!(
        d[0]["message"]
            .as_str()
            .unwrap()
            .contains("--device=/dev/kfd")
    );
    assert_eq!(d[1]["status"], "warn");
    assert!(d[1]["path"].as_str().unwrap().ends_with("dri/renderD128"));
}

#[test]
fn no_topology_at_all() {
    let e = env();
    let missing = Path::new("/nonexistent/rmcp/kfd/topology");
    let (out, j) = json(&e, Some(missing), &[]);
    assert_eq!(out.status.code(), Some(0));
    let t = one(&j, "topology");
    assert_eq!(t["status"], "warn");
    assert!(
        t["message"]
            .as_str()
            .unwrap()
            .starts_with("No KFD topology at /nonexistent")
    );
    assert_eq!(j["gpus"], serde_json::json!([]));
    assert_eq!(j["sysfs"], missing.display().to_string());
    // RMCP_SYSFS_ROOT is the default root, as for the shim.
    let (_, j) = json(
        &e,
        None,
        &[("RMCP_SYSFS_ROOT", fixture("rdna3").to_str().unwrap())],
    );
    assert_eq!(j["gpus"][0]["gfx"], "gfx1100");
    assert_agree(&e, Some(missing), &[]);
}

#[test]
fn malformed_topology_gives_findings_not_a_panic() {
    let e = env();
    let (out, j) = json(&e, Some(&fixture("malformed")), &[]);
    assert_eq!(out.status.code(), Some(0), "{j:#}");
    let t = one(&j, "topology");
    assert_eq!(t["status"], "warn");
    let problems: Vec<&str> = t["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        problems.iter().any(|p| p.contains("99999999999999999999")),
        "{problems:#?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("notanumber")),
        "{problems:#?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("node 3")),
        "{problems:#?}"
    );
    let gpus = j["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0]["gfx"], "gfx1010");
    assert_eq!(gpus[0]["pcie_atomics"], "unknown");
    assert_eq!(gpus[1]["gfx"], "unknown");
    assert_eq!(gpus[1]["gfx_target_version"], Value::Null);
    assert_eq!(gpus[1]["affected"], false);
    let g = findings(&j, "gpu");
    assert_eq!(g[1]["status"], "warn");
    assert!(g[1]["message"].as_str().unwrap().contains("ISA is unknown"));
    // An override cannot be judged against an unknown ISA, and must not crash either.
    let vars = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0")];
    let (out, j) = json(&e, Some(&fixture("malformed")), &vars);
    assert_eq!(out.status.code(), Some(1));
    let ov = findings(&j, "gfx-override");
    assert_eq!(ov[0]["status"], "error");
    assert_eq!(ov[1]["status"], "warn");
    assert_agree(&e, Some(&fixture("malformed")), &vars);
    // The human output lists the problems under the finding.
    let h = human(&e, Some(&fixture("malformed")), &[]);
    assert!(h.text.contains("- "), "{}", h.text);
    assert!(normalize(&h.text).contains("notanumber"));
}

#[test]
fn amdgpu_parameters() {
    let e = env();
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[]);
    let p = one(&j, "amdgpu-param");
    assert_eq!(p["status"], "info");
    assert!(p["message"].as_str().unwrap().contains("not loaded"));
    let params = e.module.path().join("amdgpu/parameters");
    std::fs::create_dir_all(&params).unwrap();
    std::fs::write(params.join("noretry"), "-1\n").unwrap();
    std::fs::write(params.join("vm_fragment_size"), "9\n").unwrap();
    std::fs::write(params.join("mtype_local"), "2\n").unwrap();
    let (out, j) = json(&e, Some(&fixture("rdna1")), &[]);
    assert_eq!(out.status.code(), Some(0));
    let p = findings(&j, "amdgpu-param");
    assert_eq!(p.len(), 3);
    assert_eq!(p[0]["parameter"], "noretry");
    assert_eq!(p[0]["value"], "-1");
    assert!(p[0]["message"].as_str().unwrap().contains("automatic"));
    assert_eq!(p[1]["value"], "9");
    assert_eq!(p[2]["parameter"], "mtype_local");
    let m = p[2]["message"].as_str().unwrap();
    assert!(
        m.contains("is CC") && m.contains("only affects GC 9.4.x"),
        "{m}"
    );
    assert!(m.contains("does nothing for RDNA"), "{m}");
    assert_agree(&e, Some(&fixture("rdna1")), &[]);
    // A kernel without mtype_local.
    std::fs::remove_file(params.join("mtype_local")).unwrap();
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[]);
    let p = findings(&j, "amdgpu-param");
    assert!(p[2]["message"].as_str().unwrap().contains("not present"));
}

#[test]
fn allocation_environment() {
    let e = env();
    let vars = [
        ("HIP_HOST_COHERENT", "1"),
        ("HSA_FORCE_FINE_GRAIN_PCIE", "1"),
        ("HSA_XNACK", "1"),
        ("HSA_USE_SVM", "0"),
        ("HIP_VISIBLE_DEVICES", "0"),
        ("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True"),
    ];
    let (out, j) = json(&e, Some(&fixture("rdna1")), &vars);
    assert_eq!(out.status.code(), Some(0));
    let env: Vec<&Value> = findings(&j, "env");
    let by = |name: &str| {
        *env.iter()
            .find(|f| f["variable"] == name)
            .unwrap_or_else(|| panic!("{name}: {env:#?}"))
    };
    assert_eq!(env.len(), vars.len());
    assert!(
        by("HSA_XNACK")["message"]
            .as_str()
            .unwrap()
            .contains("does nothing here")
    );
    assert!(
        by("HIP_HOST_COHERENT")["message"]
            .as_str()
            .unwrap()
            .contains("coherent")
    );
    assert_eq!(
        by("PYTORCH_HIP_ALLOC_CONF")["value"],
        "expandable_segments:True"
    );
    assert!(
        by("HIP_VISIBLE_DEVICES")["message"]
            .as_str()
            .unwrap()
            .contains("PCI address")
    );
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[]);
    assert_eq!(one(&j, "env")["status"], "ok");
    assert_agree(&e, Some(&fixture("rdna1")), &vars);
}

#[test]
fn rmcp_settings_and_ld_preload() {
    let e = env();
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("librmcp_shim.so");
    std::fs::write(&shim, b"x").unwrap();
    let shim_s = shim.to_str().unwrap();
    let (_, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("RMCP_MODE", "sometimes"), ("LD_PRELOAD", shim_s)],
    );
    let cfg = findings(&j, "rmcp-config");
    assert_eq!(cfg[0]["mode"], "auto");
    assert_eq!(cfg[1]["status"], "warn");
    assert!(cfg[1]["message"].as_str().unwrap().contains("RMCP_MODE"));
    let lp = one(&j, "ld-preload");
    assert_eq!(lp["status"], "ok");
    assert_eq!(lp["shims"], serde_json::json!([shim_s]));
    let (_, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("LD_PRELOAD", "/nonexistent/librmcp_shim.so")],
    );
    assert_eq!(one(&j, "ld-preload")["status"], "warn");
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[]);
    assert_eq!(one(&j, "ld-preload")["status"], "info");
    // Where `rmcp run` would find the shim; without its body beside it, an error.
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[("RMCP_SHIM", shim_s)]);
    let s = one(&j, "shim");
    assert_eq!(s["status"], "error");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("librmcp_shim_body.so is missing"),
        "{s}"
    );
    let body = dir.path().join("librmcp_shim_body.so");
    std::fs::write(&body, b"x").unwrap();
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[("RMCP_SHIM", shim_s)]);
    let s = one(&j, "shim");
    assert_eq!(s["status"], "ok");
    assert_eq!(s["path"], shim_s);
    assert_eq!(
        s["body"],
        std::fs::canonicalize(&body).unwrap().to_str().unwrap()
    );
    let (_, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("RMCP_SHIM", "/nonexistent/librmcp_shim.so")],
    );
    assert_eq!(one(&j, "shim")["status"], "warn");
}

#[test]
fn hip_runtimes_on_the_library_path() {
    let e = env();
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("libamdhip64.so.6.4.60403");
    std::fs::write(&real, b"not a library").unwrap();
    std::os::unix::fs::symlink(
        "libamdhip64.so.6.4.60403",
        dir.path().join("libamdhip64.so.6"),
    )
    .unwrap();
    std::os::unix::fs::symlink("libamdhip64.so.6", dir.path().join("libamdhip64.so")).unwrap();
    let (_, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("LD_LIBRARY_PATH", dir.path().to_str().unwrap())],
    );
    let real_s = std::fs::canonicalize(&real).unwrap().display().to_string();
    let libs = j["libraries"].as_array().unwrap();
    let lib = libs
        .iter()
        .find(|l| l["path"] == real_s.as_str())
        .unwrap_or_else(|| panic!("{libs:#?}"));
    assert_eq!(lib["version"], "6.4.60403");
    assert_eq!(lib["origins"][0], "ld-library-path");
    assert_eq!(lib["default_for"], serde_json::json!(["libamdhip64.so.6"]));
    assert_eq!(lib["found_as"].as_array().unwrap().len(), 3);
    let f = findings(&j, "hip-runtime")
        .into_iter()
        .find(|f| f["path"] == real_s.as_str())
        .unwrap();
    assert_eq!(f["status"], "info");
    let m = f["message"].as_str().unwrap();
    assert!(
        m.contains("libamdhip64 6.4.60403") && m.contains("LD_LIBRARY_PATH"),
        "{m}"
    );
    assert!(
        m.contains("linked against libamdhip64.so.6 loads this copy"),
        "{m}"
    );
}

#[test]
fn hip_runtimes_bundled_in_site_packages() {
    // A stand-in for python3 that names a site-packages with torch/lib/libamdhip64.so.
    let e = env();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let sp = root.join("site-packages");
    std::fs::create_dir_all(sp.join("torch/lib")).unwrap();
    std::fs::write(sp.join("torch/lib/libamdhip64.so"), b"x").unwrap();
    std::fs::create_dir_all(sp.join("numpy")).unwrap();
    let py = root.join("fake-python3");
    let src = root.join("fake-python3.src");
    std::fs::write(
        &src,
        format!(
            "#!/bin/sh\nprintf '%s\\n' '{}' /nonexistent/dir\n",
            sp.display()
        ),
    )
    .unwrap();
    // Written by a child process: an executable this process had open for writing can
    // be inherited by another test's fork and make exec fail with ETXTBSY.
    let ok = std::process::Command::new("install")
        .args(["-m", "0755"])
        .arg(&src)
        .arg(&py)
        .status()
        .unwrap();
    assert!(ok.success());
    let (_, j) = json(
        &e,
        Some(&fixture("rdna1")),
        &[("RMCP_PYTHON", py.to_str().unwrap())],
    );
    let want = sp.join("torch/lib/libamdhip64.so").display().to_string();
    let libs = j["libraries"].as_array().unwrap();
    let lib = libs
        .iter()
        .find(|l| l["path"] == want.as_str())
        .unwrap_or_else(|| panic!("{want} not in {libs:#?}"));
    assert_eq!(lib["origins"], serde_json::json!(["site-packages"]));
    assert_eq!(lib["version"], Value::Null);
    assert_eq!(lib["default_for"], serde_json::json!([]));
    let f = findings(&j, "hip-runtime")
        .into_iter()
        .find(|f| f["path"] == want.as_str())
        .unwrap();
    let m = f["message"].as_str().unwrap();
    assert!(
        m.contains("of unknown version") && m.contains("torch/lib"),
        "{m}"
    );
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    // `script` gives the command a pseudo-terminal; without it only the plain case is checked.
    let e = env();
    let have_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let plain = human(&e, Some(&fixture("rdna1")), &[]);
    assert!(!plain.text.contains('\x1b'));
    if !have_script {
        rmcp_testkit::missing("no script(1) for the terminal colour check (Debian: bsdutils)");
        return;
    }
    let cmdline = format!("{RMCP} doctor --sysfs {}", fixture("rdna1").display());
    let run = |no_color: Option<&str>| -> String {
        let mut c = Command::new("script");
        c.args(["-q", "-e", "-c", &cmdline, "/dev/null"])
            .env("RMCP_DEV_ROOT", e.dev.path())
            .env("RMCP_MODULE_ROOT", e.module.path())
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let tty = run(None);
    assert!(tty.contains("\x1b[32mok"), "{tty:?}");
    assert!(!run(Some("1")).contains('\x1b'));
}

#[test]
fn doctor_failure_is_status_2() {
    // The report cannot be written (/dev/full: ENOSPC): doctor failed, not the machine.
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        rmcp_testkit::skip("no /dev/full: the failed-report exit status not checked");
        return;
    };
    let e = env();
    let out = doctor_cmd(&e, Some(&fixture("rdna1")), &[], false)
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write"));
}

#[test]
fn json_schema_is_stable() {
    let e = env();
    let (_, j) = json(&e, Some(&fixture("rdna1")), &[]);
    assert_eq!(j["rmcp"], env!("CARGO_PKG_VERSION"));
    assert_eq!(j["schema"], 1);
    for key in [
        "sysfs",
        "status",
        "exit_status",
        "summary",
        "gpus",
        "libraries",
        "code_objects",
        "findings",
    ] {
        assert!(j.get(key).is_some(), "{key}");
    }
    for f in j["findings"].as_array().unwrap() {
        assert!(["ok", "info", "warn", "error"].contains(&f["status"].as_str().unwrap()));
        assert!(f["check"].is_string() && f["message"].is_string());
        assert!(f["source"].is_null() || f["source"].as_str().unwrap().starts_with("https://"));
    }
    let g = &j["gpus"][0];
    for key in [
        "node",
        "gfx",
        "gfx_target_version",
        "pci",
        "vendor_id",
        "device_id",
        "pcie_atomics",
        "affected",
        "rmcp",
        "gfx_override",
        "render_node",
    ] {
        assert!(g.get(key).is_some(), "gpus[].{key}");
    }
}

/// README's excerpt ("Part of `rmcp doctor --sysfs tests/fixtures/rdna1` with
/// `HSA_OVERRIDE_GFX_VERSION=10.3.0`") is what doctor prints: the GPU table, and the
/// findings from gfx-override on, line for line.
#[test]
fn readmes_excerpt_is_what_doctor_prints() {
    let readme = std::fs::read_to_string(rmcp_testkit::repo().join("README.md")).unwrap();
    let start = readme
        .find("Part of `rmcp doctor --sysfs tests/fixtures/rdna1`")
        .expect("README's doctor excerpt");
    let block = &readme[start..];
    let block = &block[block.find("```text\n").unwrap() + 8..];
    let block = &block[..block.find("```").unwrap()];
    let e = env();
    let h = human(
        &e,
        Some(&fixture("rdna1")),
        &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")],
    );
    let (table, findings) = block.split_once("\nFindings\n").unwrap();
    assert!(h.text.contains(table), "{table}\nnot in\n{}", h.text);
    assert!(
        h.text.contains(findings.trim_end_matches('\n')),
        "README's findings\n{findings}\nnot in\n{}",
        h.text
    );
}
