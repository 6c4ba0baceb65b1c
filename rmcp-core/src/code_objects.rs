//! Which GPUs a HIP library carries code for, read from its bytes. This module owns the
//! formats: the ELF section headers (to find `.hip_fatbin`), the clang offload bundles in
//! that section (plain, and compressed with zlib or zstd), the target IDs of their entries
//! (`gfx1030`, `gfx90a:sramecc+:xnack-`, `gfx10-3-generic`), whether code for a target runs
//! on a given GPU (exact processor, feature settings, generic targets), the targets named by
//! rocBLAS / hipBLASLt Tensile files and MIOpen kernel databases, and the verdict for one
//! library and one GPU under an optional `HSA_OVERRIDE_GFX_VERSION`.
//!
//! Nothing here opens a file. Callers hand in a [`ReadAt`]: the CLI a file read with
//! positioned reads of small ranges, the tests and the fuzzer a byte slice. Every read is
//! bounded (the ELF header, the section headers, each bundle's entry table, and for a
//! compressed bundle only as much of the compressed stream as it takes to inflate the entry
//! table), so a 1 GB library costs a few kilobytes per bundle. Bad input (truncated,
//! corrupt, implausible sizes) is an [`Error`], never a panic.
//!
//! Sources (docs/cli.md cites them for each rule):
//! - the bundle layouts: LLVM `clang/lib/Driver/OffloadBundler.cpp` (`BinaryFileHandler`
//!   for the plain layout, `CompressedOffloadBundle` for the `CCOB` header, versions 1-3,
//!   and the compression methods `llvm::compression::Format`: 0 zlib, 1 zstd);
//! - target IDs, features and their compatibility: clang's `isCodeObjectCompatible` in the
//!   same file and <https://clang.llvm.org/docs/ClangOffloadBundler.html>;
//! - which processors support xnack / sramecc, and the generic targets: LLVM
//!   `llvm/docs/AMDGPUUsage.rst`, "AMDGPU Processors" and "AMDGPU Generic Processors".

use std::fmt;

use crate::gfx::Gfx;

pub mod amdgpu;
pub mod pick;
pub mod write;

// ---------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------

/// Positioned reads: what the scanners need from a file.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the data.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize>;
}

impl ReadAt for [u8] {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= self.len() {
            return Ok(0);
        }
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// Positioned reads of a file the caller opened (`pread`).
impl ReadAt for std::fs::File {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        self.as_slice().read_at(offset, buf)
    }
}

/// Why a file could not be read to the end of its bundle headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The read itself failed.
    Io(String),
    /// The bytes are not what the format says (truncated, corrupt, implausible).
    Corrupt(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(s) => write!(f, "read error: {s}"),
            Error::Corrupt(s) => f.write_str(s),
        }
    }
}

fn corrupt(s: impl Into<String>) -> Error {
    Error::Corrupt(s.into())
}

/// Reads up to `len` bytes at `offset` (fewer only at the end of the data).
fn read_range<R: ReadAt + ?Sized>(r: &R, offset: u64, len: usize) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let at = offset
            .checked_add(got as u64)
            .ok_or_else(|| corrupt("offset overflows"))?;
        match r.read_at(at, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n.min(len - got),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::Io(e.to_string())),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

// ---------------------------------------------------------------------------------------
// ELF
// ---------------------------------------------------------------------------------------

/// The section clang's HIP toolchain puts the device code in.
pub const FATBIN_SECTION: &str = ".hip_fatbin";

/// A section of an ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    /// `sh_type` (1 PROGBITS, 8 NOBITS, ...).
    pub kind: u32,
    pub offset: u64,
    pub size: u64,
}

const SHT_NOBITS: u32 = 8;
/// Section headers read at most (64 bytes each): far more than any real library has.
const MAX_SECTIONS: u64 = 1 << 18;
/// Largest section-name table read.
const MAX_SHSTRTAB: u64 = 16 << 20;

/// The section named `name` of a 64-bit little-endian ELF file: `Ok(None)` when the file
/// is not such an ELF file or has no section of that name with contents (a NOBITS section
/// has none).
pub fn find_section<R: ReadAt + ?Sized>(r: &R, name: &str) -> Result<Option<Section>, Error> {
    let Some(headers) = section_headers(r)? else {
        return Ok(None);
    };
    Ok(headers
        .into_iter()
        .find(|h| h.name == name)
        .filter(|h| h.kind != SHT_NOBITS)
        .map(|h| Section {
            name: h.name,
            kind: h.kind,
            offset: h.offset,
            size: h.size,
        }))
}

/// One ELF section header, all the fields a code-object scan needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionHeader {
    /// The name from the section-name table (empty when it points outside it).
    pub name: String,
    /// `sh_type` (1 PROGBITS, 2 SYMTAB, 3 STRTAB, 8 NOBITS, ...).
    pub kind: u32,
    /// `sh_flags` (4: SHF_EXECINSTR).
    pub flags: u64,
    /// `sh_addr`: where the section lives in the loaded image.
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    /// `sh_link` (a symbol table's string table).
    pub link: u32,
    pub entsize: u64,
}

/// The section headers of a 64-bit little-endian ELF file, in table order, with their
/// names: `Ok(None)` when the file is not such an ELF file or has no section table.
pub fn section_headers<R: ReadAt + ?Sized>(r: &R) -> Result<Option<Vec<SectionHeader>>, Error> {
    let eh = read_range(r, 0, 64)?;
    if eh.len() < 4 || &eh[..4] != b"\x7fELF" {
        return Ok(None);
    }
    if eh.len() < 64 {
        return Err(corrupt("ELF header truncated"));
    }
    if eh[4] != 2 || eh[5] != 1 {
        // 32-bit or big-endian: no HIP library is either.
        return Ok(None);
    }
    let shoff = u64_at(&eh, 0x28).unwrap_or(0);
    let shentsize = u16_at(&eh, 0x3a).unwrap_or(0);
    let mut shnum = u64::from(u16_at(&eh, 0x3c).unwrap_or(0));
    let mut shstrndx = u64::from(u16_at(&eh, 0x3e).unwrap_or(0));
    if shoff == 0 {
        return Ok(None);
    }
    if shentsize != 64 {
        return Err(corrupt(format!(
            "ELF section header size {shentsize}, not 64"
        )));
    }
    if shnum == 0 || shstrndx == 0xffff {
        // Extended numbering: the real values are in section header 0.
        let sh0 = read_range(r, shoff, 64)?;
        if sh0.len() < 64 {
            return Err(corrupt("ELF section headers truncated"));
        }
        if shnum == 0 {
            shnum = u64_at(&sh0, 32).unwrap_or(0);
        }
        if shstrndx == 0xffff {
            shstrndx = u64::from(u32_at(&sh0, 40).unwrap_or(0));
        }
    }
    if shnum == 0 {
        return Ok(None);
    }
    if shnum > MAX_SECTIONS {
        return Err(corrupt(format!("ELF header claims {shnum} sections")));
    }
    if shstrndx >= shnum {
        return Err(corrupt("ELF section-name table index out of range"));
    }
    let table = read_range(r, shoff, (shnum * 64) as usize)?;
    if (table.len() as u64) < shnum * 64 {
        return Err(corrupt("ELF section headers truncated"));
    }
    let header = |i: u64| -> SectionHeader {
        let b = &table[(i * 64) as usize..(i * 64 + 64) as usize];
        SectionHeader {
            name: String::new(),
            kind: u32_at(b, 4).unwrap_or(0),
            flags: u64_at(b, 8).unwrap_or(0),
            addr: u64_at(b, 16).unwrap_or(0),
            offset: u64_at(b, 24).unwrap_or(0),
            size: u64_at(b, 32).unwrap_or(0),
            link: u32_at(b, 40).unwrap_or(0),
            entsize: u64_at(b, 56).unwrap_or(0),
        }
    };
    let names = header(shstrndx);
    if names.size > MAX_SHSTRTAB {
        return Err(corrupt(format!(
            "ELF section-name table of {} bytes",
            names.size
        )));
    }
    let strtab = read_range(r, names.offset, names.size as usize)?;
    if (strtab.len() as u64) < names.size {
        return Err(corrupt("ELF section-name table truncated"));
    }
    let mut out = Vec::with_capacity(shnum as usize);
    for i in 0..shnum {
        let b = &table[(i * 64) as usize..(i * 64 + 64) as usize];
        let name_off = u32_at(b, 0).unwrap_or(0);
        let mut h = header(i);
        if let Some(rest) = strtab.get(name_off as usize..) {
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            h.name = String::from_utf8_lossy(&rest[..end]).into_owned();
        }
        out.push(h);
    }
    Ok(Some(out))
}

