//! The rules on small sequences assembled by LLVM 15 (`llvm-mc -arch=amdgcn -mcpu=gfx1030
//! -mattr=+wavefrontsize32 -show-encoding`; each constant lists its instructions and
//! offsets). LLVM's own ground truth on compiled code is rmcp-core/tests/gfx101x_ground_truth.rs.

use super::*;

// vmem_scalar
//     0: global_load_dword v1, v[2:3], off
//     8: s_mov_b32 exec_lo, s4
//    12: buffer_load_dword v1, v0, s[8:11], 0 offen
//    20: v_add_nc_u32_e32 v5, v6, v7
//    24: s_mov_b32 s8, 0
//    28: buffer_load_dword v1, v0, s[8:11], 0 offen
//    36: s_waitcnt_depctr 0xffe3
//    40: s_mov_b32 s9, 0
//    44: buffer_load_dword v1, v0, s[8:11], 0 offen
//    52: s_load_dword s10, s[0:1], 0x0
//    60: s_endpgm
const VMEM_SCALAR: &[u8] = &[
    0x00, 0x80, 0x30, 0xdc, 0x02, 0x00, 0x7d, 0x01, 0x04, 0x03, 0xfe, 0xbe, 0x00, 0x10, 0x30, 0xe0,
    0x00, 0x01, 0x02, 0x80, 0x06, 0x0f, 0x0a, 0x4a, 0x80, 0x03, 0x88, 0xbe, 0x00, 0x10, 0x30, 0xe0,
    0x00, 0x01, 0x02, 0x80, 0xe3, 0xff, 0xa3, 0xbf, 0x80, 0x03, 0x89, 0xbe, 0x00, 0x10, 0x30, 0xe0,
    0x00, 0x01, 0x02, 0x80, 0x80, 0x02, 0x00, 0xf4, 0x00, 0x00, 0x00, 0xfa, 0x00, 0x00, 0x81, 0xbf,
];
// smem_vector
//     0: s_load_dword s4, s[0:1], 0x0
//     8: v_cmp_eq_u32_e64 s0, v1, v2
//    16: s_load_dword s4, s[0:1], 0x0
//    24: s_waitcnt lgkmcnt(0)
//    28: v_cmp_eq_u32_e64 s0, v1, v2
//    36: s_load_dword s4, s[2:3], 0x0
//    44: s_mov_b32 null, 0
//    48: v_readfirstlane_b32 s2, v1
//    52: s_load_dword s4, s[2:3], 0x0
//    60: v_readlane_b32 s3, v1, 0
//    68: s_endpgm
const SMEM_VECTOR: &[u8] = &[
    0x00, 0x01, 0x00, 0xf4, 0x00, 0x00, 0x00, 0xfa, 0x00, 0x00, 0xc2, 0xd4, 0x01, 0x05, 0x02, 0x00,
    0x00, 0x01, 0x00, 0xf4, 0x00, 0x00, 0x00, 0xfa, 0x7f, 0xc0, 0x8c, 0xbf, 0x00, 0x00, 0xc2, 0xd4,
    0x01, 0x05, 0x02, 0x00, 0x01, 0x01, 0x00, 0xf4, 0x00, 0x00, 0x00, 0xfa, 0x80, 0x03, 0xfd, 0xbe,
    0x01, 0x05, 0x04, 0x7e, 0x01, 0x01, 0x00, 0xf4, 0x00, 0x00, 0x00, 0xfa, 0x03, 0x00, 0x60, 0xd7,
    0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x81, 0xbf,
];
// vcmpx_exec
//     0: s_mov_b32 s0, exec_lo
//     4: v_cmpx_gt_i32_e64 s2, v0
//    12: global_load_dword v1, v[2:3], off
//    20: v_add_nc_u32_e32 v5, v6, v7
//    24: v_cmpx_eq_u32_e32 0, v1
//    28: s_mov_b32 s0, exec_lo
//    32: v_cmp_eq_u32_e32 vcc_lo, 0, v1
//    36: v_cmpx_eq_u32_e32 0, v1
//    40: s_mov_b32 s0, exec_lo
//    44: s_waitcnt_depctr 0xfffe
//    48: v_cmpx_eq_u32_e32 0, v1
//    52: s_endpgm
const VCMPX_EXEC: &[u8] = &[
    0x7e, 0x03, 0x80, 0xbe, 0x00, 0x00, 0x94, 0xd4, 0x02, 0x00, 0x02, 0x00, 0x00, 0x80, 0x30, 0xdc,
    0x02, 0x00, 0x7d, 0x01, 0x06, 0x0f, 0x0a, 0x4a, 0x80, 0x02, 0xa4, 0x7d, 0x7e, 0x03, 0x80, 0xbe,
    0x80, 0x02, 0x84, 0x7d, 0x80, 0x02, 0xa4, 0x7d, 0x7e, 0x03, 0x80, 0xbe, 0xfe, 0xff, 0xa3, 0xbf,
    0x80, 0x02, 0xa4, 0x7d, 0x00, 0x00, 0x81, 0xbf,
];
// permlane
//     0: v_cmpx_eq_u32_e32 0, v1
//     4: s_mov_b32 s0, 0
//     8: v_permlane16_b32 v0, v1, s0, s1
//    16: v_cmpx_eq_u32_e32 0, v1
//    20: v_mov_b32_e32 v1, v1
//    24: v_permlane16_b32 v0, v1, s0, s1
//    32: v_cmp_eq_u32_e32 vcc_lo, 0, v1
//    36: v_permlanex16_b32 v0, v1, s0, s1
//    44: s_endpgm
const PERMLANE: &[u8] = &[
    0x80, 0x02, 0xa4, 0x7d, 0x80, 0x03, 0x80, 0xbe, 0x00, 0x00, 0x77, 0xd7, 0x01, 0x01, 0x04, 0x00,
    0x80, 0x02, 0xa4, 0x7d, 0x01, 0x03, 0x02, 0x7e, 0x00, 0x00, 0x77, 0xd7, 0x01, 0x01, 0x04, 0x00,
    0x80, 0x02, 0x84, 0x7d, 0x00, 0x00, 0x78, 0xd7, 0x01, 0x01, 0x04, 0x00, 0x00, 0x00, 0x81, 0xbf,
];
// lds_branch
//     0: ds_read_b32 v0, v1
//     8: s_cbranch_scc0 0
//    12: global_load_dword v1, v[2:3], off
//    20: global_load_dword v1, v[2:3], off
//    28: s_cbranch_scc0 1
//    32: s_waitcnt_vscnt null, 0x0
//    36: ds_read_b32 v0, v1
//    44: buffer_load_dword v1, v0, s[8:11], 0 offen
//    52: s_branch 0
//    56: ds_read_b32 v0, v1
//    64: s_endpgm
const LDS_BRANCH: &[u8] = &[
    0x00, 0x00, 0xd8, 0xd8, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x84, 0xbf, 0x00, 0x80, 0x30, 0xdc,
    0x02, 0x00, 0x7d, 0x01, 0x00, 0x80, 0x30, 0xdc, 0x02, 0x00, 0x7d, 0x01, 0x01, 0x00, 0x84, 0xbf,
    0x00, 0x00, 0xfd, 0xbb, 0x00, 0x00, 0xd8, 0xd8, 0x01, 0x00, 0x00, 0x00, 0x00, 0x10, 0x30, 0xe0,
    0x00, 0x01, 0x02, 0x80, 0x00, 0x00, 0x82, 0xbf, 0x00, 0x00, 0xd8, 0xd8, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x81, 0xbf,
];
// local
//     0: s_inst_prefetch 0x1
//     4: flat_load_dword v0, v[2:3] offset:16
//    12: flat_load_dword v0, v[2:3]
//    20: global_load_dword v0, v[2:3], off offset:16
//    28: scratch_load_dword v0, v1, off offset:-3
//    36: scratch_load_dword v0, v1, off offset:-4
//    44: scratch_load_dword v0, off, off offset:16
//    52: s_cbranch_scc0 0x3f
//    56: ds_read_b64 v[0:1], v2
//    64: v_fmac_legacy_f32_e32 v0, v1, v2
//    68: v_dot2_f32_f16 v0, v1, v2, v3
//    76: s_endpgm
const LOCAL: &[u8] = &[
    0x01, 0x00, 0xa0, 0xbf, 0x10, 0x00, 0x30, 0xdc, 0x02, 0x00, 0x7d, 0x00, 0x00, 0x00, 0x30, 0xdc,
    0x02, 0x00, 0x7d, 0x00, 0x10, 0x80, 0x30, 0xdc, 0x02, 0x00, 0x7d, 0x00, 0xfd, 0x4f, 0x30, 0xdc,
    0x01, 0x00, 0x7d, 0x00, 0xfc, 0x4f, 0x30, 0xdc, 0x01, 0x00, 0x7d, 0x00, 0x10, 0x40, 0x30, 0xdc,
    0x00, 0x00, 0x7f, 0x00, 0x3f, 0x00, 0x84, 0xbf, 0x00, 0x00, 0xd8, 0xd9, 0x02, 0x00, 0x00, 0x00,
    0x01, 0x05, 0x00, 0x0c, 0x00, 0x40, 0x13, 0xcc, 0x01, 0x05, 0x0e, 0x1c, 0x00, 0x00, 0x81, 0xbf,
];
// nsa
//     0: s_clause 0x1
//     4: image_sample v[0:3], [v0, v2, v4], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_3D
//    16: image_sample v[4:7], [v0, v2, v4], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_3D
//    28: buffer_load_dword v1, v0, s[8:11], 0 offen offset:4
//    36: image_sample_d v[4:7], [v0, v1, v2, v3, v4, v5, v6, v7, v8], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_3D
//    52: buffer_load_dword v1, v0, s[8:11], 0 offen offset:4
//    60: image_sample_d v[4:7], [v0, v1, v2, v3, v4, v5, v6, v7, v8], s[0:7], s[8:11] dmask:0xf dim:SQ_RSRC_IMG_3D
//    76: buffer_load_dword v1, v0, s[8:11], 0 offen offset:8
//    84: s_endpgm
const NSA: &[u8] = &[
    0x01, 0x00, 0xa1, 0xbf, 0x12, 0x0f, 0x80, 0xf0, 0x00, 0x00, 0x40, 0x00, 0x02, 0x04, 0x00, 0x00,
    0x12, 0x0f, 0x80, 0xf0, 0x00, 0x04, 0x40, 0x00, 0x02, 0x04, 0x00, 0x00, 0x04, 0x10, 0x30, 0xe0,
    0x00, 0x01, 0x02, 0x80, 0x14, 0x0f, 0x88, 0xf0, 0x00, 0x04, 0x40, 0x00, 0x01, 0x02, 0x03, 0x04,
    0x05, 0x06, 0x07, 0x08, 0x04, 0x10, 0x30, 0xe0, 0x00, 0x01, 0x02, 0x80, 0x14, 0x0f, 0x88, 0xf0,
    0x00, 0x04, 0x40, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x08, 0x10, 0x30, 0xe0,
    0x00, 0x01, 0x02, 0x80, 0x00, 0x00, 0x81, 0xbf,
];

