//! Buffer resource descriptors that RDNA1 (gfx1010-gfx1013) cannot use, found in and fixed
//! in an AMDGPU code object's machine code. This module owns the scan (which kernels build
//! a buffer descriptor whose word 3 is a literal in the CDNA layout, and which MUBUF/MTBUF
//! instructions read it), the fix (that literal in the RDNA layout, nothing else changed)
//! and the length of an image known only by a pointer.
//!
//! Why: Triton's AMD backend (`BufferOpsEmitter.cpp`, `createResourceDescriptor`) sets
//! word 3 to `0x00027000` for every target but RDNA2/RDNA3, so gfx101x kernels get
//! RESOURCE_LEVEL (bit 24) 0 and OOB_SELECT (bits 28-29) 0: "structured" bounds checking
//! with stride 0, under which every raw access is out of bounds. Loads return 0, stores are
//! dropped, and the launch succeeds. The RDNA layout sets bit 24 and OOB_SELECT 3 (raw);
//! LLVM's own `AMDGPUToROCDL` lowering does that for every gfx10+, and Triton for RDNA2/3
//! (`0x31027000`).
//!
//! The API (what the shim and the doctor call):
//!
//! ```text
//! pub struct Finding { kernel: Option<String>, literal_at: usize, buffer_at: Vec<usize>, word3: u32 }
//! pub struct CodeObjectScan { target: String, gfx: Option<Gfx>, kernels: usize,
//!     findings: Vec<Finding>, undecodable: Option<usize>, buffer_instructions: usize,
//!     literal_word3: usize, at: usize, len: usize }
//! pub struct ImageScan { objects: Vec<CodeObjectScan>, compressed_skipped: usize }
//! pub enum ScanError { NotAnImage, Truncated, Malformed(&'static str) }
//! pub fn scan_image(image: &[u8]) -> Result<ImageScan, ScanError>;
//! pub fn image_len(read: &mut dyn FnMut(usize, &mut [u8]) -> bool) -> Option<usize>;
//! pub const fn is_broken_word3(w: u32) -> bool;
//! pub const fn fixed_word3(w: u32) -> u32;
//! pub fn fix_image(image: &[u8], scan: &ImageScan) -> Option<Vec<u8>>;
//! ImageScan::{findings(), literals(), broken_buffer_instructions(), kernels_with_findings(),
//!             undecodable()}
//! CodeObjectScan::runs_on_rdna1()
//! ```
//!
//! How: [`gfx10`] decodes the executable code of each function symbol (or of each
//! executable section when there are none) instruction by instruction; a forward data-flow
//! over its basic blocks follows `s_mov_b32 sN, <literal>` (and SGPR-to-SGPR moves) to the
//! MUBUF/MTBUF instructions whose resource quad's word 3 is that register. A register any
//! other instruction may write is forgotten; where two paths disagree it is forgotten; a
//! call forgets everything. So a finding is a literal that certainly reaches a buffer
//! instruction's word 3 unchanged. An object with code the decoder cannot size reports no
//! findings at all ([`CodeObjectScan::undecodable`]), rather than a guess.
//!
//! Limits: only objects whose ELF header (and bundle entry, if any) name gfx1010-gfx1013
//! or gfx10-1-generic are decoded; compressed bundles are not opened. A literal is followed
//! only through SGPRs s0-s105 and `s_mov_b32`/`s_mov_b64` copies (a descriptor built in
//! VGPRs and moved with `v_readfirstlane` is missed, as is one whose word 3 is not a
//! literal). The fix rewrites the literal itself, so another use of the same `s_mov_b32`
//! result would see the new value too (in Triton's and hipcc's code that register feeds
//! only the descriptor). The decoder's write tables are from LLVM's GFX10 encodings; an
//! SGPR write they missed could keep a stale literal, and so could an indirect jump
//! (`s_setpc_b64`) into the middle of a function (LLVM's AMDGPU backend makes no jump
//! tables; `s_setpc_b64` returns and tail-calls): a false finding is possible only then,
//! and only for a broken-layout literal. Checked on Triton 3.5.1's and hipcc's
//! output and Debian's rocBLAS (tests/buffer_descriptors.rs).
//!
//! Pure: no FFI, no logging, no global state; every index is checked (never a panic, never
//! a read past the slice). The fuzz target `fuzz/fuzz_targets/buffer_descriptors.rs` checks
//! that, and that [`fix_image`] changes only the literals.

pub mod write;

use std::collections::BTreeMap;

