//! The `gfx-override` check: HSA_OVERRIDE_GFX_VERSION and HSA_OVERRIDE_GFX_VERSION_<node>,
//! parsed as libhsakmt parses them and compared with each GPU's real ISA; also which
//! override ROCr applies to each GPU (the `override` column).
//!
//! As in every check, nothing here may panic on odd input (a malformed topology,
//! unreadable files, non-UTF-8 variables): what cannot be read is a finding, never a crash.

use std::ffi::OsString;

use rmcp_core::remedy::{OVERRIDE_VARIABLE, OverrideEffect, override_effect, sources};
use rmcp_core::topology::GpuNode;

pub use rmcp_core::remedy::OverrideValue;

use super::remedies;
use super::report::{Check, Finding, Remedy, Status};
use rmcp_core::remedy::Advice;

/// RX 5700: HSA_OVERRIDE_GFX_VERSION=10.3.0 crashes the card, 10.1.0 works.
pub const SRC_OVERRIDE_RX5700: &str = sources::ROCM_887;
/// AMD: the override is meant for internal debugging, not a workaround.
pub const SRC_OVERRIDE_DEBUG_AID: &str = "https://github.com/ROCm/legacy-rocm-build/issues/5238";
/// RX 5500 XT overridden to gfx1030: HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION.
pub const SRC_OVERRIDE_RX5500: &str =
    "https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/9283";
/// libhsakmt: HSA_OVERRIDE_GFX_VERSION[_<node>] parsing (topology_sysfs_get_node_props).
pub const SRC_HSAKMT_TOPOLOGY: &str =
    "https://github.com/ROCm/ROCR-Runtime/blob/HEAD/libhsakmt/src/topology.c";

const OVERRIDE: &str = OVERRIDE_VARIABLE;

/// The per-node override variables set in the environment: (node, name, value).
fn per_node_overrides() -> Vec<(u32, String, OsString)> {
    let prefix = format!("{OVERRIDE}_");
    let mut out: Vec<(u32, String, OsString)> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.into_string().ok()?;
            let n = k.strip_prefix(&prefix)?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((n.parse::<u32>().ok()?, k, v))
        })
        .collect();
    out.sort();
    out
}

/// Checks the overrides against the real ISA; returns, per GPU, the override ROCr applies.
pub fn gfx_overrides(
    gpus: &[GpuNode],
    have_topology: bool,
    out: &mut Vec<Finding>,
) -> Vec<Option<String>> {
    let global = std::env::var_os(OVERRIDE);
    let per_node = per_node_overrides();
    let mut applied = vec![None; gpus.len()];

    if global.is_none() && per_node.is_empty() {
        out.push(
            Finding::new(
                Check::GfxOverride,
                Status::Ok,
                format!("{OVERRIDE} is not set: HIP sees each GPU's real ISA."),
            )
            .with("variable", OVERRIDE)
            .with("value", serde_json::Value::Null),
        );
        return applied;
    }

    for (n, name, _) in &per_node {
        if !gpus.iter().any(|g| g.node == *n) {
            out.push(
                Finding::new(
                    Check::GfxOverride,
                    Status::Warn,
                    format!(
                        "{name} names node {n}, which is not a GPU node of the KFD topology, \
                         so it has no effect: the number is the KFD node number, CPU nodes \
                         included (the first GPU is usually node 1)."
                    ),
                )
                .source(SRC_HSAKMT_TOPOLOGY)
                .remedy(
                    Remedy::new(format!(
                        "Unset {name}, or use the KFD node number of the GPU it is meant for \
                         (the node column of doctor's GPU table)."
                    ))
                    .command(format!("unset {name}"))
                    .source(SRC_HSAKMT_TOPOLOGY),
                )
                .with("variable", name.clone())
                .with("node", *n),
            );
        }
    }

    if gpus.is_empty() {
        if let Some(v) = &global {
            out.push(
                Finding::new(
                    Check::GfxOverride,
                    Status::Info,
                    format!(
                        "{OVERRIDE}={} is set but there is no GPU {} to compare it with.",
                        v.to_string_lossy(),
                        if have_topology {
                            "in the topology"
                        } else {
                            "(no topology)"
                        }
                    ),
                )
                .with("variable", OVERRIDE)
                .with("value", v.to_string_lossy().into_owned()),
            );
        }
        return applied;
    }

    for (i, g) in gpus.iter().enumerate() {
        let specific = per_node.iter().find(|(n, _, _)| *n == g.node);
        let (name, raw) = match (specific, &global) {
            (Some((_, name, v)), _) => (name.clone(), v.clone()),
            (None, Some(v)) => (OVERRIDE.to_string(), v.clone()),
            (None, None) => continue,
        };
        let value = raw.to_string_lossy().into_owned();
        applied[i] = Some(value.clone());
        out.push(
            override_finding(g, &name, &value)
                .with("variable", name.clone())
                .with("value", value.clone())
                .with("node", g.node)
                .with("gfx", g.gfx.to_string()),
        );
    }
    applied
}

