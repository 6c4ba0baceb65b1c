//! What a loaded object imports and what the loader bound each import to, read from the
//! object's own dynamic section in memory: its `JUMP_SLOT` and `GLOB_DAT` relocations
//! (`DT_JMPREL`, `DT_RELA`) against undefined symbols (`DT_SYMTAB`, `DT_STRTAB`), and the GOT
//! slot each one fills. Pure parsing over [`Memory`], so the tables below can test it on a
//! made-up image; `locate` hands it the live process, bounded to an object's own segments.
//!
//! x86-64 ELF64 only (`Elf64_Dyn`, `Elf64_Rela`, `Elf64_Sym`), as is the rest of the shim.
//! glibc writes relocated addresses into a writable dynamic section and leaves a read-only
//! one as the file has it; [`Dynamic::read`] accepts both (an address inside the object is
//! taken as is, anything else as an offset from the load base).

/// Read access to an address space.
pub trait Memory {
    /// The 8 bytes at `addr` (8-aligned in every use here), if readable.
    fn u64_at(&self, addr: usize) -> Option<u64>;
    /// The byte at `addr`, if readable.
    fn u8_at(&self, addr: usize) -> Option<u8>;
}

const DT_NULL: u64 = 0;
const DT_PLTRELSZ: u64 = 2;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_RELA: u64 = 7;
const DT_RELASZ: u64 = 8;
const DT_RELAENT: u64 = 9;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const DT_PLTREL: u64 = 20;
const DT_JMPREL: u64 = 23;

const R_X86_64_GLOB_DAT: u64 = 6;
const R_X86_64_JUMP_SLOT: u64 = 7;

const RELA_SIZE: usize = 24;
const SYM_SIZE: usize = 24;
/// Dynamic entries read at most (a real object has a few dozen).
const MAX_DYNAMIC: usize = 4096;
/// Relocations read at most per table (a large framework has tens of thousands).
const MAX_RELOCATIONS: usize = 1 << 21;
/// Longest symbol name read; longer names are no HIP function's.
pub const MAX_NAME: usize = 64;

/// The parts of an object's dynamic section the import reader needs, as addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    symtab: usize,
    strtab: usize,
    strsz: usize,
    /// (address, size in bytes) of `DT_JMPREL` and of `DT_RELA`.
    tables: [(usize, usize); 2],
}

/// `addr` as an address in the object: itself if it falls inside one of `segments`, else an
/// offset from `base`.
fn absolute(addr: u64, base: usize, segments: &[(usize, usize)]) -> usize {
    let a = addr as usize;
    if segments.iter().any(|&(s, e)| a >= s && a < e) {
        a
    } else {
        base.wrapping_add(a)
    }
}

impl Dynamic {
    /// Reads the dynamic section at `dynamic` of the object loaded at `base`, whose mapped
    /// segments are `segments` (start, end). None without a symbol or string table.
    pub fn read(
        mem: &impl Memory,
        base: usize,
        dynamic: usize,
        segments: &[(usize, usize)],
    ) -> Option<Dynamic> {
        let mut d = Dynamic::default();
        let (mut jmprel, mut pltrelsz, mut rela, mut relasz) = (0, 0, 0, 0);
        let mut pltrel_is_rela = true;
        let mut entry_sizes_ok = true;
        for i in 0..MAX_DYNAMIC {
            let at = dynamic.checked_add(i * 16)?;
            let tag = mem.u64_at(at)?;
            let val = mem.u64_at(at + 8)?;
            let abs = || absolute(val, base, segments);
            match tag {
                DT_NULL => break,
                DT_SYMTAB => d.symtab = abs(),
                DT_STRTAB => d.strtab = abs(),
                DT_STRSZ => d.strsz = val as usize,
                DT_JMPREL => jmprel = abs(),
                DT_PLTRELSZ => pltrelsz = val as usize,
                DT_RELA => rela = abs(),
                DT_RELASZ => relasz = val as usize,
                DT_PLTREL => pltrel_is_rela = val == DT_RELA,
                DT_RELAENT => entry_sizes_ok &= val as usize == RELA_SIZE,
                DT_SYMENT => entry_sizes_ok &= val as usize == SYM_SIZE,
                _ => {}
            }
        }
        if d.symtab == 0 || d.strtab == 0 || !entry_sizes_ok {
            return None;
        }
        if pltrel_is_rela && jmprel != 0 {
            d.tables[0] = (jmprel, pltrelsz);
        }
        if rela != 0 {
            d.tables[1] = (rela, relasz);
        }
        Some(d)
    }

