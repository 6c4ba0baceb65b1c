//! The fat binaries a program or library hands the runtime at start-up (issue 40, item 2):
//! `__hipRegisterFatBinary(const void *data)`, called from the constructor clang emits,
//! with `data` a `__CudaFatBinaryWrapper` naming the object's offload bundle. Under an
//! override that makes a gfx1010-gfx1013 card run gfx103x code (the condition of
//! `module_load`'s in-place fixes: `gfx101x::card_and_isa`), the entry the runtime will load
//! is read and scanned (`rmcp_core::gfx101x::in_place_fixes`); when it has words to fix,
//! the runtime is handed, in place of `data`, a private wrapper naming a private bundle that
//! holds that one entry, fixed (never a copy of the whole bundle).
//!
//! Never worse than without the shim:
//! - the call goes on to the function the caller would have reached (`observed`'s
//!   `target`), with every register as the caller left it but `rdi`, which is the caller's
//!   unless a private copy was made; the runtime's answer goes straight to the caller;
//! - the caller's wrapper and bundle are only read (through `own_memory::read`: an
//!   unmapped byte is an error, never a fault), never written; anything unexpected (another
//!   magic or version, a malformed bundle, a panic) hands the caller's `data` on;
//! - where GPUs would load different entries of the bundle, nothing is substituted (said
//!   once): a one-entry copy would take the others' code away;
//! - a compressed bundle is read through `code_objects::pick` as the doctor reads one (only
//!   up to the entry's end); one of version 1, which does not say its size, is left as it
//!   is (said once);
//! - bounded: at most [`MAX_OBJECT`] bytes read per entry and [`MAX_SCAN`] scanned,
//!   [`MAX_SCANNED`] bytes read and [`MAX_TIME`] spent over the process's registrations
//!   (checked before each: one registration may end past it, by at most one entry's scan),
//!   [`MAX_KEPT`] bytes of private copies; past a bound, fat binaries are handed on as they
//!   are, said once (the first bound hit);
//! - off the hot path: registration happens once per fat binary, at start-up or when a
//!   library is loaded; launches are unchanged. Without an `HSA_OVERRIDE_GFX_VERSION*`
//!   variable in the environment, one look at the environment is all it costs.
//!
//! The copy lives for the process: the runtime keeps the wrapper's pointer and reads the
//! bundle lazily, when a kernel of it is first used on a device. `__hipUnregisterFatBinary`
//! is not hooked: the runtime calls it from the destructor clang emits, at exit or when a
//! library is unloaded with `dlclose`, and the runtime may still hold code objects it
//! extracted; a copy holds one entry of one fat binary, and [`MAX_KEPT`] bounds them all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rmcp_core::code_objects::ReadAt;
use rmcp_core::config::{Mode, OverrideFixes};
use rmcp_core::fatbin::{self, Loaded, WRAPPER_SIZE, Wrapper};
use rmcp_core::gfx::Gfx;
use rmcp_core::gfx101x;
use rmcp_core::module_load::{LoadAction, override_action};
use rmcp_core::remedy::OverrideValue;

use crate::stats::{self, OverrideEvent};

/// The largest entry read (a bigger one is handed on as it is).
const MAX_OBJECT: u64 = 256 << 20;
/// The largest entry scanned (decoded instruction by instruction, some 20 MB/s: about 1.6 s
/// at most) when it may hold a word to fix; a bigger one is handed on as it is.
const MAX_SCAN: u64 = 32 << 20;
/// Bytes read over all registrations of the process.
const MAX_SCANNED: u64 = 1 << 30;
/// Time spent over all registrations of the process.
const MAX_TIME: Duration = Duration::from_secs(2);
/// Bytes of private copies kept.
const MAX_KEPT: u64 = 512 << 20;

static SCANNED: AtomicU64 = AtomicU64::new(0);
static SPENT_NS: AtomicU64 = AtomicU64::new(0);
static KEPT: AtomicU64 = AtomicU64::new(0);

static SAID: AtomicBool = AtomicBool::new(false);
static SAID_BOUND: AtomicBool = AtomicBool::new(false);
static SAID_SEVERAL: AtomicBool = AtomicBool::new(false);
static SAID_COMPRESSED: AtomicBool = AtomicBool::new(false);

/// Memory of this process from `base`, read without trusting it: a read stops at the first
/// unmapped page (fewer bytes, or none: "the end of the data").
struct Own(usize);

