//! The GFX10 (RDNA1/RDNA2) instruction decoder the buffer-descriptor scan needs: every
//! encoding's length (32 or 64 bits, a trailing 32-bit literal when an operand is 255,
//! the extra DPP/SDWA dword, MIMG's NSA address dwords, the `K` constant of
//! `v_fmamk`/`v_fmaak`/`v_madmk`/`v_madak`), and for each instruction only the effect the
//! scan follows: which scalar registers it may write, whether it is `s_mov_b32 sN,
//! literal` (or a copy between SGPRs), which SGPR quad a MUBUF/MTBUF instruction reads its
//! buffer resource from, and where control goes.
//!
//! Sources: LLVM `llvm/lib/Target/AMDGPU/SIInstrFormats.td`, `SOPInstructions.td`,
//! `VOP*Instructions.td`, `BUFInstructions.td`, `SMInstructions.td`, `MIMGInstructions.td`
//! (the GFX10 encodings) and AMD's "RDNA 1.0 Instruction Set Architecture" reference, ch.
//! 12-13. Every rule was checked by assembling with `llvm-mc -arch=amdgcn -mcpu=gfx1010
//! -show-encoding`; the tests hold those bytes.
//!
//! What it cannot size is an [`Undecodable`] error: the caller then reports nothing for
//! the code object rather than guess. Where it is not sure whether an instruction writes a
//! scalar register, it says it may write more (over-reporting writes can only lose a
//! finding, never make one).

/// SGPRs tracked: s0-s105 (106 and up are VCC, TTMPs, M0, EXEC, ...: never a literal's home
/// in the code this scan looks for).
pub const SGPRS: usize = 106;

/// What one instruction does, as far as the scan cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing the scan tracks (vector ALU, memory other than buffer, waits, ...).
    None,
    /// `s_mov_b32 s<dst>, <literal>`; the literal is the instruction's second dword.
    MovLiteral { dst: u8, literal: u32 },
    /// `s_mov_b32` / `s_mov_b64` from SGPRs: `count` registers copied from `src` to `dst`.
    Copy { dst: u8, src: u8, count: u8 },
    /// May write SGPRs `first .. first + count` (clipped to the tracked range).
    Writes { first: u8, count: u8 },
    /// May write any SGPR (relative moves, calls).
    WritesAll,
    /// A MUBUF or MTBUF instruction reading its resource from SGPRs `srsrc .. srsrc + 3`.
    Buffer { srsrc: u8 },
    /// A branch to byte offset `target` (relative to the start of the decoded code; may
    /// be negative or outside it); `conditional` when control may also fall through.
    Branch { target: i64, conditional: bool },
    /// A call (`s_swappc_b64`, `s_call_b64`): control comes back, any SGPR may have
    /// changed. `target` for a direct call.
    Call,
    /// Control does not fall through and goes nowhere the scan can follow
    /// (`s_endpgm`, `s_setpc_b64`, `s_code_end`, ...).
    Stop,
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Length in bytes (4 to 20).
    pub len: usize,
    pub effect: Effect,
}

/// Why decoding stopped: an encoding this decoder does not size, or an instruction cut
/// off by the end of the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undecodable {
    Encoding,
    Truncated,
}

