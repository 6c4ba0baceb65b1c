//! The GFX10 (RDNA1 and RDNA2: gfx1010-gfx1036) instruction decoder: for one instruction
//! at an offset in machine code, its length, its encoding and opcode, its name, the scalar
//! and vector registers it reads and writes (the implicit ones, EXEC, VCC and M0,
//! included, marked apart from those its fields name), its memory class and immediate
//! offset, MIMG's NSA address dwords, where control goes, and the `s_clause`,
//! `s_waitcnt*` and `s_waitcnt_depctr` immediates. For code of either family: an opcode
//! only one of them has is decoded all the same, and [`Insn::on_gfx101x`] says how each
//! gfx101x card reads a gfx1030 instruction.
//!
//! What each opcode is comes from LLVM 15's own disassembler, never from guesswork:
//! `ops.tsv` beside this file holds, for every opcode of every encoding, its name, the
//! registers its fields name and how wide, its implicit operands, and what gfx1010, gfx1011
//! and gfx1012 make of the same bits; `scripts/gfx10-ops` writes it with `llvm-mc
//! -disassemble` and checks it (`rmcp-core/tests/gfx10_ops.rs`), and `build.rs` turns it
//! into the tables in [`ops`]. The encodings' field layouts are from AMD's "RDNA 1.0" and
//! "RDNA 2" Instruction Set Architecture references, ch. 12-13, and LLVM's
//! `SIInstrFormats.td`; `rmcp-core/tests/gfx10_llvm_objdump.rs` checks every instruction's
//! offset and length against `llvm-objdump` on whole real objects.
//!
//! What it cannot decode (an encoding or opcode neither family has, an instruction cut off
//! by the end of the code) is an [`Undecodable`]: the caller then says so for that function
//! rather than guess. Pure: no allocation, no global state, never a panic or a read past
//! the slice.

mod ops;

pub use ops::Card;

/// SGPRs tracked as plain registers: s0-s105 (106 and up are VCC, TTMPs, M0, NULL, EXEC).
pub const SGPRS: usize = 106;

/// Scalar operand numbers (the 7-bit destination space): the registers past the SGPRs.
pub const VCC_LO: u8 = 106;
pub const VCC_HI: u8 = 107;
pub const M0: u8 = 124;
pub const NULL: u8 = 125;
pub const EXEC_LO: u8 = 126;
pub const EXEC_HI: u8 = 127;

/// A set of scalar operands 0-127 (s0-s105, VCC, TTMPs, M0, EXEC; NULL is never a member).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sregs(pub u128);

impl Sregs {
    pub const EMPTY: Sregs = Sregs(0);
    pub const EXEC: Sregs = Sregs(3 << EXEC_LO);
    pub const VCC: Sregs = Sregs(3 << VCC_LO);
    pub const M0: Sregs = Sregs(1 << M0);

    /// `count` registers from operand number `first`; NULL and numbers past 127 are not
    /// registers.
    pub fn range(first: u32, count: u32) -> Sregs {
        Sregs(bits(first, count, 128) & !(1 << NULL))
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn overlaps(self, other: Sregs) -> bool {
        self.0 & other.0 != 0
    }
    pub fn union(self, other: Sregs) -> Sregs {
        Sregs(self.0 | other.0)
    }
    pub fn contains(self, r: u8) -> bool {
        r < 128 && self.0 & (1 << r) != 0
    }
    /// The lowest member.
    pub fn first(self) -> Option<u8> {
        (self.0 != 0).then(|| self.0.trailing_zeros() as u8)
    }
}

/// Bits `first .. first + count` of a 128-bit word, clipped to `limit` (<= 128).
fn bits(first: u32, count: u32, limit: u32) -> u128 {
    let end = first.saturating_add(count).min(limit);
    if first >= end {
        return 0;
    }
    let width = end - first;
    let mask = if width >= 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    mask << first
}

/// A set of VGPRs v0-v255.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vregs(pub [u128; 2]);

impl Vregs {
    pub fn range(first: u32, count: u32) -> Vregs {
        let end = first.saturating_add(count).min(256);
        let lo = bits(first, end.min(128).saturating_sub(first), 128);
        let hi_first = first.max(128) - 128;
        let hi = bits(
            hi_first,
            end.saturating_sub(128).saturating_sub(hi_first),
            128,
        );
        Vregs([lo, hi])
    }
    pub fn is_empty(self) -> bool {
        self.0 == [0, 0]
    }
    pub fn overlaps(self, other: Vregs) -> bool {
        self.0[0] & other.0[0] != 0 || self.0[1] & other.0[1] != 0
    }
    pub fn union(self, other: Vregs) -> Vregs {
        Vregs([self.0[0] | other.0[0], self.0[1] | other.0[1]])
    }
}

/// The encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Sop1,
    Sop2,
    Sopk,
    Sopc,
    Sopp,
    Smem,
    Vop1,
    Vop2,
    Vopc,
    Vop3,
    Vop3p,
    Vintrp,
    Ds,
    Flat,
    Global,
    Scratch,
    Mubuf,
    Mtbuf,
    Mimg,
    Exp,
}

