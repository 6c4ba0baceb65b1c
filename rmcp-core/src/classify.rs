//! Which GPUs rmcp treats as affected, and so which allocations the policy may rewrite:
//! a plain function of the KFD topology, the target list and the mode. `RMCP_MODE=force`
//! is applied here and nowhere else.
//!
//! The answer for a process comes in two steps, because the second costs HIP calls:
//! [`classify`] looks at the topology alone; only when it says [`Classes::Mixed`] (some
//! GPUs affected, some not) does the shim list the HIP ordinals with their PCI addresses
//! and call [`devices`] and [`by_ordinal`].

use rmcp_sys::PciAddress;

use crate::config::Mode;
use crate::gfx::Gfx;
use crate::topology::Topology;

/// Whether rmcp treats a GPU of this ISA as affected (`RMCP_MODE=off` changes what is
/// done, not what is affected).
pub fn is_affected(gfx: Gfx, targets: &[Gfx], mode: Mode) -> bool {
    mode == Mode::Force || targets.contains(&gfx)
}

/// What the topology alone says about the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classes {
    /// Every GPU the process can see is alike (or there is none, or none readable): host
    /// and device allocations are rewritten exactly when `true`.
    Uniform(bool),
    /// Some GPUs are affected, some not: the HIP ordinals must be mapped to KFD nodes.
    Mixed,
}

/// The classes from the topology (None: no readable topology).
pub fn classify(topology: Option<&Topology>, targets: &[Gfx], mode: Mode) -> Classes {
    if mode == Mode::Force {
        return Classes::Uniform(true);
    }
    let Some(topo) = topology else {
        return Classes::Uniform(false);
    };
    let affected = topo
        .gpus
        .iter()
        .filter(|g| is_affected(g.gfx, targets, mode))
        .count();
    if affected == 0 || affected == topo.gpus.len() {
        Classes::Uniform(affected > 0)
    } else {
        Classes::Mixed
    }
}

/// One HIP ordinal, matched to its KFD node by PCI address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub ordinal: i32,
    pub pci: Option<PciAddress>,
    /// From the KFD node at that PCI address; Gfx(0) if none matched.
    pub gfx: Gfx,
    pub affected: bool,
}

/// The HIP ordinals (as the runtime lists them) with their KFD classification.
pub fn devices(
    topology: Option<&Topology>,
    ordinals: &[(i32, Option<PciAddress>)],
    targets: &[Gfx],
    mode: Mode,
) -> Vec<Device> {
    ordinals
        .iter()
        .map(|&(ordinal, pci)| {
            let node = topology.zip(pci).and_then(|(t, p)| t.gpu_at(p));
            Device {
                ordinal,
                pci,
                gfx: node.map_or(Gfx(0), |n| n.gfx),
                affected: mode == Mode::Force
                    || node.is_some_and(|n| is_affected(n.gfx, targets, mode)),
            }
        })
        .collect()
}

/// Whether device allocations are rewritten, by current device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceClass {
    /// The same answer for every device: no per-call query.
    All(bool),
    /// Indexed by HIP ordinal; the current device is asked per call.
    PerOrdinal(Vec<bool>),
}

/// On a mixed machine: (host allocations affected, device classes) from the ordinals. No
/// ordinal could be listed (no device): the topology said some GPU is affected, so both
/// are rewritten.
pub fn by_ordinal(devices: &[Device]) -> (bool, DeviceClass) {
    let classes: Vec<bool> = devices.iter().map(|d| d.affected).collect();
    let host = classes.is_empty() || classes.iter().any(|c| *c);
    let device = match classes.first() {
        None => DeviceClass::All(true),
        Some(first) if classes.iter().all(|c| c == first) => DeviceClass::All(*first),
        Some(_) => DeviceClass::PerOrdinal(classes),
    };
    (host, device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Mode::*};
    use std::path::Path;

    fn fixture(name: &str) -> Topology {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name);
        Topology::read(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn targets() -> Vec<Gfx> {
        Config::default().targets
    }

    #[test]
    fn affected_is_a_target_or_force() {
        let t = targets();
        assert!(is_affected(Gfx(100100), &t, Auto));
        assert!(!is_affected(Gfx(110000), &t, Auto));
        assert!(is_affected(Gfx(110000), &t, Force));
        assert!(
            !is_affected(Gfx(0), &t, Auto),
            "unknown gfx is not a target"
        );
        assert!(
            is_affected(Gfx(100100), &t, Off),
            "off changes what is done only"
        );
    }

    #[test]
    fn classes_from_each_fixture_and_mode() {
        let t = targets();
        let table = [
            ("rdna1", Auto, Classes::Uniform(true)),
            ("rdna2", DryRun, Classes::Uniform(true)),
            ("rdna3", Auto, Classes::Uniform(false)),
            ("rdna3", Force, Classes::Uniform(true)),
            ("mixed", Auto, Classes::Mixed),
            ("mixed", Force, Classes::Uniform(true)),
            ("cpu-only", Auto, Classes::Uniform(false)),
            ("cpu-only", Force, Classes::Uniform(true)),
            ("two-cpu-mixed-domain", Auto, Classes::Mixed),
            ("eight-gpu", Auto, Classes::Uniform(true)),
        ];
        for (name, mode, want) in table {
            assert_eq!(
                classify(Some(&fixture(name)), &t, mode),
                want,
                "{name} {mode:?}"
            );
        }
        assert_eq!(classify(None, &t, Auto), Classes::Uniform(false));
        assert_eq!(classify(None, &t, Force), Classes::Uniform(true));
    }

    #[test]
    fn the_malformed_fixture_has_an_unknown_gpu_that_is_not_affected() {
        let topo = fixture("malformed");
        assert!(is_affected(topo.gpus[0].gfx, &targets(), Auto));
        assert!(!is_affected(topo.gpus[1].gfx, &targets(), Auto));
    }

    #[test]
    fn ordinals_map_to_nodes_by_pci_address() {
        let topo = fixture("mixed");
        let pci = |s| PciAddress::parse(s);
        let ordinals = [
            (0, pci("0000:0a:00.0")),
            (1, pci("0000:03:00.0")),
            (2, None),
        ];
        let d = devices(Some(&topo), &ordinals, &targets(), Auto);
        let got: Vec<_> = d
            .iter()
            .map(|d| (d.ordinal, d.gfx.to_string(), d.affected))
            .collect();
        assert_eq!(
            got,
            [
                (0, "gfx1100".into(), false),
                (1, "gfx1010".into(), true),
                (2, "unknown".into(), false)
            ]
        );
        assert_eq!(
            by_ordinal(&d),
            (true, DeviceClass::PerOrdinal(vec![false, true, false]))
        );
        let forced = devices(Some(&topo), &ordinals, &targets(), Force);
        assert!(forced.iter().all(|d| d.affected));
        assert_eq!(by_ordinal(&forced), (true, DeviceClass::All(true)));
    }

    #[test]
    fn by_ordinal_edge_cases() {
        assert_eq!(by_ordinal(&[]), (true, DeviceClass::All(true)));
        let one = |affected| Device {
            ordinal: 0,
            pci: None,
            gfx: Gfx(0),
            affected,
        };
        assert_eq!(by_ordinal(&[one(false)]), (false, DeviceClass::All(false)));
        assert_eq!(
            by_ordinal(&[one(false), one(false)]),
            (false, DeviceClass::All(false))
        );
    }
}
