//! The C programs and libraries build.rs compiles into OUT_DIR (fake HIP runtimes, the
//! probe and its framework-library form, the C clients, the bench client): one function
//! per artifact, returning its path.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Directory of the fake runtime `libamdhip64.so.<major>` (5, 6, 7) and its `.so` symlink.
pub fn fake_dir(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_FAKE_HIP_DIR_5"),
        6 => env!("RMCP_FAKE_HIP_DIR_6"),
        7 => env!("RMCP_FAKE_HIP_DIR_7"),
        _ => panic!("no fake runtime .so.{major}"),
    })
}

/// examples/hip_probe.c as an executable linked to `libamdhip64.so.<major>` (5, 6 or 7).
pub fn probe(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_HIP_PROBE_5"),
        6 => env!("RMCP_HIP_PROBE_6"),
        7 => env!("RMCP_HIP_PROBE_7"),
        _ => panic!("no probe for .so.{major}"),
    })
}

/// examples/hip_probe.c as `libframework<major>.so` exporting `probe_main` (5, 6 or 7).
pub fn framework(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_FRAMEWORK_5"),
        6 => env!("RMCP_FRAMEWORK_6"),
        7 => env!("RMCP_FRAMEWORK_7"),
        _ => panic!("no framework for .so.{major}"),
    })
}

/// tests/c/dlopen_client.c: dlopens a library RTLD_LOCAL and calls its `probe_main`.
pub fn dlopen_client() -> PathBuf {
    PathBuf::from(env!("RMCP_DLOPEN_CLIENT"))
}

/// tests/c/hotpath.c: the hot-path checker (seccomp trap, counting malloc), linked to .so.6.
pub fn hotpath_client() -> PathBuf {
    PathBuf::from(env!("RMCP_HOTPATH"))
}

/// tests/c/dlsym_client.c: looks HIP up by name (dlsym, hipGetProcAddress).
pub fn dlsym_client() -> PathBuf {
    PathBuf::from(env!("RMCP_DLSYM_CLIENT"))
}

/// tests/c/dlsym_table.c: issue 33's table of lookups (its library, libdlsym_table_lib.so,
/// beside it).
pub fn dlsym_table() -> PathBuf {
    PathBuf::from(env!("RMCP_DLSYM_TABLE"))
}

/// tests/c/dlsym_scope.c as `libscope<major>.so` (5 or 6), linked to the runtime and a dep.
pub fn scope_lib(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_SCOPE_LIB_5"),
        6 => env!("RMCP_SCOPE_LIB_6"),
        _ => panic!("no scope library for .so.{major}"),
    })
}

/// tests/c/stress.c: the multi-threaded stress client, linked to .so.6.
pub fn stress_client() -> PathBuf {
    PathBuf::from(env!("RMCP_STRESS_CLIENT"))
}

/// tests/c/forker.c: forks while another thread is inside a hook, linked to .so.6.
pub fn fork_client() -> PathBuf {
    PathBuf::from(env!("RMCP_FORK_CLIENT"))
}

/// tests/c/nomem.c: a malloc family that fails from a chosen call on, linked to .so.6.
pub fn nomem_client() -> PathBuf {
    PathBuf::from(env!("RMCP_NOMEM_CLIENT"))
}

/// tests/c/fdclient.c: closes and opens its own descriptors around a HIP call, linked to .so.6.
pub fn fd_client() -> PathBuf {
    PathBuf::from(env!("RMCP_FD_CLIENT"))
}

/// benches/bench_main.c + bench_client.c: the bench executable examples/bench.rs runs.
pub fn bench_client() -> PathBuf {
    PathBuf::from(env!("RMCP_BENCH_CLIENT"))
}

/// tests/c/tracer.c: `libtracer.so`, a HIP tracer to preload (writes to $TRACER_LOG).
pub fn tracer() -> PathBuf {
    PathBuf::from(env!("RMCP_TRACER"))
}

/// tests/c/dlsym_wrapper.c: `libdlsymwrap.so`, a dlsym wrapper to preload (writes to
/// $WRAPPER_LOG).
pub fn dlsym_wrapper() -> PathBuf {
    PathBuf::from(env!("RMCP_DLSYM_WRAPPER"))
}

/// tests/c/audit.c: `libaudit.so`, an LD_AUDIT module reporting who binds `cos`.
pub fn audit_module() -> PathBuf {
    PathBuf::from(env!("RMCP_AUDIT"))
}

/// tests/c/presence.c: asks whether HIP is there without using it.
pub fn presence() -> PathBuf {
    PathBuf::from(env!("RMCP_PRESENCE"))
}

/// tests/c/ctor_deadlock.c: thread A's first hooked call against a dlopen whose library
/// constructor allocates (give it `ctor_lib()`); linked to .so.6.
pub fn ctor_deadlock() -> PathBuf {
    PathBuf::from(env!("RMCP_CTOR_DEADLOCK"))
}

/// tests/c/ctor_lib.c: `libctor.so`, whose constructor calls hipHostMalloc.
pub fn ctor_lib() -> PathBuf {
    PathBuf::from(env!("RMCP_CTOR_LIB"))
}

/// tests/c/nw_plugin.c as `libnwplugin.so` linked to the fake `.so.<major>` (5 or 6), no
/// soname: nw_host, nw_device, nw_count.
pub fn nw_plugin(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_NW_PLUGIN_5"),
        6 => env!("RMCP_NW_PLUGIN_6"),
        _ => panic!("no nw_plugin for .so.{major}"),
    })
}

