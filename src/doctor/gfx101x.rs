//! The gfx101x scan of the `code-objects` check: when HSA_OVERRIDE_GFX_VERSION (or a
//! per-node override) makes an RX 5000 (gfx1010-gfx1013) run gfx103x code, every code
//! object the runtime would load on it, in the libraries the check found, is scanned with
//! `rmcp_core::gfx101x` for the sites of the twelve gfx101x hardware bugs LLVM works around
//! only when it compiles for gfx101x, and for the instructions gfx101x decodes otherwise.
//!
//! What would run: per offload bundle, the one entry the runtime picks for the override's
//! ISA (its own processor before a generic target); per Tensile directory, each `.co` /
//! `.hsaco` file for that ISA. Only that entry is read (positioned reads), a compressed
//! bundle inflated only up to its end.
//!
//! Bounds ([`Bounds`], docs/cli.md): bytes per code object, per library, per run, and
//! seconds per run; what a bound leaves unscanned is listed, never silently dropped.
//! Results are cached by content ([`Cache`]): the XXH3-128 hash of each object's bytes and
//! the card, in `$RMCP_CACHE_DIR`, else `$XDG_CACHE_HOME/rmcp`, else `~/.cache/rmcp`; a
//! cache that cannot be read or written is only noted. Progress goes to stderr when it is
//! a terminal and the output is not JSON.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp_core::code_objects::pick::{Got, read_object};
use rmcp_core::code_objects::{self as co, Device, amdgpu};
use rmcp_core::gfx::Gfx;
use rmcp_core::gfx101x::{Bug, Harm, scan_image};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::code_objects::{CodeAt, CodeSource, Gpu, Scanned, code_sources, sorted_entries};
use super::report::{Check, CodeObjectRow, Finding, Remedy, Status};

/// LLVM's `AMDGPU.td`: the gfx101x features gfx1030 lacks, each the workaround of one bug.
pub const SRC_LLVM_AMDGPU_TD: &str = rmcp_core::remedy::sources::LLVM_AMDGPU_TD;

/// How much the scan reads, at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// One code object (and the compressed bundle holding it); a compressed bundle is
    /// inflated up to the end of the object, at most 4 times this.
    pub object_bytes: u64,
    /// The code objects of one library (an ELF file, or a Tensile directory).
    pub library_bytes: u64,
    /// The code objects of the whole run.
    pub total_bytes: u64,
    /// The whole run; checked before each code object.
    pub seconds: u64,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            object_bytes: 256 << 20,
            library_bytes: 2 << 30,
            total_bytes: 8 << 30,
            seconds: 120,
        }
    }
}

impl Bounds {
    /// The defaults, each replaced by `RMCP_GFX101X_BOUNDS` where it names one:
    /// `object=256M,library=2G,total=8G,seconds=120` (sizes in bytes, or with K, M, G).
    pub fn from_env() -> Bounds {
        let mut b = Bounds::default();
        let Some(v) = std::env::var_os("RMCP_GFX101X_BOUNDS") else {
            return b;
        };
        for part in v.to_string_lossy().split(',') {
            let Some((k, v)) = part.split_once('=') else {
                continue;
            };
            let Some(n) = parse_size(v.trim()) else {
                continue;
            };
            match k.trim() {
                "object" => b.object_bytes = n,
                "library" => b.library_bytes = n,
                "total" => b.total_bytes = n,
                "seconds" => b.seconds = n,
                _ => {}
            }
        }
        b
    }

    fn to_json(self) -> Value {
        json!({
            "object_bytes": self.object_bytes,
            "library_bytes": self.library_bytes,
            "total_bytes": self.total_bytes,
            "seconds": self.seconds,
        })
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let (digits, shift) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 10),
        'M' | 'm' => (&s[..s.len() - 1], 20),
        'G' | 'g' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn mib(bytes: u64) -> String {
    match bytes {
        1 => "1 byte".to_string(),
        b if b < 1 << 10 => format!("{b} bytes"),
        b if b < 1 << 20 => format!("{} KiB", b.div_ceil(1 << 10)),
        b if b < 1 << 30 => format!("{} MiB", b.div_ceil(1 << 20)),
        b => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
    }
}

// ---------------------------------------------------------------------------------------
// One code object's sites (what the cache keeps)
// ---------------------------------------------------------------------------------------

/// The functions named with their sites, most first, kept per code object.
const TOP: usize = 5;

/// A function among those with the most sites.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Top {
    name: String,
    /// Sites of the bugs that fault or hang, plus instructions decoded otherwise.
    fault_or_hang: usize,
    race: usize,
}

impl Top {
    fn total(&self) -> usize {
        self.fault_or_hang + self.race
    }
}

