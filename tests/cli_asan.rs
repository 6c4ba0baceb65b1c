//! AddressSanitizer-built programs under `rmcp run` and the container entrypoint.
//!
//! tests/c/asan_app.c is built by rmcp-testkit with `-fsanitize=address` when the compiler
//! can (otherwise these tests skip, and fail where prerequisites are required). It is
//! linked to the fake runtime .so.6 and lists its initial library list. Two shapes:
//!
//! - linked: the program needs ASan's shared runtime (DT_NEEDED) and nothing is
//!   preloaded, so LD_PRELOAD holds the shim alone and the shim comes before ASan;
//! - preloaded: the user preloads that runtime too (`LD_PRELOAD=$(gcc
//!   -print-file-name=libasan.so) rmcp run -- ./app`), and it must stay first.
//!
//! In each, the program runs as it does without rmcp (exit status, output, a
//! heap-buffer-overflow reported when asked), and the shim is in force: the fake runtime
//! receives the rewritten flags.

use std::path::{Path, PathBuf};

use rmcp_testkit::{Out, Run, asan_app, shim};

const RMCP: &str = env!("CARGO_BIN_EXE_rmcp");
const NON_COHERENT: u32 = 0x8000_0000;
const REFUSAL: &str = "does not come first in initial library list";
const OVERFLOW: &str = "ERROR: AddressSanitizer: heap-buffer-overflow";

/// How asan_app is started.
#[derive(Clone, Copy, Debug)]
enum Launch {
    /// Directly, without rmcp.
    Direct,
    /// `rmcp run -- asan_app`.
    RmcpRun,
    /// `SHELL entrypoint.sh asan_app`, through `rmcp run` (RMCP_BIN naming it) or preloading
    /// the shim in sh (RMCP_BIN empty).
    Entrypoint { shell: &'static str, rmcp: bool },
}

fn entrypoint() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/container/entrypoint.sh")
}

/// Runs asan_app with the fake .so.6 runtime on the rdna1 fixture, a clean environment,
/// LD_PRELOAD=`preload` when given.
fn launch(app: &Path, how: Launch, preload: Option<&Path>, args: &[&str]) -> Out {
    let run = match how {
        Launch::Direct => Run::new(6, app),
        Launch::RmcpRun => Run::new(6, Path::new(RMCP))
            .env("RMCP_SHIM", shim())
            .args(["run", "--"])
            .args([app]),
        Launch::Entrypoint { shell, rmcp } => Run::new(6, Path::new(shell))
            .env("RMCP_SHIM", shim())
            .env("RMCP_BIN", if rmcp { RMCP } else { "" })
            .args([entrypoint().as_path(), app]),
    };
    let run = run.no_shim().args(args);
    match preload {
        Some(p) => run.env("LD_PRELOAD", p),
        None => run,
    }
    .run()
}

/// The objects asan_app listed (its initial library list after the program).
fn objects(out: &Out) -> Vec<&str> {
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("object "))
        .collect()
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn is_asan_runtime(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libasan.so") || name.starts_with("libclang_rt.asan")
}

/// What asan_app printed besides its object list.
fn results(out: &Out) -> Vec<&str> {
    out.stdout
        .lines()
        .filter(|l| !l.starts_with("object "))
        .collect()
}

/// The hipHostMalloc flags the fake runtime received.
fn host_malloc_flags(out: &Out) -> Vec<u32> {
    out.allocs()
        .into_iter()
        .filter(|(f, _)| f == "hipHostMalloc")
        .map(|(_, flags)| flags)
        .collect()
}

/// The ASan runtime the program loads when run on its own (`gcc -print-file-name=libasan.so`
/// names the same file), for the preloaded shape.
fn asan_runtime(app: &Path) -> PathBuf {
    let out = launch(app, Launch::Direct, None, &[]);
    let found = objects(&out).into_iter().find(|o| is_asan_runtime(o));
    PathBuf::from(found.unwrap_or_else(|| panic!("asan_app loads no ASan runtime: {out:?}")))
}

