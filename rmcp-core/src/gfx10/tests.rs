//! Encodings from `llvm-mc -arch=amdgcn -show-encoding` (LLVM 15; gfx1010 unless said),
//! decoded to their length, name and registers. Whole real objects against
//! `llvm-objdump`: rmcp-core/tests/gfx10_llvm_objdump.rs.

use super::*;

/// (assembly, bytes, length).
const TABLE: &[(&str, &[u8], usize)] = &[
    (
        "s_mov_b32 s3, 0x27000",
        &[0xff, 0x03, 0x83, 0xbe, 0x00, 0x70, 0x02, 0x00],
        8,
    ),
    ("s_mov_b32 s3, 5", &[0x85, 0x03, 0x83, 0xbe], 4),
    ("s_mov_b64 s[4:5], s[6:7]", &[0x06, 0x04, 0x84, 0xbe], 4),
    (
        "s_add_u32 s0, s1, 0x12345",
        &[0x01, 0xff, 0x00, 0x80, 0x45, 0x23, 0x01, 0x00],
        8,
    ),
    (
        "s_add_u32 s0, 0x12345, s1",
        &[0xff, 0x01, 0x00, 0x80, 0x45, 0x23, 0x01, 0x00],
        8,
    ),
    (
        "s_and_b64 s[0:1], s[2:3], s[4:5]",
        &[0x02, 0x04, 0x80, 0x87],
        4,
    ),
    ("s_bfe_i64 s[0:1], s[2:3], s4", &[0x02, 0x04, 0x00, 0x95], 4),
    ("s_mul_hi_i32 s0, s1, s2", &[0x01, 0x02, 0x00, 0x9b], 4),
    ("s_movk_i32 s2, 0x10", &[0x10, 0x00, 0x02, 0xb0], 4),
    (
        "s_setreg_imm32_b32 hwreg(HW_REG_MODE), 0x1234",
        &[0x01, 0xf8, 0x80, 0xba, 0x34, 0x12, 0x00, 0x00],
        8,
    ),
    (
        "s_getreg_b32 s0, hwreg(HW_REG_MODE)",
        &[0x01, 0xf8, 0x00, 0xb9],
        4,
    ),
    (
        "s_cmp_eq_u32 s0, 0x99999",
        &[0x00, 0xff, 0x06, 0xbf, 0x99, 0x99, 0x09, 0x00],
        8,
    ),
    ("s_nop 0", &[0x00, 0x00, 0x80, 0xbf], 4),
    ("s_branch 2", &[0x02, 0x00, 0x82, 0xbf], 4),
    ("s_cbranch_scc0 -3", &[0xfd, 0xff, 0x84, 0xbf], 4),
    ("s_endpgm", &[0x00, 0x00, 0x81, 0xbf], 4),
    ("s_code_end", &[0x00, 0x00, 0x9f, 0xbf], 4),
    ("s_getpc_b64 s[0:1]", &[0x00, 0x1f, 0x80, 0xbe], 4),
    ("s_setpc_b64 s[0:1]", &[0x00, 0x20, 0x80, 0xbe], 4),
    (
        "s_swappc_b64 s[30:31], s[0:1]",
        &[0x00, 0x21, 0x9e, 0xbe],
        4,
    ),
    ("s_call_b64 s[30:31], 4", &[0x04, 0x00, 0x1e, 0xbb], 4),
    ("s_movreld_b32 s0, s1", &[0x01, 0x30, 0x80, 0xbe], 4),
    ("s_and_saveexec_b32 s0, s1", &[0x01, 0x3c, 0x80, 0xbe], 4),
    (
        "s_and_saveexec_b64 s[0:1], s[2:3]",
        &[0x02, 0x24, 0x80, 0xbe],
        4,
    ),
    ("s_waitcnt_vscnt null, 0x0", &[0x00, 0x00, 0xfd, 0xbb], 4),
    (
        "s_load_dwordx4 s[8:11], s[0:1], 0x10",
        &[0x00, 0x02, 0x08, 0xf4, 0x10, 0x00, 0x00, 0xfa],
        8,
    ),
    (
        "s_load_dword s1, s[0:1], 0x0",
        &[0x40, 0x00, 0x00, 0xf4, 0x00, 0x00, 0x00, 0xfa],
        8,
    ),
    (
        "s_buffer_load_dwordx16 s[16:31], s[0:3], 0x0",
        &[0x00, 0x04, 0x30, 0xf4, 0x00, 0x00, 0x00, 0xfa],
        8,
    ),
    (
        "s_scratch_load_dwordx4 s[4:7], s[0:1], 0x0",
        &[0x00, 0x01, 0x1c, 0xf4, 0x00, 0x00, 0x00, 0xfa],
        8,
    ),
    (
        "s_atomic_add s5, s[0:1], 0x0",
        &[0x40, 0x01, 0x08, 0xf6, 0x00, 0x00, 0x00, 0xfa],
        8,
    ),
    (
        "v_mov_b32_e32 v0, 0x12345",
        &[0xff, 0x02, 0x00, 0x7e, 0x45, 0x23, 0x01, 0x00],
        8,
    ),
    ("v_add_nc_u32_e32 v1, s0, v2", &[0x00, 0x04, 0x02, 0x4a], 4),
    (
        "v_fmaak_f32 v0, v1, v2, 0x3f800000",
        &[0x01, 0x05, 0x00, 0x5a, 0x00, 0x00, 0x80, 0x3f],
        8,
    ),
    (
        "v_fmamk_f32 v0, v1, 0x3f800000, v2",
        &[0x01, 0x05, 0x00, 0x58, 0x00, 0x00, 0x80, 0x3f],
        8,
    ),
    (
        "v_madmk_f32 v0, v1, 0x3f800000, v2",
        &[0x01, 0x05, 0x00, 0x40, 0x00, 0x00, 0x80, 0x3f],
        8,
    ),
    (
        "v_madak_f32 v0, v1, v2, 0x3f800000",
        &[0x01, 0x05, 0x00, 0x42, 0x00, 0x00, 0x80, 0x3f],
        8,
    ),
    (
        "v_fmamk_f16 v0, v1, 0x3c00, v2",
        &[0x01, 0x05, 0x00, 0x6e, 0x00, 0x3c, 0x00, 0x00],
        8,
    ),
    (
        "v_fmaak_f16 v0, v1, v2, 0x3c00",
        &[0x01, 0x05, 0x00, 0x70, 0x00, 0x3c, 0x00, 0x00],
        8,
    ),
    (
        "v_cmp_eq_u32_e32 vcc_lo, 0x55555, v0",
        &[0xff, 0x00, 0x84, 0x7d, 0x55, 0x55, 0x05, 0x00],
        8,
    ),
    (
        "v_cmpx_eq_u32_e32 0x12345, v0",
        &[0xff, 0x00, 0xa4, 0x7d, 0x45, 0x23, 0x01, 0x00],
        8,
    ),
    (
        "v_add_co_u32 v0, s4, v1, v2",
        &[0x00, 0x04, 0x0f, 0xd7, 0x01, 0x05, 0x02, 0x00],
        8,
    ),
    (
        "v_add_co_ci_u32_e64 v0, s2, v1, v2, s4",
        &[0x00, 0x02, 0x28, 0xd5, 0x01, 0x05, 0x12, 0x00],
        8,
    ),
    (
        "v_div_scale_f32 v0, s2, v1, v2, v3",
        &[0x00, 0x02, 0x6d, 0xd5, 0x01, 0x05, 0x0e, 0x04],
        8,
    ),
    (
        "v_mad_u64_u32 v[0:1], s2, v1, v2, v[4:5]",
        &[0x00, 0x02, 0x76, 0xd5, 0x01, 0x05, 0x12, 0x04],
        8,
    ),
    (
        "v_mad_u32_u24 v0, v1, v2, 0x12345",
        &[
            0x00, 0x00, 0x43, 0xd5, 0x01, 0x05, 0xfe, 0x03, 0x45, 0x23, 0x01, 0x00,
        ],
        12,
    ),
    ("v_readfirstlane_b32 s9, v0", &[0x00, 0x05, 0x12, 0x7e], 4),
    (
        "v_readlane_b32 s10, v0, 3",
        &[0x0a, 0x00, 0x60, 0xd7, 0x00, 0x07, 0x01, 0x00],
        8,
    ),
    (
        "v_writelane_b32 v0, s3, 2",
        &[0x00, 0x00, 0x61, 0xd7, 0x03, 0x04, 0x01, 0x00],
        8,
    ),
    (
        "v_pk_add_f16 v0, v1, v2",
        &[0x00, 0x40, 0x0f, 0xcc, 0x01, 0x05, 0x02, 0x18],
        8,
    ),
    (
        "v_pk_fma_f16 v0, v1, v2, 0x12345678",
        &[
            0x00, 0x40, 0x0e, 0xcc, 0x01, 0x05, 0xfe, 0x1b, 0x78, 0x56, 0x34, 0x12,
        ],
        12,
    ),
    (
        "v_mov_b32_dpp v0, v1 quad_perm:[0,1,2,3]",
        &[0xfa, 0x02, 0x00, 0x7e, 0x01, 0xe4, 0x00, 0xff],
        8,
    ),
    (
        "v_mov_b32_sdwa v0, v1 dst_sel:WORD_1",
        &[0xf9, 0x02, 0x00, 0x7e, 0x01, 0x15, 0x04, 0x00],
        8,
    ),
    (
        "v_mov_b32_dpp v0, v1 dpp8:[0,1,2,3,4,5,6,7]",
        &[0xe9, 0x02, 0x00, 0x7e, 0x01, 0x88, 0xc6, 0xfa],
        8,
    ),
    (
        "buffer_load_dword v1, v0, s[0:3], 0 offen",
        &[0x00, 0x10, 0x30, 0xe0, 0x00, 0x01, 0x00, 0x80],
        8,
    ),
    (
        "buffer_store_dword v1, v0, s[4:7], s2 offen",
        &[0x00, 0x10, 0x70, 0xe0, 0x00, 0x01, 0x01, 0x02],
        8,
    ),
    (
        "tbuffer_load_format_x v1, v0, s[8:11], 0 format:[BUF_FMT_32_FLOAT] offen",
        &[0x00, 0x10, 0xb0, 0xe8, 0x00, 0x01, 0x02, 0x80],
        8,
    ),
    (
        "buffer_gl0_inv",
        &[0x00, 0x00, 0xc4, 0xe1, 0x00, 0x00, 0x00, 0x00],
        8,
    ),
    (
        "buffer_gl1_inv",
        &[0x00, 0x00, 0xc8, 0xe1, 0x00, 0x00, 0x00, 0x00],
        8,
    ),
    (
        "global_load_dword v1, v[2:3], off",
        &[0x00, 0x80, 0x30, 0xdc, 0x02, 0x00, 0x7d, 0x01],
        8,
    ),
    (
        "ds_read_b32 v0, v1",
        &[0x00, 0x00, 0xd8, 0xd8, 0x01, 0x00, 0x00, 0x00],
        8,
    ),
    (
        "image_sample v[0:3], v[0:1], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_2D",
        &[0x08, 0x0f, 0x80, 0xf0, 0x00, 0x00, 0x40, 0x00],
        8,
    ),
    (
        "image_sample v[0:3], [v0, v2], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_2D",
        &[
            0x0a, 0x0f, 0x80, 0xf0, 0x00, 0x00, 0x40, 0x00, 0x02, 0x00, 0x00, 0x00,
        ],
        12,
    ),
    (
        "v_interp_p1_f32_e32 v0, v1, attr0.x",
        &[0x01, 0x00, 0x00, 0xc8],
        4,
    ),
    (
        "exp mrt0 v0, v1, v2, v3",
        &[0x0f, 0x00, 0x00, 0xf8, 0x00, 0x01, 0x02, 0x03],
        8,
    ),
];

