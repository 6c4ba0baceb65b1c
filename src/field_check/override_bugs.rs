//! The override experiments of `rmcp check`: on an RX 5000 (gfx1010-gfx1013, as the KFD
//! topology names the card), what two of LLVM's gfx101x differences do to the gfx1030 code
//! the runtime loads under `HSA_OVERRIDE_GFX_VERSION=10.3.0`. Both give a fixed answer and
//! cannot hang the GPU or touch memory outside the check's own buffers:
//!
//! - flat offset (LLVM's FlatSegmentOffsetBug): `flat_load_dword v, v[a:b] offset:16` of a
//!   global address, against a control that loads the same element with the address
//!   computed in registers. `override-flat-offset-ok`: both read element 4;
//!   `override-flat-offset-ignored`: the offset load read element 0 (the card ignored the
//!   instruction offset) and the control element 4;
//! - legacy FMA: `v_fmac_legacy_f32` (gfx1030: fused) is `v_mac_legacy_f32` on gfx101x
//!   (unfused). [`FMA_INPUTS`] round differently fused and unfused; a control computes both
//!   answers with `v_fma_f32` and `v_mul_f32` + `v_add_f32`. `override-fma-legacy-ok`: the
//!   fused answer; `override-fma-legacy-unfused`: the unfused one.
//!
//! `inconclusive` otherwise: a kernel could not be loaded or run, the run ended early (a
//! fault), a control gave another answer than the host's (the emulated GPU, which completes
//! packets without running them, leaves [`UNWRITTEN`] everywhere), or the load under test
//! gave an answer that is neither.
//!
//! The kernels are `override_kernels.hip` (built for gfx1030 only), run by measure.rs in a
//! child process of their own; this file owns the lines' format, reading them back and the
//! verdicts, pure functions table-tested below. The verdicts do not change the exit status.

use std::fmt;

use serde_json::{Value, json};

/// The measurement's line keys.
pub const FLAT_KEY: &str = "override-flat-offset";
pub const FMA_KEY: &str = "override-fma-legacy";
/// The value the override run sets.
pub const OVERRIDE: &str = "10.3.0";
/// The environment variable.
pub const OVERRIDE_VARIABLE: &str = "HSA_OVERRIDE_GFX_VERSION";

/// The flat experiment's buffer: [`FLAT_ELEMENTS`] known values, [`flat_value`].
pub const FLAT_ELEMENTS: usize = 8;
/// The instruction offset under test, in bytes: element 4.
pub const FLAT_OFFSET: usize = 16;
/// What the output holds before a kernel runs (and after, where none ran).
pub const UNWRITTEN: u32 = 0xdead_beef;

/// Element `i` of the flat experiment's buffer.
pub const fn flat_value(i: usize) -> u32 {
    0x5a5a_0000 | i as u32
}

/// `a`, `b`, `c` of `c + a * b`, as f32 bits: 1 + 2^-12, 1 + 2^-12 + 2^-23, -(1 + 2^-11).
/// Nonzero and finite (legacy multiplies take 0 * anything as 0). The exact product,
/// 1 + 2^-11 + 2^-23 + 2^-24 + 2^-35, rounds (no tie) to 1 + 2^-11 + 2^-22.
pub const FMA_INPUTS: [u32; 3] = [0x3f80_0800, 0x3f80_0801, 0xbf80_1000];
/// One rounding: 2^-23 + 2^-24 + 2^-35 (exact).
pub const FUSED: u32 = 0x3440_0800;
/// The product rounded, then the sum: 2^-22.
pub const UNFUSED: u32 = 0x3480_0000;

/// What the two flat kernels read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatReadings {
    /// `flat_load_dword ... offset:16` from the buffer's start.
    pub offset16: u32,
    /// `flat_load_dword` (offset 0) from the buffer's start + 16.
    pub control: u32,
}

