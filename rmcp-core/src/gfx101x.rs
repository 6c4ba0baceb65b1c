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
//! Bug::harm() (Harm::Race | Harm::Hang | Harm::Fault | Harm::IfMisaligned)
//! pub const SCANNER_VERSION: u32 (what a cache of results is keyed by)
//! pub enum Otherwise { Other(&'static str), Invalid, ScratchSaddrExecHi }
//! pub struct Site { bug: Bug, at: usize }
//! pub struct OtherwiseSite { at: usize, gfx1030: &'static str, how: Otherwise }
//! pub struct CodeSites { sites, otherwise, instructions, undecodable: Option<usize> }
//! pub fn scan_code(code: &[u8], card: Gfx, wave64: bool, wgp_mode: bool) -> CodeSites;
//! pub struct FunctionSites { name, at, len, counts: Counts, first: [Option<usize>; 12],
//!     otherwise: usize, first_otherwise: Option<usize>, undecodable: Option<usize>,
//!     instructions: usize }
//! pub struct ObjectSites { target, gfx, at, len, gfx103x: bool, kernels, functions }
//! pub struct ImageSites { objects, compressed_skipped }
//! pub fn scan_image(image: &[u8], card: Gfx) -> Result<ImageSites, ImageError>;
//! pub struct InPlaceFix { at, bug, old: u32, new: u32 }
//! pub fn in_place_fixes(image: &[u8], card: Gfx) -> Result<InPlace, ImageError>;
//! pub fn apply(image: &[u8], fixes: &[InPlaceFix]) -> Option<Vec<u8>>;
//! ```
//!
//! Offsets in a [`CodeSites`] are relative to the code handed in; everything else is an
//! offset in the image. Pure: no FFI, no logging, no global state, never a panic.

use crate::code_objects::amdgpu::{self, ImageError};
use crate::gfx::Gfx;
use crate::gfx10::{self, Card, Control, Format, Insn, Sregs};

/// The scanner's rules and tables, as one number: raised whenever a change could change
/// what a scan finds (a cache of results keys on it).
pub const SCANNER_VERSION: u32 = 1;

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
    /// Wrong data only where the address is not naturally aligned, which the code does not
    /// tell (a multi-dword LDS access in WGP mode): a possible site, not a certain one.
    IfMisaligned,
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
            | Bug::NegativeUnalignedScratchOffset => Harm::Fault,
            Bug::LdsMisaligned => Harm::IfMisaligned,
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
/// builds for gfx10, and the mode in which the LDS bug strikes).
pub fn scan_code(code: &[u8], card: Gfx, wave64: bool, wgp_mode: bool) -> CodeSites {
    let mut insns: Vec<(usize, Insn)> = Vec::new();
    let mut at = 0;
    while at < code.len() {
        match gfx10::decode_wave(code, at, wave64) {
            Ok(i) => {
                insns.push((at, i));
                at += i.len;
            }
            Err(_) => return undecodable(at, insns.len()),
        }
    }
    if insns.is_empty() {
        return CodeSites::default();
    }
    let Some(cfg) = Cfg::new(code.len(), &insns) else {
        // A branch into the middle of an instruction: what runs is not what was decoded.
        let at = insns
            .iter()
            .find(|(a, i)| cfg_target(*a, i).is_some_and(|t| !starts_insn(&insns, t)))
            .map_or(0, |(a, _)| *a);
        return undecodable(at, insns.len());
    };
    let mut out = CodeSites {
        instructions: insns.len(),
        ..CodeSites::default()
    };
    hazards(&insns, &cfg, &mut out.sites);
    local_sites(&insns, wgp_mode, &mut out.sites);
    out.sites.sort_by_key(|s| (s.at, s.bug));
    out.sites.dedup();
    otherwise(&insns, card, &mut out.otherwise);
    out
}

fn undecodable(at: usize, instructions: usize) -> CodeSites {
    CodeSites {
        undecodable: Some(at),
        instructions,
        ..CodeSites::default()
    }
}

/// A branch's target (byte offset in the code), if it is a branch with one inside it.
fn cfg_target(at: usize, insn: &Insn) -> Option<usize> {
    match insn.control {
        Control::Branch { target, .. } => {
            let t = at as i64 + target;
            (t >= 0).then_some(t as usize)
        }
        _ => None,
    }
}