fn override_finding(g: &GpuNode, name: &str, value: &str) -> Finding {
    let Some(ov) = OverrideValue::parse(value) else {
        return Finding::new(
            Check::GfxOverride,
            Status::Error,
            format!(
                "{name}={value:?} is not major.minor.stepping (e.g. 10.1.0): ROCr rejects it \
                 and HIP finds no usable GPU."
            ),
        )
        .source(SRC_HSAKMT_TOPOLOGY)
        .remedy(
            Remedy::new(format!(
                "Unset {name}, or give it as major.minor.stepping (10.3.0); for most cards it \
                 is best left unset."
            ))
            .command(format!("unset {name}"))
            .source(SRC_HSAKMT_TOPOLOGY),
        );
    };
    let real = g.gfx;
    let claimed = ov.gfx();
    let node = g.node;
    match override_effect(real, claimed) {
        OverrideEffect::Unknown => Finding::new(
            Check::GfxOverride,
            Status::Warn,
            format!(
                "{name}={value} applies to node {node}, whose real ISA is unknown, so doctor \
                 cannot tell whether {claimed} code can run on it."
            ),
        )
        .remedy_opt(remedies::for_advice(Advice::Unknown, real, Some(value))),
        OverrideEffect::Rdna1AsRdna2 => Finding::new(
            Check::GfxOverride,
            Status::Error,
            format!(
                "{name}={value} makes node {node} ({real}, RX 5000-series RDNA1 silicon) run \
                 {claimed} (RDNA2) code: a known cause of GPU memory faults and hangs. Use \
                 10.1.0, the matching value, or unset it; AMD calls the override a debugging \
                 aid."
            ),
        )
        .source(SRC_OVERRIDE_RX5700)
        .see_also(SRC_OVERRIDE_RX5500)
        .see_also(SRC_OVERRIDE_DEBUG_AID)
        .remedy(unset_cross_family(name, real)),
        effect @ (OverrideEffect::Same | OverrideEffect::SameFamily) => {
            let detail = if effect == OverrideEffect::Same {
                "it is the real ISA".to_string()
            } else {
                format!("same ISA family as the real {real}")
            };
            Finding::new(
                Check::GfxOverride,
                Status::Ok,
                format!("{name}={value} on node {node} ({real}): {claimed} code, {detail}."),
            )
        }
        OverrideEffect::OtherFamily => Finding::new(
            Check::GfxOverride,
            Status::Warn,
            format!(
                "{name}={value} makes node {node} ({real}) run {claimed} code, another ISA \
                 family: kernels may fault or hang. AMD calls the override a debugging aid, \
                 not a workaround."
            ),
        )
        .source(SRC_OVERRIDE_DEBUG_AID)
        .remedy(unset_cross_family(name, real)),
    }
}

/// Unset an override that makes the card run another family's code; which build to use
/// instead is the `code-objects` and `pytorch` findings' to say, from what is installed.
fn unset_cross_family(name: &str, real: rmcp_core::gfx::Gfx) -> Remedy {
    let mut r = Remedy::new(format!(
        "Unset {name}: it makes this {real} run another family's code, which rmcp cannot \
         make safe. If the software then finds no {real} code, the code-objects and pytorch \
         findings below say which build to use instead."
    ))
    .command(format!("unset {name}"));
    if rmcp_core::remedy::family(real) == rmcp_core::remedy::Family::Rdna1
        || rmcp_core::remedy::family(real) == rmcp_core::remedy::Family::Gfx1013
    {
        r = r
            .source(sources::ROCM_887)
            .source(sources::LLVM_AMDGPU_TD)
            .checked();
    } else {
        r = r.source(SRC_OVERRIDE_DEBUG_AID);
    }
    r
}

/// Adds what the gfx101x scan found in the code the override makes a node run to that
/// node's gfx-override error: the sentence to its message, the totals as `gfx101x`.
pub fn cite_scan(findings: &mut [Finding], node: u32, sentence: &str, value: serde_json::Value) {
    for f in findings.iter_mut().filter(|f| {
        f.check == Check::GfxOverride
            && f.status == Status::Error
            && f.extra.get("node") == Some(&node.into())
    }) {
        f.message.push(' ');
        f.message.push_str(sentence);
        f.extra.insert("gfx101x".to_string(), value.clone());
    }
}

/// The remedy of a node's gfx-override finding, if it has one.
pub fn remedy_of(findings: &[Finding], node: u32) -> Option<Remedy> {
    findings
        .iter()
        .find(|f| f.check == Check::GfxOverride && f.extra.get("node") == Some(&node.into()))
        .and_then(|f| f.remedy.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp_core::gfx::Gfx;

    #[test]
    fn rdna1_with_rdna2_code_is_an_error_and_matching_family_ok() {
        let g = |v: u32| GpuNode {
            node: 1,
            gfx: Gfx(v),
            pci: None,
            vendor_id: Some(4098),
            device_id: Some(0x731f),
            io_links: vec![],
        };
        for (gfx, value, want) in [
            (100100, "10.3.0", Status::Error),
            (100102, "10.3.1", Status::Error),
            (100100, "10.1.0", Status::Ok),
            (100301, "10.3.0", Status::Ok),
            (110000, "10.3.0", Status::Warn),
            (0, "10.3.0", Status::Warn),
            (100100, "ten", Status::Error),
        ] {
            assert_eq!(
                override_finding(&g(gfx), "X", value).status,
                want,
                "gfx {gfx}, override {value}"
            );
        }
    }

    #[test]
    fn the_scan_is_cited_by_the_nodes_error_only() {
        let f = |node: u32, status| {
            Finding::new(Check::GfxOverride, status, "m.")
                .with("node", node)
                .remedy(Remedy::new("r"))
        };
        let mut v = vec![f(1, Status::Error), f(2, Status::Error), f(1, Status::Ok)];
        cite_scan(
            &mut v,
            1,
            "In the code: 3 kernels.",
            serde_json::json!({"kernels": 3}),
        );
        assert_eq!(v[0].message, "m. In the code: 3 kernels.");
        assert_eq!(v[0].extra["gfx101x"]["kernels"], 3);
        assert_eq!(v[1].message, "m.");
        assert_eq!(v[2].message, "m.");
        assert_eq!(remedy_of(&v, 2).unwrap().text, "r");
        assert!(remedy_of(&v, 3).is_none());
    }
}
