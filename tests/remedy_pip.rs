//! The RX 5000 PyTorch remedy, run as printed, with real pip, in the situation it is printed
//! for: a venv (activated) holding a pytorch.org torch, torchvision and torchaudio, on an
//! RX 5700 XT (the `rdna1` KFD fixture, gfx1010).
//!
//! Two local package indexes, served over HTTP by `python3 -m http.server` on 127.0.0.1 (a
//! port the system picks; stopped when the test ends, and every pip command has a time
//! limit), hold stand-in wheels built here:
//! - `org/whl/rocm6.4/`, shaped like pytorch.org's: `torch 2.9.1+rocm6.4` (no extras), whose
//!   `torch/lib/libtorch_hip.so` carries code for pytorch.org's target list and not gfx1010
//!   (`rmcp_core::code_objects::write`, the format the doctor reads), and `torchvision` /
//!   `torchaudio` pinned to that torch;
//! - `therock/whl-multi-arch/`, shaped like TheRock's multi-arch index: `torch
//!   2.9.1+rocm7.10.0a20251120` with a `device-gfxNNNN` extra for each of gfx1010-gfx1012
//!   and gfx1030-gfx1036 pulling `amd-torch-device-gfxNNNN` (which carries a marker file
//!   naming its target, where the real package carries the kernels), `torchvision` with the
//!   same extras (`amd-torchvision-device-gfxNNNN`) and `torchaudio`, pinned to that torch.
//!
//! The test installs the pytorch.org set, shows that the former remedy (`pip install
//! --index-url ... "torch[device-gfx1010]"`) changes nothing ("Requirement already
//! satisfied", "does not provide the extra"), then takes the commands from `rmcp doctor`'s
//! own text output, replaces only TheRock's index URL with the local one, runs them with
//! `sh`, and checks that the venv then holds the gfx1010 build, that pip finds no broken
//! requirement, and that the doctor now says the build runs on the card. It also checks that
//! README's RX 5000 block is the doctor's commands. Nothing here needs PyPI: pip comes from
//! the venv, the packages from the local indexes.
//!
//! Without python3 or its venv module (Debian's python3-venv) the test skips, saying why; in
//! CI that fails it instead.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use rmcp_core::code_objects::{FATBIN_SECTION, write};
use rmcp_core::remedy::{PYTORCH_ORG_TARGETS, THEROCK_INDEX};
use rmcp_testkit::{fixture, output_within, python3, repo};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
const ORG_TORCH: &str = "2.9.1+rocm6.4";
const THEROCK_TORCH: &str = "2.9.1+rocm7.10.0a20251120";
/// Each pip command's limit (local indexes, tiny wheels: seconds in practice).
const PIP_LIMIT: Duration = Duration::from_secs(180);