    /// Calls `f(name, slot)` for each `JUMP_SLOT` or `GLOB_DAT` relocation against an
    /// undefined symbol (an import): `slot` is the address of the GOT entry the loader
    /// fills. Names longer than [`MAX_NAME`] are skipped.
    pub fn each_import(&self, mem: &impl Memory, base: usize, mut f: impl FnMut(&[u8], usize)) {
        let mut name = [0u8; MAX_NAME];
        for &(table, size) in &self.tables {
            if table == 0 {
                continue;
            }
            for i in 0..(size / RELA_SIZE).min(MAX_RELOCATIONS) {
                let at = table + i * RELA_SIZE;
                let (Some(offset), Some(info)) = (mem.u64_at(at), mem.u64_at(at + 8)) else {
                    return;
                };
                let kind = info & 0xffff_ffff;
                if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT || info >> 32 == 0 {
                    continue;
                }
                let sym = self.symtab + (info >> 32) as usize * SYM_SIZE;
                // st_name (4 bytes), st_info, st_other, st_shndx (2 bytes): one word.
                let Some(head) = mem.u64_at(sym) else {
                    continue;
                };
                if head >> 48 != 0 {
                    continue; // defined here (st_shndx is not SHN_UNDEF)
                }
                let Some(len) = self.name(mem, (head & 0xffff_ffff) as usize, &mut name) else {
                    continue;
                };
                if len == 0 {
                    continue;
                }
                f(&name[..len], base.wrapping_add(offset as usize));
            }
        }
    }

    /// The string at `offset` in the string table, into `out`; None if longer than `out`.
    fn name(&self, mem: &impl Memory, offset: usize, out: &mut [u8; MAX_NAME]) -> Option<usize> {
        if self.strsz != 0 && offset >= self.strsz {
            return None;
        }
        for (i, b) in out.iter_mut().enumerate() {
            let c = mem.u8_at(self.strtab.checked_add(offset + i)?)?;
            if c == 0 {
                return Some(i);
            }
            *b = c;
        }
        None
    }
}