impl ReadAt for Own {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(at) = usize::try_from(offset)
            .ok()
            .and_then(|o| self.0.checked_add(o))
        else {
            return Ok(0);
        };
        if crate::own_memory::read(at, buf) {
            return Ok(buf.len());
        }
        // Up to the end of the page that holds `at`.
        let page = 4096 - at % 4096;
        let n = buf.len().min(page);
        Ok(
            if n < buf.len() && crate::own_memory::read(at, &mut buf[..n]) {
                n
            } else {
                0
            },
        )
    }
}

/// Whether the environment holds `HSA_OVERRIDE_GFX_VERSION` or a per-node form of it, read
/// without allocating (this runs for every fat binary of every HIP process) and at each
/// registration: a program may set it before it loads its HIP libraries (Python's
/// `os.environ` before `import torch`).
fn override_in_environment() -> bool {
    unsafe extern "C" {
        static environ: *const *const std::ffi::c_char;
    }
    const NAME: &[u8] = b"HSA_OVERRIDE_GFX_VERSION";
    // The variable or a per-node form (HSA_OVERRIDE_GFX_VERSION_<node>): each entry, a
    // NUL-terminated "NAME=VALUE", compared up to the name's length (strncmp stops at the
    // NUL of a shorter one), as getenv reads them.
    // SAFETY: `environ` is the process's environment, a null-terminated array of
    // NUL-terminated strings, read as getenv reads it.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            if libc::strncmp(*p, NAME.as_ptr().cast(), NAME.len()) == 0 {
                return true;
            }
            p = p.add(1);
        }
    }
    false
}

/// The time the registrations under an override took so far.
fn spent() -> Duration {
    Duration::from_nanos(SPENT_NS.load(Relaxed))
}

/// What one registration ended as (counted and, once each, said by [`register`]).
enum Outcome {
    /// Handed on as it was: not under the override, nothing to fix, `off`, an exempt caller.
    Untouched,
    /// Handed on as it was without a scan, for this reason (a bound, several entries, ...).
    Left(Left),
    /// Read and scanned; what to do with its fixes.
    Scanned {
        card: Gfx,
        target: String,
        found: gfx101x::InPlace,
        action: LoadAction,
        /// The private wrapper handed on instead, when one was made.
        handed: Option<usize>,
        /// The keep bound turned a fix into a warning.
        full: bool,
    },
}

enum Left {
    Bound(String),
    Several,
    CompressedUnsized,
    Unreadable,
}