impl fmt::Display for FlatReadings {
    /// `offset16 0x5a5a0000 control 0x5a5a0004`: the line's value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offset16 {:#010x} control {:#010x}",
            self.offset16, self.control
        )
    }
}

/// What the two FMA kernels computed, as f32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FmaReadings {
    /// `v_fmac_legacy_f32`.
    pub legacy: u32,
    /// `v_fma_f32` (control).
    pub fma: u32,
    /// `v_mul_f32` then `v_add_f32` (control).
    pub mul_add: u32,
}

impl fmt::Display for FmaReadings {
    /// `fmac-legacy 0x34800000 fma 0x34400800 mul-add 0x34800000`: the line's value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fmac-legacy {:#010x} fma {:#010x} mul-add {:#010x}",
            self.legacy, self.fma, self.mul_add
        )
    }
}

fn hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Reads a line's value back: Err with why not (an error line, or anything else).
fn read<T>(
    value: Option<&str>,
    key: &str,
    parse: impl Fn(&[&str]) -> Option<T>,
) -> Result<T, String> {
    let Some(value) = value else {
        return Err(format!("the override run printed no `{key}` line"));
    };
    if let Some(e) = value.strip_prefix("error: ") {
        return Err(e.to_string());
    }
    let words: Vec<&str> = value.split_whitespace().collect();
    parse(&words).ok_or_else(|| format!("`{key}: {value}` is not understood"))
}

pub fn parse_flat(value: Option<&str>) -> Result<FlatReadings, String> {
    read(value, FLAT_KEY, |w| match w {
        ["offset16", a, "control", c] => Some(FlatReadings {
            offset16: hex(a)?,
            control: hex(c)?,
        }),
        _ => None,
    })
}

pub fn parse_fma(value: Option<&str>) -> Result<FmaReadings, String> {
    read(value, FMA_KEY, |w| match w {
        ["fmac-legacy", l, "fma", f, "mul-add", m] => Some(FmaReadings {
            legacy: hex(l)?,
            fma: hex(f)?,
            mul_add: hex(m)?,
        }),
        _ => None,
    })
}

/// A verdict: the word and its sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub word: &'static str,
    pub text: String,
}

fn inconclusive(text: String) -> Verdict {
    Verdict {
        word: "inconclusive",
        text: format!("inconclusive: {text}"),
    }
}

const NOTHING_RAN: &str = "the GPU ran no kernel (the emulated GPU, which completes packets \
                           without running them, or a broken driver)";

/// The flat-offset verdict on what the two kernels read (Err: why they could not be run).
pub fn flat_verdict(r: &Result<FlatReadings, String>) -> Verdict {
    let (ok, ignored) = (flat_value(FLAT_OFFSET / 4), flat_value(0));
    let r = match r {
        Ok(r) => r,
        Err(e) => return inconclusive(format!("the flat-offset kernels could not be run: {e}")),
    };
    if r.control == UNWRITTEN && r.offset16 == UNWRITTEN {
        return inconclusive(format!("nothing was written: {NOTHING_RAN}"));
    }
    if r.control != ok {
        return inconclusive(format!(
            "the control (offset 0, address + 16) read {:#010x}, not element 4 ({ok:#010x}): \
             this GPU's loads cannot be told apart",
            r.control
        ));
    }
    if r.offset16 == ok {
        Verdict {
            word: "override-flat-offset-ok",
            text: format!(
                "`flat_load_dword ... offset:16` read element 4 ({ok:#010x}), as the control \
                 did: this card honours FLAT instruction offsets on global memory in gfx1030 \
                 code"
            ),
        }
    } else if r.offset16 == ignored {
        Verdict {
            word: "override-flat-offset-ignored",
            text: format!(
                "`flat_load_dword ... offset:16` read element 0 ({ignored:#010x}) where the \
                 control read element 4 ({ok:#010x}): this card ignores FLAT instruction \
                 offsets on global memory (LLVM's FlatSegmentOffsetBug), so gfx1030 code that \
                 uses them loads and stores at the wrong addresses"
            ),
        }
    } else {
        inconclusive(format!(
            "`flat_load_dword ... offset:16` read {:#010x}, neither element 4 ({ok:#010x}) nor \
             element 0 ({ignored:#010x})",
            r.offset16
        ))
    }
}