pub use crate::code_objects::amdgpu::ImageError as ScanError;
use crate::code_objects::{self as co, BUNDLE_MAGIC, COMPRESSED_MAGIC, Partial, amdgpu};
use crate::gfx::Gfx;
use crate::gfx10::{self, Control, Format, Insn, SGPRS, Sregs, Undecodable};

/// One buffer resource descriptor literal found broken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The function symbol containing it, if the symbol table names one (for a kernel
    /// `foo`, `foo`; its descriptor is `foo.kd`).
    pub kernel: Option<String>,
    /// Byte offset in the whole image of the 4-byte literal (the `s_mov_b32` literal dword).
    pub literal_at: usize,
    /// Byte offsets in the whole image of the MUBUF/MTBUF instructions it feeds.
    pub buffer_at: Vec<usize>,
    /// The literal as found.
    pub word3: u32,
}

/// One code object: a bare ELF, or one entry of an offload bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObjectScan {
    /// `amdgcn-amd-amdhsa--gfx1010` (with `:xnack-` / `:sramecc+` when the object names
    /// them): the bundle entry's target, or for a bare ELF the one its header names.
    pub target: String,
    /// The processor from the ELF header; None for a generic target (`gfx10-1-generic`)
    /// or one this module does not know.
    pub gfx: Option<Gfx>,
    /// Kernels (`.kd` symbols) in it.
    pub kernels: usize,
    /// Broken literals; empty unless the object runs on gfx1010-1013.
    pub findings: Vec<Finding>,
    /// Where (image offset) the decoder met code it cannot size; then `findings` is empty.
    pub undecodable: Option<usize>,
    /// MUBUF/MTBUF instructions decoded (RDNA1 objects only), and how many of them read a
    /// word 3 that is a known literal (broken or not).
    pub buffer_instructions: usize,
    pub literal_word3: usize,
    /// Where the object starts in the image, and its length.
    pub at: usize,
    pub len: usize,
}

/// What [`scan_image`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageScan {
    pub objects: Vec<CodeObjectScan>,
    /// Compressed offload bundles (not scanned).
    pub compressed_skipped: usize,
}

/// RESOURCE_LEVEL, word 3 bit 24: "reserved, must be 1" on RDNA.
pub const RESOURCE_LEVEL: u32 = 1 << 24;
/// OOB_SELECT, word 3 bits 28-29 (3: raw, bounds-check the offset against NUM_RECORDS).
pub const OOB_SELECT_MASK: u32 = 3 << 28;

/// Whether a word 3 literal has the CDNA layout that RDNA1 misreads: RESOURCE_LEVEL 0,
/// OOB_SELECT 0, TYPE (bits 30-31) 0 (a buffer).
pub const fn is_broken_word3(w: u32) -> bool {
    w & (RESOURCE_LEVEL | OOB_SELECT_MASK | (3 << 30)) == 0
}

/// The RDNA layout for a broken word 3: bit 24 (RESOURCE_LEVEL) and OOB_SELECT 3 set, the
/// rest (destination selects, format) kept: `0x00027000` becomes `0x31027000`.
pub const fn fixed_word3(w: u32) -> u32 {
    w | RESOURCE_LEVEL | OOB_SELECT_MASK
}

impl CodeObjectScan {
    /// Whether the object's code runs on an RDNA1 GPU (gfx1010-1013, or gfx10-1-generic).
    pub fn runs_on_rdna1(&self) -> bool {
        rdna1_target(&self.target)
    }
}

impl ImageScan {
    /// Every finding, with the object it is in.
    pub fn findings(&self) -> impl Iterator<Item = (&CodeObjectScan, &Finding)> {
        self.objects
            .iter()
            .flat_map(|o| o.findings.iter().map(move |f| (o, f)))
    }
    /// Broken literals found.
    pub fn literals(&self) -> usize {
        self.findings().count()
    }
    /// Buffer instructions they feed.
    pub fn broken_buffer_instructions(&self) -> usize {
        self.findings().map(|(_, f)| f.buffer_at.len()).sum()
    }
    /// Distinct kernels (function symbols) with a finding; a finding outside any named
    /// function counts once per object.
    pub fn kernels_with_findings(&self) -> usize {
        self.objects
            .iter()
            .map(|o| {
                let mut names: Vec<Option<&str>> =
                    o.findings.iter().map(|f| f.kernel.as_deref()).collect();
                names.sort();
                names.dedup();
                names.len()
            })
            .sum()
    }
    /// Objects the decoder stopped in.
    pub fn undecodable(&self) -> usize {
        self.objects
            .iter()
            .filter(|o| o.undecodable.is_some())
            .count()
    }
}