impl Format {
    /// A scalar ALU instruction (SOP1, SOP2, SOPK, SOPC, SOPP): LLVM's `isSALU`.
    pub fn is_salu(self) -> bool {
        matches!(
            self,
            Format::Sop1 | Format::Sop2 | Format::Sopk | Format::Sopc | Format::Sopp
        )
    }
    /// A vector ALU instruction: LLVM's `isVALU` (VINTRP is not one).
    pub fn is_valu(self) -> bool {
        matches!(
            self,
            Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vop3p
        )
    }
    /// MUBUF, MTBUF, MIMG: LLVM's `isVMEM`.
    pub fn is_vmem(self) -> bool {
        matches!(self, Format::Mubuf | Format::Mtbuf | Format::Mimg)
    }
    /// FLAT, GLOBAL and SCRATCH: LLVM's `isFLAT`.
    pub fn is_flat(self) -> bool {
        matches!(self, Format::Flat | Format::Global | Format::Scratch)
    }
    /// A vector memory instruction of any kind, LDS included (reads EXEC).
    pub fn is_vector_memory(self) -> bool {
        self.is_vmem() || self.is_flat() || self == Format::Ds
    }
}

/// Where control goes after an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// To the next instruction.
    Next,
    /// To byte offset `target` relative to the instruction's own start (may be negative or
    /// outside the code); `conditional` when it may also fall through.
    Branch { target: i64, conditional: bool },
    /// A call (`s_swappc_b64`, `s_call_b64`): control comes back.
    Call,
    /// Nowhere the code says (`s_endpgm`, `s_setpc_b64`, `s_code_end`, `s_trap`...).
    Stop,
}

/// Implicit operands, as bits of [`Insn::implicit`].
pub mod implicit {
    pub const READS_EXEC: u8 = 1;
    pub const WRITES_EXEC: u8 = 2;
    pub const READS_VCC: u8 = 4;
    pub const WRITES_VCC: u8 = 8;
    pub const READS_M0: u8 = 16;
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Length in bytes (4 to 20).
    pub len: usize,
    pub format: Format,
    /// The format's opcode field (for FLAT/GLOBAL/SCRATCH without the segment).
    pub opcode: u16,
    /// The instruction's gfx1030 name (its gfx101x name for an opcode only gfx101x has).
    pub name: &'static str,
    /// Scalar operands the fields name, read and written (implicit ones not included).
    pub sreads: Sregs,
    pub swrites: Sregs,
    /// Implicit operands ([`implicit`] bits); their registers depend on the wave size.
    pub implicit: u8,
    /// VGPRs read and written.
    pub vreads: Vregs,
    pub vwrites: Vregs,
    pub control: Control,
    /// SOPP/SOPK: the 16-bit immediate (`s_waitcnt*`, `s_waitcnt_depctr`, `s_clause`,
    /// `s_inst_prefetch`, a branch's word offset).
    pub simm16: u16,
    /// Memory instructions: the immediate offset (sign-extended where signed).
    pub offset: i32,
    /// MIMG: NSA address dwords after the first 8 bytes (0 for the sequential form).
    pub nsa_dwords: u8,
    /// FLAT/GLOBAL/SCRATCH: the SADDR field; MUBUF/MTBUF: whether OFFEN is set.
    pub saddr: u8,
    /// MUBUF/MTBUF/MIMG: the first SGPR of the resource descriptor, when the opcode
    /// takes one.
    pub srsrc: Option<u8>,
    /// The trailing 32-bit literal (or VOP2's constant K), when there is one.
    pub literal: Option<u32>,
    ops: &'static ops::Op,
    wave64: bool,
}

/// Why decoding stopped: an encoding or opcode this decoder does not know, or an
/// instruction cut off by the end of the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undecodable {
    Encoding,
    Truncated,
}