/// The legacy-FMA verdict on what the two kernels computed (Err: why they could not be
/// run).
pub fn fma_verdict(r: &Result<FmaReadings, String>) -> Verdict {
    let r = match r {
        Ok(r) => r,
        Err(e) => return inconclusive(format!("the FMA kernels could not be run: {e}")),
    };
    if [r.legacy, r.fma, r.mul_add] == [UNWRITTEN; 3] {
        return inconclusive(format!("nothing was written: {NOTHING_RAN}"));
    }
    if r.fma != FUSED || r.mul_add != UNFUSED {
        return inconclusive(format!(
            "the control computed v_fma_f32 {:#010x} and v_mul_f32 + v_add_f32 {:#010x}, not \
             the host's {FUSED:#010x} and {UNFUSED:#010x}",
            r.fma, r.mul_add
        ));
    }
    match r.legacy {
        FUSED => Verdict {
            word: "override-fma-legacy-ok",
            text: format!(
                "v_fmac_legacy_f32 gave the fused answer ({FUSED:#010x}, as v_fma_f32): this \
                 card runs it as gfx1030 does"
            ),
        },
        UNFUSED => Verdict {
            word: "override-fma-legacy-unfused",
            text: format!(
                "v_fmac_legacy_f32 gave the unfused answer ({UNFUSED:#010x}, as v_mul_f32 + \
                 v_add_f32) where gfx1030 gives {FUSED:#010x}: this card runs it as \
                 v_mac_legacy_f32, multiply and add rounded apart, so gfx1030 code that uses \
                 it computes other results here"
            ),
        },
        other => inconclusive(format!(
            "v_fmac_legacy_f32 gave {other:#010x}, neither the fused {FUSED:#010x} nor the \
             unfused {UNFUSED:#010x}"
        )),
    }
}

/// Whether the override experiments ran, and what they found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not run: why (not gfx101x, no GPU, the card not known).
    NotRun(String),
    Ran {
        /// The card, from the KFD topology.
        card: String,
        flat: Result<FlatReadings, String>,
        fma: Result<FmaReadings, String>,
    },
}

/// What the override run printed, by key (`get`), and how it ended (`ended`, for the
/// sentence when a line is missing).
pub fn outcome(card: &str, get: impl Fn(&str) -> Option<String>, ended: &str) -> Outcome {
    let with_end = |e: String| {
        if e.starts_with("the override run printed no") {
            format!("{e} (it ended with {ended})")
        } else {
            e
        }
    };
    Outcome::Ran {
        card: card.to_string(),
        flat: parse_flat(get(FLAT_KEY).as_deref()).map_err(with_end),
        fma: parse_fma(get(FMA_KEY).as_deref()).map_err(with_end),
    }
}

impl Outcome {
    /// The two verdicts, None when not run.
    pub fn verdicts(&self) -> Option<(Verdict, Verdict)> {
        match self {
            Outcome::NotRun(_) => None,
            Outcome::Ran { flat, fma, .. } => Some((flat_verdict(flat), fma_verdict(fma))),
        }
    }

    /// The text output's lines.
    pub fn text(&self) -> String {
        match (self, self.verdicts()) {
            (Outcome::Ran { card, .. }, Some((f, m))) => format!(
                "override experiments ({OVERRIDE_VARIABLE}={OVERRIDE}: gfx1030 code on this \
                 {card}):\noverride flat offset: {}\noverride flat offset word: {}\noverride \
                 legacy fma: {}\noverride legacy fma word: {}\n",
                f.text, f.word, m.text, m.word
            ),
            (Outcome::NotRun(why), _) => format!("override experiments: not run: {why}\n"),
            _ => String::new(),
        }
    }