/// The `data` to hand the runtime for the caller's `data`, called from the caller at `ret`:
/// the caller's, or a private wrapper. Never panics out (the caller catches), never blocks.
pub(crate) fn register(data: usize, ret: usize) -> usize {
    if data == 0 || !override_in_environment() {
        return data;
    }
    let cfg = crate::state::config();
    if cfg.override_fixes == OverrideFixes::Off || cfg.mode == Mode::Off {
        return data;
    }
    let _no_cancel = crate::cancel::NoCancel::new();
    let started = Instant::now();
    let outcome = examine(data, ret);
    SPENT_NS.fetch_add(
        u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        Relaxed,
    );
    let what = || {
        format!(
            "__hipRegisterFatBinary (from {})",
            rmcp_sys::locate::object_of(ret).map_or_else(|| "?".to_string(), |(_, p)| p)
        )
    };
    match outcome {
        Outcome::Untouched => data,
        Outcome::Left(why) => {
            stats::record_override(OverrideEvent::FatBinariesLeft, 1);
            let (flag, text) = match why {
                Left::Bound(b) => (&SAID_BOUND, b),
                Left::Several => (
                    &SAID_SEVERAL,
                    "the GPUs of this machine would load different entries of its bundle: a \
                     private copy of one entry would take the others' code away, so it is \
                     handed to the runtime as it is"
                        .to_string(),
                ),
                Left::CompressedUnsized => (
                    &SAID_COMPRESSED,
                    "a compressed bundle of version 1, which does not say its size: handed to \
                     the runtime as it is, unread"
                        .to_string(),
                ),
                Left::Unreadable => return data,
            };
            if !flag.swap(true, Relaxed) {
                tracing::warn!(
                    "{}: {text}; its gfx103x code is not fixed in place under \
                     HSA_OVERRIDE_GFX_VERSION (further ones are counted, not logged)",
                    what()
                );
            }
            data
        }
        Outcome::Scanned {
            card,
            target,
            found,
            action,
            handed,
            full,
        } => {
            stats::record_override(OverrideEvent::FatBinaries, 1);
            let fixes = found.fixes.len();
            if fixes == 0 {
                return data;
            }
            if handed.is_some() {
                stats::record_override(OverrideEvent::Fixed, 1);
                stats::record_override(OverrideEvent::InstructionsFixed, fixes as u64);
            } else {
                stats::record_override(OverrideEvent::Warned, 1);
            }
            if !SAID.swap(true, Relaxed) {
                let fixable = crate::gfx101x::fixable_text(&found);
                let done = if handed.is_some() {
                    format!(
                        "rmcp handed the runtime a private copy of that entry alone in which \
                         {fixable} became s_nop 0 (same size, no result changed)"
                    )
                } else if full {
                    format!(
                        "rmcp already keeps {MAX_KEPT} bytes of private copies and handed it on \
                         as it is ({fixable})"
                    )
                } else if let LoadAction::Warn { dry_run: true } = action {
                    format!("RMCP_MODE=dry-run: rmcp would have replaced {fixable} by s_nop 0")
                } else {
                    format!(
                        "handed on as it is (RMCP_OVERRIDE_FIXES=warn): {fixable} would become \
                         s_nop 0"
                    )
                };
                tracing::warn!(
                    "{} registered a fat binary whose {target} entry is gfx103x code that this \
                     {card} runs under HSA_OVERRIDE_GFX_VERSION: {done}; left, not fixable in \
                     place: {}. `rmcp doctor` names the libraries and kernels; unset the \
                     override to run this card's own code (further fat binaries are counted, \
                     not logged)",
                    what(),
                    crate::gfx101x::left_text(&found),
                );
            }
            handed.unwrap_or(data)
        }
    }
}

/// Whether `object` may hold a word an in-place fix changes: `s_inst_prefetch` (SOPP op
/// 0x20, `0xbfa0....`) or `s_clause` (SOPP op 0x21, `0xbfa1....`), at any byte. One pass over
/// the bytes, against the scan's decoding of every instruction: an entry without such a
/// word (most code; a literal that looks like one only costs the scan) is not scanned.
fn may_hold_fixable(object: &[u8]) -> bool {
    object
        .windows(2)
        .any(|w| w[1] == 0xbf && (w[0] == 0xa0 || w[0] == 0xa1))
}