fn dword(code: &[u8], at: usize) -> Option<u32> {
    let b = code.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Source operand 255: a 32-bit literal follows the instruction.
const LITERAL: u32 = 255;
/// VOP1/VOP2/VOPC src0 values that announce an extra dword: SDWA, DPP16, DPP8 (FI 0, 1).
const SDWA: u32 = 0xf9;
const DPP16: u32 = 0xfa;
const DPP8: u32 = 0xe9;
const DPP8_FI: u32 = 0xea;

/// Decodes the instruction at `at` in `code`, wave32 (the HIP default on GFX10).
pub fn decode(code: &[u8], at: usize) -> Result<Insn, Undecodable> {
    decode_wave(code, at, false)
}

/// Decodes the instruction at `at` in `code`; `wave64` widens lane masks (VCC, EXEC, a
/// compare's destination, a carry) to register pairs.
pub fn decode_wave(code: &[u8], at: usize, wave64: bool) -> Result<Insn, Undecodable> {
    let w = dword(code, at).ok_or(Undecodable::Truncated)?;
    let second = || dword(code, at + 4).ok_or(Undecodable::Truncated);
    let mut d = if w >> 30 == 0b10 {
        if w >> 28 != 0b1011 {
            Draft::new(Format::Sop2, (w >> 23) & 0x7f, 4)
        } else {
            match (w >> 23) & 0x1f {
                0x1d => Draft::new(Format::Sop1, (w >> 8) & 0xff, 4),
                0x1e => Draft::new(Format::Sopc, (w >> 16) & 0x7f, 4),
                0x1f => Draft::new(Format::Sopp, (w >> 16) & 0x7f, 4),
                op => Draft::new(Format::Sopk, op, 4),
            }
        }
    } else if w >> 31 == 0 {
        match w >> 25 {
            0x3f => Draft::new(Format::Vop1, (w >> 9) & 0xff, 4),
            0x3e => Draft::new(Format::Vopc, (w >> 17) & 0xff, 4),
            op => Draft::new(Format::Vop2, op, 4),
        }
    } else {
        match w >> 26 {
            0b110011 if w >> 24 == 0xcc => Draft::new(Format::Vop3p, (w >> 16) & 0x7f, 8),
            0b110101 => Draft::new(Format::Vop3, (w >> 16) & 0x3ff, 8),
            0b110010 => Draft::new(Format::Vintrp, (w >> 16) & 0x3, 4),
            0b110110 => Draft::new(Format::Ds, (w >> 18) & 0xff, 8),
            0b110111 => {
                let format = match (w >> 14) & 3 {
                    0 => Format::Flat,
                    1 => Format::Scratch,
                    2 => Format::Global,
                    _ => return Err(Undecodable::Encoding),
                };
                Draft::new(format, (w >> 18) & 0x7f, 8)
            }
            0b111110 => Draft::new(Format::Exp, 0, 8),
            0b111000 => Draft::new(Format::Mubuf, ((w >> 18) & 0x7f) | ((w >> 18) & 0x80), 8),
            0b111010 => {
                let w1 = second()?;
                Draft::new(Format::Mtbuf, ((w >> 16) & 7) | ((w1 >> 18) & 8), 8)
            }
            0b111100 => Draft::new(Format::Mimg, ((w >> 18) & 0x7f) | ((w & 1) << 7), 8),
            0b111101 => Draft::new(Format::Smem, (w >> 18) & 0xff, 8),
            _ => return Err(Undecodable::Encoding),
        }
    };
    d.op = ops::lookup(d.format, d.opcode).ok_or(Undecodable::Encoding)?;
    if d.len == 8 {
        second()?;
    }
    d.fill(code, at, w, wave64)?;
    if at.checked_add(d.len).is_none_or(|end| end > code.len()) {
        return Err(Undecodable::Truncated);
    }
    Ok(d.finish(wave64))
}

/// An instruction being decoded.
struct Draft {
    format: Format,
    opcode: u16,
    len: usize,
    op: &'static ops::Op,
    sreads: Sregs,
    swrites: Sregs,
    implicit: u8,
    vreads: Vregs,
    vwrites: Vregs,
    control: Control,
    simm16: u16,
    offset: i32,
    nsa_dwords: u8,
    saddr: u8,
    srsrc: Option<u8>,
    literal: Option<u32>,
}

/// How a register field is used.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Read,
    Write,
    ReadWrite,
}

impl Draft {
    fn new(format: Format, opcode: u32, len: usize) -> Draft {
        Draft {
            format,
            opcode: opcode as u16,
            len,
            op: &ops::UNKNOWN,
            sreads: Sregs::EMPTY,
            swrites: Sregs::EMPTY,
            implicit: 0,
            vreads: Vregs::default(),
            vwrites: Vregs::default(),
            control: Control::Next,
            simm16: 0,
            offset: 0,
            nsa_dwords: 0,
            saddr: 0,
            srsrc: None,
            literal: None,
        }
    }

    /// A scalar field `value` (7 or 8 bits: SGPR/VCC/TTMP/M0/EXEC; 128 and up are
    /// constants) as field `i` of the opcode describes it.
    fn scalar(&mut self, i: usize, value: u32, role: Role, wave64: bool) {
        let Some(width) = self.op.scalar_width(i) else {
            return;
        };
        let width = if wave64 && self.op.lane_mask(self.format, self.opcode, i) {
            width.max(2)
        } else {
            width
        };
        if value >= 128 {
            return;
        }
        let regs = Sregs::range(value, width);
        match role {
            Role::Read => self.sreads = self.sreads.union(regs),
            Role::Write => self.swrites = self.swrites.union(regs),
            Role::ReadWrite => {
                self.sreads = self.sreads.union(regs);
                self.swrites = self.swrites.union(regs);
            }
        }
    }

    /// The resource descriptor field (field 2 of MUBUF, MTBUF, MIMG).
    fn resource(&mut self, first: u32, wave64: bool) {
        if self.op.field(2) != 0 {
            self.srsrc = Some(first as u8);
            self.scalar(2, first, Role::Read, wave64);
        }
    }