// ---------------------------------------------------------------------------------------
// Target IDs and GPUs
// ---------------------------------------------------------------------------------------

/// A target feature's setting in a code object's target ID: absent means any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    Any,
    On,
    Off,
}

/// A code object's target: processor and the xnack / sramecc settings it was built for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetId {
    /// As written: `gfx1030`, `gfx90a`, `gfx10-3-generic`.
    pub processor: String,
    pub sramecc: Feature,
    pub xnack: Feature,
}

/// A generic target and the processors it runs on (AMDGPUUsage, "AMDGPU Generic
/// Processors").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenericTarget {
    pub name: &'static str,
    /// KFD-encoded ISAs (`Gfx.0`).
    pub members: &'static [u32],
}

/// The generic targets, from LLVM's `llvm/docs/AMDGPUUsage.rst` table
/// `amdgpu-generic-processor-table` (llvm/llvm-project f5c8b0a9).
pub const GENERIC_TARGETS: &[GenericTarget] = &[
    GenericTarget {
        name: "gfx9-generic",
        members: &[90000, 90002, 90004, 90006, 90009, 90012],
    },
    GenericTarget {
        name: "gfx9-4-generic",
        members: &[90402, 90500],
    },
    GenericTarget {
        name: "gfx10-1-generic",
        members: &[100100, 100101, 100102, 100103],
    },
    GenericTarget {
        name: "gfx10-3-generic",
        members: &[100300, 100301, 100302, 100303, 100304, 100305, 100306],
    },
    GenericTarget {
        name: "gfx11-generic",
        members: &[
            110000, 110001, 110002, 110003, 110500, 110501, 110502, 110503,
        ],
    },
    GenericTarget {
        name: "gfx12-generic",
        members: &[120000, 120001],
    },
];

impl TargetId {
    /// A target ID as clang writes it: `processor(:feature[+-])*`, features `xnack` and
    /// `sramecc`, each at most once.
    pub fn parse(s: &str) -> Option<TargetId> {
        let mut parts = s.split(':');
        let processor = parts.next()?;
        TargetId::from_parts(processor, parts)
    }

    /// A target as Tensile writes it in file names: `gfx90a-xnack+`, `gfx1030`.
    pub fn parse_tensile(s: &str) -> Option<TargetId> {
        if let Some(g) = GENERIC_TARGETS.iter().find(|g| s.starts_with(g.name)) {
            let rest = &s[g.name.len()..];
            let feats = rest.split('-').filter(|p| !p.is_empty());
            return TargetId::from_parts(g.name, feats);
        }
        let mut parts = s.split('-');
        let processor = parts.next()?;
        TargetId::from_parts(processor, parts)
    }

    fn from_parts<'a>(
        processor: &str,
        features: impl Iterator<Item = &'a str>,
    ) -> Option<TargetId> {
        let valid = processor.len() > 3
            && processor.len() <= 32
            && processor.starts_with("gfx")
            && processor
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let generic =
            GENERIC_TARGETS.iter().any(|g| g.name == processor) || processor.ends_with("-generic");
        if !valid || (!generic && Gfx::parse(processor).is_none()) {
            return None;
        }
        let mut t = TargetId {
            processor: processor.to_string(),
            sramecc: Feature::Any,
            xnack: Feature::Any,
        };
        for f in features {
            let (name, value) = match f.as_bytes().last() {
                Some(b'+') => (&f[..f.len() - 1], Feature::On),
                Some(b'-') => (&f[..f.len() - 1], Feature::Off),
                _ => return None,
            };
            let slot = match name {
                "xnack" => &mut t.xnack,
                "sramecc" => &mut t.sramecc,
                _ => return None,
            };
            if *slot != Feature::Any {
                return None;
            }
            *slot = value;
        }
        Some(t)
    }

    /// The specific processor, or None for a generic target.
    pub fn gfx(&self) -> Option<Gfx> {
        if self.processor.ends_with("-generic") {
            None
        } else {
            Gfx::parse(&self.processor)
        }
    }

    /// The generic target this ID names, if it is one doctor knows.
    pub fn generic(&self) -> Option<&'static GenericTarget> {
        GENERIC_TARGETS.iter().find(|g| g.name == self.processor)
    }

    /// Whether a code object for this target loads on `dev` (clang's
    /// `isCodeObjectCompatible`, with generic targets expanded to their processors).
    pub fn runs_on(&self, dev: &Device) -> bool {
        let processor = match self.gfx() {
            Some(g) => g == dev.gfx,
            None => self
                .generic()
                .is_some_and(|g| g.members.contains(&dev.gfx.0)),
        };
        processor && feature_fits(self.xnack, dev.xnack) && feature_fits(self.sramecc, dev.sramecc)
    }
}

fn feature_fits(code: Feature, dev: DeviceFeature) -> bool {
    match (code, dev) {
        (Feature::Any, _) => true,
        (_, DeviceFeature::Unsupported) => false,
        (_, DeviceFeature::Unknown) => true,
        (Feature::On, DeviceFeature::On) | (Feature::Off, DeviceFeature::Off) => true,
        _ => false,
    }
}

impl fmt::Display for TargetId {
    /// The canonical form: features in alphabetical order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, v) in [("sramecc", self.sramecc), ("xnack", self.xnack)] {
            match v {
                Feature::Any => {}
                Feature::On => write!(f, ":{name}+")?,
                Feature::Off => write!(f, ":{name}-")?,
            }
        }
        Ok(())
    }
}

/// A GPU's setting of a target feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceFeature {
    /// The processor does not have the feature: code that names it does not load.
    Unsupported,
    On,
    Off,
    /// The processor has the feature, but its setting is not known here.
    Unknown,
}

/// A GPU as code-object loading sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    pub gfx: Gfx,
    pub xnack: DeviceFeature,
    pub sramecc: DeviceFeature,
}

impl Device {
    /// The features as far as the ISA tells them (AMDGPUUsage, "AMDGPU Processors":
    /// xnack on gfx90x, gfx94x, gfx950 and gfx101x; sramecc on gfx906, gfx908, gfx90a,
    /// gfx94x, gfx950). The amdgpu driver never enables XNACK on GFX10, so gfx101x is off;
    /// on the GFX9 parts the settings depend on the driver and are left unknown.
    pub fn from_gfx(gfx: Gfx) -> Device {
        let xnack = match gfx.0 {
            100100..=100103 => DeviceFeature::Off,
            90000 | 90002 | 90004 | 90006 | 90008 | 90009 | 90010 | 90012 => DeviceFeature::Unknown,
            90400..=90402 | 90500 => DeviceFeature::Unknown,
            _ => DeviceFeature::Unsupported,
        };
        let sramecc = match gfx.0 {
            90006 | 90008 | 90010 | 90400..=90402 | 90500 => DeviceFeature::Unknown,
            _ => DeviceFeature::Unsupported,
        };
        Device {
            gfx,
            xnack,
            sramecc,
        }
    }
}

