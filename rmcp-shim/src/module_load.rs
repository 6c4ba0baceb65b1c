//! The load-time fix (issue 34): what the hooks of `hipModuleLoadData` and
//! `hipModuleLoadDataEx` do with the image they are given, and what `hipModuleLoad`'s hook
//! says about the file it loaded (their counters are `stats`'s, the report's
//! `buffer_descriptors`). The image is read without trusting the pointer, scanned by
//! `rmcp_core::buffer_descriptors`, and by `rmcp_core::module_load::decide` forwarded as it
//! is, forwarded with a warning, or replaced by a private copy in which only the broken
//! descriptor literals are rewritten (Triton's buffer ops on gfx1010-gfx1013).
//!
//! Never worse than without the shim:
//! - the caller's image is only read (through `process_vm_readv`, so a bad or truncated
//!   pointer is an error here, never a fault), never written; a length the image's own
//!   headers do not give, a malformed image, or any failure of the shim's own steps (a panic
//!   included) forwards the caller's call unchanged;
//! - a fixed call that fails with anything but out-of-memory is made again with the caller's
//!   image, and that answer is returned; answers reach the caller bit for bit;
//! - the runtime keeps the image pointer for the module's life (clr's `FatBinaryInfo` keeps
//!   it and `addDeviceProgram` is given it without a copy), so a fixed copy is kept until
//!   the last module loaded from it is unloaded (`hipModuleUnload` succeeded: [`unloaded`]),
//!   once per content (an image loaded again while its copy is kept gets that copy), at
//!   most [`MAX_KEPT`] bytes in all (past that, images are forwarded as they are, said
//!   once); where the lists cannot be had without waiting, a copy is kept for the process's
//!   life instead;
//! - nothing runs for a process that never loads a module; `RMCP_BUFFER_DESCRIPTORS=off` or
//!   `RMCP_MODE=off` reads nothing at all.
//!
//! `hipModuleLoad` is forwarded unchanged: loading a fixed copy would mean reading the file
//! and calling `hipModuleLoadData` instead, a different call (the runtime maps the file,
//! names it in its own logs and tools). After the call, a broken gfx1010-gfx1013 file is
//! named in one warning.

use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use rmcp_core::buffer_descriptors::{self as descriptors, ImageScan};
use rmcp_core::config::{Mode, OverrideFixes};
use rmcp_core::gfx::Gfx;
use rmcp_core::gfx101x;
use rmcp_core::module_load::{self as decision, LoadAction, LoadDevice, Scanned};
use rmcp_core::policy;
use rmcp_sys::{HipApi, HipError, error};

use crate::binding::Binding;
use crate::intercept::{Call, Caller, binding_of, describe_caller, forward_bare};
use crate::state::Global;
use crate::stats::{self, Image, Outcome};
use crate::thread::{self, ThreadState};

/// The largest image the shim reads; a larger one is forwarded as it is.
const MAX_IMAGE: usize = 256 << 20;
/// The most bytes of fixed copies kept at once.
const MAX_KEPT: u64 = 1 << 30;

static KEPT: AtomicU64 = AtomicU64::new(0);
static SAID: AtomicBool = AtomicBool::new(false);
static SAID_FULL: AtomicBool = AtomicBool::new(false);
static SAID_FALLBACK: AtomicBool = AtomicBool::new(false);
static SAID_OVERRIDE: AtomicBool = AtomicBool::new(false);
static SAID_OVERRIDE_FILE: AtomicBool = AtomicBool::new(false);

/// The image at `image` as the caller handed it: its length from its own headers, its
/// bytes copied. None: not readable as a code object (or larger than [`MAX_IMAGE`]).
fn read_image(image: *const c_void) -> Option<Vec<u8>> {
    if image.is_null() {
        return None;
    }
    let base = image as usize;
    let len = descriptors::image_len(&mut |offset: usize, buf: &mut [u8]| {
        base.checked_add(offset).is_some_and(|at| {
            at.checked_add(buf.len()).is_some() && crate::own_memory::read(at, buf)
        })
    })?;
    if len == 0 || len > MAX_IMAGE {
        return None;
    }
    let mut bytes = vec![0u8; len];
    crate::own_memory::read(base, &mut bytes).then_some(bytes)
}

