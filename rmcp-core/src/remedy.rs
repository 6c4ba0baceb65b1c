//! What to do about a card that runs the wrong code: HSA_OVERRIDE_GFX_VERSION as libhsakmt
//! parses it, which override makes which card run another family's code, and, from the
//! card, the override and what a build carries, the advice the doctor gives. Pure
//! functions over GPU names; the shim's warning, `rmcp run` and `rmcp doctor` share them.
//!
//! The facts behind the tables (checked on [`FACTS_CHECKED`]):
//! - ISA families: LLVM `llvm/lib/Target/AMDGPU/AMDGPU.td`. FeatureISAVersion10_1_{0,1,2}
//!   carry the gfx101x hardware-bug workarounds (FeatureISAVersion10_1_Common: VcmpxExecWAR,
//!   InstFwdPrefetch, NSAClause, FlatSegmentOffset, ...), which FeatureISAVersion10_3_0
//!   lacks, and 10_3_0 adds instructions gfx1010 lacks (GFX10_3Insts, GFX10_BEncoding,
//!   Dot1/2/5/6/7/10). gfx1013 is 10_1_Common plus GFX10_AEncoding: a superset of gfx1010.
//! - gfx1030 and gfx1031 are the same instruction set in all but name; the rocBLAS
//!   maintainers give `HSA_OVERRIDE_GFX_VERSION=10.3.0` as the workaround for discrete
//!   RDNA2 and 10.1.0 for gfx1013 ("will probably work"): ROCm/rocBLAS issue 1339.
//! - pytorch.org's ROCm wheels: [`PYTORCH_ORG_TARGETS`] (pytorch/pytorch
//!   `.ci/docker/manywheel/build.sh`); their rocBLAS/hipBLASLt files and MIOpen databases
//!   are filtered to the same list (`.ci/manywheel/build_rocm.sh`).
//! - TheRock's multi-arch wheels: one `[device-gfxNNNN]` extra per target in
//!   [`THEROCK_DEVICE_TARGETS`] (ROCm/TheRock `RELEASES.md`); the per-family packages use
//!   the families of `cmake/therock_amdgpu_targets.cmake` ([`therock_family`]).

use std::fmt;

use crate::gfx::Gfx;

/// When the facts in this module and in the doctor's remedies were last checked against
/// their sources.
pub const FACTS_CHECKED: &str = "2026-11-25";

/// The variable.
pub const OVERRIDE_VARIABLE: &str = "HSA_OVERRIDE_GFX_VERSION";

/// Where the facts come from (public URLs; the doctor cites them).
pub mod sources {
    /// RX 5700: 10.3.0 crashes the card, 10.1.0 with a gfx1010 build (Arch) works. ROCm's
    /// old issues now live in ROCm/legacy-rocm-build under their old numbers.
    pub const ROCM_887: &str = "https://github.com/ROCm/legacy-rocm-build/issues/887";
    /// gfx1030 and gfx1031 identical in all but name; 10.3.0 for RDNA2, 10.1.0 for gfx1013.
    pub const ROCBLAS_1339: &str = "https://github.com/ROCm/rocBLAS/issues/1339";
    /// The ISA feature sets of gfx1010, gfx1013 and gfx1030 (AMDGPU.td in this directory;
    /// the file's own URL is longer than doctor's 80 columns).
    pub const LLVM_AMDGPU_TD: &str =
        "https://github.com/llvm/llvm-project/tree/main/llvm/lib/Target/AMDGPU";
    /// pytorch.org's PYTORCH_ROCM_ARCH.
    pub const PYTORCH_BUILD_SH: &str =
        "https://github.com/pytorch/pytorch/blob/main/.ci/docker/manywheel/build.sh";
    /// The wheel's rocBLAS/hipBLASLt/MIOpen files, filtered to PYTORCH_ROCM_ARCH.
    pub const PYTORCH_BUILD_ROCM_SH: &str =
        "https://github.com/pytorch/pytorch/blob/main/.ci/manywheel/build_rocm.sh";
    /// TheRock's multi-arch index and its `[device-gfxNNNN]` extras.
    pub const THEROCK_RELEASES: &str = "https://github.com/ROCm/TheRock/blob/main/RELEASES.md";
    /// TheRock's target families.
    pub const THEROCK_TARGETS: &str =
        "https://github.com/ROCm/TheRock/blob/main/cmake/therock_amdgpu_targets.cmake";
    /// Debian's ROCm packages, built for every RDNA1/RDNA2 GPU.
    pub const DEBIAN_ROCM: &str = "https://wiki.debian.org/ROCm";
}