/// What one code object holds, as the card would run it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Sites {
    /// Its target (the ELF header's), and whether it is gfx103x code (the only code the
    /// scanner reads).
    target: String,
    gfx103x: bool,
    kernels: usize,
    functions: usize,
    instructions: usize,
    /// Functions the decoder could not read to the end (no sites counted in them).
    undecodable: usize,
    /// Sites per bug, in `Bug::ALL` order.
    counts: [usize; 12],
    otherwise: usize,
    /// The first instruction decoded otherwise: its offset in the object, its function.
    first_otherwise: Option<(usize, Option<String>)>,
    top: Vec<Top>,
}

impl Sites {
    fn of(object: &[u8], card: Gfx) -> Result<Sites, String> {
        let image = scan_image(object, card).map_err(|e| e.to_string())?;
        let mut s = Sites {
            kernels: image.objects.iter().map(|o| o.kernels).sum(),
            ..Sites::default()
        };
        let mut top = Vec::new();
        for o in &image.objects {
            s.target = amdgpu::processor(&o.target).to_string();
            s.gfx103x |= o.gfx103x;
            for f in &o.functions {
                s.functions += 1;
                s.instructions += f.instructions;
                s.undecodable += usize::from(f.undecodable.is_some());
                for (t, n) in s.counts.iter_mut().zip(f.counts) {
                    *t += n;
                }
                s.otherwise += f.otherwise;
                if s.first_otherwise.is_none() {
                    s.first_otherwise = f.first_otherwise.map(|at| (at, f.name.clone()));
                }
                let t = Top {
                    name: f
                        .name
                        .clone()
                        .unwrap_or_else(|| "(code without symbols)".into()),
                    fault_or_hang: harm_sum(&f.counts, false) + f.otherwise,
                    race: harm_sum(&f.counts, true),
                };
                if t.total() > 0 {
                    top.push(t);
                }
            }
        }
        sort_top(&mut top);
        top.truncate(TOP);
        s.top = top;
        Ok(s)
    }
}

/// Sites of the bugs that race (`race`), or of those that fault or hang (never the
/// possible sites of a bug that strikes only at an address the code does not tell).
fn harm_sum(counts: &[usize; 12], race: bool) -> usize {
    Bug::ALL
        .iter()
        .filter(|b| certain(b.harm()) && (b.harm() == Harm::Race) == race)
        .map(|b| counts[b.index()])
        .sum()
}

/// Whether a bug's site is certain to run wrongly when it runs (not one that depends on an
/// address's alignment).
fn certain(h: Harm) -> bool {
    h != Harm::IfMisaligned
}

fn sort_top(top: &mut [Top]) {
    top.sort_by(|a, b| {
        (b.fault_or_hang, b.total(), &a.name).cmp(&(a.fault_or_hang, a.total(), &b.name))
    });
}

/// `{"vmem-to-scalar-write-hazard": 0, ...}`: exactly the twelve `-mattr` names.
fn sites_json(counts: &[usize; 12]) -> Value {
    let mut m = Map::new();
    for b in Bug::ALL {
        m.insert(b.mattr().to_string(), counts[b.index()].into());
    }
    Value::Object(m)
}

// ---------------------------------------------------------------------------------------
// The cache
// ---------------------------------------------------------------------------------------

const CACHE_FORMAT: &str = "rmcp gfx101x sites";
/// Bumped whenever [`Sites`] or the file's layout changes.
const CACHE_VERSION: u32 = 1;
const CACHE_FILE: &str = "gfx101x-sites-v1.json";
/// Entries kept, the most recently used first.
const CACHE_ENTRIES: usize = 100_000;
/// The largest cache file read.
const CACHE_BYTES: u64 = 256 << 20;

#[derive(Serialize, Deserialize)]
struct CacheFile {
    format: String,
    version: u32,
    /// The rmcp build that wrote it: its entries hold for that scanner only.
    scanner: String,
    /// `<xxh3-128 of the object, hex>-<card>` -> (last used, seconds since the epoch; sites).
    entries: BTreeMap<String, (u64, Sites)>,
}

/// Sites by content, loaded once per run and written back when something was added.
struct Cache {
    dir: Option<PathBuf>,
    scanner: String,
    entries: BTreeMap<String, (u64, Sites)>,
    now: u64,
    hits: usize,
    misses: usize,
    written: bool,
    problem: Option<String>,
}

/// `RMCP_CACHE_DIR`, else `$XDG_CACHE_HOME/rmcp` (an absolute path only, as the XDG spec
/// says), else `$HOME/.cache/rmcp`.
fn cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("RMCP_CACHE_DIR") {
        return Some(d);
    }
    if let Some(d) = var("XDG_CACHE_HOME").filter(|d| d.is_absolute()) {
        return Some(d.join("rmcp"));
    }
    var("HOME").map(|h| h.join(".cache/rmcp"))
}

/// The scanner that wrote an entry: the gfx101x scanner's rules version and this rmcp's
/// version (an entry of another never counts).
fn scanner_identity() -> String {
    format!(
        "gfx101x scanner {} (rmcp {})",
        rmcp_core::gfx101x::SCANNER_VERSION,
        crate::build_info::VERSION
    )
}