/// Checks one shape under one launcher: as without rmcp, the shim in force, the library
/// order ASan needs, and an overflow still reported.
fn check(app: &Path, how: Launch, preload: Option<&Path>) {
    let what = format!("{how:?}, LD_PRELOAD={preload:?}");

    let base = launch(app, Launch::Direct, preload, &[]);
    assert_eq!(base.status.code(), Some(3), "without rmcp: {base:?}");
    assert_eq!(host_malloc_flags(&base), [0], "without rmcp: {base:?}");

    let out = launch(app, how, preload, &[]);
    assert!(
        !out.stderr.contains(REFUSAL),
        "{what}: ASan refused: {out:?}"
    );
    assert_eq!(out.status.code(), base.status.code(), "{what}: {out:?}");
    assert_eq!(results(&out), results(&base), "{what}: {out:?}");
    assert_eq!(
        host_malloc_flags(&out),
        [NON_COHERENT],
        "{what}: the shim did not rewrite: {out:?}"
    );
    // The shim right after the sanitizer runtime the user preloaded, else first.
    let objs = objects(&out);
    let shim_at = usize::from(preload.is_some());
    assert_eq!(
        file_name(objs[shim_at]),
        "librmcp_shim.so",
        "{what}: {objs:?}"
    );
    if preload.is_some() {
        assert!(is_asan_runtime(objs[0]), "{what}: {objs:?}");
    }

    let base = launch(app, Launch::Direct, preload, &["overflow"]);
    assert!(base.stderr.contains(OVERFLOW), "without rmcp: {base:?}");
    let out = launch(app, how, preload, &["overflow"]);
    assert!(out.stderr.contains(OVERFLOW), "{what}: no report: {out:?}");
    assert_eq!(out.status.code(), base.status.code(), "{what}: {out:?}");
    assert_ne!(out.status.code(), Some(3), "{what}: {out:?}");
}

#[test]
fn asan_linked_program_runs_under_rmcp_run() {
    let Some(app) = asan_app() else { return };
    check(&app, Launch::RmcpRun, None);
}

#[test]
fn asan_runtime_preloaded_by_the_user_stays_first_under_rmcp_run() {
    let Some(app) = asan_app() else { return };
    let runtime = asan_runtime(&app);
    check(&app, Launch::RmcpRun, Some(&runtime));
}

#[test]
fn caller_is_the_program_behind_a_preloaded_asan_runtime() {
    // libasan, ahead of the shim, defines no HIP function: the shim's caller is still the
    // program, so RMCP_EXEMPT naming it leaves its call alone.
    let Some(app) = asan_app() else { return };
    let runtime = asan_runtime(&app);
    let out = Run::new(6, Path::new(RMCP))
        .no_shim()
        .env("RMCP_SHIM", shim())
        .env("LD_PRELOAD", &runtime)
        .env("RMCP_EXEMPT", "asan_app")
        .args(["run", "--"])
        .args([&app])
        .run();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(host_malloc_flags(&out), [0], "{out:?}");
    assert!(is_asan_runtime(objects(&out)[0]), "{out:?}");
}

/// The POSIX shells available here (at least `sh`).
fn shells() -> Vec<&'static str> {
    let mut out = vec!["sh"];
    for s in ["dash", "bash"] {
        if std::process::Command::new(s)
            .args(["-c", "exit 0"])
            .status()
            .is_ok_and(|st| st.success())
        {
            out.push(s);
        }
    }
    out
}

#[test]
fn entrypoint_runs_asan_programs() {
    let Some(app) = asan_app() else { return };
    let runtime = asan_runtime(&app);
    for shell in shells() {
        for rmcp in [false, true] {
            let how = Launch::Entrypoint { shell, rmcp };
            check(&app, how, None);
            check(&app, how, Some(&runtime));
        }
    }
}
