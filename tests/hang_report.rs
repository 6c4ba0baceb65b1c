//! Issue 41, which kernel: the dispatch each queue is running, named at a VM fault, at the
//! GPU's reset after a hang and while a synchronizing call waits past RMCP_HANG_AFTER, shown
//! on the emulated GPU (scripts/emulated-gpu) with Debian's real runtimes: 5.2.3 on the host,
//! 5.7.1, 6.4.3 and 7.2.4 in the compat roots. The program (emu_probe) loads a module with
//! two kernels, `k` and `other`, and puts work on two streams, so that the dispatch the GPU
//! is on and the newest launch differ; the emulator's fault lands on `k`'s dispatch.
//! Each run is compared with the same run without rmcp: the same ending (status, stdout, the
//! runtime's part of stderr). Skipped without the runtime, the emulator or hipcc (and, for the
//! newer runtimes, without the compat roots).

use rmcp_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The module: `k` writes its argument's first word, `other` its second.
const TWO_KERNELS: &str = "extern \"C\" __global__ void k(int *p) { p[0] = 1; }\n\
                           extern \"C\" __global__ void other(int *p) { p[1] = 2; }\n";

fn prerequisites(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    real_runtime()?;
    let lib = emugpu_lib()?;
    let co = kernel_object_of(dir, "gfx1010", TWO_KERNELS)?;
    Some((lib, co))
}

/// emu_probe5 STEPS on the emulated GPU (host 5.2.3), rmcp preloaded when `shim`, with `env`
/// and none of the caller's settings of rmcp or the emulator.
fn probe(
    lib: &Path,
    dir: &Path,
    shim: bool,
    env: &[(&str, &str)],
    steps: &[&str],
) -> std::process::Command {
    let mut cmd = emugpu_probe_command(lib, dir, &dir.join("log.jsonl"), None, steps);
    cmd.env_remove("RMCP_LOG")
        .env_remove("RMCP_MODE")
        .env_remove("RMCP_HANG_AFTER")
        .env_remove("EMUGPU_FAULT_DELAY")
        .env_remove("EMUGPU_RESET_AFTER");
    if shim {
        cmd.env("LD_PRELOAD", rmcp_testkit::shim());
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// [`probe`], run to its end within `limit` (Err: it was killed).
fn run(
    lib: &Path,
    dir: &Path,
    shim: bool,
    env: &[(&str, &str)],
    steps: &[&str],
    limit: Duration,
) -> Result<Output, String> {
    output_within(&mut probe(lib, dir, shim, env, steps), limit)
}

/// The block's line for the queue whose packet is `kernel`'s dispatch.
fn queue_line<'a>(block: &'a str, kernel: &str) -> Option<&'a str> {
    block
        .lines()
        .find(|l| l.contains("    queue ") && l.contains(&format!(": {kernel} from ")))
}