impl Cache {
    fn open() -> Cache {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut c = Cache {
            dir: cache_dir(),
            scanner: scanner_identity(),
            entries: BTreeMap::new(),
            now,
            hits: 0,
            misses: 0,
            written: false,
            problem: None,
        };
        let Some(path) = c.dir.as_ref().map(|d| d.join(CACHE_FILE)) else {
            c.problem = Some(
                "no cache directory (neither RMCP_CACHE_DIR, XDG_CACHE_HOME nor HOME is set)"
                    .into(),
            );
            return c;
        };
        if !path.exists() {
            return c;
        }
        match crate::input::read_capped(&path, CACHE_BYTES, "a cache file") {
            Ok(bytes) => match serde_json::from_slice::<CacheFile>(&bytes) {
                Ok(f)
                    if f.format == CACHE_FORMAT
                        && f.version == CACHE_VERSION
                        && f.scanner == c.scanner =>
                {
                    c.entries = f.entries;
                }
                // Another rmcp's, or another layout's: started afresh, and replaced.
                Ok(_) => {}
                Err(e) => c.problem = Some(format!("{}: not read ({e})", path.display())),
            },
            Err(e) => c.problem = Some(e.to_string()),
        }
        c
    }

    fn key(object: &[u8], card: Gfx) -> String {
        format!("{:032x}-{card}", xxhash_rust::xxh3::xxh3_128(object))
    }

    fn get(&mut self, key: &str) -> Option<Sites> {
        let e = self.entries.get_mut(key)?;
        e.0 = self.now;
        self.hits += 1;
        Some(e.1.clone())
    }

    fn put(&mut self, key: String, sites: &Sites) {
        self.misses += 1;
        self.entries.insert(key, (self.now, sites.clone()));
    }

    /// Writes the cache back (a new file renamed over the old one) when something was added.
    fn save(&mut self) {
        if self.misses == 0 {
            return;
        }
        let Some(dir) = self.dir.clone() else { return };
        if self.entries.len() > CACHE_ENTRIES {
            let mut by_use: Vec<(u64, String)> = self
                .entries
                .iter()
                .map(|(k, (used, _))| (*used, k.clone()))
                .collect();
            by_use.sort_by(|a, b| b.cmp(a));
            for (_, k) in by_use.into_iter().skip(CACHE_ENTRIES) {
                self.entries.remove(&k);
            }
        }
        let file = CacheFile {
            format: CACHE_FORMAT.into(),
            version: CACHE_VERSION,
            scanner: self.scanner.clone(),
            entries: std::mem::take(&mut self.entries),
        };
        let path = dir.join(CACHE_FILE);
        let tmp = dir.join(format!(".{CACHE_FILE}.{}.tmp", std::process::id()));
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| {
                let bytes = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
                std::fs::write(&tmp, bytes)
            })
            .and_then(|()| std::fs::rename(&tmp, &path));
        match written {
            Ok(()) => self.written = true,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                self.problem = Some(format!(
                    "{}: not written ({})",
                    path.display(),
                    crate::input::io_error_text(&e)
                ));
            }
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "dir": self.dir.as_ref().map(|d| d.display().to_string()),
            "hits": self.hits,
            "misses": self.misses,
            "written": self.written,
            "problem": self.problem,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Reading the code objects that would run
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// The scan
// ---------------------------------------------------------------------------------------

/// One code object scanned.
#[derive(Clone, Debug)]
struct Object {
    file: PathBuf,
    /// Where its bundle starts in the file (0 for a Tensile file).
    bundle_at: u64,
    target: String,
    compressed: bool,
    size: usize,
    cached: bool,
    sites: Result<Sites, String>,
}

/// A code object the scan did not read: where, and why.
#[derive(Clone, Debug)]
struct Unscanned {
    file: PathBuf,
    bundle_at: u64,
    why: String,
}

/// Unscanned objects listed per library, at most (all are counted).
const UNSCANNED_LISTED: usize = 100;

/// One library's code for the card.
#[derive(Clone, Debug)]
struct Library {
    index: usize,
    name: String,
    path: PathBuf,
    objects: Vec<Object>,
    unscanned: Vec<Unscanned>,
    unscanned_count: usize,
    bytes: u64,
}

/// Totals over code objects.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    objects: usize,
    kernels: usize,
    functions: usize,
    instructions: usize,
    undecodable: usize,
    counts: [usize; 12],
    otherwise: usize,
    errors: usize,
}

impl Totals {
    fn add(&mut self, o: &Object) {
        self.objects += 1;
        match &o.sites {
            Ok(s) => {
                self.kernels += s.kernels;
                self.functions += s.functions;
                self.instructions += s.instructions;
                self.undecodable += s.undecodable;
                for (t, n) in self.counts.iter_mut().zip(s.counts) {
                    *t += n;
                }
                self.otherwise += s.otherwise;
            }
            Err(_) => self.errors += 1,
        }
    }

