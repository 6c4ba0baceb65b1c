//! LLVM's own ground truth for the gfx101x scan (`rmcp_core::gfx101x::scan_code`).
//!
//! LLVM 15 knows twelve gfx101x (RDNA1) hardware bugs that gfx1030 (RDNA2) does not have and
//! works around each only when compiling for gfx101x; each is an llc `-mattr` feature. So
//! LLVM itself says where gfx1030 code meets each bug: compile the same IR for gfx1030
//! plainly and with the one feature added, and what the feature changed is LLVM's list of
//! sites. The scan must find every one of them in the plain build (nothing missed), and
//! nothing of a mitigated class in the build with all twelve features or in the gfx1010
//! build.
//!
//! The corpus (tests/gfx101x/, and `rmcp check`'s own src/field_check/kernels.hip): the
//! project's HIP kernels, rocPRIM's device-wide and block-level algorithms (Debian's
//! librocprim-dev) and kernels written to meet the rarer classes. hipcc (clang 15) makes
//! device IR of each (`-O3 --offload-arch=gfx1030`); its `target-cpu` and `target-features`
//! function attributes are removed, or they would override llc's `-mcpu` and `-mattr`.
//! Every IR file is compiled by llc 15 for gfx1030 plain, with each feature alone, with all
//! twelve, and for gfx1010; llvm-objdump lists each function.
//!
//! LLVM's sites, per class:
//! - inserted by the post-RA hazard recognizer (vmem-to-scalar-write, smem-to-vector-write,
//!   vcmpx-exec-war, vcmpx-permlane, lds-branch-vmem-war, nsa-to-vmem): a Myers diff of the
//!   plain and the +X listing of each function (instruction text, branch offsets and loop
//!   alignment padding left out); every inserted mitigation instruction (`s_waitcnt_depctr
//!   0xffe3`, `s_mov_b32 null, 0`, `s_waitcnt_depctr 0xfffe`, `v_mov_b32 vN, vN`,
//!   `s_waitcnt_vscnt null, 0x0`, `s_nop 0`) marks the plain instruction it precedes. Any
//!   other difference is counted and printed as not explained.
//! - chosen by instruction selection or the assembler: defined on the plain build and
//!   checked absent from the +X build: every `s_inst_prefetch` (inst-fwd-prefetch), every
//!   `flat_*` with a nonzero offset (flat-segment-offset), every `scratch_*` with a negative
//!   offset not a multiple of 4 (negative-unaligned-scratch-offset), every SOPP branch whose
//!   offset is exactly 0x3f (offset-3f), every `s_clause` whose clause holds an NSA image
//!   instruction (nsa-clause).
//! - lds-misaligned: LLVM splits the multi-dword LDS accesses it does not know naturally
//!   aligned; which are misaligned at run time nobody knows statically. HIP's default (no
//!   unaligned-access-mode) never emits one it does not believe aligned, so +X changes next
//!   to nothing: the multi-dword LDS accesses of the plain and the +X build and the scan's
//!   sites are reported, not asserted.
//!
//! Compiled IR, objects and listings are cached under the test's target tmpdir, keyed by a
//! hash of their inputs. The table goes to stderr and to
//! `$CARGO_TARGET_TMPDIR/gfx101x_ground_truth.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rmcp_core::code_objects::amdgpu;
use rmcp_core::gfx::Gfx;
use rmcp_core::gfx101x::{Bug, scan_code};

const LLVM_BIN: &str = "/usr/lib/llvm-15/bin";
const APT: &str = "apt-get install -y hipcc llvm-15 librocprim-dev";
/// Changes whenever the way IR and objects are made changes (the cache key's salt).
const RECIPE: &str = "gfx101x-ground-truth 1";
/// Classes no kernel of the corpus meets in LLVM's eyes (each asserted found otherwise).
/// lds-misaligned: see the module comment.
const NOT_TRIGGERED: &[Bug] = &[Bug::LdsMisaligned];

// ---- skips -------------------------------------------------------------------------------