/// What a bundle entry ID names: `<kind>-<arch>-<vendor>-<os>-<env>[-<target id>]`
/// (`hipv4-amdgcn-amd-amdhsa--gfx1030`, `host-x86_64-unknown-linux-gnu-`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Host,
    /// GPU code for this target (kinds hip, hipv4, openmp on amdgcn).
    Device(TargetId),
    /// Anything else (other architectures, unknown processors).
    Other,
}

pub fn entry_kind(id: &str) -> EntryKind {
    let parts: Vec<&str> = id.splitn(6, '-').collect();
    if parts.first() == Some(&"host") {
        return EntryKind::Host;
    }
    if parts.len() != 6 || !matches!(parts[0], "hip" | "hipv4" | "openmp") || parts[1] != "amdgcn" {
        return EntryKind::Other;
    }
    match TargetId::parse(parts[5]) {
        Some(t) => EntryKind::Device(t),
        None => EntryKind::Other,
    }
}

// ---------------------------------------------------------------------------------------
// Offload bundles
// ---------------------------------------------------------------------------------------

/// Starts a plain offload bundle.
pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Starts a compressed offload bundle.
pub const COMPRESSED_MAGIC: &[u8; 4] = b"CCOB";

/// Entries per bundle accepted (a real bundle has one per target plus the host).
const MAX_ENTRIES: u64 = 4096;
/// Longest entry ID accepted.
const MAX_ID_LEN: u64 = 4096;
/// Largest entry table read.
const MAX_TABLE: usize = 1 << 20;

/// One entry of a bundle's table: where its code object is, relative to the bundle's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub offset: u64,
    pub size: u64,
    pub id: String,
}

/// A parse that may need more bytes than it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partial<T> {
    Complete(T),
    /// Give it at least this many bytes from the same start.
    NeedBytes(usize),
}

/// The entry table of a plain bundle from its first bytes: magic, entry count, then per
/// entry offset, size, ID length (8-byte little-endian each) and ID.
pub fn parse_bundle_header(b: &[u8]) -> Result<Partial<Vec<Entry>>, Error> {
    let m = BUNDLE_MAGIC.len();
    if b.len() < m + 8 {
        if !BUNDLE_MAGIC.starts_with(&b[..b.len().min(m)]) {
            return Err(corrupt("no offload bundle magic"));
        }
        return Ok(Partial::NeedBytes(m + 8));
    }
    if &b[..m] != BUNDLE_MAGIC {
        return Err(corrupt("no offload bundle magic"));
    }
    let count = u64_at(b, m).unwrap_or(0);
    if count > MAX_ENTRIES {
        return Err(corrupt(format!("offload bundle claims {count} entries")));
    }
    let mut at = m + 8;
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if b.len() < at + 24 {
            return need(at + 24);
        }
        let offset = u64_at(b, at).unwrap_or(0);
        let size = u64_at(b, at + 8).unwrap_or(0);
        let len = u64_at(b, at + 16).unwrap_or(0);
        if len > MAX_ID_LEN {
            return Err(corrupt(format!("offload bundle entry ID of {len} bytes")));
        }
        at += 24;
        let len = len as usize;
        if b.len() < at + len {
            return need(at + len);
        }
        let id = std::str::from_utf8(&b[at..at + len])
            .map_err(|_| corrupt("offload bundle entry ID is not UTF-8"))?
            .to_string();
        at += len;
        if offset.checked_add(size).is_none() {
            return Err(corrupt("offload bundle entry size overflows"));
        }
        entries.push(Entry { offset, size, id });
    }
    Ok(Partial::Complete(entries))
}

fn need<T>(n: usize) -> Result<Partial<T>, Error> {
    if n > MAX_TABLE {
        Err(corrupt(format!(
            "offload bundle entry table over {MAX_TABLE} bytes"
        )))
    } else {
        Ok(Partial::NeedBytes(n))
    }
}

/// The compression a compressed bundle uses (`llvm::compression::Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Zlib,
    Zstd,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Zlib => "zlib",
            Method::Zstd => "zstd",
        }
    }
}

/// A compressed bundle's header. Version 1: magic, version (u16), method (u16),
/// uncompressed size (u32), hash (u64). Version 2 adds the total size (u32) before the
/// uncompressed size; version 3 makes both sizes u64. The hash (the low 64 bits of the
/// MD5 of the uncompressed bundle) is not checked: that would take inflating all of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressedHeader {
    pub version: u16,
    pub method: Method,
    /// The whole compressed bundle, header included (versions 2 and 3).
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    pub hash: u64,
    /// Where the compressed stream starts.
    pub header_len: usize,
}

pub fn parse_compressed_header(b: &[u8]) -> Result<Partial<CompressedHeader>, Error> {
    if b.len() < 8 {
        return Ok(Partial::NeedBytes(8));
    }
    if &b[..4] != COMPRESSED_MAGIC {
        return Err(corrupt("no compressed bundle magic"));
    }
    let version = u16_at(b, 4).unwrap_or(0);
    let method = match u16_at(b, 6).unwrap_or(u16::MAX) {
        0 => Method::Zlib,
        1 => Method::Zstd,
        m => {
            return Err(corrupt(format!(
                "compressed bundle with unknown method {m}"
            )));
        }
    };
    let header_len = match version {
        1 => 20,
        2 => 24,
        3 => 32,
        v => {
            return Err(corrupt(format!(
                "compressed bundle version {v} (rmcp reads versions 1 to 3)"
            )));
        }
    };
    if b.len() < header_len {
        return Ok(Partial::NeedBytes(header_len));
    }
    let (total_size, uncompressed_size, hash) = match version {
        1 => (
            None,
            u64::from(u32_at(b, 8).unwrap_or(0)),
            u64_at(b, 12).unwrap_or(0),
        ),
        2 => (
            Some(u64::from(u32_at(b, 8).unwrap_or(0))),
            u64::from(u32_at(b, 12).unwrap_or(0)),
            u64_at(b, 16).unwrap_or(0),
        ),
        _ => (
            u64_at(b, 8),
            u64_at(b, 16).unwrap_or(0),
            u64_at(b, 24).unwrap_or(0),
        ),
    };
    if total_size.is_some_and(|t| t < header_len as u64) {
        return Err(corrupt("compressed bundle smaller than its header"));
    }
    Ok(Partial::Complete(CompressedHeader {
        version,
        method,
        total_size,
        uncompressed_size,
        hash,
        header_len,
    }))
}

/// What inflating the start of a compressed stream gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inflated {
    /// The first `want` bytes, or all of them if the stream is shorter.
    Bytes(Vec<u8>),
    /// The input ended first: give more of the stream.
    NeedInput,
}

/// Inflates at most `want` bytes from the start of a compressed stream (`input` is a
/// prefix of it). Only the blocks that hold those bytes are decoded.
pub fn decompress_prefix(method: Method, input: &[u8], want: usize) -> Result<Inflated, Error> {
    Inflaters::default().prefix(method, input, want)
}

/// Decoder states kept from one bundle to the next: a section can hold thousands of
/// compressed bundles, and setting a decoder up costs more than inflating one table.
#[derive(Default)]
struct Inflaters {
    zlib: Option<Box<miniz_oxide::inflate::stream::InflateState>>,
    zstd: Option<ruzstd::decoding::FrameDecoder>,
}

impl Inflaters {
    fn prefix(&mut self, method: Method, input: &[u8], want: usize) -> Result<Inflated, Error> {
        if want == 0 {
            return Ok(Inflated::Bytes(Vec::new()));
        }
        match method {
            Method::Zlib => self.zlib(input, want),
            Method::Zstd => self.zstd(input, want),
        }
    }