/// pytorch.org's ROCm wheels' targets (`PYTORCH_ROCM_ARCH` of the ROCm 6.4 to 7.2
/// builds): no gfx101x, no gfx1031-gfx1036.
pub const PYTORCH_ORG_TARGETS: &[&str] = &[
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101",
    "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201",
];

/// The targets TheRock's multi-arch index has a `[device-gfxNNNN]` extra for.
pub const THEROCK_DEVICE_TARGETS: &[&str] = &[
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012",
    "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100",
    "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200",
    "gfx1201",
];

/// TheRock's index of multi-arch wheels.
pub const THEROCK_INDEX: &str = "https://rocm.nightlies.amd.com/whl-multi-arch/";

/// TheRock's per-family package family of a target (`cmake/therock_amdgpu_targets.cmake`),
/// the suffix of `_rocm_sdk_libraries_<family>`; None for targets in no RDNA family there
/// (gfx1013 among them).
pub fn therock_family(g: Gfx) -> Option<&'static str> {
    Some(match g.0 {
        100100..=100102 => "gfx101X-dgpu",
        100300 | 100301 | 100302 | 100304 => "gfx103X-dgpu",
        100303 | 100305 | 100306 => "gfx103X-igpu",
        110000..=110002 => "gfx110X-dgpu",
        _ => return None,
    })
}

/// Whether TheRock's multi-arch index has a device extra for this target.
pub fn therock_device(g: Gfx) -> bool {
    THEROCK_DEVICE_TARGETS
        .iter()
        .any(|t| Gfx::parse(t) == Some(g))
}

/// Whether pytorch.org's ROCm wheels carry code for this target.
pub fn pytorch_org_has(g: Gfx) -> bool {
    PYTORCH_ORG_TARGETS.iter().any(|t| Gfx::parse(t) == Some(g))
}

/// What replaces the PyTorch of the environment the commands run in (a venv, activated)
/// with TheRock's multi-arch build for one target, as the doctor and the shim's fault report
/// give it: first the installed torch and the packages built against it go, then TheRock's
/// torch, torchvision and torchaudio come from its index. A plain `pip install
/// "torch[device-gfxNNNN]"` over an installed pytorch.org torch changes nothing: pip finds
/// `torch` already satisfied and only warns that it "does not provide the extra"
/// (docs/cli.md, "Replacing PyTorch"; tests/remedy_pip.rs shows both with real pip).
pub fn therock_commands(target: Gfx) -> [String; 2] {
    [
        "pip uninstall -y torch torchvision torchaudio".to_string(),
        format!(
            "pip install --index-url {THEROCK_INDEX} \"torch[device-{target}]\" \
             \"torchvision[device-{target}]\" torchaudio"
        ),
    ]
}

/// A parsed HSA_OVERRIDE_GFX_VERSION value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverrideValue {
    pub major: u32,
    pub minor: u32,
    pub stepping: u32,
}

