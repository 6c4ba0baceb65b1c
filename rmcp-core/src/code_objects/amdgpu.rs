//! The machine code inside an image as `hipModuleLoadData` or a library's `.hip_fatbin`
//! holds it: which AMDGPU ELF objects an image is (a bare ELF, or the device entries of a
//! plain clang offload bundle), each object's target (from the bundle entry and from its
//! ELF header's `e_flags`), and its functions: name, byte range, and, for a kernel, the
//! wave size and WGP mode its kernel descriptor (`<name>.kd`) sets. The scans
//! ([`crate::buffer_descriptors`], [`crate::gfx101x`]) walk these ranges with
//! [`crate::gfx10`].
//!
//! Sources: the ELF header flags (`EF_AMDGPU_MACH`, the v4+ feature bits) from LLVM
//! `llvm/include/llvm/BinaryFormat/ELF.h`; the kernel descriptor layout
//! (`compute_pgm_rsrc1` at byte 48, `WGP_MODE` its bit 29; `kernel_code_properties` at
//! byte 56, `ENABLE_WAVEFRONT_SIZE32` its bit 10) from LLVM's `AMDGPUUsage.rst`, "Kernel
//! Descriptor". Pure: every index is checked; bad input is an [`ImageError`].

use crate::code_objects::{self as co, BUNDLE_MAGIC, COMPRESSED_MAGIC, EntryKind, Partial};
use crate::gfx::Gfx;

/// Why an image was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageError {
    /// Neither an AMDGPU ELF nor an offload bundle.
    NotAnImage,
    /// Its own headers point past its end.
    Truncated,
    /// Its headers are inconsistent.
    Malformed(&'static str),
}

impl std::fmt::Display for ImageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageError::NotAnImage => f.write_str("not an AMDGPU code object or offload bundle"),
            ImageError::Truncated => f.write_str("truncated"),
            ImageError::Malformed(s) => write!(f, "malformed: {s}"),
        }
    }
}

/// One object's place in an image: `at .. at + len`, and the bundle entry's target
/// (`amdgcn-amd-amdhsa--gfx1030`) when it came from a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub at: usize,
    pub len: usize,
    pub bundle_target: Option<String>,
}

/// The objects of an image, and how many compressed bundles it is (not opened here).
pub fn places(image: &[u8]) -> Result<(Vec<Place>, usize), ImageError> {
    if image.starts_with(b"\x7fELF") {
        let place = Place {
            at: 0,
            len: image.len(),
            bundle_target: None,
        };
        return Ok((vec![place], 0));
    }
    if image.starts_with(COMPRESSED_MAGIC) {
        return Ok((Vec::new(), 1));
    }
    if !image.starts_with(BUNDLE_MAGIC) {
        return Err(ImageError::NotAnImage);
    }
    let entries = match co::parse_bundle_header(image) {
        Ok(Partial::Complete(e)) => e,
        Ok(Partial::NeedBytes(_)) => return Err(ImageError::Truncated),
        Err(_) => return Err(ImageError::Malformed("offload bundle entry table")),
    };
    let mut out = Vec::new();
    for e in entries {
        let EntryKind::Device(_) = co::entry_kind(&e.id) else {
            continue;
        };
        let (Ok(at), Ok(len)) = (usize::try_from(e.offset), usize::try_from(e.size)) else {
            return Err(ImageError::Truncated);
        };
        if at.checked_add(len).is_none_or(|end| end > image.len()) {
            return Err(ImageError::Truncated);
        }
        let target = e.id.split_once('-').map(|(_, t)| t).unwrap_or(&e.id);
        out.push(Place {
            at,
            len,
            bundle_target: Some(target.to_string()),
        });
    }
    Ok((out, 0))
}

/// One function of an object: its symbol's name (None for a whole executable section of
/// an object without function symbols) and its bytes `start .. end`, offsets in the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: Option<String>,
    pub start: usize,
    pub end: usize,
    /// From the kernel descriptor `<name>.kd`, when there is one: wave64 (else wave32),
    /// and WGP mode (else CU mode).
    pub wave64: Option<bool>,
    pub wgp_mode: Option<bool>,
}

/// One AMDGPU ELF object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// The bundle entry's target if any, else the header's.
    pub target: String,
    /// The target the ELF header names.
    pub header_target: String,
    /// The processor from the ELF header; None for a generic target or an unknown one.
    pub gfx: Option<Gfx>,
    /// Kernels (`.kd` symbols).
    pub kernels: usize,
    /// Functions, sorted by start, without duplicates.
    pub functions: Vec<Function>,
}