fn starts_insn(insns: &[(usize, Insn)], at: usize) -> bool {
    at >= insns.last().map_or(0, |(a, i)| a + i.len)
        || insns.binary_search_by_key(&at, |(a, _)| *a).is_ok()
}

/// The basic blocks of a function and their predecessors' successors (a light
/// control-flow graph from branch targets: what LLVM's hazard search follows backwards
/// across blocks).
struct Cfg {
    /// First instruction index of each block (ascending), and one past the last.
    starts: Vec<usize>,
    /// Successor blocks of each block.
    succ: Vec<[Option<usize>; 2]>,
}

impl Cfg {
    fn new(len: usize, insns: &[(usize, Insn)]) -> Option<Cfg> {
        let index_of = |off: usize| insns.binary_search_by_key(&off, |(a, _)| *a).ok();
        let mut leader = vec![false; insns.len() + 1];
        leader[0] = true;
        leader[insns.len()] = true;
        for (i, (at, insn)) in insns.iter().enumerate() {
            if let Some(t) = cfg_target(*at, insn) {
                if t < len {
                    leader[index_of(t)?] = true;
                }
            }
            if insn.control != Control::Next {
                leader[i + 1] = true;
            }
        }
        let starts: Vec<usize> = (0..=insns.len()).filter(|&i| leader[i]).collect();
        let blocks = starts.len() - 1;
        let block_of = |i: usize| starts.binary_search(&i).ok();
        let mut succ = vec![[None, None]; blocks];
        for (b, s) in succ.iter_mut().enumerate() {
            let (last_at, last) = &insns[starts[b + 1] - 1];
            let fall = (b + 1 < blocks).then_some(b + 1);
            *s = match last.control {
                Control::Branch { conditional, .. } => {
                    let t = cfg_target(*last_at, last)
                        .filter(|&t| t < len)
                        .and_then(index_of)
                        .and_then(block_of);
                    [t, if conditional { fall } else { None }]
                }
                Control::Stop => [None, None],
                Control::Next | Control::Call => [fall, None],
            };
        }
        Some(Cfg { starts, succ })
    }
    fn blocks(&self) -> usize {
        self.succ.len()
    }
}

/// What the hazard rules carry forward along every path: for each rule, whether the
/// instruction that starts a hazard has been met with nothing since that ends it (LLVM's
/// `getWaitStatesSince` asks the same question backwards from the instruction at risk:
/// is there a path back to a hazard with no expiring instruction in between). Merged
/// where paths meet by union.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Pending {
    /// VMEM/DS/FLAT operands not yet covered by a VALU, `s_waitcnt 0` or
    /// `s_waitcnt_depctr 0xffe3`.
    vmem_reads: Sregs,
    /// SMEM operands not yet covered by a SALU or an LGKM wait of 0.
    smem_reads: Sregs,
    /// A non-VALU read of EXEC not yet covered by a VALU writing an SGPR or
    /// `s_waitcnt_depctr 0xfffe`.
    exec_read: bool,
    /// A `v_cmpx` (a compare writing EXEC) not yet followed by another VALU (other than
    /// `v_nop`).
    compare: bool,
    /// An LDS (`lds`) or VMEM/GLOBAL/SCRATCH (`vmem`) access that is the latest of the
    /// two kinds and of `s_waitcnt_vscnt null, 0`.
    lds: bool,
    vmem: bool,
    /// A branch passed since the last LDS/VMEM access or vscnt wait, that had an LDS
    /// access (`branch_after_lds`) or a VMEM one (`branch_after_vmem`) pending before it.
    branch_after_lds: bool,
    branch_after_vmem: bool,
    /// The previous instruction was an NSA image instruction of 16 bytes or more.
    nsa16: bool,
}

impl Pending {
    fn union(self, o: Pending) -> Pending {
        Pending {
            vmem_reads: self.vmem_reads.union(o.vmem_reads),
            smem_reads: self.smem_reads.union(o.smem_reads),
            exec_read: self.exec_read | o.exec_read,
            compare: self.compare | o.compare,
            lds: self.lds | o.lds,
            vmem: self.vmem | o.vmem,
            branch_after_lds: self.branch_after_lds | o.branch_after_lds,
            branch_after_vmem: self.branch_after_vmem | o.branch_after_vmem,
            nsa16: self.nsa16 | o.nsa16,
        }
    }
}

