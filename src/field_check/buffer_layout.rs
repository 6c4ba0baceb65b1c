//! The buffer-layout experiment of `rmcp check`: what this GPU does with buffer stores and
//! loads through Triton's RDNA1 resource layout (word 3 `0x00027000`), through the RDNA
//! layout rmcp writes in its place (`0x31027000`,
//! `rmcp_core::buffer_descriptors::fixed_word3`), and with plain global stores (the
//! control), each on `BUF_N` elements of the check's own hipMalloc memory (kernels.hip,
//! measure.rs). This file owns the lines' format, reading them back, and the verdict: a
//! pure function of the three counts, table-tested.
//!
//! The verdict words:
//! - `buffer-layout-drops-writes`: the control and the RDNA layout wrote and read every
//!   element, Triton's RDNA1 layout did not: Triton kernels built with buffer ops lose
//!   their results on this GPU (the failure of the issue "Triton's kernels write nothing on
//!   an RX 5000"), and the layout rmcp writes works;
//! - `buffer-layout-ok`: both layouts and the control wrote and read every element;
//! - `buffer-layout-fix-fails`: the control worked but the RDNA layout lost elements: rmcp's
//!   rewrite would not help here (please report);
//! - `inconclusive`: the control lost elements (no kernel ran: an emulated GPU, or a broken
//!   driver), or a kernel could not be loaded or launched.

use std::fmt;

use serde_json::{Value, json};

/// The measurement's line keys.
pub const TRITON_KEY: &str = "buffer-triton";
pub const RDNA_KEY: &str = "buffer-rdna";
pub const GLOBAL_KEY: &str = "buffer-global";
pub const VERDICT_KEY: &str = "buffer-verdict";

/// Word 3 of each buffer kernel's descriptor (kernels.hip).
pub const TRITON_WORD3: u32 = 0x0002_7000;
pub const RDNA_WORD3: u32 = rmcp_core::buffer_descriptors::fixed_word3(TRITON_WORD3);

/// What one kernel left: elements written (out), read back (back), of `total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub written: u64,
    pub read: u64,
    pub total: u64,
}

impl Counts {
    fn complete(&self) -> bool {
        self.total > 0 && self.written == self.total && self.read == self.total
    }
}

impl fmt::Display for Counts {
    /// `written 4096/4096 read 4096/4096`: the line's value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "written {}/{} read {}/{}",
            self.written, self.total, self.read, self.total
        )
    }
}

/// Reads a line's value back (None: an error line, or anything else).
pub fn parse(value: &str) -> Option<Counts> {
    let w: Vec<&str> = value.split_whitespace().collect();
    let ["written", written, "read", read] = w.as_slice() else {
        return None;
    };
    let (w, t1) = written.split_once('/')?;
    let (r, t2) = read.split_once('/')?;
    if t1 != t2 {
        return None;
    }
    Some(Counts {
        written: w.parse().ok()?,
        read: r.parse().ok()?,
        total: t1.parse().ok()?,
    })
}

/// A verdict: the word and its sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub word: &'static str,
    pub text: String,
}

/// The verdict on one run's three counts (None: the kernel could not be run).
pub fn verdict(triton: Option<Counts>, rdna: Option<Counts>, global: Option<Counts>) -> Verdict {
    let inconclusive = |text: String| Verdict {
        word: "inconclusive",
        text,
    };
    let Some(g) = global else {
        return inconclusive("the control kernel (plain global stores) could not be run".into());
    };
    if !g.complete() {
        return inconclusive(format!(
            "the control (plain global stores) {g}: the GPU ran no kernel (an emulated GPU) or \
             loses plain writes, so this cannot tell the buffer layouts apart"
        ));
    }
    let (Some(t), Some(r)) = (triton, rdna) else {
        return inconclusive("a buffer kernel could not be run (see its error line)".into());
    };
    match (t.complete(), r.complete()) {
        (true, true) => Verdict {
            word: "buffer-layout-ok",
            text: format!(
                "buffer stores and loads work through Triton's RDNA1 layout \
                 ({TRITON_WORD3:#010x}) and the RDNA layout ({RDNA_WORD3:#010x}) on this GPU"
            ),
        },
        (false, true) => Verdict {
            word: "buffer-layout-drops-writes",
            text: format!(
                "through Triton's RDNA1 layout ({TRITON_WORD3:#010x}) this GPU {t}: Triton \
                 kernels built with buffer ops lose their results here; through the RDNA \
                 layout rmcp writes in its place ({RDNA_WORD3:#010x}) it {r}"
            ),
        },
        (_, false) => Verdict {
            word: "buffer-layout-fix-fails",
            text: format!(
                "through the RDNA layout rmcp writes ({RDNA_WORD3:#010x}) this GPU {r} (Triton's \
                 RDNA1 layout: {t}), while plain global stores work: rmcp's rewrite does not \
                 help here; please report this"
            ),
        },
    }
}

/// The counts a run printed, by key.
pub fn run_counts(get: impl Fn(&str) -> Option<String>) -> [Option<Counts>; 3] {
    [TRITON_KEY, RDNA_KEY, GLOBAL_KEY].map(|k| get(k).and_then(|v| parse(&v)))
}

