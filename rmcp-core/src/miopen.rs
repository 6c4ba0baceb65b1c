//! Which of MIOpen's kernels a GPU is running, and MIOpen's own switches that keep a
//! convolution away from that kernel's solver family or from MIOpen's search: given a kernel's
//! name (its device symbol) and the files it is known to come from, whether it is MIOpen's
//! ([`identify`]), which family of MIOpen's solvers it belongs to ([`Family`]), the switches
//! ([`switches`]) and the lines the fault and stall blocks print ([`advice`]). Pure: the shim
//! names the kernel and its library; this module only turns them into words.
//!
//! "MIOpen's" is decided by library and name. MIOpen builds its kernels at run time from the
//! sources embedded in `libMIOpen.so` (or takes them from its kernel databases: the user's
//! `~/.cache/miopen/<version>/*.ukdb`, the system's `*.kdb`) and loads them itself: from memory
//! with `hipModuleLoadData`, or right after a build from a file in its own temporary folder
//! (`/tmp/miopen-<program>-xxxx-xxxx-xxxx-xxxx/`, src/tmp_dir.cpp) with `hipModuleLoad`; its
//! built-in HIP kernels (composable_kernel's) are registered by the library itself. So a
//! kernel is MIOpen's when one of the files known for it is one of those ([`is_miopen_file`]).
//! When no file is known at all, only names no other library uses count (`igemm_fwd_gtc...`,
//! `miopenSp3AsmConv...`); a name alone such as `SubSample` or a composable_kernel symbol does
//! not.
//!
//! Every switch is one MIOpen reads in each version rmcp supports (5.2.3, 5.7.1, 6.4.3,
//! 7.2.4), with the meaning MIOpen's documentation gives it; docs/design.md ("MIOpen's
//! switches") says where each name was checked. The family switches act on both Find and
//! Immediate mode, find-db entries included (`IsAlgorithmDisabled`: src/conv/solver_finders.cpp
//! from 5.7, src/ocl/convolutionocl.cpp in 5.2.3).

/// The direction of a convolution, as MIOpen's naive solvers name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
    Weights,
}

/// What a MIOpen kernel serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Convolution, Direct algorithm (OpenCL and assembly solvers).
    Direct,
    /// Convolution, Direct algorithm: the naive reference solvers (`ConvDirectNaiveConv*`).
    DirectNaive(Direction),
    /// Convolution, Winograd algorithm.
    Winograd,
    /// Convolution, implicit GEMM algorithm (assembly, HIP, composable_kernel, MLIR).
    ImplicitGemm,
    /// Convolution, GEMM algorithm: MIOpen's im2col and transposes around rocBLAS's GEMM.
    Gemm,
    /// Convolution, FFT algorithm.
    Fft,
    /// Another of MIOpen's operations (batch normalization, pooling, ...): no convolution
    /// solver, so no family switch.
    Other(&'static str),
    /// MIOpen's (by its library), but a name rmcp does not know.
    Unknown,
}

impl Family {
    /// Whether the kernel belongs to a convolution (the search and the family switches apply).
    pub fn is_convolution(self) -> bool {
        !matches!(self, Family::Other(_) | Family::Unknown)
    }

    /// The family as MIOpen's documentation names it.
    pub fn words(self) -> String {
        match self {
            Family::Direct => "a Direct convolution solver".into(),
            Family::DirectNaive(d) => format!(
                "the naive Direct convolution solver ({})",
                match d {
                    Direction::Forward => "forward",
                    Direction::Backward => "backward data",
                    Direction::Weights => "backward weights",
                }
            ),
            Family::Winograd => "a Winograd convolution solver".into(),
            Family::ImplicitGemm => "an implicit GEMM convolution solver".into(),
            Family::Gemm => "the GEMM convolution algorithm (its im2col or transpose)".into(),
            Family::Fft => "the FFT convolution algorithm".into(),
            Family::Other(what) => format!("MIOpen's {what}, not a convolution"),
            Family::Unknown => "a solver rmcp does not know by its kernels' names".into(),
        }
    }
}

