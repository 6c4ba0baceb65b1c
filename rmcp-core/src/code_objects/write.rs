//! The writing side of the formats `code_objects` reads: plain and compressed offload
//! bundles, a fat-binary section of several bundles, and a minimal ELF file around it.
//! Written from the layouts in LLVM's `OffloadBundler.cpp`, independently of the reader,
//! for the tests, the fuzzer's seed corpus and the benchmark (Debian's hipcc 5.2.3 can
//! make neither compressed bundles nor generic targets).

use super::{BUNDLE_MAGIC, COMPRESSED_MAGIC, Method};

/// HIP aligns each bundle, and each code object in a bundle, to 4096 bytes.
pub const ALIGN: usize = 4096;

fn pad_to(v: &mut Vec<u8>, align: usize) {
    let n = v.len().div_ceil(align) * align;
    v.resize(n, 0);
}

/// A plain bundle: the magic, the entry count, the table, then each entry's bytes (the
/// first aligned to `ALIGN`, as clang-offload-bundler does for HIP).
pub fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut header_len = BUNDLE_MAGIC.len() + 8;
    for (id, _) in entries {
        header_len += 24 + id.len();
    }
    let mut offset = header_len.div_ceil(ALIGN) * ALIGN;
    let mut out = Vec::new();
    out.extend_from_slice(BUNDLE_MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    let mut offsets = Vec::new();
    for (id, data) in entries {
        offsets.push(offset);
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(&(id.len() as u64).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
        offset += data.len();
    }
    for ((_, data), off) in entries.iter().zip(offsets) {
        out.resize(off, 0);
        out.extend_from_slice(data);
    }
    out
}

/// A compressed bundle of `plain` (header version 1, 2 or 3). The hash field holds a fixed
/// value: the reader does not check it.
pub fn compressed(version: u16, method: Method, plain: &[u8]) -> Vec<u8> {
    let stream = match method {
        Method::Zlib => miniz_oxide::deflate::compress_to_vec_zlib(plain, 6),
        Method::Zstd => {
            ruzstd::encoding::compress_to_vec(plain, ruzstd::encoding::CompressionLevel::Fastest)
        }
    };
    with_stream(version, method, plain.len() as u64, &stream)
}

/// A compressed bundle around an already compressed `stream`.
pub fn with_stream(version: u16, method: Method, uncompressed: u64, stream: &[u8]) -> Vec<u8> {
    let method_code: u16 = match method {
        Method::Zlib => 0,
        Method::Zstd => 1,
    };
    let hash: u64 = 0x0123_4567_89ab_cdef;
    let mut out = Vec::new();
    out.extend_from_slice(COMPRESSED_MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&method_code.to_le_bytes());
    match version {
        1 => {
            out.extend_from_slice(&(uncompressed as u32).to_le_bytes());
        }
        2 => {
            let total = 24 + stream.len();
            out.extend_from_slice(&(total as u32).to_le_bytes());
            out.extend_from_slice(&(uncompressed as u32).to_le_bytes());
        }
        _ => {
            let total = 32 + stream.len();
            out.extend_from_slice(&(total as u64).to_le_bytes());
            out.extend_from_slice(&uncompressed.to_le_bytes());
        }
    }
    out.extend_from_slice(&hash.to_le_bytes());
    out.extend_from_slice(stream);
    out
}

/// A fat-binary section: the bundles one after another, each padded to `ALIGN`.
pub fn section(bundles: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bundles {
        out.extend_from_slice(b);
        pad_to(&mut out, ALIGN);
    }
    out
}

/// A 64-bit little-endian ELF shared object holding `sections` (name, bytes) as PROGBITS,
/// each aligned to `ALIGN`, plus the section-name table. No segments: only what the
/// section reader looks at.
pub fn elf(sections: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = vec![0u8; 64];
    let mut shstrtab = vec![0u8];
    let mut headers: Vec<[u64; 4]> = Vec::new(); // name, type, offset, size
    for (name, data) in sections {
        pad_to(&mut out, ALIGN);
        headers.push([
            shstrtab.len() as u64,
            1,
            out.len() as u64,
            data.len() as u64,
        ]);
        shstrtab.extend_from_slice(name.as_bytes());
        shstrtab.push(0);
        out.extend_from_slice(data);
    }
    let strtab_name = shstrtab.len() as u64;
    shstrtab.extend_from_slice(b".shstrtab\0");
    headers.push([strtab_name, 3, out.len() as u64, shstrtab.len() as u64]);
    out.extend_from_slice(&shstrtab);
    pad_to(&mut out, 8);
    let shoff = out.len() as u64;
    out.extend_from_slice(&[0u8; 64]); // section 0
    for [name, kind, offset, size] in &headers {
        let mut sh = [0u8; 64];
        sh[0..4].copy_from_slice(&(*name as u32).to_le_bytes());
        sh[4..8].copy_from_slice(&(*kind as u32).to_le_bytes());
        sh[24..32].copy_from_slice(&offset.to_le_bytes());
        sh[32..40].copy_from_slice(&size.to_le_bytes());
        sh[48..56].copy_from_slice(&1u64.to_le_bytes());
        out.extend_from_slice(&sh);
    }
    let shnum = headers.len() as u16 + 1;
    let h = &mut out[..64];
    h[0..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // 64-bit
    h[5] = 1; // little-endian
    h[6] = 1; // version
    h[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    h[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    h[0x34..0x36].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
    h[0x3e..0x40].copy_from_slice(&(shnum - 1).to_le_bytes()); // shstrtab is last
    out
}

/// The bundle hipcc makes for `targets` (`gfx1030`, `gfx90a:xnack-`): a host entry and
/// one small stand-in code object per target.
pub fn hip_bundle(targets: &[&str]) -> Vec<u8> {
    let ids: Vec<String> = std::iter::once("host-x86_64-unknown-linux-gnu-".to_string())
        .chain(
            targets
                .iter()
                .map(|t| format!("hipv4-amdgcn-amd-amdhsa--{t}")),
        )
        .collect();
    let code = b"\x7fELF stand-in code object";
    let entries: Vec<(&str, &[u8])> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), if i == 0 { &b""[..] } else { &code[..] }))
        .collect();
    bundle(&entries)
}