/// What one broken image holds: its gfx1010-gfx1013 code objects with findings.
#[derive(Clone, Debug, Default)]
struct Broken {
    /// The first such object's target (`amdgcn-amd-amdhsa--gfx1010`, ...).
    target: String,
    kernels: usize,
    /// The literals (`s_mov_b32` instructions) a fix rewrites.
    literals: usize,
    /// The buffer instructions they feed.
    buffer_instructions: usize,
}

impl Broken {
    /// "N descriptor literal(s) feeding N buffer instruction(s) in N kernel(s)".
    fn counts(&self) -> String {
        let n = |k: usize, one: &str| format!("{k} {one}{}", if k == 1 { "" } else { "s" });
        format!(
            "{} feeding {} in {}",
            n(self.literals, "descriptor literal"),
            n(self.buffer_instructions, "buffer instruction"),
            n(self.kernels, "kernel")
        )
    }
}

fn broken(scan: &ImageScan) -> Option<Broken> {
    let mut b = Broken::default();
    for o in scan.objects.iter().filter(|o| o.runs_on_rdna1()) {
        if o.findings.is_empty() {
            continue;
        }
        if b.target.is_empty() {
            b.target = o
                .target
                .rsplit("--")
                .next()
                .unwrap_or(&o.target)
                .to_string();
        }
        b.literals += o.findings.len();
        b.buffer_instructions += o.findings.iter().map(|f| f.buffer_at.len()).sum::<usize>();
        let mut names: Vec<Option<&str>> = o.findings.iter().map(|f| f.kernel.as_deref()).collect();
        names.sort();
        names.dedup();
        b.kernels += names.len();
    }
    (b.literals > 0).then_some(b)
}

/// The device the module loads on: the KFD topology's GPUs (their real ISAs); on a machine
/// with gfx1010-gfx1013 and other GPUs, the calling thread's current device, when `ask`
/// allows a runtime query (`hipGetDevice` on the caller's thread, made before its own call,
/// as for hipExtMallocWithFlags on a mixed machine).
fn device(global: &Global, binding: &Binding, ask: bool) -> LoadDevice {
    let gpus: Vec<Gfx> = global
        .topology
        .as_ref()
        .map(|t| t.gpus.iter().map(|g| g.gfx).collect())
        .unwrap_or_default();
    decision::load_device(&gpus, || {
        if !ask {
            return None;
        }
        let copy = binding.copy?;
        let _no_cancel = crate::cancel::NoCancel::new();
        let current = crate::devices::current(&binding.api)?;
        copy.devices(global)
            .iter()
            .find(|d| usize::try_from(d.ordinal).ok() == Some(current))
            .map(|d| d.gfx)
            .filter(|g| g.0 != 0)
    })
}

/// What the shim prepared for one load.
struct Prepared {
    action: LoadAction,
    broken: Option<Broken>,
    /// Under an override that makes a gfx1010-gfx1013 card run gfx103x code: what can be
    /// fixed in place, what cannot, and what is done.
    overrides: Option<Overrides>,
    /// The fixed copy to forward (kept while a module uses it).
    fixed: Option<Handed>,
    /// The keep limit turned a fix into a warning.
    full: bool,
}

/// The in-place fixes of one image's gfx103x code (`gfx101x::in_place_fixes`).
struct Overrides {
    card: Gfx,
    action: LoadAction,
    found: gfx101x::InPlace,
    /// `RMCP_OVERRIDE_FIXES=off` (or `RMCP_MODE=off`): nothing done, nothing said.
    off: bool,
}

