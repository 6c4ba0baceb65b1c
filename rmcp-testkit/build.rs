//! Builds the C test artifacts (std only, no build-dependencies).
//!
//! The sources stay where they are, relative to the workspace root (this crate's parent
//! directory): tests/fake-hip, tests/c, examples/hip_probe.c, benches/*.c.
//!
//! Everything goes to OUT_DIR. This crate's library (src/artifacts.rs, the only reader)
//! finds it through these compile-time environment variables (`env!`):
//!
//! * `RMCP_FAKE_HIP_DIR_5/6/7`: directories holding the fake runtime
//!   `libamdhip64.so.N` (tests/fake-hip/fake_hip.c) plus a `libamdhip64.so` symlink used
//!   for linking.
//! * `RMCP_HIP_PROBE_5/6/7`: examples/hip_probe.c executables, DT_NEEDED
//!   libamdhip64.so.5 / .so.6 / .so.7, no rpath (LD_LIBRARY_PATH picks the runtime).
//! * `RMCP_FRAMEWORK_5/6/7`: the same source as a shared library exporting
//!   `probe_main`, DT_NEEDED the runtime, no rpath.
//! * `RMCP_DLOPEN_CLIENT`: tests/c/dlopen_client.c, not linked to the runtime.
//! * `RMCP_HOTPATH`, `RMCP_DLSYM_CLIENT`, `RMCP_DLSYM_TABLE`, `RMCP_SCOPE_LIB_5/6`, `RMCP_STRESS_CLIENT`,
//!   `RMCP_FORK_CLIENT`, `RMCP_BENCH_CLIENT`, `RMCP_NOMEM_CLIENT`, `RMCP_FD_CLIENT`,
//!   `RMCP_NW_PLUGIN_5/6`, `RMCP_NW_CLIENT`, `RMCP_NW_SITES`: see the
//!   functions that build them below.
//! * `RMCP_ASAN_APP`: tests/c/asan_app.c built with `-fsanitize=address`, or empty when
//!   the compiler cannot build it; `RMCP_ASAN_APP_WHY` then says why (see `asan_app`).
//! * `RMCP_EMUGPU_LIB` (tests/emulated-gpu/emugpu.c and the files beside it, the emulated
//!   GPU; empty when the headers it needs are missing, `RMCP_EMUGPU_LIB_WHY` then says why) and
//!   `RMCP_EMU_PROBE_5/6/7` (tests/emulated-gpu/emu_probe.c), `RMCP_MODULE_LOAD_5/7/DL`
//!   (tests/emulated-gpu/module_load.c), `RMCP_MIOPEN_CONV` (tests/emulated-gpu/miopen_conv.c):
//!   see `emulated_gpu`.
//!
//! The compiler is `$CC` (which may carry arguments, e.g. "ccache cc") or `cc`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const FAKE_HIP_SRC: &str = "tests/fake-hip/fake_hip.c";
const FAKE_HIP_MAP: &str = "tests/fake-hip/hip.map";
const FAKE_HIP_MAP_5: &str = "tests/fake-hip/hip.map.5";
const FAKE_HIP_MAP_7: &str = "tests/fake-hip/hip.map.7";
const PROBE_SRC: &str = "examples/hip_probe.c";
const DLOPEN_CLIENT_SRC: &str = "tests/c/dlopen_client.c";
const HOTPATH_SRC: &str = "tests/c/hotpath.c";

/// The emulated GPU's sources, one object (tests/emulated-gpu/emugpu.h lists what each
/// holds); scripts/emulated-gpu compiles the same files.
const EMUGPU_SRCS: &[&str] = &[
    "tests/emulated-gpu/emugpu.c",
    "tests/emulated-gpu/topology.c",
    "tests/emulated-gpu/log.c",
    "tests/emulated-gpu/kfd.c",
    "tests/emulated-gpu/memory.c",
    "tests/emulated-gpu/events.c",
    "tests/emulated-gpu/queues.c",
    "tests/emulated-gpu/faults.c",
    "tests/emulated-gpu/drm.c",
];

