//! Which code object of a fat binary the runtime loads on a device, read with positioned
//! reads: for an offload bundle (plain or compressed) at an offset of a file, the one entry
//! the runtime picks for the device (its own processor's code before a generic target's),
//! and only that entry's bytes (a compressed bundle inflated only up to the entry's end);
//! a bare code object (a Tensile `.hsaco`) whole. Used by the doctor's gfx101x scan and by
//! the shim's scan of a faulting kernel's library. Pure over a [`ReadAt`]; every size
//! bounded by the caller's `max_object`.

use crate::code_objects::{self as co, Device, EntryKind, Inflated, Partial, ReadAt, TargetId};
use crate::gfx::Gfx;

/// What reading one bundle (or Tensile file) gave.
pub enum Got {
    /// The object the runtime would load: its bytes, its target as the bundle names it
    /// (empty for a bare ELF), the bundle entry's whole ID (empty for a bare ELF), whether
    /// it came out of a compressed bundle.
    Object {
        bytes: Vec<u8>,
        target: String,
        id: String,
        compressed: bool,
    },
    /// No entry the runtime would load for this ISA.
    Nothing,
    /// Over the object bound (its size, or the inflated bytes it needs).
    TooBig(u64),
    Bad(String),
}

fn read_range<R: ReadAt + ?Sized>(f: &R, at: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match f.read_at(at + done as u64, &mut v[done..]) {
            Ok(0) => return Err("the file ends before the code object does".into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(v)
}

/// A bundle's entry table; `read(n)` gives up to `n` bytes from the bundle's start.
fn entry_table(
    read: &mut dyn FnMut(usize) -> Result<Vec<u8>, String>,
) -> Result<Vec<co::Entry>, String> {
    let mut want = 4096;
    loop {
        let buf = read(want)?;
        match co::parse_bundle_header(&buf) {
            Ok(Partial::Complete(e)) => return Ok(e),
            Ok(Partial::NeedBytes(n)) if n > buf.len() && buf.len() == want => {
                want = n.max(want * 2);
            }
            Ok(Partial::NeedBytes(_)) => return Err("offload bundle entry table truncated".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The entry the runtime loads on a device of `rt`: its own processor's code before a
/// generic target's.
pub fn choose(entries: &[co::Entry], dev: &Device, rt: Gfx) -> Option<(co::Entry, TargetId)> {
    let mut best: Option<(co::Entry, TargetId)> = None;
    for e in entries {
        if let EntryKind::Device(t) = co::entry_kind(&e.id) {
            if !t.runs_on(dev) {
                continue;
            }
            let exact = t.gfx() == Some(rt);
            match &best {
                Some((_, b)) if !exact || b.gfx() == Some(rt) => {}
                _ => best = Some((e.clone(), t)),
            }
        }
    }
    best
}

/// The object the runtime would load on `dev` (running `rt` code) from the bundle (or
/// code-object file) at `at` of `f`, which ends by `end`; none larger than `max_object`
/// (a compressed bundle inflated at most 4 times that).
pub fn read_object<R: ReadAt + ?Sized>(
    f: &R,
    at: u64,
    end: u64,
    dev: &Device,
    rt: Gfx,
    max_object: u64,
) -> Got {
    let avail = end.saturating_sub(at);
    let head = match read_range(f, at, avail.min(4096) as usize) {
        Ok(h) => h,
        Err(e) => return Got::Bad(e),
    };
    if head.starts_with(b"\x7fELF") {
        // A bare code object (a Tensile `.hsaco`): its header says what it is for.
        if avail > max_object {
            return Got::TooBig(avail);
        }
        return match read_range(f, at, avail as usize) {
            Ok(bytes) => Got::Object {
                bytes,
                target: String::new(),
                id: String::new(),
                compressed: false,
            },
            Err(e) => Got::Bad(e),
        };
    }
    if head.starts_with(co::BUNDLE_MAGIC) {
        let entries = match entry_table(&mut |want| read_range(f, at, want.min(avail as usize))) {
            Ok(e) => e,
            Err(e) => return Got::Bad(e),
        };
        let Some((e, t)) = choose(&entries, dev, rt) else {
            return Got::Nothing;
        };
        if e.size > max_object {
            return Got::TooBig(e.size);
        }
        if e.offset.checked_add(e.size).is_none_or(|stop| stop > avail) {
            return Got::Bad(format!("bundle entry {} ends past the fat binary", e.id));
        }
        return match read_range(f, at + e.offset, e.size as usize) {
            Ok(bytes) => Got::Object {
                bytes,
                target: t.to_string(),
                id: e.id.clone(),
                compressed: false,
            },
            Err(e) => Got::Bad(e),
        };
    }
    if head.starts_with(co::COMPRESSED_MAGIC) {
        return read_compressed(f, at, avail, &head, dev, rt, max_object);
    }
    Got::Bad("no offload bundle where the fat binary said one starts".into())
}

fn read_compressed<R: ReadAt + ?Sized>(
    f: &R,
    at: u64,
    avail: u64,
    head: &[u8],
    dev: &Device,
    rt: Gfx,
    max_object: u64,
) -> Got {
    let h = match co::parse_compressed_header(head) {
        Ok(Partial::Complete(h)) => h,
        Ok(Partial::NeedBytes(_)) => return Got::Bad("compressed bundle header truncated".into()),
        Err(e) => return Got::Bad(e.to_string()),
    };
    // Version 1 does not say its size: up to the next bundle.
    let extent = h.total_size.unwrap_or(avail).min(avail);
    if extent > max_object {
        return Got::TooBig(extent);
    }
    let whole = match read_range(f, at, extent as usize) {
        Ok(w) => w,
        Err(e) => return Got::Bad(e),
    };
    let stream = &whole[h.header_len.min(whole.len())..];
    let inflate = |want: usize| -> Result<Vec<u8>, String> {
        match co::decompress_prefix(h.method, stream, want) {
            Ok(Inflated::Bytes(v)) => Ok(v),
            Ok(Inflated::NeedInput) => Err("compressed bundle truncated".into()),
            Err(e) => Err(e.to_string()),
        }
    };
    let entries = match entry_table(&mut |want| inflate(want)) {
        Ok(e) => e,
        Err(e) => return Got::Bad(e),
    };
    let Some((e, t)) = choose(&entries, dev, rt) else {
        return Got::Nothing;
    };
    let Some(stop) = e.offset.checked_add(e.size) else {
        return Got::Bad("bundle entry size overflows".into());
    };
    if e.size > max_object || stop > max_object.saturating_mul(4) {
        return Got::TooBig(stop);
    }
    match inflate(stop as usize) {
        Ok(plain) if plain.len() as u64 >= stop => Got::Object {
            bytes: plain[e.offset as usize..stop as usize].to_vec(),
            target: t.to_string(),
            id: e.id.clone(),
            compressed: true,
        },
        Ok(_) => Got::Bad(format!(
            "bundle entry {} ends past the inflated bundle",
            e.id
        )),
        Err(e) => Got::Bad(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_picks_its_own_processor_before_a_generic_target() {
        let e = |id: &str| co::Entry {
            offset: 0,
            size: 0,
            id: id.to_string(),
        };
        let rt = Gfx::parse("gfx1030").unwrap();
        let dev = Device::from_gfx(rt);
        let entries = [
            e("host-x86_64-unknown-linux-gnu-"),
            e("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic"),
            e("hipv4-amdgcn-amd-amdhsa--gfx1030"),
            e("hipv4-amdgcn-amd-amdhsa--gfx1010"),
        ];
        assert_eq!(choose(&entries, &dev, rt).unwrap().1.to_string(), "gfx1030");
        assert_eq!(
            choose(&entries[..2], &dev, rt).unwrap().1.to_string(),
            "gfx10-3-generic"
        );
        assert!(choose(&entries[3..], &dev, rt).is_none());
    }
}