    /// A 9-bit vector source field: 0-255 scalar (as [`Draft::scalar`]), 256-511 VGPRs.
    fn source(&mut self, i: usize, value: u32, wave64: bool) {
        if value >= 256 {
            self.vgpr(i, value - 256, Role::Read);
        } else {
            self.scalar(i, value, Role::Read, wave64);
        }
    }

    /// An 8-bit VGPR field.
    fn vgpr(&mut self, i: usize, value: u32, role: Role) {
        let width = match self.op.vector_width(i) {
            Some(w) => w,
            // A scalar width on a VGPR field (readlane's destination) is handled by the
            // caller; a field that is no operand names nothing.
            None => return,
        };
        let regs = Vregs::range(value, width);
        match role {
            Role::Read => self.vreads = self.vreads.union(regs),
            Role::Write => self.vwrites = self.vwrites.union(regs),
            Role::ReadWrite => {
                self.vreads = self.vreads.union(regs);
                self.vwrites = self.vwrites.union(regs);
            }
        }
    }

    /// A literal follows when one of the operand `fields` is 255.
    fn literal_if(&mut self, code: &[u8], at: usize, fields: &[u32]) {
        if fields.contains(&LITERAL) {
            self.literal = dword(code, at + self.len);
            self.len += 4;
        }
    }