/// LDS (1) or VMEM and segment-specific FLAT (2) for the LDS/branch/VMEM rule; 0 else.
fn lds_vmem_kind(i: &Insn) -> u8 {
    match i.format {
        Format::Ds => 1,
        Format::Mubuf | Format::Mtbuf | Format::Mimg | Format::Global | Format::Scratch => 2,
        _ => 0,
    }
}

fn is_vscnt_null_zero(i: &Insn) -> bool {
    matches!(i.waitcnt_k(), Some((0, true, 0)))
}

/// Whether `i`, a SALU, ends the SMEM-to-vector-write hazard (LLVM: any SALU but SOPP and
/// the waits on other counters; an LGKM wait only when it waits for 0).
fn ends_smem_hazard(i: &Insn) -> bool {
    if i.format == Format::Sopp {
        return i.waitcnt_lgkm_zero();
    }
    if !i.format.is_salu() || i.is_s_version() || i.name == "s_setvskip" {
        return false;
    }
    match i.waitcnt_k() {
        Some((3, null, imm)) => null && imm == 0,
        Some(_) => false,
        None => true,
    }
}

/// One instruction: the sites it is (given what is pending before it), then what is
/// pending after it. Every instruction at risk is a site: where LLVM's one workaround
/// covers two of them (a wait before the first of two writes of a pending VMEM's
/// registers), both count. Emulating the workaround (ending the pending state at a site)
/// would count as LLVM inserts, except that LLVM inserts in layout order, so a workaround
/// later in a loop does not yet cover an earlier instruction reached by the back edge:
/// tried, it missed 4 of LLVM's 2,558 VMEM-to-scalar sites in the ground-truth corpus.
fn step(i: &Insn, p: &mut Pending, mut site: impl FnMut(Bug)) {
    // VMEM to scalar write: a SALU or SMEM write of a register a pending VMEM reads
    // (workaround: `s_waitcnt_depctr 0xffe3`).
    if (i.format.is_salu() || i.format == Format::Smem) && i.swrites.overlaps(p.vmem_reads) {
        site(Bug::VmemToScalarWrite);
    }
    // SMEM to vector write: a VALU's SGPR destination that a pending SMEM reads
    // (`s_mov_b32 null, 0`).
    if i.format.is_valu() && i.valu_sdst(true).overlaps(p.smem_reads) {
        site(Bug::SmemToVectorWrite);
    }
    // v_cmpx (any VALU writing EXEC) after a pending non-VALU read of EXEC
    // (`s_waitcnt_depctr 0xfffe`).
    if i.format.is_valu() && i.writes_exec() && p.exec_read {
        site(Bug::VcmpxExecWar);
    }
    // (`v_mov_b32 vN, vN`)
    if i.is_permlane() && p.compare {
        site(Bug::VcmpxPermlane);
    }
    // (`s_waitcnt_vscnt null, 0`)
    let kind = lds_vmem_kind(i);
    if (kind == 1 && p.branch_after_vmem) || (kind == 2 && p.branch_after_lds) {
        site(Bug::LdsBranchVmemWar);
    }
    // (`s_nop 0`)
    if matches!(i.format, Format::Mubuf | Format::Mtbuf) && i.offset & 6 != 0 && p.nsa16 {
        site(Bug::NsaToVmem);
    }

    // What is pending after it.
    if i.format.is_valu() || i.is_waitcnt_zero() || i.depctr() == Some(0xffe3) {
        p.vmem_reads = Sregs::EMPTY;
    }
    if i.format.is_vector_memory() {
        p.vmem_reads = p.vmem_reads.union(i.all_sreads());
    }
    if i.format == Format::Smem {
        p.smem_reads = p.smem_reads.union(i.all_sreads());
    } else if ends_smem_hazard(i) {
        p.smem_reads = Sregs::EMPTY;
    }
    if !i.format.is_valu() && i.reads_exec() {
        p.exec_read = true;
    } else if i.valu_has_sdst() || i.depctr().is_some_and(|d| d & 0xfffe == 0xfffe) {
        p.exec_read = false;
    }
    if i.is_compare() && i.writes_exec() {
        p.compare = true;
    } else if i.format.is_valu() && !i.is_vnop() {
        p.compare = false;
    }
    if i.is_branch() {
        p.branch_after_lds |= p.lds;
        p.branch_after_vmem |= p.vmem;
    }
    if kind != 0 || is_vscnt_null_zero(i) {
        p.branch_after_lds = false;
        p.branch_after_vmem = false;
    }
    match kind {
        1 => (p.lds, p.vmem) = (true, false),
        2 => (p.lds, p.vmem) = (false, true),
        _ if is_vscnt_null_zero(i) => (p.lds, p.vmem) = (false, false),
        _ => {}
    }
    p.nsa16 = i.format == Format::Mimg && i.nsa_dwords >= 2;
}