fn rdna1_target(target: &str) -> bool {
    matches!(
        amdgpu::processor(target),
        "gfx1010" | "gfx1011" | "gfx1012" | "gfx1013" | "gfx10-1-generic"
    )
}

// ---------------------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------------------

/// Scans an image as `hipModuleLoadData` receives it: a bare AMDGPU ELF or an
/// (uncompressed) clang offload bundle; compressed bundles are counted, not scanned.
pub fn scan_image(image: &[u8]) -> Result<ImageScan, ScanError> {
    let (places, compressed_skipped) = amdgpu::places(image)?;
    let mut scan = ImageScan {
        objects: Vec::new(),
        compressed_skipped,
    };
    for p in places {
        let elf = &image[p.at..p.at + p.len];
        scan.objects
            .push(scan_elf(elf, p.at, p.len, p.bundle_target.as_deref())?);
    }
    Ok(scan)
}

/// One AMDGPU ELF, `elf` being the image's bytes `at .. at + len`.
fn scan_elf(
    elf: &[u8],
    at: usize,
    len: usize,
    bundle_target: Option<&str>,
) -> Result<CodeObjectScan, ScanError> {
    let object = amdgpu::object(elf, bundle_target)?;
    let mut obj = CodeObjectScan {
        target: object.target,
        gfx: object.gfx,
        kernels: object.kernels,
        findings: Vec::new(),
        undecodable: None,
        buffer_instructions: 0,
        literal_word3: 0,
        at,
        len,
    };
    // Both the bundle's and the header's word must say RDNA1 (a bundle ID that names
    // another target than the object inside is not trusted).
    if !(rdna1_target(&obj.target) && rdna1_target(&object.header_target)) {
        return Ok(obj);
    }
    let mut findings: BTreeMap<usize, Finding> = BTreeMap::new();
    for func in &object.functions {
        let start = func.start;
        match scan_code(&elf[func.start..func.end]) {
            Ok(found) => {
                obj.buffer_instructions += found.buffers;
                obj.literal_word3 += found.literal_word3;
                for (lit, buf, word3) in found.broken {
                    let f = findings.entry(at + start + lit).or_insert_with(|| Finding {
                        kernel: func.name.clone(),
                        literal_at: at + start + lit,
                        buffer_at: Vec::new(),
                        word3,
                    });
                    f.buffer_at.push(at + start + buf);
                }
            }
            Err(off) => {
                obj.undecodable = Some(at + start + off);
                return Ok(obj);
            }
        }
    }
    obj.findings = findings
        .into_values()
        .map(|mut f| {
            f.buffer_at.sort_unstable();
            f.buffer_at.dedup();
            f
        })
        .collect();
    Ok(obj)
}

// ---------------------------------------------------------------------------------------
// The data-flow
// ---------------------------------------------------------------------------------------

/// What one instruction does, as far as the data-flow cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    /// Nothing tracked.
    None,
    /// `s_mov_b32 s<dst>, <literal>`; the literal is the instruction's second dword.
    MovLiteral {
        dst: u8,
        literal: u32,
    },
    /// `s_mov_b32` / `s_mov_b64` from SGPRs: `count` registers copied from `src` to `dst`.
    Copy {
        dst: u8,
        src: u8,
        count: u8,
    },
    /// May write these SGPRs.
    Writes(Sregs),
    /// May write any SGPR (relative moves, calls).
    WritesAll,
    /// A MUBUF or MTBUF instruction reading its resource from SGPRs `srsrc .. srsrc + 3`.
    Buffer {
        srsrc: u8,
    },
    /// A branch to byte offset `target` (relative to the instruction).
    Branch {
        target: i64,
        conditional: bool,
    },
    Call,
    Stop,
}