    fn fill(&mut self, code: &[u8], at: usize, w: u32, wave64: bool) -> Result<(), Undecodable> {
        let w1 = || dword(code, at + 4).unwrap_or(0);
        match self.format {
            Format::Sop1 => {
                let (sdst, src) = ((w >> 16) & 0x7f, w & 0xff);
                self.literal_if(code, at, &[src]);
                self.scalar(0, sdst, Role::Write, wave64);
                self.scalar(1, src, Role::Read, wave64);
                match self.opcode {
                    // s_setpc_b64, s_rfe_b64: control leaves.
                    0x20 | 0x22 => self.control = Control::Stop,
                    // s_swappc_b64
                    0x21 => self.control = Control::Call,
                    _ => {}
                }
            }
            Format::Sop2 => {
                let (sdst, s0, s1) = ((w >> 16) & 0x7f, w & 0xff, (w >> 8) & 0xff);
                self.literal_if(code, at, &[s0, s1]);
                self.scalar(0, sdst, Role::Write, wave64);
                self.scalar(1, s0, Role::Read, wave64);
                self.scalar(2, s1, Role::Read, wave64);
            }
            Format::Sopc => {
                let (s0, s1) = (w & 0xff, (w >> 8) & 0xff);
                self.literal_if(code, at, &[s0, s1]);
                self.scalar(0, s0, Role::Read, wave64);
                self.scalar(1, s1, Role::Read, wave64);
            }
            Format::Sopk => {
                let sdst = (w >> 16) & 0x7f;
                self.simm16 = w as u16;
                let role = match self.opcode {
                    // s_movk_i32, s_cmovk_i32, s_getreg_b32, s_call_b64: write.
                    0x00 | 0x02 | 0x12 | 0x16 => Role::Write,
                    // s_addk_i32, s_mulk_i32: read and write.
                    0x0f | 0x10 => Role::ReadWrite,
                    // s_subvector_loop_begin/_end: read and write.
                    0x1b | 0x1c => Role::ReadWrite,
                    // s_cmpk_*, s_setreg_b32, s_waitcnt_*cnt (a register operand): read.
                    _ => Role::Read,
                };
                self.scalar(0, sdst, role, wave64);
                let simm = i64::from(w as u16 as i16);
                match self.opcode {
                    // s_setreg_imm32_b32 carries a 32-bit literal.
                    0x15 => self.literal_if(code, at, &[LITERAL]),
                    0x16 => self.control = Control::Call,
                    0x1b | 0x1c => {
                        self.control = Control::Branch {
                            target: 4 + simm * 4,
                            conditional: true,
                        }
                    }
                    _ => {}
                }
            }
            Format::Sopp => {
                self.simm16 = w as u16;
                let target = 4 + i64::from(w as u16 as i16) * 4;
                match self.opcode {
                    0x02 => {
                        self.control = Control::Branch {
                            target,
                            conditional: false,
                        }
                    }
                    // s_cbranch_scc0/scc1
                    0x04 | 0x05 | 0x17..=0x1a => {
                        self.control = Control::Branch {
                            target,
                            conditional: true,
                        }
                    }
                    // s_cbranch_vccz/vccnz
                    0x06 | 0x07 => {
                        self.implicit |= implicit::READS_VCC;
                        self.control = Control::Branch {
                            target,
                            conditional: true,
                        }
                    }
                    // s_cbranch_execz/execnz
                    0x08 | 0x09 => {
                        self.implicit |= implicit::READS_EXEC;
                        self.control = Control::Branch {
                            target,
                            conditional: true,
                        }
                    }
                    // s_endpgm, s_trap, s_endpgm_saved, s_endpgm_ordered_ps_done, s_code_end
                    0x01 | 0x12 | 0x1b | 0x1e | 0x1f => self.control = Control::Stop,
                    // s_sendmsg, s_sendmsghalt: M0 may carry the message's data.
                    0x10 | 0x11 => self.implicit |= implicit::READS_M0,
                    _ => {}
                }
            }
            Format::Smem => {
                let w1 = w1();
                let (sbase, sdata, glc) = ((w & 0x3f) << 1, (w >> 6) & 0x7f, w & (1 << 16) != 0);
                let soffset = w1 >> 25;
                let off = w1 & 0x1f_ffff;
                self.offset = ((off << 11) as i32) >> 11;
                let data = if self.op.has(ops::STORE) {
                    Role::Read
                } else if self.op.has(ops::ATOMIC) {
                    if glc { Role::ReadWrite } else { Role::Read }
                } else {
                    Role::Write
                };
                self.scalar(0, sdata, data, wave64);
                self.scalar(1, sbase, Role::Read, wave64);
                self.scalar(2, soffset, Role::Read, wave64);
            }
            Format::Vop1 | Format::Vop2 | Format::Vopc => self.vop12c(code, at, w, wave64)?,
            Format::Vop3 | Format::Vop3p => {
                let w1 = w1();
                let srcs = [w1 & 0x1ff, (w1 >> 9) & 0x1ff, (w1 >> 18) & 0x1ff];
                // Only the sources the opcode has can announce a literal.
                let used: [u32; 3] = core::array::from_fn(|k| {
                    if self.op.field(k + 1) != 0 {
                        srcs[k]
                    } else {
                        0
                    }
                });
                self.literal_if(code, at, &used);
                for (k, s) in srcs.iter().enumerate() {
                    self.source(k + 1, *s, wave64);
                }
                let vdst = w & 0xff;
                if self.op.is_sgpr_field(0) {
                    self.scalar(0, vdst, Role::Write, wave64);
                } else {
                    self.vgpr(0, vdst, Role::Write);
                }
                if self.format == Format::Vop3 {
                    self.scalar(4, (w >> 8) & 0x7f, Role::Write, wave64);
                }
                self.tied();
            }
            Format::Vintrp => {
                self.implicit |= implicit::READS_M0;
            }
            Format::Ds => {
                let w1 = w1();
                self.offset = (w & 0xffff) as i32;
                self.vgpr(0, w1 >> 24, Role::Write);
                self.vgpr(1, w1 & 0xff, Role::Read);
                self.vgpr(2, (w1 >> 8) & 0xff, Role::Read);
                self.vgpr(3, (w1 >> 16) & 0xff, Role::Read);
                // GDS (bit 17), and the ops that take M0 on GFX10 (GWS, ordered count,
                // append/consume): see `ops.tsv`'s `rm0` flag.
                if w & (1 << 17) != 0 || self.op.has(ops::RM0) {
                    self.implicit |= implicit::READS_M0;
                }
            }
            Format::Flat | Format::Global | Format::Scratch => {
                let w1 = w1();
                let raw = w & 0xfff;
                self.offset = if self.format == Format::Flat {
                    raw as i32
                } else {
                    ((raw << 20) as i32) >> 20
                };
                let saddr = (w1 >> 16) & 0x7f;
                self.saddr = saddr as u8;
                self.vgpr(0, w1 >> 24, Role::Write);
                // SCRATCH with SADDR in use ("SS" mode) has no address VGPR.
                let sve =
                    self.format == Format::Scratch && saddr != u32::from(NULL) && saddr != 0x7f;
                if !sve {
                    self.vgpr(1, w1 & 0xff, Role::Read);
                }
                self.vgpr(2, (w1 >> 8) & 0xff, Role::Read);
                if saddr != 0x7f {
                    self.scalar(3, saddr, Role::Read, wave64);
                }
                if self.op.has(ops::ATOMIC) && w & (1 << 16) == 0 {
                    // An atomic without GLC returns nothing.
                    self.vwrites = Vregs::default();
                }
            }
            Format::Mubuf | Format::Mtbuf => {
                let w1 = w1();
                self.offset = (w & 0xfff) as i32;
                let (offen, idxen) = (w & (1 << 12) != 0, w & (1 << 13) != 0);
                self.saddr = offen as u8;
                let glc = w & (1 << 14) != 0;
                let vdata = (w1 >> 8) & 0xff;
                let role = if self.op.has(ops::STORE) {
                    Role::Read
                } else if self.op.has(ops::ATOMIC) {
                    if glc { Role::ReadWrite } else { Role::Read }
                } else {
                    Role::Write
                };
                self.vgpr(0, vdata, role);
                let addrs = u32::from(offen) + u32::from(idxen);
                if addrs > 0 {
                    self.vreads = self.vreads.union(Vregs::range(w1 & 0xff, addrs));
                }
                self.resource(((w1 >> 16) & 0x1f) << 2, wave64);
                self.scalar(3, w1 >> 24, Role::Read, wave64);
                // LDS (bit 16 of MUBUF) takes its LDS address from M0.
                if self.format == Format::Mubuf && w & (1 << 16) != 0 {
                    self.implicit |= implicit::READS_M0;
                }
            }
            Format::Mimg => {
                let w1 = w1();
                let nsa = (w >> 1) & 3;
                self.nsa_dwords = nsa as u8;
                self.len += 4 * nsa as usize;
                let dmask = (w >> 8) & 0xf;
                let (tfe, d16) = (w & (1 << 16) != 0, w1 & (1 << 31) != 0);
                let mut data = dmask.count_ones().max(1);
                if d16 {
                    data = data.div_ceil(2);
                }
                data += u32::from(tfe);
                let glc = w & (1 << 13) != 0;
                let vdata = Vregs::range((w1 >> 8) & 0xff, data);
                if self.op.has(ops::STORE) {
                    self.vreads = self.vreads.union(vdata);
                } else if self.op.has(ops::ATOMIC) {
                    self.vreads = self.vreads.union(vdata);
                    if glc {
                        self.vwrites = self.vwrites.union(vdata);
                    }
                } else {
                    self.vwrites = self.vwrites.union(vdata);
                }
                // The address: VADDR (sequentially as wide as the opcode's field) and,
                // in NSA form, one VGPR per byte of the extra dwords.
                self.vgpr(1, w1 & 0xff, Role::Read);
                for k in 0..4 * nsa as usize {
                    if let Some(&b) = code.get(at + 8 + k) {
                        self.vreads = self.vreads.union(Vregs::range(u32::from(b), 1));
                    }
                }
                self.resource(((w1 >> 16) & 0x1f) << 2, wave64);
                self.scalar(3, ((w1 >> 21) & 0x1f) << 2, Role::Read, wave64);
            }
            Format::Exp => {
                let w1 = w1();
                for k in 0..4 {
                    if w & (1 << k) != 0 {
                        self.vreads = self.vreads.union(Vregs::range((w1 >> (8 * k)) & 0xff, 1));
                    }
                }
            }
        }
        Ok(())
    }