    fn zlib(&mut self, input: &[u8], want: usize) -> Result<Inflated, Error> {
        use miniz_oxide::inflate::stream::{InflateState, inflate};
        use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
        let state = self
            .zlib
            .get_or_insert_with(|| InflateState::new_boxed(DataFormat::Zlib));
        state.reset(DataFormat::Zlib);
        let mut out = vec![0u8; want];
        let (mut inp, mut outp) = (0usize, 0usize);
        loop {
            let res = inflate(state, &input[inp..], &mut out[outp..], MZFlush::None);
            inp += res.bytes_consumed;
            outp += res.bytes_written;
            let stuck = res.bytes_consumed == 0 && res.bytes_written == 0;
            match res.status {
                Ok(MZStatus::StreamEnd) => {
                    out.truncate(outp);
                    return Ok(Inflated::Bytes(out));
                }
                _ if outp >= want => return Ok(Inflated::Bytes(out)),
                Ok(_) | Err(MZError::Buf)
                    if inp >= input.len() && (stuck || res.status.is_err()) =>
                {
                    return Ok(Inflated::NeedInput);
                }
                Ok(_) if !stuck => {}
                Ok(_) | Err(_) => {
                    return Err(corrupt(format!(
                        "zlib stream is corrupt after {outp} bytes"
                    )));
                }
            }
        }
    }

    fn zstd(&mut self, input: &[u8], want: usize) -> Result<Inflated, Error> {
        use std::io::Read;
        let frame = self
            .zstd
            .get_or_insert_with(ruzstd::decoding::FrameDecoder::new);
        let input = small_zstd_window(input);
        let mut src: &[u8] = &input;
        let mut dec = match ruzstd::decoding::StreamingDecoder::new_with_decoder(&mut src, frame) {
            Ok(d) => d,
            Err(e) => {
                return if input.len() < 18 || src.is_empty() {
                    Ok(Inflated::NeedInput)
                } else {
                    Err(corrupt(format!("zstd frame header: {e}")))
                };
            }
        };
        let mut out = vec![0u8; want];
        let mut got = 0;
        while got < want {
            match dec.read(&mut out[got..]) {
                Ok(0) => {
                    out.truncate(got);
                    return Ok(Inflated::Bytes(out));
                }
                Ok(n) => got += n,
                Err(e) => {
                    return if dec.get_ref().is_empty() {
                        Ok(Inflated::NeedInput)
                    } else {
                        Err(corrupt(format!(
                            "zstd stream is corrupt after {got} bytes: {e}"
                        )))
                    };
                }
            }
        }
        Ok(Inflated::Bytes(out))
    }
}

/// The window a zstd frame header is given for inflating the start of the stream.
const ZSTD_PREFIX_WINDOW: u64 = 128 << 10;

/// `input` (the start of a zstd frame) with its header declaring a window of
/// [`ZSTD_PREFIX_WINDOW`] when it declares a larger one.
///
/// ruzstd hands out decoded bytes only once more than a window's worth follows them (or the
/// frame ends), so with the window a frame declares, inflating an entry table would inflate
/// the whole bundle when the frame is one segment (the window is then the content size), or
/// 128 MiB with clang's long-distance matching (`zstd::compress(..., EnableLdm)`); and
/// ruzstd refuses windows over 100 MiB outright, which ROCm 7.2's rocBLAS bundles have. The
/// window only bounds how far back a match may reach, and this reads the prefix in one go,
/// before any decoded byte leaves ruzstd's buffer, so every match still finds its bytes:
/// the prefix decodes to the same bytes. A single-segment header (window = content size)
/// becomes a multi-segment one with a window descriptor, keeping the content size field.
/// Anything that is not a zstd frame header is returned as it is (and fails as it did).
fn small_zstd_window(input: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    if input.len() < 6 || input[..4] != MAGIC {
        return Cow::Borrowed(input);
    }
    let fhd = input[4];
    let single_segment = fhd & 0x20 != 0;
    let window = if single_segment {
        // Dictionary ID (0, 1, 2 or 4 bytes), then the content size (1, 2, 4 or 8 bytes).
        let at = 5 + [0usize, 1, 2, 4][usize::from(fhd & 3)];
        let len = [1usize, 2, 4, 8][usize::from(fhd >> 6)];
        let Some(field) = input.get(at..at + len) else {
            return Cow::Borrowed(input);
        };
        let v = field
            .iter()
            .rev()
            .fold(0u64, |v, b| (v << 8) | u64::from(*b));
        if len == 2 { v + 256 } else { v }
    } else {
        let wd = input[5];
        let base = 1u64 << (10 + u32::from(wd >> 3));
        base + (base / 8) * u64::from(wd & 7)
    };
    // A one-byte content size (flag 0) is under 256 bytes: never rewritten, so a rewritten
    // single-segment header always keeps a content size field of the same length.
    if window <= ZSTD_PREFIX_WINDOW {
        return Cow::Borrowed(input);
    }
    let descriptor = ((ZSTD_PREFIX_WINDOW.trailing_zeros() - 10) << 3) as u8;
    let mut out = Vec::with_capacity(input.len() + 1);
    out.extend_from_slice(&input[..4]);
    out.push(fhd & !0x20);
    out.push(descriptor);
    out.extend_from_slice(&input[if single_segment { 5 } else { 6 }..]);
    Cow::Owned(out)
}

/// How a bundle is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BundleFormat {
    Plain,
    Compressed { version: u16, method: Method },
}

/// One bundle of a fat binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleInfo {
    /// Where it starts, in the file.
    pub offset: u64,
    pub format: BundleFormat,
    /// The GPU targets it has code for, in table order.
    pub targets: Vec<TargetId>,
    /// Whether it has a host entry.
    pub host: bool,
    /// Entries that are neither host nor a known GPU target.
    pub other: usize,
}

/// What a fat-binary section holds, as far as it could be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FatbinScan {
    pub bundles: Vec<BundleInfo>,
    /// Why reading stopped early, if it did (the bundles before it are kept).
    pub problem: Option<Error>,
}

/// How far past a bundle's end the next one is looked for (bundles are padded to their
/// alignment, 4096 in HIP's `.hip_fatbin`).
const NEXT_WINDOW: usize = 64 << 10;
/// The first read at a bundle (enough for a table of about 80 entries).
const FIRST_READ: usize = 4096;
/// The most compressed input given to inflate one entry table.
const MAX_COMPRESSED_INPUT: usize = 16 << 20;

/// Reads every bundle in `[start, start + len)`: each one's entry table, following the
/// bundles one after another. The section may hold many (one per HIP source file).
pub fn scan_fatbin<R: ReadAt + ?Sized>(r: &R, start: u64, len: u64) -> FatbinScan {
    let mut scan = FatbinScan::default();
    let Some(end) = start.checked_add(len) else {
        scan.problem = Some(corrupt("section extends past the end of the address space"));
        return scan;
    };
    let mut pos = start;
    let mut inflaters = Inflaters::default();
    loop {
        if end - pos < 4 {
            break;
        }
        match read_bundle(r, pos, end, &mut inflaters) {
            Ok((info, next)) => {
                scan.bundles.push(info);
                match next {
                    Next::At(n) => match find_magic(r, n, end, NEXT_WINDOW) {
                        Ok(Some(p)) => pos = p,
                        Ok(None) => {
                            // Padding is zeros; anything else is a bundle rmcp cannot read.
                            if let Some(at) = first_nonzero(r, n, end, NEXT_WINDOW) {
                                scan.problem = Some(corrupt(format!(
                                    "no offload bundle at section offset {:#x}, where the \
                                     bytes after the previous one resume",
                                    at - start
                                )));
                            }
                            break;
                        }
                        Err(e) => {
                            scan.problem = Some(e);
                            break;
                        }
                    },
                    Next::Search(from) => match find_compressed(r, from, end) {
                        Ok(Some(p)) => pos = p,
                        Ok(None) => break,
                        Err(e) => {
                            scan.problem = Some(e);
                            break;
                        }
                    },
                }
            }
            Err(e) => {
                let at = pos - start;
                scan.problem = Some(match e {
                    Error::Corrupt(s) => corrupt(format!("{s} (bundle at section offset {at:#x})")),
                    io => io,
                });
                break;
            }
        }
    }
    scan
}

