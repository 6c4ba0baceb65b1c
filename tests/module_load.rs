//! The load-time fix of broken buffer descriptors (issue 34, item 2) on the emulated GPU
//! (scripts/emulated-gpu), read back from below the runtime: the emulator appends every
//! buffer the GPU can see to EMUGPU_CODE_DUMP (tests/emulated-gpu/memory.c, "Code
//! read-back"), and the test looks there for the kernel's machine code (its `.text`) as the
//! caller's image has it and as the fix makes it. The program is
//! tests/emulated-gpu/module_load.c.
//!
//! - ROCm 5.2.3 (the host's): a hipcc-built gfx1010 kernel with Triton's descriptor word 3
//!   (`0x00027000`; 5.2.3 cannot read Triton's code object v5, see the last test) loaded by
//!   name with hipModuleLoadData and hipModuleLoadDataEx: the GPU gets the original without
//!   rmcp and the fixed code with it; `warn`, `off` and an exempt caller load the original;
//!   on an emulated RX 6800 XT (gfx1030, made to run gfx1010 code with
//!   HSA_OVERRIDE_GFX_VERSION=10.1.0) nothing changes; on a machine with both, the calling
//!   thread's current device decides; a kernel with the RDNA layout
//!   (`0x31014000`) is left alone, and so are bytes that are no code object and a truncated
//!   image (the runtime's answer either way);
//!   hipModuleLoad is never changed, and its broken file named. The caller's buffer is
//!   byte-identical after every call.
//! - ROCm 7.2.4 (the compat cache's experimental root, RMCP_COMPAT_CACHE): Triton 3.5.1's own
//!   gfx1010 vector-add object, loaded as Triton's driver loads it (dlopen RTLD_LOCAL,
//!   hipGetProcAddress, hipModuleLoadDataEx), by a program linked to the runtime and by one
//!   that only dlopens it: the same, and Triton's gfx1030 object on the gfx1030 is left
//!   alone.
//! - Real Triton 3.5.1 in that root (scripts/triton-root), buffer ops on: its kernel reaches
//!   the GPU fixed under rmcp, as compiled without it.
//! - 5.2.3 with Triton's object: the runtime refuses it with and without rmcp, and rmcp's
//!   answer is the runtime's (the fixed copy refused, the original tried again).
//! - Patched on Triton's vector add: 1 literal (an `s_mov_b32` of `0x27000`), feeding 24
//!   buffer instructions.
//!
//! - Issue 40: under HSA_OVERRIDE_GFX_VERSION=10.3.0 on the emulated gfx1010, a gfx1030
//!   module with `s_inst_prefetch` reaches the GPU with `s_nop 0` there and every other byte
//!   as it was: on 5.2.3 by name (`warn`, `off`, an RDNA2 card and hipModuleLoad: as it
//!   was), on 6.4.3 and 7.2.4 through hipGetProcAddress; and so does the fat binary a
//!   hipcc-built gfx1030 program registers at start-up, on all three runtimes.
//!
//! Skipped without the real runtime, the emulator, hipcc, Triton (scripts/triton-venv) or
//! the 7.2.4 root (which also needs root, for chroot); a failure under
//! RMCP_REQUIRE_REAL_HIP=1.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rmcp_core::buffer_descriptors::{fixed_word3, scan_image};
use rmcp_testkit::*;

/// One object's machine code, as the caller's image has it and as the fix makes it.
struct Code {
    original: Vec<u8>,
    fixed: Vec<u8>,
}

/// The `.text` of the one ELF in `image` (an ELF or an offload bundle).
fn text_of(image: &[u8]) -> Vec<u8> {
    let scan = scan_image(image).expect("a code object");
    let o = scan
        .objects
        .iter()
        .find(|o| o.target.ends_with("gfx1010") || o.target.ends_with("gfx1030"))
        .expect("a gfx10 object");
    let elf = &image[o.at..o.at + o.len];
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let sh = |i: usize| shoff + i * shentsize;
    let names = u64_at(sh(shstrndx) + 0x18);
    (0..shnum)
        .find_map(|i| {
            let name = names + u32_at(sh(i));
            let end = name + elf[name..].iter().position(|b| *b == 0)?;
            (&elf[name..end] == b".text").then(|| {
                let (off, size) = (u64_at(sh(i) + 0x18), u64_at(sh(i) + 0x20));
                elf[off..off + size].to_vec()
            })
        })
        .expect("a .text section")
}

/// The code of `image`, and the same with the one broken literal fixed (the test's own
/// rewrite, not the shim's: word 3 at the position the scan names).
fn code(image: &[u8]) -> Code {
    let original = text_of(image);
    let scan = scan_image(image).unwrap();
    let mut fixed_image = image.to_vec();
    for (_, f) in scan.findings() {
        let w = u32::from_le_bytes(image[f.literal_at..f.literal_at + 4].try_into().unwrap());
        fixed_image[f.literal_at..f.literal_at + 4].copy_from_slice(&fixed_word3(w).to_le_bytes());
    }
    Code {
        fixed: text_of(&fixed_image),
        original,
    }
}

/// What the GPU was given: the original code, the fixed code, or both / neither.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Original,
    Fixed,
    Both,
    Neither,
}

fn seen(dump: &[u8], code: &Code) -> Seen {
    let has = |needle: &[u8]| dump.windows(needle.len()).any(|w| w == needle);
    match (has(&code.original), has(&code.fixed)) {
        (true, false) => Seen::Original,
        (false, true) => Seen::Fixed,
        (true, true) => Seen::Both,
        (false, false) => Seen::Neither,
    }
}

/// An emulated RX 6800 XT (gfx1030), made in `dir` from the rdna2 fixture (gfx1031, which
/// the emulator runs) with node 1's ISA and device id changed; tests/fixtures' own
/// `rdna2-gfx1030` is a topology only (no caches, memory banks or render node), which the
/// emulator cannot run. Returns its directory.
fn gfx1030_fixture(dir: &Path) -> PathBuf {
    let to = dir.join("gfx1030");
    let st = Command::new("cp")
        .arg("-r")
        .arg(repo().join("tests/fixtures/rdna2"))
        .arg(&to)
        .status()
        .unwrap();
    assert!(st.success());
    let props = to.join("nodes/1/properties");
    let text: String = std::fs::read_to_string(&props)
        .unwrap()
        .lines()
        .map(|l| match l.split_once(' ') {
            Some(("gfx_target_version", _)) => "gfx_target_version 100300".to_string(),
            // 0x73bf, Navi 21 (RX 6800 XT).
            Some(("device_id", _)) => "device_id 29631".to_string(),
            _ => l.to_string(),
        })
        .map(|l| l + "\n")
        .collect();
    assert!(text.contains("gfx_target_version 100300\n"), "{text}");
    std::fs::write(&props, text).unwrap();
    to
}

