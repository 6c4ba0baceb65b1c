//! What the fault block says of a kernel's gfx101x sites (issue 39): when an override
//! makes a gfx101x card (gfx1010-gfx1013) run gfx103x code, each module image the shim
//! reads at load (`hipModuleLoadData`/`Ex`, read as the buffer-descriptor fix reads them)
//! is scanned by `rmcp_core::gfx101x`, and each kernel's sites are kept by name; a fault
//! block that lists the kernel says them.
//!
//! Off the hot path: only module loads write the table, and only under such an override;
//! neither a load nor the fault path ever waits for its lock (a contended lock, as after a
//! `fork` taken while another thread held it, skips the recording or the saying). Bounded:
//! the image is at most the load hook's limit (256 MiB), the table at most
//! [`MAX_KERNELS`] names.
//!
//! Kernels of the fat binaries registered at start-up (a program's or a library's
//! `.hip_fatbin`, launched through their host stubs: PyTorch's) are never read at start-up:
//! at a fault that lists one, the library it came from is read then ([`scan_libraries`]):
//! of each offload bundle in its `.hip_fatbin`, only the entry the runtime loads for the
//! override's ISA (`code_objects::pick`), at most [`FAULT_BYTES`] of code objects and
//! [`FAULT_TIME`] per fault, each library once per process; an entry the runtime was handed
//! fixed in place (`fatbin`) is scanned as fixed, as the GPU got it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rmcp_core::fault::KernelSites;
use rmcp_core::gfx::Gfx;
use rmcp_core::gfx101x::{self, Counts};
use rmcp_core::remedy::{OverrideEffect, OverrideValue, override_effect};
use rmcp_core::topology::Topology;

/// Kernel names kept at most.
const MAX_KERNELS: usize = 1 << 16;

static SITES: Mutex<BTreeMap<String, (Counts, usize)>> = Mutex::new(BTreeMap::new());

/// The card to scan for: the first GPU of the topology that is gfx101x silicon and that
/// `HSA_OVERRIDE_GFX_VERSION` (or its per-node form) makes run gfx103x code.
pub(crate) fn card(topology: Option<&Topology>) -> Option<Gfx> {
    card_and_isa(topology).map(|(card, _)| card)
}

/// That card, and the ISA the override makes the runtime load code for.
pub(crate) fn card_and_isa(topology: Option<&Topology>) -> Option<(Gfx, Gfx)> {
    topology?.gpus.iter().find_map(|g| {
        let value = OverrideValue::parse(&crate::report::override_now(g.node)?)?;
        (override_effect(g.gfx, value.gfx()) == OverrideEffect::Rdna1AsRdna2)
            .then_some((g.gfx, value.gfx()))
    })
}

/// Code objects read at most at one fault, and for how long.
const FAULT_BYTES: u64 = 256 << 20;
const FAULT_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// The libraries read at a fault so far (each once per process).
static LIBRARIES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// At a fault under such an override: reads the fat binaries of the libraries the listed
/// kernels came from (those launched through a host stub, not yet scanned), bounded.
pub(crate) fn scan_libraries(kernels: &[rmcp_core::fault::Kernel], topology: Option<&Topology>) {
    let Some((card, isa)) = card_and_isa(topology) else {
        return;
    };
    let started = std::time::Instant::now();
    let mut budget = FAULT_BYTES;
    for k in kernels {
        let (Some(name), Some(library)) = (&k.name, &k.library) else {
            continue;
        };
        if SITES.try_lock().map_or(true, |t| t.contains_key(name)) {
            continue;
        }
        let path = if library.is_empty() {
            "/proc/self/exe".to_string()
        } else {
            library.clone()
        };
        {
            let Ok(mut seen) = LIBRARIES.try_lock() else {
                return;
            };
            if seen.contains(&path) {
                continue;
            }
            seen.push(path.clone());
        }
        scan_library(&path, card, isa, started, &mut budget);
    }
}

