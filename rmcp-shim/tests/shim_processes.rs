//! The shim in real process trees: exec'd children, multiprocessing with fork and spawn,
//! and secure execution (setuid).

use rmcp_testkit::*;

const NC: u32 = 0x8000_0000;

/// Report files (`s-<pid>.json`) in the run's directory.
fn reports(out: &Out) -> Vec<serde_json::Value> {
    std::fs::read_dir(out.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("s-"))
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

fn per_pid_stats(run: Run) -> Run {
    let template = run.dir().join("s-%p.json");
    run.env("RMCP_STATS_FILE", template)
}

const WORKERS: &str = r#"
import ctypes, multiprocessing as mp, os, subprocess, sys

def call(*steps):
    lib = ctypes.CDLL(sys.argv[1])
    args = [sys.argv[1].encode()] + [s.encode() for s in steps]
    sys.stdout.flush()
    return lib.probe_main(len(args), (ctypes.c_char_p * len(args))(*args))

def work(i):
    return call("hipHostMalloc:%d:0" % (1000 + i))

if __name__ == "__main__":
    call("hipHostMalloc:4096:0")
    method = sys.argv[2]
    if method == "exec":
        rc = subprocess.run([sys.argv[3], "hipHostMalloc:777:2"]).returncode
        print("child", rc)
    else:
        pool = mp.get_context(method).Pool(3)
        print("workers", pool.map(work, range(3)))
        pool.close()  # workers exit on their own (terminate() would kill them)
        pool.join()
"#;

#[test]
fn exec_children_inherit_the_shim() {
    let Some(python) = python3() else { return };
    let mut run = per_pid_stats(Run::new(6, &python));
    run.cmd
        .args(["-c", WORKERS])
        .arg(framework(6))
        .arg("exec")
        .arg(probe(6));
    let out = run.run();
    out.assert_success();
    assert!(out.stdout.contains("child 0"), "{}", out.stdout);
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), NC),
            ("hipHostMalloc".into(), NC | 2)
        ]
    );
    let r = reports(&out);
    assert_eq!(r.len(), 2, "parent and child each report");
    assert!(r.iter().all(|r| r["calls"]["hipHostMalloc"]["calls"] == 1));
}

#[test]
fn multiprocessing_fork_and_spawn_workers_are_rewritten() {
    let Some(python) = python3() else { return };
    for method in ["fork", "spawn"] {
        let mut run = per_pid_stats(Run::new(6, &python));
        // spawn re-imports the main module in each worker: it must be a file.
        let script = run.dir().join("workers.py");
        std::fs::write(&script, WORKERS).unwrap();
        run.cmd.arg(&script).arg(framework(6)).arg(method);
        run.cmd.stdin(std::process::Stdio::null());
        let out = run.run();
        out.assert_success();
        assert!(
            out.stdout.contains("workers [0, 0, 0]"),
            "{method}: {}",
            out.stdout
        );
        let mut sizes: Vec<u64> = out
            .record
            .iter()
            .filter(|r| r.func == "hipHostMalloc")
            .inspect(|r| assert_eq!(r.flags, NC, "{method}: {r:?}"))
            .map(|r| r.size)
            .collect();
        sizes.sort();
        assert_eq!(sizes, [1000, 1001, 1002, 4096], "{method}");
        // Each report counts its own process's calls once. Forked workers end with
        // os._exit, which runs no atexit handler: they write no report (README).
        let r = reports(&out);
        let total: u64 = r
            .iter()
            .map(|r| r["calls"]["hipHostMalloc"]["calls"].as_u64().unwrap())
            .sum();
        let reported = if method == "fork" { 1 } else { 4 };
        assert_eq!(total, reported, "{method}: {r:?}");
        let pids: std::collections::BTreeSet<u64> =
            r.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
        assert_eq!(pids.len(), r.len(), "{method}: one report per process");
    }
}

/// A setuid-root file installed for one test and removed afterwards.
struct Installed(std::path::PathBuf);
impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn secure_execution_ignores_path_variables() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        rmcp_testkit::missing("not root: making a setuid binary needs root");
        return;
    }
    let Some(_) = real_runtime() else { return };
    // In secure-execution mode glibc ignores LD_LIBRARY_PATH and preloads only setuid
    // libraries from the standard directories, named without a slash: install the shim
    // there under a unique name. The program is the probe linked to .so.5, which then
    // loads Debian's real runtime.
    let libdir = std::path::Path::new("/usr/lib/x86_64-linux-gnu");
    let stem = format!("librmcp_shim_setuid_test_{}", std::process::id());
    let name = format!("{stem}.so");
    let lib = Installed(libdir.join(&name));
    std::fs::copy(shim(), &lib.0).unwrap();
    // The body the front maps, beside it under the paired name.
    let body = Installed(libdir.join(format!("{stem}_body.so")));
    std::fs::copy(shim().with_file_name("librmcp_shim_body.so"), &body.0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("hip_probe5");
    // Copied by a child process: an executable this process had open for writing can be
    // inherited by another test's fork and make exec fail with ETXTBSY.
    let ok = std::process::Command::new("install")
        .args(["-m", "4755"])
        .arg(probe(5))
        .arg(&prog)
        .status()
        .unwrap();
    assert!(ok.success());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&lib.0, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(out_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let log = out_dir.path().join("log");
    let stats = out_dir.path().join("stats.json");

    let run = |secure: bool| {
        let mut cmd = std::process::Command::new("setpriv");
        if secure {
            // An unprivileged user running a setuid-root program.
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        }
        cmd.arg(&prog)
            .args(["hipHostMalloc:4096:0", "maps"])
            .env_clear()
            .env("LD_PRELOAD", &name)
            .env("RMCP_MODE", "force")
            .env("RMCP_LOG", "info")
            .env("RMCP_LOG_FILE", &log)
            .env("RMCP_STATS_FILE", &stats)
            .env("RMCP_HIP_LIBRARY", "/nonexistent/evil/libamdhip64.so.6")
            .env("RMCP_SYSFS_ROOT", fixture("rdna1"))
            .output()
            .unwrap()
    };
    let out = run(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("hipHostMalloc size=4096 flags=0x0 rc=101"),
        "{stdout}"
    );
    for var in [
        "RMCP_LOG_FILE",
        "RMCP_STATS_FILE",
        "RMCP_HIP_LIBRARY",
        "RMCP_SYSFS_ROOT",
    ] {
        assert!(
            stderr.contains(&format!(
                "{var} is ignored: the process runs in secure-execution mode"
            )),
            "{var}: {stderr}"
        );
    }
    assert!(stderr.contains("mode force"), "the shim ran: {stderr}");
    assert!(!log.exists(), "RMCP_LOG_FILE was opened");
    assert!(!stats.exists(), "RMCP_STATS_FILE was written");

    // The same run without secure execution honours them: the check above can fail.
    let out = run(false);
    assert!(out.status.success());
    assert!(log.exists() && stats.exists());
}
