//! The kernel objects the process loaded, and their names: what turns the kernel object of
//! a dispatch packet (`queues`) into a kernel's name at fault time. It owns one fixed,
//! append-only table of ([`ENTRIES`]) kernel objects with their names, copied into a fixed
//! arena of [`ARENA`] bytes (names cut at `launches::NAME_MAX`).
//!
//! Filled when the runtime freezes an executable (`hsa_executable_freeze`, observed: every
//! code object HIP loads, a registered fat binary's at the device's first use, a module's
//! at `hipModuleLoad*`, ends in one): at the call's entry its code objects are loaded and
//! its symbols final, and the copy's own `hsa_executable_iterate_symbols` and
//! `hsa_executable_symbol_get_info` list its kernels (the runtime's thread, inside the
//! runtime's loading and under its locks; ROCr's executable lock is not held yet, the
//! freeze has not begun). Read at fault time only ([`name_of`]): lock-free, newest first, so
//! an address a later executable reuses names the later kernel. Past the table or the arena,
//! kernels are not kept and one line says so; the fault block then says "kernel not seen
//! loaded". Nothing here runs on a launch.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::launches::NAME_MAX;

/// Kernels kept.
pub(crate) const ENTRIES: usize = 1 << 16;
/// Bytes of names kept.
pub(crate) const ARENA: usize = 4 << 20;

const HSA_STATUS_SUCCESS: u32 = 0;
const HSA_EXECUTABLE_SYMBOL_INFO_TYPE: u32 = 0;
const HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH: u32 = 1;
const HSA_EXECUTABLE_SYMBOL_INFO_NAME: u32 = 2;
const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;
const HSA_SYMBOL_KIND_KERNEL: u32 = 1;

type SymbolCallback = unsafe extern "C" fn(u64, u64, *mut c_void) -> u32;
type IterateFn = unsafe extern "C" fn(u64, SymbolCallback, *mut c_void) -> u32;
type SymbolInfoFn = unsafe extern "C" fn(u64, u32, *mut c_void) -> u32;

struct Entry {
    /// 0 until the entry is whole.
    kernel_object: AtomicU64,
    /// Offset and length of the name in the arena.
    at: AtomicUsize,
    len: AtomicUsize,
    /// Its origin + 1 ([`ORIGINS`]); 0: not loaded by a hooked module load.
    origin: AtomicU32,
}

static TABLE: [Entry; ENTRIES] = [const {
    Entry {
        kernel_object: AtomicU64::new(0),
        at: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        origin: AtomicU32::new(0),
    }
}; ENTRIES];

/// Where a hooked module load's code came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    /// The file (`hipModuleLoad`), or the library that loaded an image from memory.
    pub(crate) path: String,
    pub(crate) in_memory: bool,
}

impl Origin {
    /// In words, for the block.
    pub(crate) fn words(&self) -> String {
        if self.in_memory {
            format!("a code object in memory loaded by {}", self.path)
        } else {
            self.path.clone()
        }
    }
}

/// The origins seen, each once; [`ORIGINS_MAX`] at most. Written by module loads (not a hot
/// path), read at fault time without waiting (`try_lock`).
static ORIGINS: std::sync::Mutex<Vec<Origin>> = std::sync::Mutex::new(Vec::new());
const ORIGINS_MAX: usize = 4096;

/// Before a hooked module load is forwarded on this thread: the executables it freezes
/// belong to `origin`. Returns what to hand [`loaded`] after the call.
pub(crate) fn loading(origin: Origin) -> u32 {
    let index = ORIGINS.lock().ok().and_then(|mut all| {
        if let Some(i) = all.iter().position(|o| *o == origin) {
            return Some(i);
        }
        (all.len() < ORIGINS_MAX).then(|| {
            all.push(origin);
            all.len() - 1
        })
    });
    let id = index.map_or(0, |i| i as u32 + 1);
    crate::thread::with(|t| t.set_loading(id))
}

/// After the load returned: the thread's origin as it was before.
pub(crate) fn loaded(before: u32) {
    crate::thread::with(|t| t.set_loading(before));
}
static USED: AtomicUsize = AtomicUsize::new(0);

