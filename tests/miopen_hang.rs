//! Issue 41, real MIOpen: a convolution whose kernel hangs on the emulated GPU (gfx1010) is
//! named by rmcp's stall block and by its block at the GPU's reset, as MIOpen's, with MIOpen's
//! own switches; and the first switch printed, set as printed, has MIOpen run another kernel.
//!
//! The program is tests/emulated-gpu/miopen_conv.c (real MIOpen through dlopen, no headers):
//! one fp32 forward convolution (N=1 C=1 8x8, K=1 3x3) in Immediate mode, the emulator's hang
//! armed just before it (emugpu_fault("hang"): the convolution's first dispatch never
//! completes; EMUGPU_RESET_AFTER=4 has the driver reset the GPU 4 s later; RMCP_HANG_AFTER=1).
//!
//! Why sid (MIOpen 6.4.3, as the issue asks), and in a private overlay of it: MIOpen builds
//! each kernel on first use, and Debian's 6.4.3 cannot as the root stands. Its HIP kernels are
//! compiled with `/usr/bin/clang++-21 ... -isystem /usr/include`, which breaks libstdc++'s
//! `#include_next <math.h>`, and its OpenCL ones (im2col) with a build-time path,
//! /build/reproducible-path/miopen-6.4.3+dfsg/build/clang-21. Each run therefore gets an
//! overlay of the root, in a mount namespace of its own (nothing in the root changes): a
//! clang++ that drops that `-isystem` and a link at that path (both read from the library).
//! The exp root (MIOpen 7.2.4) cannot run a kernel at all: the Winograd kernel it picks for
//! this problem was left out of Debian's build ("Failed to load kernel source"), and with
//! MIOPEN_DEBUG_CONV_WINOGRAD=0 the im2col of the next solver fails in hiprtc (no clang
//! there). On sid, for this problem, MIOpen picks GEMM (GemmFwdRest: MIOpen's im2col kernel,
//! then rocBLAS's GEMM); the hang lands on the im2col, `Im2d2Col_v2`.
//!
//! The runs: with rmcp, MIOpen's kernel cache empty (the kernel comes from the file MIOpen
//! just built); then without and with rmcp, the cache warm (the kernel comes from a code
//! object in memory loaded by libMIOpen), which must end alike; then, no hang, HIP's log
//! (AMD_LOG_LEVEL=3, one `ShaderName : NAME` per dispatch) without and with the switch.
//! Skipped (a failure where prerequisites are required) without the emulator, the sid root,
//! its MIOpen or its clang.

use rmcp_testkit::*;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Each run's bound: a cold run builds MIOpen's kernels (about 10 s here), the reset comes
/// 4 s after the hang.
const LIMIT: Duration = Duration::from_secs(120);

/// The clang++ MIOpen runs in the overlay: the real one, without `-isystem /usr/include`.
const CLANGXX: &str = r#"#!/bin/sh
# MIOpen's `-isystem /usr/include` breaks libstdc++'s #include_next <math.h>: dropped.
held=
for a do
    shift
    if [ -n "$held" ]; then
        held=
        [ "$a" = /usr/include ] && continue
        set -- "$@" -isystem
    elif [ "$a" = -isystem ]; then
        held=1
        continue
    fi
    set -- "$@" "$a"
done
exec REAL "$@"
"#;

/// The sid root staged: the emulator, the shim, the fixture and the program copied in.
struct Sid {
    root: PathBuf,
    stage: RootDir,
    emu: PathBuf,
    shim: PathBuf,
    fixture: PathBuf,
    program: PathBuf,
    /// MIOpen's compiled-in compilers: `/usr/bin/clang++-NN` and its build-time clang path.
    clangxx: String,
    build_clang: Option<String>,
}

