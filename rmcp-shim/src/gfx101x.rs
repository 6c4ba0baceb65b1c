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
//! [`MAX_KERNELS`] names. Kernels of fat binaries registered at start-up
//! (`__hipRegisterFatBinary`) are not scanned here.

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
    topology?.gpus.iter().find_map(|g| {
        let value = OverrideValue::parse(&crate::report::override_now(g.node)?)?;
        (override_effect(g.gfx, value.gfx()) == OverrideEffect::Rdna1AsRdna2).then_some(g.gfx)
    })
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
