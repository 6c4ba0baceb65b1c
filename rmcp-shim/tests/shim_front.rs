//! The two objects (issue 17): the preloaded librmcp_shim.so (front/front.rs) finds its body
//! beside itself and maps it on the first hooked call; without it, every call still goes
//! where it would have gone without the shim. The zero-cost side (no body mapped in a
//! process that never calls HIP) is in shim_safety.rs and shim_transparency.rs.

use std::path::{Path, PathBuf};

use rmcp_testkit::*;

const NC: u32 = 0x8000_0000;

/// The front and the body as cargo built them.
fn front_and_body() -> (PathBuf, PathBuf) {
    let front = shim();
    let body = front.with_file_name("librmcp_shim_body.so");
    assert!(body.is_file(), "{} missing", body.display());
    (front, body)
}

/// A directory holding a copy of the front (under `name`), and of the body if `body`.
fn install(name: &str, body: Option<&str>) -> tempfile::TempDir {
    let (f, b) = front_and_body();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&f, dir.path().join(name)).unwrap();
    if let Some(body_name) = body {
        std::fs::copy(&b, dir.path().join(body_name)).unwrap();
    }
    dir
}

#[test]
fn the_body_is_found_beside_the_front_under_the_paired_name() {
    // A copy renamed libX.so pairs with libX_body.so, through a symlink too.
    let dir = install("libX.so", Some("libX_body.so"));
    let link_dir = tempfile::tempdir().unwrap();
    let link = link_dir.path().join("librmcp_shim.so");
    std::os::unix::fs::symlink(dir.path().join("libX.so"), &link).unwrap();
    for preload in [dir.path().join("libX.so"), link] {
        let out = Run::probe(6)
            .mode("force")
            .env("LD_PRELOAD", &preload)
            .args(["hipHostMalloc:4096:0"])
            .run();
        out.assert_success();
        assert_eq!(
            out.allocs(),
            [("hipHostMalloc".into(), NC)],
            "{}",
            preload.display()
        );
        assert_eq!(out.record[0].caller, "libX_body.so");
    }
}

/// Forwarded unchanged, from where the caller would have reached without the shim, with one
/// line on stderr unless RMCP_LOG=off.
fn assert_forwarded_without_body(run: impl Fn() -> Run, caller: &str) {
    let dir = install("librmcp_shim.so", None);
    let front = dir.path().join("librmcp_shim.so");
    let out = run()
        .mode("force")
        .env("LD_PRELOAD", &front)
        .args(["hipHostMalloc:4096:0", "hipExtMallocWithFlags:64:1"])
        .run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [
            ("hipHostMalloc".into(), 0),
            ("hipExtMallocWithFlags".into(), 1)
        ],
        "{}",
        out.stderr
    );
    assert!(
        out.record.iter().all(|r| r.caller == caller),
        "{:?}",
        out.record
    );
    let missing = dir.path().join("librmcp_shim_body.so");
    assert_eq!(
        out.stderr_lines("rmcp: cannot load the body").len(),
        1,
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&missing.display().to_string()),
        "{}",
        out.stderr
    );
    assert!(out.stats.is_none(), "no body, no report");

    let out = run()
        .mode("force")
        .env("LD_PRELOAD", &front)
        .env("RMCP_LOG", "off")
        .args(["hipHostMalloc:4096:0"])
        .run();
    out.assert_success();
    assert_eq!(out.allocs(), [("hipHostMalloc".into(), 0)]);
    assert_eq!(out.stderr, "");
}

#[test]
fn without_its_body_the_front_forwards_every_call_unchanged() {
    // Linked directly: the next definition after the front.
    assert_forwarded_without_body(|| Run::probe(6), "hip_probe6");
    // Loaded RTLD_LOCAL by dlopen (the Python-extension shape): RTLD_NEXT finds nothing,
    // the caller's own dependency tree does.
    assert_forwarded_without_body(|| Run::framework(6), "libframework6.so");
}