/// rmcp-testkit's rule (rmcp-core cannot use it): a missing prerequisite skips, unless
/// prerequisites are required (`RMCP_REQUIRE_REAL_HIP=1` or `CI` set): then it fails.
fn missing(what: &str) {
    let required = std::env::var("RMCP_REQUIRE_REAL_HIP").as_deref() == Ok("1")
        || std::env::var_os("CI").is_some();
    assert!(
        !required,
        "RMCP_REQUIRE_REAL_HIP=1 or CI is set, but a prerequisite is missing: {what}"
    );
    // Straight to the descriptor, past libtest's capture.
    let _ =
        std::io::stderr().write_all(format!("skipped: gfx101x_ground_truth: {what}\n").as_bytes());
}

fn hipcc() -> PathBuf {
    std::env::var_os("HIPCC")
        .map(PathBuf::from)
        .unwrap_or_else(|| "hipcc".into())
}

/// What is missing, if anything.
fn prerequisites() -> Option<String> {
    let hipcc_ok = Command::new(hipcc())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !hipcc_ok {
        return Some(format!("no hipcc ({APT})"));
    }
    for tool in ["llc", "llvm-objdump"] {
        if !Path::new(LLVM_BIN).join(tool).is_file() {
            return Some(format!("no {LLVM_BIN}/{tool} ({APT})"));
        }
    }
    if !Path::new("/usr/include/rocprim/rocprim.hpp").is_file() {
        return Some(format!(
            "no rocPRIM headers in /usr/include/rocprim ({APT})"
        ));
    }
    None
}

// ---- the corpus and its builds ----------------------------------------------------------

struct Source {
    /// File name (unique in the corpus).
    name: String,
    path: PathBuf,
    text: String,
    /// hipcc flags beyond the common ones (None: the file is IR already).
    hip_flags: Option<Vec<&'static str>>,
    /// `llc-mattr:` line of the file: features every build of it adds.
    mattr: Vec<String>,
}

fn corpus() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("tests/gfx101x");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read tests/gfx101x")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hip" || e == "ll"))
        .collect();
    paths.sort();
    let mut out: Vec<Source> = paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let ir = path.extension().is_some_and(|e| e == "ll");
            source(&path, text, if ir { None } else { Some(vec![]) })
        })
        .collect();
    // rmcp check's GPU code, built as build.rs builds it (no HIP header, no device library).
    let check = root.join("../src/field_check/kernels.hip");
    let text = std::fs::read_to_string(&check).expect("read src/field_check/kernels.hip");
    out.push(source(&check, text, Some(vec!["-nogpuinc", "-nogpulib"])));
    out
}