const UNTOUCHED: Prepared = Prepared {
    action: LoadAction::Forward,
    broken: None,
    overrides: None,
    fixed: None,
    full: false,
};

fn prepare(global: &Global, binding: &Binding, image: *const c_void) -> Prepared {
    let cfg = global.config;
    let card = crate::gfx101x::card(global.topology.as_ref());
    // An exempt caller (RMCP_EXEMPT) is left alone, its images too.
    if !decision::scans(
        cfg.buffer_descriptors,
        cfg.override_fixes,
        card.is_some(),
        cfg.mode,
    ) || binding.exempt
    {
        return UNTOUCHED;
    }
    stats::record_image(Image::Scanned, 1);
    let Some(bytes) = read_image(image) else {
        stats::record_image(Image::Unreadable, 1);
        return UNTOUCHED;
    };
    let Ok(scan) = descriptors::scan_image(&bytes) else {
        stats::record_image(Image::Unreadable, 1);
        return UNTOUCHED;
    };
    // Under an override that makes a gfx101x card run gfx103x code: its hardware-bug
    // sites, kept for the fault block, and what can be fixed in place.
    let overrides = card.and_then(|card| {
        crate::gfx101x::scan_loaded(card, &bytes);
        let found = gfx101x::in_place_fixes(&bytes, card).ok()?;
        let action =
            decision::override_action(cfg.override_fixes, cfg.mode, true, found.fixes.len());
        Some(Overrides {
            card,
            action,
            found,
            off: cfg.override_fixes == OverrideFixes::Off || cfg.mode == Mode::Off,
        })
    });
    let found = broken(&scan);
    let scanned = if found.is_some() {
        stats::record_image(Image::Broken, 1);
        Scanned::Broken
    } else {
        Scanned::Clean
    };
    let action = decision::decide(cfg.buffer_descriptors, cfg.mode, scanned, || {
        device(global, binding, true)
    });
    let mut p = Prepared {
        action,
        broken: found,
        overrides,
        fixed: None,
        full: false,
    };
    // One private copy with both fixes (they change words of different code objects).
    let mut copy: Option<Vec<u8>> = None;
    if action == LoadAction::Fix {
        copy = descriptors::fix_image(&bytes, &scan);
        if copy.is_none() {
            p.action = LoadAction::Forward;
        }
    }
    if let Some(o) = p.overrides.as_mut() {
        if o.action == LoadAction::Fix {
            match gfx101x::apply(copy.as_deref().unwrap_or(&bytes), &o.found.fixes) {
                Some(c) => copy = Some(c),
                None => o.action = LoadAction::Forward,
            }
        }
    }
    let Some(copy) = copy else {
        return p;
    };
    if copy.len() != bytes.len() {
        return UNTOUCHED;
    }
    let len = if is_kept(&copy) { 0 } else { copy.len() as u64 };
    if KEPT.load(Relaxed).saturating_add(len) > MAX_KEPT {
        if p.action == LoadAction::Fix {
            p.action = LoadAction::Warn { dry_run: false };
        }
        if let Some(o) = p.overrides.as_mut().filter(|o| o.action == LoadAction::Fix) {
            o.action = LoadAction::Warn { dry_run: false };
        }
        p.full = true;
        return p;
    }
    p.fixed = Some(keep(copy));
    p
}

/// A fixed copy handed to the runtime: where it is.
#[derive(Clone, Copy)]
struct Handed {
    at: *const u8,
}

/// A fixed copy kept: its bytes, and the loads that use it (a load in progress, then its
/// module until it is unloaded).
struct Kept {
    bytes: Box<[u8]>,
    users: usize,
}

/// The fixed copies kept, by content: one image loaded many times (an autotuner, a
/// notebook cell run again) is kept once. Locked only by module loads and unloads, never
/// waited for (a lock held across a fork by a thread the child does not have would never
/// be released): where it cannot be had, a copy is kept for the process's life instead.
static COPIES: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// The modules loaded from a kept copy: (module handle, the copy's address).
static MODULES: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Whether a copy with these bytes is kept already (it costs nothing more).
fn is_kept(copy: &[u8]) -> bool {
    COPIES
        .try_lock()
        .is_ok_and(|kept| kept.iter().any(|k| *k.bytes == *copy))
}