/// A VM fault in the middle of a run: `k`'s dispatch on stream 1 takes the fault late in its
/// run (EMUGPU_FAULT_DELAY=1), after `other` was launched twice on stream 2. The block names
/// `k`, from the queue it was on, as running when it faulted; the recent launches, newest
/// first, start with `other`, and are said to be context. The runtime's report and the
/// abort follow as without rmcp.
///
/// (The program sleeps instead of synchronizing: Debian's 5.2.3 does not hear this fault
/// while its main thread waits in hipDeviceSynchronize after launches on a second stream,
/// with or without rmcp; a 5.2.3 matter, not this test's.)
#[test]
fn a_vm_fault_names_the_faulting_dispatch_not_the_newest_launch() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let Some((lib, co)) = prerequisites(dir.path()) else {
        return;
    };
    let load = format!("load:{}", co.display());
    let steps = [
        "init",
        &load,
        "launch",
        "sync",
        "stream:1",
        "fault:vm",
        "launch",
        "stream:2",
        "kernel:other",
        "launch",
        "launch",
        "sleep:5",
    ];
    let env = [("EMUGPU_FAULT_DELAY", "1")];
    let limit = Duration::from_secs(60);
    let without = run(&lib, dir.path(), false, &env, &steps, limit).unwrap();
    let with = run(&lib, dir.path(), true, &env, &steps, limit).unwrap();
    let (e0, e1) = (text(&without.stderr), text(&with.stderr));
    let ctx = format!("--- without\n{e0}\n--- with\n{e1}");
    assert_eq!(without.status.signal(), Some(libc::SIGABRT), "{ctx}");
    assert_same_ending_seen(&without, &with, &ctx, without_memory_map);
    let lines: Vec<&str> = e1.lines().collect();
    let (start, runtime_first) = fault_block_span(&lines, "GPU memory fault on GPU node-1")
        .unwrap_or_else(|| panic!("{ctx}"));
    assert!(start < runtime_first, "{ctx}");
    let block = lines[start..runtime_first].join("\n");
    assert!(
        block.contains("  running when it faulted (each busy queue's packet at its read index"),
        "{ctx}"
    );
    let q = queue_line(&block, "k").unwrap_or_else(|| panic!("k not named as running\n{ctx}"));
    assert!(q.contains("packet 0 of 1"), "{q}");
    assert!(
        q.contains("from a code object in memory") || q.contains(&co.display().to_string()),
        "{q}"
    );
    assert!(
        queue_line(&block, "other").is_none(),
        "other finished: not running\n{ctx}"
    );
    // The newest launch is `other`: the launches are context.
    let recent = block
        .find("  recent launches, as context (newest first; what the GPU was running is above;")
        .unwrap_or_else(|| panic!("{ctx}"));
    let first_launch = block[recent..].lines().nth(1).unwrap_or_default();
    assert!(
        first_launch.contains("error:     other in "),
        "{first_launch}\n{ctx}"
    );
}