/// The effect of `insn` (decoded wave64, so that every lane mask write counts).
fn effect(insn: &Insn) -> Effect {
    match insn.control {
        Control::Branch {
            target,
            conditional,
        } => {
            return Effect::Branch {
                target,
                conditional,
            };
        }
        Control::Call => return Effect::Call,
        Control::Stop => return Effect::Stop,
        Control::Next => {}
    }
    let sgpr = |s: Sregs| s.first().filter(|&r| (r as usize) < SGPRS);
    match (insn.format, insn.opcode) {
        // s_mov_b32
        (Format::Sop1, 0x03) => match (sgpr(insn.swrites), insn.literal) {
            (Some(dst), Some(literal)) => return Effect::MovLiteral { dst, literal },
            (Some(dst), None) => {
                if let Some(src) = sgpr(insn.sreads) {
                    return Effect::Copy { dst, src, count: 1 };
                }
            }
            _ => {}
        },
        // s_mov_b64
        (Format::Sop1, 0x04) => {
            if let (Some(dst), Some(src)) = (sgpr(insn.swrites), sgpr(insn.sreads)) {
                if (dst as usize) + 1 < SGPRS && (src as usize) + 1 < SGPRS {
                    return Effect::Copy { dst, src, count: 2 };
                }
            }
        }
        // s_movreld_b32/_b64, s_movrelsd_2_b32: destination relative to M0.
        (Format::Sop1, 0x30 | 0x31 | 0x49) => return Effect::WritesAll,
        (Format::Mubuf | Format::Mtbuf, _) => {
            if let Some(srsrc) = insn.srsrc {
                return Effect::Buffer { srsrc };
            }
        }
        _ => {}
    }
    let w = insn.all_swrites();
    if w.is_empty() {
        Effect::None
    } else {
        Effect::Writes(w)
    }
}

/// A tracked SGPR: unknown, or a literal's value and where (offset in the code) it is.
type Reg = Option<(u32, usize)>;
type State = [Reg; SGPRS];

/// What one function's code holds.
#[derive(Default)]
struct CodeScan {
    /// Broken literals and the buffer instructions they reach: `(literal offset, buffer
    /// instruction offset, value)`, offsets relative to the code.
    broken: Vec<(usize, usize, u32)>,
    /// Buffer instructions reached, and those whose word 3 is a known literal.
    buffers: usize,
    literal_word3: usize,
}

/// Scans one function's code; Err with the offset of an instruction the decoder cannot
/// size.
fn scan_code(code: &[u8]) -> Result<CodeScan, usize> {
    // Decode linearly.
    let mut insns: Vec<(usize, Effect)> = Vec::new();
    let mut at = 0;
    while at < code.len() {
        match gfx10::decode_wave(code, at, true) {
            Ok(i) => {
                insns.push((at, effect(&i)));
                at += i.len;
            }
            Err(Undecodable::Encoding | Undecodable::Truncated) => return Err(at),
        }
    }
    if insns.is_empty() {
        return Ok(CodeScan::default());
    }
    let index_of = |off: usize| insns.binary_search_by_key(&off, |(a, _)| *a).ok();
    // Block leaders: the start, branch targets, what follows a branch, stop or call.
    let mut leader = vec![false; insns.len()];
    leader[0] = true;
    for (i, (at, insn)) in insns.iter().enumerate() {
        match insn {
            Effect::Branch { target, .. } => {
                let t = *at as i64 + target;
                if t >= 0 && (t as usize) < code.len() {
                    match index_of(t as usize) {
                        Some(j) => leader[j] = true,
                        // Into the middle of an instruction: the decode is not what the
                        // hardware runs.
                        None => return Err(*at),
                    }
                }
                if let Some(next) = leader.get_mut(i + 1) {
                    *next = true;
                }
            }
            Effect::Stop | Effect::Call => {
                if let Some(next) = leader.get_mut(i + 1) {
                    *next = true;
                }
            }
            _ => {}
        }
    }
    let starts: Vec<usize> = (0..insns.len()).filter(|&i| leader[i]).collect();
    let block_of = |i: usize| starts.binary_search(&i).ok();
    let blocks = starts.len();
    let end_of = |b: usize| starts.get(b + 1).copied().unwrap_or(insns.len());

    let mut input: Vec<Option<Box<State>>> = vec![None; blocks];
    let mut work: Vec<usize> = Vec::new();
    let mut queued = vec![false; blocks];
    // Entries: the start, and (all registers unknown) every block after a stop or a
    // call's return (a call's effect is applied as its own transfer).
    for b in 0..blocks {
        let first = starts[b];
        let after_stop = first > 0 && matches!(insns[first - 1].1, Effect::Stop);
        if b == 0 || after_stop {
            input[b] = Some(Box::new([None; SGPRS]));
            work.push(b);
            queued[b] = true;
        }
    }
    // Each block's input only ever loses known registers: at most SGPRS + 1 changes each.
    let mut budget = blocks.saturating_mul(SGPRS + 2).saturating_add(16);
    while let Some(b) = work.pop() {
        if budget == 0 {
            return Err(0);
        }
        budget -= 1;
        queued[b] = false;
        let Some(mut state) = input[b].clone() else {
            continue;
        };
        for (at, insn) in &insns[starts[b]..end_of(b)] {
            transfer(&mut state, *at, *insn);
        }
        let (last_at, last) = insns[end_of(b) - 1];
        let mut succ: [Option<usize>; 2] = [None, None];
        match last {
            Effect::Branch {
                target,
                conditional,
            } => {
                let t = last_at as i64 + target;
                if t >= 0 && (t as usize) < code.len() {
                    succ[0] = index_of(t as usize).and_then(block_of);
                }
                if conditional && b + 1 < blocks {
                    succ[1] = Some(b + 1);
                }
            }
            Effect::Stop => {}
            _ => {
                if b + 1 < blocks {
                    succ[1] = Some(b + 1);
                }
            }
        }
        for s in succ.into_iter().flatten() {
            let changed = match &mut input[s] {
                None => {
                    input[s] = Some(state.clone());
                    true
                }
                Some(cur) => meet(cur, &state),
            };
            if changed && !queued[s] {
                work.push(s);
                queued[s] = true;
            }
        }
    }
    // At the fixed point: the buffer instructions whose word 3 is a known broken literal.
    let mut found = CodeScan::default();
    for b in 0..blocks {
        let Some(mut state) = input[b].clone() else {
            continue;
        };
        for (at, insn) in &insns[starts[b]..end_of(b)] {
            if let Effect::Buffer { srsrc } = insn {
                found.buffers += 1;
                if let Some(Some((value, lit))) = state.get(*srsrc as usize + 3) {
                    found.literal_word3 += 1;
                    if is_broken_word3(*value) {
                        found.broken.push((*lit, *at, *value));
                    }
                }
            }
            transfer(&mut state, *at, *insn);
        }
    }
    Ok(found)
}

