//! What librmcp_shim.so costs, measured side by side with and without the shim in one run
//! (issue 5; docs/performance.md explains the figures). No GPU needed: the calls go to the
//! bundled fake HIP runtime, the devices come from the KFD fixtures in tests/fixtures.
//!
//!     cargo run --release --example bench
//!
//! Prints a markdown table. Every "with" run has a "without" twin that differs only in
//! LD_PRELOAD, and the two alternate (without/with, then with/without) so that drift of
//! the machine falls on both. Medians, with the 10th and 90th percentiles as the spread.
//! Takes about a minute on two cores.
//!
//! The client is benches/bench_client.c (built by rmcp-testkit's build.rs:
//! `rmcp_testkit::bench_client()`).

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use rmcp_testkit::{bench_client, fake_dir, fixture, shim};

/// Per-call benchmark: calls per batch, batches per process, processes per side. Short
/// batches (about 1 ms) let the median skip the ones a preemption fell into; several
/// processes per side sample the process-to-process spread (address layout).
const BATCH: u32 = 20_000;
const BATCHES: u32 = 30;
const ROUNDS: u32 = 20;
/// Fresh processes per side for the first call, for /bin/true, python3, and memory.
const FIRST_RUNS: u32 = 200;
const TRUE_RUNS: u32 = 400;
const PYTHON_RUNS: u32 = 60;
const RSS_RUNS: u32 = 15;

const EIGHT_GPUS: &str = "0000:03:00.0,0000:06:00.0,0000:09:00.0,0000:0c:00.0,\
                          0000:0f:00.0,0000:12:00.0,0000:15:00.0,0000:18:00.0";
/// hipHostMalloc flags 0 is coherent: rewritten to NonCoherent on an affected GPU.
const HOST_DEFAULT: &str = "0";
/// hipDeviceMallocFinegrained: rewritten to hipDeviceMallocDefault on an affected device.
const FINEGRAINED: &str = "1";