/// Builds the stand-in wheels and writes both indexes (PEP 503 simple pages) under argv[1];
/// argv[2] and argv[3] are the pytorch.org and TheRock `libtorch_hip.so` contents.
const MAKE_INDEXES: &str = r#"
import base64, hashlib, html, os, re, sys, urllib.parse, zipfile
out, org_lib, therock_lib = sys.argv[1], open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
ORG, ORG_TV = "2.9.1+rocm6.4", "0.24.1+rocm6.4"
TR, TR_TV = "2.9.1+rocm7.10.0a20251120", "0.24.1+rocm7.10.0a20251120"
TARGETS = ["gfx1010", "gfx1011", "gfx1012"] + ["gfx103%d" % i for i in range(7)]
pages = {}

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def wheel(index, name, version, files, requires=(), extras=None):
    dist = re.sub(r"[-_.]+", "_", name)
    di = "%s-%s.dist-info" % (dist, version)
    meta = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version]
    meta += ["Requires-Dist: " + r for r in requires]
    for extra, reqs in (extras or {}).items():
        meta.append("Provides-Extra: " + extra)
        meta += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    files = dict(files)
    files[di + "/METADATA"] = ("\n".join(meta) + "\n").encode()
    files[di + "/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: rmcp-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(di + "/RECORD,,")
    files[di + "/RECORD"] = ("\n".join(record) + "\n").encode()
    project = os.path.join(out, index, norm(name))
    os.makedirs(project, exist_ok=True)
    fname = "%s-%s-py3-none-any.whl" % (dist, version)
    with zipfile.ZipFile(os.path.join(project, fname), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    sha = hashlib.sha256(open(os.path.join(project, fname), "rb").read()).hexdigest()
    pages.setdefault((index, norm(name)), []).append((fname, sha))

def torch(index, version, lib, extras=None):
    files = {
        "torch/__init__.py": b"from .version import __version__\n",
        "torch/version.py": ("__version__ = '%s'\nhip = '7.0.0'\n" % version).encode(),
        "torch/lib/libtorch_hip.so": lib,
    }
    wheel(index, "torch", version, files, extras=extras)

def simple(name, version, torch_version, index, extras=None):
    pkg = name.replace("-", "_")
    wheel(index, name, version, {pkg + "/__init__.py": ("__version__ = '%s'\n" % version).encode()},
          requires=["torch==" + torch_version], extras=extras)

org = "org/whl/rocm6.4"
torch(org, ORG, org_lib)
simple("torchvision", ORG_TV, ORG, org)
simple("torchaudio", ORG, ORG, org)

tr = "therock/whl-multi-arch"
torch(tr, TR, therock_lib, {"device-" + t: ["amd-torch-device-%s==%s" % (t, TR)] for t in TARGETS})
simple("torchvision", TR_TV, TR, tr,
       {"device-" + t: ["amd-torchvision-device-%s==%s" % (t, TR_TV)] for t in TARGETS})
simple("torchaudio", TR, TR, tr)
for t in TARGETS:
    for base, version in (("amd-torch-device-", TR), ("amd-torchvision-device-", TR_TV)):
        pkg = (base + t).replace("-", "_")
        wheel(tr, base + t, version, {pkg + "/__init__.py": b"", pkg + "/target": t.encode()})

roots = {}
for (index, project), wheels in pages.items():
    links = "".join('<a href="%s#sha256=%s">%s</a><br/>\n'
                    % (urllib.parse.quote(f), s, html.escape(f)) for f, s in wheels)
    with open(os.path.join(out, index, project, "index.html"), "w") as fh:
        fh.write("<!DOCTYPE html>\n<html><body>\n%s</body></html>\n" % links)
    roots.setdefault(index, []).append(project)
for index, projects in roots.items():
    links = "".join('<a href="%s/">%s</a><br/>\n' % (p, p) for p in sorted(projects))
    with open(os.path.join(out, index, "index.html"), "w") as fh:
        fh.write("<!DOCTYPE html>\n<html><body>\n%s</body></html>\n" % links)
"#;

/// A missing prerequisite: a skip that says why, a failure in CI.
fn skip(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI, but {why} (apt-get install python3 python3-venv)"
    );
    eprintln!("skipped: {why}");
}

/// `python3 -m http.server` on 127.0.0.1, on a port the system picks; killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(python: &Path, dir: &Path) -> Server {
        let mut child = Command::new(python)
            .args([
                "-u",
                "-m",
                "http.server",
                "0",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 -m http.server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30));
        let port = line.as_deref().ok().and_then(|l| {
            l.split_whitespace()
                .skip_while(|w| *w != "port")
                .nth(1)
                .and_then(|p| p.parse().ok())
        });
        let mut server = Server { child, port: 0 };
        match port {
            Some(p) => server.port = p,
            None => panic!("http.server did not say its port within 30 s: {line:?}"),
        }
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment of a shell with the venv activated: nothing of this machine's pip
/// configuration, caches under the test's directory.
fn activated(cmd: &mut Command, venv: &Path, home: &Path) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![venv.join("bin")];
    dirs.extend(std::env::split_paths(&path));
    cmd.env_clear()
        .env("PATH", std::env::join_paths(dirs).unwrap())
        .env("VIRTUAL_ENV", venv)
        .env("HOME", home)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_NO_INPUT", "1")
        .env("LC_ALL", "C.UTF-8");
}