    /// Sites certain to run wrongly (possible ones apart: [`Totals::harm`] of
    /// `Harm::IfMisaligned`).
    fn sites(&self) -> usize {
        Bug::ALL
            .iter()
            .filter(|b| certain(b.harm()))
            .map(|b| self.counts[b.index()])
            .sum()
    }

    fn harm(&self, h: Harm) -> usize {
        Bug::ALL
            .iter()
            .filter(|b| b.harm() == h)
            .map(|b| self.counts[b.index()])
            .sum()
    }

    fn to_json(self) -> Value {
        json!({
            "code_objects": self.objects,
            "kernels": self.kernels,
            "functions": self.functions,
            "instructions": self.instructions,
            "undecodable": self.undecodable,
            "unreadable": self.errors,
            "gfx101x_sites": sites_json(&self.counts),
            "gfx101x_decodes_otherwise": { "count": self.otherwise },
            "fault": self.harm(Harm::Fault),
            "hang": self.harm(Harm::Hang),
            "race": self.harm(Harm::Race),
            "if_misaligned": self.harm(Harm::IfMisaligned),
        })
    }
}

impl Library {
    fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for o in &self.objects {
            t.add(o);
        }
        t
    }

    fn top(&self) -> Vec<Top> {
        let mut all: Vec<Top> = self
            .objects
            .iter()
            .filter_map(|o| o.sites.as_ref().ok())
            .flat_map(|s| s.top.iter().cloned())
            .collect();
        sort_top(&mut all);
        all.truncate(TOP);
        all
    }
}

/// The scan for one GPU.
#[derive(Clone, Debug)]
pub struct Scan {
    node: u32,
    card: Gfx,
    runtime: Gfx,
    libraries: Vec<Library>,
    bytes: u64,
    /// The bounds that stopped the scan, in words.
    stopped: Vec<String>,
    bounds: Bounds,
    cache: Value,
}

/// Whether the scan applies to the GPU: gfx101x silicon the runtime gives gfx103x code.
fn applies(gpu: &Gpu) -> Option<(Gfx, Gfx)> {
    let (card, rt) = (gpu.gfx, gpu.runtime_gfx());
    (card.major() == 10 && card.minor() == 1 && rt.major() == 10 && rt.minor() == 3)
        .then_some((card, rt))
}

/// One unit of work: a bundle (or a Tensile file) of a library.
struct Job {
    source: usize,
    file: PathBuf,
    at: u64,
    end: u64,
}

fn jobs(sources: &[CodeSource<'_>], dev: &Device) -> Vec<Job> {
    let mut out = Vec::new();
    for (si, s) in sources.iter().enumerate() {
        match &s.at {
            CodeAt::Fatbin { bundles, end } => {
                for (i, (at, _, targets)) in bundles.iter().enumerate() {
                    if !targets.iter().any(|t| t.runs_on(dev)) {
                        continue;
                    }
                    let next = bundles.get(i + 1).map_or(*end, |b| b.0);
                    out.push(Job {
                        source: si,
                        file: s.path.to_path_buf(),
                        at: *at,
                        end: next,
                    });
                }
            }
            CodeAt::Tensile => {
                for e in sorted_entries(s.path) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let code = name.ends_with(".co") || name.ends_with(".hsaco");
                    let runs = co::tensile_target(&name).is_some_and(|t| t.runs_on(dev));
                    if !code || !runs || !e.file_type().is_ok_and(|t| t.is_file()) {
                        continue;
                    }
                    let len = e.metadata().map_or(0, |m| m.len());
                    out.push(Job {
                        source: si,
                        file: e.path(),
                        at: 0,
                        end: len,
                    });
                }
            }
        }
    }
    out
}

/// What the run has used of its bounds, and the progress line.
struct Run {
    start: Instant,
    bytes: u64,
    bounds: Bounds,
    progress: Progress,
}

/// A one-line progress report on stderr, redrawn at most 10 times a second.
struct Progress {
    on: bool,
    last: Option<Instant>,
    shown: bool,
}

impl Progress {
    fn tick(&mut self, line: impl FnOnce() -> String) {
        if !self.on
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(Instant::now());
        let mut l: String = line().chars().take(79).collect();
        l.insert(0, '\r');
        l.push_str("\x1b[K");
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(l.as_bytes()).and_then(|()| e.flush());
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(b"\r\x1b[K").and_then(|()| e.flush());
            self.shown = false;
        }
    }
}

