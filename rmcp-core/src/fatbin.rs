//! The fat binaries a HIP program or library hands the runtime at start-up
//! (`__hipRegisterFatBinary(const void *data)`, from the constructor clang emits): the
//! wrapper `data` points to, the extent of the offload bundle it names, which entry each GPU
//! would load, and a bundle holding that entry only (what rmcp-shim's `fatbin` hands the
//! runtime in place of the whole bundle when the entry's gfx103x code has words to fix in
//! place under an override). Pure: reads go through a [`ReadAt`], every size is bounded by
//! the caller.

use crate::code_objects::{self as co, EntryKind, Partial, ReadAt};
use crate::gfx::Gfx;

/// `__CudaFatBinaryWrapper::magic` as clang writes it for HIP ("HIPF": `__hipFatMAGIC2`).
pub const WRAPPER_MAGIC: u32 = 0x4849_5046;
/// The only wrapper version the runtime accepts.
pub const WRAPPER_VERSION: u32 = 1;
/// `{u32 magic, u32 version, const void *binary, void *dummy}` on x86-64.
pub const WRAPPER_SIZE: usize = 24;
/// Where a bundle puts its first code object: clang's `-bundle-align` for HIP
/// (`code_objects::write::bundle`'s).
pub const ENTRY_ALIGN: usize = 4096;

/// A `__CudaFatBinaryWrapper` the runtime accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wrapper {
    pub binary: u64,
    pub dummy: u64,
}

impl Wrapper {
    /// The wrapper in `b`; None unless its magic and version are the ones the runtime takes.
    pub fn parse(b: &[u8; WRAPPER_SIZE]) -> Option<Wrapper> {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        (u32_at(0) == WRAPPER_MAGIC && u32_at(4) == WRAPPER_VERSION).then(|| Wrapper {
            binary: u64_at(8),
            dummy: u64_at(16),
        })
    }

    /// The wrapper as the runtime reads it, as three 8-byte words (so that a copy of it is
    /// aligned as the C struct is).
    pub fn words(&self) -> [u64; 3] {
        [
            u64::from(WRAPPER_MAGIC) | (u64::from(WRAPPER_VERSION) << 32),
            self.binary,
            self.dummy,
        ]
    }
}

/// How far the bundle a wrapper names reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extent {
    /// A plain bundle: its length (the end of its table or of its last entry, whichever is
    /// further) and its entries.
    Plain { len: u64, entries: Vec<co::Entry> },
    /// A compressed bundle (`CCOB`) of version 2 or 3, which says its length.
    Compressed { len: u64 },
    /// A compressed bundle of version 1, which does not say how long it is.
    CompressedUnsized,
    /// Longer than the caller's bound.
    TooBig(u64),
}