/// The environment of one scenario (besides LD_PRELOAD).
#[derive(Clone)]
struct Scenario {
    fixture: &'static str,
    devices: &'static str,
    extra: Vec<(&'static str, String)>,
}

impl Scenario {
    fn new(fixture: &'static str, devices: &'static str) -> Scenario {
        Scenario {
            fixture,
            devices,
            extra: Vec::new(),
        }
    }
    fn with(mut self, k: &'static str, v: &str) -> Scenario {
        self.extra.push((k, v.to_string()));
        self
    }
}

/// A command with the inherited RMCP_*/FAKEHIP_*/LD_PRELOAD removed.
fn clean(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RMCP_") || k.starts_with("FAKEHIP_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn client(args: &[&str], sc: &Scenario, preload: Option<&Path>) -> String {
    let mut cmd = clean(bench_client());
    cmd.args(args)
        .env("LD_LIBRARY_PATH", fake_dir(6))
        .env("RMCP_SYSFS_ROOT", fixture(sc.fixture))
        .env("FAKEHIP_DEVICES", sc.devices)
        .env("RMCP_LOG", "warn");
    for (k, v) in &sc.extra {
        cmd.env(k, v);
    }
    if let Some(p) = preload {
        cmd.env("LD_PRELOAD", p);
    }
    let out = cmd.output().expect("run the bench client");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "bench client {args:?} failed or complained: {out:?}"
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Runs `f(preload)` `runs` times per side, alternating which side goes first.
fn paired<T>(runs: u32, shim: &Path, mut f: impl FnMut(Option<&Path>) -> T) -> (Vec<T>, Vec<T>) {
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for i in 0..runs {
        if i % 2 == 0 {
            without.push(f(None));
            with.push(f(Some(shim)));
        } else {
            with.push(f(Some(shim)));
            without.push(f(None));
        }
    }
    (without, with)
}

/// Median, 10th and 90th percentile (nearest rank).
#[derive(Clone, Copy)]
struct Summary {
    p10: f64,
    median: f64,
    p90: f64,
}

fn summary(mut v: Vec<f64>) -> Summary {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Summary {
        p10: at(0.1),
        median,
        p90: at(0.9),
    }
}

fn show(s: Summary, digits: usize) -> String {
    format!(
        "{:.d$} [{:.d$}, {:.d$}]",
        s.median,
        s.p10,
        s.p90,
        d = digits
    )
}

struct Table {
    rows: Vec<String>,
    /// (row label, added median) of every measured row, for the targets.
    added: Vec<(String, f64)>,
}

impl Table {
    fn row(&mut self, what: &str, without: Summary, with: Summary, unit: &str, digits: usize) {
        let added = with.median - without.median;
        let line = format!(
            "| {what} | {} | {} | {added:+.d$} {unit} | {:.2}x |",
            show(without, digits),
            show(with, digits),
            with.median / without.median,
            d = digits
        );
        eprintln!("{line}");
        self.rows.push(line);
        self.added.push((what.to_string(), added));
    }

    /// The largest added median among rows whose label contains all of `parts`.
    fn worst(&self, parts: &[&str]) -> Option<f64> {
        self.added
            .iter()
            .filter(|(w, _)| parts.iter().all(|p| w.contains(p)))
            .map(|(_, a)| *a)
            .max_by(f64::total_cmp)
    }
    fn note(&mut self, text: &str) {
        let line = format!("| **{text}** | | | | |");
        self.rows.push(line);
    }
}

fn per_call(table: &mut Table, shim: &Path) {
    let rdna1 = Scenario::new("rdna1", "0000:03:00.0");
    let mixed = Scenario::new("mixed", "0000:03:00.0,0000:0a:00.0");
    let cases: Vec<(&str, Scenario, &str, &str)> = vec![
        (
            "force, hipHostMalloc(0) rewritten",
            rdna1.clone().with("RMCP_MODE", "force"),
            "hipHostMalloc",
            HOST_DEFAULT,
        ),
        (
            "force, hipExtMallocWithFlags(Finegrained) rewritten",
            rdna1.clone().with("RMCP_MODE", "force"),
            "hipExtMallocWithFlags",
            FINEGRAINED,
        ),
        (
            "force, hipMalloc counted",
            rdna1.clone().with("RMCP_MODE", "force"),
            "hipMalloc",
            "0",
        ),
        (
            "auto rdna1, hipHostMalloc(0) rewritten",
            rdna1.clone(),
            "hipHostMalloc",
            HOST_DEFAULT,
        ),
        (
            "auto rdna1, hipExtMallocWithFlags(Finegrained) rewritten",
            rdna1.clone(),
            "hipExtMallocWithFlags",
            FINEGRAINED,
        ),
        (
            "auto rdna1, hipMalloc counted",
            rdna1.clone(),
            "hipMalloc",
            "0",
        ),
        (
            "auto mixed, hipExtMallocWithFlags(Finegrained) on gfx1010: rewritten + hipGetDevice",
            mixed.clone(),
            "hipExtMallocWithFlags",
            FINEGRAINED,
        ),
        (
            "auto mixed, hipExtMallocWithFlags(Finegrained) on gfx1100: unchanged + hipGetDevice",
            mixed.clone().with("FAKEHIP_CURRENT", "1"),
            "hipExtMallocWithFlags",
            FINEGRAINED,
        ),
        (
            "auto rdna1, hipLaunchKernel recorded in the launch ring (issue 28)",
            rdna1.clone(),
            "hipLaunchKernel",
            "0",
        ),
        (
            "auto rdna1, hipHostMalloc(0) from an RMCP_EXEMPT caller: unchanged",
            rdna1.clone().with("RMCP_EXEMPT", "librmcp_bench"),
            "hipHostMalloc",
            HOST_DEFAULT,
        ),
    ];
    let (batch, batches) = (BATCH.to_string(), BATCHES.to_string());
    for threads in ["1", "2"] {
        table.note(&format!(
            "1. per call, ns, {threads} thread{} at once",
            if threads == "1" { "" } else { "s" }
        ));
        for (what, sc, func, flags) in &cases {
            let (without, with) = paired(ROUNDS, shim, |pre| {
                let out = client(&["loop", func, flags, threads, &batch, &batches], sc, pre);
                out.lines()
                    .filter_map(|l| l.strip_prefix("batch "))
                    .map(|l| l.split(' ').nth(1).unwrap().parse::<f64>().unwrap())
                    .collect::<Vec<f64>>()
            });
            table.row(
                &format!("{what} ({threads}T)"),
                summary(without.concat()),
                summary(with.concat()),
                "ns",
                1,
            );
        }
    }
}

fn first_call(table: &mut Table, shim: &Path) {
    table.note("2. first hooked call (hipHostMalloc(0), auto), us, fresh processes");
    for (what, sc) in [
        (
            "rdna1 fixture, 1 GPU",
            Scenario::new("rdna1", "0000:03:00.0"),
        ),
        (
            "eight-gpu fixture, 8 GPUs",
            Scenario::new("eight-gpu", EIGHT_GPUS),
        ),
    ] {
        let (without, with) = paired(FIRST_RUNS, shim, |pre| {
            let out = client(&["first", "hipHostMalloc", HOST_DEFAULT], &sc, pre);
            let ns: f64 = out
                .split_whitespace()
                .find_map(|w| w.strip_prefix("first_ns="))
                .expect("first_ns")
                .parse()
                .unwrap();
            ns / 1000.0
        });
        table.row(
            &format!("first call, {what}"),
            summary(without),
            summary(with),
            "us",
            1,
        );
    }
}

/// Wall time of spawning `program args` and waiting for it, in ms.
fn spawn_ms(program: &str, args: &[&str], preload: Option<&Path>) -> f64 {
    let mut cmd = clean(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(p) = preload {
        cmd.env("LD_PRELOAD", p);
    }
    let t = Instant::now();
    let status = cmd.status().expect("spawn");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(status.success(), "{program} {args:?} failed");
    ms
}

fn python() -> String {
    // The interpreter itself: a pyenv "python3" on PATH is a bash script.
    if Path::new("/usr/bin/python3").exists() {
        return "/usr/bin/python3".into();
    }
    "python3".into()
}

fn process_start(table: &mut Table, shim: &Path) {
    table.note("3. process start (spawn + exit, wall clock), ms");
    let (without, with) = paired(TRUE_RUNS, shim, |pre| spawn_ms("/bin/true", &[], pre));
    table.row("`/bin/true`", summary(without), summary(with), "ms", 3);
    let py = python();
    if Command::new(&py).args(["-c", "pass"]).output().is_err() {
        table.note(&format!("`{py} -c pass`: not run, no python3"));
        return;
    }
    let (without, with) = paired(PYTHON_RUNS, shim, |pre| spawn_ms(&py, &["-c", "pass"], pre));
    table.row(
        &format!("`{py} -c pass`"),
        summary(without),
        summary(with),
        "ms",
        2,
    );
}

fn loadable_bytes(elf: &[u8]) -> Option<(u64, u64)> {
    // ELF64 little endian: the sum of PT_LOAD file and memory sizes.
    if elf.get(0..4)? != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    let (mut file, mut mem) = (0, 0);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32::from_le_bytes(elf.get(ph..ph + 4)?.try_into().ok()?) == 1 {
            file += u64_at(ph + 0x20)?;
            mem += u64_at(ph + 0x28)?;
        }
    }
    Some((file, mem))
}

fn size(table: &mut Table, shim: &Path) {
    table.note("4. size and resident memory");
    let kib = |b: u64| b as f64 / 1024.0;
    // The front every process maps, and the body mapped at the first hooked call.
    let body = shim.with_file_name("librmcp_shim_body.so");
    for (name, path, when) in [
        ("librmcp_shim.so", shim, "every process"),
        (
            "librmcp_shim_body.so",
            body.as_path(),
            "processes that call HIP",
        ),
    ] {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let (file, mem) = loadable_bytes(&bytes).unwrap_or((0, 0));
        table.rows.push(format!(
            "| `{name}` file (release, with debug line info), KiB | | {:.0} | | |",
            kib(bytes.len() as u64)
        ));
        table.rows.push(format!(
            "| `{name}` loadable segments (PT_LOAD file / memory; mapped in {when}), KiB | | {:.0} / {:.0} | | |",
            kib(file),
            kib(mem)
        ));
    }
    let sc = Scenario::new("rdna1", "0000:03:00.0");
    for (what, arg) in [
        ("no hooked call", "none"),
        ("one hooked call (hipHostMalloc)", "call"),
    ] {
        let (without, with) = paired(RSS_RUNS, shim, |pre| {
            let out = client(&["rss", arg], &sc, pre);
            let get = |key: &str| -> f64 {
                out.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .expect(key)
                    .parse()
                    .unwrap()
            };
            (get("VmRSS="), get("RssAnon="))
        });
        let (w_rss, w_anon): (Vec<f64>, Vec<f64>) = without.into_iter().unzip();
        let (s_rss, s_anon): (Vec<f64>, Vec<f64>) = with.into_iter().unzip();
        table.row(
            &format!("VmRSS, {what}, KiB"),
            summary(w_rss),
            summary(s_rss),
            "KiB",
            0,
        );
        table.row(
            &format!("RssAnon (private), {what}, KiB"),
            summary(w_anon),
            summary(s_anon),
            "KiB",
            0,
        );
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let gpu = if Path::new("/dev/kfd").exists() {
        "/dev/kfd present"
    } else {
        "no /dev/kfd (no GPU)"
    };
    let virt = std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| t.contains(" hypervisor"))
        .unwrap_or(false);
    format!(
        "{cpus} CPUs, {cpu}, Linux {kernel}, {}{gpu}",
        if virt { "virtual machine, " } else { "" }
    )
}

/// Where the figures land against issue 5's targets.
fn targets(t: &Table) {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!("\ntargets (issue 5):");
    let one = t.worst(&["(1T)"]);
    let two = t.worst(&["(2T)"]);
    let one_plain = t.worst(&["rdna1", "(1T)"]);
    if let (Some(one), Some(two), Some(one_plain)) = (one, two, one_plain) {
        println!(
            "- per call, 1 thread, <= 10 ns added: worst row +{one:.1} ns (auto rdna1 rows: worst +{one_plain:.1} ns): {}",
            verdict(one <= 10.0)
        );
        println!(
            "- per call, 2 threads no worse than 1 (within 10% + 1 ns): worst row +{two:.1} ns vs +{one:.1} ns: {}",
            verdict(two <= one * 1.1 + 1.0)
        );
    }
    if let Some(first) = t.worst(&["eight-gpu"]) {
        println!(
            "- first call, 8 GPUs, < 100 us: +{first:.0} us: {}",
            verdict(first < 100.0)
        );
    }
    if let Some(tr) = t.worst(&["/bin/true"]) {
        println!(
            "- /bin/true, < 0.5 ms added: +{tr:.3} ms: {}",
            verdict(tr < 0.5)
        );
    }
}

fn main() {
    let shim = shim();
    let started = Instant::now();
    eprintln!("rmcp bench: shim {}", shim.display());
    let mut table = Table {
        rows: Vec::new(),
        added: Vec::new(),
    };
    per_call(&mut table, &shim);
    first_call(&mut table, &shim);
    process_start(&mut table, &shim);
    size(&mut table, &shim);

    println!("machine: {}", machine());
    println!(
        "per call: {ROUNDS} processes per side x {BATCHES} batches x {BATCH} calls (size 0, fake runtime), \
         ns per call per batch and thread; first call: {FIRST_RUNS} processes per side; \
         /bin/true: {TRUE_RUNS} runs per side; python3: {PYTHON_RUNS}; memory: {RSS_RUNS}.\n"
    );
    println!(
        "| measure | without shim: median [p10, p90] | with shim: median [p10, p90] | added (median) | ratio |"
    );
    println!("|---|---|---|---|---|");
    for r in &table.rows {
        println!("{r}");
    }
    targets(&table);
    println!("\ntotal time {:.0} s", started.elapsed().as_secs_f64());
}