fn scan_gpu(
    sources: &[CodeSource<'_>],
    gpu: &Gpu,
    card: Gfx,
    rt: Gfx,
    cache: &mut Cache,
    run: &mut Run,
) -> Scan {
    let dev = Device::from_gfx(rt);
    let work = jobs(sources, &dev);
    let mut libraries: Vec<Library> = Vec::new();
    let mut stopped: Vec<String> = Vec::new();
    let mut scan_bytes = 0u64;
    let mut open: Option<(PathBuf, Result<File, String>)> = None;
    let total = work.len();
    for (done, job) in work.into_iter().enumerate() {
        let s = &sources[job.source];
        if libraries.last().is_none_or(|l| l.index != s.index) {
            libraries.push(Library {
                index: s.index,
                name: s.name.clone(),
                path: s.path.to_path_buf(),
                objects: Vec::new(),
                unscanned: Vec::new(),
                unscanned_count: 0,
                bytes: 0,
            });
        }
        let lib = libraries.last_mut().expect("pushed above");
        let b = run.bounds;
        let file_name = job
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        run.progress.tick(|| {
            format!(
                "{rt} code for {card}: {done}/{total} code objects, {}, {file_name}",
                mib(run.bytes)
            )
        });
        let bound = if run.start.elapsed() >= Duration::from_secs(b.seconds) {
            Some(format!("the {} s time bound", b.seconds))
        } else if run.bytes >= b.total_bytes {
            Some(format!("the {} bound on the run", mib(b.total_bytes)))
        } else if lib.bytes >= b.library_bytes {
            Some(format!("the {} bound per library", mib(b.library_bytes)))
        } else {
            None
        };
        let skip = |lib: &mut Library, why: String| {
            lib.unscanned_count += 1;
            if lib.unscanned.len() < UNSCANNED_LISTED {
                lib.unscanned.push(Unscanned {
                    file: job.file.clone(),
                    bundle_at: job.at,
                    why,
                });
            }
        };
        if let Some(why) = bound {
            if !stopped.contains(&why) {
                stopped.push(why.clone());
            }
            skip(lib, format!("not read: {why}"));
            continue;
        }
        if open.as_ref().is_none_or(|(p, _)| *p != job.file) {
            let f = crate::input::open_regular(&job.file).map_err(|e| e.why);
            open = Some((job.file.clone(), f));
        }
        let f = match open.as_ref().map(|(_, f)| f) {
            Some(Ok(f)) => f,
            Some(Err(why)) => {
                skip(lib, why.clone());
                continue;
            }
            None => continue,
        };
        match read_object(f, job.at, job.end, &dev, rt, b.object_bytes) {
            Got::Nothing => {}
            Got::TooBig(n) => skip(
                lib,
                format!(
                    "{}, over the {} bound per code object",
                    mib(n),
                    mib(b.object_bytes)
                ),
            ),
            Got::Bad(why) => skip(lib, why),
            Got::Object {
                bytes,
                target,
                compressed,
                ..
            } => {
                run.bytes += bytes.len() as u64;
                lib.bytes += bytes.len() as u64;
                scan_bytes += bytes.len() as u64;
                let key = Cache::key(&bytes, card);
                let (sites, cached) = match cache.get(&key) {
                    Some(s) => (Ok(s), true),
                    None => {
                        let s = Sites::of(&bytes, card);
                        if let Ok(s) = &s {
                            cache.put(key, s);
                        }
                        (s, false)
                    }
                };
                let target = match (&sites, target.is_empty()) {
                    (Ok(s), true) => s.target.clone(),
                    _ => target,
                };
                lib.objects.push(Object {
                    file: job.file.clone(),
                    bundle_at: job.at,
                    target,
                    compressed,
                    size: bytes.len(),
                    cached,
                    sites,
                });
            }
        }
    }
    libraries.retain(|l| !l.objects.is_empty() || l.unscanned_count > 0);
    Scan {
        node: gpu.node,
        card,
        runtime: rt,
        libraries,
        bytes: scan_bytes,
        stopped,
        bounds: run.bounds,
        cache: Value::Null,
    }
}

/// Scans, for each GPU it applies to, the code the runtime would load on it (None for the
/// others). `progress`: a progress line on stderr (a terminal, and not `--json`).
pub fn scan(scanned: &Scanned, gpus: &[Gpu], progress: bool) -> Vec<Option<Scan>> {
    let wanted: Vec<Option<(Gfx, Gfx)>> = gpus.iter().map(applies).collect();
    if wanted.iter().all(Option::is_none) {
        return gpus.iter().map(|_| None).collect();
    }
    let sources = code_sources(scanned);
    let mut cache = Cache::open();
    let mut run = Run {
        start: Instant::now(),
        bytes: 0,
        bounds: Bounds::from_env(),
        progress: Progress {
            on: progress,
            last: None,
            shown: false,
        },
    };
    let mut out: Vec<Option<Scan>> = Vec::new();
    for (g, w) in gpus.iter().zip(&wanted) {
        let Some((card, rt)) = *w else {
            out.push(None);
            continue;
        };
        // Another GPU of the same ISA under the same override: the same code, the same sites.
        let same = out
            .iter()
            .flatten()
            .find(|s| s.card == card && s.runtime == rt)
            .cloned();
        let s = match same {
            Some(mut s) => {
                s.node = g.node;
                s
            }
            None => scan_gpu(&sources, g, card, rt, &mut cache, &mut run),
        };
        out.push(Some(s));
    }
    run.progress.clear();
    cache.save();
    let cache_json = cache.to_json();
    for s in out.iter_mut().flatten() {
        s.cache = cache_json.clone();
    }
    out
}

// ---------------------------------------------------------------------------------------
// What the report says
// ---------------------------------------------------------------------------------------

fn object_json(o: &Object) -> Value {
    let empty = Sites::default();
    let (s, error) = match &o.sites {
        Ok(s) => (s, Value::Null),
        Err(e) => (&empty, Value::from(e.as_str())),
    };
    json!({
        "file": o.file.display().to_string(),
        "bundle_offset": o.bundle_at,
        "target": o.target,
        "compressed": o.compressed,
        "size": o.size,
        "cache": if o.cached { "hit" } else { "miss" },
        "gfx103x": s.gfx103x,
        "kernels": s.kernels,
        "functions": s.functions,
        "instructions": s.instructions,
        "undecodable": s.undecodable,
        "gfx101x_sites": sites_json(&s.counts),
        "gfx101x_decodes_otherwise": {
            "count": s.otherwise,
            "first_offset": s.first_otherwise.as_ref().map(|f| f.0),
            "first_function": s.first_otherwise.as_ref().and_then(|f| f.1.clone()),
        },
        "error": error,
    })
}

fn library_json(l: &Library, scan: &Scan) -> Value {
    let mut v = l.totals().to_json();
    let m = v.as_object_mut().expect("an object");
    m.insert("card".into(), scan.card.to_string().into());
    m.insert("runtime_gfx".into(), scan.runtime.to_string().into());
    m.insert(
        "most_sites".into(),
        l.top()
            .iter()
            .map(|t| json!({"function": t.name, "fault_or_hang": t.fault_or_hang, "race": t.race}))
            .collect::<Vec<_>>()
            .into(),
    );
    m.insert(
        "objects".into(),
        l.objects.iter().map(object_json).collect::<Vec<_>>().into(),
    );
    m.insert("unscanned_count".into(), l.unscanned_count.into());
    m.insert(
        "unscanned".into(),
        l.unscanned
            .iter()
            .map(|u| {
                json!({"file": u.file.display().to_string(), "bundle_offset": u.bundle_at, "why": u.why})
            })
            .collect::<Vec<_>>()
            .into(),
    );
    v
}

/// `fault or hang: offset-3f-bug 2, decoded otherwise 1; race: vcmpx-exec-war-hazard 5`.
fn classes(t: &Totals) -> String {
    let list = |race: bool| -> Vec<String> {
        Bug::ALL
            .iter()
            .filter(|b| {
                certain(b.harm()) && (b.harm() == Harm::Race) == race && t.counts[b.index()] > 0
            })
            .map(|b| format!("{} {}", b.mattr(), t.counts[b.index()]))
            .collect()
    };
    let mut bad = list(false);
    if t.otherwise > 0 {
        bad.push(format!("decoded otherwise {}", t.otherwise));
    }
    let race = list(true);
    let mut parts = Vec::new();
    if !bad.is_empty() {
        parts.push(format!("fault or hang: {}", bad.join(", ")));
    }
    if !race.is_empty() {
        parts.push(format!("race: {}", race.join(", ")));
    }
    let possible = t.harm(Harm::IfMisaligned);
    if possible > 0 {
        parts.push(format!(
            "wrong only if misaligned (alignment not known from the code): {} {possible}",
            Bug::LdsMisaligned.mattr()
        ));
    }
    if parts.is_empty() {
        "no site found".to_string()
    } else {
        parts.join("; ")
    }
}

/// A mangled C++ name cut to fit a detail line.
fn short_name(n: &str) -> String {
    if n.chars().count() <= 60 {
        n.to_string()
    } else {
        format!("{}...", n.chars().take(57).collect::<String>())
    }
}

fn library_line(l: &Library) -> String {
    let t = l.totals();
    let from_cache = l.objects.iter().filter(|o| o.cached).count();
    let mut s = format!(
        "{} {}: {} kernels in {} code object{}",
        l.name,
        l.path.display(),
        t.kernels,
        t.objects,
        if t.objects == 1 { "" } else { "s" }
    );
    if from_cache > 0 {
        s.push_str(&format!(" ({from_cache} from the cache)"));
    }
    s.push_str(&format!("; {}", classes(&t)));
    let top = l.top();
    if !top.is_empty() {
        let names: Vec<String> = top
            .iter()
            .map(|t| format!("{} ({})", short_name(&t.name), t.total()))
            .collect();
        s.push_str(&format!("; most sites: {}", names.join(", ")));
    }
    if t.undecodable > 0 {
        s.push_str(&format!(
            "; {} functions not decoded to the end",
            t.undecodable
        ));
    }
    if t.errors > 0 {
        s.push_str(&format!("; {} code objects not readable", t.errors));
    }
    if l.unscanned_count > 0 {
        let why = l.unscanned.first().map(|u| u.why.as_str()).unwrap_or("");
        s.push_str(&format!(
            "; {} code object{} not scanned ({why}{})",
            l.unscanned_count,
            if l.unscanned_count == 1 { "" } else { "s" },
            if l.unscanned_count > 1 { ", ..." } else { "" }
        ));
    }
    s.push('.');
    s
}

fn totals(scan: &Scan) -> Totals {
    let mut t = Totals::default();
    for o in scan.libraries.iter().flat_map(|l| &l.objects) {
        t.add(o);
    }
    t
}

fn library_names(scan: &Scan) -> String {
    let names: Vec<&str> = scan.libraries.iter().map(|l| l.name.as_str()).collect();
    match names.len() {
        0 => String::new(),
        1 => names[0].to_string(),
        n if n <= 3 => format!("{} and {}", names[..n - 1].join(", "), names[n - 1]),
        n => format!("{} and {} more", names[..2].join(", "), n - 2),
    }
}

/// "M sites gfx1010 executes wrongly (F that fault, H that hang, R that race) and O
/// instructions it decodes otherwise".
fn counts_sentence(t: &Totals, card: Gfx) -> String {
    format!(
        "{} kernels, {} sites {card} executes wrongly ({} that fault, {} that hang, {} that \
         race), {} instructions it decodes otherwise, and {} multi-dword LDS accesses it gets \
         wrong if they are misaligned",
        t.kernels,
        t.sites(),
        t.harm(Harm::Fault),
        t.harm(Harm::Hang),
        t.harm(Harm::Race),
        t.otherwise,
        t.harm(Harm::IfMisaligned)
    )
}

fn incomplete(scan: &Scan) -> Option<String> {
    let n: usize = scan.libraries.iter().map(|l| l.unscanned_count).sum();
    (n > 0).then(|| {
        let why = if scan.stopped.is_empty() {
            "see the list below".to_string()
        } else {
            format!("stopped by {}", scan.stopped.join(" and "))
        };
        format!(
            "{n} code object{} not scanned ({why})",
            if n == 1 { " was" } else { "s were" }
        )
    })
}

/// The code-objects finding of each scan, and each library row's `gfx101x` entry.
/// `remedy` is the remedy of the GPU's gfx-override finding, when it has one.
pub fn findings(
    scans: &[Option<Scan>],
    rows: &mut [CodeObjectRow],
    remedy: &dyn Fn(u32) -> Option<Remedy>,
    out: &mut Vec<Finding>,
) {
    for (gi, scan) in scans.iter().enumerate() {
        let Some(scan) = scan else { continue };
        for l in &scan.libraries {
            if let Some(v) = rows.get_mut(l.index).and_then(|r| r.gpus.get_mut(gi)) {
                v.gfx101x = Some(library_json(l, scan));
            }
        }
        if scan.libraries.is_empty() {
            continue;
        }
        let t = totals(scan);
        let (card, rt) = (scan.card, scan.runtime);
        let mut msg = format!(
            "node {} ({card}): the {rt} code the runtime loads on it ({} code object{} of {}), \
             scanned for the twelve gfx101x hardware bugs LLVM works around only when it \
             compiles for gfx101x: {}.",
            scan.node,
            t.objects,
            if t.objects == 1 { "" } else { "s" },
            library_names(scan),
            counts_sentence(&t, card),
        );
        if let Some(s) = incomplete(scan) {
            msg.push_str(&format!(" {s}."));
        }
        let harmful = t.sites() + t.otherwise > 0;
        let status = if harmful { Status::Error } else { Status::Info };
        let mut f = Finding::new(Check::CodeObjects, status, msg).source(SRC_LLVM_AMDGPU_TD);
        if harmful {
            f = f.remedy(remedy(scan.node).unwrap_or_else(|| {
                Remedy::new(format!(
                    "Unset HSA_OVERRIDE_GFX_VERSION and use builds that carry {card} code \
                     (or gfx10-1-generic)."
                ))
                .command("unset HSA_OVERRIDE_GFX_VERSION")
            }));
        }
        f.details = scan.libraries.iter().map(library_line).collect();
        let cache = &scan.cache;
        f.details.push(format!(
            "read {} of code objects; {} of {} from the cache{}.",
            mib(scan.bytes),
            scan.libraries
                .iter()
                .flat_map(|l| &l.objects)
                .filter(|o| o.cached)
                .count(),
            t.objects,
            match (cache["dir"].as_str(), cache["problem"].as_str()) {
                (_, Some(p)) => format!(" ({p})"),
                (Some(d), None) => format!(" in {d}"),
                _ => String::new(),
            }
        ));
        out.push(
            f.with("node", scan.node)
                .with("gfx", card.to_string())
                .with("runtime_gfx", rt.to_string())
                .with("verdict", "gfx101x-sites")
                .with(
                    "paths",
                    scan.libraries
                        .iter()
                        .map(|l| l.path.display().to_string())
                        .collect::<Vec<_>>(),
                )
                .with("gfx101x", t.to_json())
                .with(
                    "gfx101x_scan",
                    json!({
                        "bytes": scan.bytes,
                        "bounds": scan.bounds.to_json(),
                        "stopped": scan.stopped,
                        "unscanned": scan.libraries.iter().map(|l| l.unscanned_count).sum::<usize>(),
                        "cache": scan.cache,
                    }),
                ),
        );
    }
}

/// What the GPU's gfx-override finding adds: a sentence with the totals, and its
/// `gfx101x` field. None when there was no such code to scan.
pub fn override_citation(scan: &Scan) -> Option<(String, Value)> {
    if scan.libraries.is_empty() {
        return None;
    }
    let t = totals(scan);
    let mut s = format!(
        "In the {} code of {} it would run: {}.",
        scan.runtime,
        library_names(scan),
        counts_sentence(&t, scan.card)
    );
    if let Some(i) = incomplete(scan) {
        s.pop();
        s.push_str(&format!("; {i}."));
    }
    let mut v = t.to_json();
    v["libraries"] = scan
        .libraries
        .iter()
        .map(|l| l.path.display().to_string())
        .collect::<Vec<_>>()
        .into();
    v["complete"] = incomplete(scan).is_none().into();
    Some((s, v))
}

/// The node a scan is for.
pub fn node(scan: &Scan) -> u32 {
    scan.node
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_bounds_from_the_variable() {
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("3K"), Some(3 << 10));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(mib(1), "1 byte");
        assert_eq!(mib(1024), "1 KiB");
        assert_eq!(mib(1025), "2 KiB");
        assert_eq!(mib(182 << 20), "182 MiB");
        assert_eq!(mib(3 << 30), "3.0 GiB");
    }

    #[test]
    fn sites_json_has_the_twelve_mattr_names() {
        let v = sites_json(&[1; 12]);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want: Vec<&str> = Bug::ALL.iter().map(|b| b.mattr()).collect();
        want.sort();
        assert_eq!(keys, want);
    }

    #[test]
    fn most_sites_put_faults_and_hangs_first() {
        let t = |n: &str, f, r| Top {
            name: n.into(),
            fault_or_hang: f,
            race: r,
        };
        let mut v = vec![t("a", 0, 50), t("b", 2, 0), t("c", 2, 9)];
        sort_top(&mut v);
        let names: Vec<&str> = v.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["c", "b", "a"]);
    }

    #[test]
    fn a_library_line_puts_faults_and_hangs_apart_from_races() {
        let mut counts = [0; 12];
        counts[Bug::VcmpxExecWar.index()] = 4000;
        counts[Bug::Offset3f.index()] = 2;
        counts[Bug::InstFwdPrefetch.index()] = 1;
        let sites = Sites {
            target: "gfx1030".into(),
            gfx103x: true,
            kernels: 10,
            functions: 12,
            instructions: 9000,
            undecodable: 0,
            counts,
            otherwise: 3,
            first_otherwise: Some((64, Some("k".into()))),
            top: vec![Top {
                name: "_Z6kernelPi".into(),
                fault_or_hang: 6,
                race: 40,
            }],
        };
        let lib = Library {
            index: 0,
            name: "rocSPARSE".into(),
            path: "/l.so".into(),
            objects: vec![Object {
                file: "/l.so".into(),
                bundle_at: 4096,
                target: "gfx1030".into(),
                compressed: false,
                size: 100,
                cached: true,
                sites: Ok(sites),
            }],
            unscanned: Vec::new(),
            unscanned_count: 0,
            bytes: 100,
        };
        assert_eq!(
            library_line(&lib),
            "rocSPARSE /l.so: 10 kernels in 1 code object (1 from the cache); fault or hang: \
             inst-fwd-prefetch-bug 1, offset-3f-bug 2, decoded otherwise 3; race: \
             vcmpx-exec-war-hazard 4000; most sites: _Z6kernelPi (46)."
        );
        let t = lib.totals();
        assert_eq!(
            (t.harm(Harm::Fault), t.harm(Harm::Hang), t.harm(Harm::Race)),
            (2, 1, 4000)
        );
        let v = library_json(
            &lib,
            &Scan {
                node: 1,
                card: Gfx::parse("gfx1010").unwrap(),
                runtime: Gfx::parse("gfx1030").unwrap(),
                libraries: Vec::new(),
                bytes: 0,
                stopped: Vec::new(),
                bounds: Bounds::default(),
                cache: Value::Null,
            },
        );
        assert_eq!(v["gfx101x_sites"]["vcmpx-exec-war-hazard"], 4000);
        assert_eq!(
            v["objects"][0]["gfx101x_decodes_otherwise"]["first_offset"],
            64
        );
        assert_eq!(
            v["objects"][0]["gfx101x_decodes_otherwise"]["first_function"],
            "k"
        );
        assert_eq!(v["most_sites"][0]["function"], "_Z6kernelPi");
    }
}