/// tests/c/nw_bare.c as `libnwbare.so`: a library with no constructor or destructor, not
/// even the C runtime's, that never_worse.c's `deepfork` loads and unloads in a loop.
pub fn nw_bare() -> PathBuf {
    PathBuf::from(env!("RMCP_NW_BARE"))
}

/// tests/c/never_worse.c: the loading shapes of issue 22, one subcommand each.
pub fn never_worse_client() -> PathBuf {
    PathBuf::from(env!("RMCP_NW_CLIENT"))
}

/// tests/c/nw_sites.c: many call sites of hipMalloc in one object, with a counting malloc;
/// linked to .so.6.
pub fn nw_sites() -> PathBuf {
    PathBuf::from(env!("RMCP_NW_SITES"))
}

/// tests/c/asan_app.c built with `-fsanitize=address` and linked to .so.6 (DT_NEEDED
/// ASan's shared runtime), or None when the C compiler could not build it: the test then
/// skips, saying why. With RMCP_REQUIRE_REAL_HIP=1 or CI set, that fails the test instead.
pub fn asan_app() -> Option<PathBuf> {
    let path = env!("RMCP_ASAN_APP");
    if !path.is_empty() {
        return Some(PathBuf::from(path));
    }
    let why = env!("RMCP_ASAN_APP_WHY");
    crate::missing(&format!(
        "tests/c/asan_app.c could not be built with -fsanitize=address (install gcc's \
         AddressSanitizer runtime, Debian: libasan8 for gcc 12): {why}"
    ));
    None
}

/// tests/emulated-gpu/emugpu.c and the files beside it, the emulated GPU, as rmcp-testkit's
/// build script built it.
/// None (a skip) when it could not be built; with RMCP_REQUIRE_REAL_HIP=1 or in CI that is
/// a failure, saying why.
pub fn emugpu_lib() -> Option<PathBuf> {
    let lib = env!("RMCP_EMUGPU_LIB");
    if lib.is_empty() {
        let why = env!("RMCP_EMUGPU_LIB_WHY");
        crate::missing(&format!(
            "the emulated GPU, libemugpu.so, was not built (apt-get install libdrm-dev): {why}"
        ));
        return None;
    }
    Some(PathBuf::from(lib))
}

/// What the emulated GPU's fault tests start from: the real 5.2.3 runtime, the emulated GPU
/// and the gfx1010 kernel object (`crate::kernel_object`, built into `dir`), as (the
/// emulator, the code object). None when any is missing: a skip (a failure where
/// prerequisites are required), the first missing one named.
pub fn emugpu_with_kernel(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    crate::real_runtime()?;
    let lib = emugpu_lib()?;
    let co = crate::kernel_object(dir, "gfx1010")?;
    Some((lib, co))
}

/// What the emulated GPU's tests that build their own HIP program start from: the real
/// 5.2.3 runtime, the emulated GPU and hipcc, as (the emulator, hipcc). None when any is
/// missing: a skip (a failure where prerequisites are required), the first missing one named.
pub fn emugpu_with_hipcc() -> Option<(PathBuf, PathBuf)> {
    crate::real_runtime()?;
    let lib = emugpu_lib()?;
    let hipcc = crate::hipcc()?;
    Some((lib, hipcc))
}

/// tests/emulated-gpu/emu_probe.c linked to `libamdhip64.so.<major>` (5, 6 or 7).
pub fn emu_probe(major: u8) -> PathBuf {
    PathBuf::from(match major {
        5 => env!("RMCP_EMU_PROBE_5"),
        6 => env!("RMCP_EMU_PROBE_6"),
        7 => env!("RMCP_EMU_PROBE_7"),
        _ => panic!("no emu_probe for .so.{major}"),
    })
}

/// tests/emulated-gpu/module_load.c linked to `libamdhip64.so.<major>` (5 or 7), or to no
/// runtime (0: its `proc` mode then opens the only copy, `RTLD_LOCAL`): loads a code object
/// from memory by name or through hipGetProcAddress (tests/module_load.rs).
pub fn module_load_program(major: u8) -> PathBuf {
    PathBuf::from(match major {
        0 => env!("RMCP_MODULE_LOAD_DL"),
        5 => env!("RMCP_MODULE_LOAD_5"),
        7 => env!("RMCP_MODULE_LOAD_7"),
        _ => panic!("no module_load for .so.{major}"),
    })
}

/// tests/emulated-gpu/miopen_conv.c: one convolution through real MIOpen (dlopen'd, linked to
/// no runtime), optionally hung on the emulated GPU (tests/miopen_hang.rs).
pub fn miopen_conv() -> PathBuf {
    PathBuf::from(env!("RMCP_MIOPEN_CONV"))
}

/// `scripts/emulated-gpu --log LOG [--fault SPEC] -- emu_probe5 STEPS` in `dir` (where a core
/// file would go), with `lib` as the emulator and none of the caller's LD_PRELOAD,
/// HSA_OVERRIDE_GFX_VERSION or EMUGPU_FAULT: the fault tests' run, to which each adds its own
/// environment.
pub fn emugpu_probe_command(
    lib: &Path,
    dir: &Path,
    log: &Path,
    fault: Option<&str>,
    steps: &[&str],
) -> Command {
    let mut cmd = Command::new(crate::repo().join("scripts/emulated-gpu"));
    cmd.arg("--log").arg(log);
    if let Some(f) = fault {
        cmd.args(["--fault", f]);
    }
    cmd.arg("--")
        .arg(emu_probe(5))
        .args(steps)
        .current_dir(dir)
        .env("EMUGPU_LIB", lib)
        .env_remove("LD_PRELOAD")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .env_remove("EMUGPU_FAULT");
    cmd
}