/// The first NUL- or control-ended string in `bytes` that starts with `prefix`.
fn string_at(bytes: &[u8], prefix: &str) -> Option<String> {
    let at = bytes
        .windows(prefix.len())
        .position(|w| w == prefix.as_bytes())?;
    let end = bytes[at..]
        .iter()
        .position(|&b| !(0x20..0x7f).contains(&b))
        .map_or(bytes.len(), |e| at + e);
    Some(String::from_utf8_lossy(&bytes[at..end]).into_owned())
}

fn staged() -> Option<Sid> {
    let emu = emugpu_lib()?;
    let root = compat_root("sid")?;
    let lib = root.join("usr/lib/x86_64-linux-gnu/libMIOpen.so.1");
    let Ok(bytes) = std::fs::read(&lib) else {
        missing(&format!(
            "no MIOpen in the sid compat root ({} is missing: tests/compat/run installs \
             libmiopen1)",
            lib.display()
        ));
        return None;
    };
    let Some(clangxx) = string_at(&bytes, "/usr/bin/clang++-") else {
        missing("sid's MIOpen names no /usr/bin/clang++-NN to build its kernels with");
        return None;
    };
    if !root.join(clangxx.trim_start_matches('/')).exists() {
        missing(&format!(
            "no {clangxx} in the sid compat root: MIOpen builds its kernels with it"
        ));
        return None;
    }
    if !std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\toverlay\n")) {
        skip("no overlay file system here: the sid root's MIOpen runs in an overlay of it");
        return None;
    }
    let build_clang = string_at(&bytes, "/build/reproducible-path/miopen-");
    let stage = RootDir::new(&root, "miopenhang");
    let emu_in = stage.copy(&emu, "libemugpu.so");
    let shim_in = stage.copy(&rmcp_testkit::shim(), "librmcp_shim.so");
    let body = rmcp_testkit::shim().with_file_name("librmcp_shim_body.so");
    stage.copy(&body, "librmcp_shim_body.so");
    let fixture_in = stage.copy(&fixture("rdna1"), "fixture");
    let program = stage.copy(&miopen_conv(), "miopen_conv");
    // /usr/bin/clang++-NN is /usr/lib/llvm-NN/bin/clang++ (Debian's layout).
    let real = format!(
        "/usr/lib/llvm-{}/bin/clang++",
        clangxx.rsplit('-').next().unwrap_or_default()
    );
    let wrapper = stage.host().join("clang++");
    std::fs::write(&wrapper, CLANGXX.replace("REAL", &real)).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(Sid {
        root,
        stage,
        emu: emu_in,
        shim: shim_in,
        fixture: fixture_in,
        program,
        clangxx,
        build_clang,
    })
}

impl Sid {
    /// `miopen_conv ARGS` in a private overlay of the root (MIOpen's compilers fixed, the
    /// stage bound in so that what is written there stays), on the emulated GPU, rmcp
    /// preloaded when `shim`, with `env`; no core file.
    fn run(&self, shim: bool, env: &[(&str, &str)], args: &[&str]) -> Output {
        let preload = if shim {
            format!("{} {}", self.emu.display(), self.shim.display())
        } else {
            self.emu.display().to_string()
        };
        let over = tempfile::tempdir().unwrap();
        let dir = &self.stage.inside;
        let mut cmd = Command::new("/usr/bin/unshare");
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-ec",
            r#"root=$1; dir=$2; t=$3; clangxx=$4; clang=$5; build=$6; shift 6
mkdir "$t/up" "$t/work" "$t/m"; m=$t/m
/bin/mount -t overlay overlay -o "lowerdir=$root,upperdir=$t/up,workdir=$t/work" "$m"
rm -f "$m$clangxx"; cp "$root$dir/clang++" "$m$clangxx"
if [ -n "$build" ]; then mkdir -p "$m${build%/*}"; ln -s "$clang" "$m$build"; fi
/bin/mount --bind "$root$dir" "$m$dir"
/bin/mount -t proc proc "$m/proc"
exec /usr/sbin/chroot "$m" /bin/sh -c 'cd "$0" && exec /usr/bin/env -i "$@"' "$dir" "$@""#,
            "sh",
        ])
        .arg(&self.root)
        .arg(dir)
        .arg(over.path())
        .arg(&self.clangxx)
        .arg(self.clangxx.replace("clang++", "clang"))
        .arg(self.build_clang.as_deref().unwrap_or(""))
        .arg("PATH=/usr/bin:/bin")
        .arg(format!("HOME={}", dir.display()))
        .arg(format!("LD_PRELOAD={preload}"))
        .arg(format!("EMUGPU_FIXTURE={}", self.fixture.display()))
        .arg(format!("EMUGPU_LOG={}", dir.join("emugpu.jsonl").display()));
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.args(["/bin/sh", "-c", "ulimit -c 0; exec \"$@\"", "sh"])
            .arg(&self.program)
            .args(args);
        output_within(&mut cmd, LIMIT).unwrap_or_else(|e| panic!("miopen_conv {args:?}: {e}"))
    }
}