const EM_AMDGPU: u16 = 224;
const SHT_SYMTAB: u32 = 2;
pub(crate) const SHT_NOBITS: u32 = 8;
const SHF_EXECINSTR: u64 = 4;
const STT_FUNC: u8 = 2;
/// Symbols read at most per object.
const MAX_SYMBOLS: usize = 1 << 20;

/// Reads one AMDGPU ELF (`elf` is the object's bytes).
pub fn object(elf: &[u8], bundle_target: Option<&str>) -> Result<Object, ImageError> {
    if elf.len() < 64 {
        return Err(if elf.starts_with(b"\x7fELF") {
            ImageError::Truncated
        } else {
            ImageError::NotAnImage
        });
    }
    if &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return Err(ImageError::NotAnImage);
    }
    let machine = u16::from_le_bytes([elf[0x12], elf[0x13]]);
    if machine != EM_AMDGPU {
        return Err(ImageError::NotAnImage);
    }
    let flags = u32::from_le_bytes([elf[0x30], elf[0x31], elf[0x32], elf[0x33]]);
    let header_target = header_target(flags);
    let target = bundle_target
        .map(str::to_string)
        .unwrap_or(header_target.clone());
    let gfx = mach_name(flags & 0xff).and_then(|n| {
        if n.ends_with("-generic") {
            None
        } else {
            Gfx::parse(n)
        }
    });
    let headers = co::section_headers(elf)
        .map_err(|e| match e {
            co::Error::Corrupt(s) if s.contains("truncated") => ImageError::Truncated,
            _ => ImageError::Malformed("ELF section headers"),
        })?
        .unwrap_or_default();
    for h in &headers {
        if h.kind != SHT_NOBITS
            && h.size > 0
            && h.offset
                .checked_add(h.size)
                .is_none_or(|e| e > elf.len() as u64)
        {
            return Err(ImageError::Truncated);
        }
    }
    let symbols = symbols(elf, &headers);
    let kernels = symbols.iter().filter(|s| s.name.ends_with(".kd")).count();
    // The kernel descriptors' words, by kernel name.
    let descriptor = |name: &str| -> Option<(u32, u16)> {
        let kd = symbols.iter().find(|s| {
            s.name.len() == name.len() + 3 && s.name.starts_with(name) && s.name.ends_with(".kd")
        })?;
        let h = headers.get(kd.shndx as usize)?;
        if h.kind == SHT_NOBITS {
            return None;
        }
        let rel = kd.value.checked_sub(h.addr)?;
        let bytes = slice(elf, h.offset.checked_add(rel)?, 64)?;
        let rsrc1 = u32::from_le_bytes([bytes[48], bytes[49], bytes[50], bytes[51]]);
        let props = u16::from_le_bytes([bytes[56], bytes[57]]);
        Some((rsrc1, props))
    };
    let mut functions: Vec<Function> = Vec::new();
    for s in &symbols {
        if s.kind != STT_FUNC || s.size == 0 {
            continue;
        }
        let Some(h) = headers.get(s.shndx as usize) else {
            continue;
        };
        if h.flags & SHF_EXECINSTR == 0 || h.kind == SHT_NOBITS {
            continue;
        }
        let Some(rel) = s.value.checked_sub(h.addr) else {
            continue;
        };
        if rel.checked_add(s.size).is_none_or(|e| e > h.size) {
            continue;
        }
        let start = (h.offset + rel) as usize;
        let kd = descriptor(&s.name);
        functions.push(Function {
            name: Some(s.name.clone()),
            start,
            end: start + s.size as usize,
            wave64: kd.map(|(_, props)| props & (1 << 10) == 0),
            wgp_mode: kd.map(|(rsrc1, _)| rsrc1 & (1 << 29) != 0),
        });
    }
    if functions.is_empty() {
        for h in &headers {
            if h.flags & SHF_EXECINSTR != 0 && h.kind != SHT_NOBITS && h.size > 0 {
                functions.push(Function {
                    name: None,
                    start: h.offset as usize,
                    end: (h.offset + h.size) as usize,
                    wave64: None,
                    wgp_mode: None,
                });
            }
        }
    }
    functions.sort_by_key(|a| (a.start, a.end));
    functions.dedup_by(|a, b| a.start == b.start && a.end == b.end);
    Ok(Object {
        target,
        header_target,
        gfx,
        kernels,
        functions,
    })
}

