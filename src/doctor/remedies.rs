//! The remedies the checks attach to their findings: the words, commands, sources and
//! caveats for each piece of advice `rmcp_core::remedy::advise` gives (card, override,
//! build), and the few remedies more than one check shares. What to advise is decided in
//! rmcp-core; how to say it is here.

use rmcp_core::gfx::Gfx;
use rmcp_core::remedy::{
    Advice, Family, OVERRIDE_VARIABLE, OverrideValue, family, pytorch_org_has, sources,
    therock_device, therock_family,
};

use super::report::Remedy;

/// What rmcp itself cannot do about code built for another ISA.
const NOT_RMCP: &str = "rmcp changes the coherence of allocations only: it cannot make code \
                        built for another ISA run correctly.";

pub use rmcp_core::remedy::therock_commands;

fn unset_command() -> String {
    format!("unset {OVERRIDE_VARIABLE}")
}

fn export_command(v: OverrideValue) -> String {
    format!("export {OVERRIDE_VARIABLE}={v}")
}

/// The caveat of TheRock's RDNA1 wheels.
fn therock_rdna1_caveat() -> String {
    format!(
        "TheRock builds its gfx101X wheels (Linux PyTorch since February 2026) and lists them \
         as release ready, but its CI matrix has no gfx101X test machine; rmcp has not run \
         them on RDNA1 hardware either. {NOT_RMCP}"
    )
}

/// The remedy for an advice about `card` (None for `Fine` and `FineThroughOverride`,
/// which need none). `current` is the override as it is set now, if it is.
pub fn for_advice(advice: Advice, card: Gfx, current: Option<&str>) -> Option<Remedy> {
    let fam = family(card);
    match advice {
        Advice::Fine | Advice::FineThroughOverride { .. } => None,
        Advice::Unknown => Some(
            Remedy::new(
                "The card's ISA is unknown (no usable gfx_target_version in the KFD topology), \
                 so doctor cannot say which build it needs: check the amdgpu driver's version \
                 and the topology files, and leave HSA_OVERRIDE_GFX_VERSION unset until then.",
            )
            .command(unset_command()),
        ),
        Advice::UnsetOverride => {
            let mut r = Remedy::new(format!(
                "Unset {OVERRIDE_VARIABLE}{}: the build carries {card} code of its own, which \
                 the override makes the runtime pass over.",
                current.map(|v| format!(" (now {v})")).unwrap_or_default()
            ))
            .command(unset_command());
            if fam == Family::Rdna1 || fam == Family::Gfx1013 {
                r = r
                    .source(sources::ROCM_887)
                    .source(sources::LLVM_AMDGPU_TD)
                    .checked();
            }
            Some(r)
        }
        Advice::SetOverride {
            value,
            replaces_cross_family,
        } => {
            let same = value.gfx();
            let mut text = String::new();
            if replaces_cross_family {
                text.push_str(&format!(
                    "Replace {OVERRIDE_VARIABLE}={} (another family's code on this {card}). ",
                    current.unwrap_or("?")
                ));
            }
            text.push_str(&format!(
                "Set {OVERRIDE_VARIABLE}={value}: the build carries {same} code, the same \
                 instruction set as {card}, and the override makes the runtime load it."
            ));
            let mut r = Remedy::new(text)
                .command(export_command(value))
                .source(sources::ROCBLAS_1339)
                .checked();
            if therock_device(card) {
                // Only the override's command: the two ways are alternatives, and run one
                // after the other they would not work (the override would make the runtime
                // pass over the new build's own code).
                r.text.push_str(&format!(
                    " Or, instead of the override, install a build with {card}'s own code: \
                     TheRock's multi-arch wheel with the device-{card} extra, replacing the \
                     installed torch as for RX 5000 (docs/cli.md, \"Replacing PyTorch\")."
                ));
                r = r.source(sources::THEROCK_RELEASES);
            }
            let caveat = if fam == Family::Gfx1013 {
                "The rocBLAS maintainers say gfx1013 is a superset of gfx1010 and that 10.1.0 \
                 \"will probably work\": not confirmed on hardware here or there."
                    .to_string()
            } else {
                "AMD calls the override a debugging aid; the rocBLAS maintainers confirmed this \
                 one for rocBLAS on an RX 6750 XT (gfx1031), not for every library."
                    .to_string()
            };
            Some(r.caveat(caveat))
        }
        Advice::InstallBuild {
            target,
            then_override,
            unset_cross_family,
        } => Some(install_build(
            card,
            target,
            then_override,
            unset_cross_family,
            current,
        )),
    }
}