/// The hang's environment: the GPU reset 4 s after the hang, the stall block after 1 s.
const HANG_ENV: &[(&str, &str)] = &[("EMUGPU_RESET_AFTER", "4"), ("RMCP_HANG_AFTER", "1")];

/// rmcp's blocks in `stderr` that start with a line containing `first`: from there to the
/// first line not rmcp's.
fn blocks(stderr: &str, first: &str) -> Vec<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.contains(first) {
            let end = lines[i + 1..]
                .iter()
                .position(|l| !l.starts_with("rmcp[") || l.contains(first))
                .map_or(lines.len(), |p| i + 1 + p);
            out.push(lines[i..end].join("\n"));
        }
    }
    out
}

/// What a block says of the running queue: its line, the kernel named as MIOpen's and the
/// switches printed (`VAR=VALUE`, in order).
struct Named {
    queue: String,
    kernel: String,
    switches: Vec<String>,
}

fn named(block: &str) -> Option<Named> {
    let lines: Vec<&str> = block.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("MIOpen's kernel (by its library): "))?;
    let queue = lines[..at]
        .iter()
        .rev()
        .find(|l| l.contains("    queue "))?
        .to_string();
    let kernel = lines[at]
        .split("MIOpen's kernel (by its library): ")
        .nth(1)?
        .split(',')
        .next()?
        .to_string();
    let switches = lines[at + 1..]
        .iter()
        .skip_while(|l| !l.contains("MIOpen's own switches that avoid it"))
        .skip(1)
        .map_while(|l| {
            let s = l
                .split_once(" warn:")
                .or_else(|| l.split_once(" error:"))?
                .1;
            let s = s.strip_prefix("        ")?.trim_start();
            let (assignment, _) = s.split_once(": ")?;
            assignment.contains('=').then(|| assignment.to_string())
        })
        .collect();
    Some(Named {
        queue,
        kernel,
        switches,
    })
}

/// The kernels HIP dispatched (AMD_LOG_LEVEL=3's `ShaderName : NAME`), in order.
fn shader_names(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.split("ShaderName : ").nth(1))
        .map(|n| n.trim().to_string())
        .collect()
}