    /// The experiments as JSON.
    pub fn json(&self) -> Value {
        let Outcome::Ran { card, flat, fma } = self else {
            let Outcome::NotRun(why) = self else {
                unreachable!()
            };
            return json!({ "run": false, "not_run": why, "flat_offset": null, "fma_legacy": null });
        };
        let (fv, mv) = (flat_verdict(flat), fma_verdict(fma));
        let h = |x: u32| format!("{x:#010x}");
        json!({
            "run": true,
            "card": card,
            "hsa_override_gfx_version": OVERRIDE,
            "flat_offset": {
                "verdict": fv.word,
                "sentence": fv.text,
                "offset16": flat.as_ref().ok().map(|r| h(r.offset16)),
                "control": flat.as_ref().ok().map(|r| h(r.control)),
                "error": flat.as_ref().err(),
                "element_4": h(flat_value(FLAT_OFFSET / 4)),
                "element_0": h(flat_value(0)),
            },
            "fma_legacy": {
                "verdict": mv.word,
                "sentence": mv.text,
                "inputs": FMA_INPUTS.map(h),
                "fmac_legacy": fma.as_ref().ok().map(|r| h(r.legacy)),
                "fma": fma.as_ref().ok().map(|r| h(r.fma)),
                "mul_add": fma.as_ref().ok().map(|r| h(r.mul_add)),
                "error": fma.as_ref().err(),
                "fused": h(FUSED),
                "unfused": h(UNFUSED),
            },
        })
    }
}

/// The card's gfx from the measurement's `kfd:` line (`node 1 gfx1010 pcie-atomics ...`).
pub fn kfd_gfx(kfd: &str) -> Option<&str> {
    kfd.split_whitespace()
        .nth(2)
        .filter(|w| w.starts_with("gfx") && rmcp_core::gfx::Gfx::parse(w).is_some())
}

