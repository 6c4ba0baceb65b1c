//! The opcode tables: what LLVM 15's disassembler says each opcode of each GFX10 encoding
//! is, from `ops.tsv` beside this file (written and checked by `scripts/gfx10-ops`),
//! turned into Rust arrays by rmcp-core's `build.rs`. See `OPS.md` for how they were made.

use super::Format;

/// How a gfx101x card reads the bits of a gfx1030 instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Card {
    /// As the same instruction.
    Same,
    /// Not at all: an illegal instruction.
    Invalid,
    /// As another instruction (its name there).
    Other(&'static str),
}

/// One opcode.
#[derive(Debug, PartialEq, Eq)]
pub struct Op {
    pub name: &'static str,
    /// The format's register fields (see `ops.tsv`'s header): 0 absent, `n` an SGPR-class
    /// operand `n` dwords wide, `0x80 | n` VGPRs.
    pub fields: [u8; 5],
    pub flags: u16,
    /// gfx1010, gfx1011, gfx1012.
    pub cards: [Card; 3],
}

pub const RVCC: u16 = 1;
pub const WVCC: u16 = 2;
pub const WEXEC: u16 = 4;
pub const LOAD: u16 = 8;
pub const STORE: u16 = 16;
pub const ATOMIC: u16 = 32;
pub const BRANCH: u16 = 64;
pub const KIMM: u16 = 128;
pub const TIED: u16 = 256;
/// A SALU op that reads and writes EXEC (`s_*_saveexec_*`, `s_*_wrexec_*`).
pub const WEXEC_SALU: u16 = 512;
pub const RM0: u16 = 1024;
pub const REXEC: u16 = 2048;
/// gfx1030 has no instruction here (gfx101x does).
pub const NOT_GFX1030: u16 = 4096;

/// The sentinel of an unknown opcode.
pub static UNKNOWN: Op = Op {
    name: "",
    fields: [0; 5],
    flags: 0,
    cards: [Card::Invalid; 3],
};

impl Op {
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
    pub fn field(&self, i: usize) -> u8 {
        self.fields.get(i).copied().unwrap_or(0)
    }
    /// The width of field `i` if it is an operand (of either kind).
    pub fn scalar_width(&self, i: usize) -> Option<u32> {
        let f = self.field(i);
        (f != 0).then_some(u32::from(f & 0x7f))
    }
    /// The same, for a VGPR field.
    pub fn vector_width(&self, i: usize) -> Option<u32> {
        self.scalar_width(i)
    }
    /// Whether field `i` names an SGPR-class operand.
    pub fn is_sgpr_field(&self, i: usize) -> bool {
        let f = self.field(i);
        f != 0 && f & 0x80 == 0
    }
    /// Whether field `i` of a VOP3 opcode is a lane mask (one SGPR in wave32, a pair in
    /// wave64): a compare's destination, a carry out, the carry or select it reads.
    pub fn lane_mask(&self, format: Format, opcode: u16, i: usize) -> bool {
        format == Format::Vop3
            && self.is_sgpr_field(i)
            && match i {
                4 => true,
                0 => opcode < 0x100,
                // v_cndmask_b32's select, v_{add,sub,subrev}_co_ci_u32's carry in.
                3 => matches!(opcode, 0x101 | 0x128..=0x12a),
                _ => false,
            }
    }
}

include!(concat!(env!("OUT_DIR"), "/gfx10_ops.rs"));