fn read_exact<R: ReadAt + ?Sized>(r: &R, at: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match r.read_at(at + done as u64, &mut v[done..]) {
            Ok(0) => return Err("the fat binary ends before its header does".into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(v)
}

/// The extent of the bundle at offset 0 of `r`, reading only its header and entry table;
/// none longer than `max` bytes.
pub fn extent<R: ReadAt + ?Sized>(r: &R, max: u64) -> Result<Extent, String> {
    let head = read_exact(r, 0, 4)?;
    if head == co::COMPRESSED_MAGIC {
        let mut want = 8;
        loop {
            let b = read_exact(r, 0, want)?;
            match co::parse_compressed_header(&b).map_err(|e| e.to_string())? {
                Partial::Complete(h) => {
                    return Ok(match h.total_size {
                        None => Extent::CompressedUnsized,
                        Some(len) if len > max => Extent::TooBig(len),
                        Some(len) => Extent::Compressed { len },
                    });
                }
                Partial::NeedBytes(n) if n > want => want = n,
                Partial::NeedBytes(_) => return Err("compressed bundle header truncated".into()),
            }
        }
    }
    // Grows the read as the table asks: small tables (one or a few entries) are read in
    // one step, without reading past them.
    let mut want = co::BUNDLE_MAGIC.len() + 8;
    loop {
        let b = read_exact(r, 0, want)?;
        match co::parse_bundle_header(&b).map_err(|e| e.to_string())? {
            Partial::Complete(entries) => {
                let table = want as u64;
                let len = entries
                    .iter()
                    .filter_map(|e| e.offset.checked_add(e.size))
                    .fold(table, u64::max);
                if len > max {
                    return Ok(Extent::TooBig(len));
                }
                return Ok(Extent::Plain { len, entries });
            }
            Partial::NeedBytes(n) if n > want => want = n,
            Partial::NeedBytes(_) => return Err("offload bundle entry table truncated".into()),
        }
    }
}

/// Which entry the GPUs would load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Every GPU that loads an entry loads this one.
    One(co::Entry),
    /// Two GPUs would load different entries.
    Several,
    /// No GPU loads any.
    None,
}

/// The entry each runtime ISA in `isas` loads (`pick::choose`), taken together.
pub fn common_pick(entries: &[co::Entry], isas: &[Gfx]) -> Pick {
    let mut one: Option<co::Entry> = None;
    for &isa in isas {
        let Some((e, _)) = co::pick::choose(entries, &co::Device::from_gfx(isa), isa) else {
            continue;
        };
        match &one {
            Some(o) if *o != e => return Pick::Several,
            Some(_) => {}
            None => one = Some(e),
        }
    }
    one.map_or(Pick::None, Pick::One)
}

/// The host entry's ID of a bundle's table, if it has one (clang writes one, of size 0).
pub fn host_id(entries: &[co::Entry]) -> Option<&str> {
    entries
        .iter()
        .find(|e| matches!(co::entry_kind(&e.id), EntryKind::Host))
        .map(|e| e.id.as_str())
}

/// A plain bundle holding one code object, `object` under `id`, after an empty host entry
/// `host` when given (as clang lays bundles out: the object at [`ENTRY_ALIGN`]).
pub fn single_entry_bundle(host: Option<&str>, id: &str, object: &[u8]) -> Vec<u8> {
    let entries: Vec<(&str, &[u8])> = host
        .map(|h| (h, &b""[..]))
        .into_iter()
        .chain([(id, object)])
        .collect();
    co::write::bundle(&entries)
}

/// What a registered fat binary gives the GPUs of a machine ([`entry_to_load`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Loaded {
    /// The entry every GPU that loads one loads: its code object, its target, its whole
    /// ID, and the bundle's host entry ID (a plain bundle's, when it has one).
    Entry {
        object: Vec<u8>,
        target: String,
        id: String,
        host: Option<String>,
    },
    /// No GPU loads any entry (or it is a bare code object, which is not a bundle).
    Nothing,
    /// GPUs would load different entries (a compressed bundle: GPUs of more than one
    /// runtime ISA, whose entries are known only once its table is inflated).
    Several,
    /// A compressed bundle of version 1, which does not say its length.
    CompressedUnsized,
    /// Over the bound on the entry's size (or on the compressed bundle's).
    TooBig(u64),
    Bad(String),
}