/// The names, written once each (by the thread that claimed the bytes) before the entry
/// that points at them is published.
static ARENA_BYTES: [AtomicU64; ARENA / 8] = [const { AtomicU64::new(0) }; ARENA / 8];
static ARENA_USED: AtomicUsize = AtomicUsize::new(0);
static FULL_TOLD: AtomicBool = AtomicBool::new(false);

/// What an iteration needs: the copy's `hsa_executable_symbol_get_info`, and the origin of
/// what is being loaded.
struct Walk {
    symbol_info: SymbolInfoFn,
    origin: u32,
}

/// At the entry of `hsa_executable_freeze(executable, ..)` made by runtime copy `c`: keeps
/// the executable's kernels. Any failure keeps less; the call goes on unchanged.
pub(crate) fn freezing(c: &crate::copies::Copy, executable: u64) {
    let (iterate, info) = (c.rocr.iterate_symbols, c.rocr.symbol_info);
    if iterate == 0 || info == 0 || executable == 0 {
        return;
    }
    let _no_cancel = crate::cancel::NoCancel::new();
    // SAFETY: the copy's own hsa_executable_iterate_symbols and hsa_executable_symbol_get_info
    // (found on its handle), of these signatures (hsa.h).
    let (iterate, symbol_info) = unsafe {
        (
            std::mem::transmute::<usize, IterateFn>(iterate),
            std::mem::transmute::<usize, SymbolInfoFn>(info),
        )
    };
    let mut walk = Walk {
        symbol_info,
        origin: crate::thread::with(|t| t.loading()),
    };
    // SAFETY: a valid executable (the one the runtime is about to freeze), a callback of the
    // signature ROCr calls, and data that outlives the call.
    unsafe { iterate(executable, on_symbol, (&raw mut walk).cast()) };
}

/// ROCr's callback for each symbol: keeps a kernel's object and name. Always SUCCESS (go
/// on); never unwinds.
unsafe extern "C" fn on_symbol(_executable: u64, symbol: u64, data: *mut c_void) -> u32 {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: `data` is the `Walk` `freezing` passed, live for the iteration.
        let walk = unsafe { &*data.cast::<Walk>() };
        let info = |attribute: u32, out: *mut c_void| {
            // SAFETY: hsa_executable_symbol_get_info on a symbol ROCr handed this callback;
            // `out` is as large as the attribute's value (checked by each caller below).
            unsafe { (walk.symbol_info)(symbol, attribute, out) == HSA_STATUS_SUCCESS }
        };
        let mut kind = 0u32;
        if !info(HSA_EXECUTABLE_SYMBOL_INFO_TYPE, (&raw mut kind).cast()) {
            return;
        }
        if kind != HSA_SYMBOL_KIND_KERNEL {
            return;
        }
        let mut object = 0u64;
        let mut len = 0u32;
        if !info(
            HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
            (&raw mut object).cast(),
        ) || !info(
            HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
            (&raw mut len).cast(),
        ) || object == 0
        {
            return;
        }
        // The name is written whole (not NUL-terminated) into a buffer of its length.
        let mut name = vec![0u8; len as usize];
        if !info(HSA_EXECUTABLE_SYMBOL_INFO_NAME, name.as_mut_ptr().cast()) {
            return;
        }
        // ROCr names a kernel symbol by its descriptor's ELF symbol (`NAME.kd`) in some
        // releases (5.x) and by the kernel's name in others: kept as the kernel's name.
        let name = name.strip_suffix(b".kd").unwrap_or(&name);
        keep(object, name, walk.origin);
    });
    HSA_STATUS_SUCCESS
}

/// Keeps `name` (and its origin) for `kernel_object`.
fn keep(kernel_object: u64, name: &[u8], origin: u32) {
    let name = &name[..name.len().min(NAME_MAX)];
    let words = name.len().div_ceil(8);
    let at = ARENA_USED.fetch_add(words, Ordering::Relaxed);
    let i = USED.fetch_add(1, Ordering::Relaxed);
    let (Some(slots), Some(e)) = (ARENA_BYTES.get(at..at + words), TABLE.get(i)) else {
        if !FULL_TOLD.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "more than {ENTRIES} GPU kernels (or {ARENA} bytes of their names) loaded: \
                 later ones are not kept, and a fault while one runs names it as not seen loaded"
            );
        }
        return;
    };
    for (w, chunk) in slots.iter().zip(name.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
    e.at.store(at, Ordering::Relaxed);
    e.len.store(name.len(), Ordering::Relaxed);
    e.origin.store(origin, Ordering::Relaxed);
    e.kernel_object.store(kernel_object, Ordering::Release);
}