/// A fixed copy to hand the runtime, with one more user: the one already kept with the
/// same bytes, else `copy`, kept (the runtime keeps the pointer for the module's life:
/// module header).
fn keep(copy: Vec<u8>) -> Handed {
    let handed = |b: &[u8]| Handed { at: b.as_ptr() };
    let Ok(mut kept) = COPIES.try_lock() else {
        KEPT.fetch_add(copy.len() as u64, Relaxed);
        return handed(Box::leak(copy.into_boxed_slice()));
    };
    if let Some(same) = kept.iter_mut().find(|k| *k.bytes == *copy) {
        same.users += 1;
        return handed(&same.bytes);
    }
    KEPT.fetch_add(copy.len() as u64, Relaxed);
    let bytes = copy.into_boxed_slice();
    let h = handed(&bytes);
    kept.push(Kept { bytes, users: 1 });
    h
}

/// One user fewer for the copy at `at`; the last one frees it.
fn release(at: usize) {
    let Ok(mut kept) = COPIES.try_lock() else {
        return;
    };
    let Some(i) = kept.iter().position(|k| k.bytes.as_ptr() as usize == at) else {
        return;
    };
    kept[i].users = kept[i].users.saturating_sub(1);
    if kept[i].users == 0 {
        let gone = kept.swap_remove(i);
        KEPT.fetch_sub(gone.bytes.len() as u64, Relaxed);
    }
}

/// After a load that was handed `h`: the module that uses it, or (a failed load, a
/// fallback to the caller's image) one user fewer.
fn loaded_with(h: Handed, module: Option<usize>) {
    match module {
        Some(m) if m != 0 => {
            if let Ok(mut modules) = MODULES.try_lock() {
                modules.push((m, h.at as usize));
            }
        }
        _ => release(h.at as usize),
    }
}

/// After `hipModuleUnload(module)` succeeded: the copy the module was loaded from (if one
/// was) has one user fewer, and is freed when it was the last: the runtime is done with
/// it.
pub(crate) fn unloaded(module: *mut c_void) {
    let at = {
        let Ok(mut modules) = MODULES.try_lock() else {
            return;
        };
        let Some(i) = modules.iter().position(|(m, _)| *m == module as usize) else {
            return;
        };
        modules.swap_remove(i).1
    };
    release(at);
}

/// The body of the hooks of the rows marked `loads image from IMAGE`. `asked` makes the
/// caller's call with the image it is given.
pub(crate) fn load<const COPY: bool>(
    call: Call,
    image: *const c_void,
    asked: impl Fn(&HipApi, *const c_void) -> Option<HipError>,
) -> HipError {
    thread::with(|t| {
        let caller = Caller::of::<COPY>(call.ret);
        if t.inside() {
            return forward_bare(caller, &|api: &HipApi| asked(api, image));
        }
        // No guard with a destructor (crate::cancel), as in `intercept`.
        t.mark_inside();
        let rc = load_on(t, call, caller, image, &asked);
        t.leave();
        rc
    })
}