/// How a kernel was found to be MIOpen's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// Its library or module file is MIOpen's, and its name is one MIOpen's solvers use.
    LibraryAndName,
    /// Its library or module file is MIOpen's; the name is not one rmcp knows.
    Library,
    /// No file was known; the name is one only MIOpen uses.
    Name,
}

/// A kernel found to be MIOpen's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identified {
    pub family: Family,
    pub by: By,
}

/// One of MIOpen's environment variables, set to one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    pub variable: &'static str,
    pub value: &'static str,
    /// What it does, in one line.
    pub does: &'static str,
    /// Where MIOpen documents it (the page), or reads it when no page names it (the source
    /// file); paths in ROCm/MIOpen and, from 7.x, in ROCm/rocm-libraries under projects/miopen.
    pub source: &'static str,
}

impl Switch {
    /// `VARIABLE=value`, as a shell takes it.
    pub fn assignment(&self) -> String {
        format!("{}={}", self.variable, self.value)
    }
}

const FILTERING: &str = "MIOpen docs/how-to/debug-log.rst, \"Filtering by algorithm\" \
                         (5.x: DebugAndLogging.md)";
const FIND_MODES: &str = "MIOpen docs/how-to/find-and-immediate.rst, \"Find modes\" \
                          (5.x: find_and_immediate.md)";

/// MIOPEN_FIND_MODE=FAST: what avoids MIOpen's search.
pub const FIND_FAST: Switch = Switch {
    variable: "MIOPEN_FIND_MODE",
    value: "FAST",
    does: "no search: a find-db hit, else Immediate mode's choice, instead of timing every \
           applicable solver (also 2; the default is DYNAMIC_HYBRID, 5)",
    source: FIND_MODES,
};

/// The switch that turns a convolution family off.
pub fn family_switch(family: Family) -> Option<Switch> {
    let (variable, does) = match family {
        Family::Direct | Family::DirectNaive(_) => (
            "MIOPEN_DEBUG_CONV_DIRECT",
            "turns off every Direct convolution solver (OpenCL, assembly, naive)",
        ),
        Family::Winograd => (
            "MIOPEN_DEBUG_CONV_WINOGRAD",
            "turns off every Winograd convolution solver",
        ),
        Family::ImplicitGemm => (
            "MIOPEN_DEBUG_CONV_IMPLICIT_GEMM",
            "turns off every implicit GEMM convolution solver",
        ),
        Family::Gemm => (
            "MIOPEN_DEBUG_CONV_GEMM",
            "turns off the GEMM convolution algorithm",
        ),
        Family::Fft => (
            "MIOPEN_DEBUG_CONV_FFT",
            "turns off the FFT convolution algorithm",
        ),
        Family::Other(_) | Family::Unknown => return None,
    };
    Some(Switch {
        variable,
        value: "0",
        does,
        source: FILTERING,
    })
}

/// The switch that turns off the one naive solver.
fn naive_switch(d: Direction) -> Switch {
    // Read in the solver's own file, which is the only place that names it: MIOpen's
    // documentation lists no naive switch.
    let (variable, does, source) = match d {
        Direction::Forward => (
            "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_FWD",
            "turns off the naive forward solver alone (ConvDirectNaiveConvFwd)",
            "MIOpen src/solver/conv/conv_direct_naive_conv_fwd.cpp (before 6.3: src/solver/)",
        ),
        Direction::Backward => (
            "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_BWD",
            "turns off the naive backward-data solver alone (ConvDirectNaiveConvBwd)",
            "MIOpen src/solver/conv/conv_direct_naive_conv_bwd.cpp (before 6.3: src/solver/)",
        ),
        Direction::Weights => (
            "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_WRW",
            "turns off the naive backward-weights solver alone (ConvDirectNaiveConvWrw)",
            "MIOpen src/solver/conv/conv_direct_naive_conv_wrw.cpp (before 6.3: src/solver/)",
        ),
    };
    Switch {
        variable,
        value: "0",
        does,
        source,
    }
}

