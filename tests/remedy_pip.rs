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
//! Each test makes a venv and installs the pytorch.org set. The first shows that the former
//! remedy (`pip install --index-url ... "torch[device-gfx1010]"`) changes nothing
//! ("Requirement already satisfied", "does not provide the extra"). Then, for an RX 5700 XT
//! (`rdna1`) and a gfx1013 (`rdna1-gfx1013`), both under the usual
//! `HSA_OVERRIDE_GFX_VERSION=10.3.0`, it takes the commands from `rmcp doctor`'s own text
//! output, replaces only TheRock's index URL with the local one, runs them in one `sh` as a
//! user pastes them (the override set as it was), and runs `rmcp doctor --json` in that
//! same shell: the venv holds the gfx1010 build, whole (`pip check`), and the doctor says
//! it runs (gfx1013: through 10.1.0). It also checks that README's RX 5000 block is the
//! doctor's commands. Nothing here needs PyPI: pip comes from the venv, the packages from
//! the local indexes.
//!
//! Without python3 or its venv module (Debian's python3-venv) the test skips, saying why; in
//! CI that fails it instead.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use rmcp_core::code_objects::{FATBIN_SECTION, write};
use rmcp_core::remedy::{PYTORCH_ORG_TARGETS, THEROCK_INDEX};
use rmcp_testkit::{fixture, output_within, printed_commands_in, python3, repo};
use serde_json::Value;

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