    /// VOP1, VOP2, VOPC: 32 bits, or 64 with a literal, SDWA or DPP dword.
    fn vop12c(&mut self, code: &[u8], at: usize, w: u32, wave64: bool) -> Result<(), Undecodable> {
        let src0 = w & 0x1ff;
        let extra = match src0 {
            LITERAL | SDWA | DPP16 | DPP8 | DPP8_FI => {
                let e = dword(code, at + 4).ok_or(Undecodable::Truncated)?;
                if src0 == LITERAL {
                    self.literal = Some(e);
                }
                self.len += 4;
                Some(e)
            }
            _ => None,
        };
        if self.format == Format::Vop2 && self.op.has(ops::KIMM) {
            // v_madmk/madak/fmamk/fmaak: a 32-bit constant K; with a literal, SDWA or DPP
            // too it is no valid encoding.
            if extra.is_some() {
                return Err(Undecodable::Encoding);
            }
            self.literal_if(code, at, &[LITERAL]);
        }
        // The real first source: in the SDWA/DPP dword for those forms.
        match (src0, extra) {
            (SDWA, Some(e)) => {
                let s0 = e & 0xff;
                if e & (1 << 23) != 0 {
                    self.scalar(1, s0, Role::Read, wave64);
                } else {
                    self.vgpr(1, s0, Role::Read);
                }
            }
            (DPP16 | DPP8 | DPP8_FI, Some(e)) => self.vgpr(1, e & 0xff, Role::Read),
            _ => self.source(1, src0, wave64),
        }
        match self.format {
            Format::Vop1 => {
                let vdst = (w >> 17) & 0xff;
                if self.op.is_sgpr_field(0) {
                    // v_readfirstlane_b32: an SGPR destination.
                    self.scalar(0, vdst, Role::Write, wave64);
                } else {
                    self.vgpr(0, vdst, Role::Write);
                }
            }
            Format::Vop2 => {
                self.vgpr(0, (w >> 17) & 0xff, Role::Write);
                self.vgpr(2, (w >> 9) & 0xff, Role::Read);
            }
            _ => {
                self.vgpr(2, (w >> 9) & 0xff, Role::Read);
                // VOPC SDWA with SD set writes the SGPR (pair) it names instead of VCC.
                if let (SDWA, Some(e)) = (src0, extra) {
                    if e & (1 << 15) != 0 && !self.op.has(ops::WEXEC) {
                        let sdst = (e >> 8) & 0x7f;
                        let n = if wave64 { 2 } else { 1 };
                        self.swrites = self.swrites.union(Sregs::range(sdst, n));
                        self.implicit |= NO_VCC_WRITE;
                    }
                }
            }
        }
        self.tied();
        Ok(())
    }

    /// Ops whose destination is also a source (`v_fmac_*`, `v_mac_*`, `v_dot*c_*`,
    /// `v_writelane_b32`): `ops.tsv`'s `tied` flag.
    fn tied(&mut self) {
        if self.op.has(ops::TIED) {
            self.vreads = self.vreads.union(self.vwrites);
        }
    }