/// The rules that span instructions and blocks: a forward data-flow of [`Pending`] to a
/// fixed point, then one pass that records the sites.
fn hazards(insns: &[(usize, Insn)], cfg: &Cfg, sites: &mut Vec<Site>) {
    let blocks = cfg.blocks();
    // The entry, and blocks nothing branches or falls to, start with nothing pending.
    let mut input: Vec<Option<Pending>> = vec![None; blocks];
    input[0] = Some(Pending::default());
    let mut reached = vec![false; blocks];
    for s in cfg.succ.iter().flatten().flatten() {
        reached[*s] = true;
    }
    for (b, r) in reached.iter().enumerate() {
        if !r {
            input[b] = Some(Pending::default());
        }
    }
    let mut work: Vec<usize> = (0..blocks).filter(|&b| input[b].is_some()).rev().collect();
    let mut queued = vec![false; blocks];
    for &b in &work {
        queued[b] = true;
    }
    // Each block's input only grows (a union of finitely many bits): bounded.
    let mut budget = blocks.saturating_mul(280).saturating_add(64);
    while let Some(b) = work.pop() {
        queued[b] = false;
        if budget == 0 {
            break;
        }
        budget -= 1;
        let Some(mut p) = input[b] else { continue };
        for (_, i) in &insns[cfg.starts[b]..cfg.starts[b + 1]] {
            step(i, &mut p, |_| {});
        }
        for s in cfg.succ[b].into_iter().flatten() {
            let new = match input[s] {
                None => p,
                Some(cur) => cur.union(p),
            };
            if input[s] != Some(new) {
                input[s] = Some(new);
                if !queued[s] {
                    queued[s] = true;
                    work.push(s);
                }
            }
        }
    }
    for b in 0..blocks {
        let mut p = input[b].unwrap_or_default();
        for (at, i) in &insns[cfg.starts[b]..cfg.starts[b + 1]] {
            step(i, &mut p, |bug| sites.push(Site { bug, at: *at }));
        }
    }
}

/// The rules a single instruction (or an `s_clause` and its clause) decides.
fn local_sites(insns: &[(usize, Insn)], wgp_mode: bool, sites: &mut Vec<Site>) {
    for (k, (at, i)) in insns.iter().enumerate() {
        let at = *at;
        let mut site = |bug| sites.push(Site { bug, at });
        if i.is_inst_prefetch() {
            site(Bug::InstFwdPrefetch);
        }
        if i.format == Format::Flat && i.offset != 0 {
            site(Bug::FlatSegmentOffset);
        }
        if i.is_branch() && i.simm16 == 0x3f {
            site(Bug::Offset3f);
        }
        if i.format == Format::Scratch && i.offset < 0 && i.offset % 4 != 0 {
            site(Bug::NegativeUnalignedScratchOffset);
        }
        if let Some(n) = i.clause_len() {
            let clause = insns.iter().skip(k + 1).take(n);
            if clause
                .clone()
                .any(|(_, c)| c.format == Format::Mimg && c.nsa_dwords > 0)
            {
                site(Bug::NsaClause);
            }
        }
        if wgp_mode && multi_dword_lds(i) {
            site(Bug::LdsMisaligned);
        }
    }
}

/// An LDS read or write of more than one dword at once (`ds_read_b64`, `ds_write_b128`,
/// `ds_read2_b64`, ...): what LLVM splits under the bug when it cannot prove natural
/// alignment. FLAT accesses that may reach LDS are left out, as LLVM 15 leaves them.
fn multi_dword_lds(i: &Insn) -> bool {
    let n = i.name;
    i.format == Format::Ds
        && (n.starts_with("ds_read") || n.starts_with("ds_write"))
        && (n.ends_with("_b64") || n.ends_with("_b96") || n.ends_with("_b128"))
}