#[test]
fn llvm_mc_encodings_decode_to_their_length_and_name() {
    for (asm, bytes, len) in TABLE {
        let insn = decode(bytes, 0).unwrap_or_else(|e| panic!("{asm}: {e:?}"));
        assert_eq!(insn.len, *len, "{asm}");
        assert_eq!(bytes.len(), *len, "{asm}: the table's bytes");
        let mnemonic = asm.split_whitespace().next().unwrap();
        let base = mnemonic
            .trim_end_matches("_e32")
            .trim_end_matches("_e64")
            .trim_end_matches("_sdwa")
            .trim_end_matches("_dpp");
        assert_eq!(insn.name, base, "{asm}");
        // Cut short by one byte: truncated, never a read past the end.
        assert_eq!(
            decode(&bytes[..bytes.len() - 1], 0),
            Err(Undecodable::Truncated),
            "{asm}"
        );
    }
}

fn one(asm: &str) -> Insn {
    let (_, bytes, _) = TABLE.iter().find(|(a, _, _)| *a == asm).unwrap();
    decode(bytes, 0).unwrap()
}

#[test]
fn registers_read_and_written() {
    let i = one("s_mov_b64 s[4:5], s[6:7]");
    assert_eq!(
        (i.swrites, i.sreads),
        (Sregs::range(4, 2), Sregs::range(6, 2))
    );
    let i = one("s_load_dwordx4 s[8:11], s[0:1], 0x10");
    assert_eq!(
        (i.swrites, i.sreads),
        (Sregs::range(8, 4), Sregs::range(0, 2))
    );
    assert_eq!(i.offset, 0x10);
    let i = one("buffer_store_dword v1, v0, s[4:7], s2 offen");
    assert_eq!(i.sreads, Sregs::range(4, 4).union(Sregs::range(2, 1)));
    assert_eq!(i.srsrc, Some(4));
    assert_eq!(i.vreads, Vregs::range(0, 2));
    assert!(i.vwrites.is_empty() && i.reads_exec());
    let i = one("v_add_co_u32 v0, s4, v1, v2");
    assert_eq!(i.swrites, Sregs::range(4, 1));
    assert_eq!(i.valu_sdst(true), Sregs::range(4, 1));
    assert_eq!(i.vwrites, Vregs::range(0, 1));
    // In wave64 the carry is a pair.
    let (_, bytes, _) = TABLE
        .iter()
        .find(|(a, _, _)| *a == "v_add_co_u32 v0, s4, v1, v2")
        .unwrap();
    assert_eq!(
        decode_wave(bytes, 0, true).unwrap().swrites,
        Sregs::range(4, 2)
    );
    let i = one("v_readlane_b32 s10, v0, 3");
    assert_eq!(i.swrites, Sregs::range(10, 1));
    assert!(i.valu_sdst(false).is_empty() && !i.valu_sdst(true).is_empty());
    let i = one("v_cmpx_eq_u32_e32 0x12345, v0");
    assert!(i.writes_exec() && i.is_compare());
    assert_eq!(i.literal, Some(0x12345));
    let i = one("v_cmp_eq_u32_e32 vcc_lo, 0x55555, v0");
    assert_eq!(i.implicit_swrites(), Sregs(1 << VCC_LO));
    let i = one("s_and_saveexec_b32 s0, s1");
    assert!(i.reads_exec() && i.writes_exec());
    assert_eq!(i.swrites, Sregs::range(0, 1));
    let i = one("s_mov_b32 s3, 0x27000");
    assert_eq!(i.literal, Some(0x27000));
    let i = one("image_sample v[0:3], [v0, v2], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_2D");
    assert_eq!(i.nsa_dwords, 1);
    assert_eq!(i.vreads, Vregs::range(0, 1).union(Vregs::range(2, 1)));
    assert_eq!(i.vwrites, Vregs::range(0, 4));
    assert_eq!(i.sreads, Sregs::range(0, 12));
    let i = one("s_branch 2");
    assert_eq!(
        i.control,
        Control::Branch {
            target: 12,
            conditional: false
        }
    );
    assert!(i.is_branch());
    let i = one("s_waitcnt_vscnt null, 0x0");
    assert_eq!(i.waitcnt_k(), Some((0, true, 0)));
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

#[test]
fn every_table_opcode_decodes_and_names_match_the_rules() {
    // The opcodes the rules single out by number are the ones LLVM names so.
    let name = |f, op| ops::lookup(f, op).map(|o| o.name);
    assert_eq!(name(Format::Vop3, 0x377), Some("v_permlane16_b32"));
    assert_eq!(name(Format::Vop3, 0x378), Some("v_permlanex16_b32"));
    assert_eq!(name(Format::Vop3, 0x360), Some("v_readlane_b32"));
    // v_readfirstlane_b32 has no VOP3 form.
    assert_eq!(name(Format::Vop3, 0x182), None);
    assert_eq!(name(Format::Vop1, 0x02), Some("v_readfirstlane_b32"));
    assert_eq!(name(Format::Vop1, 0x00), Some("v_nop"));
    assert_eq!(name(Format::Sopp, 0x0c), Some("s_waitcnt"));
    assert_eq!(name(Format::Sopp, 0x20), Some("s_inst_prefetch"));
    assert_eq!(name(Format::Sopp, 0x21), Some("s_clause"));
    assert_eq!(name(Format::Sopp, 0x23), Some("s_waitcnt_depctr"));
    assert_eq!(name(Format::Sopk, 0x01), Some("s_version"));
    assert_eq!(name(Format::Sopk, 0x17), Some("s_waitcnt_vscnt"));
    assert_eq!(name(Format::Sopk, 0x1a), Some("s_waitcnt_lgkmcnt"));
    assert_eq!(name(Format::Sop1, 0x03), Some("s_mov_b32"));
    assert_eq!(name(Format::Sop1, 0x21), Some("s_swappc_b64"));
}