    fn finish(mut self, wave64: bool) -> Insn {
        let f = self.op.flags;
        if f & ops::RVCC != 0 {
            self.implicit |= implicit::READS_VCC;
        }
        if f & ops::WVCC != 0 && self.implicit & NO_VCC_WRITE == 0 {
            self.implicit |= implicit::WRITES_VCC;
        }
        if f & ops::WEXEC != 0 {
            self.implicit |= implicit::WRITES_EXEC;
        }
        if f & ops::REXEC != 0 {
            self.implicit |= implicit::READS_EXEC;
        }
        if f & ops::WEXEC_SALU != 0 {
            self.implicit |= implicit::READS_EXEC | implicit::WRITES_EXEC;
        }
        if f & ops::RM0 != 0 {
            self.implicit |= implicit::READS_M0;
        }
        if self.format.is_valu() || self.format.is_vector_memory() || self.format == Format::Exp {
            self.implicit |= implicit::READS_EXEC;
        }
        self.implicit &= !NO_VCC_WRITE;
        Insn {
            len: self.len,
            format: self.format,
            opcode: self.opcode,
            name: self.op.name,
            sreads: self.sreads,
            swrites: self.swrites,
            implicit: self.implicit,
            vreads: self.vreads,
            vwrites: self.vwrites,
            control: self.control,
            simm16: self.simm16,
            offset: self.offset,
            nsa_dwords: self.nsa_dwords,
            saddr: self.saddr,
            srsrc: self.srsrc,
            literal: self.literal,
            ops: self.op,
            wave64,
        }
    }
}

/// A draft-only implicit bit: a VOPC SDWA compare that writes an SGPR, not VCC.
const NO_VCC_WRITE: u8 = 0x80;

