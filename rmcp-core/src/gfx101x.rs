//! Where gfx103x (RDNA2) machine code goes wrong on gfx101x (RDNA1) silicon: what an
//! RX 5000 runs under `HSA_OVERRIDE_GFX_VERSION=10.3.0`. This module owns the scan: for
//! each function of a code object built for gfx103x, every site of the twelve gfx101x
//! hardware bugs LLVM works around only when it compiles for gfx101x ([`Bug`]), and every
//! instruction the card decodes as another instruction or not at all ([`Otherwise`]).
//!
//! The API (what the doctor, the shim and the tests call):
//!
//! ```text
//! pub enum Bug { VmemToScalarWrite, SmemToVectorWrite, VcmpxExecWar, VcmpxPermlane,
//!     LdsBranchVmemWar, InstFwdPrefetch, FlatSegmentOffset, Offset3f, NsaToVmem,
//!     NsaClause, NegativeUnalignedScratchOffset, LdsMisaligned }
//! Bug::ALL, Bug::mattr() ("vmem-to-scalar-write-hazard", LLVM's -mattr name),
//! Bug::harm() (Harm::Race | Harm::Hang | Harm::Fault | Harm::WrongResult)
//! pub enum Otherwise { Other(&'static str), Invalid, ScratchSaddrExecHi }
//! pub struct Site { bug: Bug, at: usize }
//! pub struct OtherwiseSite { at: usize, gfx1030: &'static str, how: Otherwise }
//! pub struct CodeSites { sites, otherwise, instructions, undecodable: Option<usize> }
//! pub fn scan_code(code: &[u8], card: Gfx, wave64: bool, wgp_mode: bool) -> CodeSites;
//! pub struct FunctionSites { name, at, len, counts: Counts, first: [Option<usize>; 12],
//!     otherwise: usize, first_otherwise: Option<usize>, undecodable: Option<usize>,
//!     instructions: usize }
//! pub struct ObjectSites { target, gfx, at, len, gfx103x: bool, functions }
//! pub struct ImageSites { objects, compressed_skipped }
//! pub fn scan_image(image: &[u8], card: Gfx) -> Result<ImageSites, ImageError>;
//! ```
//!
//! Offsets in a [`CodeSites`] are relative to the code handed in; everything else is an
//! offset in the image. Pure: no FFI, no logging, no global state, never a panic.

use crate::code_objects::amdgpu::{self, ImageError};
use crate::gfx::Gfx;
use crate::gfx10;

/// The twelve gfx101x hardware bugs gfx1030 does not have (LLVM `AMDGPU.td`,
/// `FeatureISAVersion10_1_Common` against `FeatureISAVersion10_3_0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bug {
    VmemToScalarWrite,
    SmemToVectorWrite,
    VcmpxExecWar,
    VcmpxPermlane,
    LdsBranchVmemWar,
    InstFwdPrefetch,
    FlatSegmentOffset,
    Offset3f,
    NsaToVmem,
    NsaClause,
    NegativeUnalignedScratchOffset,
    LdsMisaligned,
}

/// What a bug does when it strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Harm {
    /// A read or write ordered wrongly against another: a stale or wrong value, sometimes.
    Race,
    /// The wave hangs (and with it the queue until the driver resets the GPU).
    Hang,
    /// The wrong address is used: wrong data, or a memory fault.
    Fault,
}

impl Bug {
    pub const ALL: [Bug; 12] = [
        Bug::VmemToScalarWrite,
        Bug::SmemToVectorWrite,
        Bug::VcmpxExecWar,
        Bug::VcmpxPermlane,
        Bug::LdsBranchVmemWar,
        Bug::InstFwdPrefetch,
        Bug::FlatSegmentOffset,
        Bug::Offset3f,
        Bug::NsaToVmem,
        Bug::NsaClause,
        Bug::NegativeUnalignedScratchOffset,
        Bug::LdsMisaligned,
    ];

    /// LLVM's `-mattr` name of the feature that works around it.
    pub fn mattr(self) -> &'static str {
        match self {
            Bug::VmemToScalarWrite => "vmem-to-scalar-write-hazard",
            Bug::SmemToVectorWrite => "smem-to-vector-write-hazard",
            Bug::VcmpxExecWar => "vcmpx-exec-war-hazard",
            Bug::VcmpxPermlane => "vcmpx-permlane-hazard",
            Bug::LdsBranchVmemWar => "lds-branch-vmem-war-hazard",
            Bug::InstFwdPrefetch => "inst-fwd-prefetch-bug",
            Bug::FlatSegmentOffset => "flat-segment-offset-bug",
            Bug::Offset3f => "offset-3f-bug",
            Bug::NsaToVmem => "nsa-to-vmem-bug",
            Bug::NsaClause => "nsa-clause-bug",
            Bug::NegativeUnalignedScratchOffset => "negative-unaligned-scratch-offset-bug",
            Bug::LdsMisaligned => "lds-misaligned-bug",
        }
    }

    /// Its index in [`Bug::ALL`] (and in [`Counts`]).
    pub fn index(self) -> usize {
        self as usize
    }

    /// What it does when it strikes (docs/design.md argues each).
    pub fn harm(self) -> Harm {
        match self {
            Bug::InstFwdPrefetch | Bug::NsaClause => Harm::Hang,
            Bug::FlatSegmentOffset
            | Bug::Offset3f
            | Bug::NsaToVmem
            | Bug::NegativeUnalignedScratchOffset
            | Bug::LdsMisaligned => Harm::Fault,
            Bug::VmemToScalarWrite
            | Bug::SmemToVectorWrite
            | Bug::VcmpxExecWar
            | Bug::VcmpxPermlane
            | Bug::LdsBranchVmemWar => Harm::Race,
        }
    }
}