fn dword(code: &[u8], at: usize) -> Option<u32> {
    let b = code.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Scalar operand 255: a 32-bit literal follows the instruction.
const LITERAL: u32 = 255;

/// An SGPR index as an `Effect` register number, if tracked.
fn sgpr(r: u32) -> Option<u8> {
    if (r as usize) < SGPRS {
        Some(r as u8)
    } else {
        None
    }
}

fn writes(r: u32, count: u8) -> Effect {
    match sgpr(r) {
        Some(first) => Effect::Writes { first, count },
        None => Effect::None,
    }
}

/// Decodes the instruction at `at` in `code`.
pub fn decode(code: &[u8], at: usize) -> Result<Insn, Undecodable> {
    let w = dword(code, at).ok_or(Undecodable::Truncated)?;
    let mut insn = if w >> 30 == 0b10 {
        scalar(w)?
    } else if w >> 31 == 0 {
        vector32(w)?
    } else {
        match w >> 26 {
            // VOP3P (bits 31-24 = 0xcc), VOP3 (0b110101): 64 bits + literal.
            0b110011 if w >> 24 == 0xcc => vop3(code, at, w, true)?,
            0b110101 => vop3(code, at, w, false)?,
            // VINTERP: 32 bits.
            0b110010 => Insn {
                len: 4,
                effect: Effect::None,
            },
            // DS, FLAT/GLOBAL/SCRATCH, EXP: 64 bits, vector registers only.
            0b110110 | 0b110111 | 0b111110 => Insn {
                len: 8,
                effect: Effect::None,
            },
            // MUBUF, MTBUF.
            0b111000 | 0b111010 => {
                let w1 = dword(code, at + 4).ok_or(Undecodable::Truncated)?;
                let mubuf = w >> 26 == 0b111000;
                let op = (w >> 18) & 0x7f;
                // buffer_gl0_inv / buffer_gl1_inv take no resource.
                let effect = if mubuf && (op == 0x71 || op == 0x72) {
                    Effect::None
                } else {
                    Effect::Buffer {
                        srsrc: (((w1 >> 16) & 0x1f) * 4) as u8,
                    }
                };
                Insn { len: 8, effect }
            }
            // MIMG: 64 bits + NSA address dwords (bits 2-1).
            0b111100 => Insn {
                len: 8 + 4 * ((w >> 1) & 3) as usize,
                effect: Effect::None,
            },
            // SMEM.
            0b111101 => {
                let op = (w >> 18) & 0xff;
                let sdata = (w >> 6) & 0x7f;
                let count = match op {
                    // s_load_dword{,x2,x4,x8,x16}, s_buffer_load_dword{...}
                    0x00..=0x04 => 1u8 << op,
                    0x08..=0x0c => 1u8 << (op - 8),
                    // s_scratch_load_dword{,x2,x4}
                    0x05..=0x07 => 1u8 << (op - 5),
                    // stores, atomics, s_memtime, cache ops: up to a quad pair.
                    _ => 16,
                };
                Insn {
                    len: 8,
                    effect: writes(sdata, count),
                }
            }
            _ => return Err(Undecodable::Encoding),
        }
    };
    if at.checked_add(insn.len).is_none_or(|end| end > code.len()) {
        return Err(Undecodable::Truncated);
    }
    if let Effect::MovLiteral { dst, .. } = insn.effect {
        let literal = dword(code, at + 4).ok_or(Undecodable::Truncated)?;
        insn.effect = Effect::MovLiteral { dst, literal };
    }
    Ok(insn)
}

fn with_literal(has: bool) -> usize {
    if has { 8 } else { 4 }
}

/// SOP2, SOPK, SOP1, SOPC, SOPP (bits 31-30 = 0b10).
fn scalar(w: u32) -> Result<Insn, Undecodable> {
    let sdst = (w >> 16) & 0x7f;
    if w >> 28 != 0b1011 {
        // SOP2: op 29-23, sdst 22-16, ssrc1 15-8, ssrc0 7-0.
        let op = (w >> 23) & 0x7f;
        let len = with_literal(w & 0xff == LITERAL || (w >> 8) & 0xff == LITERAL);
        // Ops whose result is 64 bits (s_cselect_b64, the *_b64 logic ops, the 64-bit
        // shifts, s_bfm_b64, s_bfe_[ui]64); unknown ops count as 64-bit too.
        let wide = matches!(
            op,
            0x0b | 0x0f
                | 0x11
                | 0x13
                | 0x15
                | 0x17
                | 0x19
                | 0x1b
                | 0x1d
                | 0x1f
                | 0x21
                | 0x23
                | 0x25
                | 0x29
                | 0x2a
        ) || op > 0x36
            || matches!(op, 0x0c | 0x0d | 0x2b | 0x2d);
        return Ok(Insn {
            len,
            effect: writes(sdst, if wide { 2 } else { 1 }),
        });
    }
    match (w >> 23) & 0x1f {
        0x1d => Ok(sop1(w)),
        0x1e => {
            // SOPC: writes SCC only.
            let len = with_literal(w & 0xff == LITERAL || (w >> 8) & 0xff == LITERAL);
            Ok(Insn {
                len,
                effect: Effect::None,
            })
        }
        0x1f => Ok(sopp(w)),
        op => {
            // SOPK: op 27-23, sdst 22-16, simm16 15-0.
            let simm = i64::from(w as u16 as i16);
            let effect = match op {
                // s_movk_i32, s_cmovk_i32, s_addk_i32, s_mulk_i32, s_getreg_b32
                0x00 | 0x02 | 0x0f | 0x10 | 0x12 => writes(sdst, 1),
                // s_version, s_cmpk_*, s_setreg_b32, s_setreg_imm32_b32, s_waitcnt_*
                0x01 | 0x03..=0x0e | 0x13 | 0x15 | 0x17..=0x1a => Effect::None,
                // s_call_b64: writes the return address pair and calls.
                0x16 => Effect::Call,
                // s_subvector_loop_begin / _end: branch, write sdst.
                0x1b | 0x1c => Effect::Branch {
                    target: 4 + simm * 4,
                    conditional: true,
                },
                _ => return Err(Undecodable::Encoding),
            };
            // s_setreg_imm32_b32 carries a 32-bit literal.
            Ok(Insn {
                len: with_literal(op == 0x15),
                effect,
            })
        }
    }
}

fn sop1(w: u32) -> Insn {
    // SOP1: sdst 22-16, op 15-8, ssrc0 7-0.
    let sdst = (w >> 16) & 0x7f;
    let op = (w >> 8) & 0xff;
    let src = w & 0xff;
    let len = with_literal(src == LITERAL);
    let effect = match op {
        // s_mov_b32
        0x03 => match (sgpr(sdst), src) {
            (Some(dst), LITERAL) => Effect::MovLiteral { dst, literal: 0 },
            (Some(dst), s) => match sgpr(s) {
                Some(src) => Effect::Copy { dst, src, count: 1 },
                None => writes(sdst, 1),
            },
            (None, _) => Effect::None,
        },
        // s_mov_b64
        0x04 => match (sgpr(sdst), sgpr(src)) {
            (Some(dst), Some(src)) if (dst as usize) + 1 < SGPRS && (src as usize) + 1 < SGPRS => {
                Effect::Copy { dst, src, count: 2 }
            }
            _ => writes(sdst, 2),
        },
        // s_setpc_b64, s_rfe_b64: control leaves.
        0x20 | 0x22 => Effect::Stop,
        // s_swappc_b64: a call.
        0x21 => Effect::Call,
        // s_movreld_b32/_b64, s_movrelsd_2_b32: destination relative to M0.
        0x30 | 0x31 | 0x49 => Effect::WritesAll,
        // 32-bit results: s_cmov_b32, s_not_b32, s_wqm_b32, s_brev_b32, s_bcnt*, s_ff*,
        // s_flbit*, s_sext*, s_bitset*_b32, s_movrels_b32, s_abs_i32, the b32 saveexec ops.
        0x05 | 0x07 | 0x09 | 0x0b | 0x0d..=0x1b | 0x1d | 0x2e | 0x34 | 0x3c..=0x48 => {
            writes(sdst, 1)
        }
        _ => writes(sdst, 2),
    };
    Insn { len, effect }
}

fn sopp(w: u32) -> Insn {
    // SOPP: op 22-16, simm16 15-0.
    let op = (w >> 16) & 0x7f;
    let simm = i64::from(w as u16 as i16);
    let target = 4 + simm * 4;
    let effect = match op {
        // s_branch
        0x02 => Effect::Branch {
            target,
            conditional: false,
        },
        // s_cbranch_scc0/scc1/vccz/vccnz/execz/execnz, s_cbranch_cdbg*
        0x04..=0x09 | 0x17..=0x1a => Effect::Branch {
            target,
            conditional: true,
        },
        // s_endpgm, s_endpgm_saved, s_endpgm_ordered_ps_done, s_code_end
        0x01 | 0x1b | 0x1e | 0x1f => Effect::Stop,
        _ => Effect::None,
    };
    Insn { len: 4, effect }
}

/// VOP1, VOP2, VOPC (bit 31 = 0): src0 in bits 8-0.
fn vector32(w: u32) -> Result<Insn, Undecodable> {
    let src0 = w & 0x1ff;
    let kind = w >> 25;
    let mut len = 4;
    match src0 {
        // literal; SDWA; DPP16; DPP8 (fi 0 and 1)
        0xff | 0xf9 | 0xfa | 0xe9 | 0xea => len += 4,
        _ => {}
    }
    let effect = match kind {
        0x3f => {
            // VOP1: vdst 24-17, op 16-9. v_readfirstlane_b32 (op 2) writes an SGPR.
            let op = (w >> 9) & 0xff;
            if op == 2 {
                writes((w >> 17) & 0xff, 1)
            } else {
                Effect::None
            }
        }
        // VOPC: writes VCC (or, with SDWA, any SGPR pair named in the SDWA dword).
        0x3e => {
            if src0 == 0xf9 {
                Effect::WritesAll
            } else {
                Effect::None
            }
        }
        op => {
            // VOP2: v_madmk_f32, v_madak_f32, v_fmamk_f32, v_fmaak_f32, v_fmamk_f16,
            // v_fmaak_f16 carry a 32-bit constant K.
            if matches!(op, 0x20 | 0x21 | 0x2c | 0x2d | 0x37 | 0x38) {
                if len != 4 {
                    // K plus a literal, DPP or SDWA: not a valid encoding.
                    return Err(Undecodable::Encoding);
                }
                len += 4;
            }
            Effect::None
        }
    };
    Ok(Insn { len, effect })
}

/// VOP3 / VOP3P: 64 bits, plus a literal when src0, src1 or src2 is 255.
fn vop3(code: &[u8], at: usize, w: u32, packed: bool) -> Result<Insn, Undecodable> {
    let w1 = dword(code, at + 4).ok_or(Undecodable::Truncated)?;
    let literal = [w1 & 0x1ff, (w1 >> 9) & 0x1ff, (w1 >> 18) & 0x1ff].contains(&0xff);
    let len = if literal { 12 } else { 8 };
    if packed {
        return Ok(Insn {
            len,
            effect: Effect::None,
        });
    }
    let op = (w >> 16) & 0x3ff;
    let vdst = w & 0xff;
    let sdst = (w >> 8) & 0x7f;
    let effect = match op {
        // VOPC in VOP3: vdst is the SGPR (pair in wave64) the compare writes.
        0x000..=0x0ff => writes(vdst, 2),
        // v_readfirstlane_b32, v_readlane_b32: an SGPR destination.
        0x182 | 0x360 => writes(vdst, 1),
        // VOP3b (carry-out / scale ops): sdst in bits 14-8 (a pair in wave64).
        0x128 | 0x129 | 0x12a | 0x16d | 0x16e | 0x176 | 0x177 | 0x30f | 0x310 | 0x319 => {
            writes(sdst, 2)
        }
        _ => Effect::None,
    };
    Ok(Insn { len, effect })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes from `llvm-mc -arch=amdgcn -mcpu=gfx1010 -show-encoding` (LLVM 15).
    const TABLE: &[(&str, &[u8], usize, Effect)] = &[
        (
            "s_mov_b32 s3, 0x27000",
            &[0xff, 0x03, 0x83, 0xbe, 0x00, 0x70, 0x02, 0x00],
            8,
            Effect::MovLiteral {
                dst: 3,
                literal: 0x27000,
            },
        ),
        (
            "s_mov_b32 s3, 5",
            &[0x85, 0x03, 0x83, 0xbe],
            4,
            Effect::Writes { first: 3, count: 1 },
        ),
        (
            "s_mov_b64 s[4:5], s[6:7]",
            &[0x06, 0x04, 0x84, 0xbe],
            4,
            Effect::Copy {
                dst: 4,
                src: 6,
                count: 2,
            },
        ),
        (
            "s_add_u32 s0, s1, 0x12345",
            &[0x01, 0xff, 0x00, 0x80, 0x45, 0x23, 0x01, 0x00],
            8,
            Effect::Writes { first: 0, count: 1 },
        ),
        (
            "s_add_u32 s0, 0x12345, s1",
            &[0xff, 0x01, 0x00, 0x80, 0x45, 0x23, 0x01, 0x00],
            8,
            Effect::Writes { first: 0, count: 1 },
        ),
        (
            "s_and_b64 s[0:1], s[2:3], s[4:5]",
            &[0x02, 0x04, 0x80, 0x87],
            4,
            Effect::Writes { first: 0, count: 2 },
        ),
        (
            "s_bfe_i64 s[0:1], s[2:3], s4",
            &[0x02, 0x04, 0x00, 0x95],
            4,
            Effect::Writes { first: 0, count: 2 },
        ),
        (
            "s_mul_hi_i32 s0, s1, s2",
            &[0x01, 0x02, 0x00, 0x9b],
            4,
            Effect::Writes { first: 0, count: 1 },
        ),
        (
            "s_movk_i32 s2, 0x10",
            &[0x10, 0x00, 0x02, 0xb0],
            4,
            Effect::Writes { first: 2, count: 1 },
        ),
        (
            "s_setreg_imm32_b32 hwreg(HW_REG_MODE), 0x1234",
            &[0x01, 0xf8, 0x80, 0xba, 0x34, 0x12, 0x00, 0x00],
            8,
            Effect::None,
        ),
        (
            "s_getreg_b32 s0, hwreg(HW_REG_MODE)",
            &[0x01, 0xf8, 0x00, 0xb9],
            4,
            Effect::Writes { first: 0, count: 1 },
        ),
        (
            "s_cmp_eq_u32 s0, 0x99999",
            &[0x00, 0xff, 0x06, 0xbf, 0x99, 0x99, 0x09, 0x00],
            8,
            Effect::None,
        ),
        ("s_nop 0", &[0x00, 0x00, 0x80, 0xbf], 4, Effect::None),
        (
            "s_branch 2",
            &[0x02, 0x00, 0x82, 0xbf],
            4,
            Effect::Branch {
                target: 12,
                conditional: false,
            },
        ),
        (
            "s_cbranch_scc0 -3",
            &[0xfd, 0xff, 0x84, 0xbf],
            4,
            Effect::Branch {
                target: -8,
                conditional: true,
            },
        ),
        ("s_endpgm", &[0x00, 0x00, 0x81, 0xbf], 4, Effect::Stop),
        ("s_code_end", &[0x00, 0x00, 0x9f, 0xbf], 4, Effect::Stop),
        (
            "s_getpc_b64 s[0:1]",
            &[0x00, 0x1f, 0x80, 0xbe],
            4,
            Effect::Writes { first: 0, count: 2 },
        ),
        (
            "s_setpc_b64 s[0:1]",
            &[0x00, 0x20, 0x80, 0xbe],
            4,
            Effect::Stop,
        ),
        (
            "s_swappc_b64 s[30:31], s[0:1]",
            &[0x00, 0x21, 0x9e, 0xbe],
            4,
            Effect::Call,
        ),
        (
            "s_call_b64 s[30:31], 4",
            &[0x04, 0x00, 0x1e, 0xbb],
            4,
            Effect::Call,
        ),
        (
            "s_movreld_b32 s0, s1",
            &[0x01, 0x30, 0x80, 0xbe],
            4,
            Effect::WritesAll,
        ),
        (
            "s_and_saveexec_b32 s0, s1",
            &[0x01, 0x3c, 0x80, 0xbe],
            4,
            Effect::Writes { first: 0, count: 1 },
        ),
        (
            "s_and_saveexec_b64 s[0:1], s[2:3]",
            &[0x02, 0x24, 0x80, 0xbe],
            4,
            Effect::Writes { first: 0, count: 2 },
        ),
        (
            "s_waitcnt_vscnt null, 0x0",
            &[0x00, 0x00, 0xfd, 0xbb],
            4,
            Effect::None,
        ),
        (
            "s_load_dwordx4 s[8:11], s[0:1], 0x10",
            &[0x00, 0x02, 0x08, 0xf4, 0x10, 0x00, 0x00, 0xfa],
            8,
            Effect::Writes { first: 8, count: 4 },
        ),
        (
            "s_load_dword s1, s[0:1], 0x0",
            &[0x40, 0x00, 0x00, 0xf4, 0x00, 0x00, 0x00, 0xfa],
            8,
            Effect::Writes { first: 1, count: 1 },
        ),
        (
            "s_buffer_load_dwordx16 s[16:31], s[0:3], 0x0",
            &[0x00, 0x04, 0x30, 0xf4, 0x00, 0x00, 0x00, 0xfa],
            8,
            Effect::Writes {
                first: 16,
                count: 16,
            },
        ),
        (
            "s_scratch_load_dwordx4 s[4:7], s[0:1], 0x0",
            &[0x00, 0x01, 0x1c, 0xf4, 0x00, 0x00, 0x00, 0xfa],
            8,
            Effect::Writes { first: 4, count: 4 },
        ),
        (
            "s_atomic_add s5, s[0:1], 0x0",
            &[0x40, 0x01, 0x08, 0xf6, 0x00, 0x00, 0x00, 0xfa],
            8,
            Effect::Writes {
                first: 5,
                count: 16,
            },
        ),
        (
            "v_mov_b32_e32 v0, 0x12345",
            &[0xff, 0x02, 0x00, 0x7e, 0x45, 0x23, 0x01, 0x00],
            8,
            Effect::None,
        ),
        (
            "v_add_nc_u32_e32 v1, s0, v2",
            &[0x00, 0x04, 0x02, 0x4a],
            4,
            Effect::None,
        ),
        (
            "v_fmaak_f32 v0, v1, v2, 0x3f800000",
            &[0x01, 0x05, 0x00, 0x5a, 0x00, 0x00, 0x80, 0x3f],
            8,
            Effect::None,
        ),
        (
            "v_fmamk_f32 v0, v1, 0x3f800000, v2",
            &[0x01, 0x05, 0x00, 0x58, 0x00, 0x00, 0x80, 0x3f],
            8,
            Effect::None,
        ),
        (
            "v_madmk_f32 v0, v1, 0x3f800000, v2",
            &[0x01, 0x05, 0x00, 0x40, 0x00, 0x00, 0x80, 0x3f],
            8,
            Effect::None,
        ),
        (
            "v_madak_f32 v0, v1, v2, 0x3f800000",
            &[0x01, 0x05, 0x00, 0x42, 0x00, 0x00, 0x80, 0x3f],
            8,
            Effect::None,
        ),
        (
            "v_fmamk_f16 v0, v1, 0x3c00, v2",
            &[0x01, 0x05, 0x00, 0x6e, 0x00, 0x3c, 0x00, 0x00],
            8,
            Effect::None,
        ),
        (
            "v_fmaak_f16 v0, v1, v2, 0x3c00",
            &[0x01, 0x05, 0x00, 0x70, 0x00, 0x3c, 0x00, 0x00],
            8,
            Effect::None,
        ),
        (
            "v_cmp_eq_u32_e32 vcc_lo, 0x55555, v0",
            &[0xff, 0x00, 0x84, 0x7d, 0x55, 0x55, 0x05, 0x00],
            8,
            Effect::None,
        ),
        (
            "v_cmpx_eq_u32_e32 0x12345, v0",
            &[0xff, 0x00, 0xa4, 0x7d, 0x45, 0x23, 0x01, 0x00],
            8,
            Effect::None,
        ),
        (
            "v_add_co_u32 v0, s4, v1, v2",
            &[0x00, 0x04, 0x0f, 0xd7, 0x01, 0x05, 0x02, 0x00],
            8,
            Effect::Writes { first: 4, count: 2 },
        ),
        (
            "v_add_co_ci_u32_e64 v0, s2, v1, v2, s4",
            &[0x00, 0x02, 0x28, 0xd5, 0x01, 0x05, 0x12, 0x00],
            8,
            Effect::Writes { first: 2, count: 2 },
        ),
        (
            "v_div_scale_f32 v0, s2, v1, v2, v3",
            &[0x00, 0x02, 0x6d, 0xd5, 0x01, 0x05, 0x0e, 0x04],
            8,
            Effect::Writes { first: 2, count: 2 },
        ),
        (
            "v_mad_u64_u32 v[0:1], s2, v1, v2, v[4:5]",
            &[0x00, 0x02, 0x76, 0xd5, 0x01, 0x05, 0x12, 0x04],
            8,
            Effect::Writes { first: 2, count: 2 },
        ),
        (
            "v_mad_u32_u24 v0, v1, v2, 0x12345",
            &[
                0x00, 0x00, 0x43, 0xd5, 0x01, 0x05, 0xfe, 0x03, 0x45, 0x23, 0x01, 0x00,
            ],
            12,
            Effect::None,
        ),
        (
            "v_readfirstlane_b32 s9, v0",
            &[0x00, 0x05, 0x12, 0x7e],
            4,
            Effect::Writes { first: 9, count: 1 },
        ),
        (
            "v_readlane_b32 s10, v0, 3",
            &[0x0a, 0x00, 0x60, 0xd7, 0x00, 0x07, 0x01, 0x00],
            8,
            Effect::Writes {
                first: 10,
                count: 1,
            },
        ),
        (
            "v_writelane_b32 v0, s3, 2",
            &[0x00, 0x00, 0x61, 0xd7, 0x03, 0x04, 0x01, 0x00],
            8,
            Effect::None,
        ),
        (
            "v_pk_add_f16 v0, v1, v2",
            &[0x00, 0x40, 0x0f, 0xcc, 0x01, 0x05, 0x02, 0x18],
            8,
            Effect::None,
        ),
        (
            "v_pk_fma_f16 v0, v1, v2, 0x12345678",
            &[
                0x00, 0x40, 0x0e, 0xcc, 0x01, 0x05, 0xfe, 0x1b, 0x78, 0x56, 0x34, 0x12,
            ],
            12,
            Effect::None,
        ),
        (
            "v_mov_b32_dpp v0, v1 quad_perm:[0,1,2,3]",
            &[0xfa, 0x02, 0x00, 0x7e, 0x01, 0xe4, 0x00, 0xff],
            8,
            Effect::None,
        ),
        (
            "v_mov_b32_sdwa v0, v1 dst_sel:WORD_1",
            &[0xf9, 0x02, 0x00, 0x7e, 0x01, 0x15, 0x04, 0x00],
            8,
            Effect::None,
        ),
        (
            "v_mov_b32_dpp v0, v1 dpp8:[0,1,2,3,4,5,6,7]",
            &[0xe9, 0x02, 0x00, 0x7e, 0x01, 0x88, 0xc6, 0xfa],
            8,
            Effect::None,
        ),
        (
            "buffer_load_dword v1, v0, s[0:3], 0 offen",
            &[0x00, 0x10, 0x30, 0xe0, 0x00, 0x01, 0x00, 0x80],
            8,
            Effect::Buffer { srsrc: 0 },
        ),
        (
            "buffer_store_dword v1, v0, s[4:7], s2 offen",
            &[0x00, 0x10, 0x70, 0xe0, 0x00, 0x01, 0x01, 0x02],
            8,
            Effect::Buffer { srsrc: 4 },
        ),
        (
            "tbuffer_load_format_x v1, v0, s[8:11], 0 format:[BUF_FMT_32_FLOAT] offen",
            &[0x00, 0x10, 0xb0, 0xe8, 0x00, 0x01, 0x02, 0x80],
            8,
            Effect::Buffer { srsrc: 8 },
        ),
        (
            "buffer_gl0_inv",
            &[0x00, 0x00, 0xc4, 0xe1, 0x00, 0x00, 0x00, 0x00],
            8,
            Effect::None,
        ),
        (
            "buffer_gl1_inv",
            &[0x00, 0x00, 0xc8, 0xe1, 0x00, 0x00, 0x00, 0x00],
            8,
            Effect::None,
        ),
        (
            "global_load_dword v1, v[2:3], off",
            &[0x00, 0x80, 0x30, 0xdc, 0x02, 0x00, 0x7d, 0x01],
            8,
            Effect::None,
        ),
        (
            "ds_read_b32 v0, v1",
            &[0x00, 0x00, 0xd8, 0xd8, 0x01, 0x00, 0x00, 0x00],
            8,
            Effect::None,
        ),
        (
            "image_sample v[0:3], v[0:1], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_2D",
            &[0x08, 0x0f, 0x80, 0xf0, 0x00, 0x00, 0x40, 0x00],
            8,
            Effect::None,
        ),
        (
            "image_sample v[0:3], [v0, v2], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_2D",
            &[
                0x0a, 0x0f, 0x80, 0xf0, 0x00, 0x00, 0x40, 0x00, 0x02, 0x00, 0x00, 0x00,
            ],
            12,
            Effect::None,
        ),
        (
            "v_interp_p1_f32_e32 v0, v1, attr0.x",
            &[0x01, 0x00, 0x00, 0xc8],
            4,
            Effect::None,
        ),
        (
            "exp mrt0 v0, v1, v2, v3",
            &[0x0f, 0x00, 0x00, 0xf8, 0x00, 0x01, 0x02, 0x03],
            8,
            Effect::None,
        ),
    ];

    #[test]
    fn llvm_mc_encodings_decode_to_their_length_and_effect() {
        for (asm, bytes, len, effect) in TABLE {
            let insn = decode(bytes, 0).unwrap_or_else(|e| panic!("{asm}: {e:?}"));
            assert_eq!(insn.len, *len, "{asm}");
            assert_eq!(bytes.len(), *len, "{asm}: the table's bytes");
            assert_eq!(insn.effect, *effect, "{asm}");
            // Cut short by one byte: truncated, never a read past the end.
            assert_eq!(
                decode(&bytes[..bytes.len() - 1], 0),
                Err(Undecodable::Truncated),
                "{asm}"
            );
        }
    }

    #[test]
    fn unknown_encodings_stop_the_decoder() {
        // 0b110100 (reserved on GFX10), 0b111001, 0b111011, 0b111111, 0b110000/1.
        for top in [0xd0u8, 0xe4, 0xec, 0xfc, 0xc0, 0xc4] {
            let b = [0, 0, 0, top, 0, 0, 0, 0];
            assert_eq!(decode(&b, 0), Err(Undecodable::Encoding), "{top:#x}");
        }
        // An unknown SOPK op (0x11).
        let w: u32 = (0b1011 << 28) | (0x11 << 23);
        assert_eq!(decode(&w.to_le_bytes(), 0), Err(Undecodable::Encoding));
        assert_eq!(decode(&[], 0), Err(Undecodable::Truncated));
        assert_eq!(decode(&[0; 4], usize::MAX - 1), Err(Undecodable::Truncated));
    }
}