/// Checks one hang run with rmcp: one stall block, then the reset block before ROCr's
/// message, both naming the same MIOpen kernel as running on its queue, with switches; the
/// reset block's.
fn check_hang(out: &Output, ctx: &str) -> Named {
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    let ctx = format!("{ctx}\n--- stdout\n{o}\n--- stderr\n{e}");
    assert!(o.contains("armed hang rc=0"), "{ctx}");
    let stalls = blocks(&e, "warn: GPU wait: a synchronizing call has waited");
    assert_eq!(stalls.len(), 1, "one stall block\n{ctx}");
    let stall = named(&stalls[0]).unwrap_or_else(|| panic!("no MIOpen kernel in the stall\n{ctx}"));
    let resets = blocks(
        &e,
        "error: GPU reset on GPU node-1: the GPU hung and the driver reset it (ROCr: GPU Hang)",
    );
    assert_eq!(resets.len(), 1, "one reset block\n{ctx}");
    assert!(
        resets[0].contains("  running when the GPU was reset ("),
        "{ctx}"
    );
    let reset = named(&resets[0]).unwrap_or_else(|| panic!("no MIOpen kernel at the reset\n{ctx}"));
    for n in [&stall, &reset] {
        assert!(
            n.queue.contains(&format!(": {} from ", n.kernel)),
            "the running queue's kernel is the one named MIOpen's\n{ctx}"
        );
        assert!(
            n.switches.first().is_some_and(|s| s.starts_with("MIOPEN_")),
            "{ctx}"
        );
        assert!(
            n.switches
                .iter()
                .any(|s| s.starts_with("MIOPEN_FIND_MODE=")),
            "{ctx}"
        );
    }
    assert_eq!(stall.kernel, reset.kernel, "{ctx}");
    assert_eq!(stall.switches, reset.switches, "{ctx}");
    let lines: Vec<&str> = e.lines().collect();
    let stall_at = lines
        .iter()
        .position(|l| l.contains("GPU wait: a synchronizing"));
    let reset_at = lines
        .iter()
        .position(|l| l.contains("error: GPU reset on GPU"));
    let hw = lines
        .iter()
        .position(|l| l.starts_with("HW Exception by GPU node-1"));
    assert!(
        stall_at < reset_at && reset_at < hw,
        "stall, reset, then ROCr's message\n{ctx}"
    );
    reset
}

#[test]
fn a_hung_miopen_kernel_is_named_with_the_switch_that_changes_it() {
    let Some(sid) = staged() else { return };
    let hang = ["hang", "immediate"];

    // MIOpen's kernel cache empty: the kernel comes from the file MIOpen just built.
    let cold = sid.run(true, HANG_ENV, &hang);
    let first = check_hang(&cold, "cold cache");
    assert!(
        first.queue.contains(" from /tmp/miopen-"),
        "{}\n{}",
        first.queue,
        text(&cold.stderr)
    );

    // Warm: from a code object in memory that libMIOpen loaded; the run ends as without rmcp.
    let without = sid.run(false, HANG_ENV, &hang);
    let with = sid.run(true, HANG_ENV, &hang);
    let ctx = format!(
        "--- without\n{}\n--- with\n{}",
        text(&without.stderr),
        text(&with.stderr)
    );
    assert_same_ending(&without, &with, &ctx);
    let warm = check_hang(&with, "warm cache");
    assert!(
        warm.queue.contains(" loaded by ") && warm.queue.contains("libMIOpen.so"),
        "{}",
        warm.queue
    );
    assert_eq!(warm.kernel, first.kernel, "{ctx}");
    assert_eq!(warm.switches, first.switches, "{ctx}");

    // The first switch, set as printed, and no hang: MIOpen runs another kernel.
    let (var, value) = warm.switches[0].split_once('=').unwrap();
    let log = [("AMD_LOG_LEVEL", "3")];
    let plain = sid.run(false, &log, &["immediate"]);
    let switched = sid.run(false, &[log[0], (var, value)], &["immediate"]);
    let (before, after) = (
        shader_names(&text(&plain.stderr)),
        shader_names(&text(&switched.stderr)),
    );
    let ctx = format!(
        "{var}={value}: before {before:?}, after {after:?}\n--- after: stdout\n{}",
        text(&switched.stdout)
    );
    assert!(plain.status.success() && switched.status.success(), "{ctx}");
    assert!(before.contains(&warm.kernel), "{ctx}");
    assert!(!after.contains(&warm.kernel), "{ctx}");
    assert!(
        after
            .iter()
            .any(|k| rmcp_core::miopen::family_of(k).is_some()),
        "MIOpen ran a kernel of its own\n{ctx}"
    );
}