/// A machine with an RX 5700 XT (gfx1010, node 1, 0000:03:00.0, render node 128) and an RX
/// 6800 XT (gfx1030, node 2, 0000:0a:00.0, render node 129), made in `dir` from the rdna1
/// fixture and `gfx1030_fixture` (tests/fixtures' `mixed` is a topology only, which the
/// emulator cannot run). Returns its directory.
fn mixed_fixture(dir: &Path) -> PathBuf {
    let gfx1030 = gfx1030_fixture(dir);
    let to = dir.join("mixed");
    let cp = |from: &Path, to: &Path| {
        let st = Command::new("cp")
            .arg("-r")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(st.success(), "cp {}", from.display());
    };
    cp(&repo().join("tests/fixtures/rdna1"), &to);
    cp(&gfx1030.join("nodes/1"), &to.join("nodes/2"));
    let edit = |file: &Path, f: &dyn Fn(&str) -> String| {
        let text = std::fs::read_to_string(file).unwrap();
        std::fs::write(file, text.lines().map(|l| f(l) + "\n").collect::<String>()).unwrap();
    };
    std::fs::write(to.join("nodes/2/gpu_id"), "6222\n").unwrap();
    edit(
        &to.join("nodes/2/properties"),
        &|l| match l.split_once(' ') {
            Some(("location_id", _)) => "location_id 2560".into(),
            Some(("drm_render_minor", _)) => "drm_render_minor 129".into(),
            _ => l.into(),
        },
    );
    edit(
        &to.join("nodes/2/io_links/0/properties"),
        &|l| match l.split_once(' ') {
            Some(("node_from", _)) => "node_from 2".into(),
            _ => l.into(),
        },
    );
    let (d128, d129) = (to.join("drm/renderD128"), to.join("drm/renderD129"));
    cp(&d128, &d129);
    std::fs::rename(
        d129.join("device/drm/renderD128"),
        d129.join("device/drm/renderD129"),
    )
    .unwrap();
    for dev in [d129.join("dev"), d129.join("device/drm/renderD129/dev")] {
        std::fs::write(dev, "226:129\n").unwrap();
    }
    std::fs::write(d129.join("device/device"), "0x73bf\n").unwrap();
    edit(&d129.join("device/uevent"), &|l| {
        l.replace("0000:03:00.0", "0000:0a:00.0")
            .replace("731F", "73BF")
    });
    to
}

/// One run's results.
struct Ran {
    stdout: String,
    stderr: String,
    dump: Vec<u8>,
    stats: serde_json::Value,
}

impl Ran {
    /// The report's `buffer_descriptors.FIELD`.
    fn count(&self, field: &str) -> u64 {
        self.stats["buffer_descriptors"][field]
            .as_u64()
            .unwrap_or_else(|| panic!("no buffer_descriptors.{field} in {}", self.stats))
    }
    /// The shim's lines about code objects.
    fn said(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("rmcp[") && l.contains("code object"))
            .collect()
    }
}

/// A run on ROCm 5.2.3 on the emulated GPU: `module_load5 MODE FILE KERNEL` on `fixture`,
/// with the shim preloaded when `shim`, and `env`.
fn run5(
    lib: &Path,
    dir: &Path,
    fixture: &str,
    shim: bool,
    env: &[(&str, &str)],
    args: &[&str],
) -> Ran {
    run_on(lib, dir, fixture, shim, env, &module_load_program(5), args)
}

/// `PROGRAM ARGS` on ROCm 5.2.3 on the emulated GPU (`run5`).
fn run_on(
    lib: &Path,
    dir: &Path,
    fixture: &str,
    shim: bool,
    env: &[(&str, &str)],
    program: &Path,
    args: &[&str],
) -> Ran {
    let dump = dir.join("dump.bin");
    let stats = dir.join("stats.json");
    let _ = std::fs::remove_file(&dump);
    let _ = std::fs::remove_file(&stats);
    let mut cmd = Command::new(repo().join("scripts/emulated-gpu"));
    cmd.args(["--fixture", fixture, "--log"])
        .arg(dir.join("emu.jsonl"))
        .arg("--")
        .arg(program)
        .args(args)
        .env("EMUGPU_LIB", lib)
        .env("EMUGPU_CODE_DUMP", &dump)
        .env_remove("LD_PRELOAD")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .env_remove("EMUGPU_FAULT");
    for (k, _) in std::env::vars() {
        if k.starts_with("RMCP_") {
            cmd.env_remove(k);
        }
    }
    if shim {
        cmd.env("LD_PRELOAD", shim_path())
            .env("RMCP_STATS_FILE", &stats);
    }
    cmd.envs(env.iter().copied());
    let out = output_within(&mut cmd, Duration::from_secs(120)).expect("a run on the emulated GPU");
    Ran {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        dump: std::fs::read(&dump).unwrap_or_default(),
        stats: std::fs::read(&stats)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null),
    }
}

fn shim_path() -> PathBuf {
    rmcp_testkit::shim()
}

/// The line a successful load prints, with the caller's buffer unchanged.
const LOADED: &str = "load rc=0 identical=1\nfunction rc=0\n";

/// A [`run5`] with the shim that loads, and whose GPU gets `code` as the caller's image has
/// it (`what` in the messages).
#[track_caller]
fn original_under_rmcp(
    lib: &Path,
    dir: &Path,
    fixture: &str,
    env: &[(&str, &str)],
    args: &[&str],
    code: &Code,
    what: &str,
) -> Ran {
    let ran = run5(lib, dir, fixture, true, env, args);
    assert_eq!(ran.stdout, LOADED, "{what}: {}", ran.stderr);
    assert_eq!(seen(&ran.dump, code), Seen::Original, "{what}");
    ran
}

