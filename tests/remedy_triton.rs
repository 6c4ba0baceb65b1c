//! The doctor's `triton` check on a home with poisoned caches, and its remedy run as
//! printed (issue 34).
//!
//! Real Triton (Triton 3.5.1 from PyPI in the venv RMCP_TRITON_VENV names, else
//! target/wheel-cache/triton-venv, which scripts/triton-venv makes) compiles a vector-add
//! kernel, with HOME pointing at a fresh directory, for gfx1010 with AMDGCN_USE_BUFFER_OPS=1
//! (the object whose buffer descriptors drop writes on an RX 5000), for gfx1010 with it off
//! and for gfx1030 with it on: Triton itself writes the three into `~/.triton/cache`. The
//! gfx1010 buffer-ops object is also put where Inductor keeps Triton's kernels
//! (`<tmp>/torchinductor_<user>/triton/0/<hash>/`). Then `rmcp doctor --sysfs rdna1` in
//! that environment must name both caches and that one object in each, and no other; the
//! commands it prints under its warnings, pasted into `sh` as they are, must leave caches
//! that the doctor, run again in the same shell, calls clean: in Triton's cache only the
//! poisoned object's entry (its hash directory) is gone and the two good entries stay,
//! Inductor's (whose FX graph entries would write the kernels back) is gone as a whole.
//! The home and temporary directories have a space and a quote in their names, so every
//! path printed must be quoted to work. Without the venv the test skips, saying why (in CI
//! that fails it).

use std::path::{Path, PathBuf};
use std::process::Command;

use rmcp_testkit::{fixture, missing, printed_commands_in, repo};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
const USER: &str = "rmcpdoctor";

fn triton_python() -> Option<PathBuf> {
    let venv = std::env::var_os("RMCP_TRITON_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/wheel-cache/triton-venv"));
    let python = venv.join("bin/python");
    if python.is_file() {
        Some(python)
    } else {
        missing(&format!(
            "no Triton venv at {} (run scripts/triton-venv, or set RMCP_TRITON_VENV)",
            venv.display()
        ));
        None
    }
}

/// Compiles the kernel for each (target, AMDGCN_USE_BUFFER_OPS) given on the command line
/// into Triton's default cache (`~/.triton/cache`) and prints the cache directory of each.
const COMPILE: &str = r#"
import os, sys
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
for spec in sys.argv[1:]:
    arch, ops = spec.split(":")
    os.environ["AMDGCN_USE_BUFFER_OPS"] = ops
    k = triton.compile(ASTSource(fn=add_kernel, signature=sig, constexprs={"BLOCK": 1024}),
                       target=GPUTarget("hip", arch, 32))
    print(spec, arch, ops)
"#;

/// The environment of every process here: the home and temporary directory of the test,
/// no Python environment for the doctor to read, nothing of the test's own.
fn env(c: &mut Command, home: &Path, tmp: &Path) {
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env("LOGNAME", USER)
        .env("RMCP_PYTHON", "");
}

/// `p` as one shell word, as the doctor quotes it (the paths here all need quoting).
fn quoted(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The `.hsaco` files under `dir`.
fn hsaco_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(hsaco_files(&p));
        } else if p.extension().is_some_and(|x| x == "hsaco") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The commands printed under every warn or error `triton` finding, as shown (`$ `,
/// indentation removed, continuation lines kept for the shell).
fn printed_commands(text: &str) -> Vec<String> {
    // Header lines set `inside`; the indented lines of the triton findings are read.
    let mut inside = false;
    printed_commands_in(text.lines().filter(|line| {
        if !line.starts_with(' ') {
            let mut w = line.split_whitespace();
            inside = matches!(w.next(), Some("warn" | "error")) && w.next() == Some("triton");
            return false;
        }
        inside
    }))
}

fn triton_findings(json: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(json).expect("doctor --json");
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "triton" && f.get("cache").is_some())
        .cloned()
        .collect()
}