/// The name kept for `kernel_object` (the newest first), with its origin when a hooked module
/// load loaded it and the origins can be read without waiting. At fault time only.
pub(crate) fn name_of(kernel_object: u64) -> Option<(String, Option<Origin>)> {
    if kernel_object == 0 {
        return None;
    }
    let used = USED.load(Ordering::Acquire).min(ENTRIES);
    let e = TABLE[..used]
        .iter()
        .rev()
        .find(|e| e.kernel_object.load(Ordering::Acquire) == kernel_object)?;
    let (at, len) = (e.at.load(Ordering::Relaxed), e.len.load(Ordering::Relaxed));
    let mut bytes: Vec<u8> = ARENA_BYTES
        .get(at..at + len.div_ceil(8))?
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .collect();
    bytes.truncate(len);
    let origin = match e.origin.load(Ordering::Relaxed) {
        0 => None,
        id => ORIGINS
            .try_lock()
            .ok()
            .and_then(|all| all.get(id as usize - 1).cloned()),
    };
    Some((String::from_utf8_lossy(&bytes).into_owned(), origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in hsa_executable_symbol_get_info over three symbols: 1 a kernel (named by
    /// its descriptor, as 5.x does), 2 a variable, 3 a kernel whose name is longer than
    /// NAME_MAX.
    unsafe extern "C" fn fake_info(symbol: u64, attribute: u32, out: *mut c_void) -> u32 {
        let name: Vec<u8> = match symbol {
            1 => b"_Z4spinPi.kd".to_vec(),
            3 => vec![b'x'; NAME_MAX + 40],
            _ => b"var".to_vec(),
        };
        // SAFETY: `out` as large as the attribute's value, per the caller.
        unsafe {
            match attribute {
                HSA_EXECUTABLE_SYMBOL_INFO_TYPE => out.cast::<u32>().write(if symbol == 2 {
                    0
                } else {
                    HSA_SYMBOL_KIND_KERNEL
                }),
                HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT => {
                    out.cast::<u64>().write(0x7000_0000 + symbol * 0x100)
                }
                HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH => {
                    out.cast::<u32>().write(name.len() as u32)
                }
                HSA_EXECUTABLE_SYMBOL_INFO_NAME => {
                    std::ptr::copy_nonoverlapping(name.as_ptr(), out.cast::<u8>(), name.len())
                }
                _ => return 1,
            }
        }
        HSA_STATUS_SUCCESS
    }

    #[test]
    fn kernels_are_kept_by_object_and_named_newest_first() {
        let origin = Origin {
            path: "/tmp/k.co".into(),
            in_memory: false,
        };
        let before = loading(origin.clone());
        let mut walk = Walk {
            symbol_info: fake_info,
            origin: crate::thread::with(|t| t.loading()),
        };
        loaded(before);
        assert_eq!(crate::thread::with(|t| t.loading()), before);
        for symbol in 1..=3 {
            // SAFETY: `walk` outlives the call.
            let rc = unsafe { on_symbol(9, symbol, (&raw mut walk).cast()) };
            assert_eq!(rc, HSA_STATUS_SUCCESS);
        }
        assert_eq!(
            name_of(0x7000_0100),
            Some(("_Z4spinPi".to_string(), Some(origin)))
        );
        assert_eq!(name_of(0x7000_0200), None, "a variable is not a kernel");
        assert_eq!(name_of(0x7000_0300).map(|n| n.0.len()), Some(NAME_MAX));
        assert_eq!(name_of(0), None);
        keep(0x7000_0100, b"later", 0);
        assert_eq!(name_of(0x7000_0100), Some(("later".to_string(), None)));
    }
}