/// The verdict on the two runs of `rmcp check`: the run without rmcp says what this GPU
/// does with Triton's layout; the run with rmcp whether the Triton-layout kernel wrote
/// everything there (rmcp rewrites its descriptor when the shim's load hook is active).
pub fn combined(without: [Option<Counts>; 3], with: [Option<Counts>; 3]) -> Verdict {
    let [t, r, g] = without;
    let mut v = verdict(t, r, g);
    if v.word == "buffer-layout-drops-writes" {
        let after = match with[0] {
            Some(c) if c.complete() => {
                format!("; with rmcp the Triton-layout kernel {c}: rmcp rewrote its descriptor")
            }
            Some(c) => format!("; with rmcp the Triton-layout kernel still {c}"),
            None => "; with rmcp the Triton-layout kernel could not be run".into(),
        };
        v.text.push_str(&after);
    }
    v
}

/// The experiment as JSON: each kernel's counts per run, and the verdict.
pub fn json(without: [Option<Counts>; 3], with: [Option<Counts>; 3]) -> Value {
    let run = |c: [Option<Counts>; 3]| {
        let one = |x: Option<Counts>, word3: Option<u32>| match x {
            Some(c) => json!({
                "word3": word3.map(|w| format!("{w:#010x}")),
                "written": c.written,
                "read": c.read,
                "total": c.total,
            }),
            None => Value::Null,
        };
        json!({
            "triton_rdna1_layout": one(c[0], Some(TRITON_WORD3)),
            "rdna_layout": one(c[1], Some(RDNA_WORD3)),
            "global_control": one(c[2], None),
        })
    };
    let v = combined(without, with);
    json!({
        "verdict": v.word,
        "sentence": v.text,
        "without_rmcp": run(without),
        "with_rmcp": run(with),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(written: u64, read: u64) -> Option<Counts> {
        Some(Counts {
            written,
            read,
            total: 4096,
        })
    }

    #[test]
    fn rmcp_writes_the_rdna_layout() {
        assert_eq!(RDNA_WORD3, 0x3102_7000);
    }

    #[test]
    fn verdict_table() {
        let full = c(4096, 4096);
        let none = c(0, 0);
        for (what, triton, rdna, global, word) in [
            (
                "RX 5000 as reported",
                none,
                full,
                full,
                "buffer-layout-drops-writes",
            ),
            (
                "stores dropped only",
                c(0, 4096),
                full,
                full,
                "buffer-layout-drops-writes",
            ),
            (
                "loads zero only",
                c(4096, 0),
                full,
                full,
                "buffer-layout-drops-writes",
            ),
            (
                "some dropped",
                c(4000, 4096),
                full,
                full,
                "buffer-layout-drops-writes",
            ),
            ("both layouts work", full, full, full, "buffer-layout-ok"),
            (
                "RDNA layout fails too",
                none,
                none,
                full,
                "buffer-layout-fix-fails",
            ),
            (
                "only the RDNA layout fails",
                full,
                c(1, 1),
                full,
                "buffer-layout-fix-fails",
            ),
            (
                "emulated GPU: nothing ran",
                none,
                none,
                none,
                "inconclusive",
            ),
            (
                "control lost writes",
                none,
                full,
                c(4095, 4096),
                "inconclusive",
            ),
            ("control lost reads", none, full, c(4096, 0), "inconclusive"),
            ("control not run", none, full, None, "inconclusive"),
            ("Triton kernel not run", None, full, full, "inconclusive"),
            ("RDNA kernel not run", none, None, full, "inconclusive"),
            (
                "empty counts are no proof",
                c(0, 0),
                c(0, 0),
                Some(Counts {
                    written: 0,
                    read: 0,
                    total: 0,
                }),
                "inconclusive",
            ),
        ] {
            assert_eq!(verdict(triton, rdna, global).word, word, "{what}");
        }
    }

    #[test]
    fn lines_round_trip() {
        let x = Counts {
            written: 12,
            read: 4096,
            total: 4096,
        };
        assert_eq!(x.to_string(), "written 12/4096 read 4096/4096");
        assert_eq!(parse(&x.to_string()), Some(x));
        for bad in [
            "",
            "error: hipModuleGetFunction: hipErrorNotFound (500)",
            "written 1/2 read 1/3",
            "written x/2 read 1/2",
            "written 1/2",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_run_with_rmcp_says_whether_the_rewrite_worked() {
        let full = c(4096, 4096);
        let none = c(0, 0);
        let fixed = combined([none, full, full], [full, full, full]);
        assert_eq!(fixed.word, "buffer-layout-drops-writes");
        assert!(
            fixed.text.contains("rmcp rewrote its descriptor"),
            "{}",
            fixed.text
        );
        let not = combined([none, full, full], [none, full, full]);
        assert!(not.text.contains("still written 0/4096"), "{}", not.text);
        let emulated = combined([none, none, none], [none, none, none]);
        assert_eq!(emulated.word, "inconclusive");
        let j = json([none, full, full], [full, full, full]);
        assert_eq!(j["verdict"], "buffer-layout-drops-writes");
        assert_eq!(
            j["without_rmcp"]["triton_rdna1_layout"]["word3"],
            "0x00027000"
        );
        assert_eq!(j["with_rmcp"]["triton_rdna1_layout"]["written"], 4096);
        assert_eq!(j["without_rmcp"]["global_control"]["word3"], Value::Null);
    }
}