const GFX1010: Gfx = Gfx(100100);

fn sites(code: &[u8], bug: Bug) -> Vec<usize> {
    let scan = scan_code(code, GFX1010, false, true);
    assert_eq!(scan.undecodable, None, "decodes whole");
    scan.sites
        .iter()
        .filter(|s| s.bug == bug)
        .map(|s| s.at)
        .collect()
}

fn only(code: &[u8], bug: Bug, at: &[usize]) {
    let scan = scan_code(code, GFX1010, false, true);
    assert_eq!(scan.undecodable, None);
    for b in Bug::ALL {
        let want: &[usize] = if b == bug { at } else { &[] };
        assert_eq!(sites(code, b), want, "{}", b.mattr());
    }
}

#[test]
fn vmem_to_scalar_write() {
    only(VMEM_SCALAR, Bug::VmemToScalarWrite, &[8, 52]);
}

#[test]
fn smem_to_vector_write() {
    only(SMEM_VECTOR, Bug::SmemToVectorWrite, &[8, 60]);
}

#[test]
fn vcmpx_exec_war() {
    only(VCMPX_EXEC, Bug::VcmpxExecWar, &[4, 24]);
}

#[test]
fn vcmpx_permlane() {
    only(PERMLANE, Bug::VcmpxPermlane, &[8]);
}

