//! The writing side for the buffer-descriptor scan's tests, fuzzer and benchmark: a minimal
//! AMDGPU ELF code object (header with `EF_AMDGPU_MACH`, an executable `.text`, a symbol
//! table naming each function and its `.kd` descriptor), and the few GFX10 instructions the
//! tests assemble by hand (bytes as `llvm-mc -mcpu=gfx1010 -show-encoding` prints them).
//! Written from the ELF layout, independently of the reader.

/// `EF_AMDGPU_MACH_AMDGCN_GFX1010` and `_GFX1030`.
pub const MACH_GFX1010: u8 = 0x33;
pub const MACH_GFX1030: u8 = 0x36;

/// `s_mov_b32 s<dst>, <literal>`.
pub fn s_mov_b32_literal(dst: u8, literal: u32) -> [u8; 8] {
    let w = 0xbe80_03ffu32 | (u32::from(dst & 0x7f) << 16);
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&w.to_le_bytes());
    b[4..].copy_from_slice(&literal.to_le_bytes());
    b
}

/// `s_mov_b32 s<dst>, s<src>`.
pub fn s_mov_b32(dst: u8, src: u8) -> [u8; 4] {
    (0xbe80_0300u32 | (u32::from(dst & 0x7f) << 16) | u32::from(src)).to_le_bytes()
}

/// `buffer_load_dword v1, v0, s[srsrc:srsrc+3], 0 offen` (or the store).
pub fn buffer_dword(store: bool, srsrc: u8) -> [u8; 8] {
    let w0: u32 = if store { 0xe070_1000 } else { 0xe030_1000 };
    let w1: u32 = 0x8000_0100 | (u32::from(srsrc / 4) << 16);
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&w0.to_le_bytes());
    b[4..].copy_from_slice(&w1.to_le_bytes());
    b
}

/// `s_load_dwordx4 s[sdata:sdata+3], s[0:1], 0x0`.
pub fn s_load_dwordx4(sdata: u8) -> [u8; 8] {
    let w0: u32 = 0xf408_0000 | (u32::from(sdata & 0x7f) << 6);
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&w0.to_le_bytes());
    b[4..].copy_from_slice(&0xfa00_0000u32.to_le_bytes());
    b
}

/// `s_cbranch_scc0 <simm16>` (target: the next instruction + 4 * simm16).
pub fn s_cbranch_scc0(simm16: i16) -> [u8; 4] {
    (0xbf84_0000u32 | u32::from(simm16 as u16)).to_le_bytes()
}

/// `s_branch <simm16>`.
pub fn s_branch(simm16: i16) -> [u8; 4] {
    (0xbf82_0000u32 | u32::from(simm16 as u16)).to_le_bytes()
}

pub const S_ENDPGM: [u8; 4] = [0x00, 0x00, 0x81, 0xbf];
pub const S_NOP: [u8; 4] = [0x00, 0x00, 0x80, 0xbf];

/// A 64-bit AMDGPU ELF (`ET_DYN`, `e_flags` = `mach`) whose `.text` is `text`, at file offset
/// and address 0x100, with one `STT_FUNC` symbol per `(name, start, len)` (offsets in `text`)
/// and a matching `<name>.kd` object symbol.
pub fn code_object(mach: u8, text: &[u8], functions: &[(&str, usize, usize)]) -> Vec<u8> {
    const TEXT_AT: usize = 0x100;
    let mut out = vec![0u8; TEXT_AT];
    out.extend_from_slice(text);
    while out.len() % 8 != 0 {
        out.push(0);
    }
    // .strtab and .symtab
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; 24]; // the null symbol
    for (name, start, len) in functions {
        for (sym, kind, value, size, shndx) in [
            (name.to_string(), 2u8, TEXT_AT + start, *len, 1u16),
            (format!("{name}.kd"), 1u8, 0, 64, 0xfff1),
        ] {
            let off = strtab.len() as u32;
            strtab.extend_from_slice(sym.as_bytes());
            strtab.push(0);
            let mut s = [0u8; 24];
            s[0..4].copy_from_slice(&off.to_le_bytes());
            s[4] = 0x10 | kind; // STB_GLOBAL
            s[6..8].copy_from_slice(&shndx.to_le_bytes());
            s[8..16].copy_from_slice(&(value as u64).to_le_bytes());
            s[16..24].copy_from_slice(&(size as u64).to_le_bytes());
            symtab.extend_from_slice(&s);
        }
    }
    let symtab_at = out.len();
    out.extend_from_slice(&symtab);
    let strtab_at = out.len();
    out.extend_from_slice(&strtab);
    let shstrtab_at = out.len();
    let shstrtab = b"\0.text\0.symtab\0.strtab\0.shstrtab\0";
    out.extend_from_slice(shstrtab);
    while out.len() % 8 != 0 {
        out.push(0);
    }
    let shoff = out.len();
    // (name, type, flags, addr, offset, size, link, entsize)
    type Header = (u32, u32, u64, u64, usize, usize, u32, u64);
    let headers: [Header; 5] = [
        (0, 0, 0, 0, 0, 0, 0, 0),
        (1, 1, 6, TEXT_AT as u64, TEXT_AT, text.len(), 0, 0),
        (7, 2, 0, 0, symtab_at, symtab.len(), 3, 24),
        (15, 3, 0, 0, strtab_at, strtab.len(), 0, 0),
        (23, 3, 0, 0, shstrtab_at, shstrtab.len(), 0, 0),
    ];
    for (name, kind, flags, addr, offset, size, link, entsize) in headers {
        let mut sh = [0u8; 64];
        sh[0..4].copy_from_slice(&name.to_le_bytes());
        sh[4..8].copy_from_slice(&kind.to_le_bytes());
        sh[8..16].copy_from_slice(&flags.to_le_bytes());
        sh[16..24].copy_from_slice(&addr.to_le_bytes());
        sh[24..32].copy_from_slice(&(offset as u64).to_le_bytes());
        sh[32..40].copy_from_slice(&(size as u64).to_le_bytes());
        sh[40..44].copy_from_slice(&link.to_le_bytes());
        sh[56..64].copy_from_slice(&entsize.to_le_bytes());
        out.extend_from_slice(&sh);
    }
    let h = &mut out[..64];
    h[0..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // 64-bit
    h[5] = 1; // little-endian
    h[6] = 1; // version
    h[7] = 64; // ELFOSABI_AMDGPU_HSA
    h[8] = 2; // code object v4
    h[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    h[18..20].copy_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
    // e_flags: the processor, xnack and sramecc "any" (v4).
    h[0x30..0x34].copy_from_slice(&(u32::from(mach) | 0x100).to_le_bytes());
    h[0x34..0x36].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[0x3c..0x3e].copy_from_slice(&5u16.to_le_bytes()); // e_shnum
    h[0x3e..0x40].copy_from_slice(&4u16.to_le_bytes()); // e_shstrndx
    out
}