/// Where to look for the next bundle.
enum Next {
    /// From here, within a short window.
    At(u64),
    /// The next compressed bundle anywhere from here on: a version 1 compressed bundle
    /// does not say its size, so clang-offload-bundler looks for the next `CCOB` (only:
    /// the compressed stream may hold the plain magic as literal bytes).
    Search(u64),
}

fn read_bundle<R: ReadAt + ?Sized>(
    r: &R,
    pos: u64,
    end: u64,
    inflaters: &mut Inflaters,
) -> Result<(BundleInfo, Next), Error> {
    let avail = end - pos;
    let mut want = FIRST_READ.min(avail as usize);
    let head = read_range(r, pos, want)?;
    if head.starts_with(BUNDLE_MAGIC) {
        let mut buf = head;
        let entries = loop {
            match parse_bundle_header(&buf)? {
                Partial::Complete(e) => break e,
                Partial::NeedBytes(n) => {
                    if n as u64 > avail || n <= buf.len() {
                        return Err(corrupt("offload bundle entry table truncated"));
                    }
                    want = n.max(want * 2).min(avail as usize).min(MAX_TABLE);
                    buf = read_range(r, pos, want)?;
                }
            }
        };
        let mut bundle_len = 0u64;
        for e in &entries {
            let stop = e.offset + e.size;
            if stop > avail {
                return Err(corrupt(format!(
                    "offload bundle entry {} ends {} bytes past the section",
                    e.id,
                    stop - avail
                )));
            }
            bundle_len = bundle_len.max(stop);
        }
        let info = summarise(pos, BundleFormat::Plain, &entries);
        let next = pos + bundle_len.max(BUNDLE_MAGIC.len() as u64 + 8);
        return Ok((info, Next::At(next)));
    }
    if head.starts_with(COMPRESSED_MAGIC) {
        let h = match parse_compressed_header(&head)? {
            Partial::Complete(h) => h,
            Partial::NeedBytes(_) => return Err(corrupt("compressed bundle header truncated")),
        };
        let stream_end = match h.total_size {
            Some(t) if t > avail => {
                return Err(corrupt(format!(
                    "compressed bundle of {t} bytes ends past the section"
                )));
            }
            Some(t) => pos + t,
            None => end,
        };
        let stream_start = pos + h.header_len as u64;
        let stream_len = stream_end - stream_start;
        let entries = inflate_table(r, &h, stream_start, stream_len, inflaters)?;
        let format = BundleFormat::Compressed {
            version: h.version,
            method: h.method,
        };
        let info = summarise(pos, format, &entries);
        let next = match h.total_size {
            Some(t) => Next::At(pos + t),
            None => Next::Search(pos + 4),
        };
        return Ok((info, next));
    }
    Err(corrupt("no offload bundle magic"))
}

/// The entry table of a compressed bundle: inflate as little as it takes.
fn inflate_table<R: ReadAt + ?Sized>(
    r: &R,
    h: &CompressedHeader,
    stream_start: u64,
    stream_len: u64,
    inflaters: &mut Inflaters,
) -> Result<Vec<Entry>, Error> {
    let cap = stream_len.min(MAX_COMPRESSED_INPUT as u64) as usize;
    let mut in_len = (4usize << 10).min(cap);
    let mut want = FIRST_READ;
    let mut input = read_range(r, stream_start, in_len)?;
    loop {
        match inflaters.prefix(h.method, &input, want)? {
            Inflated::NeedInput => {
                if input.len() < in_len || in_len >= cap {
                    return Err(corrupt(format!(
                        "{} stream ends before the entry table",
                        h.method.as_str()
                    )));
                }
                in_len = (in_len * 4).min(cap);
                input = read_range(r, stream_start, in_len)?;
            }
            Inflated::Bytes(out) => match parse_bundle_header(&out)? {
                Partial::Complete(e) => return Ok(e),
                Partial::NeedBytes(n) => {
                    if out.len() < want || n <= want {
                        return Err(corrupt("compressed bundle's entry table truncated"));
                    }
                    want = n;
                }
            },
        }
    }
}

fn summarise(offset: u64, format: BundleFormat, entries: &[Entry]) -> BundleInfo {
    let mut info = BundleInfo {
        offset,
        format,
        targets: Vec::new(),
        host: false,
        other: 0,
    };
    for e in entries {
        match entry_kind(&e.id) {
            EntryKind::Host => info.host = true,
            EntryKind::Device(t) => {
                if !info.targets.contains(&t) {
                    info.targets.push(t)
                }
            }
            EntryKind::Other => info.other += 1,
        }
    }
    info
}

/// The first non-zero byte in the `window` bytes from `from` (never past `end`).
fn first_nonzero<R: ReadAt + ?Sized>(r: &R, from: u64, end: u64, window: usize) -> Option<u64> {
    let n = (end.saturating_sub(from)).min(window as u64) as usize;
    let buf = read_range(r, from, n).ok()?;
    buf.iter().position(|&b| b != 0).map(|i| from + i as u64)
}

/// The next compressed-bundle magic in `[from, end)`.
fn find_compressed<R: ReadAt + ?Sized>(r: &R, from: u64, end: u64) -> Result<Option<u64>, Error> {
    find(r, from, end, usize::MAX, &[COMPRESSED_MAGIC])
}

/// The first bundle magic (plain or compressed) in `[from, end)`, looking at most `window`
/// bytes past `from`.
fn find_magic<R: ReadAt + ?Sized>(
    r: &R,
    from: u64,
    end: u64,
    window: usize,
) -> Result<Option<u64>, Error> {
    find(r, from, end, window, &[COMPRESSED_MAGIC, BUNDLE_MAGIC])
}