/// emu_probe's steps for a hang: `k` hangs (the emulator's `hang`, its dispatch never
/// completes) on stream 1, with `other` launched twice on stream 2 after it, then the program
/// synchronizes the device. `threads`: the program lists its threads after the first sync
/// (else it synchronizes again there).
fn hang_steps(load: &str, threads: bool) -> Vec<String> {
    [
        "init",
        load,
        "launch",
        "sync",
        // (The watchdog names its thread as it starts: a moment after the first sync.)
        if threads { "sleep:1" } else { "sync" },
        if threads { "threads" } else { "sync" },
        "stream:1",
        "fault:hang",
        "launch",
        "stream:2",
        "kernel:other",
        "launch",
        "launch",
        "sync",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The stall block's lines: from its first line to the first line not rmcp's.
fn stall_blocks(stderr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for l in stderr.lines() {
        if l.contains("warn: GPU wait: a synchronizing call has waited") {
            out.extend(cur.take());
            cur = Some(l.to_string());
        } else if let Some(c) = cur.as_mut() {
            if l.starts_with("rmcp[") && l.contains("warn:   ") {
                c.push('\n');
                c.push_str(l);
            } else {
                out.extend(cur.take());
            }
        }
    }
    out.extend(cur);
    out
}

/// A hang on 5.2.3, which hears nothing of a reset (no hardware exception event in that
/// ROCr): with RMCP_HANG_AFTER=1, the stall block names the thread waiting in
/// hipDeviceSynchronize and `k`'s dispatch on its queue, once, however long the wait; the
/// first synchronize (which returned in time) said nothing, and the watchdog's thread was
/// not there before it. Nothing is stopped: the program is still waiting when the test ends
/// it, as without rmcp.
#[test]
fn a_hang_is_named_once_by_the_stall_block() {
    let dir = tempfile::tempdir().unwrap();
    let Some((lib, co)) = prerequisites(dir.path()) else {
        return;
    };
    let load = format!("load:{}", co.display());
    let steps = hang_steps(&load, true);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    // Run with the output to files, ended by the test (output_within keeps nothing of a
    // program it kills).
    let err = dir.path().join("stderr");
    let out = dir.path().join("stdout");
    let mut cmd = probe(&lib, dir.path(), true, &[("RMCP_HANG_AFTER", "1")], &steps);
    cmd.stderr(std::fs::File::create(&err).unwrap())
        .stdout(std::fs::File::create(&out).unwrap());
    // In a process group of its own: the script's child, the program, is ended with it.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_secs(6));
    let still = child.try_wait().unwrap().is_none();
    // SAFETY: a signal to the process group the child leads (its pid, process_group(0)).
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
    let (e, o) = (
        std::fs::read_to_string(&err).unwrap(),
        std::fs::read_to_string(&out).unwrap(),
    );
    let ctx = format!("--- stdout\n{o}\n--- stderr\n{e}");
    assert!(still, "the program ended on its own\n{ctx}");
    // The watchdog started with the first synchronize, and not before.
    let threads = o
        .lines()
        .find(|l| l.starts_with("threads rc=0"))
        .unwrap_or_default();
    assert!(threads.contains("rmcp-watchdog"), "{ctx}");
    assert!(
        o.ends_with("launch rc=0\nlaunch rc=0\n"),
        "still in the last sync\n{ctx}"
    );
    let blocks = stall_blocks(&e);
    assert_eq!(blocks.len(), 1, "one block per stall\n{ctx}");
    let b = &blocks[0];
    assert!(
        b.contains("past RMCP_HANG_AFTER=1); the GPU is still running or is hung"),
        "{b}"
    );
    assert!(
        b.contains(" waits in hipDeviceSynchronize (seen for "),
        "{b}"
    );
    let q = queue_line(b, "k").unwrap_or_else(|| panic!("k not named\n{ctx}"));
    assert!(q.contains("; seen there for "), "{q}");
    assert!(queue_line(b, "other").is_none(), "{ctx}");
    assert!(!e.contains("GPU wait ended"), "{ctx}");
}

/// A process that never synchronizes starts no watchdog thread, and one whose waits all
/// return in time says nothing.
#[test]
fn no_synchronize_no_thread_and_short_waits_say_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some((lib, co)) = prerequisites(dir.path()) else {
        return;
    };
    let load = format!("load:{}", co.display());
    let limit = Duration::from_secs(60);
    let env = [("RMCP_HANG_AFTER", "1")];
    let out = run(
        &lib,
        dir.path(),
        true,
        &env,
        &["init", &load, "launch", "threads"],
        limit,
    )
    .unwrap();
    let o = text(&out.stdout);
    assert!(o.contains("threads rc=0 names="), "{o}");
    assert!(!o.contains("rmcp-watchdog"), "{o}");
    let steps = [
        "init", &load, "launch", "sync", "launch", "sync", "sleep:2", "threads",
    ];
    let out = run(&lib, dir.path(), true, &env, &steps, limit).unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{o}\n{e}");
    assert!(o.contains("rmcp-watchdog"), "{o}");
    assert!(!e.contains("GPU wait"), "{e}");
    // RMCP_HANG_AFTER=off: no thread.
    let out = run(
        &lib,
        dir.path(),
        true,
        &[("RMCP_HANG_AFTER", "off")],
        &steps,
        limit,
    )
    .unwrap();
    assert!(
        !text(&out.stdout).contains("rmcp-watchdog"),
        "{}",
        text(&out.stdout)
    );
}

/// The GPU's reset after the hang, on the runtimes that hear it (5.7.1, 6.4.3, 7.2.4 in the
/// compat roots; EMUGPU_RESET_AFTER=4, RMCP_HANG_AFTER=1): the stall block names `k` once
/// before the reset; at the reset, rmcp's block ("GPU reset on GPU node-1") names `k`'s
/// dispatch as running when the GPU was reset, before ROCr's "HW Exception ... reason :GPU
/// Hang"; the process ends as the same run without rmcp does (SIGABRT; 7.2.4: HIP takes the
/// event, hipDeviceSynchronize answers 719 and the program exits 1, ROCr printing nothing).
#[test]
fn at_the_reset_the_block_names_the_hung_dispatch_and_the_runtime_ends_as_without() {
    let Some(lib) = emugpu_lib() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object_of(dir.path(), "gfx1010", TWO_KERNELS) else {
        return;
    };
    for (root, major) in [("trixie", 5u8), ("sid", 6), ("exp", 7)] {
        let Some(root_path) = compat_root(root) else {
            continue;
        };
        let stage = RootDir::new(&root_path, "hangreport");
        let lib_in = stage.copy(&lib, "libemugpu.so");
        let shim_in = stage.copy(&rmcp_testkit::shim(), "librmcp_shim.so");
        let body = rmcp_testkit::shim().with_file_name("librmcp_shim_body.so");
        stage.copy(&body, "librmcp_shim_body.so");
        let fixture_in = stage.copy(&fixture("rdna1"), "fixture");
        let co_in = stage.copy(&co, "k.co");
        let probe = stage.copy(&emu_probe(major), "emu_probe");
        let mut ends = Vec::new();
        for shim in [false, true] {
            let preload = if shim {
                format!("{} {}", lib_in.display(), shim_in.display())
            } else {
                lib_in.display().to_string()
            };
            let env = [
                ("LD_PRELOAD", preload),
                ("EMUGPU_FIXTURE", fixture_in.display().to_string()),
                (
                    "EMUGPU_LOG",
                    stage.inside.join("hang.jsonl").display().to_string(),
                ),
                ("EMUGPU_RESET_AFTER", "4".to_string()),
                ("RMCP_HANG_AFTER", "1".to_string()),
            ];
            let mut args = vec![
                "-c".to_string(),
                "ulimit -c 0; exec \"$@\"".to_string(),
                "sh".to_string(),
                probe.display().to_string(),
            ];
            args.extend(hang_steps(&format!("load:{}", co_in.display()), false));
            let mut cmd = stage.command(&env, "/bin/sh", &args);
            let out = output_within(&mut cmd, Duration::from_secs(90))
                .unwrap_or_else(|e| panic!("{root}: {e}"));
            ends.push(out);
        }
        let (without, with) = (&ends[0], &ends[1]);
        let e1 = text(&with.stderr);
        let ctx = format!(
            "{root}\n--- without\n{}\n--- with\n{e1}",
            text(&without.stderr)
        );
        assert_same_ending(without, with, &ctx);
        let blocks = stall_blocks(&e1);
        assert_eq!(blocks.len(), 1, "one stall block before the reset\n{ctx}");
        assert!(queue_line(&blocks[0], "k").is_some(), "{ctx}");
        let lines: Vec<&str> = e1.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.contains("error: GPU reset on GPU node-1: the GPU hung and the driver reset it (ROCr: GPU Hang)"))
            .unwrap_or_else(|| panic!("no reset block\n{ctx}"));
        let stall_at = lines
            .iter()
            .position(|l| l.contains("GPU wait: a synchronizing call"))
            .unwrap();
        assert!(
            stall_at < start,
            "the stall block comes before the reset\n{ctx}"
        );
        let end = lines[start + 1..]
            .iter()
            .position(|l| !l.starts_with("rmcp["))
            .map_or(lines.len(), |p| start + 1 + p);
        let block = lines[start..end].join("\n");
        assert!(
            block.contains("  running when the GPU was reset ("),
            "{ctx}"
        );
        assert!(
            queue_line(&block, "k").is_some(),
            "k named at the reset\n{ctx}"
        );
        if major < 7 {
            let hw = lines
                .iter()
                .position(|l| l.starts_with("HW Exception by GPU node-1"))
                .unwrap_or_else(|| panic!("{ctx}"));
            assert!(end <= hw, "rmcp's block before ROCr's message\n{ctx}");
        }
    }
}