#[test]
fn lds_branch_vmem_war_follows_the_taken_branch() {
    // 36: the branch at 28 jumps over the vscnt wait, so the DS read after it is a site.
    only(LDS_BRANCH, Bug::LdsBranchVmemWar, &[12, 36, 56]);
}

#[test]
fn one_instruction_rules() {
    assert_eq!(sites(LOCAL, Bug::InstFwdPrefetch), [0]);
    assert_eq!(sites(LOCAL, Bug::FlatSegmentOffset), [4]);
    assert_eq!(sites(LOCAL, Bug::NegativeUnalignedScratchOffset), [28]);
    assert_eq!(sites(LOCAL, Bug::Offset3f), [52]);
    assert_eq!(sites(LOCAL, Bug::LdsMisaligned), [56]);
    // The scratch load before the branch, the DS read after it.
    assert_eq!(sites(LOCAL, Bug::LdsBranchVmemWar), [56]);
    // In CU mode the LDS bug does not strike.
    let cu = scan_code(LOCAL, GFX1010, false, false);
    assert!(!cu.sites.iter().any(|s| s.bug == Bug::LdsMisaligned));
}

#[test]
fn nsa_rules() {
    assert_eq!(sites(NSA, Bug::NsaClause), [0]);
    assert_eq!(sites(NSA, Bug::NsaToVmem), [52]);
}