fn load_on(
    t: &ThreadState,
    call: Call,
    caller: Caller,
    image: *const c_void,
    asked: &impl Fn(&HipApi, *const c_void) -> Option<HipError>,
) -> HipError {
    let bare = |api: &HipApi| asked(api, image);
    let Ok(global) = catch_unwind(crate::report::global) else {
        return forward_bare(caller, &bare);
    };
    let Ok(Some(binding)) = catch_unwind(|| binding_of(caller, global.config)) else {
        return forward_bare(caller, &bare);
    };
    // A call without a module out-pointer fails in the runtime whatever the image: nothing
    // to read or fix.
    let prepared = if call.out.is_null() {
        UNTOUCHED
    } else {
        catch_unwind(AssertUnwindSafe(|| {
            let _no_cancel = crate::cancel::NoCancel::new();
            prepare(global, binding, image)
        }))
        .unwrap_or(UNTOUCHED)
    };
    let api = &binding.api;
    let lacks = std::cell::Cell::new(false);
    let make = |img: *const c_void| {
        asked(api, img).unwrap_or_else(|| {
            lacks.set(true);
            error::SHARED_OBJECT_SYMBOL_NOT_FOUND
        })
    };
    // From here to the bookkeeping: runtime calls and plain comparisons only.
    let mut fallback = false;
    let rc = match prepared.fixed {
        Some(copy) => {
            let rc = make(copy.at.cast());
            if policy::retry_as_asked(rc) && !lacks.get() {
                fallback = true;
                make(image)
            } else {
                rc
            }
        }
        None => make(image),
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(h) = prepared.fixed {
            let module = (rc == error::SUCCESS && !fallback).then(|| {
                // SAFETY: the call succeeded, so the runtime wrote the module through the
                // caller's out-pointer (non-null: `prepared.fixed` is None otherwise).
                unsafe { *call.out as usize }
            });
            loaded_with(h, module);
        }
        let fixed = prepared.fixed.is_some() && !fallback;
        stats::record(
            stats::slot(t),
            call.hook,
            Outcome {
                rewritten: fixed,
                fallback,
                error: rc != error::SUCCESS,
                bytes: 0,
                coherent: false,
            },
        );
        if lacks.get() {
            crate::intercept::missing(call.hook, "the loaded HIP runtime does not export it");
        }
        after(call, caller, &prepared, rc, fixed, fallback);
        crate::report::after_call(global, binding);
    }));
    rc
}

fn after(call: Call, caller: Caller, p: &Prepared, rc: HipError, fixed: bool, fallback: bool) {
    if let Some(o) = &p.overrides {
        after_overrides(call, caller, o, fixed, fallback, p.full);
    }
    let Some(b) = &p.broken else {
        return;
    };
    let what = format!(
        "{} (from {}) loaded a {} code object whose buffer instructions take descriptors in \
         a layout this GPU does not use (Triton's buffer ops: loads read 0, stores write \
         nothing): {}",
        call.hook.name(),
        describe_caller(caller),
        b.target,
        b.counts(),
    );
    if fallback {
        stats::record_image(Image::Fallback, 1);
        if SAID_FALLBACK.swap(true, Relaxed) {
            return;
        }
        tracing::warn!(
            "{what}; the runtime refused the fixed copy (rc={rc}) and loaded the original \
             (further fallbacks are counted, not logged)"
        );
        return;
    }
    match p.action {
        LoadAction::Fix if fixed => {
            stats::record_image(Image::Fixed, 1);
            stats::record_image(Image::InstructionsFixed, b.literals as u64);
            if !SAID.swap(true, Relaxed) {
                tracing::warn!(
                    "{what}; rmcp handed the runtime a private copy with those descriptors in \
                     the RDNA layout (word 3 0x00027000 becomes 0x31027000: bit 24 and \
                     OOB_SELECT 3 set), nothing else changed; RMCP_BUFFER_DESCRIPTORS=warn \
                     or off leaves images alone (further images are counted, not logged)"
                );
            }
        }
        LoadAction::Fix | LoadAction::Forward => {}
        LoadAction::Warn { dry_run } => {
            stats::record_image(Image::Warned, 1);
            if p.full && !SAID_FULL.swap(true, Relaxed) {
                tracing::warn!(
                    "{what}; rmcp already keeps {MAX_KEPT} bytes of fixed copies and loaded \
                     this one as it is"
                );
            } else if !SAID.swap(true, Relaxed) {
                tracing::warn!(
                    "{what}; loaded as it is ({}). To get correct results: set \
                     AMDGCN_USE_BUFFER_OPS=0 before Triton compiles and clear the kernels it \
                     cached (TRITON_CACHE_DIR, else ~/.triton/cache, and Inductor's), or let \
                     rmcp fix the images (RMCP_BUFFER_DESCRIPTORS=fix); `rmcp doctor` names \
                     the cached ones (further images are counted, not logged)",
                    if dry_run {
                        "RMCP_MODE=dry-run: rmcp would have fixed it"
                    } else {
                        "RMCP_BUFFER_DESCRIPTORS=warn"
                    }
                );
            }
        }
    }
}