fn install_build(
    card: Gfx,
    target: Gfx,
    then_override: Option<OverrideValue>,
    unset: bool,
    current: Option<&str>,
) -> Remedy {
    let fam = family(card);
    let mut text = String::new();
    let mut r = Remedy::new(String::new());
    if unset {
        let why = if fam == Family::Rdna1 || fam == Family::Gfx1013 {
            "RDNA2 code on RDNA1 silicon lacks the gfx101x hardware-bug workarounds and may use \
             instructions the card does not have"
        } else {
            "it runs another family's code on this card"
        };
        text.push_str(&format!(
            "Unset {OVERRIDE_VARIABLE}{} ({why}). ",
            current.map(|v| format!("={v}")).unwrap_or_default()
        ));
        r = r.command(unset_command());
        if fam == Family::Rdna1 || fam == Family::Gfx1013 {
            r = r.source(sources::ROCM_887).source(sources::LLVM_AMDGPU_TD);
        }
    }
    let rdna1 = matches!(fam, Family::Rdna1 | Family::Gfx1013);
    if rdna1 {
        text.push_str(&format!(
            "pytorch.org's ROCm wheels carry no gfx101x code at all. Use a PyTorch build that \
             carries {target} code"
        ));
    } else {
        text.push_str(&format!("Use a PyTorch build that carries {target} code"));
    }
    if let Some(v) = then_override {
        text.push_str(&format!(
            " and set {OVERRIDE_VARIABLE}={v} ({card} is a superset of {target}; no build \
             targets {card} itself)"
        ));
    }
    text.push(':');
    let mut options = Vec::new();
    if therock_device(target) {
        let fam_pkg = therock_family(target)
            .map(|f| format!(", family {f}"))
            .unwrap_or_default();
        options.push(format!(
            "TheRock's multi-arch wheel with the device-{target} extra (AMD's nightly index{fam_pkg})"
        ));
        for c in therock_commands(target) {
            r = r.command(c);
        }
        r = r
            .source(sources::THEROCK_RELEASES)
            .source(sources::THEROCK_TARGETS);
    }
    if rdna1 {
        options.push(
            "Arch Linux's python-pytorch-rocm (an RX 5700 owner reports it working with \
             10.1.0; its target list was not checked here)"
                .to_string(),
        );
        options.push(
            "Debian's ROCm libraries, built for every RDNA1/RDNA2 GPU (Debian's own PyTorch \
             package's targets are not confirmed: doctor reads its X-ROCm-GPU-Architecture \
             field when it is installed)"
                .to_string(),
        );
        r = r.source(sources::ROCM_887).source(sources::DEBIAN_ROCM);
    } else if pytorch_org_has(target) {
        options.push(format!(
            "pytorch.org's ROCm wheels, which carry {target} code"
        ));
        r = r.source(sources::PYTORCH_BUILD_SH);
    } else if fam == Family::Rdna2Other {
        options.push(format!(
            "pytorch.org's ROCm wheels, which carry gfx1030 code, with {OVERRIDE_VARIABLE}=10.3.0"
        ));
        r = r
            .source(sources::PYTORCH_BUILD_SH)
            .source(sources::ROCBLAS_1339);
    }
    options.push(format!(
        "PyTorch built from source with PYTORCH_ROCM_ARCH={target}"
    ));
    text.push(' ');
    text.push_str(&options.join("; "));
    text.push('.');
    if let Some(v) = then_override {
        r = r.command(export_command(v)).source(sources::ROCBLAS_1339);
    }
    r.text = text;
    r = r.checked();
    if rdna1 {
        let mut c = therock_rdna1_caveat();
        if then_override.is_some() {
            c.push_str(
                " gfx1013 through 10.1.0 rests on the rocBLAS maintainers' word (\"will \
                 probably work\").",
            );
        }
        r = r.caveat(c);
    } else {
        r = r.caveat(NOT_RMCP);
    }
    r
}

/// Start programs under rmcp.
pub fn use_rmcp_run() -> Remedy {
    Remedy::new(
        "Start HIP programs with `rmcp run -- CMD` (or the container entrypoint), which puts \
         exactly one copy of the shim first in LD_PRELOAD; remove other entries for it.",
    )
    .command("rmcp run -- python3 train.py")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp_core::remedy::{Carries, advise};

    fn g(s: &str) -> Gfx {
        Gfx::parse(s).unwrap()
    }

    #[test]
    fn rdna1_with_the_override_and_no_code_gets_therock_and_the_caveat() {
        let card = g("gfx1010");
        let a = advise(card, Some(g("gfx1030")), Carries::default());
        let r = for_advice(a, card, Some("10.3.0")).unwrap();
        assert_eq!(
            r.commands,
            [
                "unset HSA_OVERRIDE_GFX_VERSION",
                "pip uninstall -y torch torchvision torchaudio",
                "pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \
                 \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\" torchaudio"
            ]
        );
        assert!(r.text.contains("no gfx101x code"), "{}", r.text);
        assert!(
            r.caveat
                .as_deref()
                .unwrap()
                .contains("no gfx101X test machine")
        );
        assert!(r.sources.contains(&sources::THEROCK_RELEASES.to_string()));
        assert!(r.sources.contains(&sources::ROCM_887.to_string()));
        assert_eq!(r.checked, Some(rmcp_core::remedy::FACTS_CHECKED));
    }

    #[test]
    fn gfx1013_gets_a_gfx1010_build_and_10_1_0() {
        let card = g("gfx1013");
        let r = for_advice(advise(card, None, Carries::default()), card, None).unwrap();
        assert!(r.commands.iter().any(|c| c.contains("device-gfx1010")));
        assert!(
            r.commands
                .contains(&"export HSA_OVERRIDE_GFX_VERSION=10.1.0".to_string())
        );
        assert!(!r.commands.iter().any(|c| c.starts_with("unset")));
    }

    #[test]
    fn an_override_remedy_prints_only_the_override_command() {
        // The TheRock build is the alternative, in words: the two run one after the other
        // would not work (the override would pass over the new build's own code).
        let card = g("gfx1031");
        let carries = Carries {
            native: false,
            same_family: Some(g("gfx1030")),
            for_override: false,
        };
        let r = for_advice(advise(card, None, carries), card, None).unwrap();
        assert_eq!(r.commands, ["export HSA_OVERRIDE_GFX_VERSION=10.3.0"]);
        assert!(r.text.contains("device-gfx1031"), "{}", r.text);
    }

    #[test]
    fn rdna3_remedies_say_nothing_about_rdna1() {
        let card = g("gfx1100");
        let r = for_advice(advise(card, None, Carries::default()), card, None).unwrap();
        assert!(!r.text.contains("gfx101"), "{}", r.text);
        assert!(r.commands.iter().any(|c| c.contains("device-gfx1100")));
        assert!(r.text.contains("pytorch.org"), "{}", r.text);
        assert_eq!(for_advice(Advice::Fine, card, None), None);
    }
}