impl Insn {
    /// The scalar registers its implicit operands read.
    pub fn implicit_sreads(&self) -> Sregs {
        self.implicit_regs(implicit::READS_EXEC, implicit::READS_VCC, true)
    }
    /// The scalar registers its implicit operands write.
    pub fn implicit_swrites(&self) -> Sregs {
        self.implicit_regs(implicit::WRITES_EXEC, implicit::WRITES_VCC, false)
    }
    fn implicit_regs(&self, exec: u8, vcc: u8, m0: bool) -> Sregs {
        let pair = |lo: u8| {
            if self.wave64 {
                Sregs(3 << lo)
            } else {
                Sregs(1 << lo)
            }
        };
        let mut s = Sregs::EMPTY;
        if self.implicit & exec != 0 {
            s = s.union(pair(EXEC_LO));
        }
        if self.implicit & vcc != 0 {
            s = s.union(pair(VCC_LO));
        }
        if m0 && self.implicit & implicit::READS_M0 != 0 {
            s = s.union(Sregs::M0);
        }
        s
    }
    /// Every scalar register read, the fields' and the implicit ones.
    pub fn all_sreads(&self) -> Sregs {
        self.sreads.union(self.implicit_sreads())
    }
    /// Every scalar register written.
    pub fn all_swrites(&self) -> Sregs {
        self.swrites.union(self.implicit_swrites())
    }
    /// Whether it reads EXEC (a field naming `exec_lo`/`exec_hi`, or implicitly).
    pub fn reads_exec(&self) -> bool {
        self.all_sreads().overlaps(Sregs::EXEC)
    }
    /// Whether it writes EXEC.
    pub fn writes_exec(&self) -> bool {
        self.all_swrites().overlaps(Sregs::EXEC)
    }
    /// A VALU instruction's SGPR destination as LLVM names it `sdst` (a compare's in
    /// VOP3 form, a VOP3b carry-out), or failing that its implicit SGPR write (VCC of
    /// a compare or carry in 32-bit form, EXEC of `v_cmpx`); `v_readlane_b32`'s and
    /// `v_readfirstlane_b32`'s destination (LLVM's `vdst`) with `readlane`.
    pub fn valu_sdst(&self, readlane: bool) -> Sregs {
        if !self.format.is_valu() {
            return Sregs::EMPTY;
        }
        let named = match self.format {
            // VOP3: field 4 is the carry-out `sdst`; field 0 is `sdst` for a compare.
            Format::Vop3 if self.opcode < 0x100 => self.swrites,
            Format::Vop3 if self.is_readlane() => {
                if readlane {
                    self.swrites
                } else {
                    Sregs::EMPTY
                }
            }
            Format::Vop1 if self.is_readlane() => {
                if readlane {
                    self.swrites
                } else {
                    Sregs::EMPTY
                }
            }
            _ => self.swrites,
        };
        if !named.is_empty() {
            return named;
        }
        if self.is_readlane() {
            return Sregs::EMPTY;
        }
        self.implicit_swrites()
    }
    /// Whether a VALU instruction has an SGPR destination operand LLVM names `sdst` (a
    /// VOP3b carry-out, a compare's in VOP3 form, a VOPC SDWA's), even one that is NULL,
    /// or an implicit SGPR write (VCC, EXEC): what ends LLVM's v_cmpx EXEC WAR hazard.
    pub fn valu_has_sdst(&self) -> bool {
        if !self.format.is_valu() {
            return false;
        }
        let named = match self.format {
            Format::Vop3 => {
                self.ops.field(4) != 0 || (self.opcode < 0x100 && self.ops.is_sgpr_field(0))
            }
            Format::Vopc => !self.swrites.is_empty(),
            _ => false,
        };
        named || !self.implicit_swrites().is_empty()
    }
    /// `v_readlane_b32` or `v_readfirstlane_b32`.
    pub fn is_readlane(&self) -> bool {
        matches!(
            (self.format, self.opcode),
            (Format::Vop1, 0x02) | (Format::Vop3, 0x182) | (Format::Vop3, 0x360)
        )
    }
    /// A compare (VOPC, or VOPC in VOP3 form), `v_cmpx` included.
    pub fn is_compare(&self) -> bool {
        self.format == Format::Vopc || (self.format == Format::Vop3 && self.opcode < 0x100)
    }
    /// `v_permlane16_b32` or `v_permlanex16_b32`.
    pub fn is_permlane(&self) -> bool {
        self.format == Format::Vop3 && matches!(self.opcode, 0x377 | 0x378)
    }
    /// `v_nop` (either form).
    pub fn is_vnop(&self) -> bool {
        matches!(
            (self.format, self.opcode),
            (Format::Vop1, 0) | (Format::Vop3, 0x180)
        )
    }
    /// `s_waitcnt` with every counter at zero... as LLVM tests it: the immediate is 0.
    pub fn is_waitcnt_zero(&self) -> bool {
        self.format == Format::Sopp && self.opcode == 0x0c && self.simm16 == 0
    }
    /// `s_waitcnt` whose LGKM counter is 0 (GFX10: bits 13-8).
    pub fn waitcnt_lgkm_zero(&self) -> bool {
        self.format == Format::Sopp && self.opcode == 0x0c && (self.simm16 >> 8) & 0x3f == 0
    }
    /// `s_waitcnt_depctr` and its immediate.
    pub fn depctr(&self) -> Option<u16> {
        (self.format == Format::Sopp && self.opcode == 0x23).then_some(self.simm16)
    }
    /// One of the SOPK `s_waitcnt_vscnt/vmcnt/expcnt/lgkmcnt`: (which: 0 vs, 1 vm, 2 exp,
    /// 3 lgkm; whether its register is NULL; the immediate).
    pub fn waitcnt_k(&self) -> Option<(u8, bool, u16)> {
        if self.format != Format::Sopk || !(0x17..=0x1a).contains(&self.opcode) {
            return None;
        }
        Some((
            (self.opcode - 0x17) as u8,
            self.sreads.is_empty(),
            self.simm16,
        ))
    }
    /// `s_inst_prefetch`.
    pub fn is_inst_prefetch(&self) -> bool {
        self.format == Format::Sopp && self.opcode == 0x20
    }
    /// `s_clause`: the number of instructions the clause holds after it.
    pub fn clause_len(&self) -> Option<usize> {
        (self.format == Format::Sopp && self.opcode == 0x21)
            .then_some((self.simm16 & 0x3f) as usize + 1)
    }
    /// `s_version` and `s_setvskip`-like SALU ops that LLVM says mitigate nothing.
    pub fn is_s_version(&self) -> bool {
        self.format == Format::Sopk && self.opcode == 0x01
    }
    /// A branch (SOPP `s_branch`, `s_cbranch_*`): LLVM's `isBranch`.
    pub fn is_branch(&self) -> bool {
        self.format == Format::Sopp && matches!(self.control, Control::Branch { .. })
    }
    /// How `card` (gfx1010, gfx1011 or gfx1012; gfx1013 reads as gfx1010) reads these
    /// bits when they are gfx1030 code.
    pub fn on_gfx101x(&self, card_index: usize) -> Card {
        self.ops.cards[card_index.min(2)]
    }
    /// Whether gfx1030 has this opcode (else only gfx101x does).
    pub fn on_gfx1030(&self) -> bool {
        !self.ops.has(ops::NOT_GFX1030)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod range_tests {
    use super::*;

    #[test]
    fn ranges_are_the_registers_named() {
        for first in 0..300u32 {
            for count in [0u32, 1, 2, 3, 4, 8, 16, 130, 300] {
                let mut s = 0u128;
                for r in first..first.saturating_add(count).min(128) {
                    if r != u32::from(NULL) {
                        s |= 1 << r;
                    }
                }
                assert_eq!(Sregs::range(first, count), Sregs(s), "{first} {count}");
                let mut v = [0u128; 2];
                for r in first..first.saturating_add(count).min(256) {
                    v[(r / 128) as usize] |= 1 << (r % 128);
                }
                assert_eq!(Vregs::range(first, count), Vregs(v), "{first} {count}");
            }
        }
    }
}