impl OverrideValue {
    /// libhsakmt's rule: `%u.%u.%u` and nothing after, major <= 63, minor and stepping <= 255.
    pub fn parse(s: &str) -> Option<OverrideValue> {
        let mut it = s.split('.');
        let mut num = |max: u32| -> Option<u32> {
            let t = it.next()?;
            if t.is_empty() || t.len() > 10 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse::<u32>().ok().filter(|v| *v <= max)
        };
        let v = OverrideValue {
            major: num(63)?,
            minor: num(255)?,
            stepping: num(255)?,
        };
        if it.next().is_some() {
            return None;
        }
        Some(v)
    }

    /// The value that makes the runtime look for `g`'s code (gfx1030 -> 10.3.0).
    pub fn of(g: Gfx) -> OverrideValue {
        OverrideValue {
            major: g.major(),
            minor: g.minor(),
            stepping: g.stepping(),
        }
    }

    pub fn gfx(self) -> Gfx {
        Gfx(self.major * 10000 + self.minor * 100 + self.stepping)
    }
}

impl fmt::Display for OverrideValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.stepping)
    }
}

/// The card families the advice tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// gfx1010, gfx1011, gfx1012 (RX 5000, Pro V520/W5500): no pytorch.org code, TheRock
    /// device packages.
    Rdna1,
    /// gfx1013: a superset of gfx1010, in no TheRock family.
    Gfx1013,
    /// gfx1030: in pytorch.org's wheels.
    Gfx1030,
    /// gfx1031-gfx1036: RDNA2 without pytorch.org code; gfx1030's code runs on them.
    Rdna2Other,
    /// Anything else (RDNA3, RDNA4, CDNA, GCN): nothing RDNA1/RDNA2-specific to say.
    Other,
    /// The real ISA is not known.
    Unknown,
}

pub fn family(g: Gfx) -> Family {
    match g.0 {
        0 => Family::Unknown,
        100100..=100102 => Family::Rdna1,
        100103 => Family::Gfx1013,
        100300 => Family::Gfx1030,
        100301..=100306 => Family::Rdna2Other,
        _ => Family::Other,
    }
}

/// What an override does to a card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverrideEffect {
    /// The override names the card's own ISA.
    Same,
    /// Another ISA of the same major.minor (gfx1031 -> gfx1030, gfx1013 -> gfx1010).
    SameFamily,
    /// RDNA1 silicon (gfx101x) running RDNA2 (gfx103x) code: the known cause of memory
    /// faults and hangs (ROCm issue 887; AMDGPU.td: missing hardware-bug workarounds).
    Rdna1AsRdna2,
    /// Another family altogether.
    OtherFamily,
    /// The card's real ISA is unknown.
    Unknown,
}

impl OverrideEffect {
    /// The card runs another family's code.
    pub fn cross_family(self) -> bool {
        matches!(
            self,
            OverrideEffect::Rdna1AsRdna2 | OverrideEffect::OtherFamily
        )
    }
}

/// What running `claimed` code on `real` silicon through the override means.
pub fn override_effect(real: Gfx, claimed: Gfx) -> OverrideEffect {
    if real.0 == 0 {
        OverrideEffect::Unknown
    } else if real == claimed {
        OverrideEffect::Same
    } else if real.major() == 10
        && real.minor() == 1
        && claimed.major() == 10
        && claimed.minor() == 3
    {
        OverrideEffect::Rdna1AsRdna2
    } else if real.major() == claimed.major() && real.minor() == claimed.minor() {
        OverrideEffect::SameFamily
    } else {
        OverrideEffect::OtherFamily
    }
}

/// The one-line warning the shim and `rmcp run` give when an override makes an affected
/// card run another family's code; None when it does not.
pub fn cross_family_warning(node: u32, real: Gfx, value: &str) -> Option<String> {
    let ov = OverrideValue::parse(value)?;
    let claimed = ov.gfx();
    let effect = override_effect(real, claimed);
    if !effect.cross_family() {
        return None;
    }
    let why = if effect == OverrideEffect::Rdna1AsRdna2 {
        "RDNA2 code on RDNA1 silicon, a known cause of GPU memory faults and hangs"
    } else {
        "another ISA family's code: kernels may fault or hang"
    };
    Some(format!(
        "{OVERRIDE_VARIABLE}={value} makes GPU node {node} ({real}) run {claimed} code: {why}; \
         rmcp does not fix this. Run `rmcp doctor` for what to use instead"
    ))
}