/// One library's `.hip_fatbin`: each bundle's entry for `isa`, scanned for `card`, until
/// the time or the byte budget runs out.
fn scan_library(path: &str, card: Gfx, isa: Gfx, started: std::time::Instant, budget: &mut u64) {
    use rmcp_core::code_objects::{self as co, pick};
    let Ok(f) = std::fs::File::open(path) else {
        return;
    };
    let Ok(Some(section)) = co::find_section(&f, co::FATBIN_SECTION) else {
        return;
    };
    let fat = co::scan_fatbin(&f, section.offset, section.size);
    let section_end = section.offset.saturating_add(section.size);
    let dev = co::Device::from_gfx(isa);
    for (i, b) in fat.bundles.iter().enumerate() {
        if started.elapsed() > FAULT_TIME || *budget == 0 {
            return;
        }
        let end = fat
            .bundles
            .get(i + 1)
            .map_or(section_end, |n| n.offset.min(section_end));
        if let pick::Got::Object { bytes, .. } =
            pick::read_object(&f, b.offset, end, &dev, isa, *budget)
        {
            *budget = budget.saturating_sub(bytes.len() as u64);
            // The code the GPU got: the runtime was handed it fixed in place (`fatbin`).
            let fixed = was_fixed(&bytes)
                .then(|| gfx101x::in_place_fixes(&bytes, card).ok())
                .flatten()
                .and_then(|found| gfx101x::apply(&bytes, &found.fixes));
            scan_loaded(card, fixed.as_deref().unwrap_or(&bytes));
        }
    }
}

/// The code objects of fat binaries the runtime was handed fixed in place (`fatbin`), by
/// the length and hash of their bytes as the library has them: a fault that reads one from
/// its library scans it as the GPU got it. At most [`MAX_KERNELS`] kept.
static FIXED: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());

fn content_key(object: &[u8]) -> (usize, u64) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    object.hash(&mut h);
    (object.len(), h.finish())
}

/// `original` (a fat binary's entry) was handed to the runtime with its in-place fixes.
pub(crate) fn fixed_in_place(original: &[u8]) {
    let key = content_key(original);
    if let Ok(mut fixed) = FIXED.try_lock() {
        if fixed.len() < MAX_KERNELS && !fixed.contains(&key) {
            fixed.push(key);
        }
    }
}

fn was_fixed(object: &[u8]) -> bool {
    let key = content_key(object);
    FIXED.try_lock().is_ok_and(|f| f.contains(&key))
}

/// Scans a loaded image for `card` and keeps its kernels' sites.
pub(crate) fn scan_loaded(card: Gfx, image: &[u8]) {
    let Ok(scan) = gfx101x::scan_image(image, card) else {
        return;
    };
    let Ok(mut table) = SITES.try_lock() else {
        return;
    };
    for f in scan.objects.iter().flat_map(|o| &o.functions) {
        let Some(name) = &f.name else { continue };
        if f.undecodable.is_some() || (table.len() >= MAX_KERNELS && !table.contains_key(name)) {
            continue;
        }
        table.insert(name.clone(), (f.counts, f.otherwise));
    }
}

/// The sites of the kernels `names` (in that order, each once), as far as they were
/// scanned.
pub(crate) fn sites_of<'a>(names: impl Iterator<Item = &'a str>) -> Vec<KernelSites> {
    let Ok(table) = SITES.try_lock() else {
        return Vec::new();
    };
    let mut out: Vec<KernelSites> = Vec::new();
    for name in names {
        if out.iter().any(|k| k.name == name) {
            continue;
        }
        if let Some((counts, otherwise)) = table.get(name) {
            out.push(KernelSites {
                name: name.to_string(),
                counts: *counts,
                otherwise: *otherwise,
            });
        }
    }
    out
}

/// "N s_inst_prefetch (gfx101x hangs on it) and N s_clause around an NSA image
/// instruction": what the in-place fixes of `found` change.
pub(crate) fn fixable_text(found: &gfx101x::InPlace) -> String {
    let n = |bug: gfx101x::Bug| found.fixes.iter().filter(|f| f.bug == bug).count();
    format!(
        "{} s_inst_prefetch (gfx101x hangs on it) and {} s_clause around an NSA image \
         instruction",
        n(gfx101x::Bug::InstFwdPrefetch),
        n(gfx101x::Bug::NsaClause)
    )
}

/// What no in-place fix of `found` covers, per bug, or "nothing else".
pub(crate) fn left_text(found: &gfx101x::InPlace) -> String {
    let mut rest: Vec<String> = gfx101x::Bug::ALL
        .iter()
        .filter(|b| found.left[b.index()] > 0)
        .map(|b| format!("{} {}", b.mattr(), found.left[b.index()]))
        .collect();
    if found.otherwise > 0 {
        rest.push(format!(
            "{} instructions it decodes otherwise",
            found.otherwise
        ));
    }
    if rest.is_empty() {
        "nothing else".to_string()
    } else {
        rest.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_by_name_and_said_once_each() {
        let mut counts = [0; 12];
        counts[2] = 3;
        SITES.lock().unwrap().insert("k_test_a".into(), (counts, 1));
        let got = sites_of(["k_test_a", "nope", "k_test_a"].into_iter());
        assert_eq!(
            got,
            [KernelSites {
                name: "k_test_a".into(),
                counts,
                otherwise: 1
            }]
        );
    }
}
