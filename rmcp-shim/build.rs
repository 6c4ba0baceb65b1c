//! Builds librmcp_shim.so, the object LD_PRELOAD loads (`front/front.rs`, a `no_std` crate),
//! next to this crate's own library, librmcp_shim_body.so, which the front maps on the first
//! hooked call (docs/design.md, "Two objects").
//!
//! - The front is compiled with the `rustc` cargo uses (`RUSTC`, for `TARGET`) with
//!   `-C panic=abort`, outside cargo's crate graph: cargo sets the panic strategy per
//!   profile, and the body must keep unwinding (its panics are caught at the FFI boundary).
//!   Under `cargo clippy` the same command runs through clippy-driver with the workspace's
//!   unsafe-documentation lint, so the front is linted like every other crate.
//! - Its hook list is the one table: front.rs includes rmcp-sys's `hooks.rs`, and
//!   `front/abi.rs` is the one definition of what the two objects hand each other (the body
//!   includes the same file).
//! - rustc emits the crate's object alone; the linker cargo uses for the target
//!   (`CARGO_TARGET_<TRIPLE>_LINKER`, as cargo-zigbuild sets for the wheel; else the C
//!   compiler the `cc` crate finds, `cc` by default) links it into the shared object with
//!   `-z defs` and no `core` library: anything of `core` the front would need that is not
//!   inlined, a panic path above all, fails this build. A version script exports exactly the
//!   hooked names, `dlsym` and `rmcp_shim_stats`.
//! - cargo writes only its own artifacts to target/<profile>; the front is copied there and
//!   into target/<profile>/deps, beside the body in both places (the tests preload the one
//!   in deps, users the other). In target/release the body is the regular file `cargo
//!   build --release` copies up; in target/debug a link to deps stands in before that.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How the front is compiled: its own crate, `panic = "abort"`, optimised (so that no
/// check the compiler can prove away stays), one codegen unit (its `global_asm!` and code in
/// one object), no debug info (no paths of the build machine), warnings as errors.
const FRONT_FLAGS: &[&str] = &[
    "--crate-name=rmcp_front",
    "--crate-type=staticlib",
    "--edition=2024",
    "-Cpanic=abort",
    "-Copt-level=2",
    "-Ccodegen-units=1",
    "-Cdebuginfo=0",
    "-Coverflow-checks=off",
    "-Cdebug-assertions=off",
    "-Crelocation-model=pic",
    "-Dwarnings",
];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = std::env::var("TARGET").expect("cargo sets TARGET");

    // The object.
    let obj = out.join("rmcp_front.o");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let clippy = std::env::var_os("RUSTC_WORKSPACE_WRAPPER").filter(|w| {
        Path::new(w)
            .file_stem()
            .is_some_and(|s| s.to_string_lossy().contains("clippy"))
    });
    let mut cmd = match &clippy {
        Some(driver) => {
            let mut c = Command::new(driver);
            c.arg(&rustc);
            c.args(["-D", "clippy::undocumented_unsafe_blocks"]);
            c
        }
        None => Command::new(&rustc),
    };
    cmd.args(FRONT_FLAGS)
        .args(["--target", &target])
        // rustc's scratch files go beside its output, never into the source tree (which may
        // be read-only).
        .arg("--out-dir")
        .arg(&out)
        .arg("--emit")
        .arg(concat_os("obj=", &obj))
        .arg("front/front.rs");
    run(&mut cmd, "compiling front/front.rs");

    // The exports.
    let mut script = String::from("{\n  global:\n");
    for name in rmcp_core::registry::exported_names() {
        let _ = writeln!(script, "    {name};");
    }
    script.push_str(
        "    dlopen;\n    dlclose;\n    rmcp_shim_stats;\n    rmcp_front_next;\n  local: *;\n};\n",
    );
    let map = out.join("front.map");
    std::fs::write(&map, script).expect("write the front's version script");

    // The link.
    let so = out.join("librmcp_shim.so");
    let var = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace(['-', '.'], "_")
    );
    let mut link = match std::env::var_os(&var) {
        Some(linker) => Command::new(linker),
        None => {
            let compiler = cc::Build::new().get_compiler();
            let mut c = Command::new(compiler.path());
            c.envs(compiler.get_envs());
            c
        }
    };
    link.args([
        "-shared",
        "-nostartfiles",
        "-Wl,-z,defs",
        "-Wl,-z,relro",
        // Never unmapped, even when dlopened and dlclosed (issue 22): the body, mapped
        // RTLD_NODELETE, keeps pointers into it, and its atfork and exit handlers use them.
        "-Wl,-z,nodelete",
        "-Wl,-z,noexecstack",
        // The loader functions are weak references (front/sys.rs): libdl.so.2, where the
        // glibc built against keeps them, is not made a dependency.
        "-Wl,--as-needed",
        "-Wl,--hash-style=gnu",
        "-Wl,--strip-debug",
        "-Wl,-soname,librmcp_shim.so",
    ])
    .arg(&obj)
    .arg(concat_os("-Wl,--version-script=", &map))
    .arg("-o")
    .arg(&so);
    run(&mut link, "linking librmcp_shim.so");

    if let Some(profile) = profile_dir(&out) {
        for dir in [profile.clone(), profile.join("deps")] {
            let _ = std::fs::create_dir_all(&dir);
            let dest = dir.join("librmcp_shim.so");
            // Replace, never write through: a running process may have the old file mapped.
            let tmp = dir.join(".librmcp_shim.so.tmp");
            std::fs::copy(&so, &tmp).expect("copy the front next to the body");
            std::fs::rename(&tmp, &dest).expect("move the front into place");
        }
        // The body: cargo copies it up into target/<profile> only when this package is
        // what was asked for (`cargo build`), not when it is built for tests or dependents.
        // The CLI's tests run target/debug/rmcp, which finds the front beside itself and
        // wants the body there too: in the debug profile a link to the body in deps stands
        // in for it. Never in release, what users copy from: cargo leaves in place a link
        // to the very file it would copy (the same file), so `cargo build --release` after
        // README's demo kept it, and `cp -a` of the pair copied a dangling link. There the
        // body is the regular file `cargo build --release` puts, and a link an earlier
        // build left is removed.
        let body = profile.join("librmcp_shim_body.so");
        let is_link = body
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        if std::env::var("PROFILE").as_deref() == Ok("debug") {
            if !body.exists() {
                let _ = std::fs::remove_file(&body);
                let _ = std::os::unix::fs::symlink("deps/librmcp_shim_body.so", &body);
            }
        } else if is_link {
            let _ = std::fs::remove_file(&body);
        }
    }
    for f in [
        "front/front.rs",
        "front/abi.rs",
        "front/body.rs",
        "front/sys.rs",
        "front/fork.rs",
        "front/installs.rs",
        "front/unattached.rs",
        "../rmcp-sys/src/hooks.rs",
        "build.rs",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-env-changed={var}");
}

fn concat_os(a: &str, b: &Path) -> OsString {
    let mut s = OsString::from(a);
    s.push(b);
    s
}

fn run(cmd: &mut Command, what: &str) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("rmcp-shim: {what}: cannot run {cmd:?}: {e}"));
    assert!(status.success(), "rmcp-shim: {what} failed: {cmd:?}");
}

/// target/<profile> (or target/<triple>/<profile>) from OUT_DIR, which cargo makes
/// `<that>/build/<pkg>-<hash>/out`; None if OUT_DIR is not laid out so.
fn profile_dir(out: &Path) -> Option<PathBuf> {
    let build = out.parent()?.parent()?;
    (build.file_name()? == "build").then(|| build.parent().map(Path::to_path_buf))?
}