/// What a build carries for one card.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carries {
    /// Code for the card's own ISA (or a generic target covering it).
    pub native: bool,
    /// Code for another ISA of the card's major.minor (gfx1030 for gfx1031), if any.
    pub same_family: Option<Gfx>,
    /// Code for the ISA the override names (meaningless without an override).
    pub for_override: bool,
}

/// The advice for one card and one build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// The build carries the card's code and nothing overrides it.
    Fine,
    /// A same-family override loads code of the same instruction set: the recognised
    /// workaround. `native_exists`: a build with the card's own code exists (TheRock).
    FineThroughOverride { native_exists: bool },
    /// The override is not needed or makes things worse: the build has the card's code.
    UnsetOverride,
    /// Set the override to load the same-family code the build has (gfx1031 -> 10.3.0).
    SetOverride {
        value: OverrideValue,
        /// A cross-family override is set now and must go.
        replaces_cross_family: bool,
    },
    /// Install a build that carries `target` code: the card's own, or gfx1010 for gfx1013
    /// (then `then_override` 10.1.0). `unset_cross_family`: a cross-family override is set
    /// now and must go.
    InstallBuild {
        target: Gfx,
        then_override: Option<OverrideValue>,
        unset_cross_family: bool,
    },
    /// The card's ISA is unknown: nothing can be advised from the build.
    Unknown,
}