/// Why the experiments are not run on the card the `kfd:` line names (None: run them).
pub fn not_run_on(kfd: Option<&str>) -> Option<String> {
    let Some(kfd) = kfd else {
        return Some("no usable GPU (the runs printed no `kfd:` line)".into());
    };
    let Some(gfx) = kfd_gfx(kfd) else {
        return Some(format!(
            "the card is not known from the KFD topology (kfd: {kfd})"
        ));
    };
    let rdna1 = rmcp_core::gfx::Gfx::parse(gfx).is_some_and(rmcp_core::quirks::is_rdna1);
    (!rdna1).then(|| {
        format!(
            "the card is {gfx} (KFD topology), not gfx1010-gfx1013: they show what gfx1030 \
             code does on an RX 5000 under {OVERRIDE_VARIABLE}={OVERRIDE}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp_core::code_objects::amdgpu;
    use rmcp_core::gfx::Gfx;
    use rmcp_core::gfx10::{self, Format};
    use rmcp_core::gfx101x::{self, Bug, Otherwise};

    const E4: u32 = flat_value(4);
    const E0: u32 = flat_value(0);

    #[test]
    fn the_fma_inputs_round_apart() {
        let [a, b, c] = FMA_INPUTS.map(f32::from_bits);
        assert_eq!(a, 1.0 + 2f32.powi(-12));
        assert_eq!(b, 1.0 + 2f32.powi(-12) + 2f32.powi(-23));
        assert_eq!(c, -(1.0 + 2f32.powi(-11)));
        for x in [a, b, c] {
            assert!(x.is_normal(), "legacy multiplies: no zero, no infinity");
        }
        let fused = a.mul_add(b, c);
        let unfused = a * b + c;
        assert_eq!(fused.to_bits(), FUSED, "{fused:e}");
        assert_eq!(unfused.to_bits(), UNFUSED, "{unfused:e}");
        assert_ne!(FUSED, UNFUSED);
        assert_eq!(
            f64::from(fused),
            2f64.powi(-23) + 2f64.powi(-24) + 2f64.powi(-35)
        );
        assert_eq!(f64::from(unfused), 2f64.powi(-22));
        // The exact product, in f64, is no tie between two f32: the rounding mode's tie
        // rule does not matter.
        let exact = f64::from(a) * f64::from(b);
        let lo = 1.0 + 2f64.powi(-11) + 2f64.powi(-23);
        let hi = 1.0 + 2f64.powi(-11) + 2f64.powi(-22);
        assert!(exact - lo > hi - exact, "rounds up, not a tie");
        assert_eq!(f64::from(a * b), hi);
    }

    #[test]
    fn flat_table() {
        let ok = |a, c| {
            Ok(FlatReadings {
                offset16: a,
                control: c,
            })
        };
        let cases: [(&str, Result<FlatReadings, String>, &str); 9] = [
            ("offset honoured", ok(E4, E4), "override-flat-offset-ok"),
            ("offset ignored", ok(E0, E4), "override-flat-offset-ignored"),
            (
                "emulated GPU: nothing ran",
                ok(UNWRITTEN, UNWRITTEN),
                "inconclusive",
            ),
            ("control not run", ok(E0, UNWRITTEN), "inconclusive"),
            ("control read element 0", ok(E0, E0), "inconclusive"),
            ("control read zero", ok(E4, 0), "inconclusive"),
            ("neither element", ok(flat_value(2), E4), "inconclusive"),
            ("kernel A not run", ok(UNWRITTEN, E4), "inconclusive"),
            (
                "a fault",
                Err("kernel: hipErrorIllegalAddress (700)".into()),
                "inconclusive",
            ),
        ];
        for (what, r, word) in cases {
            let v = flat_verdict(&r);
            assert_eq!(v.word, word, "{what}: {}", v.text);
            assert_eq!(
                v.word == "inconclusive",
                v.text.starts_with("inconclusive: ")
            );
        }
        assert!(
            flat_verdict(&ok(UNWRITTEN, UNWRITTEN))
                .text
                .contains("ran no kernel")
        );
        assert!(
            flat_verdict(&ok(E0, E4))
                .text
                .contains("FlatSegmentOffsetBug")
        );
    }

    #[test]
    fn fma_table() {
        let ok = |l, f, m| {
            Ok(FmaReadings {
                legacy: l,
                fma: f,
                mul_add: m,
            })
        };
        let cases: [(&str, Result<FmaReadings, String>, &str); 9] = [
            ("fused", ok(FUSED, FUSED, UNFUSED), "override-fma-legacy-ok"),
            (
                "unfused",
                ok(UNFUSED, FUSED, UNFUSED),
                "override-fma-legacy-unfused",
            ),
            (
                "emulated GPU",
                ok(UNWRITTEN, UNWRITTEN, UNWRITTEN),
                "inconclusive",
            ),
            ("neither", ok(0x3480_0001, FUSED, UNFUSED), "inconclusive"),
            ("zero", ok(0, FUSED, UNFUSED), "inconclusive"),
            (
                "control fma wrong",
                ok(FUSED, UNFUSED, UNFUSED),
                "inconclusive",
            ),
            (
                "control mul-add fused",
                ok(UNFUSED, FUSED, FUSED),
                "inconclusive",
            ),
            (
                "control not run",
                ok(UNFUSED, UNWRITTEN, UNWRITTEN),
                "inconclusive",
            ),
            (
                "not loaded",
                Err("hipModuleLoadData: hipErrorNoBinaryForGpu (209)".into()),
                "inconclusive",
            ),
        ];
        for (what, r, word) in cases {
            let v = fma_verdict(&r);
            assert_eq!(v.word, word, "{what}: {}", v.text);
        }
        assert!(
            fma_verdict(&ok(UNWRITTEN, UNWRITTEN, UNWRITTEN))
                .text
                .contains("ran no kernel")
        );
    }

    #[test]
    fn lines_round_trip() {
        let f = FlatReadings {
            offset16: E0,
            control: E4,
        };
        assert_eq!(f.to_string(), "offset16 0x5a5a0000 control 0x5a5a0004");
        assert_eq!(parse_flat(Some(&f.to_string())), Ok(f));
        let m = FmaReadings {
            legacy: UNFUSED,
            fma: FUSED,
            mul_add: UNFUSED,
        };
        assert_eq!(
            m.to_string(),
            "fmac-legacy 0x34800000 fma 0x34400800 mul-add 0x34800000"
        );
        assert_eq!(parse_fma(Some(&m.to_string())), Ok(m));
        assert_eq!(
            parse_flat(Some("error: kernel: hipErrorIllegalAddress (700)")),
            Err("kernel: hipErrorIllegalAddress (700)".into())
        );
        for bad in [
            "",
            "offset16 5 control 0x1",
            "offset16 0x1",
            "control 0x1 offset16 0x1",
        ] {
            assert!(parse_flat(Some(bad)).is_err(), "{bad}");
        }
        assert!(parse_fma(None).unwrap_err().contains("printed no"));
        let o = outcome("gfx1010", |_| None, "exit status 2");
        let (f, m) = o.verdicts().unwrap();
        assert_eq!((f.word, m.word), ("inconclusive", "inconclusive"));
        assert!(
            f.text.contains("(it ended with exit status 2)"),
            "{}",
            f.text
        );
    }

    #[test]
    fn only_gfx101x_cards_run_them() {
        assert_eq!(
            not_run_on(Some(
                "node 1 gfx1010 pcie-atomics unsupported (io_links flags [13])"
            )),
            None
        );
        assert_eq!(
            not_run_on(Some("node 2 gfx1013 pcie-atomics supported")),
            None
        );
        let why = not_run_on(Some("node 1 gfx1031 pcie-atomics unsupported")).unwrap();
        assert!(
            why.contains("gfx1031") && why.contains("not gfx1010-gfx1013"),
            "{why}"
        );
        assert!(not_run_on(Some("unknown (hipDeviceGetPCIBusId failed)")).is_some());
        assert!(not_run_on(None).is_some());
        let j = Outcome::NotRun("x".into()).json();
        assert_eq!(j["run"], false);
        assert_eq!(j["not_run"], "x");
    }

    #[test]
    fn json_carries_the_readings_and_the_words() {
        let o = Outcome::Ran {
            card: "gfx1010".into(),
            flat: Ok(FlatReadings {
                offset16: E0,
                control: E4,
            }),
            fma: Err("no".into()),
        };
        let j = o.json();
        assert_eq!(j["flat_offset"]["verdict"], "override-flat-offset-ignored");
        assert_eq!(j["flat_offset"]["offset16"], "0x5a5a0000");
        assert_eq!(j["fma_legacy"]["verdict"], "inconclusive");
        assert_eq!(j["fma_legacy"]["error"], "no");
        assert_eq!(j["fma_legacy"]["fused"], "0x34400800");
        let t = o.text();
        assert!(
            t.contains("override flat offset word: override-flat-offset-ignored"),
            "{t}"
        );
        assert!(t.contains("override legacy fma word: inconclusive"), "{t}");
    }

    /// The embedded gfx1030 code: each kernel holds the instruction under test, decoded by
    /// rmcp_core's GFX10 decoder; as gfx1010 runs it, the only gfx101x sites are the flat
    /// offset and the legacy FMA under test (nothing that can hang: no s_inst_prefetch, no
    /// NSA, no race hazard).
    #[test]
    fn the_embedded_kernels_hold_the_instructions_under_test() {
        let bundle = super::super::kernels::override_bundle();
        if bundle.is_empty() {
            rmcp_testkit::missing("rmcp was built without hipcc: no override kernels");
            return;
        }
        let (places, _) = amdgpu::places(bundle).unwrap();
        let gfx1030: Vec<_> = places
            .iter()
            .filter(|p| {
                p.bundle_target
                    .as_deref()
                    .is_some_and(|t| t.ends_with("gfx1030"))
            })
            .collect();
        assert_eq!(gfx1030.len(), 1, "{places:?}");
        let p = gfx1030[0];
        let elf = &bundle[p.at..p.at + p.len];
        let object = amdgpu::object(elf, p.bundle_target.as_deref()).unwrap();
        let code = |name: &str| {
            let f = object
                .functions
                .iter()
                .find(|f| f.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("no {name} in {:?}", object.functions));
            let mut insns = Vec::new();
            let mut at = f.start;
            while at < f.end {
                let i = gfx10::decode(elf, at).unwrap();
                insns.push(i);
                if i.name == "s_endpgm" {
                    break;
                }
                at += i.len;
            }
            insns
        };
        let flat = |insns: &[gfx10::Insn]| -> Vec<(Format, &'static str, i32)> {
            insns
                .iter()
                .filter(|i| i.format.is_flat())
                .map(|i| (i.format, i.name, i.offset))
                .collect()
        };
        let a = code("rmcp_override_flat_offset");
        assert_eq!(
            flat(&a)[0],
            (Format::Flat, "flat_load_dword", FLAT_OFFSET as i32),
            "{a:?}"
        );
        let b = code("rmcp_override_flat_control");
        assert_eq!(flat(&b)[0], (Format::Flat, "flat_load_dword", 0), "{b:?}");
        let names = |insns: &[gfx10::Insn]| insns.iter().map(|i| i.name).collect::<Vec<_>>();
        let l = names(&code("rmcp_override_fma_legacy"));
        assert!(l.contains(&"v_fmac_legacy_f32"), "{l:?}");
        let c = names(&code("rmcp_override_fma_control"));
        for n in ["v_fma_f32", "v_mul_f32", "v_add_f32"] {
            assert!(c.contains(&n), "{n}: {c:?}");
        }
        assert!(
            !c.contains(&"v_fmac_legacy_f32") && !c.contains(&"v_fmac_f32"),
            "{c:?}"
        );

        let sites = gfx101x::scan_image(bundle, Gfx::parse("gfx1010").unwrap()).unwrap();
        let mut seen = Vec::new();
        for f in sites.objects.iter().flat_map(|o| &o.functions) {
            let name = f.name.clone().unwrap_or_default();
            assert_eq!(f.undecodable, None, "{name}");
            for bug in Bug::ALL {
                for _ in 0..f.counts[bug.index()] {
                    seen.push((name.clone(), format!("{bug:?}")));
                }
            }
            if f.otherwise > 0 {
                seen.push((name.clone(), format!("otherwise x{}", f.otherwise)));
            }
        }
        assert_eq!(
            seen,
            [
                (
                    "rmcp_override_flat_offset".to_string(),
                    "FlatSegmentOffset".to_string()
                ),
                (
                    "rmcp_override_fma_legacy".to_string(),
                    "otherwise x1".to_string()
                ),
            ],
            "the gfx101x sites of the override kernels"
        );
        let legacy = code("rmcp_override_fma_legacy");
        let at = legacy
            .iter()
            .position(|i| i.name == "v_fmac_legacy_f32")
            .unwrap();
        let f = object
            .functions
            .iter()
            .find(|f| f.name.as_deref() == Some("rmcp_override_fma_legacy"))
            .unwrap();
        let scanned = gfx101x::scan_code(
            &elf[f.start..f.end],
            Gfx::parse("gfx1010").unwrap(),
            false,
            true,
        );
        let off: usize = legacy[..at].iter().map(|i| i.len).sum();
        assert_eq!(scanned.otherwise.len(), 1);
        assert_eq!(scanned.otherwise[0].at, off);
        assert_eq!(
            scanned.otherwise[0].how,
            Otherwise::Other("v_mac_legacy_f32")
        );
    }
}