/// The processor name of a target string (`amdgcn-amd-amdhsa--gfx1030:xnack-` is
/// `gfx1030`).
pub fn processor(target: &str) -> &str {
    let id = target.rsplit("--").next().unwrap_or("");
    id.split(':').next().unwrap_or("")
}

/// The processor an `EF_AMDGPU_MACH` value names (LLVM `llvm/include/llvm/BinaryFormat/ELF.h`).
fn mach_name(mach: u32) -> Option<&'static str> {
    Some(match mach {
        0x020 => "gfx600",
        0x021 => "gfx601",
        0x022 => "gfx700",
        0x023 => "gfx701",
        0x024 => "gfx702",
        0x025 => "gfx703",
        0x026 => "gfx704",
        0x028 => "gfx801",
        0x029 => "gfx802",
        0x02a => "gfx803",
        0x02b => "gfx810",
        0x02c => "gfx900",
        0x02d => "gfx902",
        0x02e => "gfx904",
        0x02f => "gfx906",
        0x030 => "gfx908",
        0x031 => "gfx909",
        0x032 => "gfx90c",
        0x033 => "gfx1010",
        0x034 => "gfx1011",
        0x035 => "gfx1012",
        0x036 => "gfx1030",
        0x037 => "gfx1031",
        0x038 => "gfx1032",
        0x039 => "gfx1033",
        0x03a => "gfx602",
        0x03b => "gfx705",
        0x03c => "gfx805",
        0x03d => "gfx1035",
        0x03e => "gfx1034",
        0x03f => "gfx90a",
        0x040 => "gfx940",
        0x041 => "gfx1100",
        0x042 => "gfx1013",
        0x043 => "gfx1150",
        0x044 => "gfx1103",
        0x045 => "gfx1036",
        0x046 => "gfx1101",
        0x047 => "gfx1102",
        0x048 => "gfx1200",
        0x04a => "gfx1151",
        0x04b => "gfx941",
        0x04c => "gfx942",
        0x04e => "gfx1201",
        0x04f => "gfx950",
        0x051 => "gfx9-generic",
        0x052 => "gfx10-1-generic",
        0x053 => "gfx10-3-generic",
        0x054 => "gfx11-generic",
        0x055 => "gfx1152",
        0x058 => "gfx1153",
        0x059 => "gfx12-generic",
        0x05f => "gfx9-4-generic",
        _ => return None,
    })
}

/// The target from an AMDGPU ELF header's `e_flags` (code object v4+ feature bits).
fn header_target(flags: u32) -> String {
    let mut t = String::from("amdgcn-amd-amdhsa--");
    match mach_name(flags & 0xff) {
        Some(name) => t.push_str(name),
        None => t.push_str(&format!("unknown-mach-{:#x}", flags & 0xff)),
    }
    match flags & 0xc00 {
        0x800 => t.push_str(":sramecc-"),
        0xc00 => t.push_str(":sramecc+"),
        _ => {}
    }
    match flags & 0x300 {
        0x200 => t.push_str(":xnack-"),
        0x300 => t.push_str(":xnack+"),
        _ => {}
    }
    t
}

struct Symbol {
    name: String,
    kind: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// The symbols of every SYMTAB section (names from its linked string table).
fn symbols(elf: &[u8], headers: &[co::SectionHeader]) -> Vec<Symbol> {
    let mut out = Vec::new();
    for h in headers.iter().filter(|h| h.kind == SHT_SYMTAB) {
        let Some(table) = slice(elf, h.offset, h.size) else {
            continue;
        };
        let strtab = headers
            .get(h.link as usize)
            .and_then(|s| slice(elf, s.offset, s.size))
            .unwrap_or(&[]);
        for sym in table.chunks_exact(24).take(MAX_SYMBOLS) {
            let name_off = u32::from_le_bytes([sym[0], sym[1], sym[2], sym[3]]) as usize;
            let name = strtab
                .get(name_off..)
                .map(|rest| {
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    String::from_utf8_lossy(&rest[..end]).into_owned()
                })
                .unwrap_or_default();
            let mut v = [0u8; 8];
            v.copy_from_slice(&sym[8..16]);
            let value = u64::from_le_bytes(v);
            v.copy_from_slice(&sym[16..24]);
            let size = u64::from_le_bytes(v);
            out.push(Symbol {
                name,
                kind: sym[4] & 0xf,
                shndx: u16::from_le_bytes([sym[6], sym[7]]),
                value,
                size,
            });
        }
    }
    out
}

fn slice(b: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    b.get(start..end)
}