/// What is said and counted of one load's in-place fixes under an override: once per
/// process, what was fixed (or would be) and what cannot be fixed in place.
fn after_overrides(
    call: Call,
    caller: Caller,
    o: &Overrides,
    fixed: bool,
    fallback: bool,
    full: bool,
) {
    let found = &o.found;
    let fixes = found.fixes.len();
    let left: usize = found.left.iter().sum();
    if o.off || (fixes == 0 && left == 0 && found.otherwise == 0) {
        return;
    }
    let applied = fixed && !fallback && o.action == LoadAction::Fix;
    if applied {
        stats::record_override(stats::OverrideEvent::Fixed, 1);
        stats::record_override(stats::OverrideEvent::InstructionsFixed, fixes as u64);
    } else if matches!(o.action, LoadAction::Warn { .. }) {
        stats::record_override(stats::OverrideEvent::Warned, 1);
    }
    if SAID_OVERRIDE.swap(true, Relaxed) {
        return;
    }
    let what = format!(
        "{} (from {}) loaded gfx103x code that this {} runs under HSA_OVERRIDE_GFX_VERSION",
        call.hook.name(),
        describe_caller(caller),
        o.card
    );
    let fixable = crate::gfx101x::fixable_text(found);
    let rest = crate::gfx101x::left_text(found);
    let done = if fixes == 0 {
        "nothing in it can be fixed in place".to_string()
    } else if applied {
        format!(
            "rmcp handed the runtime a private copy in which {fixable} became s_nop 0 (same \
             size, no result changed)"
        )
    } else if full {
        format!(
            "rmcp already keeps {MAX_KEPT} bytes of fixed copies and loaded it as it is ({fixable})"
        )
    } else if fallback {
        format!("the runtime refused the fixed copy and loaded the original ({fixable})")
    } else {
        match o.action {
            LoadAction::Warn { dry_run: true } => {
                format!("RMCP_MODE=dry-run: rmcp would have replaced {fixable} by s_nop 0")
            }
            _ => format!(
                "loaded as it is (RMCP_OVERRIDE_FIXES=warn): {fixable} would become s_nop 0"
            ),
        }
    };
    tracing::warn!(
        "{what}: {done}; left, not fixable in place: {rest}. `rmcp doctor` names the \
         libraries and kernels; unset the override to run this card's own code (further \
         images are counted, not logged)"
    );
}