fn find<R: ReadAt + ?Sized>(
    r: &R,
    from: u64,
    end: u64,
    window: usize,
    magics: &[&[u8]],
) -> Result<Option<u64>, Error> {
    // Bundles are aligned to 4096 bytes: the next one is almost always in the first page.
    let mut chunk: usize = 4096;
    let overlap = BUNDLE_MAGIC.len() - 1;
    let limit = end.min(from.saturating_add(window as u64));
    let mut at = from;
    while at < limit {
        let n = ((limit - at) as usize).min(chunk) + overlap;
        let buf = read_range(r, at, n.min((end - at) as usize))?;
        if buf.len() < 4 {
            return Ok(None);
        }
        let scan_len = buf.len().min((limit - at) as usize);
        for i in 0..scan_len {
            if !magics.iter().any(|m| m[0] == buf[i]) {
                continue;
            }
            if magics.iter().any(|m| buf[i..].starts_with(m)) {
                return Ok(Some(at + i as u64));
            }
        }
        at += chunk as u64;
        chunk = 1 << 20;
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// Files named after their target
// ---------------------------------------------------------------------------------------

/// The target of a Tensile file (rocBLAS, hipBLASLt): `*_gfx1030.co`,
/// `*_fallback_gfx90a-xnack+.hsaco`, `TensileLibrary_lazy_gfx1010.dat`,
/// `Kernels.so-000-gfx1030.hsaco`. None for other names (`TensileLibrary.dat`, which
/// merges every target, included).
pub fn tensile_target(file_name: &str) -> Option<TargetId> {
    let stem = [".co", ".hsaco", ".dat"]
        .iter()
        .find_map(|ext| file_name.strip_suffix(ext))?;
    let mut best = None;
    for (i, _) in stem.match_indices("gfx") {
        let before = stem.as_bytes()[..i].last();
        if i == 0 || matches!(before, Some(b'_' | b'-' | b'.')) {
            best = Some(i);
        }
    }
    TargetId::parse_tensile(&stem[best?..])
}

/// The ISA of an MIOpen kernel database: `gfx1030_36.kdb`, `gfx90a6e.kdb`,
/// `gfx906_60.kdb` (the ISA, then the compute-unit count).
pub fn kdb_target(file_name: &str) -> Option<Gfx> {
    let stem = file_name.strip_suffix(".kdb")?;
    let digits = stem.strip_prefix("gfx")?.as_bytes();
    // gfx10xx, gfx11xx, gfx12xx have four characters after "gfx"; gfx9xx and older three.
    let n = if digits.len() >= 4 && digits[0] == b'1' && digits[1].is_ascii_digit() {
        4
    } else {
        3
    };
    if digits.len() < n {
        return None;
    }
    Gfx::parse(stem.get(..3 + n)?)
}

// ---------------------------------------------------------------------------------------
// Verdicts
// ---------------------------------------------------------------------------------------

/// Code for one library and one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Code that loads on the GPU's real ISA (its own or a generic target) in every fat
    /// binary that has GPU code.
    Present,
    /// Only through the override: no code for the real ISA, but HSA_OVERRIDE_GFX_VERSION
    /// makes the runtime load code for another ISA, which the library has.
    Override,
    /// The override makes the runtime look for an ISA the library has no code for, though
    /// it has code for the real one.
    OverrideMisses,
    /// Some fat binaries have code for the ISA the runtime looks for, others do not.
    Partial,
    /// No code for the ISA the runtime looks for.
    Missing,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Present => "present",
            Verdict::Override => "override",
            Verdict::OverrideMisses => "override-misses",
            Verdict::Partial => "partial",
            Verdict::Missing => "missing",
        }
    }
}

/// How many of `sets` (one target list per fat binary with GPU code) have code for `dev`.
pub fn covered(sets: &[&[TargetId]], dev: &Device) -> usize {
    sets.iter()
        .filter(|s| s.iter().any(|t| t.runs_on(dev)))
        .count()
}