#[test]
fn on_5_2_3_the_gpu_gets_the_fixed_code_only_under_rmcp_and_only_on_rdna1() {
    let (Some(_), Some(lib)) = (real_runtime(), emugpu_lib()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(broken) = buffer_kernel_object(d, "0x00027000") else {
        return;
    };
    let Some(clean) = buffer_kernel_object(d, "0x31014000") else {
        return;
    };
    let broken_code = code(&std::fs::read(&broken).unwrap());
    let gfx1030 = gfx1030_fixture(d);
    assert_ne!(broken_code.original, broken_code.fixed);
    let file = broken.to_str().unwrap();

    for mode in ["data", "dataex"] {
        let args = [mode, file, "copy"];
        let none = run5(&lib, d, "rdna1", false, &[], &args);
        assert_eq!(none.stdout, LOADED, "{mode} without rmcp: {}", none.stderr);
        assert_eq!(seen(&none.dump, &broken_code), Seen::Original, "{mode}");

        let fixed = run5(&lib, d, "rdna1", true, &[], &args);
        assert_eq!(fixed.stdout, LOADED, "{mode} with rmcp: {}", fixed.stderr);
        assert_eq!(seen(&fixed.dump, &broken_code), Seen::Fixed, "{mode}");
        assert_eq!(fixed.count("scanned"), 1);
        assert_eq!(fixed.count("fixed"), 1);
        assert_eq!(fixed.count("instructions_fixed"), 1);
        assert_eq!(fixed.count("fallbacks"), 0);
        let said = fixed.said();
        assert_eq!(said.len(), 1, "{}", fixed.stderr);
        assert!(
            said[0].contains("private copy") && said[0].contains("module_load5"),
            "{said:?}"
        );

        let warned = original_under_rmcp(
            &lib,
            d,
            "rdna1",
            &[("RMCP_BUFFER_DESCRIPTORS", "warn")],
            &args,
            &broken_code,
            &format!("{mode} warn"),
        );
        assert_eq!((warned.count("fixed"), warned.count("warned")), (0, 1));
        let said = warned.said();
        assert_eq!(said.len(), 1, "{}", warned.stderr);
        assert!(said[0].contains("AMDGCN_USE_BUFFER_OPS=0"), "{said:?}");

        let off = original_under_rmcp(
            &lib,
            d,
            "rdna1",
            &[("RMCP_BUFFER_DESCRIPTORS", "off")],
            &args,
            &broken_code,
            &format!("{mode} off"),
        );
        assert_eq!(off.count("scanned"), 0, "off reads nothing");
        assert!(off.said().is_empty(), "{}", off.stderr);

        // An exempt caller (RMCP_EXEMPT): left alone, its images too.
        let exempt = original_under_rmcp(
            &lib,
            d,
            "rdna1",
            &[("RMCP_EXEMPT", "module_load")],
            &args,
            &broken_code,
            &format!("{mode} exempt"),
        );
        assert_eq!(exempt.count("scanned"), 0);

        // An RDNA2 card (gfx1030) running gfx1010 code: never changed, nothing said.
        let rdna2 = [("HSA_OVERRIDE_GFX_VERSION", "10.1.0")];
        let other = original_under_rmcp(
            &lib,
            d,
            gfx1030.to_str().unwrap(),
            &rdna2,
            &args,
            &broken_code,
            &format!("{mode} rdna2"),
        );
        assert_eq!((other.count("broken"), other.count("fixed")), (1, 0));
        assert_eq!(other.count("warned"), 0);
        assert!(other.said().is_empty(), "{}", other.stderr);
    }

    // The RDNA layout: scanned, not broken, loaded as it is.
    let clean_code = text_of(&std::fs::read(&clean).unwrap());
    let c = run5(
        &lib,
        d,
        "rdna1",
        true,
        &[],
        &["data", clean.to_str().unwrap(), "copy"],
    );
    assert_eq!(c.stdout, LOADED, "{}", c.stderr);
    assert!(
        c.dump.windows(clean_code.len()).any(|w| w == clean_code),
        "the RDNA-layout code reached the GPU as it was"
    );
    assert_eq!((c.count("scanned"), c.count("broken")), (1, 0));
    assert!(c.said().is_empty(), "{}", c.stderr);

    // A machine with both: the device the module loads on decides (the calling thread's
    // current device, asked of the runtime before the call). Both run gfx1010 code here.
    let mixed = mixed_fixture(d);
    let mixed = mixed.to_str().unwrap();
    let override_1010 = ("HSA_OVERRIDE_GFX_VERSION", "10.1.0");
    for (device, want, fixed) in [("0", Seen::Fixed, 1), ("1", Seen::Original, 0)] {
        let env = [("RMCP_TEST_DEVICE", device), override_1010];
        let m = run5(&lib, d, mixed, true, &env, &["data", file, "copy"]);
        assert_eq!(m.stdout, LOADED, "device {device}: {}", m.stderr);
        assert_eq!(seen(&m.dump, &broken_code), want, "device {device}");
        assert_eq!(m.count("fixed"), fixed, "device {device}");
        assert_eq!(m.stats["devices"].as_array().map(Vec::len), Some(2));
    }

    // Not a code object, and the broken one cut in half: read as far as their own headers
    // allow, not scanned, forwarded untouched; the runtime's answer either way.
    let bytes = std::fs::read(&broken).unwrap();
    let junk: Vec<u8> = (0..3000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for (name, content) in [
        ("junk.bin", junk),
        ("half.co", bytes[..bytes.len() / 2].to_vec()),
    ] {
        let path = d.join(name);
        std::fs::write(&path, content).unwrap();
        let args = ["data", path.to_str().unwrap()];
        let none = run5(&lib, d, "rdna1", false, &[], &args);
        let with = run5(&lib, d, "rdna1", true, &[], &args);
        assert!(
            none.stdout.starts_with("load rc="),
            "{name}: {}",
            none.stderr
        );
        assert_eq!(with.stdout, none.stdout, "{name}: {}", with.stderr);
        assert_eq!(
            (with.count("unreadable"), with.count("fixed")),
            (1, 0),
            "{name}"
        );
        assert!(with.said().is_empty(), "{name}: {}", with.stderr);
    }

    // hipModuleLoad: the call is never changed; the broken file is named.
    let f = run5(&lib, d, "rdna1", true, &[], &["file", file, "copy"]);
    assert_eq!(f.stdout, LOADED, "{}", f.stderr);
    assert_eq!(seen(&f.dump, &broken_code), Seen::Original);
    assert_eq!((f.count("fixed"), f.count("warned")), (0, 1));
    let said = f.said();
    assert_eq!(said.len(), 1, "{}", f.stderr);
    assert!(
        said[0].contains(file) && said[0].contains("only code objects loaded from memory"),
        "{said:?}"
    );
}

#[test]
fn on_5_2_3_a_refused_fixed_image_is_tried_again_as_it_was() {
    let (Some(_), Some(lib)) = (real_runtime(), emugpu_lib()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    if triton_objects(d).is_none() {
        return;
    }
    // Triton writes code object v5, which 5.2.3's runtime cannot read
    // (hipErrorSharedObjectInitFailed, 303), with or without rmcp.
    let file = d.join("add-gfx1010-bufops1.hsaco");
    let args = ["data", file.to_str().unwrap()];
    let none = run5(&lib, d, "rdna1", false, &[], &args);
    let with = run5(&lib, d, "rdna1", true, &[], &args);
    assert_eq!(none.stdout, "load rc=303 identical=1\n", "{}", none.stderr);
    assert_eq!(with.stdout, none.stdout, "{}", with.stderr);
    assert_eq!((with.count("fixed"), with.count("fallbacks")), (0, 1));
    assert_eq!(with.stats["calls"]["hipModuleLoadData"]["fallbacks"], 1);
}

/// A run's environment in a compat root: the emulator (and the shim when `shim`) preloaded,
/// the code read-back and the stats file in `dir`, named by `tag`.
fn root_env(dir: &RootDir, fixture: &str, shim: bool, tag: &str) -> Vec<(&'static str, String)> {
    let inside = |name: &str| dir.inside.join(name).display().to_string();
    let _ = std::fs::remove_file(dir.host().join(format!("dump-{tag}.bin")));
    let _ = std::fs::remove_file(dir.host().join(format!("stats-{tag}.json")));
    let mut preload = inside("libemugpu.so");
    let mut env = vec![
        ("EMUGPU_FIXTURE", inside(fixture)),
        ("EMUGPU_LOG", inside(&format!("emu-{tag}.jsonl"))),
        ("EMUGPU_CODE_DUMP", inside(&format!("dump-{tag}.bin"))),
    ];
    if shim {
        preload = format!("{preload}:{}", inside("librmcp_shim.so"));
        env.push(("RMCP_STATS_FILE", inside(&format!("stats-{tag}.json"))));
    }
    env.push(("LD_PRELOAD", preload));
    env
}

/// What a run in a root left: its output, the read-back, the stats.
fn root_ran(dir: &RootDir, tag: &str, cmd: &mut Command) -> Ran {
    let out = output_within(cmd, Duration::from_secs(300)).expect("a run in the root");
    let host = dir.host();
    Ran {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        dump: std::fs::read(host.join(format!("dump-{tag}.bin"))).unwrap_or_default(),
        stats: std::fs::read(host.join(format!("stats-{tag}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null),
    }
}

/// A scratch directory in a compat root with the emulator, the shim (its two files), the
/// rdna1 fixture and an emulated gfx1030 (`gfx1030_fixture`).
fn root_dir(root: &Path, lib: &Path, tag: &str) -> RootDir {
    let dir = RootDir::new(root, tag);
    let shim = shim_path();
    dir.copy(lib, "libemugpu.so");
    dir.copy(
        &shim.with_file_name("librmcp_shim_body.so"),
        "librmcp_shim_body.so",
    );
    dir.copy(&shim, "librmcp_shim.so");
    dir.copy(&repo().join("tests/fixtures/rdna1"), "rdna1");
    let made = tempfile::tempdir().unwrap();
    dir.copy(&gfx1030_fixture(made.path()), "gfx1030");
    dir
}

/// The 7.2.4 runs of `module_load7 proc OBJECT add_kernel`, in `dir` (`root_dir`, the
/// objects copied in, and `lib/libamdhip64.so`: Debian's 7.x hipGetProcAddress looks its
/// own library up by that name, and Triton's driver dlopens it; the root has no
/// libamdhip64-dev, which ships the link).
fn run7(dir: &RootDir, fixture: &str, shim: bool, env: &[(&str, &str)], object: &str) -> Ran {
    run_in_root(dir, "module_load7", fixture, shim, env, object)
}

/// `PROGRAM proc OBJECT add_kernel` in the root (`run7`).
fn run_in_root(
    dir: &RootDir,
    program: &str,
    fixture: &str,
    shim: bool,
    env: &[(&str, &str)],
    object: &str,
) -> Ran {
    let inside = |name: &str| dir.inside.join(name).display().to_string();
    let mut vars = root_env(dir, fixture, shim, "proc");
    vars.push(("LD_LIBRARY_PATH", inside("lib")));
    vars.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
    let args = ["proc".to_string(), inside(object), "add_kernel".into()];
    root_ran(
        dir,
        "proc",
        &mut dir.command(&vars, &inside(program), &args),
    )
}

#[test]
fn on_7_2_4_tritons_object_loaded_as_tritons_driver_does_is_fixed_only_on_rdna1() {
    let (Some(lib), Some(root)) = (emugpu_lib(), compat_root("exp")) else {
        return;
    };
    let objects = tempfile::tempdir().unwrap();
    if triton_objects(objects.path()).is_none() {
        return;
    }
    let object = "add-gfx1010-bufops1.hsaco";
    let gfx1030 = "add-gfx1030-bufops1.hsaco";
    let triton = code(&std::fs::read(objects.path().join(object)).unwrap());
    let dir = root_dir(&root, &lib, "module-load");
    dir.copy(&module_load_program(7), "module_load7");
    dir.copy(&module_load_program(0), "module_load_dl");
    for o in [object, gfx1030] {
        dir.copy(&objects.path().join(o), o);
    }
    std::fs::create_dir(dir.host().join("lib")).unwrap();
    std::os::unix::fs::symlink(
        "/usr/lib/x86_64-linux-gnu/libamdhip64.so.7",
        dir.host().join("lib/libamdhip64.so"),
    )
    .unwrap();
    let r = |fixture: &str, shim: bool, env: &[(&str, &str)], object: &str| {
        run7(&dir, fixture, shim, env, object)
    };

    let none = r("rdna1", false, &[], object);
    assert_eq!(none.stdout, LOADED, "without rmcp: {}", none.stderr);
    assert_eq!(seen(&none.dump, &triton), Seen::Original);

    let fixed = r("rdna1", true, &[], object);
    assert_eq!(fixed.stdout, LOADED, "with rmcp: {}", fixed.stderr);
    assert_eq!(seen(&fixed.dump, &triton), Seen::Fixed);
    assert_eq!(fixed.count("fixed"), 1);
    assert_eq!(fixed.count("instructions_fixed"), 1);
    assert_eq!(fixed.stats["calls"]["hipModuleLoadDataEx"]["rewritten"], 1);
    assert_eq!(fixed.stats["calls"]["hipGetProcAddress"]["calls"], 2);
    let said = fixed.said();
    assert_eq!(said.len(), 1, "{}", fixed.stderr);
    assert!(
        said[0].contains("hipModuleLoadDataEx") && said[0].contains("24 buffer instructions"),
        "{said:?}"
    );

    // The runtime opened RTLD_LOCAL only (no other copy in the process, as from Python's
    // ctypes): the lookups hand out the copy's own entries, which fix the load too.
    let local = run_in_root(&dir, "module_load_dl", "rdna1", true, &[], object);
    assert_eq!(local.stdout, LOADED, "RTLD_LOCAL: {}", local.stderr);
    assert_eq!(seen(&local.dump, &triton), Seen::Fixed);
    assert_eq!(local.count("fixed"), 1);

    for (setting, n) in [("warn", 1), ("off", 0)] {
        let w = r(
            "rdna1",
            true,
            &[("RMCP_BUFFER_DESCRIPTORS", setting)],
            object,
        );
        assert_eq!(w.stdout, LOADED, "{setting}: {}", w.stderr);
        assert_eq!(seen(&w.dump, &triton), Seen::Original, "{setting}");
        assert_eq!((w.count("fixed"), w.count("warned")), (0, n), "{setting}");
        assert_eq!(w.said().len(), n as usize, "{setting}: {}", w.stderr);
    }

    // On an RDNA2 card (gfx1030): the gfx1010 object run there through the override is left
    // as it is, and Triton's gfx1030 object (already in the RDNA layout) too.
    let rdna2 = [("HSA_OVERRIDE_GFX_VERSION", "10.1.0")];
    let o = r("gfx1030", true, &rdna2, object);
    assert_eq!(o.stdout, LOADED, "rdna2: {}", o.stderr);
    assert_eq!(seen(&o.dump, &triton), Seen::Original);
    assert_eq!(
        (o.count("broken"), o.count("fixed"), o.count("warned")),
        (1, 0, 0)
    );
    assert!(o.said().is_empty(), "{}", o.stderr);
    let own = text_of(&std::fs::read(objects.path().join(gfx1030)).unwrap());
    let g = r("gfx1030", true, &[], gfx1030);
    assert_eq!(g.stdout, LOADED, "gfx1030: {}", g.stderr);
    assert_eq!((g.count("scanned"), g.count("broken")), (1, 0));
    assert!(
        g.dump.windows(own.len()).any(|w| w == own),
        "the gfx1030 code reached the GPU as it was"
    );
}

/// Real Triton 3.5.1 (scripts/triton-root) in the 7.2.4 root on the emulated RX 5700 XT,
/// with buffer ops on (AMDGCN_USE_BUFFER_OPS=1; 3.5.1's default is off): tests/triton/
/// vector_add.py compiles, loads (hipGetProcAddress, hipModuleLoadDataEx) and launches its
/// vector add. Without rmcp the GPU gets Triton's code as compiled, with rmcp the fixed
/// code; Triton's own code object (its bytes, written out by the program) and every line
/// the program prints are the same both ways.
#[test]
fn real_triton_on_7_2_4_gets_its_kernel_fixed_under_rmcp() {
    let (Some(lib), Some(root)) = (emugpu_lib(), triton_root()) else {
        return;
    };
    let dir = root_dir(&root, &lib, "module-load-triton");
    let triton = dir.copy(&repo().join("tests/triton"), "triton");
    let inside = |name: &str| dir.inside.join(name).display().to_string();
    let run = |shim: bool, tag: &str| -> (Ran, Vec<u8>) {
        let mut env = root_env(&dir, "rdna1", shim, tag);
        env.extend([
            (
                "PATH",
                "/opt/rmcp-triton/venv/bin:/usr/bin:/bin".to_string(),
            ),
            ("PYTHONPATH", triton.display().to_string()),
            ("LD_LIBRARY_PATH", "/opt/rmcp-triton/lib".to_string()),
            (
                "TRITON_LIBHIP_PATH",
                "/opt/rmcp-triton/lib/libamdhip64.so".to_string(),
            ),
            ("TRITON_CACHE_DIR", inside(&format!("cache-{tag}"))),
            ("AMDGCN_USE_BUFFER_OPS", "1".to_string()),
            ("RMCP_TEST_HSACO", inside(&format!("{tag}.hsaco"))),
        ]);
        let script = triton.join("vector_add.py").display().to_string();
        let ran = root_ran(&dir, tag, &mut dir.command(&env, "python3", &[script]));
        let hsaco = std::fs::read(dir.host().join(format!("{tag}.hsaco"))).unwrap_or_default();
        (ran, hsaco)
    };
    let (none, none_hsaco) = run(false, "none");
    let (with, with_hsaco) = run(true, "rmcp");
    for (what, ran) in [("without rmcp", &none), ("with rmcp", &with)] {
        for line in [
            "compiled for: gfx1010",
            "module loaded: True",
            "function found: True",
            "launched: 4 blocks of 256",
        ] {
            assert!(
                ran.stdout.lines().any(|l| l == line),
                "{what}: no {line:?} in\n{}\n{}",
                ran.stdout,
                ran.stderr
            );
        }
    }
    assert_eq!(with.stdout, none.stdout, "the program sees the same");
    assert_eq!(with_hsaco, none_hsaco, "Triton's code object is Triton's");
    let kernel = code(&none_hsaco);
    let scan = scan_image(&none_hsaco).unwrap();
    assert_eq!(scan.literals(), 1, "Triton's buffer-ops kernel: {scan:?}");
    assert_eq!(seen(&none.dump, &kernel), Seen::Original);
    assert_eq!(seen(&with.dump, &kernel), Seen::Fixed);
    assert_eq!(
        (with.count("fixed"), with.count("instructions_fixed")),
        (1, 1)
    );
    assert_eq!(with.stats["calls"]["hipModuleLoadDataEx"]["rewritten"], 1);
    let said = with.said();
    assert_eq!(said.len(), 1, "{}", with.stderr);
    assert!(said[0].contains("hipModuleLoadDataEx"), "{said:?}");
}

/// The `.text` of `image` with every `s_inst_prefetch` word (SOPP op 0x20, 4-byte aligned)
/// as `s_nop 0`: the test's own rewrite, not the shim's.
fn prefetch_fixed(text: &[u8]) -> Vec<u8> {
    let mut out = text.to_vec();
    for w in out.chunks_exact_mut(4) {
        if u32::from_le_bytes([w[0], w[1], w[2], w[3]]) >> 16 == 0xbfa0 {
            w.copy_from_slice(&0xbf80_0000u32.to_le_bytes());
        }
    }
    out
}

/// Issue 40 item 1: under HSA_OVERRIDE_GFX_VERSION=10.3.0 on the emulated RX 5700 XT
/// (gfx1010), a gfx1030 module holding `s_inst_prefetch` loaded from memory reaches the GPU
/// with `s_nop 0` in that word and every other byte as it was; `warn` and `off` load it as
/// it is; an RDNA2 card (the gfx1031 fixture) under the same override, and hipModuleLoad,
/// get it unchanged (hipModuleLoad's file named). Each said once, counted in the report's
/// `override_fixes`.
#[test]
fn on_5_2_3_under_the_override_the_prefetch_becomes_s_nop_only_on_rdna1() {
    let (Some(_), Some(lib)) = (real_runtime(), emugpu_lib()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(co) = kernel_object_of(
        d,
        "gfx1030",
        "extern \"C\" __global__ void copy(int *p) {\n\
         \x20 asm volatile(\"s_inst_prefetch 0x1\");\n\
         \x20 p[threadIdx.x] = 1;\n}\n",
    ) else {
        return;
    };
    let image = std::fs::read(&co).unwrap();
    let original = text_of(&image);
    let fixed = prefetch_fixed(&original);
    assert_ne!(original, fixed, "the kernel holds s_inst_prefetch");
    let code = Code {
        original,
        fixed: fixed.clone(),
    };
    let file = co.to_str().unwrap();
    let over = ("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
    let said = |r: &Ran| -> Vec<String> {
        r.stderr
            .lines()
            .filter(|l| l.starts_with("rmcp[") && l.contains("gfx103x code"))
            .map(str::to_string)
            .collect()
    };
    let count = |r: &Ran, f: &str| r.stats["override_fixes"][f].as_u64().unwrap_or(u64::MAX);
    for mode in ["data", "dataex"] {
        let args = [mode, file, "copy"];
        let none = run5(&lib, d, "rdna1", false, &[over], &args);
        assert_eq!(none.stdout, LOADED, "{mode} without rmcp: {}", none.stderr);
        assert_eq!(seen(&none.dump, &code), Seen::Original, "{mode}");

        let with = run5(&lib, d, "rdna1", true, &[over], &args);
        assert_eq!(with.stdout, LOADED, "{mode} with rmcp: {}", with.stderr);
        assert_eq!(
            seen(&with.dump, &code),
            Seen::Fixed,
            "{mode}: {}",
            with.stderr
        );
        assert_eq!(
            (count(&with, "fixed"), count(&with, "instructions_fixed")),
            (1, 1)
        );
        let s = said(&with);
        assert_eq!(s.len(), 1, "{}", with.stderr);
        assert!(
            s[0].contains("1 s_inst_prefetch") && s[0].contains("became s_nop 0"),
            "{s:?}"
        );

        let warn = [over, ("RMCP_OVERRIDE_FIXES", "warn")];
        let w = original_under_rmcp(&lib, d, "rdna1", &warn, &args, &code, "warn");
        assert_eq!((count(&w, "fixed"), count(&w, "warned")), (0, 1));
        let s = said(&w);
        assert!(
            s.len() == 1 && s[0].contains("would become s_nop 0"),
            "{s:?}"
        );

        let off = [over, ("RMCP_OVERRIDE_FIXES", "off")];
        let o = original_under_rmcp(&lib, d, "rdna1", &off, &args, &code, "off");
        assert_eq!((count(&o, "fixed"), count(&o, "warned")), (0, 0));
        assert!(said(&o).is_empty(), "{}", o.stderr);

        // An RDNA2 card under the same override runs its own family's code: unchanged.
        let r = original_under_rmcp(&lib, d, "rdna2", &[over], &args, &code, "rdna2");
        assert_eq!(count(&r, "fixed"), 0);
        assert!(said(&r).is_empty(), "{}", r.stderr);
    }
    // hipModuleLoad: never changed; the file is named, once.
    let f = run5(&lib, d, "rdna1", true, &[over], &["file", file, "copy"]);
    assert_eq!(f.stdout, LOADED, "{}", f.stderr);
    assert_eq!(seen(&f.dump, &code), Seen::Original);
    assert_eq!((count(&f, "fixed"), count(&f, "warned")), (0, 1));
    let s = said(&f);
    assert!(
        s.len() == 1
            && s[0].contains("hipModuleLoad")
            && s[0].contains(file)
            && s[0].contains("1 s_inst_prefetch"),
        "{s:?}"
    );
}

/// Issue 40 item 1 on ROCm 6.4.3 (sid) and 7.2.4 (exp): the same gfx1030 module with
/// `s_inst_prefetch`, loaded through hipGetProcAddress as Triton's driver loads (linked to
/// the runtime on 7.2.4, dlopened RTLD_LOCAL on 6.4.3), under HSA_OVERRIDE_GFX_VERSION=10.3.0:
/// the emulated gfx1010 gets `s_nop 0` in that word and every other byte as it was; an RDNA2
/// card (gfx1031) under the same override gets it unchanged.
#[test]
fn on_6_4_3_and_7_2_4_under_the_override_the_prefetch_becomes_s_nop_through_get_proc_address() {
    let Some(lib) = emugpu_lib() else {
        return;
    };
    let objects = tempfile::tempdir().unwrap();
    let Some(co) = kernel_object_of(
        objects.path(),
        "gfx1030",
        "extern \"C\" __global__ void add_kernel(int *p) {\n\
         \x20 asm volatile(\"s_inst_prefetch 0x1\");\n\
         \x20 p[threadIdx.x] = 1;\n}\n",
    ) else {
        return;
    };
    let original = text_of(&std::fs::read(&co).unwrap());
    let code = Code {
        fixed: prefetch_fixed(&original),
        original,
    };
    assert_ne!(code.original, code.fixed);
    for (root_name, program, so) in [
        ("sid", 0u8, "libamdhip64.so.6"),
        ("exp", 7u8, "libamdhip64.so.7"),
    ] {
        let Some(root) = compat_root(root_name) else {
            return;
        };
        let dir = root_dir(&root, &lib, &format!("override-{root_name}"));
        let name = format!("module_load_{program}");
        dir.copy(&module_load_program(program), &name);
        dir.copy(&co, "k.co");
        dir.copy(&repo().join("tests/fixtures/rdna2"), "rdna2");
        std::fs::create_dir(dir.host().join("lib")).unwrap();
        std::os::unix::fs::symlink(
            format!("/usr/lib/x86_64-linux-gnu/{so}"),
            dir.host().join("lib/libamdhip64.so"),
        )
        .unwrap();
        let over = [("HSA_OVERRIDE_GFX_VERSION", "10.3.0")];
        let r = |fixture: &str, shim: bool| run_in_root(&dir, &name, fixture, shim, &over, "k.co");
        let none = r("rdna1", false);
        assert_eq!(
            none.stdout, LOADED,
            "{root_name} without rmcp: {}",
            none.stderr
        );
        assert_eq!(seen(&none.dump, &code), Seen::Original, "{root_name}");
        let with = r("rdna1", true);
        assert_eq!(
            with.stdout, LOADED,
            "{root_name} with rmcp: {}",
            with.stderr
        );
        assert_eq!(
            seen(&with.dump, &code),
            Seen::Fixed,
            "{root_name}: {}",
            with.stderr
        );
        assert_eq!(with.stats["override_fixes"]["fixed"], 1, "{}", with.stats);
        assert_eq!(with.stats["override_fixes"]["instructions_fixed"], 1);
        let rdna2 = r("rdna2", true);
        assert_eq!(rdna2.stdout, LOADED, "{root_name} rdna2: {}", rdna2.stderr);
        assert_eq!(
            seen(&rdna2.dump, &code),
            Seen::Original,
            "{root_name} rdna2"
        );
        assert_eq!(rdna2.stats["override_fixes"]["fixed"], 0);
    }
}

/// Issue 40 item 3, the round-five shape: one broken module loaded and unloaded 1,000
/// times (each time from a new heap buffer, as an autotuner or a notebook cell run again
/// does) is fixed every time, its copy freed when the module is unloaded: the process's
/// peak memory with rmcp is within a few MiB of its peak without (before, each fixed copy
/// was kept: +149 MiB for 20,000 loads of a 7.7 KB image).
#[test]
fn on_5_2_3_one_module_reloaded_is_kept_once() {
    let (Some(_), Some(lib)) = (real_runtime(), emugpu_lib()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(broken) = buffer_kernel_object(d, "0x00027000") else {
        return;
    };
    let file = broken.to_str().unwrap();
    let hwm = |r: &Ran, n: &str| -> i64 {
        let line = r.stdout.trim();
        assert!(
            line.starts_with(&format!("reload loads={n} failed=0 ")),
            "{line}\n{}",
            r.stderr
        );
        line.rsplit("hwm_kb=").next().unwrap().parse().unwrap()
    };
    let none = run5(&lib, d, "rdna1", false, &[], &["reload", file, "1000"]);
    let with = run5(&lib, d, "rdna1", true, &[], &["reload", file, "1000"]);
    let few = run5(&lib, d, "rdna1", true, &[], &["reload", file, "100"]);
    assert_eq!(with.count("fixed"), 1000, "{}", with.stats);
    let (none, with, few) = (hwm(&none, "1000"), hwm(&with, "1000"), hwm(&few, "100"));
    // The copies do not pile up: 900 more loads under rmcp, the same peak within 1 MiB
    // (a copy kept per load: +10 MiB).
    assert!(
        with - few < 1024,
        "peak with rmcp: {with} KiB after 1000 loads, {few} after 100"
    );
    // Over the run without rmcp: rmcp's own few MiB (the shim's body and its records).
    assert!(
        with - none < 8 * 1024,
        "peak with rmcp {with} KiB, without {none} KiB"
    );
}

/// Issue 40 item 3: one image loaded twice shares one fixed copy; unloading the first
/// module leaves the copy to the second, which still works (hipModuleGetFunction, the GPU
/// holding the fixed code); the same answers as without rmcp.
#[test]
fn on_5_2_3_a_fixed_module_unloaded_while_another_holds_the_same_image_keeps_the_copy() {
    let (Some(_), Some(lib)) = (real_runtime(), emugpu_lib()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(broken) = buffer_kernel_object(d, "0x00027000") else {
        return;
    };
    let broken_code = code(&std::fs::read(&broken).unwrap());
    let args = ["twice", broken.to_str().unwrap(), "copy"];
    let want = "twice load=0 load=0 unload=0 function=0 unload=0\n";
    let none = run5(&lib, d, "rdna1", false, &[], &args);
    assert_eq!(none.stdout, want, "{}", none.stderr);
    let with = run5(&lib, d, "rdna1", true, &[], &args);
    assert_eq!(with.stdout, want, "{}", with.stderr);
    assert_eq!(seen(&with.dump, &broken_code), Seen::Fixed);
    assert_eq!(with.count("fixed"), 2);
    assert_eq!(
        with.stats["calls"]["hipModuleUnload"]["calls"], 2,
        "{}",
        with.stats
    );
}

/// The program of the fat-binary tests: hipcc builds it for gfx1030 only, so its constructor
/// registers (`__hipRegisterFatBinary`) a bundle whose gfx1030 entry holds one
/// `s_inst_prefetch`. `hipFuncGetAttributes` makes the runtime load that entry on the GPU
/// (it reads a fat binary's code lazily, at a kernel's first use); then the emulator dumps
/// what the GPU can see.
const FATBIN_PROGRAM: &str = r#"#include <hip/hip_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
extern "C" __global__ void prefetching(int *p) {
  asm volatile("s_inst_prefetch 0x1");
  p[threadIdx.x] = 1;
}
int main() {
  union { hipFuncAttributes a; char room[4096]; } u;
  hipError_t rc = hipFuncGetAttributes(&u.a, (const void *)prefetching);
  printf("attributes rc=%d\n", (int)rc);
  void (*dump)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "emugpu_dump_code");
  if (dump) dump();
  fflush(stdout);
  return rc != hipSuccess;
}
"#;

/// What [`FATBIN_PROGRAM`] prints when its kernel loads.
const ATTRIBUTES: &str = "attributes rc=0\n";

/// [`FATBIN_PROGRAM`] built by hipcc into `dir` for gfx1030, and its gfx1030 entry's
/// `.text` as built and with `s_nop 0` for `s_inst_prefetch` (read from the executable's
/// `.hip_fatbin`). None: no hipcc (a skip).
fn fatbin_program(dir: &Path) -> Option<(PathBuf, Code)> {
    use rmcp_core::code_objects::{self as co, pick};
    let hipcc = hipcc()?;
    let src = dir.join("fatbin.hip");
    std::fs::write(&src, FATBIN_PROGRAM).unwrap();
    let exe = dir.join("fatbin_program");
    let out = Command::new(hipcc)
        .args(["--offload-arch=gfx1030", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run hipcc");
    assert!(
        out.status.success(),
        "hipcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = std::fs::File::open(&exe).unwrap();
    let section = co::find_section(&f, co::FATBIN_SECTION)
        .unwrap()
        .expect("a .hip_fatbin");
    let isa = rmcp_core::gfx::Gfx::parse("gfx1030").unwrap();
    let pick::Got::Object { bytes, .. } = pick::read_object(
        &f,
        section.offset,
        section.offset + section.size,
        &co::Device::from_gfx(isa),
        isa,
        1 << 30,
    ) else {
        panic!("no gfx1030 entry in the program's fat binary");
    };
    let original = text_of(&bytes);
    let fixed = prefetch_fixed(&original);
    assert_ne!(original, fixed, "the kernel holds s_inst_prefetch");
    Some((exe, Code { original, fixed }))
}

/// The shim's lines about gfx103x code under the override.
fn said_gfx103x(r: &Ran) -> Vec<&str> {
    r.stderr
        .lines()
        .filter(|l| l.starts_with("rmcp[") && l.contains("gfx103x code"))
        .collect()
}

/// The report's `override_fixes.FIELD` (u64::MAX when absent).
fn override_count(r: &Ran, field: &str) -> u64 {
    r.stats["override_fixes"][field]
        .as_u64()
        .unwrap_or(u64::MAX)
}

/// One run of [`FATBIN_PROGRAM`] on a runtime: (fixture, shim, environment).
type FatbinRun<'a> = &'a dyn Fn(&str, bool, &[(&str, &str)]) -> Ran;

/// What each setting of RMCP_OVERRIDE_FIXES must make of [`FATBIN_PROGRAM`] on the emulated
/// gfx1010 under HSA_OVERRIDE_GFX_VERSION=10.3.0, and the RDNA2 card under the same
/// override; `run(fixture, shim, env)` runs it on one runtime.
#[track_caller]
fn fatbin_settings(code: &Code, what: &str, run: FatbinRun) {
    let over = ("HSA_OVERRIDE_GFX_VERSION", "10.3.0");
    let none = run("rdna1", false, &[over]);
    assert_eq!(
        none.stdout, ATTRIBUTES,
        "{what} without rmcp: {}",
        none.stderr
    );
    assert_eq!(
        seen(&none.dump, code),
        Seen::Original,
        "{what} without rmcp"
    );

    let with = run("rdna1", true, &[over]);
    assert_eq!(with.stdout, ATTRIBUTES, "{what} with rmcp: {}", with.stderr);
    assert_eq!(
        seen(&with.dump, code),
        Seen::Fixed,
        "{what}: {}",
        with.stderr
    );
    assert_eq!(
        (
            override_count(&with, "fixed"),
            override_count(&with, "instructions_fixed"),
            override_count(&with, "fat_binaries"),
            override_count(&with, "fat_binaries_left"),
        ),
        (1, 1, 1, 0),
        "{what}: {}",
        with.stats
    );
    let s = said_gfx103x(&with);
    assert!(
        s.len() == 1
            && s[0].contains("__hipRegisterFatBinary (from ")
            && s[0].contains("fatbin_program")
            && s[0].contains("1 s_inst_prefetch")
            && s[0].contains("became s_nop 0"),
        "{what}: {s:?}"
    );

    let warn = run("rdna1", true, &[over, ("RMCP_OVERRIDE_FIXES", "warn")]);
    assert_eq!(warn.stdout, ATTRIBUTES, "{what} warn: {}", warn.stderr);
    assert_eq!(seen(&warn.dump, code), Seen::Original, "{what} warn");
    assert_eq!(
        (
            override_count(&warn, "fixed"),
            override_count(&warn, "warned")
        ),
        (0, 1),
        "{what} warn"
    );
    let s = said_gfx103x(&warn);
    assert!(
        s.len() == 1 && s[0].contains("would become s_nop 0"),
        "{what} warn: {s:?}"
    );

    let off = run("rdna1", true, &[over, ("RMCP_OVERRIDE_FIXES", "off")]);
    assert_eq!(off.stdout, ATTRIBUTES, "{what} off: {}", off.stderr);
    assert_eq!(seen(&off.dump, code), Seen::Original, "{what} off");
    // Nothing read, nothing done: no report at all (no hooked call built the shim's state),
    // or one that counts nothing.
    assert!(
        off.stats.is_null()
            || (
                override_count(&off, "fixed"),
                override_count(&off, "fat_binaries")
            ) == (0, 0),
        "{what} off: nothing read: {}",
        off.stats
    );
    assert!(said_gfx103x(&off).is_empty(), "{what} off: {}", off.stderr);

    // An RDNA2 card (gfx1031) under the same override runs its own family's code.
    let rdna2 = run("rdna2", true, &[over]);
    assert_eq!(rdna2.stdout, ATTRIBUTES, "{what} rdna2: {}", rdna2.stderr);
    assert_eq!(seen(&rdna2.dump, code), Seen::Original, "{what} rdna2");
    assert_eq!(
        (
            override_count(&rdna2, "fixed"),
            override_count(&rdna2, "fat_binaries")
        ),
        (0, 0),
        "{what} rdna2"
    );
    assert!(
        said_gfx103x(&rdna2).is_empty(),
        "{what} rdna2: {}",
        rdna2.stderr
    );
}

/// Issue 40 item 2 on ROCm 5.2.3: the fat binary a hipcc-built gfx1030 program registers
/// at start-up reaches the emulated gfx1010, under HSA_OVERRIDE_GFX_VERSION=10.3.0, with
/// `s_nop 0` where its kernel had `s_inst_prefetch` and every other byte of its code as
/// built (the runtime is handed a private bundle of that one entry); `warn` says so and
/// changes nothing, `off` is silent and changes nothing, and the RDNA2 card under the same
/// override gets the code as built.
#[test]
fn on_5_2_3_a_fat_binary_registered_at_start_gets_its_prefetch_fixed_only_on_rdna1() {
    let (Some(_), Some(lib)) = (real_runtime(), emugpu_lib()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some((exe, code)) = fatbin_program(d) else {
        return;
    };
    fatbin_settings(&code, "5.2.3", &|fixture, shim, env| {
        run_on(&lib, d, fixture, shim, env, &exe, &[])
    });
}

/// Issue 40 item 2 on ROCm 6.4.3 (sid) and 7.2.4 (exp): the same program, its runtime
/// library named libamdhip64.so.5 in the root (a link to the root's .so.6 or .so.7; the
/// functions it calls are at the same version, hip_4.2, in all three), as on 5.2.3.
#[test]
fn on_6_4_3_and_7_2_4_a_fat_binary_registered_at_start_gets_its_prefetch_fixed_only_on_rdna1() {
    let Some(lib) = emugpu_lib() else {
        return;
    };
    let built = tempfile::tempdir().unwrap();
    let Some((exe, code)) = fatbin_program(built.path()) else {
        return;
    };
    for (root_name, so) in [("sid", "libamdhip64.so.6"), ("exp", "libamdhip64.so.7")] {
        let Some(root) = compat_root(root_name) else {
            return;
        };
        let dir = root_dir(&root, &lib, &format!("fatbin-{root_name}"));
        dir.copy(&exe, "fatbin_program");
        dir.copy(&repo().join("tests/fixtures/rdna2"), "rdna2");
        std::fs::create_dir(dir.host().join("lib")).unwrap();
        std::os::unix::fs::symlink(
            format!("/usr/lib/x86_64-linux-gnu/{so}"),
            dir.host().join("lib/libamdhip64.so.5"),
        )
        .unwrap();
        let inside = |name: &str| dir.inside.join(name).display().to_string();
        fatbin_settings(&code, root_name, &|fixture, shim, env| {
            let mut vars = root_env(&dir, fixture, shim, "fatbin");
            vars.push(("LD_LIBRARY_PATH", inside("lib")));
            vars.extend(env.iter().map(|(k, v)| (*k, v.to_string())));
            root_ran(
                &dir,
                "fatbin",
                &mut dir.command(&vars, &inside("fatbin_program"), &[]),
            )
        });
    }
}

/// Issue 40 item 2, a machine with an RX 5700 XT (gfx1010, node 1) and an RX 7900 (gfx1100,
/// node 2: tests/fixtures/mixed, read by rmcp through RMCP_SYSFS_ROOT; no GPU is opened,
/// the runtime finds none and the program's call fails as it does without rmcp): a program
/// with gfx1030 and gfx1100 entries. With the override for node 1 alone
/// (HSA_OVERRIDE_GFX_VERSION_1=10.3.0) the two GPUs would load different entries: the fat
/// binary is handed on as it is, said once, counted in `fat_binaries_left`. With the
/// override for both, both load the gfx1030 entry: a private copy of it is handed on.
#[test]
fn on_5_2_3_gpus_that_would_load_different_entries_leave_the_fat_binary_as_it_is() {
    let (Some(_), Some(hipcc)) = (real_runtime(), hipcc()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("two.hip");
    // gfx1100 has no s_inst_prefetch; -nogpulib: Debian's hipcc has no gfx1100 device
    // library, which this kernel does not need.
    let source = FATBIN_PROGRAM
        .replace(
            "  asm volatile(\"s_inst_prefetch 0x1\");\n",
            "#if defined(__gfx1030__)\n  asm volatile(\"s_inst_prefetch 0x1\");\n#endif\n",
        )
        .replace("p[threadIdx.x]", "p[__builtin_amdgcn_workitem_id_x()]");
    std::fs::write(&src, source).unwrap();
    let exe = dir.path().join("two_targets");
    let out = Command::new(hipcc)
        .args([
            "--offload-arch=gfx1030",
            "--offload-arch=gfx1100",
            "-nogpulib",
            "-O1",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run hipcc");
    assert!(
        out.status.success(),
        "hipcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = dir.path().join("stats.json");
    let run = |shim: bool, env: &[(&str, &str)]| -> Ran {
        let _ = std::fs::remove_file(&stats);
        let mut cmd = Command::new(&exe);
        for (k, _) in std::env::vars() {
            if k.starts_with("RMCP_") || k.starts_with("HSA_OVERRIDE_GFX_VERSION") {
                cmd.env_remove(k);
            }
        }
        cmd.env_remove("LD_PRELOAD")
            .env("RMCP_SYSFS_ROOT", fixture("mixed"))
            .envs(env.iter().copied());
        if shim {
            cmd.env("LD_PRELOAD", shim_path())
                .env("RMCP_STATS_FILE", &stats);
        }
        let out = output_within(&mut cmd, Duration::from_secs(120)).expect("the program");
        Ran {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            dump: Vec::new(),
            stats: std::fs::read(&stats)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(serde_json::Value::Null),
        }
    };
    let node1 = [("HSA_OVERRIDE_GFX_VERSION_1", "10.3.0")];
    let none = run(false, &node1);
    let with = run(true, &node1);
    assert!(none.stdout.starts_with("attributes rc="), "{}", none.stderr);
    assert_eq!(with.stdout, none.stdout, "{}", with.stderr);
    assert_eq!(
        (
            override_count(&with, "fat_binaries"),
            override_count(&with, "fat_binaries_left"),
            override_count(&with, "fixed"),
        ),
        (0, 1, 0),
        "{}",
        with.stats
    );
    let said: Vec<&str> = with
        .stderr
        .lines()
        .filter(|l| l.starts_with("rmcp[") && l.contains("__hipRegisterFatBinary"))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("would load different entries"),
        "{said:?}"
    );

    let both = run(true, &[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]);
    assert_eq!(both.stdout, none.stdout, "{}", both.stderr);
    assert_eq!(
        (
            override_count(&both, "fat_binaries"),
            override_count(&both, "fat_binaries_left"),
            override_count(&both, "fixed"),
            override_count(&both, "instructions_fixed"),
        ),
        (1, 0, 1, 1),
        "{}",
        both.stats
    );
}