fn transfer(state: &mut State, at: usize, effect: Effect) {
    match effect {
        Effect::MovLiteral { dst, literal } => {
            if let Some(r) = state.get_mut(dst as usize) {
                *r = Some((literal, at + 4));
            }
        }
        Effect::Copy { dst, src, count } => {
            let mut tmp: [Reg; 2] = [None; 2];
            for (i, t) in tmp.iter_mut().enumerate() {
                *t = state.get(src as usize + i).copied().flatten();
            }
            for (i, v) in tmp.iter().enumerate().take(count as usize) {
                if let Some(r) = state.get_mut(dst as usize + i) {
                    *r = *v;
                }
            }
        }
        Effect::Writes(regs) => {
            for (r, slot) in state.iter_mut().enumerate() {
                if regs.contains(r as u8) {
                    *slot = None;
                }
            }
        }
        Effect::WritesAll | Effect::Call => *state = [None; SGPRS],
        Effect::None | Effect::Buffer { .. } | Effect::Branch { .. } | Effect::Stop => {}
    }
}

/// `cur` := `cur` meet `new` (a register stays known only where both agree); whether
/// `cur` changed.
fn meet(cur: &mut State, new: &State) -> bool {
    let mut changed = false;
    for (c, n) in cur.iter_mut().zip(new.iter()) {
        if c.is_some() && c != n {
            *c = None;
            changed = true;
        }
    }
    changed
}

// ---------------------------------------------------------------------------------------
// The fix
// ---------------------------------------------------------------------------------------

/// A private copy of `image` with every finding's literal replaced by [`fixed_word3`]
/// (same size; nothing else changed). None when there is nothing to fix, or when `scan`
/// does not describe `image` (a literal is not where and what it says).
pub fn fix_image(image: &[u8], scan: &ImageScan) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for (_, f) in scan.findings() {
        let end = f.literal_at.checked_add(4)?;
        let found = image.get(f.literal_at..end)?;
        if found != f.word3.to_le_bytes() || !is_broken_word3(f.word3) {
            return None;
        }
        let copy = out.get_or_insert_with(|| image.to_vec());
        copy[f.literal_at..end].copy_from_slice(&fixed_word3(f.word3).to_le_bytes());
    }
    out
}

// ---------------------------------------------------------------------------------------
// The length of an image known by a pointer
// ---------------------------------------------------------------------------------------

/// Largest header table read.
const MAX_TABLE_BYTES: usize = 16 << 20;