#[test]
fn the_doctor_names_a_poisoned_cache_and_its_remedy_cleans_it() {
    let Some(python) = triton_python() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(scratch.path()).unwrap();
    let (home, tmp) = (root.join("alice's home"), root.join("t m p"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let script = root.join("compile.py");
    std::fs::write(&script, COMPILE).unwrap();

    // Triton fills its own cache, one object at a time (the first one is the poisoned one).
    let triton_cache = home.join(".triton/cache");
    let mut poisoned = None;
    for spec in ["gfx1010:1", "gfx1010:0", "gfx1030:1"] {
        let before = hsaco_files(&triton_cache);
        let mut c = Command::new(&python);
        c.arg(&script).arg(spec);
        env(&mut c, &home, &tmp);
        let out = c.output().unwrap();
        assert!(out.status.success(), "{spec}: {out:?}");
        let new: Vec<PathBuf> = hsaco_files(&triton_cache)
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        assert_eq!(new.len(), 1, "{spec}: {new:?}");
        poisoned.get_or_insert_with(|| new[0].clone());
    }
    let poisoned = poisoned.unwrap();
    let all = hsaco_files(&triton_cache);
    assert_eq!(all.len(), 3);
    let good: Vec<PathBuf> = all.into_iter().filter(|p| *p != poisoned).collect();
    // Triton keeps one directory per kernel (its hash) under the cache's root.
    let entry = poisoned.parent().unwrap().to_path_buf();
    assert_eq!(entry.parent(), Some(triton_cache.as_path()));
    assert!(good.iter().all(|g| !g.starts_with(&entry)), "{good:?}");

    // The same object where Inductor keeps Triton's kernels.
    let inductor = tmp.join(format!("torchinductor_{USER}"));
    let in_inductor = inductor.join("triton/0/K7Q").join("add_kernel.hsaco");
    std::fs::create_dir_all(in_inductor.parent().unwrap()).unwrap();
    std::fs::copy(&poisoned, &in_inductor).unwrap();
    // And a FIFO beside it, which the scan must pass over without waiting.
    let fifo = std::ffi::CString::new(
        inductor
            .join("triton/0/K7Q/f.hsaco")
            .as_os_str()
            .as_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

    let doctor = |json: bool| {
        let mut c = Command::new(RMCP);
        c.arg("doctor").arg("--sysfs").arg(fixture("rdna1"));
        if json {
            c.arg("--json");
        }
        env(&mut c, &home, &tmp);
        let out = c.output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };

    // Named: the two caches, with that object in each, and nothing else.
    let found = triton_findings(&doctor(true));
    let by_path = |p: &Path| {
        found
            .iter()
            .find(|f| f["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("no finding for {}: {found:#?}", p.display()))
            .clone()
    };
    let t = by_path(&triton_cache);
    assert_eq!(t["status"], "warn", "{t:#}");
    assert_eq!(t["scanned"], 3, "{t:#}");
    assert_eq!(
        t["broken"],
        serde_json::json!([poisoned.display().to_string()])
    );
    assert_eq!(
        t["broken_entries"],
        serde_json::json!([entry.display().to_string()])
    );
    let fix = t["remedy"]["text"].as_str().unwrap();
    assert!(
        fix.contains("Remove the 1 entry holding the code objects named above")
            && fix
                .contains("the 2 other entries with code objects, and the rest of the cache, stay"),
        "{fix}"
    );
    let i = by_path(&inductor);
    assert_eq!(i["status"], "warn", "{i:#}");
    assert_eq!(
        i["broken"],
        serde_json::json!([in_inductor.display().to_string()])
    );
    let commands = rmcp_testkit::remedy_commands;
    // Triton's: the poisoned entry only. Inductor's: the whole directory.
    assert_eq!(
        commands(&t),
        [
            format!("rm -rf -- {}", quoted(&entry)),
            "export AMDGCN_USE_BUFFER_OPS=0".to_string()
        ]
    );
    assert_eq!(
        commands(&i),
        [
            format!("rm -rf -- {}", quoted(&inductor)),
            "export AMDGCN_USE_BUFFER_OPS=0".to_string()
        ]
    );

    // The human text names the object, and its commands work as printed.
    let text = doctor(false);
    // (Detail lines wrap long paths at a `/`: the directory Triton named is looked for.)
    let key = poisoned
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    assert!(
        text.contains(&*key) && text.contains("add_kernel.hsaco"),
        "{text}"
    );
    let pasted = printed_commands(&text);
    assert!(pasted.len() >= 4, "{pasted:?}\n{text}");
    let session = format!(
        "set -e\n{}\n\"$RMCP\" doctor --json --sysfs \"$SYSFS\"\n",
        pasted.join("\n")
    );
    let mut c = Command::new("sh");
    c.args(["-c", &session]);
    env(&mut c, &home, &tmp);
    c.env("RMCP", RMCP).env("SYSFS", fixture("rdna1"));
    let out = c.output().unwrap();
    let after = triton_findings(&String::from_utf8_lossy(&out.stdout));
    assert!(!after.is_empty(), "{out:?}");
    for f in &after {
        assert_eq!(f["status"], "ok", "{f:#}");
        assert_eq!(f["broken"], serde_json::json!([]), "{f:#}");
    }
    // The poisoned entry is gone, the good ones stay; Inductor's cache is gone.
    assert!(!entry.exists() && !inductor.exists());
    assert_eq!(hsaco_files(&triton_cache), good);
    let t_after = after
        .iter()
        .find(|f| f["path"] == triton_cache.display().to_string())
        .unwrap();
    assert_eq!(t_after["scanned"], 2, "{t_after:#}");
    // The exported variable reached the doctor's own run.
    let env_seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let install_or_none = env_seen["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "triton" && f.get("cache").is_none())
        .cloned()
        .unwrap();
    assert_eq!(
        install_or_none["buffer_ops_variable"], "0",
        "{install_or_none:#}"
    );
}

/// The install finding, on made-up site-packages (no Triton needed): Triton 3.6's
/// `knobs.py` turns buffer ops on by default, 3.5's does not; the environment's
/// AMDGCN_USE_BUFFER_OPS decides over both; only an RX 5000 makes it a warning.
#[test]
fn the_doctor_says_whether_each_triton_compiles_buffer_ops() {
    let scratch = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(scratch.path()).unwrap();
    let (home, tmp) = (root.join("home"), root.join("tmp"));
    let site = |venv: &str, dist: &str, knobs: &str| {
        let sp = root.join(venv).join("lib/python3.12/site-packages");
        std::fs::create_dir_all(sp.join(dist)).unwrap();
        std::fs::create_dir_all(sp.join("triton")).unwrap();
        std::fs::write(sp.join("triton/knobs.py"), knobs).unwrap();
        root.join(venv)
    };
    let on = site(
        "v36",
        "pytorch_triton_rocm-3.6.0.dist-info",
        "class amd_knobs(base_knobs):\n    use_buffer_ops: env_bool = env_bool(\"AMDGCN_USE_BUFFER_OPS\", True)\n",
    );
    let off = site(
        "v35",
        "triton-3.5.1.dist-info",
        "class amd_knobs(base_knobs):\n    use_buffer_ops: env_bool = env_bool(\"AMDGCN_USE_BUFFER_OPS\")\n",
    );
    // (venv, fixture, AMDGCN_USE_BUFFER_OPS, status, buffer_ops, distribution)
    type Row<'a> = (&'a Path, &'a str, Option<&'a str>, &'a str, bool, &'a str);
    let table: &[Row] = &[
        (&on, "rdna1", None, "warn", true, "pytorch-triton-rocm"),
        (&on, "rdna1", Some("0"), "ok", false, "pytorch-triton-rocm"),
        (&on, "rdna2", None, "ok", true, "pytorch-triton-rocm"),
        (&off, "rdna1", None, "ok", false, "triton"),
        (&off, "rdna1", Some("1"), "warn", true, "triton"),
    ];
    for (venv, fx, var, status, ops, dist) in table {
        let mut c = Command::new(RMCP);
        c.args(["doctor", "--json", "--sysfs"]).arg(fixture(fx));
        env(&mut c, &home, &tmp);
        c.env("VIRTUAL_ENV", venv);
        if let Some(v) = var {
            c.env("AMDGCN_USE_BUFFER_OPS", v);
        }
        let out = c.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let f = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == "triton" && f.get("distribution").is_some())
            .unwrap_or_else(|| panic!("{venv:?} {fx}: {v:#}"))
            .clone();
        let what = format!("{venv:?} {fx} {var:?}: {f:#}");
        assert_eq!(f["status"], *status, "{what}");
        assert_eq!(f["buffer_ops"], *ops, "{what}");
        assert_eq!(f["distribution"], *dist, "{what}");
        assert_eq!(f.get("remedy").is_some(), *status == "warn", "{what}");
    }
}