#[test]
fn what_gfx101x_decodes_otherwise() {
    let scan = scan_code(LOCAL, GFX1010, false, true);
    let got: Vec<(usize, Otherwise)> = scan.otherwise.iter().map(|o| (o.at, o.how)).collect();
    assert_eq!(
        got,
        [
            (44, Otherwise::ScratchSaddrExecHi),
            (64, Otherwise::Other("v_mac_legacy_f32")),
            (68, Otherwise::Invalid),
        ]
    );
    // gfx1011 and gfx1012 have the dot instructions.
    for card in [Gfx(100101), Gfx(100102)] {
        let scan = scan_code(LOCAL, card, false, true);
        assert!(!scan.otherwise.iter().any(|o| o.at == 68), "{card:?}");
    }
}

#[test]
fn undecodable_code_reports_nothing_else() {
    // A reserved encoding (0b110100) after a prefetch.
    let mut code = LOCAL[..4].to_vec();
    code.extend_from_slice(&[0, 0, 0, 0xd0, 0, 0, 0, 0]);
    let scan = scan_code(&code, GFX1010, false, true);
    assert_eq!(scan.undecodable, Some(4));
    assert!(scan.sites.is_empty() && scan.otherwise.is_empty());
    // A branch into the middle of an instruction.
    let mut code = vec![0x01, 0x00, 0x82, 0xbf]; // s_branch 1: to byte 8
    code.extend_from_slice(&LOCAL[4..12]); // flat_load_dword (8 bytes: 8 is inside it)
    let scan = scan_code(&code, GFX1010, false, true);
    assert_eq!(scan.undecodable, Some(0));
}

#[test]
fn empty_and_odd_lengths_never_panic() {
    assert_eq!(scan_code(&[], GFX1010, false, true), CodeSites::default());
    for n in 0..LOCAL.len() {
        let _ = scan_code(&LOCAL[..n], GFX1010, true, false);
    }
}

use crate::buffer_descriptors::write::{MACH_GFX1010, MACH_GFX1030, code_object};

/// An AMDGPU ELF of one function holding `code`, as gfx1030.
fn gfx1030_object(code: &[u8]) -> Vec<u8> {
    code_object(MACH_GFX1030, code, &[("f", 0, code.len())])
}

#[test]
fn in_place_fixes_are_the_prefetch_and_the_nsa_clause_only() {
    for (code, bug, at) in [(LOCAL, Bug::InstFwdPrefetch, 0), (NSA, Bug::NsaClause, 0)] {
        let image = gfx1030_object(code);
        let found = in_place_fixes(&image, GFX1010).unwrap();
        assert_eq!(found.fixes.len(), 1, "{found:?}");
        let f = found.fixes[0];
        assert_eq!((f.bug, f.new), (bug, S_NOP_0));
        let text = image.windows(code.len()).position(|w| w == code).unwrap();
        assert_eq!(f.at, text + at);
        let fixed = apply(&image, &found.fixes).unwrap();
        // One word changed, to s_nop 0; every other byte the same.
        let changed: Vec<usize> = (0..image.len()).filter(|&i| image[i] != fixed[i]).collect();
        assert!(
            changed.iter().all(|&i| (f.at..f.at + 4).contains(&i)),
            "{changed:?}"
        );
        assert_eq!(&fixed[f.at..f.at + 4], &S_NOP_0.to_le_bytes());
        // What no fix covers is left, counted.
        let total: usize = scan_code(code, GFX1010, false, true).sites.len();
        assert_eq!(found.left.iter().sum::<usize>(), total - 1);
        // A fix that does not describe the image is not applied.
        assert_eq!(apply(&fixed, &found.fixes), None);
    }
    // gfx1010 code is not gfx103x code: nothing to fix.
    let image = code_object(MACH_GFX1010, LOCAL, &[("f", 0, LOCAL.len())]);
    assert_eq!(in_place_fixes(&image, GFX1010).unwrap(), InPlace::default());
}