/// The bytes an image occupies, from its own headers (ELF: the largest of the ELF header,
/// the section and program header tables and the sections and segments they describe;
/// plain bundle: its entry table and entries; compressed bundle v2/v3: its total size),
/// given only a reader of its bytes: `read(offset, buf)` fills `buf` from `offset` or
/// returns false. It reads the headers, in small pieces, front to back, then the last byte
/// they claim (so the whole extent is known readable at its ends). None when the headers
/// are not an image's or a read fails.
pub fn image_len(read: &mut dyn FnMut(usize, &mut [u8]) -> bool) -> Option<usize> {
    let len = headers_len(read)?;
    // The last byte the headers claim must be readable too (the reader decides what is).
    let mut last = [0u8; 1];
    if len == 0 || !read(len - 1, &mut last) {
        return None;
    }
    Some(len)
}

fn headers_len(read: &mut dyn FnMut(usize, &mut [u8]) -> bool) -> Option<usize> {
    let mut magic = [0u8; 4];
    if !read(0, &mut magic) {
        return None;
    }
    if &magic == b"\x7fELF" {
        elf_len(read)
    } else if &magic == COMPRESSED_MAGIC {
        let mut want = 32;
        loop {
            let mut buf = vec![0u8; want];
            if !read(0, &mut buf) {
                return None;
            }
            match co::parse_compressed_header(&buf).ok()? {
                Partial::Complete(h) => return usize::try_from(h.total_size?).ok(),
                Partial::NeedBytes(n) if n > want && n <= 4096 => want = n,
                Partial::NeedBytes(_) => return None,
            }
        }
    } else if magic == BUNDLE_MAGIC[..4] {
        let mut want = BUNDLE_MAGIC.len() + 8;
        loop {
            let mut buf = vec![0u8; want];
            if !read(0, &mut buf) {
                return None;
            }
            match co::parse_bundle_header(&buf).ok()? {
                Partial::Complete(entries) => {
                    let mut len = want;
                    for e in entries {
                        let end = usize::try_from(e.offset.checked_add(e.size)?).ok()?;
                        len = len.max(end);
                    }
                    return Some(len);
                }
                // Exactly what the parser asks for: a read past the image would fail.
                Partial::NeedBytes(n) if n > want && n <= MAX_TABLE_BYTES => want = n,
                Partial::NeedBytes(_) => return None,
            }
        }
    } else {
        None
    }
}

fn elf_len(read: &mut dyn FnMut(usize, &mut [u8]) -> bool) -> Option<usize> {
    let mut eh = [0u8; 64];
    if !read(0, &mut eh) || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(v)
    };
    let phoff = u64_at(&eh, 0x20);
    let shoff = u64_at(&eh, 0x28);
    let phentsize = u16_at(&eh, 0x36) as u64;
    let mut phnum = u16_at(&eh, 0x38) as u64;
    let shentsize = u16_at(&eh, 0x3a) as u64;
    let mut shnum = u16_at(&eh, 0x3c) as u64;
    let mut len: u64 = 64;
    if shoff != 0 {
        if shentsize != 64 {
            return None;
        }
        if shnum == 0 || phnum == 0xffff {
            let mut sh0 = [0u8; 64];
            if !read(usize::try_from(shoff).ok()?, &mut sh0) {
                return None;
            }
            if shnum == 0 {
                shnum = u64_at(&sh0, 32);
            }
            if phnum == 0xffff {
                phnum = u64::from(u32::from_le_bytes([sh0[44], sh0[45], sh0[46], sh0[47]]));
            }
        }
        let bytes = shnum.checked_mul(64)?;
        if bytes > MAX_TABLE_BYTES as u64 {
            return None;
        }
        let mut table = vec![0u8; bytes as usize];
        if !read(usize::try_from(shoff).ok()?, &mut table) {
            return None;
        }
        len = len.max(shoff.checked_add(bytes)?);
        for h in table.chunks_exact(64) {
            let kind = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
            if kind != amdgpu::SHT_NOBITS && kind != 0 {
                len = len.max(u64_at(h, 24).checked_add(u64_at(h, 32))?);
            }
        }
    }
    if phoff != 0 && phnum != 0 {
        if phentsize != 56 {
            return None;
        }
        let bytes = phnum.checked_mul(56)?;
        if bytes > MAX_TABLE_BYTES as u64 {
            return None;
        }
        let mut table = vec![0u8; bytes as usize];
        if !read(usize::try_from(phoff).ok()?, &mut table) {
            return None;
        }
        len = len.max(phoff.checked_add(bytes)?);
        for p in table.chunks_exact(56) {
            len = len.max(u64_at(p, 8).checked_add(u64_at(p, 32))?);
        }
    }
    usize::try_from(len).ok()
}

#[cfg(test)]
mod tests;