/// After `hipModuleLoad` returned `rc`: a broken gfx1010-gfx1013 code object file, loaded on
/// a gfx1010-gfx1013 GPU, is named once (it is not fixed: module header). Only a regular
/// file of at most [`MAX_IMAGE`] bytes is read; the device is known without a runtime query
/// or not at all (a query now would change the caller's last error).
///
/// # Safety
/// `fname` is null or the caller's NUL-terminated path.
pub(crate) unsafe fn loaded_file<const COPY: bool>(rc: HipError, fname: *const c_char, ret: usize) {
    if rc != error::SUCCESS || fname.is_null() {
        return;
    }
    thread::with(|t| {
        if t.inside() {
            return;
        }
        let _inside = t.enter();
        let _no_cancel = crate::cancel::NoCancel::new();
        let Some(global) = crate::state::global_if_built() else {
            return;
        };
        let cfg = global.config;
        let card = crate::gfx101x::card(global.topology.as_ref());
        let descriptors_on =
            decision::scans(cfg.buffer_descriptors, OverrideFixes::Off, false, cfg.mode);
        let overrides_on = decision::scans(
            rmcp_core::config::BufferDescriptors::Off,
            cfg.override_fixes,
            card.is_some(),
            cfg.mode,
        );
        if !descriptors_on && !overrides_on {
            return;
        }
        let caller = Caller::of::<COPY>(ret);
        let Some(binding) = binding_of(caller, cfg).filter(|b| !b.exempt) else {
            return;
        };
        // SAFETY: per this function's contract.
        let path = unsafe { CStr::from_ptr(fname) };
        let path = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes()),
        );
        stats::record_image(Image::Scanned, 1);
        let Some(bytes) = read_file(path) else {
            stats::record_image(Image::Unreadable, 1);
            return;
        };
        if let (Some(card), true) = (card, overrides_on) {
            file_under_override(caller, path, card, &bytes);
        }
        if !descriptors_on {
            return;
        }
        let Ok(scan) = descriptors::scan_image(&bytes) else {
            stats::record_image(Image::Unreadable, 1);
            return;
        };
        let Some(b) = broken(&scan) else {
            return;
        };
        stats::record_image(Image::Broken, 1);
        if device(global, binding, false) != LoadDevice::Rdna1 {
            return;
        }
        stats::record_image(Image::Warned, 1);
        if !SAID.swap(true, Relaxed) {
            tracing::warn!(
                "hipModuleLoad (from {}) loaded {}, a {} code object whose buffer instructions \
                 take descriptors in a layout this GPU does not use (loads read 0, stores \
                 write nothing): {}. rmcp fixes only code objects loaded from memory \
                 (hipModuleLoadData/Ex); rebuild this one with AMDGCN_USE_BUFFER_OPS=0 \
                 (further images are counted, not logged)",
                describe_caller(caller),
                path.display(),
                b.target,
                b.counts(),
            );
        }
    });
}

/// A code object file `hipModuleLoad` loaded on a gfx1010-gfx1013 card that an override
/// makes run gfx103x code: its kernels' sites kept for the fault block, and, when its code
/// holds what could be fixed in place, the file named once (it is not fixed: the runtime
/// maps the file itself).
fn file_under_override(caller: Caller, path: &std::path::Path, card: Gfx, bytes: &[u8]) {
    crate::gfx101x::scan_loaded(card, bytes);
    let Ok(found) = gfx101x::in_place_fixes(bytes, card) else {
        return;
    };
    if found.fixes.is_empty() {
        return;
    }
    stats::record_override(stats::OverrideEvent::Warned, 1);
    if SAID_OVERRIDE_FILE.swap(true, Relaxed) {
        return;
    }
    let n = |bug: gfx101x::Bug| found.fixes.iter().filter(|f| f.bug == bug).count();
    tracing::warn!(
        "hipModuleLoad (from {}) loaded {}, gfx103x code that this {card} runs under \
         HSA_OVERRIDE_GFX_VERSION, with {} s_inst_prefetch (gfx101x hangs on it) and {} \
         s_clause around an NSA image instruction: rmcp fixes only code objects loaded from \
         memory (hipModuleLoadData/Ex); unset the override to run this card's own code \
         (further files are counted, not logged)",
        describe_caller(caller),
        path.display(),
        n(gfx101x::Bug::InstFwdPrefetch),
        n(gfx101x::Bug::NsaClause),
    );
}