/// A missing prerequisite: a skip that says why (in the summary at the end of the run), a
/// failure in CI.
fn skip(why: &str) {
    rmcp_testkit::missing(&format!("{why} (apt-get install python3 python3-venv)"));
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

/// `sh -ec SCRIPT` in the activated venv, within the pip limit; `vars` set in its
/// environment besides.
fn sh(script: &str, venv: &Path, home: &Path, vars: &[(&str, &Path)]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-ec").arg(script).stdin(Stdio::null());
    activated(&mut c, venv, home);
    for (k, v) in vars {
        c.env(k, v);
    }
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

/// The commands printed under the first warn or error finding of `check`, exactly as
/// shown (`$ ` and the continuation lines, indentation removed, continuations kept for
/// the shell).
fn printed_commands(doctor_text: &str, check: &str) -> Vec<String> {
    let mut lines = doctor_text.lines().skip_while(|l| {
        l.split_whitespace().nth(1) != Some(check)
            || !matches!(l.split_whitespace().next(), Some("warn" | "error"))
    });
    assert!(
        lines.next().is_some(),
        "no {check} finding in\n{doctor_text}"
    );
    printed_commands_in(lines.take_while(|l| l.starts_with(' ')))
}

/// A venv holding the pytorch.org set, and the two indexes served.
struct Scene {
    tmp: rmcp_testkit::tempfile::TempDir,
    home: PathBuf,
    venv: PathBuf,
    server: Server,
}

impl Scene {
    /// None (a skip) without python3 or its venv module.
    fn new() -> Option<Scene> {
        let py = python3()?;
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
            return None;
        }
        // The stand-in wheels and the two indexes. TheRock's torch keeps its kernels in
        // the device packages: no GPU code of its own.
        let org_lib = write::elf(&[(
            FATBIN_SECTION,
            &write::section(&[write::hip_bundle(PYTORCH_ORG_TARGETS)]),
        )]);
        let (org_path, therock_path) = (tmp.path().join("org.so"), tmp.path().join("therock.so"));
        std::fs::write(&org_path, org_lib).unwrap();
        std::fs::write(&therock_path, write::elf(&[])).unwrap();
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
        let scene = Scene {
            tmp,
            home,
            venv,
            server,
        };
        // README's first row: a pytorch.org torch, torchvision and torchaudio.
        let o = scene.sh(&format!(
            "pip install --index-url {} torch torchvision torchaudio",
            scene.org_index()
        ));
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(scene.torch_version(), ORG_TORCH);
        Some(scene)
    }

    fn org_index(&self) -> String {
        self.server.url("org/whl/rocm6.4/")
    }

    fn therock_index(&self) -> String {
        self.server.url("therock/whl-multi-arch/")
    }

    fn sh(&self, script: &str) -> Output {
        sh(script, &self.venv, &self.home, &[])
    }

    /// `python -c CODE` in the venv: its stdout, trimmed.
    fn python(&self, code: &str) -> String {
        let o = self.sh(&format!("python -c \"{code}\""));
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn torch_version(&self) -> String {
        self.python("import torch; print(torch.__version__)")
    }

    /// `rmcp doctor` as a user runs it in the activated venv, on the fixture's card,
    /// with HSA_OVERRIDE_GFX_VERSION set to `over`.
    fn doctor_text(&self, fixture_name: &str, over: &str) -> String {
        let mut c = Command::new(RMCP);
        activated(&mut c, &self.venv, &self.home);
        c.env("HSA_OVERRIDE_GFX_VERSION", over)
            .arg("doctor")
            .arg("--sysfs")
            .arg(fixture(fixture_name));
        let o = output_within(&mut c, Duration::from_secs(120)).unwrap();
        assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
        String::from_utf8(o.stdout).unwrap()
    }

    /// Runs the printed commands as a user pastes them into the shell the doctor ran in
    /// (the override set as it was), TheRock's index URL replaced by the local one, then
    /// `rmcp doctor --json` in that same shell: its report.
    fn run_printed(&self, commands: &[String], fixture_name: &str, over: &str) -> Value {
        assert!(
            commands.iter().any(|c| c.contains(THEROCK_INDEX)),
            "{commands:?}"
        );
        let pasted = commands
            .join("\n")
            .replace(THEROCK_INDEX, &self.therock_index());
        let after = self.tmp.path().join("after.json");
        let script = format!(
            "export HSA_OVERRIDE_GFX_VERSION={over}\n{pasted}\n\
             \"$RMCP\" doctor --json --sysfs \"$FIXTURE\" > \"$AFTER\" || test $? = 1\n"
        );
        let fix = fixture(fixture_name);
        let o = sh(
            &script,
            &self.venv,
            &self.home,
            &[
                ("RMCP", Path::new(RMCP)),
                ("FIXTURE", &fix),
                ("AFTER", &after),
            ],
        );
        assert!(o.status.success(), "{script}\n{}", text(&o));
        serde_json::from_str(&std::fs::read_to_string(&after).unwrap()).unwrap()
    }

    /// The venv holds TheRock's build with the gfx1010 device packages, whole.
    fn holds_the_gfx1010_build(&self) {
        assert_eq!(self.torch_version(), THEROCK_TORCH);
        let target = "import importlib.resources as r; \
                      print(r.files('amd_torch_device_gfx1010').joinpath('target').read_text())";
        assert_eq!(self.python(target), "gfx1010");
        let vision =
            "import torchvision, amd_torchvision_device_gfx1010; print(torchvision.__version__)";
        assert_eq!(self.python(vision), "0.24.1+rocm7.10.0a20251120");
        let o = self.sh("pip check");
        assert!(o.status.success(), "{}", text(&o));
    }
}

/// The pytorch verdict for the GPU in a doctor report.
fn verdict(report: &Value) -> &Value {
    let v: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "pytorch" && f.get("node").is_some())
        .collect();
    assert_eq!(v.len(), 1, "{report:#}");
    v[0]
}

#[test]
fn the_printed_rx5000_remedy_replaces_a_pytorch_org_torch_with_the_gfx1010_build() {
    let Some(scene) = Scene::new() else {
        return;
    };
    // The former remedy changes nothing: pip finds torch satisfied, warns, exits 0.
    let o = scene.sh(&format!(
        "pip install --index-url {} \"torch[device-gfx1010]\"",
        scene.therock_index()
    ));
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
    assert_eq!(scene.torch_version(), ORG_TORCH);

    // An RX 5700 XT under the usual 10.3.0 override: the doctor's remedy, as printed.
    let before = scene.doctor_text("rdna1", "10.3.0");
    assert!(
        before.contains(&format!("PyTorch {ORG_TORCH} (pytorch.org wheel)")),
        "{before}"
    );
    let commands = printed_commands(&before, "pytorch");
    assert_eq!(commands[0], "unset HSA_OVERRIDE_GFX_VERSION", "{before}");
    let after = scene.run_printed(&commands, "rdna1", "10.3.0");
    scene.holds_the_gfx1010_build();
    let v = verdict(&after);
    assert_eq!(v["verdict"], "runs", "{after:#}");
    assert_eq!(v["build"], "TheRock");
    assert_eq!(v["runtime_gfx"], "gfx1010", "the override is gone");

    // README's RX 5000 block is these commands.
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
    let block = format!("    {}\n", flat.join("\n    "));
    assert!(
        readme.contains(&block),
        "README has no RX 5000 block\n{block}"
    );
}

#[test]
fn the_printed_gfx1013_remedy_installs_the_gfx1010_build_and_sets_10_1_0() {
    let Some(scene) = Scene::new() else {
        return;
    };
    let before = scene.doctor_text("rdna1-gfx1013", "10.3.0");
    let commands = printed_commands(&before, "pytorch");
    assert_eq!(
        commands.last().map(String::as_str),
        Some("export HSA_OVERRIDE_GFX_VERSION=10.1.0"),
        "{before}"
    );
    let after = scene.run_printed(&commands, "rdna1-gfx1013", "10.3.0");
    scene.holds_the_gfx1010_build();
    let v = verdict(&after);
    assert_eq!(v["verdict"], "runs-through-override", "{after:#}");
    assert_eq!(v["runtime_gfx"], "gfx1010");
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