const CFLAGS: &[&str] = &["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for path in [
        FAKE_HIP_SRC,
        FAKE_HIP_MAP,
        FAKE_HIP_MAP_5,
        FAKE_HIP_MAP_7,
        PROBE_SRC,
        DLOPEN_CLIENT_SRC,
        HOTPATH_SRC,
        "tests/c/hip_alloc.h",
        "tests/c/counting_malloc.h",
    ] {
        rerun_if_changed(path);
    }
    println!("cargo:rerun-if-env-changed=CC");
    // The skip log (src/skip.rs): target/<profile>/rmcp-skipped.log, beside the artifacts
    // cargo puts there (OUT_DIR is target/<profile>/build/<pkg>-<hash>/out).
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let profile = out_dir.ancestors().nth(3).unwrap_or(&out_dir);
    println!(
        "cargo:rustc-env=RMCP_SKIP_LOG={}",
        profile.join("rmcp-skipped.log").display()
    );

    // The artifacts are Linux/glibc ELF objects (LD_PRELOAD, version scripts).
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        println!("cargo:warning=rmcp: not a Linux target, C test artifacts not built");
        return;
    }

    let root_dir = root();
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let cc = Compiler::from_env();
    let src = |p: &str| root_dir.join(p);

    // Fake runtimes, one directory per major version.
    for major in [5u32, 6, 7] {
        let dir = out.join(format!("fake-hip-{major}"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let soname = format!("libamdhip64.so.{major}");
        let lib = dir.join(&soname);
        let map = src(match major {
            5 => FAKE_HIP_MAP_5,
            7 => FAKE_HIP_MAP_7,
            _ => FAKE_HIP_MAP,
        });
        cc.run(
            &format!("fake HIP runtime {soname}"),
            &[
                "-shared".into(),
                "-fPIC".into(),
                format!("-DFAKEHIP_MAJOR={major}"),
                format!("-Wl,-soname,{soname}"),
                format!("-Wl,--version-script={}", map.display()),
                "-o".into(),
                lib.display().to_string(),
                src(FAKE_HIP_SRC).display().to_string(),
                "-ldl".into(),
            ],
        );
        let link = dir.join("libamdhip64.so");
        symlink_force(Path::new(&soname), &link);
        println!(
            "cargo:rustc-env=RMCP_FAKE_HIP_DIR_{major}={}",
            dir.display()
        );
    }

    // hip_probe executables and libframework shared libraries (5, 6 and 7).
    for major in [5u32, 6, 7] {
        let fake_dir = out.join(format!("fake-hip-{major}"));
        let link_args = [
            format!("-L{}", fake_dir.display()),
            "-lamdhip64".into(),
            "-ldl".into(),
        ];

        let probe = out.join(format!("hip_probe{major}"));
        let mut args: Vec<String> = vec![
            "-o".into(),
            probe.display().to_string(),
            src(PROBE_SRC).display().to_string(),
        ];
        args.extend(link_args.iter().cloned());
        cc.run(&format!("hip_probe{major}"), &args);
        println!("cargo:rustc-env=RMCP_HIP_PROBE_{major}={}", probe.display());

        let framework = out.join(format!("libframework{major}.so"));
        let mut args: Vec<String> = vec![
            "-shared".into(),
            "-fPIC".into(),
            "-DHIP_PROBE_LIBRARY".into(),
            format!("-Wl,-soname,libframework{major}.so"),
            "-o".into(),
            framework.display().to_string(),
            src(PROBE_SRC).display().to_string(),
        ];
        args.extend(link_args.iter().cloned());
        cc.run(&format!("libframework{major}.so"), &args);
        println!(
            "cargo:rustc-env=RMCP_FRAMEWORK_{major}={}",
            framework.display()
        );
    }

    // The hot-path checker: linked to the .so.6 fake, with its own malloc family.
    let hotpath = out.join("hotpath");
    let fake6 = out.join("fake-hip-6");
    cc.run(
        "hotpath",
        &[
            "-o".into(),
            hotpath.display().to_string(),
            src(HOTPATH_SRC).display().to_string(),
            format!("-L{}", fake6.display()),
            "-lamdhip64".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_HOTPATH={}", hotpath.display());

    let client = out.join("dlopen_client");
    cc.run(
        "dlopen_client",
        &[
            "-o".into(),
            client.display().to_string(),
            src(DLOPEN_CLIENT_SRC).display().to_string(),
            "-ldl".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_DLOPEN_CLIENT={}", client.display());

    bench_client(&cc, &root_dir, &out);
    dlsym_clients(&cc, &root_dir, &out);
    transparency_clients(&cc, &root_dir, &out);
    reliability_clients(&cc, &root_dir, &out);
    never_worse_clients(&cc, &root_dir, &out);
    asan_app(&cc, &root_dir, &out);
    emulated_gpu(&cc, &root_dir, &out);
}

/// The emulated GPU (scripts/emulated-gpu builds the same object on its own):
/// `RMCP_EMUGPU_LIB`, tests/emulated-gpu/emugpu.c and the files beside it (`EMUGPU_SRCS`)
/// as one preloadable object, and `RMCP_EMU_PROBE_5/6/7`, tests/emulated-gpu/emu_probe.c
/// linked to the fake runtimes' sonames (the real runtime loads in its place). The
/// emulator needs the kernel's uapi <linux/kfd_ioctl.h> and libdrm's <amdgpu_drm.h>
/// (Debian: linux-libc-dev, libdrm-dev); without them `RMCP_EMUGPU_LIB` is empty and
/// `RMCP_EMUGPU_LIB_WHY` says why.
fn emulated_gpu(cc: &Compiler, root_dir: &Path, out: &Path) {
    const PROBE_SRC: &str = "tests/emulated-gpu/emu_probe.c";
    for path in EMUGPU_SRCS {
        rerun_if_changed(path);
    }
    rerun_if_changed("tests/emulated-gpu/emugpu.h");
    rerun_if_changed(PROBE_SRC);
    // <linux/kfd_ioctl.h> includes <drm/drm.h>; Debian ships it as /usr/include/libdrm/drm.h.
    let include = out.join("emugpu-include");
    fs::create_dir_all(&include).unwrap_or_else(|e| panic!("creating {}: {e}", include.display()));
    symlink_force(Path::new("/usr/include/libdrm"), &include.join("drm"));
    let lib = out.join("libemugpu.so");
    let mut args: Vec<String> = vec![
        "-shared".into(),
        "-fPIC".into(),
        "-fvisibility=hidden".into(),
        "-Wno-nonnull-compare".into(),
        "-I/usr/include/libdrm".into(),
        format!("-I{}", include.display()),
        "-o".into(),
        lib.display().to_string(),
    ];
    args.extend(
        EMUGPU_SRCS
            .iter()
            .map(|p| root_dir.join(p).display().to_string()),
    );
    args.push("-ldl".into());
    let built = cc.try_run(&args);
    match built {
        Ok(()) => {
            println!("cargo:rustc-env=RMCP_EMUGPU_LIB={}", lib.display());
            println!("cargo:rustc-env=RMCP_EMUGPU_LIB_WHY=");
        }
        Err(why) => {
            // No warning: a missing optional test prerequisite must not mark every build,
            // README's demo included; the tests that need the library say it when they skip.
            rerun_when_packages_change();
            println!("cargo:rustc-env=RMCP_EMUGPU_LIB=");
            println!("cargo:rustc-env=RMCP_EMUGPU_LIB_WHY={why}");
        }
    }
    for major in [5u32, 6, 7] {
        let exe = out.join(format!("emu_probe{major}"));
        cc.run(
            &format!("emu_probe{major}"),
            &[
                "-o".into(),
                exe.display().to_string(),
                root_dir.join(PROBE_SRC).display().to_string(),
                format!("-L{}", out.join(format!("fake-hip-{major}")).display()),
                "-lamdhip64".into(),
                "-ldl".into(),
            ],
        );
        println!("cargo:rustc-env=RMCP_EMU_PROBE_{major}={}", exe.display());
    }
    // tests/emulated-gpu/module_load.c: its runtime functions are weak references (the fake
    // runtimes lack them), so the runtime is kept as a dependency explicitly.
    const LOAD_SRC: &str = "tests/emulated-gpu/module_load.c";
    rerun_if_changed(LOAD_SRC);
    for major in [5u32, 7] {
        let exe = out.join(format!("module_load{major}"));
        cc.run(
            &format!("module_load{major}"),
            &[
                "-o".into(),
                exe.display().to_string(),
                root_dir.join(LOAD_SRC).display().to_string(),
                format!("-L{}", out.join(format!("fake-hip-{major}")).display()),
                "-Wl,--no-as-needed".into(),
                "-lamdhip64".into(),
                "-Wl,--as-needed".into(),
                "-ldl".into(),
            ],
        );
        println!("cargo:rustc-env=RMCP_MODULE_LOAD_{major}={}", exe.display());
    }
    // And linked to no runtime: its `proc` mode's dlopen(RTLD_LOCAL) is then the only copy,
    // whose lookups hand out per-copy entries (Python's ctypes and Triton's shape).
    let exe = out.join("module_load_dl");
    cc.run(
        "module_load_dl",
        &[
            "-o".into(),
            exe.display().to_string(),
            root_dir.join(LOAD_SRC).display().to_string(),
            "-ldl".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_MODULE_LOAD_DL={}", exe.display());
    // tests/emulated-gpu/miopen_conv.c: real MIOpen through dlopen, no headers, linked to no
    // runtime (MIOpen brings its own).
    const MIOPEN_SRC: &str = "tests/emulated-gpu/miopen_conv.c";
    rerun_if_changed(MIOPEN_SRC);
    let exe = out.join("miopen_conv");
    cc.run(
        "miopen_conv",
        &[
            "-o".into(),
            exe.display().to_string(),
            root_dir.join(MIOPEN_SRC).display().to_string(),
            "-ldl".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_MIOPEN_CONV={}", exe.display());
}

/// The loading shapes of issue 22 (rmcp-shim/tests/never_worse.rs):
/// `RMCP_NW_PLUGIN_5` / `_6` (tests/c/nw_plugin.c as `nwplugin-N/libnwplugin.so`, linked to
/// the fake `.so.N`, no soname), `RMCP_NW_CLIENT` (tests/c/never_worse.c, not linked to a
/// runtime) and `RMCP_NW_SITES` (tests/c/nw_sites.c, linked to the .so.6 fake, with a
/// counting malloc family), and `RMCP_NW_BARE` (tests/c/nw_bare.c: a library with no
/// constructor or destructor, not even the C runtime's).
fn never_worse_clients(cc: &Compiler, root_dir: &Path, out: &Path) {
    const PLUGIN: &str = "tests/c/nw_plugin.c";
    const CLIENT: &str = "tests/c/never_worse.c";
    const SITES: &str = "tests/c/nw_sites.c";
    for path in [PLUGIN, CLIENT, SITES] {
        rerun_if_changed(path);
    }
    let src = |p: &str| root_dir.join(p).display().to_string();
    for major in [5u32, 6] {
        let dir = out.join(format!("nwplugin-{major}"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let lib = dir.join("libnwplugin.so");
        cc.run(
            "libnwplugin.so",
            &[
                "-shared".into(),
                "-fPIC".into(),
                "-o".into(),
                lib.display().to_string(),
                src(PLUGIN),
                format!("-L{}", out.join(format!("fake-hip-{major}")).display()),
                "-lamdhip64".into(),
            ],
        );
        println!("cargo:rustc-env=RMCP_NW_PLUGIN_{major}={}", lib.display());
    }
    const BARE: &str = "tests/c/nw_bare.c";
    rerun_if_changed(BARE);
    let bare = out.join("libnwbare.so");
    cc.run(
        "libnwbare.so",
        &[
            "-shared".into(),
            "-fPIC".into(),
            "-nostartfiles".into(),
            "-o".into(),
            bare.display().to_string(),
            src(BARE),
        ],
    );
    println!("cargo:rustc-env=RMCP_NW_BARE={}", bare.display());
    let client = out.join("never_worse");
    cc.run(
        "never_worse",
        &[
            "-o".into(),
            client.display().to_string(),
            src(CLIENT),
            "-ldl".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_NW_CLIENT={}", client.display());
    let sites = out.join("nw_sites");
    cc.run(
        "nw_sites",
        &[
            "-o".into(),
            sites.display().to_string(),
            src(SITES),
            format!("-L{}", out.join("fake-hip-6").display()),
            "-lamdhip64".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_NW_SITES={}", sites.display());
}

/// `RMCP_ASAN_APP`: tests/c/asan_app.c with `-fsanitize=address`, linked to the .so.6 fake
/// (the sanitizer tests of `rmcp run` and the entrypoint). A compiler without ASan (no
/// libasan installed, say) is not an error here: the variable is left empty,
/// `RMCP_ASAN_APP_WHY` carries the compiler's first complaint, and the tests skip, or fail
/// where prerequisites are required (rmcp-testkit's `asan_app`).
fn asan_app(cc: &Compiler, root_dir: &Path, out: &Path) {
    const SRC: &str = "tests/c/asan_app.c";
    rerun_if_changed(SRC);
    let exe = out.join("asan_app");
    let fake6 = out.join("fake-hip-6");
    let built = cc.try_run(&[
        "-fsanitize=address".into(),
        "-fno-omit-frame-pointer".into(),
        "-o".into(),
        exe.display().to_string(),
        root_dir.join(SRC).display().to_string(),
        format!("-L{}", fake6.display()),
        "-lamdhip64".into(),
    ]);
    match built {
        Ok(()) => {
            println!("cargo:rustc-env=RMCP_ASAN_APP={}", exe.display());
            println!("cargo:rustc-env=RMCP_ASAN_APP_WHY=");
        }
        Err(why) => {
            // As for libemugpu.so: the ASan tests say it when they skip, the build does not.
            rerun_when_packages_change();
            println!("cargo:rustc-env=RMCP_ASAN_APP=");
            println!("cargo:rustc-env=RMCP_ASAN_APP_WHY={why}");
        }
    }
}

/// Executables linked to the .so.6 fake, for the reliability tests:
/// `RMCP_STRESS_CLIENT` (tests/c/stress.c) and `RMCP_FORK_CLIENT` (tests/c/forker.c)
/// (reliability_*.rs), and the clients of the "never worse" tests (issue 13):
/// `RMCP_NOMEM_CLIENT` (tests/c/nomem.c: a malloc family that fails from a chosen call on)
/// and `RMCP_FD_CLIENT` (tests/c/fdclient.c: rearranges its standard descriptors).
fn reliability_clients(cc: &Compiler, root_dir: &Path, out: &Path) {
    let fake6 = out.join("fake-hip-6");
    for (name, src, var) in [
        ("stress", "tests/c/stress.c", "RMCP_STRESS_CLIENT"),
        ("forker", "tests/c/forker.c", "RMCP_FORK_CLIENT"),
        ("nomem", "tests/c/nomem.c", "RMCP_NOMEM_CLIENT"),
        ("fdclient", "tests/c/fdclient.c", "RMCP_FD_CLIENT"),
    ] {
        rerun_if_changed(src);
        let exe = out.join(name);
        cc.run(
            name,
            &[
                "-o".into(),
                exe.display().to_string(),
                root_dir.join(src).display().to_string(),
                format!("-L{}", fake6.display()),
                "-lamdhip64".into(),
                "-ldl".into(),
            ],
        );
        println!("cargo:rustc-env={var}={}", exe.display());
    }
}

/// Callers that look HIP up by name (the shim_dlsym tests): `RMCP_DLSYM_CLIENT`, and
/// `RMCP_SCOPE_LIB_5` / `_6` (libscopeN.so, linked to the runtime and to libscopedep.so,
/// found through its rpath $ORIGIN).
fn dlsym_clients(cc: &Compiler, root_dir: &Path, out: &Path) {
    const CLIENT: &str = "tests/c/dlsym_client.c";
    const SCOPE: &str = "tests/c/dlsym_scope.c";
    const SCOPEDEP: &str = "tests/c/dlsym_scopedep.c";
    const TABLE: &str = "tests/c/dlsym_table.c";
    const TABLE_LIB: &str = "tests/c/dlsym_table_lib.c";
    for path in [CLIENT, SCOPE, SCOPEDEP, "tests/c/owner.h"] {
        rerun_if_changed(path);
    }
    let src = |p: &str| root_dir.join(p).display().to_string();
    let client = out.join("dlsym_client");
    cc.run(
        "dlsym_client",
        &[
            "-o".into(),
            client.display().to_string(),
            src(CLIENT),
            "-ldl".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_DLSYM_CLIENT={}", client.display());
    // Issue 33's table: the program and its library, found through its rpath $ORIGIN.
    for path in [TABLE, TABLE_LIB] {
        rerun_if_changed(path);
    }
    let dir = out.join("dlsym-table");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    cc.run(
        "libdlsym_table_lib.so",
        &[
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,libdlsym_table_lib.so".into(),
            "-o".into(),
            dir.join("libdlsym_table_lib.so").display().to_string(),
            src(TABLE_LIB),
            "-ldl".into(),
        ],
    );
    let table = dir.join("dlsym_table");
    cc.run(
        "dlsym_table",
        &[
            "-o".into(),
            table.display().to_string(),
            src(TABLE),
            format!("-L{}", dir.display()),
            "-ldlsym_table_lib".into(),
            "-ldl".into(),
            "-Wl,-rpath,$ORIGIN".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_DLSYM_TABLE={}", table.display());
    for major in [5u32, 6] {
        let dir = out.join(format!("scope-{major}"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let dep = dir.join("libscopedep.so");
        cc.run(
            "libscopedep.so",
            &[
                "-shared".into(),
                "-fPIC".into(),
                "-Wl,-soname,libscopedep.so".into(),
                "-o".into(),
                dep.display().to_string(),
                src(SCOPEDEP),
            ],
        );
        let lib = dir.join(format!("libscope{major}.so"));
        cc.run(
            "libscope.so",
            &[
                "-shared".into(),
                "-fPIC".into(),
                "-o".into(),
                lib.display().to_string(),
                src(SCOPE),
                format!("-L{}", dir.display()),
                "-lscopedep".into(),
                format!("-L{}", out.join(format!("fake-hip-{major}")).display()),
                "-lamdhip64".into(),
                "-ldl".into(),
                "-Wl,-rpath,$ORIGIN".into(),
            ],
        );
        println!("cargo:rustc-env=RMCP_SCOPE_LIB_{major}={}", lib.display());
    }
}

/// The other loading shapes of the transparency tests: `RMCP_TRACER` (libtracer.so, a HIP
/// interposer), `RMCP_DLSYM_WRAPPER` (libdlsymwrap.so, a dlsym wrapper), `RMCP_AUDIT`
/// (libaudit.so, an LD_AUDIT module) and `RMCP_PRESENCE` (an executable that asks whether
/// HIP is there without using it).
fn transparency_clients(cc: &Compiler, root_dir: &Path, out: &Path) {
    let src = |p: &str| root_dir.join(p).display().to_string();
    for (name, source, var) in [
        ("libtracer.so", "tests/c/tracer.c", "RMCP_TRACER"),
        (
            "libdlsymwrap.so",
            "tests/c/dlsym_wrapper.c",
            "RMCP_DLSYM_WRAPPER",
        ),
        ("libaudit.so", "tests/c/audit.c", "RMCP_AUDIT"),
    ] {
        rerun_if_changed(source);
        let lib = out.join(name);
        cc.run(
            name,
            &[
                "-shared".into(),
                "-fPIC".into(),
                "-o".into(),
                lib.display().to_string(),
                src(source),
                "-ldl".into(),
            ],
        );
        println!("cargo:rustc-env={var}={}", lib.display());
    }
    // The constructor-under-dlopen deadlock shape: an executable exporting its semaphore
    // (-rdynamic) and a library linked to the .so.6 fake whose constructor allocates.
    rerun_if_changed("tests/c/ctor_lib.c");
    rerun_if_changed("tests/c/ctor_deadlock.c");
    let fake6 = format!("-L{}", out.join("fake-hip-6").display());
    let ctor = out.join("libctor.so");
    cc.run(
        "libctor.so",
        &[
            "-shared".into(),
            "-fPIC".into(),
            "-o".into(),
            ctor.display().to_string(),
            src("tests/c/ctor_lib.c"),
            fake6.clone(),
            "-lamdhip64".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_CTOR_LIB={}", ctor.display());
    let deadlock = out.join("ctor_deadlock");
    cc.run(
        "ctor_deadlock",
        &[
            "-rdynamic".into(),
            "-o".into(),
            deadlock.display().to_string(),
            src("tests/c/ctor_deadlock.c"),
            fake6,
            "-lamdhip64".into(),
            "-ldl".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_CTOR_DEADLOCK={}", deadlock.display());
    rerun_if_changed("tests/c/presence.c");
    let exe = out.join("presence");
    cc.run(
        "presence",
        &[
            "-o".into(),
            exe.display().to_string(),
            src("tests/c/presence.c"),
            "-ldl".into(),
        ],
    );
    println!("cargo:rustc-env=RMCP_PRESENCE={}", exe.display());
}

/// `RMCP_BENCH_CLIENT`: benches/bench_main.c, an executable (rpath $ORIGIN) linked to
/// `librmcp_bench.so` (benches/bench_client.c), which makes the hooked calls and is linked
/// to the .so.6 fake. examples/bench.rs runs it.
fn bench_client(cc: &Compiler, root_dir: &Path, out: &Path) {
    const BENCH_CLIENT_SRC: &str = "benches/bench_client.c";
    const BENCH_MAIN_SRC: &str = "benches/bench_main.c";
    for path in [BENCH_CLIENT_SRC, BENCH_MAIN_SRC] {
        rerun_if_changed(path);
    }
    let dir = out.join("bench");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let fake6 = out.join("fake-hip-6");
    let lib = dir.join("librmcp_bench.so");
    cc.run(
        "librmcp_bench.so",
        &[
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,librmcp_bench.so".into(),
            "-o".into(),
            lib.display().to_string(),
            root_dir.join(BENCH_CLIENT_SRC).display().to_string(),
            format!("-L{}", fake6.display()),
            "-lamdhip64".into(),
        ],
    );
    let exe = dir.join("rmcp_bench");
    cc.run(
        "rmcp_bench",
        &[
            "-o".into(),
            exe.display().to_string(),
            root_dir.join(BENCH_MAIN_SRC).display().to_string(),
            format!("-L{}", dir.display()),
            "-lrmcp_bench".into(),
            "-Wl,-rpath,$ORIGIN".into(),
            format!("-Wl,-rpath-link,{}", fake6.display()),
        ],
    );
    println!("cargo:rustc-env=RMCP_BENCH_CLIENT={}", exe.display());
}

/// The workspace root: the sources' paths are relative to it.
fn root() -> PathBuf {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .expect("rmcp-testkit lives in the workspace root")
        .to_path_buf()
}

/// When an artifact could not be built for want of an optional package (libdrm's headers,
/// gcc's ASan runtime), run this script again once packages are installed: dpkg's status
/// file changes with every install (Debian, Ubuntu). Not a path that may be missing (cargo
/// would then rerun the script on every build).
fn rerun_when_packages_change() {
    let status = Path::new("/var/lib/dpkg/status");
    if status.exists() {
        println!("cargo:rerun-if-changed={}", status.display());
    }
}

/// `rerun-if-changed` for a source given relative to the workspace root (cargo takes
/// relative paths as relative to this package, so the path printed is absolute).
fn rerun_if_changed(path: &str) {
    println!("cargo:rerun-if-changed={}", root().join(path).display());
}

struct Compiler {
    program: String,
    prefix_args: Vec<String>,
}

impl Compiler {
    fn from_env() -> Self {
        let spec = env::var("CC")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "cc".to_string());
        let mut words = spec.split_whitespace().map(str::to_string);
        let program = words.next().unwrap_or_else(|| "cc".to_string());
        Compiler {
            program,
            prefix_args: words.collect(),
        }
    }

    /// Like `run`, for an optional artifact: Err with the compiler's first line of
    /// complaint (or the reason it could not be started) instead of a panic.
    fn try_run(&self, args: &[String]) -> Result<(), String> {
        let output = Command::new(&self.program)
            .args(&self.prefix_args)
            .args(CFLAGS)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run `{}`: {e}", self.program))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr
            .lines()
            .map(str::trim)
            .find(|l| l.contains("error") || l.contains("cannot find"))
            .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
            .unwrap_or("no message");
        Err(format!(
            "`{}` failed ({}): {first}",
            self.program, output.status
        ))
    }

    fn run(&self, what: &str, args: &[String]) {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.prefix_args).args(CFLAGS).args(args);
        let shown = format!("{cmd:?}");
        let output = cmd.output().unwrap_or_else(|e| {
            panic!(
                "rmcp-testkit build.rs: cannot run the C compiler `{}` for {what}: {e}\n\
                 (set CC to a working C compiler)",
                self.program
            )
        });
        if !output.status.success() {
            panic!(
                "rmcp-testkit build.rs: compiling {what} failed ({})\ncommand: {shown}\n\
                 --- compiler stdout ---\n{}\n--- compiler stderr ---\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        // Surface warnings that did not fail the build (e.g. from a custom CC).
        for line in String::from_utf8_lossy(&output.stderr).lines() {
            if !line.trim().is_empty() {
                println!("cargo:warning={what}: {line}");
            }
        }
    }
}

fn symlink_force(target: &Path, link: &Path) {
    match fs::symlink_metadata(link) {
        Ok(_) => {
            fs::remove_file(link).unwrap_or_else(|e| panic!("removing old {}: {e}", link.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("inspecting {}: {e}", link.display()),
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(target, link).unwrap_or_else(|e| {
        panic!(
            "creating symlink {} -> {}: {e}",
            link.display(),
            target.display()
        )
    });
    #[cfg(not(unix))]
    let _ = target;
}