/// The switches for a family, narrowest first: the one solver (naive only), the family, the
/// search. None for a kernel that is not a convolution's.
pub fn switches(family: Family) -> Vec<Switch> {
    let mut out = Vec::new();
    if let Family::DirectNaive(d) = family {
        out.push(naive_switch(d));
    }
    out.extend(family_switch(family));
    if family.is_convolution() {
        out.push(FIND_FAST);
    }
    out
}

/// Whether a library or module file is MIOpen's: `libMIOpen.so*` (Debian's, ROCm's, a wheel's
/// copy), a code object in MIOpen's temporary build folder, or one of MIOpen's kernel
/// databases (`*.ukdb` under a `miopen` folder, `*.kdb`).
pub fn is_miopen_file(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    let lower = file.to_ascii_lowercase();
    if lower.starts_with("libmiopen.so") {
        return true;
    }
    if lower.ends_with(".kdb") || (lower.ends_with(".ukdb") && path.contains("miopen")) {
        return true;
    }
    // src/tmp_dir.cpp: temp_directory_path() / "miopen-<prefix>-%%%%-%%%%-%%%%-%%%%".
    path.split('/').rev().skip(1).any(is_miopen_tmp_dir)
}

fn is_miopen_tmp_dir(dir: &str) -> bool {
    let Some(rest) = dir.strip_prefix("miopen") else {
        return false;
    };
    let groups: Vec<&str> = rest.rsplitn(5, '-').collect();
    groups.len() == 5
        && groups[..4]
            .iter()
            .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Name prefixes of MIOpen's kernels (the `kernel_name` its solvers give, src/solver/ and
/// src/ocl/), their family, and whether no other library uses the name.
const PREFIXES: &[(&str, Family, bool)] = &[
    // Winograd: the binary and RxS solvers, Fury (gfx11), the fused one.
    ("miopenSp3AsmConv", Family::Winograd, true),
    // Multi-pass Winograd's transforms (ConvWinograd3x3MultipassWrW, ConvMPBidirectWinograd).
    ("miopenGcnAsmWinograd", Family::Winograd, true),
    ("miopenGcnAsmMPBidirectWinograd", Family::Winograd, true),
    // Direct: assembly.
    ("miopenGcnAsmConv", Family::Direct, true),
    ("miopenConv5x10u2v2", Family::Direct, true),
    // Direct: OpenCL (the fused MIOpenConvUniBatchNormActiv too).
    ("MIOpenConvUni", Family::Direct, true),
    ("MIOpenConv1x1", Family::Direct, true),
    ("MIOpenCDFGen", Family::Direct, true),
    ("MIOpenCvFwd11x11", Family::Direct, true),
    ("MIOpenCvBwdWrW", Family::Direct, true),
    // Implicit GEMM: assembly (v4r1 dynamic, gtc), HIP, composable_kernel v6r1, MLIR.
    ("igemm_", Family::ImplicitGemm, true),
    ("gridwise_convolution_", Family::ImplicitGemm, true),
    (
        "convolution_forward_implicit_gemm_",
        Family::ImplicitGemm,
        true,
    ),
    ("mlir_gen_igemm_conv", Family::ImplicitGemm, true),
    ("wrw_reduction_hip", Family::ImplicitGemm, true),
    // FFT.
    ("MIOpenConvFFT_", Family::Fft, true),
    // GEMM: im2col, col2im and the transposes around rocBLAS's GEMM (src/ocl/utilocl.cpp).
    ("Im2d2Col", Family::Gemm, false),
    ("Im3d2Col", Family::Gemm, false),
    ("Col2Im2d", Family::Gemm, false),
    ("Col2Im3d", Family::Gemm, false),
    ("transpose_NCHW2CNHW", Family::Gemm, false),
    ("transpose_CNHW2NCHW", Family::Gemm, false),
    // Not convolutions.
    (
        "MIOpenBatchNorm",
        Family::Other("batch normalization"),
        true,
    ),
    ("miopenGcnAsmBN", Family::Other("batch normalization"), true),
    ("mloPooling", Family::Other("pooling"), true),
    ("MIOpenActive", Family::Other("activation"), true),
    ("MIOpenNeuron", Family::Other("activation"), true),
    (
        "MIOpenLRN",
        Family::Other("local response normalization"),
        true,
    ),
    ("Softmax", Family::Other("softmax"), false),
    ("Op1dTensor", Family::Other("a tensor operation"), false),
    ("Op2dTensor", Family::Other("a tensor operation"), false),
    ("Op3dTensor", Family::Other("a tensor operation"), false),
    ("Op4dTensor", Family::Other("a tensor operation"), false),
    ("Op5dTensor", Family::Other("a tensor operation"), false),
    ("OpTensor", Family::Other("a tensor operation"), false),
];

/// A kernel's family by its name alone, and whether no other library uses the name. None: a
/// name rmcp does not know as MIOpen's.
pub fn family_of(name: &str) -> Option<(Family, bool)> {
    if let Some(rest) = name.strip_prefix("naive_conv_") {
        // 5.x: naive_conv_fwd_nchw_float_double_float; 6.x: naive_conv_ab_nonpacked_fwd_...
        let d = rest.split('_').find_map(|w| match w {
            "fwd" => Some(Direction::Forward),
            "bwd" => Some(Direction::Backward),
            "wrw" => Some(Direction::Weights),
            _ => None,
        })?;
        return Some((Family::DirectNaive(d), true));
    }
    // The 1x1 Direct solvers' helpers (conv_asm_1x1u.cpp, conv_ocl_dir2D_bwdWrW_1x1.cpp).
    if name == "SubSample" || name == "UpSample" {
        return Some((Family::Direct, false));
    }
    // composable_kernel's device kernels MIOpen builds in (ConvHipImplicitGemm*, 6.x):
    // mangled names in namespace ck; a convolution's names it as one.
    if name.starts_with("_ZN2ck") {
        return Some(if name.contains("conv") {
            (Family::ImplicitGemm, false)
        } else {
            (Family::Other("a composable_kernel operation"), false)
        });
    }
    PREFIXES
        .iter()
        .find(|(p, _, _)| name.starts_with(p))
        .map(|(_, f, only)| (*f, *only))
}

/// Whether a kernel is MIOpen's, from its name and every file known for it (the library that
/// launched it or registered it, the module's file): a MIOpen file decides, whatever the name;
/// known files none of which is MIOpen's decide against; with no file known, only a name no
/// other library uses counts.
pub fn identify(name: &str, files: &[&str]) -> Option<Identified> {
    let by_name = family_of(name);
    if files.iter().any(|f| is_miopen_file(f)) {
        return Some(match by_name {
            Some((family, _)) => Identified {
                family,
                by: By::LibraryAndName,
            },
            None => Identified {
                family: Family::Unknown,
                by: By::Library,
            },
        });
    }
    if !files.is_empty() {
        return None;
    }
    match by_name {
        Some((family, true)) => Some(Identified {
            family,
            by: By::Name,
        }),
        _ => None,
    }
}

/// The lines the fault and stall blocks print for a MIOpen kernel: without a prefix or newline
/// (the shim's logger adds both), indented as the block's other lines, each switch with what it
/// does and its source. Empty when the kernel is not MIOpen's.
pub fn advice(name: &str, files: &[&str]) -> Vec<String> {
    let Some(k) = identify(name, files) else {
        return Vec::new();
    };
    let how = match k.by {
        By::LibraryAndName | By::Library => "by its library",
        By::Name => "by its name only",
    };
    let mut out = vec![format!(
        "  MIOpen's kernel ({how}): {name}, from {}",
        k.family.words()
    )];
    let switches = switches(k.family);
    if switches.is_empty() {
        out.push(if k.family == Family::Unknown {
            "  MIOpen names each solver it runs with MIOPEN_ENABLE_LOGGING=1 MIOPEN_LOG_LEVEL=6 \
             (MIOpen docs/how-to/debug-log.rst)"
                .to_string()
        } else {
            "  MIOpen documents no switch that avoids this kernel".to_string()
        });
        return out;
    }
    out.push("  MIOpen's own switches that avoid it (set one and rerun):".into());
    for s in &switches {
        out.push(format!("    {}: {} ({})", s.assignment(), s.does, s.source));
    }
    out
}

#[cfg(test)]
mod tests;