/// A regular file's bytes, at most [`MAX_IMAGE`] of them; None for anything else (a FIFO is
/// never opened for reading: `O_NONBLOCK`, then checked to be a regular file).
fn read_file(path: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_IMAGE as u64 {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.by_ref()
        .take(MAX_IMAGE as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() <= MAX_IMAGE).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_kept_once_per_content_and_freed_with_its_last_module() {
        let image = || b"a fixed image for the keep test".to_vec();
        let kept = |at: *const u8| {
            COPIES
                .lock()
                .unwrap()
                .iter()
                .find(|k| k.bytes.as_ptr() == at)
                .map(|k| k.users)
        };
        let a = keep(image());
        let b = keep(image());
        assert_eq!(a.at, b.at, "one copy for one content");
        assert_eq!(kept(a.at), Some(2));
        // Two modules loaded from it; a third load failed (one user fewer).
        loaded_with(a, Some(0x1000));
        loaded_with(b, Some(0x2000));
        let c = keep(image());
        loaded_with(c, None);
        assert_eq!(kept(a.at), Some(2));
        // Unloading one module keeps the copy for the other; the last frees it.
        unloaded(0x1000 as *mut c_void);
        assert_eq!(kept(a.at), Some(1));
        unloaded(0x9999 as *mut c_void);
        assert_eq!(
            kept(a.at),
            Some(1),
            "a module loaded without a copy changes nothing"
        );
        unloaded(0x2000 as *mut c_void);
        assert_eq!(kept(a.at), None);
    }

    #[test]
    fn the_counts_read_as_words() {
        let b = |literals, buffer_instructions, kernels| Broken {
            target: String::new(),
            kernels,
            literals,
            buffer_instructions,
        };
        assert_eq!(
            b(1, 24, 1).counts(),
            "1 descriptor literal feeding 24 buffer instructions in 1 kernel"
        );
        assert_eq!(
            b(2, 1, 2).counts(),
            "2 descriptor literals feeding 1 buffer instruction in 2 kernels"
        );
    }

    #[test]
    fn reading_own_memory_never_faults() {
        let data = [1u8, 2, 3, 4];
        let mut buf = [0u8; 4];
        assert!(crate::own_memory::read(data.as_ptr() as usize, &mut buf));
        assert_eq!(buf, data);
        // Page 0 is never mapped; the top of the address space neither.
        assert!(!crate::own_memory::read(8, &mut buf));
        assert!(!crate::own_memory::read(usize::MAX - 2, &mut buf));
        assert!(read_image(std::ptr::null()).is_none());
        assert!(read_image(16 as *const c_void).is_none());
        // The pipe's way, as where process_vm_readv is refused: across pages too.
        let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut got = vec![0u8; big.len()];
        assert!(crate::own_memory::through_pipe(
            big.as_ptr() as usize,
            &mut got
        ));
        assert_eq!(got, big);
        assert!(!crate::own_memory::through_pipe(8, &mut buf));
    }

    #[test]
    fn a_truncated_image_is_not_read_past_its_mapping() {
        // An ELF header claiming more than the mapping holds: the end of a mapped page,
        // followed by an unmapped one.
        // SAFETY: a fresh anonymous mapping of two pages, the second unmapped again; no
        // other code knows these addresses.
        unsafe {
            let page = 4096;
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap(p.cast::<u8>().add(page).cast(), page);
            let at = p.cast::<u8>().add(page - 64);
            // ELF64, little-endian, AMDGPU, with section headers said to lie far beyond.
            let mut h = [0u8; 64];
            h[..4].copy_from_slice(b"\x7fELF");
            h[4] = 2;
            h[5] = 1;
            h[6] = 1;
            h[18..20].copy_from_slice(&224u16.to_le_bytes());
            h[0x28..0x30].copy_from_slice(&0x10_0000u64.to_le_bytes());
            h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
            h[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
            std::ptr::copy_nonoverlapping(h.as_ptr(), at, 64);
            assert!(read_image(at.cast()).is_none());
            // Both ways of reading stop at the unmapped page, and read up to it.
            let mut across = [0u8; 128];
            assert!(!crate::own_memory::read(at as usize, &mut across));
            assert!(!crate::own_memory::through_pipe(at as usize, &mut across));
            let mut head = [0u8; 64];
            assert!(crate::own_memory::through_pipe(at as usize, &mut head));
            assert_eq!(head, h);
            libc::munmap(p, page);
        }
    }
}