/// Sites per bug, indexed by [`Bug::index`].
pub type Counts = [usize; 12];

/// How a gfx101x card reads an instruction gfx103x code holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Otherwise {
    /// As another instruction (its gfx101x mnemonic).
    Other(&'static str),
    /// Not at all: an illegal instruction.
    Invalid,
    /// A scratch access with no address register (gfx10.3's "ST mode", SADDR 0x7f),
    /// which gfx101x reads as an address from `exec_hi`.
    ScratchSaddrExecHi,
}

/// One site of one bug: the instruction that runs wrongly (offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub bug: Bug,
    pub at: usize,
}

/// One instruction the card decodes otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OtherwiseSite {
    pub at: usize,
    /// Its gfx1030 mnemonic.
    pub gfx1030: &'static str,
    pub how: Otherwise,
}

/// What one function's code holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeSites {
    /// Sorted by offset, then bug.
    pub sites: Vec<Site>,
    pub otherwise: Vec<OtherwiseSite>,
    /// Instructions decoded.
    pub instructions: usize,
    /// Where the decoder met bytes it cannot decode; then `sites` and `otherwise` hold
    /// nothing (no guess about the rest of the function).
    pub undecodable: Option<usize>,
}

/// Scans one function's code as `card` (gfx1010-gfx1013) would run it. `wave64` and
/// `wgp_mode` are the kernel descriptor's (wave32 and WGP mode when unknown: what HIP
/// builds for gfx10).
pub fn scan_code(code: &[u8], card: Gfx, wave64: bool, wgp_mode: bool) -> CodeSites {
    let _ = (card, wave64, wgp_mode);
    let mut out = CodeSites::default();
    let mut at = 0;
    while at < code.len() {
        match gfx10::decode(code, at) {
            Ok(i) => {
                out.instructions += 1;
                at += i.len;
            }
            Err(_) => {
                return CodeSites {
                    undecodable: Some(at),
                    instructions: out.instructions,
                    ..CodeSites::default()
                };
            }
        }
    }
    out
}

/// One function's sites, offsets in the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSites {
    /// The function symbol (a kernel `foo`, its descriptor `foo.kd`), None for a whole
    /// executable section of an object without symbols.
    pub name: Option<String>,
    pub at: usize,
    pub len: usize,
    pub counts: Counts,
    /// The first site of each bug.
    pub first: [Option<usize>; 12],
    pub otherwise: usize,
    pub first_otherwise: Option<usize>,
    pub instructions: usize,
    pub undecodable: Option<usize>,
}

impl FunctionSites {
    /// Sites of every bug.
    pub fn total(&self) -> usize {
        self.counts.iter().sum()
    }
}

/// One code object of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectSites {
    pub target: String,
    pub gfx: Option<Gfx>,
    pub at: usize,
    pub len: usize,
    /// Whether it is gfx103x code (gfx1030-gfx1036, gfx10-3-generic), the only code
    /// scanned; `functions` is empty otherwise.
    pub gfx103x: bool,
    pub functions: Vec<FunctionSites>,
}

/// What [`scan_image`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageSites {
    pub objects: Vec<ObjectSites>,
    /// Compressed offload bundles (not opened here; the caller inflates them).
    pub compressed_skipped: usize,
}

impl ImageSites {
    /// Sites per bug over every function.
    pub fn counts(&self) -> Counts {
        let mut c = [0; 12];
        for f in self.objects.iter().flat_map(|o| &o.functions) {
            for (t, n) in c.iter_mut().zip(f.counts) {
                *t += n;
            }
        }
        c
    }
}

fn gfx103x_target(target: &str) -> bool {
    let p = amdgpu::processor(target);
    p == "gfx10-3-generic" || (p.len() == 7 && p.starts_with("gfx103"))
}

/// Scans every gfx103x object of an image (a bare ELF or a plain offload bundle) as
/// `card` would run it.
pub fn scan_image(image: &[u8], card: Gfx) -> Result<ImageSites, ImageError> {
    let (places, compressed_skipped) = amdgpu::places(image)?;
    let mut out = ImageSites {
        objects: Vec::new(),
        compressed_skipped,
    };
    for p in places {
        let elf = &image[p.at..p.at + p.len];
        let object = amdgpu::object(elf, p.bundle_target.as_deref())?;
        let gfx103x = gfx103x_target(&object.target) && gfx103x_target(&object.header_target);
        let mut functions = Vec::new();
        if gfx103x {
            for f in &object.functions {
                let code = scan_code(
                    &elf[f.start..f.end],
                    card,
                    f.wave64.unwrap_or(false),
                    f.wgp_mode.unwrap_or(true),
                );
                let base = p.at + f.start;
                let mut counts = [0; 12];
                let mut first = [None; 12];
                for s in &code.sites {
                    counts[s.bug.index()] += 1;
                    first[s.bug.index()].get_or_insert(base + s.at);
                }
                functions.push(FunctionSites {
                    name: f.name.clone(),
                    at: base,
                    len: f.end - f.start,
                    counts,
                    first,
                    otherwise: code.otherwise.len(),
                    first_otherwise: code.otherwise.first().map(|o| base + o.at),
                    instructions: code.instructions,
                    undecodable: code.undecodable.map(|u| base + u),
                });
            }
        }
        out.objects.push(ObjectSites {
            target: object.target,
            gfx: object.gfx,
            at: p.at,
            len: p.len,
            gfx103x,
            functions,
        });
    }
    Ok(out)
}