/// What a GOT slot holding `value` means for an object with these segments: None when it is
/// not bound yet (0, or a lazy slot that still points into the object's own PLT), else the
/// function it is bound to.
pub fn bound(value: usize, own: &[(usize, usize)]) -> Option<usize> {
    if value == 0 || own.iter().any(|&(s, e)| value >= s && value < e) {
        None
    } else {
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up image: bytes at `base`.
    struct Image {
        base: usize,
        bytes: Vec<u8>,
    }

    impl Memory for Image {
        fn u64_at(&self, addr: usize) -> Option<u64> {
            let o = addr.checked_sub(self.base)?;
            let b = self.bytes.get(o..o + 8)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        }
        fn u8_at(&self, addr: usize) -> Option<u8> {
            self.bytes.get(addr.checked_sub(self.base)?).copied()
        }
    }

    impl Image {
        fn put(&mut self, at: usize, v: u64) {
            self.bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// An object at `base` importing hipMalloc (JUMP_SLOT, slot at 0x800), hipFree
    /// (GLOB_DAT, slot 0x808), defining nw_host (a JUMP_SLOT against a defined symbol, slot
    /// 0x810), and a RELATIVE relocation. `relocated`: the dynamic section holds addresses
    /// (as glibc leaves a writable one), else offsets (as in the file).
    fn image(base: usize, relocated: bool) -> Image {
        let mut m = Image {
            base,
            bytes: vec![0; 0x1000],
        };
        let strtab = b"\0hipMalloc\0hipFree\0nw_host\0";
        m.bytes[0x100..0x100 + strtab.len()].copy_from_slice(strtab);
        // Symbols at 0x200: [0] null, [1] hipMalloc, [2] hipFree (undefined), [3] nw_host
        // (defined: st_shndx 12).
        for (i, (name, shndx)) in [(1u64, 0u64), (11, 0), (19, 12)].iter().enumerate() {
            m.put(
                0x200 + (i + 1) * SYM_SIZE,
                name | (0x12 << 32) | (shndx << 48),
            );
        }
        let rel = |m: &mut Image, at: usize, off: u64, sym: u64, kind: u64| {
            m.put(at, off);
            m.put(at + 8, (sym << 32) | kind);
        };
        // DT_JMPREL at 0x300: hipMalloc, nw_host; DT_RELA at 0x380: hipFree, a RELATIVE.
        rel(&mut m, 0x300, 0x800, 1, R_X86_64_JUMP_SLOT);
        rel(&mut m, 0x318, 0x810, 3, R_X86_64_JUMP_SLOT);
        rel(&mut m, 0x380, 0x808, 2, R_X86_64_GLOB_DAT);
        rel(&mut m, 0x398, 0x820, 0, 8);
        let a = |off: u64| if relocated { base as u64 + off } else { off };
        let dynamic = [
            (DT_STRTAB, a(0x100)),
            (DT_SYMTAB, a(0x200)),
            (DT_STRSZ, strtab.len() as u64),
            (DT_SYMENT, 24),
            (DT_JMPREL, a(0x300)),
            (DT_PLTRELSZ, 48),
            (DT_PLTREL, DT_RELA),
            (DT_RELA, a(0x380)),
            (DT_RELASZ, 48),
            (DT_RELAENT, 24),
            (DT_NULL, 0),
        ];
        for (i, (tag, val)) in dynamic.iter().enumerate() {
            m.put(0xc00 + i * 16, *tag);
            m.put(0xc00 + i * 16 + 8, *val);
        }
        m
    }

    fn imports(m: &Image) -> Vec<(String, usize)> {
        let segs = [(m.base, m.base + 0x1000)];
        let d = Dynamic::read(m, m.base, m.base + 0xc00, &segs).expect("dynamic");
        let mut out = Vec::new();
        d.each_import(m, m.base, |n, slot| {
            out.push((String::from_utf8_lossy(n).into_owned(), slot - m.base))
        });
        out
    }

    #[test]
    fn imports_are_read_with_their_slots_whether_or_not_the_loader_relocated_the_section() {
        for relocated in [true, false] {
            let m = image(0x7f00_0000_0000, relocated);
            assert_eq!(
                imports(&m),
                [
                    ("hipMalloc".to_string(), 0x800),
                    ("hipFree".to_string(), 0x808)
                ],
                "relocated: {relocated}"
            );
        }
        // A non-PIE executable: base 0, addresses are offsets and addresses at once.
        let m = image(0, true);
        assert_eq!(imports(&m).len(), 2);
    }

    #[test]
    fn a_section_without_tables_or_with_foreign_entry_sizes_is_refused() {
        let mut m = image(0x10000, true);
        let segs = [(0x10000, 0x11000)];
        m.put(0xc00 + 3 * 16 + 8, 16); // DT_SYMENT 16
        assert_eq!(Dynamic::read(&m, 0x10000, 0x10c00, &segs), None);
        let mut m = image(0x10000, true);
        m.put(0xc00, DT_NULL); // no DT_STRTAB: the section ends at once
        assert_eq!(Dynamic::read(&m, 0x10000, 0x10c00, &segs), None);
        // Unreadable memory: nothing, no panic.
        assert_eq!(Dynamic::read(&m, 0x10000, 0x90000, &segs), None);
    }

    #[test]
    fn a_truncated_table_stops_the_walk() {
        let mut m = image(0x10000, true);
        m.put(0xc00 + 8 * 16 + 8, 24 * 1000); // DT_RELASZ past the image
        assert_eq!(imports(&m).len(), 2);
    }

    #[test]
    fn slots_not_bound_yet_are_told_apart() {
        let own = [(0x1000, 0x3000)];
        assert_eq!(bound(0, &own), None);
        assert_eq!(bound(0x2016, &own), None, "a lazy slot points into the PLT");
        assert_eq!(bound(0x7f00_0000_1234, &own), Some(0x7f00_0000_1234));
    }
}
