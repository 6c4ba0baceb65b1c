//! Debian's real ROCm 5.2.3 stack on the emulated GPU (scripts/emulated-gpu,
//! tests/emulated-gpu/emugpu.c): what the amdgpu driver receives for each hooked call,
//! with rmcp and without it.
//!
//! The table's expectations and the kernel's gfx10 memory-type rule are in
//! tests/emulated-gpu/kfd_table.py (tests/compat/run's check k uses the same file for the
//! newer runtimes); this test makes the runs it reads and asserts its verdict, plus what
//! the table does not cover: the probe's own answers, the override, an unknown ioctl.
//! Skipped without the real runtime or the emulator's headers; a failure under
//! RMCP_REQUIRE_REAL_HIP=1.

use rmcp_testkit::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// One run: its name, fixture, whether rmcp is preloaded, extra environment, steps.
type RunSpec<'a> = (
    &'a str,
    &'a str,
    bool,
    &'a [(&'a str, &'a str)],
    &'a [String],
);

/// Everything a run needs; None (a skip) when a prerequisite is missing.
fn setup() -> Option<(PathBuf, PathBuf)> {
    real_runtime()?;
    let lib = emugpu_lib()?;
    let py = python3()?;
    Some((lib, py))
}

/// scripts/emulated-gpu --fixture FIXTURE --log DIR/NAME.jsonl -- emu_probe5 STEPS, with
/// the shim preloaded when `shim`, and ENV; the output is also kept in DIR/NAME.out.
fn run(
    lib: &Path,
    dir: &Path,
    name: &str,
    fixture: &str,
    shim: bool,
    env: &[(&str, &str)],
    steps: &[String],
) -> Output {
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.arg("--fixture")
        .arg(fixture)
        .arg("--log")
        .arg(dir.join(format!("{name}.jsonl")))
        .arg("--")
        .arg(emu_probe(5))
        .args(steps)
        .env("EMUGPU_LIB", lib)
        .env_remove("LD_PRELOAD")
        .env_remove("HSA_OVERRIDE_GFX_VERSION");
    for (k, _) in std::env::vars() {
        if k.starts_with("RMCP_") {
            cmd.env_remove(k);
        }
    }
    if shim {
        cmd.env("LD_PRELOAD", rmcp_testkit::shim());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out =
        output_within(&mut cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{name}: {e}"));
    std::fs::write(dir.join(format!("{name}.out")), &out.stdout).unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn table(py: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new(py)
        .arg(repo().join("tests/emulated-gpu/kfd_table.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_driver_sees_no_coherent_allocation_from_a_rewritten_call() {
    let Some((lib, py)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let steps = table(&py, &["steps"]);
    // 5.2.3's ROCr does not know gfx1100: on the rdna3 fixture it finds no device.
    let r3steps = table(&py, &["steps", "5.2.3", "rdna3"]);
    let seq = table(&py, &["seq"]);
    let exempt = [("RMCP_EXEMPT", "emu_probe")];
    let off = [("RMCP_MODE", "off")];
    let runs: [RunSpec; 8] = [
        ("none", "rdna1", false, &[], &steps),
        ("rmcp", "rdna1", true, &[], &steps),
        ("exempt", "rdna1", true, &exempt, &steps),
        ("off", "rdna1", true, &off, &steps),
        ("r3none", "rdna3", false, &[], &r3steps),
        ("r3rmcp", "rdna3", true, &[], &r3steps),
        ("seqnone", "rdna1", false, &[], &seq),
        ("seqrmcp", "rdna1", true, &[], &seq),
    ];
    for (name, fixture, shim, env, steps) in runs {
        let out = run(&lib, d, name, fixture, shim, env, steps);
        let stderr = text(&out.stderr);
        // The script names its log; the emulator says what it refused.
        assert!(stderr.contains("ioctl log: "), "{name}: {stderr}");
        // Every step ran (hipInit, the count, the arch, each call and its free): a step
        // that failed is in the table's verdict, a missing one means the run stopped.
        let lines = text(&out.stdout).lines().count();
        assert_eq!(
            lines,
            steps.len(),
            "{name}: {}\n{stderr}",
            text(&out.stdout)
        );
    }
    let out = Command::new(&py)
        .arg(repo().join("tests/emulated-gpu/kfd_table.py"))
        .args(["check", "--runtime", "5.2.3"])
        .arg(d)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    println!("{report}");
    assert!(
        out.status.success() && report.contains("verdict: pass"),
        "{report}\n{}",
        text(&out.stderr)
    );
    // The shim's own stats say it rewrote, on a device it classified from the topology.
    let log = std::fs::read_to_string(d.join("rmcp.jsonl")).unwrap();
    assert!(log.contains("\"caller\":\"librmcp_shim_body.so\""), "{log}");
}

#[test]
fn the_override_changes_the_arch_hip_reports_not_the_classification() {
    let Some((lib, _)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let steps: Vec<String> = ["init", "count", "arch", "hipHostMalloc:1048576:0x0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let env = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0"), ("RMCP_LOG", "info")];
    let out = run(&lib, dir.path(), "override", "rdna1", true, &env, &steps);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(stdout.contains("arch rc=0 arch=gfx1030"), "{stdout}");
    assert!(
        stdout.contains("hipHostMalloc:1048576:0x0 rc=0 free=0"),
        "{stdout}"
    );
    assert!(
        stderr.contains("gfx1010 at 0000:03:00.0, affected"),
        "{stderr}"
    );
    let log = std::fs::read_to_string(dir.path().join("override.jsonl")).unwrap();
    let alloc = log
        .lines()
        .filter(|l| l.contains("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"))
        .find(|l| l.contains("\"size\":1048576,"))
        .unwrap_or_else(|| panic!("no 1 MiB allocation:\n{log}"));
    assert!(!alloc.contains("COHERENT"), "{alloc}");
    // Without the override the same probe reports gfx1010 (the table's runs check it too).
    let out = run(&lib, dir.path(), "plain", "rdna1", false, &[], &steps[..3]);
    assert!(text(&out.stdout).contains("arch rc=0 arch=gfx1010"));
}

#[test]
fn an_unknown_ioctl_fails_loudly() {
    let Some((lib, py)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    // nr 0x7e is past linux 6.1's KFD table: ENOTTY. A query AMDGPU_INFO does not know
    // (0x7f) on the render node: EINVAL.
    let script = "import os, fcntl, struct\n\
        fd = os.open('/dev/kfd', os.O_RDWR)\n\
        try:\n    fcntl.ioctl(fd, 0xc0084b7e, bytes(8)); print('kfd 0')\n\
        except OSError as e: print('kfd', e.errno)\n\
        r = os.open('/dev/dri/renderD128', os.O_RDWR)\n\
        q = struct.pack('<QII', 0, 0, 0x7f) + bytes(16)\n\
        try:\n    fcntl.ioctl(r, 0x40206445, q); print('drm 0')\n\
        except OSError as e: print('drm', e.errno)\n";
    let log = dir.path().join("unknown.jsonl");
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.arg("--log")
        .arg(&log)
        .arg("--")
        .arg(&py)
        .args(["-c", script])
        .env("EMUGPU_LIB", &lib)
        .env_remove("LD_PRELOAD");
    let out = output_within(&mut cmd, Duration::from_secs(60)).unwrap();
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(stdout, "kfd 25\ndrm 22\n", "{stderr}");
    assert!(
        stderr.contains("unknown KFD ioctl 0xc0084b7e (nr 0x7e): answered ENOTTY"),
        "{stderr}"
    );
    assert!(
        stderr.contains("AMDGPU_INFO query 0x7f is not emulated: answered EINVAL"),
        "{stderr}"
    );
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log.matches("\"unknown\":true").count(), 2, "{log}");
}

#[test]
fn composes_with_rmcp_run() {
    let Some((lib, _)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.jsonl");
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.arg("--log")
        .arg(&log)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_rmcp"))
        .arg("run")
        .arg("--")
        .arg(emu_probe(5))
        .args(["init", "arch", "hipHostMalloc:1048576:0x0"])
        .env("EMUGPU_LIB", &lib)
        .env("RMCP_SHIM", rmcp_testkit::shim())
        .env_remove("LD_PRELOAD");
    for (k, _) in std::env::vars() {
        if k.starts_with("RMCP_") && k != "RMCP_SHIM" {
            cmd.env_remove(k);
        }
    }
    let out = output_within(&mut cmd, Duration::from_secs(120)).unwrap();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("hipHostMalloc:1048576:0x0 rc=0 free=0"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let log = std::fs::read_to_string(&log).unwrap();
    let alloc = log
        .lines()
        .find(|l| l.contains("\"size\":1048576,") && l.contains("ALLOC_MEMORY"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(!alloc.contains("COHERENT"), "{alloc}");
    assert!(
        alloc.contains("\"caller\":\"librmcp_shim_body.so\""),
        "{alloc}"
    );
}

/// The runtime side of the doctor's code-object verdicts (issue 23): a hipcc code object
/// without gfx1010 code does not load on the emulated gfx1010 (5.2.3 reports
/// hipErrorNoBinaryForGpu and aborts the process), one with it does, and the gfx1030 one
/// loads under HSA_OVERRIDE_GFX_VERSION=10.3.0.
#[test]
fn a_code_object_without_gfx1010_does_not_load_without_the_override() {
    let Some((lib, py)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let build = |arch: &str| kernel_object(dir.path(), arch);
    let script = "import ctypes, sys\n\
        h = ctypes.CDLL('libamdhip64.so.5')\n\
        print('init', h.hipInit(0), flush=True)\n\
        m = ctypes.c_void_p()\n\
        print('load', h.hipModuleLoad(ctypes.byref(m), sys.argv[1].encode()), flush=True)\n\
        f = ctypes.c_void_p()\n\
        print('function', h.hipModuleGetFunction(ctypes.byref(f), m, b'k'), flush=True)\n";
    let load = |co: &Path, overrides: bool| {
        let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
        cmd.arg("--log")
            .arg(dir.path().join("load.jsonl"))
            .arg("--")
            .arg(&py)
            .args(["-c", script])
            .arg(co)
            .env("EMUGPU_LIB", &lib)
            .env_remove("LD_PRELOAD")
            .env_remove("HSA_OVERRIDE_GFX_VERSION");
        if overrides {
            cmd.env("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
        }
        output_within(&mut cmd, Duration::from_secs(120)).unwrap()
    };
    let (Some(co1010), Some(co1030)) = (build("gfx1010"), build("gfx1030")) else {
        return;
    };

    // What `rmcp doctor` says of each file on the same card (the rdna1 fixture the emulator
    // serves), without and with the override (issue 23, item 6): the loader below must do
    // exactly that.
    let doctor = |co: &Path, overrides: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rmcp"));
        cmd.args(["doctor", "--json", "--sysfs"])
            .arg(repo().join("tests/fixtures/rdna1"))
            .arg("--scan")
            .arg(co)
            .env_remove("HSA_OVERRIDE_GFX_VERSION");
        if overrides {
            cmd.env("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
        }
        let out = output_within(&mut cmd, Duration::from_secs(60)).unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "code-objects" && f.get("places").is_some())
            .map(|f| f["message"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let carries = "1 of 1 HIP library found carries gfx1010 code";
    let lacks = "0 of 1 HIP library found carries gfx1010 code";
    let override_finds = "look for gfx1030 code instead, which 1 of them carry";
    let said = doctor(&co1010, false);
    assert!(
        said.contains(carries),
        "doctor on the gfx1010 object: {said}"
    );
    let said = doctor(&co1030, false);
    assert!(said.contains(lacks), "doctor on the gfx1030 object: {said}");
    let said = doctor(&co1030, true);
    assert!(
        said.contains(lacks) && said.contains(override_finds),
        "doctor on the gfx1030 object under 10.3.0: {said}"
    );

    let out = load(&co1010, false);
    assert_eq!(text(&out.stdout), "init 0\nload 0\nfunction 0\n");
    let out = load(&co1030, false);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("hipErrorNoBinaryForGpu"),
        "{}",
        text(&out.stderr)
    );
    assert!(!text(&out.stdout).contains("load 0"));
    let out = load(&co1030, true);
    assert_eq!(text(&out.stdout), "init 0\nload 0\nfunction 0\n");
}

/// scripts/emulated-gpu [--fault SPEC] -- emu_probe5 STEPS, without the shim, in `dir`
/// (where a core file would go), the log in DIR/NAME.jsonl.
fn fault_run(lib: &Path, dir: &Path, name: &str, fault: Option<&str>, steps: &[&str]) -> Output {
    let log = dir.join(format!("{name}.jsonl"));
    let mut cmd = emugpu_probe_command(lib, dir, &log, fault, steps);
    output_within(&mut cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Issue 28: each fault kind the emulator injects, on the real 5.2.3 runtime without the
/// shim, as the runtime itself reports it. The kernel runs once cleanly (its first launch
/// also makes the runtime's own blit dispatches), then `fault:KIND` arms the next dispatch
/// (emugpu_fault, without an address: the kernel's argument, the probe's buffer) and the
/// second launch's dispatch faults. Debian's 5.2.3 libhsa-runtime64 is built with
/// asserts: a VM fault prints the runtime's message, its "Nearby memory map", and dies in
/// __assert_fail (SIGABRT); a queue error reaches HIP's queue callback, which prints and
/// calls abort() (SIGABRT).
#[test]
fn each_injected_fault_reaches_the_runtime_as_the_driver_reports_it() {
    use std::os::unix::process::ExitStatusExt;
    let Some((lib, _)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object(dir.path(), "gfx1010") else {
        return;
    };
    let load = format!("load:{}", co.display());
    let vm_assert = "Assertion `false && \"GPU memory access fault.\"' failed.";
    for (kind, reason) in [
        ("vm", "Reason: Page not present or supervisor privilege."),
        ("vm-read-only", "Reason: Write access to a read-only page."),
        ("vm-imprecise", "Reason: Unknown."),
        (
            "aperture",
            "Device::callbackQueue aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: \
             The agent attempted to access memory beyond the largest legal address. code: 0x29",
        ),
        (
            "illegal",
            "Device::callbackQueue aborting with error : HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: \
             The agent attempted to execute an illegal shader instruction. code: 0x2a",
        ),
    ] {
        let fault = format!("fault:{kind}");
        let steps = ["init", &load, "launch", "sync", &fault, "launch", "sync"];
        let out = fault_run(&lib, dir.path(), kind, None, &steps);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let ctx = format!("{kind}: {:?}\n{stdout}\n{stderr}", out.status);
        // The clean launch completed; the faulting one was submitted, never completed.
        let ptr = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{load} rc=0 ptr=")))
            .unwrap_or_else(|| panic!("{ctx}"))
            .to_string();
        assert!(
            stdout.ends_with(&format!(
                "launch rc=0\nsync rc=0\n{fault} rc=0\nlaunch rc=0\n"
            )),
            "{ctx}"
        );
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{ctx}");
        assert!(stderr.contains(reason), "{ctx}");
        let log = std::fs::read_to_string(dir.path().join(format!("{kind}.jsonl"))).unwrap();
        let injected = log
            .lines()
            .find(|l| l.contains(&format!("\"fault\":\"{kind}\"")))
            .unwrap_or_else(|| panic!("no injection logged\n{ctx}"));
        if kind.starts_with("vm") {
            // "Memory access fault by GPU node-1 (Agent handle: 0x...) on address A[ (may
            // not be exact address)]. Reason: ...", then the assert build's memory map.
            let address = if kind == "vm-imprecise" {
                "(nil)(may not be exact address)".to_string()
            } else {
                ptr.clone() // hipMalloc's 4 KiB buffer: page-aligned
            };
            let line = stderr
                .lines()
                .find(|l| l.starts_with("Memory access fault by GPU node-1 (Agent handle: 0x"))
                .unwrap_or_else(|| panic!("{ctx}"));
            assert!(
                line.ends_with(&format!("on address {address}. {reason}")),
                "{line}\n{ctx}"
            );
            assert!(stderr.contains("Nearby memory map:"), "{ctx}");
            assert!(stderr.contains(vm_assert), "{ctx}");
            let va = if kind == "vm-imprecise" { "0x0" } else { &ptr };
            assert!(injected.contains(&format!("\"va\":\"{va}\"")), "{injected}");
        } else {
            // The runtime suspends the queue (UPDATE_QUEUE to 0%, answered 0) before
            // calling HIP's callback; no VM fault message.
            assert!(!stderr.contains("Memory access fault"), "{ctx}");
            let after = &log[log.find(injected).unwrap()..];
            assert!(
                after
                    .lines()
                    .any(|l| l.contains("AMDKFD_IOC_UPDATE_QUEUE") && l.contains("\"ret\":0")),
                "{after}"
            );
        }
    }
}

/// On a gfx10.3 card (the rdna2 fixture, gfx1031) ROCr's trap handler signals nothing for
/// a queue error: the wave halts, the dispatch never completes, the runtime hears nothing
/// and the process waits in hipDeviceSynchronize (a hang, killed here after 10 s).
#[test]
fn a_queue_error_on_gfx10_3_is_a_hang() {
    let Some((lib, _)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object(dir.path(), "gfx1031") else {
        return;
    };
    let log = dir.path().join("r2.jsonl");
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.args(["--fixture", "rdna2", "--log"])
        .arg(&log)
        .arg("--")
        .arg(emu_probe(5))
        .arg("init")
        .arg(format!("load:{}", co.display()))
        .args(["launch", "sync", "fault:illegal", "launch", "sync"])
        .current_dir(dir.path())
        .env("EMUGPU_LIB", &lib)
        .env_remove("LD_PRELOAD")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .env_remove("EMUGPU_FAULT");
    let hung = output_within(&mut cmd, Duration::from_secs(10));
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(hung.is_err(), "{hung:?}\n{log}");
    let fault = log
        .lines()
        .find(|l| l.contains("\"fault\":\"illegal\""))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(fault.contains("\"signalled\":false"), "{fault}");
}

/// `--fault` arms the first dispatch of the process: under hipInit that is one of the
/// runtime's own blit kernels, faulted at the address given.
#[test]
fn the_script_arms_a_fault_at_an_address_from_the_start() {
    use std::os::unix::process::ExitStatusExt;
    let Some((lib, _)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = fault_run(
        &lib,
        dir.path(),
        "start",
        Some("vm@0x1234"),
        &["init", "sync"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    assert!(
        stderr.contains("on address 0x1000. Reason: Page not present or supervisor privilege."),
        "{stderr}"
    );
    // A kind the emulator does not inject, or an address on a kind that carries none: the
    // script refuses before running anything.
    for bad in ["segv", "aperture@0x1000", "hang@0x1000", "vm@zero"] {
        let out = fault_run(&lib, dir.path(), "bad", Some(bad), &["init"]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(text(&out.stderr).contains("--fault"), "{bad}");
        assert!(out.stdout.is_empty(), "{bad}");
    }
}

/// Issue 30: a command that starts its program with LD_PRELOAD set rather than appended to
/// runs that program without the emulated GPU ("no device"); the script says so after the
/// command, in one line, and only then. A static program never loads it at all.
#[test]
fn the_script_says_when_the_command_never_used_the_emulator() {
    let Some((lib, _)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = |args: &[&std::ffi::OsStr]| {
        let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
        cmd.arg("--log")
            .arg(dir.path().join("l.jsonl"))
            .arg("--")
            .args(args)
            .env("EMUGPU_LIB", &lib)
            .env_remove("LD_PRELOAD")
            .env_remove("EMUGPU_FAULT");
        output_within(&mut cmd, Duration::from_secs(120)).unwrap()
    };
    let probe = emu_probe(5);
    let said = "opened the emulated GPU";
    // Appended to (the script's own way): the device is there, nothing is said.
    let out = script(&[probe.as_os_str(), "init".as_ref(), "count".as_ref()]);
    assert!(text(&out.stdout).contains("count rc=0 count=1"));
    assert!(!text(&out.stderr).contains(said), "{}", text(&out.stderr));
    // Replaced by `env LD_PRELOAD=`: no device, and the script names the process that had
    // the emulator and what happened.
    let out = script(&[
        "env".as_ref(),
        "LD_PRELOAD=".as_ref(),
        probe.as_os_str(),
        "init".as_ref(),
        "count".as_ref(),
    ]);
    let stderr = text(&out.stderr);
    assert!(text(&out.stdout).contains("count rc=100 count=0"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains(
            "emulated-gpu: no process of env opened the emulated GPU (loaded in: env); \
             a program started with LD_PRELOAD replaced, not appended to, runs without it\n"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.matches(said).count(), 1, "{stderr}");
    // A static program (ldconfig) never loads it.
    let out = script(&["/sbin/ldconfig".as_ref(), "--version".as_ref()]);
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("emulated-gpu: /sbin/ldconfig never loaded the emulated GPU"),
        "{}",
        text(&out.stderr)
    );
}

/// The steps of the hang tests: a clean launch, then `fault:hang` (emugpu_fault("hang", 0))
/// and a second launch whose dispatch never completes, waited for by hipDeviceSynchronize.
fn hang_steps(co: &str) -> Vec<String> {
    let load = format!("load:{co}");
    [
        "init",
        &load,
        "launch",
        "sync",
        "fault:hang",
        "launch",
        "sync",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The emulator's log from the hang on, checked: the second launch returned, its sync
/// began before the dispatch was taken, and it never returned success.
fn after_the_hang(log: &str) -> &str {
    let at = log
        .find("\"fault\":\"hang\",\"queue_id\"")
        .unwrap_or_else(|| panic!("no hang injected\n{log}"));
    let marks: Vec<&str> = log[..at]
        .lines()
        .filter_map(|l| l.split("\"mark\":\"").nth(1))
        .collect();
    assert!(
        marks.ends_with(&[
            "begin fault:hang\"}",
            "end fault:hang rc=0\"}",
            "begin launch\"}",
            "end launch rc=0\"}",
            "begin sync\"}"
        ]),
        "{marks:?}\n{log}"
    );
    let after = &log[at..];
    assert!(
        !after.contains("\"mark\":\"end sync rc=0"),
        "the sync succeeded\n{log}"
    );
    after
}

/// Issue 41: a dispatch that hangs (`fault:hang`) on the real 5.2.3 runtime. Without
/// EMUGPU_RESET_AFTER nothing ends it: the process waits in hipDeviceSynchronize and is
/// killed here after 10 s, the dispatch never completed and no reset came. With
/// EMUGPU_RESET_AFTER=2 the driver's reset comes 2 s later (the queues evicted, the
/// hardware exception events set), but 5.2.3 created no hardware exception event (ROCr
/// watches one from 6.0; Debian's 5.7.1 has it too): it hears nothing and still waits, the
/// same hang. The newer runtimes' answer: `a_gpu_reset_after_a_hang_ends_the_process_as_rocr_does`.
#[test]
fn a_hang_never_completes_and_5_2_3_hears_nothing_of_the_reset() {
    let Some((lib, _)) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object(dir.path(), "gfx1010") else {
        return;
    };
    let steps = hang_steps(co.to_str().unwrap());
    for (name, reset) in [("hang", None), ("hang-reset", Some("2"))] {
        let log = dir.path().join(format!("{name}.jsonl"));
        let mut cmd = emugpu_probe_command(&lib, dir.path(), &log, None, &[]);
        cmd.args(&steps).env_remove("EMUGPU_RESET_AFTER");
        if let Some(r) = reset {
            cmd.env("EMUGPU_RESET_AFTER", r);
        }
        let hung = output_within(&mut cmd, Duration::from_secs(10));
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(hung.is_err(), "{name}: {hung:?}\n{log}");
        let after = after_the_hang(&log);
        assert!(
            !after.contains("\"mark\":\"end sync"),
            "the sync returned\n{log}"
        );
        let injected = after.lines().next().unwrap();
        if reset.is_none() {
            assert!(!injected.contains("reset_after"), "{injected}");
            assert!(!after.contains("\"reset\""), "{after}");
        } else {
            assert!(injected.contains("\"reset_after\":\"2\""), "{injected}");
            let reset = after
                .lines()
                .find(|l| l.contains("\"reset\":\"gpu\""))
                .unwrap_or_else(|| panic!("no reset\n{after}"));
            assert!(
                reset.contains(
                    "\"reset_cause\":\"GPU_HANG\",\"memory_lost\":1,\"hw_exception_events\":0"
                ),
                "{reset}"
            );
        }
    }
}

/// Issue 41: the GPU reset after a hang on the newer runtimes (the compat roots: Debian's
/// 5.7.1, 6.4.3 and 7.2.4, under `ulimit -c 0`), EMUGPU_RESET_AFTER=2: KFD sets the hardware
/// exception event ROCr watches, and ROCr prints `HW Exception by GPU node-1 (Agent handle:
/// 0x...) reason :GPU Hang` and dies in its assert (`Assertion `false && "GPU HW
/// Exception"' failed.`): SIGABRT, 2 to 60 s after the launch. 7.2.4 under `ulimit -c 0`
/// is the exception: HIP's own system event handler takes the event (as it takes a VM
/// fault there), ROCr prints nothing, hipDeviceSynchronize answers hipErrorLaunchFailure
/// (719) and the process goes on to exit 1.
#[test]
fn a_gpu_reset_after_a_hang_ends_the_process_as_rocr_does() {
    use std::os::unix::process::ExitStatusExt;
    let Some(lib) = emugpu_lib() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object(dir.path(), "gfx1010") else {
        return;
    };
    for (root, major) in [("trixie", 5u8), ("sid", 6), ("exp", 7)] {
        let Some(root_path) = compat_root(root) else {
            continue;
        };
        let stage = RootDir::new(&root_path, "hang");
        let lib_in = stage.copy(&lib, "libemugpu.so");
        let fixture_in = stage.copy(&fixture("rdna1"), "fixture");
        let co_in = stage.copy(&co, "k.co");
        let probe = stage.copy(&emu_probe(major), "emu_probe");
        let log_in = stage.inside.join("hang.jsonl");
        let env = [
            ("LD_PRELOAD", lib_in.display().to_string()),
            ("EMUGPU_FIXTURE", fixture_in.display().to_string()),
            ("EMUGPU_LOG", log_in.display().to_string()),
            ("EMUGPU_RESET_AFTER", "2".to_string()),
        ];
        let mut args = vec![
            "-c".to_string(),
            "ulimit -c 0; exec \"$@\"".to_string(),
            "sh".to_string(),
            probe.display().to_string(),
        ];
        args.extend(hang_steps(co_in.to_str().unwrap()));
        let mut cmd = stage.command(&env, "/bin/sh", &args);
        let start = std::time::Instant::now();
        let out = output_within(&mut cmd, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{root}: {e}"));
        let took = start.elapsed();
        let log = std::fs::read_to_string(stage.host().join("hang.jsonl")).unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let ctx = format!(
            "{root}: {:?} after {took:?}\n{stdout}\n{stderr}",
            out.status
        );
        let after = after_the_hang(&log);
        let reset = after
            .lines()
            .find(|l| l.contains("\"reset\":\"gpu\""))
            .unwrap_or_else(|| panic!("no reset\n{ctx}\n{after}"));
        assert!(
            reset.contains("\"hw_exception_events\":1"),
            "{reset}\n{ctx}"
        );
        assert!(took >= Duration::from_secs(2), "{ctx}");
        assert!(
            stdout.ends_with("fault:hang rc=0\nlaunch rc=0\n")
                || (major == 7 && stdout.ends_with("launch rc=0\nsync rc=719\n")),
            "{ctx}"
        );
        if major == 7 {
            assert!(after.contains("\"mark\":\"end sync rc=719\""), "{after}");
            assert_eq!(out.status.code(), Some(1), "{ctx}");
            assert!(!stderr.contains("HW Exception"), "{ctx}");
            continue;
        }
        let line = stderr
            .lines()
            .find(|l| l.starts_with("HW Exception by GPU node-1 (Agent handle: 0x"))
            .unwrap_or_else(|| panic!("no HW exception message\n{ctx}"));
        assert!(line.ends_with(") reason :GPU Hang"), "{line}\n{ctx}");
        assert!(
            stderr.contains("HwExceptionHandler(hsa_signal_value_t, void*): Assertion `false && \"GPU HW Exception\"' failed."),
            "{ctx}"
        );
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{ctx}");
    }
}