/// Reads, scans and, when it is to be fixed, copies the fat binary `data` names.
fn examine(data: usize, ret: usize) -> Outcome {
    let global = crate::report::global();
    let cfg = global.config;
    let Some((card, isa)) = crate::gfx101x::card_and_isa(global.topology.as_ref()) else {
        return Outcome::Untouched;
    };
    if crate::binding::for_caller(ret, cfg).is_some_and(|b| b.exempt) {
        return Outcome::Untouched;
    }
    if spent() > MAX_TIME {
        return Outcome::Left(Left::Bound(format!(
            "rmcp spent {} s on the fat binaries registered under the override before this \
             one: it and every later one are handed to the runtime as they are",
            MAX_TIME.as_secs()
        )));
    }
    if SCANNED.load(Relaxed) >= MAX_SCANNED {
        return Outcome::Left(Left::Bound(format!(
            "rmcp read {MAX_SCANNED} bytes of the fat binaries registered under the override \
             before this one: it and every later one are handed to the runtime as they are"
        )));
    }
    let mut head = [0u8; WRAPPER_SIZE];
    if !crate::own_memory::read(data, &mut head) {
        return Outcome::Left(Left::Unreadable);
    }
    let Some(wrapper) = Wrapper::parse(&head) else {
        return Outcome::Untouched;
    };
    let Ok(binary) = usize::try_from(wrapper.binary) else {
        return Outcome::Left(Left::Unreadable);
    };
    let mem = Own(binary);
    // The runtime ISA of each GPU: the override's (per node, else the plain variable), else
    // its own.
    let mut isas: Vec<Gfx> = global
        .topology
        .as_ref()
        .map(|t| {
            t.gpus
                .iter()
                .map(|g| {
                    crate::report::override_now(g.node)
                        .as_deref()
                        .and_then(OverrideValue::parse)
                        .map_or(g.gfx, OverrideValue::gfx)
                })
                .filter(|g| g.0 != 0)
                .collect()
        })
        .unwrap_or_default();
    isas.sort_by_key(|g| g.0);
    isas.dedup();
    let (bytes, target, id, host) = match fatbin::entry_to_load(&mem, &isas, isa, MAX_OBJECT) {
        Loaded::Entry {
            object,
            target,
            id,
            host,
        } => (object, target, id, host),
        Loaded::Nothing => return Outcome::Untouched,
        Loaded::Several => return Outcome::Left(Left::Several),
        Loaded::CompressedUnsized => return Outcome::Left(Left::CompressedUnsized),
        Loaded::TooBig(n) => {
            return Outcome::Left(Left::Bound(format!(
                "an entry of {n} bytes, over rmcp's bound of {MAX_OBJECT} read per entry: \
                 handed to the runtime as it is"
            )));
        }
        Loaded::Bad(_) => return Outcome::Left(Left::Unreadable),
    };
    SCANNED.fetch_add(bytes.len() as u64, Relaxed);
    if !may_hold_fixable(&bytes) {
        // Nothing to fix in place: the scan (which decodes every instruction) is spared.
        return Outcome::Scanned {
            card,
            target,
            found: gfx101x::InPlace::default(),
            action: LoadAction::Forward,
            handed: None,
            full: false,
        };
    }
    if bytes.len() as u64 > MAX_SCAN {
        return Outcome::Left(Left::Bound(format!(
            "its {target} entry of {} bytes may hold words to fix, over rmcp's bound of \
             {MAX_SCAN} bytes scanned per entry: handed to the runtime as it is",
            bytes.len()
        )));
    }
    let Ok(found) = gfx101x::in_place_fixes(&bytes, card) else {
        return Outcome::Left(Left::Unreadable);
    };
    let mut action = override_action(cfg.override_fixes, cfg.mode, true, found.fixes.len());
    let mut handed = None;
    let mut full = false;
    if action == LoadAction::Fix {
        let fixed = gfx101x::apply(&bytes, &found.fixes);
        let bundle = fixed.map(|f| fatbin::single_entry_bundle(host.as_deref(), &id, &f));
        match bundle {
            Some(b) if KEPT.load(Relaxed).saturating_add(b.len() as u64) > MAX_KEPT => {
                action = LoadAction::Warn { dry_run: false };
                full = true;
            }
            Some(b) => {
                KEPT.fetch_add(b.len() as u64, Relaxed);
                // Both live for the process: the runtime keeps the wrapper's pointer and
                // reads the bundle when a kernel of it is first used.
                let bundle: &'static [u8] = Box::leak(b.into_boxed_slice());
                let w = Wrapper {
                    binary: bundle.as_ptr() as u64,
                    dummy: wrapper.dummy,
                };
                let words: &'static [u64; 3] = Box::leak(Box::new(w.words()));
                handed = Some(words.as_ptr() as usize);
                crate::gfx101x::fixed_in_place(&bytes);
            }
            None => action = LoadAction::Forward,
        }
    }
    Outcome::Scanned {
        card,
        target,
        found,
        action,
        handed,
        full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_object_with_a_prefetch_or_clause_word_is_scanned() {
        let word = |w: u32| w.to_le_bytes().to_vec();
        // s_inst_prefetch 0x1, s_clause 0x2, s_nop 0, v_add_f32 v1, v2, v3.
        assert!(may_hold_fixable(&word(0xbfa0_0001)));
        assert!(may_hold_fixable(&[&[0u8][..], &word(0xbfa1_0002)].concat()));
        assert!(!may_hold_fixable(
            &[word(0xbf80_0000), word(0x0602_0702)].concat()
        ));
        assert!(!may_hold_fixable(&[]));
    }

    #[test]
    fn own_memory_reads_stop_at_an_unmapped_page() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut buf = vec![0u8; 100];
        assert_eq!(
            Own(data.as_ptr() as usize).read_at(50, &mut buf).unwrap(),
            100
        );
        assert_eq!(buf, data[50..150]);
        assert_eq!(Own(8).read_at(0, &mut buf).unwrap(), 0);
        assert_eq!(Own(usize::MAX - 2).read_at(10, &mut buf).unwrap(), 0);
    }
}
