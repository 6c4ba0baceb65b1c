//! Table tests of the scan on hand-assembled code objects (instruction bytes from
//! `llvm-mc -mcpu=gfx1010 -show-encoding`, see [`super::write`]).

use super::write::*;
use super::*;
use crate::code_objects::write as cow;

const TRITON: u32 = 0x0002_7000;
const RDNA: u32 = 0x3102_7000;

/// Concatenates instructions.
fn code(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn one_kernel(mach: u8, text: &[u8]) -> Vec<u8> {
    code_object(mach, text, &[("k", 0, text.len())])
}

fn scan(image: &[u8]) -> CodeObjectScan {
    let s = scan_image(image).unwrap();
    assert_eq!(s.objects.len(), 1);
    s.objects[0].clone()
}

#[test]
fn word3_layouts() {
    assert!(is_broken_word3(TRITON));
    assert_eq!(fixed_word3(TRITON), RDNA);
    assert!(!is_broken_word3(RDNA));
    assert!(!is_broken_word3(0x3101_4000));
    assert_eq!(fixed_word3(0x3101_4000), 0x3101_4000);
    // TYPE != 0 is no buffer descriptor.
    assert!(!is_broken_word3(0x8002_7000));
}

/// (what, code, expected findings as (literal offset in code, buffer offsets in code)).
#[allow(clippy::type_complexity)]
fn table() -> Vec<(&'static str, Vec<u8>, Vec<(usize, Vec<usize>)>)> {
    let lit = |r, v| s_mov_b32_literal(r, v);
    let ld = |q| buffer_dword(false, q);
    let st = |q| buffer_dword(true, q);
    vec![
        (
            "Triton's shape: pointers loaded, then word 3, then loads and stores",
            code(&[
                &s_load_dwordx4(0),
                &lit(3, TRITON),
                &ld(0),
                &st(0),
                &S_ENDPGM,
            ]),
            vec![(12, vec![16, 24])],
        ),
        (
            "the RDNA layout",
            code(&[&s_load_dwordx4(0), &lit(3, RDNA), &ld(0), &st(0), &S_ENDPGM]),
            vec![],
        ),
        (
            "a literal that feeds nothing",
            code(&[&lit(3, TRITON), &S_NOP, &S_ENDPGM]),
            vec![],
        ),
        (
            "a literal in another quad's word 3",
            code(&[&lit(3, TRITON), &ld(4), &S_ENDPGM]),
            vec![],
        ),
        (
            "a literal in word 2, not 3",
            code(&[&lit(2, TRITON), &ld(0), &S_ENDPGM]),
            vec![],
        ),
        (
            "a literal overwritten by a scalar load",
            code(&[&lit(3, TRITON), &s_load_dwordx4(0), &ld(0), &S_ENDPGM]),
            vec![],
        ),
        (
            "a literal overwritten by a move",
            code(&[&lit(3, TRITON), &s_mov_b32(3, 9), &ld(0), &S_ENDPGM]),
            vec![],
        ),
        (
            "a literal copied into word 3",
            code(&[&lit(7, TRITON), &s_mov_b32(3, 7), &ld(0), &S_ENDPGM]),
            vec![(4, vec![12])],
        ),
        (
            "a loop around the buffer access (the same literal on both paths)",
            // 0: lit (8) / 8: load (8) / 16: s_cbranch_scc0 -> 8 / 20: endpgm
            code(&[&lit(3, TRITON), &ld(0), &s_cbranch_scc0(-3), &S_ENDPGM]),
            vec![(4, vec![8])],
        ),
        (
            "two paths with different literals (either may reach it): not followed",
            // 0: lit A / 8: cbranch -> 20 / 12: lit B / 20: load / 28: endpgm
            code(&[
                &lit(3, TRITON),
                &s_cbranch_scc0(2),
                &lit(3, TRITON),
                &ld(0),
                &S_ENDPGM,
            ]),
            vec![],
        ),
        (
            "a path on which word 3 is unknown",
            // 0: lit / 8: cbranch -> 20 / 12: s_load_dwordx4 s[0:3] / 20: load / 28: end
            code(&[
                &lit(3, TRITON),
                &s_cbranch_scc0(2),
                &s_load_dwordx4(0),
                &ld(0),
                &S_ENDPGM,
            ]),
            vec![],
        ),
        (
            "an unconditional branch over an overwrite",
            // 0: lit / 8: s_branch -> 20 / 12: s_load (skipped) / 20: load / 28: end
            code(&[
                &lit(3, TRITON),
                &s_branch(2),
                &s_load_dwordx4(0),
                &ld(0),
                &S_ENDPGM,
            ]),
            vec![(4, vec![20])],
        ),
        (
            "code after s_endpgm starts with nothing known",
            code(&[&lit(3, TRITON), &S_ENDPGM, &ld(0), &S_ENDPGM]),
            vec![],
        ),
    ]
}

#[test]
fn scan_table_on_gfx1010() {
    for (what, text, want) in table() {
        let image = one_kernel(MACH_GFX1010, &text);
        let obj = scan(&image);
        assert_eq!(obj.target, "amdgcn-amd-amdhsa--gfx1010", "{what}");
        assert_eq!(obj.kernels, 1, "{what}");
        assert_eq!(obj.undecodable, None, "{what}");
        let got: Vec<(usize, Vec<usize>)> = obj
            .findings
            .iter()
            .map(|f| {
                assert_eq!(f.kernel.as_deref(), Some("k"), "{what}");
                assert_eq!(f.word3, TRITON, "{what}");
                (
                    f.literal_at - 0x100,
                    f.buffer_at.iter().map(|b| b - 0x100).collect(),
                )
            })
            .collect();
        assert_eq!(got, want, "{what}");
        // The fix: exactly those literals, and a rescan finds nothing.
        let s = scan_image(&image).unwrap();
        match fix_image(&image, &s) {
            None => assert!(want.is_empty(), "{what}"),
            Some(fixed) => {
                assert_eq!(fixed.len(), image.len());
                for (i, (a, b)) in image.iter().zip(&fixed).enumerate() {
                    if a != b {
                        let rel = i - 0x100;
                        assert!(
                            want.iter().any(|(l, _)| (*l..l + 4).contains(&rel)),
                            "{what}: byte {i}"
                        );
                    }
                }
                assert_eq!(scan_image(&fixed).unwrap().literals(), 0, "{what}");
            }
        }
        // Another GPU's object with the same code: not scanned.
        let other = one_kernel(MACH_GFX1030, &text);
        let obj = scan(&other);
        assert_eq!(obj.target, "amdgcn-amd-amdhsa--gfx1030");
        assert!(obj.findings.is_empty(), "{what}");
        assert!(!obj.runs_on_rdna1());
    }
}

#[test]
fn findings_in_a_bundle_are_image_offsets() {
    let text = code(&[
        &s_mov_b32_literal(3, TRITON),
        &buffer_dword(false, 0),
        &S_ENDPGM,
    ]);
    let elf = one_kernel(MACH_GFX1010, &text);
    let other = one_kernel(MACH_GFX1030, &text);
    let image = cow::bundle(&[
        ("host-x86_64-unknown-linux-gnu-", b""),
        ("hipv4-amdgcn-amd-amdhsa--gfx1030", &other),
        ("hipv4-amdgcn-amd-amdhsa--gfx1010", &elf),
    ]);
    let s = scan_image(&image).unwrap();
    assert_eq!(s.objects.len(), 2);
    assert_eq!(s.objects[0].target, "amdgcn-amd-amdhsa--gfx1030");
    assert_eq!(s.objects[1].target, "amdgcn-amd-amdhsa--gfx1010");
    let at = s.objects[1].at;
    assert_eq!(&image[at..at + elf.len()], &elf[..]);
    let f = &s.objects[1].findings[0];
    assert_eq!(f.literal_at, at + 0x104);
    assert_eq!(f.buffer_at, vec![at + 0x108]);
    assert_eq!(
        (
            s.literals(),
            s.broken_buffer_instructions(),
            s.kernels_with_findings()
        ),
        (1, 1, 1)
    );
    let fixed = fix_image(&image, &s).unwrap();
    assert_eq!(&fixed[f.literal_at..f.literal_at + 4], &RDNA.to_le_bytes());
    // A bundle entry that says gfx1010 around a gfx1030 object: not trusted.
    let liar = cow::bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx1010", &other)]);
    assert_eq!(scan_image(&liar).unwrap().literals(), 0);
    // The length from the headers alone.
    assert_eq!(len_of(&image), Some(image.len()));
    assert_eq!(len_of(&elf), Some(elf.len()));
    // A compressed bundle is counted, not scanned.
    let z = cow::compressed(2, crate::code_objects::Method::Zlib, &image);
    let s = scan_image(&z).unwrap();
    assert_eq!((s.objects.len(), s.compressed_skipped), (0, 1));
    assert_eq!(len_of(&z), Some(z.len()));
}

fn len_of(image: &[u8]) -> Option<usize> {
    image_len(
        &mut |at, buf| match image.get(at..at.saturating_add(buf.len())) {
            Some(b) => {
                buf.copy_from_slice(b);
                true
            }
            None => false,
        },
    )
}

#[test]
fn undecodable_code_reports_nothing() {
    let text = code(&[
        &s_mov_b32_literal(3, TRITON),
        &buffer_dword(false, 0),
        &[0, 0, 0, 0xd0], // 0b110100: no GFX10 encoding
        &S_NOP,
        &S_ENDPGM,
    ]);
    let obj = scan(&one_kernel(MACH_GFX1010, &text));
    assert_eq!(obj.undecodable, Some(0x100 + 16));
    assert!(obj.findings.is_empty());
    // A branch into the middle of an instruction.
    let text = code(&[
        &s_cbranch_scc0(0), // -> 4: inside the literal move's literal
        &s_mov_b32_literal(3, TRITON),
        &buffer_dword(false, 0),
        &S_ENDPGM,
    ]);
    let text = {
        let mut t = text;
        // target = 0 + 4 + 4 * 1 = 8: the literal dword.
        t[..4].copy_from_slice(&s_cbranch_scc0(1));
        t
    };
    let obj = scan(&one_kernel(MACH_GFX1010, &text));
    assert_eq!(obj.undecodable, Some(0x100));
    assert!(obj.findings.is_empty());
}

#[test]
fn bad_images_are_errors_not_panics() {
    let text = code(&[
        &s_mov_b32_literal(3, TRITON),
        &buffer_dword(false, 0),
        &S_ENDPGM,
    ]);
    let elf = one_kernel(MACH_GFX1010, &text);
    assert_eq!(scan_image(b""), Err(ScanError::NotAnImage));
    assert_eq!(scan_image(b"#!/bin/sh\n"), Err(ScanError::NotAnImage));
    for cut in [4, 40, 63, 64, 0x100, 0x110, elf.len() - 1] {
        let r = scan_image(&elf[..cut]);
        assert!(r.is_err(), "{cut}: {r:?}");
        assert_eq!(len_of(&elf[..cut]), None, "{cut}");
    }
    let bundle = cow::bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx1010", &elf)]);
    for cut in [30, 40, 100, bundle.len() - 1] {
        assert!(scan_image(&bundle[..cut]).is_err(), "{cut}");
    }
    // Not AMDGPU.
    let x86 = cow::elf(&[(".text", &text)]);
    assert_eq!(scan_image(&x86), Err(ScanError::NotAnImage));
    // A scan of another image fixes nothing.
    let s = scan_image(&elf).unwrap();
    let mut other = elf.clone();
    other[0x104] ^= 1;
    assert_eq!(fix_image(&other, &s), None);
    assert_eq!(fix_image(&elf[..0x104], &s), None);
}

/// Writes the fuzz target's seeds (fuzz/seeds/buffer_descriptors): each table case as a
/// gfx1010 object and as bare code, and a bundle. Run by hand:
/// `cargo test -p rmcp-core write_fuzz_seeds -- --ignored`.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/buffer_descriptors");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (_, text, _)) in table().into_iter().enumerate() {
        std::fs::write(
            dir.join(format!("object-{i:02}")),
            one_kernel(MACH_GFX1010, &text),
        )
        .unwrap();
        std::fs::write(dir.join(format!("code-{i:02}")), &text).unwrap();
    }
    let (_, text, _) = table().remove(0);
    let elf = one_kernel(MACH_GFX1010, &text);
    let b = cow::bundle(&[
        ("host-x86_64-unknown-linux-gnu-", b""),
        ("hipv4-amdgcn-amd-amdhsa--gfx1010", &elf),
    ]);
    std::fs::write(dir.join("bundle"), b).unwrap();
}