/// The instructions `card` decodes otherwise.
fn otherwise(insns: &[(usize, Insn)], card: Gfx, out: &mut Vec<OtherwiseSite>) {
    let index = match card.0 {
        100101 => 1,
        100102 => 2,
        _ => 0,
    };
    for (at, i) in insns {
        let how = match i.on_gfx101x(index) {
            Card::Same => None,
            Card::Invalid => Some(Otherwise::Invalid),
            Card::Other(name) => Some(Otherwise::Other(name)),
        };
        let how = how.or_else(|| {
            (i.format == Format::Scratch && i.saddr == 0x7f)
                .then_some(Otherwise::ScratchSaddrExecHi)
        });
        if let Some(how) = how {
            if i.on_gfx1030() {
                out.push(OtherwiseSite {
                    at: *at,
                    gfx1030: i.name,
                    how,
                });
            }
        }
    }
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
    /// Kernels (`.kd` symbols) in it.
    pub kernels: usize,
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
            kernels: object.kernels,
            functions,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// What can be fixed in place
// ---------------------------------------------------------------------------------------

/// `s_nop 0`: what a fixed word becomes.
pub const S_NOP_0: u32 = 0xbf80_0000;

/// One same-size word change: the 4 bytes at `at` (an offset in the image) hold `old`
/// and become `new`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InPlaceFix {
    pub at: usize,
    pub bug: Bug,
    pub old: u32,
    pub new: u32,
}

/// What [`in_place_fixes`] found: the fixes, and the sites of every bug that no fix
/// covers (per bug, over the image's gfx103x code), and the instructions decoded
/// otherwise (none of which is fixed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InPlace {
    pub fixes: Vec<InPlaceFix>,
    pub left: Counts,
    pub otherwise: usize,
    /// Functions the decoder could not read to the end (nothing in them is fixed).
    pub undecodable: usize,
}

/// The bugs an in-place fix covers: each site is one word that becomes `s_nop 0`.
/// `s_inst_prefetch` only changes how far ahead the wave fetches instructions (LLVM
/// never emits it for gfx101x: "causes shader to hang"); `s_clause` only asks the hardware
/// to issue the next instructions as a clause (LLVM forms none around an NSA image
/// instruction for gfx101x). Neither touches a register, memory or control flow, and
/// `s_nop 0` is one wait state in the same 4 bytes (docs/design.md argues it from the ISA).
pub fn fixable(bug: Bug) -> bool {
    matches!(bug, Bug::InstFwdPrefetch | Bug::NsaClause)
}

/// The in-place fixes of an image's gfx103x code as `card` (gfx1010-gfx1013) would run
/// it (a bare ELF or a plain offload bundle; offsets in the image).
pub fn in_place_fixes(image: &[u8], card: Gfx) -> Result<InPlace, ImageError> {
    let (places, _) = amdgpu::places(image)?;
    let mut out = InPlace::default();
    for p in places {
        let elf = &image[p.at..p.at + p.len];
        let object = amdgpu::object(elf, p.bundle_target.as_deref())?;
        if !(gfx103x_target(&object.target) && gfx103x_target(&object.header_target)) {
            continue;
        }
        for f in &object.functions {
            let code = &elf[f.start..f.end];
            let scan = scan_code(
                code,
                card,
                f.wave64.unwrap_or(false),
                f.wgp_mode.unwrap_or(true),
            );
            if scan.undecodable.is_some() {
                out.undecodable += 1;
                continue;
            }
            out.otherwise += scan.otherwise.len();
            for site in &scan.sites {
                let word = code
                    .get(site.at..site.at + 4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                match word {
                    Some(old) if fixable(site.bug) => out.fixes.push(InPlaceFix {
                        at: p.at + f.start + site.at,
                        bug: site.bug,
                        old,
                        new: S_NOP_0,
                    }),
                    _ => out.left[site.bug.index()] += 1,
                }
            }
        }
    }
    out.fixes.sort_by_key(|f| f.at);
    out.fixes.dedup_by_key(|f| f.at);
    Ok(out)
}

/// A private copy of `image` with `fixes` applied (same size; nothing else changed). None
/// when there is nothing to fix, or when a fix does not describe `image` (its word is not
/// where and what it says).
pub fn apply(image: &[u8], fixes: &[InPlaceFix]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for f in fixes {
        let end = f.at.checked_add(4)?;
        if image.get(f.at..end)? != f.old.to_le_bytes() {
            return None;
        }
        let copy = out.get_or_insert_with(|| image.to_vec());
        copy[f.at..end].copy_from_slice(&f.new.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests;