/// `sh -ec SCRIPT` in the activated venv, within the pip limit.
fn sh(script: &str, venv: &Path, home: &Path) -> Output {
    let mut c = Command::new("sh");
    c.arg("-ec").arg(script).stdin(Stdio::null());
    activated(&mut c, venv, home);
    output_within(&mut c, PIP_LIMIT).unwrap_or_else(|e| panic!("{script}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `python -c CODE` in the venv: its stdout, trimmed.
fn venv_python(code: &str, venv: &Path, home: &Path) -> String {
    let o = sh(&format!("python -c \"{code}\""), venv, home);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `rmcp doctor` (text, or JSON) as a user runs it in the activated venv on an RX 5700 XT.
fn doctor(venv: &Path, home: &Path, json: bool) -> String {
    let mut c = Command::new(RMCP);
    activated(&mut c, venv, home);
    c.arg("doctor").arg("--sysfs").arg(fixture("rdna1"));
    if json {
        c.arg("--json");
    }
    let o = output_within(&mut c, Duration::from_secs(120)).unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
    String::from_utf8(o.stdout).unwrap()
}

/// The commands printed under the first finding of `check`, exactly as shown (`$ ` and
/// the continuation lines, indentation removed, continuations kept for the shell).
fn printed_commands(doctor_text: &str, check: &str) -> Vec<String> {
    let mut lines = doctor_text.lines().skip_while(|l| {
        l.split_whitespace().nth(1) != Some(check)
            || !matches!(l.split_whitespace().next(), Some("warn" | "error"))
    });
    assert!(
        lines.next().is_some(),
        "no {check} finding in\n{doctor_text}"
    );
    let mut commands: Vec<String> = Vec::new();
    let mut continued = false;
    for line in lines.take_while(|l| l.starts_with(' ')) {
        let t = line.trim_start();
        if continued {
            let last = commands.last_mut().unwrap();
            last.push('\n');
            last.push_str(t);
        } else if let Some(c) = t.strip_prefix("$ ") {
            commands.push(c.to_string());
        } else {
            continue;
        }
        continued = t.ends_with('\\');
    }
    commands
}

#[test]
fn the_printed_rx5000_remedy_replaces_a_pytorch_org_torch_with_the_gfx1010_build() {
    let Some(py) = python3() else {
        return;
    };
    let tmp = rmcp_testkit::tempfile::tempdir().unwrap();
    let (home, venv, index) = (
        tmp.path().join("home"),
        tmp.path().join("venv"),
        tmp.path().join("index"),
    );
    std::fs::create_dir_all(&home).unwrap();
    let made = output_within(
        Command::new(&py).arg("-m").arg("venv").arg(&venv),
        Duration::from_secs(120),
    )
    .unwrap();
    if !made.status.success() {
        skip(&format!(
            "python3 cannot make a venv with pip (python3-venv missing?): {}",
            String::from_utf8_lossy(&made.stdout).trim()
        ));
        return;
    }

    // The stand-in wheels and the two indexes.
    let org_lib = write::elf(&[(
        FATBIN_SECTION,
        &write::section(&[write::hip_bundle(PYTORCH_ORG_TARGETS)]),
    )]);
    // TheRock's torch keeps its kernels in the device packages: no GPU code of its own.
    let therock_lib = write::elf(&[]);
    let (org_path, therock_path) = (tmp.path().join("org.so"), tmp.path().join("therock.so"));
    std::fs::write(&org_path, org_lib).unwrap();
    std::fs::write(&therock_path, therock_lib).unwrap();
    let o = output_within(
        Command::new(&py)
            .arg("-c")
            .arg(MAKE_INDEXES)
            .arg(&index)
            .arg(&org_path)
            .arg(&therock_path),
        Duration::from_secs(60),
    )
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let server = Server::start(&py, &index);
    let (org_index, therock_index) = (
        server.url("org/whl/rocm6.4/"),
        server.url("therock/whl-multi-arch/"),
    );

    // Row 1 of README's table: a pytorch.org torch, torchvision and torchaudio.
    let o = sh(
        &format!("pip install --index-url {org_index} torch torchvision torchaudio"),
        &venv,
        &home,
    );
    assert!(o.status.success(), "{}", text(&o));
    let version = "import torch; print(torch.__version__)";
    assert_eq!(venv_python(version, &venv, &home), ORG_TORCH);

    // The former remedy changes nothing: pip finds torch satisfied, warns, exits 0.
    let o = sh(
        &format!("pip install --index-url {therock_index} \"torch[device-gfx1010]\""),
        &venv,
        &home,
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("Requirement already satisfied: torch"),
        "{out}"
    );
    assert!(
        out.contains("does not provide the extra 'device-gfx1010'"),
        "{out}"
    );
    assert_eq!(venv_python(version, &venv, &home), ORG_TORCH);

    // The doctor's remedy, as printed.
    let before = doctor(&venv, &home, false);
    assert!(
        before.contains(&format!("PyTorch {ORG_TORCH} (pytorch.org wheel)")),
        "{before}"
    );
    let commands = printed_commands(&before, "pytorch");
    assert!(
        commands.iter().any(|c| c.contains(THEROCK_INDEX)),
        "{commands:?} in\n{before}"
    );
    let script = commands.join("\n").replace(THEROCK_INDEX, &therock_index);
    let o = sh(&script, &venv, &home);
    assert!(o.status.success(), "{script}\n{}", text(&o));

    // The venv now holds the gfx1010 build, whole.
    assert_eq!(venv_python(version, &venv, &home), THEROCK_TORCH);
    let target = "import importlib.resources as r; \
                  print(r.files('amd_torch_device_gfx1010').joinpath('target').read_text())";
    assert_eq!(venv_python(target, &venv, &home), "gfx1010");
    let vision =
        "import torchvision, amd_torchvision_device_gfx1010; print(torchvision.__version__)";
    assert_eq!(
        venv_python(vision, &venv, &home),
        "0.24.1+rocm7.10.0a20251120"
    );
    let o = sh("pip check", &venv, &home);
    assert!(o.status.success(), "{}", text(&o));
    let after: serde_json::Value = serde_json::from_str(&doctor(&venv, &home, true)).unwrap();
    let verdicts: Vec<&serde_json::Value> = after["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "pytorch" && f.get("node").is_some())
        .collect();
    assert_eq!(verdicts.len(), 1, "{after:#}");
    assert_eq!(verdicts[0]["verdict"], "runs", "{after:#}");
    assert_eq!(verdicts[0]["build"], "TheRock");

    // README's RX 5000 block is these commands, after the unset.
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let flat: Vec<String> = commands
        .iter()
        .map(|c| {
            c.replace("\\\n", " ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let block = format!(
        "    unset HSA_OVERRIDE_GFX_VERSION\n    {}\n",
        flat.join("\n    ")
    );
    assert!(
        readme.contains(&block),
        "README has no RX 5000 block\n{block}"
    );
}

#[test]
fn printed_commands_are_read_with_their_continuations() {
    let text = "Findings\n\
                error pytorch       node 1: no code.\n\
                \x20                   fix: Use a build.\n\
                \x20                     $ pip uninstall -y torch\n\
                \x20                     $ pip install --index-url \\\n\
                \x20                         https://x/ \"torch[a]\"\n\
                \x20                   see https://example.org/\n\
                warn  other         x\n\
                \x20                     $ not this\n";
    assert_eq!(
        printed_commands(text, "pytorch"),
        [
            "pip uninstall -y torch",
            "pip install --index-url \\\nhttps://x/ \"torch[a]\""
        ]
    );
}