/// The decision table: card, override (the ISA it names), what the build carries.
pub fn advise(card: Gfx, over: Option<Gfx>, carries: Carries) -> Advice {
    let fam = family(card);
    if fam == Family::Unknown {
        return Advice::Unknown;
    }
    let effect = over.map(|o| override_effect(card, o));
    match effect {
        None | Some(OverrideEffect::Same) => {}
        Some(OverrideEffect::SameFamily) => {
            if carries.for_override {
                return Advice::FineThroughOverride {
                    native_exists: therock_device(card),
                };
            }
            if carries.native {
                return Advice::UnsetOverride;
            }
        }
        Some(_) => {
            if carries.native {
                return Advice::UnsetOverride;
            }
        }
    }
    let cross = effect.is_some_and(OverrideEffect::cross_family);
    if carries.native {
        return Advice::Fine;
    }
    if let Some(g) = carries.same_family {
        return Advice::SetOverride {
            value: OverrideValue::of(g),
            replaces_cross_family: cross,
        };
    }
    let (target, then_override) = match fam {
        Family::Gfx1013 => {
            let g1010 = Gfx(100100);
            (g1010, Some(OverrideValue::of(g1010)))
        }
        _ => (card, None),
    };
    Advice::InstallBuild {
        target,
        then_override,
        unset_cross_family: cross,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Gfx {
        Gfx::parse(s).unwrap()
    }

    #[test]
    fn override_values_follow_libhsakmt() {
        let v = OverrideValue::parse("10.3.0").unwrap();
        assert_eq!(v.gfx(), g("gfx1030"));
        assert_eq!(v.to_string(), "10.3.0");
        assert_eq!(OverrideValue::parse("9.0.10").unwrap().gfx(), g("gfx90a"));
        assert_eq!(OverrideValue::of(g("gfx90a")).to_string(), "9.0.10");
        for bad in [
            "",
            "10",
            "10.3",
            "10.3.0.1",
            "10.3.x",
            "a.b.c",
            "10.3.0 ",
            " 10.3.0",
            "64.0.0",
            "10.256.0",
            "10.3.256",
            "-1.0.0",
            "+10.3.0",
            "10..0",
            "99999999999.0.0",
        ] {
            assert_eq!(OverrideValue::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn families_of_cards() {
        for (name, want) in [
            ("gfx1010", Family::Rdna1),
            ("gfx1011", Family::Rdna1),
            ("gfx1012", Family::Rdna1),
            ("gfx1013", Family::Gfx1013),
            ("gfx1030", Family::Gfx1030),
            ("gfx1031", Family::Rdna2Other),
            ("gfx1036", Family::Rdna2Other),
            ("gfx1100", Family::Other),
            ("gfx90a", Family::Other),
        ] {
            assert_eq!(family(g(name)), want, "{name}");
        }
        assert_eq!(family(Gfx(0)), Family::Unknown);
        assert_eq!(therock_family(g("gfx1012")), Some("gfx101X-dgpu"));
        assert_eq!(therock_family(g("gfx1013")), None);
        assert_eq!(therock_family(g("gfx1031")), Some("gfx103X-dgpu"));
        assert!(therock_device(g("gfx1010")) && therock_device(g("gfx1031")));
        assert!(!therock_device(g("gfx1013")));
        assert!(pytorch_org_has(g("gfx1030")) && !pytorch_org_has(g("gfx1031")));
        assert!(!pytorch_org_has(g("gfx1010")) && !pytorch_org_has(g("gfx1012")));
        // Every listed name parses.
        for t in PYTORCH_ORG_TARGETS.iter().chain(THEROCK_DEVICE_TARGETS) {
            assert!(Gfx::parse(t).is_some(), "{t}");
        }
    }

    #[test]
    fn override_effects() {
        use OverrideEffect::*;
        for (real, claimed, want) in [
            ("gfx1010", "gfx1010", Same),
            ("gfx1010", "gfx1030", Rdna1AsRdna2),
            ("gfx1012", "gfx1030", Rdna1AsRdna2),
            ("gfx1013", "gfx1030", Rdna1AsRdna2),
            ("gfx1013", "gfx1010", SameFamily),
            ("gfx1031", "gfx1030", SameFamily),
            ("gfx1030", "gfx1010", OtherFamily),
            ("gfx1010", "gfx1100", OtherFamily),
            ("gfx1100", "gfx1030", OtherFamily),
            ("gfx1103", "gfx1100", SameFamily),
        ] {
            assert_eq!(
                override_effect(g(real), g(claimed)),
                want,
                "{real} as {claimed}"
            );
        }
        assert_eq!(override_effect(Gfx(0), g("gfx1030")), Unknown);
        assert!(Rdna1AsRdna2.cross_family() && OtherFamily.cross_family());
        assert!(!SameFamily.cross_family() && !Same.cross_family() && !Unknown.cross_family());
    }

    #[test]
    fn the_warning_names_card_value_and_doctor_and_only_across_families() {
        let w = cross_family_warning(1, g("gfx1010"), "10.3.0").unwrap();
        for part in [
            "HSA_OVERRIDE_GFX_VERSION=10.3.0",
            "node 1 (gfx1010)",
            "gfx1030 code",
            "RDNA2 code on RDNA1 silicon",
            "rmcp doctor",
        ] {
            assert!(w.contains(part), "{part} in {w}");
        }
        let w = cross_family_warning(2, g("gfx1100"), "10.3.0").unwrap();
        assert!(w.contains("another ISA family"), "{w}");
        assert_eq!(cross_family_warning(1, g("gfx1031"), "10.3.0"), None);
        assert_eq!(cross_family_warning(1, g("gfx1013"), "10.1.0"), None);
        assert_eq!(cross_family_warning(1, g("gfx1010"), "10.1.0"), None);
        assert_eq!(cross_family_warning(1, g("gfx1010"), "garbage"), None);
        assert_eq!(cross_family_warning(1, Gfx(0), "10.3.0"), None);
    }

    /// The decision table of README's "PyTorch crashes on my RX 5000 / RX 6000" section.
    #[test]
    fn decision_table() {
        let ov = |s: &str| Some(OverrideValue::parse(s).unwrap().gfx());
        let v = |s: &str| OverrideValue::parse(s).unwrap();
        // What a pytorch.org wheel carries for each card.
        let org = |card: &str, over: Option<Gfx>| {
            let c = g(card);
            let same = PYTORCH_ORG_TARGETS
                .iter()
                .filter_map(|t| Gfx::parse(t))
                .find(|t| *t != c && t.major() == c.major() && t.minor() == c.minor());
            Carries {
                native: pytorch_org_has(c),
                same_family: same,
                for_override: over.is_some_and(pytorch_org_has),
            }
        };
        let native = Carries {
            native: true,
            same_family: None,
            for_override: false,
        };
        let install = |t: &str, then: Option<OverrideValue>, unset: bool| Advice::InstallBuild {
            target: g(t),
            then_override: then,
            unset_cross_family: unset,
        };
        let rows: Vec<(&str, Option<Gfx>, Carries, Advice)> = vec![
            // RDNA1 with a pytorch.org wheel: no code for it; 10.3.0 must go.
            (
                "gfx1010",
                None,
                org("gfx1010", None),
                install("gfx1010", None, false),
            ),
            (
                "gfx1010",
                ov("10.3.0"),
                org("gfx1010", ov("10.3.0")),
                install("gfx1010", None, true),
            ),
            // 10.1.0 is the card's own value: harmless, and still no code.
            (
                "gfx1010",
                ov("10.1.0"),
                org("gfx1010", ov("10.1.0")),
                install("gfx1010", None, false),
            ),
            // A gfx1010 build: fine; with 10.3.0 on top, the override must go.
            ("gfx1010", None, native, Advice::Fine),
            (
                "gfx1010",
                ov("10.3.0"),
                Carries {
                    for_override: true,
                    ..native
                },
                Advice::UnsetOverride,
            ),
            (
                "gfx1012",
                None,
                org("gfx1012", None),
                install("gfx1012", None, false),
            ),
            // gfx1013: superset of gfx1010, so a gfx1010 build and 10.1.0.
            (
                "gfx1013",
                ov("10.3.0"),
                org("gfx1013", ov("10.3.0")),
                install("gfx1010", Some(v("10.1.0")), true),
            ),
            (
                "gfx1013",
                None,
                Carries {
                    native: false,
                    same_family: Some(g("gfx1010")),
                    for_override: false,
                },
                Advice::SetOverride {
                    value: v("10.1.0"),
                    replaces_cross_family: false,
                },
            ),
            // RDNA2 below gfx1030: 10.3.0 loads gfx1030 code of the same ISA.
            (
                "gfx1031",
                None,
                org("gfx1031", None),
                Advice::SetOverride {
                    value: v("10.3.0"),
                    replaces_cross_family: false,
                },
            ),
            (
                "gfx1031",
                ov("10.3.0"),
                org("gfx1031", ov("10.3.0")),
                Advice::FineThroughOverride {
                    native_exists: true,
                },
            ),
            // A native gfx1031 build without gfx1030 code: the override makes it miss.
            (
                "gfx1031",
                ov("10.3.0"),
                Carries {
                    native: true,
                    same_family: None,
                    for_override: false,
                },
                Advice::UnsetOverride,
            ),
            ("gfx1030", None, org("gfx1030", None), Advice::Fine),
            // RDNA3: nothing about RDNA1.
            ("gfx1100", None, org("gfx1100", None), Advice::Fine),
            (
                "gfx1100",
                None,
                Carries::default(),
                install("gfx1100", None, false),
            ),
        ];
        for (card, over, carries, want) in rows {
            assert_eq!(
                advise(g(card), over, carries),
                want,
                "{card} override {over:?} {carries:?}"
            );
        }
        assert_eq!(advise(Gfx(0), None, Carries::default()), Advice::Unknown);
    }
}