/// The verdict for a library whose fat binaries carry `sets`, on a GPU of ISA `real`,
/// with `override_gfx` the ISA HSA_OVERRIDE_GFX_VERSION gives it (if any). With the
/// override the runtime looks only for code for the override's ISA.
pub fn verdict(sets: &[&[TargetId]], real: Gfx, override_gfx: Option<Gfx>) -> Verdict {
    let sets: Vec<&[TargetId]> = sets.iter().copied().filter(|s| !s.is_empty()).collect();
    let total = sets.len();
    let real_dev = Device::from_gfx(real);
    let for_real = covered(&sets, &real_dev);
    match override_gfx.filter(|o| *o != real) {
        Some(o) => {
            let for_override = covered(&sets, &Device::from_gfx(o));
            if total > 0 && for_override == total {
                Verdict::Override
            } else if for_override > 0 {
                Verdict::Partial
            } else if for_real > 0 {
                Verdict::OverrideMisses
            } else {
                Verdict::Missing
            }
        }
        None => {
            if total > 0 && for_real == total {
                Verdict::Present
            } else if for_real > 0 {
                Verdict::Partial
            } else {
                Verdict::Missing
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        TargetId::parse(s).unwrap_or_else(|| panic!("{s}"))
    }

    fn dev(name: &str) -> Device {
        Device::from_gfx(Gfx::parse(name).unwrap())
    }

    #[test]
    fn target_ids_parse_and_print_canonically() {
        let x = t("gfx90a:xnack-:sramecc+");
        assert_eq!(x.processor, "gfx90a");
        assert_eq!((x.sramecc, x.xnack), (Feature::On, Feature::Off));
        assert_eq!(x.to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(t("gfx1030").to_string(), "gfx1030");
        assert_eq!(t("gfx10-3-generic").gfx(), None);
        assert!(t("gfx10-3-generic").generic().is_some());
        for bad in [
            "",
            "gfx",
            "sm_80",
            "gfx1030:",
            "gfx1030:xnack",
            "gfx90a:xnack+:xnack-",
            "gfx1030:wavefrontsize64+",
            "gfxzzzz",
            "GFX1030",
        ] {
            assert_eq!(TargetId::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            TargetId::parse_tensile("gfx90a-xnack+")
                .unwrap()
                .to_string(),
            "gfx90a:xnack+"
        );
        assert_eq!(
            TargetId::parse_tensile("gfx10-1-generic")
                .unwrap()
                .processor,
            "gfx10-1-generic"
        );
    }

    #[test]
    fn entry_ids() {
        assert_eq!(
            entry_kind("host-x86_64-unknown-linux-gnu-"),
            EntryKind::Host
        );
        assert_eq!(entry_kind("host-x86_64-unknown-linux"), EntryKind::Host);
        assert_eq!(
            entry_kind("hipv4-amdgcn-amd-amdhsa--gfx1030"),
            EntryKind::Device(t("gfx1030"))
        );
        assert_eq!(
            entry_kind("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic"),
            EntryKind::Device(t("gfx10-3-generic"))
        );
        assert_eq!(
            entry_kind("hip-amdgcn-amd-amdhsa--gfx906:xnack-"),
            EntryKind::Device(t("gfx906:xnack-"))
        );
        assert_eq!(
            entry_kind("hipv4-nvptx64-nvidia-cuda--sm_80"),
            EntryKind::Other
        );
        assert_eq!(entry_kind("hipv4-amdgcn-amd-amdhsa--"), EntryKind::Other);
    }

    #[test]
    fn compatibility_follows_clang_and_the_generic_table() {
        // Exact processor; features any / matching / not matching.
        assert!(t("gfx1010").runs_on(&dev("gfx1010")));
        assert!(t("gfx1010:xnack-").runs_on(&dev("gfx1010")));
        assert!(!t("gfx1010:xnack+").runs_on(&dev("gfx1010")));
        assert!(!t("gfx1030").runs_on(&dev("gfx1010")));
        assert!(!t("gfx1030").runs_on(&dev("gfx1031")));
        // RDNA2 has no xnack: code that names it does not load.
        assert!(!t("gfx1030:xnack-").runs_on(&dev("gfx1030")));
        // GFX9 settings are unknown here: either explicit value is taken to fit.
        assert!(t("gfx90a:xnack+").runs_on(&dev("gfx90a")));
        assert!(t("gfx90a:sramecc-:xnack-").runs_on(&dev("gfx90a")));
        assert!(!t("gfx900:sramecc+").runs_on(&dev("gfx900")));
        // Generic targets, per AMDGPUUsage.
        for g in ["gfx1010", "gfx1011", "gfx1012", "gfx1013"] {
            assert!(t("gfx10-1-generic").runs_on(&dev(g)), "{g}");
            assert!(!t("gfx10-3-generic").runs_on(&dev(g)), "{g}");
        }
        for g in [
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
        ] {
            assert!(t("gfx10-3-generic").runs_on(&dev(g)), "{g}");
            assert!(!t("gfx10-1-generic").runs_on(&dev(g)), "{g}");
        }
        for g in [
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ] {
            assert!(t("gfx11-generic").runs_on(&dev(g)), "{g}");
        }
        assert!(!t("gfx11-generic").runs_on(&dev("gfx1200")));
        assert!(t("gfx12-generic").runs_on(&dev("gfx1201")));
        assert!(t("gfx9-generic").runs_on(&dev("gfx90c")));
        assert!(!t("gfx9-generic").runs_on(&dev("gfx90a")));
        assert!(t("gfx9-4-generic").runs_on(&dev("gfx942")));
        assert!(!t("gfx10-1-generic:xnack+").runs_on(&dev("gfx1010")));
        // A generic target doctor does not know runs on nothing it can name.
        assert!(!t("gfx13-generic").runs_on(&dev("gfx1100")));
    }

    #[test]
    fn verdicts_with_and_without_the_override() {
        let g = |s: &str| Gfx::parse(s).unwrap();
        let only_1030 = [t("gfx1030"), t("gfx900")];
        let sets: [&[TargetId]; 1] = [&only_1030];
        assert_eq!(verdict(&sets, g("gfx1010"), None), Verdict::Missing);
        assert_eq!(
            verdict(&sets, g("gfx1010"), Some(g("gfx1030"))),
            Verdict::Override
        );
        assert_eq!(verdict(&sets, g("gfx1030"), None), Verdict::Present);
        assert_eq!(verdict(&sets, g("gfx1031"), None), Verdict::Missing);
        assert_eq!(
            verdict(&sets, g("gfx1031"), Some(g("gfx1030"))),
            Verdict::Override
        );
        // The override to the real ISA is no override.
        assert_eq!(
            verdict(&sets, g("gfx1030"), Some(g("gfx1030"))),
            Verdict::Present
        );
        let with_1010 = [t("gfx1010"), t("gfx1030")];
        let only_1010 = [t("gfx1010")];
        assert_eq!(
            verdict(&[&only_1010], g("gfx1010"), Some(g("gfx1030"))),
            Verdict::OverrideMisses
        );
        assert_eq!(verdict(&[&with_1010], g("gfx1010"), None), Verdict::Present);
        let generic = [t("gfx10-1-generic")];
        assert_eq!(verdict(&[&generic], g("gfx1012"), None), Verdict::Present);
        // Two fat binaries, one without gfx1010 code.
        assert_eq!(
            verdict(&[&with_1010, &only_1030], g("gfx1010"), None),
            Verdict::Partial
        );
        // Fat binaries without GPU code do not count; none at all is missing.
        assert_eq!(
            verdict(&[&with_1010, &[]], g("gfx1010"), None),
            Verdict::Present
        );
        assert_eq!(verdict(&[], g("gfx1010"), None), Verdict::Missing);
    }

    #[test]
    fn tensile_and_kdb_names() {
        let name = |s: &str| tensile_target(s).map(|t| t.to_string());
        assert_eq!(
            name("TensileLibrary_Type_HH_Contraction_l_Alik_Bjlk_Cijk_Dijk_gfx1030.co").as_deref(),
            Some("gfx1030")
        );
        assert_eq!(
            name("TensileLibrary_Type_ZZ_Contraction_l_AlikC_Bjlk_Cijk_Dijk_fallback_gfx90a-xnack+.hsaco")
                .as_deref(),
            Some("gfx90a:xnack+")
        );
        assert_eq!(
            name("TensileLibrary_lazy_gfx1010.dat").as_deref(),
            Some("gfx1010")
        );
        assert_eq!(
            name("Kernels.so-000-gfx1030.hsaco").as_deref(),
            Some("gfx1030")
        );
        assert_eq!(name("extop_gfx942.co").as_deref(), Some("gfx942"));
        assert_eq!(name("TensileLibrary.dat"), None);
        assert_eq!(name("TensileManifest.txt"), None);
        assert_eq!(name("gfx1030.txt"), None);
        let kdb = |s: &str| kdb_target(s).map(|g| g.to_string());
        assert_eq!(kdb("gfx1030_36.kdb").as_deref(), Some("gfx1030"));
        assert_eq!(kdb("gfx90a6e.kdb").as_deref(), Some("gfx90a"));
        assert_eq!(kdb("gfx906_60.kdb").as_deref(), Some("gfx906"));
        assert_eq!(kdb("gfx1100_48.kdb").as_deref(), Some("gfx1100"));
        assert_eq!(kdb("gfx1030_36.db"), None);
        assert_eq!(kdb("gfx.kdb"), None);
        // Found by the fuzzer: a multi-byte character where the ISA ends.
        assert_eq!(kdb("gfx9\u{fffd}0!6e.kdb"), None);
        assert_eq!(kdb("gfx10\u{e9}.kdb"), None);
    }

    use super::write;

    fn targets(scan: &FatbinScan) -> Vec<Vec<String>> {
        scan.bundles
            .iter()
            .map(|b| b.targets.iter().map(|t| t.to_string()).collect())
            .collect()
    }

    #[test]
    fn plain_bundles_one_after_another() {
        let sec = write::section(&[
            write::hip_bundle(&["gfx1030", "gfx900"]),
            write::hip_bundle(&["gfx90a:xnack-", "gfx90a:xnack+"]),
            write::hip_bundle(&[]),
        ]);
        let scan = scan_fatbin(sec.as_slice(), 0, sec.len() as u64);
        assert_eq!(scan.problem, None);
        assert_eq!(
            targets(&scan),
            vec![
                vec!["gfx1030".to_string(), "gfx900".to_string()],
                vec!["gfx90a:xnack-".to_string(), "gfx90a:xnack+".to_string()],
                vec![],
            ]
        );
        assert!(scan.bundles.iter().all(|b| b.host && b.other == 0));
        assert_eq!(scan.bundles[1].offset, 2 * write::ALIGN as u64);
        assert_eq!(scan.bundles[0].format, BundleFormat::Plain);
    }

    #[test]
    fn compressed_bundles_of_every_version_and_method() {
        for method in [Method::Zlib, Method::Zstd] {
            for version in [1u16, 2, 3] {
                let plain = write::hip_bundle(&["gfx1010", "gfx10-3-generic", "gfx1100"]);
                let sec = write::section(&[
                    write::compressed(version, method, &plain),
                    write::compressed(version, method, &write::hip_bundle(&["gfx1030"])),
                    write::compressed(version, method, &write::hip_bundle(&["gfx906"])),
                ]);
                let scan = scan_fatbin(sec.as_slice(), 0, sec.len() as u64);
                let what = format!("{method:?} v{version}");
                assert_eq!(scan.problem, None, "{what}");
                assert_eq!(
                    targets(&scan),
                    vec![
                        vec!["gfx1010", "gfx10-3-generic", "gfx1100"],
                        vec!["gfx1030"],
                        vec!["gfx906"],
                    ],
                    "{what}"
                );
                assert_eq!(
                    scan.bundles[0].format,
                    BundleFormat::Compressed { version, method },
                    "{what}"
                );
                if version > 1 {
                    // A plain bundle after compressed ones (versions 2 and 3 say their size).
                    let sec = write::section(&[
                        write::compressed(version, method, &plain),
                        write::hip_bundle(&["gfx906"]),
                    ]);
                    let scan = scan_fatbin(sec.as_slice(), 0, sec.len() as u64);
                    assert_eq!(scan.bundles.len(), 2, "{what}");
                    assert_eq!(scan.bundles[1].format, BundleFormat::Plain, "{what}");
                }
            }
        }
    }

    #[test]
    fn only_the_start_of_a_compressed_bundle_is_inflated() {
        // 64 MiB of code objects behind the table: the header comes out of the first block.
        let big = vec![0x5au8; 64 << 20];
        let plain = write::bundle(&[
            ("host-x86_64-unknown-linux-gnu-", &b""[..]),
            ("hipv4-amdgcn-amd-amdhsa--gfx1031", &big[..]),
        ]);
        for method in [Method::Zlib, Method::Zstd] {
            let c = write::compressed(3, method, &plain);
            let h = match parse_compressed_header(&c).unwrap() {
                Partial::Complete(h) => h,
                Partial::NeedBytes(_) => panic!(),
            };
            assert_eq!(h.uncompressed_size, plain.len() as u64);
            let out = decompress_prefix(method, &c[h.header_len..], 100).unwrap();
            assert_eq!(out, Inflated::Bytes(plain[..100].to_vec()), "{method:?}");
            let scan = scan_fatbin(c.as_slice(), 0, c.len() as u64);
            assert_eq!(targets(&scan), vec![vec!["gfx1031"]], "{method:?}");
        }
    }

    /// Incompressible bytes (a linear congruential generator's high bytes).
    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (x >> 56) as u8
            })
            .collect()
    }

    /// The zstd frame `c` with its header rewritten to declare `window` bytes, in the
    /// multi-segment form (a window descriptor, no content size), as zstd writes a frame
    /// compressed with long-distance matching and a window smaller than its content.
    fn with_window(c: &[u8], window_log: u8) -> Vec<u8> {
        let mut out = c[..4].to_vec();
        out.push(c[4] & 0x04); // the checksum flag; no content size, multi-segment
        out.push((window_log - 10) << 3);
        out.extend_from_slice(&c[frame_body(c)..]);
        out
    }

    /// The same as one segment of `content` bytes (an 8-byte content size, which is then
    /// the window), as zstd writes a frame whose content fits its window.
    fn single_segment(c: &[u8], content: u64) -> Vec<u8> {
        let mut out = c[..4].to_vec();
        out.push(0xe0 | (c[4] & 0x04));
        out.extend_from_slice(&content.to_le_bytes());
        out.extend_from_slice(&c[frame_body(c)..]);
        out
    }

    /// Where a zstd frame's first block starts.
    fn frame_body(c: &[u8]) -> usize {
        let fhd = c[4];
        let single = fhd & 0x20 != 0;
        assert_eq!(fhd & 3, 0, "no dictionary ID");
        let fcs_len = if single {
            [1, 2, 4, 8][usize::from(fhd >> 6)]
        } else {
            [0, 2, 4, 8][usize::from(fhd >> 6)]
        };
        if single { 5 + fcs_len } else { 6 + fcs_len }
    }

    /// Whether inflating gave exactly `want`'s bytes (a short answer, not the bytes, on
    /// failure).
    fn gave(out: &Inflated, want: &[u8]) -> Result<(), String> {
        match out {
            Inflated::Bytes(b) if b[..] == want[..] => Ok(()),
            Inflated::Bytes(b) => Err(format!("{} other bytes", b.len())),
            Inflated::NeedInput => Err("NeedInput".to_string()),
        }
    }

    #[test]
    fn zstd_prefix_does_not_need_the_whole_window() {
        // 4 MiB of noise behind a bundle magic, in one zstd frame.
        let mut plain = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
        plain.extend(noise(4 << 20));
        let c = write::compressed(3, Method::Zstd, &plain);
        let h = match parse_compressed_header(&c).unwrap() {
            Partial::Complete(h) => h,
            Partial::NeedBytes(_) => panic!(),
        };
        let stream = &c[h.header_len..];
        assert!(stream.len() > 4 << 20, "noise does not compress");
        let head = &plain[..4096];
        // The first 512 KiB of the stream hold the first 4 KiB and much more: enough.
        let out = decompress_prefix(Method::Zstd, &stream[..512 << 10], 4096).unwrap();
        assert_eq!(gave(&out, head), Ok(()));
        // Declared windows of 128 MiB (clang's long-distance matching on a big bundle; over
        // ruzstd's 100 MiB limit), 1 GiB and a 120 MiB single segment decode the same, from the same prefix; and so
        // does a second frame through one decoder (its reset path checks the window).
        for (what, big) in [
            ("window 2^27", with_window(stream, 27)),
            ("window 2^30", with_window(stream, 30)),
            ("one 120 MiB segment", single_segment(stream, 120 << 20)),
        ] {
            let out = decompress_prefix(Method::Zstd, &big[..512 << 10], 4096).unwrap();
            assert_eq!(gave(&out, head), Ok(()), "{what}");
            let mut inflaters = Inflaters::default();
            for _ in 0..2 {
                let out = inflaters
                    .prefix(Method::Zstd, &big[..512 << 10], 4096)
                    .unwrap();
                assert_eq!(gave(&out, head), Ok(()), "{what}, reused decoder");
            }
        }
        // Too little of the stream: more input, not an error.
        let out = decompress_prefix(Method::Zstd, &stream[..2 << 10], 4096).unwrap();
        assert_eq!(out, Inflated::NeedInput);
    }

    #[test]
    fn elf_section_lookup() {
        let sec = write::section(&[write::hip_bundle(&["gfx1030"])]);
        let elf = write::elf(&[(".text", &b"code"[..]), (FATBIN_SECTION, &sec[..])]);
        let s = find_section(elf.as_slice(), FATBIN_SECTION)
            .unwrap()
            .unwrap();
        assert_eq!(s.size, sec.len() as u64);
        assert_eq!(&elf[s.offset as usize..][..sec.len()], &sec[..]);
        assert_eq!(find_section(elf.as_slice(), ".nope").unwrap(), None);
        assert_eq!(
            find_section(&b"#!/bin/sh\n"[..], FATBIN_SECTION).unwrap(),
            None
        );
        assert_eq!(find_section(&b""[..], FATBIN_SECTION).unwrap(), None);
        assert!(find_section(&elf[..40], FATBIN_SECTION).is_err());
        let shoff = u64_at(&elf, 0x28).unwrap() as usize;
        assert!(find_section(&elf[..shoff + 70], FATBIN_SECTION).is_err());
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        let mut samples = vec![
            write::section(&[write::hip_bundle(&["gfx1030", "gfx906:xnack-"])]),
            write::compressed(2, Method::Zlib, &write::hip_bundle(&["gfx1030"])),
            write::compressed(3, Method::Zstd, &write::hip_bundle(&["gfx1030"])),
            write::compressed(1, Method::Zstd, &write::hip_bundle(&["gfx1030"])),
        ];
        let elf = write::elf(&[(FATBIN_SECTION, &samples[0][..])]);
        samples.push(elf);
        for s in &samples {
            // Every truncation, and one flipped byte at a time in the first 600 bytes.
            for cut in 0..s.len().min(4200) {
                let _ = scan_fatbin(&s[..cut], 0, cut as u64);
                let _ = find_section(&s[..cut], FATBIN_SECTION);
            }
            for i in 0..s.len().min(600) {
                let mut m = s.clone();
                m[i] ^= 0xa5;
                let _ = scan_fatbin(m.as_slice(), 0, m.len() as u64);
                let _ = find_section(m.as_slice(), FATBIN_SECTION);
            }
        }
        // A truncated bundle is reported, with what was read before it kept.
        let two = write::section(&[
            write::hip_bundle(&["gfx1030"]),
            write::hip_bundle(&["gfx1100"]),
        ]);
        let cut = &two[..2 * write::ALIGN + 60];
        let scan = scan_fatbin(cut, 0, cut.len() as u64);
        assert_eq!(targets(&scan), vec![vec!["gfx1030"]]);
        assert!(scan.problem.is_some());
        // Implausible counts and sizes.
        let mut huge = BUNDLE_MAGIC.to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(parse_bundle_header(&huge), Err(Error::Corrupt(_))));
        let scan = scan_fatbin(&b"garbage!"[..], 0, 8);
        assert!(scan.problem.is_some() && scan.bundles.is_empty());
        let mut bad_version = write::compressed(2, Method::Zlib, &two);
        bad_version[4] = 9;
        let scan = scan_fatbin(bad_version.as_slice(), 0, bad_version.len() as u64);
        assert!(scan.problem.unwrap().to_string().contains("version 9"));
    }
}