/// The entry of the bundle at offset 0 of `r` that the runtime loads on GPUs of the
/// runtime ISAs `isas` (`isa` among them: the one to read it for), as `pick` reads it: only
/// the table and that entry of a plain bundle, a compressed one inflated up to the entry's
/// end; no entry larger than `max_object`.
pub fn entry_to_load<R: ReadAt + ?Sized>(r: &R, isas: &[Gfx], isa: Gfx, max_object: u64) -> Loaded {
    let (len, host) = match extent(r, u64::MAX) {
        Ok(Extent::Plain { len, entries }) => match common_pick(&entries, isas) {
            Pick::One(_) => (len, host_id(&entries).map(str::to_string)),
            Pick::Several => return Loaded::Several,
            Pick::None => return Loaded::Nothing,
        },
        Ok(Extent::Compressed { .. }) if isas.len() > 1 => return Loaded::Several,
        Ok(Extent::Compressed { len }) => (len, None),
        Ok(Extent::CompressedUnsized) => return Loaded::CompressedUnsized,
        Ok(Extent::TooBig(n)) => return Loaded::TooBig(n),
        Err(e) => return Loaded::Bad(e),
    };
    match co::pick::read_object(r, 0, len, &co::Device::from_gfx(isa), isa, max_object) {
        co::pick::Got::Object {
            bytes, target, id, ..
        } if !id.is_empty() => Loaded::Entry {
            object: bytes,
            target,
            id,
            host,
        },
        co::pick::Got::Object { .. } | co::pick::Got::Nothing => Loaded::Nothing,
        co::pick::Got::TooBig(n) => Loaded::TooBig(n),
        co::pick::Got::Bad(e) => Loaded::Bad(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: u64, size: u64, id: &str) -> co::Entry {
        co::Entry {
            offset,
            size,
            id: id.to_string(),
        }
    }

    #[test]
    fn a_wrapper_is_read_only_with_the_runtimes_magic_and_version() {
        let w = Wrapper {
            binary: 0x1234_5678_9abc,
            dummy: 7,
        };
        let mut b = [0u8; WRAPPER_SIZE];
        for (i, word) in w.words().iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        assert_eq!(&b[..4], &0x4849_5046u32.to_le_bytes());
        assert_eq!(Wrapper::parse(&b), Some(w));
        let mut other = b;
        other[4] = 2;
        assert_eq!(Wrapper::parse(&other), None);
        let mut cuda = b;
        cuda[0] ^= 1;
        assert_eq!(Wrapper::parse(&cuda), None);
    }

    #[test]
    fn a_single_entry_bundle_reads_back_as_that_entry() {
        let object = b"\x7fELF and the rest of a code object".to_vec();
        let id = "hipv4-amdgcn-amd-amdhsa--gfx1030";
        let host = "host-x86_64-unknown-linux";
        let b = single_entry_bundle(Some(host), id, &object);
        assert_eq!(b.len(), ENTRY_ALIGN + object.len());
        let Ok(Extent::Plain { len, entries }) = extent(b.as_slice(), 1 << 20) else {
            panic!("a plain bundle");
        };
        assert_eq!(len, b.len() as u64);
        assert_eq!(
            entries,
            [entry(4096, 0, host), entry(4096, object.len() as u64, id)]
        );
        assert_eq!(host_id(&entries), Some(host));
        assert_eq!(&b[4096..], object.as_slice());
        // Without a host entry: one entry.
        let b = single_entry_bundle(None, id, &object);
        let Ok(Extent::Plain { entries, .. }) = extent(b.as_slice(), 1 << 20) else {
            panic!("a plain bundle");
        };
        assert_eq!(entries, [entry(4096, object.len() as u64, id)]);
        // Over the bound; not a bundle.
        assert_eq!(
            extent(b.as_slice(), 100),
            Ok(Extent::TooBig(b.len() as u64))
        );
        assert!(extent(&b"\x7fELF"[..], 100).is_err());
        assert!(extent(&co::BUNDLE_MAGIC[..10], 100).is_err());
    }

    #[test]
    fn a_compressed_bundle_says_its_size_from_version_2() {
        let mut v2 = b"CCOB".to_vec();
        v2.extend_from_slice(&2u16.to_le_bytes());
        v2.extend_from_slice(&1u16.to_le_bytes());
        v2.extend_from_slice(&5000u32.to_le_bytes());
        v2.extend_from_slice(&9000u32.to_le_bytes());
        v2.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(
            extent(v2.as_slice(), 1 << 20),
            Ok(Extent::Compressed { len: 5000 })
        );
        assert_eq!(extent(v2.as_slice(), 4000), Ok(Extent::TooBig(5000)));
        let mut v1 = b"CCOB".to_vec();
        v1.extend_from_slice(&1u16.to_le_bytes());
        v1.extend_from_slice(&0u16.to_le_bytes());
        v1.extend_from_slice(&9000u32.to_le_bytes());
        v1.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(
            extent(v1.as_slice(), 1 << 20),
            Ok(Extent::CompressedUnsized)
        );
    }

    #[test]
    fn gpus_that_pick_different_entries_are_several() {
        let g = |s: &str| Gfx::parse(s).unwrap();
        let entries = [
            entry(4096, 0, "host-x86_64-unknown-linux"),
            entry(4096, 100, "hipv4-amdgcn-amd-amdhsa--gfx1030"),
            entry(8192, 100, "hipv4-amdgcn-amd-amdhsa--gfx1010"),
        ];
        let e1030 = entries[1].clone();
        // An RX 5700 XT under HSA_OVERRIDE_GFX_VERSION=10.3.0 and an RX 6800 XT: both run
        // gfx1030 code.
        assert_eq!(
            common_pick(&entries, &[g("gfx1030"), g("gfx1030")]),
            Pick::One(e1030.clone())
        );
        // The same without the override on the RX 5700 XT: each its own entry.
        assert_eq!(
            common_pick(&entries, &[g("gfx1010"), g("gfx1030")]),
            Pick::Several
        );
        // A GPU no entry is for loads nothing: the others decide.
        assert_eq!(
            common_pick(&entries, &[g("gfx1100"), g("gfx1030")]),
            Pick::One(e1030)
        );
        assert_eq!(common_pick(&entries, &[g("gfx1100")]), Pick::None);
    }

    #[test]
    fn the_entry_to_load_from_plain_and_compressed_bundles() {
        use crate::code_objects::{Method, write};
        let g = |s: &str| Gfx::parse(s).unwrap();
        let host = "host-x86_64-unknown-linux-gnu-";
        let e1030 = b"\x7fELF the gfx1030 object".to_vec();
        let e1100 = b"\x7fELF the gfx1100 object".to_vec();
        let plain = write::bundle(&[
            (host, &b""[..]),
            ("hipv4-amdgcn-amd-amdhsa--gfx1030", &e1030),
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", &e1100),
        ]);
        let want = Loaded::Entry {
            object: e1030.clone(),
            target: "gfx1030".into(),
            id: "hipv4-amdgcn-amd-amdhsa--gfx1030".into(),
            host: Some(host.into()),
        };
        let isa = g("gfx1030");
        assert_eq!(entry_to_load(plain.as_slice(), &[isa], isa, 1 << 20), want);
        assert_eq!(
            entry_to_load(plain.as_slice(), &[isa, g("gfx1100")], isa, 1 << 20),
            Loaded::Several
        );
        assert_eq!(
            entry_to_load(plain.as_slice(), &[isa], isa, 4),
            Loaded::TooBig(e1030.len() as u64)
        );
        assert_eq!(
            entry_to_load(plain.as_slice(), &[g("gfx906")], g("gfx906"), 1 << 20),
            Loaded::Nothing
        );
        // Compressed (versions 2 and 3 say their size): the same entry, no host entry kept.
        for (version, method) in [(2, Method::Zlib), (3, Method::Zstd)] {
            let c = write::compressed(version, method, &plain);
            let Loaded::Entry {
                object, id, host, ..
            } = entry_to_load(c.as_slice(), &[isa], isa, 1 << 20)
            else {
                panic!("version {version}: an entry");
            };
            assert_eq!((object, host), (e1030.clone(), None), "version {version}");
            assert_eq!(id, "hipv4-amdgcn-amd-amdhsa--gfx1030");
            assert_eq!(
                entry_to_load(c.as_slice(), &[isa, g("gfx1100")], isa, 1 << 20),
                Loaded::Several
            );
        }
        let v1 = write::compressed(1, Method::Zlib, &plain);
        assert_eq!(
            entry_to_load(v1.as_slice(), &[isa], isa, 1 << 20),
            Loaded::CompressedUnsized
        );
        assert!(matches!(
            entry_to_load(&b"\x7fELF"[..], &[isa], isa, 1 << 20),
            Loaded::Bad(_)
        ));
        // The one-entry bundle made of it is read back as the same entry.
        let one = single_entry_bundle(Some(host), "hipv4-amdgcn-amd-amdhsa--gfx1030", &e1030);
        assert_eq!(entry_to_load(one.as_slice(), &[isa], isa, 1 << 20), want);
    }
}