fn source(path: &Path, text: String, hip_flags: Option<Vec<&'static str>>) -> Source {
    let mattr = text
        .lines()
        .filter_map(|l| {
            l.trim_start_matches(['/', ';', ' '])
                .strip_prefix("llc-mattr:")
        })
        .flat_map(|m| m.split(',').map(|f| f.trim().to_string()))
        .filter(|f| !f.is_empty())
        .collect();
    Source {
        name: path.file_name().unwrap().to_string_lossy().into_owned(),
        path: path.to_path_buf(),
        text,
        hip_flags,
        mattr,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Build {
    Plain,
    One(Bug),
    All,
    Gfx1010,
}

impl Build {
    fn all() -> Vec<Build> {
        let mut b = vec![Build::Plain];
        b.extend(Bug::ALL.iter().map(|&x| Build::One(x)));
        b.push(Build::All);
        b.push(Build::Gfx1010);
        b
    }

    fn key(self) -> String {
        match self {
            Build::Plain => "plain".into(),
            Build::One(b) => b.mattr().into(),
            Build::All => "all".into(),
            Build::Gfx1010 => "gfx1010".into(),
        }
    }

    fn cpu(self) -> &'static str {
        if self == Build::Gfx1010 {
            "gfx1010"
        } else {
            "gfx1030"
        }
    }

    fn mattr(self, extra: &[String]) -> Vec<String> {
        let mut m = extra.to_vec();
        match self {
            Build::One(b) => m.push(format!("+{}", b.mattr())),
            Build::All => m.extend(Bug::ALL.iter().map(|b| format!("+{}", b.mattr()))),
            Build::Plain | Build::Gfx1010 => {}
        }
        m
    }
}

/// FNV-1a, 64 bits: the cache key (std's hashers promise no stability across releases).
fn fnv(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn cache_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gfx101x_ground_truth");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `path` with `suffix` appended to its name (the corpus' names hold dots already).
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Writes `path` atomically (a temporary name, then a rename), so that an interrupted run
/// leaves no half file in the cache.
fn put(path: &Path, bytes: &[u8]) {
    let tmp = suffixed(path, &format!(".tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Removes the `"target-cpu"` and `"target-features"` function attributes.
fn strip_target(ir: &str) -> String {
    let mut out = String::with_capacity(ir.len());
    let mut rest = ir;
    loop {
        let next = ["\"target-cpu\"=\"", "\"target-features\"=\""]
            .iter()
            .filter_map(|k| rest.find(k).map(|i| (i, k.len())))
            .min();
        let Some((i, klen)) = next else {
            out.push_str(rest);
            return out;
        };
        let end = i + klen + rest[i + klen..].find('"').expect("closing quote") + 1;
        out.push_str(rest[..i].trim_end_matches(' '));
        rest = &rest[end..];
    }
}

/// Device IR of `src` (target attributes stripped), from the cache when there.
fn device_ir(src: &Source, toolchain: &str) -> String {
    let Some(flags) = &src.hip_flags else {
        return strip_target(&src.text);
    };
    let common = [
        "--cuda-device-only",
        "-emit-llvm",
        "-S",
        "-O3",
        "--offload-arch=gfx1030",
        "-std=c++17",
        "-w",
    ];
    let key = fnv(&[
        RECIPE.as_bytes(),
        src.text.as_bytes(),
        common.join(" ").as_bytes(),
        flags.join(" ").as_bytes(),
        toolchain.as_bytes(),
    ]);
    let cached = cache_dir().join(format!("{}-{key}.ll", src.name));
    if let Ok(ir) = std::fs::read_to_string(&cached) {
        return ir;
    }
    let raw = suffixed(&cached, &format!(".raw{}.ll", std::process::id()));
    let out = Command::new(hipcc())
        .args(common)
        .args(flags)
        .arg("-o")
        .arg(&raw)
        .arg(&src.path)
        .output()
        .expect("run hipcc");
    assert!(
        out.status.success(),
        "hipcc {}: {}",
        src.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let ir = strip_target(&std::fs::read_to_string(&raw).unwrap());
    let _ = std::fs::remove_file(&raw);
    put(&cached, ir.as_bytes());
    ir
}

/// One build of one IR file: the object and llvm-objdump's listing, from the cache when
/// there.
fn compile(name: &str, ir: &str, extra: &[String], build: Build) -> (Vec<u8>, String) {
    let mattr = build.mattr(extra).join(",");
    let key = fnv(&[
        RECIPE.as_bytes(),
        ir.as_bytes(),
        build.cpu().as_bytes(),
        mattr.as_bytes(),
    ]);
    let base = cache_dir().join(format!("{name}-{key}-{}", build.key()));
    let (obj, dis) = (suffixed(&base, ".o"), suffixed(&base, ".dis"));
    if let (Ok(o), Ok(d)) = (std::fs::read(&obj), std::fs::read_to_string(&dis)) {
        return (o, d);
    }
    let ll = suffixed(&base, &format!(".in{}.ll", std::process::id()));
    std::fs::write(&ll, ir).unwrap();
    let tmp_obj = suffixed(&base, &format!(".tmp{}.o", std::process::id()));
    let mut llc = Command::new(Path::new(LLVM_BIN).join("llc"));
    llc.args(["-march=amdgcn", "-filetype=obj"])
        .arg(format!("-mcpu={}", build.cpu()));
    if !mattr.is_empty() {
        llc.arg(format!("-mattr={mattr}"));
    }
    let out = llc
        .arg("-o")
        .arg(&tmp_obj)
        .arg(&ll)
        .output()
        .expect("run llc");
    let _ = std::fs::remove_file(&ll);
    assert!(
        out.status.success(),
        "llc {name} {}: {}",
        build.key(),
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = Command::new(Path::new(LLVM_BIN).join("llvm-objdump"))
        .arg("-d")
        .arg(format!("--mcpu={}", build.cpu()))
        .arg(&tmp_obj)
        .output()
        .expect("run llvm-objdump");
    assert!(
        listing.status.success(),
        "llvm-objdump {name} {}",
        build.key()
    );
    let o = std::fs::read(&tmp_obj).unwrap();
    let _ = std::fs::remove_file(&tmp_obj);
    let d = String::from_utf8(listing.stdout).unwrap();
    put(&obj, &o);
    put(&dis, d.as_bytes());
    (o, d)
}

/// Runs `f` on every item on as many threads as the machine has cores; results in order.
fn parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    results.lock().unwrap()[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

// ---- listings ----------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Inst {
    /// Offset in the section (llvm-objdump's).
    at: usize,
    /// Offset in the function.
    rel: usize,
    words: Vec<u32>,
    /// The instruction as llvm-objdump writes it, spaces collapsed.
    text: String,
}

impl Inst {
    fn mnemonic(&self) -> &str {
        self.text.split(' ').next().unwrap_or("")
    }

    fn is_branch(&self) -> bool {
        let m = self.mnemonic();
        m == "s_branch" || m.starts_with("s_cbranch_")
    }

    /// A SOPP branch's target (section offset).
    fn target(&self) -> Option<usize> {
        let simm = self.words[0] as u16 as i16;
        self.is_branch()
            .then(|| (self.at as i64 + 4 + 4 * i64::from(simm)) as usize)
    }

    /// The value of an `offset:` operand.
    fn offset(&self) -> Option<i64> {
        self.text
            .split(' ')
            .find_map(|o| o.strip_prefix("offset:"))
            .and_then(|v| v.parse().ok())
    }

    /// An image instruction in the NSA encoding (its addresses a list, `[v1, v5, v2]`).
    fn nsa(&self) -> bool {
        self.mnemonic().starts_with("image_") && self.text.contains('[')
    }

    /// The text compared by the diff: a branch without its offset.
    fn key(&self) -> &str {
        if self.is_branch() {
            self.mnemonic()
        } else {
            &self.text
        }
    }
}

struct Function {
    name: String,
    /// The function's bytes.
    code: Vec<u8>,
    wave64: bool,
    wgp_mode: bool,
    insts: Vec<Inst>,
}

/// The functions of one object, from its listing and its symbols (each listing block cut to
/// its symbol's size, and its words checked against the object's bytes).
fn functions(obj: &[u8], listing: &str, what: &str) -> Vec<Function> {
    let object = amdgpu::object(obj, None).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    let mut blocks: BTreeMap<String, Vec<Inst>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in listing.lines() {
        if let Some(name) = line
            .split_once(" <")
            .filter(|(addr, rest)| {
                rest.ends_with(">:") && addr.bytes().all(|b| b.is_ascii_hexdigit())
            })
            .map(|(_, rest)| rest.trim_end_matches(">:").to_string())
        {
            current = Some(name);
            continue;
        }
        let Some(name) = &current else { continue };
        let Some(body) = line.strip_prefix('\t') else {
            continue;
        };
        let Some((text, comment)) = body.split_once("//") else {
            continue;
        };
        let Some((at, words)) = comment.trim().split_once(':') else {
            continue;
        };
        let at = usize::from_str_radix(at.trim(), 16).expect("offset");
        let words: Vec<u32> = words
            .split_whitespace()
            .take_while(|w| !w.starts_with('<'))
            .map(|w| u32::from_str_radix(w, 16).expect("word"))
            .collect();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        blocks.entry(name.clone()).or_default().push(Inst {
            at,
            rel: 0,
            words,
            text,
        });
    }
    let mut out = Vec::new();
    for f in &object.functions {
        let Some(name) = &f.name else { continue };
        let Some(block) = blocks.remove(name) else {
            panic!("{what}: no listing of {name}");
        };
        let code = obj[f.start..f.end].to_vec();
        let start = block[0].at;
        let mut insts = Vec::new();
        for mut i in block {
            i.rel = i.at - start;
            if i.rel >= code.len() {
                break;
            }
            let bytes: Vec<u8> = i.words.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(
                code.get(i.rel..i.rel + bytes.len()),
                Some(&bytes[..]),
                "{what}: {name}+{:#x}: the listing's words are not the object's bytes",
                i.rel
            );
            insts.push(i);
        }
        out.push(Function {
            name: name.clone(),
            code,
            wave64: f.wave64.unwrap_or(false),
            wgp_mode: f.wgp_mode.unwrap_or(true),
            insts,
        });
    }
    out
}

/// The instructions the diff compares: loop-alignment padding left out (a run of `s_nop 0`
/// ending at a 64-byte boundary that a branch targets: LLVM aligns loop headers, and an
/// inserted instruction before a loop moves the padding).
fn without_padding(insts: &[Inst]) -> Vec<&Inst> {
    let targets: BTreeSet<usize> = insts.iter().filter_map(Inst::target).collect();
    let mut keep = vec![true; insts.len()];
    let mut i = 0;
    while i < insts.len() {
        if insts[i].text != "s_nop 0" {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < insts.len() && insts[j].text == "s_nop 0" {
            j += 1;
        }
        if j < insts.len() && insts[j].at % 64 == 0 && targets.contains(&insts[j].at) {
            keep[i..j].iter_mut().for_each(|k| *k = false);
        }
        i = j;
    }
    insts
        .iter()
        .zip(keep)
        .filter_map(|(i, k)| k.then_some(i))
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Deleted(usize),
    Inserted(usize),
}

/// Myers' diff of `a` and `b`; None when more than `max_d` edits apart.
fn diff(a: &[&str], b: &[&str], max_d: usize) -> Option<Vec<Op>> {
    let mut pre = 0;
    while pre < a.len() && pre < b.len() && a[pre] == b[pre] {
        pre += 1;
    }
    let mut suf = 0;
    while suf < a.len() - pre && suf < b.len() - pre && a[a.len() - 1 - suf] == b[b.len() - 1 - suf]
    {
        suf += 1;
    }
    let (ma, mb) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let (n, m) = (ma.len() as isize, mb.len() as isize);
    let lim = (ma.len() + mb.len()).min(max_d) as isize;
    let off = lim + 1;
    let mut v = vec![0isize; 2 * lim as usize + 3];
    let mut trace = Vec::new();
    let mut done = None;
    'rounds: for d in 0..=lim {
        trace.push(v.clone());
        let mut k = -d;
        while k <= d {
            let ix = (k + off) as usize;
            let mut x = if k == -d || (k != d && v[ix - 1] < v[ix + 1]) {
                v[ix + 1]
            } else {
                v[ix - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && ma[x as usize] == mb[y as usize] {
                x += 1;
                y += 1;
            }
            v[ix] = x;
            if x >= n && y >= m {
                done = Some(d);
                break 'rounds;
            }
            k += 2;
        }
    }
    let d_end = done?;
    let mut ops = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (1..=d_end).rev() {
        let v = &trace[d as usize];
        let k = x - y;
        let prev_k = if k == -d || (k != d && v[(k - 1 + off) as usize] < v[(k + 1 + off) as usize])
        {
            k + 1
        } else {
            k - 1
        };
        let prev_x = v[(prev_k + off) as usize];
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            ops.push(Op::Same((x - 1) as usize, (y - 1) as usize));
            x -= 1;
            y -= 1;
        }
        if x == prev_x {
            ops.push(Op::Inserted((y - 1) as usize));
        } else {
            ops.push(Op::Deleted((x - 1) as usize));
        }
        x = prev_x;
        y = prev_y;
    }
    while x > 0 && y > 0 {
        ops.push(Op::Same((x - 1) as usize, (y - 1) as usize));
        x -= 1;
        y -= 1;
    }
    ops.reverse();
    let shift = |op: Op| match op {
        Op::Same(i, j) => Op::Same(i + pre, j + pre),
        Op::Deleted(i) => Op::Deleted(i + pre),
        Op::Inserted(j) => Op::Inserted(j + pre),
    };
    let mut all: Vec<Op> = (0..pre).map(|i| Op::Same(i, i)).collect();
    all.extend(ops.into_iter().map(shift));
    all.extend((0..suf).map(|s| Op::Same(a.len() - suf + s, b.len() - suf + s)));
    Some(all)
}

// ---- LLVM's sites --------------------------------------------------------------------------

/// The instruction the hazard recognizer inserts for `bug`, for the classes it handles.
fn mitigation(bug: Bug, text: &str) -> Option<bool> {
    Some(match bug {
        Bug::VmemToScalarWrite => text == "s_waitcnt_depctr 0xffe3",
        Bug::SmemToVectorWrite => text == "s_mov_b32 null, 0",
        Bug::VcmpxExecWar => text == "s_waitcnt_depctr 0xfffe",
        Bug::VcmpxPermlane => text
            .strip_prefix("v_mov_b32_e32 ")
            .and_then(|o| o.split_once(", "))
            .is_some_and(|(d, s)| d == s),
        Bug::LdsBranchVmemWar => text == "s_waitcnt_vscnt null, 0x0",
        Bug::NsaToVmem => text == "s_nop 0",
        _ => return None,
    })
}

/// A multi-dword LDS access (what lds-misaligned is about).
fn lds_multi_dword(i: &Inst) -> bool {
    let m = i.mnemonic();
    m.starts_with("ds_")
        && (m.starts_with("ds_read") || m.starts_with("ds_write"))
        && (m.ends_with("_b64") || m.ends_with("_b96") || m.ends_with("_b128"))
}

/// The sites of an instruction-selection class in one listing (function offsets). For
/// nsa-clause the site is the `s_clause` whose clause holds an NSA image instruction (what
/// LLVM does not form under the feature, and what the in-place fix would neutralise).
fn selected_sites(bug: Bug, insts: &[Inst]) -> Vec<usize> {
    let mut out = Vec::new();
    for (k, i) in insts.iter().enumerate() {
        let m = i.mnemonic();
        let site = match bug {
            Bug::InstFwdPrefetch => m == "s_inst_prefetch",
            Bug::FlatSegmentOffset => m.starts_with("flat_") && i.offset().is_some_and(|o| o != 0),
            Bug::NegativeUnalignedScratchOffset => {
                m.starts_with("scratch_") && i.offset().is_some_and(|o| o < 0 && o % 4 != 0)
            }
            Bug::Offset3f => i.is_branch() && i.words[0] & 0xffff == 0x3f,
            Bug::NsaClause => {
                m == "s_clause"
                    && i.text
                        .split(' ')
                        .nth(1)
                        .and_then(|v| usize::from_str_radix(v.trim_start_matches("0x"), 16).ok())
                        .is_some_and(|n| insts.iter().skip(k + 1).take(n + 1).any(Inst::nsa))
            }
            Bug::LdsMisaligned => lds_multi_dword(i),
            _ => unreachable!("{bug:?} is the hazard recognizer's"),
        };
        if site {
            out.push(i.rel);
        }
    }
    out
}

/// What comparing the plain and the +X listing of one function says.
struct Inserted {
    /// Plain offsets the inserted mitigations precede.
    sites: Vec<usize>,
    /// Mitigation instructions inserted.
    inserted: usize,
    /// Differences that are no mitigation inserted (a line each).
    unexplained: Vec<String>,
}

fn inserted_sites(bug: Bug, plain: &[Inst], with: &[Inst]) -> Inserted {
    let (a, b) = (without_padding(plain), without_padding(with));
    let ka: Vec<&str> = a.iter().map(|i| i.key()).collect();
    let kb: Vec<&str> = b.iter().map(|i| i.key()).collect();
    let mut out = Inserted {
        sites: Vec::new(),
        inserted: 0,
        unexplained: Vec::new(),
    };
    let Some(ops) = diff(&ka, &kb, 400) else {
        out.unexplained
            .push("more than 400 instructions differ".into());
        return out;
    };
    let mut pending = false;
    for op in ops {
        match op {
            Op::Inserted(j) => {
                if mitigation(bug, &b[j].text) == Some(true) {
                    out.inserted += 1;
                    pending = true;
                } else {
                    out.unexplained
                        .push(format!("+ {:#x}: {}", b[j].rel, b[j].text));
                }
            }
            Op::Same(i, _) | Op::Deleted(i) => {
                if pending {
                    out.sites.push(a[i].rel);
                    pending = false;
                }
                if let Op::Deleted(_) = op {
                    out.unexplained
                        .push(format!("- {:#x}: {}", a[i].rel, a[i].text));
                }
            }
        }
    }
    if pending {
        out.unexplained
            .push("a mitigation inserted after the last instruction".into());
    }
    out
}

// ---- the test ----------------------------------------------------------------------------

#[derive(Default, Clone)]
struct Row {
    /// LLVM's sites in the plain build: (function, offset).
    llvm: BTreeSet<(String, usize)>,
    /// +X: mitigations inserted (hazard classes) or sites left (the others).
    with: usize,
    /// The scan's sites in the plain build.
    scan: BTreeSet<(String, usize)>,
    scan_all: usize,
    scan_gfx1010: usize,
}

#[test]
fn gfx101x_ground_truth() {
    if let Some(what) = prerequisites() {
        missing(&what);
        return;
    }
    let started = Instant::now();
    let card = Gfx::parse("gfx1010").unwrap();
    let toolchain = {
        let v = Command::new(hipcc()).arg("--version").output().unwrap();
        let rocprim = std::fs::read("/usr/include/rocprim/rocprim_version.hpp").unwrap_or_default();
        [v.stdout, rocprim].concat()
    };
    let toolchain = String::from_utf8_lossy(&toolchain).into_owned();
    let sources = corpus();
    let irs = parallel(&sources, |s| device_ir(s, &toolchain));
    let builds = Build::all();
    let jobs: Vec<(usize, Build)> = (0..sources.len())
        .flat_map(|s| builds.iter().map(move |&b| (s, b)))
        .collect();
    let compiled = parallel(&jobs, |&(s, b)| {
        let (obj, listing) = compile(&sources[s].name, &irs[s], &sources[s].mattr, b);
        let what = format!("{} {}", sources[s].name, b.key());
        functions(&obj, &listing, &what)
    });
    let built: BTreeMap<(usize, String), &Vec<Function>> = jobs
        .iter()
        .zip(&compiled)
        .map(|(&(s, b), f)| ((s, b.key()), f))
        .collect();

    let mut rows: BTreeMap<Bug, Row> = Bug::ALL.iter().map(|&b| (b, Row::default())).collect();
    let mut unexplained: Vec<String> = Vec::new();
    let mut unexplained_functions = BTreeSet::new();
    let mut undecodable = Vec::new();
    let (mut nfunctions, mut ninstructions) = (0, 0);
    for (s, src) in sources.iter().enumerate() {
        let plain = built[&(s, "plain".to_string())];
        for f in plain.iter() {
            let id = format!("{}:{}", src.name, f.name);
            nfunctions += 1;
            ninstructions += f.insts.len();
            let scan = scan_code(&f.code, card, f.wave64, f.wgp_mode);
            if let Some(at) = scan.undecodable {
                undecodable.push(format!("{id}+{at:#x}"));
            }
            for site in &scan.sites {
                rows.get_mut(&site.bug)
                    .unwrap()
                    .scan
                    .insert((id.clone(), site.at));
            }
            for &bug in &Bug::ALL {
                let with = &built[&(s, bug.mattr().to_string())];
                let g = with
                    .iter()
                    .find(|g| g.name == f.name)
                    .unwrap_or_else(|| panic!("{id}: not in the +{} build", bug.mattr()));
                let row = rows.get_mut(&bug).unwrap();
                let sites = if mitigation(bug, "").is_some() {
                    let r = inserted_sites(bug, &f.insts, &g.insts);
                    row.with += r.inserted;
                    if !r.unexplained.is_empty() {
                        unexplained_functions.insert(id.clone());
                        let shown: Vec<&str> =
                            r.unexplained.iter().take(6).map(|s| s.as_str()).collect();
                        unexplained.push(format!(
                            "{id} +{}: {} difference(s) not explained: {}",
                            bug.mattr(),
                            r.unexplained.len(),
                            shown.join("; ")
                        ));
                    }
                    r.sites
                } else {
                    row.with += selected_sites(bug, &g.insts).len();
                    selected_sites(bug, &f.insts)
                };
                row.llvm
                    .extend(sites.into_iter().map(|at| (id.clone(), at)));
            }
        }
        for key in ["all", "gfx1010"] {
            for f in built[&(s, key.to_string())].iter() {
                let scan = scan_code(&f.code, card, f.wave64, f.wgp_mode);
                for site in scan.sites {
                    let row = rows.get_mut(&site.bug).unwrap();
                    if key == "all" {
                        row.scan_all += 1;
                    } else {
                        row.scan_gfx1010 += 1;
                    }
                }
            }
        }
    }

    // The table.
    let mut md = String::from(
        "| class | how LLVM marks it | LLVM sites (plain) | +X | found | missed | false positives | scan, all twelve | scan, gfx1010 |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (&bug, row) in &rows {
        let found = row.llvm.intersection(&row.scan).count();
        let how = if mitigation(bug, "").is_some() {
            "inserted before (+X: inserted)"
        } else if bug == Bug::LdsMisaligned {
            "multi-dword LDS (+X: left; report only)"
        } else {
            "selected (+X: left)"
        };
        md += &format!(
            "| {} | {how} | {} | {} | {found} | {} | {} | {} | {} |\n",
            bug.mattr(),
            row.llvm.len(),
            row.with,
            row.llvm.len() - found,
            row.scan.len() - found,
            row.scan_all,
            row.scan_gfx1010,
        );
    }
    md += &format!(
        "\n{} source files, {nfunctions} functions, {ninstructions} instructions (plain gfx1030 build); \
         {} function(s) with a difference not explained; {} function(s) the scan could not decode{}; {:.1} s.\n",
        sources.len(),
        unexplained_functions.len(),
        undecodable.len(),
        if undecodable.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                undecodable
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        started.elapsed().as_secs_f64()
    );
    let lds = &rows[&Bug::LdsMisaligned];
    md += &format!(
        "\nlds-misaligned (not asserted): {} multi-dword LDS accesses in the plain build, {} in the +X build \
         (HIP builds without unaligned-access-mode: LLVM emits none it does not believe naturally aligned); \
         the scan marks {} sites, {} of them multi-dword LDS accesses.\n",
        lds.llvm.len(),
        lds.with,
        lds.scan.len(),
        lds.llvm.intersection(&lds.scan).count()
    );
    for u in &unexplained {
        md += &format!("- {u}\n");
    }
    // A few false positives of each class, to read against the listings.
    for (&bug, row) in &rows {
        let extra: Vec<_> = row.scan.difference(&row.llvm).take(3).collect();
        if !extra.is_empty() && bug != Bug::LdsMisaligned {
            md += &format!("\n{} false positives, e.g. {extra:?}\n", bug.mattr());
        }
    }
    let _ = std::io::stderr().write_all(format!("\n{md}").as_bytes());
    put(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("gfx101x_ground_truth.md"),
        md.as_bytes(),
    );

    // What must hold.
    let mut failures = Vec::new();
    for (&bug, row) in &rows {
        let name = bug.mattr();
        if row.llvm.is_empty() && !NOT_TRIGGERED.contains(&bug) {
            failures.push(format!("{name}: LLVM marks no site in the corpus"));
        }
        if mitigation(bug, "").is_none() && bug != Bug::LdsMisaligned && row.with != 0 {
            failures.push(format!(
                "{name}: {} site(s) left in the +{name} build: the site's definition is not LLVM's",
                row.with
            ));
        }
        if bug == Bug::LdsMisaligned {
            continue;
        }
        let missed: Vec<_> = row.llvm.difference(&row.scan).take(5).collect();
        if !missed.is_empty() {
            failures.push(format!(
                "{name}: the scan missed {} of LLVM's {} site(s), e.g. {missed:?}",
                row.llvm.difference(&row.scan).count(),
                row.llvm.len()
            ));
        }
        if row.scan_all != 0 || row.scan_gfx1010 != 0 {
            failures.push(format!(
                "{name}: the scan finds {} site(s) in the all-twelve build and {} in the gfx1010 build, where LLVM mitigated them all",
                row.scan_all, row.scan_gfx1010
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