#[test]
fn a_relative_preload_path_still_finds_the_body_after_a_chdir() {
    let Some(python) = python3() else { return };
    let dir = install("librmcp_shim.so", Some("librmcp_shim_body.so"));
    // The process starts in the shim's directory with LD_PRELOAD=./librmcp_shim.so, moves
    // to / and only then makes its first hooked call.
    let script = r#"
import ctypes, os, sys
os.chdir("/")
lib = ctypes.CDLL(sys.argv[1])
args = [sys.argv[1].encode(), b"hipHostMalloc:4096:0"]
sys.exit(lib.probe_main(len(args), (ctypes.c_char_p * len(args))(*args)))
"#;
    let mut run = Run::new(5, &python)
        .mode("force")
        .env("LD_PRELOAD", "./librmcp_shim.so");
    run.cmd.current_dir(dir.path());
    run.cmd.args(["-c", script]).arg(framework(5));
    let out = run.run();
    out.assert_success();
    assert_eq!(
        out.allocs(),
        [("hipHostMalloc".into(), NC)],
        "{}",
        out.stderr
    );
}

#[test]
fn the_body_exports_only_the_attach() {
    let (front, body) = front_and_body();
    let got = exported_functions(&body);
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        ["rmcp_shim_attach"],
        "{}",
        body.display()
    );
    // And the front links nothing but libc: no libgcc_s, no libdl, no Rust runtime.
    let needed = needed(&front);
    assert_eq!(needed, ["libc.so.6"], "{}", front.display());
}

/// The front is `no_std` with `panic = "abort"` (issue 21): it needs nothing of libc but
/// the functions front/sys.rs declares (the compiler's own memset, memmove, bcmp and strlen
/// are the front's, so the loader binds nothing for them at start), no unwinder and no Rust runtime, and no code in it
/// can reach the panic handler: build.rs links it without `core`, so any panic path would
/// have failed the build; this checks the object that came out.
#[test]
fn the_front_carries_no_panic_or_unwind_machinery() {
    let (front, _) = front_and_body();
    let allowed = [
        "getenv",
        "realpath",
        "__register_atfork",
        "dl_iterate_phdr",
        "__cxa_atexit",
        "dladdr",
        "dladdr1",
        "dlerror",
    ];
    let undefined = tool(
        &["nm", "-D", "--undefined-only", "--without-symbol-versions"],
        &front,
    );
    let names: Vec<&str> = undefined
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert!(
        !names.is_empty(),
        "nm listed nothing for {}",
        front.display()
    );
    let unexpected: Vec<&&str> = names.iter().filter(|n| !allowed.contains(n)).collect();
    assert!(unexpected.is_empty(), "the front needs {unexpected:?}");

    // The static symbol table: the panic handler is the only panic symbol, nothing of the
    // unwinder or of core's panicking module is there.
    let symbols = tool(&["nm"], &front);
    let handler: Vec<&str> = symbols
        .lines()
        .filter(|l| l.contains("rust_begin_unwind"))
        .collect();
    assert_eq!(handler.len(), 1, "{symbols}");
    for bad in [
        "panicking",
        "panic_bounds_check",
        "_Unwind_",
        "eh_personality",
        "__rust_",
    ] {
        assert!(!symbols.contains(bad), "{bad} in the front:\n{symbols}");
    }
    // And no instruction calls or jumps to the handler.
    let handler_name = handler[0].split_whitespace().last().unwrap();
    let code = tool(&["objdump", "-d", "--no-show-raw-insn"], &front);
    let label = format!("<{handler_name}>:");
    let uses: Vec<&str> = code
        .lines()
        .filter(|l| l.contains(handler_name) && !l.contains(&label))
        .collect();
    assert!(code.contains(&label), "objdump shows no handler:\n{code}");
    assert!(uses.is_empty(), "the panic handler is reachable: {uses:?}");
    // Nor does any data point at it (every pointer the front stores is a relative
    // relocation, whose addend is the address).
    let address = handler[0]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches('0');
    let relocs = tool(&["readelf", "-r", "-W"], &front);
    assert!(
        !relocs
            .lines()
            .any(|l| l.split_whitespace().last() == Some(address)),
        "a relocation points at the panic handler:\n{relocs}"
    );
}

/// The standard output of a binutils tool run on `so`.
fn tool(cmd: &[&str], so: &Path) -> String {
    let out = std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .arg(so)
        .output()
        .unwrap_or_else(|e| panic!("{} (binutils): {e}", cmd[0]));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// DT_NEEDED entries of a library, from readelf.
fn needed(so: &Path) -> Vec<String> {
    let out = std::process::Command::new("readelf")
        .args(["-d"])
        .arg(so)
        .output()
        .expect("readelf (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next().map(str::to_string))
        .collect()
}
